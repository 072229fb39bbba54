#!/bin/sh
# it_chaos_stream_storm.sh: it_chaos_storm.sh's fault storm (workers, the group, shard-servers and the
# coordinator killed and stopped, restarted by the supervisor) on a Streaming run of 3 fragments of 2 shards,
# for 50 s: the same invariants (tests/chaos/audit.py, which numbers versions per fragment and compares the
# digests of the rounds every worker took in step). Streaming's rounds are on threads while training goes on,
# and a worker that registers again fetches every fragment: paths the plain storm does not take.
# test: light (it waits more than it computes)
STORM_FRAGMENTS=3 STORM_SECONDS=${STORM_SECONDS:-50} exec sh "$(dirname "$0")/it_chaos_storm.sh"
