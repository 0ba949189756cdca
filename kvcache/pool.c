/* The block pool with vLLM v1 semantics: null block 0, an intrusive free
 * queue whose order is the eviction order, lazy eviction (a freed block keeps
 * its hash until reused), reference counts, all-or-nothing allocation, and a
 * hash -> block multimap (earliest inserted wins) for prefix hits. */
#include "kvcache/kvcache_int.h"

#include "kvio/log.h"

#include <stdlib.h>
#include <string.h>

#define NO_BLOCK UINT32_MAX

/* How many hashes ahead a scan over a request's blocks prefetches slots:
 * consecutive lookups are independent misses in a table larger than L2. */
#define PREFETCH_AHEAD 8

/* Open-addressing map from a block hash to the earliest inserted block
 * holding it; later blocks with the same hash chain behind it. */
typedef struct hash_slot {
    uint32_t tag;   /* low half of the hash's slot key: most mismatches stop here, and the
                       home slot is tag & slot_mask (tables up to 2^32 slots) */
    uint32_t block; /* NO_BLOCK: empty; block_hash[block] holds the full hash */
} hash_slot_t;

struct kvio_kvcache {
    kvio_kvcache_config_t config;
    uint32_t num_blocks;
    uint32_t block_size;
    uint32_t *refcount;
    kvio_hash_t *block_hash;
    uint8_t *hashed;
    uint8_t *policy_known;    /* the policy has seen this block's content */
    uint32_t *same_hash_next; /* next block with the same hash, NO_BLOCK at the end */
    kvio_link_t *links;
    kvio_list_t free_queue;
    hash_slot_t *slots;
    size_t slot_mask;
    kvio_evict_t evict;
    bool queue_order;         /* the policy is the free queue (lru) */
    uint64_t index_version;   /* bumped whenever a hash enters or leaves the index */
    uint64_t epoch;           /* the model version blocks entering the index get */
    uint64_t *block_epoch;    /* per block: the epoch its hash entered the index */
    kvio_kvcache_metrics_t metrics;
};

struct kvio_kvreq {
    kvio_kvcache_t *cache;
    bool token_mode;
    uint32_t *tokens;
    size_t num_tokens, tokens_capacity;
    uint8_t *salt;
    size_t salt_len;
    kvio_hash_t *hashes; /* of full blocks, chained; the caller's when hashes_borrowed */
    size_t num_hashes, hashes_capacity;
    bool hashes_borrowed; /* hashes is the caller's (never written or freed here) */
    uint32_t *blocks;
    size_t num_blocks, blocks_capacity;
    size_t num_hashed_blocks; /* leading blocks whose hash is set */
};

/* ---- hash index --------------------------------------------------------- */

static uint64_t slot_key(kvio_hash_t hash)
{
    return hash.low ^ (hash.high >> 7);
}

static size_t slot_of(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    return (size_t)slot_key(hash) & cache->slot_mask;
}

static uint32_t tag_of(kvio_hash_t hash)
{
    return (uint32_t)slot_key(hash);
}

/* The slot an occupied entry hashes to, from its tag alone when the table
 * is small enough (no load of the block's hash, a cache miss). */
static size_t home_of(const kvio_kvcache_t *cache, const hash_slot_t *entry)
{
    if (cache->slot_mask <= UINT32_MAX)
        return entry->tag & cache->slot_mask;
    return slot_of(cache, cache->block_hash[entry->block]);
}

/* Starts loading the slot a hash lives in, for a lookup a few steps on. */
static void prefetch_slot(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    __builtin_prefetch(&cache->slots[slot_of(cache, hash)]);
}

/* Slots are 8 bytes (a tag and a block) so the table stays in cache; the
 * full hash is compared only when the tag matches. */
static size_t index_find_slot(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    size_t slot = slot_of(cache, hash);
    uint32_t tag = tag_of(hash);
    for (;;) {
        const hash_slot_t *entry = &cache->slots[slot];
        if (entry->block == NO_BLOCK ||
            (entry->tag == tag && kvio_hash_equal(cache->block_hash[entry->block], hash)))
            return slot;
        slot = (slot + 1) & cache->slot_mask;
    }
}

static uint32_t index_find(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    return cache->slots[index_find_slot(cache, hash)].block;
}

static void index_insert(kvio_kvcache_t *cache, uint32_t block, kvio_hash_t hash)
{
    size_t slot = index_find_slot(cache, hash);
    cache->same_hash_next[block] = NO_BLOCK;
    cache->block_hash[block] = hash;
    cache->hashed[block] = 1;
    cache->block_epoch[block] = cache->epoch;
    cache->index_version++;
    cache->policy_known[block] = 0;
    if (cache->slots[slot].block == NO_BLOCK) {
        cache->slots[slot].tag = tag_of(hash);
        cache->slots[slot].block = block;
        return;
    }
    uint32_t last = cache->slots[slot].block;
    while (cache->same_hash_next[last] != NO_BLOCK)
        last = cache->same_hash_next[last];
    cache->same_hash_next[last] = block;
}

static void index_delete_slot(kvio_kvcache_t *cache, size_t hole)
{
    cache->slots[hole].block = NO_BLOCK;
    for (size_t next = (hole + 1) & cache->slot_mask; cache->slots[next].block != NO_BLOCK;
         next = (next + 1) & cache->slot_mask) {
        size_t home = home_of(cache, &cache->slots[next]);
        bool movable = hole <= next ? (home <= hole || home > next) : (home <= hole && home > next);
        if (movable) {
            cache->slots[hole] = cache->slots[next];
            cache->slots[next].block = NO_BLOCK;
            hole = next;
        }
    }
}

static void index_remove(kvio_kvcache_t *cache, uint32_t block)
{
    size_t slot = index_find_slot(cache, cache->block_hash[block]);
    uint32_t head = cache->slots[slot].block;
    if (head == block) {
        if (cache->same_hash_next[block] != NO_BLOCK)
            cache->slots[slot].block = cache->same_hash_next[block];
        else
            index_delete_slot(cache, slot);
    } else {
        uint32_t previous = head;
        while (previous != NO_BLOCK && cache->same_hash_next[previous] != block)
            previous = cache->same_hash_next[previous];
        if (previous != NO_BLOCK)
            cache->same_hash_next[previous] = cache->same_hash_next[block];
    }
    cache->hashed[block] = 0;
    cache->index_version++;
}

/* ---- pool --------------------------------------------------------------- */

kvio_status_t kvio_kvcache_create(const kvio_kvcache_config_t *config, kvio_kvcache_t **cache_p)
{
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (config == NULL || config->num_blocks < 2 || config->block_size == 0 ||
        config->num_blocks == UINT32_MAX ||
        (config->free_order != KVIO_FREE_ORDER_APPEND &&
         config->free_order != KVIO_FREE_ORDER_PREPEND_UNHASHED)) {
        kvio_error("kvcache: need at least 2 blocks (one is the null block), a block size of at "
                   "least 1 and a known free order");
        return KVIO_ERR_INVALID;
    }
    kvio_kvcache_t *cache = calloc(1, sizeof(*cache));
    if (cache == NULL)
        return KVIO_ERR_NOMEM;
    cache->config = *config;
    cache->config.eviction = NULL;
    cache->num_blocks = config->num_blocks;
    cache->block_size = config->block_size;
    size_t n = config->num_blocks;
    size_t slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    cache->slot_mask = slots - 1;
    cache->refcount = calloc(n, sizeof(uint32_t));
    cache->block_hash = calloc(n, sizeof(kvio_hash_t));
    cache->hashed = calloc(n, 1);
    cache->block_epoch = calloc(n, sizeof(uint64_t));
    cache->policy_known = calloc(n, 1);
    cache->same_hash_next = malloc(n * sizeof(uint32_t));
    cache->links = malloc(n * sizeof(kvio_link_t));
    cache->slots = malloc(slots * sizeof(hash_slot_t));
    if (cache->refcount == NULL || cache->block_hash == NULL || cache->hashed == NULL ||
        cache->block_epoch == NULL || cache->policy_known == NULL || cache->same_hash_next == NULL || cache->links == NULL ||
        cache->slots == NULL)
        goto cleanup;
    for (size_t i = 0; i < slots; i++)
        cache->slots[i].block = NO_BLOCK;
    status = kvio_evict_init(&cache->evict, config->eviction, config->num_blocks,
                             config->num_blocks - 1);
    if (status != KVIO_OK)
        goto cleanup;
    cache->queue_order = (cache->evict.ops->caps & KVIO_EVICT_CAP_QUEUE_ORDER) != 0;
    kvio_list_init(&cache->free_queue);
    /* Block 0 is the null block: never free, never handed out. */
    cache->refcount[0] = 1;
    for (uint32_t block = 1; block < cache->num_blocks; block++)
        kvio_list_push_tail(&cache->free_queue, cache->links, block);
    *cache_p = cache;
    return KVIO_OK;

cleanup:
    kvio_kvcache_destroy(cache);
    return status;
}

void kvio_kvcache_destroy(kvio_kvcache_t *cache)
{
    if (cache == NULL)
        return;
    kvio_evict_fini(&cache->evict);
    free(cache->refcount);
    free(cache->block_hash);
    free(cache->hashed);
    free(cache->block_epoch);
    free(cache->policy_known);
    free(cache->same_hash_next);
    free(cache->links);
    free(cache->slots);
    free(cache);
}

uint32_t kvio_kvcache_num_usable_blocks(const kvio_kvcache_t *cache)
{
    return cache->num_blocks - 1;
}

uint32_t kvio_kvcache_num_free_blocks(const kvio_kvcache_t *cache)
{
    return cache->free_queue.length;
}

double kvio_kvcache_usage(const kvio_kvcache_t *cache)
{
    return 1.0 - (double)cache->free_queue.length / (double)(cache->num_blocks - 1);
}

void kvio_kvcache_free_queue(const kvio_kvcache_t *cache, size_t max_ids, uint32_t *ids_p,
                             size_t *num_ids_p)
{
    size_t count = 0;
    for (uint32_t block = cache->free_queue.head; block != KVIO_EVICT_NONE;
         block = cache->links[block].next) {
        if (count < max_ids)
            ids_p[count] = block;
        count++;
    }
    *num_ids_p = count;
}

uint32_t kvio_kvcache_block_refcount(const kvio_kvcache_t *cache, uint32_t block_id)
{
    return block_id < cache->num_blocks ? cache->refcount[block_id] : 0;
}

kvio_status_t kvio_kvcache_block_hash(const kvio_kvcache_t *cache, uint32_t block_id,
                                      kvio_hash_t *hash_p)
{
    if (block_id >= cache->num_blocks || !cache->hashed[block_id])
        return KVIO_ERR_NOT_FOUND;
    *hash_p = cache->block_hash[block_id];
    return KVIO_OK;
}

void kvio_kvcache_get_metrics(const kvio_kvcache_t *cache, kvio_kvcache_metrics_t *metrics_p)
{
    *metrics_p = cache->metrics;
}

/* Takes a free block for new content: the queue head with lru; otherwise an
 * unhashed block first (they sit at the head), else the policy's victim.
 * Reusing a cached block evicts its hash (lazy eviction). */
static uint32_t take_free_block(kvio_kvcache_t *cache)
{
    uint32_t block = cache->free_queue.head;
    if (!cache->queue_order && cache->hashed[block]) {
        block = cache->evict.ops->victim(cache->evict.priv);
    }
    kvio_list_unlink(&cache->free_queue, cache->links, block);
    if (cache->hashed[block]) {
        if (cache->config.on_evict != NULL)
            cache->config.on_evict(cache->config.hook_context, block, cache->block_hash[block]);
        index_remove(cache, block);
        cache->metrics.evictions++;
    }
    cache->refcount[block] = 1;
    cache->metrics.blocks_allocated++;
    return block;
}

/* Before taking the free-queue head when more blocks follow: starts loading
 * what evicting the next two heads will touch (each a cache miss in a large
 * pool: its links, its hash and flags, then its index slot). */
static void prefetch_free_ahead(const kvio_kvcache_t *cache)
{
    uint32_t head = cache->free_queue.head;
    uint32_t next = head != KVIO_EVICT_NONE ? cache->links[head].next : KVIO_EVICT_NONE;
    if (next == KVIO_EVICT_NONE)
        return;
    uint32_t after = cache->links[next].next;
    if (after != KVIO_EVICT_NONE) {
        __builtin_prefetch(&cache->links[after]);
        __builtin_prefetch(&cache->block_hash[after]);
        __builtin_prefetch(&cache->hashed[after]);
        __builtin_prefetch(&cache->refcount[after]);
    }
    if (cache->hashed[next])
        prefetch_slot(cache, cache->block_hash[next]);
}

/* A free block becomes evictable content for a non-queue policy. */
static void policy_add(kvio_kvcache_t *cache, uint32_t block)
{
    bool fresh = !cache->policy_known[block];
    cache->policy_known[block] = 1;
    cache->evict.ops->add(cache->evict.priv, block, cache->block_hash[block].low, fresh);
}

/* ---- requests ----------------------------------------------------------- */

static kvio_status_t grow(void **array, size_t *capacity, size_t needed, size_t element_size)
{
    if (needed <= *capacity)
        return KVIO_OK;
    size_t bigger = *capacity ? *capacity : 8;
    while (bigger < needed)
        bigger *= 2;
    void *resized = realloc(*array, bigger * element_size);
    if (resized == NULL)
        return KVIO_ERR_NOMEM;
    *array = resized;
    *capacity = bigger;
    return KVIO_OK;
}

void kvio_kvcache_hash_tokens(const uint32_t *tokens, size_t num_tokens, uint32_t block_size,
                              const void *salt, size_t salt_len, kvio_hash_t *hashes_p)
{
    size_t full = num_tokens / block_size;
    for (size_t i = 0; i < full; i++) {
        hashes_p[i] = kvio_hash_tokens(i == 0 ? NULL : &hashes_p[i - 1], tokens + i * block_size,
                                       block_size, i == 0 ? salt : NULL, i == 0 ? salt_len : 0);
    }
}

/* Token requests: hashes every newly full block, chained. */
static kvio_status_t hash_new_full_blocks(kvio_kvreq_t *req)
{
    uint32_t block_size = req->cache->block_size;
    size_t full = req->num_tokens / block_size;
    kvio_status_t status = grow((void **)&req->hashes, &req->hashes_capacity, full,
                                sizeof(kvio_hash_t));
    if (status != KVIO_OK)
        return status;
    for (size_t i = req->num_hashes; i < full; i++) {
        req->hashes[i] = kvio_hash_tokens(i == 0 ? NULL : &req->hashes[i - 1],
                                          req->tokens + i * block_size, block_size,
                                          i == 0 ? req->salt : NULL, i == 0 ? req->salt_len : 0);
    }
    req->num_hashes = full;
    return KVIO_OK;
}

static kvio_status_t request_new(kvio_kvcache_t *cache, bool token_mode, kvio_kvreq_t **req_p)
{
    kvio_kvreq_t *req = calloc(1, sizeof(*req));
    if (req == NULL)
        return KVIO_ERR_NOMEM;
    req->cache = cache;
    req->token_mode = token_mode;
    *req_p = req;
    return KVIO_OK;
}

kvio_status_t kvio_kvreq_create_tokens(kvio_kvcache_t *cache, const uint32_t *tokens,
                                       size_t num_tokens, const void *salt, size_t salt_len,
                                       kvio_kvreq_t **req_p)
{
    kvio_kvreq_t *req = NULL;
    kvio_status_t status = request_new(cache, true, &req);
    if (status != KVIO_OK)
        return status;
    if (salt != NULL && salt_len > 0) {
        req->salt = malloc(salt_len);
        if (req->salt == NULL) {
            status = KVIO_ERR_NOMEM;
            goto cleanup;
        }
        memcpy(req->salt, salt, salt_len);
        req->salt_len = salt_len;
    }
    status = kvio_kvreq_append_tokens(req, tokens, num_tokens);
    if (status != KVIO_OK)
        goto cleanup;
    *req_p = req;
    return KVIO_OK;

cleanup:
    kvio_kvreq_destroy(req);
    return status;
}

kvio_status_t kvio_kvreq_create_hashes(kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                                       size_t num_hashes, size_t num_tokens,
                                       kvio_kvreq_t **req_p)
{
    kvio_kvreq_t *req = NULL;
    kvio_status_t status = request_new(cache, false, &req);
    if (status != KVIO_OK)
        return status;
    status = kvio_kvreq_append_hashes(req, num_tokens, hashes, num_hashes);
    if (status != KVIO_OK) {
        kvio_kvreq_destroy(req);
        return status;
    }
    *req_p = req;
    return KVIO_OK;
}

kvio_status_t kvio_kvreq_create_borrowed(kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                                         size_t num_hashes, size_t num_tokens,
                                         kvio_kvreq_t **req_p)
{
    if (hashes == NULL && num_hashes > 0)
        return KVIO_ERR_INVALID;
    kvio_kvreq_t *req = NULL;
    kvio_status_t status = request_new(cache, false, &req);
    if (status != KVIO_OK)
        return status;
    /* The cast: a borrowed array is only read (appends copy it first). */
    req->hashes = (kvio_hash_t *)hashes;
    req->hashes_borrowed = true;
    status = kvio_kvreq_append_hashes(req, num_tokens, hashes, num_hashes);
    if (status != KVIO_OK) {
        kvio_kvreq_destroy(req);
        return status;
    }
    *req_p = req;
    return KVIO_OK;
}

kvio_status_t kvio_kvreq_append_tokens(kvio_kvreq_t *req, const uint32_t *tokens,
                                       size_t num_tokens)
{
    if (!req->token_mode || (tokens == NULL && num_tokens > 0))
        return KVIO_ERR_INVALID;
    kvio_status_t status = grow((void **)&req->tokens, &req->tokens_capacity,
                                req->num_tokens + num_tokens, sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    if (num_tokens > 0)
        memcpy(req->tokens + req->num_tokens, tokens, num_tokens * sizeof(uint32_t));
    req->num_tokens += num_tokens;
    return hash_new_full_blocks(req);
}

kvio_status_t kvio_kvreq_append_hashes(kvio_kvreq_t *req, size_t num_tokens,
                                       const kvio_hash_t *hashes, size_t num_hashes)
{
    if (req->token_mode || (hashes == NULL && num_hashes > 0))
        return KVIO_ERR_INVALID;
    size_t full = (req->num_tokens + num_tokens) / req->cache->block_size;
    if (req->num_hashes + num_hashes > full) {
        kvio_error("kvcache: %zu block hashes for %zu full blocks", req->num_hashes + num_hashes,
                   full);
        return KVIO_ERR_INVALID;
    }
    if (req->hashes_borrowed && (num_hashes == 0 || hashes == req->hashes + req->num_hashes)) {
        /* The caller's array continues: nothing to copy. */
        req->num_hashes += num_hashes;
        req->num_tokens += num_tokens;
        return KVIO_OK;
    }
    if (req->hashes_borrowed) {
        /* Not a continuation: from now on the request keeps its own copy. */
        kvio_hash_t *owned = NULL;
        size_t capacity = 0;
        kvio_status_t status = grow((void **)&owned, &capacity, req->num_hashes + num_hashes,
                                    sizeof(kvio_hash_t));
        if (status != KVIO_OK)
            return status;
        if (req->num_hashes > 0)
            memcpy(owned, req->hashes, req->num_hashes * sizeof(kvio_hash_t));
        req->hashes = owned;
        req->hashes_capacity = capacity;
        req->hashes_borrowed = false;
    }
    kvio_status_t status = grow((void **)&req->hashes, &req->hashes_capacity,
                                req->num_hashes + num_hashes, sizeof(kvio_hash_t));
    if (status != KVIO_OK)
        return status;
    if (num_hashes > 0)
        memcpy(req->hashes + req->num_hashes, hashes, num_hashes * sizeof(kvio_hash_t));
    req->num_hashes += num_hashes;
    req->num_tokens += num_tokens;
    return KVIO_OK;
}

size_t kvio_kvreq_num_tokens(const kvio_kvreq_t *req)
{
    return req->num_tokens;
}

void kvio_kvreq_blocks(const kvio_kvreq_t *req, const uint32_t **ids_p, size_t *num_ids_p)
{
    *ids_p = req->blocks;
    *num_ids_p = req->num_blocks;
}

kvio_status_t kvio_kvreq_block_hash(const kvio_kvreq_t *req, size_t index, kvio_hash_t *hash_p)
{
    if (index >= req->num_hashes)
        return KVIO_ERR_NOT_FOUND;
    *hash_p = req->hashes[index];
    return KVIO_OK;
}

void kvio_kvreq_destroy(kvio_kvreq_t *req)
{
    if (req == NULL)
        return;
    if (req->num_blocks > 0)
        kvio_kvcache_free(req->cache, req);
    free(req->tokens);
    free(req->salt);
    if (!req->hashes_borrowed)
        free(req->hashes);
    free(req->blocks);
    free(req);
}

/* ---- lookup, allocate, free --------------------------------------------- */

/* Hit blocks written to hits_p (may be NULL); the last token is never
 * covered. */
static size_t find_hits(const kvio_kvcache_t *cache, const kvio_kvreq_t *req, uint32_t *hits_p)
{
    if (!cache->config.enable_prefix_caching || req->num_tokens == 0)
        return 0;
    size_t max_blocks = (req->num_tokens - 1) / cache->block_size;
    if (max_blocks > req->num_hashes)
        max_blocks = req->num_hashes;
    size_t count = 0;
    for (size_t i = 0; i < PREFETCH_AHEAD && i < max_blocks; i++)
        prefetch_slot(cache, req->hashes[i]);
    for (; count < max_blocks; count++) {
        if (count + PREFETCH_AHEAD < max_blocks)
            prefetch_slot(cache, req->hashes[count + PREFETCH_AHEAD]);
        uint32_t block = index_find(cache, req->hashes[count]);
        if (block == NO_BLOCK)
            break;
        if (hits_p != NULL)
            hits_p[count] = block;
    }
    return count;
}

void kvio_kvcache_set_epoch(kvio_kvcache_t *cache, uint64_t epoch)
{
    cache->epoch = epoch;
}

uint32_t kvio_kvcache_reset_prefix(kvio_kvcache_t *cache,
                                   void (*dropped)(void *context, kvio_hash_t hash),
                                   void *context)
{
    uint32_t count = 0;
    for (uint32_t block = 1; block < cache->num_blocks; block++) {
        if (!cache->hashed[block])
            continue;
        /* A free cached block stays in the free queue, unhashed (with a
         * policy other than lru it leaves the policy's candidates for the
         * queue's head, where unhashed blocks are taken first); a held one
         * stays with its request. */
        if (cache->refcount[block] == 0 && !cache->queue_order) {
            cache->evict.ops->remove(cache->evict.priv, block);
            kvio_list_unlink(&cache->free_queue, cache->links, block);
            kvio_list_push_head(&cache->free_queue, cache->links, block);
        }
        if (dropped != NULL)
            dropped(context, cache->block_hash[block]);
        index_remove(cache, block);
        count++;
    }
    cache->metrics.prefix_resets++;
    cache->metrics.prefix_reset_blocks += count;
    return count;
}

uint64_t kvio_kvcache_index_version(const kvio_kvcache_t *cache)
{
    return cache->index_version;
}

size_t kvio_kvcache_lookup(const kvio_kvcache_t *cache, const kvio_kvreq_t *req)
{
    return find_hits(cache, req, NULL) * cache->block_size;
}

kvio_status_t kvio_kvcache_allocate(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t num_tokens,
                                    size_t *num_hit_tokens_p)
{
    if (req->cache != cache || num_tokens > req->num_tokens)
        return KVIO_ERR_INVALID;
    uint32_t block_size = cache->block_size;
    bool first = req->num_blocks == 0;
    size_t num_hits = 0, hits_in_queue = 0;
    /* Hit blocks go straight into the request's block array; they count
     * only once num_blocks covers them. */
    size_t hit_room = first ? (req->num_tokens + block_size - 1) / block_size : 0;
    kvio_status_t status = grow((void **)&req->blocks, &req->blocks_capacity, hit_room,
                                sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    if (first) {
        num_hits = find_hits(cache, req, req->blocks);
        for (size_t i = 0; i < num_hits; i++)
            hits_in_queue += cache->refcount[req->blocks[i]] == 0;
    }
    size_t covered = num_tokens > num_hits * block_size ? num_tokens : num_hits * block_size;
    size_t needed_blocks = (covered + block_size - 1) / block_size;
    size_t have_blocks = first ? num_hits : req->num_blocks;
    size_t new_blocks = needed_blocks > have_blocks ? needed_blocks - have_blocks : 0;
    if (new_blocks + hits_in_queue > cache->free_queue.length) {
        cache->metrics.allocations_refused++;
        return KVIO_ERR_NO_SPACE;
    }
    status = grow((void **)&req->blocks, &req->blocks_capacity, needed_blocks, sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;

    for (size_t i = 0; i < num_hits; i++) {
        uint32_t block = req->blocks[i];
        if (cache->refcount[block] == 0) {
            kvio_list_unlink(&cache->free_queue, cache->links, block);
            if (!cache->queue_order)
                cache->evict.ops->remove(cache->evict.priv, block);
        }
        cache->refcount[block]++;
        if (!cache->queue_order)
            cache->evict.ops->access(cache->evict.priv, block);
    }
    if (first) {
        req->num_blocks = num_hits;
        req->num_hashed_blocks = num_hits;
    }
    for (size_t i = 0; i < new_blocks; i++) {
        if (i + 1 < new_blocks)
            prefetch_free_ahead(cache);
        req->blocks[req->num_blocks++] = take_free_block(cache);
    }

    if (cache->config.enable_prefix_caching) {
        size_t full = covered / block_size;
        if (full > req->num_hashes)
            full = req->num_hashes;
        for (size_t i = req->num_hashed_blocks; i < full && i < req->num_hashed_blocks +
                                                                   PREFETCH_AHEAD; i++)
            prefetch_slot(cache, req->hashes[i]);
        for (size_t i = req->num_hashed_blocks; i < full; i++) {
            if (i + PREFETCH_AHEAD < full)
                prefetch_slot(cache, req->hashes[i + PREFETCH_AHEAD]);
            index_insert(cache, req->blocks[i], req->hashes[i]);
            if (cache->config.on_cached != NULL)
                cache->config.on_cached(cache->config.hook_context, req->blocks[i],
                                        req->hashes[i]);
        }
        if (full > req->num_hashed_blocks)
            req->num_hashed_blocks = full;
    }
    if (first) {
        for (size_t i = 0; i < num_hits; i++)
            if (cache->block_epoch[req->blocks[i]] < cache->epoch)
                cache->metrics.prefix_stale_hits_tokens += block_size;
        cache->metrics.prefix_queries_tokens += req->num_tokens;
        cache->metrics.prefix_queries_blocks += req->num_tokens / block_size;
        cache->metrics.prefix_hits_tokens += num_hits * block_size;
        cache->metrics.prefix_hits_blocks += num_hits;
    }
    double usage = kvio_kvcache_usage(cache);
    if (usage > cache->metrics.peak_usage)
        cache->metrics.peak_usage = usage;
    if (num_hit_tokens_p != NULL)
        *num_hit_tokens_p = num_hits * block_size;
    return KVIO_OK;
}

void kvio_kvcache_free(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    /* Unhashed blocks go to the head with prepend_unhashed (and always with
     * a non-queue policy, so that they are reused before cached ones). */
    bool prepend = cache->config.enable_prefix_caching &&
                   (cache->config.free_order == KVIO_FREE_ORDER_PREPEND_UNHASHED ||
                    !cache->queue_order);
    for (size_t i = req->num_blocks; i-- > 0;) {
        uint32_t block = req->blocks[i];
        if (--cache->refcount[block] > 0)
            continue;
        cache->metrics.blocks_freed++;
        if (cache->hashed[block]) {
            kvio_list_push_tail(&cache->free_queue, cache->links, block);
            if (!cache->queue_order)
                policy_add(cache, block);
        } else if (!prepend) {
            kvio_list_push_tail(&cache->free_queue, cache->links, block);
        }
    }
    /* Freed unhashed blocks go to the head as a group, in the order they
     * were freed (reverse): pushing them in forward order does that. */
    if (prepend) {
        for (size_t i = 0; i < req->num_blocks; i++) {
            uint32_t block = req->blocks[i];
            if (cache->refcount[block] == 0 && !cache->hashed[block])
                kvio_list_push_head(&cache->free_queue, cache->links, block);
        }
    }
    req->num_blocks = 0;
    req->num_hashed_blocks = 0;
}
