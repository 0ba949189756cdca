/* Simulate mode: a discrete-event loop on a virtual clock. Arrivals from the
 * stream are routed to serve ranks; each rank's engine runs iterations whose
 * length the cost model gives. Also the `serve:` and `slo:` option tables,
 * KV capacity in blocks, and the serving metrics as JSON. */
#include "kvio/serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/log.h"
#include "kvio/model.h"
#include "serve/serve_int.h"
#include "kvio/progress.h"

const kvio_opt_t kvio_serve_options[] = {
    {.key = "engine", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_serve_config_t, engine),
     .options = kvio_engine_options},
    {.key = "scheduler", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_serve_config_t, scheduler), .options = kvio_sched_options},
    {.key = "kvcache", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_serve_config_t, kvcache),
     .options = kvio_kvcache_section_options},
    {.key = "router", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_serve_config_t, router),
     .options = kvio_router_options},
    {.key = "max_concurrency", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_serve_config_t, max_concurrency), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "closed loop: at most this many requests in flight (0: open loop)"},
    {.key = NULL},
};

const kvio_opt_t kvio_slo_options[] = {
    {.key = "ttft", .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_slo_config_t, ttft_ns),
     .default_value = "0s", .help = "time-to-first-token bound for goodput (0: none)"},
    {.key = "tpot", .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_slo_config_t, tpot_ns),
     .default_value = "0s", .help = "time-per-output-token bound for goodput (0: none)"},
    {.key = NULL},
};

kvio_status_t kvio_serve_kv_blocks(const kvio_serve_config_t *serve, const kvio_model_t *model,
                                   const kvio_gpu_t *gpu, int64_t tensor_parallel,
                                   uint32_t *blocks_p, char *error_p, size_t error_len)
{
    const kvio_kvcache_section_t *kv = &serve->kvcache;
    uint64_t block_bytes = kvio_model_kv_bytes_per_token(model, tensor_parallel) *
                           (uint64_t)kv->block_size;
    uint64_t blocks;
    if (kv->blocks > 0) {
        blocks = (uint64_t)kv->blocks;
    } else {
        uint64_t capacity = kv->capacity;
        if (capacity == 0) {
            kvio_status_t status = kvio_model_kv_capacity(model, gpu, tensor_parallel,
                                                         kv->gpu_memory_utilization, &capacity,
                                                         error_p, error_len);
            if (status != KVIO_OK)
                return status;
        }
        blocks = block_bytes > 0 ? capacity / block_bytes : 0;
    }
    if (blocks < 1) {
        snprintf(error_p, error_len,
                 "serve.kvcache: the capacity holds no block of %llu bytes (%lld tokens)",
                 (unsigned long long)block_bytes, (long long)kv->block_size);
        return KVIO_ERR_CONFIG;
    }
    if (blocks > 1000000000ull) {
        snprintf(error_p, error_len, "serve.kvcache: %llu blocks is more than kvio supports (1e9)",
                 (unsigned long long)blocks);
        return KVIO_ERR_CONFIG;
    }
    *blocks_p = (uint32_t)blocks;
    return KVIO_OK;
}

/* ---------- metrics ---------- */

json_t *kvio_serve_metrics_json(const kvio_engine_metrics_t *metrics)
{
    double window_s = metrics->measure_end_ns > metrics->measure_start_ns
                          ? (double)(metrics->measure_end_ns - metrics->measure_start_ns) / 1e9
                          : 0;
    double span_s = metrics->last_finish_ns > metrics->first_arrival_ns
                        ? (double)(metrics->last_finish_ns - metrics->first_arrival_ns) / 1e9
                        : 0;
    double per_s = window_s > 0 ? 1.0 / window_s : 0;
    json_t *object = json_object();
    json_object_set_new(object, "completed", json_integer((json_int_t)metrics->requests));
    json_object_set_new(object, "measured", json_integer((json_int_t)metrics->measured_requests));
    json_object_set_new(object, "duration_s", json_real(window_s));
    json_object_set_new(object, "ttft_ms", kvio_hist_json(metrics->ttft, 1e-6));
    json_object_set_new(object, "tpot_ms", kvio_hist_json(metrics->tpot, 1e-6));
    json_object_set_new(object, "itl_ms", kvio_hist_json(metrics->itl, 1e-6));
    json_object_set_new(object, "e2el_ms", kvio_hist_json(metrics->e2el, 1e-6));
    json_object_set_new(object, "request_throughput",
                        json_real((double)metrics->measured_requests * per_s));
    json_object_set_new(object, "input_throughput",
                        json_real((double)metrics->input_tokens * per_s));
    json_object_set_new(object, "output_throughput",
                        json_real((double)metrics->output_tokens * per_s));
    /* Goodput only against an SLO: without one it would be the throughput
     * again, named as if the requests had met something (vLLM reports none). */
    if (metrics->slo)
        json_object_set_new(object, "goodput",
                            json_real((double)metrics->good_requests * per_s));
    /* The load offered: requests per second between the first and the last
     * arrival (throughput below it means the engines fell behind). */
    double arrival_s = metrics->arrivals > 1 && metrics->last_arrival_ns > metrics->first_arrival_ns
                           ? (double)(metrics->last_arrival_ns - metrics->first_arrival_ns) / 1e9
                           : 0;
    json_object_set_new(object, "offered_rate",
                        json_real(arrival_s > 0 ? (double)(metrics->arrivals - 1) / arrival_s
                                                : 0));
    json_object_set_new(object, "input_tokens", json_integer((json_int_t)metrics->input_tokens));
    json_object_set_new(object, "output_tokens", json_integer((json_int_t)metrics->output_tokens));
    json_object_set_new(object, "prefix_cache_queries",
                        json_integer((json_int_t)metrics->prefix_queries));
    json_object_set_new(object, "prefix_cache_hits", json_integer((json_int_t)metrics->prefix_hits));
    json_object_set_new(object, "hit_rate",
                        json_real(metrics->prefix_queries
                                      ? (double)metrics->prefix_hits / (double)metrics->prefix_queries
                                      : 0));
    json_object_set_new(object, "tier_hit_tokens", json_integer((json_int_t)metrics->tier_hit_tokens));
    json_object_set_new(object, "hit_rate_with_tiers",
                        json_real(metrics->prefix_queries
                                      ? (double)(metrics->prefix_hits + metrics->tier_hit_tokens) /
                                            (double)metrics->prefix_queries
                                      : 0));
    json_object_set_new(object, "resumed_prefix_cache_queries",
                        json_integer((json_int_t)metrics->resumed_prefix_queries));
    json_object_set_new(object, "resumed_prefix_cache_hits",
                        json_integer((json_int_t)metrics->resumed_prefix_hits));
    json_object_set_new(object, "preemptions", json_integer((json_int_t)metrics->preemptions));
    json_object_set_new(object, "mispredict_preemptions",
                        json_integer((json_int_t)metrics->mispredict_preemptions));
    json_object_set_new(object, "recomputed_tokens",
                        json_integer((json_int_t)metrics->recomputed_tokens));
    json_object_set_new(object, "swapped_bytes", json_integer((json_int_t)metrics->swapped_bytes));
    json_object_set_new(object, "swap_space_exhausted",
                        json_integer((json_int_t)metrics->swap_space_exhausted));
    json_object_set_new(object, "iterations", json_integer((json_int_t)metrics->iterations));
    if (metrics->versions_activated > 0)
        json_object_set_new(
            object, "update_effects",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "versions_activated",
                      (json_int_t)metrics->versions_activated, "stale_hit_tokens",
                      (json_int_t)metrics->stale_hit_tokens, "cache_flushed_blocks",
                      (json_int_t)metrics->cache_flushed_blocks, "mixed_version_tokens",
                      (json_int_t)metrics->mixed_version_tokens, "update_aborted_requests",
                      (json_int_t)metrics->update_aborted_requests, "update_recomputed_tokens",
                      (json_int_t)metrics->update_recomputed_tokens, "colocated_preemptions",
                      (json_int_t)metrics->colocated_preemptions));
    json_object_set_new(object, "kv_usage_mean",
                        json_real(metrics->measured_busy_ns > 0
                                      ? metrics->usage_time_integral /
                                            (double)metrics->measured_busy_ns
                                      : 0));
    json_object_set_new(object, "kv_usage_max", json_real(metrics->max_usage));
    /* DLIO's AU: compute time per engine over the run's span; the time the
     * engine waited on swap and tier transfers is I/O stall, apart. */
    double engines = metrics->engines > 0 ? (double)metrics->engines : 1.0;
    double compute_ns = (double)(metrics->busy_ns - metrics->io_stall_ns);
    json_object_set_new(object, "accelerator_utilization",
                        json_real(span_s > 0 ? compute_ns / 1e9 / span_s / engines : 0));
    json_object_set_new(object, "io_stall_fraction",
                        json_real(span_s > 0 ? (double)metrics->io_stall_ns / 1e9 / span_s /
                                                   engines
                                             : 0));
    return object;
}

void kvio_serve_loss_json(json_t *metrics, const kvio_serve_run_t *run, const uint64_t *served,
                          size_t num_versions)
{
    double loss = 0;
    uint64_t requests = 0;
    json_t *by_version = json_array();
    for (size_t v = 0; v < num_versions; v++) {
        if (served[v] == 0)
            continue;
        double step = v > 0 && v < run->num_version_steps && run->version_steps[v] > 0
                          ? run->version_steps[v]
                          : 1.0;
        double per_request = kvio_loss_at(run->loss, step);
        loss += per_request * (double)served[v];
        requests += served[v];
        json_array_append_new(by_version, json_pack("{s:I, s:f, s:I, s:f}", "version",
                                                    (json_int_t)v, "step", step, "requests",
                                                    (json_int_t)served[v], "loss", per_request));
    }
    json_object_set_new(metrics, "cumulative_inference_loss", json_real(loss));
    json_object_set_new(metrics, "mean_inference_loss",
                        json_real(requests > 0 ? loss / (double)requests : 0));
    json_object_set_new(metrics, "served_by_version", by_version);
}

uint32_t kvio_serve_lent_blocks(const kvio_update_config_t *update, uint64_t bytes,
                                uint64_t block_bytes)
{
    if (update == NULL || update->colocated == KVIO_COLOCATED_OFF || bytes == 0)
        return 0;
    if (update->colocated == KVIO_COLOCATED_RELEASE || block_bytes == 0)
        return UINT32_MAX; /* kvio_engine_reserve takes at most the pool */
    uint64_t blocks = (bytes + block_bytes - 1) / block_bytes;
    return blocks < UINT32_MAX ? (uint32_t)blocks : UINT32_MAX;
}

/* ---------- the event loop ---------- */

typedef struct simulation {
    const kvio_serve_run_t *run;
    uint32_t num_ranks;
    uint32_t block_size;
    kvio_cost_t *cost;
    kvio_engine_t **engines;
    kvio_tier_t ***tiers; /* per rank, modelled lower tiers */
    size_t num_tiers;
    int64_t *busy_until; /* end of the running iteration; -1: idle */
    bool *woken;         /* idle, given a request at this instant: starts after them */
    kvio_router_t *router;
    kvio_csv_t *requests_csv, *iterations_csv;
    kvio_hash_buffer_t hashes;
    kvio_deferred_queue_t *deferred; /* requests hashed when first looked up */
    uint64_t in_flight;
    /* With model updates (run->updates): per rank the active version, the
     * next of run->updates to look at, and whether the running "iteration"
     * is an update stall; finished requests per version. */
    uint64_t *version;
    uint64_t *engine_version; /* the version the rank's engine runs */
    uint64_t block_bytes;     /* KV bytes of one block (update.colocated) */
    int64_t *idle_since;      /* when the rank last went idle (busy_until -1) */
    int64_t *drain_start;     /* in_flight: wait: when admission stopped; -1: not */
    size_t *update_at;
    bool *stalled;
    uint64_t *served;
    size_t num_versions;
} simulation_t;

static void on_finish(void *context, const kvio_engine_finished_t *finished)
{
    simulation_t *sim = context;
    sim->in_flight--;
    /* Every version a request can carry has a step (one per published). */
    if (sim->served != NULL && finished->tag < sim->num_versions)
        sim->served[finished->tag]++;
    if (sim->requests_csv == NULL)
        return;
    char row[256];
    int length = kvio_serve_request_row(finished, row, sizeof(row));
    kvio_csv_line(sim->requests_csv, row,
                  (size_t)length < sizeof(row) ? (size_t)length : sizeof(row) - 1);
}

void kvio_serve_trace_iteration(kvio_event_trace_t *events, const kvio_engine_t *engine,
                                uint32_t rank, const kvio_engine_iteration_t *iteration,
                                double host_bandwidth)
{
    if (events == NULL)
        return;
    const kvio_engine_scheduled_t *items = NULL;
    size_t count = 0;
    kvio_engine_last_scheduled(engine, &items, &count);
    uint64_t ids[KVIO_EVENT_MAX_REQUEST_IDS];
    size_t shown = count < KVIO_EVENT_MAX_REQUEST_IDS ? count : KVIO_EVENT_MAX_REQUEST_IDS;
    for (size_t i = 0; i < shown; i++)
        ids[i] = items[i].id;
    /* num_request_ids is the batch size; only the first ids are written. */
    kvio_serve_trace_iteration_ids(events, rank, iteration, ids, count, host_bandwidth);
}

void kvio_serve_trace_iteration_ids(kvio_event_trace_t *events, uint32_t rank,
                                    const kvio_engine_iteration_t *iteration,
                                    const uint64_t *ids, size_t num_ids, double host_bandwidth)
{
    if (events == NULL)
        return;
    kvio_event_arg_t args[] = {
        {"batch_size", iteration->num_scheduled},
        {"prefill_tokens", (double)iteration->batch.prefill_tokens},
        {"decode_seqs", (double)iteration->batch.decode_seqs},
        {"kv_usage", iteration->kv_usage},
        {"running", iteration->running},
        {"waiting", iteration->waiting},
        {"preempted", iteration->num_preempted},
    };
    kvio_event_t event = {.kind = KVIO_EVENT_ITERATION, .name = "iteration", .rank = rank,
                          .start_ns = iteration->start_ns, .duration_ns = iteration->duration_ns,
                          .bytes = -1, .request_ids = ids, .num_request_ids = num_ids,
                          .args = args, .num_args = sizeof(args) / sizeof(args[0])};
    kvio_event_trace_write(events, &event);
    if (iteration->swap_bytes > 0 && host_bandwidth > 0)
        kvio_event_trace_swap(events, rank, 1, iteration->start_ns,
                              (int64_t)((double)iteration->swap_bytes / host_bandwidth * 1e9),
                              (int64_t)iteration->swap_bytes, NULL, 0);
    if (iteration->tier_ns > 0)
        kvio_event_trace_tier(events, rank, "tiers", 0, iteration->start_ns, iteration->tier_ns,
                              (int64_t)iteration->tier_loaded_tokens, NULL, 0);
}

kvio_status_t kvio_hash_buffer_reserve(kvio_hash_buffer_t *buffer, size_t count)
{
    if (count <= buffer->capacity)
        return KVIO_OK;
    size_t capacity = count + 1024;
    kvio_hash_t *bigger = realloc(buffer->hashes, capacity * sizeof(*bigger));
    if (bigger == NULL)
        return KVIO_ERR_NOMEM;
    buffer->hashes = bigger;
    buffer->capacity = capacity;
    return KVIO_OK;
}

kvio_status_t kvio_serve_engine_request(const kvio_request_t *request, uint32_t block_size,
                                        int64_t arrival_ns, bool measured, uint64_t tag,
                                        kvio_hash_buffer_t *buffer,
                                        kvio_engine_request_t *engine_request_p)
{
    size_t num_blocks = ((size_t)request->input_tokens + request->output_tokens) / block_size;
    kvio_status_t status = kvio_hash_buffer_reserve(buffer, num_blocks);
    if (status != KVIO_OK)
        return status;
    status = kvio_request_block_hashes(request, block_size, 0, num_blocks, NULL,
                                                     buffer->hashes);
    if (status != KVIO_OK)
        return status;
    *engine_request_p = (kvio_engine_request_t){
        .id = request->id, .arrival_ns = arrival_ns, .prompt_tokens = request->input_tokens,
        .output_tokens = request->output_tokens, .max_tokens = request->max_tokens,
        .priority = request->priority, .hashes = buffer->hashes, .num_hashes = num_blocks,
        .measured = measured, .tag = tag,
    };
    return KVIO_OK;
}

/* ---------- CSV rows ---------- */

static char *append_unsigned(char *out, uint64_t value)
{
    return out + kvio_format_unsigned(out, value);
}

static char *append_fixed(char *out, double value, int decimals)
{
    return out + kvio_format_fixed(out, value, decimals);
}

/* The longest row: every %.6f at its longest (a double near DBL_MAX has
 * 309 digits before the point), with the integers. */
#define ROW_MAX 1280

/* Formats "%llu,%u,%.6f,%.6f,%.6f,%u,%u,%u,%u,%llu,%d" of a finished
 * request: the same bytes, formatted by hand (printf's float path was a
 * large share of a simulate run). */
int kvio_serve_request_row(const kvio_engine_finished_t *finished, char *text_p,
                           size_t text_len)
{
    char row[ROW_MAX];
    char *out = row;
    out = append_unsigned(out, finished->id);
    *out++ = ',';
    out = append_unsigned(out, finished->rank);
    *out++ = ',';
    out = append_fixed(out, finished->arrival_ns / 1e9, 6);
    *out++ = ',';
    out = append_fixed(out, finished->first_token_ns / 1e9, 6);
    *out++ = ',';
    out = append_fixed(out, finished->finish_ns / 1e9, 6);
    const unsigned long long counts[] = {finished->prompt_tokens, finished->output_tokens,
                                         finished->cached_tokens, finished->preemptions,
                                         finished->tag};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        *out++ = ',';
        out = append_unsigned(out, counts[i]);
    }
    *out++ = ',';
    *out++ = finished->measured ? '1' : '0';
    int length = (int)(out - row);
    if (text_len > 0) {
        size_t copied = (size_t)length < text_len ? (size_t)length : text_len - 1;
        memcpy(text_p, row, copied);
        text_p[copied] = '\0';
    }
    return length;
}

/* "%.6f,%u,%.6f,%u,%llu,%llu,%.5f,%u,%u,%u,%llu", formatted by hand. */
void kvio_serve_iteration_row(kvio_csv_t *csv, uint32_t rank,
                              const kvio_engine_iteration_t *iteration)
{
    char row[ROW_MAX];
    char *out = row;
    out = append_fixed(out, iteration->start_ns / 1e9, 6);
    *out++ = ',';
    out = append_unsigned(out, rank);
    *out++ = ',';
    out = append_fixed(out, iteration->duration_ns / 1e6, 6);
    *out++ = ',';
    out = append_unsigned(out, iteration->num_scheduled);
    *out++ = ',';
    out = append_unsigned(out, iteration->batch.prefill_tokens);
    *out++ = ',';
    out = append_unsigned(out, iteration->batch.decode_seqs);
    *out++ = ',';
    out = append_fixed(out, iteration->kv_usage, 5);
    const unsigned long long counts[] = {iteration->running, iteration->waiting,
                                         iteration->num_preempted, iteration->swap_bytes};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        *out++ = ',';
        out = append_unsigned(out, counts[i]);
    }
    kvio_csv_line(csv, row, (size_t)(out - row));
}

kvio_status_t kvio_serve_open_csvs(kvio_results_t *results, kvio_csv_t **requests_p,
                                   kvio_csv_t **iterations_p, char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    if (requests_p != NULL)
        status = kvio_csv_open(results, "requests.csv", KVIO_REQUESTS_CSV_HEADER, requests_p);
    if (status == KVIO_OK && iterations_p != NULL)
        status = kvio_csv_open(results, "iterations.csv", KVIO_ITERATIONS_CSV_HEADER,
                               iterations_p);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "%s: cannot write the CSV files: %s",
                 kvio_results_path(results), kvio_strerror(status));
    return status;
}

void kvio_serve_tiers_json(kvio_tier_t *const *tiers, size_t num_tiers, uint32_t rank,
                           json_t *array)
{
    for (size_t t = 0; t < num_tiers; t++) {
        json_t *tier = kvio_tier_stats_json(tiers[t]);
        json_object_set_new(tier, "rank", json_integer(rank));
        json_array_append_new(array, tier);
    }
}

kvio_status_t kvio_serve_close_csvs(kvio_csv_t *requests, kvio_csv_t *iterations,
                                    kvio_status_t status, char *error_p, size_t error_len)
{
    if (kvio_csv_close(requests) != KVIO_OK && status == KVIO_OK) {
        snprintf(error_p, error_len, "requests.csv: write failed");
        status = KVIO_ERR_IO;
    }
    if (kvio_csv_close(iterations) != KVIO_OK && status == KVIO_OK) {
        snprintf(error_p, error_len, "iterations.csv: write failed");
        status = KVIO_ERR_IO;
    }
    return status;
}

static void on_iteration(void *context, uint32_t rank, const kvio_engine_iteration_t *iteration)
{
    simulation_t *sim = context;
    kvio_serve_trace_iteration(sim->run->events,
                               sim->engines[rank - (uint32_t)sim->run->first_serve_rank], rank,
                               iteration,
                               sim->run->gpu->host_bandwidth);
    if (sim->iterations_csv == NULL)
        return;
    kvio_serve_iteration_row(sim->iterations_csv, rank, iteration);
}

static void simulation_free(simulation_t *sim)
{
    for (uint32_t r = 0; sim->engines != NULL && r < sim->num_ranks; r++)
        kvio_engine_destroy(sim->engines[r]);
    free(sim->engines);
    for (uint32_t r = 0; sim->tiers != NULL && r < sim->num_ranks; r++) {
        for (size_t t = 0; sim->tiers[r] != NULL && t < sim->num_tiers; t++)
            if (sim->tiers[r][t] != NULL)
                kvio_tier_destroy(sim->tiers[r][t]);
        free(sim->tiers[r]);
    }
    free(sim->tiers);
    free(sim->busy_until);
    free(sim->woken);
    free(sim->version);
    free(sim->update_at);
    free(sim->stalled);
    free(sim->engine_version);
    free(sim->idle_since);
    free(sim->drain_start);
    free(sim->served);
    kvio_router_destroy(sim->router);
    kvio_cost_destroy(sim->cost);
    free(sim->hashes.hashes);
    kvio_deferred_queue_destroy(sim->deferred); /* the engines released its requests */
}

static kvio_status_t simulation_init(simulation_t *sim, const kvio_serve_run_t *run,
                                     char *error_p, size_t error_len)
{
    memset(sim, 0, sizeof(*sim));
    sim->run = run;
    sim->num_ranks = run->num_ranks > 0 ? run->num_ranks : 1;
    sim->block_size = (uint32_t)run->serve->kvcache.block_size;
    uint32_t blocks;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                run->cost->tensor_parallel, &blocks, error_p,
                                                error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_cost_create(run->cost, run->model, run->gpu, &sim->cost, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_router_create(&run->serve->router, &sim->router);
    if (status == KVIO_OK)
        status = kvio_deferred_queue_create(sim->block_size, &sim->deferred);
    sim->engines = calloc(sim->num_ranks, sizeof(*sim->engines));
    sim->busy_until = malloc(sim->num_ranks * sizeof(int64_t));
    sim->woken = calloc(sim->num_ranks, sizeof(*sim->woken));
    if (status != KVIO_OK || sim->engines == NULL || sim->busy_until == NULL ||
        sim->woken == NULL)
        return status != KVIO_OK ? status : KVIO_ERR_NOMEM;
    if (run->updates != NULL) {
        sim->version = calloc(sim->num_ranks, sizeof(*sim->version));
        sim->update_at = calloc(sim->num_ranks, sizeof(*sim->update_at));
        sim->stalled = calloc(sim->num_ranks, sizeof(*sim->stalled));
        sim->engine_version = calloc(sim->num_ranks, sizeof(*sim->engine_version));
        sim->idle_since = calloc(sim->num_ranks, sizeof(*sim->idle_since));
        sim->drain_start = malloc(sim->num_ranks * sizeof(*sim->drain_start));
        if (sim->engine_version == NULL || sim->idle_since == NULL || sim->drain_start == NULL)
            return KVIO_ERR_NOMEM;
        for (uint32_t r = 0; r < sim->num_ranks; r++)
            sim->drain_start[r] = -1;
        for (size_t u = 0; run->updates_activated_ns != NULL && u < run->num_updates; u++)
            run->updates_activated_ns[u] = run->updates[u].t_activated_ns;
        sim->num_versions = run->num_version_steps > 0 ? run->num_version_steps : 1;
        sim->served = calloc(sim->num_versions, sizeof(*sim->served));
        if (sim->version == NULL || sim->update_at == NULL || sim->stalled == NULL ||
            sim->served == NULL)
            return KVIO_ERR_NOMEM;
    }
    const kvio_opt_list_t *tier_list = &run->serve->kvcache.tiers;
    sim->num_tiers = tier_list->count;
    uint64_t block_bytes = kvio_model_kv_bytes_per_token(run->model, run->cost->tensor_parallel) *
                           sim->block_size;
    sim->block_bytes = block_bytes;
    if (sim->num_tiers > 0 && (sim->tiers = calloc(sim->num_ranks, sizeof(*sim->tiers))) == NULL)
        return KVIO_ERR_NOMEM;
    for (uint32_t rank = 0; rank < sim->num_ranks; rank++) {
        sim->busy_until[rank] = -1;
        if (sim->num_tiers > 0) {
            sim->tiers[rank] = calloc(sim->num_tiers, sizeof(kvio_tier_t *));
            if (sim->tiers[rank] == NULL)
                return KVIO_ERR_NOMEM;
            for (size_t t = 0; t < sim->num_tiers; t++) {
                /* Modelled: latency + bytes / bandwidth, nothing moves. */
                status = kvio_tier_create(&((const kvio_tier_config_t *)tier_list->items)[t],
                                          block_bytes, false, &sim->tiers[rank][t], error_p,
                                          error_len);
                if (status != KVIO_OK)
                    return status;
            }
        }
        kvio_engine_params_t params = {
            .config = &run->serve->engine,
            .num_blocks = blocks,
            .block_size = sim->block_size,
            .prefix_caching = run->serve->kvcache.prefix_caching,
            .free_order = run->serve->kvcache.free_order,
            .index = run->serve->kvcache.index,
            .eviction = run->serve->kvcache.eviction,
            .sched = &run->serve->scheduler,
            .seed = run->seed + rank,
            .cost = sim->cost,
            .kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model,
                                                                run->cost->tensor_parallel),
            .host_bandwidth = run->gpu->host_bandwidth,
            .slo = run->slo,
            .rank = (uint32_t)run->first_serve_rank + rank,
            .observer = {.context = sim, .on_finish = on_finish, .on_iteration = on_iteration},
            .tiers = sim->num_tiers > 0 ? sim->tiers[rank] : NULL,
            .num_tiers = sim->num_tiers,
            .update_cache = run->update != NULL ? run->update->on_activate.cache : 0,
            .in_flight = run->update != NULL ? run->update->in_flight : 0,
        };
        status = kvio_engine_create(&params, &sim->engines[rank], error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* The version active on rank at now: the updates of that rank activated by
 * then (run->updates holds each rank's in version order, activation times
 * rising). Leaves update_at[rank] at its first update still to come. */
static uint64_t active_version(simulation_t *sim, uint32_t rank, int64_t now_ns)
{
    const kvio_serve_run_t *run = sim->run;
    int world_rank = run->first_serve_rank + (int)rank;
    size_t *at = &sim->update_at[rank];
    for (; *at < run->num_updates; ++*at) {
        const kvio_update_record_t *update = &run->updates[*at];
        if (update->rank != world_rank || update->t_activated_ns == 0)
            continue;
        if (update->t_activated_ns > now_ns)
            break;
        if (update->version > sim->version[rank])
            sim->version[rank] = update->version;
    }
    return sim->version[rank];
}

/* With update.apply: stall, the end of the update stall rank is in at now
 * (the activation of an update notified by then), else -1. */
static int64_t stalled_until(simulation_t *sim, uint32_t rank, int64_t now_ns)
{
    const kvio_serve_run_t *run = sim->run;
    if (!run->stall_for_updates)
        return -1;
    active_version(sim, rank, now_ns);
    for (size_t at = sim->update_at[rank]; at < run->num_updates; at++) {
        const kvio_update_record_t *update = &run->updates[at];
        if (update->rank == run->first_serve_rank + (int)rank && update->t_activated_ns != 0)
            return update->t_notified_ns <= now_ns ? update->t_activated_ns : -1;
    }
    return -1;
}

/* At an iteration boundary (or an idle rank's next arrival): the engine
 * takes the version the schedule has activated by now, unless in_flight:
 * wait and requests still run (then it stops admitting until they are
 * done). Records when that happened: now, or the scheduled time on a rank
 * that was idle then. */
static kvio_status_t take_version(simulation_t *sim, uint32_t rank, int64_t now_ns)
{
    const kvio_serve_run_t *run = sim->run;
    kvio_engine_t *engine = sim->engines[rank];
    uint64_t version = active_version(sim, rank, now_ns);
    if (version <= sim->engine_version[rank])
        return KVIO_OK;
    if (run->update != NULL && run->update->in_flight == KVIO_IN_FLIGHT_WAIT &&
        !kvio_engine_drain(engine)) {
        if (sim->drain_start[rank] < 0)
            sim->drain_start[rank] = now_ns;
        return KVIO_OK;
    }
    if (sim->drain_start[rank] >= 0 && run->drain_stall_ns != NULL)
        run->drain_stall_ns[rank] += now_ns - sim->drain_start[rank];
    sim->drain_start[rank] = -1;
    bool idle = sim->busy_until[rank] < 0;
    for (size_t u = 0; run->updates_activated_ns != NULL && u < run->num_updates; u++) {
        const kvio_update_record_t *update = &run->updates[u];
        if (update->rank != run->first_serve_rank + (int)rank ||
            update->version <= sim->engine_version[rank] || update->version > version ||
            update->t_activated_ns == 0)
            continue;
        run->updates_activated_ns[u] = idle && sim->idle_since[rank] <= update->t_activated_ns
                                           ? update->t_activated_ns
                                           : now_ns;
    }
    sim->engine_version[rank] = version;
    return kvio_engine_activate(engine, version);
}

/* update.colocated: the bytes of the update on its way into rank at now
 * (transfer started, not yet taken by the engine; 0: none) and when it is
 * scheduled to activate. */
static uint64_t incoming_bytes(const simulation_t *sim, uint32_t rank, int64_t now_ns,
                               int64_t *until_ns_p)
{
    const kvio_serve_run_t *run = sim->run;
    for (size_t u = 0; u < run->num_updates; u++) {
        const kvio_update_record_t *update = &run->updates[u];
        if (update->rank == run->first_serve_rank + (int)rank && update->t_activated_ns != 0 &&
            update->version > sim->engine_version[rank] && update->t_xfer_start_ns <= now_ns) {
            *until_ns_p = update->t_activated_ns;
            return update->bytes;
        }
    }
    return 0;
}

/* Starts rank's next iteration at now, or marks it idle. An idle engine
 * with waiting requests that cannot start is stuck: that is an error. A rank
 * stalled for an update "runs" the stall instead. */
static kvio_status_t start_iteration(simulation_t *sim, uint32_t rank, int64_t now_ns,
                                     char *error_p, size_t error_len)
{
    kvio_engine_t *engine = sim->engines[rank];
    int64_t lent_until = -1;
    if (sim->run->updates != NULL) {
        kvio_status_t status = take_version(sim, rank, now_ns);
        if (status == KVIO_OK && sim->run->update != NULL &&
            sim->run->update->colocated != KVIO_COLOCATED_OFF) {
            uint64_t bytes = incoming_bytes(sim, rank, now_ns, &lent_until);
            status = kvio_engine_reserve(
                engine, kvio_serve_lent_blocks(sim->run->update, bytes, sim->block_bytes));
        }
        if (status != KVIO_OK)
            return status;
    }
    if (!kvio_engine_has_work(engine)) {
        if (sim->busy_until[rank] >= 0 && sim->idle_since != NULL)
            sim->idle_since[rank] = now_ns;
        sim->busy_until[rank] = -1;
        return KVIO_OK;
    }
    int64_t stall_end = sim->run->updates != NULL ? stalled_until(sim, rank, now_ns) : -1;
    if (stall_end > now_ns) {
        sim->stalled[rank] = true;
        sim->busy_until[rank] = stall_end;
        return KVIO_OK;
    }
    kvio_engine_iteration_t iteration;
    kvio_serve_step_t step;
    kvio_status_t status =
        kvio_serve_step(engine, now_ns, (uint32_t)(sim->run->first_serve_rank + (int)rank),
                        lent_until > now_ns, &iteration, &step, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    if (step == KVIO_SERVE_STEP_LENT) {
        sim->stalled[rank] = true;
        sim->busy_until[rank] = lent_until;
        return KVIO_OK;
    }
    sim->busy_until[rank] = now_ns + iteration.duration_ns;
    return KVIO_OK;
}

/* The router reads a request's hashes only to compare ranks' caches. */
static bool router_reads_hashes(const simulation_t *sim)
{
    return kvio_router_reads_hashes(sim->router, sim->num_ranks);
}

static kvio_status_t dispatch(simulation_t *sim, const kvio_request_t *request, int64_t now_ns,
                              bool measured, char *error_p, size_t error_len)
{
    if (request->input_tokens == 0)
        return KVIO_OK; /* nothing to serve; streams do not produce these */
    kvio_engine_request_t engine_request;
    kvio_status_t status = KVIO_OK;
    if (router_reads_hashes(sim)) {
        status = kvio_serve_engine_request(request, sim->block_size, now_ns, measured, 0,
                                           &sim->hashes, &engine_request);
    } else {
        kvio_engine_hash_source_t source;
        size_t num_hashes;
        status = kvio_deferred_request(sim->deferred, request, &source, &num_hashes);
        if (status == KVIO_OK)
            engine_request = (kvio_engine_request_t){
                .id = request->id, .arrival_ns = now_ns, .prompt_tokens = request->input_tokens,
                .output_tokens = request->output_tokens, .max_tokens = request->max_tokens,
                .priority = request->priority, .num_hashes = num_hashes, .measured = measured,
                .hash_source = source,
            };
    }
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "request %llu: cannot derive its block hashes",
                 (unsigned long long)request->id);
        return status;
    }
    uint32_t rank = kvio_router_choose(sim->router, sim->engines, sim->num_ranks, &engine_request);
    if (sim->run->updates != NULL)
        engine_request.tag = active_version(sim, rank, now_ns);
    status = kvio_engine_add(sim->engines[rank], &engine_request);
    if (status != KVIO_OK)
        return status;
    sim->in_flight++;
    if (sim->busy_until[rank] < 0)
        sim->woken[rank] = true; /* starts once every arrival of this instant is in */
    return KVIO_OK;
}

/* Starts the ranks that arrivals woke (in rank order): after every request
 * arriving at the same instant has been queued, so an idle engine's first
 * iteration sees them all (it took the first alone before). */
static kvio_status_t start_woken(simulation_t *sim, int64_t now_ns, char *error_p,
                                 size_t error_len)
{
    for (uint32_t rank = 0; rank < sim->num_ranks; rank++) {
        if (!sim->woken[rank])
            continue;
        sim->woken[rank] = false;
        if (sim->busy_until[rank] >= 0)
            continue;
        kvio_status_t status = start_iteration(sim, rank, now_ns, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

kvio_status_t kvio_serve_simulate(const kvio_serve_run_t *run, json_t **metrics_p,
                                  bool *complete_p, char *error_p, size_t error_len)
{
    simulation_t sim;
    kvio_status_t status = simulation_init(&sim, run, error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    if (run->results != NULL) {
        status = kvio_serve_open_csvs(run->results, &sim.requests_csv, &sim.iterations_csv,
                                      error_p, error_len);
        if (status != KVIO_OK)
            goto out;
    }
    kvio_progress_t *progress = NULL;
    kvio_progress_create("simulate: requests", run->num_requests, &progress);

    const kvio_request_t *next = NULL;
    status = kvio_stream_next(run->stream, &next);
    int64_t now_ns = 0;
    bool stopped = false;
    uint64_t request_index = 0;
    while (status == KVIO_OK) {
        if (run->stop != NULL && *run->stop) {
            stopped = true;
            break;
        }
        int64_t arrival_ns = INT64_MAX;
        bool closed = run->serve->max_concurrency > 0 &&
                      sim.in_flight >= (uint64_t)run->serve->max_concurrency;
        if (next != NULL && !closed)
            arrival_ns = next->arrival_ns > now_ns ? next->arrival_ns : now_ns;
        uint32_t rank = 0;
        int64_t engine_ns = INT64_MAX;
        for (uint32_t r = 0; r < sim.num_ranks; r++) {
            if (sim.busy_until[r] >= 0 && sim.busy_until[r] < engine_ns) {
                engine_ns = sim.busy_until[r];
                rank = r;
            }
        }
        if (arrival_ns == INT64_MAX && engine_ns == INT64_MAX)
            break;
        if (arrival_ns <= engine_ns) {
            now_ns = arrival_ns;
            bool measured = now_ns >= run->warmup_ns &&
                            request_index >= (uint64_t)run->warmup_requests;
            status = dispatch(&sim, next, now_ns, measured, error_p, error_len);
            request_index++;
            if (status == KVIO_OK)
                status = kvio_stream_next(run->stream, &next);
            if (progress != NULL)
                kvio_progress_update(progress, request_index);
            bool same_instant = status == KVIO_OK && next != NULL &&
                                next->arrival_ns <= now_ns &&
                                !(run->serve->max_concurrency > 0 &&
                                  sim.in_flight >= (uint64_t)run->serve->max_concurrency);
            if (status == KVIO_OK && !same_instant)
                status = start_woken(&sim, now_ns, error_p, error_len);
        } else {
            now_ns = engine_ns;
            if (sim.stalled != NULL && sim.stalled[rank])
                sim.stalled[rank] = false; /* an update stall ended, not an iteration */
            else
                kvio_engine_complete(sim.engines[rank], now_ns);
            status = start_iteration(&sim, rank, now_ns, error_p, error_len);
        }
    }
    kvio_progress_destroy(progress);
    if (status != KVIO_OK && error_p[0] == '\0')
        snprintf(error_p, error_len, "simulate: %s", kvio_strerror(status));
    if (status == KVIO_OK) {
        kvio_engine_metrics_t total;
        status = kvio_engine_metrics_init(&total);
        if (status == KVIO_OK) {
            json_t *per_rank = json_array();
            for (uint32_t r = 0; r < sim.num_ranks; r++) {
                const kvio_engine_metrics_t *metrics = kvio_engine_metrics(sim.engines[r]);
                kvio_engine_metrics_merge(&total, metrics);
                json_array_append_new(per_rank, kvio_serve_metrics_json(metrics));
            }
            json_t *metrics = kvio_serve_metrics_json(&total);
            json_object_set_new(metrics, "serve_ranks", json_integer(sim.num_ranks));
            json_object_set_new(metrics, "kv_blocks_per_rank",
                                json_integer(kvio_engine_num_blocks(sim.engines[0])));
            json_object_set_new(metrics, "block_size", json_integer(sim.block_size));
            json_object_set_new(metrics, "scheduler",
                                json_string(kvio_choice_name(&run->serve->scheduler.policy)));
            json_object_set_new(metrics, "router", json_string(kvio_router_name(sim.router)));
            json_object_set_new(metrics, "simulated_s", json_real((double)now_ns / 1e9));
            json_t *tiers = json_array();
            for (uint32_t r = 0; sim.num_tiers > 0 && r < sim.num_ranks; r++)
                kvio_serve_tiers_json(sim.tiers[r], sim.num_tiers, r, tiers);
            json_object_set_new(metrics, "tiers", tiers);
            json_object_set_new(metrics, "per_rank", per_rank);
            if (run->updates != NULL && run->loss != NULL)
                kvio_serve_loss_json(metrics, run, sim.served, sim.num_versions);
            kvio_engine_metrics_fini(&total);
            *metrics_p = metrics;
            *complete_p = !stopped;
        }
    }
out:
    status = kvio_serve_close_csvs(sim.requests_csv, sim.iterations_csv, status, error_p, error_len);
    simulation_free(&sim);
    return status;
}
