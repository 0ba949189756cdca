/* Micro-benchmark of the block pool: ns per allocate+free of a block (every
 * block a miss that evicts a cached block, prefix caching on) and ns per
 * block of a prefix lookup that hits (index of 100k cached blocks).
 * Prints `figure pool_alloc_free_ns N ns` and `figure prefix_lookup_ns N ns`. */
#include "kvio/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BLOCK_SIZE 16
#define BLOCKS_PER_REQUEST 64
#define BATCH 1024

static double now_ns(void)
{
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec * 1e9 + (double)time.tv_nsec;
}

/* Requests with hashes never seen before: cheap synthetic hashes, so the
 * figure is the pool's cost and not XXH3's. */
static int make_batch(kvio_kvcache_t *cache, uint64_t *next_hash, kvio_kvreq_t **reqs)
{
    kvio_hash_t hashes[BLOCKS_PER_REQUEST];
    for (size_t r = 0; r < BATCH; r++) {
        for (size_t i = 0; i < BLOCKS_PER_REQUEST; i++)
            hashes[i] = (kvio_hash_t){.low = (*next_hash)++ * 0x9e3779b97f4a7c15ULL, .high = 1};
        if (kvio_kvreq_create_hashes(cache, hashes, BLOCKS_PER_REQUEST,
                                     BLOCKS_PER_REQUEST * BLOCK_SIZE, &reqs[r]) != KVIO_OK)
            return -1;
    }
    return 0;
}

static double bench_alloc_free(void)
{
    kvio_kvcache_config_t config = {.num_blocks = 4097, .block_size = BLOCK_SIZE,
                                    .enable_prefix_caching = true};
    kvio_kvcache_t *cache = NULL;
    if (kvio_kvcache_create(&config, &cache) != KVIO_OK)
        return -1;
    static kvio_kvreq_t *reqs[BATCH];
    uint64_t next_hash = 1;
    double total_ns = 0;
    size_t blocks = 0;
    for (int round = 0; round < 40; round++) {
        if (make_batch(cache, &next_hash, reqs) != 0)
            return -1;
        double start = now_ns();
        for (size_t r = 0; r < BATCH; r++) {
            if (kvio_kvcache_allocate(cache, reqs[r], BLOCKS_PER_REQUEST * BLOCK_SIZE, NULL) !=
                KVIO_OK)
                return -1;
            kvio_kvcache_free(cache, reqs[r]);
        }
        if (round > 0) { /* the first round warms up */
            total_ns += now_ns() - start;
            blocks += (size_t)BATCH * BLOCKS_PER_REQUEST;
        }
        for (size_t r = 0; r < BATCH; r++)
            kvio_kvreq_destroy(reqs[r]);
    }
    kvio_kvcache_destroy(cache);
    return total_ns / (double)blocks;
}

static double bench_lookup(void)
{
    enum { NUM_REQUESTS = 1562 }; /* 1562 * 64 = 99968 cached blocks */
    kvio_kvcache_config_t config = {.num_blocks = 100001, .block_size = BLOCK_SIZE,
                                    .enable_prefix_caching = true};
    kvio_kvcache_t *cache = NULL;
    if (kvio_kvcache_create(&config, &cache) != KVIO_OK)
        return -1;
    double result = -1;
    kvio_hash_t *all_hashes = malloc(sizeof(kvio_hash_t) * NUM_REQUESTS * BLOCKS_PER_REQUEST);
    if (all_hashes == NULL)
        goto out;
    /* Each request's blocks are cached, then freed (they stay hashed). One
     * token more than the blocks, so the last-token rule allows a hit on
     * all 64. */
    for (size_t r = 0; r < NUM_REQUESTS; r++) {
        kvio_hash_t *hashes = all_hashes + r * BLOCKS_PER_REQUEST;
        kvio_hash_trace_chain(NULL, r, 0, BLOCKS_PER_REQUEST, hashes);
        kvio_kvreq_t *req = NULL;
        bool cached =
            kvio_kvreq_create_hashes(cache, hashes, BLOCKS_PER_REQUEST,
                                     BLOCKS_PER_REQUEST * BLOCK_SIZE + 1, &req) == KVIO_OK &&
            kvio_kvcache_allocate(cache, req, BLOCKS_PER_REQUEST * BLOCK_SIZE, NULL) == KVIO_OK;
        kvio_kvreq_destroy(req);
        if (!cached)
            goto out;
    }
    size_t blocks = 0, checksum = 0;
    uint64_t state = 1;
    double start = now_ns();
    for (int i = 0; i < 200000; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        /* By hashes: a request's own lookup would be kept (the index does
         * not change here), and this measures the search. */
        size_t hit = kvio_kvcache_lookup_hashes(
            cache, all_hashes + (state >> 33) % NUM_REQUESTS * BLOCKS_PER_REQUEST,
            BLOCKS_PER_REQUEST, BLOCKS_PER_REQUEST * BLOCK_SIZE + 1);
        checksum += hit;
        blocks += BLOCKS_PER_REQUEST;
    }
    double elapsed = now_ns() - start;
    if (checksum != blocks * BLOCK_SIZE) {
        fprintf(stderr, "kvcache_micro: lookups missed (%zu of %zu tokens)\n", checksum,
                blocks * BLOCK_SIZE);
        goto out;
    }
    result = elapsed / (double)blocks;
out:
    free(all_hashes);
    kvio_kvcache_destroy(cache);
    return result;
}

int main(void)
{
    double alloc_free = bench_alloc_free();
    double lookup = bench_lookup();
    if (alloc_free < 0 || lookup < 0) {
        fprintf(stderr, "kvcache_micro: benchmark failed\n");
        return 1;
    }
    printf("figure pool_alloc_free_ns %.1f ns\n", alloc_free);
    printf("figure prefix_lookup_ns %.1f ns\n", lookup);
    return 0;
}
