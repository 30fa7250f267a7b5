#!/usr/bin/env python3
"""Shows with PyMongo that the proxy authenticates as mongod does.

Env: PROXY_URI, a proxy with auth on (mongodb://127.0.0.1:PORT/?directConnection=true), whose
users are admin.root:rootpw (SCRAM-SHA-1 and -256), admin.sha1only:pw1 (SCRAM-SHA-1 only),
admin.sha256only:pw256 (SCRAM-SHA-256 only) and $external.ldap:secret (PLAIN).
Exits non-zero on any mismatch.
"""

import os
import sys

import pymongo
from pymongo.errors import OperationFailure, PyMongoError

URI = os.environ["PROXY_URI"]
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def client(**kw):
    kw.setdefault("serverSelectionTimeoutMS", 5000)
    return pymongo.MongoClient(URI, **kw)


def who(c):
    """The users connectionStatus reports, after authenticating as the client does."""
    status = c.admin.command("connectionStatus")
    return [(u["user"], u["db"]) for u in status["authInfo"]["authenticatedUsers"]]


def error_code(fn):
    try:
        fn()
    except OperationFailure as e:
        return e.code
    except PyMongoError as e:
        return "%s: %s" % (type(e).__name__, e)
    return None


def stats(c):
    return c.admin.command("proxyStats")


def reset(c):
    c.admin.command("proxyResetStats")


def authenticates(what, expect_user, **kw):
    c = client(**kw)
    try:
        users = who(c)
        check(users == [expect_user], "%s: authenticated as %s (got %s)" % (what, expect_user, users))
        # A forwarded command, which an unauthenticated connection may not run.
        c.authtest.c.find_one({})
        check(True, "%s: find through the proxy" % what)
    except PyMongoError as e:
        check(False, "%s: %s: %s" % (what, type(e).__name__, e))
    finally:
        c.close()


def refused(what, **kw):
    c = client(**kw)
    try:
        code = error_code(lambda: who(c))
        check(code == 18, "%s: AuthenticationFailed (code 18), got %r" % (what, code))
    finally:
        c.close()


def main():
    probe = client()  # no credentials: stats and the unauthenticated checks

    # An unauthenticated connection: the handshake and ping only.
    probe.admin.command("ping")
    code = error_code(lambda: probe.authtest.c.find_one({}))
    check(code == 13, "unauthenticated find: Unauthorized (code 13), got %r" % code)

    root = dict(username="root", password="rootpw")
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-1"):
        authenticates(mech + " given", ("root", "admin"), authMechanism=mech, **root)
        refused(mech + " wrong password", username="root", password="nope", authMechanism=mech)
        refused(mech + " unknown user", username="ghost", password="rootpw", authMechanism=mech)
    refused(
        "SCRAM-SHA-256 for a SCRAM-SHA-1-only user",
        username="sha1only",
        password="pw1",
        authMechanism="SCRAM-SHA-256",
    )

    # Negotiated: saslSupportedMechs picks SCRAM-SHA-256 for root, SCRAM-SHA-1 for sha1only.
    reset(probe)
    authenticates("negotiated, both mechanisms", ("root", "admin"), **root)
    s = stats(probe)
    cmds = s["commands"]
    check("saslStart" not in cmds, "speculative SCRAM-SHA-256: no separate saslStart (saw %s)" % cmds)
    check(cmds.get("saslContinue", 0) >= 1, "speculative SCRAM-SHA-256 finished with saslContinue")
    check(s["auth"]["speculativeSucceeded"] >= 1, "proxy counted a speculative authentication: %s" % s["auth"])

    reset(probe)
    authenticates("negotiated, SCRAM-SHA-1 only", ("sha1only", "admin"), username="sha1only", password="pw1")
    s = stats(probe)
    check(s["commands"].get("saslStart", 0) >= 1, "SCRAM-SHA-1 after negotiation took a saslStart")
    check(s["auth"]["speculativeSucceeded"] == 0, "no speculative success for sha1only: %s" % s["auth"])
    authenticates(
        "negotiated, SCRAM-SHA-256 only", ("sha256only", "admin"), username="sha256only", password="pw256"
    )
    refused("negotiated wrong password", username="root", password="nope")

    # Explicit SCRAM-SHA-1 also speculates in PyMongo: still no separate saslStart.
    reset(probe)
    authenticates("SCRAM-SHA-1 speculative", ("root", "admin"), authMechanism="SCRAM-SHA-1", **root)
    check("saslStart" not in stats(probe)["commands"], "speculative SCRAM-SHA-1: no separate saslStart")

    # PLAIN on $external.
    plain = dict(authMechanism="PLAIN", authSource="$external")
    authenticates("PLAIN", ("ldap", "$external"), username="ldap", password="secret", **plain)
    refused("PLAIN wrong password", username="ldap", password="nope", **plain)

    # createUser through the proxy, then authenticate as the new user.
    admin = client(**root)
    db = admin.get_database("authtest")
    for name in ("carol", "IX", "\u2168"):
        try:
            db.command("dropUser", name)
        except OperationFailure:
            pass
    db.command("createUser", "carol", pwd="carolpw", roles=[{"role": "readWrite", "db": "authtest"}])
    code = error_code(lambda: db.command("createUser", "carol", pwd="x", roles=[]))
    check(code == 51003, "createUser twice: 51003, got %r" % code)
    info = db.command("usersInfo", "carol")
    check(
        [u["_id"] for u in info["users"]] == ["authtest.carol"],
        "usersInfo lists the new user: %s" % info["users"],
    )
    new_user = dict(username="carol", password="carolpw", authSource="authtest")
    authenticates("created user, negotiated", ("carol", "authtest"), **new_user)
    authenticates("created user, SCRAM-SHA-1", ("carol", "authtest"), authMechanism="SCRAM-SHA-1", **new_user)
    refused("created user, wrong password", username="carol", password="x", authSource="authtest")

    # SASLprep (the auth spec's prose test 4): the client and the proxy both prepare passwords.
    db.command("createUser", "IX", pwd="IX", roles=[], mechanisms=["SCRAM-SHA-256"])
    db.command("createUser", "\u2168", pwd="\u2163", roles=[], mechanisms=["SCRAM-SHA-256"])
    for user, pwd in (("IX", "IX"), ("IX", "I\u00adX"), ("\u2168", "IV"), ("\u2168", "I\u00adV")):
        authenticates(
            "SASLprep %r/%r" % (user, pwd),
            (user, "authtest"),
            username=user,
            password=pwd,
            authSource="authtest",
            authMechanism="SCRAM-SHA-256",
        )

    db.command("dropUser", "carol")
    refused("dropped user", **new_user)

    # Fail points apply to the SASL conversation, matched by appName.
    admin.admin.command(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["saslContinue"], "errorCode": 18, "appName": "authFp"},
        }
    )
    refused("failCommand on saslContinue", appName="authFp", **root)
    authenticates("after the fail point", ("root", "admin"), appName="authFp", **root)
    admin.close()
    probe.close()

    if FAILURES:
        print("%d mismatches" % len(FAILURES))
        sys.exit(1)
    print("all auth checks passed")


if __name__ == "__main__":
    main()
