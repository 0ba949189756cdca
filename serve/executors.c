/* The registry of executors: one X(name) per executor, each defined in
 * serve/executor_<name>.c. */
#include "serve/loop_int.h"

#define KVIO_PLUGIN_TYPE kvio_executor_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_executor_##name
#define EXECUTORS(X)                                                                       \
    X(virtual)                                                                             \
    X(realtime)                                                                            \
    X(gpu)

KVIO_REGISTRY_DEFINE(kvio_executors, "executor", EXECUTORS)
