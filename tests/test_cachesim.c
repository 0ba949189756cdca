/* Tests for cachesim (longest-prefix hits, insert-or-touch in request
 * order, capacities, policies) and the kvio cachesim command on small
 * fixture traces written by the tests. */
#include "kvio/cachesim.h"

#include "kvio/kvcache.h"
#include "tests/helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUEST(sim, tokens, ...)                                                         \
    do {                                                                                  \
        uint64_t ids_[] = {__VA_ARGS__};                                                  \
        cr_assert_eq(kvio_cachesim_add_request(sim, ids_, sizeof(ids_) / sizeof(ids_[0]), \
                                               tokens),                                   \
                     KVIO_OK);                                                            \
    } while (0)

static kvio_cachesim_t *make_sim(uint32_t block_tokens)
{
    kvio_cachesim_t *sim = NULL;
    cr_assert_eq(kvio_cachesim_create(block_tokens, &sim), KVIO_OK);
    return sim;
}

static kvio_cachesim_result_t run(const kvio_cachesim_t *sim, const char *policy, uint64_t capacity)
{
    kvio_cachesim_result_t result;
    cr_assert_eq(kvio_cachesim_run(sim, policy, capacity, &result), KVIO_OK);
    return result;
}

Test(cachesim, hit_is_the_longest_cached_prefix_only, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(10);
    REQUEST(sim, 40, 1, 2, 3, 4);
    REQUEST(sim, 40, 1, 2, 9, 4); /* 1, 2 hit; 9 misses; 4 is cached but after the gap */
    REQUEST(sim, 15, 5, 1);       /* first block misses: no hit at all */
    kvio_cachesim_result_t result = run(sim, "lru", KVIO_CACHESIM_UNLIMITED);
    cr_assert_eq(result.requests, 3);
    cr_assert_eq(result.blocks, 10);
    cr_assert_eq(result.hit_blocks, 2);
    cr_assert_eq(result.tokens, 95);
    cr_assert_eq(result.hit_tokens, 20);
    cr_assert_float_eq(result.block_hit_rate, 0.2, 1e-12);
    cr_assert_float_eq(result.token_hit_rate, 20.0 / 95.0, 1e-12);
    cr_assert_eq(kvio_cachesim_num_unique_blocks(sim), 6);
    kvio_cachesim_destroy(sim);
}

Test(cachesim, token_hits_never_exceed_the_request_length, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(512);
    REQUEST(sim, 1000, 7, 8);
    REQUEST(sim, 700, 7, 8); /* 2 blocks hit = 1024 tokens, capped at 700 */
    kvio_cachesim_result_t result = run(sim, "lru", 100);
    cr_assert_eq(result.hit_blocks, 2);
    cr_assert_eq(result.hit_tokens, 700);
    kvio_cachesim_destroy(sim);
}

/* The reference inserts then drops the least recent when over capacity, and
 * touches every block of a request, hits and misses alike, in order. */
Test(cachesim, lru_touches_every_block_in_request_order, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(1);
    REQUEST(sim, 3, 1, 2, 3); /* cache, least recent first: 1 2 3 */
    REQUEST(sim, 1, 1);       /* hit; 2 3 1 */
    REQUEST(sim, 1, 4);       /* miss; 2 dropped: 3 1 4 */
    REQUEST(sim, 1, 2);       /* miss; 3 dropped: 1 4 2 */
    REQUEST(sim, 1, 1);       /* hit */
    REQUEST(sim, 1, 3);       /* miss */
    kvio_cachesim_result_t result = run(sim, "lru", 3);
    cr_assert_eq(result.hit_blocks, 2);
    cr_assert_eq(result.evictions, 3);
    kvio_cachesim_destroy(sim);
}

Test(cachesim, a_request_longer_than_the_cache_evicts_its_own_head, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(1);
    REQUEST(sim, 4, 1, 2, 3, 4);
    REQUEST(sim, 4, 1, 2, 3, 4);
    kvio_cachesim_result_t result = run(sim, "lru", 2);
    cr_assert_eq(result.hit_blocks, 0, "1 and 2 were pushed out by 3 and 4");
    kvio_cachesim_destroy(sim);
}

/* The radix index (kvcache/radix.c) evicts leaves only: a prefix's head
 * shared by two requests stays while a tail can go, where the block index
 * (touching a request's blocks in order) evicts the head first. Capacity 3,
 * lru: [1,2], [1,3] (1 hits), [4], [5], [1,3]. Blocks: 2 goes for 4, then
 * 1 (least recent) for 5, so the last [1,3] misses. Radix: leaf 2 goes for
 * 4, then leaf 3 for 5 (1 is an inner node, and a leaf only after), so the
 * last [1,3] hits 1. */
static kvio_cachesim_t *shared_head_sim(void)
{
    kvio_cachesim_t *sim = make_sim(1);
    REQUEST(sim, 2, 1, 2);
    REQUEST(sim, 2, 1, 3);
    REQUEST(sim, 1, 4);
    REQUEST(sim, 1, 5);
    REQUEST(sim, 2, 1, 3);
    return sim;
}

Test(cachesim, radix_index_keeps_a_shared_head_the_block_index_evicts, .timeout = 10)
{
    kvio_cachesim_t *sim = shared_head_sim();
    kvio_cachesim_result_t blocks = run(sim, "lru", 3);
    cr_assert_eq(blocks.hit_blocks, 1);
    cr_assert_eq(kvio_cachesim_set_index(sim, KVIO_KVCACHE_INDEX_RADIX), KVIO_OK);
    kvio_cachesim_result_t radix = run(sim, "lru", 3);
    cr_assert_eq(radix.requests, 5);
    cr_assert_eq(radix.blocks, 8);
    cr_assert_eq(radix.hit_blocks, 2, "the head 1 survived as an inner node");
    cr_assert_eq(radix.evictions, 3, "2, 3, then 4 for the last 3");
    /* The sweep's lru takes one replay per capacity under radix. */
    uint64_t capacities[] = {3, KVIO_CACHESIM_UNLIMITED};
    kvio_cachesim_result_t swept[2];
    cr_assert_eq(kvio_cachesim_sweep_lru(sim, capacities, 2, swept), KVIO_OK);
    cr_assert_eq(swept[0].hit_blocks, 2);
    cr_assert_eq(swept[1].hit_blocks, 3, "unlimited: 1, 1 and 3");
    cr_assert_eq(swept[1].evictions, 0);
    kvio_cachesim_destroy(sim);
}

Test(cachesim, radix_and_block_indexes_agree_when_nothing_is_evicted, .timeout = 20)
{
    kvio_cachesim_t *sim = make_sim(4);
    uint64_t seed = 7;
    for (int r = 0; r < 300; r++) {
        uint64_t ids[12];
        size_t count = 1 + (seed >> 33) % 12;
        uint64_t root = (seed >> 20) % 5;
        for (size_t i = 0; i < count; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            /* Chained ids, as a trace's: each names its whole prefix (a
             * root, then one of 3 branches past the fourth block). */
            uint64_t branch = i > 3 ? (seed >> 40) % 3 : 0;
            ids[i] = i == 0 ? root + 1 : ids[i - 1] * 7 + branch + 1;
        }
        cr_assert_eq(kvio_cachesim_add_request(sim, ids, count, count * 4), KVIO_OK);
    }
    const char *policies[] = {"lru", "lfu", "fifo"};
    for (size_t p = 0; p < 3; p++) {
        cr_assert_eq(kvio_cachesim_set_index(sim, KVIO_KVCACHE_INDEX_HASH), KVIO_OK);
        kvio_cachesim_result_t blocks = run(sim, policies[p], KVIO_CACHESIM_UNLIMITED);
        cr_assert_eq(kvio_cachesim_set_index(sim, KVIO_KVCACHE_INDEX_RADIX), KVIO_OK);
        kvio_cachesim_result_t radix = run(sim, policies[p], KVIO_CACHESIM_UNLIMITED);
        cr_assert_gt(blocks.hit_blocks, 0);
        cr_assert_eq(radix.hit_blocks, blocks.hit_blocks, "%s", policies[p]);
        cr_assert_eq(radix.hit_tokens, blocks.hit_tokens);
        cr_assert_eq(radix.evictions, 0);
    }
    cr_assert_eq(kvio_cachesim_set_window(sim, 128), KVIO_ERR_INVALID,
                 "hybrid groups are the block index's");
    kvio_cachesim_destroy(sim);
}

Test(cachesim_cli, index_radix_replays_through_the_tree, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl",
                                 "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
                                 "{\"timestamp\": 2, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 3]}\n"
                                 "{\"timestamp\": 3, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [4]}\n"
                                 "{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [5]}\n"
                                 "{\"timestamp\": 5, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 3]}\n");
    test_run_t run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--block-tokens", "1",
                                      "--capacity", "3", "--index", "radix", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "index=radix"), "%s", run_result.out);
    cr_assert(test_contains(run_result.out, "0.2500"), "2 of 8 blocks: %s", run_result.out);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--block-tokens", "1", "--capacity",
                           "3", "--json", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "\"index\": \"hash\""), "%s", run_result.out);
    cr_assert(test_contains(run_result.out, "\"hit_blocks\": 1"), "%s", run_result.out);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--index", "tree", NULL);
    cr_assert_eq(run_result.status, 2);
    cr_assert(test_contains(run_result.err, "bad --index 'tree' (hash or radix)"), "%s",
              run_result.err);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--index", "radix", "--hybrid",
                           "--model", "gpt-oss-20b", NULL);
    cr_assert_eq(run_result.status, 2);
    cr_assert(test_contains(run_result.err, "--hybrid takes --index hash"), "%s",
              run_result.err);
    test_run_free(&run_result);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* Two replicas, round robin, 2 blocks each: [1,2] [1,2] [1,3] [1,3] puts
 * [1,2] then [1,3] on each replica (1 hits once on each: 2 of 8 blocks);
 * one store of 4 blocks serves 0 + 2 + 1 + 2 of them. */
Test(cachesim, a_shared_store_hits_what_another_replica_cached, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(1);
    REQUEST(sim, 2, 1, 2);
    REQUEST(sim, 2, 1, 2);
    REQUEST(sim, 2, 1, 3);
    REQUEST(sim, 2, 1, 3);
    kvio_cachesim_result_t local, global;
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 2, 2, KVIO_CACHESIM_ROUND_ROBIN, &local, &global), KVIO_OK);
    cr_assert_eq(local.requests, 4);
    cr_assert_eq(local.blocks, 8);
    cr_assert_eq(local.hit_blocks, 2);
    cr_assert_eq(local.capacity_blocks, 2);
    cr_assert_eq(global.requests, 4);
    cr_assert_eq(global.hit_blocks, 5);
    cr_assert_eq(global.capacity_blocks, 4, "the store holds the replicas' capacity together");
    /* One replica is the plain replay, local and global alike. */
    kvio_cachesim_result_t one = run(sim, "lru", 2);
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 2, 1, KVIO_CACHESIM_ROUND_ROBIN, &local, &global), KVIO_OK);
    cr_assert_eq(local.hit_blocks, one.hit_blocks);
    cr_assert_eq(global.hit_blocks, one.hit_blocks);
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 2, 0, KVIO_CACHESIM_ROUND_ROBIN, &local, &global), KVIO_ERR_INVALID);
    kvio_cachesim_destroy(sim);
}

/* A small fixture of sessions sharing system prompts, four replicas: the
 * shared store's hit rate is at least the replicas' own at every capacity,
 * for either index and several policies. */
Test(cachesim, a_shared_store_is_never_below_local_caches_on_the_fixture, .timeout = 60)
{
    kvio_cachesim_t *sim = make_sim(16);
    uint64_t seed = 11;
    uint64_t turns[8] = {0};
    for (int r = 0; r < 400; r++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t session = (seed >> 33) % 8, prompt = session % 3;
        uint64_t ids[64];
        size_t count = 0;
        for (size_t i = 0; i < 6; i++) /* the system prompt */
            ids[count++] = prompt * 100000 + i;
        turns[session] = turns[session] % 20 + 1;
        for (uint64_t t = 0; t < turns[session] && count < 64; t++) /* the history */
            ids[count++] = 1000000 + session * 1000 + t;
        cr_assert_eq(kvio_cachesim_add_request(sim, ids, count, count * 16 - 5), KVIO_OK);
    }
    const uint64_t capacities[] = {1, 2, 4, 8, 16, 32, 64, KVIO_CACHESIM_UNLIMITED};
    const char *policies[] = {"lru", "lfu", "fifo"};
    for (int index = 0; index < 2; index++) {
        cr_assert_eq(kvio_cachesim_set_index(sim, index ? KVIO_KVCACHE_INDEX_RADIX
                                                        : KVIO_KVCACHE_INDEX_HASH),
                     KVIO_OK);
        for (size_t p = 0; p < 3; p++) {
            for (size_t c = 0; c < sizeof(capacities) / sizeof(capacities[0]); c++) {
                kvio_cachesim_result_t local, global;
                cr_assert_eq(kvio_cachesim_run_fleet(sim, policies[p], capacities[c], 4,
                                                     KVIO_CACHESIM_ROUND_ROBIN, &local, &global),
                             KVIO_OK);
                cr_assert_geq(global.token_hit_rate, local.token_hit_rate,
                              "index %d %s capacity %llu: global %.4f < local %.4f", index,
                              policies[p], (unsigned long long)capacities[c],
                              global.token_hit_rate, local.token_hit_rate);
                if (capacities[c] == 64)
                    cr_assert_gt(global.token_hit_rate, local.token_hit_rate,
                                 "sessions spread over replicas find their history only "
                                 "in the store");
            }
        }
    }
    kvio_cachesim_destroy(sim);
}

/* [1,2] [1,2] [3,4] [3,4] over 2 replicas of 2 blocks: round robin puts
 * one of each on each replica (no hit); prefix_affinity sends the second
 * [1,2] where the first is, and [3,4], cached nowhere, to the less routed
 * replica, then its twin after it: 4 of 8 blocks, what one store of 4
 * serves. The load cap holds: 40 copies of one prompt spread once a
 * replica is 16 ahead. */
Test(cachesim, prefix_affinity_routes_to_the_replica_holding_the_prefix, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(1);
    REQUEST(sim, 2, 1, 2);
    REQUEST(sim, 2, 1, 2);
    REQUEST(sim, 2, 3, 4);
    REQUEST(sim, 2, 3, 4);
    kvio_cachesim_result_t local, global;
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 2, 2, KVIO_CACHESIM_ROUND_ROBIN, &local,
                                         &global),
                 KVIO_OK);
    cr_assert_eq(local.hit_blocks, 0);
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 2, 2, KVIO_CACHESIM_PREFIX_AFFINITY,
                                         &local, &global),
                 KVIO_OK);
    cr_assert_eq(local.hit_blocks, 4);
    cr_assert_eq(global.hit_blocks, 4);
    kvio_cachesim_destroy(sim);

    sim = make_sim(1);
    for (int i = 0; i < 40; i++)
        REQUEST(sim, 1, 9);
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 1, 2, KVIO_CACHESIM_PREFIX_AFFINITY,
                                         &local, &global),
                 KVIO_OK);
    /* Replica 0 takes 17 (hits 16); the 18th goes to replica 1 (a miss),
     * which holds the block too from then on: 2 misses in all. */
    cr_assert_eq(local.hit_blocks, 38);
    cr_assert_eq(kvio_cachesim_set_index(sim, KVIO_KVCACHE_INDEX_RADIX), KVIO_OK);
    cr_assert_eq(kvio_cachesim_run_fleet(sim, "lru", 1, 2, KVIO_CACHESIM_PREFIX_AFFINITY,
                                         &local, &global),
                 KVIO_ERR_INVALID);
    kvio_cachesim_destroy(sim);
}

Test(cachesim_cli, replicas_print_local_and_global_hit_rates, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl",
                                 "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
                                 "{\"timestamp\": 2, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
                                 "{\"timestamp\": 3, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 3]}\n"
                                 "{\"timestamp\": 4, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 3]}\n");
    test_run_t run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--block-tokens", "1",
                                      "--capacity", "2", "--replicas", "2", "--csv", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "lru,2,local,2,0.250000,0.250000,2,8,2,8,"), "%s",
              run_result.out);
    cr_assert(test_contains(run_result.out, "lru,2,global,4,0.625000,0.625000,5,8,5,8,"), "%s",
              run_result.out);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--block-tokens", "1", "--capacity",
                           "2", "--replicas", "2", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "replicas=2 router=round_robin"), "%s",
              run_result.out);
    cr_assert(test_contains(run_result.out, "2.500"), "the gain, 0.625 / 0.25: %s",
              run_result.out);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--block-tokens", "1", "--capacity",
                           "2", "--replicas", "2", "--json", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "\"scope\": \"global\""), "%s", run_result.out);
    cr_assert(test_contains(run_result.out, "\"replicas\": 2"), "%s", run_result.out);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--block-tokens", "1", "--capacity",
                           "2", "--replicas", "2", "--router", "prefix_affinity", "--csv", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    /* Every request to replica 0: 0 + 2 + 1 + 2 of 8 blocks, as the store. */
    cr_assert(test_contains(run_result.out, "lru,2,local,2,0.625000,"), "%s", run_result.out);
    test_run_free(&run_result);
    const char *bad[][4] = {
        {"--replicas", "0", NULL, NULL},
        {"--router", "prefix_affinity", NULL, NULL},
        {"--replicas", "2", "--router", "random"},
    };
    const char *says[] = {"bad --replicas '0'", "--router routes a fleet: give --replicas N",
                          "bad --router 'random' (round_robin or prefix_affinity)"};
    for (size_t i = 0; i < 3; i++) {
        run_result = test_kvio(dir, "cachesim", "trace.jsonl", bad[i][0], bad[i][1], bad[i][2],
                               bad[i][3], NULL);
        cr_assert_eq(run_result.status, 2, "%s", says[i]);
        cr_assert(test_contains(run_result.err, says[i]), "%s", run_result.err);
        test_run_free(&run_result);
    }
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* One-block requests make each policy's victim visible in the hit count. */
typedef struct policy_case {
    const char *policy;
    uint64_t capacity;
    uint64_t expected_hits;
} policy_case_t;

static uint64_t hits_for(const char *policy, uint64_t capacity, const uint64_t *ids, size_t count)
{
    kvio_cachesim_t *sim = make_sim(1);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(kvio_cachesim_add_request(sim, &ids[i], 1, 1), KVIO_OK);
    uint64_t hits = run(sim, policy, capacity).hit_blocks;
    kvio_cachesim_destroy(sim);
    return hits;
}

Test(cachesim, each_policy_picks_its_own_victim, .timeout = 10)
{
    /* Capacity 2. A B A C A B: */
    uint64_t touch_then_insert[] = {1, 2, 1, 3, 1, 2};
    /* lru: C evicts B (A was touched), A hits again, B misses. */
    cr_assert_eq(hits_for("lru", 2, touch_then_insert, 6), 2);
    /* fifo: C evicts A (oldest; hits do not refresh), A misses, B misses. */
    cr_assert_eq(hits_for("fifo", 2, touch_then_insert, 6), 1);
    /* mru: C evicts A (just touched), A evicts C, B hits. */
    cr_assert_eq(hits_for("mru", 2, touch_then_insert, 6), 2);
    /* A A A B C A B: */
    uint64_t frequent[] = {1, 1, 1, 2, 3, 1, 2};
    /* lfu: C evicts B (0 hits against A's 2), A hits, B misses. */
    cr_assert_eq(hits_for("lfu", 2, frequent, 7), 3);
    /* lru: C evicts A (B is more recent), A misses, B misses. */
    cr_assert_eq(hits_for("lru", 2, frequent, 7), 2);
}

Test(cachesim, s3fifo_keeps_a_hot_set_through_a_scan_that_flushes_lru, .timeout = 10)
{
    uint64_t ids[64];
    size_t count = 0;
    for (int round = 0; round < 2; round++)
        for (uint64_t hot = 1; hot <= 3; hot++)
            ids[count++] = hot;
    for (uint64_t scan = 100; scan < 120; scan++)
        ids[count++] = scan;
    for (uint64_t hot = 1; hot <= 3; hot++)
        ids[count++] = hot;
    /* 3 hits in the second round, then 3 after the scan for s3fifo. */
    cr_assert_eq(hits_for("s3fifo", 10, ids, count), 6);
    cr_assert_eq(hits_for("arc", 10, ids, count), 6); /* the hot set is in T2 */
    cr_assert_eq(hits_for("lru", 10, ids, count), 3);
    cr_assert_eq(hits_for("fifo", 10, ids, count), 3);
}

Test(cachesim, capacity_that_holds_everything_is_the_same_for_every_policy, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(4);
    for (uint64_t r = 0; r < 50; r++) {
        uint64_t ids[6];
        for (uint64_t i = 0; i < 6; i++)
            ids[i] = (r * 7 + i * 3) % 40;
        cr_assert_eq(kvio_cachesim_add_request(sim, ids, 6, 22), KVIO_OK);
    }
    kvio_cachesim_result_t unlimited = run(sim, "lru", KVIO_CACHESIM_UNLIMITED);
    for (size_t i = 0; i < kvio_evictions.count; i++) {
        const char *policy = kvio_evictions.plugins[i]->name;
        kvio_cachesim_result_t result = run(sim, policy, 40);
        cr_assert_eq(result.hit_blocks, unlimited.hit_blocks, "%s", policy);
        cr_assert_eq(result.evictions, 0);
        result = run(sim, policy, 10);
        cr_assert_lt(result.hit_blocks, unlimited.hit_blocks, "%s at 10 blocks", policy);
        cr_assert_gt(result.evictions, 0);
    }
    kvio_cachesim_destroy(sim);
}

Test(cachesim, sweep_on_threads_equals_single_runs, .timeout = 20)
{
    kvio_cachesim_t *sim = make_sim(16);
    uint64_t state = 12345;
    for (int r = 0; r < 400; r++) {
        uint64_t ids[32];
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t prefix = (state >> 33) % 20;
        size_t length = 8 + (state >> 50) % 24;
        for (size_t i = 0; i < length; i++)
            ids[i] = i < 6 ? prefix * 1000 + i : (state >> 20) + i + ((uint64_t)1 << 40);
        cr_assert_eq(kvio_cachesim_add_request(sim, ids, length, length * 16 - 5), KVIO_OK);
    }
    const char *policies[] = {"lru", "s3fifo", "lfu"};
    uint64_t capacities[] = {50, 500, KVIO_CACHESIM_UNLIMITED};
    kvio_cachesim_result_t results[9];
    cr_assert_eq(kvio_cachesim_sweep(sim, policies, 3, capacities, 3, 4, results), KVIO_OK);
    for (size_t i = 0; i < 9; i++) {
        kvio_cachesim_result_t single = run(sim, policies[i / 3], capacities[i % 3]);
        cr_assert_eq(results[i].hit_blocks, single.hit_blocks);
        cr_assert_eq(results[i].hit_tokens, single.hit_tokens);
        cr_assert_eq(results[i].evictions, single.evictions);
        cr_assert_str_eq(results[i].policy, policies[i / 3]);
        cr_assert_eq(results[i].capacity_blocks, capacities[i % 3]);
    }
    kvio_cachesim_destroy(sim);
}

/* ---- lru at every capacity in one pass ---------------------------------- */

/* Worked by hand (stack most recent first; a request's hit is its prefix
 * that is resident before any of its blocks is touched):
 *   [1 2 3]  all new; stack 3 2 1
 *   [1 2 4]  1, 2 at depths 2, 1: hit at capacities >= 3; stack 4 2 1 3
 *   [3 1]    depths 3, 2: hit only at capacities >= 4; stack 1 3 4 2
 *   [2 2 5]  2 at depth 3 (twice, the lookup is before the touches): hits
 *            at >= 4; stack 5 2 1 3 4
 * Evictions at capacity C = misses at touch time - min(C, 5 unique). */
Test(cachesim, lru_sweep_matches_a_case_worked_by_hand, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(10);
    REQUEST(sim, 30, 1, 2, 3);
    REQUEST(sim, 25, 1, 2, 4);
    REQUEST(sim, 20, 3, 1);
    REQUEST(sim, 30, 2, 2, 5);
    uint64_t capacities[] = {3, KVIO_CACHESIM_UNLIMITED, 1, 4, 2, 5, 3};
    struct {
        uint64_t hit_blocks, hit_tokens, evictions;
    } expected[] = {
        {2, 20, 5}, {6, 60, 0}, {0, 0, 9}, {6, 60, 1}, {0, 0, 8}, {6, 60, 0}, {2, 20, 5},
    };
    kvio_cachesim_result_t results[7];
    cr_assert_eq(kvio_cachesim_sweep_lru(sim, capacities, 7, results), KVIO_OK);
    for (size_t i = 0; i < 7; i++) {
        cr_assert_str_eq(results[i].policy, "lru");
        cr_assert_eq(results[i].capacity_blocks, capacities[i]);
        cr_assert_eq(results[i].requests, 4);
        cr_assert_eq(results[i].blocks, 11);
        cr_assert_eq(results[i].tokens, 105);
        cr_assert_eq(results[i].hit_blocks, expected[i].hit_blocks, "capacity %llu: %llu hits",
                     (unsigned long long)capacities[i],
                     (unsigned long long)results[i].hit_blocks);
        cr_assert_eq(results[i].hit_tokens, expected[i].hit_tokens, "capacity %llu",
                     (unsigned long long)capacities[i]);
        cr_assert_eq(results[i].evictions, expected[i].evictions, "capacity %llu: %llu",
                     (unsigned long long)capacities[i],
                     (unsigned long long)results[i].evictions);
        cr_assert_float_eq(results[i].block_hit_rate, expected[i].hit_blocks / 11.0, 1e-12);
        cr_assert_float_eq(results[i].token_hit_rate, expected[i].hit_tokens / 105.0, 1e-12);
    }
    kvio_cachesim_destroy(sim);
}

static uint64_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return *state >> 33;
}

/* Requests built from shared prefixes (system prompts, earlier turns), a
 * random tail, now and then an id repeated inside the request, empty
 * requests, and ids beyond the direct-indexed range. */
static kvio_cachesim_t *random_trace(uint64_t seed, size_t num_requests, uint64_t num_prefixes)
{
    kvio_cachesim_t *sim = make_sim(16);
    uint64_t state = seed;
    uint64_t ids[48];
    for (size_t r = 0; r < num_requests; r++) {
        uint64_t prefix = next_random(&state) % num_prefixes;
        size_t shared = next_random(&state) % 12;
        size_t length = shared + next_random(&state) % 20;
        if (length > 48)
            length = 48;
        for (size_t i = 0; i < length; i++) {
            if (i < shared)
                ids[i] = prefix * 64 + i;
            else if (next_random(&state) % 8 == 0 && i > 0)
                ids[i] = ids[next_random(&state) % i];
            else
                ids[i] = 100000 + next_random(&state) % (num_requests * 4);
            if (prefix % 3 == 0)
                ids[i] += (uint64_t)1 << 40;
        }
        uint64_t tokens = length == 0 ? 1 + next_random(&state) % 16
                                      : length * 16 - next_random(&state) % 40;
        cr_assert_eq(kvio_cachesim_add_request(sim, ids, length, tokens), KVIO_OK);
    }
    return sim;
}

static void assert_same_result(const kvio_cachesim_result_t *sweep,
                               const kvio_cachesim_result_t *replay, uint64_t seed)
{
    unsigned long long capacity = (unsigned long long)replay->capacity_blocks;
    cr_assert_eq(sweep->capacity_blocks, replay->capacity_blocks);
    cr_assert_str_eq(sweep->policy, replay->policy);
    cr_assert_eq(sweep->requests, replay->requests);
    cr_assert_eq(sweep->blocks, replay->blocks);
    cr_assert_eq(sweep->tokens, replay->tokens);
    cr_assert_eq(sweep->hit_blocks, replay->hit_blocks, "seed %llu capacity %llu: %llu vs %llu",
                 (unsigned long long)seed, capacity, (unsigned long long)sweep->hit_blocks,
                 (unsigned long long)replay->hit_blocks);
    cr_assert_eq(sweep->hit_tokens, replay->hit_tokens, "seed %llu capacity %llu",
                 (unsigned long long)seed, capacity);
    cr_assert_eq(sweep->evictions, replay->evictions, "seed %llu capacity %llu: %llu vs %llu",
                 (unsigned long long)seed, capacity, (unsigned long long)sweep->evictions,
                 (unsigned long long)replay->evictions);
    cr_assert(sweep->block_hit_rate == replay->block_hit_rate);
    cr_assert(sweep->token_hit_rate == replay->token_hit_rate);
}

Test(cachesim, lru_sweep_equals_one_replay_per_capacity_on_random_traces, .timeout = 60)
{
    struct {
        uint64_t seed;
        size_t requests;
        uint64_t prefixes;
    } traces[] = {
        {1, 300, 5}, {2, 600, 40}, {3, 1000, 3}, {4, 50, 2}, {5, 800, 200}, {6, 0, 1},
    };
    for (size_t t = 0; t < sizeof(traces) / sizeof(traces[0]); t++) {
        kvio_cachesim_t *sim =
            random_trace(traces[t].seed, traces[t].requests, traces[t].prefixes);
        uint64_t unique = kvio_cachesim_num_unique_blocks(sim);
        /* Unsorted, with a duplicate, the number of unique blocks and
         * either side of it. */
        uint64_t capacities[] = {
            7, 1, KVIO_CACHESIM_UNLIMITED, 2, 3, 50, 7, 200, unique ? unique - 1 : 1,
            unique + 1, unique ? unique : 1, 1000, 31, 16,
        };
        size_t count = sizeof(capacities) / sizeof(capacities[0]);
        kvio_cachesim_result_t results[sizeof(capacities) / sizeof(capacities[0])];
        cr_assert_eq(kvio_cachesim_sweep_lru(sim, capacities, count, results), KVIO_OK);
        for (size_t i = 0; i < count; i++) {
            kvio_cachesim_result_t replay = run(sim, "lru", capacities[i]);
            assert_same_result(&results[i], &replay, traces[t].seed);
        }
        kvio_cachesim_destroy(sim);
    }
}

/* Levels are bytes: more than 250 capacities take several passes. */
Test(cachesim, lru_sweep_with_hundreds_of_capacities_equals_replays, .timeout = 60)
{
    kvio_cachesim_t *sim = random_trace(7, 400, 10);
    cr_assert_gt(kvio_cachesim_num_unique_blocks(sim), 600);
    uint64_t capacities[600];
    for (size_t i = 0; i < 600; i++)
        capacities[i] = 600 - i;
    kvio_cachesim_result_t *results = calloc(600, sizeof(*results));
    cr_assert_not_null(results);
    cr_assert_eq(kvio_cachesim_sweep_lru(sim, capacities, 600, results), KVIO_OK);
    /* Every seventh, and either side of the first pass's last marker. */
    for (size_t i = 0; i < 600; i++) {
        if (i % 7 != 0 && i != 349 && i != 350 && i != 599)
            continue;
        kvio_cachesim_result_t replay = run(sim, "lru", capacities[i]);
        assert_same_result(&results[i], &replay, 7);
    }
    free(results);
    kvio_cachesim_destroy(sim);
}

/* However many threads, the sweep's single lru pass fills every capacity's
 * result, and each equals its replay. */
Test(cachesim, lru_sweep_on_any_number_of_threads_equals_replays, .timeout = 60)
{
    kvio_cachesim_t *sim = random_trace(8, 500, 12);
    uint64_t unique = kvio_cachesim_num_unique_blocks(sim);
    cr_assert_gt(unique, 300);
    uint64_t capacities[] = {300, 1, KVIO_CACHESIM_UNLIMITED, 40, unique + 5, 300, 9, 120, 2};
    size_t count = sizeof(capacities) / sizeof(capacities[0]);
    kvio_cachesim_result_t replays[sizeof(capacities) / sizeof(capacities[0])];
    for (size_t i = 0; i < count; i++)
        replays[i] = run(sim, "lru", capacities[i]);
    const char *policies[] = {"lru"};
    unsigned thread_counts[] = {1, 2, 3, 7, 64};
    for (size_t t = 0; t < sizeof(thread_counts) / sizeof(thread_counts[0]); t++) {
        kvio_cachesim_result_t results[sizeof(capacities) / sizeof(capacities[0])];
        memset(results, 0, sizeof(results));
        cr_assert_eq(kvio_cachesim_sweep(sim, policies, 1, capacities, count, thread_counts[t],
                                         results),
                     KVIO_OK);
        for (size_t i = 0; i < count; i++)
            assert_same_result(&results[i], &replays[i], thread_counts[t]);
    }
    kvio_cachesim_destroy(sim);
}

Test(cachesim, lru_sweep_rejects_zero_capacity, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(16);
    REQUEST(sim, 16, 1);
    uint64_t capacities[] = {10, 0};
    kvio_cachesim_result_t results[2];
    cr_assert_eq(kvio_cachesim_sweep_lru(sim, capacities, 2, results), KVIO_ERR_INVALID);
    const char *policies[] = {"lru"};
    cr_assert_eq(kvio_cachesim_sweep(sim, policies, 1, capacities, 2, 2, results),
                 KVIO_ERR_INVALID);
    kvio_cachesim_destroy(sim);
}

Test(cachesim, rejects_unknown_policy_and_zero_capacity, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(16);
    REQUEST(sim, 16, 1);
    kvio_cachesim_result_t result;
    cr_assert_eq(kvio_cachesim_run(sim, "clock", 10, &result), KVIO_ERR_NOT_FOUND);
    cr_assert_eq(kvio_cachesim_run(sim, "lru", 0, &result), KVIO_ERR_INVALID);
    kvio_cachesim_destroy(sim);
}

/* ---- the command -------------------------------------------------------- */

/* Sorted by time: [7,8] (input 1000) then [7] (input 100): the hit on 7 is
 * worth 100 tokens; in file order it would be worth 512. */
static const char *const order_trace =
    "{\"timestamp\": 10, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [7]}\n"
    "{\"timestamp\": 5, \"input_length\": 1000, \"output_length\": 1, \"hash_ids\": [7, 8]}\n";

Test(cachesim_cli, replays_in_timestamp_order_and_prints_rates, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl", order_trace);
    test_run_t run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--format", "mooncake",
                                      "--capacity", "1,unlimited", "--csv", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "eviction,capacity,capacity_blocks,block_hit_rate"));
    /* unlimited: 1 of 3 blocks, 100 of 1100 tokens. */
    cr_assert(test_contains(run_result.out, "lru,unlimited,unlimited,0.333333,0.090909,1,3,100,1100,0"),
              "%s", run_result.out);
    /* 1 block: 8 pushed 7 out, so [7] misses. */
    cr_assert(test_contains(run_result.out, "lru,1,1,0.000000,0.000000,0,3,0,1100,2"), "%s",
              run_result.out);
    test_run_free(&run_result);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* A request of 100 tokens with 1,000 hash ids is one block of 512 tokens
 * to cachesim as to the run (cachesim counted 1,000): the ids past what
 * the tokens fill are ignored, and both say so. */
Test(cachesim_cli, hash_ids_past_the_tokens_are_ignored_alike_by_cachesim_and_the_run,
     .timeout = 60)
{
    char *dir = test_tmpdir();
    char *text = malloc(16384);
    int length = snprintf(text, 16384, "{\"timestamp\": 0, \"input_length\": 100, "
                          "\"output_length\": 5, \"hash_ids\": [");
    for (int i = 0; i < 1000; i++)
        length += snprintf(text + length, (size_t)(16384 - length), "%s%d", i ? ", " : "", i);
    snprintf(text + length, (size_t)(16384 - length), "]}\n");
    char *path = test_write_file(dir, "many.jsonl", text);
    const char *warning = "1 requests carry more hash_ids than their tokens fill (line 1 first)";
    test_run_t run = test_kvio(dir, "cachesim", "many.jsonl", "--capacity", "unlimited", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "unique_blocks=1 "), "%s", run.out);
    cr_assert(test_contains(run.err, warning), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "endpoint", "--set", "mode=simulate", "--set",
                    "stream.trace.path=many.jsonl", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.err, warning), "%s", run.err);
    test_run_free(&run);
    free(path);
    free(text);
    test_rmtree(dir);
    free(dir);
}

/* #21: a capacity as bytes of KV with a model (llama3-8b: 128 KiB per
 * token, so a 512-token block is 64 MiB): 1 GiB holds 16 blocks, 2 GiB 32;
 * without --model it is refused, saying what is missing. */
Test(cachesim_cli, capacities_in_bytes_of_kv_with_a_model, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl", order_trace);
    test_run_t run = test_kvio(dir, "cachesim", "trace.jsonl", "--capacity", "1GiB,2GiB,1",
                               "--model", "llama3-8b", "--csv", NULL);
    cr_assert_eq(run.status, 0, "stderr: %s", run.err);
    cr_expect(test_contains(run.out, "\nlru,1GiB,16,"), "%s", run.out);
    cr_expect(test_contains(run.out, "\nlru,2GiB,32,"), "%s", run.out);
    cr_expect(test_contains(run.out, "\nlru,1,1,"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(dir, "cachesim", "trace.jsonl", "--capacity", "40GiB", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "needs --model"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "cachesim", "trace.jsonl", "--capacity", "1MiB", "--model", "llama3-8b",
                    NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "holds no block"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(path);
    free(dir);
}

Test(cachesim_cli, json_output_carries_schema_config_and_results, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl", order_trace);
    test_run_t run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--eviction", "lru,s3fifo",
                                      "--capacity", "unlimited", "--block-tokens", "1000",
                                      "--json", "-o", "out.json", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    char *out_path = NULL;
    cr_assert(asprintf(&out_path, "%s/out.json", dir) > 0);
    char *json = test_read_file(out_path);
    cr_assert_not_null(json);
    cr_assert(test_contains(json, "\"schema_version\": 1"));
    cr_assert(test_contains(json, "\"block_tokens\": 1000"));
    cr_assert(test_contains(json, "\"eviction\": \"s3fifo\""));
    /* The hit on 7 is worth the second request's 100 tokens, not 1000. */
    cr_assert(test_contains(json, "\"hit_tokens\": 100"), "%s", json);
    cr_assert(test_contains(json, "\"requests\": 2"), "%s", json);
    cr_assert(test_contains(json, "\"capacity_blocks\": \"unlimited\""));
    free(json);
    free(out_path);
    test_run_free(&run_result);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* #21: salted requests of a kvio trace hit only blocks of their own salt:
 * the second and third requests repeat the first's ids, the second with
 * another salt (no hit), the third with the first's (two blocks hit). */
Test(cachesim_cli, a_cache_salt_hits_only_its_own_blocks, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(
        dir, "trace.jsonl",
        "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2], "
        "\"block_tokens\": 16, \"cache_salt\": \"a\"}\n"
        "{\"timestamp\": 1, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2], "
        "\"block_tokens\": 16, \"cache_salt\": \"b\"}\n"
        "{\"timestamp\": 2, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2], "
        "\"block_tokens\": 16, \"cache_salt\": \"a\"}\n");
    test_run_t run = test_kvio(dir, "cachesim", "trace.jsonl", "--format", "kvio",
                               "--block-tokens", "16", "--capacity", "unlimited", "--json", "-o",
                               "out.json", NULL);
    cr_assert_eq(run.status, 0, "stderr: %s", run.err);
    char *out_path = NULL;
    cr_assert(asprintf(&out_path, "%s/out.json", dir) > 0);
    char *json = test_read_file(out_path);
    cr_assert_not_null(json);
    cr_assert(test_contains(json, "\"hit_tokens\": 32,"), "%s", json);
    free(json);
    free(out_path);
    test_run_free(&run);
    test_rmtree(dir);
    free(path);
    free(dir);
}

Test(cachesim_cli, bad_trace_line_exits_2_naming_the_line_unless_skipped, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl",
                                 "{\"timestamp\": 1, \"input_length\": 5, "
                                 "\"output_length\": 1, \"hash_ids\": [1]}\n"
                                 "{\"timestamp\": 2, \"input_length\": 5, "
                                 "\"output_length\": 1, \"hash_ids\": \"x\"}\n"
                                 "{\"timestamp\": 3, \"input_length\": 5, "
                                 "\"output_length\": 1, \"hash_ids\": [1]}\n");
    test_run_t run_result = test_kvio(dir, "cachesim", "trace.jsonl", NULL);
    cr_assert_eq(run_result.status, 2);
    cr_assert(test_contains(run_result.err, "trace.jsonl:2: 'hash_ids' is not an array"), "%s",
              run_result.err);
    test_run_free(&run_result);

    run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--skip-bad", "--capacity", "10", NULL);
    cr_assert_eq(run_result.status, 0, "stderr: %s", run_result.err);
    cr_assert(test_contains(run_result.out, "requests=2 skipped=1"), "%s", run_result.out);
    cr_assert(test_contains(run_result.out, "0.5000"), "%s", run_result.out);
    test_run_free(&run_result);
    test_rmtree(dir);
    free(path);
    free(dir);
}

Test(cachesim_cli, usage_errors_exit_2, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl", order_trace);
    test_run_t run_result = test_kvio(dir, "cachesim", "trace.jsonl", "--eviction", "clock", NULL);
    cr_assert_eq(run_result.status, 2);
    cr_assert(test_contains(run_result.err, "unknown eviction policy 'clock'"), "%s",
              run_result.err);
    cr_assert(test_contains(run_result.err, "s3fifo"), "the message lists the known policies");
    test_run_free(&run_result);
    const char *bad[][3] = {
        {"--capacity", "0", NULL},      {"--capacity", "ten", NULL}, {"--format", "azure", NULL},
        {"--block-tokens", "0", NULL},  {"--frobnicate", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_result = test_kvio(dir, "cachesim", "trace.jsonl", bad[i][0], bad[i][1], NULL);
        cr_assert_eq(run_result.status, 2, "%s %s: status %d", bad[i][0], bad[i][1],
                     run_result.status);
        test_run_free(&run_result);
    }
    run_result = test_kvio(dir, "cachesim", NULL);
    cr_assert_eq(run_result.status, 2);
    test_run_free(&run_result);
    /* kvio lines with segments instead of block ids cannot be replayed. */
    run_result = test_kvio(dir, "cachesim", KVIO_SOURCE_DIR "/tests/fixtures/kvio_small.jsonl",
                           "--format", "kvio", NULL);
    cr_assert_eq(run_result.status, 2);
    cr_assert(test_contains(run_result.err, "this trace has no prefix hashes"), "%s",
              run_result.err);
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "missing.jsonl", NULL);
    cr_assert_eq(run_result.status, 2);
    cr_assert(test_contains(run_result.err, "missing.jsonl"));
    test_run_free(&run_result);
    run_result = test_kvio(dir, "cachesim", "--help", NULL);
    cr_assert_eq(run_result.status, 0);
    cr_assert(test_contains(run_result.out, "--capacity"));
    cr_assert(test_contains(run_result.out, "s3fifo"));
    test_run_free(&run_result);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* Two-turn sessions whose second turn comes back after ~230 other blocks:
 * inside a 300-block LRU cache, but long gone from s3fifo's 30-block small
 * queue. The README's "when s3fifo loses" case. */
Test(cachesim, s3fifo_loses_to_lru_when_blocks_are_reused_once_at_long_distance, .timeout = 10)
{
    kvio_cachesim_t *sim = make_sim(1);
    const int lag = 20, sessions = 2000;
    uint64_t ids[8];
    for (int i = 0; i < sessions + lag; i++) {
        if (i < sessions) {
            for (int b = 0; b < 4; b++)
                ids[b] = (uint64_t)i * 100 + (uint64_t)b;
            cr_assert_eq(kvio_cachesim_add_request(sim, ids, 4, 4), KVIO_OK);
        }
        if (i >= lag) {
            for (int b = 0; b < 8; b++)
                ids[b] = (uint64_t)(i - lag) * 100 + (uint64_t)b;
            cr_assert_eq(kvio_cachesim_add_request(sim, ids, 8, 8), KVIO_OK);
        }
    }
    double lru = run(sim, "lru", 300).block_hit_rate;
    double s3fifo = run(sim, "s3fifo", 300).block_hit_rate;
    double arc = run(sim, "arc", 300).block_hit_rate;
    cr_assert_float_eq(lru, 1.0 / 3.0, 1e-3, "lru %.4f", lru);
    cr_assert_lt(s3fifo, 0.05, "s3fifo %.4f", s3fifo);
    /* arc's B1 hits grow T1 until the second turns find their blocks. */
    cr_assert_gt(arc, 0.32, "arc %.4f", arc);
    kvio_cachesim_destroy(sim);
}

/* Reliability (#22.13): cachesim exited 2 without a word for --capacity ,,,
 * or more than 64 capacities, and read /dev/zero until memory ran out (~250
 * MB/s). Each is refused now, saying why (a stream that is all lines stops at
 * 1 GiB: "more than 1073741824 bytes from a stream"). */
Test(cachesim, bad_capacities_and_endless_input_are_refused_saying_why, .timeout = 60)
{
    char *dir = test_tmpdir();
    const char *trace = KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl";
    test_run_t run = test_kvio(dir, "cachesim", trace, "--capacity", ",,,", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "--capacity ',,,' holds no capacity"), "%s", run.err);
    test_run_free(&run);
    char many[400] = "1";
    for (int i = 1; i < 70; i++)
        strcat(many, ",1");
    run = test_kvio(dir, "cachesim", trace, "--capacity", many, NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "--capacity takes at most 64 values"), "%s", run.err);
    test_run_free(&run);
    /* Read a chunk at a time: a "line" of 64 MiB of zeros is refused there. */
    run = test_kvio(dir, "cachesim", "/dev/zero", "--format", "mooncake", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "/dev/zero:1: line longer than 67108864 bytes"), "%s",
              run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #41 item 5: capacities asked as bytes of KV came back as block counts
 * only ("16 / 64"); each row now echoes what was asked. */
Test(cachesim_cli, byte_capacities_are_echoed_as_asked, .timeout = 30)
{
    test_run_t run = test_kvio(NULL, "cachesim", KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl",
                               "--capacity", "1GiB,4GiB,unlimited", "--model", "llama3-8b", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "capacity capacity_blocks"), "%s", run.out);
    cr_expect(test_contains(run.out, "1GiB              16"), "%s", run.out);
    cr_expect(test_contains(run.out, "4GiB              64"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "cachesim", KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl",
                    "--capacity", "1GiB", "--model", "llama3-8b", "--json", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "\"capacity\": \"1GiB\""), "%s", run.out);
    cr_expect(test_contains(run.out, "\"capacity_blocks\": 16"), "%s", run.out);
    test_run_free(&run);
}

/* --hybrid's replay (vLLM's groups, as gpt-oss has them: blocks of 16
 * tokens, a window of 21): each request puts its blocks in both groups,
 * the window group's that fell out of the window first; a hit is what both
 * serve. Request A is 3 blocks (48 tokens: window block 0 is out by its
 * end); B starts with them. */
Test(cachesim, hybrid_groups_hit_what_both_serve_and_free_the_window_first, .timeout = 10)
{
    const uint64_t a[] = {1, 2, 3}, b[] = {1, 2, 3, 4};
    struct {
        uint64_t capacity;
        uint64_t hit_blocks_of_b;
    } cases[] = {
        {KVIO_CACHESIM_UNLIMITED, 3},
        {5, 3}, /* A's window block 0 went first: the window still serves 3 */
        {4, 0}, /* then A's full block 0 too: no prefix left */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvio_cachesim_t *sim = NULL;
        cr_assert_eq(kvio_cachesim_create(16, &sim), KVIO_OK);
        cr_assert_eq(kvio_cachesim_set_window(sim, 21), KVIO_OK);
        cr_assert_eq(kvio_cachesim_add_request(sim, a, 3, 48), KVIO_OK);
        cr_assert_eq(kvio_cachesim_add_request(sim, b, 4, 64), KVIO_OK);
        cr_assert_eq(kvio_cachesim_set_window(sim, 0), KVIO_ERR_INVALID, "only before requests");
        cr_assert_eq(kvio_cachesim_num_unique_blocks(sim), 8, "4 blocks in each group");
        kvio_cachesim_result_t result;
        cr_assert_eq(kvio_cachesim_run(sim, "lru", cases[i].capacity, &result), KVIO_OK);
        cr_assert_eq(result.hit_blocks, cases[i].hit_blocks_of_b, "capacity %llu: %llu",
                     (unsigned long long)cases[i].capacity,
                     (unsigned long long)result.hit_blocks);
        cr_assert_eq(result.blocks, 7, "blocks counted once, not per group");
        kvio_cachesim_result_t swept;
        cr_assert_eq(kvio_cachesim_sweep_lru(sim, &cases[i].capacity, 1, &swept), KVIO_OK);
        cr_assert_eq(swept.hit_blocks, result.hit_blocks, "the sweep replays the same");
        kvio_cachesim_destroy(sim);
    }
    /* kvio cachesim --hybrid needs a model whose layers are half windowed. */
    test_run_t run = test_kvio(NULL, "cachesim", KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl",
                               "--hybrid", "--model", "llama3-8b", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "does not have half its layers windowed"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(NULL, "cachesim", KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl",
                    "--hybrid", "--model", "gpt-oss-20b", "--capacity", "1GiB", "--json", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "\"hybrid_window_tokens\": 128"), "%s", run.out);
    test_run_free(&run);
}
