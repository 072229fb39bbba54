#!/usr/bin/python3
"""quad_worker.py URL RUN WORKER_ID STEPS H [--no-bf16] [--digests FILE]: the quadratic test trainer
(worker/trainers/quadratic.c) as a PyTorch training loop joined through the rediloco package.

The model is one parameter "x"; each worker's problem (a, c) comes from the run's seed and its id exactly
as the C trainer draws it (splitmix64, XXH3 of the id through libxxhash), the gradient a*(x - c) is set
by hand, and QuadAdamW is a torch.optim.Optimizer doing the C trainer's AdamW with the same fp32 operations
in the same order, so a PyTorch worker and a C worker given the same inputs make the same bytes.

On the CPU the gradient and the AdamW step are numpy float32 ufuncs on views of the torch tensors, not
torch ops: each numpy +, -, *, / and sqrt is one IEEE-754 correctly rounded operation on every SIMD path
(SSE2, AVX2, AVX-512) and numpy version, and numpy never fuses two of them, so the bytes are defined by
the formula alone. torch's CPU kernels made other bytes on one machine (torch 2.11, AVX-512: the fp32
run's digests differed from the C reference; issue 27): which kernel a torch build picks is its own
affair. On a GPU (--device cuda) the step stays in torch ops, as a user's would be; --device emu: the CUDA device
hooks on the CPU CUDA emulator, the model on the CPU (emu_hooks.py). Every
sync's digest is written to --digests (one "round digest" line each); the tests compare them, and the
run's shard digests, with tests/tools/ref_quadratic."""
import argparse
import dataclasses
import json
import os
import signal
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402
from emu_hooks import EmulatedHooks  # noqa: E402
from quad_numpy import adamw_constants, adamw_step_numpy, bias_corrections, problem_numpy  # noqa: E402

def problem(seed, worker_id, numel):
    a, c = problem_numpy(seed, worker_id, numel)
    return torch.from_numpy(a), torch.from_numpy(c)


class QuadAdamW(torch.optim.Optimizer):
    """quadratic.c's AdamW step, op for op in fp32 (no fused multiply-add: each op rounds once); numpy on the
    CPU (see the module's comment), torch ops on a GPU."""

    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8):
        super().__init__(params, dict(lr=lr))
        self.k = adamw_constants(lr, beta1, beta2, eps)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for x in group["params"]:
                if x.grad is None:  # (a sharded rank's empty chunk: group_sharded.py)
                    continue
                st = self.state[x]
                if not st:
                    st["step"], st["m"], st["v"] = 0, torch.zeros_like(x), torch.zeros_like(x)
                st["step"] += 1
                bc1, bc2 = bias_corrections(self.k, st["step"])
                if x.device.type == "cpu":
                    self._step_numpy(x.detach().numpy(), x.grad.numpy(), st["m"].numpy(), st["v"].numpy(), bc1, bc2)
                else:
                    self._step_torch(x, x.grad, st["m"], st["v"], float(bc1), float(bc2))

    def _step_numpy(self, x, g, m, v, bc1, bc2):
        """In place on the tensors' memory (quad_numpy.py)."""
        adamw_step_numpy(x, g, m, v, bc1, bc2, self.k)

    def _step_torch(self, x, g, m, v, bc1, bc2):
        k = self.k
        m.mul_(float(k["b1"])).add_(g * float(k["one_b1"]))
        v.mul_(float(k["b2"])).add_((g * float(k["one_b2"])) * g)
        # the divisors as tensors on the device: a tensor divided by a Python number is computed on CUDA as
        # a * (1/b) (torch's div_true_kernel_cuda), a bit off the true quotient the C trainer takes
        bc1, bc2 = (torch.tensor(b, dtype=torch.float32, device=m.device) for b in (bc1, bc2))
        upd = (m / bc1) * float(k["lr"])
        x.sub_(upd / ((v / bc2).sqrt_() + float(k["eps"])))


def gradient(x, a, c):
    """Sets x.grad = a * (x - c) (fp32, numpy on the CPU as the step) and returns the loss in double."""
    if x.device.type == "cpu":
        diff = x.detach().numpy() - c.numpy()
        x.grad = torch.from_numpy(a.numpy() * diff)
        d = diff.astype(np.float64)
        return float(np.mean(0.5 * a.numpy().astype(np.float64) * d * d))
    diff = x - c
    x.grad = a * diff
    return float((0.5 * a.double() * diff.double() * diff.double()).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("run")
    ap.add_argument("worker_id")
    ap.add_argument("steps", type=int)
    ap.add_argument("h", type=int)
    ap.add_argument("--numel", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--dylu", action="store_true", help="take the H the run's DyLU assigns")
    ap.add_argument("--fragment-alpha", type=float, default=0.0, help="Streaming DiLoCo's fragment_update_alpha")
    ap.add_argument("--fragments-in-flight", type=int, default=1, help="Streaming DiLoCo's rounds in flight at once")
    ap.add_argument("--digests", default=None, help="write \"round digest\" per sync here")
    ap.add_argument("--sync-log", default=None, help="write each sync's SyncInfo as a JSON line here")
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step (a slower machine)")
    ap.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval in seconds")
    ap.add_argument("--device", default="cpu",
                    help="torch device of the model (cuda: tests/it_cuda_python_hooks.sh; emu: emu_hooks.py)")
    args = ap.parse_args()

    emu = EmulatedHooks() if args.device == "emu" else None
    device = "cpu" if emu else args.device
    model = torch.nn.Module()
    model.x = torch.nn.Parameter(torch.zeros(args.numel, device=device))
    a, c = (t.to(device) for t in problem(args.seed, args.worker_id, args.numel))
    inner = QuadAdamW(model.parameters())
    out = open(args.digests, "w") if args.digests else None
    synclog = open(args.sync_log, "w") if args.sync_log else None
    before = signal.getsignal(signal.SIGINT)
    try:
        with rediloco.DiLoCo(args.url, args.run, model, inner, sync_every=args.h, worker_id=args.worker_id,
                             bf16=not args.no_bf16, heartbeat_interval=args.heartbeat,
                             fragment_update_alpha=args.fragment_alpha, fragments_in_flight=args.fragments_in_flight,
                             dylu=args.dylu) as dl:
            step, last = 0, None
            for step in range(1, args.steps + 1):
                if emu:
                    emu.step()
                with torch.no_grad():
                    loss = gradient(model.x, a, c)
                inner.step()  # the sync runs in here every H steps
                dl.report(loss, tokens=1)
                info = dl.last_sync
                if info and info != last:  # a sync happened in this step
                    last = info
                    if out:
                        out.write("%d %s\n" % (info.round, info.digest))
                        out.flush()
                    if synclog:
                        synclog.write(json.dumps(dict(dataclasses.asdict(info), step=step, h=dl.sync_every)) + "\n")
                        synclog.flush()
                if args.step_delay:
                    time.sleep(args.step_delay)
            print("worker %s done at step %d over %s, %s" % (dl.worker_id, step, dl.transfer_path, dl.last_sync))
        if emu:
            emu.release(dl)
    except rediloco.Stopped as e:  # a stop while joining: raised by the `with` itself, the block never ran
        print("stopped while joining (%s); SIGINT handler restored: %s" % (
            e, signal.getsignal(signal.SIGINT) == before))
        return 0
    # reached after a stop too: the block swallows rediloco.Stopped
    print("left the run at step %d (%s); SIGINT handler restored: %s" % (
        step, dl._stop_reason or "all steps done", signal.getsignal(signal.SIGINT) == before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
