/* main.c: bin/coordinator, dispatching to its subcommands (see coordinator.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "checkpoint.h"
#include "coordinator.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: bin/coordinator COMMAND --redis URL --run NAME [options]\n"
               "\n"
               "commands:\n"
               "  init      create a run (parameters, shards, optimizer settings); see `init --help`\n"
               "  status    show rounds, workers, shard-servers, shards and leases (--json for JSON)\n"
               "  serve     operator process: evicts dead workers on time (several may run);\n"
               "            --http [HOST:]PORT adds the dashboard, /status, /metrics, /control\n"
               "  control   kick a worker, set outer lr / momentum / expected workers, shut down\n"
               "  checkpoint save|show   export the run to a safetensors file; see `checkpoint --help`\n"
               "  repair    bring back a run whose durable state is corrupt (roll back, or restore a checkpoint);\n"
               "            see `repair --help`\n"
               "  load-library  load this build's function library into a Redis that holds an older build\n"
               "            (after an upgrade of the binaries; no process stops)\n"
               "\n"
               "Every command takes the run's Redis from one of:\n" REDIS_URL_HELP);
}

int main(int argc, char **argv)
{
    log_init("coordinator");
    signal(SIGPIPE, SIG_IGN); /* hiredis writes with write(): a closed Redis socket must not kill us */
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "init")) return cmd_init(argc - 2, argv + 2);
    if (!strcmp(argv[1], "status")) return cmd_status(argc - 2, argv + 2);
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(argv[1], "checkpoint")) return cmd_checkpoint(argc - 2, argv + 2);
    if (!strcmp(argv[1], "control")) return cmd_control(argc - 2, argv + 2);
    if (!strcmp(argv[1], "repair")) return cmd_repair(argc - 2, argv + 2);
    if (!strcmp(argv[1], "load-library")) return cmd_load_library(argc - 2, argv + 2);
    if (argv[1][0] == '-') /* `coordinator --redis URL --run R status`: the command goes first */
        fprintf(stderr,
                "coordinator: the COMMAND comes first, then its flags (e.g. `bin/coordinator status --redis URL "
                "--run NAME`), got '%s'\n\n",
                argv[1]);
    else
        fprintf(stderr, "coordinator: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
