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
#include "kvio/plugin.h"
#include "kvio/result.h"
#include "kvio/shared_store.h"
#include "kvio/stats.h"
#include "kvio/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KVIO_TIER_WRITE_BACK = 0,    /* a block is written when the pool evicts it */
    KVIO_TIER_WRITE_THROUGH = 1, /* a block is written as soon as it is full and hashed */
} kvio_tier_write_t;

/* The tier backends, found by name (kvcache/tiers.c): host, redis, file.
 * Each has its own keys in a section of its name beside `kind`:
 * {kind: redis, size: 1GiB, redis: {url: redis://h:6379}}. */
extern const kvio_registry_t kvio_tiers;

/* A tier whose blocks are held elsewhere (P/D: in a prefill rank's memory)
 * and moved by its caller: it lists each block (kvio_tier_list) with the
 * checksum the block must come back with and an opaque location; a get
 * asks fetch for the blocks' bytes. Nothing is ever put into it. */
typedef struct kvio_tier_remote {
    /* Moves count blocks (locations[i] into data[i], block_bytes each),
     * each one's status into statuses_p[i], the first failure's text in
     * error_p. */
    void (*fetch)(void *context, const uint64_t *locations, void *const *data, size_t count,
                  kvio_status_t *statuses_p, char *error_p, size_t error_len);
    /* Optional: where the block at location is mapped into this process
     * (shared memory): the tier then copies it itself, taking its checksum
     * as it copies, and fetch is not called. */
    const void *(*address)(void *context, uint64_t location);
    void *context;
    const char *name; /* what the tier is called in its stats ("peer") */
} kvio_tier_remote_t;

/* One entry of `serve.kvcache.tiers`. */
typedef struct kvio_tier_config {
    kvio_choice_t kind;    /* of kvio_tiers, with each backend's own options */
    uint64_t size;         /* bytes this tier holds */
    int write;             /* kvio_tier_write_t */
    double bandwidth;      /* simulate: bytes/s (0: the backend's default) */
    int64_t latency_ns;    /* simulate: per operation (0: the backend's default) */
    double rate;           /* emulate: most bytes/s moved (0: as fast as it goes) */
    char *trace;           /* a CSV of every block moved, an fio iolog and job (NULL: none) */
    /* Not options: where the tier sits, filled in by the serve rank.
     * device_index, device_rank: the GPU a pinned host tier page-locks its
     * arena with, as for the rank's KV pool (device.index, else rank modulo
     * the devices). run_id (NULL: none): each rank's blocks kept apart from
     * every other rank's and run's, under names made of the run's id and
     * the rank (a Redis key prefix, a directory of the path). */
    int64_t device_index;
    int device_rank;
    const char *run_id;
    unsigned rank;
    const kvio_tier_remote_t *remote; /* kvio_tier_create_remote's */
    /* kind shared: simulate, the store every rank's entry views (made once
     * per run by the serve ranks' owner, kvio_tier_shared_config; rank is
     * this view's rank among the store's); emulate, this rank's endpoint to
     * it (made collectively by the serve ranks). Borrowed. */
    kvio_shared_store_t *shared_store;
    kvio_shared_endpoint_t *shared_endpoint;
} kvio_tier_config_t;

/* Whether the entry is a shared tier (its kind has KVIO_TIER_CAP_SHARED:
 * kind shared; kvcache/tier.c), and the store its entries view: num_ranks
 * shards of the entry's size, blocks of block_bytes, the links as
 * configured (kvcache/tier_shared.c). */
bool kvio_tier_is_shared(const kvio_tier_config_t *config);
void kvio_tier_shared_config(const kvio_tier_config_t *config, uint32_t num_ranks,
                             uint64_t block_bytes, kvio_shared_store_config_t *store_p);

/* The option table of one `serve.kvcache.tiers` entry (kvcache/tier.c). */
extern const kvio_opt_t kvio_tier_options[];

/* Names indexed by kvio_tier_write_t ("back", "through"); NULL-terminated. */
extern const char *const kvio_tier_write_names[];

/* The simulate model of a configuration: its bandwidth (bytes/s) and latency
 * (ns per operation), the configured values or the backend's defaults (a
 * host tier is modelled as configured: pinned or pageable; see
 * kvcache/README.md "Tiers" for where the numbers come from). */
void kvio_tier_model(const kvio_tier_config_t *config, double *bandwidth_p,
                     int64_t *latency_ns_p);

/* Checks, from one process before an emulate run's ranks start, what the
 * backend will need for num_ranks serve ranks, each with the entry's size
 * (a file tier: its directory or its parent exists, is writable and has the
 * free space; Redis answers); path names the entry
 * ("serve.kvcache.tiers[0]") in the message. */
kvio_status_t kvio_tier_preflight(const kvio_tier_config_t *config, uint32_t num_ranks,
                                  const char *path, char *error_p, size_t error_len);

/* Whether the entry keeps its blocks in this process's memory (host). */
bool kvio_tier_in_memory(const kvio_tier_config_t *config);

/* Counters of one tier, per run. */
typedef struct kvio_tier_stats {
    uint64_t puts, gets, hits, misses, evictions, errors;
    uint64_t demotions;             /* waterfall: evicted blocks written to the next tier */
    uint64_t checksum_failures; /* gets whose block came back changed (also errors) */
    uint64_t duplicates;            /* puts of a block already held: refreshed, not rewritten */
    uint64_t skipped_puts;          /* saves not made: the staging was full (save_full: skip) */
    uint64_t cut_puts;              /* saves not made: staged when the run was cut */
    uint64_t cut_gets;              /* reads not made: a load the run's end cut */
    uint64_t bytes_written, bytes_read;
    int64_t write_ns, read_ns;      /* time spent in puts and gets (a batch: its wall time) */
    int64_t put_latency_sum_ns, get_latency_sum_ns; /* Σ of each block's own latency */
    uint64_t put_batches, get_batches; /* calls that moved blocks */
    kvio_hist_t *put_latency;        /* ns per put, from its submission to its completion */
    kvio_hist_t *get_latency;        /* ns per get that hit */
} kvio_tier_stats_t;

typedef struct kvio_tier kvio_tier_t;

/* Bytes a tier of size bytes in blocks of block_bytes takes for its index
 * of held blocks (a simulated tier's whole memory). */
uint64_t kvio_tier_index_footprint(uint64_t size, uint64_t block_bytes);

/* Creates a tier for blocks of block_bytes; the config (its backend's
 * options, run_id) is read during the call only: the backend copies what it
 * keeps.
 * emulate: really move bytes (connects to Redis, creates the directory);
 * simulate: model the cost, touch nothing (a Redis URL is only parsed).
 * Refuses a size that holds no block, an unreachable Redis (with the URL), an
 * unwritable directory, a host tier larger than the machine's memory, a file
 * tier larger than the free space (the last three in emulate mode). A tier is
 * used by one thread at a time. The caller destroys it; destroying an emulate
 * tier deletes the blocks it wrote (files, Redis keys). */
kvio_status_t kvio_tier_create(const kvio_tier_config_t *config, uint64_t block_bytes,
                               bool emulate, kvio_tier_t **tier_p, char *error_p,
                               size_t error_len);
void kvio_tier_destroy(kvio_tier_t *tier);

/* Creates a remote tier of capacity blocks (simulate: modelled at bandwidth
 * bytes/s and latency_ns per operation, remote unused and may be NULL). */
kvio_status_t kvio_tier_create_remote(const kvio_tier_remote_t *remote, uint32_t capacity,
                                      uint64_t block_bytes, double bandwidth,
                                      int64_t latency_ns, bool emulate, kvio_tier_t **tier_p,
                                      char *error_p, size_t error_len);

/* A remote tier lists a block: held from now on (the least recently used
 * one leaves when full), to come back with checksum (emulate) from
 * location. A block listed already is refreshed and takes the new ones. */
kvio_status_t kvio_tier_list(kvio_tier_t *tier, kvio_hash_t hash, uint64_t checksum,
                             uint64_t location);

/* A remote tier forgets a block that is no longer at location (its holder
 * let it go); true when it was listed there (a block listed again since,
 * elsewhere, stays). */
bool kvio_tier_unlist(kvio_tier_t *tier, kvio_hash_t hash, uint64_t location);

/* Waterfall placement (kv-cache.py's): a block this tier evicts is written
 * to next (when next lacks it) before its slot is reused, read back and
 * checked in emulate mode; next's evictions go on down its own. NULL: an
 * evicted block is dropped. */
void kvio_tier_spill_to(kvio_tier_t *tier, kvio_tier_t *next);

/* kvio_tier_write_t: when the engine writes blocks down (the tier does not act on it). */
int kvio_tier_write_policy(const kvio_tier_t *tier);

/* A save this tier would have taken was skipped (the engine's staging was
 * full and serve.kvcache.save_full is skip): counted in skipped_puts. */
void kvio_tier_count_skipped(kvio_tier_t *tier);

/* A save this tier would have taken was staged when the run stopped and
 * dropped (the tiers' drain is bounded): counted in cut_puts. */
void kvio_tier_count_cut(kvio_tier_t *tier);

/* A read of an object this tier holds was not made: the run's end (the
 * drain's cap, a signal) cut the load that wanted it. Counted in cut_gets. */
void kvio_tier_count_cut_get(kvio_tier_t *tier);

/* A block hash's bytes, read back whole (its checksum held), are not what
 * their reader knows they must be (a generated pool checks them against
 * their owner stamp, why says so): counted in checksum_failures and errors,
 * and the block leaves the tier. */
void kvio_tier_count_corrupt(kvio_tier_t *tier, kvio_hash_t hash, const char *why);

/* Blocks the tier can hold (size / block_bytes), and holds now. */
uint32_t kvio_tier_capacity(const kvio_tier_t *tier);
uint32_t kvio_tier_num_blocks(const kvio_tier_t *tier);

/* One line on what the backend really uses, e.g. "host: 64 blocks of 4096
 * bytes in pageable memory (host (fallback from pinned: CUDA not built
 * ...))" (borrowed). */
const char *kvio_tier_info(const kvio_tier_t *tier);

/* The text of the last failed put or get, "" if none (borrowed). */
const char *kvio_tier_error(const kvio_tier_t *tier);

/* True when the tier holds the block (no I/O; the framework's index). */
bool kvio_tier_contains(const kvio_tier_t *tier, kvio_hash_t hash);

/* Which of hashes the tier holds (held_p[i], when not NULL); returns how
 * many leading ones it holds. A shared tier in emulate asks every holder at
 * once: one round trip for the batch, where kvio_tier_contains is one per
 * block. */
size_t kvio_tier_lookup(const kvio_tier_t *tier, const kvio_hash_t *hashes, size_t count,
                        bool *held_p);

/* Stores a block of block_bytes (data is borrowed; may be NULL in simulate
 * mode); evicts the least recently used block when full (the backend deletes
 * it). A block already held is only refreshed (counted in duplicates, cost
 * 0). *cost_ns_p: the time it took, eviction included (emulate), or the
 * modelled time (simulate); set on success. On an error (counted in errors,
 * text in kvio_tier_error) the tier does not hold the block. */
kvio_status_t kvio_tier_put(kvio_tier_t *tier, kvio_hash_t hash, const void *data,
                            int64_t *cost_ns_p);

/* count blocks at once (data[i] for hashes[i]): the backend moves them
 * together where it can (the file tier's slab: its queue depth in flight),
 * else one after the other. Blocks held already are refreshed; a block
 * whose write fails is counted and left out. *cost_ns_p: the batch's
 * time. Returns the first error (the rest are counted). */
kvio_status_t kvio_tier_put_batch(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                  const void *const *data, size_t count, int64_t *cost_ns_p);

/* Loads the leading blocks of hashes the tier holds, up to the first it
 * does not (not read), into data[i], together where the backend can.
 * *got_p: how many came back whole, in order; the status is KVIO_OK when
 * all did, else what stopped them (KVIO_ERR_NOT_FOUND for a miss), as
 * kvio_tier_get says. *cost_ns_p: the batch's time. */
kvio_status_t kvio_tier_get_batch(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                  void *const *data, size_t count, size_t *got_p,
                                  int64_t *cost_ns_p);

/* As kvio_tier_get_batch, for a load that asks tier after tier: the
 * leading blocks of hashes the tier holds, as many as it does, a shorter
 * run (none: *got_p 0) no miss; KVIO_OK unless a block failed. A shared
 * tier in emulate learns what it holds and brings it in one round trip
 * (where a lookup, then a get, take two). */
kvio_status_t kvio_tier_get_held(kvio_tier_t *tier, const kvio_hash_t *hashes,
                                 void *const *data, size_t count, size_t *got_p,
                                 int64_t *cost_ns_p);

/* Emulate, with a rate: a get or put reports (in *cost_ns_p) at least the
 * time the rate gives a block, and returns as soon as the bytes moved; the
 * caller waits out the rest from the transfer's start_ns (a no-op once
 * that much time has passed, and for a tier without a rate). */
void kvio_tier_pace(uint64_t start_ns, int64_t cost_ns);

/* Loads a block into data (block_bytes; may be NULL in simulate mode), and
 * makes it the most recently used. KVIO_ERR_NOT_FOUND on a miss (counted; a
 * block the tier lists but the backend lost, e.g. a Redis entry whose data
 * key is gone, is a miss: it leaves the index and its metadata is deleted).
 * *cost_ns_p is set on success and on a miss (a miss found by the backend
 * took time; one found in the index costs 0). Other errors are counted with
 * their text in kvio_tier_error; a damaged block (KVIO_ERR_CHECKSUM, a
 * truncated file) leaves the tier, a connection error leaves it listed. */
kvio_status_t kvio_tier_get(kvio_tier_t *tier, kvio_hash_t hash, void *data,
                            int64_t *cost_ns_p);

/* Like kvio_tier_get, for a caller that copies the block itself (a GPU
 * pool's batched loads): a tier holding its blocks in host memory (emulate
 * host tier) lends the block's address in *data_p, valid until the next put
 * into this tier, counts the hit and makes it the most recently used; the
 * caller reports its copy time with kvio_tier_charge_reads.
 * KVIO_ERR_NOT_FOUND on a miss (counted); KVIO_ERR_UNSUPPORTED, counting
 * nothing, from a tier that cannot lend (use kvio_tier_get). */
kvio_status_t kvio_tier_lend(kvio_tier_t *tier, kvio_hash_t hash, const void **data_p);

/* Adds total_ns, the time spent copying count lent blocks, to the tier's
 * read time and get latencies (each block total_ns / count). */
void kvio_tier_charge_reads(kvio_tier_t *tier, uint32_t count, int64_t total_ns);

/* The tier's counters (borrowed). */
const kvio_tier_stats_t *kvio_tier_stats(const kvio_tier_t *tier);

/* The tier's figures (kvio/figures.def's tiers[] ones: traffic, rates,
 * queue depths, latency percentiles, errors) into entry, an entry of a
 * result's "tiers" list, with what the kind says about itself as detail. */
void kvio_tier_stats_fill(const kvio_tier_t *tier, kvio_result_t *entry);

/* The same as the JSON object metrics.tiers[] shows (the caller owns it). */
json_t *kvio_tier_stats_json(const kvio_tier_t *tier);

#endif
