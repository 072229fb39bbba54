#!/usr/bin/python3
"""group_fsdp_refusal.py DEAD_URL: DiLoCo(process_group=...) refuses a sharded model (FSDP, fully_shard) with
NotImplementedError naming the reason, before it loads libdiloco or touches Redis (DEAD_URL answers nothing).
Stand-in classes carry the names of torch's sharded classes, so the check runs where FSDP does not import
(Debian's torch 1.13 on Python 3.11); where it does, the real classes' names are checked to be the ones
matched. Prints one "ok ..." line per case."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402
from rediloco import group  # noqa: E402


class FullyShardedDataParallel(torch.nn.Module):  # stands in for torch.distributed.fsdp's wrapper
    def __init__(self, module):
        super().__init__()
        self.module = module


class FSDPModule:  # stands in for fully_shard's mixin (torch >= 2.4)
    pass


class FSDPLinear(FSDPModule, torch.nn.Linear):  # what fully_shard(Linear) becomes
    pass


# Any process group: the refusal looks at the model only (dist.group.WORLD is None while torch.distributed
# is not initialised, and None means no group); a replicated model gets further, to Group(), which finds
# torch.distributed not initialised.
PG = object()


def attempt(model, process_group):
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with rediloco.DiLoCo(sys.argv[1], "fsdp", model, inner, sync_every=5, worker_id="node7",
                             process_group=process_group, connect_timeout=2.0):
            pass
    except Exception as e:  # noqa: BLE001 - the test looks at which one
        return e
    return None


def main():
    url = sys.argv[1]
    assert url
    cases = [("FSDP(Linear)", FullyShardedDataParallel(torch.nn.Linear(4, 4)), "FullyShardedDataParallel"),
             ("Sequential(fully_shard(Linear))", torch.nn.Sequential(torch.nn.ReLU(), FSDPLinear(4, 4)), "FSDPModule")]
    for what, model, name in cases:
        e = attempt(model, PG)
        assert isinstance(e, NotImplementedError), "%s: %r" % (what, e)
        msg = str(e)
        assert "process groups support replicated models (DDP) only" in msg and name in msg, msg
        assert "not built" in msg and "DistributedDataParallel" in msg, msg
        print("ok %s refused: %s" % (what, msg))
    # the same call with a replicated model passes this check: it fails further on (torch.distributed is not
    # initialised in this process), so the refusal above is the sharded model's
    e = attempt(torch.nn.Sequential(torch.nn.Linear(4, 4)), PG)
    assert isinstance(e, rediloco.DiLoCoError) and "not initialised" in str(e), repr(e)
    print("ok a replicated model is not refused as sharded: %s" % e)
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as RealFSDP
    except Exception as e:  # noqa: BLE001 - any import failure: the stand-ins are what can be checked here
        print("ok torch %s: the real FSDP does not import here (%s: %s); stand-ins checked"
              % (torch.__version__, type(e).__name__, str(e).splitlines()[0][:120]))
    else:
        assert RealFSDP.__name__ in group.SHARDED_CLASSES, RealFSDP.__name__
        print("ok torch %s: the real FSDP class is named %s, which is refused" % (torch.__version__, RealFSDP.__name__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
