/* checkpoint_cmd.c: the `coordinator checkpoint save|show` subcommand (see checkpoint.h and
 * docs/checkpoints.md): flags, then checkpoint_export_ex / checkpoint_save_dir or checkpoint_read. */
#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/opts.h"
#include "base/util.h"
#include "coordinator.h"
#include "format/runconf.h"
#include "math/outer.h"

static void ck_usage(FILE *f)
{
    fprintf(f,
            "usage: bin/coordinator checkpoint save --redis URL --run NAME (--out FILE | --dir DIR [--keep K])\n"
            "                                       [--timeout S]\n"
            "       bin/coordinator checkpoint show FILE\n"
            "\n"
            "save: export the run's global parameters, outer momentum (and an async run's Delayed Nesterov\n"
            "      buffer) and run config, each fragment's shards at one committed version (a run shut\n"
            "      down: as its shards stay), as one safetensors file (+ a .json side file), written\n"
            "      atomically.\n"
            "  --out FILE                write FILE (e.g. run.safetensors)\n"
            "  --dir DIR                 write DIR/checkpoint-<version>.safetensors ...\n"
            "  --keep K                  ... and delete all but the newest K there (default 0: keep all)\n"
            "  --timeout S               wait up to S seconds for each fragment's shards to be at one\n"
            "                            version (default 60)\n" COORD_HELP
            "show: validate FILE (format, sizes, checksums) and print its metadata.\n"
            "\n"
            "Resume with: bin/coordinator init --redis URL --run NEW --from-checkpoint FILE\n"
            "Format: docs/checkpoints.md\n");
}

static int ck_save(int argc, char **argv)
{
    coord_common cc;
    memset(&cc, 0, sizeof cc);
    const char *out = NULL, *dir = NULL;
    long long keep = 0;
    int keep_given = 0;
    double timeout = CKPT_DEFAULT_TIMEOUT_MS / 1000.0;
    const opt_spec specs[] = {
        COORD_COMMON_OPTS(&cc),
        {.name = "out", .kind = OPT_STRING, .dest = &out},
        {.name = "dir", .kind = OPT_STRING, .dest = &dir},
        {.name = "keep",
         .kind = OPT_LLONG,
         .dest = &keep,
         .lo = 0,
         .hi = 1000000,
         .wants = "an integer >= 0",
         .given = &keep_given},
        {.name = "timeout", .kind = OPT_DOUBLE, .dest = &timeout, .min = 0, .max = 86400, .wants = "seconds"},
        {0},
    };
    int prc = opts_parse_cmd("coordinator checkpoint save", ck_usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    if (!out == !dir) {
        fprintf(stderr, "coordinator checkpoint save: give exactly one of --out FILE or --dir DIR (see --help)\n");
        return 2;
    }
    if (keep_given && !dir) {
        fprintf(stderr, "coordinator checkpoint save: --keep needs --dir DIR (it prunes the checkpoints there; --out "
                        "writes one file)\n");
        return 2;
    }
    rconn *rc;
    int st = coord_connect(&cc, &rc);
    if (st != 0) return st;
    char err[1024], path[4200];
    int64_t version = -1;
    uint64_t t0 = now_ms();
    int ok = dir ? checkpoint_save_dir(rc, cc.run, dir, (int)keep, (int)(timeout * 1000), path, sizeof path, &version,
                                       err, sizeof err)
                 : checkpoint_export_ex(rc, cc.run, out, (int)(timeout * 1000), &version, err, sizeof err);
    rconn_free(rc);
    if (ok < 0) {
        fprintf(stderr, "coordinator checkpoint save: %s\n", err);
        return 1;
    }
    char sp[4200];
    checkpoint_side_path(dir ? path : out, sp, sizeof sp);
    printf("saved run '%s' at version %" PRId64 " to %s (+ %s) in %llu ms\n", cc.run, version, dir ? path : out, sp,
           (unsigned long long)(now_ms() - t0));
    return 0;
}

/* "name            a,b,..." of a checkpoint's per-shard counts, when it has them (its shards at different
 * versions). */
static void print_counts(const char *name, const uint64_t *v, int n)
{
    char *list = v ? runconf_format_counts(v, n) : NULL;
    if (list) printf("%-15s %s\n", name, list);
    free(list);
}

static int ck_show(int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '-') {
        if (argc == 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) {
            ck_usage(stdout);
            return 0;
        }
        fprintf(stderr, "coordinator checkpoint show: give one FILE (see --help)\n");
        return OPTS_EXIT_USAGE;
    }
    checkpoint ck;
    char err[1024];
    if (checkpoint_file_readable(argv[0], err, sizeof err) < 0) { /* docs/checkpoints.md, "Exit status" */
        fprintf(stderr, "coordinator checkpoint show: %s: %s\n", argv[0], err);
        return OPTS_EXIT_USAGE;
    }
    if (checkpoint_read(argv[0], 1, &ck, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator checkpoint show: %s\n", err);
        return 1;
    }
    printf("file            %s (valid)\n", argv[0]);
    printf("run             %s\nversion         %" PRId64 "\ntrainer         %s (%s)\nnumel           %" PRIu64 "\n",
           ck.run, ck.version, ck.trainer, ck.model, ck.numel);
    printf("shards          %d\nfragments       %d\nseed            %" PRIu64 "\n", ck.nshards, ck.nfragments, ck.seed);
    printf("outer           lr %g momentum %g%s\nhas_momentum    %s\n", ck.outer_lr, ck.outer_momentum,
           ck.nesterov ? " nesterov" : "", ck.has_mom ? "true" : "false");
    printf("params_xxh3     %016" PRIx64 "\nmomentum_xxh3   %016" PRIx64 "\n", digest_f32(ck.params, ck.numel),
           digest_f32(ck.mom, ck.numel));
    if (ck.dn_buffer > 0)
        printf("delayed nesterov N %d (%s), %" PRIu64 " submissions applied, %" PRIu64 " in the buffer\n"
               "dn_buffer_xxh3  %016" PRIx64 "\n",
               ck.dn_buffer, ck.dn_variant, ck.dn_t, ck.dn_t % (uint64_t)ck.dn_buffer, digest_f32(ck.dnbuf, ck.numel));
    print_counts("shard_versions", ck.shard_versions, ck.nshards); /* (version and dn_t above: the lowest) */
    print_counts("dn_t_shards", ck.dn_t_shards, ck.nshards);
    for (int k = 0; k < ck.nshards; k++) {
        uint64_t b = ck.shard_bounds[k];
        printf("shard %d %016" PRIx64 "\n", k, digest_f32(ck.params + b, ck.shard_bounds[k + 1] - b));
    }
    checkpoint_free(&ck);
    return 0;
}

int cmd_checkpoint(int argc, char **argv)
{
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        ck_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "save")) return ck_save(argc - 1, argv + 1);
    if (!strcmp(argv[0], "show")) return ck_show(argc - 1, argv + 1);
    fprintf(stderr, "coordinator checkpoint: unknown action '%s' (save or show)\n\n", argv[0]);
    ck_usage(stderr);
    return 2;
}
