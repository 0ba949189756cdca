/* kvio run, validate and list: placeholder while the foundation lands. */
#include "cli/cli.h"

#include <stdio.h>

int kvio_cmd_run(int argc, char **argv) { (void)argc; (void)argv; return KVIO_EXIT_USAGE; }
int kvio_cmd_validate(int argc, char **argv) { (void)argc; (void)argv; return KVIO_EXIT_USAGE; }
int kvio_cmd_list(int argc, char **argv) { (void)argc; (void)argv; return KVIO_EXIT_USAGE; }
