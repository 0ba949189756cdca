/* kvio run, validate and list: thin shells around kvio_workload_load() and
 * kvio_run(); they parse arguments, print errors and pick the exit status. */
#include "cli/cli.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/presets.h"
#include "kvio/run.h"

#define MAX_OVERRIDES 256

/* Whether two paths name the same place: their directories resolved, then
 * their last names (neither need exist). */
static bool same_path(const char *a, const char *b)
{
    char resolved[2][PATH_MAX + 256];
    const char *paths[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        char copy[PATH_MAX];
        snprintf(copy, sizeof(copy), "%s", paths[i]);
        size_t length = strlen(copy);
        while (length > 1 && copy[length - 1] == '/')
            copy[--length] = '\0';
        char *slash = strrchr(copy, '/');
        const char *name = slash != NULL ? slash + 1 : copy;
        const char *dir = slash == NULL ? "." : slash == copy ? "/" : (*slash = '\0', copy);
        char real[PATH_MAX];
        if (realpath(dir, real) == NULL)
            snprintf(real, sizeof(real), "%s", dir);
        snprintf(resolved[i], sizeof(resolved[i]), "%s/%s", real, name);
    }
    return strcmp(resolved[0], resolved[1]) == 0;
}

/* Arguments shared by run and validate. */
typedef struct run_args {
    const char *source;
    const char *overrides[MAX_OVERRIDES];
    size_t num_overrides;
    const char *output_dir;
    const char *event_trace;
    kvio_event_level_t event_trace_level;
    bool force;
    bool dump;
    bool help;
    bool json; /* --format json: summary.json on stdout instead of the table */
    bool allow_invalid; /* exit 0 for a run that completed but is not valid */
    long repeat; /* --repeat: update.control: paired's pairs (0: its default) */
    char percentiles[256]; /* --percentiles LIST, as the override metric_percentiles=LIST */
} run_args_t;

enum {
    RUN_HELP = 1, RUN_SET, RUN_OUTPUT, RUN_EVENT_TRACE, RUN_FORMAT, RUN_FORCE, RUN_DUMP,
    RUN_REPEAT, RUN_PERCENTILES, RUN_ALLOW_INVALID, RUN_EVENT_TRACE_LEVEL,
};

static const kvio_cli_option_t run_options[] = {
    {"help", 'h', NULL, RUN_HELP},
    {"set", 0, "KEY=VALUE", RUN_SET},
    {"output", 'o', "a directory", RUN_OUTPUT},
    {"event-trace", 0, "a file", RUN_EVENT_TRACE},
    {"event-trace-level", 0, "iterations, requests or io", RUN_EVENT_TRACE_LEVEL},
    {"format", 0, "table or json", RUN_FORMAT},
    {"force", 0, NULL, RUN_FORCE},
    {"repeat", 0, "a count", RUN_REPEAT},
    {"percentiles", 0, "a list such as 50,90,99", RUN_PERCENTILES},
    {"allow-invalid", 0, NULL, RUN_ALLOW_INVALID},
    {NULL, 0, NULL, 0},
};

static const kvio_cli_option_t validate_options[] = {
    {"help", 'h', NULL, RUN_HELP},
    {"set", 0, "KEY=VALUE", RUN_SET},
    {"dump", 0, NULL, RUN_DUMP},
    {NULL, 0, NULL, 0},
};

/* One option or operand of run or validate into args; command: "kvio run". */
static int take_run_arg(const char *command, int option, const char *value, run_args_t *args)
{
    switch (option) {
    case RUN_HELP:
        args->help = true;
        return KVIO_EXIT_OK;
    case RUN_SET:
        return kvio_cli_append(command, "--set options", args->overrides, &args->num_overrides,
                               MAX_OVERRIDES, value);
    case RUN_OUTPUT:
        args->output_dir = value;
        return KVIO_EXIT_OK;
    case RUN_EVENT_TRACE:
        args->event_trace = value;
        return KVIO_EXIT_OK;
    case RUN_EVENT_TRACE_LEVEL:
        if (kvio_event_level_parse(value, &args->event_trace_level) != KVIO_OK) {
            fprintf(stderr, "%s: --event-trace-level %s: not iterations, requests or io\n",
                    command, value);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case RUN_FORMAT:
        if (strcmp(value, "json") != 0 && strcmp(value, "table") != 0) {
            fprintf(stderr, "%s: --format takes table or json\n", command);
            return KVIO_EXIT_USAGE;
        }
        args->json = strcmp(value, "json") == 0;
        return KVIO_EXIT_OK;
    case RUN_FORCE:
        args->force = true;
        return KVIO_EXIT_OK;
    case RUN_DUMP:
        args->dump = true;
        return KVIO_EXIT_OK;
    case RUN_ALLOW_INVALID:
        args->allow_invalid = true;
        return KVIO_EXIT_OK;
    case RUN_REPEAT: {
        char *end = NULL;
        args->repeat = strtol(value, &end, 10);
        if (end == value || *end != '\0' || args->repeat < 1) {
            fprintf(stderr, "%s: --repeat needs a count of pairs (update.control: paired), "
                    "got '%s'\n", command, value);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    }
    case RUN_PERCENTILES:
        /* vllm bench serve's --metric-percentiles, as the workload key (so
         * summary.json's config echo keeps it). */
        snprintf(args->percentiles, sizeof(args->percentiles), "metric_percentiles=%s", value);
        return kvio_cli_append(command, "--set options", args->overrides, &args->num_overrides,
                               MAX_OVERRIDES, args->percentiles);
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one(command, "workload", &args->source, value);
    default:
        return KVIO_EXIT_USAGE;
    }
}

static int parse_run_args(const char *command, int argc, char **argv,
                          const kvio_cli_option_t *options, run_args_t *args)
{
    char name[32];
    snprintf(name, sizeof(name), "kvio %s", command);
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, name, argc, argv, options);
    const char *value;
    int option, exit_status = KVIO_EXIT_OK;
    while (exit_status == KVIO_EXIT_OK &&
           (option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END)
        exit_status = take_run_arg(name, option, value, args);
    return exit_status;
}

/* The workload keys after a command's usage: the top level, or the keys of
 * the section named after --help; exit 2 naming the sections when there is
 * no such section. */
static int print_keys(const char *command, const char *section, FILE *out)
{
    struct stat info;
    if (section != NULL &&
        (kvio_preset_find(section) != NULL || stat(section, &info) == 0))
        section = NULL; /* "kvio run chat --help": the workload, not a section */
    if (section != NULL) {
        if (kvio_config_print_help(kvio_workload_options, section, NULL)) {
            fprintf(out, "\nkeys under %s:\n", section);
            kvio_config_print_help(kvio_workload_options, section, out);
            return KVIO_EXIT_OK;
        }
        fprintf(stderr, "kvio %s: no workload key or section '%s'; sections:", command, section);
        for (const kvio_opt_t *option = kvio_workload_options; option->key != NULL; option++)
            if (option->type == KVIO_OPT_SECTION)
                fprintf(stderr, " %s", option->key);
        fprintf(stderr, "\n");
        return KVIO_EXIT_USAGE;
    }
    fprintf(out, "\nworkload keys (YAML; sizes and durations are strings with units;\n"
                 "kvio %s --help SECTION lists a section's keys):\n",
            command);
    kvio_config_print_help(kvio_workload_options, NULL, out);
    return KVIO_EXIT_OK;
}

int kvio_cmd_run(int argc, char **argv)
{
    run_args_t args = {0};
    int exit_status = parse_run_args("run", argc, argv, run_options, &args);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args.help) {
        printf("usage: kvio run [FILE|PRESET] [--set KEY=VALUE]... [-o|--output DIR] [--force]\n"
               "                [--event-trace F.pfw[.gz]] [--event-trace-level L] [--repeat N]\n"
               "                [--format table|json] [--percentiles 50,90,99] [--allow-invalid]\n"
               "       kvio run --help [SECTION|KEY]\n\n"
               "Runs a workload (default: the quickstart preset) and writes a results\n"
               "directory (default results/<name>-<UTC time>-<pid>) with summary.json.\n"
               "An existing output directory is refused unless --force.\n"
               "--event-trace writes Chrome trace events (DFTracer .pfw; .pfw.gz: gzip) and\n"
               "--event-trace-level L what they hold: iterations, requests (+ ids), io (all).\n"
               "--format json prints summary.json on stdout instead of the table.\n"
               "--repeat N: update.control: paired's pairs (default 3).\n"
               "--percentiles LIST: vllm.json's percentiles (--set metric_percentiles=LIST).\n"
               "Exit 0: valid; 1: failed, cut short or not valid (summary.json's warnings,\n"
               "the first on the last line); 2: bad input. --allow-invalid: 0 for a run\n"
               "that completed but is not valid (KVIO_ALLOW_INVALID=1: for every run).\n");
        return print_keys("run", args.source, stdout);
    }
    if (args.event_trace != NULL && args.output_dir != NULL &&
        same_path(args.event_trace, args.output_dir)) {
        /* (The trace file was made, then the directory refused: "X: exists
         * and is not a directory", for a file kvio had made itself.) */
        fprintf(stderr, "kvio run: --event-trace %s is the results directory (-o %s): give the "
                "trace a name of its own, such as %s/events.pfw\n", args.event_trace,
                args.output_dir, args.output_dir);
        return KVIO_EXIT_USAGE;
    }
    const char *source = args.source != NULL ? args.source : "quickstart";
    /* KVIO_ALLOW_INVALID=1 in the environment: --allow-invalid for every
     * run (scripts and test suites that run kvio for what it writes, not
     * for its verdict). */
    const char *allow = getenv("KVIO_ALLOW_INVALID");
    if (allow != NULL && strcmp(allow, "1") == 0)
        args.allow_invalid = true;
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(source, args.overrides, args.num_overrides,
                                              &workload, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        return kvio_cli_exit_status(status);
    }
    if (args.repeat > 0 && !(workload.mode == KVIO_MODE_EMULATE &&
                             workload.update.control == KVIO_CONTROL_PAIRED)) {
        fprintf(stderr, "kvio run: --repeat counts the pairs of update.control: paired (mode: "
                "emulate); to repeat a run over seeds use kvio compare --repeat\n");
        kvio_workload_free(&workload);
        return KVIO_EXIT_USAGE;
    }
    json_t *summary = NULL;
    kvio_result_t *verdict = NULL;
    kvio_run_options_t options = {
        .output_dir = args.output_dir, .force = args.force, .source = source,
        .argv = (const char *const *)argv, .argc = argc, .overrides = args.overrides,
        .num_overrides = args.num_overrides,
        .stop = kvio_cli_stop_on_signals(), .event_trace = args.event_trace,
        .event_trace_level = args.event_trace_level, .quiet = args.json,
        .summary_p = args.json ? &summary : NULL, .repeat = args.repeat,
        .result_p = &verdict,
    };
    kvio_run_result_t result;
    memset(&result, 0, sizeof(result));
    status = kvio_run(&workload, &options, &result, error, sizeof(error));
    kvio_workload_free(&workload);
    /* --format json: the summary written, also when the run was incomplete. */
    if (summary != NULL) {
        int failed = json_dumpf(summary, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
        json_decref(summary);
        /* A reader that went away (| head) is a failed write, not a result
         * delivered. */
        if (failed != 0 || fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "kvio: writing the summary to stdout failed: %s\n", strerror(errno));
            return KVIO_EXIT_FAILED;
        }
    }
    if (status != KVIO_OK) {
        kvio_result_destroy(verdict);
        fprintf(stderr, "kvio: %s\n", error[0] ? error : kvio_strerror(status));
        return kvio_cli_exit_status(status);
    }
    /* The verdict decides the exit status; the last line says why. */
    exit_status = KVIO_EXIT_OK;
    if (verdict != NULL && !kvio_result_valid(verdict)) {
        size_t count = kvio_result_num_warnings(verdict);
        fprintf(stderr, "kvio: the run is not valid (%zu warning%s; %s/summary.json): %s%s\n",
                count, count == 1 ? "" : "s", result.results_dir,
                kvio_result_warning_message(verdict, 0),
                args.allow_invalid ? " (--allow-invalid: exit 0)" : "");
        exit_status = args.allow_invalid ? KVIO_EXIT_OK : KVIO_EXIT_FAILED;
    }
    kvio_result_destroy(verdict);
    return exit_status;
}

int kvio_cmd_validate(int argc, char **argv)
{
    run_args_t args = {0};
    int exit_status = parse_run_args("validate", argc, argv, validate_options, &args);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args.help) {
        printf("usage: kvio validate FILE|PRESET [--set KEY=VALUE]... [--dump]\n\n"
               "Checks a workload: every key, type and bound, then what the run would\n"
               "refuse: presets, KV capacity, the stream or trace (read whole) with\n"
               "every request fitting the KV cache, file tier directories. --dump\n"
               "prints the effective configuration (defaults filled in) as JSON.\n");
        return print_keys("validate", args.source, stdout);
    }
    if (args.source == NULL) {
        fprintf(stderr, "kvio validate: which file? (kvio validate FILE)\n");
        return KVIO_EXIT_USAGE;
    }
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(args.source, args.overrides, args.num_overrides,
                                              &workload, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        return kvio_cli_exit_status(status);
    }
    status = kvio_workload_check(&workload, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s: %s\n", args.source, error);
        kvio_workload_free(&workload);
        return kvio_cli_exit_status(status);
    }
    if (args.dump) {
        json_t *json = kvio_config_to_json(kvio_workload_options, &workload);
        char *text = json_dumps(json, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("%s\n", text != NULL ? text : "{}");
        free(text);
        json_decref(json);
    } else {
        printf("%s: ok\n", args.source);
    }
    kvio_workload_free(&workload);
    return KVIO_EXIT_OK;
}

int kvio_cmd_list(int argc, char **argv)
{
    enum { LIST_FIGURES = RUN_ALLOW_INVALID + 1 };
    static const kvio_cli_option_t options[] = {{"help", 'h', NULL, RUN_HELP},
                                                {"figures", 0, NULL, LIST_FIGURES},
                                                {NULL, 0, NULL, 0}};
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio list", argc, argv, options);
    const char *value;
    int option = kvio_cli_parser_next(&parser, &value);
    if (option == RUN_HELP) {
        printf("usage: kvio list [--figures]\n\nLists the presets and reproductions embedded in "
               "kvio (run one with kvio run NAME),\nthen every plug-in of each kind (a "
               "workload names one by its name).\n--figures: every figure a run reports, as "
               "docs/results.md's reference table\n(its name in summary.json's metrics, unit, "
               "source, meaning, where it shows).\n");
        return KVIO_EXIT_OK;
    }
    if (option == LIST_FIGURES) {
        kvio_figures_markdown(stdout);
        return KVIO_EXIT_OK;
    }
    if (option == KVIO_CLI_OPERAND)
        fprintf(stderr, "kvio list: unexpected argument '%s'\n", value);
    if (option != KVIO_CLI_END)
        return KVIO_EXIT_USAGE;
    int width = 0;
    for (const kvio_preset_t *preset = kvio_presets; preset->name != NULL; preset++)
        width = (int)strlen(preset->name) > width ? (int)strlen(preset->name) : width;
    static const struct {
        const char *group, *title;
    } groups[] = {
        {"", "presets (kvio run NAME)"},
        {"repro/", "reproductions of published results (kvio run repro/NAME; bench/repro.sh "
                   "runs them all)"},
        {"mlperf/", "MLPerf Storage v3 KV-cache scenarios, as kv-cache.py runs them (kvio run "
                    "mlperf/NAME)"},
    };
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        printf("%s%s:\n", g > 0 ? "\n" : "", groups[g].title);
        for (const kvio_preset_t *preset = kvio_presets; preset->name != NULL; preset++) {
            const char *slash = strchr(preset->name, '/');
            size_t group_length = slash != NULL ? (size_t)(slash - preset->name) + 1 : 0;
            if (group_length == strlen(groups[g].group) &&
                strncmp(preset->name, groups[g].group, group_length) == 0)
                printf("  %-*s %.*s\n", width, preset->name, g > 0 ? 100 : 1000,
                       preset->description);
        }
    }
    for (const kvio_registry_t *const *registry = kvio_registries; *registry != NULL; registry++) {
        printf("\n");
        kvio_registry_print(*registry, stdout);
    }
    return KVIO_EXIT_OK;
}
