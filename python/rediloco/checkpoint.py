"""checkpoint.py: a coordinator checkpoint (docs/checkpoints.md) back into a torch model.

A checkpoint holds the run's flat fp32 parameter vector ("params") and, in its metadata, the layout
[[name, shape, offset], ...] of the tensors in it: for a run created from a model's state
(init_run, `coordinator init --from-state`) those are the model's own parameter names."""
import json

import torch

from . import safetensors
from .errors import DiLoCoError


def read_checkpoint(path):
    """(metadata, {tensor name: fp32 tensor}) of a checkpoint, cut by its layout."""
    try:
        meta, tensors = safetensors.read(path)
    except (OSError, ValueError) as e:
        raise DiLoCoError("cannot read checkpoint %s: %s" % (path, e))
    if meta.get("format") != "rediloco-checkpoint" or "params" not in tensors:
        raise DiLoCoError("%s is not a ReDiLoCo checkpoint (write one with `coordinator checkpoint save`)" % path)
    flat = tensors["params"]
    if not meta.get("layout"):
        return meta, {"params": flat}
    out = {}
    for name, shape, off in json.loads(meta["layout"]):
        n = 1
        for s in shape:
            n *= s
        out[name] = flat[off:off + n].view(shape)
    return meta, out


def load_checkpoint(model, path, strict=True):
    """Copy a checkpoint's parameters into model (by name). strict: every parameter of the model and
    every tensor of the checkpoint must meet, with the same shape; else DiLoCoError naming the first that
    does not. Returns the checkpoint's metadata (version, run, ...)."""
    meta, tensors = read_checkpoint(path)
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in tensors]
    extra = [n for n in tensors if n not in params]
    if strict and (missing or extra):
        raise DiLoCoError("%s does not match the model: %s" % (path, "; ".join(
            (["the model's %r is not in the checkpoint" % missing[0]] if missing else []) +
            (["the checkpoint's %r is not in the model" % extra[0]] if extra else []))))
    with torch.no_grad():
        for name, p in params.items():
            if name not in tensors:
                continue
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise DiLoCoError("%s: tensor %r has shape %s in the checkpoint, %s in the model"
                                  % (path, name, list(t.shape), list(p.shape)))
            p.copy_(t)
    return meta
