/* What a run with model updates checks before any rank starts, and the
 * weight_sync plan's buckets and deltas as the transports take them. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/log.h"
#include "kvio/redis.h"
#include "kvio/sysinfo.h"
#include <sys/stat.h>
#include <unistd.h>

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
        snprintf(error_p, error_len, "train.transport.model.from: %s was not read (kvio_workload_load and "
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
        /* What the run will hold, said before it starts (its peak RSS, less
         * the requests' and records' own memory). */
        kvio_serve_setup_note("the run will allocate about %.2f GiB of host memory: %.2f GiB of KV "
                              "pools and swap space, %.2f GiB of weights (train.bytes x %llu "
                              "buffers)%s; %.2f GiB available",
                              (weights + rings + (double)other_bytes) / 1073741824.0,
                              (double)other_bytes / 1073741824.0, weights / 1073741824.0,
                              (unsigned long long)buffers,
                              ring > 0 ? " and weight_sync's bucket slots" : "",
                              (double)available / 1073741824.0);
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
