#!/bin/sh
# it_python_doc_example.sh: the complete example of docs/python.md, extracted as it is written (only the
# Redis URL replaced), runs: `train.py init` creates the run, `train.py 0` and `train.py 1` train it
# together. The two workers see different batches (seeded by worker: their losses before the first sync
# differ) and, as the doc says, print the same digest after each sync.
# The API headings of docs/python.md give each function's arguments and defaults as the package has them.
. "$(dirname "$0")/lib.sh"
start_redis
awk '/^## A complete example/ {on = 1} on && /^```python$/ {code = 1; next} code && /^```$/ {exit} code {print}' \
  docs/python.md | sed "s|redis://127.0.0.1:6390|$URL|" > "$TMP/train.py"
grep -q "rediloco.DiLoCo" "$TMP/train.py" || fail "no example found in docs/python.md"
export PYTHONPATH="$ROOT/python"
(cd "$TMP" && $PYTHON train.py init) > "$TMP/init.txt" 2>&1 || fail "train.py init: $(cat "$TMP/init.txt")"
RUN=r1 start_server s1
for w in 0 1; do
  (cd "$TMP" && $PYTHON train.py $w) > "$TMP/w$w.txt" 2>&1 &
  eval "P$w=\$!"
done
wait $P0 || fail "worker 0: $(tail -n 5 "$TMP/w0.txt")"
wait $P1 || fail "worker 1: $(tail -n 5 "$TMP/w1.txt")"
grep '^step' "$TMP/w0.txt" | sed 's/ loss [^ ]*//' > "$TMP/d0.txt"
grep '^step' "$TMP/w1.txt" | sed 's/ loss [^ ]*//' > "$TMP/d1.txt"
[ "$(wc -l < "$TMP/d0.txt")" -eq 10 ] || fail "worker 0 printed $(wc -l < "$TMP/d0.txt") sync lines, want 10"
diff "$TMP/d0.txt" "$TMP/d1.txt" > /dev/null || fail "the workers' digests differ: $(paste "$TMP/d0.txt" "$TMP/d1.txt" | head -n 3)"
l0=$(grep '^step 100 ' "$TMP/w0.txt"); l1=$(grep '^step 100 ' "$TMP/w1.txt")
[ "$l0" != "$l1" ] || fail "both workers trained on the same batches (same loss at step 100: $l0)"
cmd=$(sed -n 's/^# train.py: `python3 train.py init` once, then `python3 train.py \([^`]*\)` and `python3 train.py \([^`]*\)`.*/\1 \2/p' "$TMP/train.py")
[ "$cmd" = "0 1" ] || fail "the example's first line does not say how to start the two workers: $(head -n 1 "$TMP/train.py")"
say "doc example: 10 syncs, same digests on both workers; different batches ($l0 | $l1)"

# the API headings of docs/python.md (### `rediloco.NAME(ARGS)`) give each function's arguments, in order
# and with their defaults, as the package has them (DiLoCo's error_feedback was once missing)
$PYTHON - > "$TMP/api.txt" 2>&1 <<'PY' || fail "docs/python.md's API headings and the package differ: $(cat "$TMP/api.txt")"
import inspect, re, sys
import rediloco
doc = open("docs/python.md", encoding="utf-8").read()
bad, n = [], 0
for heading in re.findall(r"^### (.*)$", doc, re.M):
    for name, args in re.findall(r"`rediloco\.([A-Za-z_]+)\(([^`]*)\)`", heading):
        n += 1
        sig = inspect.signature(getattr(rediloco, name))
        want = [p.name if p.default is inspect.Parameter.empty else "%s=%r" % (p.name, p.default)
                for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        got = [a.strip() for a in args.split(",") if a.strip() and not a.strip().startswith("**")]
        if got != want:
            bad.append("rediloco.%s: docs (%s), package (%s)" % (name, ", ".join(got), ", ".join(want)))
if bad or n < 5:
    sys.exit("\n".join(bad) or "only %d API headings found" % n)
print("%d API headings of docs/python.md match the package's signatures" % n)
PY
say "$(cat "$TMP/api.txt")"
