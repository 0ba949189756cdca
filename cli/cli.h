/* The kvio command: one function per subcommand, each taking the arguments
 * after the command name and returning the process exit status. */
#ifndef KVIO_CLI_H
#define KVIO_CLI_H

#include "kvio/status.h"

#include <stdbool.h>

#define KVIO_EXIT_OK 0
#define KVIO_EXIT_FAILED 1
#define KVIO_EXIT_USAGE 2

/* Maps a status to an exit status: bad input → 2, other errors → 1. */
int kvio_cli_exit_status(kvio_status_t status);

/* The value of the option at argv[*index_p] given as "--name value" (then
 * *index_p moves to the value) or "--name=value"; NULL when argv[*index_p]
 * is not that option or its value is missing. */
const char *kvio_cli_option_value(int argc, char **argv, int *index_p, const char *name);

/* True when arg is "--name" or "--name=...". */
bool kvio_cli_is_option(const char *arg, const char *name);

int kvio_cmd_run(int argc, char **argv);
int kvio_cmd_validate(int argc, char **argv);
int kvio_cmd_list(int argc, char **argv);
int kvio_cmd_cachesim(int argc, char **argv);
int kvio_cmd_cost(int argc, char **argv);
int kvio_cmd_fit(int argc, char **argv);
int kvio_cmd_stream(int argc, char **argv);
int kvio_cmd_compare(int argc, char **argv);
int kvio_cmd_report(int argc, char **argv);

#endif
