#!/bin/sh
# it_python_group_sharded.sh: rediloco.DiLoCo(..., process_group=..., sharded=True) on gloo, ranks forked by
# torch.multiprocessing, each rank holding only its torch.chunk of every parameter, exactly what fully_shard
# holds (tests/python/group_sharded.py: a model of 4 tensors, one with fewer rows than ranks; Debian's torch
# 1.13 cannot import FSDP itself on Python 3.11: tests/it_python_group_fsdp.sh runs the real one where it
# can). Runs made with rediloco.init_run(..., shards=1, fsdp_ranks=2). For bf16, and int3 with --download
# update and error feedback (fp32: tests/it_group_sharded.sh, in C): run A has the sharded group g1 of 2 ranks
# and the single PyTorch worker g2, run B the single workers g1 and g2. Both end on the same shard digests
# (the same parameter bytes), every sync of every rank and worker reports the same shards digest per
# version, each closed round of A has g1 and g2 as participants, and each round the group's ranks together
# send what one process sends, each its own chunks. The same two runs in Streaming (stream: fragments=2,
# which fsdp_ranks cuts where a tensor starts, fragment_update_alpha=0.5): the same digests, and the same
# (version, shards digest) pairs on every rank and worker. Then bad input: a group of 2 on a run cut for 3 ranks:
# the same DiLoCoError on both ranks, nothing registered.
. "$(dirname "$0")/lib.sh"
ROUNDS=3; H=6; PY=$PYTHON
start_redis
sharded_pairs bf16 int3 stream
$PY tests/python/group_sharded.py init "$URL" bad3 --ranks 3 --workers 1 > "$TMP/init-bad3.log" 2>&1 || fail "init bad3"
members=""
for mode in bf16 int3 stream; do
  f=$(sharded_flag $mode)
  members="$members --member A$mode:g1:2$f --member A$mode:g2:1$f --member B$mode:g1:1$f --member B$mode:g2:1$f"
done
$PY tests/python/group_sharded.py run "$URL" $((ROUNDS * H)) $H --out "$TMP" $members \
  --member bad3:gb:2 > "$TMP/launcher.log" 2>&1
exit_of() { cat "$TMP/$1.exit" 2>/dev/null || echo none; }

for mode in bf16 int3; do
  sharded_same $mode "a sharded group" $ROUNDS
  [ "$(wc -l < "$TMP/want-$mode.txt")" -eq $ROUNDS ] || fail "$mode: the reference synced $(cat "$TMP/want-$mode.txt")"
  for v in $(seq 0 $((ROUNDS - 1))); do
    p=$($RCLI HGET "dl:{A$mode}:f0:r$v" participants)
    case "$p" in g1:*,g2:*) ;; *) fail "$mode: round $v participants '$p' (want g1 and g2)";; esac
  done
  say "$mode: a sharded group of 2 ends bit-identical to a single PyTorch worker: $(tail -n 1 "$TMP/want-$mode.txt")"
done
# Streaming: fragment 0 is w1, fragment 1 the other three tensors (s has one row: rank 1 holds none of it)
[ "$($RCLI HGET "dl:{Astream}:config" frag_bounds)" = "0,2,7" ] || fail "stream: fragments $($RCLI HGET "dl:{Astream}:config" frag_bounds) (shards $($RCLI HGET "dl:{Astream}:config" shard_bounds))"
sharded_same stream "a sharded group in Streaming" $((2 * ROUNDS - 1))
say "stream: a sharded group of 2 in a Streaming run of 2 fragments ends bit-identical to a single PyTorch worker, the same shards digests at every sync"
# bytes (bf16): the two ranks' pushes add up to one process's each round; each rank sends only its chunks
numel=$($RCLI HGET "dl:{Abf16}:config" numel)
cat "$TMP/Abf16-g1.rank0" "$TMP/Abf16-g1.rank1" | awk -v n="$numel" '/^sync/ {up[$2] += $5; down[$2] += $6}
  END {for (v in up) {if (up[v] < 2 * n) bad = 1; if (up[v] == 2 * n && down[v] == 4 * n) exact++}; exit bad || !exact}' ||
  fail "the sharded ranks' bytes: $(grep -h '^sync' "$TMP"/Abf16-g1.rank*)"
r0=$(awk '/^sync/ {print $5; exit}' "$TMP/Abf16-g1.rank0"); r1=$(awk '/^sync/ {print $5; exit}' "$TMP/Abf16-g1.rank1")
[ "$r0" -lt $((2 * numel)) ] && [ "$r1" -lt $((2 * numel)) ] || fail "a rank sent the whole model: $r0, $r1 of $((2 * numel))"
say "bytes: the group's 2 ranks sent $r0 + $r1 = one process's $((2 * numel)) (bf16)"

# bad input: a run cut for 3 ranks joined by a group of 2 (its chunks are not whole shards): every rank says
# why, nothing registered
[ "$(exit_of bad3-gb)" = 1 ] || fail "a group of 2 on a run cut for 3: exit $(exit_of bad3-gb)"
for r in 0 1; do
  grep -q "^error cannot join run 'bad3'.*inside shard .*--fsdp-ranks 2" "$TMP/bad3-gb.rank$r" ||
    fail "rank $r did not say why: $(cat "$TMP/bad3-gb.rank$r")"
done
[ "$($RCLI HLEN "dl:{bad3}:workers")" = 0 ] && [ "$($RCLI HGET "dl:{bad3}:state" joins)" = 0 ] || fail "bad3: something registered"
say "a sharded group on a run not cut for its size: the same error on both ranks, nothing registered"
