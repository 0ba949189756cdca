/* The kvio command: one function per subcommand, each taking its arguments
 * (argv[0] the command name) and returning the process exit status; the
 * option parser they share. */
#ifndef KVIO_CLI_H
#define KVIO_CLI_H

#include "kvio/status.h"

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for a command's error message: one that names a long path (a
 * results directory, a trace) still ends with its cause. */
#define KVIO_CLI_ERROR_MAX 8192

#define KVIO_EXIT_OK 0
#define KVIO_EXIT_FAILED 1
#define KVIO_EXIT_USAGE 2

/* Maps a status to an exit status: bad input → 2, other errors → 1. */
int kvio_cli_exit_status(kvio_status_t status);

/* One option of a command: --name, and -c too when short_name is 'c'; it
 * takes a value (--name VALUE, --name=VALUE, -c VALUE, -cVALUE; never
 * empty) when value_name is set: what messages call it ("a directory"). */
typedef struct kvio_cli_option {
    const char *name;       /* NULL ends a table */
    char short_name;        /* 0: long form only */
    const char *value_name; /* NULL: a flag */
    int id;                 /* what kvio_cli_parser_next returns for it; > 0 */
} kvio_cli_option_t;

#define KVIO_CLI_MAX_OPTIONS 32

/* kvio_cli_parser_next's results besides an option's id. */
#define KVIO_CLI_END (-1)     /* no arguments left */
#define KVIO_CLI_ERROR (-2)   /* a usage error, printed: exit KVIO_EXIT_USAGE */
#define KVIO_CLI_OPERAND (-3) /* an argument that is no option (a workload) */

/* getopt_long over a command's argv, with the command's table. Borrows
 * argv, options and command; holds getopt's global state, so one parser
 * at a time. */
typedef struct kvio_cli_parser {
    const char *command; /* "kvio run": how messages name the command */
    int argc;
    char **argv; /* argv[0]: the command's name, not scanned */
    const kvio_cli_option_t *options;
    size_t num_options;
    struct option long_options[KVIO_CLI_MAX_OPTIONS + 1];
    char short_options[2 * KVIO_CLI_MAX_OPTIONS + 4];
    bool operands_only; /* past "--" */
} kvio_cli_parser_t;

/* Starts reading argv[1..argc-1] with the options (a table ending in a NULL
 * name); command names the command in messages ("kvio cost"). */
void kvio_cli_parser_init(kvio_cli_parser_t *parser, const char *command, int argc, char **argv,
                          const kvio_cli_option_t *options);

/* The next argument, in the order given: an option's id with *value_p its
 * value (NULL for a flag), KVIO_CLI_OPERAND with *value_p the operand
 * (everything after "--" is one), KVIO_CLI_END, or KVIO_CLI_ERROR once
 * "kvio cost: unknown option '--modle' (see kvio cost --help)" (or a
 * missing value, a value given to a flag, an ambiguous prefix) is printed. */
int kvio_cli_parser_next(kvio_cli_parser_t *parser, const char **value_p);

/* An operand that may come once (the workload) into *slot_p; a second one
 * is a usage error: "kvio run: more than one workload given ('a' and 'b')".
 * Returns KVIO_EXIT_OK or KVIO_EXIT_USAGE. */
int kvio_cli_take_one(const char *command, const char *what, const char **slot_p,
                      const char *value);

/* A repeated option's value (--set) or an operand (an input) appended to
 * list, which holds max; past that "kvio run: more than 256 --set options".
 * Returns KVIO_EXIT_OK or KVIO_EXIT_USAGE. */
int kvio_cli_append(const char *command, const char *what, const char **list, size_t *count_p,
                    size_t max, const char *value);

/* Catches SIGINT and SIGTERM from now on and returns the flag they set, for
 * a run's options.stop: the run in progress stops, writes what it has and
 * marks it incomplete. The flag counts the signals (up to 2: kvio serve
 * drains on the first, stops on the second). A signal handler can only
 * reach a global, so there is one flag for the process. */
volatile sig_atomic_t *kvio_cli_stop_on_signals(void);

struct kvio_model;
struct kvio_gpu;
struct kvio_cost_config;

/* What kvio cost and kvio fit are told of the model they cost: presets,
 * engine profile, parallelism and number formats (cli/cost_setup.c). */
typedef struct kvio_cli_cost_setup {
    const char *model_name, *gpu_name, *engine_name;
    const char *weight_dtype, *activation_dtype, *kv_dtype;
    const char *tp, *pp;
    bool expert_parallel;
} kvio_cli_cost_setup_t;

/* The options both commands take, ids from KVIO_CLI_COST_SETUP_FIRST on
 * (a command's own ids stay below it). */
enum {
    KVIO_CLI_COST_SETUP_FIRST = 100,
    KVIO_CLI_COST_MODEL = KVIO_CLI_COST_SETUP_FIRST, KVIO_CLI_COST_GPU, KVIO_CLI_COST_ENGINE,
    KVIO_CLI_COST_TP, KVIO_CLI_COST_PP, KVIO_CLI_COST_EP, KVIO_CLI_COST_WEIGHT_DTYPE,
    KVIO_CLI_COST_ACTIVATION_DTYPE, KVIO_CLI_COST_KV_DTYPE,
};
#define KVIO_CLI_COST_SETUP_OPTIONS                                                        \
    {"model", 0, "a model preset", KVIO_CLI_COST_MODEL},                                   \
    {"gpu", 0, "a GPU preset", KVIO_CLI_COST_GPU},                                         \
    {"engine", 0, "an engine profile", KVIO_CLI_COST_ENGINE},                              \
    {"tp", 0, "a count", KVIO_CLI_COST_TP}, {"pp", 0, "a count", KVIO_CLI_COST_PP},        \
    {"ep", 0, NULL, KVIO_CLI_COST_EP},                                                     \
    {"weight-dtype", 0, "a format", KVIO_CLI_COST_WEIGHT_DTYPE},                           \
    {"activation-dtype", 0, "a format", KVIO_CLI_COST_ACTIVATION_DTYPE},                   \
    {"kv-dtype", 0, "a format", KVIO_CLI_COST_KV_DTYPE}

/* A count given to option (its name looked up in options) of at least
 * min: "kvio fit: --batch-size needs an integer of at least 1, got '0'".
 * Returns KVIO_EXIT_OK or KVIO_EXIT_USAGE. */
int kvio_cli_cost_count(const char *command, const kvio_cli_option_t *options, int option,
                        const char *text, uint64_t min, uint64_t *value_p);

/* Takes a shared option (true) or leaves it to the command (false). */
bool kvio_cli_cost_setup_take(kvio_cli_cost_setup_t *setup, int option, const char *value);

/* Resolves the model and GPU presets and fills a roofline cost config
 * from the setup (the defaults of kvio_cost_options otherwise). Prints
 * "kvio cost: ..." on bad input; returns an exit status. The caller frees
 * the config with kvio_config_free(kvio_cost_options, config_p). */
int kvio_cli_cost_setup_build(const kvio_cli_cost_setup_t *setup, const char *command,
                              struct kvio_model *model_p, struct kvio_gpu *gpu_p,
                              struct kvio_cost_config *config_p);

/* Each command takes its arguments with argv[0] its own name. */
int kvio_cmd_run(int argc, char **argv);
int kvio_cmd_validate(int argc, char **argv);
int kvio_cmd_list(int argc, char **argv);
int kvio_cmd_cachesim(int argc, char **argv);
int kvio_cmd_cost(int argc, char **argv);
int kvio_cmd_fit(int argc, char **argv);
int kvio_cmd_stream(int argc, char **argv);
int kvio_cmd_compare(int argc, char **argv);
int kvio_cmd_capacity(int argc, char **argv);
int kvio_cmd_report(int argc, char **argv);
int kvio_cmd_serve(int argc, char **argv);
int kvio_cmd_prefix(int argc, char **argv);
int kvio_cmd_mlperf(int argc, char **argv);

#endif
