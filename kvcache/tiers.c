/* The registry of KV tier backends: one X(name) per backend, each defined
 * in kvcache/tier_<name>.c, in the order `kvio list` shows them. */
#include "kvcache/tier_int.h"

#define KVIO_PLUGIN_TYPE kvio_tier_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_tier_##name
#define TIERS(X)                                                                           \
    X(host)                                                                                \
    X(redis)                                                                               \
    X(file)                                                                                \
    X(shared)

KVIO_REGISTRY_DEFINE(kvio_tiers, "tier", TIERS)
