/* simt_emu.cc: the CPU lane emulator of simt_emu.h: the fiber scheduler, the barriers, the warp
 * collectives and the bf16 conversions.
 *
 * Each collective is one wait at the warp's barrier: every lane deposits its operands in the warp's
 * slots and waits, but the last lane to arrive does not: it computes every lane's result from all the
 * slots, while every lane is still at the collective (as on a GPU: no lane that goes on can change what
 * another reads, its slots or the shared memory under an ldmatrix), releases the others and goes on.
 * (Each lane computing its own result after the wait needed a second wait, to keep a lane from
 * depositing its next operands before every lane had read: twice the fiber switches, which are most of
 * an emulated test's time.) The scheduler releases a __syncthreads as soon as its last thread arrives,
 * and otherwise runs a runnable fiber chosen by a splitmix64 sequence (base/util.h) seeded per launch.
 *
 * The fibers, their stacks and the scheduler's arrays live from launch to launch (a suite launches
 * thousands of kernels): a fiber that finished its block parks in fiber_entry and the next block, of
 * this launch or a later one, resumes it there; only a launch that failed (a fiber abandoned inside the
 * body) makes every fiber start afresh. */
#include "simt_emu.h"

#include "base/util.h" /* splitmix64 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

enum { F_RUN, F_WAIT_WARP, F_WAIT_BLOCK, F_DONE };
enum { C_SYNCWARP = 1, C_SHFL, C_MMA, C_LDMATRIX };

/* A fiber switch is GCC's __builtin_setjmp / __builtin_longjmp: they keep only the frame, stack and
 * resume addresses (the compiler saves the registers around the setjmp), where setjmp.h's also go
 * through the signal mask's bookkeeping and the thread's cleanup handlers, which an emulated test, with
 * a switch at every barrier and collective, paid for with a fifth of its time (test_cuda_bf16_emu:
 * 29.4 s with them, 24.0 s without). */
typedef void *switch_buf[5];

/* (__builtin_longjmp may not be called from the function that calls __builtin_setjmp) */
__attribute__((noinline, noreturn)) static void jump_to(switch_buf to)
{
    __builtin_longjmp(to, 1);
}

#define STACK_BYTES (256 * 1024)
#define SLOTS 10 /* per lane: mma's a[4], b[2], c[4] */

/* What a switch touches, 80 bytes a fiber (its first start's ucontext, 968 bytes, is apart: E.ctx), so that
 * a block's 1024 fibers are not 1024 scattered cache lines and pages. */
struct fiber {
    switch_buf at; /* where it waits, once started */
    int started;
    char *stack;
    simt_dim3 tid;
    int state, coll;
};

union slot {
    float f;
    uint32_t u;
    const void *p;
};

struct warp_slots {
    slot s[32][SLOTS]; /* each lane's operands, deposited before it arrives */
    slot out[32][4];   /* each lane's result, written by the lane that completes the collective */
};

static struct {
    fiber *f;
    ucontext_t *ctx; /* fiber i's first start */
    unsigned n, cap; /* the launch's threads per block; the threads the arrays below hold */
    warp_slots *w;
    unsigned *runq, nrun; /* the runnable fibers, in no order */
    unsigned *warp_waiting, *warp_done, block_waiting, done; /* (warp_waiting: counted by the lanes as they arrive) */
    switch_buf sched;
    ucontext_t ctx0; /* what a fiber starting in this launch is made from (one getcontext per launch) */
    fiber *cur;
    void (*body)(void *);
    void *arg;
    uint64_t rng;
    int failed;
    char *err;
    size_t errlen;
} E;

simt_dim3 blockIdx, blockDim, gridDim;

const simt_dim3 &simt_thread_idx(void)
{
    return E.cur->tid;
}

/* records the first failure; called on the scheduler's side or by a fiber (which then never resumes) */
static void fail(const char *fmt, ...)
{
    if (!E.failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(E.err, E.errlen, fmt, ap);
        va_end(ap);
    }
    E.failed = 1;
}

static void fail_here(const char *what)
{
    fail("block (%u,%u,%u) thread %u: %s", blockIdx.x, blockIdx.y, blockIdx.z, (unsigned)(E.cur - E.f), what);
    jump_to(E.sched); /* never resumed: the launch ends */
}

static void switch_away(void);

static void wait_at(int state, int coll)
{
    E.cur->state = state;
    E.cur->coll = coll;
    switch_away();
}

static int lane(void)
{
    return (int)((E.cur - E.f) & 31); /* warps are 32 consecutive threads in linear order */
}

static warp_slots *warp(void)
{
    return &E.w[(E.cur - E.f) >> 5];
}

/* a fiber serves every block of its launch: after the body it parks, and run_block's next start resumes
 * it here for the next block (one makecontext and setcontext per fiber and launch, not per block) */
static void fiber_entry(void)
{
    for (;;) {
        E.body(E.arg);
        E.cur->state = F_DONE;
        switch_away();
    }
}

/* runs f: its first start through its ucontext, then by jump_to to where it waits (a switch without
 * the signal-mask system calls of swapcontext) */
static void enter(fiber *f)
{
    E.cur = f;
    if (f->started) jump_to(f->at);
    f->started = 1;
    setcontext(&E.ctx[f - E.f]);
}

/* ---- the scheduler ---------------------------------------------------------------------------- */

static void make_runnable(fiber *f)
{
    f->state = F_RUN;
    E.runq[E.nrun++] = (unsigned)(f - E.f);
}

/* warp w's lanes have all arrived (waiting, or exited; the running fiber, the last to arrive, is not waiting):
 * releases the waiting ones if every lane is at one collective */
static int release_warp(unsigned w)
{
    fiber *l = E.f + 32 * w;
    if (E.warp_done[w]) {
        fail("block (%u,%u,%u) warp %u: %u lanes exited while the others wait at a warp collective", blockIdx.x,
             blockIdx.y, blockIdx.z, w, E.warp_done[w]);
        return -1;
    }
    for (int i = 1; i < 32; i++)
        if (l[i].coll != l[0].coll) {
            fail("block (%u,%u,%u) warp %u: lanes 0 and %d at different warp collectives (%d, %d)", blockIdx.x,
                 blockIdx.y, blockIdx.z, w, i, l[0].coll, l[i].coll);
            return -1;
        }
    E.warp_waiting[w] = 0;
    for (int i = 0; i < 32; i++)
        if (&l[i] != E.cur) make_runnable(&l[i]);
    return 0;
}

/* every thread waits at __syncthreads or has exited: releases them */
static void release_block(void)
{
    E.block_waiting = 0;
    for (unsigned i = 0; i < E.n; i++)
        if (E.f[i].state == F_WAIT_BLOCK) make_runnable(&E.f[i]);
}

/* counts where f stopped (a lane counted its arrival at a warp collective itself: warp_arrive), and
 * releases the barrier it completes */
static int account(fiber *f)
{
    unsigned w = (unsigned)(f - E.f) >> 5;
    if (f->state == F_WAIT_BLOCK) E.block_waiting++;
    if (f->state == F_DONE) {
        E.done++;
        E.warp_done[w]++;
    }
    if (E.warp_waiting[w] && E.warp_waiting[w] + E.warp_done[w] == 32 && release_warp(w)) return -1;
    if (E.block_waiting && E.block_waiting + E.done == E.n) release_block();
    return 0;
}

static void describe_deadlock(void)
{
    unsigned at_warp = 0;
    for (unsigned i = 0; i < E.n; i++) at_warp += E.f[i].state == F_WAIT_WARP;
    fail("block (%u,%u,%u): deadlock: %u threads wait at __syncthreads while %u wait at a warp collective or "
         "__syncwarp (a barrier inside divergent code?)",
         blockIdx.x, blockIdx.y, blockIdx.z, E.block_waiting, at_warp);
}

static uint64_t next_random(void)
{
    return splitmix64(&E.rng);
}

/* takes a random fiber off the run queue (k: the top 32 random bits scaled to [0, nrun), no division) */
static fiber *pick_runnable(void)
{
    if (!E.nrun) return NULL;
    unsigned k = (unsigned)(((next_random() >> 32) * E.nrun) >> 32), i = E.runq[k];
    E.runq[k] = E.runq[--E.nrun];
    return &E.f[i];
}

/* The running fiber stopped (its state says where): it is counted, and the next fiber the scheduler picks
 * runs in its place, straight from this one (one switch, not two through the scheduler's context); the
 * scheduler's context (run_fibers) runs again once none is runnable or a barrier's release failed. */
static void switch_away(void)
{
    if (__builtin_setjmp(E.cur->at)) return; /* resumed */
    if (account(E.cur)) jump_to(E.sched);
    fiber *next = pick_runnable();
    if (!next) jump_to(E.sched);
    enter(next);
}

/* runs the block's fibers until none is runnable (the block ended, or a deadlock) or the launch failed */
static void run_fibers(void)
{
    fiber *first = pick_runnable();
    if (!first || __builtin_setjmp(E.sched)) return;
    enter(first);
}

static int run_block(void)
{
    E.nrun = E.block_waiting = E.done = 0;
    for (unsigned i = 0; i < E.n; i++) {
        fiber *f = &E.f[i];
        f->tid = simt_dim3{i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
        if (!f->started) { /* a copy of ctx0 (its FP state points into ctx0, which this launch made) */
            ucontext_t *c = &E.ctx[i];
            *c = E.ctx0;
            c->uc_stack.ss_sp = f->stack;
            c->uc_stack.ss_size = STACK_BYTES;
            c->uc_link = NULL; /* fiber_entry never returns */
            makecontext(c, fiber_entry, 0);
        }
        make_runnable(f);
    }
    for (unsigned w = 0; w < E.n / 32; w++) E.warp_waiting[w] = E.warp_done[w] = 0;
    run_fibers();
    if (E.failed) return -1;
    if (E.done == E.n) return 0;
    describe_deadlock();
    return -1;
}

/* the grid's blocks one after another, in a random order: a GPU runs them in any order and at once, so
 * a kernel must not depend on it; and a block that reads shared memory before writing it then reads
 * another block's leftovers, not its own previous values */
static int run_grid(simt_dim3 grid, char *err, size_t errlen)
{
    size_t n = (size_t)grid.x * grid.y * grid.z;
    size_t *order = (size_t *)malloc((n ? n : 1) * sizeof *order);
    if (!order) {
        snprintf(err, errlen, "simt: out of memory for a grid of %zu blocks", n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)(next_random() % i), t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t b = order[i];
        blockIdx = simt_dim3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y)};
        rc = run_block();
    }
    free(order);
    return rc;
}

/* makes room for `block` fibers (their stacks included) in the arrays kept from launch to launch */
static int reserve_fibers(unsigned block)
{
    if (block <= E.cap) return 0;
    fiber *f = (fiber *)realloc(E.f, block * sizeof *f);
    if (f) E.f = f;
    ucontext_t *ctx = f ? (ucontext_t *)realloc(E.ctx, block * sizeof *ctx) : NULL;
    if (ctx) E.ctx = ctx;
    warp_slots *w = ctx ? (warp_slots *)realloc(E.w, block / 32 * sizeof *w) : NULL;
    if (w) E.w = w;
    unsigned *runq = w ? (unsigned *)realloc(E.runq, block * sizeof *runq) : NULL;
    if (runq) E.runq = runq;
    unsigned *ww = runq ? (unsigned *)realloc(E.warp_waiting, block / 32 * sizeof *ww) : NULL;
    if (ww) E.warp_waiting = ww;
    unsigned *wd = ww ? (unsigned *)realloc(E.warp_done, block / 32 * sizeof *wd) : NULL;
    if (wd) E.warp_done = wd;
    if (!wd) return -1;
    for (; E.cap < block; E.cap++) { /* fibers are appended: the parked ones keep their places */
        fiber *n = &E.f[E.cap];
        memset(n, 0, sizeof *n);
        n->stack = (char *)malloc(STACK_BYTES);
        if (!n->stack) return -1;
    }
    return 0;
}

int simt_launch(simt_dim3 grid, simt_dim3 shape, unsigned seed, void (*body)(void *), void *arg, char *err,
                size_t errlen)
{
    unsigned block = shape.x * shape.y * shape.z;
    if (block == 0 || block % 32 || block > 1024) {
        snprintf(err, errlen, "simt: a block of %u x %u x %u threads: it must be a multiple of 32 up to 1024", shape.x,
                 shape.y, shape.z);
        return -1;
    }
    if (reserve_fibers(block)) {
        snprintf(err, errlen, "simt: out of memory for %u fibers", block);
        return -1;
    }
    E.n = block;
    getcontext(&E.ctx0); /* what a fiber that has not started yet is made from */
    E.body = body;
    E.arg = arg;
    E.rng = seed;
    E.failed = 0;
    E.err = err;
    E.errlen = errlen;
    gridDim = grid;
    blockDim = shape;
    int rc = run_grid(grid, err, errlen);
    if (rc) /* fibers were abandoned inside the body (or never ran): each starts afresh next time */
        for (unsigned i = 0; i < E.cap; i++) E.f[i].started = 0;
    return rc;
}

/* ---- barriers and shuffles ------------------------------------------------------------------ */

void __syncthreads(void)
{
    wait_at(F_WAIT_BLOCK, 0);
}

static void check_full_mask(unsigned mask)
{
    if (mask != 0xffffffffu) fail_here("a warp primitive with a partial mask (not emulated)");
}

/* The running lane arrives at warp collective `coll`, its operands in its slots. A lane before the last
 * waits; the last one releases them all (release_warp checks they are at the same collective) and
 * computes every lane's result into the warp's out slots (finish, if any) before any of them runs again. */
static void warp_arrive(int coll, void (*finish)(warp_slots *w))
{
    unsigned w = (unsigned)(E.cur - E.f) >> 5;
    E.cur->coll = coll;
    if (++E.warp_waiting[w] + E.warp_done[w] < 32) {
        wait_at(F_WAIT_WARP, coll);
        return;
    }
    if (release_warp(w)) jump_to(E.sched); /* (failed: never resumed, the launch ends) */
    if (finish) finish(&E.w[w]);
}

void __syncwarp(unsigned mask)
{
    check_full_mask(mask);
    warp_arrive(C_SYNCWARP, NULL);
}

/* every lane gave v (slot 0) and reads the value of lane src (slot 1; its own where src is outside the warp) */
static void shfl_finish(warp_slots *w)
{
    for (int l = 0; l < 32; l++) {
        int src = (int)w->s[l][1].u;
        w->out[l][0].u = src >= 0 && src < 32 ? w->s[src][0].u : w->s[l][0].u;
    }
}

static uint32_t shfl_bits(unsigned mask, uint32_t v, int src)
{
    check_full_mask(mask);
    warp_slots *w = warp();
    int l = lane();
    w->s[l][0].u = v;
    w->s[l][1].u = (uint32_t)src;
    warp_arrive(C_SHFL, shfl_finish);
    return w->out[l][0].u;
}

static uint32_t shfl_xor_bits(unsigned mask, uint32_t v, int lane_mask)
{
    return shfl_bits(mask, v, lane() ^ lane_mask);
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float __shfl_xor_sync(unsigned mask, float v, int lane_mask)
{
    return bits_float(shfl_xor_bits(mask, float_bits(v), lane_mask));
}

/* lane l reads lane l + delta; the top delta lanes keep their own value */
float __shfl_down_sync(unsigned mask, float v, unsigned delta)
{
    int src = lane() + (int)delta;
    return bits_float(shfl_bits(mask, float_bits(v), src < 32 ? src : lane()));
}

float __shfl_sync(unsigned mask, float v, int src_lane)
{
    return bits_float(shfl_bits(mask, float_bits(v), src_lane & 31));
}

int __shfl_xor_sync(unsigned mask, int v, int lane_mask)
{
    return (int)shfl_xor_bits(mask, (uint32_t)v, lane_mask);
}

unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane_mask)
{
    return shfl_xor_bits(mask, v, lane_mask);
}

/* ---- bf16 ------------------------------------------------------------------------------------- */

uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float bf16_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float bf16_round(float x)
{
    return bf16_float(bf16_bits(x));
}

uint32_t bf16x2_pack(float lo, float hi)
{
    return (uint32_t)bf16_bits(lo) | ((uint32_t)bf16_bits(hi) << 16);
}

float bf16x2_lo(uint32_t p)
{
    return bf16_float((uint16_t)(p & 0xffffu));
}

float bf16x2_hi(uint32_t p)
{
    return bf16_float((uint16_t)(p >> 16));
}

/* ---- mma and ldmatrix ------------------------------------------------------------------------- */

static float half_of(uint32_t p, int k)
{
    return k & 1 ? bf16x2_hi(p) : bf16x2_lo(p);
}

/* A[r][k] of the 16x16 operand the warp deposited: lane 4 (r % 8) + (k % 8) / 2, register
 * r / 8 + 2 (k / 8) */
static float a_at(const warp_slots *w, int r, int k)
{
    return half_of(w->s[4 * (r % 8) + (k % 8) / 2][r / 8 + 2 * (k / 8)].u, k);
}

/* B[k][n] of the 16x8 operand: lane 4 n + (k % 8) / 2, register k / 8 (slots 4, 5) */
static float b_at(const warp_slots *w, int k, int n)
{
    return half_of(w->s[4 * n + (k % 8) / 2][4 + k / 8].u, k);
}

/* lane l's d: its rows g and g + 8 (g = l / 4), columns 2 t and 2 t + 1 (t = l % 4) of A B + C */
static void mma_finish(warp_slots *w)
{
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; i++) {
            int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
            double sum = 0.0; /* bf16 products are exact in double, and 16 of them sum exactly enough */
            for (int k = 0; k < 16; k++) sum += (double)a_at(w, row, k) * (double)b_at(w, k, col);
            w->out[l][i].f = (float)(sum + (double)w->s[l][6 + i].f);
        }
    }
}

void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
{
    warp_slots *w = warp();
    int l = lane();
    for (int i = 0; i < 4; i++) w->s[l][i].u = a[i];
    w->s[l][4].u = b[0];
    w->s[l][5].u = b[1];
    for (int i = 0; i < 4; i++) w->s[l][6 + i].f = c[i];
    warp_arrive(C_MMA, mma_finish);
    for (int i = 0; i < 4; i++) d[i] = w->out[l][i].f;
}

/* ldmatrix of `count` 8x8 matrices: lane l's register i is matrix i's row l / 4, columns 2 (l % 4) and
 * 2 (l % 4) + 1; transposed, column l / 4 of rows 2 (l % 4) and 2 (l % 4) + 1 */
static void ldmatrix_finish(warp_slots *w)
{
    for (int l = 0; l < 32; l++) {
        int count = (int)w->s[l][1].u, trans = (int)w->s[l][2].u;
        for (int i = 0; i < count; i++) {
            uint16_t lo, hi;
            if (!trans) {
                const uint16_t *p = (const uint16_t *)w->s[8 * i + l / 4][0].p;
                lo = p[2 * (l % 4)];
                hi = p[2 * (l % 4) + 1];
            } else {
                lo = ((const uint16_t *)w->s[8 * i + 2 * (l % 4)][0].p)[l / 4];
                hi = ((const uint16_t *)w->s[8 * i + 2 * (l % 4) + 1][0].p)[l / 4];
            }
            w->out[l][i].u = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

static void ldmatrix(uint32_t *r, int count, int trans, const void *row)
{
    warp_slots *w = warp();
    int l = lane();
    if (l < 8 * count && (uintptr_t)row % 16) fail_here("ldmatrix row address not 16-byte aligned");
    w->s[l][0].p = row;
    w->s[l][1].u = (uint32_t)count;
    w->s[l][2].u = (uint32_t)trans;
    warp_arrive(C_LDMATRIX, ldmatrix_finish);
    for (int i = 0; i < count; i++) r[i] = w->out[l][i].u;
}

void ldmatrix_x4(uint32_t r[4], const void *row)
{
    ldmatrix(r, 4, 0, row);
}

void ldmatrix_x4_trans(uint32_t r[4], const void *row)
{
    ldmatrix(r, 4, 1, row);
}

void ldmatrix_x2(uint32_t r[2], const void *row)
{
    ldmatrix(r, 2, 0, row);
}

void ldmatrix_x2_trans(uint32_t r[2], const void *row)
{
    ldmatrix(r, 2, 1, row);
}
