#!/usr/bin/env python3
"""Shows with PyMongo that the failpoint proxy's fail points behave as mongod's.

Env: PROXY_URI (a standalone proxy, mongodb://127.0.0.1:PORT/?directConnection=true) and,
optionally, PROXY_RS_URI (a single-node replica-set proxy in front of the same backend).
Exits non-zero on any mismatch.
"""

import os
import sys
import threading
import time

import pymongo
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError, WriteConcernError

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def client(uri, **kw):
    kw.setdefault("serverSelectionTimeoutMS", 5000)
    # The proxy streams hellos as mongod 4.4+ does: after a state-change error (91 below)
    # marks the server Unknown, PyMongo learns it is back from the next streamed reply, at
    # most heartbeatFrequencyMS later (a "check now" is ignored while a hello is awaited).
    kw.setdefault("heartbeatFrequencyMS", 500)
    c = pymongo.MongoClient(uri, **kw)
    c.admin.command("ping")  # connect before any fail point is set
    return c


def fail_point(c, mode, data):
    c.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})


def off(c):
    c.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


def expect_error(what, fn):
    """Runs fn, answers the exception it raised (None, and a failure, if it did not)."""
    try:
        fn()
    except PyMongoError as e:
        return e
    check(False, what + ": no error raised")
    return None


def code_of(e):
    code = getattr(e, "code", None)
    if code is None and isinstance(getattr(e, "details", None), dict):
        code = e.details.get("code")
    return code


def standalone(uri):
    admin = client(uri)
    coll = admin.fp_check.c
    coll.drop()
    coll.insert_one({"x": 1})

    # blockConnection 200 ms against timeoutMS=100: a timeout error (maxTimeMS-interrupted
    # block on the server side, or the client's own socket timeout).
    csot = client(uri, timeoutMS=100)
    fail_point(admin, {"times": 1},
               {"failCommands": ["find"], "blockConnection": True, "blockTimeMS": 200})
    start = time.monotonic()
    e = expect_error("blockConnection + timeoutMS", lambda: csot.fp_check.c.find_one())
    took = time.monotonic() - start
    if e is not None:
        check(getattr(e, "timeout", False) is True,
              f"blockConnection + timeoutMS=100 raises a timeout error ({type(e).__name__}: {e})")
        check(took < 1.0, f"the timeout came after {took * 1000:.0f} ms (< 1000)")
    off(admin)
    check(csot.fp_check.c.find_one() is not None, "the CSOT client works once the fail point is off")

    # The same block without a client timeout only delays the reply.
    fail_point(admin, {"times": 1},
               {"failCommands": ["find"], "blockConnection": True, "blockTimeMS": 200})
    start = time.monotonic()
    check(coll.find_one() is not None, "a blocked find still succeeds")
    check(time.monotonic() - start >= 0.19, "and took at least blockTimeMS")

    # errorCode 91 on find (retryReads off, or the retry would hide it).
    plain = client(uri, retryReads=False, retryWrites=False)
    fail_point(admin, {"times": 1}, {"failCommands": ["find"], "errorCode": 91})
    e = expect_error("errorCode 91", lambda: plain.fp_check.c.find_one())
    if e is not None:
        check(code_of(e) == 91, f"errorCode 91 raises code 91 ({type(e).__name__}: {e})")
    off(admin)

    # errorCode 2 is not retryable: OperationFailure with code and codeName.
    fail_point(admin, {"times": 1}, {"failCommands": ["find"], "errorCode": 2})
    e = expect_error("errorCode 2", lambda: coll.find_one())
    if e is not None:
        check(isinstance(e, OperationFailure) and e.code == 2
              and e.details.get("codeName") == "BadValue", f"errorCode 2 is BadValue ({e!r})")

    # closeConnection: a network error.
    fail_point(admin, {"times": 1}, {"failCommands": ["find"], "closeConnection": True})
    e = expect_error("closeConnection", lambda: plain.fp_check.c.find_one())
    if e is not None:
        check(isinstance(e, AutoReconnect), f"closeConnection raises AutoReconnect ({type(e).__name__})")
    check(plain.fp_check.c.find_one() is not None, "the client recovers after closeConnection")

    # A retryable read survives one closeConnection.
    fail_point(admin, {"times": 1}, {"failCommands": ["find"], "closeConnection": True})
    check(coll.find_one() is not None, "retryReads retries after closeConnection")

    # writeConcernError on a write: the write happens, the error is reported.
    fail_point(admin, {"times": 1},
               {"failCommands": ["insert"], "writeConcernError": {"code": 64, "errmsg": "waiting"}})
    e = expect_error("writeConcernError", lambda: plain.fp_check.c.insert_one({"x": 2}))
    if e is not None:
        check(isinstance(e, WriteConcernError) and e.code == 64, f"writeConcernError raises code 64 ({e!r})")
    check(coll.count_documents({"x": 2}) == 1, "the write behind the writeConcernError happened")

    # ... and on a write command that fails: mongod waits for write concern on that path too.
    fail_point(admin, {"times": 1},
               {"failCommands": ["findAndModify"], "writeConcernError": {"code": 64, "errmsg": "waiting"}})
    e = expect_error("failed command + writeConcernError",
                     lambda: plain.fp_check.command({"findAndModify": "c", "query": {}}))
    if e is not None:
        wce = (getattr(e, "details", None) or {}).get("writeConcernError") or {}
        check(wce.get("code") == 64, f"a failed command carries the writeConcernError too ({e!r})")

    # An unknown fail point name: FailPointSetFailed (266), as mongod.
    e = expect_error("unknown fail point", lambda: admin.admin.command(
        {"configureFailPoint": "noSuchFailPoint", "mode": "alwaysOn"}))
    if e is not None:
        check(code_of(e) == 266, f"an unknown fail point is FailPointSetFailed ({e!r})")

    # waitForFailPoint: returns once the point has fired timesEntered times in all.
    count = admin.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                                 "data": {"failCommands": ["find"], "errorCode": 2}})["count"]
    fired = []

    def later():
        time.sleep(0.2)
        try:
            plain.fp_check.c.find_one()
        except OperationFailure as err:
            fired.append(err.code)
    t = threading.Thread(target=later)
    start = time.monotonic()
    t.start()
    admin.admin.command({"waitForFailPoint": "failCommand", "timesEntered": count + 1,
                         "maxTimeMS": 10000})
    waited = time.monotonic() - start
    t.join()
    check(fired == [2] and waited >= 0.15,
          f"waitForFailPoint returned after the point fired ({waited * 1000:.0f} ms, {fired})")
    e = expect_error("waitForFailPoint timeout", lambda: admin.admin.command(
        {"waitForFailPoint": "failCommand", "timesEntered": count + 2, "maxTimeMS": 50}))
    if e is not None:
        check(code_of(e) == 50, f"waitForFailPoint past maxTimeMS is MaxTimeMSExpired ({e!r})")

    # getMore with maxTimeMS on a cursor that is not awaitData: BadValue, as mongod.
    coll.insert_many([{"g": i} for i in range(3)])
    cursor = admin.fp_check.command({"find": "c", "batchSize": 1})["cursor"]
    e = expect_error("getMore maxTimeMS", lambda: admin.fp_check.command(
        {"getMore": cursor["id"], "collection": "c", "maxTimeMS": 10}))
    if e is not None:
        check(code_of(e) == 2, f"getMore maxTimeMS on a non-awaitData cursor is BadValue ({e!r})")
    more = admin.fp_check.command({"getMore": cursor["id"], "collection": "c"})
    check(len(more["cursor"]["nextBatch"]) >= 1, "the cursor still works without maxTimeMS")

    # Unknown commands: CommandNotFound, as mongod.
    e = expect_error("unknown command", lambda: admin.fp_check.command("noSuchCommand"))
    if e is not None:
        check(code_of(e) == 59, "an unknown command is CommandNotFound (59)")

    info = admin.admin.command("buildInfo")
    check(info.get("versionArray", [0])[0] >= 4, "buildInfo has versionArray")
    coll.drop()
    for c in (admin, csot, plain):
        c.close()


def replica_set(uri):
    admin = client(uri)
    hello = admin.admin.command("hello")
    check(hello.get("setName") is not None and hello.get("isWritablePrimary") is True,
          "the replica-set proxy presents a writable primary")
    coll = admin.fp_check.rs
    coll.drop()
    # One retryable error: PyMongo retries the write and succeeds.
    fail_point(admin, {"times": 1}, {"failCommands": ["insert"], "errorCode": 91})
    coll.insert_one({"y": 1})
    check(coll.count_documents({"y": 1}) == 1, "a retryable write survives one ShutdownInProgress")
    # Two: the retry fails too, and the error carries the server's RetryableWriteError label.
    fail_point(admin, {"times": 2}, {"failCommands": ["insert"], "errorCode": 91})
    e = expect_error("two retryable errors", lambda: coll.insert_one({"y": 2}))
    if e is not None:
        check(code_of(e) == 91 and e.has_error_label("RetryableWriteError"),
              f"the retry's error has code 91 and RetryableWriteError ({e!r})")
    change_stream_labels(admin, coll)
    coll.drop()
    admin.close()


def change_stream_labels(admin, coll):
    """mongod labels a change stream's getMore error ResumableChangeStreamError only once
    the cursor is checked out: failCommand fires before (PyMongo does not resume),
    failGetMoreAfterCursorCheckout after (PyMongo resumes)."""
    with coll.watch(max_await_time_ms=200) as stream:
        fail_point(admin, {"times": 1}, {"failCommands": ["getMore"], "errorCode": 6})
        coll.insert_one({"cs": 1})
        e = expect_error("failCommand on a change stream's getMore", stream.try_next)
        if e is not None:
            check(code_of(e) == 6 and not e.has_error_label("ResumableChangeStreamError"),
                  f"failCommand's getMore error has code 6 and no label ({e!r})")
    off(admin)
    with coll.watch(max_await_time_ms=200) as stream:
        admin.admin.command({"configureFailPoint": "failGetMoreAfterCursorCheckout",
                             "mode": {"times": 1}, "data": {"errorCode": 6}})
        coll.insert_one({"cs": 2})
        change = None
        try:
            for _ in range(20):
                change = stream.try_next()
                if change is not None:
                    break
        except PyMongoError as e:
            check(False, f"failGetMoreAfterCursorCheckout: PyMongo did not resume ({e!r})")
        check(change is not None and change["operationType"] == "insert",
              "after failGetMoreAfterCursorCheckout PyMongo resumes and sees the insert")
    admin.admin.command({"configureFailPoint": "failGetMoreAfterCursorCheckout",
                         "mode": "off"})
    # Until 6.0, 63 (StaleShardVersion) was resumable; 7.0 made the code obsolete.
    for version, resumes in (("6.0.0", True), ("7.0.0", False)):
        admin.admin.command({"proxySetVersion": version})
        host, port = admin.address
        c = client(f"mongodb://{host}:{port}/?directConnection=true")  # a new handshake
        stream_coll = c[coll.database.name][coll.name]
        with stream_coll.watch(max_await_time_ms=200) as stream:
            c.admin.command({"configureFailPoint": "failGetMoreAfterCursorCheckout",
                             "mode": {"times": 1}, "data": {"errorCode": 63}})
            stream_coll.insert_one({"cs": version})
            change, err = None, None
            try:
                for _ in range(20):
                    change = stream.try_next()
                    if change is not None:
                        break
            except PyMongoError as e:
                err = e
            if resumes:
                check(change is not None and err is None,
                      f"{version}: PyMongo resumes after StaleShardVersion ({err!r})")
            else:
                check(err is not None and code_of(err) == 63,
                      f"{version}: code 63 is not resumable ({err!r}, {change})")
        c.close()
    admin.admin.command({"proxySetVersion": "7.0.0"})


def main():
    uri = os.environ.get("PROXY_URI")
    if not uri:
        print("PROXY_URI is not set", file=sys.stderr)
        return 2
    standalone(uri)
    if os.environ.get("PROXY_RS_URI"):
        replica_set(os.environ["PROXY_RS_URI"])
    if FAILURES:
        print(f"{len(FAILURES)} mismatch(es)", file=sys.stderr)
        return 1
    print("all fail point checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
