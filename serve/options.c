/* The `serve:` and `slo:` sections, KV capacity in blocks per serve rank,
 * and the blocks an incoming update borrows from the pool (colocated). */
#include "serve/serve_int.h"

#include "kvio/kvcache.h"

#include <stdio.h>
#include <string.h>

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
    {.key = "drain_timeout", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_serve_config_t, drain_timeout_ns), .default_value = "5s",
     .help = "emulate: serving goes on at most this long after the arrivals end; the "
             "requests still in flight then are cut and counted (drain_cut_requests; 0s: no "
             "cap)"},
    {.key = NULL},
};

const kvio_opt_t kvio_slo_options[] = {
    {.key = "ttft", .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_slo_config_t, ttft_ns),
     .default_value = "0s", .help = "time-to-first-token bound for goodput (0: none)"},
    {.key = "tpot", .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_slo_config_t, tpot_ns),
     .default_value = "0s", .help = "time-per-output-token bound for goodput (0: none)"},
    {.key = NULL},
};

/* serve.kvcache.hybrid needs a model whose layers are half a sliding
 * window (kvio's one window group holds as many layers as the full group,
 * so a block of either is the bytes kvio_model_kv_bytes_per_token gives),
 * and takes none of what the window group's blocks would break. */
static kvio_status_t check_hybrid(const kvio_serve_config_t *serve, const kvio_model_t *model,
                                  char *error_p, size_t error_len)
{
    const kvio_kvcache_section_t *kv = &serve->kvcache;
    if (!kv->hybrid)
        return KVIO_OK;
    const char *name = model->preset != NULL ? model->preset : "the model";
    if (model->sliding_window_layers == 0 || model->sliding_window <= 0 ||
        model->sliding_window_layers * 2 != model->layers) {
        snprintf(error_p, error_len,
                 "serve.kvcache.hybrid: %s has %lld of %lld layers on a sliding window; kvio's "
                 "hybrid groups need half (gpt-oss-20b, gpt-oss-120b)",
                 name, (long long)model->sliding_window_layers, (long long)model->layers);
        return KVIO_ERR_CONFIG;
    }
    const char *clash = kv->tiers.count > 0                              ? "serve.kvcache.tiers"
                        : serve->engine.preemption == KVIO_PREEMPT_SWAP ? "serve.engine.preemption: swap"
                        : kv->index == KVIO_KVCACHE_INDEX_RADIX          ? "serve.kvcache.index: radix"
                        : kv->verify_swaps                               ? "serve.kvcache.verify_swaps"
                                                                         : NULL;
    if (clash != NULL) {
        snprintf(error_p, error_len,
                 "serve.kvcache.hybrid: not with %s (they move the full group's blocks only)",
                 clash);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

uint32_t kvio_serve_chunk_blocks(const kvio_kvcache_section_t *kvcache)
{
    if (kvcache->chunk_tokens <= 0 || kvcache->block_size <= 0)
        return 1;
    return (uint32_t)(kvcache->chunk_tokens / kvcache->block_size);
}

/* serve.kvcache.chunk_tokens: whole blocks, over tiers that take a block as
 * soon as it is full (a chunk is saved when its last block is; the pool's
 * evictions come one block at a time). */
static kvio_status_t check_chunks(const kvio_kvcache_section_t *kv, char *error_p,
                                  size_t error_len)
{
    if (kv->chunk_tokens <= 0)
        return KVIO_OK;
    if (kv->chunk_tokens % kv->block_size != 0) {
        snprintf(error_p, error_len,
                 "serve.kvcache.chunk_tokens: %lld is not a multiple of block_size (%lld)",
                 (long long)kv->chunk_tokens, (long long)kv->block_size);
        return KVIO_ERR_CONFIG;
    }
    for (size_t t = 0; t < kv->tiers.count; t++) {
        const kvio_tier_config_t *tier = (const kvio_tier_config_t *)kv->tiers.items + t;
        bool written = kv->placement != KVIO_PLACEMENT_WATERFALL || t == 0;
        if (written && tier->write != KVIO_TIER_WRITE_THROUGH) {
            snprintf(error_p, error_len,
                     "serve.kvcache.tiers[%zu].write: back cannot take chunks of "
                     "serve.kvcache.chunk_tokens (%lld): the pool evicts one block at a time; "
                     "set write: through", t, (long long)kv->chunk_tokens);
            return KVIO_ERR_CONFIG;
        }
    }
    return KVIO_OK;
}

kvio_status_t kvio_serve_kv_blocks(const kvio_serve_config_t *serve, const kvio_model_t *model,
                                   const kvio_gpu_t *gpu, int64_t tensor_parallel,
                                   uint32_t *blocks_p, char *error_p, size_t error_len)
{
    const kvio_kvcache_section_t *kv = &serve->kvcache;
    kvio_status_t status = check_hybrid(serve, model, error_p, error_len);
    if (status == KVIO_OK)
        status = check_chunks(kv, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    uint64_t block_bytes = kvio_model_kv_bytes_per_token(model, tensor_parallel) *
                           (uint64_t)kv->block_size;
    uint64_t blocks;
    if (kv->blocks > 0) {
        blocks = (uint64_t)kv->blocks;
    } else {
        uint64_t capacity = kv->capacity;
        if (capacity == 0) {
            status = kvio_model_kv_capacity(model, gpu, tensor_parallel,
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


kvio_engine_batch_defaults_t kvio_serve_batch_defaults(const kvio_gpu_t *gpu)
{
    /* vLLM tells an A100 by its device name (PR #17885: a larger budget
     * lowered its throughput); kvio by the preset's. */
    bool large = gpu != NULL && gpu->memory >= (70ull << 30) &&
                 (gpu->preset == NULL || strncmp(gpu->preset, "a100", 4) != 0);
    return (kvio_engine_batch_defaults_t){.max_num_seqs = large ? 1024 : 256,
                                          .max_num_batched_tokens = large ? 8192 : 2048};
}

kvio_engine_batch_defaults_t kvio_serve_batch_limits(const kvio_engine_config_t *engine,
                                                     const kvio_gpu_t *gpu)
{
    kvio_engine_batch_defaults_t limits = kvio_serve_batch_defaults(gpu);
    if (engine->max_num_seqs > 0)
        limits.max_num_seqs = engine->max_num_seqs;
    if (engine->max_num_batched_tokens > 0)
        limits.max_num_batched_tokens = engine->max_num_batched_tokens;
    return limits;
}

/* update.in_flight, but under pd.version: consistent a request running
 * when a version activates never goes on with the new weights over the old
 * KV: keep becomes abort (it is computed again on the new version); wait
 * (drained on the old weights) stays. */
static int pd_in_flight(const kvio_serve_run_t *run)
{
    if (run->update == NULL)
        return 0;
    if (run->pd != NULL && run->pd->version == KVIO_PD_VERSION_CONSISTENT &&
        run->update->in_flight == KVIO_IN_FLIGHT_KEEP)
        return KVIO_IN_FLIGHT_ABORT;
    return run->update->in_flight;
}

kvio_engine_params_t kvio_serve_engine_params(const kvio_serve_run_t *run, uint32_t serve_index,
                                              uint32_t blocks, const kvio_cost_t *cost,
                                              kvio_engine_observer_t observer)
{
    const kvio_serve_config_t *serve = run->serve;
    return (kvio_engine_params_t){
        .config = &serve->engine,
        .batch_defaults = kvio_serve_batch_defaults(run->gpu),
        .num_blocks = blocks,
        .block_size = (uint32_t)serve->kvcache.block_size,
        .prefix_caching = serve->kvcache.prefix_caching,
        .free_order = serve->kvcache.free_order,
        .async_tiers = serve->kvcache.tier_io == KVIO_TIER_IO_ASYNC,
        .index = serve->kvcache.index,
        .eviction = kvio_choice_name(&serve->kvcache.eviction),
        .window_tokens = serve->kvcache.hybrid ? (uint32_t)run->model->sliding_window : 0,
        .waterfall = serve->kvcache.placement == KVIO_PLACEMENT_WATERFALL,
        .prefetch = serve->kvcache.prefetch,
        .prefetch_timeout_base_ns = serve->kvcache.prefetch_timeout_base_ns,
        .prefetch_timeout_per_1k_ns = serve->kvcache.prefetch_timeout_per_1k_ns,
        .prefetch_timeout_max_ns = serve->kvcache.prefetch_timeout_max_ns,
        .chunk_blocks = kvio_serve_chunk_blocks(&serve->kvcache),
        .skip_saves_when_full = serve->kvcache.save_full == KVIO_SAVE_FULL_SKIP,
        .sched = &serve->scheduler,
        .seed = run->seed + serve_index,
        .data = run->data != NULL ? *run->data : (kvio_data_t){0},
        .cost = cost,
        .kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model,
                                                            kvio_cost_gpus(run->cost)),
        .host_bandwidth = run->gpu->host_bandwidth,
        .slo = run->slo,
        .rank = (uint32_t)run->first_serve_rank + serve_index,
        .observer = observer,
        .update_cache = run->update != NULL ? run->update->on_activate.cache : 0,
        .update_reset = run->update != NULL ? run->update->on_activate.reset : 0,
        .in_flight = pd_in_flight(run),
        .pd_consistent = run->pd != NULL && run->pd->version == KVIO_PD_VERSION_CONSISTENT,
        .itl_records_max = run->keep_itls ? KVIO_SERVE_ITLS_MAX / (run->num_ranks > 0
                                                                       ? run->num_ranks
                                                                       : 1)
                                          : 0,
    };
}
