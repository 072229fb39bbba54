"""diloco.py: rediloco.DiLoCo, a PyTorch training loop's session in a ReDiLoCo run.

    with rediloco.DiLoCo(url, run, model, inner_optimizer, sync_every=100) as dl:
        for batch in data:
            loss = ...; loss.backward(); inner_optimizer.step(); inner_optimizer.zero_grad()
            dl.report(loss.item(), tokens=batch.numel())

Entering the block first checks the model against the run, read without joining it (checks.py): a model
that is not the run's is refused before anything is written anywhere. It then moves the model's
parameters into one flat fp32 buffer (params.FlatParams), opens a
libdiloco session on it (which writes the run's current global parameters into it) and hooks the inner
optimizer's step: after every step the hook calls diloco_after_step, which every H steps runs a sync and
writes the new global parameters into the same buffer, so the model sees them with no copy through
Python. Leaving the block deregisters the worker.

SIGINT and SIGTERM while the block runs stop the session (diloco_request_stop: a sync waiting gives up at
once); the next hook raises Stopped, which the block swallows, so the code after it runs. The ranks of a
process group stop together: a rank's stop is agreed at the group's next collective (within about a
second), and from there every rank raises Stopped at the same step (a rank stopping alone would
leave the others waiting in their next DDP allreduce). A stop while
entering (joining: waiting for Redis, a shard-server, the run's parameters) raises the same Stopped, from
the `with` statement itself: the block never ran, so nothing swallows it. The previous handlers come back
when the block ends (or the join gives up). The names of the arguments follow torchft's local_sgd.DiLoCo
where they mean the same thing (sync_every, fragment_sync_delay, fragment_update_alpha).
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
import types
import warnings
import weakref
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from . import _lib, checks, devicehooks, group, sharded
from .buffers import BufferWatch
from .errors import DiLoCoError, Stopped, user_stacklevel
from .params import FlatParams
from .syncinfo import SyncInfo

if TYPE_CHECKING:
    import torch

_LEVELS = {"debug": _lib.LOG_DEBUG, "info": _lib.LOG_INFO, "warn": _lib.LOG_WARN, "error": _lib.LOG_ERROR}
_ERRLEN = 1024

# The open sessions by model and by inner optimizer: a second session on either (a notebook cell run again
# before the first session was closed) is refused at open. Both would hook the optimizer's step, join as the
# same default worker id and end each other at the first sync.
_IN_SESSION = weakref.WeakKeyDictionary()


_MS_MAX = 2 ** 31 - 1  # libdiloco's fields are C ints of milliseconds


def _ms(seconds, what, positive=False):
    """seconds as libdiloco's milliseconds; positive: a limit that 0 would make fail at once (a timeout of
    a request or a sync), where 0 elsewhere means one attempt (connect_timeout) or none (heartbeats)."""
    if not _is_number(seconds):
        raise TypeError("%s must be a number of seconds, got %s" % (what, checks._kind(seconds)))
    least = 0.001 if positive else 0  # (milliseconds: a positive limit rounded to 0 ms would be none)
    if not least <= seconds <= _MS_MAX / 1000:
        raise ValueError("%s must be a number of seconds %s, got %r" % (
            what, "of at least 0.001" if positive else ">= 0", seconds) if seconds < least else
            "%s must be at most %d seconds, got %r" % (what, _MS_MAX // 1000, seconds))
    return max(int(round(seconds * 1000)), 1 if positive else 0)


def _is_number(x):
    """An int or float, not a bool (True would pass for 1) nor a string."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


# libdiloco's messages name its options as the C worker's flags and diloco_options' fields; to a Python
# user they are DiLoCo's arguments. Lua's error codes (BADARG, SHUTDOWN, ...: lua/00_header.lua) lead some.
_PY_NAMES = {"--heartbeat-interval": "heartbeat_interval", "--fragments-in-flight": "fragments_in_flight",
             "--fragment-alpha": "fragment_update_alpha", "--sync-every": "sync_every", "--worker-id": "worker_id",
             "--error-feedback": "error_feedback", "--max-sync-retries": "max_sync_retries"}
_C_FIELD = re.compile(r" \(diloco_options\.\w+[^)]*\)")
_LUA_CODE = re.compile(r"(^|: )(?:NORUN|EXISTS|BADARG|UNKNOWN_WORKER|STALE|NOTCLOSED|FENCED|VERSION|ALIVE|SHUTDOWN|"
                       r"OLDRUN|RECREATED|GROUP) (?=[a-z])")  # the codes of lua/00_header.lua


def _python_words(message):
    """message from libdiloco as a Python user reads it: DiLoCo's argument names for the C flags, without
    "(diloco_options.field ...)" asides or a leading Lua error code."""
    message = _C_FIELD.sub("", _LUA_CODE.sub(r"\1", message))
    return re.sub(r"--[a-z-]+\b", lambda m: _PY_NAMES.get(m.group(0), m.group(0)), message)


class _SignalWatch:
    """SIGINT/SIGTERM turned into a stop request, even while the main thread waits inside libdiloco.

    A Python signal handler runs only when the main thread executes bytecode, which it does not while a
    sync waits at a barrier in C. So the C-level handler's wakeup byte (signal.set_wakeup_fd) is read by
    a thread that calls on_signal at once; the Python handlers only keep the default KeyboardInterrupt
    away. Whatever was there before (handlers, wakeup fd) comes back on close()."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_signal):
        self.on_signal = on_signal
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.wfd, False)
        self.old_handlers = {s: signal.signal(s, self._python_handler) for s in self.SIGNALS}
        self.old_wakeup = signal.set_wakeup_fd(self.wfd)
        self.thread = threading.Thread(target=self._read, name="rediloco-signals", daemon=True)
        self.thread.start()

    def _python_handler(self, signum, frame):
        self.on_signal(signum)

    def _read(self):
        while True:
            try:
                data = os.read(self.rfd, 64)
            except OSError:
                return
            if not data:
                return
            if self.old_wakeup >= 0:  # whoever had the wakeup fd before still hears of every signal
                try:
                    os.write(self.old_wakeup, data)
                except OSError:
                    pass
            for b in data:
                if b in self.SIGNALS:
                    self.on_signal(b)

    def close(self):
        signal.set_wakeup_fd(self.old_wakeup)
        for s, h in self.old_handlers.items():
            signal.signal(s, h)
        os.close(self.wfd)  # the reader sees end of file and leaves
        self.thread.join(timeout=5)
        os.close(self.rfd)


class DiLoCo:
    """A worker of ReDiLoCo run `run` at Redis `url`, training `model` with `inner_optimizer`.

    The outer optimizer runs on the shard-servers and is the run's (init_run's outer_lr, outer_momentum,
    nesterov); outer_optimizer exists for torchft's signature and must be None. Everything else is the
    worker's: sync_every (H), bf16 pseudo-gradients, error_feedback (int8/int4/int3/int2 runs), dylu, fragment_update_alpha (Streaming DiLoCo's
    mixing of the local and global values), fragments_in_flight (Streaming: rounds in flight at once, each
    fragment applied that many intervals after it was sent; sync runs only; at most the run's fragments - 1
    with fragment_update_alpha 0), worker_id, heartbeat_interval, timeouts in seconds.

    process_group (a torch.distributed process group, e.g. dist.group.WORLD, of more than one process):
    the processes of the group are ONE worker of the run, data-parallel inside (DDP; a DDP model is synced
    through its module); every rank makes the same DiLoCo(...) call; worker_id is the group's (group.py). A
    model sharded by fully_shard (torch >= 2.4: its parameters are DTensors, Shard(0) over the group), or with
    sharded=True one whose parameters are this rank's dim-0 chunks already, makes a sharded group: each rank
    moves exactly its chunks, in a run made with init_run(..., fsdp_ranks=R) (sharded.py). FSDP1 and HSDP are
    refused with NotImplementedError."""

    def __init__(self, url: str, run: str, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer,
                 outer_optimizer: None = None, sync_every: int = 500,
                 fragment_sync_delay: Optional[int] = None, fragment_update_alpha: float = 0.0,
                 fragments_in_flight: int = 1, worker_id: Optional[str] = None, bf16: bool = True, dylu: bool = False,
                 error_feedback: bool = False, heartbeat_interval: float = 30.0, max_sync_retries: int = 3,
                 connect_timeout: float = 60.0, net_timeout: float = 60.0, sync_timeout: float = 120.0,
                 handle_signals: bool = True, log: Optional[Callable[[int, str], None]] = None,
                 log_level: Optional[str] = None,
                 process_group: Optional[torch.distributed.ProcessGroup] = None, sharded: bool = False) -> None:
        checks.check_arguments(url, run, model, inner_optimizer)
        if outer_optimizer is not None:
            raise TypeError("outer_optimizer must be None: the outer optimizer runs on the shard-servers; set it "
                            "when the run is created (init_run(..., outer_lr=, outer_momentum=, nesterov=))")
        if not _is_int(sync_every) or sync_every < 1:
            raise ValueError("sync_every must be a positive integer, got %r" % (sync_every,))
        if not _is_number(fragment_update_alpha):
            raise TypeError("fragment_update_alpha must be a number in [0, 1), got %s" % checks._kind(fragment_update_alpha))
        if not 0 <= fragment_update_alpha < 1:
            raise ValueError("fragment_update_alpha must be in [0, 1), got %r" % (fragment_update_alpha,))
        if not _is_int(fragments_in_flight) or fragments_in_flight < 1:
            raise ValueError("fragments_in_flight must be a positive integer, got %r" % (fragments_in_flight,))
        if fragment_sync_delay is not None and (not _is_int(fragment_sync_delay) or fragment_sync_delay < 0):
            raise ValueError("fragment_sync_delay must be None (best) or an integer >= 0, got %r" % (fragment_sync_delay,))
        if not _is_int(max_sync_retries) or max_sync_retries < 0:
            raise ValueError("max_sync_retries must be an integer >= 0 (failed syncs in a row before registering "
                             "again), got %r" % (max_sync_retries,))
        if worker_id is not None and (not isinstance(worker_id, str) or not 0 < len(worker_id) <= 63 or
                                      any(c in worker_id for c in ", :\t\n")):
            raise ValueError("worker_id must be a string of 1 to 63 characters without commas, colons or spaces "
                             "(None: <hostname>-<pid>), got %r" % (worker_id,))
        if log_level is not None and log_level not in _LEVELS:
            raise ValueError("log_level is one of %s, got %r" % (", ".join(_LEVELS), log_level))
        if log is not None and not callable(log):
            raise TypeError("log must be a callable log(level, message), got %r" % (log,))
        self.url, self.run, self.model, self.inner_optimizer = url, run, model, inner_optimizer
        self.sync_every_requested = sync_every
        self.fragment_sync_delay = fragment_sync_delay
        self.fragment_update_alpha = float(fragment_update_alpha)
        self.fragments_in_flight = fragments_in_flight
        self.worker_id_requested = worker_id
        self.bf16, self.dylu, self.error_feedback = bool(bf16), bool(dylu), bool(error_feedback)
        self.timeouts = {"heartbeat_interval_ms": _ms(heartbeat_interval, "heartbeat_interval"),
                         "connect_timeout_ms": _ms(connect_timeout, "connect_timeout"),
                         "net_timeout_ms": _ms(net_timeout, "net_timeout", positive=True),
                         "sync_timeout_ms": _ms(sync_timeout, "sync_timeout", positive=True)}
        self.max_sync_retries = max_sync_retries
        self.handle_signals = handle_signals
        self.log, self.log_level = log, log_level
        self._d = None
        self._withs = 0  # `with` blocks of this session open now: only the outermost one closes it
        self._lib = None
        self._flat = None
        self._buffers = None  # BufferWatch: warns at the first sync of buffers that training changed
        self._device_hooks = None
        self._signals = None
        self._hook = None
        self._stop = ctypes.c_int(0)
        self._stop_reason = None  # this process's own stop (stop(), a signal)
        self._why = None  # the session's stop once libdiloco said so (_stopped_why)
        self._tokens = 0
        self._steps = 0  # inner steps in this session (the stop line says them)
        self._err = ctypes.create_string_buffer(_ERRLEN)
        self._callbacks = []  # ctypes callbacks the library holds: alive until close
        self.process_group = process_group
        self._group = None
        self._claimed = []  # the model and inner optimizer, marked as this session's (_IN_SESSION)
        self._module = None
        self.sharded_requested = bool(sharded)
        self.sharded = False  # set at open: sharded=True, or a fully_shard model

    # ---- opening and closing ------------------------------------------------------------------------

    def __enter__(self) -> DiLoCo:
        self.open()
        self._withs += 1
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        # a `with dl:` inside another (a helper that takes the session and enters it again) leaves it open for
        # the outer block: closing there detached the model for the rest of the outer block, silently
        self._withs -= 1
        if self._withs == 0:
            self.close()
        return exc_type is not None and issubclass(exc_type, Stopped)

    def open(self) -> DiLoCo:
        """Join the run: the model's parameters become the run's current global ones. Raises Stopped when a
        stop (SIGINT, SIGTERM, stop()) came while it joined: the session is closed, nothing of it left."""
        if self._d is not None:
            return self
        if self.process_group is not None:  # every rank the same error, before anything is touched
            fully_shard = sharded.check_model(self.model, lambda: group.Group(self.process_group).size)
            self.sharded = fully_shard or self.sharded_requested
        elif self.sharded_requested or any(sharded.is_dtensor(p) for p in self.model.parameters()):
            raise DiLoCoError("a sharded model (sharded=True, or fully_shard's DTensor parameters) needs its "
                              "process_group: each rank holds only its chunks, the group is the worker")
        self._lib = _lib.load()
        module = group.unwrap(self.model)  # a DDP model is synced through its module
        tensors = checks.model_tensors(module)
        self._claim(module)
        try:
            if self.handle_signals and threading.current_thread() is threading.main_thread():
                self._signals = _SignalWatch(self._on_signal)
            self._open_group(tensors)  # a process group's ranks agree first: one error on every rank
            if self.sharded and self._group is None:
                raise DiLoCoError("a sharded model needs a process group of 2 or more processes (this one has 1): "
                                  "a process holding the whole model joins without process_group")
            if self.sharded:
                self._flat = self._sharded_params(module)  # checked against the run, on every rank
            else:
                self._check_run(tensors)  # before anything is written anywhere, the model's tensors included
            self._check_fragment_delay_early()
            if not self.sharded:
                self._flat = FlatParams(module)
            self._module = module
            self._buffers = BufferWatch(module)
            if self._group is not None:
                self._group.attach(self._flat)
            self._open_session()
            if not self.sharded:
                self._check_layout(self._layout_json(), self._flat.layout)  # the run as diloco_open read it
            self._check_fragments()
            self._hook = _install_step_hook(self.inner_optimizer, self._after_step)
        except BaseException as e:
            self.close()
            if isinstance(e, DiLoCoError) and self._stop_reason is not None:
                # a stop while joining (e.g. Ctrl-C while it waits for a shard-server) is a stop, as in training
                raise Stopped(self._stop_reason) from e
            raise
        return self

    def _claim(self, module):
        """Mark module and the inner optimizer as this session's; DiLoCoError when another open one has either."""
        for what, obj in (("model", module), ("optimizer", self.inner_optimizer)):
            other = _IN_SESSION.get(obj)
            if other is not None and other is not self:
                raise DiLoCoError("this %s is already in an open session (of run %r): close it first: dl.close()"
                                  % (what, other.run))
        self._claimed = [module, self.inner_optimizer]
        for obj in self._claimed:
            _IN_SESSION[obj] = self

    def _check_run(self, tensors):
        """The model against the run as Redis holds it, read without joining (diloco_peek_run)."""
        try:
            numel, layout = checks.peek_run(self._lib, self._base_options())
        except DiLoCoError as e:
            raise DiLoCoError("cannot join run %r at %s: %s" % (self.run, _redact(self.url), e)) from e
        self._check_layout(layout, tensors, numel)

    def _sharded_params(self, module):
        """This rank's chunks against the run's layout (read without joining): one error on every rank."""
        flat, error = None, None
        try:
            numel, layout = checks.peek_run(self._lib, self._base_options())
            flat = sharded.ShardedParams(module, layout, self._group.size, self._group.rank)
        except DiLoCoError as e:
            error = "cannot join run %r: %s" % (self.run, e)
        self._group.agree_ok(error)
        return flat

    def _check_layout(self, layout, tensors, numel=None):
        try:
            checks.check_layout(layout, tensors, numel)
        except DiLoCoError as e:
            raise DiLoCoError("cannot join run %r: %s" % (self.run, e)) from e

    def _options(self):
        o = self._base_options()
        if self._flat.device_copy:
            cb = _lib.ON_PARAMS_FN(self._flat.on_params)
            self._callbacks.append(cb)
            o.on_params = cb
        if self._flat.path == devicehooks.DEVICE_HOOKS:
            self._device_hooks = self._flat.device_hooks()
            o.device = self._device_hooks.ops
        if self._group is not None:
            o.group = self._group.ops()
        return o

    def _open_group(self, tensors):
        """A process group of more than one process: its ranks agree on what they were given (group.py)."""
        if self.process_group is None:
            return
        g = group.Group(self.process_group)
        if g.size < 2:
            return  # a group of one process is a worker like any other
        self._group = g
        # a sharded rank's shapes are its chunks' (they differ by rank): the names, and sharded, must agree
        g.agree({"run": self.run, "sync_every": self.sync_every_requested, "worker_id": self.worker_id_requested,
                 "bf16": self.bf16, "error_feedback": self.error_feedback, "sharded": self.sharded,
                 "model tensors": [[name] if self.sharded else [name, list(shape)] for name, shape, _ in tensors]})

    def _base_options(self):
        """The options that say who joins what, without the model's buffer (diloco_peek_run takes these)."""
        o = _lib.Options()
        self._lib.diloco_options_default(ctypes.byref(o))
        self._keep = [self.url.encode(), self.run.encode()]
        o.redis_url, o.run = self._keep[0], self._keep[1]
        if self.worker_id_requested is not None:
            self._keep.append(str(self.worker_id_requested).encode())
            o.worker_id = self._keep[-1]
        o.sync_every = self.sync_every_requested
        o.bf16 = int(self.bf16)
        o.dylu = int(self.dylu)
        o.error_feedback = int(self.error_feedback)
        o.fragment_alpha = self.fragment_update_alpha
        o.fragments_in_flight = self.fragments_in_flight
        o.max_sync_retries = self.max_sync_retries
        for field, ms in self.timeouts.items():
            setattr(o, field, ms)
        o.stop = ctypes.pointer(self._stop)
        if self.log_level is not None:
            o.log_level = _LEVELS[self.log_level]
        if self.log is not None:
            cb = _lib.LOG_FN(lambda ctx, level, msg: self.log(level, self._named(msg.decode(errors="replace"))))
            self._callbacks.append(cb)
            o.log_callback = cb
        return o

    def _open_session(self):
        o = self._options()
        d = ctypes.c_void_p()
        rc = self._lib.diloco_open(ctypes.byref(o), self._flat.host_pointer(), self._flat.numel, ctypes.byref(d),
                                   self._err, _ERRLEN)
        if rc == _lib.STOPPED:  # this process's stop, or (a process group) another rank's: every rank gets it
            raise Stopped(self._stop_reason or self._message())
        if rc < 0:
            raise DiLoCoError("cannot join run %r at %s: %s" % (self.run, _redact(self.url), self._message()))
        self._d = d
        self._flat.loaded_all()

    def _check_fragment_delay_early(self):
        """fragment_sync_delay against the run's fragments, read without registering (diloco_peek_fragments):
        a wrong one is refused before the worker joins. (With dylu the run may give another H: checked again
        once open.)"""
        if self.fragment_sync_delay is None or self.dylu:
            return
        nf = self._lib.diloco_peek_fragments(ctypes.byref(self._base_options()), self._err, _ERRLEN)
        if nf < 0:
            raise DiLoCoError("cannot join run %r at %s: %s" % (self.run, _redact(self.url), self._message()))
        self._check_fragments(nf, self.sync_every_requested)

    def _check_fragments(self, nf=None, sync_every=None):
        nf = self.num_fragments if nf is None else nf
        sync_every = self.sync_every if sync_every is None else sync_every
        if self.fragment_sync_delay is not None:
            want = max(1, sync_every // nf) * self.fragments_in_flight if nf > 1 else 0
            if self.fragment_sync_delay != want:
                raise ValueError("fragment_sync_delay=%r: in ReDiLoCo a fragment's new values are applied "
                                 "fragments_in_flight fragment intervals after it was sent (fragments_in_flight * "
                                 "sync_every / fragments = %d steps here); leave it None" %
                                 (self.fragment_sync_delay, want))

    def close(self) -> None:
        """Deregister from the run and give the inner optimizer its own step back. Safe to call twice."""
        if self._d is not None:
            why = self._stopped_why()  # (kept: stopping still says so once the session is gone)
            if why is not None and (self._group is None or self._group.rank == 0):
                self._say_stopped(why)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._d is not None:
            self._lib.diloco_close(self._d)
            self._d = None
        if self._device_hooks is not None:
            self._device_hooks.release()
            self._device_hooks = None
        if self._signals is not None:
            self._signals.close()
            self._signals = None
        for obj in self._claimed:  # the model and the optimizer may join another session now
            if _IN_SESSION.get(obj) is self:
                del _IN_SESSION[obj]
        self._claimed = []

    def _say_stopped(self, why):
        """The one line a stopped session leaves, as bin/worker's "stopped after 200 steps (done)": to the log
        callback (info) when there is one, else stderr."""
        if why.startswith("stopped by SIG"):
            why = why[len("stopped by "):]
        line = "stopped after %d steps (%s): left run %s" % (self._steps, why, self.run)
        if self.log is not None:
            self.log(_lib.LOG_INFO, line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    # ---- the training loop's calls ------------------------------------------------------------------

    def _after_step(self):
        if self._d is None:
            return
        why = self._stopped_why()
        if why is not None:
            raise Stopped(why)
        self._steps += 1
        self._check_in_place(every=self._lib.diloco_steps_to_sync(self._d) <= 1)
        self._flat.before_step(self)
        rc = self._lib.diloco_after_step(self._d, self._err, _ERRLEN)
        self._finish_call(rc)

    def _check_in_place(self, every=True):
        """DiLoCoError when the model's parameters are no longer views of the flat buffer: model.to(...),
        .double(), .cuda() inside the session move them, after which syncs would send a zero pseudo-gradient
        and the model would never get the global parameters. The first parameter at every step (those calls
        replace all of them), every parameter before a sync."""
        replaced = getattr(self._flat, "replaced", None)  # (a sharded group copies its chunks instead: no views)
        name = replaced(self._module, first_only=not every) if replaced else None
        if name is not None:
            raise DiLoCoError("the model's parameters were replaced after joining (parameter %s is no longer the "
                              "session's fp32 buffer: model.to(...), .double() or .cuda() inside the session does "
                              "that): move the model before opening the session" % name)

    def _finish_call(self, rc):
        if rc < 0:
            why = self._stopped_why() or self._stop_reason
            if why is not None:
                raise Stopped(why)
            raise DiLoCoError("sync failed: %s" % self._flat.name_index(self._message()))
        if rc == 1:
            self._buffers.after_sync(self.run)
            self._reset_optimizer_if_diverged()
        return rc == 1

    def _reset_optimizer_if_diverged(self):
        """After a sync that reset the worker to the global parameters (last_sync.stale: our pseudo-gradient
        was not finite, or our round was lost), the inner optimizer's state of each parameter where it is not
        finite is dropped too: AdamW's moments would otherwise make the next step NaN again, and every round
        after it. The optimizer starts that state afresh at its next step, as for a new parameter."""
        info = _lib.SyncInfoC()
        if self._lib.diloco_last_sync(self._d, ctypes.byref(info)) < 0 or not info.stale:
            return
        import torch
        names = {p: n for n, p in self._module.named_parameters()} if self._module is not None else {}
        reset = []
        for p, state in list(self.inner_optimizer.state.items()):
            if any(torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all())
                   for v in state.values()):
                del self.inner_optimizer.state[p]
                reset.append(names.get(p, "?"))
        if reset:
            message = ("run %r: the worker was reset to the global parameters (its pseudo-gradient was not finite), "
                       "and the inner optimizer's state of %s, not finite either, with them"
                       % (self.run, checks.quoted(reset)))
            if self.log is not None:
                self.log(_lib.LOG_WARN, message)
            else:
                warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())

    def sync(self) -> bool:
        """Sync now, whatever the step count (e.g. once more before leaving). True when a sync ran."""
        self._require_open()
        self._check_in_place()
        self._flat.before_sync()
        return self._finish_call(self._lib.diloco_force_sync(self._d, self._err, _ERRLEN))

    def report(self, loss: float, tokens: int = 0) -> None:
        """This step's loss and tokens (summed here) for the worker's heartbeats and the dashboard."""
        self._require_open()
        self._tokens += int(tokens)
        self._lib.diloco_report(self._d, float(loss), self._tokens)

    def stop(self, reason: str = "stop requested") -> None:
        """Give up waits and retries at once (any thread); the next optimizer step raises Stopped. In a process
        group every rank stops: once the ranks agreed on it (at their next collective), the same step raises
        Stopped on each."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._stop.value = 1
        if self._d is not None:
            self._lib.diloco_request_stop(self._d)

    def _on_signal(self, signum):
        self.stop("stopped by %s" % signal.Signals(signum).name)

    # ---- facts --------------------------------------------------------------------------------------

    def _stopped_why(self):
        """None, or why the session stops: libdiloco's diloco_stop_requested (a process group's ranks: once
        they agreed, at the same step on each), or this process's own stop while no session is open."""
        if self._why is not None or self._d is None:
            return self._why or self._stop_reason
        kind = self._lib.diloco_stop_requested(self._d)
        if kind:
            self._why = self._stop_reason or {_lib.STOP_SHUTDOWN: "the operator shut run %r down" % self.run,
                                              _lib.STOP_RECREATED: "run %r was made again under its name (coordinator "
                                                                   "init --force): start this process again to join "
                                                                   "the new run" % self.run,
                                              _lib.STOP_REPLACED: "another process registered as worker %r in run %r "
                                                                  "(give each worker its own worker id)"
                                                                  % (self.worker_id, self.run),
                                              _lib.STOP_RANK: "another rank of the process group was asked to "
                                                              "stop"}.get(kind, "stop requested")
        return self._why

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for (signal, stop()) or the operator shut the run down; in a process
        group, once its ranks agreed on a stop (the same step on every rank: a loop `while not dl.stopping`
        ends after the same step on each)."""
        return self._stopped_why() is not None

    @property
    def last_sync(self) -> Optional[SyncInfo]:
        """SyncInfo of the last sync, or None before the first."""
        self._require_open()
        info = _lib.SyncInfoC()
        if self._lib.diloco_last_sync(self._d, ctypes.byref(info)) < 0:
            return None
        return SyncInfo.from_c(info)

    @property
    def worker_id(self) -> str:
        self._require_open()
        return self._lib.diloco_worker_id(self._d).decode()

    @property
    def version(self) -> int:
        """Global version the parameters started from at open."""
        self._require_open()
        return self._lib.diloco_version(self._d)

    @property
    def sync_every(self) -> int:
        """Current H (DyLU may change it)."""
        self._require_open()
        return self._lib.diloco_sync_every(self._d)

    @property
    def steps_to_sync(self) -> int:
        self._require_open()
        return self._lib.diloco_steps_to_sync(self._d)

    @property
    def numel(self) -> int:
        return self._flat.numel if self._flat else 0

    @property
    def is_async(self) -> bool:
        self._require_open()
        return bool(self._lib.diloco_is_async(self._d))

    @property
    def num_fragments(self) -> int:
        self._require_open()
        return self._lib.diloco_num_fragments(self._d)

    def fragment_range(self, fragment: int) -> Tuple[int, int]:
        """(offset, count) of Streaming fragment `fragment` in the flat parameter vector."""
        self._require_open()
        off, n = ctypes.c_size_t(), ctypes.c_size_t()
        if self._lib.diloco_fragment_range(self._d, fragment, ctypes.byref(off), ctypes.byref(n)) < 0:
            raise IndexError("run %r has no fragment %d" % (self.run, fragment))
        return off.value, n.value

    @property
    def transfer_path(self) -> str:
        """How this session moves the parameters: "cpu", "device hooks" or "pinned host copy" (devicehooks.py)."""
        self._require_open()
        return self._flat.path

    @property
    def flat_params(self) -> torch.Tensor:
        """The one fp32 tensor every parameter is a view of (in the run's order); still there after close()."""
        if self._flat is None:  # never opened: no buffer yet
            self._require_open()
        return self._flat.flat

    def _layout_json(self):
        raw = self._lib.diloco_run_layout(self._d)
        return raw.decode() if raw else None

    def _require_open(self):
        if self._d is None:
            raise DiLoCoError("the session is not open: use `with rediloco.DiLoCo(...) as dl:` or dl.open()")

    def _named(self, message):
        """message with an index of the flat vector ("not finite at index N") followed by the tensor it is in."""
        message = _python_words(message)
        return self._flat.name_index(message) if self._flat is not None else message

    def _message(self):
        return _python_words(self._err.value.decode(errors="replace")) or "(no message)"


def _redact(url):
    """The URL without its login, for messages: what lies between its scheme and its last '@' (a password may hold
    an '@' of its own: split at the first one, the rest of it was printed; a mistyped scheme, "redis:/", was
    printed whole)."""
    at = url.rfind("@")
    if at < 0:
        return url
    sep = url.find("://", 0, at)
    return (url[:sep + 3] if sep >= 0 else "") + "***" + url[at:]


class _WrappedStep:
    """The hook on an optimizer without register_step_post_hook (torch < 2.0): optimizer.step replaced, on the
    instance, by a bound method that calls the step it replaced and then the hook.

    torch 1.13's LR schedulers wrap optimizer.step in place too (lr_scheduler.py, with_counter): a scheduler
    made during the session takes __self__ and __func__ of what it finds there, so that must be a bound
    method (a plain function made it raise AttributeError), and its first step() warns that optimizer.step
    "has been overridden after learning rate scheduler initialization" unless optimizer.step carries
    _with_counter, which ours does when the step it wraps did (a scheduler made before the session: its
    counting wrapper is inside ours). remove() puts the step back where ours is still there; under a
    scheduler's wrapper made since, ours stays and only stops calling the hook."""

    def __init__(self, optimizer, hook):
        self.optimizer = optimizer
        self.had_own = "step" in optimizer.__dict__
        self.original = optimizer.step
        self.hook = hook

        def step(opt, *args, **kwargs):
            out = wrapper.original(*args, **kwargs)
            if wrapper.hook is not None:
                wrapper.hook()
            return out
        wrapper = self
        if getattr(self.original, "_with_counter", False):
            step._with_counter = True  # (a bound method's attributes are its function's)
        self.step = types.MethodType(step, optimizer)
        optimizer.step = self.step

    def remove(self):
        self.hook = None
        if self.optimizer.__dict__.get("step") is not self.step:
            return  # a scheduler wrapped ours since: it stays under that wrapper, calling the step only
        if self.had_own:
            self.optimizer.step = self.original
        else:
            del self.optimizer.step


def _install_step_hook(optimizer, hook):
    if hasattr(optimizer, "register_step_post_hook"):  # torch >= 2.0: optimizer.step itself is left alone
        return optimizer.register_step_post_hook(lambda opt, args, kwargs: hook())
    return _WrappedStep(optimizer, hook)
