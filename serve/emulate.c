/* Emulate mode's plain run: the serve ranks in real time, each a thread of
 * the local runtime running its serve loop (serve/rank.c) with real KV
 * memory, swaps and tier traffic. With several serve ranks a client rank
 * generates the stream in real time and routes each request from the state
 * the ranks publish (serve/client.c); one serve rank takes its stream
 * itself. The coupled run (run/updates.c) runs the same serve ranks, with
 * the transport's receiver as their update source. */
#include "kvio/serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/loop_int.h"

/* ---------- the plain emulate run: serve ranks over the local runtime ---------- */

/* Iteration records a plain run's serve rank keeps: its report reaches the
 * merge in memory, not as a message, so far more than a coupled rank's. */
#define PLAIN_ITERATIONS_MAX_BYTES (256u << 20)

/* Shared by the ranks of a plain run (threads of this process): each rank
 * writes only its own slots; the caller reads them after the world ran. */
typedef struct plain_run {
    const kvio_serve_run_t *run;
    uint32_t num_serve;
    bool with_client;             /* several serve ranks: a client rank routes */
    kvio_serve_run_t *runs;       /* per world rank: run with its rte */
    kvio_serve_rank_t **ranks;    /* per serve rank */
    kvio_serve_client_t *client;
    kvio_serve_setup_entry_t *setup; /* per world rank: its role and set-up time */
    void **blobs;                 /* per world rank: its report */
    size_t *lengths;
    int64_t t0_wall_ns;
    int64_t t0_ns;
    int64_t end_ns;               /* rte clock: the last rank's end */
} plain_run_t;

/* A serve rank of the plain run: its serve loop, until serving is over. */
static kvio_status_t plain_serve(kvio_serve_rank_t *rank, kvio_rte_t *rte)
{
    char error[KVIO_ERROR_MAX] = "";
    kvio_status_t status = kvio_serve_rank_serve(rank, NULL, 0, NULL, error, sizeof(error));
    if (status != KVIO_OK)
        kvio_rte_set_error(rte, "%s", error[0] ? error : kvio_strerror(status));
    return status;
}

static kvio_status_t plain_body(kvio_rte_t *rte, void *arg)
{
    plain_run_t *plain = arg;
    int self = kvio_rte_index(rte);
    bool client = plain->with_client && self == (int)plain->num_serve;
    kvio_serve_run_t *run = &plain->runs[self];
    *run = *plain->run; /* the plan's, on this rank's runtime handle */
    run->rte = rte;
    run->start = NULL;
    char error[KVIO_ERROR_MAX] = "";
    int64_t entered = kvio_rte_time_ns(rte);
    kvio_status_t status =
        client ? kvio_serve_client_create(run, &plain->client, error, sizeof(error))
               : kvio_serve_rank_create(run, (uint32_t)self, plain->num_serve,
                                        &plain->ranks[self], error, sizeof(error));
    plain->setup[self] = (kvio_serve_setup_entry_t){
        .rank = self, .role = client ? "client" : "serve",
        .setup_s = (double)(kvio_rte_time_ns(rte) - entered) / 1e9};
    if (status == KVIO_OK && run->stop != NULL && *run->stop)
        status = KVIO_ERR_INTERRUPTED; /* during set-up: nothing to serve or measure */
    if (status != KVIO_OK) {
        kvio_rte_set_error(rte, "%s", error[0] ? error : kvio_strerror(status));
        return status;
    }
    if (!client)
        kvio_serve_rank_set_iterations_limit(plain->ranks[self], PLAIN_ITERATIONS_MAX_BYTES);
    /* Every rank has built its pool: one t0 for all. */
    kvio_rte_start_t start;
    status = kvio_rte_start(rte, &start);
    if (status == KVIO_OK && run->stop != NULL && *run->stop)
        status = KVIO_ERR_INTERRUPTED;
    if (status != KVIO_OK)
        return status;
    run->t0_ns = start.t0_ns;
    if (self == 0) {
        plain->t0_ns = start.t0_ns;
        plain->t0_wall_ns = start.t0_wall_ns;
        kvio_serve_setup_note("every rank is set up; the run starts now (t0)");
    }
    if (client) {
        status = kvio_serve_client_run(plain->client, run->stop, error, sizeof(error));
        if (status != KVIO_OK)
            kvio_rte_set_error(rte, "%s", error[0] ? error : kvio_strerror(status));
    } else {
        status = plain_serve(plain->ranks[self], rte);
    }
    if (status != KVIO_OK)
        return status;
    if (self == 0)
        plain->end_ns = kvio_rte_time_ns(rte);
    return client ? kvio_serve_client_pack(plain->client, &plain->blobs[self],
                                           &plain->lengths[self])
                  : kvio_serve_rank_pack(plain->ranks[self], &plain->blobs[self],
                                         &plain->lengths[self]);
}

/* What only a plain run reports, from the ranks still in memory. */
static void plain_metrics(const plain_run_t *plain, kvio_result_t *result)
{
    const kvio_serve_run_t *run = plain->run;
    const kvio_serve_rank_t *first = plain->ranks[0];
    int64_t reference_ns = 0, swap_real_ns = 0, swap_modelled_ns = 0;
    uint64_t reference_bytes = 0;
    for (uint32_t r = 0; r < plain->num_serve; r++) {
        const kvio_serve_rank_t *rank = plain->ranks[r];
        const kvio_engine_metrics_t *engine = kvio_engine_metrics(rank->lane.engine);
        kvio_serve_memory_reference_copy(&rank->memory, rank->block_bytes,
                                         engine->swapped_bytes, &reference_bytes,
                                         &reference_ns);
        swap_real_ns += engine->swap_real_ns;
        swap_modelled_ns += engine->swap_modelled_ns;
    }
    kvio_result_set(result, KVIO_FIG_KV_BLOCKS_PER_RANK, first->blocks);
    kvio_result_set(result, KVIO_FIG_BLOCK_SIZE, first->block_size);
    kvio_result_set(result, KVIO_FIG_KV_BLOCK_BYTES, (double)first->block_bytes);
    kvio_result_set_text(result, KVIO_FIG_SCHEDULER,
                         kvio_choice_name(&run->serve->scheduler.policy));
    kvio_router_t *router = NULL;
    if (kvio_router_create(&run->serve->router, &router) == KVIO_OK)
        kvio_result_set_text(result, KVIO_FIG_ROUTER, kvio_router_name(router));
    kvio_router_destroy(router);
    kvio_result_set(result, KVIO_FIG_WALL_RUN_S, (double)(plain->end_ns - plain->t0_ns) / 1e9);
    kvio_result_set(result, KVIO_FIG_SWAP_COPY_S, (double)swap_real_ns / 1e9);
    kvio_result_set(result, KVIO_FIG_SWAP_MODELLED_S, (double)swap_modelled_ns / 1e9);
    if (reference_ns > 0)
        kvio_result_set(result, KVIO_FIG_SWAP_REFERENCE_COPY_GBPS,
                        (double)reference_bytes / (double)reference_ns);
    kvio_result_set_text(result, KVIO_FIG_EXECUTOR, first->executor.ops->plugin.name);
}

kvio_status_t kvio_serve_emulate(const kvio_serve_run_t *run, kvio_result_t *result,
                                 bool *complete_p, char *error_p, size_t error_len)
{
    kvio_serve_setup_begin();
    uint64_t host_bytes = 0;
    kvio_status_t status = kvio_serve_emulate_preflight(run, &host_bytes, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    plain_run_t plain = {.run = run, .num_serve = run->num_ranks > 0 ? run->num_ranks : 1};
    /* The plan's client rank (the last) routes the stream over several
     * serve ranks (none with P/D, or a front end, which routes itself). */
    plain.with_client = run->client_rank > 0;
    if (plain.with_client && run->client_rank != (int)plain.num_serve) {
        snprintf(error_p, error_len, "emulate: the client is world rank %d, not the one after "
                 "the %u serve ranks", run->client_rank, plain.num_serve);
        return KVIO_ERR_INTERNAL;
    }
    kvio_serve_setup_note("%u serve rank%s set up: %.2f GiB of host memory for KV pools, swap "
                          "space and host tiers (checked against what this machine has)",
                          plain.num_serve, plain.num_serve == 1 ? "" : "s",
                          (double)host_bytes / 1073741824.0);
    int size = (int)plain.num_serve + (plain.with_client ? 1 : 0);
    plain.runs = calloc((size_t)size, sizeof(*plain.runs));
    plain.ranks = calloc(plain.num_serve, sizeof(*plain.ranks));
    plain.setup = calloc((size_t)size, sizeof(*plain.setup));
    plain.blobs = calloc((size_t)size, sizeof(*plain.blobs));
    plain.lengths = calloc((size_t)size, sizeof(*plain.lengths));
    kvio_rte_world_t *world = NULL;
    if (plain.runs == NULL || plain.ranks == NULL || plain.setup == NULL ||
        plain.blobs == NULL || plain.lengths == NULL) {
        snprintf(error_p, error_len, "emulate: out of memory");
        status = KVIO_ERR_NOMEM;
        goto out;
    }
    kvio_rte_params_t params = {.kind = "local", .num_ranks = size,
                                .timeout_ns = run->rank_timeout_ns};
    status = kvio_rte_world_create(&params, &world, error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    kvio_rte_world_set_stop(world, run->stop);
    status = kvio_rte_world_run(world, plain_body, &plain, error_p, error_len);
    bool stopped = status == KVIO_ERR_INTERRUPTED || (run->stop != NULL && *run->stop);
    if (status != KVIO_OK && !stopped)
        goto out;
    bool before_t0 = plain.t0_wall_ns == 0;
    if (stopped && before_t0) {
        status = kvio_serve_setup_interrupted(result, "emulate: ", error_p, error_len);
        goto out;
    }
    kvio_serve_setup_record(result, run->start, plain.t0_wall_ns, plain.setup, (size_t)size);
    if (stopped) {
        /* Interrupted: what the ranks reported, if every one did. */
        for (int r = 0; r < size; r++)
            if (plain.blobs[r] == NULL)
                status = KVIO_ERR_INTERRUPTED;
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "emulate: interrupted");
            goto out;
        }
    }
    uint64_t *served = NULL;
    size_t num_versions = 0;
    kvio_serve_pd_merge_t pd = {
        .config = run->pd, .num_prefill = run->num_prefill,
        .block_size = (uint32_t)run->serve->kvcache.block_size,
        .kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model,
                                                            kvio_cost_gpus(run->cost)),
        .run_ns = plain.end_ns - plain.t0_ns};
    status = kvio_serve_ranks_merge(plain.blobs, plain.lengths, (size_t)size, 0, run->results,
                                    run->events, result, &served, &num_versions, NULL,
                                    run->itls, run->samples, run->pd != NULL ? &pd : NULL,
                                    run->frontend != NULL, error_p, error_len);
    free(served);
    if (status == KVIO_OK && run->frontend != NULL) {
        kvio_frontend_routing_fill(run->frontend, result);
        status = kvio_frontend_write_trace(run->frontend, run->results, error_p, error_len);
    }
    if (status != KVIO_OK)
        goto out;
    plain_metrics(&plain, result);
    *complete_p = !stopped;
out:
    for (uint32_t r = 0; plain.ranks != NULL && r < plain.num_serve; r++)
        kvio_serve_rank_destroy(plain.ranks[r]);
    kvio_serve_client_destroy(plain.client);
    for (int r = 0; plain.blobs != NULL && r < size; r++)
        free(plain.blobs[r]);
    kvio_rte_world_destroy(world, status != KVIO_OK);
    free(plain.runs);
    free(plain.ranks);
    free(plain.setup);
    free(plain.blobs);
    free(plain.lengths);
    return status;
}
