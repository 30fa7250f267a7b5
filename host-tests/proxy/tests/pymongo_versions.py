#!/usr/bin/env python3
"""Shows with PyMongo that the failpoint proxy refuses what the mongod version it presents
refuses (version_behaviour.rs): through PROXY_OLD_URI (a proxy presenting 4.4.7, the oldest
server PyMongo 4.20 talks to) each case added after 4.4.7 fails with mongod 4.4's error code,
and each case 4.4.0 already took succeeds; through PROXY_URI (the default version, 7.0.0)
every case succeeds.

Env: PROXY_URI, PROXY_OLD_URI (two proxies in front of the same nx-27017).
Exits non-zero on any mismatch.
"""

import os
import sys

import pymongo
from pymongo.errors import BulkWriteError, OperationFailure

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


OLD = "4.4.7"

# name: (what PyMongo runs, mongod 4.4.7's error code, or "ok")
CASES = {
    # 4.4 took these (the proxy refuses them below 4.4 only).
    "insert with a comment": (lambda c: c.insert_one({"_id": 10}, comment="c"), "ok"),
    "aggregate with a document comment": (lambda c: list(c.aggregate([], comment={"k": 1})), "ok"),
    "delete with a hint": (lambda c: c.delete_one({"_id": 2}, hint="_id_"), "ok"),
    "find with allowDiskUse": (lambda c: list(c.find({}, allow_disk_use=True)), "ok"),
    # A document comment on count: 4.4.14 on (TypeMismatch).
    "count with a document comment": (lambda c: c.estimated_document_count(comment={"k": 1}), 14),
    # let: 5.0 on (find and aggregate: FailedToParse; IDL's unknown field; findAndModify's 51177).
    "find with let": (lambda c: list(c.find({}, let={"v": 1})), 9),
    "aggregate with let": (lambda c: list(c.aggregate([], let={"v": 1})), 9),
    "update with let": (lambda c: c.update_one({"_id": 1}, {"$set": {"x": 2}}, let={"v": 1}), 40415),
    "delete with let": (lambda c: c.delete_one({"_id": 1}, let={"v": 1}), 40415),
    "findAndModify with let": (
        lambda c: c.find_one_and_update({"_id": 1}, {"$set": {"x": 2}}, let={"v": 1}),
        51177,
    ),
    # $-prefixed field names: 5.0 on (BadValue and DollarPrefixedFieldName write errors,
    # findAndModify's a command error).
    "insert of a top-level $ field": (lambda c: c.insert_one({"_id": 3, "$a": 1}), 2),
    "replacement with an embedded $ field": (
        lambda c: c.replace_one({"_id": 1}, {"a": {"$b": 1}}),
        52,
    ),
    "findAndModify replacement with an embedded $ field": (
        lambda c: c.find_one_and_replace({"_id": 1}, {"a": {"$b": 1}}),
        52,
    ),
}


def outcome(run, coll):
    try:
        run(coll)
        return "ok"
    except BulkWriteError as e:
        return e.details["writeErrors"][0]["code"]
    except OperationFailure as e:
        return e.code


def main():
    clients = {
        "default": pymongo.MongoClient(os.environ["PROXY_URI"], serverSelectionTimeoutMS=5000),
        OLD: pymongo.MongoClient(os.environ["PROXY_OLD_URI"], serverSelectionTimeoutMS=5000),
    }
    info = clients[OLD].admin.command("buildInfo")
    check(info["version"] == OLD, f"the old proxy presents {OLD}: {info['version']}")
    for version, client in clients.items():
        coll = client.versions_test.c
        for name, (run, code) in CASES.items():
            coll.drop()
            coll.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
            got = outcome(run, coll)
            want = "ok" if version == "default" else code
            check(got == want, f"{name} at {version}: {got} (want {want})")
            # A refused write changes nothing.
            if got != "ok":
                docs = list(coll.find({}, sort=[("_id", 1)]))
                check(docs == [{"_id": 1, "x": 1}, {"_id": 2, "x": 2}], f"{name}: nothing written {docs}")
    clients["default"].drop_database("versions_test")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)


if __name__ == "__main__":
    main()
