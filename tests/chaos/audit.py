#!/usr/bin/env python3
"""audit.py OUT [options]: check a chaos run's invariants from what tests/chaos/chaos.py left in OUT
(chaos.jsonl, w*.jsonl worker telemetry, redis_dump.json with the run's events stream and barriers).

Invariants (each printed as ok/FAIL; exit 1 if any fails):
  commits      every shard committed versions 1..V exactly once each (no (shard, version) twice, no gap),
               and the shards hash holds V
  acks         (runs with min_replicas > 0) every commit a shard-server acknowledged (its log line
               "shard K: committed version V") is in the final events stream as committed by that
               server: no acknowledged commit was lost in a Redis failover
  rounds       every round of every fragment closed exactly once, rounds contiguous from 0
  coverage     every shard committed every closed round but at most the last
  digests      for every version, every worker that logged a sync at it logged the same digest (of the
               run's shards: a sharded group's rank holds only its part)
  versions     no worker's synced version ever goes back (across its restarts too); a sync that was
               not stale moved to a newer version
  stale        every participant w:inc of a closed barrier was a live member with that incarnation when
               the barrier closed (a pseudo-gradient of an evicted / replaced incarnation is never applied)
  rejoin       every faulted worker synced again after the fault; every killed process restarted and
               (workers) joined again; every killed server is registered at the end
  round        the run's open round, sampled each second, never goes back (Redis restarts)
  participate  every faulted worker was a participant of a closed round again (it contributes again)
  loss         the mean worker loss at the end is below the mean at the start
  settled      the run made progress after the storm (chaos.py's settle phase)
Also prints figures (rounds, faults, recovery latencies, participation); --json FILE writes them.
"""
import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_log  # noqa: E402


def load_jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by kill -9
    return out


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return round(xs[i], 3)



def places_lost(out):
    """Async submissions whose places a Redis failover lost, found by their workers and placed again
    (worker/diloco/async.c logs one line for each)."""
    n = 0
    for path in glob.glob(os.path.join(out, "worker-*.log")):
        with open(path, errors="replace") as f:
            n += sum("no longer records our place" in line for line in f)
    return n

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--min-faults", type=int, default=0)
    ap.add_argument("--skip", default="", help="comma list of checks not to enforce (still printed)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    skip = set(x for x in a.skip.split(",") if x)

    chaos = load_jsonl(os.path.join(a.out, "chaos.jsonl"))
    dump = json.load(open(os.path.join(a.out, "redis_dump.json")))
    tele = {os.path.basename(p)[:-6]: load_jsonl(p) for p in sorted(glob.glob(os.path.join(a.out, "w*.jsonl")))}
    if "w1" not in tele and os.path.exists(os.path.join(a.out, "worker-w1.log")):  # chaos.py --group-ranks
        tele["w1"] = group_log.telemetry(a.out)
    ev = dump["events"]
    nshards = int(dump["config"]["shards"])
    H = None
    start = next((e for e in chaos if e["event"] == "start"), {})
    H = start.get("sync_every")
    results = []
    # an async run closes no rounds: each submission applied is a version of its shards, in the order Redis
    # placed them, and a worker's sync holds its shards at versions of their own (no digest per version);
    # tests/tools/ref_async replays that order and checks every shard's digest (it_chaos_async_storm.sh)
    is_async = dump["config"].get("mode") == "async"
    ASYNC_NA = ("rounds", "coverage", "digests", "stale", "participate", "round")

    def check(name, ok, detail):
        if is_async and name in ASYNC_NA:
            print("%-9s n/a   async: no rounds close; the replay of the placed order checks the versions" % name)
            return
        ok = bool(ok)
        results.append((name, ok, detail))
        print("%-9s %s  %s" % (name, "ok  " if ok else ("FAIL" if name not in skip else "fail (not enforced)"), detail))

    # commits
    per = {}
    for e in ev:
        if e.get("type") == "commit":
            per.setdefault(int(e["shard"]), []).append(int(e["version"]))
    bad = []
    for k in range(nshards):
        vs = per.get(k, [])
        dup = sorted(set(v for v in vs if vs.count(v) > 1))
        gap = sorted(set(range(1, max(vs) + 1 if vs else 1)) - set(vs))
        hv = int(dump["shards"].get("%d:version" % k, -1))
        if dup or gap or hv != (max(vs) if vs else 0):
            bad.append("shard %d: twice %s, missing %s, hash version %d, max commit %s" % (k, dup, gap, hv, max(vs) if vs else 0))
    total_commits = sum(len(v) for v in per.values())
    check("commits", not bad, "; ".join(bad) or "%d commits over %d shards, each (shard, version) once, no gap" % (total_commits, nshards))

    # acks: an acknowledged commit survives failovers (only promised with min_replicas)
    final = {(int(e["shard"]), int(e["version"])): e.get("server") for e in ev if e.get("type") == "commit"}
    acked, lost = 0, []
    for path in sorted(glob.glob(os.path.join(a.out, "server-*.log"))):
        sid = os.path.basename(path)[len("server-"):-len(".log")]
        for line in open(path, errors="replace"):
            i = line.find(": committed version ")
            if i < 0 or " shard " not in line[:i + 1]:
                continue
            k = int(line[:i].rsplit(" ", 1)[1])
            v = int(line[i + len(": committed version "):].split(" ", 1)[0])
            if v > int(dump["shards"].get("%d:version" % k, 0)):
                continue  # acknowledged after the dump was taken (the run goes on until its shutdown)
            acked += 1
            if final.get((k, v)) != sid:
                lost.append("%s shard %d v%d (final: %s)" % (sid, k, v, final.get((k, v), "missing")))
    minrep = int(dump["config"].get("min_replicas", 0) or 0)
    if minrep > 0:
        check("acks", not lost and acked > 0, ("acknowledged commits lost: %s" % lost[:20]) if lost else
              "%d commits acknowledged by the servers, all in the final stream (min_replicas %d)" % (acked, minrep))
    else:
        print("%-9s n/a   min_replicas 0: %d acknowledged commits not in the final stream (allowed)" % ("acks", len(lost)))

    # rounds
    closes = [e for e in ev if e.get("type") == "close"]
    byf = {}
    for e in closes:
        byf.setdefault(int(e["frag"]), []).append(int(e["round"]))
    bad = []
    for f, rs in byf.items():
        if sorted(rs) != list(range(len(rs))):
            bad.append("fragment %d closed rounds %s" % (f, sorted(rs)))
    nrounds = len(byf.get(0, []))
    check("rounds", not bad and nrounds > 0, "; ".join(bad) or "%d rounds closed once each" % nrounds)

    # coverage: every shard at least at the rounds its fragment closed, but the last
    fbounds = [int(x) for x in str(dump["config"].get("frag_bounds", "0,%d" % nshards)).split(",")]
    frag_of = {k: f for f in range(len(fbounds) - 1) for k in range(fbounds[f], fbounds[f + 1])}
    vmax = {k: max(per.get(k, [0])) for k in range(nshards)}
    low = {k: v for k, v in vmax.items() if v < len(byf.get(frag_of.get(k, 0), [])) - 1}
    check("coverage", not low, "shards behind the closed rounds: %s" % low if low else
          "every shard at version %s of %s closed rounds" % (sorted(set(vmax.values())),
                                                             "/".join(str(len(byf.get(f, []))) for f in sorted(byf))))

    # digests
    # (fragment, version): Streaming numbers each fragment's versions on its own. A sync's digest is of the
    # whole vector: in Streaming a stale one (a round lost, everything fetched again) holds the other
    # fragments at whatever versions they had then, so only the rounds every worker took in step compare.
    # The run's shards digest (diloco_sync_info.shards_digest) is what compares: a sharded group's rank holds
    # only its part, so its plain digest is of that part (zero: none taken, the vector was being written)
    streaming = len(fbounds) > 2
    byv, syncs = {}, 0
    for w, es in tele.items():
        for e in es:
            if e.get("event") != "sync" or (streaming and e.get("stale")):
                continue
            syncs += 1
            digest = e.get("shards_digest", e.get("digest"))
            if int(digest, 16) != 0:
                byv.setdefault((e.get("fragment", 0), e["version"]), {}).setdefault(digest, set()).add(w)
    split = {"%d:%d" % v: {d: sorted(ws) for d, ws in ds.items()} for v, ds in byv.items() if len(ds) > 1}
    nlog = sum(sum(len(ws) for ws in ds.values()) for ds in byv.values())
    if syncs and not byv and streaming:
        # (--fragments-in-flight D > 1: another fragment's round is always receiving into the vector)
        print("digests   n/a   %d syncs, none with a digest: other rounds in flight were writing the vector" % syncs)
    else:
        check("digests", not split and byv, ("versions with different digests: %s" % json.dumps(split)[:2000])
              if split else "%d versions, %d (worker, version) digests, all workers agree at every version"
              % (len(byv), nlog))

    # versions never go back
    bad = []
    for w, es in tele.items():
        last = {}  # per fragment (a join: fragment 0's version)
        for e in es:
            if e.get("event") in ("sync", "join"):
                v, f = e["version"], e.get("fragment", 0)
                before = last.get(f, -1)
                # a join or a lost (stale) round may stay at the version it had; a real sync moves on
                if v < before if (e["event"] == "join" or e.get("stale")) else v <= before:
                    bad.append("%s: %s at version %d of fragment %d after version %d (t=%.3f)" %
                               (w, e["event"], v, f, before, e["t"]))
                last[f] = max(before, v)
    check("versions", not bad, "; ".join(bad[:10]) or "no worker ever went back to an older version")

    # stale pseudo-gradients never applied
    live, bad, nparts = set(), [], []
    for e in ev:
        t = e.get("type")
        if t == "join":
            live.add((e["worker"], str(e["inc"])))
        elif t in ("evicted", "left", "kicked", "replaced"):
            live.discard((e["worker"], str(e["inc"])))
        elif t == "close":
            b = dump["barriers"].get("%s:%s" % (e["frag"], e["round"]), {})
            parts = [p for p in b.get("participants", "").split(",") if p]
            nparts.append((e["t"], len(parts)))
            for p in parts:
                w, inc = p.rsplit(":", 1)
                if (w, inc) not in live:
                    bad.append("round %s counted %s, not a live incarnation when it closed" % (e["round"], p))
    check("stale", not bad, "; ".join(bad[:10]) or "%d closed rounds: every participant a live incarnation" % len(nparts))

    # rejoin
    faults = [e for e in chaos if e["event"] == "fault"]
    restarts = [e for e in chaos if e["event"] == "restart"]
    bad = []
    t_back, t_resume, t_commit, t_part = [], [], [], []
    t_part_kind = {"kill": [], "stop": []}  # kill: from the kill; stop: from the SIGCONT (not the stop's length)
    for f in faults:
        tf, w = f["t"], f["target"]
        if f["role"] == "worker":
            es = tele.get(w, [])
            s = next((e for e in es if e.get("event") == "sync" and e["t"] > tf), None)
            if not s:
                bad.append("%s %s at %.1f: never synced again" % (f["kind"], w, tf))
            else:
                t_back.append(s["t"] - tf)
            if f["kind"] == "kill":
                if not next((e for e in es if e.get("event") == "join" and e["t"] > tf), None):
                    bad.append("kill %s at %.1f: no join afterwards" % (w, tf))
        if f["kind"] == "kill" and not next((r for r in restarts if r["target"] == w and r["t"] > tf), None):
            bad.append("kill %s at %.1f: not restarted" % (w, tf))
        if f["role"] == "server" and f["kind"] == "kill" and w not in dump.get("servers", []):
            bad.append("server %s not registered at the end" % w)
        if f["role"] == "worker":  # until the worker is a participant of a closed round again
            pc = next((e for e in closes if e["t"] > tf and any(
                x.rsplit(":", 1)[0] == w for x in dump["barriers"].get("%s:%s" % (e["frag"], e["round"]), {}).get("participants", "").split(","))), None)
            if pc:
                t_part.append(pc["t"] - tf)
                if f["kind"] in t_part_kind:
                    t_part_kind[f["kind"]].append(pc["t"] - tf - f.get("seconds", 0))
        c = next((e for e in closes if e["t"] > tf), None)
        if c:
            t_resume.append(c["t"] - tf)
        m = next((e for e in ev if e.get("type") == "commit" and e["t"] > tf), None)
        if m:
            t_commit.append(m["t"] - tf)
    never = ["%s %s at %.1f" % (f["kind"], f["target"], f["t"]) for f in faults if f["role"] == "worker"
             and not next((e for e in closes if e["t"] > f["t"] and any(x.rsplit(":", 1)[0] == f["target"] for x in
                          dump["barriers"].get("%s:%s" % (e["frag"], e["round"]), {}).get("participants", "").split(","))), None)]
    check("participate", not never, ("faulted workers never a participant of a closed round again: %s" % "; ".join(never[:10]))
          if never else "every faulted worker was a participant of a closed round again")
    check("rejoin", not bad, "; ".join(bad[:10]) or "%d faults: every faulted worker synced again, every killed process restarted (%d restarts)" % (len(faults), len(restarts)))

    # loss
    firsts, lasts = [], []
    for w, es in tele.items():
        ls = [e["loss"] for e in es if e.get("event") == "step"]
        if len(ls) >= 6:
            firsts.append(statistics.mean(ls[:3]))
            lasts.append(statistics.mean(ls[-3:]))
    if firsts:
        l0, l1 = statistics.mean(firsts), statistics.mean(lasts)
        check("loss", l1 < l0, "mean worker loss %.5f at the start -> %.5f at the end" % (l0, l1))
    else:
        check("loss", False, "no step events")

    # the run's round (sampled each second from Redis) never goes back, even across Redis restarts
    rs = [(e["t"], e["round"]) for e in chaos if e["event"] == "sample" and e.get("round") is not None]
    back = [(round(t, 1), r, pr) for (pt, pr), (t, r) in zip(rs, rs[1:]) if r < pr]
    check("round", not back, ("round went back (t, round, previous): %s" % back[:5]) if back else
          "the open round sampled %d times, never went back (%s -> %s)" % (len(rs), rs[0][1] if rs else "-", rs[-1][1] if rs else "-"))

    settled = next((e for e in chaos if e["event"] in ("settled", "settle_timeout")), {"event": "none"})
    check("settled", settled["event"] == "settled", "after the storm: %s %s" % (settled["event"], json.dumps(settled.get("last", {}))))
    check("faults", len(faults) >= a.min_faults, "%d faults injected (at least %d wanted)" % (len(faults), a.min_faults))

    # figures
    sb = next((e for e in chaos if e["event"] == "storm_begin"), None)
    se = next((e for e in chaos if e["event"] == "storm_end"), None)
    fig = {"faults": len(faults), "rounds": nrounds, "commits": total_commits}
    kinds = {}
    for f in faults:
        kinds["%s:%s" % (f["kind"], f["role"])] = kinds.get("%s:%s" % (f["kind"], f["role"]), 0) + 1
    fig["faults_by_kind"] = kinds
    if sb and se:
        dur = se["t"] - sb["t"]
        inwin = [n for t, n in nparts if sb["t"] <= t <= se["t"]]
        fig["storm_seconds"] = round(dur, 2)
        fig["storm_rounds"] = len(inwin)
        fig["storm_participant_steps"] = sum(inwin) * (H or 0)
        fig["storm_participant_steps_per_s"] = round(sum(inwin) * (H or 0) / dur, 3) if dur > 0 else None
        fig["storm_mean_participants"] = round(statistics.mean(inwin), 3) if inwin else None
        samples = [e for e in chaos if e["event"] == "sample" and sb["t"] <= e["t"] <= se["t"]]
        if samples:
            fig["storm_mean_live_workers"] = round(statistics.mean(e["live_workers"] for e in samples), 3)
    fig["t_back_worker"] = {"n": len(t_back), "median": pct(t_back, 0.5), "p90": pct(t_back, 0.9), "max": pct(t_back, 1)}
    fig["t_back_participant"] = {"n": len(t_part), "median": pct(t_part, 0.5), "p90": pct(t_part, 0.9), "max": pct(t_part, 1)}
    fig["t_back_participant_by_kind"] = {k: {"n": len(v), "median": pct(v, 0.5), "p90": pct(v, 0.9), "max": pct(v, 1)}
                                         for k, v in t_part_kind.items()}
    fig["t_resume_next_close"] = {"n": len(t_resume), "median": pct(t_resume, 0.5), "p90": pct(t_resume, 0.9), "max": pct(t_resume, 1)}
    fig["t_next_commit"] = {"n": len(t_commit), "median": pct(t_commit, 0.5), "p90": pct(t_commit, 0.9), "max": pct(t_commit, 1)}
    fig["places_lost"] = places_lost(a.out)
    print("figures: " + json.dumps(fig))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"figures": fig, "checks": [{"name": n, "ok": o, "detail": d} for n, o, d in results]}, f, indent=1)
    failed = [n for n, o, _ in results if not o and n not in skip]
    if failed:
        print("AUDIT FAILED: " + ", ".join(failed))
        sys.exit(1)
    print("AUDIT OK")


if __name__ == "__main__":
    main()
