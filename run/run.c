/* One run (run_workload; kvio_run, run/entry.c, calls it): checks
 * everything the workload needs (model, GPU, KV capacity, stream or trace)
 * before creating the results directory, runs the serve ranks, and writes
 * summary.json (schema version, effective config, times, which parts ran,
 * complete flag, metrics) and a table on stdout. */
#include "run/run_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/clock.h"
#include "kvio/cost.h"
#include "kvio/kvcache.h"
#include "kvio/log.h"
#include "kvio/redis.h"
#include "kvio/results.h"
#include "kvio/sysinfo.h"
#include "kvio/tier.h"

/* The parts of a run and whether this build runs them yet. */
typedef struct run_part {
    const char *name;
    bool ran;
    const char *note;
} run_part_t;

static json_t *parts_json(const run_part_t *parts, size_t count)
{
    json_t *array = json_array();
    for (size_t i = 0; i < count; i++) {
        json_t *part = json_object();
        json_object_set_new(part, "name", json_string(parts[i].name));
        json_object_set_new(part, "ran", json_boolean(parts[i].ran));
        json_object_set_new(part, "note", json_string(parts[i].note));
        json_array_append_new(array, part);
    }
    return array;
}

/* Simulate mode's start: t0 is the run's start, every rank is ready at once
 * (train ranks first, then serve ranks). */
static void simulate_start(const kvio_workload_t *workload, uint64_t start_ns, json_t *start)
{
    int size = run_first_serve_rank(workload) + (int)workload->ranks.serve;
    kvio_serve_setup_entry_t *ranks = calloc((size_t)size + 1, sizeof(*ranks));
    if (ranks == NULL)
        return; /* out of memory: summary.json says no start */
    for (int rank = 0; rank < size; rank++)
        ranks[rank] = (kvio_serve_setup_entry_t){
            .rank = rank, .role = run_rank_parts(workload, false, rank).role};
    kvio_serve_setup_record(NULL, start, (int64_t)start_ns, ranks, (size_t)size);
    free(ranks);
}

/* The latency and throughput keys `vllm bench serve` writes, from kvio's
 * serving metrics: mean/median/std/p99 of ttft, tpot, itl and e2el (ms),
 * request_goodput null without an SLO (vLLM reports none then). */
/* The scheduling behaviour the run had, against vLLM v1's defaults: the
 * profile is "vllm" when every one of them is vLLM's, else "custom" (each
 * key says what it was). */
static json_t *scheduling_json(const kvio_workload_t *workload)
{
    static const char *const free_orders[] = {"append", "prepend_unhashed"};
    static const char *const resets[] = {"when_idle", "preempt_all", "running"};
    static const char *const preemptions[] = {"recompute", "swap"};
    const kvio_engine_config_t *engine = &workload->serve.engine;
    const kvio_kvcache_section_t *kvcache = &workload->serve.kvcache;
    int reset = workload->update.on_activate.reset;
    bool vllm = engine->scheduler_reserve_full_isl && engine->watermark == 0 &&
                kvcache->prefix_caching && kvcache->free_order == 1 &&
                engine->preemption == KVIO_PREEMPT_RECOMPUTE && reset != KVIO_RESET_RUNNING;
    /* Batch limits left at 0 take vLLM's for the GPU class. */
    kvio_gpu_t gpu = workload->gpu;
    char ignored[256];
    kvio_engine_batch_defaults_t limits = kvio_serve_batch_limits(
        engine, kvio_gpu_resolve(&gpu, ignored, sizeof(ignored)) == KVIO_OK ? &gpu : NULL);
    return json_pack("{s:s, s:I, s:I, s:b, s:f, s:b, s:s, s:s, s:s}", "profile",
                     vllm ? "vllm" : "custom", "max_num_seqs", (json_int_t)limits.max_num_seqs,
                     "max_num_batched_tokens", (json_int_t)limits.max_num_batched_tokens,
                     "scheduler_reserve_full_isl", engine->scheduler_reserve_full_isl,
                     "watermark", engine->watermark, "prefix_caching", kvcache->prefix_caching,
                     "free_order", free_orders[kvcache->free_order == 1],
                     "preemption", preemptions[engine->preemption == KVIO_PREEMPT_SWAP],
                     "reset", resets[reset >= 0 && reset <= 2 ? reset : 0]);
}

/* Written when the run starts and replaced (atomically) by the real one at
 * its end: a rank 0 killed before then (SIGKILL, or mpirun's grace running
 * out) still leaves an honest summary.json saying the run did not finish. */
static kvio_status_t write_provisional_summary(const kvio_workload_t *workload,
                                               const kvio_run_options_t *options,
                                               kvio_results_t *results, json_t *host,
                                               uint64_t start_ns, char *error_p,
                                               size_t error_len)
{
    json_t *summary = run_summary_head(workload, options, host, start_ns, false,
                                   "the run did not end: kvio is still running, or was killed "
                                   "before it wrote its results");
    json_object_set_new(summary, "config", kvio_config_to_json(kvio_workload_options, workload));
    json_object_set_new(summary, "parts", json_array());
    json_object_set_new(summary, "metrics", json_object());
    kvio_status_t status = kvio_results_write_json(results, "summary.json", summary, error_p,
                                                   error_len);
    json_decref(summary);
    return status;
}

/* A closed loop's requests looked at before the run. */
#define CLOSED_LOOP_LOOKS 100000

/* A request needs the KV of its prompt and of every output token but the
 * last (which is never fed back): one that needs more than the whole cache
 * could never start, on any engine. Refused before the run, not found an
 * hour into it. A closed loop's count is left unknown (0). */
/* With chunked prefill off a prompt is computed in one step, so the step's
 * token budget must hold it: vLLM refuses max_num_batched_tokens below
 * max_model_len at start-up in that case. Here the longest prompt the
 * stream has is the bound (a request the engine could never start). */
static bool prompt_fits_a_step(const kvio_workload_t *workload, const kvio_request_t *request,
                               char *error_p, size_t error_len)
{
    const kvio_engine_config_t *engine = &workload->serve.engine;
    if (engine->chunked_prefill || engine->max_num_batched_tokens <= 0 ||
        (int64_t)request->input_tokens <= engine->max_num_batched_tokens)
        return true;
    snprintf(error_p, error_len,
             "serve.engine.max_num_batched_tokens: %lld is below the prompt of request %llu "
             "(%u tokens) with serve.engine.chunked_prefill: false: a prompt is then computed "
             "in one step, which no step could hold (vLLM refuses a token budget below "
             "max_model_len without chunked prefill); raise max_num_batched_tokens to the "
             "longest prompt or set chunked_prefill: true",
             (long long)engine->max_num_batched_tokens, (unsigned long long)request->id,
             request->input_tokens);
    return false;
}

/* The blocks a request needs at the least to run from the pool alone:
 * its whole sequence's; with hybrid groups (serve.kvcache.hybrid) the
 * window group's too: at its first step as many as the full group's for
 * the first chunk (vLLM allocates a fresh request's window blocks for
 * every new token, freeing those past the window only once computed), and
 * while it decodes the window's. */
static uint64_t blocks_needed(const kvio_workload_t *workload, uint64_t window_tokens,
                              uint64_t input, uint64_t tokens)
{
    uint64_t block_size = (uint64_t)workload->serve.kvcache.block_size;
    uint64_t full = (tokens + block_size - 1) / block_size;
    if (window_tokens == 0)
        return full;
    const kvio_engine_config_t *engine = &workload->serve.engine;
    uint64_t chunk = input;
    if (engine->chunked_prefill && engine->max_num_batched_tokens > 0 &&
        chunk > (uint64_t)engine->max_num_batched_tokens)
        chunk = (uint64_t)engine->max_num_batched_tokens;
    if (engine->chunked_prefill && engine->long_prefill_token_threshold > 0 &&
        chunk > (uint64_t)engine->long_prefill_token_threshold)
        chunk = (uint64_t)engine->long_prefill_token_threshold;
    uint64_t first_step = 2 * ((chunk + block_size - 1) / block_size);
    uint64_t window = (window_tokens + block_size - 1) / block_size + 1;
    uint64_t decoding = full + (window < full ? window : full);
    return first_step > decoding ? first_step : decoding;
}

static kvio_status_t check_requests_fit(const kvio_workload_t *workload, kvio_stream_t *stream,
                                        uint32_t blocks, uint64_t window_tokens,
                                        uint64_t *requests_p, uint64_t *stream_blocks_p,
                                        char *error_p, size_t error_len)
{
    *requests_p = 0;
    *stream_blocks_p = 0;
    uint64_t block_size = (uint64_t)workload->serve.kvcache.block_size;
    uint64_t capacity = (uint64_t)blocks * block_size;
    const char *trace = workload->stream.trace.path;
    const kvio_request_t *request;
    kvio_status_t status;
    /* A closed loop's users are answered at once here, and its first
     * requests are looked at: how many it makes depends on the serving. */
    bool closed_loop = kvio_stream_closed_loop(stream);
    uint64_t looked = 0;
    while ((status = kvio_stream_next(stream, &request)) == KVIO_OK && request != NULL) {
        if (closed_loop && ++looked > CLOSED_LOOP_LOOKS)
            break;
        kvio_stream_finished(stream, request->id, request->arrival_ns);
        (*requests_p)++;
        uint64_t output = request->output_tokens;
        if (request->max_tokens > 0 && output > request->max_tokens)
            output = request->max_tokens;
        uint64_t tokens = request->input_tokens + (output > 0 ? output - 1 : 0);
        *stream_blocks_p += (tokens + block_size - 1) / block_size + 1;
        if (!prompt_fits_a_step(workload, request, error_p, error_len))
            return KVIO_ERR_CONFIG;
        uint64_t needed = blocks_needed(workload, window_tokens, request->input_tokens, tokens);
        if (needed <= blocks)
            continue;
        snprintf(error_p, error_len,
                 "%s%s%srequest %llu needs the KV of %llu tokens (%u input + %llu output - 1), "
                 "%llu blocks of %llu%s, but serve.kvcache holds %u blocks (%llu tokens): no "
                 "engine could ever start it; raise serve.kvcache.blocks or capacity, or "
                 "shorten the stream's lengths",
                 trace != NULL && trace[0] != '\0' ? "stream.trace.path " : "stream: ",
                 trace != NULL && trace[0] != '\0' ? trace : "",
                 trace != NULL && trace[0] != '\0' ? ": " : "",
                 (unsigned long long)request->id, (unsigned long long)tokens,
                 request->input_tokens, (unsigned long long)output,
                 (unsigned long long)needed, (unsigned long long)block_size,
                 window_tokens > 0 ? " in its full and window groups (serve.kvcache.hybrid: "
                                     "the window group holds the first chunk's blocks too)"
                                   : "",
                 blocks, (unsigned long long)capacity);
        return KVIO_ERR_CONFIG;
    }
    if (closed_loop) {
        *requests_p = 0;
        *stream_blocks_p = UINT64_MAX;
    }
    return status;
}

/* Prefill/decode disaggregation: what kvio builds of it. */
static kvio_status_t check_pd(const kvio_workload_t *workload, char *error_p, size_t error_len)
{
    const char *why = NULL;
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    const kvio_pd_config_t *pd = &workload->pd;
    if (emulate && pd->layerwise)
        why = "pd.layerwise in emulate; the KV moves whole once the prefill has ended, "
              "layer-wise transfers are modelled in mode: simulate";
    else if (kvio_choice_is(&pd->router.policy, "kv_events"))
        why = "pd.router: kv_events; the decode ranks' KV events feed no index (serve.router: "
              "kv_events routes over the prefill ranks or colocated ones)";
    else if (emulate && !kvio_choice_is(&pd->router.policy, "round_robin") &&
             !kvio_choice_is(&pd->router.policy, "least_loaded"))
        why = "pd.router in emulate is round_robin or least_loaded (what a prefill rank knows "
              "of the decode ranks); the others route in mode: simulate";
    else if (emulate && workload->pd.local_prefill_tokens > 0)
        why = "pd.local_prefill_tokens in emulate; a prefill rank does not see the decode "
              "ranks' caches, conditional disaggregation is modelled in mode: simulate";
    else if (emulate && workload->ranks.client > 0)
        why = "ranks.client: 1; the prefill ranks take their shares of the stream themselves";
    else if (!workload->serve.kvcache.prefix_caching)
        why = "serve.kvcache.prefix_caching: false; a decode rank finds the prompt's blocks "
              "by their hashes, as its prefix cache does (set it true)";
    else if (workload->serve.kvcache.chunk_tokens > 0)
        why = "serve.kvcache.chunk_tokens is set; the KV moves block by block (leave it 0)";
    if (why == NULL)
        return KVIO_OK;
    snprintf(error_p, error_len, "ranks.prefill: %lld, ranks.decode: %lld: %s",
             (long long)workload->ranks.prefill, (long long)workload->ranks.decode, why);
    return KVIO_ERR_CONFIG;
}

/* Emulate: what each tier backend needs before the ranks start (a file
 * tier's directory, or its parent), checked once, here. */
static kvio_status_t check_tiers(const kvio_workload_t *workload, char *error_p,
                                 size_t error_len)
{
    const kvio_opt_list_t *tiers = &workload->serve.kvcache.tiers;
    uint32_t num_ranks = workload->ranks.serve > 0 ? (uint32_t)workload->ranks.serve : 1;
    for (size_t i = 0; i < tiers->count; i++) {
        char path[64];
        snprintf(path, sizeof(path), "serve.kvcache.tiers[%zu]", i);
        kvio_status_t status = kvio_tier_preflight((const kvio_tier_config_t *)tiers->items + i,
                                                   num_ranks, path, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* weight_sync in emulate mode moves real buckets over ucx between host
 * buffers, full weights in the serving layout: what it does not build is
 * refused naming the key, and the model's tensors must fit train.bytes. */
static kvio_status_t check_emulated_sync(const kvio_workload_t *workload, char *error_p,
                                         size_t error_len)
{
    const kvio_sync_config_t *sync = &workload->weight_sync;
    const kvio_xfer_config_t *transport = &workload->train.transport;
    static const char *const granularities[] = {"off", "whole", "bucket", "tensor"};
    const char *granularity = granularities[sync->granularity];
    const char *refused = NULL;
    char why[256] = "";
    kvio_delta_t delta = kvio_updates_sync_delta(workload);
    if (!kvio_choice_is(&transport->kind, "ucx")) {
        refused = "train.transport.kind";
        snprintf(why, sizeof(why), "is %s; emulate mode moves real buckets over ucx only "
                 "(set train.transport.kind: ucx, or mode: simulate)",
                 kvio_choice_name(&transport->kind));
    } else if (transport->fanout == KVIO_XFER_FANOUT_CHAIN) {
        refused = "train.transport.fanout";
        snprintf(why, sizeof(why), "is chain; with buckets the route is weight_sync.topology "
                 "(set fanout: sequential and topology: chain)");
    } else if (workload->device.weights == KVIO_WEIGHTS_CUDA) {
        refused = "device.weights";
        snprintf(why, sizeof(why), "is cuda; emulate mode stages and reloads buckets in host "
                 "memory (set device.weights: host, or mode: simulate)");
    } else if (sync->topology == KVIO_SYNC_P2P) {
        refused = "weight_sync.topology";
        snprintf(why, sizeof(why), "is p2p; emulate mode sends from the trainer to every serve "
                 "rank, P2P from serving peers is modelled in simulate mode only (set topology: "
                 "tree, or mode: simulate)");
    } else if (delta.fraction > 0 && delta.element == 0) {
        refused = "weight_sync.delta";
        snprintf(why, sizeof(why), "is %g, but the model's weights are not 1, 2, 4 or 8 bytes "
                 "per element; emulate mode changes and sends whole elements (set "
                 "model.weight_dtype_bytes to 1, 2, 4 or 8, delta: 0, or mode: simulate)",
                 sync->delta_fraction);
    } else if ((sync->train_tp > 0 && sync->train_tp != workload->cost.tensor_parallel) ||
               sync->train_pp != 1) {
        refused = "weight_sync.train_tp";
        snprintf(why, sizeof(why), "or train_pp differs from the serving layout; resharding "
                 "is modelled in simulate mode only (leave train_tp: 0 and train_pp: 1)");
    }
    if (refused != NULL) {
        snprintf(error_p, error_len, "weight_sync.granularity: %s in emulate mode: %s %s",
                 granularity, refused, why);
        return KVIO_ERR_CONFIG;
    }
    kvio_sync_plan_t plan;
    kvio_status_t status = kvio_updates_sync_buckets(workload, &plan, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* index_value's indices are 4 bytes: a bucket has at most 2^32 elements. */
    for (size_t b = 0; b < plan.num_buckets && status == KVIO_OK; b++) {
        if (delta.fraction <= 0 || delta.encoding != KVIO_DELTA_INDEX_VALUE ||
            plan.buckets[b].bytes / delta.element <= UINT32_MAX)
            continue;
        snprintf(error_p, error_len, "weight_sync.delta_encoding: index_value in emulate mode: "
                 "bucket %zu has %llu elements, more than 4-byte indices reach (set "
                 "weight_sync.bucket_size, or delta_encoding: bitmap)", b,
                 (unsigned long long)(plan.buckets[b].bytes / delta.element));
        status = KVIO_ERR_CONFIG;
    }
    kvio_sync_plan_free(&plan);
    return status;
}

static bool weight_sync_without_updates(const kvio_workload_t *workload)
{
    return workload->weight_sync.granularity != KVIO_SYNC_OFF && !kvio_updates_wanted(workload);
}

/* The cost model on the smallest and the largest batch a serve rank can
 * run (one decode token; a full token budget of prefill) must give an
 * iteration of more than 0 and less than 10^6 s, as the engine requires of
 * every iteration: refused here, by validate too, instead of at the first
 * iteration of the run. */
static kvio_status_t check_cost(const kvio_workload_t *workload, const kvio_model_t *model,
                                const kvio_gpu_t *gpu, char *error_p, size_t error_len)
{
    /* Tensor parallelism splits the attention heads evenly, and the KV
     * heads too, or replicates them (vLLM's rule). */
    int64_t tp = workload->cost.tensor_parallel;
    if (tp > 1 && (model->heads % tp != 0 ||
                   (model->kv_heads % tp != 0 && tp % model->kv_heads != 0))) {
        snprintf(error_p, error_len,
                 "cost.tensor_parallel: %lld does not split the model's %lld attention heads "
                 "and %lld KV heads evenly (each must be a multiple of it, or the KV heads a "
                 "divisor of it)", (long long)tp, (long long)model->heads,
                 (long long)model->kv_heads);
        return KVIO_ERR_CONFIG;
    }
    kvio_cost_t *cost = NULL;
    char why[512] = "";
    kvio_status_t status = kvio_cost_create(&workload->cost, model, gpu, &cost, why, sizeof(why));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "cost: %s", why[0] != '\0' ? why : kvio_strerror(status));
        return status;
    }
    int64_t budget = kvio_serve_batch_limits(&workload->serve.engine, gpu).max_num_batched_tokens;
    kvio_batch_t smallest = {0}, largest = {0};
    kvio_batch_add_decode(&smallest, 1);
    kvio_batch_add_prefill(&largest, (uint64_t)budget, 0);
    const kvio_batch_t *batches[2] = {&smallest, &largest};
    const char *names[2] = {"one decode token", "a full token budget of prefill"};
    /* A form may charge nothing for a decode (a linear fit of prefill-only
     * samples): refused when no batch takes any time, or one takes too long. */
    double times[2];
    for (int b = 0; b < 2; b++) {
        kvio_cost_breakdown_t breakdown;
        kvio_cost_iteration(cost, batches[b], &breakdown);
        times[b] = breakdown.time_s;
    }
    int bad = !(times[0] < 1e6) ? 0 : !(times[1] < 1e6) ? 1 : !(times[1] > 0) ? 1 : -1;
    if (bad >= 0) {
        snprintf(error_p, error_len,
                 "cost: an iteration of %s (%lld tokens) takes %.6g s by the cost model; it "
                 "must take more than 0 and less than 1e6 s (check cost.* and gpu.*)",
                 names[bad], bad == 0 ? 1LL : (long long)budget, times[bad]);
        status = KVIO_ERR_CONFIG;
    }
    kvio_cost_destroy(cost);
    return status;
}

/* Simulate: every serve rank's pool (records, index, free queue, eviction
 * state: no KV bytes) and its tiers' indexes must fit the memory available
 * (at most 80 % of it), checked before anything is allocated. A pool costs
 * what its blocks' use touches, and the stream's requests together use at
 * most stream_blocks (UINT64_MAX: unknown, every block). */
static kvio_status_t check_simulate_memory(const kvio_workload_t *workload,
                                           const kvio_model_t *model, uint32_t blocks,
                                           uint64_t stream_blocks, char *error_p,
                                           size_t error_len)
{
    uint64_t available = 0;
    char unused[128];
    if (kvio_mem_available(&available, unused, sizeof(unused)) != KVIO_OK)
        return KVIO_OK; /* unknown: no check */
    const kvio_kvcache_section_t *kvcache = &workload->serve.kvcache;
    uint64_t block_bytes =
        kvio_model_kv_bytes_per_token(model, kvio_cost_gpus(&workload->cost)) *
        (uint64_t)kvcache->block_size;
    uint64_t pool = kvio_kvcache_footprint(blocks + 1, kvcache->index, stream_blocks), tiers = 0;
    const kvio_tier_config_t *tier = kvcache->tiers.items;
    for (size_t t = 0; t < kvcache->tiers.count; t++)
        tiers += kvio_tier_index_footprint(tier[t].size, block_bytes);
    uint64_t ranks = workload->ranks.serve > 0 ? (uint64_t)workload->ranks.serve : 1;
    double needed = (double)(pool + tiers) * (double)ranks;
    if (needed <= (double)available * 0.8)
        return KVIO_OK;
    snprintf(error_p, error_len,
             "simulate: %llu serve rank(s) need %.2f GiB for their KV pools' bookkeeping "
             "(%.1f MiB each: %u blocks%s, plus %.1f MiB of tier index), but this machine has "
             "%.2f GiB available (at most 80 %% of it); set serve.kvcache.blocks or capacity, "
             "or fewer ranks.serve", (unsigned long long)ranks, needed / 1073741824.0,
             (double)pool / 1048576.0, blocks,
             stream_blocks < blocks ? ", not all of them used by the stream" : "",
             (double)tiers / 1048576.0, (double)available / 1073741824.0);
    return KVIO_ERR_CONFIG;
}

/* What the workload itself decides and a run would refuse: the model and
 * GPU presets, a KV cache that holds a block, the stream (a trace is read
 * whole) with every request fitting the cache, the file tiers' parents, the
 * ranks. The resolved model and GPU, and the stream ready to run from its
 * first request with its number of requests, are returned (stream_p may be
 * NULL). */
static kvio_status_t check_workload(const kvio_workload_t *workload, kvio_model_t *model_p,
                                    kvio_gpu_t *gpu_p, kvio_stream_t **stream_p,
                                    bool stream_served, uint64_t *requests_p, char *error_p,
                                    size_t error_len)
{
    bool updates = kvio_updates_wanted(workload);
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    bool coupled = kvio_updates_coupled(workload);
    *model_p = workload->model;
    *gpu_p = workload->gpu;
    *requests_p = 0;
    /* Under mpirun only an emulate run with model updates (its ranks on the
     * mpi runtime) uses the processes; any other run is one process, and
     * mpirun would start that many independent copies of it. */
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    bool local = workload->ranks.runtime != NULL && strcmp(workload->ranks.runtime, "local") == 0;
    bool rl_ranks = run_rl_ranks(workload) > 1; /* a trainer rank */
    if (world != NULL && atoi(world) > 1 && (!((updates || rl_ranks) && emulate) || local)) {
        snprintf(error_p, error_len,
                 "mpirun started %s processes, but this run (mode: %s%s) is one process: "
                 "start it without mpirun (only an emulate run with trainers and serve ranks "
                 "on ranks.runtime auto or mpi uses mpirun's processes)", world,
                 emulate ? "emulate" : "simulate",
                 local ? ", ranks.runtime: local" : updates ? "" : ", no trainers");
        return KVIO_ERR_CONFIG;
    }
    if (workload->rl.mode != KVIO_RL_OFF && updates) {
        snprintf(error_p, error_len, "rl.mode: %s: an RL run models its own trainer; trainer "
                 "ranks are not coupled to it (set no ranks.train)",
                 workload->rl.mode == KVIO_RL_SYNC ? "sync" : "async");
        return KVIO_ERR_CONFIG;
    }
    if (workload->rl.mode != KVIO_RL_OFF && emulate &&
        kvio_rl_check_emulate(&workload->rl, workload->ranks.client,
                              workload->device.memory != KVIO_MEMORY_HOST, error_p,
                              error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    bool synthetic = workload->stream.trace.path == NULL || workload->stream.trace.path[0] == 0;
    if (workload->rl.mode != KVIO_RL_OFF && synthetic && workload->stream.requests > 0 &&
        workload->stream.requests < workload->rl.steps * workload->rl.batch) {
        snprintf(error_p, error_len, "stream.requests: %lld prompts, but rl.steps x rl.batch = "
                 "%lld x %lld need %lld", (long long)workload->stream.requests,
                 (long long)workload->rl.steps, (long long)workload->rl.batch,
                 (long long)(workload->rl.steps * workload->rl.batch));
        return KVIO_ERR_CONFIG;
    }
    if (workload->ranks.client > 0 && updates && !coupled) {
        snprintf(error_p, error_len,
                 "ranks.client: 1 needs the coupled run (mode: emulate, train and serve ranks, "
                 "update.serving: engine); without trainers the client is a thread anyway");
        return KVIO_ERR_CONFIG;
    }
    if (workload->stream.users > 0 && emulate &&
        (workload->ranks.serve > 1 || workload->ranks.client > 0)) {
        snprintf(error_p, error_len,
                 "stream.users: a closed loop hears each answer where its stream is read; in "
                 "emulate that is one serve rank without a client rank (ranks.serve: %lld, "
                 "ranks.client: %lld); mode simulate routes users over several",
                 (long long)workload->ranks.serve, (long long)workload->ranks.client);
        return KVIO_ERR_CONFIG;
    }
    if (workload->ranks.prefill > 0 && check_pd(workload, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    if (workload->update.die_during_version > 0 &&
        workload->update.die_rank > workload->ranks.serve) {
        snprintf(error_p, error_len, "update.die_rank: %lld is no serve rank (they are 1..%lld: "
                 "ranks.serve); the fault would never happen", (long long)workload->update.die_rank,
                 (long long)workload->ranks.serve);
        return KVIO_ERR_CONFIG;
    }
    double percentiles[RUN_VLLM_PERCENTILES_MAX];
    size_t num_percentiles;
    if (run_vllm_percentiles(workload->metric_percentiles, percentiles, RUN_VLLM_PERCENTILES_MAX,
                             &num_percentiles, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    if (weight_sync_without_updates(workload)) {
        snprintf(error_p, error_len, "weight_sync: needs model updates (ranks.train: 1 and "
                 "serve ranks)");
        return KVIO_ERR_CONFIG;
    }
    if (kvio_sync_check(&workload->weight_sync, workload->cost.tensor_parallel, error_p,
                        error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    if (emulate && workload->update.control == KVIO_CONTROL_TWIN) {
        snprintf(error_p, error_len, "update.control: twin serves the stream again in the "
                 "same process, simulate's (set mode: simulate, or update.control: paired)");
        return KVIO_ERR_CONFIG;
    }
    if (!emulate && workload->update.control == KVIO_CONTROL_PAIRED) {
        snprintf(error_p, error_len, "update.control: paired repeats emulate runs; simulate's "
                 "control is its exact twin (set update.control: twin, or mode: emulate)");
        return KVIO_ERR_CONFIG;
    }
    if (emulate && workload->weight_sync.granularity != KVIO_SYNC_OFF) {
        kvio_status_t status = check_emulated_sync(workload, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    if (emulate && updates && !coupled)
        return KVIO_OK; /* no engine, no stream */
    uint32_t blocks = 0;
    kvio_stream_t *stream = NULL;
    kvio_status_t status = kvio_model_resolve(model_p, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_gpu_resolve(gpu_p, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_serve_kv_blocks(&workload->serve, model_p, gpu_p,
                                      kvio_cost_gpus(&workload->cost), &blocks, error_p,
                                      error_len);
    if (status == KVIO_OK)
        status = check_cost(workload, model_p, gpu_p, error_p, error_len);
    int64_t duration_ns = kvio_workload_stream_duration(workload);
    if (status == KVIO_OK && !stream_served) {
        /* A front end's requests (kvio serve): the stream serves nothing. */
        if (emulate)
            status = check_tiers(workload, error_p, error_len);
        else
            status = check_simulate_memory(workload, model_p, blocks, UINT64_MAX, error_p,
                                           error_len);
        return status;
    }
    if (status == KVIO_OK)
        status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed, duration_ns,
                                    &stream, error_p, error_len);
    uint64_t stream_blocks = UINT64_MAX;
    if (status == KVIO_OK)
        status = check_requests_fit(workload, stream, blocks,
                                    workload->serve.kvcache.hybrid
                                        ? (uint64_t)model_p->sliding_window : 0,
                                    requests_p, &stream_blocks, error_p,
                                    error_len);
    if (status == KVIO_OK && !emulate)
        status = check_simulate_memory(workload, model_p, blocks, stream_blocks, error_p,
                                       error_len);
    if (status == KVIO_OK && stream_p != NULL && kvio_stream_rewind(stream) != KVIO_OK) {
        /* A synthetic stream: the same seed yields the same requests again. */
        kvio_stream_destroy(stream);
        stream = NULL;
        status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed, duration_ns,
                                    &stream, error_p, error_len);
    }
    if (status == KVIO_OK && emulate)
        status = check_tiers(workload, error_p, error_len);
    if (status == KVIO_OK && stream_p != NULL) {
        *stream_p = stream;
        stream = NULL;
    }
    kvio_stream_destroy(stream);
    return status;
}

kvio_status_t kvio_workload_check(const kvio_workload_t *workload, char *error_p,
                                  size_t error_len)
{
    kvio_model_t model;
    kvio_gpu_t gpu;
    uint64_t requests;
    return check_workload(workload, &model, &gpu, NULL, true, &requests, error_p, error_len);
}

/* What one run holds from its checks to its summary. */
typedef struct run_state {
    const kvio_workload_t *workload;
    const kvio_run_options_t *options;
    char *error_p;
    size_t error_len;
    kvio_results_t *results;
    kvio_stream_t *stream;
    kvio_rte_world_t *world;
    kvio_event_trace_t *events;
    kvio_result_t *result;           /* rank 0: the run's figures */
    kvio_serve_samples_t samples;    /* rank 0: the measured requests */
    json_t *start;                   /* t0 and every rank's set-up (summary.json) */
    json_t *host;                    /* summary.json's host block */
    kvio_updates_schedule_t schedule; /* simulate mode's updates */
    kvio_serve_output_t served;      /* simulate mode: what serving measured */
    kvio_serve_output_t control;     /* simulate mode: the no-update twin's (sorted by id) */
    kvio_model_t model;
    kvio_gpu_t gpu;
    uint64_t num_requests;
    uint64_t start_ns;
    bool complete, root, updates, emulate, coupled;
    bool serving; /* simulate mode, and emulate without trainers (the coupled run serves
                     inside the update ranks) */
    const char *updates_note;
    kvio_serve_output_t *served_out; /* emulate, coupled: what serving measured (may be NULL) */
    kvio_serve_itls_t itls;          /* rank 0: the measured requests' gaps between tokens */
    char incomplete[512]; /* why a run that ended is not complete */
} run_state_t;

static bool stopped(const run_state_t *state)
{
    return run_stop_asked(state->options->stop);
}

/* Whether the event trace goes straight into the results directory
 * (its parent is output_dir, written the same way). */
static bool trace_in_output(const char *trace_path, const char *output_dir)
{
    if (output_dir == NULL)
        return false;
    const char *slash = strrchr(trace_path, '/');
    size_t parent = slash != NULL ? (size_t)(slash - trace_path) : 0;
    size_t length = strlen(output_dir);
    while (length > 1 && output_dir[length - 1] == '/')
        length--;
    return slash != NULL && parent == length && strncmp(trace_path, output_dir, length) == 0;
}

/* Everything that can be refused is checked before the directory exists:
 * what the workload decides (as kvio validate does), then what this machine
 * has to give it; then the world, the event trace and the directory. */
static kvio_status_t run_prepare(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    char *error_p = state->error_p;
    size_t error_len = state->error_len;
    uint64_t pool_bytes = 0; /* host memory of the KV pools (coupled, RL emulate) */
    kvio_status_t status = check_workload(workload, &state->model, &state->gpu, &state->stream,
                                          state->options->frontend == NULL,
                                          &state->num_requests, error_p, error_len);
    bool serves = state->serving || state->coupled;
    if (status == KVIO_OK && serves && (state->emulate || state->coupled))
        status = kvio_device_preflight(workload->device.memory, workload->device.fallback,
                                       workload->device.index, "device.memory: cuda", error_p,
                                       error_len);
    if (status == KVIO_OK && serves && state->emulate) {
        kvio_serve_run_t check;
        run_serve_given_t given = {.model = &state->model, .gpu = &state->gpu};
        run_plan_serve(workload, RUN_SERVE_CHECK, &given, &check);
        bool rl = workload->rl.mode != KVIO_RL_OFF;
        if (rl)
            status = kvio_rl_link_preflight(&workload->rl, &check, &workload->train.transport,
                                            error_p, error_len);
        if (status == KVIO_OK)
            status = kvio_serve_emulate_preflight(&check,
                                                  state->coupled || rl ? &pool_bytes : NULL,
                                                  error_p, error_len);
        if (status == KVIO_OK && rl)
            status = kvio_rl_emulate_preflight(&workload->rl, &check, pool_bytes, error_p,
                                               error_len);
    }
    if (status == KVIO_OK && state->updates)
        status = kvio_updates_preflight(workload, pool_bytes, error_p, error_len);
    /* An emulate RL run with a trainer rank: rank 0 the rollout, rank 1
     * the trainer (kvio/rl.h). */
    int rl_ranks = run_rl_ranks(workload);
    if (status == KVIO_OK && ((state->updates && state->emulate) || rl_ranks > 1)) {
        kvio_rte_params_t params = {
            .kind = workload->ranks.runtime,
            .num_ranks = rl_ranks > 1 ? rl_ranks : run_world_size(workload),
            .timeout_ns = workload->ranks.timeout_ns};
        status = kvio_rte_world_create(&params, &state->world, error_p, error_len);
        if (status == KVIO_OK) {
            state->root = kvio_rte_world_is_root(state->world);
            kvio_rte_world_set_stop(state->world, state->options->stop);
        }
    }
    /* An existing trace file is overwritten only with --force (a device or
     * a pipe, as /dev/null, is written to). The trace is opened before the
     * results directory (an unwritable one is refused with no directory
     * made), and a trace file this run made goes when the directory is
     * refused. */
    const char *trace_path = state->options->event_trace;
    struct stat trace_info;
    bool trace_existed = trace_path != NULL && lstat(trace_path, &trace_info) == 0;
    bool trace_is_file = trace_existed &&
                         (S_ISREG(trace_info.st_mode) || S_ISLNK(trace_info.st_mode));
    if (status == KVIO_OK && state->root && trace_is_file && !state->options->force) {
        snprintf(error_p, error_len, "--event-trace %s: exists (use --force to overwrite it)",
                 trace_path);
        status = KVIO_ERR_EXISTS;
    }
    /* A trace inside the results directory (-o DIR --event-trace DIR/x.pfw)
     * is opened once the directory exists. */
    bool inside = trace_path != NULL && trace_in_output(trace_path, state->options->output_dir);
    if (status == KVIO_OK && state->root && trace_path != NULL && !inside)
        status = kvio_event_trace_open(trace_path, state->options->event_trace_level, &state->events,
                                       error_p, error_len);
    if (status == KVIO_OK && state->root) {
        status = kvio_results_create(state->options->output_dir, workload->name,
                                     state->options->force, &state->results, error_p,
                                     error_len);
        if (status != KVIO_OK && state->events != NULL) {
            kvio_event_trace_close(state->events);
            state->events = NULL;
            if (!trace_existed)
                unlink(trace_path);
        }
    }
    if (status == KVIO_OK && state->root && inside)
        status = kvio_event_trace_open(trace_path, state->options->event_trace_level, &state->events,
                                       error_p, error_len);
    if (status != KVIO_OK) {
        kvio_rte_world_destroy(state->world, true);
        state->world = NULL;
    }
    return status;
}

/* Simulate with updates and a control (update.control: auto or twin): the
 * same stream served again without updates, nothing written. */
static bool twin_wanted(const run_state_t *state)
{
    int control = state->workload->update.control;
    return state->updates && !state->emulate &&
           (control == KVIO_CONTROL_AUTO || control == KVIO_CONTROL_TWIN);
}

/* Where this process's serve runs and updates put what they measure, and
 * when they stop: one context for both (rank 0's result, start and
 * results; NULL on the others). */
static run_context_t run_context_of(run_state_t *state)
{
    return (run_context_t){
        .workload = state->workload, .results = state->results,
        .result = state->root ? state->result : NULL, .events = state->events,
        .stop = state->options->stop, .start = state->root ? state->start : NULL,
        .serving = state->emulate ? NULL : &state->served, .served_out = state->served_out,
        .frontend = state->options->frontend, .itls = &state->itls,
        .samples = &state->samples, .incomplete = state->incomplete,
        .incomplete_len = sizeof(state->incomplete)};
}

/* The twin is the plan without updates on a stream of its own, writing
 * nothing but state->control. */
static kvio_status_t serve_twin_now(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    kvio_stream_t *stream = NULL;
    kvio_status_t status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed,
                                              kvio_workload_stream_duration(workload), &stream,
                                              state->error_p, state->error_len);
    if (status != KVIO_OK)
        return status;
    run_context_t context = run_context_of(state);
    run_serve_given_t given = {.context = &context, .model = &state->model, .gpu = &state->gpu,
                               .stream = stream, .num_requests = state->num_requests,
                               .output = &state->control};
    kvio_serve_run_t twin;
    run_plan_serve(workload, RUN_SERVE_TWIN, &given, &twin);
    kvio_result_t *metrics = kvio_result_create();
    bool complete = true;
    /* On a stream of its own: the same seed gives the same requests. */
    status = metrics == NULL ? KVIO_ERR_NOMEM
                             : kvio_serve_simulate(&twin, metrics, &complete, state->error_p,
                                                   state->error_len);
    kvio_result_destroy(metrics);
    kvio_stream_destroy(stream);
    if (status == KVIO_OK && !complete)
        state->complete = false; /* stopped: the run that follows stops too */
    kvio_serve_output_sort(&state->control);
    return status;
}

/* The no-update twin of the run into state->control: from the options'
 * cache when an earlier run served the same one (kvio compare), else
 * served now. */
static kvio_status_t serve_twin(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    kvio_control_cache_t *cache = state->options->control_cache;
    char *key = cache != NULL ? kvio_control_key(workload) : NULL;
    if (cache != NULL && key == NULL) {
        snprintf(state->error_p, state->error_len, "update.control: out of memory");
        return KVIO_ERR_NOMEM;
    }
    bool found = false;
    kvio_status_t status = KVIO_OK;
    if (key != NULL)
        status = kvio_control_cache_take(cache, key, &state->control, &found);
    if (status == KVIO_OK && !found)
        status = serve_twin_now(state);
    if (status == KVIO_OK && key != NULL && !found)
        status = kvio_control_cache_put(cache, key, &state->control);
    free(key);
    if (status == KVIO_ERR_NOMEM)
        snprintf(state->error_p, state->error_len, "update.control: out of memory keeping "
                 "the twin's %zu requests", state->control.num_finished);
    return status;
}

/* The serve ranks (simulate, or emulate without trainers), after their
 * no-update twin when it is the control or the adaptive checkpoint policy
 * reads the rate it served, then simulate mode's schedule of updates, which
 * they serve on. */
static kvio_status_t run_serving(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    bool scheduled = state->updates && !state->emulate;
    bool serving = state->serving && state->root;
    if (!state->root && state->world != NULL && workload->rl.mode != KVIO_RL_OFF)
        /* This process hosts the RL run's trainer rank only. */
        return kvio_rl_emulate(&workload->rl, NULL, state->world, &workload->train.transport,
                               NULL, state->error_p, state->error_len);
    bool control = serving && twin_wanted(state);
    bool rate_read = serving && scheduled &&
                     workload->train.checkpoint.policy == KVIO_CHECKPOINT_ADAPTIVE;
    kvio_status_t status = KVIO_OK;
    if (control || rate_read)
        status = serve_twin(state);
    if (status == KVIO_OK && scheduled)
        status = kvio_updates_schedule(workload, rate_read ? &state->control : NULL,
                                       &state->schedule, state->error_p, state->error_len);
    if (status != KVIO_OK || !serving)
        return status;
    run_context_t context = run_context_of(state);
    run_serve_given_t given = {
        .context = &context, .model = &state->model, .gpu = &state->gpu,
        .stream = state->stream, .num_requests = state->num_requests,
        .schedule = scheduled ? &state->schedule : NULL,
        .control = control ? &state->control : NULL,
        .output = scheduled ? &state->served : NULL};
    kvio_serve_run_t serve_run;
    run_plan_serve(workload, RUN_SERVE_RUN, &given, &serve_run);
    if (workload->rl.mode != KVIO_RL_OFF) {
        status = state->emulate
                     ? kvio_rl_emulate(&workload->rl, &serve_run, state->world,
                                       &workload->train.transport, state->result,
                                       state->error_p, state->error_len)
                     : kvio_rl_simulate(&workload->rl, &serve_run, state->result,
                                        state->error_p, state->error_len);
        state->complete = status == KVIO_OK && !stopped(state);
        return status;
    }
    status = state->emulate ? kvio_serve_emulate(&serve_run, state->result, &state->complete,
                                                 state->error_p, state->error_len)
                            : kvio_serve_simulate(&serve_run, state->result, &state->complete,
                                                  state->error_p, state->error_len);
    if (serve_run.control != NULL)
        state->served.control = &state->control;
    return status;
}

/* The model updates: simulate's on the schedule (updates.csv says when the
 * engines took each version, and a drain is the rank's inference stall),
 * emulate's with every rank. Interrupted: the run is incomplete, and so is
 * it when any one rank was stopped (a signal to it alone under mpirun). */
static kvio_status_t run_updates(run_state_t *state)
{
    state->updates_note = "no train and serve ranks in this workload";
    if (!state->updates)
        return KVIO_OK;
    run_context_t context = run_context_of(state);
    kvio_status_t status = kvio_updates_run(&context, state->world,
                                            state->emulate ? NULL : &state->schedule,
                                            state->error_p, state->error_len);
    if ((state->emulate && stopped(state)) || state->incomplete[0] != '\0')
        state->complete = false;
    state->updates_note = state->emulate
                              ? "trainer published, serve ranks received (updates.csv)"
                              : "simulated: latency + bytes / bandwidth (updates.csv)";
    return status;
}

/* A serving run that completed no request measured nothing: not a result
 * to pass off as one (it exited 0 with 0.00 ms latencies). */
static void check_something_served(run_state_t *state)
{
    double completed = kvio_result_get(state->result, KVIO_FIG_COMPLETED);
    double measured = kvio_result_get(state->result, KVIO_FIG_MEASURED);
    /* A server (kvio serve) measures what its clients sent, maybe nothing. */
    if (!state->root || !(state->serving || state->coupled) || !state->complete ||
        state->incomplete[0] != '\0' || stopped(state) || isnan(completed) ||
        state->options->frontend != NULL)
        return;
    if (completed == 0) {
        state->complete = false;
        snprintf(state->incomplete, sizeof(state->incomplete),
                 "no request completed: the stream held none within the run (see "
                 "stream.requests, stream.arrival and the workload's duration)");
    } else if (measured == 0) {
        /* Every request fell in the warmup: latencies of nothing. */
        state->complete = false;
        snprintf(state->incomplete, sizeof(state->incomplete),
                 "no request was measured: all %lld that completed fell in the warmup (warmup "
                 "%.3g s, warmup_requests %lld; shorten them or lengthen the run)",
                 (long long)completed,
                 (double)state->workload->warmup_ns / 1e9,
                 (long long)state->workload->warmup_requests);
    }
}

/* summary.json (rank 0), its table on stdout, and the result. */
static kvio_status_t run_summary(run_state_t *state, kvio_status_t status,
                                 kvio_run_result_t *result_p)
{
    const kvio_workload_t *workload = state->workload;
    const kvio_run_options_t *options = state->options;
    bool updates = state->updates, emulate = state->emulate, coupled = state->coupled;
    bool serving = state->serving;
    const run_part_t parts[] = {
        {"config", true, "validated and recorded"},
        {"engine", (serving || coupled) && status == KVIO_OK,
         coupled && workload->ranks.client > 0
             ? "serve ranks ran the real-time engine while updates arrived; a client rank "
               "routed requests on their published state (coupled)"
         : coupled ? "serve ranks ran the real-time engine while updates arrived (coupled)"
         : !serving ? "emulated iterations between updates (update.serving: emulated)"
         : emulate ? "serve ranks in real time with real KV memory (emulate)"
         : updates ? "serve ranks on the virtual clock, on the versions the modelled updates "
                     "activate (simulate, coupled)"
                   : "serve ranks on the virtual clock (simulate)"},
        {"model_updates", updates && status == KVIO_OK, state->updates_note},
    };
    /* The figures computed from what was kept: the latencies from every
     * measured request, then those derived from others. */
    kvio_result_t *result = state->result;
    if (kvio_serve_latency_figures(result, &state->samples, &state->itls) != KVIO_OK &&
        status == KVIO_OK) {
        snprintf(state->error_p, state->error_len, "latencies: out of memory keeping %zu "
                 "measured requests", state->samples.count);
        status = KVIO_ERR_NOMEM;
    }
    if (options->server_json != NULL)
        kvio_result_set_detail(result, "server", options->server_json(options->server_context));
    kvio_result_derive(result);
    /* vllm.json beside requests.csv (none when serving wrote nothing). */
    json_t *vllm = NULL;
    if (kvio_result_has(result, KVIO_FIG_TTFT_MS_MEAN) && state->results != NULL) {
        run_vllm_t source = {.workload = workload, .result = result, .samples = &state->samples,
                             .results = state->results, .itls = &state->itls,
                             .start_wall_ns = state->start_ns};
        char vllm_error[1024] = "";
        kvio_status_t vllm_status = run_vllm_write(&source, &vllm, vllm_error,
                                                   sizeof(vllm_error));
        if (vllm_status != KVIO_OK && vllm_status != KVIO_ERR_NOT_FOUND && status == KVIO_OK) {
            snprintf(state->error_p, state->error_len, "%s", vllm_error);
            status = vllm_status;
        }
    }
    if (json_object_get(state->start, "t0") == NULL && !emulate)
        simulate_start(workload, state->start_ns, state->start);
    json_t *extra = json_object();
    json_object_set_new(extra, "parts", parts_json(parts, sizeof(parts) / sizeof(parts[0])));
    if (vllm != NULL)
        json_object_set_new(extra, "vllm", vllm);
    if (serving || coupled)
        json_object_set_new(extra, "scheduling", scheduling_json(workload));
    json_object_set_new(extra, "modelled", kvio_run_modelled(workload, result));
    if (kvio_run_storage(workload, result) != KVIO_OK && status == KVIO_OK) {
        snprintf(state->error_p, state->error_len, "storage: out of memory");
        status = KVIO_ERR_NOMEM;
    }
    json_t *assessment = kvio_run_assess(workload, result);
    if (assessment != NULL)
        json_object_set_new(extra, "assessment", assessment);
    kvio_run_verdict(workload, result);
    run_summary_t summary = {
        .workload = workload, .options = options, .results = state->results, .result = result,
        .host = state->host, .start = state->start, .extra = extra,
        .start_ns = state->start_ns, .complete = status == KVIO_OK && state->complete,
        .error = status != KVIO_OK               ? state->error_p
                 : state->incomplete[0] != '\0' ? state->incomplete
                 : !state->complete ? "run interrupted before it finished (SIGINT or SIGTERM)"
                                    : NULL,
        .capture_log = true};
    char write_error[512] = "";
    kvio_status_t write_status = run_write_summary(&summary, write_error, sizeof(write_error));
    if (status == KVIO_OK && write_status != KVIO_OK) {
        snprintf(state->error_p, state->error_len, "%s", write_error);
        status = write_status;
    }
    snprintf(result_p->results_dir, sizeof(result_p->results_dir), "%s",
             kvio_results_path(state->results));
    result_p->complete = status == KVIO_OK && state->complete;
    if (status == KVIO_OK && !options->quiet && (serving || coupled || updates))
        run_print_table(&summary, NULL);
    json_decref(extra);
    /* After the table, -q or not (it hides the log's warnings; compare and
     * capacity, which print no table, keep them in their JSON): what makes
     * these numbers mislead. */
    for (size_t w = 0; status == KVIO_OK && state->root && !options->quiet &&
                       w < kvio_result_num_warnings(result);
         w++)
        fprintf(stderr, "kvio: warning: %s\n", kvio_result_warning_message(result, w));
    if (options->result_p != NULL && write_status == KVIO_OK) {
        *options->result_p = result;
        state->result = NULL;
    }
    if (status == KVIO_OK && !state->complete) {
        snprintf(state->error_p, state->error_len, "%s; %s/summary.json says complete: false",
                 state->incomplete[0] != '\0' ? state->incomplete : "run interrupted",
                 kvio_results_path(state->results));
        status = KVIO_ERR_INTERRUPTED;
    }
    return status;
}

static void run_state_free(run_state_t *state, bool world_failed)
{
    kvio_rte_world_destroy(state->world, world_failed);
    kvio_event_trace_close(state->events);
    kvio_result_destroy(state->result);
    kvio_serve_samples_free(&state->samples);
    json_decref(state->start);
    json_decref(state->host);
    kvio_updates_schedule_free(&state->schedule);
    kvio_serve_output_free(&state->served);
    free(state->itls.records);
    kvio_serve_output_free(&state->control);
    kvio_stream_destroy(state->stream);
    kvio_results_destroy(state->results);
}

/* A front end's requests (kvio serve) reach serve ranks that are threads
 * of this process running the engine: emulate, and with trainers the
 * coupled run on the local runtime with no client rank. */
static bool frontend_runs(const kvio_workload_t *workload, char *error_p, size_t error_len)
{
    const char *why = NULL;
    const char *runtime = workload->ranks.runtime;
    if (workload->mode != KVIO_MODE_EMULATE)
        why = "it serves in real time (mode: emulate)";
    else if (kvio_updates_wanted(workload) && !kvio_updates_coupled(workload))
        why = "with trainers the serve ranks must run the engine (update.serving: engine)";
    else if (kvio_updates_wanted(workload) && runtime != NULL && strcmp(runtime, "mpi") == 0)
        why = "its serve ranks are threads of this process (ranks.runtime: local or auto)";
    else if (kvio_updates_wanted(workload) && getenv("OMPI_COMM_WORLD_SIZE") != NULL)
        why = "its serve ranks are threads of this process: start it without mpirun";
    if (why != NULL)
        snprintf(error_p, error_len, "kvio serve: %s", why);
    return why == NULL;
}

kvio_status_t run_workload(const kvio_workload_t *workload, const kvio_run_options_t *options,
                           kvio_serve_output_t *served_out, kvio_run_result_t *result_p,
                           char *error_p, size_t error_len)
{
    if (options->summary_p != NULL)
        *options->summary_p = NULL;
    /* A closed socket (Redis gone mid-write) is an error to report, never a
     * SIGPIPE that ends the process without results (callers that handle
     * SIGPIPE themselves keep their handler). */
    struct sigaction pipe_action;
    if (sigaction(SIGPIPE, NULL, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    bool updates = kvio_updates_wanted(workload);
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    run_state_t state = {.workload = workload, .options = options, .error_p = error_p,
                         .error_len = error_len, .result = kvio_result_create(),
                         .start = json_object(), .complete = true, .root = true,
                         .updates = updates, .emulate = emulate,
                         .serving = !emulate || !updates,
                         .coupled = kvio_updates_coupled(workload), .served_out = served_out};
    bool world_failed = true; /* MPI_Finalize only after a whole run */
    kvio_status_t status = KVIO_OK;
    kvio_log_capture_begin(); /* run.log's warnings */
    if (options->frontend != NULL && !frontend_runs(workload, error_p, error_len)) {
        status = KVIO_ERR_CONFIG;
        goto out;
    }
    status = run_prepare(&state);
    if (status != KVIO_OK)
        goto out;
    state.start_ns = kvio_wall_time_ns();
    state.host = kvio_host_json();
    if (state.root && emulate && kvio_log_get_level() >= KVIO_LOG_WARN) {
        /* Emulate builds real pools and connects transports before its t0:
         * say so (the first line came at 17 s of a 20 s run when piped). */
        int64_t ranks = workload->ranks.serve + (updates ? workload->ranks.train : 0);
        int64_t rl_ranks = run_rl_ranks(workload);
        if (rl_ranks > 1)
            ranks = rl_ranks; /* the rollout's and the trainer's */
        int64_t real_ns = options->frontend != NULL && !state.coupled
                              ? options->frontend_duration_ns
                              : workload->duration_ns;
        char then[64] = "serving until stopped";
        if (workload->rl.mode != KVIO_RL_OFF)
            snprintf(then, sizeof(then), "%lld RL steps in real time",
                     (long long)workload->rl.steps); /* the steps, not the duration, end it */
        else if (real_ns > 0 && workload->serve.drain_timeout_ns > 0)
            snprintf(then, sizeof(then), "%.3g s of real time and at most %.3g s of drain",
                     (double)real_ns / 1e9, (double)workload->serve.drain_timeout_ns / 1e9);
        else if (real_ns > 0)
            snprintf(then, sizeof(then), "%.3g s of real time", (double)real_ns / 1e9);
        fprintf(stderr, "kvio: emulate: setting up %lld rank%s (KV pools, transports), then "
                "%s\n", (long long)ranks, ranks == 1 ? "" : "s", then);
    }
    if (state.root)
        status = write_provisional_summary(workload, options, state.results, state.host,
                                           state.start_ns, error_p, error_len);
    if (status == KVIO_OK)
        status = run_serving(&state);
    if (status == KVIO_OK)
        status = run_updates(&state);
    if (status == KVIO_OK)
        check_something_served(&state);
    /* The world ends after summary.json is written (at out:): under mpirun
     * the first rank to exit ends the job, so the other ranks wait there for
     * rank 0. Interrupted, the launcher is tearing the job down (SIGTERM,
     * then SIGKILL): a collective MPI_Finalize could outlast that, so an
     * interrupted run skips it like a failed one. */
    world_failed = status != KVIO_OK || stopped(&state);
    kvio_status_t trace_status = kvio_event_trace_close(state.events);
    state.events = NULL;
    if (status == KVIO_OK && trace_status != KVIO_OK) {
        snprintf(error_p, error_len, "--event-trace %s: write failed: %s", options->event_trace,
                 kvio_strerror(trace_status));
        status = trace_status;
    }
    if (!state.root) {
        /* Rank 0 writes summary.json; this rank's exit status says too. */
        if (status == KVIO_OK && stopped(&state)) {
            snprintf(error_p, error_len, "run interrupted; rank 0 writes summary.json "
                     "(complete: false)");
            status = KVIO_ERR_INTERRUPTED;
        }
        goto out;
    }
    status = run_summary(&state, status, result_p);
out:
    free(kvio_log_capture_end(NULL)); /* a refused or non-root run's capture */
    run_state_free(&state, world_failed);
    return status;
}
