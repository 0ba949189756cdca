/* kvio cost: what the cost model says one step of a batch takes, in its
 * parts (weights, KV, compute, all-reduce, engine overhead) per GPU and per
 * TP group; the KV that fits (--fit), the model's tensors (--tensors), the
 * presets and engine profiles, and the published measurements it is held
 * to (--published). */
#include "cli/cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/cost.h"
#include "kvio/model.h"

static void cost_usage(FILE *out)
{
    fprintf(out,
            "usage: kvio cost --model M --gpu G [--tp N] [--pp N] [--ep] [--engine E]\n"
            "                 [--weight-dtype F] [--activation-dtype F] [--kv-dtype F]\n"
            "                 --prefill TOKENS [--batch B] [--cached TOKENS]\n"
            "                 [--decode SEQS --context TOKENS] [--json]\n"
            "       kvio cost --model M --gpu G [--tp N] [--pp N] --fit [--json]\n"
            "       kvio cost --model M --tensors [--json]\n"
            "       kvio cost --published [--json]\n"
            "       kvio cost --list | --engines\n\n"
            "Prints the time the roofline cost model gives one step: B sequences\n"
            "each prefilling TOKENS new tokens (on top of --cached tokens already in\n"
            "the KV cache) plus SEQS decode sequences with --context tokens each, in\n"
            "its parts (weights, KV, compute, all-reduce, engine overhead) per GPU and\n"
            "per TP group. --engine: vllm-cudagraph (default), vllm-eager, sglang,\n"
            "sglang-eager, trtllm. Formats: bf16, fp16, fp8, int8, int4 (weight-only),\n"
            "fp4, mxfp4. --fit prints the KV tokens that fit after the weights in 90 %%\n"
            "of the GPU's memory (vLLM's gpu_memory_utilization), and for a model with\n"
            "sliding-window layers what treating every layer as full attention fits.\n"
            "--tensors lists the model's weights as the tensors weight sync moves.\n"
            "--published prints the published measurements of real engines with what\n"
            "kvio gives each and the error (docs/engine.md, cost model).\n");
}

/* kvio cost --tensors: the model's tensor list, grouped by kind (or every
 * tensor as JSON). */
static int print_tensors(const char *model_name, bool json)
{
    char error[512];
    kvio_model_t model = {.preset = (char *)model_name, .dtype_bytes = 2};
    if (kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        return KVIO_EXIT_USAGE;
    }
    kvio_tensor_t *tensors = NULL;
    size_t count = 0;
    if (kvio_model_tensors(&model, &tensors, &count) != KVIO_OK) {
        fprintf(stderr, "kvio cost: out of memory listing %s's tensors\n", model_name);
        return KVIO_EXIT_FAILED;
    }
    uint64_t total = 0, largest = 0, kind_count[8] = {0}, kind_bytes[8] = {0};
    for (size_t i = 0; i < count; i++) {
        total += tensors[i].bytes;
        largest = tensors[i].bytes > largest ? tensors[i].bytes : largest;
        kind_count[tensors[i].kind & 7]++;
        kind_bytes[tensors[i].kind & 7] += tensors[i].bytes;
    }
    if (json) {
        json_t *list = json_array();
        for (size_t i = 0; i < count; i++)
            json_array_append_new(
                list, json_pack("{s:s, s:i, s:i, s:s, s:I, s:I, s:I}", "name", tensors[i].name,
                                "layer", tensors[i].layer, "expert", tensors[i].expert, "kind",
                                kvio_tensor_kind_name(tensors[i].kind), "rows",
                                (json_int_t)tensors[i].rows, "columns",
                                (json_int_t)tensors[i].columns, "bytes",
                                (json_int_t)tensors[i].bytes));
        json_t *root = json_pack("{s:s, s:I, s:I, s:o}", "model", model_name, "tensors",
                                 (json_int_t)count, "bytes", (json_int_t)total, "list", list);
        json_dumpf(root, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(root);
    } else {
        printf("%s: %zu tensors, %.3f GB of weights (%.2f bytes per element), largest %.1f MB\n",
               model_name, count, (double)total / 1e9,
               model.weight_dtype_bytes > 0 ? model.weight_dtype_bytes : model.dtype_bytes,
               (double)largest / 1e6);
        printf("  %-10s %9s %12s\n", "kind", "tensors", "GB");
        for (int kind = KVIO_TENSOR_ATTENTION; kind <= KVIO_TENSOR_EMBEDDING; kind++)
            if (kind_count[kind] > 0)
                printf("  %-10s %9llu %12.3f\n", kvio_tensor_kind_name(kind),
                       (unsigned long long)kind_count[kind], (double)kind_bytes[kind] / 1e9);
    }
    free(tensors);
    return KVIO_EXIT_OK;
}

/* What kvio cost --fit prints. */
typedef struct fit {
    uint64_t kv_bytes, per_token, window_per_sequence, tokens, full_per_token, full_tokens;
    double weights_gb;
} fit_t;

/* KV tokens that fit after the weights: the full-attention layers' bytes
 * per token into what is left, each sequence also holding its windowed
 * layers' window; and as if every layer kept the whole context. */
static int compute_fit(const kvio_model_t *model, const kvio_gpu_t *gpu, int64_t tp,
                       fit_t *fit_p)
{
    char error[512];
    uint64_t bytes = 0;
    if (kvio_model_kv_capacity(model, gpu, tp, 0.9, &bytes, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        return KVIO_EXIT_USAGE;
    }
    kvio_model_t full = *model;
    full.sliding_window_layers = 0;
    fit_t fit = {.kv_bytes = bytes,
                 .per_token = kvio_model_kv_bytes_per_token(model, tp),
                 .window_per_sequence = kvio_model_window_kv_bytes(model, tp),
                 .full_per_token = kvio_model_kv_bytes_per_token(&full, tp),
                 .weights_gb = (double)kvio_model_weight_bytes(model) / 1e9};
    fit.tokens = fit.per_token > 0 ? bytes / fit.per_token : 0;
    fit.full_tokens = fit.full_per_token > 0 ? bytes / fit.full_per_token : 0;
    *fit_p = fit;
    return KVIO_EXIT_OK;
}

enum {
    COST_HELP = 1, COST_LIST, COST_ENGINES, COST_PUBLISHED, COST_JSON, COST_TENSORS,
    COST_PREFILL, COST_BATCH, COST_CACHED, COST_DECODE, COST_CONTEXT, COST_FIT,
};

static const kvio_cli_option_t cost_options[] = {
    {"help", 'h', NULL, COST_HELP},
    {"list", 0, NULL, COST_LIST},
    {"engines", 0, NULL, COST_ENGINES},
    {"published", 0, NULL, COST_PUBLISHED},
    {"json", 0, NULL, COST_JSON},
    {"tensors", 0, NULL, COST_TENSORS},
    {"prefill", 0, "a token count", COST_PREFILL},
    {"batch", 0, "a count", COST_BATCH},
    {"cached", 0, "a token count", COST_CACHED},
    {"decode", 0, "a count", COST_DECODE},
    {"context", 0, "a token count", COST_CONTEXT},
    {"fit", 0, NULL, COST_FIT},
    KVIO_CLI_COST_SETUP_OPTIONS,
    {NULL, 0, NULL, 0},
};

/* What kvio cost's arguments ask for. */
typedef struct cost_args {
    kvio_cli_cost_setup_t setup;
    uint64_t prefill, batch, cached, decode, context;
    bool json, tensors, fit, published;
} cost_args_t;

/* Reads the arguments in order; --help, --list and --engines print and
 * stop (-1 to go on, else the exit status). */
static int parse_cost_args(int argc, char **argv, cost_args_t *args)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio cost", argc, argv, cost_options);
    const char *value;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        uint64_t *count = option == COST_PREFILL   ? &args->prefill
                          : option == COST_BATCH   ? &args->batch
                          : option == COST_CACHED  ? &args->cached
                          : option == COST_DECODE  ? &args->decode
                          : option == COST_CONTEXT ? &args->context
                                                   : NULL;
        bool *flag = option == COST_JSON        ? &args->json
                     : option == COST_TENSORS   ? &args->tensors
                     : option == COST_FIT       ? &args->fit
                     : option == COST_PUBLISHED ? &args->published
                                                : NULL;
        if (count != NULL) {
            if (kvio_cli_cost_count("kvio cost", cost_options, option, value, 0, count) !=
                KVIO_EXIT_OK)
                return KVIO_EXIT_USAGE;
        } else if (flag != NULL) {
            *flag = true;
        } else if (kvio_cli_cost_setup_take(&args->setup, option, value)) {
            continue;
        } else if (option == COST_HELP) {
            cost_usage(stdout);
            return KVIO_EXIT_OK;
        } else if (option == COST_LIST || option == COST_ENGINES) {
            if (option == COST_LIST)
                kvio_model_print_presets(stdout);
            else
                kvio_cost_print_engines(stdout);
            return KVIO_EXIT_OK;
        } else if (option == KVIO_CLI_OPERAND) {
            fprintf(stderr, "kvio cost: unexpected argument '%s' (see kvio cost --help)\n",
                    value);
            return KVIO_EXIT_USAGE;
        } else {
            return KVIO_EXIT_USAGE;
        }
    }
    return -1;
}

/* kvio cost --published: each published measurement, what kvio gives it
 * and the error. */
static int print_published(bool json)
{
    size_t count = 0;
    const kvio_cost_point_t *points = kvio_cost_points(&count);
    json_t *list = json ? json_array() : NULL;
    if (!json)
        printf("%-34s %-15s %11s %11s %8s  %s\n", "measurement", "engine", "measured", "kvio",
               "error", "holds");
    for (size_t i = 0; i < count; i++) {
        const kvio_cost_point_t *point = &points[i];
        char error[512];
        double value = 0;
        if (kvio_cost_point_predict(point, &value, error, sizeof(error)) != KVIO_OK) {
            fprintf(stderr, "kvio cost: %s: %s\n", point->name, error);
            json_decref(list);
            return KVIO_EXIT_FAILED;
        }
        double relative = (value - point->measured) / point->measured;
        bool holds = point->unexplained == NULL ? fabs(relative) <= point->tolerance
                                                : relative >= point->band_low &&
                                                      relative <= point->band_high;
        const char *unit = kvio_cost_metric_unit(point->metric);
        if (json) {
            json_array_append_new(
                list, json_pack("{s:s, s:s, s:s, s:f, s:f, s:s, s:f, s:f, s:b, s:s?}", "name",
                                point->name, "source", point->source, "engine",
                                kvio_cost_engine_names[point->engine], "measured",
                                point->measured, "kvio", value, "unit", unit, "error_pct",
                                100 * relative, "tolerance_pct", 100 * point->tolerance,
                                "holds", holds, "unexplained", point->unexplained));
        } else {
            printf("%-34s %-15s %8.5g %-5s %8.5g %-5s %+6.1f %%  %s\n", point->name,
                   kvio_cost_engine_names[point->engine], point->measured, unit, value, unit,
                   100 * relative,
                   point->unexplained != NULL ? (holds ? "unexplained (pinned)" : "MOVED")
                   : holds                    ? "yes"
                                              : "NO");
        }
    }
    if (json) {
        json_dumpf(list, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(list);
    }
    return KVIO_EXIT_OK;
}

/* kvio cost --fit: the KV tokens that fit next to the weights. */
static int print_fit(const cost_args_t *args)
{
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_cost_config_t config;
    int exit_status = kvio_cli_cost_setup_build(&args->setup, "kvio cost", &model, &gpu, &config);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    int64_t tp = config.tensor_parallel, gpus = kvio_cost_gpus(&config);
    kvio_config_free(kvio_cost_options, &config);
    fit_t fit;
    exit_status = compute_fit(&model, &gpu, gpus, &fit);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args->json) {
        printf("{\"model\": \"%s\", \"gpu\": \"%s\", \"tensor_parallel\": %lld, "
               "\"gpus\": %lld, \"weights_gb\": %.4g, \"kv_bytes\": %llu, "
               "\"kv_bytes_per_token\": %llu, \"window_kv_bytes_per_sequence\": %llu, "
               "\"kv_tokens\": %llu, \"kv_tokens_all_full_attention\": %llu}\n",
               args->setup.model_name, args->setup.gpu_name, (long long)tp, (long long)gpus,
               fit.weights_gb, (unsigned long long)fit.kv_bytes,
               (unsigned long long)fit.per_token, (unsigned long long)fit.window_per_sequence,
               (unsigned long long)fit.tokens, (unsigned long long)fit.full_tokens);
        return KVIO_EXIT_OK;
    }
    printf("%s on %s, %lld GPUs (tensor parallel %lld): weights %.2f GB; 90 %% of %.1f GB "
           "leaves %.2f GB of KV per GPU\n",
           args->setup.model_name, args->setup.gpu_name, (long long)gpus, (long long)tp,
           fit.weights_gb, (double)gpu.memory / 1e9, (double)fit.kv_bytes / 1e9);
    printf("  KV tokens that fit   %llu (%llu bytes per token per GPU)\n",
           (unsigned long long)fit.tokens, (unsigned long long)fit.per_token);
    if (fit.window_per_sequence > 0)
        printf("  windowed layers      %llu more bytes per running sequence (its window)\n"
               "  as all full attention %llu tokens (%llu bytes per token): %.2fx fewer\n",
               (unsigned long long)fit.window_per_sequence, (unsigned long long)fit.full_tokens,
               (unsigned long long)fit.full_per_token,
               fit.full_tokens > 0 ? (double)fit.tokens / (double)fit.full_tokens : 0.0);
    return KVIO_EXIT_OK;
}

/* A step's parts as JSON: per GPU and for the TP group. */
static void print_step_json(const cost_args_t *args, const kvio_model_t *model,
                            const kvio_cost_config_t *config, const kvio_cost_params_t *params,
                            const kvio_batch_t *work, const kvio_cost_breakdown_t *r)
{
    double tp = (double)config->tensor_parallel;
    json_t *root = json_pack(
        "{s:s, s:s, s:s, s:I, s:I, s:b, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
        "s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:I, s:f, s:I}",
        "model", args->setup.model_name, "gpu", args->setup.gpu_name, "engine", params->engine,
        "tensor_parallel", (json_int_t)config->tensor_parallel, "pipeline_parallel",
        (json_int_t)config->pipeline_parallel, "expert_parallel", config->expert_parallel,
        "prefill_tokens", (json_int_t)work->prefill_tokens, "decode_seqs",
        (json_int_t)work->decode_seqs, "decode_context", (json_int_t)work->decode_context,
        "graph_batch", (json_int_t)r->graph_batch, "flops", r->flops, "bytes", r->bytes,
        "weights_ms", r->weights_s * 1e3, "kv_ms", r->kv_s * 1e3, "compute_ms",
        r->compute_s * 1e3, "memory_ms", r->memory_s * 1e3, "allreduce_ms",
        r->allreduce_s * 1e3, "alltoall_ms", r->alltoall_s * 1e3, "pipeline_ms",
        r->pipeline_s * 1e3, "launch_ms", r->launch_s * 1e3, "overhead_ms",
        r->overhead_s * 1e3, "mixed_overhead_ms", r->mixed_overhead_s * 1e3, "gpu_ms",
        r->gpu_s * 1e3, "time_ms", r->time_s * 1e3, "bound", r->bound, "kv_bytes_per_token",
        (json_int_t)kvio_model_kv_bytes_per_token(model, kvio_cost_gpus(config)), "weights_gb",
        (double)kvio_model_weight_bytes(model) / 1e9, "gpus",
        (json_int_t)kvio_cost_gpus(config));
    json_object_set_new(root, "per_gpu",
                        json_pack("{s:f, s:f, s:f}", "weight_bytes", r->weight_bytes, "kv_bytes",
                                  r->kv_bytes, "flops", r->flops));
    json_object_set_new(root, "tp_group",
                        json_pack("{s:f, s:f, s:f}", "weight_bytes", r->weight_bytes * tp,
                                  "kv_bytes", r->kv_bytes * tp, "flops", r->flops * tp));
    json_dumpf(root, stdout, JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(root);
}

/* A format by name, or by its bytes where the model gives only those. */
static void format_dtype(int dtype, double bytes, char *text_p, size_t text_len)
{
    if (dtype != KVIO_DTYPE_AUTO)
        snprintf(text_p, text_len, "%s", kvio_dtype_names[dtype]);
    else
        snprintf(text_p, text_len, "%.3g bytes", bytes);
}

/* A step's parts as a table: what each GPU does and takes, what its TP
 * group does together. */
static void print_step_text(const cost_args_t *args, const kvio_model_t *model,
                            const kvio_gpu_t *gpu, const kvio_cost_config_t *config,
                            const kvio_cost_params_t *params, const kvio_batch_t *work,
                            const kvio_cost_breakdown_t *r)
{
    long long tp = (long long)config->tensor_parallel, gpus = (long long)kvio_cost_gpus(config);
    printf("%s on %s: %lld GPU%s (tensor parallel %lld", args->setup.model_name,
           args->setup.gpu_name, gpus, gpus > 1 ? "s" : "", tp);
    if (config->pipeline_parallel > 1)
        printf(", %lld pipeline stages", (long long)config->pipeline_parallel);
    char weights[32], kv[32];
    format_dtype(model->weight_dtype, model->weight_dtype_bytes, weights, sizeof(weights));
    format_dtype(model->kv_cache_dtype, model->kv_dtype_bytes, kv, sizeof(kv));
    printf("), engine %s; weights %s, KV %s\n", params->engine, weights, kv);
    printf("  batch       %llu prefill tokens in %llu seqs, %llu decode seqs with %llu context "
           "tokens",
           (unsigned long long)work->prefill_tokens, (unsigned long long)work->prefill_seqs,
           (unsigned long long)work->decode_seqs, (unsigned long long)work->decode_context);
    if (r->graph_batch > 0)
        printf(" (a CUDA graph of batch %llu)", (unsigned long long)r->graph_batch);
    printf("\n  %-11s %-34s %s\n", "", "per GPU",
           config->pipeline_parallel > 1 ? "per TP group (a stage)" : "per TP group");
    printf("  %-11s %9.3f GB read    -> %8.3f ms   %9.3f GB\n", "weights",
           r->weight_bytes / 1e9, r->weights_s * 1e3, r->weight_bytes * (double)tp / 1e9);
    printf("  %-11s %9.3f GB r/w     -> %8.3f ms   %9.3f GB\n", "KV", r->kv_bytes / 1e9,
           r->kv_s * 1e3, r->kv_bytes * (double)tp / 1e9);
    printf("  %-11s %9.4g TFLOP     -> %8.3f ms   %9.4g TFLOP (matmuls at %.0f TFLOP/s x %.2f)\n",
           "compute", r->flops / 1e12, r->compute_s * 1e3, r->flops * (double)tp / 1e12,
           kvio_cost_compute_peak(model, gpu) / 1e12, params->compute_efficiency);
    if (config->tensor_parallel > 1)
        printf("  %-11s %lld x %.3g MB       -> %8.3f ms   over %s (%.0f GB/s, %lld us a step)\n",
               "all-reduce", (long long)(2 * model->layers),
               (double)(work->prefill_tokens + work->decode_seqs + work->spec_tokens) *
                   (double)model->hidden * model->dtype_bytes / 1e6,
               r->allreduce_s * 1e3, kvio_link_kind_names[gpu->link_kind],
               gpu->link_bandwidth / 1e9, (long long)(gpu->link_latency_ns / 1000));
    if (r->alltoall_s > 0)
        printf("  %-11s %-22s -> %8.3f ms\n", "all-to-all", "dispatch and combine",
               r->alltoall_s * 1e3);
    if (r->pipeline_s > 0)
        printf("  %-11s %-20s -> %8.3f ms   each stage idle %.0f %% of the step\n", "pipeline",
               "stage to stage", r->pipeline_s * 1e3, 100 * r->bubble_fraction);
    printf("  %-11s %.3f ms on the GPU: matmuls %.3f + attention %.3f + communication %.3f "
           "(%s-bound)\n",
           "GPU", r->gpu_s * 1e3, r->linear_s * 1e3, r->attention_s * 1e3,
           (r->allreduce_s + r->alltoall_s + r->pipeline_s) * 1e3, r->bound);
    printf("  %-11s %.3f ms on the host: %.3f step + %.0f us x %llu seqs", "engine",
           (r->overhead_s + r->launch_s) * 1e3, (double)params->overhead_ns / 1e6,
           (double)params->sequence_overhead_ns / 1e3,
           (unsigned long long)(work->prefill_seqs + work->decode_seqs));
    if (r->mixed_overhead_s > 0)
        printf(" + %.3f no full graph", r->mixed_overhead_s * 1e3);
    if (r->launch_s > 0)
        printf(" + %.3f eager launches past the GPU", r->launch_s * 1e3);
    printf("\n  %-11s %.3f ms\n", "step", r->time_s * 1e3);
}

/* kvio cost for a batch: its step in parts. */
static int print_step(const cost_args_t *args)
{
    if (args->prefill == 0 && args->decode == 0) {
        fprintf(stderr, "kvio cost: give --prefill TOKENS and/or --decode SEQS\n");
        return KVIO_EXIT_USAGE;
    }
    if (args->prefill > 0 && args->batch == 0) {
        /* It printed a batch of 0 prefill tokens in 0 sequences, 0.000 ms. */
        fprintf(stderr, "kvio cost: --batch 0: a batch holds at least one sequence of --prefill "
                "tokens\n");
        return KVIO_EXIT_USAGE;
    }
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_cost_config_t config;
    int exit_status = kvio_cli_cost_setup_build(&args->setup, "kvio cost", &model, &gpu, &config);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    char error[512];
    kvio_cost_t *cost = NULL;
    kvio_status_t status = kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        kvio_config_free(kvio_cost_options, &config);
        return kvio_cli_exit_status(status);
    }
    kvio_batch_t work = {0};
    for (uint64_t i = 0; args->prefill > 0 && i < args->batch; i++)
        kvio_batch_add_prefill(&work, args->prefill, args->cached);
    for (uint64_t i = 0; i < args->decode; i++)
        kvio_batch_add_decode(&work, args->context);
    kvio_cost_breakdown_t result;
    kvio_cost_iteration(cost, &work, &result);
    kvio_cost_params_t params;
    kvio_cost_params(cost, &params);
    if (args->json)
        print_step_json(args, &model, &config, &params, &work, &result);
    else
        print_step_text(args, &model, &gpu, &config, &params, &work, &result);
    kvio_cost_destroy(cost);
    kvio_config_free(kvio_cost_options, &config);
    return KVIO_EXIT_OK;
}

int kvio_cmd_cost(int argc, char **argv)
{
    cost_args_t args = {.setup = {.model_name = "llama3-8b", .gpu_name = "h200"}, .batch = 1};
    int exit_status = parse_cost_args(argc, argv, &args);
    if (exit_status >= 0)
        return exit_status;
    if (args.published)
        return print_published(args.json);
    if (args.tensors)
        return print_tensors(args.setup.model_name, args.json);
    if (args.fit)
        return print_fit(&args);
    return print_step(&args);
}
