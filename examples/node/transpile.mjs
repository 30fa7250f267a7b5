// Transpiles the driver component into an ES module and its core wasm files
// under out/ (what `npx @bytecodealliance/jco transpile <wasm> -o out` does;
// jco-transpile is that command's library, without jco's other tools).
//
//   node transpile.mjs [path/to/mongo-wasi.wasm]
//
// The default path is the component `cargo xtask build` writes. The output
// imports the WASI shim `@bytecodealliance/preview2-shim`, which Node finds in
// this folder's node_modules (`npm ci`).
import { transpile, writeFiles } from "@bytecodealliance/jco-transpile";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const wasm =
  process.argv[2] ??
  path.join(here, "../../target/component/mongo-wasi.wasm");
const outDir = path.join(here, "out");

const started = performance.now();
const { files } = await transpile(wasm, { name: "mongo_wasi", outDir });
await writeFiles(files);
const ms = Math.round(performance.now() - started);
console.log(`transpiled ${wasm} into ${outDir} (${Object.keys(files).length} files, ${ms} ms)`);
