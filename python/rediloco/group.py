"""group.py: several processes (one per GPU of a node, data-parallel inside: DDP, or fully_shard) as ONE worker.

    dist.init_process_group("gloo", ...)            # the user's, as usual (one process per GPU)
    model = DDP(MyModel())
    with rediloco.DiLoCo(url, run, model, inner, sync_every=500, process_group=dist.group.WORLD,
                         worker_id="node7") as dl:
        ...

On GPUs with NCCL, DDP keeps its NCCL group and DiLoCo gets a gloo group of the same processes:

    dist.init_process_group("nccl", ...); torch.cuda.set_device(local_rank)
    model = DDP(MyModel().cuda(), device_ids=[local_rank])
    host_group = dist.new_group(backend="gloo")    # every rank calls it
    with rediloco.DiLoCo(url, run, model, inner, process_group=host_group, worker_id="node7") as dl:
        ...

A rank's model on a GPU takes the path a single process's would (devicehooks.py): the device hooks when
libdiloco_cuda.so loads (each rank's pseudo-gradient of its part taken on its GPU, the parts exchanged in
libdiloco's host copy of the global parameters, then loaded into the rank's device buffer), otherwise a host
mirror of its parameters ("pinned host copy": copied device -> host before a sync, host -> device after it).

libdiloco does the group's protocol (worker/diloco.h "Process groups", docs/PROTOCOL.md): rank 0 registers,
each rank pushes and fetches its part of the shards, the ranks then broadcast their parts to each other (a
sharded group, sharded.py: each rank its own chunks, nothing exchanged).
It needs two collectives, which this module makes from torch.distributed on the given process group:
allgather of a small message (all_gather of uint8 tensors) and broadcast of a slice of the buffer libdiloco
hands (this rank's parameters in host memory, or with device hooks libdiloco's own host copy). Before the
session opens, the ranks compare what they were given (run, H, worker id, the model's tensors): a
disagreement is the same DiLoCoError on every rank, before anything is registered.
"""
import ctypes

import torch
import torch.distributed as dist

from . import _lib
from .errors import DiLoCoError


def unwrap(model):
    """The module whose parameters are synced: a DDP model's own module (names without "module.")."""
    ddp = getattr(torch.nn.parallel, "DistributedDataParallel", None)
    if ddp is not None and isinstance(model, ddp):
        return model.module
    return model


def _global_rank(group, rank):
    if hasattr(dist, "get_global_rank"):  # torch >= 2.0
        return dist.get_global_rank(group, rank)
    return dist.distributed_c10d._get_global_rank(group, rank)


def _check_backend(pg):
    """libdiloco's two collectives move host memory (its group protocol's messages, the parameters' host
    buffer): the group must take CPU tensors. gloo and MPI do; NCCL takes only CUDA tensors, so a node that
    trains on NCCL gives DiLoCo a gloo group of the same processes (every rank calls dist.new_group, or one
    init_process_group backend "cpu:gloo,cuda:nccl" serves both). The same verdict on every rank."""
    backend = str(dist.get_backend(pg)).lower()
    if "gloo" in backend or backend == "mpi":
        return
    raise DiLoCoError("process_group uses the %r backend, whose collectives take only GPU tensors; DiLoCo's "
                      "collectives move host memory: pass a gloo group of the same processes, e.g. "
                      "process_group=dist.new_group(backend=\"gloo\") (called on every rank; DDP keeps its NCCL "
                      "group), or init the default group with backend \"cpu:gloo,cuda:nccl\"" % backend)


class Group:
    """The process group and the two collectives libdiloco calls (GroupOps of _lib.py)."""

    def __init__(self, process_group):
        if not (dist.is_available() and dist.is_initialized()):
            raise DiLoCoError("process_group was given but torch.distributed is not initialised: call "
                              "dist.init_process_group(...) in every process first")
        self.pg = process_group
        self.rank = dist.get_rank(process_group)
        self.size = dist.get_world_size(process_group)
        if self.size > 1:  # (a group of one process is a worker like any other: no collective is made)
            _check_backend(process_group)
        self.slices = None
        self._callbacks = []

    def attach(self, flat):
        """The flat parameters of this rank's session: a sharded.ShardedParams gives the group its slices (the
        broadcast needs no buffer of ours: it moves the one libdiloco hands)."""
        self.slices = flat.slice_array() if hasattr(flat, "slice_array") else None

    def agree(self, facts):
        """Every rank's facts (a dict) must equal rank 0's: otherwise the same DiLoCoError on every rank."""
        everyone = [None] * self.size
        dist.all_gather_object(everyone, facts, group=self.pg)
        for r, theirs in enumerate(everyone):
            for key in sorted(everyone[0]):
                mine, other = everyone[0][key], theirs.get(key)
                if other == mine:
                    continue
                if isinstance(mine, list) and isinstance(other, list):  # the first entry that differs
                    i = next((i for i, (x, y) in enumerate(zip(mine, other)) if x != y), min(len(mine), len(other)))
                    mine, other = (mine[i] if i < len(mine) else "nothing"), (other[i] if i < len(other) else "nothing")
                    key = "%s (entry %d)" % (key, i)
                raise DiLoCoError("the ranks of the process group disagree on %s: rank 0 has %r, rank %d %r"
                                  % (key, mine, r, other))

    def ops(self):
        g = _lib.GroupOps()
        g.size, g.rank = self.size, self.rank
        g.allgather = _lib.GROUP_ALLGATHER_FN(self._allgather)
        g.broadcast = _lib.GROUP_BROADCAST_FN(self._broadcast)
        self._callbacks += [g.allgather, g.broadcast]
        if self.slices is not None:  # a sharded group: this rank's slices of the run's vector
            g.slices = ctypes.cast(self.slices[0], ctypes.POINTER(ctypes.c_uint64))
            g.nslices = self.slices[1]
        return g

    def agree_ok(self, error):
        """error (a message, or None) of each rank: the first rank's one raised as DiLoCoError on every rank."""
        everyone = [None] * self.size
        dist.all_gather_object(everyone, error, group=self.pg)
        for r, e in enumerate(everyone):
            if e is not None:
                raise DiLoCoError(e if r == self.rank else "rank %d: %s" % (r, e))

    def _allgather(self, ctx, inp, n, out, err, errlen):
        try:
            mine = torch.frombuffer(bytearray(ctypes.string_at(inp, n)), dtype=torch.uint8)
            parts = [torch.empty(n, dtype=torch.uint8) for _ in range(self.size)]
            dist.all_gather(parts, mine, group=self.pg)
            for r, p in enumerate(parts):
                ctypes.memmove(out + r * n, p.data_ptr(), n)
            return 0
        except Exception as e:  # nothing may unwind through C
            _lib.fill_err(err, errlen, e)
            return -1

    def _broadcast(self, ctx, params, off, n, root, err, errlen):
        try:
            # the buffer libdiloco hands: the rank's host parameters (the model's own, or their mirror), or with
            # device hooks its own host copy of the global parameters, which it then loads to the device
            # (worker/diloco.h "Process groups"); broadcast in place, as a tensor over that memory
            where = ctypes.cast(params, ctypes.c_void_p).value + 4 * off
            part = (torch.frombuffer((ctypes.c_float * n).from_address(where), dtype=torch.float32) if n
                    else torch.empty(0))  # (frombuffer refuses an empty buffer)
            dist.broadcast(part, src=_global_rank(self.pg, root), group=self.pg)
            return 0
        except Exception as e:
            _lib.fill_err(err, errlen, e)
            return -1

