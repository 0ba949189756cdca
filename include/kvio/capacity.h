/* kvio capacity as a library: the highest arrival rate (or, closed loop,
 * the most users: serve.max_concurrency) at which a workload still meets
 * its SLO for a share of its requests (guidellm's sweep, MLPerf's QoS
 * search), found by bisection over simulate runs (deterministic: the same
 * workload, the same answer). Each probe is a whole run, in DIR/rate-<R>
 * (DIR/users-<N>); the result is capacity.json's object: the capacity, the
 * SLO and attainment asked, the metric that binds at the first probe that
 * fails, and the curve walked. With --vary KEY=A,B one search per value, in
 * DIR/KEY-A, ..., and capacity.json lists them under "variants". */
#ifndef KVIO_CAPACITY_H
#define KVIO_CAPACITY_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvio/status.h"

#define KVIO_CAPACITY_MAX_PROBES 40

typedef struct kvio_capacity_options {
    const char *source;          /* workload file or preset (mode: simulate) */
    const char *const *sets;     /* KEY=VALUE overrides */
    size_t num_sets;
    int64_t ttft_ns, tpot_ns;    /* the SLO (both 0: the workload's slo:) */
    double attain;               /* share of requests that must meet it, (0, 1] */
    double low, high;            /* the rates bracketing the search (0: found) */
    double tolerance;            /* stop when (high - low) / high is below it */
    bool users;                  /* vary serve.max_concurrency (closed loop), not the rate */
    const char *vary_key;        /* with vary_values: one search per value of this key */
    const char *const *vary_values;
    size_t num_vary;
    const char *output_dir;      /* NULL: results/capacity-<name>-<time> */
    bool force;
    volatile sig_atomic_t *stop; /* set to stop between probes; may be NULL */
} kvio_capacity_options_t;

/* Runs the search; *result_p receives capacity.json's object (caller
 * decrefs), also written to DIR/capacity.json. Errors name the probe. */
kvio_status_t kvio_capacity(const kvio_capacity_options_t *options, json_t **result_p,
                            char *error_p, size_t error_len);

/* The curve and the answer, as a table. */
void kvio_capacity_table(const json_t *result, FILE *out);

#endif
