/* kvio cachesim: placeholder until the KV-cache module lands. */
#include "cli/cli.h"

#include <stdio.h>

int kvio_cmd_cachesim(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvio: cachesim is not built yet\n");
    return KVIO_EXIT_USAGE;
}
