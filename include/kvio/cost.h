/* The cost model: how long one engine iteration takes, from the batch it
 * runs (prefill tokens, decode sequences and their contexts), a model shape
 * and a GPU spec. Three forms: roofline (default), linear, and a measured
 * table. Also model and GPU presets from public datasheets, KV bytes per
 * token, and KV capacity from GPU memory. */
#ifndef KVIO_COST_H
#define KVIO_COST_H

#include "kvio/config.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A transformer's shape. MoE models set num_experts > 0 (the MLP holds
 * num_experts experts of intermediate_size, experts_per_token active);
 * sliding_window_layers of the layers keep only sliding_window tokens of KV. */
typedef struct kvio_model {
    char *preset;
    int64_t layers;
    int64_t hidden;
    int64_t heads;
    int64_t kv_heads;
    int64_t head_dim;
    int64_t intermediate;
    int64_t vocab;
    int64_t num_experts;
    int64_t experts_per_token;
    int64_t sliding_window_layers;
    int64_t sliding_window;
    double dtype_bytes;        /* activations and KV (bf16: 2) */
    double weight_dtype_bytes; /* weights; 0 means dtype_bytes */
    bool tied_embeddings;
} kvio_model_t;

/* A GPU's datasheet figures. */
typedef struct kvio_gpu {
    char *preset;
    double flops;          /* dense bf16 FLOP/s */
    double hbm_bandwidth;  /* bytes/s */
    uint64_t memory;       /* bytes */
    double host_bandwidth; /* host link (PCIe), bytes/s per direction */
    double link_bandwidth; /* GPU-GPU link for tensor parallelism, bytes/s */
} kvio_gpu_t;

typedef enum { KVIO_COST_ROOFLINE = 0, KVIO_COST_LINEAR = 1, KVIO_COST_TABLE = 2 } kvio_cost_kind_t;

/* The cost model's parameters (the `cost:` section). */
typedef struct kvio_cost_config {
    int kind;                   /* kvio_cost_kind_t */
    int64_t tensor_parallel;
    double compute_efficiency;  /* fraction of peak FLOP/s reached */
    double memory_efficiency;   /* fraction of HBM bandwidth reached */
    double link_efficiency;     /* fraction of the TP link reached */
    int64_t overhead_ns;        /* fixed per-iteration time (scheduler, launch) */
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
} kvio_batch_t;

/* What the cost model says about one iteration. */
typedef struct kvio_cost_breakdown {
    double flops;
    double bytes;
    double compute_s;
    double memory_s;
    double allreduce_s;
    double overhead_s;
    double time_s;
    const char *bound; /* "compute", "memory", "linear", "table" */
} kvio_cost_breakdown_t;

typedef struct kvio_cost kvio_cost_t;

/* Option tables for the `model:`, `gpu:` and `cost:` sections. A `preset`
 * key fills the shape; any other key given overrides the preset's value. */
extern const kvio_opt_t kvio_model_options[];
extern const kvio_opt_t kvio_gpu_options[];
extern const kvio_opt_t kvio_cost_options[];

/* Fills model fields left at 0 from its preset (error names unknown
 * presets and lists the known ones). */
kvio_status_t kvio_model_resolve(kvio_model_t *model, char *error_p, size_t error_len);
kvio_status_t kvio_gpu_resolve(kvio_gpu_t *gpu, char *error_p, size_t error_len);

/* Prints the model and GPU presets, one per line. */
void kvio_cost_print_presets(FILE *out);

/* Parameter counts: all weights, and those one token touches (MoE). */
double kvio_model_params(const kvio_model_t *model);
double kvio_model_active_params(const kvio_model_t *model);

/* Bytes of all weights (what a checkpoint or model update moves). */
uint64_t kvio_model_weight_bytes(const kvio_model_t *model);

/* KV bytes per token of context on one GPU: 2·layers·kv_heads·head_dim·dtype/tp
 * (Llama-3-8B in bf16: 128 KiB). Sliding-window layers are left out; their
 * KV is bounded by the window (see kvio_model_window_kv_bytes). */
uint64_t kvio_model_kv_bytes_per_token(const kvio_model_t *model, int64_t tensor_parallel);

/* KV bytes the sliding-window layers hold per sequence at most. */
uint64_t kvio_model_window_kv_bytes(const kvio_model_t *model, int64_t tensor_parallel);

/* KV capacity in bytes: utilization × GPU memory − this GPU's share of the
 * weights. Weights that do not fit are an error with the numbers. */
kvio_status_t kvio_cost_kv_capacity(const kvio_model_t *model, const kvio_gpu_t *gpu,
                                    int64_t tensor_parallel, double utilization,
                                    uint64_t *bytes_p, char *error_p, size_t error_len);

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
