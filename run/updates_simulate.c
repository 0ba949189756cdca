/* Simulate mode's model updates: the trainer's versions and each serve
 * rank's updates on the virtual clock, from the train section and the
 * transport model (latency + bytes / bandwidth, or weight_sync's plan), and
 * their metrics; and kvio_updates_run, which runs the updates of either
 * mode. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/results.h"
#include "kvio/rng.h"

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

static int compare_ns(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The rate the run's no-update twin served, as the trainer's clock passes
 * (adaptive checkpoints): its finish times in order, fed to a meter. */
typedef struct twin_rate {
    bool on;
    int64_t *finishes;
    size_t count, finished;
    kvio_served_meter_t meter;
} twin_rate_t;

static kvio_status_t twin_rate_init(twin_rate_t *rate, const kvio_serve_output_t *served,
                                    bool adaptive)
{
    *rate = (twin_rate_t){.on = adaptive && served != NULL};
    if (!rate->on)
        return KVIO_OK;
    rate->count = served->num_finished;
    rate->finishes = malloc((rate->count + 1) * sizeof(*rate->finishes));
    if (rate->finishes == NULL || kvio_served_meter_init(&rate->meter, 1, 0) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < rate->count; i++)
        rate->finishes[i] = served->finished[i].finish_ns;
    qsort(rate->finishes, rate->count, sizeof(*rate->finishes), compare_ns);
    return KVIO_OK;
}

/* Requests per second served up to now_ns (-1: not read, the prior holds). */
static double twin_rate_at(twin_rate_t *rate, int64_t now_ns)
{
    if (!rate->on)
        return -1;
    while (rate->finished < rate->count && rate->finishes[rate->finished] <= now_ns)
        rate->finished++;
    kvio_served_meter_report(&rate->meter, 0,
                             &(kvio_served_report_t){.t_ns = now_ns, .count = rate->finished});
    return kvio_served_meter_rate(&rate->meter);
}

static void twin_rate_free(twin_rate_t *rate)
{
    free(rate->finishes);
    kvio_served_meter_free(&rate->meter);
}

/* #59 item 11: a schedule whose updates land past the run clock's limit
 * (weight_sync's per-tensor time over a big model's tensors and many steps
 * reached 26 years) is refused, naming what set it, not reported complete. */
static bool past_the_clock(const kvio_updates_schedule_t *schedule, char *error_p,
                           size_t error_len)
{
    for (size_t u = 0; u < schedule->num_updates; u++) {
        const kvio_update_record_t *update = &schedule->updates[u];
        if (update->t_activated_ns <= KVIO_CLOCK_LIMIT_NS)
            continue;
        snprintf(error_p, error_len,
                 "model updates: version %llu would activate %.1f years into the run, past "
                 "the run clock's %d-year limit: check weight_sync.* (tensor_overhead, "
                 "bucket_size, nic_bandwidth), train.transport.model and train.step_time",
                 (unsigned long long)update->version,
                 (double)update->t_activated_ns / 1e9 / (365.0 * 86400), KVIO_CLOCK_LIMIT_YEARS);
        return true;
    }
    return false;
}

kvio_status_t kvio_updates_schedule(const kvio_workload_t *workload,
                                    const kvio_serve_output_t *served,
                                    kvio_updates_schedule_t *schedule_p, char *error_p,
                                    size_t error_len)
{
    const kvio_train_config_t *config = &workload->train;
    int num_serve = (int)workload->ranks.serve;
    uint64_t bytes = kvio_train_weights_bytes(config);
    int64_t iteration = workload->update.iteration_ns;
    kvio_rng_t rng;
    kvio_rng_seed(&rng, (uint64_t)workload->seed, TRAIN_RANK, "train.step_time");
    /* Adaptive checkpoints weigh an update by the rate served, as the run's
     * no-update twin served it up to the trainer's step (causal: what a
     * trainer could have learnt by then). */
    twin_rate_t rate = {0};
    kvio_updates_schedule_t schedule = {0};
    size_t capacity = 64;
    schedule.train = malloc(capacity * sizeof(*schedule.train));
    schedule.updates = malloc(capacity * (size_t)num_serve * sizeof(*schedule.updates));
    schedule.inference_stall_ns = calloc((size_t)num_serve + 1, sizeof(int64_t));
    if (schedule.train == NULL || schedule.updates == NULL ||
        schedule.inference_stall_ns == NULL)
        goto nomem;
    int64_t now = 0, last_ns = 0, last_step = 0, cost = 0, step = 0;
    if (twin_rate_init(&rate, served, config->checkpoint.policy == KVIO_CHECKPOINT_ADAPTIVE) !=
        KVIO_OK)
        goto nomem;
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
            twin_rate_free(&rate);
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
        double served_rate = twin_rate_at(&rate, now);
        if (!kvio_checkpoint_due(&config->checkpoint, step, now, last_step, last_ns, cost,
                                 served_rate))
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
            .stall_ns = prepare_ns + busy, .bytes_moved = bytes * (uint64_t)num_serve,
            .serving_rate = served_rate >= 0 ? served_rate : config->checkpoint.serving_rate,
            .serving_rate_measured = served_rate >= 0};
        schedule.num_train++;
        last_step = step;
        last_ns = now;
        cost = prepare_ns + busy;
        now += prepare_ns + busy; /* the step loop is blocked while publishing */
    }
    schedule.end_ns = now;
    if (past_the_clock(&schedule, error_p, error_len))
        goto refused;
    schedule.num_version_steps = schedule.num_train + 1;
    schedule.version_steps = calloc(schedule.num_version_steps, sizeof(double));
    if (schedule.version_steps == NULL)
        goto nomem;
    for (size_t v = 0; v < schedule.num_train; v++)
        schedule.version_steps[schedule.train[v].version] = (double)schedule.train[v].step;
    twin_rate_free(&rate);
    *schedule_p = schedule;
    return KVIO_OK;
refused:
    twin_rate_free(&rate);
    kvio_updates_schedule_free(&schedule);
    return KVIO_ERR_CONFIG;
nomem:
    twin_rate_free(&rate);
    kvio_updates_schedule_free(&schedule);
    snprintf(error_p, error_len, "model updates: out of memory");
    return KVIO_ERR_NOMEM;
}

/* weight_sync: what one update's plan did (summary.json). */
static json_t *sync_json(const kvio_sync_plan_t *plan)
{
    return json_pack("{s:I, s:I, s:I, s:f}", "buckets", (json_int_t)plan->num_buckets,
                     "messages", (json_int_t)plan->messages, "bytes", (json_int_t)plan->bytes,
                     "staged_ms", (double)plan->staged_ns / 1e6);
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
    return kvio_csv_finish(csv, "sync.csv", error_p, error_len);
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
        status = kvio_updates_schedule(workload, NULL, &own, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    const kvio_updates_schedule_t *schedule = served_on != NULL ? served_on : &own;
    int size = run_first_serve_rank(workload) + num_serve;
    collected_t all = {.train = schedule->train, .num_train = schedule->num_train,
                       .updates = schedule->updates, .num_updates = schedule->num_updates,
                       .num_reports = size};
    all.reports = calloc((size_t)size, sizeof(*all.reports));
    if (all.reports == NULL) {
        kvio_updates_schedule_free(&own);
        snprintf(error_p, error_len, "model updates: out of memory");
        return KVIO_ERR_NOMEM;
    }
    /* Each rank's report as emulate's ranks send theirs, from the plan's
     * parts of it. */
    int64_t end = schedule->end_ns;
    for (int rank = 0; rank < size; rank++) {
        run_rank_parts_t parts = run_rank_parts(workload, false, rank);
        all.reports[rank] = (rank_report_t){.is_trainer = parts.train, .rank = rank,
                                            .t_end_ns = end};
        if (parts.serve) {
            all.reports[rank].inference_stall_ns =
                schedule->inference_stall_ns[parts.serve_index];
            all.reports[rank].iterations = iteration > 0 ? (uint64_t)(end / iteration) : 0;
        }
    }
    snprintf(all.info, sizeof(all.info), "simulated: latency + bytes / bandwidth");
    status = run_updates_metrics(context, &all, 0, context->serving, error_p, error_len);
    if (status == KVIO_OK && context->result != NULL) {
        json_t *object = kvio_result_detail_object(context->result, "model_updates");
        kvio_result_set_text(context->result, KVIO_FIG_UPDATE_RUNTIME, "simulate");
        const kvio_sync_plan_t *plan = &schedule->sync;
        if (plan->num_buckets > 0) {
            json_object_set_new(object, "weight_sync", sync_json(plan));
            run_sync_figures(context->result, (double)plan->total_ns / 1e6,
                             (double)plan->wire_bytes, (double)plan->source_wire_bytes,
                             (double)plan->forwarded_wire_bytes);
        } else
            json_object_set_new(object, "model", model_json(&workload->train.transport));
    }
    if (status == KVIO_OK && context->results != NULL && schedule->sync.num_buckets > 0)
        status = write_sync_csv(context->results, &schedule->sync, error_p, error_len);
    free(all.reports);
    kvio_updates_schedule_free(&own);
    return status;
}

kvio_status_t kvio_updates_run(const run_context_t *context, kvio_rte_world_t *world,
                               const kvio_updates_schedule_t *schedule, char *error_p,
                               size_t error_len)
{
    if (context->workload->mode != KVIO_MODE_EMULATE || world == NULL)
        return simulate(context, schedule, error_p, error_len);
    run_context_t own = *context; /* each rank reads it; rank 0 writes its result */
    return run_updates_emulate(world, &own, error_p, error_len);
}
