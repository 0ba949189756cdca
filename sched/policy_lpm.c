/* lpm (SGLang): the longest cached prefix first, stable; with more waiting
 * requests than max_queue it orders FCFS and skips the look-ups, as
 * SGLang's scheduler does past 128. */
#include "sched/sched_int.h"

typedef struct lpm_options {
    int64_t max_queue;
} lpm_options_t;

static const kvio_opt_t lpm_options[] = {
    {.key = "max_queue", .type = KVIO_OPT_INT, .offset = offsetof(lpm_options_t, max_queue),
     .default_value = "128", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "with more waiting requests than this, fall back to fcfs (SGLang)"},
    {.key = NULL},
};

static int by_prefix_match(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                           const kvio_sched_request_t *b, int64_t now_ns)
{
    (void)sched;
    (void)now_ns;
    return a->hit_tokens > b->hit_tokens ? -1 : a->hit_tokens < b->hit_tokens;
}

static bool wants_hits_below_bound(const kvio_sched_t *sched, size_t count)
{
    const lpm_options_t *options = sched->policy_options;
    return (int64_t)count <= options->max_queue;
}

static void order_longest_prefix(kvio_sched_t *sched, kvio_sched_request_t **waiting,
                                 size_t count, const kvio_sched_view_t *view)
{
    if (!wants_hits_below_bound(sched, count))
        return;
    kvio_sched_stable_sort(sched, waiting, count, by_prefix_match, view->now_ns);
}

const kvio_sched_policy_ops_t kvio_policy_lpm = {
    .plugin = {.name = "lpm", .help = "longest cached prefix first (SGLang)",
               .options = lpm_options, .options_size = sizeof(lpm_options_t)},
    .caps = KVIO_SCHED_CAP_NEEDS_HITS,
    .order = order_longest_prefix,
    .wants_hits = wants_hits_below_bound,
};
