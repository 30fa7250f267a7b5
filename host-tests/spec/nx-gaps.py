"""Reproduces each nx-27017 gap that host-tests/spec/skips.txt skips tests for.

Usage: .work/venv/bin/python host-tests/spec/nx-gaps.py mongodb://127.0.0.1:PORT/
(`cargo xtask server start` prints such a URI; pymongo comes with `cargo xtask setup`).

Talks to nx-27017 directly with PyMongo, so what it shows is the server's behaviour,
not the mongo-wasi driver's. Each gap prints `GAP` (still there) or `fixed` with what
mongod 7.0 does and what nx-27017 did; a `fixed` gap means its skip-list entries
can go. Gaps of the failpoint proxy (not of nx-27017) are listed at the end.
"""

import datetime
import sys
import uuid

import pymongo
from bson import Binary, Decimal128, ObjectId
from pymongo.errors import PyMongoError

GAPS = []


def gap(name, mongod):
    def register(probe):
        GAPS.append((name, mongod, probe))
        return probe

    return register


def attempt(f):
    try:
        return f(), None
    except PyMongoError as e:
        return None, f"{type(e).__name__}: {e}".split(", full error")[0][:160]


@gap("identifiers", "accepts collection names with '-' or '.' (coll-default, fs.files)")
def identifiers(db):
    _, err = attempt(lambda: db.create_collection("coll-default"))
    _, err2 = attempt(lambda: db.create_collection("fs.files"))
    db["fs.chunks"].insert_one({"_id": 1})
    db.drop_collection("fs.chunks")
    _, err3 = attempt(lambda: db["fs.chunks"].insert_one({"_id": 1}))
    errs = [e for e in (err, err2, err3) if e]
    return bool(errs), "; ".join(errs) or "all accepted"


@gap("keyword-names", "accepts a collection named 'default' (an SQL keyword)")
def keyword_names(db):
    _, err = attempt(lambda: db["default"].insert_one({"_id": 1}))
    return err is not None, err or "accepted"


@gap("decimal128", "stores Decimal128 values")
def decimal128(db):
    _, err = attempt(lambda: db.c.insert_one({"x": Decimal128("1.5")}))
    return err is not None, err or "stored"


@gap("out-stage", "runs $out")
def out_stage(db):
    db.c.insert_one({"_id": 1})
    _, err = attempt(lambda: list(db.c.aggregate([{"$out": "other"}])))
    return err is not None, err or "ran"


@gap("database-aggregate", "runs database-level aggregate ($listLocalSessions, $currentOp); the "
     "failpoint proxy runs $listLocalSessions itself (local_sessions.rs), not $documents")
def database_aggregate(db):
    _, err = attempt(lambda: list(db.client.admin.aggregate([{"$listLocalSessions": {}}])))
    return err is not None, err or "ran"


@gap("merge-db", "runs $merge into {db, coll} of another database (the failpoint proxy runs the rest "
     "of a $listLocalSessions pipeline in a database of its own, so its $merge names the client's)")
def merge_db(db):
    db.c.insert_one({"_id": 1})
    _, err = attempt(lambda: list(db.c.aggregate([{"$merge": {"into": {"db": "other_db", "coll": "m"}}}])))
    found = list(db.client.other_db.m.find()) if err is None else []
    return err is not None or found != [{"_id": 1}], err or f"found {found}"


@gap("pipeline-update", "applies an update given as a pipeline")
def pipeline_update(db):
    db.c.insert_one({"_id": 1})
    _, err = attempt(lambda: db.c.update_one({"_id": 1}, [{"$set": {"y": 1}}]))
    return err is not None, err or "applied"


@gap("array-filters", "applies arrayFilters (modifiedCount 1)")
def array_filters(db):
    db.a.insert_one({"_id": 1, "y": [{"b": 3}, {"b": 1}]})
    r = db.a.update_one({"_id": 1}, {"$set": {"y.$[i].b": 2}}, array_filters=[{"i.b": 3}])
    return r.modified_count != 1, f"modifiedCount {r.modified_count}"


@gap("collation", "honours collation (strength 2 matches 'ping' and 'PING')")
def collation(db):
    db.p.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "PING"}])
    r = db.p.delete_many({"x": "ping"}, collation={"locale": "en_US", "strength": 2})
    return r.deleted_count != 2, f"deletedCount {r.deleted_count}"


@gap("let", "binds let variables ($$id in $expr)")
def let(db):
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    found, err = attempt(lambda: list(db.c.find({"$expr": {"$eq": ["$_id", "$$id"]}}, let={"id": 1})))
    return found != [{"_id": 1}], err or f"found {found}"


@gap("distinct-order", "answers distinct values sorted in BSON order (11, 22, 33); the failpoint "
     "proxy sorts them (bson_order.rs)")
def distinct_order(db):
    db.c.insert_many([{"_id": i, "x": i * 11} for i in (1, 2, 3)])
    values = db.c.distinct("x")
    return values != [11, 22, 33], f"values {values}"


@gap("null-id", "finds a document whose _id is null")
def null_id(db):
    db.n.insert_one({"_id": None})
    n = db.n.count_documents({"_id": None})
    return n != 1, f"count {n}"


@gap("unknown-operator", "rejects an unknown query operator even on an empty collection")
def unknown_operator(db):
    found, err = attempt(lambda: list(db.empty.find({"x": {"$unsupportedQueryOperator": 1}})))
    return err is None, err or f"found {found}"


@gap("where-js", "runs a $where JavaScript predicate; the failpoint proxy emulates the one idiom "
     "the interruptInUse tests use, {$where: \"sleep(N) || true\"}, by holding the command N ms "
     "(conn/where_sleep.rs)")
def where_js(db):
    db.c.insert_one({"_id": 1})
    found, err = attempt(lambda: list(db.c.find({"$where": "sleep(10) || true"})))
    return err is not None, err or f"found {found}"


@gap("no-auth", "fails saslStart without users (no authentication configured)")
def no_auth(db):
    reply, err = attempt(lambda: db.command({"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": b"x"}))
    return err is None, err or f"reply {reply}"


@gap("update-sort", "7.0 rejects `sort` in an update statement (8.0 added it); the failpoint "
     "proxy refuses it below 8.0 (version_behaviour.rs)")
def update_sort(db):
    db.c.insert_one({"_id": 1})
    reply, err = attempt(lambda: db.command({"update": "c", "updates": [{"q": {}, "u": {"x": 1}, "sort": {"_id": 1}}]}))
    return err is None, err or f"reply {reply}"


def bulk_write(db, ops, **fields):
    """The 8.0 `bulkWrite` command on admin, on the collection `db.c`."""
    command = {"bulkWrite": 1, "ops": ops, "nsInfo": [{"ns": f"{db.name}.c"}], "errorsOnly": False}
    command.update(fields)
    return db.client.admin.command(command)


@gap("update-sort-order", "8.0's update `sort` picks the document: updateOne {$inc: {x: 1}} with sort {_id: -1} "
     "changes _id 3 of 2..3")
def update_sort_order(db):
    db.c.insert_many([{"_id": i, "x": 0} for i in (1, 2, 3)])
    db.command({"update": "c", "updates": [{"q": {"_id": {"$gt": 1}}, "u": {"$inc": {"x": 1}}, "sort": {"_id": -1}}]})
    changed = [d["_id"] for d in db.c.find({"x": 1})]
    return changed != [3], f"changed {changed}"


@gap("bulkwrite-upsert-count", "bulkWrite leaves an upsert out of nMatched (nMatched 0, nUpserted 1)")
def bulkwrite_upsert_count(db):
    reply = bulk_write(db, [{"update": 0, "filter": {"_id": 4}, "updateMods": {"x": 44}, "upsert": True, "multi": False}])
    return reply.get("nMatched") != 0, f"nMatched {reply.get('nMatched')}, nUpserted {reply.get('nUpserted')}"


@gap("bulkwrite-sort", "bulkWrite's update `sort` picks the document (8.0): _id 3 of 2..3 sorted descending")
def bulkwrite_sort(db):
    db.c.insert_many([{"_id": 1, "x": 0}, {"_id": 2, "x": 0}, {"_id": 3, "x": 0}])
    bulk_write(db, [{"update": 0, "filter": {"_id": {"$gt": 1}}, "updateMods": {"$inc": {"x": 1}}, "sort": {"_id": -1}, "multi": False}])
    changed = [d["_id"] for d in db.c.find({"x": 1})]
    return changed != [3], f"updated _id {changed}"


@gap("undefined-variable", "fails a write whose filter uses an undefined $$ variable with code 17276")
def undefined_variable(db):
    db.c.insert_one({"_id": 1})
    reply = bulk_write(db, [{"delete": 0, "filter": {"$expr": {"$eq": ["$_id", "$$id2"]}}, "multi": False}])
    first = reply["cursor"]["firstBatch"][0]
    return first.get("code") != 17276, f"code {first.get('code')}: {first.get('errmsg')}"


@gap("dollar-id", "rejects a dollar-prefixed key inside _id; the failpoint proxy refuses it (insert.rs)")
def dollar_id(db):
    _, err = attempt(lambda: db.c.insert_one({"_id": {"$a": 1}}))
    return err is None, err or "inserted"


@gap("snapshot-reads", "reads at a snapshot: find with readConcern level snapshot answers cursor.atClusterTime, and reading at it again misses a later update")
def snapshot_reads(db):
    db.c.insert_one({"_id": 1, "x": 1})
    first, err = attempt(lambda: db.command({"find": "c", "readConcern": {"level": "snapshot"}}))
    at = ((first or {}).get("cursor") or {}).get("atClusterTime")
    if err is not None or at is None:
        return True, err or "no cursor.atClusterTime in the reply"
    db.c.update_one({"_id": 1}, {"$set": {"x": 2}})
    again = db.command({"find": "c", "readConcern": {"level": "snapshot", "atClusterTime": at}})
    x = again["cursor"]["firstBatch"][0]["x"]
    return x != 1, f"read x={x} at the snapshot"


@gap("retry-dedup", "executes a retried write (same lsid and txnNumber) once")
def retry_dedup(db):
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    cmd = {"insert": "c", "documents": [{"_id": 7}], "lsid": lsid, "txnNumber": 1}
    db.command(cmd)
    reply, err = attempt(lambda: db.command(dict(cmd)))
    dup = err is not None or bool((reply or {}).get("writeErrors"))
    return dup, err or f"second reply {reply}"


@gap("recommit", "accepts commitTransaction again after a commit (the Transactions spec re-commits)")
def recommit(db):
    with db.client.start_session() as session:
        session.start_transaction()
        db.c.insert_one({"_id": 1}, session=session)
        session.commit_transaction()
        _, err = attempt(session.commit_transaction)
    return err is not None, err or "re-commit accepted"


@gap("interleaved-transactions", "keeps transactions of different sessions apart: aborting one "
     "rolls back its own writes only, and another session's transaction still commits")
def interleaved_transactions(db):
    # nx-27017 nests each transaction as a SQLite savepoint on one connection: an abort
    # rolls back every write made since it began, other sessions' and plain
    # acknowledged ones too, and the later transaction's savepoint is gone
    # (the concurrent soak, `cargo xtask soak --concurrency 16`, leaves transactions out).
    db.c.drop()
    client = db.client
    with client.start_session() as s1, client.start_session() as s2:
        s1.start_transaction()
        s2.start_transaction()
        db.c.insert_one({"_id": "t1"}, session=s1)
        db.c.insert_one({"_id": "t2"}, session=s2)
        db.c.insert_one({"_id": "plain"})
        s1.abort_transaction()
        _, err = attempt(s2.commit_transaction)
    kept = sorted(d["_id"] for d in db.c.find())
    return kept != ["plain", "t2"], err or f"after the abort and the commit: {kept}"


@gap("replace-id", "keeps _id (and its type) on a findAndModify replacement; an upsert takes _id from the query")
def replace_id(db):
    db.r.insert_many([{"_id": 1, "x": 11}, {"_id": 2, "x": 22}])
    db.command({"findAndModify": "r", "query": {"_id": {"$gt": 1}}, "update": {"x": 32}, "new": True})
    db.command({"findAndModify": "r", "query": {"_id": 4}, "update": {"x": 44}, "upsert": True})
    ids = [d["_id"] for d in db.r.find()]
    return ids != [1, 2, 4], f"_ids {ids}"


@gap("return-key", "honours returnKey and showRecordId in find")
def return_key(db):
    db.c.insert_one({"_id": 1, "x": 11})
    docs = list(db.c.find({}, return_key=True, show_record_id=True))
    return "x" in docs[0], f"documents {docs}"


@gap("tailable", "keeps a tailable cursor on a capped collection open after its last document")
def tailable(db):
    db.create_collection("cap", capped=True, size=500)
    db.cap.insert_many([{"_id": 0}, {"_id": 1}])
    first = db.command({"find": "cap", "tailable": True, "awaitData": True, "batchSize": 1})
    more = db.command({"getMore": first["cursor"]["id"], "collection": "cap"})
    cid = more["cursor"]["id"]
    return cid == 0, f"cursor id {cid} after the getMore that returned the last document"


@gap("insert-comment", "treats an insert command's `comment` as a comment; the failpoint proxy "
     "keeps it from nx-27017 (insert.rs)")
def insert_comment(db):
    db.command({"insert": "c", "documents": [{"_id": 2}], "comment": {"key": "value"}})
    n = db.c.count_documents({})
    return n != 1, f"{n} documents after inserting one"


@gap("collstats", "reports capped and maxSize in $collStats storageStats")
def collstats(db):
    db.create_collection("cap2", capped=True, size=4096)
    stats = list(db.cap2.aggregate([{"$collStats": {"storageStats": {}}}]))
    s = stats[0].get("storageStats", {}) if stats else {}
    return "capped" not in s, f"storageStats {s}"


@gap("chunks-unique", "accepts two fs.chunks documents with the same (files_id, n) when no index says otherwise")
def chunks_unique(db):
    chunk = {"files_id": 3, "n": 0, "data": b""}
    _, err = attempt(lambda: db["fs.chunks"].insert_many([dict(chunk, _id=1), dict(chunk, _id=2)]))
    return err is not None, err or "inserted both"


@gap("unique-upsert", "fails a findAndModify upsert that violates a unique index (DuplicateKey)")
def unique_upsert(db):
    db.c.insert_one({"_id": 1, "x": "foo"})
    db.c.create_index([("x", 1)], unique=True)
    reply, err = attempt(lambda: db.command(
        {"findAndModify": "c", "query": {"_id": 2}, "update": {"$set": {"x": "foo"}}, "upsert": True}))
    return err is None, err or f"reply {reply}, documents {list(db.c.find())}"


@gap("objectid-field", "matches an ObjectId-valued field other than _id (files_id in fs.chunks)")
def objectid_field(db):
    a, b = ObjectId("000000000000000000000001"), ObjectId("000000000000000000000002")
    db.ch.insert_many([{"_id": 1, "f": a, "n": 1}, {"_id": 2, "f": b, "n": 1}])
    n = db.ch.count_documents({"f": a, "n": 1})
    return n != 1, f"count {n}"


@gap("views", "counts the documents of a view")
def views(db):
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    db.create_collection("v", viewOn="c", pipeline=[])
    n = db.command({"count": "v"})["n"]
    return n != 2, f"count {n}"


@gap("isolation", "hides a transaction's uncommitted writes from reads outside it")
def isolation(db):
    txn = {"lsid": {"id": Binary(uuid.uuid4().bytes, 4)}, "txnNumber": 1, "autocommit": False}
    db.command(dict({"insert": "c", "documents": [{"_id": 1}], "startTransaction": True}, **txn))
    seen = list(db.c.find())
    db.client.admin.command(dict({"abortTransaction": 1}, **txn))
    return seen != [], f"a plain find saw {seen} before the abort"


@gap("txn-supersede", "aborts a session's open transaction when the session starts one with a higher txnNumber")
def txn_supersede(db):
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    for n in (1, 2):
        txn = {"lsid": lsid, "txnNumber": n, "autocommit": False, "startTransaction": True}
        reply = db.command(dict({"insert": "c", "documents": [{"_id": 1}]}, **txn))
    errors = reply.get("writeErrors")
    return bool(errors), f"the second transaction's insert: {errors or reply}"


@gap("txn-abort-on-error", "aborts a transaction whose command failed (a duplicate key): the next "
     "command in it gets NoSuchTransaction")
def txn_abort_on_error(db):
    db.c.insert_one({"_id": 1})
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    txn = {"lsid": lsid, "txnNumber": 1, "autocommit": False}
    db.command(dict({"insert": "c", "documents": [{"_id": 2}], "startTransaction": True}, **txn))
    db.command(dict({"insert": "c", "documents": [{"_id": 1}]}, **txn))
    reply, err = attempt(lambda: db.command(dict({"insert": "c", "documents": [{"_id": 3}]}, **txn)))
    return err is None or "NoSuchTransaction" not in err, err or f"the next insert: {reply}"


@gap("insert-read-concern", "takes an insert's readConcern field (the first command of a transaction) "
     "as an option; the failpoint proxy keeps it from nx-27017 (insert.rs)")
def insert_read_concern(db):
    reply = db.command({"insert": "c", "documents": [{"_id": 1}], "readConcern": {"level": "local"}})
    docs = list(db.c.find())
    return len(docs) != 1, f"n={reply.get('n')}, stored {docs}"


@gap("read-only-commit", "commits a transaction whose commands only read; the failpoint proxy "
     "commits (or aborts) a transaction nx-27017 never opened (transaction_state.rs)")
def read_only_commit(db):
    db.c.insert_one({"_id": 1})
    with db.client.start_session() as session:
        session.start_transaction()
        db.c.count_documents({}, session=session)
        _, err = attempt(session.commit_transaction)
    return err is not None, err or "commit accepted"


@gap("index-names", "lists an index under the name createIndexes gave it (x_1)")
def index_names(db):
    db.command({"createIndexes": "ix", "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    names = [i["name"] for i in db.ix.list_indexes()]
    return "x_1" not in names, f"listIndexes names {names}"


@gap("distinct-id", "answers distinct on _id; the failpoint proxy answers it from a find (distinct_id.rs)")
def distinct_id(db):
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    values, err = attempt(lambda: db.c.distinct("_id"))
    return err is not None, err or f"values {values}"


@gap("gridfs-files", "stores fs.files documents as given (dates stay dates) and honours skip on them")
def gridfs_files(db):
    files = [{"_id": i, "filename": "abc", "length": 1, "chunkSize": 4,
              "uploadDate": datetime.datetime(1970, 1, i)} for i in (1, 2, 3)]
    db["fs.files"].insert_many(files)
    newest_but_one = [d["_id"] for d in db["fs.files"].find().sort("uploadDate", -1).skip(1).limit(1)]
    date = db["fs.files"].find_one({"_id": 1})["uploadDate"]
    gap_there = newest_but_one != [2] or not isinstance(date, datetime.datetime)
    return gap_there, f"uploadDate came back as {date!r}; sort -1, skip 1 gave {newest_but_one}"


@gap("dup-key-message", "words a duplicate key error 'E11000 duplicate key error ...'; the "
     "failpoint proxy words a duplicate _id on insert so (insert.rs)")
def dup_key_message(db):
    db.c.insert_one({"_id": 1})
    _, err = attempt(lambda: db.c.insert_one({"_id": 1}))
    return "E11000" not in (err or ""), err or "no error"


@gap("api-parameters", "rejects an unknown apiVersion (APIVersionError) and, with apiStrict, a "
     "command outside API version 1 (APIStrictError); the failpoint proxy makes these checks")
def api_parameters(db):
    _, bad_version = attempt(lambda: db.command({"ping": 1, "apiVersion": "no_such_version"}))
    _, strict = attempt(lambda: db.command(
        {"distinct": "c", "key": "x", "apiVersion": "1", "apiStrict": True}))
    accepted = [what for what, err in (("unknown apiVersion", bad_version),
                                       ("strict distinct", strict)) if err is None]
    return bool(accepted), "accepted " + ", ".join(accepted) if accepted else "both refused"


@gap("clustered-index", "keeps a collection's clusteredIndex: listCollections shows it in options "
     "and listIndexes lists it under its name")
def clustered_index(db):
    spec = {"key": {"_id": 1}, "unique": True, "name": "test index"}
    _, err = attempt(lambda: db.create_collection("c", clusteredIndex=spec))
    if err:
        return True, err
    options = next(db.list_collections(filter={"name": "c"}), {}).get("options", {})
    names = [i.get("name") for i in db.c.list_indexes()]
    kept = "clusteredIndex" in options and "test index" in names
    return not kept, f"options {options}, indexes {names}"


@gap("prepare-unique", "after collMod prepareUnique on index x_1, refuses an insert that duplicates x (11000)")
def prepare_unique(db):
    db.c.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 1}])
    db.c.create_index("x")
    _, err = attempt(lambda: db.command(
        "collMod", "c", index={"keyPattern": {"x": 1}, "prepareUnique": True}))
    if err:
        return True, f"collMod: {err}"
    _, err = attempt(lambda: db.c.insert_one({"_id": 3, "x": 1}))
    return err is None or "E11000" not in err, err or "inserted"


@gap("timeseries-ids", "stores two measurements with the same _id in a time-series collection")
def timeseries_ids(db):
    _, err = attempt(lambda: db.create_collection("c", timeseries={"timeField": "t"}))
    if err:
        return True, f"create: {err}"
    t = datetime.datetime(2019, 3, 18)
    _, err = attempt(lambda: db.c.insert_many(
        [{"_id": 1, "t": t}, {"_id": 1, "t": t + datetime.timedelta(milliseconds=1)}]))
    return err is not None, err or "both stored"


@gap("validator", "after collMod validator {x: {$type: string}}, refuses an update setting x to 1 (121 DocumentValidationFailure)")
def validator(db):
    db.c.insert_one({"_id": 1, "x": "foo"})
    _, err = attempt(lambda: db.command("collMod", "c", validator={"x": {"$type": "string"}}))
    if err:
        return True, f"collMod: {err}"
    _, err = attempt(lambda: db.c.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}))
    return err is None or "121" not in err and "validation" not in err.lower(), err or "updated"


@gap("map-reduce", "runs mapReduce's JavaScript: with out: {inline: 1} it answers the reduced "
     "documents in `results`")
def map_reduce(db):
    from bson.code import Code
    db.c.insert_many([{"_id": 1, "x": 0}, {"_id": 2, "x": 1}, {"_id": 3, "x": 2}])
    reply, err = attempt(lambda: db.command(
        "mapReduce", "c",
        map=Code("function inc() { return emit(0, this.x + 1) }"),
        reduce=Code("function sum(key, values) { return values.reduce((acc, x) => acc + x); }"),
        out={"inline": 1}))
    if err:
        return True, err
    results = reply.get("results")
    ran = results == [{"_id": 0, "value": 6}]
    shown = {k: v for k, v in reply.items() if k not in ("$clusterTime", "operationTime")}
    return not ran, f"answered {shown}"


def first_change(stream):
    """The next change, waiting a few awaits (None when none comes)."""
    for _ in range(10):
        change = stream.try_next()
        if change is not None:
            return change
    return None


@gap("cs-update-description", "gives an update event an updateDescription (updatedFields, removedFields, truncatedArrays)")
def cs_update_description(db):
    db.c.insert_one({"_id": 1})
    with db.c.watch(max_await_time_ms=100) as stream:
        db.c.update_one({"_id": 1}, {"$set": {"x": 1}})
        change = first_change(stream) or {}
    desc = change.get("updateDescription")
    return not isinstance(desc, dict), f"updateDescription {desc!r}"


@gap("cs-pipeline", "applies the stages after $changeStream ($project, $addFields) and refuses an unknown stage (40324)")
def cs_pipeline(db):
    with db.c.watch([{"$addFields": {"newField": "v"}}], max_await_time_ms=100) as stream:
        db.c.insert_one({"_id": 1})
        change = first_change(stream) or {}
    stream, err = attempt(lambda: db.c.watch([{"$unsupported": "foo"}]))
    if stream is not None:
        stream.close()
    applied = change.get("newField") == "v"
    return not applied or err is None, f"newField {change.get('newField')!r}, unknown stage: {err or 'accepted'}"


@gap("cs-db-watch", "reports a collection's changes to a database-level or client-level change stream")
def cs_db_watch(db):
    seen = []
    for target in (db, db.client):
        with target.watch(max_await_time_ms=100) as stream:
            db.c.insert_one({})
            seen.append(first_change(stream) is not None)
    return not all(seen), f"database stream saw a change: {seen[0]}, client stream: {seen[1]}"


@gap("cs-objectid", "gives an insert event's fullDocument its ObjectId _id as an ObjectId")
def cs_objectid(db):
    with db.c.watch(max_await_time_ms=100) as stream:
        db.c.insert_one({"x": 1})
        change = first_change(stream) or {}
    _id = change.get("fullDocument", {}).get("_id")
    return not isinstance(_id, ObjectId), f"fullDocument._id {_id!r}"


@gap("cs-ddl-events", "reports createIndexes, dropIndexes, collMod (showExpandedEvents), rename and drop to a collection's change stream")
def cs_ddl_events(db):
    db.c.insert_one({"_id": 1})
    steps = [
        ("createIndexes", lambda: db.c.create_index("k")),
        ("dropIndexes", lambda: db.c.drop_index("k_1")),
        ("modify", lambda: db.command({"collMod": "c", "validator": {}})),
        ("rename", lambda: db.c.rename("r")),
    ]
    missing = []
    with db.c.watch(max_await_time_ms=100, show_expanded_events=True) as stream:
        for name, step in steps:
            attempt(step)
            if first_change(stream) is None:
                missing.append(name)
    with db.r.watch(max_await_time_ms=100) as stream:
        db.r.drop()
        if first_change(stream) is None:
            missing.append("drop")
    return bool(missing), f"no event for {', '.join(missing) or 'none'}"


@gap("cs-expanded-fields", "adds collectionUUID to an insert event when showExpandedEvents is true")
def cs_expanded_fields(db):
    db.create_collection("c")
    with db.c.watch(max_await_time_ms=100, show_expanded_events=True) as stream:
        db.c.insert_one({"_id": 1})
        change = first_change(stream) or {}
    return "collectionUUID" not in change, f"fields {sorted(change)}"


@gap("cs-required-images", "fails a change stream with fullDocument/fullDocumentBeforeChange 'required' when the collection keeps no images")
def cs_required_images(db):
    db.c.insert_one({"_id": 1})
    outcomes = []
    for option in ({"full_document": "required"}, {"full_document_before_change": "required"}):
        with db.c.watch(max_await_time_ms=100, **option) as stream:
            db.c.update_one({"_id": 1}, {"$inc": {"x": 1}})
            change, err = attempt(lambda: first_change(stream))
            outcomes.append(err or f"a change ({change and change.get('operationType')})")
    return not all(o.startswith("OperationFailure") for o in outcomes), "; ".join(outcomes)


@gap("stray-document-field", "ignores a document-valued field it does not know in an insert (readConcern)")
def stray_document_field(db):
    db.command({"insert": "c", "documents": [{"_id": 1}], "readConcern": {"level": "local"}})
    docs = list(db.c.find({}, {"_id": 0}))
    return docs != [], f"the collection also holds {docs}" if docs else "ignored"


@gap("unsatisfiable-w", "answers w:10 on a one-member replica set with writeConcernError 100 (UnsatisfiableWriteConcern)")
def unsatisfiable_w(db):
    reply = db.command({"insert": "c", "documents": [{"_id": 1}], "writeConcern": {"w": 10}})
    return "writeConcernError" not in reply, f"reply {reply}"


@gap("count-in-transaction", "refuses count in a transaction (50851 OperationNotSupportedInTransaction)")
def count_in_transaction(db):
    txn = {"lsid": {"id": Binary(uuid.uuid4().bytes, 4)}, "txnNumber": 1, "autocommit": False}
    db.command({"insert": "c", "documents": [{"_id": 1}], "startTransaction": True, **txn})
    reply, err = attempt(lambda: db.command({"count": "c", **txn}))
    db.client.admin.command({"commitTransaction": 1, **txn})
    return err is None, err or f"reply {reply}"


@gap("empty-collection-filter", "refuses a malformed filter ({$or: true}) on an empty collection")
def empty_collection_filter(db):
    db.create_collection("empty")
    found, err = attempt(lambda: list(db.empty.find({"$or": True})))
    return err is None, err or f"found {found}"


@gap("list-batch-size", "honours cursor.batchSize on listCollections and listIndexes (a getMore fetches the rest)")
def list_batch_size(db):
    for name in "abc":
        db[name].insert_one({})
    db.a.create_index("x")
    colls = db.command({"listCollections": 1, "cursor": {"batchSize": 2}})["cursor"]
    idx = db.command({"listIndexes": "a", "cursor": {"batchSize": 1}})["cursor"]
    sizes = (len(colls["firstBatch"]), len(idx["firstBatch"]))
    return sizes != (2, 1), f"first batches of {sizes[0]} collections and {sizes[1]} indexes"


PROXY_GAPS = [
    ("no-shards", "the sharded cluster is two proxied mongoses in front of one nx-27017: no shardCollection command or change event"),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    client = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000)
    present = 0
    for name, mongod, probe in GAPS:
        db = client[f"nx_gaps_{name.replace('-', '_')}"]
        client.drop_database(db.name)
        try:
            there, observed = probe(db)
        except Exception as e:  # a probe that breaks says so instead of stopping the rest
            there, observed = True, f"probe failed: {type(e).__name__}: {e}"[:160]
        finally:
            client.drop_database(db.name)
        present += there
        status = "GAP  " if there else "fixed"
        print(f"{status} {name:<20} mongod {mongod}; nx-27017: {observed}")
    for name, what in PROXY_GAPS:
        print(f"proxy {name:<20} {what}")
    print(f"{present} of {len(GAPS)} nx-27017 gaps present")


if __name__ == "__main__":
    main()
