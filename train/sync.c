/* The weight-sync model (kvio/sync.h): buckets of the model's tensors, three
 * pipelined stages per bucket, the broadcast topology across nodes, or the
 * P2P path that feeds joining instances from serving peers. */
#include "kvio/sync.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/model.h"

static const char *const granularity_names[] = {"off", "whole", "bucket", "tensor", NULL};
static const char *const topology_names[] = {"sequential", "chain", "tree", "p2p", NULL};
static const char *const encoding_names[] = {"index_value", "bitmap", NULL};

const kvio_opt_t kvio_sync_options[] = {
    {.key = "granularity", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_sync_config_t, granularity), .values = granularity_names,
     .default_value = "off",
     .help = "off: train.bytes through train.transport's model; whole, bucket or tensor: the "
             "model's tensors as one message, packed into buckets, or one per tensor (simulate: "
             "modelled; emulate: real buckets over train.transport.kind ucx, the tensors "
             "scaled to train.bytes)"},
    {.key = "bucket_size", .type = KVIO_OPT_SIZE,
     .offset = offsetof(kvio_sync_config_t, bucket_size), .default_value = "2GiB",
     .flags = KVIO_OPT_HAS_MIN, .min = 1, .help = "bucket: tensors packed up to this size"},
    {.key = "control", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_sync_config_t, control_ns), .default_value = "1ms",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 60e9,
     .help = "per message: the RPC or notice that goes with it (simulate; emulate measures "
             "its notices)"},
    {.key = "pipeline_depth", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_sync_config_t, pipeline_depth), .default_value = "2",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 64,
     .help = "buckets in flight through stage, broadcast and reload (1: one at a time)"},
    {.key = "delta", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_sync_config_t, delta_fraction), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "share of the elements that changed: only they move (0: the full weights); "
             "emulate: the trainer changes that share each version, buckets carry only the "
             "changes and the serve ranks apply them"},
    {.key = "delta_encoding", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_sync_config_t, delta_encoding), .values = encoding_names,
     .default_value = "index_value",
     .help = "index_value: a 4-byte index per changed element; bitmap: one bit per element"},
    {.key = "train_tp", .type = KVIO_OPT_INT, .offset = offsetof(kvio_sync_config_t, train_tp),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "the trainer's tensor parallelism (0: as the serving cost.tensor_parallel)"},
    {.key = "train_pp", .type = KVIO_OPT_INT, .offset = offsetof(kvio_sync_config_t, train_pp),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "the trainer's pipeline stages"},
    {.key = "topology", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_sync_config_t, topology),
     .values = topology_names, .default_value = "tree",
     .help = "across nodes (emulate: between serve ranks): sequential (one after the "
             "other), chain (forwarded in chunks; emulate: bucket by bucket) or tree (binary); "
             "p2p: the serve ranks are instances joining a running cluster and read the "
             "weights from peers' host copies over the NICs (simulate)"},
    {.key = "gpus_per_node", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_sync_config_t, gpus_per_node), .default_value = "8",
     .flags = KVIO_OPT_HAS_MIN, .min = 1, .help = "GPUs a node holds (its GPU link joins them)"},
    {.key = "nic_bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_sync_config_t, nic_bandwidth), .default_value = "50e9",
     .flags = KVIO_OPT_HAS_MIN, .min = 1e6,
     .help = "bytes/s a node sends or receives across nodes (default: one 400 Gb/s NIC)"},
    {.key = "tensor_overhead", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_sync_config_t, tensor_overhead_ns), .default_value = "20us",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 60e9,
     .help = "per tensor at reload: the serving engine's load_weights step for it"},
    {.key = "chunk", .type = KVIO_OPT_SIZE, .offset = offsetof(kvio_sync_config_t, chunk),
     .default_value = "64MiB", .flags = KVIO_OPT_HAS_MIN, .min = 4096,
     .help = "chain: the unit each node forwards"},
    {.key = "peers", .type = KVIO_OPT_INT, .offset = offsetof(kvio_sync_config_t, peers),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 4096,
     .help = "p2p: serving instances (cost.tensor_parallel GPUs each) whose host copies of the "
             "weights the joining serve ranks read"},
    {.key = NULL},
};

void kvio_sync_plan_free(kvio_sync_plan_t *plan)
{
    free(plan->buckets);
    free(plan->arrival_ns);
    memset(plan, 0, sizeof(*plan));
}

/* Packs the tensors into buckets by the granularity; a bucket never spans
 * two owners (owner NULL: one owner for all). */
static kvio_status_t make_buckets(const kvio_sync_config_t *config, const kvio_tensor_t *tensors,
                                  size_t count, const uint32_t *owner, kvio_sync_plan_t *plan)
{
    plan->buckets = calloc(count > 0 ? count : 1, sizeof(*plan->buckets));
    if (plan->buckets == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < count; i++) {
        kvio_sync_bucket_t *last =
            plan->num_buckets > 0 ? &plan->buckets[plan->num_buckets - 1] : NULL;
        bool join = last != NULL && (owner == NULL || owner[i] == owner[i - 1]) &&
                    (config->granularity == KVIO_SYNC_WHOLE ||
                     (config->granularity == KVIO_SYNC_BUCKET &&
                      last->bytes + tensors[i].bytes <= config->bucket_size));
        if (!join)
            last = &plan->buckets[plan->num_buckets++];
        last->bytes += tensors[i].bytes;
        last->tensors++;
    }
    return KVIO_OK;
}

/* P2P: the tensors shared out among the peers' GPUs (the owners) in
 * checkpoint order, an equal share of the bytes each (a tensor goes to the
 * owner its first byte falls to, as checkpoint-engine's ranks each hold the
 * part of the checkpoint they loaded), packed into buckets per owner, then
 * taken round by round, one bucket from each owner in turn (checkpoint-engine
 * orders them by RDMA device so that a round's receivers read from
 * different NICs). */
static kvio_status_t make_peer_buckets(const kvio_sync_config_t *config,
                                       const kvio_tensor_t *tensors, size_t count,
                                       int64_t owners, kvio_sync_plan_t *plan)
{
    uint32_t *owner = malloc((count > 0 ? count : 1) * sizeof(*owner));
    size_t *first = calloc((size_t)owners + 1, sizeof(*first));
    kvio_sync_bucket_t *ordered = NULL;
    kvio_status_t status = owner != NULL && first != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    double total = 0, before = 0;
    for (size_t i = 0; i < count; i++)
        total += (double)tensors[i].bytes;
    for (size_t i = 0; status == KVIO_OK && i < count; i++) {
        double share = total > 0 ? floor(before / total * (double)owners) : 0;
        owner[i] = (uint32_t)fmin(share, (double)(owners - 1));
        before += (double)tensors[i].bytes;
    }
    if (status == KVIO_OK)
        status = make_buckets(config, tensors, count, owner, plan);
    if (status == KVIO_OK &&
        (ordered = calloc(plan->num_buckets > 0 ? plan->num_buckets : 1, sizeof(*ordered))) ==
            NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK) {
        /* first[o]: owner o's first bucket (the buckets come owner by owner). */
        size_t tensor = 0, most = 0;
        for (size_t b = 0; b < plan->num_buckets; b++) {
            first[owner[tensor] + 1] = b + 1;
            tensor += plan->buckets[b].tensors;
        }
        for (int64_t o = 1; o <= owners; o++) {
            if (first[o] < first[o - 1])
                first[o] = first[o - 1]; /* an owner without tensors */
            most = first[o] - first[o - 1] > most ? first[o] - first[o - 1] : most;
        }
        size_t placed = 0;
        for (size_t round = 0; round < most; round++)
            for (int64_t o = 0; o < owners; o++)
                if (first[o] + round < first[o + 1])
                    ordered[placed++] = plan->buckets[first[o] + round];
        free(plan->buckets);
        plan->buckets = ordered;
    }
    free(owner);
    free(first);
    return status;
}

kvio_status_t kvio_sync_check(const kvio_sync_config_t *config, int64_t serve_tp,
                              char *error_p, size_t error_len)
{
    if (config->topology != KVIO_SYNC_P2P)
        return KVIO_OK;
    const char *key = NULL, *why = NULL;
    if (config->granularity == KVIO_SYNC_OFF) {
        key = "weight_sync.granularity";
        why = "is off (train.bytes through train.transport); P2P moves the model's tensors "
              "(set granularity: whole, bucket or tensor)";
    } else if (config->delta_fraction > 0) {
        key = "weight_sync.delta";
        why = "is above 0; a joining instance has no weights to apply a delta to, P2P moves "
              "the full weights (set delta: 0)";
    } else if ((config->train_tp > 0 && config->train_tp != serve_tp) || config->train_pp != 1) {
        key = "weight_sync.train_tp";
        why = "or train_pp sets the trainer's layout; P2P peers send in the serving layout "
              "(leave train_tp: 0 and train_pp: 1)";
    }
    if (key == NULL)
        return KVIO_OK;
    snprintf(error_p, error_len, "weight_sync.topology: p2p: %s %s", key, why);
    return KVIO_ERR_CONFIG;
}

/* What a bucket puts on the wire: with a delta, the changed elements and
 * their indices (or a bitmap of the changed ones). */
static uint64_t wire_bytes(const kvio_sync_config_t *config, uint64_t bytes, double element)
{
    if (config->delta_fraction <= 0)
        return bytes;
    double elements = (double)bytes / element;
    double changed = elements * config->delta_fraction;
    double wire = config->delta_encoding == KVIO_DELTA_BITMAP
                      ? changed * element + elements / 8
                      : changed * (element + 4);
    return (uint64_t)llround(wire);
}

/* Across nodes, the time the broadcast of a bucket of wire bytes holds the
 * busiest NIC (its throughput), and how much later (or earlier) than the
 * broadcast's end node k (0: the source's) has it. */
static double across_busy_s(const kvio_sync_config_t *config, double wire, int64_t nodes)
{
    if (nodes < 2)
        return 0;
    double whole = wire / config->nic_bandwidth;
    switch (config->topology) {
    case KVIO_SYNC_SEQUENTIAL:
        return whole * (double)(nodes - 1); /* the source sends to each in turn */
    case KVIO_SYNC_CHAIN:
        return whole; /* each node forwards once, in chunks */
    default: /* tree, and p2p's joining group */
        return whole * (nodes > 2 ? 2 : 1); /* a binary tree: each node sends twice */
    }
}

static double across_offset_s(const kvio_sync_config_t *config, double wire, int64_t node,
                              int64_t nodes)
{
    if (nodes < 2 || node == 0)
        return 0;
    double whole = wire / config->nic_bandwidth;
    switch (config->topology) {
    case KVIO_SYNC_SEQUENTIAL:
        return -whole * (double)(nodes - 1 - node);
    case KVIO_SYNC_CHAIN:
        return (double)(wire < (double)config->chunk ? wire : (double)config->chunk) /
               config->nic_bandwidth * (double)(node - 1);
    default: /* store and forward, level by level */
        return whole * (ceil(log2((double)node + 1)) - 1);
    }
}

kvio_status_t kvio_sync_plan(const kvio_sync_config_t *config, const kvio_model_t *model,
                             const kvio_gpu_t *gpu, int64_t serve_tp, int64_t instances,
                             kvio_sync_plan_t *plan_p, char *error_p, size_t error_len)
{
    kvio_sync_plan_t plan = {0};
    kvio_tensor_t *tensors = NULL;
    size_t count = 0;
    bool p2p = config->topology == KVIO_SYNC_P2P;
    if (serve_tp < 1 || instances < 1 || gpu->host_bandwidth <= 0 ||
        gpu->link_bandwidth <= 0 || gpu->hbm_bandwidth <= 0) {
        snprintf(error_p, error_len, "weight_sync: needs serve ranks, a tensor parallelism "
                 "and a GPU with host, GPU-link and HBM bandwidths");
        return KVIO_ERR_CONFIG;
    }
    kvio_status_t status = kvio_sync_check(config, serve_tp, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* P2P: the peers' GPUs own the weights, a share each. */
    int64_t owners = config->peers * serve_tp;
    status = kvio_model_tensors(model, &tensors, &count);
    if (status == KVIO_OK)
        status = p2p ? make_peer_buckets(config, tensors, count, owners, &plan)
                     : make_buckets(config, tensors, count, NULL, &plan);
    free(tensors);
    int64_t gpus = serve_tp * instances;
    int64_t nodes = (gpus + config->gpus_per_node - 1) / config->gpus_per_node;
    plan.num_instances = (size_t)instances;
    if (status == KVIO_OK && (plan.arrival_ns = calloc((size_t)instances,
                                                       sizeof(int64_t))) == NULL)
        status = KVIO_ERR_NOMEM;
    /* Each bucket's stage ends, and when each staging lane is free again.
     * Broadcast: a lane is a GPU of the source node, staging from host
     * memory over PCIe. P2P: a lane is a joining GPU reading a bucket from a
     * peer's host memory into its own memory (RDMA, GPUDirect) through its
     * NIC — checkpoint-engine picks one receiver per RDMA device, and kvio
     * assumes a NIC per GPU, each with its share of nic_bandwidth — no more
     * lanes than the peers have GPUs, so that a round's reads leave from
     * different NICs; a lane moves at its NIC's share or PCIe, the lesser.
     * The rest is the broadcast path's, as checkpoint-engine runs one loop
     * for both: only the copy into the GPU differs. */
    size_t lanes = (size_t)(gpus < config->gpus_per_node ? gpus : config->gpus_per_node);
    double stage_bandwidth = gpu->host_bandwidth;
    if (p2p) {
        lanes = (size_t)(gpus < owners ? gpus : owners);
        stage_bandwidth = fmin(stage_bandwidth,
                               config->nic_bandwidth / (double)config->gpus_per_node);
    }
    double *ends = status == KVIO_OK ? calloc(3 * plan.num_buckets + lanes, sizeof(double))
                                     : NULL;
    if (status == KVIO_OK && ends == NULL)
        status = KVIO_ERR_NOMEM;
    if (status != KVIO_OK) {
        kvio_sync_plan_free(&plan);
        snprintf(error_p, error_len, "weight_sync: out of memory planning %zu tensors", count);
        return status;
    }
    double element = model->weight_dtype_bytes > 0 ? model->weight_dtype_bytes
                                                   : model->dtype_bytes > 0 ? model->dtype_bytes
                                                                            : 2;
    int64_t train_shards = (config->train_tp > 0 ? config->train_tp : serve_tp) * config->train_pp;
    /* A serving shard gathered from several trainer shards takes a message
     * from each. */
    double messages = train_shards > serve_tp ? ceil((double)train_shards / (double)serve_tp)
                                              : 1;
    double control_s = (double)config->control_ns / 1e9;
    bool in_node = (gpus < config->gpus_per_node ? gpus : config->gpus_per_node) > 1;
    for (size_t b = 0; b < plan.num_buckets; b++) {
        kvio_sync_bucket_t *bucket = &plan.buckets[b];
        bucket->wire_bytes = wire_bytes(config, bucket->bytes, element);
        plan.bytes += bucket->bytes;
        plan.wire_bytes += bucket->wire_bytes;
    }
    plan.messages = (uint64_t)((double)plan.num_buckets * messages);
    /* The copies across nodes: the source node's, and the ones other nodes
     * forward (a chain's or a tree's). The source stages one copy into its
     * own node either way. */
    int64_t others = nodes > 1 ? nodes - 1 : 0;
    int64_t from_source = config->topology == KVIO_SYNC_SEQUENTIAL ? others
                          : config->topology == KVIO_SYNC_CHAIN    ? (others > 0 ? 1 : 0)
                                                                   : (others < 2 ? others : 2);
    plan.source_wire_bytes = plan.wire_bytes * (uint64_t)(1 + from_source);
    plan.forwarded_wire_bytes = plan.wire_bytes * (uint64_t)(others - from_source);
    size_t depth = (size_t)config->pipeline_depth;
    /* The lanes stage buckets in turn; the broadcast (to every serving GPU;
     * P2P: within the joining group, across its nodes as a binary tree, as
     * NCCL's broadcast in checkpoint-engine) and the reload follow, depth
     * buckets in flight. Node k reloads when its copy arrives (its offset in
     * the topology across nodes). */
    double *lane_free = ends + 3 * plan.num_buckets;
    double *stage = ends, *broadcast = ends + plan.num_buckets, *reload = ends + 2 * plan.num_buckets;
    double tensor_s = (double)config->tensor_overhead_ns / 1e9, last_reload_s = 0;
    for (size_t b = 0; b < plan.num_buckets; b++) {
        kvio_sync_bucket_t *bucket = &plan.buckets[b];
        double wire = (double)bucket->wire_bytes;
        double stage_s = wire / stage_bandwidth + control_s * messages;
        double broadcast_s = fmax(in_node ? wire / gpu->link_bandwidth : 0,
                                  across_busy_s(config, wire, nodes)) +
                             control_s;
        double shard = (double)bucket->bytes / (double)serve_tp;
        double reload_s = shard / gpu->hbm_bandwidth * (config->delta_fraction > 0 ? 2 : 1) +
                          tensor_s * bucket->tensors;
        size_t lane = b % lanes;
        double start = lane_free[lane];
        if (b >= depth)
            start = fmax(start, reload[b - depth]);
        stage[b] = start + stage_s;
        lane_free[lane] = stage[b];
        broadcast[b] = fmax(b > 0 ? broadcast[b - 1] : 0, stage[b]) + broadcast_s;
        /* The last node to get it (the reload every node waits for). */
        double offset = across_offset_s(config, wire, nodes - 1, nodes);
        reload[b] = fmax(b > 0 ? reload[b - 1] : 0, broadcast[b] + fmax(offset, 0)) + reload_s;
        last_reload_s = reload_s;
        bucket->staged_ns = (int64_t)llround(stage[b] * 1e9);
        bucket->broadcast_ns = (int64_t)llround(broadcast[b] * 1e9);
        bucket->reloaded_ns = (int64_t)llround(reload[b] * 1e9);
        plan.staged_ns = bucket->staged_ns > plan.staged_ns ? bucket->staged_ns : plan.staged_ns;
    }
    /* Node k is done its topology offset from the last bucket's broadcast,
     * plus that bucket's reload; an instance when its last node is (the
     * offsets grow with k in every topology). */
    size_t last = plan.num_buckets > 0 ? plan.num_buckets - 1 : 0;
    for (int64_t i = 0; i < instances && plan.num_buckets > 0; i++) {
        int64_t node = ((i + 1) * serve_tp - 1) / config->gpus_per_node;
        double wire = (double)plan.buckets[last].wire_bytes;
        double end = node == nodes - 1
                         ? reload[last]
                         : fmax(broadcast[last] + across_offset_s(config, wire, node, nodes), 0) +
                               last_reload_s;
        plan.arrival_ns[i] = (int64_t)llround(end * 1e9);
        plan.total_ns = plan.arrival_ns[i] > plan.total_ns ? plan.arrival_ns[i] : plan.total_ns;
    }
    free(ends);
    *plan_p = plan;
    return KVIO_OK;
}

kvio_status_t kvio_sync_buckets(const kvio_sync_config_t *config, const kvio_model_t *model,
                                uint64_t total_bytes, kvio_sync_plan_t *plan_p, char *error_p,
                                size_t error_len)
{
    kvio_sync_plan_t plan = {0};
    kvio_tensor_t *tensors = NULL;
    size_t count = 0;
    kvio_status_t status = kvio_model_tensors(model, &tensors, &count);
    if (status != KVIO_OK || count == 0) {
        free(tensors);
        snprintf(error_p, error_len, "weight_sync: the model has no tensors");
        return status != KVIO_OK ? status : KVIO_ERR_CONFIG;
    }
    if (total_bytes < 8 * (uint64_t)count) {
        free(tensors);
        snprintf(error_p, error_len, "weight_sync: train.bytes (%llu bytes) cannot hold the "
                 "model's %zu tensors (8 bytes each at least)",
                 (unsigned long long)total_bytes, count);
        return KVIO_ERR_CONFIG;
    }
    double model_bytes = 0;
    for (size_t i = 0; i < count; i++)
        model_bytes += (double)tensors[i].bytes;
    /* Each tensor's share, rounded down to 8 bytes (8 at least, which the
     * others' rounding down leaves room for); the last takes the rest. */
    uint64_t placed = 0;
    for (size_t i = 0; i + 1 < count; i++) {
        uint64_t share = (uint64_t)((double)tensors[i].bytes / model_bytes * (double)total_bytes);
        share = share / 8 * 8;
        tensors[i].bytes = share < 8 ? 8 : share;
        placed += tensors[i].bytes;
    }
    if (placed + 8 > total_bytes) {
        free(tensors);
        snprintf(error_p, error_len, "weight_sync: train.bytes (%llu bytes) is too small for "
                 "the model's %zu tensors", (unsigned long long)total_bytes, count);
        return KVIO_ERR_CONFIG;
    }
    tensors[count - 1].bytes = total_bytes - placed;
    status = make_buckets(config, tensors, count, NULL, &plan);
    free(tensors);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "weight_sync: out of memory planning %zu tensors", count);
        return status;
    }
    for (size_t b = 0; b < plan.num_buckets; b++) {
        plan.buckets[b].wire_bytes = plan.buckets[b].bytes;
        plan.bytes += plan.buckets[b].bytes;
    }
    plan.wire_bytes = plan.bytes;
    plan.source_wire_bytes = plan.bytes;
    plan.messages = plan.num_buckets;
    *plan_p = plan;
    return KVIO_OK;
}
