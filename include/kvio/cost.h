/* The cost model: how long one engine iteration takes, from the batch it
 * runs (prefill tokens, decode sequences and their contexts), a model shape
 * and a GPU spec. Three forms: roofline (default), linear, and a measured
 * table. The model and GPU it runs over are kvio/model.h's. */
#ifndef KVIO_COST_H
#define KVIO_COST_H

#include "kvio/config.h"
#include "kvio/model.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { KVIO_COST_ROOFLINE = 0, KVIO_COST_LINEAR = 1, KVIO_COST_TABLE = 2 } kvio_cost_kind_t;

/* The cost model's parameters (the `cost:` section). */
typedef struct kvio_cost_config {
    int kind;                   /* kvio_cost_kind_t */
    int64_t tensor_parallel;
    double compute_efficiency;  /* fraction of peak FLOP/s reached */
    double memory_efficiency;   /* fraction of HBM bandwidth reached */
    double link_efficiency;     /* fraction of the TP link reached */
    int64_t overhead_ns;        /* fixed per-iteration time (scheduler, launch) */
    int64_t mixed_overhead_ns;  /* more for an iteration with prefill tokens (piecewise graphs) */
    int64_t allreduce_latency_ns; /* per all-reduce with tensor parallelism */
    double linear_c0_ms, linear_c1_ms, linear_c2_ms, linear_c3_ms;
    char *table;                /* CSV for the table form */
} kvio_cost_config_t;

/* The batch of one iteration. Prefill sequences are given as (new tokens,
 * tokens already in the KV cache); decode sequences by their contexts. */
typedef struct kvio_batch {
    uint64_t prefill_tokens;       /* Σ new prefill tokens */
    uint64_t prefill_seqs;
    double prefill_attention;      /* Σ over prefill seqs of n·c + n(n+1)/2 */
    uint64_t prefill_context;      /* Σ cached context read by prefill seqs */
    uint64_t decode_seqs;
    uint64_t decode_context;       /* Σ context of decode sequences */
    uint64_t spec_tokens;          /* Σ draft tokens verified beside the decodes */
    double spec_attention;         /* Σ (query, key) pairs of those draft tokens */
} kvio_batch_t;

/* What the cost model says about one iteration. */
typedef struct kvio_cost_breakdown {
    double flops;
    double bytes;
    double compute_s;
    double memory_s;
    double allreduce_s;
    double overhead_s;       /* fixed time, the mixed batch's included */
    double mixed_overhead_s; /* of overhead_s: the iteration has prefill tokens */
    double time_s;
    const char *bound; /* "compute", "memory", "linear", "table" */
} kvio_cost_breakdown_t;

typedef struct kvio_cost kvio_cost_t;

/* The option table of the `cost:` section. */
extern const kvio_opt_t kvio_cost_options[];

/* Creates a cost model (reads the table CSV for the table form). The model
 * and GPU must be resolved; they are copied. Caller destroys. */
kvio_status_t kvio_cost_create(const kvio_cost_config_t *config, const kvio_model_t *model,
                               const kvio_gpu_t *gpu, kvio_cost_t **cost_p, char *error_p,
                               size_t error_len);
void kvio_cost_destroy(kvio_cost_t *cost);

/* Adds one prefill sequence (new tokens on top of cached) or one decode
 * sequence to a batch. */
void kvio_batch_add_prefill(kvio_batch_t *batch, uint64_t new_tokens, uint64_t cached_tokens);
void kvio_batch_add_decode(kvio_batch_t *batch, uint64_t context_tokens);

/* A decode sequence verifying drafts draft tokens after its new one (a
 * speculative step): one sequence, 1 + drafts query tokens. */
void kvio_batch_add_verify(kvio_batch_t *batch, uint64_t context_tokens, uint64_t drafts);

/* The time of one iteration, with its terms. */
void kvio_cost_iteration(const kvio_cost_t *cost, const kvio_batch_t *batch,
                         kvio_cost_breakdown_t *breakdown_p);

/* A measured iteration for fitting the linear form. */
typedef struct kvio_cost_sample {
    double prefill_tokens, decode_seqs, context_tokens, time_ms;
} kvio_cost_sample_t;

/* Reads samples from a CSV with columns prefill_tokens, decode_seqs,
 * context_tokens, time_ms (any order, by header). Caller frees *samples_p. */
kvio_status_t kvio_cost_read_samples(const char *path, kvio_cost_sample_t **samples_p,
                                     size_t *count_p, char *error_p, size_t error_len);

/* Least-squares fit of t = c0 + c1·prefill + c2·decode + c3·context (ms).
 * Returns the coefficients and the fit's RMSE and R². */
typedef struct kvio_cost_fit {
    double c0, c1, c2, c3;
    double rmse_ms, max_abs_error_ms, r_squared;
    size_t samples;
} kvio_cost_fit_t;

kvio_status_t kvio_cost_fit_linear(const kvio_cost_sample_t *samples, size_t count,
                                   kvio_cost_fit_t *fit_p, char *error_p, size_t error_len);

#endif
