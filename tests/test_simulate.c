/* Invariants of whole simulate runs: tokens are conserved and every request
 * finishes once, KV usage stays within capacity, runs are byte-identical for
 * a seed, pkas avoids the preemptions fcfs suffers on long contexts, lpm
 * beats fcfs on shared prefixes, and kvio compare writes its variants. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/compare.h"
#include "kvio/run.h"
#include "kvio/stream.h"
#include "tests/helpers.h"

/* A stream of long prompts and long outputs against 2,000 blocks of 16
 * tokens (32K tokens, room for about three requests): 40 requests at time 0,
 * 6,000–10,000 prompt tokens, 500–1,500 output tokens, so the running set's
 * growth overflows the KV cache under fcfs. Prefix caching is off, so a
 * preempted request recomputes its whole context (the PKAS setting; with it
 * on, the victim's blocks usually survive in the cache and recompute is
 * cheap). */
static const char *long_context =
    "name: long\nseed: 3\nmode: simulate\nduration: 600s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "serve:\n  engine: {max_num_seqs: 64, max_num_batched_tokens: 8192}\n"
    "  kvcache: {block_size: 16, blocks: 2000, prefix_caching: false}\n"
    "stream:\n  requests: 40\n  arrival: {process: batch}\n"
    "  input_tokens: {dist: uniform, low: 6000, high: 10000}\n"
    "  output_tokens: {dist: uniform, low: 500, high: 1500}\n";

/* Shared system prompts of 1,024 tokens (12 of them, equally popular) with
 * short unique suffixes, arriving at 40 req/s — above what the rank serves —
 * into a KV cache that holds about three prompts. */
static const char *shared_prefix =
    "name: shared\nseed: 5\nmode: simulate\nduration: 60s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "serve:\n  engine: {max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
    "  kvcache: {block_size: 16, blocks: 320}\n"
    "stream:\n  requests: 600\n  arrival: {process: poisson, rate: 40}\n"
    "  input_tokens: {dist: constant, value: 1100}\n"
    "  output_tokens: {dist: constant, value: 8}\n"
    "  prefix: {system_prompts: {count: 12, tokens: 1024, zipf: 0}}\n";

typedef struct run_output {
    char *dir;
    json_t *summary;
} run_output_t;

static run_output_t run_text(const char *text, const char *const *sets, size_t num_sets)
{
    run_output_t output;
    output.dir = test_tmpdir();
    char *file = test_write_file(output.dir, "w.yaml", text);
    kvio_workload_t workload;
    char error[1024];
    cr_assert_eq(kvio_workload_load(file, sets, num_sets, &workload, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", output.dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true, .source = file};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    kvio_workload_free(&workload);
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    json_error_t json_error;
    output.summary = json_load_file(path, 0, &json_error);
    cr_assert_not_null(output.summary, "%s", json_error.text);
    free(file);
    return output;
}

static void run_free(run_output_t *output)
{
    json_decref(output->summary);
    test_rmtree(output->dir);
    free(output->dir);
}

static double metric(const run_output_t *output, const char *key)
{
    char path[256];
    snprintf(path, sizeof(path), "metrics.%s", key);
    return test_json_number(output->summary, path);
}

static char *read_out(const run_output_t *output, const char *name)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/%s", output->dir, name);
    return test_read_file(path);
}

Test(simulate, every_request_finishes_once_with_its_output, .timeout = 60)
{
    run_output_t output = run_text(long_context, NULL, 0);
    cr_assert_eq(metric(&output, "completed"), 40);
    cr_assert(test_json_true(output.summary, "complete"));
    /* The stream's own outputs, regenerated from the same config and seed. */
    char *file = test_write_file(output.dir, "again.yaml", long_context);
    kvio_workload_t workload;
    char error[512];
    cr_assert_eq(kvio_workload_load(file, NULL, 0, &workload, error, sizeof(error)), KVIO_OK);
    kvio_stream_t *stream;
    cr_assert_eq(kvio_stream_create(&workload.stream, (uint64_t)workload.seed,
                                    workload.duration_ns, &stream, error, sizeof(error)), KVIO_OK);
    uint64_t expected_output = 0, expected_input = 0;
    const kvio_request_t *request;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        uint32_t output_tokens = request->output_tokens;
        if (request->max_tokens > 0 && output_tokens > request->max_tokens)
            output_tokens = request->max_tokens;
        expected_output += output_tokens;
        expected_input += request->input_tokens;
    }
    kvio_stream_destroy(stream);
    kvio_workload_free(&workload);
    cr_assert_eq(metric(&output, "output_tokens"), (double)expected_output);
    cr_assert_eq(metric(&output, "input_tokens"), (double)expected_input);
    /* requests.csv: one row per request, each id once. */
    char *csv = read_out(&output, "requests.csv");
    int seen[40] = {0};
    int rows = 0;
    for (char *line = strchr(csv, '\n'); line != NULL && line[1] != '\0'; line = strchr(line + 1, '\n')) {
        unsigned id = (unsigned)strtoul(line + 1, NULL, 10);
        cr_assert_lt(id, 40);
        seen[id]++;
        rows++;
    }
    cr_assert_eq(rows, 40);
    for (int id = 0; id < 40; id++)
        cr_assert_eq(seen[id], 1, "request %d finished %d times", id, seen[id]);
    free(csv);
    free(file);
    run_free(&output);
}

Test(simulate, kv_usage_never_exceeds_capacity, .timeout = 60)
{
    run_output_t output = run_text(long_context, NULL, 0);
    cr_assert_leq(metric(&output, "kv_usage_max"), 1.0);
    char *csv = read_out(&output, "iterations.csv");
    int lines = 0;
    for (char *line = strchr(csv, '\n'); line != NULL && line[1] != '\0'; line = strchr(line + 1, '\n')) {
        /* kv_usage is the 7th column */
        char *field = line + 1;
        for (int column = 0; column < 6; column++)
            field = strchr(field, ',') + 1;
        cr_assert_leq(strtod(field, NULL), 1.0);
        lines++;
    }
    cr_assert_gt(lines, 100);
    free(csv);
    run_free(&output);
}

Test(simulate, same_seed_gives_identical_results, .timeout = 60)
{
    run_output_t first = run_text(shared_prefix, NULL, 0);
    run_output_t second = run_text(shared_prefix, NULL, 0);
    char *a = json_dumps(json_object_get(first.summary, "metrics"), JSON_SORT_KEYS);
    char *b = json_dumps(json_object_get(second.summary, "metrics"), JSON_SORT_KEYS);
    cr_assert_str_eq(a, b);
    const char *files[] = {"requests.csv", "iterations.csv"};
    for (int f = 0; f < 2; f++) {
        char *x = read_out(&first, files[f]);
        char *y = read_out(&second, files[f]);
        cr_assert_str_eq(x, y, "%s differs", files[f]);
        free(x);
        free(y);
    }
    free(a);
    free(b);
    run_free(&first);
    run_free(&second);
}

/* PKAS's gain on long contexts was fcfs admitting 6-10K-token prompts on
 * their first chunk and thrashing: vLLM's whole-sequence admission
 * (serve.engine.scheduler_reserve_full_isl, the default) removes most of
 * it. Without it fcfs preempts hundreds of times at under half the
 * throughput; with it, a handful, as does pkas's margin (none). */
Test(simulate, whole_sequence_admission_removes_most_of_what_pkas_gained, .timeout = 120)
{
    const char *legacy_sets[] = {"serve.scheduler.policy=fcfs",
                                 "serve.engine.scheduler_reserve_full_isl=false"};
    const char *fcfs_sets[] = {"serve.scheduler.policy=fcfs"};
    const char *pkas_sets[] = {"serve.scheduler.policy=pkas", "serve.scheduler.predictor=oracle"};
    run_output_t legacy = run_text(long_context, legacy_sets, 2);
    run_output_t fcfs = run_text(long_context, fcfs_sets, 1);
    run_output_t pkas = run_text(long_context, pkas_sets, 2);
    double legacy_preemptions = metric(&legacy, "preemptions");
    cr_assert_geq(legacy_preemptions, 100);
    cr_assert_lt(metric(&fcfs, "preemptions"), legacy_preemptions / 10);
    cr_assert_eq(metric(&pkas, "preemptions"), 0);
    double legacy_tps = metric(&legacy, "output_throughput");
    cr_assert_gt(metric(&fcfs, "output_throughput"), 2 * legacy_tps);
    cr_assert_gt(metric(&pkas, "output_throughput"), 2 * legacy_tps);
    run_free(&legacy);
    run_free(&fcfs);
    run_free(&pkas);
}

Test(simulate, lpm_hits_more_than_fcfs_on_shared_prefixes, .timeout = 120)
{
    const char *fcfs_sets[] = {"serve.scheduler.policy=fcfs"};
    const char *lpm_sets[] = {"serve.scheduler.policy=lpm"};
    run_output_t fcfs = run_text(shared_prefix, fcfs_sets, 1);
    run_output_t lpm = run_text(shared_prefix, lpm_sets, 1);
    cr_assert_gt(metric(&lpm, "hit_rate"), metric(&fcfs, "hit_rate"), "lpm %f <= fcfs %f",
                 metric(&lpm, "hit_rate"), metric(&fcfs, "hit_rate"));
    run_free(&fcfs);
    run_free(&lpm);
}

Test(simulate, swap_preemption_moves_bytes_instead_of_recomputing, .timeout = 60)
{
    const char *sets[] = {"serve.engine.preemption=swap"};
    run_output_t swap = run_text(long_context, sets, 1);
    cr_assert_geq(metric(&swap, "preemptions"), 1);
    cr_assert_gt(metric(&swap, "swapped_bytes"), 0);
    cr_assert_eq(metric(&swap, "recomputed_tokens"), 0);
    cr_assert_eq(metric(&swap, "completed"), 40);
    run_free(&swap);
}

Test(simulate, several_serve_ranks_share_the_stream, .timeout = 60)
{
    const char *routers[] = {"round_robin", "least_loaded", "prefix_affinity", "kv_cost"};
    for (int r = 0; r < 4; r++) {
        char router[64];
        snprintf(router, sizeof(router), "serve.router.policy=%s", routers[r]);
        const char *sets[] = {"ranks.serve=3", router};
        run_output_t output = run_text(shared_prefix, sets, 2);
        cr_assert_eq(metric(&output, "completed"), 600, "%s", routers[r]);
        json_t *per_rank = json_object_get(json_object_get(output.summary, "metrics"), "per_rank");
        cr_assert_eq(json_array_size(per_rank), 3);
        double total = 0;
        for (size_t i = 0; i < 3; i++)
            total += test_json_number(json_array_get(per_rank, i), "completed");
        cr_assert_eq(total, 600);
        run_free(&output);
    }
}

/* Each rank's latency figures are its own requests' (and their gaps'):
 * three ranks' counts add up to the run's, every rank's median lies within
 * the run's range; one rank's figures are the run's. */
Test(simulate, per_rank_latencies_are_the_ranks_own_requests, .timeout = 60)
{
    static const char *const kinds[] = {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"};
    const char *three[] = {"ranks.serve=3", "serve.router.policy=round_robin"};
    run_output_t output = run_text(shared_prefix, three, 2);
    const json_t *metrics = json_object_get(output.summary, "metrics");
    const json_t *per_rank = json_object_get(metrics, "per_rank");
    cr_assert_eq(json_array_size(per_rank), 3);
    for (size_t k = 0; k < 4; k++) {
        const json_t *run = json_object_get(metrics, kinds[k]);
        double counts = 0;
        for (size_t r = 0; r < 3; r++) {
            const json_t *rank = json_object_get(json_array_get(per_rank, r), kinds[k]);
            cr_assert_gt(test_json_number(rank, "count"), 0, "%s rank %zu", kinds[k], r);
            counts += test_json_number(rank, "count");
            cr_expect_geq(test_json_number(rank, "p50"), 0);
            cr_expect_leq(test_json_number(rank, "max"), test_json_number(run, "max"));
        }
        cr_expect_eq(counts, test_json_number(run, "count"), "%s", kinds[k]);
    }
    run_free(&output);
    output = run_text(shared_prefix, NULL, 0);
    metrics = json_object_get(output.summary, "metrics");
    const json_t *only = json_array_get(json_object_get(metrics, "per_rank"), 0);
    for (size_t k = 0; k < 4; k++)
        cr_expect(json_equal(json_object_get(only, kinds[k]), json_object_get(metrics, kinds[k])),
                  "%s", kinds[k]);
    run_free(&output);
}

/* Three ranks, round robin, shared prompts: a prompt one rank computed and
 * wrote through to the shared store is a hit on the others (served by the
 * block's holder, over its link), where each rank's own host tier misses
 * it until the rank computed it itself. */
Test(simulate, a_shared_tier_serves_one_ranks_prefix_to_the_others, .timeout = 60)
{
    const char *host[] = {"ranks.serve=3", "serve.router.policy=round_robin",
                          "serve.kvcache.tiers=[{kind: host, size: 2GiB, write: through}]"};
    const char *shared[] = {"ranks.serve=3", "serve.router.policy=round_robin",
                            "serve.kvcache.tiers=[{kind: shared, size: 2GiB, write: through}]"};
    run_output_t local = run_text(shared_prefix, host, 3);
    run_output_t global = run_text(shared_prefix, shared, 3);
    cr_assert_eq(metric(&global, "completed"), 600);
    cr_expect_gt(metric(&global, "hit_rate_with_tiers"), metric(&local, "hit_rate_with_tiers"),
                 "shared %.4f, local %.4f", metric(&global, "hit_rate_with_tiers"),
                 metric(&local, "hit_rate_with_tiers"));
    json_t *tiers = json_object_get(json_object_get(global.summary, "metrics"), "tiers");
    cr_assert_eq(json_array_size(tiers), 3, "one view per rank");
    double peer_hits = 0, own_hits = 0, hits = 0;
    for (size_t r = 0; r < 3; r++) {
        json_t *tier = json_array_get(tiers, r);
        cr_expect_str_eq(json_string_value(json_object_get(tier, "kind")), "shared");
        peer_hits += test_json_number(tier, "shared.peer_shard_hits");
        own_hits += test_json_number(tier, "shared.own_shard_hits");
        hits += test_json_number(tier, "hits");
        cr_expect_eq(json_array_size(json_object_get(tier, "links")), 3, "a link per holder");
    }
    cr_expect_gt(peer_hits, 0, "no rank read a block another rank's shard held");
    cr_expect_eq(own_hits + peer_hits, hits, "every hit served by one shard");
    run_free(&local);
    run_free(&global);
}

Test(simulate, warmup_requests_are_not_measured, .timeout = 60)
{
    const char *sets[] = {"warmup_requests=100"};
    run_output_t output = run_text(shared_prefix, sets, 1);
    cr_assert_eq(metric(&output, "completed"), 600);
    cr_assert_eq(metric(&output, "measured"), 500);
    /* #21: warmup stays out of the hit rate too (the cold start's misses
     * lowered it): it is the measured rows' cached over prompt tokens. */
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/requests.csv", output.dir);
    test_csv_t csv = test_csv_read(path);
    double cached = 0, prompt = 0, all_cached = 0, all_prompt = 0;
    for (size_t r = 0; r < csv.num_rows; r++) {
        double row_cached = test_csv_number(&csv, r, "cached_tokens");
        double row_prompt = test_csv_number(&csv, r, "input_tokens");
        all_cached += row_cached;
        all_prompt += row_prompt;
        if (test_csv_number(&csv, r, "measured") == 1) {
            cached += row_cached;
            prompt += row_prompt;
        }
    }
    test_csv_free(&csv);
    cr_expect_float_eq(metric(&output, "hit_rate"), cached / prompt, 1e-9, "%f vs %f",
                       metric(&output, "hit_rate"), cached / prompt);
    cr_expect_gt(cached / prompt, all_cached / all_prompt, "the warmup held the cold misses");
    run_free(&output);
}

/* kvio_compare (the library behind kvio compare): a bad value in any
 * variant is refused before anything runs (`--vary policy=fcfs,lmp` ran fcfs
 * and then died), naming the variant; with seeds, each variant after the
 * first carries its paired difference from the first, seed by seed. */
Test(simulate, compare_checks_every_variant_first_and_pairs_seeds, .timeout = 120)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", shared_prefix);
    char out[1100], error[1024] = "";
    snprintf(out, sizeof(out), "%s/cmp", dir);
    const char *bad_values[] = {"fcfs", "lmp"};
    kvio_compare_vary_t vary = {.key = "serve.scheduler.policy", .values = bad_values,
                                .count = 2};
    kvio_compare_options_t options = {.source = file, .varies = &vary, .num_varies = 1,
                                      .repeat = 2, .output_dir = out};
    kvio_comparison_t *comparison = NULL;
    cr_assert_eq(kvio_compare(&options, &comparison, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(test_contains(error, "variant policy=lmp:"), "%s", error);
    cr_assert_null(comparison);
    struct stat info;
    cr_assert_neq(stat(out, &info), 0, "a refused compare made %s", out);

    const char *values[] = {"fcfs", "lpm"};
    vary.values = values;
    cr_assert_eq(kvio_compare(&options, &comparison, error, sizeof(error)), KVIO_OK, "%s", error);
    json_t *compare = kvio_comparison_json(comparison);
    kvio_comparison_destroy(comparison);
    const json_t *variants = json_object_get(compare, "variants");
    cr_assert_eq(json_array_size(variants), 2);
    cr_assert_null(json_object_get(json_array_get(variants, 0), "paired_delta_vs_first"));
    const json_t *delta = json_object_get(
        json_object_get(json_array_get(variants, 1), "paired_delta_vs_first"),
        "request_throughput (req/s)");
    cr_assert_not_null(delta);
    /* The delta is the mean of per-seed differences of what each run measured. */
    double differences = 0;
    for (size_t r = 0; r < 2; r++) {
        const json_t *runs[2] = {
            json_array_get(json_object_get(json_array_get(variants, 0), "runs"), r),
            json_array_get(json_object_get(json_array_get(variants, 1), "runs"), r)};
        const json_t *figures[2] = {json_object_get(runs[0], "figures"),
                                    json_object_get(runs[1], "figures")};
        differences += json_number_value(json_object_get(figures[1], "request_throughput (req/s)")) -
                       json_number_value(json_object_get(figures[0], "request_throughput (req/s)"));
    }
    cr_assert_float_eq(test_json_number(delta, "mean"), differences / 2, 1e-9);
    json_decref(compare);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(simulate, compare_runs_each_variant_and_writes_compare_json, .timeout = 120)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", shared_prefix);
    test_run_t run = test_kvio(dir, "compare", file, "--vary", "serve.scheduler.policy=fcfs,lpm",
                               "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "policy=fcfs") && test_contains(run.out, "policy=lpm"),
              "%s", run.out);
    char path[1200];
    snprintf(path, sizeof(path), "%s/cmp/compare.json", dir);
    json_error_t json_error;
    json_t *compare = json_load_file(path, 0, &json_error);
    cr_assert_not_null(compare, "%s", json_error.text);
    cr_assert_eq(json_array_size(json_object_get(compare, "variants")), 2);
    snprintf(path, sizeof(path), "%s/cmp/policy=lpm/summary.json", dir);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary);
    free(summary);
    json_decref(compare);
    test_run_free(&run);
    run = test_kvio(dir, "compare", file, NULL);
    cr_assert_eq(run.status, 2);
    test_run_free(&run);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* #21: compare marks a variant that serves far less than it is offered
 * (its queue grows through the run, so its latencies measure the run's
 * length), in compare.json and under the table. */
Test(simulate, compare_marks_overloaded_variants, .timeout = 120)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", shared_prefix);
    char out[1100], error[1024] = "";
    snprintf(out, sizeof(out), "%s/cmp", dir);
    const char *rates[] = {"5", "2000"};
    const char *sets[] = {"stream.requests=300"};
    kvio_compare_vary_t vary = {.key = "stream.arrival.rate", .values = rates, .count = 2};
    kvio_compare_options_t options = {.source = file, .sets = sets, .num_sets = 1,
                                      .varies = &vary, .num_varies = 1, .repeat = 1,
                                      .output_dir = out};
    kvio_comparison_t *comparison = NULL;
    cr_assert_eq(kvio_compare(&options, &comparison, error, sizeof(error)), KVIO_OK, "%s", error);
    json_t *compare = kvio_comparison_json(comparison);
    const json_t *variants = json_object_get(compare, "variants");
    cr_expect(json_is_false(json_object_get(json_array_get(variants, 0), "overloaded")));
    cr_expect(test_json_true(json_array_get(variants, 1), "overloaded"));
    /* #41 item 1: each variant says whether its runs were valid, and each
     * run lists its warnings. */
    cr_expect(test_json_true(json_array_get(variants, 0), "valid"));
    cr_expect(json_is_false(json_object_get(json_array_get(variants, 1), "valid")));
    const json_t *run = json_array_get(json_object_get(json_array_get(variants, 1), "runs"), 0);
    cr_expect_str_eq(test_json_string(json_array_get(json_object_get(run, "warnings"), 0),
                                      "kind"),
                     "overload");
    char *table = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&table, &length);
    kvio_comparison_print(comparison, stream);
    fclose(stream);
    kvio_comparison_destroy(comparison);
    cr_expect(test_contains(table, "offered_rate (req/s)"), "%s", table);
    /* #52: an overloaded variant is never valid, and the table says why. */
    cr_expect(test_contains(table, "not valid: rate=2000 (overloaded): overloaded: served"),
              "%s", table);
    free(table);
    json_decref(compare);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* #21: cache salts isolate tenants' prefix caches in the engine: one
 * tenant shares as before; a tenant per request (nearly) shares nothing. */
Test(simulate, cache_salts_isolate_tenants_prefix_caches, .timeout = 60)
{
    const char *none[] = {"stream.cache_salts=0"};
    const char *one[] = {"stream.cache_salts=1"};
    const char *many[] = {"stream.cache_salts=100000"};
    run_output_t output = run_text(shared_prefix, none, 1);
    double shared = metric(&output, "hit_rate");
    run_free(&output);
    output = run_text(shared_prefix, one, 1);
    cr_expect_float_eq(metric(&output, "hit_rate"), shared, 1e-12);
    run_free(&output);
    output = run_text(shared_prefix, many, 1);
    double isolated = metric(&output, "hit_rate");
    run_free(&output);
    cr_expect_gt(shared, 0.2, "%f", shared);
    cr_expect_lt(isolated, 0.05, "a salt per request shares no prompt: %f", isolated);
}

/* #21: serve.kvcache.index reaches the engine from the config: under fifo
 * the hash index evicts early prefix blocks whose continuations stay cached
 * (unreachable), the radix index never does, so its hit rate differs; the
 * summary records the index. */
Test(simulate, the_kvcache_index_is_chosen_in_the_config, .timeout = 60)
{
    const char *hash[] = {"serve.kvcache.eviction=fifo", "serve.kvcache.index=hash"};
    const char *radix[] = {"serve.kvcache.eviction=fifo", "serve.kvcache.index=radix"};
    run_output_t output = run_text(shared_prefix, hash, 2);
    double hash_hits = metric(&output, "hit_rate");
    run_free(&output);
    output = run_text(shared_prefix, radix, 2);
    cr_expect_eq(metric(&output, "completed"), 600);
    cr_expect_neq(metric(&output, "hit_rate"), hash_hits);
    const json_t *kvcache = json_object_get(
        json_object_get(json_object_get(output.summary, "config"), "serve"), "kvcache");
    cr_expect_str_eq(test_json_string(kvcache, "index"), "radix");
    run_free(&output);
}

/* serve.kvcache.hybrid (gpt-oss-20b: 12 of 24 layers on a 128-token
 * window): the window layers' blocks come from the same pool, so it fills
 * further. With room to spare both hit the same; in a pool that fills, the
 * window blocks a request lets go as its decode moves on are evicted
 * first, and a prompt whose window blocks are gone hits only what the
 * window still holds (vLLM's hybrid manager does the same). A model
 * without window layers, or swap preemption beside it, is refused with the
 * key named. */
Test(simulate, hybrid_groups_take_pool_blocks_for_the_window_layers, .timeout = 60)
{
    static const char *gpt_oss =
        "name: hybrid\nseed: 5\nmode: simulate\nduration: 30s\n"
        "model: {preset: gpt-oss-20b}\ngpu: {preset: h200}\n"
        "serve:\n  engine: {max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
        "  kvcache: {block_size: 16, blocks: 1600}\n"
        "stream:\n  requests: 200\n  arrival: {process: poisson, rate: 20}\n"
        "  input_tokens: {dist: constant, value: 1100}\n"
        "  output_tokens: {dist: constant, value: 200}\n"
        "  prefix: {system_prompts: {count: 12, tokens: 1024, zipf: 0}}\n";
    static const struct {
        const char *blocks;
        bool spare;
    } pools[] = {{"serve.kvcache.blocks=1600", false}, {"serve.kvcache.blocks=4000", true}};
    for (size_t p = 0; p < 2; p++) {
        const char *off[] = {"serve.kvcache.hybrid=false", pools[p].blocks};
        const char *on[] = {"serve.kvcache.hybrid=true", pools[p].blocks};
        run_output_t output = run_text(gpt_oss, off, 2);
        double usage = metric(&output, "kv_usage_max"), hits = metric(&output, "hit_rate");
        cr_expect_eq(metric(&output, "completed"), 200);
        run_free(&output);
        output = run_text(gpt_oss, on, 2);
        cr_expect_eq(metric(&output, "completed"), 200);
        cr_expect_gt(metric(&output, "kv_usage_max"), usage, "%s", pools[p].blocks);
        if (pools[p].spare)
            cr_expect_eq(metric(&output, "hit_rate"), hits, "%s", pools[p].blocks);
        else
            cr_expect_lt(metric(&output, "hit_rate"), hits * 0.8, "%s", pools[p].blocks);
        run_free(&output);
    }

    static const struct {
        const char *set, *message;
    } refused[] = {
        {"model.preset=llama3-8b", "llama3-8b has 0 of 32 layers on a sliding window"},
        {"serve.engine.preemption=swap", "not with serve.engine.preemption: swap"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        char *dir = test_tmpdir();
        char *file = test_write_file(dir, "w.yaml", gpt_oss);
        const char *sets[] = {"serve.kvcache.hybrid=true", refused[i].set};
        kvio_workload_t workload;
        char error[1024] = "";
        cr_assert_eq(kvio_workload_load(file, sets, 2, &workload, error, sizeof(error)), KVIO_OK,
                     "%s", error);
        char out[1100];
        snprintf(out, sizeof(out), "%s/out", dir);
        kvio_run_options_t options = {.output_dir = out, .quiet = true, .source = file};
        kvio_run_result_t result;
        cr_expect_eq(kvio_run(&workload, &options, &result, error, sizeof(error)),
                     KVIO_ERR_CONFIG, "%s", refused[i].set);
        cr_expect(strstr(error, refused[i].message) != NULL, "%s: %s", refused[i].set, error);
        cr_expect(strstr(error, "serve.kvcache.hybrid") != NULL, "%s", error);
        kvio_workload_free(&workload);
        free(file);
        test_rmtree(dir);
        free(dir);
    }
}

/* serve.kvcache.placement: with each, every tier takes the blocks the
 * pool evicts that it lacks, and passes nothing on; with waterfall (MLPerf Storage's), the first takes them and
 * passes its own evictions to the second, which takes nothing else. The
 * storage block reports both tiers, with MLPerf's names. */
Test(simulate, a_waterfall_passes_evictions_down_the_tiers, .timeout = 60)
{
    const char *each[] = {
        "serve.kvcache.tiers=[{kind: host, size: 64MiB}, {kind: file, size: 1GiB}]"};
    const char *waterfall[] = {
        "serve.kvcache.tiers=[{kind: host, size: 64MiB}, {kind: file, size: 1GiB}]",
        "serve.kvcache.placement=waterfall"};
    run_output_t output = run_text(shared_prefix, each, 1);
    const json_t *tiers = json_object_get(json_object_get(output.summary, "metrics"), "tiers");
    cr_assert_eq(json_array_size(tiers), 2);
    cr_assert_gt(test_json_number(json_array_get(tiers, 0), "puts"), 0);
    cr_expect_gt(test_json_number(json_array_get(tiers, 1), "puts"), 0,
                 "the second tier takes the pool's evictions itself");
    cr_expect_eq(test_json_number(json_array_get(tiers, 0), "demotions"), 0);
    run_free(&output);

    output = run_text(shared_prefix, waterfall, 2);
    tiers = json_object_get(json_object_get(output.summary, "metrics"), "tiers");
    double demotions = test_json_number(json_array_get(tiers, 0), "demotions");
    cr_assert_gt(demotions, 0, "the small host tier passed nothing down");
    cr_expect_eq(test_json_number(json_array_get(tiers, 1), "puts"), demotions);
    const json_t *storage = test_json(output.summary, "metrics.storage");
    cr_expect_eq(json_array_size(test_json(output.summary, "metrics.storage_tiers")), 2);
    /* #54: kvio's per-block P95s under kvio's names, none of kv-cache.py's. */
    const json_t *block = json_object_get(storage, "block_p95_ms");
    cr_expect_not_null(json_object_get(block, "file_write_p95_per_block_ms"));
    cr_expect_not_null(json_object_get(block, "host_read_p95_per_block_ms"));
    cr_expect_null(json_object_get(block, "nvme_write_p95_ms"));
    /* #54: MLPerf's names are kept for what MLPerf defines (kvio mlperf). */
    cr_expect_null(json_object_get(storage, "mlperf"));
    cr_expect_gt(test_json_number(output.summary, "metrics.storage.tokens_moved_per_s"), 0);
    run_free(&output);
}

/* assess: judges the storage block by kv-cache.py's thresholds: with
 * mlperf its four, each where the run has the figure, per block and under
 * kvio's names (not MLPerf's criteria); a threshold the run misses fails
 * the assessment and names itself. */
Test(simulate, assess_judges_the_storage_block_by_mlperf_s_thresholds, .timeout = 60)
{
    const char *sets[] = {
        "serve.kvcache.tiers=[{kind: host, size: 64MiB}, {kind: file, size: 1GiB}]",
        "assess.mlperf=true", "assess.storage_read_p95_ms=0.001"};
    run_output_t output = run_text(shared_prefix, sets, 3);
    const json_t *assessment = json_object_get(output.summary, "assessment");
    cr_assert_not_null(assessment);
    cr_expect_eq(test_json_integer(assessment, "total_count"), 4);
    cr_expect_eq(test_json_integer(assessment, "passed_count"), 3);
    cr_expect(!test_json_true(assessment, "passed"));
    const json_t *criteria = json_object_get(assessment, "criteria");
    const json_t *read = json_array_get(criteria, 1);
    cr_expect_str_eq(test_json_string(read, "name"), "file tier read P95 per block < 0.001 ms");
    cr_expect(!test_json_true(read, "passed"));
    cr_expect_str_eq(test_json_string(json_array_get(criteria, 0), "name"),
                     "file tier write P95 per block < 500 ms");
    cr_expect_str_eq(test_json_string(json_array_get(criteria, 2), "name"),
                     "host tier P95 per block < 150 ms");
    run_free(&output);
    /* Without assess: no assessment. */
    output = run_text(shared_prefix, sets, 1);
    cr_expect_null(json_object_get(output.summary, "assessment"));
    run_free(&output);
}

/* #52/#54: a run too short for assess:'s hit rate says so, with the length
 * it needs, computed from the run: 4 users in conversations of 10 turns
 * (1,000 tokens, 100 more a turn, 5 s of think time) into a host tier. In
 * 20 s each user completes about 3 requests, mostly early turns: the hit
 * rate is under 80 %, and the verdict's too_short names the window of 10
 * turns x 4 users at the run's request throughput. 600 s passes it; a
 * threshold a long run misses (95 %) fails without too_short. */
static const char users_in_conversations[] =
    "name: conversations\nseed: 3\nmode: simulate\n"
    "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
    "serve:\n  kvcache:\n    block_size: 16\n    blocks: 2000\n"
    "    tiers: [{kind: host, size: 4GiB}]\n"
    "stream:\n  users: 4\n"
    "  input_tokens: {dist: constant, value: 1000}\n"
    "  output_tokens: {dist: constant, value: 200}\n"
    "  prefix:\n    sessions:\n      turns: {dist: constant, value: 10}\n"
    "      think_time: {dist: constant, value: 5s}\n"
    "      user_tokens: {dist: constant, value: 100}\n";

/* The too_short warning of a run's verdict, or NULL. */
static const json_t *too_short_warning(const json_t *summary)
{
    const json_t *warnings = json_object_get(summary, "warnings");
    for (size_t w = 0; w < json_array_size(warnings); w++) {
        const json_t *warning = json_array_get(warnings, w);
        if (strcmp(test_json_string(warning, "kind"), "too_short") == 0)
            return warning;
    }
    return NULL;
}

Test(simulate, a_run_too_short_for_the_hit_rate_says_the_length_it_needs, .timeout = 60)
{
    const char *sets[] = {"duration=20s", "assess.hit_rate=0.8"};
    run_output_t output = run_text(users_in_conversations, sets, 2);
    double hit_rate = test_json_number(output.summary, "metrics.hit_rate_with_tiers");
    double throughput = test_json_number(output.summary, "metrics.request_throughput");
    double window = test_json_number(output.summary, "metrics.duration_s");
    cr_assert_lt(hit_rate, 0.8);
    double needs = ceil(10 * 4 / throughput);
    cr_assert_gt(needs, window, "the window %.1f s already holds %.0f s", window, needs);
    const json_t *warning = too_short_warning(output.summary);
    cr_assert_not_null(warning, "no too_short warning");
    cr_expect(!test_json_true(output.summary, "valid"));
    cr_expect_float_eq(test_json_number(warning, "threshold"), needs, 1e-9);
    cr_expect_float_eq(test_json_number(warning, "measured"), window, 1e-9);
    char said[64];
    snprintf(said, sizeof(said), "needs about %.0f s", needs);
    cr_expect(strstr(test_json_string(warning, "message"), said) != NULL, "%s",
              test_json_string(warning, "message"));
    const json_t *criterion = test_json(output.summary, "assessment.criteria.0");
    cr_expect(!test_json_true(criterion, "passed"));
    cr_expect_float_eq(test_json_number(criterion, "too_short_needs_s"), needs, 1e-9);
    run_free(&output);
    /* Long enough: judged, and passed. */
    sets[0] = "duration=600s";
    output = run_text(users_in_conversations, sets, 2);
    cr_expect_gt(test_json_number(output.summary, "metrics.hit_rate_with_tiers"), 0.8);
    cr_expect_null(too_short_warning(output.summary));
    run_free(&output);
    /* Long enough, and under the threshold: a plain FAIL, no too_short. */
    sets[1] = "assess.hit_rate=0.95";
    output = run_text(users_in_conversations, sets, 2);
    cr_expect(!test_json_true(output.summary, "assessment.passed"));
    cr_expect_null(too_short_warning(output.summary));
    cr_expect_null(json_object_get(test_json(output.summary, "assessment.criteria.0"),
                                   "too_short_needs_s"));
    run_free(&output);
}

/* kvio compare over seeds reads the storage block too, and gives each row
 * its median and coefficient of variation (MLPerf Storage reports the
 * median of 3-5 trials; their spread says whether to trust it). */
Test(simulate, compare_gives_storage_rows_their_median_and_spread, .timeout = 120)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", shared_prefix);
    test_run_t run = test_kvio(dir, "compare", file, "--vary",
                               "serve.kvcache.placement=each,waterfall", "--repeat", "3", "--set",
                               "duration=10s", "--set",
                               "serve.kvcache.tiers=[{kind: host, size: 64MiB}, {kind: file, "
                               "size: 1GiB}]",
                               "--format", "json", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    json_t *compare = json_loads(run.out, 0, NULL);
    cr_assert_not_null(compare, "%s", run.out);
    const json_t *variants = json_object_get(compare, "variants");
    cr_assert_eq(json_array_size(variants), 2);
    for (size_t v = 0; v < 2; v++) {
        const json_t *row = json_object_get(
            json_object_get(json_array_get(variants, v), "summary"),
            "tokens moved by the tiers (tok/s)");
        cr_assert_not_null(row, "variant %zu has no storage row", v);
        double mean = test_json_number(row, "mean"), median = test_json_number(row, "median");
        cr_expect_gt(mean, 0);
        cr_expect_gt(median, 0);
        cr_expect_geq(test_json_number(row, "cv"), 0);
        cr_expect_lt(test_json_number(row, "cv"), 1);
    }
    json_decref(compare);
    test_run_free(&run);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* #21: accelerator utilization counted swap and tier I/O as busy (1.000
 * with a 0.2 GB/s host link while most of the run waited on it). It is now
 * compute over wall time (DLIO's AU); the I/O wait is io_stall_fraction.
 * Tier loads inside the iteration (tier_io: sync) stall it. */
Test(simulate, utilization_is_compute_and_io_stalls_are_apart, .timeout = 60)
{
    const char *slow[] = {"serve.kvcache.blocks=2000", "duration=30s",
                          "serve.kvcache.tiers=[{kind: host, size: 64GiB, bandwidth: 0.2e9}]",
                          "serve.kvcache.tier_io=sync"};
    run_output_t output = run_text(shared_prefix, slow, 4);
    double au = metric(&output, "accelerator_utilization");
    double stall = metric(&output, "io_stall_fraction");
    cr_expect_gt(stall, 0.3, "the slow tier's loads are I/O stall: %.3f", stall);
    cr_expect_lt(au + stall, 1.0 + 1e-9, "AU %.3f + stall %.3f", au, stall);
    cr_expect_lt(au, 0.7, "AU %.3f counts compute only", au);
    run_free(&output);
    const char *fast[] = {"duration=30s"};
    output = run_text(shared_prefix, fast, 1);
    cr_expect_eq(metric(&output, "io_stall_fraction"), 0, "no swap, no tier: no I/O stall");
    run_free(&output);
}

/* #21: the offered rate was not reported (chat, labelled 20 req/s,
 * offers 17.1). Constant arrivals at 8 req/s offer exactly 8. */
Test(simulate, the_offered_rate_is_reported, .timeout = 30)
{
    const char *sets[] = {"stream.arrival={process: constant, rate: 8}", "stream.requests=41",
                          "stream.prefix.sessions.turns=1"};
    run_output_t output = run_text(shared_prefix, sets, 3);
    cr_expect_float_eq(metric(&output, "offered_rate"), 8, 1e-6, "%f",
                       metric(&output, "offered_rate"));
    run_free(&output);
}

Test(simulate, request_larger_than_the_cache_is_an_error, .timeout = 30)
{
    const char *sets[] = {"serve.kvcache.blocks=300"};
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", long_context);
    kvio_workload_t workload;
    char error[1024];
    cr_assert_eq(kvio_workload_load(file, sets, 1, &workload, error, sizeof(error)), KVIO_OK);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(strstr(error, "but serve.kvcache holds 300 blocks") != NULL, "%s", error);
    struct stat info;
    cr_assert_neq(stat(out, &info), 0, "refused before the results directory");
    kvio_workload_free(&workload);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(simulate, host_tier_returns_evicted_prefixes, .timeout = 60)
{
    const char *sets[] = {"serve.kvcache.blocks=200",
                          "serve.kvcache.tiers=[{kind: host, size: 8GiB}]"};
    run_output_t output = run_text(shared_prefix, sets, 2);
    cr_assert_gt(metric(&output, "tier_hit_tokens"), 0);
    cr_assert_gt(metric(&output, "hit_rate_with_tiers"), metric(&output, "hit_rate"));
    json_t *tiers = json_object_get(json_object_get(output.summary, "metrics"), "tiers");
    cr_assert_eq(json_array_size(tiers), 1);
    cr_assert_gt(test_json_integer(json_array_get(tiers, 0), "puts"), 0);
    cr_assert_gt(test_json_integer(json_array_get(tiers, 0), "hits"), 0);
    run_free(&output);
}

/* A trainer publishing 1 GiB every 10 steps of 100 ms to two serve ranks
 * answering a busy stream that shares 4 system prompts, on the virtual
 * clock. Its flushes reset the cache as vLLM's reset_running_requests does
 * (reset: preempt_all): under this load the default, vLLM's refusal while
 * blocks are in use, rarely finds a moment to flush. */
static const char *coupled =
    "name: coupled-sim\nseed: 7\nmode: simulate\nduration: 6s\n"
    "ranks: {train: 1, serve: 2}\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "serve:\n  kvcache: {block_size: 16, capacity: 2GiB}\n"
    "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 1GiB\n"
    "  checkpoint: {policy: every_n_steps, every_n_steps: 10}\n"
    "  transport: {kind: ucx, model: {latency: 1ms, bandwidth: 5}}\n"
    "update: {apply: shadow, verify: true, serving: engine, on_activate: {reset: preempt_all}}\n"
    "stream:\n  arrival: {process: poisson, rate: 30}\n"
    "  input_tokens: {dist: uniform, low: 200, high: 1200}\n"
    "  output_tokens: {dist: uniform, low: 20, high: 200}\n"
    "  prefix: {system_prompts: {count: 4, tokens: 512, zipf: 1.0}}\n";

/* Iterations of a rank that start while an update of that rank is between
 * its notification and its activation (updates.csv). */
static int iterations_in_update_windows(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/updates.csv", dir);
    test_csv_t updates = test_csv_read(path);
    snprintf(path, sizeof(path), "%s/out/iterations.csv", dir);
    test_csv_t iterations = test_csv_read(path);
    cr_assert_gt(updates.num_rows, 0);
    int inside = 0;
    for (size_t i = 0; i < iterations.num_rows; i++) {
        double t_ms = test_csv_number(&iterations, i, "time_s") * 1e3;
        for (size_t u = 0; u < updates.num_rows; u++)
            inside += test_csv_number(&updates, u, "rank") ==
                          test_csv_number(&iterations, i, "rank") &&
                      t_ms >= test_csv_number(&updates, u, "t_notified_ms") + 1e-3 &&
                      t_ms < test_csv_number(&updates, u, "t_activated_ms") - 1e-3;
    }
    test_csv_free(&updates);
    test_csv_free(&iterations);
    return inside;
}

/* In simulate mode the serve ranks serve on the versions the modelled
 * updates activate: requests carry them, the loss follows the steps, and
 * apply: stall stops a rank's iterations from notification to activation
 * (shadow does not). */
Test(simulate, coupled_runs_serve_the_versions_updates_activate, .timeout = 120)
{
    const char *stall[] = {"update.apply=stall"};
    for (int apply_stall = 0; apply_stall < 2; apply_stall++) {
        run_output_t output = run_text(coupled, stall, apply_stall ? 1 : 0);
        const json_t *metrics = json_object_get(output.summary, "metrics");
        const json_t *updates = json_object_get(metrics, "model_updates");
        json_int_t versions = test_json_integer(updates, "versions_published");
        cr_assert_geq(versions, 4, "6 s of 1 s steps and publishes: %lld versions",
                      (long long)versions);
        /* Every request carries a version no newer than published, the rank
         * ids are the world's (serve ranks 1 and 2), and some requests were
         * served by updated weights. */
        char path[1200];
        snprintf(path, sizeof(path), "%s/out/requests.csv", output.dir);
        test_csv_t requests = test_csv_read(path);
        size_t updated = 0;
        for (size_t i = 0; i < requests.num_rows; i++) {
            double version = test_csv_number(&requests, i, "model_version");
            double rank = test_csv_number(&requests, i, "rank");
            cr_assert(rank == 1 || rank == 2, "row %zu: rank %g", i + 1, rank);
            cr_assert_leq(version, (double)versions);
            updated += version > 0;
        }
        cr_assert_gt(updated, requests.num_rows / 2, "%zu of %zu requests on updated weights",
                     updated, requests.num_rows);
        /* The loss: Σ over versions of requests × L(step), which only the
         * initial weights (step 1) would make 5.5 per request. */
        const json_t *by_version = json_object_get(metrics, "served_by_version");
        double loss = 0, served = 0;
        for (size_t v = 0; v < json_array_size(by_version); v++) {
            const json_t *entry = json_array_get(by_version, v);
            double requests_v = test_json_number(entry, "requests");
            served += requests_v;
            loss += requests_v * test_json_number(entry, "loss");
        }
        cr_assert_eq(served, (double)requests.num_rows);
        cr_assert_float_eq(metric(&output, "cumulative_inference_loss"), loss, 1e-6 * loss);
        cr_assert_lt(metric(&output, "mean_inference_loss"), 5.5);
        test_csv_free(&requests);
        int inside = iterations_in_update_windows(output.dir);
        if (apply_stall)
            cr_assert_eq(inside, 0, "apply: stall, yet %d iterations started mid-update", inside);
        else
            cr_assert_gt(inside, 0, "apply: shadow serves on while an update is verified");
        run_free(&output);
    }
}

/* #53.7: the adaptive checkpoint policy weighs an update by the rate the
 * run serves, measured (here from the no-update twin's completions up to
 * each step), not by train.checkpoint.serving_rate: it published as many
 * versions at 1 req/s as at 6. The prior, 1000 req/s, appears nowhere. */
Test(simulate, adaptive_checkpoints_follow_the_measured_serving_rate, .timeout = 120)
{
    size_t versions[2];
    const char *rates[] = {"stream.arrival.rate=2", "stream.arrival.rate=30"};
    for (int r = 0; r < 2; r++) {
        const char *sets[] = {"duration=12s", "train.checkpoint.policy=adaptive",
                              "train.checkpoint.loss.a=4", "train.checkpoint.loss.b=0.5",
                              "train.checkpoint.loss.c=1.5", "train.checkpoint.serving_rate=1000",
                              rates[r]};
        run_output_t output = run_text(coupled, sets, sizeof(sets) / sizeof(sets[0]));
        char path[1200];
        snprintf(path, sizeof(path), "%s/out/updates.csv", output.dir);
        test_csv_t updates = test_csv_read(path);
        snprintf(path, sizeof(path), "%s/out/requests.csv", output.dir);
        test_csv_t requests = test_csv_read(path);
        cr_assert_gt(updates.num_rows, 0);
        double served_rps = (double)requests.num_rows / 12.0, last = 0;
        for (size_t u = 0; u < updates.num_rows; u++) {
            cr_assert_eq(test_csv_number(&updates, u, "serving_rate_measured"), 1,
                         "row %zu: the decision used the prior", u + 1);
            last = test_csv_number(&updates, u, "serving_rate_rps");
            cr_assert_lt(last, 100, "row %zu: %g req/s is not what was served", u + 1, last);
        }
        /* Late in the run the rate is the steady one served. */
        cr_assert(last > 0.5 * served_rps && last < 1.5 * served_rps,
                  "last decision's rate %g req/s, served %g req/s over the run", last,
                  served_rps);
        versions[r] = (size_t)test_json_integer(
            json_object_get(json_object_get(output.summary, "metrics"), "model_updates"),
            "versions_published");
        test_csv_free(&updates);
        test_csv_free(&requests);
        run_free(&output);
    }
    cr_assert_gt(versions[1], 2 * versions[0], "%zu versions at 30 req/s, %zu at 2 req/s",
                 versions[1], versions[0]);
}

/* Simulate is deterministic with updates too: byte-identical files. */
Test(simulate, coupled_runs_are_byte_identical_for_a_seed, .timeout = 120)
{
    run_output_t first = run_text(coupled, NULL, 0), second = run_text(coupled, NULL, 0);
    const char *files[] = {"requests.csv", "iterations.csv", "updates.csv"};
    for (size_t f = 0; f < 3; f++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/out/%s", first.dir, files[f]);
        char *a = test_read_file(path);
        snprintf(path, sizeof(path), "%s/out/%s", second.dir, files[f]);
        char *b = test_read_file(path);
        cr_assert(a != NULL && b != NULL && strcmp(a, b) == 0, "%s differs", files[f]);
        free(a);
        free(b);
    }
    run_free(&first);
    run_free(&second);
}

/* update.on_activate.cache on the coupled run: flush (the default) never
 * hits KV of older weights, keep does and counts it, and the cache pays for
 * the flush in hit rate; abort recomputes the requests in flight. */
Test(simulate, activations_flush_or_keep_the_cache_and_abort_or_keep_requests, .timeout = 120)
{
    const char *keep[] = {"update.on_activate.cache=keep"};
    const char *abort_in_flight[] = {"update.in_flight=abort"};
    run_output_t flushed = run_text(coupled, NULL, 0), kept = run_text(coupled, keep, 1),
                 aborted = run_text(coupled, abort_in_flight, 1);
    const json_t *effects[3];
    const run_output_t *runs[3] = {&flushed, &kept, &aborted};
    for (int i = 0; i < 3; i++) {
        effects[i] = json_object_get(json_object_get(runs[i]->summary, "metrics"),
                                     "update_effects");
        cr_assert_not_null(effects[i], "run %d has no update_effects", i);
        cr_assert_geq(test_json_integer(effects[i], "versions_activated"), 8,
                      "4 versions or more on each of 2 ranks");
    }
#define EFFECT(i, key) json_integer_value(json_object_get(effects[i], key))
    cr_assert_eq(EFFECT(0, "stale_hit_tokens"), 0);
    cr_assert_gt(EFFECT(0, "cache_flushed_blocks"), 0);
    cr_assert_gt(EFFECT(1, "stale_hit_tokens"), 0);
    cr_assert_eq(EFFECT(1, "cache_flushed_blocks"), 0);
    /* The flush changes requests, so its cost's interval has a width. */
    cr_expect_gt(test_json_number(flushed.summary, "metrics.update_cost.hit_rate.delta_ci95"), 0);
    /* The flush preempts the running requests (reset: preempt_all): none
     * runs on across it; with keep they do. */
    cr_assert_eq(EFFECT(0, "mixed_version_tokens"), 0);
    cr_assert_gt(EFFECT(0, "reset_preempted_requests"), 0);
    cr_assert_eq(EFFECT(0, "resets"), EFFECT(0, "versions_activated"));
    cr_assert_gt(EFFECT(1, "mixed_version_tokens"), 0, "keep: requests run on across updates");
    cr_assert_gt(EFFECT(2, "update_aborted_requests"), 0);
    cr_assert_gt(EFFECT(2, "update_recomputed_tokens"), 0);
#undef EFFECT
    cr_assert_lt(metric(&flushed, "hit_rate"), metric(&kept, "hit_rate"));
    run_free(&flushed);
    run_free(&kept);
    run_free(&aborted);
}

/* update_interference: the windows around each activation, from the run's
 * files. With a flush the prefix hit rate after an update falls below the
 * one before it (the shared prompts must be recomputed); keep leaves it. */
Test(simulate, interference_windows_show_what_a_flush_costs, .timeout = 120)
{
    /* The flush at once, the requests running on (kvio's reset: running). */
    const char *flush[] = {"update.interference_window=500ms", "update.on_activate.reset=running"};
    const char *keep[] = {"update.interference_window=500ms", "update.on_activate.cache=keep"};
    run_output_t flushed = run_text(coupled, flush, 2), kept = run_text(coupled, keep, 2);
    const json_t *windows[2] = {
        json_object_get(json_object_get(flushed.summary, "metrics"), "update_interference"),
        json_object_get(json_object_get(kept.summary, "metrics"), "update_interference")};
    for (int i = 0; i < 2; i++) {
        cr_assert_not_null(windows[i]);
        cr_assert_float_eq(test_json_number(windows[i], "window_s"), 0.5,
                           1e-9);
        cr_assert_gt(test_json_integer(windows[i], "updates_measured"), 4);
        cr_assert_gt(test_json_number(windows[i], "ttft_p99_ratio"), 0);
    }
    double before = test_json_number(windows[0], "hit_rate_before");
    double after = test_json_number(windows[0], "hit_rate_after");
    cr_assert_lt(after, before, "flush: hit rate %.3f after vs %.3f before", after, before);
    cr_assert_gt(test_json_number(windows[1], "hit_rate_after"), after,
                 "keep keeps more of the cache after an update than flush");
    /* updates.csv carries each update's ratios. */
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/updates.csv", flushed.dir);
    test_csv_t updates = test_csv_read(path);
    size_t with_ratios = 0;
    for (size_t i = 0; i < updates.num_rows; i++)
        with_ratios += test_csv_number(&updates, i, "ttft_p99_ratio") > 0 &&
                       test_csv_number(&updates, i, "hit_rate_after") >= 0;
    cr_assert_gt(with_ratios, updates.num_rows / 2);
    test_csv_free(&updates);
    run_free(&flushed);
    run_free(&kept);
}

/* update.in_flight: wait: a rank stops admitting when a version is ready,
 * lets its running requests finish, then activates: every request an older
 * version served on that rank finished by then, the activation comes no
 * earlier than keep's, and the drain is the rank's inference stall. */
Test(simulate, waiting_for_requests_in_flight_drains_before_an_activation, .timeout = 120)
{
    const char *wait[] = {"update.in_flight=wait"};
    run_output_t kept = run_text(coupled, NULL, 0), waited = run_text(coupled, wait, 1);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/updates.csv", waited.dir);
    test_csv_t updates = test_csv_read(path);
    snprintf(path, sizeof(path), "%s/out/updates.csv", kept.dir);
    test_csv_t kept_updates = test_csv_read(path);
    snprintf(path, sizeof(path), "%s/out/requests.csv", waited.dir);
    test_csv_t requests = test_csv_read(path);
    cr_assert_eq(updates.num_rows, kept_updates.num_rows);
    size_t later = 0;
    for (size_t u = 0; u < updates.num_rows; u++) {
        double version = test_csv_number(&updates, u, "version");
        double rank = test_csv_number(&updates, u, "rank");
        double activated_s = test_csv_number(&updates, u, "t_activated_ms") / 1e3;
        double kept_s = test_csv_number(&kept_updates, u, "t_activated_ms") / 1e3;
        cr_assert_geq(activated_s, kept_s - 1e-9, "update %zu activated before keep's", u + 1);
        later += activated_s > kept_s + 1e-9;
        for (size_t i = 0; i < requests.num_rows; i++)
            if (test_csv_number(&requests, i, "rank") == rank &&
                test_csv_number(&requests, i, "model_version") < version)
                cr_assert_leq(test_csv_number(&requests, i, "finish_s"), activated_s + 1e-6,
                              "request row %zu (version %g) ran past version %g's activation "
                              "on rank %g", i + 1, test_csv_number(&requests, i, "model_version"),
                              version, rank);
    }
    cr_assert_gt(later, 0, "no update waited for a drain");
    const json_t *model = json_object_get(json_object_get(waited.summary, "metrics"),
                                          "model_updates");
    cr_assert_gt(test_json_number(model, "inference_stall_ms.drain"), 0);
    const json_t *effects = json_object_get(json_object_get(waited.summary, "metrics"),
                                            "update_effects");
    cr_assert_eq(test_json_integer(effects, "mixed_version_tokens"), 0);
    test_csv_free(&updates);
    test_csv_free(&kept_updates);
    test_csv_free(&requests);
    run_free(&kept);
    run_free(&waited);
}

/* update.colocated: while an update is on its way in, the KV pool lends its
 * bytes (true: 1.8 GiB of a 2 GiB pool) or is released whole (release):
 * requests are preempted for it; without colocation none are. */
Test(simulate, colocated_updates_take_kv_memory_while_they_arrive, .timeout = 120)
{
    const char *shrink[] = {"update.colocated=true", "train.bytes=1800MiB"};
    const char *release[] = {"update.colocated=release"};
    run_output_t apart = run_text(coupled, NULL, 0), shrunk = run_text(coupled, shrink, 2),
                 released = run_text(coupled, release, 1);
    json_int_t preempted[3];
    const run_output_t *runs[3] = {&apart, &shrunk, &released};
    for (int i = 0; i < 3; i++) {
        const json_t *effects = json_object_get(json_object_get(runs[i]->summary, "metrics"),
                                                "update_effects");
        preempted[i] = test_json_integer(effects, "colocated_preemptions");
        cr_assert(test_json_true(runs[i]->summary, "complete"));
    }
    cr_assert_eq(preempted[0], 0);
    cr_assert_gt(preempted[1], 0, "1.8 GiB updates into a 2 GiB pool preempted nothing");
    cr_assert_gt(preempted[2], 0, "releasing the pool preempted nothing");
    cr_assert_geq(metric(&released, "preemptions"), metric(&apart, "preemptions") + preempted[2]);
    run_free(&apart);
    run_free(&shrunk);
    run_free(&released);
}

/* The update-interference preset, compared across cache modes: the table
 * has the update cost rows (absent for a run without updates), measured
 * against one twin the variants share (the cache mode changes only what
 * updates do), and they show what flush costs against keep: hit rate and
 * TTFT lost against the twin, where keep loses nothing. */
Test(simulate, compare_shows_what_each_cache_mode_costs_after_an_update, .timeout = 120)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "update-interference", "--set", "duration=60s",
                               "--vary", "update.on_activate.cache=flush,keep", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "update cost: hit rate"), "%s", run.out);
    cr_assert(test_contains(run.out, "update cost: ttft p99 ms"), "%s", run.out);
    cr_assert(test_contains(run.out, "stale_hit_tokens"), "%s", run.out);
    char path[1200];
    snprintf(path, sizeof(path), "%s/cmp/compare.json", dir);
    json_error_t json_error;
    json_t *compare = json_load_file(path, 0, &json_error);
    cr_assert_not_null(compare, "%s", json_error.text);
    cr_assert_eq(test_json_integer(compare, "controls.served"), 1, "one twin for both");
    cr_assert_eq(test_json_integer(compare, "controls.shared"), 1);
    double hit_cost[2], ttft_cost[2];
    for (size_t v = 0; v < 2; v++) {
        const json_t *summary = json_object_get(json_array_get(json_object_get(compare,
                                                                               "variants"), v),
                                                "summary");
        hit_cost[v] = test_json_number(json_object_get(summary, "update cost: hit rate"), "mean");
        ttft_cost[v] = test_json_number(json_object_get(summary, "update cost: ttft p99 ms"),
                                        "mean");
    }
    cr_assert_lt(hit_cost[0], 0, "flush lost no hits against the twin");
    cr_assert_geq(ttft_cost[0], 0);
    cr_assert_eq(hit_cost[1], 0, "keep: %g", hit_cost[1]);
    cr_assert_eq(ttft_cost[1], 0, "keep: %g", ttft_cost[1]);
    json_decref(compare);
    test_run_free(&run);
    char *file = test_write_file(dir, "w.yaml", shared_prefix);
    run = test_kvio(dir, "compare", file, "--vary", "serve.scheduler.policy=fcfs,lpm", "-o",
                    "plain", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(!test_contains(run.out, "update cost"), "%s", run.out);
    test_run_free(&run);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* Reliability (#22.9): a cost model whose iterations overflow the clock
 * (linear c0 = 1e12 ms) ended "complete" with 0 of 17 requests done (signed
 * overflow); one giving no time (negative c0) or a GPU of 1 FLOP/s read as
 * "needs more KV blocks". Each names the cost model now. */
Test(simulate, cost_models_out_of_range_are_named_not_overflowed, .timeout = 120)
{
    const char *cases[][2] = {{"cost.kind=linear", "cost.c0=1e12"},
                              {"cost.kind=linear", "cost.c0=-5"},
                              {"gpu.flops=1", "gpu.flops=1"}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char *dir = test_tmpdir();
        char *file = test_write_file(dir, "w.yaml", shared_prefix);
        kvio_workload_t workload;
        char error[1024];
        kvio_status_t loaded = kvio_workload_load(file, cases[c], 2, &workload, error,
                                                  sizeof(error));
        if (strcmp(cases[c][1], "cost.c0=-5") == 0) {
            /* A negative coefficient is refused by the schema now (#55). */
            cr_assert_eq(loaded, KVIO_ERR_CONFIG, "case %zu", c);
            cr_assert(test_contains(error, "cost.c0: -5 is below the minimum 0"), "%s", error);
            free(file);
            test_rmtree(dir);
            free(dir);
            continue;
        }
        cr_assert_eq(loaded, KVIO_OK, "%s", error);
        char out[1100];
        snprintf(out, sizeof(out), "%s/out", dir);
        kvio_run_options_t options = {.output_dir = out, .quiet = true};
        kvio_run_result_t result;
        cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)),
                     KVIO_ERR_CONFIG, "case %zu", c);
        /* Refused before the run now, as by validate (#40 item 11). */
        cr_assert(test_contains(error, "s by the cost model; it must take more than 0") &&
                      !test_contains(error, "KV blocks"), "case %zu: %s", c, error);
        kvio_workload_free(&workload);
        free(file);
        test_rmtree(dir);
        free(dir);
    }
}

/* ---------- the updates' cost against the no-update twin (#34) ---------- */

/* requests.csv of a run with its control columns, and the cost. */
static const json_t *update_cost(const run_output_t *run)
{
    const json_t *cost = json_object_get(json_object_get(run->summary, "metrics"),
                                         "update_cost");
    cr_assert_not_null(cost, "no update_cost in summary.json");
    cr_assert_str_eq(test_json_string(cost, "control"), "twin");
    return cost;
}

static test_csv_t read_csv(const run_output_t *run, const char *name)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/%s", run->dir, name);
    return test_csv_read(path);
}

/* The earliest activation on rank (ms since t0) of updates.csv. */
static double first_activation_ms(const test_csv_t *updates, double rank)
{
    double first = INFINITY;
    for (size_t u = 0; u < updates->num_rows; u++)
        if (test_csv_number(updates, u, "rank") == rank &&
            test_csv_number(updates, u, "t_activated_ms") < first)
            first = test_csv_number(updates, u, "t_activated_ms");
    return first;
}

/* cache: keep with a shadow transport never touches serving: the twin and
 * the run are the same request by request, and the printed cost is 0. */
Test(simulate, keeping_the_cache_costs_every_request_exactly_nothing, .timeout = 120)
{
    const char *keep[] = {"update.on_activate.cache=keep"};
    run_output_t kept = run_text(coupled, keep, 1);
    const json_t *cost = update_cost(&kept);
    cr_assert_gt(test_json_integer(cost, "requests_paired"), 100);
    cr_assert_eq(test_json_integer(cost, "requests_unpaired"), 0);
    cr_assert_eq(test_json_integer(cost, "requests_affected"), 0);
    /* #53: a placebo's cost is 0 and its interval (a paired bootstrap
     * over the requests) contains it: 0 +- 0. */
    const char *zero[] = {"ttft_p99_ms.delta", "tpot_p99_ms.delta", "e2el_p99_ms.delta",
                          "hit_rate.delta", "ttft_delta_ms.max", "e2el_delta_ms.p99",
                          "ttft_p99_ms.delta_ci95", "tpot_p99_ms.delta_ci95",
                          "hit_rate.delta_ci95"};
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
        cr_expect_eq(test_json_number(cost, zero[i]), 0, "%s", zero[i]);
    cr_expect_eq(test_json_number(kept.summary, "metrics.model_updates.stall_ms_per_update.max"),
                 0);
    test_csv_t requests = read_csv(&kept, "requests.csv");
    const char *columns[] = {"ttft_delta_ms", "tpot_delta_ms", "e2el_delta_ms",
                             "max_itl_delta_ms", "cached_tokens_delta",
                             "recomputed_tokens_delta"};
    for (size_t i = 0; i < requests.num_rows; i++)
        for (size_t c = 0; c < sizeof(columns) / sizeof(columns[0]); c++)
            cr_assert_eq(test_csv_number(&requests, i, columns[c]), 0, "row %zu: %s", i + 1,
                         columns[c]);
    test_csv_free(&requests);
    run_free(&kept);
    /* What kvio prints says so. */
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", coupled);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", file, "--set", "update.on_activate.cache=keep", "-o",
                               out, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "TTFT p99 vs control"), "%s", run.out);
    cr_expect(test_contains(run.out, "+0.00 ms (+- 0)"), "%s", run.out);
    cr_expect(test_contains(run.out, "+0.000 ms (+- 0)"), "%s", run.out);
    cr_expect(test_contains(run.out, "hit rate vs control"), "%s", run.out);
    cr_expect(test_contains(run.out, "+0.00 pts (+- 0)"), "%s", run.out);
    cr_expect(test_contains(run.out, "requests changed"), "%s", run.out);
    cr_expect(test_contains(run.out, " 0 (0.0 % of the paired), +0 tokens recomputed"), "%s",
              run.out);
    cr_expect(!test_contains(run.out, "trend"), "%s", run.out);
    test_run_free(&run);
    test_rmtree(dir);
    free(file);
    free(dir);
}

/* cache: flush: the hit rate falls against the twin and TTFT does not
 * fall; only requests admitted after an activation on their rank lose
 * hits (their first token comes after it), and only requests still
 * running at it carry any difference (before it the two runs are one:
 * a request decoding across it slows beside the recomputed prefixes). */
Test(simulate, a_flush_costs_hits_only_after_an_activation, .timeout = 120)
{
    run_output_t flushed = run_text(coupled, NULL, 0);
    const json_t *cost = update_cost(&flushed);
    cr_assert_lt(test_json_number(cost, "hit_rate.delta"), 0);
    cr_assert_geq(test_json_number(cost, "ttft_p99_ms.delta"), 0);
    cr_assert_geq(test_json_number(cost, "ttft_delta_ms.mean"), 0);
    cr_assert_gt(test_json_integer(cost, "requests_affected"), 0);
    cr_assert_lt(test_json_integer(cost, "cached_tokens_delta"), 0);
    test_csv_t requests = read_csv(&flushed, "requests.csv");
    test_csv_t updates = read_csv(&flushed, "updates.csv");
    size_t changed = 0, lost_hits = 0;
    for (size_t i = 0; i < requests.num_rows; i++) {
        double rank = test_csv_number(&requests, i, "rank");
        double first_token_ms = test_csv_number(&requests, i, "first_token_s") * 1e3;
        double finish_ms = test_csv_number(&requests, i, "finish_s") * 1e3;
        double activated_ms = first_activation_ms(&updates, rank);
        bool any = test_csv_number(&requests, i, "ttft_delta_ms") != 0 ||
                   test_csv_number(&requests, i, "e2el_delta_ms") != 0 ||
                   test_csv_number(&requests, i, "cached_tokens_delta") != 0;
        changed += any;
        lost_hits += test_csv_number(&requests, i, "cached_tokens_delta") < 0;
        if (any)
            cr_assert_geq(finish_ms, activated_ms - 1e-3,
                          "row %zu changed, finished before rank %g's first activation", i + 1,
                          rank);
        if (test_csv_number(&requests, i, "cached_tokens_delta") != 0)
            cr_assert_geq(first_token_ms, activated_ms - 1e-3,
                          "row %zu lost hits, admitted before rank %g's first activation",
                          i + 1, rank);
    }
    cr_assert_eq(changed, (size_t)test_json_integer(cost, "requests_affected"));
    cr_assert_gt(lost_hits, 0);
    /* Each update's share: its requests add up to the run's. */
    double affected = 0;
    for (size_t u = 0; u < updates.num_rows; u++)
        affected += test_csv_number(&updates, u, "affected_requests");
    cr_assert_eq(affected + (double)test_json_integer(cost, "requests_unattributed"),
                 (double)changed);
    test_csv_free(&requests);
    test_csv_free(&updates);
    run_free(&flushed);
}

/* in_flight: wait: requests that arrived on a rank while it drained for an
 * update waited for the activation (a positive TTFT difference); requests
 * that finished before the rank's first update carry none. */
Test(simulate, waiting_for_a_drain_costs_the_requests_that_arrive_during_it, .timeout = 120)
{
    const char *wait[] = {"update.in_flight=wait"};
    run_output_t waited = run_text(coupled, wait, 1);
    const json_t *cost = update_cost(&waited);
    (void)cost;
    cr_assert_gt(test_json_number(waited.summary, "metrics.model_updates.inference_stall_ms.drain"),
                 0);
    test_csv_t requests = read_csv(&waited, "requests.csv");
    test_csv_t updates = read_csv(&waited, "updates.csv");
    size_t during = 0;
    for (size_t i = 0; i < requests.num_rows; i++) {
        double rank = test_csv_number(&requests, i, "rank");
        double arrival_ms = test_csv_number(&requests, i, "arrival_s") * 1e3;
        double ttft_delta = test_csv_number(&requests, i, "ttft_delta_ms");
        double first_ready_ms = INFINITY;
        for (size_t u = 0; u < updates.num_rows; u++) {
            if (test_csv_number(&updates, u, "rank") != rank)
                continue;
            double activated = test_csv_number(&updates, u, "t_activated_ms");
            double drained_from = activated - test_csv_number(&updates, u, "stall_drain_ms");
            if (test_csv_number(&updates, u, "t_ready_ms") < first_ready_ms)
                first_ready_ms = test_csv_number(&updates, u, "t_ready_ms");
            if (arrival_ms > drained_from + 1e-3 && arrival_ms < activated - 1e-3) {
                during++;
                cr_assert_gt(ttft_delta, 0, "row %zu arrived during rank %g's drain "
                             "(%.3f to %.3f ms) and lost nothing", i + 1, rank, drained_from,
                             activated);
            }
        }
        if (test_csv_number(&requests, i, "finish_s") * 1e3 < first_ready_ms)
            cr_assert_eq(ttft_delta, 0, "row %zu finished before any update", i + 1);
    }
    cr_assert_gt(during, 0, "no request arrived during a drain");
    test_csv_free(&requests);
    test_csv_free(&updates);
    run_free(&waited);
}

/* colocated: release: a rank runs no iteration while its pool is the
 * update's; the stall it reports per update covers that lost serving time
 * (each gap between iterations, while requests waited, inside the update). */
Test(simulate, a_released_pool_reports_the_serving_time_it_lost, .timeout = 120)
{
    const char *release[] = {"update.colocated=release"};
    run_output_t released = run_text(coupled, release, 1);
    const json_t *cost = update_cost(&released);
    (void)cost;
    const json_t *model = test_json(released.summary, "metrics.model_updates");
    cr_assert_gt(test_json_number(model, "inference_stall_ms.release"), 0);
    cr_assert_gt(test_json_number(model, "stall_ms_per_update.p50"), 0);
    /* #59 item 13: the released pool's cached blocks are gone, and said so
     * (cache_flushed_blocks read 0). */
    cr_assert_gt(test_json_number(released.summary, "metrics.update_effects.cache_flushed_blocks"),
                 0);
    test_csv_t updates = read_csv(&released, "updates.csv");
    test_csv_t iterations = read_csv(&released, "iterations.csv");
    /* The run's inference stall is the updates', the releases summed (it
     * read 0 when the lent pool's stall went uncounted). */
    double released_ms = 0;
    for (size_t u = 0; u < updates.num_rows; u++)
        released_ms += test_csv_number(&updates, u, "stall_release_ms");
    cr_expect_float_eq(test_json_number(model, "inference_stall_ms.update"), released_ms,
                       1e-3 * updates.num_rows);
    cr_expect_float_eq(test_json_number(model, "inference_stall_ms.release"), released_ms,
                       1e-3 * updates.num_rows);
    for (size_t u = 0; u < updates.num_rows; u++) {
        double rank = test_csv_number(&updates, u, "rank");
        double from = test_csv_number(&updates, u, "t_xfer_start_ms");
        double to = test_csv_number(&updates, u, "t_activated_ms");
        double lost = 0, previous_end = NAN;
        bool waiting = false;
        for (size_t i = 0; i < iterations.num_rows; i++) {
            if (test_csv_number(&iterations, i, "rank") != rank)
                continue;
            double start = test_csv_number(&iterations, i, "time_s") * 1e3;
            if (waiting && start > from && previous_end < to)
                lost += fmin(start, to) - fmax(previous_end, from);
            previous_end = start + test_csv_number(&iterations, i, "duration_ms");
            waiting = test_csv_number(&iterations, i, "running") +
                          test_csv_number(&iterations, i, "waiting") >
                      0;
        }
        cr_assert_geq(test_csv_number(&updates, u, "stall_release_ms"), lost - 1e-3,
                      "update %zu on rank %g: %.3f ms of serving lost, %.3f reported", u + 1,
                      rank, lost, test_csv_number(&updates, u, "stall_release_ms"));
    }
    test_csv_free(&updates);
    test_csv_free(&iterations);
    run_free(&released);
}

/* The bytes of each hop: a sequential fan-out puts every serve rank's copy
 * from the trainer, a chain one and forwards the other (updates.csv's
 * source, summary.json's wire_bytes_*). */
Test(simulate, a_chain_forwards_what_a_sequential_fanout_puts_from_the_trainer, .timeout = 120)
{
    const char *chain[] = {"train.transport.fanout=chain"};
    run_output_t sequential = run_text(coupled, NULL, 0), chained = run_text(coupled, chain, 1);
    double bytes = test_json_number(sequential.summary, "metrics.model_updates.bytes");
    double updates = test_json_number(sequential.summary,
                                      "metrics.model_updates.updates_received");
    cr_assert_gt(updates, 0);
    cr_expect_eq(metric(&sequential, "model_updates.wire_bytes_from_trainer"), updates * bytes);
    cr_expect_eq(metric(&sequential, "model_updates.wire_bytes_forwarded"), 0);
    test_csv_t rows = read_csv(&chained, "updates.csv");
    double to_rank[3] = {0, 0, 0};
    for (size_t u = 0; u < rows.num_rows; u++) {
        double rank = test_csv_number(&rows, u, "rank");
        cr_assert(rank == 1 || rank == 2);
        to_rank[(int)rank] += test_csv_number(&rows, u, "bytes");
        cr_expect_eq(test_csv_number(&rows, u, "source"), rank - 1,
                     "row %zu: rank 1 takes it from the trainer (0), rank 2 from rank 1", u + 1);
    }
    cr_expect_gt(to_rank[2], 0);
    cr_expect_eq(metric(&chained, "model_updates.wire_bytes_from_trainer"), to_rank[1]);
    cr_expect_eq(metric(&chained, "model_updates.wire_bytes_forwarded"), to_rank[2]);
    test_csv_free(&rows);
    run_free(&sequential);
    run_free(&chained);
}

/* Without a control, what serving saw while updates arrived: every gap
 * between two decoding iterations of a rank is during an update (its first
 * byte to its activation) or outside, never both, never lost. */
Test(simulate, decode_gaps_split_into_during_and_outside_updates, .timeout = 120)
{
    run_output_t run = run_text(coupled, NULL, 0);
    const json_t *during = test_json(run.summary, "metrics.update_interference.during_updates");
    double gaps_during = test_json_number(during, "decode_gap_ms.during.gaps");
    double gaps_outside = test_json_number(during, "decode_gap_ms.outside.gaps");
    cr_assert_gt(gaps_during, 0, "no decode gap overlapped an update");
    cr_assert_gt(gaps_outside, gaps_during);
    test_csv_t iterations = read_csv(&run, "iterations.csv");
    double pairs = 0, last_decode[3] = {0, 0, 0};
    for (size_t i = 0; i < iterations.num_rows; i++) {
        int rank = (int)test_csv_number(&iterations, i, "rank");
        cr_assert(rank == 1 || rank == 2);
        double decode = test_csv_number(&iterations, i, "decode_seqs");
        pairs += last_decode[rank] > 0 && decode > 0;
        last_decode[rank] = decode;
    }
    cr_assert_eq(gaps_during + gaps_outside, pairs);
    cr_assert_geq(test_json_number(during, "itl_ms.during.p99"),
                  test_json_number(during, "itl_ms.during.p50"));
    test_csv_free(&iterations);
    run_free(&run);
}

/* #35: batch limits left at 0 take vLLM's for the GPU class, and
 * summary.json's scheduling says what they became. */
Test(simulate, batch_limits_default_to_vllms_for_the_gpu, .timeout = 60)
{
    const char *h200[] = {"serve.engine.max_num_seqs=0", "serve.engine.max_num_batched_tokens=0",
                          "stream.requests=50"};
    run_output_t output = run_text(shared_prefix, h200, 3);
    const json_t *scheduling = json_object_get(output.summary, "scheduling");
    cr_expect_eq(test_json_integer(scheduling, "max_num_seqs"), 1024);
    cr_expect_eq(test_json_integer(scheduling, "max_num_batched_tokens"), 8192);
    cr_expect_str_eq(test_json_string(scheduling, "profile"), "vllm");
    run_free(&output);
    const char *a100[] = {"serve.engine.max_num_seqs=0", "serve.engine.max_num_batched_tokens=0",
                          "stream.requests=50", "gpu.preset=a100-80g"};
    output = run_text(shared_prefix, a100, 4);
    scheduling = json_object_get(output.summary, "scheduling");
    cr_expect_eq(test_json_integer(scheduling, "max_num_seqs"), 256);
    cr_expect_eq(test_json_integer(scheduling, "max_num_batched_tokens"), 2048);
    /* The engine ran with them: no iteration took more than 2,048 tokens. */
    test_csv_t iterations = read_csv(&output, "iterations.csv");
    cr_assert_gt(iterations.num_rows, 0);
    for (size_t row = 0; row < iterations.num_rows; row++)
        cr_expect_leq(test_csv_number(&iterations, row, "prefill_tokens") +
                          test_csv_number(&iterations, row, "decode_seqs"),
                      2048);
    test_csv_free(&iterations);
    run_free(&output);
}

/* #35: speculative decoding on the virtual clock. With 3 drafts a step at
 * 0.7 acceptance a step accepts 0.7 + 0.49 + 0.343 = 1.53 of 3 drafts on
 * average (0.511), and TPOT falls; with 0 acceptance nothing is gained and
 * the drafts and their verification cost time: TPOT rises. */
/* 60 requests of 200 output tokens at 4 req/s, with lookahead drafts at
 * acceptance (lookahead "0": off). */
static run_output_t run_spec(const char *lookahead, const char *acceptance)
{
    char drafts[64], accept[64];
    snprintf(drafts, sizeof(drafts), "serve.engine.num_lookahead_tokens=%s", lookahead);
    snprintf(accept, sizeof(accept), "serve.engine.spec_acceptance=%s", acceptance);
    const char *sets[] = {"stream.output_tokens={dist: constant, value: 200}",
                          "stream.requests=60", "stream.arrival={process: poisson, rate: 4}",
                          drafts, accept};
    return run_text(shared_prefix, sets, 5);
}

Test(simulate, speculative_decoding_trades_drafts_for_tokens, .timeout = 60)
{
    run_output_t output = run_spec("0", "0.7");
    double tpot = test_json_number(output.summary, "metrics.tpot_ms.p50");
    cr_expect_null(json_object_get(json_object_get(output.summary, "metrics"), "spec_decode"));
    run_free(&output);
    output = run_spec("3", "0.7");
    double rate = test_json_number(output.summary, "metrics.spec_decode.acceptance_rate");
    cr_expect_float_eq(rate, (0.7 + 0.49 + 0.343) / 3, 0.03, "acceptance %.3f", rate);
    double spec_tpot = test_json_number(output.summary, "metrics.tpot_ms.p50");
    cr_expect_lt(spec_tpot, tpot * 0.7, "TPOT p50 %.2f ms with drafts, %.2f without", spec_tpot,
                 tpot);
    cr_expect_eq(metric(&output, "completed"), 60);
    run_free(&output);
    output = run_spec("3", "0");
    double wasted_tpot = test_json_number(output.summary, "metrics.tpot_ms.p50");
    cr_expect_gt(wasted_tpot, tpot, "TPOT p50 %.2f ms when every draft fails, %.2f without",
                 wasted_tpot, tpot);
    run_free(&output);
}

/* The largest resident size of this test's finished children, in KiB. */
static long children_max_rss_kib(void)
{
    struct rusage usage;
    cr_assert_eq(getrusage(RUSAGE_CHILDREN, &usage), 0);
    return usage.ru_maxrss;
}

/* A simulate run's memory does not grow with its length: requests.csv and
 * iterations.csv are written as the run makes them (a 1-million-request
 * stream held every iteration until the end, about 0.9 KB a request, and
 * reached 0.9 GB). Ten times the requests stay within a few MiB. */
Test(simulate, memory_does_not_grow_with_the_number_of_requests, .timeout = 300)
{
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer keeps freed memory in quarantine: its RSS grows. */
    cr_skip_test("resident memory is AddressSanitizer's under it");
#endif
    char *dir = test_tmpdir();
    const char *sizes[] = {"stream.requests=20000", "stream.requests=200000"};
    long rss[2];
    for (int i = 0; i < 2; i++) {
        test_run_t run = test_kvio(dir, "run", "chat", "--set", sizes[i], "--set",
                                   "duration=168h", "--set", "stream.arrival.rate=10", "-o",
                                   i == 0 ? "small" : "large", NULL);
        cr_assert_eq(run.status, 0, "%s", run.err);
        test_run_free(&run);
        rss[i] = children_max_rss_kib();
    }
    cr_expect_lt(rss[1], rss[0] + 48 * 1024,
                 "peak RSS %ld KiB for 20k requests, %ld KiB with 200k", rss[0], rss[1]);
    test_rmtree(dir);
    free(dir);
}

/* stream.users (MLPerf Storage kv-cache.py's users) over two routed ranks:
 * at most that many requests are in flight, and every request arrives
 * either as a user's start (one think time in) or exactly one think time
 * after some request's answer. */
Test(simulate, closed_loop_users_send_after_their_answer_and_a_think, .timeout = 60)
{
    const char *text =
        "name: users\nseed: 2\nmode: simulate\nduration: 30s\n"
        "model: {preset: llama3-8b}\ngpu: {preset: h200}\nranks: {serve: 2}\n"
        "stream:\n  users: 6\n"
        "  input_tokens: {dist: uniform, low: 500, high: 3000}\n"
        "  output_tokens: {dist: uniform, low: 20, high: 200}\n"
        "  prefix:\n    sessions: {turns: 3, user_tokens: 50, think_time: 250ms}\n";
    run_output_t output = run_text(text, NULL, 0);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/requests.csv", output.dir);
    test_csv_t csv = test_csv_read(path);
    size_t rows = csv.num_rows;
    cr_assert_gt(rows, 60, "six users for 30 s answer many requests");
    double *finishes = malloc(rows * sizeof(double));
    for (size_t r = 0; r < rows; r++)
        finishes[r] = test_csv_number(&csv, r, "finish_s");
    size_t starts = 0;
    for (size_t r = 0; r < rows; r++) {
        double arrival = test_csv_number(&csv, r, "arrival_s");
        if (fabs(arrival - 0.25) < 2e-6) {
            starts++;
            continue;
        }
        bool after_answer = false;
        for (size_t f = 0; f < rows && !after_answer; f++)
            after_answer = fabs(finishes[f] + 0.25 - arrival) < 2e-6;
        cr_assert(after_answer, "request at %.6f s follows no answer", arrival);
        size_t in_flight = 0;
        for (size_t o = 0; o < rows; o++)
            in_flight += test_csv_number(&csv, o, "arrival_s") <= arrival && finishes[o] > arrival;
        cr_assert_leq(in_flight, 6, "%zu requests in flight at %.6f s", in_flight, arrival);
    }
    cr_assert_eq(starts, 6);
    /* vllm.json says the loop's bound, as vLLM's --max-concurrency. */
    char *vllm_text = read_out(&output, "vllm.json");
    json_t *vllm = json_loads(vllm_text, 0, NULL);
    cr_assert_not_null(vllm);
    cr_expect_eq(test_json_integer(vllm, "max_concurrency"), 6);
    json_decref(vllm);
    free(vllm_text);
    /* A closed loop offers no rate past its serving: never "overloaded". */
    json_t *warnings = json_object_get(output.summary, "warnings");
    for (size_t w = 0; w < json_array_size(warnings); w++)
        cr_assert_str_neq(json_string_value(json_object_get(json_array_get(warnings, w), "kind")),
                          "overload");
    free(finishes);
    test_csv_free(&csv);
    run_free(&output);
}

/* Issue 59, item 1: 4,000 identical requests 1 ms apart, whose output
 * blocks every request fills with the same content, ran forever in the KV
 * pool's index (every bucket counted as passed). The run ends, serving
 * every request. */
Test(simulate, identical_requests_sharing_output_blocks_run_to_the_end, .timeout = 60)
{
    char *dir = test_tmpdir();
    char path[1200];
    snprintf(path, sizeof(path), "%s/identical.jsonl", dir);
    FILE *trace = fopen(path, "w");
    cr_assert_not_null(trace);
    for (int n = 0; n < 4000; n++)
        fprintf(trace,
                "{\"id\": %d, \"arrival_ns\": %lld, \"input_length\": 18, \"output_length\": 40, "
                "\"block_tokens\": 16, \"sequence_hash_ids\": true, \"hash_ids\": [1, 2, 3, %d]}\n",
                n, (long long)n * 1000000, 1000 + n);
    cr_assert_eq(fclose(trace), 0);
    char set_path[1300];
    snprintf(set_path, sizeof(set_path), "stream.trace.path=%s", path);
    test_run_t run = test_kvio(dir, "run", "endpoint", "--set", "mode=simulate", "--set", set_path,
                               "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    json_t *summary = test_summary(dir, "out");
    cr_assert(test_json_true(summary, "complete"));
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), 4000);
    json_decref(summary);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #53 item 3: pkas counted a prefix every running request shares once per
 * request (a 4,000-token system prompt filled its projection at two
 * requests: 0.88 req/s served of 4.9 offered, TTFT p99 268 s). Counted as
 * the pool holds it, pkas runs as many requests as fcfs where the KV fits
 * them, at the same latency. */
static const char *shared_system_prompt =
    "name: shared-prompt\nseed: 3\nmode: simulate\nduration: 60s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h100-sxm}\n"
    "serve:\n  kvcache: {capacity: 1536MiB}\n  scheduler: {policy: fcfs, predictor: oracle}\n"
    "stream:\n  arrival: {process: poisson, rate: 5}\n"
    "  input_tokens: {dist: lognormal, mean: 200, stddev: 100, min: 16, max: 1024}\n"
    "  output_tokens: {dist: lognormal, mean: 300, stddev: 200, min: 1, max: 1024}\n"
    "  prefix: {system_prompts: {count: 1, tokens: 4000}}\n";

/* The most requests running at once (iterations.csv). */
static double most_running(run_output_t *output)
{
    char *path = NULL;
    if (asprintf(&path, "%s/out/iterations.csv", output->dir) < 0)
        return NAN;
    test_csv_t csv = test_csv_read(path);
    free(path);
    double most = 0;
    for (size_t i = 0; i < csv.num_rows; i++)
        most = fmax(most, test_csv_number(&csv, i, "running"));
    test_csv_free(&csv);
    return most;
}

Test(simulate, pkas_runs_as_many_requests_as_fit_beside_a_shared_prompt, .timeout = 60)
{
    const char *fcfs_set[] = {"serve.scheduler.policy=fcfs"};
    const char *pkas_set[] = {"serve.scheduler.policy=pkas"};
    run_output_t fcfs = run_text(shared_system_prompt, fcfs_set, 1);
    run_output_t pkas = run_text(shared_system_prompt, pkas_set, 1);
    double fcfs_running = most_running(&fcfs), pkas_running = most_running(&pkas);
    cr_expect_geq(pkas_running, 0.9 * fcfs_running, "pkas ran at most %.0f, fcfs %.0f",
                  pkas_running, fcfs_running);
    double fcfs_p99 = test_json_number(fcfs.summary, "metrics.ttft_ms.p99");
    double pkas_p99 = test_json_number(pkas.summary, "metrics.ttft_ms.p99");
    cr_expect_leq(pkas_p99, 2 * fcfs_p99, "TTFT p99: pkas %.1f ms, fcfs %.1f ms", pkas_p99,
                  fcfs_p99);
    cr_expect_eq(test_json_integer(pkas.summary, "metrics.preemptions"), 0);
    run_free(&fcfs);
    run_free(&pkas);
}

/* #57 item 3: the routers over a fleet on a Mooncake-format trace (the
 * fleet-routers preset: three serve ranks, pools that hold about three of
 * the trace's twelve shared prefixes), in one compare: hit rate, TTFT p99
 * and, for kv_events, the share of routes its index sent to a rank that had
 * already evicted the prefix. At lag 0 the index is the ranks' caches (no
 * stale route); 100 ms late it routes some requests stale; prefix routing
 * beats round robin's hits. */
static const json_t *variant_figures(const json_t *compare, const char *name)
{
    const json_t *variants = json_object_get(compare, "variants");
    for (size_t v = 0; v < json_array_size(variants); v++) {
        const json_t *variant = json_array_get(variants, v);
        if (strcmp(json_string_value(json_object_get(variant, "name")), name) == 0)
            return json_object_get(json_array_get(json_object_get(variant, "runs"), 0),
                                   "figures");
    }
    cr_assert_fail("no variant %s", name);
    return NULL;
}

Test(simulate, compare_of_routers_counts_stale_routes_only_when_events_lag, .timeout = 120)
{
    char *dir = test_tmpdir();
    char out[1100], error[1024] = "";
    snprintf(out, sizeof(out), "%s/cmp", dir);
    const char *policies[] = {"prefix_affinity", "kv_events", "kv_approx", "round_robin"};
    const char *lags[] = {"0s", "100ms"};
    kvio_compare_vary_t varies[] = {
        {.key = "serve.router.policy", .values = policies, .count = 4},
        {.key = "serve.router.event_lag", .values = lags, .count = 2}};
    const char *sets[] = {
        "stream.trace.path=" KVIO_SOURCE_DIR "/tests/fixtures/mooncake_fleet.jsonl",
        "stream.trace.format=mooncake"};
    kvio_compare_options_t options = {.source = "fleet-routers", .sets = sets, .num_sets = 2,
                                      .varies = varies, .num_varies = 2, .repeat = 1,
                                      .output_dir = out};
    kvio_comparison_t *comparison = NULL;
    cr_assert_eq(kvio_compare(&options, &comparison, error, sizeof(error)), KVIO_OK, "%s", error);
    json_t *compare = kvio_comparison_json(comparison);
    kvio_comparison_destroy(comparison);
    cr_assert_eq(json_array_size(json_object_get(compare, "variants")), 8);
    const json_t *exact = variant_figures(compare, "policy=kv_events,event_lag=0s");
    const json_t *late = variant_figures(compare, "policy=kv_events,event_lag=100ms");
    const json_t *affinity = variant_figures(compare, "policy=prefix_affinity,event_lag=0s");
    const json_t *turns = variant_figures(compare, "policy=round_robin,event_lag=0s");
    const json_t *guess = variant_figures(compare, "policy=kv_approx,event_lag=0s");
    cr_assert_eq(test_json_number(exact, "stale_route_share"), 0);
    cr_assert_gt(test_json_number(late, "stale_route_share"), 0);
    cr_assert_null(json_object_get(turns, "stale_route_share"), "round robin keeps no index");
    /* Without lag the index is what prefix_affinity reads from the engines. */
    cr_assert_float_eq(test_json_number(exact, "hit_rate"), test_json_number(affinity, "hit_rate"),
                       1e-12);
    cr_assert_gt(test_json_number(exact, "hit_rate"), test_json_number(turns, "hit_rate") + 0.1);
    /* kv_approx predicts from its own routes: far better than round robin,
     * but it never hears an eviction, so some of its routes are stale. */
    cr_assert_gt(test_json_number(guess, "hit_rate"), test_json_number(turns, "hit_rate") + 0.1);
    cr_assert_gt(test_json_number(guess, "stale_route_share"), 0);
    for (const json_t *const *f = (const json_t *const[]){exact, late, affinity, turns, guess,
                                                           NULL};
         *f != NULL; f++)
        cr_assert_gt(test_json_number(*f, "ttft_ms p99"), 0);
    json_decref(compare);
    test_rmtree(dir);
    free(dir);
}

/* #57: a compare that varies the event lag alone (the preset's kv_events
 * router) gives each lag its own runs, and --metrics takes a list entry's
 * figure (tiers.0.hits: the first rank's tier, which compare refused as
 * "not a number kvio reports"), read from the run's result as its
 * summary.json has it. */
Test(simulate, compare_varies_the_event_lag_alone_and_reads_tier_entries, .timeout = 120)
{
    char *dir = test_tmpdir();
    char out[1100], error[1024] = "";
    snprintf(out, sizeof(out), "%s/cmp", dir);
    const char *lags[] = {"0s", "1s"};
    kvio_compare_vary_t varies[] = {{.key = "serve.router.event_lag", .values = lags, .count = 2}};
    const char *sets[] = {
        "stream.trace.path=" KVIO_SOURCE_DIR "/tests/fixtures/mooncake_fleet.jsonl",
        "stream.trace.format=mooncake", "serve.kvcache.tiers=[{kind: shared, size: 1GiB}]"};
    const char *metrics[] = {"tiers.0.hits", "tiers.2.shared.peer_shard_hits"};
    kvio_compare_options_t options = {.source = "fleet-routers", .sets = sets, .num_sets = 3,
                                      .varies = varies, .num_varies = 1, .repeat = 1,
                                      .metrics = metrics, .num_metrics = 2, .output_dir = out};
    kvio_comparison_t *comparison = NULL;
    cr_assert_eq(kvio_compare(&options, &comparison, error, sizeof(error)), KVIO_OK, "%s", error);
    json_t *compare = kvio_comparison_json(comparison);
    kvio_comparison_destroy(comparison);
    cr_assert_eq(json_array_size(json_object_get(compare, "variants")), 2);
    const json_t *exact = variant_figures(compare, "event_lag=0s");
    const json_t *late = variant_figures(compare, "event_lag=1s");
    cr_expect_eq(test_json_number(exact, "stale_route_share"), 0);
    cr_expect_gt(test_json_number(late, "stale_route_share"), 0, "the lag was not applied");
    const char *names[] = {"event_lag=0s", "event_lag=1s"};
    for (int v = 0; v < 2; v++) {
        const json_t *figures = variant_figures(compare, names[v]);
        char path[1300];
        snprintf(path, sizeof(path), "%s/%s/summary.json", out, names[v]);
        json_error_t json_error;
        json_t *summary = json_load_file(path, 0, &json_error);
        cr_assert_not_null(summary, "%s: %s", path, json_error.text);
        const json_t *tiers = json_object_get(json_object_get(summary, "metrics"), "tiers");
        const json_t *hits = json_object_get(figures, "tiers.0.hits");
        const json_t *peer = json_object_get(figures, "tiers.2.shared.peer_shard_hits");
        cr_assert_not_null(hits, "%s: no tiers.0.hits row", names[v]);
        cr_assert_not_null(peer, "%s: no tiers.2.shared.peer_shard_hits row", names[v]);
        cr_expect_gt(json_number_value(hits), 0, "%s", names[v]);
        cr_expect_eq(json_number_value(hits),
                     test_json_number(json_array_get(tiers, 0), "hits"), "%s", names[v]);
        cr_expect_eq(json_number_value(peer),
                     test_json_number(json_array_get(tiers, 2), "shared.peer_shard_hits"), "%s",
                     names[v]);
        json_decref(summary);
    }
    json_decref(compare);
    test_rmtree(dir);
    free(dir);
}
