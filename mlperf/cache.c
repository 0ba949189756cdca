/* kv-cache.py's MultiTierCache (kv_cache/cache.py) without its GPU tier:
 * a CPU tier of cpu_mem_gb GiB over the storage tier (NVMeBackend, files
 * in the cache directory, 95 % of its free space unless a capacity is
 * given), an object per key written whole to the first tier with room and
 * read whole on a hit; a full tier evicts by LRU (last access, then access
 * count) from a sorted snapshot, the CPU tier demoting to storage, storage
 * deleting (_ensure_space_in_tier, _demote_entry); at most
 * max_concurrent_allocs allocations at a time (its semaphore). Counters
 * and latencies as its stats dict keeps them, with its quirks: a demotion's
 * write counts no storage bytes written, a storage read counts its tokens
 * at the full (not per-TP) bytes per token. One lock for what its
 * metadata, memory and stats locks guard; a lock per entry held through
 * its reads and its demotion, as its entry locks are. */
#include "mlperf/mlperf_int.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvio/array.h"
#include "kvio/clock.h"
#include "kvio/log.h"

/* config.yaml's eviction section. */
#define TARGET_USAGE_RATIO 0.8
#define LARGE_ENTRY_LIMIT_RATIO 0.95
#define MAX_RECURSION_DEPTH 10
#define MAX_EVICTIONS_HARD_CAP 5000
#define MAX_EVICTIONS_MIN 1000

typedef struct entry {
    uint64_t key;
    int location; /* MLPERF_TIER_*: NONE once gone (kv-cache.py deletes the entry) */
    uint64_t size;
    double last_access;    /* time.time() */
    uint64_t access_count;
    unsigned char *cpu_bytes; /* in the CPU tier: its bytes */
    pthread_mutex_t lock;  /* held through a read or a demotion of it */
} entry_t;

struct mlperf_cache {
    mlperf_cache_params_t params;
    char *dir;
    pthread_mutex_t lock;
    entry_t **entries;     /* every key ever allocated (addresses stable) */
    size_t count, capacity;
    kvio_map_t index;      /* key -> entry + 1 */
    double cpu_limit, nvme_limit; /* bytes (nvme: INFINITY when unknown) */
    double cpu_used, nvme_used;
    pthread_cond_t alloc_free;    /* the allocation semaphore */
    int64_t allocs_running;
    mlperf_cache_stats_t stats;
};

kvio_status_t mlperf_samples_add(mlperf_samples_t *samples, double value)
{
    kvio_status_t status = kvio_array_reserve((void **)&samples->values, &samples->capacity,
                                              samples->count + 1, sizeof(double), 256);
    if (status == KVIO_OK)
        samples->values[samples->count++] = value;
    return status;
}

void mlperf_samples_free(mlperf_samples_t *samples)
{
    free(samples->values);
    *samples = (mlperf_samples_t){0};
}

void mlperf_cache_stats_free(mlperf_cache_stats_t *stats)
{
    mlperf_samples_t *lists[] = {&stats->cpu_read, &stats->cpu_write, &stats->storage_read,
                                 &stats->storage_write, &stats->storage_read_device,
                                 &stats->storage_read_host, &stats->storage_write_device,
                                 &stats->storage_write_host};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        mlperf_samples_free(lists[i]);
}

uint64_t mlperf_object_key(uint64_t conversation, uint32_t turn)
{
    return conversation * 64 + turn; /* at most 50 turns */
}

static double wall_seconds(void)
{
    return (double)kvio_wall_time_ns() * 1e-9;
}

static void object_path(const mlperf_cache_t *cache, uint64_t key, char *path_p, size_t path_len)
{
    snprintf(path_p, path_len, "%s/conv_%llu_turn_%u.npy", cache->dir,
             (unsigned long long)(key / 64), (unsigned)(key % 64));
}

/* The object of entry e: its file, shape and content. */
static mlperf_object_t object_of(const mlperf_cache_t *cache, const entry_t *e, char *path,
                                 size_t path_len)
{
    object_path(cache, e->key, path, path_len);
    mlperf_object_t object = {.path = path, .size = e->size,
                              .content_key = kvio_data_key(cache->params.seed, e->key, 0)};
    if (cache->params.tensor_parallel > 1) {
        object.dims = 1; /* data.ravel()[:tp_elements] */
        object.shape[0] = e->size / 2;
    } else {
        object.dims = mlperf_model_shape(cache->params.model,
                                         e->size / cache->params.kv_bytes_per_token,
                                         object.shape);
    }
    return object;
}

/* NVMeBackend.__init__: the directory made, its .npy files removed. */
static kvio_status_t prepare_dir(const char *dir, char *error_p, size_t error_len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *slash = strchr(path + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        (void)mkdir(path, 0755);
        *slash = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        snprintf(error_p, error_len, "%s: cannot create the cache directory: %s", dir,
                 strerror(errno));
        return KVIO_ERR_CONFIG;
    }
    DIR *listing = opendir(dir);
    if (listing == NULL) {
        snprintf(error_p, error_len, "%s: not a directory kvio can use: %s", dir,
                 strerror(errno));
        return KVIO_ERR_CONFIG;
    }
    struct dirent *item;
    while ((item = readdir(listing)) != NULL) {
        size_t length = strlen(item->d_name);
        if (length > 4 && strcmp(item->d_name + length - 4, ".npy") == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, item->d_name);
            (void)unlink(path);
        }
    }
    closedir(listing);
    return KVIO_OK;
}

kvio_status_t mlperf_cache_create(const mlperf_cache_params_t *params, mlperf_cache_t **cache_p,
                                  char *error_p, size_t error_len)
{
    kvio_status_t status = prepare_dir(params->dir, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    mlperf_cache_t *cache = calloc(1, sizeof(*cache));
    if (cache == NULL || (cache->dir = strdup(params->dir)) == NULL) {
        free(cache);
        return KVIO_ERR_NOMEM;
    }
    cache->params = *params;
    cache->params.dir = cache->dir;
    cache->cpu_limit = params->cpu_mem_gb * 1073741824.0;
    if (params->storage_capacity_gb > 0) {
        cache->nvme_limit = params->storage_capacity_gb * 1073741824.0;
    } else {
        struct statvfs space;
        cache->nvme_limit = statvfs(params->dir, &space) == 0
                                ? (double)space.f_bavail * (double)space.f_frsize * 0.95
                                : INFINITY;
    }
    pthread_mutex_init(&cache->lock, NULL);
    pthread_cond_init(&cache->alloc_free, NULL);
    *cache_p = cache;
    return KVIO_OK;
}

void mlperf_cache_destroy(mlperf_cache_t *cache)
{
    if (cache == NULL)
        return;
    for (size_t i = 0; i < cache->count; i++) {
        entry_t *e = cache->entries[i];
        if (e->location == MLPERF_TIER_NVME) {
            /* kv-cache.py leaves its files until the next run clears them;
             * kvio takes its objects away (they fill most of the device). */
            char path[4096];
            object_path(cache, e->key, path, sizeof(path));
            (void)unlink(path);
        }
        free(e->cpu_bytes);
        pthread_mutex_destroy(&e->lock);
        free(e);
    }
    free(cache->entries);
    kvio_map_fini(&cache->index);
    mlperf_cache_stats_free(&cache->stats);
    pthread_cond_destroy(&cache->alloc_free);
    pthread_mutex_destroy(&cache->lock);
    free(cache->dir);
    free(cache);
}

/* Under the lock: key's entry, made (gone) when there is none; NULL when
 * out of memory. */
static entry_t *entry_for(mlperf_cache_t *cache, uint64_t key)
{
    uint32_t slot = kvio_map_get(&cache->index, key);
    if (slot != 0)
        return cache->entries[slot - 1];
    entry_t *e = calloc(1, sizeof(*e));
    if (e == NULL || kvio_array_reserve((void **)&cache->entries, &cache->capacity,
                                        cache->count + 1, sizeof(entry_t *), 256) != KVIO_OK ||
        kvio_map_set(&cache->index, key, (uint32_t)cache->count + 1) != KVIO_OK) {
        free(e);
        return NULL;
    }
    *e = (entry_t){.key = key, .location = MLPERF_TIER_NONE};
    pthread_mutex_init(&e->lock, NULL);
    cache->entries[cache->count++] = e;
    return e;
}

static entry_t *entry_find(const mlperf_cache_t *cache, uint64_t key)
{
    uint32_t slot = kvio_map_get(&cache->index, key);
    return slot != 0 ? cache->entries[slot - 1] : NULL;
}

static double *used_of(mlperf_cache_t *cache, int tier)
{
    return tier == MLPERF_TIER_CPU ? &cache->cpu_used : &cache->nvme_used;
}

/* _update_tier_usage: never below 0. */
static void use(mlperf_cache_t *cache, int tier, double delta)
{
    double *used = used_of(cache, tier);
    *used = *used + delta > 0 ? *used + delta : 0;
}

/* ---------- eviction (_ensure_space_in_tier, _demote_entry) ---------- */

typedef struct lru_item {
    entry_t *entry;
    uint64_t size;
    double last_access;
    uint64_t access_count;
} lru_item_t;

static int compare_lru(const void *a, const void *b)
{
    const lru_item_t *x = a, *y = b;
    if (x->last_access != y->last_access)
        return x->last_access < y->last_access ? -1 : 1;
    return x->access_count < y->access_count ? -1 : x->access_count > y->access_count;
}

/* _get_lru_entries_in_tier: a sorted snapshot (malloc'd; *count_p). */
static lru_item_t *lru_snapshot(mlperf_cache_t *cache, int tier, size_t *count_p)
{
    pthread_mutex_lock(&cache->lock);
    lru_item_t *items = malloc((cache->count + 1) * sizeof(*items));
    size_t count = 0;
    for (size_t i = 0; items != NULL && i < cache->count; i++) {
        entry_t *e = cache->entries[i];
        if (e->location == tier)
            items[count++] = (lru_item_t){.entry = e, .size = e->size,
                                          .last_access = e->last_access,
                                          .access_count = e->access_count};
    }
    pthread_mutex_unlock(&cache->lock);
    if (items != NULL)
        qsort(items, count, sizeof(*items), compare_lru);
    *count_p = count;
    return items;
}

/* _demote_entry(key, cpu, nvme): written to storage from its CPU bytes.
 * False when it was gone or the write failed. */
static bool demote(mlperf_cache_t *cache, entry_t *e, mlperf_io_t *io)
{
    pthread_mutex_lock(&e->lock);
    pthread_mutex_lock(&cache->lock);
    int location = e->location;
    pthread_mutex_unlock(&cache->lock);
    if (location != MLPERF_TIER_CPU) {
        pthread_mutex_unlock(&e->lock);
        return location != MLPERF_TIER_NONE;
    }
    char path[4096], error[512];
    mlperf_object_t object = object_of(cache, e, path, sizeof(path));
    mlperf_timing_t timing;
    uint64_t file_bytes = 0;
    kvio_status_t status = mlperf_object_write(&object, &cache->params.data, e->cpu_bytes, io,
                                               &timing, &file_bytes, error, sizeof(error));
    pthread_mutex_lock(&cache->lock);
    if (status != KVIO_OK) {
        if (cache->stats.counts.io_errors++ == 0)
            kvio_error("mlperf: demoting an object to storage: %s", error);
        pthread_mutex_unlock(&cache->lock);
        pthread_mutex_unlock(&e->lock);
        return false;
    }
    free(e->cpu_bytes);
    e->cpu_bytes = NULL;
    e->location = MLPERF_TIER_NVME;
    use(cache, MLPERF_TIER_CPU, -(double)e->size);
    cache->stats.counts.evictions++;
    cache->stats.counts.offloads_storage++;
    uint64_t per_token = cache->params.kv_bytes_per_token / (uint64_t)cache->params.tensor_parallel;
    if (per_token > 0)
        cache->stats.counts.storage_tokens_processed += (double)(e->size / per_token);
    cache->stats.counts.demotions++;
    cache->stats.counts.demotion_bytes += e->size;
    cache->stats.counts.storage_bytes_on_device += file_bytes;
    pthread_mutex_unlock(&cache->lock);
    pthread_mutex_unlock(&e->lock);
    return true;
}

/* The terminal tier's eviction: the object's file deleted. False when
 * another thread took it first. */
static bool delete_from_storage(mlperf_cache_t *cache, entry_t *e)
{
    pthread_mutex_lock(&e->lock);
    pthread_mutex_lock(&cache->lock);
    if (e->location != MLPERF_TIER_NVME) {
        pthread_mutex_unlock(&cache->lock);
        pthread_mutex_unlock(&e->lock);
        return false;
    }
    e->location = MLPERF_TIER_NONE;
    pthread_mutex_unlock(&cache->lock);
    char path[4096];
    object_path(cache, e->key, path, sizeof(path));
    if (unlink(path) != 0)
        kvio_warn("mlperf: cannot delete %s: %s", path, strerror(errno));
    pthread_mutex_lock(&cache->lock);
    use(cache, MLPERF_TIER_NVME, -(double)e->size);
    cache->stats.counts.evictions++;
    cache->stats.counts.nvme_deletes++;
    pthread_mutex_unlock(&cache->lock);
    pthread_mutex_unlock(&e->lock);
    return true;
}

/* Reserves required bytes in tier if the usage allows it now (the two
 * checks at the top of the eviction loop). */
static bool reserve_if_room(mlperf_cache_t *cache, int tier, double required, double target,
                            double limit)
{
    pthread_mutex_lock(&cache->lock);
    double used = *used_of(cache, tier);
    bool room = used + required <= target || used < limit * 0.05;
    if (room)
        use(cache, tier, required);
    pthread_mutex_unlock(&cache->lock);
    return room;
}

/* The snapshot ran out: a fresh one; an empty tier recounts its usage and
 * decides (1: reserved, 0: refused), else -1 (go on). */
static int refresh(mlperf_cache_t *cache, int tier, double required, double target, bool last,
                   lru_item_t **items_p, size_t *count_p)
{
    free(*items_p);
    *items_p = lru_snapshot(cache, tier, count_p);
    if (*items_p == NULL)
        return 0;
    if (*count_p > 0)
        return -1;
    pthread_mutex_lock(&cache->lock);
    double actual = 0;
    for (size_t i = 0; i < cache->count; i++)
        if (cache->entries[i]->location == tier)
            actual += (double)cache->entries[i]->size;
    *used_of(cache, tier) = actual;
    int decided = 0;
    if (actual + required <= target || last) {
        use(cache, tier, required);
        decided = 1;
    }
    pthread_mutex_unlock(&cache->lock);
    return decided;
}

static bool ensure_space(mlperf_cache_t *cache, int tier, uint64_t bytes, int depth,
                         mlperf_io_t *io)
{
    double required = (double)bytes;
    if (tier == MLPERF_TIER_NVME && isinf(cache->nvme_limit)) {
        pthread_mutex_lock(&cache->lock);
        use(cache, tier, required);
        pthread_mutex_unlock(&cache->lock);
        return true;
    }
    if (depth > MAX_RECURSION_DEPTH)
        return false;
    bool last = tier == MLPERF_TIER_NVME; /* the CPU tier's next is storage */
    double limit = tier == MLPERF_TIER_CPU ? cache->cpu_limit : cache->nvme_limit;
    double target = limit * TARGET_USAGE_RATIO;
    if (!last && required > limit * LARGE_ENTRY_LIMIT_RATIO)
        return false;
    double effective = last ? limit : target;
    size_t count = 0, at = 0;
    lru_item_t *items = lru_snapshot(cache, tier, &count);
    if (items == NULL)
        return false;
    size_t max_evictions = count + 100 > MAX_EVICTIONS_MIN ? count + 100 : MAX_EVICTIONS_MIN;
    if (max_evictions > MAX_EVICTIONS_HARD_CAP)
        max_evictions = MAX_EVICTIONS_HARD_CAP;
    bool reserved = false, decided = false;
    for (size_t evictions = 0; !decided && evictions < max_evictions; evictions++) {
        if (reserve_if_room(cache, tier, required, effective, limit)) {
            reserved = decided = true;
            break;
        }
        if (at >= count) {
            int outcome = refresh(cache, tier, required, effective, last, &items, &count);
            at = 0;
            if (outcome >= 0) {
                reserved = outcome == 1;
                decided = true;
                break;
            }
        }
        if (at == 0 && !last) {
            double total = 0;
            for (size_t i = 0; i < count; i++)
                total += (double)items[i].size;
            if (total < limit * 0.2 && required > target * 0.5) {
                decided = true;
                break;
            }
        }
        lru_item_t victim = items[at++];
        if (last) {
            (void)delete_from_storage(cache, victim.entry);
        } else if (!ensure_space(cache, MLPERF_TIER_NVME, victim.size, depth + 1, io)) {
            decided = true; /* no room below: refused */
        } else {
            (void)demote(cache, victim.entry, io);
        }
    }
    free(items);
    if (!decided && last) {
        /* The eviction budget spent: the last tier takes it anyway. */
        pthread_mutex_lock(&cache->lock);
        use(cache, tier, required);
        pthread_mutex_unlock(&cache->lock);
        reserved = true;
    }
    return reserved;
}

/* ---------- allocate_cache ---------- */

static void alloc_acquire(mlperf_cache_t *cache)
{
    if (cache->params.max_concurrent_allocs <= 0)
        return;
    pthread_mutex_lock(&cache->lock);
    while (cache->allocs_running >= cache->params.max_concurrent_allocs)
        pthread_cond_wait(&cache->alloc_free, &cache->lock);
    cache->allocs_running++;
    pthread_mutex_unlock(&cache->lock);
}

static void alloc_release(mlperf_cache_t *cache)
{
    if (cache->params.max_concurrent_allocs <= 0)
        return;
    pthread_mutex_lock(&cache->lock);
    cache->allocs_running--;
    pthread_cond_signal(&cache->alloc_free);
    pthread_mutex_unlock(&cache->lock);
}

/* CPUMemoryBackend.write: the bytes copied into the tier (the copy timed,
 * not their generation). */
static kvio_status_t cpu_write(mlperf_cache_t *cache, entry_t *e, mlperf_io_t *io,
                               mlperf_timing_t *timing_p)
{
    unsigned char *bytes = malloc(e->size > 0 ? e->size : 1);
    if (bytes == NULL)
        return KVIO_ERR_NOMEM;
    uint64_t content = kvio_data_key(cache->params.seed, e->key, 0);
    double copy_s = 0;
    for (uint64_t offset = 0; offset < e->size; offset += io->io_bytes) {
        size_t piece = (size_t)(e->size - offset < io->io_bytes ? e->size - offset : io->io_bytes);
        kvio_data_fill(&cache->params.data, content, offset, io->buffer, piece);
        uint64_t start = kvio_time_ns();
        memcpy(bytes + offset, io->buffer, piece);
        copy_s += (double)(kvio_time_ns() - start) * 1e-9;
    }
    e->cpu_bytes = bytes;
    *timing_p = (mlperf_timing_t){.total = copy_s, .device = copy_s, .host = copy_s};
    return KVIO_OK;
}

/* The object's bytes as the tier that was chosen writes them. */
static kvio_status_t write_object(mlperf_cache_t *cache, entry_t *e, int tier, mlperf_io_t *io,
                                  mlperf_timing_t *timing_p, uint64_t *file_bytes_p,
                                  char *error_p, size_t error_len)
{
    if (tier == MLPERF_TIER_CPU) {
        kvio_status_t status = cpu_write(cache, e, io, timing_p);
        if (status != KVIO_OK)
            snprintf(error_p, error_len, "the CPU tier: no memory for %llu bytes",
                     (unsigned long long)e->size);
        return status;
    }
    char path[4096];
    mlperf_object_t object = object_of(cache, e, path, sizeof(path));
    return mlperf_object_write(&object, &cache->params.data, NULL, io, timing_p, file_bytes_p,
                               error_p, error_len);
}

/* What allocate_cache records once the write is done. */
static void count_write(mlperf_cache_t *cache, int tier, uint64_t size, int64_t tokens,
                        const mlperf_timing_t *timing, uint64_t file_bytes)
{
    mlperf_cache_stats_t *stats = &cache->stats;
    if (tier == MLPERF_TIER_CPU) {
        stats->counts.tier_cpu_written += size;
        stats->counts.offloads_cpu++;
        (void)mlperf_samples_add(&stats->cpu_write, timing->total);
        return;
    }
    stats->counts.tier_storage_written += size;
    stats->counts.offloads_storage++;
    (void)mlperf_samples_add(&stats->storage_write, timing->total);
    (void)mlperf_samples_add(&stats->storage_write_device, timing->device);
    (void)mlperf_samples_add(&stats->storage_write_host, timing->host);
    stats->counts.storage_tokens_processed += (double)tokens;
    stats->counts.storage_bytes_on_device += file_bytes;
}

void mlperf_cache_allocate(mlperf_cache_t *cache, uint64_t key, int64_t tokens, bool prefill,
                           mlperf_io_t *io, double *latency_s_p)
{
    *latency_s_p = 0;
    pthread_mutex_lock(&cache->lock);
    entry_t *e = entry_for(cache, key);
    bool present = e == NULL || e->location != MLPERF_TIER_NONE;
    pthread_mutex_unlock(&cache->lock);
    if (present)
        return; /* already cached: nothing written, latency 0 */
    alloc_acquire(cache);
    /* generate(): (layers, 2, tokens, kv_heads, head_dim) float16, 1/TP of it. */
    uint64_t elements = cache->params.kv_bytes_per_token / 2 * (uint64_t)tokens;
    uint64_t size = elements / (uint64_t)cache->params.tensor_parallel * 2;
    pthread_mutex_lock(&cache->lock);
    cache->stats.counts.prefill_writes += prefill;
    cache->stats.counts.write_operations++;
    cache->stats.counts.total_write_bytes += size;
    pthread_mutex_unlock(&cache->lock);
    int tier = MLPERF_TIER_NVME;
    if (ensure_space(cache, MLPERF_TIER_CPU, size, 0, io))
        tier = MLPERF_TIER_CPU;
    else if (!ensure_space(cache, MLPERF_TIER_NVME, size, 0, io)) {
        pthread_mutex_lock(&cache->lock); /* all tiers full: forced onto storage */
        use(cache, MLPERF_TIER_NVME, (double)size);
        pthread_mutex_unlock(&cache->lock);
    }
    pthread_mutex_lock(&cache->lock);
    e->size = size; /* the entry is not in a tier yet: nothing reads it meanwhile */
    pthread_mutex_unlock(&cache->lock);
    mlperf_timing_t timing = {0};
    uint64_t file_bytes = 0;
    char error[512];
    kvio_status_t status = write_object(cache, e, tier, io, &timing, &file_bytes, error,
                                        sizeof(error));
    pthread_mutex_lock(&cache->lock);
    if (status != KVIO_OK) {
        use(cache, tier, -(double)size);
        if (cache->stats.counts.io_errors++ == 0)
            kvio_error("mlperf: writing an object: %s", error);
    } else {
        e->location = tier;
        e->last_access = wall_seconds();
        e->access_count = 1;
        count_write(cache, tier, size, tokens, &timing, file_bytes);
        *latency_s_p = timing.total;
    }
    pthread_mutex_unlock(&cache->lock);
    alloc_release(cache);
}

/* ---------- access_cache ---------- */

void mlperf_cache_miss(mlperf_cache_t *cache)
{
    pthread_mutex_lock(&cache->lock);
    cache->stats.counts.cache_misses++;
    pthread_mutex_unlock(&cache->lock);
}

/* Under the lock: what a hit counts before its read. */
static void count_hit(mlperf_cache_t *cache, const entry_t *e, bool decode, int hit_type)
{
    mlperf_cache_stats_t *stats = &cache->stats;
    stats->counts.cache_hits++;
    if (hit_type == MLPERF_HIT_SYSTEM)
        stats->counts.system_prompt_hits++;
    else if (hit_type == MLPERF_HIT_MULTI_TURN)
        stats->counts.multi_turn_hits++;
    else
        stats->counts.user_cache_hits++;
    if (e->location == MLPERF_TIER_CPU)
        stats->counts.tier_cpu_read += e->size;
    else
        stats->counts.tier_storage_read += e->size;
    stats->counts.decode_reads += decode;
    stats->counts.read_operations++;
    stats->counts.total_read_bytes += e->size;
}

/* CPUMemoryBackend.read: np.copy of the bytes (timed). */
static void cpu_read(const entry_t *e, mlperf_io_t *io, mlperf_timing_t *timing_p)
{
    uint64_t start = kvio_time_ns();
    for (uint64_t offset = 0; offset < e->size; offset += io->io_bytes) {
        size_t piece = (size_t)(e->size - offset < io->io_bytes ? e->size - offset : io->io_bytes);
        memcpy(io->buffer, e->cpu_bytes + offset, piece);
    }
    double copy_s = (double)(kvio_time_ns() - start) * 1e-9;
    *timing_p = (mlperf_timing_t){.total = copy_s, .device = copy_s, .host = copy_s};
}

/* Under the lock: what a read's latency adds. */
static void count_read(mlperf_cache_t *cache, int location, uint64_t size,
                       const mlperf_timing_t *timing)
{
    mlperf_cache_stats_t *stats = &cache->stats;
    if (location == MLPERF_TIER_CPU) {
        (void)mlperf_samples_add(&stats->cpu_read, timing->total);
        return;
    }
    (void)mlperf_samples_add(&stats->storage_read, timing->total);
    (void)mlperf_samples_add(&stats->storage_read_device, timing->device);
    (void)mlperf_samples_add(&stats->storage_read_host, timing->host);
    if (cache->params.kv_bytes_per_token > 0) /* not divided by TP, as kv-cache.py counts */
        stats->counts.storage_tokens_processed += (double)size / (double)cache->params.kv_bytes_per_token;
}

bool mlperf_cache_access(mlperf_cache_t *cache, uint64_t key, bool decode, int hit_type,
                         mlperf_io_t *io, double *latency_s_p)
{
    *latency_s_p = 0;
    pthread_mutex_lock(&cache->lock);
    entry_t *e = entry_find(cache, key);
    if (e == NULL || e->location == MLPERF_TIER_NONE) {
        cache->stats.counts.cache_misses++;
        pthread_mutex_unlock(&cache->lock);
        return false;
    }
    pthread_mutex_unlock(&cache->lock);
    pthread_mutex_lock(&e->lock);
    pthread_mutex_lock(&cache->lock);
    if (e->location == MLPERF_TIER_NONE) {
        cache->stats.counts.cache_misses++;
        pthread_mutex_unlock(&cache->lock);
        pthread_mutex_unlock(&e->lock);
        return false;
    }
    e->last_access = wall_seconds();
    e->access_count++;
    count_hit(cache, e, decode, hit_type);
    int location = e->location;
    uint64_t size = e->size;
    pthread_mutex_unlock(&cache->lock);
    mlperf_timing_t timing = {0};
    bool intact = true;
    kvio_status_t status = KVIO_OK;
    char error[512] = "";
    if (location == MLPERF_TIER_CPU) {
        cpu_read(e, io, &timing);
    } else {
        char path[4096];
        mlperf_object_t object = object_of(cache, e, path, sizeof(path));
        status = mlperf_object_read(&object, &cache->params.data, cache->params.verify, io,
                                    &timing, &intact, error, sizeof(error));
    }
    pthread_mutex_lock(&cache->lock);
    if (status != KVIO_OK) {
        /* kv-cache.py: a failed read is a hit of latency 0. */
        if (cache->stats.counts.io_errors++ == 0)
            kvio_error("mlperf: reading an object: %s", error);
    } else {
        count_read(cache, location, size, &timing);
        cache->stats.counts.verify_failures += !intact;
        *latency_s_p = timing.total;
    }
    pthread_mutex_unlock(&cache->lock);
    pthread_mutex_unlock(&e->lock);
    return true;
}

void mlperf_cache_take_stats(mlperf_cache_t *cache, mlperf_cache_stats_t *stats_p,
                             uint64_t *cpu_entries_p, uint64_t *storage_entries_p,
                             double *storage_limit_bytes_p)
{
    pthread_mutex_lock(&cache->lock);
    *stats_p = cache->stats;
    cache->stats = (mlperf_cache_stats_t){0};
    uint64_t cpu = 0, storage = 0;
    for (size_t i = 0; i < cache->count; i++) {
        cpu += cache->entries[i]->location == MLPERF_TIER_CPU;
        storage += cache->entries[i]->location == MLPERF_TIER_NVME;
    }
    pthread_mutex_unlock(&cache->lock);
    *cpu_entries_p = cpu;
    *storage_entries_p = storage;
    *storage_limit_bytes_p = cache->nvme_limit;
}
