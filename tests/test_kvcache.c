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
    kvio_kvcache_free_queue(cache, 64, queue, &length);
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
    kvio_kvcache_free_queue(s->cache, 16, queue, &length);
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

/* ---- more pool behaviour ------------------------------------------------ */

Test(kvcache, hash_requests_share_prefixes_like_token_requests, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t hashes[3];
    kvio_hash_trace_chain(NULL, 77, 0, 3, hashes);
    kvio_kvreq_t *first = NULL, *second = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, hashes, 3, 50, &first), KVIO_OK);
    cr_assert_eq(kvio_kvreq_create_hashes(cache, hashes, 2, 40, &second), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 50, NULL), KVIO_OK);
    assert_blocks(first, (uint32_t[]){1, 2, 3, 4}, 4);
    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, second, 40, &hit), KVIO_OK);
    cr_assert_eq(hit, 32);
    assert_blocks(second, (uint32_t[]){1, 2, 5}, 3);
    /* More hashes than full blocks is a caller error. */
    kvio_kvreq_t *bad = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, hashes, 3, 47, &bad), KVIO_ERR_INVALID);
    kvio_kvreq_destroy(first);
    kvio_kvreq_destroy(second);
    kvio_kvcache_destroy(cache);
}

Test(kvcache, borrowed_hashes_act_like_copied_ones_and_copy_on_a_foreign_append,
     .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t hashes[4], other = kvio_hash_trace_block(NULL, 99, 0);
    kvio_hash_trace_chain(NULL, 77, 0, 4, hashes);
    kvio_kvreq_t *first = NULL, *second = NULL;
    cr_assert_eq(kvio_kvreq_create_borrowed(cache, hashes, 2, 40, &first), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 40, NULL), KVIO_OK);
    assert_blocks(first, (uint32_t[]){1, 2, 3}, 3);
    /* Decode growth continuing the borrowed array: block 3 gets hashes[2]. */
    cr_assert_eq(kvio_kvreq_append_hashes(first, 8, hashes + 2, 1), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 48, NULL), KVIO_OK);
    kvio_hash_t hash;
    cr_assert_eq(kvio_kvreq_block_hash(first, 2, &hash), KVIO_OK);
    cr_assert(kvio_hash_equal(hash, hashes[2]));
    /* A copied request with the same prefix hits all three cached blocks. */
    cr_assert_eq(kvio_kvreq_create_hashes(cache, hashes, 3, 50, &second), KVIO_OK);
    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, second, 50, &hit), KVIO_OK);
    cr_assert_eq(hit, 48);
    /* An append from elsewhere: the request copies, the caller's array is untouched. */
    cr_assert_eq(kvio_kvreq_append_hashes(first, 16, &other, 1), KVIO_OK);
    cr_assert_eq(kvio_kvreq_block_hash(first, 3, &hash), KVIO_OK);
    cr_assert(kvio_hash_equal(hash, other));
    cr_assert_eq(kvio_kvreq_block_hash(first, 0, &hash), KVIO_OK);
    cr_assert(kvio_hash_equal(hash, hashes[0]));
    cr_assert(kvio_hash_equal(hashes[3], kvio_hash_trace_block(&hashes[2], 77, 3)));
    kvio_kvreq_destroy(first);
    kvio_kvreq_destroy(second);
    kvio_kvcache_destroy(cache);
}

Test(kvcache, a_reset_request_acts_like_a_new_one_and_lookups_need_no_request, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t hashes[4], others[4];
    kvio_hash_trace_chain(NULL, 77, 0, 4, hashes);
    kvio_hash_trace_chain(NULL, 88, 0, 4, others);
    kvio_kvreq_t *first = NULL;
    cr_assert_eq(kvio_kvreq_create_borrowed(cache, hashes, 3, 50, &first), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 50, NULL), KVIO_OK);
    assert_blocks(first, (uint32_t[]){1, 2, 3, 4}, 4);
    /* A prompt's cached prefix from its hashes alone: never its last token. */
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, hashes, 3, 50), 48);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, hashes, 3, 48), 32);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, others, 3, 50), 0);
    /* Reset onto other content: its blocks are freed (still cached, at the
     * tail), and it allocates as a new request would. */
    cr_assert_eq(kvio_kvreq_reset_borrowed(first, others, 2, 40), KVIO_OK);
    cr_assert_eq(kvio_kvcache_num_free_blocks(cache), 10);
    assert_queue(cache, (uint32_t[]){5, 6, 7, 8, 9, 10, 4, 3, 2, 1}, 10);
    cr_assert_eq(kvio_kvreq_num_tokens(first), 40);
    size_t hit = 99;
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 40, &hit), KVIO_OK);
    cr_assert_eq(hit, 0);
    assert_blocks(first, (uint32_t[]){5, 6, 7}, 3);
    /* The old content is still found; more hashes than full blocks is refused. */
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, hashes, 3, 50), 48);
    cr_assert_eq(kvio_kvreq_reset_borrowed(first, others, 3, 47), KVIO_ERR_INVALID);
    kvio_kvreq_destroy(first);
    kvio_kvcache_destroy(cache);
}

Test(kvcache, duplicate_hash_lookup_returns_the_earliest_block, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    uint32_t *tokens = token_run(500, 33);
    /* d and e start before either block is full, so each gets its own
     * block for the same content: the index keeps both (no dedup). */
    kvio_kvreq_t *d = request(cache, tokens, 33), *e = request(cache, tokens, 33);
    cr_assert_eq(kvio_kvcache_allocate(cache, d, 10, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, e, 10, NULL), KVIO_OK);
    assert_blocks(d, (uint32_t[]){1}, 1);
    assert_blocks(e, (uint32_t[]){2}, 1);
    cr_assert_eq(kvio_kvcache_allocate(cache, e, 33, NULL), KVIO_OK); /* block 2 hashed first */
    cr_assert_eq(kvio_kvcache_allocate(cache, d, 33, NULL), KVIO_OK);
    kvio_hash_t hash_d, hash_e;
    cr_assert_eq(kvio_kvcache_block_hash(cache, 1, &hash_d), KVIO_OK);
    cr_assert_eq(kvio_kvcache_block_hash(cache, 2, &hash_e), KVIO_OK);
    cr_assert(kvio_hash_equal(hash_d, hash_e));
    kvio_kvreq_t *f = request(cache, tokens, 33);
    cr_assert_eq(kvio_kvcache_allocate(cache, f, 33, NULL), KVIO_OK);
    const uint32_t *ids;
    size_t count;
    kvio_kvreq_blocks(f, &ids, &count);
    cr_assert_eq(ids[0], 2, "the earliest inserted block (e's) wins");
    /* d holds [1, 5, 6]; e held [2, 3, 4], f [2, 3, 7]. When e's blocks are
     * reused for other content, d's are found instead. */
    kvio_kvreq_destroy(f);
    kvio_kvreq_destroy(e);
    assert_queue(cache, (uint32_t[]){8, 9, 10, 7, 4, 3, 2}, 7);
    uint32_t *filler = token_run(9000, 7 * 16);
    kvio_kvreq_t *g = request(cache, filler, 7 * 16);
    cr_assert_eq(kvio_kvcache_allocate(cache, g, 7 * 16, NULL), KVIO_OK);
    kvio_hash_t reused;
    cr_assert_eq(kvio_kvcache_block_hash(cache, 2, &reused), KVIO_OK);
    cr_assert(!kvio_hash_equal(reused, hash_e), "block 2 now holds g's content");
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(cache, &metrics);
    cr_assert_eq(metrics.evictions, 2, "e's cached blocks 2 and 3 were evicted (4 was partial)");
    kvio_kvreq_destroy(d);
    kvio_kvreq_t *h = request(cache, tokens, 33);
    cr_assert_eq(kvio_kvcache_allocate(cache, h, 33, NULL), KVIO_OK);
    assert_blocks(h, (uint32_t[]){1, 5, 6}, 3);
    kvio_kvreq_destroy(h);
    kvio_kvreq_destroy(g);
    kvio_kvcache_destroy(cache);
    free(tokens);
    free(filler);
}

/* An allocation takes its blocks from the queue's head and hashes each as
 * it takes it: a hash it takes in that a block further along the run still
 * holds (cached, free) is a copy of that block's until the run evicts it,
 * then the only one. The index ends as if the run had evicted first. */
Test(kvcache, a_run_that_evicts_a_hash_it_also_takes_in_keeps_the_index_whole, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(4, KVIO_FREE_ORDER_APPEND, true);
    const kvio_hash_t h1 = {.low = 11, .high = 1}, h2 = {.low = 12, .high = 1},
                      h3 = {.low = 13, .high = 1}, x = {.low = 21, .high = 2},
                      y = {.low = 23, .high = 2};
    kvio_kvreq_t *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, (kvio_hash_t[]){h1, h2, h3}, 3, 3 * BLOCK, &a),
                 KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 3 * BLOCK, NULL), KVIO_OK);
    assert_blocks(a, (uint32_t[]){1, 2, 3}, 3);
    kvio_kvcache_free(cache, a);
    assert_queue(cache, (uint32_t[]){3, 2, 1}, 3); /* a prefix's tail goes first */
    /* b misses at x, so all three blocks are new: block 2 takes h1 while
     * block 1, taken after it, still holds h1. */
    cr_assert_eq(kvio_kvreq_create_hashes(cache, (kvio_hash_t[]){x, h1, y}, 3, 3 * BLOCK, &b),
                 KVIO_OK);
    size_t hit_tokens = 1;
    cr_assert_eq(kvio_kvcache_allocate(cache, b, 3 * BLOCK, &hit_tokens), KVIO_OK);
    cr_assert_eq(hit_tokens, 0);
    assert_blocks(b, (uint32_t[]){3, 2, 1}, 3);
    const kvio_hash_t held[] = {y, h1, x}; /* blocks 1, 2, 3 */
    for (uint32_t block = 1; block <= 3; block++) {
        kvio_hash_t hash;
        cr_assert_eq(kvio_kvcache_block_hash(cache, block, &hash), KVIO_OK);
        cr_assert(kvio_hash_equal(hash, held[block - 1]), "block %u holds the wrong hash", block);
    }
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(cache, &metrics);
    cr_assert_eq(metrics.evictions, 3);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &h1, 1, BLOCK + 1), BLOCK);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &h2, 1, BLOCK + 1), 0);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &h3, 1, BLOCK + 1), 0);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, (kvio_hash_t[]){x, h1, y}, 3, 3 * BLOCK + 1),
                 3 * BLOCK);
    kvio_kvcache_free(cache, b);
    /* h1 leads to block 2 alone: hit, then evicted with the rest by new
     * content, after which nothing of b's is found. */
    cr_assert_eq(kvio_kvreq_create_hashes(cache, &h1, 1, BLOCK + 1, &c), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, c, BLOCK + 1, &hit_tokens), KVIO_OK);
    cr_assert_eq(hit_tokens, BLOCK);
    assert_blocks(c, (uint32_t[]){2, 1}, 2);
    kvio_kvcache_free(cache, c);
    const kvio_hash_t fresh[] = {{.low = 31, .high = 3}, {.low = 32, .high = 3},
                                 {.low = 33, .high = 3}};
    kvio_kvreq_t *d = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, fresh, 3, 3 * BLOCK, &d), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, d, 3 * BLOCK, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &h1, 1, BLOCK + 1), 0);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &x, 1, BLOCK + 1), 0);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &y, 1, BLOCK + 1), 0);
    kvio_kvcache_free(cache, d);
    cr_assert_eq(kvio_kvcache_num_free_blocks(cache), 3);
    kvio_kvreq_destroy(a);
    kvio_kvreq_destroy(b);
    kvio_kvreq_destroy(c);
    kvio_kvreq_destroy(d);
    kvio_kvcache_destroy(cache);
}

/* Hashes that all land in one home bucket of the pool's index (its key is
 * the low word when the high one is 0) with distinct tags: the crowd an
 * unlucky or adversarial stream makes. */
static kvio_hash_t same_home_hash(uint32_t i)
{
    return (kvio_hash_t){.low = ((uint64_t)(i + 1) << 33) | 5, .high = 0};
}

static uint32_t first_block(const kvio_kvreq_t *req)
{
    const uint32_t *ids;
    size_t count;
    kvio_kvreq_blocks(req, &ids, &count);
    cr_assert_gt(count, 0);
    return ids[0];
}

/* A one-block request for hash (one token more, so the block can be hit). */
static kvio_kvreq_t *hash_request(kvio_kvcache_t *cache, const kvio_hash_t *hash)
{
    kvio_kvreq_t *req = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, hash, 1, BLOCK + 1, &req), KVIO_OK);
    return req;
}

Test(kvcache, a_crowded_home_bucket_keeps_every_hash_findable_and_in_order, .timeout = 10)
{
    enum { BLOCKS = 1024, CROWD = 400 };
    kvio_kvcache_t *cache = make_pool(BLOCKS + 1, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t hashes[CROWD + 1];
    kvio_kvreq_t *crowd[CROWD];
    for (uint32_t i = 0; i <= CROWD; i++)
        hashes[i] = same_home_hash(i);
    /* 400 entries for one home: they spill over some 50 buckets, each
     * counting the entries that passed it. */
    for (uint32_t i = 0; i < CROWD; i++) {
        crowd[i] = hash_request(cache, &hashes[i]);
        size_t hit = 1;
        cr_assert_eq(kvio_kvcache_allocate(cache, crowd[i], BLOCK + 1, &hit), KVIO_OK);
        cr_assert_eq(hit, 0, "hash %u was not cached before", i);
    }
    for (uint32_t i = 0; i < CROWD; i++)
        cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &hashes[i], 1, BLOCK + 1), BLOCK,
                     "hash %u is found past its full home bucket", i);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &hashes[CROWD], 1, BLOCK + 1), 0);

    /* Two blocks for one crowded hash: the earlier inserted is found. */
    kvio_kvreq_t *later = hash_request(cache, &hashes[CROWD]);
    kvio_kvreq_t *earlier = hash_request(cache, &hashes[CROWD]);
    cr_assert_eq(kvio_kvcache_allocate(cache, later, 10, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, earlier, 10, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, earlier, BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, later, BLOCK + 1, NULL), KVIO_OK);
    kvio_kvreq_t *probe = hash_request(cache, &hashes[CROWD]);
    cr_assert_eq(kvio_kvcache_allocate(cache, probe, BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(first_block(probe), first_block(earlier), "the earliest inserted block wins");
    kvio_kvreq_destroy(probe);

    /* Everything but `later` freed, then every free block taken for other
     * content: the crowd and `earlier` are evicted, `later` is found. */
    for (uint32_t i = 0; i < CROWD; i++)
        kvio_kvreq_destroy(crowd[i]);
    kvio_kvreq_destroy(earlier);
    uint32_t *filler_tokens = token_run(100000, (BLOCKS - 2) * BLOCK);
    kvio_kvreq_t *filler = request(cache, filler_tokens, (BLOCKS - 2) * BLOCK);
    cr_assert_eq(kvio_kvcache_allocate(cache, filler, (BLOCKS - 2) * BLOCK, NULL), KVIO_OK);
    for (uint32_t i = 0; i < CROWD; i++)
        cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &hashes[i], 1, BLOCK + 1), 0,
                     "hash %u was evicted", i);
    kvio_kvreq_destroy(filler);
    probe = hash_request(cache, &hashes[CROWD]);
    cr_assert_eq(kvio_kvcache_allocate(cache, probe, BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(first_block(probe), first_block(later), "the remaining block is found");
    kvio_kvreq_destroy(probe);
    kvio_kvreq_destroy(later);

    /* The crowd again, into the buckets it left: found. */
    for (uint32_t i = 0; i < CROWD; i++) {
        crowd[i] = hash_request(cache, &hashes[i]);
        size_t hit = 1;
        cr_assert_eq(kvio_kvcache_allocate(cache, crowd[i], BLOCK + 1, &hit), KVIO_OK);
        cr_assert_eq(hit, 0);
    }
    for (uint32_t i = 0; i < CROWD; i++) {
        cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &hashes[i], 1, BLOCK + 1), BLOCK);
        kvio_kvreq_destroy(crowd[i]);
    }
    kvio_kvcache_destroy(cache);
    free(filler_tokens);
}

Test(kvcache, a_later_duplicate_never_takes_a_hole_before_the_earlier_one, .timeout = 10)
{
    /* 64 usable blocks: x takes the first entry of the home bucket, the
     * duplicate's first copy the second; x is evicted, leaving a hole before
     * it. The second copy must go after the first, or lookups would find it
     * first. */
    kvio_kvcache_t *cache = make_pool(65, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t x = same_home_hash(0), duplicate = same_home_hash(1);
    kvio_kvreq_t *x_req = hash_request(cache, &x);
    cr_assert_eq(kvio_kvcache_allocate(cache, x_req, BLOCK + 1, NULL), KVIO_OK); /* 1, 2 */
    kvio_kvreq_t *second = hash_request(cache, &duplicate);
    kvio_kvreq_t *first = hash_request(cache, &duplicate);
    cr_assert_eq(kvio_kvcache_allocate(cache, second, 10, NULL), KVIO_OK); /* 3 */
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 10, NULL), KVIO_OK);  /* 4 */
    cr_assert_eq(kvio_kvcache_allocate(cache, first, BLOCK + 1, NULL), KVIO_OK);
    kvio_kvreq_destroy(x_req);
    /* 60 blocks for hashes homed elsewhere take every free block but x's,
     * which the second copy's request then takes: x's entry goes just
     * before the second copy's comes in. */
    kvio_hash_t elsewhere[60];
    for (uint32_t i = 0; i < 60; i++)
        elsewhere[i] = (kvio_hash_t){.low = ((uint64_t)(i + 1) << 33) | 12, .high = 0};
    kvio_kvreq_t *filler = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, elsewhere, 60, 60 * BLOCK, &filler), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, filler, 60 * BLOCK, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, second, BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &x, 1, BLOCK + 1), 0, "x was evicted");
    kvio_kvreq_destroy(filler);
    kvio_kvreq_t *probe = hash_request(cache, &duplicate);
    cr_assert_eq(kvio_kvcache_allocate(cache, probe, BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(first_block(probe), first_block(first), "the earliest inserted block wins");
    cr_assert_eq(first_block(first), 4);
    kvio_kvreq_destroy(probe);
    kvio_kvreq_destroy(first);
    kvio_kvreq_destroy(second);
    kvio_kvcache_destroy(cache);
}

/* Issue 59, item 1: requests that compute one block at the same time each
 * cache it (vLLM keeps every copy). Hundreds of copies of one hash, taken
 * and freed over and over, made the index's searches run forever (every
 * bucket counted as passed); the index holds each hash once, its copies in
 * the order they came. */
Test(kvcache, many_copies_of_one_hash_churned_never_stall_the_index, .timeout = 10)
{
    enum { BLOCKS = 1024, LIVE = 400, ROUNDS = 400, TURNOVER = 100 };
    kvio_kvcache_t *cache = make_pool(BLOCKS + 1, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t shared = same_home_hash(7);
    kvio_kvreq_t *live[LIVE] = {0};
    size_t oldest = 0;
    for (uint32_t round = 0; round < ROUNDS; round++) {
        for (uint32_t i = 0; i < TURNOVER || (round == 0 && i < LIVE); i++) {
            size_t slot = (oldest + i) % LIVE;
            if (live[slot] != NULL)
                kvio_kvreq_destroy(live[slot]); /* freed, still cached */
            /* A 10-token prompt, then decode fills its block with the
             * shared content: one more copy of the shared hash. */
            cr_assert_eq(kvio_kvreq_create_hashes(cache, NULL, 0, 10, &live[slot]), KVIO_OK);
            cr_assert_eq(kvio_kvcache_allocate(cache, live[slot], 10, NULL), KVIO_OK);
            cr_assert_eq(kvio_kvreq_append_hashes(live[slot], BLOCK + 1 - 10, &shared, 1), KVIO_OK);
            cr_assert_eq(kvio_kvcache_allocate(cache, live[slot], BLOCK + 1, NULL), KVIO_OK);
        }
        oldest = (oldest + TURNOVER) % LIVE;
        /* A hash of its own still goes in and is found. */
        kvio_hash_t own = {.low = 0x9e3779b97f4a7c15ull * (round + 1), .high = round + 1};
        kvio_kvreq_t *probe = hash_request(cache, &own);
        cr_assert_eq(kvio_kvcache_allocate(cache, probe, BLOCK + 1, NULL), KVIO_OK);
        cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &own, 1, BLOCK + 1), BLOCK);
        cr_assert_eq(kvio_kvcache_lookup_hashes(cache, &shared, 1, BLOCK + 1), BLOCK);
        kvio_kvreq_destroy(probe);
    }
    /* The copy still held is the one a new request shares, once the freed
     * copies are evicted. */
    for (size_t i = 0; i < LIVE; i++)
        if (i != oldest)
            kvio_kvreq_destroy(live[i]);
    uint32_t *filler_tokens = token_run(100000, (BLOCKS - 2) * BLOCK);
    kvio_kvreq_t *filler = request(cache, filler_tokens, (BLOCKS - 2) * BLOCK);
    cr_assert_eq(kvio_kvcache_allocate(cache, filler, (BLOCKS - 2) * BLOCK, NULL), KVIO_OK);
    kvio_kvreq_destroy(filler);
    kvio_kvreq_t *probe = hash_request(cache, &shared);
    cr_assert_eq(kvio_kvcache_allocate(cache, probe, BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(first_block(probe), first_block(live[oldest]));
    kvio_kvreq_destroy(probe);
    kvio_kvreq_destroy(live[oldest]);
    kvio_kvcache_destroy(cache);
    free(filler_tokens);
}

Test(kvcache, a_kept_lookup_serves_the_allocation_only_while_the_index_is_unchanged,
     .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t chain[3], other;
    kvio_hash_trace_chain(NULL, 41, 0, 3, chain);
    other = kvio_hash_trace_block(&chain[1], 42, 2);
    kvio_kvreq_t *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, chain, 2, 40, &a), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 40, NULL), KVIO_OK); /* 1, 2 hashed; 3 */
    kvio_kvreq_destroy(a);
    /* Looked up, then allocated with nothing in between: the kept hits. */
    cr_assert_eq(kvio_kvreq_create_hashes(cache, chain, 3, 50, &b), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup(cache, b), 32);
    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, b, 50, &hit), KVIO_OK);
    cr_assert_eq(hit, 32);
    assert_blocks(b, (uint32_t[]){1, 2, 4, 5}, 4);
    /* Looked up, then the index gains the next block (b cached chain[2]):
     * the allocation searches again and hits it too. */
    kvio_hash_t with_third[3] = {chain[0], chain[1], chain[2]};
    cr_assert_eq(kvio_kvreq_create_hashes(cache, with_third, 3, 50, &c), KVIO_OK);
    cr_assert_eq(kvio_kvreq_create_hashes(cache, (kvio_hash_t[]){chain[0], chain[1], other}, 3,
                                          50, &d),
                 KVIO_OK);
    kvio_kvreq_destroy(b); /* frees 5, 4, 2, 1: the index is unchanged */
    cr_assert_eq(kvio_kvcache_lookup(cache, c), 48);
    cr_assert_eq(kvio_kvcache_lookup(cache, d), 32);
    kvio_kvreq_t *e = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, (kvio_hash_t[]){chain[0], chain[1], other}, 3,
                                          50, &e),
                 KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, e, 50, &hit), KVIO_OK); /* caches `other` */
    cr_assert_eq(hit, 32);
    cr_assert_eq(kvio_kvcache_allocate(cache, d, 50, &hit), KVIO_OK);
    cr_assert_eq(hit, 48, "d's lookup predates e's block for `other`: found on allocation");
    /* A request that grows drops its kept lookup. */
    kvio_kvreq_t *f = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, chain, 2, 32, &f), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup(cache, f), 16, "the last token's block is never hit");
    cr_assert_eq(kvio_kvreq_append_hashes(f, 18, &chain[2], 1), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, f, 50, &hit), KVIO_OK);
    cr_assert_eq(hit, 48);
    kvio_kvreq_destroy(c);
    kvio_kvreq_destroy(d);
    kvio_kvreq_destroy(e);
    kvio_kvreq_destroy(f);
    kvio_kvcache_destroy(cache);
}

Test(kvcache, a_watched_lookup_extends_and_an_eviction_of_its_blocks_ends_it, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    kvio_hash_t chain[3];
    kvio_hash_trace_chain(NULL, 43, 0, 3, chain);
    kvio_kvreq_t *a = NULL, *waiting = NULL, *extender = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, chain, 2, 40, &a), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 40, NULL), KVIO_OK); /* 1, 2 hashed; 3 */
    /* A running request that grows later (growing takes no lookup, so the
     * pool keeps watching the waiting request's). */
    uint32_t *other = token_run(7000, 9 * BLOCK);
    kvio_kvreq_t *running = request(cache, other, 9 * BLOCK);
    cr_assert_eq(kvio_kvcache_allocate(cache, running, BLOCK, NULL), KVIO_OK); /* 4 */
    kvio_kvreq_destroy(a); /* queue: 5 .. 10, 3, 2, 1 */
    cr_assert_eq(kvio_kvreq_create_hashes(cache, chain, 3, 50, &waiting), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup(cache, waiting), 32);
    /* Another request caches the next block: the lookup grows. */
    cr_assert_eq(kvio_kvreq_create_hashes(cache, chain, 3, 48, &extender), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, extender, 48, NULL), KVIO_OK); /* 1, 2, 5 */
    cr_assert_eq(kvio_kvcache_lookup(cache, waiting), 48);
    kvio_kvreq_destroy(extender); /* queue: 6 .. 10, 3, 5, 2, 1 */
    cr_assert_eq(kvio_kvcache_lookup(cache, waiting), 48);
    /* The running request hashes one more block (6): the index changed, and
     * the second lookup in a row makes the pool watch the waiting request. */
    cr_assert_eq(kvio_kvcache_allocate(cache, running, 2 * BLOCK, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup(cache, waiting), 48);
    /* It takes 7 more: 7 .. 10, 3 (unhashed), 5 (chain[2]) and 2
     * (chain[1]). The watched lookup is back to its first block. */
    cr_assert_eq(kvio_kvcache_allocate(cache, running, 9 * BLOCK, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_lookup(cache, waiting), 16, "chain[1]'s block was evicted");
    size_t hit = 0;
    kvio_kvreq_destroy(running);
    cr_assert_eq(kvio_kvcache_allocate(cache, waiting, 50, &hit), KVIO_OK);
    cr_assert_eq(hit, 16);
    kvio_kvreq_destroy(waiting);
    kvio_kvcache_destroy(cache);
    free(other);
}

Test(kvcache, metrics_count_queries_hits_and_usage, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    uint32_t *tokens = token_run(1, 64);
    kvio_kvreq_t *a = request(cache, tokens, 64), *b = request(cache, tokens, 64);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 64, NULL), KVIO_OK);
    cr_assert_float_eq(kvio_kvcache_usage(cache), 0.4, 1e-12);
    cr_assert_eq(kvio_kvcache_allocate(cache, b, 64, NULL), KVIO_OK); /* 3 hits + 1 new */
    cr_assert_float_eq(kvio_kvcache_usage(cache), 0.5, 1e-12);
    kvio_kvcache_free(cache, a);
    kvio_kvcache_free(cache, b);
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(cache, &metrics);
    cr_assert_eq(metrics.prefix_queries_tokens, 128);
    cr_assert_eq(metrics.prefix_hits_tokens, 48);
    cr_assert_eq(metrics.prefix_queries_blocks, 8);
    cr_assert_eq(metrics.prefix_hits_blocks, 3);
    cr_assert_eq(metrics.blocks_allocated, 5);
    cr_assert_eq(metrics.blocks_freed, 5);
    cr_assert_float_eq(metrics.peak_usage, 0.5, 1e-12);
    cr_assert_float_eq(kvio_kvcache_usage(cache), 0.0, 1e-12);
    kvio_kvreq_destroy(a);
    kvio_kvreq_destroy(b);
    kvio_kvcache_destroy(cache);
    free(tokens);
}

Test(kvcache, non_lru_pool_reuses_unhashed_blocks_before_cached_ones, .timeout = 10)
{
    for (size_t p = 0; p < kvio_evictions.count; p++) {
        const char *policy = kvio_evictions.plugins[p]->name;
        kvio_kvcache_config_t config = {.num_blocks = 11, .block_size = BLOCK,
                                        .enable_prefix_caching = true,
                                        .free_order = KVIO_FREE_ORDER_APPEND,
                                        .eviction = policy};
        kvio_kvcache_t *cache = NULL;
        cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
        uint32_t *tokens = token_run(1, 48), *fill = token_run(1000, 112);
        kvio_kvreq_t *a = request(cache, tokens, 48), *b = request(cache, fill, 112);
        kvio_kvreq_t *again = request(cache, tokens, 48);
        cr_assert_eq(kvio_kvcache_allocate(cache, a, 48, NULL), KVIO_OK); /* 1-3 cached */
        kvio_kvcache_free(cache, a);
        /* 7 blocks fit in the 7 never-used blocks: nothing cached is evicted. */
        cr_assert_eq(kvio_kvcache_allocate(cache, b, 112, NULL), KVIO_OK);
        kvio_kvcache_metrics_t metrics;
        kvio_kvcache_get_metrics(cache, &metrics);
        cr_assert_eq(metrics.evictions, 0, "%s evicted a cached block", policy);
        cr_assert_eq(kvio_kvcache_lookup(cache, again), 32, "%s", policy);
        kvio_kvcache_free(cache, b);
        kvio_kvreq_destroy(a);
        kvio_kvreq_destroy(b);
        kvio_kvreq_destroy(again);
        kvio_kvcache_destroy(cache);
        free(tokens);
        free(fill);
    }
}

Test(kvcache, lfu_pool_keeps_the_often_hit_prefix, .timeout = 10)
{
    /* Two cached 2-block prefixes; P is hit three times, Q never. A request
     * that needs 2 cached blocks evicts Q's under lfu, P's tail under lru. */
    const char *policies[] = {"lfu", "lru"};
    size_t expected_p_hit[] = {32, 16};
    for (size_t p = 0; p < 2; p++) {
        kvio_kvcache_config_t config = {.num_blocks = 5, .block_size = BLOCK,
                                        .enable_prefix_caching = true,
                                        .eviction = policies[p]};
        kvio_kvcache_t *cache = NULL;
        cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
        uint32_t *prefix_p = token_run(1, 33), *prefix_q = token_run(100, 33);
        uint32_t *fresh = token_run(5000, 32);
        kvio_kvreq_t *req;
        for (int i = 0; i < 3; i++) {
            req = request(cache, prefix_p, 33);
            cr_assert_eq(kvio_kvcache_allocate(cache, req, 32, NULL), KVIO_OK);
            kvio_kvreq_destroy(req);
        }
        req = request(cache, prefix_q, 33);
        cr_assert_eq(kvio_kvcache_allocate(cache, req, 32, NULL), KVIO_OK);
        kvio_kvreq_destroy(req);
        /* All 4 blocks are cached and free; take 1 of them. */
        req = request(cache, fresh, 16);
        cr_assert_eq(kvio_kvcache_allocate(cache, req, 16, NULL), KVIO_OK);
        kvio_kvreq_t *probe = request(cache, prefix_p, 33);
        cr_assert_eq(kvio_kvcache_lookup(cache, probe), expected_p_hit[p], "%s", policies[p]);
        kvio_kvreq_destroy(probe);
        kvio_kvreq_destroy(req);
        kvio_kvcache_destroy(cache);
        free(prefix_p);
        free(prefix_q);
        free(fresh);
    }
}

Test(kvcache, unknown_policy_and_bad_sizes_are_refused, .timeout = 10)
{
    kvio_kvcache_config_t config = {.num_blocks = 11, .block_size = 16, .eviction = "clock"};
    kvio_kvcache_t *cache = NULL;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_ERR_NOT_FOUND);
    config.eviction = NULL;
    config.num_blocks = 1;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_ERR_INVALID);
    config.num_blocks = 11;
    config.block_size = 0;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_ERR_INVALID);
    cr_assert_eq(kvio_evict_check_name("s3fifo"), KVIO_OK);
    cr_assert_eq(kvio_evict_check_name("clock"), KVIO_ERR_NOT_FOUND);
    cr_assert_geq(kvio_evictions.count, 5);
}

/* ---- policies, through the plug-in interface ----------------------------- */

/* One row per policy at least (test_plugins checks): the policy replayed
 * through its hooks on a cache of capacity entries, a key being its own
 * entry (keys below 32). script, separated by spaces:
 *   K    a request of key K: a hit (access) when K is resident; else K is
 *        arriving, then, the cache being full, a victim is taken, then K
 *        joins (add, fresh), as in cachesim
 *   -K   resident K leaves the set, not evicted (the pool: a hit took it)
 *   +K   K returns to the set (add, not fresh: the pool freed it again)
 *   v    a victim is taken (the pool takes one for new content)
 * then the set is drained. hits: the keys that hit, in order; victims:
 * every victim, in order, the drain's last ("-": v found none). */
typedef struct evict_case {
    const char *policy;
    uint64_t capacity;
    const char *script;
    const char *hits;
    const char *victims;
} evict_case_t;

#define EVICT_KEYS 32

static const evict_case_t evict_cases[] = {
    /* Keys 0..3 join in order; 1 is hit twice, 2 once; 3 is taken. */
    {.policy = "lru", .capacity = 8, .script = "0 1 2 3 1 2 1 -3", .hits = "1 2 1",
     .victims = "0 2 1"}, /* hits move 1, 2, then 1 to the recent end */
    {.policy = "mru", .capacity = 8, .script = "0 1 2 3 1 2 1 -3", .hits = "1 2 1",
     .victims = "1 2 0"},
    {.policy = "fifo", .capacity = 8, .script = "0 1 2 3 1 2 1 -3", .hits = "1 2 1",
     .victims = "0 1 2"},
    {.policy = "lfu", .capacity = 8, .script = "0 1 2 3 1 2 1 -3", .hits = "1 2 1",
     .victims = "0 2 1"},
    {.policy = "filo", .capacity = 8, .script = "0 1 2 3 1 2 1 -3", .hits = "1 2 1",
     .victims = "2 1 0"}, /* newest first; hits change nothing */
    /* Small queue target 1 of 10: 0 was hit, so the victim pass moves it to
     * main and evicts 1, whose key becomes a ghost. 1 comes back into main,
     * so 2 (small) goes first; main holds 0 (one hit left) and 1: 1 goes,
     * then 0 (its hit spent on a reinsertion). */
    {.policy = "s3fifo", .capacity = 10, .script = "0 1 0 v 1 2", .hits = "0",
     .victims = "1 2 1 0"},
    /* ARC by the paper's Fig. 4; c = 3, lists LRU first, p = 0:
     *   2 0 1  misses: T1 = 2 0 1
     *   1      hit in T1: T2 = 1, T1 = 2 0
     *   5      miss, full, |T1| 2 > p: 2 to B1; T1 = 0 5
     *   2      ghost of B1: p = 0 + max(|B2|/|B1|, 1) = 1; |T1| 2 > 1: 0 to
     *          B1 = 0; T2 = 1 2, T1 = 5
     *   0      ghost of B1: p = 2; |T1| 1 <= 2: T2's 1 to B2; T2 = 2 0
     *   4      miss (|T1|+|B1| 1 < c, the four lists 4 < 2c): |T1| 1 <= 2:
     *          2 to B2 = 1 2; T1 = 5 4, T2 = 0
     *   5      hit in T1: T2 = 0 5, T1 = 4
     *   2      ghost of B2: p = 2 - max(|B1|/|B2|, 1) = 1; |T1| 1 = p and 2
     *          is B2's: 4 to B1; T2 = 0 5 2
     * then the drain: T1 empty, T2's 0 5 2. (lru hits only the first 1.) */
    {.policy = "arc", .capacity = 3, .script = "2 0 1 1 5 2 0 4 5 2", .hits = "1 5",
     .victims = "2 0 1 2 4 0 5 2"},
};

/* Appends entry (or "-" for none) to text, space-separated. */
static void append_entry(char *text, size_t size, uint32_t entry)
{
    size_t used = strlen(text);
    if (entry == KVIO_EVICT_NONE)
        snprintf(text + used, size - used, "%s-", used > 0 ? " " : "");
    else
        snprintf(text + used, size - used, "%s%u", used > 0 ? " " : "", entry);
}

/* Runs a row's script: fills hits_p and victims_p as the row states them. */
static void replay_case(const evict_case_t *test, char *hits_p, char *victims_p, size_t size)
{
    kvio_evict_t evict = {0};
    cr_assert_eq(kvio_evict_init(&evict, test->policy, EVICT_KEYS, test->capacity), KVIO_OK,
                 "%s", test->policy);
    const kvio_evict_ops_t *ops = evict.ops;
    bool resident[EVICT_KEYS] = {false};
    uint64_t size_in_entries = 0;
    hits_p[0] = victims_p[0] = '\0';
    char *script = strdup(test->script), *save = NULL;
    for (char *step = strtok_r(script, " ", &save); step != NULL;
         step = strtok_r(NULL, " ", &save)) {
        uint32_t victim;
        if (strcmp(step, "v") == 0) {
            victim = ops->victim(evict.priv);
            append_entry(victims_p, size, victim);
            if (victim != KVIO_EVICT_NONE) {
                resident[victim] = false;
                size_in_entries--;
            }
            continue;
        }
        uint32_t key = (uint32_t)strtoul(step[0] == '-' || step[0] == '+' ? step + 1 : step,
                                         NULL, 10);
        cr_assert_lt(key, EVICT_KEYS, "%s: key %s", test->policy, step);
        if (step[0] == '-') {
            ops->remove(evict.priv, key);
        } else if (step[0] == '+') {
            ops->add(evict.priv, key, key, false);
        } else if (resident[key]) {
            ops->access(evict.priv, key);
            append_entry(hits_p, size, key);
        } else {
            if (ops->arriving != NULL)
                ops->arriving(evict.priv, key);
            if (size_in_entries == test->capacity) {
                victim = ops->victim(evict.priv);
                cr_assert_neq(victim, KVIO_EVICT_NONE, "%s: a full cache has no victim",
                              test->policy);
                append_entry(victims_p, size, victim);
                resident[victim] = false;
                size_in_entries--;
            }
            ops->add(evict.priv, key, key, true);
            resident[key] = true;
            size_in_entries++;
        }
    }
    free(script);
    uint32_t victim;
    while ((victim = ops->victim(evict.priv)) != KVIO_EVICT_NONE)
        append_entry(victims_p, size, victim);
    kvio_evict_fini(&evict);
}

Test(evict, every_policy_hits_and_evicts_as_its_rows_say, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(evict_cases) / sizeof(evict_cases[0]); c++) {
        const evict_case_t *test = &evict_cases[c];
        char hits[256], victims[256];
        replay_case(test, hits, victims, sizeof(hits));
        cr_expect_str_eq(hits, test->hits, "%s: hits '%s', expected '%s'", test->policy, hits,
                         test->hits);
        cr_expect_str_eq(victims, test->victims, "%s: victims '%s', expected '%s'",
                         test->policy, victims, test->victims);
    }
}

/* ---- radix index -------------------------------------------------------- */

static kvio_radix_t *make_tree(uint32_t num_blocks, const char *policy)
{
    kvio_radix_config_t config = {.num_blocks = num_blocks, .block_size = BLOCK,
                                  .eviction = policy};
    kvio_radix_t *tree = NULL;
    cr_assert_eq(kvio_radix_create(&config, &tree), KVIO_OK);
    return tree;
}

/* Page keys: a sequence named by letters, "abcd" -> 4 pages. */
static size_t keys_of(const char *pages, kvio_hash_t *keys_p)
{
    size_t count = strlen(pages);
    for (size_t i = 0; i < count; i++)
        keys_p[i] = (kvio_hash_t){.low = (uint64_t)pages[i], .high = i};
    return count;
}

static size_t insert(kvio_radix_t *tree, const char *pages)
{
    kvio_hash_t keys[32];
    size_t present = 99;
    cr_assert_eq(kvio_radix_insert(tree, keys, keys_of(pages, keys), &present), KVIO_OK);
    return present;
}

static kvio_radix_node_t match(kvio_radix_t *tree, const char *pages, size_t *matched_p)
{
    kvio_hash_t keys[32];
    kvio_radix_node_t node;
    cr_assert_eq(kvio_radix_match(tree, keys, keys_of(pages, keys), &node, matched_p), KVIO_OK);
    return node;
}

Test(radix, insert_returns_what_was_already_present, .timeout = 10)
{
    kvio_radix_t *tree = make_tree(16, "lru");
    cr_assert_eq(insert(tree, "abcd"), 0);
    cr_assert_eq(insert(tree, "abcd"), 4);
    cr_assert_eq(insert(tree, "abxy"), 2);
    cr_assert_eq(kvio_radix_num_free_blocks(tree), 16 - 6);
    cr_assert_eq(kvio_radix_num_nodes(tree), 3, "ab, cd, xy");
    cr_assert_eq(kvio_radix_evictable_tokens(tree), 6 * BLOCK);
    kvio_radix_destroy(tree);
}

Test(radix, match_ending_inside_a_node_splits_it, .timeout = 10)
{
    kvio_radix_t *tree = make_tree(16, "lru");
    insert(tree, "abcd");
    size_t matched;
    kvio_radix_node_t whole = match(tree, "abcd", &matched);
    cr_assert_eq(matched, 4);
    cr_assert_eq(kvio_radix_node_pages(tree, whole), 4);
    kvio_radix_node_t top = match(tree, "abq", &matched);
    cr_assert_eq(matched, 2);
    cr_assert_eq(kvio_radix_num_nodes(tree), 2);
    cr_assert_eq(kvio_radix_node_pages(tree, top), 2);
    cr_assert_eq(kvio_radix_node_parent(tree, top), 0);
    cr_assert_eq(kvio_radix_node_pages(tree, whole), 2, "the old node keeps the tail");
    cr_assert_eq(kvio_radix_node_parent(tree, whole), top);
    /* The full key still matches through both nodes. */
    cr_assert_eq(match(tree, "abcdz", &matched), whole);
    cr_assert_eq(matched, 4);
    cr_assert_eq(kvio_radix_evictable_tokens(tree), 4 * BLOCK, "a split moves no tokens");
    kvio_radix_destroy(tree);
}

Test(radix, split_parent_copies_the_lock_count_and_totals_follow_locks, .timeout = 10)
{
    kvio_radix_t *tree = make_tree(16, "lru");
    insert(tree, "abcd");
    insert(tree, "xy");
    size_t matched;
    kvio_radix_node_t node = match(tree, "abcd", &matched);
    kvio_radix_lock(tree, node);
    kvio_radix_lock(tree, node);
    cr_assert_eq(kvio_radix_protected_tokens(tree), 4 * BLOCK);
    cr_assert_eq(kvio_radix_evictable_tokens(tree), 2 * BLOCK);
    kvio_radix_node_t top = match(tree, "ab", &matched);
    cr_assert_eq(kvio_radix_node_lock_count(tree, top), 2);
    cr_assert_eq(kvio_radix_protected_tokens(tree), 4 * BLOCK);
    kvio_radix_unlock(tree, node);
    cr_assert_eq(kvio_radix_protected_tokens(tree), 4 * BLOCK);
    kvio_radix_unlock(tree, node);
    cr_assert_eq(kvio_radix_node_lock_count(tree, top), 0);
    cr_assert_eq(kvio_radix_protected_tokens(tree), 0);
    cr_assert_eq(kvio_radix_evictable_tokens(tree), 6 * BLOCK);
    kvio_radix_destroy(tree);
}

Test(radix, locked_nodes_are_never_evicted, .timeout = 10)
{
    kvio_radix_t *tree = make_tree(16, "lru");
    insert(tree, "abcd");
    insert(tree, "abxy");
    insert(tree, "pq");
    size_t matched, evicted = 0;
    kvio_radix_node_t held = match(tree, "abcd", &matched);
    kvio_radix_lock(tree, held);
    kvio_radix_evict(tree, 1000 * BLOCK, &evicted);
    cr_assert_eq(evicted, 4 * BLOCK, "xy and pq go; ab and cd are locked");
    cr_assert_eq(kvio_radix_evictable_tokens(tree), 0);
    cr_assert_eq(kvio_radix_protected_tokens(tree), 4 * BLOCK);
    cr_assert_eq(match(tree, "abcd", &matched), held);
    cr_assert_eq(matched, 4);
    match(tree, "pq", &matched);
    cr_assert_eq(matched, 0);
    /* Unlocked, the leaf goes first and then its parent, now a leaf. */
    kvio_radix_unlock(tree, held);
    kvio_radix_evict(tree, 2 * BLOCK, &evicted);
    cr_assert_eq(evicted, 2 * BLOCK);
    match(tree, "abcd", &matched);
    cr_assert_eq(matched, 2);
    kvio_radix_evict(tree, 1, &evicted);
    cr_assert_eq(evicted, 2 * BLOCK);
    cr_assert_eq(kvio_radix_num_nodes(tree), 0);
    cr_assert_eq(kvio_radix_num_free_blocks(tree), 16);
    kvio_radix_destroy(tree);
}

Test(radix, insert_evicts_unlocked_leaves_or_reports_no_space, .timeout = 10)
{
    kvio_radix_t *tree = make_tree(6, "lru");
    insert(tree, "abc");
    insert(tree, "xyz");
    size_t matched;
    kvio_radix_node_t node = match(tree, "abc", &matched); /* abc most recent */
    cr_assert_eq(insert(tree, "mn"), 0);                  /* evicts xyz (lru) */
    match(tree, "xyz", &matched);
    cr_assert_eq(matched, 0);
    match(tree, "abc", &matched);
    cr_assert_eq(matched, 3);
    kvio_radix_lock(tree, node);
    node = match(tree, "mn", &matched);
    kvio_radix_lock(tree, node);
    kvio_hash_t keys[8];
    cr_assert_eq(kvio_radix_insert(tree, keys, keys_of("uvw", keys), NULL), KVIO_ERR_NO_SPACE);
    cr_assert_eq(kvio_radix_num_free_blocks(tree), 1);
    kvio_radix_destroy(tree);
}

Test(radix, leaves_leave_in_policy_order, .timeout = 10)
{
    /* Leaves a, b, c inserted in order; a is matched again. */
    struct {
        const char *policy;
        const char *first_victim;
    } cases[] = {{"lru", "b"}, {"fifo", "a"}, {"mru", "a"}, {"lfu", "b"}, {"filo", "c"}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        kvio_radix_t *tree = make_tree(8, cases[c].policy);
        insert(tree, "a");
        insert(tree, "b");
        insert(tree, "c");
        size_t matched, evicted;
        match(tree, "a", &matched);
        kvio_radix_evict(tree, 1, &evicted);
        cr_assert_eq(evicted, BLOCK);
        match(tree, cases[c].first_victim, &matched);
        cr_assert_eq(matched, 0, "%s should evict %s first", cases[c].policy,
                     cases[c].first_victim);
        kvio_radix_destroy(tree);
    }
}

/* ---- SGLang's RadixCache cases, on token keys ------------------------------
 * Ported from sgl-project/sglang test/registered/radix_cache/
 * test_radix_cache_unit.py (TestRadixCache), each named after its case; a
 * tree of page_size tokens per page, as RadixCache.create_simulated. */

static kvio_radix_t *token_tree(uint32_t num_slots, uint32_t page_size)
{
    kvio_radix_config_t config = {.num_blocks = num_slots, .block_size = page_size,
                                  .eviction = "lru"};
    kvio_radix_t *tree = NULL;
    cr_assert_eq(kvio_radix_create(&config, &tree), KVIO_OK);
    return tree;
}

#define TOKENS(...) (const uint32_t[]){__VA_ARGS__}, sizeof((uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t)

static size_t insert_tokens(kvio_radix_t *tree, const uint32_t *tokens, size_t count,
                            const char *extra_key)
{
    size_t present = 99;
    cr_assert_eq(kvio_radix_insert_tokens(tree, tokens, count, extra_key,
                                          extra_key ? strlen(extra_key) : 0, &present),
                 KVIO_OK);
    return present;
}

static size_t match_tokens(kvio_radix_t *tree, const uint32_t *tokens, size_t count,
                           const char *extra_key)
{
    size_t matched = 99;
    kvio_radix_node_t node;
    cr_assert_eq(kvio_radix_match_tokens(tree, tokens, count, extra_key,
                                         extra_key ? strlen(extra_key) : 0, &node, &matched),
                 KVIO_OK);
    return matched;
}

static size_t total_size(const kvio_radix_t *tree)
{
    return kvio_radix_evictable_tokens(tree) + kvio_radix_protected_tokens(tree);
}

/* test_insert_and_match_basic */
Test(radix_sglang, insert_and_match_basic, .timeout = 10)
{
    kvio_radix_t *tree = token_tree(64, 1);
    cr_assert_eq(insert_tokens(tree, TOKENS(1, 2, 3), NULL), 0, "no existing prefix");
    cr_assert_eq(total_size(tree), 3);
    cr_assert_eq(kvio_radix_evictable_tokens(tree), 3);
    cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3), NULL), 3);
    cr_assert_eq(match_tokens(tree, TOKENS(1, 2), NULL), 2, "a partial match");
    kvio_radix_destroy(tree);
}

/* test_total_size */
Test(radix_sglang, total_size_counts_every_stored_token, .timeout = 10)
{
    kvio_radix_t *tree = token_tree(64, 1);
    cr_assert_eq(total_size(tree), 0);
    insert_tokens(tree, TOKENS(1, 2, 3), NULL);
    cr_assert_eq(total_size(tree), 3);
    insert_tokens(tree, TOKENS(4, 5), NULL);
    cr_assert_eq(total_size(tree), 5);
    kvio_radix_destroy(tree);
}

/* test_extra_key_isolation: the same tokens under different extra keys
 * (kvio: the cache salt) never match each other. */
Test(radix_sglang, extra_key_isolation, .timeout = 10)
{
    kvio_radix_t *tree = token_tree(64, 1);
    insert_tokens(tree, TOKENS(1, 2, 3), "key1");
    cr_assert_eq(insert_tokens(tree, TOKENS(1, 2, 3), "key2"), 0);
    cr_assert_eq(insert_tokens(tree, TOKENS(1, 2, 3), NULL), 0);
    cr_assert_eq(total_size(tree), 9, "three separate copies");
    cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3), "key1"), 3);
    cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3), "key2"), 3);
    cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3), NULL), 3);
    cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3), "nonexistent"), 0);
    kvio_radix_destroy(tree);
}

/* test_lock_ref_operations */
Test(radix_sglang, lock_ref_operations, .timeout = 10)
{
    kvio_radix_t *tree = token_tree(64, 1);
    insert_tokens(tree, TOKENS(1, 2, 3), NULL);
    kvio_radix_node_t node;
    size_t matched;
    cr_assert_eq(kvio_radix_match_tokens(tree, TOKENS(1, 2, 3), NULL, 0, &node, &matched),
                 KVIO_OK);
    size_t evictable = kvio_radix_evictable_tokens(tree);
    size_t protected = kvio_radix_protected_tokens(tree);
    kvio_radix_lock(tree, node);
    cr_assert_eq(kvio_radix_protected_tokens(tree), protected + 3);
    cr_assert_eq(kvio_radix_evictable_tokens(tree), evictable - 3);
    kvio_radix_unlock(tree, node);
    cr_assert_eq(kvio_radix_protected_tokens(tree), protected);
    cr_assert_eq(kvio_radix_evictable_tokens(tree), evictable);
    kvio_radix_destroy(tree);
}

/* test_evict_functionality */
Test(radix_sglang, evict_frees_tokens, .timeout = 10)
{
    kvio_radix_t *tree = token_tree(64, 1);
    insert_tokens(tree, TOKENS(1, 2), NULL);
    insert_tokens(tree, TOKENS(3, 4), NULL);
    size_t before = total_size(tree), evicted = 0;
    kvio_radix_evict(tree, 2, &evicted);
    cr_assert_eq(evicted, 2, "one leaf of two tokens");
    cr_assert_lt(total_size(tree), before);
    cr_assert_eq(kvio_radix_num_free_blocks(tree), 64 - 2, "its slots are free again");
    cr_assert_eq(kvio_radix_evicted_pages(tree), 2);
    kvio_radix_destroy(tree);
}

/* test_page_alignment_boundary: (page size, sequence length). */
Test(radix_sglang, page_alignment_boundary, .timeout = 10)
{
    const size_t cases[][2] = {{1, 5}, {2, 5}, {4, 6}};
    for (size_t c = 0; c < 3; c++) {
        kvio_radix_t *tree = token_tree(64, (uint32_t)cases[c][0]);
        uint32_t *tokens = token_run(0, cases[c][1]);
        insert_tokens(tree, tokens, cases[c][1], NULL);
        size_t matched = match_tokens(tree, tokens, cases[c][1], NULL);
        cr_assert_gt(matched, 0, "page size %zu", cases[c][0]);
        cr_assert_eq(matched % cases[c][0], 0, "page size %zu: %zu matched", cases[c][0],
                     matched);
        cr_assert_eq(matched, cases[c][1] / cases[c][0] * cases[c][0], "every whole page");
        free(tokens);
        kvio_radix_destroy(tree);
    }
}

/* Where radix and hash-block caching differ (#57): two prompts that share
 * 20 tokens, then part. SGLang's RadixCache at its default page size 1
 * matches all 20 (test_radix_cache_unit.py, test_insert_and_match_basic's
 * partial match and test_advanced_prefix_match_with_node_splits: a match
 * ends inside a node, at any token); vLLM's hash-block cache matches whole
 * blocks only, 16 of them at block_size 16 (the second block's chained
 * hash covers tokens 16-31, which differ). kvio's engine index
 * (serve.kvcache.index: radix) pages the tree by the pool's blocks (page =
 * block_size, as SGLang with page_size > 1), so in the engine radix
 * matches what hash blocks do: 16, and a page-1 tree is cachesim's and
 * these tests' only. */
Test(radix_sglang, a_partial_block_prefix_matches_under_radix_not_hash_blocks, .timeout = 10)
{
    uint32_t first[40], second[40];
    for (uint32_t i = 0; i < 40; i++) {
        first[i] = i;
        second[i] = i < 20 ? i : 1000 + i;
    }
    kvio_radix_t *tokens = token_tree(64, 1);
    insert_tokens(tokens, first, 40, NULL);
    cr_expect_eq(match_tokens(tokens, second, 40, NULL), 20, "radix, page 1: every shared token");
    kvio_radix_destroy(tokens);
    kvio_hash_t first_keys[2], second_keys[2];
    kvio_kvcache_hash_tokens(first, 40, 16, NULL, 0, first_keys);
    kvio_kvcache_hash_tokens(second, 40, 16, NULL, 0, second_keys);
    size_t blocks = 0;
    while (blocks < 2 && kvio_hash_equal(first_keys[blocks], second_keys[blocks]))
        blocks++;
    cr_expect_eq(blocks * 16, 16, "hash blocks of 16: the whole first block only");
    kvio_radix_t *pages = token_tree(64, 16);
    insert_tokens(pages, first, 40, NULL);
    cr_expect_eq(match_tokens(pages, second, 40, NULL), 16, "radix paged by the pool's blocks");
    kvio_radix_destroy(pages);
}

/* test_advanced_prefix_match_with_node_splits, page sizes 1 and 2. */
Test(radix_sglang, advanced_prefix_match_with_node_splits, .timeout = 10)
{
    for (uint32_t page = 1; page <= 2; page++) {
        kvio_radix_t *tree = token_tree(64, page);
        insert_tokens(tree, TOKENS(1, 2, 3, 4, 5, 6, 7, 8), NULL);
        insert_tokens(tree, TOKENS(1, 2, 9, 10), NULL);
        cr_assert_eq(total_size(tree), 10, "page %u: 8 + 2", page);
        cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3, 4, 999, 1000), NULL), 4);
        cr_assert_eq(total_size(tree), 10, "a split inside a node moves no data");
        cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3, 4, 5, 6, 7, 8), NULL), 8);
        cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 3, 4, 5, 6, 777, 888), NULL), 6);
        cr_assert_eq(total_size(tree), 10);
        cr_assert_eq(match_tokens(tree, TOKENS(1, 2, 9, 10), NULL), 4);
        /* 1,2 | 3,4 | 5,6 | 7,8 and 9,10: five nodes after the splits. */
        cr_assert_eq(kvio_radix_num_nodes(tree), 5, "page %u", page);
        kvio_radix_destroy(tree);
    }
}

/* test_kv_cache_events, test_kv_cache_events_with_eviction and
 * test_hash_value_repeating_tokens: a page
 * stored is one BlockStored, chained to the page before it (the first has
 * no parent); whole pages only (5 tokens at page size 2: 2 events);
 * evicting them is one BlockRemoved per page, with the same keys. */
typedef struct radix_events {
    kvio_hash_t stored[16], parents[16], removed[16];
    bool has_parent[16];
    size_t num_stored, num_removed;
} radix_events_t;

static void heard_stored(void *context, kvio_hash_t key, const kvio_hash_t *parent)
{
    radix_events_t *events = context;
    cr_assert_lt(events->num_stored, 16);
    events->has_parent[events->num_stored] = parent != NULL;
    events->parents[events->num_stored] = parent != NULL ? *parent : (kvio_hash_t){0};
    events->stored[events->num_stored++] = key;
}

static void heard_removed(void *context, kvio_hash_t key)
{
    radix_events_t *events = context;
    cr_assert_lt(events->num_removed, 16);
    events->removed[events->num_removed++] = key;
}

Test(radix_sglang, kv_cache_events_with_eviction, .timeout = 10)
{
    for (uint32_t page = 1; page <= 2; page++) {
        radix_events_t events = {0};
        kvio_radix_config_t config = {.num_blocks = 64, .block_size = page, .eviction = "lru",
                                      .on_stored = heard_stored, .on_removed = heard_removed,
                                      .hook_context = &events};
        kvio_radix_t *tree = NULL;
        cr_assert_eq(kvio_radix_create(&config, &tree), KVIO_OK);
        insert_tokens(tree, TOKENS(1, 2, 3, 4, 5), NULL);
        size_t pages = 5 / page;
        cr_assert_eq(events.num_stored, pages, "page %u", page);
        cr_assert(!events.has_parent[0], "the first page has no parent");
        for (size_t i = 1; i < pages; i++) {
            cr_assert(events.has_parent[i]);
            cr_assert(kvio_hash_equal(events.parents[i], events.stored[i - 1]),
                      "page %zu chains to the one before", i);
            cr_assert(!kvio_hash_equal(events.stored[i], events.stored[i - 1]));
        }
        /* A continuation stores only its new pages, the first chained to
         * the last page present. */
        insert_tokens(tree, TOKENS(1, 2, 3, 4, 5, 6, 7), NULL);
        cr_assert_eq(events.num_stored, 7 / page);
        cr_assert(kvio_hash_equal(events.parents[pages], events.stored[pages - 1]));
        size_t evicted;
        kvio_radix_evict(tree, 100, &evicted);
        cr_assert_eq(events.num_removed, 7 / page, "page %u", page);
        for (size_t i = 0; i < events.num_removed; i++) {
            bool known = false;
            for (size_t j = 0; j < events.num_stored; j++)
                known = known || kvio_hash_equal(events.removed[i], events.stored[j]);
            cr_assert(known, "a removed key was stored");
        }
        kvio_radix_destroy(tree);
    }
    /* test_hash_value_repeating_tokens: equal pages at different places
     * are different blocks. */
    radix_events_t events = {0};
    kvio_radix_config_t config = {.num_blocks = 8, .block_size = 2, .on_stored = heard_stored,
                                  .hook_context = &events};
    kvio_radix_t *tree = NULL;
    cr_assert_eq(kvio_radix_create(&config, &tree), KVIO_OK);
    insert_tokens(tree, TOKENS(1, 2, 1, 2), NULL);
    cr_assert_eq(events.num_stored, 2);
    cr_assert(!kvio_hash_equal(events.stored[0], events.stored[1]));
    cr_assert(kvio_hash_equal(events.parents[1], events.stored[0]));
    kvio_radix_destroy(tree);
}

/* Children are found through a map of (parent, first page key); two
 * first pages whose map keys collide (crafted here) switch the tree to
 * scanning siblings, and both stay found, as do their continuations. */
Test(radix, children_whose_map_keys_collide_are_still_found, .timeout = 10)
{
    kvio_radix_t *tree = make_tree(16, "lru");
    const uint64_t mix = 0x9e3779b97f4a7c15ull;
    kvio_hash_t first[2] = {{.low = 11, .high = 1}, {.low = 22, .high = 1}};
    kvio_hash_t other[2] = {{.low = 11 ^ 1 * mix ^ 5 * mix, .high = 5}, {.low = 33, .high = 5}};
    cr_assert_eq(first[0].low ^ first[0].high * mix, other[0].low ^ other[0].high * mix,
                 "the two first pages share a map key under the root");
    size_t present = 99;
    cr_assert_eq(kvio_radix_insert(tree, first, 2, &present), KVIO_OK);
    cr_assert_eq(kvio_radix_insert(tree, other, 2, &present), KVIO_OK);
    cr_expect_eq(present, 0);
    cr_expect_eq(kvio_radix_peek(tree, first, 2, NULL), 2);
    cr_expect_eq(kvio_radix_peek(tree, other, 2, NULL), 2);
    kvio_radix_node_t node;
    size_t matched;
    cr_assert_eq(kvio_radix_match(tree, other, 1, &node, &matched), KVIO_OK);
    cr_expect_eq(matched, 1, "a split under the scanned root");
    cr_expect_eq(kvio_radix_peek(tree, other, 2, NULL), 2);
    cr_expect_eq(kvio_radix_peek(tree, first, 2, NULL), 2);
    kvio_radix_destroy(tree);
}

/* Where radix and hash-block caching differ: a prompt sharing 20 tokens
 * with a cached one. SGLang's token-granular tree (page size 1) serves all
 * 20; vLLM's hash index, blocks of 16, serves the one whole block. */
Test(radix, token_granular_tree_hits_a_partial_block_the_hash_index_misses, .timeout = 10)
{
    enum { SHARED = BLOCK + 4, LENGTH = 3 * BLOCK };
    uint32_t *first = token_run(0, LENGTH), *second = token_run(0, LENGTH);
    for (size_t i = SHARED; i < LENGTH; i++)
        second[i] += 1000;
    kvio_radix_t *tree = token_tree(4 * LENGTH, 1);
    insert_tokens(tree, first, LENGTH, NULL);
    cr_assert_eq(insert_tokens(tree, second, LENGTH, NULL), SHARED);
    cr_assert_eq(total_size(tree), 2 * LENGTH - SHARED, "the shared 20 tokens stored once");
    kvio_radix_destroy(tree);

    kvio_kvcache_t *cache = make_pool(16, KVIO_FREE_ORDER_APPEND, true);
    kvio_kvreq_t *a = request(cache, first, LENGTH);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, LENGTH, NULL), KVIO_OK);
    kvio_kvcache_free(cache, a);
    kvio_kvreq_t *b = request(cache, second, LENGTH);
    cr_assert_eq(kvio_kvcache_lookup(cache, b), BLOCK, "whole blocks only");
    kvio_kvreq_destroy(b);
    kvio_kvreq_destroy(a);
    kvio_kvcache_destroy(cache);
    free(first);
    free(second);
}

/* vLLM's reset of the prefix cache: every hash leaves the index, free blocks
 * keep their place in the free queue, a held block stays with its request
 * but is hit no more (and returns unhashed); a hit on a block cached in an
 * earlier epoch counts as stale. */
Test(kvcache, reset_prefix_drops_every_hash_and_keeps_the_queue, .timeout = 10)
{
    kvio_kvcache_t *cache = make_pool(11, KVIO_FREE_ORDER_APPEND, true);
    uint32_t *a_tokens = token_run(0, 3 * BLOCK), *b_tokens = token_run(1000, 3 * BLOCK);
    kvio_kvreq_t *a = request(cache, a_tokens, 3 * BLOCK);
    kvio_kvreq_t *b = request(cache, b_tokens, 3 * BLOCK);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 3 * BLOCK, NULL), KVIO_OK);
    cr_assert_eq(kvio_kvcache_allocate(cache, b, 3 * BLOCK, NULL), KVIO_OK);
    kvio_kvcache_free(cache, a); /* a's blocks 1-3 are free and cached; b holds 4-6 */
    uint32_t queue_before[16], queue_after[16];
    size_t before, after;
    kvio_kvcache_free_queue(cache, 16, queue_before, &before);
    /* Epoch 1 before the reset: a hit now on epoch-0 blocks would be stale. */
    kvio_kvcache_set_epoch(cache, 1);
    cr_assert_eq(kvio_kvcache_reset_prefix(cache, NULL, NULL), 6);
    kvio_kvcache_free_queue(cache, 16, queue_after, &after);
    cr_assert_eq(after, before);
    cr_assert_arr_eq(queue_after, queue_before, before * sizeof(uint32_t));
    kvio_hash_t hash;
    for (uint32_t block = 1; block <= 6; block++)
        cr_assert_eq(kvio_kvcache_block_hash(cache, block, &hash), KVIO_ERR_NOT_FOUND,
                     "block %u kept its hash", block);
    kvio_kvreq_t *again_a = request(cache, a_tokens, 3 * BLOCK);
    kvio_kvreq_t *again_b = request(cache, b_tokens, 3 * BLOCK);
    cr_assert_eq(kvio_kvcache_lookup(cache, again_a), 0);
    cr_assert_eq(kvio_kvcache_lookup(cache, again_b), 0, "a held block was hit after a reset");
    /* Cached again in epoch 1, then hit: not stale. */
    cr_assert_eq(kvio_kvcache_allocate(cache, again_a, 3 * BLOCK, NULL), KVIO_OK);
    kvio_kvcache_free(cache, again_a);
    kvio_kvreq_t *third = request(cache, a_tokens, 3 * BLOCK);
    size_t hits = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, third, 3 * BLOCK, &hits), KVIO_OK);
    cr_assert_eq(hits, 2 * BLOCK);
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(cache, &metrics);
    cr_assert_eq(metrics.prefix_stale_hits_tokens, 0);
    cr_assert_eq(metrics.prefix_resets, 1);
    cr_assert_eq(metrics.prefix_reset_blocks, 6);
    kvio_kvreq_destroy(third);
    kvio_kvreq_destroy(again_a);
    kvio_kvreq_destroy(again_b);
    kvio_kvreq_destroy(b);
    kvio_kvreq_destroy(a);
    kvio_kvcache_destroy(cache);
    free(a_tokens);
    free(b_tokens);
}

/* ---- index radix: only leaves are evicted ------------------------------- */

/* The hashes of a chain whose first shared blocks are common content and
 * the rest its branch's, each chained on its parent as real block hashes
 * are: requests over (branch, shared) pairs form a tree of prefixes. */
static void chain_of(uint32_t branch, uint32_t shared, uint32_t length, kvio_hash_t *hashes)
{
    uint64_t parent = 7;
    for (uint32_t i = 0; i < length; i++) {
        uint64_t content = i < shared ? 1000 + i : (uint64_t)branch << 20 | i;
        parent = (parent ^ content) * 0x9e3779b97f4a7c15ull + i;
        hashes[i] = (kvio_hash_t){.low = parent, .high = parent >> 17 | 1};
    }
}

/* Some block of the pool holds hash (asked of each block: a lookup starts
 * at a chain's first block, and the radix tree at its root). */
static bool cached(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    kvio_hash_t held;
    for (uint32_t block = 1; block < 41; block++)
        if (kvio_kvcache_block_hash(cache, block, &held) == KVIO_OK && kvio_hash_equal(held, hash))
            return true;
    return false;
}

/* Replays requests over a tree of prefixes (each done before the next) and
 * counts the times a chain held a cached block whose parent was gone (an
 * orphan: unreachable by any prefix lookup, yet holding a block). */
static size_t orphans_after_replay(const char *policy, kvio_kvcache_index_t index)
{
    kvio_kvcache_config_t config = {.num_blocks = 41, .block_size = BLOCK,
                                    .enable_prefix_caching = true, .eviction = policy,
                                    .index = index};
    kvio_kvcache_t *cache = NULL;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
    uint64_t state = 12345;
    size_t orphans = 0;
    kvio_hash_t hashes[16];
    for (int step = 0; step < 1500; step++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t branch = (uint32_t)(state >> 33) % 24;
        uint32_t shared = (uint32_t)(state >> 40) % 8;
        uint32_t length = 4 + (uint32_t)(state >> 50) % 12;
        chain_of(branch, shared, length, hashes);
        kvio_kvreq_t *req = NULL;
        cr_assert_eq(kvio_kvreq_create_hashes(cache, hashes, length, length * BLOCK + 1, &req),
                     KVIO_OK);
        cr_assert_eq(kvio_kvcache_allocate(cache, req, length * BLOCK + 1, NULL), KVIO_OK);
        kvio_kvreq_destroy(req);
        for (uint32_t b = 0; b < 24; b++) {
            for (uint32_t common = 0; common < 8; common++) {
                chain_of(b, common, 16, hashes);
                for (uint32_t i = 1; i < 16; i++)
                    orphans += cached(cache, hashes[i]) && !cached(cache, hashes[i - 1]);
            }
        }
    }
    kvio_kvcache_destroy(cache);
    return orphans;
}

/* #21: serve.kvcache.index radix is SGLang's rule: a block is evicted only
 * once no cached block chains from it, so the cache never holds a block no
 * lookup can reach, whatever the policy. The hash index (vLLM) evicts any
 * free cached block in the policy's order: under fifo or lfu an early
 * prefix goes while its continuations stay. */
Test(kvcache, the_radix_index_evicts_only_leaves_and_the_hash_index_leaves_orphans,
     .timeout = 30)
{
    for (size_t p = 0; p < kvio_evictions.count; p++)
        cr_expect_eq(orphans_after_replay(kvio_evictions.plugins[p]->name,
                                          KVIO_KVCACHE_INDEX_RADIX), 0,
                     "radix under %s", kvio_evictions.plugins[p]->name);
    cr_expect_gt(orphans_after_replay("fifo", KVIO_KVCACHE_INDEX_HASH), 0);
    cr_expect_gt(orphans_after_replay("lfu", KVIO_KVCACHE_INDEX_HASH), 0);
}

/* Resident memory of this process, from /proc/self/statm. */
static uint64_t resident_bytes(void)
{
    unsigned long long size = 0, resident = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    cr_assert_not_null(statm);
    cr_assert_eq(fscanf(statm, "%llu %llu", &size, &resident), 2);
    fclose(statm);
    return resident * 4096ull;
}

/* A pool costs what its blocks' use touches: four million blocks (about
 * 300 MB of records, ring and index when all are used) add a few MB while a
 * request takes its blocks, hashes them, frees them and a second one hits
 * them; the free queue is the same as a pool that was written whole: blocks
 * in order, the freed ones at its tail. */
Test(kvcache, a_pool_never_filled_costs_what_it_uses, .timeout = 30)
{
    uint64_t before = resident_bytes();
    kvio_kvcache_t *cache = make_pool(4u << 20, KVIO_FREE_ORDER_APPEND, true);
    cr_expect_eq(kvio_kvcache_num_free_blocks(cache), (4u << 20) - 1);
    uint32_t *tokens = token_run(1, 10 * BLOCK);
    kvio_kvreq_t *first = request(cache, tokens, 10 * BLOCK);
    size_t hit = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 10 * BLOCK, &hit), KVIO_OK);
    assert_blocks(first, (const uint32_t[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10);
    kvio_kvcache_free(cache, first);
    kvio_kvreq_t *second = request(cache, tokens, 10 * BLOCK);
    cr_assert_eq(kvio_kvcache_allocate(cache, second, 10 * BLOCK, &hit), KVIO_OK);
    cr_expect_eq(hit, 9 * BLOCK, "the freed blocks' prefix is found again");
    uint64_t grown = resident_bytes() - before;
    cr_expect_lt(grown, 24u << 20, "%llu bytes resident for a pool of 4M blocks",
                 (unsigned long long)grown);
    cr_expect_gt(kvio_kvcache_footprint(4u << 20, KVIO_KVCACHE_INDEX_HASH, UINT64_MAX),
                 200u << 20, "the whole pool's footprint");
    cr_expect_lt(kvio_kvcache_footprint(4u << 20, KVIO_KVCACHE_INDEX_HASH, 20),
                 kvio_kvcache_footprint(4u << 20, KVIO_KVCACHE_INDEX_HASH, UINT64_MAX) / 2);
    kvio_kvcache_free(cache, second);
    uint32_t queue[4];
    size_t length;
    kvio_kvcache_free_queue(cache, 4, queue, &length);
    cr_expect_eq(length, (4u << 20) - 1);
    /* Block 11 went to the second request (its last block is computed
     * again); the untouched blocks from 12 on come first. */
    cr_expect(queue[0] == 12 && queue[1] == 13, "untouched blocks first: %u %u", queue[0],
              queue[1]);
    kvio_kvreq_destroy(second);
    kvio_kvreq_destroy(first);
    free(tokens);
    kvio_kvcache_destroy(cache);
}

/* ---- index radix: the engine's pool under SGLang's tree ----------------- */

static kvio_kvcache_t *radix_pool(uint32_t num_blocks, const char *policy,
                                  kvio_kvcache_index_t index)
{
    kvio_kvcache_config_t config = {.num_blocks = num_blocks, .block_size = BLOCK,
                                    .enable_prefix_caching = true, .eviction = policy,
                                    .index = index};
    kvio_kvcache_t *cache = NULL;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
    return cache;
}

/* A request of the chain's first length blocks and one token more. */
static kvio_kvreq_t *chain_request(kvio_kvcache_t *cache, uint32_t branch, uint32_t shared,
                                   uint32_t length)
{
    kvio_hash_t hashes[16];
    chain_of(branch, shared, length, hashes);
    kvio_kvreq_t *req = NULL;
    cr_assert_eq(kvio_kvreq_create_hashes(cache, hashes, length, length * BLOCK + 1, &req),
                 KVIO_OK);
    return req;
}

/* Allocates a whole chain request and frees it; returns its hit tokens. */
static size_t run_chain(kvio_kvcache_t *cache, uint32_t branch, uint32_t shared, uint32_t length)
{
    kvio_kvreq_t *req = chain_request(cache, branch, shared, length);
    size_t hits = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, req, length * BLOCK + 1, &hits), KVIO_OK);
    kvio_kvreq_destroy(req);
    return hits;
}

/* The granularity of the engine's radix index: the pool's block, SGLang's
 * paged RadixCache with page_size = block_size (its _key_match_paged and
 * page-aligned keys), so a prompt sharing 40 tokens with a cached one hits
 * 32 under both indexes at blocks of 16; a pool of 1-token blocks is
 * SGLang's default page size 1 and hits all 40. */
Test(kvcache_radix, the_engine_index_matches_whole_blocks_as_sglang_paged, .timeout = 10)
{
    enum { SHARED = 2 * BLOCK + 8, LENGTH = 4 * BLOCK };
    uint32_t *first = token_run(0, LENGTH), *second = token_run(0, LENGTH);
    for (size_t i = SHARED; i < LENGTH; i++)
        second[i] += 1000;
    for (uint32_t block_size = BLOCK; block_size >= 1; block_size -= BLOCK - 1) {
        for (int index = 0; index < 2; index++) {
            kvio_kvcache_config_t config = {.num_blocks = 400, .block_size = block_size,
                                            .enable_prefix_caching = true, .index = index};
            kvio_kvcache_t *cache = NULL;
            cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
            kvio_kvreq_t *a = request(cache, first, LENGTH), *b = request(cache, second, LENGTH);
            cr_assert_eq(kvio_kvcache_allocate(cache, a, LENGTH, NULL), KVIO_OK);
            kvio_kvcache_free(cache, a);
            size_t hits = 0;
            cr_assert_eq(kvio_kvcache_allocate(cache, b, LENGTH, &hits), KVIO_OK);
            cr_expect_eq(hits, block_size == 1 ? SHARED : 2 * BLOCK,
                         "index %d, blocks of %u: %zu", index, block_size, hits);
            kvio_kvreq_destroy(a);
            kvio_kvreq_destroy(b);
            kvio_kvcache_destroy(cache);
        }
        if (block_size == 1)
            break;
    }
    free(first);
    free(second);
}

/* Where the engine's radix and hash indexes differ: two requests share a
 * first block P (A = P a1, B = P b1), then a new request needs two cached
 * blocks evicted. Under fifo the hash index takes the oldest free blocks,
 * a1 and P, and a later request on P misses; the tree takes only leaves
 * (a1, then b1), keeps P, and the request hits it. */
Test(kvcache_radix, a_shared_prefix_the_hash_index_evicts_is_hit_under_radix, .timeout = 10)
{
    for (int index = 0; index < 2; index++) {
        kvio_kvcache_t *cache = radix_pool(5, "fifo", index); /* 4 usable blocks */
        cr_assert_eq(run_chain(cache, 1, 1, 2), 0);          /* A = P a1 (+1 token) */
        cr_assert_eq(run_chain(cache, 2, 1, 2), BLOCK);      /* B = P b1: hits P */
        cr_assert_eq(run_chain(cache, 3, 0, 2), 0);          /* fresh: evicts two */
        kvio_kvcache_metrics_t metrics;
        kvio_kvcache_get_metrics(cache, &metrics);
        cr_expect_eq(metrics.evictions, 2, "index %d", index);
        size_t hits = run_chain(cache, 4, 1, 2); /* C = P c1 */
        cr_expect_eq(hits, index == KVIO_KVCACHE_INDEX_RADIX ? BLOCK : 0, "index %d: %zu",
                     index, hits);
        kvio_kvcache_destroy(cache);
    }
}

/* A running request locks its path (SGLang's inc_lock_ref): its blocks are
 * the tree's protected tokens and no eviction takes them; freed, they are
 * evictable, and a request that needs one of them evicts their leaf whole
 * (SGLang's evict frees a node at a time). */
Test(kvcache_radix, a_running_request_locks_its_path, .timeout = 10)
{
    kvio_kvcache_t *cache = radix_pool(7, "lru", KVIO_KVCACHE_INDEX_RADIX); /* 6 usable */
    const kvio_radix_t *tree = kvio_kvcache_radix(cache);
    cr_assert_not_null(tree);
    kvio_kvreq_t *a = chain_request(cache, 1, 0, 3);
    cr_assert_eq(kvio_kvcache_allocate(cache, a, 3 * BLOCK + 1, NULL), KVIO_OK);
    cr_expect_eq(kvio_radix_protected_tokens(tree), 3 * BLOCK);
    cr_expect_eq(kvio_radix_evictable_tokens(tree), 0);
    /* Two blocks are free; three more would need a's, which are locked. */
    kvio_kvreq_t *b = chain_request(cache, 2, 0, 2);
    cr_expect_eq(kvio_kvcache_allocate(cache, b, 2 * BLOCK + 1, NULL), KVIO_ERR_NO_SPACE);
    kvio_kvreq_t *c = chain_request(cache, 3, 0, 1);
    cr_assert_eq(kvio_kvcache_allocate(cache, c, BLOCK + 1, NULL), KVIO_OK);
    kvio_kvcache_free(cache, a);
    cr_expect_eq(kvio_radix_protected_tokens(tree), BLOCK, "c's block");
    cr_expect_eq(kvio_radix_evictable_tokens(tree), 3 * BLOCK);
    /* d's two blocks: a's uncached last block, then one of a's three
     * cached ones: the tree evicts their leaf, all three. */
    kvio_kvreq_t *d = chain_request(cache, 4, 0, 1);
    cr_assert_eq(kvio_kvcache_allocate(cache, d, BLOCK + 1, NULL), KVIO_OK);
    kvio_kvcache_metrics_t metrics;
    kvio_kvcache_get_metrics(cache, &metrics);
    cr_expect_eq(metrics.evictions, 3, "the whole leaf: %llu",
                 (unsigned long long)metrics.evictions);
    cr_expect_eq(kvio_radix_num_nodes(tree), 2, "c's and d's");
    cr_expect_eq(kvio_kvcache_num_free_blocks(cache), 2);
    kvio_kvreq_t *again = chain_request(cache, 1, 0, 3);
    cr_expect_eq(kvio_kvcache_lookup(cache, again), 0);
    kvio_kvreq_destroy(again);
    kvio_kvreq_destroy(a);
    kvio_kvreq_destroy(b);
    kvio_kvreq_destroy(c);
    kvio_kvreq_destroy(d);
    kvio_kvcache_destroy(cache);
}

/* The same content cached twice (a chunked prefill overtaken by a request
 * that computed its whole prompt): the tree keeps the first block, and the
 * later request takes it in place of its own, which goes back uncached
 * (SGLang's cache_unfinished_req); every block comes back when both end. */
Test(kvcache_radix, a_page_cached_meanwhile_is_taken_from_the_tree, .timeout = 10)
{
    kvio_kvcache_t *cache = radix_pool(11, "lru", KVIO_KVCACHE_INDEX_RADIX);
    kvio_kvreq_t *chunked = chain_request(cache, 1, 0, 3);
    kvio_kvreq_t *whole = chain_request(cache, 1, 0, 3);
    cr_assert_eq(kvio_kvcache_allocate(cache, chunked, BLOCK, NULL), KVIO_OK);
    size_t hits = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, whole, 3 * BLOCK + 1, &hits), KVIO_OK);
    cr_assert_eq(hits, BLOCK, "the chunk's block");
    cr_assert_eq(kvio_kvcache_allocate(cache, chunked, 3 * BLOCK + 1, NULL), KVIO_OK);
    const uint32_t *mine, *theirs;
    size_t count_mine, count_theirs;
    kvio_kvreq_blocks(chunked, &mine, &count_mine);
    kvio_kvreq_blocks(whole, &theirs, &count_theirs);
    cr_assert_eq(count_mine, 4);
    for (size_t i = 0; i < 3; i++) {
        cr_expect_eq(mine[i], theirs[i], "page %zu is the tree's block", i);
        cr_expect_eq(kvio_kvcache_block_refcount(cache, mine[i]), 2);
    }
    cr_expect_neq(mine[3], theirs[3], "the partial last blocks are each their own");
    cr_expect_eq(kvio_kvcache_num_free_blocks(cache), 10 - 5);
    kvio_kvreq_destroy(chunked);
    kvio_kvreq_destroy(whole);
    cr_expect_eq(kvio_kvcache_num_free_blocks(cache), 10);
    cr_expect_eq(kvio_radix_protected_tokens(kvio_kvcache_radix(cache)), 0);
    cr_expect_eq(run_chain(cache, 1, 0, 3), 3 * BLOCK);
    kvio_kvcache_destroy(cache);
}

/* A prefix reset empties the tree; a request holding a lock from before
 * lets go of nothing, and the pool caches again. */
Test(kvcache_radix, a_prefix_reset_empties_the_tree, .timeout = 10)
{
    kvio_kvcache_t *cache = radix_pool(11, "lru", KVIO_KVCACHE_INDEX_RADIX);
    const kvio_radix_t *tree = kvio_kvcache_radix(cache);
    kvio_kvreq_t *held = chain_request(cache, 1, 0, 2);
    cr_assert_eq(kvio_kvcache_allocate(cache, held, 2 * BLOCK + 1, NULL), KVIO_OK);
    cr_assert_eq(run_chain(cache, 2, 0, 2), 0);
    cr_assert_eq(kvio_kvcache_reset_prefix(cache, NULL, NULL), 4);
    cr_expect_eq(kvio_radix_num_nodes(tree), 0);
    cr_expect_eq(kvio_radix_protected_tokens(tree) + kvio_radix_evictable_tokens(tree), 0);
    kvio_kvreq_destroy(held);
    cr_expect_eq(kvio_radix_protected_tokens(tree), 0);
    cr_expect_eq(run_chain(cache, 2, 0, 2), 0);
    cr_expect_eq(run_chain(cache, 2, 0, 2), 2 * BLOCK);
    cr_expect_eq(kvio_kvcache_num_free_blocks(cache), 10);
    kvio_kvcache_destroy(cache);
}

/* What lpm and dfs-weight read under radix: the pool's lookup is the
 * tree's match (blocks evicted from a leaf are gone from it at once) and
 * changes nothing; the allocation that follows takes the path, splitting
 * the node the match ends in, as SGLang's match_prefix. */
Test(kvcache_radix, a_lookup_is_the_trees_match_and_changes_nothing, .timeout = 10)
{
    kvio_kvcache_t *cache = radix_pool(11, "lru", KVIO_KVCACHE_INDEX_RADIX);
    const kvio_radix_t *tree = kvio_kvcache_radix(cache);
    cr_assert_eq(run_chain(cache, 1, 4, 4), 0); /* one node of 4 pages */
    cr_assert_eq(kvio_radix_num_nodes(tree), 1);
    kvio_kvreq_t *branch = chain_request(cache, 2, 2, 4); /* shares the first 2 */
    cr_expect_eq(kvio_kvcache_lookup(cache, branch), 2 * BLOCK);
    kvio_hash_t hashes[16];
    chain_of(2, 2, 4, hashes);
    cr_expect_eq(kvio_radix_peek(tree, hashes, 4, NULL), 2);
    cr_expect_eq(kvio_kvcache_lookup_hashes(cache, hashes, 4, 4 * BLOCK + 1), 2 * BLOCK);
    cr_expect_eq(kvio_radix_num_nodes(tree), 1, "a lookup splits nothing");
    size_t hits = 0;
    cr_assert_eq(kvio_kvcache_allocate(cache, branch, 4 * BLOCK + 1, &hits), KVIO_OK);
    cr_expect_eq(hits, 2 * BLOCK);
    cr_expect_eq(kvio_radix_num_nodes(tree), 3, "the shared 2 pages, each branch's 2");
    kvio_kvreq_destroy(branch);
    kvio_kvcache_destroy(cache);
}
