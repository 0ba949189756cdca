/* Private parts of the shared KV store: a shard, the index one rank's share
 * of the store keeps (its blocks by hash, least recently used last), used
 * by the simulated store (every shard in one process) and by an emulate
 * rank's server (its own shard, its bytes in slot order). */
#ifndef KVIO_SHARED_STORE_INT_H
#define KVIO_SHARED_STORE_INT_H

#include "kvio/hashset.h"
#include "kvio/shared_store.h"

#include <stdbool.h>
#include <stdint.h>

#define SHARED_NO_ENTRY UINT32_MAX

/* The most hashes one request carries (a get's reply: as many blocks); a
 * batch's hashes go one request per holder, in pieces of this. */
#define SHARED_BATCH_HASHES 64

typedef struct shared_entry {
    kvio_hash_t hash;
    uint64_t checksum;   /* emulate: XXH3-64 of the block as written */
    uint32_t prev, next; /* LRU list when held; next links the free list */
} shared_entry_t;

/* One shard; an entry's index is its slot (where its bytes are). */
typedef struct shared_shard {
    uint32_t capacity, held;
    shared_entry_t *entries;
    uint32_t free_head, lru_head, lru_tail; /* head: most recently used */
    kvio_map_t map;                         /* hash.low -> entry + 1 */
    uint64_t stored, evictions;
    uint64_t requests; /* requests answered (emulate) or batches reaching it (simulate) */
} shared_shard_t;

kvio_status_t shared_shard_init(shared_shard_t *shard, uint32_t capacity);
void shared_shard_fini(shared_shard_t *shard);

/* The entry holding hash, or SHARED_NO_ENTRY; touch: it becomes the most
 * recently used. */
uint32_t shared_shard_find(shared_shard_t *shard, kvio_hash_t hash, bool touch);

/* The slot hash goes into: its own when held (*fresh_p false, refreshed),
 * else a free one or the least recently used block's (evicted). */
uint32_t shared_shard_insert(shared_shard_t *shard, kvio_hash_t hash, uint64_t checksum,
                             bool *fresh_p);

/* Takes back an entry shared_shard_insert made fresh whose bytes never
 * arrived whole (refused for its checksum, or lost): not held, not stored. */
void shared_shard_remove(shared_shard_t *shard, uint32_t entry);

kvio_shared_shard_stats_t shared_shard_stats(const shared_shard_t *shard);

/* The blocks a shard of shard_bytes holds (the config checked). */
uint32_t shared_shard_capacity(const kvio_shared_store_config_t *config);

#endif
