/* Private to serve/: CSV rows and the messages between serve ranks and their client. */
#ifndef KVIO_SERVE_INT_H
#define KVIO_SERVE_INT_H

#include "kvio/cost.h"
#include "kvio/engine.h"
#include "kvio/events.h"
#include "kvio/frontend.h"
#include "kvio/results.h"
#include "kvio/rte.h"
#include "kvio/serve.h"
#include "kvio/wire.h"
#include "kvio/stream.h"

/* ---------- routers (serve/router.c, serve/routers.c, router_<name>.c) ---------- */

/* A router reads the requests' block hashes (they must be computed before
 * it chooses). */
#define KVIO_ROUTER_CAP_READS_HASHES 1u
/* A router keeps an index fed by the ranks' KV events (ops->on_event). */
#define KVIO_ROUTER_CAP_HEARS_EVENTS 2u
/* A router keeps its own index of the ranks' blocks: it says what prefix
 * it routed on (call->indexed_blocks_p), and its routes are checked. */
#define KVIO_ROUTER_CAP_INDEX 4u

/* What a router's choose() is given. */
typedef struct kvio_router_call {
    const void *options;               /* the router's own options (NULL: none) */
    void *state;                       /* its private state (state_size bytes) */
    const kvio_router_view_t *view;
    uint32_t count;                    /* ranks to choose among (at least 2) */
    const kvio_engine_request_t *request;
    /* A router with an index sets the prefix (in blocks) its index said
     * the chosen rank held (left 0: none); the framework checks it. */
    size_t *indexed_blocks_p;
} kvio_router_call_t;

/* ---------- serve's own parts of the public types ---------- */

/* The router's name. */
const char *kvio_router_name(const kvio_router_t *router);

/* Whether choosing among num_ranks ranks reads a request's block hashes
 * (prefix_affinity, kv_cost): else they may be computed later. */
bool kvio_router_reads_hashes(const kvio_router_t *router, uint32_t num_ranks);

/* Picks the serve rank for a request from the engines' current state
 * (now_ns: the run's clock, for the events' delivery). */
uint32_t kvio_router_choose(kvio_router_t *router, kvio_engine_t *const *engines,
                            uint32_t num_engines, const kvio_engine_request_t *request,
                            int64_t now_ns);

/* A router with its own index: its routing decisions (indexed, stale)
 * into result, with an event-fed one's lag and events (nothing for a
 * router without an index). */
void kvio_router_fill(kvio_result_t *result, const kvio_router_t *router);
/* The same from stats (a client rank's, sent to rank 0). */
void kvio_router_stats_fill(kvio_result_t *result, const kvio_router_stats_t *stats);

/* Keeps at most bytes of iteration records for the report (the default
 * fits the runtime's message limit; a plain run's report stays in memory). */
void kvio_serve_rank_set_iterations_limit(kvio_serve_rank_t *rank, size_t bytes);

/* The serving figures of merged engine measurements into result (TTFT,
 * TPOT, ITL, E2EL from the histograms, counts, the prefix cache,
 * preemptions, KV usage; kvio_result_derive makes the rates). */
void kvio_serve_metrics_fill(kvio_result_t *result, const kvio_engine_metrics_t *metrics);
/* With tiers: the tokens the pool or a tier served (hit_rate_with_tiers). */
void kvio_serve_tier_hits_fill(kvio_result_t *result);

typedef struct kvio_router_ops {
    kvio_plugin_t plugin;
    unsigned caps;     /* KVIO_ROUTER_CAP_* */
    size_t state_size; /* bytes of private state, zeroed at create */
    uint32_t (*choose)(const kvio_router_call_t *call);
    /* KVIO_ROUTER_CAP_HEARS_EVENTS: an event delivered (after the lag) to
     * the index in state; returns KVIO_ERR_NOMEM when it cannot grow. */
    kvio_status_t (*on_event)(void *state, uint32_t rank, kvio_hash_t hash, bool stored);
    /* The first failure of the router's own upkeep (may be NULL: none). */
    kvio_status_t (*status)(const void *state);
    void (*fini)(void *state); /* frees what state holds (may be NULL) */
} kvio_router_ops_t;

/* The least loaded of count ranks in view (ties: the lower rank). */
uint32_t kvio_router_pick_least_loaded(const kvio_router_view_t *view, uint32_t count);

/* For routers with their own index (kv_events, kv_approx): the 64-bit key
 * of a block hash (both halves mixed), whether index says rank holds a
 * key, the run of the request's blocks from the first that it holds (at
 * most the blocks a hit may cover: never the last prompt token, as the
 * engine's lookup), and the rank with the longest run (equal runs: the
 * less loaded; none anywhere: the least loaded), *blocks_p its run. */
typedef bool (*kvio_router_holds_t)(const void *index, uint32_t rank, uint64_t key);
uint64_t kvio_router_block_key(kvio_hash_t hash);
size_t kvio_router_prefix_blocks(const kvio_engine_request_t *request, uint32_t block_size,
                                 kvio_router_holds_t holds, const void *index, uint32_t rank);
uint32_t kvio_router_pick_longest_prefix(const kvio_router_call_t *call,
                                         kvio_router_holds_t holds, const void *index,
                                         size_t *blocks_p);

/* Column names of requests.csv and iterations.csv, and one row of each. */
#define KVIO_REQUESTS_CSV_HEADER                                                            \
    "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,"  \
    "preemptions,model_version,measured,kv_wait_ms,ttft_ms,tpot_ms,e2el_ms"
/* P/D (a decode rank's request, finished->pd.prefill_rank > 0): the prefill's
 * world rank, TTFT's parts and the bytes the KV transfer moved. */
#define KVIO_REQUESTS_PD_HEADER                                                             \
    ",prefill_rank,prefill_queue_ms,prefill_ms,decode_queue_ms,kv_transfer_ms,"           \
    "first_decode_ms,kv_transfer_tokens"
/* A P/D request's TTFT in its parts, which add up to it: the prefill's
 * queue, the prefill, the decode's queue, the KV transfer (staging and
 * load), the first decode step (ns; the columns
 * KVIO_REQUESTS_PD_HEADER names, and metrics.pd's means; serve/pd.c). */
#define KVIO_PD_TTFT_PARTS 5
void kvio_pd_ttft_parts(const kvio_engine_finished_t *finished,
                        int64_t parts_p[KVIO_PD_TTFT_PARTS]);
/* A front end's request (kvio serve, finished->received.frontend): its HTTP
 * request's first byte and its last read at the server (the last is its
 * arrival), and the serve rank's pick-up (arrival to taken). */
#define KVIO_REQUESTS_FRONTEND_HEADER ",request_first_byte_s,request_complete_s,pickup_ms"
/* With a control (kvio_serve_run_t.control): each request minus the same
 * request served without updates. */
#define KVIO_REQUESTS_CONTROL_HEADER                                                        \
    ",ttft_delta_ms,tpot_delta_ms,e2el_delta_ms,max_itl_delta_ms,cached_tokens_delta,"     \
    "recomputed_tokens_delta"
#define KVIO_ITERATIONS_CSV_HEADER                                                          \
    "time_s,rank,duration_ms,batch_size,prefill_tokens,decode_seqs,kv_usage,running,"     \
    "waiting,preempted,swap_bytes"

/* Formats a requests.csv row (no newline) into text_p; returns its length. */
int kvio_serve_request_row(const kvio_engine_finished_t *finished, char *text_p,
                           size_t text_len);
/* Appends the KVIO_REQUESTS_CONTROL_HEADER columns of a request served with
 * updates against the same request without (NULL: empty columns) to a row
 * of length at; returns the new length. */
int kvio_serve_request_control_row(const kvio_engine_finished_t *with,
                                   const kvio_engine_finished_t *without, char *text_p,
                                   size_t text_len, int at);
void kvio_serve_iteration_row(kvio_csv_t *csv, uint32_t rank,
                              const kvio_engine_iteration_t *iteration);

/* Opens requests.csv and iterations.csv in results (either may be skipped by
 * passing NULL); requests.csv with the P/D, the front end's and the
 * control's columns. */
kvio_status_t kvio_serve_open_csvs(kvio_results_t *results, bool with_pd, bool with_frontend,
                                   bool with_control,
                                   kvio_csv_t **requests_p,
                                   kvio_csv_t **iterations_p, char *error_p, size_t error_len);
/* Appends each tier's stats, tagged with rank, to array. */
void kvio_serve_tiers_json(kvio_tier_t *const *tiers, size_t num_tiers, uint32_t rank,
                           json_t *array);
/* Each tier's figures as an entry of result's "tiers" list, tagged with
 * rank. */
kvio_status_t kvio_serve_tiers_fill(kvio_result_t *result, kvio_tier_t *const *tiers,
                                   size_t num_tiers, uint32_t rank);
/* Closes both (either may be NULL); a failed close becomes KVIO_ERR_IO with
 * the file named, unless status is already an error. Returns the status. */
kvio_status_t kvio_serve_close_csvs(kvio_csv_t *requests, kvio_csv_t *iterations,
                                    kvio_status_t status, char *error_p, size_t error_len);

/* A growable buffer of block hashes, reused request after request. */
typedef struct kvio_hash_buffer {
    kvio_hash_t *hashes;
    size_t capacity;
} kvio_hash_buffer_t;

/* Makes room for count hashes (kept contents are not preserved). */
kvio_status_t kvio_hash_buffer_reserve(kvio_hash_buffer_t *buffer, size_t count);

/* Requests whose hashes are computed when the engine first asks
 * (serve/deferred.c): the queue of those not hashed yet, in dispatch order,
 * from which requests are hashed beside the one asked for. */
typedef struct kvio_deferred_queue kvio_deferred_queue_t;

kvio_status_t kvio_deferred_queue_create(uint32_t block_size, kvio_deferred_queue_t **queue_p);

/* After every request made from the queue was released. */
void kvio_deferred_queue_destroy(kvio_deferred_queue_t *queue);

/* Requests now holding hashes computed ahead (at most 16, AHEAD_MAX). */
size_t kvio_deferred_queue_num_ahead(const kvio_deferred_queue_t *queue);

/* A copy of request, queued, as an engine hash source (the engine owns it
 * once added, and releases it) and the number of hashes it gives: the full
 * blocks of the prompt and output. */
kvio_status_t kvio_deferred_request(kvio_deferred_queue_t *queue, const kvio_request_t *request,
                                    kvio_engine_hash_source_t *source_p, size_t *num_hashes_p);

/* Turns a stream request into an engine request: hashes of the full blocks
 * of its prompt and output go into buffer (the engine copies them). */
kvio_status_t kvio_serve_engine_request(const kvio_request_t *request, uint32_t block_size,
                                        int64_t arrival_ns, bool measured, uint64_t tag,
                                        kvio_hash_buffer_t *buffer,
                                        kvio_engine_request_t *engine_request_p);

/* An engine's parameters for serve rank serve_index of run, with blocks
 * usable blocks, cost and observer: everything but the real memory and the
 * tiers (borrowed from run). */
kvio_engine_params_t kvio_serve_engine_params(const kvio_serve_run_t *run, uint32_t serve_index,
                                              uint32_t blocks, const kvio_cost_t *cost,
                                              kvio_engine_observer_t observer);

/* update.colocated: the KV blocks an incoming update of bytes takes from a
 * pool of block_bytes blocks (all of them with release; 0 when off or
 * nothing comes in). */
uint32_t kvio_serve_lent_blocks(const kvio_update_config_t *update, uint64_t bytes,
                                uint64_t block_bytes);

/* ---------- one iteration, and how its time passes (serve/executor.c) ---------- */

typedef enum {
    KVIO_SERVE_STEP_IDLE, /* nothing to do: wait for a request */
    KVIO_SERVE_STEP_LENT, /* requests wait for KV memory lent to an update */
    KVIO_SERVE_STEP_KV,   /* requests wait only for their KV from a tier */
    KVIO_SERVE_STEP_RUN,  /* *iteration_p runs for its duration_ns */
} kvio_serve_step_t;

/* Begins an iteration of engine at now_ns, as every driver does: idle
 * without work; else schedules it. An iteration that scheduled nothing
 * although requests wait is LENT when blocks are lent to an update that
 * will give them back (pool_comes_back), else an error naming the request
 * that can never fit and world rank rank (KVIO_ERR_CONFIG); a failed
 * schedule names the engine's reason. */
kvio_status_t kvio_serve_step(kvio_engine_t *engine, int64_t now_ns, uint32_t rank,
                              bool pool_comes_back, kvio_engine_iteration_t *iteration_p,
                              kvio_serve_step_t *step_p, char *error_p, size_t error_len);

/* One trace event for an iteration (and one for its swaps and tier
 * traffic) from a record: num_ids is the size of its batch (the event's
 * num_requests) and ids holds the batch's first min(num_ids,
 * KVIO_EVENT_MAX_REQUEST_IDS) request ids. */
void kvio_serve_trace_iteration_ids(kvio_event_trace_t *events, uint32_t rank,
                                    const kvio_engine_iteration_t *iteration,
                                    const uint64_t *ids, size_t num_ids, double host_bandwidth);

/* ---------- serve ranks and their client in real time (serve/client.c) ---------- */

/* Request batches travel as KVIO_SERVE_TAG_REQUESTS (client to serve rank),
 * published state as KVIO_SERVE_TAG_STATE (kvio/rte.h). */

/* A serve rank's side: the prefix-index changes since the last publication
 * (fed by the engine observer's on_cache) and the requests it has taken. */
typedef struct kvio_serve_publisher {
    kvio_hash_t *cached, *evicted;
    size_t num_cached, num_evicted, cached_capacity, evicted_capacity;
    uint64_t received;
    kvio_status_t status; /* out of memory inside a hook */
} kvio_serve_publisher_t;

void kvio_serve_publisher_note(kvio_serve_publisher_t *publisher, kvio_hash_t hash,
                               bool cached);
/* A state message (load, free blocks, active decode blocks, the deltas;
 * final: the rank has finished) in a malloc'd blob; clears the deltas.
 * engine NULL: a rank without engine state yet (all zero). */
kvio_status_t kvio_serve_publisher_pack(kvio_serve_publisher_t *publisher,
                                        const kvio_engine_t *engine, bool final,
                                        void **blob_p, size_t *length_p);
void kvio_serve_publisher_fini(kvio_serve_publisher_t *publisher);

/* The client's copy of what serve ranks published, with each rank's cached
 * hashes, as a router view. Load adds requests sent but not yet taken. */
typedef struct kvio_serve_mirror kvio_serve_mirror_t;
kvio_status_t kvio_serve_mirror_create(uint32_t num_ranks, uint32_t block_size,
                                       kvio_serve_mirror_t **mirror_p);
void kvio_serve_mirror_destroy(kvio_serve_mirror_t *mirror);
kvio_status_t kvio_serve_mirror_apply(kvio_serve_mirror_t *mirror, uint32_t rank,
                                      const void *blob, size_t length, bool *final_p);
/* From now on each hash a state adds to or takes from a rank's set reaches
 * router (borrowed; one that hears events) as a KV event, stamped with
 * kvio_time_ns() when the state is applied: what the rank published is what
 * a fleet index hears (BlockStored / BlockRemoved), event_lag later. */
void kvio_serve_mirror_hear(kvio_serve_mirror_t *mirror, kvio_router_t *router);
/* Notes a request sent to rank: its load counts until the rank says it took
 * it, and its prompt blocks count as the rank's until then. */
kvio_status_t kvio_serve_mirror_dispatched(kvio_serve_mirror_t *mirror, uint32_t rank,
                                           const kvio_engine_request_t *request);
uint64_t kvio_serve_mirror_states(const kvio_serve_mirror_t *mirror);
/* Requests sent to rank so far (kvio_serve_mirror_dispatched calls). */
uint64_t kvio_serve_mirror_sent(const kvio_serve_mirror_t *mirror, uint32_t rank);
/* The view borrows mirror. */
void kvio_serve_mirror_view(kvio_serve_mirror_t *mirror, kvio_router_view_t *view_p);

/* A batch of requests for one serve rank, reused batch after batch. */
typedef struct kvio_serve_batch {
    kvio_wire_writer_t out; /* header, then each request and its hashes */
    uint32_t count;
} kvio_serve_batch_t;

kvio_status_t kvio_serve_batch_add(kvio_serve_batch_t *batch,
                                   const kvio_engine_request_t *request);
/* Writes the header (origin_ns: the client's time zero; last: nothing more
 * follows); data and length are then the message. */
kvio_status_t kvio_serve_batch_seal(kvio_serve_batch_t *batch, int64_t origin_ns, bool last);
void kvio_serve_batch_reset(kvio_serve_batch_t *batch);
void kvio_serve_batch_fini(kvio_serve_batch_t *batch);

/* Calls each for every request of a batch message (its hashes, copied
 * into buffer for alignment, are borrowed for the call). */
typedef kvio_status_t (*kvio_serve_batch_each_t)(void *context,
                                                 const kvio_engine_request_t *request);
kvio_status_t kvio_serve_batch_read(const void *blob, size_t length,
                                    kvio_serve_batch_each_t each, void *context,
                                    kvio_hash_buffer_t *buffer, int64_t *origin_ns_p,
                                    bool *last_p);

/* The client rank's report (from kvio_serve_client_pack): recognised, and
 * as JSON (generated, routed_per_rank, state_messages, router). */
bool kvio_serve_client_blob(const void *blob, size_t length);
json_t *kvio_serve_client_json(const void *blob, size_t length);
/* Its router's decisions (kv_events: routing.*) into result. */
void kvio_serve_client_routing_fill(kvio_result_t *result, const void *blob, size_t length);
json_t *kvio_serve_client_counts_json(const char *where, const char *router,
                                      uint64_t generated, const uint64_t *routed,
                                      uint32_t num_ranks, uint64_t states);


/* ---------- the front end's side for serve ranks (serve/frontend.c) ---------- */

/* A request submitted and not yet taken by its rank: the engine request
 * (its hashes owned here), the token ids of its full blocks (for KV
 * events; NULL without them) and its listener. */
typedef struct kvio_frontend_pending {
    kvio_engine_request_t request;
    kvio_hash_t *hashes;
    uint32_t *block_tokens;
    kvio_frontend_listener_t listener;
    uint64_t abort_epoch;   /* the front end's abort-all count when it was submitted */
    int64_t first_byte_ns;  /* its first byte at the server (run clock) */
    struct kvio_frontend_pending *next;
} kvio_frontend_pending_t;

void kvio_frontend_pending_free(kvio_frontend_pending_t *pending);

/* What a rank takes at a boundary: the requests queued for it (a list it
 * then owns), the ids to abort (an array it then owns; free()), a reset
 * asked for (its number, 0: none), whether the front end closed, the
 * abort-all count (every request submitted before it was asked goes:
 * those whose abort_epoch is lower) and the pause. */
typedef struct kvio_frontend_take {
    kvio_frontend_pending_t *pending;
    uint64_t *aborts;
    size_t num_aborts;
    uint64_t reset;
    bool closed;
    uint64_t abort_epoch;
    kvio_pause_t pause;
} kvio_frontend_take_t;

/* Rank rank is ready; its engine's clock reads 0 at host time origin_ns
 * (kvio_time_ns). */
void kvio_frontend_rank_ready(kvio_frontend_t *frontend, uint32_t rank, uint64_t origin_ns);

/* Whether rank rank has something to take (a cheap look, no lock). */
bool kvio_frontend_has_work(const kvio_frontend_t *frontend, uint32_t rank);

void kvio_frontend_take(kvio_frontend_t *frontend, uint32_t rank, kvio_frontend_take_t *take_p);

/* Sleeps at most ns, less when something comes for rank rank. */
void kvio_frontend_nap(kvio_frontend_t *frontend, uint32_t rank, int64_t ns);

/* Rank rank did reset number reset (refused: a block was in use). */
void kvio_frontend_reset_done(kvio_frontend_t *frontend, uint32_t rank, uint64_t reset,
                              bool refused);

/* Rank rank's state, and (blob, may be NULL) its publisher's message for
 * the router's mirror. */
void kvio_frontend_publish(kvio_frontend_t *frontend, uint32_t rank,
                           const kvio_frontend_state_t *state, const void *blob, size_t length);

/* The KV events sink and block size (for the ranks' sources). */
const kvio_kv_event_sink_t *kvio_frontend_events(const kvio_frontend_t *frontend);
/* The front end's router's decisions (kv_events: routing.*) into result. */
void kvio_frontend_routing_fill(kvio_frontend_t *frontend, kvio_result_t *result);
uint32_t kvio_frontend_block_size(const kvio_frontend_t *frontend);

/* Writes every submitted request as a trace line (kvio JSONL: timestamp in
 * ms, input_length, output_length, hash_ids covering prompt and output,
 * block_tokens, sequence_hash_ids) into results' trace.jsonl. Nothing when
 * the front end records none. */
kvio_status_t kvio_frontend_write_trace(const kvio_frontend_t *frontend,
                                        kvio_results_t *results, char *error_p,
                                        size_t error_len);

/* ---------- the block store: the bytes behind the engine (serve/blockstore.c) ---------- */

/* The engine decides which blocks are cached, loaded from a tier, swapped
 * or evicted; the block store moves their bytes: the KV pool's memory (host
 * or GPU; none in simulate, where only modelled tiers hold anything), the
 * blocks' owner stamps, the host swap space and the lower tiers. */
typedef struct kvio_block_store kvio_block_store_t;

typedef struct kvio_block_store_params {
    uint32_t rank;
    uint32_t num_blocks;           /* usable blocks, ids 1..num_blocks */
    void *memory;                  /* (num_blocks + 1) × block_bytes, or NULL: no bytes */
    bool generated;                /* memory NULL, yet emulate: each block's bytes made from
                                      its owner stamp whenever they are read (a generated
                                      pool, serve.kvcache.pool_memory) */
    struct kvio_device *device;    /* non-NULL: memory is GPU memory of this device */
    uint64_t block_bytes;
    void *swap_space;              /* host swap space of swap_blocks blocks (may be NULL) */
    uint32_t swap_blocks;
    bool verify_swaps;             /* checksum swapped blocks out and back */
    kvio_data_t data;              /* a block's bytes once they travel, made from (seed,
                                      block and its index in its request, owner) */
    uint64_t seed;
    kvio_tier_t *const *tiers;     /* lower tiers, checked in order (borrowed) */
    size_t num_tiers;
    bool async_tiers;              /* tier traffic beside the batch (tier_io: async) */
    bool waterfall;                /* placement: waterfall (kvio_tier_spill_to) */
    uint32_t chunk_blocks;         /* blocks per tier object (0 or 1: one); the tiers'
                                      objects are this many blocks' bytes */
    bool skip_saves_when_full;     /* every staging slot taken: skip the save (counted by
                                      the tiers), not wait */
    size_t load_only_tiers;        /* the last this many tiers are only loaded from, never
                                      written (P/D: the prefill ranks' blocks) */
} kvio_block_store_params_t;

/* A preempted request's blocks in the swap space (slots NULL: none). */
typedef struct kvio_swapped {
    uint32_t *slots;
    uint64_t *checksums; /* with verify_swaps, one per block */
    size_t blocks;
} kvio_swapped_t;

kvio_status_t kvio_block_store_create(const kvio_block_store_params_t *params,
                                      kvio_block_store_t **store_p, char *error_p,
                                      size_t error_len);
void kvio_block_store_destroy(kvio_block_store_t *store);

/* True when blocks have bytes (emulate). */
bool kvio_block_store_has_bytes(const kvio_block_store_t *store);

/* The first copy error a pool hook met since the last clear (hooks cannot
 * return one); KVIO_OK when none. */
kvio_status_t kvio_block_store_error(const kvio_block_store_t *store);
void kvio_block_store_clear_error(kvio_block_store_t *store);

/* Blocks ids[first..count) now belong to request id at those indices: their
 * owner stamps are recorded (written when the bytes are next read). */
void kvio_block_store_own(kvio_block_store_t *store, const uint32_t *ids, size_t first,
                          size_t count, uint64_t id);

/* Writes the recorded bytes of blocks (their owners' KV and stamps) that
 * something outside the store is about to read (P/D staging). */
void kvio_block_store_materialize(kvio_block_store_t *store, const uint32_t *blocks,
                                  size_t count);

/* The run stopped (serve.drain_timeout, a signal): the tier traffic still
 * queued is dropped (each save counted in its tiers' cut_puts, each load
 * done with nothing), a load under way ends after its batch, and this
 * returns once the batch under way is done; so the tiers' drain after a
 * run is one batch, not every staged save and whole prompts' loads.
 * Nothing without an I/O thread. */
void kvio_block_store_cut(kvio_block_store_t *store);

/* Emulate: the run ends for the tiers at host time until_ns (kvio_time_ns;
 * the drain's cap): past it no tier transfer begins, inside an engine step
 * or on the I/O thread; a save is counted in its tiers' cut_puts, a load
 * ends with what it has (the rest is computed), and a step waiting for a
 * staging slot stops waiting. 0: no end. */
void kvio_block_store_until(kvio_block_store_t *store, uint64_t until_ns);

/* A block whose hash entered (write-through tiers) or is leaving (write-back
 * tiers) the prefix index: written to every tier of that write policy that
 * lacks it. blocks holds the pool blocks of the object hash names: the
 * block, or with chunks (chunk_blocks > 1, write-through only) the chunk's
 * blocks in order, hash being its last one's. In step (tier_io: sync) the tiers' time adds to *tier_ns_p.
 * Beside the batch (async) it does not: in simulate the save takes the link
 * to the tiers when the iteration ends (kvio_block_store_saves_at); in
 * emulate the block is copied to a staging slot and the store's I/O thread
 * writes it; with every slot taken the engine waits for one, and that wait
 * adds to *tier_ns_p (the tiers' backpressure), or with skip_saves_when_full
 * the save is skipped (kvio_tier_count_skipped). */
void kvio_block_store_cache(kvio_block_store_t *store, const uint32_t *blocks, kvio_hash_t hash,
                            int policy, int64_t *tier_ns_p);

/* How many blocks of a request, from block first on and before block end,
 * some tier holds (hashes: the request's; with chunks, whole chunks only,
 * the first of them the one block first is in); a wait for the I/O
 * thread's batch in flight adds to *tier_ns_p. And how many tiers there
 * are. */
size_t kvio_block_store_in_tiers(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                 size_t first, size_t end, int64_t *tier_ns_p);
size_t kvio_block_store_num_tiers(const kvio_block_store_t *store);

/* Loads up to wanted blocks (hashes) from the tiers into the pool blocks
 * ids, stopping at the first miss; *loaded_p says how many came, their time
 * adds to *tier_ns_p. first: hashes[0]'s block index in its request (with
 * chunks, the load reads whole chunks and keeps the blocks from first on;
 * wanted ends at a chunk's end, as kvio_block_store_in_tiers counts). An
 * error only for a failed GPU copy or memory. */
kvio_status_t kvio_block_store_load(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                    const uint32_t *ids, size_t first, uint32_t wanted,
                                    uint32_t *loaded_p, int64_t *tier_ns_p);

/* Runs fn(context) under the tiers' lock (the I/O thread keeps off). */
void kvio_block_store_with_tiers(kvio_block_store_t *store, void (*fn)(void *context),
                                 void *context);

/* A load beside the batch (tier_io: async), as vLLM's KV connectors load:
 * the request waits for its blocks while the others run. */
typedef struct kvio_kv_load kvio_kv_load_t;

/* Starts loading up to wanted blocks (hashes, copied) into the pool blocks
 * ids (copied), stopping at the first miss. now_ns: the engine's clock. In
 * simulate the tiers' model times it on the store's one link to them, after
 * the loads and saves before it (handoff, a P/D request's: a layer-wise
 * transfer may start on the link when its prefill began, and ends no sooner
 * than its last layer's share after the prefill's end); in emulate the I/O
 * thread moves the bytes while iterations run. */
kvio_status_t kvio_block_store_load_start(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                          const uint32_t *ids, size_t first, uint32_t wanted,
                                          int64_t now_ns, const kvio_engine_handoff_t *handoff,
                                          kvio_kv_load_t **load_p);

/* Whether the load has ended by now_ns; then *loaded_p blocks came. A
 * failed GPU copy is the store's error (kvio_block_store_error). */
bool kvio_block_store_load_done(kvio_block_store_t *store, kvio_kv_load_t *load, int64_t now_ns,
                                uint32_t *loaded_p);

/* When the load ends when that is known ahead (simulate), else -1: look
 * again. */
int64_t kvio_block_store_load_end_ns(const kvio_kv_load_t *load);

/* The blocks a load was asked for. */
uint32_t kvio_block_store_load_wanted(const kvio_kv_load_t *load);

/* Frees a load (one not yet done is waited for first). */
void kvio_block_store_load_free(kvio_block_store_t *store, kvio_kv_load_t *load);

/* Ends a load before it is done, as SGLang HiCache's prefetch policies
 * do: *loaded_p gets the blocks already loaded (simulate: those the link
 * has carried by now_ns), the rest are left to compute, and the load is
 * freed (emulate: by the I/O thread, once the batch in flight is done;
 * then true, and those blocks' bytes may still arrive). */
bool kvio_block_store_load_stop(kvio_block_store_t *store, kvio_kv_load_t *load, int64_t now_ns,
                                uint32_t *loaded_p);

/* Simulate, tier_io: async: the saves of the iteration ending at end_ns
 * take the link to the tiers after it. */
void kvio_block_store_saves_at(kvio_block_store_t *store, int64_t end_ns);

/* Waits until the I/O thread has written and loaded everything asked of it
 * (tier statistics are read after this). */
void kvio_block_store_settle(kvio_block_store_t *store);

/* Free swap-space blocks. */
uint32_t kvio_block_store_swap_room(const kvio_block_store_t *store);

/* Copies count blocks (ids) out to swap slots (checksummed with
 * verify_swaps) into *swapped; the copy's time in *real_ns_p. On failure
 * *swapped holds nothing and the swap space is as it was. */
kvio_status_t kvio_block_store_swap_out(kvio_block_store_t *store, const uint32_t *ids,
                                        size_t count, kvio_swapped_t *swapped,
                                        int64_t *real_ns_p);

/* Copies a swapped request's blocks back into ids, except the first
 * resident ones the pool still held, counting checksum mismatches in
 * *failures_p; releases its slots. */
kvio_status_t kvio_block_store_swap_in(kvio_block_store_t *store, kvio_swapped_t *swapped,
                                       const uint32_t *ids, size_t count, size_t resident,
                                       uint64_t *failures_p, int64_t *real_ns_p);

/* Frees what *swapped holds without returning slots (a request destroyed
 * with the engine). */
void kvio_block_store_swap_forget(kvio_swapped_t *swapped);

/* Returns a swapped request's slots to the swap space unread (an aborted
 * request) and frees what *swapped holds. */
void kvio_block_store_swap_release(kvio_block_store_t *store, kvio_swapped_t *swapped);

#endif
