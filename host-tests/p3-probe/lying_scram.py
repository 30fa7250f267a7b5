"""A SCRAM-SHA-256 server that lies (p3-probe section 4): every connection's
hello is answered as a standalone's, its speculative authentication with a
server-first message asking for 10,000,000 PBKDF2 iterations; then silence.
Usage: python lying_scram.py PORT (PyMongo's bson; the venv's python)."""
import socket
import struct
import sys
import threading

import bson

ITERATIONS = 10_000_000


def read_exact(c, n):
    buf = b""
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def serve(c):
    held = []
    try:
        while True:
            header = read_exact(c, 16)
            length, request_id, _, opcode = struct.unpack("<iiii", header)
            body = read_exact(c, length - 16)
            if opcode != 2013:  # OP_MSG only, as the driver sends
                return
            doc = bson.decode(body[5 : 5 + struct.unpack("<i", body[5:9])[0]])
            if "hello" not in doc and "isMaster" not in doc and "ismaster" not in doc:
                held.append(doc)  # saslStart and the rest: never answered
                continue
            reply = {
                "isWritablePrimary": True,
                "helloOk": True,
                "maxWireVersion": 21,
                "minWireVersion": 0,
                "maxBsonObjectSize": 16777216,
                "maxMessageSizeBytes": 48000000,
                "maxWriteBatchSize": 100000,
                "ok": 1.0,
            }
            spec = doc.get("speculativeAuthenticate")
            if spec is not None:
                nonce = bytes(spec["payload"]).decode().split(",r=")[1]
                first = f"r={nonce}server,s=QSXCR+Q6sek8bf92,i={ITERATIONS}"
                reply["speculativeAuthenticate"] = {
                    "conversationId": 1,
                    "done": False,
                    "payload": bson.Binary(first.encode()),
                }
            out = struct.pack("<i", 0) + b"\x00" + bson.encode(reply)
            c.sendall(struct.pack("<iiii", 16 + len(out), 0, request_id, 2013) + out)
    except (OSError, EOFError, ValueError, KeyError, IndexError):
        pass


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
