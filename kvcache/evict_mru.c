/* mru: evict the most recently used or released entry. It helps only
 * cyclic scans larger than the cache, where the oldest entry is the next
 * one needed. */
#include "kvcache/kvcache_int.h"

static uint32_t newest_victim(void *priv)
{
    kvio_evict_list_state_t *state = priv;
    uint32_t entry = state->list.tail;
    if (entry != KVIO_EVICT_NONE)
        kvio_evict_list_remove(priv, entry);
    return entry;
}

const kvio_evict_ops_t kvio_eviction_mru = {
    .plugin = {.name = "mru",
               .help = "most recently used first (helps only cyclic scans larger than the cache)",
               .options = kvio_no_options},
    KVIO_EVICT_LIST_HOOKS,
    .victim = newest_victim,
};
