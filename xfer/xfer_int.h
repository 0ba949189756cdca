/* Private part of the transports: the ops table each plug-in fills in, the
 * framework's per-rank state that plug-ins may read, and the registry. */
#ifndef KVIO_XFER_INT_H
#define KVIO_XFER_INT_H

#include "kvio/copysum.h"
#include "kvio/xfer.h"

typedef struct kvio_xfer_ops {
    kvio_plugin_t plugin; /* name, help, options (the framework's sections hold them) */
    unsigned caps;    /* KVIO_XFER_CAP_*: with them the simulate model's shape */
    /* The simulate model's defaults (xfer/README.md says where they come
     * from): per update and receiver, latency + bytes / bandwidth. */
    struct {
        int64_t latency_ns;
        double bandwidth_gbps;
    } model;
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
     * or to the store (target -1, SHARED_STORE); meta->slot is set. With
     * HASH_ON_PUT it passes every piece of the send buffer, in order, to
     * kvio_xfer_hash_piece before it puts it. */
    kvio_status_t (*put)(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta);
    /* Sender, CHAIN: moves the buffer (or, with KVIO_XFER_META_END in meta,
     * only the end notice) into the first receiver, which forwards it down
     * the chain piece by piece; every receiver is notified once its own copy
     * is complete. Each receiver's slot comes from wait_credit. With
     * HASH_ON_PUT it passes the pieces as put does, and the checksum that
     * kvio_xfer_put_checksum gives at the end replaces meta's. */
    kvio_status_t (*chain)(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta);
    /* Sender: announces meta to target (-1: every receiver at once). */
    kvio_status_t (*notify)(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta);
    /* Sender, PUSH: waits until target may take meta->version and sets
     * meta->slot to the slot the target has free. */
    kvio_status_t (*wait_credit)(kvio_xfer_t *xfer, int target, kvio_xfer_meta_t *meta);
    /* Receiver: KVIO_OK with the next notice, KVIO_INPROGRESS when none. */
    kvio_status_t (*poll)(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p);
    /* Receiver: reads up to length bytes at offset of the version into
     * buffer; *moved_p says how many arrived (0: none yet). A transport
     * that learns the version's checksum only with its last piece (buckets)
     * fills meta->checksum then. */
    kvio_status_t (*fetch)(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta, void *buffer,
                           uint64_t offset, uint64_t length, uint64_t *moved_p);
    /* Receiver, LANDED: the newest version on its way whose notice is not
     * yet queued, and the prefix of it in place; KVIO_INPROGRESS: none. */
    kvio_status_t (*landed)(kvio_xfer_t *xfer, kvio_xfer_landed_t *landed_p);
    /* Receiver: meta->version was handled; meta->slot is now free. */
    kvio_status_t (*ack)(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta);
    void (*progress)(kvio_xfer_t *xfer);
} kvio_xfer_ops_t;

/* What the transports a build may leave out are (name, help, shape,
 * simulate defaults): their ops table and the stub xfer.c puts in its place
 * both start with it, so a build without UCX or CUDA still lists,
 * validates and simulates them (and refuses to emulate them, saying why).
 * Simulate defaults: ucx 20 us + 10 GB/s per receiver (a 100 Gb/s NIC's
 * put, one after the other); cuda-ipc 20 us + 200 GB/s (NVLink-class,
 * GPU to GPU); staged 50 us + 10 GB/s (the GPU's copies out and in around a
 * UCX put). */
#define KVIO_XFER_ABOUT_UCX                                                                 \
    .plugin = {.name = "ucx", .help = "puts straight into the receivers' memory (RDMA, "    \
               "shared memory or TCP)", .options = kvio_no_options},                     \
    .caps = KVIO_XFER_CAP_PUSH | KVIO_XFER_CAP_GPU_MEM | KVIO_XFER_CAP_CHAIN |              \
            KVIO_XFER_CAP_HASH_ON_PUT | KVIO_XFER_CAP_LANDED,                               \
    .model = {.latency_ns = 20000, .bandwidth_gbps = 10.0}
#define KVIO_XFER_ABOUT_CUDA_IPC                                                            \
    .plugin = {.name = "cuda-ipc", .help = "GPU to GPU on one node through CUDA IPC handles", \
               .options = kvio_no_options},                                                 \
    .caps = KVIO_XFER_CAP_PUSH | KVIO_XFER_CAP_GPU_MEM | KVIO_XFER_CAP_GPU_ONLY,            \
    .model = {.latency_ns = 20000, .bandwidth_gbps = 200.0}
#define KVIO_XFER_ABOUT_STAGED                                                              \
    .plugin = {.name = "staged", .help = "GPU -> pinned host -> UCX -> pinned host -> GPU", \
               .options = kvio_no_options},                                                 \
    .caps = KVIO_XFER_CAP_PUSH | KVIO_XFER_CAP_GPU_MEM | KVIO_XFER_CAP_GPU_ONLY,            \
    .model = {.latency_ns = 50000, .bandwidth_gbps = 10.0}

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
    /* Receiver, SUMS_FETCH: the last version the plug-in fetched whole, and
     * the sum of the slot it filled (0: none yet). */
    uint64_t fetched_version, fetched_sum;
    void *slots[2];       /* set by the plug-in's init (receiver) */
    kvio_device_t *device; /* the framework's: a cuda domain when the buffers
                              are to be GPU memory, else NULL */
    uint64_t polls;
    int64_t poll_interval_ns; /* plug-in sets: 0 when notified */
    uint64_t chunks_sent;     /* plug-ins count, for die_after_chunks */
    /* Sender, kvio_xfer_publish_and_checksum on a HASH_ON_PUT transport:
     * the sum that kvio_xfer_hash_piece and kvio_xfer_store_piece feed
     * while hashing is set. */
    kvio_sum_t put_sum;
    bool hashing;
    kvio_xfer_bucket_stamp_t *stamps; /* bucketed transports: kvio_xfer_bucket_stamp_add */
    size_t num_stamps, stamps_capacity;
    bool in_memory;       /* sender: plug-in sets when every byte moves by a copy
                             within this host's memory (kvio_xfer_in_memory) */
    char info[512];       /* plug-in fills: what it uses */
    char error[512];      /* the first error, via kvio_xfer_set_error */
};

/* The transports themselves are listed in xfer/transports.c. ucx with weight_sync's buckets (config->num_buckets > 0). */
extern const kvio_xfer_ops_t kvio_xfer_ucx_bucket_ops;

/* Appends count zeroed bucket stamps and returns the first (NULL: out of
 * memory); the pointer is valid until the next call. */
kvio_xfer_bucket_stamp_t *kvio_xfer_bucket_stamp_add(kvio_xfer_t *xfer, size_t count);

/* Buckets' route (config->route): the receivers (indices into receivers)
 * that receiver index forwards each bucket to, at most 2, into children;
 * returns their count. The parent: the receiver that forwards to index,
 * -1 for the sender. */
int kvio_xfer_route_children(const kvio_xfer_t *xfer, int index, int children[2]);
int kvio_xfer_route_parent(const kvio_xfer_t *xfer, int index);

/* Records a plug-in's error (kept with the xfer for the caller). */
void kvio_xfer_set_error(kvio_xfer_t *xfer, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Plug-ins call this before each chunk they send: true when the injected
 * fault says the sender dies now (the error is recorded). */
bool kvio_xfer_fault_now(kvio_xfer_t *xfer);

/* Plug-ins with HASH_ON_PUT pass each piece of the send buffer, in order,
 * through one of these before it is put: they feed the version's checksum
 * when the publish computes one. hash_piece only reads the piece (it is
 * then in cache for a put); store_piece copies it to target (a receiver's
 * slot mapped into this process, at the piece's place) with streaming
 * stores, from the loads that sum it, and fences the stores: the bytes are
 * in place when it returns. */
void kvio_xfer_hash_piece(kvio_xfer_t *xfer, uint64_t offset, uint64_t length);
void kvio_xfer_store_piece(kvio_xfer_t *xfer, void *target, uint64_t offset, uint64_t length);

/* While a publish sums: true, with the checksum, once every byte has been
 * passed through those (a chain's sender puts it into the message that
 * completes the version); false otherwise (meta's checksum stands). */
bool kvio_xfer_put_checksum(const kvio_xfer_t *xfer, uint64_t *checksum_p);

/* Reads one byte of every page of [memory, memory + bytes) (page: the page
 * size), changing none: a mapping of a peer's memory faulted in by this
 * process at set-up, down to the hypervisor's page tables where there is
 * one (xfer_ucx.c's map_remote says what it costs otherwise). */
void kvio_xfer_touch(const void *memory, uint64_t bytes, size_t page);

/* Allocates bytes aligned to 4096 (O_DIRECT-safe); free with free(). */
void *kvio_xfer_aligned_alloc(uint64_t bytes);

#endif
