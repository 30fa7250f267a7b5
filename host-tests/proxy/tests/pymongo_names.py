#!/usr/bin/env python3
"""Shows with PyMongo that collection names nx-27017 refuses work through the failpoint proxy
(names.rs): GridFS as the spec tests set it up (fs.files/fs.chunks written directly), dashed
and keyword names, and that every reply carries the real names.

Env: PROXY_URI (a standalone proxy in front of nx-27017), BACKEND_URI (the nx-27017 itself).
Exits non-zero on any mismatch.
"""

import datetime
import os
import sys

import gridfs
import pymongo
from bson import ObjectId
from pymongo.errors import OperationFailure

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def main():
    c = pymongo.MongoClient(os.environ["PROXY_URI"], serverSelectionTimeoutMS=5000)
    backend = pymongo.MongoClient(os.environ["BACKEND_URI"], serverSelectionTimeoutMS=5000)
    c.drop_database("names_test")
    db = c.names_test

    # GridFS through the bucket API: upload, find, download, rename, delete.
    bucket = gridfs.GridFSBucket(db)
    data = bytes(range(256)) * 5
    fid = bucket.upload_from_stream("a.bin", data, chunk_size_bytes=100)
    check(bucket.open_download_stream(fid).read() == data, "GridFS round trip")
    check(bucket.open_download_stream_by_name("a.bin").read() == data, "download by name")
    names = sorted(db.list_collection_names())
    check(names == ["fs.chunks", "fs.files"], f"listCollections shows the real names: {names}")
    check(db["fs.chunks"].count_documents({}) == 13, "13 chunks of 100 bytes")
    bucket.rename(fid, "b.bin")
    check([f.filename for f in bucket.find()] == ["b.bin"], "rename")
    bucket.delete(fid)
    check(db["fs.files"].find_one() is None and db["fs.chunks"].find_one() is None, "delete")

    # fs.files written directly, as spec tests' initialData does: stored as given.
    when = datetime.datetime(1970, 1, 2)
    files = [{"_id": i, "filename": "abc", "length": 0, "chunkSize": 4, "uploadDate": when} for i in (1, 2, 3)]
    db["fs.files"].insert_many(files)
    got = db["fs.files"].find_one({"_id": 1})
    check(isinstance(got["uploadDate"], datetime.datetime), f"a date stays a date: {got}")
    skipped = [d["_id"] for d in db["fs.files"].find().sort("_id", 1).skip(1).limit(1)]
    check(skipped == [2], f"skip applies: {skipped}")
    oid = ObjectId()
    db["fs.chunks"].insert_many([{"_id": 10 + n, "files_id": oid, "n": n, "data": b"x"} for n in (1, 0)])
    ns = sorted(d["n"] for d in db["fs.chunks"].find({"files_id": oid}))
    check(ns == [0, 1], f"chunks found by an ObjectId files_id: {ns}")

    # A cursor's ns, indexes, errors, renames: the real names.
    coll = db["coll-default"]
    coll.insert_many([{"_id": i} for i in range(5)])
    reply = db.command({"find": "coll-default", "batchSize": 2})
    check(reply["cursor"]["ns"] == "names_test.coll-default", f"cursor ns {reply['cursor']['ns']}")
    more = db.command({"getMore": reply["cursor"]["id"], "collection": "coll-default"})
    check(len(more["cursor"]["nextBatch"]) == 3, "getMore on a dashed collection")
    check(more["cursor"]["ns"] == "names_test.coll-default", f"getMore ns {more['cursor']['ns']}")
    coll.create_index("x")
    nss = [i.get("ns") for i in coll.list_indexes() if "ns" in i]
    check(all(n == "names_test.coll-default" for n in nss), f"index ns {nss}")
    db["default"].insert_one({"_id": 1})
    check(db["default"].find_one() == {"_id": 1}, "a collection named like an SQL keyword")
    reply = db.command({"insert": "coll-default", "documents": [{"_id": 1}]})
    errmsg = reply["writeErrors"][0]["errmsg"]
    check("coll-default" in errmsg and "nxname_" not in errmsg, f"a write error names the real collection: {errmsg}")
    try:
        db.command({"collStats": "no-such"})
        check(False, "collStats of a missing collection fails")
    except OperationFailure as e:
        check("no-such" in str(e) and "nxname_" not in str(e), f"an error names the real collection: {e}")

    # What nx-27017 holds: encoded names, no dots or dashes.
    stored = backend.names_test.list_collection_names()
    check(all("." not in n and "-" not in n for n in stored), f"backend names {stored}")
    c.drop_database("names_test")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)


if __name__ == "__main__":
    main()
