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

#include "kvio/stats.h"

/* The q quantile of count values (sorts them); 0 when none. */
static double quantile(double *values, size_t count, double q)
{
    return count > 0 ? kvio_quantile(values, count, q) : 0;
}

/* mean, p50, p99 and max of count values (sorted in place). */
static json_t *distribution_json(double *values, size_t count)
{
    double sum = 0;
    for (size_t i = 0; i < count; i++)
        sum += values[i];
    double mean = count > 0 ? sum / (double)count : 0;
    double p50 = quantile(values, count, 0.5), p99 = quantile(values, count, 0.99);
    return json_pack("{s:f, s:f, s:f, s:f}", "mean", mean, "p50", p50, "p99", p99, "max",
                     count > 0 ? values[count - 1] : 0.0);
}

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

/* {"with", "without", "delta"} of one figure. */
static json_t *pair_json(double with, double without)
{
    return json_pack("{s:f, s:f, s:f}", "with", with, "without", without, "delta",
                     with - without);
}

/* The run's cost of the updates, from the per-request deltas. */
typedef struct deltas {
    double *ttft, *tpot, *e2el, *itl, *cached;
    size_t num, num_tpot, affected, unpaired, unattributed;
    int64_t recomputed_tokens, cached_tokens;
} deltas_t;

static json_t *cost_json(deltas_t *deltas, side_t *with, side_t *without,
                         const kvio_update_record_t *updates, size_t num_updates)
{
    json_t *object = json_object();
    json_object_set_new(object, "control", json_string("twin"));
    json_object_set_new(object, "what",
                        json_string("each request served with updates minus the same request "
                                    "served without them (the same stream, seed and "
                                    "arrivals, in the same process)"));
    json_object_set_new(object, "requests_paired", json_integer((json_int_t)deltas->num));
    json_object_set_new(object, "requests_unpaired", json_integer((json_int_t)deltas->unpaired));
    json_object_set_new(object, "requests_affected", json_integer((json_int_t)deltas->affected));
    json_object_set_new(object, "affected_share",
                        json_real(deltas->num > 0 ? (double)deltas->affected / (double)deltas->num
                                                  : 0));
    json_object_set_new(object, "requests_unattributed",
                        json_integer((json_int_t)deltas->unattributed));
    json_object_set_new(object, "ttft_delta_ms", distribution_json(deltas->ttft, deltas->num));
    json_object_set_new(object, "tpot_delta_ms",
                        distribution_json(deltas->tpot, deltas->num_tpot));
    json_object_set_new(object, "e2el_delta_ms", distribution_json(deltas->e2el, deltas->num));
    json_object_set_new(object, "max_itl_delta_ms", distribution_json(deltas->itl, deltas->num));
    json_object_set_new(object, "cached_tokens_delta",
                        json_integer((json_int_t)deltas->cached_tokens));
    json_object_set_new(object, "recomputed_tokens",
                        json_integer((json_int_t)deltas->recomputed_tokens));
    json_object_set_new(object, "ttft_p99_ms",
                        pair_json(quantile(with->ttft, with->num, 0.99),
                                  quantile(without->ttft, without->num, 0.99)));
    json_object_set_new(object, "tpot_p99_ms",
                        pair_json(quantile(with->tpot, with->num_tpot, 0.99),
                                  quantile(without->tpot, without->num_tpot, 0.99)));
    json_object_set_new(object, "e2el_p99_ms",
                        pair_json(quantile(with->e2el, with->num, 0.99),
                                  quantile(without->e2el, without->num, 0.99)));
    json_object_set_new(object, "hit_rate",
                        pair_json(with->prompt > 0 ? with->cached / with->prompt : 0,
                                  without->prompt > 0 ? without->cached / without->prompt : 0));
    json_t *stall = kvio_update_stall_json(updates, num_updates);
    if (stall != NULL)
        json_object_set_new(object, "stall_ms_per_update", stall);
    static const char *const causes[] = KVIO_STALL_CAUSE_NAMES;
    json_t *causes_json = json_object();
    for (int c = 0; c < KVIO_STALL_CAUSES; c++) {
        double total = 0;
        for (size_t u = 0; u < num_updates; u++)
            total += (double)updates[u].stall_ns[c] / 1e6;
        json_object_set_new(causes_json, causes[c], json_real(total));
    }
    json_object_set_new(object, "stall_ms_by_cause", causes_json);
    return object;
}

static void *array_of(size_t count, size_t size)
{
    return calloc(count > 0 ? count : 1, size);
}

json_t *kvio_update_stall_json(const kvio_update_record_t *updates, size_t num_updates)
{
    double *stalls = array_of(num_updates, sizeof(double));
    if (stalls == NULL)
        return NULL;
    size_t count = 0;
    for (size_t u = 0; u < num_updates; u++) {
        if (updates[u].t_activated_ns == 0)
            continue;
        double total = 0;
        for (int c = 0; c < KVIO_STALL_CAUSES; c++)
            total += (double)updates[u].stall_ns[c] / 1e6;
        stalls[count++] = total;
    }
    json_t *object = distribution_json(stalls, count);
    free(stalls);
    return object;
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
    double *buffers = array_of(5 * n + 3 * n + 3 * m, sizeof(double));
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
    cost.json = cost_json(&deltas, &with_side, &without_side, updates, num_updates);
    free(sorted);
    free(buffers);
    if (cost.json == NULL) {
        free(cost.per_update);
        return KVIO_ERR_NOMEM;
    }
    *cost_p = cost;
    return KVIO_OK;
}

void kvio_control_cost_free(kvio_control_cost_t *cost)
{
    free(cost->per_update);
    json_decref(cost->json);
    memset(cost, 0, sizeof(*cost));
}

void kvio_control_cost_lines(const json_t *cost, char lines[3][96])
{
#define FIELD(key, field) json_number_value(json_object_get(json_object_get(cost, key), field))
    snprintf(lines[0], 96, "TTFT p99 %+.2f ms, TPOT p99 %+.3f ms", FIELD("ttft_p99_ms", "delta"),
             FIELD("tpot_p99_ms", "delta"));
    snprintf(lines[1], 96, "hit rate %+.2f pts, %lld requests affected",
             100 * FIELD("hit_rate", "delta"),
             (long long)json_integer_value(json_object_get(cost, "requests_affected")));
    snprintf(lines[2], 96, "stall p50/p99 %.1f/%.1f ms per update",
             FIELD("stall_ms_per_update", "p50"), FIELD("stall_ms_per_update", "p99"));
#undef FIELD
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
