/* diloco.h: libdiloco, the C API a trainer embeds to take part in a ReDiLoCo run.
 *
 * A trainer keeps its parameters in one flat fp32 buffer. It opens a session with the Redis URL and
 * the run name (everything else is learned from Redis), gets the current global parameters written
 * into its buffer, and calls diloco_after_step() after every inner optimizer step. Every H steps that
 * call runs one DiLoCo sync: it computes the pseudo-gradient (global snapshot - local parameters),
 * sends each shard to the shard-server that owns it, waits at the round's barrier, and writes the new
 * global parameters into the buffer. Heartbeats run on a background thread. Failures (a shard-server
 * dying, a lost connection, eviction) are retried inside; what cannot be recovered is reported through
 * the err buffer, never by exiting.
 *
 *     diloco_options o; diloco_options_default(&o);
 *     o.redis_url = "redis://127.0.0.1:6379"; o.run = "demo"; o.sync_every = 100;
 *     diloco *d; if (diloco_open(&o, params, numel, &d, err, sizeof err) < 0) ...
 *     for (step...) { train_step(params); diloco_report(d, loss, tokens); diloco_after_step(d, NULL, err, sizeof err); }
 *     diloco_close(d);
 */
#ifndef DILOCO_H
#define DILOCO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct diloco diloco;

/* Device-resident parameters (optional). A trainer whose parameters live on an accelerator fills
 * these hooks, and libdiloco then never reads or writes the params buffer given to diloco_open
 * (which may be NULL): the device keeps its own copy of the global parameters (the "snapshot" a
 * round's pseudo-gradient is taken against) and does the two things libdiloco would otherwise do on
 * the host. Every call is made on the thread that called diloco_open / diloco_after_step (the one
 * that owns the parameters), and the host buffers passed are used only during the call. Without
 * hooks (delta == NULL) libdiloco works on params itself, as always. docs/cuda.md has the CUDA one. */
enum {
    DILOCO_LOAD_SNAPSHOT = 0,     /* snapshot = base; params untouched */
    DILOCO_LOAD_COPY = 1,         /* snapshot = base; params = base */
    DILOCO_LOAD_MIX = 2,          /* snapshot = base; params = (float)alpha*params + (float)(1-alpha)*base,
                                     each product and the sum rounded to fp32 separately (no FMA) */
};
typedef struct diloco_device_ops {
    void *ctx;                    /* passed back to every hook */
    /* The pseudo-gradient of [off, off+n): d = snapshot - params, one fp32 subtraction per element,
     * written to out as n bf16 values (bf16 != 0; round to nearest even, NaN made quiet, exactly as
     * common/bf16.c) or n floats. Returns 0 when every d is finite; 1 when one is NaN or Inf, with
     * *bad = the smallest such i (relative to off; out is then not used); -1 on a device error. */
    int (*delta)(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err, size_t errlen);
    /* New global parameters base[0, n) (host) for [off, off+n): snapshot = base, and params as mode
     * says (DILOCO_LOAD_*). 0, or -1 on a device error. */
    int (*load)(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err,
                size_t errlen);
    /* Optional: allocator of libdiloco's large host buffers (the global parameters, the pseudo-gradient),
     * e.g. page-locked memory so the copies above are DMA; NULL: malloc/free. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
} diloco_device_ops;

typedef struct diloco_options {
    const char *redis_url;        /* redis://[user[:pass]@]host[:port][/db] or unix://path */
    const char *run;              /* run name given to `coordinator init --run` */
    const char *worker_id;        /* NULL: "<hostname>-<pid>" */
    int sync_every;               /* H: inner steps between syncs (default 500) */
    int bf16;                     /* send pseudo-gradients as bf16 (default 1) */
    int heartbeat_interval_ms;    /* default 30000; 0 disables heartbeats */
    int max_sync_retries;         /* failed syncs in a row before re-registering (default 3) */
    int net_timeout_ms;           /* one data-plane request (default 60000) */
    int sync_timeout_ms;          /* give up one sync attempt after this long without progress (default 120000) */
    int wait_poll_ms;             /* BLPOP timeout while waiting at a barrier (default 1000) */
    int connect_timeout_ms;       /* diloco_open waits this long for an unreachable Redis, retrying with
                                     backoff (default 60000; 0: one attempt); a login Redis refuses (wrong
                                     password or user) fails at once */
    int dylu;                     /* follow the H the run's DyLU computes for us */
    int num_fragments;            /* 0: take it from the run; else it must equal the run's */
    double fragment_alpha;        /* Streaming mixing: params = alpha*params + (1-alpha)*global (default 0) */
    int simulate_latency_ms;      /* testing: extra delay in each background fragment sync */
    const volatile int *stop;     /* optional: when *stop becomes non-zero, waits and retries give up
                                     at once (point it at your SIGINT/SIGTERM flag) */
    /* Called after the library wrote new global values into params[off, off+n) (NULL: nothing).
     * Not called with device hooks: their load is the notification. */
    int (*on_params)(void *ctx, size_t off, size_t n, char *err, size_t errlen);
    void *on_params_ctx;
    diloco_device_ops device;     /* device-resident parameters (see above); all NULL: off */
} diloco_options;

typedef struct diloco_sync_info {
    int fragment;                 /* which fragment synced (0 without Streaming DiLoCo) */
    int64_t round;                /* the round this sync completed (the new version is round+1) */
    int64_t version;              /* global version now held */
    double seconds;               /* first pseudo-gradient byte sent to last parameter byte received */
    double wait_seconds;          /* part of it spent waiting for the barrier */
    /* Payload bytes this sync sent (pseudo-gradients, resends included: every frame that went out,
     * whatever its reply) and received (parameters). A lost round that sent nothing reports 0 up. */
    uint64_t bytes_up, bytes_down;
    uint64_t digest;              /* XXH3 of the whole new global parameter vector */
    int stale;                    /* 1 when the round was lost (STALE/evicted) and we re-fetched instead */
    /* Phase timestamps of the round, CLOCK_REALTIME in microseconds (comparable across processes on
     * one machine; 0 when the phase did not happen): first pseudo-gradient byte sent, every push
     * acknowledged, barrier closed (first get sent), last parameter byte received. */
    uint64_t t_first_send_us, t_pushed_us, t_get_us, t_last_recv_us;
    /* Before this round, confirming that the previous round's parameters (received before they were
     * durable, docs/PROTOCOL.md "Tentative parameters") were committed: usually one Redis read. */
    double confirm_seconds;
} diloco_sync_info;

void diloco_options_default(diloco_options *o);

/* Connect, register and write the current global parameters into params (numel must match the run;
 * with device hooks params may be NULL and the parameters are loaded through o->device.load). */
int diloco_open(const diloco_options *o, float *params, size_t numel, diloco **out, char *err, size_t errlen);

/* Call after each inner step. Returns 1 when a sync happened (params now hold new global values),
 * 0 when not, -1 on an error that could not be recovered by retries. */
int diloco_after_step(diloco *d, char *err, size_t errlen);

/* Sync now, whatever the step count. Same return values. */
int diloco_force_sync(diloco *d, char *err, size_t errlen);

/* Numbers for heartbeats (loss, tokens seen so far); cheap, call as often as you like. */
void diloco_report(diloco *d, double loss, uint64_t tokens);

/* Facts about the session. */
int diloco_last_sync(const diloco *d, diloco_sync_info *out);   /* 0 if a sync happened yet, else -1 */
int diloco_sync_every(const diloco *d);                         /* current H (DyLU may change it) */
int diloco_steps_to_sync(const diloco *d);
int diloco_stop_requested(const diloco *d);                     /* the operator shut the run down */
const char *diloco_worker_id(const diloco *d);
int64_t diloco_version(const diloco *d);                        /* global version params started from */

/* Deregister and free. Safe on NULL. */
void diloco_close(diloco *d);

#ifdef __cplusplus
}
#endif
#endif
