/* sjf: shortest predicted output left first; a request waiting past the
 * aging bound goes ahead of every younger one (oldest first), so long
 * requests are not starved. */
#include "sched/sched_int.h"

typedef struct sjf_options {
    int64_t aging_ns;
} sjf_options_t;

static const kvio_opt_t sjf_options[] = {
    {.key = "aging", .type = KVIO_OPT_DURATION, .offset = offsetof(sjf_options_t, aging_ns),
     .default_value = "30s", .help = "a request waiting longer than this goes first"},
    {.key = NULL},
};

static int by_predicted_output(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                               const kvio_sched_request_t *b, int64_t now_ns)
{
    const sjf_options_t *options = sched->policy_options;
    bool a_aged = now_ns - a->arrival_ns > options->aging_ns;
    bool b_aged = now_ns - b->arrival_ns > options->aging_ns;
    if (a_aged != b_aged)
        return a_aged ? -1 : 1;
    if (a_aged)
        return a->arrival_ns < b->arrival_ns ? -1 : a->arrival_ns > b->arrival_ns;
    uint32_t a_left = a->predicted_output > a->generated ? a->predicted_output - a->generated : 0;
    uint32_t b_left = b->predicted_output > b->generated ? b->predicted_output - b->generated : 0;
    return a_left < b_left ? -1 : a_left > b_left;
}

static void order_shortest_first(kvio_sched_t *sched, kvio_sched_request_t **waiting,
                                 size_t count, const kvio_sched_view_t *view)
{
    kvio_sched_stable_sort(sched, waiting, count, by_predicted_output, view->now_ns);
}

const kvio_sched_policy_ops_t kvio_policy_sjf = {
    .plugin = {.name = "sjf", .help = "shortest predicted output first, with aging",
               .options = sjf_options, .options_size = sizeof(sjf_options_t)},
    .order = order_shortest_first,
};
