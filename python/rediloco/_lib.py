"""_lib.py: libdiloco through ctypes (the structs and functions of worker/diloco.h, mirrored).

The package talks to a run only through libdiloco.so: ctypes needs no compiler and no Python headers,
and the library already does everything that matters (sockets, threads, retries) in C, so a call
costs one foreign-function hop. The mirrors below must match diloco.h; load() compares the sizes the
library reports (diloco_options_size, diloco_sync_info_size) with ctypes' and refuses a mismatch
rather than corrupt memory.

Where the library is looked for, first found wins:
    $REDILOCO_LIB                         an explicit path
    <package>/../../build/libdiloco.so    the source tree this package lives in (make python)
    <package>/libdiloco.so.0              installed next to the package (make install-python, or
                                          `pip install ./python` in a built tree: setup.py)
    <libdir>/libdiloco.so.0               where `make install` put it, as pkg-config said when
                                          `pip install` built the package without one (_libdir.py)
    libdiloco.so.0                        the dynamic loader's search path (make install + ldconfig)
"""
import ctypes
import os

ABI_VERSION = 0  # the DILOCO_ABI_VERSION these mirrors were written for

LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = 0, 1, 2, 3
LOG_DEFAULT = -1
STOP_SHUTDOWN, STOP_ASKED, STOP_RANK, STOP_RECREATED, STOP_REPLACED = 1, 2, 3, 4, 5  # diloco_stop_requested's answers (DILOCO_STOP_*)
STOPPED = -2  # diloco_open: a stop ended the join (DILOCO_STOPPED)

c_float_p = ctypes.POINTER(ctypes.c_float)
# The hooks' `char *err, size_t errlen`: err is the C buffer the hook fills, so a callback type takes it as
# c_void_p (its address, which fill_err writes through); a c_char_p would hand a Python callback
# a bytes copy of the buffer's current text, and a message written there went nowhere, past that copy's end.
DELTA_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_size_t)
LOAD_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, c_float_p, ctypes.c_size_t, ctypes.c_size_t,
                           ctypes.c_int, ctypes.c_double, ctypes.c_void_p, ctypes.c_size_t)
HOST_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
HOST_FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
ON_PARAMS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                ctypes.c_void_p, ctypes.c_size_t)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


def fill_err(err, errlen, exc):
    """A Python callback's exception as its hook's error: "Type: message" into libdiloco's buffer err (an
    address, as the callback types above take it) of errlen bytes, cut to fit. Nothing may unwind through C."""
    if not err or errlen < 1:
        return
    msg = ("%s: %s" % (type(exc).__name__, exc)).encode(errors="replace")[:errlen - 1]
    ctypes.memmove(err, msg + b"\0", len(msg) + 1)


class DeviceOps(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("delta", DELTA_FN), ("load", LOAD_FN),
                ("host_alloc", HOST_ALLOC_FN), ("host_free", HOST_FREE_FN)]


GROUP_ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                      ctypes.c_void_p, ctypes.c_size_t)
GROUP_BROADCAST_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, c_float_p, ctypes.c_size_t, ctypes.c_size_t,
                                      ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)


class GroupOps(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int), ("rank", ctypes.c_int), ("ctx", ctypes.c_void_p),
                ("allgather", GROUP_ALLGATHER_FN), ("broadcast", GROUP_BROADCAST_FN),
                ("slices", ctypes.POINTER(ctypes.c_uint64)), ("nslices", ctypes.c_int)]


class Options(ctypes.Structure):
    _fields_ = [
        ("redis_url", ctypes.c_char_p), ("run", ctypes.c_char_p), ("worker_id", ctypes.c_char_p),
        ("sync_every", ctypes.c_int), ("bf16", ctypes.c_int), ("heartbeat_interval_ms", ctypes.c_int),
        ("max_sync_retries", ctypes.c_int), ("net_timeout_ms", ctypes.c_int), ("sync_timeout_ms", ctypes.c_int),
        ("wait_poll_ms", ctypes.c_int), ("connect_timeout_ms", ctypes.c_int), ("dylu", ctypes.c_int),
        ("num_fragments", ctypes.c_int), ("fragment_alpha", ctypes.c_double),
        ("simulate_latency_ms", ctypes.c_int), ("stop", ctypes.POINTER(ctypes.c_int)),
        ("on_params", ON_PARAMS_FN), ("on_params_ctx", ctypes.c_void_p), ("device", DeviceOps),
        ("log_callback", LOG_FN), ("log_ctx", ctypes.c_void_p), ("log_level", ctypes.c_int),
        ("error_feedback", ctypes.c_int), ("group", GroupOps), ("fragments_in_flight", ctypes.c_int),
    ]


class SyncInfoC(ctypes.Structure):
    _fields_ = [
        ("fragment", ctypes.c_int), ("round", ctypes.c_int64), ("version", ctypes.c_int64),
        ("seconds", ctypes.c_double), ("wait_seconds", ctypes.c_double),
        ("bytes_up", ctypes.c_uint64), ("bytes_down", ctypes.c_uint64), ("digest", ctypes.c_uint64),
        ("stale", ctypes.c_int),
        ("t_first_send_us", ctypes.c_uint64), ("t_pushed_us", ctypes.c_uint64), ("t_get_us", ctypes.c_uint64),
        ("t_last_recv_us", ctypes.c_uint64), ("confirm_seconds", ctypes.c_double),
        ("shards_digest", ctypes.c_uint64), ("confirm_shards", ctypes.c_int),
    ]


_SIGNATURES = {
    # name: (restype, argtypes)
    "diloco_version_string": (ctypes.c_char_p, []),
    "diloco_abi_version": (ctypes.c_int, []),
    "diloco_options_size": (ctypes.c_size_t, []),
    "diloco_sync_info_size": (ctypes.c_size_t, []),
    "diloco_options_default": (None, [ctypes.POINTER(Options)]),
    "diloco_open": (ctypes.c_int, [ctypes.POINTER(Options), c_float_p, ctypes.c_size_t,
                                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]),
    "diloco_peek_run": (ctypes.c_int64, [ctypes.POINTER(Options), ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p,
                                         ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
    "diloco_peek_fragments": (ctypes.c_int, [ctypes.POINTER(Options), ctypes.c_char_p, ctypes.c_size_t]),
    "diloco_after_step": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]),
    "diloco_force_sync": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]),
    "diloco_report": (None, [ctypes.c_void_p, ctypes.c_double, ctypes.c_uint64]),
    "diloco_request_stop": (None, [ctypes.c_void_p]),
    "diloco_last_sync": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(SyncInfoC)]),
    "diloco_sync_every": (ctypes.c_int, [ctypes.c_void_p]),
    "diloco_steps_to_sync": (ctypes.c_int, [ctypes.c_void_p]),
    "diloco_stop_requested": (ctypes.c_int, [ctypes.c_void_p]),
    "diloco_worker_id": (ctypes.c_char_p, [ctypes.c_void_p]),
    "diloco_version": (ctypes.c_int64, [ctypes.c_void_p]),
    "diloco_numel": (ctypes.c_size_t, [ctypes.c_void_p]),
    "diloco_is_async": (ctypes.c_int, [ctypes.c_void_p]),
    "diloco_num_fragments": (ctypes.c_int, [ctypes.c_void_p]),
    "diloco_fragment_range": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.POINTER(ctypes.c_size_t)]),
    "diloco_run_layout": (ctypes.c_char_p, [ctypes.c_void_p]),
    "diloco_group_range": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.POINTER(ctypes.c_size_t)]),
    "diloco_close": (None, [ctypes.c_void_p]),
}

_lib = None


def default_paths(name):
    """Where a library of ours (libdiloco, libdiloco_cuda) is looked for: the build tree of a checkout,
    next to the installed package, then the system's search path."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "..", "..", "build", name + ".so"), os.path.join(here, name + ".so.0")]
    try:
        from ._libdir import LIBDIR  # written by setup.py only when it bundled no library
    except ImportError:
        LIBDIR = None
    if LIBDIR:
        paths.append(os.path.join(LIBDIR, name + ".so.0"))
    return paths + [name + ".so.0"]


def open_first(paths):
    """(library, path, tried): the first of paths that loads; (None, None, tried) when none does, tried
    saying for each path why."""
    tried = []
    for path in paths:
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path), path, tried
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    return None, None, tried


def _open_first():
    env = os.environ.get("REDILOCO_LIB")
    lib, path, tried = open_first([env] if env else default_paths("libdiloco"))
    if lib is None:
        raise OSError("libdiloco not found; build it with `make python` in the ReDiLoCo tree, install it with "
                      "`make install`, or set REDILOCO_LIB to its path. Tried: " + "; ".join(tried))
    return lib, path


def load():
    """The loaded libdiloco with its functions typed; checked against the mirrors above once."""
    global _lib
    if _lib is not None:
        return _lib
    lib, path = _open_first()
    for name, (restype, argtypes) in _SIGNATURES.items():
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = argtypes
    if lib.diloco_abi_version() != ABI_VERSION:
        raise OSError("%s has ABI version %d, this package was written for %d: rebuild the package with the "
                      "library (make python)" % (path, lib.diloco_abi_version(), ABI_VERSION))
    for what, got, want in (("diloco_options", lib.diloco_options_size(), ctypes.sizeof(Options)),
                            ("diloco_sync_info", lib.diloco_sync_info_size(), ctypes.sizeof(SyncInfoC))):
        if got != want:
            raise OSError("%s: sizeof(%s) is %d in the library but %d in rediloco/_lib.py: the package and "
                          "the library do not match (make python)" % (path, what, got, want))
    lib.path = path
    _lib = lib
    return lib
