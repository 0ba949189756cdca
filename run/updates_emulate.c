/* Emulate mode's run with model updates: every rank's part (the trainer's
 * step loop, a serve rank's loop with the transport's receiver, the client
 * rank), started together at t0, its records gathered to rank 0, and there
 * the results; a lost trainer reported without failing the ranks that
 * served on. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/results.h"
#include "kvio/sysinfo.h"
#include "kvio/wire.h"

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
        if (blobs[rank] == NULL)
            continue; /* a lost client rank's: it reports nothing */
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
        report->rank = rank;
        if (blobs[rank] == NULL)
            continue;
        read_report(blobs[rank], lengths[rank], report, &records, &stamps);
        report->hostname[sizeof(report->hostname) - 1] = '\0'; /* a peer's text */
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
    if (run_stop_asked(context->stop))
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
    snprintf(notice.reason, sizeof(notice.reason), "%.*s", (int)sizeof(notice.reason) - 1,
             reason);
    report->trainer_lost_ns = kvio_rte_time_ns(rte);
    snprintf(report->lost_reason, sizeof(report->lost_reason), "%.*s",
             (int)sizeof(report->lost_reason) - 1, reason);
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

/* Rank 0: the run's start (t0 on the wall clock) and each rank's role (the
 * plan's), set-up time (before t0, not part of any measurement) and host
 * (under mpirun, not all rank 0's) into context->start (may be NULL) and
 * the result's setup figures. */
static kvio_status_t start_json(const run_context_t *context, const collected_t *all,
                                const kvio_rte_start_t *start)
{
    kvio_serve_setup_entry_t *ranks = calloc((size_t)all->num_reports + 1, sizeof(*ranks));
    if (ranks == NULL)
        return KVIO_ERR_NOMEM;
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        ranks[i] = (kvio_serve_setup_entry_t){
            .rank = report->rank,
            .role = run_rank_parts(context->workload, context->frontend != NULL, report->rank)
                        .role,
            .setup_s = (double)report->setup_ns / 1e9, .host = report->hostname};
    }
    kvio_serve_setup_record(context->result, context->start, start->t0_wall_ns, ranks,
                            (size_t)all->num_reports);
    free(ranks);
    return KVIO_OK;
}

/* How often a serve rank tells the trainer how many requests it served. */
#define SERVED_REPORT_NS 500000000ll

/* A serve rank's part: its serve loop (the engine, or without serving,
 * update.serving: emulated, emulated iterations) with the transport's
 * receiver as its update source. */
static kvio_status_t serve_rank(kvio_rte_t *rte, const run_context_t *context,
                                run_rank_serve_t *part, kvio_xfer_t *xfer,
                                int64_t run_end_ns, kvio_update_result_t *result_p,
                                char *error_p, size_t error_len)
{
    const kvio_workload_t *workload = context->workload;
    kvio_update_receiver_t *receiver = NULL;
    kvio_status_t status = kvio_update_receiver_create(&workload->update, rte, xfer, TRAIN_RANK,
                                                       run_end_ns, &receiver, error_p,
                                                       error_len);
    /* The adaptive checkpoint policy weighs an update by the rate served
     * (emulated iterations serve no requests: the policy keeps its prior). */
    if (status == KVIO_OK && workload->train.checkpoint.policy == KVIO_CHECKPOINT_ADAPTIVE &&
        workload->update.serving == KVIO_SERVING_ENGINE)
        kvio_update_receiver_report_served(receiver, SERVED_REPORT_NS);
    if (status == KVIO_OK)
        status = kvio_serve_rank_serve(part->rank, receiver, run_end_ns, result_p, error_p,
                                       error_len);
    kvio_update_receiver_destroy(receiver);
    return status;
}

/* What one rank holds through its part of the run. */
typedef struct rank_state {
    kvio_rte_t *rte;
    const run_context_t *context;
    const kvio_workload_t *workload;
    int self, size, num_serve;
    run_rank_parts_t parts;          /* what this rank runs (run_rank_parts) */
    bool coupled_run;
    char error[KVIO_ERROR_MAX];
    int *receivers;                  /* the serve ranks' world ranks */
    kvio_xfer_config_t transport;    /* this rank's: the device, weight_sync's buckets */
    uint64_t *bucket_bytes;
    kvio_sync_plan_t sync;           /* weight_sync: the buckets */
    char run_dir[4200], run_prefix[512];
    run_rank_serve_t serve_part;     /* a serve rank's engine or iterations, or the client */
    kvio_xfer_t *xfer;
    kvio_trainer_t *trainer;         /* the train rank's, set up before t0 */
    kvio_rte_start_t start;
    int64_t run_end_ns;
    rank_report_t report;
    kvio_train_result_t train;
    kvio_update_result_t serve;
    const void *records;             /* what this rank reports: train or update records */
    size_t record_size;
    void *blob, **blobs;
    size_t blob_length, *lengths;
    void *serve_blob, **serve_blobs;
    size_t serve_blob_length, *serve_lengths;
    collected_t all;                 /* rank 0 */
    kvio_serve_output_t serving;     /* rank 0: what the serve ranks measured */
    kvio_status_t lost;              /* a rank lost the trainer, or rank 0 the client: the
                                        run fails with this after the results */
    bool gave_up_client;             /* rank 0 gathered without the client's report */
    char client_lost[320];           /* why (rank 0's wait) */
} rank_state_t;

/* This rank's transport: the workload's device: section (it outlives the
 * transport), weight_sync's buckets and route, and the run's own names. */
static kvio_status_t rank_transport(rank_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    state->transport = workload->train.transport;
    state->transport.device = workload->device;
    state->transport.data = workload->data;
    state->transport.data_seed = (uint64_t)workload->seed;
    if (workload->weight_sync.granularity != KVIO_SYNC_OFF) {
        kvio_status_t status = kvio_updates_sync_buckets(workload, &state->sync, state->error,
                                                         sizeof(state->error));
        if (status == KVIO_OK && (state->bucket_bytes = calloc(
                                      state->sync.num_buckets + 1, sizeof(uint64_t))) == NULL)
            status = KVIO_ERR_NOMEM;
        if (status != KVIO_OK)
            return status;
        for (size_t b = 0; b < state->sync.num_buckets; b++)
            state->bucket_bytes[b] = state->sync.buckets[b].bytes;
        state->transport.bucket_bytes = state->bucket_bytes;
        state->transport.num_buckets = state->sync.num_buckets;
        state->transport.pipeline_depth = workload->weight_sync.pipeline_depth;
        state->transport.delta = kvio_updates_sync_delta(workload);
        state->transport.delta.seed = (uint64_t)workload->seed; /* the trainer's weights' */
        static const int routes[] = {[KVIO_SYNC_SEQUENTIAL] = KVIO_XFER_ROUTE_DIRECT,
                                     [KVIO_SYNC_CHAIN] = KVIO_XFER_ROUTE_CHAIN,
                                     [KVIO_SYNC_TREE] = KVIO_XFER_ROUTE_TREE,
                                     [KVIO_SYNC_P2P] = KVIO_XFER_ROUTE_DIRECT};
        state->transport.route = routes[workload->weight_sync.topology];
    }
    /* Every shared name carries the run's id (rank 0's): concurrent runs on
     * one directory or one Redis never see each other's versions, and the
     * file transport writes only into a directory of its own. */
    return run_names(state->rte, &state->transport, state->run_dir, sizeof(state->run_dir),
                     state->run_prefix, sizeof(state->run_prefix));
}

/* The memcpy the warm updates are judged by (run/validity.c): once every
 * rank is set up, the first serve rank copies one of its receive slots
 * into the other (host memory the transport faulted in, the update's
 * bytes; slot 0 takes nothing before the first version), twice, keeping
 * the faster, while the other ranks wait at the barrier before t0. GPU
 * slots are not timed (*gbps_p stays 0). */
static kvio_status_t time_setup_memcpy(rank_state_t *state, double *gbps_p)
{
    kvio_status_t status = kvio_rte_barrier(state->rte);
    kvio_xfer_t *xfer = state->xfer;
    if (status != KVIO_OK || state->num_serve < 1 || state->self != state->receivers[0] ||
        kvio_xfer_device(xfer) != NULL || kvio_xfer_slot(xfer, 0) == NULL ||
        kvio_xfer_slot(xfer, 1) == NULL)
        return status;
    uint64_t bytes = kvio_train_weights_bytes(&state->workload->train);
    uint64_t best_ns = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t start_ns = kvio_time_ns();
        memcpy(kvio_xfer_slot(xfer, 0), kvio_xfer_slot(xfer, 1), bytes);
        uint64_t took_ns = kvio_time_ns() - start_ns;
        if (best_ns == 0 || took_ns < best_ns)
            best_ns = took_ns;
    }
    *gbps_p = best_ns > 0 ? (double)bytes / (double)best_ns : 0; /* bytes per ns: GB/s */
    return KVIO_OK;
}

/* A stop during set-up ends this rank's set-up at once: nothing has been
 * served, and there is nothing to measure (every rank sees the stop, or a
 * peer's failure in its next wait). */
static kvio_status_t setup_stopped(rank_state_t *state)
{
    if (!run_stop_asked(state->context->stop))
        return KVIO_OK;
    /* Rank 0's result (the ranks may be threads sharing the context). */
    return kvio_serve_setup_interrupted(state->self == 0 ? state->context->result : NULL, "",
                                        state->error, sizeof(state->error));
}

/* Set-up first: every rank connects its transport, then a serve rank builds
 * its engine and KV pool while the trainer fills its weights; then all
 * start together at t0 (the trainer's first step is not spent waiting for a
 * pool being built). */
static kvio_status_t rank_setup(rank_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    kvio_rte_t *rte = state->rte;
    int64_t entered_ns = kvio_rte_time_ns(rte);
    if (state->self == 0)
        kvio_serve_setup_note("%d ranks (%lld train, %d serve%s) set up", state->size,
                              (long long)workload->ranks.train, state->num_serve,
                              workload->ranks.client > 0 ? ", a client" : "");
    state->receivers = calloc((size_t)state->num_serve + 1, sizeof(int));
    if (state->receivers == NULL)
        return KVIO_ERR_NOMEM;
    for (int i = 0; i < state->num_serve; i++)
        state->receivers[i] = run_first_serve_rank(workload) + i;
    kvio_status_t status = rank_transport(state);
    /* The transport first (its slots and send buffer faulted in), then at
     * once the serve ranks' pools and engines and the trainer's fill of its
     * weights. */
    int64_t connect_ns = kvio_rte_time_ns(rte);
    if (status == KVIO_OK)
        status = kvio_xfer_create(&state->transport, rte,
                                  state->parts.train    ? KVIO_XFER_SENDER
                                  : state->parts.client ? KVIO_XFER_BYSTANDER
                                                        : KVIO_XFER_RECEIVER,
                                  TRAIN_RANK, state->receivers, state->num_serve,
                                  kvio_train_weights_bytes(&workload->train), &state->xfer,
                                  state->error, sizeof(state->error));
    if (status == KVIO_OK && !state->parts.client)
        kvio_serve_setup_note("%s rank %d: transport %s connected in %.1f s",
                              state->parts.role, state->self,
                              kvio_choice_name(&state->transport.kind),
                              (double)(kvio_rte_time_ns(rte) - connect_ns) / 1e9);
    if (status == KVIO_OK)
        status = setup_stopped(state);
    /* The trainer's weights are filled before t0: its first version is as
     * on time as the rest. */
    int64_t fill_ns = kvio_rte_time_ns(rte);
    if (status == KVIO_OK && state->parts.train) {
        status = kvio_trainer_create(&workload->train, (uint64_t)workload->seed, state->xfer,
                                     &state->trainer, state->error, sizeof(state->error));
        if (status == KVIO_OK)
            kvio_serve_setup_note("train rank %d: %.2f GiB of weights filled in %.1f s",
                                  state->self,
                                  (double)kvio_train_weights_bytes(&workload->train) /
                                      1073741824.0,
                                  (double)(kvio_rte_time_ns(rte) - fill_ns) / 1e9);
    }
    if (status == KVIO_OK)
        status = setup_stopped(state);
    if (status == KVIO_OK && !state->parts.train) {
        status = run_rank_serve_create(state->context, rte, &state->parts,
                                       &state->serve_part, state->error, sizeof(state->error));
    } else if (status == KVIO_OK && state->coupled_run && workload->ranks.prefill > 0) {
        /* The serve ranks' P/D link is set up collectively. */
        status = kvio_serve_pd_bystander(rte, state->error, sizeof(state->error));
    }
    if (status == KVIO_OK)
        status = setup_stopped(state);
    double memcpy_gbps = 0;
    if (status == KVIO_OK)
        status = time_setup_memcpy(state, &memcpy_gbps);
    if (status != KVIO_OK)
        return status;
    state->report = (rank_report_t){.is_trainer = state->parts.train, .rank = state->self,
                                    .setup_ns = kvio_rte_time_ns(rte) - entered_ns,
                                    .setup_memcpy_gbps = memcpy_gbps,
                                    .transfer_in_memory = state->parts.train &&
                                                          kvio_xfer_in_memory(state->xfer)};
    gethostname(state->report.hostname, sizeof(state->report.hostname) - 1);
    status = kvio_rte_start(rte, &state->start);
    if (status == KVIO_OK)
        status = setup_stopped(state);
    if (status != KVIO_OK)
        return status;
    if (state->self == 0)
        kvio_serve_setup_note("every rank is set up (this one in %.1f s); the run starts now "
                              "(t0)", (double)state->report.setup_ns / 1e9);
    state->serve_part.run.t0_ns = state->start.t0_ns;
    kvio_rte_clock_offset(rte, &state->report.clock_offset_ns,
                          &state->report.clock_uncertainty_ns);
    snprintf(state->report.info, sizeof(state->report.info), "%s", kvio_xfer_info(state->xfer));
    state->run_end_ns = state->start.t0_ns + planned_length_ns(workload);
    return KVIO_OK;
}

/* The training rank's part: the step loop; a lost trainer (its own failure,
 * not a serve rank's, with on_trainer_loss: serve) is told to the serve
 * ranks and reported instead of failing this rank. */
static kvio_status_t rank_train(rank_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    rank_report_t *report = &state->report;
    kvio_status_t status = kvio_trainer_run(state->trainer, state->rte, workload->duration_ns,
                                            state->context->stop, &state->train, state->error,
                                            sizeof(state->error));
    if (status != KVIO_OK && status != KVIO_ERR_NOMEM && status != KVIO_ERR_PEER &&
        status != KVIO_ERR_TIMEOUT &&
        workload->update.on_trainer_loss == KVIO_TRAINER_LOSS_SERVE) {
        report->trainer_status = status;
        status = trainer_lost(state->rte, state->context, state->receivers, state->num_serve,
                              &state->train, state->run_end_ns, state->error, report);
        state->error[0] = '\0';
    }
    if (status == KVIO_OK && workload->ranks.client > 0)
        status = kvio_rte_send(state->rte, state->size - 1, KVIO_RUN_TAG_TRAINING_DONE, "", 1);
    if (status != KVIO_OK)
        return status;
    report->count = state->train.count;
    report->steps = (uint64_t)state->train.steps;
    report->t_start_ns = state->train.t_start_ns;
    report->t_end_ns = state->train.t_end_ns;
    state->records = state->train.records;
    state->record_size = sizeof(*state->train.records);
    return KVIO_OK;
}

/* A serve rank's part (its loop with the receiver) or the client's. */
static kvio_status_t rank_serve(rank_state_t *state)
{
    kvio_status_t status;
    if (state->parts.client) {
        status = kvio_serve_client_run(state->serve_part.client, state->context->stop,
                                       state->error, sizeof(state->error));
        if (status == KVIO_OK)
            status = wait_training_done(state->rte, state->context);
    } else {
        status = serve_rank(state->rte, state->context, &state->serve_part, state->xfer,
                            state->run_end_ns, &state->serve, state->error,
                            sizeof(state->error));
    }
    if (status != KVIO_OK)
        return status;
    const kvio_update_result_t *serve = &state->serve;
    rank_report_t *report = &state->report;
    report->trainer_lost_ns = serve->trainer_lost_ns;
    report->active_version = serve->active_version;
    snprintf(report->lost_reason, sizeof(report->lost_reason), "%s", serve->trainer_lost_reason);
    const char *client_lost = state->serve_part.rank != NULL
                                  ? kvio_serve_rank_client_lost(state->serve_part.rank)
                                  : NULL;
    if (client_lost != NULL)
        snprintf(report->client_lost, sizeof(report->client_lost),
                 "serve rank %d: the client rank is lost: %s", state->self - 1, client_lost);
    report->count = serve->count;
    report->iterations = serve->iterations;
    report->polls = serve->polls;
    report->checksum_mismatches = serve->checksum_mismatches;
    report->inference_stall_ns = serve->inference_stall_ns;
    report->t_start_ns = serve->t_start_ns;
    report->t_end_ns = serve->t_end_ns;
    state->records = serve->records;
    state->record_size = sizeof(*serve->records);
    return KVIO_OK;
}

/* Every rank's report and records to rank 0; in the coupled run, a second
 * round with the serve ranks' serving measurements. */
static kvio_status_t rank_gather(rank_state_t *state)
{
    rank_report_t *report = &state->report;
    /* Stopped early (a signal to this rank alone, under mpirun): the run
     * as a whole is incomplete, whatever rank 0 saw. */
    report->interrupted = run_stop_asked(state->context->stop);
    const kvio_xfer_bucket_stamp_t *stamps = NULL;
    size_t num_stamps = 0;
    kvio_xfer_bucket_stamps(state->xfer, &stamps, &num_stamps);
    report->num_stamps = num_stamps;
    kvio_status_t status = pack_report(report, state->records, state->record_size, stamps,
                                       &state->blob, &state->blob_length);
    /* A lost client rank (stopped, crashed) loses only its routing counts:
     * what the serve ranks served is gathered without it. */
    int client = state->workload->ranks.client > 0 ? state->size - 1 : -1;
    if (status == KVIO_OK)
        status = kvio_rte_gather_blobs_sparing(state->rte, state->blob, state->blob_length,
                                               client, &state->blobs, &state->lengths,
                                               state->client_lost, sizeof(state->client_lost));
    state->gave_up_client = status == KVIO_OK && state->self == 0 && client >= 0 &&
                            state->blobs[client] == NULL;
    if (status != KVIO_OK || !state->coupled_run)
        return status;
    if (state->parts.client)
        status = kvio_serve_client_pack(state->serve_part.client, &state->serve_blob,
                                        &state->serve_blob_length);
    else if (state->parts.serve)
        status = kvio_serve_rank_pack(state->serve_part.rank, &state->serve_blob,
                                      &state->serve_blob_length);
    else
        status = (state->serve_blob = malloc(1)) != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    if (status == KVIO_OK)
        status = kvio_rte_gather_blobs(state->rte, state->serve_blob, state->serve_blob_length,
                                       &state->serve_blobs, &state->serve_lengths);
    return status;
}

/* Rank 0: a client rank lost (a serve rank gave up on it, or rank 0 on
 * its report) fails the run after the results, with what the serve ranks
 * served until then in them. */
static void client_lost_error(rank_state_t *state)
{
    const char *served = "what the serve ranks served until then is in the results";
    if (state->lost != KVIO_OK)
        return;
    for (int i = 0; i < state->all.num_reports; i++)
        if (state->all.reports[i].client_lost[0] != '\0') {
            /* The first serve rank to notice says how. */
            snprintf(state->error, sizeof(state->error), "%s; %s",
                     state->all.reports[i].client_lost, served);
            state->lost = KVIO_ERR_PEER;
            return;
        }
    if (state->gave_up_client) {
        snprintf(state->error, sizeof(state->error), "the client rank is lost: %s; %s",
                 state->client_lost[0] != '\0' ? state->client_lost : "its report never came",
                 served);
        state->lost = KVIO_ERR_PEER;
    }
}

/* Rank 0: the ranks stopped early (a signal to one alone, under mpirun)
 * into model_updates.interrupted_ranks and, when rank 0 itself was not
 * stopped, the run's note of why it is incomplete. */
static void interrupted_ranks(const run_context_t *context, const collected_t *all,
                              json_t *updates)
{
    json_t *ranks = json_array();
    size_t at = 0;
    bool note = context->incomplete != NULL && !run_stop_asked(context->stop);
    for (int i = 0; i < all->num_reports; i++) {
        if (!all->reports[i].interrupted)
            continue;
        json_array_append_new(ranks, json_integer(all->reports[i].rank));
        if (note && at < context->incomplete_len)
            at += (size_t)snprintf(context->incomplete + at, context->incomplete_len - at,
                                   "%s %d", at == 0 ? "interrupted: rank" : "",
                                   all->reports[i].rank);
    }
    if (note && at > 0 && at < context->incomplete_len)
        snprintf(context->incomplete + at, context->incomplete_len - at,
                 " stopped early (SIGINT or SIGTERM); what it measured until then is in the "
                 "results");
    if (json_array_size(ranks) > 0)
        json_object_set(updates, "interrupted_ranks", ranks);
    json_decref(ranks);
}

/* Rank 0: serving first (what updates did to it goes into updates.csv),
 * then the updates' metrics, the start, weight_sync's results, a lost
 * trainer and the ranks stopped early. */
static kvio_status_t rank0_results(rank_state_t *state)
{
    const run_context_t *context = state->context;
    collected_t *all = &state->all;
    bool serving = state->coupled_run && context->result != NULL;
    int64_t t0_ns = state->start.t0_ns;
    kvio_status_t status = collect(state->blobs, state->lengths, state->size, all);
    if (status == KVIO_OK && serving)
        status = run_coupled_metrics(context, all, state->serve_blobs, state->serve_lengths,
                                     state->size, &state->serving, state->error,
                                     sizeof(state->error));
    if (status == KVIO_OK)
        status = run_updates_metrics(context, all, t0_ns, serving ? &state->serving : NULL,
                                     state->error, sizeof(state->error));
    if (status == KVIO_OK && serving && context->served_out != NULL) {
        *context->served_out = state->serving; /* moved */
        memset(&state->serving, 0, sizeof(state->serving));
    }
    if (status == KVIO_OK)
        status = start_json(context, all, &state->start);
    if (status == KVIO_OK && state->sync.num_buckets > 0)
        status = run_sync_results(context, all, &state->sync, t0_ns, state->error,
                                  sizeof(state->error));
    if (status != KVIO_OK)
        return status;
    json_t *lost_json = trainer_lost_json(all, state->num_serve, t0_ns);
    json_t *updates = context->result != NULL
                          ? kvio_result_detail_object(context->result, "model_updates")
                          : NULL;
    if (context->result != NULL)
        kvio_result_set_text(context->result, KVIO_FIG_UPDATE_RUNTIME,
                             kvio_rte_world_kind(kvio_rte_world(state->rte)));
    if (lost_json != NULL) {
        json_object_set(updates, "trainer_lost", lost_json);
        if (context->result != NULL)
            kvio_result_set(context->result, KVIO_FIG_TRAINER_LOST, 1);
        state->lost = trainer_lost_error(all, state->num_serve, state->error,
                                         sizeof(state->error));
        json_decref(lost_json);
    }
    client_lost_error(state);
    interrupted_ranks(context, all, updates);
    return KVIO_OK;
}

static void rank_state_free(rank_state_t *state)
{
    kvio_rte_blobs_free(state->blobs, state->lengths, state->size);
    if (state->serve_blobs != NULL)
        kvio_rte_blobs_free(state->serve_blobs, state->serve_lengths, state->size);
    free(state->serve_blob);
    run_rank_serve_destroy(&state->serve_part);
    collected_free(&state->all);
    kvio_serve_output_free(&state->serving);
    free(state->blob);
    free(state->receivers);
    free(state->bucket_bytes);
    kvio_sync_plan_free(&state->sync);
    kvio_train_result_free(&state->train);
    kvio_update_result_free(&state->serve);
}

static kvio_status_t rank_main(kvio_rte_t *rte, void *arg)
{
    const run_context_t *context = arg;
    rank_state_t *state = calloc(1, sizeof(*state));
    if (state == NULL)
        return KVIO_ERR_NOMEM;
    state->rte = rte;
    state->context = context;
    state->workload = context->workload;
    state->self = kvio_rte_index(rte);
    state->size = kvio_rte_size(rte);
    state->num_serve = (int)state->workload->ranks.serve;
    state->parts = run_rank_parts(state->workload, context->frontend != NULL, state->self);
    state->coupled_run = kvio_updates_coupled(state->workload);
    kvio_status_t status = rank_setup(state);
    if (status != KVIO_OK && setup_stopped(state) != KVIO_OK)
        status = KVIO_ERR_INTERRUPTED; /* whatever failed, a stop came first */
    if (status == KVIO_OK)
        status = state->parts.train ? rank_train(state) : rank_serve(state);
    if (status == KVIO_OK)
        status = rank_gather(state);
    if (status == KVIO_OK && state->self == 0)
        status = rank0_results(state);
    if (status == KVIO_OK) {
        /* Nobody tears down a transport a peer may still be using (CUDA
         * calls freeing memory another process still has open undefined). */
        kvio_xfer_detach(state->xfer);
        status = kvio_rte_barrier(rte);
    }
    if (status == KVIO_OK && state->lost != KVIO_OK) {
        /* Every rank finished cleanly; the run as a whole did not. */
        kvio_rte_set_error(rte, "%s", state->error);
        status = state->lost;
    } else if (status != KVIO_OK) {
        if (state->error[0] != '\0')
            kvio_rte_set_error(rte, "%s", state->error);
        else if (state->xfer != NULL && kvio_xfer_error(state->xfer)[0] != '\0')
            kvio_rte_set_error(rte, "%s", kvio_xfer_error(state->xfer));
        kvio_xfer_detach(state->xfer); /* no barrier on a failure: drop peers' memory first */
    }
    kvio_trainer_destroy(state->trainer); /* before the transport whose buffer it filled */
    kvio_xfer_destroy(state->xfer);
    rank_state_free(state);
    free(state);
    return status;
}

kvio_status_t run_updates_emulate(kvio_rte_world_t *world, run_context_t *context,
                                  char *error_p, size_t error_len)
{
    kvio_serve_setup_begin();
    kvio_status_t status = kvio_rte_world_run(world, rank_main, context, error_p, error_len);
    /* Stopped during set-up: whichever rank's wait noticed first, that is
     * what happened. */
    if (status != KVIO_OK && context->result != NULL &&
        kvio_result_get(context->result, KVIO_FIG_SETUP_INTERRUPTED) > 0)
        status = kvio_serve_setup_interrupted(NULL, "", error_p, error_len);
    return status;
}
