/* kvio compare: runs one workload once per variant (the values of --vary,
 * crossed when several keys vary) on the identical stream, optionally with
 * N seeds each, and prints the variants side by side with means and 95%
 * confidence intervals. Writes DIR/<variant>/ and DIR/compare.json. */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/clock.h"
#include "kvio/results.h"
#include "kvio/run.h"

#define MAX_VARY 4
#define MAX_VALUES 32
#define MAX_SETS 128

typedef struct vary {
    char key[256];
    char *values[MAX_VALUES];
    size_t count;
} vary_t;

/* The metrics compared, as (path: keys joined by dots, field, label); an
 * optional one is shown only when some variant has it (model updates). */
typedef struct compared {
    const char *key;
    const char *field;
    const char *label;
    bool optional;
} compared_t;

static const compared_t compared_metrics[] = {
    {"request_throughput", NULL, "request_throughput (req/s)", false},
    {"output_throughput", NULL, "output_throughput (tok/s)", false},
    {"goodput", NULL, "goodput (req/s)", false},
    {"ttft_ms", "p50", "ttft_ms p50", false},
    {"ttft_ms", "p99", "ttft_ms p99", false},
    {"tpot_ms", "p50", "tpot_ms p50", false},
    {"tpot_ms", "p99", "tpot_ms p99", false},
    {"e2el_ms", "p99", "e2el_ms p99", false},
    {"hit_rate", NULL, "hit_rate", false},
    {"preemptions", NULL, "preemptions", false},
    {"recomputed_tokens", NULL, "recomputed_tokens", false},
    {"kv_usage_mean", NULL, "kv_usage_mean", false},
    {"model_updates.update_latency_ms", "mean", "update latency ms (mean)", true},
    {"model_updates", "inference_stall_total_ms", "inference stall ms", true},
    {"update_interference", "ttft_p99_ratio", "ttft p99 after/before upd.", true},
    {"update_interference", "tpot_p99_ratio", "tpot p99 after/before upd.", true},
    {"update_interference", "hit_rate_before", "hit_rate before update", true},
    {"update_interference", "hit_rate_after", "hit_rate after update", true},
    {"update_effects", "stale_hit_tokens", "stale_hit_tokens", true},
    {"update_effects", "update_recomputed_tokens", "tokens recomputed (updates)", true},
    {"mean_inference_loss", NULL, "mean inference loss", true},
};
#define NUM_COMPARED (sizeof(compared_metrics) / sizeof(compared_metrics[0]))

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvio compare WORKLOAD|PRESET --vary KEY=V1,V2,... [--vary ...]\n"
            "                    [--repeat N] [--set KEY=VALUE]... [-o|--output DIR] [--force]\n\n"
            "Runs the workload once per variant on the identical stream (same seed) and\n"
            "prints the variants side by side. With --repeat N each variant runs with\n"
            "seeds seed..seed+N-1 and the table shows means with 95%% confidence\n"
            "intervals. Writes DIR/<variant>/ per run and DIR/compare.json\n"
            "(default DIR: results/compare-<name>-<time>).\n");
}

/* Student t quantile for a two-sided 95% interval with n-1 degrees of freedom. */
static double t95(size_t n)
{
    static const double table[] = {0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                   2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                   2.120, 2.110, 2.101, 2.093, 2.086};
    size_t df = n > 0 ? n - 1 : 0;
    return df < sizeof(table) / sizeof(table[0]) ? table[df] : 1.96;
}

/* Mean of count samples and the half-width of its 95% confidence interval
 * (0 for a single sample). */
static void mean_ci95(const double *samples, long count, double *mean_p, double *half_p)
{
    double sum = 0, squares = 0;
    for (long r = 0; r < count; r++)
        sum += samples[r];
    double mean = sum / (double)count;
    for (long r = 0; r < count; r++)
        squares += (samples[r] - mean) * (samples[r] - mean);
    *mean_p = mean;
    *half_p = count > 1 ? t95((size_t)count) * sqrt(squares / (double)(count - 1)) /
                              sqrt((double)count)
                        : 0;
}

/* The metric's value; when the run does not have it, NAN for an optional
 * metric, else 0. */
static double read_metric(const json_t *metrics, const compared_t *which)
{
    char path[128];
    snprintf(path, sizeof(path), "%s", which->key);
    const json_t *value = metrics;
    for (char *key = strtok(path, "."); key != NULL && value != NULL; key = strtok(NULL, "."))
        value = json_object_get(value, key);
    if (which->field != NULL)
        value = json_object_get(value, which->field);
    return json_is_number(value) ? json_number_value(value) : which->optional ? NAN : 0;
}

static void sanitize(char *text)
{
    for (char *c = text; *c != '\0'; c++)
        if (*c == '/' || *c == ' ' || *c == ':')
            *c = '_';
}

int kvio_cmd_compare(int argc, char **argv)
{
    const char *source = NULL, *output_dir = NULL;
    const char *sets[MAX_SETS];
    size_t num_sets = 0;
    vary_t varies[MAX_VARY];
    size_t num_varies = 0;
    long repeat = 1;
    bool force = false;
    int exit_status = KVIO_EXIT_USAGE;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return KVIO_EXIT_OK;
        } else if (strcmp(arg, "--force") == 0) {
            force = true;
        } else if (arg[0] == '-' && next == NULL) {
            fprintf(stderr, "kvio compare: %s needs a value\n", arg);
            return KVIO_EXIT_USAGE;
        } else if (strcmp(arg, "--vary") == 0) {
            const char *equals = strchr(next, '=');
            if (equals == NULL || equals == next || equals[1] == '\0' || num_varies == MAX_VARY) {
                fprintf(stderr, "kvio compare: --vary needs KEY=V1,V2,... (at most %d)\n",
                        MAX_VARY);
                return KVIO_EXIT_USAGE;
            }
            vary_t *vary = &varies[num_varies++];
            snprintf(vary->key, sizeof(vary->key), "%.*s", (int)(equals - next), next);
            vary->count = 0;
            char *values = strdup(equals + 1);
            char *save = NULL;
            for (char *value = strtok_r(values, ",", &save); value != NULL && vary->count < MAX_VALUES;
                 value = strtok_r(NULL, ",", &save))
                vary->values[vary->count++] = strdup(value);
            free(values);
            i++;
        } else if (strcmp(arg, "--repeat") == 0) {
            char *end = NULL;
            repeat = strtol(next, &end, 10);
            if (end == next || *end != '\0' || repeat < 1 || repeat > 100) {
                fprintf(stderr, "kvio compare: --repeat needs 1..100, got '%s'\n", next);
                return KVIO_EXIT_USAGE;
            }
            i++;
        } else if (strcmp(arg, "--set") == 0) {
            if (num_sets == MAX_SETS) {
                fprintf(stderr, "kvio compare: too many --set options\n");
                return KVIO_EXIT_USAGE;
            }
            sets[num_sets++] = next;
            i++;
        } else if (strcmp(arg, "-o") == 0 || strcmp(arg, "--output") == 0) {
            output_dir = next;
            i++;
        } else if (arg[0] == '-') {
            fprintf(stderr, "kvio compare: unknown option '%s' (see kvio compare --help)\n", arg);
            return KVIO_EXIT_USAGE;
        } else if (source == NULL) {
            source = arg;
        } else {
            fprintf(stderr, "kvio compare: more than one workload given\n");
            return KVIO_EXIT_USAGE;
        }
    }
    if (source == NULL || num_varies == 0) {
        fprintf(stderr, "kvio compare: give a workload and at least one --vary KEY=V1,V2\n");
        goto out;
    }

    /* Check the base workload and every variant before running anything. */
    char error[1024];
    kvio_workload_t base;
    kvio_status_t status = kvio_workload_load(source, sets, num_sets, &base, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        exit_status = kvio_cli_exit_status(status);
        goto out;
    }
    char directory[1024];
    if (output_dir != NULL) {
        snprintf(directory, sizeof(directory), "%s", output_dir);
    } else {
        char stamp[64];
        kvio_format_utc(kvio_wall_time_ns(), stamp, sizeof(stamp));
        for (char *c = stamp; *c != '\0'; c++)
            if (*c == ':')
                *c = '-';
        snprintf(directory, sizeof(directory), "results/compare-%s-%s", base.name, stamp);
    }
    int64_t base_seed = base.seed;
    kvio_workload_free(&base);

    size_t num_variants = 1;
    for (size_t v = 0; v < num_varies; v++)
        num_variants *= varies[v].count;
    if (num_variants > 256) {
        fprintf(stderr, "kvio compare: %zu variants is too many (at most 256)\n", num_variants);
        goto out;
    }
    kvio_results_t *top = NULL;
    status = kvio_results_create(directory, "compare", force, &top, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        exit_status = kvio_cli_exit_status(status);
        goto out;
    }

    double (*values)[NUM_COMPARED][100] = calloc(num_variants, sizeof(*values));
    char (*names)[256] = calloc(num_variants, sizeof(*names));
    json_t *variants_json = json_array();
    exit_status = KVIO_EXIT_OK;
    for (size_t variant = 0; variant < num_variants && exit_status == KVIO_EXIT_OK; variant++) {
        const char *all_sets[MAX_SETS + MAX_VARY + 1];
        char assignments[MAX_VARY][600];
        size_t count = 0;
        for (size_t s = 0; s < num_sets; s++)
            all_sets[count++] = sets[s];
        names[variant][0] = '\0';
        size_t index = variant;
        json_t *settings = json_object();
        for (size_t v = 0; v < num_varies; v++) {
            const char *value = varies[v].values[index % varies[v].count];
            index /= varies[v].count;
            snprintf(assignments[v], sizeof(assignments[v]), "%.255s=%.300s", varies[v].key, value);
            all_sets[count++] = assignments[v];
            const char *short_key = strrchr(varies[v].key, '.');
            short_key = short_key != NULL ? short_key + 1 : varies[v].key;
            char part[128];
            snprintf(part, sizeof(part), "%s%.60s=%.60s", v ? "," : "", short_key, value);
            strncat(names[variant], part, sizeof(names[variant]) - strlen(names[variant]) - 1);
            json_object_set_new(settings, varies[v].key, json_string(value));
        }
        sanitize(names[variant]);
        json_t *runs = json_array();
        for (long r = 0; r < repeat; r++) {
            char seed_set[64];
            snprintf(seed_set, sizeof(seed_set), "seed=%lld", (long long)(base_seed + r));
            all_sets[count] = seed_set;
            kvio_workload_t workload;
            status = kvio_workload_load(source, all_sets, count + 1, &workload, error,
                                        sizeof(error));
            if (status != KVIO_OK) {
                fprintf(stderr, "kvio: variant %s: %s\n", names[variant], error);
                exit_status = kvio_cli_exit_status(status);
                break;
            }
            char run_dir[1400];
            if (repeat > 1)
                snprintf(run_dir, sizeof(run_dir), "%s/%s/seed-%lld", directory, names[variant],
                         (long long)(base_seed + r));
            else
                snprintf(run_dir, sizeof(run_dir), "%s/%s", directory, names[variant]);
            kvio_run_options_t options = {.output_dir = run_dir, .force = force,
                                          .source = source, .quiet = true};
            kvio_run_result_t result;
            status = kvio_run(&workload, &options, &result, error, sizeof(error));
            kvio_workload_free(&workload);
            if (status != KVIO_OK) {
                fprintf(stderr, "kvio: variant %s: %s\n", names[variant], error);
                exit_status = kvio_cli_exit_status(status);
                break;
            }
            char summary_path[1500];
            snprintf(summary_path, sizeof(summary_path), "%s/summary.json", run_dir);
            json_error_t json_error;
            json_t *summary = json_load_file(summary_path, 0, &json_error);
            json_t *metrics = json_object_get(summary, "metrics");
            for (size_t m = 0; m < NUM_COMPARED; m++)
                values[variant][m][r] = read_metric(metrics, &compared_metrics[m]);
            json_array_append_new(runs, json_pack("{s:s, s:I, s:O}", "dir", run_dir, "seed",
                                                  (json_int_t)(base_seed + r), "metrics",
                                                  metrics != NULL ? metrics : json_null()));
            json_decref(summary);
            fprintf(stderr, "kvio compare: %s done\n", names[variant]);
        }
        json_t *means = json_object();
        for (size_t m = 0; m < NUM_COMPARED && exit_status == KVIO_EXIT_OK; m++) {
            double mean, half;
            mean_ci95(values[variant][m], repeat, &mean, &half);
            if (isnan(mean))
                continue; /* an optional metric this variant does not have */
            json_object_set_new(means, compared_metrics[m].label,
                                json_pack("{s:f, s:f}", "mean", mean, "ci95", half));
        }
        json_array_append_new(variants_json,
                              json_pack("{s:s, s:o, s:o, s:o}", "name", names[variant],
                                        "settings", settings, "runs", runs, "summary", means));
    }
    if (exit_status == KVIO_EXIT_OK) {
        json_t *compare = json_pack("{s:i, s:s, s:s, s:I, s:o}", "schema_version",
                                    KVIO_SCHEMA_VERSION, "kvio_version", KVIO_VERSION, "workload",
                                    source, "repeat", (json_int_t)repeat, "variants",
                                    variants_json);
        variants_json = NULL;
        if (kvio_results_write_json(top, "compare.json", compare, error, sizeof(error)) != KVIO_OK) {
            fprintf(stderr, "kvio: %s\n", error);
            exit_status = KVIO_EXIT_FAILED;
        }
        json_decref(compare);
        /* Side by side: one row per metric, one column per variant. */
        printf("kvio compare %s (%ld run%s per variant%s)\n", source, repeat, repeat > 1 ? "s" : "",
               repeat > 1 ? "; mean ± 95% CI" : "");
        int label_width = 28, cell_width = 16;
        for (size_t variant = 0; variant < num_variants; variant++)
            if ((int)strlen(names[variant]) + 2 > cell_width)
                cell_width = (int)strlen(names[variant]) + 2;
        printf("  %-*s", label_width, "metric");
        for (size_t variant = 0; variant < num_variants; variant++)
            printf("%*s", cell_width, names[variant]);
        printf("\n");
        for (size_t m = 0; m < NUM_COMPARED; m++) {
            bool present = !compared_metrics[m].optional;
            for (size_t variant = 0; variant < num_variants && !present; variant++)
                present = !isnan(values[variant][m][0]);
            if (!present)
                continue;
            printf("  %-*s", label_width, compared_metrics[m].label);
            for (size_t variant = 0; variant < num_variants; variant++) {
                double mean, half;
                mean_ci95(values[variant][m], repeat, &mean, &half);
                char cell[64];
                if (isnan(mean))
                    snprintf(cell, sizeof(cell), "-");
                else if (repeat > 1)
                    snprintf(cell, sizeof(cell), "%.4g±%.2g", mean, half);
                else
                    snprintf(cell, sizeof(cell), "%.4g", mean);
                printf("%*s", cell_width, cell);
            }
            printf("\n");
        }
        printf("  results: %s (compare.json)\n", directory);
    }
    json_decref(variants_json);
    free(values);
    free(names);
    kvio_results_destroy(top);
out:
    for (size_t v = 0; v < num_varies; v++)
        for (size_t i = 0; i < varies[v].count; i++)
            free(varies[v].values[i]);
    return exit_status;
}
