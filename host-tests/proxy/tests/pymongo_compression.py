#!/usr/bin/env python3
"""Shows with PyMongo that the proxy speaks OP_COMPRESSED as mongod does (compression.rs):
for each compressor PyMongo can use here (zlib always; snappy with python-snappy, zstd with
zstandard or backports.zstd), inserts and finds go compressed both ways, zlibCompressionLevel
changes what PyMongo sends, and nothing is a protocol error.

Env: PROXY_URI (a standalone proxy in front of nx-27017). Exits non-zero on any mismatch.
"""

import importlib.util
import os
import sys
import warnings

import pymongo

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def available(name):
    modules = {
        "zlib": ["zlib"],
        "snappy": ["snappy"],
        "zstd": ["backports.zstd", "compression.zstd", "zstandard"],
    }[name]
    for m in modules:
        try:
            if importlib.util.find_spec(m) is not None:
                return True
        except ModuleNotFoundError:
            pass
    return False


def run(uri, coll_name):
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
    c.admin.command("ping")
    c.admin.command("proxyResetStats")
    coll = c.compression_test[coll_name]
    coll.drop()
    docs = [{"_id": i, "text": "the same words again and again " * 4} for i in range(500)]
    coll.insert_many(docs)
    back = sorted(coll.find({}, batch_size=200), key=lambda d: d["_id"])
    stats = c.admin.command("proxyStats")
    c.close()
    return back == docs, stats


def main():
    base = os.environ["PROXY_URI"]
    sep = "&" if "?" in base else "?"
    for name in ["zlib", "snappy", "zstd"]:
        if not available(name):
            print(f"skip {name}: PyMongo has no module for it in this venv")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            same, stats = run(f"{base}{sep}compressors={name}", name)
        wire = stats["wire"]
        check(same, f"{name}: documents round trip")
        check(wire["compressedReceived"].get(name, 0) >= 2, f"{name}: requests arrive compressed")
        check(wire["compressedSent"].get(name, 0) >= 2, f"{name}: replies go compressed")
        check(stats["protocolErrors"] == 0, f"{name}: no protocol errors")
    _, plain = run(base, "levels")
    _, stored = run(f"{base}{sep}compressors=zlib&zlibCompressionLevel=0", "levels")
    _, best = run(f"{base}{sep}compressors=zlib&zlibCompressionLevel=9", "levels")
    check(plain["wire"]["compressedReceived"] == {}, "no compressors: nothing compressed")
    check(
        best["wire"]["bytesReceived"] * 4 < stored["wire"]["bytesReceived"],
        "zlib level 9 sends far less than level 0 (%d, %d)"
        % (best["wire"]["bytesReceived"], stored["wire"]["bytesReceived"]),
    )
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
