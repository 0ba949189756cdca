/* kvio: command-line entry point. Parses global flags, then dispatches to a
 * subcommand; only this file decides the process exit status. */
#include "cli/cli.h"

#include "kvio/config.h"

#include "kvio/sysinfo.h"

#include "kvio/log.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} command_t;

static const command_t commands[] = {
    {"run", kvio_cmd_run, "run a workload (file or preset; quickstart by default)"},
    {"serve", kvio_cmd_serve, "serve a workload's engine behind an OpenAI-compatible HTTP endpoint"},
    {"compare", kvio_cmd_compare, "run a workload's variants side by side (--vary key=a,b)"},
    {"capacity", kvio_cmd_capacity, "the highest arrival rate that meets an SLO (--slo ...)"},
    {"validate", kvio_cmd_validate, "check a workload file; --dump prints the effective config"},
    {"list", kvio_cmd_list, "list the embedded presets and every plug-in by kind"},
    {"stream", kvio_cmd_stream, "export a workload's request stream (or a trace) as JSONL"},
    {"cachesim", kvio_cmd_cachesim, "replay a trace's block hashes through a prefix cache"},
    {"prefix", kvio_cmd_prefix, "where a conversation log's prompts stop hitting the prefix cache"},
    {"report", kvio_cmd_report, "charts of results, compare sets and cachesim output as HTML"},
    {"mlperf", kvio_cmd_mlperf, "MLPerf Storage v3.0's KV-cache benchmark against --dir DIR"},
    {"cost", kvio_cmd_cost, "iteration time the cost model gives a batch"},
    {"fit", kvio_cmd_fit, "fit the linear cost model to measured iterations"},
    {NULL, NULL, NULL},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: kvio [-v|-q] COMMAND [ARGS]\n\n"
                 "kvio is an I/O benchmark and emulator for LLM inference serving\n"
                 "coupled to online training.\n\ncommands:\n");
    for (const command_t *command = commands; command->name != NULL; command++)
        fprintf(out, "  %-10s %s\n", command->name, command->summary);
    fprintf(out, "\nglobal options:\n"
                 "  -v, --verbose  more log output (repeat for debug)\n"
                 "  -q, --quiet    errors only\n"
                 "  -h, --help     this help; `kvio COMMAND --help` for a command\n"
                 "  --version      print the version\n\n"
                 "A command's options take their value as --name VALUE or --name=VALUE\n"
                 "(short ones as -o VALUE or -oVALUE), before or after its operands;\n"
                 "`--` ends the options.\n\n"
                 "exit status: 0 success, 1 run failed, 2 usage or input error\n");
}

int kvio_cli_exit_status(kvio_status_t status)
{
    if (status == KVIO_OK)
        return KVIO_EXIT_OK;
    return kvio_status_is_bad_input(status) ? KVIO_EXIT_USAGE : KVIO_EXIT_FAILED;
}

enum { GLOBAL_VERBOSE = 1, GLOBAL_QUIET, GLOBAL_HELP, GLOBAL_VERSION };

static const kvio_cli_option_t global_options[] = {
    {"verbose", 'v', NULL, GLOBAL_VERBOSE},
    {"quiet", 'q', NULL, GLOBAL_QUIET},
    {"help", 'h', NULL, GLOBAL_HELP},
    {"version", 0, NULL, GLOBAL_VERSION},
    {NULL, 0, NULL, 0},
};

/* The verbosity flags also after the command (`kvio run chat -q`): taken
 * out of its arguments (up to a "--"), which no command uses otherwise.
 * Returns the arguments kept. */
static int take_verbosity(int argc, char **argv, int *verbosity_p)
{
    int kept = 0;
    bool rest = false;
    for (int i = 0; i < argc; i++) {
        const char *flag = argv[i];
        rest = rest || strcmp(flag, "--") == 0;
        if (!rest && (strcmp(flag, "-v") == 0 || strcmp(flag, "--verbose") == 0))
            (*verbosity_p)++;
        else if (!rest && strcmp(flag, "-vv") == 0)
            *verbosity_p += 2;
        else if (!rest && (strcmp(flag, "-q") == 0 || strcmp(flag, "--quiet") == 0))
            *verbosity_p = KVIO_LOG_ERROR;
        else
            argv[kept++] = argv[i];
    }
    return kept;
}

int main(int argc, char **argv)
{
    /* A peer that closes its socket (Redis shut down mid-write) is an error
     * the run reports, not a reason to die with no results. */
    signal(SIGPIPE, SIG_IGN);
    int verbosity = KVIO_LOG_WARN;
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio", argc, argv, global_options);
    const char *name = NULL, *value = NULL;
    /* The global options end at the command, the first operand. */
    for (int option = 0; name == NULL && option != KVIO_CLI_END;) {
        switch (option = kvio_cli_parser_next(&parser, &value)) {
        case KVIO_CLI_OPERAND:
            name = value;
            break;
        case GLOBAL_VERBOSE:
            verbosity++;
            break;
        case GLOBAL_QUIET:
            verbosity = KVIO_LOG_ERROR;
            break;
        case GLOBAL_HELP:
            print_usage(stdout);
            return KVIO_EXIT_OK;
        case GLOBAL_VERSION: {
            char text[1024];
            kvio_build_describe(text, sizeof(text));
            fputs(text, stdout);
            return KVIO_EXIT_OK;
        }
        case KVIO_CLI_ERROR:
            print_usage(stderr);
            return KVIO_EXIT_USAGE;
        }
    }
    if (name == NULL) {
        print_usage(stderr);
        return KVIO_EXIT_USAGE;
    }
    /* The command's argv: its name, then the arguments after it. */
    int command_argc = argc - optind + 1;
    char **command_argv = argv + optind - 1;
    command_argc = 1 + take_verbosity(command_argc - 1, command_argv + 1, &verbosity);
    kvio_log_set_level(verbosity > KVIO_LOG_DEBUG ? KVIO_LOG_DEBUG : (kvio_log_level_t)verbosity);
    for (const command_t *command = commands; command->name != NULL; command++) {
        if (strcmp(command->name, name) == 0)
            return command->main(command_argc, command_argv);
    }
    size_t count = 0;
    while (commands[count].name != NULL)
        count++;
    const char *close = kvio_closest_name(name, &commands[0].name, count, sizeof(command_t));
    if (close != NULL)
        fprintf(stderr, "kvio: unknown command '%s' (did you mean '%s'? see kvio --help)\n",
                name, close);
    else
        fprintf(stderr, "kvio: unknown command '%s' (see kvio --help)\n", name);
    return KVIO_EXIT_USAGE;
}
