/* Prefill/decode disaggregation in the serve loop (ranks.prefill,
 * ranks.decode; simulate). A request routed to a prefill lane runs there
 * with an output of one token: its prompt is computed (with the prefill
 * rank's own prefix cache) and the first token made. At that end its KV is
 * handed over: the P/D router picks a decode lane, whose load-only "peer"
 * tier then lists the prompt's blocks, and the whole request joins that
 * lane's engine with its first arrival. The decode engine admits it as it
 * admits any request: what its own pool holds is a hit and moves nothing,
 * the rest loads from the peer tier over the P/D link (the link's model:
 * each decode rank's and each prefill rank's link carry one transfer at a
 * time), and the
 * request waits in `loading` with its blocks reserved while the others
 * decode (vLLM's NixlConnector: the decode side pulls after it allocated).
 * Layer-wise, the transfer may start with the prefill and only the last
 * layer's share follows its end. Only the decode's finish is the request's;
 * its TTFT splits into the prefill's queue and compute, the decode's queue,
 * the transfer, and the first decode step. */
#include "serve/pd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/array.h"
#include "kvio/hashset.h"

static const char *const transfer_names[] = {"pull", "push", NULL};
static const char *const link_names[] = {"nic", "gpu", "host", NULL};
static const char *const version_names[] = {"any", "consistent", NULL};

const kvio_opt_t kvio_pd_options[] = {
    {.key = "transfer", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_pd_config_t, transfer),
     .values = transfer_names, .default_value = "pull",
     .help = "pull: the decode rank reads the prefill rank's blocks, staged in the "
             "prefill's outbox, once it has allocated its own (vLLM's NixlConnector); push: the "
             "prefill rank writes them into its partition of the decode rank's inbox (SGLang, "
             "Mooncake). Simulate times both alike: on the links, from the decode's admission"},
    {.key = "layerwise", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_pd_config_t, layerwise),
     .default_value = "false",
     .help = "each layer's KV leaves as soon as the prefill computed it (the transfer "
             "overlaps the prefill; the last layer's share follows its end); false: the "
             "whole request after the prefill"},
    {.key = "link", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_pd_config_t, link),
     .values = link_names, .default_value = "nic",
     .help = "what carries the KV: nic (across nodes, one 400 Gb/s NIC per GPU), gpu (the "
             "GPU link, gpu.link_bandwidth: same node), host (through host memory, "
             "gpu.host_bandwidth)"},
    {.key = "bandwidth", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_pd_config_t, bandwidth),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "bytes/s into each decode rank, e.g. 25e9 (0: the link's)"},
    {.key = "latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_pd_config_t, latency_ns), .default_value = "0s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fixed cost per request's transfer (0s: the link's: nic 20us, gpu 5us, host 10us)"},
    {.key = "router", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_pd_config_t, router),
     .options = kvio_router_options,
     .help = "picks each request's decode rank (serve.router picks its prefill rank): "
             "round_robin by default (vLLM's and SGLang's reference proxies); least_loaded; "
             "prefix_affinity sends it where its prefix is cached (a decode-side hit moves "
             "nothing)"},
    {.key = "staging", .type = KVIO_OPT_SIZE, .offset = offsetof(kvio_pd_config_t, staging),
     .default_value = "0",
     .help = "emulate: each prefill rank's staging buffer (UCX-mapped host memory its "
             "prompts' blocks wait in until their decode rank has read them; 0: as large as "
             "its KV pool). A prefill finding it full waits for its decode ranks"},
    {.key = "local_prefill_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_pd_config_t, local_prefill_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "simulate: a request whose decode rank (picked at its arrival) lacks fewer than "
             "this many of its prompt's tokens is prefilled there, no transfer (Dynamo's "
             "conditional disaggregation: remote prefill only when tokens - overlap is large; "
             "0: every request is prefilled on a prefill rank)"},
    {.key = "corrupt_every", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_pd_config_t, corrupt_every), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fault injection (emulate): every Nth block a prefill rank stages is changed after "
             "its checksum was taken; the decode rank finds it, counts it and computes the "
             "block itself (0: none)"},
    {.key = "decode_dies_after", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_pd_config_t, decode_dies_after), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fault injection (emulate): the first decode rank fails after taking N handoffs; "
             "the run ends naming it (0: never)"},
    {.key = "version", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_pd_config_t, version),
     .values = version_names, .default_value = "any",
     .help = "with model updates: any (a request prefilled by one version may be decoded by "
             "the next: its tokens there count as mixed_version_tokens); consistent (never on "
             "weights newer than its prefill's: a decode rank prefills such a request again, "
             "counted in pd_reprefills, and update.in_flight keep becomes abort; wait drains "
             "them on the old weights)"},
    {.key = NULL},
};

void kvio_pd_link_model(const kvio_pd_config_t *config, const kvio_gpu_t *gpu,
                        double *bandwidth_p, int64_t *latency_ns_p)
{
    static const double nic_bandwidth = 50e9; /* one 400 Gb/s NIC per GPU */
    static const int64_t latency_ns[] = {20000, 5000, 10000};
    double bandwidth = config->link == KVIO_PD_LINK_GPU    ? gpu->link_bandwidth
                       : config->link == KVIO_PD_LINK_HOST ? gpu->host_bandwidth
                                                            : nic_bandwidth;
    *bandwidth_p = config->bandwidth > 0 ? config->bandwidth : bandwidth;
    *latency_ns_p = config->latency_ns > 0 ? config->latency_ns : latency_ns[config->link];
}

/* A request between its arrival on a prefill lane and its decode's end. */
typedef struct pd_entry {
    uint64_t id;
    uint32_t prefill;     /* its prefill lane's index */
    kvio_engine_request_t request; /* the whole request; hashes owned */
    kvio_pd_times_t times;
    uint32_t prompt_blocks; /* full blocks of its prompt: what the peer tier lists */
    bool local;             /* prefilled on its decode rank (local_prefill_tokens) */
} pd_entry_t;

struct kvio_serve_pd {
    kvio_serve_pd_params_t params;
    kvio_router_t *router;
    kvio_engine_t **decode_engines;
    pd_entry_t *entries;  /* count of them, in no order */
    size_t capacity, count;
    kvio_map_t index;     /* id -> its entry's index + 1 */
    int64_t *link_free_ns; /* simulate: per prefill lane, when its outgoing link is free */
    kvio_pd_stats_t stats;
    char error[256];
};

static pd_entry_t *find_entry(kvio_serve_pd_t *pd, uint64_t id)
{
    uint32_t at = kvio_map_get(&pd->index, id);
    return at > 0 ? &pd->entries[at - 1] : NULL;
}

/* A new entry for id (its other fields zero), or NULL out of memory. */
static pd_entry_t *add_entry(kvio_serve_pd_t *pd, uint64_t id)
{
    if (kvio_array_reserve((void **)&pd->entries, &pd->capacity, pd->count + 1,
                           sizeof(*pd->entries), 256) != KVIO_OK ||
        kvio_map_set(&pd->index, id, (uint32_t)pd->count + 1) != KVIO_OK)
        return NULL;
    pd_entry_t *entry = &pd->entries[pd->count++];
    *entry = (pd_entry_t){.id = id};
    return entry;
}

/* Takes the entry out: the last one takes its place. */
static void remove_entry(kvio_serve_pd_t *pd, pd_entry_t *entry)
{
    free((void *)entry->request.hashes);
    (void)kvio_map_set(&pd->index, entry->id, 0); /* taking a key out allocates nothing */
    pd_entry_t *last = &pd->entries[--pd->count];
    if (entry != last) {
        *entry = *last;
        (void)kvio_map_set(&pd->index, entry->id, (uint32_t)(entry - pd->entries) + 1);
    }
}

kvio_status_t kvio_serve_pd_create(const kvio_serve_pd_params_t *params, kvio_serve_pd_t **pd_p)
{
    kvio_serve_pd_t *pd = calloc(1, sizeof(*pd));
    if (pd == NULL)
        return KVIO_ERR_NOMEM;
    pd->params = *params;
    pd->decode_engines = calloc(params->num_decode, sizeof(*pd->decode_engines));
    kvio_status_t status = pd->decode_engines == NULL && params->num_decode > 0 ? KVIO_ERR_NOMEM
                                                                                 : KVIO_OK;
    if (status == KVIO_OK)
        status = kvio_pd_stats_init(&pd->stats, params->block_size, params->kv_bytes_per_token);
    if (status == KVIO_OK)
        status = kvio_router_create(&params->config->router, &pd->router);
    if (status == KVIO_OK && params->send == NULL &&
        (pd->link_free_ns = calloc(params->num_prefill, sizeof(*pd->link_free_ns))) == NULL)
        status = KVIO_ERR_NOMEM;
    for (uint32_t d = 0; status == KVIO_OK && d < params->num_decode; d++)
        pd->decode_engines[d] = params->lanes[params->num_prefill + d]->engine;
    if (status != KVIO_OK) {
        kvio_serve_pd_destroy(pd);
        return status;
    }
    *pd_p = pd;
    return KVIO_OK;
}

void kvio_serve_pd_destroy(kvio_serve_pd_t *pd)
{
    if (pd == NULL)
        return;
    for (size_t i = 0; i < pd->count; i++)
        free((void *)pd->entries[i].request.hashes);
    free(pd->entries);
    kvio_map_fini(&pd->index);
    free(pd->decode_engines);
    kvio_router_destroy(pd->router);
    free(pd->link_free_ns);
    kvio_pd_stats_fini(&pd->stats);
    free(pd);
}

/* lane's index among the prefill lanes; num_prefill when it is none. */
static uint32_t prefill_index(const kvio_serve_pd_t *pd, const kvio_serve_lane_t *lane)
{
    uint32_t p = 0;
    while (p < pd->params.num_prefill && pd->params.lanes[p] != lane)
        p++;
    return p;
}

static bool prefills(const void *context, const kvio_serve_lane_t *lane)
{
    const kvio_serve_pd_t *pd = context;
    return prefill_index(pd, lane) < pd->params.num_prefill;
}

const char *kvio_serve_pd_error(const kvio_serve_pd_t *pd)
{
    return pd->error;
}

/* The request's hashes, its own copy (a deferred source fills them now and
 * is released). */
static kvio_status_t own_hashes(const kvio_engine_request_t *request, kvio_hash_t **hashes_p)
{
    size_t count = request->num_hashes;
    kvio_hash_t *hashes = malloc((count > 0 ? count : 1) * sizeof(*hashes));
    kvio_status_t status = hashes == NULL ? KVIO_ERR_NOMEM : KVIO_OK;
    const kvio_engine_hash_source_t *source = &request->hash_source;
    if (status == KVIO_OK && source->fill != NULL)
        status = source->fill(source->context, hashes, count);
    else if (status == KVIO_OK && count > 0)
        memcpy(hashes, request->hashes, count * sizeof(*hashes));
    if (source->fill != NULL && source->release != NULL)
        source->release(source->context);
    if (status != KVIO_OK) {
        free(hashes);
        return status;
    }
    *hashes_p = hashes;
    return KVIO_OK;
}

/* local_prefill_tokens: the decode rank the router picks now, and whether it
 * lacks so little of the prompt that it prefills the request itself. */
static bool prefill_locally(kvio_serve_pd_t *pd, const kvio_engine_request_t *request,
                            uint32_t *decode_p)
{
    int64_t threshold = pd->params.config->local_prefill_tokens;
    if (threshold <= 0 || pd->params.num_decode == 0)
        return false;
    uint32_t d = kvio_router_choose(pd->router, pd->decode_engines, pd->params.num_decode,
                                    request, 0);
    size_t cached = kvio_engine_cached_prefix(pd->decode_engines[d], request->hashes,
                                              request->num_hashes, request->prompt_tokens);
    *decode_p = d;
    return (int64_t)request->prompt_tokens - (int64_t)cached < threshold;
}

/* A request for prefill lane (the loop's intake): kept whole, and its
 * prompt with one output token queued on the lane's engine (or, under
 * local_prefill_tokens, the whole request on its decode lane when that
 * lacks little of it). */
static kvio_status_t prefill(void *context, kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                             const kvio_engine_request_t *request)
{
    kvio_serve_pd_t *pd = context;
    if (find_entry(pd, request->id) != NULL) {
        snprintf(pd->error, sizeof(pd->error), "request %llu: a second request with its id",
                 (unsigned long long)request->id);
        return KVIO_ERR_INVALID;
    }
    kvio_hash_t *hashes = NULL;
    kvio_status_t status = own_hashes(request, &hashes);
    pd_entry_t *entry = status == KVIO_OK ? add_entry(pd, request->id) : NULL;
    if (entry == NULL) {
        free(hashes);
        snprintf(pd->error, sizeof(pd->error), "request %llu: cannot keep it for its decode: %s",
                 (unsigned long long)request->id,
                 kvio_strerror(status != KVIO_OK ? status : KVIO_ERR_NOMEM));
        return status != KVIO_OK ? status : KVIO_ERR_NOMEM;
    }
    entry->request = *request;
    entry->request.hashes = hashes;
    entry->request.hash_source = (kvio_engine_hash_source_t){0};
    entry->prefill = prefill_index(pd, lane);
    entry->prompt_blocks = request->prompt_tokens / pd->params.block_size;
    if (entry->prompt_blocks > request->num_hashes)
        entry->prompt_blocks = (uint32_t)request->num_hashes;
    uint32_t d = 0;
    if (prefill_locally(pd, &entry->request, &d)) {
        kvio_serve_lane_t *decode = pd->params.lanes[pd->params.num_prefill + d];
        entry->local = true;
        entry->times.prefill_rank = decode->world_rank + 1;
        return kvio_serve_loop_pass(loop, decode, &entry->request);
    }
    /* The prefill: the prompt and one token (vLLM's proxy sends max_tokens 1). */
    kvio_engine_request_t prompt = entry->request;
    prompt.output_tokens = 1;
    prompt.max_tokens = 1;
    prompt.num_hashes = entry->prompt_blocks;
    return kvio_engine_add(lane->engine, &prompt);
}

static const char *intake_error(const void *context)
{
    return kvio_serve_pd_error(context);
}

kvio_serve_intake_t kvio_serve_pd_intake(kvio_serve_pd_t *pd)
{
    return (kvio_serve_intake_t){.takes = prefills, .add = prefill, .error = intake_error,
                                 .context = pd};
}

kvio_status_t kvio_serve_pd_prefilled(kvio_serve_pd_t *pd, kvio_serve_loop_t *loop,
                                      const kvio_engine_finished_t *finished)
{
    pd_entry_t *entry = find_entry(pd, finished->id);
    if (entry == NULL) {
        snprintf(pd->error, sizeof(pd->error), "request %llu finished a prefill it never began",
                 (unsigned long long)finished->id);
        return KVIO_ERR_INVALID;
    }
    int64_t start_ns = finished->arrival_ns + finished->queued_ns;
    entry->times = (kvio_pd_times_t){.prefill_rank = finished->rank + 1,
                                     .prefill_queued_ns = finished->queued_ns,
                                     .prefill_ns = finished->finish_ns - start_ns};
    kvio_engine_request_t decode = entry->request;
    decode.handoff = (kvio_engine_handoff_t){
        .prefill_start_ns = start_ns, .handoff_ns = finished->finish_ns,
        .layers = pd->params.config->layerwise ? pd->params.layers : 0,
        .latency_ns = pd->params.latency_ns,
        .source_free_ns = pd->link_free_ns != NULL ? &pd->link_free_ns[entry->prefill] : NULL};
    if (pd->params.send != NULL) {
        /* Emulate: to a decode rank; the request leaves this rank. */
        kvio_status_t status = pd->params.send(pd->params.send_context, &decode, &entry->times,
                                               finished);
        remove_entry(pd, entry);
        return status;
    }
    uint32_t d = kvio_router_choose(pd->router, pd->decode_engines, pd->params.num_decode,
                                    &decode, 0);
    kvio_tier_t *peer = pd->params.peers[d];
    for (uint32_t b = 0; b < entry->prompt_blocks; b++) {
        kvio_status_t status = kvio_tier_list(peer, entry->request.hashes[b], 0, 0);
        if (status != KVIO_OK) {
            snprintf(pd->error, sizeof(pd->error), "request %llu: handing its KV over: %s",
                     (unsigned long long)finished->id, kvio_tier_error(peer));
            return status;
        }
    }
    return kvio_serve_loop_pass(loop, pd->params.lanes[pd->params.num_prefill + d], &decode);
}

void kvio_serve_pd_decoded(kvio_serve_pd_t *pd, kvio_engine_finished_t *finished)
{
    pd_entry_t *entry = find_entry(pd, finished->id);
    if (entry == NULL)
        return;
    kvio_pd_times_t times = entry->times;
    if (entry->local) /* its prefill is its own: from admission to the first token */
        times.prefill_queued_ns = finished->queued_ns;
    kvio_pd_fill_times(finished, &times);
    kvio_pd_stats_add(&pd->stats, finished);
    remove_entry(pd, entry);
}

void kvio_pd_fill_times(kvio_engine_finished_t *finished, const kvio_pd_times_t *prefill)
{
    kvio_pd_times_t *times = &finished->pd;
    *times = *prefill;
    int64_t handoff_ns = finished->arrival_ns + times->prefill_queued_ns + times->prefill_ns +
                         times->staging_ns;
    int64_t admitted_ns = finished->arrival_ns + finished->queued_ns;
    times->decode_queued_ns = admitted_ns - handoff_ns;
}

kvio_status_t kvio_pd_stats_init(kvio_pd_stats_t *stats, uint32_t block_size,
                                 uint64_t kv_bytes_per_token)
{
    *stats = (kvio_pd_stats_t){.block_size = block_size,
                               .kv_bytes_per_token = kv_bytes_per_token};
    kvio_status_t status = kvio_hist_create(&stats->transfer_ns);
    if (status == KVIO_OK)
        status = kvio_hist_create(&stats->transfer_mbps);
    return status;
}

void kvio_pd_stats_fini(kvio_pd_stats_t *stats)
{
    kvio_hist_destroy(stats->transfer_ns);
    kvio_hist_destroy(stats->transfer_mbps);
    stats->transfer_ns = stats->transfer_mbps = NULL;
}

void kvio_pd_stats_add(kvio_pd_stats_t *stats, const kvio_engine_finished_t *finished)
{
    const kvio_pd_times_t *times = &finished->pd;
    if (times->prefill_rank == 0)
        return;
    if (times->prefill_rank == finished->rank + 1) {
        stats->local_prefills++; /* prefilled on its decode rank: nothing handed over */
        return;
    }
    stats->handoffs++;
    uint64_t bytes = (uint64_t)finished->loaded_tokens * stats->kv_bytes_per_token;
    uint32_t transferable = finished->prompt_tokens > 0
                                ? (finished->prompt_tokens - 1) / stats->block_size *
                                      stats->block_size
                                : 0;
    stats->decode_hit_tokens += finished->cached_tokens < transferable ? finished->cached_tokens
                                                                       : transferable;
    uint32_t moved = finished->cached_tokens + finished->loaded_tokens;
    stats->recomputed_tokens += moved < transferable ? transferable - moved : 0;
    if (bytes > 0) {
        stats->transfers++;
        stats->transfer_bytes += bytes;
        int64_t transfer_ns = times->staging_ns + finished->kv_transfer_ns;
        kvio_hist_record(stats->transfer_ns, (uint64_t)transfer_ns);
        if (transfer_ns > 0)
            kvio_hist_record(stats->transfer_mbps,
                             (uint64_t)((double)bytes * 1e3 / (double)transfer_ns));
    }
    if (finished->measured) {
        int64_t parts[KVIO_PD_TTFT_PARTS];
        kvio_pd_ttft_parts(finished, parts);
        for (int i = 0; i < KVIO_PD_TTFT_PARTS; i++)
            stats->ttft_parts_ns[i] += parts[i];
        stats->measured++;
    }
}

void kvio_pd_ttft_parts(const kvio_engine_finished_t *finished, int64_t parts_p[KVIO_PD_TTFT_PARTS])
{
    const kvio_pd_times_t *times = &finished->pd;
    int64_t admitted_ns = finished->arrival_ns + finished->queued_ns;
    parts_p[0] = times->prefill_queued_ns;
    parts_p[1] = times->prefill_ns;
    parts_p[2] = times->decode_queued_ns;
    parts_p[3] = times->staging_ns + finished->kv_transfer_ns;
    parts_p[4] = finished->first_token_ns - admitted_ns - finished->kv_transfer_ns;
}

/* The pools' side of metrics.pd from the lanes [first, first + count). */
static void pools_of(kvio_serve_lane_t *const *lanes, uint32_t first, uint32_t count,
                     kvio_pd_pool_t *pool_p)
{
    for (uint32_t i = first; i < first + count; i++) {
        const kvio_engine_metrics_t *metrics = kvio_engine_metrics(lanes[i]->engine);
        kvio_pd_pool_add(pool_p, metrics);
    }
}

void kvio_pd_pool_add(kvio_pd_pool_t *pool, const kvio_engine_metrics_t *metrics)
{
    pool->ranks++;
    pool->prefix_hits += metrics->prefix_hits;
    pool->prefix_queries += metrics->prefix_queries;
    pool->busy_ns += metrics->busy_ns;
}

void kvio_serve_pd_fill(kvio_result_t *result, const kvio_serve_pd_t *pd, int64_t run_ns)
{
    const kvio_serve_pd_params_t *params = &pd->params;
    kvio_pd_pool_t prefill = {0}, decode = {0};
    pools_of(params->lanes, 0, params->num_prefill, &prefill);
    pools_of(params->lanes, params->num_prefill, params->num_decode, &decode);
    kvio_pd_link_info_t link = {.bandwidth = params->bandwidth,
                                  .latency_ns = params->latency_ns,
                                  .router = kvio_router_name(pd->router)};
    kvio_pd_fill(result, params->config, &link, &pd->stats, &prefill, &decode, run_ns);
}

static double share(double part, double whole)
{
    return whole > 0 ? part / whole : 0;
}

void kvio_pd_fill(kvio_result_t *result, const kvio_pd_config_t *config,
                  const kvio_pd_link_info_t *link, const kvio_pd_stats_t *stats,
                  const kvio_pd_pool_t *prefill, const kvio_pd_pool_t *decode, int64_t run_ns)
{
    kvio_result_set(result, KVIO_FIG_PD_PREFILL_RANKS, prefill->ranks);
    kvio_result_set(result, KVIO_FIG_PD_DECODE_RANKS, decode->ranks);
    kvio_result_set_text(result, KVIO_FIG_PD_TRANSFER_KIND, transfer_names[config->transfer]);
    kvio_result_set(result, KVIO_FIG_PD_LAYERWISE, config->layerwise);
    kvio_result_set_text(result, KVIO_FIG_PD_LINK, link_names[config->link]);
    if (link->bandwidth > 0) {
        kvio_result_set(result, KVIO_FIG_PD_LINK_BANDWIDTH_GBPS, link->bandwidth / 1e9);
        kvio_result_set(result, KVIO_FIG_PD_LINK_LATENCY_US, (double)link->latency_ns / 1e3);
    }
    kvio_result_set_text(result, KVIO_FIG_PD_DECODE_ROUTER, link->router);
    kvio_result_set(result, KVIO_FIG_PD_HANDOFFS, (double)stats->handoffs);
    kvio_result_set(result, KVIO_FIG_PD_LOCAL_PREFILLS, (double)stats->local_prefills);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFERS, (double)stats->transfers);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFER_BYTES, (double)stats->transfer_bytes);
    kvio_result_set(result, KVIO_FIG_PD_VERIFIED_BLOCKS, (double)stats->verified_blocks);
    kvio_result_set(result, KVIO_FIG_PD_CHECKSUM_FAILURES, (double)stats->checksum_failures);
    kvio_result_set(result, KVIO_FIG_PD_PREFILL_HIT_RATE,
                    share((double)prefill->prefix_hits, (double)prefill->prefix_queries));
    kvio_result_set(result, KVIO_FIG_PD_DECODE_HIT_RATE,
                    share((double)decode->prefix_hits, (double)decode->prefix_queries));
    kvio_result_set(result, KVIO_FIG_PD_DECODE_HIT_TOKENS, (double)stats->decode_hit_tokens);
    kvio_result_set(result, KVIO_FIG_PD_DECODE_RECOMPUTED_TOKENS,
                    (double)stats->recomputed_tokens);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFER_MS_MEAN, kvio_hist_mean(stats->transfer_ns) / 1e6);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFER_MS_P50,
                    kvio_hist_quantile(stats->transfer_ns, 0.5) / 1e6);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFER_MS_P99,
                    kvio_hist_quantile(stats->transfer_ns, 0.99) / 1e6);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFER_MS_MAX,
                    (double)kvio_hist_max(stats->transfer_ns) / 1e6);
    kvio_result_set(result, KVIO_FIG_PD_TRANSFER_GBPS_MEAN,
                    kvio_hist_mean(stats->transfer_mbps) / 1e3);
    kvio_result_set(result, KVIO_FIG_PD_PREFILL_UTILIZATION,
                    share((double)prefill->busy_ns, (double)run_ns * prefill->ranks));
    kvio_result_set(result, KVIO_FIG_PD_DECODE_UTILIZATION,
                    share((double)decode->busy_ns, (double)run_ns * decode->ranks));
    /* TTFT's five parts, in the order they happen (kvio_pd_ttft_parts). */
    static const kvio_figure_t parts[KVIO_PD_TTFT_PARTS] = {
        KVIO_FIG_PD_TTFT_PREFILL_QUEUE_MS, KVIO_FIG_PD_TTFT_PREFILL_MS,
        KVIO_FIG_PD_TTFT_DECODE_QUEUE_MS, KVIO_FIG_PD_TTFT_KV_TRANSFER_MS,
        KVIO_FIG_PD_TTFT_FIRST_STEP_MS};
    for (int i = 0; i < KVIO_PD_TTFT_PARTS; i++)
        kvio_result_set(result, parts[i],
                        share((double)stats->ttft_parts_ns[i] / 1e6, (double)stats->measured));
}
