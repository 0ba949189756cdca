/* RL post-training on the virtual clock (kvio/rl.h): the serve ranks'
 * engines generate rollout groups, a trainer takes rl.batch finished groups
 * per step, trains (a FLOPs model), syncs the weights and activates the
 * next version on the engines. One loop for every mode: synchronous is the
 * asynchronous loop with staleness 0 (AReaL's admission rule then admits
 * one step's groups per version); colocated adds sleep and wake around the
 * trainer's step. */
#include "kvio/rl.h"

#include "serve/rl_int.h"

#include "kvio/stream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A new group may start while started groups < (version + eta + 1) x batch
 * (AReaL's staleness control); never more than the run trains on. */
static uint64_t admission_limit(const rl_sim_t *sim)
{
    const kvio_rl_config_t *config = sim->config;
    uint64_t eta = config->mode == KVIO_RL_ASYNC ? (uint64_t)config->staleness : 0;
    /* A group set aside by partial rollouts leaves its place to a new one
     * (Kimi k1.5's rollout keeps its batch of prompts generating). */
    uint64_t limit = (sim->version + eta + 1) * (uint64_t)config->batch + sim->parked_groups;
    uint64_t total = (uint64_t)config->steps * (uint64_t)config->batch;
    return limit < total ? limit : total;
}

static kvio_status_t grow(void **items, size_t *capacity_p, size_t need, size_t size)
{
    if (need <= *capacity_p)
        return KVIO_OK;
    size_t capacity = *capacity_p > 0 ? *capacity_p * 2 : 64;
    while (capacity < need)
        capacity *= 2;
    void *grown = realloc(*items, capacity * size);
    if (grown == NULL)
        return KVIO_ERR_NOMEM;
    *items = grown;
    *capacity_p = capacity;
    return KVIO_OK;
}

/* The engine with the fewest samples unfinished: a group goes whole to one
 * engine, where its samples share the prompt's blocks. */
static rl_engine_t *least_loaded(rl_sim_t *sim)
{
    rl_engine_t *best = &sim->engines[0];
    for (uint32_t e = 1; e < sim->num_engines; e++)
        if (sim->engines[e].outstanding < best->outstanding)
            best = &sim->engines[e];
    return best;
}

/* The sample's next part on its engine: its prompt and the tokens it has
 * so far as the prompt, at most rl.partial_tokens of the rest as the
 * output (all of it without partial rollouts). Each part is a request of
 * the engine's own, as a continuation is a new request to the rollout
 * engine in Kimi k1.5's partial rollouts: the serving rows count parts. */
static kvio_status_t add_part(rl_sim_t *sim, rl_engine_t *engine, size_t id, int32_t priority,
                              uint32_t max_tokens)
{
    rl_sample_t *sample = &sim->samples[id];
    uint32_t rest = sample->output_tokens - sample->generated;
    uint64_t cap = (uint64_t)sim->config->partial_tokens;
    kvio_engine_request_t add = {
        .id = id, .arrival_ns = sim->now_ns, .prompt_tokens = sample->prompt_tokens +
                                                             sample->generated,
        .output_tokens = cap > 0 && rest > cap ? (uint32_t)cap : rest,
        .max_tokens = sample->generated == 0 ? max_tokens : 0, .priority = priority,
        .hashes = sample->hashes, .num_hashes = sample->num_hashes,
        .measured = true, .tag = engine->version};
    sample->base = sample->generated;
    kvio_status_t status = kvio_engine_add(engine->engine, &add);
    if (status == KVIO_OK)
        engine->outstanding++;
    return status;
}

static kvio_status_t add_sample(rl_sim_t *sim, rl_engine_t *engine, const kvio_request_t *request)
{
    size_t id = sim->num_samples;
    kvio_status_t status = grow((void **)&sim->samples, &sim->samples_capacity, id + 1,
                                sizeof(*sim->samples));
    size_t num_blocks = ((size_t)request->input_tokens + request->output_tokens) /
                        sim->block_size;
    kvio_hash_t *hashes = calloc(num_blocks > 0 ? num_blocks : 1, sizeof(*hashes));
    if (status == KVIO_OK && hashes == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK)
        status = kvio_request_block_hashes(request, sim->block_size, 0, num_blocks, NULL, hashes);
    if (status != KVIO_OK) {
        free(hashes);
        return status;
    }
    sim->samples[id] = (rl_sample_t){
        .group = (uint32_t)(sim->num_groups - 1), .prompt_tokens = request->input_tokens,
        .output_tokens = request->output_tokens, .engine = engine->index, .hashes = hashes,
        .num_hashes = num_blocks};
    sim->num_samples++;
    status = add_part(sim, engine, id, request->priority, request->max_tokens);
    /* Kept only while a part may follow. */
    if (sim->config->partial_tokens == 0 || status != KVIO_OK) {
        free(hashes);
        sim->samples[id].hashes = NULL;
    }
    return status;
}

/* Takes the stream's next group (its samples are consecutive) onto the
 * least loaded engine; *more_p false at the stream's end. */
static kvio_status_t admit_group(rl_sim_t *sim, bool *more_p)
{
    const kvio_request_t *request = NULL;
    kvio_status_t status = kvio_stream_next(sim->run->stream, &request);
    *more_p = status == KVIO_OK && request != NULL;
    if (!*more_p)
        return status;
    status = grow((void **)&sim->groups, &sim->groups_capacity, sim->num_groups + 1,
                  sizeof(*sim->groups));
    if (status != KVIO_OK)
        return status;
    uint32_t size = request->group_size > 0 ? request->group_size : 1;
    rl_engine_t *engine = least_loaded(sim);
    sim->groups[sim->num_groups++] = (rl_group_t){
        .first_sample = (uint32_t)sim->num_samples, .num_samples = size,
        .start_version = sim->version, .start_ns = sim->now_ns};
    for (uint32_t i = 0; i < size && status == KVIO_OK; i++) {
        if (i > 0) {
            status = kvio_stream_next(sim->run->stream, &request);
            if (status == KVIO_OK && request == NULL)
                status = KVIO_ERR_INVALID; /* a group cut short: the stream's limit */
        }
        if (status == KVIO_OK)
            status = add_sample(sim, engine, request);
    }
    return status;
}

static kvio_status_t admit(rl_sim_t *sim)
{
    uint64_t limit = admission_limit(sim);
    while (sim->num_groups < limit && !sim->stream_done) {
        bool more = false;
        kvio_status_t status = admit_group(sim, &more);
        if (status != KVIO_OK) {
            snprintf(sim->error_p, sim->error_len,
                     status == KVIO_ERR_INVALID
                         ? "rl: the stream ended inside a group (stream.requests counts prompts)"
                         : "rl: taking rollout groups from the stream: %s",
                     kvio_strerror(status));
            return status;
        }
        sim->stream_done = !more;
    }
    return KVIO_OK;
}

/* ---------- the engines' observers ---------- */

static void on_tokens(void *context, uint64_t id, uint32_t generated, int64_t end_ns)
{
    (void)end_ns;
    rl_engine_t *engine = context;
    rl_sample_t *sample = &engine->sim->samples[id];
    generated += sample->base; /* the engine counts the part's */
    if (generated <= sample->generated)
        return;
    uint32_t tokens = generated - sample->generated;
    sample->generated = generated;
    uint32_t last = sample->num_segments;
    if (last > 0 && sample->segment_version[last - 1] == engine->version) {
        sample->segment_tokens[last - 1] += tokens;
    } else if (last < RL_MAX_SEGMENTS) {
        sample->segment_version[last] = engine->version;
        sample->segment_tokens[last] = tokens;
        sample->num_segments++;
    } else {
        /* More versions than kept apart: the newest ones pool in the last. */
        sample->segment_version[last - 1] = engine->version;
        sample->segment_tokens[last - 1] += tokens;
    }
}

static void on_finish(void *context, const kvio_engine_finished_t *finished)
{
    rl_engine_t *engine = context;
    rl_sim_t *sim = engine->sim;
    rl_sample_t *sample = &sim->samples[finished->id];
    sample->finish_ns = finished->finish_ns;
    if (finished->finish_ns > sim->last_finish_ns)
        sim->last_finish_ns = finished->finish_ns;
    sample->recomputed += finished->recomputed_tokens;
    /* A continuation's prompt (the sample's prompt and tokens so far) was
     * all computed before: what the prefix cache did not give back is
     * computed again. */
    if (sample->base > 0)
        sample->recomputed += finished->prompt_tokens - finished->cached_tokens;
    engine->outstanding--;
    kvio_serve_samples_add(sim->run->samples, finished);
    rl_group_t *group = &sim->groups[sample->group];
    if (sample->generated < sample->output_tokens) {
        /* Partial rollouts: the part's cap reached; the rest waits for the
         * engine's next version. */
        sample->parked = true;
        sample->parked_version = engine->version;
        sim->parked_samples++;
        sim->parked_groups += group->parked++ == 0;
        return;
    }
    free(sample->hashes);
    sample->hashes = NULL;
    if (++group->finished < group->num_samples)
        return;
    group->finish_ns = finished->finish_ns;
    sim->done[sim->done_tail++] = sample->group;
}

/* ---------- set-up ---------- */

static kvio_status_t engines_create(rl_sim_t *sim, char *error_p, size_t error_len)
{
    const kvio_serve_run_t *run = sim->run;
    sim->num_engines = run->num_ranks > 0 ? run->num_ranks : 1;
    sim->block_size = (uint32_t)run->serve->kvcache.block_size;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                kvio_cost_gpus(run->cost), &sim->blocks,
                                                error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_cost_create(run->cost, run->model, run->gpu, &sim->cost, error_p,
                                  error_len);
    if (status != KVIO_OK)
        return status;
    sim->engines = calloc(sim->num_engines, sizeof(*sim->engines));
    uint64_t groups = (uint64_t)sim->config->steps * (uint64_t)sim->config->batch;
    sim->done = calloc(groups, sizeof(*sim->done));
    sim->batch = calloc((size_t)sim->config->batch, sizeof(*sim->batch));
    if (sim->engines == NULL || sim->done == NULL || sim->batch == NULL)
        return KVIO_ERR_NOMEM;
    for (uint32_t e = 0; e < sim->num_engines && status == KVIO_OK; e++) {
        rl_engine_t *engine = &sim->engines[e];
        engine->sim = sim;
        engine->index = e;
        kvio_engine_observer_t observer = {.context = engine, .on_finish = on_finish,
                                           .on_tokens = on_tokens};
        kvio_engine_params_t params = kvio_serve_engine_params(run, e, sim->blocks, sim->cost,
                                                               observer);
        if (sim->emu != NULL && (status = rl_emu_engine_params(sim, e, &params)) != KVIO_OK)
            return status;
        /* A new version's weights invalidate every cached block. */
        params.update_cache = KVIO_UPDATE_CACHE_FLUSH;
        params.in_flight = sim->config->interrupt == KVIO_RL_INTERRUPT_RECOMPUTE
                               ? KVIO_IN_FLIGHT_ABORT
                               : KVIO_IN_FLIGHT_KEEP;
        status = kvio_engine_create(&params, &engine->engine, error_p, error_len);
    }
    return status;
}

static void sim_free(rl_sim_t *sim)
{
    for (size_t s = 0; s < sim->num_samples; s++)
        free(sim->samples[s].hashes);
    for (uint32_t e = 0; sim->engines != NULL && e < sim->num_engines; e++)
        kvio_engine_destroy(sim->engines[e].engine);
    rl_emu_destroy(sim); /* the engines' KV pools, after the engines */
    free(sim->engines);
    kvio_cost_destroy(sim->cost);
    free(sim->samples);
    free(sim->groups);
    free(sim->done);
    free(sim->batch);
    free(sim->steps);
}

/* ---------- the loop ---------- */

/* Starts an iteration on every engine that is free, awake and has work. */
static kvio_status_t schedule_engines(rl_sim_t *sim)
{
    for (uint32_t e = 0; e < sim->num_engines; e++) {
        rl_engine_t *engine = &sim->engines[e];
        if (engine->busy || rl_engine_paused(engine, sim->now_ns))
            continue;
        kvio_engine_iteration_t iteration;
        kvio_serve_step_t step;
        kvio_status_t status = kvio_serve_step(engine->engine, sim->now_ns, e, false,
                                               &iteration, &step, sim->error_p, sim->error_len);
        if (status != KVIO_OK)
            return status;
        if (step != KVIO_SERVE_STEP_RUN)
            continue;
        engine->busy = true;
        engine->end_ns = sim->now_ns + iteration.duration_ns;
    }
    return KVIO_OK;
}

/* The next time anything happens: an iteration's end, the trainer's, an
 * engine waking with work; INT64_MAX if nothing will. */
static int64_t next_event(const rl_sim_t *sim)
{
    int64_t next = sim->trainer_busy ? sim->trainer_end_ns : INT64_MAX;
    for (uint32_t e = 0; e < sim->num_engines; e++) {
        const rl_engine_t *engine = &sim->engines[e];
        if (engine->busy && engine->end_ns < next)
            next = engine->end_ns;
        else if (!engine->busy && kvio_engine_has_work(engine->engine) &&
                 rl_engine_paused(engine, sim->now_ns) && engine->pause_until_ns < next)
            next = engine->pause_until_ns;
    }
    return next;
}

/* Partial rollouts: the samples set aside before version below (on
 * engine; NULL: on any) continue, each on its own engine. */
static kvio_status_t continue_parked(rl_sim_t *sim, const rl_engine_t *engine, uint64_t below)
{
    kvio_status_t status = KVIO_OK;
    for (size_t g = sim->oldest; g < sim->num_groups && sim->parked_samples > 0; g++) {
        rl_group_t *group = &sim->groups[g];
        for (uint32_t i = 0; i < group->num_samples && group->parked > 0; i++) {
            size_t id = group->first_sample + i;
            rl_sample_t *sample = &sim->samples[id];
            if (!sample->parked || sample->parked_version >= below ||
                (engine != NULL && sample->engine != engine->index))
                continue;
            sample->parked = false;
            sim->parked_samples--;
            sim->parked_groups -= --group->parked == 0;
            sim->continuations++;
            status = add_part(sim, &sim->engines[sample->engine], id, 0, 0);
            if (status != KVIO_OK)
                return status;
        }
    }
    return status;
}

static kvio_status_t activate(rl_engine_t *engine, uint64_t version)
{
    engine->pending_version = 0;
    engine->version = version;
    kvio_status_t status = kvio_engine_activate(engine->engine, version);
    if (status == KVIO_OK && engine->sim->parked_samples > 0)
        status = continue_parked(engine->sim, engine, version);
    return status;
}

static kvio_status_t complete_engines(rl_sim_t *sim)
{
    for (uint32_t e = 0; e < sim->num_engines; e++) {
        rl_engine_t *engine = &sim->engines[e];
        if (!engine->busy || engine->end_ns > sim->now_ns)
            continue;
        engine->busy = false;
        kvio_engine_complete(engine->engine, sim->now_ns);
        if (engine->pending_version > engine->version) {
            kvio_status_t status = activate(engine, engine->pending_version);
            if (status != KVIO_OK)
                return status;
        }
    }
    return KVIO_OK;
}

/* The trainer's step ended: the rollout takes the new version, each
 * engine at its next iteration boundary. */
static kvio_status_t finish_step(rl_sim_t *sim)
{
    sim->trainer_busy = false;
    sim->trainer_ready_ns = sim->now_ns;
    sim->steps_done++;
    sim->version++;
    for (uint32_t e = 0; e < sim->num_engines; e++) {
        rl_engine_t *engine = &sim->engines[e];
        if (engine->busy) {
            engine->pending_version = sim->version;
            continue;
        }
        kvio_status_t status = activate(engine, sim->version);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* The loop, on the virtual clock or (emulate) the host's; rte: rank 0 of
 * a run whose trainer is rank 1 (emulate). */
static kvio_status_t rl_run(const kvio_rl_config_t *config, const kvio_serve_run_t *run,
                            bool emulate, kvio_rte_t *rte, const kvio_xfer_config_t *transport,
                            kvio_result_t *result, char *error_p, size_t error_len)
{
    rl_sim_t sim = {.config = config, .run = run, .error_p = error_p, .error_len = error_len};
    kvio_status_t status = kvio_rl_check(config, run, error_p, error_len);
    if (status == KVIO_OK && emulate)
        status = rl_emu_create(&sim, rte, transport);
    if (status == KVIO_OK)
        status = engines_create(&sim, error_p, error_len);
    if (status == KVIO_OK) {
        sim.steps = calloc((size_t)config->steps, sizeof(*sim.steps));
        if (sim.steps == NULL)
            status = KVIO_ERR_NOMEM;
    }
    rl_plan_costs(&sim);
    if (status == KVIO_OK && sim.emu != NULL)
        rl_emu_start(&sim);
    while (status == KVIO_OK && sim.steps_done < (uint64_t)config->steps) {
        if (run->stop != NULL && *run->stop)
            break;
        status = admit(&sim);
        if (status == KVIO_OK && !sim.trainer_busy && sim.step < (uint64_t)config->steps &&
            rl_pick_batch(&sim))
            status = rl_start_step(&sim);
        if (status == KVIO_OK)
            status = schedule_engines(&sim);
        if (status != KVIO_OK)
            break;
        int64_t next = next_event(&sim);
        if (next == INT64_MAX && sim.parked_samples > 0) {
            /* The step's batch waits for groups set aside and no new
             * version can come: they continue on this one. */
            status = continue_parked(&sim, NULL, UINT64_MAX);
            continue;
        }
        if (next == INT64_MAX) {
            snprintf(error_p, error_len,
                     "rl: step %llu of %lld lacks groups and nothing runs: the stream ended "
                     "after %zu groups (stream.requests counts prompts; the run takes "
                     "rl.steps x rl.batch = %lld)",
                     (unsigned long long)sim.steps_done + 1, (long long)config->steps,
                     sim.num_groups,
                     (long long)(config->steps * config->batch));
            status = KVIO_ERR_CONFIG;
            break;
        }
        if (sim.emu != NULL)
            status = rl_emu_wait(&sim, next, &sim.now_ns);
        else
            sim.now_ns = next;
        if (status == KVIO_OK)
            status = complete_engines(&sim);
        if (status == KVIO_OK && sim.trainer_busy && sim.trainer_end_ns <= sim.now_ns)
            status = finish_step(&sim);
    }
    if (status == KVIO_OK)
        status = rl_figures(&sim, result);
    if (status != KVIO_OK && error_p[0] == '\0')
        snprintf(error_p, error_len, "rl: %s", kvio_strerror(status));
    sim_free(&sim);
    return status;
}

kvio_status_t kvio_rl_simulate(const kvio_rl_config_t *config, const kvio_serve_run_t *run,
                               kvio_result_t *result, char *error_p, size_t error_len)
{
    return rl_run(config, run, false, NULL, NULL, result, error_p, error_len);
}

/* What each rank of an emulate run with a trainer rank runs. */
typedef struct rl_ranks {
    const kvio_rl_config_t *config;
    const kvio_serve_run_t *run; /* rank 0's */
    const kvio_xfer_config_t *transport;
    kvio_result_t *result;       /* rank 0's */
    char error[2][1024];         /* each rank writes its own */
} rl_ranks_t;

static kvio_status_t rl_rank(kvio_rte_t *rte, void *arg)
{
    rl_ranks_t *ranks = arg;
    int self = kvio_rte_index(rte);
    char *error = ranks->error[self == 0 ? 0 : 1];
    kvio_status_t status =
        self == 0 ? rl_run(ranks->config, ranks->run, true, rte, ranks->transport,
                           ranks->result, error, sizeof(ranks->error[0]))
                  : rl_trainer_rank(rte, ranks->transport, error, sizeof(ranks->error[0]));
    if (status != KVIO_OK)
        kvio_rte_set_error(rte, "%s", error[0] ? error : kvio_strerror(status));
    return status;
}

kvio_status_t kvio_rl_emulate(const kvio_rl_config_t *config, const kvio_serve_run_t *run,
                              kvio_rte_world_t *world, const kvio_xfer_config_t *transport,
                              kvio_result_t *result, char *error_p, size_t error_len)
{
    if (world == NULL)
        return rl_run(config, run, true, NULL, NULL, result, error_p, error_len);
    rl_ranks_t *ranks = calloc(1, sizeof(*ranks));
    if (ranks == NULL)
        return KVIO_ERR_NOMEM;
    *ranks = (rl_ranks_t){.config = config, .run = run, .transport = transport,
                          .result = result};
    kvio_status_t status = kvio_rte_world_run(world, rl_rank, ranks, error_p, error_len);
    /* Rank 0's own message says most (a trainer rank lost says which). */
    if (status != KVIO_OK && ranks->error[0][0] != '\0')
        snprintf(error_p, error_len, "%s", ranks->error[0]);
    free(ranks);
    return status;
}
