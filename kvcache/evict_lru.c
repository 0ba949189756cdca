/* lru: evict the least recently used or released entry. In the block pool
 * this is vLLM's free-queue order, so the pool takes the queue's head
 * instead of asking (KVIO_EVICT_CAP_QUEUE_ORDER); cachesim replays every
 * capacity in one pass. */
#include "kvcache/kvcache_int.h"

static uint32_t oldest_victim(void *priv)
{
    kvio_evict_list_state_t *state = priv;
    uint32_t entry = kvio_list_pop_head(&state->list, state->links);
    if (entry != KVIO_EVICT_NONE)
        state->in_set[entry] = 0;
    return entry;
}

const kvio_evict_ops_t kvio_eviction_lru = {
    .plugin = {.name = "lru",
               .help = "least recently used (vLLM free-queue order in the block pool)",
               .options = kvio_no_options},
    .caps = KVIO_EVICT_CAP_QUEUE_ORDER,
    KVIO_EVICT_LIST_HOOKS,
    .victim = oldest_victim,
};
