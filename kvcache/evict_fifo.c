/* fifo: evict the oldest content; hits and releases do not refresh it (the
 * shared heap, kvcache/evict_heap.c, ordered by arrival alone). */
#include "kvcache/kvcache_int.h"

static void ignore_hit(void *priv, uint32_t entry)
{
}

const kvio_evict_ops_t kvio_eviction_fifo = {
    .plugin = {.name = "fifo", .help = "oldest content first; hits do not refresh it",
               .options = kvio_no_options},
    KVIO_EVICT_HEAP_HOOKS,
    .access = ignore_hit,
};
