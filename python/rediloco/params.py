"""params.py: a model's parameters as one flat fp32 buffer, which libdiloco reads and writes in place.

FlatParams copies every parameter (model.named_parameters() order, shared ones once) into one contiguous
fp32 tensor and makes each p.data a view of its slice, so the optimizer, autograd and libdiloco all see
the same memory and a sync's new global values need no copy. A model off the CPU keeps its flat buffer
on its device; how libdiloco reaches it is its transfer path (devicehooks.py): on CUDA with
libdiloco_cuda.so, libdiloco's device hooks work on the device buffer itself (no host buffer here);
otherwise a page-locked host mirror: device -> host before a step that syncs, host -> device for each
range the library wrote (on_params). What a model must be to get here (fp32 parameters on one device)
is checked by checks.model_tensors, which also gives the tensors' names, shapes and offsets.
"""
import bisect
import ctypes
import re

import torch

from . import _lib, devicehooks
from .checks import model_tensors


def name_index(message, offsets, names, numel, where):
    """message with "at index N" of a buffer of tensors names[i] at offsets[i] (numel in all) followed by where
    % (the tensor's name, the element in it)."""
    m = re.search(r"at index (\d+)", message)
    if not m or int(m.group(1)) >= numel:
        return message
    i = int(m.group(1))
    t = bisect.bisect_right(offsets, i) - 1
    return "%s %s" % (message, where % (names[t], i - offsets[t]))


class FlatParams:
    def __init__(self, model):
        tensors = model_tensors(model)
        named = list(model.named_parameters())
        self.names = [n for n, _, _ in tensors]
        self.shapes = [s for _, s, _ in tensors]
        self.layout = tensors
        self.numel = sum(p.numel() for _, p in named)
        self.device = named[0][1].device
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
            # page-locked for a device's copies; a CPU model on this path (REDILOCO_HOST_COPY=1) has no device
            self.host = torch.empty(self.numel, dtype=torch.float32, pin_memory=self.device.type == "cuda")
        else:
            self.host = self.flat

    def replaced(self, module, first_only=False):
        """None, or the name of the first of module's parameters that is no longer a view of its slice of the
        flat buffer: model.to(...), .double(), .cuda() inside a session give every parameter new memory
        (another dtype or device), which the syncs would neither read nor write. first_only: only the first
        parameter (what those calls replace with the rest: a check cheap enough for every step)."""
        base, size = self.flat.data_ptr(), self.flat.element_size()
        for (name, p), off in zip(module.named_parameters(), self.offsets):
            if p.dtype != self.flat.dtype or p.device != self.flat.device or p.data_ptr() != base + off * size:
                return "%r (now %s on %s)" % (name, str(p.dtype).replace("torch.", ""), p.device)
            if first_only:
                break
        return None

    def name_index(self, message):
        """message with "at index N" of the flat vector followed by the tensor and element it is."""
        return name_index(message, self.offsets, self.names, self.numel, "[parameter %r, element %d]")

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
            _lib.fill_err(err, errlen, e)
            return -1

