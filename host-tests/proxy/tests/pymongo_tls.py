#!/usr/bin/env python3
"""Shows with PyMongo (OpenSSL) that the proxy's TLS termination is real TLS.

Env: PROXY_URI (TLS proxy, mongodb://localhost:PORT/?tls=true&directConnection=true),
PROXY_MTLS_URI (the same, requiring a client certificate), PROXY_X509_URI (the same, client
certificate optional, auth on with the X.509 user CLIENT_SUBJECT on $external), CA_FILE,
UNTRUSTED_CA_FILE, CLIENT_FILE and STRANGER_FILE (client certificates and keys; the stranger's
subject has no user). Exits non-zero on any mismatch.
"""

import os
import sys
import time

import pymongo
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError, ServerSelectionTimeoutError

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def refused(uri, what, **kw):
    try:
        pymongo.MongoClient(uri, serverSelectionTimeoutMS=2000, **kw).admin.command("ping")
        check(False, what + " (it connected)")
    except ServerSelectionTimeoutError as e:
        text = str(e)
        check("CERTIFICATE_VERIFY_FAILED" in text, what + ": " + text[:160])


def x509(uri, ca, client_pem, stranger_pem):
    """MONGODB-X509: the proxy takes the client certificate's subject as the user."""
    subject = os.environ["CLIENT_SUBJECT"]
    probe = pymongo.MongoClient(uri, tlsCAFile=ca, serverSelectionTimeoutMS=5000)
    probe.admin.command("proxyResetStats")
    x = pymongo.MongoClient(uri, tlsCAFile=ca, tlsCertificateKeyFile=client_pem,
                            authMechanism="MONGODB-X509", serverSelectionTimeoutMS=5000)
    status = x.admin.command("connectionStatus")
    users = [(u["user"], u["db"]) for u in status["authInfo"]["authenticatedUsers"]]
    check(users == [(subject, "$external")], "MONGODB-X509 authenticates as %s (got %s)" % (subject, users))
    x.pymongo_tls.docs.find_one({})
    check(True, "MONGODB-X509: find through the proxy")
    x.close()
    stats = probe.admin.command("proxyStats")
    check(stats["auth"]["speculativeSucceeded"] >= 1, "MONGODB-X509 speculative in the hello: %s" % stats["auth"])
    check("authenticate" not in stats["commands"], "no separate authenticate (saw %s)" % stats["commands"])

    named = pymongo.MongoClient(uri, tlsCAFile=ca, tlsCertificateKeyFile=client_pem, username=subject,
                                authMechanism="MONGODB-X509", serverSelectionTimeoutMS=5000)
    check(named.admin.command("ping").get("ok") == 1.0, "MONGODB-X509 with the subject as username")
    named.pymongo_tls.docs.find_one({})
    named.close()

    for what, kw in (("a subject without a user", dict(tlsCertificateKeyFile=stranger_pem)),
                     ("no client certificate", {}),
                     ("a username that is not the subject",
                      dict(tlsCertificateKeyFile=client_pem, username="CN=someone"))):
        c = pymongo.MongoClient(uri, tlsCAFile=ca, authMechanism="MONGODB-X509",
                                serverSelectionTimeoutMS=5000, **kw)
        try:
            c.pymongo_tls.docs.find_one({})
            check(False, "MONGODB-X509 refuses %s (it authenticated)" % what)
        except OperationFailure as e:
            check(e.code == 18, "MONGODB-X509 refuses %s: code %s" % (what, e.code))
        except PyMongoError as e:
            check(False, "MONGODB-X509 refuses %s: %s: %s" % (what, type(e).__name__, e))
        finally:
            c.close()
    unauthenticated = probe.pymongo_tls.docs
    try:
        unauthenticated.find_one({})
        check(False, "the X.509 proxy refuses an unauthenticated find (it answered)")
    except OperationFailure as e:
        check(e.code == 13, "the X.509 proxy refuses an unauthenticated find: code %s" % e.code)
    probe.close()


def main():
    uri, mtls = os.environ["PROXY_URI"], os.environ["PROXY_MTLS_URI"]
    ca, untrusted, client_pem = (os.environ[k] for k in ("CA_FILE", "UNTRUSTED_CA_FILE", "CLIENT_FILE"))

    c = pymongo.MongoClient(uri, tlsCAFile=ca, serverSelectionTimeoutMS=5000)
    check(c.admin.command("ping").get("ok") == 1.0, "ping over TLS with tlsCAFile")
    coll = c.pymongo_tls.docs
    coll.drop()
    coll.insert_many([{"n": i, "pad": "x" * 200} for i in range(300)])
    check(coll.count_documents({}) == 300, "300 documents written and counted over TLS")
    check(len(list(coll.find())) == 300, "300 documents read back over TLS")

    # Fail points over TLS: an error code, a closed connection, a blocked command.
    c.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["find"], "errorCode": 2}})
    try:
        coll.find_one()
        check(False, "failCommand errorCode over TLS")
    except OperationFailure as e:
        check(e.code == 2, "failCommand errorCode over TLS")
    c.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["count"], "closeConnection": True}})
    try:
        c.pymongo_tls.command("count", "docs")
        check(False, "failCommand closeConnection over TLS")
    except AutoReconnect:
        check(True, "failCommand closeConnection over TLS")
    c.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": 300}})
    started = time.monotonic()
    c.admin.command("ping")
    check(time.monotonic() - started >= 0.29, "failCommand blockConnection over TLS")
    c.close()

    refused(uri, "refused without the CA")
    refused(uri, "refused with an unrelated CA", tlsCAFile=untrusted)

    m = pymongo.MongoClient(mtls, tlsCAFile=ca, tlsCertificateKeyFile=client_pem,
                            serverSelectionTimeoutMS=5000)
    check(m.admin.command("ping").get("ok") == 1.0, "mutual TLS with tlsCertificateKeyFile")
    m.close()
    try:
        pymongo.MongoClient(mtls, tlsCAFile=ca, serverSelectionTimeoutMS=2000).admin.command("ping")
        check(False, "mutual TLS refuses a client without a certificate (it connected)")
    except PyMongoError as e:
        check(True, "mutual TLS refuses a client without a certificate: " + str(e)[:120])

    x509(os.environ["PROXY_X509_URI"], ca, client_pem, os.environ["STRANGER_FILE"])

    print(f"{len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
