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
 * Building against it: `make install PREFIX=...` installs this header as <diloco.h>, libdiloco.so,
 * libdiloco.a and libdiloco.pc; then `cc prog.c $(pkg-config --cflags --libs libdiloco)` (docs/library.md).
 * The library exports the diloco_* names below and nothing else.
 *
 * In a host process:
 *   - Strings in diloco_options (redis_url, run, worker_id) are copied by diloco_open; the other
 *     pointers (stop, the callbacks' ctx, device ops) must stay valid until diloco_close.
 *   - SIGPIPE: the library never raises it (its sockets send with MSG_NOSIGNAL, and Redis commands
 *     hold SIGPIPE blocked in the calling thread while they run), so the host may keep the default.
 *   - Threads: a session is used from one thread at a time (the one that owns params); several
 *     sessions may live in one process. The library starts its own threads (heartbeats, background
 *     fragment syncs, one per shard-server during a sync) and joins them before diloco_close returns.
 *   - Logging: per session, through log_callback (stderr by default).
 *
 * A complete program (tests/it_lib_installed.sh extracts it from the installed header, builds it
 * with pkg-config and runs it against a real run):
 * ---- example.c
 * #include <diloco.h>
 * #include <stdio.h>
 * #include <stdlib.h>
 *
 * // usage: example REDIS_URL RUN NUMEL STEPS: trains every parameter toward 0.5, syncing every 10 steps
 * int main(int argc, char **argv) {
 *     if (argc != 5) {
 *         fprintf(stderr, "usage: %s REDIS_URL RUN NUMEL STEPS\n", argv[0]);
 *         return 2;
 *     }
 *     size_t numel = strtoull(argv[3], NULL, 10);
 *     long steps = atol(argv[4]);
 *     float *params = calloc(numel, sizeof *params);
 *     char err[512];
 *     diloco_options o;
 *     diloco_options_default(&o);
 *     o.redis_url = argv[1];
 *     o.run = argv[2];
 *     o.sync_every = 10;
 *     diloco *d;
 *     if (!params || diloco_open(&o, params, numel, &d, err, sizeof err) < 0) { // params = the run's now
 *         fprintf(stderr, "cannot join the run: %s\n", err);
 *         return 1;
 *     }
 *     int status = 0;
 *     for (long step = 1; step <= steps && !diloco_stop_requested(d); step++) {
 *         double loss = 0;
 *         for (size_t i = 0; i < numel; i++) { // the inner step: gradient descent on (x - 0.5)^2 / 2
 *             float diff = params[i] - 0.5f;
 *             loss += 0.5 * diff * diff;
 *             params[i] -= 0.1f * diff;
 *         }
 *         diloco_report(d, loss / (double)numel, (uint64_t)step);
 *         if (diloco_after_step(d, err, sizeof err) < 0) { // 1: a sync wrote new global parameters
 *             fprintf(stderr, "sync failed: %s\n", err);
 *             status = 1;
 *             break;
 *         }
 *     }
 *     printf("worker %s at version %lld\n", diloco_worker_id(d), (long long)diloco_version(d));
 *     diloco_close(d);
 *     free(params);
 *     return status;
 * }
 * ----
 */
#ifndef DILOCO_H
#define DILOCO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DILOCO_API __attribute__((visibility("default")))
#else
#define DILOCO_API
#endif

/* This header's version. The soname is libdiloco.so.DILOCO_ABI_VERSION; the ABI version changes with
 * any change to a struct below or to a function's signature (0: not yet stable, it may change without). */
#define DILOCO_VERSION_STRING "0.1.0"
#define DILOCO_ABI_VERSION 0

/* The library actually loaded (a binding compares them with what it was written for). */
DILOCO_API const char *diloco_version_string(void); /* DILOCO_VERSION_STRING */
DILOCO_API int diloco_abi_version(void);            /* DILOCO_ABI_VERSION */
DILOCO_API size_t diloco_options_size(void);        /* sizeof(diloco_options) */
DILOCO_API size_t diloco_sync_info_size(void);      /* sizeof(diloco_sync_info) */

typedef struct diloco diloco;

/* Log levels of log_callback and log_level. */
enum {
    DILOCO_LOG_DEFAULT = -1, /* log_level: the LOG_LEVEL environment variable (debug|info|warn|error), else info */
    DILOCO_LOG_DEBUG = 0,
    DILOCO_LOG_INFO = 1,
    DILOCO_LOG_WARN = 2,
    DILOCO_LOG_ERROR = 3,
};

/* Device-resident parameters (optional). A trainer whose parameters live on an accelerator fills
 * these hooks, and libdiloco then never reads or writes the params buffer given to diloco_open
 * (which may be NULL): the device keeps its own copy of the global parameters (the "snapshot" a
 * round's pseudo-gradient is taken against) and does the two things libdiloco would otherwise do on
 * the host. Every call is made on the thread that called diloco_open / diloco_after_step (the one
 * that owns the parameters), and the host buffers passed are used only during the call. Without
 * hooks (delta == NULL) libdiloco works on params itself. docs/cuda.md has the CUDA one. */
enum {
    DILOCO_LOAD_SNAPSHOT = 0, /* snapshot = base; params untouched */
    DILOCO_LOAD_COPY = 1,     /* snapshot = base; params = base */
    DILOCO_LOAD_MIX = 2,      /* snapshot = base; params = (float)alpha*params + (float)(1-alpha)*base,
                                     each product and the sum rounded to fp32 separately (no FMA) */
};
typedef struct diloco_device_ops {
    void *ctx; /* passed back to every hook */
    /* The pseudo-gradient of [off, off+n): d = snapshot - params, one fp32 subtraction per element,
     * written to out as n bf16 values (bf16 != 0; round to nearest even, NaN made quiet, exactly as
     * common/math/bf16.c) or n floats. Returns 0 when every d is finite; 1 when one is NaN or Inf, with
     * *bad = the smallest such i (relative to off; out is then not used); -1 on a device error. */
    int (*delta)(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err, size_t errlen);
    /* New global parameters base[0, n) (host) for [off, off+n): snapshot = base, and params as mode
     * says (DILOCO_LOAD_*). 0, or -1 on a device error. */
    int (*load)(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err, size_t errlen);
    /* Optional: allocator of libdiloco's large host buffers (the global parameters, the pseudo-gradient),
     * e.g. page-locked memory so the copies above are DMA; NULL: malloc/free. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
} diloco_device_ops;

/* Process groups (optional): several processes, one worker of the run. A node with R GPUs runs one
 * process per GPU, data-parallel inside the node (DDP: every rank holds the same parameters), and joins
 * the run as ONE member: one worker id, one incarnation, one barrier participant, its ranks' tokens
 * summed. Every rank opens its own session with the same options and group = {size R, its rank, two
 * collectives over a transport the ranks already share: MPI, torch.distributed, NCCL, threads...}.
 * Rank 0 registers the group and hands the registration to the others through allgather; each rank
 * then pushes and fetches only its part of the run's shards (diloco_group_range: contiguous, balanced
 * by size; in a Streaming run a part of each fragment) over its own connections, so the group sends and receives what one process would, and the
 * ranks broadcast their parts to each other after every sync. The group arrives at a barrier only when
 * every rank pushed its part, and a rank that stops beating (dies) has the whole group evicted, so no
 * partial contribution of a group is ever committed. Sync and async runs (async: rank 0 places the group's
 * submission, every rank delivers its part), plain DiLoCo or Streaming (each rank moves a part of every
 * fragment; any fragments in flight and fragment alpha), with or without DyLU (the group is assigned one H;
 * every rank takes it at the same sync), with or without device hooks (each rank's own device: the
 * broadcast below is then handed libdiloco's host copy of the global parameters, not params; in a
 * sharded group the hooks' ranges are the rank's own elements). docs/PROTOCOL.md "Process groups" has the
 * protocol.
 *
 * Both hooks are collectives: every rank calls them in the same order, from the thread inside
 * diloco_open / diloco_after_step / diloco_force_sync. They return 0, or -1 with err filled; they must
 * not block forever when a rank died (give the transport a timeout, or let the launcher kill the group).
 * allgather is also called between syncs, from diloco_after_step every few inner steps (about once a second,
 * or twice per heartbeat interval when that is shorter; at the same step on every rank): the ranks agree
 * there whether the group was evicted, so that all stop the interval at once (docs/PROTOCOL.md "Process
 * groups": Eviction between syncs), and whether a rank was asked to stop (diloco_request_stop).
 *
 *   static int my_allgather(void *ctx, const void *in, size_t len, void *out, char *err, size_t errlen)
 *   {   // out[r*len .. (r+1)*len) = rank r's in
 *       return MPI_Allgather(in, (int)len, MPI_BYTE, out, (int)len, MPI_BYTE, MPI_COMM_WORLD) ? -1 : 0;
 *   }
 *   static int my_broadcast(void *ctx, float *params, size_t off, size_t n, int root, char *err, size_t errlen)
 *   {   // params[off, off+n) on every rank = root's (params: the buffer libdiloco hands, whichever it is)
 *       return MPI_Bcast(params + off, (int)n, MPI_FLOAT, root, MPI_COMM_WORLD) ? -1 : 0;
 *   }
 *   ...
 *   o.group = (diloco_group_ops){.size = nranks, .rank = my_rank, .allgather = my_allgather,
 *                                .broadcast = my_broadcast};
 *   diloco_open(&o, params, numel, &d, err, sizeof err);   // on every rank; then train as usual
 *
 * (tests/tools/group_worker.c runs ranks as threads with memcpy for both hooks.)
 *
 * Sharded groups (FSDP, fully_shard): each rank holds only its slices of the parameters, one range per
 * tensor (fully_shard cuts every tensor on dim 0: rank r holds rows [r*c, (r+1)*c), c = ceil(rows/R),
 * as torch.chunk). The run is made with a shard boundary at every rank's slice boundary (`coordinator
 * init --fsdp-ranks R` cuts them), so each rank's slices are whole shards of the run. A rank passes its
 * slices in group.slices and a params buffer of only those elements (their concatenation, in the run's
 * order); it pushes and fetches exactly its shards: no rank holds, gathers or allocates the whole vector
 * (base, pseudo-gradient, error feedback and momentum are the size of its slices) and nothing is
 * exchanged after a sync. Every rank opens with the same group size; the ranks' slices must cover the
 * run exactly once (checked at open, on every rank, before anything is written). In a Streaming run
 * (`coordinator init --fsdp-ranks R --fragments F` cuts fragments of whole tensors) each rank moves its
 * own shards of every fragment. diloco_numel is the rank's own count; diloco_sync_info.digest is the
 * XXH3 of the rank's own elements, and shards_digest is the whole run's (the same on every member of the
 * run, sharded or not):
 *
 *   uint64_t sl[2 * MAXT]; int ns = 0;                       // rank r's dim-0 chunk of every tensor
 *   for (int t = 0; t < ntensors; t++) {
 *       size_t rows = shape[t][0], row = numel_of[t] / rows, c = (rows + R - 1) / R;
 *       size_t lo = r * c < rows ? r * c : rows, hi = (r + 1) * c < rows ? (r + 1) * c : rows;
 *       if (hi > lo) { sl[2 * ns] = offset[t] + lo * row; sl[2 * ns + 1] = (hi - lo) * row; ns++; }
 *   }
 *   o.group = (diloco_group_ops){.size = R, .rank = r, .allgather = my_allgather, .slices = sl,
 *                                .nslices = ns};
 *   diloco_open(&o, my_local_params, local_numel, &d, err, sizeof err);  // local_numel = sum of sl[2i+1]
 */
typedef struct diloco_group_ops {
    int size;  /* processes in the group; 0 or 1: no group (a worker of one process) */
    int rank;  /* this process's place in it, 0 .. size-1; rank 0 registers the group */
    void *ctx; /* passed back to the hooks */
    int (*allgather)(void *ctx, const void *in, size_t len, void *out, char *err, size_t errlen);
    int (*broadcast)(void *ctx, float *params, size_t off, size_t n, int root, char *err, size_t errlen);
    /* Sharded parameters (FSDP, fully_shard; see "Sharded groups" above): this rank holds only the
     * elements [slices[2i], slices[2i] + slices[2i+1]) of the run's vector, i < nslices, ascending and
     * disjoint, and params (numel = their sum) is their concatenation. slices NULL: every rank holds
     * the whole vector (DDP). broadcast is then not used (may be NULL). A rank of a sharded group that
     * holds nothing passes slices with nslices 0 (and is refused: every rank must hold some). */
    const uint64_t *slices;
    int nslices;
} diloco_group_ops;

typedef struct diloco_options {
    const char *redis_url;     /* redis://[user[:pass]@]host[:port][/db] or unix://path */
    const char *run;           /* run name given to `coordinator init --run` */
    const char *worker_id;     /* NULL: "<hostname>-<pid>" */
    int sync_every;            /* H: inner steps between syncs (default 500) */
    int bf16;                  /* send pseudo-gradients as bf16 (default 1); 0: fp32. Only in runs
                                     whose codec is bf16 (coordinator init --compress): others use theirs */
    int heartbeat_interval_ms; /* default 30000; 0 disables heartbeats */
    int max_sync_retries;      /* failed syncs in a row before re-registering (default 3) */
    int net_timeout_ms;        /* one data-plane request (default 60000) */
    int sync_timeout_ms;       /* give up one sync attempt after this long without progress (default 120000) */
    int wait_poll_ms;          /* BLPOP timeout while waiting at a barrier (default 1000) */
    int connect_timeout_ms;    /* diloco_open waits this long for an unreachable Redis, retrying with
                                     backoff (default 60000; 0: one attempt); a login Redis refuses (wrong
                                     password or user) fails at once */
    int dylu;                  /* follow the H the run's DyLU computes for us */
    int num_fragments;         /* 0: take it from the run; else it must equal the run's */
    double fragment_alpha;     /* Streaming mixing: params = alpha*params + (1-alpha)*global (default 0) */
    int simulate_latency_ms;   /* testing: extra delay in each background fragment sync */
    const volatile int *stop;  /* optional: when *stop becomes non-zero, waits and retries give up
                                     at once (point it at your SIGINT/SIGTERM flag; without it,
                                     diloco_request_stop does the same) */
    /* Called after the library wrote new global values into params[off, off+n) (NULL: nothing).
     * Not called with device hooks: their load is the notification. */
    int (*on_params)(void *ctx, size_t off, size_t n, char *err, size_t errlen);
    void *on_params_ctx;
    diloco_device_ops device; /* device-resident parameters (see above); all NULL: off */
    /* Where this session's messages go. NULL: stderr, one line each ("<time> <name>[pid] INFO ...",
     * as the project's programs log). Else log_callback(log_ctx, level, message) for every message at
     * level >= log_level: the text alone (no time, level or newline). It is called from the thread
     * inside a diloco_* call and from the session's own threads, one call at a time, and must not call
     * back into libdiloco. */
    void (*log_callback)(void *ctx, int level, const char *message);
    void *log_ctx;
    int log_level; /* DILOCO_LOG_*; default DILOCO_LOG_DEFAULT */
    /* int8/int4/int3/int2 runs (coordinator init --compress): keep what quantization dropped from each
     * pseudo-gradient and add it to the next one (default 0; in this process only) */
    int error_feedback;
    /* several processes as one worker (see above); all zero: off. worker_id is rank 0's (the others may
     * leave it NULL; one given must be the same) */
    diloco_group_ops group;
    /* Streaming DiLoCo: fragments whose rounds may be in flight at once (default 1; 0 means 1; at most the
     * run's fragments; sync runs only). A fragment sent at a boundary is applied D boundaries later, so a
     * round may take D intervals (H/F steps each) before training waits for it: over a distant link, where
     * a round outlasts an interval, D = 2 keeps training going (docs/compression.md, "What a user feels") */
    int fragments_in_flight;
} diloco_options;

typedef struct diloco_sync_info {
    int fragment;        /* which fragment synced (0 without Streaming DiLoCo) */
    int64_t round;       /* the round this sync completed (the new version is round+1) */
    int64_t version;     /* global version now held */
    double seconds;      /* from the round's start (its first pseudo-gradient byte sent) until it was settled:
                            in a Streaming run that is at a later boundary, so it includes the steps trained
                            while the round was in flight (the network round alone: t_last_recv_us -
                            t_first_send_us) */
    double wait_seconds; /* part of it spent waiting for the barrier */
    /* Payload bytes this sync sent (pseudo-gradients, resends included: every frame that went out,
     * whatever its reply) and received (parameters). A lost round that sent nothing reports 0 up. */
    uint64_t bytes_up, bytes_down;
    uint64_t digest; /* XXH3 of the whole new global parameter vector (a sharded group's rank: of its slices);
                        0 while other fragments' rounds were in flight (fragments_in_flight > 1: they write it) */
    int stale;       /* 1 when the round was lost and we re-fetched instead: STALE, evicted, registered again
                        after failed syncs, or (async) the completion of a submission whose result came late */
    /* Phase timestamps of the round, CLOCK_REALTIME in microseconds (comparable across processes on
     * one machine; 0 when the phase did not happen): first pseudo-gradient byte sent, every push
     * acknowledged, barrier closed (the gets' replies read from then on: they were sent with the arrival,
     * docs/PROTOCOL.md "A sync round"), last parameter byte received. */
    uint64_t t_first_send_us, t_pushed_us, t_get_us, t_last_recv_us;
    /* Before this round, confirming that the previous round's parameters (received before they were
     * durable, docs/PROTOCOL.md "Tentative parameters") were committed: usually one Redis read. */
    double confirm_seconds;
    /* A digest of the whole new global vector that a sharded group computes without gathering it: the
     * sum (mod 2^64) over the run's shards k of XXH3_64bits_withSeed(&d_k, 8, k), d_k the XXH3 of shard k's
     * bytes (its k:digest in dl:{R}:shards). Equal on every member of the run after the same version.
     * 0 when digest is (other rounds in flight). */
    uint64_t shards_digest;
    /* Shards of the previous round that the confirm before this round sent our pseudo-gradient again and
     * fetched again (not committed as we held them: a new owner recomputes them); 0 in the usual case. */
    int confirm_shards;
} diloco_sync_info;

DILOCO_API void diloco_options_default(diloco_options *o);

/* Connect, register and write the current global parameters into params (numel must match the run;
 * with device hooks params may be NULL and the parameters are loaded through o->device.load). Refused
 * before anything connects: sync_timeout_ms, net_timeout_ms or wait_poll_ms below 1, a negative
 * heartbeat_interval_ms, connect_timeout_ms or max_sync_retries (the message names the field). 0; -1 with
 * err; DILOCO_STOPPED (err saying so) when a stop ended the join: this process's (diloco_request_stop
 * from another thread, *o.stop), or, in a process group, another rank's (every rank returns it). */
#define DILOCO_STOPPED (-2)
DILOCO_API int diloco_open(const diloco_options *o, float *params, size_t numel, diloco **out, char *err,
                           size_t errlen);

/* Read the run without joining it: connects as diloco_open would (o's redis_url, run, connect_timeout_ms,
 * stop, log_callback), reads dl:{R}:config and writes nothing anywhere (no registration, no event).
 * *numel gets the run's parameter count and layout[0..cap) its tensors as diloco_run_layout gives them,
 * NUL-ended ("" for a run made before layouts were recorded). Returns the layout's length; when that is
 * >= cap, layout was left alone: call again with a larger buffer. -1 + err on an error. A host checks
 * its model with it before diloco_open, so a model that is not the run's is refused before it joined. */
DILOCO_API int64_t diloco_peek_run(const diloco_options *o, uint64_t *numel, char *layout, size_t cap, char *err,
                                   size_t errlen);

/* The run's number of Streaming fragments (1: plain DiLoCo), read as diloco_peek_run reads the run (no
 * registration, nothing written); -1 + err on an error. A host checks an option that depends on it before
 * diloco_open. */
DILOCO_API int diloco_peek_fragments(const diloco_options *o, char *err, size_t errlen);

/* Call after each inner step. Returns 1 when a sync happened (params now hold new global values),
 * 0 when not, -1 on an error that could not be recovered by retries. */
DILOCO_API int diloco_after_step(diloco *d, char *err, size_t errlen);

/* Sync now, whatever the step count. Same return values. */
DILOCO_API int diloco_force_sync(diloco *d, char *err, size_t errlen);

/* Numbers for heartbeats (loss, tokens seen so far); cheap, call as often as you like. */
DILOCO_API void diloco_report(diloco *d, double loss, uint64_t tokens);

/* Give up waits and retries at once, as *o.stop becoming non-zero does: from any thread, or from a
 * signal handler (it only stores a flag). A sync waiting then returns -1, err saying it stopped. A rank of a
 * process group stops with the others: its stop is agreed at the group's next collective (within about a
 * second, or the round under way), and from there diloco_stop_requested says so on every rank
 * after the same inner step (a round under way returns -1 on every rank); until then the rank trains on. */
DILOCO_API void diloco_request_stop(diloco *d);

/* Facts about the session. */
DILOCO_API int diloco_last_sync(const diloco *d, diloco_sync_info *out); /* 0 if a sync happened yet, else -1 */
DILOCO_API int diloco_sync_every(const diloco *d);                       /* current H (DyLU may change it) */
DILOCO_API int diloco_steps_to_sync(const diloco *d);
/* Whether the host should stop training now: 0, or why (DILOCO_STOP_*): the operator shut the run down (a
 * heartbeat was told), or a stop was asked for (diloco_request_stop, *o.stop). A process group's ranks are
 * each told or asked at their own moment, so for them it turns non-zero at the same inner step on every rank
 * (the first collective whose messages say a rank was told or asked): a host that stops on it stops all its
 * ranks together, as their data-parallel training needs (a rank that stopped alone would leave the others
 * waiting in their next allreduce). */
enum {
    DILOCO_STOP_SHUTDOWN = 1,  /* the operator shut the run down (coordinator control shutdown) */
    DILOCO_STOP_ASKED = 2,     /* this process asked (diloco_request_stop, *o.stop) */
    DILOCO_STOP_RANK = 3,      /* another rank of this process group asked: the group stops together */
    DILOCO_STOP_RECREATED = 4, /* the run was made again under its name (coordinator init --force): this
                                  session's run is gone; a new session (a restarted worker) joins the new one */
    DILOCO_STOP_REPLACED = 5,  /* another process registered under this worker id (two workers share it, or
                                  this one was started again elsewhere): this session leaves the id to it */
};
DILOCO_API int diloco_stop_requested(const diloco *d);
DILOCO_API const char *diloco_worker_id(const diloco *d);
DILOCO_API int64_t diloco_version(const diloco *d); /* global version params started from */
/* The run as this session sees it. */
DILOCO_API size_t diloco_numel(const diloco *d);
DILOCO_API int diloco_is_async(const diloco *d);      /* 1: an asynchronous run (coordinator init --async) */
DILOCO_API int diloco_num_fragments(const diloco *d); /* Streaming DiLoCo fragments (1: plain DiLoCo) */
/* Fragment f is params[*offset, *offset + *count): 0, or -1 when there is no fragment f. */
DILOCO_API int diloco_fragment_range(const diloco *d, int fragment, size_t *offset, size_t *count);
/* The run's tensors as `coordinator init` recorded them: JSON [[name, [shape...], offset], ...] in offset
 * order (for a --from-state run, the state file's tensors), or NULL for a run made before layouts were
 * recorded. Valid until diloco_close. A trainer compares it with its own to refuse a different model. */
DILOCO_API const char *diloco_run_layout(const diloco *d);

/* A process group's rank `rank` moves params[*offset, *offset + *count) (its shards): 0, or -1 when the
 * session is not in a group (or in a sharded one, whose ranks move their slices, or in a Streaming run,
 * where a rank moves a range of each fragment) or there is no such rank. */
DILOCO_API int diloco_group_range(const diloco *d, int rank, size_t *offset, size_t *count);

/* Deregister and free. Safe on NULL. In a group, any rank closing ends the group's membership. */
DILOCO_API void diloco_close(diloco *d);

#ifdef __cplusplus
}
#endif
#endif
