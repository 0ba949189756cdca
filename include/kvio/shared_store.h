/* A KV store shared by the serve ranks, as Mooncake Store, an LMCache server
 * or Dynamo's KV block manager are: every rank writes the blocks it computed
 * and reads those any rank computed. Placement is explicit: a block lives on
 * one rank, its holder (the block hash modulo the ranks), in that rank's
 * shard, which holds shard_bytes / block_bytes blocks and evicts its least
 * recently used one when full. Every access is counted per link (the rank
 * that asked, the rank that holds), so a run says which hits its own shard
 * served and which another rank's did, and the bytes each link moved.
 *
 * Two ways to run it, one index (a shard) under both:
 * - simulate (kvio_shared_store_t): every shard in this process, nothing
 *   moves; an access costs its link's latency + bytes / bandwidth (a rank's
 *   own shard: the local link; another's: the remote link);
 * - emulate (kvio_shared_endpoint_t): each rank holds its shard in its own
 *   memory, registered with UCX, and serves it from a thread of its own;
 *   ranks (threads of one process or mpirun processes) put and get blocks
 *   over UCX tag messages (a put, a get or a lookup of a batch: one request
 *   per holder, its blocks each a message after it), each block's XXH3-64
 *   checksum taken by the writer, checked by the holder as it arrives and
 *   by the reader as it comes back. */
#ifndef KVIO_SHARED_STORE_H
#define KVIO_SHARED_STORE_H

#include "kvio/hash.h"
#include "kvio/rte.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvio_shared_store_config {
    uint32_t num_ranks;       /* the ranks sharing the store, each holding a shard */
    uint64_t block_bytes;
    uint64_t shard_bytes;     /* each rank's share (whole blocks) */
    /* simulate: a rank's own shard (local) and another rank's (remote),
     * bytes/s and ns per batch */
    double local_bandwidth;
    int64_t local_latency_ns;
    double remote_bandwidth;
    int64_t remote_latency_ns;
} kvio_shared_store_config_t;

/* What one link (asking rank -> holding rank) moved. */
typedef struct kvio_shared_link_stats {
    uint64_t puts;              /* blocks stored (new to the holder) */
    uint64_t duplicates;        /* puts of a block the holder had: refreshed */
    uint64_t gets, hits, misses;
    uint64_t checksum_failures; /* blocks that arrived changed (also errors) */
    uint64_t errors;            /* puts or gets that failed */
    uint64_t bytes_written, bytes_read;
    int64_t put_ns, get_ns;     /* time in batches over this link */
    uint64_t requests;          /* requests to the holder: a put's, a get's or a lookup's
                                   one per batch (up to 64 hashes) */
} kvio_shared_link_stats_t;

/* A shard, as its holder sees it. */
typedef struct kvio_shared_shard_stats {
    uint32_t capacity;  /* blocks it can hold */
    uint32_t held;      /* blocks it holds now */
    uint64_t stored;    /* blocks written into it */
    uint64_t evictions; /* blocks it let go to make room */
    uint64_t requests;  /* requests it answered (emulate; simulate: batches that reached it) */
} kvio_shared_shard_stats_t;

/* The rank holding hash among num_ranks (placement). */
uint32_t kvio_shared_store_holder(kvio_hash_t hash, uint32_t num_ranks);

/* Checks a configuration: ranks, a block size, a shard that holds at least
 * one block and at most 2^30; bandwidths above 0 for simulate. The message
 * names the key ("shard size 100 bytes holds no block of 4096 bytes"). */
kvio_status_t kvio_shared_store_check(const kvio_shared_store_config_t *config, bool simulate,
                                      char *error_p, size_t error_len);

/* ---------- simulate: every shard in this process ---------- */

typedef struct kvio_shared_store kvio_shared_store_t;

/* Creates the store (num_ranks shards, empty). Used by one thread at a time
 * (simulate's lanes take turns). The caller destroys it. */
kvio_status_t kvio_shared_store_create(const kvio_shared_store_config_t *config,
                                       kvio_shared_store_t **store_p, char *error_p,
                                       size_t error_len);
void kvio_shared_store_destroy(kvio_shared_store_t *store);

/* rank stores count blocks, each in its holder's shard (a block held
 * already is refreshed); returns how many were new. *cost_ns_p: the
 * modelled time, the links moving their blocks side by side (the slowest
 * link's time). */
size_t kvio_shared_store_put(kvio_shared_store_t *store, uint32_t rank,
                             const kvio_hash_t *hashes, size_t count, int64_t *cost_ns_p);

/* rank loads the leading blocks of hashes the store holds, up to the first
 * it does not; returns how many. *cost_ns_p as for a put, over the blocks
 * loaded. */
size_t kvio_shared_store_get(kvio_shared_store_t *store, uint32_t rank, const kvio_hash_t *hashes,
                             size_t count, int64_t *cost_ns_p);

/* The ranks whose shards make the store. */
uint32_t kvio_shared_store_ranks(const kvio_shared_store_t *store);

/* True when the store holds hash (no access counted). */
bool kvio_shared_store_contains(const kvio_shared_store_t *store, kvio_hash_t hash);

/* The link from rank to holder (borrowed), and holder's shard. */
const kvio_shared_link_stats_t *kvio_shared_store_link(const kvio_shared_store_t *store,
                                                       uint32_t rank, uint32_t holder);
kvio_shared_shard_stats_t kvio_shared_store_shard(const kvio_shared_store_t *store,
                                                  uint32_t holder);

/* ---------- emulate: each rank holds its shard, blocks move over UCX ---------- */

typedef struct kvio_shared_endpoint kvio_shared_endpoint_t;

/* Collective among the store's ranks, world ranks first_rank ..
 * first_rank + config->num_ranks - 1 of rte (each calls it; other ranks do
 * not take part). Allocates and registers this rank's shard, starts the
 * thread that serves it and connects to every rank's. A failure on one rank
 * (memory, UCX) is reported there; the others fail in the exchange. */
kvio_status_t kvio_shared_endpoint_create(kvio_rte_t *rte, int first_rank,
                                          const kvio_shared_store_config_t *config,
                                          kvio_shared_endpoint_t **endpoint_p, char *error_p,
                                          size_t error_len);

/* Which of hashes the store holds (held_p[i], when held_p is not NULL):
 * one round trip for the batch, a request to each holder with its hashes,
 * all in flight; no access counted. Returns how many leading ones it holds.
 * An error reads as not held, its text in kvio_shared_endpoint_error. */
size_t kvio_shared_endpoint_lookup(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                                   size_t count, bool *held_p);

/* True when the store holds hash (kvio_shared_endpoint_lookup of one). */
bool kvio_shared_endpoint_contains(kvio_shared_endpoint_t *endpoint, kvio_hash_t hash);

/* Stores count blocks (data[i], block_bytes each, borrowed) in their
 * holders' shards, all in flight together. Returns the first failure (a
 * block refused for its checksum: KVIO_ERR_CHECKSUM), its text in
 * kvio_shared_endpoint_error; *elapsed_ns_p: the batch's wall time. */
kvio_status_t kvio_shared_endpoint_put(kvio_shared_endpoint_t *endpoint,
                                       const kvio_hash_t *hashes, const void *const *data,
                                       size_t count, int64_t *elapsed_ns_p);

/* Loads the leading blocks of hashes the store holds into data[i], up to
 * the first it does not (KVIO_ERR_NOT_FOUND) or that came back changed
 * (KVIO_ERR_CHECKSUM); *got_p: how many came back whole. One round trip:
 * a request to each holder with its hashes, answered with the leading ones
 * it holds, their blocks in one reply. */
kvio_status_t kvio_shared_endpoint_get(kvio_shared_endpoint_t *endpoint,
                                       const kvio_hash_t *hashes, void *const *data,
                                       size_t count, size_t *got_p, int64_t *elapsed_ns_p);

/* As kvio_shared_endpoint_get, for a caller that asks for as many blocks
 * as the store may hold and takes the leading ones it does (a load trying
 * tier after tier): the first block not held only ends them (KVIO_OK,
 * neither a get nor a miss counted). Learning what is held and bringing it
 * is one round trip. */
kvio_status_t kvio_shared_endpoint_get_held(kvio_shared_endpoint_t *endpoint,
                                            const kvio_hash_t *hashes, void *const *data,
                                            size_t count, size_t *got_p, int64_t *elapsed_ns_p);

/* The text of the last failure, "" if none (borrowed). */
const char *kvio_shared_endpoint_error(const kvio_shared_endpoint_t *endpoint);

/* This rank's link to holder (borrowed). */
const kvio_shared_link_stats_t *kvio_shared_endpoint_link(const kvio_shared_endpoint_t *endpoint,
                                                          uint32_t holder);

/* Collective among the store's ranks: waits until every one is done with
 * the store, then stops serving this rank's shard. Returns the first error
 * the server met. */
kvio_status_t kvio_shared_endpoint_stop(kvio_shared_endpoint_t *endpoint);

/* This rank's shard (while it is served: as of the last request served). */
kvio_shared_shard_stats_t kvio_shared_endpoint_shard(const kvio_shared_endpoint_t *endpoint);

/* This rank's index among the store's ranks. */
uint32_t kvio_shared_endpoint_rank(const kvio_shared_endpoint_t *endpoint);

/* The ranks whose shards make the store. */
uint32_t kvio_shared_endpoint_ranks(const kvio_shared_endpoint_t *endpoint);

/* Frees everything (stops the server first, not collectively, if
 * kvio_shared_endpoint_stop was not called). */
void kvio_shared_endpoint_destroy(kvio_shared_endpoint_t *endpoint);

#endif
