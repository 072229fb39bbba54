#!/usr/bin/python3
"""checkpoint_read.py FILE [--write-shards DIR]: read a ReDiLoCo checkpoint with numpy only.

safetensors is a trivial format (8-byte little-endian header length N, N bytes of JSON, then the raw
tensor bytes at the JSON's data_offsets), so this parses it by hand, independently of the C code that
wrote it (coordinator/checkpoint.c), validates it like `safetensors` would, and prints what the tests
compare against Redis and the C side:

    numel N / version V / trainer T / has_momentum true|false
    shard <k> <xxh3>          XXH3-64 of the fp32 bytes of shard k (as dl:{R}:shards k:digest)
    all <xxh3>                XXH3-64 of all parameters (as the workers' sync digest)
    momentum_all <xxh3>       XXH3-64 of the momentum tensor
    momentum_nonzero <count>  how many momentum elements are not 0
    dn_buffer N / dn_t T / dn_all <xxh3> / dn_nonzero <count> / dn_sum <float64 sum>
                              only for a Delayed Nesterov checkpoint (a third tensor "dn_buffer")
    params_sum <float64 sum>  params_first <first 3 values>

XXH3 comes from libxxhash (the C library the project builds against) through ctypes; numpy does the
rest. --write-shards DIR also writes shard k's raw fp32 bytes to DIR/shard<k>.f32.
Exit status 1 with a message on anything malformed."""
import ctypes
import json
import math
import os
import struct
import sys

import numpy as np


def die(msg):
    print("checkpoint_read: " + msg, file=sys.stderr)
    sys.exit(1)


def xxh3_fn():
    for name in ("libxxhash.so.0", "libxxhash.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        f = lib.XXH3_64bits
        f.restype = ctypes.c_uint64
        f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return lambda b: "%016x" % f(b, len(b))
    die("libxxhash is not installed (Debian libxxhash0)")


def load(path):
    """(metadata, {tensor name: fp32 array}) of the checkpoint at path, validated; exits 1 if malformed."""
    data = open(path, "rb").read()
    if len(data) < 8:
        die("shorter than 8 bytes")
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8 or hlen > 100 << 20:
        die("header length %d does not fit a %d-byte file" % (hlen, len(data)))
    if (8 + hlen) % 8:
        die("data section not 8-byte aligned (header length %d)" % hlen)
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    body = data[8 + hlen:]
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("format") != "rediloco-checkpoint":
        die("not a ReDiLoCo checkpoint: __metadata__.format is %r" % (meta or {}).get("format"))
    if not all(isinstance(v, str) for v in meta.values()):
        die("safetensors metadata values must all be strings")
    numel = int(meta["numel"])
    dn = int(meta.get("dn_buffer", "0"))
    want = ["momentum", "params"] + (["dn_buffer"] if dn > 0 else [])
    if sorted(header) != sorted(want):
        die("tensors are %s, want %s" % (sorted(header), sorted(want)))
    arrays, spans = {}, []
    for name, t in header.items():
        if t["dtype"] != "F32" or t["shape"] != [numel]:
            die("tensor %s: dtype %s shape %s, want F32 [%d]" % (name, t["dtype"], t["shape"], numel))
        b, e = t["data_offsets"]
        if not (0 <= b <= e <= len(body)) or e - b != 4 * numel:
            die("tensor %s: bad data_offsets %s" % (name, t["data_offsets"]))
        spans.append((b, e))
        arrays[name] = np.frombuffer(body, dtype="<f4", count=numel, offset=b)
    spans.sort()
    if spans[0][0] != 0 or any(spans[i][1] != spans[i + 1][0] for i in range(len(spans) - 1)) or \
            spans[-1][1] != len(body):
        die("the tensors do not cover the data section exactly: %s for %d bytes" % (spans, len(body)))
    if not all(np.isfinite(a).all() for a in arrays.values()):
        die("non-finite values")
    return meta, arrays


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if args else 2)
    path, outdir = args[0], None
    if len(args) == 3 and args[1] == "--write-shards":
        outdir = args[2]
    elif len(args) != 1:
        die("usage: checkpoint_read.py FILE [--write-shards DIR]")
    xxh3 = xxh3_fn()
    meta, arrays = load(path)
    numel, dn = int(meta["numel"]), int(meta.get("dn_buffer", "0"))
    params, mom = arrays["params"], arrays["momentum"]
    bounds = [int(x) for x in meta["shard_bounds"].split(",")]
    if bounds[0] != 0 or bounds[-1] != numel or len(bounds) != int(meta["shards"]) + 1:
        die("shard_bounds %s do not cover %d parameters" % (meta["shard_bounds"], numel))
    print("numel %d" % numel)
    print("version %s" % meta["version"])
    print("trainer %s" % meta["trainer"])
    print("has_momentum %s" % meta["has_momentum"])
    for k in range(len(bounds) - 1):
        raw = params[bounds[k]:bounds[k + 1]].tobytes()
        print("shard %d %s" % (k, xxh3(raw)))
        if outdir:
            with open(os.path.join(outdir, "shard%d.f32" % k), "wb") as f:
                f.write(raw)
    print("all %s" % xxh3(params.tobytes()))
    print("momentum_all %s" % xxh3(mom.tobytes()))
    print("momentum_nonzero %d" % int(np.count_nonzero(mom)))
    print("params_sum %.17g" % math.fsum(params.astype(np.float64)))
    print("params_first %s" % " ".join("%.9g" % v for v in params[:3]))
    if dn > 0:
        buf = arrays["dn_buffer"]
        if xxh3(buf.tobytes()) != meta.get("dn_buffer_xxh3"):
            die("dn_buffer XXH3 %s, metadata says %s" % (xxh3(buf.tobytes()), meta.get("dn_buffer_xxh3")))
        print("dn_buffer %d" % dn)
        print("dn_variant %s" % meta["dn_variant"])
        print("dn_t %s" % meta["dn_t"])
        print("dn_all %s" % xxh3(buf.tobytes()))
        print("dn_nonzero %d" % int(np.count_nonzero(buf)))
        print("dn_sum %.17g" % math.fsum(buf.astype(np.float64)))
    if meta.get("layout"):
        layout = json.loads(meta["layout"])
        covered = sum(int(np.prod(shape)) for _, shape, _ in layout)
        if covered != numel:
            die("layout covers %d of %d parameters" % (covered, numel))
        print("tensors %d" % len(layout))


if __name__ == "__main__":
    main()
