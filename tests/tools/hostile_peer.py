#!/usr/bin/env python3
"""tests/tools/hostile_peer.py: peers that misbehave on a TCP server (a shard-server's data plane, an HTTP port).

    hostile_peer.py idle HOST PORT N SECONDS     open N connections, send nothing, keep them SECONDS (or until
                                                 the server closes them all); prints "opened K" once they are
                                                 open, then "closed C of K after S s" at the end
    hostile_peer.py trickle HOST PORT BYTES GAP  send BYTES (hex) one byte every GAP seconds, then nothing; prints
                                                 "closed after S s" once the server closes the connection
    hostile_peer.py stall HOST PORT LEN          send a frame's length prefix of LEN bytes and 10 bytes of it,
                                                 then nothing; prints "closed after S s" likewise
    hostile_peer.py noread HOST PORT S,S.. SECS  ask for the shards' parameters (gets of version 0, the shards in
                                                 turn) 200 times, read no reply for SECS seconds (the server's side
                                                 shows what it did)
    hostile_peer.py flood HOST PORT SHARD MIB    ask for version 1 of SHARD (a get that waits for a round to
                                                 close) and send MIB MiB more at once, for at most 5 s, reading
                                                 nothing; prints "sent M MiB" (the server may stop reading),
                                                 then holds the connection until the server closes it
    hostile_peer.py slowframe HOST PORT LEN GAP  send a frame's length prefix of LEN bytes and 10 bytes of it,
                                                 then one more byte every GAP seconds; prints "closed after S s"
    hostile_peer.py slowread HOST PORT SHARD SECS GAP  send gets of SHARD's version 0 as fast as the server
                                                 takes them, for SECS seconds, reading one byte of the replies
                                                 every GAP seconds; prints "sent N gets"
    hostile_peer.py bigsend HOST PORT LEN        send a whole frame of LEN bytes (zeros: no blob), then read the
                                                 reply; prints "sent whole" (or "send failed: WHY"), then
                                                 "reply CODE: TEXT" (or "no reply: WHY")
    hostile_peer.py ahead HOST PORT SHARD N      ask for a version of SHARD far ahead of any, and push for such a
                                                 round, again at each answer, N times in all; prints "asked N
                                                 times" (each answered `wait`, or STALE: no such version)
    hostile_peer.py refused HOST PORT N          send N requests of an unknown operation at once, then read their
                                                 N replies; prints "replies R: CODE" (the first reply's code)
    hostile_peer.py garbage HOST PORT N          send N frames of 8 bytes that are no blob, at once; prints
                                                 "replies R, closed after S s" once the server closes

Every mode but idle takes --auth RUN SECRET first (after the mode): the shard-server's handshake is made
before misbehaving (hello, then the answer to its challenge: common/net/auth.h), so that what is timed is
the frame, not the hello; without it the peer has not proved the secret.

Exit 0 when the server closed what it should have (idle: all N, before SECONDS), 1 otherwise. The tests
(it_fd_exhaustion, it_hostile_peers, it_peer_bounds, it_reject_flood) read the lines. Standard library only.
"""
import hashlib
import hmac
import select
import socket
import struct
import sys
import time

AUTH = None  # (run, secret) from --auth


def mp_str(b):
    return (bytes([0xA0 | len(b)]) if len(b) < 32 else bytes([0xD9, len(b)])) + b


def mp_map(d):
    """A blob header (schemas/blob.md): a msgpack map of strings and non-negative ints below 2^32."""
    out = bytes([0x80 | len(d)])
    for k, v in d.items():
        out += mp_str(k.encode())
        if isinstance(v, int):
            out += bytes([v]) if v < 0x80 else b"\xce" + struct.pack(">I", v)
        else:
            out += mp_str(v.encode())
    return out


def mp_read(b, i):
    """(value, next index) of the msgpack item at b[i]: what a reply header holds."""
    t = b[i]
    if t <= 0x7F:
        return t, i + 1
    if 0x80 <= t <= 0x8F or t == 0xDE:
        n, i = (t & 0x0F, i + 1) if t != 0xDE else (struct.unpack(">H", b[i + 1:i + 3])[0], i + 3)
        d = {}
        for _ in range(n):
            k, i = mp_read(b, i)
            d[k], i = mp_read(b, i)
        return d, i
    if 0xA0 <= t <= 0xBF or t in (0xD9, 0xDA):
        n, i = (t & 0x1F, i + 1) if t < 0xC0 else ((b[i + 1], i + 2) if t == 0xD9 else (struct.unpack(">H", b[i + 1:i + 3])[0], i + 3))
        return b[i:i + n].decode(), i + n
    if t >= 0xE0:
        return t - 256, i + 1
    sizes = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCB: ">d"}
    if t == 0xC0:
        return None, i + 1
    f = sizes[t]
    return struct.unpack(f, b[i + 1:i + 1 + struct.calcsize(f)])[0], i + 1 + struct.calcsize(f)


def send_frame(s, header):
    blob = mp_map(dict({"m": "DLB", "f": 1}, **header))
    s.sendall(struct.pack("<I", len(blob)) + blob)


def recv_frame(s):
    def exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise OSError("closed")
            b += c
        return b
    n = struct.unpack("<I", exact(4))[0]
    return mp_read(exact(n), 0)[0]


def connect(host, port):
    """A connection, through the handshake when --auth was given."""
    s = socket.create_connection((host, port), 2)
    if AUTH:
        run, secret, worker = AUTH[0], AUTH[1], "hostile"
        send_frame(s, {"op": "hello", "w": worker, "t": run})
        h = recv_frame(s)
        if h.get("op") == "challenge":
            mac = hmac.new(secret.encode(), ("%s\n%s\n%s" % (h["t"], worker, run)).encode(), hashlib.sha256)
            send_frame(s, {"op": "auth", "w": worker, "t": mac.hexdigest()})
            h = recv_frame(s)
        if h.get("op") != "ack":
            raise SystemExit("handshake refused: %r" % h)
        print("handshake done", flush=True)
    s.settimeout(None)
    return s


def closed(s):
    """Whether the server closed s (EOF or reset); reads and drops anything it sent first."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        if not r:
            return False
        return s.recv(65536) == b""
    except OSError:
        return True


def wait_closed(s, t0, limit=120.0):
    while time.time() - t0 < limit:
        select.select([s], [], [], 0.1)
        if closed(s):
            print("closed after %.1f s" % (time.time() - t0), flush=True)
            return 0
    print("still open after %.1f s" % (time.time() - t0), flush=True)
    return 1


def idle(host, port, n, seconds):
    conns = []
    for _ in range(n):
        try:
            conns.append(socket.create_connection((host, port), 2))
        except OSError as e:
            print("connect failed: %s" % e, flush=True)
            break
    print("opened %d" % len(conns), flush=True)
    t0 = time.time()
    gone = set()
    while time.time() - t0 < seconds and len(gone) < len(conns):
        for i, s in enumerate(conns):
            if i not in gone and closed(s):
                gone.add(i)
        time.sleep(0.1)
    print("closed %d of %d after %.1f s" % (len(gone), len(conns), time.time() - t0), flush=True)
    return 0 if len(gone) == len(conns) == n else 1


def trickle(host, port, data, gap):
    s = connect(host, port)
    t0 = time.time()
    for b in data:
        try:
            s.send(bytes([b]))
        except OSError:
            break
        end = time.time() + gap
        while time.time() < end:
            select.select([s], [], [], 0.05)
            if closed(s):
                print("closed after %.1f s" % (time.time() - t0), flush=True)
                return 0
    return wait_closed(s, t0)


def stall(host, port, length):
    s = connect(host, port)
    t0 = time.time()
    s.sendall(struct.pack("<I", length) + b"\x00" * 10)
    return wait_closed(s, t0)


def noread(host, port, shard, seconds):
    s = connect(host, port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    sent = 0
    shards = [int(x) for x in shard.split(",")]
    for n in range(200):
        try:
            send_frame(s, {"op": "get", "s": shards[n % len(shards)], "v": 0, "w": "hostile", "i": 1})
            sent += 1
        except OSError:
            break
    print("sent %d gets" % sent, flush=True)
    time.sleep(seconds)  # reading nothing: the server sees its replies stuck (its metrics say when it gave up)
    return 0


def flood(host, port, shard, mib):
    s = connect(host, port)
    send_frame(s, {"op": "get", "s": shard, "v": 1, "w": "hostile", "i": 1})
    s.setblocking(False)
    chunk, sent, t0 = b"\xff" * 65536, 0, time.time()
    while sent < mib << 20 and time.time() - t0 < 5:
        try:
            sent += s.send(chunk[:(mib << 20) - sent])
        except BlockingIOError:
            select.select([], [s], [], 0.1)
        except OSError:
            break
    print("sent %d MiB" % (sent >> 20), flush=True)
    return wait_closed(s, t0)


def slowframe(host, port, length, gap):
    s = connect(host, port)
    t0 = time.time()
    s.sendall(struct.pack("<I", length) + b"\x00" * 10)
    while time.time() - t0 < 120:
        select.select([s], [], [], gap)
        if closed(s):
            break
        try:
            s.send(b"\x00")
        except OSError:
            break
    return wait_closed(s, t0)


def slowread(host, port, shard, seconds, gap):
    s = connect(host, port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    blob = mp_map({"m": "DLB", "f": 1, "op": "get", "s": shard, "v": 0, "w": "hostile", "i": 1})
    batch = (struct.pack("<I", len(blob)) + blob) * 1000
    s.setblocking(False)
    t0 = last = time.time()
    sent, pend = 0, b""
    while time.time() - t0 < seconds:
        try:
            pend = pend or batch
            k = s.send(pend)
            pend, sent = pend[k:], sent + k
        except BlockingIOError:
            select.select([], [s], [], 0.05)
        except OSError:
            break
        if time.time() - last >= gap:  # a byte: the server's writes go on, so its write timeout never ends this
            try:
                s.recv(1)
            except BlockingIOError:
                pass
            except OSError:
                break
            last = time.time()
    print("sent %d gets" % (sent // (4 + len(blob))), flush=True)
    return 0


def bigsend(host, port, length):
    s = connect(host, port)
    s.settimeout(10)
    try:
        s.sendall(struct.pack("<I", length) + b"\x00" * length)
        print("sent whole", flush=True)
    except OSError as e:  # a worker's send fails so, and it never reads the reason
        print("send failed: %s" % e, flush=True)
    try:
        h = recv_frame(s)
        print("reply %s: %s" % (h.get("c"), h.get("t")), flush=True)
    except OSError as e:
        print("no reply: %s" % e, flush=True)
    return 0


def ahead(host, port, shard, count):
    s = connect(host, port)
    s.settimeout(10)
    n = 0
    while n < count:
        if n % 2:
            send_frame(s, {"op": "push", "s": shard, "r": 100000, "w": "hostile", "i": 1, "dt": 1, "n": 0, "x": 0})
        else:
            send_frame(s, {"op": "get", "s": shard, "v": 100000, "w": "hostile", "i": 1})
        recv_frame(s)
        n += 1
    print("asked %d times" % n, flush=True)
    return 0


def refused(host, port, n):
    s = connect(host, port)
    blob = mp_map({"m": "DLB", "f": 1, "op": "frob", "w": "hostile"})
    s.sendall((struct.pack("<I", len(blob)) + blob) * n)
    s.settimeout(30)
    codes = [recv_frame(s).get("c") for _ in range(n)]
    print("replies %d: %s" % (len(codes), codes[0] if len(set(codes)) == 1 else sorted(set(codes))), flush=True)
    return 0


def garbage(host, port, n):
    s = connect(host, port)
    t0 = time.time()
    try:
        s.sendall((struct.pack("<I", 8) + b"\x01" * 8) * n)
    except OSError:
        pass  # closed while we sent: the replies read below say how far it got
    replies = 0
    s.settimeout(30)
    try:
        while True:
            recv_frame(s)
            replies += 1
    except OSError:
        pass
    print("replies %d, closed after %.1f s" % (replies, time.time() - t0), flush=True)
    return 0


def main(a):
    global AUTH
    if len(a) > 3 and a[1] == "--auth":
        AUTH = (a[2], a[3])
        a = [a[0]] + a[4:]
    if a[0] == "idle":
        return idle(a[1], int(a[2]), int(a[3]), float(a[4]))
    if a[0] == "trickle":
        return trickle(a[1], int(a[2]), bytes.fromhex(a[3]), float(a[4]))
    if a[0] == "stall":
        return stall(a[1], int(a[2]), int(a[3]))
    if a[0] == "noread":
        return noread(a[1], int(a[2]), a[3], float(a[4]))
    if a[0] == "flood":
        return flood(a[1], int(a[2]), int(a[3]), int(a[4]))
    if a[0] == "slowread":
        return slowread(a[1], int(a[2]), int(a[3]), float(a[4]), float(a[5]))
    if a[0] == "bigsend":
        return bigsend(a[1], int(a[2]), int(a[3]))
    if a[0] == "ahead":
        return ahead(a[1], int(a[2]), int(a[3]), int(a[4]))
    if a[0] == "refused":
        return refused(a[1], int(a[2]), int(a[3]))
    if a[0] == "garbage":
        return garbage(a[1], int(a[2]), int(a[3]))
    if a[0] == "slowframe":
        return slowframe(a[1], int(a[2]), int(a[3]), float(a[4]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
