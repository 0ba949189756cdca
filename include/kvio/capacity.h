/* kvio capacity as a library: the highest load (arrival rate, or with
 * --users a closed loop's users) at which a workload still meets its SLO
 * for a share of its requests (guidellm's sweep, MLPerf's QoS search).
 * Each probe runs the workload at one configured rate with several seeds
 * (simulate: deterministic per seed), the arrivals of a warm-up (sessions
 * still ramping) left out of every figure; a probe meets when every
 * seed's attainment reaches the share asked and none fell behind (its
 * verdict: overloaded). The search brackets (doubling or halving from the
 * workload's rate), then bisects the configured rate; the knee is reported
 * in the offered rate as measured (the seeds' mean and its 95 % interval,
 * printed with the digits the interval supports), never the configured
 * one. A curve whose met and failed probes interleave is reported as not
 * monotone, the knee taken below the first failure. The confirm serves
 * the knee's rate for the workload's own duration (a --set duration=
 * shortens the probes only) with the probes' seeds and says whether the
 * SLO held (when the probes ran that duration, the knee's probe is it). Each probe run is a whole results directory under DIR; with
 * --vary KEY=A,B one search per value. */
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
#define KVIO_CAPACITY_MAX_SEEDS 10

typedef struct kvio_capacity_options {
    const char *source;          /* workload file or preset (mode: simulate) */
    const char *const *sets;     /* KEY=VALUE overrides */
    size_t num_sets;
    int64_t ttft_ns, tpot_ns;    /* the SLO (both 0: the workload's slo:) */
    double attain;               /* share of requests that must meet it, (0, 1] */
    double low, high;            /* the rates bracketing the search (0: found) */
    double tolerance;            /* stop when (high - low) / high is below it */
    long seeds;                  /* runs per probe, seed .. seed + seeds - 1 (0: 3) */
    double warmup_share;         /* of the duration, when the workload has no warmup
                                    (0: 0.2; negative: none) */
    bool no_confirm;             /* skip the confirm run */
    bool users;                  /* vary the closed loop's users, not the rate */
    const char *vary_key;        /* with vary_values: one search per value of this key */
    const char *const *vary_values;
    size_t num_vary;
    const char *output_dir;      /* NULL: results/capacity-<name>-<time> */
    bool force;
    volatile sig_atomic_t *stop; /* set to stop between probes; may be NULL */
} kvio_capacity_options_t;

/* The outcome: one search, or one per --vary value. */
typedef struct kvio_capacity kvio_capacity_t;

/* Runs the search(es) and writes DIR/capacity.json; *capacity_p receives
 * the outcome (kvio_capacity_destroy). Errors name the probe. */
kvio_status_t kvio_capacity(const kvio_capacity_options_t *options,
                            kvio_capacity_t **capacity_p, char *error_p, size_t error_len);

/* capacity.json's content (a new reference): provenance, the knee with its
 * interval, the curve, the confirm run. */
json_t *kvio_capacity_json(const kvio_capacity_t *capacity);

/* The knee and the curve, as a table. */
void kvio_capacity_print(const kvio_capacity_t *capacity, FILE *out);

void kvio_capacity_destroy(kvio_capacity_t *capacity);

#endif
