/* kvio fit: the cost model fitted to measurements. Without a model, the
 * linear form's coefficients by least squares on measured steps (a CSV, or
 * kvio's iterations.csv); with --model and --gpu, the roofline's memory and
 * compute efficiency and step overhead from what benchmarks wrote (vllm
 * bench latency and serve JSON, SGLang bench_one_batch lines, a CSV of
 * steps), printed as a workload's model, gpu and cost sections. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/cost.h"
#include "kvio/model.h"

enum { FIT_HELP = 1, FIT_FORMAT, FIT_BATCH_SIZE, FIT_INPUT_LEN, FIT_OUTPUT_LEN };

static const kvio_cli_option_t fit_options[] = {
    {"help", 'h', NULL, FIT_HELP},
    {"format", 0, "a format", FIT_FORMAT},
    {"batch-size", 0, "a count", FIT_BATCH_SIZE},
    {"input-len", 0, "a token count", FIT_INPUT_LEN},
    {"output-len", 0, "a token count", FIT_OUTPUT_LEN},
    KVIO_CLI_COST_SETUP_OPTIONS,
    {NULL, 0, NULL, 0},
};

#define MAX_FIT_FILES 64

static void fit_usage(void)
{
    printf("usage: kvio fit STEPS.csv|iterations.csv\n"
           "       kvio fit --model M --gpu G [--tp N] [--pp N] [--engine E]\n"
           "                [--weight-dtype F] [--kv-dtype F] [--format F]\n"
           "                [--batch-size B] [--input-len I] [--output-len O] FILE...\n\n"
           "Without --model: fits t = c0 + c1*prefill_tokens + c2*decode_seqs +\n"
           "c3*context_tokens (ms) to measured steps (CSV with those columns and\n"
           "time_ms; kvio's iterations.csv: duration_ms, no context, c3 = 0) and prints\n"
           "the cost section (kind: linear) and the fit error.\n\n"
           "With --model and --gpu: fits the roofline's memory_efficiency,\n"
           "compute_efficiency and overhead (those the measurements depend on, one\n"
           "per measurement at most; the engine profile's other parameters held) and\n"
           "prints each measurement before and after with the model, gpu and cost\n"
           "sections to put in a workload. FILE: vllm bench latency --output-json\n"
           "(its batch shape from --batch-size, --input-len, --output-len: vLLM's\n"
           "defaults 8, 32, 128), vllm bench serve --save-result (run with\n"
           "--max-concurrency), SGLang bench_one_batch --result-filename, or a CSV of\n"
           "steps; --format auto|csv|vllm-latency|vllm-serve|sglang (auto: by content).\n");
}

/* What kvio fit was given. */
typedef struct fit_args {
    kvio_cli_cost_setup_t setup;
    const char *files[MAX_FIT_FILES];
    size_t num_files;
    int format;
    kvio_cost_run_shape_t latency;
} fit_args_t;

static int parse_fit_args(int argc, char **argv, fit_args_t *args)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio fit", argc, argv, fit_options);
    const char *value;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        uint64_t *count = option == FIT_BATCH_SIZE   ? &args->latency.batch_size
                          : option == FIT_INPUT_LEN  ? &args->latency.input_tokens
                          : option == FIT_OUTPUT_LEN ? &args->latency.output_tokens
                                                     : NULL;
        if (option == KVIO_CLI_ERROR)
            return KVIO_EXIT_USAGE;
        if (option == FIT_HELP) {
            fit_usage();
            return KVIO_EXIT_OK;
        }
        if (count != NULL) {
            if (kvio_cli_cost_count("kvio fit", fit_options, option, value, 1, count) !=
                KVIO_EXIT_OK)
                return KVIO_EXIT_USAGE;
        } else if (option == FIT_FORMAT) {
            args->format = -1;
            for (int f = 0; kvio_fit_format_names[f] != NULL; f++)
                if (strcmp(kvio_fit_format_names[f], value) == 0)
                    args->format = f;
            if (args->format < 0) {
                fprintf(stderr, "kvio fit: --format: unknown '%s' (auto, csv, vllm-latency, "
                        "vllm-serve, sglang)\n", value);
                return KVIO_EXIT_USAGE;
            }
        } else if (option == KVIO_CLI_OPERAND) {
            if (kvio_cli_append("kvio fit", "file", args->files, &args->num_files,
                                MAX_FIT_FILES, value) != KVIO_EXIT_OK)
                return KVIO_EXIT_USAGE;
        } else if (!kvio_cli_cost_setup_take(&args->setup, option, value)) {
            return KVIO_EXIT_USAGE;
        }
    }
    return -1;
}

/* The linear form from one CSV of steps. */
static int fit_linear(const char *path)
{
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

/* The fitted workload sections: the model and GPU as given, the cost. */
static void print_sections(const fit_args_t *args, const kvio_model_t *model,
                           const kvio_cost_config_t *config)
{
    printf("model: {preset: %s", args->setup.model_name);
    if (model->weight_dtype != KVIO_DTYPE_AUTO)
        printf(", weight_dtype: %s", kvio_dtype_names[model->weight_dtype]);
    if (model->activation_dtype != KVIO_DTYPE_AUTO)
        printf(", activation_dtype: %s", kvio_dtype_names[model->activation_dtype]);
    if (model->kv_cache_dtype != KVIO_DTYPE_AUTO)
        printf(", kv_cache_dtype: %s", kvio_dtype_names[model->kv_cache_dtype]);
    printf("}\ngpu: {preset: %s}\n", args->setup.gpu_name);
    printf("cost: {kind: roofline, engine: %s, tensor_parallel: %lld, ",
           kvio_cost_engine_names[config->engine], (long long)config->tensor_parallel);
    if (config->pipeline_parallel > 1)
        printf("pipeline_parallel: %lld, ", (long long)config->pipeline_parallel);
    if (config->expert_parallel)
        printf("expert_parallel: true, ");
    printf("memory_efficiency: %.4f, compute_efficiency: %.4f, overhead: %lldus}\n",
           config->memory_efficiency, config->compute_efficiency,
           (long long)((config->overhead_ns + 500) / 1000));
}

static void print_fit(const fit_args_t *args, const kvio_cost_measurement_t *measurements,
                      size_t count, const kvio_cost_roofline_fit_t *fit)
{
    static const char *const names[KVIO_FIT_PARAMS] = {"memory_efficiency",
                                                       "compute_efficiency", "overhead"};
    printf("# kvio fit: %zu measurement%s; %s on %s, tensor parallel %lld, engine %s\n# fitted:",
           count, count == 1 ? "" : "s", args->setup.model_name, args->setup.gpu_name,
           (long long)fit->config.tensor_parallel, kvio_cost_engine_names[fit->config.engine]);
    for (int p = 0; p < KVIO_FIT_PARAMS; p++)
        if (fit->fitted[p])
            printf(" %s", names[p]);
    printf(" (the others held)\n# %-60s %12s %12s %12s\n", "measurement", "measured", "before",
           "after");
    for (size_t i = 0; i < count; i++) {
        const char *unit = measurements[i].run ? kvio_cost_metric_unit(measurements[i].metric)
                                               : "ms";
        printf("# %-60.60s %9.4g %-2s %9.4g %-2s %9.4g %s\n", measurements[i].origin,
               measurements[i].measured, unit, fit->before[i], unit, fit->after[i], unit);
    }
    printf("# after: RMS error %.2f %%, max %.2f %%\n", 100 * fit->rms_error,
           100 * fit->max_error);
}

/* The roofline from every file's measurements. */
static int fit_roofline(fit_args_t *args)
{
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_cost_config_t config;
    int exit_status = kvio_cli_cost_setup_build(&args->setup, "kvio fit", &model, &gpu, &config);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    char error[KVIO_CLI_ERROR_MAX];
    kvio_cost_measurement_t *measurements = NULL;
    size_t count = 0;
    kvio_status_t status =
        kvio_cost_check_run_shape(&args->latency, "--batch-size, --input-len, --output-len",
                                  error, sizeof(error));
    for (size_t f = 0; f < args->num_files && status == KVIO_OK; f++)
        status = kvio_cost_read_measurements(args->files[f], args->format, &args->latency,
                                             &measurements, &count, error, sizeof(error));
    kvio_cost_roofline_fit_t fit = {0};
    if (status == KVIO_OK)
        status = kvio_cost_fit_roofline(&config, &model, &gpu, measurements, count, &fit, error,
                                        sizeof(error));
    if (status == KVIO_OK) {
        print_fit(args, measurements, count, &fit);
        print_sections(args, &model, &fit.config);
    } else {
        fprintf(stderr, "kvio fit: %s\n", error);
    }
    kvio_cost_roofline_fit_free(&fit);
    free(measurements);
    kvio_config_free(kvio_cost_options, &config);
    return status == KVIO_OK ? KVIO_EXIT_OK : kvio_cli_exit_status(status);
}

int kvio_cmd_fit(int argc, char **argv)
{
    fit_args_t args = {.setup = {.gpu_name = "h200"},
                       .latency = {.batch_size = 8, .input_tokens = 32, .output_tokens = 128}};
    int exit_status = parse_fit_args(argc, argv, &args);
    if (exit_status >= 0)
        return exit_status;
    if (args.num_files == 0) {
        fprintf(stderr, "kvio fit: which file? (kvio fit STEPS.csv; kvio fit --model M --gpu G "
                "RESULT.json)\n");
        return KVIO_EXIT_USAGE;
    }
    if (args.setup.model_name != NULL)
        return fit_roofline(&args);
    if (args.num_files != 1) {
        fprintf(stderr, "kvio fit: the linear form fits one CSV (give --model and --gpu to fit "
                "the roofline to several files)\n");
        return KVIO_EXIT_USAGE;
    }
    return fit_linear(args.files[0]);
}
