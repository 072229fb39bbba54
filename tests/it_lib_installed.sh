#!/bin/sh
# it_lib_installed.sh: libdiloco as a program outside the tree sees it, after `make install`.
#   1. `make install` with DESTDIR stages the header, the libraries (real file, soname and dev links)
#      and libdiloco.pc under DESTDIR/PREFIX, the .pc naming PREFIX; `make uninstall` removes them.
#   2. `make install PREFIX=$TMP/prefix`: from here on programs build with pkg-config only.
#   3. The usage example of the installed diloco.h, extracted as it is, builds with -Wall -Wextra
#      -Werror and syncs a quadratic run 3 times; built again against libdiloco.a (no libdiloco.so
#      needed at run time) it syncs 3 more.
#   4. A program that trains the quadratic problem itself (the math of worker/trainers/quadratic.c,
#      written from outside) runs two sessions, w2 and w3, on two threads next to a bin/worker w1,
#      over a unix socket to Redis: the run ends bit-identical to tests/tools/ref_quadratic and every
#      worker's last digest is the reference's. On the way: the strings handed to diloco_open are wiped
#      right after it; SIGPIPE keeps its default action (death) while the test kills the program's Redis
#      connections mid-run; each session's log_callback gets that session's messages and nothing of the
#      library reaches the program's stderr.
#   5. diloco_request_stop from another thread ends a sync waiting at a barrier nobody else will reach
#      (the wait would last the 120 s sync timeout) within seconds, with an error saying so; a worker id
#      longer than a session keeps is refused by diloco_open with a message that says so.
. "$(dirname "$0")/lib.sh"
MAKE=${MAKE:-make}
command -v pkg-config > /dev/null || fail "pkg-config is missing (make deps)"

# ---- 1. DESTDIR staging and uninstall
stage=$TMP/stage
$MAKE -s install PREFIX=/opt/dl DESTDIR="$stage" > "$TMP/install-stage.log" 2>&1 || fail "make install DESTDIR: $(tail -n 5 "$TMP/install-stage.log")"
abi=$(sed -n 's/^#define DILOCO_ABI_VERSION \([0-9]*\).*/\1/p' worker/diloco.h)
version=$(sed -n 's/^#define DILOCO_VERSION_STRING "\(.*\)"/\1/p' worker/diloco.h)
for f in include/diloco.h lib/libdiloco.so.$version lib/libdiloco.a lib/pkgconfig/libdiloco.pc; do
  [ -f "$stage/opt/dl/$f" ] || fail "make install DESTDIR did not stage opt/dl/$f"
done
[ "$(readlink "$stage/opt/dl/lib/libdiloco.so.$abi")" = "libdiloco.so.$version" ] || fail "soname link"
[ "$(readlink "$stage/opt/dl/lib/libdiloco.so")" = "libdiloco.so.$abi" ] || fail "dev link"
grep -qx 'prefix=/opt/dl' "$stage/opt/dl/lib/pkgconfig/libdiloco.pc" || fail "the staged .pc does not say prefix=/opt/dl"
$MAKE -s uninstall PREFIX=/opt/dl DESTDIR="$stage" > /dev/null 2>&1 || fail "make uninstall"
left=$(find "$stage" ! -type d | head -n 3)
[ -z "$left" ] || fail "make uninstall left $left"

# ---- 2. the real install
P=$TMP/prefix
$MAKE -s install PREFIX="$P" > "$TMP/install.log" 2>&1 || fail "make install: $(tail -n 5 "$TMP/install.log")"
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
[ "$(pkg-config --modversion libdiloco)" = "$version" ] || fail "pkg-config --modversion: $(pkg-config --modversion libdiloco 2>&1)"
CFLAGS_LIB=$(pkg-config --cflags libdiloco)
LIBS_LIB=$(pkg-config --libs libdiloco)
LIBS_STATIC=$(pkg-config --static --libs libdiloco | sed 's/-ldiloco/-l:libdiloco.a/')

start_redis --unixsocket "$TMP/redis.sock" --unixsocketperm 700
UNIX_URL="unix://$TMP/redis.sock"

# ---- 3. the header's example
sed -n '/^ \* ---- example\.c$/,/^ \* ----$/p' "$P/include/diloco.h" | sed '1d;$d' | sed -e 's/^ \*$//' -e 's/^ \* //' \
  > "$TMP/example.c"
[ "$(grep -c diloco_ "$TMP/example.c")" -ge 5 ] || fail "no example found in the installed diloco.h"
cc -std=c11 -Wall -Wextra -Werror -o "$TMP/example" "$TMP/example.c" $CFLAGS_LIB $LIBS_LIB 2> "$TMP/cc-example.log" \
  || fail "the example of diloco.h does not build: $(head -n 20 "$TMP/cc-example.log")"
cc -std=c11 -Wall -Wextra -Werror -o "$TMP/example-static" "$TMP/example.c" $CFLAGS_LIB $LIBS_STATIC \
  2> "$TMP/cc-example-static.log" || fail "the example does not build against libdiloco.a: $(head -n 20 "$TMP/cc-example-static.log")"
readelf -d "$TMP/example" | grep -q "NEEDED.*libdiloco\.so\.$abi" || fail "the example is not linked to libdiloco.so.$abi"
readelf -d "$TMP/example-static" | grep -q "NEEDED.*libdiloco" && fail "the static example still needs libdiloco.so"
RUN=ex
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1 --seed 1
start_server exs --lease-ttl-ms 2000
LD_LIBRARY_PATH="$P/lib" "$TMP/example" "$URL" $RUN 1000 30 > "$TMP/example.out" 2> "$TMP/example.log" \
  || fail "the example exited with $?: $(tail -n 5 "$TMP/example.log")"
grep -q 'at version 3$' "$TMP/example.out" || fail "example: $(cat "$TMP/example.out")"
"$TMP/example-static" "$URL" $RUN 1000 30 > "$TMP/example-static.out" 2> "$TMP/example-static.log" \
  || fail "the static example exited with $?: $(tail -n 5 "$TMP/example-static.log")"
grep -q 'at version 6$' "$TMP/example-static.out" || fail "static example: $(cat "$TMP/example-static.out")"
[ "$(shard_versions $RUN)" = "6 6" ] || fail "run ex: shard versions $(shard_versions $RUN)"
say "the example of diloco.h: 3 syncs through libdiloco.so, 3 through libdiloco.a"

# ---- 4. two sessions of an outside program next to bin/worker, bit-identical to the reference
cat > "$TMP/quad2.c" <<'EOF'
/* quad2 URL RUN SEED NUMEL H STEPS OUTDIR ID...: one libdiloco session per ID, each on its own thread,
 * training worker/trainers/quadratic.c's problem with its inner AdamW (lr 0.01, betas 0.9/0.999, eps
 * 1e-8, no decay). Writes OUTDIR/ID.jsonl (a line per sync, with its digest) and OUTDIR/ID.cblog
 * (what the session's log callback got). SIGPIPE is left at its default: death. */
#define _POSIX_C_SOURCE 200809L
#include <diloco.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char *url, *run, *outdir;
static uint64_t seed;
static size_t numel;
static int sync_every, steps;

typedef struct session {
    const char *id;
    FILE *cblog, *jsonl;
    int ok;
} session;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(uint64_t *s) { return (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f); }

static void on_log(void *ctx, int level, const char *message) {
    session *s = ctx;
    fprintf(s->cblog, "%d %s\n", level, message);
    fflush(s->cblog);
}

/* a heap copy of s, for diloco_open; wiped and freed right after it */
static char *scratch(const char *s) { return strdup(s); }
static void wipe(char *s) { memset(s, 'X', strlen(s)); free(s); }

static void *train(void *p) {
    session *s = p;
    float *x = malloc(numel * sizeof *x), *a = malloc(numel * sizeof *a), *c = malloc(numel * sizeof *c);
    float *m = calloc(numel, sizeof *m), *v = calloc(numel, sizeof *v);
    if (!x || !a || !c || !m || !v) return NULL;
    uint64_t st = seed ^ XXH3_64bits(s->id, strlen(s->id));
    for (size_t i = 0; i < numel; i++) {
        a[i] = 0.5f + rng_uniform(&st);
        c[i] = 2.0f * rng_uniform(&st) - 1.0f;
    }
    char err[512], *u = scratch(url), *r = scratch(run), *id = scratch(s->id);
    diloco_options o;
    diloco_options_default(&o);
    o.redis_url = u;
    o.run = r;
    o.worker_id = id;
    o.sync_every = sync_every;
    o.heartbeat_interval_ms = 200;
    o.log_callback = on_log;
    o.log_ctx = s;
    diloco *d;
    int rc = diloco_open(&o, x, numel, &d, err, sizeof err);
    wipe(u);
    wipe(r);
    wipe(id);
    if (rc < 0) {
        fprintf(stderr, "%s: diloco_open: %s\n", s->id, err);
        return NULL;
    }
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.0f;
    for (int t = 1; t <= steps; t++) {
        float bc1 = (float)(1.0 - pow(b1, (double)t)), bc2 = (float)(1.0 - pow(b2, (double)t));
        double loss = 0;
        for (size_t i = 0; i < numel; i++) {
            float diff = x[i] - c[i];
            float g = a[i] * diff;
            loss += 0.5 * (double)a[i] * (double)diff * (double)diff;
            x[i] -= lr * wd * x[i];
            m[i] = b1 * m[i] + (1.0f - b1) * g;
            v[i] = b2 * v[i] + (1.0f - b2) * g * g;
            float mhat = m[i] / bc1, vhat = v[i] / bc2;
            x[i] -= lr * mhat / (sqrtf(vhat) + eps);
        }
        diloco_report(d, loss / (double)numel, (uint64_t)t);
        int synced = diloco_after_step(d, err, sizeof err);
        if (synced < 0) {
            fprintf(stderr, "%s: sync failed: %s\n", s->id, err);
            diloco_close(d);
            return NULL;
        }
        diloco_sync_info info;
        if (synced && diloco_last_sync(d, &info) == 0)
            fprintf(s->jsonl, "{\"event\":\"sync\",\"step\":%d,\"version\":%" PRId64 ",\"digest\":\"%016" PRIx64 "\"}\n", t,
                    info.version, info.digest);
    }
    diloco_close(d);
    s->ok = 1;
    free(x), free(a), free(c), free(m), free(v);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 9) return 2;
    signal(SIGPIPE, SIG_DFL);
    url = argv[1], run = argv[2], seed = strtoull(argv[3], NULL, 10), numel = strtoull(argv[4], NULL, 10);
    sync_every = atoi(argv[5]), steps = atoi(argv[6]), outdir = argv[7];
    int n = argc - 8;
    session *s = calloc((size_t)n, sizeof *s);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    for (int i = 0; i < n; i++) {
        char path[4096];
        s[i].id = argv[8 + i];
        snprintf(path, sizeof path, "%s/%s.cblog", outdir, s[i].id);
        s[i].cblog = fopen(path, "w");
        snprintf(path, sizeof path, "%s/%s.jsonl", outdir, s[i].id);
        s[i].jsonl = fopen(path, "w");
        if (!s[i].cblog || !s[i].jsonl || pthread_create(&th[i], NULL, train, &s[i]) != 0) return 1;
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        fclose(s[i].cblog);
        fclose(s[i].jsonl);
        ok &= s[i].ok;
    }
    return ok ? 0 : 1;
}
EOF
cc -std=c11 -O2 -ffp-contract=off -Wall -Wextra -Werror -pthread -o "$TMP/quad2" "$TMP/quad2.c" $CFLAGS_LIB $LIBS_LIB \
  -lxxhash -lm 2> "$TMP/cc-quad2.log" || fail "quad2 does not build: $(head -n 20 "$TMP/cc-quad2.log")"

RUN=exact; NUMEL=20000; SEED=7; ROUNDS=6; H=10
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
# w1 is the slow one (30 ms a step), so the run lasts long enough to cut connections in the middle
start_worker w1 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.2 --step-delay-ms 30
LD_LIBRARY_PATH="$P/lib" "$TMP/quad2" "$UNIX_URL" $RUN $SEED $NUMEL $H $((ROUNDS * H)) "$TMP" w2 w3 \
  > "$TMP/quad2.out" 2> "$TMP/quad2.log" &
QUAD=$!
PIDS="$PIDS $QUAD"
wait_until 30 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 2 ] 2>/dev/null' "round 2 of run $RUN"
# every connection over the unix socket is quad2's: cut them all; its next write to one meets a closed
# socket (EPIPE, and SIGPIPE unless held off)
ids=$($RCLI client list | sed -n 's/^id=\([0-9]*\) addr=\/.*/\1/p')
kills=0
for id in $ids; do [ "$($RCLI client kill id "$id")" = 1 ] && kills=$((kills + 1)); done
[ "$kills" -ge 4 ] || fail "expected at least 4 connections of quad2 to kill (2 sessions x control + heartbeat), killed $kills"
wait $QUAD; rc=$?
[ $rc -eq 0 ] || fail "quad2 exited with status $rc$([ $rc -eq 141 ] && echo ' (SIGPIPE)'): $(tail -n 5 "$TMP/quad2.log")"
wait "$WRK_w1" || fail "worker w1 exited with status $?"
[ "$(shard_versions $RUN)" = "6 6 6 6 6 6 6 6" ] || fail "shard versions: $(shard_versions $RUN)"
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "2 sessions of the installed library + bin/worker: bit-identical to the reference after $ROUNDS rounds ($REF_DIGEST), $kills Redis connections cut on the way"

for w in w2 w3; do
  other=$([ $w = w2 ] && echo w3 || echo w2)
  grep -q "^1 registered as $w " "$TMP/$w.cblog" || fail "$w's log callback did not get its registration: $(head -n 3 "$TMP/$w.cblog")"
  grep -q "^1 worker $w joined run $RUN" "$TMP/$w.cblog" || fail "$w's log callback did not get its join line"
  grep -q "$other" "$TMP/$w.cblog" && fail "$w's log callback got $other's messages: $(grep "$other" "$TMP/$w.cblog" | head -n 2)"
done
[ -s "$TMP/quad2.log" ] && fail "the library wrote to quad2's stderr despite the log callbacks: $(head -n 5 "$TMP/quad2.log")"
say "each session's messages went to its own log callback ($(cat "$TMP/w2.cblog" "$TMP/w3.cblog" | wc -l) lines), none to stderr"

# ---- 5. diloco_request_stop
cat > "$TMP/stopper.c" <<'EOF'
/* stopper URL RUN NUMEL [WORKER_ID]: joins, asks for a sync at once (the run expects a second worker
 * that never comes) and has another thread call diloco_request_stop after 300 ms; prints how the sync
 * ended (or why diloco_open refused). */
#define _POSIX_C_SOURCE 200809L
#include <diloco.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *stop_later(void *d) {
    struct timespec t = {0, 300 * 1000 * 1000};
    nanosleep(&t, NULL);
    diloco_request_stop(d);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) return 2;
    size_t numel = strtoull(argv[3], NULL, 10);
    float *x = calloc(numel, sizeof *x);
    char err[512];
    diloco_options o;
    diloco_options_default(&o);
    o.redis_url = argv[1];
    o.run = argv[2];
    o.sync_every = 1;
    o.worker_id = argc == 5 ? argv[4] : NULL;
    diloco *d;
    if (!x || diloco_open(&o, x, numel, &d, err, sizeof err) < 0) {
        printf("diloco_open: %s\n", err);
        return 1;
    }
    pthread_t t;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_create(&t, NULL, stop_later, d);
    int rc = diloco_after_step(d, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    printf("rc %d after %.1f s: %s\n", rc, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
           rc < 0 ? err : "");
    diloco_close(d);
    return 0;
}
EOF
cc -std=c11 -Wall -Wextra -Werror -pthread -o "$TMP/stopper" "$TMP/stopper.c" $CFLAGS_LIB $LIBS_LIB 2> "$TMP/cc-stopper.log" \
  || fail "stopper does not build: $(head -n 20 "$TMP/cc-stopper.log")"
RUN=stop
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 2 --seed 1
start_server stops --lease-ttl-ms 2000
LD_LIBRARY_PATH="$P/lib" timeout 60 "$TMP/stopper" "$URL" $RUN 1000 > "$TMP/stopper.out" 2> "$TMP/stopper.log" \
  || fail "stopper exited with $?: $(tail -n 5 "$TMP/stopper.log")"
out=$(cat "$TMP/stopper.out")
case "$out" in
  "rc -1 after "[0-4].*"stop"*) ;;
  *) fail "diloco_request_stop did not end the waiting sync within 5 s: $out" ;;
esac
say "diloco_request_stop from another thread: $out"
long=$(printf 'w%.0s' $(seq 70))
LD_LIBRARY_PATH="$P/lib" "$TMP/stopper" "$URL" $RUN 1000 "$long" > "$TMP/stopper-long.out" 2>&1 \
  && fail "diloco_open took a 70-character worker id: $(cat "$TMP/stopper-long.out")"
grep -q "^diloco_open: worker id 'wwww.*' is 70 characters long: at most 63$" "$TMP/stopper-long.out" \
  || fail "a too long worker id: $(cat "$TMP/stopper-long.out")"
say "$(cat "$TMP/stopper-long.out")"
