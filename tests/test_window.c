/* Tests for sliding-window KV cache groups (kvcache/window.c): cases ported
 * from vLLM's tests of its hybrid KV cache manager, each naming its test
 * (tests/v1/core/test_single_type_kv_cache_manager.py and
 * test_prefix_caching.py). */
#include <criterion/criterion.h>
#include <string.h>

#include "kvio/kvcache.h"
#include "kvio/window.h"

/* A group's cache as a string: 'T' cached, 'F' not, one letter a block. */
static bool letter_cached(const void *context, uint32_t index)
{
    return ((const char *)context)[index] == 'T';
}

/* vLLM test_sliding_window_possible_cached_prefix: block 2, window 4 (a hit
 * must end with 2 cached blocks, or be the blocks at the start). */
Test(window, a_hit_ends_with_the_blocks_of_one_window, .timeout = 60)
{
    static const struct {
        const char *cached;
        uint32_t hit;
    } cases[] = {
        {"FFFFFFFFFF", 0}, {"T", 1}, {"TF", 1}, {"TT", 2}, {"TTF", 2}, {"TTT", 3},
        {"TTTF", 3}, {"TTFTFFTTFTTT", 12}, {"TTFTFFTTFFF", 8}, {"TTFTFFTTFFFT", 8},
    };
    cr_assert_eq(kvio_window_hit_run(2, 4), 2);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t blocks = (uint32_t)strlen(cases[i].cached);
        cr_assert_eq(kvio_window_hit(blocks, 2, 4, letter_cached, cases[i].cached), cases[i].hit,
                     "%s: %u blocks, want %u", cases[i].cached,
                     kvio_window_hit(blocks, 2, 4, letter_cached, cases[i].cached), cases[i].hit);
    }
}

/* vLLM test_sliding_window_remove_skipped_blocks: block 2, window 4. */
Test(window, blocks_wholly_past_the_window_are_freed, .timeout = 60)
{
    static const struct {
        uint64_t computed;
        uint32_t skipped;
    } cases[] = {
        {0, 0}, /* nothing computed */
        {4, 0}, /* token 0 is out, but block 0 also holds token 1 */
        {5, 1}, /* tokens 0 and 1 are out: block 0 goes */
        {6, 1}, /* block 1 still holds token 3 */
        {7, 2}, /* tokens 0-3 are out */
        {11, 4}, /* tokens 0-7 are out */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_eq(kvio_window_skipped_blocks(cases[i].computed, 2, 4), cases[i].skipped,
                     "%llu tokens", (unsigned long long)cases[i].computed);
}

/* vLLM test_get_num_blocks_to_allocate and
 * test_evictable_cached_blocks_not_double_allocated: a hit's cached blocks
 * that no one holds leave the free queue too; its null (skipped) blocks
 * cost nothing. */
Test(window, a_hit_s_evictable_blocks_count_and_its_nulls_do_not, .timeout = 60)
{
    /* 20 blocks of 2 tokens; a hit of 10 cached blocks, all evictable. */
    cr_assert_eq(kvio_window_blocks_to_allocate(40, 2, 0, 10, 10), 20);
    /* A hit of 5 null blocks and 5 cached, evictable ones. */
    cr_assert_eq(kvio_window_blocks_to_allocate(40, 2, 0, 10, 5), 15);
    /* 2 blocks for 4 tokens, one of them an evictable hit. */
    cr_assert_eq(kvio_window_blocks_to_allocate(4, 2, 0, 1, 1), 2);
    /* Blocks the request holds already are not taken again. */
    cr_assert_eq(kvio_window_blocks_to_allocate(8, 2, 3, 0, 0), 1);
}

/* Two groups' caches side by side: full attention, then the window groups
 * (a block counts for them when every window group has it). */
typedef struct groups {
    const char *full, *window;
} groups_t;

static bool full_cached(const void *context, uint32_t index)
{
    return ((const groups_t *)context)->full[index] == 'T';
}

static bool window_cached(const void *context, uint32_t index)
{
    return ((const groups_t *)context)->window[index] == 'T';
}

/* vLLM test_prefill_hybrid_model: block 16, window 32 (a hit ends with 2
 * blocks), 3 full blocks cached in every group, then blocks evicted. */
Test(window, the_hybrid_hit_is_what_both_groups_can_serve, .timeout = 60)
{
    static const struct {
        const char *evicted;
        groups_t cached;
        uint32_t hit;
    } cases[] = {
        {"the window groups' first block", {"TTT", "FTT"}, 3},
        {"full attention's first block", {"FTT", "TTT"}, 0},
        {"the last block of every group", {"TTF", "TTF"}, 2},
        {"full attention's last block", {"TTF", "TTT"}, 2},
        {"a window group's last block", {"TTT", "TTF"}, 2},
        {"full's last, the windows' first", {"TTF", "FTT"}, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_eq(kvio_hybrid_hit(3, 16, 32, full_cached, window_cached, &cases[i].cached),
                     cases[i].hit, "evicting %s", cases[i].evicted);
}

/* ---- the pool's hybrid groups (kvio_kvcache_config_t.window_tokens) ---- */

static kvio_kvcache_t *hybrid_pool(uint32_t num_blocks, uint32_t block_size, uint32_t window)
{
    kvio_kvcache_config_t config = {.num_blocks = num_blocks, .block_size = block_size,
                                    .enable_prefix_caching = true, .eviction = "lru",
                                    .window_tokens = window};
    kvio_kvcache_t *cache = NULL;
    cr_assert_eq(kvio_kvcache_create(&config, &cache), KVIO_OK);
    return cache;
}

static kvio_kvreq_t *token_request(kvio_kvcache_t *cache, const uint32_t *tokens, size_t count)
{
    kvio_kvreq_t *req = NULL;
    cr_assert_eq(kvio_kvreq_create_tokens(cache, tokens, count, NULL, 0, &req), KVIO_OK);
    return req;
}

/* One group's table against a list of ids (0: the null block). */
static void assert_table(const uint32_t *ids, size_t count, const uint32_t *expected,
                         size_t expected_count, const char *group)
{
    cr_assert_eq(count, expected_count, "%s table: %zu blocks, want %zu", group, count,
                 expected_count);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(ids[i], expected[i], "%s table[%zu] = %u, want %u", group, i, ids[i],
                     expected[i]);
}

static void assert_tables(const kvio_kvreq_t *req, const uint32_t *full, size_t num_full,
                          const uint32_t *window, size_t num_window)
{
    const uint32_t *ids;
    size_t count;
    kvio_kvreq_blocks(req, &ids, &count);
    assert_table(ids, count, full, num_full, "full");
    kvio_kvreq_window_blocks(req, &ids, &count);
    assert_table(ids, count, window, num_window, "window");
}

/* vLLM test_prefill_hybrid_model with one window group: block 16, window
 * 32, 21 blocks. Request 0 (3 full blocks and 7 tokens) takes blocks 1-4
 * for full attention and 5-8 for the window; request 1 (the same 3 blocks
 * and 5 other tokens) hits all 48 tokens: full attention's three blocks,
 * the window's last two (its first is the null block), each held twice,
 * and one new block per group. */
Test(window, a_hybrid_pool_gives_each_group_a_table_and_hits_the_window_s_last_blocks,
     .timeout = 60)
{
    kvio_kvcache_t *cache = hybrid_pool(21, 16, 32);
    uint32_t tokens[55];
    for (uint32_t i = 0; i < 55; i++)
        tokens[i] = i < 48 ? i / 16 : 3;
    kvio_kvreq_t *first = token_request(cache, tokens, 55);
    cr_assert_eq(kvio_kvcache_lookup(cache, first), 0);
    size_t hit = 99;
    cr_assert_eq(kvio_kvcache_allocate(cache, first, 55, &hit), KVIO_OK);
    cr_assert_eq(hit, 0);
    assert_tables(first, (uint32_t[]){1, 2, 3, 4}, 4, (uint32_t[]){5, 6, 7, 8}, 4);
    cr_assert_eq(kvio_kvreq_held_blocks(first), 8);

    tokens[48] = 4; /* request 1 parts from request 0 after 48 tokens */
    kvio_kvreq_t *second = token_request(cache, tokens, 53);
    cr_assert_eq(kvio_kvcache_lookup(cache, second), 48);
    size_t blocks = 0;
    cr_assert_eq(kvio_kvcache_blocks_to_allocate(cache, second, 53, &blocks), KVIO_OK);
    cr_assert_eq(blocks, 2, "one new block per group; the hits are held already");
    cr_assert_eq(kvio_kvcache_allocate(cache, second, 53, &hit), KVIO_OK);
    cr_assert_eq(hit, 48);
    assert_tables(second, (uint32_t[]){1, 2, 3, 9}, 4, (uint32_t[]){0, 6, 7, 10}, 4);
    cr_assert_eq(kvio_kvreq_held_blocks(second), 7, "the null block is held by no one");
    for (uint32_t block = 1; block <= 10; block++) {
        uint32_t want = block == 4 || block == 5 || block == 8 ? 1
                        : block >= 9                           ? 1
                                                               : 2;
        cr_assert_eq(kvio_kvcache_block_refcount(cache, block), want, "block %u", block);
    }
    kvio_kvreq_destroy(second);
    kvio_kvreq_destroy(first);
    cr_assert_eq(kvio_kvcache_num_free_blocks(cache), 20);

    /* A prompt that shares only the first block hits it: a run at the
     * start, shorter than the window's. */
    tokens[16] = 9;
    kvio_kvreq_t *third = token_request(cache, tokens, 21);
    cr_assert_eq(kvio_kvcache_lookup(cache, third), 16);
    kvio_kvreq_destroy(third);
    kvio_kvcache_destroy(cache);
}

/* vLLM test_sliding_window_remove_skipped_blocks in the pool: block 2,
 * window 4, a request of 11 blocks. Blocks leave the window group's table
 * as the tokens they hold leave the window; the full group keeps all; the
 * blocks freed together go to the free queue in reverse (the longer
 * sequence is evicted first). */
Test(window, a_hybrid_pool_frees_the_window_s_blocks_as_they_leave_it, .timeout = 60)
{
    kvio_kvcache_t *cache = hybrid_pool(64, 2, 4);
    uint32_t tokens[22];
    for (uint32_t i = 0; i < 22; i++)
        tokens[i] = 100 + i;
    kvio_kvreq_t *req = token_request(cache, tokens, 22);
    cr_assert_eq(kvio_kvcache_allocate(cache, req, 22, NULL), KVIO_OK);
    const uint32_t *ids;
    size_t count;
    kvio_kvreq_window_blocks(req, &ids, &count);
    uint32_t window[11];
    memcpy(window, ids, sizeof(window));
    static const struct {
        size_t computed, nulls;
    } steps[] = {{0, 0}, {4, 0}, {5, 1}, {6, 1}, {7, 2}, {11, 4}};
    uint32_t free_before = kvio_kvcache_num_free_blocks(cache);
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        kvio_kvcache_computed(cache, req, steps[s].computed);
        kvio_kvreq_window_blocks(req, &ids, &count);
        cr_assert_eq(count, 11);
        for (size_t i = 0; i < 11; i++)
            cr_assert_eq(ids[i], i < steps[s].nulls ? 0 : window[i],
                         "%zu tokens computed: window table[%zu] = %u", steps[s].computed, i,
                         ids[i]);
        cr_assert_eq(kvio_kvcache_num_free_blocks(cache), free_before + steps[s].nulls);
        cr_assert_eq(kvio_kvreq_held_blocks(req), 22 - steps[s].nulls);
    }
    uint32_t queue[64];
    size_t length = 0;
    kvio_kvcache_free_queue(cache, 64, queue, &length);
    cr_assert_geq(length, 4);
    /* The last two freed at 11 tokens: window block 3, then block 2. */
    cr_assert_eq(queue[length - 2], window[3]);
    cr_assert_eq(queue[length - 1], window[2]);
    kvio_kvreq_blocks(req, &ids, &count);
    cr_assert_eq(count, 11, "full attention keeps every block");
    kvio_kvreq_destroy(req);
    cr_assert_eq(kvio_kvcache_num_free_blocks(cache), 63);
    kvio_kvcache_destroy(cache);
}
