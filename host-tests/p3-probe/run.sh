#!/usr/bin/env bash
# Builds the probe and runs it (runtime::p3, then the whole driver) against nx-27017 and a silent listener on
# loopback; stops both (by PID) however it ends.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-../../.work/venv/bin}
TMP=$(mktemp -d)
NX_PORT=${NX_PORT:-47017}
SILENT_PORT=${SILENT_PORT:-47018}
TRICKLE_PORT=${TRICKLE_PORT:-47019}
DNS_PORT=${DNS_PORT:-47053}

cargo build --target wasm32-wasip2 --release
WASM=${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/p3_probe.wasm

"$VENV/nx-27017" -d --host 127.0.0.1 -p "$NX_PORT" --db memory \
    --pid-file "$TMP/nx.pid" --log-file "$TMP/nx.log"
# Accepts and never answers (keeps the connections open).
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
held = []
while True:
    c, _ = s.accept(); held.append(c)
' "$SILENT_PORT" &
SILENT_PID=$!
# Sends 0, 1, 2, ... one byte every 5 ms to each connection.
python3 -c '
import socket, sys, threading, time
def feed(c):
    i = 0
    try:
        while True:
            c.sendall(bytes([i % 256])); i += 1; time.sleep(0.005)
    except OSError:
        pass
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    c, _ = s.accept(); threading.Thread(target=feed, args=(c,), daemon=True).start()
' "$TRICKLE_PORT" &
TRICKLE_PID=$!
python3 dns_responder.py "$DNS_PORT" >"$TMP/dns.log" 2>&1 &
DNS_PID=$!
cleanup() {
    kill "$SILENT_PID" "$TRICKLE_PID" "$DNS_PID" 2>/dev/null || true
    "$VENV/nx-27017" --stop --pid-file "$TMP/nx.pid" || true
    rm -rf "$TMP"
}
trap cleanup EXIT
sleep 1

# -S p3 and component-model-async are on by default in wasmtime 49.
# LOOKUP=0 leaves name lookup denied (5d/5e then show the denial).
LOOKUP_FLAG=(-S allow-ip-name-lookup)
[ "${LOOKUP:-1}" = 0 ] && LOOKUP_FLAG=()
"$VENV/wasmtime" run -S cli -S inherit-network "${LOOKUP_FLAG[@]}" \
    "$WASM" "$NX_PORT" "$SILENT_PORT" "$TRICKLE_PORT" "$DNS_PORT"
echo "DNS server log:"; cat "$TMP/dns.log"

# Section 2: the whole driver (src/driver.rs): one client, 16 operations, a
# second client timing out against the silent server. `seq` runs the 16 one
# after another, `concurrent` joins them on the one client (needs main's
# a0aa0eb: no topology borrow across an await; before it, "already borrowed").
for mode in ${DRIVER_MODES:-seq concurrent}; do
    "$VENV/wasmtime" run -S cli -S inherit-network "${LOOKUP_FLAG[@]}" \
        "$WASM" driver "$NX_PORT" "$SILENT_PORT" "$mode"
done
