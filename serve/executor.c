/* How an engine iteration is carried out (serve/serve_int.h): one step that
 * every driver takes to begin an iteration (the simulate event loop, the
 * emulate rank threads, the coupled serve ranks), and the executors that
 * let its time pass: virtual (the simulate clock moves), realtime (the host
 * clock: sleep, then spin the last stretch) and gpu (a spin kernel keeps the
 * SMs busy for the iteration, then as realtime). A new executor is an ops
 * table here and a line in the registry. */
#include "serve/serve_int.h"

#include <stdio.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"

/* ---------- the step ---------- */

/* The head of the waiting queue needs more blocks than the pool has: no
 * iteration can ever start it. */
static kvio_status_t cannot_start(const kvio_engine_t *engine, uint32_t rank, char *error_p,
                                  size_t error_len)
{
    uint64_t waiting[1] = {0};
    kvio_engine_waiting_ids(engine, waiting, 1);
    snprintf(error_p, error_len,
             "serve rank %u: request %llu cannot start: it needs more KV blocks than the %u "
             "the cache holds (raise serve.kvcache.capacity or shorten the stream's lengths)",
             rank, (unsigned long long)waiting[0], kvio_engine_num_blocks(engine));
    return KVIO_ERR_CONFIG;
}

kvio_status_t kvio_serve_step(kvio_engine_t *engine, int64_t now_ns, uint32_t rank,
                              bool pool_comes_back, kvio_engine_iteration_t *iteration_p,
                              kvio_serve_step_t *step_p, char *error_p, size_t error_len)
{
    if (!kvio_engine_has_work(engine)) {
        *step_p = KVIO_SERVE_STEP_IDLE;
        return KVIO_OK;
    }
    kvio_status_t status = kvio_engine_schedule(engine, now_ns, iteration_p);
    if (status != KVIO_OK) {
        if (kvio_engine_error(engine)[0] != '\0')
            snprintf(error_p, error_len, "%s", kvio_engine_error(engine));
        else
            snprintf(error_p, error_len, "serve rank %u: %s", rank, kvio_strerror(status));
        return status;
    }
    if (iteration_p->duration_ns > 0) {
        *step_p = KVIO_SERVE_STEP_RUN;
        return KVIO_OK;
    }
    if (kvio_engine_lent_blocks(engine) > 0 && pool_comes_back) {
        /* The pool is lent to an update: nothing fits until it is back. */
        *step_p = KVIO_SERVE_STEP_LENT;
        return KVIO_OK;
    }
    return cannot_start(engine, rank, error_p, error_len);
}

/* ---------- executors ---------- */

static kvio_status_t no_compute(kvio_executor_t *executor, int64_t duration_ns)
{
    (void)executor;
    (void)duration_ns;
    return KVIO_OK;
}

static void no_wait(const kvio_executor_t *executor, int64_t end_ns)
{
    (void)executor;
    (void)end_ns;
}

static void host_wait(const kvio_executor_t *executor, int64_t end_ns)
{
    if (end_ns > 0)
        kvio_wait_until_ns(executor->origin_ns + (uint64_t)end_ns);
}

static kvio_status_t gpu_compute(kvio_executor_t *executor, int64_t duration_ns)
{
    return kvio_device_spin(executor->device, duration_ns);
}

static const kvio_executor_ops_t virtual_ops = {
    .name = "virtual",
    .compute = no_compute,
    .wait_until = no_wait,
};

static const kvio_executor_ops_t realtime_ops = {
    .name = "realtime",
    .compute = no_compute,
    .wait_until = host_wait,
};

static const kvio_executor_ops_t gpu_ops = {
    .name = "gpu",
    .compute = gpu_compute,
    .wait_until = host_wait,
};

static const kvio_executor_ops_t *const executors[] = {&virtual_ops, &realtime_ops, &gpu_ops};

const kvio_executor_ops_t *kvio_executor_find(const char *name)
{
    for (size_t i = 0; i < sizeof(executors) / sizeof(executors[0]); i++)
        if (strcmp(executors[i]->name, name) == 0)
            return executors[i];
    return NULL;
}
