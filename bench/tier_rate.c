/* Drives one KV tier (emulate: real bytes) as the engine does, for
 * bench/storage.sh: COUNT blocks of BLOCK_BYTES put, then got back in the
 * same order (after a pass that is not timed, which writes every slot once),
 * BATCH at a time through kvio_tier_put_batch /
 * kvio_tier_get_batch (the framework's index, the backend's I/O, the
 * checksums). Block i comes from and goes back to its own place in a pool
 * of COUNT blocks, as an engine's KV pool is (memory, not one buffer the
 * cache keeps). Prints what the backend uses, then `write_gbps W read_gbps R
 * put_p50_us P get_p50_us G put_p99_us P get_p99_us G read_qd Q` (GB =
 * 1e9; the phases' bytes over their wall time; latencies and the queue
 * depth achieved from the tier's own counters).
 * usage: tier_rate TIER_YAML BLOCK_BYTES COUNT [BATCH]
 *   TIER_YAML: one serve.kvcache.tiers entry, e.g.
 *   '{kind: file, size: 2GiB, file: {path: /tmp/t, o_direct: true}}' */
#include "kvio/config.h"
#include "kvio/hash.h"
#include "kvio/stats.h"
#include "kvio/tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static kvio_hash_t block_hash(uint64_t id)
{
    return (kvio_hash_t){.low = id * 0x9e3779b97f4a7c15ull + 1, .high = id};
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: tier_rate TIER_YAML BLOCK_BYTES COUNT [BATCH]\n");
        return 2;
    }
    uint64_t block_bytes = strtoull(argv[2], NULL, 10);
    uint64_t count = strtoull(argv[3], NULL, 10);
    uint64_t batch = argc == 5 ? strtoull(argv[4], NULL, 10) : 1;
    if (batch == 0 || batch > count)
        batch = count;
    char error[1024] = "";
    kvio_config_doc_t *doc = NULL;
    kvio_tier_config_t config;
    memset(&config, 0, sizeof(config));
    if (block_bytes == 0 || count == 0 ||
        kvio_config_doc_parse(argv[1], strlen(argv[1]), "tier", &doc, error, sizeof(error)) !=
            KVIO_OK ||
        kvio_config_bind(kvio_tier_options, doc, &config, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "tier_rate: %s\n", error[0] ? error : "bad block size or count");
        return 2;
    }
    kvio_config_doc_destroy(doc);
    kvio_tier_t *tier = NULL;
    if (kvio_tier_create(&config, block_bytes, true, &tier, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "tier_rate: %s\n", error);
        return 1;
    }
    if (kvio_tier_capacity(tier) < count) {
        fprintf(stderr, "tier_rate: the tier holds %u blocks, fewer than %llu\n",
                kvio_tier_capacity(tier), (unsigned long long)count);
        return 2;
    }
    uint64_t stride = (block_bytes + 4095) / 4096 * 4096;
    unsigned char *data = aligned_alloc(4096, stride * count);
    kvio_hash_t *hashes = malloc(batch * sizeof(*hashes));
    void **buffers = malloc(batch * sizeof(*buffers));
    if (data == NULL || hashes == NULL || buffers == NULL)
        return 1;
    for (uint64_t b = 0; b < count; b++)
        for (uint64_t i = 0; i < block_bytes; i++)
            data[b * stride + i] = (unsigned char)(i * 131 + 7);
    printf("%s\n", kvio_tier_info(tier));
    int64_t cost;
    /* A pass that is not timed first: every slot of a slab written once, as
     * in a tier that has run a while (fio's file, after its first trial). */
    for (uint64_t first = 0; first < count; first += batch) {
        uint64_t n = count - first < batch ? count - first : batch;
        for (uint64_t b = 0; b < n; b++) {
            hashes[b] = block_hash(count + first + b);
            buffers[b] = data + (first + b) * stride;
        }
        if (kvio_tier_put_batch(tier, hashes, (const void *const *)buffers, n, &cost) !=
            KVIO_OK) {
            fprintf(stderr, "tier_rate: warm-up put: %s\n", kvio_tier_error(tier));
            return 1;
        }
    }
    double start = now_s();
    for (uint64_t first = 0; first < count; first += batch) {
        uint64_t n = count - first < batch ? count - first : batch;
        for (uint64_t b = 0; b < n; b++) {
            hashes[b] = block_hash(first + b);
            buffers[b] = data + (first + b) * stride;
            ((unsigned char *)buffers[b])[0] = (unsigned char)(first + b); /* its own bytes */
        }
        if (kvio_tier_put_batch(tier, hashes, (const void *const *)buffers, n, &cost) !=
            KVIO_OK) {
            fprintf(stderr, "tier_rate: put %llu: %s\n", (unsigned long long)first,
                    kvio_tier_error(tier));
            return 1;
        }
    }
    double written = now_s() - start;
    start = now_s();
    for (uint64_t first = 0; first < count; first += batch) {
        uint64_t n = count - first < batch ? count - first : batch;
        for (uint64_t b = 0; b < n; b++) {
            hashes[b] = block_hash(first + b);
            buffers[b] = data + (first + b) * stride;
        }
        size_t got = 0;
        if (kvio_tier_get_batch(tier, hashes, buffers, n, &got, &cost) != KVIO_OK) {
            fprintf(stderr, "tier_rate: get %llu: %s\n", (unsigned long long)(first + got),
                    kvio_tier_error(tier));
            return 1;
        }
    }
    double read = now_s() - start;
    const kvio_tier_stats_t *stats = kvio_tier_stats(tier);
    double bytes = (double)block_bytes * (double)count;
    printf("write_gbps %.3f read_gbps %.3f put_p50_us %.1f get_p50_us %.1f put_p99_us %.1f "
           "get_p99_us %.1f read_qd %.2f\n",
           bytes / written / 1e9, bytes / read / 1e9,
           kvio_hist_quantile(stats->put_latency, 0.5) / 1e3,
           kvio_hist_quantile(stats->get_latency, 0.5) / 1e3,
           kvio_hist_quantile(stats->put_latency, 0.99) / 1e3,
           kvio_hist_quantile(stats->get_latency, 0.99) / 1e3,
           stats->read_ns > 0 ? (double)stats->get_latency_sum_ns / (double)stats->read_ns : 0);
    free(hashes);
    free(buffers);
    kvio_tier_destroy(tier);
    kvio_config_free(kvio_tier_options, &config);
    free(data);
    return 0;
}
