#!/usr/bin/python3
"""group_quad.py URL RUN WORKER_ID STEPS H --ranks R --numel N --seed S [--no-bf16] [--error-feedback] [--out PREFIX]: a process
group of R ranks (torch.multiprocessing.spawn, or --start-method fork; gloo, DDP) as one worker, training the quadratic test problem
of WORKER_ID (tests/python/quad_worker.py: the C trainer's problem and AdamW in torch fp32 ops).

Every rank runs DDP over the same model and the same problem, so DDP's averaged gradient is each rank's own
(g/R summed R times: exact for R = 2), and the group trains what one process of that id would. Each rank
writes PREFIX.rank<r>: "pid <pid>" first, then one line per sync: "sync <version> <digest> <bytes_up>
<bytes_down> <stale>", or "error <message>" when it could not join. STEPS 0 trains until the run is shut down
(dl.stopping), then writes "stopped <inner steps trained>", as does a rank stopped (a signal: every rank of the
group stops after the same step). --step-delay slows every step (the crash test kills a rank mid-run).

--device cuda: rank r's model on GPU r (modulo the GPUs there are: tests/it_cuda_python_group.sh), through the device
hooks when libdiloco_cuda.so loads (--no-device-hooks: REDILOCO_CUDA_LIB="", the host mirror); --nccl: the default
group on NCCL for DDP (a GPU per rank) and DiLoCo on a gloo group of the same processes, as a node would.

--device emu: the CUDA device hooks on the CPU CUDA emulator, the model on the CPU (emu_hooks.py;
tests/it_python_group_hooks.sh).

--host-copy: every rank syncs through a host mirror of its parameters (REDILOCO_HOST_COPY=1: the path of a rank
whose model is on a GPU, devicehooks.py) although the model is on the CPU; each rank writes "path <transfer path>"
after it joined.

--also RUN:WORKER_ID[:bad|:fp32|:ef|:copy|:emu|:alpha=A|:flight=D...] (repeatable, with --start-method fork): this launcher
starts those groups too, with the same arguments (their --out PREFIX: PREFIX's folder, RUN-WORKER_ID; ":bad" as
--bad-model, ":fp32" as --no-bf16, ":ef" as --error-feedback, ":copy" as --host-copy, ":emu" as --device emu, ":alpha=A" as --fragment-alpha A,
":flight=D" as --fragments-in-flight D; several may follow each other), so a test
imports torch once for all its groups. Each group's exit status goes to its PREFIX.exit; the launcher exits 0
when every group did."""
import argparse
import datetime
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rediloco  # noqa: E402
import forked  # noqa: E402
from emu_hooks import EmulatedHooks  # noqa: E402
from quad_worker import QuadAdamW, problem  # noqa: E402


class QuadLoss(torch.autograd.Function):
    """f = mean(a (x - c)^2 / 2) whose gradient is exactly the C trainer's a * (x - c)."""

    @staticmethod
    def forward(ctx, x, a, c):
        ctx.save_for_backward(x, a, c)
        diff = x - c
        return (0.5 * a.double() * diff.double() * diff.double()).mean()

    @staticmethod
    def backward(ctx, grad):
        x, a, c = ctx.saved_tensors
        return a * (x - c), None, None


class Quad(torch.nn.Module):
    def __init__(self, numel, a, c):
        super().__init__()
        self.x = torch.nn.Parameter(torch.zeros(numel))
        self.a, self.c = a, c

    def forward(self):
        return QuadLoss.apply(self.x if hasattr(self, "x") else self.y, self.a, self.c)


def rank_main(rank, args, init_file):
    if args.host_copy:  # (this rank's process only: a forked launcher runs other groups' ranks too)
        os.environ["REDILOCO_HOST_COPY"] = "1"
    if args.no_device_hooks:
        os.environ["REDILOCO_CUDA_LIB"] = ""
    emu = EmulatedHooks() if args.device == "emu" else None
    device = torch.device("cpu" if emu else args.device)
    if device.type == "cuda":  # rank r on GPU r (all on the one GPU of a machine that has one)
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    init = "file://" + init_file
    dist.init_process_group("nccl" if args.nccl else "gloo", init_method=init, rank=rank, world_size=args.ranks)
    # DDP on NCCL, DiLoCo on a gloo group of the same processes (group.py: its collectives move host memory)
    pg = dist.new_group(backend="gloo") if args.nccl else dist.group.WORLD
    a, c = (t.to(device) for t in problem(args.seed, args.worker_id, args.numel))
    module = Quad(args.numel, a, c).to(device)
    if args.bad_model and rank == 1:  # the same shapes (DDP checks those) under another name
        module.y = module.x
        del module.x
    model = torch.nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    inner = QuadAdamW(model.parameters())
    out = open("%s.rank%d" % (args.out, rank), "w") if args.out else None
    if out:
        out.write("pid %d\n" % os.getpid())
        out.flush()
    dl = rediloco.DiLoCo(args.url, args.run, model, inner, sync_every=args.h, worker_id=args.worker_id,
                         bf16=not args.no_bf16, error_feedback=args.error_feedback, heartbeat_interval=args.heartbeat,
                         fragment_update_alpha=args.fragment_alpha, fragments_in_flight=args.fragments_in_flight,
                         process_group=pg)
    try:
        dl.open()
    except rediloco.Stopped:  # a stop while the group joined: every rank's join ends (DILOCO_STOPPED)
        if out:
            out.write("stopped 0\n")
            out.flush()
        dist.destroy_process_group()
        return
    except rediloco.DiLoCoError as e:
        if out:
            out.write("error %s\n" % e)
            out.flush()
        # every rank writes its error before any raises: torch.multiprocessing ends a group's other ranks as
        # soon as one rank fails (a bounded wait: the ranks may also fail apart)
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
        except Exception:  # noqa: BLE001 - the other rank did not get there: its own error is its own
            pass
        raise
    if out:
        out.write("path %s\n" % dl.transfer_path)
        out.flush()
    with dl:
        last, step = None, 0
        while step < args.steps or (args.steps == 0 and not dl.stopping):  # 0: until the run is shut down
            step += 1
            if emu:
                emu.step()
            loss = model()
            loss.backward()
            inner.step()  # the group's sync runs in here every H steps
            inner.zero_grad()
            dl.report(float(loss), tokens=1)
            info = dl.last_sync
            if info and info != last:
                last = info
                if out:
                    out.write("sync %d %s %d %d %d\n" % (info.version, info.digest, info.bytes_up, info.bytes_down,
                                                         int(info.stale)))
                    out.flush()
            if args.step_delay:
                time.sleep(args.step_delay)
    if out and (args.steps == 0 or dl.stopping):  # (a stop: Stopped raised in inner.step, the block swallowed it)
        out.write("stopped %d\n" % step)
        out.flush()
    if emu:
        emu.release(dl)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("url", "run", "worker_id"):
        ap.add_argument(name)
    ap.add_argument("steps", type=int)
    ap.add_argument("h", type=int)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--numel", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--error-feedback", action="store_true")
    ap.add_argument("--fragment-alpha", type=float, default=0.0, help="Streaming: fragment_update_alpha")
    ap.add_argument("--fragments-in-flight", type=int, default=1, help="Streaming: fragments_in_flight")
    ap.add_argument("--out", default=None)
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--step-delay", type=float, default=0.0)
    ap.add_argument("--bad-model", action="store_true", help="rank 1's parameter is named y, not x")
    ap.add_argument("--host-copy", action="store_true", help="sync through a host mirror (REDILOCO_HOST_COPY=1)")
    ap.add_argument("--device", default="cpu",
                    help="the ranks' models on this device (cuda: rank r on GPU r, modulo; emu: the CPU CUDA emulator's hooks)")
    ap.add_argument("--no-device-hooks", action="store_true", help="a CUDA model through the host mirror (REDILOCO_CUDA_LIB=\"\")")
    ap.add_argument("--nccl", action="store_true", help="DDP on NCCL (one GPU per rank), DiLoCo on a gloo group")
    ap.add_argument("--start-method", default="spawn", choices=("spawn", "fork"),
                    help="fork: the ranks need not import torch again (the tests, on a busy machine)")
    ap.add_argument("--also", action="append", default=[], metavar="RUN:WORKER_ID[:bad|:fp32|:ef|:copy|:alpha=A|:flight=D...]",
                    help="start this group too (fork only): one torch import for several groups")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not args.also:
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(rank_main, args=(args, os.path.join(tmp, "init")), nprocs=args.ranks, join=True,
                               start_method=args.start_method)
        return 0
    if args.start_method != "fork" or not args.out:
        ap.error("--also needs --start-method fork and --out")
    groups = [args]
    for spec in args.also:
        run, wid, *flag = spec.split(":")
        g = argparse.Namespace(**vars(args))
        g.run, g.worker_id, g.bad_model = run, wid, "bad" in flag
        g.no_bf16, g.error_feedback = args.no_bf16 or "fp32" in flag, args.error_feedback or "ef" in flag
        g.host_copy = args.host_copy or "copy" in flag
        g.device = "emu" if "emu" in flag else args.device
        for f in flag:
            if f.startswith("alpha="):
                g.fragment_alpha = float(f[len("alpha="):])
            elif f.startswith("flight="):
                g.fragments_in_flight = int(f[len("flight="):])
        g.out = os.path.join(os.path.dirname(args.out), "%s-%s" % (run, wid))
        groups.append(g)
    return forked.run_groups(rank_main, groups)


if __name__ == "__main__":
    sys.exit(main())
