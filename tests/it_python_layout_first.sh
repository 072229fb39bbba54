#!/bin/sh
# it_python_layout_first.sh: a PyTorch model whose tensors are not the run's is refused before anything is
# written anywhere (tests/python/layout_first.py): one tensor of another shape (same parameter count), the
# same tensors renamed, one parameter too many. Each gets a DiLoCoError naming the tensor; the model's
# tensors are bit-unchanged (and still their own storage); Redis saw no registration (joins,
# incarnations, workers and the event stream as before). Then a model of the run's layout joins, which
# moves those counters: the check above could fail.
. "$(dirname "$0")/lib.sh"
RUN=pylay
PY="$PYTHON tests/python/layout_first.py"
start_redis
$PY init "$URL" $RUN > "$TMP/init.txt" 2>&1 || fail "init: $(cat "$TMP/init.txt")"
start_server s1
# (its leases write events: taken before the first bad model, or the event count moves under it; seen 3 Dec)
wait_until 10 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:owner)" = s1 ] && [ "$($RCLI HGET "dl:{$RUN}:shards" 1:owner)" = s1 ]' \
  "s1 to lease both shards"
state() { echo "joins=$($RCLI HGET "dl:{$RUN}:state" joins) incarnations=$($RCLI HGET "dl:{$RUN}:state" incarnations) workers=$($RCLI HLEN "dl:{$RUN}:workers") events=$($RCLI XLEN "dl:{$RUN}:events")"; }
before=$(state)
$PY bad "$URL" $RUN > "$TMP/bad.txt" 2>&1 || fail "bad models: $(cat "$TMP/bad.txt")"
grep '^ok' "$TMP/bad.txt" | cut -c1-240
[ "$(grep -c '^ok' "$TMP/bad.txt")" -eq 3 ] || fail "expected 3 ok lines: $(cat "$TMP/bad.txt")"
after=$(state)
[ "$after" = "$before" ] || fail "a refused model reached Redis: before $before, after $after; events: $($RCLI XRANGE "dl:{$RUN}:events" - + | grep -A1 '^type$' | grep -v '^type$\|^--$' | tr '\n' ' ')"
say "3 bad models refused, Redis unchanged: $after"
$PY good "$URL" $RUN > "$TMP/good.txt" 2>&1 || fail "good model: $(cat "$TMP/good.txt")"
grep '^ok' "$TMP/good.txt"
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" -eq 1 ] || fail "the good model's join was not counted: $(state)"
say "the run's own layout joins: $(state)"
