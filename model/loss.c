/* The emulated learning curve L(step) = a * step^-b + c: the loss of the
 * weights a training step produced, which the adaptive checkpoint policy
 * trades against update cost and which weighs each served request. */
#include "kvio/model.h"

#include <math.h>

const kvio_opt_t kvio_loss_options[] = {
    {.key = "a", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_loss_curve_t, a),
     .default_value = "4.0", .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "L = a*step^-b + c"},
    {.key = "b", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_loss_curve_t, b),
     .default_value = "0.5", .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "decay exponent"},
    {.key = "c", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_loss_curve_t, c),
     .default_value = "1.5", .help = "irreducible loss"},
    {.key = NULL},
};

double kvio_loss_at(const kvio_loss_curve_t *curve, double step)
{
    return curve->a * pow(step < 1 ? 1 : step, -curve->b) + curve->c;
}

