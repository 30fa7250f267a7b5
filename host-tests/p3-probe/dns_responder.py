"""A loopback DNS server for the p3 probe, UDP and TCP on one port.
A records: db.p3.test and tc.p3.test -> 127.0.0.1; tc.p3.test answers over
UDP with TC=1 and no records (the client must ask again over TCP).
silent.p3.test: never answered. Everything else: NXDOMAIN. Counts queries per transport in its log lines."""
import socket, struct, sys, threading

PORT = int(sys.argv[1])
A = {"db.p3.test": "127.0.0.1", "tc.p3.test": "127.0.0.1"}


def answer(q, udp):
    qid, flags, qd = struct.unpack(">HHH", q[:6])
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1 : i + 1 + q[i]].decode())
        i += 1 + q[i]
    qtype, _ = struct.unpack(">HH", q[i + 1 : i + 5])
    question = q[12 : i + 5]
    name = ".".join(labels).lower()
    print(f"{'udp' if udp else 'tcp'} query {name} type {qtype}", flush=True)
    rd = flags & 0x0100
    if name == "silent.p3.test":
        return None
    if name not in A:
        return struct.pack(">HHHHHH", qid, 0x8083 | rd, 1, 0, 0, 0) + question
    if udp and name.startswith("tc."):
        return struct.pack(">HHHHHH", qid, 0x8280 | rd, 1, 0, 0, 0) + question
    if qtype != 1:
        return struct.pack(">HHHHHH", qid, 0x8080 | rd, 1, 0, 0, 0) + question
    rr = struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(A[name])
    return struct.pack(">HHHHHH", qid, 0x8080 | rd, 1, 1, 0, 0) + question + rr


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", PORT))
    while True:
        q, peer = s.recvfrom(4096)
        r = answer(q, True)
        if r is not None:
            s.sendto(r, peer)


def tcp_conn(c):
    with c:
        n = struct.unpack(">H", c.recv(2))[0]
        q = b""
        while len(q) < n:
            q += c.recv(n - len(q))
        r = answer(q, False)
        c.sendall(struct.pack(">H", len(r)) + r)


threading.Thread(target=udp, daemon=True).start()
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", PORT))
t.listen(8)
while True:
    c, _ = t.accept()
    threading.Thread(target=tcp_conn, args=(c,), daemon=True).start()
