#!/bin/sh
# deploy/local/chaos.sh: try ReDiLoCo under a fault storm on this machine. Runs tests/chaos/chaos.sh
# (Redis, shard-servers, workers, a systemd-like supervisor and a seeded fault injector), audits the
# run and draws its charts into the output folder (run/chaos by default; needs gnuplot for the charts).
#
#   deploy/local/chaos.sh                                  6 workers, 3 servers, 60 s, a fault every 3 s
#   deploy/local/chaos.sh --duration 600 --workers 16 --schedule poisson --fault-every 10 --seed 5
#   deploy/local/chaos.sh --aof --faults kill:worker=3,stop:server=1,kill:redis=1
#   deploy/local/chaos.sh --netns-workers 2 --faults cut:worker=1,kill:worker=1   (root: network cuts)
#   deploy/local/chaos.sh --help                           every knob
# Ctrl-C stops everything and cleans up (processes, namespaces, veth pairs).
cd "$(dirname "$0")/../.." || exit 2
[ -x bin/worker ] || make all || exit 2
CHAOS_PLOT=${CHAOS_PLOT:-$(command -v gnuplot >/dev/null && echo 1 || echo 0)} exec sh tests/chaos/chaos.sh -v "$@"
