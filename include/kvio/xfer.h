/* Model-update transports: move a weights buffer from one sender rank to its
 * receiver ranks (ucx, file, redis, cuda-ipc, staged), behind one ops table
 * and registry. The
 * framework wrapper (this API) takes every timestamp and counts bytes and
 * polls; plug-ins only move data. Times are on rank 0's clock (the runtime's
 * offsets). xfer/ knows buffers and ranks, not trainers or servers. */
#ifndef KVIO_XFER_H
#define KVIO_XFER_H

#include "kvio/config.h"
#include "kvio/data.h"
#include "kvio/gpu.h"
#include "kvio/model.h"
#include "kvio/rte.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kvio_xfer kvio_xfer_t;

/* The transports, found by name (xfer/transports.c): ucx, file, redis,
 * cuda-ipc (same node, GPU to GPU), staged (GPU -> pinned host -> UCX ->
 * pinned host -> GPU); `kvio list` shows them. */
extern const kvio_registry_t kvio_transports;
typedef enum { KVIO_XFER_FANOUT_SEQUENTIAL = 0, KVIO_XFER_FANOUT_CHAIN = 1 } kvio_xfer_fanout_t;

/* staged: how a chunk crosses from the sender's host side to the
 * receiver's: a UCX put between two pinned rings (any two nodes), or the
 * sender's GPU copying straight into the receiver's ring, which UCX maps
 * into the sender (same node, shared-memory UCX transports). */
typedef enum { KVIO_XFER_HOP_PUT = 0, KVIO_XFER_HOP_MAPPED = 1 } kvio_xfer_host_hop_t;
typedef enum { KVIO_XFER_DISCOVER_POLL = 0, KVIO_XFER_DISCOVER_NOTIFY = 1 } kvio_xfer_discovery_t;

/* Names of kvio_xfer_fanout_t and kvio_xfer_discovery_t values, in order. */
extern const char *const kvio_xfer_fanout_names[];
extern const char *const kvio_xfer_discovery_names[];

/* Capabilities of a transport (bits of its ops table). */
#define KVIO_XFER_CAP_PUSH 1u         /* sender writes into the receiver's buffer */
#define KVIO_XFER_CAP_SHARED_STORE 2u /* one publish serves every receiver */
#define KVIO_XFER_CAP_CHAIN 4u        /* pipelined chain fan-out */
#define KVIO_XFER_CAP_POLL 8u         /* discovery by polling at an interval */
#define KVIO_XFER_CAP_GPU_MEM 16u     /* its buffers may be GPU memory (ucx: when UCX
                                         reports CUDA memory) */
#define KVIO_XFER_CAP_GPU_ONLY 32u    /* its buffers are always GPU memory */
#define KVIO_XFER_CAP_HASH_ON_PUT 64u /* the sender sums each piece as it puts it (host
                                         memory): the checksum needs no pass over the
                                         buffer of its own */
#define KVIO_XFER_CAP_SUMS_FETCH 512u  /* a receiver's fetch sums the version as it fills
                                         the slot (kvio_xfer_fetched_sum) */
#define KVIO_XFER_CAP_BUCKETS 256u     /* weight_sync's buckets: one put (target -1)
                                         moves a version to every receiver bucket by
                                         bucket, and each receiver fetches (reloads) a
                                         bucket once its notice came */
#define KVIO_XFER_CAP_LANDED 128u     /* a receiver learns, before the notice, how much of
                                         the version on its way is in place
                                         (kvio_xfer_landed) */

typedef struct kvio_xfer_file_config {
    char *dir;
    bool fsync;
    bool direct;
    int discovery;           /* kvio_xfer_discovery_t */
    int64_t poll_interval_ns;
    int64_t keep;            /* versions kept in the directory */
} kvio_xfer_file_config_t;

typedef enum { KVIO_REDIS_RECONNECT = 0, KVIO_REDIS_FAIL = 1 } kvio_redis_disconnect_t;

typedef struct kvio_xfer_redis_config {
    char *url;
    char *prefix;
    int64_t keep;
    int on_disconnect; /* kvio_redis_disconnect_t */
} kvio_xfer_redis_config_t;

/* Simulate mode: an update costs latency + bytes / bandwidth. A value set
 * (> 0) wins; else the one taken from `from` (an emulate run's results
 * directory, read when the workload is loaded); else the transport's
 * documented default. */
typedef struct kvio_xfer_model_config {
    int64_t latency_ns;
    double bandwidth_gbps;
    char *from;                   /* results directory; NULL or "": none */
    /* Not options: what was taken from `from` (taken: it was read). */
    bool taken;
    int64_t taken_latency_ns;     /* may be 0 (fitted and floored) */
    double taken_bandwidth_gbps;
    double taken_checksum_gbps;   /* the trainer's checksum before the publish (0: none) */
    double taken_verify_gbps;     /* the server's verification (0: the default 10 GB/s) */
} kvio_xfer_model_config_t;

/* How buckets reach the receivers: the sender puts each into every one
 * (direct), or into the first, which forwards it along the others (chain),
 * or down a binary tree of them (tree: receiver i forwards to 2i+1, 2i+2). */
typedef enum { KVIO_XFER_ROUTE_DIRECT = 0, KVIO_XFER_ROUTE_CHAIN, KVIO_XFER_ROUTE_TREE } kvio_xfer_route_t;

typedef struct kvio_xfer_config {
    kvio_choice_t kind; /* of kvio_transports */
    uint64_t chunk;  /* bytes per put / write / SET */
    int64_t inflight;
    int fanout;      /* kvio_xfer_fanout_t */
    int host_hop;    /* kvio_xfer_host_hop_t (staged) */
    int ucx_path;    /* kvio_xfer_host_hop_t (ucx, host weights): mapped stores or puts */
    kvio_xfer_file_config_t file;
    kvio_xfer_redis_config_t redis;
    kvio_xfer_model_config_t model;
    int64_t die_after_chunks; /* fault injection: the sender stops (as if it
                                 died) after this many chunks; 0: never */
    kvio_device_config_t device; /* not an option: the run copies the workload's
                                    `device:` section here (zero: host) */
    kvio_data_t data;            /* not an option: the workload's `data:` (the weights
                                    and what a file holds beside them; zero: random) */
    uint64_t data_seed;          /* not an option: the workload's seed */
    /* Not options: weight_sync in emulate mode (the run fills them in). The
     * weights move as num_buckets buckets of these sizes, in order, adding
     * up to the weights' bytes, pipeline_depth of them in flight (ucx only);
     * num_buckets 0: the weights as one blob. Borrowed. */
    const uint64_t *bucket_bytes;
    size_t num_buckets;
    int64_t pipeline_depth;
    kvio_delta_t delta; /* with buckets: fraction above 0 sends deltas */
    int route;               /* with buckets: kvio_xfer_route_t */
} kvio_xfer_config_t;

/* The option table of `train.transport`. */
extern const kvio_opt_t kvio_xfer_options[];

/* What travels with every update. Same-architecture ranks (host order). */
#define KVIO_XFER_META_END 1u /* no more versions; version = the last one */
typedef struct kvio_xfer_meta {
    uint64_t magic;
    uint64_t version;
    uint64_t bytes;
    uint64_t checksum;            /* XXH3-64 of the whole buffer */
    uint32_t flags;               /* KVIO_XFER_META_* */
    uint32_t slot;                /* receive slot (push transports) */
    int64_t t_ready_ns;           /* trainer finished the step (rank 0 clock) */
    int64_t t_xfer_start_ns;      /* push: first put to this receiver */
    int64_t t_xfer_end_ns;        /* push: flush done, data at this receiver */
} kvio_xfer_meta_t;

#define KVIO_XFER_MAGIC 0x6b76696f75706474ull /* "kvioupdt" */

/* Sender-side times of one publish. */
typedef struct kvio_xfer_publish_times {
    int64_t start_ns;     /* first byte moved (to any receiver) */
    int64_t end_ns;       /* last receiver notified */
    int64_t credit_ns;    /* time spent waiting for receivers to free a slot */
    uint64_t bytes_moved; /* bytes written (all receivers) */
    uint64_t checksum;    /* the checksum the version carried */
} kvio_xfer_publish_times_t;

/* The prefix of a version on its way into this receiver that is already in
 * its slot (push transports with KVIO_XFER_CAP_LANDED), before its notice. */
typedef struct kvio_xfer_landed {
    uint64_t version;
    int slot;
    uint64_t bytes; /* bytes [0, bytes) of the slot hold the version's */
} kvio_xfer_landed_t;

/* One update on its way into a receiver, with the stages the wrapper took. */
typedef struct kvio_xfer_receive {
    kvio_xfer_meta_t meta;
    int slot;                 /* where the data lands */
    uint64_t offset;          /* bytes fetched so far */
    int64_t t_notified_ns;
    int64_t t_xfer_start_ns;
    int64_t t_xfer_end_ns;
    bool complete;
} kvio_xfer_receive_t;

typedef enum { KVIO_XFER_SENDER = 0, KVIO_XFER_RECEIVER = 1, KVIO_XFER_BYSTANDER = 2 } kvio_xfer_role_t;

/* The KVIO_XFER_CAP_* bits of the transport config->kind chose (0: none
 * chosen), for checks before any transport is created. */
uint32_t kvio_xfer_kind_caps(const kvio_xfer_config_t *config);

/* Creates this rank's side of a transport; collective over every rank of
 * rte (all call it, bystanders included, since address exchanges are).
 * bytes is the weights size; the transport allocates the send buffer
 * (sender) or two receive slots (receiver) of that size. Errors such as
 * "redis://127.0.0.1:6390: connection refused" go to error_p. */
kvio_status_t kvio_xfer_create(const kvio_xfer_config_t *config, kvio_rte_t *rte,
                               kvio_xfer_role_t role, int sender, const int *receivers,
                               int num_receivers, uint64_t bytes, kvio_xfer_t **xfer_p,
                               char *error_p, size_t error_len);

/* Lets go of what this rank holds of its peers' memory (the cuda-ipc
 * sender's opened handles). A clean teardown calls it on every rank, then a
 * barrier, then kvio_xfer_destroy, so no rank frees memory a peer still has
 * mapped. */
void kvio_xfer_detach(kvio_xfer_t *xfer);

/* Tears down (after detach and a barrier when clean). */
void kvio_xfer_destroy(kvio_xfer_t *xfer);

/* Checks, before any rank starts, what can be checked from one process: the
 * Redis server answers, the directory is writable with room for keep + 1
 * versions, the transport is built. */
kvio_status_t kvio_xfer_preflight(const kvio_xfer_config_t *config, uint64_t bytes,
                                  char *error_p, size_t error_len);

/* The memory domain of the send buffer and slots: NULL when they are host
 * memory, else a cuda domain (borrowed; use kvio_device_copy to read or
 * write them). */
kvio_device_t *kvio_xfer_device(const kvio_xfer_t *xfer);

/* What the weights and a file's spare bytes hold (the config's data). */
const kvio_data_t *kvio_xfer_data(const kvio_xfer_t *xfer);

/* The sender's buffer (sender only; borrowed). */
void *kvio_xfer_send_buffer(kvio_xfer_t *xfer);

/* A receiver's slot 0 or 1 (borrowed). */
void *kvio_xfer_slot(kvio_xfer_t *xfer, int slot);

/* Publishes version (checksum of the send buffer) to every receiver and
 * notifies them. Blocks until the data is out; bounded by the runtime's
 * timeout. */
kvio_status_t kvio_xfer_publish(kvio_xfer_t *xfer, uint64_t version, uint64_t checksum,
                                int64_t t_ready_ns, kvio_xfer_publish_times_t *times_p);

/* Publishes version like kvio_xfer_publish, with the checksum of the send
 * buffer computed here: piece by piece as the first receiver's bytes are
 * put (a chain: the first hop's), when the transport can
 * (KVIO_XFER_CAP_HASH_ON_PUT, host memory), else in one pass before the
 * first byte moves (the time from t_ready_ns to times_p->start_ns then
 * includes it). The checksum is in times_p->checksum (times_p must not be
 * NULL). Host send buffers only; a GPU one is summed by its owner through
 * a host copy (kvio_xfer_publish). */
kvio_status_t kvio_xfer_publish_and_checksum(kvio_xfer_t *xfer, uint64_t version,
                                             int64_t t_ready_ns,
                                             kvio_xfer_publish_times_t *times_p);

/* Tells every receiver that no more versions come after last_version. */
kvio_status_t kvio_xfer_finish(kvio_xfer_t *xfer, uint64_t last_version);

/* Receiver: checks for a new version without blocking. KVIO_OK fills
 * receive_p (t_notified set) and aims the data at free_slot; KVIO_INPROGRESS
 * means nothing new. Counts a poll. */
kvio_status_t kvio_xfer_poll(kvio_xfer_t *xfer, int free_slot, kvio_xfer_receive_t *receive_p);

/* Receiver: moves the next chunk of an update into its slot; sets complete
 * when all bytes are in (at once for push transports). */
kvio_status_t kvio_xfer_fetch_step(kvio_xfer_t *xfer, kvio_xfer_receive_t *receive);

/* Receiver (push transports with KVIO_XFER_CAP_LANDED): how much of the
 * newest version still on its way, its notice not yet polled, is in place,
 * so that it can be checked while the rest moves. KVIO_OK fills landed_p;
 * KVIO_INPROGRESS: nothing known (or the transport cannot tell). The bytes
 * only grow for one version; a version whose sender dies never gets a
 * notice. Call kvio_xfer_progress for news. */
kvio_status_t kvio_xfer_landed(kvio_xfer_t *xfer, kvio_xfer_landed_t *landed_p);

/* Receiver: tells the sender that receive's version was handled (activated
 * or rejected) and which slot is now free for the next one. */
kvio_status_t kvio_xfer_ack(kvio_xfer_t *xfer, const kvio_xfer_receive_t *receive,
                            int free_slot);

/* Drives the transport (progress for pushes and chains) without blocking. */
void kvio_xfer_progress(kvio_xfer_t *xfer);

/* Receiver: how often kvio_xfer_poll should be called: the polling
 * interval of a transport that discovers by polling, 0 for one that is
 * notified (call it every turn of the loop). */
int64_t kvio_xfer_poll_interval_ns(const kvio_xfer_t *xfer);

/* Polls made by kvio_xfer_poll; a text on what the transport uses (UCX
 * transports chosen, directory and fsync, Redis URL). */
uint64_t kvio_xfer_polls(const kvio_xfer_t *xfer);
const char *kvio_xfer_info(const kvio_xfer_t *xfer);

/* Sender: true when every byte of a version moves by a copy within this
 * host's memory (ucx whole versions over shared memory: stores into the
 * mapped slots, or posix, sysv, cma, xpmem or knem lanes), so that a
 * memcpy of the same bytes bounds the transfer; false over a network, a
 * file or Redis, GPU memory, and weight_sync's buckets (three copies in a
 * pipeline). */
bool kvio_xfer_in_memory(const kvio_xfer_t *xfer);

/* The first error a call on this transport reported ("" when none). */
const char *kvio_xfer_error(const kvio_xfer_t *xfer);

/* A receiver whose transport has SUMS_FETCH: true, with the XXH3-64 of
 * the slot as the fetch filled it, once version was fetched whole (the
 * serve loop then need not read the slot again to verify it). */
bool kvio_xfer_fetched_sum(const kvio_xfer_t *xfer, uint64_t version, uint64_t *sum_p);
bool kvio_xfer_sums_fetch(const kvio_xfer_t *xfer);

/* The transport's deltas (NULL when its versions are whole). */
const kvio_delta_t *kvio_xfer_delta(const kvio_xfer_t *xfer);

/* The checksum a version carries (XXH3-64 of the whole buffer), fed piece
 * by piece in order: the digest equals kvio_weights_checksum over the
 * pieces joined. Runs on the CPU's widest vector unit where libxxhash can
 * dispatch (x86). create returns KVIO_ERR_NOMEM or a reset state that the
 * caller destroys. */
typedef struct kvio_xfer_checksum kvio_xfer_checksum_t;
kvio_status_t kvio_xfer_checksum_create(kvio_xfer_checksum_t **checksum_p);
void kvio_xfer_checksum_destroy(kvio_xfer_checksum_t *checksum); /* NULL: nothing */
void kvio_xfer_checksum_reset(kvio_xfer_checksum_t *checksum);
void kvio_xfer_checksum_update(kvio_xfer_checksum_t *checksum, const void *data,
                               uint64_t length);
uint64_t kvio_xfer_checksum_digest(const kvio_xfer_checksum_t *checksum);
/* The checksum of length bytes at data, at once. */
uint64_t kvio_weights_checksum(const void *data, uint64_t length);

/* Bucketed weight sync (config->num_buckets > 0): when each stage of each
 * bucket of each version began and ended, on rank 0's clock. The sender
 * has a row per bucket and receiver (rank: the sender's, peer: the
 * receiver's) with stage (its copy from the weights into a staging slot;
 * the same in every row of the bucket), transfer (the put into that
 * receiver and its flush) and control (the bucket's notice to it); a
 * receiver's rows (peer: the sender) have the notice's arrival and the
 * reload (its copy from its receive slot into its weights). Unused times
 * are 0. */
typedef struct kvio_xfer_bucket_stamp {
    uint64_t version;
    uint32_t bucket;
    int32_t rank;
    int32_t peer;
    int32_t source;      /* a receiver's reload row: the rank that put the bucket in */
    uint64_t bytes;
    uint64_t wire_bytes; /* what moved: bytes, or a delta's encoding */
    int64_t stage_start_ns, stage_end_ns;
    int64_t transfer_start_ns, transfer_end_ns;
    int64_t control_start_ns, control_end_ns; /* sender: posting the notice until sent */
    int64_t notice_sent_ns, noticed_ns;       /* receiver: the notice posted, received */
    int64_t reload_start_ns, reload_end_ns;
} kvio_xfer_bucket_stamp_t;

/* This rank's bucket stamps so far (borrowed, valid until the next publish
 * or fetch; count 0 for a transport that moves one blob). */
void kvio_xfer_bucket_stamps(const kvio_xfer_t *xfer, const kvio_xfer_bucket_stamp_t **stamps_p,
                             size_t *count_p);

/* Simulate mode: when receiver index (0-based) of num_receivers has the
 * data, in ns after the publish starts, and how long the sender is busy. */
void kvio_xfer_model(const kvio_xfer_config_t *config, uint64_t bytes, int receiver,
                     int num_receivers, int64_t *arrival_ns_p, int64_t *sender_busy_ns_p);

/* Where a simulate-mode model parameter came from. */
typedef enum {
    KVIO_XFER_MODEL_DEFAULT = 0, /* the transport's documented default */
    KVIO_XFER_MODEL_SET = 1,     /* train.transport.model.latency / bandwidth */
    KVIO_XFER_MODEL_TAKEN = 2,   /* taken from train.transport.model.from */
} kvio_xfer_model_source_t;

/* The latency and bandwidth kvio_xfer_model uses for config, and where
 * each came from (either source pointer may be NULL). */
void kvio_xfer_model_params(const kvio_xfer_config_t *config, int64_t *latency_ns_p,
                            double *bandwidth_gbps_p, kvio_xfer_model_source_t *latency_source_p,
                            kvio_xfer_model_source_t *bandwidth_source_p);

/* What an emulate run measured, as means over its activated updates (one
 * per update and receiver), for kvio_xfer_model_fit. */
typedef struct kvio_xfer_measured {
    uint64_t bytes;          /* weights size */
    double transfer_ns;      /* data moving into one receiver (xfer start to end) */
    double write_ns;         /* shared store: the sender's write (publish start to end) */
    double arrival_ns;       /* publish start to the data at the receiver */
} kvio_xfer_measured_t;

/* Fits the model to a measured run. Bandwidth: bytes over the time bytes
 * were moving (a shared store moves them twice, the write and one read,
 * both charged at the one bandwidth). Latency: the fixed cost that makes the
 * model's arrival, averaged over the num_receivers receivers of the measured
 * run's shape (measured_config: its kind, fanout, chunk, file discovery and
 * poll interval), equal measured->arrival_ns; floored at 0. Pure
 * arithmetic; KVIO_ERR_INVALID when nothing moved. */
kvio_status_t kvio_xfer_model_fit(const kvio_xfer_config_t *measured_config, int num_receivers,
                                  const kvio_xfer_measured_t *measured, int64_t *latency_ns_p,
                                  double *bandwidth_gbps_p);

#endif
