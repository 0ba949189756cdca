/* Tests for sliding-window KV cache groups (kvcache/window.c): cases ported
 * from vLLM's tests of its hybrid KV cache manager, each naming its test
 * (tests/v1/core/test_single_type_kv_cache_manager.py and
 * test_prefix_caching.py). */
#include <criterion/criterion.h>
#include <string.h>

#include "kvio/window.h"

/* A group's cache as a string: 'T' cached, 'F' not, one letter a block. */
static bool letter_cached(const void *context, uint32_t index)
{
    return ((const char *)context)[index] == 'T';
}

/* vLLM test_sliding_window_possible_cached_prefix: block 2, window 4 (a hit
 * must end with 2 cached blocks, or be the blocks at the start). */
Test(window, a_hit_ends_with_the_blocks_of_one_window)
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
Test(window, blocks_wholly_past_the_window_are_freed)
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
Test(window, a_hit_s_evictable_blocks_count_and_its_nulls_do_not)
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

/* vLLM test_prefill_hybrid_model: block 16, window 21 (2 blocks), 3 full
 * blocks cached in every group, then blocks evicted. */
Test(window, the_hybrid_hit_is_what_both_groups_can_serve)
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
        cr_assert_eq(kvio_hybrid_hit(3, 16, 21, full_cached, window_cached, &cases[i].cached),
                     cases[i].hit, "evicting %s", cases[i].evicted);
}
