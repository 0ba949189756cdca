/* Probability distributions for lengths, times and popularity, sampled from
 * a kvio_rng_t. Every kind takes optional min/max clamps. Values carry the
 * unit of the option that holds them (durations in ns, sizes in bytes). */
#ifndef KVIO_DIST_H
#define KVIO_DIST_H

#include "kvio/rng.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVIO_DIST_KIND_LIST(X)                                            \
    X(KVIO_DIST_CONSTANT, "constant")                                     \
    X(KVIO_DIST_UNIFORM, "uniform")                                       \
    X(KVIO_DIST_NORMAL, "normal")                                         \
    X(KVIO_DIST_LOGNORMAL, "lognormal")                                   \
    X(KVIO_DIST_EXPONENTIAL, "exponential")                               \
    X(KVIO_DIST_GAMMA, "gamma")                                           \
    X(KVIO_DIST_ZIPF, "zipf")                                             \
    X(KVIO_DIST_EMPIRICAL, "empirical")

typedef enum {
#define KVIO_DIST_ENUM(name, text) name,
    KVIO_DIST_KIND_LIST(KVIO_DIST_ENUM)
#undef KVIO_DIST_ENUM
    KVIO_DIST_NUM_KINDS
} kvio_dist_kind_t;

/* A distribution's parameters. Fields that a kind does not use stay 0.
 * - constant: value
 * - uniform: low, high (continuous, [low, high))
 * - normal: mean, stddev
 * - lognormal: mean, stddev of the result (not of the log)
 * - exponential: mean
 * - gamma: mean, cv (coefficient of variation)
 * - zipf: n, s — ranks 1..n with P(k) proportional to k^-s
 * - empirical: values with weights (owned: kvio_dist_clear frees them) */
typedef struct kvio_dist {
    kvio_dist_kind_t kind;
    double value;
    double low, high;
    double mean, stddev;
    double cv;
    double n, s;
    double *values;
    double *weights;     /* as given; NULL means equal weights */
    size_t num_values;
    double *cumulative;  /* filled by kvio_dist_prepare */
    bool has_min, has_max;
    double min, max;     /* clamps applied to every sample */
} kvio_dist_t;

/* Name of a kind ("lognormal"), or NULL. */
const char *kvio_dist_kind_name(kvio_dist_kind_t kind);

/* Finds a kind by name; returns KVIO_ERR_NOT_FOUND when unknown. */
kvio_status_t kvio_dist_kind_find(const char *name, kvio_dist_kind_t *kind_p);

/* Checks the parameters (positive stddev, n >= 1, weights, ...) and
 * precomputes what sampling needs. On error writes a message to error_p. */
kvio_status_t kvio_dist_prepare(kvio_dist_t *dist, char *error_p, size_t error_len);

/* Draws one value (after the clamps). The dist must have been prepared. */
double kvio_dist_sample(const kvio_dist_t *dist, kvio_rng_t *rng);

/* The distribution's mean before clamping (zipf and empirical: exact). */
double kvio_dist_mean(const kvio_dist_t *dist);

/* Deep-copies src into dst_p (empirical arrays included). */
kvio_status_t kvio_dist_copy(const kvio_dist_t *src, kvio_dist_t *dst_p);

/* Frees owned arrays and zeroes the struct. */
void kvio_dist_clear(kvio_dist_t *dist);

#endif
