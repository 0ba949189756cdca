/* The kvio command: one function per subcommand, each taking the arguments
 * after the command name and returning the process exit status. */
#ifndef KVIO_CLI_H
#define KVIO_CLI_H

#include "kvio/status.h"

#define KVIO_EXIT_OK 0
#define KVIO_EXIT_FAILED 1
#define KVIO_EXIT_USAGE 2

/* Maps a status to an exit status: bad input → 2, other errors → 1. */
int kvio_cli_exit_status(kvio_status_t status);

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
