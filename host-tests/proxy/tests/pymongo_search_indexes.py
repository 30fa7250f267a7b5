#!/usr/bin/env python3
"""Shows with PyMongo that the failpoint proxy answers Atlas Search index management as a
mongod without a search index host does (SearchNotEnabled, 31082, a message naming Atlas):
create_search_index(es), update_search_index, drop_search_index and list_search_indexes;
and that other commands and aggregates still reach nx-27017.

Env: PROXY_URI (a proxy in front of nx-27017). Exits non-zero on any mismatch.
"""

import os
import sys

import pymongo
from pymongo.errors import OperationFailure
from pymongo.operations import SearchIndexModel

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def refused(what, run):
    try:
        run()
    except OperationFailure as e:
        check(e.code == 31082 and "Atlas" in str(e), f"{what}: {e.code} {e.details.get('codeName')}")
        return
    check(False, f"{what}: no error")


client = pymongo.MongoClient(os.environ["PROXY_URI"], serverSelectionTimeoutMS=5000)
coll = client["proxy_search"]["c"]
coll.drop()
coll.insert_one({"_id": 1})
model = SearchIndexModel(definition={"mappings": {"dynamic": True}}, name="s")
refused("create_search_index", lambda: coll.create_search_index(model))
refused("create_search_indexes", lambda: coll.create_search_indexes([model]))
refused("update_search_index", lambda: coll.update_search_index("s", {"mappings": {}}))
refused("drop_search_index", lambda: coll.drop_search_index("s"))
refused("list_search_indexes", lambda: list(coll.list_search_indexes()))
check(list(coll.aggregate([{"$match": {}}])) == [{"_id": 1}], "a plain aggregate still runs")
coll.drop()
sys.exit(1 if FAILURES else 0)
