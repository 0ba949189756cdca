/* filo: evict the newest content first (SGLang's FILOStrategy, priority
 * -creation_time); hits do not refresh it. The shared heap
 * (kvcache/evict_heap.c) with arrivals stamped downwards, so the newest is
 * its minimum. */
#include "kvcache/kvcache_int.h"

static void add_newest_first(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    kvio_evict_heap_state_t *state = priv;
    if (fresh) {
        state->count[entry] = 0;
        state->stamp[entry] = UINT64_MAX - ++state->clock;
    }
    kvio_evict_heap_add(priv, entry, key, false);
}

static void ignore_hit(void *priv, uint32_t entry)
{
}

const kvio_evict_ops_t kvio_eviction_filo = {
    .plugin = {.name = "filo", .help = "newest content first; hits do not refresh it",
               .options = kvio_no_options},
    .priv_size = sizeof(kvio_evict_heap_state_t),
    .init = kvio_evict_heap_init,
    .fini = kvio_evict_heap_fini,
    .add = add_newest_first,
    .remove = kvio_evict_heap_remove,
    .access = ignore_hit,
    .victim = kvio_evict_heap_victim,
};
