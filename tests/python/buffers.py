#!/usr/bin/python3
"""buffers.py CMD URL RUN [DIR]: the PyTorch side of tests/it_python_buffers.sh.

    init    RUN from a model with a BatchNorm (its parameters only: the run's layout)
    check   train: the model in train mode syncs twice and gets one BuffersNotSynced naming the running
            statistics it changed (not the integer counter); in eval mode (buffers unchanged) none;
            load: a checkpoint of the run into that model with strict=True is refused naming its three
            buffers, the model unchanged; strict=False loads the parameters bit for bit and keeps the
            buffers; a checkpoint whose last tensor has another shape changes nothing
Prints one "ok ..." line per check; exits 1 at the first that fails."""
import os
import subprocess
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402


def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def state(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def train(url, run, mode):
    m = net(2)
    m.train(mode == "train")
    inner = torch.optim.SGD(m.parameters(), lr=0.01)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with rediloco.DiLoCo(url, run, m, inner, sync_every=2, worker_id="bn-" + mode, connect_timeout=0) as dl:
            v0 = dl.version
            for _ in range(4):
                m(torch.randn(32, 8)).square().mean().backward()
                inner.step()
                inner.zero_grad()
            if dl.last_sync is None or dl.last_sync.version != v0 + 2:
                fail("%s: expected 2 syncs, last %s" % (mode, dl.last_sync))
    return [str(w.message) for w in seen if issubclass(w.category, rediloco.BuffersNotSynced)]


def load(url, run, ckpt):
    coord = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bin", "coordinator")
    p = subprocess.run([coord, "checkpoint", "save", "--run", run, "--out", ckpt], env=dict(os.environ, DL_REDIS_URL=url),
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail("checkpoint save: " + p.stderr)
    _, tensors = rediloco.read_checkpoint(ckpt)
    m = net(5)
    m(torch.randn(4, 8))  # running statistics of its own
    before = state(m)
    try:
        rediloco.load_checkpoint(m, ckpt)
        fail("strict load into a model with buffers succeeded")
    except rediloco.DiLoCoError as e:
        for w in ("'1.running_mean'", "'1.running_var'", "'1.num_batches_tracked'", "strict=False"):
            if w not in str(e):
                fail("strict load: the message lacks %s: %s" % (w, e))
        print("ok strict load refused: %s" % e)
    if not same(state(m), before):
        fail("the refused strict load changed the model")
    rediloco.load_checkpoint(m, ckpt, strict=False)
    after = state(m)
    for k, v in after.items():
        want = tensors[k] if k in tensors else before[k]
        if not torch.equal(v, want):
            fail("strict=False: %r is not the %s's" % (k, "checkpoint" if k in tensors else "model"))
    print("ok strict=False: the 6 parameters are the checkpoint's bit for bit, the 3 buffers the model's own")
    o = net(6)
    o[3] = torch.nn.Linear(16, 3)  # the last two tensors of another shape
    before = state(o)
    try:
        rediloco.load_checkpoint(o, ckpt, strict=False)
        fail("a checkpoint of another shape loaded")
    except rediloco.DiLoCoError as e:
        if not same(state(o), before):
            fail("a load refused at '3.weight' changed the tensors before it")
        print("ok a shape refused at %s changes nothing" % str(e).split(": ", 1)[1])


def main(cmd, url, run, d=None):
    if cmd == "init":
        print(rediloco.init_run(url, run, net(1), workers=1, shards=2))
    elif cmd == "check":
        got = train(url, run, "train")
        if len(got) != 1 or "'1.running_mean', '1.running_var'" not in got[0] or "num_batches" in got[0]:
            fail("train mode: want one BuffersNotSynced naming '1.running_mean', '1.running_var', got %s" % got)
        print("ok train mode: %s" % got[0])
        got = train(url, run, "eval")
        if got:
            fail("eval mode (buffers unchanged): warned %s" % got)
        print("ok eval mode, buffers unchanged: no warning")
        load(url, run, os.path.join(d, "ck.safetensors"))
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main(*sys.argv[1:])
