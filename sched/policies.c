/* The registry of scheduling policies: one X(name) per policy, each defined
 * in sched/policy_<name>.c, in the order `kvio list` shows them. */
#include "sched/sched_int.h"

#define KVIO_PLUGIN_TYPE kvio_sched_policy_ops_t
#define KVIO_PLUGIN_SYMBOL(name) kvio_policy_##name
#define POLICIES(X)                                                                        \
    X(fcfs)                                                                                \
    X(priority)                                                                            \
    X(sjf)                                                                                 \
    X(lpm)                                                                                 \
    X(dfs_weight)                                                                          \
    X(conservative)                                                                        \
    X(pkas)                                                                                \
    X(lof)                                                                                 \
    X(random)

KVIO_REGISTRY_DEFINE(kvio_sched_policies, "scheduling policy", POLICIES)
