/* A serve rank in emulate mode, plain or coupled: its real KV memory and
 * tiers, its engine and the one lane of its serve loop on the realtime
 * executor (gpu with a spin kernel), fed by its share of the stream or by
 * the client rank, and with model updates by the transport's receiver. A
 * rank without the serve section runs emulated iterations only (update
 * latency runs). Its report to rank 0 is its engine's metrics and what its
 * lane recorded. */
#include "serve/pd_int.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"
#include "kvio/log.h"
#include "kvio/wire.h"

#define SERVE_RANK_MAGIC 0x6b76696f73727633ull /* "kviosrv3" */

/* How soon an idle lane looks again when nothing else is due. */
#define LOOK_NS 200000

static void on_finish(void *context, const kvio_engine_finished_t *finished)
{
    kvio_serve_rank_t *rank = context;
    if (rank->pd != NULL && kvio_serve_pd_rank_prefills(rank->pd)) {
        kvio_serve_pd_rank_prefilled(rank->pd, finished); /* its decode goes on elsewhere */
        return;
    }
    kvio_engine_finished_t request = *finished;
    if (rank->pd != NULL)
        kvio_serve_pd_rank_decoded(rank->pd, &request);
    if (rank->frontend != NULL)
        kvio_serve_frontend_arrivals_received(rank->frontend, &request);
    kvio_serve_loop_finished(&rank->loop, &request);
    kvio_serve_record_finished(&rank->recorder, &request);
    if (rank->receiver != NULL)
        kvio_update_receiver_served(rank->receiver);
    if (rank->frontend != NULL)
        kvio_serve_frontend_arrivals_finished(rank->frontend, &request);
}

static void on_tokens(void *context, uint64_t id, uint32_t generated, int64_t end_ns)
{
    kvio_serve_rank_t *rank = context;
    if (rank->pd != NULL)
        kvio_serve_pd_rank_tokens(rank->pd, id, generated);
    if (rank->frontend != NULL)
        kvio_serve_frontend_arrivals_tokens(rank->frontend, id, generated, end_ns);
}

static void on_iteration(void *context, uint32_t world_rank,
                         const kvio_engine_iteration_t *iteration)
{
    kvio_serve_rank_t *rank = context;
    kvio_serve_record_iteration(&rank->recorder, world_rank, rank->lane.engine, iteration);
}

static void on_cache(void *context, kvio_hash_t hash, bool cached)
{
    kvio_serve_rank_t *rank = context;
    if (rank->client != NULL)
        kvio_serve_client_arrivals_note(rank->client, hash, cached);
    if (rank->frontend != NULL)
        kvio_serve_frontend_arrivals_note(rank->frontend, hash, cached);
}

/* Requests come from a client rank (not this rank's own stream). */
static bool has_client(const kvio_serve_run_t *run)
{
    return run->client_rank > 0 && run->rte != NULL;
}

/* P/D: this rank's side, its staging buffer as large as pd.staging or its
 * pool (collective: the P/D link). */
static kvio_status_t create_pd(kvio_serve_rank_t *rank, char *error_p, size_t error_len)
{
    const kvio_serve_run_t *run = rank->run;
    uint64_t staging = run->pd->staging > 0 ? run->pd->staging
                                            : (uint64_t)rank->blocks * rank->block_bytes;
    kvio_serve_pd_rank_params_t params = {
        .run = run, .serve_index = rank->serve_index, .lane = &rank->lane,
        .block_bytes = rank->block_bytes, .block_size = rank->block_size,
        .pool = rank->memory.memory, .staging_blocks = (uint32_t)(staging / rank->block_bytes),
        .device = rank->memory.device != NULL &&
                          kvio_device_kind(rank->memory.device) == KVIO_MEMORY_CUDA
                      ? rank->memory.device
                      : NULL,
        .tiers = rank->memory.tiers, .num_tiers = rank->memory.num_tiers};
    return kvio_serve_pd_rank_create(&params, &rank->pd, error_p, error_len);
}

/* The pool, swap space and tiers (every rank at once, each faulting its own
 * pool in: kvio_serve_memory_create), then the engine over them. */
static kvio_status_t create_engine(kvio_serve_rank_t *rank, char *error_p, size_t error_len)
{
    const kvio_serve_run_t *run = rank->run;
    rank->block_size = (uint32_t)run->serve->kvcache.block_size;
    uint64_t kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model,
                                                                kvio_cost_gpus(run->cost));
    rank->block_bytes = kv_bytes_per_token * rank->block_size;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                kvio_cost_gpus(run->cost), &rank->blocks,
                                                error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_cost_create(run->cost, run->model, run->gpu, &rank->cost, error_p,
                                  error_len);
    if (status != KVIO_OK)
        return status;
    int64_t from_ns = (int64_t)kvio_time_ns();
    status = kvio_serve_memory_create(run, rank->serve_index, rank->num_serve, rank->blocks,
                                      rank->block_bytes, &rank->memory, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_serve_setup_note("serve rank %u: KV pool of %.2f GiB (%u blocks) and %.2f GiB of swap "
                          "space in %s, faulted in in %.1f s",
                          (unsigned)run->first_serve_rank + rank->serve_index,
                          (double)rank->memory.memory_bytes / 1073741824.0, rank->blocks,
                          (double)rank->memory.swap_bytes / 1073741824.0,
                          kvio_serve_memory_where(&rank->memory),
                          (double)((int64_t)kvio_time_ns() - from_ns) / 1e9);
    const kvio_serve_memory_t *memory = &rank->memory;
    if (run->pd != NULL && (status = create_pd(rank, error_p, error_len)) != KVIO_OK)
        return status;
    bool frontend = run->frontend != NULL;
    kvio_engine_observer_t observer = {.context = rank, .on_finish = on_finish,
                                       .on_iteration = on_iteration,
                                       .on_cache = has_client(run) || frontend ? on_cache : NULL,
                                       .on_tokens = frontend || rank->pd != NULL ? on_tokens
                                                                                 : NULL};
    kvio_engine_params_t params = kvio_serve_engine_params(run, rank->serve_index, rank->blocks,
                                                           rank->cost, observer);
    params.kv_memory = memory->memory;
    params.kv_generated = memory->generated;
    params.kv_device = memory->device != NULL &&
                               kvio_device_kind(memory->device) == KVIO_MEMORY_CUDA
                           ? memory->device
                           : NULL;
    params.block_bytes = rank->block_bytes;
    params.verify_swaps = run->serve->kvcache.verify_swaps;
    params.swap_space = memory->swap_space;
    params.swap_space_blocks = memory->swap_blocks;
    params.tiers = memory->tiers;
    params.num_tiers = memory->num_tiers;
    if (rank->pd != NULL && !kvio_serve_pd_rank_prefills(rank->pd)) {
        kvio_serve_pd_rank_tiers(rank->pd, &params.tiers, &params.num_tiers);
        params.load_only_tiers = 1;
        params.async_tiers = true; /* the decode loads beside its batch */
    }
    return kvio_engine_create(&params, &rank->lane.engine, error_p, error_len);
}

/* Where its requests come from: the front end, the client rank, or its
 * share of the stream (all of it when it is the only serve rank). */
static kvio_status_t create_arrivals(kvio_serve_rank_t *rank)
{
    const kvio_serve_run_t *run = rank->run;
    if (run->frontend != NULL) {
        kvio_status_t status = kvio_serve_frontend_arrivals_create(
            run->frontend, rank->serve_index, &rank->loop, &rank->lane, &rank->frontend);
        if (status == KVIO_OK)
            rank->loop.arrivals = kvio_serve_frontend_arrivals(rank->frontend);
        return status;
    }
    if (has_client(run)) {
        kvio_status_t status = kvio_serve_client_arrivals_create(
            run->rte, run->client_rank, rank->serve_index, &rank->loop, &rank->lane,
            &rank->client);
        if (status == KVIO_OK)
            rank->loop.arrivals = kvio_serve_client_arrivals(rank->client);
        return status;
    }
    if (rank->pd != NULL && !kvio_serve_pd_rank_prefills(rank->pd))
        return KVIO_OK; /* its requests come from the prefill ranks (attached) */
    bool plain = rank->num_serve == 1 && run->first_serve_rank == 0;
    kvio_serve_stream_params_t stream = {
        .stream = run->stream, .block_size = rank->block_size, .warmup_ns = run->warmup_ns,
        .warmup_requests = run->warmup_requests, .share_index = rank->serve_index,
        .num_shares = rank->pd != NULL ? run->num_prefill : rank->num_serve,
        .progress_label = plain ? "emulate: requests sent" : NULL,
        .num_requests = run->num_requests};
    kvio_status_t status = kvio_serve_stream_arrivals_create(&stream, rank->lanes, 1,
                                                             &rank->stream);
    if (status == KVIO_OK)
        rank->loop.arrivals = kvio_serve_stream_arrivals(rank->stream);
    return status;
}

kvio_status_t kvio_serve_rank_create(const kvio_serve_run_t *run, uint32_t serve_index,
                                     uint32_t num_serve, kvio_serve_rank_t **rank_p,
                                     char *error_p, size_t error_len)
{
    kvio_serve_rank_t *rank = calloc(1, sizeof(*rank));
    if (rank == NULL)
        return KVIO_ERR_NOMEM;
    rank->run = run;
    rank->serve_index = serve_index;
    rank->num_serve = num_serve > 0 ? num_serve : 1;
    rank->recorder.iterations_limit = KVIO_SERVE_ITERATIONS_MAX_BYTES;
    rank->recorder.with_ids = true;
    rank->lanes[0] = &rank->lane;
    kvio_serve_lane_t *lane = &rank->lane;
    lane->world_rank = (uint32_t)run->first_serve_rank + serve_index;
    lane->update = run->update;
    lane->iteration_ns = run->update != NULL ? run->update->iteration_ns : 20000000;
    kvio_status_t status = kvio_serve_lane_init(lane, true);
    if (status == KVIO_OK && run->serve != NULL) {
        status = create_engine(rank, error_p, error_len);
        lane->block_bytes = rank->block_bytes;
    }
    rank->loop = (kvio_serve_loop_t){.executor = &rank->executor, .lanes = rank->lanes,
                                     .num_lanes = 1, .poll_ns = LOOK_NS, .stop = run->stop,
                                     .max_concurrency = run->serve != NULL
                                                            ? run->serve->max_concurrency
                                                            : 0,
                                     .drain_timeout_ns = run->serve != NULL
                                                             ? run->serve->drain_timeout_ns
                                                             : 0,
                                     .duration_ns = run->duration_ns};
    if (status == KVIO_OK && run->serve != NULL)
        status = create_arrivals(rank);
    if (status == KVIO_OK && rank->pd != NULL)
        kvio_serve_pd_rank_attach(rank->pd, &rank->loop);
    rank->executor = (kvio_executor_t){
        .ops = kvio_executor_find(rank->memory.spin ? "gpu" : "realtime"),
        .device = rank->memory.device};
    if (status != KVIO_OK) {
        kvio_serve_rank_destroy(rank);
        return status;
    }
    *rank_p = rank;
    return KVIO_OK;
}

void kvio_serve_rank_set_iterations_limit(kvio_serve_rank_t *rank, size_t bytes)
{
    rank->recorder.iterations_limit = bytes;
}

void kvio_serve_rank_destroy(kvio_serve_rank_t *rank)
{
    if (rank == NULL)
        return;
    kvio_engine_destroy(rank->lane.engine);
    kvio_serve_pd_rank_destroy(rank->pd); /* after the engine: its I/O thread reads through it */
    kvio_serve_lane_fini(&rank->lane);
    /* After the engine released the requests it made. */
    kvio_serve_stream_arrivals_destroy(rank->stream);
    kvio_serve_client_arrivals_destroy(rank->client);
    kvio_serve_frontend_arrivals_destroy(rank->frontend);
    kvio_serve_memory_destroy(&rank->memory);
    kvio_cost_destroy(rank->cost);
    kvio_serve_recorder_fini(&rank->recorder);
    free(rank);
}

/* Sharpens this thread's waits: no timer slack, and SCHED_FIFO when asked
 * (needs root or CAP_SYS_NICE; a warning otherwise). */
static void tune_thread(bool realtime, uint32_t rank)
{
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    if (!realtime)
        return;
    struct sched_param param = {.sched_priority = 10};
    int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
    if (err != 0)
        kvio_warn("serve rank %u: cannot use SCHED_FIFO (%s); timing will be looser", rank,
                  strerror(err));
}

kvio_status_t kvio_serve_rank_serve(kvio_serve_rank_t *rank, kvio_update_receiver_t *receiver,
                                    int64_t serve_until_ns, kvio_update_result_t *result_p,
                                    char *error_p, size_t error_len)
{
    const kvio_serve_run_t *run = rank->run;
    tune_thread(run->serve != NULL && run->serve->engine.realtime, rank->serve_index);
    kvio_serve_lane_t *lane = &rank->lane;
    /* The executor waits on the host clock; the loop's clock is the rte's
     * (rank 0's), from the run's t0 on. */
    int64_t now_ns = kvio_rte_time_ns(run->rte);
    rank->executor.origin_ns = kvio_time_ns() - (uint64_t)now_ns;
    rank->loop.origin_ns = run->t0_ns > 0 ? run->t0_ns : now_ns;
    rank->receiver = receiver;
    if (receiver != NULL) {
        lane->updates = kvio_update_receiver_updates(receiver);
        lane->trainer_lost = kvio_update_receiver_trainer_lost;
    }
    lane->serve_until_ns = serve_until_ns;
    kvio_status_t status = kvio_serve_loop_run(&rank->loop);
    if (status == KVIO_OK && rank->pd != NULL &&
        (status = kvio_serve_pd_rank_finish(rank->pd)) != KVIO_OK)
        snprintf(rank->loop.error, sizeof(rank->loop.error), "%s",
                 kvio_serve_pd_rank_error(rank->pd));
    if (status == KVIO_OK)
        status = kvio_serve_memory_close(&rank->memory, rank->loop.error,
                                         sizeof(rank->loop.error));
    if (status == KVIO_OK && rank->recorder.status != KVIO_OK)
        snprintf(rank->loop.error, sizeof(rank->loop.error),
                 "serve rank %u: out of memory recording its requests", lane->world_rank);
    if (status == KVIO_OK)
        status = rank->recorder.status;
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s",
                 rank->loop.error[0] != '\0' ? rank->loop.error : kvio_strerror(status));
        return status;
    }
    if (receiver != NULL && result_p != NULL)
        kvio_update_receiver_finish(receiver, lane->iterations,
                                    lane->timing.overrun_ns + lane->update_stall_ns +
                                        lane->drain_stall_ns + lane->lent_stall_ns,
                                    result_p);
    return KVIO_OK;
}

const char *kvio_serve_rank_client_lost(const kvio_serve_rank_t *rank)
{
    return rank->client != NULL ? kvio_serve_client_arrivals_lost(rank->client) : NULL;
}

/* A serve rank's report to rank 0: its engine metrics, requests served per
 * version, its finished requests, timing, its tiers and KV memory (JSON
 * text), then its iteration records (kvio/wire.h; read by
 * kvio_serve_ranks_merge). */
kvio_status_t kvio_serve_rank_pack(const kvio_serve_rank_t *rank, void **blob_p, size_t *length_p)
{
    void *metrics = NULL;
    size_t metrics_length = 0;
    kvio_status_t status = kvio_engine_metrics_pack(kvio_engine_metrics(rank->lane.engine),
                                                    &metrics, &metrics_length);
    if (status != KVIO_OK)
        return status;
    const kvio_serve_recorder_t *recorder = &rank->recorder;
    const kvio_serve_timing_t *timing = &rank->lane.timing;
    kvio_wire_writer_t out = {0};
    kvio_wire_put_u64(&out, SERVE_RANK_MAGIC);
    kvio_wire_put_blob(&out, metrics, metrics_length);
    free(metrics);
    kvio_wire_put_u64(&out, recorder->num_versions);
    kvio_wire_put(&out, recorder->served, recorder->num_versions * sizeof(uint64_t));
    kvio_wire_put_blob(&out, recorder->finished,
                       recorder->num_finished * sizeof(*recorder->finished));
    kvio_wire_put_i64(&out, timing->overhead_ns);
    kvio_wire_put_i64(&out, timing->planned_ns);
    const kvio_hist_t *hists[2] = {timing->error_ns, timing->error_ppm};
    for (int h = 0; h < 2 && out.status == KVIO_OK; h++) {
        unsigned char *packed = malloc(kvio_hist_packed_size(hists[h]));
        if (packed == NULL) {
            kvio_wire_writer_fini(&out);
            return KVIO_ERR_NOMEM;
        }
        kvio_wire_put_blob(&out, packed, kvio_hist_pack(hists[h], packed));
        free(packed);
    }
    /* The rank's tiers and where its KV pool lives, as JSON text. */
    json_t *tiers = json_array();
    kvio_tier_t *const *rank_tiers = rank->memory.tiers;
    size_t num_tiers = rank->memory.num_tiers;
    if (rank->pd != NULL && !kvio_serve_pd_rank_prefills(rank->pd))
        kvio_serve_pd_rank_tiers(rank->pd, &rank_tiers, &num_tiers); /* with the peer tier */
    kvio_serve_tiers_json(rank_tiers, num_tiers, rank->serve_index, tiers);
    json_t *about = json_pack(
        "{s:o, s:s, s:b, s:I, s:I, s:I}", "tiers", tiers, "kv_memory",
        kvio_serve_memory_where(&rank->memory), "spin_kernel", rank->memory.spin,
        "spin_memory_bytes", (json_int_t)kvio_serve_memory_spin_bytes(&rank->memory, rank->run),
        "drain_cut", (json_int_t)rank->loop.drain_cut, "drain_overdue",
        (json_int_t)rank->loop.drain_overdue);
    char *about_text = about != NULL ? json_dumps(about, JSON_COMPACT) : NULL;
    json_decref(about);
    kvio_wire_put_blob(&out, about_text, about_text != NULL ? strlen(about_text) : 0);
    free(about_text);
    kvio_wire_put_u64(&out, recorder->iterations_dropped);
    kvio_wire_put_f64(&out, rank->run->gpu->host_bandwidth);
    kvio_wire_put_blob(&out, recorder->iterations, recorder->iterations_length);
    return kvio_wire_finish(&out, blob_p, length_p);
}
