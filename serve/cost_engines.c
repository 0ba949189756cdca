/* Engine profiles: what one step of each engine costs beyond the GPU's
 * work (host time per step and per sequence, eager launches, the all-reduce
 * start-up, a request's time before its first step) and which decode
 * batches it replays as CUDA graphs. One parameter set per engine explains
 * the published rows of docs/engine.md's cost model table for it. */
#include "serve/cost_int.h"

#include <stdio.h>

const char *const kvio_cost_engine_names[] = {"vllm-cudagraph", "vllm-eager", "sglang",
                                              "sglang-eager", "trtllm", NULL};

#define US 1000
#define MS 1000000

/* Shared by the PyTorch engines (vLLM, SGLang): a layer's ~15 kernels
 * launched from Python take 0.20 ms of host time (SGLang PR #1401: Llama-3-8B
 * on an H100, 8.23-9.28 ms a decode step eager against 7.06-7.35 ms as a
 * graph). An all-reduce's start-up, 24 us on top of the link's step, and
 * 5 us of host time per sequence (sampler and inputs; the published rows
 * do not separate it from the step's) are common to all three. */
#define EAGER_LAYER (200 * US)
#define ALLREDUCE (24 * US)
#define SEQUENCE (5 * US)

static const cost_engine_t engines[] = {
    /* vLLM: 2.7 ms a step on the host (vLLM's performance benchmark, build
     * 9515: Llama-3.1-8B and Llama-3-70B at TP4 and Mixtral 8x7B at TP2 on
     * H200s, batch 8); a batch with prefill tokens replays piecewise graphs,
     * 0.9 ms more (vLLM PR #51167); graphs for 1, 2, 4, then every 8 up to
     * 248 and every 16 up to 512 (min(2 x max_num_seqs, 512)). */
    {"vllm-cudagraph", "vLLM with CUDA graphs (FULL_AND_PIECEWISE), the default",
     {.cuda_graphs = true, .fallback = KVIO_FALLBACK_PIECEWISE, .overhead_ns = 2700 * US,
      .sequence_overhead_ns = SEQUENCE, .mixed_overhead_ns = 900 * US,
      .allreduce_latency_ns = ALLREDUCE,
      .cudagraph_max_batch = 512},
     4, {8, 16}, {248, 512}},
    {"vllm-eager", "vLLM --enforce-eager: every layer launched from Python",
     {.cuda_graphs = false, .fallback = KVIO_FALLBACK_EAGER, .overhead_ns = 2700 * US,
      .sequence_overhead_ns = SEQUENCE, .eager_layer_ns = EAGER_LAYER,
      .allreduce_latency_ns = ALLREDUCE},
     0, {0, 0}, {0, 0}},
    /* SGLang: 2.2 ms a step (PR #1401's decode steps); decode graphs for 1,
     * 2, 4, 8 and every 8 up to 160, prefill (extend) batches eager. */
    {"sglang", "SGLang with CUDA graphs for decode batches, prefill eager",
     {.cuda_graphs = true, .fallback = KVIO_FALLBACK_EAGER, .overhead_ns = 2200 * US,
      .sequence_overhead_ns = SEQUENCE, .eager_layer_ns = EAGER_LAYER,
      .allreduce_latency_ns = ALLREDUCE, .cudagraph_max_batch = 160},
     8, {8, 8}, {160, 160}},
    {"sglang-eager", "SGLang --disable-cuda-graph",
     {.cuda_graphs = false, .fallback = KVIO_FALLBACK_EAGER, .overhead_ns = 2200 * US,
      .sequence_overhead_ns = SEQUENCE, .eager_layer_ns = EAGER_LAYER,
      .allreduce_latency_ns = ALLREDUCE},
     0, {0, 0}, {0, 0}},
    /* TensorRT-LLM as NVIDIA NIM 1.5/1.8 serve Llama-3.3-70B in fp8 on two
     * H100s: 1.8 ms a step and 6.4 ms per request before its first step
     * (HTTP, tokenizer: what a client's TTFT holds beyond the prefill); a
     * compiled engine launches nothing from Python. */
    {"trtllm", "TensorRT-LLM (NVIDIA NIM), a compiled engine",
     {.cuda_graphs = true, .fallback = KVIO_FALLBACK_COMPILED, .overhead_ns = 1800 * US,
      .sequence_overhead_ns = SEQUENCE, .allreduce_latency_ns = ALLREDUCE,
      .request_overhead_ns = 6400 * US, .cudagraph_max_batch = 128},
     4, {8, 8}, {128, 128}},
};

const cost_engine_t *cost_engine_find(int engine)
{
    if (engine < 0 || engine >= (int)(sizeof(engines) / sizeof(engines[0])))
        return &engines[0];
    return &engines[engine];
}

uint64_t cost_engine_graph_batch(const cost_engine_t *engine, int64_t max_batch,
                                 uint64_t tokens)
{
    if (!engine->params.cuda_graphs || tokens == 0 || max_batch <= 0 ||
        tokens > (uint64_t)max_batch)
        return 0;
    uint64_t size = 1;
    while (size < tokens && size < engine->pow2_max)
        size *= 2;
    if (size >= tokens)
        return size;
    for (int s = 0; s < 2; s++) {
        uint64_t step = engine->step[s], until = s == 0 ? engine->until[0] : (uint64_t)max_batch;
        if (step == 0)
            continue;
        uint64_t padded = (tokens + step - 1) / step * step;
        if (padded <= until)
            return padded;
    }
    return tokens <= (uint64_t)max_batch ? tokens : 0;
}

void kvio_cost_print_engines(FILE *out)
{
    fprintf(out, "engines:\n");
    for (size_t i = 0; i < sizeof(engines) / sizeof(engines[0]); i++) {
        const kvio_cost_params_t *p = &engines[i].params;
        fprintf(out, "  %-14s %s: step %.2f ms, %.0f us/sequence", engines[i].name,
                engines[i].description, (double)p->overhead_ns / 1e6,
                (double)p->sequence_overhead_ns / 1e3);
        if (p->cuda_graphs)
            fprintf(out, ", graphs up to batch %lld", (long long)p->cudagraph_max_batch);
        if (p->mixed_overhead_ns > 0)
            fprintf(out, ", +%.1f ms without a full graph", (double)p->mixed_overhead_ns / 1e6);
        if (p->eager_layer_ns > 0)
            fprintf(out, ", %.2f ms/layer eager", (double)p->eager_layer_ns / 1e6);
        if (p->request_overhead_ns > 0)
            fprintf(out, ", %.1f ms/request", (double)p->request_overhead_ns / 1e6);
        fputc('\n', out);
    }
}
