"""sharded.py: a rank of a sharded process group (FSDP2's fully_shard, torch >= 2.4; or parameters sharded the
same way by hand) holds only its dim-0 chunk of every parameter, and moves exactly that.

    model = MyModel()
    rediloco.init_run(url, run, model, workers=4, shards=1, fsdp_ranks=8)   # once, from the whole model
    for layer in model.layers: fully_shard(layer)
    fully_shard(model)                                                       # every parameter a DTensor
    with rediloco.DiLoCo(url, run, model, inner, sync_every=500, process_group=dist.group.WORLD,
                         worker_id="node7") as dl:
        ...

fully_shard cuts every parameter on dim 0 as torch.chunk does: R ranks, c = ceil(rows / R) rows each, rank r
rows [r*c, (r+1)*c), the last ranks fewer or none. A run made with --fsdp-ranks R (init_run(fsdp_ranks=R))
has a shard boundary at each of those cuts, so each rank's chunks are whole shards of the run: rank r hands
libdiloco the offsets of its chunks in the run's vector (diloco_group_ops.slices) and a buffer of those
elements only, and pushes and fetches exactly its shards (worker/diloco.h "Sharded groups"). No rank gathers
the model for a sync.

ShardedParams is FlatParams' counterpart for such a rank. A fully_shard parameter's local tensor is FSDP's own
storage (a view into its padded shard), which FSDP all-gathers from, so it cannot become a view of our
buffer as FlatParams does with plain parameters: the chunks are copied into the buffer before a step that
syncs, and libdiloco's new values back into them (on_params). With sharded=True and plain parameters, each
parameter must already be this rank's chunk (the tests shard by hand what fully_shard would hold, as Debian's
torch 1.13 cannot import FSDP on Python 3.11).

Refused before anything is opened, with NotImplementedError: FSDP1 (FullyShardedDataParallel: its flat
parameter is cut across parameters, not per parameter on dim 0), DTensors placed otherwise than one Shard(0)
over the group (HSDP's 2-D mesh, Replicate, another dim), and a model with both sharded and plain parameters.
"""
import ctypes
import json

import torch

from . import _lib, devicehooks
from .errors import DiLoCoError
from .params import name_index

FSDP1_CLASS = "FullyShardedDataParallel"


def is_dtensor(p):
    return "DTensor" in [c.__name__ for c in type(p).__mro__]


def check_model(model, group_size):
    """True when model is sharded by fully_shard (its parameters are DTensors), False when no parameter is
    sharded; NotImplementedError, with what to do, for the sharded models this package does not sync.
    group_size() gives the process group's size (asked only for a fully_shard model). Classes are matched by
    name: no import of FSDP (Debian's torch 1.13 cannot import it on Python 3.11)."""
    for m in model.modules():
        if FSDP1_CLASS in [c.__name__ for c in type(m).__mro__]:
            raise NotImplementedError(
                "FSDP1 (FullyShardedDataParallel in %s) is not supported in a process group: its flat parameter "
                "is cut across parameters, while a sharded group moves each rank's dim-0 chunk of every "
                "parameter. Use fully_shard (FSDP2, torch >= 2.4) or DistributedDataParallel" % type(m).__name__)
    named = list(model.named_parameters())
    sharded = [n for n, p in named if is_dtensor(p)]
    if not sharded:
        return False
    if len(sharded) != len(named):
        plain = [n for n, p in named if not is_dtensor(p)]
        raise NotImplementedError(
            "the model has sharded (DTensor) and plain parameters (%s are plain): apply fully_shard to the root "
            "module too, so that every parameter is sharded" % ", ".join(repr(n) for n in plain[:4]))
    size = group_size()
    for n, p in named:
        placements = [type(x).__name__ + "(%s)" % getattr(x, "dim", "") for x in p.placements]
        mesh = p.device_mesh
        if mesh.ndim != 1 or placements != ["Shard(0)"] or mesh.size() != size:
            raise NotImplementedError(
                "parameter %r is placed as %s on a mesh of shape %s; a sharded process group supports one "
                "Shard(0) over the group's %d ranks (fully_shard on a 1-D mesh), not HSDP (a 2-D mesh: make "
                "each replica group a worker of its own), Replicate or another dim"
                % (n, placements, tuple(mesh.shape), size))
    return True


def dim0_chunk(shape, ranks, rank):
    """(first row, rows) of rank's torch.chunk of a tensor of shape (0-d: rank 0 holds it), and the elements
    per row."""
    if len(shape) == 0:
        return 0, (1 if rank == 0 else 0), 1
    rows = shape[0]
    row = 1
    for s in shape[1:]:
        row *= s
    c = -(-rows // ranks)
    lo, hi = min(rank * c, rows), min((rank + 1) * c, rows)
    return lo, hi - lo, row


def _local(p):
    return p.to_local() if is_dtensor(p) else p.data


class ShardedParams:
    """This rank's chunks of the run's tensors as one fp32 buffer (the interface of params.FlatParams). Chunks on
    a GPU (fully_shard over a CUDA mesh, DiLoCo on a gloo group of the same processes) are copied through a
    page-locked buffer: devicehooks' "pinned host copy" (the device hooks need one flat device buffer, which
    FSDP's own storage is not)."""

    device_copy = True  # the chunks are copied to and from the buffer (see the module's comment)

    def __init__(self, module, layout_json, ranks, rank):
        if not layout_json:
            raise DiLoCoError("the run records no layout: a sharded group needs one (make the run with "
                              "rediloco.init_run(..., fsdp_ranks=R) from the whole model)")
        layout = json.loads(layout_json)
        named = list(module.named_parameters())
        if [n for n, _ in named] != [e[0] for e in layout]:
            mine, theirs = [n for n, _ in named], [e[0] for e in layout]
            i = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), min(len(mine), len(theirs)))
            raise DiLoCoError("the model's parameters are not the run's tensors: entry %d is %r, the run's %r (the "
                              "same names in named_parameters() order)" % (i, mine[i] if i < len(mine) else None,
                                                                          theirs[i] if i < len(theirs) else None))
        self.module = module
        self.slices, self.offsets, self.names, self.counts = [], [], [], []
        self.layout = [(name, tuple(shape), off) for name, shape, off in layout]
        self.shapes = [s for _, s, _ in self.layout]
        off_local, devices = 0, set()
        for (name, p), (_, shape, off) in zip(named, layout):
            lo, rows, row = dim0_chunk(shape, ranks, rank)
            want = ((rows,) + tuple(shape[1:])) if shape else (() if rows else (0,))
            local = _local(p)
            if is_dtensor(p) and list(p.shape) != list(shape):
                raise DiLoCoError("parameter %r is %s, the run's is %s" % (name, list(p.shape), list(shape)))
            if tuple(local.shape) != want and not (rows == 0 and local.numel() == 0):
                raise DiLoCoError(
                    "parameter %r: rank %d holds %s, but its dim-0 chunk of the run's %s over %d ranks is %s "
                    "(torch.chunk: ceil(rows / ranks) rows each, as fully_shard cuts)"
                    % (name, rank, list(local.shape), list(shape), ranks, list(want)))
            if local.dtype != torch.float32 or local.device.type not in ("cpu", "cuda"):
                raise DiLoCoError("parameter %r is %s on %s: a sharded group holds fp32 parameters on the CPU or "
                                  "a CUDA device" % (name, local.dtype, local.device))
            if rows == 0:
                continue
            devices.add(local.device)
            self.names.append(name)
            self.counts.append(rows * row)
            self.offsets.append(off_local)
            self.slices += [off + lo * row, rows * row]
            off_local += rows * row
        if not self.names:
            raise DiLoCoError("rank %d holds no parameters (every tensor has fewer rows than rank %d needs): use "
                              "fewer ranks" % (rank, rank))
        if len(devices) > 1:
            raise DiLoCoError("rank %d's chunks are on %s: put them on one device"
                              % (rank, ", ".join(sorted(str(d) for d in devices))))
        self.numel = off_local
        self.device = devices.pop()
        on_gpu = self.device.type == "cuda"
        self.path = devicehooks.PINNED_HOST_COPY if on_gpu else devicehooks.CPU
        self.flat = torch.empty(self.numel, dtype=torch.float32, pin_memory=on_gpu)  # (the buffer libdiloco holds)
        self.host = self.flat
        self._gather()

    def slice_array(self):
        """The slices (offset, count pairs in the run's vector) as the uint64 array diloco_group_ops takes."""
        return (ctypes.c_uint64 * len(self.slices))(*self.slices), len(self.slices) // 2

    def _locals(self):
        """The chunks as they are now: looked up again each time, as FSDP may set a parameter's local tensor
        anew (its lazy initialisation at the first forward)."""
        params = dict(self.module.named_parameters())
        return [_local(params[n]) for n in self.names]

    def _gather(self):
        with torch.no_grad():
            for t, off, n in zip(self._locals(), self.offsets, self.counts):
                self.flat[off:off + n].copy_(t.reshape(-1))

    def _scatter(self, lo, hi):
        with torch.no_grad():
            for t, off, n in zip(self._locals(), self.offsets, self.counts):
                if off < hi and off + n > lo:
                    t.copy_(self.flat[off:off + n].view(t.shape))

    def name_index(self, message):
        return name_index(message, self.offsets, self.names, self.numel,
                          "[this rank's part: parameter %r, element %d of its chunk]")

    def host_pointer(self):
        return ctypes.cast(self.flat.data_ptr(), ctypes.POINTER(ctypes.c_float))

    def loaded_all(self):
        self._scatter(0, self.numel)

    def before_step(self, dl):
        if dl.steps_to_sync <= 1:
            self._gather()

    def before_sync(self):
        self._gather()

    def on_params(self, ctx, off, n, err, errlen):
        try:
            self._scatter(off, off + n)
            return 0
        except Exception as e:  # the library reports it; nothing may unwind through C
            _lib.fill_err(err, errlen, e)
            return -1
