/* mpmap.c: field look-up in a msgpack map (see mpmap.h), on msgpack-c's unpacker. */
#include "format/mpmap.h"

#include <msgpack.h>
#include <stdint.h>
#include <string.h>

#include "format/mpscan.h"

/* Unpack buf and find key; on success *val points into the unpacked object (valid until destroy). */
static int find(msgpack_unpacked *u, const void *buf, size_t len, const char *key, msgpack_object **val)
{
    size_t objlen;
    msgpack_unpacked_init(u);
    if (mpscan_object(buf, len, &objlen, NULL, 0) < 0) return -1;
    if (msgpack_unpack_next(u, buf, len, NULL) != MSGPACK_UNPACK_SUCCESS || u->data.type != MSGPACK_OBJECT_MAP)
        return -1;
    size_t klen = strlen(key);
    msgpack_object_map *m = &u->data.via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        msgpack_object *k = &m->ptr[i].key;
        /* msgpack-c gives an empty string a NULL pointer, which memcmp must not see */
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            (klen == 0 || memcmp(k->via.str.ptr, key, klen) == 0)) {
            *val = &m->ptr[i].val;
            return 0;
        }
    }
    return -1;
}

int mpmap_get_str(const void *buf, size_t len, const char *key, char *out, size_t cap)
{
    msgpack_unpacked u;
    msgpack_object *v;
    int rc = -1;
    if (find(&u, buf, len, key, &v) == 0 && v->type == MSGPACK_OBJECT_STR && cap > 0) {
        size_t n = v->via.str.size < cap - 1 ? v->via.str.size : cap - 1;
        if (n > 0) memcpy(out, v->via.str.ptr, n);
        out[n] = '\0';
        rc = 0;
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

int mpmap_get_num(const void *buf, size_t len, const char *key, double *out)
{
    msgpack_unpacked u;
    msgpack_object *v;
    int rc = -1;
    if (find(&u, buf, len, key, &v) == 0) {
        rc = 0;
        if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            *out = (double)v->via.u64;
        else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            *out = (double)v->via.i64;
        else if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
            *out = v->via.f64;
        else
            rc = -1;
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}
