// A small JavaScript face over the transpiled driver component (out/, made by
// transpile.mjs): documents go in and come out as JavaScript objects (the
// component takes and gives raw BSON, converted here with the `bson`
// package), timeouts are numbers of milliseconds, and a failed call throws a
// MongoWasiError carrying the WIT `error` record's fields.
//
// Every call runs synchronously: the component blocks the event loop until
// the operation finishes or its timeoutMS passes (the WASI shim waits in a
// worker thread). Run it in a worker of its own if the event loop must stay
// free.
import { client as clientApi } from "./out/mongo_wasi.js";
import { serialize, deserialize } from "bson";

/** A failed driver call: `kind` is the WIT error-kind ("timeout", "network", "server", ...). */
export class MongoWasiError extends Error {
  /** `e`: the WIT `error`; `bulk`: insertMany's `bulk-write-error` around it. */
  constructor(e, bulk) {
    super(`${e.kind}: ${e.message}`);
    this.name = "MongoWasiError";
    this.kind = e.kind;
    this.code = e.code;
    this.codeName = e.codeName;
    this.labels = e.labels;
    this.reason = e.cause; // the error behind a timeout, as text
    this.reply = e.reply === undefined ? undefined : deserialize(e.reply);
    if (bulk) {
      this.writeErrors = bulk.writeErrors.map(({ index, code, codeName, message }) => ({
        index,
        code,
        codeName,
        message,
      }));
      this.insertedIds = bulk.partialResult?.insertedIds.map((i) => object(i.id).v);
    }
  }
}

/** Calls into the component, turning its error record into a MongoWasiError. */
function call(f) {
  try {
    return f();
  } catch (e) {
    // jco 1.x throws a WIT `result`'s error record as it is; older jco wrapped
    // it in a ComponentError's `payload`.
    const p = e?.payload ?? e;
    // insert-many fails with a bulk-write-error: the error and the write errors.
    const bulk = p && typeof p.error === "object" ? p : undefined;
    const err = bulk ? bulk.error : p;
    if (err && typeof err.kind === "string" && typeof err.message === "string") {
      throw new MongoWasiError(err, bulk);
    }
    throw e;
  }
}

const bson = (doc) => serialize(doc);
const object = (bytes) => deserialize(bytes);
const u64 = (ms) => (ms === undefined || ms === null ? undefined : BigInt(ms));
const s64 = u64;

export class MongoClient {
  #client;
  constructor(client) {
    this.#client = client;
  }
  /** Parses the URI; I/O starts with the first operation. `timeoutMS` overrides the URI's. */
  static connect(uri, { timeoutMS } = {}) {
    const options = { timeoutMs: u64(timeoutMS), monitorCommands: false };
    return new MongoClient(call(() => clientApi.Client.connect(uri, options)));
  }
  db(name, { timeoutMS } = {}) {
    return new Db(this.#client.database(name, { timeoutMs: u64(timeoutMS) }));
  }
  /** Ends the server sessions and closes the connections. */
  close() {
    this.#client.close();
  }
}

export class Db {
  #db;
  constructor(db) {
    this.#db = db;
  }
  collection(name, { timeoutMS } = {}) {
    return new Collection(this.#db.collection(name, { timeoutMs: u64(timeoutMS) }));
  }
  command(command, { timeoutMS } = {}) {
    return object(call(() => this.#db.runCommand(bson(command), { timeoutMs: u64(timeoutMS) })));
  }
  gridFSBucket({ bucketName, chunkSizeBytes, timeoutMS } = {}) {
    const options = { bucketName, chunkSizeBytes, timeoutMs: u64(timeoutMS) };
    return new GridFSBucket(this.#db.gridfsBucket(options));
  }
}

const op = ({ timeoutMS, ...extra } = {}) => ({
  timeoutMs: u64(timeoutMS),
  extra: Object.keys(extra).length ? bson(extra) : undefined,
});

export class Collection {
  #coll;
  constructor(coll) {
    this.#coll = coll;
  }
  get namespace() {
    return this.#coll.namespace();
  }
  insertOne(doc, options) {
    const r = call(() => this.#coll.insertOne(bson(doc), op(options)));
    return { insertedId: object(r.insertedId).v };
  }
  insertMany(docs, options) {
    const r = call(() => this.#coll.insertMany(docs.map(bson), op(options)));
    const ids = r.insertedIds.map((id) => object(id).v);
    return { insertedCount: ids.length, insertedIds: ids };
  }
  /** A cursor: iterate it with for...of, or take `toArray()`. */
  find(filter = {}, { timeoutMS, sort, projection, skip, limit, batchSize } = {}) {
    const options = {
      timeoutMs: u64(timeoutMS),
      sort: sort && bson(sort),
      projection: projection && bson(projection),
      skip: s64(skip),
      limit: s64(limit),
      batchSize,
    };
    return new Cursor(call(() => this.#coll.find(bson(filter), options)));
  }
  findOne(filter = {}, { timeoutMS, sort, projection } = {}) {
    const options = { timeoutMs: u64(timeoutMS), sort: sort && bson(sort), projection: projection && bson(projection) };
    const doc = call(() => this.#coll.findOne(bson(filter), options));
    return doc === undefined ? null : object(doc);
  }
  updateOne(filter, update, options) {
    const spec = { tag: "document", val: bson(update) };
    const r = call(() => this.#coll.updateOne(bson(filter), spec, op(options)));
    return { matchedCount: Number(r.matchedCount), modifiedCount: Number(r.modifiedCount) };
  }
  deleteMany(filter, options) {
    const r = call(() => this.#coll.deleteMany(bson(filter), op(options)));
    return { deletedCount: Number(r.deletedCount) };
  }
  countDocuments(filter = {}, options) {
    return Number(call(() => this.#coll.countDocuments(bson(filter), op(options))));
  }
  createIndex(keys, options) {
    return call(() => this.#coll.createIndex(bson(keys), op(options)));
  }
  drop(options) {
    call(() => this.#coll.drop(op(options)));
  }
}

export class Cursor {
  #cursor;
  constructor(cursor) {
    this.#cursor = cursor;
  }
  *[Symbol.iterator]() {
    for (;;) {
      const batch = call(() => this.#cursor.nextBatch());
      yield* batch.documents.map(object);
      if (batch.exhausted) return;
    }
  }
  toArray() {
    return [...this];
  }
  close() {
    call(() => this.#cursor.close(undefined));
  }
}

export class GridFSBucket {
  #bucket;
  constructor(bucket) {
    this.#bucket = bucket;
  }
  /** Stores `data` (a Uint8Array) as a file; returns its id. */
  uploadFromBytes(filename, data, { metadata, timeoutMS } = {}) {
    const options = { metadata: metadata && bson(metadata), timeoutMs: u64(timeoutMS) };
    return object(call(() => this.#bucket.uploadFromBytes(filename, data, options))).v;
  }
  /** The newest revision of `filename`, as a Uint8Array. */
  downloadByName(filename, { timeoutMS } = {}) {
    return call(() => this.#bucket.downloadByName(filename, { timeoutMs: u64(timeoutMS) }));
  }
}
