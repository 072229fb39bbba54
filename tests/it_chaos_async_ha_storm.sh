#!/bin/sh
# it_chaos_async_ha_storm.sh: it_chaos_async_storm.sh's storm with Redis as a master, 2 replicas and 3
# Sentinels (tests/chaos/chaos.py --redis-ha, --min-replicas 1) whose master is killed -9 among the worker,
# shard-server and coordinator faults, for 40 s: the shards end bit-identical to the replay of the order
# the surviving Redis placed (a place or a registration that a failover could lose is made durable first:
# docs/PROTOCOL.md, "Durable means replicated").
# test: light (it waits more than it computes)
STORM_HA=1 STORM_SECONDS=${STORM_SECONDS:-40} exec sh "$(dirname "$0")/it_chaos_async_storm.sh"
