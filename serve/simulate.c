/* Simulate mode: every serve rank is a lane of one serve loop on the
 * virtual executor, whose clock is the event scheduler the ranks share.
 * The stream is routed over the lanes; each lane's engine runs iterations
 * whose length the cost model gives, its lower tiers modelled; with model
 * updates, each lane takes the versions of the modelled schedule. What the
 * lanes recorded becomes requests.csv, iterations.csv and the events, and
 * the engines' measurements the serving metrics. */
#include "kvio/serve.h"

#include <stdlib.h>
#include <string.h>

#include "serve/pd_int.h"

/* One simulated serve rank. */
typedef struct sim_rank {
    kvio_serve_lane_t lane;
    kvio_tier_t **tiers; /* modelled lower tiers; a P/D decode rank's peer tier last */
    size_t num_tiers;
    kvio_tier_t *peer;   /* P/D decode rank: the prefill ranks' blocks (in tiers, not
                            reported among them) */
    bool prefills;       /* P/D: a prefill rank */
    kvio_serve_schedule_updates_t *updates;
    kvio_serve_loop_t *loop;          /* for the observer */
    kvio_serve_pd_t *pd;              /* P/D: the hand-off (NULL: colocated) */
    kvio_serve_recorder_t *recorder;  /* shared by every rank: one order of events */
    kvio_router_t *router;            /* hears this rank's KV events (NULL: none does) */
    uint32_t index;                   /* among the routed lanes */
} sim_rank_t;

typedef struct simulation {
    const kvio_serve_run_t *run;
    uint32_t num_ranks;
    uint32_t block_size;
    uint32_t blocks;
    kvio_cost_t *cost;
    kvio_router_t *router;
    uint32_t num_prefill;  /* P/D: the first ranks prefill, the others decode (0: none) */
    kvio_serve_pd_t *pd;
    kvio_tier_t **peers;   /* P/D: each decode rank's peer tier (the pd borrows it) */
    kvio_shared_store_t *shared; /* a shared tier's store, every lane's view reads it */
    sim_rank_t *ranks;
    kvio_serve_lane_t **lanes;
    kvio_serve_recorder_t recorder;
    kvio_executor_t executor;
    kvio_serve_stream_arrivals_t *arrivals;
    kvio_serve_loop_t loop;
} simulation_t;

static void on_finish(void *context, const kvio_engine_finished_t *finished)
{
    sim_rank_t *rank = context;
    kvio_serve_pd_t *pd = rank->pd;
    if (rank->prefills) {
        /* Its decode goes on; a failure ends the run at the next event. */
        kvio_status_t status = kvio_serve_pd_prefilled(pd, rank->loop, finished);
        if (status != KVIO_OK && rank->recorder->status == KVIO_OK)
            rank->recorder->status = status;
        return;
    }
    kvio_engine_finished_t request = *finished;
    if (pd != NULL)
        kvio_serve_pd_decoded(pd, &request);
    kvio_serve_loop_finished(rank->loop, &request);
    kvio_serve_record_finished(rank->recorder, &request);
}

static void on_iteration(void *context, uint32_t world_rank,
                         const kvio_engine_iteration_t *iteration)
{
    sim_rank_t *rank = context;
    kvio_serve_record_iteration(rank->recorder, world_rank, rank->lane.engine, iteration);
}

/* A block's hash entered or left the rank's prefix index: a KV event
 * (BlockStored / BlockRemoved) to a router that keeps a fleet index, at
 * this moment of the virtual clock. */
static void on_cache(void *context, kvio_hash_t hash, bool cached)
{
    sim_rank_t *rank = context;
    kvio_executor_t *executor = rank->loop->executor;
    kvio_router_event(rank->router, rank->index, hash, cached, executor->ops->now(executor));
}

/* A P/D decode rank's peer tier: the blocks the prefill ranks hold for it,
 * as many as their pools, at the P/D link's bandwidth. The link's latency
 * is charged once per transfer (kvio_engine_handoff_t), not per batch of
 * blocks the tier model would charge it for: the tier's own is 1 ns, the
 * least it takes. */
static kvio_status_t peer_tier(simulation_t *sim, uint64_t block_bytes, kvio_tier_t **tier_p,
                               char *error_p, size_t error_len)
{
    double bandwidth;
    int64_t latency_ns;
    kvio_pd_link_model(sim->run->pd, sim->run->gpu, &bandwidth, &latency_ns);
    return kvio_tier_create_remote(NULL, sim->blocks * sim->num_prefill, block_bytes, bandwidth,
                                   1, false, tier_p, error_p, error_len);
}

/* The store a shared tier's entries view, one per run: a shard per lane
 * (made by the first lane that asks). */
static kvio_status_t shared_store(simulation_t *sim, const kvio_tier_config_t *config,
                                  uint64_t block_bytes, char *error_p, size_t error_len)
{
    if (sim->shared != NULL)
        return KVIO_OK;
    kvio_shared_store_config_t store;
    kvio_tier_shared_config(config, sim->num_ranks, block_bytes, &store);
    return kvio_shared_store_create(&store, &sim->shared, error_p, error_len);
}

/* Rank r's modelled tiers: latency + bytes / bandwidth, nothing moves. */
static kvio_status_t rank_tiers(simulation_t *sim, sim_rank_t *rank, uint64_t block_bytes,
                                char *error_p, size_t error_len)
{
    const kvio_opt_list_t *tier_list = &sim->run->serve->kvcache.tiers;
    bool decodes = sim->num_prefill > 0 && !rank->prefills;
    if (tier_list->count == 0 && !decodes)
        return KVIO_OK;
    rank->tiers = calloc(tier_list->count + 1, sizeof(*rank->tiers));
    if (rank->tiers == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t t = 0; t < tier_list->count; t++) {
        kvio_tier_config_t config = ((const kvio_tier_config_t *)tier_list->items)[t];
        if (kvio_tier_is_shared(&config)) {
            kvio_status_t status = shared_store(sim, &config, block_bytes, error_p, error_len);
            if (status != KVIO_OK)
                return status;
            config.shared_store = sim->shared;
            config.rank = (unsigned)(rank - sim->ranks);
        }
        kvio_status_t status = kvio_tier_create(&config, block_bytes, false, &rank->tiers[t],
                                                error_p, error_len);
        if (status != KVIO_OK)
            return status;
        rank->num_tiers++;
    }
    if (!decodes)
        return KVIO_OK;
    kvio_status_t status = peer_tier(sim, block_bytes, &rank->peer, error_p, error_len);
    if (status == KVIO_OK)
        rank->tiers[rank->num_tiers] = rank->peer;
    return status;
}

static kvio_status_t rank_create(simulation_t *sim, uint32_t index, char *error_p,
                                 size_t error_len)
{
    const kvio_serve_run_t *run = sim->run;
    sim_rank_t *rank = &sim->ranks[index];
    rank->loop = &sim->loop;
    rank->recorder = &sim->recorder;
    rank->prefills = index < sim->num_prefill;
    rank->index = index;
    /* The routed ranks: every one, or with P/D the prefill ranks (the
     * decode ranks' router, pd.router, keeps no index). */
    if ((sim->num_prefill == 0 || rank->prefills) && kvio_router_hears_events(sim->router))
        rank->router = sim->router;
    kvio_serve_lane_t *lane = &rank->lane;
    kvio_status_t status = kvio_serve_lane_init(lane, false);
    uint64_t kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model,
                                                                kvio_cost_gpus(run->cost));
    lane->world_rank = (uint32_t)run->first_serve_rank + index;
    lane->block_bytes = kv_bytes_per_token * sim->block_size;
    lane->update = run->update;
    if (status == KVIO_OK)
        status = rank_tiers(sim, rank,
                            lane->block_bytes * kvio_serve_chunk_blocks(&run->serve->kvcache),
                            error_p, error_len);
    if (status == KVIO_OK && run->updates != NULL) {
        kvio_serve_schedule_params_t params = {
            .updates = run->updates, .num_updates = run->num_updates,
            .world_rank = (int)lane->world_rank, .stall = run->stall_for_updates};
        status = kvio_serve_schedule_updates_create(&params, &rank->updates);
        if (status == KVIO_OK)
            lane->updates = kvio_serve_schedule_updates(rank->updates);
    }
    if (status != KVIO_OK)
        return status;
    kvio_engine_observer_t observer = {.context = rank, .on_finish = on_finish,
                                       .on_iteration = on_iteration,
                                       .on_cache = rank->router != NULL ? on_cache : NULL};
    kvio_engine_params_t params = kvio_serve_engine_params(run, index, sim->blocks, sim->cost,
                                                           observer);
    params.tiers = rank->tiers;
    params.num_tiers = rank->num_tiers + (rank->peer != NULL);
    if (rank->peer != NULL) {
        params.load_only_tiers = 1;
        params.async_tiers = true; /* the decode loads beside its batch */
    }
    return kvio_engine_create(&params, &lane->engine, error_p, error_len);
}

/* P/D: the prefill lanes hand over to the decode lanes through their peer
 * tiers. */
static kvio_status_t pd_create(simulation_t *sim)
{
    uint32_t num_decode = sim->num_ranks - sim->num_prefill;
    kvio_tier_t **peers = sim->peers = calloc(num_decode, sizeof(*peers));
    if (peers == NULL)
        return KVIO_ERR_NOMEM;
    for (uint32_t d = 0; d < num_decode; d++)
        peers[d] = sim->ranks[sim->num_prefill + d].peer;
    const kvio_serve_run_t *run = sim->run;
    kvio_serve_pd_params_t params = {
        .config = run->pd, .lanes = sim->lanes, .num_prefill = sim->num_prefill,
        .num_decode = num_decode, .peers = peers, .block_size = sim->block_size,
        .kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model,
                                                            kvio_cost_gpus(run->cost)),
        .layers = (uint32_t)run->model->layers};
    kvio_pd_link_model(run->pd, run->gpu, &params.bandwidth, &params.latency_ns);
    kvio_status_t status = kvio_serve_pd_create(&params, &sim->pd);
    for (uint32_t r = 0; status == KVIO_OK && r < sim->num_ranks; r++)
        sim->ranks[r].pd = sim->pd;
    return status;
}

static void simulation_free(simulation_t *sim)
{
    for (uint32_t r = 0; sim->ranks != NULL && r < sim->num_ranks; r++) {
        sim_rank_t *rank = &sim->ranks[r];
        kvio_engine_destroy(rank->lane.engine);
        kvio_serve_lane_fini(&rank->lane);
        for (size_t t = 0; t < rank->num_tiers; t++)
            kvio_tier_destroy(rank->tiers[t]);
        kvio_tier_destroy(rank->peer);
        free(rank->tiers);
        kvio_serve_schedule_updates_destroy(rank->updates);
    }
    kvio_serve_pd_destroy(sim->pd);
    kvio_shared_store_destroy(sim->shared); /* after the views */
    free(sim->peers);
    free(sim->ranks);
    free(sim->lanes);
    /* After the engines released the requests it made. */
    kvio_serve_stream_arrivals_destroy(sim->arrivals);
    kvio_router_destroy(sim->router);
    kvio_cost_destroy(sim->cost);
    /* Still open when the run failed before render closed them. */
    kvio_csv_close(sim->recorder.rows.requests);
    kvio_csv_close(sim->recorder.rows.iterations);
    kvio_serve_recorder_fini(&sim->recorder);
}

static kvio_status_t simulation_init(simulation_t *sim, const kvio_serve_run_t *run,
                                     char *error_p, size_t error_len)
{
    memset(sim, 0, sizeof(*sim));
    sim->run = run;
    sim->num_ranks = run->num_ranks > 0 ? run->num_ranks : 1;
    sim->num_prefill = run->pd != NULL && run->num_prefill < sim->num_ranks ? run->num_prefill
                                                                            : 0;
    sim->block_size = (uint32_t)run->serve->kvcache.block_size;
    sim->recorder.with_ids = run->events != NULL;
    sim->recorder.samples = run->samples;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                kvio_cost_gpus(run->cost), &sim->blocks,
                                                error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_cost_create(run->cost, run->model, run->gpu, &sim->cost, error_p,
                                  error_len);
    if (status == KVIO_OK)
        status = kvio_router_create(&run->serve->router, &sim->router);
    if (status != KVIO_OK)
        return status;
    sim->ranks = calloc(sim->num_ranks, sizeof(*sim->ranks));
    sim->lanes = calloc(sim->num_ranks, sizeof(*sim->lanes));
    if (sim->ranks == NULL || sim->lanes == NULL)
        return KVIO_ERR_NOMEM;
    for (uint32_t r = 0; r < sim->num_ranks; r++) {
        if ((status = rank_create(sim, r, error_p, error_len)) != KVIO_OK)
            return status;
        sim->lanes[r] = &sim->ranks[r].lane;
    }
    sim->executor.ops = kvio_executor_find("virtual");
    kvio_serve_stream_params_t stream = {
        .stream = run->stream, .block_size = sim->block_size, .warmup_ns = run->warmup_ns,
        .warmup_requests = run->warmup_requests, .router = sim->router,
        .progress_label = "simulate: requests", .num_requests = run->num_requests};
    status = kvio_serve_stream_arrivals_create(
        &stream, sim->lanes, sim->num_prefill > 0 ? sim->num_prefill : sim->num_ranks,
        &sim->arrivals);
    if (status == KVIO_OK && sim->num_prefill > 0)
        status = pd_create(sim);
    if (status != KVIO_OK)
        return status;
    sim->loop = (kvio_serve_loop_t){
        .executor = &sim->executor, .arrivals = kvio_serve_stream_arrivals(sim->arrivals),
        .lanes = sim->lanes, .num_lanes = sim->num_ranks,
        .max_concurrency = run->serve->max_concurrency, .stop = run->stop};
    if (sim->pd != NULL)
        sim->loop.intake = kvio_serve_pd_intake(sim->pd);
    /* The rows are written as the run makes them; they are kept only when
     * what serving measured is handed over (runs with updates). */
    sim->recorder.rows.on = true;
    sim->recorder.rows.keep = run->output != NULL;
    sim->recorder.rows.events = run->events;
    sim->recorder.rows.control = run->control;
    sim->recorder.rows.host_bandwidth = run->gpu->host_bandwidth;
    if (run->results != NULL)
        status = kvio_serve_open_csvs(run->results, sim->num_prefill > 0, false, run->control != NULL,
                                      &sim->recorder.rows.requests,
                                      &sim->recorder.rows.iterations, error_p, error_len);
    return status;
}

/* requests.csv and iterations.csv, written as the lanes recorded them:
 * closed, and their first write error said. */
static kvio_status_t render(simulation_t *sim, kvio_status_t status, char *error_p,
                            size_t error_len)
{
    kvio_serve_recorder_t *recorder = &sim->recorder;
    status = kvio_serve_close_csvs(recorder->rows.requests, recorder->rows.iterations, status,
                                   error_p, error_len);
    recorder->rows.requests = recorder->rows.iterations = NULL;
    return status;
}

/* What serving measured, as data: the finished requests move out of the
 * recorder; the updates' costs are the engines' together. */
static void hand_over(simulation_t *sim, kvio_serve_output_t *output)
{
    *output = (kvio_serve_output_t){.finished = sim->recorder.finished,
                                    .num_finished = sim->recorder.num_finished};
    sim->recorder.finished = NULL;
    sim->recorder.num_finished = sim->recorder.finished_capacity = 0;
    kvio_serve_output_add_steps(output, sim->recorder.iterations,
                                sim->recorder.iterations_length);
    for (uint32_t r = 0; r < sim->num_ranks; r++) {
        const kvio_engine_metrics_t *metrics = kvio_engine_metrics(sim->ranks[r].lane.engine);
        output->update_recomputed_tokens += metrics->update_recomputed_tokens;
        output->update_aborted_requests += metrics->update_aborted_requests;
    }
}

/* The serving figures of every lane's engine (per_rank), and of them all. */
static kvio_status_t simulation_metrics(const simulation_t *sim, kvio_result_t *result)
{
    const kvio_serve_run_t *run = sim->run;
    kvio_engine_metrics_t total;
    if (kvio_engine_metrics_init(&total) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = KVIO_OK;
    for (uint32_t r = 0; r < sim->num_ranks && status == KVIO_OK; r++) {
        const kvio_engine_metrics_t *metrics = kvio_engine_metrics(sim->ranks[r].lane.engine);
        kvio_result_t *entry = kvio_result_child(result, "per_rank", r);
        if (entry == NULL) {
            status = KVIO_ERR_NOMEM;
            break;
        }
        kvio_serve_metrics_fill(entry, metrics);
        kvio_result_set(entry, KVIO_FIG_RANK, sim->ranks[r].lane.world_rank);
        if (sim->num_prefill > 0)
            kvio_result_set_text(entry, KVIO_FIG_ROLE,
                                 sim->ranks[r].prefills ? "prefill" : "decode");
        if (sim->ranks[r].prefills)
            continue; /* a request's serving is its decode's */
        /* The gaps between tokens move (no copy of up to 32 MiB); the rest
         * merges. */
        kvio_engine_move_itls(sim->ranks[r].lane.engine, &total);
        kvio_engine_metrics_merge(&total, metrics);
    }
    kvio_serve_itls_take(&total, run->itls);
    kvio_serve_metrics_fill(result, &total);
    kvio_result_set(result, KVIO_FIG_SERVE_RANKS, sim->num_ranks);
    kvio_result_set(result, KVIO_FIG_KV_BLOCKS_PER_RANK, sim->blocks);
    kvio_result_set(result, KVIO_FIG_BLOCK_SIZE, sim->block_size);
    kvio_result_set_text(result, KVIO_FIG_SCHEDULER,
                         kvio_choice_name(&run->serve->scheduler.policy));
    kvio_result_set_text(result, KVIO_FIG_ROUTER, kvio_router_name(sim->router));
    kvio_router_fill(result, sim->router);
    kvio_result_set(result, KVIO_FIG_SIMULATED_S, (double)sim->executor.virtual_ns / 1e9);
    for (uint32_t r = 0; r < sim->num_ranks && status == KVIO_OK; r++)
        status = kvio_serve_tiers_fill(result, sim->ranks[r].tiers, sim->ranks[r].num_tiers, r);
    if (kvio_result_num_children(result, "tiers") > 0)
        kvio_serve_tier_hits_fill(result);
    if (sim->pd != NULL)
        kvio_serve_pd_fill(result, sim->pd, sim->executor.virtual_ns);
    if (run->updates != NULL && run->loss != NULL)
        kvio_serve_loss_fill(result, run->version_steps, run->num_version_steps, run->loss,
                             sim->recorder.served, sim->recorder.num_versions);
    kvio_engine_metrics_fini(&total);
    return status;
}

kvio_status_t kvio_serve_simulate(const kvio_serve_run_t *run, kvio_result_t *result,
                                  bool *complete_p, char *error_p, size_t error_len)
{
    simulation_t sim;
    kvio_status_t status = simulation_init(&sim, run, error_p, error_len);
    if (status == KVIO_OK) {
        status = kvio_serve_loop_run(&sim.loop);
        if (status != KVIO_OK)
            snprintf(error_p, error_len, "%s",
                     sim.loop.error[0] != '\0' ? sim.loop.error : kvio_strerror(status));
    }
    kvio_router_stats_t routes = {.status = KVIO_OK};
    if (sim.router != NULL)
        kvio_router_stats(sim.router, &routes);
    if (status == KVIO_OK && routes.status != KVIO_OK) {
        snprintf(error_p, error_len, "simulate: the router's index of KV events: %s",
                 kvio_strerror(routes.status));
        status = routes.status;
    }
    if (status == KVIO_OK && sim.recorder.status != KVIO_OK) {
        snprintf(error_p, error_len, "simulate: recording the requests and iterations: %s",
                 kvio_strerror(sim.recorder.status));
        status = sim.recorder.status;
    }
    for (uint32_t r = 0; status == KVIO_OK && run->drain_stall_ns != NULL && r < sim.num_ranks;
         r++)
        run->drain_stall_ns[r] += sim.ranks[r].lane.drain_stall_ns +
                                  sim.ranks[r].lane.lent_stall_ns;
    status = render(&sim, status, error_p, error_len);
    if (status == KVIO_OK && run->output != NULL)
        hand_over(&sim, run->output);
    if (status == KVIO_OK) {
        status = simulation_metrics(&sim, result);
        if (status != KVIO_OK)
            snprintf(error_p, error_len, "simulate: out of memory");
        else
            *complete_p = !sim.loop.stopped;
    }
    if (status != KVIO_OK && error_p[0] == '\0')
        snprintf(error_p, error_len, "simulate: %s", kvio_strerror(status));
    simulation_free(&sim);
    return status;
}
