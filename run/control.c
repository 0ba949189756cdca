/* What the model updates cost serving, measured against a control: the same
 * stream served without updates (simulate: a twin in the same process; the
 * engine is deterministic, so each request's difference from its twin is
 * the updates' effect on it). Per request (requests.csv's *_delta columns,
 * written by serve/), per update (updates.csv: the requests it affected,
 * the latency they gained, the tokens recomputed, how long the hit rate took
 * to recover) and for the run (summary.json update_cost). A request is the
 * update's whose effect on its rank began last before the request finished
 * (from the update's ready time: a stall, a drain or a lent pool start
 * after it). */
#include "run/run_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/rng.h"
#include "kvio/stats.h"

/* Updates ordered by rank, then ready time: each rank's in the order their
 * effect begins. */
typedef struct by_rank {
    int rank;
    int64_t ready_ns;
    size_t index;
} by_rank_t;

static int compare_by_rank(const void *a, const void *b)
{
    const by_rank_t *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->ready_ns != y->ready_ns)
        return x->ready_ns < y->ready_ns ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The update of the sorted ones on rank whose effect began last at or
 * before at_ns; SIZE_MAX when none. */
static size_t attribute(const by_rank_t *sorted, size_t count, int rank, int64_t at_ns)
{
    size_t low = 0, high = count;
    while (low < high) { /* the first entry after (rank, at_ns) */
        size_t middle = low + (high - low) / 2;
        if (sorted[middle].rank < rank ||
            (sorted[middle].rank == rank && sorted[middle].ready_ns <= at_ns))
            low = middle + 1;
        else
            high = middle;
    }
    if (low == 0 || sorted[low - 1].rank != rank)
        return SIZE_MAX;
    return sorted[low - 1].index;
}

/* What serving's figures were, with and without the updates: the p99s and
 * the hit rate of the measured requests. */
typedef struct side {
    double *ttft, *tpot, *e2el;
    size_t num, num_tpot;
    double prompt, cached;
} side_t;

static void side_add(side_t *side, const kvio_engine_finished_t *request)
{
    side->ttft[side->num] = (double)(request->first_token_ns - request->arrival_ns) / 1e6;
    side->e2el[side->num++] = (double)(request->finish_ns - request->arrival_ns) / 1e6;
    if (request->output_tokens > 1)
        side->tpot[side->num_tpot++] = (double)(request->finish_ns - request->first_token_ns) /
                                       1e6 / (double)(request->output_tokens - 1);
    side->prompt += request->prompt_tokens;
    side->cached += request->cached_tokens;
}

/* One figure with updates and without, and their difference (the figures
 * of a KVIO_PAIR_FIGURES group: with, without, delta). */
static void set_pair(kvio_result_t *result, kvio_figure_t with_figure, double with,
                     double without)
{
    kvio_result_set(result, with_figure, with);
    kvio_result_set(result, with_figure + 1, without);
    kvio_result_set(result, with_figure + 2, with - without);
}

static void sort_values(double *values, size_t count)
{
    if (kvio_sort_doubles(values, count) != KVIO_OK)
        qsort(values, count, sizeof(*values), kvio_compare_double);
}

/* The p99 of count values (sorted in place) as every figure computes it. */
static double p99(double *values, size_t count)
{
    sort_values(values, count);
    return kvio_percentile_linear(values, count, 99);
}

/* The half-width of the 2.5th to 97.5th percentile of count values
 * (sorted in place). */
static double percentile_half_width(double *values, size_t count)
{
    sort_values(values, count);
    return (kvio_percentile_linear(values, count, 97.5) -
            kvio_percentile_linear(values, count, 2.5)) / 2;
}

/* The run's cost of the updates, from the per-request deltas; the paired
 * requests' own figures on each side (pair_*: with, then without), for
 * the bootstrap. */
typedef struct deltas {
    double *ttft, *tpot, *e2el, *itl, *cached;
    size_t num, num_tpot, affected, unpaired, unattributed;
    int64_t recomputed_tokens, cached_tokens;
    double *pair_ttft[2], *pair_tpot[2], *pair_cached[2], *pair_prompt;
} deltas_t;

/* A paired request's own figures on each side, before deltas.num counts it. */
static void pair_add(deltas_t *deltas, const kvio_engine_finished_t *with,
                     const kvio_engine_finished_t *without)
{
    const kvio_engine_finished_t *sides[2] = {with, without};
    for (int k = 0; k < 2; k++) {
        const kvio_engine_finished_t *request = sides[k];
        deltas->pair_ttft[k][deltas->num] =
            (double)(request->first_token_ns - request->arrival_ns) / 1e6;
        deltas->pair_cached[k][deltas->num] = (double)request->cached_tokens;
        /* Counted as deltas.tpot counts it: when the request (with
         * updates) has more than one output token. */
        if (with->output_tokens > 1)
            deltas->pair_tpot[k][deltas->num_tpot] =
                request->output_tokens > 1
                    ? (double)(request->finish_ns - request->first_token_ns) / 1e6 /
                          (double)(request->output_tokens - 1)
                    : 0;
    }
    deltas->pair_prompt[deltas->num] = (double)with->prompt_tokens;
}

/* Resamples of the bootstrap, at most; fewer for a long run (the work is
 * resamples x requests, kept under BOOTSTRAP_WORK). */
#define BOOTSTRAP_RESAMPLES 1000
#define BOOTSTRAP_MIN_RESAMPLES 200
#define BOOTSTRAP_WORK 40000000.0

static size_t resamples_for(size_t count)
{
    if ((double)BOOTSTRAP_RESAMPLES * (double)count <= BOOTSTRAP_WORK)
        return BOOTSTRAP_RESAMPLES;
    return (size_t)fmax(BOOTSTRAP_MIN_RESAMPLES, BOOTSTRAP_WORK / (double)count);
}

/* The half-width of the 95 % interval of p99(with) - p99(without) over
 * count paired values: a paired bootstrap (requests drawn with their
 * twins, with replacement), the 2.5th to 97.5th percentile of the
 * resampled differences. scratch holds 2 x count values. */
static double p99_delta_half_width(const double *with, const double *without, size_t count,
                                   double *scratch, kvio_rng_t *rng)
{
    if (count < 2)
        return 0;
    size_t resamples = resamples_for(count);
    double *differences = malloc(resamples * sizeof(double));
    if (differences == NULL)
        return NAN;
    for (size_t b = 0; b < resamples; b++) {
        for (size_t i = 0; i < count; i++) {
            size_t k = (size_t)kvio_rng_below(rng, count);
            scratch[i] = with[k];
            scratch[count + i] = without[k];
        }
        differences[b] = p99(scratch, count) - p99(scratch + count, count);
    }
    double half = percentile_half_width(differences, resamples);
    free(differences);
    return half;
}

/* The same for the hit rate (cached over prompt tokens) with minus without. */
static double hit_rate_delta_half_width(const deltas_t *deltas, double *scratch, kvio_rng_t *rng)
{
    size_t count = deltas->num;
    if (count < 2)
        return 0;
    size_t resamples = resamples_for(count);
    for (size_t b = 0; b < resamples; b++) {
        double prompt = 0, with = 0, without = 0;
        for (size_t i = 0; i < count; i++) {
            size_t k = (size_t)kvio_rng_below(rng, count);
            prompt += deltas->pair_prompt[k];
            with += deltas->pair_cached[0][k];
            without += deltas->pair_cached[1][k];
        }
        scratch[b] = prompt > 0 ? (with - without) / prompt : 0;
    }
    return percentile_half_width(scratch, resamples);
}

/* The intervals of the twin's cost (update.control: twin: one run and its
 * control, so over the requests; paired replaces them with intervals over
 * the pairs). A placebo's deltas are all 0, and so are its intervals. */
static kvio_status_t cost_intervals(kvio_result_t *result, const deltas_t *deltas)
{
    size_t scratch_count = 2 * deltas->num > BOOTSTRAP_RESAMPLES ? 2 * deltas->num
                                                                 : BOOTSTRAP_RESAMPLES;
    double *scratch = malloc(scratch_count * sizeof(double));
    if (scratch == NULL)
        return KVIO_ERR_NOMEM;
    kvio_rng_t rng;
    kvio_rng_seed(&rng, 1, 0, "bootstrap");
    kvio_result_set(result, KVIO_FIG_COST_TTFT_P99_MS_DELTA_CI95,
                    p99_delta_half_width(deltas->pair_ttft[0], deltas->pair_ttft[1], deltas->num,
                                         scratch, &rng));
    kvio_result_set(result, KVIO_FIG_COST_TPOT_P99_MS_DELTA_CI95,
                    p99_delta_half_width(deltas->pair_tpot[0], deltas->pair_tpot[1],
                                         deltas->num_tpot, scratch, &rng));
    kvio_result_set(result, KVIO_FIG_COST_HIT_RATE_DELTA_CI95,
                    hit_rate_delta_half_width(deltas, scratch, &rng));
    free(scratch);
    return KVIO_OK;
}

static kvio_status_t cost_fill(kvio_result_t *result, deltas_t *deltas, side_t *with,
                               side_t *without)
{
    kvio_result_set_detail(result, "update_cost.control", json_string("twin"));
    kvio_result_set_detail(result, "update_cost.what",
                           json_string("each request served with updates minus the same "
                                       "request served without them (the same stream, seed "
                                       "and arrivals)"));
    kvio_result_set(result, KVIO_FIG_COST_REQUESTS_PAIRED, (double)deltas->num);
    kvio_result_set(result, KVIO_FIG_COST_REQUESTS_UNPAIRED, (double)deltas->unpaired);
    kvio_result_set(result, KVIO_FIG_COST_REQUESTS_AFFECTED, (double)deltas->affected);
    kvio_result_set(result, KVIO_FIG_COST_REQUESTS_UNATTRIBUTED, (double)deltas->unattributed);
    kvio_result_set_stats(result, KVIO_FIG_COST_TTFT_DELTA_MS_MEAN, deltas->ttft, deltas->num);
    kvio_result_set_stats(result, KVIO_FIG_COST_TPOT_DELTA_MS_MEAN, deltas->tpot,
                          deltas->num_tpot);
    kvio_result_set_stats(result, KVIO_FIG_COST_E2EL_DELTA_MS_MEAN, deltas->e2el, deltas->num);
    kvio_result_set_stats(result, KVIO_FIG_COST_MAX_ITL_DELTA_MS_MEAN, deltas->itl, deltas->num);
    kvio_result_set(result, KVIO_FIG_COST_CACHED_TOKENS_DELTA, (double)deltas->cached_tokens);
    kvio_result_set(result, KVIO_FIG_COST_RECOMPUTED_TOKENS, (double)deltas->recomputed_tokens);
    set_pair(result, KVIO_FIG_COST_TTFT_P99_MS_WITH, p99(with->ttft, with->num),
             p99(without->ttft, without->num));
    set_pair(result, KVIO_FIG_COST_TPOT_P99_MS_WITH, p99(with->tpot, with->num_tpot),
             p99(without->tpot, without->num_tpot));
    set_pair(result, KVIO_FIG_COST_E2EL_P99_MS_WITH, p99(with->e2el, with->num),
             p99(without->e2el, without->num));
    set_pair(result, KVIO_FIG_COST_HIT_RATE_WITH, with->prompt > 0 ? with->cached / with->prompt : 0,
             without->prompt > 0 ? without->cached / without->prompt : 0);
    return cost_intervals(result, deltas);
}

static void *array_of(size_t count, size_t size)
{
    return calloc(count > 0 ? count : 1, size);
}

kvio_status_t kvio_update_stall_fill(kvio_result_t *result, const kvio_update_record_t *updates,
                                    size_t num_updates)
{
    double *stalls = array_of(num_updates, sizeof(double));
    if (stalls == NULL)
        return KVIO_ERR_NOMEM;
    size_t count = 0;
    for (size_t u = 0; u < num_updates; u++) {
        if (updates[u].t_activated_ns == 0)
            continue;
        double total = 0;
        for (int c = 0; c < KVIO_STALL_CAUSES; c++)
            total += (double)updates[u].stall_ns[c] / 1e6;
        stalls[count++] = total;
    }
    kvio_result_set_stats(result, KVIO_FIG_STALL_PER_UPDATE_MS_MEAN, stalls, count);
    free(stalls);
    return KVIO_OK;
}

kvio_status_t kvio_control_measure(const kvio_serve_output_t *with,
                                   const kvio_serve_output_t *without,
                                   const kvio_update_record_t *updates, size_t num_updates,
                                   int64_t origin_ns, kvio_control_cost_t *cost_p)
{
    kvio_control_cost_t cost = {.num_updates = num_updates};
    size_t n = with->num_finished, m = without->num_finished;
    cost.per_update = array_of(num_updates, sizeof(*cost.per_update));
    by_rank_t *sorted = array_of(num_updates, sizeof(*sorted));
    double *buffers = array_of(5 * n + 3 * n + 3 * m + 7 * n, sizeof(double));
    if (cost.per_update == NULL || sorted == NULL || buffers == NULL) {
        free(cost.per_update);
        free(sorted);
        free(buffers);
        return KVIO_ERR_NOMEM;
    }
    double *at = buffers;
    deltas_t deltas = {.ttft = at, .tpot = at + n, .e2el = at + 2 * n, .itl = at + 3 * n,
                       .cached = at + 4 * n};
    at += 5 * n;
    side_t with_side = {.ttft = at, .tpot = at + n, .e2el = at + 2 * n};
    at += 3 * n;
    side_t without_side = {.ttft = at, .tpot = at + m, .e2el = at + 2 * m};
    at += 3 * m;
    deltas.pair_ttft[0] = at, deltas.pair_ttft[1] = at + n;
    deltas.pair_tpot[0] = at + 2 * n, deltas.pair_tpot[1] = at + 3 * n;
    deltas.pair_cached[0] = at + 4 * n, deltas.pair_cached[1] = at + 5 * n;
    deltas.pair_prompt = at + 6 * n;
    for (size_t u = 0; u < num_updates; u++)
        sorted[u] = (by_rank_t){.rank = updates[u].rank,
                                .ready_ns = updates[u].t_ready_ns - origin_ns, .index = u};
    qsort(sorted, num_updates, sizeof(*sorted), compare_by_rank);
    for (size_t i = 0; i < m; i++)
        if (without->finished[i].measured)
            side_add(&without_side, &without->finished[i]);
    for (size_t i = 0; i < n; i++) {
        const kvio_engine_finished_t *request = &with->finished[i];
        if (!request->measured)
            continue;
        side_add(&with_side, request);
        const kvio_engine_finished_t *twin = kvio_serve_output_find(without, request->id);
        if (twin == NULL) {
            deltas.unpaired++;
            continue;
        }
        kvio_request_delta_t delta = kvio_request_delta(request, twin);
        pair_add(&deltas, request, twin);
        deltas.ttft[deltas.num] = (double)delta.ttft_ns / 1e6;
        deltas.e2el[deltas.num] = (double)delta.e2el_ns / 1e6;
        deltas.itl[deltas.num] = (double)delta.max_itl_ns / 1e6;
        deltas.cached[deltas.num++] = (double)delta.cached_tokens;
        if (request->output_tokens > 1)
            deltas.tpot[deltas.num_tpot++] = delta.tpot_ns / 1e6;
        deltas.cached_tokens += delta.cached_tokens;
        deltas.recomputed_tokens += delta.recomputed_tokens;
        if (!kvio_request_delta_any(&delta))
            continue;
        deltas.affected++;
        size_t u = attribute(sorted, num_updates, (int)request->rank, request->finish_ns);
        if (u == SIZE_MAX) {
            deltas.unattributed++;
            continue;
        }
        kvio_control_update_t *update = &cost.per_update[u];
        update->affected++;
        update->added_e2el_ms += (double)delta.e2el_ns / 1e6;
        update->recomputed_tokens += delta.recomputed_tokens;
        int64_t activated = updates[u].t_activated_ns - origin_ns;
        if (delta.cached_tokens < 0 && updates[u].t_activated_ns != 0 &&
            request->arrival_ns > activated &&
            (double)(request->arrival_ns - activated) / 1e6 > update->hit_recovery_ms)
            update->hit_recovery_ms = (double)(request->arrival_ns - activated) / 1e6;
    }
    cost.figures = kvio_result_create();
    kvio_status_t status = cost.figures != NULL
                               ? cost_fill(cost.figures, &deltas, &with_side, &without_side)
                               : KVIO_ERR_NOMEM;
    free(sorted);
    free(buffers);
    if (status != KVIO_OK) {
        kvio_result_destroy(cost.figures);
        free(cost.per_update);
        return status;
    }
    *cost_p = cost;
    return KVIO_OK;
}

void kvio_control_cost_free(kvio_control_cost_t *cost)
{
    free(cost->per_update);
    kvio_result_destroy(cost->figures);
    memset(cost, 0, sizeof(*cost));
}

/* ---------- twins shared among runs (kvio compare) ---------- */

typedef struct cached_twin {
    char *key;
    kvio_serve_output_t twin;
} cached_twin_t;

struct kvio_control_cache {
    cached_twin_t *entries;
    size_t count, capacity;
    uint64_t served, shared; /* twins served, and taken from here */
};

kvio_control_cache_t *kvio_control_cache_create(void)
{
    return calloc(1, sizeof(kvio_control_cache_t));
}

void kvio_control_cache_destroy(kvio_control_cache_t *cache)
{
    if (cache == NULL)
        return;
    for (size_t i = 0; i < cache->count; i++) {
        free(cache->entries[i].key);
        kvio_serve_output_free(&cache->entries[i].twin);
    }
    free(cache->entries);
    free(cache);
}

char *kvio_control_key(const kvio_workload_t *workload)
{
    json_t *config = kvio_config_to_json(kvio_workload_options, workload);
    if (config == NULL)
        return NULL;
    /* What the twin's serving does not depend on; the stream's length is
     * kept (it may follow the trainer's steps). */
    static const char *const apart[] = {"name", "train", "update", "weight_sync"};
    for (size_t i = 0; i < sizeof(apart) / sizeof(apart[0]); i++)
        json_object_del(config, apart[i]);
    json_object_set_new(config, "stream_duration_ns",
                        json_integer((json_int_t)kvio_workload_stream_duration(workload)));
    char *key = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(config);
    return key;
}

kvio_status_t kvio_control_cache_take(kvio_control_cache_t *cache, const char *key,
                                      kvio_serve_output_t *twin_p, bool *found_p)
{
    *found_p = false;
    for (size_t i = 0; i < cache->count; i++) {
        if (strcmp(cache->entries[i].key, key) != 0)
            continue;
        *found_p = true;
        cache->shared++;
        return kvio_serve_output_copy(twin_p, &cache->entries[i].twin);
    }
    return KVIO_OK;
}

kvio_status_t kvio_control_cache_put(kvio_control_cache_t *cache, const char *key,
                                     const kvio_serve_output_t *twin)
{
    cache->served++;
    if (cache->count == cache->capacity) {
        size_t capacity = cache->capacity > 0 ? 2 * cache->capacity : 4;
        cached_twin_t *bigger = realloc(cache->entries, capacity * sizeof(*bigger));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        cache->entries = bigger;
        cache->capacity = capacity;
    }
    cached_twin_t *entry = &cache->entries[cache->count];
    entry->key = strdup(key);
    if (entry->key == NULL)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = kvio_serve_output_copy(&entry->twin, twin);
    if (status != KVIO_OK) {
        free(entry->key);
        return status;
    }
    cache->count++;
    return KVIO_OK;
}

void kvio_control_cache_counts(const kvio_control_cache_t *cache, uint64_t *served_p,
                               uint64_t *shared_p)
{
    *served_p = cache->served;
    *shared_p = cache->shared;
}
