/* layout_check.c: the trainer's tensors against the run's recorded layout (see layout_check.h). */
#include "layout_check.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

static void shape_str(json_t *shape, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (size_t d = 0; d < json_array_size(shape) && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, d ? ", %lld" : "%lld",
                              (long long)json_integer_value(json_array_get(shape, d)));
    if (n < cap) snprintf(out + n, cap - n, "]");
}

int layout_check(const char *layout, const model_tensor *t, int nt, const char *trainer, char *err, size_t errlen)
{
    if (!layout) return 0;
    json_error_t je;
    json_t *arr = json_loads(layout, 0, &je);
    if (!json_is_array(arr)) {
        err_set(err, errlen, "the run's layout is not a JSON array (%s): the run's config is damaged", je.text);
        json_decref(arr);
        return -1;
    }
    int rc = 0;
    size_t n = json_array_size(arr);
    for (size_t i = 0; rc == 0 && (i < n || i < (size_t)nt); i++) {
        const char *rname = "(none)", *mname = i < (size_t)nt ? t[i].name : "(none)";
        char rs[128] = "", ms[128] = "";
        json_int_t roff = -1;
        json_t *shape = NULL;
        if (i < n && json_unpack(json_array_get(arr, i), "[s,o,I]", &rname, &shape, &roff) == 0)
            shape_str(shape, rs, sizeof rs);
        if (i < (size_t)nt) model_tensor_shape_str(&t[i], ms, sizeof ms);
        if (strcmp(rname, mname) != 0 || strcmp(rs, ms) != 0 || (i < (size_t)nt && roff != (json_int_t)t[i].offset)) {
            err_set(err, errlen,
                    "tensor %zu of the run is '%s' %s at offset %lld, the %s trainer's is '%s' %s at "
                    "offset %lld: this worker's model is not the run's (start it with the model the run was "
                    "initialised with; `coordinator status` shows it)",
                    i, rname, rs, (long long)roff, trainer, mname, ms, i < (size_t)nt ? (long long)t[i].offset : -1LL);
            rc = -1;
        }
    }
    json_decref(arr);
    return rc;
}
