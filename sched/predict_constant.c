/* constant: every request is predicted to produce the same output. */
#include "sched/sched_int.h"

typedef struct constant_options {
    int64_t value;
} constant_options_t;

static const kvio_opt_t constant_options[] = {
    {.key = "value", .type = KVIO_OPT_INT, .offset = offsetof(constant_options_t, value),
     .default_value = "256", .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "the predicted output length"},
    {.key = NULL},
};

static double configured_length(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    (void)request;
    const constant_options_t *options = sched->predictor_options;
    return (double)options->value;
}

const kvio_sched_predictor_ops_t kvio_predictor_constant = {
    .plugin = {.name = "constant", .help = "the same output length for every request",
               .options = constant_options, .options_size = sizeof(constant_options_t)},
    .predict = configured_length,
};
