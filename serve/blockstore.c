/* The bytes behind the engine's block decisions (serve/serve_int.h): the
 * KV pool's memory (host or GPU, none in simulate, none either with a
 * generated pool, whose blocks' bytes are made when they travel), the owner
 * stamps of its blocks, the host swap space and the lower tiers. The engine
 * decides which blocks are cached, swapped, loaded or evicted; every copy,
 * checksum and tier transfer happens here. */
#include "serve/serve_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"
#include "kvio/log.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* A block's owner stamp, recorded but not yet written (index STAMP_NONE:
 * nothing pending); with a generated pool, what the block holds (never
 * written: its bytes are made from it whenever they are read). source: the
 * pool block the content was first made in (a block loaded back from a tier
 * holds another block's bytes). */
typedef struct block_stamp {
    uint64_t id;
    uint64_t index;
    uint32_t source;
} block_stamp_t;

#define STAMP_NONE UINT64_MAX

/* A stamp's first word. */
#define STAMP_MAGIC 0x6b76696f626c6b00ull

/* Which tiers (bit t: store->tiers[t], the first 32) a pool block's content
 * was just loaded from, under the hash it was loaded as: the write-through
 * check of the block as the pool caches it (wants_save) need not ask them
 * again whether they hold it (#57: a shared tier's is a request per block).
 * Written and read under the tiers' lock; the check consumes it. */
typedef struct loaded_from {
    kvio_hash_t hash;
    uint32_t tiers;
} loaded_from_t;

struct kvio_block_store {
    uint32_t rank;
    unsigned char *memory;   /* block b at memory + b × block_bytes (NULL: no bytes) */
    bool generated;          /* no memory, yet bytes: each made from its stamp when read */
    unsigned char *scratch;  /* generated: LOAD_BATCH blocks the engine thread loads into */
    kvio_device_t *device;   /* non-NULL: memory is GPU memory (copies only) */
    unsigned char *bounce;   /* GPU pool: one pinned block for tier traffic */
    uint64_t block_bytes;
    uint32_t chunk_blocks;   /* blocks per tier object */
    uint64_t object_bytes;   /* a tier object's bytes: chunk_blocks blocks */
    unsigned char *object;   /* chunks, with bytes: the engine thread's object buffer */
    bool verify_swaps;
    bool skip_saves_when_full;
    kvio_data_t data;        /* a block's bytes when they are next read (with memory) */
    uint64_t seed;
    kvio_tier_t *const *tiers;
    size_t num_tiers;
    size_t saved_tiers;     /* the tiers the pool's blocks are written to (waterfall: the first) */
    kvio_status_t status;    /* first copy error seen inside a pool hook */
    unsigned char *swap_space; /* host swap space, swap_num_slots blocks */
    uint32_t *swap_free;     /* stack of free slot indices */
    uint32_t swap_num_free, swap_num_slots;
    block_stamp_t *stamps;   /* per block, the stamp not yet written (with memory) */
    loaded_from_t *loaded_from; /* with tiers: per block, the tiers it was just loaded from */
    bool async;              /* tier traffic beside the batch (tier_io: async) */
    int64_t link_free_ns;    /* simulate, async: when the link to the tiers is next free */
    int64_t saves_ns;        /* simulate, async: the iteration's saves, on the link at its end */
    struct kvio_kv_io *io;   /* emulate, async, with tiers: the I/O thread (else NULL) */
    /* Emulate: the host time (kvio_time_ns) past which no tier transfer
     * begins (the drain's cap, kvio_block_store_until; 0: none). Set on the
     * engine's thread, read on the I/O thread too. */
    _Atomic uint64_t until_ns;
};

typedef struct kvio_kv_io kvio_kv_io_t;

struct kvio_kv_load {
    kvio_hash_t *hashes;
    uint32_t *ids;
    uint32_t lead;       /* chunks: blocks of the first chunk before ids[0] */
    uint32_t wanted;
    uint32_t loaded;     /* once done; emulate: so far, under io->lock */
    int64_t begin_ns;    /* simulate: when it starts on the link */
    int64_t end_ns;      /* simulate: when it ends on the link; emulate: -1 */
    kvio_status_t status;
    bool done;           /* emulate: set by the I/O thread under io->lock */
    bool stop;           /* emulate: the engine took what had come (load_stop) */
    bool abandoned;      /* emulate: ... and left the record to the I/O thread */
};

/* The I/O thread's work, in the order asked: a load, or a staged save. */
typedef struct io_job {
    struct io_job *next;
    kvio_kv_load_t *load; /* NULL: a save of stage slot `slot` */
    uint32_t slot;
    kvio_hash_t hash;
    int policy;
} io_job_t;

/* Staged saves wait in at most this many objects (and STAGE_MAX_BYTES), at
 * least STAGE_MIN_SLOTS of them (a chunk is many blocks' bytes). */
#define STAGE_MAX_SLOTS 256
#define STAGE_MIN_SLOTS 4
#define STAGE_MAX_BYTES (64ull << 20)

struct kvio_kv_io {
    pthread_t thread;
    pthread_mutex_t lock;      /* the queue, the free slots, the loads' results */
    pthread_cond_t work, idle;
    pthread_cond_t slot_freed; /* a staged save was written: its slot is free again */
    io_job_t *head, *tail;
    bool busy, quit;
    bool cut;                  /* the run stopped: loads end after their batch (block_store_cut) */
    pthread_mutex_t tier_lock; /* every tier call (tiers_lock) */
    unsigned char *stage;      /* num_slots blocks (pinned with a GPU pool) */
    unsigned char *bounce;     /* GPU pool: the thread's own pinned block for loads */
    unsigned char *object;     /* chunks: the thread's own object buffer for loads */
    unsigned char *scratch;    /* generated: LOAD_BATCH blocks the thread loads into */
    uint32_t free_slots[STAGE_MAX_SLOTS];
    uint32_t num_slots, num_free;
};


static kvio_status_t io_start(kvio_block_store_t *store, char *error_p, size_t error_len);
static void io_stop(kvio_block_store_t *store);

static unsigned char *block_data(const kvio_block_store_t *store, uint32_t block)
{
    return store->memory != NULL ? store->memory + (uint64_t)block * store->block_bytes : NULL;
}

/* Whether blocks have bytes (emulate): in memory, or generated. */
static bool has_bytes(const kvio_block_store_t *store)
{
    return store->memory != NULL || store->generated;
}

/* Blocks a load hands a tier at once: enough to keep a file tier's queue
 * depth busy, few enough that the tiers' lock (held through the batch) is
 * let go often for the engine's look-ups. */
#define LOAD_BATCH 16

static unsigned char *swap_slot_data(const kvio_block_store_t *store, uint32_t slot)
{
    return store->swap_space + (uint64_t)slot * store->block_bytes;
}

/* Records the first GPU copy failure of a pool hook. */
static void gpu_failed(kvio_block_store_t *store, kvio_status_t status, const char *what)
{
    if (store->status == KVIO_OK) {
        kvio_error("serve rank %u: %s: %s", store->rank, what, kvio_device_error(store->device));
        store->status = status;
    }
}

/* The bounce buffer holds a block, or at least one whole stamp. */
static uint64_t bounce_bytes(const kvio_block_store_t *store)
{
    return store->block_bytes > 32 ? store->block_bytes : 32;
}

/* Host memory for a tier object: pinned with a GPU pool, else aligned for
 * O_DIRECT. NULL when out of memory. */
static unsigned char *object_alloc(const kvio_block_store_t *store)
{
    void *buffer = NULL;
    if (store->device != NULL)
        return kvio_device_host_alloc(store->device, store->object_bytes, &buffer) == KVIO_OK
                   ? buffer
                   : NULL;
    return posix_memalign(&buffer, 4096, store->object_bytes) == 0 ? buffer : NULL;
}

static void object_free(const kvio_block_store_t *store, unsigned char *buffer)
{
    if (buffer != NULL && store->device != NULL)
        kvio_device_host_free(store->device, buffer);
    else
        free(buffer);
}

/* Generated pool: the blocks one thread's loads read into (LOAD_BATCH of
 * them, aligned for O_DIRECT), NULL with the error said. */
static unsigned char *scratch_alloc(const kvio_block_store_t *store, char *error_p,
                                    size_t error_len)
{
    void *buffer = NULL;
    uint64_t bytes = (uint64_t)LOAD_BATCH * store->block_bytes;
    if (posix_memalign(&buffer, 4096, bytes) != 0) {
        snprintf(error_p, error_len, "serve rank %u: cannot allocate %llu bytes (%u blocks of "
                 "%llu) to load a generated pool's blocks into", store->rank,
                 (unsigned long long)bytes, LOAD_BATCH,
                 (unsigned long long)store->block_bytes);
        return NULL;
    }
    return buffer;
}

static void block_content(const kvio_block_store_t *store, uint32_t block, void *bytes);

/* Copies count blocks between the pool blocks ids and one object's bytes
 * in host memory, in order: out of the pool into object (a save), or back
 * in (a load). A GPU pool's through its copy stream; a generated pool's
 * made (out only: a load into one is adopt_blocks). */
static kvio_status_t copy_chunk(const kvio_block_store_t *store, const uint32_t *ids,
                                uint32_t count, unsigned char *object, bool out)
{
    for (uint32_t i = 0; i < count; i++) {
        unsigned char *host = object + (uint64_t)i * store->block_bytes;
        if (store->generated) {
            block_content(store, ids[i], host);
            continue;
        }
        unsigned char *pool = block_data(store, ids[i]);
        void *to = out ? host : pool;
        const void *from = out ? pool : host;
        if (store->device == NULL) {
            memcpy(to, from, store->block_bytes);
            continue;
        }
        kvio_status_t status = kvio_device_copy(store->device, to, from, store->block_bytes);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

kvio_status_t kvio_block_store_create(const kvio_block_store_params_t *params,
                                      kvio_block_store_t **store_p, char *error_p,
                                      size_t error_len)
{
    kvio_block_store_t *store = calloc(1, sizeof(*store));
    if (store == NULL)
        return KVIO_ERR_NOMEM;
    store->rank = params->rank;
    store->memory = params->memory;
    store->generated = params->memory == NULL && params->generated;
    store->device = params->memory != NULL ? params->device : NULL;
    store->block_bytes = params->block_bytes;
    store->chunk_blocks = params->chunk_blocks > 1 ? params->chunk_blocks : 1;
    store->object_bytes = store->block_bytes * store->chunk_blocks;
    store->verify_swaps = params->verify_swaps;
    store->data = params->data;
    store->seed = params->seed;
    store->skip_saves_when_full = params->skip_saves_when_full;
    store->tiers = params->tiers;
    store->num_tiers = params->num_tiers;
    /* A waterfall: the pool's evictions go to the first tier, each tier's
     * to the next. Each tier otherwise takes every block it lacks. */
    size_t written = params->num_tiers - params->load_only_tiers;
    store->saved_tiers = params->waterfall && written > 0 ? 1 : written;
    for (size_t t = 0; params->waterfall && t + 1 < written; t++)
        kvio_tier_spill_to(params->tiers[t], params->tiers[t + 1]);
    store->swap_space = params->swap_space;
    store->swap_num_slots = params->swap_blocks;
    kvio_status_t status = KVIO_OK;
    if (store->device != NULL) {
        void *bounce = NULL;
        status = kvio_device_host_alloc(store->device, bounce_bytes(store), &bounce);
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "serve rank %u: %s", store->rank,
                     kvio_device_error(store->device));
            goto fail;
        }
        store->bounce = bounce;
    }
    if (store->swap_num_slots > 0) {
        store->swap_free = malloc(store->swap_num_slots * sizeof(uint32_t));
        if (store->swap_free == NULL) {
            status = KVIO_ERR_NOMEM;
            goto fail;
        }
        for (uint32_t i = 0; i < store->swap_num_slots; i++)
            store->swap_free[i] = store->swap_num_slots - 1 - i;
        store->swap_num_free = store->swap_num_slots;
    }
    if (store->generated && store->block_bytes < 32) {
        snprintf(error_p, error_len, "serve rank %u: a generated pool needs blocks of at least "
                 "32 bytes (its owner stamp), not %llu", store->rank,
                 (unsigned long long)store->block_bytes);
        status = KVIO_ERR_CONFIG;
        goto fail;
    }
    if (has_bytes(store)) {
        store->stamps = malloc(((size_t)params->num_blocks + 1) * sizeof(*store->stamps));
        if (store->stamps == NULL) {
            status = KVIO_ERR_NOMEM;
            goto fail;
        }
        for (size_t b = 0; b <= params->num_blocks; b++)
            store->stamps[b].index = STAMP_NONE;
    }
    if (store->num_tiers > 0 &&
        (store->loaded_from = calloc((size_t)params->num_blocks + 1,
                                     sizeof(*store->loaded_from))) == NULL) {
        snprintf(error_p, error_len, "serve rank %u: cannot allocate %llu bytes for which "
                 "tier each of %llu blocks came from", store->rank,
                 (unsigned long long)(((uint64_t)params->num_blocks + 1) *
                                      sizeof(*store->loaded_from)),
                 (unsigned long long)params->num_blocks);
        status = KVIO_ERR_NOMEM;
        goto fail;
    }
    /* A generated pool's saves are made in the object buffer too. */
    if ((store->chunk_blocks > 1 || store->generated) && has_bytes(store) &&
        store->num_tiers > 0 && (store->object = object_alloc(store)) == NULL) {
        snprintf(error_p, error_len, "serve rank %u: cannot allocate %llu bytes for a chunk of "
                 "%u blocks (serve.kvcache.chunk_tokens)", store->rank,
                 (unsigned long long)store->object_bytes, store->chunk_blocks);
        status = KVIO_ERR_NOMEM;
        goto fail;
    }
    if (store->generated && store->num_tiers > 0 &&
        (store->scratch = scratch_alloc(store, error_p, error_len)) == NULL) {
        status = KVIO_ERR_NOMEM;
        goto fail;
    }
    store->async = params->async_tiers;
    if (store->async && has_bytes(store) && store->num_tiers > 0 &&
        (status = io_start(store, error_p, error_len)) != KVIO_OK)
        goto fail;
    *store_p = store;
    return KVIO_OK;
fail:
    kvio_block_store_destroy(store);
    return status;
}

void kvio_block_store_destroy(kvio_block_store_t *store)
{
    if (store == NULL)
        return;
    if (store->io != NULL)
        io_stop(store);
    free(store->swap_free);
    free(store->stamps);
    free(store->loaded_from);
    free(store->scratch);
    if (store->bounce != NULL)
        kvio_device_host_free(store->device, store->bounce);
    object_free(store, store->object);
    free(store);
}

bool kvio_block_store_has_bytes(const kvio_block_store_t *store)
{
    return has_bytes(store);
}

kvio_status_t kvio_block_store_error(const kvio_block_store_t *store)
{
    return store->status;
}

void kvio_block_store_clear_error(kvio_block_store_t *store)
{
    store->status = KVIO_OK;
}

/* ---------- owner stamps ---------- */

/* Emulate: every block carries a stamp saying who owns it (magic, request
 * id, index in the request, block id), so copies that lose or mix blocks are
 * detectable, and (unless data: zero) the rest of its bytes are its owner's
 * KV: generated from (seed, block and index, owner), so no device reduces
 * them and every owner's differ. Both are recorded when the block is handed
 * out and written only when the block's bytes are next read (swap-out, tier
 * write, P/D staging) or dropped when a whole-block copy overwrites them
 * first: the bytes every reader sees are the same as with an immediate
 * write, but an iteration no longer touches the pool's pages per new block. */
static size_t stamp_bytes(const kvio_block_store_t *store)
{
    return 32 < store->block_bytes ? 32 : store->block_bytes;
}

static void stamp_of(const kvio_block_store_t *store, uint32_t block, uint64_t stamp_p[4])
{
    stamp_p[0] = STAMP_MAGIC;
    stamp_p[1] = store->stamps[block].id;
    stamp_p[2] = store->stamps[block].index;
    stamp_p[3] = store->stamps[block].source;
}

/* The key of the KV bytes a stamp stands for. */
static uint64_t content_key(const kvio_block_store_t *store, const block_stamp_t *stamp)
{
    uint64_t identity = (uint64_t)stamp->source << 32 ^ stamp->index;
    return kvio_data_key(store->seed, identity, stamp->id);
}

/* Writes block's pending bytes into bytes (the block itself, or a host
 * buffer bound for a GPU block): its KV, then its stamp; data: zero writes
 * the stamp alone (the rest stays as it was: zeros in a pool, made zeros
 * for a generated one's). A generated block no request ever owned is
 * zeros, as a fresh pool's. */
static void block_content(const kvio_block_store_t *store, uint32_t block, void *bytes)
{
    if (store->generated && store->stamps[block].index == STAMP_NONE) {
        memset(bytes, 0, store->block_bytes);
        return;
    }
    if (store->data.kind != KVIO_DATA_ZERO || store->generated)
        kvio_data_fill(&store->data, content_key(store, &store->stamps[block]), 0, bytes,
                       store->block_bytes);
    uint64_t stamp[4];
    stamp_of(store, block, stamp);
    memcpy(bytes, stamp, stamp_bytes(store));
}

void kvio_block_store_own(kvio_block_store_t *store, const uint32_t *ids, size_t first,
                          size_t count, uint64_t id)
{
    if (store->stamps == NULL)
        return;
    for (size_t i = first; i < count; i++)
        store->stamps[ids[i]] = (block_stamp_t){.id = id, .index = i, .source = ids[i]};
}

/* A whole-block copy overwrote the block: its recorded stamp is void (a
 * generated block's is what adopt_block read from the copy). */
static void stamp_drop(kvio_block_store_t *store, uint32_t block)
{
    if (store->stamps != NULL && !store->generated)
        store->stamps[block].index = STAMP_NONE;
}

/* Generated pool: a block's bytes came back (from a tier or the swap
 * space): it now holds what their stamp says, and every byte must be what
 * that stamp makes. False (the block holds nothing) when they are not: a
 * tier gave back bytes no block of this store ever had. */
static bool adopt_block(kvio_block_store_t *store, uint32_t block, const unsigned char *bytes)
{
    uint64_t stamp[4];
    memcpy(stamp, bytes, sizeof(stamp));
    block_stamp_t *held = &store->stamps[block];
    *held = (block_stamp_t){.id = stamp[1], .index = stamp[2], .source = (uint32_t)stamp[3]};
    if (stamp[0] != STAMP_MAGIC || stamp[2] == STAMP_NONE || stamp[3] > UINT32_MAX ||
        !kvio_data_verify(&store->data, content_key(store, held), sizeof(stamp),
                          bytes + sizeof(stamp), store->block_bytes - sizeof(stamp))) {
        held->index = STAMP_NONE;
        return false;
    }
    return true;
}

/* GPU pool, whole blocks (data other than zero): each made in the pinned
 * bounce buffer and copied up. */
static void flush_gpu_blocks(kvio_block_store_t *store, const uint32_t *blocks, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t block = blocks[i];
        if (store->stamps[block].index == STAMP_NONE)
            continue;
        block_content(store, block, store->bounce);
        store->stamps[block].index = STAMP_NONE;
        kvio_status_t status = kvio_device_copy(store->device, block_data(store, block),
                                                store->bounce, store->block_bytes);
        if (status != KVIO_OK) {
            gpu_failed(store, status, "writing KV blocks' bytes on the GPU");
            return;
        }
    }
}

/* Writes the recorded bytes of blocks about to be read. */
static void stamp_flush(kvio_block_store_t *store, const uint32_t *blocks, size_t count)
{
    if (store->stamps == NULL || store->generated)
        return;
    size_t pending = 0;
    for (size_t i = 0; i < count; i++)
        pending += store->stamps[blocks[i]].index != STAMP_NONE;
    if (pending == 0)
        return;
    if (store->device != NULL && store->data.kind != KVIO_DATA_ZERO) {
        flush_gpu_blocks(store, blocks, count);
        return;
    }
    if (store->device != NULL) {
        /* GPU pool, stamps alone: they go up in batches of small copies
         * from the pinned bounce buffer (from pageable memory each copy
         * would wait). */
        size_t per_batch = bounce_bytes(store) / (4 * sizeof(uint64_t));
        if (per_batch > pending)
            per_batch = pending;
        kvio_device_copy_t *copies = malloc(per_batch * sizeof(*copies));
        kvio_status_t status = copies != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
        uint64_t *staged = (uint64_t *)store->bounce;
        size_t num_copies = 0;
        for (size_t i = 0; i < count && status == KVIO_OK; i++) {
            uint32_t block = blocks[i];
            if (store->stamps[block].index == STAMP_NONE)
                continue;
            uint64_t *stamp = staged + num_copies * 4;
            stamp_of(store, block, stamp);
            copies[num_copies++] = (kvio_device_copy_t){
                .dst = block_data(store, block), .src = stamp, .bytes = stamp_bytes(store)};
            store->stamps[block].index = STAMP_NONE;
            if (num_copies == per_batch) { /* waited for: the bounce buffer is reused */
                status = kvio_device_copy_batch(store->device, copies, num_copies);
                num_copies = 0;
            }
        }
        if (status == KVIO_OK && num_copies > 0)
            status = kvio_device_copy_batch(store->device, copies, num_copies);
        if (status != KVIO_OK)
            gpu_failed(store, status, "stamping KV blocks on the GPU");
        free(copies);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        uint32_t block = blocks[i];
        if (store->stamps[block].index == STAMP_NONE)
            continue;
        block_content(store, block, block_data(store, block));
        store->stamps[block].index = STAMP_NONE;
    }
}

void kvio_block_store_materialize(kvio_block_store_t *store, const uint32_t *blocks,
                                  size_t count)
{
    stamp_flush(store, blocks, count);
}

/* ---------- lower tiers ---------- */

/* Tier calls come from the engine's thread and, with tier_io: async in
 * emulate, from the store's I/O thread: one lock for all of them. */
static void tiers_lock(kvio_block_store_t *store)
{
    if (store->io != NULL)
        pthread_mutex_lock(&store->io->tier_lock);
}

static void tiers_unlock(kvio_block_store_t *store)
{
    if (store->io != NULL)
        pthread_mutex_unlock(&store->io->tier_lock);
}

void kvio_block_store_with_tiers(kvio_block_store_t *store, void (*fn)(void *context),
                                 void *context)
{
    tiers_lock(store);
    fn(context);
    tiers_unlock(store);
}

/* Whether tier takes blocks of the write policy and lacks hash (under the
 * tiers' lock). */
static bool tier_wants(const kvio_tier_t *tier, kvio_hash_t hash, int policy)
{
    return kvio_tier_write_policy(tier) == policy && !kvio_tier_contains(tier, hash);
}

/* A save not made: every tier of its write policy that lacks hash counts
 * it (count: kvio_tier_count_skipped or kvio_tier_count_cut). */
static void count_unsaved(kvio_block_store_t *store, kvio_hash_t hash, int policy,
                          void (*count)(kvio_tier_t *tier))
{
    tiers_lock(store);
    for (size_t t = 0; t < store->saved_tiers; t++)
        if (tier_wants(store->tiers[t], hash, policy))
            count(store->tiers[t]);
    tiers_unlock(store);
}

/* Whether the run's end for the tiers (kvio_block_store_until) has come:
 * no transfer begins then. */
static bool past_until(kvio_block_store_t *store)
{
    uint64_t until_ns = atomic_load_explicit(&store->until_ns, memory_order_relaxed);
    return until_ns != 0 && kvio_time_ns() >= until_ns;
}

void kvio_block_store_until(kvio_block_store_t *store, uint64_t until_ns)
{
    atomic_store_explicit(&store->until_ns, until_ns, memory_order_relaxed);
}

/* Records (under the tiers' lock) that pool block id now holds hash, read
 * from tier: the first 32 tiers only, a later one is asked as before. */
static void mark_loaded(kvio_block_store_t *store, const kvio_tier_t *tier, kvio_hash_t hash,
                        uint32_t id)
{
    loaded_from_t *from = &store->loaded_from[id];
    if (!kvio_hash_equal(from->hash, hash))
        *from = (loaded_from_t){.hash = hash};
    for (size_t t = 0; t < store->num_tiers && t < 32; t++)
        if (store->tiers[t] == tier)
            from->tiers |= 1u << t;
}

/* Whether a tier of the write policy lacks hash, which pool block id holds.
 * A write-through check skips the tiers the block was just loaded from
 * (they hold it: no request to a shared tier) and forgets them: a later
 * save of the hash asks them all again, so a block a tier has evicted
 * meanwhile is saved again. While the I/O thread holds the tiers (a batch
 * on its way to a device) the engine does not wait to ask: it is taken as
 * wanted, and the I/O thread, which asks again, skips what a tier already
 * holds. */
static bool wants_save(kvio_block_store_t *store, uint32_t id, kvio_hash_t hash, int policy)
{
    bool has_policy = false;
    for (size_t t = 0; t < store->saved_tiers; t++)
        has_policy = has_policy || kvio_tier_write_policy(store->tiers[t]) == policy;
    if (!has_policy)
        return false;
    if (store->io != NULL && pthread_mutex_trylock(&store->io->tier_lock) != 0)
        return true;
    uint32_t held = 0;
    loaded_from_t *from = &store->loaded_from[id];
    if (policy == KVIO_TIER_WRITE_THROUGH && kvio_hash_equal(from->hash, hash)) {
        held = from->tiers;
        from->tiers = 0;
    }
    bool wanted = false;
    for (size_t t = 0; t < store->saved_tiers && !wanted; t++)
        wanted = (t >= 32 || !(held & (1u << t))) && tier_wants(store->tiers[t], hash, policy);
    tiers_unlock(store);
    return wanted;
}

/* Emulate: a transfer begun at start_ns that counts for cost_ns (a tier's
 * rate) is waited out, outside the tiers' lock; simulate's costs are
 * modelled, not waited. */
static void pace(const kvio_block_store_t *store, uint64_t start_ns, int64_t cost_ns)
{
    if (has_bytes(store))
        kvio_tier_pace(start_ns, cost_ns);
}

/* Saves the I/O thread writes to a tier at once: consecutive staged saves
 * of one write policy, so that a file tier's queue depth is used. */
#define SAVE_BATCH 16

/* Writes count blocks (host bytes; NULL in simulate) of one write policy
 * to every tier of it that lacks them, each tier's share as one batch;
 * their time adds to *tier_ns_p. A failed write (Redis away, a full disk)
 * is counted by the tier (stats.errors, the first one logged) and leaves
 * the block out of it: a later miss, never the end of the run. */
static void put_tiers_batch(kvio_block_store_t *store, const kvio_hash_t *hashes,
                            const void *const *data, size_t count, int policy,
                            int64_t *tier_ns_p)
{
    kvio_hash_t wanted[SAVE_BATCH];
    const void *wanted_data[SAVE_BATCH];
    for (size_t t = 0; t < store->saved_tiers; t++) {
        kvio_tier_t *tier = store->tiers[t];
        if (kvio_tier_write_policy(tier) != policy)
            continue;
        uint64_t start_ns = kvio_time_ns();
        int64_t cost_ns = 0;
        size_t n = 0;
        bool held[SAVE_BATCH];
        tiers_lock(store);
        /* One lookup for the batch: a shared tier's is one round trip. */
        (void)kvio_tier_lookup(tier, hashes, count, held);
        for (size_t i = 0; i < count; i++) {
            if (!held[i]) {
                wanted[n] = hashes[i];
                wanted_data[n++] = data[i];
            }
        }
        if (n > 0)
            (void)kvio_tier_put_batch(tier, wanted, wanted_data, n, &cost_ns);
        tiers_unlock(store);
        pace(store, start_ns, cost_ns);
        *tier_ns_p += cost_ns;
    }
}

/* What became of a save handed to the I/O thread. */
typedef enum {
    STAGE_QUEUED, /* staged: the I/O thread writes it */
    STAGE_FULL,   /* every slot taken and the store skips such saves */
    STAGE_CUT,    /* the tiers' end (until_ns) came while it waited for a slot */
    STAGE_FAILED, /* out of memory, or the copy failed: the engine thread writes it */
} stage_outcome_t;

static stage_outcome_t stage_save(kvio_block_store_t *store, const uint32_t *blocks,
                                  kvio_hash_t hash, int policy);

void kvio_block_store_cache(kvio_block_store_t *store, const uint32_t *blocks, kvio_hash_t hash,
                            int policy, int64_t *tier_ns_p)
{
    if ((store->chunk_blocks > 1 && policy != KVIO_TIER_WRITE_THROUGH) ||
        !wants_save(store, blocks[store->chunk_blocks - 1], hash, policy))
        return;
    if (past_until(store)) {
        /* The run has ended for the tiers (#54: a long prompt's saves kept
         * a step, and the run, going for seconds past the drain's cap). */
        count_unsaved(store, hash, policy, kvio_tier_count_cut);
        return;
    }
    stamp_flush(store, blocks, store->chunk_blocks);
    if (store->io != NULL) {
        /* The I/O thread writes it; the engine waits for a free staging
         * slot (the tiers' backpressure) and copies the block into it (an
         * offload's copy out of the pool; a generated block is made there):
         * both are the iteration's tier time (#54: the copies of a long
         * prompt's blocks, uncounted, made mlperf/storage-only's
         * iterations end 58 ms past their plan at p99). */
        uint64_t start_ns = kvio_time_ns();
        stage_outcome_t staged = stage_save(store, blocks, hash, policy);
        *tier_ns_p += (int64_t)(kvio_time_ns() - start_ns);
        if (staged == STAGE_QUEUED)
            return;
        if (staged != STAGE_FAILED) {
            /* save_full: skip, or the tiers' end came while it waited. */
            count_unsaved(store, hash, policy,
                          staged == STAGE_FULL ? kvio_tier_count_skipped : kvio_tier_count_cut);
            return;
        }
    }
    const void *data = block_data(store, blocks[0]);
    kvio_status_t copied = KVIO_OK;
    if (has_bytes(store) && (store->chunk_blocks > 1 || store->generated)) {
        /* A chunk's blocks become one object (a generated block is made in it). */
        copied = copy_chunk(store, blocks, store->chunk_blocks, store->object, true);
        data = store->object;
    } else if (store->device != NULL) {
        /* A GPU block is read to the bounce buffer once (the engine's own:
         * the I/O thread has its own). */
        copied = kvio_device_copy(store->device, store->bounce, data, store->block_bytes);
        data = store->bounce;
    }
    if (copied != KVIO_OK) {
        gpu_failed(store, copied, "reading a KV block from the GPU");
        return;
    }
    int64_t cost_ns = 0;
    put_tiers_batch(store, &hash, &data, 1, policy, &cost_ns);
    if (store->async && store->io == NULL)
        store->saves_ns += cost_ns; /* simulate: on the link once the iteration ends */
    else
        *tier_ns_p += cost_ns;
}

/* The first tier holding hash, or NULL. */
static kvio_tier_t *tier_holding(const kvio_block_store_t *store, kvio_hash_t hash)
{
    for (size_t t = 0; t < store->num_tiers; t++)
        if (kvio_tier_contains(store->tiers[t], hash))
            return store->tiers[t];
    return NULL;
}

/* Reads a load wanted that the run's end cut: each object of hashes a
 * tier holds is counted by it (cut_gets; with chunks only a chunk's last
 * block names an object). */
static void count_cut_gets(kvio_block_store_t *store, const kvio_hash_t *hashes, uint32_t count)
{
    tiers_lock(store);
    for (uint32_t i = 0; i < count; i++) {
        kvio_tier_t *tier = tier_holding(store, hashes[i]);
        if (tier != NULL)
            kvio_tier_count_cut_get(tier);
    }
    tiers_unlock(store);
}

/* The leading run of hashes (up to count) the first tier holding
 * hashes[0] has, read into data, each tier asked in order for what it
 * holds and its bytes at once (a shared tier's: one round trip, where
 * asking which holds it, how far, then getting them took three). *got_p:
 * how many came back whole, *tier_p the tier they came from (NULL: none
 * holds hashes[0]). Returns what ended the run: KVIO_OK when the tier
 * holds no more, else the tier's failure (the rest is computed). Under
 * the tiers' lock. */
static kvio_status_t get_from_tiers(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                    void *const *data, size_t count, size_t *got_p,
                                    kvio_tier_t **tier_p, int64_t *cost_ns_p)
{
    *tier_p = NULL;
    *got_p = 0;
    *cost_ns_p = 0;
    for (size_t t = 0; t < store->num_tiers; t++) {
        int64_t cost_ns = 0;
        kvio_status_t status = kvio_tier_get_held(store->tiers[t], hashes, data, count, got_p,
                                                  &cost_ns);
        *cost_ns_p += cost_ns;
        if (*got_p > 0)
            *tier_p = store->tiers[t];
        if (*got_p > 0 || status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* How many leading hashes some tier holds: each tier's run asked at once
 * (a shared tier's is one round trip), from where the longest ends. */
static size_t held_in_tiers(const kvio_block_store_t *store, const kvio_hash_t *hashes,
                            size_t count)
{
    size_t covered = 0, longest = 1;
    while (covered < count && longest > 0) {
        longest = 0;
        for (size_t t = 0; t < store->num_tiers; t++) {
            size_t run = kvio_tier_lookup(store->tiers[t], hashes + covered, count - covered,
                                          NULL);
            longest = run > longest ? run : longest;
        }
        covered += longest;
    }
    return covered;
}

size_t kvio_block_store_in_tiers(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                 size_t first, size_t end, int64_t *tier_ns_p)
{
    uint32_t chunk = store->chunk_blocks;
    uint64_t start_ns = store->io != NULL ? kvio_time_ns() : 0;
    tiers_lock(store);
    if (store->io != NULL)
        *tier_ns_p += (int64_t)(kvio_time_ns() - start_ns);
    /* Each object is named by its last block's hash. */
    size_t covered = first;
    if (chunk == 1)
        covered += held_in_tiers(store, hashes + first, end - first);
    for (size_t next = (first / chunk + 1) * chunk;
         chunk > 1 && next <= end && tier_holding(store, hashes[next - 1]) != NULL; next += chunk)
        covered = next;
    tiers_unlock(store);
    return covered - first;
}

size_t kvio_block_store_num_tiers(const kvio_block_store_t *store)
{
    return store->num_tiers;
}

/* GPU pool: blocks a tier lends in place (the host tier's arena, pinned
 * when asked) go up as one batch on the copy stream; the others come
 * through the pinned bounce buffer one at a time. A failed copy is the
 * status (the caller records it). */
static kvio_status_t load_gpu(kvio_block_store_t *store, const kvio_hash_t *hashes,
                              const uint32_t *ids, uint32_t wanted, uint32_t *loaded_p,
                              int64_t *tier_ns_p)
{
    kvio_device_copy_t *copies = malloc(((size_t)wanted + 1) * sizeof(*copies));
    kvio_tier_t **lenders = malloc(((size_t)wanted + 1) * sizeof(*lenders));
    kvio_status_t status = copies != NULL && lenders != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    uint32_t loaded = 0, num_lent = 0;
    /* With an I/O thread, loads run on it, with its own bounce buffer. */
    unsigned char *bounce = store->io != NULL ? store->io->bounce : store->bounce;
    uint64_t start_ns = kvio_time_ns();
    int64_t got_ns = 0; /* the gets' paced time */
    /* The whole batch under the lock: a lent block must stay in its tier
     * until its copy is done. */
    tiers_lock(store);
    for (; status == KVIO_OK && loaded < wanted; loaded++) {
        kvio_hash_t hash = hashes[loaded];
        kvio_tier_t *tier = tier_holding(store, hash);
        void *block = block_data(store, ids[loaded]);
        const void *lent = NULL;
        kvio_status_t got = tier != NULL ? kvio_tier_lend(tier, hash, &lent)
                                         : KVIO_ERR_NOT_FOUND;
        if (got == KVIO_OK) {
            copies[num_lent] = (kvio_device_copy_t){.dst = block, .src = lent,
                                                    .bytes = store->block_bytes};
            lenders[num_lent++] = tier;
        } else if (got == KVIO_ERR_UNSUPPORTED) {
            int64_t cost_ns = 0;
            got = kvio_tier_get(tier, hash, bounce, &cost_ns);
            got_ns += cost_ns;
            if (got == KVIO_OK) {
                status = kvio_device_copy(store->device, block, bounce, store->block_bytes);
                if (status != KVIO_OK)
                    break;
            }
        }
        if (got != KVIO_OK)
            break; /* a miss (or a tier error): compute the rest */
        mark_loaded(store, tier, hash, ids[loaded]);
        stamp_drop(store, ids[loaded]);
    }
    if (status == KVIO_OK && num_lent > 0) {
        uint64_t copy_start_ns = kvio_time_ns();
        status = kvio_device_copy_batch(store->device, copies, num_lent);
        int64_t copy_ns = (int64_t)(kvio_time_ns() - copy_start_ns);
        *tier_ns_p += copy_ns;
        for (uint32_t i = 0; i < num_lent; i++)
            kvio_tier_charge_reads(lenders[i], 1, copy_ns / num_lent);
    }
    tiers_unlock(store);
    pace(store, start_ns, got_ns);
    *tier_ns_p += got_ns;
    free(copies);
    free(lenders);
    *loaded_p = loaded;
    return status;
}

/* The I/O thread's load says how far it came; true when the engine has
 * stopped waiting for it (a prefetch policy's) or the run's end for the
 * tiers has come (the engine's own load, progress NULL, only then). */
static bool told_to_stop(kvio_block_store_t *store, kvio_kv_load_t *progress, uint32_t loaded)
{
    if (progress == NULL)
        return past_until(store);
    pthread_mutex_lock(&store->io->lock);
    progress->loaded = loaded;
    bool stop = progress->stop || store->io->cut || past_until(store);
    pthread_mutex_unlock(&store->io->lock);
    return stop;
}

/* A load that ended with loaded of its wanted blocks: where the run's end
 * (the tiers' end, or the run cut) ended it, not the engine (a prefetch
 * policy's stop), the reads it did not make are counted. */
static void count_if_cut(kvio_block_store_t *store, const kvio_hash_t *hashes, uint32_t loaded,
                         uint32_t wanted, kvio_kv_load_t *progress)
{
    if (loaded >= wanted)
        return;
    bool ended = past_until(store);
    if (progress != NULL) {
        pthread_mutex_lock(&store->io->lock);
        ended = (ended || store->io->cut) && !progress->stop;
        pthread_mutex_unlock(&store->io->lock);
    }
    if (ended)
        count_cut_gets(store, hashes + loaded, wanted - loaded);
}

/* Generated pool: count blocks read back from tier into bytes
 * (consecutive) become the pool blocks ids, each checked against what its
 * stamp makes; the first that is not stops them, and tier counts the
 * object it came in (named by object_hash, or with NULL the block's own
 * hash in hashes) as one that came back changed. How many were taken. */
static uint32_t adopt_blocks(kvio_block_store_t *store, kvio_tier_t *tier,
                             const kvio_hash_t *hashes, const kvio_hash_t *object_hash,
                             const uint32_t *ids, uint32_t count, const unsigned char *bytes)
{
    for (uint32_t i = 0; i < count; i++) {
        if (!adopt_block(store, ids[i], bytes + (uint64_t)i * store->block_bytes)) {
            tiers_lock(store);
            kvio_tier_count_corrupt(tier, object_hash != NULL ? *object_hash : hashes[i],
                                    "not the bytes its owner stamp makes");
            tiers_unlock(store);
            return i;
        }
    }
    return count;
}

/* A chunk loaded whole from tier, under its last block's hash key. */
static void mark_chunk_loaded(kvio_block_store_t *store, const kvio_tier_t *tier,
                              kvio_hash_t key, uint32_t last)
{
    tiers_lock(store);
    mark_loaded(store, tier, key, last);
    tiers_unlock(store);
}

/* Chunks: each object read whole into the thread's buffer, its blocks from
 * the load's on copied into the pool; lead: blocks of the first chunk
 * before hashes[0]. Simulate (no bytes) moves nothing. */
static kvio_status_t load_chunks(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                 const uint32_t *ids, uint32_t lead, uint32_t wanted,
                                 uint32_t *loaded_p, int64_t *tier_ns_p,
                                 kvio_kv_load_t *progress)
{
    unsigned char *buffer = progress != NULL ? store->io->object : store->object;
    kvio_status_t status = KVIO_OK;
    uint32_t loaded = 0;
    while (loaded < wanted && !past_until(store)) {
        uint32_t skip = loaded == 0 ? lead : 0; /* the chunk's blocks before the load's */
        uint32_t count = store->chunk_blocks - skip;
        if (count > wanted - loaded)
            break; /* not a whole chunk (in_tiers counts whole ones only) */
        kvio_hash_t key = hashes[loaded + count - 1];
        uint64_t start_ns = kvio_time_ns();
        int64_t cost_ns = 0;
        tiers_lock(store);
        kvio_tier_t *tier = NULL;
        void *into = buffer;
        size_t got = 0;
        (void)get_from_tiers(store, &key, &into, 1, &got, &tier, &cost_ns);
        tiers_unlock(store);
        pace(store, start_ns, cost_ns);
        *tier_ns_p += cost_ns;
        if (got == 0)
            break; /* a miss (or a tier error): compute the rest */
        if (store->generated) {
            uint32_t adopted = adopt_blocks(store, tier, NULL, &key, ids + loaded, count,
                                            buffer + (uint64_t)skip * store->block_bytes);
            if (adopted == count)
                mark_chunk_loaded(store, tier, key, ids[loaded + count - 1]);
            loaded += adopted;
            if (adopted < count)
                break; /* not what was saved: compute the rest */
            if (told_to_stop(store, progress, loaded))
                break;
            continue;
        }
        if (store->memory != NULL) {
            status = copy_chunk(store, ids + loaded, count,
                                buffer + (uint64_t)skip * store->block_bytes, false);
            if (status != KVIO_OK)
                break;
        }
        for (uint32_t i = 0; i < count; i++)
            stamp_drop(store, ids[loaded + i]);
        mark_chunk_loaded(store, tier, key, ids[loaded + count - 1]);
        loaded += count;
        if (told_to_stop(store, progress, loaded))
            break;
    }
    if (status == KVIO_OK)
        count_if_cut(store, hashes, loaded, wanted, progress);
    *loaded_p = loaded;
    return status;
}

/* The load itself, on whichever thread: host blocks in runs held by one
 * tier, each run read as a batch, up to the first block no tier has. */
static kvio_status_t load_blocks(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                 const uint32_t *ids, uint32_t lead, uint32_t wanted,
                                 uint32_t *loaded_p, int64_t *tier_ns_p,
                                 kvio_kv_load_t *progress)
{
    if (store->chunk_blocks > 1)
        return load_chunks(store, hashes, ids, lead, wanted, loaded_p, tier_ns_p, progress);
    if (store->device != NULL)
        return load_gpu(store, hashes, ids, wanted, loaded_p, tier_ns_p);
    uint32_t loaded = 0;
    void *buffers[LOAD_BATCH];
    unsigned char *scratch = progress != NULL ? store->io->scratch : store->scratch;
    while (loaded < wanted && !past_until(store)) {
        uint64_t start_ns = kvio_time_ns();
        size_t asked = wanted - loaded < LOAD_BATCH ? wanted - loaded : LOAD_BATCH;
        for (size_t i = 0; i < asked; i++)
            buffers[i] = store->generated ? scratch + (uint64_t)i * store->block_bytes
                                          : block_data(store, ids[loaded + i]);
        kvio_tier_t *tier = NULL;
        int64_t cost_ns = 0;
        size_t came = 0;
        tiers_lock(store);
        kvio_status_t status = get_from_tiers(store, hashes + loaded, buffers, asked, &came,
                                              &tier, &cost_ns);
        tiers_unlock(store);
        size_t got = came;
        if (store->generated && got > 0) /* what was not saved is a miss */
            got = adopt_blocks(store, tier, hashes + loaded, NULL, ids + loaded, (uint32_t)got,
                               scratch);
        if (got > 0) {
            tiers_lock(store);
            for (size_t i = 0; i < got; i++)
                mark_loaded(store, tier, hashes[loaded + i], ids[loaded + i]);
            tiers_unlock(store);
        }
        pace(store, start_ns, cost_ns);
        *tier_ns_p += cost_ns;
        for (size_t i = 0; i < got; i++)
            stamp_drop(store, ids[loaded + i]);
        loaded += (uint32_t)got;
        if (got == 0 || got < came || status != KVIO_OK)
            break; /* a miss (or a tier error): compute the rest */
        if (told_to_stop(store, progress, loaded))
            break;
    }
    count_if_cut(store, hashes, loaded, wanted, progress);
    *loaded_p = loaded;
    return KVIO_OK;
}

kvio_status_t kvio_block_store_load(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                    const uint32_t *ids, size_t first, uint32_t wanted,
                                    uint32_t *loaded_p, int64_t *tier_ns_p)
{
    kvio_status_t status =
        load_blocks(store, hashes, ids, (uint32_t)(first % store->chunk_blocks), wanted,
                    loaded_p, tier_ns_p, NULL);
    if (status != KVIO_OK && status != KVIO_ERR_NOMEM)
        gpu_failed(store, status, "loading KV blocks into the GPU");
    return status;
}

/* ---------- tier traffic beside the batch (tier_io: async) ---------- */

static unsigned char *stage_data(const kvio_block_store_t *store, uint32_t slot)
{
    return store->io->stage + (uint64_t)slot * store->object_bytes;
}

/* A load on the I/O thread: its progress told after each batch, and its
 * record freed here when the engine stopped waiting for it. */
static void run_load(kvio_block_store_t *store, kvio_kv_load_t *load)
{
    kvio_kv_io_t *io = store->io;
    int64_t ignored_ns = 0;
    uint32_t loaded = 0;
    kvio_status_t status = load_blocks(store, load->hashes, load->ids, load->lead, load->wanted,
                                       &loaded, &ignored_ns, load);
    pthread_mutex_lock(&io->lock);
    bool abandoned = load->abandoned;
    if (!load->stop)
        load->loaded = loaded; /* a stopped load keeps what the engine took */
    load->status = status;
    load->done = true;
    pthread_mutex_unlock(&io->lock);
    if (abandoned) {
        free(load->hashes);
        free(load->ids);
        free(load);
    }
}

/* Runs count staged saves of one policy as batches and frees their slots. */
static void run_saves(kvio_block_store_t *store, io_job_t *const *jobs, size_t count)
{
    kvio_kv_io_t *io = store->io;
    kvio_hash_t hashes[SAVE_BATCH];
    const void *data[SAVE_BATCH];
    for (size_t i = 0; i < count; i++) {
        hashes[i] = jobs[i]->hash;
        data[i] = stage_data(store, jobs[i]->slot);
    }
    int64_t ignored_ns = 0;
    put_tiers_batch(store, hashes, data, count, jobs[0]->policy, &ignored_ns);
    pthread_mutex_lock(&io->lock);
    for (size_t i = 0; i < count; i++)
        io->free_slots[io->num_free++] = jobs[i]->slot;
    pthread_cond_broadcast(&io->slot_freed);
    pthread_mutex_unlock(&io->lock);
}

/* A load the run's end cut before it began: done, with nothing loaded
 * (its record freed here when the engine stopped waiting for it). Under
 * io->lock. */
static void cut_load(kvio_kv_load_t *load)
{
    load->done = true;
    if (!load->stop)
        load->loaded = 0;
    if (load->abandoned) {
        free(load->hashes);
        free(load->ids);
        free(load);
    }
}

/* A job the run's end cut before it began (kvio_block_store_cut, or the
 * tiers' end come: kvio_block_store_until): a load done with nothing, its
 * reads counted in its tiers' cut_gets, a save counted in their cut_puts
 * and its slot free again. Frees job. */
static void drop_job(kvio_block_store_t *store, io_job_t *job)
{
    kvio_kv_io_t *io = store->io;
    if (job->load == NULL) {
        count_unsaved(store, job->hash, job->policy, kvio_tier_count_cut);
    } else {
        /* Its record stays until it is done (an abandoned one is freed
         * here): its hashes can be read outside the lock. */
        pthread_mutex_lock(&io->lock);
        bool stopped = job->load->stop;
        pthread_mutex_unlock(&io->lock);
        if (!stopped)
            count_cut_gets(store, job->load->hashes, job->load->wanted);
    }
    pthread_mutex_lock(&io->lock);
    if (job->load != NULL) {
        cut_load(job->load);
    } else {
        io->free_slots[io->num_free++] = job->slot;
        pthread_cond_broadcast(&io->slot_freed);
    }
    pthread_mutex_unlock(&io->lock);
    free(job);
}

static io_job_t *io_pop(kvio_kv_io_t *io)
{
    io_job_t *job = io->head;
    io->head = job->next;
    if (io->head == NULL)
        io->tail = NULL;
    return job;
}

static void *io_main(void *context)
{
    kvio_block_store_t *store = context;
    kvio_kv_io_t *io = store->io;
    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (io->head == NULL && !io->quit) {
            io->busy = false;
            pthread_cond_broadcast(&io->idle);
            pthread_cond_wait(&io->work, &io->lock);
        }
        if (io->head == NULL)
            break; /* quit, with everything asked done */
        io_job_t *jobs[SAVE_BATCH];
        size_t count = 0;
        jobs[count++] = io_pop(io);
        while (jobs[0]->load == NULL && count < SAVE_BATCH && io->head != NULL &&
               io->head->load == NULL && io->head->policy == jobs[0]->policy)
            jobs[count++] = io_pop(io);
        io->busy = true;
        pthread_mutex_unlock(&io->lock);
        if (past_until(store)) {
            for (size_t i = 0; i < count; i++)
                drop_job(store, jobs[i]);
        } else {
            if (jobs[0]->load != NULL)
                run_load(store, jobs[0]->load);
            else
                run_saves(store, jobs, count);
            for (size_t i = 0; i < count; i++)
                free(jobs[i]);
        }
        pthread_mutex_lock(&io->lock);
    }
    io->busy = false;
    pthread_cond_broadcast(&io->idle);
    pthread_mutex_unlock(&io->lock);
    return NULL;
}

static void io_push(kvio_kv_io_t *io, io_job_t *job)
{
    pthread_mutex_lock(&io->lock);
    if (io->tail != NULL)
        io->tail->next = job;
    else
        io->head = job;
    io->tail = job;
    pthread_cond_signal(&io->work);
    pthread_mutex_unlock(&io->lock);
}

/* Waits (under io->lock) for a slot to be freed, until the tiers' end
 * when it is set; false once that has come. */
static bool wait_for_slot(kvio_block_store_t *store)
{
    uint64_t until_ns = atomic_load_explicit(&store->until_ns, memory_order_relaxed);
    if (until_ns == 0) {
        pthread_cond_wait(&store->io->slot_freed, &store->io->lock);
        return true;
    }
    if (kvio_time_ns() >= until_ns)
        return false;
    struct timespec until = {.tv_sec = (time_t)(until_ns / 1000000000u),
                             .tv_nsec = (long)(until_ns % 1000000000u)};
    (void)pthread_cond_timedwait(&store->io->slot_freed, &store->io->lock, &until);
    return true;
}

/* Copies the block to a free staging slot, waiting for one while every
 * slot holds a save not yet written (until the tiers' end: STAGE_CUT),
 * and asks the I/O thread to write it. */
static stage_outcome_t stage_save(kvio_block_store_t *store, const uint32_t *blocks,
                                  kvio_hash_t hash, int policy)
{
    kvio_kv_io_t *io = store->io;
    io_job_t *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return STAGE_FAILED;
    pthread_mutex_lock(&io->lock);
    if (io->num_free == 0 && store->skip_saves_when_full) {
        pthread_mutex_unlock(&io->lock);
        free(job);
        return STAGE_FULL;
    }
    bool waiting = true;
    while (io->num_free == 0 && (io->head != NULL || io->busy) && waiting)
        waiting = wait_for_slot(store);
    if (io->num_free == 0 && !waiting) {
        pthread_mutex_unlock(&io->lock);
        free(job);
        return STAGE_CUT;
    }
    bool have = io->num_free > 0;
    if (have)
        job->slot = io->free_slots[--io->num_free];
    pthread_mutex_unlock(&io->lock);
    kvio_status_t copied = KVIO_OK;
    if (have) {
        copied = copy_chunk(store, blocks, store->chunk_blocks, stage_data(store, job->slot),
                            true);
    }
    if (!have || copied != KVIO_OK) {
        if (have) {
            pthread_mutex_lock(&io->lock);
            io->free_slots[io->num_free++] = job->slot;
            pthread_mutex_unlock(&io->lock);
        }
        free(job);
        return STAGE_FAILED;
    }
    job->hash = hash;
    job->policy = policy;
    io_push(io, job);
    return STAGE_QUEUED;
}

static void io_free(kvio_block_store_t *store, kvio_kv_io_t *io)
{
    while (io->head != NULL) {
        io_job_t *job = io->head;
        io->head = job->next;
        free(job);
    }
    pthread_mutex_destroy(&io->lock);
    pthread_mutex_destroy(&io->tier_lock);
    pthread_cond_destroy(&io->work);
    pthread_cond_destroy(&io->idle);
    pthread_cond_destroy(&io->slot_freed);
    if (store->device != NULL) {
        if (io->stage != NULL)
            kvio_device_host_free(store->device, io->stage);
        if (io->bounce != NULL)
            kvio_device_host_free(store->device, io->bounce);
    } else {
        free(io->stage);
    }
    object_free(store, io->object);
    free(io->scratch);
    free(io);
}

/* Emulate with tiers and tier_io: async: the staging slots and the thread. */
static kvio_status_t io_start(kvio_block_store_t *store, char *error_p, size_t error_len)
{
    kvio_kv_io_t *io = calloc(1, sizeof(*io));
    if (io == NULL)
        return KVIO_ERR_NOMEM;
    uint64_t slots = STAGE_MAX_BYTES / store->object_bytes;
    io->num_slots = slots < STAGE_MIN_SLOTS   ? STAGE_MIN_SLOTS
                    : slots > STAGE_MAX_SLOTS ? STAGE_MAX_SLOTS
                                              : (uint32_t)slots;
    uint64_t bytes = (uint64_t)io->num_slots * store->object_bytes;
    void *stage = NULL;
    kvio_status_t status = KVIO_OK;
    if (store->device != NULL) {
        status = kvio_device_host_alloc(store->device, bytes, &stage);
        void *bounce = NULL;
        if (status == KVIO_OK)
            status = kvio_device_host_alloc(store->device, bounce_bytes(store), &bounce);
        if (status == KVIO_OK) {
            io->bounce = bounce;
        } else if (stage != NULL) {
            kvio_device_host_free(store->device, stage);
            stage = NULL;
        }
    } else {
        stage = malloc(bytes);
        status = stage != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    }
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "serve rank %u: cannot allocate %llu bytes (%u objects of "
                 "%llu) to stage KV saves to the tiers", store->rank, (unsigned long long)bytes,
                 io->num_slots, (unsigned long long)store->object_bytes);
        free(io);
        return status;
    }
    io->stage = stage;
    for (uint32_t i = 0; i < io->num_slots; i++)
        io->free_slots[i] = io->num_slots - 1 - i;
    io->num_free = io->num_slots;
    pthread_mutex_init(&io->lock, NULL);
    pthread_mutex_init(&io->tier_lock, NULL);
    pthread_cond_init(&io->work, NULL);
    pthread_cond_init(&io->idle, NULL);
    pthread_condattr_t monotonic; /* wait_for_slot's deadline is kvio_time_ns's */
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&io->slot_freed, &monotonic);
    pthread_condattr_destroy(&monotonic);
    if (store->chunk_blocks > 1 && (io->object = object_alloc(store)) == NULL) {
        snprintf(error_p, error_len, "serve rank %u: cannot allocate %llu bytes for the I/O "
                 "thread's chunk", store->rank, (unsigned long long)store->object_bytes);
        io_free(store, io);
        return KVIO_ERR_NOMEM;
    }
    if (store->generated && (io->scratch = scratch_alloc(store, error_p, error_len)) == NULL) {
        io_free(store, io);
        return KVIO_ERR_NOMEM;
    }
    store->io = io; /* before the thread starts: it reads it */
    if (pthread_create(&io->thread, NULL, io_main, store) != 0) {
        snprintf(error_p, error_len, "serve rank %u: cannot start the thread that moves KV "
                 "blocks to and from the tiers", store->rank);
        store->io = NULL;
        io_free(store, io);
        return KVIO_ERR_INTERNAL;
    }
    return KVIO_OK;
}

/* Lets the thread finish what it was asked, then ends it. */
static void io_stop(kvio_block_store_t *store)
{
    kvio_kv_io_t *io = store->io;
    pthread_mutex_lock(&io->lock);
    io->quit = true;
    pthread_cond_signal(&io->work);
    pthread_mutex_unlock(&io->lock);
    pthread_join(io->thread, NULL);
    store->io = NULL;
    io_free(store, io);
}

void kvio_block_store_cut(kvio_block_store_t *store)
{
    kvio_kv_io_t *io = store->io;
    if (io == NULL)
        return;
    pthread_mutex_lock(&io->lock);
    io->cut = true;
    io_job_t *jobs = io->head;
    io->head = io->tail = NULL;
    pthread_mutex_unlock(&io->lock);
    while (jobs != NULL) {
        io_job_t *job = jobs;
        jobs = job->next;
        drop_job(store, job);
    }
    kvio_block_store_settle(store); /* the batch under way */
}

void kvio_block_store_settle(kvio_block_store_t *store)
{
    kvio_kv_io_t *io = store->io;
    if (io == NULL)
        return;
    pthread_mutex_lock(&io->lock);
    while (io->head != NULL || io->busy)
        pthread_cond_wait(&io->idle, &io->lock);
    pthread_mutex_unlock(&io->lock);
}

/* Simulate, async: the link to the tiers is one queue; a transfer ready at
 * ready_ns starts when the link is free and ends cost_ns later. */
static int64_t link_queue(kvio_block_store_t *store, int64_t ready_ns, int64_t cost_ns)
{
    int64_t start_ns = store->link_free_ns > ready_ns ? store->link_free_ns : ready_ns;
    store->link_free_ns = start_ns + cost_ns;
    return store->link_free_ns;
}

/* Simulate, a P/D request's layer-wise transfer (handoff->layers > 0):
 * each layer's KV can leave once the prefill computed it, so the link may
 * carry it from the prefill's start, but the last layer leaves only at the
 * prefill's end and takes its share of the cost after it. Ends no sooner
 * than now_ns (the decode's admission: it was there already). */
static int64_t layerwise_queue(kvio_block_store_t *store, const kvio_engine_handoff_t *handoff,
                               int64_t now_ns, int64_t cost_ns)
{
    int64_t start_ns = store->link_free_ns > handoff->prefill_start_ns
                           ? store->link_free_ns
                           : handoff->prefill_start_ns;
    if (handoff->source_free_ns != NULL && *handoff->source_free_ns > start_ns)
        start_ns = *handoff->source_free_ns;
    int64_t end_ns = start_ns + cost_ns;
    int64_t last_layer_ns = handoff->handoff_ns + cost_ns / handoff->layers;
    if (end_ns < last_layer_ns)
        end_ns = last_layer_ns;
    store->link_free_ns = end_ns;
    if (handoff->source_free_ns != NULL)
        *handoff->source_free_ns = end_ns;
    return end_ns > now_ns ? end_ns : now_ns;
}

/* Simulate, a P/D request's whole transfer: on the decode rank's link and
 * on its prefill rank's, each carrying one transfer at a time. */
static int64_t handoff_queue(kvio_block_store_t *store, const kvio_engine_handoff_t *handoff,
                             int64_t now_ns, int64_t cost_ns)
{
    int64_t ready_ns = now_ns;
    if (handoff->source_free_ns != NULL && *handoff->source_free_ns > ready_ns)
        ready_ns = *handoff->source_free_ns;
    int64_t end_ns = link_queue(store, ready_ns, cost_ns);
    if (handoff->source_free_ns != NULL)
        *handoff->source_free_ns = end_ns;
    return end_ns;
}

kvio_status_t kvio_block_store_load_start(kvio_block_store_t *store, const kvio_hash_t *hashes,
                                          const uint32_t *ids, size_t first, uint32_t wanted,
                                          int64_t now_ns, const kvio_engine_handoff_t *handoff,
                                          kvio_kv_load_t **load_p)
{
    kvio_kv_load_t *load = calloc(1, sizeof(*load));
    io_job_t *job = store->io != NULL ? calloc(1, sizeof(*job)) : NULL;
    if (load != NULL) {
        load->hashes = malloc(((size_t)wanted + 1) * sizeof(*load->hashes));
        load->ids = malloc(((size_t)wanted + 1) * sizeof(*load->ids));
    }
    if (load == NULL || load->hashes == NULL || load->ids == NULL ||
        (store->io != NULL && job == NULL)) {
        kvio_block_store_load_free(store, load);
        free(job);
        return KVIO_ERR_NOMEM;
    }
    memcpy(load->hashes, hashes, (size_t)wanted * sizeof(*hashes));
    memcpy(load->ids, ids, (size_t)wanted * sizeof(*ids));
    load->wanted = wanted;
    load->lead = (uint32_t)(first % store->chunk_blocks);
    load->end_ns = -1;
    *load_p = load;
    if (store->io != NULL) {
        job->load = load;
        io_push(store->io, job);
        return KVIO_OK;
    }
    /* Simulate: the tiers' model says how long; the link is one queue. */
    int64_t cost_ns = 0;
    kvio_status_t status = kvio_block_store_load(store, load->hashes, load->ids, first, wanted,
                                                 &load->loaded, &cost_ns);
    if (handoff != NULL)
        cost_ns += handoff->latency_ns; /* once: the peer tier charges its bytes */
    if (handoff != NULL && handoff->layers > 0) {
        load->end_ns = layerwise_queue(store, handoff, now_ns, cost_ns);
        load->begin_ns = now_ns; /* what was not there at admission comes by end_ns */
    } else if (handoff != NULL) {
        load->end_ns = handoff_queue(store, handoff, now_ns, cost_ns);
        load->begin_ns = load->end_ns - cost_ns;
    } else {
        load->end_ns = link_queue(store, now_ns, cost_ns);
        load->begin_ns = load->end_ns - cost_ns;
    }
    load->status = status;
    load->done = true;
    return status;
}

bool kvio_block_store_load_stop(kvio_block_store_t *store, kvio_kv_load_t *load, int64_t now_ns,
                                uint32_t *loaded_p)
{
    if (store->io == NULL) {
        /* Simulate: the blocks the link has carried by now. */
        double share = load->end_ns > load->begin_ns
                           ? (double)(now_ns - load->begin_ns) /
                                 (double)(load->end_ns - load->begin_ns)
                           : 1.0;
        share = share < 0 ? 0 : share > 1 ? 1 : share;
        *loaded_p = (uint32_t)((double)load->loaded * share);
        kvio_block_store_load_free(store, load);
        return true;
    }
    pthread_mutex_lock(&store->io->lock);
    load->stop = true;
    *loaded_p = load->loaded;
    bool done = load->done;
    load->abandoned = !done;
    pthread_mutex_unlock(&store->io->lock);
    if (done)
        kvio_block_store_load_free(store, load);
    return !done;
}

bool kvio_block_store_load_done(kvio_block_store_t *store, kvio_kv_load_t *load, int64_t now_ns,
                                uint32_t *loaded_p)
{
    bool done;
    if (store->io != NULL) {
        pthread_mutex_lock(&store->io->lock);
        done = load->done;
        pthread_mutex_unlock(&store->io->lock);
    } else {
        done = now_ns >= load->end_ns;
    }
    if (!done)
        return false;
    if (load->status != KVIO_OK && load->status != KVIO_ERR_NOMEM && store->io != NULL)
        gpu_failed(store, load->status, "loading KV blocks into the GPU");
    else if (load->status == KVIO_ERR_NOMEM && store->status == KVIO_OK)
        store->status = KVIO_ERR_NOMEM;
    *loaded_p = load->loaded;
    return true;
}

uint32_t kvio_block_store_load_wanted(const kvio_kv_load_t *load)
{
    return load->wanted;
}

int64_t kvio_block_store_load_end_ns(const kvio_kv_load_t *load)
{
    return load->end_ns;
}

void kvio_block_store_load_free(kvio_block_store_t *store, kvio_kv_load_t *load)
{
    if (load == NULL)
        return;
    if (store->io != NULL) {
        pthread_mutex_lock(&store->io->lock);
        bool done = load->done;
        pthread_mutex_unlock(&store->io->lock);
        if (!done)
            kvio_block_store_settle(store); /* the thread is done with it after this */
    }
    free(load->hashes);
    free(load->ids);
    free(load);
}

void kvio_block_store_saves_at(kvio_block_store_t *store, int64_t end_ns)
{
    if (store->saves_ns == 0)
        return;
    link_queue(store, end_ns, store->saves_ns);
    store->saves_ns = 0;
}

/* ---------- swap space ---------- */

uint32_t kvio_block_store_swap_room(const kvio_block_store_t *store)
{
    return store->swap_num_free;
}

void kvio_block_store_swap_forget(kvio_swapped_t *swapped)
{
    free(swapped->slots);
    free(swapped->checksums);
    *swapped = (kvio_swapped_t){0};
}

void kvio_block_store_swap_release(kvio_block_store_t *store, kvio_swapped_t *swapped)
{
    for (size_t i = swapped->slots != NULL ? swapped->blocks : 0; i > 0; i--)
        store->swap_free[store->swap_num_free++] = swapped->slots[i - 1];
    kvio_block_store_swap_forget(swapped);
}

kvio_status_t kvio_block_store_swap_out(kvio_block_store_t *store, const uint32_t *ids,
                                        size_t count, kvio_swapped_t *swapped,
                                        int64_t *real_ns_p)
{
    stamp_flush(store, ids, count);
    if (store->status != KVIO_OK)
        return store->status;
    kvio_block_store_swap_forget(swapped);
    swapped->slots = malloc((count + 1) * sizeof(uint32_t));
    kvio_device_copy_t *copies =
        store->device != NULL ? malloc((count + 1) * sizeof(*copies)) : NULL;
    kvio_status_t status = KVIO_OK;
    if (swapped->slots == NULL || (store->device != NULL && copies == NULL) ||
        (store->verify_swaps &&
         (swapped->checksums = malloc((count + 1) * sizeof(uint64_t))) == NULL)) {
        status = KVIO_ERR_NOMEM;
        goto fail;
    }
    for (size_t i = 0; i < count; i++)
        swapped->slots[i] = store->swap_free[--store->swap_num_free];
    uint64_t start_ns = kvio_time_ns();
    if (store->device != NULL) {
        for (size_t i = 0; i < count; i++)
            copies[i] = (kvio_device_copy_t){.dst = swap_slot_data(store, swapped->slots[i]),
                                             .src = block_data(store, ids[i]),
                                             .bytes = store->block_bytes};
        status = kvio_device_copy_batch(store->device, copies, count);
        if (status != KVIO_OK) {
            kvio_error("serve rank %u: swapping KV blocks out of the GPU: %s", store->rank,
                       kvio_device_error(store->device));
            for (size_t i = count; i > 0; i--) /* the slots go back */
                store->swap_free[store->swap_num_free++] = swapped->slots[i - 1];
            goto fail;
        }
    }
    for (size_t i = 0; i < count; i++) {
        unsigned char *slot = swap_slot_data(store, swapped->slots[i]);
        if (store->generated)
            block_content(store, ids[i], slot); /* the block's bytes, made where they go */
        else if (store->device == NULL)
            memcpy(slot, block_data(store, ids[i]), store->block_bytes);
        if (swapped->checksums != NULL)
            swapped->checksums[i] = XXH3_64bits(slot, store->block_bytes);
    }
    swapped->blocks = count;
    *real_ns_p = (int64_t)(kvio_time_ns() - start_ns);
    free(copies);
    return KVIO_OK;
fail:
    free(copies);
    kvio_block_store_swap_forget(swapped);
    return status;
}

/* GPU pool: the swapped blocks go back as one batch on the copy stream;
 * with verify_swaps they are read back through the bounce buffer and
 * checked. */
static kvio_status_t swap_in_gpu(kvio_block_store_t *store, const kvio_swapped_t *swapped,
                                 const uint32_t *ids, size_t last, size_t resident,
                                 uint64_t *failures_p)
{
    kvio_device_copy_t *copies = malloc((last - resident) * sizeof(*copies));
    if (copies == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = resident; i < last; i++)
        copies[i - resident] = (kvio_device_copy_t){
            .dst = block_data(store, ids[i]), .src = swap_slot_data(store, swapped->slots[i]),
            .bytes = store->block_bytes};
    kvio_status_t status = kvio_device_copy_batch(store->device, copies, last - resident);
    free(copies);
    for (size_t i = resident; i < last && status == KVIO_OK; i++)
        stamp_drop(store, ids[i]);
    for (size_t i = resident; i < last && status == KVIO_OK && swapped->checksums != NULL; i++) {
        status = kvio_device_copy(store->device, store->bounce, block_data(store, ids[i]),
                                  store->block_bytes);
        if (status == KVIO_OK &&
            XXH3_64bits(store->bounce, store->block_bytes) != swapped->checksums[i])
            (*failures_p)++;
    }
    if (status != KVIO_OK)
        kvio_error("serve rank %u: swapping KV blocks into the GPU: %s", store->rank,
                   kvio_device_error(store->device));
    return status;
}

kvio_status_t kvio_block_store_swap_in(kvio_block_store_t *store, kvio_swapped_t *swapped,
                                       const uint32_t *ids, size_t count, size_t resident,
                                       uint64_t *failures_p, int64_t *real_ns_p)
{
    uint64_t start_ns = kvio_time_ns();
    size_t last = swapped->blocks < count ? swapped->blocks : count;
    if (store->device != NULL && last > resident) {
        kvio_status_t status = swap_in_gpu(store, swapped, ids, last, resident, failures_p);
        if (status != KVIO_OK)
            return status;
    }
    for (size_t i = resident; store->generated && i < last; i++) {
        /* The slot's bytes are the block's now: checked against what they
         * were swapped out as and against what their stamp makes. */
        const unsigned char *slot = swap_slot_data(store, swapped->slots[i]);
        bool changed = swapped->checksums != NULL &&
                       XXH3_64bits(slot, store->block_bytes) != swapped->checksums[i];
        if (!adopt_block(store, ids[i], slot) || changed)
            (*failures_p)++;
    }
    for (size_t i = resident; store->device == NULL && !store->generated && i < last; i++) {
        unsigned char *data = block_data(store, ids[i]);
        memcpy(data, swap_slot_data(store, swapped->slots[i]), store->block_bytes);
        stamp_drop(store, ids[i]);
        if (swapped->checksums != NULL &&
            XXH3_64bits(data, store->block_bytes) != swapped->checksums[i])
            (*failures_p)++;
    }
    *real_ns_p = (int64_t)(kvio_time_ns() - start_ns);
    for (size_t i = 0; i < swapped->blocks; i++)
        store->swap_free[store->swap_num_free++] = swapped->slots[i];
    kvio_block_store_swap_forget(swapped);
    return KVIO_OK;
}
