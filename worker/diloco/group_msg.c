/* group_msg.c: the collectives of a process group (group.c), as messages: every step that involves more
 * than one rank is one allgather of a fixed-size group_msg from each rank (in an async round followed by a
 * number per shard of the fragment: gmsg_gather_with), made by every rank whatever its own outcome, so the
 * ranks decide the same thing from the same facts. Each gather is checked (every slot holds the rank it
 * should, at the same collective: otherwise one message that every rank builds alike, from the messages
 * alone), and carries each rank's word on a stop, which every rank then agrees on (agree_stop). The
 * summaries of the ranks' outcomes (the first failure, the worst) are here too: what group.c decides on.
 * Below group.c; calls only control.c (the session's flags) and the host's allgather. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"

#define GROUP_MAGIC 0x70756f72676c6455ull /* "Udlgroup" */

static const char *step_name(int what)
{
    static const char *names[] = {"?",       "open",  "register", "join",     "fetch", "prepare", "round",
                                  "recover", "check", "places",   "complete", "ready", "repair",  "held"};
    return what >= GRP_HELLO && what <= GRP_HELD ? names[what] : names[0];
}

/* The ranks are out of step (all[r] is at another collective than all[0] or this rank): one message,
 * built from all[] only, so every rank says the same. A rank at its first collective (open) next to a
 * rank of a registered group is a rank restarted alone: say so, with the group it cannot join. */
static void out_of_step(diloco *d, const group_msg *all, int r, char *err, size_t errlen)
{
    int size = d->o.group.size, fresh = -1, old = -1;
    for (int q = 0; q < size; q++) {
        if (all[q].what == GRP_HELLO && all[q].call == 1 && fresh < 0) fresh = q;
        if (all[q].ginc > 0 && old < 0) old = q;
    }
    if (fresh >= 0 && old >= 0) {
        err_set(err, errlen,
                "rank %d opened the group anew (a rank restarted alone) while rank %d is in worker %s, incarnation "
                "%" PRId64 ", at version %" PRId64 " (collective #%u, %s): that group already synced and a rank "
                "cannot join a group of another incarnation; restart every rank of the group",
                fresh, old, all[old].gworker, all[old].ginc, all[old].gversion, all[old].call,
                step_name(all[old].what));
        return;
    }
    err_set(err, errlen,
            "the ranks of the group are out of step: rank %d is at collective #%u (%s), rank %d at #%u "
            "(%s): a rank restarted alone or joined a group that already synced; restart every rank",
            r, all[r].call, step_name(all[r].what), d->grp_rank, all[d->grp_rank].call,
            step_name(all[d->grp_rank].what));
}

/* The slots of one allgather: every one holds the rank it should, at the same collective. */
static int check_gathered(diloco *d, const group_msg *all, char *err, size_t errlen)
{
    int size = d->o.group.size;
    for (int r = 0; r < size; r++) {
        const group_msg *m = &all[r];
        if (m->magic != GROUP_MAGIC || m->size != size || m->rank != r) {
            err_set(err, errlen,
                    "the ranks of the group disagree: slot %d of the allgather holds rank %d of a group of %d, this "
                    "rank is %d of %d (every rank must be given the same group size and its own rank)",
                    r, m->rank, m->size, d->grp_rank, size);
            return -1;
        }
        if (m->call != all[0].call || m->what != all[0].what) {
            out_of_step(d, all, r, err, errlen);
            return -1;
        }
    }
    return 0;
}

/* A stop, agreed. The run was shut down (a rank's heartbeat was told) or a rank's host asked it to stop
 * (diloco_request_stop, *o.stop: a signal, Python's stop()), each rank at its own moment, and every message
 * says whether its rank was told or asked. From the first collective where one says so, every rank's
 * diloco_stop_requested says so, at the same inner step on each, so the host stops them all there: a rank
 * stopping on its own word would leave the others waiting at their next collective, and in the host's next
 * data-parallel allreduce. A host's stop, once agreed, is every rank's (grp_stop, and its stop flag: waits
 * give up everywhere), and a round under way ends on every rank with the group leaving the run (stopped). */
static void agree_stop(diloco *d, const group_msg *all)
{
    int size = d->o.group.size, told = -1, asked = -1;
    for (int r = 0; r < size; r++) {
        if (all[r].shutdown && told < 0) told = r;
        if (all[r].stop && asked < 0) asked = r;
    }
    if (told < 0 && asked < 0) return;
    int kind = asked < 0 ? DILOCO_STOP_SHUTDOWN : all[d->grp_rank].stop ? DILOCO_STOP_ASKED : DILOCO_STOP_RANK;
    pthread_mutex_lock(&d->hb_mu);
    int before = d->stop_requested;
    if (before == 0 || before == DILOCO_STOP_SHUTDOWN) d->stop_requested = kind;
    pthread_mutex_unlock(&d->hb_mu);
    if (asked >= 0 && !d->grp_stop) {
        d->grp_stop = 1;
        d->grp_stop_rank = asked;
        diloco_request_stop(d);
        if (d->grp_rank == 0)
            log_info("rank %d was asked to stop: every rank of the group stops after this inner step", asked);
    } else if (before == 0 && d->grp_rank == 0) {
        log_info("the run was shut down (rank %d's heartbeat was told): every rank of the group stops after this "
                 "inner step",
                 told);
    }
}

/* One allgather of msg, followed by n numbers (mine), from every rank: all[size] the messages, vals[r * n + i]
 * rank r's i-th number (vals may be NULL when n is 0). -1 + err when the transport failed or the ranks are out
 * of step. */
int gmsg_gather_with(diloco *d, int what, group_msg *msg, const int64_t *mine, int n, group_msg *all, int64_t *vals,
                     char *err, size_t errlen)
{
    int size = d->o.group.size;
    msg->magic = GROUP_MAGIC;
    msg->call = ++d->grp_calls;
    msg->what = what;
    msg->rank = d->grp_rank;
    msg->size = size;
    msg->shutdown = dl_shutdown_seen(d);
    msg->stop = dl_stopping(d);
    msg->ginc = dl_inc(d);
    msg->gversion = d->frag_version ? __atomic_load_n(&d->frag_version[0], __ATOMIC_RELAXED) : 0; /* (in flight) */
    snprintf(msg->gworker, sizeof msg->gworker, "%s", msg->ginc > 0 ? d->worker_id : "");
    size_t slot = sizeof *msg + (size_t)n * sizeof(int64_t);
    unsigned char *in = (unsigned char *)msg, *out = (unsigned char *)all;
    if (n > 0) { /* one slot per rank: the message, then its numbers */
        in = malloc(slot);
        out = malloc(slot * (size_t)size);
        if (!in || !out) {
            free(in);
            free(out);
            err_set(err, errlen, "out of memory");
            return -1;
        }
        memcpy(in, msg, sizeof *msg);
        memcpy(in + sizeof *msg, mine, (size_t)n * sizeof(int64_t));
    }
    char herr[256] = "";
    int rc = d->o.group.allgather(d->o.group.ctx, in, slot, out, herr, sizeof herr);
    if (rc < 0)
        err_set(err, errlen, "the group's allgather failed at its %s step (%s): a rank died or the transport broke",
                step_name(what), herr[0] ? herr : "no message");
    if (n > 0) {
        for (int r = 0; rc == 0 && r < size; r++) {
            memcpy(&all[r], out + slot * (size_t)r, sizeof *msg);
            memcpy(vals + (size_t)r * (size_t)n, out + slot * (size_t)r + sizeof *msg, (size_t)n * sizeof(int64_t));
        }
        free(in);
        free(out);
    }
    if (rc < 0 || check_gathered(d, all, err, errlen) < 0) return -1;
    agree_stop(d, all);
    return 0;
}

/* One allgather of msg from every rank into all[size], checked: every slot holds the rank it should, at
 * the same collective. -1 + err when the transport failed or the ranks are out of step. */
int gmsg_gather(diloco *d, int what, group_msg *msg, group_msg *all, char *err, size_t errlen)
{
    return gmsg_gather_with(d, what, msg, NULL, 0, all, NULL, err, errlen);
}

/* One slot per rank for an allgather's messages (zeroed); NULL with err when out of memory. */
group_msg *gmsg_alloc(const diloco *d, char *err, size_t errlen)
{
    group_msg *all = calloc((size_t)d->o.group.size, sizeof *all);
    if (!all) err_set(err, errlen, "out of memory");
    return all;
}

/* "rank r: its message" in err: rank r's failure as the others report it */
static int rank_failure(const group_msg *all, int r, char *err, size_t errlen)
{
    err_set(err, errlen, "rank %d: %s", r, all[r].err[0] ? all[r].err : "failed");
    return all[r].status;
}

/* The first rank whose status is not DL_OK: its status, with "rank r: its message" in err. */
int gmsg_first_failure(const group_msg *all, int size, char *err, size_t errlen)
{
    for (int r = 0; r < size; r++)
        if (all[r].status != DL_OK) return rank_failure(all, r, err, errlen);
    return DL_OK;
}

/* The worst status of all ranks (corrupt > fail > evicted > stale), DL_OK when none failed. */
int gmsg_worst_status(const group_msg *all, int size)
{
    static const int order[] = {DL_CORRUPT, DL_FAIL, DL_EVICTED, DL_STALE, DL_RETRY, DL_NEED};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        for (int r = 0; r < size; r++)
            if (all[r].status == order[i]) return order[i];
    return DL_OK;
}

/* worst_status, with "rank r: its message" of the first rank that has it in err: the reason a recover acts
 * on (a corrupt shard's message for its repair wait, not another rank's consequence of it). */
int gmsg_worst_failure(const group_msg *all, int size, char *err, size_t errlen)
{
    int worst = gmsg_worst_status(all, size);
    for (int r = 0; r < size && worst != DL_OK; r++)
        if (all[r].status == worst) return rank_failure(all, r, err, errlen);
    return worst;
}
