/* history: online quantiles of the outputs seen so far, per input-length
 * bucket (powers of two); a bucket with none borrows its nearest neighbour,
 * and with none seen at all the fallback length serves. */
#include "sched/sched_int.h"

#include "kvio/stats.h"

#define HISTORY_BUCKETS 32

typedef struct history_options {
    double quantile;
    int64_t fallback;
} history_options_t;

static const kvio_opt_t history_options[] = {
    {.key = "quantile", .type = KVIO_OPT_DOUBLE, .offset = offsetof(history_options_t, quantile),
     .default_value = "0.9", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "quantile of the outputs seen for the same input-length bucket"},
    {.key = "fallback", .type = KVIO_OPT_INT, .offset = offsetof(history_options_t, fallback),
     .default_value = "256", .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "the predicted output until any request has finished"},
    {.key = NULL},
};

typedef struct history {
    kvio_hist_t *buckets[HISTORY_BUCKETS];
} history_t;

static kvio_status_t history_init(kvio_sched_t *sched, uint64_t seed)
{
    (void)seed;
    history_t *history = sched->predictor_state;
    for (unsigned i = 0; i < HISTORY_BUCKETS; i++)
        if (kvio_hist_create(&history->buckets[i]) != KVIO_OK)
            return KVIO_ERR_NOMEM;
    return KVIO_OK;
}

static void history_fini(kvio_sched_t *sched)
{
    history_t *history = sched->predictor_state;
    for (unsigned i = 0; i < HISTORY_BUCKETS; i++)
        kvio_hist_destroy(history->buckets[i]);
}

static unsigned history_bucket(uint32_t prompt_tokens)
{
    unsigned bucket = 0;
    while (bucket + 1 < HISTORY_BUCKETS && (1u << (bucket + 1)) <= prompt_tokens)
        bucket++;
    return bucket;
}

static double seen_quantile(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    const history_options_t *options = sched->predictor_options;
    history_t *history = sched->predictor_state;
    unsigned bucket = history_bucket(request->prompt_tokens);
    for (unsigned distance = 0; distance < HISTORY_BUCKETS; distance++) {
        for (int sign = -1; sign <= 1; sign += 2) {
            int index = (int)bucket + sign * (int)distance;
            if (index < 0 || index >= HISTORY_BUCKETS)
                continue;
            if (kvio_hist_count(history->buckets[index]) > 0)
                return kvio_hist_quantile(history->buckets[index], options->quantile);
        }
    }
    return (double)options->fallback;
}

static void record_output(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    history_t *history = sched->predictor_state;
    kvio_hist_record(history->buckets[history_bucket(request->prompt_tokens)],
                     request->generated);
}

const kvio_sched_predictor_ops_t kvio_predictor_history = {
    .plugin = {.name = "history", .help = "online quantiles by input-length bucket",
               .options = history_options, .options_size = sizeof(history_options_t)},
    .state_size = sizeof(history_t),
    .init = history_init,
    .fini = history_fini,
    .predict = seen_quantile,
    .observe = record_output,
};
