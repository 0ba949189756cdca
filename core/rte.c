/* Runtime framework: the registry of runtimes, the world (which ranks live in
 * this process and their threads), the clock-offset ping-pong, and the
 * collectives (barrier, allgather, gather, reduce) built as a star through
 * rank 0 on the ops' bounded point-to-point messages. */
#include "core/rte_int.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/wire.h"

/* Tags of the framework's own messages (below KVIO_RTE_TAG_USER). */
enum {
    TAG_PING = 1,
    TAG_PONG,
    TAG_OFFSET,
    TAG_BARRIER_IN,
    TAG_BARRIER_OUT,
    TAG_GATHER,
    TAG_BROADCAST,
    TAG_REDUCE,
    TAG_RELEASE,
    TAG_ERROR,
};

/* A failed rank's own error, as rank 0 in another process gets it (the
 * message: the status, then the text; kvio/wire.h). */
typedef struct rank_error {
    kvio_status_t status;
    char text[KVIO_ERROR_MAX];
} rank_error_t;

/* How long rank 0 looks for the message of a rank it knows failed (sent
 * before the failure was announced, so it is normally there already). */
#define ERROR_GRACE_NS 1000000000LL

#define CLOCK_SYNC_ROUNDS 16

struct kvio_rte {
    kvio_rte_world_t *world;
    int index;
    int64_t offset_ns;
    int64_t uncertainty_ns;
    kvio_status_t status;
    char error[KVIO_ERROR_MAX];
    char verdict[320]; /* the last failed wait's, on its peer */
    bool peer_silent;  /* a wait of this rank ended on a silent peer: a cause the silent
                          rank itself cannot report */
    int given_up;      /* rank 0: the rank a sparing gather gave up on (-1: none); later
                          collectives leave it out */
    kvio_rte_main_t body;
    void *arg;
};

struct kvio_rte_world {
    const kvio_rte_ops_t *ops;
    void *priv;
    int size;
    int first_local;
    int num_local;
    int64_t timeout_ns;
    volatile sig_atomic_t *stop; /* set asynchronously (may be NULL); only read */
};

struct kvio_rte_waiter {
    kvio_rte_world_t *world;
    int self;
    int peer;              /* the rank waited for; -1: every other rank */
    bool owes;             /* a peer that is done can no longer end the wait */
    bool until_silent;     /* only the peer's silence ends it (its rank failed or ended, its
                              process still has work: rank 0 writing the results) */
    uint64_t stop_seen_ns; /* when this wait first saw the run stopped */
    kvio_status_t verdict; /* why the wait should not go on */
    bool silent;           /* the verdict is the peer's silence */
    char reason[320];
};

static kvio_rte_waiter_t waiter_for(kvio_rte_world_t *world, int self, int peer, bool owes)
{
    return (kvio_rte_waiter_t){.world = world, .self = self, .peer = peer, .owes = owes,
                               .verdict = KVIO_OK};
}

/* The verdict on one peer for a waiter, as text (KVIO_OK: alive). */
static kvio_status_t judge(kvio_rte_world_t *world, int rank, bool owes, bool until_silent,
                           bool *silent_p, char *reason_p, size_t reason_len)
{
    int64_t silent_ns = 0;
    kvio_peer_state_t state = world->ops->peer_state != NULL
                                  ? world->ops->peer_state(world->priv, rank, &silent_ns)
                                  : KVIO_PEER_RUNNING;
    if (until_silent && (state == KVIO_PEER_FAILED || state == KVIO_PEER_DONE))
        state = KVIO_PEER_RUNNING; /* its heartbeats go on: so does the wait */
    switch (state) {
    case KVIO_PEER_FAILED:
        snprintf(reason_p, reason_len, "rank %d failed", rank);
        return KVIO_ERR_PEER;
    case KVIO_PEER_SILENT:
        if (silent_p != NULL)
            *silent_p = true;
        snprintf(reason_p, reason_len,
                 "rank %d has been silent for %.1f s (no heartbeat within ranks.timeout, "
                 "%.1f s)", rank, (double)silent_ns / 1e9, (double)world->timeout_ns / 1e9);
        return KVIO_ERR_PEER;
    case KVIO_PEER_DONE:
        if (!owes)
            return KVIO_OK;
        snprintf(reason_p, reason_len, "rank %d ended without sending it", rank);
        return KVIO_ERR_PEER;
    default:
        return KVIO_OK;
    }
}

bool kvio_rte_waiter_go_on(kvio_rte_waiter_t *waiter)
{
    kvio_rte_world_t *world = waiter->world;
    if (world->stop != NULL && *world->stop) {
        uint64_t now = kvio_time_ns();
        if (waiter->stop_seen_ns == 0)
            waiter->stop_seen_ns = now;
        else if (now - waiter->stop_seen_ns > (uint64_t)world->timeout_ns) {
            waiter->verdict = KVIO_ERR_INTERRUPTED;
            snprintf(waiter->reason, sizeof(waiter->reason),
                     "the run was stopped and the wait did not end within ranks.timeout "
                     "(%.1f s)", (double)world->timeout_ns / 1e9);
            return false;
        }
    }
    int first = waiter->peer >= 0 ? waiter->peer : 0;
    int last = waiter->peer >= 0 ? waiter->peer : world->size - 1;
    for (int rank = first; rank <= last; rank++) {
        if (rank == waiter->self)
            continue;
        waiter->verdict = judge(world, rank, waiter->owes && waiter->peer >= 0,
                                waiter->until_silent, &waiter->silent, waiter->reason,
                                sizeof(waiter->reason));
        if (waiter->verdict != KVIO_OK)
            return false;
    }
    return true;
}

#ifndef KVIO_HAVE_MPI
static kvio_status_t mpi_stub_init(void *priv, const kvio_rte_params_t *params, int *size_p,
                                   int *first_local_p, int *num_local_p, char *error_p,
                                   size_t error_len)
{
    snprintf(error_p, error_len, "mpi runtime not built (configure with KVIO_WITH_MPI=ON)");
    return KVIO_ERR_UNSUPPORTED;
}

const kvio_rte_ops_t kvio_rte_mpi_ops = {
    .name = "mpi", .caps = KVIO_RTE_CAP_MULTI_NODE, .init = mpi_stub_init,
};
#endif

static const kvio_rte_ops_t *const rte_registry[] = {&kvio_rte_local_ops, &kvio_rte_mpi_ops,
                                                     NULL};

const kvio_rte_ops_t *kvio_rte_ops_find(const char *name)
{
    for (size_t i = 0; rte_registry[i] != NULL; i++)
        if (strcmp(rte_registry[i]->name, name) == 0)
            return rte_registry[i];
    return NULL;
}

const char *kvio_rte_detect(void)
{
    if (getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL)
        return "mpi";
    return "local";
}

int kvio_rte_launched_size(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *value = getenv(names[i]);
        if (value != NULL && atoi(value) > 0)
            return atoi(value);
    }
    return 0;
}

kvio_status_t kvio_rte_world_create(const kvio_rte_params_t *params,
                                    kvio_rte_world_t **world_p, char *error_p,
                                    size_t error_len)
{
    const char *kind = params->kind == NULL || strcmp(params->kind, "auto") == 0
                           ? kvio_rte_detect()
                           : params->kind;
    const kvio_rte_ops_t *ops = kvio_rte_ops_find(kind);
    if (ops == NULL) {
        snprintf(error_p, error_len, "unknown runtime '%s' (auto, local or mpi)", kind);
        return KVIO_ERR_CONFIG;
    }
    if (params->num_ranks < 1) {
        snprintf(error_p, error_len, "a run needs at least one rank");
        return KVIO_ERR_CONFIG;
    }
    kvio_status_t status = KVIO_ERR_NOMEM;
    kvio_rte_world_t *world = calloc(1, sizeof(*world));
    if (world == NULL)
        goto fail;
    world->ops = ops;
    world->timeout_ns = params->timeout_ns > 0 ? params->timeout_ns : 30000000000LL;
    if (ops->priv_size > 0 && (world->priv = calloc(1, ops->priv_size)) == NULL)
        goto fail;
    status = ops->init(world->priv, params, &world->size, &world->first_local,
                       &world->num_local, error_p, error_len);
    if (status != KVIO_OK)
        goto fail;
    *world_p = world;
    return KVIO_OK;
fail:
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "runtime: out of memory");
    if (world != NULL)
        free(world->priv);
    free(world);
    return status;
}

/* Ranks in other processes end only once rank 0's process has destroyed its
 * world, so after it wrote the results: under mpirun the first process to
 * exit ends the job (Open MPI's mpirun, tearing a job down, cuts its grace
 * before SIGKILL short as soon as one rank exits). Rank 0 tells every rank it
 * does not host; the others wait for that, bounded by the timeout. */
static void release_ranks(kvio_rte_world_t *world)
{
    if (world->num_local == world->size)
        return; /* every rank is here (local threads) */
    if (world->first_local == 0) {
        char byte = 0;
        for (int rank = world->num_local; rank < world->size; rank++) {
            kvio_rte_waiter_t waiter = waiter_for(world, 0, rank, false);
            if (world->ops->send(world->priv, 0, rank, TAG_RELEASE, &byte, 1, &waiter) !=
                KVIO_OK)
                kvio_debug("runtime: rank %d did not take the release", rank);
        }
        return;
    }
    void *data = NULL;
    size_t length = 0;
    /* Rank 0's rank may have failed (a peer lost: the client) while its
     * process writes summary.json: only its silence ends this wait, or the
     * first process to exit would end the job before the results exist. */
    kvio_rte_waiter_t waiter = waiter_for(world, world->first_local, 0, true);
    waiter.until_silent = true;
    kvio_status_t status = world->ops->recv(world->priv, world->first_local, 0, TAG_RELEASE,
                                            &waiter, &data, &length);
    if (status != KVIO_OK)
        kvio_debug("runtime: rank %d: no release from rank 0: %s", world->first_local,
                   waiter.reason[0] ? waiter.reason : kvio_strerror(status));
    free(data);
}

void kvio_rte_world_destroy(kvio_rte_world_t *world, bool failed)
{
    if (world == NULL)
        return;
    release_ranks(world);
    if (world->ops->fini != NULL)
        world->ops->fini(world->priv, failed);
    free(world->priv);
    free(world);
}

const char *kvio_rte_world_kind(const kvio_rte_world_t *world) { return world->ops->name; }
bool kvio_rte_world_is_root(const kvio_rte_world_t *world) { return world->first_local == 0; }

bool kvio_rte_shared_memory(const kvio_rte_t *rte)
{
    return (rte->world->ops->caps & KVIO_RTE_CAP_SHARED_MEMORY) != 0;
}

int kvio_rte_size(const kvio_rte_t *rte) { return rte->world->size; }
int kvio_rte_index(const kvio_rte_t *rte) { return rte->index; }
kvio_rte_world_t *kvio_rte_world(kvio_rte_t *rte) { return rte->world; }
int64_t kvio_rte_timeout_ns(const kvio_rte_t *rte) { return rte->world->timeout_ns; }

void kvio_rte_set_error(kvio_rte_t *rte, const char *fmt, ...)
{
    if (rte->error[0] != '\0')
        return; /* the first error decided the outcome; keep it */
    va_list args;
    va_start(args, fmt);
    vsnprintf(rte->error, sizeof(rte->error), fmt, args);
    va_end(args);
}

const char *kvio_rte_verdict(const kvio_rte_t *rte) { return rte->verdict; }

void kvio_rte_world_set_stop(kvio_rte_world_t *world, volatile sig_atomic_t *stop)
{
    world->stop = stop;
}

kvio_peer_state_t kvio_rte_peer_state(kvio_rte_t *rte, int rank, int64_t *silent_ns_p)
{
    const kvio_rte_ops_t *ops = rte->world->ops;
    int64_t silent_ns = 0;
    kvio_peer_state_t state = KVIO_PEER_RUNNING;
    if (rank >= 0 && rank < rte->world->size && rank != rte->index && ops->peer_state != NULL)
        state = ops->peer_state(rte->world->priv, rank, &silent_ns);
    if (silent_ns_p != NULL)
        *silent_ns_p = silent_ns;
    return state;
}

bool kvio_rte_peer_failed(kvio_rte_t *rte, int rank)
{
    kvio_peer_state_t state = kvio_rte_peer_state(rte, rank, NULL);
    return state == KVIO_PEER_FAILED || state == KVIO_PEER_SILENT;
}

kvio_status_t kvio_rte_peer_check(kvio_rte_t *rte, int rank, bool owes, const char *waiting_for,
                                  char *reason_p, size_t reason_len)
{
    if (rank < 0 || rank >= rte->world->size || rank == rte->index)
        return KVIO_OK;
    char verdict[256];
    bool silent = false;
    kvio_status_t status = judge(rte->world, rank, owes, false, &silent, verdict,
                                 sizeof(verdict));
    if (status != KVIO_OK)
        snprintf(reason_p, reason_len, "%s while rank %d waited for %s", verdict, rte->index,
                 waiting_for);
    rte->peer_silent = rte->peer_silent || silent;
    return status;
}

/* Says why a wait of this rank on peer ended badly (the op's own status
 * when the waiter had nothing against the peer). */
static kvio_status_t waited(kvio_rte_t *rte, kvio_rte_waiter_t *waiter, kvio_status_t status,
                            const char *doing)
{
    if (status == KVIO_OK)
        return KVIO_OK;
    if (status == KVIO_ERR_PEER && waiter->verdict == KVIO_OK && waiter->peer >= 0)
        /* The op saw it first (local: the peer's thread has ended). */
        waiter->verdict = judge(rte->world, waiter->peer, true, false, &waiter->silent,
                                waiter->reason, sizeof(waiter->reason));
    if (waiter->verdict != KVIO_OK) {
        status = waiter->verdict;
        rte->peer_silent = rte->peer_silent || waiter->silent;
        snprintf(rte->verdict, sizeof(rte->verdict), "%s", waiter->reason);
        kvio_rte_set_error(rte, "rank %d: %s: %s", rte->index, doing, waiter->reason);
    } else {
        kvio_rte_set_error(rte, "rank %d: %s: %s", rte->index, doing, kvio_strerror(status));
    }
    return status;
}

static kvio_status_t send_one(kvio_rte_t *rte, int to, int tag, const void *data, size_t length)
{
    kvio_rte_waiter_t waiter = waiter_for(rte->world, rte->index, to, false);
    kvio_status_t status = rte->world->ops->send(rte->world->priv, rte->index, to, tag, data,
                                                 length, &waiter);
    char doing[64];
    snprintf(doing, sizeof(doing), "sending to rank %d", to);
    return waited(rte, &waiter, status, doing);
}

/* A message longer than KVIO_RTE_MAX_MESSAGE (a rank's end-of-run report
 * of many requests) goes as a header, then its bytes in pieces of at most
 * that size on the same tag (in order: messages between two ranks on one
 * tag do not overtake each other). The header is 32 bytes that no short
 * message is taken for: two magic words, the length, and a check of them. */
#define LONG_MAGIC_0 0x6b76696f4c4f4e47ull /* "kvioLONG" */
#define LONG_MAGIC_1 0x9d3b5e7f1a2c4d6bull
#define LONG_HEADER_BYTES 32

static uint64_t long_check(uint64_t total)
{
    return (total ^ LONG_MAGIC_0) * 0x9E3779B97F4A7C15ull + LONG_MAGIC_1;
}

static kvio_status_t raw_send(kvio_rte_t *rte, int to, int tag, const void *data, size_t length)
{
    if (to < 0 || to >= rte->world->size)
        return KVIO_ERR_INVALID;
    if (length <= KVIO_RTE_MAX_MESSAGE)
        return send_one(rte, to, tag, data, length);
    uint64_t header[4] = {LONG_MAGIC_0, LONG_MAGIC_1, length, long_check(length)};
    kvio_status_t status = send_one(rte, to, tag, header, sizeof(header));
    for (size_t at = 0; status == KVIO_OK && at < length; at += KVIO_RTE_MAX_MESSAGE) {
        size_t piece = length - at < KVIO_RTE_MAX_MESSAGE ? length - at : KVIO_RTE_MAX_MESSAGE;
        status = send_one(rte, to, tag, (const char *)data + at, piece);
    }
    return status;
}

static kvio_status_t recv_one(kvio_rte_t *rte, int from, int tag, void **data_p,
                              size_t *length_p)
{
    kvio_rte_waiter_t waiter = waiter_for(rte->world, rte->index, from, true);
    kvio_status_t status = rte->world->ops->recv(rte->world->priv, rte->index, from, tag,
                                                 &waiter, data_p, length_p);
    char doing[64];
    snprintf(doing, sizeof(doing), "waiting for a message from rank %d", from);
    return waited(rte, &waiter, status, doing);
}

/* A message just received that is a long message's header: its pieces are
 * received and joined into *data_p. */
static kvio_status_t finish_long(kvio_rte_t *rte, int from, int tag, void **data_p,
                                 size_t *length_p)
{
    uint64_t header[4];
    if (*length_p != LONG_HEADER_BYTES)
        return KVIO_OK;
    memcpy(header, *data_p, sizeof(header));
    if (header[0] != LONG_MAGIC_0 || header[1] != LONG_MAGIC_1 ||
        header[3] != long_check(header[2]))
        return KVIO_OK;
    free(*data_p);
    *data_p = NULL;
    *length_p = 0;
    uint64_t total = header[2];
    char *joined = total < SIZE_MAX ? malloc((size_t)total + 1) : NULL;
    if (joined == NULL) {
        kvio_rte_set_error(rte, "rank %d: no memory for a message of %llu bytes from rank %d",
                           rte->index, (unsigned long long)total, from);
        return KVIO_ERR_NOMEM;
    }
    kvio_status_t status = KVIO_OK;
    for (uint64_t at = 0; status == KVIO_OK && at < total;) {
        void *piece = NULL;
        size_t got = 0;
        status = recv_one(rte, from, tag, &piece, &got);
        if (status == KVIO_OK && (got == 0 || got > total - at)) {
            kvio_rte_set_error(rte, "rank %d: a piece of %zu bytes of a %llu-byte message from "
                               "rank %d does not fit it", rte->index, got,
                               (unsigned long long)total, from);
            status = KVIO_ERR_INTERNAL;
        }
        if (status == KVIO_OK) {
            memcpy(joined + at, piece, got);
            at += got;
        }
        free(piece);
    }
    if (status != KVIO_OK) {
        free(joined);
        return status;
    }
    *data_p = joined;
    *length_p = (size_t)total;
    return KVIO_OK;
}

static kvio_status_t raw_recv(kvio_rte_t *rte, int from, int tag, void **data_p,
                              size_t *length_p)
{
    if (from < 0 || from >= rte->world->size)
        return KVIO_ERR_INVALID;
    kvio_status_t status = recv_one(rte, from, tag, data_p, length_p);
    if (status == KVIO_OK)
        status = finish_long(rte, from, tag, data_p, length_p);
    return status;
}

/* Receives a message that must have exactly length bytes into buffer. */
static kvio_status_t recv_exact(kvio_rte_t *rte, int from, int tag, void *buffer, size_t length)
{
    void *data = NULL;
    size_t got = 0;
    kvio_status_t status = raw_recv(rte, from, tag, &data, &got);
    if (status != KVIO_OK)
        return status;
    if (got != length) {
        kvio_rte_set_error(rte, "rank %d: message of %zu bytes from rank %d, expected %zu",
                           rte->index, got, from, length);
        free(data);
        return KVIO_ERR_INTERNAL;
    }
    memcpy(buffer, data, length);
    free(data);
    return KVIO_OK;
}

kvio_status_t kvio_rte_send(kvio_rte_t *rte, int to, int tag, const void *data, size_t length)
{
    if (tag < KVIO_RTE_TAG_USER)
        return KVIO_ERR_INVALID;
    return raw_send(rte, to, tag, data, length);
}

kvio_status_t kvio_rte_recv(kvio_rte_t *rte, int from, int tag, void **data_p, size_t *length_p)
{
    if (tag < KVIO_RTE_TAG_USER)
        return KVIO_ERR_INVALID;
    return raw_recv(rte, from, tag, data_p, length_p);
}

kvio_status_t kvio_rte_post(kvio_rte_t *rte, int to, int tag, const void *data, size_t length)
{
    const kvio_rte_ops_t *ops = rte->world->ops;
    if (tag < KVIO_RTE_TAG_USER || to < 0 || to >= rte->world->size)
        return KVIO_ERR_INVALID;
    if (ops->post == NULL || length > KVIO_RTE_MAX_MESSAGE)
        return raw_send(rte, to, tag, data, length); /* a long one goes in pieces, waited for */
    kvio_status_t status = ops->post(rte->world->priv, rte->index, to, tag, data, length);
    if (status != KVIO_OK)
        kvio_rte_set_error(rte, "rank %d: posting to rank %d: %s", rte->index, to,
                           kvio_strerror(status));
    return status;
}

kvio_status_t kvio_rte_flush(kvio_rte_t *rte)
{
    const kvio_rte_ops_t *ops = rte->world->ops;
    if (ops->flush == NULL)
        return KVIO_OK;
    kvio_rte_waiter_t waiter = waiter_for(rte->world, rte->index, -1, false);
    kvio_status_t status = ops->flush(rte->world->priv, rte->index, &waiter);
    return waited(rte, &waiter, status, "waiting for posted messages to leave");
}

kvio_status_t kvio_rte_try_recv(kvio_rte_t *rte, int from, int tag, void **data_p,
                                size_t *length_p)
{
    if (tag < KVIO_RTE_TAG_USER || from < 0 || from >= rte->world->size)
        return KVIO_ERR_INVALID;
    /* No waiter: one look at what has arrived. */
    kvio_status_t status = rte->world->ops->recv(rte->world->priv, rte->index, from, tag, NULL,
                                                 data_p, length_p);
    if (status == KVIO_OK)
        return finish_long(rte, from, tag, data_p, length_p);
    if (status != KVIO_ERR_TIMEOUT)
        return status;
    if (!kvio_rte_peer_failed(rte, from))
        return KVIO_INPROGRESS;
    /* It may have sent this just before it failed: one more look. */
    status = rte->world->ops->recv(rte->world->priv, rte->index, from, tag, NULL, data_p,
                                   length_p);
    if (status == KVIO_OK)
        return finish_long(rte, from, tag, data_p, length_p);
    return status == KVIO_ERR_TIMEOUT ? KVIO_ERR_PEER : status;
}

/* Every rank arrives at rank 0, which then releases them all with release
 * (length bytes, the same to each rank); release is written on rank 0 by
 * fill (called once every rank has arrived) and received elsewhere. */
static kvio_status_t barrier_with(kvio_rte_t *rte, void *release, size_t length,
                                  void (*fill)(kvio_rte_t *rte, void *release))
{
    char token = 0;
    kvio_status_t status = KVIO_OK;
    int size = rte->world->size;
    if (rte->index == 0) {
        for (int rank = 1; rank < size && status == KVIO_OK; rank++)
            if (rank != rte->given_up)
                status = recv_exact(rte, rank, TAG_BARRIER_IN, &token, 1);
        if (status == KVIO_OK && fill != NULL)
            fill(rte, release);
        for (int rank = 1; rank < size && status == KVIO_OK; rank++)
            if (rank != rte->given_up)
                status = raw_send(rte, rank, TAG_BARRIER_OUT, release, length);
        return status;
    }
    status = raw_send(rte, 0, TAG_BARRIER_IN, &token, 1);
    if (status == KVIO_OK)
        status = recv_exact(rte, 0, TAG_BARRIER_OUT, release, length);
    return status;
}

kvio_status_t kvio_rte_barrier(kvio_rte_t *rte)
{
    char token = 0;
    return barrier_with(rte, &token, 1, NULL);
}

/* Rank 0's two clocks when the last rank has arrived. */
static void fill_start(kvio_rte_t *rte, void *release)
{
    kvio_rte_start_t *start = release;
    start->t0_ns = kvio_rte_time_ns(rte);
    start->t0_wall_ns = (int64_t)kvio_wall_time_ns();
}

kvio_status_t kvio_rte_start(kvio_rte_t *rte, kvio_rte_start_t *start_p)
{
    kvio_rte_start_t start = {0};
    kvio_status_t status = barrier_with(rte, &start, sizeof(start), fill_start);
    if (status == KVIO_OK)
        *start_p = start;
    return status;
}

void kvio_rte_blobs_free(void **blobs, size_t *lengths, int count)
{
    if (blobs != NULL)
        for (int i = 0; i < count; i++)
            free(blobs[i]);
    free(blobs);
    free(lengths);
}

/* Rank 0's receipt of rank's gathered blob; a rank it gave up on, or the
 * expendable one found lost now (failed, or silent past ranks.timeout),
 * leaves its blob NULL: the second with why in reason_p, the run's error
 * untouched (what was gathered decides it). */
static kvio_status_t gather_one(kvio_rte_t *rte, int rank, int expendable, void **blob_p,
                                size_t *length_p, char *reason_p, size_t reason_len)
{
    if (rank == rte->given_up)
        return KVIO_OK;
    bool had_error = rte->error[0] != '\0';
    kvio_status_t status = raw_recv(rte, rank, TAG_GATHER, blob_p, length_p);
    if (status != KVIO_ERR_PEER || rank != expendable)
        return status;
    if (!had_error)
        rte->error[0] = '\0';
    rte->given_up = rank;
    snprintf(reason_p, reason_len, "%s", rte->verdict);
    *blob_p = NULL;
    *length_p = 0;
    return KVIO_OK;
}

kvio_status_t kvio_rte_gather_blobs_sparing(kvio_rte_t *rte, const void *data, size_t length,
                                            int expendable, void ***blobs_p,
                                            size_t **lengths_p, char *reason_p,
                                            size_t reason_len)
{
    int size = rte->world->size;
    if (rte->index != 0) {
        *blobs_p = NULL;
        *lengths_p = NULL;
        return raw_send(rte, 0, TAG_GATHER, data, length);
    }
    void **blobs = calloc((size_t)size, sizeof(*blobs));
    size_t *lengths = calloc((size_t)size, sizeof(*lengths));
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (blobs == NULL || lengths == NULL || (blobs[0] = malloc(length + 1)) == NULL)
        goto fail;
    memcpy(blobs[0], data, length);
    lengths[0] = length;
    status = KVIO_OK;
    for (int rank = 1; rank < size && status == KVIO_OK; rank++)
        status = gather_one(rte, rank, expendable, &blobs[rank], &lengths[rank], reason_p,
                            reason_len);
    if (status != KVIO_OK)
        goto fail;
    *blobs_p = blobs;
    *lengths_p = lengths;
    return KVIO_OK;
fail:
    kvio_rte_blobs_free(blobs, lengths, size);
    return status;
}

kvio_status_t kvio_rte_gather_blobs(kvio_rte_t *rte, const void *data, size_t length,
                                    void ***blobs_p, size_t **lengths_p)
{
    return kvio_rte_gather_blobs_sparing(rte, data, length, -1, blobs_p, lengths_p, NULL, 0);
}

/* Packs blobs as [u64 length, bytes]... for the broadcast of an allgather. */
static kvio_status_t pack_blobs(void **blobs, const size_t *lengths, int count,
                                char **packed_p, size_t *packed_length_p)
{
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += sizeof(uint64_t) + lengths[i];
    char *packed = malloc(total + 1);
    if (packed == NULL)
        return KVIO_ERR_NOMEM;
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        uint64_t length = lengths[i];
        memcpy(packed + at, &length, sizeof(length));
        memcpy(packed + at + sizeof(length), blobs[i], lengths[i]);
        at += sizeof(length) + lengths[i];
    }
    *packed_p = packed;
    *packed_length_p = total;
    return KVIO_OK;
}

static kvio_status_t unpack_blobs(const char *packed, size_t packed_length, int count,
                                  void **blobs, size_t *lengths)
{
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        uint64_t length;
        if (at + sizeof(length) > packed_length)
            return KVIO_ERR_INTERNAL;
        memcpy(&length, packed + at, sizeof(length));
        at += sizeof(length);
        if (length > packed_length - at)
            return KVIO_ERR_INTERNAL;
        if ((blobs[i] = malloc(length + 1)) == NULL)
            return KVIO_ERR_NOMEM;
        memcpy(blobs[i], packed + at, length);
        lengths[i] = length;
        at += length;
    }
    return KVIO_OK;
}

kvio_status_t kvio_rte_allgather_blobs(kvio_rte_t *rte, const void *data, size_t length,
                                       void ***blobs_p, size_t **lengths_p)
{
    int size = rte->world->size;
    void **blobs = NULL;
    size_t *lengths = NULL;
    char *packed = NULL;
    size_t packed_length = 0;
    kvio_status_t status = kvio_rte_gather_blobs(rte, data, length, &blobs, &lengths);
    if (status != KVIO_OK)
        return status;
    if (rte->index == 0) {
        status = pack_blobs(blobs, lengths, size, &packed, &packed_length);
        for (int rank = 1; rank < size && status == KVIO_OK; rank++)
            if (rank != rte->given_up)
                status = raw_send(rte, rank, TAG_BROADCAST, packed, packed_length);
        free(packed);
        if (status != KVIO_OK)
            goto fail;
    } else {
        blobs = calloc((size_t)size, sizeof(*blobs));
        lengths = calloc((size_t)size, sizeof(*lengths));
        status = KVIO_ERR_NOMEM;
        if (blobs == NULL || lengths == NULL)
            goto fail;
        void *message = NULL;
        status = raw_recv(rte, 0, TAG_BROADCAST, &message, &packed_length);
        if (status != KVIO_OK)
            goto fail;
        status = unpack_blobs(message, packed_length, size, blobs, lengths);
        free(message);
        if (status != KVIO_OK)
            goto fail;
    }
    *blobs_p = blobs;
    *lengths_p = lengths;
    return KVIO_OK;
fail:
    kvio_rte_blobs_free(blobs, lengths, size);
    return status;
}

kvio_status_t kvio_rte_allgather(kvio_rte_t *rte, const void *data, size_t length, void *all_p)
{
    void **blobs = NULL;
    size_t *lengths = NULL;
    int size = rte->world->size;
    kvio_status_t status = kvio_rte_allgather_blobs(rte, data, length, &blobs, &lengths);
    if (status != KVIO_OK)
        return status;
    for (int rank = 0; rank < size; rank++) {
        if (lengths[rank] != length) {
            status = KVIO_ERR_INTERNAL;
            break;
        }
        memcpy((char *)all_p + (size_t)rank * length, blobs[rank], length);
    }
    kvio_rte_blobs_free(blobs, lengths, size);
    return status;
}

kvio_status_t kvio_rte_reduce(kvio_rte_t *rte, const double *values, size_t count,
                              kvio_rte_op_t op, double *result_p)
{
    size_t length = count * sizeof(double);
    if (rte->index != 0)
        return raw_send(rte, 0, TAG_REDUCE, values, length);
    double *result = malloc(length + sizeof(double));
    double *other = malloc(length + sizeof(double));
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (result == NULL || other == NULL)
        goto done;
    memcpy(result, values, length);
    status = KVIO_OK;
    for (int rank = 1; rank < rte->world->size && status == KVIO_OK; rank++) {
        status = recv_exact(rte, rank, TAG_REDUCE, other, length);
        for (size_t i = 0; i < count && status == KVIO_OK; i++) {
            if (op == KVIO_RTE_SUM)
                result[i] += other[i];
            else if (op == KVIO_RTE_MIN)
                result[i] = other[i] < result[i] ? other[i] : result[i];
            else
                result[i] = other[i] > result[i] ? other[i] : result[i];
        }
    }
    if (status == KVIO_OK)
        memcpy(result_p, result, length);
done:
    free(result);
    free(other);
    return status;
}

void kvio_rte_clock_offset(const kvio_rte_t *rte, int64_t *offset_ns_p,
                           int64_t *uncertainty_ns_p)
{
    *offset_ns_p = rte->offset_ns;
    *uncertainty_ns_p = rte->uncertainty_ns;
}

int64_t kvio_rte_time_ns(const kvio_rte_t *rte)
{
    return (int64_t)kvio_time_ns() - rte->offset_ns;
}

/* Minimum-RTT ping-pong (NTP/Cristian style): rank 0 sends t0, the peer
 * answers with its clock t_peer, rank 0 reads t1; with the smallest round
 * trip, offset = t_peer - (t0 + t1) / 2 within +/- (t1 - t0) / 2. */
static kvio_status_t clock_sync(kvio_rte_t *rte)
{
    kvio_status_t status = KVIO_OK;
    /* Threads of one process read one clock: the offset is exactly 0, and
     * a measured one would only add its error to every cross-rank stamp. */
    if (rte->world->ops->caps & KVIO_RTE_CAP_SHARED_MEMORY) {
        rte->offset_ns = 0;
        rte->uncertainty_ns = 0;
        return KVIO_OK;
    }
    if (rte->index == 0) {
        for (int rank = 1; rank < rte->world->size && status == KVIO_OK; rank++) {
            int64_t best_rtt = INT64_MAX, best_offset = 0;
            for (int round = 0; round < CLOCK_SYNC_ROUNDS && status == KVIO_OK; round++) {
                int64_t t0 = (int64_t)kvio_time_ns(), peer_time = 0;
                status = raw_send(rte, rank, TAG_PING, &t0, sizeof(t0));
                if (status == KVIO_OK)
                    status = recv_exact(rte, rank, TAG_PONG, &peer_time, sizeof(peer_time));
                int64_t t1 = (int64_t)kvio_time_ns();
                if (status == KVIO_OK && t1 - t0 < best_rtt) {
                    best_rtt = t1 - t0;
                    best_offset = peer_time - (t0 + t1) / 2;
                }
            }
            int64_t result[2] = {best_offset, (best_rtt + 1) / 2};
            if (status == KVIO_OK)
                status = raw_send(rte, rank, TAG_OFFSET, result, sizeof(result));
        }
        return status;
    }
    for (int round = 0; round < CLOCK_SYNC_ROUNDS && status == KVIO_OK; round++) {
        int64_t t0;
        status = recv_exact(rte, 0, TAG_PING, &t0, sizeof(t0));
        int64_t now = (int64_t)kvio_time_ns();
        if (status == KVIO_OK)
            status = raw_send(rte, 0, TAG_PONG, &now, sizeof(now));
    }
    int64_t result[2] = {0, 0};
    if (status == KVIO_OK)
        status = recv_exact(rte, 0, TAG_OFFSET, result, sizeof(result));
    rte->offset_ns = result[0];
    rte->uncertainty_ns = result[1];
    return status;
}

/* Does this world span processes (so rank 0 cannot read this rank's error
 * from memory)? */
static bool spans_processes(const kvio_rte_world_t *world)
{
    return world->num_local < world->size;
}

/* A rank that failed for its own reason (not a peer's failure, not a
 * signal), or because a peer fell silent (a cause the silent rank cannot
 * report), tells rank 0 why, before it announces the failure: rank 0
 * writes summary.json and would otherwise only know that the rank failed. */
static void send_own_error(kvio_rte_t *rte)
{
    volatile sig_atomic_t *stop = rte->world->stop;
    if (rte->index == 0 || !spans_processes(rte->world) ||
        (rte->status == KVIO_ERR_PEER && !rte->peer_silent) || (stop != NULL && *stop))
        return;
    kvio_wire_writer_t out = {0};
    kvio_wire_put_i64(&out, rte->status);
    kvio_wire_put_blob(&out, rte->error, strlen(rte->error));
    /* Rank 0 ending (owes) ends the wait; the message is small enough to
     * leave at once. */
    kvio_rte_waiter_t waiter = waiter_for(rte->world, rte->index, 0, true);
    if (out.status == KVIO_OK)
        (void)rte->world->ops->send(rte->world->priv, rte->index, 0, TAG_ERROR, out.data,
                                    out.length, &waiter);
    kvio_wire_writer_fini(&out);
}

static void *rank_thread(void *arg)
{
    kvio_rte_t *rte = arg;
    kvio_status_t status = clock_sync(rte);
    if (status == KVIO_OK)
        status = rte->body(rte, rte->arg);
    if (status != KVIO_OK && rte->error[0] == '\0')
        kvio_rte_set_error(rte, "rank %d: %s", rte->index, kvio_strerror(status));
    rte->status = status;
    if (status != KVIO_OK)
        send_own_error(rte);
    if (rte->world->ops->rank_done != NULL)
        rte->world->ops->rank_done(rte->world->priv, rte->index, status);
    return NULL;
}

/* On rank 0 of a world that spans processes: the first error another rank
 * failed with for its own reason, into *error_p (KVIO_OK: none came). */
static kvio_status_t remote_error(kvio_rte_world_t *world, rank_error_t *error_p)
{
    for (int rank = 1; rank < world->size; rank++) {
        if (rank >= world->first_local && rank < world->first_local + world->num_local)
            continue;
        uint64_t since = kvio_time_ns();
        for (;;) {
            void *data = NULL;
            size_t length = 0;
            kvio_status_t status = world->ops->recv(world->priv, 0, rank, TAG_ERROR, NULL,
                                                    &data, &length);
            if (status == KVIO_OK) {
                kvio_wire_reader_t in = kvio_wire_reader(data, length);
                int64_t error_status = KVIO_OK;
                uint64_t text_length = 0;
                kvio_wire_get_i64(&in, &error_status);
                const char *text = kvio_wire_take_blob(&in, &text_length);
                bool whole = kvio_wire_status(&in) == KVIO_OK && error_status != KVIO_OK;
                if (whole) {
                    error_p->status = (kvio_status_t)error_status;
                    snprintf(error_p->text, sizeof(error_p->text), "%.*s",
                             (int)(text_length < sizeof(error_p->text) ? text_length
                                                                        : sizeof(error_p->text) - 1),
                             text);
                }
                free(data);
                if (whole)
                    return error_p->status;
                break;
            }
            int64_t silent_ns = 0;
            if (world->ops->peer_state == NULL ||
                world->ops->peer_state(world->priv, rank, &silent_ns) != KVIO_PEER_FAILED ||
                kvio_time_ns() - since > (uint64_t)ERROR_GRACE_NS)
                break;
            struct timespec pause = {.tv_nsec = 10 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
    }
    return KVIO_OK;
}

kvio_status_t kvio_rte_world_run(kvio_rte_world_t *world, kvio_rte_main_t body, void *arg,
                                 char *error_p, size_t error_len)
{
    int count = world->num_local;
    kvio_rte_t *ranks = calloc((size_t)count, sizeof(*ranks));
    pthread_t *threads = calloc((size_t)count, sizeof(*threads));
    bool *started = calloc((size_t)count, sizeof(*started));
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (ranks == NULL || threads == NULL || started == NULL) {
        snprintf(error_p, error_len, "runtime: out of memory");
        goto done;
    }
    for (int i = 0; i < count; i++)
        ranks[i] = (kvio_rte_t){.world = world, .index = world->first_local + i,
                                .body = body, .arg = arg, .given_up = -1};
    if (count == 1) {
        rank_thread(&ranks[0]);
    } else {
        for (int i = 0; i < count; i++) {
            if (pthread_create(&threads[i], NULL, rank_thread, &ranks[i]) != 0) {
                ranks[i].status = KVIO_ERR_NOMEM;
                kvio_rte_set_error(&ranks[i], "rank %d: cannot start a thread", i);
                if (world->ops->rank_done != NULL)
                    world->ops->rank_done(world->priv, ranks[i].index, KVIO_ERR_NOMEM);
                continue;
            }
            started[i] = true;
        }
        for (int i = 0; i < count; i++)
            if (started[i])
                pthread_join(threads[i], NULL);
    }
    /* The first rank that failed for its own reason, not because a peer did. */
    status = KVIO_OK;
    int chosen = -1;
    for (int i = 0; i < count; i++) {
        if (ranks[i].status == KVIO_OK)
            continue;
        if (chosen < 0 || (ranks[chosen].status == KVIO_ERR_PEER &&
                           ranks[i].status != KVIO_ERR_PEER))
            chosen = i;
    }
    /* Rank 0 failed because a peer did (or did not fail): the peer's own
     * error, when one came, is the run's. */
    rank_error_t remote = {0};
    if (world->first_local == 0 && spans_processes(world) &&
        (chosen < 0 || (ranks[chosen].status == KVIO_ERR_PEER && !ranks[chosen].peer_silent)) &&
        remote_error(world, &remote) != KVIO_OK) {
        if (chosen >= 0)
            kvio_info("%s", ranks[chosen].error);
        snprintf(error_p, error_len, "%s", remote.text);
        status = (kvio_status_t)remote.status;
        chosen = -1;
    }
    if (chosen >= 0) {
        status = ranks[chosen].status;
        snprintf(error_p, error_len, "%s", ranks[chosen].error);
        for (int i = 0; i < count; i++)
            if (i != chosen && ranks[i].status != KVIO_OK)
                kvio_info("%s", ranks[i].error);
    }
done:
    free(ranks);
    free(threads);
    free(started);
    return status;
}
