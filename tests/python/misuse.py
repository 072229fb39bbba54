#!/usr/bin/python3
"""misuse.py URL RUN NUMEL [CASE...]: what a new PyTorch user does that the package must get right (RUN: a quadratic
run of NUMEL parameters, 1 worker, a shard-server serving it). Each case prints "ok <case>: ..." or
"FAIL <case>: ..." and the next one runs; exits 1 when any failed.

  - an LR scheduler made inside the session (torch 1.13 wraps optimizer.step in place: it needs a bound
    method there) and one made before it: both step the lr, the syncs run, and no warning is given;
  - model.double() inside the session (the parameters no longer views of the flat buffer): DiLoCoError at
    the next step, not syncs that send nothing;
  - a second session on the same model or optimizer while the first is open: refused, the first still syncs;
  - `with dl:` inside `with dl:`: only the outer block closes the session (the inner one closed it);
  - a non-finite pseudo-gradient with AdamW: the worker is reset to the global parameters AND its AdamW
    state, so the next round is finite; the log names the tensor;
  - dl.flat_params before open: "the session is not open";
  - BuffersNotSynced points at the user's inner.step() line;
  - load_checkpoint: tied weights load with strict=True; a DDP model is unwrapped as DiLoCo does.
"""
import json
import os
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402
from rediloco import safetensors  # noqa: E402

URL, RUN, NUMEL, ONLY = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
FAILED = []


def case(fn):
    """Runs fn() now (unless CASEs are named and it is not one): ok with its return value, FAIL with what it
    raised."""
    if ONLY and fn.__name__ not in ONLY:
        return fn
    try:
        print("ok %s: %s" % (fn.__name__, fn()))
    except Exception as e:  # noqa: BLE001 - whatever it raised is the failure reported
        print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, e))
        FAILED.append(fn.__name__)
    sys.stdout.flush()
    return fn


def model():
    m = torch.nn.Module()
    m.x = torch.nn.Parameter(torch.zeros(NUMEL))
    return m


def model_and_sgd():
    m = model()
    return m, torch.optim.SGD(m.parameters(), lr=0.1)


def session(m, inner, wid, **kw):
    return rediloco.DiLoCo(URL, RUN, m, inner, sync_every=2, worker_id=wid, heartbeat_interval=1, **kw)


def train(m, inner, dl, steps, sched=None):
    for _ in range(steps):
        m.x.grad = torch.ones(NUMEL)
        inner.step()
        if sched is not None:
            sched.step()


@case
def scheduler_after_open():
    m, inner = model_and_sgd()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "optimizer.step() has been overridden" fails the case
        with session(m, inner, "sched-after") as dl:
            v0 = dl.version
            sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
            train(m, inner, dl, 4, sched)
            assert dl.last_sync is not None and dl.last_sync.version == v0 + 2, dl.last_sync
        assert abs(inner.param_groups[0]["lr"] - 0.1 / 16) < 1e-12, inner.param_groups[0]["lr"]
        inner.step()  # the optimizer's own step after the session, with the scheduler's counter
        sched.step()
    return "2 syncs, lr %g after 4 scheduler steps, no warning" % inner.param_groups[0]["lr"]


@case
def scheduler_before_open():
    m, inner = model_and_sgd()
    sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with session(m, inner, "sched-before") as dl:
            v0 = dl.version
            train(m, inner, dl, 4, sched)
            assert dl.last_sync is not None and dl.last_sync.version == v0 + 2, dl.last_sync
        inner.step()
        sched.step()
    return "2 syncs, no warning"


@case
def nested_with():
    m, inner = model_and_sgd()
    with session(m, inner, "nested") as dl:
        v0 = dl.version
        with dl:  # (a helper that takes the session and enters it again)
            train(m, inner, dl, 2)
        assert dl.last_sync is not None and dl.last_sync.version == v0 + 1, dl.last_sync
        train(m, inner, dl, 2)  # the outer block goes on: the session must still be open
        assert dl.last_sync.version == v0 + 2, "the inner with closed the session: %s" % (dl.last_sync,)
    try:
        dl.report(0.0)
        raise AssertionError("the session is still open after the outer with")
    except rediloco.DiLoCoError as e:
        assert "not open" in str(e), str(e)
    return "an inner `with dl:` left the session open; the outer one closed it"


@case
def model_moved_inside():
    m, inner = model_and_sgd()
    with session(m, inner, "moved") as dl:
        train(m, inner, dl, 1)
        m.double()
        try:
            m.x.grad = torch.ones(NUMEL, dtype=torch.float64)
            inner.step()
        except rediloco.DiLoCoError as e:
            for w in ("replaced after joining", "before opening the session"):
                assert w in str(e), "the message lacks %r: %s" % (w, e)
            return str(e)
    raise AssertionError("no DiLoCoError for parameters replaced by model.double()")


@case
def second_session():
    m, inner = model_and_sgd()
    msgs = []
    with session(m, inner, "twice") as dl:
        v0 = dl.version
        for again in (lambda: session(m, inner, "twice").open(),
                      lambda: session(m, torch.optim.SGD(m.parameters(), lr=0.1), "twice2").open()):
            try:
                again()
                raise AssertionError("a second session on the same model opened")
            except rediloco.DiLoCoError as e:
                assert "already in an open session" in str(e) and "dl.close()" in str(e), str(e)
                msgs.append(str(e))
        train(m, inner, dl, 2)
        assert dl.last_sync is not None and dl.last_sync.version == v0 + 1, dl.last_sync
    with session(m, inner, "twice") as dl:  # closed: it may open again
        pass
    return msgs[0]


@case
def nan_resets_adamw():
    m = model()
    inner = torch.optim.AdamW(m.parameters(), lr=0.01)
    logged = []
    with session(m, inner, "nan", log=lambda level, msg: logged.append(msg)) as dl:
        v0 = dl.version
        m.x.grad = torch.ones(NUMEL)
        inner.step()
        m.x.grad = torch.ones(NUMEL)
        m.x.grad[NUMEL - 3] = float("nan")
        inner.step()  # the sync: not finite, reset to the global parameters
        assert dl.last_sync is not None and dl.last_sync.stale, dl.last_sync
        assert torch.isfinite(m.x).all(), "the parameters were not reset"
        train(m, inner, dl, 2)
        assert torch.isfinite(m.x).all(), "the step after the reset is not finite: the AdamW state kept the NaN"
        assert dl.last_sync.version == v0 + 1 and not dl.last_sync.stale, dl.last_sync
    said = [s for s in logged if "not finite" in s]
    assert said and "'x'" in said[0] and "element %d" % (NUMEL - 3) in said[0], logged
    return said[0]


@case
def flat_params_before_open():
    m = model()
    dl = session(m, torch.optim.SGD(m.parameters(), lr=0.1), "closed")
    try:
        dl.flat_params
    except rediloco.DiLoCoError as e:
        assert "not open" in str(e), str(e)
        return str(e)
    raise AssertionError("no error")


@case
def buffers_warning_points_at_user():
    m = model()
    m.register_buffer("count", torch.zeros(1))
    inner = torch.optim.SGD(m.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with session(m, inner, "buf"):
            for _ in range(2):
                m.count += 1
                m.x.grad = torch.ones(NUMEL)
                inner.step()
    got = [w for w in seen if issubclass(w.category, rediloco.BuffersNotSynced)]
    assert got, [str(w.message) for w in seen]
    assert os.path.basename(got[0].filename) == "misuse.py", "%s:%d" % (got[0].filename, got[0].lineno)
    return "at %s:%d" % (os.path.basename(got[0].filename), got[0].lineno)


def checkpoint_of(tensors, path):
    """A checkpoint file as `coordinator checkpoint save` writes one, of tensors {name: tensor}."""
    layout, off = [], 0
    for name, t in tensors.items():
        layout.append([name, list(t.shape), off])
        off += t.numel()
    flat = torch.cat([t.reshape(-1) for t in tensors.values()])
    safetensors.write(path, {"params": flat}, {"format": "rediloco-checkpoint", "layout": json.dumps(layout),
                                               "version": 3, "run": "t"})


@case
def tied_checkpoint():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.fc = torch.nn.Linear(3, 5, bias=False)
            self.fc.weight = self.emb.weight
    m = Tied()
    want = torch.arange(15, dtype=torch.float32).view(5, 3)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck.safetensors")
        checkpoint_of({"emb.weight": want}, path)
        rediloco.load_checkpoint(m, path)
    assert torch.equal(m.emb.weight.detach(), want) and m.fc.weight is m.emb.weight
    return "strict load of emb.weight tied to fc.weight"


@case
def ddp_checkpoint():
    import torch.distributed as dist
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"), rank=0, world_size=1)
        try:
            inner = torch.nn.Linear(3, 2)
            ddp = torch.nn.parallel.DistributedDataParallel(inner)
            want = {"weight": torch.ones(2, 3), "bias": torch.full((2,), 2.0)}
            path = os.path.join(tmp, "ck.safetensors")
            checkpoint_of(want, path)
            rediloco.load_checkpoint(ddp, path)
        finally:
            dist.destroy_process_group()
    assert torch.equal(inner.weight.detach(), want["weight"]) and torch.equal(inner.bias.detach(), want["bias"])
    return "a DDP model's checkpoint loads into its module"


if FAILED:
    print("failed: " + ", ".join(FAILED))
    sys.exit(1)
