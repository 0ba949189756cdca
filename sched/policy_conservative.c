/* conservative: a request starts only when every running request and it
 * could grow to its whole max_tokens output in the KV cache (no preemption
 * can follow; the price is admitting fewer). */
#include "sched/sched_int.h"

static bool admit_conservative(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                               const kvio_sched_view_t *view)
{
    (void)sched;
    if (view->num_running == 0)
        return true; /* nothing to wait for: refusing would starve it */
    uint64_t reserved = kvio_sched_blocks_for((uint64_t)candidate->prompt_tokens + candidate->max_tokens,
                                   view->block_size);
    for (size_t i = 0; i < view->num_running; i++) {
        const kvio_sched_request_t *running = view->running[i];
        reserved += kvio_sched_blocks_for((uint64_t)running->prompt_tokens + running->max_tokens,
                               view->block_size);
    }
    return reserved <= view->capacity_blocks;
}

const kvio_sched_policy_ops_t kvio_policy_conservative = {
    .plugin = {.name = "conservative", .help = "reserve every request's max_tokens up front",
               .options = kvio_no_options},
    .admit = admit_conservative,
};
