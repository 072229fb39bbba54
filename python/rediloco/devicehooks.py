"""devicehooks.py: how a model's parameters reach libdiloco, and the CUDA device hooks when they are used.

Three paths, chosen per model when DiLoCo opens (transfer_path tells which without opening anything):
    "cpu"               parameters on the CPU: libdiloco reads and writes the flat buffer itself.
    "device hooks"      parameters on a CUDA device and libdiloco_cuda.so loads: the flat buffer stays on the
                        device and libdiloco drives it through diloco_device_ops (worker/diloco.h), filled by
                        the CUDA backend's hooks (worker/cuda/diloco_cuda.cu): the pseudo-gradient is taken and
                        cast to bf16 on the device, only its bytes cross PCIe, new global values are copied in
                        on a stream of their own.
                        A process group's rank too: libdiloco then hands the group's broadcast its own host
                        copy of the global parameters and loads the rank's device buffer from it.
    "pinned host copy"  any other device, CUDA without libdiloco_cuda.so, or a sharded group's chunks on a GPU
                        (sharded.py): a page-locked host mirror of the flat buffer, copied
                        device -> host before a sync and host -> device after it. REDILOCO_HOST_COPY=1 takes
                        this path for every model, a CPU model too (the mirror then is not page-locked): how
                        the tests run it without a GPU.

Where libdiloco_cuda.so is looked for, first found wins (as _lib.py does for libdiloco.so):
    $REDILOCO_CUDA_LIB                          an explicit path ("" turns the device hooks off)
    <package>/../../build/libdiloco_cuda.so     the source tree (make python, when nvcc exists)
    <package>/libdiloco_cuda.so.0               installed next to the package (make install-python)
    libdiloco_cuda.so.0                         the dynamic loader's search path
"""
from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

from . import _lib
from .errors import DiLoCoError

if TYPE_CHECKING:
    import torch

CPU, DEVICE_HOOKS, PINNED_HOST_COPY = "cpu", "device hooks", "pinned host copy"
_ERRLEN = 1024

_cuda = None       # the loaded libdiloco_cuda, once found
_cuda_why = None   # why it is not used, once that is known


def _candidates():
    if "REDILOCO_CUDA_LIB" in os.environ:
        env = os.environ["REDILOCO_CUDA_LIB"]
        return [env] if env else []
    return _lib.default_paths("libdiloco_cuda")


def load_cuda():
    """libdiloco_cuda with its two functions typed, or None (cuda_library_status() says why)."""
    global _cuda, _cuda_why
    if _cuda is not None or _cuda_why is not None:
        return _cuda
    lib, path, tried = _lib.open_first(_candidates())
    if lib is not None:
        lib.diloco_cuda_ops_for.restype = ctypes.c_int
        lib.diloco_cuda_ops_for.argtypes = [_lib.c_float_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.POINTER(_lib.DeviceOps), ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.c_char_p, ctypes.c_size_t]
        lib.diloco_cuda_release.restype = None
        lib.diloco_cuda_release.argtypes = [ctypes.c_void_p]
        lib.path = path
        _cuda = lib
        return lib
    _cuda_why = ("libdiloco_cuda.so not found (it is built by `make python` when nvcc exists); tried: "
                 + ("; ".join(tried) if tried else "nothing, REDILOCO_CUDA_LIB is empty"))
    return None


def cuda_library_status() -> str:
    """The path of the libdiloco_cuda in use, or why there is none."""
    lib = load_cuda()
    return lib.path if lib is not None else _cuda_why


def path_for_device(device):
    """The transfer path of parameters on torch.device `device`."""
    if os.environ.get("REDILOCO_HOST_COPY") == "1":
        return PINNED_HOST_COPY
    if device.type == "cpu":
        return CPU
    if device.type == "cuda" and load_cuda() is not None:
        return DEVICE_HOOKS
    return PINNED_HOST_COPY


def transfer_path(model: torch.nn.Module, process_group: bool = False) -> str:
    """How DiLoCo would move this model's parameters: "cpu", "device hooks" or "pinned host copy".
    process_group is kept for callers that pass it: a rank of a process group takes the same path (the device
    hooks too: a group gives libdiloco its ranks' device hooks as a single process does); a fully_shard model's
    chunks on a GPU take the pinned host copy (sharded.py)."""
    devices = {p.device for p in model.parameters()}
    if len(devices) != 1:
        raise DiLoCoError("the model's parameters are on %s: put them on one device"
                          % ("no device (it has none)" if not devices else "several devices"))
    del process_group  # (the same answer for a group's rank)
    from .sharded import is_dtensor  # (sharded.py imports this module)
    device = devices.pop()
    if device.type == "cuda" and any(is_dtensor(p) for p in model.parameters()):
        return PINNED_HOST_COPY  # fully_shard's chunks: sharded.ShardedParams
    return path_for_device(device)


class CudaHooks:
    """libdiloco's device hooks over a flat CUDA fp32 tensor trained on `stream_ptr` (a cudaStream_t, 0 for the
    default stream). .ops goes into diloco_options.device; release() after diloco_close."""

    def __init__(self, flat, device_index, stream_ptr):
        self.lib = load_cuda()
        self.ops = _lib.DeviceOps()
        self.handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = self.lib.diloco_cuda_ops_for(ctypes.cast(flat.data_ptr(), _lib.c_float_p), flat.numel(),
                                          ctypes.c_void_p(stream_ptr or None), device_index, ctypes.byref(self.ops),
                                          ctypes.byref(self.handle), err, _ERRLEN)
        if rc < 0:
            raise DiLoCoError("CUDA device hooks (%s): %s; set REDILOCO_CUDA_LIB=\"\" to copy through pinned host "
                              "memory instead" % (self.lib.path, err.value.decode(errors="replace")))

    def release(self):
        if self.handle:
            self.lib.diloco_cuda_release(self.handle)
            self.handle = ctypes.c_void_p()
