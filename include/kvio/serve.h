/* Serve ranks as a whole: the `serve:` section (engine, scheduler, KV cache,
 * router, closed-loop concurrency), the router that spreads requests over
 * serve ranks, and the simulate-mode driver that runs a stream through them
 * on a virtual clock and reports the serving metrics. */
#ifndef KVIO_SERVE_H
#define KVIO_SERVE_H

#include "kvio/config.h"
#include "kvio/cost.h"
#include "kvio/data.h"
#include "kvio/engine.h"
#include "kvio/events.h"
#include "kvio/result.h"
#include "kvio/results.h"
#include "kvio/sched.h"
#include "kvio/status.h"
#include "kvio/stream.h"
#include "kvio/update.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>


/* The executors, found by name (serve/executors.c): virtual (simulate's
 * clock), realtime (emulate's CPU wait), gpu (a spin kernel per
 * iteration). The mode and device choose one; `kvio list` shows them. */
extern const kvio_registry_t kvio_executors;
/* The `serve.router` section: a router by name, with its own options
 * (serve.router: {policy: prefix_affinity, prefix_affinity: {load_cap: 8}}),
 * and how late the ranks' KV events reach a router that hears them
 * (kv_events): an event of time t is delivered at t + event_lag. */
typedef struct kvio_router_config {
    kvio_choice_t policy; /* of kvio_routers */
    int64_t event_lag_ns; /* >= 0 */
} kvio_router_config_t;

extern const kvio_opt_t kvio_router_options[];

/* Every router kvio has. */
extern const kvio_registry_t kvio_routers;

/* The `serve:` section. */
typedef struct kvio_serve_config {
    kvio_engine_config_t engine;
    kvio_sched_config_t scheduler;
    kvio_kvcache_section_t kvcache;
    kvio_router_config_t router;
    int64_t max_concurrency; /* 0: open loop (the stream's arrival times) */
    /* Emulate: serving goes on at most this long once the arrivals have
     * ended; the requests still in flight then are cut (drain_cut_requests;
     * 0: no cap). */
    int64_t drain_timeout_ns;
} kvio_serve_config_t;

extern const kvio_opt_t kvio_serve_options[];

/* The `slo:` section (goodput counts requests that meet every bound). */
typedef struct kvio_slo_config {
    int64_t ttft_ns;
    int64_t tpot_ns;
} kvio_slo_config_t;

extern const kvio_opt_t kvio_slo_options[];

/* The `pd:` section: prefill/decode disaggregation (ranks.prefill and
 * ranks.decode). A prefill rank computes each prompt; its KV then moves
 * over the P/D link to the decode rank the router picks, which loads what
 * its own pool lacks and decodes. */
typedef enum { KVIO_PD_PULL = 0, KVIO_PD_PUSH = 1 } kvio_pd_transfer_t;
typedef enum { KVIO_PD_LINK_NIC = 0, KVIO_PD_LINK_GPU = 1, KVIO_PD_LINK_HOST = 2 } kvio_pd_link_kind_t;
typedef enum { KVIO_PD_VERSION_ANY = 0, KVIO_PD_VERSION_CONSISTENT = 1 } kvio_pd_version_t;

typedef struct kvio_pd_config {
    int transfer;        /* kvio_pd_transfer_t */
    bool layerwise;      /* each layer's KV leaves as the prefill computes it */
    int link;            /* kvio_pd_link_kind_t: whose bandwidth the transfer gets */
    double bandwidth;    /* bytes/s per decode rank's link (0: the link's) */
    int64_t latency_ns;  /* per transfer */
    kvio_router_config_t router; /* picks each request's decode rank */
    int version;         /* kvio_pd_version_t */
    uint64_t staging;    /* emulate: each prefill rank's outbox, bytes (0: as its pool) */
    int64_t local_prefill_tokens; /* simulate: a request whose prompt its decode rank lacks
                                     fewer tokens of is prefilled there (Dynamo's conditional
                                     disaggregation; 0: never) */
    int64_t corrupt_every;      /* fault injection (emulate): every Nth staged block changed
                                   after its checksum was taken (0: none) */
    int64_t decode_dies_after;  /* fault injection (emulate): the first decode rank fails
                                   after taking N handoffs (0: never) */
} kvio_pd_config_t;

extern const kvio_opt_t kvio_pd_options[];

/* The P/D link's bandwidth (bytes/s) and latency: the section's, else the
 * link's default (nic: one 400 Gb/s NIC per GPU; gpu: the GPU's link; host:
 * its host link, each way) and 20 us, 5 us or 10 us. */
void kvio_pd_link_model(const kvio_pd_config_t *config, const kvio_gpu_t *gpu,
                        double *bandwidth_p, int64_t *latency_ns_p);

/* ---------- router ---------- */

typedef struct kvio_router kvio_router_t;

kvio_status_t kvio_router_create(const kvio_router_config_t *config, kvio_router_t **router_p);
void kvio_router_destroy(kvio_router_t *router);

/* What a router sees of the serve ranks: the engines themselves (simulate)
 * or the state the ranks publish every iteration (emulate, where the client
 * mirrors it). load counts waiting + running requests; cached_prefix is in
 * tokens and never covers the last prompt token. */
typedef struct kvio_router_view {
    void *context;
    uint32_t block_size;
    uint32_t (*load)(void *context, uint32_t rank);
    size_t (*cached_prefix)(void *context, uint32_t rank, const kvio_hash_t *hashes,
                            size_t num_hashes, uint32_t prompt_tokens);
    uint64_t (*active_decode_blocks)(void *context, uint32_t rank);
    uint32_t (*free_blocks)(void *context, uint32_t rank); /* may be NULL: not known */
    int64_t now_ns; /* the router's clock: the events of time <= now_ns - event_lag are in */
} kvio_router_view_t;

/* Picks the serve rank for a request from what view shows of num_ranks
 * ranks. A router with an index of the ranks' blocks (kv_events) first
 * takes in the events due by view->now_ns; when its index said the chosen
 * rank held a prefix that view's cached_prefix no longer shows (the rank
 * evicted it within the lag), the route counts as stale. */
uint32_t kvio_router_choose_view(kvio_router_t *router, const kvio_router_view_t *view,
                                 uint32_t num_ranks, const kvio_engine_request_t *request);

/* Whether the router keeps an index fed by the ranks' KV events (then the
 * run hands it every BlockStored / BlockRemoved with kvio_router_event). */
bool kvio_router_hears_events(const kvio_router_t *router);

/* Serve rank rank's block hash entered its prefix index (stored) or left
 * it, at now_ns on the clock view->now_ns reads: queued, and delivered to
 * the router's index event_lag later. Events come in time order. */
void kvio_router_event(kvio_router_t *router, uint32_t rank, kvio_hash_t hash, bool stored,
                       int64_t now_ns);

/* What a router's routing decisions were: how many it made, how many went
 * to a rank its index said held a prefix of the request (indexed), how
 * many of those the rank no longer held (stale), and the first failure of
 * its index (KVIO_ERR_NOMEM: the run must fail). */
typedef struct kvio_router_stats {
    bool indexed;        /* the router keeps an index (else the counts are 0) */
    bool hears_events;   /* fed by KV events (kv_events; else lag and events are 0) */
    int64_t event_lag_ns;
    uint64_t decisions;
    uint64_t indexed_routes;
    uint64_t stale_routes;
    uint64_t events;     /* events delivered to the index */
    kvio_status_t status;
} kvio_router_stats_t;

void kvio_router_stats(const kvio_router_t *router, kvio_router_stats_t *stats_p);

/* ---------- simulate-mode driver ---------- */

/* What serving measured, as data, for what the run computes from it
 * (rank 0): every finished request, in the order they finished (a coupled
 * emulate run: rank by rank), and what updates cost the engines. */
/* One engine iteration as the update views need it (ns since the run's
 * start; end: start plus its planned length). */
typedef struct kvio_serve_step_record {
    uint32_t rank;        /* world rank */
    uint32_t decode_seqs; /* sequences that produced a token in it */
    int64_t start_ns, end_ns;
} kvio_serve_step_record_t;

/* Every gap between two tokens of the measured requests (vllm.json's
 * itls): at most KVIO_SERVE_ITLS_MAX of them in a run, shared among the
 * serve ranks; past it they are counted in dropped, not kept. */
#define KVIO_SERVE_ITLS_MAX (4u << 20)
typedef struct kvio_serve_itls {
    kvio_itl_record_t *records; /* malloc'd; free() */
    uint64_t count, dropped;
} kvio_serve_itls_t;

/* Moves metrics' gaps into itls (which may be NULL: they stay). */
void kvio_serve_itls_take(kvio_engine_metrics_t *metrics, kvio_serve_itls_t *itls);

/* One measured request as the latencies are computed from it (rank 0
 * keeps every one: vllm.json's lists and the percentiles come from them). */
typedef struct kvio_request_sample {
    uint64_t id;
    int64_t arrival_ns, first_token_ns, finish_ns;
    uint32_t input_tokens, output_tokens;
    uint32_t rank; /* world rank */
} kvio_request_sample_t;

typedef struct kvio_serve_samples {
    kvio_request_sample_t *items; /* malloc'd; kvio_serve_samples_free */
    size_t count, capacity;
    kvio_status_t status; /* KVIO_ERR_NOMEM once one could not be kept */
} kvio_serve_samples_t;

/* Keeps a finished request if it was measured (samples may be NULL). */
void kvio_serve_samples_add(kvio_serve_samples_t *samples,
                            const kvio_engine_finished_t *finished);
void kvio_serve_samples_free(kvio_serve_samples_t *samples);

/* A sample's time per output token after the first (s); NAN for one token. */
double kvio_request_sample_tpot_s(const kvio_request_sample_t *sample);

/* The samples' TTFT, TPOT (requests of more than one token) or E2EL, in
 * seconds, of rank (UINT32_MAX: every rank) into values (room for every
 * sample); returns how many. */
typedef enum { KVIO_SAMPLE_TTFT, KVIO_SAMPLE_TPOT, KVIO_SAMPLE_E2EL } kvio_sample_value_t;
size_t kvio_serve_sample_values(const kvio_serve_samples_t *samples, uint32_t rank,
                                kvio_sample_value_t which, double *values);

/* Statistics of count values as numpy computes them (vLLM's benchmark):
 * values sorted in place and borrowed as sorted; mean, population std,
 * max. Percentiles: kvio_percentile_linear(sorted, count, p). */
typedef struct kvio_latency_stats {
    const double *sorted;
    size_t count;
    double mean, std, max;
} kvio_latency_stats_t;
void kvio_serve_statistics(double *values, size_t count, kvio_latency_stats_t *stats_p);

/* The run's latency figures (TTFT, TPOT, E2EL; ITL when every gap was
 * kept) and each per_rank child's, computed from the measured requests as
 * vLLM computes them (numpy's mean, std and linear percentiles), replacing
 * the histograms' values: the one computation the table, summary.json and
 * vllm.json all show. */
struct kvio_result;
kvio_status_t kvio_serve_latency_figures(struct kvio_result *result,
                                         const kvio_serve_samples_t *samples,
                                         const kvio_serve_itls_t *itls);

typedef struct kvio_serve_output {
    kvio_engine_finished_t *finished; /* malloc'd; kvio_serve_output_free */
    size_t num_finished;
    kvio_serve_step_record_t *steps;  /* every iteration kept (malloc'd) */
    size_t num_steps, steps_capacity;
    uint64_t steps_dropped;           /* iterations not kept (out of memory) */
    uint64_t update_recomputed_tokens;
    uint64_t update_aborted_requests;
    /* With a control: the same stream served without updates (borrowed,
     * sorted by id; NULL: none). */
    const struct kvio_serve_output *control;
} kvio_serve_output_t;

void kvio_serve_output_free(kvio_serve_output_t *output);

/* A copy of src's requests and iterations into *dst (its own memory). */
kvio_status_t kvio_serve_output_copy(kvio_serve_output_t *dst, const kvio_serve_output_t *src);

/* Orders output's finished requests by id, for kvio_serve_output_find. */
void kvio_serve_output_sort(kvio_serve_output_t *output);

/* The finished request with this id in an output sorted by id (NULL: none). */
const kvio_engine_finished_t *kvio_serve_output_find(const kvio_serve_output_t *output,
                                                     uint64_t id);

/* One request's cost of the updates: the same request with updates minus
 * without (ns; tpot_ns 0 for a single output token). */
typedef struct kvio_request_delta {
    int64_t ttft_ns, e2el_ns, max_itl_ns;
    double tpot_ns;
    int64_t cached_tokens, recomputed_tokens;
} kvio_request_delta_t;

kvio_request_delta_t kvio_request_delta(const kvio_engine_finished_t *with,
                                        const kvio_engine_finished_t *without);

/* True when the updates changed anything of the request. */
bool kvio_request_delta_any(const kvio_request_delta_t *delta);

typedef struct kvio_serve_run {
    const kvio_serve_config_t *serve;
    const kvio_model_t *model;      /* resolved */
    const kvio_gpu_t *gpu;          /* resolved */
    const kvio_cost_config_t *cost;
    uint32_t num_ranks;
    uint64_t seed;
    kvio_slo_t slo;
    int64_t warmup_ns;              /* requests arriving earlier are not measured */
    int64_t warmup_requests;        /* the first N requests are not measured */
    kvio_stream_t *stream;          /* borrowed; drained */
    /* Emulate: how long the arrivals last from t0 (0: as long as the stream
     * has requests); serving ends serve->drain_timeout_ns after this or the
     * arrivals' end, whichever is later. */
    int64_t duration_ns;
    int64_t rank_timeout_ns;        /* emulate: longest silence of a live rank (0: 30 s) */
    uint64_t num_requests;          /* the stream's length when known (progress), else 0 */
    kvio_results_t *results;        /* borrowed; requests.csv and iterations.csv (may be NULL) */
    volatile sig_atomic_t *stop;    /* set asynchronously to stop early (may be NULL) */
    kvio_event_trace_t *events;     /* borrowed; one event per iteration and swap (may be NULL) */
    const struct kvio_device_config *device; /* emulate: KV pool memory (NULL: host) */
    /* Coupled run: this rank's runtime handle (NULL elsewhere). Serve rank i
     * is world rank first_serve_rank + i (0 outside coupled runs), the index
     * that picks its GPU as the transports pick theirs; with a client rank
     * (client_rank > 0, its world rank) it takes its requests from the
     * client instead of a share of its own stream. kvio_serve_emulate's
     * ranks without trainers: client_rank num_ranks puts a client rank
     * after the serve ranks, which routes the stream over them. */
    struct kvio_rte *rte;
    int client_rank;
    /* Serve rank i is world rank first_serve_rank + i in every file the run
     * writes (requests.csv, iterations.csv, events), so they join with
     * updates.csv: the train ranks come first. */
    int first_serve_rank;
    /* The run's start on rank 0's clock, which every time counts from
     * (coupled runs, set after the start barrier; 0: serving's own start). */
    int64_t t0_ns;
    /* Rank 0's record of the start (kvio_start_json_set) goes here (may be
     * NULL; not in coupled runs, whose ranks report to kvio_updates_run). */
    json_t *start;
    /* Simulate mode's coupled run (NULL and 0 elsewhere): the model updates
     * on the virtual clock (kvio_updates_run's records, world ranks), the
     * run's own records, which serving completes. A request takes the
     * version active on its rank when it arrives; with stall_for_updates a
     * rank starts no iteration between an update's notification and its
     * activation. kvio_serve_simulate writes into each record its rank took
     * when the engine took it (t_activated_ns: the first iteration boundary
     * after the scheduled activation, at once on an idle rank; with
     * update.in_flight: wait once the running requests drained) and adds to
     * stall_ns the serving time it cost by cause. A record's scheduled
     * activation is read before it is overwritten (a rank takes its updates
     * in version order). */
    kvio_update_record_t *updates;
    size_t num_updates;
    bool stall_for_updates;
    /* The training step each version holds (version v: version_steps[v];
     * version 0, the initial weights, and any missing: step 1), which with
     * loss gives the inference loss of the requests it served. */
    const double *version_steps;
    size_t num_version_steps;
    const struct kvio_loss_curve *loss;
    /* Runs with model updates, both modes: what an activated version does
     * to the engine (the prefix cache, running requests); NULL: none. */
    const kvio_update_config_t *update;
    /* Simulate mode with updates (NULL: not wanted): kvio_serve_simulate
     * adds to it, per serve rank, the time the rank spent draining or with
     * its pool lent (the schedule's inference stall per rank). */
    int64_t *drain_stall_ns;
    /* Simulate mode (may be NULL): filled with what serving measured. */
    kvio_serve_output_t *output;
    /* Emulate (may be NULL): requests come from this front end (kvio serve)
     * instead of the stream; with several serve ranks it routes them, no
     * client rank. Borrowed. */
    struct kvio_frontend *frontend;
    /* Simulate mode (may be NULL): the same stream served without updates
     * (finished sorted by id); requests.csv then carries each request's
     * difference from it (KVIO_REQUESTS_CONTROL_HEADER). */
    const kvio_serve_output_t *control;
    /* Keep the measured requests' gaps between tokens (kvio_serve_itls_t),
     * and, on rank 0, where they go (may be NULL). */
    bool keep_itls;
    kvio_serve_itls_t *itls;
    /* Rank 0 (may be NULL): every measured request (kvio_serve_samples_t). */
    kvio_serve_samples_t *samples;
    /* Prefill/decode disaggregation (simulate): serve ranks 0..num_prefill-1
     * prefill, the others decode (num_prefill 0: every rank does both). */
    uint32_t num_prefill;
    const kvio_pd_config_t *pd;
    /* Emulate: what KV blocks hold when their bytes travel (the workload's
     * data:; NULL: random). */
    const kvio_data_t *data;
} kvio_serve_run_t;

/* The inference loss of the served requests into result: served[v]
 * requests finished on version v (num_versions of them); each costs
 * L(step of v) on loss_curve, version v holding step version_steps[v] (version
 * 0, the initial weights, and any missing or beyond num_version_steps:
 * step 1). Sets cumulative_inference_loss, mean_inference_loss and
 * served_by_version. */
void kvio_serve_loss_fill(struct kvio_result *result, const double *version_steps,
                          size_t num_version_steps, const struct kvio_loss_curve *loss_curve,
                          const uint64_t *served, size_t num_versions);

/* vLLM's batch limits for the GPU (EngineArgs.get_batch_defaults, for the
 * OpenAI API server): 1024 sequences and 8192 tokens on a GPU of 70 GiB or
 * more that is not an A100 (H100, H200, MI300X), else 256 and 2048. */
kvio_engine_batch_defaults_t kvio_serve_batch_defaults(const kvio_gpu_t *gpu);
/* The limits a run gets: the engine section's, its zeros taking the GPU's. */
kvio_engine_batch_defaults_t kvio_serve_batch_limits(const kvio_engine_config_t *engine,
                                                     const kvio_gpu_t *gpu);

/* KV blocks per serve rank from the kvcache section, model and GPU (blocks,
 * capacity, or GPU memory after the weights), with the error's numbers. */
kvio_status_t kvio_serve_kv_blocks(const kvio_serve_config_t *serve, const kvio_model_t *model,
                                   const kvio_gpu_t *gpu, int64_t tensor_parallel,
                                   uint32_t *blocks_p, char *error_p, size_t error_len);

/* Blocks per object in the lower tiers (serve.kvcache.chunk_tokens; 1 when
 * it is 0). A tier's objects are this many blocks' bytes. */
uint32_t kvio_serve_chunk_blocks(const kvio_kvcache_section_t *kvcache);

/* Runs the stream through num_ranks engines on a virtual clock until every
 * request finished. The serving figures go into result (the caller's);
 * *complete_p is false when stopped early. */
kvio_status_t kvio_serve_simulate(const kvio_serve_run_t *run, struct kvio_result *result,
                                  bool *complete_p, char *error_p, size_t error_len);

/* Runs the stream through num_ranks engines in real time (emulate mode):
 * one thread per serve rank with real KV memory, swaps and tier traffic,
 * and with client_rank (num_ranks) a client rank that routes the stream
 * over them (else each takes its share). Metrics as for
 * simulate, plus `executor` (timing error, engine overhead), swap copy time
 * and per-tier traffic. */
kvio_status_t kvio_serve_emulate(const kvio_serve_run_t *run, struct kvio_result *result,
                                 bool *complete_p, char *error_p, size_t error_len);

/* Refuses, with the numbers, KV pools that this machine's memory cannot
 * hold (checked before any emulate run starts). *host_bytes_p (may be NULL)
 * receives the host memory the serve ranks' pools and swap space take, for
 * the checks of what else the run holds. */
kvio_status_t kvio_serve_emulate_preflight(const kvio_serve_run_t *run, uint64_t *host_bytes_p,
                                           char *error_p, size_t error_len);

/* ---------- emulate's set-up: its progress and its figures ---------- */

/* Starts the set-up's clock (once per run, before any rank sets up). */
void kvio_serve_setup_begin(void);

/* A line of the set-up's progress on stderr (not under -q), with the time
 * since kvio_serve_setup_begin: "kvio: set-up 1.2 s: <what>". */
void kvio_serve_setup_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One rank's set-up, as the run's start records it. */
typedef struct kvio_serve_setup_entry {
    int rank;
    const char *role;  /* "train", "serve", "client" */
    double setup_s;    /* from its start to t0 */
    const char *host;  /* where it ran (NULL: not said; under mpirun each says) */
} kvio_serve_setup_entry_t;

/* The ranks' set-up, every orchestrator's one record of it: into result
 * (may be NULL) an entry of metrics.setup[] per rank (rank, role, setup_s)
 * and setup_s, the slowest rank's; into start (may be NULL) the run's t0 on
 * the wall clock and every rank (kvio_start_json_set). */
void kvio_serve_setup_record(struct kvio_result *result, json_t *start, int64_t t0_wall_ns,
                             const kvio_serve_setup_entry_t *ranks, size_t count);

/* The stop came during set-up: result (may be NULL) says so
 * (setup_interrupted; the verdict then calls the run incomplete), error_p
 * says what a run stopped before t0 has (nothing served or measured), after
 * who ("emulate: " or ""). Returns KVIO_ERR_INTERRUPTED. */
kvio_status_t kvio_serve_setup_interrupted(struct kvio_result *result, const char *who,
                                           char *error_p, size_t error_len);

/* ---------- a serve rank inside the coupled run (emulate with trainers) ---------- */

typedef struct kvio_serve_rank kvio_serve_rank_t;

/* Creates serve rank serve_index of num_serve: real KV memory, tiers and an
 * engine (none without run->serve). run->stream is this rank's own copy of
 * the stream; it takes requests i with i mod num_serve == serve_index, or
 * with a client rank the client's. Caller destroys. */
kvio_status_t kvio_serve_rank_create(const kvio_serve_run_t *run, uint32_t serve_index,
                                     uint32_t num_serve, kvio_serve_rank_t **rank_p,
                                     char *error_p, size_t error_len);
void kvio_serve_rank_destroy(kvio_serve_rank_t *rank);

/* Runs the rank's serve loop until serving is over (its stream share, or
 * the client rank's last batch, served) and, with a receiver (may be NULL),
 * until the updates are over; then fills *result_p (may be NULL) with the
 * receiver's records, the iterations run and the inference stall. A rank
 * created without run->serve runs emulated iterations of
 * update.iteration, until the updates are over (and, with the trainer
 * lost, until serve_until_ns). With a client rank that failed, ended or
 * fell silent (no heartbeat for the runtime's timeout) before its last
 * batch, it takes no more requests and serves on (what it served is kept;
 * kvio_serve_rank_client_lost says why); a slow client is waited for. stop (run->stop) ends serving after the
 * iteration under way; the updates are still taken to their end. */
kvio_status_t kvio_serve_rank_serve(kvio_serve_rank_t *rank, kvio_update_receiver_t *receiver,
                                    int64_t serve_until_ns, kvio_update_result_t *result_p,
                                    char *error_p, size_t error_len);

/* The rank's measurements as a blob for rank 0 (caller frees). */
/* Why this rank's client rank was lost (it stopped taking requests and
 * served on), or NULL while the client is not lost or there is none. */
const char *kvio_serve_rank_client_lost(const kvio_serve_rank_t *rank);

kvio_status_t kvio_serve_rank_pack(const kvio_serve_rank_t *rank, void **blob_p,
                                   size_t *length_p);

/* P/D (emulate): a rank that is not a serve rank (the trainer) takes part
 * in the serve ranks' collective set-up of their KV link. */
kvio_status_t kvio_serve_pd_bystander(struct kvio_rte *rte, char *error_p, size_t error_len);

/* P/D (emulate): the first num_prefill blobs are prefill ranks' (their
 * requests are their decodes'), and metrics.pd says what moved. */
typedef struct kvio_serve_pd_merge {
    const kvio_pd_config_t *config;
    uint32_t num_prefill;
    uint32_t block_size;
    uint64_t kv_bytes_per_token;
    int64_t run_ns; /* the run's length (the pools' utilisation) */
} kvio_serve_pd_merge_t;

/* On rank 0: merges the serve ranks' blobs, from world rank first_rank on
 * (and the client rank's, if one is among them) into result's serving figures,
 * requests.csv and
 * iterations.csv in results (may be NULL) and iteration events (events may
 * be NULL), and returns the requests finished per model version (malloc'd;
 * caller frees) and, in *output_p (may be NULL; caller frees), the finished
 * requests and the updates' costs, in *itls_p (may be NULL) the gaps
 * between tokens and in samples (may be NULL) the measured requests.
 * frontend: the requests came from a front end (kvio serve): requests.csv
 * has their times at the server, and the pick-up's statistics are set. */
kvio_status_t kvio_serve_ranks_merge(void *const *blobs, const size_t *lengths, size_t count,
                                     uint32_t first_rank, kvio_results_t *results,
                                     kvio_event_trace_t *events, struct kvio_result *result,
                                     uint64_t **served_p, size_t *num_versions_p,
                                     kvio_serve_output_t *output_p, kvio_serve_itls_t *itls_p,
                                     kvio_serve_samples_t *samples,
                                     const kvio_serve_pd_merge_t *pd, bool frontend,
                                     char *error_p, size_t error_len);

/* ---------- the client rank of the coupled run (ranks.client: 1) ---------- */

typedef struct kvio_serve_client kvio_serve_client_t;

/* Creates the client of run->num_ranks serve ranks (world ranks
 * run->first_serve_rank on) over run->rte; run->stream is its stream.
 * Caller destroys. */
kvio_status_t kvio_serve_client_create(const kvio_serve_run_t *run,
                                       kvio_serve_client_t **client_p, char *error_p,
                                       size_t error_len);
void kvio_serve_client_destroy(kvio_serve_client_t *client);

/* Generates the stream in real time and sends each request to the serve
 * rank the router picks from the state ranks publish, until every serve
 * rank has finished. The stream starts once every serve rank has said it is
 * ready; a serve rank that fails or falls silent first fails the client.
 * stop (may be NULL) ends the stream early. */
kvio_status_t kvio_serve_client_run(kvio_serve_client_t *client, volatile sig_atomic_t *stop,
                                    char *error_p, size_t error_len);

/* The client's counts as a blob for rank 0 (caller frees); the merge of the
 * serve ranks' blobs recognises it. */
kvio_status_t kvio_serve_client_pack(const kvio_serve_client_t *client, void **blob_p,
                                     size_t *length_p);

#endif
