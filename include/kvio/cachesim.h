/* cachesim: replays requests, each a sequence of block ids (trace hash ids,
 * or block hashes reduced to 64 bits), through one cache of a given capacity
 * and eviction policy, with no engine: per request, the longest cached prefix
 * is the hit, then every block is inserted or touched in request order. No
 * reference counts, no last-token rule. For hit-rate-vs-capacity curves. */
#ifndef KVIO_CACHESIM_H
#define KVIO_CACHESIM_H

#include "kvio/kvcache.h"
#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kvio_cachesim kvio_cachesim_t;

/* Capacity meaning "never evict". */
#define KVIO_CACHESIM_UNLIMITED UINT64_MAX

typedef struct kvio_cachesim_result {
    const char *policy;        /* static policy name */
    uint64_t capacity_blocks;  /* as asked (KVIO_CACHESIM_UNLIMITED possible) */
    uint64_t requests;
    uint64_t blocks;           /* block lookups: all blocks of all requests */
    uint64_t hit_blocks;       /* blocks in the requests' cached prefixes */
    uint64_t tokens;           /* sum of the requests' token counts */
    uint64_t hit_tokens;       /* sum of min(hit blocks * block_tokens, tokens) */
    uint64_t evictions;
    double block_hit_rate;     /* hit_blocks / blocks (0 when no blocks) */
    double token_hit_rate;     /* hit_tokens / tokens (0 when no tokens) */
} kvio_cachesim_result_t;

/* Creates an empty replay; block_tokens (at least 1) converts hit blocks to
 * tokens. */
kvio_status_t kvio_cachesim_create(uint32_t block_tokens, kvio_cachesim_t **sim_p);

void kvio_cachesim_destroy(kvio_cachesim_t *sim);

/* Appends a request (replayed in the order added): its block ids (copied)
 * and its token count. */
kvio_status_t kvio_cachesim_add_request(kvio_cachesim_t *sim, const uint64_t *block_ids,
                                        size_t num_blocks, uint64_t num_tokens);

size_t kvio_cachesim_num_unique_blocks(const kvio_cachesim_t *sim);

/* Replays as a model of full-attention and sliding-window layers
 * (gpt-oss), with vLLM's hybrid groups: each request's blocks in a
 * full-attention group and a window group of window_tokens, both in the
 * one cache; a hit is what both serve (kvio/window.h), and the window
 * group's blocks that fell out of the window during the request are
 * inserted first (freed first, evicted first). Before any request is added
 * (else KVIO_ERR_INVALID); 0 goes back to one group. */
kvio_status_t kvio_cachesim_set_window(kvio_cachesim_t *sim, uint32_t window_tokens);

/* Which index the replays keep: KVIO_KVCACHE_INDEX_HASH (default: any
 * cached block may be evicted, the policy orders all of them) or
 * KVIO_KVCACHE_INDEX_RADIX (kvcache/radix.c, SGLang's RadixCache: the
 * trace's blocks are the tree's pages, only unlocked leaves are evicted,
 * a whole node at a time, in the policy's order; a request longer than
 * the cache stores its first capacity blocks; lru takes one replay per
 * capacity). KVIO_ERR_INVALID for another value, or radix with a window. */
kvio_status_t kvio_cachesim_set_index(kvio_cachesim_t *sim, kvio_kvcache_index_t index);

/* Replays every request through a cache of capacity_blocks (at least 1)
 * managed by the named policy (one of kvio_evictions). Does not change
 * sim, so several runs may go on at once from different threads. Returns
 * KVIO_ERR_NOT_FOUND for an unknown policy, KVIO_ERR_INVALID for capacity 0. */
kvio_status_t kvio_cachesim_run(const kvio_cachesim_t *sim, const char *policy,
                                uint64_t capacity_blocks, kvio_cachesim_result_t *result_p);

/* How a fleet's requests reach its replicas. */
typedef enum {
    /* request i to replica i mod num_replicas */
    KVIO_CACHESIM_ROUND_ROBIN = 0,
    /* to the replica whose own cache holds the request's longest prefix,
     * among those routed at most 16 requests more than the least routed
     * (kvio's prefix_affinity with the routed count as the load; ties: the
     * least routed, then the lower replica). The hash index only. */
    KVIO_CACHESIM_PREFIX_AFFINITY = 1,
} kvio_cachesim_router_t;

/* A fleet of num_replicas replicas (at least 1) behind the router.
 * *local_p: each replica with its own cache of capacity_blocks (the
 * replicas' hits summed); *global_p: one store of num_replicas x
 * capacity_blocks that every replica reads and writes (Mooncake Store's
 * global cache, an LMCache server), the whole trace through it (routing
 * cannot matter). Both by the policy and the sim's index; global_p's
 * capacity_blocks is the store's. Does not change sim. */
kvio_status_t kvio_cachesim_run_fleet(const kvio_cachesim_t *sim, const char *policy,
                                      uint64_t capacity_blocks, uint32_t num_replicas,
                                      kvio_cachesim_router_t router,
                                      kvio_cachesim_result_t *local_p,
                                      kvio_cachesim_result_t *global_p);

/* LRU at every capacity (each at least 1; KVIO_CACHESIM_UNLIMITED
 * possible) in one pass over the requests: results_p[i] (num_capacities
 * results) equals kvio_cachesim_run(sim, "lru", capacities[i]) in every
 * field. Does not change sim. Returns KVIO_ERR_INVALID for a capacity of 0,
 * KVIO_ERR_NOMEM. */
kvio_status_t kvio_cachesim_sweep_lru(const kvio_cachesim_t *sim, const uint64_t *capacities,
                                      size_t num_capacities, kvio_cachesim_result_t *results_p);

/* Runs every (policy, capacity) pair, on up to num_threads threads (1: in
 * the caller's): lru at all capacities in one pass (kvio_cachesim_sweep_lru),
 * other policies one replay per capacity. results_p holds num_policies *
 * num_capacities results, policy-major. Stops at the first failure. */
kvio_status_t kvio_cachesim_sweep(const kvio_cachesim_t *sim, const char *const *policies,
                                  size_t num_policies, const uint64_t *capacities,
                                  size_t num_capacities, unsigned num_threads,
                                  kvio_cachesim_result_t *results_p);

#endif
