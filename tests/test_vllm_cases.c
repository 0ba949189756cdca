/* vLLM v1's scheduling and prefix-cache behaviour, case by case: each row
 * names the vLLM code (and, where there is one, the test of vLLM's
 * tests/v1/core) it mirrors, and the engine must do what vLLM does on the
 * same pool, budget and requests. Block size 16 throughout. */
#include "kvio/engine.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/hash.h"
#include "kvio/kvcache.h"
#include "kvio/model.h"
#include "kvio/serve.h"
#include "kvio/update.h"
#include "tests/helpers.h"

#define MAX_REQUESTS 6
#define BLOCK 16

/* A request of the case: its first `shared` blocks are content every
 * request with shared > 0 has in common (a common prefix), the rest its
 * own. */
typedef struct case_request {
    uint64_t id;
    uint32_t prompt, output, shared;
} case_request_t;

typedef kvio_engine_scheduled_t scheduled_t;

typedef struct engine_case {
    const char *name;
    const char *mirrors; /* the vLLM code (and test) this row pins */
    uint32_t blocks;
    int64_t budget, max_seqs;
    bool full_isl;
    double watermark;
    case_request_t before[MAX_REQUESTS]; /* added first (id 0 ends the list) */
    int steps_before;                    /* iterations run with them */
    case_request_t then[MAX_REQUESTS];   /* added after those iterations */
    scheduled_t expect[MAX_REQUESTS];    /* the next iteration's batch, in order */
} engine_case_t;

static const engine_case_t admission_cases[] = {
    {"a prompt is admitted only when its whole length fits",
     "vllm/v1/core/kv_cache_manager.py allocate_slots(full_sequence_must_fit), "
     "scheduler_reserve_full_isl (PR #37307)",
     4, 48, 16, true, 0,
     {{1, 32, 4, 0}, {2, 48, 4, 0}}, 0, {{0}},
     /* 1 takes 2 of 4 blocks; 2's first 16-token chunk would fit in 1 but its
      * 48 tokens need 3: it waits. */
     {{1, 32}}},
    {"without it the first chunk is enough",
     "vllm before PR #37307 (scheduler_reserve_full_isl=False)",
     4, 48, 16, false, 0,
     {{1, 32, 4, 0}, {2, 48, 4, 0}}, 0, {{0}},
     {{1, 32}, {2, 16}}},
    {"the watermark is kept free while another request runs",
     "vllm/v1/core/kv_cache_manager.py allocate_slots: watermark_blocks for WAITING and "
     "PREEMPTED requests when has_scheduled_reqs",
     10, 8192, 16, true, 0.2,
     /* 2 blocks of watermark: 1 (4 blocks) goes first into an empty pool,
      * 2 (4) leaves exactly 2 free, 3 (1) would leave 1. */
     {{1, 64, 4, 0}, {2, 64, 4, 0}, {3, 16, 4, 0}}, 0, {{0}},
     {{1, 64}, {2, 64}}},
    {"no watermark without a watermark",
     "vllm/config/cache.py watermark (default 0.0 here)",
     10, 8192, 16, true, 0,
     {{1, 64, 4, 0}, {2, 64, 4, 0}, {3, 16, 4, 0}}, 0, {{0}},
     {{1, 64}, {2, 64}, {3, 16}}},
    {"the watermark does not hold back the first request of an idle engine",
     "allocate_slots: watermark_blocks = 0 unless has_scheduled_reqs",
     10, 8192, 16, true, 0.2,
     {{1, 144, 4, 0}}, 0, {{0}}, /* 9 of 10 blocks, beyond the watermark */
     {{1, 144}}},
    {"cached blocks in the free queue count as taken by the request that hits them",
     "vllm/v1/core/kv_cache_coordinator.py get_num_blocks_to_allocate (evictable computed "
     "blocks); tests/v1/core/test_prefix_caching.py test_prefill",
     5, 8192, 16, true, 0,
     /* 1 (a shared 32-token prefix, output 1) finishes at once, leaving its 2
      * blocks cached and free; 4 decodes in 2 blocks. 5 shares the prefix:
      * 2 hits (in the free queue) + 1 new = 3 of the 3 free blocks. */
     {{1, 32, 1, 2}, {4, 17, 40, 0}}, 1,
     {{5, 48, 4, 2}},
     {{4, 1}, {5, 16}}},
    {"and refuse it when the hits and the new blocks together do not fit",
     "get_num_blocks_to_allocate with full_sequence_must_fit",
     5, 8192, 16, true, 0,
     {{1, 32, 1, 2}, {4, 17, 40, 0}}, 1,
     {{5, 64, 4, 2}}, /* 2 hits + 2 new = 4 > 3 free */
     {{4, 1}}},
};

/* Adds req with the shared prefix content. */
static void add_request(kvio_engine_t *engine, const case_request_t *req)
{
    size_t num_hashes = (req->prompt + req->output) / BLOCK;
    kvio_hash_t *hashes = calloc(num_hashes + 1, sizeof(kvio_hash_t));
    cr_assert_not_null(hashes);
    for (size_t b = 0; b < num_hashes; b++) {
        bool shared = b < req->shared;
        kvio_hash_run_t run = {.content_id = shared ? 1 : 1000 + req->id,
                               .offset = (uint32_t)(b * BLOCK), .length = BLOCK};
        hashes[b] = kvio_hash_runs(b ? &hashes[b - 1] : NULL, &run, 1);
    }
    kvio_engine_request_t request = {.id = req->id, .prompt_tokens = req->prompt,
                                     .output_tokens = req->output, .hashes = hashes,
                                     .num_hashes = num_hashes, .measured = true};
    cr_assert_eq(kvio_engine_add(engine, &request), KVIO_OK);
    free(hashes);
}

typedef struct fixture {
    kvio_engine_config_t config;
    kvio_sched_config_t sched;
    kvio_cost_t *cost;
    kvio_engine_t *engine;
    long long now_ns;
} fixture_t;

static void setup(fixture_t *f, const engine_case_t *c, int update_cache, int update_reset)
{
    memset(f, 0, sizeof(*f));
    f->config = (kvio_engine_config_t){.max_num_seqs = c->max_seqs,
                                       .max_num_batched_tokens = c->budget,
                                       .chunked_prefill = true,
                                       .preemption = KVIO_PREEMPT_RECOMPUTE,
                                       .scheduler_reserve_full_isl = c->full_isl,
                                       .watermark = c->watermark};
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_sched_options, &f->sched, error, sizeof(error)), KVIO_OK);
    f->cost = test_linear_cost();
    kvio_engine_params_t params = {
        .config = &f->config, .num_blocks = c->blocks, .block_size = BLOCK,
        .prefix_caching = true, .free_order = 1, .eviction = "lru", .sched = &f->sched,
        .seed = 1, .cost = f->cost, .kv_bytes_per_token = 131072, .host_bandwidth = 64e9,
        .update_cache = update_cache, .update_reset = update_reset,
    };
    cr_assert_eq(kvio_engine_create(&params, &f->engine, error, sizeof(error)), KVIO_OK, "%s",
                 error);
}

static void teardown(fixture_t *f)
{
    kvio_engine_destroy(f->engine);
    kvio_cost_destroy(f->cost);
    kvio_config_free(kvio_sched_options, &f->sched);
}

static size_t step(fixture_t *f, scheduled_t *out, size_t max)
{
    return test_engine_step(f->engine, &f->now_ns, out, max);
}

static size_t count_of(const case_request_t *list)
{
    size_t n = 0;
    while (n < MAX_REQUESTS && list[n].id != 0)
        n++;
    return n;
}

static size_t expected_count(const scheduled_t *list)
{
    size_t n = 0;
    while (n < MAX_REQUESTS && list[n].id != 0)
        n++;
    return n;
}

Test(vllm_cases, admission, .timeout = 60)
{
    for (size_t k = 0; k < sizeof(admission_cases) / sizeof(admission_cases[0]); k++) {
        const engine_case_t *c = &admission_cases[k];
        fixture_t f;
        setup(&f, c, KVIO_UPDATE_CACHE_KEEP, KVIO_RESET_WHEN_IDLE);
        for (size_t r = 0; r < count_of(c->before); r++)
            add_request(f.engine, &c->before[r]);
        scheduled_t out[16];
        for (int s = 0; s < c->steps_before; s++)
            step(&f, out, 16);
        for (size_t r = 0; r < count_of(c->then); r++)
            add_request(f.engine, &c->then[r]);
        size_t count = step(&f, out, 16);
        size_t want = expected_count(c->expect);
        char got[256] = "";
        for (size_t i = 0, at = 0; i < count && at < sizeof(got); i++)
            at += (size_t)snprintf(got + at, sizeof(got) - at, " (%llu, %u)",
                                   (unsigned long long)out[i].id, out[i].tokens);
        cr_expect_eq(count, want, "%s [%s]: batch%s", c->name, c->mirrors, got);
        for (size_t i = 0; i < count && i < want; i++)
            cr_expect(out[i].id == c->expect[i].id && out[i].tokens == c->expect[i].tokens,
                      "%s [%s]: batch%s", c->name, c->mirrors, got);
        teardown(&f);
    }
}

/* vLLM's reset_prefix_cache while requests hold blocks: refused, done once
 * none is in use (tests/v1/core/test_prefix_caching.py
 * test_reset_prefix_cache: "Failed to reset prefix cache because some blocks
 * are not freed yet"); with reset_running_requests every running request is
 * preempted first (vllm/v1/core/sched/scheduler.py reset_prefix_cache). */
typedef struct reset_case {
    const char *name, *mirrors;
    int reset;
    /* right after the activation */
    uint64_t resets, pending, preempted;
    /* what request 9 (the same 48-token prefix, after both finished) then
     * computes: the prefix again, or only its own tail when the preempted
     * requests cached the prefix anew on the new weights */
    uint32_t later_tokens;
} reset_case_t;

static const reset_case_t reset_cases[] = {
    {"refused while blocks are in use, done when none is",
     "tests/v1/core/test_prefix_caching.py test_reset_prefix_cache", KVIO_RESET_WHEN_IDLE, 0,
     1, 0, 55},
    {"reset_running_requests preempts every running request, then resets",
     "vllm/v1/core/sched/scheduler.py reset_prefix_cache(reset_running_requests=True)",
     KVIO_RESET_PREEMPT_ALL, 1, 0, 2, 7},
    {"kvio's reset: running unhashes every block at once (no vLLM equivalent)",
     "kvio extension", KVIO_RESET_RUNNING, 1, 0, 0, 55},
};

Test(vllm_cases, reset_prefix_cache, .timeout = 60)
{
    for (size_t k = 0; k < sizeof(reset_cases) / sizeof(reset_cases[0]); k++) {
        const reset_case_t *c = &reset_cases[k];
        engine_case_t pool = {.blocks = 64, .budget = 8192, .max_seqs = 16, .full_isl = true};
        fixture_t f;
        setup(&f, &pool, KVIO_UPDATE_CACHE_FLUSH, c->reset);
        /* Two requests sharing a 48-token prefix, decoding. */
        case_request_t a = {1, 55, 8, 3}, b = {2, 55, 8, 3};
        add_request(f.engine, &a);
        add_request(f.engine, &b);
        scheduled_t out[16];
        step(&f, out, 16);
        cr_assert_eq(kvio_engine_activate(f.engine, 1), KVIO_OK);
        const kvio_engine_metrics_t *m = kvio_engine_metrics(f.engine);
        cr_expect_eq(m->resets, c->resets, "%s [%s]: resets", c->name, c->mirrors);
        cr_expect_eq(m->resets_pending, c->pending, "%s [%s]: pending", c->name, c->mirrors);
        cr_expect_eq(m->reset_preempted_requests, c->preempted, "%s [%s]: preempted", c->name,
                     c->mirrors);
        /* Run to the end: every flush is done by then, its delay measured
         * from the activation. */
        for (int s = 0; s < 40; s++)
            step(&f, out, 16);
        cr_expect_eq(m->resets, 1, "%s: the reset happened once nothing was in use", c->name);
        cr_expect_eq(m->resets_pending, 0, "%s", c->name);
        if (c->reset == KVIO_RESET_WHEN_IDLE)
            cr_expect_gt(m->reset_delay_ns, 0, "%s: no delay measured", c->name);
        else
            cr_expect_eq(m->reset_delay_ns, 0, "%s", c->name);
        /* Nothing cached before the reset hits after it. */
        case_request_t later = {9, 55, 4, 3};
        add_request(f.engine, &later);
        cr_assert_eq(step(&f, out, 16), 1);
        cr_expect_eq(out[0].id, 9);
        cr_expect_eq(out[0].tokens, c->later_tokens, "%s: request 9 computed %u tokens",
                     c->name, out[0].tokens);
        teardown(&f);
    }
}

/* vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OpenAI API
 * server): 70 GiB or more and not an A100 gets 1024 sequences and 8192
 * tokens, anything else 256 and 2048 (the A100 is excluded by name: PR
 * #17885 measured a larger budget lowering its throughput). */
Test(vllm_cases, batch_defaults_by_gpu_class, .timeout = 60)
{
    static const struct {
        const char *gpu;
        int64_t seqs, tokens;
    } rows[] = {
        {"h200", 1024, 8192},     /* 141 GB */
        {"h100-sxm", 1024, 8192}, /* 80 GB = 74.5 GiB */
        {"a100-80g", 256, 2048},  /* 80 GB, but an A100 */
        {"l40s", 256, 2048},      /* 48 GB */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        kvio_gpu_t gpu = test_gpu(rows[i].gpu);
        kvio_engine_batch_defaults_t defaults = kvio_serve_batch_defaults(&gpu);
        cr_expect_eq(defaults.max_num_seqs, rows[i].seqs, "%s", rows[i].gpu);
        cr_expect_eq(defaults.max_num_batched_tokens, rows[i].tokens, "%s", rows[i].gpu);
    }
    kvio_engine_batch_defaults_t unknown = kvio_serve_batch_defaults(NULL);
    cr_expect_eq(unknown.max_num_seqs, 256, "no GPU known: vLLM's fallback");
    cr_expect_eq(unknown.max_num_batched_tokens, 2048);
}

/* tests/v1/core/test_kv_cache_utils.py test_allocate_with_lookahead (block
 * size 4, 10 blocks): 3 new tokens with 2 lookahead slots take ceil(5/4) = 2
 * blocks, with 4 take ceil(7/4) = 2, with 6 take ceil(9/4) = 3. */
Test(vllm_cases, allocate_with_lookahead, .timeout = 60)
{
    static const struct {
        size_t lookahead, blocks;
    } rows[] = {{2, 2}, {4, 2}, {6, 3}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        kvio_kvcache_config_t config = {.num_blocks = 10, .block_size = 4,
                                        .enable_prefix_caching = true, .eviction = "lru"};
        kvio_kvcache_t *cache = NULL;
        cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
        uint32_t tokens[3] = {1, 2, 3};
        kvio_kvreq_t *req = NULL;
        cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, 3, NULL, 0, &req), KVIO_OK);
        cr_assert_eq(kvio_kvcache_allocate_ahead(cache, req, 3, rows[i].lookahead), KVIO_OK);
        const uint32_t *ids;
        size_t count;
        kvio_kvreq_blocks(req, &ids, &count);
        cr_expect_eq(count, rows[i].blocks, "3 tokens + %zu lookahead: %zu blocks",
                     rows[i].lookahead, count);
        kvio_kvreq_destroy(req);
        kvio_kvcache_destroy(cache);
    }
}

/* Speculative decoding as vLLM's scheduler does it (v1/core/sched/
 * scheduler.py: a running request schedules num_tokens_with_spec, allocate_
 * slots adds num_lookahead_tokens, update_from_output rolls back
 * num_computed_tokens by the rejected drafts). A 32-token prompt with a
 * 17-token output: without drafts 1 + 16 iterations; with 2 drafts a step
 * all accepted, 1 + 6 (3 tokens a step, the last step drafting only what
 * is left); with none accepted, one token a step as without drafts, each
 * step still verifying its drafts; either way only verified tokens are
 * cached: the same 3 full blocks as without speculative decoding. */
static void run_spec(double acceptance, int64_t lookahead, size_t *iterations_p,
                     size_t *verified_p, size_t *cached_tokens_p)
{
    fixture_t f;
    engine_case_t c = {.blocks = 20, .budget = 512, .max_seqs = 8, .full_isl = true};
    setup(&f, &c, 0, 0);
    kvio_engine_destroy(f.engine);
    f.config.num_lookahead_tokens = lookahead;
    f.config.spec_acceptance = acceptance;
    kvio_engine_params_t params = {
        .config = &f.config, .num_blocks = c.blocks, .block_size = BLOCK,
        .prefix_caching = true, .free_order = 1, .eviction = "lru", .sched = &f.sched,
        .seed = 1, .cost = f.cost, .kv_bytes_per_token = 131072, .host_bandwidth = 64e9};
    char error[256];
    cr_assert_eq(kvio_engine_create(&params, &f.engine, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    case_request_t req = {.id = 1, .prompt = 32, .output = 17};
    add_request(f.engine, &req);
    size_t iterations = 0, verified = 0;
    scheduled_t out[4];
    while (kvio_engine_has_work(f.engine) && iterations < 100) {
        size_t n = step(&f, out, 4);
        cr_assert_eq(n, 1);
        if (iterations > 0) {
            cr_expect_leq(out[0].tokens, 1 + lookahead, "a decode step: its token and drafts");
            verified += out[0].tokens;
        }
        iterations++;
    }
    kvio_hash_t hashes[3];
    for (size_t b = 0; b < 3; b++) {
        kvio_hash_run_t run = {.content_id = 1000 + req.id, .offset = (uint32_t)(b * BLOCK),
                               .length = BLOCK};
        hashes[b] = kvio_hash_runs(b ? &hashes[b - 1] : NULL, &run, 1);
    }
    *iterations_p = iterations;
    *verified_p = verified;
    *cached_tokens_p = kvio_engine_cached_prefix(f.engine, hashes, 3, 49);
    teardown(&f);
}

Test(vllm_cases, spec_decode_drafts_roll_back_and_cache_only_verified_tokens, .timeout = 60)
{
    size_t iterations, verified, cached_without, cached_all, cached_none;
    run_spec(0.7, 0, &iterations, &verified, &cached_without);
    cr_expect_eq(iterations, 17, "without drafts: the prefill, then 16 decode steps");
    cr_expect_eq(cached_without, 48, "three full blocks cached");
    run_spec(1.0, 2, &iterations, &verified, &cached_all);
    cr_expect_eq(iterations, 7, "all drafts accepted: 1 + 6 steps");
    cr_expect_eq(verified, 5 * 3 + 1, "the last step drafts only what is left");
    run_spec(0.0, 2, &iterations, &verified, &cached_none);
    cr_expect_eq(iterations, 17, "no draft accepted: one token a step");
    cr_expect_eq(verified, 14 * 3 + 2 + 1, "each step still verifies its drafts");
    cr_expect_eq(cached_all, cached_without, "the same verified blocks are cached");
    cr_expect_eq(cached_none, cached_without);
}
