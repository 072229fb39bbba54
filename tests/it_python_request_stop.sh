#!/bin/sh
# it_python_request_stop.sh: a stop that reaches libdiloco only through diloco_request_stop (from another
# thread; the host's own diloco_options.stop flag stays 0) ends a sync that is retrying a Redis that is gone
# (tests/python/request_stop.py). libdiloco's reconnects used to watch o.stop alone: the step waited until
# Redis came back (with fa2e273's libdiloco.so, REDILOCO_LIB=...: killed at the test's 30 s limit, its log
# "retrying until it answers"). Now they watch the session's whole stop (rconn_connect_watched,
# dl_stop_seen): the step ends 0.03-0.07 s after the call (3 runs).
. "$(dirname "$0")/lib.sh"
RUN=pyreqstop; NUMEL=2000; SEED=11
start_redis
REDIS_PID=$(cat "$TMP/redis.pid")
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 1 --seed $SEED
start_server s1
timeout -k 5 30 $PYTHON tests/python/request_stop.py "$URL" $RUN "$REDIS_PID" $NUMEL $SEED > "$TMP/rs.log" 2>&1 ||
  fail "request_stop.py (status $?): $(tail -n 8 "$TMP/rs.log")"
grep '^ok' "$TMP/rs.log" | cut -c1-240
grep -q '^ok' "$TMP/rs.log" || fail "no ok line: $(tail -n 8 "$TMP/rs.log")"
