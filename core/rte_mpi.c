/* The mpi runtime: this process is one rank of MPI_COMM_WORLD (started by
 * mpirun). MPI is used for launch and small messages only; every call is
 * non-blocking and polled against a deadline so a dead peer cannot hang a
 * rank. Posted messages are pending MPI_Isends on a copy, progressed by
 * every later call of this (single-threaded) rank. On failure MPI_Finalize
 * is skipped: the process exits non-zero and mpirun ends the job's other
 * ranks. */
#include "core/rte_int.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"

/* A posted message still on its way; its copy lives until MPI is done. */
typedef struct pending_send {
    struct pending_send *next;
    MPI_Request request;
    void *copy;
} pending_send_t;

typedef struct mpi_world {
    bool initialized_here;
    int64_t timeout_ns;
    pending_send_t *pending; /* posted, not yet complete */
} mpi_world_t;

/* Frees posted messages that have completed; an error completes one too
 * (the receiver's side reports what went wrong). */
static void progress_pending(mpi_world_t *world)
{
    pending_send_t **link = &world->pending;
    while (*link != NULL) {
        pending_send_t *pending = *link;
        int done = 0;
        if (MPI_Test(&pending->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            done = 1;
        if (!done) {
            link = &pending->next;
            continue;
        }
        *link = pending->next;
        free(pending->copy);
        free(pending);
    }
}

static void pause_briefly(void)
{
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 20000};
    nanosleep(&nap, NULL);
}

static kvio_status_t mpi_init(void *priv, const kvio_rte_params_t *params, int *size_p,
                              int *first_local_p, int *num_local_p, char *error_p,
                              size_t error_len)
{
    mpi_world_t *world = priv;
    int initialized = 0, size = 0, rank = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
            snprintf(error_p, error_len, "mpi runtime: MPI_Init failed");
            return KVIO_ERR_CONNECTION;
        }
        world->initialized_here = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size != params->num_ranks) {
        snprintf(error_p, error_len,
                 "mpirun started %d rank%s but the workload's ranks need %d "
                 "(mpirun -np %d)", size, size == 1 ? "" : "s", params->num_ranks,
                 params->num_ranks);
        return KVIO_ERR_CONFIG;
    }
    world->timeout_ns = params->timeout_ns > 0 ? params->timeout_ns : 30000000000LL;
    *size_p = size;
    *first_local_p = rank;
    *num_local_p = 1;
    return KVIO_OK;
}

static kvio_status_t mpi_flush(void *priv, int self, uint64_t deadline_ns)
{
    mpi_world_t *world = priv;
    (void)self;
    for (;;) {
        progress_pending(world);
        if (world->pending == NULL)
            return KVIO_OK;
        if (kvio_time_ns() >= deadline_ns)
            return KVIO_ERR_TIMEOUT;
        pause_briefly();
    }
}

static void mpi_fini(void *priv, bool failed)
{
    mpi_world_t *world = priv;
    /* Posted messages leave before MPI ends; the ones nobody takes are
     * cancelled so their copies can go. */
    if (!failed)
        mpi_flush(world, 0, kvio_time_ns() + (uint64_t)world->timeout_ns);
    while (world->pending != NULL) {
        pending_send_t *pending = world->pending;
        world->pending = pending->next;
        MPI_Cancel(&pending->request);
        MPI_Request_free(&pending->request);
        free(pending->copy);
        free(pending);
    }
    if (world->initialized_here && !failed)
        MPI_Finalize();
}

static kvio_status_t mpi_post(void *priv, int from, int to, int tag, const void *data,
                              size_t length, uint64_t deadline_ns)
{
    mpi_world_t *world = priv;
    (void)from;
    (void)deadline_ns;
    progress_pending(world);
    pending_send_t *pending = calloc(1, sizeof(*pending));
    void *copy = malloc(length + 1);
    if (pending == NULL || copy == NULL) {
        free(pending);
        free(copy);
        return KVIO_ERR_NOMEM;
    }
    memcpy(copy, data, length);
    if (MPI_Isend(copy, (int)length, MPI_BYTE, to, tag, MPI_COMM_WORLD, &pending->request) !=
        MPI_SUCCESS) {
        free(pending);
        free(copy);
        return KVIO_ERR_PEER;
    }
    pending->copy = copy;
    /* The list's order does not matter: MPI's non-overtaking rule keeps
     * this rank's messages to one peer and tag in order. */
    pending->next = world->pending;
    world->pending = pending;
    return KVIO_OK;
}

static kvio_status_t mpi_send(void *priv, int from, int to, int tag, const void *data,
                              size_t length, uint64_t deadline_ns)
{
    progress_pending(priv);
    MPI_Request request;
    if (MPI_Isend(data, (int)length, MPI_BYTE, to, tag, MPI_COMM_WORLD, &request) !=
        MPI_SUCCESS)
        return KVIO_ERR_PEER;
    for (;;) {
        int done = 0;
        if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return KVIO_ERR_PEER;
        if (done)
            return KVIO_OK;
        if (kvio_time_ns() >= deadline_ns) {
            MPI_Cancel(&request);
            MPI_Request_free(&request);
            return KVIO_ERR_TIMEOUT;
        }
        pause_briefly();
    }
}

static kvio_status_t mpi_recv(void *priv, int self, int from, int tag, uint64_t deadline_ns,
                              void **data_p, size_t *length_p)
{
    MPI_Status probe;
    progress_pending(priv);
    for (;;) {
        int found = 0;
        if (MPI_Iprobe(from, tag, MPI_COMM_WORLD, &found, &probe) != MPI_SUCCESS)
            return KVIO_ERR_PEER;
        if (found)
            break;
        if (kvio_time_ns() >= deadline_ns)
            return KVIO_ERR_TIMEOUT;
        pause_briefly();
    }
    int count = 0;
    MPI_Get_count(&probe, MPI_BYTE, &count);
    void *data = malloc((size_t)count + 1);
    if (data == NULL)
        return KVIO_ERR_NOMEM;
    /* The message is already here (probed), so this receive completes. */
    if (MPI_Recv(data, count, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS) {
        free(data);
        return KVIO_ERR_PEER;
    }
    *data_p = data;
    *length_p = (size_t)count;
    return KVIO_OK;
}

const kvio_rte_ops_t kvio_rte_mpi_ops = {
    .name = "mpi",
    .caps = KVIO_RTE_CAP_MULTI_NODE,
    .priv_size = sizeof(mpi_world_t),
    .init = mpi_init,
    .fini = mpi_fini,
    .send = mpi_send,
    .recv = mpi_recv,
    .post = mpi_post,
    .flush = mpi_flush,
};
