/* fcall.c: the argument vector of a call of the run's function library, and the synchronous call (see
 * fcall.h). */
#include "redis/fcall.h"

#include <stdlib.h>

int fcall_argv(const char **argv, int cap, const char *fn, const char *config_key, int nargs, const char **args)
{
    if (nargs < 0 || nargs > cap - 4) return -1;
    argv[0] = "FCALL";
    argv[1] = fn;
    argv[2] = "1";
    argv[3] = config_key;
    for (int i = 0; i < nargs; i++) argv[4 + i] = args[i];
    return nargs + 4;
}

redisReply *fcall_run(rconn *c, const char *config_key, const char *fn, int nargs, const char **args)
{
    const char **argv = malloc((size_t)(nargs + 4) * sizeof *argv);
    if (argv == NULL) return NULL;
    int argc = fcall_argv(argv, nargs + 4, fn, config_key, nargs, args);
    redisReply *r = argc < 0 ? NULL : rconn_command_argv(c, argc, argv, NULL);
    free(argv);
    return r;
}
