"""checkpoint.py: a coordinator checkpoint (docs/checkpoints.md) back into a torch model.

A checkpoint holds the run's flat fp32 parameter vector ("params") and, in its metadata, the layout
[[name, shape, offset], ...] of the tensors in it: for a run created from a model's state
(init_run, `coordinator init --from-state`) those are the model's own parameter names."""
from __future__ import annotations

import json
from typing import Any, Dict, Tuple

import torch

from . import safetensors
from .checks import quoted
from .errors import DiLoCoError


def read_checkpoint(path: str) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """(metadata, {tensor name: fp32 tensor}) of a checkpoint, cut by its layout."""
    try:
        meta, tensors = safetensors.read(path)
    except (OSError, ValueError) as e:
        raise DiLoCoError("cannot read checkpoint %s: %s" % (path, e)) from e
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


def load_checkpoint(model: torch.nn.Module, path: str, strict: bool = True) -> Dict[str, Any]:
    """Copy a checkpoint's parameters into model (by name). strict: every tensor of the model's
    state_dict() (parameters and buffers) and every tensor of the checkpoint must meet, with the same
    shape; else DiLoCoError naming those that do not (a checkpoint holds parameters only: a model with
    buffers, e.g. BatchNorm's running statistics, loads with strict=False and keeps its own). Returns the
    checkpoint's metadata (version, run, ...). Tied parameters (fc.weight = emb.weight) are one tensor, loaded
    once under any of their names; a DDP model loads into its module (the names DiLoCo syncs)."""
    meta, tensors = read_checkpoint(path)
    from .group import unwrap
    model = unwrap(model)  # a DDP model's names are its module's, as DiLoCo syncs it
    params = dict(model.named_parameters())
    aliases = _aliases(model, params)
    for alias, name in aliases.items():  # a checkpoint may name a tied tensor by another of its names
        if name not in tensors and alias in tensors:
            tensors[name] = tensors.pop(alias)
    if strict:
        _check_all_meet(path, model, params, tensors, aliases)
    for name, p in params.items():  # every shape first: a refused checkpoint changes nothing
        if name in tensors and tuple(tensors[name].shape) != tuple(p.shape):
            raise DiLoCoError("%s: tensor %r has shape %s in the checkpoint, %s in the model"
                              % (path, name, list(tensors[name].shape), list(p.shape)))
    with torch.no_grad():
        for name, p in params.items():
            if name in tensors:
                p.copy_(tensors[name])
    return meta


def _aliases(model, params):
    """{other name: its name in params} of tied parameters (fc.weight = emb.weight): state_dict() names the
    tensor under each of its names, named_parameters() only under the first."""
    first = {id(p): n for n, p in params.items()}
    return {n: first[id(v)] for n, v in model.state_dict(keep_vars=True).items()
            if n not in params and id(v) in first}


def _check_all_meet(path, model, params, tensors, aliases):
    # persistent buffers, as torch saves them: what state_dict() names that is neither a parameter nor a tied alias
    buffers = [n for n in model.state_dict() if n not in params and n not in aliases]
    missing = [n for n in params if n not in tensors]
    extra = [n for n in tensors if n not in params]
    lacks = []
    if missing:
        lacks.append("the checkpoint does not hold the model's parameters %s" % quoted(missing))
    if buffers:
        lacks.append("it holds no buffers, and the model has %s (ReDiLoCo syncs and checkpoints parameters "
                     "only: load with strict=False to keep the model's own)" % quoted(buffers))
    if extra:
        lacks.append("the checkpoint's %s not in the model" % (quoted(extra) + (" are" if len(extra) > 1 else " is")))
    if lacks:
        raise DiLoCoError("%s does not match the model: %s" % (path, "; ".join(lacks)))

