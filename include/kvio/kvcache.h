/* The KV-cache manager: a paged block pool with vLLM v1 semantics (null block
 * 0, free queue in eviction order, lazy eviction, reference counts, hash-chain
 * prefix index), an SGLang-style radix index, and pluggable eviction
 * policies. It knows blocks and tokens, not streams or engines; requests give
 * either token ids or precomputed block hashes. See kvcache/README.md. */
#ifndef KVIO_KVCACHE_H
#define KVIO_KVCACHE_H

#include "kvio/hash.h"
#include "kvio/plugin.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Eviction policies ------------------------------------------------- */

/* The eviction policies (listed in kvcache/evictions.c), by name: the
 * names serve.kvcache.eviction, kvio_kvcache_config_t.eviction,
 * kvio_radix_config_t.eviction and cachesim take. */
extern const kvio_registry_t kvio_evictions;

/* KVIO_OK when name is a registered policy; otherwise logs
 * "unknown eviction policy 'x' (known: lru, ...)" and returns
 * KVIO_ERR_NOT_FOUND. */
kvio_status_t kvio_evict_check_name(const char *name);

/* ---- Block pool with the hash-chain prefix index ------------------------ */

typedef struct kvio_kvcache kvio_kvcache_t;
typedef struct kvio_kvreq kvio_kvreq_t;
typedef struct kvio_radix kvio_radix_t;

/* Where freed blocks without a hash go in the free queue. */
typedef enum {
    KVIO_FREE_ORDER_APPEND = 0,           /* classic vLLM: every freed block at the tail */
    KVIO_FREE_ORDER_PREPEND_UNHASHED = 1, /* newer vLLM: unhashed ones at the head */
} kvio_free_order_t;

/* What a cached block may be evicted as. */
typedef enum {
    KVIO_KVCACHE_INDEX_HASH = 0,  /* vLLM: any free cached block, in the policy's order */
    KVIO_KVCACHE_INDEX_RADIX = 1, /* SGLang's RadixCache (kvio_radix_*) over the pool's
                                     blocks: whole-block (page) matches, running requests
                                     lock their paths, leaves evicted in the policy's order */
} kvio_kvcache_index_t;

typedef struct kvio_kvcache_config {
    uint32_t num_blocks;        /* including the null block 0; at least 2 */
    uint32_t block_size;        /* tokens per block; at least 1 */
    bool enable_prefix_caching; /* false: never a hit, blocks never hashed */
    kvio_free_order_t free_order;
    kvio_kvcache_index_t index;
    const char *eviction;       /* policy name; NULL means "lru" */
    /* Optional hooks for lower tiers (may be NULL): on_cached when a block
     * becomes full and enters the index (blocks[index] of its request's
     * block table, the blocks before it in the table too), on_evict when a cached block is
     * taken for reuse and its hash leaves the index (its bytes are still
     * intact during the call). A hybrid pool's hooks hear its full-attention
     * group's blocks only. */
    void (*on_cached)(void *context, const uint32_t *blocks, size_t index, kvio_hash_t hash);
    void (*on_evict)(void *context, uint32_t block_id, kvio_hash_t hash);
    void *hook_context;
    /* > 0: vLLM's hybrid groups (kvio/window.h) for a model whose layers
     * are half full attention, half a sliding window of this many tokens.
     * Every request has a table in each group, both from this pool (a block
     * holds one group's layers); a hit is what both groups can serve, and
     * the window group's blocks that leave the window are freed
     * (kvio_kvcache_computed). Takes the hash index. 0: one group. */
    uint32_t window_tokens;
} kvio_kvcache_config_t;

/* Prefix-cache and allocation counters, per run (never windowed). A
 * request's prompt is counted as a query once, on its first successful
 * allocation. */
typedef struct kvio_kvcache_metrics {
    uint64_t prefix_queries_tokens; /* prompt tokens looked up */
    uint64_t prefix_hits_tokens;    /* of which found cached */
    uint64_t prefix_queries_blocks; /* full prompt blocks looked up */
    uint64_t prefix_hits_blocks;
    uint64_t evictions;             /* cached blocks whose hash was dropped for reuse */
    uint64_t blocks_allocated;      /* new blocks taken from the free queue */
    uint64_t blocks_freed;          /* blocks whose reference count fell to 0 */
    uint64_t allocations_refused;   /* allocate calls answered "no space" */
    uint64_t prefix_stale_hits_tokens; /* of the hits, on blocks cached in an earlier epoch */
    uint64_t prefix_resets;         /* kvio_kvcache_reset_prefix calls */
    uint64_t prefix_reset_blocks;   /* hashes they dropped */
    double peak_usage;              /* highest usage seen, 0..1 */
} kvio_kvcache_metrics_t;

/* Bytes of memory a pool of num_blocks (the null block included) with this
 * index (kvio_kvcache_index_t) takes for its own records, index, free queue
 * and eviction state (no KV bytes: a simulate run's whole pool) when at most
 * used_blocks of them are ever allocated (UINT64_MAX: all). A new pool's
 * tables are zero pages the kernel maps as blocks are first used, so a pool
 * that is never filled costs what it uses. */
uint64_t kvio_kvcache_footprint(uint32_t num_blocks, int index, uint64_t used_blocks);

/* Creates a pool; the config is copied. Returns KVIO_ERR_INVALID for a bad
 * size, KVIO_ERR_NOT_FOUND for an unknown eviction policy. */
kvio_status_t kvio_kvcache_create(const kvio_kvcache_config_t *config,
                                  kvio_kvcache_t **cache_p);

/* Destroys the pool. Requests created on it must be destroyed first. */
void kvio_kvcache_destroy(kvio_kvcache_t *cache);

/* Blocks currently free. */
uint32_t kvio_kvcache_num_free_blocks(const kvio_kvcache_t *cache);

/* Usage = 1 - free / usable, in 0..1. */
double kvio_kvcache_usage(const kvio_kvcache_t *cache);

/* Copies the free queue, head (next to reuse) first, into ids_p (at most
 * max_ids entries); *num_ids_p is the queue's length. With a policy other
 * than lru, the queue holds the free blocks but the policy picks among the
 * cached ones. */
void kvio_kvcache_free_queue(const kvio_kvcache_t *cache, size_t max_ids, uint32_t *ids_p,
                             size_t *num_ids_p);

/* Reference count of a block (0 when free). */
uint32_t kvio_kvcache_block_refcount(const kvio_kvcache_t *cache, uint32_t block_id);

/* The block's hash: KVIO_OK and *hash_p, or KVIO_ERR_NOT_FOUND when the
 * block holds no hash (never full, or evicted). */
kvio_status_t kvio_kvcache_block_hash(const kvio_kvcache_t *cache, uint32_t block_id,
                                      kvio_hash_t *hash_p);

/* The pool's radix tree (index radix; NULL with the hash index): its
 * pages are the pool's cached blocks. For reading (totals, node shapes,
 * kvio_radix_peek); the pool alone changes it. */
const kvio_radix_t *kvio_kvcache_radix(const kvio_kvcache_t *cache);

/* Copies the counters. */
void kvio_kvcache_get_metrics(const kvio_kvcache_t *cache, kvio_kvcache_metrics_t *metrics_p);

/* A request with explicit token ids; the tokens and the salt (the first
 * block's extra key, may be NULL) are copied. Block hashes are computed as
 * blocks become full. */
kvio_status_t kvio_kvreq_create_tokens(kvio_kvcache_t *cache, const uint32_t *tokens,
                                       size_t num_tokens, const void *salt, size_t salt_len,
                                       kvio_kvreq_t **req_p);

/* A request of num_tokens tokens whose full blocks have precomputed hashes
 * (streams, traces): hashes[i] is block i's chained hash; num_hashes may be
 * less than the number of full blocks (those without one are never cached). */
kvio_status_t kvio_kvreq_create_hashes(kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                                       size_t num_hashes, size_t num_tokens,
                                       kvio_kvreq_t **req_p);

/* Like kvio_kvreq_create_hashes, but copies nothing: hashes is borrowed and
 * must stay valid and unchanged until the request is destroyed. Appends that
 * continue the same array (hashes + the count so far) copy nothing either;
 * any other append makes the request copy its hashes from then on. */
kvio_status_t kvio_kvreq_create_borrowed(kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                                         size_t num_hashes, size_t num_tokens,
                                         kvio_kvreq_t **req_p);

/* Makes req a new request, as kvio_kvreq_create_borrowed would create it
 * on req's pool, keeping its buffers for reuse (its blocks are freed first
 * if it holds any). The same checks and errors as creating one; on an error
 * req is unchanged. */
kvio_status_t kvio_kvreq_reset_borrowed(kvio_kvreq_t *req, const kvio_hash_t *hashes,
                                        size_t num_hashes, size_t num_tokens);

/* Decode growth: appends tokens (token requests) ... */
kvio_status_t kvio_kvreq_append_tokens(kvio_kvreq_t *req, const uint32_t *tokens,
                                       size_t num_tokens);

/* ... or tokens plus the hashes of blocks they fill (hash requests). */
kvio_status_t kvio_kvreq_append_hashes(kvio_kvreq_t *req, size_t num_tokens,
                                       const kvio_hash_t *hashes, size_t num_hashes);

/* Tokens the request has, blocks it holds (borrowed; valid until the next
 * call on the request; in a hybrid pool, its full-attention group's), and
 * block i's hash (KVIO_ERR_NOT_FOUND when block i is not full or has no
 * hash). */
size_t kvio_kvreq_num_tokens(const kvio_kvreq_t *req);
void kvio_kvreq_blocks(const kvio_kvreq_t *req, const uint32_t **ids_p, size_t *num_ids_p);

/* A hybrid pool's window-group table of the request (borrowed, as above):
 * the null block 0 where a block left the window or a hit did not need
 * it. Empty in a pool of one group. */
void kvio_kvreq_window_blocks(const kvio_kvreq_t *req, const uint32_t **ids_p,
                              size_t *num_ids_p);

/* Blocks the request holds in every group (null entries not counted). */
size_t kvio_kvreq_held_blocks(const kvio_kvreq_t *req);
kvio_status_t kvio_kvreq_block_hash(const kvio_kvreq_t *req, size_t index, kvio_hash_t *hash_p);

/* Destroys a request, freeing its blocks first if it holds any. */
void kvio_kvreq_destroy(kvio_kvreq_t *req);

/* Longest cached prefix of the request in tokens, whole blocks only, never
 * covering the last token (vLLM: the engine must compute it); in a hybrid
 * pool, the longest both groups can serve. Changes no
 * block and no index entry. A request holding no blocks keeps its hit
 * blocks: its first allocation takes them while the index is unchanged,
 * and a request looked up twice in a row is watched (one at a time): while
 * none of its hit blocks is evicted, the next lookup or the allocation only
 * searches past them. */
size_t kvio_kvcache_lookup(kvio_kvcache_t *cache, kvio_kvreq_t *req);

/* The same for a prompt given as its block hashes (num_hashes may be less
 * than its full blocks) and length, without a request. */
size_t kvio_kvcache_lookup_hashes(const kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                                  size_t num_hashes, size_t num_tokens);

/* The epoch (a model version) blocks entering the index from now on are
 * stamped with; a hit on a block of an earlier epoch counts as stale
 * (prefix_stale_hits_tokens). Starts at 0. */
void kvio_kvcache_set_epoch(kvio_kvcache_t *cache, uint64_t epoch);

/* Resets the prefix cache as vLLM does when weights change: every cached
 * block loses its hash (free ones stay in the free queue, now unhashed;
 * held ones stay with their requests but can no longer be hit, and come back
 * unhashed). No eviction hook runs (the content is stale, not evicted);
 * dropped (may be NULL) hears each hash that leaves. Returns their number. */
uint32_t kvio_kvcache_reset_prefix(kvio_kvcache_t *cache,
                                   void (*dropped)(void *context, kvio_hash_t hash),
                                   void *context);


/* Makes the request's blocks cover its first num_tokens tokens (at most the
 * request's length). On the first call it takes the cached prefix. All or
 * nothing: when more blocks are needed than are free (new blocks plus hit
 * blocks that must leave the free queue), returns KVIO_ERR_NO_SPACE and
 * changes nothing. Newly full blocks are hashed. *num_hit_tokens_p (may be
 * NULL) receives the tokens taken from the cache by this call. */
kvio_status_t kvio_kvcache_allocate(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t num_tokens,
                                    size_t *num_hit_tokens_p);

/* As kvio_kvcache_allocate, but the new blocks are not hashed yet: their
 * bytes are still on their way (a load from a lower tier, as vLLM delays
 * caching the blocks of an asynchronous KV load); the next allocation of
 * the request hashes them. */
kvio_status_t kvio_kvcache_allocate_unhashed(kvio_kvcache_t *cache, kvio_kvreq_t *req,
                                             size_t num_tokens, size_t *num_hit_tokens_p);

/* As kvio_kvcache_allocate for num_tokens, with blocks for ahead_tokens
 * slots past them too (vLLM's allocate_slots with num_lookahead_tokens: a
 * speculative step's draft tokens and the drafter's lookahead), unhashed
 * until their tokens are known. */
kvio_status_t kvio_kvcache_allocate_ahead(kvio_kvcache_t *cache, kvio_kvreq_t *req,
                                          size_t num_tokens, size_t ahead_tokens);

/* The blocks kvio_kvcache_allocate would take from the free queue to cover
 * the request's first num_tokens tokens (at most its length): new blocks,
 * and on a first allocation the cached prefix's blocks that sit in the free
 * queue (vLLM's get_num_blocks_to_allocate, evictable hits included).
 * Changes no block; the lookup is kept for the allocation. */
kvio_status_t kvio_kvcache_blocks_to_allocate(kvio_kvcache_t *cache, kvio_kvreq_t *req,
                                              size_t num_tokens, size_t *blocks_p);

/* Releases the request's blocks in reverse order (a prefix's tail is
 * evicted before its head; in a hybrid pool the full group's, then the
 * window group's); blocks keep their hashes until reused. The request may
 * be allocated again (recompute after preemption). */
void kvio_kvcache_free(kvio_kvcache_t *cache, kvio_kvreq_t *req);

/* The request's first computed_tokens tokens have their KV: a hybrid
 * pool's window group releases the blocks whose every token is out of the
 * window of the next one, in reverse order, null in its table from then on
 * (vLLM's remove_skipped_blocks). Nothing in a pool of one group. */
void kvio_kvcache_computed(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t computed_tokens);

/* Chained block hashes of a token sequence: one per full block, the salt in
 * the first block's extra key. hashes_p must hold num_tokens / block_size. */
void kvio_kvcache_hash_tokens(const uint32_t *tokens, size_t num_tokens, uint32_t block_size,
                              const void *salt, size_t salt_len, kvio_hash_t *hashes_p);

/* ---- Radix index (SGLang semantics) -------------------------------------- */

/* A node of the tree (an index; 0 is the root). Valid until the tree
 * changes shape (insert, evict), except while locked. */
typedef uint32_t kvio_radix_node_t;

typedef struct kvio_radix_config {
    uint32_t num_blocks; /* blocks the tree may own */
    uint32_t block_size; /* tokens per block (SGLang's page size) */
    const char *eviction; /* policy name; NULL means "lru" */
    /* Optional KV events (NULL: none), as SGLang's BlockStored and
     * BlockRemoved: on_stored for each page a insert adds, in order (parent:
     * the key of the page before it, NULL for a sequence's first page),
     * on_removed for each page eviction frees. */
    void (*on_stored)(void *context, kvio_hash_t key, const kvio_hash_t *parent);
    void (*on_removed)(void *context, kvio_hash_t key);
    /* A block pool's pages under the tree (the engine's radix index): the
     * tree owns no block; kvio_radix_insert_blocks gives each new page its
     * block (ids below num_blocks, each in the tree at most once), and
     * eviction hands each block it frees to on_released (required then). */
    bool external_blocks;
    void (*on_released)(void *context, uint32_t block, kvio_hash_t key);
    void *hook_context;
} kvio_radix_config_t;

/* Bytes a tree of num_blocks takes at most (its arrays, nodes and policy)
 * when at most used_blocks of them are ever cached (UINT64_MAX: all). */
uint64_t kvio_radix_footprint(uint32_t num_blocks, uint64_t used_blocks);

/* Creates an empty tree; the config is copied. */
kvio_status_t kvio_radix_create(const kvio_radix_config_t *config, kvio_radix_t **tree_p);
void kvio_radix_destroy(kvio_radix_t *tree);

/* Keys are sequences of page keys, one kvio_hash_t per full block (token
 * requests compute them with kvio_kvcache_hash_tokens). */

/* Longest cached prefix of keys: *node_p is the deepest matched node (the
 * root when nothing matched), *num_matched_p the matched pages. A match that
 * ends inside a node splits it (the new parent copies the child's lock
 * count). Matched nodes count as accessed for the policy. */
kvio_status_t kvio_radix_match(kvio_radix_t *tree, const kvio_hash_t *keys, size_t num_keys,
                               kvio_radix_node_t *node_p, size_t *num_matched_p);

/* Inserts keys; the tree takes blocks for the new pages, evicting unlocked
 * leaves when it must. *num_present_p (may be NULL): pages already present.
 * KVIO_ERR_NO_SPACE when not enough blocks can be freed (nothing added). */
kvio_status_t kvio_radix_insert(kvio_radix_t *tree, const kvio_hash_t *keys, size_t num_keys,
                                size_t *num_present_p);

/* With external_blocks (kvio_radix_insert refuses then): inserts keys,
 * new pages on blocks[i] (the caller's block for page i; those of pages
 * already present are not taken). tree_blocks_p (num_keys of them)
 * receives the tree's block of every page afterwards: blocks[i] where the
 * page is new, the block already there where it was present (a duplicate
 * of the caller's, which stays the caller's). *node_p: the node the keys
 * end in; *num_present_p: pages already present. Never evicts. */
kvio_status_t kvio_radix_insert_blocks(kvio_radix_t *tree, const kvio_hash_t *keys,
                                       const uint32_t *blocks, size_t num_keys,
                                       uint32_t *tree_blocks_p, kvio_radix_node_t *node_p,
                                       size_t *num_present_p);

/* The longest cached prefix of keys in pages, its blocks written to
 * blocks_p (may be NULL): a query (a scheduler's, a pool's lookup) that
 * changes nothing, neither the tree's shape nor the policy's order. */
size_t kvio_radix_peek(const kvio_radix_t *tree, const kvio_hash_t *keys, size_t num_keys,
                       uint32_t *blocks_p);

/* Drops every node at once, with no hook (a prefix-cache reset: the
 * content is stale, not evicted) and every lock; bumps the generation, so
 * a holder of a lock from before knows not to unlock it. */
void kvio_radix_reset(kvio_radix_t *tree);
uint64_t kvio_radix_generation(const kvio_radix_t *tree);

/* Lock or unlock a node and its ancestors (a running request holds its
 * prefix); moves tokens between the evictable and protected totals. */
void kvio_radix_lock(kvio_radix_t *tree, kvio_radix_node_t node);
void kvio_radix_unlock(kvio_radix_t *tree, kvio_radix_node_t node);

/* Evicts unlocked leaves in policy order until num_tokens tokens are freed
 * or none is left; *num_evicted_p (may be NULL) receives the tokens freed. */
void kvio_radix_evict(kvio_radix_t *tree, size_t num_tokens, size_t *num_evicted_p);

/* Token totals: in unlocked nodes, in locked nodes; free blocks; nodes
 * (root excluded). */
size_t kvio_radix_evictable_tokens(const kvio_radix_t *tree);
size_t kvio_radix_protected_tokens(const kvio_radix_t *tree);
uint32_t kvio_radix_num_free_blocks(const kvio_radix_t *tree);
size_t kvio_radix_num_nodes(const kvio_radix_t *tree);

/* Pages freed by eviction since the tree was made. */
uint64_t kvio_radix_evicted_pages(const kvio_radix_t *tree);

/* Token sequences as keys, as SGLang's RadixKey: whole pages of block_size
 * tokens (block_size 1: token-granular, SGLang's default page size; a tail
 * shorter than a page is neither matched nor stored), the salt (may be
 * NULL; SGLang's extra_key) isolating sequences that differ in it. Match
 * and insert as above; counts are in tokens, always whole pages. */
kvio_status_t kvio_radix_match_tokens(kvio_radix_t *tree, const uint32_t *tokens,
                                      size_t num_tokens, const void *salt, size_t salt_len,
                                      kvio_radix_node_t *node_p, size_t *num_tokens_p);
kvio_status_t kvio_radix_insert_tokens(kvio_radix_t *tree, const uint32_t *tokens,
                                       size_t num_tokens, const void *salt, size_t salt_len,
                                       size_t *num_present_tokens_p);

/* Pages held by a node, its parent, and its lock count. */
size_t kvio_radix_node_pages(const kvio_radix_t *tree, kvio_radix_node_t node);
kvio_radix_node_t kvio_radix_node_parent(const kvio_radix_t *tree, kvio_radix_node_t node);
uint32_t kvio_radix_node_lock_count(const kvio_radix_t *tree, kvio_radix_node_t node);

#endif
