/* Routers on small exact cases, table-driven: a fake view of four ranks
 * (load, cached prefix, running decode blocks) and the rank each router
 * picks, call after call. */
#include <criterion/criterion.h>
#include <string.h>

#include "kvio/serve.h"
#include "tests/helpers.h"

#define RANKS 4
#define CALLS 5

typedef struct fake_ranks {
    uint32_t load[RANKS];
    size_t cached_tokens[RANKS];
    uint64_t active[RANKS];
    uint32_t free[RANKS];
} fake_ranks_t;

static uint32_t fake_load(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->load[rank];
}

static size_t fake_cached_prefix(void *context, uint32_t rank, const kvio_hash_t *hashes,
                                 size_t num_hashes, uint32_t prompt_tokens)
{
    (void)hashes;
    (void)num_hashes;
    (void)prompt_tokens;
    return ((fake_ranks_t *)context)->cached_tokens[rank];
}

static uint64_t fake_active(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->active[rank];
}

static uint32_t fake_free(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->free[rank];
}

typedef struct router_case {
    const char *router; /* the serve.router section */
    const char *what;
    uint32_t count;     /* ranks to choose among */
    fake_ranks_t ranks;
    uint32_t prompt_tokens;
    int expected[CALLS]; /* the rank of each successive call; -1: no more calls */
} router_case_t;

static const router_case_t cases[] = {
    {"{policy: round_robin}", "each rank in turn", 3, {.load = {0}}, 16, {0, 1, 2, 0, 1}},
    {"{policy: least_loaded}", "the fewest requests; ties to the lower rank", 4,
     {.load = {3, 1, 1, 2}}, 16, {1, 1, -1}},
    {"{policy: prefix_affinity}", "the longest prefix within load_cap 16", 3,
     {.load = {0, 2, 30}, .cached_tokens = {0, 64, 128}}, 160, {1, -1}},
    {"{policy: prefix_affinity, prefix_affinity: {load_cap: 1}}",
     "over the cap, the least loaded", 3, {.load = {0, 2, 30}, .cached_tokens = {0, 64, 128}},
     160, {0, -1}},
    {"{policy: kv_cost}", "uncached prefill blocks plus decode blocks, lowest", 4,
     {.active = {10, 20, 5, 9}, .cached_tokens = {0, 128, 64, 128}}, 128, {2, -1}},
    {"{policy: free_kv}", "most blocks free after the uncached prompt, then fewest requests", 4,
     {.free = {20, 14, 20, 23}, .cached_tokens = {0, 160, 64, 0}, .load = {3, 2, 1, 9}}, 160,
     {2, -1}},
    {"{policy: kv_approx}", "no routed prefix anywhere: the least loaded (its history below)", 3,
     {.load = {3, 1, 2}}, 16, {1, 1, -1}},
};

Test(router, every_router_picks_as_documented, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const router_case_t *test = &cases[c];
        kvio_router_config_t config = {0};
        char error[256];
        cr_assert_eq(kvio_config_bind_text(kvio_router_options, test->router, "test", &config,
                                           error, sizeof(error)),
                     KVIO_OK, "%s", error);
        kvio_router_t *router = NULL;
        cr_assert_eq(kvio_router_create(&config, &router), KVIO_OK);
        fake_ranks_t ranks = test->ranks;
        kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                                   .cached_prefix = fake_cached_prefix,
                                   .active_decode_blocks = fake_active,
                                   .free_blocks = fake_free};
        kvio_engine_request_t request = {.prompt_tokens = test->prompt_tokens};
        for (int call = 0; call < CALLS && test->expected[call] >= 0; call++)
            cr_expect_eq(kvio_router_choose_view(router, &view, test->count, &request),
                         (uint32_t)test->expected[call], "%s (%s): call %d", test->router,
                         test->what, call);
        kvio_router_destroy(router);
        kvio_config_free(kvio_router_options, &config);
    }
}

/* kv_events over the fake ranks: the router built from text, the blocks
 * rank `holder` holds told by BlockStored events at time 0. */
static kvio_router_t *kv_events_router(const char *text, kvio_router_config_t *config)
{
    char error[256];
    cr_assert_eq(kvio_config_bind_text(kvio_router_options, text, "test", config, error,
                                       sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_router_t *router = NULL;
    cr_assert_eq(kvio_router_create(config, &router), KVIO_OK);
    cr_assert(kvio_router_hears_events(router));
    return router;
}

#define PROMPT_BLOCKS 5

/* A repeated prefix goes to the rank whose events said it holds it, though
 * that rank is the busiest; a prompt no rank holds goes to the least
 * loaded. The index is the events' alone: the view's own cached prefix
 * (here 0 everywhere but the holder) is not what chose. */
Test(router, kv_events_routes_a_repeated_prefix_to_the_rank_holding_it, .timeout = 10)
{
    kvio_router_config_t config = {0};
    kvio_router_t *router = kv_events_router("{policy: kv_events}", &config);
    kvio_hash_t shared[PROMPT_BLOCKS], other[PROMPT_BLOCKS];
    for (uint64_t b = 0; b < PROMPT_BLOCKS; b++) {
        shared[b] = (kvio_hash_t){.low = 100 + b, .high = 7};
        other[b] = (kvio_hash_t){.low = 900 + b, .high = 7};
    }
    /* Rank 2 stored the first four blocks; rank 1 the first only. */
    for (int b = 0; b < 4; b++)
        kvio_router_event(router, 2, shared[b], true, 0);
    kvio_router_event(router, 1, shared[0], true, 0);
    fake_ranks_t ranks = {.load = {0, 1, 9, 3}, .cached_tokens = {0, 16, 64, 0}};
    kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                               .cached_prefix = fake_cached_prefix,
                               .active_decode_blocks = fake_active, .now_ns = 1};
    kvio_engine_request_t request = {.prompt_tokens = 16 * PROMPT_BLOCKS + 3, .hashes = shared,
                                     .num_hashes = PROMPT_BLOCKS};
    for (int call = 0; call < 3; call++)
        cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 2, "call %d", call);
    request.hashes = other;
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 0,
                 "nowhere: least loaded");
    /* Rank 2 evicts its first block: what it holds is no longer a prefix. */
    kvio_router_event(router, 2, shared[0], false, 2);
    request.hashes = shared;
    view.now_ns = 3;
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 1);
    kvio_router_stats_t stats;
    kvio_router_stats(router, &stats);
    cr_expect_eq(stats.decisions, 5);
    cr_expect_eq(stats.indexed_routes, 4);
    cr_expect_eq(stats.stale_routes, 0, "the view held what the index said");
    cr_expect_eq(stats.events, 6);
    kvio_router_destroy(router);
    kvio_config_free(kvio_router_options, &config);
}

/* With event_lag 100ms, a BlockRemoved reaches the index 100 ms after the
 * rank evicted: a route before then goes to the rank that no longer holds
 * the prefix (a stale route, counted); after it, the index knows. Lag 0
 * never routes stale on the same events. */
Test(router, kv_events_route_is_stale_until_the_lagged_removal_arrives, .timeout = 10)
{
    const char *texts[] = {"{policy: kv_events, event_lag: 100ms}", "{policy: kv_events}"};
    const uint64_t expected_stale[] = {1, 0};
    for (int t = 0; t < 2; t++) {
        kvio_router_config_t config = {0};
        kvio_router_t *router = kv_events_router(texts[t], &config);
        kvio_hash_t prompt[PROMPT_BLOCKS];
        for (uint64_t b = 0; b < PROMPT_BLOCKS; b++)
            prompt[b] = (kvio_hash_t){.low = 100 + b, .high = 9};
        const int64_t ms = 1000000;
        for (int b = 0; b < PROMPT_BLOCKS; b++)
            kvio_router_event(router, 3, prompt[b], true, 0);
        fake_ranks_t ranks = {.load = {2, 2, 2, 5}, .cached_tokens = {0}};
        kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                                   .cached_prefix = fake_cached_prefix,
                                   .active_decode_blocks = fake_active, .now_ns = 50 * ms};
        kvio_engine_request_t request = {.prompt_tokens = 16 * PROMPT_BLOCKS + 1,
                                         .hashes = prompt, .num_hashes = PROMPT_BLOCKS};
        if (t == 0) /* the stores are not in yet at 50 ms: the least loaded */
            cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 0);
        view.now_ns = 150 * ms;
        ranks.cached_tokens[3] = 80;
        cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 3, "%s", texts[t]);
        /* Rank 3 evicts the whole prompt at 160 ms. */
        for (int b = 0; b < PROMPT_BLOCKS; b++)
            kvio_router_event(router, 3, prompt[b], false, 160 * ms);
        ranks.cached_tokens[3] = 0;
        view.now_ns = 200 * ms;
        cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), t == 0 ? 3 : 0,
                     "%s at 200 ms", texts[t]);
        view.now_ns = 260 * ms;
        cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 0,
                     "%s at 260 ms", texts[t]);
        kvio_router_stats_t stats;
        kvio_router_stats(router, &stats);
        cr_expect_eq(stats.stale_routes, expected_stale[t], "%s", texts[t]);
        cr_expect_eq(stats.indexed_routes, 1 + expected_stale[t], "%s", texts[t]);
        kvio_router_destroy(router);
        kvio_config_free(kvio_router_options, &config);
    }
}

/* score: cost is Dynamo's formula on the same index: overlap_weight x the
 * prefill blocks a rank lacks + its decode blocks. */
Test(router, kv_events_cost_weighs_indexed_overlap_against_decode_blocks, .timeout = 10)
{
    const char *texts[] = {"{policy: kv_events, kv_events: {score: cost}}",
                           "{policy: kv_events, kv_events: {score: cost, overlap_weight: 0.1}}"};
    const uint32_t expected[] = {2, 0};
    for (int t = 0; t < 2; t++) {
        kvio_router_config_t config = {0};
        kvio_router_t *router = kv_events_router(texts[t], &config);
        kvio_hash_t prompt[PROMPT_BLOCKS];
        for (uint64_t b = 0; b < PROMPT_BLOCKS; b++) {
            prompt[b] = (kvio_hash_t){.low = 300 + b, .high = 1};
            kvio_router_event(router, 2, prompt[b], true, 0);
        }
        /* Rank 2 holds 5 of 6 prompt blocks: 1 + 4 decode = 5 (weight 1)
         * against rank 0's 6 + 0 = 6; at weight 0.1: 4.1 against 0.6. */
        fake_ranks_t ranks = {.active = {0, 3, 4, 8}, .cached_tokens = {0, 0, 80, 0}};
        kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                                   .cached_prefix = fake_cached_prefix,
                                   .active_decode_blocks = fake_active, .now_ns = 1};
        kvio_engine_request_t request = {.prompt_tokens = 16 * PROMPT_BLOCKS + 8,
                                         .hashes = prompt, .num_hashes = PROMPT_BLOCKS};
        cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), expected[t], "%s",
                     texts[t]);
        kvio_router_destroy(router);
        kvio_config_free(kvio_router_options, &config);
    }
}

/* The decode ranks' events feed no index: pd.router: kv_events is refused
 * before anything runs, naming the key (serve.router: kv_events over the
 * prefill ranks is fine). */
Test(router, kv_events_as_the_decode_router_is_refused, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "pd-mooncake", "--set", "pd.router.policy=kv_events",
                               "-o", "out", NULL);
    cr_assert_eq(run.status, 2, "%s", run.err);
    cr_assert(test_contains(run.err, "pd.router: kv_events"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* kv_approx (llm-d's approximate scorer) hears no events: it predicts a
 * rank's cache from what it routed there, an LRU of capacity blocks per
 * rank. A repeated prompt goes back to where it went, whether or not the
 * rank kept it (a route the rank does not hold is stale); a prompt routed
 * later pushes the least recent blocks out, the tail of the older prompt
 * first (its head was touched last). */
Test(router, kv_approx_predicts_from_its_own_routes, .timeout = 10)
{
    kvio_router_config_t config = {0};
    char error[256];
    cr_assert_eq(kvio_config_bind_text(kvio_router_options,
                                       "{policy: kv_approx, kv_approx: {capacity: 8}}", "test",
                                       &config, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_router_t *router = NULL;
    cr_assert_eq(kvio_router_create(&config, &router), KVIO_OK);
    cr_assert(!kvio_router_hears_events(router));
    kvio_hash_t first[PROMPT_BLOCKS], second[PROMPT_BLOCKS];
    for (uint64_t b = 0; b < PROMPT_BLOCKS; b++) {
        first[b] = (kvio_hash_t){.low = 10 + b, .high = 3};
        second[b] = (kvio_hash_t){.low = 50 + b, .high = 3};
    }
    fake_ranks_t ranks = {.load = {1, 0, 2, 3}};
    kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                               .cached_prefix = fake_cached_prefix,
                               .active_decode_blocks = fake_active};
    kvio_engine_request_t request = {.prompt_tokens = 16 * PROMPT_BLOCKS + 1, .hashes = first,
                                     .num_hashes = PROMPT_BLOCKS};
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 1, "no history");
    ranks.load[1] = 5;
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 1,
                 "back where it went, though rank 1 holds none of it (stale)");
    ranks.cached_tokens[1] = 80;
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 1);
    /* The second prompt goes to rank 1 too: 10 blocks for 8 places. */
    ranks.load[1] = 0;
    request.hashes = second;
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 1);
    request.hashes = first;
    ranks.load[1] = 9;
    cr_expect_eq(kvio_router_choose_view(router, &view, RANKS, &request), 1,
                 "3 of its 5 blocks still remembered");
    kvio_router_stats_t stats;
    kvio_router_stats(router, &stats);
    cr_expect(stats.indexed && !stats.hears_events);
    cr_expect_eq(stats.decisions, 5);
    cr_expect_eq(stats.indexed_routes, 3);
    cr_expect_eq(stats.stale_routes, 1);
    cr_expect_eq(stats.events, 0);
    kvio_router_destroy(router);
    kvio_config_free(kvio_router_options, &config);
}
