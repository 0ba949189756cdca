/* The registry of eviction policies: one X(name) per policy, each defined
 * in kvcache/evict_<name>.c, in the order `kvio list`, help and
 * `kvio cachesim --eviction all` show them. */
#include "kvcache/kvcache_int.h"

#define KVIO_PLUGIN_TYPE kvio_evict_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_eviction_##name
#define EVICTIONS(X)                                                                       \
    X(lru)                                                                                 \
    X(lfu)                                                                                 \
    X(fifo)                                                                                \
    X(mru)                                                                                 \
    X(filo)                                                                                \
    X(s3fifo)                                                                              \
    X(arc)

KVIO_REGISTRY_DEFINE(kvio_evictions, "eviction policy", EVICTIONS)
