/* Private part of the runtime: the ops table each implementation fills in
 * (local threads, MPI) and the registry lookup. Collectives and the clock
 * offset are built in core/rte.c on top of the ops' point-to-point calls. */
#ifndef KVIO_CORE_RTE_INT_H
#define KVIO_CORE_RTE_INT_H

#include "kvio/rte.h"

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
    /* Point to point; both return by deadline_ns (kvio_time_ns clock). recv
     * hands over a malloc'd payload. */
    kvio_status_t (*send)(void *priv, int from, int to, int tag, const void *data,
                          size_t length, uint64_t deadline_ns);
    kvio_status_t (*recv)(void *priv, int self, int from, int tag, uint64_t deadline_ns,
                          void **data_p, size_t *length_p);
    /* Optional: sends without waiting for the receiver (the bytes are
     * copied); absent means send already returns at once. flush waits, by
     * deadline_ns, until every posted message of rank self has left. */
    kvio_status_t (*post)(void *priv, int from, int to, int tag, const void *data,
                          size_t length, uint64_t deadline_ns);
    kvio_status_t (*flush)(void *priv, int self, uint64_t deadline_ns);
    /* A local rank finished with status. */
    void (*rank_done)(void *priv, int rank, kvio_status_t status);
    /* True when rank is known to have failed or exited without the message. */
    bool (*peer_failed)(void *priv, int rank);
} kvio_rte_ops_t;

extern const kvio_rte_ops_t kvio_rte_local_ops;
extern const kvio_rte_ops_t kvio_rte_mpi_ops;

/* Finds a runtime by name; NULL when unknown. */
const kvio_rte_ops_t *kvio_rte_ops_find(const char *name);

#endif
