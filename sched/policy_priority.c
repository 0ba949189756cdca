/* priority (vLLM's --scheduling-policy priority): lower priority value
 * first, ties by arrival; the victim is the worst (priority, arrival). */
#include "sched/sched_int.h"

static void order_by_priority(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                              const kvio_sched_view_t *view)
{
    kvio_sched_stable_sort(sched, waiting, count, kvio_sched_by_priority, view->now_ns);
}

static size_t victim_worst_priority(kvio_sched_t *sched, const kvio_sched_view_t *view)
{
    size_t worst = 0;
    for (size_t i = 1; i < view->num_running; i++)
        if (kvio_sched_by_priority(sched, view->running[i], view->running[worst], 0) > 0)
            worst = i;
    return worst;
}

const kvio_sched_policy_ops_t kvio_policy_priority = {
    .plugin = {.name = "priority",
               .help = "lower priority value first, ties by arrival; preempts the worst",
               .options = kvio_no_options},
    .order = order_by_priority,
    .victim = victim_worst_priority,
};
