"""rediloco: PyTorch training loops as workers of a ReDiLoCo run (docs/python.md).

    import rediloco
    rediloco.init_run("redis://127.0.0.1:6390", "r1", model, workers=2, shards=8)   # once, anywhere
    with rediloco.DiLoCo("redis://127.0.0.1:6390", "r1", model, inner, sync_every=100) as dl:
        ...  # the usual loop; the sync happens inside inner.step()
    rediloco.load_checkpoint(model, "ckpt/checkpoint-12.safetensors")

Pure Python over libdiloco.so through ctypes; PyTorch is the only other dependency.
"""
from .errors import DiLoCoError, Stopped
from .syncinfo import SyncInfo

__version__ = "0.1.0"

# What needs torch is imported on first use, so `python3 -m rediloco init` starts at once.
_LAZY = {"DiLoCo": "diloco", "init_run": "run", "save_state": "run", "load_checkpoint": "checkpoint",
         "read_checkpoint": "checkpoint", "transfer_path": "devicehooks", "BuffersNotSynced": "buffers"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module("." + _LAZY[name], __name__), name)
    raise AttributeError("module 'rediloco' has no attribute %r" % name)


def library_version() -> str:
    """Version string of the libdiloco this package loaded."""
    from . import _lib
    return _lib.load().diloco_version_string().decode()


__all__ = ["DiLoCo", "DiLoCoError", "Stopped", "BuffersNotSynced", "SyncInfo", "init_run", "save_state", "load_checkpoint",
           "read_checkpoint", "transfer_path", "library_version", "__version__"]
