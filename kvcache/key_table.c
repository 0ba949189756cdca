/* A table of 64-bit content keys, each with a non-zero 32-bit value: open
 * addressing, linear probing, backward-shift deletion. The ghosts of the
 * eviction policies live in it (s3fifo counts its ghost keys, arc finds its
 * ghost entries by key). */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

static size_t home_slot(const kvio_key_table_t *table, uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & table->mask;
}

/* key's slot, or the empty slot where it would go. */
static size_t find_slot(const kvio_key_table_t *table, uint64_t key)
{
    size_t slot = home_slot(table, key);
    while (table->values[slot] != 0 && table->keys[slot] != key)
        slot = (slot + 1) & table->mask;
    return slot;
}

kvio_status_t kvio_key_table_init(kvio_key_table_t *table, size_t max_keys)
{
    size_t slots = 16;
    while (slots < 2 * max_keys)
        slots *= 2;
    table->mask = slots - 1;
    table->keys = malloc(sizeof(uint64_t) * slots);
    table->values = calloc(slots, sizeof(uint32_t));
    if (table->keys == NULL || table->values == NULL) {
        kvio_key_table_fini(table);
        return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

void kvio_key_table_fini(kvio_key_table_t *table)
{
    free(table->keys);
    free(table->values);
    table->keys = NULL;
    table->values = NULL;
}

uint32_t kvio_key_table_get(const kvio_key_table_t *table, uint64_t key)
{
    return table->values[find_slot(table, key)];
}

/* Empties a slot; later keys of its probe chain shift back into the hole. */
static void delete_slot(kvio_key_table_t *table, size_t slot)
{
    size_t hole = slot;
    table->values[hole] = 0;
    for (size_t next = (hole + 1) & table->mask; table->values[next] != 0;
         next = (next + 1) & table->mask) {
        size_t home = home_slot(table, table->keys[next]);
        bool movable = hole <= next ? (home <= hole || home > next) : (home <= hole && home > next);
        if (movable) {
            table->keys[hole] = table->keys[next];
            table->values[hole] = table->values[next];
            table->values[next] = 0;
            hole = next;
        }
    }
}

void kvio_key_table_set(kvio_key_table_t *table, uint64_t key, uint32_t value)
{
    size_t slot = find_slot(table, key);
    if (value == 0) {
        if (table->values[slot] != 0)
            delete_slot(table, slot);
        return;
    }
    table->keys[slot] = key;
    table->values[slot] = value;
}
