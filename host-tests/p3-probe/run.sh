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
TLS_PORT=${TLS_PORT:-47054}
SLOW_PORT=${SLOW_PORT:-47055}
PROXY_PORT=${PROXY_PORT:-47056}
# The failpoint proxy (host-tests/proxy), built in the driver's target directory.
PROXY=${PROXY:-../../target/debug/failpoint-proxy}
[ -x "$PROXY" ] || (cd ../.. && cargo build -q -p mongo-wasi-proxy --bin failpoint-proxy)
SCRAM_PORT=${SCRAM_PORT:-47057}

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
# A test CA and a localhost certificate it signed, for a TLS relay to nx-27017.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/ca.key" -out "$TMP/ca.pem" -days 1 \
    -subj "/CN=p3-probe CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$TMP/key.pem" -out "$TMP/leaf.csr" \
    -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" \
    >"$TMP/ext.cnf"
openssl x509 -req -in "$TMP/leaf.csr" -CA "$TMP/ca.pem" -CAkey "$TMP/ca.key" -CAcreateserial \
    -out "$TMP/cert.pem" -days 1 -extfile "$TMP/ext.cnf" 2>/dev/null
# Terminates TLS and relays each connection to nx-27017.
python3 -c '
import socket, ssl, sys, threading
lp, bp, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(d + "/cert.pem", d + "/key.pem")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", lp)); s.listen(32)
def pipe(a, b):
    try:
        while True:
            chunk = a.recv(65536)
            if not chunk: break
            b.sendall(chunk)
    except OSError: pass
    finally:
        try: b.close()
        except OSError: pass
while True:
    c, _ = s.accept()
    try: t = ctx.wrap_socket(c, server_side=True)
    except (OSError, ssl.SSLError): continue
    u = socket.create_connection(("127.0.0.1", bp))
    threading.Thread(target=pipe, args=(t, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, t), daemon=True).start()
' "$TLS_PORT" "$NX_PORT" "$TMP" &
TLS_PID=$!
# Relays each connection to nx-27017, holding every chunk 2 ms: each read and
# connect of the driver then waits, so each is a point where a caller can cancel.
python3 -c '
import socket, sys, threading, time
lp, bp = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", lp)); s.listen(64)
def pipe(a, b):
    try:
        while True:
            chunk = a.recv(65536)
            if not chunk: break
            time.sleep(0.002); b.sendall(chunk)
    except OSError: pass
    finally:
        for x in (a, b):
            try: x.close()
            except OSError: pass
while True:
    c, _ = s.accept()
    u = socket.create_connection(("127.0.0.1", bp))
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
' "$SLOW_PORT" "$NX_PORT" &
SLOW_PID=$!
# failCommand (blockConnection) in front of nx-27017, for section 5.
"$PROXY" --backend "127.0.0.1:$NX_PORT" --listen "127.0.0.1:$PROXY_PORT" >"$TMP/proxy.log" 2>&1 &
PROXY_PID=$!
# A SCRAM server asking for 10,000,000 iterations (PyMongo's bson: the venv's python).
"$VENV/python" lying_scram.py "$SCRAM_PORT" &
SCRAM_PID=$!
cleanup() {
    kill "$SILENT_PID" "$TRICKLE_PID" "$DNS_PID" "$TLS_PID" "$SLOW_PID" "$PROXY_PID" "$SCRAM_PID" 2>/dev/null || true
    "$VENV/nx-27017" --stop --pid-file "$TMP/nx.pid" || true
    rm -rf "$TMP"
}
trap cleanup EXIT
sleep 1
# A proxy that could not listen (its port taken) would leave the pool section
# talking to a closed port, or to whatever holds it: stop here instead.
if ! kill -0 "$PROXY_PID" 2>/dev/null; then
    echo "the failpoint proxy is not running:" >&2
    cat "$TMP/proxy.log" >&2
    exit 1
fi

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

# Section 3: TLS (rustls over the 0.3 TCP stream) through the relay, and a
# TLS handshake with the silent server bounded by timeoutMS.
CA_PEM="$(cat "$TMP/ca.pem")" "$VENV/wasmtime" run -S cli -S inherit-network --env CA_PEM \
    "$WASM" tls "$TLS_PORT" "$SILENT_PORT"

# Section 4: cancellation safety (src/cancel.rs): each await of find, insert,
# commit and a GridFS upload, dropped in turn; the pool, the sessions and the
# next operation are checked after each. Through the 2 ms relay, so that each
# await of I/O is pending at least once.
"$VENV/wasmtime" run -S cli -S inherit-network "$WASM" cancel "$SLOW_PORT"

# Section 5: CMAP on WASI 0.3 through the failpoint proxy (src/pool.rs): the
# FIFO wait queue, a waiter's timeout beside others, a pending reply drained in
# the background, interruptInUseConnections, minPoolSize, maxIdleTimeMS.
"$VENV/wasmtime" run -S cli -S inherit-network "$WASM" pool "$PROXY_PORT"

# Section 6: PBKDF2 under a lying SCRAM server's iteration count times out
# at timeoutMS and yields between slices: another client's pings go on.
"$VENV/wasmtime" run -S cli -S inherit-network "$WASM" scram "$SCRAM_PORT" "$NX_PORT"
