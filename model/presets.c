/* Model shapes (from each model's published config.json) and GPU specs
 * (from the vendors' datasheets: dense bf16, fp8, int8 and fp4 tensor
 * FLOP/s without sparsity, HBM bandwidth, memory, host link and GPU link
 * per direction, how the GPUs connect). */
#include "model/model_int.h"

#include <stdio.h>
#include <string.h>

typedef struct model_preset {
    const char *name;
    const char *description;
    kvio_model_t shape;
} model_preset_t;

typedef struct gpu_preset {
    const char *name;
    const char *description;
    kvio_gpu_t spec;
} gpu_preset_t;

static const model_preset_t model_presets[] = {
    {"llama3-8b", "Meta Llama 3 8B: 32 layers, GQA 32/8 heads, 128 KiB KV per token in bf16",
     {.layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8, .head_dim = 128,
      .intermediate = 14336, .vocab = 128256, .weight_dtype_bytes = 2}},
    {"llama3-70b", "Meta Llama 3 70B: 80 layers, GQA 64/8 heads",
     {.layers = 80, .hidden = 8192, .heads = 64, .kv_heads = 8, .head_dim = 128,
      .intermediate = 28672, .vocab = 128256, .weight_dtype_bytes = 2}},
    {"llama3.2-1b", "Meta Llama 3.2 1B: 16 layers, tied embeddings",
     {.layers = 16, .hidden = 2048, .heads = 32, .kv_heads = 8, .head_dim = 64,
      .intermediate = 8192, .vocab = 128256, .weight_dtype_bytes = 2, .tied_embeddings = true}},
    {"qwen2.5-7b", "Qwen2.5 7B: 28 layers, GQA 28/4 heads",
     {.layers = 28, .hidden = 3584, .heads = 28, .kv_heads = 4, .head_dim = 128,
      .intermediate = 18944, .vocab = 152064, .weight_dtype_bytes = 2}},
    {"llama2-7b", "Meta Llama 2 7B: 32 layers, 32 KV heads (no GQA), 512 KiB KV per token",
     {.layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 32, .head_dim = 128,
      .intermediate = 11008, .vocab = 32000, .weight_dtype_bytes = 2}},
    {"mixtral-8x7b", "Mistral Mixtral 8x7B: MoE 8 experts (2 active), 32 layers, GQA 32/8",
     {.layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8, .head_dim = 128,
      .intermediate = 14336, .vocab = 32000, .num_experts = 8, .experts_per_token = 2,
      .weight_dtype_bytes = 2}},
    {"mistral-7b", "Mistral 7B v0.3: 32 layers, GQA 32/8 heads",
     {.layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8, .head_dim = 128,
      .intermediate = 14336, .vocab = 32768, .weight_dtype_bytes = 2}},
    /* gpt-oss-20b alternates sliding-window (128 tokens) and full attention,
     * so only 12 of its 24 layers grow KV with the context; its experts are
     * stored in MXFP4, about 0.66 bytes per weight over the whole checkpoint. */
    {"gpt-oss-20b", "OpenAI gpt-oss-20b: MoE 32 experts (4 active), half the layers windowed",
     {.layers = 24, .hidden = 2880, .heads = 64, .kv_heads = 8, .head_dim = 64,
      .intermediate = 2880, .vocab = 201088, .num_experts = 32, .experts_per_token = 4,
      .sliding_window_layers = 12, .sliding_window = 128, .weight_dtype_bytes = 0.66}},
    /* gpt-oss-120b: the same layer with 128 experts, 36 layers (18 windowed);
     * its MXFP4 checkpoint is 65 GB for 117B parameters. */
    {"gpt-oss-120b", "OpenAI gpt-oss-120b: MoE 128 experts (4 active), half the layers windowed",
     {.layers = 36, .hidden = 2880, .heads = 64, .kv_heads = 8, .head_dim = 64,
      .intermediate = 2880, .vocab = 201088, .num_experts = 128, .experts_per_token = 4,
      .sliding_window_layers = 18, .sliding_window = 128, .weight_dtype_bytes = 0.56}},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B: MoE 128 experts (8 active), 48 layers, GQA 32/4 heads",
     {.layers = 48, .hidden = 2048, .heads = 32, .kv_heads = 4, .head_dim = 128,
      .intermediate = 768, .vocab = 151936, .num_experts = 128, .experts_per_token = 8,
      .weight_dtype_bytes = 2}},
    /* The checkpoint-engine models (its weight-sync table), shaped for their
     * weights: MoE layers with the shared expert counted as one more expert
     * (of the routed experts' size), GLM-4.5-Air's first (dense) layer as an
     * MoE one (+3 % weights); DeepSeek-V3.1's and Kimi-K2's multi-head latent
     * attention by a GQA of the same weight count and their 3 and 1 dense
     * layers folded in (within 1 % of the published totals). Their KV per
     * token is not MLA's: use them for weight sync, not for KV sizing. */
    {"glm-4.5-air", "Zhipu GLM-4.5-Air: 106B MoE (128+1 experts, 8+1 active), for weight sync",
     {.layers = 46, .hidden = 4096, .heads = 96, .kv_heads = 8, .head_dim = 128,
      .intermediate = 1408, .vocab = 151552, .num_experts = 129, .experts_per_token = 9,
      .weight_dtype_bytes = 2}},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B: 235B MoE (128 experts, 8 active), for weight sync",
     {.layers = 94, .hidden = 4096, .heads = 64, .kv_heads = 4, .head_dim = 128,
      .intermediate = 1536, .vocab = 151936, .num_experts = 128, .experts_per_token = 8,
      .weight_dtype_bytes = 2}},
    {"deepseek-v3.1", "DeepSeek-V3.1: 671B MoE in FP8 (MLA approximated), for weight sync",
     {.layers = 58, .hidden = 7168, .heads = 96, .kv_heads = 8, .head_dim = 128,
      .intermediate = 2048, .vocab = 129280, .num_experts = 257, .experts_per_token = 9,
      .weight_dtype_bytes = 1}},
    {"kimi-k2", "Moonshot Kimi-K2: 1T MoE in FP8 (MLA approximated), for weight sync",
     {.layers = 60, .hidden = 7168, .heads = 48, .kv_heads = 8, .head_dim = 128,
      .intermediate = 2048, .vocab = 163840, .num_experts = 385, .experts_per_token = 9,
      .weight_dtype_bytes = 1}},
};

#define GIB 1073741824ull

/* Efficiencies: Hopper (H100, H200 and their variants) from the published
 * rows of docs/engine.md's cost model table (vLLM, SGLang and NIM on H100
 * and H200: 0.85 of HBM bandwidth, 0.57 of the matmul peak); A100 from
 * vLLM 0.2.3 decode on an A100-40GB (0.80) and an unchunked 8K prefill on an
 * A100 (0.72). The others have no published row here: 0.8 and 0.6. */
#define HOPPER .compute_efficiency = 0.57, .memory_efficiency = 0.85
#define AMPERE .compute_efficiency = 0.72, .memory_efficiency = 0.80

static const gpu_preset_t gpu_presets[] = {
    {"a100-80g", "NVIDIA A100 80GB SXM: 312 TFLOP/s, 2.04 TB/s, PCIe 4, NVLink 3",
     {.flops = 312e12, .int8_flops = 624e12, .hbm_bandwidth = 2.039e12, .memory = 80 * GIB,
      .host_bandwidth = 32e9, .link_bandwidth = 300e9, .link_kind = KVIO_LINK_NVSWITCH,
      .link_latency_ns = 5000, AMPERE}},
    {"a100-40g", "NVIDIA A100 40GB SXM: 312 TFLOP/s, 1.56 TB/s, PCIe 4, NVLink 3",
     {.flops = 312e12, .int8_flops = 624e12, .hbm_bandwidth = 1.555e12, .memory = 40 * GIB,
      .host_bandwidth = 32e9, .link_bandwidth = 300e9, .link_kind = KVIO_LINK_NVSWITCH,
      .link_latency_ns = 5000, AMPERE}},
    {"h100-sxm", "NVIDIA H100 SXM: 989 TFLOP/s (fp8 1979), 3.35 TB/s, PCIe 5, NVLink 4",
     {.flops = 989e12, .fp8_flops = 1979e12, .int8_flops = 1979e12, .hbm_bandwidth = 3.35e12,
      .memory = 80 * GIB, .host_bandwidth = 64e9, .link_bandwidth = 450e9,
      .link_kind = KVIO_LINK_NVSWITCH, .link_latency_ns = 5000, HOPPER}},
    {"h200", "NVIDIA H200 SXM: 989 TFLOP/s (fp8 1979), 4.8 TB/s, 141 GB, PCIe 5, NVLink 4",
     {.flops = 989e12, .fp8_flops = 1979e12, .int8_flops = 1979e12, .hbm_bandwidth = 4.8e12,
      .memory = 141000000000ull, .host_bandwidth = 64e9, .link_bandwidth = 450e9,
      .link_kind = KVIO_LINK_NVSWITCH, .link_latency_ns = 5000, HOPPER}},
    {"h100-pcie", "NVIDIA H100 PCIe: 756 TFLOP/s (fp8 1513), 2.0 TB/s, 80 GB, NVLink bridge",
     {.flops = 756e12, .fp8_flops = 1513e12, .int8_flops = 1513e12, .hbm_bandwidth = 2.0e12,
      .memory = 80 * GIB, .host_bandwidth = 64e9, .link_bandwidth = 300e9,
      .link_kind = KVIO_LINK_NVLINK_BRIDGE, .link_latency_ns = 5000, HOPPER}},
    {"l40s", "NVIDIA L40S: 362 TFLOP/s (fp8 733), 864 GB/s, 48 GB, PCIe 4, no NVLink",
     {.flops = 362e12, .fp8_flops = 733e12, .int8_flops = 733e12, .hbm_bandwidth = 864e9,
      .memory = 48000000000ull, .host_bandwidth = 32e9, .link_bandwidth = 32e9,
      .link_kind = KVIO_LINK_PCIE, .link_latency_ns = 10000}},
    /* The export parts for China: the H800 is an H100 SXM with NVLink cut to
     * 400 GB/s (200 per direction); the H20 keeps NVLink 4 and HBM3 but
     * 148 TFLOP/s of dense bf16. */
    {"h800", "NVIDIA H800 SXM: 989 TFLOP/s (fp8 1979), 3.35 TB/s, 80 GB, NVLink 400 GB/s",
     {.flops = 989e12, .fp8_flops = 1979e12, .int8_flops = 1979e12, .hbm_bandwidth = 3.35e12,
      .memory = 80 * GIB, .host_bandwidth = 64e9, .link_bandwidth = 200e9,
      .link_kind = KVIO_LINK_NVSWITCH, .link_latency_ns = 5000, HOPPER}},
    {"h20", "NVIDIA H20: 148 TFLOP/s (fp8 296), 4.0 TB/s, 96 GB, PCIe 5, NVLink 4",
     {.flops = 148e12, .fp8_flops = 296e12, .int8_flops = 296e12, .hbm_bandwidth = 4.0e12,
      .memory = 96 * GIB, .host_bandwidth = 64e9, .link_bandwidth = 450e9,
      .link_kind = KVIO_LINK_NVSWITCH, .link_latency_ns = 5000, HOPPER}},
    /* Data-center Blackwell: fp4 tensor cores (NVFP4) at twice fp8. */
    {"b200", "NVIDIA B200: 2.25 PFLOP/s (fp8 4.5, fp4 9), 8 TB/s, 180 GB, NVLink 5",
     {.flops = 2250e12, .fp8_flops = 4500e12, .int8_flops = 4500e12, .fp4_flops = 9000e12,
      .hbm_bandwidth = 8.0e12, .memory = 180000000000ull, .host_bandwidth = 64e9,
      .link_bandwidth = 900e9, .link_kind = KVIO_LINK_NVSWITCH, .link_latency_ns = 5000}},
    /* GeForce peaks with fp32 accumulation (what inference kernels use):
     * half the fp16-accumulate figures of the datasheets. */
    {"rtx-4090", "NVIDIA GeForce RTX 4090: 165 TFLOP/s (fp8 330), 1.01 TB/s, 24 GB, PCIe 4",
     {.flops = 165.2e12, .fp8_flops = 330.3e12, .int8_flops = 660.6e12,
      .hbm_bandwidth = 1.008e12, .memory = 24 * GIB, .host_bandwidth = 32e9,
      .link_bandwidth = 32e9, .link_kind = KVIO_LINK_PCIE, .link_latency_ns = 10000}},
    {"rtx-5090", "NVIDIA GeForce RTX 5090: 209.5 TFLOP/s (fp8 419, fp4 838), 1.79 TB/s, 32 GB",
     {.flops = 209.5e12, .fp8_flops = 419e12, .int8_flops = 838e12, .fp4_flops = 838e12,
      .hbm_bandwidth = 1.792e12, .memory = 32 * GIB, .host_bandwidth = 64e9,
      .link_bandwidth = 64e9, .link_kind = KVIO_LINK_PCIE, .link_latency_ns = 10000}},
};

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

const kvio_model_t *kvio_model_preset_find(const char *name)
{
    for (size_t i = 0; i < COUNT(model_presets); i++)
        if (strcmp(model_presets[i].name, name) == 0)
            return &model_presets[i].shape;
    return NULL;
}

const kvio_gpu_t *kvio_gpu_preset_find(const char *name)
{
    for (size_t i = 0; i < COUNT(gpu_presets); i++)
        if (strcmp(gpu_presets[i].name, name) == 0)
            return &gpu_presets[i].spec;
    return NULL;
}

void kvio_model_preset_names(char *text_p, size_t text_len)
{
    text_p[0] = '\0';
    for (size_t i = 0; i < COUNT(model_presets); i++) {
        if (i > 0)
            strncat(text_p, ", ", text_len - strlen(text_p) - 1);
        strncat(text_p, model_presets[i].name, text_len - strlen(text_p) - 1);
    }
}

void kvio_gpu_preset_names(char *text_p, size_t text_len)
{
    text_p[0] = '\0';
    for (size_t i = 0; i < COUNT(gpu_presets); i++) {
        if (i > 0)
            strncat(text_p, ", ", text_len - strlen(text_p) - 1);
        strncat(text_p, gpu_presets[i].name, text_len - strlen(text_p) - 1);
    }
}

void kvio_model_print_presets(FILE *out)
{
    fprintf(out, "models:\n");
    for (size_t i = 0; i < COUNT(model_presets); i++)
        fprintf(out, "  %-14s %s\n", model_presets[i].name, model_presets[i].description);
    fprintf(out, "gpus:\n");
    for (size_t i = 0; i < COUNT(gpu_presets); i++)
        fprintf(out, "  %-14s %s\n", gpu_presets[i].name, gpu_presets[i].description);
}
