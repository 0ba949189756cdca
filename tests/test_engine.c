/* Golden cases of the engine's vLLM v1 semantics (block size 16): admission,
 * chunked prefill with a long-prefill threshold, head-of-line blocking,
 * preemption by recompute, and priority order (the schedulers' own cases:
 * tests/test_sched.c). */
#include "kvio/engine.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/hash.h"
#include "kvio/results.h"
#include "kvio/update.h"
#include "serve/serve_int.h"
#include "tests/helpers.h"

typedef struct fixture {
    kvio_engine_config_t config;
    kvio_sched_config_t sched;
    kvio_cost_t *cost;
    kvio_engine_t *engine;
    long long now_ns;
} fixture_t;

/* setup, keeping at most itl_records_max gaps between tokens. */
static void setup_itls(fixture_t *f, int64_t budget, int64_t max_seqs, bool chunked,
                       int64_t threshold, uint32_t blocks, bool prefix_caching,
                       const char *policy, uint64_t itl_records_max)
{
    memset(f, 0, sizeof(*f));
    f->config = (kvio_engine_config_t){.max_num_seqs = max_seqs,
                                       .max_num_batched_tokens = budget,
                                       .chunked_prefill = chunked,
                                       .long_prefill_token_threshold = threshold,
                                       .preemption = KVIO_PREEMPT_RECOMPUTE};
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_sched_options, &f->sched, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_choice_set(&f->sched.policy, policy), KVIO_OK, "%s", policy);
    f->cost = test_linear_cost();
    kvio_engine_params_t params = {
        .config = &f->config, .num_blocks = blocks, .block_size = 16,
        .prefix_caching = prefix_caching, .free_order = 0, .eviction = "lru",
        .sched = &f->sched, .seed = 1, .cost = f->cost, .kv_bytes_per_token = 131072,
        .host_bandwidth = 64e9, .itl_records_max = itl_records_max,
    };
    cr_assert_eq(kvio_engine_create(&params, &f->engine, error, sizeof(error)), KVIO_OK, "%s",
                 error);
}

static void setup(fixture_t *f, int64_t budget, int64_t max_seqs, bool chunked,
                  int64_t threshold, uint32_t blocks, bool prefix_caching, const char *policy)
{
    setup_itls(f, budget, max_seqs, chunked, threshold, blocks, prefix_caching, policy, 0);
}

static void teardown(fixture_t *f)
{
    kvio_engine_destroy(f->engine);
    kvio_cost_destroy(f->cost);
    kvio_config_free(kvio_sched_options, &f->sched);
}

/* Adds a request of distinct content; its hashes cover prompt + output. */
static void add(fixture_t *f, uint64_t id, uint32_t prompt, uint32_t output, int32_t priority,
                int64_t arrival_ns)
{
    test_engine_add(f->engine, id, prompt, output, priority, arrival_ns);
}

/* Runs one iteration; returns the scheduled (id, tokens) list. */
static size_t step(fixture_t *f, kvio_engine_scheduled_t *out, size_t max)
{
    return test_engine_step(f->engine, &f->now_ns, out, max);
}

Test(engine, short_requests_all_admitted_in_arrival_order, .timeout = 10)
{
    fixture_t f;
    setup(&f, 8192, 16, true, 0, 1000, true, "fcfs");
    for (uint64_t id = 0; id < 10; id++)
        add(&f, id, 10, 5, 0, 0);
    kvio_engine_scheduled_t out[16];
    cr_assert_eq(step(&f, out, 16), 10);
    for (uint64_t id = 0; id < 10; id++) {
        cr_assert_eq(out[id].id, id);
        cr_assert_eq(out[id].tokens, 10);
    }
    uint64_t running[16];
    cr_assert_eq(kvio_engine_running_ids(f.engine, running, 16), 10);
    for (uint64_t id = 0; id < 10; id++)
        cr_assert_eq(running[id], id);
    teardown(&f);
}

Test(engine, chunked_prefill_with_long_prefill_threshold, .timeout = 10)
{
    fixture_t f;
    setup(&f, 1024, 3, true, 400, 1000, true, "fcfs");
    for (uint64_t id = 0; id < 3; id++)
        add(&f, id, 800, 10, 0, 0);
    const uint32_t expected[3][3] = {{400, 400, 224}, {400, 400, 224}, {1, 1, 352}};
    for (int iteration = 0; iteration < 3; iteration++) {
        kvio_engine_scheduled_t out[4];
        cr_assert_eq(step(&f, out, 4), 3, "iteration %d", iteration + 1);
        for (int r = 0; r < 3; r++) {
            cr_assert_eq(out[r].id, (uint64_t)r);
            cr_assert_eq(out[r].tokens, expected[iteration][r], "iteration %d request %d: %u",
                         iteration + 1, r, out[r].tokens);
        }
    }
    teardown(&f);
}

Test(engine, chunked_prefill_admits_two_and_unchunked_blocks_head_of_line, .timeout = 10)
{
    for (int chunked = 1; chunked >= 0; chunked--) {
        fixture_t f;
        setup(&f, 1024, 3, chunked, 0, 1000, true, "fcfs");
        add(&f, 0, 800, 10, 0, 0);
        add(&f, 1, 800, 10, 0, 0);
        add(&f, 2, 10, 10, 0, 0);
        add(&f, 3, 10, 10, 0, 0);
        kvio_engine_scheduled_t out[4];
        size_t count = step(&f, out, 4);
        if (chunked) {
            cr_assert_eq(count, 2);
            cr_assert_eq(out[0].tokens, 800);
            cr_assert_eq(out[1].tokens, 224);
        } else {
            /* No skipping ahead to the short requests. */
            cr_assert_eq(count, 1);
            cr_assert_eq(out[0].id, 0);
        }
        teardown(&f);
    }
}

Test(engine, running_request_short_of_blocks_preempts_last_admitted, .timeout = 10)
{
    fixture_t f;
    setup(&f, 100, 16, true, 0, 10, false, "fcfs");
    add(&f, 0, 72, 40, 0, 0);
    add(&f, 1, 72, 40, 0, 0);
    kvio_engine_scheduled_t out[4];
    step(&f, out, 4); /* 72 + 28 */
    step(&f, out, 4); /* 1 + 44 */
    uint32_t computed, blocks;
    cr_assert_eq(kvio_engine_request_state(f.engine, 0, &computed, &blocks), KVIO_OK);
    cr_assert_eq(blocks, 5);
    cr_assert_eq(kvio_engine_request_state(f.engine, 1, &computed, &blocks), KVIO_OK);
    cr_assert_eq(blocks, 5);
    cr_assert_eq(kvio_engine_free_blocks(f.engine), 0);
    /* Decode until request 0 holds 80 tokens and needs a 6th block for the 81st. */
    for (int i = 0; i < 100; i++) {
        kvio_engine_request_state(f.engine, 0, &computed, &blocks);
        if (computed == 80)
            break;
        step(&f, out, 4);
    }
    cr_assert_eq(computed, 80);
    uint64_t running[4], waiting[4];
    cr_assert_eq(kvio_engine_running_ids(f.engine, running, 4), 2);
    step(&f, out, 4);
    cr_assert_eq(kvio_engine_running_ids(f.engine, running, 4), 1);
    cr_assert_eq(running[0], 0);
    cr_assert_eq(kvio_engine_waiting_ids(f.engine, waiting, 4), 1);
    cr_assert_eq(waiting[0], 1);
    cr_assert_eq(kvio_engine_request_state(f.engine, 1, &computed, &blocks), KVIO_OK);
    cr_assert_eq(computed, 0);
    cr_assert_eq(blocks, 0);
    cr_assert_eq(kvio_engine_request_state(f.engine, 0, &computed, &blocks), KVIO_OK);
    cr_assert_eq(blocks, 6);
    cr_assert_eq(kvio_engine_metrics(f.engine)->preemptions, 1);
    teardown(&f);
}

static void check_priority_order(const int32_t *priorities, const int64_t *arrivals, size_t count,
                                 int64_t max_seqs, const uint64_t *running_expected,
                                 size_t num_running, const uint64_t *waiting_expected,
                                 size_t num_waiting)
{
    fixture_t f;
    setup(&f, 8192, max_seqs, true, 0, 1000, true, "priority");
    for (size_t id = 0; id < count; id++)
        add(&f, id, 20, 10, priorities[id], arrivals[id]);
    f.now_ns = 10;
    kvio_engine_scheduled_t out[8];
    step(&f, out, 8);
    uint64_t running[8], waiting[8];
    cr_assert_eq(kvio_engine_running_ids(f.engine, running, 8), num_running);
    for (size_t i = 0; i < num_running; i++)
        cr_assert_eq(running[i], running_expected[i], "running[%zu] = %llu", i,
                     (unsigned long long)running[i]);
    cr_assert_eq(kvio_engine_waiting_ids(f.engine, waiting, 8), num_waiting);
    for (size_t i = 0; i < num_waiting; i++)
        cr_assert_eq(waiting[i], waiting_expected[i]);
    teardown(&f);
}

Test(engine, priority_lower_value_first_ties_by_arrival, .timeout = 10)
{
    check_priority_order((int32_t[]){2, 0, 1}, (int64_t[]){0, 0, 0}, 3, 16,
                         (uint64_t[]){1, 2, 0}, 3, NULL, 0);
    check_priority_order((int32_t[]){0, 0, 0}, (int64_t[]){3, 1, 2}, 3, 16,
                         (uint64_t[]){1, 2, 0}, 3, NULL, 0);
    check_priority_order((int32_t[]){3, 1, 2, 0}, (int64_t[]){0, 0, 0, 0}, 4, 2,
                         (uint64_t[]){3, 1}, 2, (uint64_t[]){2, 0}, 2);
}

Test(engine, every_request_finishes_once_with_its_output, .timeout = 10)
{
    fixture_t f;
    setup(&f, 256, 8, true, 0, 40, true, "fcfs");
    for (uint64_t id = 0; id < 30; id++)
        add(&f, id, 50 + (uint32_t)(id * 7 % 90), 10 + (uint32_t)(id * 13 % 50), 0, 0);
    kvio_engine_scheduled_t out[64];
    for (int i = 0; i < 100000 && kvio_engine_has_work(f.engine); i++) {
        step(&f, out, 64);
        cr_assert_leq(kvio_engine_free_blocks(f.engine), 40);
    }
    cr_assert(!kvio_engine_has_work(f.engine));
    const kvio_engine_metrics_t *metrics = kvio_engine_metrics(f.engine);
    cr_assert_eq(metrics->requests, 30);
    uint64_t expected_output = 0;
    for (uint64_t id = 0; id < 30; id++)
        expected_output += 10 + id * 13 % 50;
    cr_assert_eq(metrics->output_tokens, expected_output);
    cr_assert_gt(metrics->preemptions, 0, "the fixture is sized to preempt");
    cr_assert_leq(metrics->max_usage, 1.0);
    cr_assert_eq(kvio_engine_free_blocks(f.engine), 40);
    teardown(&f);
}

/* The gaps between a measured request's tokens (vllm.json's itls): one per
 * token after the first, in order, kept up to the limit and counted past
 * it; they travel whole through a rank's packed metrics and merging
 * appends them. */
Test(engine, gaps_between_tokens_are_kept_to_the_limit_and_travel_whole, .timeout = 10)
{
    fixture_t f;
    setup_itls(&f, 256, 8, true, 0, 400, true, "fcfs", 50);
    for (uint64_t id = 0; id < 5; id++)
        add(&f, id, 32, 20, 0, 0);
    kvio_engine_scheduled_t out[64];
    for (int i = 0; i < 1000 && kvio_engine_has_work(f.engine); i++)
        step(&f, out, 64);
    const kvio_engine_metrics_t *metrics = kvio_engine_metrics(f.engine);
    cr_assert_eq(metrics->num_itl_records, 50);
    cr_assert_eq(metrics->itl_records_dropped, 5 * 19 - 50);
    cr_assert_eq(metrics->itl_records_max, 50);
    for (uint64_t i = 0; i < metrics->num_itl_records; i++) {
        cr_assert_lt(metrics->itl_records[i].id, 5);
        cr_assert_gt(metrics->itl_records[i].gap_s, 0);
    }
    void *blob = NULL;
    size_t length = 0, used = 0;
    cr_assert_eq(kvio_engine_metrics_pack(metrics, &blob, &length), KVIO_OK);
    kvio_engine_metrics_t merged;
    cr_assert_eq(kvio_engine_metrics_init(&merged), KVIO_OK);
    for (int twice = 0; twice < 2; twice++)
        cr_assert_eq(kvio_engine_metrics_unpack_merge(&merged, blob, length, &used), KVIO_OK);
    cr_assert_eq(used, length);
    cr_assert_eq(merged.num_itl_records, 100);
    cr_assert_eq(merged.itl_records_dropped, 2 * (5 * 19 - 50));
    for (uint64_t i = 0; i < 50; i++) {
        cr_assert_eq(merged.itl_records[i].id, metrics->itl_records[i].id);
        cr_assert_eq(merged.itl_records[50 + i].gap_s, metrics->itl_records[i].gap_s);
    }
    /* A blob cut short is refused, not read past its end. */
    cr_assert_eq(kvio_engine_metrics_unpack_merge(&merged, blob, length - 4, &used),
                 KVIO_ERR_PARSE);
    kvio_engine_metrics_fini(&merged);
    free(blob);
    teardown(&f);
}

/* ---------- what an activated model version does (update.on_activate,
 * update.in_flight) ---------- */

typedef struct finished_log {
    kvio_engine_finished_t items[16];
    size_t count;
} finished_log_t;

static void log_finish(void *context, const kvio_engine_finished_t *finished)
{
    finished_log_t *log = context;
    if (log->count < 16)
        log->items[log->count++] = *finished;
}

/* An engine of 100 blocks of 16 tokens (budget 8,192, prefix caching) whose
 * activations do cache / in_flight; finished requests go to log. */
static void setup_updates(fixture_t *f, int cache, int in_flight, finished_log_t *log)
{
    memset(f, 0, sizeof(*f));
    memset(log, 0, sizeof(*log));
    f->config = (kvio_engine_config_t){.max_num_seqs = 16, .max_num_batched_tokens = 8192,
                                       .chunked_prefill = true,
                                       .preemption = KVIO_PREEMPT_RECOMPUTE};
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_sched_options, &f->sched, error, sizeof(error)), KVIO_OK);
    f->cost = test_linear_cost();
    kvio_engine_params_t params = {
        .config = &f->config, .num_blocks = 100, .block_size = 16, .prefix_caching = true,
        .eviction = "lru", .sched = &f->sched, .seed = 1, .cost = f->cost,
        .kv_bytes_per_token = 131072, .host_bandwidth = 64e9,
        .observer = {.context = log, .on_finish = log_finish},
        .update_cache = cache, .in_flight = in_flight,
    };
    cr_assert_eq(kvio_engine_create(&params, &f->engine, error, sizeof(error)), KVIO_OK, "%s",
                 error);
}

/* A prompt of tokens tokens of shared content (full blocks hashed; a later
 * request hits all but the block holding its last token), tagged with a
 * model version. */
static void add_shared(fixture_t *f, uint64_t id, uint32_t tokens, uint32_t output,
                       uint64_t version)
{
    kvio_hash_t hashes[8];
    size_t num_hashes = tokens / 16 < 8 ? tokens / 16 : 8;
    for (size_t b = 0; b < num_hashes; b++) {
        kvio_hash_run_t run = {.content_id = 7, .offset = (uint32_t)(b * 16), .length = 16};
        hashes[b] = kvio_hash_runs(b ? &hashes[b - 1] : NULL, &run, 1);
    }
    kvio_engine_request_t request = {.id = id, .arrival_ns = f->now_ns, .prompt_tokens = tokens,
                                     .output_tokens = output, .hashes = hashes,
                                     .num_hashes = num_hashes, .measured = true, .tag = version};
    cr_assert_eq(kvio_engine_add(f->engine, &request), KVIO_OK);
}

static void run_until_idle(fixture_t *f)
{
    kvio_engine_scheduled_t out[16];
    for (int i = 0; i < 1000 && kvio_engine_has_work(f->engine); i++)
        step(f, out, 16);
    cr_assert(!kvio_engine_has_work(f->engine));
}

static const kvio_engine_finished_t *finished_id(const finished_log_t *log, uint64_t id)
{
    for (size_t i = 0; i < log->count; i++)
        if (log->items[i].id == id)
            return &log->items[i];
    cr_assert_fail("request %llu did not finish", (unsigned long long)id);
    return NULL;
}

/* Two requests sharing a 3-block prompt (48 tokens) on either side of an
 * activation, then a third on the new version: the cached tokens each got
 * and the counters, per cache mode. */
Test(engine, an_activated_version_flushes_versions_or_keeps_the_prefix_cache, .timeout = 10)
{
    static const struct {
        int cache;
        uint32_t after_update, same_version; /* cached tokens of requests 1 and 2 */
        uint64_t flushed, stale_after_1;
    } cases[] = {
        /* vLLM's reset: the 3 cached blocks lose their hash; request 1
         * recomputes and caches them anew, request 2 hits 2 of them. */
        {KVIO_UPDATE_CACHE_FLUSH, 0, 32, 3, 0},
        /* Version 0's blocks stay but only version 0 hits them. */
        {KVIO_UPDATE_CACHE_VERSION, 0, 32, 0, 0},
        /* Stale KV is used and counted: request 1's 32 tokens. */
        {KVIO_UPDATE_CACHE_KEEP, 32, 32, 0, 32},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        fixture_t f;
        finished_log_t log;
        setup_updates(&f, cases[c].cache, KVIO_IN_FLIGHT_KEEP, &log);
        add_shared(&f, 0, 48, 4, 0);
        run_until_idle(&f);
        cr_assert_eq(kvio_engine_activate(f.engine, 1), KVIO_OK);
        add_shared(&f, 1, 48, 4, 1);
        run_until_idle(&f);
        const kvio_engine_metrics_t *metrics = kvio_engine_metrics(f.engine);
        cr_expect_eq(metrics->stale_hit_tokens, cases[c].stale_after_1, "case %zu", c);
        add_shared(&f, 2, 48, 4, 1);
        run_until_idle(&f);
        cr_expect_eq(finished_id(&log, 0)->cached_tokens, 0, "case %zu", c);
        cr_expect_eq(finished_id(&log, 1)->cached_tokens, cases[c].after_update, "case %zu", c);
        cr_expect_eq(finished_id(&log, 2)->cached_tokens, cases[c].same_version, "case %zu", c);
        cr_expect_eq(metrics->versions_activated, 1);
        cr_expect_eq(metrics->cache_flushed_blocks, cases[c].flushed, "case %zu", c);
        teardown(&f);
    }
}

/* A waiting request looked up before an activation under cache: version is
 * salted with the new version (its hashes change in place): looked up
 * again with the index unchanged since, it must not find version 0's
 * blocks (lpm looks every waiting request up at every step; one sequence
 * at a time keeps request 1 waiting while request 9 decodes). */
Test(engine, a_request_retagged_by_an_activation_is_looked_up_anew, .timeout = 10)
{
    fixture_t f;
    finished_log_t log;
    setup_updates(&f, KVIO_UPDATE_CACHE_VERSION, KVIO_IN_FLIGHT_KEEP, &log);
    kvio_engine_destroy(f.engine);
    f.config.max_num_seqs = 1;
    cr_assert_eq(kvio_choice_set(&f.sched.policy, "lpm"), KVIO_OK);
    kvio_engine_params_t params = {
        .config = &f.config, .num_blocks = 100, .block_size = 16, .prefix_caching = true,
        .eviction = "lru", .sched = &f.sched, .seed = 1, .cost = f.cost,
        .kv_bytes_per_token = 131072, .host_bandwidth = 64e9,
        .observer = {.context = &log, .on_finish = log_finish},
        .update_cache = KVIO_UPDATE_CACHE_VERSION, .in_flight = KVIO_IN_FLIGHT_KEEP,
    };
    char error[256];
    cr_assert_eq(kvio_engine_create(&params, &f.engine, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    add_shared(&f, 0, 48, 4, 0);
    run_until_idle(&f); /* version 0's 3 blocks of the shared content are cached */
    kvio_engine_scheduled_t out[16];
    add(&f, 9, 40, 3, 0, f.now_ns);
    step(&f, out, 16); /* 9's prefill and first token */
    add_shared(&f, 1, 48, 4, 0);
    step(&f, out, 16); /* 9 decodes inside its last block; 1 is looked up: 32 */
    cr_assert_eq(kvio_engine_activate(f.engine, 1), KVIO_OK);
    run_until_idle(&f);
    cr_assert_eq(finished_id(&log, 1)->tag, 1);
    cr_assert_eq(finished_id(&log, 1)->cached_tokens, 0, "version 0's blocks are not 1's");
    teardown(&f);
}

/* A request mid-decode when version 1 activates: keep lets it go on with its
 * old KV (its decode tokens count as mixed-version), abort preempts it and
 * recomputes its 64 + 3 computed tokens on version 1, which it then reports. */
Test(engine, running_requests_keep_their_kv_or_are_aborted_on_activation, .timeout = 10)
{
    for (int in_flight = KVIO_IN_FLIGHT_KEEP; in_flight <= KVIO_IN_FLIGHT_ABORT; in_flight++) {
        fixture_t f;
        finished_log_t log;
        setup_updates(&f, KVIO_UPDATE_CACHE_FLUSH, in_flight, &log);
        add_shared(&f, 0, 64, 10, 0);
        kvio_engine_scheduled_t out[16];
        for (int i = 0; i < 4; i++) /* the prefill (64 tokens, 1st output), 3 decodes */
            step(&f, out, 16);
        cr_assert_eq(kvio_engine_activate(f.engine, 1), KVIO_OK);
        /* abort: the request waits again, holding nothing (keep: 5 blocks). */
        cr_expect_eq(kvio_engine_active_decode_blocks(f.engine),
                     in_flight == KVIO_IN_FLIGHT_KEEP ? 5 : 0);
        run_until_idle(&f);
        cr_expect_eq(kvio_engine_active_decode_blocks(f.engine), 0);
        const kvio_engine_metrics_t *metrics = kvio_engine_metrics(f.engine);
        const kvio_engine_finished_t *finished = finished_id(&log, 0);
        cr_assert_eq(finished->output_tokens, 10);
        if (in_flight == KVIO_IN_FLIGHT_KEEP) {
            cr_expect_eq(finished->tag, 0);
            cr_expect_eq(metrics->mixed_version_tokens, 6, "the 6 decodes after the update");
            cr_expect_eq(metrics->update_aborted_requests, 0);
        } else {
            cr_expect_eq(finished->tag, 1);
            cr_expect_eq(metrics->update_aborted_requests, 1);
            cr_expect_eq(metrics->update_recomputed_tokens, 67);
            cr_expect_eq(metrics->mixed_version_tokens, 0);
            cr_expect_eq(finished->cached_tokens, 0, "the flush left nothing to hit");
        }
        teardown(&f);
    }
}

/* update.colocated: lending 60 of 100 blocks to an update preempts a request
 * holding 80 (and evicts nothing else); while lent, a 40-block request fits
 * and a second one waits; taken back, everything finishes. */
Test(engine, lending_kv_memory_to_an_update_preempts_what_no_longer_fits, .timeout = 10)
{
    fixture_t f;
    finished_log_t log;
    setup_updates(&f, KVIO_UPDATE_CACHE_FLUSH, KVIO_IN_FLIGHT_KEEP, &log);
    add(&f, 0, 80 * 16 - 8, 20, 0, 0); /* 80 blocks once its prefill is in */
    kvio_engine_scheduled_t out[16];
    step(&f, out, 16);
    cr_assert_eq(kvio_engine_free_blocks(f.engine), 20);
    cr_assert_eq(kvio_engine_reserve(f.engine, 60), KVIO_OK);
    const kvio_engine_metrics_t *metrics = kvio_engine_metrics(f.engine);
    cr_assert_eq(metrics->colocated_preemptions, 1);
    cr_assert_eq(kvio_engine_free_blocks(f.engine), 40);
    uint64_t waiting[4];
    cr_assert_eq(kvio_engine_waiting_ids(f.engine, waiting, 4), 1, "request 0 waits");
    /* Only 40 blocks: request 0 (80) cannot come back yet. */
    step(&f, out, 16);
    cr_assert_eq(kvio_engine_running_ids(f.engine, waiting, 4), 0);
    cr_assert_eq(kvio_engine_reserve(f.engine, 0), KVIO_OK);
    cr_assert_eq(kvio_engine_free_blocks(f.engine), 100);
    run_until_idle(&f);
    cr_assert_eq(finished_id(&log, 0)->preemptions, 1);
    teardown(&f);
}

/* #17: the one step every driver (simulate, emulate, coupled) begins an
 * iteration with: idle without work, lent while an update holds the
 * memory the head request needs, an error naming the request and world rank
 * when it can never fit, else an iteration to run. */
Test(engine, the_shared_step_is_idle_lent_runs_or_names_what_cannot_start, .timeout = 10)
{
    fixture_t f;
    finished_log_t log;
    setup_updates(&f, KVIO_UPDATE_CACHE_FLUSH, KVIO_IN_FLIGHT_KEEP, &log);
    kvio_engine_iteration_t iteration;
    kvio_serve_step_t kind;
    char error[512] = "";
    cr_assert_eq(kvio_serve_step(f.engine, 0, 7, true, &iteration, &kind, error, sizeof(error)),
                 KVIO_OK);
    cr_assert_eq(kind, KVIO_SERVE_STEP_IDLE);
    add(&f, 0, 80 * 16 - 8, 20, 0, 0);
    cr_assert_eq(kvio_engine_reserve(f.engine, 60), KVIO_OK); /* 40 blocks left */
    cr_assert_eq(kvio_serve_step(f.engine, 0, 7, true, &iteration, &kind, error, sizeof(error)),
                 KVIO_OK);
    cr_assert_eq(kind, KVIO_SERVE_STEP_LENT, "80 blocks wait for the lent memory");
    cr_assert_eq(kvio_serve_step(f.engine, 0, 7, false, &iteration, &kind, error, sizeof(error)),
                 KVIO_ERR_CONFIG, "the memory never comes back");
    cr_assert(test_contains(error, "serve rank 7: request 0 cannot start"), "%s", error);
    cr_assert_eq(kvio_engine_reserve(f.engine, 0), KVIO_OK);
    cr_assert_eq(kvio_serve_step(f.engine, 0, 7, false, &iteration, &kind, error, sizeof(error)),
                 KVIO_OK);
    cr_assert_eq(kind, KVIO_SERVE_STEP_RUN);
    cr_assert_gt(iteration.duration_ns, 0);
    kvio_engine_complete(f.engine, iteration.duration_ns);
    teardown(&f);
}

/* update.in_flight: wait: with version 1 ready while request 0 decodes,
 * the engine stops admitting (request 1 waits) until request 0 is done;
 * then version 1 activates and request 1 runs on it, with no token computed
 * across versions. */
Test(engine, waiting_for_an_update_drains_the_running_requests_first, .timeout = 10)
{
    fixture_t f;
    finished_log_t log;
    setup_updates(&f, KVIO_UPDATE_CACHE_FLUSH, KVIO_IN_FLIGHT_WAIT, &log);
    add_shared(&f, 0, 64, 10, 0);
    kvio_engine_scheduled_t out[16];
    step(&f, out, 16); /* prefill and the first token */
    cr_assert(!kvio_engine_drain(f.engine), "request 0 still runs");
    add(&f, 1, 32, 4, 0, f.now_ns);
    int steps = 0;
    while (!kvio_engine_drain(f.engine)) {
        cr_assert_eq(step(&f, out, 16), 1, "only request 0 runs while draining");
        cr_assert_eq(out[0].id, 0);
        steps++;
    }
    cr_assert_eq(steps, 9, "request 0's 9 remaining decodes");
    cr_assert_eq(finished_id(&log, 0)->tag, 0);
    cr_assert_eq(kvio_engine_activate(f.engine, 1), KVIO_OK);
    run_until_idle(&f);
    cr_assert_eq(finished_id(&log, 1)->tag, 1, "request 1 had no KV: the new version's");
    cr_assert_eq(kvio_engine_metrics(f.engine)->mixed_version_tokens, 0);
    teardown(&f);
}

/* A deferred request's hash source: the shared content of add_shared,
 * counting fills and releases. */
typedef struct counted_source {
    uint32_t tokens;
    int fills, releases;
} counted_source_t;

static kvio_status_t counted_fill(void *context, kvio_hash_t *hashes_p, size_t num_hashes)
{
    counted_source_t *source = context;
    source->fills++;
    for (size_t b = 0; b < num_hashes; b++) {
        kvio_hash_run_t run = {.content_id = 7, .offset = (uint32_t)(b * 16), .length = 16};
        hashes_p[b] = kvio_hash_runs(b ? &hashes_p[b - 1] : NULL, &run, 1);
    }
    return KVIO_OK;
}

static void counted_release(void *context)
{
    ((counted_source_t *)context)->releases++;
}

static void add_deferred(fixture_t *f, uint64_t id, counted_source_t *source, uint32_t output)
{
    kvio_engine_request_t request = {
        .id = id, .arrival_ns = f->now_ns, .prompt_tokens = source->tokens,
        .output_tokens = output, .num_hashes = source->tokens / 16 < 8 ? source->tokens / 16 : 8,
        .measured = true,
        .hash_source = {.fill = counted_fill, .release = counted_release, .context = source}};
    cr_assert_eq(kvio_engine_add(f->engine, &request), KVIO_OK);
}

Test(engine, deferred_hashes_are_filled_once_when_first_needed_and_hit_alike, .timeout = 10)
{
    finished_log_t log = {0};
    fixture_t f;
    setup_updates(&f, KVIO_UPDATE_CACHE_KEEP, KVIO_IN_FLIGHT_KEEP, &log);
    /* The same content given eagerly, then deferred: the deferred request
     * hits the eager one's blocks (all but the block of its last token). */
    add_shared(&f, 1, 128, 4, 0);
    run_until_idle(&f);
    counted_source_t source = {.tokens = 128};
    add_deferred(&f, 2, &source, 4);
    cr_assert_eq(source.fills, 0, "filled before it was looked up");
    run_until_idle(&f);
    cr_assert_eq(source.fills, 1);
    cr_assert_eq(source.releases, 1);
    cr_assert_eq(finished_id(&log, 2)->cached_tokens, 112);
    /* A deferred request never looked up is released when the engine goes,
     * and one the engine refuses is released at once. */
    counted_source_t waiting = {.tokens = 64}, refused = {.tokens = 0};
    add_deferred(&f, 3, &waiting, 4);
    kvio_engine_request_t bad = {
        .id = 4, .prompt_tokens = 0, .output_tokens = 1,
        .hash_source = {.fill = counted_fill, .release = counted_release, .context = &refused}};
    cr_assert_eq(kvio_engine_add(f.engine, &bad), KVIO_ERR_INVALID);
    cr_assert_eq(refused.releases, 1);
    teardown(&f);
    cr_assert_eq(waiting.fills, 0);
    cr_assert_eq(waiting.releases, 1);
}

/* The CSV rows are formatted by hand for speed (#23); they must be the
 * bytes printf writes, for every value: zero, sub-microsecond times,
 * halfway cases, the largest clock, negative and non-finite values (which
 * go to printf), and a spread of random magnitudes. */
static int64_t row_times[] = {0, 1, 499, 500, 501, 999, 1000, 1500, 2500, 999999999,
                              1000000000, 1234567890123, INT64_MAX, -1, INT64_MIN,
                              /* exact ties at 6 decimals: j / 128 s, rounded to even */
                              7812500, 23437500, 39062500, 1007812500};
static double row_usages[] = {0.0, 1.0, 0.5, 0.123455, 0.123465, 0.999995, 0.000005,
                              1e-300, 4.9e-324, -0.0, -0.25, 1e12, 1e300,
                              /* exact ties at 5 decimals: j / 64 */
                              0.015625, 0.046875, 0.078125, 0.984375};

static uint64_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 11;
}

/* #23: the simulator's deferred requests. Asking for one request's hashes
 * also hashes the requests dispatched after it, which are handed over when
 * asked for; whatever the order they are asked in or released unasked,
 * each gets the hashes it gets alone (ASan checks that nothing leaks). */
Test(engine, deferred_requests_hashed_ahead_get_their_own_hashes_in_any_order, .timeout = 20)
{
    enum { REQUESTS = 60, BLOCK = 16, AHEAD_MAX = 16 };
    kvio_deferred_queue_t *queue = NULL;
    cr_assert_eq(kvio_deferred_queue_create(BLOCK, &queue), KVIO_OK);
    uint64_t state = 11;
    static uint64_t ids[REQUESTS][8];
    kvio_segment_t segment = {.content_id = 5, .offset = 0, .tokens = 300};
    kvio_request_t requests[REQUESTS];
    kvio_engine_hash_source_t sources[REQUESTS];
    size_t counts[REQUESTS];
    for (size_t r = 0; r < REQUESTS; r++) {
        for (size_t i = 0; i < 8; i++)
            ids[r][i] = next_random(&state);
        requests[r] = (kvio_request_t){
            .id = r, .input_tokens = 1 + (uint32_t)(next_random(&state) % 4096),
            .output_tokens = 1 + (uint32_t)(r % 50), .trace_block_tokens = 512,
            .trace_hash_ids = ids[r], .num_trace_hash_ids = 8};
        if (r % 9 == 4) /* a synthetic request among the trace ones */
            requests[r] = (kvio_request_t){.id = r, .input_tokens = 300, .output_tokens = 20,
                                           .num_segments = 1, .segments = &segment};
        if (r % 13 == 6) /* no full block: nothing to hash, never hashed ahead */
            requests[r] = (kvio_request_t){.id = r, .input_tokens = 9, .output_tokens = 2,
                                           .num_segments = 1, .segments = &segment};
        cr_assert_eq(kvio_deferred_request(queue, &requests[r], &sources[r], &counts[r]),
                     KVIO_OK);
        cr_assert_eq(counts[r],
                     ((size_t)requests[r].input_tokens + requests[r].output_tokens) / BLOCK);
    }
    /* The copies are the queue's: the caller's ids may change. */
    memset(ids, 0, sizeof(ids));
    uint64_t reference_ids[REQUESTS][8];
    state = 11;
    for (size_t r = 0; r < REQUESTS; r++) {
        for (size_t i = 0; i < 8; i++)
            reference_ids[r][i] = next_random(&state);
        next_random(&state);
        if (requests[r].segments == NULL)
            requests[r].trace_hash_ids = reference_ids[r];
    }
    /* Asked for in an order that skips about (a scheduler by hits), some
     * released unasked (aborted, or left when the engine goes). Asking 3
     * hashes the seven requests after it with at least a block (4 .. 11
     * but 6), asking 20 the seven after it, asking 40 only two more: at
     * most 16 hold hashes computed ahead; asking 50 then hashes none. */
    static const size_t order[] = {3,  20, 40, 50, 4, 0, 1,  2,  10, 5,  6,  59,
                                   41, 7,  8,  9,  21, 11, 19, 30, 58, 57, 12};
    static const size_t ahead_after[] = {7, 14, AHEAD_MAX, AHEAD_MAX};
    bool done[REQUESTS] = {false};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        size_t r = order[k];
        kvio_hash_t *asked = calloc(counts[r] + 1, sizeof(kvio_hash_t));
        kvio_hash_t *alone = calloc(counts[r] + 1, sizeof(kvio_hash_t));
        cr_assert(asked != NULL && alone != NULL);
        cr_assert_eq(sources[r].fill(sources[r].context, asked, counts[r]), KVIO_OK);
        cr_assert_eq(kvio_request_block_hashes(&requests[r], BLOCK, 0, counts[r], NULL, alone),
                     KVIO_OK);
        for (size_t i = 0; i < counts[r]; i++)
            cr_assert(kvio_hash_equal(asked[i], alone[i]), "request %zu block %zu", r, i);
        free(asked);
        free(alone);
        if (k < sizeof(ahead_after) / sizeof(ahead_after[0]))
            cr_assert_eq(kvio_deferred_queue_num_ahead(queue), ahead_after[k], "after %zu", r);
        cr_assert_leq(kvio_deferred_queue_num_ahead(queue), AHEAD_MAX);
        sources[r].release(sources[r].context);
        done[r] = true;
    }
    for (size_t r = 0; r < REQUESTS; r++)
        if (!done[r])
            sources[r].release(sources[r].context);
    cr_assert_eq(kvio_deferred_queue_num_ahead(queue), 0, "every buffer came back");
    kvio_deferred_queue_destroy(queue);
}

Test(engine, hand_formatted_csv_rows_match_printf, .timeout = 30)
{
    uint64_t state = 23;
    char *dir = test_tmpdir();
    kvio_results_t *results;
    char error[256];
    cr_assert_eq(kvio_results_create(dir, "rows", true, &results, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_csv_t *csv;
    cr_assert_eq(kvio_csv_open(results, "iterations.csv", "h", &csv), KVIO_OK);
    char *expected = NULL;
    size_t expected_length = 0;
    FILE *expect = open_memstream(&expected, &expected_length);
    fprintf(expect, "h\n");
    const size_t num_times = sizeof(row_times) / sizeof(row_times[0]);
    const size_t num_usages = sizeof(row_usages) / sizeof(row_usages[0]);
    for (size_t i = 0; i < 20000; i++) {
        int64_t times[3];
        for (size_t t = 0; t < 3; t++) {
            /* Listed values first, then random ones of every magnitude. */
            uint64_t r = next_random(&state);
            times[t] = i < num_times ? row_times[(i + t) % num_times]
                                     : (int64_t)(r >> (r % 53));
        }
        double usage = i < num_usages ? row_usages[i]
                                      : (double)(next_random(&state) % 10000001) / 1e7;
        kvio_engine_finished_t finished = {
            .id = next_random(&state), .rank = (uint32_t)i, .arrival_ns = times[0],
            .first_token_ns = times[1], .finish_ns = times[2], .prompt_tokens = 17,
            .output_tokens = (uint32_t)i, .cached_tokens = 3, .preemptions = 1,
            .measured = i % 2 == 0, .tag = i, .kv_wait_ns = times[(i + 1) % 3],
        };
        char row[256], want[3200], tpot[400] = "";
        int length = kvio_serve_request_row(&finished, row, sizeof(row));
        double ttft_ms = ((double)finished.first_token_ns - (double)finished.arrival_ns) / 1e6;
        double e2el_ms = ((double)finished.finish_ns - (double)finished.arrival_ns) / 1e6;
        if (finished.output_tokens > 1)
            snprintf(tpot, sizeof(tpot), "%.3f", (e2el_ms - ttft_ms) / (finished.output_tokens - 1));
        int want_length = snprintf(
            want, sizeof(want), "%llu,%u,%.6f,%.6f,%.6f,%u,%u,%u,%u,%llu,%d,%.3f,%.3f,%s,%.3f",
            (unsigned long long)finished.id, finished.rank, finished.arrival_ns / 1e9,
            finished.first_token_ns / 1e9, finished.finish_ns / 1e9, finished.prompt_tokens,
            finished.output_tokens, finished.cached_tokens, finished.preemptions,
            (unsigned long long)finished.tag, finished.measured ? 1 : 0,
            finished.kv_wait_ns / 1e6, ttft_ms, tpot, e2el_ms);
        cr_assert_eq(length, want_length, "%s vs %s", row, want);
        if ((size_t)want_length < sizeof(row))
            cr_assert_str_eq(row, want);
        kvio_engine_iteration_t iteration = {
            .start_ns = times[0], .duration_ns = times[1], .num_scheduled = 3,
            .batch = {.prefill_tokens = 100, .decode_seqs = 7}, .kv_usage = usage,
            .running = 4, .waiting = 5, .num_preempted = 1, .swap_bytes = i,
        };
        kvio_serve_iteration_row(csv, 2, &iteration);
        fprintf(expect, "%.6f,%u,%.6f,%u,%llu,%llu,%.5f,%u,%u,%u,%llu\n",
                iteration.start_ns / 1e9, 2u, iteration.duration_ns / 1e6,
                iteration.num_scheduled, (unsigned long long)iteration.batch.prefill_tokens,
                (unsigned long long)iteration.batch.decode_seqs, iteration.kv_usage,
                iteration.running, iteration.waiting, iteration.num_preempted,
                (unsigned long long)iteration.swap_bytes);
    }
    cr_assert_eq(kvio_csv_close(csv), KVIO_OK);
    fclose(expect);
    char path[1100];
    snprintf(path, sizeof(path), "%s/iterations.csv", dir);
    char *written = test_read_file(path);
    cr_assert(strcmp(written, expected) == 0, "iterations.csv differs from printf's rows");
    free(written);
    free(expected);
    kvio_results_destroy(results);
    test_rmtree(dir);
    free(dir);
}

/* The blocks held by running requests (what the kv_cost router adds per
 * rank) are kept as requests are admitted, grow, are preempted and finish,
 * not summed over the running list at each ask (#23): at every step they
 * equal the sum over the running requests. */
Test(engine, running_blocks_are_kept_through_admission_growth_preemption_and_finish,
     .timeout = 20)
{
    fixture_t f;
    setup(&f, 128, 16, true, 0, 40, true, "fcfs");
    for (uint64_t id = 0; id < 10; id++)
        add(&f, id, 60 + 37 * (uint32_t)id, 40 + 23 * (uint32_t)(id % 4), 0, 0);
    kvio_engine_scheduled_t out[16];
    int steps = 0;
    for (; steps < 5000 && kvio_engine_load(f.engine) > 0; steps++) {
        step(&f, out, 16);
        uint64_t running[16], sum = 0;
        size_t count = kvio_engine_running_ids(f.engine, running, 16);
        for (size_t i = 0; i < count; i++) {
            uint32_t computed, blocks;
            cr_assert_eq(kvio_engine_request_state(f.engine, running[i], &computed, &blocks),
                         KVIO_OK);
            sum += blocks;
        }
        cr_assert_eq(kvio_engine_active_decode_blocks(f.engine), sum, "step %d: %llu vs %llu",
                     steps, (unsigned long long)kvio_engine_active_decode_blocks(f.engine),
                     (unsigned long long)sum);
    }
    cr_assert_eq(kvio_engine_load(f.engine), 0, "all ten finish");
    cr_assert_gt(kvio_engine_metrics(f.engine)->preemptions, 0, "the pool is short: preemptions");
    cr_assert_eq(kvio_engine_active_decode_blocks(f.engine), 0);
    teardown(&f);
}

/* serve.kvcache.hybrid: vLLM's hybrid groups in the engine (block 16,
 * window 32, 100 blocks). A request holds every block of its full-attention
 * table but only the window's last blocks of the other as it decodes; the
 * blocks it let go stay cached, so the same prompt later hits all of it
 * that may be hit (7 of its 8 blocks). */
Test(engine, a_hybrid_engine_holds_the_window_s_blocks_only_and_still_hits_them, .timeout = 10)
{
    fixture_t f;
    finished_log_t log;
    setup_updates(&f, 0, 0, &log);
    kvio_engine_destroy(f.engine);
    char error[256];
    kvio_engine_params_t params = {
        .config = &f.config, .num_blocks = 100, .block_size = 16, .prefix_caching = true,
        .eviction = "lru", .sched = &f.sched, .seed = 1, .cost = f.cost,
        .kv_bytes_per_token = 131072, .host_bandwidth = 64e9,
        .observer = {.context = &log, .on_finish = log_finish}, .window_tokens = 32,
    };
    cr_assert_eq(kvio_engine_create(&params, &f.engine, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    add_shared(&f, 1, 128, 100, 0);
    kvio_engine_scheduled_t out[16];
    uint32_t most_window_blocks = 0;
    for (int i = 0; i < 1000 && kvio_engine_has_work(f.engine); i++) {
        step(&f, out, 16);
        uint32_t computed = 0, blocks = 0;
        if (kvio_engine_request_state(f.engine, 1, &computed, &blocks) != KVIO_OK)
            continue;
        uint32_t full = (computed + 15) / 16;
        cr_assert_geq(blocks, full, "step %d: %u blocks for %u tokens", i, blocks, computed);
        if (computed > 128 && blocks - full > most_window_blocks)
            most_window_blocks = blocks - full;
    }
    cr_assert_leq(most_window_blocks, 3, "the window group keeps 2 blocks and the next one, not "
                                         "all %u", most_window_blocks);
    cr_assert_gt(most_window_blocks, 0);
    cr_assert_eq(kvio_engine_free_blocks(f.engine), 100, "all back when it finishes");
    add_shared(&f, 2, 128, 4, 0);
    run_until_idle(&f);
    const kvio_engine_finished_t *second = finished_id(&log, 2);
    cr_assert_not_null(second);
    cr_assert_eq(second->cached_tokens, 112);
    teardown(&f);
}

/* kv_cost: cost = uncached prompt blocks + blocks held by running requests.
 * A rank whose running blocks alone reach the best cost so far cannot win,
 * so its prefix is not searched; the choice is the same. */
typedef struct fake_ranks {
    uint64_t active[4];
    size_t cached_tokens[4];
    int searched[4];
} fake_ranks_t;

static uint32_t fake_load(void *context, uint32_t rank)
{
    (void)context;
    return rank;
}

static size_t fake_cached_prefix(void *context, uint32_t rank, const kvio_hash_t *hashes,
                                 size_t num_hashes, uint32_t prompt_tokens)
{
    (void)hashes;
    (void)num_hashes;
    (void)prompt_tokens;
    fake_ranks_t *ranks = context;
    ranks->searched[rank]++;
    return ranks->cached_tokens[rank];
}

static uint64_t fake_active(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->active[rank];
}

Test(engine, kv_cost_router_skips_ranks_that_cannot_win, .timeout = 10)
{
    kvio_router_config_t config = {0};
    char error[256];
    cr_assert_eq(kvio_config_bind_text(kvio_router_options, "{policy: kv_cost}", "test", &config,
                                       error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_router_t *router;
    cr_assert_eq(kvio_router_create(&config, &router), KVIO_OK);
    /* 128 prompt tokens: 8 blocks. Costs 8 + 10 = 18; rank 1 holds 20
     * (skipped); 8 - 4 + 5 = 9; rank 3 holds 9, equal to the best (skipped:
     * a tie keeps the earlier rank). */
    fake_ranks_t ranks = {.active = {10, 20, 5, 9}, .cached_tokens = {0, 128, 64, 128}};
    kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                               .cached_prefix = fake_cached_prefix,
                               .active_decode_blocks = fake_active};
    kvio_engine_request_t request = {.prompt_tokens = 128};
    cr_assert_eq(kvio_router_choose_view(router, &view, 4, &request), 2);
    cr_assert_eq(ranks.searched[0], 1);
    cr_assert_eq(ranks.searched[1], 0, "20 running blocks cannot beat a cost of 18");
    cr_assert_eq(ranks.searched[2], 1);
    cr_assert_eq(ranks.searched[3], 0, "9 running blocks cannot beat a cost of 9");
    /* A rank that can still win is searched and wins on its prefix. */
    ranks = (fake_ranks_t){.active = {10, 3, 5, 9}, .cached_tokens = {0, 112, 64, 128}};
    cr_assert_eq(kvio_router_choose_view(router, &view, 4, &request), 1, "8 - 7 + 3 = 4");
    kvio_router_destroy(router);
    kvio_config_free(kvio_router_options, &config);
}
