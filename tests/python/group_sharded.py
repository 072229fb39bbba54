#!/usr/bin/python3
"""group_sharded.py: sharded process groups (rediloco/sharded.py) with parameters sharded by hand exactly as
fully_shard holds them (Debian's torch 1.13 cannot import FSDP on Python 3.11), on gloo.

    group_sharded.py init URL RUN [--ranks R] [--flag NAME=VALUE ...]
        makes RUN from the test model (rediloco.init_run(..., shards=1, fsdp_ranks=R), and the flags)
    group_sharded.py run URL STEPS H --member RUN:ID:RANKS[:fp32][:ef][:fsdp][:stream][:cuda] ... --out DIR [--seed S]
        one launcher forks every member: RANKS 1 is one process holding the whole model (no group), RANKS > 1
        a sharded group (DiLoCo(..., process_group=WORLD, sharded=True)) whose rank r holds torch.chunk(p,
        RANKS)[r] of every parameter (an empty chunk where a tensor has too few rows); with :fsdp the whole
        model is given to torch's own fully_shard (torch >= 2.4, a 1-D CPU mesh over the group) instead, and
        DiLoCo(..., process_group=WORLD) finds its DTensor parameters (FSDP's reduce-scatter averages the
        ranks' equal gradients: exact for 2 ranks); :stream mixes a Streaming run's fragments with
        fragment_update_alpha=0.5; :cuda puts a member's parameters (a rank's chunks) on a GPU (rank r on GPU r,
        modulo the GPUs there are; DiLoCo's group stays gloo: tests/it_cuda_python_group_sharded.sh)

The model has four tensors of different shapes, one with fewer rows than ranks. Each member trains the
quadratic problem of its id (tests/python/quad_worker.py: a, c drawn for the model's parameter count, cut
like the parameters; gradient a*(x - c); QuadAdamW's numpy fp32 step, elementwise), so a rank's chunk
trains exactly as the same elements of a whole model do, and a sharded group must end on the same bytes
as one process. Each member rank writes DIR/RUN-ID.rank<r>: "pid <pid>", "path <transfer path>" once it joined, then per sync "sync <version>
<digest> <shards digest> <bytes up> <bytes down> <stale>", or "error <message>", and "stopped <inner steps>"
when a stop (a signal) ended its training; DIR/RUN-ID.exit its status. --step-delay slows every step (a crash test kills a rank mid-run)."""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rediloco  # noqa: E402
import forked  # noqa: E402
from group_quad import QuadLoss  # noqa: E402
from quad_numpy import bias_corrections  # noqa: E402
from quad_worker import QuadAdamW, problem  # noqa: E402

SHAPES = [("w1", (10, 6)), ("b1", (7,)), ("w2", (3, 4, 2)), ("s", (1, 5))]


class Model(torch.nn.Module):
    """The test model (ranks > 1: rank's dim-0 chunks of it) with each parameter's a and c."""

    def __init__(self, seed, worker_id, ranks=1, rank=0):
        super().__init__()
        numel = sum(int(torch.tensor(s).prod()) for _, s in SHAPES)
        a, c = problem(seed, worker_id or "init", numel)
        init = torch.randn(numel, generator=torch.Generator().manual_seed(seed))
        self.problems, off = [], 0
        for name, shape in SHAPES:
            n = int(torch.tensor(shape).prod())
            full = [t[off:off + n].view(shape) for t in (init, a, c)]
            off += n
            if ranks > 1:  # torch.chunk as fully_shard cuts; a rank past the last chunk holds no rows
                full = [chunk_of(t, ranks, rank) for t in full]
            self.register_parameter(name, torch.nn.Parameter(full[0].clone()))
            self.problems.append((name, full[1].clone(), full[2].clone()))

    def to_device(self, device):
        """The parameters and each one's a and c on device."""
        self.problems = [(name, a.to(device), c.to(device)) for name, a, c in self.problems]
        return self.to(device)

    def forward(self):
        total = torch.zeros((), dtype=torch.float64, device=self.problems[0][1].device)
        for name, a, c in self.problems:
            x = getattr(self, name)
            if x.numel():
                total = total + QuadLoss.apply(x, a, c)
        return total


def chunk_of(t, ranks, rank):
    chunks = torch.chunk(t, ranks, dim=0)
    return chunks[rank] if rank < len(chunks) else t[:0]


def fully_sharded(model, ranks):
    """torch's fully_shard over a 1-D CPU mesh of the group (torch >= 2.6 exports it from fsdp, 2.4 and 2.5
    from _composable.fsdp)."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    fully_shard(model, mesh=init_device_mesh("cpu", (ranks,)))
    return model


class LocalQuadAdamW(QuadAdamW):
    """QuadAdamW on each parameter's local tensor (a DTensor's to_local(): fully_shard's shard)."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                x, g = p.to_local(), p.grad.to_local()
                st = self.state[p]
                if not st:
                    st["step"], st["m"], st["v"] = 0, torch.zeros_like(x), torch.zeros_like(x)
                st["step"] += 1
                if x.numel():
                    bc1, bc2 = bias_corrections(self.k, st["step"])
                    self._step_numpy(x.detach().numpy(), g.numpy(), st["m"].numpy(), st["v"].numpy(), bc1, bc2)


def member_main(rank, m, init_file):
    group = m.ranks > 1
    if group:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=m.ranks,
                                timeout=datetime.timedelta(seconds=60))
    if m.fsdp:  # the whole model, sharded by torch itself
        model = fully_sharded(Model(m.seed, m.worker_id), m.ranks)
        inner = LocalQuadAdamW(model.parameters())
    else:
        model = Model(m.seed, m.worker_id, m.ranks, rank)
        if m.cuda:
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
            model = model.to_device(device)
        inner = QuadAdamW(model.parameters())
    out = open("%s.rank%d" % (m.out, rank), "w")
    out.write("pid %d\n" % os.getpid())
    out.flush()
    dl = rediloco.DiLoCo(m.url, m.run, model, inner, sync_every=m.h, worker_id=m.worker_id, bf16=not m.fp32,
                         error_feedback=m.ef, heartbeat_interval=m.heartbeat,
                         fragment_update_alpha=0.5 if m.stream else 0.0,
                         process_group=dist.group.WORLD if group else None, sharded=group and not m.fsdp)
    try:
        dl.open()
    except rediloco.Stopped:  # a stop while the group joined: every rank's join ends (DILOCO_STOPPED)
        out.write("stopped 0\n")
        out.flush()
        if group:
            dist.destroy_process_group()
        return
    except rediloco.DiLoCoError as e:
        out.write("error %s\n" % e)
        out.flush()
        raise
    out.write("path %s\n" % dl.transfer_path)
    out.flush()
    step = 0
    with dl:
        last = None
        for step in range(1, m.steps + 1):
            loss = model()
            loss.backward()
            inner.step()  # the sync runs in here every H steps
            inner.zero_grad()
            dl.report(float(loss), tokens=1)
            info = dl.last_sync
            if info and info != last:
                last = info
                out.write("sync %d %s %s %d %d %d\n" % (info.version, info.digest, info.shards_digest, info.bytes_up,
                                                        info.bytes_down, int(info.stale)))
                out.flush()
            if m.step_delay:
                time.sleep(m.step_delay)
    if dl.stopping:  # (Stopped raised in inner.step, the block swallowed it: every rank at the same step)
        out.write("stopped %d\n" % step)
        out.flush()
    if group:
        dist.destroy_process_group()


def init(args):
    flags = dict(f.split("=", 1) for f in args.flag)
    print(rediloco.init_run(args.url, args.run, Model(args.seed, None), workers=args.workers, shards=1,
                            fsdp_ranks=args.ranks, seed=args.seed, **flags))
    return 0


def run(args):
    members = []
    for spec in args.member:
        run_, wid, ranks, *flags = spec.split(":")
        members.append(argparse.Namespace(url=args.url, run=run_, worker_id=wid, ranks=int(ranks), steps=args.steps,
                                          h=args.h, seed=args.seed, fp32="fp32" in flags, ef="ef" in flags,
                                          fsdp="fsdp" in flags, stream="stream" in flags, cuda="cuda" in flags,
                                          heartbeat=args.heartbeat, step_delay=args.step_delay,
                                          out=os.path.join(args.out, "%s-%s" % (run_, wid))))
    return forked.run_groups(member_main, members, "member")

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init")
    a.add_argument("url")
    a.add_argument("run")
    a.add_argument("--ranks", type=int, default=2)
    a.add_argument("--workers", type=int, default=2)
    a.add_argument("--seed", type=int, default=3)
    a.add_argument("--flag", action="append", default=[], metavar="NAME=VALUE")
    r = sub.add_parser("run")
    r.add_argument("url")
    r.add_argument("steps", type=int)
    r.add_argument("h", type=int)
    r.add_argument("--member", action="append", required=True, metavar="RUN:ID:RANKS[:fp32][:ef][:fsdp][:stream][:cuda]")
    r.add_argument("--out", required=True)
    r.add_argument("--seed", type=int, default=3)
    r.add_argument("--heartbeat", type=float, default=1.0)
    r.add_argument("--step-delay", type=float, default=0.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    return init(args) if args.cmd == "init" else run(args)


if __name__ == "__main__":
    sys.exit(main())
