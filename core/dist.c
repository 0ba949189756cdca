/* Sampling for kvio_dist_t. Lognormal takes the mean and stddev of the
 * result; gamma uses Marsaglia and Tsang; zipf uses Hörmann and Derflinger's
 * rejection-inversion, which needs no table, so n can be in the millions. */
#include "kvio/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
#define KVIO_DIST_NAME(name, text) text,
    KVIO_DIST_KIND_LIST(KVIO_DIST_NAME)
#undef KVIO_DIST_NAME
};

const char *kvio_dist_kind_name(kvio_dist_kind_t kind)
{
    return (unsigned)kind < KVIO_DIST_NUM_KINDS ? kind_names[kind] : NULL;
}

kvio_status_t kvio_dist_kind_find(const char *name, kvio_dist_kind_t *kind_p)
{
    for (int i = 0; i < KVIO_DIST_NUM_KINDS; i++) {
        if (strcmp(kind_names[i], name) == 0) {
            *kind_p = (kvio_dist_kind_t)i;
            return KVIO_OK;
        }
    }
    return KVIO_ERR_NOT_FOUND;
}

static kvio_status_t fail(char *error_p, size_t error_len, const char *message)
{
    snprintf(error_p, error_len, "%s", message);
    return KVIO_ERR_CONFIG;
}

kvio_status_t kvio_dist_prepare(kvio_dist_t *dist, char *error_p, size_t error_len)
{
    if (dist->has_min && dist->has_max && dist->min > dist->max)
        return fail(error_p, error_len, "min is above max");
    switch (dist->kind) {
    case KVIO_DIST_CONSTANT:
        return KVIO_OK;
    case KVIO_DIST_UNIFORM:
        if (!(dist->high >= dist->low))
            return fail(error_p, error_len, "uniform needs high >= low");
        return KVIO_OK;
    case KVIO_DIST_NORMAL:
        if (!(dist->stddev >= 0))
            return fail(error_p, error_len, "stddev must not be negative");
        return KVIO_OK;
    case KVIO_DIST_LOGNORMAL:
        if (!(dist->mean > 0) || !(dist->stddev >= 0))
            return fail(error_p, error_len, "lognormal needs mean > 0 and stddev >= 0");
        return KVIO_OK;
    case KVIO_DIST_EXPONENTIAL:
        if (!(dist->mean > 0))
            return fail(error_p, error_len, "exponential needs mean > 0");
        return KVIO_OK;
    case KVIO_DIST_GAMMA:
        if (!(dist->mean > 0) || !(dist->cv > 0))
            return fail(error_p, error_len, "gamma needs mean > 0 and cv > 0");
        return KVIO_OK;
    case KVIO_DIST_ZIPF:
        if (!(dist->n >= 1) || dist->n != floor(dist->n) || !(dist->s > 0))
            return fail(error_p, error_len, "zipf needs an integer n >= 1 and s > 0");
        return KVIO_OK;
    case KVIO_DIST_EMPIRICAL: {
        if (dist->num_values == 0)
            return fail(error_p, error_len, "empirical needs at least one value");
        double total = 0;
        for (size_t i = 0; i < dist->num_values; i++) {
            double weight = dist->weights != NULL ? dist->weights[i] : 1.0;
            if (!(weight >= 0))
                return fail(error_p, error_len, "weights must not be negative");
            total += weight;
        }
        if (!(total > 0))
            return fail(error_p, error_len, "weights sum to zero");
        free(dist->cumulative);
        dist->cumulative = malloc(dist->num_values * sizeof(double));
        if (dist->cumulative == NULL)
            return fail(error_p, error_len, "out of memory");
        double running = 0;
        for (size_t i = 0; i < dist->num_values; i++) {
            running += dist->weights != NULL ? dist->weights[i] : 1.0;
            dist->cumulative[i] = running / total;
        }
        dist->cumulative[dist->num_values - 1] = 1.0;
        return KVIO_OK;
    }
    case KVIO_DIST_NUM_KINDS:
        break;
    }
    return fail(error_p, error_len, "unknown distribution");
}

/* Gamma(shape, 1), Marsaglia and Tsang; shape < 1 boosted by U^(1/shape). */
static double sample_gamma_unit(double shape, kvio_rng_t *rng)
{
    double boost = 1.0;
    if (shape < 1.0) {
        double u = kvio_rng_uniform(rng);
        boost = pow(u > 0 ? u : 0x1.0p-53, 1.0 / shape);
        shape += 1.0;
    }
    double d = shape - 1.0 / 3.0;
    double c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = kvio_rng_normal(rng);
        double v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = kvio_rng_uniform(rng);
        if (u < 1.0 - 0.0331 * x * x * x * x)
            return d * v * boost;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v * boost;
    }
}

/* Rejection-inversion helpers: H(x) = integral of x^-s, and its inverse. */
static double zipf_h(double x, double s)
{
    double log_x = log(x);
    double t = (1.0 - s) * log_x;
    return fabs(t) > 1e-8 ? expm1(t) / (1.0 - s) : log_x * (1.0 + t / 2.0);
}

static double zipf_h_inverse(double x, double s)
{
    double t = x * (1.0 - s);
    if (t < -1.0)
        t = -1.0;
    return exp(fabs(t) > 1e-8 ? log1p(t) / (1.0 - s) : x * (1.0 - t / 2.0));
}

static double sample_zipf(double n, double s, kvio_rng_t *rng)
{
    double h_lower = zipf_h(1.5, s) - 1.0;
    double h_upper = zipf_h(n + 0.5, s);
    double threshold = 2.0 - zipf_h_inverse(zipf_h(2.5, s) - pow(2.0, -s), s);
    for (;;) {
        double u = h_upper + kvio_rng_uniform(rng) * (h_lower - h_upper);
        double x = zipf_h_inverse(u, s);
        double k = floor(x + 0.5);
        if (k < 1)
            k = 1;
        else if (k > n)
            k = n;
        if (k - x <= threshold || u >= zipf_h(k + 0.5, s) - pow(k, -s))
            return k;
    }
}

static double sample_raw(const kvio_dist_t *dist, kvio_rng_t *rng)
{
    switch (dist->kind) {
    case KVIO_DIST_CONSTANT:
        return dist->value;
    case KVIO_DIST_UNIFORM:
        return dist->low + (dist->high - dist->low) * kvio_rng_uniform(rng);
    case KVIO_DIST_NORMAL:
        return dist->mean + dist->stddev * kvio_rng_normal(rng);
    case KVIO_DIST_LOGNORMAL: {
        /* sigma^2 = ln(1 + s^2/m^2), mu = ln m - sigma^2/2 gives mean m, stddev s. */
        double ratio = dist->stddev / dist->mean;
        double sigma2 = log1p(ratio * ratio);
        double mu = log(dist->mean) - sigma2 / 2.0;
        return exp(mu + sqrt(sigma2) * kvio_rng_normal(rng));
    }
    case KVIO_DIST_EXPONENTIAL: {
        double u = kvio_rng_uniform(rng);
        return -dist->mean * log1p(-u);
    }
    case KVIO_DIST_GAMMA: {
        double shape = 1.0 / (dist->cv * dist->cv);
        return sample_gamma_unit(shape, rng) * dist->mean / shape;
    }
    case KVIO_DIST_ZIPF:
        return sample_zipf(dist->n, dist->s, rng);
    case KVIO_DIST_EMPIRICAL: {
        double u = kvio_rng_uniform(rng);
        size_t low = 0, high = dist->num_values - 1;
        while (low < high) {
            size_t middle = (low + high) / 2;
            if (dist->cumulative[middle] > u)
                high = middle;
            else
                low = middle + 1;
        }
        return dist->values[low];
    }
    case KVIO_DIST_NUM_KINDS:
        break;
    }
    return 0;
}

double kvio_dist_sample(const kvio_dist_t *dist, kvio_rng_t *rng)
{
    double value = sample_raw(dist, rng);
    if (dist->has_min && value < dist->min)
        value = dist->min;
    if (dist->has_max && value > dist->max)
        value = dist->max;
    return value;
}

double kvio_dist_mean(const kvio_dist_t *dist)
{
    switch (dist->kind) {
    case KVIO_DIST_CONSTANT:
        return dist->value;
    case KVIO_DIST_UNIFORM:
        return (dist->low + dist->high) / 2.0;
    case KVIO_DIST_NORMAL:
    case KVIO_DIST_LOGNORMAL:
    case KVIO_DIST_EXPONENTIAL:
    case KVIO_DIST_GAMMA:
        return dist->mean;
    case KVIO_DIST_ZIPF: {
        double numerator = 0, denominator = 0;
        for (double k = 1; k <= dist->n && k <= 1e7; k++) {
            double p = pow(k, -dist->s);
            numerator += k * p;
            denominator += p;
        }
        return numerator / denominator;
    }
    case KVIO_DIST_EMPIRICAL: {
        double mean = 0, previous = 0;
        for (size_t i = 0; i < dist->num_values; i++) {
            mean += dist->values[i] * (dist->cumulative[i] - previous);
            previous = dist->cumulative[i];
        }
        return mean;
    }
    case KVIO_DIST_NUM_KINDS:
        break;
    }
    return 0;
}

static double *copy_array(const double *src, size_t count)
{
    if (src == NULL || count == 0)
        return NULL;
    double *copy = malloc(count * sizeof(double));
    if (copy != NULL)
        memcpy(copy, src, count * sizeof(double));
    return copy;
}

kvio_status_t kvio_dist_copy(const kvio_dist_t *src, kvio_dist_t *dst_p)
{
    kvio_dist_t copy = *src;
    copy.values = copy_array(src->values, src->num_values);
    copy.weights = copy_array(src->weights, src->num_values);
    copy.cumulative = copy_array(src->cumulative, src->num_values);
    if ((src->values != NULL && copy.values == NULL) ||
        (src->weights != NULL && copy.weights == NULL) ||
        (src->cumulative != NULL && copy.cumulative == NULL)) {
        free(copy.values);
        free(copy.weights);
        free(copy.cumulative);
        return KVIO_ERR_NOMEM;
    }
    *dst_p = copy;
    return KVIO_OK;
}

void kvio_dist_clear(kvio_dist_t *dist)
{
    free(dist->values);
    free(dist->weights);
    free(dist->cumulative);
    memset(dist, 0, sizeof(*dist));
}
