/* Prefill/decode disaggregation (ranks.prefill, ranks.decode) in simulate:
 * every request is prefilled once and decoded once, its KV moved once and
 * only where the decode rank's pool lacks it; a transfer costs the link's
 * latency plus its bytes over the bandwidth, or, layer-wise, only the last
 * layer's share once the prefill outlasts it; TTFT's parts add up to TTFT;
 * and what kvio does not build is refused by name. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/helpers.h"

/* Llama-3-8B in bf16: 128 KiB of KV per token. */
#define KV_BYTES_PER_TOKEN 131072.0

typedef struct pd_run {
    char *dir;
    json_t *summary;
    test_csv_t requests;
} pd_run_t;

/* Runs the workload text with --set overrides (NULL-terminated) through the
 * kvio binary; asserts it succeeded. */
static pd_run_t pd_run(const char *text, const char *const *sets)
{
    pd_run_t run = {.dir = test_tmpdir()};
    char *file = test_write_file(run.dir, "w.yaml", text);
    const char *argv[32] = {test_kvio_binary(), "run", file, "-o", "out", "-q"};
    size_t argc = 6;
    for (size_t i = 0; sets != NULL && sets[i] != NULL && argc + 3 < 32; i++) {
        argv[argc++] = "--set";
        argv[argc++] = sets[i];
    }
    argv[argc] = NULL;
    test_run_t result = test_exec(run.dir, argv);
    cr_assert_eq(result.status, 0, "kvio run: %s%s", result.out, result.err);
    test_run_free(&result);
    run.summary = test_summary(run.dir, "out");
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/requests.csv", run.dir);
    run.requests = test_csv_read(path);
    free(file);
    return run;
}

static void pd_free(pd_run_t *run)
{
    test_csv_free(&run->requests);
    json_decref(run->summary);
    test_rmtree(run->dir);
    free(run->dir);
}

/* Unique prompts (no shared prefix), arriving 0.2 s apart: 40 requests. */
static const char *unique_prompts =
    "name: pd\nseed: 4\nmode: simulate\nduration: 8s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "ranks: {prefill: 1, decode: 2}\n"
    "stream:\n  requests: 40\n  arrival: {process: constant, rate: 5}\n"
    "  input_tokens: {dist: uniform, low: 200, high: 3000}\n"
    "  output_tokens: {dist: uniform, low: 5, high: 60}\n";

/* Tokens of a prompt the decode can take from elsewhere: its full blocks,
 * short of the last token (computed by the decode's first step). */
static double transferable(double prompt_tokens)
{
    return floor((prompt_tokens - 1) / 16) * 16;
}

/* Row r's TTFT parts: each measured on its own, none negative, and
 * together its TTFT within tolerance_ms (the CSV's rounding). */
static void assert_parts_add_up(const test_csv_t *csv, size_t r, double tolerance_ms)
{
    const char *parts[] = {"prefill_queue_ms", "prefill_ms", "decode_queue_ms", "kv_transfer_ms",
                           "first_decode_ms"};
    double sum = 0;
    for (size_t p = 0; p < 5; p++) {
        double part = test_csv_number(csv, r, parts[p]);
        cr_assert_geq(part, 0, "row %zu: %s %.3f", r, parts[p], part);
        sum += part;
    }
    double ttft = test_csv_number(csv, r, "ttft_ms");
    cr_assert(fabs(sum - ttft) < tolerance_ms, "row %zu: parts %.3f, TTFT %.3f", r, sum, ttft);
}

Test(pd, every_request_is_prefilled_and_decoded_once_its_kv_moved_once, .timeout = 60)
{
    pd_run_t run = pd_run(unique_prompts, NULL);
    const test_csv_t *csv = &run.requests;
    cr_assert_eq(csv->num_rows, 40, "every request finishes once, on its decode rank");
    bool seen[40] = {false};
    double tokens = 0;
    for (size_t r = 0; r < csv->num_rows; r++) {
        double id = test_csv_number(csv, r, "id");
        cr_assert(id >= 0 && id < 40 && !seen[(int)id], "request %.0f twice or unknown", id);
        seen[(int)id] = true;
        double rank = test_csv_number(csv, r, "rank");
        cr_assert(rank == 1 || rank == 2, "request %.0f finished on rank %.0f", id, rank);
        cr_assert_eq(test_csv_number(csv, r, "prefill_rank"), 0);
        double input = test_csv_number(csv, r, "input_tokens");
        double moved = test_csv_number(csv, r, "kv_transfer_tokens");
        cr_assert_eq(moved, transferable(input), "request %.0f: %.0f of %.0f tokens moved", id,
                     moved, input);
        cr_assert_eq(test_csv_number(csv, r, "cached_tokens"), 0);
        tokens += moved;
        assert_parts_add_up(csv, r, 0.01);
        cr_assert_gt(test_csv_number(csv, r, "prefill_ms"), 0);
        cr_assert_gt(test_csv_number(csv, r, "first_decode_ms"), 0);
    }
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.handoffs"), 40);
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.transfers"), 40);
    cr_assert_eq((double)test_json_integer(run.summary, "metrics.pd.transfer_bytes"),
                 tokens * KV_BYTES_PER_TOKEN);
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.decode_hit_tokens"), 0);
    /* The serving metrics are the decode ranks': each request once. */
    cr_assert_eq(test_json_integer(run.summary, "metrics.completed"), 40);
    cr_assert_str_eq(test_json_string(run.summary, "metrics.per_rank.0.role"), "prefill");
    cr_assert_str_eq(test_json_string(run.summary, "metrics.per_rank.2.role"), "decode");
    pd_free(&run);
}

/* One request of 4,097 prompt tokens: 4,096 move, 512 MiB of KV. */
static const char *one_long_prompt =
    "name: pd1\nseed: 1\nmode: simulate\nduration: 1s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "ranks: {prefill: 1, decode: 1}\n"
    "pd: {bandwidth: 10e9, latency: 100us}\n"
    "stream:\n  requests: 1\n  arrival: {process: batch}\n"
    "  input_tokens: {dist: constant, value: 4097}\n"
    "  output_tokens: {dist: constant, value: 4}\n";

Test(pd, a_transfer_costs_latency_and_bytes_over_bandwidth_layerwise_its_last_layer,
     .timeout = 60)
{
    double cost_ms = 0.1 + 4096 * KV_BYTES_PER_TOKEN / 10e9 * 1e3;
    pd_run_t whole = pd_run(one_long_prompt, NULL);
    cr_assert_eq(whole.requests.num_rows, 1);
    cr_assert(fabs(test_csv_number(&whole.requests, 0, "kv_transfer_ms") - cost_ms) < 0.002,
              "whole: %.3f ms, modelled %.3f", test_csv_number(&whole.requests, 0,
                                                               "kv_transfer_ms"), cost_ms);
    cr_assert_eq(test_csv_number(&whole.requests, 0, "decode_queue_ms"), 0,
                 "an idle decode admits at the handoff");
    const char *sets[] = {"pd.layerwise=true", NULL};
    pd_run_t layered = pd_run(one_long_prompt, sets);
    double prefill_ms = test_csv_number(&layered.requests, 0, "prefill_ms");
    cr_assert_gt(prefill_ms, cost_ms, "the prefill (%.3f ms) outlasts the transfer", prefill_ms);
    /* Llama-3-8B has 32 layers: only the last one's share is left. */
    cr_assert(fabs(test_csv_number(&layered.requests, 0, "kv_transfer_ms") - cost_ms / 32) < 0.002,
              "layer-wise: %.3f ms, modelled %.3f",
              test_csv_number(&layered.requests, 0, "kv_transfer_ms"), cost_ms / 32);
    cr_assert_lt(test_csv_number(&layered.requests, 0, "ttft_ms"),
                 test_csv_number(&whole.requests, 0, "ttft_ms") - cost_ms * 0.9);
    cr_assert_eq(test_csv_number(&layered.requests, 0, "kv_transfer_tokens"), 4096,
                 "layer-wise moves the same bytes");
    pd_free(&whole);
    pd_free(&layered);
}

/* Two such prompts at once from one prefill rank to two decode ranks, over
 * a link slower than the prefill (2 GB/s: 268 ms a transfer, 106 ms a
 * prefill): their transfers share the prefill rank's link, so the second
 * waits for the first. */
Test(pd, transfers_from_one_prefill_rank_share_its_link, .timeout = 60)
{
    const char *sets[] = {"ranks.decode=2", "stream.requests=2", "pd.bandwidth=2e9", NULL};
    pd_run_t run = pd_run(one_long_prompt, sets);
    cr_assert_eq(run.requests.num_rows, 2);
    double cost_ms = 0.1 + 4096 * KV_BYTES_PER_TOKEN / 2e9 * 1e3;
    double a = test_csv_number(&run.requests, 0, "kv_transfer_ms");
    double b = test_csv_number(&run.requests, 1, "kv_transfer_ms");
    double first = a < b ? a : b, second = a < b ? b : a;
    cr_assert_neq(test_csv_number(&run.requests, 0, "rank"),
                  test_csv_number(&run.requests, 1, "rank"), "one to each decode rank");
    cr_assert(fabs(first - cost_ms) < 0.002, "the first: %.3f ms, modelled %.3f", first, cost_ms);
    cr_assert_gt(second, 1.5 * cost_ms, "the second waited for the prefill's link: %.3f ms",
                 second);
    pd_free(&run);
}

/* Every prompt the same 1,024-token system prompt then 76 tokens of its
 * own, one decode rank: its pool keeps the system prompt's blocks. */
static const char *shared_prompts =
    "name: pd2\nseed: 2\nmode: simulate\nduration: 5s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "ranks: {prefill: 1, decode: 1}\n"
    "stream:\n  requests: 10\n  arrival: {process: constant, rate: 2}\n"
    "  input_tokens: {dist: constant, value: 1100}\n"
    "  output_tokens: {dist: constant, value: 8}\n"
    "  prefix: {system_prompts: {count: 1, tokens: 1024}}\n";

Test(pd, a_decode_side_hit_moves_nothing_of_what_the_pool_holds, .timeout = 60)
{
    pd_run_t run = pd_run(shared_prompts, NULL);
    const test_csv_t *csv = &run.requests;
    cr_assert_eq(csv->num_rows, 10);
    double moved_total = 0, hit_total = 0;
    for (size_t r = 0; r < csv->num_rows; r++) {
        double moved = test_csv_number(csv, r, "kv_transfer_tokens");
        double cached = test_csv_number(csv, r, "cached_tokens");
        cr_assert_eq(moved + cached, transferable(1100), "row %zu: %.0f moved, %.0f hit", r,
                     moved, cached);
        if (test_csv_number(csv, r, "id") > 0)
            cr_assert_eq(cached, 1024, "the system prompt was on the decode rank");
        moved_total += moved;
        hit_total += cached;
    }
    cr_assert_eq(moved_total, transferable(1100) + 9 * (transferable(1100) - 1024));
    cr_assert_eq((double)test_json_integer(run.summary, "metrics.pd.decode_hit_tokens"),
                 hit_total);
    cr_assert_eq((double)test_json_integer(run.summary, "metrics.pd.transfer_bytes"),
                 moved_total * KV_BYTES_PER_TOKEN);
    pd_free(&run);
    /* The whole prompt shared: after the first, nothing moves, and the
     * decode still finishes each. */
    const char *whole[] = {"stream.input_tokens.value=1024", NULL};
    run = pd_run(shared_prompts, whole);
    cr_assert_eq(run.requests.num_rows, 10);
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.transfers"), 1);
    for (size_t r = 0; r < run.requests.num_rows; r++)
        if (test_csv_number(&run.requests, r, "id") > 0) {
            cr_assert_eq(test_csv_number(&run.requests, r, "kv_transfer_tokens"), 0);
            cr_assert_eq(test_csv_number(&run.requests, r, "kv_transfer_ms"), 0);
        }
    pd_free(&run);
}

/* Dynamo's conditional disaggregation: once the decode rank holds the
 * system prompt, 76 tokens are left to compute, under the 200 asked: the
 * request is prefilled there, nothing handed over. The first is not. */
Test(pd, a_decode_rank_that_lacks_little_prefills_the_request_itself, .timeout = 60)
{
    const char *sets[] = {"pd.local_prefill_tokens=200", NULL};
    pd_run_t run = pd_run(shared_prompts, sets);
    const test_csv_t *csv = &run.requests;
    cr_assert_eq(csv->num_rows, 10);
    for (size_t r = 0; r < csv->num_rows; r++) {
        bool first = test_csv_number(csv, r, "id") == 0;
        double rank = test_csv_number(csv, r, "rank");
        double prefilled = test_csv_number(csv, r, "prefill_rank");
        cr_assert_eq(prefilled, first ? 0 : rank, "row %zu: prefilled on rank %.0f", r,
                     prefilled);
        cr_assert_eq(test_csv_number(csv, r, "kv_transfer_tokens"), first ? transferable(1100) : 0);
        assert_parts_add_up(csv, r, 0.01);
    }
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.handoffs"), 1);
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.local_prefills"), 9);
    cr_assert_eq(test_json_integer(run.summary, "metrics.per_rank.0.completed"), 1,
                 "the prefill rank prefilled only the first");
    pd_free(&run);
}

/* Bad P/D settings: exit 2 and the keys named. */
Test(pd, what_is_not_built_is_refused_by_name, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", unique_prompts);
    struct {
        const char *set, *also, *said;
    } cases[] = {
        {"ranks.decode=0", NULL, "ranks.decode: 0"},
        {"ranks.serve=2", NULL, "ranks.serve: 2"},
        {"serve.kvcache.prefix_caching=false", NULL, "serve.kvcache.prefix_caching"},
        {"pd.transfer=sideways", NULL, "pd.transfer"},
        {"mode=emulate", "pd.layerwise=true", "pd.layerwise"},
        {"mode=emulate", "pd.router.policy=prefix_affinity", "pd.router"},
        {"mode=emulate", "pd.local_prefill_tokens=100", "pd.local_prefill_tokens"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_run_t run = test_kvio(dir, "run", file, "-o", "out", "-q", "--set", cases[i].set,
                                   "--set", cases[i].also != NULL ? cases[i].also : "seed=4",
                                   NULL);
        cr_assert_eq(run.status, 2, "%s: status %d: %s", cases[i].set, run.status, run.err);
        cr_assert(test_contains(run.err, cases[i].said), "%s: %s", cases[i].set, run.err);
        test_run_free(&run);
    }
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* Emulate: one prefill rank, two decode ranks, real KV pools; Llama-3.2-1B
 * has 32 KiB of KV per token. */
static const char *emulate_prompts =
    "name: pde\nseed: 6\nmode: emulate\nduration: 20s\n"
    "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
    "ranks: {prefill: 1, decode: 2, timeout: 20s}\n"
    "serve:\n  kvcache: {block_size: 16, blocks: 300}\n"
    "stream:\n  requests: 24\n  arrival: {process: poisson, rate: 20}\n"
    "  input_tokens: {dist: uniform, low: 200, high: 1500}\n"
    "  output_tokens: {dist: uniform, low: 4, high: 24}\n";

/* Every one of the 24 requests finished once on a decode rank, its KV moved
 * once (the prompt's full blocks less the last token's), every block that
 * came over checked, the TTFT parts adding up. */
static void assert_moved_once(const pd_run_t *run)
{
    const test_csv_t *csv = &run->requests;
    cr_assert_eq(csv->num_rows, 24, "every request finishes once, on its decode rank");
    bool seen[24] = {false};
    double tokens = 0;
    for (size_t r = 0; r < csv->num_rows; r++) {
        double id = test_csv_number(csv, r, "id");
        cr_assert(id >= 0 && id < 24 && !seen[(int)id], "request %.0f twice or unknown", id);
        seen[(int)id] = true;
        double rank = test_csv_number(csv, r, "rank");
        cr_assert(rank == 1 || rank == 2, "request %.0f finished on rank %.0f", id, rank);
        double moved = test_csv_number(csv, r, "kv_transfer_tokens");
        cr_assert_eq(moved, transferable(test_csv_number(csv, r, "input_tokens")));
        tokens += moved;
        assert_parts_add_up(csv, r, 0.02);
    }
    /* Every block that came over was checked against the prefill's checksum. */
    cr_assert_eq((double)test_json_integer(run->summary, "metrics.pd.verified_blocks"),
                 tokens / 16);
    cr_assert_eq(test_json_integer(run->summary, "metrics.pd.checksum_failures"), 0);
    cr_assert_eq((double)test_json_integer(run->summary, "metrics.pd.transfer_bytes"),
                 tokens * 32768);
    cr_assert_eq(test_json_integer(run->summary, "metrics.pd.decode_recomputed_tokens"), 0);
}

Test(pd, emulate_moves_each_request_s_kv_once_and_checks_every_block, .timeout = 120)
{
    pd_run_t run = pd_run(emulate_prompts, NULL);
    assert_moved_once(&run);
    cr_assert_str_eq(test_json_string(run.summary, "metrics.pd.transfer"), "pull");
    pd_free(&run);
}

/* Push: the prefill rank writes each block into its partition of the
 * decode rank's inbox, which the decode reads into its pool, checked. */
Test(pd, emulate_pushes_each_request_s_kv_once_and_checks_every_block, .timeout = 120)
{
    const char *sets[] = {"pd.transfer=push", NULL};
    pd_run_t run = pd_run(emulate_prompts, sets);
    assert_moved_once(&run);
    cr_assert_str_eq(test_json_string(run.summary, "metrics.pd.transfer"), "push");
    pd_free(&run);
}

Test(pd, emulate_a_block_changed_on_its_way_is_counted_and_computed_again, .timeout = 120)
{
    const char *sets[] = {"pd.corrupt_every=5", NULL};
    pd_run_t run = pd_run(emulate_prompts, sets);
    cr_assert_eq(run.requests.num_rows, 24, "every request still finishes");
    long long failures = test_json_integer(run.summary, "metrics.pd.checksum_failures");
    cr_assert_gt(failures, 0);
    cr_assert_gt(test_json_integer(run.summary, "metrics.pd.decode_recomputed_tokens"), 0,
                 "what failed its checksum was computed on the decode rank, not used");
    pd_free(&run);
}

Test(pd, emulate_a_lost_decode_rank_ends_the_run_naming_it, .timeout = 120)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", emulate_prompts);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    test_run_t run = test_kvio(dir, "run", file, "-o", "out", "-q", "--set",
                               "pd.decode_dies_after=3", NULL);
    cr_assert_eq(run.status, 1, "status %d: %s", run.status, run.err);
    cr_assert(test_contains(run.err, "decode rank 1"), "%s", run.err);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double took = (double)(end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    cr_assert_lt(took, test_seconds(60), "a lost rank is not waited for (%.1f s)", took);
    test_run_free(&run);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(pd, emulate_a_decode_side_hit_moves_nothing_of_what_the_pool_holds, .timeout = 120)
{
    const char *sets[] = {"mode=emulate", "model.preset=llama3.2-1b", "serve.kvcache.blocks=300",
                          NULL};
    pd_run_t run = pd_run(shared_prompts, sets);
    const test_csv_t *csv = &run.requests;
    cr_assert_eq(csv->num_rows, 10);
    for (size_t r = 0; r < csv->num_rows; r++) {
        double moved = test_csv_number(csv, r, "kv_transfer_tokens");
        double cached = test_csv_number(csv, r, "cached_tokens");
        cr_assert_eq(moved + cached, transferable(1100));
        if (test_csv_number(csv, r, "id") > 0)
            cr_assert_eq(cached, 1024, "the system prompt was on the decode rank");
    }
    cr_assert_eq(test_json_integer(run.summary, "metrics.pd.checksum_failures"), 0);
    pd_free(&run);
}

/* A trainer's updates reach the prefill rank and both decode ranks (every
 * 100 ms step, a version each 10 steps), while requests run. */
static const char *coupled_pd =
    "name: pdv\nseed: 7\nmode: simulate\nduration: 6s\n"
    "ranks: {train: 1, prefill: 1, decode: 2}\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "serve:\n  kvcache: {block_size: 16, capacity: 2GiB}\n"
    "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 1GiB\n"
    "  checkpoint: {policy: every_n_steps, every_n_steps: 10}\n"
    "  transport: {kind: ucx, model: {latency: 1ms, bandwidth: 5}}\n"
    "update: {apply: shadow, verify: true, serving: engine, on_activate: {cache: keep}}\n"
    "stream:\n  arrival: {process: poisson, rate: 30}\n"
    "  input_tokens: {dist: uniform, low: 200, high: 1200}\n"
    "  output_tokens: {dist: uniform, low: 20, high: 200}\n"
    "  prefix: {system_prompts: {count: 4, tokens: 512, zipf: 1.0}}\n";

Test(pd, consistent_versions_decode_nothing_on_weights_newer_than_its_prefill, .timeout = 60)
{
    const char *any[] = {"pd.version=any", NULL};
    pd_run_t mixed = pd_run(coupled_pd, any);
    cr_assert_gt(test_json_integer(mixed.summary, "metrics.update_effects.versions_activated"), 0);
    /* any: what a decode rank computes for a request after its version
     * changed is counted, and nothing is prefilled again. */
    cr_assert_gt(test_json_integer(mixed.summary, "metrics.update_effects.mixed_version_tokens"),
                 0);
    cr_assert_null(json_object_get(json_object_get(mixed.summary, "metrics"), "pd_reprefills"));
    /* The update's cost against the same stream served without updates. */
    cr_assert_not_null(test_json(mixed.summary, "metrics.update_cost"));
    const char *consistent[] = {"pd.version=consistent", NULL};
    pd_run_t kept = pd_run(coupled_pd, consistent);
    cr_assert_eq(test_json_integer(kept.summary, "metrics.update_effects.mixed_version_tokens"), 0,
                 "no token on weights newer than the request's prefill");
    long long again = test_json_integer(kept.summary, "metrics.pd_reprefills");
    cr_assert_gt(again, 0, "what the newer version met is prefilled again on the decode rank");
    cr_assert_gt(test_json_integer(kept.summary, "metrics.pd_reprefilled_tokens"), again);
    cr_assert_eq(kept.requests.num_rows, mixed.requests.num_rows, "every request still finishes");
    pd_free(&mixed);
    pd_free(&kept);
}

/* The coupled run under mpirun: a trainer, one prefill and two decode
 * processes; the updates reach all three serve ranks, the KV moves between
 * processes (UCX's shared memory between processes of one node). */
static const char *mpirun_pd =
    "name: pdm\nseed: 4\nmode: emulate\nduration: 4s\n"
    "ranks: {train: 1, prefill: 1, decode: 2, runtime: mpi, timeout: 30s}\n"
    "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
    "serve:\n  kvcache: {block_size: 16, blocks: 400}\n"
    "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 16MiB\n"
    "  checkpoint: {policy: every_n_steps, every_n_steps: 5}\n"
    "  transport: {kind: ucx, chunk: 4MiB, inflight: 2}\n"
    "update: {apply: shadow, verify: true, serving: engine}\n"
    "stream:\n  arrival: {process: poisson, rate: 20}\n"
    "  input_tokens: {dist: lognormal, mean: 600, stddev: 300, min: 16, max: 2048}\n"
    "  output_tokens: {dist: lognormal, mean: 40, stddev: 30, min: 1, max: 128}\n";

/* Runs mpirun_pd under mpirun with env (e.g. "KVIO_PD_GETS=1"; "" for
 * none) and --set set, and checks what every such run must do. */
static void mpirun_moves_kv(const char *env, const char *set)
{
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", mpirun_pd);
    char command[4096];
    snprintf(command, sizeof(command),
             "cd %s && %s timeout %.0f mpirun --allow-run-as-root --oversubscribe %s -x "
             "KVIO_PD_GETS -np 4 %s run %s -o out --set %s >mpirun.log 2>&1", dir, env,
             test_seconds(60), test_mpirun_sanitizer_args(), test_kvio_binary(), file, set);
    int status = system(command);
    char path[1200];
    snprintf(path, sizeof(path), "%s/mpirun.log", dir);
    char *log = test_read_file(path);
    cr_assert_eq(status, 0, "mpirun: %s", log != NULL ? log : "");
    free(log);
    json_t *summary = test_summary(dir, "out");
    cr_assert_str_eq(test_json_string(summary, "metrics.model_updates.runtime"), "mpi");
    cr_assert_gt(test_json_integer(summary, "metrics.model_updates.updates_activated"), 0);
    snprintf(path, sizeof(path), "%s/out/requests.csv", dir);
    test_csv_t csv = test_csv_read(path);
    cr_assert_gt(csv.num_rows, 20);
    cr_assert_eq((long long)csv.num_rows, test_json_integer(summary, "metrics.completed"));
    double tokens = 0;
    for (size_t r = 0; r < csv.num_rows; r++) {
        double rank = test_csv_number(&csv, r, "rank");
        cr_assert(rank == 2 || rank == 3, "a request finished on world rank %.0f", rank);
        tokens += test_csv_number(&csv, r, "kv_transfer_tokens");
        for (size_t o = 0; o < r; o++)
            cr_assert_neq(test_csv_number(&csv, o, "id"), test_csv_number(&csv, r, "id"));
    }
    cr_assert_gt(tokens, 0);
    cr_assert_eq((double)test_json_integer(summary, "metrics.pd.verified_blocks"), tokens / 16);
    cr_assert_eq(test_json_integer(summary, "metrics.pd.checksum_failures"), 0);
    test_csv_free(&csv);
    json_decref(summary);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(pd, mpirun_prefill_and_decode_processes_move_kv_and_take_updates, .timeout = 120)
{
    mpirun_moves_kv("", "pd.transfer=pull");
}

/* Push between processes with UCX puts (KVIO_PD_GETS=1: no mapping used). */
Test(pd, mpirun_prefill_processes_push_kv_with_ucx_puts, .timeout = 120)
{
    mpirun_moves_kv("KVIO_PD_GETS=1", "pd.transfer=push");
}
