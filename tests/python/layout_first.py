#!/usr/bin/python3
"""layout_first.py URL RUN: the PyTorch side of tests/it_python_layout_first.sh.

    init   creates RUN from a small model's weights (init_run: its layout is recorded)
    bad    three models the run must refuse before anything is written anywhere: one tensor of another
           shape (same parameter count), the same tensors under other names, one parameter too many.
           Each raises DiLoCoError naming the tensor; each model's tensors are bit-unchanged and still
           their own storage afterwards (the shell checks that Redis saw no join)
    good   a model of the run's layout joins (so the shell's join counters are shown to move)
Prints one "ok <case>: <message>" line per case; exits 1 on the first case that does not behave."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402


def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def reshaped():
    """The run's 740 parameters, but 0.weight is [16, 32] instead of [32, 16]."""
    m = net(2)
    m[0].weight = torch.nn.Parameter(torch.randn(16, 32))
    return m


class Renamed(torch.nn.Module):
    """The run's tensors, shapes and order under other names (enc.weight for 0.weight, ...)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.enc, self.norm, self.dec = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)


def extra():
    """The run's tensors and one more at the end: 3.scale [3]."""
    m = net(2)
    m[3].scale = torch.nn.Parameter(torch.ones(3))
    return m


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def refused(case, model, words, url, run):
    before = {n: (p.detach().clone(), p.data_ptr()) for n, p in model.named_parameters()}
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with rediloco.DiLoCo(url, run, model, inner, sync_every=2, worker_id="bad-" + case.split()[0],
                             connect_timeout=0, net_timeout=5, sync_timeout=5):
            fail("%s: joined the run" % case)
    except rediloco.DiLoCoError as e:
        missing = [w for w in words if w not in str(e)]
        if missing:
            fail("%s: the message lacks %s: %s" % (case, missing, e))
        msg = str(e)
    for n, p in model.named_parameters():
        value, ptr = before[n]
        if not torch.equal(p.detach(), value) or p.data_ptr() != ptr:
            fail("%s: tensor %r was changed (max diff %g, storage %s)" % (
                case, n, (p.detach() - value).abs().max().item(), "same" if p.data_ptr() == ptr else "replaced"))
    if "step" in inner.__dict__:
        fail("%s: the optimizer's step is still hooked" % case)
    print("ok %s: %s" % (case, msg))


def main(cmd, url, run):
    if cmd == "init":
        print(rediloco.init_run(url, run, net(1), workers=1, shards=2))
    elif cmd == "bad":
        refused("other shape", reshaped(), ["'0.weight'", "[32, 16]", "[16, 32]"], url, run)
        refused("renamed tensors", Renamed(), ["'0.weight'", "'enc.weight'"], url, run)
        refused("extra parameter", extra(), ["'3.scale'", "740", "743"], url, run)
    elif cmd == "good":
        m = net(2)
        with rediloco.DiLoCo(url, run, m, torch.optim.SGD(m.parameters(), lr=0.1), worker_id="good",
                             connect_timeout=0) as dl:
            print("ok the run's own layout joins at version %d" % dl.version)
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main(*sys.argv[1:4])
