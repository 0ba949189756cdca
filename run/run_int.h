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
    char info[256];
    /* on_trainer_loss: serve. The trainer: when it was lost and why. A serve
     * rank: when it learnt so, and the version it kept serving. */
    int64_t trainer_lost_ns;
    int32_t trainer_status; /* the trainer's failure (kvio_status_t) */
    uint64_t active_version;
    char lost_reason[512];
    uint64_t num_stamps; /* weight_sync: bucket stamps after the records */
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
    json_t *metrics;
    kvio_event_trace_t *events;
    volatile sig_atomic_t *stop; /* shared by every rank thread; only read */
    json_t *start;               /* rank 0: t0 and each rank's set-up (may be NULL) */
    pthread_mutex_t *setup_lock; /* serve ranks' pools, one at a time (kvio_serve_run_t) */
    const kvio_serve_output_t *serving; /* simulate: what serving measured (NULL: none) */
} run_context_t;

/* A serve rank's engine in the coupled run: the model, GPU and its own copy
 * of the stream (each rank takes its share). */
typedef struct coupled_serve {
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_stream_t *stream;
    kvio_serve_run_t run;
    kvio_serve_rank_t *rank;
    kvio_serve_client_t *client;
} coupled_serve_t;

/* ---------- the parts of a run with model updates ---------- */

/* The coupled run's serve rank or client (run/coupled.c). */
kvio_status_t run_coupled_create(const kvio_workload_t *workload, kvio_rte_t *rte,
                                 int serve_index, int num_serve, pthread_mutex_t *setup_lock,
                                 volatile sig_atomic_t *stop, coupled_serve_t *coupled,
                                 char *error_p, size_t error_len);
void run_coupled_destroy(coupled_serve_t *coupled);
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
                               uint64_t aborted_requests, double stall_ms);

#endif
