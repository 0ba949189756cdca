/* lfu: evict the entry with the fewest hits since its content arrived,
 * ties by least recent use, on the shared heap (kvcache/evict_heap.c). */
#include "kvcache/kvcache_int.h"

/* A hit counts and refreshes recency; the key only grows, so the entry can
 * only move down. */
static void count_hit(void *priv, uint32_t entry)
{
    kvio_evict_heap_state_t *state = priv;
    state->count[entry]++;
    state->stamp[entry] = ++state->clock;
    kvio_evict_heap_key_grew(state, entry);
}

const kvio_evict_ops_t kvio_eviction_lfu = {
    .plugin = {.name = "lfu", .help = "least frequently hit first, ties by least recent use",
               .options = kvio_no_options},
    KVIO_EVICT_HEAP_HOOKS,
    .access = count_hit,
};
