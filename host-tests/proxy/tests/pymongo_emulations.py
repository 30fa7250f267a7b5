#!/usr/bin/env python3
"""Shows with PyMongo what the failpoint proxy emulates of mongod where nx-27017 falls short:

- distinct values come sorted in BSON order (bson_order.rs), where nx-27017 answers them in
  its own order (checked too, so that this script fails if nx ever changes);
- a database-level aggregate starting with $listLocalSessions (local_sessions.rs) lists the
  sessions this mongod has seen, as {_id: {id, uid}, lastUse}, runs the rest of the pipeline,
  answers the cursor namespace <db>.$cmd.aggregate and takes getMore and killCursors on it;
  fail points apply to it first, and mongod's refusals of a bad stage spec hold;
- an insert's document comment, and the read concern of a transaction's first insert, are not
  stored as documents; a duplicate _id is worded as mongod words it, a $-prefixed name in
  _id refused (insert.rs);
- distinct on _id, which nx-27017 cannot run, answers mongod's values (distinct_id.rs);
- updateUser, on the users the proxy keeps (fail points apply to it);
- a transaction that only ran an aggregate or a count (nx-27017 opens none for them) commits
  and aborts (transaction_state.rs);
- a command with a txnNumber (a transaction's, or a retryable write's) on the standalone is
  refused as mongod refuses it (IllegalOperation, 20), where nx-27017 runs it;
- an aggregate ending in $out, which nx-27017 refuses, replaces the target's documents with
  the pipeline's results (out_stage.rs): the target created if missing, its indexes kept,
  untouched when the pipeline fails; also on a 5.0+ secondary and after $listLocalSessions;
- a filter's {$where: "sleep(N) || true"} (conn/where_sleep.rs), which nx-27017 refuses like
  any $where: the find, update or delete is held N ms and returns what it would without it;
  maxTimeMS shorter than N fails it (50); any other $where is still refused.

Env: PROXY_URI (a standalone proxy), PROXY_RS_URI (a replica-set proxy's primary),
PROXY_RS_SECONDARY_URI (one of its secondaries), BACKEND_URI (the nx-27017 behind both).
Exits non-zero on any mismatch.
"""

import datetime
import hashlib
import os
import sys
import time

import bson
import pymongo
from bson import Int64
from bson.code import Code
from pymongo import DeleteOne, UpdateOne
from pymongo.read_concern import ReadConcern
from pymongo.errors import ExecutionTimeout, OperationFailure

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def code_of(f):
    try:
        f()
    except OperationFailure as e:
        return e.code
    return "ok"


proxy = pymongo.MongoClient(os.environ["PROXY_URI"], serverSelectionTimeoutMS=10000)
backend = pymongo.MongoClient(os.environ["BACKEND_URI"], serverSelectionTimeoutMS=10000)

# --- distinct: BSON order -------------------------------------------------------------
db = proxy.emulations
db.d.drop()
# Numbers and strings only: nx-27017's distinct answers booleans as integers and documents
# as JSON strings (another gap, no spec test meets it).
values = [33, 11, "b", 22, 2.5, Int64(7), "B", -1, [44, 0], "ab"]
db.d.insert_many([{"_id": i, "x": v} for i, v in enumerate(values)])
# mongod: numbers by value (int32, int64, double together), then strings bytewise; an array
# field contributes its elements.
want = [-1, 0, 2.5, 7, 11, 22, 33, 44, "B", "ab", "b"]
got = db.d.distinct("x")
check(got == want, f"distinct through the proxy is in BSON order: {got}")
raw = backend.emulations.command({"distinct": "d", "key": "x"})["values"]
check(raw != want and sorted(map(repr, raw)) == sorted(map(repr, want)),
      f"nx-27017 alone answers the same values in another order: {raw}")
got = db.d.distinct("x", {"_id": {"$in": [0, 1, 3, 8]}})
check(got == [0, 11, 22, 33, 44], f"distinct with a query is sorted too: {got}")
# sort in an update statement: mongod 8.0 takes it, 7.0 (the proxy's default) refuses it
# (version_behaviour.rs), nx-27017 takes it.
sorted_update = {"update": "d", "updates": [{"q": {"_id": {"$in": [0, 1]}},
                                             "u": {"$set": {"y": 1}}, "sort": {"_id": -1}}]}
check(code_of(lambda: db.command(sorted_update)) == 40415,
      "7.0 refuses sort in an update statement (40415)")
proxy.admin.command({"proxySetVersion": "8.0.0"})
try:
    reply = db.command(sorted_update)
    check(reply.get("n") == 1, f"8.0 takes it: {reply}")
finally:
    proxy.admin.command({"proxySetVersion": "7.0.0"})
# distinct on _id, which nx-27017 cannot run (distinct_id.rs).
db.e.drop()
db.e.insert_many([{"_id": i, "g": i % 2} for i in (5, 3, 1, 4, 2)] + [{"_id": "s"}, {"_id": 2.5}])
got = db.e.distinct("_id")
check(got == [1, 2, 2.5, 3, 4, 5, "s"], f"distinct on _id: {got}")
got = db.e.distinct("_id", {"g": 1})
check(got == [1, 3, 5], f"distinct on _id with a query: {got}")
check(code_of(lambda: backend.emulations.e.distinct("_id")) != "ok",
      "nx-27017 alone cannot run distinct on _id")

# --- $listLocalSessions ---------------------------------------------------------------
no_auth_uid = hashlib.sha256(b"").digest()
with proxy.start_session() as s:
    own = bytes(s.session_id["id"])
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    records = list(proxy.admin.aggregate([{"$listLocalSessions": {}}], session=s))
    check(len(records) >= 1, f"$listLocalSessions lists sessions: {len(records)}")
    ids = {bytes(r["_id"]["id"]) for r in records}
    check(own in ids, "the aggregate's own session is listed")
    check(all(set(r) == {"_id", "lastUse"} and set(r["_id"]) == {"id", "uid"} for r in records),
          f"records are shaped {{_id: {{id, uid}}, lastUse}}: {records[0]}")
    check(all(bytes(r["_id"]["uid"]) == no_auth_uid for r in records),
          "uid is SHA-256 of no user (auth off)")
    mine = next(r for r in records if bytes(r["_id"]["id"]) == own)
    last_use = mine["lastUse"].replace(tzinfo=datetime.timezone.utc)
    check(last_use >= before, f"lastUse is the time of use: {last_use}")

# The spec tests' pipeline, on admin and on another database.
pipeline = [{"$listLocalSessions": {}}, {"$limit": 1},
            {"$addFields": {"dummy": "dummy field"}}, {"$project": {"_id": 0, "dummy": 1}}]
for name in ("admin", "test"):
    got = list(proxy[name].aggregate(pipeline))
    check(got == [{"dummy": "dummy field"}], f"the rest of the pipeline runs ({name}): {got}")
got = list(proxy.admin.aggregate(pipeline, allowDiskUse=True))
check(got == [{"dummy": "dummy field"}], f"with allowDiskUse: {got}")

# Several sessions seen: the cursor, its namespace, getMore and killCursors.
sessions = [proxy.start_session() for _ in range(3)]
for s in sessions:
    proxy.test.command("ping", session=s)
reply = proxy.test.command({"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}],
                            "cursor": {"batchSize": 1}})
cursor = reply["cursor"]
check(cursor["ns"] == "test.$cmd.aggregate", f"cursor namespace: {cursor['ns']}")
check(cursor["id"] != 0 and len(cursor["firstBatch"]) == 1, f"a first batch of one: {cursor}")
more = proxy.test.command({"getMore": cursor["id"], "collection": "$cmd.aggregate",
                           "batchSize": 1})["cursor"]
check(more["ns"] == "test.$cmd.aggregate" and len(more["nextBatch"]) == 1,
      f"getMore on $cmd.aggregate: {more}")
killed = proxy.test.command({"killCursors": "$cmd.aggregate", "cursors": [cursor["id"]]})
check(killed.get("cursorsKilled") == [cursor["id"]], f"killCursors on $cmd.aggregate: {killed}")
# The whole listing through PyMongo's own cursor (getMores included).
every = list(proxy.test.aggregate([{"$listLocalSessions": {}}], batchSize=2))
listed = {bytes(r["_id"]["id"]) for r in every}
check(all(bytes(s.session_id["id"]) in listed for s in sessions),
      f"every session used is listed ({len(every)} records, batches of 2)")
check(len(listed) == len(every), "each session once")
for s in sessions:
    s.end_session()
with proxy.start_session() as s:
    one = list(proxy.test.aggregate([{"$listLocalSessions": {}}, {"$limit": 1}], session=s))
    check(len(one) == 1 and bytes(one[0]["_id"]["id"]) == bytes(s.session_id["id"]),
          "with $limit: 1 next, the most recent session (the caller's own)")
every = list(proxy.test.aggregate([{"$listLocalSessions": {"allUsers": True}}]))
check(len(every) >= 4, f"allUsers: {len(every)} records")
none = list(proxy.test.aggregate([{"$listLocalSessions": {"users": [{"user": "x", "db": "y"}]}}]))
check(none == [], f"another user's sessions: none ({none})")

# Fail points apply first; mongod's refusals.
proxy.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["aggregate"], "errorCode": 8}})
check(code_of(lambda: list(proxy.test.aggregate([{"$listLocalSessions": {}}]))) == 8,
      "a failCommand fail point on aggregate fires first (8, not retried)")
check(code_of(lambda: list(proxy.test.aggregate([{"$listLocalSessions": {"bogus": 1}}]))) == 40415,
      "an unknown field of the stage: 40415")
check(code_of(lambda: list(proxy.test.aggregate([{"$limit": 1}, {"$listLocalSessions": {}}]))) != "ok",
      "the stage later in the pipeline is refused")
check(code_of(lambda: list(proxy.test.aggregate(
    [{"$listLocalSessions": {}}, {"$listLocalSessions": {}}]))) == 40602,
      "the stage twice: 40602")

# Each listing's records are dropped once its cursor is done (after the reply).
proxy.admin.command("ping")
left = backend.proxy_local_sessions.list_collection_names()
check(left == [], f"no records left behind on nx-27017: {left}")
# The records' collection is the proxy's, not the client's.
check("proxy_local_sessions" not in proxy.test.list_collection_names(),
      "no collection of the proxy's shows in the client's database")

# --- updateUser (the proxy keeps the users) ---------------------------------------------
udb = proxy.emulations_users
udb.command("dropAllUsersFromDatabase", 1)
udb.command("createUser", "u1", pwd="a", roles=[])
check(udb.command("updateUser", "u1", pwd="b", roles=[{"role": "read", "db": "x"}]).get("ok") == 1.0,
      "updateUser changes a user")
roles = udb.command("usersInfo", "u1")["users"][0]["roles"]
check(roles == [{"role": "read", "db": "x"}], f"usersInfo shows the new roles: {roles}")
check(code_of(lambda: udb.command("updateUser", "nobody", pwd="x")) == 11,
      "updateUser of an unknown user: UserNotFound (11)")
proxy.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["updateUser"], "closeConnection": True}})
try:
    udb.command("updateUser", "u1", pwd="c")
    check(False, "a failCommand fail point on updateUser closes the connection")
except pymongo.errors.AutoReconnect:
    check(True, "a failCommand fail point on updateUser closes the connection")
udb.command("dropAllUsersFromDatabase", 1)

# --- insert ---------------------------------------------------------------------------
db.i.drop()
db.i.insert_one({"_id": 1}, comment={"key": "value"})
db.i.insert_many([{"_id": 2}, {"_id": 3}], comment={"key": "value"})
docs = list(db.i.find({}, sort=[("_id", 1)]))
check(docs == [{"_id": 1}, {"_id": 2}, {"_id": 3}], f"a document comment is not stored: {docs}")
raw = list(backend.emulations.i.find({}))
check(len(raw) == 3, f"nor does it reach nx-27017 ({len(raw)} documents there)")
try:
    db.i.insert_one({"_id": 2})
    check(False, "a duplicate _id fails")
except pymongo.errors.DuplicateKeyError as e:
    err = e.details
    check(err.get("errmsg") == "E11000 duplicate key error collection: emulations.i index: _id_ "
          "dup key: { _id: 2 }", f"mongod's duplicate key message: {err.get('errmsg')}")
    check(err.get("keyPattern") == {"_id": 1} and err.get("keyValue") == {"_id": 2},
          f"keyPattern and keyValue: {err}")
try:
    db.i.insert_many([{"_id": 4}, {"_id": "a"}, {"_id": "a"}])
    check(False, "a duplicate _id in a batch fails")
except pymongo.errors.BulkWriteError as e:
    errors = e.details["writeErrors"]
    check(len(errors) == 1 and errors[0]["index"] == 2
          and errors[0]["errmsg"].endswith('dup key: { _id: "a" }'),
          f"a batch's duplicate (sent as a document sequence): {errors}")

try:
    db.i.insert_one({"_id": {"$a": 1}})
    check(False, "a $-prefixed name in _id is refused")
except pymongo.errors.WriteError as e:
    check(e.code == 52 and "_id fields may not contain '$'-prefixed fields" in str(e),
          f"a $-prefixed name in _id is refused (52): {e}")
check(db.i.count_documents({}) == 5, "and not stored")

rs = pymongo.MongoClient(os.environ["PROXY_RS_URI"], serverSelectionTimeoutMS=10000)
rs.emulations.t.drop()
rs.emulations.create_collection("t")
with rs.start_session() as s:
    with s.start_transaction(read_concern=ReadConcern("majority")):
        rs.emulations.t.insert_one({"_id": 1}, session=s)
docs = list(rs.emulations.t.find())
check(docs == [{"_id": 1}], f"a transaction's read concern is not stored: {docs}")

with rs.start_session() as s:
    s.start_transaction()
    rs.emulations.t.insert_one({"_id": 2}, session=s)
    got = rs.emulations.t.distinct("_id", session=s)
    s.commit_transaction()
check(got == [1, 2], f"distinct on _id in a transaction sees its writes: {got}")
with rs.start_session() as s:
    s.start_transaction()
    got = rs.emulations.t.distinct("_id", session=s)
    try:
        s.commit_transaction()
        check(got == [1, 2], f"a transaction that only ran distinct on _id commits: {got}")
    except pymongo.errors.PyMongoError as e:
        check(False, f"a transaction that only ran distinct on _id commits: {e}")

for end in ("commit", "abort"):
    with rs.start_session() as s:
        s.start_transaction()
        n = rs.emulations.t.count_documents({}, session=s)
        list(rs.emulations.t.aggregate([{"$match": {}}], session=s))
        try:
            getattr(s, end + "_transaction")()
            check(n == 2, f"a transaction that only read ({n} documents counted): {end} succeeds")
        except pymongo.errors.PyMongoError as e:
            check(False, f"a transaction that only read: {end} failed: {e}")
with rs.start_session() as s:
    s.start_transaction()
    rs.emulations.t.count_documents({}, session=s)
    s.commit_transaction()
    try:
        s.commit_transaction()
        check(True, "committed again (the recorded outcome)")
    except pymongo.errors.PyMongoError as e:
        check(False, f"committed again: {e}")

# --- $out ----------------------------------------------------------------------------
db = proxy.emulations
for c in ("src", "out-target", "out2"):
    db.drop_collection(c)
# Filters on x: nx-27017's aggregate compares _id as text.
db.src.insert_many([{"_id": i, "x": i} for i in range(1, 2001)])
try:
    backend.emulations.src.aggregate([{"$out": "out2"}])
    check(False, "nx-27017 itself refuses $out (else out_stage.rs can go)")
except OperationFailure:
    check(True, "nx-27017 itself refuses $out")
got = list(db.src.aggregate([{"$match": {"x": {"$gt": 1500}}}, {"$out": "out-target"}]))
check(got == [], f"$out answers an empty cursor: {got}")
docs = list(db["out-target"].find())
check(len(docs) == 500 and min(d["_id"] for d in docs) == 1501,
      f"$out into a new collection (a name nx-27017 refuses): {len(docs)} documents")
db["out-target"].create_index("x", name="by_x")
db.src.aggregate([{"$match": {"x": {"$lte": 3}}}, {"$out": "out-target"}])
docs = sorted(d["_id"] for d in db["out-target"].find())
# nx-27017 names indexes its own way (nx-gaps.py index-names): look at the keys.
indexes = [dict(i["key"]) for i in db["out-target"].list_indexes()]
check(docs == [1, 2, 3], f"$out replaces the target's documents: {docs}")
check({"x": 1} in indexes, f"and keeps its indexes: {indexes}")
code = code_of(lambda: db.src.aggregate([{"$nope": {}}, {"$out": "out-target"}]))
docs = list(db["out-target"].find())
check(code != "ok" and len(docs) == 3, f"a failing pipeline ({code}) leaves the target: {docs}")
linear = db.get_collection("src", read_concern=ReadConcern("linearizable"))
code = code_of(lambda: linear.aggregate([{"$out": "out-target"}]))
check(code == 72, f"$out under a linearizable read concern is refused: {code}")
proxy.emulations2.drop_collection("o")
db.src.aggregate([{"$match": {"x": 7}}, {"$out": {"db": "emulations2", "coll": "o"}}])
docs = list(proxy.emulations2.o.find())
check(docs == [{"_id": 7, "x": 7}], f"$out into another database: {docs}")
rs.emulations.drop_collection("out2")
secondary = pymongo.MongoClient(os.environ["PROXY_RS_SECONDARY_URI"], serverSelectionTimeoutMS=10000)
check(not secondary.admin.command("hello")["isWritablePrimary"], "a secondary member")
list(secondary.emulations.src.aggregate([{"$match": {"x": 2}}, {"$out": "out2"}]))
docs = list(rs.emulations.out2.find())
check(docs == [{"_id": 2, "x": 2}], f"$out on a 7.0 secondary: {docs}")
rs.emulations.drop_collection("out2")
list(rs.emulations.aggregate([{"$listLocalSessions": {}}, {"$limit": 1},
                              {"$project": {"_id": 1}}, {"$out": "out2"}]))
n = rs.emulations.out2.count_documents({})
check(n == 1, f"$out after $listLocalSessions: {n} document(s)")

# --- transactions need a replica set or mongos -----------------------------------------
txn = {"insert": "t", "documents": [{"x": 1}], "lsid": {"id": bson.Binary(os.urandom(16), 4)},
       "txnNumber": Int64(1), "startTransaction": True, "autocommit": False}
code = code_of(lambda: proxy.emulations.command(dict(txn)))
check(code == 20, f"a transaction on the standalone is IllegalOperation (20): {code}")
code = code_of(lambda: backend.emulations.command(dict(txn)))
check(code == "ok", f"where nx-27017 runs it: {code}")
rs_lsid = {"id": bson.Binary(os.urandom(16), 4)}
code = code_of(lambda: rs.emulations.command(dict(txn, lsid=rs_lsid)))
check(code == "ok", f"and the replica set's primary starts it: {code}")
rs.admin.command({"abortTransaction": 1, "lsid": rs_lsid, "txnNumber": Int64(1), "autocommit": False})

# --- $where: "sleep(N) || true" --------------------------------------------------------
db = proxy.emulations
db.drop_collection("where_sleep")
db["where_sleep"].insert_many([{"_id": i} for i in range(1, 4)])
SLEEP = "sleep(300) || true"


def timed(f):
    start = time.monotonic()
    out = f()
    return out, (time.monotonic() - start) * 1000


code = code_of(lambda: list(backend.emulations["where_sleep"].find({"$where": SLEEP})))
check(code != "ok", f"nx-27017 itself refuses $where (else where_sleep.rs can go): {code}")
got, ms = timed(lambda: list(db["where_sleep"].find({"$where": SLEEP})))
check([d["_id"] for d in got] == [1, 2, 3] and 300 <= ms < 3300,
      f"find with $where sleep(300): every document after {ms:.0f} ms: {got}")
got, ms = timed(lambda: list(db["where_sleep"].find({"$where": Code(SLEEP), "_id": {"$gt": 1}})))
check([d["_id"] for d in got] == [2, 3] and 300 <= ms < 3300,
      f"as BSON code, beside another condition, {ms:.0f} ms: {got}")
res, ms = timed(lambda: db["where_sleep"].update_one({"$where": SLEEP}, {"$set": {"a": "bar"}}))
check(res.modified_count == 1 and 300 <= ms < 3300, f"update_one held {ms:.0f} ms, modified {res.modified_count}")
res, ms = timed(lambda: db["where_sleep"].bulk_write([UpdateOne({"$where": SLEEP}, {"$set": {"b": 1}}),
                                                DeleteOne({"$where": SLEEP, "_id": 3})]))
check(res.modified_count == 1 and res.deleted_count == 1 and 600 <= ms < 3600,
      f"a bulk write (document sequences) held {ms:.0f} ms for both statements")
try:
    _, ms = timed(lambda: list(db["where_sleep"].find({"$where": "sleep(5000) || true"}).max_time_ms(200)))
    check(False, "maxTimeMS shorter than the sleep expires")
except ExecutionTimeout as e:
    check(e.code == 50, f"maxTimeMS shorter than the sleep expires: {e.code}")
code = code_of(lambda: list(db["where_sleep"].find({"$where": "this._id == 1"})))
check(code != "ok", f"any other $where still reaches nx-27017 and is refused: {code}")
db.drop_collection("where_sleep")

if FAILURES:
    print(f"{len(FAILURES)} failure(s)")
    sys.exit(1)
print("all passed")
