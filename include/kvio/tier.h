/* KV tiers below the device pool: host memory, Redis and files. A tier
 * stores whole KV blocks under their block hash, up to its size (evicting its
 * least recently used block when full), and counts bytes, operations and
 * latency per tier. In emulate mode the bytes really move; in simulate mode
 * nothing moves and each operation is charged latency + bytes / bandwidth.
 * The framework (kvcache/tier.c) keeps the index and takes the measurements;
 * backends (ops tables) only move bytes. */
#ifndef KVIO_TIER_H
#define KVIO_TIER_H

#include "kvio/config.h"
#include "kvio/hash.h"
#include "kvio/stats.h"
#include "kvio/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { KVIO_TIER_HOST = 0, KVIO_TIER_REDIS = 1, KVIO_TIER_FILE = 2 } kvio_tier_kind_t;

typedef enum {
    KVIO_TIER_WRITE_BACK = 0,    /* a block is written when the pool evicts it */
    KVIO_TIER_WRITE_THROUGH = 1, /* a block is written as soon as it is full and hashed */
} kvio_tier_write_t;

/* One entry of `serve.kvcache.tiers`. */
typedef struct kvio_tier_config {
    int kind;              /* kvio_tier_kind_t */
    uint64_t size;         /* bytes this tier holds */
    int write;             /* kvio_tier_write_t */
    char *url;             /* redis: redis://[:password@]host:port[/db] */
    char *path;            /* file: directory for the chunk files */
    bool o_direct;         /* file: O_DIRECT reads and writes */
    bool pinned;           /* host: pinned memory (needs CUDA; else pageable) */
    char *key_prefix;      /* redis: prefix of every key (default "kvio:kv:") */
    double bandwidth;      /* simulate: bytes/s (0: the kind's default) */
    int64_t latency_ns;    /* simulate: per operation (0: the kind's default) */
} kvio_tier_config_t;

extern const kvio_opt_t kvio_tier_options[];

/* Counters of one tier, per run. */
typedef struct kvio_tier_stats {
    uint64_t puts, gets, hits, misses, evictions, errors;
    uint64_t bytes_written, bytes_read;
    int64_t write_ns, read_ns;      /* time spent in puts and gets */
    kvio_hist_t *put_latency;        /* ns per put */
    kvio_hist_t *get_latency;        /* ns per get */
} kvio_tier_stats_t;

typedef struct kvio_tier kvio_tier_t;

/* Creates a tier for blocks of block_bytes. emulate: really move bytes
 * (connects to Redis, creates the directory); simulate: model the cost.
 * Refuses a size that holds no block, an unreachable Redis (with the URL), an
 * unwritable directory, a host tier larger than the machine's memory. */
kvio_status_t kvio_tier_create(const kvio_tier_config_t *config, uint64_t block_bytes,
                               bool emulate, kvio_tier_t **tier_p, char *error_p,
                               size_t error_len);
void kvio_tier_destroy(kvio_tier_t *tier);

const char *kvio_tier_name(const kvio_tier_t *tier);
int kvio_tier_write_policy(const kvio_tier_t *tier);

/* True when the tier holds the block (no I/O; the framework's index). */
bool kvio_tier_contains(const kvio_tier_t *tier, kvio_hash_t hash);

/* Stores a block (data may be NULL in simulate mode); evicts the least
 * recently used block when full. *cost_ns_p: the time it took (emulate) or
 * the modelled time (simulate). */
kvio_status_t kvio_tier_put(kvio_tier_t *tier, kvio_hash_t hash, const void *data,
                            int64_t *cost_ns_p);

/* Loads a block into data (may be NULL in simulate mode). KVIO_ERR_NOT_FOUND
 * on a miss (counted; a Redis entry whose data key is gone is a miss and its
 * metadata is deleted). */
kvio_status_t kvio_tier_get(kvio_tier_t *tier, kvio_hash_t hash, void *data,
                            int64_t *cost_ns_p);

/* The tier's counters (borrowed). */
const kvio_tier_stats_t *kvio_tier_stats(const kvio_tier_t *tier);

/* Counters as JSON: name, kind, bytes, ops, hit rate, bandwidth, latency. */
json_t *kvio_tier_stats_json(const kvio_tier_t *tier);

#endif
