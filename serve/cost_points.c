/* Published measurements of real engines, each with the run kvio costs for
 * it: the table kvio cost --published prints, bench/cost.sh reports and
 * tests/test_cost.c holds to its tolerance. One parameter set per engine
 * profile and GPU preset (serve/cost_engines.c, model/presets.c) explains
 * every row of its engine and GPU; none is fitted alone. */
#include "serve/cost_int.h"

#include <stdio.h>
#include <string.h>

#define VLLM_BUILDKITE                                                                     \
    "vLLM performance benchmark, buildkite.com/vllm/performance-benchmark/builds/9515, "  \
    "latency tests (vllm bench latency: input 32, output 128, batch 8), mean latency"
#define SGLANG_1401                                                                        \
    "SGLang PR #1401 (github.com/sgl-project/sglang/pull/1401, 2024-09-12): "             \
    "sglang.bench_latency --model meta-llama/Meta-Llama-3-8B --batch-size 1 --input 128 "  \
    "--output 8, H100, decode median latency"
#define NIM_70B                                                                            \
    "NVIDIA NIM LLM benchmarking, performance (docs.nvidia.com/nim/benchmarking/llm/1.0.0/" \
    "performance), Llama-3.3-70b-instruct, 2 x H100 80G, fp8 TP2, concurrency 1"
#define UNBOXKV                                                                            \
    "UnboxKV: Ye et al., Characterizing the Behavior and Impact of KV Caching on "         \
    "Transformer Inferences under Concurrency, IPDPS 2025; vLLM on an A100, one 8K-token " \
    "prompt (as read from the paper by issue #55)"

#define RUN(b, i, o, c) {.batch_size = b, .input_tokens = i, .output_tokens = o, .chunk = c}
#define UNEXPLAINED_CHUNKS                                                                 \
    "a 32-token chunk of an 8K prompt would take 36 ms on an A100, 3.6x the weights' read "  \
    "(9.9 ms) and far more than the KV written so far (0.3 ms on average) and a step's "    \
    "overhead add; no documented cost of vLLM explains it (the paper instrumented vLLM "    \
    "per step)"

static const kvio_cost_point_t points[] = {
    {"sglang-triton-graph", SGLANG_1401 ", triton attention with CUDA graph: 7.06 ms",
     "llama3-8b", "h100-sxm", KVIO_ENGINE_SGLANG, 1, KVIO_DTYPE_AUTO, RUN(1, 128, 8, 0),
     KVIO_POINT_DECODE_MS, 7.06, 0.10, NULL, 0, 0},
    {"sglang-flashinfer-graph", SGLANG_1401 ", flashinfer with CUDA graph: 7.35 ms",
     "llama3-8b", "h100-sxm", KVIO_ENGINE_SGLANG, 1, KVIO_DTYPE_AUTO, RUN(1, 128, 8, 0),
     KVIO_POINT_DECODE_MS, 7.35, 0.10, NULL, 0, 0},
    {"sglang-flashinfer-eager", SGLANG_1401 ", flashinfer --disable-cuda-graph: 8.23 ms",
     "llama3-8b", "h100-sxm", KVIO_ENGINE_SGLANG_EAGER, 1, KVIO_DTYPE_AUTO, RUN(1, 128, 8, 0),
     KVIO_POINT_DECODE_MS, 8.23, 0.10, NULL, 0, 0},
    {"sglang-triton-eager", SGLANG_1401 ", triton --disable-cuda-graph: 9.28 ms", "llama3-8b",
     "h100-sxm", KVIO_ENGINE_SGLANG_EAGER, 1, KVIO_DTYPE_AUTO, RUN(1, 128, 8, 0),
     KVIO_POINT_DECODE_MS, 9.28, 0.10, NULL, 0, 0},
    {"nim1.8-70b-fp8-tp2-isl5000-itl", NIM_70B ", version 1.8.0, 5000 in / 500 out: ITL 18.58 ms",
     "llama3-70b", "h100-sxm", KVIO_ENGINE_TRTLLM, 2, KVIO_DTYPE_FP8, RUN(1, 5000, 500, 0),
     KVIO_POINT_DECODE_MS, 18.58, 0.10, NULL, 0, 0},
    {"nim1.8-70b-fp8-tp2-isl5000-ttft",
     NIM_70B ", version 1.8.0, 5000 in / 500 out: TTFT 406.77 ms",
     "llama3-70b", "h100-sxm", KVIO_ENGINE_TRTLLM, 2, KVIO_DTYPE_FP8, RUN(1, 5000, 500, 0),
     KVIO_POINT_TTFT_MS, 406.77, 0.10, NULL, 0, 0},
    {"nim1.8-70b-fp8-tp2-isl500-itl", NIM_70B ", version 1.8.0, 500 in / 2000 out: ITL 18.91 ms",
     "llama3-70b", "h100-sxm", KVIO_ENGINE_TRTLLM, 2, KVIO_DTYPE_FP8, RUN(1, 500, 2000, 0),
     KVIO_POINT_DECODE_MS, 18.91, 0.10, NULL, 0, 0},
    {"nim1.8-70b-fp8-tp2-isl500-ttft", NIM_70B ", version 1.8.0, 500 in / 2000 out: TTFT 47.77 ms",
     "llama3-70b", "h100-sxm", KVIO_ENGINE_TRTLLM, 2, KVIO_DTYPE_FP8, RUN(1, 500, 2000, 0),
     KVIO_POINT_TTFT_MS, 47.77, 0.10, NULL, 0, 0},
    {"nim1.5-70b-fp8-tp2-isl5000-ttft",
     NIM_70B ", version 1.5.0, its first table (5000 in / 500 out, as 1.8.0's): TTFT 368.11 ms",
     "llama3-70b", "h100-sxm", KVIO_ENGINE_TRTLLM, 2, KVIO_DTYPE_FP8, RUN(1, 5000, 500, 0),
     KVIO_POINT_TTFT_MS, 368.11, 0.10, NULL, 0, 0},
    {"nim1.5-70b-fp8-tp2-isl5000-itl",
     NIM_70B ", version 1.5.0, its first table (5000 in / 500 out, as 1.8.0's): ITL 19.94 ms",
     "llama3-70b", "h100-sxm", KVIO_ENGINE_TRTLLM, 2, KVIO_DTYPE_FP8, RUN(1, 5000, 500, 0),
     KVIO_POINT_DECODE_MS, 19.94, 0.10, NULL, 0, 0},
    {"vllm0.2.3-llama2-7b-a100-40g-tpot",
     "vLLM blog (v0.2.3), a Llama-2-7B-class model on an A100-40GB, 'about 75 tok/s' for one "
     "request (as cited by issue #55): TPOT about 13.3 ms; vLLM ran eagerly before 0.2.6; "
     "prompt length not given (128 assumed)",
     "llama2-7b", "a100-40g", KVIO_ENGINE_VLLM_EAGER, 1, KVIO_DTYPE_AUTO, RUN(1, 128, 128, 0),
     KVIO_POINT_DECODE_MS, 13.3, 0.10, NULL, 0, 0},
    {"unboxkv-8k-chunk32", UNBOXKV ", 32-token chunks: about 900 prefill tok/s", "llama3-8b",
     "a100-80g", KVIO_ENGINE_VLLM_EAGER, 1, KVIO_DTYPE_AUTO, RUN(1, 8192, 1, 32),
     KVIO_POINT_PREFILL_TOKENS_PER_S, 900, 0.10, UNEXPLAINED_CHUNKS, 1.5, 2.5},
    {"unboxkv-8k-unchunked", UNBOXKV ", unchunked: about 14,000 prefill tok/s", "llama3-8b",
     "a100-80g", KVIO_ENGINE_VLLM_EAGER, 1, KVIO_DTYPE_AUTO, RUN(1, 8192, 1, 0),
     KVIO_POINT_PREFILL_TOKENS_PER_S, 14000, 0.10, NULL, 0, 0},
    {"vllm-llama3.1-8b-h200-bs8", VLLM_BUILDKITE ", latency_llama8B_tp1 on an H200: 833.421 ms",
     "llama3-8b", "h200", KVIO_ENGINE_VLLM_CUDAGRAPH, 1, KVIO_DTYPE_AUTO, RUN(8, 32, 128, 0),
     KVIO_POINT_TOTAL_MS, 833.421, 0.10, NULL, 0, 0},
    {"vllm-llama3-70b-tp4-h200-bs8",
     VLLM_BUILDKITE ", latency_llama70B_tp4 on H200s: 2077.53 ms", "llama3-70b", "h200",
     KVIO_ENGINE_VLLM_CUDAGRAPH, 4, KVIO_DTYPE_AUTO, RUN(8, 32, 128, 0), KVIO_POINT_TOTAL_MS,
     2077.53, 0.10, NULL, 0, 0},
    {"vllm-mixtral-8x7b-tp2-h200-bs8",
     VLLM_BUILDKITE ", latency_mixtral8x7B_tp2 on H200s: 1917.44 ms", "mixtral-8x7b", "h200",
     KVIO_ENGINE_VLLM_CUDAGRAPH, 2, KVIO_DTYPE_AUTO, RUN(8, 32, 128, 0), KVIO_POINT_TOTAL_MS,
     1917.44, 0.10, NULL, 0, 0},
};

const kvio_cost_point_t *kvio_cost_points(size_t *count_p)
{
    *count_p = sizeof(points) / sizeof(points[0]);
    return points;
}

const char *kvio_cost_metric_unit(int metric)
{
    return metric == KVIO_POINT_PREFILL_TOKENS_PER_S ? "tok/s" : "ms";
}

kvio_status_t kvio_cost_point_predict(const kvio_cost_point_t *point, double *value_p,
                                      char *error_p, size_t error_len)
{
    kvio_model_t model = {.preset = (char *)point->model, .dtype_bytes = 2,
                          .weight_dtype = point->weight_dtype};
    kvio_gpu_t gpu = {.preset = (char *)point->gpu};
    kvio_status_t status = kvio_model_resolve(&model, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_gpu_resolve(&gpu, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_cost_config_t config;
    memset(&config, 0, sizeof(config));
    if ((status = kvio_config_defaults(kvio_cost_options, &config, error_p, error_len)) !=
        KVIO_OK)
        return status;
    config.engine = point->engine;
    config.tensor_parallel = point->tensor_parallel;
    kvio_cost_t *cost = NULL;
    status = kvio_cost_create(&config, &model, &gpu, &cost, error_p, error_len);
    kvio_config_free(kvio_cost_options, &config);
    if (status != KVIO_OK)
        return status;
    *value_p = kvio_cost_run_metric(cost, &point->shape, point->metric);
    kvio_cost_destroy(cost);
    return KVIO_OK;
}
