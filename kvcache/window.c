/* Sliding-window KV cache groups (kvio/window.h): the rules of vLLM's
 * SlidingWindowManager and HybridKVCacheCoordinator, as pure functions over
 * a group's cached blocks, for the engine's and cachesim's tables. */
#include "kvio/window.h"

uint32_t kvio_window_hit_run(uint32_t block_size, uint32_t window)
{
    if (block_size == 0 || window <= 1)
        return 1;
    return (window - 1 + block_size - 1) / block_size;
}

uint32_t kvio_window_hit(uint32_t max_blocks, uint32_t block_size, uint32_t window,
                         kvio_block_cached_fn cached, const void *context)
{
    uint32_t needed = kvio_window_hit_run(block_size, window);
    uint32_t run = 0;
    for (uint32_t i = max_blocks; i-- > 0;) {
        if (!cached(context, i)) {
            run = 0;
            continue;
        }
        if (++run >= needed)
            return i + run; /* the hit ends with the run; before it, nulls */
    }
    return run; /* a run at the start, shorter than the window's */
}

uint32_t kvio_window_skipped_blocks(uint64_t computed_tokens, uint32_t block_size,
                                    uint32_t window)
{
    if (block_size == 0 || computed_tokens + 1 <= window)
        return 0;
    uint64_t first_useful_token = computed_tokens + 1 - window;
    return (uint32_t)(first_useful_token / block_size);
}

uint32_t kvio_window_blocks_to_allocate(uint64_t num_tokens, uint32_t block_size,
                                        uint32_t request_blocks, uint32_t computed_blocks,
                                        uint32_t evictable_blocks)
{
    uint64_t required = block_size ? (num_tokens + block_size - 1) / block_size : 0;
    uint64_t held = (uint64_t)request_blocks + computed_blocks;
    uint64_t fresh = required > held ? required - held : 0;
    return (uint32_t)(fresh + evictable_blocks);
}

uint32_t kvio_hybrid_hit(uint32_t max_blocks, uint32_t block_size, uint32_t window,
                         kvio_block_cached_fn full_cached, kvio_block_cached_fn window_cached,
                         const void *context)
{
    uint32_t full = 0;
    while (full < max_blocks && full_cached(context, full))
        full++;
    return kvio_window_hit(full, block_size, window, window_cached, context);
}
