#!/bin/sh
# it_init_force_live.sh: shard-servers left running while their run is made again under its name
# (`coordinator init --force`) serve the new run, and workers left running stop with a clear error.
# They used to keep the old run's config and secret: with the same layout every new worker was refused
# ("AUTH worker ... does not know the run's secret"; the server logged thousands of rejections, the worker
# gave up after its sync timeout), and with another layout every shard they leased was marked CORRUPT (the
# snapshot's count is not the old shard size), which `coordinator repair` cleared and the servers marked
# again. init said they "carry on in the new run". Now a server's lease beat names the making of the run it
# loaded (the config's created_ms); dl_server_beat refuses a run made since with RECREATED before the server
# takes a lease of it, and the server starts again (shard-server/lease.c run_recreated, main.c start_again).
# A worker left running stayed in the old run's state: evicted by the new run, it registered into it and
# was refused by every server for its old secret until it gave up. Its heartbeats and registrations name the
# run it joined too, and RECREATED ends its session as a shutdown does; the worker exits 1 saying to start
# it again (DILOCO_STOP_RECREATED: a supervisor's restart joins the new run).
# Here: s0 and s1 serve a run of 2 shards while w0 trains. Part 1: init --force with the same layout; w0
# exits 1 with that message; both servers say they start again, keep their pids and lease the new run, and a
# new worker (new secret) ends its 30 steps with 3 rounds committed, no rejection recorded. Part 2: init
# --force with 3 shards of another size; the same, and no shard is marked corrupt. s1 has a fixed --listen and
# --metrics address, bound again each time it starts again.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=forced
start_redis
init_run $RUN --trainer quadratic --numel 8000 --shards 2 --workers 1
start_server s0 --lease-ttl-ms 1500
PORTS=$(free_ports 2); LPORT=${PORTS% *}; MPORT=${PORTS#* }
start_server s1 --lease-ttl-ms 1500 --listen 127.0.0.1:$LPORT --metrics 127.0.0.1:$MPORT # (bound again after the exec)
start_worker w0 --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
wait_until 20 '[ "$($RCLI HGET "dl:{$RUN}:shards" 1:version)" -ge 2 ] 2>/dev/null' "w0's first two rounds"
owned() { # N: every one of the run's N shards has an owner
  for k in $(seq 0 $(($1 - 1))); do [ -n "$($RCLI HGET "dl:{$RUN}:shards" "$k:owner")" ] || return 1; done
}
forced_again() { # PART ARGS...: init --force, then both servers start again and lease the new run's N shards
  part=$1; n=$2; shift 2
  before=$(grep -c "starting again to serve the new run" "$TMP/server-s0.log" "$TMP/server-s1.log" | awk -F: '{s += $2} END {print s}')
  bin/coordinator init --redis "$URL" --run $RUN --force --trainer quadratic --workers 1 --shards "$n" "$@" \
    > "$TMP/init-$part.log" 2>&1 || fail "init --force ($part): $(cat "$TMP/init-$part.log")"
  wait_until 20 '[ "$(grep -c "starting again to serve the new run" "$TMP/server-s0.log" "$TMP/server-s1.log" | awk -F: "{s += \$2} END {print s}")" -ge $((before + 2)) ]' \
    "both servers to start again for the new run ($part)"
  alive "$SRV_s0" && alive "$SRV_s1" || fail "a server exited instead of starting again ($part)"
  wait_until 20 "owned $n" "the new run's $n shards to be leased ($part)"
  # one server may lease every shard before the other's first beat registers it (CI saw HLEN 1 here)
  wait_until 20 '[ "$($RCLI HLEN "dl:{$RUN}:servers")" = 2 ]' \
    "both servers to register in the new run ($part)"
  $RCLI HGET "dl:{$RUN}:servers" s1 | grep -q "127.0.0.1:$LPORT" ||
    fail "s1 is not at its --listen address again: $($RCLI HGET "dl:{$RUN}:servers" s1)"
  curl -sf "http://127.0.0.1:$MPORT/metrics" > /dev/null || fail "s1's --metrics does not answer after it started again"
}
rejections() { n=$($RCLI HGET "dl:{$RUN}:state" rejections); echo "${n:-0}"; }
train_new() { # NAME N: a new worker ends 30 steps (3 rounds) on the new run of N shards, none of its requests
  # refused (w0's last tries with the old secret, before it stopped, are)
  before=$(rejections)
  start_worker "$1" --sync-every 10 --steps 30 --step-delay-ms 5 --heartbeat-interval 0.5 --sync-timeout 10
  wait_workers "$1"
  want=$(for _ in $(seq "$2"); do printf '3 '; done)
  [ "$(shard_versions $RUN) " = "$want" ] || fail "the new run's versions after $1: $(shard_versions $RUN)"
  [ "$(rejections)" = "$before" ] || fail "$(($(rejections) - before)) requests of $1 refused in the new run"
  for k in $(seq 0 $(($2 - 1))); do
    [ -z "$($RCLI HGET "dl:{$RUN}:shards" "$k:corrupt")" ] || fail "shard $k marked corrupt: $($RCLI HGET "dl:{$RUN}:shards" "$k:corrupt_reason")"
  done
}
forced_again same 2 --numel 8000
worker_exits_1 w0 "ERROR stopped after [0-9]* steps: run '$RUN' was made again under its name (coordinator init --force); start the worker again" \
  "its run was made again"
grep -q "RECREATED\|was made again (coordinator init --force)" "$TMP/server-s0.log" ||
  fail "s0 did not say why it started again: $(tail -n 3 "$TMP/server-s0.log")"
train_new w1 2
say "part 1 (same layout): w0 stopped (exit 1); both servers started again under their pids and served a new worker's 3 rounds"
forced_again other 3 --numel 6000
train_new w2 3
say "part 2 (3 shards of 2000): both servers started again; 3 rounds, no shard marked corrupt"
