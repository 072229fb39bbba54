"""forked.py: several process groups started from one launcher (one torch import for all of them, which
matters on a busy machine), for the group tests (group_quad.py --also, group_sharded.py run)."""
import os
import tempfile
import time

import torch.multiprocessing as mp


# Once a rank of a group has failed, its siblings get this long to end by themselves before they are stopped:
# a bad-input test wants every rank to say why (each learns the refusal at about the same moment), and
# torch's join stops the others at the first failure, which could cut a sibling short before it wrote its
# error (it_python_group_sharded: seen once in five full suites this session, its rank 1 file held only its pid).
SIBLING_GRACE_S = 3.0


def settle(ctx):
    """Wait until every rank of ctx has exited, or SIBLING_GRACE_S after the first one failed."""
    deadline = None
    while any(p.is_alive() for p in ctx.processes):
        if deadline is None and any(p.exitcode not in (None, 0) for p in ctx.processes):
            deadline = time.monotonic() + SIBLING_GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            return
        time.sleep(0.05)


def run_groups(target, groups, what="group"):
    """target(rank, g, init_file) in g.ranks forked processes for every g of groups (each g has ranks,
    worker_id, run and out): each group's exit status (0, or 1 when a rank failed; the others go on) goes to
    g.out + ".exit"; returns 1 when any group failed."""
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        running = [(g, mp.start_processes(target, args=(g, os.path.join(tmp, "init%d" % i)), nprocs=g.ranks,
                                          join=False, start_method="fork")) for i, g in enumerate(groups)]
        for g, ctx in running:
            status = 0
            try:
                settle(ctx)
                while not ctx.join():  # (stops any rank still running, raises the first failure)
                    pass
            except Exception as e:  # noqa: BLE001 - a rank failed: that group's status, the others go on
                print("%s %s of run %s failed: %s" % (what, g.worker_id, g.run, str(e).strip().splitlines()[-1]))
                status = 1
            with open(g.out + ".exit", "w") as f:
                f.write("%d\n" % status)
            failed |= status
    return failed
