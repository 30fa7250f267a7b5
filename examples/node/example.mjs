// The mongo-wasi driver component running in Node.js: connect, insert, find,
// print.
//
//   npm ci && node transpile.mjs && node example.mjs mongodb://127.0.0.1:27017/
//
// The URI's timeoutMS (e.g. `?timeoutMS=500`) bounds each operation: against
// a server that never answers, the first one fails with a timeout error.
import { MongoClient } from "./mongo-wasi.mjs";

const uri = process.argv[2] ?? "mongodb://127.0.0.1:27017/";
const client = MongoClient.connect(uri);
let started = performance.now();
let cpu = process.cpuUsage();
try {
  const people = client.db("node_example").collection("people");
  people.drop();
  const { insertedCount } = people.insertMany([
    { name: "Ada Lovelace", born: 1815, fields: ["mathematics", "computing"] },
    { name: "Grace Hopper", born: 1906, fields: ["computing"] },
    { name: "Emmy Noether", born: 1882, fields: ["mathematics", "physics"] },
  ]);
  console.log(`inserted ${insertedCount} documents`);
  [started, cpu] = [performance.now(), process.cpuUsage()];
  const found = people.find({ fields: "computing" }, { sort: { born: 1 }, projection: { _id: 0 } });
  for (const person of found) {
    console.log(`found ${person.name}, born ${person.born}: ${person.fields.join(", ")}`);
  }
  [started, cpu] = [performance.now(), process.cpuUsage()];
  const noether = people.findOne({ name: "Emmy Noether" });
  console.log(`findOne: ${noether.name} has _id ${noether._id.constructor.name}`);
  [started, cpu] = [performance.now(), process.cpuUsage()];
  console.log(`count: ${people.countDocuments({})}`);
  [started, cpu] = [performance.now(), process.cpuUsage()];
  try {
    people.insertMany([{ _id: 1, name: "Alan Turing" }, { _id: 1, name: "Alan Turing" }]);
  } catch (e) {
    if (!e.writeErrors) throw e;
    const [w] = e.writeErrors;
    console.log(`insertMany: ${e.kind} at index ${w.index} (code ${w.code}), ${e.insertedIds.length} inserted`);
  }
} catch (e) {
  // `kind` is the WIT error-kind; the times are those of the failed call
  // (CPU: this process's threads, the shim's I/O worker included).
  const ms = Math.round(performance.now() - started);
  const used = process.cpuUsage(cpu);
  const cpuMs = Math.round((used.user + used.system) / 1000);
  console.error(`failed after ${ms} ms (cpu ${cpuMs} ms): ${e.message}${e.reason ? ` (cause: ${e.reason})` : ""}`);
  process.exitCode = 1;
} finally {
  client.close();
}
