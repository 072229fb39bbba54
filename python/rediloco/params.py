"""params.py: a model's parameters as one flat fp32 buffer, which libdiloco reads and writes in place.

FlatParams copies every parameter (model.named_parameters() order, shared ones once) into one contiguous
fp32 tensor and makes each p.data a view of its slice, so the optimizer, autograd and libdiloco all see
the same memory and a sync's new global values need no copy. A model off the CPU keeps its flat buffer
on its device; how libdiloco reaches it is its transfer path (devicehooks.py): on CUDA with
libdiloco_cuda.so, libdiloco's device hooks work on the device buffer itself (no host buffer here);
otherwise a page-locked host mirror: device -> host before a step that syncs, host -> device for each
range the library wrote (on_params). check_layout compares the model with the
run's tensor layout (names, shapes, order) when the run records one.
"""
import bisect
import ctypes
import json
import re

import torch

from . import devicehooks
from .errors import DiLoCoError


class FlatParams:
    def __init__(self, model):
        named = list(model.named_parameters())
        if not named:
            raise DiLoCoError("the model has no parameters")
        devices = {p.device for _, p in named}
        if len(devices) > 1:
            raise DiLoCoError("the model's parameters are on several devices (%s): put them on one"
                              % ", ".join(sorted(str(d) for d in devices)))
        self.check_dtypes(model)
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.numel = sum(p.numel() for _, p in named)
        self.device = devices.pop()
        self.path = devicehooks.path_for_device(self.device)
        self.device_copy = self.path == devicehooks.PINNED_HOST_COPY
        self.flat = torch.empty(self.numel, dtype=torch.float32, device=self.device)
        self.offsets = []
        off = 0
        with torch.no_grad():
            for _, p in named:
                n = p.numel()
                self.flat[off:off + n].copy_(p.data.reshape(-1))
                p.data = self.flat[off:off + n].view(p.shape)
                self.offsets.append(off)
                off += n
        if self.path == devicehooks.DEVICE_HOOKS:
            self.host = None  # diloco_open gets NULL: the hooks load the parameters
        elif self.device_copy:
            self.host = torch.empty(self.numel, dtype=torch.float32, pin_memory=True)
        else:
            self.host = self.flat

    @staticmethod
    def check_dtypes(model):
        for name, p in model.named_parameters():
            if p.dtype != torch.float32:
                raise DiLoCoError("parameter %r is %s: ReDiLoCo runs hold fp32 parameters; call model.float() "
                                  "before joining (mixed precision belongs in autocast, not in the weights)"
                                  % (name, str(p.dtype).replace("torch.", "")))

    def name_index(self, message):
        """message with "at index N" of the flat vector followed by the tensor and element it is."""
        m = re.search(r"at index (\d+)", message)
        if not m or int(m.group(1)) >= self.numel:
            return message
        i = int(m.group(1))
        t = bisect.bisect_right(self.offsets, i) - 1
        return "%s [parameter %r, element %d]" % (message, self.names[t], i - self.offsets[t])

    def host_pointer(self):
        if self.host is None:
            return None
        return ctypes.cast(self.host.data_ptr(), ctypes.POINTER(ctypes.c_float))

    def device_hooks(self):
        """devicehooks.CudaHooks over the flat buffer, trained on the device's current stream (device hooks path)."""
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        return devicehooks.CudaHooks(self.flat, index, torch.cuda.current_stream(self.device).cuda_stream)

    def loaded_all(self):
        """diloco_open wrote the global parameters into the host buffer."""
        if self.device_copy:
            self.flat.copy_(self.host)

    def before_step(self, dl):
        """The host copy must be current before a call that syncs (CUDA models)."""
        if self.device_copy and dl.steps_to_sync <= 1:
            self.host.copy_(self.flat)

    def before_sync(self):
        if self.device_copy:
            self.host.copy_(self.flat)

    def on_params(self, ctx, off, n, err, errlen):
        try:
            self.flat[off:off + n].copy_(self.host[off:off + n])
            return 0
        except Exception as e:  # the library reports it; nothing may unwind through C
            ctypes.memmove(err, str(e).encode()[:errlen - 1] + b"\0", min(len(str(e).encode()) + 1, errlen))
            return -1


def check_layout(layout_json, flat):
    """DiLoCoError naming the first tensor where the model differs from the run's layout."""
    if not layout_json:
        return
    try:
        layout = json.loads(layout_json)
    except ValueError as e:
        raise DiLoCoError("the run's layout field is not JSON (%s)" % e)
    mine = list(zip(flat.names, flat.shapes, flat.offsets))
    for i, (name, shape, off) in enumerate(layout):
        if i >= len(mine):
            raise DiLoCoError("the run has tensor %r %s at offset %d that the model lacks (the model has %d "
                              "tensors, the run %d)" % (name, list(shape), off, len(mine), len(layout)))
        mname, mshape, moff = mine[i]
        if mname != name or list(mshape) != list(shape) or moff != off:
            raise DiLoCoError("tensor %d of the run is %r %s at offset %d, the model's is %r %s at offset %d: "
                              "the model's parameters (names, shapes, order of named_parameters()) must be the "
                              "run's" % (i, name, list(shape), off, mname, list(mshape), moff))
    if len(mine) > len(layout):
        raise DiLoCoError("the model has tensor %r %s that the run lacks (the model has %d tensors, the run %d)"
                          % (mine[len(layout)][0], list(mine[len(layout)][1]), len(mine), len(layout)))
