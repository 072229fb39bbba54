"""forked.py: several process groups started from one launcher (one torch import for all of them, which
matters on a busy machine), for the group tests (group_quad.py --also, group_sharded.py run)."""
import os
import tempfile

import torch.multiprocessing as mp


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
                while not ctx.join():
                    pass
            except Exception as e:  # noqa: BLE001 - a rank failed: that group's status, the others go on
                print("%s %s of run %s failed: %s" % (what, g.worker_id, g.run, str(e).strip().splitlines()[-1]))
                status = 1
            with open(g.out + ".exit", "w") as f:
                f.write("%d\n" % status)
            failed |= status
    return failed
