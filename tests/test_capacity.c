/* kvio capacity: the search finds a knee it can be checked against by hand,
 * and refuses what it cannot search. */
#include "kvio/capacity.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

/* One rank running one request at a time; each is a 1,000-token prompt and
 * a single output token, one iteration of 1000 x 0.01 ms = 10 ms (the
 * linear cost model). Arrivals are evenly spaced: below 100 req/s nothing
 * queues and TTFT is 10 ms; above, the queue grows with every request and
 * soon no TTFT is within 30 ms. The capacity is 100 req/s. */
static const char *knee =
    "name: knee\nseed: 1\nmode: simulate\nduration: 30s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "cost: {kind: linear, c0: 0, c1: 0.01}\n"
    "serve:\n  engine: {max_num_seqs: 1, max_num_batched_tokens: 8192}\n"
    "  kvcache: {block_size: 16, blocks: 1000}\n"
    "stream:\n  arrival: {process: constant, rate: 10}\n"
    "  input_tokens: {dist: constant, value: 1000}\n"
    "  output_tokens: {dist: constant, value: 1}\n";

Test(capacity, finds_a_knee_computed_by_hand, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "knee.yaml", knee);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    kvio_capacity_options_t options = {.source = file, .ttft_ns = 30000000, .attain = 0.9,
                                       .tolerance = 0.01, .output_dir = out};
    json_t *result = NULL;
    char error[1024];
    cr_assert_eq(kvio_capacity(&options, &result, error, sizeof(error)), KVIO_OK, "%s", error);
    double capacity = test_json_number(result, "capacity_rps");
    cr_expect(capacity >= 95 && capacity <= 105, "capacity %.3f req/s, 100 by hand", capacity);
    cr_expect_str_eq(test_json_string(result, "binding"), "ttft");
    /* The curve: every probe at or below the capacity met it, every one
     * above failed, in rate order. */
    const json_t *curve = json_object_get(result, "curve");
    cr_assert_gt(json_array_size(curve), 3);
    double previous = 0;
    for (size_t i = 0; i < json_array_size(curve); i++) {
        const json_t *probe = json_array_get(curve, i);
        double rate = test_json_number(probe, "rate");
        cr_expect_gt(rate, previous);
        previous = rate;
        cr_expect_eq(test_json_true(probe, "met"), rate <= capacity + 1e-9, "rate %.4g", rate);
    }
    /* Deterministic: the same search, the same answer. */
    json_t *again = NULL;
    options.force = true;
    cr_assert_eq(kvio_capacity(&options, &again, error, sizeof(error)), KVIO_OK, "%s", error);
    cr_expect_eq(test_json_number(again, "capacity_rps"), capacity);
    json_decref(result);
    json_decref(again);
    test_rmtree(dir);
    free(file);
    free(dir);
}

/* What cannot be searched exits 2 naming why, before any run. */
Test(capacity, refuses_what_it_cannot_search, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "knee.yaml", knee);
    struct {
        const char *args[6];
        const char *message;
    } cases[] = {
        {{"capacity", file, NULL}, "has no SLO: give --slo"},
        {{"capacity", file, "--slo", "ttft=fast", NULL}, "--slo 'ttft=fast'"},
        {{"capacity", file, "--slo", "ttft=1s", "--set", "mode=emulate"}, "simulate runs"},
        {{"capacity", file, "--slo", "ttft=1s", "--attain", "1.5"}, "--attain takes"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *const *a = cases[c].args;
        test_run_t run = test_kvio(dir, a[0], a[1], a[2], a[3], a[4], a[5], NULL);
        cr_expect_eq(run.status, 2, "case %zu: %s", c, run.err);
        cr_expect(test_contains(run.err, cases[c].message), "case %zu: %s", c, run.err);
        test_run_free(&run);
    }
    test_rmtree(dir);
    free(file);
    free(dir);
}
