/* The coupled run's serving side: whether a run couples serving to model
 * updates, each serve rank's engine (or the client) with its own copy of
 * the stream, and on rank 0 the serve ranks' reports merged into the
 * serving metrics with the cumulative inference loss. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void run_serve_plan(const kvio_workload_t *workload, const kvio_model_t *model,
                    const kvio_gpu_t *gpu, kvio_stream_t *stream, bool updates,
                    kvio_serve_run_t *run_p)
{
    *run_p = (kvio_serve_run_t){
        .serve = &workload->serve,
        .model = model,
        .gpu = gpu,
        .cost = &workload->cost,
        .num_ranks = (uint32_t)workload->ranks.serve,
        .num_prefill = (uint32_t)workload->ranks.prefill,
        .pd = workload->ranks.prefill > 0 ? &workload->pd : NULL,
        .seed = (uint64_t)workload->seed,
        .slo = {.ttft_ns = workload->slo.ttft_ns, .tpot_ns = workload->slo.tpot_ns},
        .warmup_ns = workload->warmup_ns,
        .warmup_requests = workload->warmup_requests,
        .stream = stream,
        .duration_ns = kvio_workload_stream_duration(workload),
        .rank_timeout_ns = workload->ranks.timeout_ns,
        .device = &workload->device,
        .data = &workload->data,
        .update = updates ? &workload->update : NULL,
        .loss = &workload->train.checkpoint.loss,
        .stall_for_updates = updates && workload->update.apply == KVIO_APPLY_STALL,
        .keep_itls = true,
    };
}

kvio_status_t run_coupled_create(const kvio_workload_t *workload, kvio_rte_t *rte,
                                 int serve_index, int num_serve,
                                 volatile sig_atomic_t *stop, struct kvio_frontend *frontend,
                                 coupled_serve_t *coupled, char *error_p, size_t error_len)
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
    run_serve_plan(workload, &coupled->model, &coupled->gpu, coupled->stream, true,
                   &coupled->run);
    kvio_serve_run_t *run = &coupled->run;
    run->num_ranks = (uint32_t)num_serve;
    run->rte = rte;
    /* With a client rank (the last), serve_index < 0 is the client; a
     * front end (kvio serve) routes itself, with no client rank. */
    run->client_rank = workload->ranks.client > 0 && frontend == NULL ? 1 + num_serve : 0;
    run->first_serve_rank = 1;
    run->stop = stop;
    run->frontend = frontend;
    if (serve_index < 0)
        return kvio_serve_client_create(&coupled->run, &coupled->client, error_p, error_len);
    return kvio_serve_rank_create(&coupled->run, (uint32_t)serve_index, (uint32_t)num_serve,
                                  &coupled->rank, error_p, error_len);
}

void run_coupled_destroy(coupled_serve_t *coupled)
{
    kvio_serve_rank_destroy(coupled->rank);
    kvio_serve_client_destroy(coupled->client);
    kvio_stream_destroy(coupled->stream);
    memset(coupled, 0, sizeof(*coupled));
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
