/* Scheduling policies and output-length predictors on small exact cases,
 * table-driven: how each policy orders a waiting queue, whom it admits and
 * whom it preempts; what each predictor predicts; the pkas projection; and
 * the engine cases the schedulers broke (a request preempting itself at the
 * head of the running list under priority; requests arriving together). */
#include "kvio/sched.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/engine.h"
#include "kvio/run.h"
#include "tests/helpers.h"

#define MAX_CASE 6
#define MAX_POLICIES 10

/* A scheduler from its section's YAML ("{policy: lpm, lpm: {max_queue:
 * 3}}"); the config outlives it (the scheduler borrows its options), so
 * each test frees both with destroy(). */
typedef struct made {
    kvio_sched_config_t config;
    kvio_sched_t *sched;
} made_t;

static made_t *create(const char *scheduler)
{
    made_t *made = calloc(1, sizeof(*made));
    cr_assert_not_null(made);
    char error[512];
    cr_assert_eq(kvio_config_bind_text(kvio_sched_options, scheduler, "test", &made->config,
                                       error, sizeof(error)),
                 KVIO_OK, "%s: %s", scheduler, error);
    cr_assert_eq(kvio_sched_create(&made->config, 7, &made->sched), KVIO_OK, "%s", scheduler);
    return made;
}

static void destroy(made_t *made)
{
    kvio_sched_destroy(made->sched);
    kvio_config_free(kvio_sched_options, &made->config);
    free(made);
}

/* ---------- order ---------- */

/* Hashes for dfs-weight: a, b, and c under a. */
static const kvio_hash_t hash_a[] = {{1, 1}};
static const kvio_hash_t hash_b[] = {{2, 2}};
static const kvio_hash_t hash_ac[] = {{1, 1}, {3, 3}};

typedef struct order_case {
    const char *what;
    const char *scheduler; /* the serve.scheduler section */
    int64_t now_ns;
    size_t count;
    kvio_sched_request_t requests[MAX_CASE]; /* in the engine's FCFS order */
    uint64_t expected[MAX_CASE];             /* ids after ordering */
} order_case_t;

static const order_case_t order_cases[] = {
    {"fcfs keeps the queue as it is", "{policy: fcfs}", 0, 3,
     {{.id = 0, .priority = 5}, {.id = 1, .priority = 0}, {.id = 2, .hit_tokens = 64}},
     {0, 1, 2}},
    {"priority: lower value first, ties by arrival", "{policy: priority}", 0, 4,
     {{.id = 0, .priority = 2, .arrival_ns = 0},
      {.id = 1, .priority = 0, .arrival_ns = 30},
      {.id = 2, .priority = 0, .arrival_ns = 10},
      {.id = 3, .priority = 1, .arrival_ns = 0}},
     {2, 1, 3, 0}},
    {"sjf: least predicted output left first", "{policy: sjf}", 0, 3,
     {{.id = 0, .predicted_output = 300},
      {.id = 1, .predicted_output = 100, .generated = 0},
      {.id = 2, .predicted_output = 400, .generated = 350}},
     {2, 1, 0}},
    {"sjf: a request waiting past aging goes first", "{policy: sjf, sjf: {aging: 1s}}",
     2000000000, 3,
     {{.id = 0, .predicted_output = 10, .arrival_ns = 1500000000},
      {.id = 1, .predicted_output = 900, .arrival_ns = 0},
      {.id = 2, .predicted_output = 5, .arrival_ns = 1800000000}},
     {1, 2, 0}},
    {"lpm: longest cached prefix first, stable", "{policy: lpm}", 0, 3,
     {{.id = 0, .hit_tokens = 16}, {.id = 1, .hit_tokens = 64}, {.id = 2, .hit_tokens = 16}},
     {1, 0, 2}},
    {"lpm: a queue past max_queue stays FCFS", "{policy: lpm, lpm: {max_queue: 3}}", 0, 4,
     {{.id = 0, .hit_tokens = 0}, {.id = 1, .hit_tokens = 64}, {.id = 2, .hit_tokens = 32},
      {.id = 3, .hit_tokens = 16}},
     {0, 1, 2, 3}},
    {"dfs-weight: the heavier prefix subtree first, children before a node's own",
     "{policy: dfs-weight}", 0, 5,
     {{.id = 0, .hit_tokens = 16, .hashes = hash_a, .num_hashes = 1},
      {.id = 1, .hit_tokens = 16, .hashes = hash_b, .num_hashes = 1},
      {.id = 2, .hit_tokens = 32, .hashes = hash_ac, .num_hashes = 2},
      {.id = 3, .hit_tokens = 16, .hashes = hash_b, .num_hashes = 1},
      {.id = 4, .hit_tokens = 16, .hashes = hash_b, .num_hashes = 1}},
     {1, 3, 4, 2, 0}},
    {"conservative orders as fcfs", "{policy: conservative}", 0, 2,
     {{.id = 0, .priority = 9}, {.id = 1}}, {0, 1}},
    {"pkas orders as fcfs", "{policy: pkas}", 0, 2,
     {{.id = 0, .predicted_output = 900}, {.id = 1, .predicted_output = 1}}, {0, 1}},
    {"lof: the longest max_tokens first, stable, no limit as the longest", "{policy: lof}", 0,
     5,
     {{.id = 0, .max_tokens = 64}, {.id = 1, .max_tokens = 512}, {.id = 2, .max_tokens = 64},
      {.id = 3, .max_tokens = 0}, {.id = 4, .max_tokens = 128, .output_tokens = 9999}},
     {3, 1, 4, 0, 2}},
    {"random: a shuffle, the same for the same seed", "{policy: random}", 0, 6,
     {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}, {.id = 4}, {.id = 5}}, {4, 5, 0, 3, 2, 1}},
};

Test(sched, every_policy_orders_the_waiting_queue_as_documented, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(order_cases) / sizeof(order_cases[0]); c++) {
        const order_case_t *test = &order_cases[c];
        made_t *made = create(test->scheduler);
        kvio_sched_t *sched = made->sched;
        kvio_sched_request_t requests[MAX_CASE];
        kvio_sched_request_t *queue[MAX_CASE];
        memcpy(requests, test->requests, sizeof(requests));
        for (size_t i = 0; i < test->count; i++)
            queue[i] = &requests[i];
        kvio_sched_view_t view = {.block_size = 16, .capacity_blocks = 100,
                                  .free_blocks = 100, .now_ns = test->now_ns};
        kvio_sched_order(sched, queue, test->count, &view);
        for (size_t i = 0; i < test->count; i++)
            cr_expect_eq(queue[i]->id, test->expected[i], "%s: position %zu holds %llu, not %llu",
                         test->what, i, (unsigned long long)queue[i]->id,
                         (unsigned long long)test->expected[i]);
        destroy(made);
    }
}

/* ---------- admit ---------- */

typedef struct admit_case {
    const char *what;
    const char *scheduler;
    size_t num_running;
    kvio_sched_request_t running[MAX_CASE];
    kvio_sched_request_t candidate;
    uint32_t capacity_blocks;
    bool expected;
} admit_case_t;

static const admit_case_t admit_cases[] = {
    {"fcfs admits whatever the blocks allow", "{policy: fcfs}", 1,
     {{.prompt_tokens = 1000, .predicted_output = 5000}},
     {.prompt_tokens = 1000, .predicted_output = 5000}, 10, true},
    {"priority admits likewise", "{policy: priority}", 1, {{.prompt_tokens = 1000}},
     {.prompt_tokens = 1000}, 10, true},
    {"sjf admits likewise", "{policy: sjf}", 1, {{.prompt_tokens = 1000}},
     {.prompt_tokens = 1000}, 10, true},
    {"lpm admits likewise", "{policy: lpm}", 1, {{.prompt_tokens = 1000}},
     {.prompt_tokens = 1000}, 10, true},
    {"dfs-weight admits likewise", "{policy: dfs-weight}", 1, {{.prompt_tokens = 1000}},
     {.prompt_tokens = 1000}, 10, true},
    /* (16 + 48) / 16 = 4 blocks each with max_tokens reserved: 8 of 8. */
    {"conservative: max_tokens of all fit", "{policy: conservative}", 1,
     {{.prompt_tokens = 16, .max_tokens = 48}}, {.prompt_tokens = 16, .max_tokens = 48}, 8,
     true},
    {"conservative: one block short", "{policy: conservative}", 1,
     {{.prompt_tokens = 16, .max_tokens = 48}}, {.prompt_tokens = 16, .max_tokens = 48}, 7,
     false},
    {"conservative: nothing running, never starved", "{policy: conservative}", 0, {{0}},
     {.prompt_tokens = 16, .max_tokens = 4800}, 7, true},
    /* Running a (16 + 16 left) and b (16 + 48 left); candidate c (100 + 50):
     * projected peak 14 blocks (see the projection test). */
    {"pkas: projected peak 14 within 15 x 0.95", "{policy: pkas}", 2,
     {{.prompt_tokens = 16, .predicted_output = 16, .held_blocks = 1},
      {.prompt_tokens = 16, .predicted_output = 48, .held_blocks = 1}},
     {.prompt_tokens = 100, .predicted_output = 50, .held_blocks = 7}, 15, true},
    {"pkas: projected peak 14 over 14 x 0.95", "{policy: pkas}", 2,
     {{.prompt_tokens = 16, .predicted_output = 16, .held_blocks = 1},
      {.prompt_tokens = 16, .predicted_output = 48, .held_blocks = 1}},
     {.prompt_tokens = 100, .predicted_output = 50, .held_blocks = 7}, 14, false},
    {"pkas: nothing running, never starved", "{policy: pkas}", 0, {{0}},
     {.prompt_tokens = 1000, .predicted_output = 5000}, 4, true},
};

Test(sched, every_policy_admits_as_documented, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(admit_cases) / sizeof(admit_cases[0]); c++) {
        const admit_case_t *test = &admit_cases[c];
        made_t *made = create(test->scheduler);
        kvio_sched_t *sched = made->sched;
        kvio_sched_request_t *running[MAX_CASE];
        for (size_t i = 0; i < test->num_running; i++)
            running[i] = (kvio_sched_request_t *)&test->running[i];
        uint32_t used = 0;
        for (size_t i = 0; i < test->num_running; i++)
            used += test->running[i].held_blocks;
        kvio_sched_view_t view = {.running = running, .num_running = test->num_running,
                                  .block_size = 16, .capacity_blocks = test->capacity_blocks,
                                  .free_blocks = test->capacity_blocks - used,
                                  .used_blocks = used};
        cr_expect_eq(kvio_sched_admit(sched, &test->candidate, &view), test->expected, "%s",
                     test->what);
        destroy(made);
    }
}

/* ---------- victim ---------- */

typedef struct victim_case {
    const char *what;
    const char *policies[MAX_POLICIES]; /* each picks the same victim */
    size_t count;
    kvio_sched_request_t running[MAX_CASE];
    size_t expected;
} victim_case_t;

static const victim_case_t victim_cases[] = {
    {"the last admitted (a resumed request counts as new)",
     {"fcfs", "sjf", "lpm", "dfs-weight", "conservative", "pkas"}, 3,
     {{.admit_seq = 4}, {.admit_seq = 9}, {.admit_seq = 6}}, 1},
    {"the last admitted, at the end", {"fcfs", "pkas"}, 3,
     {{.admit_seq = 1}, {.admit_seq = 2}, {.admit_seq = 3}}, 2},
    {"priority: the worst priority", {"priority"}, 3,
     {{.priority = 1, .admit_seq = 9}, {.priority = 7, .admit_seq = 1},
      {.priority = 3, .admit_seq = 5}},
     1},
    {"priority: among equals, the latest arrival", {"priority"}, 3,
     {{.priority = 2, .arrival_ns = 50}, {.priority = 2, .arrival_ns = 90},
      {.priority = 2, .arrival_ns = 10}},
     1},
};

Test(sched, every_policy_picks_its_victim, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(victim_cases) / sizeof(victim_cases[0]); c++) {
        const victim_case_t *test = &victim_cases[c];
        for (size_t p = 0; p < MAX_POLICIES && test->policies[p] != NULL; p++) {
            char scheduler[64];
            snprintf(scheduler, sizeof(scheduler), "{policy: %s}", test->policies[p]);
            made_t *made = create(scheduler);
            kvio_sched_request_t *running[MAX_CASE];
            for (size_t i = 0; i < test->count; i++)
                running[i] = (kvio_sched_request_t *)&test->running[i];
            kvio_sched_view_t view = {.running = running, .num_running = test->count,
                                      .block_size = 16, .capacity_blocks = 10};
            cr_expect_eq(kvio_sched_victim(made->sched, &view), test->expected, "%s (%s)",
                         test->what, test->policies[p]);
            destroy(made);
        }
    }
}

/* ---------- the pkas projection ---------- */

Test(sched, pkas_projection_counts_blocks_until_each_request_ends, .timeout = 10)
{
    /* Two running requests of 16 tokens (a block each): one ends after 16
     * more tokens, one after 48; block 16. Peak just before the first ends
     * (t = 15): 2 + 2. */
    kvio_sched_request_t a = {.prompt_tokens = 16, .predicted_output = 16, .held_blocks = 1};
    kvio_sched_request_t b = {.prompt_tokens = 16, .predicted_output = 48, .held_blocks = 1};
    kvio_sched_request_t *running[] = {&a, &b};
    kvio_sched_view_t view = {.running = running, .num_running = 2, .block_size = 16,
                              .capacity_blocks = 10, .used_blocks = 2};
    /* t = 15: a 31 tokens (2 blocks), b 31 (2); t = 47: b alone 63 (4). */
    cr_assert_eq(kvio_sched_projected_peak(&view, NULL), 4);
    /* A candidate whose admission takes 7 free blocks (its 100-token prompt). */
    kvio_sched_request_t c = {.prompt_tokens = 100, .predicted_output = 50, .held_blocks = 7};
    /* t = 15: 2 + 2 + ceil(115/16)=8 → 12; t = 47: 4 + ceil(147/16)=10 → 14 */
    cr_assert_eq(kvio_sched_projected_peak(&view, &c), 14);
    /* A request past its prediction is assumed to end after one more token. */
    b.generated = 60;
    b.held_blocks = 5;
    view.used_blocks = 6;
    /* t = 0: a 16 tokens (1 block), b 76 (5); then a alone. */
    cr_assert_eq(kvio_sched_projected_peak(&view, NULL), 1 + 5);
}

/* #53 item 3: a prefix the running requests share is held once by the pool,
 * and a candidate that hits it adds only its own blocks. With a 4,000-token
 * system prompt (250 blocks of 16) and 10-token questions, ten running
 * requests hold 250 + 10 blocks, not 2,600: an eleventh fits in 300. */
Test(sched, pkas_counts_a_shared_prefix_once, .timeout = 10)
{
    kvio_sched_request_t requests[10];
    kvio_sched_request_t *running[10];
    for (int i = 0; i < 10; i++) {
        /* 4,010 tokens: the 250 shared blocks and one of its own. */
        requests[i] = (kvio_sched_request_t){.prompt_tokens = 4010, .predicted_output = 20,
                                             .held_blocks = 251, .shared_blocks = 250};
        running[i] = &requests[i];
    }
    kvio_sched_view_t view = {.running = running, .num_running = 10, .block_size = 16,
                              .capacity_blocks = 300, .used_blocks = 260};
    /* The candidate hits the 250 shared blocks (in use: free to it) and takes
     * one block of its own. */
    kvio_sched_request_t candidate = {.prompt_tokens = 4010, .predicted_output = 20,
                                      .held_blocks = 1};
    uint64_t peak = kvio_sched_projected_peak(&view, &candidate);
    /* 260 + 1, and each of the 11 grows by one block within 20 tokens. */
    cr_assert_eq(peak, 260 + 1 + 11, "peak %llu", (unsigned long long)peak);
}

/* ---------- predictors ---------- */

typedef struct predict_case {
    const char *what;
    const char *scheduler;
    uint32_t output, max_tokens;
    uint32_t expected;
} predict_case_t;

static const predict_case_t predict_cases[] = {
    {"oracle: the true output", "{predictor: oracle}", 123, 0, 123},
    {"oracle: at most max_tokens", "{predictor: oracle}", 123, 100, 100},
    {"constant: the configured value", "{predictor: constant, constant: {value: 300}}", 5, 0,
     300},
    {"constant: at most max_tokens", "{predictor: constant, constant: {value: 300}}", 5, 64, 64},
    {"noisy with sigma 0: the true output", "{predictor: noisy, noisy: {sigma: 0}}", 77, 0, 77},
    {"history with nothing seen: the fallback",
     "{predictor: history, history: {fallback: 300}}", 5, 0, 300},
};

Test(sched, every_predictor_predicts_as_documented, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(predict_cases) / sizeof(predict_cases[0]); c++) {
        const predict_case_t *test = &predict_cases[c];
        made_t *made = create(test->scheduler);
        kvio_sched_request_t request = {.prompt_tokens = 100, .output_tokens = test->output,
                                        .max_tokens = test->max_tokens};
        kvio_sched_predict(made->sched, &request);
        cr_expect_eq(request.predicted_output, test->expected, "%s: %u", test->what,
                     request.predicted_output);
        destroy(made);
    }
}

Test(sched, noisy_predictions_spread_lognormally_around_the_truth, .timeout = 10)
{
    /* sigma 0.5: log(prediction / truth) ~ N(0, 0.5); 2,000 draws. */
    made_t *made = create("{policy: pkas, predictor: noisy}");
    kvio_sched_t *sched = made->sched;
    enum { DRAWS = 2000 };
    double sum = 0, sum_squares = 0;
    for (int i = 0; i < DRAWS; i++) {
        kvio_sched_request_t request = {.prompt_tokens = 10, .output_tokens = 10000};
        kvio_sched_predict(sched, &request);
        double error = log((double)request.predicted_output / 10000.0);
        sum += error;
        sum_squares += error * error;
    }
    double mean = sum / DRAWS, sigma = sqrt(sum_squares / DRAWS - mean * mean);
    cr_expect(fabs(mean) < 0.05, "mean log error %.3f", mean);
    cr_expect(fabs(sigma - 0.5) < 0.05, "sigma of the log error %.3f", sigma);
    destroy(made);
}

Test(sched, history_predicts_a_quantile_of_what_its_bucket_saw, .timeout = 10)
{
    made_t *made = create("{policy: pkas, predictor: history}");
    kvio_sched_t *sched = made->sched;
    /* Prompts of 100 tokens (bucket 64..127) finished with 1..100 tokens. */
    for (uint32_t generated = 1; generated <= 100; generated++) {
        kvio_sched_request_t done = {.prompt_tokens = 100, .generated = generated};
        kvio_sched_observe(sched, &done);
    }
    kvio_sched_request_t same = {.prompt_tokens = 120, .output_tokens = 1};
    kvio_sched_predict(sched, &same);
    /* The 0.9 quantile of 1..100, within the histogram's resolution. */
    cr_expect(same.predicted_output >= 85 && same.predicted_output <= 95, "%u",
              same.predicted_output);
    /* A bucket that saw nothing borrows its nearest neighbour's. */
    kvio_sched_request_t other = {.prompt_tokens = 3000, .output_tokens = 1};
    kvio_sched_predict(sched, &other);
    cr_expect_eq(other.predicted_output, same.predicted_output);
    destroy(made);
}

/* ---------- the engine under the schedulers ---------- */

/* Under priority, request 0 (priority 5) is admitted first and heads the
 * running list; request 1 (priority 0) follows. When 0 needs a block and
 * none is free, the worst priority gives way: 0 itself. The step scheduled
 * nothing, which read as "request 0 cannot start: it needs more KV blocks
 * than the 4 the cache holds" (it needs 3). vLLM's next step follows at
 * once; so does kvio's, and both requests finish. */
Test(sched, a_request_preempting_itself_at_the_head_is_not_a_dead_end, .timeout = 10)
{
    kvio_engine_config_t config = {.max_num_seqs = 8, .max_num_batched_tokens = 256,
                                   .chunked_prefill = true,
                                   .preemption = KVIO_PREEMPT_RECOMPUTE};
    kvio_sched_config_t sched = {0};
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_sched_options, &sched, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_choice_set(&sched.policy, "priority"), KVIO_OK);
    kvio_cost_t *cost = test_linear_cost();
    kvio_engine_params_t params = {
        .config = &config, .num_blocks = 4, .block_size = 16, .prefix_caching = false,
        .eviction = "lru", .sched = &sched, .seed = 1, .cost = cost,
        .kv_bytes_per_token = 131072, .host_bandwidth = 64e9};
    kvio_engine_t *engine = NULL;
    cr_assert_eq(kvio_engine_create(&params, &engine, error, sizeof(error)), KVIO_OK, "%s", error);
    test_engine_add(engine, 0, 20, 20, 5, 0); /* 39 tokens at most: 3 blocks */
    int64_t now_ns = 0;
    bool second_added = false, preempted_itself = false;
    for (int step = 0; step < 1000 && kvio_engine_has_work(engine); step++) {
        if (!second_added && step == 1) {
            test_engine_add(engine, 1, 20, 20, 0, now_ns); /* 3 blocks too: 6 > 4 */
            second_added = true;
        }
        kvio_engine_iteration_t iteration;
        cr_assert_eq(kvio_engine_schedule(engine, now_ns, &iteration), KVIO_OK);
        cr_assert_gt(iteration.duration_ns, 0, "step %d scheduled nothing (%u running, %u "
                     "waiting)", step, iteration.running, iteration.waiting);
        uint64_t waiting[4];
        if (kvio_engine_waiting_ids(engine, waiting, 4) == 1 && waiting[0] == 0)
            preempted_itself = true;
        now_ns += iteration.duration_ns;
        kvio_engine_complete(engine, now_ns);
    }
    cr_assert_not(kvio_engine_has_work(engine));
    cr_expect(preempted_itself, "the case did not arise: request 0 never gave way");
    cr_expect_eq(kvio_engine_metrics(engine)->requests, 2);
    kvio_engine_destroy(engine);
    kvio_cost_destroy(cost);
    kvio_config_free(kvio_sched_options, &sched);
}

/* Requests arriving at the same instant on an idle engine were split: the
 * first started alone (offline-batch: 1 request in the first iteration
 * while 9,973 waited). All arrivals of an instant are queued first. */
Test(sched, requests_arriving_together_start_together, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml",
                                 "name: together\nmode: simulate\n"
                                 "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
                                 "stream:\n  requests: 12\n  arrival: {process: batch}\n"
                                 "  input_tokens: {dist: constant, value: 100}\n"
                                 "  output_tokens: {dist: constant, value: 5}\n");
    kvio_workload_t workload;
    char error[1024], out[1100], path[1200];
    cr_assert_eq(kvio_workload_load(file, NULL, 0, &workload, error, sizeof(error)), KVIO_OK,
                 "%s", error);
    snprintf(out, sizeof(out), "%s/out", dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    snprintf(path, sizeof(path), "%s/iterations.csv", out);
    test_csv_t csv = test_csv_read(path);
    cr_assert_gt(csv.num_rows, 0);
    cr_expect_eq(test_csv_number(&csv, 0, "batch_size"), 12);
    cr_expect_eq(test_csv_number(&csv, 0, "prefill_tokens"), 1200);
    cr_expect_eq(test_csv_number(&csv, 0, "waiting"), 0);
    test_csv_free(&csv);
    kvio_workload_free(&workload);
    free(file);
    test_rmtree(dir);
    free(dir);
}
