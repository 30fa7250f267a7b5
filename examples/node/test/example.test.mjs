// Runs example.mjs in a child process (the component blocks its event loop,
// not this one's) against the test server in MONGO_WASI_URI, and against a
// silent server: a loopback listener that accepts and never answers, where
// timeoutMS must end the first operation in time. `cargo xtask test` runs it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";

const example = fileURLToPath(new URL("../example.mjs", import.meta.url));
// A hung child is killed after this long, and the test fails.
const HANG_MS = 60_000;

function run(uri) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, [example, uri], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), HANG_MS);
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: performance.now() - started });
    });
  });
}

test("connects, inserts, finds and prints against the test server", { skip: !process.env.MONGO_WASI_URI && "MONGO_WASI_URI not set" }, async () => {
  const r = await run(process.env.MONGO_WASI_URI);
  assert.equal(r.stderr, "", "no error");
  assert.equal(r.code, 0);
  assert.equal(
    r.stdout,
    [
      "inserted 3 documents",
      "found Ada Lovelace, born 1815: mathematics, computing",
      "found Grace Hopper, born 1906: computing",
      "findOne: Emmy Noether has _id ObjectId",
      "count: 3",
      "insertMany: duplicate-key at index 1 (code 11000), 1 inserted",
      "",
    ].join("\n"),
  );
});

test("timeoutMS ends an operation against a server that never answers", async () => {
  const sockets = [];
  const server = net.createServer((s) => sockets.push(s)); // accepts, never writes
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  try {
    const r = await run(`mongodb://127.0.0.1:${port}/?timeoutMS=500`);
    assert.equal(r.signal, null, `the example hung (killed after ${HANG_MS} ms): ${r.stderr}`);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const m = r.stderr.match(/^failed after (\d+) ms \(cpu (\d+) ms\): (\S+): /);
    assert.ok(m, `unexpected output: ${r.stderr}`);
    const [ms, cpu, kind] = [Number(m[1]), Number(m[2]), m[3]];
    assert.equal(kind, "timeout", r.stderr);
    // 500 ms, and a loaded machine's slack; never more than 5 s.
    assert.ok(ms >= 500 && ms <= 5000, `failed after ${ms} ms`);
    // The wait sleeps in poll: a driver trusting the shim's stale ready()
    // spun through the whole timeout (cpu close to the elapsed time).
    assert.ok(cpu <= ms / 2, `busy-waited: ${cpu} ms of CPU in ${ms} ms`);
    assert.ok(sockets.length >= 1, "the driver connected to the silent server");
  } finally {
    sockets.forEach((s) => s.destroy());
    server.close();
  }
});
