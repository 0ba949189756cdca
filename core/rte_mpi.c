/* The mpi runtime: this process is one rank of MPI_COMM_WORLD (started by
 * mpirun). MPI is used for launch and small messages only; every call is
 * non-blocking and polled, so a wait can end when its peer dies. Posted
 * messages are pending MPI_Isends on a copy, progressed by every later call
 * of this rank.
 *
 * Liveness: a heartbeat thread sends every other rank this rank's state
 * (running, done, failed) every interval (an eighth of the timeout, 5 ms to
 * 250 ms) and takes theirs. A peer is silent when this thread has listened
 * for longer than the timeout without hearing from it; a starved listener
 * therefore never convicts a peer. Heartbeats travel on MPI_COMM_WORLD
 * behind the data: ob1 matches one sender's messages on one communicator in
 * the order they were sent, so once a peer's "done" has been taken every
 * message it sent before is here. Every MPI call holds world->lock
 * (MPI_THREAD_SERIALIZED). On failure MPI_Finalize is skipped: the process
 * exits non-zero and mpirun ends the job's other ranks. */
#include "core/rte_int.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/log.h"

/* A posted message still on its way; its copy lives until MPI is done. */
typedef struct pending_send {
    struct pending_send *next;
    MPI_Request request;
    void *copy;
} pending_send_t;

/* This rank's heartbeat to one peer, in flight or done. */
typedef struct heartbeat_out {
    MPI_Request request;
    bool active;
    int32_t state;
} heartbeat_out_t;

typedef struct mpi_world {
    bool initialized_here;
    int size, rank;
    int64_t timeout_ns;
    pending_send_t *pending; /* posted, not yet complete (this rank's thread only) */
    pthread_mutex_t lock;    /* held for every MPI call */
    /* The heartbeat thread and what it knows (atomics: read by the rank). */
    pthread_t heartbeat;
    bool heartbeat_started;
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    bool quit;                    /* under wake_lock */
    bool announce;                /* under wake_lock: send the state now */
    _Atomic int own_state;        /* kvio_peer_state_t */
    _Atomic int *states;          /* per rank, as last heard */
    _Atomic int64_t *heard_ns;    /* per rank: when its last heartbeat came */
    _Atomic int64_t listened_ns;  /* when the thread last looked */
    heartbeat_out_t *out;         /* the thread's */
    int64_t interval_ns;
} mpi_world_t;

static void pause_briefly(void)
{
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 20000};
    nanosleep(&nap, NULL);
}

/* Frees posted messages that have completed; an error completes one too
 * (the receiver's side reports what went wrong). */
static void progress_pending(mpi_world_t *world)
{
    pending_send_t **link = &world->pending;
    while (*link != NULL) {
        pending_send_t *pending = *link;
        int done = 0;
        pthread_mutex_lock(&world->lock);
        if (MPI_Test(&pending->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            done = 1;
        pthread_mutex_unlock(&world->lock);
        if (!done) {
            link = &pending->next;
            continue;
        }
        *link = pending->next;
        free(pending->copy);
        free(pending);
    }
}

/* ---------- heartbeats ---------- */

/* Takes every heartbeat that has arrived. Caller holds world->lock. */
static void take_heartbeats(mpi_world_t *world)
{
    for (;;) {
        int found = 0;
        MPI_Status probe;
        if (MPI_Iprobe(MPI_ANY_SOURCE, KVIO_RTE_TAG_HEARTBEAT, MPI_COMM_WORLD, &found, &probe) !=
                MPI_SUCCESS ||
            !found)
            break;
        int32_t state = KVIO_PEER_RUNNING;
        if (MPI_Recv(&state, 1, MPI_INT32_T, probe.MPI_SOURCE, KVIO_RTE_TAG_HEARTBEAT,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        int source = probe.MPI_SOURCE;
        if (source < 0 || source >= world->size)
            continue;
        atomic_store(&world->heard_ns[source], (int64_t)kvio_time_ns());
        /* Failed and done are final: a late running heartbeat changes nothing. */
        if (atomic_load(&world->states[source]) == KVIO_PEER_RUNNING)
            atomic_store(&world->states[source], state);
    }
    atomic_store(&world->listened_ns, (int64_t)kvio_time_ns());
}

/* Sends this rank's state to every peer whose last heartbeat has left.
 * Caller holds world->lock. */
static void send_heartbeats(mpi_world_t *world)
{
    int32_t state = atomic_load(&world->own_state);
    for (int rank = 0; rank < world->size; rank++) {
        heartbeat_out_t *out = &world->out[rank];
        if (rank == world->rank)
            continue;
        if (out->active) {
            int done = 0;
            if (MPI_Test(&out->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                done = 1;
            if (!done)
                continue; /* the peer is slow to take them: never pile up */
            out->active = false;
        }
        out->state = state;
        if (MPI_Isend(&out->state, 1, MPI_INT32_T, rank, KVIO_RTE_TAG_HEARTBEAT, MPI_COMM_WORLD,
                      &out->request) == MPI_SUCCESS)
            out->active = true;
    }
}

static void *heartbeat_main(void *arg)
{
    mpi_world_t *world = arg;
    pthread_mutex_lock(&world->wake_lock);
    while (!world->quit) {
        world->announce = false;
        pthread_mutex_unlock(&world->wake_lock);
        pthread_mutex_lock(&world->lock);
        take_heartbeats(world);
        send_heartbeats(world);
        pthread_mutex_unlock(&world->lock);
        pthread_mutex_lock(&world->wake_lock);
        if (world->quit || world->announce)
            continue;
        uint64_t wake = kvio_time_ns() + (uint64_t)world->interval_ns;
        struct timespec until = {.tv_sec = (time_t)(wake / 1000000000ull),
                                 .tv_nsec = (long)(wake % 1000000000ull)};
        pthread_cond_timedwait(&world->wake, &world->wake_lock, &until);
    }
    pthread_mutex_unlock(&world->wake_lock);
    return NULL;
}

static void stop_heartbeats(mpi_world_t *world)
{
    if (!world->heartbeat_started)
        return;
    pthread_mutex_lock(&world->wake_lock);
    world->quit = true;
    pthread_cond_signal(&world->wake);
    pthread_mutex_unlock(&world->wake_lock);
    pthread_join(world->heartbeat, NULL);
    world->heartbeat_started = false;
    /* A heartbeat still in flight completes on its own. */
    for (int rank = 0; rank < world->size; rank++)
        if (world->out[rank].active) {
            MPI_Request_free(&world->out[rank].request);
            world->out[rank].active = false;
        }
}

static kvio_status_t start_heartbeats(mpi_world_t *world, char *error_p, size_t error_len)
{
    world->states = calloc((size_t)world->size, sizeof(*world->states));
    world->heard_ns = calloc((size_t)world->size, sizeof(*world->heard_ns));
    world->out = calloc((size_t)world->size, sizeof(*world->out));
    if (world->states == NULL || world->heard_ns == NULL || world->out == NULL) {
        snprintf(error_p, error_len, "mpi runtime: out of memory");
        return KVIO_ERR_NOMEM;
    }
    int64_t now = (int64_t)kvio_time_ns();
    for (int rank = 0; rank < world->size; rank++) {
        atomic_init(&world->states[rank], KVIO_PEER_RUNNING);
        atomic_init(&world->heard_ns[rank], now);
    }
    atomic_init(&world->listened_ns, now);
    atomic_init(&world->own_state, KVIO_PEER_RUNNING);
    int64_t interval = world->timeout_ns / 8;
    world->interval_ns = interval < 5000000 ? 5000000 : interval > 250000000 ? 250000000
                                                                              : interval;
    pthread_mutex_init(&world->wake_lock, NULL);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&world->wake, &attributes);
    pthread_condattr_destroy(&attributes);
    if (pthread_create(&world->heartbeat, NULL, heartbeat_main, world) != 0) {
        snprintf(error_p, error_len, "mpi runtime: cannot start the heartbeat thread");
        return KVIO_ERR_NOMEM;
    }
    world->heartbeat_started = true;
    return KVIO_OK;
}

static void mpi_rank_done(void *priv, int rank, kvio_status_t status)
{
    mpi_world_t *world = priv;
    (void)rank;
    atomic_store(&world->own_state, status == KVIO_OK ? KVIO_PEER_DONE : KVIO_PEER_FAILED);
    /* Tell the peers now, not at the next interval. */
    pthread_mutex_lock(&world->wake_lock);
    world->announce = true;
    pthread_cond_signal(&world->wake);
    pthread_mutex_unlock(&world->wake_lock);
}

static kvio_peer_state_t mpi_peer_state(void *priv, int rank, int64_t *silent_ns_p)
{
    mpi_world_t *world = priv;
    *silent_ns_p = 0;
    if (world->states == NULL)
        return KVIO_PEER_RUNNING;
    kvio_peer_state_t state = (kvio_peer_state_t)atomic_load(&world->states[rank]);
    if (state != KVIO_PEER_RUNNING)
        return state;
    int64_t silent = atomic_load(&world->listened_ns) - atomic_load(&world->heard_ns[rank]);
    if (silent > world->timeout_ns) {
        *silent_ns_p = silent;
        return KVIO_PEER_SILENT;
    }
    return KVIO_PEER_RUNNING;
}

/* ---------- the ops ---------- */

static kvio_status_t mpi_init(void *priv, const kvio_rte_params_t *params, int *size_p,
                              int *first_local_p, int *num_local_p, char *error_p,
                              size_t error_len)
{
    mpi_world_t *world = priv;
    int initialized = 0, size = 0, rank = 0, provided = 0;
    pthread_mutex_init(&world->lock, NULL);
    MPI_Initialized(&initialized);
    if (!initialized) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            snprintf(error_p, error_len, "mpi runtime: MPI_Init_thread failed");
            return KVIO_ERR_CONNECTION;
        }
        world->initialized_here = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        snprintf(error_p, error_len, "mpi runtime: this MPI gives no thread support "
                 "(MPI_THREAD_SERIALIZED), which kvio's heartbeats need");
        return KVIO_ERR_UNSUPPORTED;
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
    world->size = size;
    world->rank = rank;
    world->timeout_ns = params->timeout_ns > 0 ? params->timeout_ns : 30000000000LL;
    kvio_status_t status = start_heartbeats(world, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    *size_p = size;
    *first_local_p = rank;
    *num_local_p = 1;
    return KVIO_OK;
}

static kvio_status_t mpi_flush(void *priv, int self, kvio_rte_waiter_t *waiter)
{
    mpi_world_t *world = priv;
    (void)self;
    for (;;) {
        progress_pending(world);
        if (world->pending == NULL)
            return KVIO_OK;
        if (waiter == NULL || !kvio_rte_waiter_go_on(waiter))
            return KVIO_ERR_TIMEOUT;
        pause_briefly();
    }
}

static void mpi_fini(void *priv, bool failed)
{
    mpi_world_t *world = priv;
    /* Posted messages leave before MPI ends (while the peers live); the
     * ones nobody takes are cancelled so their copies can go. */
    bool peers_alive = !failed;
    while (world->pending != NULL && peers_alive) {
        progress_pending(world);
        for (int rank = 0; rank < world->size && peers_alive; rank++) {
            int64_t silent = 0;
            kvio_peer_state_t state = rank == world->rank ? KVIO_PEER_RUNNING
                                                          : mpi_peer_state(world, rank, &silent);
            peers_alive = state != KVIO_PEER_FAILED && state != KVIO_PEER_SILENT;
        }
        if (world->pending != NULL)
            pause_briefly();
    }
    stop_heartbeats(world);
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
    pthread_mutex_destroy(&world->lock);
    if (world->states != NULL) {
        pthread_mutex_destroy(&world->wake_lock);
        pthread_cond_destroy(&world->wake);
    }
    free(world->states);
    free(world->heard_ns);
    free(world->out);
}

static kvio_status_t mpi_post(void *priv, int from, int to, int tag, const void *data,
                              size_t length)
{
    mpi_world_t *world = priv;
    (void)from;
    progress_pending(world);
    pending_send_t *pending = calloc(1, sizeof(*pending));
    void *copy = malloc(length + 1);
    if (pending == NULL || copy == NULL) {
        free(pending);
        free(copy);
        return KVIO_ERR_NOMEM;
    }
    memcpy(copy, data, length);
    pthread_mutex_lock(&world->lock);
    int result = MPI_Isend(copy, (int)length, MPI_BYTE, to, tag, MPI_COMM_WORLD,
                           &pending->request);
    pthread_mutex_unlock(&world->lock);
    if (result != MPI_SUCCESS) {
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
                              size_t length, kvio_rte_waiter_t *waiter)
{
    mpi_world_t *world = priv;
    (void)from;
    progress_pending(world);
    MPI_Request request;
    pthread_mutex_lock(&world->lock);
    int result = MPI_Isend(data, (int)length, MPI_BYTE, to, tag, MPI_COMM_WORLD, &request);
    pthread_mutex_unlock(&world->lock);
    if (result != MPI_SUCCESS)
        return KVIO_ERR_PEER;
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&world->lock);
        result = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        pthread_mutex_unlock(&world->lock);
        if (result != MPI_SUCCESS)
            return KVIO_ERR_PEER;
        if (done)
            return KVIO_OK;
        if (waiter == NULL || !kvio_rte_waiter_go_on(waiter)) {
            pthread_mutex_lock(&world->lock);
            MPI_Cancel(&request);
            MPI_Request_free(&request);
            pthread_mutex_unlock(&world->lock);
            return KVIO_ERR_TIMEOUT;
        }
        pause_briefly();
    }
}

/* One look for a message from `from` with tag: true with *probe_p set. */
static bool look(mpi_world_t *world, int from, int tag, MPI_Status *probe_p, int *result_p)
{
    int found = 0;
    pthread_mutex_lock(&world->lock);
    *result_p = MPI_Iprobe(from, tag, MPI_COMM_WORLD, &found, probe_p);
    pthread_mutex_unlock(&world->lock);
    return *result_p == MPI_SUCCESS && found;
}

static kvio_status_t mpi_recv(void *priv, int self, int from, int tag,
                              kvio_rte_waiter_t *waiter, void **data_p, size_t *length_p)
{
    mpi_world_t *world = priv;
    (void)self;
    MPI_Status probe;
    int result = MPI_SUCCESS;
    progress_pending(world);
    while (!look(world, from, tag, &probe, &result)) {
        if (result != MPI_SUCCESS)
            return KVIO_ERR_PEER;
        if (waiter == NULL || !kvio_rte_waiter_go_on(waiter)) {
            /* It may have come just before the verdict: one more look. */
            if (look(world, from, tag, &probe, &result))
                break;
            return KVIO_ERR_TIMEOUT;
        }
        pause_briefly();
    }
    int count = 0;
    MPI_Get_count(&probe, MPI_BYTE, &count);
    void *data = malloc((size_t)count + 1);
    if (data == NULL)
        return KVIO_ERR_NOMEM;
    /* The message is already here (probed), so this receive completes. */
    pthread_mutex_lock(&world->lock);
    result = MPI_Recv(data, count, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    pthread_mutex_unlock(&world->lock);
    if (result != MPI_SUCCESS) {
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
    .rank_done = mpi_rank_done,
    .peer_state = mpi_peer_state,
};
