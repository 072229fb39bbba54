#!/usr/bin/env python3
"""fuzz/seeds_checkpoint.py DIR: write the seed corpora of the safetensors, checkpoint and from_state
fuzz targets.

Small valid files (a ReDiLoCo checkpoint of 4 parameters on 2 shards, with and without a Delayed
Nesterov buffer; a PyTorch-style file of F16/BF16/F64 tensors) and the crafted files of issue 17:
metadata numel 2^62 (and 2^62 + 1) whose fp32 byte size wraps around 64 bits to 0 (4) bytes, so a
reader that multiplies without checking allocates a few bytes and then walks 2^62 floats.
tests/it_checkpoint_crafted.sh feeds the crafted ones to `coordinator checkpoint show` and
`init --from-checkpoint`. Only the standard library: runs on any python3.
"""
import json
import os
import struct
import sys


def safetensors(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def checkpoint_meta(numel, bounds, dn=None):
    m = {"format": "rediloco-checkpoint", "format_version": "1", "run": "seed", "version": "3",
         "numel": str(numel), "trainer": "quadratic", "model": "--numel %d" % numel, "mode": "sync",
         "shards": str(len(bounds) - 1), "shard_bounds": ",".join(map(str, bounds)), "fragments": "1",
         "frag_bounds": "0,%d" % (len(bounds) - 1), "seed": "7", "snapshot_every": "2", "outer_lr": "0.7",
         "outer_momentum": "0.9", "nesterov": "1", "has_momentum": "true"}
    if dn:
        # dn_buffer_xxh3: XXH3-64 of the 16 bytes of the dn_buffer below (as `checkpoint show` prints it)
        m.update({"mode": "async", "dn_buffer": "3", "dn_variant": "paper", "dn_t": "8",
                  "dn_buffer_xxh3": "dbdd047ef284ab97"})
    if dn == "shards":  # shards at different versions (a shut-down run's, or an async run's fragments)
        m.update({"shard_versions": "3,4", "dn_t_shards": "8,9"})
    return m


def checkpoint(numel, tensor_numel, offsets, data, bounds=None, dn=False, layout=None):
    hdr = {"__metadata__": checkpoint_meta(numel, bounds or [0, numel], dn)}
    if layout:
        hdr["__metadata__"]["layout"] = layout
    for name, (b, e) in zip(["params", "momentum", "dn_buffer"], offsets):
        hdr[name] = {"dtype": "F32", "shape": [tensor_numel], "data_offsets": [b, e]}
    return safetensors(hdr, data)


def floats(*v):
    return struct.pack("<%df" % len(v), *v)


def main():
    out = sys.argv[1]
    ck, st, fs = (os.path.join(out, d) for d in ("checkpoint", "safetensors", "from_state"))
    for d in (ck, st, fs):
        os.makedirs(d, exist_ok=True)
    p, m, d = floats(1, 2, 3, 4), floats(0.5, 0, -0.5, 1), floats(0.25, 0.25, 0, 0)
    files = {
        (ck, "valid.safetensors"): checkpoint(4, 4, [(0, 16), (16, 32)], p + m, [0, 2, 4]),
        # with the model's layout, a string checkpoint_read copies (and checkpoint_free must free)
        (ck, "valid-layout.safetensors"):
            checkpoint(4, 4, [(0, 16), (16, 32)], p + m, [0, 2, 4], layout='[["w",[2,2],0]]'),
        (ck, "valid-dn.safetensors"): checkpoint(4, 4, [(0, 16), (16, 32), (32, 48)], p + m + d, [0, 2, 4], dn=True),
        (ck, "valid-dn-shards.safetensors"):
            checkpoint(4, 4, [(0, 16), (16, 32), (32, 48)], p + m + d, [0, 2, 4], dn="shards"),
        # issue 17: 2^62 * 4 wraps to 0 bytes, (2^62 + 1) * 4 to 4
        (ck, "crafted-numel-2p62.safetensors"): checkpoint(1 << 62, 1 << 62, [(0, 0), (0, 0)], b""),
        (ck, "crafted-numel-2p62-plus-1.safetensors"):
            checkpoint((1 << 62) + 1, (1 << 62) + 1, [(0, 4), (4, 8)], floats(1, 2)),
        (ck, "crafted-overlap.safetensors"): checkpoint(4, 4, [(0, 16), (8, 24)], p + m[:8]),
        (st, "torch-like.safetensors"): safetensors(
            {"__metadata__": {"format": "pt"},
             "a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
             "b": {"dtype": "BF16", "shape": [3], "data_offsets": [8, 14]},
             "c": {"dtype": "F64", "shape": [], "data_offsets": [14, 22]},
             "d": {"dtype": "I64", "shape": [1], "data_offsets": [22, 30]}},
            struct.pack("<4H", 0x3c00, 0x4000, 0x0001, 0x7c00) + struct.pack("<3H", 0x3fc0, 0xc120, 0x7fc0)
            + struct.pack("<d", 0.1) + struct.pack("<q", -5)),
        (st, "crafted-numel-2p62.safetensors"): safetensors(
            {"x": {"dtype": "F32", "shape": [1 << 62], "data_offsets": [0, 0]}}),
        (st, "crafted-shape-overflow.safetensors"): safetensors(
            {"x": {"dtype": "U8", "shape": [1 << 32, 1 << 32], "data_offsets": [0, 0]}}),
    }
    files[(st, "checkpoint.safetensors")] = files[(ck, "valid-dn.safetensors")]
    # a model's weights as rediloco.save_state writes them (named_parameters in order), one with NaN
    state = {"__metadata__": {"format": "pt"},
             "wte.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
             "ln.bias": {"dtype": "BF16", "shape": [2], "data_offsets": [16, 20]}}
    files[(fs, "state.safetensors")] = safetensors(state, floats(1, 2, 3, 4) + struct.pack("<2H", 0x3f80, 0xbf80))
    files[(fs, "state-nan.safetensors")] = safetensors(state, floats(1, 2, 3, 4) + struct.pack("<2H", 0x7fc0, 0))
    files[(fs, "crafted-numel-2p62.safetensors")] = files[(st, "crafted-numel-2p62.safetensors")]
    for (folder, name), data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
