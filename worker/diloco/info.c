/* info.c: what a host can ask libdiloco without changing anything: the library's version and sizes
 * (for bindings that mirror diloco.h's structs, e.g. the Python package), and the facts about a
 * session and its run. */
#include "internal.h"

/* log_callback gets log.h's levels as they are */
_Static_assert((int)DILOCO_LOG_DEBUG == (int)LOG_DEBUG && (int)DILOCO_LOG_INFO == (int)LOG_INFO &&
                   (int)DILOCO_LOG_WARN == (int)LOG_WARN && (int)DILOCO_LOG_ERROR == (int)LOG_ERROR,
               "diloco.h's log levels are log.h's");

const char *diloco_version_string(void)
{
    return DILOCO_VERSION_STRING;
}
int diloco_abi_version(void)
{
    return DILOCO_ABI_VERSION;
}
size_t diloco_options_size(void)
{
    return sizeof(diloco_options);
}
size_t diloco_sync_info_size(void)
{
    return sizeof(diloco_sync_info);
}

int diloco_last_sync(const diloco *d, diloco_sync_info *out)
{
    if (!d->have_last) return -1;
    *out = d->last;
    return 0;
}

int diloco_sync_every(const diloco *d)
{
    return d->sync_every;
}
const char *diloco_worker_id(const diloco *d)
{
    return d->worker_id;
}
int64_t diloco_version(const diloco *d)
{
    /* fragment 0's round may be writing it on its thread (dl_set_frag_version) */
    return d->frag_version ? __atomic_load_n(&d->frag_version[0], __ATOMIC_RELAXED) : -1;
}

size_t diloco_numel(const diloco *d)
{
    return d->numel;
}
int diloco_is_async(const diloco *d)
{
    return d->rc.async;
}
int diloco_num_fragments(const diloco *d)
{
    return d->rc.nfragments;
}
const char *diloco_run_layout(const diloco *d)
{
    return d->rc.layout;
}

int diloco_fragment_range(const diloco *d, int fragment, size_t *offset, size_t *count)
{
    if (fragment < 0 || fragment >= d->rc.nfragments) return -1;
    size_t lo = dl_frag_start(d, fragment), hi = dl_frag_start(d, fragment + 1);
    *offset = lo;
    *count = hi - lo;
    return 0;
}
