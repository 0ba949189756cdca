/* The serving engine: one serve rank's scheduler loop with vLLM v1
 * semantics (token budget, running first, preemption, head-of-line
 * admission, chunked prefill), over a KV-cache pool, a scheduling policy and
 * a cost model. The caller owns the clock: kvio_engine_schedule() decides one
 * iteration and says how long it takes, kvio_engine_complete() applies its
 * outcome at the end time. Simulate and emulate mode drive the same code. */
#ifndef KVIO_ENGINE_H
#define KVIO_ENGINE_H

#include "kvio/config.h"
#include "kvio/cost.h"
#include "kvio/data.h"
#include "kvio/hash.h"
#include "kvio/sched.h"
#include "kvio/stats.h"
#include "kvio/status.h"
#include "kvio/tier.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { KVIO_PREEMPT_RECOMPUTE = 0, KVIO_PREEMPT_SWAP = 1 } kvio_preemption_t;

/* The `serve.engine` section. */
typedef struct kvio_engine_config {
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
    bool chunked_prefill;
    int64_t long_prefill_token_threshold; /* 0: none */
    int preemption;                       /* kvio_preemption_t */
    bool realtime;                        /* emulate: SCHED_FIFO for serve-rank threads */
    /* vLLM's admission (v1 scheduler): a waiting or preempted request is
     * admitted only when its whole sequence fits in the free blocks
     * (scheduler_reserve_full_isl), keeping watermark x the pool's blocks
     * free while another request runs. */
    bool scheduler_reserve_full_isl;
    double watermark;
    /* Speculative decoding: each decode step verifies up to this many draft
     * tokens, each accepted with spec_acceptance until the first rejected,
     * and keeps as many lookahead slots for the next drafts (EAGLE in vLLM);
     * a draft step costs spec_draft_fraction of the iteration. 0: off. */
    int64_t num_lookahead_tokens;
    double spec_acceptance;
    double spec_draft_fraction;
} kvio_engine_config_t;

/* The `serve.kvcache` section. */
typedef struct kvio_kvcache_section {
    int64_t block_size;
    uint64_t capacity;             /* bytes of KV per serve rank; 0: from GPU memory */
    int64_t blocks;                /* usable blocks; overrides capacity when set */
    double gpu_memory_utilization; /* with capacity 0: fraction of GPU memory for weights + KV */
    bool prefix_caching;
    int free_order;                /* kvio_free_order_t */
    int index;                     /* kvio_kvcache_index_t */
    kvio_choice_t eviction;        /* of kvio_evictions */
    bool verify_swaps;             /* emulate: checksum swapped blocks out and back */
    int pool_memory;               /* kvio_pool_memory_t */
    uint64_t swap_space;           /* emulate: host memory for swapped blocks (0: as the pool) */
    kvio_opt_list_t tiers;         /* of kvio_tier_config_t, checked in order */
    int tier_io;                   /* kvio_tier_io_t */
    bool hybrid;                   /* the model's window layers as vLLM's hybrid groups */
    int placement;                 /* kvio_placement_t */
    int prefetch;                  /* kvio_prefetch_t */
    int64_t prefetch_timeout_base_ns;
    int64_t prefetch_timeout_per_1k_ns; /* per 1,024 tokens to load */
    int64_t prefetch_timeout_max_ns;    /* 0: no cap */
    int64_t chunk_tokens;          /* tokens per object in the tiers (0: a block) */
    int save_full;                 /* kvio_save_full_t */
} kvio_kvcache_section_t;

/* What holds the KV pool's bytes in emulate (serve.kvcache.pool_memory). */
typedef enum {
    KVIO_POOL_MEMORY_RESIDENT = 0,  /* real memory (host, touched up front, or device.memory) */
    KVIO_POOL_MEMORY_GENERATED = 1, /* none: a block's bytes are made from (seed, block, owner)
                                       whenever a tier save, a swap or a load reads them */
} kvio_pool_memory_t;

/* When a request whose prefix is in a tier stops waiting for it (tier_io:
 * async), SGLang HiCache's hicache_storage_prefetch_policy. */
typedef enum {
    KVIO_PREFETCH_WAIT_COMPLETE = 0, /* until every block has come */
    KVIO_PREFETCH_BEST_EFFORT = 1,   /* as soon as it could run: what has come, the rest computed */
    KVIO_PREFETCH_TIMEOUT = 2,       /* until base + per 1K tokens, capped, then as best_effort */
} kvio_prefetch_t;

/* Where blocks go in the lower tiers. */
typedef enum {
    KVIO_PLACEMENT_EACH = 0,      /* every tier of the write policy takes every block it lacks */
    KVIO_PLACEMENT_WATERFALL = 1, /* the first takes the pool's; each passes its evictions on */
} kvio_placement_t;

/* What a save does when every staging slot holds a save not yet written
 * (emulate, tier_io: async): the tiers are slower than the engine. */
typedef enum {
    KVIO_SAVE_FULL_WAIT = 0, /* the engine waits for a slot (kv-cache.py's synchronous writes) */
    KVIO_SAVE_FULL_SKIP = 1, /* the block is not saved, counted (vLLM's offloading connector
                                stores nothing when it has no room) */
} kvio_save_full_t;

/* How KV moves between the pool and the lower tiers. */
typedef enum {
    KVIO_TIER_IO_ASYNC = 0, /* beside the batch, as vLLM's KV connectors: a request waits
                               for its blocks while the others run */
    KVIO_TIER_IO_SYNC = 1,  /* inside the iteration: every request of the batch waits */
} kvio_tier_io_t;

extern const kvio_opt_t kvio_engine_options[];
extern const kvio_opt_t kvio_kvcache_section_options[];

/* Where a request's block hashes come from when the engine first needs
 * them (a lookup or an admission), instead of with the request: a long
 * waiting queue then holds no hashes. fill writes the num_hashes hashes
 * into hashes_p; the engine calls release(context) (may be NULL) once it
 * has them, or when it drops the request unfilled. */
typedef struct kvio_engine_hash_source {
    kvio_status_t (*fill)(void *context, kvio_hash_t *hashes_p, size_t num_hashes);
    void (*release)(void *context);
    void *context;
} kvio_engine_hash_source_t;

/* Prefill/decode disaggregation: a request whose prompt a prefill rank
 * computed, handed to this (decode) engine, its KV in a load-only tier of
 * this engine's (the prefill rank's blocks, reached over the P/D link). */
typedef struct kvio_engine_handoff {
    int64_t prefill_start_ns; /* the prefill's first schedule */
    int64_t handoff_ns;       /* the prefill's end: its KV may leave (0: no handoff) */
    uint32_t layers;          /* > 0: layer-wise, each layer's KV left as the prefill
                                 computed it; 0: the whole request after handoff_ns */
    int64_t latency_ns;       /* simulate: the link's fixed cost, once per transfer */
    int64_t *source_free_ns;  /* simulate: when the prefill rank's own link is free (its
                                 transfers to every decode rank queue on it; NULL: none) */
} kvio_engine_handoff_t;

/* A request as the engine takes it. hashes cover the full blocks of the
 * prompt followed by the output (fewer is allowed: those blocks are never
 * cached); they are copied. With hash_source.fill set, hashes is NULL and
 * num_hashes says how many the source will give. */
typedef struct kvio_engine_request {
    uint64_t id;
    int64_t arrival_ns;
    uint32_t prompt_tokens;
    uint32_t output_tokens; /* true output length */
    uint32_t max_tokens;    /* output limit; 0: none */
    int32_t priority;
    const kvio_hash_t *hashes;
    size_t num_hashes;
    bool measured;          /* false during warmup: excluded from the metrics */
    uint64_t tag;           /* the caller's (e.g. model version); reported back */
    kvio_engine_hash_source_t hash_source; /* optional; owned by the engine once added */
    kvio_engine_handoff_t handoff; /* P/D decode side (zero: none) */
} kvio_engine_request_t;

/* What a P/D decode rank's finished request adds (the serve loop fills it
 * from the prefill's finish; zero elsewhere). TTFT = prefill_queued_ns +
 * prefill_ns + staging_ns + decode_queued_ns + kv_transfer_ns + the first
 * decode step; the KV transfer is staging_ns + kv_transfer_ns. */
typedef struct kvio_pd_times {
    uint32_t prefill_rank;      /* world rank + 1 of the prefill (0: not P/D) */
    int64_t prefill_queued_ns;  /* arrival to the prefill's first schedule */
    int64_t prefill_ns;         /* the prefill's first schedule to its end (the handoff) */
    int64_t staging_ns;         /* emulate: the prefill rank's copy into its staging buffer
                                   (and any wait for room), after its end */
    int64_t decode_queued_ns;   /* the KV staged to the decode's admission */
} kvio_pd_times_t;

/* A request served through a front end (kvio serve), in the run's clock
 * as arrival_ns, which is when the whole HTTP request had been read at the
 * server: when its first byte was read, and when its serve rank took it
 * into the engine (the pick-up). The serve rank fills it, not the engine. */
typedef struct kvio_engine_received {
    bool frontend;              /* served by a rank with a front end (its columns) */
    bool known;                 /* the times below are this request's (false: not
                                 * taken from this rank's front end: a P/D decode) */
    int64_t first_byte_ns;
    int64_t taken_ns;
} kvio_engine_received_t;

/* What a finished request reports. */
typedef struct kvio_engine_finished {
    uint64_t id;
    uint32_t rank;
    int64_t arrival_ns, first_token_ns, finish_ns;
    uint32_t prompt_tokens, output_tokens, cached_tokens;
    uint32_t preemptions;
    uint32_t recomputed_tokens; /* computed again after a preemption or an update's abort */
    bool measured;
    uint64_t tag;
    int64_t max_itl_ns;         /* the longest gap between two of its tokens (0: one token) */
    int64_t kv_wait_ns;         /* waiting for its KV from a lower tier (tier_io: async) */
    int64_t queued_ns;          /* from arrival to its first schedule (vLLM's queue time) */
    uint32_t loaded_tokens;     /* prompt tokens loaded from a lower tier */
    int64_t kv_transfer_ns;     /* its first admission to its load's end (of kv_wait_ns) */
    kvio_pd_times_t pd;
    kvio_engine_received_t received;
    /* The pool blocks it holds, in order (borrowed, only during on_finish:
     * they are freed after it; a P/D prefill copies its KV out of them). */
    const uint32_t *block_ids;
    uint32_t num_block_ids;
} kvio_engine_finished_t;

/* One request's share of an iteration. */
typedef struct kvio_engine_scheduled {
    uint64_t id;
    uint32_t tokens;
} kvio_engine_scheduled_t;

/* One iteration as decided by kvio_engine_schedule. */
typedef struct kvio_engine_iteration {
    int64_t start_ns;
    int64_t duration_ns;  /* cost model time plus swap traffic */
    kvio_batch_t batch;
    uint32_t num_scheduled;
    uint32_t num_preempted;
    uint64_t swap_bytes;
    double kv_usage;      /* after scheduling */
    uint32_t running, waiting;
    int64_t swap_real_ns; /* emulate: time the swap copies really took */
    int64_t tier_ns;      /* tier reads and writes (real or modelled) */
    uint64_t tier_loaded_tokens;
} kvio_engine_iteration_t;

/* One gap between two tokens of a measured request, as vllm.json's itls
 * list them (ids past 2^32 are not kept). */
typedef struct kvio_itl_record {
    uint32_t id;
    float gap_s;
} kvio_itl_record_t;

/* Per-rank measurements; merge across ranks with kvio_engine_metrics_merge. */
typedef struct kvio_engine_metrics {
    kvio_hist_t *ttft, *tpot, *itl, *e2el, *queue; /* ns */
    bool slo; /* an SLO was set: good_requests means something (goodput is reported) */
    uint64_t requests, measured_requests, good_requests;
    uint64_t ttft_met, tpot_met; /* measured requests within each SLO bound (no bound: all) */
    uint64_t input_tokens, output_tokens;
    uint64_t prefix_queries, prefix_hits;                 /* tokens, first admissions */
    uint64_t resumed_prefix_queries, resumed_prefix_hits; /* tokens, after preemption */
    uint64_t preemptions, recomputed_tokens, swapped_bytes;
    uint64_t mispredict_preemptions; /* preemptions under a projecting policy (pkas) while a
                                        running request had outlived its predicted output */
    uint64_t tier_hit_tokens;       /* prompt tokens loaded back from a lower tier */
    uint64_t spec_draft_tokens, spec_accepted_tokens; /* measured requests' drafts verified,
                                                         and of them accepted */
    uint64_t kv_wait_requests;      /* measured requests that waited for KV from a tier */
    int64_t kv_wait_ns, kv_wait_max_ns; /* their waits: summed, the longest */
    uint64_t prefetch_stopped;      /* loads ended early by the prefetch policy */
    uint64_t prefetch_left_tokens;  /* tokens they left to compute */
    uint64_t swap_verify_failures;  /* swapped blocks whose checksum changed */
    uint64_t swap_space_exhausted;  /* swaps that fell back to recompute for want of space */
    int64_t swap_real_ns, swap_modelled_ns;
    uint64_t iterations;
    int64_t busy_ns;
    int64_t io_stall_ns;        /* of busy_ns: swap and tier transfers (no compute) */
    int64_t swap_stall_ns, tier_stall_ns; /* io_stall_ns by what moved */
    int64_t measured_busy_ns;   /* of busy_ns: from the first measured arrival (KV usage) */
    double usage_time_integral; /* Σ usage × duration (ns) */
    double max_usage;
    int64_t first_arrival_ns, last_finish_ns;
    int64_t last_arrival_ns;
    uint64_t arrivals;          /* requests added (the offered load) */
    int64_t measure_start_ns, measure_end_ns; /* first measured arrival, last measured finish */
    uint64_t measured_arrivals; /* requests added after the warmup (the load offered to the
                                   measurement, whether they finished or not) */
    int64_t last_measured_arrival_ns;
    uint32_t engines;           /* engines merged into these metrics */
    /* Model updates (kvio_engine_activate). */
    uint64_t versions_activated;
    uint64_t stale_hit_tokens;        /* prefix hits on KV cached under an older version */
    uint64_t cache_flushed_blocks;    /* cached blocks whose hash a flush dropped */
    uint64_t resets, resets_pending;  /* flushes done; asked for and not yet done */
    int64_t reset_delay_ns;           /* activation to reset, summed (reset: when_idle) */
    uint64_t reset_preempted_requests; /* preempted by reset: preempt_all */
    uint64_t mixed_version_tokens;    /* tokens computed on newer weights than the request's */
    uint64_t pd_reprefills;           /* P/D, pd.version: consistent: handed-over requests whose
                                         prefill ran an older version, computed again here */
    uint64_t pd_reprefilled_tokens;   /* their prompt tokens not taken from the prefill */
    uint64_t update_aborted_requests; /* running requests an activation preempted */
    uint64_t update_recomputed_tokens; /* their computed tokens, dropped for recompute */
    uint64_t colocated_preemptions;   /* requests preempted to lend KV memory to an update */
    uint64_t aborted_requests;        /* taken out unfinished (kvio_engine_abort) */
    /* Every gap between two tokens of a measured request, in the order they
     * came, while there are at most itl_records_max of them
     * (kvio_engine_params_t); past it (or for an id past 2^32) the rest are
     * counted in itl_records_dropped. Merging appends. */
    kvio_itl_record_t *itl_records;   /* malloc'd; kvio_engine_metrics_fini */
    uint64_t num_itl_records, itl_records_capacity, itl_records_max, itl_records_dropped;
} kvio_engine_metrics_t;

/* Service-level objectives for goodput (0: no bound). */
typedef struct kvio_slo {
    int64_t ttft_ns;
    int64_t tpot_ns;
} kvio_slo_t;

/* Observers, called from schedule/complete (may be NULL). */
typedef struct kvio_engine_observer {
    void *context;
    void (*on_finish)(void *context, const kvio_engine_finished_t *finished);
    void (*on_iteration)(void *context, uint32_t rank, const kvio_engine_iteration_t *iteration);
    /* A block's hash entered the prefix index (cached true) or left it for
     * reuse (false): what a router needs to mirror this rank's cache. */
    void (*on_cache)(void *context, kvio_hash_t hash, bool cached);
    /* A request's iteration produced tokens: generated of them so far (at
     * most its output), at end_ns; called before on_finish for the last. */
    void (*on_tokens)(void *context, uint64_t id, uint32_t generated, int64_t end_ns);
} kvio_engine_observer_t;

/* What serve.engine's max_num_seqs and max_num_batched_tokens of 0 become
 * (kvio_serve_batch_defaults: vLLM's for the GPU class). */
typedef struct kvio_engine_batch_defaults {
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
} kvio_engine_batch_defaults_t;

/* Everything an engine needs; borrowed pointers must outlive it. */
typedef struct kvio_engine_params {
    const kvio_engine_config_t *config;
    kvio_engine_batch_defaults_t batch_defaults; /* for the config's zeros */
    uint32_t num_blocks;       /* usable blocks */
    uint32_t block_size;
    bool prefix_caching;
    int free_order;
    int index;                 /* kvio_kvcache_index_t */
    const char *eviction;
    uint32_t window_tokens;    /* > 0: hybrid groups, this window (kvio_kvcache_config_t) */
    bool waterfall;            /* serve.kvcache.placement: waterfall */
    int prefetch;              /* kvio_prefetch_t, and its timeout */
    int64_t prefetch_timeout_base_ns, prefetch_timeout_per_1k_ns, prefetch_timeout_max_ns;
    uint32_t chunk_blocks;     /* blocks per object in the tiers (0 or 1: one) */
    bool skip_saves_when_full; /* serve.kvcache.save_full: skip */
    const kvio_sched_config_t *sched;
    uint64_t seed;
    const kvio_cost_t *cost;   /* borrowed */
    uint64_t kv_bytes_per_token;
    double host_bandwidth;     /* bytes/s for swaps */
    kvio_slo_t slo;
    uint32_t rank;
    kvio_engine_observer_t observer;
    void *kv_memory;           /* emulate: (num_blocks + 1) × block_bytes (NULL: none) */
    bool kv_generated;         /* emulate, kv_memory NULL: a generated pool (its blocks'
                                  bytes made whenever they travel) */
    struct kvio_device *kv_device; /* non-NULL: kv_memory is GPU memory of this cuda
                                      domain (borrowed); block copies go through its
                                      stream, swap buffers are pinned */
    uint64_t block_bytes;
    bool verify_swaps;
    kvio_data_t data;          /* emulate: what a block holds when its bytes travel (a tier,
                                  a swap, P/D), made from (seed, block, owner) */
    void *swap_space;          /* emulate: host swap space of swap_space_blocks blocks */
    uint32_t swap_space_blocks;
    kvio_tier_t *const *tiers; /* lower tiers, checked in order (borrowed) */
    size_t num_tiers;
    size_t load_only_tiers;    /* the last this many of tiers are never written (P/D: the
                                  prefill ranks' blocks, reached over the P/D link) */
    bool async_tiers;          /* tier_io: async (loads and saves beside the batch) */
    int update_cache;          /* kvio_update_cache_t: what kvio_engine_activate does */
    int update_reset;          /* kvio_reset_t: how a flush resets */
    int in_flight;             /* kvio_in_flight_t */
    bool pd_consistent;        /* pd.version: consistent: a handed-over request whose prefill
                                  ran an older version than this engine's is prefilled again
                                  here (its KV not loaded) and takes this engine's version */
    uint64_t itl_records_max;  /* gaps between tokens kept in the metrics (0: none) */
} kvio_engine_params_t;

typedef struct kvio_engine kvio_engine_t;

kvio_status_t kvio_engine_create(const kvio_engine_params_t *params, kvio_engine_t **engine_p,
                                 char *error_p, size_t error_len);

/* Moves the engine's gaps between tokens (and their dropped count) to the
 * end of dst's: merging them afterwards adds none twice, and copies none. */
void kvio_engine_move_itls(kvio_engine_t *engine, kvio_engine_metrics_t *dst);
void kvio_engine_destroy(kvio_engine_t *engine);

/* A new model version activates at an iteration boundary (between complete
 * and the next schedule): the prefix cache is flushed, versioned or kept
 * (params->update_cache), running requests go on or are preempted for
 * recompute (params->in_flight; an aborted request takes the new version as
 * its tag). Requests added later should carry version as their tag. */
kvio_status_t kvio_engine_activate(kvio_engine_t *engine, uint64_t version);

/* update.in_flight: wait, at an iteration boundary with a version ready:
 * stops admitting (running requests go on) and says whether none runs any
 * more, i.e. whether the version may activate now. kvio_engine_activate
 * admits again. */
bool kvio_engine_drain(kvio_engine_t *engine);

/* Why the last kvio_engine_schedule failed with KVIO_ERR_CONFIG (the cost
 * model's iteration time out of range), naming the rank; "" otherwise. */
const char *kvio_engine_error(const kvio_engine_t *engine);

/* update.colocated, at an iteration boundary: lends blocks of the KV pool to
 * an incoming update (at most all of them; cached free blocks are evicted
 * and running requests preempted, the latest first, until they are free),
 * or with 0 takes them back. The engine admits only into what is left. */
kvio_status_t kvio_engine_reserve(kvio_engine_t *engine, uint32_t blocks);

/* The blocks lent now (kvio_engine_reserve; 0: none). */
uint32_t kvio_engine_lent_blocks(const kvio_engine_t *engine);

/* Queues a request (it joins the waiting queue at the next schedule). With
 * a hash source, the engine owns its context from this call on, whatever
 * the result (it is released on failure). */
kvio_status_t kvio_engine_add(kvio_engine_t *engine, const kvio_engine_request_t *request);

/* Takes a waiting, loading or running request out unfinished (a client
 * that went away), at an iteration boundary: its blocks are freed (their
 * cached prefix stays in the index), nothing of it is reported as
 * finished, and it counts in aborted_requests. KVIO_ERR_NOT_FOUND when no
 * live request has this id. */
kvio_status_t kvio_engine_abort(kvio_engine_t *engine, uint64_t id);

/* vLLM's reset_prefix_cache, at an iteration boundary: every cached block's
 * hash leaves the index, on_cache hearing each go (a router's index of this
 * rank forgets them), unless a block is in use, when nothing changes and
 * *reset_p is false (vLLM refuses then). */
void kvio_engine_reset_prefix_cache(kvio_engine_t *engine, bool *reset_p);

/* Holds (or lets go) admission: running requests go on, waiting ones are
 * admitted only once let go (vLLM's pause with mode wait). */
void kvio_engine_hold_admission(kvio_engine_t *engine, bool held);
bool kvio_engine_admission_held(const kvio_engine_t *engine);

/* True while requests wait or run. */
bool kvio_engine_has_work(const kvio_engine_t *engine);

/* The requests in flight at now_ns (the engine's clock: waiting, loading
 * their KV or running) that arrived longer ago than the p99 end-to-end
 * latency of the requests it finished (every one when none finished): the
 * ones a cut at now_ns would leave out of the latencies as their slowest. */
size_t kvio_engine_overdue(const kvio_engine_t *engine, int64_t now_ns);

/* When the first load from a tier ends, on the engine's clock: INT64_MAX
 * when no request waits for one, -1 when it is not known ahead (emulate:
 * look again). */
int64_t kvio_engine_kv_ready_ns(const kvio_engine_t *engine);

/* Runs fn(context) while the engine's I/O thread keeps off its tiers (an
 * emulate P/D decode lists and unlists blocks in its peer tier). */
void kvio_engine_with_tiers(kvio_engine_t *engine, void (*fn)(void *context), void *context);

/* Emulate: writes the pending bytes of pool blocks that are about to be
 * read outside the engine (a P/D prefill's staging): their owners' KV (the
 * run's data:) and owner stamps. */
void kvio_engine_materialize(kvio_engine_t *engine, const uint32_t *blocks, size_t count);

/* Waits until the tier traffic asked for has been carried out (the tiers'
 * statistics are read after this). */
void kvio_engine_settle(kvio_engine_t *engine);

/* The run was stopped (serve.drain_timeout, a signal): the tier traffic
 * still queued is dropped (saves counted in the tiers' cut_puts), a load
 * under way ends after its batch; returns when the tiers are idle. */
void kvio_engine_cut_tiers(kvio_engine_t *engine);

/* Emulate: no tier transfer begins past host time until_ns (kvio_time_ns:
 * the drain's cap), not even inside a step (kvio_block_store_until). */
void kvio_engine_tiers_until(kvio_engine_t *engine, uint64_t until_ns);

/* Decides the next iteration at now_ns: fills iteration_p (duration 0 and
 * nothing scheduled when idle or when nothing fits). */
kvio_status_t kvio_engine_schedule(kvio_engine_t *engine, int64_t now_ns,
                                   kvio_engine_iteration_t *iteration_p);

/* Applies the scheduled iteration's outcome at end_ns: computed tokens,
 * produced tokens, finished requests. */
void kvio_engine_complete(kvio_engine_t *engine, int64_t end_ns);

/* The last schedule, in order (borrowed until the next schedule). */
void kvio_engine_last_scheduled(const kvio_engine_t *engine,
                                const kvio_engine_scheduled_t **items_p, size_t *count_p);

/* Request ids in the running and waiting queues, in order. Returns how many
 * there are; writes at most max_ids. */
size_t kvio_engine_running_ids(const kvio_engine_t *engine, uint64_t *ids_p, size_t max_ids);
size_t kvio_engine_waiting_ids(const kvio_engine_t *engine, uint64_t *ids_p, size_t max_ids);

/* A live request's computed tokens and held blocks; KVIO_ERR_NOT_FOUND when
 * the id is not waiting or running. */
kvio_status_t kvio_engine_request_state(const kvio_engine_t *engine, uint64_t id,
                                        uint32_t *computed_p, uint32_t *blocks_p);

/* Load the router reads: requests waiting + running, free KV blocks, and
 * the cached prefix (tokens) a prompt would hit here. */
uint32_t kvio_engine_load(const kvio_engine_t *engine);
uint32_t kvio_engine_free_blocks(const kvio_engine_t *engine);
uint32_t kvio_engine_num_blocks(const kvio_engine_t *engine);
uint32_t kvio_engine_block_size(const kvio_engine_t *engine);
uint64_t kvio_engine_active_decode_blocks(const kvio_engine_t *engine);
size_t kvio_engine_cached_prefix(const kvio_engine_t *engine, const kvio_hash_t *hashes,
                                 size_t num_hashes, uint32_t prompt_tokens);

/* The engine's metrics (borrowed). */
const kvio_engine_metrics_t *kvio_engine_metrics(const kvio_engine_t *engine);

/* Metrics that several engines add into; create/destroy own histograms. */
kvio_status_t kvio_engine_metrics_init(kvio_engine_metrics_t *metrics);
void kvio_engine_metrics_fini(kvio_engine_metrics_t *metrics);
void kvio_engine_metrics_merge(kvio_engine_metrics_t *dst, const kvio_engine_metrics_t *src);

/* Serialises metrics for sending to rank 0 (malloc'd blob, caller frees),
 * and adds a received blob into dst (*used_p: bytes consumed). */
kvio_status_t kvio_engine_metrics_pack(const kvio_engine_metrics_t *metrics, void **blob_p,
                                       size_t *length_p);
kvio_status_t kvio_engine_metrics_unpack_merge(kvio_engine_metrics_t *dst, const void *blob,
                                               size_t length, size_t *used_p);

#endif
