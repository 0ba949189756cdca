/* The registry of output-length predictors: one X(name) per predictor, each
 * defined in sched/predict_<name>.c. */
#include "sched/sched_int.h"

#define KVIO_PLUGIN_TYPE kvio_sched_predictor_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_predictor_##name
#define PREDICTORS(X)                                                                      \
    X(oracle)                                                                              \
    X(noisy)                                                                               \
    X(history)                                                                             \
    X(constant)

KVIO_REGISTRY_DEFINE(kvio_sched_predictors, "output-length predictor", PREDICTORS)
