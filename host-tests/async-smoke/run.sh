#!/usr/bin/env bash
# Builds the smoke command, composes it with the WASI 0.3 driver component
# (target/component/mongo-wasi-async.wasm, from `cargo xtask build`) and runs it
# against nx-27017 on loopback; stops the server (by PID) however it ends.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-../../.work/venv/bin}
NX_PORT=${NX_PORT:-47931}
ROOT=$(cd ../.. && pwd)
DRIVER=${DRIVER:-$ROOT/target/component/mongo-wasi-async.wasm}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=$TARGET/composed
mkdir -p "$OUT"

cargo build --target wasm32-wasip2 --release
# wasm-tools compose wants kebab-case names for the definitions it plugs in.
cp "$DRIVER" "$OUT/mongo-wasi-async.wasm"
"$VENV/wasm-tools" compose "$TARGET/wasm32-wasip2/release/async_smoke.wasm" \
    -d "$OUT/mongo-wasi-async.wasm" -o "$OUT/async-smoke.wasm"
"$VENV/wasm-tools" validate "$OUT/async-smoke.wasm"

# Our own server, never someone else's on the same port.
if python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$NX_PORT" 2>/dev/null; then
    echo "port $NX_PORT is in use: set NX_PORT" >&2
    exit 1
fi
PID_FILE=$(mktemp -u /tmp/async-smoke-nx.XXXXXX.pid)
"$VENV/nx-27017" -d --host 127.0.0.1 -p "$NX_PORT" --db memory \
    --pid-file "$PID_FILE" --log-file "${PID_FILE%.pid}.log"
trap '"$VENV/nx-27017" --stop --pid-file "$PID_FILE" || true' EXIT
sleep 1

# Component-model-async and WASI 0.3 are on by default in wasmtime 49; Rust
# std still imports WASI 0.2's wasi:cli, hence -S cli.
"$VENV/wasmtime" run -S cli -S inherit-network "$OUT/async-smoke.wasm" \
    "mongodb://127.0.0.1:$NX_PORT/"
