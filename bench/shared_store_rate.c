/* Drives the shared KV store in emulate (kvcache/shared_store_ucx.c) as the
 * engine does, for bench/shared_store.sh: two ranks (threads of this
 * process, each with its shard, its server thread and its UCX workers);
 * for SECONDS, rank 0 puts blocks of BLOCK_BYTES new to the store that
 * rank 1's shard holds (the placement picks them; a full shard evicts),
 * BATCH at a time (one request per batch, every block checked as it
 * arrives); then it puts COUNT of them and for SECONDS each: gets them back
 * BATCH at a time (one request to the holder per batch, every block
 * checked), gets them one at a time (a request per block, as the store did
 * before it batched), loads them BATCH at a time as the block store did
 * (is the first held, how far, get: three round trips) and as it does
 * (kvio_shared_endpoint_get_held: one), and asks whether the store holds
 * them BATCH at a time (kvio_shared_endpoint_lookup), then one at a time.
 * Prints `put_gbps P get_gbps G get1_gbps G1 load3_gbps L3 load1_gbps L1
 * lookup_per_s L lookup1_per_s L1 lookup_batch_us U` (GB = 1e9; bytes
 * over wall time; lookups: hashes answered per second).
 * usage: shared_store_rate BLOCK_BYTES COUNT BATCH SECONDS */
#include "kvio/hash.h"
#include "kvio/rte.h"
#include "kvio/shared_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench {
    uint64_t block_bytes;
    size_t count, batch;
    double seconds;
    double put_gbps, get_gbps, get1_gbps, load3_gbps, load1_gbps;
    double lookup_per_s, lookup1_per_s, lookup_batch_us;
    char error[512];
} bench_t;

static double now_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* How a batch is loaded: a get; the block store's load before #57's fold
 * (is the first held, which of the rest, then a get); a get of what is
 * held. */
enum { GET, LOAD_THREE_TRIPS, LOAD_ONE_TRIP };

static kvio_status_t get_batch(kvio_shared_endpoint_t *endpoint, int how,
                               const kvio_hash_t *hashes, void *const *into, size_t n,
                               size_t *got_p)
{
    int64_t ns = 0;
    if (how == LOAD_ONE_TRIP)
        return kvio_shared_endpoint_get_held(endpoint, hashes, into, n, got_p, &ns);
    if (how == LOAD_THREE_TRIPS &&
        (!kvio_shared_endpoint_contains(endpoint, hashes[0]) ||
         (n > 1 && kvio_shared_endpoint_lookup(endpoint, hashes + 1, n - 1, NULL) != n - 1)))
        return KVIO_ERR_NOT_FOUND;
    return kvio_shared_endpoint_get(endpoint, hashes, into, n, got_p, &ns);
}

/* Gets every block, batch at a time, as how says, for the bench's seconds;
 * GB/s. */
static kvio_status_t get_rate(kvio_shared_endpoint_t *endpoint, bench_t *bench, int how,
                              const kvio_hash_t *hashes, void *const *into, size_t batch,
                              double *gbps_p)
{
    uint64_t bytes = 0;
    double start = now_s(), elapsed = 0;
    while (elapsed < bench->seconds) {
        for (size_t i = 0; i < bench->count; i += batch) {
            size_t n = bench->count - i < batch ? bench->count - i : batch, got = 0;
            kvio_status_t status = get_batch(endpoint, how, hashes + i, into + i, n, &got);
            if (status != KVIO_OK || got != n) {
                snprintf(bench->error, sizeof(bench->error), "get: %zu of %zu: %s", got, n,
                         kvio_shared_endpoint_error(endpoint));
                return status != KVIO_OK ? status : KVIO_ERR_NOT_FOUND;
            }
            bytes += n * bench->block_bytes;
        }
        elapsed = now_s() - start;
    }
    *gbps_p = (double)bytes / elapsed / 1e9;
    return KVIO_OK;
}

/* Asks whether the store holds every block, batch at a time, for the
 * bench's seconds: hashes answered per second (*batch_us_p: per batch). */
static kvio_status_t lookup_rate(kvio_shared_endpoint_t *endpoint, bench_t *bench,
                                 const kvio_hash_t *hashes, size_t batch, double *per_s_p,
                                 double *batch_us_p)
{
    uint64_t asked = 0, batches = 0;
    double start = now_s(), elapsed = 0;
    while (elapsed < bench->seconds) {
        for (size_t i = 0; i < bench->count; i += batch, batches++) {
            size_t n = bench->count - i < batch ? bench->count - i : batch;
            if (kvio_shared_endpoint_lookup(endpoint, hashes + i, n, NULL) != n) {
                snprintf(bench->error, sizeof(bench->error), "lookup: %s",
                         kvio_shared_endpoint_error(endpoint));
                return KVIO_ERR_NOT_FOUND;
            }
            asked += n;
        }
        elapsed = now_s() - start;
    }
    *per_s_p = (double)asked / elapsed;
    *batch_us_p = elapsed / (double)batches * 1e6;
    return KVIO_OK;
}

/* The next count hashes from *id on that rank 1 holds: every access
 * crosses to the other rank. */
static void rank1_hashes(uint64_t *id, kvio_hash_t *hashes, size_t count)
{
    for (size_t n = 0; n < count; (*id)++) {
        kvio_hash_t hash = kvio_hash_trace_block(NULL, *id, 0);
        if (kvio_shared_store_holder(hash, 2) == 1)
            hashes[n++] = hash;
    }
}

/* Puts blocks new to the store (hashes from *id on), batch at a time, for
 * the bench's seconds; GB/s. */
static kvio_status_t put_rate(kvio_shared_endpoint_t *endpoint, bench_t *bench, uint64_t *id,
                              const void *const *data, double *gbps_p)
{
    kvio_hash_t hashes[1024];
    size_t batch = bench->batch < 1024 ? bench->batch : 1024;
    uint64_t bytes = 0;
    double start = now_s(), elapsed = 0;
    while (elapsed < bench->seconds) {
        rank1_hashes(id, hashes, batch);
        int64_t ns = 0;
        if (kvio_shared_endpoint_put(endpoint, hashes, data, batch, &ns) != KVIO_OK) {
            snprintf(bench->error, sizeof(bench->error), "put: %s",
                     kvio_shared_endpoint_error(endpoint));
            return KVIO_ERR_IO;
        }
        bytes += batch * bench->block_bytes;
        elapsed = now_s() - start;
    }
    *gbps_p = (double)bytes / elapsed / 1e9;
    return KVIO_OK;
}

/* Rank 0's part: the puts, then the timed phases. */
static kvio_status_t drive(kvio_shared_endpoint_t *endpoint, bench_t *bench)
{
    size_t blocks = bench->count > bench->batch ? bench->count : bench->batch;
    kvio_hash_t *hashes = calloc(bench->count, sizeof(*hashes));
    unsigned char *pool = malloc(blocks * bench->block_bytes);
    const void **data = calloc(blocks, sizeof(*data));
    void **into = calloc(bench->count, sizeof(*into));
    kvio_status_t status = hashes && pool && data && into ? KVIO_OK : KVIO_ERR_NOMEM;
    for (uint64_t n = 0; status == KVIO_OK && n < blocks; n++) {
        data[n] = pool + n * bench->block_bytes;
        if (n < bench->count)
            into[n] = pool + n * bench->block_bytes;
        for (uint64_t b = 0; b < bench->block_bytes; b += 8) {
            uint64_t word = (n + 1) * 0x9e3779b97f4a7c15ull ^ b;
            memcpy(pool + n * bench->block_bytes + b, &word, 8);
        }
    }
    uint64_t id = 0;
    if (status == KVIO_OK)
        status = put_rate(endpoint, bench, &id, data, &bench->put_gbps);
    rank1_hashes(&id, hashes, bench->count);
    for (size_t i = 0; status == KVIO_OK && i < bench->count; i += bench->batch) {
        size_t n = bench->count - i < bench->batch ? bench->count - i : bench->batch;
        int64_t ns = 0;
        status = kvio_shared_endpoint_put(endpoint, hashes + i, data + i, n, &ns);
        if (status != KVIO_OK)
            snprintf(bench->error, sizeof(bench->error), "put: %s",
                     kvio_shared_endpoint_error(endpoint));
    }
    if (status == KVIO_OK)
        status = get_rate(endpoint, bench, GET, hashes, into, bench->batch, &bench->get_gbps);
    if (status == KVIO_OK)
        status = get_rate(endpoint, bench, GET, hashes, into, 1, &bench->get1_gbps);
    if (status == KVIO_OK)
        status = get_rate(endpoint, bench, LOAD_THREE_TRIPS, hashes, into, bench->batch,
                          &bench->load3_gbps);
    if (status == KVIO_OK)
        status = get_rate(endpoint, bench, LOAD_ONE_TRIP, hashes, into, bench->batch,
                          &bench->load1_gbps);
    double one_us = 0;
    if (status == KVIO_OK)
        status = lookup_rate(endpoint, bench, hashes, bench->batch, &bench->lookup_per_s,
                             &bench->lookup_batch_us);
    if (status == KVIO_OK)
        status = lookup_rate(endpoint, bench, hashes, 1, &bench->lookup1_per_s, &one_us);
    free(hashes);
    free(pool);
    free(data);
    free(into);
    return status;
}

static kvio_status_t body(kvio_rte_t *rte, void *arg)
{
    bench_t *bench = arg;
    kvio_shared_store_config_t config = {
        .num_ranks = 2, .block_bytes = bench->block_bytes,
        .shard_bytes = (bench->count + 1) * bench->block_bytes};
    kvio_shared_endpoint_t *endpoint = NULL;
    char error[512] = "";
    kvio_status_t status = kvio_shared_endpoint_create(rte, 0, &config, &endpoint, error,
                                                       sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "shared_store_rate: rank %d: %s\n", kvio_rte_index(rte), error);
        return status;
    }
    if (kvio_rte_index(rte) == 0)
        status = drive(endpoint, bench);
    kvio_status_t stopped = kvio_shared_endpoint_stop(endpoint);
    kvio_shared_endpoint_destroy(endpoint);
    return status != KVIO_OK ? status : stopped;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: shared_store_rate BLOCK_BYTES COUNT BATCH SECONDS\n");
        return 2;
    }
    bench_t bench = {.block_bytes = strtoull(argv[1], NULL, 10),
                     .count = strtoull(argv[2], NULL, 10),
                     .batch = strtoull(argv[3], NULL, 10), .seconds = atof(argv[4])};
    if (bench.block_bytes == 0 || bench.block_bytes % 8 != 0 || bench.count == 0 ||
        bench.batch == 0 || !(bench.seconds > 0)) {
        fprintf(stderr, "shared_store_rate: BLOCK_BYTES a multiple of 8, COUNT, BATCH and "
                        "SECONDS above 0\n");
        return 2;
    }
    if (bench.count > (1ull << 34) / bench.block_bytes) {
        fprintf(stderr, "shared_store_rate: %zu blocks of %llu bytes is over 16 GiB\n",
                bench.count, (unsigned long long)bench.block_bytes);
        return 2;
    }
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2, .timeout_ns = 60000000000ll};
    kvio_rte_world_t *world = NULL;
    char error[512] = "";
    kvio_status_t status = kvio_rte_world_create(&params, &world, error, sizeof(error));
    if (status == KVIO_OK) {
        status = kvio_rte_world_run(world, body, &bench, error, sizeof(error));
        kvio_rte_world_destroy(world, status != KVIO_OK);
    }
    if (status != KVIO_OK) {
        fprintf(stderr, "shared_store_rate: %s%s%s\n", error, error[0] && bench.error[0] ? ": " : "",
                bench.error);
        return 1;
    }
    printf("put_gbps %.3f get_gbps %.3f get1_gbps %.3f load3_gbps %.3f load1_gbps %.3f "
           "lookup_per_s %.0f lookup1_per_s %.0f lookup_batch_us %.1f\n",
           bench.put_gbps, bench.get_gbps, bench.get1_gbps, bench.load3_gbps, bench.load1_gbps,
           bench.lookup_per_s, bench.lookup1_per_s, bench.lookup_batch_us);
    return 0;
}
