/* cachesim: block ids are interned once into dense indices as requests are
 * added, so each replay works on flat arrays (a residency byte per block and
 * the policy's intrusive structures) with no hashing and no allocation per
 * block. lru at every capacity takes one pass over the requests (one recency
 * stack with a marker per capacity); other policies one replay per capacity.
 * Semantics follow shared/reference/lru_replay.py. */
#include "kvio/cachesim.h"

#include "kvcache/kvcache_int.h"
#include "kvio/log.h"
#include "kvio/window.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DIRECT_IDS (1u << 24)

/* Dense block indices of requests live in chunks that never move, so the
 * trace grows without copies (and without touching new memory twice); each
 * request's blocks lie in one chunk. */
#define CHUNK_BLOCKS ((size_t)1 << 21)

typedef struct block_chunk {
    struct block_chunk *previous;
    size_t used, capacity;
    uint32_t blocks[];
} block_chunk_t;

/* A request's blocks in the order they are inserted. With a window
 * (hybrid groups), 2 * num_blocks of them: the window group's blocks the
 * request freed as it went (skipped), the full-attention group's, then the
 * window group's last ones. */
typedef struct sim_request {
    const uint32_t *blocks; /* in a chunk */
    uint32_t num_blocks;    /* per group */
    uint32_t num_entries;   /* num_blocks, or 2 * num_blocks with a window */
    uint32_t skipped;       /* the window group's blocks freed before the end */
    uint64_t num_tokens;
} sim_request_t;

struct kvio_cachesim {
    uint32_t block_tokens;
    sim_request_t *requests;
    size_t num_requests, requests_capacity;
    block_chunk_t *chunk; /* the newest, holding a list of the older ones */
    size_t num_blocks;    /* of all requests */
    uint64_t num_tokens;  /* of all requests */
    /* Interning: ids below DIRECT_IDS (trace hash ids are small dense
     * integers) index a lazily zeroed array holding index + 1; others go
     * through an open-addressing table with linear probing. */
    uint32_t *direct;
    kvio_map_t table; /* id -> index + 1 */
    uint32_t num_unique;
    uint32_t window;  /* a window group's tokens (hybrid groups); 0: one group */
    kvio_kvcache_index_t index; /* radix: replays go through kvcache/radix.c */
};

/* A window group's block ids are the full group's, with this mixed in. */
#define WINDOW_GROUP_ID 0x9e3779b97f4a7c15ull

kvio_status_t kvio_cachesim_set_window(kvio_cachesim_t *sim, uint32_t window_tokens)
{
    if (sim->num_requests > 0 || (window_tokens > 0 && sim->index == KVIO_KVCACHE_INDEX_RADIX))
        return KVIO_ERR_INVALID;
    sim->window = window_tokens;
    return KVIO_OK;
}

kvio_status_t kvio_cachesim_set_index(kvio_cachesim_t *sim, kvio_kvcache_index_t index)
{
    if ((index != KVIO_KVCACHE_INDEX_HASH && index != KVIO_KVCACHE_INDEX_RADIX) ||
        (index == KVIO_KVCACHE_INDEX_RADIX && sim->window > 0))
        return KVIO_ERR_INVALID;
    sim->index = index;
    return KVIO_OK;
}

kvio_status_t kvio_cachesim_create(uint32_t block_tokens, kvio_cachesim_t **sim_p)
{
    if (block_tokens == 0)
        return KVIO_ERR_INVALID;
    kvio_cachesim_t *sim = calloc(1, sizeof(*sim));
    if (sim == NULL)
        return KVIO_ERR_NOMEM;
    sim->block_tokens = block_tokens;
    if (kvio_map_reserve(&sim->table, 512) != KVIO_OK) {
        kvio_cachesim_destroy(sim);
        return KVIO_ERR_NOMEM;
    }
    *sim_p = sim;
    return KVIO_OK;
}

void kvio_cachesim_destroy(kvio_cachesim_t *sim)
{
    if (sim == NULL)
        return;
    free(sim->requests);
    while (sim->chunk != NULL) {
        block_chunk_t *previous = sim->chunk->previous;
        free(sim->chunk);
        sim->chunk = previous;
    }
    free(sim->direct);
    kvio_map_fini(&sim->table);
    free(sim);
}

/* Asks for transparent huge pages on the whole 2 MiB pages inside a large
 * array (where the kernel gives them only on request): one page fault per
 * 2 MiB instead of per 4 KiB, and faults are most of the cost of filling
 * new memory. Only a hint. */
static void advise_huge_pages(void *array, size_t size)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t start = ((uintptr_t)array + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)array + size) & ~(huge - 1);
    if (end > start)
        madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)array;
    (void)size;
#endif
}

static kvio_status_t grow_array(void **array, size_t *capacity, size_t needed, size_t size)
{
    if (needed <= *capacity)
        return KVIO_OK;
    size_t bigger = *capacity ? *capacity : 1024;
    while (bigger < needed)
        bigger *= 2;
    void *resized = realloc(*array, bigger * size);
    if (resized == NULL)
        return KVIO_ERR_NOMEM;
    *array = resized;
    *capacity = bigger;
    return KVIO_OK;
}

/* Interns an id of DIRECT_IDS or more through the table. */
static kvio_status_t intern_table_id(kvio_cachesim_t *sim, uint64_t id, uint32_t *index_p)
{
    uint32_t found = kvio_map_get(&sim->table, id);
    if (found == 0) { /* the caller keeps num_unique below UINT32_MAX - 1 */
        kvio_status_t status = kvio_map_set(&sim->table, id, sim->num_unique + 1);
        if (status != KVIO_OK)
            return status;
        found = ++sim->num_unique;
    }
    *index_p = found - 1;
    return KVIO_OK;
}

/* The dense index of id (interned on first sight). */
static kvio_status_t intern(kvio_cachesim_t *sim, uint64_t id, uint32_t *index_p)
{
    if (sim->num_unique == UINT32_MAX - 1)
        return KVIO_ERR_NO_SPACE;
    if (id >= DIRECT_IDS)
        return intern_table_id(sim, id, index_p);
    uint32_t index = sim->direct[id];
    if (index == 0)
        sim->direct[id] = index = ++sim->num_unique;
    *index_p = index - 1;
    return KVIO_OK;
}

/* The position in a request's blocks of block i of the full group (group
 * 0) or of the window group (group 1). */
static uint32_t entry_of(const sim_request_t *request, int group, uint32_t i)
{
    if (request->num_entries == request->num_blocks)
        return i;
    if (group == 0)
        return request->skipped + i;
    return i < request->skipped ? i : request->num_blocks + i;
}

kvio_status_t kvio_cachesim_add_request(kvio_cachesim_t *sim, const uint64_t *block_ids,
                                        size_t num_blocks, uint64_t num_tokens)
{
    if (num_blocks > UINT32_MAX / 2 || (block_ids == NULL && num_blocks > 0))
        return KVIO_ERR_INVALID;
    kvio_status_t status = grow_array((void **)&sim->requests, &sim->requests_capacity,
                                      sim->num_requests + 1, sizeof(sim_request_t));
    if (status != KVIO_OK)
        return status;
    size_t num_entries = sim->window > 0 ? 2 * num_blocks : num_blocks;
    block_chunk_t *chunk = sim->chunk;
    if (chunk == NULL || chunk->capacity - chunk->used < num_entries) {
        size_t capacity = num_entries > CHUNK_BLOCKS ? num_entries : CHUNK_BLOCKS;
        size_t size = sizeof(*chunk) + capacity * sizeof(uint32_t);
        if ((chunk = malloc(size)) == NULL)
            return KVIO_ERR_NOMEM;
        advise_huge_pages(chunk, size);
        *chunk = (block_chunk_t){.previous = sim->chunk, .capacity = capacity};
        sim->chunk = chunk;
    }
    if (sim->direct == NULL && num_blocks > 0) {
        /* calloc of this size maps zero pages lazily: only the id ranges in
         * use cost memory (in 2 MiB steps with huge pages). */
        if ((sim->direct = calloc(DIRECT_IDS, sizeof(uint32_t))) == NULL)
            return KVIO_ERR_NOMEM;
        advise_huge_pages(sim->direct, DIRECT_IDS * sizeof(uint32_t));
    }
    sim_request_t request = {.blocks = chunk->blocks + chunk->used,
                             .num_blocks = (uint32_t)num_blocks,
                             .num_entries = (uint32_t)num_entries,
                             .num_tokens = num_tokens};
    if (sim->window > 0) {
        uint32_t skipped = kvio_window_skipped_blocks(num_tokens, sim->block_tokens, sim->window);
        request.skipped = skipped < num_blocks ? skipped : (uint32_t)num_blocks;
    }
    uint32_t *blocks = chunk->blocks + chunk->used;
    for (uint32_t i = 0; i < num_blocks && status == KVIO_OK; i++) {
        status = intern(sim, block_ids[i], &blocks[entry_of(&request, 0, i)]);
        if (status == KVIO_OK && sim->window > 0)
            status = intern(sim, block_ids[i] ^ WINDOW_GROUP_ID, &blocks[entry_of(&request, 1, i)]);
    }
    if (status != KVIO_OK)
        return status;
    sim->requests[sim->num_requests++] = request;
    chunk->used += num_entries;
    sim->num_blocks += num_blocks;
    sim->num_tokens += num_tokens;
    return KVIO_OK;
}

size_t kvio_cachesim_num_unique_blocks(const kvio_cachesim_t *sim)
{
    return sim->num_unique;
}

/* A group's blocks of a request, for the window rules. */
typedef struct group_view {
    const sim_request_t *request;
    const uint8_t *resident;
} group_view_t;

static bool full_resident(const void *view_p, uint32_t i)
{
    const group_view_t *view = view_p;
    return view->resident[view->request->blocks[entry_of(view->request, 0, i)]];
}

static bool window_resident(const void *view_p, uint32_t i)
{
    const group_view_t *view = view_p;
    return view->resident[view->request->blocks[entry_of(view->request, 1, i)]];
}

/* Counts a request whose first hits blocks were a hit. */
static void count_hits(const kvio_cachesim_t *sim, const sim_request_t *request, uint32_t hits,
                       kvio_cachesim_result_t *result)
{
    uint64_t hit_tokens = (uint64_t)hits * sim->block_tokens;
    result->hit_blocks += hits;
    result->blocks += request->num_blocks;
    result->tokens += request->num_tokens;
    result->hit_tokens += hit_tokens < request->num_tokens ? hit_tokens : request->num_tokens;
    result->requests++;
}

/* A request's hit in a cache: the longest prefix of resident blocks (with
 * a window, what both groups serve: kvio_hybrid_hit). */
static uint32_t resident_prefix(const kvio_cachesim_t *sim, const sim_request_t *request,
                                const uint8_t *resident)
{
    const uint32_t *blocks = request->blocks;
    uint32_t hits = 0;
    if (sim->window > 0) {
        group_view_t view = {.request = request, .resident = resident};
        return kvio_hybrid_hit(request->num_blocks, sim->block_tokens, sim->window,
                               full_resident, window_resident, &view);
    }
    while (hits < request->num_blocks && resident[blocks[hits]])
        hits++;
    return hits;
}

/* Counts one request's hit in a cache. */
static void count_hit(const kvio_cachesim_t *sim, const sim_request_t *request,
                      const uint8_t *resident, kvio_cachesim_result_t *result)
{
    count_hits(sim, request, resident_prefix(sim, request, resident), result);
}

static void finish_rates(kvio_cachesim_result_t *result)
{
    result->block_hit_rate =
        result->blocks ? (double)result->hit_blocks / (double)result->blocks : 0;
    result->token_hit_rate =
        result->tokens ? (double)result->hit_tokens / (double)result->tokens : 0;
}

/* The radix index (kvcache/radix.c, SGLang's RadixCache) over the trace's
 * blocks as pages: per request, insert returns the pages already present
 * (the hit: match and insert are one walk) and stores the rest, evicting
 * unlocked leaves (whole nodes, as SGLang) in the policy's order. A request
 * longer than the cache stores its first capacity blocks. Requests first,
 * first + stride, ... only (one replica of a fleet). */
static kvio_status_t replay_radix(const kvio_cachesim_t *sim, const char *policy,
                                  uint64_t capacity_blocks, size_t first, size_t stride,
                                  kvio_cachesim_result_t *result)
{
    uint64_t capacity = capacity_blocks < sim->num_unique ? capacity_blocks : sim->num_unique;
    if (capacity == 0)
        capacity = 1;
    if (capacity >= UINT32_MAX - 1) {
        kvio_error("cachesim: the radix index holds at most %u blocks, not %llu",
                   UINT32_MAX - 2, (unsigned long long)capacity);
        return KVIO_ERR_INVALID;
    }
    kvio_radix_config_t config = {.num_blocks = (uint32_t)capacity,
                                  .block_size = sim->block_tokens, .eviction = policy};
    kvio_radix_t *tree = NULL;
    kvio_status_t status = kvio_radix_create(&config, &tree);
    if (status != KVIO_OK)
        return status;
    kvio_hash_t *keys = NULL;
    size_t keys_capacity = 0;
    for (size_t r = first; r < sim->num_requests && status == KVIO_OK; r += stride) {
        const sim_request_t *request = &sim->requests[r];
        size_t count = request->num_blocks < capacity ? request->num_blocks : capacity;
        status = grow_array((void **)&keys, &keys_capacity, count > 0 ? count : 1,
                            sizeof(kvio_hash_t));
        for (size_t i = 0; i < count && status == KVIO_OK; i++)
            keys[i] = (kvio_hash_t){.low = request->blocks[i], .high = 0};
        size_t present = 0;
        if (status == KVIO_OK)
            status = kvio_radix_insert(tree, keys, count, &present);
        if (status == KVIO_OK)
            count_hits(sim, request, (uint32_t)present, result);
    }
    result->evictions += kvio_radix_evicted_pages(tree);
    free(keys);
    kvio_radix_destroy(tree);
    return status;
}

/* One cache of the block index: which blocks are resident, the policy
 * over them, how many. */
typedef struct block_cache {
    const kvio_evict_ops_t *ops;
    uint8_t *resident;
    kvio_evict_t evict;
    uint64_t capacity, size;
    bool evicts; /* holds fewer than the unique blocks: else never evicts */
} block_cache_t;

static kvio_status_t block_cache_init(block_cache_t *cache, const kvio_cachesim_t *sim,
                                      const char *policy, uint64_t capacity_blocks)
{
    uint32_t num_entries = sim->num_unique;
    /* A cache that holds every block never evicts: the policy cannot matter. */
    *cache = (block_cache_t){.ops = kvio_evict_find(policy), .capacity = capacity_blocks,
                             .evicts = capacity_blocks < num_entries};
    cache->resident = calloc(num_entries ? num_entries : 1, 1);
    if (cache->resident == NULL)
        return KVIO_ERR_NOMEM;
    return cache->evicts ? kvio_evict_init(&cache->evict, policy, num_entries, capacity_blocks)
                         : KVIO_OK;
}

static void block_cache_fini(block_cache_t *cache)
{
    kvio_evict_fini(&cache->evict);
    free(cache->resident);
}

/* Inserts or touches every block of the request, in order. */
static void block_cache_take(block_cache_t *cache, const sim_request_t *request,
                             kvio_cachesim_result_t *result)
{
    const uint32_t *blocks = request->blocks;
    uint8_t *resident = cache->resident;
    if (!cache->evicts) {
        for (uint32_t i = 0; i < request->num_entries; i++)
            resident[blocks[i]] = 1;
        return;
    }
    const kvio_evict_ops_t *ops = cache->ops;
    void *priv = cache->evict.priv;
    for (uint32_t i = 0; i < request->num_entries; i++) {
        uint32_t block = blocks[i];
        if (resident[block]) {
            ops->access(priv, block);
            continue;
        }
        if (ops->arriving != NULL)
            ops->arriving(priv, block);
        /* Evicting before inserting equals the reference's insert-then-
         * trim for any capacity of at least one block. */
        if (cache->size == cache->capacity) {
            uint32_t victim = ops->victim(priv);
            resident[victim] = 0;
            cache->size--;
            result->evictions++;
        }
        ops->add(priv, block, block, true);
        resident[block] = 1;
        cache->size++;
    }
}

/* Replays requests first, first + stride, ... through one cache (the
 * block index), adding to *result_p. */
static kvio_status_t replay_blocks(const kvio_cachesim_t *sim, const char *policy,
                                   uint64_t capacity_blocks, size_t first, size_t stride,
                                   kvio_cachesim_result_t *result_p)
{
    block_cache_t cache;
    kvio_status_t status = block_cache_init(&cache, sim, policy, capacity_blocks);
    for (size_t r = first; status == KVIO_OK && r < sim->num_requests; r += stride) {
        count_hit(sim, &sim->requests[r], cache.resident, result_p);
        block_cache_take(&cache, &sim->requests[r], result_p);
    }
    block_cache_fini(&cache);
    return status;
}

/* A replica may take a request while it has been routed at most this many
 * more than the least routed one (kvio's prefix_affinity load_cap, with
 * the routed count as the load). */
#define AFFINITY_LOAD_CAP 16

/* prefix_affinity over num_replicas caches of the block index: each
 * request goes to the replica holding its longest prefix among those
 * within the load cap (ties: the least routed, then the lower replica). */
static kvio_status_t replay_affinity(const kvio_cachesim_t *sim, const char *policy,
                                     uint64_t capacity_blocks, uint32_t num_replicas,
                                     kvio_cachesim_result_t *result_p)
{
    if (sim->index != KVIO_KVCACHE_INDEX_HASH) {
        kvio_error("cachesim: the prefix_affinity router takes the hash index (a radix "
                   "match changes the tree it looks in)");
        return KVIO_ERR_INVALID;
    }
    block_cache_t *caches = calloc(num_replicas, sizeof(*caches));
    uint64_t *routed = calloc(num_replicas, sizeof(*routed));
    kvio_status_t status = caches != NULL && routed != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    uint32_t made = 0;
    for (; status == KVIO_OK && made < num_replicas; made++)
        status = block_cache_init(&caches[made], sim, policy, capacity_blocks);
    for (size_t r = 0; status == KVIO_OK && r < sim->num_requests; r++) {
        const sim_request_t *request = &sim->requests[r];
        uint64_t least = routed[0];
        for (uint32_t k = 1; k < num_replicas; k++)
            least = routed[k] < least ? routed[k] : least;
        uint32_t best = UINT32_MAX, best_hits = 0;
        for (uint32_t k = 0; k < num_replicas; k++) {
            if (routed[k] > least + AFFINITY_LOAD_CAP)
                continue;
            uint32_t hits = resident_prefix(sim, request, caches[k].resident);
            if (best == UINT32_MAX || hits > best_hits ||
                (hits == best_hits && routed[k] < routed[best])) {
                best = k;
                best_hits = hits;
            }
        }
        count_hits(sim, request, best_hits, result_p);
        block_cache_take(&caches[best], request, result_p);
        routed[best]++;
    }
    for (uint32_t k = 0; caches != NULL && k < made; k++)
        block_cache_fini(&caches[k]);
    free(caches);
    free(routed);
    return status;
}

/* One replica's replay (requests first, first + stride, ...) by the sim's
 * index, added to *result_p. */
static kvio_status_t replay(const kvio_cachesim_t *sim, const char *policy,
                            uint64_t capacity_blocks, size_t first, size_t stride,
                            kvio_cachesim_result_t *result_p)
{
    if (sim->index == KVIO_KVCACHE_INDEX_RADIX)
        return replay_radix(sim, policy, capacity_blocks, first, stride, result_p);
    return replay_blocks(sim, policy, capacity_blocks, first, stride, result_p);
}

/* Checks a run's policy and capacity; *result_p starts empty. */
static kvio_status_t start_result(const char *policy, uint64_t capacity_blocks,
                                  kvio_cachesim_result_t *result_p)
{
    if (capacity_blocks == 0) {
        kvio_error("cachesim: capacity must be at least 1 block");
        return KVIO_ERR_INVALID;
    }
    kvio_status_t status = kvio_evict_check_name(policy);
    if (status != KVIO_OK)
        return status;
    *result_p = (kvio_cachesim_result_t){.policy = kvio_evict_find(policy)->plugin.name,
                                         .capacity_blocks = capacity_blocks};
    return KVIO_OK;
}

kvio_status_t kvio_cachesim_run(const kvio_cachesim_t *sim, const char *policy,
                                uint64_t capacity_blocks, kvio_cachesim_result_t *result_p)
{
    kvio_cachesim_result_t result;
    kvio_status_t status = start_result(policy, capacity_blocks, &result);
    if (status == KVIO_OK)
        status = replay(sim, policy, capacity_blocks, 0, 1, &result);
    if (status != KVIO_OK)
        return status;
    finish_rates(&result);
    *result_p = result;
    return KVIO_OK;
}

kvio_status_t kvio_cachesim_run_fleet(const kvio_cachesim_t *sim, const char *policy,
                                      uint64_t capacity_blocks, uint32_t num_replicas,
                                      kvio_cachesim_router_t router,
                                      kvio_cachesim_result_t *local_p,
                                      kvio_cachesim_result_t *global_p)
{
    if (num_replicas == 0 || (router != KVIO_CACHESIM_ROUND_ROBIN &&
                              router != KVIO_CACHESIM_PREFIX_AFFINITY)) {
        kvio_error("cachesim: a fleet needs at least 1 replica and a known router");
        return KVIO_ERR_INVALID;
    }
    /* The shared store holds what the replicas' caches hold together. */
    uint64_t shared = capacity_blocks == KVIO_CACHESIM_UNLIMITED ||
                              capacity_blocks > (KVIO_CACHESIM_UNLIMITED - 1) / num_replicas
                          ? KVIO_CACHESIM_UNLIMITED
                          : capacity_blocks * num_replicas;
    kvio_cachesim_result_t local, global;
    kvio_status_t status = start_result(policy, capacity_blocks, &local);
    if (status == KVIO_OK)
        status = start_result(policy, shared, &global);
    if (status == KVIO_OK && router == KVIO_CACHESIM_PREFIX_AFFINITY)
        status = replay_affinity(sim, policy, capacity_blocks, num_replicas, &local);
    for (uint32_t replica = 0;
         router == KVIO_CACHESIM_ROUND_ROBIN && replica < num_replicas && status == KVIO_OK;
         replica++)
        status = replay(sim, policy, capacity_blocks, replica, num_replicas, &local);
    if (status == KVIO_OK)
        status = replay(sim, policy, shared, 0, 1, &global);
    if (status != KVIO_OK)
        return status;
    finish_rates(&local);
    finish_rates(&global);
    *local_p = local;
    *global_p = global;
    return KVIO_OK;
}

/* ---------- LRU at every capacity in one pass ---------- */

/* LRU has the inclusion property (Mattson et al., 1970): when every access
 * moves its block to the most recent end, a cache of C blocks holds exactly
 * the C most recently used distinct blocks, the top C of one recency stack,
 * whatever happened before. So one stack replays all capacities at once,
 * with a marker at depth C - 1 for each capacity C that evicts
 * (C < unique blocks). A block's level counts the markers above it: it is
 * resident at the capacities of the markers at or below it (its stack
 * distance is under them). A block pushed past a marker is exactly the
 * victim of that capacity's cache, so evictions are counted where markers
 * move. The stack is kept only down to the last marker. */

#if defined(__GNUC__)
#define PREFETCH(address) __builtin_prefetch(address, 1)
#else
#define PREFETCH(address) ((void)(address))
#endif

/* Levels are bytes: more capacities than this take more than one pass. */
#define LRU_MAX_MARKERS 250

typedef struct lru_stack {
    /* Per block: the number of markers above it, L < num_markers while it
     * is on the stack (resident at capacities markers[L] and up);
     * num_markers when it has passed them all; num_markers + 1 when never
     * seen. */
    uint8_t *level;
    kvio_link_t *links;   /* the stack above the last marker, head = most recent */
    uint32_t head, tail;
    uint64_t length;      /* blocks on the stack, at most the last marker */
    const uint64_t *markers; /* capacities, ascending, distinct, below the unique blocks */
    uint32_t num_markers;
    uint32_t num_full;    /* markers reached by the stack: they have a boundary */
    uint32_t boundary[LRU_MAX_MARKERS]; /* the block at depth markers[i] - 1 */
    uint64_t evictions[LRU_MAX_MARKERS];
} lru_stack_t;

/* Moves block to the top of the stack, moving the markers above its old
 * place down by one block each. */
static void lru_touch(lru_stack_t *stack, uint32_t block)
{
    uint8_t *level = stack->level;
    kvio_link_t *links = stack->links;
    uint32_t from = level[block], num_markers = stack->num_markers;
    if (num_markers == 0 || block == stack->head) {
        level[block] = 0;
        return;
    }
    bool listed = from < num_markers;
    uint32_t previous = KVIO_EVICT_NONE;
    if (listed) { /* not the head, so it has a previous block */
        previous = links[block].prev;
        uint32_t next = links[block].next;
        links[previous].next = next;
        if (next == KVIO_EVICT_NONE)
            stack->tail = previous;
        else
            links[next].prev = previous;
    }
    links[block].prev = KVIO_EVICT_NONE;
    links[block].next = stack->head;
    if (stack->head == KVIO_EVICT_NONE)
        stack->tail = block;
    else
        links[stack->head].prev = block;
    stack->head = block;
    level[block] = 0;
    /* Every block between the top and the old place moves down one: the
     * block at each marker above the old place passes it (an eviction at
     * that capacity). */
    uint32_t crossed = listed ? from : stack->num_full;
    for (uint32_t i = 0; i < crossed; i++) {
        uint32_t moved = stack->boundary[i];
        level[moved] = (uint8_t)(i + 1);
        uint32_t boundary = links[moved].prev;
        stack->boundary[i] = boundary;
        stack->evictions[i]++;
        /* The next block to pass this marker: fetch it now. */
        PREFETCH(&links[boundary]);
        PREFETCH(&level[boundary]);
    }
    if (listed) {
        /* The block was the one at its own marker: the block before it is
         * there now (having just passed the marker above, if any). */
        if (from < stack->num_full && stack->boundary[from] == block)
            stack->boundary[from] = previous;
    } else if (stack->num_full == num_markers) {
        /* The block that passed the last marker leaves the stack. */
        stack->tail = links[stack->tail].prev;
        links[stack->tail].next = KVIO_EVICT_NONE;
    } else if (++stack->length == stack->markers[stack->num_full]) {
        /* The stack reaches the next marker: its oldest block is there. */
        stack->boundary[stack->num_full++] = stack->tail;
    }
}

/* Hit counts of one pass by level threshold: at marker t, a block hits when
 * it and every block before it in its request are at level t or above;
 * threshold num_markers is a cache that never evicts. */
typedef struct lru_counts {
    uint64_t hit_blocks, hit_tokens;
} lru_counts_t;

/* Replays every request once through the stack with these markers;
 * counts_p holds num_markers + 1 entries, evictions_p num_markers. */
static kvio_status_t lru_pass(const kvio_cachesim_t *sim, const uint64_t *markers,
                              uint32_t num_markers, lru_counts_t *counts_p,
                              uint64_t *evictions_p)
{
    lru_stack_t *stack = calloc(1, sizeof(*stack));
    size_t num_entries = sim->num_unique ? sim->num_unique : 1;
    uint8_t *level = malloc(num_entries);
    kvio_link_t *links = num_markers > 0 ? malloc(num_entries * sizeof(*links)) : NULL;
    if (stack == NULL || level == NULL || (num_markers > 0 && links == NULL)) {
        free(stack);
        free(level);
        free(links);
        return KVIO_ERR_NOMEM;
    }
    advise_huge_pages(level, num_entries);
    if (links != NULL)
        advise_huge_pages(links, num_entries * sizeof(*links));
    memset(level, (int)(num_markers + 1), num_entries);
    *stack = (lru_stack_t){
        .level = level,
        .links = links,
        .head = KVIO_EVICT_NONE,
        .tail = KVIO_EVICT_NONE,
        .markers = markers,
        .num_markers = num_markers,
    };
    memset(counts_p, 0, (num_markers + 1) * sizeof(*counts_p));
    for (size_t r = 0; r < sim->num_requests; r++) {
        const sim_request_t *request = &sim->requests[r];
        const uint32_t *blocks = request->blocks;
        uint32_t num_blocks = request->num_blocks, hits = 0;
        /* The lookup sees the stack as the request found it; hits only
         * grow with the threshold. */
        for (uint32_t t = 0; t <= num_markers; t++) {
            while (hits < num_blocks && level[blocks[hits]] <= t)
                hits++;
            uint64_t hit_tokens = (uint64_t)hits * sim->block_tokens;
            counts_p[t].hit_blocks += hits;
            counts_p[t].hit_tokens +=
                hit_tokens < request->num_tokens ? hit_tokens : request->num_tokens;
        }
        for (uint32_t i = 0; i < num_blocks; i++)
            lru_touch(stack, blocks[i]);
    }
    memcpy(evictions_p, stack->evictions, num_markers * sizeof(*evictions_p));
    free(links);
    free(level);
    free(stack);
    return KVIO_OK;
}

static int compare_capacities(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Fills the result of a capacity from a pass's counts. */
static void lru_result(const kvio_cachesim_t *sim, uint64_t capacity_blocks,
                       const lru_counts_t *counts, uint64_t evictions,
                       kvio_cachesim_result_t *result_p)
{
    kvio_cachesim_result_t result = {
        .policy = kvio_eviction_lru.plugin.name,
        .capacity_blocks = capacity_blocks,
        .requests = sim->num_requests,
        .blocks = sim->num_blocks,
        .hit_blocks = counts->hit_blocks,
        .tokens = sim->num_tokens,
        .hit_tokens = counts->hit_tokens,
        .evictions = evictions,
    };
    result.block_hit_rate = result.blocks ? (double)result.hit_blocks / (double)result.blocks : 0;
    result.token_hit_rate = result.tokens ? (double)result.hit_tokens / (double)result.tokens : 0;
    *result_p = result;
}

kvio_status_t kvio_cachesim_sweep_lru(const kvio_cachesim_t *sim, const uint64_t *capacities,
                                      size_t num_capacities, kvio_cachesim_result_t *results_p)
{
    for (size_t i = 0; i < num_capacities; i++) {
        if (capacities[i] == 0) {
            kvio_error("cachesim: capacity must be at least 1 block");
            return KVIO_ERR_INVALID;
        }
    }
    /* The one pass knows one group and the block index. */
    if (sim->window > 0 || sim->index == KVIO_KVCACHE_INDEX_RADIX) {
        kvio_status_t status = KVIO_OK;
        for (size_t i = 0; i < num_capacities && status == KVIO_OK; i++)
            status = kvio_cachesim_run(sim, "lru", capacities[i], &results_p[i]);
        return status;
    }
    /* Markers: the distinct capacities that evict, ascending. */
    uint64_t *markers = malloc((num_capacities ? num_capacities : 1) * sizeof(*markers));
    lru_counts_t *counts = malloc((LRU_MAX_MARKERS + 1) * sizeof(*counts));
    uint64_t *evictions = malloc(LRU_MAX_MARKERS * sizeof(*evictions));
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (markers == NULL || counts == NULL || evictions == NULL)
        goto cleanup;
    size_t num_markers = 0;
    for (size_t i = 0; i < num_capacities; i++) {
        if (capacities[i] < sim->num_unique)
            markers[num_markers++] = capacities[i];
    }
    qsort(markers, num_markers, sizeof(*markers), compare_capacities);
    size_t distinct = 0;
    for (size_t i = 0; i < num_markers; i++) {
        if (distinct == 0 || markers[distinct - 1] != markers[i])
            markers[distinct++] = markers[i];
    }
    num_markers = distinct;
    /* One pass per LRU_MAX_MARKERS markers; the first also gives the
     * capacities that never evict. */
    size_t first = 0;
    do {
        uint32_t count = (uint32_t)(num_markers - first < LRU_MAX_MARKERS
                                        ? num_markers - first
                                        : LRU_MAX_MARKERS);
        status = lru_pass(sim, markers + first, count, counts, evictions);
        if (status != KVIO_OK)
            goto cleanup;
        for (size_t i = 0; i < num_capacities; i++) {
            uint64_t capacity = capacities[i];
            if (capacity >= sim->num_unique) {
                if (first == 0)
                    lru_result(sim, capacity, &counts[count], 0, &results_p[i]);
                continue;
            }
            const uint64_t *marker = bsearch(&capacity, markers + first, count,
                                             sizeof(*markers), compare_capacities);
            if (marker != NULL) {
                size_t m = (size_t)(marker - (markers + first));
                lru_result(sim, capacity, &counts[m], evictions[m], &results_p[i]);
            }
        }
        first += count;
    } while (first < num_markers);
    status = KVIO_OK;

cleanup:
    free(evictions);
    free(counts);
    free(markers);
    return status;
}

/* Sweep workers take jobs from a shared counter: a policy at one capacity,
 * or lru at all of them in one pass (first, as the longest). The counter and
 * the first error are the only shared mutable state, under the mutex; each
 * job writes its own result slots. */
#define ALL_CAPACITIES SIZE_MAX

typedef struct sweep_job {
    size_t policy;
    size_t capacity; /* index, or ALL_CAPACITIES */
} sweep_job_t;

typedef struct sweep {
    const kvio_cachesim_t *sim;
    const char *const *policies;
    const uint64_t *capacities;
    size_t num_capacities, num_jobs, next_job;
    const sweep_job_t *jobs;
    kvio_cachesim_result_t *results;
    kvio_status_t status;
    pthread_mutex_t lock;
} sweep_t;

static void *sweep_worker(void *arg)
{
    sweep_t *sweep = arg;
    for (;;) {
        pthread_mutex_lock(&sweep->lock);
        size_t job = sweep->status == KVIO_OK ? sweep->next_job++ : sweep->num_jobs;
        pthread_mutex_unlock(&sweep->lock);
        if (job >= sweep->num_jobs)
            return NULL;
        const sweep_job_t *todo = &sweep->jobs[job];
        kvio_cachesim_result_t *results =
            sweep->results + todo->policy * sweep->num_capacities;
        kvio_status_t status;
        if (todo->capacity == ALL_CAPACITIES)
            status = kvio_cachesim_sweep_lru(sweep->sim, sweep->capacities,
                                             sweep->num_capacities, results);
        else
            status = kvio_cachesim_run(sweep->sim, sweep->policies[todo->policy],
                                       sweep->capacities[todo->capacity],
                                       &results[todo->capacity]);
        if (status != KVIO_OK) {
            pthread_mutex_lock(&sweep->lock);
            if (sweep->status == KVIO_OK)
                sweep->status = status;
            pthread_mutex_unlock(&sweep->lock);
        }
    }
}

kvio_status_t kvio_cachesim_sweep(const kvio_cachesim_t *sim, const char *const *policies,
                                  size_t num_policies, const uint64_t *capacities,
                                  size_t num_capacities, unsigned num_threads,
                                  kvio_cachesim_result_t *results_p)
{
    if (num_policies == 0 || num_capacities == 0)
        return KVIO_OK;
    for (size_t i = 0; i < num_policies; i++) {
        kvio_status_t status = kvio_evict_check_name(policies[i]);
        if (status != KVIO_OK)
            return status;
    }
    sweep_job_t *jobs = malloc(num_policies * num_capacities * sizeof(*jobs));
    if (jobs == NULL)
        return KVIO_ERR_NOMEM;
    size_t num_jobs = 0;
    /* lru's one pass knows one group: with a window, every policy replays
     * once per capacity. */
    bool one_pass = sim->window == 0 && sim->index == KVIO_KVCACHE_INDEX_HASH;
    for (size_t i = 0; one_pass && i < num_policies; i++) {
        if (kvio_evict_find(policies[i]) == &kvio_eviction_lru)
            jobs[num_jobs++] = (sweep_job_t){.policy = i, .capacity = ALL_CAPACITIES};
    }
    for (size_t i = 0; i < num_policies; i++) {
        if (one_pass && kvio_evict_find(policies[i]) == &kvio_eviction_lru)
            continue;
        for (size_t c = 0; c < num_capacities; c++)
            jobs[num_jobs++] = (sweep_job_t){.policy = i, .capacity = c};
    }
    sweep_t sweep = {
        .sim = sim,
        .policies = policies,
        .capacities = capacities,
        .num_capacities = num_capacities,
        .num_jobs = num_jobs,
        .jobs = jobs,
        .results = results_p,
        .status = KVIO_OK,
    };
    if (num_threads < 1)
        num_threads = 1;
    if (num_threads > num_jobs)
        num_threads = (unsigned)num_jobs;
    if (num_threads > 64)
        num_threads = 64;
    pthread_mutex_init(&sweep.lock, NULL);
    pthread_t threads[64];
    unsigned started = 0;
    for (; started + 1 < num_threads; started++) {
        if (pthread_create(&threads[started], NULL, sweep_worker, &sweep) != 0)
            break;
    }
    sweep_worker(&sweep);
    for (unsigned i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&sweep.lock);
    free(jobs);
    return sweep.status;
}
