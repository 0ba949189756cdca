/* The registry of routers: one X(name) per router, each defined in
 * serve/router_<name>.c, in the order `kvio list` shows them. */
#include "serve/serve_int.h"

#define KVIO_PLUGIN_TYPE kvio_router_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_router_##name
#define ROUTERS(X)                                                                         \
    X(round_robin)                                                                         \
    X(least_loaded)                                                                        \
    X(prefix_affinity)                                                                     \
    X(kv_cost)                                                                             \
    X(free_kv)                                                                             \
    X(kv_events)                                                                           \
    X(kv_approx)

KVIO_REGISTRY_DEFINE(kvio_routers, "router", ROUTERS)
