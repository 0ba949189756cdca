/* random (SGLang's): the waiting queue shuffled at every scheduling step
 * (Fisher-Yates), from the scheduler's own seeded stream, so a run is
 * repeatable for a seed. A baseline that knows nothing of the requests. */
#include "sched/sched_int.h"

#include "kvio/rng.h"

static kvio_status_t seed_shuffle(kvio_sched_t *sched, uint64_t seed)
{
    kvio_rng_seed(sched->policy_state, seed, 0, "policy.random");
    return KVIO_OK;
}

static void order_shuffled(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                           const kvio_sched_view_t *view)
{
    (void)view;
    for (size_t i = count; i > 1; i--) {
        size_t j = (size_t)kvio_rng_below(sched->policy_state, i);
        kvio_sched_request_t *swap = waiting[i - 1];
        waiting[i - 1] = waiting[j];
        waiting[j] = swap;
    }
}

const kvio_sched_policy_ops_t kvio_policy_random = {
    .plugin = {.name = "random", .help = "the waiting queue shuffled at every step (SGLang)",
               .options = kvio_no_options},
    .state_size = sizeof(kvio_rng_t),
    .init = seed_shuffle,
    .order = order_shuffled,
};
