/* How an engine iteration is carried out: the one step every lane takes to
 * begin an iteration (serve/loop.c), and the executors' registry look-up.
 * The executors themselves are serve/executor_<name>.c, listed in
 * serve/executors.c. */
#include "serve/loop_int.h"

#include <stdio.h>
#include <string.h>

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
    if (kvio_engine_kv_ready_ns(engine) != INT64_MAX) {
        /* Nothing runs until a load from a tier ends. */
        *step_p = KVIO_SERVE_STEP_KV;
        return KVIO_OK;
    }
    if (kvio_engine_admission_held(engine)) {
        /* Paused: the waiting requests wait for the resume. */
        *step_p = KVIO_SERVE_STEP_IDLE;
        return KVIO_OK;
    }
    if (kvio_engine_lent_blocks(engine) > 0 && pool_comes_back) {
        /* The pool is lent to an update: nothing fits until it is back. */
        *step_p = KVIO_SERVE_STEP_LENT;
        return KVIO_OK;
    }
    return cannot_start(engine, rank, error_p, error_len);
}

const kvio_executor_ops_t *kvio_executor_find(const char *name)
{
    return (const kvio_executor_ops_t *)kvio_registry_find(&kvio_executors, name);
}
