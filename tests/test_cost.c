/* Tests for the cost model: shapes and KV bytes of the presets, roofline
 * bounds, tensor parallelism, the linear and table forms, fitting, KV
 * capacity, and the kvio cost / kvio fit commands. */
#include "kvio/cost.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/model.h"
#include "tests/helpers.h"

static kvio_cost_t *cost_of(const kvio_model_t *model, const kvio_gpu_t *gpu, int64_t tp)
{
    kvio_cost_config_t config;
    memset(&config, 0, sizeof(config));
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_cost_options, &config, error, sizeof(error)), KVIO_OK);
    config.tensor_parallel = tp;
    kvio_cost_t *cost = NULL;
    cr_assert_eq(kvio_cost_create(&config, model, gpu, &cost, error, sizeof(error)), KVIO_OK);
    kvio_config_free(kvio_cost_options, &config);
    return cost;
}

Test(cost, presets_have_published_sizes, .timeout = 10)
{
    /* Parameter counts as published: 8.03B, 70.6B, 1.24B, 7.6B, 7.25B, ~21B. */
    struct { const char *name; double params; } cases[] = {
        {"llama3-8b", 8.03e9}, {"llama3-70b", 70.55e9}, {"llama3.2-1b", 1.24e9},
        {"qwen2.5-7b", 7.6e9}, {"mistral-7b", 7.25e9}, {"gpt-oss-20b", 20.9e9},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvio_model_t model = test_model(cases[i].name);
        cr_expect_float_eq(kvio_model_params(&model), cases[i].params, 0.02 * cases[i].params,
                           "%s: %g", cases[i].name, kvio_model_params(&model));
    }
}

/* #19: the tensors weight sync moves, from the shape. Llama-3-8B's
 * checkpoint has 291 tensors (32 layers x 9, embedding, norm, LM head);
 * gpt-oss-20b has 32 experts x 3 projections per layer. Their elements,
 * norms aside, are the model's parameters; bytes follow the weights' dtype. */
Test(cost, tensor_lists_follow_the_checkpoints, .timeout = 10)
{
    struct {
        const char *name;
        size_t tensors;
    } cases[] = {{"llama3-8b", 291}, {"llama3.2-1b", 146}, {"gpt-oss-20b", 24 * (9 + 1 + 32 * 3 - 3) + 3}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        kvio_model_t model = test_model(cases[c].name);
        kvio_tensor_t *tensors = NULL;
        size_t count = 0;
        cr_assert_eq(kvio_model_tensors(&model, &tensors, &count), KVIO_OK);
        cr_expect_eq(count, cases[c].tensors, "%s: %zu tensors", cases[c].name, count);
        double elements = 0;
        for (size_t i = 0; i < count; i++)
            if (tensors[i].kind != KVIO_TENSOR_NORM)
                elements += (double)tensors[i].rows * (double)tensors[i].columns;
        cr_expect_float_eq(elements, kvio_model_params(&model), 1, "%s", cases[c].name);
        if (c == 0) {
            cr_expect_str_eq(tensors[1].name, "model.layers.0.input_layernorm.weight");
            cr_expect_str_eq(tensors[2].name, "model.layers.0.self_attn.q_proj.weight");
            cr_expect_eq(tensors[3].rows, 1024, "k_proj: 8 KV heads x 128");
            cr_expect_eq(tensors[3].bytes, 1024 * 4096 * 2);
            cr_expect_str_eq(tensors[count - 1].name, "lm_head.weight");
        }
        free(tensors);
    }
    test_run_t run = test_kvio(NULL, "cost", "--model", "gpt-oss-20b", "--tensors", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "router"), "%s", run.out);
    test_run_free(&run);
}

Test(cost, kv_bytes_per_token_follow_the_formula, .timeout = 10)
{
    kvio_model_t llama = test_model("llama3-8b");
    /* 2 · 32 layers · 8 KV heads · 128 · 2 bytes = 128 KiB */
    cr_assert_eq(kvio_model_kv_bytes_per_token(&llama, 1), 131072);
    cr_assert_eq(kvio_model_kv_bytes_per_token(&llama, 2), 65536);
    kvio_model_t oss = test_model("gpt-oss-20b");
    /* only the 12 full-attention layers grow with the context */
    cr_assert_eq(kvio_model_kv_bytes_per_token(&oss, 1), 2 * 12 * 8 * 64 * 2);
    cr_assert_eq(kvio_model_window_kv_bytes(&oss, 1), 2ull * 12 * 8 * 64 * 2 * 128);
}

Test(cost, decode_is_memory_bound_and_prefill_compute_bound, .timeout = 10)
{
    kvio_model_t model = test_model("llama3-8b");
    kvio_gpu_t gpu = test_gpu("h100-sxm");
    kvio_cost_t *cost = cost_of(&model, &gpu, 1);
    kvio_batch_t decode = {0};
    kvio_batch_add_decode(&decode, 1000);
    kvio_cost_breakdown_t result;
    kvio_cost_iteration(cost, &decode, &result);
    cr_assert_str_eq(result.bound, "memory");
    /* One decode step reads the weights: 16.06 GB / (3.35 TB/s · 0.8) + 1 ms. */
    cr_assert_float_eq(result.time_s, 16.06e9 / (3.35e12 * 0.8) + 1e-3, 2e-4);
    double short_decode_s = result.time_s;
    kvio_batch_t prefill = {0};
    kvio_batch_add_prefill(&prefill, 8192, 0);
    kvio_cost_iteration(cost, &prefill, &result);
    cr_assert_str_eq(result.bound, "compute");
    cr_assert_gt(result.time_s, 0.1);
    cr_assert_lt(result.time_s, 0.4);
    /* Longer context costs more. */
    kvio_batch_t longer = {0};
    kvio_batch_add_decode(&longer, 100000);
    kvio_cost_breakdown_t longer_result;
    kvio_cost_iteration(cost, &longer, &longer_result);
    cr_assert_gt(longer_result.time_s, short_decode_s + 99000.0 * 131072 / (3.35e12 * 0.8) * 0.99);
    kvio_cost_destroy(cost);
}

/* #35: a batch with prefill tokens runs piecewise CUDA graphs, a
 * decode-only one a single full graph: mixed_overhead (0.9 ms, vLLM PR
 * #51167 on an H200) is added to the first only. One prefill token beside
 * 64 decodes costs that much more, not the token's compute alone. */
Test(cost, a_batch_with_prefill_pays_the_mixed_overhead, .timeout = 10)
{
    kvio_model_t model = test_model("llama3-8b");
    kvio_gpu_t gpu = test_gpu("h200");
    kvio_cost_t *cost = cost_of(&model, &gpu, 1);
    kvio_batch_t decode = {0}, mixed = {0};
    for (int i = 0; i < 64; i++) {
        kvio_batch_add_decode(&decode, 1000);
        kvio_batch_add_decode(&mixed, 1000);
    }
    kvio_batch_add_prefill(&mixed, 1, 1000);
    kvio_cost_breakdown_t decode_only, with_prefill;
    kvio_cost_iteration(cost, &decode, &decode_only);
    kvio_cost_iteration(cost, &mixed, &with_prefill);
    cr_expect_eq(decode_only.mixed_overhead_s, 0);
    cr_expect_float_eq(with_prefill.mixed_overhead_s, 0.9e-3, 1e-12);
    double added = with_prefill.time_s - decode_only.time_s;
    cr_expect_float_eq(added, 0.9e-3, 0.05e-3, "one prefill token added %.4f ms", added * 1e3);
    kvio_cost_destroy(cost);
}

Test(cost, tensor_parallel_divides_work_and_adds_allreduce, .timeout = 10)
{
    kvio_model_t model = test_model("llama3-70b");
    kvio_gpu_t gpu = test_gpu("h100-sxm");
    kvio_cost_t *one = cost_of(&model, &gpu, 1), *four = cost_of(&model, &gpu, 4);
    kvio_batch_t batch = {0};
    for (int i = 0; i < 32; i++)
        kvio_batch_add_decode(&batch, 2000);
    kvio_cost_breakdown_t a, b;
    kvio_cost_iteration(one, &batch, &a);
    kvio_cost_iteration(four, &batch, &b);
    cr_assert_float_eq(b.memory_s, a.memory_s / 4, 1e-9);
    cr_assert_eq(a.allreduce_s, 0);
    cr_assert_gt(b.allreduce_s, 0);
    cr_assert_lt(b.time_s, a.time_s);
    kvio_cost_destroy(one);
    kvio_cost_destroy(four);
}

Test(cost, linear_form_adds_its_terms, .timeout = 10)
{
    kvio_model_t model = test_model("llama3-8b");
    kvio_gpu_t gpu = test_gpu("h200");
    kvio_cost_config_t config = {.kind = KVIO_COST_LINEAR, .tensor_parallel = 1,
                                 .linear_c0_ms = 2, .linear_c1_ms = 0.01,
                                 .linear_c2_ms = 0.1, .linear_c3_ms = 0.0001};
    kvio_cost_t *cost = NULL;
    char error[256];
    cr_assert_eq(kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error)), KVIO_OK);
    kvio_batch_t batch = {0};
    kvio_batch_add_prefill(&batch, 100, 0);
    kvio_batch_add_decode(&batch, 1000);
    kvio_batch_add_decode(&batch, 3000);
    kvio_cost_breakdown_t result;
    kvio_cost_iteration(cost, &batch, &result);
    cr_assert_float_eq(result.time_s * 1e3, 2 + 1 + 0.2 + 0.4, 1e-9);
    kvio_cost_destroy(cost);
}

static char *write_grid(const char *dir)
{
    /* time = 1 + 0.01·prefill + 0.5·decode + 0.001·context on a 2×2×2 grid */
    char text[1024] = "prefill_tokens,decode_seqs,context_tokens,time_ms\n";
    const double prefills[] = {0, 1000}, decodes[] = {0, 10}, contexts[] = {0, 5000};
    for (int p = 0; p < 2; p++)
        for (int d = 0; d < 2; d++)
            for (int c = 0; c < 2; c++) {
                char row[128];
                double t = 1 + 0.01 * prefills[p] + 0.5 * decodes[d] + 0.001 * contexts[c];
                snprintf(row, sizeof(row), "%g,%g,%g,%g\n", prefills[p], decodes[d], contexts[c], t);
                strcat(text, row);
            }
    return test_write_file(dir, "grid.csv", text);
}

Test(cost, table_form_interpolates_and_extrapolates, .timeout = 10)
{
    char *dir = test_tmpdir();
    char *grid = write_grid(dir);
    kvio_model_t model = test_model("llama3-8b");
    kvio_gpu_t gpu = test_gpu("h200");
    kvio_cost_config_t config = {.kind = KVIO_COST_TABLE, .tensor_parallel = 1, .table = grid};
    kvio_cost_t *cost = NULL;
    char error[512];
    cr_assert_eq(kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error)), KVIO_OK,
                 "%s", error);
    kvio_batch_t batch = {0};
    kvio_batch_add_prefill(&batch, 500, 0);
    for (int i = 0; i < 5; i++)
        kvio_batch_add_decode(&batch, 500);
    kvio_cost_breakdown_t result;
    kvio_cost_iteration(cost, &batch, &result);
    cr_assert_float_eq(result.time_s * 1e3, 1 + 5 + 2.5 + 2.5, 1e-9);
    kvio_batch_t beyond = {0};
    kvio_batch_add_prefill(&beyond, 2000, 0);
    kvio_cost_iteration(cost, &beyond, &result);
    cr_assert_float_eq(result.time_s * 1e3, 1 + 20, 1e-9);
    kvio_cost_destroy(cost);

    char *holey = test_write_file(dir, "holey.csv",
                                  "prefill_tokens,decode_seqs,context_tokens,time_ms\n"
                                  "0,0,0,1\n1000,0,0,11\n0,10,0,6\n");
    config.table = holey;
    cr_assert_eq(kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error)),
                 KVIO_ERR_PARSE);
    cr_assert(strstr(error, "the grid has no row for prefill_tokens=1000 decode_seqs=10") != NULL,
              "%s", error);
    free(grid);
    free(holey);
    test_rmtree(dir);
    free(dir);
}

Test(cost, fit_recovers_known_coefficients, .timeout = 10)
{
    kvio_cost_sample_t samples[60];
    for (int i = 0; i < 60; i++) {
        double p = (i * 37) % 4096, d = (i * 13) % 64, c = (i * 7919) % 100000;
        double noise = ((i % 3) - 1) * 0.001;
        samples[i] = (kvio_cost_sample_t){p, d, c, 3 + 0.02 * p + 0.15 * d + 2e-5 * c + noise};
    }
    kvio_cost_fit_t fit;
    char error[256];
    cr_assert_eq(kvio_cost_fit_linear(samples, 60, &fit, error, sizeof(error)), KVIO_OK, "%s", error);
    cr_assert_float_eq(fit.c0, 3, 0.01);
    cr_assert_float_eq(fit.c1, 0.02, 1e-5);
    cr_assert_float_eq(fit.c2, 0.15, 1e-3);
    cr_assert_float_eq(fit.c3, 2e-5, 1e-7);
    cr_assert_gt(fit.r_squared, 0.9999);
    cr_assert_lt(fit.rmse_ms, 0.002);
    cr_assert_eq(kvio_cost_fit_linear(samples, 3, &fit, error, sizeof(error)), KVIO_ERR_INVALID);
}

/* #21: kvio fit reads kvio's own iterations.csv (duration_ms, no context
 * column): a simulate run with a known linear cost (c3 = 0) gives back its
 * coefficients. */
Test(cost, fit_reads_kvios_own_iterations_csv, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "--set",
                               "cost={kind: linear, c0: 2, c1: 0.01, c2: 0.05, c3: 0}", "-o",
                               "res", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "fit", "res/iterations.csv", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    double c0 = 0, c1 = 0, c2 = 0, c3 = -1;
    const char *line = strstr(run.out, "cost: {kind: linear, c0: ");
    cr_assert_not_null(line, "%s", run.out);
    cr_assert_eq(sscanf(line, "cost: {kind: linear, c0: %lf, c1: %lf, c2: %lf, c3: %lf", &c0, &c1,
                        &c2, &c3), 4, "%s", run.out);
    /* iterations.csv keeps the duration to the microsecond. */
    cr_expect_float_eq(c0, 2, 0.01, "%s", run.out);
    cr_expect_float_eq(c1, 0.01, 1e-5, "%s", run.out);
    cr_expect_float_eq(c2, 0.05, 1e-4, "%s", run.out);
    cr_expect_eq(c3, 0);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

Test(cost, kv_capacity_subtracts_weights_and_refuses_what_does_not_fit, .timeout = 10)
{
    kvio_model_t model = test_model("llama3-8b");
    kvio_gpu_t gpu = test_gpu("h100-sxm");
    uint64_t bytes;
    char error[512];
    cr_assert_eq(kvio_model_kv_capacity(&model, &gpu, 1, 0.9, &bytes, error, sizeof(error)), KVIO_OK);
    cr_assert_float_eq((double)bytes, 0.9 * 80 * 1073741824.0 - 16.06e9, 0.02e9);
    kvio_model_t big = test_model("llama3-70b");
    kvio_gpu_t small = test_gpu("rtx-4090");
    cr_assert_eq(kvio_model_kv_capacity(&big, &small, 1, 0.9, &bytes, error, sizeof(error)),
                 KVIO_ERR_CONFIG);
    cr_assert(strstr(error, "the weights (131.") != NULL && strstr(error, "do not fit") != NULL,
              "%s", error);
}

Test(cost, unknown_presets_are_named, .timeout = 10)
{
    kvio_model_t model = {.preset = "llama9-1t"};
    char error[512];
    cr_assert_eq(kvio_model_resolve(&model, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(strstr(error, "unknown model 'llama9-1t' (one of llama3-8b,") != NULL, "%s", error);
    kvio_gpu_t gpu = {.preset = "b9000"};
    cr_assert_eq(kvio_gpu_resolve(&gpu, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(strstr(error, "unknown GPU 'b9000'") != NULL, "%s", error);
}

Test(cost, cost_and_fit_commands, .timeout = 20)
{
    test_run_t run = test_kvio(NULL, "cost", "--model", "llama3-8b", "--gpu", "h100-sxm",
                               "--decode", "1", "--context", "1000", "--json", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "\"bound\": \"memory\""), "%s", run.out);
    cr_assert(test_contains(run.out, "\"kv_bytes_per_token\": 131072"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "cost", "--model", "nope", "--prefill", "10", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "unknown model 'nope'"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(NULL, "cost", "--list", NULL);
    cr_assert_eq(run.status, 0);
    cr_assert(test_contains(run.out, "rtx-5090") && test_contains(run.out, "gpt-oss-20b"));
    test_run_free(&run);

    char *dir = test_tmpdir();
    char *grid = write_grid(dir);
    run = test_kvio(NULL, "fit", grid, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "cost: {kind: linear, c0: 1, c1: 0.01, c2: 0.5, c3: 0.001}"),
              "%s", run.out);
    test_run_free(&run);
    char *bad = test_write_file(dir, "bad.csv", "prefill_tokens,decode_seqs,context_tokens,time_ms\n1,2,x,4\n");
    run = test_kvio(NULL, "fit", bad, NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "bad.csv:2: context_tokens: 'x' is not a non-negative number"),
              "%s", run.err);
    test_run_free(&run);
    free(grid);
    free(bad);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 12: kvio fit spun forever on /dev/zero, grew without bound on an
 * endless stream and read a row over 4 KB as two samples. Now what is not a
 * regular file is refused, a row is one sample up to 64 KB (longer ones are
 * refused naming the line), and at most 10 M rows are read. */
Test(cost, fit_reads_bounded_rows_from_regular_files_only, .timeout = 30)
{
    test_run_t run = test_kvio(NULL, "fit", "/dev/zero", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "/dev/zero: not a regular file"), "%s", run.err);
    test_run_free(&run);
    char *dir = test_tmpdir();
    /* Six rows, the fourth over 4 KB (its fifth column a long note). */
    size_t size = 8192;
    char *text = malloc(size + 512);
    cr_assert_not_null(text);
    int used = snprintf(text, 512, "prefill_tokens,decode_seqs,context_tokens,time_ms,note\n");
    for (int row = 0; row < 6; row++) {
        int prefill = 100 * (row + 1), decode = (row * 3) % 5, context = row * row * 100;
        used += snprintf(text + used, 64, "%d,%d,%d,%.3f,", prefill, decode, context,
                         1 + 0.01 * prefill + 0.5 * decode + 0.001 * context);
        size_t note = row == 3 ? 5000 : 3;
        memset(text + used, 'x', note);
        used += (int)note;
        text[used++] = '\n';
    }
    text[used] = '\0';
    char *file = test_write_file(dir, "steps.csv", text);
    run = test_kvio(dir, "fit", "steps.csv", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "# 6 samples"), "a long row is one sample: %s", run.out);
    test_run_free(&run);
    /* A row longer than 64 KB is refused with its line number. */
    char *huge = malloc(70000 + 128);
    cr_assert_not_null(huge);
    int at = snprintf(huge, 128, "prefill_tokens,decode_seqs,time_ms,note\n1,1,1,");
    memset(huge + at, 'y', 70000);
    huge[at + 70000] = '\n';
    huge[at + 70001] = '\0';
    free(test_write_file(dir, "huge.csv", huge));
    run = test_kvio(dir, "fit", "huge.csv", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "huge.csv:2: line longer than"), "%s", run.err);
    test_run_free(&run);
    free(huge);
    free(text);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* kvio cost --fit: gpt-oss-20b's KV on a 24 GB card counts only its 12
 * full-attention layers per token (twice the tokens of all 24 as full
 * attention), its windowed layers per sequence; a model whose weights do
 * not fit is refused with the numbers. */
Test(cost, fit_counts_only_the_full_attention_layers_per_token, .timeout = 30)
{
    test_run_t run = test_kvio(NULL, "cost", "--model", "gpt-oss-20b", "--gpu", "rtx-4090",
                               "--fit", "--json", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    json_error_t error;
    json_t *fit = json_loads(run.out, 0, &error);
    cr_assert_not_null(fit, "%s: %s", error.text, run.out);
    cr_assert_eq(test_json_integer(fit, "kv_bytes_per_token"), 12 * 2 * 8 * 64 * 2);
    cr_assert_eq(test_json_integer(fit, "window_kv_bytes_per_sequence"), 12 * 2 * 8 * 64 * 2 * 128);
    long long tokens = test_json_integer(fit, "kv_tokens");
    cr_assert_eq(tokens, 2 * test_json_integer(fit, "kv_tokens_all_full_attention"));
    /* 90 % of 24 GiB less the 13.8 GB of MXFP4 weights. */
    long long bytes = test_json_integer(fit, "kv_bytes");
    cr_assert_eq(tokens, bytes / 24576);
    cr_assert_lt(fabs((double)bytes - (0.9 * 24 * 1073741824.0 - 13.8e9)), 1e7, "%lld", bytes);
    json_decref(fit);
    test_run_free(&run);
    run = test_kvio(NULL, "cost", "--model", "gpt-oss-120b", "--gpu", "rtx-5090", "--fit", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "do not fit"), "%s", run.err);
    test_run_free(&run);
}
