/* A whole run as a library call: the workload configuration (composed from
 * each module's option table), loading it from a file or preset with
 * overrides, and kvio_run(), which the CLI and the tests both call. */
#ifndef KVIO_RUN_H
#define KVIO_RUN_H

#include "kvio/config.h"
#include "kvio/rte.h"
#include "kvio/result.h"
#include "kvio/status.h"
#include "kvio/cost.h"
#include "kvio/data.h"
#include "kvio/gpu.h"
#include "kvio/serve.h"
#include "kvio/stream.h"
#include "kvio/sync.h"
#include "kvio/train.h"
#include "kvio/update.h"

#include <jansson.h>
#include <signal.h>

#include <stdbool.h>
#include <stdint.h>

typedef enum { KVIO_MODE_SIMULATE = 0, KVIO_MODE_EMULATE = 1 } kvio_mode_t;

/* `ranks:` how many ranks of each role (train ranks first in rank order)
 * and the runtime that hosts them. */
typedef struct kvio_ranks_config {
    int64_t train;
    int64_t serve;
    int64_t client;     /* coupled run: 1 = a client rank after the serve ranks */
    int64_t prefill;    /* P/D: the first `prefill` serve ranks prefill, */
    int64_t decode;     /*   the next `decode` decode (serve = their sum) */
    char *runtime;      /* auto | local | mpi */
    int64_t timeout_ns; /* longest silence (no heartbeat) of a live peer */
} kvio_ranks_config_t;

/* The workload: the top level of a YAML file. */
/* The `assess:` section: pass/fail thresholds on the storage block, as
 * MLPerf Storage's kv-cache.py judges a run (0: not judged). */
typedef struct kvio_assess_config {
    bool mlperf;                  /* kv-cache.py's latency profile for every threshold left 0 */
    double storage_write_p95_ms;  /* a file tier's write P95 below this */
    double storage_read_p95_ms;   /* a file tier's read P95 below this */
    double cpu_p95_ms;            /* a host tier's read and write P95 below this */
    double hit_rate;              /* the hit rate with the tiers above this */
} kvio_assess_config_t;

typedef struct kvio_workload {
    char *name;
    int64_t seed;
    int mode;             /* kvio_mode_t */
    int64_t duration_ns;
    bool duration_given;  /* the YAML or an override sets duration (not its default) */
    int64_t warmup_ns;
    int64_t warmup_requests;
    kvio_ranks_config_t ranks;
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_device_config_t device; /* where KV pool and weights live (emulate) */
    kvio_cost_config_t cost;
    kvio_serve_config_t serve;
    kvio_pd_config_t pd;         /* ranks.prefill and ranks.decode */
    kvio_slo_config_t slo;
    kvio_assess_config_t assess;
    kvio_train_config_t train;   /* with train.transport */
    kvio_update_config_t update; /* the serve side of model updates */
    kvio_sync_config_t weight_sync; /* simulate: the update as tensors in buckets */
    kvio_stream_config_t stream;
    char *metric_percentiles;    /* vllm.json's percentiles: "50,90,99,99.9" */
    char *data_text;             /* data: as written (random, zero, compress:PCT, dedupe:PCT) */
    kvio_data_t data;            /* not an option: data_text parsed when the workload binds */
} kvio_workload_t;

/* The option table of the top level. */
extern const kvio_opt_t kvio_workload_options[];

/* Loads source (a file path, or the name of an embedded preset when no such
 * file exists), applies "a.b=value" overrides, and binds the result into
 * workload_p. Free with kvio_workload_free. Errors name file:line:column. */
kvio_status_t kvio_workload_load(const char *source, const char *const *overrides,
                                 size_t num_overrides, kvio_workload_t *workload_p,
                                 char *error_p, size_t error_len);

/* The same from YAML text; origin names it in errors. */
kvio_status_t kvio_workload_parse(const char *text, const char *origin,
                                  const char *const *overrides, size_t num_overrides,
                                  kvio_workload_t *workload_p, char *error_p, size_t error_len);

void kvio_workload_free(kvio_workload_t *workload);

/* The duration the stream is created with: a synthetic stream always has
 * one (60 s by default); a trace is cut only at a duration the workload
 * gives, and otherwise replays whole (0). */
int64_t kvio_workload_stream_duration(const kvio_workload_t *workload);

/* Checks what the workload itself decides and kvio_run would refuse, with
 * no results directory, memory or connection made: model and GPU presets,
 * the KV capacity, the stream (a trace is read whole) and that every request
 * fits the KV cache, a file tier's parent directory (emulate), the ranks.
 * What this machine must give (memory, Redis, a device) kvio_run checks
 * next, still before the directory. kvio validate calls this. */
kvio_status_t kvio_workload_check(const kvio_workload_t *workload, char *error_p,
                                  size_t error_len);

/* How to run: where results go and what to print. */
typedef struct kvio_run_options {
    const char *output_dir; /* NULL: results/<name>-<time>-<pid> */
    /* The command as typed and the --set overrides given (summary.json's
     * command and overrides, run.log): provenance. May be NULL / 0. */
    const char *const *argv;
    int argc;
    const char *const *overrides;
    size_t num_overrides;
    bool force;             /* reuse an existing output directory */
    const char *source;     /* what was loaded, for the summary */
    bool quiet;             /* no table on stdout */
    volatile sig_atomic_t *stop; /* set (e.g. by SIGINT) to stop early; may be NULL */
    const char *event_trace; /* write Chrome trace events (.pfw) here; NULL: none */
    json_t **summary_p;      /* non-NULL: receives the summary.json written (a new
                                reference, on the rank that wrote it; else NULL) */
    kvio_result_t **result_p; /* non-NULL: receives the run's figures and verdict (on
                                 the rank that wrote them, once summary.json is
                                 written; else NULL); kvio_result_destroy */
    long repeat;             /* update.control: paired: the pairs (0: 3) */
    /* Simulate's twins already served, shared among runs that differ only in
     * what the updates do (kvio compare; NULL: none). */
    struct kvio_control_cache *control_cache;
    /* Emulate without trainers: requests come from this front end (kvio
     * serve's HTTP server) instead of the stream, until it closes; NULL:
     * the stream. Borrowed. */
    struct kvio_frontend *frontend;
    /* How long that front end serves (0: until stopped; a coupled run lasts
     * the workload's duration), for what the run says it will take. */
    int64_t frontend_duration_ns;
    /* The server in front of it: its own numbers go in summary.json's
     * metrics.server (a new reference; NULL: none). */
    json_t *(*server_json)(void *context);
    void *server_context;
} kvio_run_options_t;

/* What a run produced. */
typedef struct kvio_run_result {
    char results_dir[1024];
    bool complete;
} kvio_run_result_t;

/* Runs the workload and writes its results directory. Returns KVIO_OK when
 * the run completed; on error the message is in error_p. SIGPIPE, when at
 * its default, is ignored from then on (a peer's closed socket is an error
 * the run reports). */
kvio_status_t kvio_run(const kvio_workload_t *workload, const kvio_run_options_t *options,
                       kvio_run_result_t *result_p, char *error_p, size_t error_len);

/* Every registry of plug-ins (schedulers, predictors, eviction policies,
 * tiers, transports, routers, executors), NULL-terminated. */
extern const kvio_registry_t *const kvio_registries[];

#endif
