/* kvio cost (what the cost model says one iteration of a batch takes, with
 * its FLOP and byte terms) and kvio fit (the linear form's coefficients from
 * measured iterations). */
#include "cli/cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/cost.h"
#include "kvio/model.h"

static int parse_count(const char *command, const char *flag, const char *text, uint64_t *value_p)
{
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text != NULL ? text : "", &end, 10);
    if (text == NULL || end == text || *end != '\0' || errno == ERANGE || text[0] == '-') {
        fprintf(stderr, "kvio %s: --%s needs a non-negative integer, got '%s'\n", command, flag,
                text != NULL ? text : "");
        return KVIO_EXIT_USAGE;
    }
    *value_p = value;
    return KVIO_EXIT_OK;
}

static void cost_usage(FILE *out)
{
    fprintf(out,
            "usage: kvio cost --model M --gpu G [--tp N] --prefill TOKENS [--batch B]\n"
            "                 [--cached TOKENS] [--decode SEQS --context TOKENS] [--json]\n"
            "       kvio cost --model M --gpu G [--tp N] --fit [--json]\n"
            "       kvio cost --model M --tensors [--json]\n"
            "       kvio cost --list\n\n"
            "Prints the time the roofline cost model gives one iteration: B sequences\n"
            "each prefilling TOKENS new tokens (on top of --cached tokens already in\n"
            "the KV cache) plus SEQS decode sequences with --context tokens each.\n"
            "--fit prints the KV tokens that fit after the weights in 90 %% of the\n"
            "GPU's memory (vLLM's gpu_memory_utilization), and for a model with\n"
            "sliding-window layers what treating every layer as full attention fits.\n"
            "--tensors lists the model's weights as the tensors weight sync moves\n"
            "(grouped by kind; --json: every tensor with its shape and bytes).\n");
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
    COST_HELP = 1, COST_LIST, COST_JSON, COST_TENSORS, COST_MODEL, COST_GPU, COST_TP,
    COST_PREFILL, COST_BATCH, COST_CACHED, COST_DECODE, COST_CONTEXT, COST_FIT,
};

static const kvio_cli_option_t cost_options[] = {
    {"help", 'h', NULL, COST_HELP},
    {"list", 0, NULL, COST_LIST},
    {"json", 0, NULL, COST_JSON},
    {"tensors", 0, NULL, COST_TENSORS},
    {"model", 0, "a model preset", COST_MODEL},
    {"gpu", 0, "a GPU preset", COST_GPU},
    {"tp", 0, "a count", COST_TP},
    {"prefill", 0, "a token count", COST_PREFILL},
    {"batch", 0, "a count", COST_BATCH},
    {"cached", 0, "a token count", COST_CACHED},
    {"decode", 0, "a count", COST_DECODE},
    {"context", 0, "a token count", COST_CONTEXT},
    {"fit", 0, NULL, COST_FIT},
    {NULL, 0, NULL, 0},
};

/* What kvio cost's arguments ask for. */
typedef struct cost_args {
    const char *model_name, *gpu_name;
    uint64_t tp, prefill, batch, cached, decode, context;
    bool json, tensors, fit;
} cost_args_t;

/* Reads the arguments in order; --help and --list print and stop (-1 to
 * go on, else the exit status). */
static int parse_cost_args(int argc, char **argv, cost_args_t *args)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio cost", argc, argv, cost_options);
    const char *value;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        uint64_t *count = option == COST_TP        ? &args->tp
                          : option == COST_PREFILL ? &args->prefill
                          : option == COST_BATCH   ? &args->batch
                          : option == COST_CACHED  ? &args->cached
                          : option == COST_DECODE  ? &args->decode
                          : option == COST_CONTEXT ? &args->context
                                                   : NULL;
        if (count != NULL) {
            const kvio_cli_option_t *flag = cost_options;
            while (flag->id != option)
                flag++;
            if (parse_count("cost", flag->name, value, count) != KVIO_EXIT_OK)
                return KVIO_EXIT_USAGE;
        } else if (option == COST_HELP) {
            cost_usage(stdout);
            return KVIO_EXIT_OK;
        } else if (option == COST_LIST) {
            kvio_model_print_presets(stdout);
            return KVIO_EXIT_OK;
        } else if (option == COST_JSON || option == COST_TENSORS || option == COST_FIT) {
            *(option == COST_JSON      ? &args->json
              : option == COST_TENSORS ? &args->tensors
                                       : &args->fit) = true;
        } else if (option == COST_MODEL || option == COST_GPU) {
            *(option == COST_MODEL ? &args->model_name : &args->gpu_name) = value;
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

static int print_fit(const cost_args_t *args)
{
    char error[512];
    kvio_model_t model = {.preset = (char *)args->model_name, .dtype_bytes = 2};
    kvio_gpu_t gpu = {.preset = (char *)args->gpu_name};
    if (kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK ||
        kvio_gpu_resolve(&gpu, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        return KVIO_EXIT_USAGE;
    }
    fit_t fit;
    int exit_status = compute_fit(&model, &gpu, (int64_t)args->tp, &fit);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args->json) {
        printf("{\"model\": \"%s\", \"gpu\": \"%s\", \"tensor_parallel\": %llu, "
               "\"weights_gb\": %.4g, \"kv_bytes\": %llu, \"kv_bytes_per_token\": %llu, "
               "\"window_kv_bytes_per_sequence\": %llu, \"kv_tokens\": %llu, "
               "\"kv_tokens_all_full_attention\": %llu}\n",
               args->model_name, args->gpu_name, (unsigned long long)args->tp, fit.weights_gb,
               (unsigned long long)fit.kv_bytes, (unsigned long long)fit.per_token,
               (unsigned long long)fit.window_per_sequence, (unsigned long long)fit.tokens,
               (unsigned long long)fit.full_tokens);
        return KVIO_EXIT_OK;
    }
    printf("%s on %s, tensor parallel %llu: weights %.2f GB; 90 %% of %.1f GB leaves %.2f GB "
           "of KV\n",
           args->model_name, args->gpu_name, (unsigned long long)args->tp, fit.weights_gb,
           (double)gpu.memory / 1e9, (double)fit.kv_bytes / 1e9);
    printf("  KV tokens that fit   %llu (%llu bytes per token)\n", (unsigned long long)fit.tokens,
           (unsigned long long)fit.per_token);
    if (fit.window_per_sequence > 0)
        printf("  windowed layers      %llu more bytes per running sequence (its window)\n"
               "  as all full attention %llu tokens (%llu bytes per token): %.2fx fewer\n",
               (unsigned long long)fit.window_per_sequence, (unsigned long long)fit.full_tokens,
               (unsigned long long)fit.full_per_token,
               fit.full_tokens > 0 ? (double)fit.tokens / (double)fit.full_tokens : 0.0);
    return KVIO_EXIT_OK;
}

int kvio_cmd_cost(int argc, char **argv)
{
    cost_args_t args = {.model_name = "llama3-8b", .gpu_name = "h200", .tp = 1, .batch = 1};
    int exit_status = parse_cost_args(argc, argv, &args);
    if (exit_status >= 0)
        return exit_status;
    const char *model_name = args.model_name, *gpu_name = args.gpu_name;
    uint64_t tp = args.tp, prefill = args.prefill, batch = args.batch, cached = args.cached,
             decode = args.decode, context = args.context;
    bool json = args.json;
    if (tp < 1 || tp > 64) {
        fprintf(stderr, "kvio cost: --tp must be 1..64\n");
        return KVIO_EXIT_USAGE;
    }
    if (args.tensors)
        return print_tensors(model_name, json);
    if (args.fit)
        return print_fit(&args);
    if (prefill == 0 && decode == 0) {
        fprintf(stderr, "kvio cost: give --prefill TOKENS and/or --decode SEQS\n");
        return KVIO_EXIT_USAGE;
    }
    if (prefill > 0 && batch == 0) {
        /* It printed a batch of 0 prefill tokens in 0 sequences, 0.000 ms. */
        fprintf(stderr, "kvio cost: --batch 0: a batch holds at least one sequence of --prefill "
                "tokens\n");
        return KVIO_EXIT_USAGE;
    }
    char error[512];
    kvio_model_t model = {.preset = (char *)model_name, .dtype_bytes = 2};
    kvio_gpu_t gpu = {.preset = (char *)gpu_name};
    if (kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK ||
        kvio_gpu_resolve(&gpu, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        return KVIO_EXIT_USAGE;
    }
    kvio_cost_config_t config;
    memset(&config, 0, sizeof(config));
    if (kvio_config_defaults(kvio_cost_options, &config, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        return KVIO_EXIT_FAILED;
    }
    config.tensor_parallel = (int64_t)tp;
    kvio_cost_t *cost = NULL;
    kvio_status_t status = kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error));
    kvio_config_free(kvio_cost_options, &config);
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio cost: %s\n", error);
        return kvio_cli_exit_status(status);
    }
    kvio_batch_t work = {0};
    for (uint64_t i = 0; prefill > 0 && i < batch; i++)
        kvio_batch_add_prefill(&work, prefill, cached);
    for (uint64_t i = 0; i < decode; i++)
        kvio_batch_add_decode(&work, context);
    kvio_cost_breakdown_t result;
    kvio_cost_iteration(cost, &work, &result);
    uint64_t kv_token = kvio_model_kv_bytes_per_token(&model, (int64_t)tp);
    double weights_gb = (double)kvio_model_weight_bytes(&model) / 1e9;
    if (json) {
        printf("{\"model\": \"%s\", \"gpu\": \"%s\", \"tensor_parallel\": %llu, "
               "\"prefill_tokens\": %llu, \"decode_seqs\": %llu, \"decode_context\": %llu, "
               "\"flops\": %.6g, \"bytes\": %.6g, \"compute_ms\": %.6g, \"memory_ms\": %.6g, "
               "\"allreduce_ms\": %.6g, \"overhead_ms\": %.6g, \"time_ms\": %.6g, "
               "\"bound\": \"%s\", \"kv_bytes_per_token\": %llu, \"weights_gb\": %.4g}\n",
               model_name, gpu_name, (unsigned long long)tp,
               (unsigned long long)work.prefill_tokens, (unsigned long long)work.decode_seqs,
               (unsigned long long)work.decode_context, result.flops, result.bytes,
               result.compute_s * 1e3, result.memory_s * 1e3, result.allreduce_s * 1e3,
               result.overhead_s * 1e3, result.time_s * 1e3, result.bound,
               (unsigned long long)kv_token, weights_gb);
    } else {
        printf("%s on %s, tensor parallel %llu (weights %.2f GB, KV %llu bytes/token/GPU)\n",
               model_name, gpu_name, (unsigned long long)tp, weights_gb,
               (unsigned long long)kv_token);
        printf("  batch       %llu prefill tokens in %llu seqs, %llu decode seqs, "
               "%llu decode context tokens\n",
               (unsigned long long)work.prefill_tokens, (unsigned long long)work.prefill_seqs,
               (unsigned long long)work.decode_seqs, (unsigned long long)work.decode_context);
        printf("  flops       %.4g FLOP -> %.3f ms at the compute efficiency\n", result.flops,
               result.compute_s * 1e3);
        printf("  bytes       %.4g B -> %.3f ms at the memory efficiency\n", result.bytes,
               result.memory_s * 1e3);
        printf("  all-reduce  %.3f ms\n", result.allreduce_s * 1e3);
        printf("  overhead    %.3f ms (%.3f ms of it: a batch with prefill tokens)\n",
               result.overhead_s * 1e3, result.mixed_overhead_s * 1e3);
        printf("  iteration   %.3f ms (%s-bound)\n", result.time_s * 1e3, result.bound);
    }
    kvio_cost_destroy(cost);
    return KVIO_EXIT_OK;
}

int kvio_cmd_fit(int argc, char **argv)
{
    static const kvio_cli_option_t options[] = {{"help", 'h', NULL, COST_HELP},
                                                {NULL, 0, NULL, 0}};
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio fit", argc, argv, options);
    const char *value, *path = NULL;
    int option;
    size_t num_files = 0;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        if (option == KVIO_CLI_ERROR)
            return KVIO_EXIT_USAGE;
        if (option == COST_HELP) {
            printf("usage: kvio fit STEPS.csv|iterations.csv\n\n"
                   "Fits t = c0 + c1*prefill_tokens + c2*decode_seqs + c3*context_tokens (ms)\n"
                   "to measured iterations (CSV with those columns and time_ms) and prints\n"
                   "the coefficients for the cost section (kind: linear) and the fit error.\n"
                   "A kvio iterations.csv works too (duration_ms; no context column: c3 = 0).\n");
            return KVIO_EXIT_OK;
        }
        path = value;
        num_files++;
    }
    if (num_files != 1) {
        fprintf(stderr, "kvio fit: which file? (kvio fit STEPS.csv)\n");
        return KVIO_EXIT_USAGE;
    }
    char error[512];
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0;
    kvio_status_t status = kvio_cost_read_samples(path, &samples, &count, error, sizeof(error));
    if (status == KVIO_OK) {
        kvio_cost_fit_t fit;
        status = kvio_cost_fit_linear(samples, count, &fit, error, sizeof(error));
        if (status == KVIO_OK) {
            printf("# %zu samples; RMSE %.4g ms, max error %.4g ms, R^2 %.6f\n", fit.samples,
                   fit.rmse_ms, fit.max_abs_error_ms, fit.r_squared);
            printf("cost: {kind: linear, c0: %.6g, c1: %.6g, c2: %.6g, c3: %.6g}\n", fit.c0,
                   fit.c1, fit.c2, fit.c3);
            /* The cost model refuses them: time never runs backwards. */
            const double coefficients[4] = {fit.c0, fit.c1, fit.c2, fit.c3};
            for (int c = 0; c < 4; c++)
                if (coefficients[c] < 0)
                    fprintf(stderr, "kvio fit: warning: c%d came out negative (%.6g ms); "
                            "cost.c%d must be at least 0: set it to 0, or give samples that "
                            "vary more\n", c, coefficients[c], c);
        } else {
            snprintf(error + strlen(error), sizeof(error) - strlen(error), " (%s)", path);
        }
    }
    free(samples);
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio fit: %s\n", error);
        return KVIO_EXIT_USAGE;
    }
    return KVIO_EXIT_OK;
}
