/* noisy: the true output length times a lognormal error, exp(sigma x
 * N(0,1)), from the scheduler's own seeded stream. */
#include "sched/sched_int.h"

#include <math.h>

#include "kvio/rng.h"

typedef struct noisy_options {
    double sigma;
} noisy_options_t;

static const kvio_opt_t noisy_options[] = {
    {.key = "sigma", .type = KVIO_OPT_DOUBLE, .offset = offsetof(noisy_options_t, sigma),
     .default_value = "0.5", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 5,
     .help = "the prediction is the true length times exp(sigma * N(0,1))"},
    {.key = NULL},
};

static kvio_status_t seed_noise(kvio_sched_t *sched, uint64_t seed)
{
    kvio_rng_seed(sched->predictor_state, seed, 0, "predictor");
    return KVIO_OK;
}

static double true_length_with_noise(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    const noisy_options_t *options = sched->predictor_options;
    double error = exp(options->sigma * kvio_rng_normal(sched->predictor_state));
    return request->output_tokens * error;
}

const kvio_sched_predictor_ops_t kvio_predictor_noisy = {
    .plugin = {.name = "noisy", .help = "the true length times a lognormal error",
               .options = noisy_options, .options_size = sizeof(noisy_options_t)},
    .state_size = sizeof(kvio_rng_t),
    .init = seed_noise,
    .predict = true_length_with_noise,
};
