#!/bin/sh
# tests/chaos/chaos.sh [chaos.py options]: run a chaos storm against a local ReDiLoCo run, then audit it.
#
# Starts Redis (--aof: appendonly, appendfsync always), N shard-servers and M workers (quadratic
# trainer by default, --trainer gpt optional), restarts whatever dies like systemd (same --worker-id,
# same server --id), injects kill -9 / SIGSTOP+SIGCONT / Redis kill -9 / network cuts (--netns-workers)
# on a fixed or Poisson schedule (seeded), logs every fault and restart to OUT/chaos.jsonl, prints a
# summary, then checks the invariants with tests/chaos/audit.py (exactly-once commits, identical
# digests per version, rejoin, loss, no stale pseudo-gradient applied). `--help` lists every knob;
# most also read CHAOS_* environment variables. CHAOS_PLOT=1 also draws the charts (tools/plot_run).
# Exit status: 0 ok, 1 audit failed, 3 the run did not settle after the storm (a hang), 2 usage.
# See docs/chaos.md.
cd "$(dirname "$0")/../.." || exit 2
[ -x bin/worker ] && [ -x bin/shard-server ] && [ -x bin/coordinator ] || { echo "build first: make all"; exit 2; }
command -v redis-server >/dev/null || { echo "redis-server not found (apt-get install redis-server)"; exit 2; }
out=${CHAOS_OUT:-run/chaos}
prev=""
for arg in "$@"; do
  case "$arg" in -h|--help) exec python3 tests/chaos/chaos.py --help;; --out=*) out=${arg#--out=};; esac
  [ "$prev" = "--out" ] && out=$arg
  prev=$arg
done
python3 tests/chaos/chaos.py --out "$out" "$@"
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 3 ] || exit $rc
[ -f "$out/redis_dump.json" ] || exit 1
python3 tests/chaos/audit.py "$out" --json "$out/audit.json" ${CHAOS_AUDIT_ARGS:-} || rc=1
if [ "${CHAOS_PLOT:-0}" = 1 ]; then tools/plot_run "$out" || echo "plot_run failed"; fi
exit $rc
