#!/bin/sh
# it_shard_server_basic.sh: leases of the shard-server against a real redis-server.
#
# Starts redis-server on a free port, initialises a run of 2 shards by hand (FUNCTION LOAD + version-0
# snapshot blobs + dl_init, through the small C helper below), starts two shard-servers, checks that
# each holds one lease and serves it, kill -9s one and checks the other takes its shard (and loads it)
# after the lease ttl; then SIGTERM gives the leases back and exits 0.
#
# `sh tests/it_shard_server_basic.sh --helper OUT` only builds the helper (sstool) into OUT: the other
# it_shard_server_*.sh scripts use it as their data-plane client.
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

build_helper() {
  out=$1
  mkdir -p "$(dirname "$out")"
  sed -n '/^\/\* SSTOOL-BEGIN/,/^\/\* SSTOOL-END/p' "$ROOT/tests/it_shard_server_basic.sh" > "$out.c"
  cc -std=c11 -D_GNU_SOURCE -O1 -Wall -Icommon/net -Icommon/format -Icommon/math -Icommon/base -o "$out" "$out.c" build/libcommon.a \
     -lhiredis -lmsgpackc -lxxhash -lm || { echo "cannot build the test helper"; exit 1; }
}

if [ "${1:-}" = "--helper" ]; then build_helper "$2"; exit 0; fi

fail() { echo "FAIL: $*"; for f in "$TMP"/ss*.log; do echo "--- $f"; tail -n 30 "$f"; done; exit 1; }

[ -x bin/shard-server ] || make bin/shard-server >/dev/null || fail "cannot build bin/shard-server"
[ -f build/libcommon.a ] || make build/libcommon.a >/dev/null || fail "cannot build libcommon"
TMP=$(mktemp -d /tmp/it_ss_basic.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PIDS=""
cleanup() {
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

build_helper "$TMP/sstool"
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid" >/dev/null || fail "redis-server did not start"
for i in $(seq 50); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
R="redis-cli -p $PORT"
RUN=itbasic
$R FUNCTION LOAD REPLACE "$(cat build/diloco.lua)" >/dev/null || fail "FUNCTION LOAD"
"$TMP/sstool" init 127.0.0.1 "$PORT" "$RUN" 2 1000 4 >/dev/null || fail "init"

TTL=1500
start_server() { # id
  bin/shard-server --redis "redis://127.0.0.1:$PORT" --run "$RUN" --id "$1" --lease-ttl-ms $TTL \
    > "$TMP/ss$1.log" 2>&1 &
  PIDS="$PIDS $!"
  eval "PID_$1=$!"
}
owner() { $R HGET "dl:{$RUN}:shards" "$1:owner"; }
addr() { grep -o 'advertised as [0-9.:]*' "$TMP/ss$1.log" | awk '{print $3}'; }

start_server A
start_server B
# both hold one lease each (self-balancing: ceil(2/2) = 1)
ok=0
for i in $(seq 60); do
  o0=$(owner 0); o1=$(owner 1)
  if [ -n "$o0" ] && [ -n "$o1" ] && [ "$o0" != "$o1" ]; then ok=1; break; fi
  sleep 0.1
done
[ $ok = 1 ] || fail "leases not split: shard 0 '$(owner 0)', shard 1 '$(owner 1)'"
echo "leases: shard 0 -> $o0, shard 1 -> $o1"

# each serves its own shard and redirects for the other
eval "A0=\$(addr $o0)"
eval "A1=\$(addr $o1)"
out=$("$TMP/sstool" get "$A0" 0 0 w 1) || fail "get from $o0"
case "$out" in params\ 0\ *) ;; *) fail "get shard 0 from $o0: $out";; esac
d0=$($R HGET "dl:{$RUN}:shards" 0:digest)
case "$out" in *"$d0"*) ;; *) fail "digest of shard 0: $out, expected $d0";; esac
# (the redirect address comes from the owner map refreshed every beat: it may lag one beat)
ok=0
for i in $(seq 30); do
  out=$("$TMP/sstool" get "$A0" 1 0 w 1)
  [ "$out" = "moved -1 - - $A1" ] && { ok=1; break; }
  sleep 0.1
done
[ $ok = 1 ] || fail "shard 1 from $o0 should be moved to $A1: $out"

# kill -9 the owner of shard 1: the owner of shard 0 takes it after the ttl and loads it
eval "victim=\$PID_$o1"
kill -9 "$victim"
ok=0
for i in $(seq 80); do
  [ "$(owner 1)" = "$o0" ] && { ok=1; break; }
  sleep 0.1
done
[ $ok = 1 ] || fail "shard 1 not taken over by $o0 (owner '$(owner 1)')"
echo "shard 1 taken over by $o0"
ok=0
for i in $(seq 50); do
  out=$("$TMP/sstool" get "$A0" 1 0 w 1)
  case "$out" in params\ 0\ *) ok=1; break;; esac
  sleep 0.1
done
[ $ok = 1 ] || fail "shard 1 not served by $o0 after takeover: $out"

# kill -9 the server holding both shards and start it again at once with the same id: it takes its own
# leases back before they expire, but with new epochs (the promises of the old process died with it:
# workers holding parameters it sent but had not committed must see the lease change)
epoch() { $R HGET "dl:{$RUN}:shards" "$1:epoch"; }
e0=$(epoch 0); e1=$(epoch 1)
eval "victim=\$PID_$o0"
kill -9 "$victim"
wait "$victim" 2>/dev/null
start_server "$o0"
ok=0
for i in $(seq 50); do
  out=$("$TMP/sstool" get "$(addr $o0)" 0 0 w 1)
  case "$out" in params\ 0\ *) ok=1; break;; esac
  sleep 0.1
done
[ $ok = 1 ] || fail "$o0 restarted does not serve shard 0: $out"
[ "$(owner 0)" = "$o0" ] && [ "$(owner 1)" = "$o0" ] || fail "restarted $o0 should hold both: '$(owner 0)' '$(owner 1)'"
[ "$(epoch 0)" -gt "$e0" ] && [ "$(epoch 1)" -gt "$e1" ] ||
  fail "restarted with the same id, $o0 kept the old epochs: shard 0 $e0 -> $(epoch 0), shard 1 $e1 -> $(epoch 1)"
echo "restarted $o0 holds its shards again with new epochs (0: $e0 -> $(epoch 0), 1: $e1 -> $(epoch 1))"
# and a running server keeps its epochs (renewals do not bump them)
e0=$(epoch 0); sleep 1; [ "$(epoch 0)" = "$e0" ] || fail "a renewal changed the epoch of shard 0: $e0 -> $(epoch 0)"

# SIGTERM: leases given back, exit 0 within 2 s
eval "survivor=\$PID_$o0"
kill -TERM "$survivor"
for i in $(seq 20); do kill -0 "$survivor" 2>/dev/null || break; sleep 0.1; done
kill -0 "$survivor" 2>/dev/null && fail "shard-server still running 2 s after SIGTERM"
wait "$survivor"; rc=$?
[ $rc = 0 ] || fail "shard-server exited $rc after SIGTERM"
[ -z "$(owner 0)" ] && [ -z "$(owner 1)" ] || fail "leases not given back: '$(owner 0)' '$(owner 1)'"
echo "PASS"
exit 0

/* SSTOOL-BEGIN: the test helper (C), extracted and compiled by build_helper above.
 *   sstool init URL RUN NSHARDS NUMEL [snapshot_every]   write v0 snapshots (theta_i = 0.001*i) and call dl_init
 *   sstool push ADDR RUN SHARD ROUND WORKER INC N f32|bf16 VALUE [nan|badsum|short|big]
 *   sstool get ADDR RUN SHARD VERSION WORKER INC        prints: op version digest code text
 *   sstool digest N VALUE-START                          (unused) */
#include <inttypes.h>
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include "bf16.h"
#include "blob.h"
#include "frame.h"
#include "outer.h"

static int die(const char *m) { fprintf(stderr, "sstool: %s\n", m); return 1; }


static int init_run(const char *host, int port, const char *run, int S, long long N, const char *snap_every) {
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) return die("connect");
    char bounds[4096] = "", fb[64], key[256];
    float *x = malloc(N * sizeof(float));
    for (long long i = 0; i < N; i++) x[i] = 0.001f * (float)(i % 1000);
    char (*dig)[17] = calloc(S, 17);
    for (int k = 0; k <= S; k++) {
        long long b = N * k / S;
        snprintf(bounds + strlen(bounds), sizeof bounds - strlen(bounds), "%s%lld", k ? "," : "", b);
        if (k == S) break;
        long long e = N * (k + 1) / S, n = e - b;
        blob_header h; blob_header_init(&h, "snap");
        h.shard = k; h.version = 0; h.epoch = 0; h.dtype = BLOB_F32; h.count = n;
        uint8_t *out; size_t len; char err[256];
        if (blob_encode(&h, x + b, n * 4, &out, &len, err, sizeof err)) return die(err);
        snprintf(key, sizeof key, "dl:{%s:%d}:snap:0:0", run, k);
        redisReply *r = redisCommand(c, "SET %s %b", key, out, len);
        freeReplyObject(r); free(out);
        snprintf(dig[k], 17, "%016" PRIx64, digest_f32(x + b, n));
    }
    snprintf(fb, sizeof fb, "0,%d", S);
    char cfg[256], nums[32], ss[16];
    snprintf(cfg, sizeof cfg, "dl:{%s}:config", run);
    snprintf(nums, sizeof nums, "%lld", N); snprintf(ss, sizeof ss, "%d", S);
    const char *argv[64]; int a = 0;
    argv[a++] = "FCALL"; argv[a++] = "dl_init"; argv[a++] = "1"; argv[a++] = cfg;
    argv[a++] = "7";
    argv[a++] = "numel"; argv[a++] = nums; argv[a++] = "shards"; argv[a++] = ss;
    argv[a++] = "fragments"; argv[a++] = "1"; argv[a++] = "shard_bounds"; argv[a++] = bounds;
    argv[a++] = "frag_bounds"; argv[a++] = fb; argv[a++] = "mode"; argv[a++] = "sync";
    argv[a++] = "snapshot_every"; argv[a++] = snap_every;
    argv[a++] = "7";
    argv[a++] = "target_workers"; argv[a++] = "2"; argv[a++] = "min_workers"; argv[a++] = "1";
    argv[a++] = "outer_lr"; argv[a++] = "0.7"; argv[a++] = "outer_momentum"; argv[a++] = "0.9";
    argv[a++] = "nesterov"; argv[a++] = "1"; argv[a++] = "heartbeat_timeout_ms"; argv[a++] = "600000";
    argv[a++] = "lease_ttl_ms"; argv[a++] = "2000";
    argv[a++] = ss;
    for (int k = 0; k < S; k++) argv[a++] = dig[k];
    redisReply *r = redisCommandArgv(c, a, argv, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) { fprintf(stderr, "dl_init: %s\n", r ? r->str : c->errstr); return 1; }
    printf("init ok\n");
    return 0;
}

static int roundtrip(const char *addr, blob_header *h, const void *payload, size_t len) {
    char err[256];
    int fd = tcp_connect(addr, 3000, err, sizeof err);
    if (fd < 0) return die(err);
    if (frame_send(fd, h, payload, len, 5000, err, sizeof err) < 0) return die(err);
    size_t cap = 64u << 20;
    uint8_t *buf = malloc(cap);
    const uint8_t *p; size_t plen;
    blob_header r;
    if (frame_recv(fd, buf, cap, &r, &p, &plen, 30000, err, sizeof err) < 0) { printf("recv-failed %s\n", err); return 0; }
    char dig[17] = "-";
    if (strcmp(r.op, "params") == 0) snprintf(dig, 17, "%016" PRIx64, digest_f32((const float *)p, plen / 4));
    printf("%s %lld %s %s %s\n", r.op, (long long)r.version, dig, r.code[0] ? r.code : "-", r.text[0] ? r.text : "-");
    close(fd);
    return 0;
}

/* Frames frame_send would never produce: a corrupted payload, an impossible length prefix. */
static int rawpush(const char *addr, blob_header *h, void *payload, size_t len, const char *mode) {
    char err[256];
    uint8_t hdr[BLOB_HEADER_MAX];
    int fd = tcp_connect(addr, 3000, err, sizeof err);
    if (fd < 0) return die(err);
    int hl = blob_encode_header(h, payload, len, hdr, sizeof hdr, err, sizeof err);
    if (hl < 0) return die(err);
    ((uint8_t *)payload)[len / 2] ^= 0x40;
    uint32_t L = !strcmp(mode, "oversize") ? 0x7ffffff0u : (uint32_t)(hl + len);
    uint8_t pre[4] = { (uint8_t)L, (uint8_t)(L >> 8), (uint8_t)(L >> 16), (uint8_t)(L >> 24) };
    if (write(fd, pre, 4) != 4 || write(fd, hdr, hl) != hl) return die("write");
    if (strcmp(mode, "oversize") != 0 && write(fd, payload, len) != (ssize_t)len) return die("write");
    uint8_t buf[4096]; const uint8_t *p; size_t plen; blob_header r;
    if (frame_recv(fd, buf, sizeof buf, &r, &p, &plen, 10000, err, sizeof err) < 0) { printf("recv-failed %s\n", err); return 0; }
    printf("%s %lld - %s %s\n", r.op, (long long)r.version, r.code[0] ? r.code : "-", r.text[0] ? r.text : "-");
    if (!strcmp(mode, "oversize")) { /* the server must close the connection */
        /* closed with our unread bytes in its buffer, the server's kernel may reset the connection:
         * a reset is as closed as an orderly end of stream */
        ssize_t n = read(fd, buf, 1);
        printf("closed %s\n", n == 0 || (n < 0 && errno == ECONNRESET) ? "yes" : "no");
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return die("usage");
    if (!strcmp(argv[1], "init") && argc >= 7)
        return init_run(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), atoll(argv[6]), argc > 7 ? argv[7] : "8");
    if (!strcmp(argv[1], "push") && argc >= 10) {
        /* push ADDR SHARD ROUND WORKER INC N DTYPE VALUE [mode] */
        blob_header h; blob_header_init(&h, "push");
        h.shard = atoi(argv[3]); h.round = atoll(argv[4]);
        snprintf(h.worker, sizeof h.worker, "%s", argv[5]); h.inc = atoll(argv[6]);
        long long n = atoll(argv[7]); int bf = !strcmp(argv[8], "bf16"); float v = strtof(argv[9], NULL);
        const char *mode = argc > 10 ? argv[10] : "";
        h.dtype = bf ? BLOB_BF16 : BLOB_F32; h.count = n; h.frag = 0;
        float *x = malloc(n * 4 + 8); for (long long i = 0; i < n; i++) x[i] = v * (float)(1 + i % 7);
        if (!strcmp(mode, "nan")) x[n / 2] = NAN;
        void *payload = x; size_t len = n * 4;
        uint16_t *b = NULL;
        if (bf) { b = malloc(n * 2 + 4); bf16_encode(x, b, n); payload = b; len = n * 2; }
        if (!strcmp(mode, "short")) { h.count = n - 1; len -= bf ? 2 : 4; }
        if (!strcmp(mode, "badsum") || !strcmp(mode, "oversize")) return rawpush(argv[2], &h, payload, len, mode);
        return roundtrip(argv[2], &h, payload, len);
    }
    if (!strcmp(argv[1], "get") && argc >= 7) {
        blob_header h; blob_header_init(&h, "get");
        h.shard = atoi(argv[3]); h.version = atoll(argv[4]);
        snprintf(h.worker, sizeof h.worker, "%s", argv[5]); h.inc = atoll(argv[6]);
        return roundtrip(argv[2], &h, NULL, 0);
    }
    if (!strcmp(argv[1], "hello") && argc >= 4) {
        blob_header h; blob_header_init(&h, "hello");
        snprintf(h.worker, sizeof h.worker, "t"); snprintf(h.text, sizeof h.text, "%s", argv[3]);
        return roundtrip(argv[2], &h, NULL, 0);
    }
    return die("bad command");
}
/* SSTOOL-END */
