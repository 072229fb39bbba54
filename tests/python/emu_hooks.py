"""emu_hooks.py: rediloco's "device hooks" path without a GPU, for the test harnesses' --device emu
(group_quad.py, quad_worker.py; tests/it_python_group_hooks.sh).

The model stays on the CPU. libdiloco_cuda.so's entry and the CUDA backend's hooks (worker/cuda/diloco_cuda.cu)
come from the CPU CUDA emulator's build of that library (build/emu/libdiloco_cuda.so, unless REDILOCO_CUDA_LIB
names another), which takes the session's flat buffer as device memory (cuda_emu_adopt), and the session
takes the "device hooks" path as on a GPU: libdiloco gets no host parameters, so every value it reads or
writes goes through the hooks' kernels and copies. The emulator queues its streams' work until something
waits for it, where a GPU orders the trainer's next kernels after that work on the stream: the harness calls
step() before each of its steps, which runs what is queued, as the CPU's torch ops would not wait for it.
"""
import ctypes
import os

from rediloco import DiLoCoError, devicehooks, params

TREE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


class EmulatedHooks:
    """Patches this process's rediloco (make one before the session opens, in the process that trains)."""

    def __init__(self):
        os.environ.setdefault("REDILOCO_CUDA_LIB", os.path.join(TREE, "build", "emu", "libdiloco_cuda.so"))
        lib = devicehooks.load_cuda()
        if lib is None or not hasattr(lib, "cuda_emu_adopt"):
            raise SystemExit("--device emu needs the emulator's libdiloco_cuda.so (make tests-build): %s"
                             % devicehooks.cuda_library_status())
        lib.cuda_emu_adopt.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.cuda_emu_forget.argtypes = [ctypes.c_void_p]
        self.lib = lib

        def hooks(flat):  # params.FlatParams.device_hooks, over the adopted CPU buffer, default stream
            rc = lib.cuda_emu_adopt(flat.flat.data_ptr(), flat.numel * 4)
            if rc != 0:
                raise DiLoCoError("cuda_emu_adopt: CUDA error %d (the emulator says why on stderr)" % rc)
            return devicehooks.CudaHooks(flat.flat, 0, 0)

        devicehooks.path_for_device = lambda device: devicehooks.DEVICE_HOOKS
        params.FlatParams.device_hooks = hooks

    def step(self):
        """Before each training step: the device's queued work runs first."""
        if self.lib.cuda_emu_synchronize() != 0:
            raise RuntimeError("the CUDA emulator faulted (it says why on stderr)")

    def release(self, dl):
        """After the session closed: the buffer back to the host, once the device's work is done."""
        if self.lib.cuda_emu_forget(dl.flat_params.data_ptr()) != 0:
            raise RuntimeError("the CUDA emulator faulted (it says why on stderr)")
