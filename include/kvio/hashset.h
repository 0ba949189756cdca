/* A map of 64-bit keys to non-zero 32-bit values: open addressing, linear
 * probing, backward-shift deletion, no allocation per key. It grows to stay
 * at most half full (kvio_map_reserve sizes it up front, and a map sized so
 * never allocates again). One table for kvio's generic key lookups: the
 * ghosts of the s3fifo and arc eviction policies, cachesim's block ids.
 * (The KV pool's prefix index, the tiers' block index and the client's
 * mirrored blocks keep their own: they key by 128-bit block hashes and
 * keep an LRU or counts in their slots.) */
#ifndef KVIO_HASHSET_H
#define KVIO_HASHSET_H

#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kvio_map {
    uint64_t *keys;
    uint32_t *values; /* 0: an empty slot */
    size_t mask;      /* slots - 1 (slots a power of two; 0 before the first reserve) */
    size_t count;     /* keys held */
} kvio_map_t;

/* Room for max_keys keys without growing (a zeroed map is an empty one). */
kvio_status_t kvio_map_reserve(kvio_map_t *map, size_t max_keys);
void kvio_map_fini(kvio_map_t *map);

/* key's value, 0 when the map does not hold it. */
uint32_t kvio_map_get(const kvio_map_t *map, uint64_t key);

/* Sets key's value (growing the map when it must); 0 takes the key out. */
kvio_status_t kvio_map_set(kvio_map_t *map, uint64_t key, uint32_t value);

#endif
