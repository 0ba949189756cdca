/* The serving side of emulate's run with model updates: each serve rank's
 * engine (or the client) with its own copy of the stream, or an engine-less
 * rank of emulated iterations, and on rank 0 the serve ranks' reports merged into the
 * serving metrics with the cumulative inference loss. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kvio_status_t run_rank_serve_create(const run_context_t *context, kvio_rte_t *rte,
                                    const run_rank_parts_t *parts, run_rank_serve_t *part,
                                    char *error_p, size_t error_len)
{
    const kvio_workload_t *workload = context->workload;
    memset(part, 0, sizeof(*part));
    run_serve_given_t given = {.context = context, .rte = rte};
    if (parts->serve && !parts->engine) {
        run_plan_serve(workload, RUN_SERVE_EMULATED, &given, &part->run);
        return kvio_serve_rank_create(&part->run, (uint32_t)parts->serve_index,
                                      (uint32_t)workload->ranks.serve, &part->rank, error_p,
                                      error_len);
    }
    part->model = workload->model;
    part->gpu = workload->gpu;
    kvio_status_t status = kvio_model_resolve(&part->model, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_gpu_resolve(&part->gpu, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed,
                                    kvio_workload_stream_duration(workload), &part->stream,
                                    error_p, error_len);
    if (status != KVIO_OK)
        return status;
    given.model = &part->model;
    given.gpu = &part->gpu;
    given.stream = part->stream;
    run_plan_serve(workload, RUN_SERVE_RANK, &given, &part->run);
    if (parts->client)
        return kvio_serve_client_create(&part->run, &part->client, error_p, error_len);
    return kvio_serve_rank_create(&part->run, (uint32_t)parts->serve_index,
                                  (uint32_t)workload->ranks.serve, &part->rank, error_p,
                                  error_len);
}

void run_rank_serve_destroy(run_rank_serve_t *part)
{
    kvio_serve_rank_destroy(part->rank);
    kvio_serve_client_destroy(part->client);
    kvio_stream_destroy(part->stream);
    memset(part, 0, sizeof(*part));
}

/* Rank 0: the serving metrics of the coupled run, and the cumulative
 * inference loss, Σ over served requests of L(step of the version that
 * served them) (version 0, the initial weights, counts as step 1). */
kvio_status_t run_coupled_metrics(const run_context_t *context, const collected_t *all,
                                     void **blobs, size_t *lengths, int size,
                                     kvio_serve_output_t *output_p, char *error_p,
                                     size_t error_len)
{
    uint64_t *served = NULL;
    size_t num_versions = 0;
    const kvio_workload_t *workload = context->workload;
    kvio_model_t model = workload->model;
    kvio_serve_pd_merge_t pd = {
        .config = &workload->pd, .num_prefill = (uint32_t)workload->ranks.prefill,
        .block_size = (uint32_t)workload->serve.kvcache.block_size,
        .run_ns = workload->duration_ns};
    if (kvio_model_resolve(&model, error_p, error_len) == KVIO_OK)
        pd.kv_bytes_per_token = kvio_model_kv_bytes_per_token(&model,
                                                              kvio_cost_gpus(&workload->cost));
    kvio_status_t status = kvio_serve_ranks_merge(blobs + 1, lengths + 1, (size_t)size - 1,
                                                  TRAIN_RANK + 1, context->results,
                                                  context->events, context->result, &served,
                                                  &num_versions, output_p, context->itls,
                                                  context->samples,
                                                  workload->ranks.prefill > 0 ? &pd : NULL,
                                                  context->frontend != NULL, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* The step each version holds (versions count from 1, in order). */
    double *steps = calloc(all->num_train + 1, sizeof(double));
    if (steps == NULL) {
        free(served);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < all->num_train; i++)
        if (all->train[i].version <= all->num_train)
            steps[all->train[i].version] = (double)all->train[i].step;
    kvio_serve_loss_fill(context->result, steps, all->num_train + 1,
                         &context->workload->train.checkpoint.loss, served, num_versions);
    free(steps);
    free(served);
    return KVIO_OK;
}
