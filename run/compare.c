/* kvio_compare: every variant checked before the first runs, then each run
 * on the identical stream (the same seeds), its metrics gathered from the
 * summary kvio_run wrote, means with 95 % confidence intervals (Student t)
 * and, with seeds, the paired difference from the first variant (seed by
 * seed: the same stream), into compare.json; kvio_compare_table prints it. */
#include "kvio/compare.h"

#include "run/run_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/results.h"
#include "kvio/run.h"
#include "kvio/stats.h"
#include "kvio/sysinfo.h"

#define MAX_SETS 160

/* The metrics compared, as (path: keys joined by dots, field, label); a row
 * shows when some variant has its metric (a run without serving has no
 * latencies, one without updates no update latency). */
typedef struct compared {
    const char *key;
    const char *field;
    const char *label;
} compared_t;

/* Rows whose means decide whether a variant is overloaded. */
#define OFFERED_ROW "offered_rate (req/s)"
#define SERVED_ROW "request_throughput (req/s)"

static const compared_t compared_metrics[] = {
    {"offered_rate", NULL, OFFERED_ROW},
    {"request_throughput", NULL, SERVED_ROW},
    {"output_throughput", NULL, "output_throughput (tok/s)"},
    {"goodput", NULL, "goodput (req/s)"},
    {"ttft_ms", "p50", "ttft_ms p50"},
    {"ttft_ms", "p99", "ttft_ms p99"},
    {"tpot_ms", "p50", "tpot_ms p50"},
    {"tpot_ms", "p99", "tpot_ms p99"},
    {"e2el_ms", "p99", "e2el_ms p99"},
    {"hit_rate", NULL, "hit_rate"},
    {"preemptions", NULL, "preemptions"},
    {"recomputed_tokens", NULL, "recomputed_tokens"},
    {"kv_usage_mean", NULL, "kv_usage_mean"},
    {"model_updates.update_latency_ms", "mean", "update latency ms (mean)"},
    {"model_updates", "inference_stall_total_ms", "inference stall ms"},
    {"model_updates.weight_sync", "update_ms", "weight sync ms (last server)"},
    {"model_updates", "wire_bytes_from_trainer", "update bytes from trainer"},
    {"model_updates", "wire_bytes_forwarded", "update bytes forwarded"},
    {"model_updates.weight_sync", "wire_bytes", "weight sync wire bytes"},
    {"model_updates.weight_sync", "wire_bytes_from_trainer", "weight sync bytes from src"},
    {"model_updates.weight_sync", "wire_bytes_forwarded", "weight sync bytes forwarded"},
    {"update_cost.ttft_p99_ms", "delta", "update cost: ttft p99 ms"},
    {"update_cost.tpot_p99_ms", "delta", "update cost: tpot p99 ms"},
    {"update_cost.hit_rate", "delta", "update cost: hit rate"},
    {"update_cost", "requests_affected", "update cost: requests"},
    {"update_cost.stall_ms_per_update", "p99", "update cost: stall p99 ms"},
    {"update_interference", "ttft_p99_ratio", "trend: ttft p99 after/bef."},
    {"update_interference", "hit_rate_before", "trend: hit_rate before"},
    {"update_interference", "hit_rate_after", "trend: hit_rate after"},
    {"update_effects", "stale_hit_tokens", "stale_hit_tokens"},
    {"update_effects", "update_recomputed_tokens", "tokens recomputed (updates)"},
    {"mean_inference_loss", NULL, "mean inference loss"},
    {"storage", "storage_throughput_tokens_per_s", "storage throughput (tok/s)"},
    {"storage", "cached_tokens_per_s", "cached tokens (tok/s)"},
};
#define NUM_FIXED (sizeof(compared_metrics) / sizeof(compared_metrics[0]))
#define MAX_COMPARED (NUM_FIXED + KVIO_COMPARE_MAX_METRICS)

/* The metric's value in a run's summary (keys by dots under metrics, or
 * under storage for storage.*; a number indexes an array); NAN when the run
 * does not have it. */
static double read_metric(const json_t *summary, const compared_t *which)
{
    char path[256];
    snprintf(path, sizeof(path), "%s", which->key);
    bool storage = strncmp(path, "storage", 7) == 0 && (path[7] == '\0' || path[7] == '.');
    const json_t *value = storage ? summary : json_object_get(summary, "metrics");
    char *save = NULL;
    for (char *key = strtok_r(path, ".", &save); key != NULL && value != NULL;
         key = strtok_r(NULL, ".", &save)) {
        char *end = NULL;
        unsigned long index = strtoul(key, &end, 10);
        value = json_is_array(value) && end != key && *end == '\0'
                    ? json_array_get(value, index)
                    : json_object_get(value, key);
    }
    if (which->field != NULL)
        value = json_object_get(value, which->field);
    return json_is_number(value) ? json_number_value(value) : NAN;
}

/* The median and the coefficient of variation (sample standard deviation
 * over the mean) of count values, those that are not NAN. */
static void spread(const double *values, long count, double *median_p, double *cv_p)
{
    double sorted[256];
    size_t n = 0;
    for (long r = 0; r < count && n < 256; r++)
        if (!isnan(values[r]))
            sorted[n++] = values[r];
    if (n == 0)
        return;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double swap = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = swap;
        }
    *median_p = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    double sum = 0, squares = 0;
    for (size_t i = 0; i < n; i++)
        sum += sorted[i];
    double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++)
        squares += (sorted[i] - mean) * (sorted[i] - mean);
    *cv_p = n > 1 && mean != 0 ? sqrt(squares / (double)(n - 1)) / fabs(mean) : 0;
}

/* The rows of this compare: the fixed ones, then the options' extra keys. */
static size_t compared_list(const kvio_compare_options_t *options, compared_t *list_p)
{
    size_t count = 0;
    for (size_t m = 0; m < NUM_FIXED; m++)
        list_p[count++] = compared_metrics[m];
    for (size_t m = 0; m < options->num_metrics && m < KVIO_COMPARE_MAX_METRICS; m++)
        list_p[count++] = (compared_t){.key = options->metrics[m],
                                       .label = options->metrics[m]};
    return count;
}

/* A variant: its overrides (the common ones, then KEY=VALUE per varied key)
 * and its name (short keys, safe as a directory name). */
typedef struct variant {
    char name[256];
    char assignments[KVIO_COMPARE_MAX_VARY][600];
    const char *sets[MAX_SETS + KVIO_COMPARE_MAX_VARY + 1];
    size_t num_sets; /* without the seed */
    json_t *settings;
} variant_t;

static void variant_make(const kvio_compare_options_t *options, size_t index, variant_t *variant)
{
    variant->num_sets = 0;
    for (size_t s = 0; s < options->num_sets && s < MAX_SETS; s++)
        variant->sets[variant->num_sets++] = options->sets[s];
    variant->name[0] = '\0';
    variant->settings = json_object();
    for (size_t v = 0; v < options->num_varies; v++) {
        const kvio_compare_vary_t *vary = &options->varies[v];
        const char *value = vary->values[index % vary->count];
        index /= vary->count;
        snprintf(variant->assignments[v], sizeof(variant->assignments[v]), "%.255s=%.300s",
                 vary->key, value);
        variant->sets[variant->num_sets++] = variant->assignments[v];
        const char *short_key = strrchr(vary->key, '.');
        short_key = short_key != NULL ? short_key + 1 : vary->key;
        size_t at = strlen(variant->name);
        snprintf(variant->name + at, sizeof(variant->name) - at, "%s%.60s=%.60s", v ? "," : "",
                 short_key, value);
        json_object_set_new(variant->settings, vary->key, json_string(value));
    }
    for (char *c = variant->name; *c != '\0'; c++)
        if (*c == '/' || *c == ' ' || *c == ':')
            *c = '_';
}

/* Loads variant with seed (its sets plus seed=...). */
static kvio_status_t variant_load(const kvio_compare_options_t *options, variant_t *variant,
                                  long long seed, kvio_workload_t *workload_p, char *error_p,
                                  size_t error_len)
{
    char seed_set[64], error[1024];
    snprintf(seed_set, sizeof(seed_set), "seed=%lld", seed);
    variant->sets[variant->num_sets] = seed_set;
    kvio_status_t status = kvio_workload_load(options->source, variant->sets,
                                              variant->num_sets + 1, workload_p, error,
                                              sizeof(error));
    if (status == KVIO_OK) {
        status = kvio_workload_check(workload_p, error, sizeof(error));
        if (status != KVIO_OK)
            kvio_workload_free(workload_p);
    }
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "variant %s: %s", variant->name, error);
    return status;
}

/* The paired difference of each metric from the first variant, seed by
 * seed (the same stream): mean and 95 % interval. */
static json_t *paired_deltas(const compared_t *list, size_t count,
                             const double (*first)[KVIO_COMPARE_MAX_REPEAT],
                             const double (*mine)[KVIO_COMPARE_MAX_REPEAT], long repeat)
{
    json_t *deltas = json_object();
    for (size_t m = 0; m < count; m++) {
        double differences[KVIO_COMPARE_MAX_REPEAT], mean, half;
        bool present = true;
        for (long r = 0; r < repeat && present; r++) {
            differences[r] = mine[m][r] - first[m][r];
            present = !isnan(differences[r]);
        }
        if (!present)
            continue;
        kvio_mean_ci95(differences, repeat, &mean, &half);
        json_object_set_new(deltas, list[m].label,
                            json_pack("{s:f, s:f}", "mean", mean, "ci95", half));
    }
    return deltas;
}

/* Served under 80 % of what was offered: the queue grew through the run, so
 * its latencies say more about the run's length than about the variant. A
 * run that keeps up serves nearly all it is offered: only its drain at the
 * end (the last requests' latency) is not, short beside the run (rate 10 on
 * chat for 30 s serves 94 %; rate 200 serves 39 %). */
#define OVERLOAD_SERVED_FRACTION 0.8

static bool overloaded(const json_t *means)
{
    const json_t *offered = json_object_get(json_object_get(means, OFFERED_ROW), "mean");
    const json_t *served = json_object_get(json_object_get(means, SERVED_ROW), "mean");
    return offered != NULL && served != NULL && json_number_value(offered) > 0 &&
           json_number_value(served) < OVERLOAD_SERVED_FRACTION * json_number_value(offered);
}

/* Refuses options that ask for more than compare holds. *num_variants_p:
 * the product of the varied keys' counts. */
static kvio_status_t check_options(const kvio_compare_options_t *options,
                                   size_t *num_variants_p, char *error_p, size_t error_len)
{
    size_t num_variants = 1;
    for (size_t v = 0; v < options->num_varies; v++) {
        if (options->varies[v].count == 0 || options->varies[v].count > KVIO_COMPARE_MAX_VALUES) {
            snprintf(error_p, error_len, "--vary %s: give 1 to %d values", options->varies[v].key,
                     KVIO_COMPARE_MAX_VALUES);
            return KVIO_ERR_CONFIG;
        }
        /* The same value twice would be one variant run twice under one name
         * (it failed midway on its directory). */
        for (size_t i = 0; i < options->varies[v].count; i++)
            for (size_t j = 0; j < i; j++)
                if (strcmp(options->varies[v].values[i], options->varies[v].values[j]) == 0) {
                    snprintf(error_p, error_len, "--vary %s: '%s' is given twice",
                             options->varies[v].key, options->varies[v].values[i]);
                    return KVIO_ERR_CONFIG;
                }
        num_variants *= options->varies[v].count;
    }
    if (options->num_varies == 0 || options->num_varies > KVIO_COMPARE_MAX_VARY ||
        num_variants > KVIO_COMPARE_MAX_VARIANTS || options->repeat < 1 ||
        options->repeat > KVIO_COMPARE_MAX_REPEAT || options->num_sets > MAX_SETS ||
        options->num_metrics > KVIO_COMPARE_MAX_METRICS) {
        snprintf(error_p, error_len,
                 "compare: 1 to %d varied keys, at most %d variants (%zu given), 1 to %d "
                 "seeds, at most %d overrides and %d extra metrics", KVIO_COMPARE_MAX_VARY,
                 KVIO_COMPARE_MAX_VARIANTS, num_variants, KVIO_COMPARE_MAX_REPEAT, MAX_SETS,
                 KVIO_COMPARE_MAX_METRICS);
        return KVIO_ERR_CONFIG;
    }
    *num_variants_p = num_variants;
    return KVIO_OK;
}

/* What one compare holds while it runs. */
typedef struct comparison {
    const kvio_compare_options_t *options;
    size_t num_variants, num_loaded, done;
    variant_t *variants;
    kvio_workload_t *loaded;     /* every variant and seed, variant-major */
    compared_t list[MAX_COMPARED];
    size_t num_compared;
    double (*values)[MAX_COMPARED][KVIO_COMPARE_MAX_REPEAT];
    char directory[1024];
    long long base_seed;         /* the workload's own seed, with the common overrides */
    struct kvio_control_cache *twins; /* simulate's no-update twins, one per stream */
} comparison_t;

/* The base seed and the output directory from the workload as given. */
static kvio_status_t base_of(comparison_t *comparison, char *error_p, size_t error_len)
{
    const kvio_compare_options_t *options = comparison->options;
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(options->source, options->sets, options->num_sets,
                                              &workload, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    comparison->base_seed = workload.seed;
    if (options->output_dir != NULL) {
        snprintf(comparison->directory, sizeof(comparison->directory), "%s",
                 options->output_dir);
    } else {
        char stamp[64];
        kvio_format_utc(kvio_wall_time_ns(), stamp, sizeof(stamp));
        for (char *c = stamp; *c != '\0'; c++)
            if (*c == ':')
                *c = '-';
        snprintf(comparison->directory, sizeof(comparison->directory),
                 "results/compare-%s-%s", workload.name, stamp);
    }
    kvio_workload_free(&workload);
    return KVIO_OK;
}

/* Every variant and seed is loaded and checked before anything runs. */
static kvio_status_t load_variants(comparison_t *comparison, char *error_p, size_t error_len)
{
    const kvio_compare_options_t *options = comparison->options;
    kvio_status_t status = base_of(comparison, error_p, error_len);
    for (size_t i = 0; i < comparison->num_variants && status == KVIO_OK; i++) {
        variant_make(options, i, &comparison->variants[i]);
        for (long r = 0; r < options->repeat && status == KVIO_OK; r++) {
            status = variant_load(options, &comparison->variants[i], comparison->base_seed + r,
                                  &comparison->loaded[comparison->num_loaded], error_p,
                                  error_len);
            if (status == KVIO_OK)
                comparison->num_loaded++;
        }
    }
    return status;
}

/* Variant i's runs, one per seed; its entry of compare.json in *entry_p. */
static kvio_status_t run_variant(comparison_t *comparison, size_t i, json_t **entry_p,
                                 char *error_p, size_t error_len)
{
    const kvio_compare_options_t *options = comparison->options;
    variant_t *variant = &comparison->variants[i];
    json_t *runs = json_array();
    bool valid = true;
    kvio_status_t status = KVIO_OK;
    for (long r = 0; r < options->repeat && status == KVIO_OK; r++) {
        if (options->stop != NULL && *options->stop) {
            snprintf(error_p, error_len, "compare interrupted before variant %s", variant->name);
            status = KVIO_ERR_INTERRUPTED;
            break;
        }
        long long seed = comparison->base_seed + r;
        kvio_workload_t *workload_r = &comparison->loaded[i * (size_t)options->repeat + (size_t)r];
        char run_dir[1400], run_error[1024];
        if (options->repeat > 1)
            snprintf(run_dir, sizeof(run_dir), "%s/%s/seed-%lld", comparison->directory,
                     variant->name, seed);
        else
            snprintf(run_dir, sizeof(run_dir), "%s/%s", comparison->directory, variant->name);
        json_t *summary = NULL;
        kvio_run_options_t run_options = {.output_dir = run_dir, .force = options->force,
                                          .source = options->source, .quiet = true,
                                          .stop = options->stop, .summary_p = &summary,
                                          .control_cache = comparison->twins};
        kvio_run_result_t result;
        status = kvio_run(workload_r, &run_options, &result, run_error, sizeof(run_error));
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "variant %s: %s", variant->name, run_error);
            json_decref(summary);
            break;
        }
        /* The run's summary in memory: compare reads no file it wrote. */
        json_t *metrics = json_object_get(summary, "metrics");
        for (size_t m = 0; m < comparison->num_compared; m++)
            comparison->values[i][m][r] = read_metric(summary, &comparison->list[m]);
        const json_t *warnings = json_object_get(summary, "warnings");
        valid = valid && json_array_size(warnings) == 0;
        json_array_append_new(runs, json_pack("{s:s, s:I, s:O, s:b, s:O}", "dir", run_dir,
                                              "seed", (json_int_t)seed, "metrics",
                                              metrics != NULL ? metrics : json_null(), "valid",
                                              json_array_size(warnings) == 0, "warnings",
                                              warnings != NULL ? warnings : json_null()));
        json_decref(summary);
        if (options->progress != NULL)
            options->progress(options->context, ++comparison->done,
                              comparison->num_variants * (size_t)options->repeat,
                              variant->name);
    }
    if (status != KVIO_OK) {
        json_decref(runs);
        return status;
    }
    json_t *means = json_object();
    for (size_t m = 0; m < comparison->num_compared; m++) {
        double mean, half;
        kvio_mean_ci95(comparison->values[i][m], options->repeat, &mean, &half);
        if (isnan(mean))
            continue; /* an optional metric this variant does not have */
        /* The median and the coefficient of variation too: MLPerf Storage
         * reports the median of its trials, and their spread is the figure
         * that says whether a storage result can be trusted. */
        double median = NAN, cv = NAN;
        spread(comparison->values[i][m], options->repeat, &median, &cv);
        json_object_set_new(means, comparison->list[m].label,
                            json_pack("{s:f, s:f, s:f, s:f}", "mean", mean, "ci95", half,
                                      "median", median, "cv", cv));
    }
    json_t *entry = json_pack("{s:s, s:O, s:o, s:o}", "name", variant->name, "settings",
                              variant->settings, "runs", runs, "summary", means);
    json_object_set_new(entry, "overloaded", json_boolean(overloaded(means)));
    /* Valid when every run of it was (its runs list their warnings). */
    json_object_set_new(entry, "valid", json_boolean(valid));
    if (i > 0 && options->repeat > 1)
        json_object_set_new(entry, "paired_delta_vs_first",
                            paired_deltas(comparison->list, comparison->num_compared,
                                          comparison->values[0], comparison->values[i],
                                          options->repeat));
    *entry_p = entry;
    return KVIO_OK;
}

/* compare.csv: a row per variant and metric, its mean and interval and
 * its paired difference from the first variant (empty where none). */
static kvio_status_t write_compare_csv(kvio_results_t *top, const json_t *compare,
                                       char *error_p, size_t error_len)
{
    kvio_csv_t *csv = NULL;
    kvio_status_t status = kvio_csv_open(top, "compare.csv",
                                         "variant,metric,mean,ci95,delta_vs_first,delta_ci95",
                                         &csv);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "compare.csv: %s", kvio_strerror(status));
        return status;
    }
    const json_t *variants = json_object_get(compare, "variants");
    const json_t *rows = json_object_get(compare, "metrics");
    for (size_t v = 0; v < json_array_size(variants); v++) {
        const json_t *variant = json_array_get(variants, v);
        for (size_t m = 0; m < json_array_size(rows); m++) {
            const char *label = json_string_value(json_array_get(rows, m));
            const json_t *value = json_object_get(json_object_get(variant, "summary"), label);
            if (value == NULL)
                continue;
            const json_t *delta =
                json_object_get(json_object_get(variant, "paired_delta_vs_first"), label);
            char delta_text[96] = ",";
            if (delta != NULL)
                snprintf(delta_text, sizeof(delta_text), "%.10g,%.10g",
                         json_number_value(json_object_get(delta, "mean")),
                         json_number_value(json_object_get(delta, "ci95")));
            kvio_csv_row(csv, "%s,%s,%.10g,%.10g,%s",
                         json_string_value(json_object_get(variant, "name")), label,
                         json_number_value(json_object_get(value, "mean")),
                         json_number_value(json_object_get(value, "ci95")), delta_text);
        }
    }
    return kvio_csv_finish(csv, "compare.csv", error_p, error_len);
}

/* --metrics keys that no run of any variant had as a number (a typo added
 * nothing, silently): a warning each, printed and in compare.json. */
static json_t *unknown_metrics(const comparison_t *comparison)
{
    json_t *warnings = json_array();
    for (size_t m = NUM_FIXED; m < comparison->num_compared; m++) {
        bool seen = false;
        for (size_t i = 0; i < comparison->num_variants && !seen; i++)
            for (long r = 0; r < comparison->options->repeat && !seen; r++)
                seen = !isnan(comparison->values[i][m][r]);
        if (seen)
            continue;
        char message[512];
        snprintf(message, sizeof(message), "--metrics %s: no run has this number in "
                 "summary.json's metrics (a dotted path, e.g. model_updates.update_latency_ms.p99)",
                 comparison->list[m].key);
        kvio_warn("compare: %s", message);
        json_array_append_new(warnings, json_pack("{s:s, s:s, s:s}", "kind", "unknown_metric",
                                                  "metric", comparison->list[m].key, "message",
                                                  message));
    }
    return warnings;
}

kvio_status_t kvio_compare(const kvio_compare_options_t *options, json_t **compare_p,
                           char *error_p, size_t error_len)
{
    *compare_p = NULL;
    comparison_t comparison = {.options = options};
    kvio_status_t status = check_options(options, &comparison.num_variants, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    size_t total = comparison.num_variants * (size_t)options->repeat;
    comparison.variants = calloc(comparison.num_variants, sizeof(*comparison.variants));
    comparison.loaded = calloc(total, sizeof(*comparison.loaded));
    comparison.values = calloc(comparison.num_variants, sizeof(*comparison.values));
    comparison.num_compared = compared_list(options, comparison.list);
    comparison.twins = kvio_control_cache_create();
    json_t *variants_json = json_array();
    kvio_results_t *top = NULL;
    if (comparison.variants == NULL || comparison.values == NULL || comparison.loaded == NULL ||
        comparison.twins == NULL) {
        snprintf(error_p, error_len, "compare: out of memory");
        status = KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK)
        status = load_variants(&comparison, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_results_create(comparison.directory, "compare", options->force, &top,
                                     error_p, error_len);
    for (size_t i = 0; i < comparison.num_variants && status == KVIO_OK; i++) {
        json_t *entry = NULL;
        status = run_variant(&comparison, i, &entry, error_p, error_len);
        if (status == KVIO_OK)
            json_array_append_new(variants_json, entry);
    }
    if (status == KVIO_OK) {
        json_t *rows = json_array();
        for (size_t m = 0; m < comparison.num_compared; m++)
            json_array_append_new(rows, json_string(comparison.list[m].label));
        /* The twins served, and the runs that shared one served before. */
        uint64_t served = 0, shared = 0;
        kvio_control_cache_counts(comparison.twins, &served, &shared);
        json_t *compare = json_pack("{s:i, s:s, s:s, s:s, s:I, s:o, s:o, s:{s:I, s:I}}",
                                    "schema_version", KVIO_SCHEMA_VERSION, "kvio_version",
                                    KVIO_VERSION, "workload", options->source, "directory",
                                    comparison.directory, "repeat", (json_int_t)options->repeat,
                                    "metrics", rows, "variants", variants_json, "controls",
                                    "served", (json_int_t)served, "shared",
                                    (json_int_t)shared);
        variants_json = NULL;
        json_object_set_new(compare, "host", kvio_host_json());
        json_object_set_new(compare, "build", kvio_build_json());
        json_object_set_new(compare, "warnings", unknown_metrics(&comparison));
        status = kvio_results_write_json(top, "compare.json", compare, error_p, error_len);
        if (status == KVIO_OK)
            status = write_compare_csv(top, compare, error_p, error_len);
        if (status == KVIO_OK)
            *compare_p = compare;
        else
            json_decref(compare);
    }
    for (size_t i = 0; comparison.variants != NULL && i < comparison.num_variants; i++)
        json_decref(comparison.variants[i].settings);
    for (size_t i = 0; i < comparison.num_loaded; i++)
        kvio_workload_free(&comparison.loaded[i]);
    free(comparison.loaded);
    json_decref(variants_json);
    kvio_results_destroy(top);
    free(comparison.variants);
    free(comparison.values);
    kvio_control_cache_destroy(comparison.twins);
    return status;
}

/* Columns on a terminal: UTF-8 continuation bytes take none (± is two
 * bytes, one column). */
static int display_width(const char *text)
{
    int width = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++)
        width += (*c & 0xc0) != 0x80;
    return width;
}

/* Prints text right-aligned in width columns. */
static void print_cell(FILE *out, const char *text, int width)
{
    int pad = width - display_width(text);
    fprintf(out, "%*s%s", pad > 0 ? pad : 0, "", text);
}

/* Decimals that give a value about four significant digits without an
 * exponent (1.519e+04 ± 1.4e+04 read badly). */
static int decimals_for(double value)
{
    double magnitude = fabs(value);
    return magnitude >= 1000 ? 0 : magnitude >= 100 ? 1 : magnitude >= 1 || magnitude == 0 ? 2 : 4;
}

/* "mean ± ci95" (ci95 omitted when NAN: one run), signed (a difference)
 * or not, in fixed decimals. */
static void format_mean(double mean, double ci95, bool sign, char *cell, size_t size)
{
    /* The larger of the two decides: the interval's noise is not digits. */
    int decimals = decimals_for(!isnan(ci95) && fabs(ci95) > fabs(mean) ? ci95 : mean);
    if (isnan(ci95))
        snprintf(cell, size, sign ? "%+.*f" : "%.*f", decimals, mean);
    else
        snprintf(cell, size, sign ? "%+.*f ± %.*f" : "%.*f ± %.*f", decimals, mean, decimals,
                 ci95);
}

/* The cell of a variant's metric (from "summary", or a difference from
 * "paired_delta_vs_first"); "-" when the variant has none. */
static void format_cell(const json_t *variant, const char *section, const char *label,
                        long repeat, char *cell, size_t size)
{
    const json_t *value = json_object_get(json_object_get(variant, section), label);
    if (value == NULL) {
        snprintf(cell, size, "-");
        return;
    }
    format_mean(json_number_value(json_object_get(value, "mean")),
                repeat > 1 ? json_number_value(json_object_get(value, "ci95")) : NAN,
                strcmp(section, "summary") != 0, cell, size);
}

/* With several runs per variant: each variant's paired difference from the
 * first, run by run on the same seeds (what the seeds' spread hides). */
static void print_differences(const json_t *compare, int label_width, int cell_width,
                              FILE *out)
{
    const json_t *variants = json_object_get(compare, "variants");
    long repeat = (long)json_integer_value(json_object_get(compare, "repeat"));
    size_t count = json_array_size(variants);
    if (repeat < 2 || count < 2)
        return;
    fprintf(out, "  difference from %s, paired by seed (mean ± 95%% CI)\n",
            json_string_value(json_object_get(json_array_get(variants, 0), "name")));
    const json_t *rows = json_object_get(compare, "metrics");
    char cell[64];
    for (size_t m = 0; m < json_array_size(rows); m++) {
        const char *label = json_string_value(json_array_get(rows, m));
        bool shown = false;
        for (size_t v = 1; label != NULL && v < count && !shown; v++)
            shown = json_object_get(json_object_get(json_array_get(variants, v),
                                                    "paired_delta_vs_first"),
                                    label) != NULL;
        if (!shown)
            continue;
        fprintf(out, "  %-*s", label_width, label);
        print_cell(out, "", cell_width);
        for (size_t v = 1; v < count; v++) {
            format_cell(json_array_get(variants, v), "paired_delta_vs_first", label, repeat, cell,
                        sizeof(cell));
            print_cell(out, cell, cell_width);
        }
        fprintf(out, "\n");
    }
}

void kvio_compare_table(const json_t *compare, FILE *out)
{
    const json_t *variants = json_object_get(compare, "variants");
    long repeat = (long)json_integer_value(json_object_get(compare, "repeat"));
    size_t count = json_array_size(variants);
    fprintf(out, "kvio compare %s (%ld run%s per variant%s)\n",
            json_string_value(json_object_get(compare, "workload")), repeat,
            repeat > 1 ? "s" : "", repeat > 1 ? "; mean ± 95% CI" : "");
    /* Which rows show (some variant has the metric), and the widest name or
     * cell: every column that wide. */
    const json_t *rows = json_object_get(compare, "metrics");
    size_t num_rows = json_array_size(rows);
    int label_width = 28, cell_width = 12;
    char cell[64];
    for (size_t m = 0; m < num_rows; m++) {
        const char *label = json_string_value(json_array_get(rows, m));
        if (label != NULL && (int)strlen(label) + 2 > label_width)
            label_width = (int)strlen(label) + 2;
        for (size_t v = 0; label != NULL && v < count; v++) {
            for (int section = 0; section < 2; section++) {
                format_cell(json_array_get(variants, v),
                            section == 0 ? "summary" : "paired_delta_vs_first", label, repeat,
                            cell, sizeof(cell));
                if (display_width(cell) + 2 > cell_width)
                    cell_width = display_width(cell) + 2;
            }
        }
    }
    for (size_t v = 0; v < count; v++) {
        const char *name = json_string_value(json_object_get(json_array_get(variants, v), "name"));
        if (name != NULL && display_width(name) + 2 > cell_width)
            cell_width = display_width(name) + 2;
    }
    fprintf(out, "  %-*s", label_width, "metric");
    for (size_t v = 0; v < count; v++)
        print_cell(out, json_string_value(json_object_get(json_array_get(variants, v), "name")),
                   cell_width);
    fprintf(out, "\n");
    for (size_t m = 0; m < num_rows; m++) {
        const char *label = json_string_value(json_array_get(rows, m));
        bool shown = false;
        for (size_t v = 0; label != NULL && v < count && !shown; v++)
            shown = json_object_get(json_object_get(json_array_get(variants, v), "summary"),
                                    label) != NULL;
        if (!shown)
            continue;
        fprintf(out, "  %-*s", label_width, label);
        for (size_t v = 0; v < count; v++) {
            format_cell(json_array_get(variants, v), "summary", label, repeat, cell,
                        sizeof(cell));
            print_cell(out, cell, cell_width);
        }
        fprintf(out, "\n");
    }
    print_differences(compare, label_width, cell_width, out);
    const char *separator = "  overloaded (served under 80% of the offered rate, so their "
                            "latencies grow with the run's length): ";
    for (size_t v = 0; v < count; v++) {
        const json_t *variant = json_array_get(variants, v);
        if (!json_is_true(json_object_get(variant, "overloaded")))
            continue;
        fprintf(out, "%s%s", separator, json_string_value(json_object_get(variant, "name")));
        separator = ", ";
    }
    if (separator[0] == ',')
        fprintf(out, "\n");
    fprintf(out, "  results: %s (compare.json)\n",
            json_string_value(json_object_get(compare, "directory")));
}
