#!/bin/sh
# it_quality_smoke.sh: bench/quality --smoke (a tiny GPT on the Bible: the data-parallel baseline and
# DiLoCo with 4 workers at H=10, and the same 4 trainers as 2 process groups of 2 ranks, data-parallel
# inside (group_worker --trainer gpt), through redis-server, shard-servers, workers and the evaluator) writes
# result.json, table.md and the two plots; the runs' validation losses are finite and fall, the ranks of
# a group hold the same parameters before every sync (and all ranks after it), and the
# table has the H=10 row with its signed gap to data-parallel. Then --merge: the two runs split into
# two folders (as configurations run side by side are) merge back into one result.json and table, the
# init seed recorded; a folder made with another data seed is refused. Then a straggler side by side
# (--side-by-side, _slowS, _idleK, async _dylu): model time, tokens per submission, the straggler table.
# The figures themselves come from the full benchmark (docs/quality.md), never from this test.
. "$(dirname "$0")/lib.sh"
prepare_bible
OUT=$TMP/quality
$PYTHON bench/quality --smoke --out "$OUT" > "$TMP/bench.log" 2>&1 || fail "bench/quality --smoke: $(tail -n 5 "$TMP/bench.log")"
for f in result.json table.md; do [ -s "$OUT/$f" ] || fail "no $f"; done
if command -v gnuplot >/dev/null 2>&1; then
  for f in loss_vs_tokens.png final_vs_h.png; do
    [ "$(head -c 4 "$OUT/$f" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "no plot $f"
  done
fi
python3 - "$OUT/result.json" <<'PY' || fail "result.json: $(cat "$OUT/result.json" | head -c 2000)"
import json, math, sys
r = json.load(open(sys.argv[1]))
runs = {x["name"]: x for x in r["runs"]}
assert set(runs) == {"dp", "h10", "h10_g2"}, runs.keys()
for n, x in runs.items():
    c = x["curve"]
    assert len(c) >= 2 and c[0]["version"] == 0 and c[-1]["version"] == x["final_version"], (n, c)
    assert all(math.isfinite(e["loss"]) for e in c), (n, c)
    assert c[-1]["loss"] < c[0]["loss"] - 0.5, (n, "did not fall", c[0]["loss"], c[-1]["loss"])
    assert c[-1]["tokens"] == x["tokens"] == 4 * 40 * 4 * 32, (n, x["tokens"])
assert runs["h10_g2"]["workers"] == 2 and runs["h10_g2"]["final_version"] == runs["h10"]["final_version"]
print("dp %.4f, h10 %.4f, h10_g2 %.4f" % (runs["dp"]["final_loss"], runs["h10"]["final_loss"], runs["h10_g2"]["final_loss"]))
PY
# the process groups trained data-parallel inside: before every sync both ranks of a group held the same
# parameters (their gradients averaged each step), the two groups (other data) not; after it all four the same.
# local_of: "version local-digest" of each sync line (the field after "local": the rank's parameters before it)
local_of() { awk '/^sync/ { for (i = 1; i < NF; i++) if ($i == "local") print $5, $(i + 1) }' "$@"; }
for g in 0 1; do
  local_of "$OUT/h10_g2/worker-$g.log" | sort -u | cut -d' ' -f1 | uniq -d > "$TMP/split.txt"
  [ ! -s "$TMP/split.txt" ] || fail "group g$g: its ranks trained apart before version(s) $(cat "$TMP/split.txt")"
  [ "$(grep -c '^sync' "$OUT/h10_g2/worker-$g.log")" -eq 8 ] || fail "group g$g: $(grep -c '^sync' "$OUT/h10_g2/worker-$g.log") syncs, want 2 ranks x 4"
done
local_of "$OUT"/h10_g2/worker-*.log | sort -u | cut -d' ' -f1 | uniq -d | grep -q . ||
  fail "the two groups trained the same parameters (the same data?)"
[ "$(cat "$OUT"/h10_g2/worker-*.log | awk '/^sync/ {print $5, $7}' | sort -u | wc -l)" -eq 4 ] ||
  fail "the four ranks do not hold one global version after each of the 4 syncs"
say "process groups of 2 (GPT, data-parallel inside): ranks agree before and after every sync"

grep -Eq '^\| 10 \| 0\.7 \| 0\.5 \| 0\.003 \| [0-9.]+ \| [+-][0-9.]+% \|' "$OUT/table.md" || fail "table: $(cat "$OUT/table.md")"
say "$(grep '^| 10 ' "$OUT/table.md")"
# --merge: each run in its own folder, merged into a third
python3 - "$OUT/result.json" "$TMP/a" "$TMP/b" "$TMP/other" <<'PY' || fail "cannot split result.json"
import json, os, sys
r = json.load(open(sys.argv[1]))
for d, names, seed in ((sys.argv[2], {"dp"}, 1), (sys.argv[3], {"h10"}, 1), (sys.argv[4], {"dp"}, 2)):
    os.makedirs(d)
    part = dict(r, runs=[x for x in r["runs"] if x["name"] in names], data=dict(r["data"], data_seed=seed))
    json.dump(part, open(os.path.join(d, "result.json"), "w"))
PY
$PYTHON bench/quality --smoke --out "$TMP/m" --merge "$TMP/a,$TMP/b" > "$TMP/merge.log" 2>&1 ||
  fail "bench/quality --merge: $(tail -n 5 "$TMP/merge.log")"
python3 - "$OUT/result.json" "$TMP/m/result.json" <<'PY' || fail "merged result.json: $(head -c 600 "$TMP/m/result.json")"
import json, sys
a, m = (json.load(open(p)) for p in sys.argv[1:])
assert m["seed"] == a["seed"] == 5, (m.get("seed"), a.get("seed"))
assert sorted(x["name"] for x in m["runs"]) == ["dp", "h10"], [x["name"] for x in m["runs"]]
assert {x["name"]: x["final_loss"] for x in m["runs"]} == {x["name"]: x["final_loss"] for x in a["runs"] if x["name"] != "h10_g2"}
PY
grep -Eq '^\| 10 \| 0\.7 \| 0\.5 \| 0\.003 \| [0-9.]+ \| [+-][0-9.]+% \|' "$TMP/m/table.md" || fail "merged table: $(cat "$TMP/m/table.md")"
$PYTHON bench/quality --smoke --out "$TMP/m" --merge "$TMP/other" > "$TMP/merge2.log" 2>&1 &&
  fail "a folder made with another data seed was merged"
grep -q "other data settings" "$TMP/merge2.log" || fail "no clear refusal: $(tail -n 2 "$TMP/merge2.log")"
say "merged: $(grep '^| 10 ' "$TMP/m/table.md")"

# a straggler, side by side (--side-by-side, _slow2, _idle2, async _dylu _eqtime): sync's curve has the load-free
# model time (4 rounds x H 10 x 2 = 80 units at the end), the async run counts the tokens its workers sent
# (their sync events' steps: DyLU's submissions are of any size) and has a time per version; table.md has the
# straggler table
A=h10_lr0.7_m0.5_async_dn4_dylu_slow2_eqtime_idle2
$PYTHON bench/quality --smoke --side-by-side --out "$TMP/s" --only h10_lr0.7_m0.5_slow2_idle2,$A \
  > "$TMP/straggler.log" 2>&1 || fail "bench/quality --side-by-side: $(tail -n 5 "$TMP/straggler.log")"
python3 - "$TMP/s" "$A" <<'PY' || fail "straggler result.json: $(head -c 1500 "$TMP/s/result.json")"
import json, os, sys
d, a = sys.argv[1], sys.argv[2]
r = {x["name"]: x for x in json.load(open(os.path.join(d, "result.json")))["runs"]}
s, a = r["h10_lr0.7_m0.5_slow2_idle2"], r[a]
assert s["curve"][-1]["model_units"] == 80 and s["tokens"] == 4 * 40 * 4 * 32, (s["curve"][-1], s["tokens"])
steps = 0
for i in range(4):
    ev = [json.loads(l) for l in open(os.path.join(d, a["name"], "w%d.jsonl" % i))]
    st = [e["step"] for e in ev if e.get("event") == "sync" and not e.get("stale")]
    steps += st[-1] if st else 0
assert a["tokens"] == steps * 4 * 32 and a["curve"][-1]["tokens"] == a["tokens"], (a["tokens"], steps)
assert a["curve"][-1]["version"] == a["final_version"] > 0, (a["curve"][-1], a["final_version"])
assert 0 < a["curve"][-1]["model_units"] <= 80, a["curve"][-1]
assert all("seconds" in e and "model_units" in e for e in a["curve"][1:]), a["curve"]
assert s["load_average"]["max"] > 0 and a["staleness"]["hist"], (s.get("load_average"), a.get("staleness"))
PY
grep -q "^Time to .h10_lr0.7_m0.5_slow2_idle2..s final loss" "$TMP/s/table.md" || fail "no straggler table: $(cat "$TMP/s/table.md")"
say "straggler side by side: $(grep "^| $A " "$TMP/s/table.md" | cut -c1-160)"
