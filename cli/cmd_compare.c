/* kvio compare: parses the arguments and prints what kvio_compare
 * (run/compare.c) measured: the variants side by side, with 95% confidence
 * intervals when each runs with several seeds. Progress (i/N) goes to
 * stderr unless -q. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/compare.h"
#include "kvio/log.h"

#define MAX_SETS 128

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvio compare WORKLOAD|PRESET --vary KEY=V1,V2,... [--vary ...]\n"
            "                    [--repeat N] [--set KEY=VALUE]... [--metrics KEY,...]\n"
            "                    [-o|--output DIR] [--force] [--format table|json]\n\n"
            "Runs the workload once per variant on the identical stream (same seed) and\n"
            "prints the variants side by side. Every variant is checked before the\n"
            "first runs. With --repeat N each variant runs with seeds seed..seed+N-1\n"
            "and the table shows means with 95%% confidence intervals; compare.json\n"
            "also has each variant's paired difference from the first (seed by seed).\n"
            "--metrics adds rows: any numeric key of summary.json's metrics, dotted\n"
            "(model_updates.update_latency_ms.p99, tiers.0.hit_rate, swapped_bytes),\n"
            "or of its storage block (storage.tiers.1.read_gbps). compare.json gives\n"
            "every row's median and coefficient of variation (cv) over the seeds too.\n"
            "--format json prints compare.json on stdout instead of the table.\n"
            "Rows a variant's runs lack show '-'. Writes DIR/<variant>/ per run and\n"
            "DIR/compare.json (default DIR: results/compare-<name>-<time>).\n");
}

/* "i/N (pct%) variant done, elapsed, about N s left" after each run;
 * context: the compare's start (kvio_time_ns). */
static void progress(void *context, size_t done, size_t total, const char *variant)
{
    if (kvio_log_get_level() < KVIO_LOG_WARN || total == 0)
        return;
    double elapsed = (double)(kvio_time_ns() - *(const uint64_t *)context) / 1e9;
    fprintf(stderr, "kvio compare: %zu/%zu (%.0f%%) %s done, %.1fs", done, total,
            100.0 * (double)done / (double)total, variant, elapsed);
    if (done > 0 && done < total)
        fprintf(stderr, ", about %.0fs left", elapsed * (double)(total - done) / (double)done);
    fprintf(stderr, "\n");
}

/* What the arguments ask for; the strings --vary and --metrics give are
 * owned here (compare_args_free). */
typedef struct compare_args {
    kvio_compare_options_t options;
    const char *sets[MAX_SETS];
    char *values[KVIO_COMPARE_MAX_VARY][KVIO_COMPARE_MAX_VALUES];
    char keys[KVIO_COMPARE_MAX_VARY][256];
    kvio_compare_vary_t varies[KVIO_COMPARE_MAX_VARY];
    const char *metrics[KVIO_COMPARE_MAX_METRICS];
    char *metric_lists[KVIO_COMPARE_MAX_METRICS]; /* one per --metrics */
    size_t num_metric_lists;
    bool json_output;
    bool help;
} compare_args_t;

enum {
    COMPARE_HELP = 1, COMPARE_FORCE, COMPARE_VARY, COMPARE_REPEAT, COMPARE_SET, COMPARE_FORMAT,
    COMPARE_METRICS, COMPARE_OUTPUT,
};

static const kvio_cli_option_t compare_options[] = {
    {"help", 'h', NULL, COMPARE_HELP},
    {"force", 0, NULL, COMPARE_FORCE},
    {"vary", 0, "KEY=V1,V2,...", COMPARE_VARY},
    {"repeat", 0, "a count", COMPARE_REPEAT},
    {"set", 0, "KEY=VALUE", COMPARE_SET},
    {"format", 0, "table or json", COMPARE_FORMAT},
    {"metrics", 0, "KEY,...", COMPARE_METRICS},
    {"output", 'o', "a directory", COMPARE_OUTPUT},
    {NULL, 0, NULL, 0},
};

/* --vary KEY=V1,V2,...: one more varied key. */
static int add_vary(compare_args_t *args, const char *value)
{
    kvio_compare_options_t *options = &args->options;
    const char *equals = strchr(value, '=');
    if (options->num_varies == KVIO_COMPARE_MAX_VARY) {
        fprintf(stderr, "kvio compare: at most %d --vary keys (a compare crosses their values); "
                "'%s' is one more\n", KVIO_COMPARE_MAX_VARY, value);
        return KVIO_EXIT_USAGE;
    }
    if (equals == NULL || equals == value || equals[1] == '\0') {
        fprintf(stderr, "kvio compare: --vary needs KEY=V1,V2,..., got '%s'\n", value);
        return KVIO_EXIT_USAGE;
    }
    size_t v = options->num_varies++;
    kvio_compare_vary_t *vary = &args->varies[v];
    snprintf(args->keys[v], sizeof(args->keys[v]), "%.*s", (int)(equals - value), value);
    *vary = (kvio_compare_vary_t){.key = args->keys[v],
                                  .values = (const char *const *)args->values[v]};
    char *list = strdup(equals + 1), *save = NULL;
    if (list == NULL)
        return KVIO_EXIT_FAILED;
    for (char *item = strtok_r(list, ",", &save);
         item != NULL && vary->count < KVIO_COMPARE_MAX_VALUES; item = strtok_r(NULL, ",", &save))
        if ((args->values[v][vary->count] = strdup(item)) != NULL)
            vary->count++;
    free(list);
    return KVIO_EXIT_OK;
}

/* --metrics KEY,...: more extra rows (each --metrics adds its keys). */
static int add_metrics(compare_args_t *args, const char *value)
{
    char *list = args->num_metric_lists < KVIO_COMPARE_MAX_METRICS ? strdup(value) : NULL;
    if (list == NULL) {
        fprintf(stderr, "kvio compare: too many --metrics options\n");
        return KVIO_EXIT_USAGE;
    }
    args->metric_lists[args->num_metric_lists++] = list;
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save);
         item != NULL && args->options.num_metrics < KVIO_COMPARE_MAX_METRICS;
         item = strtok_r(NULL, ",", &save))
        args->metrics[args->options.num_metrics++] = item;
    args->options.metrics = args->metrics;
    return KVIO_EXIT_OK;
}

/* One option or operand into args. */
static int take_compare_arg(compare_args_t *args, int option, const char *value)
{
    kvio_compare_options_t *options = &args->options;
    char *end = NULL;
    switch (option) {
    case COMPARE_HELP:
        args->help = true;
        return KVIO_EXIT_OK;
    case COMPARE_FORCE:
        options->force = true;
        return KVIO_EXIT_OK;
    case COMPARE_VARY:
        return add_vary(args, value);
    case COMPARE_REPEAT:
        options->repeat = strtol(value, &end, 10);
        if (end == value || *end != '\0' || options->repeat < 1 ||
            options->repeat > KVIO_COMPARE_MAX_REPEAT) {
            fprintf(stderr, "kvio compare: --repeat needs 1..%d, got '%s'\n",
                    KVIO_COMPARE_MAX_REPEAT, value);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case COMPARE_SET:
        return kvio_cli_append("kvio compare", "--set options", args->sets, &options->num_sets,
                               MAX_SETS, value);
    case COMPARE_FORMAT:
        if (strcmp(value, "json") != 0 && strcmp(value, "table") != 0) {
            fprintf(stderr, "kvio compare: --format takes table or json\n");
            return KVIO_EXIT_USAGE;
        }
        args->json_output = strcmp(value, "json") == 0;
        return KVIO_EXIT_OK;
    case COMPARE_METRICS:
        return add_metrics(args, value);
    case COMPARE_OUTPUT:
        options->output_dir = value;
        return KVIO_EXIT_OK;
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one("kvio compare", "workload", &options->source, value);
    default:
        return KVIO_EXIT_USAGE;
    }
}

/* Reads the arguments in order; --help stops at once (usage on stdout). */
static int parse_compare_args(int argc, char **argv, compare_args_t *args)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio compare", argc, argv, compare_options);
    args->options.sets = args->sets;
    args->options.argv = (const char *const *)argv;
    args->options.argc = argc;
    args->options.varies = args->varies;
    args->options.repeat = 1;
    const char *value;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        int exit_status = take_compare_arg(args, option, value);
        if (exit_status != KVIO_EXIT_OK || args->help)
            return exit_status;
    }
    if (args->options.source == NULL || args->options.num_varies == 0) {
        fprintf(stderr, "kvio compare: give a workload and at least one --vary KEY=V1,V2\n");
        return KVIO_EXIT_USAGE;
    }
    return KVIO_EXIT_OK;
}

static void compare_args_free(compare_args_t *args)
{
    for (size_t i = 0; i < args->num_metric_lists; i++)
        free(args->metric_lists[i]);
    for (size_t v = 0; v < args->options.num_varies; v++)
        for (size_t i = 0; i < args->varies[v].count; i++)
            free(args->values[v][i]);
}

int kvio_cmd_compare(int argc, char **argv)
{
    compare_args_t args = {0};
    kvio_compare_options_t *options = &args.options;
    uint64_t start_ns = kvio_time_ns();
    int exit_status = parse_compare_args(argc, argv, &args);
    if (exit_status != KVIO_EXIT_OK || args.help) {
        if (args.help)
            usage(stdout);
        goto out;
    }
    options->progress = progress;
    options->context = &start_ns;
    options->stop = kvio_cli_stop_on_signals();
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_comparison_t *comparison = NULL;
    kvio_status_t status = kvio_compare(options, &comparison, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error[0] != '\0' ? error : kvio_strerror(status));
        exit_status = kvio_cli_exit_status(status);
        goto out;
    }
    if (args.json_output) {
        json_t *compare = kvio_comparison_json(comparison);
        json_dumpf(compare, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
        json_decref(compare);
    } else {
        kvio_comparison_print(comparison, stdout);
    }
    kvio_comparison_destroy(comparison);
    exit_status = KVIO_EXIT_OK;
out:
    compare_args_free(&args);
    return exit_status;
}
