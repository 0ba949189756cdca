/* Tests for the shared KV store: placement by hash, LRU per shard, the
 * simulate model's per-link costs and counts (a prefix one rank computed is
 * a hit on another, served by the holder), and the emulate endpoint: three
 * ranks (threads) moving real blocks over UCX, every block checked, one
 * rank's hits on another's prefix counted per holder, a batch's put, get
 * and lookup one request per holder, the block store's load of a batch one
 * request to the store; and a whole emulate run whose three serve ranks
 * share the store as a tier. */
#include "kvio/shared_store.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/config.h"
#include "kvio/hash.h"
#include "kvio/rte.h"
#include "kvio/run.h"
#include "kvio/tier.h"
#include "serve/serve_int.h"
#include "tests/helpers.h"

#define BLOCK 4096

/* The i-th block of a prefix named content (a chain, as the engine's). */
static void prefix_hashes(uint64_t content, kvio_hash_t *hashes, size_t count)
{
    for (size_t i = 0; i < count; i++)
        hashes[i] = kvio_hash_trace_block(i > 0 ? &hashes[i - 1] : NULL, content, (uint32_t)i);
}

static kvio_shared_store_config_t sim_config(uint32_t ranks, uint32_t shard_blocks)
{
    return (kvio_shared_store_config_t){
        .num_ranks = ranks, .block_bytes = BLOCK, .shard_bytes = (uint64_t)shard_blocks * BLOCK,
        .local_bandwidth = 4096e6, .local_latency_ns = 1000,   /* a block: 1 us */
        .remote_bandwidth = 409.6e6, .remote_latency_ns = 5000}; /* a block: 10 us */
}

/* A simulated store of ranks shards of shard_blocks blocks each. */
static kvio_shared_store_t *sim_store(uint32_t ranks, uint32_t shard_blocks)
{
    kvio_shared_store_config_t config = sim_config(ranks, shard_blocks);
    kvio_shared_store_t *store = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_shared_store_create(&config, &store, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    return store;
}

/* ---------- simulate ---------- */

Test(shared_store, placement_is_the_hash_modulo_the_ranks, .timeout = 10)
{
    kvio_hash_t hashes[64];
    prefix_hashes(7, hashes, 64);
    uint32_t seen[3] = {0};
    for (size_t i = 0; i < 64; i++) {
        uint32_t holder = kvio_shared_store_holder(hashes[i], 3);
        cr_assert_eq(holder, hashes[i].high % 3);
        seen[holder]++;
    }
    for (int r = 0; r < 3; r++)
        cr_expect_gt(seen[r], 5, "rank %d holds %u of 64 blocks", r, seen[r]);
}

Test(shared_store, a_prefix_rank0_computed_is_a_hit_on_rank1_from_its_holder, .timeout = 10)
{
    kvio_shared_store_t *store = sim_store(3, 64);
    kvio_hash_t prefix[12];
    prefix_hashes(42, prefix, 12);
    int64_t cost_ns = 0;
    cr_assert_eq(kvio_shared_store_get(store, 1, prefix, 12, &cost_ns), 0, "empty at first");
    kvio_shared_store_put(store, 0, prefix, 12, &cost_ns);
    uint32_t per_holder[3] = {0};
    for (size_t i = 0; i < 12; i++)
        per_holder[kvio_shared_store_holder(prefix[i], 3)]++;
    /* Rank 0's puts: its own shard over the local link, the others' over remote ones. */
    for (uint32_t h = 0; h < 3; h++) {
        const kvio_shared_link_stats_t *link = kvio_shared_store_link(store, 0, h);
        cr_expect_eq(link->puts, per_holder[h]);
        cr_expect_eq(link->bytes_written, (uint64_t)per_holder[h] * BLOCK);
        cr_expect_eq(kvio_shared_store_shard(store, h).held, per_holder[h]);
    }
    cr_assert_eq(kvio_shared_store_get(store, 1, prefix, 12, &cost_ns), 12);
    int64_t slowest_ns = 0;
    for (uint32_t h = 0; h < 3; h++) {
        const kvio_shared_link_stats_t *link = kvio_shared_store_link(store, 1, h);
        cr_expect_eq(link->hits, per_holder[h], "rank 1's hits served by rank %u", h);
        cr_expect_eq(link->bytes_read, (uint64_t)per_holder[h] * BLOCK);
        int64_t link_ns = per_holder[h] == 0 ? 0
                          : h == 1           ? 1000 + 1000 * (int64_t)per_holder[h]
                                             : 5000 + 10000 * (int64_t)per_holder[h];
        cr_expect_eq(link->get_ns, link_ns, "link 1->%u", h);
        slowest_ns = link_ns > slowest_ns ? link_ns : slowest_ns;
    }
    cr_expect_eq(cost_ns, slowest_ns, "the links move side by side: the batch is the slowest");
    /* A second put of the same prefix is refreshed, not moved again. */
    kvio_shared_store_put(store, 2, prefix, 12, &cost_ns);
    cr_expect_eq(cost_ns, 0);
    uint64_t duplicates = 0;
    for (uint32_t h = 0; h < 3; h++)
        duplicates += kvio_shared_store_link(store, 2, h)->duplicates;
    cr_expect_eq(duplicates, 12);
    kvio_shared_store_destroy(store);
}

Test(shared_store, a_get_stops_at_the_first_block_the_store_lacks, .timeout = 10)
{
    kvio_shared_store_t *store = sim_store(2, 64);
    kvio_hash_t prefix[8];
    prefix_hashes(5, prefix, 8);
    int64_t cost_ns = 0;
    kvio_shared_store_put(store, 0, prefix, 5, &cost_ns);
    cr_expect_eq(kvio_shared_store_get(store, 1, prefix, 8, &cost_ns), 5);
    uint64_t misses = 0, gets = 0;
    for (uint32_t h = 0; h < 2; h++) {
        misses += kvio_shared_store_link(store, 1, h)->misses;
        gets += kvio_shared_store_link(store, 1, h)->gets;
    }
    cr_expect_eq(misses, 1, "one miss ends the prefix");
    cr_expect_eq(gets, 6);
    kvio_shared_store_destroy(store);
}

Test(shared_store, a_full_shard_evicts_its_least_recently_used_block, .timeout = 10)
{
    kvio_shared_store_t *store = sim_store(1, 3);
    kvio_hash_t blocks[4];
    prefix_hashes(9, blocks, 4);
    int64_t cost_ns = 0;
    kvio_shared_store_put(store, 0, blocks, 3, &cost_ns);
    cr_assert_eq(kvio_shared_store_get(store, 0, &blocks[0], 1, &cost_ns), 1); /* a is fresh */
    kvio_shared_store_put(store, 0, &blocks[3], 1, &cost_ns);
    cr_expect(kvio_shared_store_contains(store, blocks[0]));
    cr_expect(!kvio_shared_store_contains(store, blocks[1]), "b was the least recently used");
    cr_expect(kvio_shared_store_contains(store, blocks[2]));
    cr_expect(kvio_shared_store_contains(store, blocks[3]));
    kvio_shared_shard_stats_t shard = kvio_shared_store_shard(store, 0);
    cr_expect_eq(shard.evictions, 1);
    cr_expect_eq(shard.held, 3);
    cr_expect_eq(shard.stored, 4);
    kvio_shared_store_destroy(store);
}

Test(shared_store, a_shard_that_holds_no_block_is_refused_with_its_numbers, .timeout = 10)
{
    kvio_shared_store_config_t config = sim_config(2, 1);
    config.shard_bytes = 100;
    kvio_shared_store_t *store = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_shared_store_create(&config, &store, error, sizeof(error)),
                 KVIO_ERR_CONFIG);
    cr_expect(test_contains(error, "100 bytes per rank") && test_contains(error, "4096"), "%s",
              error);
    config = sim_config(2, 4);
    config.remote_bandwidth = 0;
    cr_assert_eq(kvio_shared_store_create(&config, &store, error, sizeof(error)),
                 KVIO_ERR_CONFIG);
    cr_expect(test_contains(error, "remote 0 bytes/s"), "%s", error);
}

/* ---------- emulate: three ranks over UCX ---------- */

#define RANKS 3
#define PREFIX 24

typedef struct emulate_results {
    uint32_t shard_blocks;
    kvio_status_t status[RANKS];
    size_t got[RANKS];             /* blocks of the next rank's prefix loaded */
    int matched[RANKS];            /* of them, byte for byte as written */
    kvio_shared_link_stats_t links[RANKS][RANKS];
    uint64_t get_requests[RANKS];  /* messages the get of PREFIX blocks sent */
    size_t lookup_leading[RANKS];  /* a lookup of 8 of the prefix, one unknown, 8 more */
    bool lookup_held[RANKS][17];
    kvio_shared_shard_stats_t shards[RANKS];
    char error[RANKS][512];
} emulate_results_t;

/* Block i of rank r's prefix: bytes that say whose and which. */
static void fill_block(unsigned char *block, uint32_t rank, size_t i)
{
    for (size_t b = 0; b < BLOCK; b++)
        block[b] = (unsigned char)(rank * 131 + i * 7 + b * 13 + (b >> 8));
}

static kvio_status_t emulate_body(kvio_rte_t *rte, void *arg)
{
    emulate_results_t *results = arg;
    uint32_t rank = (uint32_t)kvio_rte_index(rte);
    kvio_shared_store_config_t config = {.num_ranks = RANKS, .block_bytes = BLOCK,
                                         .shard_bytes = (uint64_t)results->shard_blocks * BLOCK};
    kvio_shared_endpoint_t *endpoint = NULL;
    kvio_status_t status = kvio_shared_endpoint_create(rte, 0, &config, &endpoint,
                                                       results->error[rank], 512);
    if (status != KVIO_OK)
        return results->status[rank] = status;
    static unsigned char blocks[RANKS][PREFIX][BLOCK];
    static unsigned char loaded[RANKS][PREFIX][BLOCK];
    kvio_hash_t own[PREFIX], next[PREFIX];
    const void *data[PREFIX];
    void *into[PREFIX];
    prefix_hashes(1000 + rank, own, PREFIX);
    prefix_hashes(1000 + (rank + 1) % RANKS, next, PREFIX);
    for (size_t i = 0; i < PREFIX; i++) {
        fill_block(blocks[rank][i], rank, i);
        data[i] = blocks[rank][i];
        into[i] = loaded[rank][i];
    }
    int64_t elapsed_ns = 0;
    status = kvio_shared_endpoint_put(endpoint, own, data, PREFIX, &elapsed_ns);
    /* Every prefix is in before any rank reads another's. */
    kvio_status_t barrier = kvio_rte_barrier(rte);
    if (status == KVIO_OK)
        status = barrier;
    uint64_t requests_before = 0;
    for (uint32_t h = 0; h < RANKS; h++)
        requests_before += kvio_shared_endpoint_link(endpoint, h)->requests;
    if (status == KVIO_OK)
        status = kvio_shared_endpoint_get(endpoint, next, into, PREFIX, &results->got[rank],
                                          &elapsed_ns);
    for (uint32_t h = 0; h < RANKS; h++)
        results->get_requests[rank] += kvio_shared_endpoint_link(endpoint, h)->requests;
    results->get_requests[rank] -= requests_before;
    if (status == KVIO_ERR_NOT_FOUND)
        status = KVIO_OK; /* a miss ends the prefix: counted, not a failure */
    kvio_hash_t asked[17];
    memcpy(asked, next, 8 * sizeof(*asked));
    prefix_hashes(999999, &asked[8], 1); /* a block no rank put */
    memcpy(&asked[9], &next[8], 8 * sizeof(*asked));
    if (status == KVIO_OK)
        results->lookup_leading[rank] = kvio_shared_endpoint_lookup(endpoint, asked, 17,
                                                                    results->lookup_held[rank]);
    if (status != KVIO_OK)
        snprintf(results->error[rank], 512, "%s", kvio_shared_endpoint_error(endpoint));
    for (size_t i = 0; i < results->got[rank]; i++) {
        unsigned char expected[BLOCK];
        fill_block(expected, (rank + 1) % RANKS, i);
        results->matched[rank] += memcmp(expected, loaded[rank][i], BLOCK) == 0;
    }
    kvio_status_t stopped = kvio_shared_endpoint_stop(endpoint);
    if (status == KVIO_OK)
        status = stopped;
    for (uint32_t h = 0; h < RANKS; h++)
        results->links[rank][h] = *kvio_shared_endpoint_link(endpoint, h);
    results->shards[rank] = kvio_shared_endpoint_shard(endpoint);
    kvio_shared_endpoint_destroy(endpoint);
    return results->status[rank] = status;
}

static void run_ranks(emulate_results_t *results)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = RANKS,
                                .timeout_ns = (int64_t)(test_seconds(10) * 1e9)};
    kvio_rte_world_t *world = NULL;
    char error[512] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    kvio_status_t status = kvio_rte_world_run(world, emulate_body, results, error,
                                              sizeof(error));
    kvio_rte_world_destroy(world, status != KVIO_OK);
    for (int r = 0; r < RANKS; r++)
        cr_assert_eq(results->status[r], KVIO_OK, "rank %d: %s", r, results->error[r]);
    cr_assert_eq(status, KVIO_OK, "%s", error);
}

Test(shared_store, three_ranks_share_prefixes_over_ucx_each_block_checked, .timeout = 120)
{
    emulate_results_t *results = calloc(1, sizeof(*results));
    results->shard_blocks = 64; /* room for every block */
    run_ranks(results);
    uint64_t stored = 0;
    for (int r = 0; r < RANKS; r++) {
        cr_expect_eq(results->got[r], PREFIX, "rank %d loaded %zu of rank %d's prefix", r,
                     results->got[r], (r + 1) % RANKS);
        cr_expect_eq(results->matched[r], (int)results->got[r], "rank %d: blocks came back "
                     "changed", r);
        uint64_t hits = 0, from_others = 0, bytes_in = 0, puts = 0;
        for (int h = 0; h < RANKS; h++) {
            const kvio_shared_link_stats_t *link = &results->links[r][h];
            hits += link->hits;
            puts += link->puts;
            from_others += h != r ? link->hits : 0;
            bytes_in += h != r ? link->bytes_read : 0;
            cr_expect_eq(link->checksum_failures, 0);
            cr_expect_eq(link->errors, 0);
        }
        cr_expect_eq(hits, PREFIX);
        cr_expect_eq(puts, PREFIX, "rank %d's prefix was new to the store", r);
        /* One request per holder for the whole batch, not one per block. */
        cr_expect_leq(results->get_requests[r], RANKS, "rank %d's get of %d blocks sent %llu "
                      "requests", r, PREFIX, (unsigned long long)results->get_requests[r]);
        cr_expect_eq(results->lookup_leading[r], 8, "rank %d", r);
        for (int i = 0; i < 17; i++)
            cr_expect_eq(results->lookup_held[r][i], i != 8, "rank %d: block %d of the lookup",
                         r, i);
        cr_expect_gt(from_others, 0, "rank %d: no hit served by another rank", r);
        cr_expect_eq(bytes_in, from_others * BLOCK, "bytes over the links from other ranks");
        stored += results->shards[r].stored;
    }
    cr_expect_eq(stored, RANKS * PREFIX, "each block held by one rank");
    free(results);
}

Test(shared_store, an_evicted_block_is_a_miss_for_every_rank, .timeout = 120)
{
    emulate_results_t *results = calloc(1, sizeof(*results));
    results->shard_blocks = 4; /* each shard keeps 4 of the ~24 blocks placed on it */
    run_ranks(results);
    uint64_t held = 0, evictions = 0;
    for (int r = 0; r < RANKS; r++) {
        held += results->shards[r].held;
        evictions += results->shards[r].evictions;
        cr_expect_eq(results->shards[r].held, 4);
        cr_expect_lt(results->got[r], PREFIX, "rank %d loaded a prefix the store let go", r);
        cr_expect_eq(results->matched[r], (int)results->got[r]);
    }
    cr_expect_eq(held + evictions, RANKS * PREFIX);
    free(results);
}

/* ---------- the block store's load from the shared tier ---------- */

#define LOADED 16 /* a load's batch */
#define IN_HOST 6 /* of them, the first few in rank 1's own host tier */

typedef struct load_results {
    kvio_status_t status[2];
    char error[2][1024];
    uint32_t loaded;             /* rank 1: blocks its load brought */
    int matched;                 /* of them, byte for byte as rank 0 wrote them */
    uint64_t requests;           /* rank 0's shard: requests it answered during the load */
    uint64_t host_hits, shared_hits, shared_misses;
} load_results_t;

/* Blocks of one prefix that rank 0's shard holds (the placement picks
 * them), as the load asks for them. */
static void rank0_hashes(kvio_hash_t *hashes, size_t count)
{
    for (uint64_t id = 0, n = 0; n < count; id++) {
        kvio_hash_t hash = kvio_hash_trace_block(n > 0 ? &hashes[n - 1] : NULL, 4242 + id, 0);
        if (kvio_shared_store_holder(hash, 2) == 0)
            hashes[n++] = hash;
    }
}

/* Rank 1's part: a host tier holding the first IN_HOST blocks and its view
 * of the store under a block store; loads the LOADED blocks into its pool. */
static kvio_status_t load_on_rank1(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                                   unsigned char (*blocks)[BLOCK], load_results_t *results,
                                   kvio_rte_t *rte)
{
    char *error = results->error[1];
    kvio_tier_config_t configs[2];
    memset(configs, 0, sizeof(configs));
    kvio_tier_t *tiers[2] = {NULL, NULL};
    const char *texts[2] = {"{kind: host, size: 64KiB}", "{kind: shared, size: 256KiB}"};
    kvio_status_t status = KVIO_OK;
    for (int t = 0; t < 2 && status == KVIO_OK; t++) {
        status = kvio_config_bind_text(kvio_tier_options, texts[t], "t.yaml", &configs[t], error,
                                       1024);
        configs[t].shared_endpoint = endpoint;
        if (status == KVIO_OK)
            status = kvio_tier_create(&configs[t], BLOCK, true, &tiers[t], error, 1024);
    }
    for (int i = 0; i < IN_HOST && status == KVIO_OK; i++) {
        int64_t cost_ns = 0;
        status = kvio_tier_put(tiers[0], hashes[i], blocks[i], &cost_ns);
    }
    static unsigned char pool[LOADED + 1][BLOCK];
    kvio_block_store_params_t params = {.num_blocks = LOADED, .memory = pool,
                                        .block_bytes = BLOCK, .seed = 3, .tiers = tiers,
                                        .num_tiers = 2};
    kvio_block_store_t *store = NULL;
    if (status == KVIO_OK)
        status = kvio_block_store_create(&params, &store, error, 1024);
    uint32_t ids[LOADED];
    for (uint32_t i = 0; i < LOADED; i++)
        ids[i] = i + 1;
    int64_t tier_ns = 0;
    if (status == KVIO_OK)
        status = kvio_block_store_load(store, hashes, ids, 0, LOADED, &results->loaded,
                                       &tier_ns);
    for (uint32_t i = 0; i < results->loaded; i++)
        results->matched += memcmp(pool[ids[i]], blocks[i], BLOCK) == 0;
    kvio_status_t barrier = kvio_rte_barrier(rte); /* rank 0 counts its requests */
    if (status == KVIO_OK)
        status = barrier;
    if (tiers[0] != NULL)
        results->host_hits = kvio_tier_stats(tiers[0])->hits;
    if (tiers[1] != NULL) {
        results->shared_hits = kvio_tier_stats(tiers[1])->hits;
        results->shared_misses = kvio_tier_stats(tiers[1])->misses;
    }
    kvio_block_store_destroy(store);
    for (int t = 0; t < 2; t++)
        kvio_tier_destroy(tiers[t]);
    return status;
}

static kvio_status_t load_body(kvio_rte_t *rte, void *arg)
{
    load_results_t *results = arg;
    int rank = kvio_rte_index(rte);
    kvio_shared_store_config_t config = {.num_ranks = 2, .block_bytes = BLOCK,
                                         .shard_bytes = 64 * BLOCK};
    kvio_shared_endpoint_t *endpoint = NULL;
    kvio_status_t status = kvio_shared_endpoint_create(rte, 0, &config, &endpoint,
                                                       results->error[rank], 1024);
    if (status != KVIO_OK)
        return results->status[rank] = status;
    static unsigned char blocks[LOADED][BLOCK];
    kvio_hash_t hashes[LOADED];
    rank0_hashes(hashes, LOADED);
    const void *data[LOADED];
    for (size_t i = 0; i < LOADED; i++) {
        fill_block(blocks[i], 0, i);
        data[i] = blocks[i];
    }
    int64_t elapsed_ns = 0;
    /* Rank 0 computed the blocks the host tier lacks. */
    if (rank == 0)
        status = kvio_shared_endpoint_put(endpoint, hashes + IN_HOST, data + IN_HOST,
                                          LOADED - IN_HOST, &elapsed_ns);
    uint64_t before = kvio_shared_endpoint_shard(endpoint).requests;
    kvio_status_t barrier = kvio_rte_barrier(rte);
    if (status == KVIO_OK)
        status = barrier;
    if (rank == 1 && status == KVIO_OK)
        status = load_on_rank1(endpoint, hashes, blocks, results, rte);
    else if (status == KVIO_OK)
        status = kvio_rte_barrier(rte); /* until rank 1 has loaded */
    if (rank == 0)
        results->requests = kvio_shared_endpoint_shard(endpoint).requests - before;
    if (status != KVIO_OK && results->error[rank][0] == '\0')
        snprintf(results->error[rank], 1024, "%s", kvio_shared_endpoint_error(endpoint));
    kvio_status_t stopped = kvio_shared_endpoint_stop(endpoint);
    if (status == KVIO_OK)
        status = stopped;
    kvio_shared_endpoint_destroy(endpoint);
    return results->status[rank] = status;
}

/* #57: a load asked each tier whether it holds the first block, then how
 * far its run goes, then got it: three round trips to a shared store per
 * batch. Now each tier is asked for what it holds and its bytes at once. */
Test(shared_store, a_batched_load_asks_the_store_once_and_brings_every_byte, .timeout = 120)
{
    load_results_t *results = calloc(1, sizeof(*results));
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2,
                                .timeout_ns = (int64_t)(test_seconds(10) * 1e9)};
    kvio_rte_world_t *world = NULL;
    char error[512] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    kvio_status_t status = kvio_rte_world_run(world, load_body, results, error, sizeof(error));
    kvio_rte_world_destroy(world, status != KVIO_OK);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(results->status[r], KVIO_OK, "rank %d: %s", r, results->error[r]);
    cr_assert_eq(status, KVIO_OK, "%s", error);
    cr_expect_eq(results->loaded, LOADED, "the load brought %u of %d blocks", results->loaded,
                 LOADED);
    cr_expect_eq(results->matched, (int)results->loaded, "blocks came back changed");
    cr_expect_eq(results->host_hits, IN_HOST);
    cr_expect_eq(results->shared_hits, LOADED - IN_HOST);
    cr_expect_eq(results->shared_misses, 0, "a run's end is no miss");
    cr_expect_eq(results->requests, 1, "the holder answered %llu requests for one batch",
                 (unsigned long long)results->requests);
    free(results);
}

/* ---------- an emulate run: three serve ranks, the store as their tier ---------- */

Test(shared_store, an_emulate_run_shares_prefixes_between_serve_ranks_over_ucx, .timeout = 180)
{
    char *dir = test_tmpdir();
    char text[2048];
    snprintf(text, sizeof(text),
             "name: shared\nseed: 5\nmode: emulate\nduration: 3s\n"
             "model: {preset: llama3.2-1b}\n"
             "ranks: {serve: 3, runtime: local, timeout: %.0fs}\n"
             "serve:\n  router: {policy: round_robin}\n"
             "  engine: {max_num_seqs: 8, max_num_batched_tokens: 2048}\n"
             "  kvcache:\n    block_size: 16\n    blocks: 200\n"
             "    tiers: [{kind: shared, size: 64MiB, write: through}]\n"
             "stream:\n  requests: 24\n  arrival: {process: poisson, rate: 8}\n"
             "  input_tokens: {dist: constant, value: 600}\n"
             "  output_tokens: {dist: constant, value: 2}\n"
             "  prefix: {system_prompts: {count: 2, tokens: 512, zipf: 0}}\n",
             test_seconds(30));
    char *file = test_write_file(dir, "w.yaml", text);
    kvio_workload_t workload;
    char error[1024] = "";
    cr_assert_eq(kvio_workload_load(file, NULL, 0, &workload, error, sizeof(error)), KVIO_OK,
                 "%s", error);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true, .source = file};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    kvio_workload_free(&workload);
    json_t *summary = test_summary(dir, "out");
    json_t *tiers = json_object_get(json_object_get(summary, "metrics"), "tiers");
    cr_assert_eq(json_array_size(tiers), 3, "one shared tier per serve rank");
    double peer_hits = 0, hits = 0, own_hits = 0, peer_bytes = 0;
    for (size_t r = 0; r < 3; r++) {
        json_t *tier = json_array_get(tiers, r);
        cr_expect_eq(test_json_number(tier, "checksum_failures"), 0, "rank %zu", r);
        cr_expect_eq(test_json_number(tier, "errors"), 0, "rank %zu", r);
        cr_expect_eq(json_array_size(json_object_get(tier, "links")), 3);
        hits += test_json_number(tier, "hits");
        own_hits += test_json_number(tier, "shared.own_shard_hits");
        peer_hits += test_json_number(tier, "shared.peer_shard_hits");
        peer_bytes += test_json_number(tier, "shared.peer_bytes_read");
    }
    double block_bytes = test_json_number(json_array_get(tiers, 0), "block_bytes");
    cr_expect_gt(peer_hits, 0, "no serve rank loaded a block another rank's shard held");
    cr_expect_eq(own_hits + peer_hits, hits);
    cr_expect_eq(peer_bytes, peer_hits * block_bytes, "the bytes over the links to other ranks");
    json_decref(summary);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* ---------- mpirun: serve ranks as processes (a trainer beside them, as an
 * mpi run has), serve rank 1 loads the prefix serve rank 0 computed ---------- */

Test(shared_store, under_mpirun_rank1_loads_the_prefix_rank0_computed_over_ucx, .timeout = 120)
{
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    /* Round robin: the first request to rank 0, the same prompt 1.5 s later
     * to rank 1, which computed nothing before it. */
    char *trace = test_write_file(
        dir, "t.jsonl",
        "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 2, \"hash_ids\": [7, 8]}\n"
        "{\"timestamp\": 1500, \"input_length\": 1024, \"output_length\": 2, \"hash_ids\": [7, 8]}"
        "\n");
    char text[2048];
    snprintf(text, sizeof(text),
             "name: shared-mpi\nseed: 5\nmode: emulate\nduration: 3s\n"
             "model: {preset: llama3.2-1b}\n"
             "ranks: {train: 1, serve: 2, runtime: mpi, timeout: %.0fs}\n"
             "serve:\n  router: {policy: round_robin}\n"
             "  engine: {max_num_seqs: 4, max_num_batched_tokens: 2048}\n"
             "  kvcache:\n    block_size: 16\n    blocks: 200\n"
             "    tiers: [{kind: shared, size: 64MiB, write: through}]\n"
             "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 4MiB\n"
             "  transport: {kind: ucx}\n"
             "stream:\n  trace: {path: %s, format: mooncake}\n"
             "update: {serving: engine}\n",
             test_seconds(30), trace);
    char *file = test_write_file(dir, "w.yaml", text);
    json_t *summary = test_mpirun_kvio(dir, 3, file, test_seconds(90));
    json_t *tiers = json_object_get(json_object_get(summary, "metrics"), "tiers");
    cr_assert_eq(json_array_size(tiers), 2, "one shared tier per serve process");
    json_t *computed = json_array_get(tiers, 0), *loaded = json_array_get(tiers, 1);
    double put = 0, requests = 0;
    json_t *link;
    size_t holder;
    json_array_foreach(json_object_get(computed, "links"), holder, link)
        put += test_json_number(link, "puts");
    json_array_foreach(json_object_get(loaded, "links"), holder, link)
        requests += test_json_number(link, "requests");
    double hits = test_json_number(loaded, "hits");
    double block_bytes = test_json_number(loaded, "block_bytes");
    /* 1024 tokens: 64 blocks of 16, the last one computed again (a hit
     * never covers the prompt's last token). */
    cr_expect_eq(hits, 63, "rank 1 loaded %.0f blocks of the prompt rank 0 computed", hits);
    cr_expect_geq(put, 64, "rank 0 put %.0f blocks", put);
    /* Lookups and loads in batches, a request per holder per batch of up
     * to 16 blocks (they were three per block: a lookup for the count, a
     * lookup and a get for the load); the write-through check of a block
     * the pool caches asks nothing of the store it was just loaded from
     * (#57: it asked one per block, 86 requests for the 63 blocks; 23 before a
     * load asked each batch once). */
    cr_expect_lt(requests, 0.5 * hits, "rank 1 sent %.0f requests for %.0f blocks", requests,
                 hits);
    cr_expect_gt(test_json_number(loaded, "shared.peer_shard_hits"), 0,
                 "no block came from rank 0's shard (another process, over UCX)");
    cr_expect_eq(test_json_number(loaded, "shared.peer_bytes_read"),
                 test_json_number(loaded, "shared.peer_shard_hits") * block_bytes);
    for (size_t r = 0; r < 2; r++) {
        cr_expect_eq(test_json_number(json_array_get(tiers, r), "checksum_failures"), 0);
        cr_expect_eq(test_json_number(json_array_get(tiers, r), "errors"), 0);
    }
    json_decref(summary);
    free(trace);
    free(file);
    test_rmtree(dir);
    free(dir);
}
