"""run.py: creating a run from a model's own weights.

init_run writes the model's parameters (named_parameters() order: the run's layout) to a safetensors
file and calls `coordinator init --from-state FILE` with the other settings, named as that command's
flags (workers=2 is --workers 2, async_=True is --async, nesterov=False is --no-nesterov). The run's
version 0 is then exactly the model's values, and its checkpoints carry the model's tensor names. With
trainer="gpt" and the model flags the model must be exactly that GPT (the coordinator checks), and C GPT
workers can join the run too."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import warnings
from typing import TYPE_CHECKING, Any

from .errors import DiLoCoError

if TYPE_CHECKING:
    import torch

_FLAGS = ("fsdp_ranks", "trainer", "layers", "heads", "dim", "ctx", "vocab", "numel", "workers", "min_workers", "shards", "fragments", "seed", "outer_lr", "outer_momentum",
          "heartbeat_timeout", "dn_buffer_size", "dn_variant", "max_staleness", "staleness_weight", "staleness_ref",
          "async_rule", "rebase_fraction", "async_lookahead", "weight_by", "weight_ref_tokens",
          "dylu_base_sync_every", "snapshot_every", "compress", "topk_density", "topk_bits", "topk_beta", "download",
          "min_replicas")
_SWITCHES = ("async_", "dylu", "force")


def coordinator_path():
    """bin/coordinator: $REDILOCO_COORDINATOR, the source tree this package lives in, or `coordinator`
    on PATH."""
    env = os.environ.get("REDILOCO_COORDINATOR")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.normpath(os.path.join(here, "..", "..", "bin", "coordinator"))
    if os.access(tree, os.X_OK):
        return tree
    found = shutil.which("coordinator")
    if found:
        return found
    raise DiLoCoError("the coordinator program was found neither beside this package (%s) nor as `coordinator` on "
                      "PATH: build ReDiLoCo (make), then put its bin/ on PATH or set REDILOCO_COORDINATOR to "
                      "bin/coordinator" % tree)


def save_state(model: torch.nn.Module, path: str) -> None:
    """The model's parameters, fp32, in named_parameters() order, as a safetensors file (what
    `coordinator init --from-state` reads)."""
    from . import safetensors
    from .checks import check_dtypes
    check_dtypes(model)
    safetensors.write(path, {n: p.detach() for n, p in model.named_parameters()})


def init_flags(**settings):
    """`coordinator init` flags of init_run's keyword arguments."""
    args = []
    for key, value in settings.items():
        if value is None:
            continue
        if key == "nesterov":
            if not value:
                args.append("--no-nesterov")
        elif key in _SWITCHES:
            if value:
                args.append("--" + key.rstrip("_").replace("_", "-"))
        elif key in _FLAGS:
            args += ["--" + key.replace("_", "-"), str(value)]
        else:
            raise TypeError("init_run() got an unexpected keyword argument %r (the flags of `coordinator init "
                            "--help`, with _ for -: %s)" % (key, ", ".join(_FLAGS + _SWITCHES + ("nesterov",))))
    return args


def init_run(url: str, run: str, model: torch.nn.Module, workers: int = 2, shards: int = 8, **settings: Any) -> str:
    """Create run `run` at Redis `url` whose version 0 is `model`'s parameters. Keyword arguments are the
    flags of `coordinator init` (min_workers, fragments, outer_lr, outer_momentum, nesterov,
    heartbeat_timeout, async_, dn_buffer_size, dn_variant, max_staleness, staleness_weight, staleness_ref,
    async_rule, rebase_fraction, async_lookahead, weight_by, weight_ref_tokens,
    dylu, dylu_base_sync_every, snapshot_every, compress, topk_density, topk_bits, topk_beta, download, min_replicas,
    force; fsdp_ranks=R for sharded groups of R ranks: give the whole model, before fully_shard). Returns the
    coordinator's summary line; DiLoCoError with its message when it refuses; a UserWarning for each
    setting it accepts but warns about (e.g. outer_lr above 10)."""
    flags = init_flags(workers=workers, shards=shards, **settings)
    with tempfile.TemporaryDirectory(prefix="rediloco-") as tmp:
        path = os.path.join(tmp, "state.safetensors")
        save_state(model, path)
        env = dict(os.environ, DL_REDIS_URL=url)  # the URL (maybe with a password) stays out of `ps`
        cmd = [coordinator_path(), "init", "--run", run, "--from-state", path] + flags
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise DiLoCoError("coordinator init refused run %r: %s" % (run, (p.stderr or p.stdout).strip()))
    for line in p.stderr.splitlines():  # settings it accepted but warns about (an outer lr above 10, ...)
        if "warning: " in line:
            warnings.warn(line.split("warning: ", 1)[1], UserWarning, stacklevel=2)
    # the summary names the --from-state file, a temporary one deleted by now: say what it held instead
    return p.stdout.strip().replace("tensors of " + path, "tensors of the model's state")
