/* Model updates as part of a run: assigns roles to ranks (train ranks first),
 * creates each rank's transport side, runs the trainer or the serve receive
 * loop, gathers every record to rank 0, and there writes updates.csv and the
 * metrics (latency, bandwidth, stalls, staleness). Simulate mode runs the
 * same records through a latency + bytes/bandwidth model on a virtual clock. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/results.h"
#include "kvio/rng.h"
#include "kvio/stats.h"
#include "kvio/sysinfo.h"
#include "kvio/wire.h"

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
static bool is_serve_report(const rank_report_t *report, int num_serve)
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

static const kvio_train_record_t *find_train(const collected_t *all, uint64_t version);

bool kvio_updates_coupled(const kvio_workload_t *workload)
{
    return kvio_updates_wanted(workload) && workload->mode == KVIO_MODE_EMULATE &&
           workload->update.serving == KVIO_SERVING_ENGINE;
}

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

static kvio_status_t coupled_create(const kvio_workload_t *workload, kvio_rte_t *rte,
                                    int serve_index, int num_serve, pthread_mutex_t *setup_lock,
                                    volatile sig_atomic_t *stop, coupled_serve_t *coupled,
                                    char *error_p, size_t error_len)
{
    memset(coupled, 0, sizeof(*coupled));
    coupled->model = workload->model;
    coupled->gpu = workload->gpu;
    kvio_status_t status = kvio_model_resolve(&coupled->model, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_gpu_resolve(&coupled->gpu, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed,
                                    kvio_workload_stream_duration(workload), &coupled->stream,
                                    error_p, error_len);
    if (status != KVIO_OK)
        return status;
    coupled->run = (kvio_serve_run_t){
        .serve = &workload->serve, .model = &coupled->model, .gpu = &coupled->gpu,
        .cost = &workload->cost, .num_ranks = (uint32_t)num_serve,
        .seed = (uint64_t)workload->seed,
        .slo = {.ttft_ns = workload->slo.ttft_ns, .tpot_ns = workload->slo.tpot_ns},
        .warmup_ns = workload->warmup_ns, .warmup_requests = workload->warmup_requests,
        .stream = coupled->stream, .device = &workload->device,
        /* With a client rank (the last), serve_index < 0 is the client. */
        .rte = rte, .client_rank = workload->ranks.client > 0 ? 1 + num_serve : 0,
        .first_serve_rank = 1, .update = &workload->update, .setup_lock = setup_lock,
        .stop = stop,
    };
    if (serve_index < 0)
        return kvio_serve_client_create(&coupled->run, &coupled->client, error_p, error_len);
    return kvio_serve_rank_create(&coupled->run, (uint32_t)serve_index, (uint32_t)num_serve,
                                  &coupled->rank, error_p, error_len);
}

static void coupled_destroy(coupled_serve_t *coupled)
{
    kvio_serve_rank_destroy(coupled->rank);
    kvio_serve_client_destroy(coupled->client);
    kvio_stream_destroy(coupled->stream);
    memset(coupled, 0, sizeof(*coupled));
}

/* Rank 0: the serving metrics of the coupled run, and the cumulative
 * inference loss, Σ over served requests of L(step of the version that
 * served them) (version 0, the initial weights, counts as step 1). */
static kvio_status_t coupled_metrics(const run_context_t *context, const collected_t *all,
                                     void **blobs, size_t *lengths, int size,
                                     kvio_serve_output_t *output_p, char *error_p,
                                     size_t error_len)
{
    json_t *serving = NULL;
    uint64_t *served = NULL;
    size_t num_versions = 0;
    kvio_status_t status = kvio_serve_ranks_merge(blobs + 1, lengths + 1, (size_t)size - 1,
                                                  TRAIN_RANK + 1, context->results,
                                                  context->events, &serving, &served,
                                                  &num_versions, output_p, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* The step each version holds (versions count from 1, in order). */
    double *steps = calloc(all->num_train + 1, sizeof(double));
    if (steps == NULL) {
        json_decref(serving);
        free(served);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < all->num_train; i++)
        if (all->train[i].version <= all->num_train)
            steps[all->train[i].version] = (double)all->train[i].step;
    kvio_serve_run_t loss_run = {.version_steps = steps, .num_version_steps = all->num_train + 1,
                                 .loss = &context->workload->train.checkpoint.loss};
    kvio_serve_loss_json(serving, &loss_run, served, num_versions);
    free(steps);
    json_object_update(context->metrics, serving);
    json_decref(serving);
    free(served);
    return KVIO_OK;
}

bool kvio_updates_wanted(const kvio_workload_t *workload)
{
    return workload->ranks.train > 0 && workload->ranks.serve > 0;
}

/* ---- simulate: the model taken from an emulate run (model.from) ---- */

#define FROM_KEY "train.transport.model.from"

/* What an emulate run measured, per update and serve rank (updates.csv),
 * summed over the activated ones; times in ms. */
typedef struct measured_sums {
    double transfer_ms;  /* t_xfer_end - t_xfer_start: bytes moved into a receiver */
    double write_ms;     /* t_publish_end - t_publish_start: the shared-store write */
    double arrival_ms;   /* t_xfer_end - t_publish_start: data at the receiver */
    double checksum_ms;  /* t_publish_start - t_ready: the trainer's checksum */
    double verify_ms;    /* t_verified - (data in and notified): the server's */
    size_t verify_rows;  /* rows with a verify time */
    double bytes;
    size_t rows;
} measured_sums_t;

/* Reads dir/updates.csv into sums. */
static kvio_status_t read_updates_csv(const char *dir, measured_sums_t *sums_p, char *error_p,
                                      size_t error_len)
{
    enum { XFER_START, XFER_END, PUBLISH_START, PUBLISH_END, ACTIVATED, BYTES, READY, NOTIFIED,
           VERIFIED, NUM_WANTED };
    static const char *const wanted[NUM_WANTED] = {
        "t_xfer_start_ms", "t_xfer_end_ms", "t_publish_start_ms", "t_publish_end_ms",
        "t_activated_ms", "bytes", "t_ready_ms", "t_notified_ms", "t_verified_ms"};
    char path[4200], reason[512] = "";
    snprintf(path, sizeof(path), "%s/updates.csv", dir);
    kvio_csv_reader_t *csv = malloc(sizeof(*csv)); /* it holds a 64 KiB line */
    if (csv == NULL)
        return KVIO_ERR_NOMEM;
    int columns[NUM_WANTED];
    kvio_status_t status = kvio_csv_reader_open(csv, path, reason, sizeof(reason));
    if (status == KVIO_ERR_NOT_FOUND) {
        snprintf(error_p, error_len, FROM_KEY ": %s: %s (the per-update stages the model is "
                 "fitted to)", path, strerror(ENOENT));
        free(csv);
        return status;
    }
    if (status == KVIO_OK)
        status = kvio_csv_reader_columns(csv, wanted, NUM_WANTED, columns, reason,
                                         sizeof(reason));
    measured_sums_t sums = {0};
    size_t count = csv->num_fields;
    while (status == KVIO_OK &&
           (status = kvio_csv_reader_next(csv, reason, sizeof(reason))) == KVIO_OK) {
        double value[NUM_WANTED];
        bool usable = csv->num_fields == count;
        for (int i = 0; i < NUM_WANTED && usable; i++) {
            char *end;
            value[i] = strtod(csv->fields[columns[i]], &end);
            usable = end != csv->fields[columns[i]] && isfinite(value[i]);
        }
        /* Only activated updates count, like the run's own latency. */
        if (!usable)
            continue;
        sums.transfer_ms += value[XFER_END] - value[XFER_START];
        sums.write_ms += value[PUBLISH_END] - value[PUBLISH_START];
        sums.arrival_ms += value[XFER_END] - value[PUBLISH_START];
        sums.checksum_ms += value[PUBLISH_START] - value[READY];
        double data_in = fmax(value[XFER_END], value[NOTIFIED]);
        if (value[VERIFIED] > data_in) {
            sums.verify_ms += value[VERIFIED] - data_in;
            sums.verify_rows++;
        }
        sums.bytes += value[BYTES];
        sums.rows++;
    }
    kvio_csv_reader_close(csv);
    free(csv);
    if (status == KVIO_INPROGRESS) /* the end of the file */
        status = KVIO_OK;
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, FROM_KEY ": %s", reason);
        return status == KVIO_ERR_PARSE ? KVIO_ERR_CONFIG : status;
    }
    if (sums.rows == 0 || !(sums.transfer_ms > 0)) {
        snprintf(error_p, error_len, FROM_KEY ": %s has no activated update with its stage "
                 "times", path);
        return KVIO_ERR_CONFIG;
    }
    *sums_p = sums;
    return KVIO_OK;
}

static int name_index(const char *const *names, const char *name)
{
    for (int i = 0; name != NULL && names[i] != NULL; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* The measured run's transport shape (what the model's arrival depends on)
 * from its summary.json config; keys it lacks keep their defaults. */
static kvio_status_t measured_shape(json_t *transport, kvio_xfer_config_t *shape,
                                    char *error_p, size_t error_len)
{
    kvio_status_t status = kvio_config_defaults(kvio_xfer_options, shape, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    shape->kind = name_index(kvio_xfer_kind_names,
                             json_string_value(json_object_get(transport, "kind")));
    int fanout = name_index(kvio_xfer_fanout_names, json_string_value(json_object_get(transport, "fanout")));
    if (fanout >= 0)
        shape->fanout = fanout;
    const char *chunk = json_string_value(json_object_get(transport, "chunk"));
    if (chunk != NULL && kvio_parse_size(chunk, &shape->chunk, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    json_t *file = json_object_get(transport, "file");
    int discovery = name_index(kvio_xfer_discovery_names,
                               json_string_value(json_object_get(file, "discovery")));
    if (discovery >= 0)
        shape->file.discovery = discovery;
    const char *interval = json_string_value(json_object_get(file, "poll_interval"));
    if (interval != NULL &&
        kvio_parse_duration(interval, &shape->file.poll_interval_ns, error_p, error_len) !=
            KVIO_OK)
        return KVIO_ERR_CONFIG;
    return KVIO_OK;
}

kvio_status_t kvio_updates_model_from(kvio_workload_t *workload, char *error_p,
                                      size_t error_len)
{
    kvio_xfer_model_config_t *model = &workload->train.transport.model;
    if (workload->mode != KVIO_MODE_SIMULATE || !kvio_updates_wanted(workload) ||
        model->from == NULL || model->from[0] == '\0')
        return KVIO_OK;
    const char *dir = model->from;
    const char *kind = kvio_xfer_kind_names[workload->train.transport.kind];
    struct stat info;
    if (stat(dir, &info) != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s: %s", dir, strerror(errno));
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : KVIO_ERR_CONFIG;
    }
    if (!S_ISDIR(info.st_mode)) {
        snprintf(error_p, error_len, FROM_KEY ": %s is not a directory; it takes the results "
                 "directory of an emulate update run", dir);
        return KVIO_ERR_CONFIG;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    if (stat(path, &info) != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s is not a kvio results directory (no "
                 "summary.json); it takes the one of an emulate update run (bench/update.sh "
                 "keeps them with KVIO_BENCH_RESULTS=DIR)", dir);
        return KVIO_ERR_NOT_FOUND;
    }
    json_error_t json_error;
    json_t *summary = json_load_file(path, 0, &json_error);
    if (summary == NULL) {
        snprintf(error_p, error_len, FROM_KEY ": %s:%d: %s", path, json_error.line,
                 json_error.text);
        return KVIO_ERR_CONFIG;
    }
    kvio_xfer_config_t shape = {0};
    measured_sums_t sums = {0};
    kvio_status_t status = KVIO_ERR_CONFIG;
    json_t *config = json_object_get(summary, "config");
    json_t *transport = json_object_get(json_object_get(config, "train"), "transport");
    json_t *updates = json_object_get(json_object_get(summary, "metrics"), "model_updates");
    const char *mode = json_string_value(json_object_get(config, "mode"));
    const char *measured_kind = json_string_value(json_object_get(transport, "kind"));
    int num_receivers = (int)json_integer_value(json_object_get(updates, "serve_ranks"));
    if (!json_is_true(json_object_get(summary, "complete"))) {
        const char *why = json_string_value(json_object_get(summary, "error"));
        snprintf(error_p, error_len, FROM_KEY ": %s: that run did not complete (summary.json: "
                 "complete: false%s%s)", dir, why != NULL ? "; " : "", why != NULL ? why : "");
        goto done;
    }
    if (mode == NULL || strcmp(mode, "emulate") != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s is a %s run; the model is taken from "
                 "what an emulate run measured", dir, mode != NULL ? mode : "(no mode)");
        goto done;
    }
    if (updates == NULL || json_integer_value(json_object_get(updates, "updates_activated")) <= 0
        || num_receivers < 1) {
        snprintf(error_p, error_len, FROM_KEY ": %s has no model updates (summary.json: "
                 "metrics.model_updates %s)", dir, updates == NULL ? "missing"
                                                                   : "has none activated");
        goto done;
    }
    if (measured_kind == NULL || strcmp(measured_kind, kind) != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s measured the %s transport, this workload "
                 "uses %s (train.transport.kind)", dir,
                 measured_kind != NULL ? measured_kind : "(unknown)", kind);
        goto done;
    }
    status = measured_shape(transport, &shape, error_p, error_len);
    if (status == KVIO_OK)
        status = read_updates_csv(dir, &sums, error_p, error_len);
    if (status != KVIO_OK)
        goto done;
    double rows = (double)sums.rows;
    kvio_xfer_measured_t measured = {.bytes = (uint64_t)llround(sums.bytes / rows),
                                     .transfer_ns = sums.transfer_ms / rows * 1e6,
                                     .write_ns = sums.write_ms / rows * 1e6,
                                     .arrival_ns = sums.arrival_ms / rows * 1e6};
    double bandwidth_gbps = 0;
    int64_t latency_ns = 0;
    if (kvio_xfer_model_fit(&shape, num_receivers, &measured, &latency_ns, &bandwidth_gbps) !=
        KVIO_OK) {
        snprintf(error_p, error_len, FROM_KEY ": %s: no bytes moved in its updates", dir);
        status = KVIO_ERR_CONFIG;
        goto done;
    }
    model->taken_bandwidth_gbps = bandwidth_gbps;
    model->taken_latency_ns = latency_ns;
    /* The checksums, as rates (they scale with bytes); the server's only
     * when that run verified. */
    model->taken_checksum_gbps = sums.checksum_ms > 0 ? sums.bytes / (sums.checksum_ms * 1e6)
                                                      : 0;
    json_t *update = json_object_get(config, "update");
    model->taken_verify_gbps = json_is_true(json_object_get(update, "verify")) &&
                                       sums.verify_rows > 0 && sums.verify_ms > 0
                                   ? measured.bytes * (double)sums.verify_rows /
                                         (sums.verify_ms * 1e6)
                                   : 0;
    model->taken = true;
    kvio_debug("model updates: from %s: %.3f GB/s, %.3f ms per update (%zu updates, %d serve "
               "ranks)", dir, bandwidth_gbps, (double)latency_ns / 1e6, sums.rows,
               num_receivers);
done:
    kvio_config_free(kvio_xfer_options, &shape);
    json_decref(summary);
    return status;
}

kvio_status_t kvio_updates_sync_buckets(const kvio_workload_t *workload, kvio_sync_plan_t *plan_p,
                                        char *error_p, size_t error_len)
{
    kvio_model_t model = workload->model;
    kvio_status_t status = kvio_model_resolve(&model, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    return kvio_sync_buckets(&workload->weight_sync, &model,
                             kvio_train_weights_bytes(&workload->train), plan_p, error_p,
                             error_len);
}

kvio_delta_t kvio_updates_sync_delta(const kvio_workload_t *workload)
{
    const kvio_sync_config_t *sync = &workload->weight_sync;
    kvio_model_t model = workload->model;
    char unused[256];
    double element = 0;
    if (kvio_model_resolve(&model, unused, sizeof(unused)) == KVIO_OK)
        element = model.weight_dtype_bytes > 0 ? model.weight_dtype_bytes : model.dtype_bytes;
    bool whole = element >= 1 && element <= 8 && element == floor(element);
    return (kvio_delta_t){
        .fraction = sync->delta_fraction, .encoding = sync->delta_encoding,
        .element = whole && kvio_delta_supported((uint32_t)element) ? (uint32_t)element
                                                                          : 0};
}

/* Emulate, weight_sync on: the ring each rank keeps beside its weights
 * (pipeline_depth slots of the largest bucket or delta; 0 without weight_sync). */
static kvio_status_t sync_ring_bytes(const kvio_workload_t *workload, uint64_t *ring_p,
                                     char *error_p, size_t error_len)
{
    *ring_p = 0;
    if (workload->weight_sync.granularity == KVIO_SYNC_OFF)
        return KVIO_OK;
    kvio_sync_plan_t plan;
    kvio_status_t status = kvio_updates_sync_buckets(workload, &plan, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* A slot holds a bucket, or its largest delta when that is bigger. */
    kvio_delta_t delta = kvio_updates_sync_delta(workload);
    uint64_t largest = 0;
    for (size_t b = 0; b < plan.num_buckets; b++) {
        uint64_t bytes = kvio_delta_slot_bytes(&delta, plan.buckets[b].bytes);
        largest = bytes > largest ? bytes : largest;
    }
    uint64_t slots = (uint64_t)workload->weight_sync.pipeline_depth;
    *ring_p = largest * (slots < plan.num_buckets ? slots : plan.num_buckets);
    kvio_sync_plan_free(&plan);
    return KVIO_OK;
}

kvio_status_t kvio_updates_preflight(const kvio_workload_t *workload, uint64_t other_bytes,
                                     char *error_p, size_t error_len)
{
    const kvio_xfer_model_config_t *model = &workload->train.transport.model;
    if (workload->mode == KVIO_MODE_SIMULATE && model->from != NULL && model->from[0] != '\0'
        && !model->taken) {
        snprintf(error_p, error_len, FROM_KEY ": %s was not read (kvio_workload_load and "
                 "kvio_workload_parse read it)", model->from);
        return KVIO_ERR_INVALID;
    }
    if (workload->mode != KVIO_MODE_EMULATE)
        return KVIO_OK;
    /* The weights in host memory: the trainer's buffer and two slots
     * (active, incoming) per serve rank, all on this machine as the local
     * runtime (or mpirun on one host) puts them, beside the KV pools. */
    uint64_t bytes = kvio_train_weights_bytes(&workload->train), available = 0;
    kvio_xfer_config_t transport = workload->train.transport;
    transport.device = workload->device;
    kvio_status_t status = kvio_xfer_preflight(&transport, bytes, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    char unused[128];
    uint64_t ring = 0;
    status = sync_ring_bytes(workload, &ring, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    if (workload->device.memory == KVIO_MEMORY_HOST &&
        kvio_mem_available(&available, unused, sizeof(unused)) == KVIO_OK) {
        uint64_t buffers = 1 + 2 * (uint64_t)workload->ranks.serve;
        double weights = (double)bytes * (double)buffers;
        /* weight_sync: every rank's ring of bucket slots too. */
        double rings = (double)ring * (double)(1 + workload->ranks.serve);
        if (ring > 0 && weights + rings + (double)other_bytes > (double)available * 0.8) {
            snprintf(error_p, error_len,
                     "emulate: weight_sync needs %.2f GiB (train.bytes %.2f GiB x %llu buffers: "
                     "the trainer's and 2 per serve rank, plus %.2f GiB of bucket slots on "
                     "each of %lld ranks: pipeline_depth x the largest bucket) beside %.2f GiB "
                     "of KV pools, but this machine has %.2f GiB available; set train.bytes, "
                     "weight_sync.bucket_size or pipeline_depth (at most 80%% of it together)",
                     (weights + rings) / 1073741824.0, (double)bytes / 1073741824.0,
                     (unsigned long long)buffers, (double)ring / 1073741824.0,
                     (long long)(1 + workload->ranks.serve), (double)other_bytes / 1073741824.0,
                     (double)available / 1073741824.0);
            return KVIO_ERR_CONFIG;
        }
        if (weights + (double)other_bytes > (double)available * 0.8) {
            snprintf(error_p, error_len,
                     "emulate: the weights need %.2f GiB (train.bytes %.2f GiB x %llu buffers: "
                     "the trainer's and 2 per serve rank) beside %.2f GiB of KV pools, but this "
                     "machine has %.2f GiB available; set train.bytes (at most 80%% of it "
                     "together)", weights / 1073741824.0, (double)bytes / 1073741824.0,
                     (unsigned long long)buffers, (double)other_bytes / 1073741824.0,
                     (double)available / 1073741824.0);
            return KVIO_ERR_CONFIG;
        }
    }
    return KVIO_OK;
}

/* ---- metrics on rank 0 ---- */

static const kvio_train_record_t *find_train(const collected_t *all, uint64_t version)
{
    for (size_t i = 0; i < all->num_train; i++)
        if (all->train[i].version == version)
            return &all->train[i];
    return NULL;
}

/* Time-weighted versions-behind of one serve rank over [start, end]: the
 * newest version ready at the trainer minus the version active there. */
static void staleness(const collected_t *all, int rank, int64_t start, int64_t end,
                      double *mean_p, uint64_t *max_p)
{
    double area = 0;
    uint64_t worst = 0;
    int64_t t = start;
    while (t < end) {
        uint64_t ready = 0, active = 0;
        int64_t next = end;
        for (size_t i = 0; i < all->num_train; i++) {
            if (all->train[i].t_ready_ns <= t && all->train[i].version > ready)
                ready = all->train[i].version;
            if (all->train[i].t_ready_ns > t && all->train[i].t_ready_ns < next)
                next = all->train[i].t_ready_ns;
        }
        for (size_t i = 0; i < all->num_updates; i++) {
            const kvio_update_record_t *record = &all->updates[i];
            if (record->rank != rank || record->t_activated_ns == 0)
                continue;
            if (record->t_activated_ns <= t && record->version > active)
                active = record->version;
            if (record->t_activated_ns > t && record->t_activated_ns < next)
                next = record->t_activated_ns;
        }
        uint64_t behind = ready > active ? ready - active : 0;
        area += (double)behind * (double)(next - t);
        if (behind > worst)
            worst = behind;
        t = next;
    }
    *mean_p = end > start ? area / (double)(end - start) : 0;
    *max_p = worst;
}

/* What rank 0 reports of the model updates, computed from the collected
 * records before anything is rendered (JSON, updates.csv, the trace). */
typedef struct update_metrics {
    kvio_hist_t *latency, *train_stall, *bandwidth; /* ns, ns, MB/s */
    uint64_t activated, mismatches, skipped, polls, iterations;
    double stage_mean_ms[5]; /* after t_ready: xfer start/end, notified, verified, activated */
    double stall_total_ms, inference_stall_total_ms, inference_stall_max_ms;
    double staleness_mean;
    uint64_t staleness_max;
    int64_t clock_uncertainty_ns;
    int num_serve;
} update_metrics_t;

static const char *const stage_names[5] = {"xfer_start", "xfer_end", "notified", "verified",
                                           "activated"};

static void update_metrics_fini(update_metrics_t *metrics)
{
    kvio_hist_destroy(metrics->latency);
    kvio_hist_destroy(metrics->train_stall);
    kvio_hist_destroy(metrics->bandwidth);
}

/* Transfer bandwidth of one update in GB/s (0 when it took no time). */
static double update_gbps(const kvio_update_record_t *record)
{
    double xfer_s = (double)(record->t_xfer_end_ns - record->t_xfer_start_ns) / 1e9;
    return xfer_s > 0 ? (double)record->bytes / xfer_s / 1e9 : 0;
}

static kvio_status_t compute_update_metrics(const collected_t *all, int num_serve_configured,
                                            update_metrics_t *metrics)
{
    memset(metrics, 0, sizeof(*metrics));
    if (kvio_hist_create(&metrics->latency) != KVIO_OK ||
        kvio_hist_create(&metrics->train_stall) != KVIO_OK ||
        kvio_hist_create(&metrics->bandwidth) != KVIO_OK) {
        update_metrics_fini(metrics);
        return KVIO_ERR_NOMEM;
    }
    double stage_sum[5] = {0};
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        if (record->t_activated_ns) {
            metrics->activated++;
            kvio_hist_record(metrics->latency,
                             (uint64_t)(record->t_activated_ns - record->t_ready_ns));
            int64_t stages[5] = {record->t_xfer_start_ns, record->t_xfer_end_ns,
                                 record->t_notified_ns, record->t_verified_ns,
                                 record->t_activated_ns};
            for (int s = 0; s < 5; s++)
                stage_sum[s] += (double)(stages[s] - record->t_ready_ns) / 1e6;
        }
        double gbps = update_gbps(record);
        if (gbps > 0)
            kvio_hist_record(metrics->bandwidth, (uint64_t)(gbps * 1e3)); /* MB/s */
        metrics->mismatches += record->checksum_ok ? 0 : 1;
        metrics->skipped += (uint64_t)(record->skipped_before > 0 ? record->skipped_before : 0);
    }
    for (int s = 0; s < 5; s++)
        metrics->stage_mean_ms[s] = metrics->activated ? stage_sum[s] / (double)metrics->activated
                                                       : 0;
    for (size_t i = 0; i < all->num_train; i++) {
        kvio_hist_record(metrics->train_stall, (uint64_t)all->train[i].stall_ns);
        metrics->stall_total_ms += (double)all->train[i].stall_ns / 1e6;
    }
    double staleness_sum = 0;
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        if (report->clock_uncertainty_ns > metrics->clock_uncertainty_ns)
            metrics->clock_uncertainty_ns = report->clock_uncertainty_ns;
        if (!is_serve_report(report, num_serve_configured))
            continue;
        metrics->num_serve++;
        double stall_ms = (double)report->inference_stall_ns / 1e6;
        metrics->inference_stall_total_ms += stall_ms;
        if (stall_ms > metrics->inference_stall_max_ms)
            metrics->inference_stall_max_ms = stall_ms;
        metrics->polls += report->polls;
        metrics->iterations += report->iterations;
        double mean;
        uint64_t worst;
        staleness(all, report->rank, report->t_start_ns, report->t_end_ns, &mean, &worst);
        staleness_sum += mean;
        if (worst > metrics->staleness_max)
            metrics->staleness_max = worst;
    }
    metrics->staleness_mean = metrics->num_serve ? staleness_sum / metrics->num_serve : 0;
    return KVIO_OK;
}

static json_t *update_metrics_json(const update_metrics_t *metrics,
                                   const kvio_workload_t *workload, const collected_t *all)
{
    json_t *object = json_object();
    json_object_set_new(object, "transport",
                        json_string(kvio_xfer_kind_names[workload->train.transport.kind]));
    json_object_set_new(object, "transport_info", json_string(all->info));
    json_object_set_new(object, "runtime", json_string(all->num_reports ? "" : "simulate"));
    json_object_set_new(object, "bytes",
                        json_integer((json_int_t)kvio_train_weights_bytes(&workload->train)));
    json_object_set_new(object, "serve_ranks", json_integer(metrics->num_serve));
    json_object_set_new(object, "versions_published", json_integer((json_int_t)all->num_train));
    json_object_set_new(object, "updates_received", json_integer((json_int_t)all->num_updates));
    json_object_set_new(object, "updates_activated", json_integer((json_int_t)metrics->activated));
    json_object_set_new(object, "versions_skipped", json_integer((json_int_t)metrics->skipped));
    json_object_set_new(object, "checksum_mismatches",
                        json_integer((json_int_t)metrics->mismatches));
    json_object_set_new(object, "update_latency_ms", kvio_hist_json(metrics->latency, 1e-6));
    json_object_set_new(object, "bandwidth_gbps", kvio_hist_json(metrics->bandwidth, 1e-3));
    json_object_set_new(object, "training_stall_ms", kvio_hist_json(metrics->train_stall, 1e-6));
    json_object_set_new(object, "training_stall_total_ms", json_real(metrics->stall_total_ms));
    json_object_set_new(object, "inference_stall_total_ms",
                        json_real(metrics->inference_stall_total_ms));
    json_object_set_new(object, "inference_stall_max_ms",
                        json_real(metrics->inference_stall_max_ms));
    json_object_set_new(object, "staleness_mean_versions", json_real(metrics->staleness_mean));
    json_object_set_new(object, "staleness_max_versions",
                        json_integer((json_int_t)metrics->staleness_max));
    json_object_set_new(object, "serve_iterations", json_integer((json_int_t)metrics->iterations));
    json_object_set_new(object, "polls", json_integer((json_int_t)metrics->polls));
    json_object_set_new(object, "clock_offset_uncertainty_us",
                        json_real((double)metrics->clock_uncertainty_ns / 1e3));
    json_t *stages = json_object();
    for (int s = 0; s < 5; s++)
        json_object_set_new(stages, stage_names[s], json_real(metrics->stage_mean_ms[s]));
    json_object_set_new(object, "stage_mean_ms_after_ready", stages);
    return object;
}

/* updates.csv: one row per update a serve rank received, times since t0. */
static kvio_status_t write_updates_csv(kvio_results_t *results, const collected_t *all,
                                       int64_t origin_ns, const kvio_interference_t *interference,
                                       char *error_p, size_t error_len)
{
    kvio_csv_t *csv = NULL;
    kvio_status_t status = kvio_csv_open(
        results, "updates.csv",
        interference != NULL
            ? "version,rank,bytes,checksum_ok,skipped_before,t_ready_ms,t_publish_start_ms,"
              "t_publish_end_ms,t_xfer_start_ms,t_xfer_end_ms,t_notified_ms,t_verified_ms,"
              "t_activated_ms,latency_ms,training_stall_ms,bandwidth_gbps,ttft_p50_ratio,"
              "ttft_p99_ratio,tpot_p99_ratio,hit_rate_before,hit_rate_after"
            : "version,rank,bytes,checksum_ok,skipped_before,t_ready_ms,t_publish_start_ms,"
              "t_publish_end_ms,t_xfer_start_ms,t_xfer_end_ms,t_notified_ms,t_verified_ms,"
              "t_activated_ms,latency_ms,training_stall_ms,bandwidth_gbps",
        &csv);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s/updates.csv: cannot write", kvio_results_path(results));
        return status;
    }
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        const kvio_train_record_t *train = find_train(all, record->version);
        double latency_ms = record->t_activated_ns
                                ? (double)(record->t_activated_ns - record->t_ready_ns) / 1e6
                                : NAN;
#define REL(t) ((t) ? (double)((t) - origin_ns) / 1e6 : NAN)
        char ratios[160] = "";
        if (interference != NULL) {
            const double *v = &interference->values[i * KVIO_INTERFERENCE_VALUES];
            snprintf(ratios, sizeof(ratios), ",%.4f,%.4f,%.4f,%.4f,%.4f", v[0], v[1], v[2], v[3],
                     v[4]);
        }
        kvio_csv_row(csv, "%llu,%d,%llu,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f%s",
                     (unsigned long long)record->version, record->rank,
                     (unsigned long long)record->bytes, record->checksum_ok,
                     record->skipped_before, REL(record->t_ready_ns),
                     train ? REL(train->t_publish_start_ns) : NAN,
                     train ? REL(train->t_publish_end_ns) : NAN, REL(record->t_xfer_start_ns),
                     REL(record->t_xfer_end_ns), REL(record->t_notified_ns),
                     REL(record->t_verified_ns), REL(record->t_activated_ns), latency_ms,
                     train ? (double)train->stall_ns / 1e6 : NAN, update_gbps(record), ratios);
#undef REL
    }
    status = kvio_csv_close(csv);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "updates.csv: write failed");
    return status;
}

/* The event trace: one event per stage of each update at each serve rank,
 * from the previous stage to this one (rank 0's clock, since t0). */
static void trace_updates(kvio_event_trace_t *events, const collected_t *all, int64_t origin_ns)
{
    static const char *const names[] = {"wait", "transfer", "notify", "verify", "activate"};
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        int64_t times[6] = {record->t_ready_ns, record->t_xfer_start_ns,
                            record->t_xfer_end_ns, record->t_notified_ns,
                            record->t_verified_ns, record->t_activated_ns};
        int64_t previous = times[0];
        for (int stage = 1; stage < 6; stage++) {
            if (times[stage] == 0)
                continue;
            int64_t start = previous < times[stage] ? previous : times[stage];
            int64_t end = previous < times[stage] ? times[stage] : previous;
            kvio_event_trace_update(events, (uint32_t)record->rank, record->version,
                                    names[stage - 1], start - origin_ns, end - start,
                                    stage == 2 ? (int64_t)record->bytes : -1);
            previous = end;
        }
    }
}

/* The updates' metrics, updates.csv and their events; with serving, what
 * each update did to it (the interference windows) first, so that
 * updates.csv is written once, whole. */
static kvio_status_t write_metrics(const run_context_t *context, const collected_t *all,
                                   int64_t origin_ns, const kvio_serve_output_t *serving,
                                   char *error_p, size_t error_len)
{
    update_metrics_t metrics;
    kvio_status_t status = compute_update_metrics(all, (int)context->workload->ranks.serve,
                                                  &metrics);
    if (status != KVIO_OK)
        return status;
    kvio_interference_t interference = {0};
    if (serving != NULL &&
        (status = kvio_interference_measure(
             serving->finished, serving->num_finished, all->updates, all->num_updates,
             origin_ns, context->workload->update.interference_window_ns, &interference)) !=
            KVIO_OK) {
        snprintf(error_p, error_len, "update interference: out of memory (%zu requests)",
                 serving->num_finished);
        update_metrics_fini(&metrics);
        return status;
    }
    if (context->events != NULL)
        trace_updates(context->events, all, origin_ns);
    if (context->results != NULL)
        status = write_updates_csv(context->results, all, origin_ns,
                                   serving != NULL ? &interference : NULL, error_p, error_len);
    if (status == KVIO_OK && metrics.mismatches > 0)
        kvio_warn("model updates: %llu checksum mismatch%s (see updates.csv)",
                  (unsigned long long)metrics.mismatches, metrics.mismatches == 1 ? "" : "es");
    if (status == KVIO_OK && context->metrics != NULL) {
        json_object_set_new(context->metrics, "model_updates",
                            update_metrics_json(&metrics, context->workload, all));
        if (serving != NULL)
            json_object_set_new(
                context->metrics, "update_interference",
                kvio_interference_json(&interference, serving->update_recomputed_tokens,
                                       serving->update_aborted_requests,
                                       metrics.inference_stall_total_ms));
    }
    kvio_interference_free(&interference);
    update_metrics_fini(&metrics);
    return status;
}

/* ---- emulate: one rank ---- */

/* A serve rank's bucket stamps, rank by rank in all->stamps: [begin, end),
 * and the next one not yet joined. */
typedef struct stamp_range {
    size_t next, end;
    size_t forward; /* the first row that may be a forward of the next bucket */
} stamp_range_t;

/* True when stamp a comes before version, bucket. */
static bool stamp_before(const kvio_xfer_bucket_stamp_t *a, uint64_t version, uint32_t bucket)
{
    return a->version < version || (a->version == version && a->bucket < bucket);
}

/* The row of the put that brought t's bucket to t's server: t itself when
 * the trainer put it (source is the trainer), else the forward row of
 * server source (a chain's or tree's), found from its range's forward
 * cursor (t's come in bucket order); NULL when there is none. */
static const kvio_xfer_bucket_stamp_t *forwarded(const collected_t *all, stamp_range_t *ranges,
                                                 int size, const kvio_xfer_bucket_stamp_t *t,
                                                 int source)
{
    if (source == TRAIN_RANK || t->transfer_start_ns != 0)
        return t;
    if (source < 0 || source >= size)
        return NULL;
    stamp_range_t *range = &ranges[source];
    while (range->forward < range->end &&
           stamp_before(&all->stamps[range->forward], t->version, t->bucket))
        range->forward++;
    for (size_t i = range->forward; i < range->end; i++) {
        const kvio_xfer_bucket_stamp_t *f = &all->stamps[i];
        if (f->version != t->version || f->bucket != t->bucket)
            break;
        if (f->rank == source && f->peer == t->peer)
            return f;
    }
    return NULL;
}

/* weight_sync in emulate mode: sync.csv, a row per version, bucket and
 * serve rank (the trainer's stage, transfer and control times beside that
 * rank's notice and reload, ms from t0), and model_updates.weight_sync with
 * the stages' measured totals per update. */
static kvio_status_t sync_results(const run_context_t *context, const collected_t *all,
                                  const kvio_sync_plan_t *sync, int64_t origin_ns, char *error_p,
                                  size_t error_len)
{
    int size = all->num_reports;
    stamp_range_t *ranges = calloc((size_t)size + 1, sizeof(*ranges));
    if (ranges == NULL) {
        snprintf(error_p, error_len, "model updates: out of memory");
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < all->num_stamps; i++) {
        int rank = all->stamps[i].rank;
        if (rank < 0 || rank >= size)
            continue;
        if (ranges[rank].end == 0)
            ranges[rank].next = ranges[rank].forward = i;
        ranges[rank].end = i + 1;
    }
    kvio_csv_t *csv = NULL;
    kvio_status_t status = KVIO_OK;
    if (context->results != NULL) {
        status = kvio_csv_open(context->results, "sync.csv",
                               "version,bucket,rank,source,bytes,wire_bytes,t_stage_start_ms,t_staged_ms,"
                               "t_transfer_start_ms,t_transferred_ms,t_control_start_ms,"
                               "t_control_end_ms,t_noticed_ms,t_reload_start_ms,t_reloaded_ms",
                               &csv);
        if (status != KVIO_OK) {
            free(ranges);
            snprintf(error_p, error_len, "%s/sync.csv: cannot write",
                     kvio_results_path(context->results));
            return status;
        }
    }
#define MS(ns) ((double)((ns) - origin_ns) / 1e6)
    double stage_ns = 0, transfer_ns = 0, control_ns = 0, reload_ns = 0, notice_ns = 0,
           pipeline_ns = 0, staged_ns = 0, update_ns = 0;
    /* The trainer's rows (one per bucket and server), the buckets they are,
     * the rows joined with a server's reload, the last buckets reloaded,
     * the versions every bucket of which some server reloaded. */
    size_t notices = 0, sent = 0, reloaded = 0, whole = 0, versions_done = 0;
    int64_t version_start = 0, last_reloaded = 0; /* the last bucket, by the last server */
    double wire = 0; /* what the trainer put, once per bucket */
    const kvio_xfer_bucket_stamp_t *previous = NULL;
    for (size_t i = 0; i <= all->num_stamps; i++) {
        const kvio_xfer_bucket_stamp_t *t = i < all->num_stamps ? &all->stamps[i] : NULL;
        if (t != NULL && t->rank != TRAIN_RANK)
            continue;
        bool new_bucket = t == NULL || previous == NULL || t->version != previous->version ||
                          t->bucket != previous->bucket;
        if (new_bucket && last_reloaded != 0) {
            versions_done++; /* the version before, whole */
            update_ns += (double)(last_reloaded - version_start);
            last_reloaded = 0;
        }
        if (t == NULL)
            break;
        previous = t;
        bool last = t->bucket + 1 == sync->num_buckets;
        if (new_bucket) {
            sent++;
            wire += (double)t->wire_bytes;
            stage_ns += (double)(t->stage_end_ns - t->stage_start_ns);
            if (t->bucket == 0)
                version_start = t->stage_start_ns;
            if (last)
                staged_ns += (double)(t->stage_end_ns - version_start);
        }
        /* The server's reload row for this bucket (its rows are in order;
         * a server on a chain or tree also has a row per bucket it
         * forwarded, with the child as its peer). */
        if (t->peer < 0 || t->peer >= size || t->peer == TRAIN_RANK)
            continue;
        stamp_range_t *range = &ranges[t->peer];
        while (range->next < range->end &&
               (all->stamps[range->next].rank != t->peer ||
                all->stamps[range->next].peer != TRAIN_RANK ||
                stamp_before(&all->stamps[range->next], t->version, t->bucket)))
            range->next++;
        const kvio_xfer_bucket_stamp_t *r = range->next < range->end
                                                ? &all->stamps[range->next]
                                                : NULL;
        if (r == NULL || r->version != t->version || r->bucket != t->bucket)
            continue;
        /* The put that brought it: the trainer's, or the forward of the
         * server it came from. */
        const kvio_xfer_bucket_stamp_t *put = forwarded(all, ranges, size, t, r->source);
        if (put == NULL)
            continue;
        notices++;
        transfer_ns += (double)(put->transfer_end_ns - put->transfer_start_ns);
        control_ns += (double)(put->control_end_ns - put->control_start_ns);
        reloaded++;
        reload_ns += (double)(r->reload_end_ns - r->reload_start_ns);
        notice_ns += (double)(r->noticed_ns - r->notice_sent_ns);
        if (last) {
            whole++;
            pipeline_ns += (double)(r->reload_end_ns - version_start);
            last_reloaded = r->reload_end_ns > last_reloaded ? r->reload_end_ns : last_reloaded;
        }
        if (csv != NULL)
            kvio_csv_row(csv, "%llu,%u,%d,%d,%llu,%llu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f",
                         (unsigned long long)t->version, t->bucket, t->peer, put->rank,
                         (unsigned long long)t->bytes, (unsigned long long)t->wire_bytes,
                         MS(t->stage_start_ns), MS(t->stage_end_ns),
                         MS(put->transfer_start_ns), MS(put->transfer_end_ns),
                         MS(put->control_start_ns), MS(put->control_end_ns), MS(r->noticed_ns),
                         MS(r->reload_start_ns), MS(r->reload_end_ns));
    }
#undef MS
    free(ranges);
    if (csv != NULL && (status = kvio_csv_close(csv)) != KVIO_OK) {
        snprintf(error_p, error_len, "sync.csv: write failed");
        return status;
    }
    if (context->metrics == NULL)
        return KVIO_OK;
    const kvio_sync_config_t *config = &context->workload->weight_sync;
    uint64_t tensors = 0;
    for (size_t b = 0; b < sync->num_buckets; b++)
        tensors += sync->buckets[b].tensors;
    double versions = sent > 0 ? (double)sent / (double)sync->num_buckets : 0;
    double updates = reloaded > 0 ? (double)reloaded / (double)sync->num_buckets : 0;
    static const char *const names[] = {"off", "whole", "bucket", "tensor"};
    /* The keys simulate mode has (buckets, messages, bytes, wire_bytes,
     * staged_ms: the trainer's last bucket staged, update_ms: the last
     * server done, both from the first stage's start) mean the same here
     * (wire_bytes measured); the rest are the stages' measured sums per
     * update. */
    json_t *object = json_pack(
        "{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
        "s:f}",
        "granularity", names[config->granularity], "measured", 1,
        "buckets", (json_int_t)sync->num_buckets, "messages", (json_int_t)sync->messages,
        "tensors", (json_int_t)tensors, "bytes", (json_int_t)sync->bytes,
        "wire_bytes", (json_int_t)(versions > 0 ? llround(wire / versions) : 0),
        "staged_ms", versions > 0 ? staged_ns / versions / 1e6 : 0.0,
        "update_ms", versions_done > 0 ? update_ns / (double)versions_done / 1e6 : 0.0,
        "pipeline_depth",
        (json_int_t)((size_t)config->pipeline_depth < sync->num_buckets
                         ? (size_t)config->pipeline_depth
                         : sync->num_buckets),
        "updates", versions,
        "stage_ms", versions > 0 ? stage_ns / versions / 1e6 : 0.0,
        "transfer_ms", versions > 0 ? transfer_ns / versions / 1e6 : 0.0,
        "control_ms", versions > 0 ? control_ns / versions / 1e6 : 0.0,
        "reload_ms", updates > 0 ? reload_ns / updates / 1e6 : 0.0,
        "control_us_per_message", notices > 0 ? control_ns / (double)notices / 1e3 : 0.0,
        "notice_us_per_message", reloaded > 0 ? notice_ns / (double)reloaded / 1e3 : 0.0,
        "pipeline_ms", whole > 0 ? pipeline_ns / (double)whole / 1e6 : 0.0);
    if (config->delta_fraction > 0) {
        static const char *const encodings[] = {"index_value", "bitmap"};
        json_object_set_new(object, "delta",
                            json_pack("{s:f, s:s}", "fraction", config->delta_fraction,
                                      "encoding", encodings[config->delta_encoding]));
    }
    json_object_set_new(json_object_get(context->metrics, "model_updates"), "weight_sync",
                        object);
    return KVIO_OK;
}

/* A rank's report to rank 0 (kvio/wire.h): the report, then its records
 * (train records from the trainer, update records from a serve rank), then
 * its bucket stamps (weight_sync). */
static kvio_status_t pack_report(const rank_report_t *report, const void *records,
                                 size_t record_size, const kvio_xfer_bucket_stamp_t *stamps,
                                 void **blob_p, size_t *length_p)
{
    kvio_wire_writer_t out = {0};
    kvio_wire_put(&out, report, sizeof(*report));
    kvio_wire_put(&out, records, report->count * record_size);
    kvio_wire_put(&out, stamps, report->num_stamps * sizeof(*stamps));
    return kvio_wire_finish(&out, blob_p, length_p);
}

/* Reads rank's report, its records and stamps in place into *records_p and
 * *stamps_p. */
static kvio_status_t read_report(const void *blob, size_t length, rank_report_t *report_p,
                                 const void **records_p, const void **stamps_p)
{
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    if (kvio_wire_get(&in, report_p, sizeof(*report_p))) {
        size_t record_size = report_p->is_trainer ? sizeof(kvio_train_record_t)
                                                  : sizeof(kvio_update_record_t);
        *records_p = kvio_wire_take_array(&in, report_p->count, record_size);
        *stamps_p = kvio_wire_take_array(&in, report_p->num_stamps,
                                         sizeof(kvio_xfer_bucket_stamp_t));
    }
    return kvio_wire_status(&in) == KVIO_OK && kvio_wire_left(&in) == 0 ? KVIO_OK
                                                                        : KVIO_ERR_INTERNAL;
}

static kvio_status_t collect(void **blobs, size_t *lengths, int size, collected_t *all)
{
    if (size <= 0)
        return KVIO_ERR_INTERNAL;
    size_t num_updates = 0, num_stamps = 0;
    for (int rank = 0; rank < size; rank++) {
        rank_report_t report;
        const void *records = NULL, *stamps = NULL;
        if (read_report(blobs[rank], lengths[rank], &report, &records, &stamps) != KVIO_OK)
            return KVIO_ERR_INTERNAL;
        if (!report.is_trainer)
            num_updates += report.count;
        num_stamps += report.num_stamps;
    }
    all->reports = calloc((size_t)size, sizeof(*all->reports));
    all->updates = calloc(num_updates + 1, sizeof(*all->updates));
    all->stamps = calloc(num_stamps + 1, sizeof(*all->stamps));
    if (all->reports == NULL || all->updates == NULL || all->stamps == NULL)
        return KVIO_ERR_NOMEM;
    all->num_reports = size;
    for (int rank = 0; rank < size; rank++) {
        rank_report_t *report = &all->reports[rank];
        const void *records = NULL, *stamps = NULL;
        read_report(blobs[rank], lengths[rank], report, &records, &stamps);
        memcpy(all->stamps + all->num_stamps, stamps, report->num_stamps * sizeof(*all->stamps));
        all->num_stamps += report->num_stamps;
        if (report->is_trainer) {
            free(all->train);
            all->train = calloc(report->count + 1, sizeof(*all->train));
            if (all->train == NULL)
                return KVIO_ERR_NOMEM;
            memcpy(all->train, records, report->count * sizeof(*all->train));
            all->num_train = report->count;
            snprintf(all->info, sizeof(all->info), "%s", report->info);
        } else {
            memcpy(all->updates + all->num_updates, records,
                   report->count * sizeof(*all->updates));
            all->num_updates += report->count;
        }
    }
    return KVIO_OK;
}

static void collected_free(collected_t *all)
{
    free(all->stamps);
    free(all->train);
    free(all->updates);
    free(all->reports);
}

/* How long the run lasts as planned: the stream's duration when serving
 * (the coupled run) or without a step count, else the steps' mean time. */
static int64_t planned_length_ns(const kvio_workload_t *workload)
{
    if (kvio_updates_coupled(workload) || workload->train.steps <= 0)
        return workload->duration_ns;
    double step_mean = kvio_dist_mean(&workload->train.step_time);
    return (int64_t)((double)workload->train.steps * fmax(step_mean, 0.0));
}

/* Rank 0 tells the client rank (if any) that training is over
 * (KVIO_RUN_TAG_TRAINING_DONE); the client, done once its stream is out,
 * waits for this before the results gather, whose own wait is only
 * ranks.timeout (training may run far longer). */

/* One 10 ms pause of a wait that ends on a stop or another rank failing
 * (the gather that follows reports it); false, without pausing, then. */
static bool pause_unless_over(kvio_rte_t *rte, const run_context_t *context)
{
    if (context->stop != NULL && *context->stop)
        return false;
    for (int rank = 0; rank < kvio_rte_size(rte); rank++)
        if (rank != kvio_rte_index(rte) && kvio_rte_peer_failed(rte, rank))
            return false;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 10000000};
    nanosleep(&pause, NULL);
    return true;
}

static kvio_status_t wait_training_done(kvio_rte_t *rte, const run_context_t *context)
{
    for (;;) {
        void *data = NULL;
        size_t length = 0;
        kvio_status_t status = kvio_rte_try_recv(rte, TRAIN_RANK, KVIO_RUN_TAG_TRAINING_DONE, &data,
                                                 &length);
        free(data);
        if (status != KVIO_INPROGRESS)
            return status == KVIO_ERR_PEER ? KVIO_OK : status; /* the gather reports it */
        if (!pause_unless_over(rte, context))
            return KVIO_OK;
    }
}

/* Waits for the run's planned end (rank 0's clock), a stop, or another rank
 * failing. */
static void wait_run_end(kvio_rte_t *rte, const run_context_t *context, int64_t run_end_ns)
{
    while (kvio_rte_time_ns(rte) < run_end_ns && pause_unless_over(rte, context)) {
    }
}

/* Rank 0 when its trainer failed and update.on_trainer_loss is serve: the
 * emulated trainer is gone, but this rank still gathers the results (kvio's
 * harness, not part of the emulated system). It tells the serve ranks, then
 * waits for the run's planned end (or a stop, or a serve rank failing). */
static kvio_status_t trainer_lost(kvio_rte_t *rte, const run_context_t *context,
                                  const int *receivers, int num_serve,
                                  const kvio_train_result_t *train, int64_t run_end_ns,
                                  const char *reason, rank_report_t *report)
{
    kvio_trainer_lost_notice_t notice = {
        .last_version = train->count > 0 ? train->records[train->count - 1].version : 0};
    snprintf(notice.reason, sizeof(notice.reason), "%s", reason);
    report->trainer_lost_ns = kvio_rte_time_ns(rte);
    snprintf(report->lost_reason, sizeof(report->lost_reason), "%s", reason);
    kvio_warn("training rank %d lost (%s); the serve ranks keep serving until the run ends",
              kvio_rte_index(rte), reason);
    kvio_status_t status = kvio_update_announce_trainer_lost(rte, receivers, num_serve, &notice);
    if (status == KVIO_OK)
        wait_run_end(rte, context, run_end_ns);
    return status;
}

/* model_updates.trainer_lost: when the trainer was lost and what each serve
 * rank kept serving; NULL when no rank lost it. */
static json_t *trainer_lost_json(const collected_t *all, int num_serve, int64_t origin_ns)
{
    const rank_report_t *trainer = NULL;
    bool lost = false;
    for (int i = 0; i < all->num_reports; i++) {
        if (all->reports[i].is_trainer)
            trainer = &all->reports[i];
        lost = lost || all->reports[i].trainer_lost_ns != 0;
    }
    if (!lost)
        return NULL;
    json_t *object = json_object();
    json_object_set_new(object, "rank", json_integer(TRAIN_RANK));
    if (trainer != NULL && trainer->trainer_lost_ns != 0) {
        json_object_set_new(object, "at_s",
                            json_real((double)(trainer->trainer_lost_ns - origin_ns) / 1e9));
        json_object_set_new(object, "error", json_string(trainer->lost_reason));
    } else {
        json_object_set_new(object, "at_s", json_null());
        json_object_set_new(object, "error", json_string("the serve ranks lost the trainer"));
    }
    json_object_set_new(object, "versions_published", json_integer((json_int_t)all->num_train));
    json_t *ranks = json_array();
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        if (!is_serve_report(report, num_serve))
            continue;
        json_t *rank = json_object();
        json_object_set_new(rank, "rank", json_integer(report->rank));
        json_object_set_new(rank, "last_good_version",
                            json_integer((json_int_t)report->active_version));
        json_object_set_new(rank, "detected_at_s",
                            report->trainer_lost_ns
                                ? json_real((double)(report->trainer_lost_ns - origin_ns) / 1e9)
                                : json_null());
        json_object_set_new(rank, "how", json_string(report->lost_reason));
        json_object_set_new(rank, "served_until_s",
                            json_real((double)(report->t_end_ns - origin_ns) / 1e9));
        json_array_append_new(ranks, rank);
    }
    json_object_set_new(object, "serve_ranks", ranks);
    return object;
}

/* The run's error when the trainer was lost: it names the training rank, the
 * reason and each serve rank's last good version. Returns the status the run
 * fails with: the trainer's own (ENOSPC stays ENOSPC) unless that would read
 * as bad input, else KVIO_ERR_PEER. */
static kvio_status_t trainer_lost_error(const collected_t *all, int num_serve,
                                        char *error_p, size_t error_len)
{
    const char *reason = "the serve ranks stopped hearing from it";
    kvio_status_t status = KVIO_ERR_PEER;
    bool from_trainer = false;
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        if (report->is_trainer && report->trainer_lost_ns != 0) {
            reason = report->lost_reason;
            status = (kvio_status_t)report->trainer_status;
            from_trainer = true;
        } else if (!from_trainer && is_serve_report(report, num_serve) &&
                   report->trainer_lost_ns != 0 && report->lost_reason[0] != '\0') {
            reason = report->lost_reason; /* only a serve rank saw it (its transport) */
        }
    }
    /* The run started fine: a code that means bad input (exit 2) would
     * mislead, so those fail as a lost peer; the reason keeps the detail. */
    if (status == KVIO_OK || kvio_status_is_bad_input(status))
        status = KVIO_ERR_PEER;
    size_t at = (size_t)snprintf(error_p, error_len,
                                 "training rank %d lost (%s); the serve ranks served on until "
                                 "the run ended, with their last good version:",
                                 TRAIN_RANK, reason);
    for (int i = 0; i < all->num_reports && at < error_len; i++)
        if (is_serve_report(&all->reports[i], num_serve))
            at += (size_t)snprintf(error_p + at, error_len - at, " rank %d version %llu",
                                   all->reports[i].rank,
                                   (unsigned long long)all->reports[i].active_version);
    if (at < error_len)
        snprintf(error_p + at, error_len - at, " (summary.json: "
                 "metrics.model_updates.trainer_lost)");
    return status;
}

/* Rank 0 picks the run's id (its pid and wall clock), every rank takes it,
 * and the shared names of transport become the run's own: the file
 * transport's dir/kvio-<id>, the Redis prefix <prefix><id>:. */
static kvio_status_t run_names(kvio_rte_t *rte, kvio_xfer_config_t *transport, char *dir_p,
                               size_t dir_len, char *prefix_p, size_t prefix_len)
{
    char mine[24] = "";
    snprintf(mine, sizeof(mine), "%llx-%x", (unsigned long long)kvio_wall_time_ns(),
             (unsigned)getpid());
    int size = kvio_rte_size(rte);
    char *all = calloc((size_t)size, sizeof(mine));
    if (all == NULL)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = kvio_rte_allgather(rte, mine, sizeof(mine), all);
    if (status == KVIO_OK) {
        const char *id = all; /* rank 0's */
        if (transport->file.dir != NULL) {
            snprintf(dir_p, dir_len, "%s/kvio-%.23s", transport->file.dir, id);
            transport->file.dir = dir_p;
        }
        if (transport->redis.prefix != NULL) {
            snprintf(prefix_p, prefix_len, "%s%.23s:", transport->redis.prefix, id);
            transport->redis.prefix = prefix_p;
        }
    }
    free(all);
    return status;
}

/* The role of a world rank: train ranks first, then serve ranks, then the
 * client rank if any. */
static const char *role_of(int rank, int num_serve)
{
    return rank == TRAIN_RANK ? "train" : rank <= num_serve ? "serve" : "client";
}

/* Rank 0: the run's start (t0 on the wall clock) and each rank's role and
 * set-up time (before t0, not part of any measurement) into context->start. */
static void start_json(const run_context_t *context, const collected_t *all,
                       const kvio_rte_start_t *start, int num_serve)
{
    if (context->start == NULL)
        return;
    json_t *ranks = json_array();
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        json_array_append_new(ranks, kvio_start_rank_json(report->rank,
                                                          role_of(report->rank, num_serve),
                                                          (double)report->setup_ns / 1e9));
    }
    kvio_start_json_set(context->start, start->t0_wall_ns, ranks);
}

/* A serve rank's part: its serve loop with the transport's receiver as its
 * update source; without serving (update.serving: emulated) an engine-less
 * rank runs emulated iterations. */
static kvio_status_t serve_rank(kvio_rte_t *rte, const run_context_t *context,
                                coupled_serve_t *coupled, kvio_xfer_t *xfer, int64_t t0_ns,
                                int64_t run_end_ns, kvio_update_result_t *result_p,
                                char *error_p, size_t error_len)
{
    const kvio_workload_t *workload = context->workload;
    kvio_status_t status = KVIO_OK;
    if (coupled->rank == NULL) {
        coupled->run = (kvio_serve_run_t){.update = &workload->update, .rte = rte,
                                          .first_serve_rank = 1, .t0_ns = t0_ns,
                                          .stop = context->stop};
        status = kvio_serve_rank_create(&coupled->run, (uint32_t)(kvio_rte_index(rte) - 1),
                                        (uint32_t)workload->ranks.serve, &coupled->rank,
                                        error_p, error_len);
    }
    kvio_update_receiver_t *receiver = NULL;
    if (status == KVIO_OK)
        status = kvio_update_receiver_create(&workload->update, rte, xfer, TRAIN_RANK,
                                             run_end_ns, &receiver, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_serve_rank_serve(coupled->rank, receiver, run_end_ns, result_p, error_p,
                                       error_len);
    kvio_update_receiver_destroy(receiver);
    return status;
}

static kvio_status_t rank_main(kvio_rte_t *rte, void *arg)
{
    const run_context_t *context = arg;
    const kvio_workload_t *workload = context->workload;
    int self = kvio_rte_index(rte), size = kvio_rte_size(rte);
    /* A client rank, if any, is the last; it receives no updates. */
    int num_serve = size - 1 - (int)workload->ranks.client;
    bool is_client = self > num_serve;
    char error[768] = "";
    kvio_xfer_t *xfer = NULL;
    void *blob = NULL, **blobs = NULL;
    size_t blob_length = 0, *lengths = NULL;
    kvio_train_result_t train = {0};
    kvio_update_result_t serve = {0};
    kvio_serve_output_t serving = {0}; /* rank 0: what the serve ranks measured */
    collected_t all = {0};
    bool coupled_run = kvio_updates_coupled(workload);
    coupled_serve_t coupled = {0};
    void *serve_blob = NULL, **serve_blobs = NULL;
    size_t serve_blob_length = 0, *serve_lengths = NULL;
    int *receivers = calloc((size_t)num_serve + 1, sizeof(int));
    kvio_sync_plan_t sync = {0}; /* weight_sync: the buckets */
    uint64_t *bucket_bytes = NULL;
    int64_t entered_ns = kvio_rte_time_ns(rte);
    kvio_rte_start_t start = {0};
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (receivers == NULL)
        goto fail;
    for (int i = 0; i < num_serve; i++)
        receivers[i] = 1 + i;
    uint64_t bytes = kvio_train_weights_bytes(&workload->train);
    /* This rank's transport config carries the workload's device: section
     * (it outlives the transport), and weight_sync's buckets. */
    kvio_xfer_config_t transport = workload->train.transport;
    transport.device = workload->device;
    if (workload->weight_sync.granularity != KVIO_SYNC_OFF) {
        status = kvio_updates_sync_buckets(workload, &sync, error, sizeof(error));
        if (status == KVIO_OK &&
            (bucket_bytes = calloc(sync.num_buckets + 1, sizeof(*bucket_bytes))) == NULL)
            status = KVIO_ERR_NOMEM;
        if (status != KVIO_OK)
            goto fail;
        for (size_t b = 0; b < sync.num_buckets; b++)
            bucket_bytes[b] = sync.buckets[b].bytes;
        transport.bucket_bytes = bucket_bytes;
        transport.num_buckets = sync.num_buckets;
        transport.pipeline_depth = workload->weight_sync.pipeline_depth;
        transport.delta = kvio_updates_sync_delta(workload);
        transport.delta.seed = (uint64_t)workload->seed; /* the trainer's weights' */
        static const int routes[] = {[KVIO_SYNC_SEQUENTIAL] = KVIO_XFER_ROUTE_DIRECT,
                                     [KVIO_SYNC_CHAIN] = KVIO_XFER_ROUTE_CHAIN,
                                     [KVIO_SYNC_TREE] = KVIO_XFER_ROUTE_TREE,
                                     [KVIO_SYNC_P2P] = KVIO_XFER_ROUTE_DIRECT};
        transport.route = routes[workload->weight_sync.topology];
    }
    /* Every shared name carries the run's id (rank 0's): concurrent runs on
     * one directory or one Redis never see each other's versions, and the
     * file transport writes only into a directory of its own. */
    char run_dir[4200], run_prefix[512];
    status = run_names(rte, &transport, run_dir, sizeof(run_dir), run_prefix,
                       sizeof(run_prefix));
    if (status != KVIO_OK)
        goto fail;
    /* Set-up first: a serve rank builds its engine and KV pool, every rank
     * connects its transport; then all start together at t0 (the trainer's
     * first step is not spent waiting for a pool being built). */
    int64_t queued_ns = 0; /* waiting for another rank's pool: not this rank's set-up */
    if (coupled_run && self != TRAIN_RANK) {
        status = coupled_create(workload, rte, is_client ? -1 : self - 1, num_serve,
                                context->setup_lock, context->stop, &coupled, error,
                                sizeof(error));
        if (status != KVIO_OK)
            goto fail;
        if (coupled.rank != NULL)
            queued_ns = kvio_serve_rank_setup_wait_ns(coupled.rank);
    }
    status = kvio_xfer_create(&transport, rte,
                              self == TRAIN_RANK ? KVIO_XFER_SENDER
                              : is_client        ? KVIO_XFER_BYSTANDER
                                                 : KVIO_XFER_RECEIVER,
                              TRAIN_RANK, receivers, num_serve, bytes, &xfer, error,
                              sizeof(error));
    if (status != KVIO_OK)
        goto fail;
    rank_report_t report = {.is_trainer = self == TRAIN_RANK, .rank = self,
                            .setup_ns = kvio_rte_time_ns(rte) - entered_ns - queued_ns};
    status = kvio_rte_start(rte, &start);
    if (status != KVIO_OK)
        goto fail;
    if (self == 0)
        kvio_info("every rank is set up (this one in %.2f s); the run starts now (t0)",
                  (double)report.setup_ns / 1e9);
    coupled.run.t0_ns = start.t0_ns;
    kvio_rte_clock_offset(rte, &report.clock_offset_ns, &report.clock_uncertainty_ns);
    snprintf(report.info, sizeof(report.info), "%s", kvio_xfer_info(xfer));
    int64_t run_end = start.t0_ns + planned_length_ns(workload);
    kvio_status_t lost = KVIO_OK; /* some rank lost the trainer: the run fails with this
                                     after the results */
    const void *records = NULL; /* what this rank reports: train or update records */
    size_t record_size = 0;
    if (self == TRAIN_RANK) {
        status = kvio_train_run(&workload->train, (uint64_t)workload->seed, rte, xfer,
                                workload->duration_ns, context->stop, &train, error,
                                sizeof(error));
        /* Lost: the trainer's own failure, not a serve rank's (a serve rank
         * that failed or fell silent fails the run at once whatever the
         * setting). */
        if (status != KVIO_OK && status != KVIO_ERR_NOMEM && status != KVIO_ERR_PEER &&
            status != KVIO_ERR_TIMEOUT &&
            workload->update.on_trainer_loss == KVIO_TRAINER_LOSS_SERVE) {
            report.trainer_status = status;
            status = trainer_lost(rte, context, receivers, num_serve, &train, run_end, error,
                                  &report);
            error[0] = '\0';
        }
        if (status == KVIO_OK && workload->ranks.client > 0)
            status = kvio_rte_send(rte, size - 1, KVIO_RUN_TAG_TRAINING_DONE, "", 1);
        if (status != KVIO_OK)
            goto fail;
        report.count = train.count;
        report.steps = (uint64_t)train.steps;
        report.t_start_ns = train.t_start_ns;
        report.t_end_ns = train.t_end_ns;
        records = train.records;
        record_size = sizeof(*train.records);
    } else {
        if (is_client) {
            status = kvio_serve_client_run(coupled.client, context->stop, error, sizeof(error));
        } else {
            status = serve_rank(rte, context, &coupled, xfer, start.t0_ns, run_end, &serve, error,
                                sizeof(error));
        }
        if (status != KVIO_OK)
            goto fail;
        if (is_client)
            status = wait_training_done(rte, context);
        if (status != KVIO_OK)
            goto fail;
        report.trainer_lost_ns = serve.trainer_lost_ns;
        report.active_version = serve.active_version;
        snprintf(report.lost_reason, sizeof(report.lost_reason), "%s",
                 serve.trainer_lost_reason);
        report.count = serve.count;
        report.iterations = serve.iterations;
        report.polls = serve.polls;
        report.checksum_mismatches = serve.checksum_mismatches;
        report.inference_stall_ns = serve.inference_stall_ns;
        report.t_start_ns = serve.t_start_ns;
        report.t_end_ns = serve.t_end_ns;
        records = serve.records;
        record_size = sizeof(*serve.records);
    }
    /* Stopped early (a signal to this rank alone, under mpirun): the run
     * as a whole is incomplete, whatever rank 0 saw. */
    report.interrupted = context->stop != NULL && *context->stop;
    const kvio_xfer_bucket_stamp_t *stamps = NULL;
    size_t num_stamps = 0;
    kvio_xfer_bucket_stamps(xfer, &stamps, &num_stamps);
    report.num_stamps = num_stamps;
    status = pack_report(&report, records, record_size, stamps, &blob, &blob_length);
    if (status != KVIO_OK)
        goto fail;
    status = kvio_rte_gather_blobs(rte, blob, blob_length, &blobs, &lengths);
    if (status != KVIO_OK)
        goto fail;
    if (coupled_run) {
        /* A second round: the serve ranks' serving measurements. */
        if (is_client)
            status = kvio_serve_client_pack(coupled.client, &serve_blob, &serve_blob_length);
        else if (self != TRAIN_RANK)
            status = kvio_serve_rank_pack(coupled.rank, &serve_blob, &serve_blob_length);
        else
            status = (serve_blob = malloc(1)) != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
        if (status == KVIO_OK)
            status = kvio_rte_gather_blobs(rte, serve_blob, serve_blob_length, &serve_blobs,
                                           &serve_lengths);
        if (status != KVIO_OK)
            goto fail;
    }
    if (self == 0) {
        status = collect(blobs, lengths, size, &all);
        /* Serving first: what updates did to it goes into updates.csv. */
        if (status == KVIO_OK && coupled_run && context->metrics != NULL)
            status = coupled_metrics(context, &all, serve_blobs, serve_lengths, size, &serving,
                                     error, sizeof(error));
        if (status == KVIO_OK)
            status = write_metrics(context, &all, start.t0_ns,
                                   coupled_run && context->metrics != NULL ? &serving : NULL,
                                   error, sizeof(error));
        if (status == KVIO_OK)
            start_json(context, &all, &start, num_serve);
        if (status == KVIO_OK && sync.num_buckets > 0)
            status = sync_results(context, &all, &sync, start.t0_ns, error, sizeof(error));
        json_t *lost_json = status == KVIO_OK ? trainer_lost_json(&all, num_serve, start.t0_ns)
                                              : NULL;
        if (status == KVIO_OK && context->metrics != NULL) {
            json_t *object = json_object_get(context->metrics, "model_updates");
            json_object_set_new(object, "runtime",
                                json_string(kvio_rte_world_kind(kvio_rte_world(rte))));
            if (lost_json != NULL)
                json_object_set(object, "trainer_lost", lost_json);
        }
        if (lost_json != NULL) {
            lost = trainer_lost_error(&all, num_serve, error, sizeof(error));
            json_decref(lost_json);
        }
        json_t *interrupted = json_array();
        for (int i = 0; i < all.num_reports; i++)
            if (all.reports[i].interrupted)
                json_array_append_new(interrupted, json_integer(all.reports[i].rank));
        if (context->metrics != NULL && json_array_size(interrupted) > 0)
            json_object_set(json_object_get(context->metrics, "model_updates"),
                            "interrupted_ranks", interrupted);
        json_decref(interrupted);
        if (status != KVIO_OK)
            goto fail;
    }
    /* Nobody tears down a transport a peer may still be using (CUDA calls
     * freeing memory another process still has open undefined). */
    kvio_xfer_detach(xfer);
    status = kvio_rte_barrier(rte);
    if (status != KVIO_OK)
        goto fail;
    kvio_xfer_destroy(xfer);
    xfer = NULL;
    if (lost != KVIO_OK) {
        /* Every rank finished cleanly; the run as a whole did not. */
        kvio_rte_set_error(rte, "%s", error);
        status = lost;
    }
    goto done;
fail:
    if (error[0] != '\0')
        kvio_rte_set_error(rte, "%s", error);
    else if (xfer != NULL && kvio_xfer_error(xfer)[0] != '\0')
        kvio_rte_set_error(rte, "%s", kvio_xfer_error(xfer));
    kvio_xfer_detach(xfer); /* no barrier on a failure: at least drop peers' memory first */
    kvio_xfer_destroy(xfer);
done:
    kvio_rte_blobs_free(blobs, lengths, size);
    if (serve_blobs != NULL)
        kvio_rte_blobs_free(serve_blobs, serve_lengths, size);
    free(serve_blob);
    coupled_destroy(&coupled);
    collected_free(&all);
    kvio_serve_output_free(&serving);
    free(blob);
    free(receivers);
    free(bucket_bytes);
    kvio_sync_plan_free(&sync);
    kvio_train_result_free(&train);
    kvio_update_result_free(&serve);
    return status;
}

/* ---- simulate ---- */

/* The parameters the model used and where each came from. */
static json_t *model_json(const kvio_xfer_config_t *transport)
{
    static const char *const sources[] = {"default", "set", "from"};
    int64_t latency_ns;
    double bandwidth_gbps;
    kvio_xfer_model_source_t latency_source, bandwidth_source;
    kvio_xfer_model_params(transport, &latency_ns, &bandwidth_gbps, &latency_source,
                           &bandwidth_source);
    const kvio_xfer_model_config_t *model = &transport->model;
    bool taken = model->taken;
    return json_pack("{s:f, s:f, s:o, s:{s:s, s:s}, s:f, s:o}", "latency_s",
                     (double)latency_ns / 1e9, "bandwidth_gbps", bandwidth_gbps, "from",
                     taken && model->from != NULL ? json_string(model->from) : json_null(),
                     "source", "latency", sources[latency_source], "bandwidth",
                     sources[bandwidth_source], "verify_gbps",
                     taken && model->taken_verify_gbps > 0 ? model->taken_verify_gbps : 10.0,
                     "checksum_gbps", taken && model->taken_checksum_gbps > 0
                                          ? json_real(model->taken_checksum_gbps)
                                          : json_null());
}

void kvio_updates_schedule_free(kvio_updates_schedule_t *schedule)
{
    kvio_sync_plan_free(&schedule->sync);
    free(schedule->train);
    free(schedule->updates);
    free(schedule->inference_stall_ns);
    free(schedule->version_steps);
    memset(schedule, 0, sizeof(*schedule));
}

kvio_status_t kvio_updates_schedule(const kvio_workload_t *workload,
                                    kvio_updates_schedule_t *schedule_p, char *error_p,
                                    size_t error_len)
{
    const kvio_train_config_t *config = &workload->train;
    int num_serve = (int)workload->ranks.serve;
    uint64_t bytes = kvio_train_weights_bytes(config);
    int64_t iteration = workload->update.iteration_ns;
    kvio_rng_t rng;
    kvio_rng_seed(&rng, (uint64_t)workload->seed, TRAIN_RANK, "train.step_time");
    kvio_updates_schedule_t schedule = {0};
    size_t capacity = 64;
    schedule.train = malloc(capacity * sizeof(*schedule.train));
    schedule.updates = malloc(capacity * (size_t)num_serve * sizeof(*schedule.updates));
    schedule.inference_stall_ns = calloc((size_t)num_serve + 1, sizeof(int64_t));
    if (schedule.train == NULL || schedule.updates == NULL ||
        schedule.inference_stall_ns == NULL)
        goto nomem;
    int64_t now = 0, last_ns = 0, last_step = 0, cost = 0, step = 0;
    /* Verification runs at 10 GB/s (XXH3 on one core), documented; with
     * model.from at the measured rate, and the trainer's checksum before the
     * publish at its measured rate too (over ucx both now overlap the
     * transfer, so their measured rates are high). */
    const kvio_xfer_model_config_t *model = &config->transport.model;
    double verify_gbps = model->taken && model->taken_verify_gbps > 0 ? model->taken_verify_gbps
                                                                      : 10.0;
    int64_t verify_ns = workload->update.verify ? (int64_t)((double)bytes / verify_gbps) : 0;
    int64_t prepare_ns = model->taken && model->taken_checksum_gbps > 0
                             ? (int64_t)((double)bytes / model->taken_checksum_gbps)
                             : 0;
    /* One receiver's data moves for latency + bytes / bandwidth, ending at
     * its arrival (after the servers before it, a chain's hops, or a shared
     * store's write and discovery). */
    int64_t hop_latency_ns;
    double hop_gbps;
    kvio_xfer_model_params(&config->transport, &hop_latency_ns, &hop_gbps, NULL, NULL);
    int64_t moving_ns = hop_latency_ns + (int64_t)((double)bytes / hop_gbps);
    /* weight_sync: the model's tensors through the pipelined stages; the
     * update is the model's weights, not train.bytes. */
    bool sync = workload->weight_sync.granularity != KVIO_SYNC_OFF;
    if (sync) {
        kvio_model_t shape = workload->model;
        kvio_gpu_t gpu = workload->gpu;
        kvio_status_t status = kvio_model_resolve(&shape, error_p, error_len);
        if (status == KVIO_OK)
            status = kvio_gpu_resolve(&gpu, error_p, error_len);
        if (status == KVIO_OK)
            status = kvio_sync_plan(&workload->weight_sync, &shape, &gpu,
                                    workload->cost.tensor_parallel, num_serve, &schedule.sync,
                                    error_p, error_len);
        if (status != KVIO_OK) {
            kvio_updates_schedule_free(&schedule);
            return status;
        }
        bytes = schedule.sync.bytes;
        verify_ns = workload->update.verify ? (int64_t)((double)bytes / verify_gbps) : 0;
        prepare_ns = 0;
    }
    for (;;) {
        if (config->steps > 0 ? step >= config->steps : now >= workload->duration_ns)
            break;
        now += (int64_t)fmax(0.0, kvio_dist_sample(&config->step_time, &rng));
        step++;
        if (!kvio_checkpoint_due(&config->checkpoint, step, now, last_step, last_ns, cost))
            continue;
        if (schedule.num_train == capacity) {
            capacity *= 2;
            kvio_train_record_t *train = realloc(schedule.train, capacity * sizeof(*train));
            if (train != NULL)
                schedule.train = train;
            kvio_update_record_t *updates =
                realloc(schedule.updates, capacity * (size_t)num_serve * sizeof(*updates));
            if (updates != NULL)
                schedule.updates = updates;
            if (train == NULL || updates == NULL)
                goto nomem;
        }
        int64_t busy = 0, publish = now + prepare_ns;
        for (int receiver = 0; receiver < num_serve; receiver++) {
            int64_t arrival;
            if (sync) {
                /* The trainer is held until its last bucket is staged;
                 * P2P does not involve it (the peers send). */
                arrival = schedule.sync.arrival_ns[receiver];
                busy = workload->weight_sync.topology == KVIO_SYNC_P2P ? 0
                                                                       : schedule.sync.staged_ns;
            } else {
                kvio_xfer_model(&config->transport, bytes, receiver, num_serve, &arrival, &busy);
            }
            int64_t notified = publish + arrival, verified = notified + verify_ns;
            int64_t xfer_start = sync ? publish
                                 : notified - moving_ns > publish ? notified - moving_ns
                                                                  : publish;
            int64_t activated = workload->update.apply == KVIO_APPLY_SHADOW
                                    ? (verified + iteration - 1) / iteration * iteration
                                    : verified;
            if (workload->update.apply == KVIO_APPLY_STALL)
                schedule.inference_stall_ns[receiver] += activated - notified;
            schedule.updates[schedule.num_updates++] = (kvio_update_record_t){
                .version = schedule.num_train + 1, .bytes = bytes, .rank = 1 + receiver,
                .checksum_ok = 1, .verified = workload->update.verify, .t_ready_ns = now,
                .t_xfer_start_ns = xfer_start, .t_xfer_end_ns = notified,
                .t_notified_ns = notified,
                .t_verified_ns = verified, .t_activated_ns = activated};
        }
        schedule.train[schedule.num_train] = (kvio_train_record_t){
            .version = schedule.num_train + 1, .step = step, .t_ready_ns = now,
            .t_publish_start_ns = publish, .t_publish_end_ns = publish + busy,
            .stall_ns = prepare_ns + busy, .bytes_moved = bytes * (uint64_t)num_serve};
        schedule.num_train++;
        last_step = step;
        last_ns = now;
        cost = prepare_ns + busy;
        now += prepare_ns + busy; /* the step loop is blocked while publishing */
    }
    schedule.end_ns = now;
    schedule.num_version_steps = schedule.num_train + 1;
    schedule.version_steps = calloc(schedule.num_version_steps, sizeof(double));
    if (schedule.version_steps == NULL)
        goto nomem;
    for (size_t v = 0; v < schedule.num_train; v++)
        schedule.version_steps[schedule.train[v].version] = (double)schedule.train[v].step;
    *schedule_p = schedule;
    return KVIO_OK;
nomem:
    kvio_updates_schedule_free(&schedule);
    snprintf(error_p, error_len, "model updates: out of memory");
    return KVIO_ERR_NOMEM;
}

/* weight_sync: what one update's plan did (summary.json). */
static json_t *sync_json(const kvio_sync_plan_t *plan)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:f, s:f}", "buckets", (json_int_t)plan->num_buckets,
                     "messages", (json_int_t)plan->messages, "bytes", (json_int_t)plan->bytes,
                     "wire_bytes", (json_int_t)plan->wire_bytes, "staged_ms",
                     (double)plan->staged_ns / 1e6, "update_ms", (double)plan->total_ns / 1e6);
}

/* sync.csv: each bucket of one update (every version's is the same) and when
 * its stages ended for the last GPU, from the update's publish. */
static kvio_status_t write_sync_csv(kvio_results_t *results, const kvio_sync_plan_t *plan,
                                    char *error_p, size_t error_len)
{
    kvio_csv_t *csv = NULL;
    kvio_status_t status = kvio_csv_open(results, "sync.csv",
                                         "bucket,tensors,bytes,wire_bytes,t_staged_ms,"
                                         "t_broadcast_ms,t_reloaded_ms",
                                         &csv);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s/sync.csv: cannot write", kvio_results_path(results));
        return status;
    }
    for (size_t b = 0; b < plan->num_buckets; b++) {
        const kvio_sync_bucket_t *bucket = &plan->buckets[b];
        kvio_csv_row(csv, "%zu,%u,%llu,%llu,%.6f,%.6f,%.6f", b, bucket->tensors,
                     (unsigned long long)bucket->bytes, (unsigned long long)bucket->wire_bytes,
                     (double)bucket->staged_ns / 1e6, (double)bucket->broadcast_ns / 1e6,
                     (double)bucket->reloaded_ns / 1e6);
    }
    status = kvio_csv_close(csv);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "sync.csv: write failed");
    return status;
}

static kvio_status_t simulate(const run_context_t *context,
                              const kvio_updates_schedule_t *served_on, char *error_p,
                              size_t error_len)
{
    const kvio_workload_t *workload = context->workload;
    int num_serve = (int)workload->ranks.serve;
    int64_t iteration = workload->update.iteration_ns;
    kvio_updates_schedule_t own = {0};
    kvio_status_t status = KVIO_OK;
    if (served_on == NULL) {
        status = kvio_updates_schedule(workload, &own, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    const kvio_updates_schedule_t *schedule = served_on != NULL ? served_on : &own;
    collected_t all = {.train = schedule->train, .num_train = schedule->num_train,
                       .updates = schedule->updates, .num_updates = schedule->num_updates,
                       .num_reports = num_serve + 1};
    all.reports = calloc((size_t)num_serve + 1, sizeof(*all.reports));
    if (all.reports == NULL) {
        kvio_updates_schedule_free(&own);
        snprintf(error_p, error_len, "model updates: out of memory");
        return KVIO_ERR_NOMEM;
    }
    int64_t end = schedule->end_ns;
    all.reports[0] = (rank_report_t){.is_trainer = 1, .rank = 0, .t_end_ns = end};
    for (int receiver = 0; receiver < num_serve; receiver++)
        all.reports[1 + receiver] = (rank_report_t){
            .rank = 1 + receiver, .t_start_ns = 0, .t_end_ns = end,
            .inference_stall_ns = schedule->inference_stall_ns[receiver],
            .iterations = iteration > 0 ? (uint64_t)(end / iteration) : 0};
    snprintf(all.info, sizeof(all.info), "simulated: latency + bytes / bandwidth");
    status = write_metrics(context, &all, 0, context->serving, error_p, error_len);
    if (status == KVIO_OK && context->metrics != NULL) {
        json_t *object = json_object_get(context->metrics, "model_updates");
        json_object_set_new(object, "runtime", json_string("simulate"));
        if (schedule->sync.num_buckets > 0)
            json_object_set_new(object, "weight_sync", sync_json(&schedule->sync));
        else
            json_object_set_new(object, "model", model_json(&workload->train.transport));
    }
    if (status == KVIO_OK && context->results != NULL && schedule->sync.num_buckets > 0)
        status = write_sync_csv(context->results, &schedule->sync, error_p, error_len);
    free(all.reports);
    kvio_updates_schedule_free(&own);
    return status;
}

kvio_status_t kvio_updates_run(const kvio_workload_t *workload, kvio_rte_world_t *world,
                               const kvio_updates_schedule_t *schedule,
                               const kvio_serve_output_t *serving,
                               volatile sig_atomic_t *stop, struct kvio_results *results,
                               json_t *metrics, json_t *start, kvio_event_trace_t *events,
                               char *error_p, size_t error_len)
{
    run_context_t context = {.workload = workload, .results = results, .metrics = metrics,
                             .events = events, .stop = stop, .start = start,
                             .serving = serving};
    if (workload->mode != KVIO_MODE_EMULATE || world == NULL)
        return simulate(&context, schedule, error_p, error_len);
    pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
    context.setup_lock = &setup_lock;
    return kvio_rte_world_run(world, rank_main, &context, error_p, error_len);
}
