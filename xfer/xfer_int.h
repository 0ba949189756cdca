/* Private part of the transports: the ops table each plug-in fills in, the
 * framework's per-rank state that plug-ins may read, and the registry. */
#ifndef KVIO_XFER_INT_H
#define KVIO_XFER_INT_H

#include "kvio/xfer.h"

typedef struct kvio_xfer_ops {
    const char *name;
    unsigned caps;    /* KVIO_XFER_CAP_* */
    size_t priv_size; /* allocated, zeroed and freed by the framework */
    /* Checks from a single process before the run (may be NULL). */
    kvio_status_t (*preflight)(const kvio_xfer_config_t *config, uint64_t bytes,
                               char *error_p, size_t error_len);
    /* Collective set-up: connections, buffers (xfer->send_buffer or
     * xfer->slots), address exchange through xfer->rte. */
    kvio_status_t (*init)(kvio_xfer_t *xfer, char *error_p, size_t error_len);
    void (*fini)(kvio_xfer_t *xfer);
    /* Before the teardown barrier: drops mappings of peers' memory (may be
     * NULL); fini must still work after it. */
    void (*detach)(kvio_xfer_t *xfer);
    /* Sender: moves the buffer to receiver target (an index into receivers),
     * or to the store (target -1, SHARED_STORE); meta->slot is set. */
    kvio_status_t (*put)(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta);
    /* Sender, CHAIN: moves the buffer (or, with KVIO_XFER_META_END in meta,
     * only the end notice) into the first receiver, which forwards it down
     * the chain piece by piece; every receiver is notified once its own copy
     * is complete. Each receiver's slot comes from wait_credit. */
    kvio_status_t (*chain)(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta);
    /* Sender: announces meta to target (-1: every receiver at once). */
    kvio_status_t (*notify)(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta);
    /* Sender, PUSH: waits until target may take meta->version and sets
     * meta->slot to the slot the target has free. */
    kvio_status_t (*wait_credit)(kvio_xfer_t *xfer, int target, kvio_xfer_meta_t *meta);
    /* Receiver: KVIO_OK with the next notice, KVIO_INPROGRESS when none. */
    kvio_status_t (*poll)(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p);
    /* Receiver: reads up to length bytes at offset of the version into
     * buffer; *moved_p says how many arrived. */
    kvio_status_t (*fetch)(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta, void *buffer,
                           uint64_t offset, uint64_t length, uint64_t *moved_p);
    /* Receiver: meta->version was handled; meta->slot is now free. */
    kvio_status_t (*ack)(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta);
    void (*progress)(kvio_xfer_t *xfer);
} kvio_xfer_ops_t;

struct kvio_xfer {
    const kvio_xfer_ops_t *ops;
    void *priv;
    const kvio_xfer_config_t *config;
    kvio_rte_t *rte;
    kvio_xfer_role_t role;
    int sender;
    int *receivers;
    int num_receivers;
    int self_index;       /* this rank's index in receivers, -1 otherwise */
    uint64_t bytes;
    void *send_buffer;    /* set by the plug-in's init (sender) */
    void *slots[2];       /* set by the plug-in's init (receiver) */
    kvio_device_t *device; /* the framework's: a cuda domain when the buffers
                              are to be GPU memory, else NULL */
    uint64_t polls;
    int64_t poll_interval_ns; /* plug-in sets: 0 when notified */
    uint64_t chunks_sent;     /* plug-ins count, for die_after_chunks */
    char info[512];       /* plug-in fills: what it uses */
    char error[512];      /* the first error, via kvio_xfer_set_error */
};

extern const kvio_xfer_ops_t kvio_xfer_ucx_ops;
extern const kvio_xfer_ops_t kvio_xfer_file_ops;
extern const kvio_xfer_ops_t kvio_xfer_redis_ops;
extern const kvio_xfer_ops_t kvio_xfer_cuda_ipc_ops;
extern const kvio_xfer_ops_t kvio_xfer_staged_ops;

/* Records a plug-in's error (kept with the xfer for the caller). */
void kvio_xfer_set_error(kvio_xfer_t *xfer, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Plug-ins call this before each chunk they send: true when the injected
 * fault says the sender dies now (the error is recorded). */
bool kvio_xfer_fault_now(kvio_xfer_t *xfer);

/* Allocates bytes aligned to 4096 (O_DIRECT-safe); free with free(). */
void *kvio_xfer_aligned_alloc(uint64_t bytes);

#endif
