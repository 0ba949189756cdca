/* The shared KV store's index and its simulated form: placement (the block
 * hash modulo the ranks), one LRU shard per rank, and per link (asking rank
 * -> holding rank) the accesses and the bytes, each access costing its
 * link's latency + bytes / bandwidth. The emulate endpoint, which moves the
 * bytes over UCX, is kvcache/shared_store_ucx.c. */
#include "kvcache/shared_store_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARD_BLOCKS (1u << 30)

/* ---------- placement and checks ---------- */

uint32_t kvio_shared_store_holder(kvio_hash_t hash, uint32_t num_ranks)
{
    /* The high half: the low half keys the shard's map, so that a holder's
     * blocks do not all fall into one residue class of its table. */
    return num_ranks > 0 ? (uint32_t)(hash.high % num_ranks) : 0;
}

uint32_t shared_shard_capacity(const kvio_shared_store_config_t *config)
{
    return (uint32_t)(config->shard_bytes / config->block_bytes);
}

kvio_status_t kvio_shared_store_check(const kvio_shared_store_config_t *config, bool simulate,
                                      char *error_p, size_t error_len)
{
    if (config->num_ranks == 0) {
        snprintf(error_p, error_len, "shared store: no rank to hold it");
        return KVIO_ERR_CONFIG;
    }
    if (config->block_bytes == 0) {
        snprintf(error_p, error_len, "shared store: blocks of 0 bytes");
        return KVIO_ERR_CONFIG;
    }
    uint64_t blocks = config->shard_bytes / config->block_bytes;
    if (blocks == 0 || blocks > MAX_SHARD_BLOCKS) {
        snprintf(error_p, error_len,
                 "shared store: size %llu bytes per rank is %llu blocks of %llu bytes; a shard "
                 "holds 1 to %u",
                 (unsigned long long)config->shard_bytes, (unsigned long long)blocks,
                 (unsigned long long)config->block_bytes, MAX_SHARD_BLOCKS);
        return KVIO_ERR_CONFIG;
    }
    if (simulate && (!(config->local_bandwidth > 0) || !(config->remote_bandwidth > 0) ||
                     config->local_latency_ns < 0 || config->remote_latency_ns < 0)) {
        snprintf(error_p, error_len,
                 "shared store: simulate needs bandwidths above 0 and latencies of 0 or more "
                 "(local %.3g bytes/s + %lld ns, remote %.3g bytes/s + %lld ns)",
                 config->local_bandwidth, (long long)config->local_latency_ns,
                 config->remote_bandwidth, (long long)config->remote_latency_ns);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

/* ---------- a shard ---------- */

kvio_status_t shared_shard_init(shared_shard_t *shard, uint32_t capacity)
{
    memset(shard, 0, sizeof(*shard));
    shard->capacity = capacity;
    shard->entries = malloc((size_t)capacity * sizeof(*shard->entries));
    if (shard->entries == NULL || kvio_map_reserve(&shard->map, capacity) != KVIO_OK) {
        shared_shard_fini(shard);
        return KVIO_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < capacity; i++)
        shard->entries[i].next = i + 1 < capacity ? i + 1 : SHARED_NO_ENTRY;
    shard->free_head = 0;
    shard->lru_head = shard->lru_tail = SHARED_NO_ENTRY;
    return KVIO_OK;
}

void shared_shard_fini(shared_shard_t *shard)
{
    free(shard->entries);
    shard->entries = NULL;
    kvio_map_fini(&shard->map);
}

static void lru_unlink(shared_shard_t *shard, uint32_t entry)
{
    shared_entry_t *e = &shard->entries[entry];
    if (e->prev != SHARED_NO_ENTRY)
        shard->entries[e->prev].next = e->next;
    else
        shard->lru_head = e->next;
    if (e->next != SHARED_NO_ENTRY)
        shard->entries[e->next].prev = e->prev;
    else
        shard->lru_tail = e->prev;
}

static void lru_push_front(shared_shard_t *shard, uint32_t entry)
{
    shared_entry_t *e = &shard->entries[entry];
    e->prev = SHARED_NO_ENTRY;
    e->next = shard->lru_head;
    if (shard->lru_head != SHARED_NO_ENTRY)
        shard->entries[shard->lru_head].prev = entry;
    shard->lru_head = entry;
    if (shard->lru_tail == SHARED_NO_ENTRY)
        shard->lru_tail = entry;
}

uint32_t shared_shard_find(shared_shard_t *shard, kvio_hash_t hash, bool touch)
{
    uint32_t value = kvio_map_get(&shard->map, hash.low);
    if (value == 0)
        return SHARED_NO_ENTRY;
    uint32_t entry = value - 1;
    /* Two hashes with one low half: the one held is not this one. */
    if (shard->entries[entry].hash.high != hash.high)
        return SHARED_NO_ENTRY;
    if (touch) {
        lru_unlink(shard, entry);
        lru_push_front(shard, entry);
    }
    return entry;
}

uint32_t shared_shard_insert(shared_shard_t *shard, kvio_hash_t hash, uint64_t checksum,
                             bool *fresh_p)
{
    uint32_t entry = shared_shard_find(shard, hash, true);
    if (entry != SHARED_NO_ENTRY) {
        *fresh_p = false;
        return entry;
    }
    if (kvio_map_get(&shard->map, hash.low) != 0) {
        /* The other hash of the same low half leaves: one entry per key. */
        uint32_t other = kvio_map_get(&shard->map, hash.low) - 1;
        lru_unlink(shard, other);
        shard->entries[other].next = shard->free_head;
        shard->free_head = other;
        shard->held--;
    }
    if (shard->free_head == SHARED_NO_ENTRY) {
        uint32_t victim = shard->lru_tail;
        lru_unlink(shard, victim);
        (void)kvio_map_set(&shard->map, shard->entries[victim].hash.low, 0);
        shard->entries[victim].next = SHARED_NO_ENTRY;
        shard->free_head = victim;
        shard->held--;
        shard->evictions++;
    }
    entry = shard->free_head;
    shard->free_head = shard->entries[entry].next;
    shard->entries[entry].hash = hash;
    shard->entries[entry].checksum = checksum;
    /* Reserved for capacity keys: setting never grows the map. */
    (void)kvio_map_set(&shard->map, hash.low, entry + 1);
    lru_push_front(shard, entry);
    shard->held++;
    shard->stored++;
    *fresh_p = true;
    return entry;
}

void shared_shard_remove(shared_shard_t *shard, uint32_t entry)
{
    lru_unlink(shard, entry);
    (void)kvio_map_set(&shard->map, shard->entries[entry].hash.low, 0);
    shard->entries[entry].next = shard->free_head;
    shard->free_head = entry;
    shard->held--;
    shard->stored--;
}

kvio_shared_shard_stats_t shared_shard_stats(const shared_shard_t *shard)
{
    return (kvio_shared_shard_stats_t){.capacity = shard->capacity, .held = shard->held,
                                       .stored = shard->stored, .evictions = shard->evictions,
                                       .requests = shard->requests};
}

/* ---------- simulate: every shard here ---------- */

struct kvio_shared_store {
    kvio_shared_store_config_t config;
    shared_shard_t *shards;          /* num_ranks */
    kvio_shared_link_stats_t *links; /* [rank * num_ranks + holder] */
    uint32_t *batch_blocks;          /* num_ranks: a batch's blocks per holder */
};

kvio_status_t kvio_shared_store_create(const kvio_shared_store_config_t *config,
                                       kvio_shared_store_t **store_p, char *error_p,
                                       size_t error_len)
{
    kvio_status_t status = kvio_shared_store_check(config, true, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    uint32_t ranks = config->num_ranks;
    kvio_shared_store_t *store = calloc(1, sizeof(*store));
    if (store != NULL) {
        store->config = *config;
        store->shards = calloc(ranks, sizeof(*store->shards));
        store->links = calloc((size_t)ranks * ranks, sizeof(*store->links));
        store->batch_blocks = calloc(ranks, sizeof(*store->batch_blocks));
    }
    status = store != NULL && store->shards != NULL && store->links != NULL &&
                     store->batch_blocks != NULL
                 ? KVIO_OK
                 : KVIO_ERR_NOMEM;
    uint32_t capacity = shared_shard_capacity(config);
    for (uint32_t r = 0; status == KVIO_OK && r < ranks; r++)
        status = shared_shard_init(&store->shards[r], capacity);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "shared store: out of memory for %u shards of %u blocks",
                 ranks, capacity);
        kvio_shared_store_destroy(store);
        return status;
    }
    *store_p = store;
    return KVIO_OK;
}

void kvio_shared_store_destroy(kvio_shared_store_t *store)
{
    if (store == NULL)
        return;
    for (uint32_t r = 0; store->shards != NULL && r < store->config.num_ranks; r++)
        shared_shard_fini(&store->shards[r]);
    free(store->shards);
    free(store->links);
    free(store->batch_blocks);
    free(store);
}

static kvio_shared_link_stats_t *link_of(kvio_shared_store_t *store, uint32_t rank,
                                         uint32_t holder)
{
    return &store->links[(size_t)rank * store->config.num_ranks + holder];
}

/* The batch's links, side by side: each holder's blocks over its link
 * (latency + bytes / bandwidth), the batch as long as the slowest; each
 * link's time is charged to it (put or get). Clears batch_blocks. */
static int64_t batch_cost(kvio_shared_store_t *store, uint32_t rank, bool put)
{
    const kvio_shared_store_config_t *config = &store->config;
    int64_t slowest_ns = 0;
    for (uint32_t holder = 0; holder < config->num_ranks; holder++) {
        uint32_t blocks = store->batch_blocks[holder];
        store->batch_blocks[holder] = 0;
        if (blocks == 0)
            continue;
        bool local = holder == rank;
        double bandwidth = local ? config->local_bandwidth : config->remote_bandwidth;
        int64_t cost_ns = (local ? config->local_latency_ns : config->remote_latency_ns) +
                          (int64_t)llround((double)config->block_bytes * blocks * 1e9 / bandwidth);
        kvio_shared_link_stats_t *link = link_of(store, rank, holder);
        /* As emulate sends them: a request per holder per piece. */
        uint32_t requests = (blocks + SHARED_BATCH_HASHES - 1) / SHARED_BATCH_HASHES;
        link->requests += requests;
        store->shards[holder].requests += requests;
        if (put)
            link->put_ns += cost_ns;
        else
            link->get_ns += cost_ns;
        if (cost_ns > slowest_ns)
            slowest_ns = cost_ns;
    }
    return slowest_ns;
}

size_t kvio_shared_store_put(kvio_shared_store_t *store, uint32_t rank,
                             const kvio_hash_t *hashes, size_t count, int64_t *cost_ns_p)
{
    uint32_t ranks = store->config.num_ranks;
    size_t stored = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t holder = kvio_shared_store_holder(hashes[i], ranks);
        kvio_shared_link_stats_t *link = link_of(store, rank, holder);
        bool fresh = false;
        (void)shared_shard_insert(&store->shards[holder], hashes[i], 0, &fresh);
        if (!fresh) {
            link->duplicates++;
            continue;
        }
        link->puts++;
        link->bytes_written += store->config.block_bytes;
        store->batch_blocks[holder]++;
        stored++;
    }
    *cost_ns_p = batch_cost(store, rank, true);
    return stored;
}

size_t kvio_shared_store_get(kvio_shared_store_t *store, uint32_t rank, const kvio_hash_t *hashes,
                             size_t count, int64_t *cost_ns_p)
{
    uint32_t ranks = store->config.num_ranks;
    size_t got = 0;
    for (; got < count; got++) {
        uint32_t holder = kvio_shared_store_holder(hashes[got], ranks);
        kvio_shared_link_stats_t *link = link_of(store, rank, holder);
        link->gets++;
        if (shared_shard_find(&store->shards[holder], hashes[got], true) == SHARED_NO_ENTRY) {
            link->misses++;
            break;
        }
        link->hits++;
        link->bytes_read += store->config.block_bytes;
        store->batch_blocks[holder]++;
    }
    *cost_ns_p = batch_cost(store, rank, false);
    return got;
}

uint32_t kvio_shared_store_ranks(const kvio_shared_store_t *store)
{
    return store->config.num_ranks;
}

bool kvio_shared_store_contains(const kvio_shared_store_t *store, kvio_hash_t hash)
{
    uint32_t holder = kvio_shared_store_holder(hash, store->config.num_ranks);
    /* The cast: a lookup without touching changes nothing. */
    return shared_shard_find((shared_shard_t *)&store->shards[holder], hash, false) !=
           SHARED_NO_ENTRY;
}

const kvio_shared_link_stats_t *kvio_shared_store_link(const kvio_shared_store_t *store,
                                                       uint32_t rank, uint32_t holder)
{
    return &store->links[(size_t)rank * store->config.num_ranks + holder];
}

kvio_shared_shard_stats_t kvio_shared_store_shard(const kvio_shared_store_t *store,
                                                  uint32_t holder)
{
    return shared_shard_stats(&store->shards[holder]);
}

#ifndef KVIO_HAVE_UCX
/* ---------- emulate without UCX: a clear refusal ---------- */

kvio_status_t kvio_shared_endpoint_create(kvio_rte_t *rte, int first_rank,
                                          const kvio_shared_store_config_t *config,
                                          kvio_shared_endpoint_t **endpoint_p, char *error_p,
                                          size_t error_len)
{
    (void)rte, (void)first_rank, (void)config, (void)endpoint_p;
    snprintf(error_p, error_len, "shared store: emulate moves blocks over UCX, not built");
    return KVIO_ERR_UNSUPPORTED;
}

kvio_status_t kvio_shared_endpoint_put(kvio_shared_endpoint_t *endpoint,
                                       const kvio_hash_t *hashes, const void *const *data,
                                       size_t count, int64_t *elapsed_ns_p)
{
    (void)endpoint, (void)hashes, (void)data, (void)count, (void)elapsed_ns_p;
    return KVIO_ERR_UNSUPPORTED;
}

kvio_status_t kvio_shared_endpoint_get(kvio_shared_endpoint_t *endpoint,
                                       const kvio_hash_t *hashes, void *const *data,
                                       size_t count, size_t *got_p, int64_t *elapsed_ns_p)
{
    (void)endpoint, (void)hashes, (void)data, (void)count, (void)got_p, (void)elapsed_ns_p;
    return KVIO_ERR_UNSUPPORTED;
}

bool kvio_shared_endpoint_contains(kvio_shared_endpoint_t *endpoint, kvio_hash_t hash)
{
    (void)endpoint, (void)hash;
    return false;
}

size_t kvio_shared_endpoint_lookup(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                                   size_t count, bool *held_p)
{
    (void)endpoint, (void)hashes;
    for (size_t i = 0; held_p != NULL && i < count; i++)
        held_p[i] = false;
    return 0;
}

const char *kvio_shared_endpoint_error(const kvio_shared_endpoint_t *endpoint)
{
    (void)endpoint;
    return "shared store: UCX not built";
}

uint32_t kvio_shared_endpoint_rank(const kvio_shared_endpoint_t *endpoint)
{
    (void)endpoint;
    return 0;
}

uint32_t kvio_shared_endpoint_ranks(const kvio_shared_endpoint_t *endpoint)
{
    (void)endpoint;
    return 0;
}

const kvio_shared_link_stats_t *kvio_shared_endpoint_link(const kvio_shared_endpoint_t *endpoint,
                                                          uint32_t holder)
{
    (void)endpoint, (void)holder;
    return NULL;
}

kvio_status_t kvio_shared_endpoint_stop(kvio_shared_endpoint_t *endpoint)
{
    (void)endpoint;
    return KVIO_ERR_UNSUPPORTED;
}

kvio_shared_shard_stats_t kvio_shared_endpoint_shard(const kvio_shared_endpoint_t *endpoint)
{
    (void)endpoint;
    return (kvio_shared_shard_stats_t){0};
}

void kvio_shared_endpoint_destroy(kvio_shared_endpoint_t *endpoint) { (void)endpoint; }
#endif
