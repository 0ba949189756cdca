/* The registry of model-update transports: one X(name) per transport,
 * each an ops table kvio_xfer_<name>_ops in xfer/xfer_<name>*.c (or its
 * stub in xfer.c where the build leaves its part out), in the order
 * `kvio list` shows them. */
#include "xfer/xfer_int.h"

#define KVIO_PLUGIN_TYPE kvio_xfer_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_xfer_##name##_ops
#define TRANSPORTS(X)                                                                      \
    X(ucx)                                                                                 \
    X(file)                                                                                \
    X(redis)                                                                               \
    X(cuda_ipc)                                                                            \
    X(staged)

KVIO_REGISTRY_DEFINE(kvio_transports, "transport", TRANSPORTS)
