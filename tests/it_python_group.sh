#!/bin/sh
# it_python_group.sh: rediloco.DiLoCo(..., process_group=...) with DDP on gloo, ranks started by
# torch.multiprocessing (tests/python/group_quad.py; fork here, all eight groups from one launcher, as
# importing torch in every launcher and rank takes long on a busy machine: START=spawn runs each group
# from its own launcher with spawn). Four runs at once: (1) two groups g1, g2 of 2
# ranks: the run's shard digests and every rank's digest after its last sync equal the in-process
# reference of two single workers g1, g2 (tests/tools/ref_quadratic; bf16, and in two more runs fp32, and
# int3 with --download update and error feedback; in the fp32 run g2's ranks sync through a host mirror of their
# parameters, REDILOCO_HOST_COPY=1, the path of a rank whose model is on a GPU; and a Streaming run of 2
# fragments, fragment alpha 0.5 and 2 in flight, g2 through the host mirror again, against the
# fragment-schedule reference; and an async run, against the replay of its order, tests/tools/ref_async), the two groups are each closed
# round's only participants, and in the last rounds a group's ranks together sent and received exactly
# one process's bytes (2 and 4 per parameter, bf16); (2) mixed: a group g1, a single PyTorch worker w2
# and a C worker w3 in one run: bit-identical to the reference of g1, w2, w3, and every member reports
# the same digest after every sync; (3) a group whose rank 1 has another model: the same DiLoCoError on
# both ranks, nothing registered.
. "$(dirname "$0")/lib.sh"
NUMEL=20000; SEED=13; ROUNDS=3; H=10
start_redis
init_run pgx --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
init_run pgmix --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
init_run pgf --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
init_run pgi --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED --compress int3 --download update
init_run pgs --trainer quadratic --numel $NUMEL --shards 8 --fragments 2 --workers 2 --seed $SEED
init_run pga --async --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED --dn-buffer-size 2
for RUN in pgx pgmix pgf pgi pgs pga; do start_server a$RUN --lease-ttl-ms 2000; start_server b$RUN --lease-ttl-ms 2000; done
group() { # RUN ID [FLAGS]: a launcher of its own (START=spawn)
  r=$1; id=$2; shift 2
  ($PYTHON tests/python/group_quad.py "$URL" $r $id $((ROUNDS * H)) $H --ranks 2 --numel $NUMEL --seed $SEED \
    --out "$TMP/$r-$id" --start-method spawn "$@" > "$TMP/py-$r-$id.log" 2>&1; echo $? > "$TMP/$r-$id.exit") &
  PIDS="$PIDS $!"; GROUPS_PIDS="$GROUPS_PIDS $!"
}
if [ "${START:-fork}" = spawn ]; then
  group pgx g1; group pgx g2; group pgmix g1; group pgx gbad --bad-model
  group pgf g1 --no-bf16; group pgf g2 --no-bf16 --host-copy; group pgi g1 --error-feedback; group pgi g2 --error-feedback
  group pgs g1 --fragment-alpha 0.5 --fragments-in-flight 2; group pgs g2 --fragment-alpha 0.5 --fragments-in-flight 2 --host-copy
  group pga g1; group pga g2 --host-copy
else # one launcher (one torch import) forks the ranks of all four groups
  $PYTHON tests/python/group_quad.py "$URL" pgx g1 $((ROUNDS * H)) $H --ranks 2 --numel $NUMEL --seed $SEED \
    --out "$TMP/pgx-g1" --start-method fork --also pgx:g2 --also pgmix:g1 --also pgx:gbad:bad \
    --also pgf:g1:fp32 --also pgf:g2:fp32:copy --also pgi:g1:ef --also pgi:g2:ef --also pgs:g1:alpha=0.5:flight=2 --also pgs:g2:alpha=0.5:flight=2:copy --also pga:g1 --also pga:g2:copy \
    > "$TMP/py-groups.log" 2>&1 &
  PIDS="$PIDS $!"; GROUPS_PIDS=$!
fi
$PYTHON tests/python/quad_worker.py "$URL" pgmix w2 $((ROUNDS * H)) $H --numel $NUMEL --seed $SEED \
  --digests "$TMP/pgmix-w2.digests" > "$TMP/py-pgmix-w2.log" 2>&1 &
PW2=$!; PIDS="$PIDS $!"
RUN=pgmix start_worker w3 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1
for pid in $GROUPS_PIDS; do wait "$pid"; done
exit_of() { cat "$TMP/$1.exit" 2>/dev/null || echo "none"; } # GROUP: its launcher's exit status (per group)
for p in pgx-g1 pgx-g2 pgmix-g1 pgf-g1 pgf-g2 pgi-g1 pgi-g2 pgs-g1 pgs-g2 pga-g1 pga-g2; do [ "$(exit_of $p)" = 0 ] || fail "group $p failed: $(cat "$TMP"/py-*.log | tail -n 20)"; done
wait "$PW2" || fail "PyTorch worker w2 exited with status $?"
RUN=pgmix; wait_workers w3

check_ref() { quad_ref "$1" "$2" --rounds $ROUNDS ${3:-}; } # RUN WORKERS [REF FLAGS] -> REF
[ "$(exit_of pgx-gbad)" = 1 ] || fail "a group whose ranks have different models: exit status $(exit_of pgx-gbad), want 1"
for r in 0 1; do
  grep -q "^error the ranks of the process group disagree on model tensors (entry 0): rank 0 has \['x', \[$NUMEL\]\], rank 1 \['y', \[$NUMEL\]\]" "$TMP/pgx-gbad.rank$r" ||
    fail "rank $r of gbad did not say the models differ: $(cat "$TMP/pgx-gbad.rank$r")"
done
$RCLI XRANGE "dl:{pgx}:events" - + | grep -q gbad && fail "the group with different models left a trace in the run"
say "ranks with different models: the same error on both, nothing registered"
check_ref pgx g1,g2
for g in g1 g2; do
  for r in 0 1; do
    f="$TMP/pgx-$g.rank$r"
    [ "$(grep -c '^sync' "$f")" -eq $ROUNDS ] || fail "$g rank $r reported $(grep -c '^sync' "$f") syncs: $(cat "$f")"
    [ "$(grep '^sync' "$f" | tail -n 1 | cut -d' ' -f3)" = "$REF" ] || fail "$g rank $r does not end at $REF: $(cat "$f")"
  done
  cat "$TMP/pgx-$g.rank0" "$TMP/pgx-$g.rank1" | awk -v n=$NUMEL -v last=$ROUNDS '/^sync/ {up[$2] += $4; down[$2] += $5}
    END {for (v in up) if (v >= last - 1 && (up[v] != 2 * n || down[v] != 4 * n)) {print "version " v ": up " up[v] " down " down[v]; bad = 1}
         exit bad}' > "$TMP/bytes.txt" || fail "$g bytes: $(cat "$TMP/bytes.txt")"
done
for r in $(seq 0 $((ROUNDS - 1))); do
  p=$($RCLI HGET "dl:{pgx}:f0:r$r" participants)
  case "$p" in g1:*,g2:*) ;; *) fail "pgx round $r participants '$p' (want the two groups)";; esac
done
say "2 PyTorch groups of 2 ranks (DDP, gloo) bit-identical to 2 single workers: $REF; one process's bytes per round"
# fp32, and int3 with --download update and error feedback: the same, each against its reference
for mode in "pgf --no-bf16" "pgi --codec int3 --error-feedback --download update"; do
  run=${mode%% *}; check_ref $run g1,g2 "${mode#* }"
  for g in g1 g2; do
    for r in 0 1; do
      [ "$(grep '^sync' "$TMP/$run-$g.rank$r" | tail -n 1 | cut -d' ' -f3)" = "$REF" ] || fail "$run: $g rank $r does not end at $REF"
    done
  done
  say "$run (${mode#* }): 2 PyTorch groups of 2 ranks bit-identical to 2 single workers: $REF"
done
# pgf's g2 synced through a host mirror of its parameters (REDILOCO_HOST_COPY=1), as a rank whose model is on a
# GPU does: copied to the mirror before each sync, back after it, the group's exchange included
for r in 0 1; do
  [ "$(grep '^path' "$TMP/pgf-g2.rank$r")" = "path pinned host copy" ] || fail "pgf g2 rank $r: $(grep '^path' "$TMP/pgf-g2.rank$r")"
  [ "$(grep '^path' "$TMP/pgf-g1.rank$r")" = "path cpu" ] || fail "pgf g1 rank $r: $(grep '^path' "$TMP/pgf-g1.rank$r")"
done
say "pgf: g2's ranks synced through a host mirror (the path of a model on a GPU), g1's in place: the same digests"
# Streaming (2 fragments of 4 shards, a fragment every 5 steps, alpha 0.5, 2 in flight): each rank moves a part of
# every fragment, and a fragment's round made at one boundary is applied two boundaries later, mixed half and half
# with the ranks' own values, as a single worker applies its fragments in flight; g2 through the host mirror
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,g2 --sync-every $H --steps $((ROUNDS * H)) \
  --alpha 0.5 --in-flight 2 --bounds "$($RCLI HGET "dl:{pgs}:config" shard_bounds)" --frag-bounds "$($RCLI HGET "dl:{pgs}:config" frag_bounds)" \
  > "$TMP/ref-pgs.txt" || fail "Streaming reference"
shard_digests pgs > "$TMP/got-pgs.txt"
grep '^shard' "$TMP/ref-pgs.txt" | diff - "$TMP/got-pgs.txt" > "$TMP/diff.txt" \
  || fail "pgs: shard digests differ from the fragment-schedule reference of two single workers: $(cat "$TMP/diff.txt")"
for r in 0 1; do
  [ "$(grep '^path' "$TMP/pgs-g2.rank$r")" = "path pinned host copy" ] || fail "pgs g2 rank $r: $(grep '^path' "$TMP/pgs-g2.rank$r")"
done
say "pgs (Streaming, 2 fragments, alpha 0.5, 2 in flight, g2 through the host mirror): 2 PyTorch groups of 2 ranks bit-identical to 2 single workers ($(shard_versions pgs) versions)"
# async (Delayed Nesterov 2): each group's rank 0 places the group's submission, every rank delivers its part;
# the run is the replay of the order Redis recorded, each group one worker (tests/tools/ref_async); g2 through the
# host mirror
ref_async_check pga $H "(2 PyTorch groups of 2 ranks, g2 through the host mirror)" --sync-every 20
for r in 0 1; do
  [ "$(grep '^path' "$TMP/pga-g2.rank$r")" = "path pinned host copy" ] || fail "pga g2 rank $r: $(grep '^path' "$TMP/pga-g2.rank$r")"
done

check_ref pgmix g1,w2,w3
{ grep -h '^sync' "$TMP/pgmix-g1.rank0" "$TMP/pgmix-g1.rank1" | awk '{print $2, $3}'
  awk '{print $1 + 1, $2}' "$TMP/pgmix-w2.digests"
  grep '"event":"sync"' "$TMP/w3.jsonl" | sed 's/.*"version":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/\1 \2/'; } |
  sort | uniq -c > "$TMP/vd.txt"
[ "$(awk '$1 != 4' "$TMP/vd.txt")" = "" ] || fail "mixed: the members disagree (count version digest): $(cat "$TMP/vd.txt")"
[ "$(wc -l < "$TMP/vd.txt")" -eq $ROUNDS ] || fail "mixed: $(wc -l < "$TMP/vd.txt") versions: $(cat "$TMP/vd.txt")"
say "mixed: a group of 2, a PyTorch worker and a C worker report the same digest after each of $ROUNDS syncs, bit-identical to the reference: $REF"
