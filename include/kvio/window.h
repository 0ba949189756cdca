/* Sliding-window KV cache groups as vLLM's hybrid KV cache manager keeps
 * them (vllm/v1/core/single_type_kv_cache_manager.py, SlidingWindowManager;
 * kv_cache_coordinator.py, HybridKVCacheCoordinator): a model whose layers
 * alternate full and sliding-window attention (gpt-oss) has one group of
 * each, with their own block tables from one pool. A window group needs only
 * the blocks of the last window of tokens: those before are freed as the
 * request goes (null in its table), and a prefix hit needs only the blocks
 * of the window that ends where the hit ends. The hit of both groups is the
 * longest length both can serve. */
#ifndef KVIO_WINDOW_H
#define KVIO_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

/* Whether block index of a request is cached in a group's cache. */
typedef bool (*kvio_block_cached_fn)(const void *context, uint32_t index);

/* Consecutive cached blocks a window group's hit must end with: the window
 * less its own token, in blocks, rounded up (vLLM's
 * sliding_window_contiguous_blocks). */
uint32_t kvio_window_hit_run(uint32_t block_size, uint32_t window);

/* The window group's longest hit among the first max_blocks blocks, in
 * blocks: scanning from the end, where the first run of
 * kvio_window_hit_run cached blocks ends; without one, the cached blocks at
 * the very start (a hit the window never outgrew). */
uint32_t kvio_window_hit(uint32_t max_blocks, uint32_t block_size, uint32_t window,
                         kvio_block_cached_fn cached, const void *context);

/* Leading blocks a window group frees once computed_tokens are computed:
 * those whose every token is past the window of the next token. */
uint32_t kvio_window_skipped_blocks(uint64_t computed_tokens, uint32_t block_size,
                                    uint32_t window);

/* Blocks a window group takes from the pool to hold num_tokens: the blocks
 * that cover them, less the request's own and the hit's (computed_blocks,
 * skipped ones included: they are null and cost nothing), plus the hit's
 * cached blocks no one holds (evictable_blocks), which leave the free queue
 * (vLLM's get_num_blocks_to_allocate). */
uint32_t kvio_window_blocks_to_allocate(uint64_t num_tokens, uint32_t block_size,
                                        uint32_t request_blocks, uint32_t computed_blocks,
                                        uint32_t evictable_blocks);

/* The hit of a full-attention group and a window group together, in
 * blocks: the full group's longest cached prefix, then the window group's
 * hit within it (vLLM checks the full group first; its hit only shrinks). */
uint32_t kvio_hybrid_hit(uint32_t max_blocks, uint32_t block_size, uint32_t window,
                         kvio_block_cached_fn full_cached, kvio_block_cached_fn window_cached,
                         const void *context);

#endif
