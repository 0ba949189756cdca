/* The model as every side sees it: a transformer's shape and the GPU it
 * runs on (presets from published configs and datasheets), what follows
 * from them (parameters, weight bytes, KV bytes per token, KV capacity),
 * its tensors in checkpoint order, its weights as bytes (fill, versions,
 * checksum, deltas) and the emulated learning curve. Serving, training and
 * the transports all read it; it knows nothing of them. */
#ifndef KVIO_MODEL_H
#define KVIO_MODEL_H

#include "kvio/config.h"
#include "kvio/data.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------- shape and GPU ---------- */

/* Number formats of weights, activations and the KV cache. The compute peak
 * a matmul runs at follows its inputs (kvio_cost_compute_peak): fp8 x fp8
 * at the GPU's fp8 peak, int4 weights with bf16 activations at the bf16
 * peak (weight-only), and so on. */
typedef enum {
    KVIO_DTYPE_AUTO = 0, /* from the byte counts (dtype_bytes, weight_dtype_bytes) */
    KVIO_DTYPE_BF16,
    KVIO_DTYPE_FP16,
    KVIO_DTYPE_FP8,
    KVIO_DTYPE_INT8,
    KVIO_DTYPE_INT4,  /* weight-only, group-quantized (GPTQ/AWQ: a 16-bit scale and a
                         4-bit zero per 128 weights) */
    KVIO_DTYPE_FP4,   /* NVFP4: an fp8 scale per 16 values */
    KVIO_DTYPE_MXFP4, /* OCP MXFP4: an 8-bit scale per 32 values */
    KVIO_DTYPE_FP32,
} kvio_dtype_t;

/* The names of the formats ("auto", "bf16", ...), NULL-terminated, in
 * kvio_dtype_t order; and the bytes one value takes, scales included. */
extern const char *const kvio_dtype_names[];
double kvio_dtype_bytes(int dtype);

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
    /* Formats (kvio_dtype_t; AUTO: from the byte counts above). weight_dtype
     * quantizes the layers' linear weights (the embedding and LM head stay
     * in the activations' format, as quantized checkpoints ship them);
     * activation_dtype is the matmuls' input format (AUTO: the weights' where
     * the GPU computes in it, else 16-bit); kv_cache_dtype the KV cache's. */
    int weight_dtype, activation_dtype, kv_cache_dtype;
    double kv_dtype_bytes;        /* resolved: bytes per KV element */
    double embedding_dtype_bytes; /* resolved: bytes per embedding/LM-head weight */
} kvio_model_t;

/* How GPUs of one node reach each other: NVLink through an NVSwitch (every
 * pair at full link bandwidth), an NVLink bridge (pairs), or PCIe. */
typedef enum {
    KVIO_LINK_AUTO = 0, /* the preset's; without one, PCIe when the link is no faster */
    KVIO_LINK_NVSWITCH,
    KVIO_LINK_NVLINK_BRIDGE,
    KVIO_LINK_PCIE,
} kvio_link_kind_t;
extern const char *const kvio_link_kind_names[];

/* A GPU's datasheet figures (dense tensor-core peaks, without sparsity; a
 * format the GPU has no tensor-core path for has peak 0), and what a
 * forward pass reaches of them (achievable fractions, from published
 * measurements: see docs/engine.md, cost model). */
typedef struct kvio_gpu {
    char *preset;
    double flops;          /* dense bf16 FLOP/s */
    double fp8_flops;      /* dense fp8 FLOP/s (0: none) */
    double int8_flops;     /* dense int8 OP/s (0: none) */
    double fp4_flops;      /* dense fp4 FLOP/s (0: none) */
    double hbm_bandwidth;  /* bytes/s */
    uint64_t memory;       /* bytes */
    double host_bandwidth; /* host link (PCIe), bytes/s per direction */
    double link_bandwidth; /* GPU-GPU link for tensor parallelism, bytes/s per direction */
    int link_kind;         /* kvio_link_kind_t */
    int64_t link_latency_ns; /* one step of a collective over the link (a hop, a sync) */
    double compute_efficiency; /* fraction of the peak a forward pass's matmuls reach */
    double memory_efficiency;  /* fraction of HBM bandwidth a forward pass reaches */
} kvio_gpu_t;

/* Option tables for the `model:` and `gpu:` sections. A `preset` key fills
 * the shape; any other key given overrides the preset's value. */
extern const kvio_opt_t kvio_model_options[];
extern const kvio_opt_t kvio_gpu_options[];

/* Fills model fields left at 0 from its preset (error names unknown
 * presets and lists the known ones). */
kvio_status_t kvio_model_resolve(kvio_model_t *model, char *error_p, size_t error_len);
kvio_status_t kvio_gpu_resolve(kvio_gpu_t *gpu, char *error_p, size_t error_len);

/* Prints the model and GPU presets, one per line. */
void kvio_model_print_presets(FILE *out);

/* Parameters of one layer's attention projections (q, k, v, o), of one
 * expert's (or the dense MLP's) gate, up and down projections, and of the
 * embedding and LM head (one table when tied). */
double kvio_model_attention_params(const kvio_model_t *model);
double kvio_model_expert_params(const kvio_model_t *model);
double kvio_model_embedding_params(const kvio_model_t *model);

/* Parameter count: all weights. */
double kvio_model_params(const kvio_model_t *model);

/* Bytes of the embedding and LM head (one table when tied). */
double kvio_model_embedding_bytes(const kvio_model_t *model);

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
kvio_status_t kvio_model_kv_capacity(const kvio_model_t *model, const kvio_gpu_t *gpu,
                                     int64_t tensor_parallel, double utilization,
                                     uint64_t *bytes_p, char *error_p, size_t error_len);

/* ---------- tensors ---------- */

typedef enum {
    KVIO_TENSOR_ATTENTION = 0, /* q, k, v, o projections */
    KVIO_TENSOR_MLP,           /* a dense MLP's, or one expert's, projections */
    KVIO_TENSOR_ROUTER,        /* an MoE layer's gate */
    KVIO_TENSOR_NORM,
    KVIO_TENSOR_EMBEDDING,     /* the token embedding and the LM head */
} kvio_tensor_kind_t;

typedef struct kvio_tensor {
    char name[80];
    int32_t layer;   /* -1: not in a layer */
    int32_t expert;  /* -1: not an expert's */
    int kind;        /* kvio_tensor_kind_t */
    uint64_t rows, columns;
    uint64_t bytes;  /* rows x columns x the weights' bytes per element (rounded) */
} kvio_tensor_t;

/* The tensors of a resolved model, in checkpoint order (malloc'd; free
 * *tensors_p). Their elements, norms aside, add up to kvio_model_params. */
kvio_status_t kvio_model_tensors(const kvio_model_t *model, kvio_tensor_t **tensors_p,
                                 size_t *count_p);

/* Name of a kind ("attention", ...). */
const char *kvio_tensor_kind_name(int kind);

/* ---------- weights ---------- */

/* Fills a weights buffer from a seed; changes it for version (one word in
 * every 4 KiB page, so a stale page cannot pass); checksums it (XXH3-64). */
void kvio_weights_fill(void *buffer, uint64_t bytes, uint64_t seed);
/* The same as data says (the workload's data:): random is kvio_weights_fill,
 * zero all zeros, compress and dedupe fio's buffers of that kind. Each
 * version's mutation then touches every page (dedupe's shared pages too). */
void kvio_weights_fill_as(void *buffer, uint64_t bytes, uint64_t seed, const kvio_data_t *data);
void kvio_weights_mutate(void *buffer, uint64_t bytes, uint64_t version);
uint64_t kvio_weights_checksum(const void *buffer, uint64_t bytes);

/* Delta updates (weight_sync.delta, emulate mode; model/delta.c): the
 * trainer and every receiver start from the same weights (kvio_weights_fill
 * of seed, as an RL run's engines load the trainer's initial checkpoint);
 * each version changes `fraction` of the weights' elements (`element` bytes
 * each: 1, 2, 4 or 8), one in each stratum of 1/fraction elements, chosen
 * by the version; a bucket moves only its changes, as index_value records
 * (a 4-byte index and the value) or as a bitmap of its elements and the
 * changed values. fraction 0: every version is whole. */
typedef enum { KVIO_DELTA_INDEX_VALUE = 0, KVIO_DELTA_BITMAP } kvio_delta_encoding_t;
typedef struct kvio_delta {
    double fraction;
    int encoding; /* kvio_delta_encoding_t */
    uint32_t element;
    uint64_t seed; /* the weights before the first version */
} kvio_delta_t;

/* Delta updates. supported: whether elements of that many bytes can be
 * sent as deltas. mutate: the trainer's writes of version (every changed
 * element of the weights takes new bits). bound: the most bytes a bucket of
 * bytes encodes to. encode: the changes of version in the bucket at offset
 * (bytes long) of the weights (weights_bytes long, as version has them)
 * into out (bound bytes), their count in *entries_p; returns the bytes
 * written. apply: writes the changes that lie in [from, to) (bytes of the
 * bucket, whole elements) into bucket (bucket_bytes long), taking them from
 * *cursor_p on (0 at the bucket's start; advanced past them); false when
 * the encoding is corrupt (an index out of order or past the bucket, or
 * fewer values than bits). */
bool kvio_delta_supported(uint32_t element);
void kvio_delta_mutate(const kvio_delta_t *delta, void *weights, uint64_t bytes,
                            uint64_t version);
uint64_t kvio_delta_bound(const kvio_delta_t *delta, uint64_t bytes);
/* What a ring slot needs for a bucket of bytes: bytes, or with deltas
 * (delta non-NULL, fraction above 0) its bound when that is more. */
uint64_t kvio_delta_slot_bytes(const kvio_delta_t *delta, uint64_t bytes);
uint64_t kvio_delta_encode(const kvio_delta_t *delta, uint64_t version,
                                const void *weights, uint64_t weights_bytes, uint64_t offset,
                                uint64_t bytes, void *out, uint64_t *entries_p);
bool kvio_delta_apply(const kvio_delta_t *delta, const void *encoding,
                           uint64_t entries, uint64_t bucket_bytes, void *bucket, uint64_t from,
                           uint64_t to, uint64_t *cursor_p);
/* encode in steps: begin, then encode_to(to) for growing to (bytes of the
 * bucket; the changes below it), then end gives what encode returns. */
typedef struct kvio_delta_walk {
    uint64_t stride, seed, elements, first, stratum, lo;
} kvio_delta_walk_t;
typedef struct kvio_delta_encoder {
    const kvio_delta_t *delta;
    const unsigned char *source;
    void *out;
    unsigned char *write;
    uint64_t first, offset, end, entries;
    kvio_delta_walk_t walk;
} kvio_delta_encoder_t;
void kvio_delta_encode_begin(kvio_delta_encoder_t *encoder,
                                  const kvio_delta_t *delta, uint64_t version,
                                  const void *weights, uint64_t weights_bytes, uint64_t offset,
                                  uint64_t bytes, void *out);
void kvio_delta_encode_to(kvio_delta_encoder_t *encoder, uint64_t to);
uint64_t kvio_delta_encode_end(const kvio_delta_encoder_t *encoder,
                                    uint64_t *entries_p);
/* ---------- the learning curve ---------- */

/* Emulated learning curve L(step) = a * step^-b + c. */
typedef struct kvio_loss_curve {
    double a, b, c;
} kvio_loss_curve_t;

/* The option table of a loss curve (a, b, c). */
extern const kvio_opt_t kvio_loss_options[];

/* The predicted loss at step (>= 1). */
double kvio_loss_at(const kvio_loss_curve_t *curve, double step);

#endif
