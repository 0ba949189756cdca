/* KV tier framework: the option table, the simulate model's overrides, and
 * the wrapper every put and get goes through (the backends are plug-ins,
 * listed in kvcache/tiers.c). The framework owns the index of held blocks
 * (open addressing, an LRU list, no allocation per block), evicts, charges
 * the simulate model or times the backend, and counts; backends only move
 * bytes. */
#include "kvcache/tier_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "kvio/clock.h"
#include "kvio/result.h"
#include "kvio/copysum.h"
#include "kvio/log.h"
#include "kvio/results.h"

const char *const kvio_tier_write_names[] = {"back", "through", NULL};

const kvio_opt_t kvio_tier_options[] = {
    {.key = "kind", .type = KVIO_OPT_PLUGIN, .offset = offsetof(kvio_tier_config_t, kind),
     .registry = &kvio_tiers, .default_value = "host",
     .help = "the backend; its own keys go in a section of its name (redis: {url: ...})"},
    {.key = "size", .type = KVIO_OPT_SIZE, .offset = offsetof(kvio_tier_config_t, size),
     .default_value = "1GiB", .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "bytes the tier holds (whole blocks; the least recently used is evicted)"},
    {.key = "write", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_tier_config_t, write),
     .values = kvio_tier_write_names, .default_value = "back",
     .help = "back: a block is written when the pool evicts it; through: when it is full"},
    {.key = "bandwidth", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_tier_config_t, bandwidth),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "simulate: bytes/s, e.g. 25e9 (0: the backend's default)"},
    {.key = "latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_tier_config_t, latency_ns), .default_value = "0s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "simulate: cost per operation (0s: the backend's default)"},
    {.key = "rate", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_tier_config_t, rate),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "emulate: most bytes/s the tier moves, e.g. 2e9 (0: as fast as it goes); a "
             "block moved sooner waits out the rest (fio's rate=), to stand in for a slower "
             "device"},
    {.key = "trace", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_tier_config_t, trace),
     .help = "a file: every block the tier reads or writes as CSV (time_s, op, offset, bytes, "
             "latency_us; offset: the block's slot in the slab), with PATH.iolog (fio's iolog "
             "of the same transfers) and PATH.fio (a job that replays them at the tier's queue "
             "depth, so fio's GB/s checks kvio's); other serve ranks' get .rankN after PATH; "
             "in simulate (the log-only mode) written without any I/O, latencies modelled"},
    {.key = NULL},
};

#define NO_ENTRY UINT32_MAX
#define MAX_CAPACITY (1u << 30)

/* A held block; entries double as the backend's slots. */
typedef struct tier_entry {
    kvio_hash_t hash;
    uint64_t checksum;   /* XXH3-64 of the block as put (emulate) */
    uint64_t location;   /* a remote tier's: where the block is (kvio_tier_list) */
    uint32_t prev, next; /* LRU list when held; next links the free list */
} tier_entry_t;

struct kvio_tier {
    const kvio_tier_ops_t *ops;
    void *priv;
    bool backend_ready;       /* init succeeded: fini is owed */
    int write;                /* kvio_tier_write_t, as configured */
    uint64_t size;            /* bytes, as configured */
    bool emulate;
    uint64_t block_bytes;
    uint32_t capacity;
    uint32_t num_held;
    double bandwidth;         /* simulate model */
    int64_t latency_ns;
    int64_t paced_ns;         /* emulate, rate set: the least time a block takes */
    tier_entry_t *entries;    /* capacity */
    uint32_t free_head;
    uint32_t lru_head, lru_tail; /* head: most recently used */
    uint32_t *table;          /* open addressing: entry index or NO_ENTRY */
    uint64_t table_mask;
    kvio_tier_stats_t stats;
    /* A batch's scratch: slots, hashes, buffers, statuses, latencies. */
    uint32_t *batch_slots;
    kvio_hash_t *batch_hashes;
    const void **batch_data;
    kvio_status_t *batch_statuses;
    int64_t *batch_latencies;
    uint64_t *batch_checksums; /* filled when the copy hashed the blocks (batch_hashed) */
    bool batch_hashed;
    size_t batch_capacity;
    kvio_tier_t *spill;       /* waterfall: where an evicted block goes (NULL: nowhere) */
    /* kind shared: the store this rank's view reads (simulate) or its
     * endpoint to it (emulate); NULL both for other kinds */
    kvio_shared_store_t *shared;
    kvio_shared_endpoint_t *shared_endpoint;
    uint32_t shared_rank;
    /* emulate: bytes read ([0]) and written ([1]) each second from the
     * first transfer on */
    int64_t timeline_origin_ns; /* 0: nothing moved yet */
    uint64_t (*timeline)[2];
    size_t timeline_bins, timeline_capacity;
    void *spill_buffer;       /* emulate: SPILL_BATCH evicted blocks, read back on their way down */
    /* Blocks evicted and not yet passed down and deleted (batch_capacity). */
    uint32_t *victim_slots;
    kvio_hash_t *victim_hashes;
    uint64_t *victim_checksums;
    size_t num_victims;
    /* trace: the CSV and fio iolog being written (NULL: none), and where */
    FILE *trace_csv, *trace_iolog;
    char *trace_path;
    int64_t trace_origin_ns;
    bool error_logged;
    char info[512];
    char error[512];
};

/* ---------- simulate model ---------- */

static const kvio_tier_ops_t *config_ops(const kvio_tier_config_t *config)
{
    return (const kvio_tier_ops_t *)config->kind.plugin;
}

void kvio_tier_model(const kvio_tier_config_t *config, double *bandwidth_p,
                     int64_t *latency_ns_p)
{
    double bandwidth = 0;
    int64_t latency_ns = 0;
    config_ops(config)->model(kvio_choice_options(&config->kind), &bandwidth, &latency_ns);
    *bandwidth_p = config->bandwidth > 0 ? config->bandwidth : bandwidth;
    *latency_ns_p = config->latency_ns > 0 ? config->latency_ns : latency_ns;
}

bool kvio_tier_is_shared(const kvio_tier_config_t *config)
{
    const kvio_tier_ops_t *ops = config_ops(config);
    return ops != NULL && (ops->caps & KVIO_TIER_CAP_SHARED) != 0;
}

kvio_status_t kvio_tier_preflight(const kvio_tier_config_t *config, uint32_t num_ranks,
                                  const char *path, char *error_p, size_t error_len)
{
    const kvio_tier_ops_t *ops = config_ops(config);
    if (ops == NULL || ops->preflight == NULL)
        return KVIO_OK;
    char backend_path[512];
    snprintf(backend_path, sizeof(backend_path), "%s.%s", path, ops->plugin.name);
    uint64_t ranks = num_ranks > 0 ? num_ranks : 1;
    uint64_t bytes = config->size > UINT64_MAX / ranks ? UINT64_MAX : config->size * ranks;
    return ops->preflight(kvio_choice_options(&config->kind), bytes, backend_path, error_p,
                          error_len);
}

bool kvio_tier_in_memory(const kvio_tier_config_t *config)
{
    const kvio_tier_ops_t *ops = config_ops(config);
    return ops != NULL && strcmp(ops->plugin.name, "host") == 0;
}

void kvio_tier_pace(uint64_t start_ns, int64_t cost_ns)
{
    int64_t rest_ns = cost_ns - (int64_t)(kvio_time_ns() - start_ns);
    if (rest_ns <= 0)
        return;
    /* A sleep, not a spin: the pace need not be exact to the microsecond. */
    struct timespec rest = {.tv_sec = (time_t)(rest_ns / 1000000000),
                            .tv_nsec = (long)(rest_ns % 1000000000)};
    while (nanosleep(&rest, &rest) != 0 && errno == EINTR)
        ;
}

/* ---------- index ---------- */

static uint64_t slot_of(const kvio_tier_t *tier, kvio_hash_t hash)
{
    /* XXH3-128 halves are already well mixed; fold them for safety. */
    return (hash.low ^ (hash.high * 0x9E3779B97F4A7C15ull)) & tier->table_mask;
}

static uint32_t index_find(const kvio_tier_t *tier, kvio_hash_t hash, uint64_t *position_p)
{
    for (uint64_t position = slot_of(tier, hash);; position = (position + 1) & tier->table_mask) {
        uint32_t entry = tier->table[position];
        if (entry == NO_ENTRY || kvio_hash_equal(tier->entries[entry].hash, hash)) {
            if (position_p != NULL)
                *position_p = position;
            return entry;
        }
    }
}

/* Linear probing with backward-shift deletion (no tombstones). */
static void index_erase(kvio_tier_t *tier, uint64_t position)
{
    uint64_t hole = position;
    for (uint64_t next = (hole + 1) & tier->table_mask;; next = (next + 1) & tier->table_mask) {
        uint32_t entry = tier->table[next];
        if (entry == NO_ENTRY)
            break;
        uint64_t home = slot_of(tier, tier->entries[entry].hash);
        /* Move the entry into the hole unless its home lies in (hole, next]. */
        bool stays = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next);
        if (!stays) {
            tier->table[hole] = entry;
            hole = next;
        }
    }
    tier->table[hole] = NO_ENTRY;
}

static void lru_unlink(kvio_tier_t *tier, uint32_t entry)
{
    tier_entry_t *e = &tier->entries[entry];
    if (e->prev != NO_ENTRY)
        tier->entries[e->prev].next = e->next;
    else
        tier->lru_head = e->next;
    if (e->next != NO_ENTRY)
        tier->entries[e->next].prev = e->prev;
    else
        tier->lru_tail = e->prev;
}

static void lru_push_front(kvio_tier_t *tier, uint32_t entry)
{
    tier_entry_t *e = &tier->entries[entry];
    e->prev = NO_ENTRY;
    e->next = tier->lru_head;
    if (tier->lru_head != NO_ENTRY)
        tier->entries[tier->lru_head].prev = entry;
    tier->lru_head = entry;
    if (tier->lru_tail == NO_ENTRY)
        tier->lru_tail = entry;
}

/* Drops a held entry from the index and the LRU list and frees its slot. */
static void entry_release(kvio_tier_t *tier, uint32_t entry, uint64_t position)
{
    index_erase(tier, position);
    lru_unlink(tier, entry);
    tier->entries[entry].next = tier->free_head;
    tier->free_head = entry;
    tier->num_held--;
}

/* ---------- errors ---------- */

/* Records a failed operation: counts it, keeps its text, logs the first. */
static kvio_status_t tier_failed(kvio_tier_t *tier, kvio_status_t status, const char *text)
{
    tier->stats.errors++;
    snprintf(tier->error, sizeof(tier->error), "%s tier: %s", tier->ops->plugin.name,
             text[0] != '\0' ? text : kvio_strerror(status));
    if (!tier->error_logged) {
        kvio_warn("%s (further errors of this tier are counted, not logged)", tier->error);
        tier->error_logged = true;
    }
    return status;
}

/* ---------- life cycle ---------- */

uint64_t kvio_tier_index_footprint(uint64_t size, uint64_t block_bytes)
{
    uint64_t capacity = block_bytes > 0 ? size / block_bytes : 0, table_size = 16;
    while (table_size < 2 * capacity)
        table_size *= 2;
    return capacity * sizeof(tier_entry_t) + table_size * sizeof(uint32_t);
}

/* ---------- trace: ---------- */

/* Opens PATH (PATH.rankN for serve ranks past the first) for the CSV and
 * PATH.iolog for fio's iolog (version 2: the slab file added and opened,
 * then one line a transfer), each refused with its path and reason. */
static kvio_status_t trace_open(kvio_tier_t *tier, const kvio_tier_config_t *config,
                                char *error_p, size_t error_len)
{
    size_t room = strlen(config->trace) + 32;
    if ((tier->trace_path = malloc(room)) == NULL)
        return KVIO_ERR_NOMEM;
    if (config->run_id != NULL && config->rank > 0)
        snprintf(tier->trace_path, room, "%s.rank%u", config->trace, config->rank);
    else
        snprintf(tier->trace_path, room, "%s", config->trace);
    char iolog[PATH_MAX];
    snprintf(iolog, sizeof(iolog), "%s.iolog", tier->trace_path);
    const char *failed = NULL;
    if ((tier->trace_csv = fopen(tier->trace_path, "w")) == NULL)
        failed = tier->trace_path;
    else if ((tier->trace_iolog = fopen(iolog, "w")) == NULL)
        failed = iolog;
    if (failed != NULL) {
        snprintf(error_p, error_len, "%s tier: trace: cannot write %s: %s",
                 tier->ops->plugin.name, failed, strerror(errno));
        return KVIO_ERR_CONFIG;
    }
    fputs("time_s,op,offset,bytes,latency_us\n", tier->trace_csv);
    fputs("fio version 2 iolog\nkvio-replay.slab add\nkvio-replay.slab open\n",
          tier->trace_iolog);
    tier->trace_origin_ns = (int64_t)kvio_time_ns();
    return KVIO_OK;
}

/* One block moved: when it was submitted (emulate: its completion less
 * its latency, from the tier's creation; simulate: the tier's modelled
 * busy time before its batch, the device never idle), the op, the slot's
 * offset, the bytes and the latency. */
static void trace_op(kvio_tier_t *tier, bool write, uint32_t slot, int64_t latency_ns)
{
    if (tier->trace_csv == NULL)
        return;
    int64_t at_ns = tier->emulate
                        ? (int64_t)kvio_time_ns() - latency_ns - tier->trace_origin_ns
                        : tier->stats.write_ns + tier->stats.read_ns;
    unsigned long long offset = (unsigned long long)slot * tier->block_bytes;
    const char *op = write ? "write" : "read";
    fprintf(tier->trace_csv, "%.9f,%s,%llu,%llu,%.3f\n", (double)(at_ns > 0 ? at_ns : 0) / 1e9,
            op, offset, (unsigned long long)tier->block_bytes, (double)latency_ns / 1e3);
    fprintf(tier->trace_iolog, "kvio-replay.slab %s %llu %llu\n", op, offset,
            (unsigned long long)tier->block_bytes);
}

/* Closes the trace and writes PATH.fio: fio replays the iolog into a file
 * the slab's size, in the same order, at the tier's queue depth and
 * O_DIRECT as the tier ran (a file tier's report says them; 8 and direct
 * otherwise), as fast as the device goes (replay_no_stall). */
static void trace_close(kvio_tier_t *tier)
{
    if (tier->trace_iolog != NULL) {
        fputs("kvio-replay.slab close\n", tier->trace_iolog);
        fclose(tier->trace_iolog);
    }
    if (tier->trace_csv != NULL)
        fclose(tier->trace_csv);
    if (tier->trace_csv == NULL || tier->trace_iolog == NULL)
        return;
    json_int_t depth = 8;
    bool direct = true;
    if (tier->backend_ready) {
        json_t *about = json_object();
        tier->ops->report(tier->priv, about);
        if (json_is_integer(json_object_get(about, "queue_depth")))
            depth = json_integer_value(json_object_get(about, "queue_depth"));
        if (json_is_boolean(json_object_get(about, "o_direct")))
            direct = json_is_true(json_object_get(about, "o_direct"));
        json_decref(about);
    }
    char job[PATH_MAX];
    snprintf(job, sizeof(job), "%s.fio", tier->trace_path);
    FILE *out = fopen(job, "w");
    if (out == NULL) {
        kvio_warn("%s tier: trace: cannot write %s: %s", tier->ops->plugin.name, job,
                  strerror(errno));
        return;
    }
    const char *slash = strrchr(tier->trace_path, '/');
    fprintf(out,
            "; kvio: the blocks the %s tier moved (%s), replayed by fio: the same transfers\n"
            "; in the same order, at the tier's queue depth, as fast as the device goes.\n"
            "; Run it in a directory on the device under test, beside %s.iolog:\n"
            ";   fio %s.fio\n"
            "; and hold its read and write bandwidth against the tier's read_gbps and\n"
            "; write_gbps in summary.json (the bytes over the time busy moving them).\n"
            "[global]\n"
            "ioengine=io_uring\n"
            "direct=%d\n"
            "iodepth=%lld\n"
            "replay_no_stall=1\n"
            "\n"
            "[kvio-replay]\n"
            "filename=kvio-replay.slab\n"
            "size=%llu\n"
            "read_iolog=%s.iolog\n",
            tier->ops->plugin.name, tier->info, slash != NULL ? slash + 1 : tier->trace_path,
            slash != NULL ? slash + 1 : tier->trace_path, direct ? 1 : 0, (long long)depth,
            (unsigned long long)tier->capacity * tier->block_bytes,
            slash != NULL ? slash + 1 : tier->trace_path);
    fclose(out);
}

/* A shared tier is a view of the store (simulate) or of this rank's
 * endpoint to it (emulate), which the caller made. */
static kvio_status_t view_shared(kvio_tier_t *tier, const kvio_tier_config_t *config,
                                 char *error_p, size_t error_len)
{
    if (tier->emulate) {
        tier->shared_endpoint = config->shared_endpoint;
        if (tier->shared_endpoint == NULL) {
            snprintf(error_p, error_len, "shared tier: no endpoint to the store (the serve "
                     "ranks open one together)");
            return KVIO_ERR_INVALID;
        }
        tier->shared_rank = kvio_shared_endpoint_rank(tier->shared_endpoint);
        snprintf(tier->info, sizeof(tier->info),
                 "shared: rank %u of %u, a shard of %u blocks of %llu bytes each, over UCX",
                 tier->shared_rank, kvio_shared_endpoint_ranks(tier->shared_endpoint),
                 tier->capacity, (unsigned long long)tier->block_bytes);
        return KVIO_OK;
    }
    tier->shared = config->shared_store;
    tier->shared_rank = config->rank;
    if (tier->shared == NULL) {
        snprintf(error_p, error_len, "shared tier: no store to view (the serve ranks' owner "
                 "makes one per run)");
        return KVIO_ERR_INVALID;
    }
    return KVIO_OK;
}

kvio_status_t kvio_tier_create(const kvio_tier_config_t *config, uint64_t block_bytes,
                               bool emulate, kvio_tier_t **tier_p, char *error_p,
                               size_t error_len)
{
    const kvio_tier_ops_t *ops = config_ops(config);
    if (ops == NULL) {
        snprintf(error_p, error_len, "tier: no kind chosen");
        return KVIO_ERR_CONFIG;
    }
    const char *kind = ops->plugin.name;
    if (block_bytes == 0) {
        snprintf(error_p, error_len, "%s tier: blocks of 0 bytes", kind);
        return KVIO_ERR_INVALID;
    }
    uint64_t capacity = config->size / block_bytes;
    if (capacity == 0) {
        snprintf(error_p, error_len,
                 "%s tier: size %llu bytes holds no block of %llu bytes", kind,
                 (unsigned long long)config->size, (unsigned long long)block_bytes);
        return KVIO_ERR_CONFIG;
    }
    if (capacity > MAX_CAPACITY) {
        snprintf(error_p, error_len,
                 "%s tier: size %llu bytes is %llu blocks of %llu bytes; at most %u blocks",
                 kind, (unsigned long long)config->size, (unsigned long long)capacity,
                 (unsigned long long)block_bytes, MAX_CAPACITY);
        return KVIO_ERR_CONFIG;
    }
    if (config->bandwidth < 0 || config->latency_ns < 0) {
        snprintf(error_p, error_len, "%s tier: negative bandwidth or latency", kind);
        return KVIO_ERR_CONFIG;
    }
    /* The checks binding made, again for a caller that filled the config
     * by hand (a bad Redis URL, a file tier without a path). */
    if (ops->plugin.check != NULL) {
        kvio_status_t status = ops->plugin.check(kvio_choice_options(&config->kind), kind,
                                                 error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }

    kvio_status_t status = KVIO_ERR_NOMEM;
    kvio_tier_t *tier = calloc(1, sizeof(*tier));
    if (tier == NULL) {
        snprintf(error_p, error_len, "%s tier: out of memory", kind);
        return KVIO_ERR_NOMEM;
    }
    tier->ops = ops;
    tier->lru_head = tier->lru_tail = NO_ENTRY;
    tier->emulate = emulate;
    tier->block_bytes = block_bytes;
    tier->capacity = (uint32_t)capacity;
    tier->write = config->write;
    tier->size = config->size;
    kvio_tier_model(config, &tier->bandwidth, &tier->latency_ns);
    tier->paced_ns = config->rate > 0 ? (int64_t)llround((double)block_bytes * 1e9 / config->rate)
                                      : 0;

    bool shared = kvio_tier_is_shared(config);
    if (shared) {
        status = view_shared(tier, config, error_p, error_len);
        if (status != KVIO_OK)
            goto fail;
    }
    /* The backend first: it refuses sizes (memory, disk) before the index
     * is built for them. */
    if (emulate && !shared) {
        if (tier->ops->priv_size > 0 && (tier->priv = calloc(1, tier->ops->priv_size)) == NULL) {
            snprintf(error_p, error_len, "%s tier: out of memory", kind);
            goto fail;
        }
        kvio_tier_setup_t setup = {.options = kvio_choice_options(&config->kind),
                                   .config = config, .block_bytes = block_bytes,
                                   .capacity = tier->capacity};
        status = tier->ops->init(tier->priv, &setup, error_p, error_len);
        if (status != KVIO_OK)
            goto fail;
        tier->backend_ready = true;
        tier->ops->describe(tier->priv, tier->info, sizeof(tier->info));
    } else if (!emulate) {
        snprintf(tier->info, sizeof(tier->info),
                 "%s: %u blocks of %llu bytes, simulated at %.3g bytes/s + %lld ns per operation",
                 kind, tier->capacity, (unsigned long long)block_bytes, tier->bandwidth,
                 (long long)tier->latency_ns);
    }
    uint64_t table_size = 16;
    while (table_size < 2 * capacity)
        table_size *= 2;
    tier->table_mask = table_size - 1;
    tier->entries = malloc(capacity * sizeof(*tier->entries));
    tier->table = malloc(table_size * sizeof(*tier->table));
    status = KVIO_ERR_NOMEM;
    if (tier->entries == NULL || tier->table == NULL ||
        kvio_hist_create(&tier->stats.put_latency) != KVIO_OK ||
        kvio_hist_create(&tier->stats.get_latency) != KVIO_OK) {
        snprintf(error_p, error_len, "%s tier: out of memory for an index of %llu blocks", kind,
                 (unsigned long long)capacity);
        goto fail;
    }
    memset(tier->table, 0xff, table_size * sizeof(*tier->table));
    for (uint32_t i = 0; i < tier->capacity; i++)
        tier->entries[i].next = i + 1 < tier->capacity ? i + 1 : NO_ENTRY;
    tier->free_head = 0;
    if (config->trace != NULL && config->trace[0] != '\0' &&
        (status = trace_open(tier, config, error_p, error_len)) != KVIO_OK)
        goto fail;

    kvio_info("tier %s", tier->info);
    *tier_p = tier;
    return KVIO_OK;
fail:
    kvio_tier_destroy(tier);
    return status;
}

kvio_status_t kvio_tier_create_remote(const kvio_tier_remote_t *remote, uint32_t capacity,
                                      uint64_t block_bytes, double bandwidth,
                                      int64_t latency_ns, bool emulate, kvio_tier_t **tier_p,
                                      char *error_p, size_t error_len)
{
    const kvio_tier_ops_t *ops = remote != NULL && remote->address != NULL
                                     ? &kvio_tier_remote_mapped_ops
                                     : &kvio_tier_remote_ops;
    kvio_tier_config_t config = {
        .kind = {.plugin = &ops->plugin}, .size = (uint64_t)capacity * block_bytes,
        .write = KVIO_TIER_WRITE_BACK, .bandwidth = bandwidth, .latency_ns = latency_ns,
        .remote = remote};
    return kvio_tier_create(&config, block_bytes, emulate, tier_p, error_p, error_len);
}

void kvio_tier_destroy(kvio_tier_t *tier)
{
    if (tier == NULL)
        return;
    trace_close(tier);
    free(tier->trace_path);
    if (tier->backend_ready) {
        /* Delete what this run wrote (files, Redis keys). */
        if (!(tier->ops->caps & KVIO_TIER_CAP_VOLATILE)) {
            char error[512] = "";
            for (uint32_t entry = tier->lru_head; entry != NO_ENTRY;
                 entry = tier->entries[entry].next)
                if (tier->ops->remove(tier->priv, entry, tier->entries[entry].hash, error,
                                      sizeof(error)) != KVIO_OK)
                    break; /* e.g. Redis is gone: leave the rest */
            if (error[0] != '\0')
                kvio_warn("%s tier: cleaning up: %s", tier->ops->plugin.name, error);
        }
        tier->ops->fini(tier->priv);
    }
    free(tier->priv);
    kvio_hist_destroy(tier->stats.put_latency);
    kvio_hist_destroy(tier->stats.get_latency);
    free(tier->batch_slots);
    free(tier->batch_hashes);
    free(tier->batch_data);
    free(tier->batch_statuses);
    free(tier->batch_latencies);
    free(tier->batch_checksums);
    free(tier->spill_buffer);
    free(tier->victim_slots);
    free(tier->victim_hashes);
    free(tier->victim_checksums);
    free(tier->timeline);
    free(tier->entries);
    free(tier->table);
    free(tier);
}

/* ---------- bandwidth over time ---------- */

#define TIMELINE_BIN_NS 1000000000ll
#define TIMELINE_MAX_BINS 86400 /* a day; later bytes count in the last second */

/* Emulate: bytes a transfer moved, in the second (from the tier's first
 * transfer) it ended in. Out of memory, the timeline stops growing. */
static void timeline_add(kvio_tier_t *tier, bool write, uint64_t bytes)
{
    if (!tier->emulate)
        return;
    int64_t now_ns = (int64_t)kvio_time_ns();
    if (tier->timeline_origin_ns == 0)
        tier->timeline_origin_ns = now_ns;
    size_t bin = (size_t)((now_ns - tier->timeline_origin_ns) / TIMELINE_BIN_NS);
    if (bin >= TIMELINE_MAX_BINS)
        bin = TIMELINE_MAX_BINS - 1;
    if (bin >= tier->timeline_capacity) {
        size_t capacity = tier->timeline_capacity ? tier->timeline_capacity : 64;
        while (capacity <= bin)
            capacity *= 2;
        uint64_t(*bigger)[2] = realloc(tier->timeline, capacity * sizeof(*bigger));
        if (bigger == NULL)
            return;
        memset(bigger + tier->timeline_capacity, 0,
               (capacity - tier->timeline_capacity) * sizeof(*bigger));
        tier->timeline = bigger;
        tier->timeline_capacity = capacity;
    }
    if (bin >= tier->timeline_bins)
        tier->timeline_bins = bin + 1;
    tier->timeline[bin][write] += bytes;
}

/* {"bin_s": 1, "read_gbps": [...], "write_gbps": [...]}: each second's. */
static json_t *timeline_json(const kvio_tier_t *tier)
{
    json_t *read = json_array(), *write = json_array();
    for (size_t b = 0; b < tier->timeline_bins; b++) {
        json_array_append_new(read, json_real((double)tier->timeline[b][0] / 1e9));
        json_array_append_new(write, json_real((double)tier->timeline[b][1] / 1e9));
    }
    return json_pack("{s:i, s:o, s:o}", "bin_s", 1, "read_gbps", read, "write_gbps", write);
}

/* ---------- operations ---------- */

int kvio_tier_write_policy(const kvio_tier_t *tier) { return tier->write; }
void kvio_tier_count_skipped(kvio_tier_t *tier) { tier->stats.skipped_puts++; }
void kvio_tier_count_cut(kvio_tier_t *tier) { tier->stats.cut_puts++; }
void kvio_tier_count_cut_get(kvio_tier_t *tier) { tier->stats.cut_gets++; }

void kvio_tier_spill_to(kvio_tier_t *tier, kvio_tier_t *next) { tier->spill = next; }
/* The view's link to holder, the store's ranks and this rank's shard. */
static const kvio_shared_link_stats_t *view_link(const kvio_tier_t *tier, uint32_t holder)
{
    return tier->shared != NULL
               ? kvio_shared_store_link(tier->shared, tier->shared_rank, holder)
               : kvio_shared_endpoint_link(tier->shared_endpoint, holder);
}

static uint32_t view_ranks(const kvio_tier_t *tier)
{
    return tier->shared != NULL ? kvio_shared_store_ranks(tier->shared)
                                : kvio_shared_endpoint_ranks(tier->shared_endpoint);
}

static kvio_shared_shard_stats_t view_shard(const kvio_tier_t *tier)
{
    return tier->shared != NULL ? kvio_shared_store_shard(tier->shared, tier->shared_rank)
                                : kvio_shared_endpoint_shard(tier->shared_endpoint);
}

uint32_t kvio_tier_capacity(const kvio_tier_t *tier) { return tier->capacity; }
uint32_t kvio_tier_num_blocks(const kvio_tier_t *tier)
{
    /* A shared tier's: what its rank's shard holds. */
    return tier->shared != NULL || tier->shared_endpoint != NULL ? view_shard(tier).held
                                                                 : tier->num_held;
}
const char *kvio_tier_info(const kvio_tier_t *tier) { return tier->info; }
const char *kvio_tier_error(const kvio_tier_t *tier) { return tier->error; }
const kvio_tier_stats_t *kvio_tier_stats(const kvio_tier_t *tier) { return &tier->stats; }

bool kvio_tier_contains(const kvio_tier_t *tier, kvio_hash_t hash)
{
    if (tier->shared != NULL)
        return kvio_shared_store_contains(tier->shared, hash);
    if (tier->shared_endpoint != NULL)
        return kvio_shared_endpoint_contains(tier->shared_endpoint, hash);
    return index_find(tier, hash, NULL) != NO_ENTRY;
}

size_t kvio_tier_lookup(const kvio_tier_t *tier, const kvio_hash_t *hashes, size_t count,
                        bool *held_p)
{
    if (tier->shared_endpoint != NULL)
        return kvio_shared_endpoint_lookup(tier->shared_endpoint, hashes, count, held_p);
    size_t leading = 0;
    for (size_t i = 0; i < count && (held_p != NULL || leading == i); i++) {
        bool held = kvio_tier_contains(tier, hashes[i]);
        leading += leading == i && held;
        if (held_p != NULL)
            held_p[i] = held;
    }
    return leading;
}

/* ---------- a view of the shared store (simulate) ---------- */

/* The view's puts over every link so far. */
static uint64_t view_puts(const kvio_tier_t *tier)
{
    uint64_t puts = 0;
    for (uint32_t holder = 0; holder < view_ranks(tier); holder++)
        puts += view_link(tier, holder)->puts;
    return puts;
}

/* An endpoint's failure, counted with its text (a changed block also as a
 * checksum failure). */
static kvio_status_t view_failed(kvio_tier_t *tier, kvio_status_t status)
{
    tier->stats.checksum_failures += status == KVIO_ERR_CHECKSUM;
    return tier_failed(tier, status, kvio_shared_endpoint_error(tier->shared_endpoint));
}

/* count blocks into the store from this view's rank, counted as this
 * tier's puts (the new ones) and duplicates (those it held). */
static kvio_status_t shared_put(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                const void *const *data, size_t count, int64_t *cost_ns_p)
{
    kvio_status_t status = KVIO_OK;
    size_t stored;
    if (tier->shared != NULL) {
        stored = kvio_shared_store_put(tier->shared, tier->shared_rank, hashes, count,
                                       cost_ns_p);
    } else {
        uint64_t before = view_puts(tier);
        status = kvio_shared_endpoint_put(tier->shared_endpoint, hashes, data, count, cost_ns_p);
        stored = (size_t)(view_puts(tier) - before);
        if (status != KVIO_OK)
            status = view_failed(tier, status);
    }
    kvio_tier_stats_t *stats = &tier->stats;
    stats->duplicates += status == KVIO_OK ? count - stored : 0;
    if (stored == 0)
        return status;
    stats->puts += stored;
    stats->bytes_written += stored * tier->block_bytes;
    stats->write_ns += *cost_ns_p;
    stats->put_batches++;
    stats->put_latency_sum_ns += *cost_ns_p * (int64_t)stored;
    kvio_hist_record_n(stats->put_latency, (uint64_t)*cost_ns_p, stored);
    return status;
}

/* The leading blocks the store holds, read by this view's rank (emulate:
 * into data, each checked); the first not held is a miss when
 * shortfall_counts (emulate only: else it only ends them, see
 * kvio_tier_get_held). */
static kvio_status_t shared_get(kvio_tier_t *tier, const kvio_hash_t *hashes, void *const *data,
                                size_t count, bool shortfall_counts, size_t *got_p,
                                int64_t *cost_ns_p)
{
    size_t got = 0;
    kvio_status_t status = KVIO_OK;
    if (tier->shared != NULL) {
        got = kvio_shared_store_get(tier->shared, tier->shared_rank, hashes, count, cost_ns_p);
    } else {
        status = shortfall_counts
                     ? kvio_shared_endpoint_get(tier->shared_endpoint, hashes, data, count, &got,
                                                cost_ns_p)
                     : kvio_shared_endpoint_get_held(tier->shared_endpoint, hashes, data, count,
                                                     &got, cost_ns_p);
        if (status != KVIO_OK && status != KVIO_ERR_NOT_FOUND)
            status = view_failed(tier, status);
    }
    kvio_tier_stats_t *stats = &tier->stats;
    bool missed = got < count && (shortfall_counts || status != KVIO_OK);
    stats->gets += got + missed;
    stats->hits += got;
    stats->misses += missed && (status == KVIO_OK || status == KVIO_ERR_NOT_FOUND);
    *got_p = got;
    if (got > 0) {
        stats->bytes_read += got * tier->block_bytes;
        stats->read_ns += *cost_ns_p;
        stats->get_batches++;
        stats->get_latency_sum_ns += *cost_ns_p * (int64_t)got;
        kvio_hist_record_n(stats->get_latency, (uint64_t)*cost_ns_p, got);
    }
    if (status != KVIO_OK)
        return status;
    return got == count ? KVIO_OK : KVIO_ERR_NOT_FOUND;
}

/* The shared tier's own figures: hits its rank's shard served and those
 * other ranks' did, the bytes over the links to them, and each link's
 * counts (detail "links", one per holding rank). */
static void shared_fill(const kvio_tier_t *tier, kvio_result_t *entry)
{
    uint32_t ranks = view_ranks(tier);
    uint64_t own_hits = 0, peer_hits = 0, peer_read = 0, peer_written = 0;
    json_t *links = json_array();
    for (uint32_t holder = 0; holder < ranks; holder++) {
        const kvio_shared_link_stats_t *link = view_link(tier, holder);
        if (holder == tier->shared_rank) {
            own_hits += link->hits;
        } else {
            peer_hits += link->hits;
            peer_read += link->bytes_read;
            peer_written += link->bytes_written;
        }
        json_array_append_new(
            links, json_pack("{s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "holder",
                             (int)holder, "puts", (json_int_t)link->puts, "gets",
                             (json_int_t)link->gets, "hits", (json_int_t)link->hits,
                             "requests", (json_int_t)link->requests, "bytes_written",
                             (json_int_t)link->bytes_written, "bytes_read",
                             (json_int_t)link->bytes_read, "put_ns", (json_int_t)link->put_ns,
                             "get_ns", (json_int_t)link->get_ns));
    }
    kvio_shared_shard_stats_t shard = view_shard(tier);
    kvio_result_set(entry, KVIO_FIG_TIER_SHARED_OWN_SHARD_HITS, (double)own_hits);
    kvio_result_set(entry, KVIO_FIG_TIER_SHARED_PEER_SHARD_HITS, (double)peer_hits);
    kvio_result_set(entry, KVIO_FIG_TIER_SHARED_PEER_BYTES_READ, (double)peer_read);
    kvio_result_set(entry, KVIO_FIG_TIER_SHARED_PEER_BYTES_WRITTEN, (double)peer_written);
    kvio_result_set(entry, KVIO_FIG_TIER_SHARED_SHARD_EVICTIONS, (double)shard.evictions);
    kvio_result_set_detail(entry, "links", links);
}

/* A batch's scratch arrays, grown to count. */
static kvio_status_t batch_room(kvio_tier_t *tier, size_t count)
{
    if (count <= tier->batch_capacity)
        return KVIO_OK;
    size_t room = tier->batch_capacity ? tier->batch_capacity : 16;
    while (room < count)
        room *= 2;
    uint32_t *slots = realloc(tier->batch_slots, room * sizeof(*slots));
    if (slots != NULL)
        tier->batch_slots = slots;
    kvio_hash_t *hashes = realloc(tier->batch_hashes, room * sizeof(*hashes));
    if (hashes != NULL)
        tier->batch_hashes = hashes;
    const void **data = realloc(tier->batch_data, room * sizeof(*data));
    if (data != NULL)
        tier->batch_data = data;
    kvio_status_t *statuses = realloc(tier->batch_statuses, room * sizeof(*statuses));
    if (statuses != NULL)
        tier->batch_statuses = statuses;
    int64_t *latencies = realloc(tier->batch_latencies, room * sizeof(*latencies));
    if (latencies != NULL)
        tier->batch_latencies = latencies;
    uint64_t *checksums = realloc(tier->batch_checksums, room * sizeof(*checksums));
    if (checksums != NULL)
        tier->batch_checksums = checksums;
    uint32_t *victim_slots = realloc(tier->victim_slots, room * sizeof(*victim_slots));
    if (victim_slots != NULL)
        tier->victim_slots = victim_slots;
    kvio_hash_t *victim_hashes = realloc(tier->victim_hashes, room * sizeof(*victim_hashes));
    if (victim_hashes != NULL)
        tier->victim_hashes = victim_hashes;
    uint64_t *victim_checksums = realloc(tier->victim_checksums,
                                         room * sizeof(*victim_checksums));
    if (victim_checksums != NULL)
        tier->victim_checksums = victim_checksums;
    if (slots == NULL || hashes == NULL || data == NULL || statuses == NULL || latencies == NULL ||
        checksums == NULL || victim_slots == NULL || victim_hashes == NULL ||
        victim_checksums == NULL)
        return KVIO_ERR_NOMEM;
    tier->batch_capacity = room;
    return KVIO_OK;
}

/* Blocks a backend moves in one call: slots[i] with hashes[i] to or from
 * data[i]; each one's status, latency and (hashed) the checksum taken as
 * it was copied. */
typedef struct moves {
    const uint32_t *slots;
    const kvio_hash_t *hashes;
    const void **data;
    kvio_status_t *statuses;
    int64_t *latencies;
    uint64_t *checksums;
    bool hashed; /* set: the checksums were taken while copying */
} moves_t;

/* The backend moves count blocks, together where it can, else one by one.
 * A store in this process's memory (host) is copied here, hashed as it is
 * copied. Returns the wall time. */
static int64_t backend_move(kvio_tier_t *tier, bool put, size_t count, moves_t *moves,
                            char *error_p, size_t error_len)
{
    uint64_t start_ns = kvio_time_ns();
    const kvio_tier_ops_t *ops = tier->ops;
    moves->hashed = ops->address != NULL && (ops->caps & KVIO_TIER_CAP_VOLATILE);
    if (moves->hashed) {
        for (size_t i = 0; i < count; i++) {
            uint64_t one_ns = kvio_time_ns();
            /* The cast: the store's own memory, written on a put. */
            void *held = (void *)ops->address(tier->priv, moves->slots[i]);
            moves->checksums[i] = put ? kvio_copy_hashed(held, moves->data[i], tier->block_bytes)
                                      : kvio_copy_hashed((void *)moves->data[i], held,
                                                         tier->block_bytes);
            moves->statuses[i] = KVIO_OK;
            moves->latencies[i] = (int64_t)(kvio_time_ns() - one_ns);
        }
    } else if (put && ops->put_batch != NULL) {
        ops->put_batch(tier->priv, moves->slots, moves->hashes, moves->data, count,
                       moves->statuses, moves->latencies, error_p, error_len);
    } else if (!put && ops->get_batch != NULL) {
        /* The cast: a get's buffers are the caller's, written. */
        ops->get_batch(tier->priv, moves->slots, moves->hashes, (void *const *)moves->data,
                       count, moves->statuses, moves->latencies, error_p, error_len);
    } else {
        for (size_t i = 0; i < count; i++) {
            uint64_t one_ns = kvio_time_ns();
            char text[512] = "";
            moves->statuses[i] =
                put ? ops->put(tier->priv, moves->slots[i], moves->hashes[i], moves->data[i],
                               text, sizeof(text))
                    : ops->get(tier->priv, moves->slots[i], moves->hashes[i],
                               (void *)moves->data[i], text, sizeof(text));
            moves->latencies[i] = (int64_t)(kvio_time_ns() - one_ns);
            if (moves->statuses[i] != KVIO_OK && error_p[0] == '\0')
                snprintf(error_p, error_len, "%s", text);
        }
    }
    return (int64_t)(kvio_time_ns() - start_ns);
}

/* backend_move over the batch arrays. */
static int64_t backend_batch(kvio_tier_t *tier, bool put, size_t count, char *error_p,
                             size_t error_len)
{
    moves_t moves = {.slots = tier->batch_slots, .hashes = tier->batch_hashes,
                     .data = tier->batch_data, .statuses = tier->batch_statuses,
                     .latencies = tier->batch_latencies, .checksums = tier->batch_checksums};
    int64_t wall_ns = backend_move(tier, put, count, &moves, error_p, error_len);
    tier->batch_hashed = moves.hashed;
    return wall_ns;
}

/* The batch's cost: emulate, its wall time, at least the rate's time for
 * its blocks; simulate, one operation's latency and the blocks' bytes over
 * the bandwidth (the operations overlap, the bytes share the link). */
static int64_t batch_cost(const kvio_tier_t *tier, size_t count, int64_t wall_ns)
{
    if (tier->emulate)
        return wall_ns >= tier->paced_ns * (int64_t)count ? wall_ns
                                                            : tier->paced_ns * (int64_t)count;
    return tier->latency_ns +
           (int64_t)llround((double)tier->block_bytes * (double)count * 1e9 / tier->bandwidth);
}

/* Blocks a waterfall tier hands the next at once: the evictions of one
 * put batch go down together, so that a file tier below takes them at its
 * queue depth (one at a time they ran at depth 1). */
#define SPILL_BATCH 32

/* Waterfall: up to SPILL_BATCH blocks leaving this tier go down to the next
 * as one batch (read back first in emulate mode, each checked against its
 * checksum: a block lent in place by a store in this process's memory is
 * hashed where it is, the others are read into the spill buffers); the
 * next tier's own evictions go on down. A block lost or damaged on the way
 * is not passed on; a failure below is that tier's (counted), not this
 * eviction's. Returns the next tier's cost, which the put that evicted
 * waits for. */
static int64_t spill_group(kvio_tier_t *tier, const uint32_t *slots, const kvio_hash_t *hashes,
                           const uint64_t *checksums, size_t count)
{
    const void *data[SPILL_BATCH];
    kvio_hash_t down[SPILL_BATCH];
    size_t n = 0;
    const kvio_tier_ops_t *ops = tier->ops;
    bool in_place = ops->address != NULL && (ops->caps & KVIO_TIER_CAP_VOLATILE);
    if (tier->emulate && !in_place) {
        uint64_t stride = (tier->block_bytes + 4095) / 4096 * 4096;
        if (tier->spill_buffer == NULL &&
            posix_memalign(&tier->spill_buffer, 4096, stride * SPILL_BATCH) != 0) {
            tier->spill_buffer = NULL;
            return 0;
        }
        const void *buffers[SPILL_BATCH];
        kvio_status_t statuses[SPILL_BATCH];
        int64_t latencies[SPILL_BATCH];
        uint64_t read_checksums[SPILL_BATCH];
        for (size_t i = 0; i < count; i++)
            buffers[i] = (unsigned char *)tier->spill_buffer + i * stride;
        char error[512] = "";
        moves_t moves = {.slots = slots, .hashes = hashes, .data = buffers,
                         .statuses = statuses, .latencies = latencies,
                         .checksums = read_checksums};
        backend_move(tier, false, count, &moves, error, sizeof(error));
        for (size_t i = 0; i < count; i++) {
            if (statuses[i] == KVIO_OK)
                trace_op(tier, false, slots[i], latencies[i]);
            if (statuses[i] == KVIO_OK &&
                XXH3_64bits(buffers[i], tier->block_bytes) == checksums[i]) {
                data[n] = buffers[i];
                down[n++] = hashes[i];
            }
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            const void *held = tier->emulate ? ops->address(tier->priv, slots[i]) : NULL;
            if (held != NULL && XXH3_64bits(held, tier->block_bytes) != checksums[i])
                continue;
            data[n] = held;
            down[n++] = hashes[i];
        }
    }
    if (n == 0)
        return 0;
    int64_t cost_ns = 0;
    (void)kvio_tier_put_batch(tier->spill, down, data, n, &cost_ns);
    /* Those the next tier now holds went down (a failed write there is
     * its error, counted by it). */
    for (size_t i = 0; i < n; i++)
        tier->stats.demotions += kvio_tier_contains(tier->spill, down[i]);
    return cost_ns;
}

/* The blocks evicted since the last flush (victims_*): those the next tier
 * lacks go down in groups of SPILL_BATCH, then the backend deletes them
 * (unless its store is volatile). Their slots may already be taken by new
 * blocks, whose bytes are written only after this. The first deletion's
 * failure is the status. */
static kvio_status_t flush_victims(kvio_tier_t *tier, int64_t *spill_ns_p)
{
    size_t count = tier->num_victims;
    tier->num_victims = 0;
    if (tier->spill != NULL) {
        uint32_t slots[SPILL_BATCH];
        kvio_hash_t hashes[SPILL_BATCH];
        uint64_t checksums[SPILL_BATCH];
        size_t n = 0;
        for (size_t i = 0; i < count; i++) {
            if (kvio_tier_contains(tier->spill, tier->victim_hashes[i]))
                continue;
            slots[n] = tier->victim_slots[i];
            hashes[n] = tier->victim_hashes[i];
            checksums[n++] = tier->victim_checksums[i];
            if (n == SPILL_BATCH) {
                *spill_ns_p += spill_group(tier, slots, hashes, checksums, n);
                n = 0;
            }
        }
        if (n > 0)
            *spill_ns_p += spill_group(tier, slots, hashes, checksums, n);
    }
    if (!tier->emulate || (tier->ops->caps & KVIO_TIER_CAP_VOLATILE))
        return KVIO_OK;
    kvio_status_t first = KVIO_OK;
    for (size_t i = 0; i < count; i++) {
        char error[512] = "";
        kvio_status_t status = tier->ops->remove(tier->priv, tier->victim_slots[i],
                                                 tier->victim_hashes[i], error, sizeof(error));
        if (status != KVIO_OK && first == KVIO_OK)
            first = tier_failed(tier, status, error);
        else if (status != KVIO_OK)
            tier->stats.errors++;
    }
    return first;
}

/* Frees the least recently used block's slot for a new one; the block is
 * passed down (waterfall) and deleted by flush_victims, before any new
 * block is written to its slot. */
static void evict_one(kvio_tier_t *tier)
{
    uint32_t victim = tier->lru_tail;
    kvio_hash_t victim_hash = tier->entries[victim].hash;
    size_t v = tier->num_victims++;
    tier->victim_slots[v] = victim;
    tier->victim_hashes[v] = victim_hash;
    tier->victim_checksums[v] = tier->entries[victim].checksum;
    uint64_t victim_position;
    index_find(tier, victim_hash, &victim_position);
    entry_release(tier, victim, victim_position);
    tier->stats.evictions++;
}

/* Simulate: block i of a batch completes after the operation's latency and
 * the bytes of the blocks up to it over the bandwidth (they share the
 * link). */
static int64_t model_latency(const kvio_tier_t *tier, size_t i)
{
    return tier->latency_ns +
           (int64_t)llround((double)tier->block_bytes * (double)(i + 1) * 1e9 / tier->bandwidth);
}

/* The slots taken for a chunk's first count blocks go back to the free
 * list (nothing of them was written). */
static void give_back(kvio_tier_t *tier, size_t count)
{
    while (count > 0) {
        uint32_t taken = tier->batch_slots[--count];
        tier->entries[taken].next = tier->free_head;
        tier->free_head = taken;
    }
}

/* Puts up to capacity new blocks: none of their slots is another's of the
 * same batch (an eviction takes the oldest block, never one of these). */
static kvio_status_t put_chunk(kvio_tier_t *tier, const kvio_hash_t *hashes,
                               const void *const *data, size_t count, int64_t *cost_ns_p)
{
    size_t fresh = 0;
    int64_t spill_ns = 0;
    kvio_status_t first_error = KVIO_OK;
    for (size_t i = 0; i < count; i++) {
        uint32_t entry = index_find(tier, hashes[i], NULL);
        if (entry != NO_ENTRY) {
            /* Same hash, same content: refresh, do not rewrite. */
            lru_unlink(tier, entry);
            lru_push_front(tier, entry);
            tier->stats.duplicates++;
            continue;
        }
        if (tier->emulate && data[i] == NULL) {
            give_back(tier, fresh);
            *cost_ns_p = 0;
            (void)flush_victims(tier, cost_ns_p); /* the evicted blocks still go down */
            return tier_failed(tier, KVIO_ERR_INVALID, "put without data in emulate mode");
        }
        if (tier->free_head == NO_ENTRY)
            evict_one(tier);
        /* The slot leaves the free list now; it joins the index once written. */
        entry = tier->free_head;
        tier->free_head = tier->entries[entry].next;
        tier->batch_slots[fresh] = entry;
        tier->batch_hashes[fresh] = hashes[i];
        tier->batch_data[fresh] = data[i];
        fresh++;
    }
    /* The evicted blocks go down and are deleted before their slots are
     * written over; a failed deletion (a victim's bytes left in the store)
     * writes nothing of the chunk. */
    kvio_status_t removed = flush_victims(tier, &spill_ns);
    if (removed != KVIO_OK) {
        give_back(tier, fresh);
        *cost_ns_p = spill_ns;
        return removed;
    }
    if (fresh == 0) {
        *cost_ns_p = spill_ns;
        return KVIO_OK;
    }
    char error[512] = "";
    int64_t wall_ns = 0;
    if (tier->emulate)
        wall_ns = backend_batch(tier, true, fresh, error, sizeof(error));
    int64_t cost_ns = batch_cost(tier, fresh, wall_ns);
    for (size_t i = 0; i < fresh; i++) {
        uint32_t entry = tier->batch_slots[i];
        uint64_t position;
        kvio_status_t status = tier->emulate ? tier->batch_statuses[i] : KVIO_OK;
        if (status != KVIO_OK || index_find(tier, tier->batch_hashes[i], &position) != NO_ENTRY) {
            /* Not written, or written twice in this batch: the slot is free. */
            tier->entries[entry].next = tier->free_head;
            tier->free_head = entry;
            if (status != KVIO_OK && first_error == KVIO_OK)
                first_error = tier_failed(tier, status, error);
            else if (status != KVIO_OK)
                tier->stats.errors++;
            continue;
        }
        /* Every backend's blocks are checked on the way back (outside the
         * timed transfer): what a store returns must be what was put. */
        tier->entries[entry].hash = tier->batch_hashes[i];
        tier->entries[entry].checksum =
            !tier->emulate      ? 0
            : tier->batch_hashed ? tier->batch_checksums[i]
                                 : XXH3_64bits(tier->batch_data[i], tier->block_bytes);
        tier->table[position] = entry;
        lru_push_front(tier, entry);
        tier->num_held++;
        tier->stats.puts++;
        tier->stats.bytes_written += tier->block_bytes;
        timeline_add(tier, true, tier->block_bytes);
        int64_t latency_ns = tier->emulate ? tier->batch_latencies[i] : model_latency(tier, i);
        tier->stats.put_latency_sum_ns += latency_ns;
        kvio_hist_record(tier->stats.put_latency, (uint64_t)latency_ns);
        trace_op(tier, true, entry, latency_ns);
    }
    tier->stats.write_ns += cost_ns;
    tier->stats.put_batches++;
    *cost_ns_p = cost_ns + spill_ns;
    return first_error;
}

kvio_status_t kvio_tier_put_batch(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                  const void *const *data, size_t count, int64_t *cost_ns_p)
{
    *cost_ns_p = 0;
    if (tier->shared != NULL || tier->shared_endpoint != NULL)
        return shared_put(tier, hashes, data, count, cost_ns_p);
    kvio_status_t first_error = KVIO_OK;
    size_t chunk = count < tier->capacity ? count : tier->capacity;
    if (batch_room(tier, chunk) != KVIO_OK)
        return tier_failed(tier, KVIO_ERR_NOMEM, "out of memory for a batch");
    for (size_t start = 0; start < count; start += chunk) {
        size_t n = count - start < chunk ? count - start : chunk;
        int64_t cost_ns = 0;
        kvio_status_t status = put_chunk(tier, hashes + start, data + start, n, &cost_ns);
        *cost_ns_p += cost_ns;
        if (first_error == KVIO_OK)
            first_error = status;
    }
    return first_error;
}

kvio_status_t kvio_tier_list(kvio_tier_t *tier, kvio_hash_t hash, uint64_t checksum,
                             uint64_t location)
{
    if (tier->ops->locate == NULL)
        return tier_failed(tier, KVIO_ERR_UNSUPPORTED, "only a remote tier lists blocks");
    uint32_t entry = index_find(tier, hash, NULL);
    if (entry != NO_ENTRY) {
        lru_unlink(tier, entry);
        lru_push_front(tier, entry);
        tier->stats.duplicates++;
    } else {
        int64_t spill_ns = 0;
        if (tier->free_head == NO_ENTRY) {
            if (batch_room(tier, 1) != KVIO_OK)
                return tier_failed(tier, KVIO_ERR_NOMEM, "out of memory for an eviction");
            evict_one(tier);
            kvio_status_t status = flush_victims(tier, &spill_ns);
            if (status != KVIO_OK)
                return status;
        }
        uint64_t position;
        index_find(tier, hash, &position);
        entry = tier->free_head;
        tier->free_head = tier->entries[entry].next;
        tier->entries[entry].hash = hash;
        tier->table[position] = entry;
        lru_push_front(tier, entry);
        tier->num_held++;
        tier->stats.puts++;
        tier->stats.bytes_written += tier->block_bytes;
    }
    tier->entries[entry].checksum = checksum;
    tier->entries[entry].location = location;
    if (tier->emulate)
        tier->ops->locate(tier->priv, entry, location);
    return KVIO_OK;
}

bool kvio_tier_unlist(kvio_tier_t *tier, kvio_hash_t hash, uint64_t location)
{
    uint64_t position;
    uint32_t entry = index_find(tier, hash, &position);
    if (entry == NO_ENTRY || tier->entries[entry].location != location)
        return false;
    entry_release(tier, entry, position);
    return true;
}

kvio_status_t kvio_tier_put(kvio_tier_t *tier, kvio_hash_t hash, const void *data,
                            int64_t *cost_ns_p)
{
    int64_t cost_ns = 0;
    kvio_status_t status = kvio_tier_put_batch(tier, &hash, &data, 1, &cost_ns);
    if (status == KVIO_OK)
        *cost_ns_p = cost_ns;
    return status;
}

/* A get's lookup: the entry holding hash (and its table position), or
 * NO_ENTRY after counting the miss. */
static uint32_t get_lookup(kvio_tier_t *tier, kvio_hash_t hash, uint64_t *position_p)
{
    tier->stats.gets++;
    uint32_t entry = index_find(tier, hash, position_p);
    if (entry == NO_ENTRY)
        tier->stats.misses++;
    return entry;
}

/* A get's hit: the entry becomes the most recently used, and is counted. */
static void get_hit(kvio_tier_t *tier, uint32_t entry)
{
    lru_unlink(tier, entry);
    lru_push_front(tier, entry);
    tier->stats.hits++;
    tier->stats.bytes_read += tier->block_bytes;
    timeline_add(tier, false, tier->block_bytes);
}

/* A read block that failed: its status, the entry dropped when the block
 * is gone or damaged (a connection error or timeout leaves it listed). */
static kvio_status_t get_failed(kvio_tier_t *tier, uint32_t entry, kvio_hash_t hash,
                                kvio_status_t status, const char *error)
{
    uint64_t position;
    index_find(tier, hash, &position);
    if (status == KVIO_ERR_NOT_FOUND) {
        /* Lost behind the tier's back (Redis eviction, a deleted file). */
        entry_release(tier, entry, position);
        tier->stats.misses++;
        kvio_debug("%s tier: %s", tier->ops->plugin.name, error);
        return status;
    }
    if (status == KVIO_ERR_CHECKSUM || status == KVIO_ERR_PARSE || status == KVIO_ERR_IO) {
        entry_release(tier, entry, position);
        char ignored[512];
        if (!(tier->ops->caps & KVIO_TIER_CAP_VOLATILE))
            tier->ops->remove(tier->priv, entry, hash, ignored, sizeof(ignored));
    }
    return tier_failed(tier, status, error);
}

kvio_status_t kvio_tier_get_batch(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                  void *const *data, size_t count, size_t *got_p,
                                  int64_t *cost_ns_p)
{
    *got_p = 0;
    *cost_ns_p = 0;
    if (tier->shared != NULL || tier->shared_endpoint != NULL)
        return shared_get(tier, hashes, data, count, true, got_p, cost_ns_p);
    if (batch_room(tier, count) != KVIO_OK)
        return tier_failed(tier, KVIO_ERR_NOMEM, "out of memory for a batch");
    /* The leading blocks the tier holds: a prefix is read up to its first
     * miss. */
    size_t held = 0;
    kvio_status_t status = KVIO_OK;
    for (; held < count; held++) {
        uint32_t entry = get_lookup(tier, hashes[held], NULL);
        if (entry == NO_ENTRY) {
            status = KVIO_ERR_NOT_FOUND;
            break;
        }
        if (tier->emulate && data[held] == NULL)
            return tier_failed(tier, KVIO_ERR_INVALID, "get without a buffer in emulate mode");
        tier->batch_slots[held] = entry;
        tier->batch_hashes[held] = hashes[held];
        tier->batch_data[held] = data[held];
    }
    if (held == 0)
        return status;
    char error[512] = "";
    int64_t wall_ns = 0;
    if (tier->emulate)
        wall_ns = backend_batch(tier, false, held, error, sizeof(error));
    int64_t cost_ns = batch_cost(tier, held, wall_ns);
    size_t got = 0;
    for (; got < held; got++) {
        uint32_t entry = tier->batch_slots[got];
        kvio_status_t block = tier->emulate ? tier->batch_statuses[got] : KVIO_OK;
        if (block == KVIO_OK && tier->emulate) {
            uint64_t checksum = tier->batch_hashed ? tier->batch_checksums[got]
                                                   : XXH3_64bits(data[got], tier->block_bytes);
            if (checksum != tier->entries[entry].checksum) {
                tier->stats.checksum_failures++;
                snprintf(error, sizeof(error), "%s tier: a block came back changed (checksum "
                         "%016llx, put as %016llx)", tier->ops->plugin.name,
                         (unsigned long long)checksum,
                         (unsigned long long)tier->entries[entry].checksum);
                block = KVIO_ERR_CHECKSUM;
            }
        }
        if (block != KVIO_OK) {
            status = get_failed(tier, entry, hashes[got], block, error);
            break;
        }
        get_hit(tier, entry);
        int64_t latency_ns = tier->emulate ? tier->batch_latencies[got] : model_latency(tier, got);
        tier->stats.get_latency_sum_ns += latency_ns;
        kvio_hist_record(tier->stats.get_latency, (uint64_t)latency_ns);
        trace_op(tier, false, entry, latency_ns);
    }
    /* Blocks past a failure were not asked for. */
    tier->stats.gets -= held - got - (got < held);
    if (got < held && held < count) {
        tier->stats.gets--;
        tier->stats.misses--;
    }
    tier->stats.read_ns += cost_ns;
    tier->stats.get_batches++;
    *got_p = got;
    *cost_ns_p = cost_ns;
    return got == count ? KVIO_OK : status;
}

void kvio_tier_count_corrupt(kvio_tier_t *tier, kvio_hash_t hash, const char *why)
{
    char error[256];
    snprintf(error, sizeof(error), "%s tier: a block came back changed (%s)",
             tier->ops->plugin.name, why);
    tier->stats.checksum_failures++;
    uint32_t entry = index_find(tier, hash, NULL);
    if (entry != NO_ENTRY)
        (void)get_failed(tier, entry, hash, KVIO_ERR_CHECKSUM, error);
    else
        (void)tier_failed(tier, KVIO_ERR_CHECKSUM, error);
}

kvio_status_t kvio_tier_get_held(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                 void *const *data, size_t count, size_t *got_p,
                                 int64_t *cost_ns_p)
{
    *got_p = 0;
    *cost_ns_p = 0;
    if (tier->shared_endpoint != NULL) {
        kvio_status_t status = shared_get(tier, hashes, data, count, false, got_p, cost_ns_p);
        return status == KVIO_ERR_NOT_FOUND ? KVIO_OK : status;
    }
    /* The run asked of the tier's own index (or the simulated store's):
     * nothing moves to learn it. */
    size_t run = kvio_tier_lookup(tier, hashes, count, NULL);
    if (run == 0)
        return KVIO_OK;
    kvio_status_t status = kvio_tier_get_batch(tier, hashes, data, run, got_p, cost_ns_p);
    return status == KVIO_ERR_NOT_FOUND && *got_p == run ? KVIO_OK : status;
}

kvio_status_t kvio_tier_get(kvio_tier_t *tier, kvio_hash_t hash, void *data,
                            int64_t *cost_ns_p)
{
    size_t got = 0;
    int64_t cost_ns = 0;
    kvio_status_t status = kvio_tier_get_batch(tier, &hash, &data, 1, &got, &cost_ns);
    if (status == KVIO_OK || status == KVIO_ERR_NOT_FOUND)
        *cost_ns_p = cost_ns;
    return status;
}

kvio_status_t kvio_tier_lend(kvio_tier_t *tier, kvio_hash_t hash, const void **data_p)
{
    if (!tier->emulate || tier->ops->address == NULL)
        return KVIO_ERR_UNSUPPORTED;
    uint64_t position;
    uint32_t entry = get_lookup(tier, hash, &position);
    if (entry == NO_ENTRY)
        return KVIO_ERR_NOT_FOUND;
    const void *data = tier->ops->address(tier->priv, entry);
    /* A remote tier's block is a peer's bytes: checked before it is lent. */
    if (tier->ops == &kvio_tier_remote_mapped_ops &&
        XXH3_64bits(data, tier->block_bytes) != tier->entries[entry].checksum) {
        tier->stats.checksum_failures++;
        char error[160];
        snprintf(error, sizeof(error), "%s tier: a block came back changed",
                 tier->ops->plugin.name);
        return get_failed(tier, entry, hash, KVIO_ERR_CHECKSUM, error);
    }
    get_hit(tier, entry);
    *data_p = data;
    return KVIO_OK;
}

void kvio_tier_charge_reads(kvio_tier_t *tier, uint32_t count, int64_t total_ns)
{
    if (count == 0)
        return;
    tier->stats.read_ns += total_ns;
    kvio_hist_record_n(tier->stats.get_latency, (uint64_t)(total_ns / count), count);
}

/* ---------- results ---------- */

/* The percentiles storage engineers report (MLPerf Storage: P95; fio:
 * P99.9 too), in ms. */
/* A latency histogram's figures (a KVIO_TIER_LATENCY group: count, p50,
 * p95, p99, p99.9, max) in ms. */
static void set_latency(kvio_result_t *entry, kvio_figure_t count, const kvio_hist_t *hist)
{
    static const double quantiles[] = {0.50, 0.95, 0.99, 0.999};
    kvio_result_set(entry, count, (double)kvio_hist_count(hist));
    for (int q = 0; q < 4; q++)
        kvio_result_set(entry, count + 1 + q, kvio_hist_quantile(hist, quantiles[q]) / 1e6);
    kvio_result_set(entry, count + 5, (double)kvio_hist_max(hist) / 1e6);
}

/* A latency histogram by octave, as fio's completion-latency buckets
 * (clat): [{from_ns, below_ns, count}] from the first octave with a value
 * to the last; in emulate a file tier's are io_uring's per-I/O
 * completion latencies (submission to completion). */
static json_t *latency_histogram(const kvio_hist_t *hist)
{
    uint64_t counts[KVIO_HIST_OCTAVES];
    kvio_hist_octaves(hist, counts);
    int first = 0, last = KVIO_HIST_OCTAVES - 1;
    while (first < KVIO_HIST_OCTAVES && counts[first] == 0)
        first++;
    while (last >= first && counts[last] == 0)
        last--;
    json_t *octaves = json_array();
    for (int k = first; k <= last; k++)
        json_array_append_new(octaves,
                              json_pack("{s:I, s:I, s:I}", "from_ns",
                                        (json_int_t)(k == 0 ? 0 : 1ull << k), "below_ns",
                                        k < 62 ? (json_int_t)(1ull << (k + 1)) : INT64_MAX,
                                        "count", (json_int_t)counts[k]));
    return octaves;
}

void kvio_tier_stats_fill(const kvio_tier_t *tier, kvio_result_t *entry)
{
    const kvio_tier_stats_t *stats = &tier->stats;
    kvio_result_set_text(entry, KVIO_FIG_TIER_KIND, tier->ops->plugin.name);
    kvio_result_set_text(entry, KVIO_FIG_TIER_MODE, tier->emulate ? "emulate" : "simulate");
    kvio_result_set_text(entry, KVIO_FIG_TIER_WRITE, kvio_tier_write_names[tier->write]);
    kvio_result_set(entry, KVIO_FIG_TIER_SIZE_BYTES, (double)tier->size);
    kvio_result_set(entry, KVIO_FIG_TIER_BLOCK_BYTES, (double)tier->block_bytes);
    kvio_result_set(entry, KVIO_FIG_TIER_CAPACITY_BLOCKS, (double)tier->capacity);
    kvio_result_set(entry, KVIO_FIG_TIER_BLOCKS_HELD, (double)kvio_tier_num_blocks(tier));
    kvio_result_set(entry, KVIO_FIG_TIER_PUTS, (double)stats->puts);
    kvio_result_set(entry, KVIO_FIG_TIER_DUPLICATES, (double)stats->duplicates);
    kvio_result_set(entry, KVIO_FIG_TIER_SKIPPED_PUTS, (double)stats->skipped_puts);
    kvio_result_set(entry, KVIO_FIG_TIER_CUT_PUTS, (double)stats->cut_puts);
    kvio_result_set(entry, KVIO_FIG_TIER_CUT_GETS, (double)stats->cut_gets);
    kvio_result_set(entry, KVIO_FIG_TIER_GETS, (double)stats->gets);
    kvio_result_set(entry, KVIO_FIG_TIER_HITS, (double)stats->hits);
    kvio_result_set(entry, KVIO_FIG_TIER_MISSES, (double)stats->misses);
    kvio_result_set(entry, KVIO_FIG_TIER_EVICTIONS, (double)stats->evictions);
    kvio_result_set(entry, KVIO_FIG_TIER_DEMOTIONS, (double)stats->demotions);
    kvio_result_set(entry, KVIO_FIG_TIER_ERRORS, (double)stats->errors);
    kvio_result_set(entry, KVIO_FIG_TIER_CHECKSUM_FAILURES, (double)stats->checksum_failures);
    kvio_result_set(entry, KVIO_FIG_TIER_BYTES_WRITTEN, (double)stats->bytes_written);
    kvio_result_set(entry, KVIO_FIG_TIER_BYTES_READ, (double)stats->bytes_read);
    kvio_result_set(entry, KVIO_FIG_TIER_WRITE_NS, (double)stats->write_ns);
    kvio_result_set(entry, KVIO_FIG_TIER_READ_NS, (double)stats->read_ns);
    /* The transfers in flight on average while busy (Little's law: the
     * operations' latencies over it). */
    kvio_result_set(entry, KVIO_FIG_TIER_WRITE_QUEUE_DEPTH,
                    stats->write_ns > 0
                        ? (double)stats->put_latency_sum_ns / (double)stats->write_ns
                        : 0);
    kvio_result_set(entry, KVIO_FIG_TIER_READ_QUEUE_DEPTH,
                    stats->read_ns > 0 ? (double)stats->get_latency_sum_ns / (double)stats->read_ns
                                       : 0);
    kvio_result_set(entry, KVIO_FIG_TIER_PUT_BATCHES, (double)stats->put_batches);
    kvio_result_set(entry, KVIO_FIG_TIER_GET_BATCHES, (double)stats->get_batches);
    set_latency(entry, KVIO_FIG_TIER_READ_LATENCY_COUNT, stats->get_latency);
    set_latency(entry, KVIO_FIG_TIER_WRITE_LATENCY_COUNT, stats->put_latency);
    if (tier->error[0] != '\0')
        kvio_result_set_text(entry, KVIO_FIG_TIER_LAST_ERROR, tier->error);
    if (tier->shared != NULL || tier->shared_endpoint != NULL)
        shared_fill(tier, entry);
    kvio_result_set_detail(entry, "read_latency_histogram", latency_histogram(stats->get_latency));
    kvio_result_set_detail(entry, "write_latency_histogram",
                           latency_histogram(stats->put_latency));
    kvio_result_set_detail(entry, "info", json_string(tier->info));
    kvio_result_set_detail(entry, "model",
                           json_pack("{s:f, s:I}", "bandwidth_bytes_per_s", tier->bandwidth,
                                     "latency_ns", (json_int_t)tier->latency_ns));
    if (tier->emulate)
        kvio_result_set_detail(entry, "per_second", timeline_json(tier));
    /* What the kind itself says about it (a file's layout, engine and
     * device; a host tier's memory). */
    if (tier->backend_ready) {
        json_t *about = json_object();
        tier->ops->report(tier->priv, about);
        const char *key;
        json_t *value;
        json_object_foreach(about, key, value)
            kvio_result_set_detail(entry, key, json_incref(value));
        json_decref(about);
    }
    kvio_result_derive(entry);
}

json_t *kvio_tier_stats_json(const kvio_tier_t *tier)
{
    kvio_result_t *entry = kvio_result_create();
    if (entry == NULL)
        return NULL;
    kvio_tier_stats_fill(tier, entry);
    json_t *object = kvio_result_entry_json(entry, "tiers");
    kvio_result_destroy(entry);
    return object;
}
