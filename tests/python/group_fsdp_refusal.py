#!/usr/bin/python3
"""group_fsdp_refusal.py DEAD_URL: what DiLoCo refuses of sharded models, before it loads libdiloco or touches
Redis (DEAD_URL answers nothing): FSDP1 (FullyShardedDataParallel) in a process group, NotImplementedError saying
to use fully_shard or DDP; sharded=True without a process group, DiLoCoError. A stand-in class carries FSDP1's
name, so the check runs where FSDP does not import (Debian's torch 1.13 on Python 3.11); where it does, the
real class's name is checked to be the one matched. A fully_shard model is not refused (the test with the real
one: tests/it_python_group_fsdp.sh). Prints one "ok ..." line per case."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402
from rediloco import sharded  # noqa: E402


class FullyShardedDataParallel(torch.nn.Module):  # stands in for torch.distributed.fsdp's wrapper
    def __init__(self, module):
        super().__init__()
        self.module = module


# Any process group: the refusal looks at the model only (dist.group.WORLD is None while torch.distributed
# is not initialised, and None means no group); a replicated model gets further, to Group(), which finds
# torch.distributed not initialised.
PG = object()


def attempt(model, process_group, sharded=False):
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with rediloco.DiLoCo(sys.argv[1], "fsdp", model, inner, sync_every=5, worker_id="node7",
                             process_group=process_group, connect_timeout=2.0, sharded=sharded):
            pass
    except Exception as e:  # noqa: BLE001 - the test looks at which one
        return e
    return None


def main():
    url = sys.argv[1]
    assert url
    e = attempt(FullyShardedDataParallel(torch.nn.Linear(4, 4)), PG)
    assert isinstance(e, NotImplementedError), "FSDP1: %r" % e
    msg = str(e)
    assert "FSDP1" in msg and "fully_shard" in msg and "DistributedDataParallel" in msg, msg
    print("ok FSDP(Linear) refused: %s" % msg)
    # the same call with a replicated model passes this check: it fails further on (torch.distributed is not
    # initialised in this process), so the refusal above is the sharded model's
    e = attempt(torch.nn.Sequential(torch.nn.Linear(4, 4)), PG)
    assert isinstance(e, rediloco.DiLoCoError) and "not initialised" in str(e), repr(e)
    print("ok a replicated model is not refused as sharded: %s" % e)
    e = attempt(torch.nn.Linear(4, 4), None, sharded=True)
    assert isinstance(e, rediloco.DiLoCoError) and "needs its process_group" in str(e), repr(e)
    print("ok sharded=True without a process group: %s" % e)
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as RealFSDP
    except Exception as e:  # noqa: BLE001 - any import failure: the stand-ins are what can be checked here
        print("ok torch %s: the real FSDP does not import here (%s: %s); stand-ins checked"
              % (torch.__version__, type(e).__name__, str(e).splitlines()[0][:120]))
    else:
        assert RealFSDP.__name__ == sharded.FSDP1_CLASS, RealFSDP.__name__
        print("ok torch %s: the real FSDP class is named %s, which is refused" % (torch.__version__, RealFSDP.__name__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
