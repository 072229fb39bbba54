#!/usr/bin/python3
"""torch_sgd_replay.py PORT RUN CHECKPOINT: replay a sync run's Redis log through torch.optim.SGD.

Reads, straight from Redis (a minimal RESP client and msgpack reader here, independent of the C code),
every shard's version-0 snapshot (the initial parameters) and its log entries (op "log": the averaged
pseudo-gradient g of each round, fp32, with the step's lr, mu and flags; schemas/blob.md), checks
their XXH3, and applies torch.optim.SGD(lr, momentum=mu, nesterov=...) round by round to the whole
parameter vector (p.grad = g, opt.step()). Then compares bit for bit:
  - every shard's XXH3 with the digest its shard-server committed (dl:{RUN}:shards k:digest);
  - the parameters and the momentum with CHECKPOINT (`coordinator checkpoint save` of the final
    version: its momentum is what recovery rebuilds from the same snapshot and log, common/format/replay.c).
Prints one line per check and exits 0 if every bit agrees, 1 otherwise (with how many elements differ
and by how many ulp at most). Needs the run's log from version 1 on (--snapshot-every above the
rounds) and no no-op round.

torch runs the operations it fuses on this machine's kernels: the caller sets ATEN_CPU_CAPABILITY
(tests/it_torch_sgd_exactness.sh uses avx2); docs/PROTOCOL.md, "Bit-identical to torch", says which."""
import socket
import struct
import sys

import numpy as np
import torch

import checkpoint_read  # tests/checkpoint_read.py: the checkpoint reader and libxxhash's XXH3


def die(msg):
    print("torch_sgd_replay: " + msg, file=sys.stderr)
    sys.exit(1)


class Redis:
    """Just enough RESP for GET and HGETALL (binary-safe bulk strings)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.reply()

    def reply(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            die("redis error: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:n]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        die("unexpected RESP reply %r" % line)

    def hgetall(self, key):
        r = self.call("HGETALL", key)
        return {r[i].decode(): r[i + 1].decode() for i in range(0, len(r), 2)}


def msgpack_value(b, i):
    """(value, next index) of the msgpack value at b[i]: the types a blob header uses."""
    t = b[i]
    if t <= 0x7F:
        return t, i + 1
    if t >= 0xE0:
        return t - 0x100, i + 1
    if 0x80 <= t <= 0x8F:
        return msgpack_map(b, i + 1, t & 0x0F)
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[i + 1:i + 1 + n].decode(), i + 1 + n
    fixed = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
             0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if t in fixed:
        size = struct.calcsize(fixed[t])
        return struct.unpack_from(fixed[t], b, i + 1)[0], i + 1 + size
    if t in (0xD9, 0xDA):
        w = 1 if t == 0xD9 else 2
        n = int.from_bytes(b[i + 1:i + 1 + w], "big")
        return b[i + 1 + w:i + 1 + w + n].decode(), i + 1 + w + n
    if t == 0xDE:
        return msgpack_map(b, i + 3, int.from_bytes(b[i + 1:i + 3], "big"))
    die("blob header: msgpack type 0x%02x not expected" % t)


def msgpack_map(b, i, n):
    m = {}
    for _ in range(n):
        k, i = msgpack_value(b, i)
        m[k], i = msgpack_value(b, i)
    return m, i


XXH3 = checkpoint_read.xxh3_fn()  # bytes -> 16 hex digits


def blob(r, key, op, n):
    """(header, fp32 payload) of the blob at key, checked: magic, format, op, dtype, count, XXH3."""
    raw = r.call("GET", key)
    if raw is None:
        die("%s is missing (snapshot_every too small? the log must start at version 1)" % key)
    h, off = msgpack_value(raw, 0)
    if h.get("m") != "DLB" or h.get("f") != 1 or h.get("op") != op:
        die("%s: not a format-1 '%s' blob: %s" % (key, op, h))
    body = raw[off:]
    if h.get("dt") != 1 or h.get("n") % n or len(body) != 4 * h["n"] or XXH3(body) != "%016x" % h.get("x", -1):
        die("%s: wrong dtype, count, length or checksum (%s, %d payload bytes)" % (key, h, len(body)))
    return h, np.frombuffer(body, dtype="<f4")


def load_run(r, run):
    """config, initial parameters, the rounds' g (list of numel vectors with their lr, mu, flags) and
    the committed digests, from Redis."""
    cfg = r.hgetall("dl:{%s}:config" % run)
    shards = r.hgetall("dl:{%s}:shards" % run)
    bounds = [int(x) for x in cfg["shard_bounds"].split(",")]
    numel = int(cfg["numel"])
    theta0 = np.empty(numel, dtype=np.float32)
    rounds = None
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        sv, se = shards["%d:snap" % k].split(".")
        h, x = blob(r, "dl:{%s:%d}:snap:%s:%s" % (run, k, sv, se), "snap", hi - lo)
        if h.get("v") != 0 or h.get("fl", 0) & 1:
            die("shard %d: the snapshot is version %s, not the initial one (raise --snapshot-every)" % (k, h.get("v")))
        theta0[lo:hi] = x[:hi - lo]
        refs = [ref.split(".") for ref in shards["%d:log" % k].split(",") if ref]
        if rounds is None:
            rounds = [dict(g=np.empty(numel, dtype=np.float32)) for _ in refs]
        if len(refs) != len(rounds) or int(shards["%d:version" % k]) != len(refs):
            die("shard %d: %d log entries for version %s; other shards have %d" %
                (k, len(refs), shards["%d:version" % k], len(rounds)))
        for v, (lv, le) in enumerate(refs, start=1):
            h, g = blob(r, "dl:{%s:%d}:log:%s:%s" % (run, k, lv, le), "log", hi - lo)
            if h.get("v") != v or h.get("a", -1) <= 0 or len(g) != hi - lo:
                die("shard %d: log entry %s is version %s with %s participants, want version %d with some" %
                    (k, lv, h.get("v"), h.get("a"), v))
            step = dict(lr=h["lr"], mu=h["mu"], nesterov=bool(h["fl"] & 1), first=bool(h["fl"] & 2))
            if k > 0 and any(rounds[v - 1][key] != val for key, val in step.items()):
                die("shard %d, version %d: step settings %s differ from shard 0's" % (k, v, step))
            rounds[v - 1].update(step)
            rounds[v - 1]["g"][lo:hi] = g
    digests = ["%016x" % int(shards["%d:digest" % k], 16) for k in range(len(bounds) - 1)]
    return bounds, theta0, rounds, digests


def torch_replay(theta0, rounds):
    """torch.optim.SGD round by round: p.grad = g, step. Returns parameters and momentum buffer."""
    p = torch.nn.Parameter(torch.from_numpy(theta0.copy()))
    first = rounds[0]
    opt = torch.optim.SGD([p], lr=first["lr"], momentum=first["mu"], nesterov=first["nesterov"])
    for v, rd in enumerate(rounds, start=1):
        if rd["first"] != (v == 1) or (rd["lr"], rd["mu"], rd["nesterov"]) != \
                (first["lr"], first["mu"], first["nesterov"]):
            die("round %d: step settings %s change during the run (this replay keeps one optimizer)" % (v, rd))
        p.grad = torch.from_numpy(rd["g"].copy())
        opt.step()
    return p.detach().numpy().copy(), opt.state[p]["momentum_buffer"].numpy().copy()


def compare(name, got, want):
    """Prints and returns whether got and want have the same bits."""
    a, b = got.view(np.int32).astype(np.int64), want.view(np.int32).astype(np.int64)
    # ulp distance on the ordered integer line of floats (sign-magnitude -> two's complement)
    a = np.where(a < 0, -(a & 0x7FFFFFFF), a)
    b = np.where(b < 0, -(b & 0x7FFFFFFF), b)
    diff = int(np.count_nonzero(a != b))
    worst = int(np.max(np.abs(a - b))) if diff else 0
    gap = float(np.max(np.abs(got.astype(np.float64) - want))) if diff else 0.0
    print("%-10s %d of %d elements differ%s" % (name, diff, got.size,
                                                " (by at most %d ulp, %.3g)" % (worst, gap) if diff else ""))
    return diff == 0


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    port, run, ck = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    bounds, theta0, rounds, digests = load_run(Redis(port), run)
    print("run %s: %d parameters, %d shards, %d rounds, lr %s mu %s (fp32) nesterov %s; torch %s" %
          (run, theta0.size, len(digests), len(rounds), np.float32(rounds[0]["lr"]), np.float32(rounds[0]["mu"]),
           rounds[0]["nesterov"], torch.__version__))
    theta, mom = torch_replay(theta0, rounds)
    ok = True
    for k in range(len(digests)):
        got = XXH3(theta[bounds[k]:bounds[k + 1]].tobytes())
        same = got == digests[k]
        ok &= same
        print("shard %d   torch %s, committed %s%s" % (k, got, digests[k], "" if same else "  DIFFERENT"))
    meta, arrays = checkpoint_read.load(ck)
    ck_theta, ck_mom = arrays["params"], arrays["momentum"]
    if int(meta["version"]) != len(rounds) or ck_theta.size != theta.size:
        die("%s is version %s of %d parameters, want %d of %d" % (ck, meta["version"], ck_theta.size, len(rounds),
                                                                 theta.size))
    ok &= compare("params", theta, ck_theta)
    ok &= compare("momentum", mom, ck_mom)
    print("torch.optim.SGD %s the run bit for bit" % ("reproduces" if ok else "does NOT reproduce"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
