#!/usr/bin/python3
"""from_state.py CMD ...: the PyTorch side of tests/it_python_from_state.sh (two processes: torch starts
slowly).

    init URL RUN DIR         a small torch model (seed 1) -> rediloco.init_run (its state as the run); then
                             the state files the coordinator must refuse or convert, in DIR:
                             truncated.safetensors, int.safetensors (an I64 tensor), bf16.safetensors
    check URL RUN BOUNDS DIR prints "shard k digest" (XXH3 of each shard of the seed-1 model's flat fp32
                             values, BOUNDS the run's shard_bounds) to DIR/want.txt, then:
                             join: a worker with the same architecture but other values starts from exactly
                             the seed-1 values; a model of the same size but another layout is refused naming
                             the tensor; load: `coordinator checkpoint save`, then load_checkpoint into a
                             fresh model gives the seed-1 values bit for bit, into another model is refused;
                             bf16: a worker of run "bf" (from DIR/bf16.safetensors) holds exactly the BF16
                             values widened to fp32
"""
import ctypes
import os
import re
import subprocess
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402
from rediloco import run as rrun, safetensors  # noqa: E402


def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def other_layout():
    """The same 740 parameters, cut differently."""
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4, bias=False),
                               torch.nn.Linear(1, 4, bias=False))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def xxh3(t):
    f = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    b = t.contiguous().numpy().tobytes()
    return "%016x" % f(b, len(b))


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def write_odd(d):
    rediloco.save_state(net(1), os.path.join(d, "good.safetensors"))
    raw = open(os.path.join(d, "good.safetensors"), "rb").read()
    open(os.path.join(d, "truncated.safetensors"), "wb").write(raw[:len(raw) - 100])
    safetensors.write(os.path.join(d, "int.safetensors"), {"w": torch.ones(3), "steps": torch.tensor([7])})
    torch.manual_seed(4)
    safetensors.write(os.path.join(d, "bf16.safetensors"), {"a.weight": torch.randn(5, 3).bfloat16(),
                                                             "a.bias": torch.randn(5).bfloat16()})


def join(url, run):
    m = net(2)
    inner = torch.optim.AdamW(m.parameters(), lr=1e-3)
    with rediloco.DiLoCo(url, run, m, inner, sync_every=5, worker_id="py1", connect_timeout=0) as dl:
        if not torch.equal(flat(m), flat(net(1))):
            fail("after open the parameters are not the run's (the seed-1 model's)")
        print("ok joined at version %d: parameters bit-identical to the state file's" % dl.version)
    o = other_layout()
    if sum(p.numel() for p in o.parameters()) != sum(p.numel() for p in m.parameters()):
        fail("other_layout() must have the same parameter count")
    try:
        with rediloco.DiLoCo(url, run, o, torch.optim.SGD(o.parameters(), lr=0.1), worker_id="py2",
                             connect_timeout=0):
            fail("a model with another layout joined")
    except rediloco.DiLoCoError as e:
        if "'2.weight'" not in str(e) or "'3.weight'" not in str(e):
            fail("layout message does not name the tensors: %s" % e)
        print("ok other layout refused: %s" % e)


def load(url, run, ckpt):
    coord = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bin", "coordinator")
    p = subprocess.run([coord, "checkpoint", "save", "--run", run, "--out", ckpt], env=dict(os.environ, DL_REDIS_URL=url),
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail("checkpoint save: " + p.stderr)
    m = net(5)
    meta = rediloco.load_checkpoint(m, ckpt)
    if not torch.equal(flat(m), flat(net(1))):
        fail("load_checkpoint did not give back the state bit for bit")
    names = [n for n, _ in m.named_parameters()]
    print("ok checkpoint version %s loaded into %d tensors (%s ...), bit-identical" % (
        meta["version"], len(names), ", ".join(names[:3])))
    try:
        rediloco.load_checkpoint(torch.nn.Linear(3, 3), ckpt)
        fail("load_checkpoint into another model succeeded")
    except rediloco.DiLoCoError as e:
        print("ok load into another model refused: %s" % e)


def bf16_join(url, run, d):
    _, tensors = safetensors.read(os.path.join(d, "bf16.safetensors"))
    m = torch.nn.Module()
    m.a = torch.nn.Linear(3, 5)
    with rediloco.DiLoCo(url, run, m, torch.optim.SGD(m.parameters(), lr=0.1), worker_id="pyb", connect_timeout=0):
        if not (torch.equal(m.a.weight, tensors["a.weight"].float()) and torch.equal(m.a.bias, tensors["a.bias"].float())):
            fail("the bf16 run's values are not the file's widened to fp32")
    print("ok a BF16 state file became exactly its values in fp32")


def init_run_takes_every_init_flag():
    """Each flag of `coordinator init --help` is an init_run keyword (but those naming Redis, the run and
    where version 0 comes from, which init_run sets itself)."""
    out = subprocess.run([rrun.coordinator_path(), "init", "--help"], capture_output=True, text=True).stdout
    flags = set(re.findall(r"--([a-z][a-z0-9-]*)", out)) - {"redis", "redis-file", "run", "from-checkpoint",
                                                              "from-state", "reset-momentum"}
    keys = {"workers": 1, "shards": 1, "nesterov": False}
    keys.update({k: True if k in rrun._SWITCHES else 1 for k in rrun._FLAGS + rrun._SWITCHES})
    given = {f[2:] for f in rrun.init_flags(**keys) if f.startswith("--")}
    if flags - given:
        fail("init_run has no keyword for: " + ", ".join(sorted(flags - given)))
    print("ok init_run takes all %d flags of coordinator init --help" % len(flags))


def coordinator_not_found():
    """A copy of the package away from the source tree, with no `coordinator` on PATH and no
    REDILOCO_COORDINATOR: the error says all three ways to point it at the program (it said only
    REDILOCO_COORDINATOR, not PATH)."""
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.dirname(rrun.__file__), os.path.join(tmp, "rediloco"))
        env = {k: v for k, v in os.environ.items() if k != "REDILOCO_COORDINATOR"}
        env["PATH"], env["PYTHONPATH"] = tmp, tmp  # (no coordinator there)
        code = "from rediloco import run\ntry:\n    run.coordinator_path()\nexcept Exception as e:\n    print(e)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp)
    said = out.stdout.strip()
    if "on PATH" not in said or "REDILOCO_COORDINATOR" not in said or "make" not in said:
        fail("coordinator not found: %s %s" % (said, out.stderr[-300:]))
    print("ok coordinator not found: %s" % said)


def main(cmd, args):
    if cmd == "init":
        init_run_takes_every_init_flag()
        coordinator_not_found()
        summary = rediloco.init_run(args[0], args[1], net(1), workers=1, shards=4, outer_lr=0.5)
        print(summary)
        # the summary names the model's state, not the temporary file it went through (deleted by now)
        if "version 0 = the 6 tensors of the model's state" not in summary or "safetensors" in summary:
            fail("init_run's summary: %s" % summary)
        with warnings.catch_warnings(record=True) as w:  # a setting init accepts but warns about reaches Python
            warnings.simplefilter("always")
            rediloco.init_run(args[0], args[1] + "-lr", net(1), workers=1, shards=4, outer_lr=1e6)
        said = [str(x.message) for x in w if issubclass(x.category, UserWarning)]
        if not any("--outer-lr 1e+06 is far above" in m for m in said):
            fail("init_run(outer_lr=1e6) did not warn: %s" % said)
        print("ok init_run(outer_lr=1e6) warns: %s" % said[0][:80])
        write_odd(args[2])
    elif cmd == "check":
        url, run, bounds, d = args
        b = [int(x) for x in bounds.split(",")]
        v = flat(net(1))
        with open(os.path.join(d, "want.txt"), "w") as f:
            for k in range(len(b) - 1):
                f.write("shard %d %s\n" % (k, xxh3(v[b[k]:b[k + 1]])))
        join(url, run)
        load(url, run, os.path.join(d, "ck.safetensors"))
        bf16_join(url, "bf", d)
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
