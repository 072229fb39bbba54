"""safetensors.py: the few lines of the safetensors format the package needs (no `safetensors` package:
Debian has none). A file is an 8-byte little-endian header length N, N bytes of JSON
({name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}), then the raw little-endian data.
write() pads the header with spaces so the data starts 8-byte aligned, as the reference writer does."""
import json
import struct

import torch

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def write(path, tensors, metadata=None):
    """tensors: an ordered {name: tensor}; written in that order (the run's layout order)."""
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        if t.dtype not in _NAMES:
            raise ValueError("tensor %r has dtype %s, which safetensors cannot hold" % (name, t.dtype))
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((8 - (8 + len(js)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for raw in blobs:
            f.write(raw)


def read(path):
    """(metadata dict, {name: tensor} in file order); ValueError naming what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s is not a safetensors file (shorter than 8 bytes)" % path)
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8:
        raise ValueError("%s is not a safetensors file (header length %d for %d bytes)" % (path, hlen, len(data)))
    try:
        header = json.loads(data[8:8 + hlen])
    except ValueError as e:
        raise ValueError("%s: the safetensors header is not JSON (%s)" % (path, e)) from e
    if not isinstance(header, dict):
        raise ValueError("%s: the safetensors header is not a JSON object" % path)
    meta = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + hlen:]
    out = {}
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if t.get("dtype") not in _DTYPES:
            raise ValueError("%s: tensor %r has dtype %r" % (path, name, t.get("dtype")))
        b, e = t["data_offsets"]
        dt = _DTYPES[t["dtype"]]
        n = 1
        for s in t["shape"]:
            n *= s
        if not 0 <= b <= e <= len(body) or e - b != n * torch.tensor([], dtype=dt).element_size():
            raise ValueError("%s: tensor %r: data_offsets %s do not hold shape %s of %s in %d bytes"
                             % (path, name, t["data_offsets"], t["shape"], t["dtype"], len(body)))
        raw = torch.frombuffer(bytearray(body[b:e]), dtype=torch.uint8) if e > b else torch.empty(0, dtype=torch.uint8)
        out[name] = raw.view(dt).reshape(t["shape"])
    return meta, out
