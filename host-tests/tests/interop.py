"""PyMongo's half of interop.rs: reads what the mongo-wasi component wrote
(`check`) and writes the same things for the component to read (`write`).

    MONGO_URI=mongodb://127.0.0.1:PORT/ DB=name python interop.py check|write

The data is defined twice, here and in interop.rs, on purpose: the all-types
document must come out of both BSON encoders byte for byte the same.
"""

import datetime
import os
import sys

import bson
import gridfs
from bson import Binary, Int64, ObjectId
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import ASCENDING, MongoClient
from pymongo.errors import DuplicateKeyError

UTC = datetime.timezone.utc
CHUNK_SIZE = 64


def all_types():
    """Every BSON type nx-27017 stores unchanged (see interop.rs for the others)."""
    return {
        "_id": ObjectId("65a1b2c3d4e5f60718293a4b"),
        "double": 1.5,
        "double_negative_zero": -0.0,
        "double_whole": 2.0,
        "double_huge": 1e300,
        "double_tiny": 5e-324,
        "string": "h\u00e9llo \u2603 \u4e16\u754c",
        "empty_string": "",
        "\u043a\u043b\u044e\u0447": "\u0437\u043d\u0430\u0447\u0435\u043d\u0438\u0435",
        "long_string": "x" * 20000,
        "document": {"a": 1, "nested": {"b": "c", "deeper": {"d": [1, {"e": [2]}]}}},
        "empty_document": {},
        "array": [1, "two", 3.5, [4], {"five": 5}, None, True],
        "empty_array": [],
        "binary": Binary(bytes([0, 1, 2, 255]), 0),
        "object_id": ObjectId("65a1b2c3d4e5f60718293a4c"),
        "true": True,
        "false": False,
        "datetime": datetime.datetime(2026, 11, 23, 1, 2, 3, 456000, tzinfo=UTC),
        "datetime_1900": datetime.datetime(1900, 1, 1, tzinfo=UTC),
        "datetime_9999": datetime.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "null": None,
        "int32": 42,
        "int32_min": -(2**31),
        "int32_max": 2**31 - 1,
        "int64": Int64(2**40),
        "int64_min": Int64(-(2**63)),
        "int64_max": Int64(2**63 - 1),
    }


def file_content():
    """1000 bytes, every byte value: 16 chunks of 64, the last one short."""
    return bytes((i * 7 + 3) % 256 for i in range(1000))


failures = []


def expect(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}{'' if ok else ': ' + str(detail)}")
    if not ok:
        failures.append(what)


def check(db):
    """Reads what the component wrote in interop.rs."""
    raw = db.get_collection("types", codec_options=CodecOptions(document_class=RawBSONDocument))
    got = raw.find_one({"_id": all_types()["_id"]})
    want = bson.encode(all_types())
    expect(
        "the all-types document reads back byte for byte as PyMongo encodes it",
        got is not None and got.raw == want,
        "missing" if got is None else f"got {bson.decode(got.raw)!r}",
    )

    bucket = gridfs.GridFSBucket(db, bucket_name="wasi")
    data = bucket.open_download_stream_by_name("wasi.bin").read()
    expect("the GridFS file's content", data == file_content(), f"{len(data)} bytes")
    files = list(bucket.find({"filename": "wasi.bin"}))
    expect("one files document", len(files) == 1, files)
    if files:
        f = files[0]
        expect("length and chunkSize", (f.length, f.chunk_size) == (1000, CHUNK_SIZE), (f.length, f.chunk_size))
        expect("metadata", f.metadata == {"from": "mongo-wasi"}, f.metadata)
        # A find, not count_documents: nx-27017 fails aggregates on a chunks table.
        chunks = list(db["wasi.chunks"].find({"files_id": f._id}))
        expect("16 chunks numbered 0..15", sorted(c["n"] for c in chunks) == list(range(16)), len(chunks))

    indexes = {tuple(i["key"].items()): i for i in db.indexed.list_indexes()}
    n = indexes.get((("n", 1),))
    expect("the unique index on n", n is not None and n.get("unique") is True, indexes)
    expect("the compound index on a, b", (("a", 1), ("b", 1)) in indexes, indexes)
    t = indexes.get((("t", 1),))
    expect("the TTL index on t", t is not None and t.get("expireAfterSeconds") == 3600, t)
    try:
        db.indexed.insert_one({"n": 1})
        expect("PyMongo's duplicate n is refused by the component's unique index", False, "inserted")
    except DuplicateKeyError:
        expect("PyMongo's duplicate n is refused by the component's unique index", True)


def write(db):
    """Writes what interop.rs then reads through the component."""
    db.types.insert_one(all_types())
    bucket = gridfs.GridFSBucket(db, bucket_name="py", chunk_size_bytes=CHUNK_SIZE)
    bucket.upload_from_stream("py.bin", file_content(), metadata={"from": "pymongo"})
    db.indexed.create_index([("n", ASCENDING)], unique=True)
    db.indexed.create_index([("a", ASCENDING), ("b", ASCENDING)])
    db.indexed.create_index([("t", ASCENDING)], expireAfterSeconds=3600)
    db.indexed.insert_one({"n": 1})
    print("ok   wrote the all-types document, py.bin in bucket py, three indexes")


def main():
    mode = sys.argv[1]
    client = MongoClient(os.environ["MONGO_URI"], serverSelectionTimeoutMS=10000)
    db = client[os.environ["DB"]]
    {"check": check, "write": write}[mode](db)
    client.close()
    if failures:
        print(f"{len(failures)} mismatches: {', '.join(failures)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
