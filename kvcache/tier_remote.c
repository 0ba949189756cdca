/* The remote backend: blocks held elsewhere (a P/D prefill rank's memory)
 * that the tier's caller lists and moves. Each slot keeps the location the
 * caller gave; a batch of gets goes to the caller's fetch at once (its
 * transfers in flight together), or, where the caller maps the blocks into
 * this process, the framework copies them from there. It writes nothing:
 * puts are refused. */
#include "kvcache/tier_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"

typedef struct remote_priv {
    kvio_tier_remote_t remote;
    uint64_t *locations; /* per slot */
    uint64_t *batch;     /* a batch's locations */
    uint32_t capacity;
} remote_priv_t;

/* Never modelled from here: kvio_tier_create_remote sets both. */
static void remote_model(const void *options, double *bandwidth_p, int64_t *latency_ns_p)
{
    (void)options;
    *bandwidth_p = 25e9;
    *latency_ns_p = 10000;
}

static kvio_status_t remote_init(void *priv_p, const kvio_tier_setup_t *setup, char *error_p,
                                 size_t error_len)
{
    remote_priv_t *priv = priv_p;
    if (setup->config->remote == NULL || (setup->config->remote->fetch == NULL &&
                                          setup->config->remote->address == NULL)) {
        snprintf(error_p, error_len, "remote tier: nothing to fetch its blocks");
        return KVIO_ERR_INVALID;
    }
    priv->remote = *setup->config->remote;
    priv->capacity = setup->capacity;
    priv->locations = calloc(setup->capacity, sizeof(*priv->locations));
    priv->batch = calloc(setup->capacity, sizeof(*priv->batch));
    if (priv->locations == NULL || priv->batch == NULL) {
        snprintf(error_p, error_len, "remote tier: out of memory for %u locations",
                 setup->capacity);
        return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

static void remote_fini(void *priv_p)
{
    remote_priv_t *priv = priv_p;
    free(priv->locations);
    free(priv->batch);
}

static void remote_put_batch(void *priv_p, const uint32_t *slots, const kvio_hash_t *hashes,
                             const void *const *data, size_t count, kvio_status_t *statuses_p,
                             int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    (void)priv_p, (void)slots, (void)hashes, (void)data;
    for (size_t i = 0; i < count; i++) {
        statuses_p[i] = KVIO_ERR_UNSUPPORTED;
        latencies_ns_p[i] = 0;
    }
    snprintf(error_p, error_len, "remote tier: blocks are listed, never put");
}

static void remote_get_batch(void *priv_p, const uint32_t *slots, const kvio_hash_t *hashes,
                             void *const *data, size_t count, kvio_status_t *statuses_p,
                             int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    (void)hashes;
    remote_priv_t *priv = priv_p;
    for (size_t i = 0; i < count; i++)
        priv->batch[i] = priv->locations[slots[i]];
    uint64_t start_ns = kvio_time_ns();
    priv->remote.fetch(priv->remote.context, priv->batch, data, count, statuses_p, error_p,
                       error_len);
    int64_t took_ns = (int64_t)(kvio_time_ns() - start_ns);
    for (size_t i = 0; i < count; i++)
        latencies_ns_p[i] = took_ns; /* together: each done when the batch is */
}

static kvio_status_t remote_remove(void *priv_p, uint32_t slot, kvio_hash_t hash, char *error_p,
                                   size_t error_len)
{
    (void)hash, (void)error_p, (void)error_len;
    ((remote_priv_t *)priv_p)->locations[slot] = 0;
    return KVIO_OK;
}

static void remote_locate(void *priv_p, uint32_t slot, uint64_t location)
{
    ((remote_priv_t *)priv_p)->locations[slot] = location;
}

/* Mapped: the block's address in this process (its holder's memory). */
static const void *remote_address(const void *priv_p, uint32_t slot)
{
    const remote_priv_t *priv = priv_p;
    return priv->remote.address(priv->remote.context, priv->locations[slot]);
}

static void remote_describe(const void *priv_p, char *text_p, size_t text_len)
{
    const remote_priv_t *priv = priv_p;
    snprintf(text_p, text_len, "%s: %u blocks held by peers, %s",
             priv->remote.name != NULL ? priv->remote.name : "remote", priv->capacity,
             priv->remote.address != NULL ? "read through shared memory" : "fetched");
}

static void remote_report(const void *priv_p, json_t *object)
{
    (void)priv_p;
    json_object_set_new(object, "held_by", json_string("peers"));
}

/* Blocks the caller moves (fetch). */
const kvio_tier_ops_t kvio_tier_remote_ops = {
    .plugin = {.name = "remote", .help = "blocks held by peers, listed and fetched by the caller"},
    .priv_size = sizeof(remote_priv_t),
    .model = remote_model,
    .init = remote_init,
    .fini = remote_fini,
    .put_batch = remote_put_batch,
    .get_batch = remote_get_batch,
    .remove = remote_remove,
    .locate = remote_locate,
    .describe = remote_describe,
    .report = remote_report,
};

/* Blocks mapped into this process (address): the framework copies them, as
 * it copies a host tier's (volatile: nothing to delete). */
const kvio_tier_ops_t kvio_tier_remote_mapped_ops = {
    .plugin = {.name = "remote", .help = "blocks held by peers, read through shared memory"},
    .caps = KVIO_TIER_CAP_VOLATILE,
    .priv_size = sizeof(remote_priv_t),
    .model = remote_model,
    .init = remote_init,
    .fini = remote_fini,
    .put_batch = remote_put_batch,
    .remove = remote_remove,
    .address = remote_address,
    .locate = remote_locate,
    .describe = remote_describe,
    .report = remote_report,
};
