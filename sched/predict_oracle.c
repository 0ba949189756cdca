/* oracle: the request's true output length (an upper bound on what any
 * predictor could do). */
#include "sched/sched_int.h"

static double true_length(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    (void)sched;
    return request->output_tokens;
}

const kvio_sched_predictor_ops_t kvio_predictor_oracle = {
    .plugin = {.name = "oracle", .help = "the true output length",
               .options = kvio_no_options},
    .predict = true_length,
};
