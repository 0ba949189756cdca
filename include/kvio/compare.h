/* kvio compare as a library: one workload run once per variant (the values
 * of each varied key, crossed when several vary) on the identical stream,
 * each variant with `repeat` seeds; the result is compare.json's object
 * (per variant: settings, runs with their metrics, per compared metric the
 * mean with a 95 % confidence interval and, with seeds, the paired
 * difference from the first variant). The CLI parses arguments and prints
 * kvio_compare_table. */
#ifndef KVIO_COMPARE_H
#define KVIO_COMPARE_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "kvio/status.h"

#define KVIO_COMPARE_MAX_VARY 4
#define KVIO_COMPARE_MAX_VALUES 32
#define KVIO_COMPARE_MAX_VARIANTS 256
#define KVIO_COMPARE_MAX_REPEAT 100
#define KVIO_COMPARE_MAX_METRICS 16

typedef struct kvio_compare_vary {
    const char *key;
    const char *const *values;
    size_t count;
} kvio_compare_vary_t;

typedef struct kvio_compare_options {
    const char *source;            /* workload file or preset */
    const char *const *sets;       /* KEY=VALUE overrides for every variant */
    size_t num_sets;
    /* The command as typed (compare.json's and each run's provenance, with
     * sets as the overrides); NULL: a library call. */
    const char *const *argv;
    int argc;
    const kvio_compare_vary_t *varies;
    size_t num_varies;
    long repeat;                   /* seeds per variant: seed .. seed + repeat - 1 */
    const char *output_dir;        /* NULL: results/compare-<name>-<time> */
    bool force;
    /* Extra rows: declared figures by name (summary.json's metrics paths,
     * dotted: "model_updates.update_latency_ms.p99"). */
    const char *const *metrics;
    size_t num_metrics;
    volatile sig_atomic_t *stop;   /* set to stop between runs; may be NULL */
    /* Called after each run (may be NULL): runs done of total, the variant. */
    void (*progress)(void *context, size_t done, size_t total, const char *variant);
    void *context;
} kvio_compare_options_t;

/* The outcome of a compare: every variant's runs, their figures' means
 * with 95 % intervals, medians and spreads, paired differences from the
 * first variant, and each variant's verdict. */
typedef struct kvio_comparison kvio_comparison_t;

/* Runs every variant (all loaded and checked before the first runs; a
 * --metrics name that is not a declared figure is refused then) and writes
 * compare.json and compare.csv into the output directory. *comparison_p
 * receives the outcome (kvio_comparison_destroy). */
kvio_status_t kvio_compare(const kvio_compare_options_t *options,
                           kvio_comparison_t **comparison_p, char *error_p, size_t error_len);

/* compare.json's content (a new reference): provenance, the rows, the
 * variants with their settings, runs, verdicts and statistics. */
json_t *kvio_comparison_json(const kvio_comparison_t *comparison);

/* The table: a row per figure some variant has, a column per variant;
 * with seeds the paired differences; the variants that are not valid, and
 * why. */
void kvio_comparison_print(const kvio_comparison_t *comparison, FILE *out);

void kvio_comparison_destroy(kvio_comparison_t *comparison);

#endif
