/* kvio: command-line entry point. Parses global flags, then dispatches to a
 * subcommand; only this file decides the process exit status. */
#include "cli/cli.h"

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
    {"compare", kvio_cmd_compare, "run a workload's variants side by side (--vary key=a,b)"},
    {"validate", kvio_cmd_validate, "check a workload file; --dump prints the effective config"},
    {"list", kvio_cmd_list, "list the embedded presets and every plug-in by kind"},
    {"stream", kvio_cmd_stream, "export a workload's request stream (or a trace) as JSONL"},
    {"cachesim", kvio_cmd_cachesim, "replay a trace's block hashes through a prefix cache"},
    {"report", kvio_cmd_report, "charts of results, compare sets and cachesim output as HTML"},
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
                 "exit status: 0 success, 1 run failed, 2 usage or input error\n");
}

const char *kvio_cli_option_value(int argc, char **argv, int *index_p, const char *name)
{
    const char *arg = argv[*index_p];
    size_t length = strlen(name);
    if (strncmp(arg, name, length) == 0 && arg[length] == '=')
        return arg + length + 1;
    if (strcmp(arg, name) == 0 && *index_p + 1 < argc) {
        (*index_p)++;
        return argv[*index_p];
    }
    return NULL;
}

bool kvio_cli_is_option(const char *arg, const char *name)
{
    size_t length = strlen(name);
    return strncmp(arg, name, length) == 0 && (arg[length] == '\0' || arg[length] == '=');
}

int kvio_cli_exit_status(kvio_status_t status)
{
    if (status == KVIO_OK)
        return KVIO_EXIT_OK;
    return kvio_status_is_bad_input(status) ? KVIO_EXIT_USAGE : KVIO_EXIT_FAILED;
}

int main(int argc, char **argv)
{
    /* A peer that closes its socket (Redis shut down mid-write) is an error
     * the run reports, not a reason to die with no results. */
    signal(SIGPIPE, SIG_IGN);
    int arg = 1;
    int verbosity = KVIO_LOG_WARN;
    for (; arg < argc && argv[arg][0] == '-'; arg++) {
        const char *flag = argv[arg];
        if (strcmp(flag, "-v") == 0 || strcmp(flag, "--verbose") == 0) {
            verbosity++;
        } else if (strcmp(flag, "-vv") == 0) {
            verbosity += 2;
        } else if (strcmp(flag, "-q") == 0 || strcmp(flag, "--quiet") == 0) {
            verbosity = KVIO_LOG_ERROR;
        } else if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
            print_usage(stdout);
            return KVIO_EXIT_OK;
        } else if (strcmp(flag, "--version") == 0) {
            char text[1024];
            kvio_build_describe(text, sizeof(text));
            fputs(text, stdout);
            return KVIO_EXIT_OK;
        } else {
            fprintf(stderr, "kvio: unknown option '%s'\n", flag);
            print_usage(stderr);
            return KVIO_EXIT_USAGE;
        }
    }
    if (arg >= argc) {
        print_usage(stderr);
        return KVIO_EXIT_USAGE;
    }
    /* The verbosity flags also after the command (`kvio run chat -q`): taken
     * out of its arguments (up to a "--"), which no command uses otherwise. */
    int kept = arg + 1;
    bool rest = false;
    for (int i = arg + 1; i < argc; i++) {
        const char *flag = argv[i];
        rest = rest || strcmp(flag, "--") == 0;
        if (!rest && (strcmp(flag, "-v") == 0 || strcmp(flag, "--verbose") == 0))
            verbosity++;
        else if (!rest && strcmp(flag, "-vv") == 0)
            verbosity += 2;
        else if (!rest && (strcmp(flag, "-q") == 0 || strcmp(flag, "--quiet") == 0))
            verbosity = KVIO_LOG_ERROR;
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    kvio_log_set_level(verbosity > KVIO_LOG_DEBUG ? KVIO_LOG_DEBUG : (kvio_log_level_t)verbosity);
    for (const command_t *command = commands; command->name != NULL; command++) {
        if (strcmp(command->name, argv[arg]) == 0)
            return command->main(argc - arg - 1, argv + arg + 1);
    }
    fprintf(stderr, "kvio: unknown command '%s' (see kvio --help)\n", argv[arg]);
    return KVIO_EXIT_USAGE;
}
