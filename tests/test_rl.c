/* RL post-training runs (kvio/rl.h) and rollout groups (stream.group):
 * groups share their prompt's blocks, a synchronous step waits for its
 * longest sample, asynchronous with staleness 0 trains on what synchronous
 * does, and a larger bound lets tokens lag. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvio/result.h"
#include "kvio/run.h"
#include "kvio/stream.h"
#include "tests/helpers.h"

/* A 7B model on one H100, n samples per prompt. */
static const char *const base_workload =
    "name: rl-test\n"
    "seed: 3\n"
    "mode: simulate\n"
    "model: {preset: qwen2.5-7b}\n"
    "gpu: {preset: h100-sxm}\n"
    "ranks: {serve: 1}\n"
    "serve:\n"
    "  engine: {max_num_seqs: 256, max_num_batched_tokens: 8192}\n"
    "  kvcache: {block_size: 16}\n"
    "stream:\n"
    "  requests: 64\n"
    "  arrival: {process: batch}\n"
    "  input_tokens: 512\n"
    "  output_tokens: {dist: lognormal, mean: 800, stddev: 900, min: 16, max: 8192}\n"
    "  group: {n: 8}\n"
    "rl: {mode: sync, placement: separate, steps: 4, batch: 8}\n";

typedef struct rl_run {
    char *dir;
    kvio_result_t *result;
} rl_run_t;

static rl_run_t run_rl(const char *text, const char *const *sets, size_t num_sets)
{
    rl_run_t run = {.dir = test_tmpdir()};
    char *file = test_write_file(run.dir, "w.yaml", text);
    kvio_workload_t workload;
    char error[1024];
    cr_assert_eq(kvio_workload_load(file, sets, num_sets, &workload, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", run.dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true, .source = file,
                                  .result_p = &run.result};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    cr_assert_not_null(run.result);
    kvio_workload_free(&workload);
    free(file);
    return run;
}

static void run_free(rl_run_t *run)
{
    kvio_result_destroy(run->result);
    test_rmtree(run->dir);
    free(run->dir);
}

static double step_number(const kvio_result_t *result, size_t step, const char *key)
{
    const json_t *steps = kvio_result_detail(result, "rl.step_times");
    cr_assert(json_is_array(steps));
    cr_assert_lt(step, json_array_size(steps));
    const json_t *value = json_object_get(json_array_get(steps, step), key);
    cr_assert(json_is_number(value), "rl.step_times[%zu].%s", step, key);
    return json_number_value(value);
}

Test(rl, group_samples_share_prompt_and_arrival, .timeout = 30)
{
    kvio_stream_config_t config;
    kvio_workload_t workload;
    char error[512];
    const char *text = "stream:\n  requests: 5\n  group: {n: 4}\n"
                       "  output_tokens: {dist: lognormal, mean: 500, stddev: 400, min: 1, "
                       "max: 4096}\n";
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "s.yaml", text);
    cr_assert_eq(kvio_workload_load(file, NULL, 0, &workload, error, sizeof(error)), KVIO_OK,
                 "%s", error);
    config = workload.stream;
    kvio_stream_t *stream = NULL;
    cr_assert_eq(kvio_stream_create(&config, 7, 0, &stream, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    const kvio_request_t *request = NULL;
    size_t count = 0, distinct_lengths = 0;
    kvio_request_t *first = NULL;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_eq(request->group_size, 4);
        cr_assert_eq(request->group_index, count % 4);
        cr_assert_eq(request->group_id, count / 4 + 1);
        cr_assert_eq(request->id, count);
        if (request->group_index == 0) {
            kvio_request_destroy(first);
            cr_assert_eq(kvio_request_clone(request, &first), KVIO_OK);
        } else {
            /* The prompt is the group's: same segments, same arrival, same
             * blocks; the output is the sample's own. */
            cr_assert_eq(request->arrival_ns, first->arrival_ns);
            cr_assert_eq(request->input_tokens, first->input_tokens);
            cr_assert_eq(request->num_segments, first->num_segments);
            cr_assert_eq(memcmp(request->segments, first->segments,
                                first->num_segments * sizeof(*first->segments)), 0);
            cr_assert_neq(request->output_content_id, first->output_content_id);
            distinct_lengths += request->output_tokens != first->output_tokens;
        }
        count++;
    }
    cr_assert_eq(count, 20, "5 prompts x 4 samples, got %zu", count);
    cr_assert_gt(distinct_lengths, 10, "each sample draws its own length");
    kvio_request_destroy(first);
    kvio_stream_destroy(stream);
    kvio_workload_free(&workload);
    test_rmtree(dir);
    free(dir);
    free(file);
}

/* KV used by a group ~ prompt + n x outputs, not n x (prompt + output). */
Test(rl, a_group_shares_its_prompt_blocks, .timeout = 60)
{
    const char *sets[] = {"stream.input_tokens=4096", "stream.output_tokens=64",
                          "rl.steps=1", "rl.batch=1", "stream.requests=1"};
    rl_run_t run = run_rl(base_workload, sets, sizeof(sets) / sizeof(sets[0]));
    double blocks = kvio_result_get(run.result, KVIO_FIG_KV_BLOCKS_PER_RANK);
    double peak = kvio_result_get(run.result, KVIO_FIG_KV_USAGE_MAX) * blocks;
    double shared = (4096.0 + 8 * 64) / 16, unshared = 8 * (4096.0 + 64) / 16;
    cr_assert_geq(peak, shared * 0.95, "peak %.0f blocks, prompt + 8 outputs %.0f", peak, shared);
    cr_assert_leq(peak, shared * 1.1, "peak %.0f blocks, prompt + 8 outputs %.0f (unshared %.0f)",
                  peak, shared, unshared);
    run_free(&run);
}

Test(rl, a_sync_step_generates_until_its_longest_sample, .timeout = 60)
{
    rl_run_t run = run_rl(base_workload, NULL, 0);
    cr_assert_eq(kvio_result_get(run.result, KVIO_FIG_RL_STEPS), 4);
    for (size_t s = 0; s < 4; s++) {
        double start = step_number(run.result, s, "start_s");
        double ready = step_number(run.result, s, "batch_ready_s");
        double longest = step_number(run.result, s, "longest_finish_s");
        double waited = step_number(run.result, s, "generation_s") +
                        step_number(run.result, s, "long_tail_s");
        cr_assert_float_eq(ready, longest, 1e-9, "step %zu: batch ready %.6f s, its longest "
                           "sample finished %.6f s", s, ready, longest);
        cr_assert_float_eq(waited, ready - start, 1e-6, "step %zu", s);
        cr_assert_gt(step_number(run.result, s, "long_tail_s"), 0, "step %zu", s);
    }
    cr_assert_eq(kvio_result_get(run.result, KVIO_FIG_RL_STALENESS_MAX), 0);
    cr_assert_eq(kvio_result_get(run.result, KVIO_FIG_RL_OFF_POLICY), 0);
    run_free(&run);
}

/* The loop hands its samples to the engines as it admits them (the first
 * step's all at time 0): the rate offered is what it admitted over the
 * rollout's time, never 0, and a loop that admits only what its trainer's
 * versions allow is never overloaded. */
Test(rl, the_offered_rate_is_what_the_loop_admitted_and_never_overloads, .timeout = 60)
{
    const char *one_step[] = {"rl.steps=1"};
    rl_run_t one = run_rl(base_workload, one_step, 1);
    double samples = kvio_result_get(one.result, KVIO_FIG_COMPLETED);
    cr_assert_eq(samples, 8 * 8);
    double last_finish = step_number(one.result, 0, "batch_ready_s");
    double offered = kvio_result_get(one.result, KVIO_FIG_OFFERED_RATE);
    cr_assert_float_eq(offered, samples / last_finish, 1e-9 * offered,
                       "offered %.4f req/s, %.0f samples over %.3f s", offered, samples,
                       last_finish);
    run_free(&one);
    rl_run_t four = run_rl(base_workload, NULL, 0);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/summary.json", four.dir);
    json_error_t json_error;
    json_t *summary = json_load_file(path, 0, &json_error);
    cr_assert_not_null(summary, "%s: %s", path, json_error.text);
    cr_assert(test_json_true(summary, "valid"), "%s",
              json_dumps(json_object_get(summary, "warnings"), 0));
    json_decref(summary);
    run_free(&four);
}

Test(rl, async_with_staleness_0_trains_on_what_sync_does, .timeout = 60)
{
    const char *async_sets[] = {"rl.mode=async", "rl.staleness=0"};
    rl_run_t sync = run_rl(base_workload, NULL, 0);
    rl_run_t async = run_rl(base_workload, async_sets, 2);
    for (size_t s = 0; s < 4; s++) {
        cr_assert_eq(step_number(sync.result, s, "group_id_sum"),
                     step_number(async.result, s, "group_id_sum"), "step %zu", s);
        cr_assert_eq(step_number(sync.result, s, "trained_tokens"),
                     step_number(async.result, s, "trained_tokens"), "step %zu", s);
        cr_assert_float_eq(step_number(sync.result, s, "end_s"),
                           step_number(async.result, s, "end_s"), 1e-9, "step %zu", s);
    }
    cr_assert_eq(kvio_result_get(async.result, KVIO_FIG_RL_STALENESS_MAX), 0);
    run_free(&sync);
    run_free(&async);
}

Test(rl, a_staleness_bound_overlaps_generation_with_training, .timeout = 60)
{
    const char *sets[] = {"rl.mode=async", "rl.staleness=2"};
    rl_run_t sync = run_rl(base_workload, NULL, 0);
    rl_run_t async = run_rl(base_workload, sets, 2);
    double sync_step = kvio_result_get(sync.result, KVIO_FIG_RL_STEP_S);
    double async_step = kvio_result_get(async.result, KVIO_FIG_RL_STEP_S);
    cr_assert_lt(async_step, sync_step, "async %.3f s a step, sync %.3f s", async_step,
                 sync_step);
    double lag = kvio_result_get(async.result, KVIO_FIG_RL_STALENESS_MAX);
    cr_assert_gt(lag, 0);
    cr_assert_leq(lag, 2, "no trained token lags more than rl.staleness: %.0f", lag);
    cr_assert_gt(kvio_result_get(async.result, KVIO_FIG_RL_OFF_POLICY), 0);
    cr_assert_lt(kvio_result_get(async.result, KVIO_FIG_RL_ROLLOUT_IDLE),
                 kvio_result_get(sync.result, KVIO_FIG_RL_ROLLOUT_IDLE));
    run_free(&sync);
    run_free(&async);
}

/* The bound holds for every token, the long tail's too: the trainer waits
 * for a group that would lag more. */
Test(rl, no_trained_token_lags_more_than_the_bound, .timeout = 60)
{
    const char *modes[] = {"rl.interrupt=keep", "rl.interrupt=recompute"};
    for (size_t eta = 1; eta <= 3; eta++) {
        for (size_t m = 0; m < 2; m++) {
            char bound[64];
            snprintf(bound, sizeof(bound), "rl.staleness=%zu", eta);
            const char *sets[] = {"rl.mode=async", bound, modes[m], "rl.steps=8"};
            rl_run_t run = run_rl(base_workload, sets, 4);
            double lag = kvio_result_get(run.result, KVIO_FIG_RL_STALENESS_MAX);
            cr_assert_leq(lag, (double)eta, "%s %s: a token lags %.0f", bound, modes[m], lag);
            run_free(&run);
        }
    }
}

/* An update mid-rollout: with keep the rollout goes on and its later tokens
 * count on the new version; with recompute it is aborted and resumed on
 * the new weights, its KV computed again. */
Test(rl, an_interrupted_rollout_continues_on_the_new_version, .timeout = 60)
{
    const char *keep_sets[] = {"rl.mode=async", "rl.staleness=2", "rl.interrupt=keep"};
    const char *recompute_sets[] = {"rl.mode=async", "rl.staleness=2", "rl.interrupt=recompute"};
    rl_run_t sync = run_rl(base_workload, NULL, 0);
    rl_run_t keep = run_rl(base_workload, keep_sets, 3);
    rl_run_t recompute = run_rl(base_workload, recompute_sets, 3);
    cr_assert_eq(kvio_result_get(sync.result, KVIO_FIG_RL_MIXED_SAMPLES), 0);
    cr_assert_gt(kvio_result_get(keep.result, KVIO_FIG_RL_MIXED_SAMPLES), 0);
    cr_assert_gt(kvio_result_get(recompute.result, KVIO_FIG_RL_MIXED_SAMPLES), 0);
    /* The pool is far from full: only an interrupt recomputes. */
    cr_assert_eq(kvio_result_get(keep.result, KVIO_FIG_RL_RECOMPUTED_TOKENS), 0);
    double recomputed = kvio_result_get(recompute.result, KVIO_FIG_RL_RECOMPUTED_TOKENS);
    cr_assert_gt(recomputed, 0);
    /* At least each interrupted sample's prompt is computed again. */
    cr_assert_geq(recomputed, 512 * kvio_result_get(recompute.result, KVIO_FIG_RL_MIXED_SAMPLES));
    /* Tokens after an update are the new version's: they lag less than
     * their sample's start would say. */
    cr_assert_lt(kvio_result_get(keep.result, KVIO_FIG_RL_STALENESS_MEAN), 2);
    run_free(&sync);
    run_free(&keep);
    run_free(&recompute);
}

/* Partial rollouts (Kimi k1.5): a sample generates at most
 * rl.partial_tokens per version; one that reaches them unfinished is set
 * aside, its group's place goes to a new one, and it continues on the next
 * version. A synchronous step no longer waits for its longest sample, and
 * the continued samples' tokens span versions. */
Test(rl, partial_rollouts_cap_a_samples_tokens_per_version_and_continue_it, .timeout = 60)
{
    const char *partial_sets[] = {"rl.partial_tokens=200"};
    rl_run_t whole = run_rl(base_workload, NULL, 0);
    rl_run_t partial = run_rl(base_workload, partial_sets, 1);
    const kvio_result_t *p = partial.result, *w = whole.result;
    cr_assert_eq(kvio_result_get(p, KVIO_FIG_RL_STEPS), 4);
    cr_assert(isnan(kvio_result_get(w, KVIO_FIG_RL_CONTINUATIONS)));
    double continuations = kvio_result_get(p, KVIO_FIG_RL_CONTINUATIONS);
    /* The longest sample trained took ceil(tokens / 200) parts. */
    double longest = 0;
    for (size_t s = 0; s < 4; s++)
        longest = fmax(longest, step_number(p, s, "longest_output_tokens"));
    cr_assert_gt(longest, 400);
    cr_assert_geq(continuations, ceil(longest / 200) - 1, "%.0f continuations, longest %.0f",
                  continuations, longest);
    /* Every sample's tokens were generated once over its parts: the same
     * groups (rl.steps x rl.batch) give the same output tokens. */
    cr_assert_eq(kvio_result_get(p, KVIO_FIG_OUTPUT_TOKENS),
                 kvio_result_get(w, KVIO_FIG_OUTPUT_TOKENS));
    cr_assert_eq(kvio_result_get(p, KVIO_FIG_COMPLETED),
                 kvio_result_get(w, KVIO_FIG_COMPLETED) + continuations,
                 "each continuation is a request of the engine's");
    /* Continued samples' later tokens are later versions'; a continuation
     * recomputes its prompt and tokens so far on the new weights. */
    cr_assert_eq(kvio_result_get(w, KVIO_FIG_RL_MIXED_SAMPLES), 0);
    cr_assert_gt(kvio_result_get(p, KVIO_FIG_RL_MIXED_SAMPLES), 0);
    cr_assert_geq(kvio_result_get(p, KVIO_FIG_RL_STALENESS_MAX), 1);
    cr_assert_gt(kvio_result_get(p, KVIO_FIG_RL_RECOMPUTED_TOKENS),
                 200 * kvio_result_get(p, KVIO_FIG_RL_MIXED_SAMPLES));
    /* The long tail is cut: steps are shorter. */
    cr_assert_lt(kvio_result_get(p, KVIO_FIG_RL_LONG_TAIL_S),
                 kvio_result_get(w, KVIO_FIG_RL_LONG_TAIL_S));
    cr_assert_lt(kvio_result_get(p, KVIO_FIG_RL_STEP_S), kvio_result_get(w, KVIO_FIG_RL_STEP_S));
    run_free(&whole);
    run_free(&partial);
}

/* kvio stream's export of a rollout stream keeps its groups: an RL run on
 * the exported trace (stream.group.n: 1, the trace's samples are the
 * groups) trains on the same samples as the run that generated them, and
 * sampling the trace's samples again is refused naming the line. */
Test(rl, an_exported_rollout_stream_replays_as_the_same_rl_run, .timeout = 60)
{
    rl_run_t generated = run_rl(base_workload, NULL, 0);
    char path[1200];
    snprintf(path, sizeof(path), "%s/rollouts.jsonl", generated.dir);
    char *workload = test_write_file(generated.dir, "again.yaml", base_workload);
    test_run_t exported = test_kvio(NULL, "stream", workload, "-o", path, NULL);
    cr_assert_eq(exported.status, 0, "%s", exported.err);
    test_run_free(&exported);
    char trace_set[1300];
    snprintf(trace_set, sizeof(trace_set), "stream.trace.path=%s", path);
    const char *replay_sets[] = {trace_set, "stream.group.n=1", "stream.requests=0"};
    rl_run_t replayed = run_rl(base_workload, replay_sets, 3);
    const kvio_figure_t same[] = {KVIO_FIG_RL_STEP_S, KVIO_FIG_RL_TRAIN_S,
                                  KVIO_FIG_RL_ROLLOUT_TOKENS_PER_S, KVIO_FIG_OUTPUT_TOKENS,
                                  KVIO_FIG_COMPLETED, KVIO_FIG_PREFIX_CACHE_HITS};
    for (size_t f = 0; f < sizeof(same) / sizeof(same[0]); f++)
        cr_assert_eq(kvio_result_get(replayed.result, same[f]),
                     kvio_result_get(generated.result, same[f]), "figure %zu", f);
    for (size_t s = 0; s < 4; s++)
        cr_assert_eq(step_number(replayed.result, s, "group_id_sum"),
                     step_number(generated.result, s, "group_id_sum"), "step %zu", s);
    run_free(&replayed);
    char out[1300];
    snprintf(out, sizeof(out), "%s/again", generated.dir);
    test_run_t twice = test_kvio(NULL, "run", workload, "--set", trace_set, "-o", out, NULL);
    cr_assert_eq(twice.status, 2, "%s", twice.err);
    cr_assert(test_contains(twice.err, "rollouts.jsonl:1: a rollout group's sample (group 1 of "
                                       "8), but stream.group.n: 8 would sample each line again"),
              "%s", twice.err);
    test_run_free(&twice);
    free(workload);
    run_free(&generated);
}

Test(rl, colocated_sync_pays_sleep_and_wake, .timeout = 60)
{
    const char *level1[] = {"rl.placement=colocated", "rl.sleep_level=1"};
    const char *level2[] = {"rl.placement=colocated", "rl.sleep_level=2"};
    rl_run_t one = run_rl(base_workload, level1, 2);
    rl_run_t two = run_rl(base_workload, level2, 2);
    double wake1 = kvio_result_get(one.result, KVIO_FIG_RL_WAKE_S);
    double wake2 = kvio_result_get(two.result, KVIO_FIG_RL_WAKE_S);
    /* Level 2 re-creates only the pool (200 ms); level 1 also moves the
     * 15 GB of weights to host and back. */
    cr_assert_float_eq(wake2, 0.2, 1e-9);
    cr_assert_gt(wake1, wake2 + 0.1);
    rl_run_t separate = run_rl(base_workload, NULL, 0);
    cr_assert(isnan(kvio_result_get(separate.result, KVIO_FIG_RL_WAKE_S)));
    run_free(&separate);
    run_free(&one);
    run_free(&two);
}

/* The question the presets answer: per staleness bound, the step time,
 * the rollout throughput and how stale the trained tokens were. */
Test(rl, compare_over_the_staleness_bound_prints_the_rl_figures, .timeout = 120)
{
    char *dir = test_tmpdir();
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "compare", "rl-async", "--vary", "rl.staleness=0,1,2,4",
                               "--set", "rl.steps=4", "--set", "rl.batch=16", "-o", out, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    const char *rows[] = {"rl step (s)", "rl rollout (tok/s)", "rl rollout (samples/s)",
                          "rl staleness (versions)", "rl off-policy", "staleness=4"};
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
        cr_assert(test_contains(run.out, rows[r]), "no '%s' in:\n%s", rows[r], run.out);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

Test(rl, a_stream_too_short_or_an_emulate_setting_not_built_is_refused_before_the_run, .timeout = 30)
{
    char *dir = test_tmpdir();
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", "rl-sync", "--set", "stream.requests=100", "-o", out,
                               NULL);
    cr_assert_eq(run.status, 2, "%s", run.err);
    cr_assert(test_contains(run.err, "rl.steps x rl.batch = 10 x 64 need 640"), "%s", run.err);
    cr_assert_eq(access(out, F_OK), -1, "no results directory for a refused run");
    test_run_free(&run);
    /* Emulate runs every mode on a host pool with no client rank: the
     * rest is refused naming its key. */
    const char *const refused[][3] = {
        {"ranks.client=1", "rl.mode=sync", "ranks.client in an emulate RL run"},
        {"device.memory=cuda", "rl.mode=sync", "device.memory in an emulate RL"},
        {"train.transport.kind=cuda-ipc", "rl.mode=async",
         "train.transport.kind: cuda-ipc in an emulate RL run"}};
    for (size_t r = 0; r < sizeof(refused) / sizeof(refused[0]); r++) {
        run = test_kvio(NULL, "run", "rl-sync", "--set", "mode=emulate", "--set",
                        refused[r][0], "--set", refused[r][1], "-o", out, NULL);
        cr_assert_eq(run.status, 2, "%s: %s", refused[r][0], run.err);
        cr_assert(test_contains(run.err, refused[r][2]), "%s", run.err);
        cr_assert_eq(access(out, F_OK), -1, "no results directory for a refused run");
        test_run_free(&run);
    }
    test_rmtree(dir);
    free(dir);
}

/* The trainer rank's transport is checked before the run as every
 * transport is (kvio_xfer_preflight): a Redis that does not answer fails
 * the run naming the key, with no results directory, instead of at the
 * ranks' set-up. */
Test(rl, a_trainer_rank_transport_that_cannot_connect_is_refused_before_the_run, .timeout = 30)
{
    char *dir = test_tmpdir();
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", "rl-sync", "--set", "mode=emulate", "--set",
                               "rl.mode=async", "--set", "ranks.serve=1", "--set",
                               "serve.kvcache.blocks=2048", "--set", "rl.weight_bytes=1MiB",
                               "--set", "train.transport.kind=redis", "--set",
                               "train.transport.redis.url=redis://127.0.0.1:1", "-o", out, NULL);
    cr_assert_eq(run.status, 1, "%s", run.err);
    cr_assert(test_contains(run.err, "train.transport.kind: redis in an emulate RL run"), "%s",
              run.err);
    cr_assert(test_contains(run.err, "redis://127.0.0.1:1"), "%s", run.err);
    cr_assert_eq(access(out, F_OK), -1, "no results directory for a refused run");
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* Emulate: a small model's synchronous colocated steps in real time. */
static const char *const emulate_workload =
    "name: rl-emulate\n"
    "seed: 5\n"
    "mode: emulate\n"
    "model: {preset: llama3.2-1b}\n"
    "gpu: {preset: h200}\n"
    "ranks: {serve: 1}\n"
    "serve:\n"
    "  engine: {max_num_seqs: 64, max_num_batched_tokens: 4096}\n"
    "  kvcache: {block_size: 16, blocks: 64}\n"
    "stream:\n"
    "  requests: 6\n"
    "  arrival: {process: batch}\n"
    "  input_tokens: 64\n"
    "  output_tokens: {dist: uniform, low: 8, high: 32}\n"
    "  group: {n: 4}\n"
    "rl: {mode: sync, placement: colocated, steps: 3, batch: 2, train_time: 20ms,\n"
    "     weight_bytes: 8MiB, pool_create: 100s, sync_latency: 100s}\n";

/* Each step's sync copies the trainer's weight bytes into the rollout's
 * (checksummed), and the sleep and the wake are measured, not modelled:
 * the model's wake would be rl.pool_create and its sync rl.sync_latency,
 * both 100 s here. */
static void check_emulated_steps(const char *level, double weight_bytes)
{
    const char *sets[] = {level};
    rl_run_t run = run_rl(emulate_workload, sets, 1);
    cr_assert(kvio_result_valid(run.result), "%s: %s", level,
              kvio_result_num_warnings(run.result) > 0
                  ? kvio_result_warning_message(run.result, 0)
                  : "");
    cr_assert_float_eq(kvio_result_get(run.result, KVIO_FIG_RL_STEPS), 3, 1e-9);
    cr_assert_float_eq(kvio_result_get(run.result, KVIO_FIG_RL_SYNC_BYTES), weight_bytes * 3,
                       0.5, "%s", level);
    double wake = kvio_result_get(run.result, KVIO_FIG_RL_WAKE_S);
    double sleep = kvio_result_get(run.result, KVIO_FIG_RL_SLEEP_S);
    double sync = kvio_result_get(run.result, KVIO_FIG_RL_SYNC_S);
    cr_assert_gt(wake, 0, "%s", level);
    cr_assert_gt(sleep, 0, "%s", level);
    cr_assert_gt(sync, 0, "%s", level);
    cr_assert_geq(wake, sleep, "%s: the wake figure holds the sleep", level);
    cr_assert_lt(wake, 100, "%s: wake %g s is measured, not rl.pool_create", level, wake);
    cr_assert_lt(sync, 100, "%s: sync %g s is measured, not rl.sync_latency", level, sync);
    /* Training is the configured 20 ms, waited for real. */
    double train = kvio_result_get(run.result, KVIO_FIG_RL_TRAIN_S);
    cr_assert_geq(train, 0.02, "%s", level);
    cr_assert_lt(train, test_seconds(0.5), "%s", level);
    cr_assert_gt(step_number(run.result, 2, "sleep_s"), 0, "%s", level);
    run_free(&run);
}

Test(rl, an_emulated_colocated_step_moves_real_weight_bytes_and_measures_its_wake,
     .timeout = 120)
{
    check_emulated_steps("rl.sleep_level=1", 8.0 * 1048576);
    check_emulated_steps("rl.sleep_level=2", 8.0 * 1048576);
}

Test(rl, emulate_refuses_weights_this_machine_cannot_hold, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", emulate_workload);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(dir, "run", file, "--set", "rl.weight_bytes=64TiB", "-o", out,
                               NULL);
    cr_assert_eq(run.status, 2, "%s", run.err);
    cr_assert(test_contains(run.err, "rl.weight_bytes: the RL run's weights need"), "%s",
              run.err);
    cr_assert(test_contains(run.err, "GiB available"), "%s", run.err);
    cr_assert_eq(access(out, F_OK), -1, "no results directory for a refused run");
    test_run_free(&run);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* The emulate workload with the trainer on a rank of its own. */
static const char *const separate_sets[] = {"rl.placement=separate"};

static double rl_figure(const json_t *summary, const char *path)
{
    char full[256];
    snprintf(full, sizeof(full), "metrics.rl.%s", path);
    return test_json_number(summary, full);
}

/* Synchronous separate: the trainer is rank 1, its weight bytes move each
 * step over UCX into the rollout's free slot, where they are checked;
 * the rollout idles (no sleep, no wake) while it trains, and the sync is
 * measured (the model's would be rl.sync_latency, 100 s). */
static void check_separate_steps(const kvio_result_t *result)
{
    cr_assert(kvio_result_valid(result));
    cr_assert_str_eq(kvio_result_text(result, KVIO_FIG_RL_MODE), "sync separate");
    cr_assert_float_eq(kvio_result_get(result, KVIO_FIG_RL_STEPS), 3, 1e-9);
    cr_assert_float_eq(kvio_result_get(result, KVIO_FIG_RL_SYNC_BYTES), 3 * 8.0 * 1048576, 0.5);
    double sync = kvio_result_get(result, KVIO_FIG_RL_SYNC_S);
    cr_assert_gt(sync, 0);
    cr_assert_lt(sync, 100, "sync %g s is measured, not rl.sync_latency", sync);
    double train = kvio_result_get(result, KVIO_FIG_RL_TRAIN_S);
    cr_assert_geq(train, 0.02);
    cr_assert_lt(train, test_seconds(0.5));
    cr_assert(!kvio_result_has(result, KVIO_FIG_RL_WAKE_S), "a separate rollout never sleeps");
    cr_assert(!kvio_result_has(result, KVIO_FIG_RL_SLEEP_S));
    /* The rollout idled through each training and sync. */
    cr_assert_gt(kvio_result_get(result, KVIO_FIG_RL_ROLLOUT_IDLE), 0);
    for (size_t s = 0; s < 3; s++) {
        double generation_end = step_number(result, s, "batch_ready_s");
        double end = step_number(result, s, "end_s");
        cr_assert_geq(end - generation_end, step_number(result, s, "train_s"), "step %zu", s);
    }
    const json_t *trainer = kvio_result_detail(result, "rl.trainer");
    cr_assert_not_null(trainer);
    cr_assert(test_contains(test_json_string(trainer, "transport"), "ucx"), "%s",
              test_json_string(trainer, "transport"));
}

Test(rl, an_emulated_separate_step_moves_the_trainer_ranks_weights_over_ucx, .timeout = 120)
{
    rl_run_t run = run_rl(emulate_workload, separate_sets, 1);
    check_separate_steps(run.result);
    cr_assert_str_eq(test_json_string(kvio_result_detail(run.result, "rl.trainer"), "runtime"),
                     "local");
    run_free(&run);
}

Test(rl, mpirun_runs_the_separate_trainer_as_a_process_of_its_own, .timeout = 120)
{
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", emulate_workload);
    json_t *summary = test_mpirun_kvio(dir, 2, "w.yaml --set rl.placement=separate", test_seconds(100));
    cr_assert_str_eq(test_json_string(summary, "metrics.rl.trainer.runtime"), "mpi");
    cr_assert_str_eq(test_json_string(summary, "metrics.rl.mode"), "sync separate");
    cr_assert_float_eq(rl_figure(summary, "steps"), 3, 1e-9);
    cr_assert_float_eq(rl_figure(summary, "sync_bytes"), 3 * 8.0 * 1048576, 0.5);
    cr_assert_gt(rl_figure(summary, "sync_s"), 0);
    cr_assert_lt(rl_figure(summary, "sync_s"), 100);
    json_decref(summary);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* Asynchronous in real time: with eta = 0 the trainer takes the groups
 * synchronous separate takes, step by step; with eta = 2 generation goes
 * on while it trains (an 80 ms step beside about 100 ms of generation), so
 * tokens lag and a step is shorter. */
Test(rl, emulated_async_trains_on_sync_at_staleness_0_and_overlaps_above, .timeout = 120)
{
    const char *sync_sets[] = {"rl.placement=separate", "rl.train_time=80ms"};
    const char *eta0_sets[] = {"rl.mode=async", "rl.staleness=0", "rl.train_time=80ms"};
    const char *eta2_sets[] = {"rl.mode=async", "rl.staleness=2", "rl.train_time=80ms"};
    rl_run_t sync = run_rl(emulate_workload, sync_sets, 2);
    rl_run_t eta0 = run_rl(emulate_workload, eta0_sets, 3);
    rl_run_t eta2 = run_rl(emulate_workload, eta2_sets, 3);
    for (size_t s = 0; s < 3; s++)
        cr_assert_float_eq(step_number(eta0.result, s, "group_id_sum"),
                           step_number(sync.result, s, "group_id_sum"), 1e-9, "step %zu", s);
    cr_assert_float_eq(kvio_result_get(eta0.result, KVIO_FIG_RL_STALENESS_MAX), 0, 1e-9);
    cr_assert_float_eq(kvio_result_get(eta2.result, KVIO_FIG_RL_SYNC_BYTES), 3 * 8.0 * 1048576,
                       0.5, "every step's weights moved");
    cr_assert_gt(kvio_result_get(eta2.result, KVIO_FIG_RL_STALENESS_MAX), 0);
    cr_assert_leq(kvio_result_get(eta2.result, KVIO_FIG_RL_STALENESS_MAX), 2);
    double sync_step = kvio_result_get(sync.result, KVIO_FIG_RL_STEP_S);
    double async_step = kvio_result_get(eta2.result, KVIO_FIG_RL_STEP_S);
    cr_assert_lt(async_step, 0.9 * sync_step, "async %g s, sync %g s", async_step, sync_step);
    run_free(&sync);
    run_free(&eta0);
    run_free(&eta2);
}
