/* One serve rank's engine, following vLLM v1's Scheduler.schedule(): one
 * token budget per iteration, running requests first and in order, a victim
 * preempted when a running request cannot get its blocks, waiting requests
 * admitted only when nothing was preempted, head-of-line, prefix hits never
 * covering the last prompt token. Metrics are taken here, not in policies. */
#include "kvio/engine.h"

#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

#include "kvio/array.h"
#include "kvio/kvcache.h"
#include "kvio/log.h"
#include "kvio/rng.h"
#include "kvio/update.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* The longest iteration a run's nanosecond clock takes (10^15 ns, ~11.6
 * days): a run of many of them stays far below INT64_MAX. */
#define ITERATION_MAX_NS 1e15

static const char *const preemption_names[] = {"recompute", "swap", NULL};

static const char *const free_order_names[] = {"append", "prepend_unhashed", NULL};
static const char *const index_names[] = {"hash", "radix", NULL};
static const char *const tier_io_names[] = {"async", "sync", NULL};
static const char *const placement_names[] = {"each", "waterfall", NULL};
static const char *const prefetch_names[] = {"wait_complete", "best_effort", "timeout", NULL};
static const char *const save_full_names[] = {"wait", "skip", NULL};
static const char *const pool_memory_names[] = {"resident", "generated", NULL};

const kvio_opt_t kvio_engine_options[] = {
    {.key = "max_num_seqs", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_engine_config_t, max_num_seqs), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 65536,
     .help = "most requests running at once (0: vLLM's default for the GPU: 1024 with 70 GiB "
             "or more and not an A100, else 256)"},
    {.key = "max_num_batched_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_engine_config_t, max_num_batched_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 10000000,
     .help = "token budget of one iteration (0: vLLM's default for the GPU: 8192 with 70 GiB "
             "or more and not an A100, else 2048)"},
    {.key = "chunked_prefill", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_engine_config_t, chunked_prefill), .default_value = "true",
     .help = "split long prompts across iterations"},
    {.key = "long_prefill_token_threshold", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_engine_config_t, long_prefill_token_threshold),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "most tokens one request gets per iteration (0: no limit)"},
    {.key = "preemption", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_engine_config_t, preemption), .values = preemption_names,
     .default_value = "recompute",
     .help = "recompute: drop the victim's KV; swap: move it to host memory and back"},
    {.key = "scheduler_reserve_full_isl", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_engine_config_t, scheduler_reserve_full_isl),
     .default_value = "true",
     .help = "admit a waiting or preempted request only when its whole sequence (prompt, "
             "and the output so far) fits in the free KV blocks, as vLLM's v1 scheduler "
             "does (its name; on since vLLM PR #37307); false: only the first chunk must "
             "fit (vLLM before, kvio before #35)"},
    {.key = "watermark", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_engine_config_t, watermark), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 0.99,
     .help = "fraction of the pool's blocks a waiting or preempted request must leave free "
             "when admitted while another runs (vLLM's watermark)"},
    {.key = "num_lookahead_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_engine_config_t, num_lookahead_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 64,
     .help = "speculative decoding (0: off): draft tokens each decode step verifies, and "
             "lookahead slots kept past them for the next drafts (vLLM with an EAGLE "
             "drafter); only verified tokens are cached, rejected drafts roll back"},
    {.key = "spec_acceptance", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_engine_config_t, spec_acceptance), .default_value = "0.7",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "chance a draft token is accepted, the drafts of a step checked in order until "
             "the first rejected one (drawn from the run's seed)"},
    {.key = "spec_draft_fraction", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_engine_config_t, spec_draft_fraction), .default_value = "0.05",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 10,
     .help = "what one draft step costs, as a fraction of the iteration (an EAGLE head is "
             "one decoder layer: 0.24 B of Vicuna-7B's 6.7 B weights, 3.6 %, plus launches)"},
    {.key = "realtime", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_engine_config_t, realtime),
     .default_value = "false",
     .help = "emulate: run serve ranks under SCHED_FIFO for tighter iteration timing "
             "(needs root or CAP_SYS_NICE)"},
    {.key = NULL},
};

const kvio_opt_t kvio_kvcache_section_options[] = {
    {.key = "block_size", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_kvcache_section_t, block_size), .default_value = "16",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 4096,
     .help = "tokens per KV block"},
    {.key = "capacity", .type = KVIO_OPT_SIZE,
     .offset = offsetof(kvio_kvcache_section_t, capacity), .default_value = "0",
     .help = "KV bytes per serve rank (0: what the GPU holds after the weights)"},
    {.key = "blocks", .type = KVIO_OPT_INT, .offset = offsetof(kvio_kvcache_section_t, blocks),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0,
     .max = 1000000000, .help = "usable KV blocks (overrides capacity)"},
    {.key = "gpu_memory_utilization", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_kvcache_section_t, gpu_memory_utilization),
     .default_value = "0.9", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.05, .max = 1,
     .help = "with capacity 0: fraction of GPU memory for weights and KV (vLLM)"},
    {.key = "prefix_caching", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_kvcache_section_t, prefix_caching), .default_value = "true",
     .help = "reuse cached blocks of a common prefix"},
    {.key = "free_order", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_kvcache_section_t, free_order), .values = free_order_names,
     .default_value = "prepend_unhashed",
     .help = "where freed blocks go in the free queue: prepend_unhashed (vLLM v1: blocks "
             "without a hash at the head, reused first; cached ones at the tail) or append "
             "(every freed block at the tail, kvio before #35)"},
    {.key = "index", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_kvcache_section_t, index),
     .values = index_names, .default_value = "hash",
     .help = "hash (vLLM: a hash-chain table; any free cached block may be evicted) or "
             "radix (SGLang's RadixCache over the pool's blocks: whole-block matches, "
             "running requests lock their paths, only unlocked leaves are evicted, a node "
             "at a time)"},
    {.key = "eviction", .type = KVIO_OPT_PLUGIN,
     .offset = offsetof(kvio_kvcache_section_t, eviction), .default_value = "lru",
     .registry = &kvio_evictions,
     .help = "which free cached block a full pool reuses first"},
    {.key = "verify_swaps", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_kvcache_section_t, verify_swaps), .default_value = "false",
     .help = "emulate: checksum every swapped block out and back"},
    {.key = "pool_memory", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_kvcache_section_t, pool_memory), .values = pool_memory_names,
     .default_value = "resident",
     .help = "emulate: what holds the KV pool's bytes: resident (real memory, host pages "
             "touched up front or device.memory's) or generated (none: a block's bytes are made "
             "from the run's seed, the block and its owner whenever a tier save or a swap reads "
             "them, and a block loaded back is checked byte for byte against them, so a run "
             "whose tiers are the point, as mlperf/storage-only, needs no pool-sized memory; "
             "not with device.memory other than host or P/D)"},
    {.key = "swap_space", .type = KVIO_OPT_SIZE,
     .offset = offsetof(kvio_kvcache_section_t, swap_space), .default_value = "0",
     .help = "emulate: host memory for swapped blocks, like vLLM's swap_space (0: the pool's "
             "size, at most 4GiB); a victim that does not fit is recomputed"},
    {.key = "tiers", .type = KVIO_OPT_LIST, .offset = offsetof(kvio_kvcache_section_t, tiers),
     .options = kvio_tier_options, .element_size = sizeof(kvio_tier_config_t),
     .help = "lower tiers (host, redis, file) below the KV pool, checked in order"},
    {.key = "tier_io", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_kvcache_section_t, tier_io),
     .values = tier_io_names, .default_value = "async",
     .help = "async: KV loads and saves run beside the batch, as vLLM's KV connectors "
             "(a request whose prefix is in a tier waits for it, its blocks reserved, while "
             "the others run); sync: inside the iteration, every request waits (kvio before "
             "#35)"},
    {.key = "placement", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_kvcache_section_t, placement), .values = placement_names,
     .default_value = "each",
     .help = "each: every tier takes the blocks its write policy gives it; waterfall "
             "(MLPerf Storage's kv-cache.py): the pool's evictions go to the first tier and "
             "each tier's evictions to the next (only the first tier's write applies)"},
    {.key = "prefetch", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_kvcache_section_t, prefetch),
     .values = prefetch_names, .default_value = "wait_complete",
     .help = "tier_io async: when a request whose prefix is in a tier stops waiting for it "
             "(SGLang HiCache's prefetch policies): wait_complete (every block), best_effort "
             "(as soon as it could run, with what has come; the rest is computed) or timeout "
             "(prefetch_timeout_base + prefetch_timeout_per_1k per 1,024 tokens, at most "
             "prefetch_timeout_max, then as best_effort)"},
    {.key = "prefetch_timeout_base", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_kvcache_section_t, prefetch_timeout_base_ns), .default_value = "1s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "prefetch: timeout: the wait for any load"},
    {.key = "prefetch_timeout_per_1k", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_kvcache_section_t, prefetch_timeout_per_1k_ns),
     .default_value = "250ms", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "prefetch: timeout: more wait per 1,024 tokens to load"},
    {.key = "prefetch_timeout_max", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_kvcache_section_t, prefetch_timeout_max_ns), .default_value = "0s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "prefetch: timeout: the longest wait (0s: none)"},
    {.key = "chunk_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_kvcache_section_t, chunk_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1 << 20,
     .help = "tokens per object in the tiers, a multiple of block_size (LMCache's chunk_size, "
             "256 by default there; vLLM's offloaded block size): a request's blocks are stored "
             "and loaded that many at a time, each chunk one object keyed by its last block's "
             "hash, and a prompt's last partial chunk is not stored. Tiers written through only "
             "(each tier's write: through). 0: one block per object"},
    {.key = "save_full", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_kvcache_section_t, save_full), .values = save_full_names,
     .default_value = "wait",
     .help = "emulate, tier_io async: when the tiers are slower than the engine and every "
             "staging slot (64 MiB) holds a save not yet written: wait (the engine waits for a "
             "slot, counted as tier I/O: kv-cache.py's synchronous writes) or skip (the block "
             "is not saved, counted in each tier's skipped_puts: vLLM's offloading connector "
             "stores nothing it has no room for)"},
    {.key = "hybrid", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_kvcache_section_t, hybrid),
     .default_value = "false",
     .help = "a model with half its layers on a sliding window (gpt-oss) as vLLM's hybrid KV "
             "cache groups: each request has a full-attention and a window block table from "
             "the one pool, a hit is what both serve, window blocks are freed as they leave the "
             "window (false: window layers take no blocks); not with tiers, swap preemption or "
             "index radix"},
    {.key = NULL},
};

typedef enum { REQ_WAITING, REQ_RUNNING } req_state_t;

typedef struct engine_req {
    kvio_sched_request_t sched; /* what policies see */
    kvio_engine_request_t spec;
    kvio_hash_t *hashes;        /* prompt + output full blocks (owned) */
    size_t hashes_capacity;
    size_t hashes_given;        /* hashes handed to the pool so far */
    kvio_engine_hash_source_t source; /* fill set: hashes not yet filled (kv NULL) */
    kvio_kvreq_t *kv;
    uint32_t held_blocks;       /* blocks the pool holds for kv (what kvio_kvreq_blocks says) */
    uint32_t unappended;        /* decode tokens kv has not been told of yet (kv_sync) */
    uint32_t target_output;     /* min(output, max_tokens) */
    uint32_t computed;          /* tokens whose KV exists */
    uint32_t scheduled;         /* tokens scheduled this iteration */
    uint32_t drafts;            /* of them, draft tokens to verify (speculative decoding) */
    uint32_t cached_tokens;
    uint32_t preemptions;
    uint32_t lost_tokens;       /* computed tokens dropped at the last preemption */
    uint32_t recomputed_tokens; /* this request's share of the recomputed tokens */
    int64_t max_itl_ns;         /* its longest gap between two tokens */
    kvio_kv_load_t *load;       /* tier_io: async, its blocks on their way from a tier */
    int64_t kv_wait_start_ns;   /* when the load began */
    int64_t prefetch_deadline_ns; /* prefetch best_effort or timeout: when it stops waiting */
    int64_t kv_wait_ns;         /* its time waiting for KV from a tier */
    int64_t kv_transfer_ns;     /* of it, until its loads ended (the rest: an iteration) */
    uint32_t loaded_tokens;     /* tokens its loads brought */
    bool pd_stale;              /* P/D: prefilled on an older version, prefilled again here */
    bool admitted_once;
    bool swapped;               /* KV sits in host memory (preempted by swap) */
    kvio_swapped_t swap;        /* emulate: where the swapped blocks sit */
    int64_t first_token_ns, last_token_ns;
    int64_t queued_ns;          /* arrival to its first schedule (0 before it) */
    req_state_t state;
    struct engine_req *next_spare;
} engine_req_t;

/* A finished request's hash array and pool request, kept for the next
 * request (no allocation, no fresh pages per request). */
typedef struct req_buffers {
    kvio_hash_t *hashes;
    size_t capacity;
    kvio_kvreq_t *kv; /* holds no blocks */
} req_buffers_t;

/* How many finished requests' buffers and structs are kept for reuse. */
#define MAX_SPARE_BUFFERS 16
#define MAX_SPARE_REQUESTS 256

/* A queue in one array with room at both ends: items = base + start, so
 * taking the head or putting a preempted request back at the head is O(1)
 * (offline batches queue thousands of requests). */
typedef struct req_list {
    engine_req_t **base;
    engine_req_t **items;
    size_t start, count, capacity;
} req_list_t;

struct kvio_engine {
    kvio_engine_config_t config;
    kvio_kvcache_t *cache;
    kvio_sched_t *sched;
    const kvio_cost_t *cost;
    uint32_t block_size;
    uint32_t num_blocks;
    uint32_t watermark_blocks;  /* serve.engine.watermark of num_blocks */
    uint64_t kv_bytes_per_token;
    double host_bandwidth;
    kvio_slo_t slo;
    uint32_t rank;
    kvio_engine_observer_t observer;
    req_list_t running, waiting;
    kvio_rng_t spec_rng;        /* which drafts are accepted */
    req_list_t loading;         /* admitted, waiting for their KV from a tier (tier_io: async;
                                   vLLM's WAITING_FOR_REMOTE_KVS), their blocks reserved */
    bool async_tiers;
    uint32_t chunk_blocks;      /* blocks per tier object (serve.kvcache.chunk_tokens) */
    bool hybrid;                /* the pool has a window group (kvio_kvcache_computed) */
    int prefetch;               /* kvio_prefetch_t */
    int64_t prefetch_base_ns, prefetch_per_1k_ns, prefetch_max_ns;
    engine_req_t **scratch;     /* scheduled requests of the current iteration */
    size_t num_scratch, scratch_capacity;
    kvio_engine_scheduled_t *scheduled;
    uint64_t admit_counter;
    uint64_t running_blocks;    /* Σ held_blocks over the running requests */
    kvio_engine_iteration_t current;
    kvio_engine_metrics_t metrics;
    kvio_block_store_t *store;  /* the blocks' bytes, swap space and tiers */
    const engine_req_t *allocating; /* the request kvio_kvcache_allocate is giving blocks
                                       (its hooks may save them before it returns) */
    bool config_prefix_caching;
    int update_cache;           /* kvio_update_cache_t */
    int update_reset;           /* kvio_reset_t */
    bool reset_pending;         /* reset: when_idle, refused while blocks are in use */
    int64_t reset_asked_ns;     /* when (the iteration boundary of the activation) */
    int64_t last_end_ns;        /* the last iteration boundary */
    int in_flight;              /* kvio_in_flight_t */
    bool pd_consistent;         /* pd.version: consistent */
    uint64_t active_version;    /* the model version the engine runs */
    bool admission_paused;      /* in_flight: wait: draining for an update */
    bool admission_held;        /* kvio_engine_hold_admission (vLLM's pause, mode wait) */
    char error[512];            /* why the last schedule failed (a bad cost model) */
    kvio_kvreq_t *reservation;  /* update.colocated: blocks lent to an incoming update */
    uint32_t reserved_blocks;
    engine_req_t *spare_requests; /* finished requests' structs (no buffers), linked */
    size_t num_spare_requests;
    req_buffers_t spare_buffers[MAX_SPARE_BUFFERS];
    size_t num_spare_buffers;
};

/* ---------- lists ---------- */

/* Makes room for one more item at the front or the back, re-centring the
 * items (and growing the array when more than half full). */
static kvio_status_t list_make_room(req_list_t *list, bool front)
{
    if (front ? list->start > 0 : list->start + list->count < list->capacity)
        return KVIO_OK;
    size_t capacity = list->capacity ? list->capacity : 16;
    while (capacity < 2 * (list->count + 2))
        capacity *= 2;
    size_t start = (capacity - list->count) / 2;
    if (capacity != list->capacity) {
        engine_req_t **base = malloc(capacity * sizeof(*base));
        if (base == NULL)
            return KVIO_ERR_NOMEM;
        if (list->count > 0)
            memcpy(base + start, list->items, list->count * sizeof(*base));
        free(list->base);
        list->base = base;
        list->capacity = capacity;
    } else {
        memmove(list->base + start, list->items, list->count * sizeof(*list->base));
    }
    list->start = start;
    list->items = list->base + start;
    return KVIO_OK;
}

static kvio_status_t list_push(req_list_t *list, engine_req_t *req)
{
    kvio_status_t status = list_make_room(list, false);
    if (status == KVIO_OK)
        list->items[list->count++] = req;
    return status;
}

static kvio_status_t list_push_front(req_list_t *list, engine_req_t *req)
{
    kvio_status_t status = list_make_room(list, true);
    if (status != KVIO_OK)
        return status;
    list->start--;
    list->items = list->base + list->start;
    list->items[0] = req;
    list->count++;
    return KVIO_OK;
}

static void list_remove_at(req_list_t *list, size_t index)
{
    if (index == 0) {
        list->start++;
        list->items = list->base + list->start;
    } else {
        memmove(list->items + index, list->items + index + 1,
                (list->count - index - 1) * sizeof(*list->items));
    }
    list->count--;
}

/* ---------- metrics ---------- */

kvio_status_t kvio_engine_metrics_init(kvio_engine_metrics_t *metrics)
{
    memset(metrics, 0, sizeof(*metrics));
    metrics->first_arrival_ns = INT64_MAX;
    metrics->measure_start_ns = INT64_MAX;
    kvio_hist_t **hists[] = {&metrics->ttft, &metrics->tpot, &metrics->itl, &metrics->e2el,
                             &metrics->queue};
    for (size_t i = 0; i < sizeof(hists) / sizeof(hists[0]); i++) {
        if (kvio_hist_create(hists[i]) != KVIO_OK) {
            kvio_engine_metrics_fini(metrics);
            return KVIO_ERR_NOMEM;
        }
    }
    return KVIO_OK;
}

void kvio_engine_metrics_fini(kvio_engine_metrics_t *metrics)
{
    kvio_hist_destroy(metrics->ttft);
    kvio_hist_destroy(metrics->tpot);
    kvio_hist_destroy(metrics->itl);
    kvio_hist_destroy(metrics->e2el);
    kvio_hist_destroy(metrics->queue);
    metrics->ttft = metrics->tpot = metrics->itl = metrics->e2el = metrics->queue = NULL;
    free(metrics->itl_records);
    metrics->itl_records = NULL;
    metrics->num_itl_records = metrics->itl_records_capacity = 0;
}

/* Appends count gaps, or counts them dropped when memory runs out. */
static void append_itls(kvio_engine_metrics_t *metrics, const kvio_itl_record_t *records,
                        uint64_t count)
{
    if (count == 0)
        return;
    size_t capacity = (size_t)metrics->itl_records_capacity;
    if (kvio_array_reserve((void **)&metrics->itl_records, &capacity,
                           (size_t)(metrics->num_itl_records + count),
                           sizeof(*metrics->itl_records), 4096) != KVIO_OK) {
        metrics->itl_records_dropped += count;
        return;
    }
    metrics->itl_records_capacity = capacity;
    memcpy(metrics->itl_records + metrics->num_itl_records, records, count * sizeof(*records));
    metrics->num_itl_records += count;
}

void kvio_engine_move_itls(kvio_engine_t *engine, kvio_engine_metrics_t *dst)
{
    kvio_engine_metrics_t *src = &engine->metrics;
    if (dst->itl_records == NULL) {
        dst->itl_records = src->itl_records;
        dst->num_itl_records = src->num_itl_records;
        dst->itl_records_capacity = src->itl_records_capacity;
        src->itl_records = NULL;
    } else {
        append_itls(dst, src->itl_records, src->num_itl_records);
        free(src->itl_records);
        src->itl_records = NULL;
    }
    dst->itl_records_dropped += src->itl_records_dropped;
    src->num_itl_records = src->itl_records_capacity = src->itl_records_dropped = 0;
}

/* A measured request's gap between two tokens, kept while within the
 * limit. */
static void record_itl(kvio_engine_metrics_t *metrics, uint64_t id, int64_t gap_ns)
{
    if (metrics->num_itl_records >= metrics->itl_records_max || id > UINT32_MAX) {
        metrics->itl_records_dropped++;
        return;
    }
    kvio_itl_record_t record = {.id = (uint32_t)id, .gap_s = (float)(gap_ns / 1e9)};
    if (metrics->num_itl_records < metrics->itl_records_capacity) { /* no call per token */
        metrics->itl_records[metrics->num_itl_records++] = record;
        return;
    }
    if (metrics->itl_records == NULL) {
        /* All the room the list may take, at once: address space only
         * until written (a large block is mapped, not taken from the
         * heap), where doubling copied the list and touched twice its
         * pages. */
        metrics->itl_records = kvio_large_alloc((size_t)metrics->itl_records_max *
                                                sizeof(record));
        if (metrics->itl_records != NULL)
            metrics->itl_records_capacity = metrics->itl_records_max;
    }
    append_itls(metrics, &record, 1);
}

void kvio_engine_metrics_merge(kvio_engine_metrics_t *dst, const kvio_engine_metrics_t *src)
{
    kvio_hist_merge(dst->ttft, src->ttft);
    kvio_hist_merge(dst->tpot, src->tpot);
    kvio_hist_merge(dst->itl, src->itl);
    kvio_hist_merge(dst->e2el, src->e2el);
    kvio_hist_merge(dst->queue, src->queue);
    dst->requests += src->requests;
    dst->measured_requests += src->measured_requests;
    dst->good_requests += src->good_requests;
    dst->ttft_met += src->ttft_met;
    dst->tpot_met += src->tpot_met;
    dst->slo = dst->slo || src->slo;
    dst->input_tokens += src->input_tokens;
    dst->output_tokens += src->output_tokens;
    dst->prefix_queries += src->prefix_queries;
    dst->prefix_hits += src->prefix_hits;
    dst->resumed_prefix_queries += src->resumed_prefix_queries;
    dst->resumed_prefix_hits += src->resumed_prefix_hits;
    dst->preemptions += src->preemptions;
    dst->mispredict_preemptions += src->mispredict_preemptions;
    dst->recomputed_tokens += src->recomputed_tokens;
    dst->swapped_bytes += src->swapped_bytes;
    dst->tier_hit_tokens += src->tier_hit_tokens;
    dst->spec_draft_tokens += src->spec_draft_tokens;
    dst->spec_accepted_tokens += src->spec_accepted_tokens;
    dst->kv_wait_requests += src->kv_wait_requests;
    dst->prefetch_stopped += src->prefetch_stopped;
    dst->prefetch_left_tokens += src->prefetch_left_tokens;
    dst->kv_wait_ns += src->kv_wait_ns;
    if (src->kv_wait_max_ns > dst->kv_wait_max_ns)
        dst->kv_wait_max_ns = src->kv_wait_max_ns;
    dst->swap_verify_failures += src->swap_verify_failures;
    dst->swap_space_exhausted += src->swap_space_exhausted;
    dst->swap_real_ns += src->swap_real_ns;
    dst->swap_modelled_ns += src->swap_modelled_ns;
    dst->iterations += src->iterations;
    dst->engines += src->engines;
    dst->busy_ns += src->busy_ns;
    dst->io_stall_ns += src->io_stall_ns;
    dst->swap_stall_ns += src->swap_stall_ns;
    dst->tier_stall_ns += src->tier_stall_ns;
    dst->measured_busy_ns += src->measured_busy_ns;
    dst->versions_activated += src->versions_activated;
    dst->stale_hit_tokens += src->stale_hit_tokens;
    dst->cache_flushed_blocks += src->cache_flushed_blocks;
    dst->resets += src->resets;
    dst->resets_pending += src->resets_pending;
    dst->reset_delay_ns += src->reset_delay_ns;
    dst->reset_preempted_requests += src->reset_preempted_requests;
    dst->mixed_version_tokens += src->mixed_version_tokens;
    dst->pd_reprefills += src->pd_reprefills;
    dst->pd_reprefilled_tokens += src->pd_reprefilled_tokens;
    dst->update_aborted_requests += src->update_aborted_requests;
    dst->update_recomputed_tokens += src->update_recomputed_tokens;
    dst->colocated_preemptions += src->colocated_preemptions;
    dst->aborted_requests += src->aborted_requests;
    append_itls(dst, src->itl_records, src->num_itl_records);
    dst->itl_records_dropped += src->itl_records_dropped;
    dst->usage_time_integral += src->usage_time_integral;
    if (src->max_usage > dst->max_usage)
        dst->max_usage = src->max_usage;
    if (src->first_arrival_ns < dst->first_arrival_ns)
        dst->first_arrival_ns = src->first_arrival_ns;
    if (src->last_arrival_ns > dst->last_arrival_ns)
        dst->last_arrival_ns = src->last_arrival_ns;
    dst->arrivals += src->arrivals;
    dst->measured_arrivals += src->measured_arrivals;
    if (src->last_measured_arrival_ns > dst->last_measured_arrival_ns)
        dst->last_measured_arrival_ns = src->last_measured_arrival_ns;
    if (src->last_finish_ns > dst->last_finish_ns)
        dst->last_finish_ns = src->last_finish_ns;
    if (src->measure_start_ns < dst->measure_start_ns)
        dst->measure_start_ns = src->measure_start_ns;
    if (src->measure_end_ns > dst->measure_end_ns)
        dst->measure_end_ns = src->measure_end_ns;
}

kvio_status_t kvio_engine_metrics_pack(const kvio_engine_metrics_t *metrics, void **blob_p,
                                       size_t *length_p)
{
    const kvio_hist_t *hists[] = {metrics->ttft, metrics->tpot, metrics->itl, metrics->e2el,
                                  metrics->queue};
    size_t records = (size_t)metrics->num_itl_records * sizeof(*metrics->itl_records);
    size_t length = sizeof(*metrics) + records;
    for (size_t i = 0; i < 5; i++)
        length += kvio_hist_packed_size(hists[i]);
    unsigned char *blob = malloc(length);
    if (blob == NULL)
        return KVIO_ERR_NOMEM;
    /* The scalars travel as the struct itself (ranks share an architecture);
     * the histogram pointers in it are meaningless on arrival. */
    memcpy(blob, metrics, sizeof(*metrics));
    size_t offset = sizeof(*metrics);
    for (size_t i = 0; i < 5; i++)
        offset += kvio_hist_pack(hists[i], blob + offset);
    if (records > 0)
        memcpy(blob + offset, metrics->itl_records, records);
    offset += records;
    *blob_p = blob;
    *length_p = offset;
    return KVIO_OK;
}

kvio_status_t kvio_engine_metrics_unpack_merge(kvio_engine_metrics_t *dst, const void *blob,
                                               size_t length, size_t *used_p)
{
    if (length < sizeof(kvio_engine_metrics_t))
        return KVIO_ERR_PARSE;
    kvio_engine_metrics_t part;
    kvio_status_t status = kvio_engine_metrics_init(&part);
    if (status != KVIO_OK)
        return status;
    kvio_hist_t *hists[] = {part.ttft, part.tpot, part.itl, part.e2el, part.queue};
    memcpy(&part, blob, sizeof(part));
    part.ttft = hists[0];
    part.tpot = hists[1];
    part.itl = hists[2];
    part.e2el = hists[3];
    part.queue = hists[4];
    uint64_t num_records = part.num_itl_records;
    part.itl_records = NULL;
    part.num_itl_records = part.itl_records_capacity = 0;
    size_t offset = sizeof(part);
    for (size_t i = 0; i < 5 && status == KVIO_OK; i++) {
        size_t used = 0;
        status = kvio_hist_unpack_merge(hists[i], (const unsigned char *)blob + offset,
                                        length - offset, &used);
        offset += used;
    }
    if (status == KVIO_OK && num_records > (length - offset) / sizeof(kvio_itl_record_t))
        status = KVIO_ERR_PARSE;
    if (status == KVIO_OK) {
        /* Copied out: the blob need not be aligned. */
        size_t bytes = (size_t)num_records * sizeof(kvio_itl_record_t);
        part.itl_records = num_records > 0 ? malloc(bytes) : NULL;
        if (num_records > 0 && part.itl_records == NULL) {
            status = KVIO_ERR_NOMEM;
        } else if (num_records > 0) {
            memcpy(part.itl_records, (const unsigned char *)blob + offset, bytes);
            part.num_itl_records = part.itl_records_capacity = num_records;
        }
        offset += bytes;
    }
    if (status == KVIO_OK) {
        kvio_engine_metrics_merge(dst, &part);
        *used_p = offset;
    }
    kvio_engine_metrics_fini(&part);
    return status;
}

/* ---------- the block store's hooks ---------- */

/* A block became full: written through to the tiers, or with chunks the
 * chunk it ends (its request's chunk_blocks blocks up to it, one object
 * under its hash). */
static void on_cached(void *context, const uint32_t *blocks, size_t index, kvio_hash_t hash)
{
    kvio_engine_t *engine = context;
    uint32_t chunk = engine->chunk_blocks;
    /* A block filled by the step being allocated is cached before the
     * allocation returns: it is its request's (owned) before its bytes are
     * read, not its previous owner's (a generated pool's fresh block has
     * none). Each block once, as it is cached: a chunk's earlier blocks
     * were owned when they were. */
    if (engine->allocating != NULL)
        kvio_block_store_own(engine->store, blocks, index, index + 1,
                             engine->allocating->spec.id);
    if ((index + 1) % chunk == 0)
        kvio_block_store_cache(engine->store, blocks + index + 1 - chunk, hash,
                               KVIO_TIER_WRITE_THROUGH, &engine->current.tier_ns);
    if (engine->observer.on_cache != NULL)
        engine->observer.on_cache(engine->observer.context, hash, true);
}

static void on_evict(void *context, uint32_t block, kvio_hash_t hash)
{
    kvio_engine_t *engine = context;
    kvio_block_store_cache(engine->store, &block, hash, KVIO_TIER_WRITE_BACK,
                           &engine->current.tier_ns);
    if (engine->observer.on_cache != NULL)
        engine->observer.on_cache(engine->observer.context, hash, false);
}

/* kvio_kvcache_allocate for req (with ahead > 0, kvio_kvcache_allocate_ahead:
 * slots for a speculative step's drafts and lookahead; pool_hits_taken_p
 * then stays as it is), whose blocks its step fills are owned as the pool
 * caches them (on_cached), before any is saved: the one place that says
 * which request is allocating. */
static kvio_status_t allocate_owned(kvio_engine_t *engine, const engine_req_t *req,
                                    size_t tokens, size_t ahead, size_t *pool_hits_taken_p)
{
    engine->allocating = req;
    kvio_status_t status =
        ahead > 0 ? kvio_kvcache_allocate_ahead(engine->cache, req->kv, tokens, ahead)
                  : kvio_kvcache_allocate(engine->cache, req->kv, tokens, pool_hits_taken_p);
    engine->allocating = NULL;
    return status;
}

/* Request id owns the request's blocks from index first on. */
static void own_blocks(kvio_engine_t *engine, const kvio_kvreq_t *kv, size_t first, uint64_t id)
{
    const uint32_t *ids;
    size_t count;
    kvio_kvreq_blocks(kv, &ids, &count);
    kvio_block_store_own(engine->store, ids, first, count, id);
}

/* Tells the pool of the decode tokens generated since it last heard of the
 * request: a decode step that fills no block only counts its token here
 * (kvio_engine_complete), so that the pool's side of a running request is
 * touched once per block, not once per token. Called before anything that
 * reads or changes the pool's view of the request. */
static void kv_sync(engine_req_t *req)
{
    if (req->unappended == 0)
        return;
    /* Tokens alone: cannot fail. */
    kvio_kvreq_append_hashes(req->kv, req->unappended, NULL, 0);
    req->unappended = 0;
}

/* The pool now holds count blocks for req (kept in the running total). */
static void set_held(kvio_engine_t *engine, engine_req_t *req, uint32_t count)
{
    if (req->state == REQ_RUNNING)
        engine->running_blocks = engine->running_blocks - req->held_blocks + count;
    req->held_blocks = count;
}

/* Frees the request's blocks; the pool's view keeps its tokens (a
 * preempted or aborted request is looked up again with them). */
static void kv_freed(kvio_engine_t *engine, engine_req_t *req)
{
    kv_sync(req);
    kvio_kvcache_free(engine->cache, req->kv);
    set_held(engine, req, 0);
}

/* ---------- lifetime ---------- */

kvio_status_t kvio_engine_create(const kvio_engine_params_t *params, kvio_engine_t **engine_p,
                                 char *error_p, size_t error_len)
{
    if (params->num_blocks < 1 || params->block_size < 1) {
        snprintf(error_p, error_len, "serve.kvcache: the KV cache holds no block");
        return KVIO_ERR_CONFIG;
    }
    kvio_engine_t *engine = calloc(1, sizeof(*engine));
    if (engine == NULL)
        return KVIO_ERR_NOMEM;
    engine->config = *params->config;
    if (engine->config.max_num_seqs == 0)
        engine->config.max_num_seqs = params->batch_defaults.max_num_seqs;
    if (engine->config.max_num_batched_tokens == 0)
        engine->config.max_num_batched_tokens = params->batch_defaults.max_num_batched_tokens;
    if (engine->config.max_num_seqs <= 0 || engine->config.max_num_batched_tokens <= 0) {
        snprintf(error_p, error_len, "serve rank %u: max_num_seqs %lld, max_num_batched_tokens "
                 "%lld: both must be at least 1", params->rank,
                 (long long)engine->config.max_num_seqs,
                 (long long)engine->config.max_num_batched_tokens);
        free(engine);
        return KVIO_ERR_CONFIG;
    }
    engine->cost = params->cost;
    engine->block_size = params->block_size;
    engine->num_blocks = params->num_blocks;
    engine->watermark_blocks = (uint32_t)(engine->config.watermark * (double)params->num_blocks);
    engine->kv_bytes_per_token = params->kv_bytes_per_token;
    engine->host_bandwidth = params->host_bandwidth;
    engine->slo = params->slo;
    engine->rank = params->rank;
    engine->observer = params->observer;
    engine->config_prefix_caching = params->prefix_caching;
    engine->update_cache = params->update_cache;
    engine->update_reset = params->update_reset;
    engine->in_flight = params->in_flight;
    engine->pd_consistent = params->pd_consistent;
    kvio_status_t status = kvio_engine_metrics_init(&engine->metrics);
    engine->metrics.slo = params->slo.ttft_ns > 0 || params->slo.tpot_ns > 0;
    if (status != KVIO_OK)
        goto fail;
    engine->metrics.engines = 1;
    engine->metrics.itl_records_max = params->itl_records_max;
    engine->chunk_blocks = params->chunk_blocks > 1 ? params->chunk_blocks : 1;
    kvio_block_store_params_t store = {
        .rank = params->rank, .num_blocks = params->num_blocks, .memory = params->kv_memory,
        .generated = params->kv_generated,
        .device = params->kv_device, .block_bytes = params->block_bytes,
        .swap_space = params->swap_space, .swap_blocks = params->swap_space_blocks,
        .verify_swaps = params->verify_swaps, .data = params->data, .seed = params->seed,
        .tiers = params->tiers, .num_tiers = params->num_tiers,
        .async_tiers = params->async_tiers,
        .waterfall = params->waterfall, .chunk_blocks = engine->chunk_blocks,
        .skip_saves_when_full = params->skip_saves_when_full,
        .load_only_tiers = params->load_only_tiers};
    engine->async_tiers = params->async_tiers;
    status = kvio_block_store_create(&store, &engine->store, error_p, error_len);
    if (status != KVIO_OK)
        goto fail;
    kvio_kvcache_config_t cache_config = {
        .num_blocks = params->num_blocks + 1, /* plus the null block */
        .block_size = params->block_size,
        .enable_prefix_caching = params->prefix_caching,
        .free_order = (kvio_free_order_t)params->free_order,
        .index = (kvio_kvcache_index_t)params->index,
        .eviction = params->eviction,
        .on_cached = params->num_tiers > 0 || params->observer.on_cache ? on_cached : NULL,
        .on_evict = params->num_tiers > 0 || params->observer.on_cache ? on_evict : NULL,
        .hook_context = engine,
        .window_tokens = params->window_tokens,
    };
    engine->hybrid = params->window_tokens > 0;
    engine->prefetch = params->prefetch;
    engine->prefetch_base_ns = params->prefetch_timeout_base_ns;
    engine->prefetch_per_1k_ns = params->prefetch_timeout_per_1k_ns;
    engine->prefetch_max_ns = params->prefetch_timeout_max_ns;
    status = kvio_kvcache_create(&cache_config, &engine->cache);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "serve.kvcache: %s (eviction '%s', %u blocks)",
                 kvio_strerror(status), params->eviction ? params->eviction : "lru",
                 params->num_blocks);
        goto fail;
    }
    kvio_rng_seed(&engine->spec_rng, params->seed, params->rank, "spec_decode");
    status = kvio_sched_create(params->sched, params->seed, &engine->sched);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "serve.scheduler: %s", kvio_strerror(status));
        goto fail;
    }
    *engine_p = engine;
    return KVIO_OK;
fail:
    kvio_engine_destroy(engine);
    return status;
}

static void req_release_source(engine_req_t *req)
{
    if (req->source.fill != NULL && req->source.release != NULL)
        req->source.release(req->source.context);
    req->source = (kvio_engine_hash_source_t){0};
}

static void req_destroy(engine_req_t *req)
{
    if (req == NULL)
        return;
    req_release_source(req);
    kvio_kvreq_destroy(req->kv);
    free(req->hashes);
    kvio_block_store_swap_forget(&req->swap);
    free(req);
}

/* A zeroed request, on a finished one's struct when there is one. */
static engine_req_t *req_alloc(kvio_engine_t *engine)
{
    engine_req_t *req = engine->spare_requests;
    if (req == NULL)
        return calloc(1, sizeof(*req));
    engine->spare_requests = req->next_spare;
    engine->num_spare_requests--;
    memset(req, 0, sizeof(*req));
    return req;
}

/* A request the engine is done with (its blocks freed): its buffers and
 * struct are kept for the next requests, up to a bound. */
static void req_recycle(kvio_engine_t *engine, engine_req_t *req)
{
    req_release_source(req);
    kvio_block_store_swap_forget(&req->swap);
    if (req->kv != NULL && engine->num_spare_buffers < MAX_SPARE_BUFFERS) {
        engine->spare_buffers[engine->num_spare_buffers++] =
            (req_buffers_t){.hashes = req->hashes, .capacity = req->hashes_capacity,
                            .kv = req->kv};
    } else {
        kvio_kvreq_destroy(req->kv);
        free(req->hashes);
    }
    if (engine->num_spare_requests >= MAX_SPARE_REQUESTS) {
        free(req);
        return;
    }
    req->next_spare = engine->spare_requests;
    engine->spare_requests = req;
    engine->num_spare_requests++;
}

void kvio_engine_destroy(kvio_engine_t *engine)
{
    if (engine == NULL)
        return;
    kvio_kvreq_destroy(engine->reservation); /* before the pool it borrows from */
    for (size_t i = 0; i < engine->loading.count; i++)
        kvio_block_store_load_free(engine->store, engine->loading.items[i]->load);
    req_list_t *lists[] = {&engine->running, &engine->waiting, &engine->loading};
    for (size_t l = 0; l < 3; l++) {
        for (size_t i = 0; i < lists[l]->count; i++)
            req_destroy(lists[l]->items[i]);
        free(lists[l]->base);
    }
    while (engine->spare_requests != NULL) {
        engine_req_t *spare = engine->spare_requests;
        engine->spare_requests = spare->next_spare;
        free(spare);
    }
    for (size_t i = 0; i < engine->num_spare_buffers; i++) {
        kvio_kvreq_destroy(engine->spare_buffers[i].kv);
        free(engine->spare_buffers[i].hashes);
    }
    free(engine->scratch);
    free(engine->scheduled);
    kvio_sched_destroy(engine->sched);
    kvio_kvcache_destroy(engine->cache); /* its hooks write through the store */
    kvio_block_store_destroy(engine->store);
    kvio_engine_metrics_fini(&engine->metrics);
    free(engine);
}

/* ---------- requests ---------- */

static uint32_t req_num_tokens(const engine_req_t *req)
{
    return req->spec.prompt_tokens + req->sched.generated;
}

/* Hands the pool the hashes of blocks that are full within `tokens`. */
static size_t hashes_due(const engine_req_t *req, uint32_t tokens, uint32_t block_size)
{
    size_t full = tokens / block_size;
    size_t available = req->spec.num_hashes;
    return full < available ? full : available;
}

/* update.on_activate.cache: version: a version's blocks are its own. The
 * request's hashes are XORed with a salt of version (0: none); salting
 * again with the same version undoes it. The chain stays a chain: every
 * block carries the same salt. */
static void salt_hashes(const kvio_engine_t *engine, engine_req_t *req, uint64_t version)
{
    if (engine->update_cache != KVIO_UPDATE_CACHE_VERSION || version == 0 ||
        req->source.fill != NULL) /* not filled yet: salted with its tag when it is */
        return;
    uint64_t salt = XXH3_64bits(&version, sizeof(version));
    for (size_t i = 0; i < req->spec.num_hashes; i++) {
        req->hashes[i].low ^= salt;
        req->hashes[i].high ^= salt;
    }
}

/* The request will be computed on version's weights from scratch: it is
 * that version's (under versioning, so are its block hashes). */
static void mark_stale(kvio_engine_t *engine, engine_req_t *req);

static kvio_status_t retag(kvio_engine_t *engine, engine_req_t *req, uint64_t version)
{
    /* pd.version: consistent: a handed-over request that becomes the new
     * version's is prefilled again here, not given its prefill's KV. */
    if (engine->pd_consistent && req->spec.handoff.handoff_ns > 0)
        mark_stale(engine, req);
    salt_hashes(engine, req, req->spec.tag); /* undoes the old salt */
    salt_hashes(engine, req, version);
    req->spec.tag = version;
    /* The pool borrows the hashes, which the salt changed in place: it gets
     * them anew (it keeps a lookup of the old ones otherwise). */
    if (req->kv == NULL || engine->update_cache != KVIO_UPDATE_CACHE_VERSION)
        return KVIO_OK;
    kv_sync(req);
    set_held(engine, req, 0); /* the reset frees them */
    return kvio_kvreq_reset_borrowed(req->kv, req->hashes, req->hashes_given,
                                     kvio_kvreq_num_tokens(req->kv));
}

/* Gives req a hash array of count and a pool request, a finished
 * request's when one is kept. */
static kvio_status_t req_take_buffers(kvio_engine_t *engine, engine_req_t *req, size_t count)
{
    if (req->kv == NULL && engine->num_spare_buffers > 0) {
        /* The smallest that holds count, else the smallest of all (its
         * array is allocated anew, the larger ones are kept): requests'
         * sizes spread over two orders of magnitude in a trace. */
        size_t best = 0;
        for (size_t i = 1; i < engine->num_spare_buffers; i++) {
            size_t capacity = engine->spare_buffers[i].capacity;
            size_t best_capacity = engine->spare_buffers[best].capacity;
            bool fits = capacity >= count, best_fits = best_capacity >= count;
            if (fits ? !best_fits || capacity < best_capacity
                     : !best_fits && capacity < best_capacity)
                best = i;
        }
        req_buffers_t spare = engine->spare_buffers[best];
        engine->spare_buffers[best] = engine->spare_buffers[--engine->num_spare_buffers];
        req->hashes = spare.hashes;
        req->hashes_capacity = spare.capacity;
        req->kv = spare.kv;
    }
    if (count > req->hashes_capacity) {
        free(req->hashes); /* its contents are not needed */
        req->hashes = malloc(count * sizeof(kvio_hash_t));
        req->hashes_capacity = req->hashes != NULL ? count : 0;
        if (req->hashes == NULL)
            return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

/* Gives req its hashes, copied from given or filled by its source, salted
 * with its tag, and the pool's view of its prompt. */
static kvio_status_t req_set_hashes(kvio_engine_t *engine, engine_req_t *req,
                                    const kvio_hash_t *given)
{
    size_t count = req->spec.num_hashes;
    kvio_status_t status = req_take_buffers(engine, req, count);
    if (status != KVIO_OK)
        return status;
    if (req->source.fill != NULL) {
        status = req->source.fill(req->source.context, req->hashes, count);
        if (status != KVIO_OK)
            return status;
        req_release_source(req);
    } else if (count > 0) {
        memcpy(req->hashes, given, count * sizeof(kvio_hash_t));
    }
    salt_hashes(engine, req, req->spec.tag);
    /* The pool reads the request's own array (kept until the pool's view of
     * it is reset or destroyed), so the hashes are copied once, not twice. */
    set_held(engine, req, 0);
    req->unappended = 0;
    status = req->kv != NULL
                 ? kvio_kvreq_reset_borrowed(req->kv, req->hashes, req->hashes_given,
                                             req->spec.prompt_tokens)
                 : kvio_kvreq_create_borrowed(engine->cache, req->hashes, req->hashes_given,
                                              req->spec.prompt_tokens, &req->kv);
    if (status != KVIO_OK)
        return status;
    req->spec.hashes = req->hashes;
    req->sched.hashes = req->hashes;
    req->sched.num_hashes = req->hashes_given;
    return KVIO_OK;
}

kvio_status_t kvio_engine_add(kvio_engine_t *engine, const kvio_engine_request_t *request)
{
    bool deferred = request->hash_source.fill != NULL;
    kvio_status_t status = KVIO_OK;
    engine_req_t *req = NULL;
    if (request->prompt_tokens == 0 || (deferred && request->hashes != NULL))
        status = KVIO_ERR_INVALID;
    else if ((req = req_alloc(engine)) == NULL)
        status = KVIO_ERR_NOMEM;
    if (status != KVIO_OK) {
        if (deferred && request->hash_source.release != NULL)
            request->hash_source.release(request->hash_source.context);
        return status;
    }
    req->spec = *request;
    req->spec.hashes = NULL;
    req->source = request->hash_source;
    req->target_output = request->output_tokens;
    if (request->max_tokens > 0 && req->target_output > request->max_tokens)
        req->target_output = request->max_tokens;
    if (req->target_output == 0)
        req->target_output = 1;
    req->hashes_given = hashes_due(req, request->prompt_tokens, engine->block_size);
    req->sched = (kvio_sched_request_t){
        .id = request->id,
        .arrival_ns = request->arrival_ns,
        .priority = request->priority,
        .prompt_tokens = request->prompt_tokens,
        .output_tokens = req->target_output,
        .max_tokens = request->max_tokens ? request->max_tokens : req->target_output,
    };
    /* A deferred request gets its hashes when it is first looked up. */
    if (!deferred)
        status = req_set_hashes(engine, req, request->hashes);
    if (status != KVIO_OK) {
        req_destroy(req);
        return status;
    }
    kvio_sched_predict(engine->sched, &req->sched);
    req->state = REQ_WAITING;
    status = list_push(&engine->waiting, req);
    if (status != KVIO_OK) {
        req_destroy(req);
        return status;
    }
    if (request->arrival_ns < engine->metrics.first_arrival_ns)
        engine->metrics.first_arrival_ns = request->arrival_ns;
    if (request->arrival_ns > engine->metrics.last_arrival_ns)
        engine->metrics.last_arrival_ns = request->arrival_ns;
    engine->metrics.arrivals++;
    if (request->measured && request->arrival_ns < engine->metrics.measure_start_ns)
        engine->metrics.measure_start_ns = request->arrival_ns;
    if (request->measured) {
        engine->metrics.measured_arrivals++;
        if (request->arrival_ns > engine->metrics.last_measured_arrival_ns)
            engine->metrics.last_measured_arrival_ns = request->arrival_ns;
    }
    return KVIO_OK;
}

bool kvio_engine_has_work(const kvio_engine_t *engine)
{
    return engine->running.count > 0 || engine->waiting.count > 0 || engine->loading.count > 0;
}

void kvio_engine_with_tiers(kvio_engine_t *engine, void (*fn)(void *context), void *context)
{
    kvio_block_store_with_tiers(engine->store, fn, context);
}

void kvio_engine_materialize(kvio_engine_t *engine, const uint32_t *blocks, size_t count)
{
    kvio_block_store_materialize(engine->store, blocks, count);
}

int64_t kvio_engine_kv_ready_ns(const kvio_engine_t *engine)
{
    int64_t first = INT64_MAX;
    for (size_t i = 0; i < engine->loading.count; i++) {
        int64_t end = kvio_block_store_load_end_ns(engine->loading.items[i]->load);
        if (end < 0)
            return -1;
        if (engine->prefetch != KVIO_PREFETCH_WAIT_COMPLETE &&
            engine->loading.items[i]->prefetch_deadline_ns < end)
            end = engine->loading.items[i]->prefetch_deadline_ns;
        if (end < first)
            first = end;
    }
    return first;
}

void kvio_engine_settle(kvio_engine_t *engine)
{
    kvio_block_store_settle(engine->store);
}

void kvio_engine_cut_tiers(kvio_engine_t *engine)
{
    kvio_block_store_cut(engine->store);
}

void kvio_engine_tiers_until(kvio_engine_t *engine, uint64_t until_ns)
{
    kvio_block_store_until(engine->store, until_ns);
}

/* ---------- scheduling ---------- */

/* Cached prefix of a waiting request, looked up again only when the
 * index changed since the last lookup (the result is the same otherwise).
 * A deferred request gets its hashes here. */
static kvio_status_t lookup_hits(kvio_engine_t *engine, engine_req_t *req, uint32_t *hits_p)
{
    if (req->source.fill != NULL) {
        kvio_status_t status = req_set_hashes(engine, req, NULL);
        if (status != KVIO_OK)
            return status;
    }
    /* The pool keeps the lookup while its index is unchanged. */
    *hits_p = (uint32_t)kvio_kvcache_lookup(engine->cache, req->kv);
    return KVIO_OK;
}

/* For a policy that projects KV use: each running request's blocks and
 * those of them another request holds too (a shared prefix, which the pool
 * holds once). */
static void fill_held(const kvio_engine_t *engine)
{
    for (size_t i = 0; i < engine->running.count; i++) {
        engine_req_t *req = engine->running.items[i];
        const uint32_t *ids;
        size_t num_ids;
        kvio_kvreq_blocks(req->kv, &ids, &num_ids);
        uint32_t shared = 0;
        for (size_t b = 0; b < num_ids; b++)
            shared += ids[b] != 0 && kvio_kvcache_block_refcount(engine->cache, ids[b]) > 1;
        req->sched.held_blocks = req->held_blocks;
        req->sched.shared_blocks = shared;
    }
}

static void fill_view(const kvio_engine_t *engine, kvio_sched_view_t *view, int64_t now_ns)
{
    view->running = (kvio_sched_request_t *const *)engine->running.items;
    view->num_running = engine->running.count;
    view->block_size = engine->block_size;
    view->capacity_blocks = engine->num_blocks;
    view->free_blocks = kvio_kvcache_num_free_blocks(engine->cache);
    view->used_blocks = view->capacity_blocks > view->free_blocks
                            ? view->capacity_blocks - view->free_blocks
                            : 0;
    view->now_ns = now_ns;
    if (kvio_sched_caps(engine->sched) & KVIO_SCHED_CAP_PROJECTS)
        fill_held(engine);
}

static uint64_t req_block_bytes(const kvio_engine_t *engine, const engine_req_t *req)
{
    const uint32_t *ids;
    size_t num_ids;
    kvio_kvreq_blocks(req->kv, &ids, &num_ids);
    return (uint64_t)num_ids * engine->block_size * engine->kv_bytes_per_token;
}

/* Preempts running[index]: recompute frees its KV and restarts it; swap
 * moves its KV to host memory (charged on the host link) and keeps it. A
 * victim already scheduled in this iteration gives its tokens back into
 * *refund_p (vLLM v1 does the same for the priority policy). */
static kvio_status_t preempt(kvio_engine_t *engine, size_t index, uint32_t *refund_p)
{
    engine_req_t *victim = engine->running.items[index];
    list_remove_at(&engine->running, index);
    *refund_p = 0;
    for (size_t i = 0; victim->scheduled > 0 && i < engine->num_scratch; i++) {
        if (engine->scratch[i] != victim)
            continue;
        *refund_p = victim->scheduled;
        memmove(engine->scratch + i, engine->scratch + i + 1,
                (engine->num_scratch - i - 1) * sizeof(*engine->scratch));
        memmove(engine->scheduled + i, engine->scheduled + i + 1,
                (engine->num_scratch - i - 1) * sizeof(*engine->scheduled));
        engine->num_scratch--;
        break;
    }
    const uint32_t *victim_ids;
    size_t victim_blocks;
    kvio_kvreq_blocks(victim->kv, &victim_ids, &victim_blocks);
    /* With real memory, a swap needs room in the swap space; without it the
     * victim is recomputed instead (as vLLM does when swap space runs out). */
    bool has_bytes = kvio_block_store_has_bytes(engine->store);
    bool swap = engine->config.preemption == KVIO_PREEMPT_SWAP &&
                (!has_bytes || victim_blocks <= kvio_block_store_swap_room(engine->store));
    if (engine->config.preemption == KVIO_PREEMPT_SWAP && !swap)
        engine->metrics.swap_space_exhausted++;
    if (swap) {
        if (has_bytes) {
            int64_t real_ns = 0;
            kvio_status_t status = kvio_block_store_swap_out(engine->store, victim_ids,
                                                             victim_blocks, &victim->swap,
                                                             &real_ns);
            engine->current.swap_real_ns += real_ns;
            engine->metrics.swap_real_ns += real_ns;
            if (status != KVIO_OK) {
                /* The run fails; the victim, not swapped, stays owned: by the
                 * waiting queue, or failing that by the running one, which
                 * has room at its end (the victim just left it). */
                if (list_push_front(&engine->waiting, victim) != KVIO_OK)
                    engine->running.items[engine->running.count++] = victim;
                return status;
            }
        }
        uint64_t bytes = req_block_bytes(engine, victim);
        engine->current.swap_bytes += bytes;
        engine->metrics.swapped_bytes += bytes;
        victim->swapped = true;
    } else {
        victim->lost_tokens = victim->computed;
        victim->computed = 0;
    }
    kv_freed(engine, victim);
    victim->preemptions++;
    if (kvio_sched_caps(engine->sched) & KVIO_SCHED_CAP_PROJECTS) {
        /* The projection that admitted this batch assumed predicted outputs:
         * a request running past its prediction made it wrong. */
        bool outlived = victim->sched.generated >= victim->sched.predicted_output;
        for (size_t i = 0; !outlived && i < engine->running.count; i++) {
            const kvio_sched_request_t *running = &engine->running.items[i]->sched;
            outlived = running->generated >= running->predicted_output;
        }
        engine->metrics.mispredict_preemptions += outlived && victim->spec.measured;
    }
    victim->scheduled = 0;
    victim->state = REQ_WAITING;
    engine->metrics.preemptions += victim->spec.measured; /* warmup's are not counted */
    engine->current.num_preempted++;
    return list_push_front(&engine->waiting, victim);
}

static kvio_status_t scratch_push(kvio_engine_t *engine, engine_req_t *req, uint32_t tokens)
{
    if (engine->num_scratch == engine->scratch_capacity) {
        size_t capacity = engine->scratch_capacity ? 2 * engine->scratch_capacity : 64;
        engine_req_t **scratch = realloc(engine->scratch, capacity * sizeof(*scratch));
        if (scratch == NULL)
            return KVIO_ERR_NOMEM;
        engine->scratch = scratch;
        kvio_engine_scheduled_t *scheduled =
            realloc(engine->scheduled, capacity * sizeof(*scheduled));
        if (scheduled == NULL)
            return KVIO_ERR_NOMEM;
        engine->scheduled = scheduled;
        engine->scratch_capacity = capacity;
    }
    req->scheduled = tokens;
    engine->scheduled[engine->num_scratch] = (kvio_engine_scheduled_t){req->spec.id, tokens};
    engine->scratch[engine->num_scratch++] = req;
    return KVIO_OK;
}

static uint32_t cap_new_tokens(const kvio_engine_t *engine, uint32_t wanted, uint32_t budget)
{
    int64_t threshold = engine->config.long_prefill_token_threshold;
    if (threshold > 0 && (uint32_t)threshold < wanted)
        wanted = (uint32_t)threshold;
    return wanted < budget ? wanted : budget;
}

/* Draft tokens a running request verifies this step: with speculative
 * decoding on, a decode step's (never past its output's end). */
static uint32_t spec_drafts(const kvio_engine_t *engine, const engine_req_t *req)
{
    uint32_t k = (uint32_t)engine->config.num_lookahead_tokens;
    if (k == 0 || req->sched.generated == 0 || req->computed + 1 != req_num_tokens(req))
        return 0;
    uint32_t left = req->target_output - req->sched.generated; /* tokens still to come */
    return left > 1 ? (left - 1 < k ? left - 1 : k) : 0;
}

/* Running requests first, in order (vLLM v1). */
static kvio_status_t schedule_running(kvio_engine_t *engine, uint32_t *budget, int64_t now_ns)
{
    size_t index = 0;
    while (index < engine->running.count && *budget > 0) {
        engine_req_t *req = engine->running.items[index];
        uint32_t drafts = spec_drafts(engine, req);
        uint32_t wanted = req_num_tokens(req) - req->computed + drafts;
        uint32_t new_tokens = cap_new_tokens(engine, wanted, *budget);
        if (new_tokens == 0) {
            index++;
            continue;
        }
        if (drafts > 0 && new_tokens < wanted)
            drafts = new_tokens - 1; /* the budget holds fewer drafts */
        req->drafts = drafts;
        bool can_schedule = true;
        /* Fast path: a decode step inside the last block, partly computed,
         * needs no new block and fills no block to hash, so the pool has
         * nothing to do (compared without a division: this runs for every
         * running request at every step). A speculative step goes to the
         * pool: its drafts and lookahead may need blocks. */
        uint32_t covered = req->computed + new_tokens;
        uint32_t held = req->held_blocks * engine->block_size;
        if (engine->config.num_lookahead_tokens == 0 && !engine->hybrid && covered < held &&
            req->computed + engine->block_size > held) {
            kvio_status_t status = scratch_push(engine, req, new_tokens);
            if (status != KVIO_OK)
                return status;
            *budget -= new_tokens;
            index++;
            continue;
        }
        kv_sync(req);
        kvio_kvcache_computed(engine->cache, req->kv, req->computed);
        for (;;) {
            size_t had_blocks = req->held_blocks;
            /* Drafts and the lookahead past them get slots, not hashes: only
             * verified tokens are ever cached. */
            uint32_t ahead = drafts > 0 ? drafts + (uint32_t)engine->config.num_lookahead_tokens
                                        : 0;
            kvio_status_t status = allocate_owned(engine, req,
                                                  req->computed + new_tokens - drafts, ahead,
                                                  NULL);
            if (status == KVIO_OK) {
                set_held(engine, req, (uint32_t)kvio_kvreq_held_blocks(req->kv));
                own_blocks(engine, req->kv,
                           kvio_block_store_has_bytes(engine->store) ? had_blocks : 0,
                           req->spec.id);
                break;
            }
            if (status != KVIO_ERR_NO_SPACE)
                return status;
            kvio_sched_view_t view;
            fill_view(engine, &view, now_ns);
            size_t victim = kvio_sched_victim(engine->sched, &view);
            engine_req_t *victim_req = engine->running.items[victim];
            uint32_t refund = 0;
            status = preempt(engine, victim, &refund);
            if (status != KVIO_OK)
                return status;
            *budget += refund;
            if (victim_req == req) {
                can_schedule = false;
                break;
            }
            if (victim < index)
                index--;
        }
        if (!can_schedule)
            break;
        kvio_status_t status = scratch_push(engine, req, new_tokens);
        if (status != KVIO_OK)
            return status;
        *budget -= new_tokens;
        index++;
    }
    return KVIO_OK;
}

/* A request's admission in the prefix-cache counters (tokens): first
 * admissions and resumed (preempted) requests are kept apart; warmup
 * requests (not measured) count in none of them. hits: the pool's cached
 * tokens; computed: the tokens whose KV it has once admitted. */
static void count_admission(kvio_engine_t *engine, engine_req_t *req, uint32_t hits,
                            uint32_t computed, uint32_t num_tokens, int64_t now_ns)
{
    bool measured = req->spec.measured;
    if (!req->admitted_once) {
        req->admitted_once = true;
        req->queued_ns = now_ns > req->spec.arrival_ns ? now_ns - req->spec.arrival_ns : 0;
        if (measured)
            kvio_hist_record(engine->metrics.queue, (uint64_t)req->queued_ns);
        req->cached_tokens = hits;
        engine->metrics.prefix_queries += measured ? req->spec.prompt_tokens : 0;
        engine->metrics.prefix_hits += measured ? hits : 0;
    } else if (req->swapped) {
        uint64_t bytes = (uint64_t)(computed + engine->block_size - 1) / engine->block_size *
                         engine->block_size * engine->kv_bytes_per_token;
        engine->current.swap_bytes += bytes;
        engine->metrics.swapped_bytes += bytes;
    } else {
        if (req->lost_tokens > hits)
            req->recomputed_tokens += req->lost_tokens - hits;
        if (measured) {
            engine->metrics.resumed_prefix_queries += num_tokens;
            engine->metrics.resumed_prefix_hits += hits;
            if (req->lost_tokens > hits)
                engine->metrics.recomputed_tokens += req->lost_tokens - hits;
        }
    }
}

/* vLLM's admission check of a waiting or preempted request that needs
 * `needed` new blocks: they, and the watermark while another request
 * runs, must be free, and with scheduler_reserve_full_isl the whole
 * sequence must fit (its evictable hits count as taken). */
static kvio_status_t admission_fits(kvio_engine_t *engine, engine_req_t *req, uint32_t needed,
                                    bool *fits_p)
{
    uint32_t free_blocks = kvio_kvcache_num_free_blocks(engine->cache);
    uint32_t watermark = engine->running.count > 0 ? engine->watermark_blocks : 0;
    *fits_p = (uint64_t)needed + watermark <= free_blocks;
    if (!*fits_p || !engine->config.scheduler_reserve_full_isl)
        return KVIO_OK;
    size_t whole = 0;
    kvio_status_t status = kvio_kvcache_blocks_to_allocate(engine->cache, req->kv,
                                                           req_num_tokens(req), &whole);
    *fits_p = status == KVIO_OK && (uint64_t)whole + watermark <= free_blocks;
    return status;
}

/* When a load of blocks begun at now_ns stops being waited for: at once
 * (best_effort: the request runs with what has come when it can run), or
 * after SGLang's linear timeout; wait_complete never. */
static int64_t prefetch_deadline(const kvio_engine_t *engine, uint32_t blocks, int64_t now_ns)
{
    if (engine->prefetch == KVIO_PREFETCH_WAIT_COMPLETE)
        return INT64_MAX;
    if (engine->prefetch == KVIO_PREFETCH_BEST_EFFORT)
        return now_ns;
    double tokens = (double)blocks * engine->block_size;
    int64_t wait_ns = engine->prefetch_base_ns +
                      (int64_t)((double)engine->prefetch_per_1k_ns * tokens / 1024.0);
    if (engine->prefetch_max_ns > 0 && wait_ns > engine->prefetch_max_ns)
        wait_ns = engine->prefetch_max_ns;
    return now_ns + wait_ns;
}

/* pd.version: consistent: a request handed over by a prefill that ran an
 * older version than this engine's is not given that prefill's KV: it is
 * prefilled again here and becomes a request of this version (counted). */
static void mark_stale(kvio_engine_t *engine, engine_req_t *req)
{
    if (req->pd_stale)
        return;
    req->pd_stale = true;
    engine->metrics.pd_reprefills++;
    engine->metrics.pd_reprefilled_tokens += req->spec.prompt_tokens > 0
                                                 ? req->spec.prompt_tokens - 1
                                                 : 0;
}

static bool stale_handoff(kvio_engine_t *engine, engine_req_t *req)
{
    if (req->pd_stale)
        return true;
    if (!engine->pd_consistent || req->spec.handoff.handoff_ns == 0 ||
        req->spec.tag >= engine->active_version)
        return false;
    mark_stale(engine, req);
    req->spec.tag = engine->active_version;
    return true;
}

/* tier_io: async. The request's blocks (the pool's hits and the tier's)
 * are reserved, the tier's begin to load, and the request waits in the
 * loading list, not at the queue's head, while the batch goes on (vLLM's
 * WAITING_FOR_REMOTE_KVS). *started_p false: they do not fit, and admission
 * stops there as for any request. */
static kvio_status_t start_tier_load(kvio_engine_t *engine, engine_req_t *req, uint32_t hits,
                                     uint32_t tier_blocks, int64_t now_ns, bool *started_p)
{
    *started_p = false;
    bool fits = false;
    kvio_status_t status = admission_fits(engine, req, tier_blocks, &fits);
    if (status != KVIO_OK || !fits)
        return status;
    size_t pool_hits_taken = 0;
    status = kvio_kvcache_allocate_unhashed(engine->cache, req->kv,
                                            hits + tier_blocks * engine->block_size,
                                            &pool_hits_taken);
    if (status == KVIO_ERR_NO_SPACE)
        return KVIO_OK;
    if (status != KVIO_OK)
        return status;
    set_held(engine, req, (uint32_t)kvio_kvreq_held_blocks(req->kv));
    own_blocks(engine, req->kv, pool_hits_taken / engine->block_size, req->spec.id);
    const uint32_t *ids;
    size_t count;
    kvio_kvreq_blocks(req->kv, &ids, &count);
    uint32_t first = hits / engine->block_size;
    const kvio_engine_handoff_t *handoff = req->spec.handoff.handoff_ns > 0 ? &req->spec.handoff
                                                                           : NULL;
    status = kvio_block_store_load_start(engine->store, req->hashes + first, ids + first, first,
                                         tier_blocks, now_ns, handoff, &req->load);
    if (status != KVIO_OK)
        return status;
    list_remove_at(&engine->waiting, 0);
    status = list_push(&engine->loading, req);
    if (status != KVIO_OK)
        return status;
    count_admission(engine, req, hits, hits, req_num_tokens(req), now_ns);
    req->computed = hits;
    req->kv_wait_start_ns = now_ns;
    req->prefetch_deadline_ns = prefetch_deadline(engine, tier_blocks, now_ns);
    *started_p = true;
    return KVIO_OK;
}

/* tier_io: async: requests whose blocks have come join the running ones,
 * in the order their loads began, while max_num_seqs allows; a load cut
 * short by a miss, or ended by the prefetch policy, leaves the rest of the
 * prefix to compute. */
static kvio_status_t collect_loaded(kvio_engine_t *engine, int64_t now_ns)
{
    size_t i = 0;
    while (i < engine->loading.count) {
        engine_req_t *req = engine->loading.items[i];
        uint32_t loaded = 0;
        if ((int64_t)engine->running.count >= engine->config.max_num_seqs) {
            i++;
            continue;
        }
        int64_t ended_ns = now_ns;
        if (kvio_block_store_load_done(engine->store, req->load, now_ns, &loaded)) {
            int64_t end = kvio_block_store_load_end_ns(req->load);
            if (end >= req->kv_wait_start_ns && end <= now_ns)
                ended_ns = end; /* simulate: the link's end, before this boundary */
            kvio_block_store_load_free(engine->store, req->load);
        } else if (engine->prefetch != KVIO_PREFETCH_WAIT_COMPLETE &&
                   now_ns >= req->prefetch_deadline_ns) {
            uint32_t wanted = kvio_block_store_load_wanted(req->load);
            kvio_block_store_load_stop(engine->store, req->load, now_ns, &loaded);
            engine->metrics.prefetch_stopped++;
            engine->metrics.prefetch_left_tokens +=
                (uint64_t)(wanted - loaded) * engine->block_size;
        } else {
            i++;
            continue;
        }
        req->load = NULL;
        uint32_t tokens = loaded * engine->block_size;
        req->computed += tokens;
        engine->metrics.tier_hit_tokens += tokens;
        engine->current.tier_loaded_tokens += tokens;
        int64_t wait_ns = now_ns - req->kv_wait_start_ns;
        req->kv_wait_ns += wait_ns;
        req->kv_transfer_ns += ended_ns - req->kv_wait_start_ns;
        req->loaded_tokens += tokens;
        if (req->spec.measured) {
            engine->metrics.kv_wait_requests++;
            engine->metrics.kv_wait_ns += wait_ns;
            if (wait_ns > engine->metrics.kv_wait_max_ns)
                engine->metrics.kv_wait_max_ns = wait_ns;
        }
        list_remove_at(&engine->loading, i);
        kvio_status_t status = list_push(&engine->running, req);
        if (status != KVIO_OK)
            return status;
        req->state = REQ_RUNNING;
        engine->running_blocks += req->held_blocks;
        req->sched.admit_seq = ++engine->admit_counter;
    }
    return KVIO_OK;
}

/* Waiting requests, in the policy's order, while nothing was preempted;
 * admission stops at the first request that does not fit. */
static kvio_status_t schedule_waiting(kvio_engine_t *engine, uint32_t *budget, int64_t now_ns)
{
    if (engine->waiting.count == 0)
        return KVIO_OK;
    kvio_sched_view_t view;
    fill_view(engine, &view, now_ns);
    if (kvio_sched_wants_hits(engine->sched, engine->waiting.count)) {
        for (size_t i = 0; i < engine->waiting.count; i++) {
            engine_req_t *req = engine->waiting.items[i];
            kvio_status_t status = lookup_hits(engine, req, &req->sched.hit_tokens);
            if (status != KVIO_OK)
                return status;
        }
    }
    kvio_sched_order(engine->sched, (kvio_sched_request_t **)engine->waiting.items,
                     engine->waiting.count, &view);
    while (engine->waiting.count > 0 && *budget > 0 &&
           (int64_t)engine->running.count < engine->config.max_num_seqs) {
        engine_req_t *req = engine->waiting.items[0];
        uint32_t num_tokens = req_num_tokens(req);
        uint32_t computed;
        uint32_t hits = 0;
        uint32_t tier_blocks = 0; /* blocks after the pool's hits found in a lower tier */
        if (req->swapped) {
            computed = req->computed;
        } else {
            kvio_status_t status = lookup_hits(engine, req, &hits);
            if (status != KVIO_OK)
                return status;
            computed = hits;
            if (stale_handoff(engine, req)) {
                /* pd.version: consistent: its KV is the old version's. */
            } else if (kvio_block_store_num_tiers(engine->store) > 0 &&
                       engine->config_prefix_caching) {
                size_t max_blocks = (num_tokens - 1) / engine->block_size;
                if (max_blocks > req->hashes_given)
                    max_blocks = req->hashes_given;
                size_t first = hits / engine->block_size;
                if (first < max_blocks)
                    tier_blocks = (uint32_t)kvio_block_store_in_tiers(
                        engine->store, req->hashes, first, max_blocks, &engine->current.tier_ns);
                computed += tier_blocks * engine->block_size;
            }
        }
        uint32_t wanted = num_tokens - computed;
        int64_t threshold = engine->config.long_prefill_token_threshold;
        if (threshold > 0 && (uint32_t)threshold < wanted)
            wanted = (uint32_t)threshold;
        if (!engine->config.chunked_prefill && wanted > *budget)
            break;
        uint32_t new_tokens = wanted < *budget ? wanted : *budget;
        fill_view(engine, &view, now_ns);
        if (kvio_sched_caps(engine->sched) & KVIO_SCHED_CAP_PROJECTS) {
            /* What its admission takes from the free queue: new blocks and
             * cached ones that sit free (hits on blocks in use cost none). */
            size_t admit_blocks = 0;
            kvio_status_t status = kvio_kvcache_blocks_to_allocate(engine->cache, req->kv,
                                                                   num_tokens, &admit_blocks);
            if (status != KVIO_OK)
                return status;
            req->sched.held_blocks = (uint32_t)admit_blocks;
            req->sched.shared_blocks = 0;
        }
        if (!kvio_sched_admit(engine->sched, &req->sched, &view))
            break;
        if (tier_blocks > 0 && engine->async_tiers) {
            bool started = false;
            kvio_status_t status = start_tier_load(engine, req, hits, tier_blocks, now_ns,
                                                   &started);
            if (status != KVIO_OK)
                return status;
            if (!started)
                break;
            continue;
        }
        /* The blocks beyond the hits must come from the free queue: when
         * even those do not fit, the allocation cannot succeed (skip it). */
        uint32_t needed = (computed + new_tokens + engine->block_size - 1) / engine->block_size -
                          computed / engine->block_size;
        kvio_status_t status = KVIO_OK;
        if (engine->hybrid) { /* both groups' blocks, the window's hits among them */
            size_t blocks = 0;
            status = kvio_kvcache_blocks_to_allocate(engine->cache, req->kv,
                                                     computed + new_tokens, &blocks);
            needed = (uint32_t)blocks;
        }
        bool fits = false;
        if (status == KVIO_OK)
            status = admission_fits(engine, req, needed, &fits);
        if (status != KVIO_OK)
            return status;
        if (!fits)
            break;
        size_t pool_hits_taken = 0;
        status = allocate_owned(engine, req, computed + new_tokens, 0, &pool_hits_taken);
        if (status == KVIO_ERR_NO_SPACE)
            break;
        if (status != KVIO_OK)
            return status;
        set_held(engine, req, (uint32_t)kvio_kvreq_held_blocks(req->kv)); /* counted when it runs */
        if (tier_blocks > 0) {
            /* Load the lower tiers' blocks into the new pool blocks; the time
             * counts in this iteration, so in the request's TTFT. */
            const uint32_t *ids;
            size_t count;
            kvio_kvreq_blocks(req->kv, &ids, &count);
            uint32_t first = hits / engine->block_size, loaded = 0;
            status = kvio_block_store_load(engine->store, req->hashes + first, ids + first, first,
                                           tier_blocks, &loaded, &engine->current.tier_ns);
            if (status != KVIO_OK)
                return status;
            computed = hits + loaded * engine->block_size;
            req->loaded_tokens += loaded * engine->block_size;
            engine->metrics.tier_hit_tokens += (uint64_t)loaded * engine->block_size;
            engine->current.tier_loaded_tokens += (uint64_t)loaded * engine->block_size;
        }
        if (req->swapped && req->swap.slots != NULL) {
            /* Copy the swapped blocks back, except those the pool still held. */
            const uint32_t *ids;
            size_t count;
            kvio_kvreq_blocks(req->kv, &ids, &count);
            size_t swapped_blocks = req->swap.blocks;
            int64_t real_ns = 0;
            status = kvio_block_store_swap_in(engine->store, &req->swap, ids, count,
                                              pool_hits_taken / engine->block_size,
                                              &engine->metrics.swap_verify_failures, &real_ns);
            if (status != KVIO_OK)
                return status;
            engine->current.swap_real_ns += real_ns;
            engine->metrics.swap_real_ns += real_ns;
            own_blocks(engine, req->kv, swapped_blocks, req->spec.id);
        } else {
            own_blocks(engine, req->kv, pool_hits_taken / engine->block_size, req->spec.id);
        }
        list_remove_at(&engine->waiting, 0);
        status = list_push(&engine->running, req);
        if (status != KVIO_OK)
            return status;
        count_admission(engine, req, hits, computed, num_tokens, now_ns);
        req->swapped = false;
        req->computed = computed;
        req->state = REQ_RUNNING;
        engine->running_blocks += req->held_blocks;
        req->sched.admit_seq = ++engine->admit_counter;
        req->drafts = 0;
        status = scratch_push(engine, req, new_tokens);
        if (status != KVIO_OK)
            return status;
        *budget -= new_tokens;
    }
    return KVIO_OK;
}

static void try_reset(kvio_engine_t *engine, int64_t now_ns);

kvio_status_t kvio_engine_schedule(kvio_engine_t *engine, int64_t now_ns,
                                   kvio_engine_iteration_t *iteration_p)
{
    memset(&engine->current, 0, sizeof(engine->current));
    engine->current.start_ns = now_ns;
    engine->num_scratch = 0;
    try_reset(engine, now_ns); /* a flush refused while blocks were in use */
    uint32_t budget = (uint32_t)engine->config.max_num_batched_tokens;
    kvio_block_store_clear_error(engine->store);
    kvio_status_t collected = collect_loaded(engine, now_ns);
    if (collected != KVIO_OK)
        return collected;
    /* A step that only preempted (the request at the head of the running
     * list gave way, itself last: vLLM breaks out then) schedules nothing;
     * vLLM's next step follows at once, and so does this one, at the same
     * instant (an empty step takes no time). Each round preempts a running
     * request or schedules one, so the rounds end. */
    uint32_t preempted_before = 0;
    kvio_status_t status;
    for (;;) {
        status = schedule_running(engine, &budget, now_ns);
        if (status != KVIO_OK || engine->num_scratch > 0 ||
            engine->current.num_preempted == preempted_before)
            break;
        preempted_before = engine->current.num_preempted;
    }
    if (status == KVIO_OK && engine->current.num_preempted == preempted_before &&
        !engine->admission_paused && !engine->admission_held)
        status = schedule_waiting(engine, &budget, now_ns);
    if (status != KVIO_OK)
        return status;

    kvio_batch_t *batch = &engine->current.batch;
    uint32_t max_drafts = 0;
    for (size_t i = 0; i < engine->num_scratch; i++) {
        engine_req_t *req = engine->scratch[i];
        if (req->spec.tag < engine->active_version)
            engine->metrics.mixed_version_tokens += req->scheduled;
        bool decode = req->sched.generated > 0 && req->scheduled == 1 + req->drafts &&
                      req->computed + 1 == req_num_tokens(req);
        if (decode && req->drafts > 0)
            kvio_batch_add_verify(batch, req->computed, req->drafts);
        else if (decode)
            kvio_batch_add_decode(batch, req->computed);
        else
            kvio_batch_add_prefill(batch, req->scheduled, req->computed);
        if (req->drafts > max_drafts)
            max_drafts = req->drafts;
    }
    kvio_cost_breakdown_t cost;
    kvio_cost_iteration(engine->cost, batch, &cost);
    /* The drafter runs once per draft position, for the whole batch. */
    cost.time_s += cost.time_s * engine->config.spec_draft_fraction * (double)max_drafts;
    /* A swap takes the longer of the real copy and the bytes over the GPU's
     * host link, so swap vs recompute stays meaningful without a GPU. */
    double swap_model_ns = engine->host_bandwidth > 0
                               ? (double)engine->current.swap_bytes / engine->host_bandwidth * 1e9
                               : 0;
    double swap_ns = swap_model_ns > (double)engine->current.swap_real_ns
                         ? swap_model_ns
                         : (double)engine->current.swap_real_ns;
    engine->metrics.swap_modelled_ns += (int64_t)swap_model_ns;
    bool did_work = engine->num_scratch > 0 || engine->current.swap_bytes > 0;
    double duration_ns = cost.time_s * 1e9 + swap_ns + (double)engine->current.tier_ns;
    /* An iteration the clock cannot hold (over ~11 days: it would overflow
     * a run's nanoseconds) or that takes no time is the cost model's doing,
     * never a cache too small: say so. */
    if (did_work && !(duration_ns >= 1 && duration_ns < ITERATION_MAX_NS)) {
        snprintf(engine->error, sizeof(engine->error),
                 "serve rank %u: the cost model gives an iteration of %u requests (%llu prefill "
                 "tokens, %llu decodes) %.6g s; it must take more than 0 and less than %.0f s "
                 "(check cost.* and gpu.*)", engine->rank, (unsigned)engine->num_scratch,
                 (unsigned long long)engine->current.batch.prefill_tokens,
                 (unsigned long long)engine->current.batch.decode_seqs,
                 duration_ns / 1e9, ITERATION_MAX_NS / 1e9);
        return KVIO_ERR_CONFIG;
    }
    engine->current.duration_ns = did_work ? (int64_t)(duration_ns + 0.5) : 0;
    if (kvio_block_store_error(engine->store) != KVIO_OK)
        return kvio_block_store_error(engine->store);
    engine->current.num_scheduled = (uint32_t)engine->num_scratch;
    if (engine->active_version > 0) {
        /* Stale hits exist only once a version has activated. */
        kvio_kvcache_metrics_t cache_metrics;
        kvio_kvcache_get_metrics(engine->cache, &cache_metrics);
        engine->metrics.stale_hit_tokens = cache_metrics.prefix_stale_hits_tokens;
    }
    engine->current.kv_usage = kvio_kvcache_usage(engine->cache);
    engine->current.running = (uint32_t)engine->running.count;
    engine->current.waiting = (uint32_t)engine->waiting.count;
    if (engine->current.duration_ns > 0) {
        engine->metrics.iterations++;
        engine->metrics.busy_ns += engine->current.duration_ns;
        engine->metrics.io_stall_ns += (int64_t)(swap_ns + (double)engine->current.tier_ns);
        engine->metrics.swap_stall_ns += (int64_t)swap_ns;
        engine->metrics.tier_stall_ns += engine->current.tier_ns;
        /* KV usage from the first measured arrival on (warmup excluded). */
        if (now_ns >= engine->metrics.measure_start_ns) {
            engine->metrics.measured_busy_ns += engine->current.duration_ns;
            engine->metrics.usage_time_integral +=
                engine->current.kv_usage * (double)engine->current.duration_ns;
            if (engine->current.kv_usage > engine->metrics.max_usage)
                engine->metrics.max_usage = engine->current.kv_usage;
        }
    }
    *iteration_p = engine->current;
    if (engine->observer.on_iteration != NULL && engine->num_scratch > 0)
        engine->observer.on_iteration(engine->observer.context, engine->rank, &engine->current);
    return KVIO_OK;
}

/* A hash a flush dropped: a router mirroring this rank forgets it. */
static void on_flushed(void *context, kvio_hash_t hash)
{
    kvio_engine_t *engine = context;
    engine->observer.on_cache(engine->observer.context, hash, false);
}

kvio_status_t kvio_engine_reserve(kvio_engine_t *engine, uint32_t blocks)
{
    uint32_t usable = engine->num_blocks;
    if (blocks > usable)
        blocks = usable;
    if (blocks == engine->reserved_blocks)
        return KVIO_OK;
    if (engine->reservation != NULL) {
        kvio_kvreq_destroy(engine->reservation); /* its blocks go back, unhashed */
        engine->reservation = NULL;
        engine->reserved_blocks = 0;
    }
    if (blocks == 0)
        return KVIO_OK;
    kvio_status_t status = kvio_kvreq_create_hashes(engine->cache, NULL, 0,
                                                    (size_t)blocks * engine->block_size,
                                                    &engine->reservation);
    if (status != KVIO_OK)
        return status;
    /* Running requests give way, the latest admitted first, until the
     * blocks are free (cached free blocks are evicted for them). */
    kvio_kvcache_metrics_t before;
    kvio_kvcache_get_metrics(engine->cache, &before);
    engine->num_scratch = 0;
    while ((status = kvio_kvcache_allocate(engine->cache, engine->reservation,
                                           (size_t)blocks * engine->block_size, NULL)) ==
               KVIO_ERR_NO_SPACE &&
           engine->running.count > 0) {
        uint32_t refund = 0;
        status = preempt(engine, engine->running.count - 1, &refund);
        if (status != KVIO_OK)
            return status;
        engine->metrics.colocated_preemptions++;
    }
    if (status != KVIO_OK)
        return status;
    if (blocks == usable) {
        /* The whole pool released (update.colocated: release): its cached
         * blocks are gone, as a flush drops them (#59 item 13). */
        kvio_kvcache_metrics_t after;
        kvio_kvcache_get_metrics(engine->cache, &after);
        engine->metrics.cache_flushed_blocks += after.evictions - before.evictions;
    }
    engine->reserved_blocks = blocks;
    return KVIO_OK;
}

uint32_t kvio_engine_lent_blocks(const kvio_engine_t *engine)
{
    return engine->reserved_blocks;
}

const char *kvio_engine_error(const kvio_engine_t *engine)
{
    return engine->error;
}

bool kvio_engine_drain(kvio_engine_t *engine)
{
    engine->admission_paused = true;
    return engine->running.count == 0 && engine->loading.count == 0;
}

/* The flush a version asked for, if it may happen now: at once with
 * reset: running; else (vLLM's reset_prefix_cache) only while no block is
 * in use, retried at each iteration boundary (the delay is measured). */
static void try_reset(kvio_engine_t *engine, int64_t now_ns)
{
    if (!engine->reset_pending)
        return;
    if (engine->update_reset != KVIO_RESET_RUNNING &&
        kvio_kvcache_num_free_blocks(engine->cache) < engine->num_blocks)
        return; /* a block is in use: vLLM's reset refuses */
    engine->metrics.cache_flushed_blocks += kvio_kvcache_reset_prefix(
        engine->cache, engine->observer.on_cache != NULL ? on_flushed : NULL, engine);
    engine->reset_pending = false;
    engine->metrics.resets_pending--;
    engine->metrics.resets++;
    engine->metrics.reset_delay_ns += now_ns - engine->reset_asked_ns;
}

/* Every running request starts over on the new weights: its KV goes
 * (never to swap: it is stale), it waits at the head of the queue in its
 * order, and is recomputed (counted in *requeued_p). in_flight: abort does
 * this, and reset: preempt_all (vLLM's reset_running_requests) before it
 * resets the cache. */
static kvio_status_t requeue_running(kvio_engine_t *engine, uint64_t version,
                                     uint64_t *requeued_p)
{
    engine->num_scratch = 0;
    while (engine->running.count > 0) {
        engine_req_t *req = engine->running.items[engine->running.count - 1];
        engine->running.count--;
        (*requeued_p)++;
        engine->metrics.update_recomputed_tokens += req->computed;
        req->recomputed_tokens += req->computed;
        req->lost_tokens = 0; /* counted here, not again as a preemption's */
        req->computed = 0;
        req->scheduled = 0;
        kv_freed(engine, req); /* while running: out of the running total */
        req->state = REQ_WAITING;
        kvio_status_t status = retag(engine, req, version); /* recomputed on the new weights */
        if (status == KVIO_OK)
            status = list_push_front(&engine->waiting, req);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

kvio_status_t kvio_engine_activate(kvio_engine_t *engine, uint64_t version)
{
    if (version == engine->active_version)
        return KVIO_OK;
    engine->active_version = version;
    engine->admission_paused = false;
    engine->metrics.versions_activated++;
    kvio_kvcache_set_epoch(engine->cache, version);
    /* A waiting request without KV (not started, or preempted for
     * recompute) will be computed on the new weights alone: it is the new
     * version's. */
    for (size_t i = 0; i < engine->waiting.count; i++) {
        engine_req_t *req = engine->waiting.items[i];
        /* A P/D request's KV is its prefill's: with pd.version any it stays
         * that version's (its tokens here count as mixed). */
        bool handed_over = req->spec.handoff.handoff_ns > 0;
        if (handed_over && !engine->pd_consistent)
            continue;
        if (req->computed == 0 && !req->swapped && req->spec.tag < version) {
            kvio_status_t status = retag(engine, req, version);
            if (status != KVIO_OK)
                return status;
        }
    }
    if (engine->in_flight == KVIO_IN_FLIGHT_ABORT) {
        kvio_status_t status = requeue_running(engine, version,
                                               &engine->metrics.update_aborted_requests);
        if (status != KVIO_OK)
            return status;
    }
    if (engine->update_cache != KVIO_UPDATE_CACHE_FLUSH)
        return KVIO_OK;
    if (engine->update_reset == KVIO_RESET_PREEMPT_ALL) {
        kvio_status_t status = requeue_running(engine, version,
                                               &engine->metrics.reset_preempted_requests);
        if (status != KVIO_OK)
            return status;
    }
    if (!engine->reset_pending) {
        engine->reset_pending = true;
        engine->metrics.resets_pending++;
        engine->reset_asked_ns = engine->last_end_ns;
    }
    try_reset(engine, engine->last_end_ns);
    return KVIO_OK;
}

static void record_finish(kvio_engine_t *engine, engine_req_t *req, int64_t end_ns)
{
    kvio_engine_metrics_t *metrics = &engine->metrics;
    metrics->requests++;
    if (end_ns > metrics->last_finish_ns)
        metrics->last_finish_ns = end_ns;
    if (req->spec.measured) {
        int64_t ttft = req->first_token_ns - req->spec.arrival_ns;
        int64_t e2el = end_ns - req->spec.arrival_ns;
        metrics->measured_requests++;
        metrics->input_tokens += req->spec.prompt_tokens;
        metrics->output_tokens += req->sched.generated;
        kvio_hist_record(metrics->ttft, (uint64_t)ttft);
        kvio_hist_record(metrics->e2el, (uint64_t)e2el);
        bool ttft_met = engine->slo.ttft_ns == 0 || ttft <= engine->slo.ttft_ns;
        bool tpot_met = true;
        if (req->sched.generated >= 2) {
            int64_t tpot = (e2el - ttft) / (int64_t)(req->sched.generated - 1);
            kvio_hist_record(metrics->tpot, (uint64_t)tpot);
            tpot_met = engine->slo.tpot_ns == 0 || tpot <= engine->slo.tpot_ns;
        }
        metrics->ttft_met += ttft_met;
        metrics->tpot_met += tpot_met;
        if (ttft_met && tpot_met)
            metrics->good_requests++;
        if (end_ns > metrics->measure_end_ns)
            metrics->measure_end_ns = end_ns;
    }
    kvio_sched_observe(engine->sched, &req->sched);
    if (engine->observer.on_finish != NULL) {
        kvio_engine_finished_t finished = {
            .id = req->spec.id, .rank = engine->rank, .arrival_ns = req->spec.arrival_ns,
            .first_token_ns = req->first_token_ns, .finish_ns = end_ns,
            .prompt_tokens = req->spec.prompt_tokens, .output_tokens = req->sched.generated,
            .cached_tokens = req->cached_tokens, .preemptions = req->preemptions,
            .recomputed_tokens = req->recomputed_tokens, .measured = req->spec.measured,
            .tag = req->spec.tag, .max_itl_ns = req->max_itl_ns,
            .kv_wait_ns = req->kv_wait_ns, .queued_ns = req->queued_ns,
            .loaded_tokens = req->loaded_tokens, .kv_transfer_ns = req->kv_transfer_ns,
        };
        size_t count = 0;
        if (req->kv != NULL)
            kvio_kvreq_blocks(req->kv, &finished.block_ids, &count);
        finished.num_block_ids = (uint32_t)count;
        engine->observer.on_finish(engine->observer.context, &finished);
    }
}

/* How many of a speculative step's drafts are accepted: each with
 * spec_acceptance, in order, until the first rejected (counted for
 * measured requests). */
static uint32_t spec_accept(kvio_engine_t *engine, engine_req_t *req)
{
    uint32_t accepted = 0;
    while (accepted < req->drafts &&
           kvio_rng_uniform(&engine->spec_rng) < engine->config.spec_acceptance)
        accepted++;
    if (req->spec.measured && req->drafts > 0) {
        engine->metrics.spec_draft_tokens += req->drafts;
        engine->metrics.spec_accepted_tokens += accepted;
    }
    return accepted;
}

void kvio_engine_complete(kvio_engine_t *engine, int64_t end_ns)
{
    engine->last_end_ns = end_ns;
    kvio_block_store_saves_at(engine->store, end_ns);
    /* The gaps go into the ITL histogram as runs of one value: the
     * sequences that also ran in the iteration before all have the same
     * one (a histogram per token was a twentieth of a chat stream's time). */
    uint64_t gap_run = 0, gap_run_count = 0;
    for (size_t i = 0; i < engine->num_scratch; i++) {
        engine_req_t *req = engine->scratch[i];
        /* A speculative step keeps its accepted drafts and rolls back the
         * rest: their KV is no longer computed. */
        uint32_t accepted = spec_accept(engine, req);
        req->computed += req->scheduled - (req->drafts - accepted);
        req->scheduled = 0;
        req->drafts = 0;
        if (req->computed < req_num_tokens(req))
            continue; /* prefill chunk: no token yet */
        /* The iteration produced a token, and one more per accepted draft. */
        uint32_t produced = 1 + accepted;
        req->sched.generated += produced;
        if (req->first_token_ns == 0 && req->sched.generated == 1) {
            req->first_token_ns = end_ns;
        } else {
            if (req->spec.measured) {
                uint64_t gap = (uint64_t)(end_ns - req->last_token_ns);
                if (gap != gap_run && gap_run_count > 0) {
                    kvio_hist_record_n(engine->metrics.itl, gap_run, gap_run_count);
                    gap_run_count = 0;
                }
                gap_run = gap;
                gap_run_count++;
                record_itl(&engine->metrics, req->spec.id, end_ns - req->last_token_ns);
            }
            if (end_ns - req->last_token_ns > req->max_itl_ns)
                req->max_itl_ns = end_ns - req->last_token_ns;
        }
        req->last_token_ns = end_ns;
        if (engine->observer.on_tokens != NULL)
            engine->observer.on_tokens(engine->observer.context, req->spec.id,
                                       req->sched.generated < req->target_output
                                           ? req->sched.generated
                                           : req->target_output,
                                       end_ns);
        if (req->sched.generated >= req->target_output) {
            record_finish(engine, req, end_ns);
            for (size_t r = 0; r < engine->running.count; r++) {
                if (engine->running.items[r] == req) {
                    list_remove_at(&engine->running, r);
                    break;
                }
            }
            kv_freed(engine, req);
            engine->scratch[i] = NULL;
            req_recycle(engine, req);
            continue;
        }
        /* The new token joins the sequence; hash the block it fills (one
         * falls due only when the tokens reach the next block's end). */
        uint32_t tokens = req_num_tokens(req);
        size_t new_hashes = 0;
        if (req->hashes_given < req->spec.num_hashes &&
            tokens >= (uint64_t)(req->hashes_given + 1) * engine->block_size)
            new_hashes = hashes_due(req, tokens, engine->block_size) - req->hashes_given;
        if (new_hashes == 0) {
            req->unappended += produced; /* told with the next block's hash, or by kv_sync */
            continue;
        }
        if (kvio_kvreq_append_hashes(req->kv, req->unappended + produced,
                                     req->hashes + req->hashes_given, new_hashes) == KVIO_OK) {
            req->hashes_given += new_hashes;
            req->unappended = 0;
        } else {
            req->unappended += produced;
        }
    }
    if (gap_run_count > 0)
        kvio_hist_record_n(engine->metrics.itl, gap_run, gap_run_count);
    engine->num_scratch = 0;
}

/* ---------- taking requests out ---------- */

/* The live request with this id: its list and index there (NULL: none). */
static req_list_t *find_live(kvio_engine_t *engine, uint64_t id, size_t *index_p)
{
    req_list_t *lists[] = {&engine->running, &engine->waiting, &engine->loading};
    for (size_t l = 0; l < 3; l++) {
        for (size_t i = 0; i < lists[l]->count; i++) {
            if (lists[l]->items[i]->spec.id == id) {
                *index_p = i;
                return lists[l];
            }
        }
    }
    return NULL;
}

kvio_status_t kvio_engine_abort(kvio_engine_t *engine, uint64_t id)
{
    size_t index = 0;
    req_list_t *list = find_live(engine, id, &index);
    if (list == NULL)
        return KVIO_ERR_NOT_FOUND;
    engine_req_t *req = list->items[index];
    list_remove_at(list, index);
    if (req->load != NULL) {
        kvio_block_store_load_free(engine->store, req->load); /* waits for its bytes */
        req->load = NULL;
    }
    if (req->swapped)
        kvio_block_store_swap_release(engine->store, &req->swap);
    if (req->kv != NULL)
        kv_freed(engine, req); /* a running one's blocks leave the running total */
    engine->metrics.aborted_requests++;
    req_recycle(engine, req);
    return KVIO_OK;
}

void kvio_engine_hold_admission(kvio_engine_t *engine, bool held)
{
    engine->admission_held = held;
}

bool kvio_engine_admission_held(const kvio_engine_t *engine)
{
    return engine->admission_held;
}

void kvio_engine_reset_prefix_cache(kvio_engine_t *engine, bool *reset_p)
{
    *reset_p = kvio_kvcache_num_free_blocks(engine->cache) >= engine->num_blocks;
    if (*reset_p)
        kvio_kvcache_reset_prefix(engine->cache,
                                  engine->observer.on_cache != NULL ? on_flushed : NULL, engine);
}

/* ---------- inspection ---------- */

void kvio_engine_last_scheduled(const kvio_engine_t *engine,
                                const kvio_engine_scheduled_t **items_p, size_t *count_p)
{
    *items_p = engine->scheduled;
    *count_p = engine->current.num_scheduled;
}

static size_t list_ids(const req_list_t *list, uint64_t *ids_p, size_t max_ids)
{
    for (size_t i = 0; i < list->count && i < max_ids; i++)
        ids_p[i] = list->items[i]->spec.id;
    return list->count;
}

size_t kvio_engine_running_ids(const kvio_engine_t *engine, uint64_t *ids_p, size_t max_ids)
{
    return list_ids(&engine->running, ids_p, max_ids);
}

size_t kvio_engine_waiting_ids(const kvio_engine_t *engine, uint64_t *ids_p, size_t max_ids)
{
    return list_ids(&engine->waiting, ids_p, max_ids);
}

kvio_status_t kvio_engine_request_state(const kvio_engine_t *engine, uint64_t id,
                                        uint32_t *computed_p, uint32_t *blocks_p)
{
    const req_list_t *lists[] = {&engine->running, &engine->waiting};
    for (size_t l = 0; l < 2; l++) {
        for (size_t i = 0; i < lists[l]->count; i++) {
            const engine_req_t *req = lists[l]->items[i];
            if (req->spec.id != id)
                continue;
            *computed_p = req->computed;
            /* NULL: a deferred request, not looked up yet */
            *blocks_p = req->kv != NULL ? (uint32_t)kvio_kvreq_held_blocks(req->kv) : 0;
            return KVIO_OK;
        }
    }
    return KVIO_ERR_NOT_FOUND;
}

size_t kvio_engine_overdue(const kvio_engine_t *engine, int64_t now_ns)
{
    const kvio_hist_t *e2el = engine->metrics.e2el;
    int64_t p99_ns = kvio_hist_count(e2el) > 0 ? (int64_t)kvio_hist_quantile(e2el, 0.99) : -1;
    const req_list_t *lists[] = {&engine->running, &engine->waiting, &engine->loading};
    size_t overdue = 0;
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < lists[l]->count; i++)
            overdue += now_ns - lists[l]->items[i]->spec.arrival_ns > p99_ns;
    return overdue;
}

uint32_t kvio_engine_load(const kvio_engine_t *engine)
{
    return (uint32_t)(engine->running.count + engine->waiting.count);
}

uint32_t kvio_engine_free_blocks(const kvio_engine_t *engine)
{
    return kvio_kvcache_num_free_blocks(engine->cache);
}

uint32_t kvio_engine_num_blocks(const kvio_engine_t *engine)
{
    return engine->num_blocks;
}

uint32_t kvio_engine_block_size(const kvio_engine_t *engine)
{
    return engine->block_size;
}

uint64_t kvio_engine_active_decode_blocks(const kvio_engine_t *engine)
{
    return engine->running_blocks; /* kept by set_held: routers ask per request */
}

size_t kvio_engine_cached_prefix(const kvio_engine_t *engine, const kvio_hash_t *hashes,
                                 size_t num_hashes, uint32_t prompt_tokens)
{
    size_t full = prompt_tokens / engine->block_size;
    if (num_hashes > full)
        num_hashes = full;
    if (hashes == NULL && num_hashes > 0)
        return 0;
    return kvio_kvcache_lookup_hashes(engine->cache, hashes, num_hashes, prompt_tokens);
}

const kvio_engine_metrics_t *kvio_engine_metrics(const kvio_engine_t *engine)
{
    return &engine->metrics;
}
