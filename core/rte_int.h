/* Private part of the runtime: the ops table each implementation fills in
 * (local threads, MPI), the waiter through which the framework bounds the
 * ops' waits by the liveness of the peer, and the registry lookup.
 * Collectives and the clock offset are built in core/rte.c on top of the
 * ops' point-to-point calls. */
#ifndef KVIO_CORE_RTE_INT_H
#define KVIO_CORE_RTE_INT_H

#include "kvio/rte.h"

/* A wait in progress, owned by the framework. An op that has to wait looks
 * for its event, then asks kvio_rte_waiter_go_on whether to keep waiting;
 * false ends the wait (the op returns KVIO_ERR_TIMEOUT and the framework
 * knows why). A NULL waiter means: look once, do not wait. */
typedef struct kvio_rte_waiter kvio_rte_waiter_t;

/* The mpi runtime's heartbeats (below KVIO_RTE_TAG_USER, above the
 * framework's own tags). */
#define KVIO_RTE_TAG_HEARTBEAT (KVIO_RTE_TAG_USER - 1)

/* True while the wait should go on: the peer it waits for still answers
 * (however slowly it progresses) and the run was not stopped more than a
 * timeout ago. Cheap enough to call between polls. */
bool kvio_rte_waiter_go_on(kvio_rte_waiter_t *waiter);

typedef struct kvio_rte_ops {
    const char *name;
    unsigned caps;    /* KVIO_RTE_CAP_* */
    size_t priv_size; /* allocated and zeroed by the framework */
    /* Starts the runtime; reports the world size and the ranks this process
     * hosts (first_local .. first_local + num_local - 1). */
    kvio_status_t (*init)(void *priv, const kvio_rte_params_t *params, int *size_p,
                          int *first_local_p, int *num_local_p, char *error_p,
                          size_t error_len);
    void (*fini)(void *priv, bool failed);
    /* Point to point, waiting through waiter (see above). recv hands over a
     * malloc'd payload; KVIO_ERR_PEER when the sender can send no more. */
    kvio_status_t (*send)(void *priv, int from, int to, int tag, const void *data,
                          size_t length, kvio_rte_waiter_t *waiter);
    kvio_status_t (*recv)(void *priv, int self, int from, int tag, kvio_rte_waiter_t *waiter,
                          void **data_p, size_t *length_p);
    /* Optional: sends without waiting for the receiver (the bytes are
     * copied); absent means send already returns at once. flush waits until
     * every posted message of rank self has left. */
    kvio_status_t (*post)(void *priv, int from, int to, int tag, const void *data,
                          size_t length);
    kvio_status_t (*flush)(void *priv, int self, kvio_rte_waiter_t *waiter);
    /* A local rank finished with status. */
    void (*rank_done)(void *priv, int rank, kvio_status_t status);
    /* What this process knows of rank (kvio_peer_state_t); for silent, how
     * long it has been silent in *silent_ns_p. */
    kvio_peer_state_t (*peer_state)(void *priv, int rank, int64_t *silent_ns_p);
} kvio_rte_ops_t;

extern const kvio_rte_ops_t kvio_rte_local_ops;
extern const kvio_rte_ops_t kvio_rte_mpi_ops;

/* Finds a runtime by name; NULL when unknown. */
const kvio_rte_ops_t *kvio_rte_ops_find(const char *name);

#endif
