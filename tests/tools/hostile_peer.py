#!/usr/bin/env python3
"""tests/tools/hostile_peer.py: peers that misbehave on a TCP server (a shard-server's data plane, an HTTP port).

    hostile_peer.py idle HOST PORT N SECONDS     open N connections, send nothing, keep them SECONDS (or until
                                                 the server closes them all); prints "opened K" once they are
                                                 open, then "closed C of K after S s" at the end
    hostile_peer.py trickle HOST PORT BYTES GAP  send BYTES (hex) one byte every GAP seconds, then nothing; prints
                                                 "closed after S s" once the server closes the connection
    hostile_peer.py stall HOST PORT LEN          send a frame's length prefix of LEN bytes and 10 bytes of it,
                                                 then nothing; prints "closed after S s" likewise

Exit 0 when the server closed what it should have (idle: all N, before SECONDS), 1 otherwise. The tests
(it_fd_exhaustion, it_hostile_peers) read the lines. Standard library only.
"""
import select
import socket
import struct
import sys
import time


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
    s = socket.create_connection((host, port), 2)
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
    s = socket.create_connection((host, port), 2)
    t0 = time.time()
    s.sendall(struct.pack("<I", length) + b"\x00" * 10)
    return wait_closed(s, t0)


def main(a):
    if a[0] == "idle":
        return idle(a[1], int(a[2]), int(a[3]), float(a[4]))
    if a[0] == "trickle":
        return trickle(a[1], int(a[2]), bytes.fromhex(a[3]), float(a[4]))
    if a[0] == "stall":
        return stall(a[1], int(a[2]), int(a[3]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
