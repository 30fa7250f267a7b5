#!/usr/bin/env bash
# Builds the runner and runs the CMAP cmap-format spec tests through it against
# the failpoint proxy in front of nx-27017; stops both (by PID) however it ends.
# `cargo xtask cmap` does the same (and writes a JSON report); this is for a
# quick manual run: TESTS=dir of the JSON files, FILTER=a file name substring.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-../../.work/venv/bin}
SPEC=${MONGO_WASI_SPEC_TESTS:-../../../shared/spec-tests}
TESTS=${TESTS:-$SPEC/connection-monitoring-and-pooling/tests/cmap-format}
TMP=$(mktemp -d)
NX_PORT=${NX_PORT:-47117}
PROXY_PORT=${PROXY_PORT:-47118}
PROXY=${PROXY:-../../target/debug/failpoint-proxy}
[ -x "$PROXY" ] || (cd ../.. && cargo build -q -p mongo-wasi-proxy --bin failpoint-proxy)
TARGET=${CARGO_TARGET_DIR:-../../target/p3-probe}
cargo build --locked --target wasm32-wasip2 --release --target-dir "$TARGET"
WASM=$TARGET/wasm32-wasip2/release/p3_cmap.wasm
"$VENV/nx-27017" -d --host 127.0.0.1 -p "$NX_PORT" --db memory \
    --pid-file "$TMP/nx.pid" --log-file "$TMP/nx.log"
"$PROXY" --backend "127.0.0.1:$NX_PORT" --listen "127.0.0.1:$PROXY_PORT" >"$TMP/proxy.log" 2>&1 &
PROXY_PID=$!
cleanup() {
    kill "$PROXY_PID" 2>/dev/null || true
    "$VENV/nx-27017" --stop --pid-file "$TMP/nx.pid" || true
    rm -rf "$TMP"
}
trap cleanup EXIT
sleep 1
"$VENV/wasmtime" run -S cli -S inherit-network --dir "$TESTS::/tests" \
    "$WASM" "$PROXY_PORT" /tests "${FILTER:-}"
