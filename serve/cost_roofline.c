/* The roofline form of one step, as an engine runs it: the matmuls (their
 * FLOPs at the peak of their format, the weights they read) and attention
 * (its FLOPs, the KV it reads and writes) are kernels one after the other,
 * each bound by the slower of compute and memory; tensor parallelism adds
 * two all-reduces per layer, expert parallelism an all-to-all each way per
 * MoE layer, pipeline parallelism the activations' hops between stages; a
 * step that replays no full CUDA graph pays the engine's fallback; the
 * engine's host time comes on top. */
#include "serve/cost_int.h"

#include <math.h>

/* Seconds of one collective over the TP group: steps link steps and bytes
 * over the link (each step a link latency plus the engine's start-up). */
static double collective_s(const kvio_cost_t *cost, double steps, double bytes)
{
    double step = (double)(cost->gpu.link_latency_ns + cost->params.allreduce_latency_ns) / 1e9;
    return steps * step + bytes / (cost->gpu.link_bandwidth * cost->params.link_efficiency);
}

/* One all-reduce of size bytes over n GPUs by algorithm (auto: the fastest
 * of them; the start-up is paid once per call, the link's latency per step). */
static double allreduce_s(const kvio_cost_t *cost, double n, double size)
{
    double startup = (double)cost->params.allreduce_latency_ns / 1e9;
    double hop = (double)cost->gpu.link_latency_ns / 1e9;
    double bandwidth = cost->gpu.link_bandwidth * cost->params.link_efficiency;
    double times[4] = {
        /* ring */ 2 * (n - 1) * hop + 2 * (n - 1) / n * size / bandwidth,
        /* tree (NCCL's double binary tree: as many bytes per link as a ring) */
        2 * ceil(log2(n)) * hop + 2 * (n - 1) / n * size / bandwidth,
        /* one-shot: every GPU reads its n - 1 peers' buffers through its link */
        hop + (n - 1) * size / bandwidth,
        /* two-shot: reduce-scatter, then all-gather */
        2 * hop + 2 * (n - 1) / n * size / bandwidth,
    };
    /* Over an NVLink bridge only pairs are linked: a larger group goes
     * through PCIe, where the peer-reading algorithms do not apply. */
    bool peers = cost->gpu.link_kind == KVIO_LINK_NVSWITCH ||
                 (cost->gpu.link_kind == KVIO_LINK_NVLINK_BRIDGE && n <= 2);
    double best;
    switch (cost->config.allreduce) {
    case KVIO_ALLREDUCE_RING: best = times[0]; break;
    case KVIO_ALLREDUCE_TREE: best = times[1]; break;
    case KVIO_ALLREDUCE_ONE_SHOT: best = times[2]; break;
    case KVIO_ALLREDUCE_TWO_SHOT: best = times[3]; break;
    default:
        best = fmin(times[0], times[1]);
        if (peers)
            best = fmin(best, fmin(times[2], times[3]));
        break;
    }
    return startup + best;
}

/* The matmuls: 2 FLOPs per active weight per token (tokens padded to the
 * captured graph size), the LM head per sampled token; the weights read
 * once per step (MoE: the experts the step's tokens touch, E·(1 − (1 −
 * k/E)^T)), the LM head once; the embedding is a gather of T rows. */
static void matmuls(const kvio_cost_t *cost, double matmul_tokens, double tokens,
                    double sampled, double *flops_p, double *bytes_p)
{
    const kvio_model_t *model = &cost->model;
    double layers = (double)model->layers;
    double active = model->num_experts > 0 ? (double)model->experts_per_token : 1.0;
    double per_token = layers * (kvio_model_attention_params(model) +
                                 active * kvio_model_expert_params(model));
    double lm_head = (double)model->vocab * (double)model->hidden;
    *flops_p = 2.0 * per_token * matmul_tokens + 2.0 * lm_head * sampled;
    double dense = layers * kvio_model_attention_params(model);
    double experts = layers * kvio_model_expert_params(model);
    if (model->num_experts > 0) {
        double e = (double)model->num_experts, k = (double)model->experts_per_token;
        experts *= e * (1.0 - pow(1.0 - k / e, tokens));
        dense += layers * (double)(model->hidden * model->num_experts);
    }
    double embedding = model->embedding_dtype_bytes > 0 ? model->embedding_dtype_bytes
                                                        : model->weight_dtype_bytes;
    *bytes_p = (dense + experts) * model->weight_dtype_bytes +
               (lm_head + tokens * (double)model->hidden) * embedding;
}

/* Attention: QK^T and PV, 4·width FLOPs per (query, key) pair, windowed
 * layers seeing at most `window` keys per query; the KV of every context
 * token read and of every new token written. */
static void attention(const kvio_cost_t *cost, const kvio_batch_t *batch, double tokens,
                      double sequences, double *flops_p, double *bytes_p)
{
    const kvio_model_t *model = &cost->model;
    double full_layers = (double)(model->layers - model->sliding_window_layers);
    double window_layers = (double)model->sliding_window_layers;
    double width = (double)(model->heads * model->head_dim);
    double pairs = batch->prefill_attention + (double)batch->decode_context +
                   (double)batch->decode_seqs + batch->spec_attention;
    double window_pairs = fmin(pairs, tokens * (double)model->sliding_window);
    *flops_p = 4.0 * width * (full_layers * pairs + window_layers * window_pairs);
    double kv_token = (double)kvio_model_kv_bytes_per_token(model, 1);
    double context = (double)(batch->prefill_context + batch->decode_context);
    *bytes_p = kv_token * (context + tokens) +
               (double)kvio_model_window_kv_bytes(model, 1) * sequences;
}

/* Tensor, expert and pipeline parallelism's traffic for tokens tokens. */
static void communication(const kvio_cost_t *cost, double tokens, kvio_cost_breakdown_t *out)
{
    const kvio_model_t *model = &cost->model;
    double tp = (double)cost->config.tensor_parallel, pp = (double)cost->config.pipeline_parallel;
    double layers = (double)model->layers;
    double activations = tokens * (double)model->hidden * model->dtype_bytes;
    bool experts = cost->config.expert_parallel && model->num_experts > 0 && tp > 1;
    if (tp > 1) {
        /* Attention's output projection and the MLP's down projection each
         * end in an all-reduce; with experts spread over the GPUs the MoE
         * layer's dispatch and combine replace the MLP's. */
        double per_layer = experts ? 1.0 : 2.0;
        out->allreduce_s = per_layer * layers * allreduce_s(cost, tp, activations);
    }
    if (experts) {
        /* Each GPU sends its share of the tokens to the experts they route
         * to, (n − 1)/n of them on other GPUs, and takes the results back. */
        double sent = activations / tp * (double)model->experts_per_token * (tp - 1) / tp;
        out->alltoall_s = 2.0 * layers * collective_s(cost, 1, sent);
    }
    if (pp > 1) {
        out->pipeline_s = (pp - 1) * collective_s(cost, 1, activations);
        out->bubble_fraction = (pp - 1) / pp;
    }
}

/* The engine's part: host time per step and sequence, and for a step that
 * replays no full graph the profile's fallback. */
static void engine_part(const kvio_cost_t *cost, double sequences, bool full_graph,
                        kvio_cost_breakdown_t *out)
{
    const kvio_cost_params_t *params = &cost->params;
    if (!full_graph) {
        if (params->fallback == KVIO_FALLBACK_PIECEWISE && params->cuda_graphs) {
            out->mixed_overhead_s = (double)params->mixed_overhead_ns / 1e9;
        } else if (params->fallback == KVIO_FALLBACK_EAGER) {
            /* Kernels launched one by one from the host: the GPU waits for
             * them where launching a layer takes longer than running it. */
            double launches = (double)cost->model.layers * (double)params->eager_layer_ns / 1e9;
            out->launch_s = fmax(0, launches - out->gpu_s);
        }
    }
    out->overhead_s = (double)params->overhead_ns / 1e9 +
                      (double)params->sequence_overhead_ns / 1e9 * sequences +
                      out->mixed_overhead_s;
}

void cost_roofline(const kvio_cost_t *cost, const kvio_batch_t *batch,
                   kvio_cost_breakdown_t *out)
{
    const kvio_gpu_t *gpu = &cost->gpu;
    const kvio_cost_params_t *params = &cost->params;
    double tp = (double)cost->config.tensor_parallel;
    double gpus = tp * (double)cost->config.pipeline_parallel;
    double tokens = (double)(batch->prefill_tokens + batch->decode_seqs + batch->spec_tokens);
    double sequences = (double)(batch->prefill_seqs + batch->decode_seqs);
    /* A decode-only step replays the CUDA graph of the smallest captured
     * batch that holds its tokens: the matmuls run on the padded batch. */
    uint64_t graph = batch->prefill_tokens == 0
                         ? cost_engine_graph_batch(cost->engine, params->cudagraph_max_batch,
                                                   batch->decode_seqs + batch->spec_tokens)
                         : 0;
    double matmul_flops, weight_bytes, attention_flops, kv_bytes;
    matmuls(cost, graph > 0 ? (double)graph : tokens, tokens,
            sequences + (double)batch->spec_tokens, &matmul_flops, &weight_bytes);
    attention(cost, batch, tokens, sequences, &attention_flops, &kv_bytes);

    /* Every GPU holds 1/gpus of the weights and KV; the pipeline's stages
     * run one after the other, so a step takes the time of 1/tp of it. */
    double memory = gpu->hbm_bandwidth * params->memory_efficiency;
    double compute = params->compute_efficiency;
    double matmul_s = matmul_flops / tp / (cost->matmul_peak * compute);
    double attention_s = attention_flops / tp / (gpu->flops * compute);
    out->flops = (matmul_flops + attention_flops) / gpus;
    out->weight_bytes = weight_bytes / gpus;
    out->kv_bytes = kv_bytes / gpus;
    out->bytes = out->weight_bytes + out->kv_bytes;
    out->weights_s = weight_bytes / tp / memory;
    out->kv_s = kv_bytes / tp / memory;
    out->compute_s = matmul_s + attention_s;
    out->memory_s = out->weights_s + out->kv_s;
    out->linear_s = fmax(matmul_s, out->weights_s);
    out->attention_s = fmax(attention_s, out->kv_s);
    out->graph_batch = graph;
    communication(cost, tokens, out);
    out->gpu_s = out->linear_s + out->attention_s + out->allreduce_s + out->alltoall_s +
                 out->pipeline_s;
    engine_part(cost, sequences, graph > 0, out);
    out->bound = out->compute_s >= out->memory_s ? "compute" : "memory";
    out->time_s = out->gpu_s + out->launch_s + out->overhead_s;
}
