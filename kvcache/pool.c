/* The block pool with vLLM v1 semantics: null block 0, a free queue whose
 * order is the eviction order, lazy eviction (a freed block keeps its hash
 * until reused), reference counts, all-or-nothing allocation, and a hash ->
 * block multimap (earliest inserted wins) for prefix hits. Laid out for long
 * runs of blocks: a block's state is one 32-byte record, which also says
 * where its index entry is; the free queue is a ring of block ids, so the
 * blocks an allocation will take are known ahead and their records and
 * index buckets are loaded while earlier ones are worked on. */
#include "kvcache/kvcache_int.h"

#include "kvio/array.h"
#include "kvio/log.h"
#include "kvio/window.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define NO_BLOCK UINT32_MAX

/* A ring position a block does not occupy (not in the free queue), and a
 * ring entry whose block left the queue out of order. */
#define NO_POSITION UINT32_MAX
#define TOMBSTONE UINT32_MAX

/* How many blocks ahead a run over blocks starts loading what it will
 * touch: consecutive blocks are independent misses in tables larger than
 * L2. */
#define PREFETCH_AHEAD 16

/* Freeing does so little per block that its records (cold: the blocks were
 * taken long ago) must be asked for much further ahead to arrive in time. */
#define FREE_PREFETCH_AHEAD 64

/* Helpers whose only effect is a prefetch must be inlined: GCC otherwise
 * finds them free of side effects and drops the calls. */
#define PREFETCH_HELPER static inline __attribute__((always_inline)) void

/* The hash index: a map from a block hash to the earliest block holding it,
 * in buckets of one cache line. An entry goes to its hash's home bucket, or
 * when that is full to the next one with room; a bucket counts the entries
 * that passed it (F14's overflow count, exact: it is taken back when the
 * entry leaves), so a search stops at the first bucket that none passed.
 * Which entries of a bucket hold a block is a byte of valid bits beside the
 * table, with the overflow counts: those arrays are small enough to stay in
 * cache, so taking an entry out (an eviction) clears a bit there and never
 * touches the bucket's line; the line is read only to search and written
 * only to add. A bucket is searched for a tag in a few vector instructions,
 * with no branch per entry. The table starts as zeroed memory (no valid
 * entries), whose pages cost nothing until a hash lands in them (a thousand
 * small engines touch little of theirs).
 *
 * The table holds each hash once. Other blocks holding a hash already in
 * it (requests that computed the same block at the same time: vLLM keeps
 * them all) hang off its entry's block in a ring of duplicates, in the
 * order they came (duplicate_link_t). So the table is at most half full
 * whatever the stream (it has two entries per block), every insertion finds
 * room, and no run of equal hashes can make every bucket look passed (it
 * did, when each duplicate took an entry of its own: a search then never
 * ended). */
#define BUCKET_ENTRIES 8

/* Index entries per block in the pool (a power of two). */
#define INDEX_ENTRIES_PER_BLOCK 2

typedef struct index_bucket {
    uint32_t tags[BUCKET_ENTRIES];   /* meaningful where the entry is valid */
    uint32_t blocks[BUCKET_ENTRIES];
} index_bucket_t;

/* A bucket's valid bits with every entry taken. */
#define BUCKET_FULL ((1u << BUCKET_ENTRIES) - 1)

/* A block that holds a hash another block holds too: its neighbours in the
 * ring of blocks holding that hash (the entry's block first, then in the
 * order they were hashed). Written only for blocks in such a ring. */
typedef struct duplicate_link {
    uint32_t next, previous;
} duplicate_link_t;

/* Everything about one block that allocating, evicting, hashing, freeing
 * and hitting it touches, in half a cache line. */
typedef struct block_record {
    kvio_hash_t hash;        /* valid while hashed */
    uint32_t refcount;
    uint32_t position;       /* its entry in the free ring, NO_POSITION when not free */
    uint32_t entry;          /* while hashed and first of its hash, its index entry:
                                bucket * BUCKET_ENTRIES + index */
    uint8_t hashed;          /* its hash is in the index */
    uint8_t policy_known;    /* the policy has seen this block's content */
    uint8_t watch;           /* the watch stamp of the kept lookup that last hit it */
    uint8_t window_group : 1; /* hashed by a hybrid pool's window group (no hooks) */
    uint8_t duplicated : 1;   /* in a ring of blocks holding one hash (duplicates) */
    uint8_t duplicate : 1;    /* in that ring, and not the first (it has no entry) */
} block_record_t;

/* The free queue: block ids from head to tail in a power-of-two ring, with
 * tombstones where a block left from the middle (a hit on a free block, a
 * policy's victim). Positions count up and wrap; the ring is compacted when
 * live entries and tombstones fill it. */
/* The ring's entries and the records' positions are stored XOR their
 * values in a new pool (blocks 1..n-1 free in order at positions 0..n-2),
 * so a new pool is all zeros: calloc'd pages the kernel maps only when a
 * block is first used. A simulate run's pools of hundreds of thousands of
 * blocks, most never touched, cost almost nothing until they are. The
 * positions past n-2 are free slots, written before they are read (only a
 * prefetch hint reads past the tail), so the same XOR, with no bound to
 * check, serves them. */
typedef struct free_ring {
    uint32_t *entries;   /* stored: entry ^ ring_initial(index) */
    uint32_t mask;
    uint64_t head, tail; /* entries [head, tail) */
    uint32_t length;     /* live entries (free blocks) */
} free_ring_t;

struct kvio_kvcache {
    kvio_kvcache_config_t config;
    uint32_t num_blocks;
    uint32_t block_size;
    block_record_t *blocks;   /* first in one allocation with the ring */
    size_t tables_bytes;      /* of that allocation (kvio_zeroed_alloc) */
    free_ring_t free_queue;
    void *index_memory;       /* the buckets, the overflow counts and the valid bits */
    size_t index_bytes;       /* of index_memory (kvio_zeroed_alloc) */
    index_bucket_t *buckets;
    uint32_t *overflow;       /* per bucket: entries stored past it that probed it */
    uint8_t *valid;           /* per bucket: bit i set where entry i holds a block */
    size_t bucket_mask;
    duplicate_link_t *duplicates; /* per block (zeroed: only rings touch theirs) */
    kvio_evict_t evict;
    bool queue_order;         /* the policy is the free queue (lru) */
    /* index radix: SGLang's RadixCache (kvcache/radix.c) over the pool's
     * blocks: the cached blocks are its pages, a lookup is its match, a
     * running request locks its path, and a cached block is evicted only
     * as part of a leaf the tree's policy picks. NULL with the hash index. */
    kvio_radix_t *tree;
    uint32_t *scratch;        /* index radix: the tree's blocks of a request's pages */
    size_t scratch_capacity;
    uint64_t index_version;   /* bumped whenever a hash enters or leaves the index */
    uint64_t epoch;           /* the model version blocks entering the index get */
    bool epochs_used;         /* an epoch other than 0 was ever set (block_epoch written) */
    uint64_t *block_epoch;    /* per block: the epoch its hash entered the index */
    kvio_kvcache_metrics_t metrics;
    /* The one kept lookup the pool watches: its hit blocks carry watch_stamp,
     * and evicting any of them breaks it (kept_lookup). */
    const kvio_kvreq_t *watched;
    const kvio_kvreq_t *last_looked_up; /* the request kept_lookup saw last */
    uint8_t watch_stamp;
    bool watch_broken;
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
    /* The last lookup while the request held no blocks: its hit blocks are
     * blocks[0, lookup_hits), valid while the index is at lookup_version, or
     * while the pool watches it unbroken (kept_lookup). */
    bool lookup_kept;
    size_t lookup_hits;
    uint64_t lookup_version; /* the index's version when it was last searched */
    /* Hybrid pools (config.window_tokens): the request's table in the
     * window group, a request of its own whose hashes are window_hash of
     * this one's (synced before each use); NULL in a pool of one group. */
    struct kvio_kvreq *window;
    size_t num_null; /* leading null entries (block 0) of a window group's table */
    /* index radix: the tree node the request locks (its cached path) and
     * the tree's generation then; radix_locked false: none. */
    bool radix_locked;
    kvio_radix_node_t radix_node;
    uint64_t radix_generation;
};

/* ---- free ring ---------------------------------------------------------- */

/* What entry index held in a new pool: block index + 1 (below n-1; past
 * it a free slot, whatever it held). */
static inline uint32_t ring_initial(uint64_t index)
{
    return (uint32_t)index + 1;
}

static inline uint32_t ring_get(const free_ring_t *ring, uint64_t index)
{
    return ring->entries[index] ^ ring_initial(index);
}

static inline void ring_set(free_ring_t *ring, uint64_t index, uint32_t block)
{
    ring->entries[index] = block ^ ring_initial(index);
}

/* Where block sat in a new pool's ring: block - 1 (the null block 0: none,
 * 0 - 1 being NO_POSITION). */
static inline uint32_t position_initial(uint32_t block)
{
    return block - 1;
}

static inline uint32_t position_get(const block_record_t *record, uint32_t block)
{
    return record->position ^ position_initial(block);
}

static inline void position_set(block_record_t *record, uint32_t block, uint32_t position)
{
    record->position = position ^ position_initial(block);
}

/* Squeezes the tombstones out, keeping the order. Called when the ring is
 * full; live entries are at most half of it, so this runs at most once per
 * half a ring of operations. */
static __attribute__((noinline)) void ring_compact(kvio_kvcache_t *cache)
{
    free_ring_t *ring = &cache->free_queue;
    uint64_t write = ring->head;
    for (uint64_t read = ring->head; read != ring->tail; read++) {
        uint32_t block = ring_get(ring, read & ring->mask);
        if (block == TOMBSTONE)
            continue;
        ring_set(ring, write & ring->mask, block);
        position_set(&cache->blocks[block], block, (uint32_t)(write & ring->mask));
        write++;
    }
    ring->tail = write;
}

static inline bool ring_full(const free_ring_t *ring)
{
    return ring->tail - ring->head == (uint64_t)ring->mask + 1;
}

static inline void ring_push_tail(kvio_kvcache_t *cache, uint32_t block)
{
    free_ring_t *ring = &cache->free_queue;
    if (ring_full(ring))
        ring_compact(cache);
    uint32_t position = (uint32_t)(ring->tail++ & ring->mask);
    ring_set(ring, position, block);
    position_set(&cache->blocks[block], block, position);
    ring->length++;
}

static void ring_push_head(kvio_kvcache_t *cache, uint32_t block)
{
    free_ring_t *ring = &cache->free_queue;
    if (ring_full(ring))
        ring_compact(cache);
    uint32_t position = (uint32_t)(--ring->head & ring->mask);
    ring_set(ring, position, block);
    position_set(&cache->blocks[block], block, position);
    ring->length++;
}

/* Takes a free block out of the queue wherever it is. */
static void ring_unlink(kvio_kvcache_t *cache, uint32_t block)
{
    free_ring_t *ring = &cache->free_queue;
    ring_set(ring, position_get(&cache->blocks[block], block), TOMBSTONE);
    position_set(&cache->blocks[block], block, NO_POSITION);
    ring->length--;
}

/* The head block (the queue is not empty); leading tombstones are dropped. */
static uint32_t ring_head(kvio_kvcache_t *cache)
{
    free_ring_t *ring = &cache->free_queue;
    while (ring_get(ring, ring->head & ring->mask) == TOMBSTONE)
        ring->head++;
    return ring_get(ring, ring->head & ring->mask);
}

/* Removes and returns the head block (the queue is not empty). */
static uint32_t ring_pop_head(kvio_kvcache_t *cache)
{
    free_ring_t *ring = &cache->free_queue;
    uint32_t block = ring_head(cache);
    ring->head++;
    position_set(&cache->blocks[block], block, NO_POSITION);
    ring->length--;
    return block;
}

/* ---- hash index --------------------------------------------------------- */

static inline uint64_t slot_key(kvio_hash_t hash)
{
    return hash.low ^ (hash.high >> 7);
}

/* The home bucket takes the key's low bits, the tag its high half. */
static inline size_t bucket_of(size_t bucket_mask, kvio_hash_t hash)
{
    return (size_t)slot_key(hash) & bucket_mask;
}

static inline uint32_t tag_of(kvio_hash_t hash)
{
    return (uint32_t)(slot_key(hash) >> 32);
}

/* Bit i set where values[i] == value. */
static inline unsigned match_mask(const uint32_t values[BUCKET_ENTRIES], uint32_t value)
{
#if defined(__SSE2__)
    __m128i key = _mm_set1_epi32((int)value);
    __m128i low = _mm_cmpeq_epi32(_mm_load_si128((const __m128i *)values), key);
    __m128i high = _mm_cmpeq_epi32(_mm_load_si128((const __m128i *)(values + 4)), key);
    return (unsigned)_mm_movemask_epi8(_mm_packs_epi16(_mm_packs_epi32(low, high),
                                                       _mm_setzero_si128()));
#else
    unsigned mask = 0;
    for (unsigned i = 0; i < BUCKET_ENTRIES; i++)
        mask |= (unsigned)(values[i] == value) << i;
    return mask;
#endif
}

/* Starts loading the bucket a hash lives in, for a search a few steps on. */
PREFETCH_HELPER prefetch_bucket(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    __builtin_prefetch(&cache->buckets[bucket_of(cache->bucket_mask, hash)]);
}

/* Where the table holds hash (bucket * BUCKET_ENTRIES + index), or NO_BLOCK.
 * The full hash is compared only where the tag matches. The overflow
 * counts are exact, so a search past every bucket cannot happen; it is
 * bounded anyway, so that no table state can make it spin. */
static inline __attribute__((always_inline)) uint32_t
table_find(const index_bucket_t *buckets, const uint32_t *overflow, const uint8_t *valid,
           size_t bucket_mask, const block_record_t *blocks, kvio_hash_t hash)
{
    size_t bucket = bucket_of(bucket_mask, hash);
    uint32_t tag = tag_of(hash);
    for (size_t visited = 0; visited <= bucket_mask; visited++) {
        const index_bucket_t *entries = &buckets[bucket];
        for (unsigned match = match_mask(entries->tags, tag) & valid[bucket]; match != 0;
             match &= match - 1) {
            unsigned entry = (unsigned)__builtin_ctz(match);
            if (kvio_hash_equal(blocks[entries->blocks[entry]].hash, hash))
                return (uint32_t)(bucket * BUCKET_ENTRIES + entry);
        }
        if (overflow[bucket] == 0)
            break;
        bucket = (bucket + 1) & bucket_mask;
    }
    return NO_BLOCK;
}

/* The first block holding hash (the earliest hashed of those that do), or
 * NO_BLOCK. */
static uint32_t index_find(const kvio_kvcache_t *cache, kvio_hash_t hash)
{
    uint32_t entry = table_find(cache->buckets, cache->overflow, cache->valid, cache->bucket_mask,
                                cache->blocks, hash);
    return entry == NO_BLOCK ? NO_BLOCK
                             : cache->buckets[entry / BUCKET_ENTRIES].blocks[entry % BUCKET_ENTRIES];
}

/* Counts an entry homed at bucket home and stored in bucket last as having
 * passed the buckets between (step +1), or no longer (step -1). */
static void count_passes(uint32_t *overflow, size_t bucket_mask, size_t home, size_t last,
                         int step)
{
    for (size_t bucket = home; bucket != last; bucket = (bucket + 1) & bucket_mask)
        overflow[bucket] = (uint32_t)((int64_t)overflow[bucket] + step);
}

/* Puts block into the ring of blocks holding its hash, whose first block
 * (the table's) is first; last in the ring, which is the order hashed. */
static void duplicate_append(kvio_kvcache_t *cache, uint32_t first, uint32_t block)
{
    duplicate_link_t *links = cache->duplicates;
    block_record_t *head = &cache->blocks[first];
    if (!head->duplicated) {
        links[first] = (duplicate_link_t){.next = first, .previous = first};
        head->duplicated = 1;
    }
    uint32_t last = links[first].previous;
    links[block] = (duplicate_link_t){.next = first, .previous = last};
    links[last].next = block;
    links[first].previous = block;
    cache->blocks[block].duplicated = 1;
    cache->blocks[block].duplicate = 1;
}

/* The table's arrays, read from the pool once for a run of blocks: a
 * record's byte fields may alias anything, so each store to one made the
 * compiler load them all again for the next block. */
typedef struct table_view {
    index_bucket_t *buckets;
    uint32_t *overflow;
    uint8_t *valid;
    size_t bucket_mask;
    block_record_t *blocks;
} table_view_t;

static inline table_view_t table_view(const kvio_kvcache_t *cache)
{
    return (table_view_t){.buckets = cache->buckets, .overflow = cache->overflow,
                          .valid = cache->valid, .bucket_mask = cache->bucket_mask,
                          .blocks = cache->blocks};
}

/* Adds block under hash: the table's entry when no block holds hash yet,
 * else the end of the ring of those that do (view: table_view(cache)). */
static inline __attribute__((always_inline)) void
table_insert(kvio_kvcache_t *cache, table_view_t view, uint32_t block, kvio_hash_t hash)
{
    index_bucket_t *buckets = view.buckets;
    uint32_t *overflow = view.overflow;
    uint8_t *valid = view.valid;
    const size_t bucket_mask = view.bucket_mask;
    block_record_t *record = &view.blocks[block];
    size_t home = bucket_of(bucket_mask, hash);
    uint32_t tag = tag_of(hash);
    /* The home bucket's tags answer most inserts (no entry of the tag
     * there, none passed it): no search. */
    if ((match_mask(buckets[home].tags, tag) & valid[home]) != 0 || overflow[home] != 0) {
        uint32_t entry = table_find(buckets, overflow, valid, bucket_mask, view.blocks, hash);
        if (entry != NO_BLOCK) {
            duplicate_append(cache, buckets[entry / BUCKET_ENTRIES].blocks[entry % BUCKET_ENTRIES],
                             block);
            return;
        }
    }
    /* The table is at most half full (one entry per hash, two per block):
     * a bucket with room comes. */
    size_t bucket = home;
    while (valid[bucket] == BUCKET_FULL)
        bucket = (bucket + 1) & bucket_mask;
    unsigned entry = (unsigned)__builtin_ctz(~valid[bucket] & BUCKET_FULL);
    buckets[bucket].tags[entry] = tag;
    buckets[bucket].blocks[entry] = block;
    valid[bucket] = (uint8_t)(valid[bucket] | 1u << entry);
    record->entry = (uint32_t)(bucket * BUCKET_ENTRIES + entry);
    if (bucket != home)
        count_passes(overflow, bucket_mask, home, bucket, +1);
}

/* A block's hash enters the index: its record says so. */
static inline void record_hashed(block_record_t *record, kvio_hash_t hash)
{
    record->hash = hash;
    record->hashed = 1;
    record->policy_known = 0;
    record->window_group = 0;
}

static void index_insert(kvio_kvcache_t *cache, uint32_t block, kvio_hash_t hash)
{
    /* The record's hash first: a search of the table compares it. */
    record_hashed(&cache->blocks[block], hash);
    table_insert(cache, table_view(cache), block, hash);
    if (cache->epochs_used)
        cache->block_epoch[block] = cache->epoch;
    cache->index_version++;
}

/* Takes a block out of the ring of blocks holding its hash. The first one
 * hands the table's entry to the next (no search: its record says where
 * the entry is). A ring left with one block is no ring. */
static void duplicate_remove(kvio_kvcache_t *cache, uint32_t block)
{
    duplicate_link_t *links = cache->duplicates;
    block_record_t *blocks = cache->blocks;
    uint32_t next = links[block].next, previous = links[block].previous;
    links[previous].next = next;
    links[next].previous = previous;
    if (!blocks[block].duplicate) {
        uint32_t entry = blocks[block].entry;
        cache->buckets[entry / BUCKET_ENTRIES].blocks[entry % BUCKET_ENTRIES] = next;
        blocks[next].entry = entry;
        blocks[next].duplicate = 0;
    }
    if (next == previous) /* one block left */
        blocks[next].duplicated = 0;
    blocks[block].duplicated = 0;
    blocks[block].duplicate = 0;
}

/* Takes a hashed block out of the index. A block alone with its hash
 * leaves its entry, where its record says it is: no search, nothing
 * moves, and only its valid bit changes, not the bucket's line; an entry
 * stored past its hash's home bucket uncounts the buckets it passed. */
static inline __attribute__((always_inline)) void table_remove(kvio_kvcache_t *cache,
                                                                table_view_t view, uint32_t block)
{
    const block_record_t *record = &view.blocks[block];
    if (record->duplicated) {
        duplicate_remove(cache, block);
        return;
    }
    size_t bucket = record->entry / BUCKET_ENTRIES;
    unsigned entry = record->entry % BUCKET_ENTRIES;
    view.valid[bucket] = (uint8_t)(view.valid[bucket] & ~(1u << entry));
    size_t home = bucket_of(view.bucket_mask, record->hash);
    if (home != bucket)
        count_passes(view.overflow, view.bucket_mask, home, bucket, -1);
}

static void index_remove(kvio_kvcache_t *cache, uint32_t block)
{
    block_record_t *record = &cache->blocks[block];
    if (record->watch == cache->watch_stamp)
        cache->watch_broken = true;
    table_remove(cache, table_view(cache), block);
    record->hashed = 0;
    cache->index_version++;
}

/* ---- pool --------------------------------------------------------------- */

/* Per block, at most, of the eviction policies' own state (arc's lists and
 * ghost keys are the largest). */
#define EVICTION_BYTES_PER_BLOCK 48

/* What count items of size bytes cost when at most used of them are
 * written, a page at a time (a new table is zero pages). */
static uint64_t touched(uint64_t count, uint64_t size, uint64_t used, uint64_t per_use)
{
    uint64_t all = count * size, some = used * per_use + 4096;
    return some < all ? some : all;
}

static void tree_released(void *context, uint32_t block, kvio_hash_t hash);

uint64_t kvio_kvcache_footprint(uint32_t num_blocks, int index, uint64_t used_blocks)
{
    uint64_t n = num_blocks, buckets = 2, ring = 16;
    while (buckets * BUCKET_ENTRIES < INDEX_ENTRIES_PER_BLOCK * n)
        buckets *= 2;
    while (ring < 2 * n)
        ring *= 2;
    /* A used block writes its record and epoch, one ring entry when freed,
     * and its hash lands in one index bucket: a page of its own at worst.
     * Fewer used than the pool holds means the pool never filled, so
     * nothing was preempted to be allocated again. */
    uint64_t u = used_blocks < n ? used_blocks : n;
    uint64_t bytes = touched(n, sizeof(block_record_t), u, sizeof(block_record_t)) +
                     touched(n, sizeof(uint64_t), u, sizeof(uint64_t)) +
                     n * EVICTION_BYTES_PER_BLOCK + /* some policies fill theirs at once */
                     touched(ring, sizeof(uint32_t), u, sizeof(uint32_t)) +
                     touched(buckets, sizeof(index_bucket_t) + sizeof(uint32_t) + 1, u, 4096) +
                     touched(n, sizeof(duplicate_link_t), u, sizeof(duplicate_link_t));
    if (index == KVIO_KVCACHE_INDEX_RADIX)
        bytes += kvio_radix_footprint(num_blocks, u);
    return bytes;
}

kvio_status_t kvio_kvcache_create(const kvio_kvcache_config_t *config, kvio_kvcache_t **cache_p)
{
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (config == NULL || config->num_blocks < 2 || config->block_size == 0 ||
        config->num_blocks == UINT32_MAX || config->num_blocks > (UINT32_MAX >> 2) ||
        (config->free_order != KVIO_FREE_ORDER_APPEND &&
         config->free_order != KVIO_FREE_ORDER_PREPEND_UNHASHED) ||
        (config->index != KVIO_KVCACHE_INDEX_HASH && config->index != KVIO_KVCACHE_INDEX_RADIX)) {
        kvio_error("kvcache: need at least 2 blocks (one is the null block) and at most 2^30, a "
                   "block size of at least 1, a known free order and a known index");
        return KVIO_ERR_INVALID;
    }
    if (config->window_tokens > 0 && config->index == KVIO_KVCACHE_INDEX_RADIX) {
        kvio_error("kvcache: sliding-window groups take the hash index, not the radix index");
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
    /* At most half full, with every block hashed: a bucket overflows about
     * once in 250; zeroed memory (empty entries) costs only the pages hashes
     * reach. */
    size_t buckets = 2;
    while (buckets * BUCKET_ENTRIES < INDEX_ENTRIES_PER_BLOCK * n)
        buckets *= 2;
    cache->bucket_mask = buckets - 1;
    /* The ring holds every free block plus as many tombstones. */
    size_t ring = 16;
    while (ring < 2 * n)
        ring *= 2;
    cache->free_queue.mask = (uint32_t)(ring - 1);
    /* Records and ring in one allocation; the index zeroed on its own. */
    size_t records_bytes = (n * sizeof(block_record_t) + 63) / 64 * 64;
    size_t ring_bytes = ring * sizeof(uint32_t);
    /* Zeroed, a new pool (see free_ring_t), page-aligned. */
    cache->tables_bytes = records_bytes + ring_bytes;
    unsigned char *tables = kvio_zeroed_alloc(cache->tables_bytes);
    /* Zeroed (no valid entries, no overflow), the buckets on cache lines. */
    cache->index_bytes =
        buckets * (sizeof(index_bucket_t) + sizeof(uint32_t) + 1) + n * sizeof(duplicate_link_t) + 63;
    cache->index_memory = kvio_zeroed_alloc(cache->index_bytes);
    cache->block_epoch = kvio_zeroed_alloc(n * sizeof(uint64_t));
    if (tables == NULL || cache->index_memory == NULL || cache->block_epoch == NULL)
        goto cleanup;
    cache->buckets = (index_bucket_t *)(((uintptr_t)cache->index_memory + 63) & ~(uintptr_t)63);
    cache->overflow = (uint32_t *)(cache->buckets + buckets);
    cache->duplicates = (duplicate_link_t *)(cache->overflow + buckets);
    cache->valid = (uint8_t *)(cache->duplicates + n);
    cache->blocks = (block_record_t *)tables;
    cache->free_queue.entries = (uint32_t *)(tables + records_bytes);
    if (config->index == KVIO_KVCACHE_INDEX_RADIX) {
        /* The tree keeps the policy (over its leaves); the pool none. */
        kvio_radix_config_t tree_config = {
            .num_blocks = config->num_blocks, .block_size = config->block_size,
            .eviction = config->eviction, .external_blocks = true,
            .on_released = tree_released, .hook_context = cache};
        status = kvio_radix_create(&tree_config, &cache->tree);
        if (status != KVIO_OK)
            goto cleanup;
    } else {
        status = kvio_evict_init(&cache->evict, config->eviction, config->num_blocks,
                                 config->num_blocks - 1);
        if (status != KVIO_OK)
            goto cleanup;
        cache->queue_order = (cache->evict.ops->caps & KVIO_EVICT_CAP_QUEUE_ORDER) != 0;
    }
    /* Block 0 is the null block: never free, never handed out; the others
     * are free in order, as the zeroed tables say. */
    cache->blocks[0].refcount = 1;
    cache->free_queue.head = 0;
    cache->free_queue.tail = cache->num_blocks - 1;
    cache->free_queue.length = cache->num_blocks - 1;
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
    kvio_zeroed_free(cache->blocks, cache->tables_bytes); /* the records and the ring */
    kvio_zeroed_free(cache->index_memory, cache->index_bytes);
    kvio_zeroed_free(cache->block_epoch, cache->num_blocks * sizeof(uint64_t));
    kvio_radix_destroy(cache->tree);
    free(cache->scratch);
    free(cache);
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
    const free_ring_t *ring = &cache->free_queue;
    size_t count = 0;
    for (uint64_t position = ring->head; position != ring->tail; position++) {
        uint32_t block = ring_get(ring, position & ring->mask);
        if (block == TOMBSTONE)
            continue;
        if (count < max_ids)
            ids_p[count] = block;
        count++;
    }
    *num_ids_p = count;
}

uint32_t kvio_kvcache_block_refcount(const kvio_kvcache_t *cache, uint32_t block_id)
{
    return block_id < cache->num_blocks ? cache->blocks[block_id].refcount : 0;
}

kvio_status_t kvio_kvcache_block_hash(const kvio_kvcache_t *cache, uint32_t block_id,
                                      kvio_hash_t *hash_p)
{
    if (block_id >= cache->num_blocks || !cache->blocks[block_id].hashed)
        return KVIO_ERR_NOT_FOUND;
    *hash_p = cache->blocks[block_id].hash;
    return KVIO_OK;
}

const kvio_radix_t *kvio_kvcache_radix(const kvio_kvcache_t *cache)
{
    return cache->tree;
}

void kvio_kvcache_get_metrics(const kvio_kvcache_t *cache, kvio_kvcache_metrics_t *metrics_p)
{
    *metrics_p = cache->metrics;
}

/* A free cached block becomes evictable content for a non-queue policy
 * (the hash index's; the radix index's tree keeps its own). */
static void policy_add(kvio_kvcache_t *cache, uint32_t block)
{
    block_record_t *record = &cache->blocks[block];
    if (cache->tree != NULL)
        return;
    bool fresh = !record->policy_known;
    record->policy_known = 1;
    cache->evict.ops->add(cache->evict.priv, block, record->hash.low, fresh);
}

/* A free block leaves the policy's candidates (a hit, a reset). */
static void policy_remove(kvio_kvcache_t *cache, uint32_t block)
{
    if (cache->tree == NULL)
        cache->evict.ops->remove(cache->evict.priv, block);
}

/* index radix: the tree evicted a leaf holding block (free: only unlocked
 * leaves go, and a request locks the path of every cached block it
 * holds); its hash leaves the index and it goes to the queue's head, to be
 * reused before any cached block. */
static void tree_released(void *context, uint32_t block, kvio_hash_t hash)
{
    kvio_kvcache_t *cache = context;
    (void)hash;
    if (cache->blocks[block].refcount != 0) {
        /* A broken invariant, not an input: say so rather than reuse it. */
        kvio_error("kvcache: the radix tree evicted block %u, which a request holds", block);
        return;
    }
    if (cache->config.on_evict != NULL)
        cache->config.on_evict(cache->config.hook_context, block, cache->blocks[block].hash);
    index_remove(cache, block);
    cache->metrics.evictions++;
    ring_unlink(cache, block);
    ring_push_head(cache, block);
}

/* Takes a free block for new content: the queue head with lru; otherwise an
 * unhashed block first (they sit at the head), else the policy's victim.
 * Reusing a cached block evicts its hash (lazy eviction). */
static uint32_t take_free_block(kvio_kvcache_t *cache)
{
    uint32_t block;
    if (cache->queue_order) {
        block = ring_pop_head(cache);
    } else {
        block = ring_head(cache);
        if (cache->blocks[block].hashed && cache->tree != NULL) {
            /* Every free block is cached: the tree evicts a leaf (a whole
             * node, as SGLang's evict), whose blocks come to the head. */
            kvio_radix_evict(cache->tree, 1, NULL);
            block = ring_head(cache);
            if (cache->blocks[block].hashed)
                kvio_error("kvcache: a free cached block no radix leaf holds (block %u)", block);
        } else if (cache->blocks[block].hashed) {
            uint32_t victim = cache->evict.ops->victim(cache->evict.priv);
            if (victim != KVIO_EVICT_NONE)
                block = victim;
        }
        ring_unlink(cache, block);
    }
    block_record_t *record = &cache->blocks[block];
    if (record->hashed) {
        /* Never under the radix index: a free cached block's leaf is
         * unlocked, so the tree always has one to evict. */
        if (cache->config.on_evict != NULL && !record->window_group)
            cache->config.on_evict(cache->config.hook_context, block, record->hash);
        index_remove(cache, block);
        cache->metrics.evictions++;
    }
    record->refcount = 1;
    cache->metrics.blocks_allocated++;
    return block;
}

/* A cached block joins a request (a hit): out of the free queue if it
 * sat there. */
static inline void take_hit_block(kvio_kvcache_t *cache, uint32_t block)
{
    block_record_t *record = &cache->blocks[block];
    if (record->refcount == 0) {
        ring_unlink(cache, block);
        if (!cache->queue_order)
            policy_remove(cache, block);
    }
    record->refcount++;
    if (!cache->queue_order && cache->tree == NULL)
        cache->evict.ops->access(cache->evict.priv, block);
}

/* lru: takes the count blocks at the queue's head into blocks_p, as count
 * calls of take_free_block would, and hashes the first num_hashes of them
 * (hashes[i] for blocks_p[i]) into the index as they are taken, as
 * insert_run after the run would: one pass over their records, not two.
 * (The index ends up holding the same blocks under the same hashes either
 * way: a hash taken in that also sat in a block evicted later in the run
 * is first a duplicate of it, then takes its entry when it goes.) Before
 * each block it starts loading the record of the block PREFETCH_AHEAD
 * entries on, all that evicting it touches besides the valid bits, and the
 * index bucket of the hash as far on. Entries past the tail are stale ids
 * or tombstones: only a hint, checked for range. */
static void take_head_run(kvio_kvcache_t *cache, uint32_t *blocks_p, size_t count,
                          const kvio_hash_t *hashes, size_t num_hashes)
{
    free_ring_t *ring = &cache->free_queue;
    const uint64_t ring_mask = ring->mask;
    block_record_t *blocks = cache->blocks;
    const index_bucket_t *buckets = cache->buckets;
    const size_t bucket_mask = cache->bucket_mask;
    const uint32_t num_blocks = cache->num_blocks;
    const uint8_t watch_stamp = cache->watch_stamp;
    const table_view_t view = table_view(cache);
    bool watch_broken = false;
    uint64_t head = ring->head, evictions = 0;
    for (size_t i = 0; i < num_hashes && i < PREFETCH_AHEAD; i++)
        __builtin_prefetch(&buckets[bucket_of(bucket_mask, hashes[i])]);
    for (size_t i = 0; i < count; i++) {
        uint32_t far = ring_get(ring, (head + PREFETCH_AHEAD) & ring_mask);
        if (far < num_blocks)
            __builtin_prefetch(&blocks[far]);
        if (i + PREFETCH_AHEAD < num_hashes)
            __builtin_prefetch(&buckets[bucket_of(bucket_mask, hashes[i + PREFETCH_AHEAD])]);
        uint32_t block;
        while ((block = ring_get(ring, head & ring_mask)) == TOMBSTONE)
            head++;
        head++;
        block_record_t *record = &blocks[block];
        position_set(record, block, NO_POSITION);
        if (record->hashed) {
            table_remove(cache, view, block);
            record->hashed = 0;
            watch_broken |= record->watch == watch_stamp;
            evictions++;
        }
        record->refcount = 1;
        blocks_p[i] = block;
        if (i < num_hashes) {
            record_hashed(record, hashes[i]);
            table_insert(cache, view, block, hashes[i]);
        }
    }
    ring->head = head;
    ring->length -= (uint32_t)count;
    for (size_t i = 0; cache->epochs_used && i < num_hashes; i++)
        cache->block_epoch[blocks_p[i]] = cache->epoch;
    cache->watch_broken |= watch_broken;
    cache->index_version += evictions + num_hashes;
    cache->metrics.evictions += evictions;
    cache->metrics.blocks_allocated += count;
}

/* Hashes blocks [first, end) of a request into the index, as index_insert
 * on each would; the bucket of the hash and the record of the block
 * PREFETCH_AHEAD on are loaded meanwhile (the records were taken long ago,
 * when a whole prompt's blocks are taken before its chunks are computed). */
static void insert_run(kvio_kvcache_t *cache, const uint32_t *ids, const kvio_hash_t *hashes,
                       size_t first, size_t end)
{
    block_record_t *blocks = cache->blocks;
    const index_bucket_t *buckets = cache->buckets;
    const size_t bucket_mask = cache->bucket_mask;
    const table_view_t view = table_view(cache);
    for (size_t i = first; i < end && i < first + PREFETCH_AHEAD; i++) {
        __builtin_prefetch(&buckets[bucket_of(bucket_mask, hashes[i])]);
        __builtin_prefetch(&blocks[ids[i]], 1);
    }
    for (size_t i = first; i < end; i++) {
        if (i + PREFETCH_AHEAD < end) {
            __builtin_prefetch(&buckets[bucket_of(bucket_mask, hashes[i + PREFETCH_AHEAD])]);
            __builtin_prefetch(&blocks[ids[i + PREFETCH_AHEAD]], 1);
        }
        record_hashed(&blocks[ids[i]], hashes[i]);
        table_insert(cache, view, ids[i], hashes[i]);
    }
    for (size_t i = first; cache->epochs_used && i < end; i++)
        cache->block_epoch[ids[i]] = cache->epoch;
    cache->index_version += end - first;
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

/* Token requests: hashes every newly full block, chained. */
static kvio_status_t hash_new_full_blocks(kvio_kvreq_t *req)
{
    uint32_t block_size = req->cache->block_size;
    size_t full = req->num_tokens / block_size;
    kvio_status_t status = grow((void **)&req->hashes, &req->hashes_capacity, full,
                                sizeof(kvio_hash_t));
    if (status != KVIO_OK)
        return status;
    kvio_kvcache_hash_blocks(req->tokens, block_size, req->salt, req->salt_len, req->num_hashes,
                             full, req->hashes);
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
    if (cache->config.window_tokens > 0) {
        req->window = calloc(1, sizeof(*req->window));
        if (req->window == NULL) {
            free(req);
            return KVIO_ERR_NOMEM;
        }
        req->window->cache = cache;
    }
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

kvio_status_t kvio_kvreq_reset_borrowed(kvio_kvreq_t *req, const kvio_hash_t *hashes,
                                        size_t num_hashes, size_t num_tokens)
{
    if (hashes == NULL && num_hashes > 0)
        return KVIO_ERR_INVALID;
    if (num_hashes > num_tokens / req->cache->block_size) {
        kvio_error("kvcache: %zu block hashes for %zu full blocks", num_hashes,
                   num_tokens / req->cache->block_size);
        return KVIO_ERR_INVALID;
    }
    kvio_kvcache_free(req->cache, req);
    if (req->window != NULL)
        req->window->num_hashes = req->window->num_tokens = 0;
    if (!req->hashes_borrowed)
        free(req->hashes);
    free(req->tokens);
    free(req->salt);
    req->tokens = NULL;
    req->salt = NULL;
    req->num_tokens = req->tokens_capacity = req->salt_len = 0;
    req->token_mode = false;
    /* The cast: a borrowed array is only read (appends copy it first). */
    req->hashes = (kvio_hash_t *)hashes;
    req->hashes_borrowed = true;
    req->hashes_capacity = 0;
    req->num_hashes = num_hashes;
    req->num_tokens = num_tokens;
    req->lookup_kept = false;
    return KVIO_OK;
}

kvio_status_t kvio_kvreq_append_tokens(kvio_kvreq_t *req, const uint32_t *tokens,
                                       size_t num_tokens)
{
    if (!req->token_mode || (tokens == NULL && num_tokens > 0))
        return KVIO_ERR_INVALID;
    req->lookup_kept = false;
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
    req->lookup_kept = false;
    if (num_hashes == 0) {
        /* Decode steps: tokens only, nothing to check or copy. */
        req->num_tokens += num_tokens;
        return KVIO_OK;
    }
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

void kvio_kvreq_window_blocks(const kvio_kvreq_t *req, const uint32_t **ids_p, size_t *num_ids_p)
{
    *ids_p = req->window != NULL ? req->window->blocks : NULL;
    *num_ids_p = req->window != NULL ? req->window->num_blocks : 0;
}

size_t kvio_kvreq_held_blocks(const kvio_kvreq_t *req)
{
    const kvio_kvreq_t *window = req->window;
    return req->num_blocks + (window != NULL ? window->num_blocks - window->num_null : 0);
}

kvio_status_t kvio_kvreq_block_hash(const kvio_kvreq_t *req, size_t index, kvio_hash_t *hash_p)
{
    if (index >= req->num_hashes)
        return KVIO_ERR_NOT_FOUND;
    *hash_p = req->hashes[index];
    return KVIO_OK;
}

/* The request's kept lookup ends (it holds blocks now, or is gone). */
static void drop_kept_lookup(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    req->lookup_kept = false;
    if (cache->watched == req)
        cache->watched = NULL;
    if (cache->last_looked_up == req)
        cache->last_looked_up = NULL;
}

void kvio_kvreq_destroy(kvio_kvreq_t *req)
{
    if (req == NULL)
        return;
    kvio_kvcache_free(req->cache, req);
    drop_kept_lookup(req->cache, req);
    kvio_kvreq_destroy(req->window);
    free(req->tokens);
    free(req->salt);
    if (!req->hashes_borrowed)
        free(req->hashes);
    free(req->blocks);
    free(req);
}

/* ---- lookup, allocate, free --------------------------------------------- */

/* The leading blocks of hashes found in the index, at most max_blocks; hit
 * blocks written to hits_p (may be NULL). */
static size_t find_prefix(const kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                          size_t max_blocks, uint32_t *hits_p)
{
    if (cache->tree != NULL)
        return kvio_radix_peek(cache->tree, hashes, max_blocks, hits_p);
    size_t count = 0;
    for (size_t i = 0; i < PREFETCH_AHEAD && i < max_blocks; i++)
        prefetch_bucket(cache, hashes[i]);
    for (; count < max_blocks; count++) {
        if (count + PREFETCH_AHEAD < max_blocks)
            prefetch_bucket(cache, hashes[count + PREFETCH_AHEAD]);
        uint32_t block = index_find(cache, hashes[count]);
        if (block == NO_BLOCK)
            break;
        if (hits_p != NULL)
            hits_p[count] = block;
    }
    return count;
}

/* Blocks a prefix lookup may hit: whole blocks with a hash, never the one
 * holding the last token. */
static size_t hit_limit(const kvio_kvcache_t *cache, size_t num_hashes, size_t num_tokens)
{
    if (!cache->config.enable_prefix_caching || num_tokens == 0)
        return 0;
    size_t max_blocks = (num_tokens - 1) / cache->block_size;
    return max_blocks < num_hashes ? max_blocks : num_hashes;
}

void kvio_kvcache_set_epoch(kvio_kvcache_t *cache, uint64_t epoch)
{
    cache->epoch = epoch;
    if (epoch != 0)
        cache->epochs_used = true; /* until now every block's epoch was 0 */
}

uint32_t kvio_kvcache_reset_prefix(kvio_kvcache_t *cache,
                                   void (*dropped)(void *context, kvio_hash_t hash),
                                   void *context)
{
    uint32_t count = 0;
    for (uint32_t block = 1; block < cache->num_blocks; block++) {
        block_record_t *record = &cache->blocks[block];
        if (!record->hashed)
            continue;
        /* A free cached block stays in the free queue, unhashed (with a
         * policy other than lru it leaves the policy's candidates for the
         * queue's head, where unhashed blocks are taken first); a held one
         * stays with its request. */
        if (record->refcount == 0 && !cache->queue_order) {
            policy_remove(cache, block);
            ring_unlink(cache, block);
            ring_push_head(cache, block);
        }
        if (dropped != NULL)
            dropped(context, record->hash);
        index_remove(cache, block);
        count++;
    }
    if (cache->tree != NULL)
        kvio_radix_reset(cache->tree); /* the requests' locks go with it */
    cache->metrics.prefix_resets++;
    cache->metrics.prefix_reset_blocks += count;
    return count;
}

/* ---- hybrid groups (config.window_tokens; kvio/window.h) ---------------- */

/* A window group's block is cached under its content's hash with this
 * mixed in (vLLM keys a cached block by its hash and its group). */
#define WINDOW_GROUP_ID 0x9e3779b97f4a7c15ull

static inline kvio_hash_t window_hash(kvio_hash_t hash)
{
    hash.low ^= WINDOW_GROUP_ID;
    return hash;
}

typedef struct window_view {
    const kvio_kvcache_t *cache;
    const kvio_hash_t *hashes; /* the full group's */
} window_view_t;

static bool window_cached(const void *view_p, uint32_t i)
{
    const window_view_t *view = view_p;
    return index_find(view->cache, window_hash(view->hashes[i])) != NO_BLOCK;
}

/* The hit of both groups when the full group's cached prefix is
 * full_blocks of hashes: the window group's longest hit within it. */
static size_t hybrid_hit(const kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                         size_t full_blocks)
{
    if (cache->config.window_tokens == 0)
        return full_blocks;
    window_view_t view = {.cache = cache, .hashes = hashes};
    return kvio_window_hit((uint32_t)full_blocks, cache->block_size, cache->config.window_tokens,
                           window_cached, &view);
}

/* Brings the window group's hashes and length up to the request's. */
static kvio_status_t window_sync(kvio_kvreq_t *req)
{
    kvio_kvreq_t *window = req->window;
    kvio_status_t status = grow((void **)&window->hashes, &window->hashes_capacity,
                                req->num_hashes, sizeof(kvio_hash_t));
    if (status != KVIO_OK)
        return status;
    for (size_t i = window->num_hashes; i < req->num_hashes; i++)
        window->hashes[i] = window_hash(req->hashes[i]);
    window->num_hashes = req->num_hashes;
    window->num_tokens = req->num_tokens;
    return KVIO_OK;
}

/* What the window group's table takes to cover covered_tokens: on the
 * first allocation, the hit's last blocks (those of one window; nulls
 * before them), and new blocks past what it holds, nulls counted as held
 * (vLLM's SlidingWindowManager). */
typedef struct window_need {
    size_t skip, hits, hits_in_queue, new_blocks;
} window_need_t;

static kvio_status_t window_group_need(kvio_kvcache_t *cache, kvio_kvreq_t *req, bool first,
                                       size_t hit_blocks, size_t covered_tokens,
                                       window_need_t *need)
{
    kvio_kvreq_t *window = req->window;
    uint32_t block_size = cache->block_size;
    *need = (window_need_t){0};
    size_t needed = (covered_tokens + block_size - 1) / block_size;
    kvio_status_t status = window_sync(req);
    if (status == KVIO_OK)
        status = grow((void **)&window->blocks, &window->blocks_capacity,
                      needed > hit_blocks ? needed : hit_blocks, sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    if (first) {
        size_t run = kvio_window_hit_run(block_size, cache->config.window_tokens);
        need->hits = hit_blocks;
        need->skip = hit_blocks > run ? hit_blocks - run : 0;
        /* The hit's blocks go straight into the table (they count once
         * num_blocks covers them), as the full group's kept lookup does. */
        for (size_t i = need->skip; i < hit_blocks; i++) {
            window->blocks[i] = index_find(cache, window->hashes[i]);
            need->hits_in_queue += cache->blocks[window->blocks[i]].refcount == 0;
        }
    }
    size_t have = first ? hit_blocks : window->num_blocks;
    need->new_blocks = needed > have ? needed - have : 0;
    return KVIO_OK;
}

/* The window group's hit blocks join its table (first allocation), nulls
 * before them; taken with the full group's hits, before any new block, so
 * that no new block evicts a hit. */
static void window_take_hits(kvio_kvcache_t *cache, kvio_kvreq_t *req, const window_need_t *need)
{
    kvio_kvreq_t *window = req->window;
    for (size_t i = 0; i < need->skip; i++)
        window->blocks[i] = 0;
    for (size_t i = need->skip; i < need->hits; i++)
        take_hit_block(cache, window->blocks[i]); /* found by window_group_need */
    window->num_blocks = window->num_hashed_blocks = need->hits;
    window->num_null = need->skip;
}

/* The window group's new blocks, then its blocks full within
 * hashed_tokens enter the index (hash_new false: none does). The hooks
 * hear only the full group's blocks: what a tier or a router's mirror
 * keeps is the prefix, which that group decides. */
static void window_take_new(kvio_kvcache_t *cache, kvio_kvreq_t *req, const window_need_t *need,
                            size_t hashed_tokens, bool hash_new)
{
    kvio_kvreq_t *window = req->window;
    for (size_t i = 0; i < need->new_blocks; i++)
        window->blocks[window->num_blocks++] = take_free_block(cache);
    if (!cache->config.enable_prefix_caching || !hash_new)
        return;
    size_t full = hashed_tokens / cache->block_size;
    if (full > window->num_hashes)
        full = window->num_hashes;
    /* A block whose hash came late may already have left the window. */
    size_t from = window->num_hashed_blocks > window->num_null ? window->num_hashed_blocks
                                                               : window->num_null;
    for (size_t i = from; i < full; i++) {
        index_insert(cache, window->blocks[i], window->hashes[i]);
        cache->blocks[window->blocks[i]].window_group = 1;
    }
    if (full > window->num_hashed_blocks)
        window->num_hashed_blocks = full;
}

/* The cached prefix of a request that holds no blocks, its hit blocks in
 * blocks[0, hits) (room for hit_limit of them). A lookup kept from before
 * stands while the index is unchanged (so the first allocation takes the
 * engine's lookup as it is). A request looked up a second time in a row is
 * watched; a watched lookup, none of its blocks evicted since, is only
 * extended from where it stopped: a new entry goes after the old ones, so
 * the blocks it found are still those a search finds, and a request that
 * waits at the head of the queue costs what changed at each step, not its
 * whole prefix. Requests looked up in turn (a scheduler that orders by
 * hits) are searched whole, as watching them would only add the stamps. */
static size_t kept_lookup(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    if (req->lookup_kept && req->lookup_version == cache->index_version)
        return req->lookup_hits;
    size_t start = 0;
    /* The tree is searched from its root: no watch. */
    bool watch = req->lookup_kept && cache->watched == req && !cache->watch_broken &&
                 cache->tree == NULL;
    if (watch) {
        start = req->lookup_hits;
    } else if (cache->last_looked_up == req && cache->tree == NULL) {
        cache->watch_stamp = cache->watch_stamp == UINT8_MAX ? 1 : cache->watch_stamp + 1;
        cache->watched = req;
        cache->watch_broken = false;
        watch = true;
    }
    cache->last_looked_up = req;
    size_t limit = hit_limit(cache, req->num_hashes, req->num_tokens);
    size_t hits = start + find_prefix(cache, req->hashes + start, limit - start, req->blocks + start);
    for (size_t i = start; watch && i < hits; i++)
        cache->blocks[req->blocks[i]].watch = cache->watch_stamp;
    req->lookup_hits = hits;
    req->lookup_version = cache->index_version;
    req->lookup_kept = true;
    return hits;
}

size_t kvio_kvcache_lookup(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    if (req->num_blocks > 0 ||
        grow((void **)&req->blocks, &req->blocks_capacity,
             hit_limit(cache, req->num_hashes, req->num_tokens), sizeof(uint32_t)) != KVIO_OK)
        return kvio_kvcache_lookup_hashes(cache, req->hashes, req->num_hashes, req->num_tokens);
    return hybrid_hit(cache, req->hashes, kept_lookup(cache, req)) * cache->block_size;
}

size_t kvio_kvcache_lookup_hashes(const kvio_kvcache_t *cache, const kvio_hash_t *hashes,
                                  size_t num_hashes, size_t num_tokens)
{
    size_t full = find_prefix(cache, hashes, hit_limit(cache, num_hashes, num_tokens), NULL);
    return hybrid_hit(cache, hashes, full) * cache->block_size;
}

/* What covering the request's first num_tokens tokens takes: on its first
 * allocation the cached prefix (its hit blocks written into req->blocks,
 * the lookup kept), the blocks to take from the free queue (new ones, and
 * hit blocks that sit in it). */
typedef struct allocation_need {
    bool first;
    size_t num_hits, hits_in_queue, covered, needed_blocks, new_blocks;
    window_need_t window; /* hybrid pools: the window group's */
} allocation_need_t;

/* Blocks the allocation takes from the free queue, in every group. */
static size_t need_from_queue(const allocation_need_t *need)
{
    return need->new_blocks + need->hits_in_queue + need->window.new_blocks +
           need->window.hits_in_queue;
}

static kvio_status_t allocation_need(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t num_tokens,
                                     allocation_need_t *need)
{
    uint32_t block_size = cache->block_size;
    *need = (allocation_need_t){.first = req->num_blocks == 0};
    /* Hit blocks go straight into the request's block array; they count
     * only once num_blocks covers them. */
    size_t hit_room = need->first ? (req->num_tokens + block_size - 1) / block_size : 0;
    kvio_status_t status = grow((void **)&req->blocks, &req->blocks_capacity, hit_room,
                                sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    if (need->first) {
        /* kept if the allocation is refused */
        need->num_hits = hybrid_hit(cache, req->hashes, kept_lookup(cache, req));
        for (size_t i = 0; i < need->num_hits; i++)
            need->hits_in_queue += cache->blocks[req->blocks[i]].refcount == 0;
    }
    size_t hit_tokens = need->num_hits * block_size;
    need->covered = num_tokens > hit_tokens ? num_tokens : hit_tokens;
    need->needed_blocks = (need->covered + block_size - 1) / block_size;
    size_t have_blocks = need->first ? need->num_hits : req->num_blocks;
    need->new_blocks = need->needed_blocks > have_blocks ? need->needed_blocks - have_blocks : 0;
    if (req->window != NULL)
        return window_group_need(cache, req, need->first, need->num_hits, need->covered,
                                 &need->window);
    return KVIO_OK;
}

kvio_status_t kvio_kvcache_blocks_to_allocate(kvio_kvcache_t *cache, kvio_kvreq_t *req,
                                              size_t num_tokens, size_t *blocks_p)
{
    if (req->cache != cache)
        return KVIO_ERR_INVALID;
    if (num_tokens > req->num_tokens)
        num_tokens = req->num_tokens;
    allocation_need_t need;
    kvio_status_t status = allocation_need(cache, req, num_tokens, &need);
    if (status == KVIO_OK)
        *blocks_p = need_from_queue(&need);
    return status;
}

/* ---- the radix index's side of a request (index radix) ----------------- */

static void release_run(kvio_kvcache_t *cache, const uint32_t *ids, size_t count);

/* The request lets go of the path it locks (a lock from before a prefix
 * reset went with the tree's nodes). */
static void radix_unlock_request(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    if (req->radix_locked && req->radix_generation == kvio_radix_generation(cache->tree))
        kvio_radix_unlock(cache->tree, req->radix_node);
    req->radix_locked = false;
}

/* The request locks node's path (SGLang's inc_lock_ref), in place of the
 * one it locked (dec_lock_ref), as SGLang moves a request's last node. */
static void radix_relock(kvio_kvcache_t *cache, kvio_kvreq_t *req, kvio_radix_node_t node)
{
    kvio_radix_lock(cache->tree, node);
    radix_unlock_request(cache, req);
    req->radix_locked = true;
    req->radix_node = node;
    req->radix_generation = kvio_radix_generation(cache->tree);
}

/* A first allocation's hits (the tree's blocks of its first hits pages, as
 * the lookup found them): the match refreshes the path for the policy and
 * splits the node it ends in (SGLang's match_prefix), and the request
 * locks it. */
static void radix_lock_hits(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t hits)
{
    kvio_radix_node_t node = 0;
    size_t matched = 0;
    if (hits == 0)
        return;
    if (kvio_radix_match(cache->tree, req->hashes, hits, &node, &matched) != KVIO_OK ||
        matched != hits) {
        /* Out of memory for a split: the path up to the node above stays
         * locked through its ancestors, no tighter. */
        kvio_error("kvcache: radix match of a %zu-block hit found %zu", hits, matched);
    }
    radix_relock(cache, req, node);
}

/* Block i of req enters the index, and the cache's owner hears of it. */
static void cache_block(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t i)
{
    index_insert(cache, req->blocks[i], req->hashes[i]);
    if (cache->config.on_cached != NULL)
        cache->config.on_cached(cache->config.hook_context, req->blocks, i, req->hashes[i]);
}

/* The request's first full blocks enter the tree (SGLang's
 * cache_unfinished_req): a page the tree lacks takes the request's block,
 * whose hash enters the index; a page another request cached meanwhile
 * (the same content computed twice) keeps the tree's block, which the
 * request takes in place of its own (freed, uncached, as SGLang frees the
 * duplicate and rewrites req_to_token). The request then locks the path. */
static kvio_status_t radix_cache_blocks(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t full)
{
    kvio_status_t status = grow((void **)&cache->scratch, &cache->scratch_capacity, full,
                                sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    kvio_radix_node_t node;
    size_t present;
    status = kvio_radix_insert_blocks(cache->tree, req->hashes, req->blocks, full, cache->scratch,
                                      &node, &present);
    if (status != KVIO_OK)
        return status;
    size_t from = present < req->num_hashed_blocks ? present : req->num_hashed_blocks;
    for (size_t i = from; i < full; i++) {
        uint32_t mine = req->blocks[i], tree_block = cache->scratch[i];
        if (mine != tree_block) {
            take_hit_block(cache, tree_block);
            req->blocks[i] = tree_block;
            release_run(cache, &mine, 1);
        } else if (!cache->blocks[mine].hashed) {
            cache_block(cache, req, i);
        }
    }
    radix_relock(cache, req, node);
    return KVIO_OK;
}

/* Blocks for num_tokens known tokens and ahead slots past them (not
 * hashed: their tokens are not known yet); hash_new false: none of the new
 * blocks is hashed. */
static kvio_status_t allocate(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t num_tokens,
                              size_t ahead, bool hash_new, size_t *num_hit_tokens_p)
{
    if (req->cache != cache || num_tokens > req->num_tokens)
        return KVIO_ERR_INVALID;
    uint32_t block_size = cache->block_size;
    allocation_need_t need;
    kvio_status_t status = allocation_need(cache, req, num_tokens + ahead, &need);
    if (status != KVIO_OK)
        return status;
    bool first = need.first;
    size_t num_hits = need.num_hits;
    size_t covered = num_tokens > num_hits * block_size ? num_tokens : num_hits * block_size;
    size_t needed_blocks = need.needed_blocks, new_blocks = need.new_blocks;
    if (need_from_queue(&need) > cache->free_queue.length) {
        cache->metrics.allocations_refused++;
        return KVIO_ERR_NO_SPACE;
    }
    status = grow((void **)&req->blocks, &req->blocks_capacity, needed_blocks, sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    drop_kept_lookup(cache, req);

    for (size_t i = 0; i < num_hits; i++)
        take_hit_block(cache, req->blocks[i]);
    if (first && cache->tree != NULL)
        radix_lock_hits(cache, req, num_hits); /* before any new block evicts a leaf */
    if (first && req->window != NULL)
        window_take_hits(cache, req, &need.window);
    if (first) {
        req->num_blocks = num_hits;
        req->num_hashed_blocks = num_hits;
    }
    size_t full = 0; /* the leading blocks hashed once the allocation is done */
    if (cache->config.enable_prefix_caching && hash_new) {
        full = covered / block_size;
        if (full > req->num_hashes)
            full = req->num_hashes;
    }
    if (cache->queue_order && cache->config.on_evict == NULL) {
        /* Without hooks the new blocks are hashed as they are taken; the
         * request's blocks before them that filled up, first. */
        size_t base = req->num_blocks, hashed_in_run = 0;
        if (cache->tree == NULL && cache->config.on_cached == NULL &&
            full > req->num_hashed_blocks) {
            if (req->num_hashed_blocks < base)
                insert_run(cache, req->blocks, req->hashes, req->num_hashed_blocks,
                           full < base ? full : base);
            hashed_in_run = full > base ? full - base : 0; /* hashed blocks lead the table */
            req->num_hashed_blocks = full;
        }
        take_head_run(cache, req->blocks + base, new_blocks, req->hashes + base, hashed_in_run);
        req->num_blocks += new_blocks;
    } else {
        for (size_t i = 0; i < new_blocks; i++)
            req->blocks[req->num_blocks++] = take_free_block(cache);
    }

    if (full > req->num_hashed_blocks) {
        if (cache->tree != NULL) {
            status = radix_cache_blocks(cache, req, full);
            if (status != KVIO_OK)
                return status;
        } else if (cache->config.on_cached == NULL) {
            insert_run(cache, req->blocks, req->hashes, req->num_hashed_blocks, full);
        } else {
            for (size_t i = req->num_hashed_blocks; i < full; i++)
                cache_block(cache, req, i);
        }
        req->num_hashed_blocks = full;
    }
    if (req->window != NULL)
        window_take_new(cache, req, &need.window, covered, hash_new);
    if (first) {
        for (size_t i = 0; cache->epoch != 0 && i < num_hits; i++)
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

kvio_status_t kvio_kvcache_allocate(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t num_tokens,
                                    size_t *num_hit_tokens_p)
{
    return allocate(cache, req, num_tokens, 0, true, num_hit_tokens_p);
}

kvio_status_t kvio_kvcache_allocate_ahead(kvio_kvcache_t *cache, kvio_kvreq_t *req,
                                          size_t num_tokens, size_t ahead_tokens)
{
    return allocate(cache, req, num_tokens, ahead_tokens, true, NULL);
}

kvio_status_t kvio_kvcache_allocate_unhashed(kvio_kvcache_t *cache, kvio_kvreq_t *req,
                                             size_t num_tokens, size_t *num_hit_tokens_p)
{
    return allocate(cache, req, num_tokens, 0, false, num_hit_tokens_p);
}

/* lru: releases blocks count-1 .. 0, as the general loop below does, with
 * the ring held in registers; the records of the first FREE_PREFETCH_AHEAD
 * are asked for before the loop starts. Freed blocks go to the tail, but
 * with prepend_unhashed the unhashed ones, which go to the head as a group
 * in the order they were freed (reverse): the loop notes where in ids they
 * lie, and only that stretch is read again to push them in forward order. */
static void free_queue_run(kvio_kvcache_t *cache, const uint32_t *ids, size_t count,
                           bool prepend_unhashed)
{
    free_ring_t *ring = &cache->free_queue;
    block_record_t *blocks = cache->blocks;
    const uint64_t ring_mask = ring->mask, head = ring->head; /* compaction keeps head */
    uint64_t tail = ring->tail;
    uint32_t freed = 0, to_tail = 0;
    size_t first_unhashed = count, end_unhashed = 0; /* [first, end) of ids */
    for (size_t i = count; i-- > 0 && i + FREE_PREFETCH_AHEAD >= count;)
        __builtin_prefetch(&blocks[ids[i]]);
    for (size_t i = count; i-- > 0;) {
        if (i >= FREE_PREFETCH_AHEAD)
            __builtin_prefetch(&blocks[ids[i - FREE_PREFETCH_AHEAD]]);
        uint32_t block = ids[i];
        block_record_t *record = &blocks[block];
        if (--record->refcount > 0)
            continue;
        freed++;
        if (prepend_unhashed && !record->hashed) {
            first_unhashed = i;
            if (end_unhashed == 0)
                end_unhashed = i + 1;
            continue;
        }
        if (tail - head == ring_mask + 1) {
            ring->tail = tail; /* full of tombstones: squeeze them out */
            ring_compact(cache);
            tail = ring->tail;
        }
        uint32_t position = (uint32_t)(tail++ & ring_mask);
        ring_set(ring, position, block);
        position_set(record, block, position);
        to_tail++;
    }
    ring->tail = tail;
    ring->length += to_tail;
    cache->metrics.blocks_freed += freed;
    for (size_t i = first_unhashed; i < end_unhashed; i++) {
        const block_record_t *record = &blocks[ids[i]];
        if (record->refcount == 0 && !record->hashed)
            ring_push_head(cache, ids[i]);
    }
}

/* Releases blocks count-1 .. 0 of ids (a prefix's tail is evicted before
 * its head). */
static void release_run(kvio_kvcache_t *cache, const uint32_t *ids, size_t count)
{
    /* Unhashed blocks go to the head with prepend_unhashed (and always with
     * a non-queue policy, so that they are reused before cached ones). */
    if (cache->queue_order) {
        free_queue_run(cache, ids, count,
                       cache->config.enable_prefix_caching &&
                           cache->config.free_order == KVIO_FREE_ORDER_PREPEND_UNHASHED);
        return;
    }
    bool prepend = cache->config.enable_prefix_caching;
    for (size_t i = count; i-- > 0;) {
        if (i >= PREFETCH_AHEAD)
            __builtin_prefetch(&cache->blocks[ids[i - PREFETCH_AHEAD]]);
        uint32_t block = ids[i];
        block_record_t *record = &cache->blocks[block];
        if (--record->refcount > 0)
            continue;
        cache->metrics.blocks_freed++;
        if (record->hashed) {
            ring_push_tail(cache, block);
            policy_add(cache, block);
        } else if (!prepend) {
            ring_push_tail(cache, block);
        }
    }
    /* Freed unhashed blocks go to the head as a group, in the order they
     * were freed (reverse): pushing them in forward order does that. */
    if (prepend) {
        for (size_t i = 0; i < count; i++) {
            block_record_t *record = &cache->blocks[ids[i]];
            if (record->refcount == 0 && !record->hashed)
                ring_push_head(cache, ids[i]);
        }
    }
}

/* Releases a table's blocks past its nulls. */
static void release_table(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    release_run(cache, req->blocks + req->num_null, req->num_blocks - req->num_null);
    req->num_blocks = 0;
    req->num_hashed_blocks = 0;
    req->num_null = 0;
}

void kvio_kvcache_free(kvio_kvcache_t *cache, kvio_kvreq_t *req)
{
    radix_unlock_request(cache, req);
    release_table(cache, req); /* the full group first, as vLLM's coordinator */
    if (req->window != NULL)
        release_table(cache, req->window);
}

void kvio_kvcache_computed(kvio_kvcache_t *cache, kvio_kvreq_t *req, size_t computed_tokens)
{
    kvio_kvreq_t *window = req->window;
    if (window == NULL)
        return;
    size_t skipped = kvio_window_skipped_blocks(computed_tokens, cache->block_size,
                                                cache->config.window_tokens);
    if (skipped > window->num_blocks)
        skipped = window->num_blocks;
    if (skipped <= window->num_null)
        return;
    release_run(cache, window->blocks + window->num_null, skipped - window->num_null);
    for (size_t i = window->num_null; i < skipped; i++)
        window->blocks[i] = 0;
    window->num_null = skipped;
}
