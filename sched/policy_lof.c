/* lof (SGLang's "longest output first"): the waiting queue sorted by the
 * requests' output limit (max_tokens, SGLang's max_new_tokens), longest
 * first, stable for equal limits; a request without a limit counts as the
 * longest. */
#include "sched/sched_int.h"

static uint32_t output_limit(const kvio_sched_request_t *request)
{
    return request->max_tokens > 0 ? request->max_tokens : UINT32_MAX;
}

static int by_longest_output(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                             const kvio_sched_request_t *b, int64_t now_ns)
{
    (void)sched;
    (void)now_ns;
    uint32_t a_limit = output_limit(a), b_limit = output_limit(b);
    return a_limit > b_limit ? -1 : a_limit < b_limit;
}

static void order_longest_output_first(kvio_sched_t *sched, kvio_sched_request_t **waiting,
                                       size_t count, const kvio_sched_view_t *view)
{
    kvio_sched_stable_sort(sched, waiting, count, by_longest_output, view->now_ns);
}

const kvio_sched_policy_ops_t kvio_policy_lof = {
    .plugin = {.name = "lof", .help = "longest output limit (max_tokens) first (SGLang)",
               .options = kvio_no_options},
    .order = order_longest_output_first,
};
