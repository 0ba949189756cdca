/* Private to sched/: the ops tables of scheduling policies and output-length
 * predictors (one file each, listed in sched/policies.c and
 * sched/predictors.c), the scheduler they run in, and the helpers several
 * of them share. */
#ifndef KVIO_SCHED_INT_H
#define KVIO_SCHED_INT_H

#include "kvio/plugin.h"
#include "kvio/sched.h"

/* A scheduling policy; any hook may be NULL (then vLLM's fcfs behaviour). */
typedef struct kvio_sched_policy_ops {
    kvio_plugin_t plugin;
    unsigned caps;     /* KVIO_SCHED_CAP_* */
    size_t state_size; /* bytes of its private state (sched->policy_state), zeroed */
    kvio_status_t (*init)(kvio_sched_t *sched, uint64_t seed);
    void (*fini)(kvio_sched_t *sched);
    /* Orders waiting in place (given in the engine's order: as they came,
     * preempted requests at the head, or as the last call left it; NULL:
     * keep it). */
    void (*order)(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                  const kvio_sched_view_t *view);
    /* Whether candidate may start now, blocks permitting (NULL: always). */
    bool (*admit)(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                  const kvio_sched_view_t *view);
    /* Index into view->running to preempt (NULL: the last admitted, vLLM). */
    size_t (*victim)(kvio_sched_t *sched, const kvio_sched_view_t *view);
    /* Whether ordering count waiting requests reads their cached prefixes
     * (NULL: whenever caps has KVIO_SCHED_CAP_NEEDS_HITS). */
    bool (*wants_hits)(const kvio_sched_t *sched, size_t count);
} kvio_sched_policy_ops_t;

/* An output-length predictor. predict is required. */
typedef struct kvio_sched_predictor_ops {
    kvio_plugin_t plugin;
    size_t state_size;
    kvio_status_t (*init)(kvio_sched_t *sched, uint64_t seed);
    void (*fini)(kvio_sched_t *sched);
    /* The predicted output of request (before clamping to 1..max_tokens). */
    double (*predict)(kvio_sched_t *sched, const kvio_sched_request_t *request);
    /* A request finished with request->generated tokens (NULL: ignored). */
    void (*observe)(kvio_sched_t *sched, const kvio_sched_request_t *request);
} kvio_sched_predictor_ops_t;

struct kvio_sched {
    const kvio_sched_policy_ops_t *policy;
    const void *policy_options; /* borrowed from the config */
    void *policy_state;         /* state_size bytes, owned */
    const kvio_sched_predictor_ops_t *predictor;
    const void *predictor_options;
    void *predictor_state;
};

/* Orders two requests for a stable sort (negative: a first). */
typedef int (*kvio_sched_compare_t)(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                                    const kvio_sched_request_t *b, int64_t now_ns);

/* Stable insertion sort: queues are short between calls and often sorted. */
void kvio_sched_stable_sort(kvio_sched_t *sched, kvio_sched_request_t **items, size_t count,
                            kvio_sched_compare_t compare, int64_t now_ns);

/* vLLM's priority order: lower value first, ties by arrival. */
int kvio_sched_by_priority(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                           const kvio_sched_request_t *b, int64_t now_ns);

/* Blocks of block_size that tokens fill (rounded up). */
uint64_t kvio_sched_blocks_for(uint64_t tokens, uint32_t block_size);

#endif
