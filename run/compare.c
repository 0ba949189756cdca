/* kvio_compare: every variant checked before the first runs, then each run
 * on the identical stream (the same seeds); each run's figures taken from
 * its typed result (kvio/result.h, never from a file or JSON it wrote),
 * their means with 95 % confidence intervals (Student t) and, with seeds,
 * the paired difference from the first variant (seed by seed: the same
 * stream). Each variant's verdict is its runs' (an overloaded run is never
 * valid). compare.json, compare.csv and the table are rendered from the
 * comparison. The rows are the figures the declaration gives a compare
 * label (kvio/figures.def), then those --metrics names. */
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
/* Rows at most: every figure a build may declare, and the --metrics ones. */
#define MAX_COMPARED 1024

/* One row: a declared figure, with its label (the declaration's compare
 * label, or for --metrics its name). */
typedef struct compared {
    kvio_figure_t figure;
    const char *label;
    /* A list entry's figure (--metrics tiers.0.hits): its list ("tiers"),
     * the entry's index; NULL: a run's figure. */
    const char *list;
    size_t index;
} compared_t;

/* The figure a --metrics name says: a declared name, or a list entry's
 * (LIST.INDEX.NAME for a figure declared as LIST.NAME, e.g. tiers.0.hits:
 * the first tier's). */
static compared_t compared_find(const char *name)
{
    compared_t row = {.figure = kvio_figure_find(name), .label = name};
    const char *dot = strchr(name, '.');
    char *end = NULL;
    unsigned long long index = dot != NULL ? strtoull(dot + 1, &end, 10) : 0;
    if (row.figure != KVIO_FIGURE_NONE || dot == NULL || end == dot + 1 || *end != '.')
        return row;
    char declared[256];
    snprintf(declared, sizeof(declared), "%.*s%s", (int)(dot - name), name, end);
    row.figure = kvio_figure_find(declared);
    const kvio_figure_decl_t *decl =
        row.figure != KVIO_FIGURE_NONE ? kvio_figure_decl(row.figure) : NULL;
    if (decl == NULL || decl->scope == NULL ||
        strncmp(decl->scope, name, (size_t)(dot - name)) != 0 ||
        decl->scope[dot - name] != '\0')
        return (compared_t){.figure = KVIO_FIGURE_NONE, .label = name};
    row.list = decl->scope;
    row.index = (size_t)index;
    return row;
}

/* A row's value in a run's result (NAN when it has none). */
static double compared_value(const compared_t *row, const kvio_result_t *result)
{
    if (row->list == NULL)
        return kvio_result_get(result, row->figure);
    const kvio_result_t *entry = kvio_result_child_at(result, row->list, row->index);
    return entry != NULL ? kvio_result_get(entry, row->figure) : NAN;
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

/* The rows of this compare: the declared ones, then the options' figures
 * (each a declared figure's name; KVIO_ERR_CONFIG naming one that is not). */
static kvio_status_t compared_list(const kvio_compare_options_t *options, compared_t *list_p,
                                   size_t *count_p, char *error_p, size_t error_len)
{
    size_t count = 0;
    for (int f = 0; f < kvio_num_figures() && count < MAX_COMPARED - KVIO_COMPARE_MAX_METRICS;
         f++) {
        const kvio_figure_decl_t *decl = kvio_figure_decl((kvio_figure_t)f);
        if (decl->compare != NULL && decl->compare[0] != '\0')
            list_p[count++] = (compared_t){.figure = (kvio_figure_t)f, .label = decl->compare};
    }
    for (size_t m = 0; m < options->num_metrics && m < KVIO_COMPARE_MAX_METRICS; m++) {
        compared_t row = compared_find(options->metrics[m]);
        if (row.figure == KVIO_FIGURE_NONE ||
            kvio_figure_decl(row.figure)->kind == KVIO_KIND_TEXT) {
            snprintf(error_p, error_len, "--metrics %s: not a number kvio reports (the names "
                     "are summary.json's metrics paths, listed in docs/results.md, e.g. "
                     "model_updates.update_latency_ms.p99, or a list entry's as "
                     "tiers.0.hits)", options->metrics[m]);
            return KVIO_ERR_CONFIG;
        }
        list_p[count++] = row;
    }
    *count_p = count;
    return KVIO_OK;
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

/* One figure of one variant over its seeds: its mean and interval, median
 * and coefficient of variation, and its paired difference from the first
 * variant (with seeds). */
typedef struct figure_stats {
    bool present, has_delta;
    double mean, ci95, median, cv;
    double delta, delta_ci95;
} figure_stats_t;

/* A variant's runs and what they add up to. */
typedef struct variant_result {
    figure_stats_t stats[MAX_COMPARED];
    bool valid, overloaded; /* every run valid; some run overloaded */
    json_t *runs;           /* compare.json's list: dir, seed, valid, warnings */
} variant_result_t;

struct kvio_comparison {
    const kvio_compare_options_t *options;
    size_t num_variants, num_loaded, done;
    variant_t *variants;
    variant_result_t *results;
    kvio_workload_t *loaded;     /* every variant and seed, variant-major */
    compared_t list[MAX_COMPARED];
    size_t num_compared;
    double (*values)[MAX_COMPARED][KVIO_COMPARE_MAX_REPEAT];
    char directory[1024];
    long long base_seed;         /* the workload's own seed, with the common overrides */
    struct kvio_control_cache *twins; /* simulate's no-update twins, one per stream */
    uint64_t start_ns;
    json_t *host;
};

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

/* The base seed and the output directory from the workload as given. */
static kvio_status_t base_of(kvio_comparison_t *comparison, char *error_p, size_t error_len)
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
static kvio_status_t load_variants(kvio_comparison_t *comparison, char *error_p, size_t error_len)
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

/* The paired difference of each figure from the first variant, seed by
 * seed (the same stream): mean and 95 % interval. */
static void paired_deltas(kvio_comparison_t *comparison, size_t i)
{
    long repeat = comparison->options->repeat;
    for (size_t m = 0; m < comparison->num_compared; m++) {
        double differences[KVIO_COMPARE_MAX_REPEAT];
        bool present = true;
        for (long r = 0; r < repeat && present; r++) {
            differences[r] = comparison->values[i][m][r] - comparison->values[0][m][r];
            present = !isnan(differences[r]);
        }
        figure_stats_t *stats = &comparison->results[i].stats[m];
        if (!present)
            continue;
        kvio_mean_ci95(differences, repeat, &stats->delta, &stats->delta_ci95);
        stats->has_delta = true;
    }
}

/* One run of variant i with seed r: its figures into values, its verdict
 * into the variant's. */
static kvio_status_t run_one(kvio_comparison_t *comparison, size_t i, long r, char *error_p,
                             size_t error_len)
{
    const kvio_compare_options_t *options = comparison->options;
    variant_t *variant = &comparison->variants[i];
    variant_result_t *outcome = &comparison->results[i];
    long long seed = comparison->base_seed + r;
    kvio_workload_t *workload = &comparison->loaded[i * (size_t)options->repeat + (size_t)r];
    char run_dir[1400], run_error[1024];
    if (options->repeat > 1)
        snprintf(run_dir, sizeof(run_dir), "%s/%s/seed-%lld", comparison->directory,
                 variant->name, seed);
    else
        snprintf(run_dir, sizeof(run_dir), "%s/%s", comparison->directory, variant->name);
    kvio_result_t *result = NULL;
    kvio_run_options_t run_options = {.output_dir = run_dir, .force = options->force,
                                      .argv = options->argv, .argc = options->argc,
                                      .overrides = options->sets,
                                      .num_overrides = options->num_sets,
                                      .source = options->source, .quiet = true,
                                      .stop = options->stop, .result_p = &result,
                                      .control_cache = comparison->twins};
    kvio_run_result_t ran;
    kvio_status_t status = kvio_run(workload, &run_options, &ran, run_error, sizeof(run_error));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "variant %s: %s", variant->name, run_error);
        kvio_result_destroy(result);
        return status;
    }
    json_t *figures = json_object();
    for (size_t m = 0; m < comparison->num_compared; m++) {
        double value = compared_value(&comparison->list[m], result);
        comparison->values[i][m][r] = value;
        if (!isnan(value))
            json_object_set_new(figures, comparison->list[m].label, json_real(value));
    }
    outcome->valid = outcome->valid && kvio_result_valid(result);
    outcome->overloaded = outcome->overloaded || kvio_result_has_warning(result, "overload");
    json_array_append_new(outcome->runs,
                          json_pack("{s:s, s:I, s:o, s:b, s:o}", "dir", run_dir, "seed",
                                    (json_int_t)seed, "figures", figures, "valid",
                                    kvio_result_valid(result), "warnings",
                                    kvio_result_warnings_json(result)));
    kvio_result_destroy(result);
    return KVIO_OK;
}

/* Variant i's runs, one per seed, and their statistics. */
static kvio_status_t run_variant(kvio_comparison_t *comparison, size_t i, char *error_p,
                                 size_t error_len)
{
    const kvio_compare_options_t *options = comparison->options;
    variant_result_t *outcome = &comparison->results[i];
    outcome->valid = true;
    outcome->runs = json_array();
    kvio_status_t status = KVIO_OK;
    for (long r = 0; r < options->repeat && status == KVIO_OK; r++) {
        if (options->stop != NULL && *options->stop) {
            snprintf(error_p, error_len, "compare interrupted before variant %s",
                     comparison->variants[i].name);
            return KVIO_ERR_INTERRUPTED;
        }
        status = run_one(comparison, i, r, error_p, error_len);
        if (status == KVIO_OK && options->progress != NULL)
            options->progress(options->context, ++comparison->done,
                              comparison->num_variants * (size_t)options->repeat,
                              comparison->variants[i].name);
    }
    if (status != KVIO_OK)
        return status;
    for (size_t m = 0; m < comparison->num_compared; m++) {
        figure_stats_t *stats = &outcome->stats[m];
        kvio_mean_ci95(comparison->values[i][m], options->repeat, &stats->mean, &stats->ci95);
        if (isnan(stats->mean))
            continue; /* a figure this variant does not have */
        /* The median and the coefficient of variation too: MLPerf Storage
         * reports the median of its trials, and their spread is the figure
         * that says whether a storage result can be trusted. */
        stats->median = stats->cv = NAN;
        spread(comparison->values[i][m], options->repeat, &stats->median, &stats->cv);
        stats->present = true;
    }
    if (i > 0 && options->repeat > 1)
        paired_deltas(comparison, i);
    return KVIO_OK;
}

/* ---- rendering ----------------------------------------------------------- */

json_t *kvio_comparison_json(const kvio_comparison_t *comparison)
{
    const kvio_compare_options_t *options = comparison->options;
    kvio_provenance_t provenance = {.argc = options->argc, .argv = options->argv,
                                    .overrides = options->sets,
                                    .num_overrides = options->num_sets};
    json_t *compare = kvio_provenance_json(&provenance, comparison->host, comparison->start_ns);
    json_t *rows = json_array(), *variants = json_array();
    for (size_t m = 0; m < comparison->num_compared; m++)
        json_array_append_new(rows, json_pack("{s:s, s:s}", "label", comparison->list[m].label,
                                              "figure",
                                              kvio_figure_decl(comparison->list[m].figure)->name));
    for (size_t i = 0; i < comparison->num_variants; i++) {
        const variant_result_t *outcome = &comparison->results[i];
        json_t *means = json_object(), *deltas = json_object();
        for (size_t m = 0; m < comparison->num_compared; m++) {
            const figure_stats_t *stats = &outcome->stats[m];
            const char *label = comparison->list[m].label;
            if (stats->present)
                json_object_set_new(means, label,
                                    json_pack("{s:f, s:f, s:f, s:f}", "mean", stats->mean,
                                              "ci95", stats->ci95, "median", stats->median,
                                              "cv", stats->cv));
            if (stats->has_delta)
                json_object_set_new(deltas, label, json_pack("{s:f, s:f}", "mean", stats->delta,
                                                             "ci95", stats->delta_ci95));
        }
        json_t *entry = json_pack("{s:s, s:O, s:O, s:o, s:b, s:b}", "name",
                                  comparison->variants[i].name, "settings",
                                  comparison->variants[i].settings, "runs", outcome->runs,
                                  "summary", means, "valid", outcome->valid, "overloaded",
                                  outcome->overloaded);
        if (i > 0 && options->repeat > 1)
            json_object_set_new(entry, "paired_delta_vs_first", deltas);
        else
            json_decref(deltas);
        json_array_append_new(variants, entry);
    }
    uint64_t served = 0, shared = 0;
    kvio_control_cache_counts(comparison->twins, &served, &shared);
    json_object_set_new(compare, "workload", json_string(options->source));
    json_object_set_new(compare, "directory", json_string(comparison->directory));
    json_object_set_new(compare, "repeat", json_integer(options->repeat));
    json_object_set_new(compare, "metrics", rows);
    json_object_set_new(compare, "variants", variants);
    /* The twins served, and the runs that shared one served before. */
    json_object_set_new(compare, "controls", json_pack("{s:I, s:I}", "served", (json_int_t)served,
                                                       "shared", (json_int_t)shared));
    return compare;
}

/* compare.csv: a row per variant and figure, its mean and interval and its
 * paired difference from the first variant (empty where none). */
static kvio_status_t write_compare_csv(kvio_results_t *top, const kvio_comparison_t *comparison,
                                       char *error_p, size_t error_len)
{
    kvio_csv_t *csv = NULL;
    kvio_status_t status = kvio_csv_open(
        top, "compare.csv", "variant,metric,mean,ci95,delta_vs_first,delta_ci95,figure,valid",
        &csv);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "compare.csv: %s", kvio_strerror(status));
        return status;
    }
    for (size_t i = 0; i < comparison->num_variants; i++) {
        const variant_result_t *outcome = &comparison->results[i];
        for (size_t m = 0; m < comparison->num_compared; m++) {
            const figure_stats_t *stats = &outcome->stats[m];
            if (!stats->present)
                continue;
            char delta_text[96] = ",";
            if (stats->has_delta)
                snprintf(delta_text, sizeof(delta_text), "%.10g,%.10g", stats->delta,
                         stats->delta_ci95);
            kvio_csv_row(csv, "%s,%s,%.10g,%.10g,%s,%s,%s", comparison->variants[i].name,
                         comparison->list[m].label, stats->mean, stats->ci95, delta_text,
                         kvio_figure_decl(comparison->list[m].figure)->name,
                         outcome->valid ? "true" : "false");
        }
    }
    return kvio_csv_finish(csv, "compare.csv", error_p, error_len);
}

static void comparison_free(kvio_comparison_t *comparison)
{
    for (size_t i = 0; comparison->variants != NULL && i < comparison->num_variants; i++)
        json_decref(comparison->variants[i].settings);
    for (size_t i = 0; comparison->results != NULL && i < comparison->num_variants; i++)
        json_decref(comparison->results[i].runs);
    for (size_t i = 0; i < comparison->num_loaded; i++)
        kvio_workload_free(&comparison->loaded[i]);
    free(comparison->loaded);
    free(comparison->variants);
    free(comparison->results);
    free(comparison->values);
    kvio_control_cache_destroy(comparison->twins);
    json_decref(comparison->host);
    free(comparison);
}

void kvio_comparison_destroy(kvio_comparison_t *comparison)
{
    if (comparison != NULL)
        comparison_free(comparison);
}

kvio_status_t kvio_compare(const kvio_compare_options_t *options,
                           kvio_comparison_t **comparison_p, char *error_p, size_t error_len)
{
    *comparison_p = NULL;
    kvio_comparison_t *comparison = calloc(1, sizeof(*comparison));
    if (comparison == NULL)
        return KVIO_ERR_NOMEM;
    comparison->options = options;
    comparison->start_ns = kvio_wall_time_ns();
    kvio_status_t status = check_options(options, &comparison->num_variants, error_p, error_len);
    if (status == KVIO_OK)
        status = compared_list(options, comparison->list, &comparison->num_compared, error_p,
                               error_len);
    if (status != KVIO_OK) {
        comparison_free(comparison);
        return status;
    }
    size_t total = comparison->num_variants * (size_t)options->repeat;
    comparison->variants = calloc(comparison->num_variants, sizeof(*comparison->variants));
    comparison->results = calloc(comparison->num_variants, sizeof(*comparison->results));
    comparison->loaded = calloc(total, sizeof(*comparison->loaded));
    comparison->values = calloc(comparison->num_variants, sizeof(*comparison->values));
    comparison->twins = kvio_control_cache_create();
    comparison->host = kvio_host_json();
    kvio_results_t *top = NULL;
    if (comparison->variants == NULL || comparison->values == NULL ||
        comparison->loaded == NULL || comparison->results == NULL || comparison->twins == NULL) {
        snprintf(error_p, error_len, "compare: out of memory");
        status = KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK)
        status = load_variants(comparison, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_results_create(comparison->directory, "compare", options->force, &top,
                                     error_p, error_len);
    for (size_t i = 0; i < comparison->num_variants && status == KVIO_OK; i++)
        status = run_variant(comparison, i, error_p, error_len);
    if (status == KVIO_OK) {
        json_t *compare = kvio_comparison_json(comparison);
        status = kvio_results_write_json(top, "compare.json", compare, error_p, error_len);
        json_decref(compare);
    }
    if (status == KVIO_OK)
        status = write_compare_csv(top, comparison, error_p, error_len);
    kvio_results_destroy(top);
    if (status != KVIO_OK) {
        comparison_free(comparison);
        return status;
    }
    *comparison_p = comparison;
    return KVIO_OK;
}

/* ---- the table ----------------------------------------------------------- */

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

/* A variant's figure m (its mean, or its difference from the first
 * variant); "-" when the variant has none. */
static void format_cell(const kvio_comparison_t *comparison, size_t i, size_t m, bool delta,
                        char *cell, size_t size)
{
    const figure_stats_t *stats = &comparison->results[i].stats[m];
    long repeat = comparison->options->repeat;
    if (delta ? !stats->has_delta : !stats->present) {
        snprintf(cell, size, "-");
        return;
    }
    format_mean(delta ? stats->delta : stats->mean,
                repeat > 1 ? (delta ? stats->delta_ci95 : stats->ci95) : NAN, delta, cell, size);
}

/* Whether some variant (from the first one on) has figure m. */
static bool row_shown(const kvio_comparison_t *comparison, size_t m, size_t first, bool delta)
{
    for (size_t i = first; i < comparison->num_variants; i++)
        if (delta ? comparison->results[i].stats[m].has_delta
                  : comparison->results[i].stats[m].present)
            return true;
    return false;
}

/* With several runs per variant: each variant's paired difference from the
 * first, run by run on the same seeds (what the seeds' spread hides). */
static void print_differences(const kvio_comparison_t *comparison, int label_width,
                              int cell_width, FILE *out)
{
    if (comparison->options->repeat < 2 || comparison->num_variants < 2)
        return;
    fprintf(out, "  difference from %s, paired by seed (mean ± 95%% CI)\n",
            comparison->variants[0].name);
    char cell[64];
    for (size_t m = 0; m < comparison->num_compared; m++) {
        if (!row_shown(comparison, m, 1, true))
            continue;
        fprintf(out, "  %-*s", label_width, comparison->list[m].label);
        print_cell(out, "", cell_width);
        for (size_t i = 1; i < comparison->num_variants; i++) {
            format_cell(comparison, i, m, true, cell, sizeof(cell));
            print_cell(out, cell, cell_width);
        }
        fprintf(out, "\n");
    }
}

/* The variants whose runs were not all valid, and why (their runs' first
 * warning), under the table. */
static void print_verdicts(const kvio_comparison_t *comparison, FILE *out)
{
    for (size_t i = 0; i < comparison->num_variants; i++) {
        const variant_result_t *outcome = &comparison->results[i];
        if (outcome->valid)
            continue;
        const char *why = "";
        for (size_t r = 0; r < json_array_size(outcome->runs) && why[0] == '\0'; r++) {
            const json_t *warnings = json_object_get(json_array_get(outcome->runs, r), "warnings");
            if (json_array_size(warnings) > 0)
                why = json_string_value(json_object_get(json_array_get(warnings, 0), "message"));
        }
        fprintf(out, "  not valid: %s%s: %s\n", comparison->variants[i].name,
                outcome->overloaded ? " (overloaded)" : "", why != NULL ? why : "");
    }
}

void kvio_comparison_print(const kvio_comparison_t *comparison, FILE *out)
{
    long repeat = comparison->options->repeat;
    size_t count = comparison->num_variants;
    fprintf(out, "kvio compare %s (%ld run%s per variant%s)\n", comparison->options->source,
            repeat, repeat > 1 ? "s" : "", repeat > 1 ? "; mean ± 95% CI" : "");
    /* Every column as wide as the widest name or cell. */
    int label_width = 28, cell_width = 12;
    char cell[64];
    for (size_t m = 0; m < comparison->num_compared; m++) {
        int length = (int)strlen(comparison->list[m].label) + 2;
        label_width = length > label_width ? length : label_width;
        for (size_t i = 0; i < count; i++)
            for (int delta = 0; delta < 2; delta++) {
                format_cell(comparison, i, m, delta, cell, sizeof(cell));
                if (display_width(cell) + 2 > cell_width)
                    cell_width = display_width(cell) + 2;
            }
    }
    for (size_t i = 0; i < count; i++)
        if (display_width(comparison->variants[i].name) + 2 > cell_width)
            cell_width = display_width(comparison->variants[i].name) + 2;
    fprintf(out, "  %-*s", label_width, "metric");
    for (size_t i = 0; i < count; i++)
        print_cell(out, comparison->variants[i].name, cell_width);
    fprintf(out, "\n");
    for (size_t m = 0; m < comparison->num_compared; m++) {
        if (!row_shown(comparison, m, 0, false))
            continue;
        fprintf(out, "  %-*s", label_width, comparison->list[m].label);
        for (size_t i = 0; i < count; i++) {
            format_cell(comparison, i, m, false, cell, sizeof(cell));
            print_cell(out, cell, cell_width);
        }
        fprintf(out, "\n");
    }
    print_differences(comparison, label_width, cell_width, out);
    print_verdicts(comparison, out);
    fprintf(out, "  results: %s (compare.json)\n", comparison->directory);
}
