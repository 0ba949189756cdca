/* kvio_map_t: open addressing with linear probing over power-of-two slots,
 * backward-shift deletion (no tombstones), kept at most half full. */
#include "kvio/hashset.h"

#include <stdbool.h>
#include <stdlib.h>

#define MIN_SLOTS 16

static size_t home_slot(size_t mask, uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & mask;
}

/* key's slot, or the empty slot where it would go (the map has slots). */
static size_t find_slot(const kvio_map_t *map, uint64_t key)
{
    size_t slot = home_slot(map->mask, key);
    while (map->values[slot] != 0 && map->keys[slot] != key)
        slot = (slot + 1) & map->mask;
    return slot;
}

kvio_status_t kvio_map_reserve(kvio_map_t *map, size_t max_keys)
{
    size_t slots = MIN_SLOTS;
    while (slots < 2 * max_keys)
        slots *= 2;
    if (map->values != NULL && slots <= map->mask + 1)
        return KVIO_OK;
    kvio_map_t bigger = {.mask = slots - 1, .count = map->count};
    bigger.keys = malloc(sizeof(uint64_t) * slots);
    bigger.values = calloc(slots, sizeof(uint32_t));
    if (bigger.keys == NULL || bigger.values == NULL) {
        kvio_map_fini(&bigger);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; map->values != NULL && i <= map->mask; i++) {
        if (map->values[i] == 0)
            continue;
        size_t slot = find_slot(&bigger, map->keys[i]);
        bigger.keys[slot] = map->keys[i];
        bigger.values[slot] = map->values[i];
    }
    kvio_map_fini(map);
    *map = bigger;
    return KVIO_OK;
}

void kvio_map_fini(kvio_map_t *map)
{
    free(map->keys);
    free(map->values);
    *map = (kvio_map_t){0};
}

uint32_t kvio_map_get(const kvio_map_t *map, uint64_t key)
{
    return map->values != NULL ? map->values[find_slot(map, key)] : 0;
}

/* Empties a slot; later keys of its probe chain shift back into the hole
 * when their home slot is not between the hole and them. */
static void delete_slot(kvio_map_t *map, size_t slot)
{
    size_t hole = slot;
    map->values[hole] = 0;
    for (size_t next = (hole + 1) & map->mask; map->values[next] != 0;
         next = (next + 1) & map->mask) {
        size_t home = home_slot(map->mask, map->keys[next]);
        bool movable = hole <= next ? (home <= hole || home > next) : (home <= hole && home > next);
        if (movable) {
            map->keys[hole] = map->keys[next];
            map->values[hole] = map->values[next];
            map->values[next] = 0;
            hole = next;
        }
    }
    map->count--;
}

kvio_status_t kvio_map_set(kvio_map_t *map, uint64_t key, uint32_t value)
{
    if (value == 0) {
        if (map->values == NULL)
            return KVIO_OK;
        size_t slot = find_slot(map, key);
        if (map->values[slot] != 0)
            delete_slot(map, slot);
        return KVIO_OK;
    }
    if (map->values == NULL || 2 * (map->count + 1) > map->mask + 1) {
        /* twice the keys it must hold: the slots double */
        kvio_status_t status = kvio_map_reserve(map, 2 * (map->count + 1));
        if (status != KVIO_OK)
            return status;
    }
    size_t slot = find_slot(map, key);
    if (map->values[slot] == 0)
        map->count++;
    map->keys[slot] = key;
    map->values[slot] = value;
    return KVIO_OK;
}
