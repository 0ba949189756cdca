/* Private to run/: what the run's files share: the interference of model
 * updates with serving, computed from the results in memory
 * (run/interference.c). */
#ifndef KVIO_RUN_INT_H
#define KVIO_RUN_INT_H

#include <jansson.h>

#include <pthread.h>
#include <signal.h>

#include "kvio/engine.h"
#include "kvio/run.h"
#include "kvio/serve.h"
#include "kvio/update.h"

/* ---------- vllm.json (run/vllm.c) ---------- */

#define RUN_VLLM_PERCENTILES_MAX 16

/* metric_percentiles ("50,90,99.9") into values; KVIO_ERR_CONFIG naming
 * the key when it is not a list of numbers in (0, 100]. */
kvio_status_t run_vllm_percentiles(const char *text, double *values, size_t max,
                                   size_t *count_p, char *error_p, size_t error_len);

/* What vllm.json is made of: the run's figures, the measured requests and
 * the gaps between their tokens (itls; NULL or incomplete: ITL from the
 * histogram and no itls list). */
typedef struct run_vllm {
    const kvio_workload_t *workload;
    const kvio_result_t *result;
    const kvio_serve_samples_t *samples;
    struct kvio_results *results;
    const kvio_serve_itls_t *itls;
    int64_t start_wall_ns;
} run_vllm_t;

/* Writes vllm.json as `vllm bench serve --save-result` writes its result,
 * and returns its keys without the per-request lists (summary.json's
 * vllm). */
kvio_status_t run_vllm_write(const run_vllm_t *source, json_t **scalars_p, char *error_p,
                             size_t error_len);

/* ---------- model updates (run/updates_*.c, run/coupled.c) ---------- */

struct kvio_results;

/* True when the workload has train and serve
 * ranks. */
bool kvio_updates_wanted(const kvio_workload_t *workload);

/* True when the serve ranks run the real-time engine while updates arrive
 * (emulate mode, update.serving: engine). */
bool kvio_updates_coupled(const kvio_workload_t *workload);

/* Simulate mode with train.transport.model.from: reads that emulate run's
 * results directory (summary.json, updates.csv) and fits the model to it
 * into workload->train.transport.model (taken_*); nothing without model.from.
 * kvio_workload_load and kvio_workload_parse call it for a simulate workload
 * with train and serve ranks; KVIO_ERR_NOT_FOUND or
 * KVIO_ERR_CONFIG with the path named when the directory does not fit. */
kvio_status_t kvio_updates_model_from(kvio_workload_t *workload, char *error_p,
                                      size_t error_len);

/* Emulate mode with weight_sync on: the buckets one update moves (the
 * model's tensors scaled to train.bytes, packed by the granularity; see
 * kvio_sync_buckets). Free with kvio_sync_plan_free. */
kvio_status_t kvio_updates_sync_buckets(const kvio_workload_t *workload, kvio_sync_plan_t *plan_p,
                                        char *error_p, size_t error_len);

/* Emulate mode with weight_sync on: the deltas its versions go as (fraction
 * 0: none), of elements of the model's weight type (element 0 when the
 * model does not resolve or its weights are not 1, 2, 4 or 8 bytes). */
kvio_delta_t kvio_updates_sync_delta(const kvio_workload_t *workload);

/* Checks what can fail before any rank starts (Redis answers, directory
 * writable, transport built, and, in emulate mode, that the weight buffers
 * fit in memory beside other_bytes the run's KV pools take). */
kvio_status_t kvio_updates_preflight(const kvio_workload_t *workload, uint64_t other_bytes,
                                     char *error_p, size_t error_len);

/* Simulate mode: the trainer's versions and each serve rank's updates on
 * the virtual clock, from the train section and the transport model (what
 * kvio_updates_run writes to updates.csv). The serve ranks serve on it. */
typedef struct kvio_updates_schedule {
    kvio_train_record_t *train;    /* one per published version, in order */
    size_t num_train;
    kvio_update_record_t *updates; /* per version, one per serve rank (world ranks) */
    size_t num_updates;
    int64_t *inference_stall_ns;   /* per serve rank (update.apply: stall) */
    int64_t end_ns;                /* the trainer's last step */
    double *version_steps;         /* the step each version holds; [0]: 0 */
    size_t num_version_steps;      /* num_train + 1 */
    kvio_sync_plan_t sync;         /* weight_sync on: every version's plan (the same) */
} kvio_updates_schedule_t;

/* Computes the schedule (deterministic: the same workload, the same
 * schedule). served (may be NULL): the run served without updates, whose
 * finished requests give the adaptive checkpoint policy its measured
 * serving rate (else the policy's prior). Free with
 * kvio_updates_schedule_free. */
kvio_status_t kvio_updates_schedule(const kvio_workload_t *workload,
                                    const kvio_serve_output_t *served,
                                    kvio_updates_schedule_t *schedule_p, char *error_p,
                                    size_t error_len);
void kvio_updates_schedule_free(kvio_updates_schedule_t *schedule);

/* The training rank: the first; serve ranks follow, then the client. */
#define TRAIN_RANK 0

/* What each rank sends to rank 0 ahead of its records. */
typedef struct rank_report {
    int32_t is_trainer;
    int32_t rank;
    uint64_t count;
    uint64_t iterations;
    uint64_t polls;
    uint64_t checksum_mismatches;
    uint64_t steps;
    int64_t inference_stall_ns;
    int64_t t_start_ns, t_end_ns;
    int64_t clock_uncertainty_ns;
    int64_t clock_offset_ns;
    int64_t setup_ns; /* from the rank's start to its arrival at the start barrier */
    int32_t interrupted; /* this rank was stopped early (SIGINT, SIGTERM) */
    char hostname[64];   /* where the rank ran (under mpirun, maybe not rank 0's host) */
    char info[256];
    /* on_trainer_loss: serve. The trainer: when it was lost and why. A serve
     * rank: when it learnt so, and the version it kept serving. */
    int64_t trainer_lost_ns;
    int32_t trainer_status; /* the trainer's failure (kvio_status_t) */
    uint64_t active_version;
    char lost_reason[512];
    char client_lost[512]; /* a serve rank: why it gave up on the client rank ("": it did not) */
    uint64_t num_stamps; /* weight_sync: bucket stamps after the records */
    /* The first serve rank: a memcpy of the update's bytes between its
     * receive slots, timed at set-up (0: not timed). The trainer: whether
     * its transport copies within one host's memory (kvio_xfer_in_memory). */
    double setup_memcpy_gbps;
    int32_t transfer_in_memory;
} rank_report_t;

/* A serve rank's report: not the trainer's, not the client rank's (the
 * client, if any, is the rank after the last serve rank). */
static inline bool is_serve_report(const rank_report_t *report, int num_serve)
{
    return !report->is_trainer && report->rank >= 1 && report->rank <= num_serve;
}

typedef struct collected {
    kvio_train_record_t *train;
    size_t num_train;
    kvio_update_record_t *updates;
    size_t num_updates;
    rank_report_t *reports;
    int num_reports;
    kvio_xfer_bucket_stamp_t *stamps; /* weight_sync: every rank's, rank by rank */
    size_t num_stamps;
    char info[256];
} collected_t;

typedef struct run_context {
    const kvio_workload_t *workload;
    kvio_results_t *results;
    kvio_result_t *result; /* rank 0: the run's figures (NULL elsewhere) */
    kvio_event_trace_t *events;
    volatile sig_atomic_t *stop; /* shared by every rank thread; only read */
    json_t *start;               /* rank 0: t0 and each rank's set-up (may be NULL) */
    const kvio_serve_output_t *serving; /* simulate: what serving measured (NULL: none) */
    kvio_serve_output_t *served_out;    /* emulate, coupled: receives what serving measured
                                           (rank 0; NULL: not wanted) */
    struct kvio_frontend *frontend;     /* emulate, coupled: the serve ranks' requests
                                           (kvio serve; NULL: the stream) */
    kvio_serve_itls_t *itls;            /* emulate, coupled: receives the gaps between
                                           tokens (rank 0; NULL: not wanted) */
    kvio_serve_samples_t *samples;      /* emulate, coupled: receives the measured
                                           requests (rank 0; NULL: not wanted) */
    /* Rank 0: why the run that ended is not complete ("": it is), e.g. the
     * ranks stopped early by a signal to them alone (NULL: not wanted). */
    char *incomplete;
    size_t incomplete_len;
} run_context_t;

/* Whether the run was asked to stop (SIGINT, SIGTERM; stop may be NULL):
 * every orchestrator's one test of it. */
static inline bool run_stop_asked(const volatile sig_atomic_t *stop)
{
    return stop != NULL && *stop;
}

/* Runs the train and serve ranks (emulate: on world; simulate: world NULL,
 * on a virtual clock), and on the process of rank 0 writes updates.csv into
 * context->results, the model-update metrics into context->result, the
 * run's start (t0, every rank's role and set-up time; see
 * kvio_start_json_set) into context->start (may be NULL) and one trace
 * event per update stage into context->events (may be NULL); those are NULL
 * on other processes. Simulate mode writes schedule (the one the serve
 * ranks served on, with the activations they took, with context->serving
 * what they measured) or, when it is NULL, kvio_updates_schedule's.
 * Emulate's coupled run moves what serving measured into
 * context->served_out (may be NULL) on rank 0. context->stop (may be NULL;
 * emulate only) ends the trainer and the serve ranks early, keeping what was
 * measured; context->frontend (may be NULL; the coupled run on the local
 * runtime): the serve ranks take their requests from it (kvio serve). */
kvio_status_t kvio_updates_run(const run_context_t *context, kvio_rte_world_t *world,
                               const kvio_updates_schedule_t *schedule, char *error_p,
                               size_t error_len);


/* ---------- the plan (run/plan.c) ---------- */

/* The world rank of serve rank 0 (the train ranks come first), and the
 * ranks of a run with model updates in emulate (train, serve, client). */
int run_first_serve_rank(const kvio_workload_t *workload);
int run_world_size(const kvio_workload_t *workload);
/* An emulate RL run's ranks (the rollout's, and the trainer's when it has
 * one: 2); 1 for any other run. */
int run_rl_ranks(const kvio_workload_t *workload);
/* The world rank of the client, which generates the stream and routes its
 * requests over the serve ranks (0: none): the coupled run's with
 * ranks.client, emulate's without trainers with several serve ranks (not
 * P/D's, nor with a front end, which routes itself). */
int run_client_rank(const kvio_workload_t *workload, bool frontend);

/* The parts one world rank runs: the one place that says what each rank of
 * a run is, asked by both modes (simulate's start, emulate's ranks). */
typedef struct run_rank_parts {
    bool train;       /* a training rank (the first) */
    bool serve;       /* a serve rank: an engine, or emulated iterations */
    bool client;      /* the client rank (the last): routes the stream */
    bool engine;      /* serve: runs the engine (not update.serving: emulated) */
    bool frontend;    /* serve: takes its requests from a front end (kvio serve) */
    bool prefill;     /* serve, P/D: computes prompts, hands their KV on */
    bool decode;      /* serve, P/D: takes the KV, generates the output */
    int serve_index;  /* serve: 0 on; else -1 */
    const char *role; /* "train", "serve" or "client" (start, set-up) */
} run_rank_parts_t;

run_rank_parts_t run_rank_parts(const kvio_workload_t *workload, bool frontend, int world_rank);

/* Which serve run the caller wants. */
typedef enum run_serve_part {
    RUN_SERVE_RUN,      /* this process's serve ranks (simulate; emulate without trainers) */
    RUN_SERVE_TWIN,     /* simulate's no-update twin of the run, writing only output */
    RUN_SERVE_RANK,     /* a serve rank or the client of emulate's coupled run */
    RUN_SERVE_EMULATED, /* an engine-less serve rank (update.serving: emulated) */
    RUN_SERVE_CHECK,    /* the serve ranks' memory, checked before the run */
} run_serve_part_t;

/* What the caller decides of one serve run; the rest is the workload's. */
typedef struct run_serve_given {
    const run_context_t *context; /* stop, front end, where results go (may be NULL) */
    const kvio_model_t *model;    /* resolved (NULL: RUN_SERVE_EMULATED) */
    const kvio_gpu_t *gpu;
    kvio_stream_t *stream;        /* the stream served (NULL: none) */
    uint64_t num_requests;        /* the stream's, when counted (0: unknown) */
    kvio_rte_t *rte;              /* a rank of the coupled run (NULL elsewhere) */
    /* RUN_SERVE_RUN in simulate with updates: the schedule served on, and
     * the twin's requests (NULL: no control); RUN_SERVE_RUN or TWIN: what
     * serving measured goes to output (may be NULL). */
    const kvio_updates_schedule_t *schedule;
    const kvio_serve_output_t *control;
    kvio_serve_output_t *output;
} run_serve_given_t;

/* Every kvio_serve_run_t of the product is made here: the plan of serving
 * from the workload (the sections, the stream, the SLO, warm-up, seed, P/D,
 * what updates do, the serve ranks' numbering beside the trainers) with
 * what given says, for part. Pointers in *run_p borrow from workload and
 * given. */
void run_plan_serve(const kvio_workload_t *workload, run_serve_part_t part,
                    const run_serve_given_t *given, kvio_serve_run_t *run_p);

/* What a rank of emulate's run with updates serves: the coupled run's
 * engine with the model, GPU and its own copy of the stream (each rank
 * takes its share), or the client; an engine-less rank's emulated
 * iterations. */
typedef struct run_rank_serve {
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_stream_t *stream;
    kvio_serve_run_t run;
    kvio_serve_rank_t *rank;
    kvio_serve_client_t *client;
} run_rank_serve_t;

/* ---------- the parts of a run with model updates ---------- */

/* A serve rank's part or the client's (parts) of emulate's run with
 * updates (run/coupled.c): in the coupled run the engine with its own copy
 * of the stream (or the client), else an engine-less rank of emulated
 * iterations. The run's t0 goes into part->run.t0_ns at the start. */
kvio_status_t run_rank_serve_create(const run_context_t *context, kvio_rte_t *rte,
                                    const run_rank_parts_t *parts, run_rank_serve_t *part,
                                    char *error_p, size_t error_len);
void run_rank_serve_destroy(run_rank_serve_t *part);
/* Rank 0: the serve ranks' reports merged into the serving metrics and the
 * cumulative inference loss; *output_p gets what serving measured. */
kvio_status_t run_coupled_metrics(const run_context_t *context, const collected_t *all,
                                  void **blobs, size_t *lengths, int size,
                                  kvio_serve_output_t *output_p, char *error_p,
                                  size_t error_len);

/* The trainer's record of version (NULL: none) (run/updates_metrics.c). */
const kvio_train_record_t *run_find_train(const collected_t *all, uint64_t version);

/* Rank 0: the updates' metrics, updates.csv and events; with serving
 * (may be NULL), what each update did to it. */
kvio_status_t run_updates_metrics(const run_context_t *context, const collected_t *all,
                                  int64_t origin_ns, const kvio_serve_output_t *serving,
                                  char *error_p, size_t error_len);

/* weight_sync's figures of one update: the last server done (ms), and the
 * bytes on the wire, from the trainer's side, forwarded (run/sync_results.c). */
void run_sync_figures(kvio_result_t *result, double update_ms, double wire_bytes,
                      double from_trainer, double forwarded);

/* Rank 0, weight_sync in emulate mode: what every bucket's stages took
 * (run/sync_results.c). */
kvio_status_t run_sync_results(const run_context_t *context, const collected_t *all,
                               const kvio_sync_plan_t *plan, int64_t origin_ns, char *error_p,
                               size_t error_len);

/* Emulate mode: every rank's part of the run (run/updates_emulate.c). */
kvio_status_t run_updates_emulate(kvio_rte_world_t *world, run_context_t *context,
                                  char *error_p, size_t error_len);

/* Per update: TTFT p50, TTFT p99 and TPOT p99 ratios (after / before), and
 * the hit rate before and after. */
#define KVIO_INTERFERENCE_VALUES 5

typedef struct kvio_interference {
    size_t num_updates, measured; /* measured: requests on both sides */
    double window_s;
    double *values;               /* num_updates x KVIO_INTERFERENCE_VALUES; NAN: none */
    double means[KVIO_INTERFERENCE_VALUES];
} kvio_interference_t;

/* Without a control: the gaps between a rank's decoding iterations that
 * overlap an update on it (its first byte on the wire to its activation)
 * against the rest, per gap and per token delayed (ITL): the figures of
 * update_interference.during_updates. */
kvio_status_t kvio_interference_during_fill(kvio_result_t *result,
                                            const kvio_serve_output_t *serving,
                                            const kvio_update_record_t *updates,
                                            size_t num_updates, int64_t origin_ns);

/* ---------- rendering a result (run/render.c) ---------- */

/* What summary.json, run.log and the table are rendered from: the run's
 * identity, its typed result, and the blocks beside metrics (extra: parts,
 * vllm, scheduling, modelled, storage, assessment; may be NULL). */
typedef struct run_summary {
    const kvio_workload_t *workload;
    const kvio_run_options_t *options;
    kvio_results_t *results;
    const kvio_result_t *result;
    json_t *host;        /* the host block taken at the start (NULL: taken now) */
    json_t *start;       /* t0 and every rank's set-up (may be NULL) */
    json_t *extra;
    uint64_t start_ns;
    bool complete;
    const char *error;   /* why it is not complete (NULL: none) */
    bool capture_log;    /* run.log gets what kvio_log captured since the start */
} run_summary_t;

/* Provenance (kvio_provenance_json) of a run: its options' command and
 * overrides, the start time, host (host, or taken now when NULL) and
 * build. A new object. */
json_t *run_provenance_json(const kvio_run_options_t *options, json_t *host, uint64_t start_ns);
/* summary.json's head: provenance, name, source, complete and error. */
json_t *run_summary_head(const kvio_workload_t *workload, const kvio_run_options_t *options,
                         json_t *host, uint64_t start_ns, bool complete, const char *error);
/* Writes summary.json (atomically) and run.log; hands summary.json to
 * options->summary_p when asked. */
kvio_status_t run_write_summary(const run_summary_t *summary, char *error_p, size_t error_len);
/* The table on stdout; what (may be NULL) is added to its title. */
void run_print_table(const run_summary_t *summary, const char *what);

/* One run (run/run.c; kvio_run's, run/entry.c) that also hands over, in emulate's
 * coupled run, what serving measured (served_out may be NULL). */
kvio_status_t run_workload(const kvio_workload_t *workload, const kvio_run_options_t *options,
                           kvio_serve_output_t *served_out, kvio_run_result_t *result_p,
                           char *error_p, size_t error_len);

/* update.control: paired in emulate (run/paired.c): --repeat pairs of the
 * coupled run and its no-update twin (the trainer steps and publishes
 * nothing), alternating, in directories under the run's; summary.json's
 * update_cost holds the paired deltas with 95 % intervals. */
kvio_status_t run_paired(const kvio_workload_t *workload, const kvio_run_options_t *options,
                         kvio_run_result_t *result_p, char *error_p, size_t error_len);

/* ---------- the updates' cost against a control (run/control.c) ---------- */

/* What one update cost, from the requests attributed to it. */
typedef struct kvio_control_update {
    uint64_t affected;         /* requests it changed */
    double added_e2el_ms;      /* their end-to-end latency, with minus without */
    int64_t recomputed_tokens; /* tokens computed again because of it */
    double hit_recovery_ms;    /* activation to the last such request that found fewer
                                  cached tokens than its twin (0: none did) */
} kvio_control_update_t;

typedef struct kvio_control_cost {
    kvio_control_update_t *per_update; /* one per update record */
    size_t num_updates;
    kvio_result_t *figures;            /* the update_cost figures (kvio_result_merge) */
} kvio_control_cost_t;

/* Pairs the requests served with updates with their twins (without, sorted
 * by id) and attributes each changed request to an update of its rank
 * (times of updates on the clock of origin_ns). */
kvio_status_t kvio_control_measure(const kvio_serve_output_t *with,
                                   const kvio_serve_output_t *without,
                                   const kvio_update_record_t *updates, size_t num_updates,
                                   int64_t origin_ns, kvio_control_cost_t *cost_p);
void kvio_control_cost_free(kvio_control_cost_t *cost);

/* Simulate's twins kept for the runs that follow (kvio compare): a twin's
 * key is the workload without what only the updates read (name, train,
 * update, weight_sync), with the stream's length. */
typedef struct kvio_control_cache kvio_control_cache_t;

kvio_control_cache_t *kvio_control_cache_create(void);
void kvio_control_cache_destroy(kvio_control_cache_t *cache);
/* The key (malloc'd JSON; NULL: out of memory). */
char *kvio_control_key(const kvio_workload_t *workload);
/* A copy of the twin of key into *twin_p, *found_p true; else nothing. */
kvio_status_t kvio_control_cache_take(kvio_control_cache_t *cache, const char *key,
                                      kvio_serve_output_t *twin_p, bool *found_p);
/* Keeps a copy of twin under key. */
kvio_status_t kvio_control_cache_put(kvio_control_cache_t *cache, const char *key,
                                     const kvio_serve_output_t *twin);
/* Twins served and kept, and twins taken from the cache. */
void kvio_control_cache_counts(const kvio_control_cache_t *cache, uint64_t *served_p,
                               uint64_t *shared_p);

/* The serving time each activated update of updates cost its rank (every
 * cause): model_updates.stall_ms_per_update's figures. */
kvio_status_t kvio_update_stall_fill(kvio_result_t *result, const kvio_update_record_t *updates,
                                    size_t num_updates);

/* The windows around each activation of updates (times on the clock of
 * origin_ns, rank 0's t0) over the finished requests. */
kvio_status_t kvio_interference_measure(const kvio_engine_finished_t *finished,
                                        size_t num_finished,
                                        const kvio_update_record_t *updates,
                                        size_t num_updates, int64_t origin_ns,
                                        int64_t window_ns, kvio_interference_t *result_p);
void kvio_interference_free(kvio_interference_t *result);

/* summary.json's update_interference, with the updates' recompute and
 * stall costs. */
json_t *kvio_interference_json(const kvio_interference_t *result, uint64_t recomputed_tokens,
                               uint64_t aborted_requests);

/* The warnings that make a run's numbers mislead (summary.json's warnings;
 * valid when there is none): overload, emulate timing error, tier errors,
 * more emulate ranks than cores. Each: kind, measured, threshold, message. */
void kvio_run_verdict(const kvio_workload_t *workload, kvio_result_t *result);

/* Whether the run fell behind the rate offered (the verdict's overload;
 * kvio compare and kvio capacity judge variants and probes by it): served
 * and offered rates into *served_p and *offered_p. */
bool kvio_run_overloaded(const kvio_workload_t *workload, const kvio_result_t *result,
                         double *served_p, double *offered_p);

/* What in the numbers comes from a model or a default (summary.json's
 * modelled): [{what, by, brief}], brief short enough for the table. */
json_t *kvio_run_modelled(const kvio_workload_t *workload, const kvio_result_t *result);

/* The tiers as storage engineers report them (run/storage.c): each
 * configured tier over the serve ranks as an entry of the result's
 * storage_tiers list (bytes, bandwidth and IOPS while busy, queue depths,
 * the worst rank's latency percentiles, its layout, engine and device), and
 * the run's cached and moved tokens per second. Nothing without tiers. */
kvio_status_t kvio_run_storage(const kvio_workload_t *workload, kvio_result_t *result);

/* The `assess:` section's options (run/storage.c). */
extern const kvio_opt_t kvio_assess_options[];

/* summary.json's assessment: each threshold of `assess:` against the
 * storage block and the hit rate, where the run has the figure, in
 * kv-cache.py's names ({criteria: [{name, target, actual, unit, passed}],
 * passed_count, total_count, passed}); NULL when nothing is judged. */
json_t *kvio_run_assess(const kvio_workload_t *workload, const kvio_result_t *result);

/* Where assess: judges the hit rate (#52: MLPerf's criterion needs long
 * runs) and the run failed it while too short to judge it: the measured
 * window (duration_s) it would need, else 0. A conversation's first turn
 * finds none of its own context (the hits are later turns'), so a closed
 * loop (stream.users) judges it once its users have gone through a mean
 * conversation each (the turns' mean of requests): users × that mean at
 * the run's own request throughput. */
double kvio_run_hit_rate_needs_s(const kvio_workload_t *workload, const kvio_result_t *result);

/* The hit rate assess: judges (0: none): hit_rate, or with mlperf
 * kv-cache.py's 30 %. */
double kvio_run_assessed_hit_rate(const kvio_assess_config_t *assess);

#endif
