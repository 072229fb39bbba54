"""checks.py: what a DiLoCo session checks before anything is written anywhere.

diloco_open registers the worker (a join event, an incarnation) and writes the run's values into the
model's buffer. A model that is not the run's must be refused before that, with its tensors untouched,
so DiLoCo.open() first reads the run without joining it (diloco_peek_run: the run's parameter count and
its tensors, [[name, shape, offset], ...]) and compares the model's named_parameters() with it here,
naming the first tensor that differs. The arguments' types are checked earlier still, in the
constructor, before Redis is asked anything.
"""
import ctypes
import json
import math

import torch

from .errors import DiLoCoError

_LAYOUT_CAP = 1 << 16  # a first guess at the layout's JSON; diloco_peek_run says when it needs more


def check_arguments(url, run, model, inner_optimizer):
    """TypeError with a sentence for an argument of the wrong kind."""
    for what, value in (("url", url), ("run", run)):
        if not isinstance(value, str):
            raise TypeError("%s must be a string (e.g. DiLoCo(\"redis://127.0.0.1:6390\", \"r1\", model, "
                            "inner)), got %s" % (what, _kind(value)))
    if not isinstance(model, torch.nn.Module):
        raise TypeError("model must be a torch.nn.Module (its named_parameters() are the run's tensors), got %s"
                        % _kind(model))
    if not callable(getattr(inner_optimizer, "step", None)) or isinstance(inner_optimizer, type):
        raise TypeError("inner_optimizer must be the optimizer that trains the model (e.g. torch.optim.AdamW("
                        "model.parameters())): the sync runs after its step(); got %s" % _kind(inner_optimizer))


def quoted(names, most=8):
    """'a', 'b', 'c' and 2 more: names for a message."""
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (" and %d more" % (len(names) - most) if len(names) > most else "")


def _kind(value):
    text = repr(value)
    return "%s %s" % (type(value).__name__, text if len(text) <= 40 else text[:37] + "...")


def model_tensors(model):
    """[(name, shape, offset)] of model's parameters in named_parameters() order, as the flat buffer will
    hold them (params.FlatParams); DiLoCoError for what no run can hold (no parameters, several
    devices, a parameter that is not fp32)."""
    named = list(model.named_parameters())
    if not named:
        raise DiLoCoError("the model has no parameters")
    devices = {p.device for _, p in named}
    if len(devices) > 1:
        raise DiLoCoError("the model's parameters are on several devices (%s): put them on one"
                          % ", ".join(sorted(str(d) for d in devices)))
    check_dtypes(model)
    out, off = [], 0
    for name, p in named:
        out.append((name, tuple(p.shape), off))
        off += p.numel()
    return out


def check_dtypes(model):
    """DiLoCoError naming the first parameter that is not fp32."""
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise DiLoCoError("parameter %r is %s: ReDiLoCo runs hold fp32 parameters; call model.float() "
                              "before joining (mixed precision belongs in autocast, not in the weights)"
                              % (name, str(p.dtype).replace("torch.", "")))


def peek_run(lib, options):
    """(numel, layout JSON or None) of the run options names, read without joining it."""
    err = ctypes.create_string_buffer(1024)
    numel = ctypes.c_uint64()
    cap = _LAYOUT_CAP
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = lib.diloco_peek_run(ctypes.byref(options), ctypes.byref(numel), buf, cap, err, len(err))
        if n < 0:
            raise DiLoCoError(err.value.decode(errors="replace") or "(no message)")
        if n < cap:
            return numel.value, buf.value.decode() or None
        cap = n + 1


def check_layout(layout_json, tensors, run_numel=None):
    """DiLoCoError naming the first tensor where tensors [(name, shape, offset)] differ from the run's
    layout; without a layout (a run made before layouts were recorded) only the counts are compared."""
    numel = tensors[-1][2] + math.prod(tensors[-1][1]) if tensors else 0
    counts = "" if run_numel in (None, numel) else "; the run has %d parameters, the model %d" % (run_numel, numel)
    if not layout_json:
        if run_numel is not None and run_numel != numel:
            raise DiLoCoError("the run has %d parameters but the model has %d (the run records no tensor "
                              "names to say which differ): join with the model the run was made from"
                              % (run_numel, numel))
        return
    try:
        layout = json.loads(layout_json)
    except ValueError as e:
        raise DiLoCoError("the run's layout field is not JSON (%s)" % e) from e
    for i, (name, shape, off) in enumerate(layout):
        if i >= len(tensors):
            raise DiLoCoError("the run has tensor %r %s at offset %d that the model lacks (the model has %d "
                              "tensors, the run %d%s)" % (name, list(shape), off, len(tensors), len(layout), counts))
        mname, mshape, moff = tensors[i]
        if mname != name or list(mshape) != list(shape) or moff != off:
            raise DiLoCoError("tensor %d of the run is %r %s at offset %d, the model's is %r %s at offset %d: "
                              "the model's parameters (names, shapes, order of named_parameters()) must be the "
                              "run's%s" % (i, name, list(shape), off, mname, list(mshape), moff, counts))
    if len(tensors) > len(layout):
        name, shape, _ = tensors[len(layout)]
        raise DiLoCoError("the model has tensor %r %s that the run lacks (the model has %d tensors, the run %d%s)"
                          % (name, list(shape), len(tensors), len(layout), counts))
