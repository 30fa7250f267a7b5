"""PyMongo contender of `cargo xtask bench` (host-tests/src/bin/bench).

Usage: python pymongo_bench.py URI DATA_DIR
Prints `ready`, then answers each request line `<workload> <ops> [arg]` with one
JSON line: {"total_s": t, "per_op_us": [...]}, {"unsupported": true} or
{"error": "..."}. `quit` ends it.
"""

import io
import json
import os
import sys
import time

import bson
import gridfs
import pymongo
from bson import json_util

URI, DATA = sys.argv[1], sys.argv[2]
SINGLE = os.path.join(DATA, "single_and_multi_document")
EXT = os.path.join(DATA, "extended_bson")


def load(path):
    with open(path) as f:
        return json_util.loads(f.read())


SMALL = load(os.path.join(SINGLE, "small_doc.json"))
LARGE = load(os.path.join(SINGLE, "large_doc.json"))
with open(os.path.join(SINGLE, "gridfs_large.bin"), "rb") as f:
    GRIDFS = f.read()
BSON_SETS = {n: load(os.path.join(EXT, n + "_bson.json")) for n in ("flat", "deep", "full")}

client = pymongo.MongoClient(URI)
db = client.perftest
corpus = db.corpus
scratch = db.scratch
bucket = gridfs.GridFSBucket(db)
gridfs_id = None
client.admin.command("ping")


def timed(ops, f):
    per = []
    clock = time.perf_counter
    start = clock()
    for i in range(ops):
        t = clock()
        f(i)
        per.append((clock() - t) * 1e6)
    return {"total_s": clock() - start, "per_op_us": per}


def whole(f):
    t = time.perf_counter()
    f()
    return {"total_s": time.perf_counter() - t, "per_op_us": []}


def find_many(ops):
    n = sum(1 for _ in corpus.find({}))
    assert n == ops, f"find many: {n} documents"


def timing_out(coll, ops, ms):
    def one(_):
        try:
            with pymongo.timeout(ms / 1000.0):
                coll.find_one({})
        except pymongo.errors.PyMongoError:
            return
        raise AssertionError("did not time out")

    return timed(ops, one)


def upload():
    return bucket.upload_from_stream("gridfs_large", GRIDFS)


def download(file_id):
    out = io.BytesIO()
    bucket.download_to_stream(file_id, out)
    assert len(out.getvalue()) == len(GRIDFS)


def cold():
    t = time.perf_counter()
    c = pymongo.MongoClient(URI)
    doc = c.perftest.corpus.find_one({"_id": 1})
    took = time.perf_counter() - t
    c.close()
    assert doc is not None
    return {"total_s": took, "per_op_us": []}


def distant(uri):
    """A cold request to `uri` (the distant section): its wall time, its
    CLOCK_MONOTONIC bounds (for the relay's flights) and the process's CPU time."""
    cpu = time.process_time()
    t0 = time.monotonic_ns()
    t = time.perf_counter()
    c = pymongo.MongoClient(uri)
    doc = c.perftest.corpus.find_one({"_id": 1})
    took = time.perf_counter() - t
    t1 = time.monotonic_ns()
    cpu = time.process_time() - cpu
    c.close()
    assert doc is not None
    return {"total_s": took, "per_op_us": [], "t0_ns": t0, "t1_ns": t1, "cpu_s": cpu}


def run(name, ops, arg):
    global gridfs_id
    if name == "run_command":
        return timed(ops, lambda i: client.admin.command({"hello": True}))
    if name == "find_one":
        return timed(ops, lambda i: corpus.find_one({"_id": i % 10000 + 1}))
    if name in ("insert_one_small", "insert_one_large"):
        doc = SMALL if name.endswith("small") else LARGE
        # One copy each (insert_one adds its _id to the dict), made before the clock.
        docs = [dict(doc) for _ in range(ops)]
        return timed(ops, lambda i: scratch.insert_one(docs[i]))
    if name == "find_many":
        return whole(lambda: find_many(ops))
    if name in ("insert_many_small", "insert_many_large"):
        doc = SMALL if name.endswith("small") else LARGE
        docs = [dict(doc) for _ in range(ops)]
        return whole(lambda: scratch.insert_many(docs))
    if name == "gridfs_upload":
        holder = []
        r = whole(lambda: holder.append(upload()))
        gridfs_id = holder[0]
        return r
    if name == "gridfs_download":
        if gridfs_id is None:
            gridfs_id = upload()
        return whole(lambda: download(gridfs_id))
    if name.startswith("bson_"):
        op, _, which = name[5:].partition("_")
        doc = BSON_SETS[which]
        if op == "encode":
            return whole(lambda: [bson.encode(doc) for _ in range(ops)])
        data = bson.encode(doc)
        return whole(lambda: [bson.decode(data) for _ in range(ops)])
    if name == "cold":
        return cold()
    if name == "distant":
        return distant(arg)
    if name == "deadline":
        return timing_out(db.slow, ops, int(arg))
    if name == "churn":
        return timing_out(db.honour, ops, int(arg))
    return {"unsupported": True}


print("ready", flush=True)
for line in sys.stdin:
    parts = line.split()
    if not parts or parts[0] == "quit":
        break
    try:
        reply = run(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else None)
    except Exception as e:  # reported to the harness, which goes on
        reply = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(reply), flush=True)
