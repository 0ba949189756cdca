/* The cost model: the `cost:` option table, a cost model's set-up (the
 * engine profile's parameters with the config's overrides, the matmuls'
 * peak), the three forms (roofline in serve/cost_roofline.c, a linear form
 * with fitted coefficients, a measured table interpolated trilinearly) and
 * what a benchmark's run of a batch costs (kvio_cost_run). */
#include "kvio/cost.h"

#include "serve/cost_int.h"

#include "kvio/array.h"
#include "kvio/results.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


static const char *const cost_kind_names[] = {"roofline", "linear", "table", NULL};

const char *const kvio_allreduce_names[] = {"auto", "ring", "tree", "one-shot", "two-shot", NULL};

/* An engine overhead: auto takes the engine profile's. */
#define ENGINE_DURATION(name, field, text)                                                 \
    {.key = name, .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_cost_config_t, field),  \
     .default_value = "auto", .flags = KVIO_OPT_AUTO,                                      \
     .help = text " (auto: the engine profile's; kvio cost --engines lists them)"}

const kvio_opt_t kvio_cost_options[] = {
    {.key = "kind", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_cost_config_t, kind),
     .values = cost_kind_names, .default_value = "roofline",
     .help = "roofline (model and GPU), linear (coefficients) or table (measured CSV)"},
    {.key = "engine", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_cost_config_t, engine),
     .values = kvio_cost_engine_names, .default_value = "vllm-cudagraph",
     .help = "roofline: the engine profile (host time per step and sequence, CUDA graph "
             "sizes, eager launches): vllm-cudagraph, vllm-eager, sglang, sglang-eager, trtllm"},
    {.key = "tensor_parallel", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_cost_config_t, tensor_parallel), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 64,
     .help = "GPUs one pipeline stage of a serve rank spans (two all-reduces per layer)"},
    {.key = "pipeline_parallel", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_cost_config_t, pipeline_parallel), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 64,
     .help = "pipeline stages of a serve rank, each tensor_parallel GPUs holding its share "
             "of the layers (a step crosses every stage: activations hop between them)"},
    {.key = "expert_parallel", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_cost_config_t, expert_parallel), .default_value = "false",
     .help = "MoE: experts spread over the tensor_parallel GPUs, an all-to-all each way per "
             "MoE layer instead of its all-reduce (vLLM --enable-expert-parallel)"},
    {.key = "allreduce", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_cost_config_t, allreduce),
     .values = kvio_allreduce_names, .default_value = "auto",
     .help = "all-reduce algorithm: ring, tree, one-shot, two-shot, or auto (the fastest, as "
             "NCCL and vLLM's custom all-reduce pick; one-/two-shot need NVSwitch or a pair)"},
    {.key = "compute_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_cost_config_t, compute_efficiency), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "fraction of peak FLOP/s a forward pass reaches (0: the GPU's)"},
    {.key = "memory_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_cost_config_t, memory_efficiency), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "fraction of HBM bandwidth a forward pass reaches (0: the GPU's)"},
    {.key = "link_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_cost_config_t, link_efficiency), .default_value = "0.7",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "fraction of the GPU link a collective reaches"},
    ENGINE_DURATION("overhead", overhead_ns,
                    "host time per step (scheduler, input preparation, sampler)"),
    ENGINE_DURATION("sequence_overhead", sequence_overhead_ns,
                    "host time per sequence of a step"),
    ENGINE_DURATION("eager_layer", eager_layer_ns,
                    "host time to launch one layer's kernels eagerly (the GPU waits when it "
                    "is the longer)"),
    ENGINE_DURATION("mixed_overhead", mixed_overhead_ns,
                    "more for a step that replays no full CUDA graph (vLLM: one with prefill "
                    "tokens runs piecewise graphs, 5.87 vs 4.97 ms a step on an H200, vLLM "
                    "PR #51167)"),
    ENGINE_DURATION("allreduce_latency", allreduce_latency_ns,
                    "the engine's start-up of one all-reduce (tensor parallelism)"),
    ENGINE_DURATION("request_overhead", request_overhead_ns,
                    "a request's time before its first step (API server, tokenizer): what a "
                    "client's TTFT adds to the engine's"),
    {.key = "cudagraph_max_batch", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_cost_config_t, cudagraph_max_batch), .default_value = "auto",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_AUTO, .min = 0,
     .help = "the largest decode batch replayed as a CUDA graph, padded up to a captured "
             "size (0: none; auto: the engine profile's)"},
    {.key = "c0", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c0_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per iteration"},
    {.key = "c1", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c1_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per prefill token"},
    {.key = "c2", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c2_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per decode sequence"},
    {.key = "c3", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c3_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per token of decode context"},
    {.key = "table", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_cost_config_t, table),
     .help = "table form: CSV of prefill_tokens,decode_seqs,context_tokens,time_ms"},
    {.key = NULL},
};

#undef ENGINE_DURATION

/* ---------- batches and iteration time ---------- */

void kvio_batch_add_prefill(kvio_batch_t *batch, uint64_t new_tokens, uint64_t cached_tokens)
{
    double n = (double)new_tokens, c = (double)cached_tokens;
    batch->prefill_tokens += new_tokens;
    batch->prefill_seqs++;
    batch->prefill_context += cached_tokens;
    /* Token i of the chunk attends to c + i + 1 positions. */
    batch->prefill_attention += n * c + n * (n + 1) / 2;
}

void kvio_batch_add_decode(kvio_batch_t *batch, uint64_t context_tokens)
{
    batch->decode_seqs++;
    batch->decode_context += context_tokens;
}

void kvio_batch_add_verify(kvio_batch_t *batch, uint64_t context_tokens, uint64_t drafts)
{
    kvio_batch_add_decode(batch, context_tokens);
    /* Draft i (1-based) attends to the context, the new token and the
     * drafts before it, and itself: c + i + 1 positions. */
    double d = (double)drafts, c = (double)context_tokens;
    batch->spec_tokens += drafts;
    batch->spec_attention += d * (c + 1) + d * (d + 1) / 2;
}

/* Index of the cell of axis holding x, and x's position t in it (t may leave
 * [0, 1] outside the grid: linear extrapolation from the edge cell). */
static void locate(const double *axis, size_t size, double x, size_t *index_p, double *t_p)
{
    if (size == 1) {
        *index_p = 0;
        *t_p = 0;
        return;
    }
    size_t i = 0;
    while (i + 2 < size && x > axis[i + 1])
        i++;
    *index_p = i;
    *t_p = (x - axis[i]) / (axis[i + 1] - axis[i]);
}

static double table_time_ms(const cost_table_t *table, const double point[3])
{
    size_t index[3];
    double t[3];
    for (int a = 0; a < 3; a++)
        locate(table->axes[a], table->sizes[a], point[a], &index[a], &t[a]);
    double total = 0;
    for (int corner = 0; corner < 8; corner++) {
        double weight = 1;
        size_t at[3];
        for (int a = 0; a < 3; a++) {
            int high = (corner >> a) & 1;
            if (table->sizes[a] == 1) {
                if (high)
                    weight = 0;
                at[a] = 0;
                continue;
            }
            at[a] = index[a] + (size_t)high;
            weight *= high ? t[a] : 1 - t[a];
        }
        if (weight == 0)
            continue;
        size_t cell = (at[0] * table->sizes[1] + at[1]) * table->sizes[2] + at[2];
        total += weight * table->times_ms[cell];
    }
    return fmax(total, 0);
}

void kvio_cost_iteration(const kvio_cost_t *cost, const kvio_batch_t *batch,
                         kvio_cost_breakdown_t *breakdown_p)
{
    kvio_cost_breakdown_t out = {0};
    if (batch->prefill_tokens == 0 && batch->decode_seqs == 0) {
        out.bound = "idle";
        *breakdown_p = out;
        return;
    }
    switch (cost->config.kind) {
    case KVIO_COST_LINEAR: {
        const kvio_cost_config_t *c = &cost->config;
        double ms = c->linear_c0_ms +
                    c->linear_c1_ms * (double)(batch->prefill_tokens + batch->spec_tokens) +
                    c->linear_c2_ms * (double)batch->decode_seqs +
                    c->linear_c3_ms * (double)batch->decode_context;
        out.time_s = fmax(ms, 0) / 1e3; /* (the options refuse negative coefficients) */
        out.bound = "linear";
        break;
    }
    case KVIO_COST_TABLE: {
        double point[3] = {(double)(batch->prefill_tokens + batch->spec_tokens),
                           (double)batch->decode_seqs,
                           (double)batch->decode_context};
        out.time_s = table_time_ms(&cost->table, point) / 1e3;
        out.bound = "table";
        break;
    }
    default:
        cost_roofline(cost, batch, &out);
        break;
    }
    *breakdown_p = out;
}

/* ---------- the table form ---------- */

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t axis_index(const double *axis, size_t size, double value)
{
    for (size_t i = 0; i < size; i++)
        if (axis[i] == value)
            return i;
    return size;
}

static kvio_status_t table_load(cost_table_t *table, const char *path, char *error_p,
                                size_t error_len)
{
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0;
    kvio_status_t status = kvio_cost_read_samples(path, &samples, &count, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    for (int a = 0; a < 3; a++) {
        double *values = malloc(count * sizeof(double));
        if (values == NULL) {
            free(samples);
            return KVIO_ERR_NOMEM;
        }
        for (size_t i = 0; i < count; i++)
            values[i] = a == 0 ? samples[i].prefill_tokens
                        : a == 1 ? samples[i].decode_seqs : samples[i].context_tokens;
        qsort(values, count, sizeof(double), compare_double);
        size_t unique = 0;
        for (size_t i = 0; i < count; i++)
            if (unique == 0 || values[unique - 1] != values[i])
                values[unique++] = values[i];
        table->axes[a] = values;
        table->sizes[a] = unique;
    }
    size_t cells = table->sizes[0] * table->sizes[1] * table->sizes[2];
    table->times_ms = malloc(cells * sizeof(double));
    unsigned char *filled = calloc(cells, 1);
    if (table->times_ms == NULL || filled == NULL) {
        free(filled);
        free(samples);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        size_t p = axis_index(table->axes[0], table->sizes[0], samples[i].prefill_tokens);
        size_t d = axis_index(table->axes[1], table->sizes[1], samples[i].decode_seqs);
        size_t c = axis_index(table->axes[2], table->sizes[2], samples[i].context_tokens);
        size_t cell = (p * table->sizes[1] + d) * table->sizes[2] + c;
        table->times_ms[cell] = samples[i].time_ms;
        filled[cell] = 1;
    }
    for (size_t cell = 0; cell < cells && status == KVIO_OK; cell++) {
        if (!filled[cell]) {
            size_t c = cell % table->sizes[2];
            size_t d = cell / table->sizes[2] % table->sizes[1];
            size_t p = cell / table->sizes[2] / table->sizes[1];
            snprintf(error_p, error_len,
                     "%s: the grid has no row for prefill_tokens=%g decode_seqs=%g "
                     "context_tokens=%g (every combination must be measured)",
                     path, table->axes[0][p], table->axes[1][d], table->axes[2][c]);
            status = KVIO_ERR_PARSE;
        }
    }
    free(filled);
    free(samples);
    return status;
}

static void table_free(cost_table_t *table)
{
    for (int a = 0; a < 3; a++)
        free(table->axes[a]);
    free(table->times_ms);
    memset(table, 0, sizeof(*table));
}

/* ---------- lifetime ---------- */

double kvio_cost_compute_peak(const kvio_model_t *model, const kvio_gpu_t *gpu)
{
    int weights = model->weight_dtype, activations = model->activation_dtype;
    double peaks[] = {[KVIO_DTYPE_FP8] = gpu->fp8_flops, [KVIO_DTYPE_INT8] = gpu->int8_flops,
                      [KVIO_DTYPE_FP4] = gpu->fp4_flops, [KVIO_DTYPE_MXFP4] = gpu->fp4_flops};
    int count = (int)(sizeof(peaks) / sizeof(peaks[0]));
    /* auto: the weights' format where the GPU computes in it (vLLM runs fp8
     * checkpoints W8A8 on Hopper, weight-only on Ampere), else 16-bit. */
    if (activations == KVIO_DTYPE_AUTO)
        activations = weights >= 0 && weights < count && peaks[weights] > 0 ? weights
                                                                           : KVIO_DTYPE_BF16;
    bool same = activations == weights ||
                (activations == KVIO_DTYPE_FP4 && weights == KVIO_DTYPE_MXFP4);
    if (same && activations >= 0 && activations < count && peaks[activations] > 0)
        return peaks[activations];
    return gpu->flops;
}

int64_t kvio_cost_gpus(const kvio_cost_config_t *config)
{
    int64_t tp = config->tensor_parallel > 0 ? config->tensor_parallel : 1;
    int64_t pp = config->pipeline_parallel > 0 ? config->pipeline_parallel : 1;
    return tp * pp;
}

/* The profile's parameters, each one the config sets (not auto) taken
 * from the config; the efficiencies from the config, else the GPU's. */
static void resolve_params(kvio_cost_t *cost)
{
    const kvio_cost_config_t *config = &cost->config;
    kvio_cost_params_t params = cost->engine->params;
    params.engine = cost->engine->name;
#define TAKE(field)                                                                        \
    if (config->field != KVIO_COST_AUTO)                                                   \
        params.field = config->field;
    TAKE(overhead_ns)
    TAKE(sequence_overhead_ns)
    TAKE(eager_layer_ns)
    TAKE(mixed_overhead_ns)
    TAKE(allreduce_latency_ns)
    TAKE(request_overhead_ns)
    TAKE(cudagraph_max_batch)
#undef TAKE
    params.compute_efficiency = config->compute_efficiency > 0 ? config->compute_efficiency
                                                               : cost->gpu.compute_efficiency;
    params.memory_efficiency = config->memory_efficiency > 0 ? config->memory_efficiency
                                                             : cost->gpu.memory_efficiency;
    if (params.compute_efficiency <= 0)
        params.compute_efficiency = 0.6;
    if (params.memory_efficiency <= 0)
        params.memory_efficiency = 0.8;
    params.link_efficiency = config->link_efficiency > 0 ? config->link_efficiency : 0.7;
    cost->params = params;
}

void kvio_cost_params(const kvio_cost_t *cost, kvio_cost_params_t *params_p)
{
    *params_p = cost->params;
}

kvio_status_t kvio_cost_create(const kvio_cost_config_t *config, const kvio_model_t *model,
                               const kvio_gpu_t *gpu, kvio_cost_t **cost_p, char *error_p,
                               size_t error_len)
{
    kvio_cost_t *cost = calloc(1, sizeof(*cost));
    if (cost == NULL)
        return KVIO_ERR_NOMEM;
    cost->config = *config;
    cost->config.table = NULL;
    cost->model = *model;
    cost->model.preset = NULL;
    cost->gpu = *gpu;
    cost->gpu.preset = NULL;
    if (cost->config.tensor_parallel < 1)
        cost->config.tensor_parallel = 1;
    if (cost->config.pipeline_parallel < 1)
        cost->config.pipeline_parallel = 1;
    cost->engine = cost_engine_find(config->engine);
    resolve_params(cost);
    cost->matmul_peak = kvio_cost_compute_peak(model, gpu);
    if (config->kind == KVIO_COST_ROOFLINE && cost->config.pipeline_parallel > model->layers) {
        snprintf(error_p, error_len, "cost.pipeline_parallel: %lld stages for %lld layers",
                 (long long)cost->config.pipeline_parallel, (long long)model->layers);
        free(cost);
        return KVIO_ERR_CONFIG;
    }
    if (config->kind == KVIO_COST_TABLE) {
        if (config->table == NULL || config->table[0] == '\0') {
            snprintf(error_p, error_len, "cost.table: the table form needs a CSV file");
            free(cost);
            return KVIO_ERR_CONFIG;
        }
        kvio_status_t status = table_load(&cost->table, config->table, error_p, error_len);
        if (status != KVIO_OK) {
            table_free(&cost->table);
            free(cost);
            return status;
        }
    }
    *cost_p = cost;
    return KVIO_OK;
}

void kvio_cost_destroy(kvio_cost_t *cost)
{
    if (cost == NULL)
        return;
    table_free(&cost->table);
    free(cost);
}
