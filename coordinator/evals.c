/* evals.c: reading dl:{R}:evals for status, /status and /metrics (see evals.h). */
#include "evals.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/keys.h"

/* One entry [id, [field, value, ...]] as {version, loss, tokens, time}; NULL when malformed. */
static json_t *entry(const redisReply *e)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[1]->type != REDIS_REPLY_ARRAY) return NULL;
    const redisReply *f = e->element[1];
    json_t *o = json_object();
    for (size_t j = 0; j + 1 < f->elements; j += 2) {
        if (f->element[j]->type != REDIS_REPLY_STRING || f->element[j + 1]->type != REDIS_REPLY_STRING) continue;
        const char *k = f->element[j]->str, *v = f->element[j + 1]->str;
        double d;
        if (parse_double(v, &d) < 0) continue;
        if (!strcmp(k, "loss") || !strcmp(k, "time"))
            json_object_set_new(o, k, json_real(d));
        else if (!strcmp(k, "version") || !strcmp(k, "tokens"))
            json_object_set_new(o, k, json_integer((json_int_t)d));
    }
    if (!json_object_get(o, "loss") || !json_object_get(o, "version")) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *evals_fetch(rconn *rc, const char *run, int count, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(rc, "XREVRANGE %s + - COUNT %d", key_run(key, sizeof key, run, "evals"), count);
    if (rconn_reply_error(rc, r, err, errlen) < 0 || r->type != REDIS_REPLY_ARRAY) {
        if (r && r->type != REDIS_REPLY_ERROR) err_set(err, errlen, "XREVRANGE %s: unexpected reply", key);
        if (r) freeReplyObject(r);
        return NULL;
    }
    json_t *out = json_array();
    for (size_t i = r->elements; i-- > 0;) { /* newest first -> oldest first */
        json_t *o = entry(r->element[i]);
        if (o) json_array_append_new(out, o);
    }
    freeReplyObject(r);
    return out;
}

int evals_attach(rconn *rc, const char *run, json_t *raw, char *err, size_t errlen)
{
    json_t *ev = evals_fetch(rc, run, EVALS_SHOWN, err, errlen);
    if (!ev) return -1;
    json_object_set_new(raw, "evals", ev);
    return 0;
}
