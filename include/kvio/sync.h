/* Weight sync as RL systems run it, modelled on the virtual clock (simulate
 * mode; emulate mode moves the same buckets for real, xfer/xfer_bucket_ucx.c):
 * the model's tensors (kvio/model.h) grouped into messages (whole,
 * per bucket or per tensor, each with a control cost), each bucket going
 * through three stages — staged into a GPU from the trainer's host copy,
 * broadcast to every GPU of every serving instance (within a node over the
 * GPU link, across nodes over the NIC, as a sequence, a chain or a binary
 * tree), reloaded by each GPU into its shard — overlapped over
 * pipeline_depth buckets; delta updates shrink what moves and cost an apply;
 * a trainer layout that differs from the serving one adds the messages that
 * gather each serving shard. Topology p2p is the other path: instances
 * joining a running cluster get the weights from the serving peers' host
 * copies over the NICs (checkpoint-engine's P2P update), see kvio_sync_plan. */
#ifndef KVIO_SYNC_H
#define KVIO_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvio/config.h"
#include "kvio/model.h"
#include "kvio/status.h"

typedef enum {
    KVIO_SYNC_OFF = 0,   /* the update is train.bytes through train.transport's model */
    KVIO_SYNC_WHOLE,     /* the model's weights as one message */
    KVIO_SYNC_BUCKET,    /* tensors packed into buckets of bucket_size */
    KVIO_SYNC_TENSOR,    /* one message per tensor */
} kvio_sync_granularity_t;

/* sequential, chain, tree: a broadcast from the trainer across nodes; p2p:
 * joining instances read the weights from serving peers. */
typedef enum {
    KVIO_SYNC_SEQUENTIAL = 0,
    KVIO_SYNC_CHAIN,
    KVIO_SYNC_TREE,
    KVIO_SYNC_P2P,
} kvio_sync_topology_t;


/* The `weight_sync:` section. */
typedef struct kvio_sync_config {
    int granularity;         /* kvio_sync_granularity_t */
    uint64_t bucket_size;
    int64_t control_ns;      /* per message: the RPC or notice that goes with it */
    int64_t pipeline_depth;  /* buckets in flight (1: one after the other) */
    double delta_fraction;   /* share of the elements that changed (0: full weights) */
    int delta_encoding;      /* kvio_delta_encoding_t */
    int64_t train_tp, train_pp; /* the trainer's layout */
    int topology;            /* kvio_sync_topology_t, across nodes */
    int64_t gpus_per_node;
    double nic_bandwidth;    /* bytes/s per node, across nodes */
    uint64_t chunk;          /* chain: the unit each hop forwards */
    int64_t tensor_overhead_ns; /* per tensor at reload (load_weights) */
    int64_t peers;           /* p2p: serving instances that hold and send the weights */
} kvio_sync_config_t;

extern const kvio_opt_t kvio_sync_options[];

/* One bucket's way: its bytes, what moved (with a delta), its tensors, and
 * when (ns from the start) each stage ended for the last GPU. */
typedef struct kvio_sync_bucket {
    uint64_t bytes, wire_bytes;
    uint32_t tensors;
    int64_t staged_ns, broadcast_ns, reloaded_ns;
} kvio_sync_bucket_t;

typedef struct kvio_sync_plan {
    kvio_sync_bucket_t *buckets;
    size_t num_buckets;
    int64_t *arrival_ns;    /* per serving instance: its last bucket reloaded */
    size_t num_instances;
    uint64_t bytes, wire_bytes, messages;
    /* Per update, across nodes: the bytes the source puts (its own node's
     * copy and each node it sends to) and the bytes other nodes forward. */
    uint64_t source_wire_bytes, forwarded_wire_bytes;
    int64_t staged_ns;      /* the sending side done: the trainer's last bucket
                               staged (p2p: the peers' last bucket read) */
    int64_t total_ns;       /* the last instance done */
} kvio_sync_plan_t;

/* Plans one update of model's weights to instances serving instances of
 * serve_tp GPUs each (gpu's links). With topology p2p the instances are
 * the joining ones, updated together from config->peers serving instances
 * of the same shape: each peer GPU holds an equal share of the tensors in
 * host memory and its buckets; the joiners' GPUs (a NIC each) read them in
 * rounds from distinct peer NICs, each bucket is then broadcast within the
 * joining group and reloaded. Free with kvio_sync_plan_free. Refuses what
 * kvio_sync_check refuses. */
kvio_status_t kvio_sync_plan(const kvio_sync_config_t *config, const kvio_model_t *model,
                             const kvio_gpu_t *gpu, int64_t serve_tp, int64_t instances,
                             kvio_sync_plan_t *plan_p, char *error_p, size_t error_len);
void kvio_sync_plan_free(kvio_sync_plan_t *plan);

/* What no plan can model: with topology p2p, a delta (a joining instance
 * has no weights to apply it to) or a trainer layout (the peers send in
 * the serving layout). KVIO_ERR_CONFIG naming the key in error_p. */
kvio_status_t kvio_sync_check(const kvio_sync_config_t *config, int64_t serve_tp,
                              char *error_p, size_t error_len);

/* Emulate mode: the buckets of one update whose weights are total_bytes,
 * the model's tensors scaled to it (each keeps its share of the model, in
 * 8-byte multiples, the last takes the rest; their number stays the
 * model's), packed by config's granularity. Fills plan_p's buckets
 * (bytes, wire_bytes = bytes, tensors), num_buckets, bytes and messages (one
 * per bucket); no times. Free with kvio_sync_plan_free. KVIO_ERR_CONFIG
 * when total_bytes cannot hold 8 bytes per tensor. */
kvio_status_t kvio_sync_buckets(const kvio_sync_config_t *config, const kvio_model_t *model,
                                uint64_t total_bytes, kvio_sync_plan_t *plan_p, char *error_p,
                                size_t error_len);

#endif
