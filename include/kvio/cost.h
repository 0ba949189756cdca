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

/* Engine profiles: how an engine runs a step (serve/cost_engines.c). */
typedef enum {
    KVIO_ENGINE_VLLM_CUDAGRAPH = 0, /* vLLM with CUDA graphs (the default) */
    KVIO_ENGINE_VLLM_EAGER,         /* vLLM --enforce-eager */
    KVIO_ENGINE_SGLANG,             /* SGLang with CUDA graphs */
    KVIO_ENGINE_SGLANG_EAGER,       /* SGLang --disable-cuda-graph */
    KVIO_ENGINE_TRTLLM,             /* TensorRT-LLM (NIM's optimized profiles) */
} kvio_cost_engine_t;
extern const char *const kvio_cost_engine_names[];

/* All-reduce algorithms (tensor parallelism): auto takes the fastest the
 * engine could pick, as NCCL's tuner and vLLM's custom all-reduce do. */
typedef enum {
    KVIO_ALLREDUCE_AUTO = 0,
    KVIO_ALLREDUCE_RING,     /* 2(n-1) steps, 2(n-1)/n of the data over each link */
    KVIO_ALLREDUCE_TREE,     /* 2 log2(n) steps, a ring's bytes per link (double tree) */
    KVIO_ALLREDUCE_ONE_SHOT, /* one step: each GPU reads its n-1 peers' buffers */
    KVIO_ALLREDUCE_TWO_SHOT, /* reduce-scatter and all-gather: 2 steps, 2(n-1)/n */
} kvio_allreduce_t;
extern const char *const kvio_allreduce_names[];

/* An engine parameter left to the engine profile (`auto` in a workload;
 * kvio_config_defaults(kvio_cost_options, ...) sets every one of them). */
#define KVIO_COST_AUTO KVIO_OPT_AUTO_VALUE

/* The cost model's parameters (the `cost:` section). The engine's
 * overheads and cudagraph_max_batch at KVIO_COST_AUTO take the engine
 * profile's; the efficiencies left at 0 the GPU's. */
typedef struct kvio_cost_config {
    int kind;                   /* kvio_cost_kind_t */
    int engine;                 /* kvio_cost_engine_t */
    int64_t tensor_parallel;
    int64_t pipeline_parallel;  /* stages, each tensor_parallel GPUs */
    bool expert_parallel;       /* MoE experts spread over the TP GPUs (all-to-all) */
    int allreduce;              /* kvio_allreduce_t */
    double compute_efficiency;  /* fraction of peak FLOP/s reached (0: the GPU's) */
    double memory_efficiency;   /* fraction of HBM bandwidth reached (0: the GPU's) */
    double link_efficiency;     /* fraction of the TP link reached */
    int64_t overhead_ns;        /* per step on the host (scheduler, inputs, sampler) */
    int64_t sequence_overhead_ns; /* per sequence of a step on the host */
    int64_t eager_layer_ns;     /* per layer launched eagerly: the host's launch time */
    int64_t mixed_overhead_ns;  /* more for a step that cannot replay one full graph */
    int64_t allreduce_latency_ns; /* the engine's start-up of one all-reduce */
    int64_t request_overhead_ns;  /* per request before its first step (API, tokenizer) */
    int64_t cudagraph_max_batch;  /* the largest decode batch replayed as a graph */
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

/* What the cost model says about one iteration. Bytes, FLOPs and times are
 * one GPU's (each GPU of a TP group does the same share); time_s is the
 * step's, the same for every GPU of the group. */
typedef struct kvio_cost_breakdown {
    double flops;            /* matmul and attention FLOPs */
    double bytes;            /* weight and KV bytes */
    double weight_bytes;     /* the weights the step reads */
    double kv_bytes;         /* KV read and written */
    double weights_s;        /* the weights at the memory efficiency */
    double kv_s;             /* the KV at the memory efficiency */
    double compute_s;        /* the FLOPs at the compute efficiency (matmul peak by format) */
    double memory_s;         /* weights_s + kv_s */
    double linear_s;         /* the matmuls: max(their compute, weights_s) */
    double attention_s;      /* attention: max(its compute, kv_s) */
    double allreduce_s;      /* tensor parallelism: two all-reduces per layer */
    double alltoall_s;       /* expert parallelism: dispatch and combine per MoE layer */
    double pipeline_s;       /* pipeline parallelism: activations between stages */
    double bubble_fraction;  /* pipeline parallelism: the share of a step a stage idles */
    double launch_s;         /* what eager launches add where the host is slower than the GPU */
    double overhead_s;       /* the engine's host time, the mixed batch's included */
    double mixed_overhead_s; /* of overhead_s: the step could not replay one full graph */
    double gpu_s;            /* the device's part: everything but overhead_s */
    double time_s;
    uint64_t graph_batch;    /* the decode batch padded to a captured size (0: no graph) */
    const char *bound; /* "compute", "memory", "linear", "table" */
} kvio_cost_breakdown_t;

/* An engine profile's parameters, as a run uses them (the cost: keys
 * given, the profile's for the others). */
typedef struct kvio_cost_params {
    const char *engine;
    bool cuda_graphs;
    int fallback;              /* kvio_cost_fallback_t: a step without a full graph */
    double compute_efficiency, memory_efficiency, link_efficiency;
    int64_t overhead_ns, sequence_overhead_ns, eager_layer_ns;
    int64_t mixed_overhead_ns, allreduce_latency_ns, request_overhead_ns;
    int64_t cudagraph_max_batch;
} kvio_cost_params_t;

/* What a step that cannot replay one full CUDA graph costs an engine:
 * piecewise graphs (vLLM: mixed_overhead), eager launches (layers x
 * eager_layer against the GPU's time) or nothing (a compiled engine). */
typedef enum {
    KVIO_FALLBACK_PIECEWISE = 0,
    KVIO_FALLBACK_EAGER,
    KVIO_FALLBACK_COMPILED,
} kvio_cost_fallback_t;

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

/* The parameters a cost model runs with (the engine profile's where the
 * config left them at 0). */
void kvio_cost_params(const kvio_cost_t *cost, kvio_cost_params_t *params_p);

/* The peak FLOP/s the model's matmuls run at on the GPU: its fp8, int8 or
 * fp4 peak when weights and activations both take that format and the GPU
 * has it, else bf16 (a weight-only format dequantizes into 16-bit). */
double kvio_cost_compute_peak(const kvio_model_t *model, const kvio_gpu_t *gpu);

/* GPUs a serve rank spans: tensor_parallel x pipeline_parallel (what KV
 * capacity and weights per GPU divide by). */
int64_t kvio_cost_gpus(const kvio_cost_config_t *config);

/* Prints the engine profiles, one per line. */
void kvio_cost_print_engines(FILE *out);

/* ---------- what a benchmark measures ---------- */

/* The shape of a measurement: a batch of batch_size requests of
 * input_tokens each, prefilled in chunks of at most chunk tokens (0: at
 * once), then generating output_tokens (the first from the prefill). */
typedef struct kvio_cost_run_shape {
    uint64_t batch_size, input_tokens, output_tokens, chunk;
} kvio_cost_run_shape_t;

/* What the cost model gives such a run: the whole run (vllm bench
 * latency's end-to-end latency), its prefill (bench_one_batch's prefill
 * latency; TTFT less the request overhead) and its median decode step
 * (TPOT, ITL), in seconds. */
typedef struct kvio_cost_run {
    double total_s, prefill_s, decode_s;
} kvio_cost_run_t;

void kvio_cost_run(const kvio_cost_t *cost, const kvio_cost_run_shape_t *shape,
                   kvio_cost_run_t *run_p);

/* Refuses a run kvio_cost_run could not cost in bounded time and memory
 * (at most 65,536 requests, 10 M prompt and 1 M output tokens each, 100 M
 * tokens in all), naming where it comes from: KVIO_ERR_INVALID. */
kvio_status_t kvio_cost_check_run_shape(const kvio_cost_run_shape_t *shape, const char *where,
                                        char *error_p, size_t error_len);

/* ---------- published measurements ---------- */

/* What a published row measured of its run. */
typedef enum {
    KVIO_POINT_TOTAL_MS = 0,       /* the whole run (vllm bench latency) */
    KVIO_POINT_TTFT_MS,            /* the prefill plus the request overhead (a client's TTFT) */
    KVIO_POINT_DECODE_MS,          /* a decode step (TPOT, ITL, bench_one_batch's median) */
    KVIO_POINT_PREFILL_TOKENS_PER_S, /* prompt tokens over the prefill's time */
    KVIO_POINT_PREFILL_MS,         /* the prefill alone (bench_one_batch's prefill latency) */
} kvio_cost_metric_t;

/* kvio's value of metric for a run (ms, or tok/s), a request's time before
 * its first step counting in a TTFT. */
double kvio_cost_run_metric(const kvio_cost_t *cost, const kvio_cost_run_shape_t *shape,
                            int metric);

/* A published measurement of a real engine and how kvio costs its run:
 * model and GPU presets, engine profile, parallelism, formats, the run's
 * shape and what was measured, with the tolerance the row must hold.
 * unexplained: why a row is left outside its tolerance (no cost the model
 * knows explains it), with the band its error is pinned to; NULL for the
 * others. */
typedef struct kvio_cost_point {
    const char *name;
    const char *source; /* the citation */
    const char *model, *gpu;
    int engine;       /* kvio_cost_engine_t */
    int64_t tensor_parallel;
    int weight_dtype; /* kvio_dtype_t */
    kvio_cost_run_shape_t shape;
    int metric;       /* kvio_cost_metric_t */
    double measured;
    double tolerance; /* |kvio − measured| / measured at most */
    const char *unexplained;
    double band_low, band_high; /* an unexplained row's error (a fraction) stays in these */
} kvio_cost_point_t;

/* The published measurements (static; *count_p of them). */
const kvio_cost_point_t *kvio_cost_points(size_t *count_p);

/* The unit a metric is in ("ms", "tok/s"). */
const char *kvio_cost_metric_unit(int metric);

/* kvio's value for a point with the default parameters of its engine
 * profile and GPU preset. */
kvio_status_t kvio_cost_point_predict(const kvio_cost_point_t *point, double *value_p,
                                      char *error_p, size_t error_len);

/* A measured iteration for fitting the linear form. */
typedef struct kvio_cost_sample {
    double prefill_tokens, decode_seqs, context_tokens, time_ms;
} kvio_cost_sample_t;

/* Reads samples from a CSV with columns prefill_tokens, decode_seqs,
 * context_tokens, time_ms (any order, by header). Caller frees *samples_p. */
kvio_status_t kvio_cost_read_samples(const char *path, kvio_cost_sample_t **samples_p,
                                     size_t *count_p, char *error_p, size_t error_len);

/* ---------- fitting the roofline to measurements ---------- */

/* One measurement kvio fit reads: a step of a batch (a CSV row: prefill
 * tokens as one sequence, decode sequences sharing the context evenly) or
 * a benchmark's run of a shape, with what was measured of it (a metric). */
typedef struct kvio_cost_measurement {
    bool run;                    /* a run of shape; else a step */
    kvio_cost_sample_t step;
    kvio_cost_run_shape_t shape;
    int metric;                  /* kvio_cost_metric_t, for a run */
    double measured;             /* ms, or tok/s */
    char origin[256];            /* where it comes from: "file:line", "file: mean TTFT" */
} kvio_cost_measurement_t;

/* The formats kvio fit reads (auto: by the file's content). */
typedef enum {
    KVIO_FIT_AUTO = 0,
    KVIO_FIT_CSV,          /* prefill_tokens, decode_seqs, context_tokens, time_ms */
    KVIO_FIT_VLLM_LATENCY, /* vllm bench latency --output-json: avg_latency of a batch */
    KVIO_FIT_VLLM_SERVE,   /* vllm bench serve --save-result: mean TTFT and TPOT */
    KVIO_FIT_SGLANG,       /* sglang.bench_one_batch --result-filename: JSON lines */
} kvio_fit_format_t;
extern const char *const kvio_fit_format_names[];

/* Appends path's measurements to *list_p (*count_p of them; realloc'd, the
 * caller frees). latency is the shape of a vllm bench latency run (its
 * JSON does not hold it: --batch-size, --input-len, --output-len). Errors
 * name the file, its line or key. */
kvio_status_t kvio_cost_read_measurements(const char *path, int format,
                                          const kvio_cost_run_shape_t *latency,
                                          kvio_cost_measurement_t **list_p, size_t *count_p,
                                          char *error_p, size_t error_len);

/* kvio's value for a measurement. */
double kvio_cost_measurement_predict(const kvio_cost_t *cost,
                                     const kvio_cost_measurement_t *measurement);

/* The roofline parameters fit_roofline may move. */
enum { KVIO_FIT_MEMORY_EFFICIENCY = 0, KVIO_FIT_COMPUTE_EFFICIENCY, KVIO_FIT_OVERHEAD,
       KVIO_FIT_PARAMS };

/* A roofline fit: the config with the fitted parameters set, which ones
 * moved (at most one per measurement, those the measurements depend on
 * most), and each measurement's prediction before and after. */
typedef struct kvio_cost_roofline_fit {
    kvio_cost_config_t config;   /* the input's, fitted parameters set; table not owned */
    bool fitted[KVIO_FIT_PARAMS];
    double *before, *after;      /* per measurement (malloc'd; kvio_cost_roofline_fit_free) */
    double rms_error, max_error; /* relative, after */
} kvio_cost_roofline_fit_t;

/* Fits the roofline's memory and compute efficiency and step overhead to
 * measurements (least squares on log ratios, within bounds), the engine
 * profile's other parameters held. */
kvio_status_t kvio_cost_fit_roofline(const kvio_cost_config_t *config,
                                     const kvio_model_t *model, const kvio_gpu_t *gpu,
                                     const kvio_cost_measurement_t *measurements, size_t count,
                                     kvio_cost_roofline_fit_t *fit_p, char *error_p,
                                     size_t error_len);
void kvio_cost_roofline_fit_free(kvio_cost_roofline_fit_t *fit);

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
