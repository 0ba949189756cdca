/* Tests for the KV-cache block pool (the golden cases of issue 3, with
 * block_size 16 and pool(11) = 10 usable blocks + the null block), the
 * radix index and the eviction policies. */
#include "kvio/kvcache.h"

#include "kvio/hash.h"
#include "kvcache/kvcache_int.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 16

static kvio_kvcache_t *make_pool(uint32_t num_blocks, kvio_free_order_t order, bool caching)
{
    kvio_kvcache_config_t config = {
        .num_blocks = num_blocks,
        .block_size = BLOCK,
        .enable_prefix_caching = caching,
        .free_order = order,
        .eviction = "lru",
    };
    kvio_kvcache_t *cache = NULL;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
    return cache;
}

/* count tokens numbered from first: distinct sequences never share blocks. */
static uint32_t *token_run(uint32_t first, size_t count)
{
    uint32_t *tokens = malloc(count * sizeof(uint32_t));
    for (size_t i = 0; i < count; i++)
        tokens[i] = first + (uint32_t)i;
    return tokens;
}

static kvio_kvreq_t *request(kvio_kvcache_t *cache, const uint32_t *tokens, size_t count)
{
    kvio_kvreq_t *req = NULL;
    cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, count, NULL, 0, &req), KVIO_OK);
    return req;
}

static void assert_blocks(const kvio_kvreq_t *req, const uint32_t *expected, size_t count)
{
    const uint32_t *ids;
    size_t num_ids;
    kvio_kvreq_blocks(req, &ids, &num_ids);
    cr_assert_eq(num_ids, count, "request holds %zu blocks, expected %zu", num_ids, count);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(ids[i], expected[i], "block %zu is %u, expected %u", i, ids[i], expected[i]);
}

static void assert_queue(const kvio_kvcache_t *cache, const uint32_t *expected, size_t count)
{
    uint32_t queue[64];
    size_t length;
    kvio_kvcache_free_queue(cache, queue, 64, &length);
    cr_assert_eq(length, count, "queue length %zu, expected %zu", length, count);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(queue[i], expected[i], "queue[%zu] is %u, expected %u", i, queue[i],
                     expected[i]);
}

/* The shared scenario of golden cases 1-5: A = 55 tokens, B = A's first 48
 * + 5 others, C = the same 48 + 6 others, D = 160 unique tokens. */
typedef struct scenario {
    kvio_kvcache_t *cache;
    uint32_t *tokens_a, *tokens_b, *tokens_c, *tokens_d;
    kvio_kvreq_t *a, *b, *c, *d;
} scenario_t;

static void scenario_start(scenario_t *s, kvio_free_order_t order)
{
    memset(s, 0, sizeof(*s));
    s->cache = make_pool(11, order, true);
    s->tokens_a = token_run(1000, 55);
    s->tokens_b = token_run(1000, 53);
    for (size_t i = 48; i < 53; i++)
        s->tokens_b[i] = 5000 + (uint32_t)i;
    s->tokens_c = token_run(1000, 54);
    for (size_t i = 48; i < 54; i++)
        s->tokens_c[i] = 7000 + (uint32_t)i;
    s->tokens_d = token_run(90000, 160);
    s->a = request(s->cache, s->tokens_a, 55);
    s->b = request(s->cache, s->tokens_b, 53);
    s->c = request(s->cache, s->tokens_c, 54);
    s->d = request(s->cache, s->tokens_d, 160);
}

static void scenario_end(scenario_t *s)
{
    kvio_kvreq_destroy(s->a);
    kvio_kvreq_destroy(s->b);
    kvio_kvreq_destroy(s->c);
    kvio_kvreq_destroy(s->d);
    kvio_kvcache_destroy(s->cache);
    free(s->tokens_a);
    free(s->tokens_b);
    free(s->tokens_c);
    free(s->tokens_d);
}

static void golden_case_1(scenario_t *s)
{
    size_t hit = 99;
    cr_assert_eq(kvio_kvcache_allocate(s->cache, s->a, 55, &hit), KVIO_OK);
    cr_assert_eq(hit, 0);
    assert_blocks(s->a, (uint32_t[]){1, 2, 3, 4}, 4);
    kvio_hash_t expected[3], got;
    kvio_kvcache_hash_tokens(s->tokens_a, 55, BLOCK, NULL, 0, expected);
    for (uint32_t block = 1; block <= 3; block++) {
        cr_assert_eq(kvio_kvcache_block_hash(s->cache, block, &got), KVIO_OK);
        cr_assert(kvio_hash_equal(got, expected[block - 1]), "block %u hash", block);
        cr_assert_eq(kvio_kvcache_block_refcount(s->cache, block), 1);
    }
    /* Chained: block 2's hash has block 1's as parent. */
    kvio_hash_t chained = kvio_hash_tokens(&expected[0], s->tokens_a + 16, 16, NULL, 0);
    cr_assert(kvio_hash_equal(chained, expected[1]));
    cr_assert_eq(kvio_kvcache_block_hash(s->cache, 4, &got), KVIO_ERR_NOT_FOUND);
    cr_assert_eq(kvio_kvcache_block_refcount(s->cache, 4), 1);
    cr_assert_eq(kvio_kvcache_num_free_blocks(s->cache), 6);
}

static void golden_case_2(scenario_t *s)
{
    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_lookup(s->cache, s->b), 48);
    cr_assert_eq(kvio_kvcache_allocate(s->cache, s->b, 53, &hit), KVIO_OK);
    cr_assert_eq(hit, 48);
    assert_blocks(s->b, (uint32_t[]){1, 2, 3, 5}, 4);
    for (uint32_t block = 1; block <= 3; block++)
        cr_assert_eq(kvio_kvcache_block_refcount(s->cache, block), 2);
    cr_assert_eq(kvio_kvcache_block_refcount(s->cache, 5), 1);
    cr_assert_eq(kvio_kvcache_num_free_blocks(s->cache), 5);
}

static void golden_case_3(scenario_t *s, kvio_free_order_t order)
{
    kvio_kvcache_free(s->cache, s->a);
    kvio_kvcache_free(s->cache, s->b);
    cr_assert_eq(kvio_kvcache_num_free_blocks(s->cache), 10);
    if (order == KVIO_FREE_ORDER_APPEND)
        assert_queue(s->cache, (uint32_t[]){6, 7, 8, 9, 10, 4, 5, 3, 2, 1}, 10);
    else
        assert_queue(s->cache, (uint32_t[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1}, 10);
}

static void golden_case_4(scenario_t *s, kvio_free_order_t order)
{
    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_allocate(s->cache, s->c, 54, &hit), KVIO_OK);
    cr_assert_eq(hit, 48);
    uint32_t new_block = order == KVIO_FREE_ORDER_APPEND ? 6 : 5;
    assert_blocks(s->c, (uint32_t[]){1, 2, 3, new_block}, 4);
    cr_assert_eq(kvio_kvcache_num_free_blocks(s->cache), 6);
    uint32_t queue[16];
    size_t length;
    kvio_kvcache_free_queue(s->cache, queue, 16, &length);
    for (size_t i = 0; i < length; i++)
        cr_assert(queue[i] > 3 && queue[i] != new_block, "block %u still queued", queue[i]);
}

static void golden_case_5(scenario_t *s, kvio_free_order_t order)
{
    kvio_kvcache_free(s->cache, s->c);
    cr_assert_eq(kvio_kvcache_allocate(s->cache, s->d, 160, NULL), KVIO_OK);
    if (order == KVIO_FREE_ORDER_APPEND)
        assert_blocks(s->d, (uint32_t[]){7, 8, 9, 10, 4, 5, 6, 3, 2, 1}, 10);
    else
        assert_blocks(s->d, (uint32_t[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1}, 10);
    cr_assert_eq(kvio_kvcache_num_free_blocks(s->cache), 0);
    assert_queue(s->cache, NULL, 0);
    /* Blocks 1-3 were cached: reusing them evicted their hashes. */
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(s->cache, &metrics);
    cr_assert_geq(metrics.evictions, 3);
    cr_assert_eq(kvio_kvcache_lookup(s->cache, s->c), 0);
}

Test(kvcache, golden_1_first_request_gets_blocks_1_to_4_and_hashes_full_ones, .timeout = 10)
{
    scenario_t s;
    scenario_start(&s, KVIO_FREE_ORDER_APPEND);
    golden_case_1(&s);
    scenario_end(&s);
}

Test(kvcache, golden_2_shared_prefix_hits_and_raises_refcounts, .timeout = 10)
{
    scenario_t s;
    scenario_start(&s, KVIO_FREE_ORDER_APPEND);
    golden_case_1(&s);
    golden_case_2(&s);
    scenario_end(&s);
}

Test(kvcache, golden_3_free_order_append_and_prepend_unhashed, .timeout = 10)
{
    kvio_free_order_t orders[] = {KVIO_FREE_ORDER_APPEND, KVIO_FREE_ORDER_PREPEND_UNHASHED};
    for (size_t i = 0; i < 2; i++) {
        scenario_t s;
        scenario_start(&s, orders[i]);
        golden_case_1(&s);
        golden_case_2(&s);
        golden_case_3(&s, orders[i]);
        scenario_end(&s);
    }
}

Test(kvcache, golden_4_hit_on_free_blocks_takes_them_out_of_the_queue, .timeout = 10)
{
    kvio_free_order_t orders[] = {KVIO_FREE_ORDER_APPEND, KVIO_FREE_ORDER_PREPEND_UNHASHED};
    for (size_t i = 0; i < 2; i++) {
        scenario_t s;
        scenario_start(&s, orders[i]);
        golden_case_1(&s);
        golden_case_2(&s);
        golden_case_3(&s, orders[i]);
        golden_case_4(&s, orders[i]);
        scenario_end(&s);
    }
}

Test(kvcache, golden_5_new_request_takes_blocks_in_queue_order, .timeout = 10)
{
    kvio_free_order_t orders[] = {KVIO_FREE_ORDER_APPEND, KVIO_FREE_ORDER_PREPEND_UNHASHED};
    for (size_t i = 0; i < 2; i++) {
        scenario_t s;
        scenario_start(&s, orders[i]);
        golden_case_1(&s);
        golden_case_2(&s);
        golden_case_3(&s, orders[i]);
        golden_case_4(&s, orders[i]);
        golden_case_5(&s, orders[i]);
        scenario_end(&s);
    }
}

Test(kvcache, golden_6_decode_growth_hashes_newly_full_blocks, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    uint32_t *tokens = token_run(1, 78);
    kvio_kvreq_t *a = request(cache, tokens, 55);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 55, NULL), KVIO_OK);
    assert_blocks(a, (uint32_t[]){1, 2, 3, 4}, 4);

    cr_assert_eq(kvio_kvreq_append_tokens(a, tokens + 55, 4), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 59, NULL), KVIO_OK);
    assert_blocks(a, (uint32_t[]){1, 2, 3, 4}, 4);
    kvio_hash_t hash;
    cr_assert_eq(kvio_kvcache_block_hash(cache, 4, &hash), KVIO_ERR_NOT_FOUND);

    cr_assert_eq(kvio_kvreq_append_tokens(a, tokens + 59, 19), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 78, NULL), KVIO_OK);
    assert_blocks(a, (uint32_t[]){1, 2, 3, 4, 5}, 5);
    kvio_hash_t expected[4];
    kvio_kvcache_hash_tokens(tokens, 78, BLOCK, NULL, 0, expected);
    cr_assert_eq(kvio_kvcache_block_hash(cache, 4, &hash), KVIO_OK);
    cr_assert(kvio_hash_equal(hash, expected[3]));
    cr_assert_eq(kvio_kvcache_block_hash(cache, 5, &hash), KVIO_ERR_NOT_FOUND);
    kvio_kvreq_destroy(a);
    kvio_kvcache_destroy(cache);
    free(tokens);
}

static void assert_refcounts(const kvio_kvcache_t *cache, uint32_t first, uint32_t last,
                             uint32_t expected)
{
    for (uint32_t block = first; block <= last; block++)
        cr_assert_eq(kvio_kvcache_block_refcount(cache, block), expected,
                     "block %u refcount %u, expected %u", block,
                     kvio_kvcache_block_refcount(cache, block), expected);
}

Test(kvcache, golden_7_not_enough_blocks_changes_nothing, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    uint32_t *tokens_r1 = token_run(100, 129); /* X = R1's 96 + 33 more */
    uint32_t *tokens_r2 = token_run(9000, 32);
    kvio_kvreq_t *r1 = request(cache, tokens_r1, 96);
    kvio_kvreq_t *r2 = request(cache, tokens_r2, 32);
    kvio_kvreq_t *x = request(cache, tokens_r1, 129);
    cr_assert_eq(kvio_kvcache_allocate(cache, r1, 96, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, r2, 32, NULL), KVIO_OK);
    assert_blocks(r1, (uint32_t[]){1, 2, 3, 4, 5, 6}, 6);
    assert_blocks(r2, (uint32_t[]){7, 8}, 2);

    /* 6 hits (in use), 3 new blocks needed, 2 free. */
    cr_assert_eq(kvio_kvcache_lookup(cache, x), 96);
    cr_assert_eq(kvio_kvcache_allocate(cache, x, 129, NULL), KVIO_ERR_NO_SPACE);
    assert_refcounts(cache, 1, 6, 1);
    assert_queue(cache, (uint32_t[]){9, 10}, 2);
    assert_blocks(x, NULL, 0);

    /* Variant: R1 finished, its 6 cached blocks in the queue; 9 needed > 8. */
    kvio_kvcache_free(cache, r1);
    uint32_t queue_before[] = {9, 10, 6, 5, 4, 3, 2, 1};
    assert_queue(cache, queue_before, 8);
    cr_assert_eq(kvio_kvcache_lookup(cache, x), 96);
    cr_assert_eq(kvio_kvcache_allocate(cache, x, 129, NULL), KVIO_ERR_NO_SPACE);
    assert_queue(cache, queue_before, 8);
    assert_refcounts(cache, 1, 6, 0);
    assert_refcounts(cache, 7, 8, 1);
    assert_blocks(x, NULL, 0);
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(cache, &metrics);
    cr_assert_eq(metrics.allocations_refused, 2);
    cr_assert_eq(metrics.evictions, 0);

    kvio_kvreq_destroy(x);
    kvio_kvreq_destroy(r1);
    kvio_kvreq_destroy(r2);
    kvio_kvcache_destroy(cache);
    free(tokens_r1);
    free(tokens_r2);
}

Test(kvcache, golden_8_cache_salt_separates_prefixes_through_the_first_block, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    uint32_t *tokens = token_run(40, 48);
    kvio_kvreq_t *cached = NULL, *same = NULL, *other = NULL, *unsalted = NULL;
    cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, 48, "s", 1, &cached), KVIO_OK);
    cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, 48, "s", 1, &same), KVIO_OK);
    cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, 48, "t", 1, &other), KVIO_OK);
    cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, 48, NULL, 0, &unsalted), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, cached, 48, NULL), KVIO_OK);
    kvio_kvcache_free(cache, cached);

    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, same, 48, &hit), KVIO_OK);
    cr_assert_eq(hit, 32, "same salt: %zu tokens hit, expected 32 (last-token rule)", hit);
    cr_assert_eq(kvio_kvcache_allocate(cache, other, 48, &hit), KVIO_OK);
    cr_assert_eq(hit, 0);
    cr_assert_eq(kvio_kvcache_lookup(cache, unsalted), 0);

    /* Only block 0's payload carries the salt; block 1 differs through its
     * parent alone. */
    kvio_hash_t salted0, salted1, plain0;
    cr_assert_eq(kvio_kvreq_block_hash(cached, 0, &salted0), KVIO_OK);
    cr_assert_eq(kvio_kvreq_block_hash(cached, 1, &salted1), KVIO_OK);
    cr_assert_eq(kvio_kvreq_block_hash(unsalted, 0, &plain0), KVIO_OK);
    cr_assert(kvio_hash_equal(salted0, kvio_hash_tokens(NULL, tokens, 16, "s", 1)));
    cr_assert(!kvio_hash_equal(salted0, plain0));
    cr_assert(kvio_hash_equal(salted1, kvio_hash_tokens(&salted0, tokens + 16, 16, NULL, 0)));

    kvio_kvreq_destroy(cached);
    kvio_kvreq_destroy(same);
    kvio_kvreq_destroy(other);
    kvio_kvreq_destroy(unsalted);
    kvio_kvcache_destroy(cache);
    free(tokens);
}

Test(kvcache, golden_9_prefix_caching_disabled_never_hits, .timeout = 10)
{
    kvio_free_order_t orders[] = {KVIO_FREE_ORDER_APPEND, KVIO_FREE_ORDER_PREPEND_UNHASHED};
    for (size_t o = 0; o < 2; o++) {
        kvio_kvcache_t *cache = make_pool(11, orders[o], false);
        uint32_t *tokens = token_run(1, 55);
        kvio_kvreq_t *a = request(cache, tokens, 55);
        kvio_kvreq_t *b = request(cache, tokens, 55);
        size_t hit = 99;
        cr_assert_eq(kvio_kvcache_allocate(cache, a, 55, &hit), KVIO_OK);
        cr_assert_eq(hit, 0);
        assert_blocks(a, (uint32_t[]){1, 2, 3, 4}, 4);
        kvio_hash_t hash;
        cr_assert_eq(kvio_kvcache_block_hash(cache, 1, &hash), KVIO_ERR_NOT_FOUND);
        kvio_kvcache_free(cache, a);
        /* Every freed block is appended, in reverse order. */
        assert_queue(cache, (uint32_t[]){5, 6, 7, 8, 9, 10, 4, 3, 2, 1}, 10);
        cr_assert_eq(kvio_kvcache_lookup(cache, b), 0);
        cr_assert_eq(kvio_kvcache_allocate(cache, b, 55, &hit), KVIO_OK);
        cr_assert_eq(hit, 0);
        assert_blocks(b, (uint32_t[]){5, 6, 7, 8}, 4);
        kvio_kvcache_free(cache, b);
        cr_assert_eq(kvio_kvcache_num_free_blocks(cache), 10);
        kvio_kvcache_metrics_t metrics;
        kvio_kvcache_get_metrics(cache, &metrics);
        cr_assert_eq(metrics.prefix_hits_tokens, 0);
        cr_assert_eq(metrics.prefix_queries_tokens, 110);
        cr_assert_eq(metrics.blocks_allocated, 8);
        cr_assert_eq(metrics.blocks_freed, 8);
        kvio_kvreq_destroy(a);
        kvio_kvreq_destroy(b);
        kvio_kvcache_destroy(cache);
        free(tokens);
    }
}
