/* The mpi runtime: this process is one rank of MPI_COMM_WORLD (started by
 * mpirun). MPI is used for launch and small messages only; every call is
 * non-blocking and polled against a deadline so a dead peer cannot hang a
 * rank. On failure MPI_Finalize is skipped: the process exits non-zero and
 * mpirun ends the job's other ranks. */
#include "core/rte_int.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"

typedef struct mpi_world {
    bool initialized_here;
} mpi_world_t;

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
    *size_p = size;
    *first_local_p = rank;
    *num_local_p = 1;
    return KVIO_OK;
}

static void mpi_fini(void *priv, bool failed)
{
    mpi_world_t *world = priv;
    if (world->initialized_here && !failed)
        MPI_Finalize();
}

static kvio_status_t mpi_send(void *priv, int from, int to, int tag, const void *data,
                              size_t length, uint64_t deadline_ns)
{
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
};
