/* The plan of a run: which parts each world rank runs (train, serve, the
 * client, P/D's prefill or decode, a front end's requests), and every serve
 * run of the product (kvio_serve_run_t), made here from the workload and
 * what its caller decides: which part it is, the resolved model, the
 * stream, the runtime handle, where its results go. Both modes ask it. */
#include "run/run_int.h"

#include <string.h>

int run_first_serve_rank(const kvio_workload_t *workload)
{
    /* Train ranks come first in every file, as in updates.csv. */
    return kvio_updates_wanted(workload) ? (int)workload->ranks.train : 0;
}

int run_client_rank(const kvio_workload_t *workload, bool frontend)
{
    int after_serve = run_first_serve_rank(workload) + (int)workload->ranks.serve;
    if (frontend)
        return 0; /* a front end (kvio serve) routes itself */
    if (kvio_updates_coupled(workload))
        return workload->ranks.client > 0 ? after_serve : 0;
    /* Emulate's serve ranks without trainers: several take their requests
     * from a client rank, unless P/D's prefill ranks take the stream's
     * shares; an RL run's loop admits its groups itself. */
    bool plain = workload->mode == KVIO_MODE_EMULATE && !kvio_updates_wanted(workload) &&
                 workload->rl.mode == KVIO_RL_OFF;
    return plain && workload->ranks.serve > 1 && workload->ranks.prefill == 0 ? after_serve : 0;
}

int run_world_size(const kvio_workload_t *workload)
{
    return run_first_serve_rank(workload) + (int)workload->ranks.serve +
           (kvio_updates_coupled(workload) ? (int)workload->ranks.client : 0);
}

int run_rl_ranks(const kvio_workload_t *workload)
{
    return workload->mode == KVIO_MODE_EMULATE && workload->rl.mode != KVIO_RL_OFF
               ? kvio_rl_emulate_ranks(&workload->rl)
               : 1;
}

run_rank_parts_t run_rank_parts(const kvio_workload_t *workload, bool frontend, int world_rank)
{
    int first_serve = run_first_serve_rank(workload);
    int num_serve = (int)workload->ranks.serve;
    run_rank_parts_t parts = {.serve_index = -1};
    if (world_rank < first_serve) {
        parts.train = true;
        parts.role = "train";
        return parts;
    }
    if (world_rank >= first_serve + num_serve) {
        parts.client = true;
        parts.role = "client";
        return parts;
    }
    parts.serve = true;
    parts.role = "serve";
    parts.serve_index = world_rank - first_serve;
    parts.engine = !kvio_updates_wanted(workload) || workload->mode != KVIO_MODE_EMULATE ||
                   kvio_updates_coupled(workload);
    parts.frontend = frontend && parts.engine;
    parts.prefill = workload->ranks.prefill > 0 && parts.serve_index < workload->ranks.prefill;
    parts.decode = workload->ranks.prefill > 0 && !parts.prefill;
    return parts;
}

/* What every serve run with an engine takes from the workload: the
 * sections, the stream, the SLO, warm-up, seed, P/D, what updates do. */
static kvio_serve_run_t engine_plan(const kvio_workload_t *workload,
                                    const run_serve_given_t *given, bool updates)
{
    return (kvio_serve_run_t){
        .serve = &workload->serve,
        .model = given->model,
        .gpu = given->gpu,
        .cost = &workload->cost,
        .num_ranks = (uint32_t)workload->ranks.serve,
        .num_prefill = (uint32_t)workload->ranks.prefill,
        .pd = workload->ranks.prefill > 0 ? &workload->pd : NULL,
        .seed = (uint64_t)workload->seed,
        .slo = {.ttft_ns = workload->slo.ttft_ns, .tpot_ns = workload->slo.tpot_ns},
        .warmup_ns = workload->warmup_ns,
        .warmup_requests = workload->warmup_requests,
        .stream = given->stream,
        .num_requests = given->num_requests,
        .duration_ns = kvio_workload_stream_duration(workload),
        .rank_timeout_ns = workload->ranks.timeout_ns,
        .device = &workload->device,
        .data = &workload->data,
        .update = updates ? &workload->update : NULL,
        .loss = &workload->train.checkpoint.loss,
        .stall_for_updates = updates && workload->update.apply == KVIO_APPLY_STALL,
        .keep_itls = true,
        .first_serve_rank = run_first_serve_rank(workload),
        .stop = given->context != NULL ? given->context->stop : NULL,
        .frontend = given->context != NULL ? given->context->frontend : NULL,
        .rte = given->rte,
    };
}

void run_plan_serve(const kvio_workload_t *workload, run_serve_part_t part,
                    const run_serve_given_t *given, kvio_serve_run_t *run_p)
{
    const run_context_t *context = given->context;
    if (part == RUN_SERVE_EMULATED) {
        /* update.serving: emulated: a rank of emulated iterations between
         * updates, no engine, no stream. */
        *run_p = (kvio_serve_run_t){.update = &workload->update, .rte = given->rte,
                                    .first_serve_rank = run_first_serve_rank(workload),
                                    .stop = context != NULL ? context->stop : NULL};
        return;
    }
    kvio_serve_run_t run = engine_plan(workload, given,
                                       part == RUN_SERVE_RANK ||
                                           (part == RUN_SERVE_RUN &&
                                            kvio_updates_wanted(workload)));
    switch (part) {
    case RUN_SERVE_RUN: {
        /* This process's serve ranks: the run's results go where the
         * context says; simulate's updates are the schedule's records,
         * into which the engines write when they took each and what it
         * cost, and its stall per rank, to which drains and lent pools
         * add. */
        const kvio_updates_schedule_t *schedule = given->schedule;
        run.client_rank = run_client_rank(workload, run.frontend != NULL);
        run.results = context->results;
        run.events = context->events;
        run.start = context->start;
        run.itls = context->itls;
        run.samples = context->samples;
        run.output = given->output;
        run.control = given->control;
        if (schedule != NULL) {
            run.updates = schedule->updates;
            run.num_updates = schedule->num_updates;
            run.version_steps = schedule->version_steps;
            run.num_version_steps = schedule->num_version_steps;
            run.drain_stall_ns = schedule->inference_stall_ns;
        }
        break;
    }
    case RUN_SERVE_TWIN:
        /* The same stream without updates, writing nothing but output. */
        run.keep_itls = false;
        run.output = given->output;
        break;
    case RUN_SERVE_RANK:
        /* A rank of the coupled run: with a client rank (the last) it takes
         * the client's requests. */
        run.client_rank = run_client_rank(workload, run.frontend != NULL);
        break;
    case RUN_SERVE_CHECK:
    case RUN_SERVE_EMULATED:
        break;
    }
    *run_p = run;
}
