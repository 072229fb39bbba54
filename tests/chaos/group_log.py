"""group_log.py: what a chaos run's process group did (chaos.py --group-ranks: worker w1 is
tests/tools/group_worker, whose sync lines go to OUT/worker-w1.log), for the tests that run one.

check(out, steps) asserts that the group registered once, that its ranks synced at the same inner steps,
the last one `steps`, and that no sync of any rank was stale (a lost round); it returns the number of
syncs of rank 0. telemetry(out) reads the group's rank 0 as bin/worker's --log telemetry for
tests/chaos/audit.py: its syncs and its joins (a start, or a restart after a kill), by time."""
import datetime


def check(out, steps, worker="w1"):
    lines = open("%s/worker-%s.log" % (out, worker), errors="replace").read().splitlines()
    regs = sum("registered as %s " % worker in l for l in lines)
    assert regs == 1, "the group %s registered %d times" % (worker, regs)
    syncs = [l.split() for l in lines if l.startswith("sync rank ")]
    ranks = sorted({int(s[2]) for s in syncs})
    assert len(ranks) >= 2, "the group %s has sync lines of ranks %s" % (worker, ranks)
    at = {r: [s[-1] for s in syncs if int(s[2]) == r] for r in ranks}
    assert all(at[r] == at[0] for r in ranks), "the group's ranks synced at other steps: %s" % at
    assert at[0] and at[0][-1] == str(steps), "the group's last sync was at step %s, not %d" % (at[0][-1:], steps)
    stale = [s for s in syncs if s[11] == "stale" and s[12] != "0"]
    assert not stale, "the group lost %d rounds" % len(stale)
    return len(at[0])


def _log_time(stamp):
    """A log line's first field (2026-11-30T06:04:35.955Z) in seconds since the epoch."""
    t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def telemetry(out, worker="w1"):
    """Rank 0's syncs ({"event": "sync", "version", "fragment", "digest", "shards_digest", "stale", "t": when the
    sync returned}: a sharded rank's digest is of its own part, its shards digest the run's) and
    joins ({"event": "join", "version", "t"}: "rank 0 of group W joined run R at version V"), by time."""
    with open("%s/worker-%s.log" % (out, worker), errors="replace") as log:
        lines = log.read().splitlines()
    es = []
    for line in lines:
        f = line.split()
        if line.startswith("sync rank 0 ") and len(f) > 23:
            es.append({"event": "sync", "version": int(f[4]), "digest": f[6], "stale": f[12] != "0",
                       "shards_digest": f[f.index("shards") + 1],
                       "fragment": int(f[f.index("fragment") + 1]) if "fragment" in f else 0,
                       "t": int(f[23]) / 1e6})
        elif " INFO rank 0 of group %s joined run " % worker in line:
            at = f.index("version")
            es.append({"event": "join", "version": int(f[at + 1]), "t": _log_time(f[0])})
    return sorted(es, key=lambda e: e["t"])
