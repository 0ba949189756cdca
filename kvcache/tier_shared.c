/* The shared tier: one KV store every serve rank reads and writes (Mooncake
 * Store, an LMCache server, Dynamo's KV block manager), each rank's entry a
 * view of it (kvio/shared_store.h: placement by block hash, an LRU shard of
 * `size` bytes per rank). The entry's bandwidth and latency are a link to
 * another rank's shard; `shared: {local_bandwidth, local_latency}` the link
 * to the rank's own. In simulate every lane's view reads one store, in
 * emulate the rank's endpoint to it (blocks over UCX): the framework,
 * kvcache/tier.c, calls them instead of its own index; this backend's table
 * gives the kind its name, options and model. */
#include "kvcache/tier_int.h"

#include <stddef.h>
#include <stdio.h>

typedef struct shared_options {
    double local_bandwidth;
    int64_t local_latency_ns;
} shared_options_t;

static const kvio_opt_t shared_options[] = {
    {.key = "local_bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(shared_options_t, local_bandwidth), .default_value = "25e9",
     .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "simulate: bytes/s between a rank and its own shard (host memory over PCIe)"},
    {.key = "local_latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(shared_options_t, local_latency_ns), .default_value = "10us",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "simulate: cost per batch from a rank's own shard"},
    {.key = NULL},
};

/* Simulate defaults of the remote link (another rank's shard), bytes/s
 * (GB = 1e9) and ns per batch: 12.5 GB/s + 20 us, one 100 Gb/s RDMA NIC
 * (Mooncake's transfer engine reaches its line rate on large batches) and a
 * round trip to the holder's metadata and memory. */
static void shared_model(const void *options, double *bandwidth_p, int64_t *latency_ns_p)
{
    (void)options;
    *bandwidth_p = 12.5e9;
    *latency_ns_p = 20000;
}

/* Never called: the framework makes a shared entry a view of the store
 * (simulate) or of the rank's endpoint to it (emulate, whose blocks move
 * over UCX), never a backend of its own. */
static kvio_status_t shared_init(void *priv, const kvio_tier_setup_t *setup, char *error_p,
                                 size_t error_len)
{
    (void)priv, (void)setup;
    snprintf(error_p, error_len, "shared tier: a view of a store, never a backend alone");
    return KVIO_ERR_INVALID;
}

static void shared_fini(void *priv) { (void)priv; }

static void shared_describe(const void *priv, char *text_p, size_t text_len)
{
    (void)priv;
    snprintf(text_p, text_len, "shared: a store every serve rank reads and writes");
}

static void shared_report(const void *priv, json_t *object)
{
    (void)priv;
    json_object_set_new(object, "held_by", json_string("every serve rank, a shard each"));
}

const kvio_tier_ops_t kvio_tier_shared = {
    .plugin = {.name = "shared",
               .help = "one store every serve rank reads and writes, a shard of `size` per rank "
                       "(placement by block hash, LRU per shard); bandwidth and latency: the "
                       "link to another rank's shard",
               .options = shared_options, .options_size = sizeof(shared_options_t)},
    .caps = KVIO_TIER_CAP_VOLATILE | KVIO_TIER_CAP_SHARED,
    .model = shared_model,
    .init = shared_init,
    .fini = shared_fini,
    .describe = shared_describe,
    .report = shared_report,
};

void kvio_tier_shared_config(const kvio_tier_config_t *config, uint32_t num_ranks,
                             uint64_t block_bytes, kvio_shared_store_config_t *store_p)
{
    const shared_options_t *options = kvio_choice_options(&config->kind);
    *store_p = (kvio_shared_store_config_t){
        .num_ranks = num_ranks, .block_bytes = block_bytes, .shard_bytes = config->size,
        .local_bandwidth = options->local_bandwidth,
        .local_latency_ns = options->local_latency_ns};
    kvio_tier_model(config, &store_p->remote_bandwidth, &store_p->remote_latency_ns);
}
