/* kvio compare: parses the arguments and prints what kvio_compare
 * (run/compare.c) measured: the variants side by side, with 95% confidence
 * intervals when each runs with several seeds. Progress (i/N) goes to
 * stderr unless -q. */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/compare.h"
#include "kvio/log.h"

#define MAX_SETS 128

/* Set by SIGINT/SIGTERM: the run in progress stops and compare ends. */
static volatile sig_atomic_t stop_requested;

static void request_stop(int signal_number)
{
    (void)signal_number;
    stop_requested = 1;
}

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
            "(model_updates.update_latency_ms.p99, tiers.0.hit_rate, swapped_bytes).\n"
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

int kvio_cmd_compare(int argc, char **argv)
{
    const char *sets[MAX_SETS];
    char *values[KVIO_COMPARE_MAX_VARY][KVIO_COMPARE_MAX_VALUES];
    char keys[KVIO_COMPARE_MAX_VARY][256];
    kvio_compare_vary_t varies[KVIO_COMPARE_MAX_VARY];
    uint64_t start_ns = kvio_time_ns();
    kvio_compare_options_t options = {.sets = sets, .varies = varies, .repeat = 1,
                                      .progress = progress, .context = &start_ns,
                                      .stop = &stop_requested};
    const char *metrics[KVIO_COMPARE_MAX_METRICS];
    size_t num_metrics = 0;
    char *metrics_list = NULL;
    bool json_output = false;
    int exit_status = KVIO_EXIT_USAGE;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = NULL;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            exit_status = KVIO_EXIT_OK;
            goto out;
        } else if (strcmp(arg, "--force") == 0) {
            options.force = true;
        } else if (kvio_cli_is_option(arg, "--vary")) {
            if ((value = kvio_cli_option_value(argc, argv, &i, "--vary")) == NULL)
                goto needs_value;
            const char *equals = strchr(value, '=');
            if (equals == NULL || equals == value || equals[1] == '\0' ||
                options.num_varies == KVIO_COMPARE_MAX_VARY) {
                fprintf(stderr, "kvio compare: --vary needs KEY=V1,V2,... (at most %d)\n",
                        KVIO_COMPARE_MAX_VARY);
                goto out;
            }
            size_t v = options.num_varies++;
            snprintf(keys[v], sizeof(keys[v]), "%.*s", (int)(equals - value), value);
            varies[v] = (kvio_compare_vary_t){.key = keys[v],
                                              .values = (const char *const *)values[v]};
            char *list = strdup(equals + 1), *save = NULL;
            for (char *item = strtok_r(list, ",", &save);
                 item != NULL && varies[v].count < KVIO_COMPARE_MAX_VALUES;
                 item = strtok_r(NULL, ",", &save))
                values[v][varies[v].count++] = strdup(item);
            free(list);
        } else if (kvio_cli_is_option(arg, "--repeat")) {
            if ((value = kvio_cli_option_value(argc, argv, &i, "--repeat")) == NULL)
                goto needs_value;
            char *end = NULL;
            options.repeat = strtol(value, &end, 10);
            if (end == value || *end != '\0' || options.repeat < 1 ||
                options.repeat > KVIO_COMPARE_MAX_REPEAT) {
                fprintf(stderr, "kvio compare: --repeat needs 1..%d, got '%s'\n",
                        KVIO_COMPARE_MAX_REPEAT, value);
                goto out;
            }
        } else if (kvio_cli_is_option(arg, "--set")) {
            if ((value = kvio_cli_option_value(argc, argv, &i, "--set")) == NULL)
                goto needs_value;
            if (options.num_sets == MAX_SETS) {
                fprintf(stderr, "kvio compare: too many --set options\n");
                goto out;
            }
            sets[options.num_sets++] = value;
        } else if (kvio_cli_is_option(arg, "--format")) {
            if ((value = kvio_cli_option_value(argc, argv, &i, "--format")) == NULL)
                goto needs_value;
            if (strcmp(value, "json") != 0 && strcmp(value, "table") != 0) {
                fprintf(stderr, "kvio compare: --format takes table or json\n");
                goto out;
            }
            json_output = strcmp(value, "json") == 0;
        } else if (kvio_cli_is_option(arg, "--metrics")) {
            if ((value = kvio_cli_option_value(argc, argv, &i, "--metrics")) == NULL)
                goto needs_value;
            metrics_list = strdup(value);
            char *save = NULL;
            for (char *item = strtok_r(metrics_list, ",", &save);
                 item != NULL && num_metrics < KVIO_COMPARE_MAX_METRICS;
                 item = strtok_r(NULL, ",", &save))
                metrics[num_metrics++] = item;
            options.metrics = metrics;
            options.num_metrics = num_metrics;
        } else if (strcmp(arg, "-o") == 0 || kvio_cli_is_option(arg, "--output")) {
            value = kvio_cli_option_value(argc, argv, &i, strcmp(arg, "-o") == 0 ? "-o"
                                                                                  : "--output");
            if (value == NULL)
                goto needs_value;
            options.output_dir = value;
        } else if (arg[0] == '-') {
            fprintf(stderr, "kvio compare: unknown option '%s' (see kvio compare --help)\n", arg);
            goto out;
        } else if (options.source == NULL) {
            options.source = arg;
        } else {
            fprintf(stderr, "kvio compare: more than one workload given\n");
            goto out;
        }
        continue;
    needs_value:
        fprintf(stderr, "kvio compare: %s needs a value\n", arg);
        goto out;
    }
    if (options.source == NULL || options.num_varies == 0) {
        fprintf(stderr, "kvio compare: give a workload and at least one --vary KEY=V1,V2\n");
        goto out;
    }
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = request_stop;
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    char error[1024] = "";
    json_t *compare = NULL;
    kvio_status_t status = kvio_compare(&options, &compare, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error[0] != '\0' ? error : kvio_strerror(status));
        exit_status = kvio_cli_exit_status(status);
        goto out;
    }
    if (json_output) {
        json_dumpf(compare, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    } else {
        kvio_compare_table(compare, stdout);
    }
    json_decref(compare);
    exit_status = KVIO_EXIT_OK;
out:
    free(metrics_list);
    for (size_t v = 0; v < options.num_varies; v++)
        for (size_t i = 0; i < varies[v].count; i++)
            free(values[v][i]);
    return exit_status;
}
