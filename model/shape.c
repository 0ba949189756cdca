/* The `model:` and `gpu:` sections: option tables, filling a shape or a
 * spec from its preset, and the arithmetic of a shape (parameters, weight
 * bytes, KV bytes per token, KV capacity on a GPU). */
#include "kvio/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_int.h"

const kvio_opt_t kvio_model_options[] = {
    {.key = "preset", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_model_t, preset),
     .default_value = "llama3-8b", .help = "model shape preset (kvio cost --list shows them)"},
#define MODEL_INT(name, text)                                                              \
    {.key = #name, .type = KVIO_OPT_INT, .offset = offsetof(kvio_model_t, name),           \
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = text " (0: from the preset)"}
    MODEL_INT(layers, "transformer layers"),
    MODEL_INT(hidden, "hidden size"),
    MODEL_INT(heads, "attention heads"),
    MODEL_INT(kv_heads, "key/value heads (GQA)"),
    MODEL_INT(head_dim, "dimension of one head"),
    MODEL_INT(intermediate, "MLP intermediate size (per expert for MoE)"),
    MODEL_INT(vocab, "vocabulary size"),
    MODEL_INT(num_experts, "MoE experts per layer"),
    MODEL_INT(experts_per_token, "MoE experts each token uses"),
    MODEL_INT(sliding_window_layers, "layers with sliding-window attention"),
    MODEL_INT(sliding_window, "tokens a sliding-window layer keeps"),
#undef MODEL_INT
    {.key = "dtype_bytes", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_model_t, dtype_bytes),
     .default_value = "2", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.125, .max = 8,
     .help = "bytes per activation and KV element (bf16: 2, fp8: 1)"},
    {.key = "weight_dtype_bytes", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_model_t, weight_dtype_bytes), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 8,
     .help = "bytes per weight (0: the preset's, else dtype_bytes)"},
    {.key = "weight_dtype", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_model_t, weight_dtype),
     .values = kvio_dtype_names, .default_value = "auto",
     .help = "the layers' linear weights (fp8, int4 weight-only, fp4 ...; the embedding and LM "
             "head stay in the activations' format); auto: weight_dtype_bytes"},
    {.key = "activation_dtype", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_model_t, activation_dtype), .values = kvio_dtype_names,
     .default_value = "auto",
     .help = "the matmuls' input format, which picks the GPU's peak (fp8 x fp8 at its fp8 "
             "peak); auto: the weights' where the GPU computes in it, else 16-bit"},
    {.key = "kv_cache_dtype", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_model_t, kv_cache_dtype), .values = kvio_dtype_names,
     .default_value = "auto",
     .help = "the KV cache's format (fp8 halves its bytes and its read time); auto: dtype_bytes"},
    {.key = NULL},
};

const char *const kvio_dtype_names[] = {"auto", "bf16", "fp16", "fp8",   "int8",
                                        "int4", "fp4",  "mxfp4", "fp32", NULL};

double kvio_dtype_bytes(int dtype)
{
    switch (dtype) {
    case KVIO_DTYPE_BF16:
    case KVIO_DTYPE_FP16: return 2;
    case KVIO_DTYPE_FP8:
    case KVIO_DTYPE_INT8: return 1;
    case KVIO_DTYPE_INT4: return 0.5 + 2.5 / 128; /* a 16-bit scale, a 4-bit zero per 128 */
    case KVIO_DTYPE_FP4: return 0.5 + 1.0 / 16;   /* an fp8 scale per 16 */
    case KVIO_DTYPE_MXFP4: return 0.5 + 1.0 / 32; /* an 8-bit scale per 32 */
    case KVIO_DTYPE_FP32: return 4;
    default: return 0;
    }
}

const char *const kvio_link_kind_names[] = {"auto", "nvswitch", "nvlink-bridge", "pcie", NULL};

const kvio_opt_t kvio_gpu_options[] = {
    {.key = "preset", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_gpu_t, preset),
     .default_value = "h200", .help = "GPU preset (kvio cost --list shows them)"},
    {.key = "flops", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_gpu_t, flops),
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "dense bf16 FLOP/s (0: from the preset)"},
    {.key = "hbm_bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_gpu_t, hbm_bandwidth), .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "memory bandwidth in bytes/s (0: from the preset)"},
    {.key = "memory", .type = KVIO_OPT_SIZE, .offset = offsetof(kvio_gpu_t, memory),
     .help = "GPU memory (0: from the preset)"},
    {.key = "host_bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_gpu_t, host_bandwidth), .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "host link bytes/s per direction (0: from the preset)"},
    {.key = "link_bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_gpu_t, link_bandwidth), .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "GPU-to-GPU bytes/s for tensor parallelism (0: from the preset)"},
#define GPU_PEAK(name, text)                                                               \
    {.key = #name, .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_gpu_t, name),          \
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = text " (0: from the preset)"}
    GPU_PEAK(fp8_flops, "dense fp8 FLOP/s"),
    GPU_PEAK(int8_flops, "dense int8 OP/s"),
    GPU_PEAK(fp4_flops, "dense fp4 FLOP/s"),
#undef GPU_PEAK
    {.key = "link_kind", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_gpu_t, link_kind),
     .values = kvio_link_kind_names, .default_value = "auto",
     .help = "how the GPUs reach each other: nvswitch, nvlink-bridge (pairs) or pcie (auto: "
             "the preset's)"},
    {.key = "link_latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_gpu_t, link_latency_ns),
     .help = "one step of a collective over the link (0: from the preset)"},
    {.key = "compute_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_gpu_t, compute_efficiency),
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "fraction of the peak a forward pass's matmuls reach (0: from the preset)"},
    {.key = "memory_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_gpu_t, memory_efficiency),
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "fraction of HBM bandwidth a forward pass reaches (0: from the preset)"},
    {.key = NULL},
};

/* ---------- presets ---------- */

/* Byte counts from the formats: a quantized weight format applies to the
 * layers' linear weights, the embedding and LM head keeping the
 * activations' bytes; with weight_dtype auto every weight takes
 * weight_dtype_bytes (a preset's whole-checkpoint average). */
static void resolve_dtypes(kvio_model_t *model)
{
    if (model->weight_dtype != KVIO_DTYPE_AUTO) {
        model->weight_dtype_bytes = kvio_dtype_bytes(model->weight_dtype);
        model->embedding_dtype_bytes = model->dtype_bytes;
    } else {
        model->embedding_dtype_bytes = model->weight_dtype_bytes;
    }
    model->kv_dtype_bytes = model->kv_cache_dtype != KVIO_DTYPE_AUTO
                                ? kvio_dtype_bytes(model->kv_cache_dtype)
                                : model->dtype_bytes;
}


kvio_status_t kvio_model_resolve(kvio_model_t *model, char *error_p, size_t error_len)
{
    const kvio_model_t *preset = NULL;
    if (model->preset != NULL && model->preset[0] != '\0') {
        preset = kvio_model_preset_find(model->preset);
        if (preset == NULL) {
            char names[512];
            kvio_model_preset_names(names, sizeof(names));
            snprintf(error_p, error_len, "model.preset: unknown model '%s' (one of %s)",
                     model->preset, names);
            return KVIO_ERR_CONFIG;
        }
    }
#define TAKE(field)                                                                        \
    if (model->field == 0 && preset != NULL)                                               \
        model->field = preset->field;
    TAKE(layers)
    TAKE(hidden)
    TAKE(heads)
    TAKE(kv_heads)
    TAKE(head_dim)
    TAKE(intermediate)
    TAKE(vocab)
    TAKE(num_experts)
    TAKE(experts_per_token)
    TAKE(sliding_window_layers)
    TAKE(sliding_window)
    TAKE(weight_dtype_bytes)
#undef TAKE
    if (preset != NULL)
        model->tied_embeddings = preset->tied_embeddings;
    if (model->dtype_bytes == 0)
        model->dtype_bytes = 2;
    if (model->weight_dtype_bytes == 0)
        model->weight_dtype_bytes = model->dtype_bytes;
    resolve_dtypes(model);
    if (model->head_dim == 0 && model->heads > 0)
        model->head_dim = model->hidden / model->heads;
    if (model->kv_heads == 0)
        model->kv_heads = model->heads;
    const char *missing = model->layers == 0     ? "layers"
                          : model->hidden == 0   ? "hidden"
                          : model->heads == 0    ? "heads"
                          : model->intermediate == 0 ? "intermediate"
                          : model->vocab == 0    ? "vocab"
                                                 : NULL;
    if (missing != NULL) {
        snprintf(error_p, error_len, "model.%s: not set and no preset gives it", missing);
        return KVIO_ERR_CONFIG;
    }
    /* Grouped-query attention: each KV head serves heads / kv_heads query
     * heads (heads 3 with kv_heads 8, or 32 with 7, ran). */
    if (model->heads % model->kv_heads != 0) {
        snprintf(error_p, error_len, "model.kv_heads: %lld does not divide the %lld attention "
                 "heads (each KV head serves heads / kv_heads of them)",
                 (long long)model->kv_heads, (long long)model->heads);
        return KVIO_ERR_CONFIG;
    }
    if (model->sliding_window_layers > model->layers) {
        snprintf(error_p, error_len, "model.sliding_window_layers: %lld is more than the %lld layers",
                 (long long)model->sliding_window_layers, (long long)model->layers);
        return KVIO_ERR_CONFIG;
    }
    if (model->num_experts > 0 &&
        (model->experts_per_token < 1 || model->experts_per_token > model->num_experts)) {
        snprintf(error_p, error_len, "model.experts_per_token: must be 1..num_experts (%lld)",
                 (long long)model->num_experts);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

kvio_status_t kvio_gpu_resolve(kvio_gpu_t *gpu, char *error_p, size_t error_len)
{
    const kvio_gpu_t *preset = NULL;
    if (gpu->preset != NULL && gpu->preset[0] != '\0') {
        preset = kvio_gpu_preset_find(gpu->preset);
        if (preset == NULL) {
            char names[512];
            kvio_gpu_preset_names(names, sizeof(names));
            snprintf(error_p, error_len, "gpu.preset: unknown GPU '%s' (one of %s)", gpu->preset,
                     names);
            return KVIO_ERR_CONFIG;
        }
    }
#define TAKE(field)                                                                        \
    if (gpu->field == 0 && preset != NULL)                                                 \
        gpu->field = preset->field;
    TAKE(flops)
    TAKE(hbm_bandwidth)
    TAKE(memory)
    TAKE(host_bandwidth)
    TAKE(link_bandwidth)
    TAKE(fp8_flops)
    TAKE(int8_flops)
    TAKE(fp4_flops)
    TAKE(link_latency_ns)
    TAKE(compute_efficiency)
    TAKE(memory_efficiency)
    TAKE(link_kind)
#undef TAKE
    if (gpu->link_bandwidth == 0)
        gpu->link_bandwidth = gpu->host_bandwidth;
    if (gpu->link_kind == KVIO_LINK_AUTO)
        gpu->link_kind = gpu->link_bandwidth > gpu->host_bandwidth ? KVIO_LINK_NVSWITCH
                                                                   : KVIO_LINK_PCIE;
    /* A GPU of no preset: what a forward pass reaches of a datasheet's
     * peaks on GPUs without published measurements (docs/engine.md). */
    if (gpu->compute_efficiency == 0)
        gpu->compute_efficiency = 0.6;
    if (gpu->memory_efficiency == 0)
        gpu->memory_efficiency = 0.8;
    if (gpu->link_latency_ns == 0)
        gpu->link_latency_ns = gpu->link_kind == KVIO_LINK_PCIE ? 10000 : 5000;
    const char *missing = gpu->flops == 0            ? "flops"
                          : gpu->hbm_bandwidth == 0  ? "hbm_bandwidth"
                          : gpu->memory == 0         ? "memory"
                          : gpu->host_bandwidth == 0 ? "host_bandwidth"
                                                     : NULL;
    if (missing != NULL) {
        snprintf(error_p, error_len, "gpu.%s: not set and no preset gives it", missing);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

/* ---------- shape arithmetic ---------- */

double kvio_model_attention_params(const kvio_model_t *model)
{
    double q_and_o = 2.0 * (double)model->hidden * (double)(model->heads * model->head_dim);
    double k_and_v = 2.0 * (double)model->hidden * (double)(model->kv_heads * model->head_dim);
    return q_and_o + k_and_v;
}

double kvio_model_expert_params(const kvio_model_t *model)
{
    /* gate, up and down projections */
    return 3.0 * (double)model->hidden * (double)model->intermediate;
}

double kvio_model_embedding_params(const kvio_model_t *model)
{
    double table = (double)model->vocab * (double)model->hidden;
    return model->tied_embeddings ? table : 2.0 * table;
}

double kvio_model_params(const kvio_model_t *model)
{
    double experts = model->num_experts > 0 ? (double)model->num_experts : 1.0;
    double router = model->num_experts > 0 ? (double)(model->hidden * model->num_experts) : 0;
    double per_layer = kvio_model_attention_params(model) + experts * kvio_model_expert_params(model) + router;
    return (double)model->layers * per_layer + kvio_model_embedding_params(model);
}

double kvio_model_embedding_bytes(const kvio_model_t *model)
{
    double bytes = model->embedding_dtype_bytes > 0 ? model->embedding_dtype_bytes
                                                    : model->weight_dtype_bytes;
    return kvio_model_embedding_params(model) * bytes;
}

uint64_t kvio_model_weight_bytes(const kvio_model_t *model)
{
    double layers = kvio_model_params(model) - kvio_model_embedding_params(model);
    return (uint64_t)llround(layers * model->weight_dtype_bytes +
                             kvio_model_embedding_bytes(model));
}

/* A model filled in by hand (tests) may leave kv_dtype_bytes at 0. */
static double kv_element_bytes(const kvio_model_t *model)
{
    return model->kv_dtype_bytes > 0 ? model->kv_dtype_bytes : model->dtype_bytes;
}

uint64_t kvio_model_kv_bytes_per_token(const kvio_model_t *model, int64_t tensor_parallel)
{
    int64_t full_layers = model->layers - model->sliding_window_layers;
    double bytes = 2.0 * (double)full_layers * (double)model->kv_heads *
                   (double)model->head_dim * kv_element_bytes(model);
    return (uint64_t)llround(bytes / (double)(tensor_parallel > 0 ? tensor_parallel : 1));
}

uint64_t kvio_model_window_kv_bytes(const kvio_model_t *model, int64_t tensor_parallel)
{
    double bytes = 2.0 * (double)model->sliding_window_layers * (double)model->kv_heads *
                   (double)model->head_dim * kv_element_bytes(model) *
                   (double)model->sliding_window;
    return (uint64_t)llround(bytes / (double)(tensor_parallel > 0 ? tensor_parallel : 1));
}

kvio_status_t kvio_model_kv_capacity(const kvio_model_t *model, const kvio_gpu_t *gpu,
                                     int64_t tensor_parallel, double utilization,
                                     uint64_t *bytes_p, char *error_p, size_t error_len)
{
    double usable = utilization * (double)gpu->memory;
    double weights = (double)kvio_model_weight_bytes(model) / (double)tensor_parallel;
    if (weights >= usable) {
        snprintf(error_p, error_len,
                 "the weights (%.2f GiB per GPU at tensor_parallel %lld) do not fit in %.0f%% "
                 "of the GPU's %.1f GiB (%.2f GiB)",
                 weights / 1073741824.0, (long long)tensor_parallel, utilization * 100,
                 (double)gpu->memory / 1073741824.0, usable / 1073741824.0);
        return KVIO_ERR_CONFIG;
    }
    *bytes_p = (uint64_t)(usable - weights);
    return KVIO_OK;
}

