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
    const kvio_compare_vary_t *varies;
    size_t num_varies;
    long repeat;                   /* seeds per variant: seed .. seed + repeat - 1 */
    const char *output_dir;        /* NULL: results/compare-<name>-<time> */
    bool force;
    /* Extra rows: numeric keys of summary.json's metrics, dotted
     * ("model_updates.update_latency_ms.p99", "tiers.0.hit_rate"). */
    const char *const *metrics;
    size_t num_metrics;
    volatile sig_atomic_t *stop;   /* set to stop between runs; may be NULL */
    /* Called after each run (may be NULL): runs done of total, the variant. */
    void (*progress)(void *context, size_t done, size_t total, const char *variant);
    void *context;
} kvio_compare_options_t;

/* Checks every variant (as kvio validate does) before running any, runs
 * them, writes DIR/<variant>[/seed-N]/ and DIR/compare.json, and returns
 * compare.json's object in *compare_p (caller decrefs; "directory" says
 * where). Errors name the variant. */
kvio_status_t kvio_compare(const kvio_compare_options_t *options, json_t **compare_p,
                           char *error_p, size_t error_len);

/* The variants side by side, one row per compared metric that some variant
 * has (serving, model updates, interference, then the extra ones). */
void kvio_compare_table(const json_t *compare, FILE *out);

#endif
