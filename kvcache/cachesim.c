/* cachesim: block ids are interned once into dense indices as requests are
 * added, so each replay works on flat arrays (a residency byte per block and
 * the policy's intrusive structures) with no hashing and no allocation per
 * block. Semantics follow shared/reference/lru_replay.py. */
#include "kvio/cachesim.h"

#include "kvcache/kvcache_int.h"
#include "kvio/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EMPTY_SLOT UINT32_MAX
#define DIRECT_IDS (1u << 24)

typedef struct sim_request {
    size_t first;        /* offset into blocks */
    uint32_t num_blocks;
    uint64_t num_tokens;
} sim_request_t;

struct kvio_cachesim {
    uint32_t block_tokens;
    sim_request_t *requests;
    size_t num_requests, requests_capacity;
    uint32_t *blocks;    /* dense block indices of all requests */
    size_t num_blocks, blocks_capacity;
    /* Interning: ids below DIRECT_IDS (trace hash ids are small dense
     * integers) index a lazily zeroed array holding index + 1; others go
     * through an open-addressing table with linear probing. */
    uint32_t *direct;
    uint64_t *slot_ids;
    uint32_t *slot_indices;
    size_t slot_mask;
    uint32_t num_unique;
    uint32_t num_table_ids;
};

static size_t id_slot(uint64_t id, size_t mask)
{
    id ^= id >> 31;
    id *= 0x9e3779b97f4a7c15ULL;
    id ^= id >> 29;
    return (size_t)id & mask;
}

static kvio_status_t grow_table(kvio_cachesim_t *sim)
{
    size_t old_size = sim->slot_mask + 1, size = old_size * 2;
    uint64_t *ids = malloc(size * sizeof(uint64_t));
    uint32_t *indices = malloc(size * sizeof(uint32_t));
    if (ids == NULL || indices == NULL) {
        free(ids);
        free(indices);
        return KVIO_ERR_NOMEM;
    }
    memset(indices, 0xff, size * sizeof(uint32_t));
    for (size_t i = 0; i < old_size; i++) {
        if (sim->slot_indices[i] == EMPTY_SLOT)
            continue;
        size_t slot = id_slot(sim->slot_ids[i], size - 1);
        while (indices[slot] != EMPTY_SLOT)
            slot = (slot + 1) & (size - 1);
        ids[slot] = sim->slot_ids[i];
        indices[slot] = sim->slot_indices[i];
    }
    free(sim->slot_ids);
    free(sim->slot_indices);
    sim->slot_ids = ids;
    sim->slot_indices = indices;
    sim->slot_mask = size - 1;
    return KVIO_OK;
}

kvio_status_t kvio_cachesim_create(uint32_t block_tokens, kvio_cachesim_t **sim_p)
{
    if (block_tokens == 0)
        return KVIO_ERR_INVALID;
    kvio_cachesim_t *sim = calloc(1, sizeof(*sim));
    if (sim == NULL)
        return KVIO_ERR_NOMEM;
    sim->block_tokens = block_tokens;
    size_t size = 1024;
    sim->slot_ids = malloc(size * sizeof(uint64_t));
    sim->slot_indices = malloc(size * sizeof(uint32_t));
    if (sim->slot_ids == NULL || sim->slot_indices == NULL) {
        kvio_cachesim_destroy(sim);
        return KVIO_ERR_NOMEM;
    }
    memset(sim->slot_indices, 0xff, size * sizeof(uint32_t));
    sim->slot_mask = size - 1;
    *sim_p = sim;
    return KVIO_OK;
}

void kvio_cachesim_destroy(kvio_cachesim_t *sim)
{
    if (sim == NULL)
        return;
    free(sim->requests);
    free(sim->blocks);
    free(sim->direct);
    free(sim->slot_ids);
    free(sim->slot_indices);
    free(sim);
}

static kvio_status_t grow_array(void **array, size_t *capacity, size_t needed, size_t size)
{
    if (needed <= *capacity)
        return KVIO_OK;
    size_t bigger = *capacity ? *capacity : 1024;
    while (bigger < needed)
        bigger *= 2;
    void *resized = realloc(*array, bigger * size);
    if (resized == NULL)
        return KVIO_ERR_NOMEM;
    *array = resized;
    *capacity = bigger;
    return KVIO_OK;
}

kvio_status_t kvio_cachesim_add_request(kvio_cachesim_t *sim, const uint64_t *block_ids,
                                        size_t num_blocks, uint64_t num_tokens)
{
    if (num_blocks > UINT32_MAX || (block_ids == NULL && num_blocks > 0))
        return KVIO_ERR_INVALID;
    kvio_status_t status = grow_array((void **)&sim->requests, &sim->requests_capacity,
                                      sim->num_requests + 1, sizeof(sim_request_t));
    if (status == KVIO_OK)
        status = grow_array((void **)&sim->blocks, &sim->blocks_capacity,
                            sim->num_blocks + num_blocks, sizeof(uint32_t));
    if (status != KVIO_OK)
        return status;
    for (size_t i = 0; i < num_blocks; i++) {
        if (sim->num_unique == UINT32_MAX - 1)
            return KVIO_ERR_NO_SPACE;
        uint64_t id = block_ids[i];
        if (id < DIRECT_IDS) {
            /* calloc of this size maps zero pages lazily: only the id
             * ranges in use cost memory. */
            if (sim->direct == NULL && (sim->direct = calloc(DIRECT_IDS, sizeof(uint32_t))) == NULL)
                return KVIO_ERR_NOMEM;
            if (sim->direct[id] == 0)
                sim->direct[id] = ++sim->num_unique;
            sim->blocks[sim->num_blocks + i] = sim->direct[id] - 1;
            continue;
        }
        if (2 * ((size_t)sim->num_table_ids + 1) > sim->slot_mask + 1) {
            status = grow_table(sim);
            if (status != KVIO_OK)
                return status;
        }
        size_t slot = id_slot(id, sim->slot_mask);
        while (sim->slot_indices[slot] != EMPTY_SLOT && sim->slot_ids[slot] != id)
            slot = (slot + 1) & sim->slot_mask;
        if (sim->slot_indices[slot] == EMPTY_SLOT) {
            sim->slot_ids[slot] = id;
            sim->slot_indices[slot] = sim->num_unique++;
            sim->num_table_ids++;
        }
        sim->blocks[sim->num_blocks + i] = sim->slot_indices[slot];
    }
    sim->requests[sim->num_requests++] = (sim_request_t){
        .first = sim->num_blocks,
        .num_blocks = (uint32_t)num_blocks,
        .num_tokens = num_tokens,
    };
    sim->num_blocks += num_blocks;
    return KVIO_OK;
}

size_t kvio_cachesim_num_requests(const kvio_cachesim_t *sim)
{
    return sim->num_requests;
}

size_t kvio_cachesim_num_unique_blocks(const kvio_cachesim_t *sim)
{
    return sim->num_unique;
}

/* Counts one request's hit: the longest prefix of resident blocks. */
static void count_hit(const kvio_cachesim_t *sim, const sim_request_t *request,
                      const uint8_t *resident, kvio_cachesim_result_t *result)
{
    const uint32_t *blocks = sim->blocks + request->first;
    uint32_t hits = 0;
    while (hits < request->num_blocks && resident[blocks[hits]])
        hits++;
    uint64_t hit_tokens = (uint64_t)hits * sim->block_tokens;
    result->hit_blocks += hits;
    result->blocks += request->num_blocks;
    result->tokens += request->num_tokens;
    result->hit_tokens += hit_tokens < request->num_tokens ? hit_tokens : request->num_tokens;
}

kvio_status_t kvio_cachesim_run(const kvio_cachesim_t *sim, const char *policy,
                                uint64_t capacity_blocks, kvio_cachesim_result_t *result_p)
{
    if (capacity_blocks == 0) {
        kvio_error("cachesim: capacity must be at least 1 block");
        return KVIO_ERR_INVALID;
    }
    kvio_status_t status = kvio_evict_check_name(policy);
    if (status != KVIO_OK)
        return status;
    const kvio_evict_ops_t *ops = kvio_evict_find(policy);
    kvio_cachesim_result_t result = {.policy = ops->name, .capacity_blocks = capacity_blocks};
    uint32_t num_entries = sim->num_unique;
    uint8_t *resident = calloc(num_entries ? num_entries : 1, 1);
    if (resident == NULL)
        return KVIO_ERR_NOMEM;
    /* A cache that holds every block never evicts: the policy cannot matter. */
    bool evicts = capacity_blocks < num_entries;
    kvio_evict_t evict = {0};
    if (evicts) {
        status = kvio_evict_init(&evict, policy, num_entries, capacity_blocks);
        if (status != KVIO_OK)
            goto cleanup;
    }
    uint64_t size = 0;
    for (size_t r = 0; r < sim->num_requests; r++) {
        const sim_request_t *request = &sim->requests[r];
        const uint32_t *blocks = sim->blocks + request->first;
        count_hit(sim, request, resident, &result);
        if (!evicts) {
            for (uint32_t i = 0; i < request->num_blocks; i++)
                resident[blocks[i]] = 1;
            continue;
        }
        void *priv = evict.priv;
        for (uint32_t i = 0; i < request->num_blocks; i++) {
            uint32_t block = blocks[i];
            if (resident[block]) {
                ops->access(priv, block);
                continue;
            }
            /* Evicting before inserting equals the reference's insert-then-
             * trim for any capacity of at least one block. */
            if (size == capacity_blocks) {
                uint32_t victim = ops->victim(priv);
                resident[victim] = 0;
                size--;
                result.evictions++;
            }
            ops->add(priv, block, block, true);
            resident[block] = 1;
            size++;
        }
    }
    result.requests = sim->num_requests;
    result.block_hit_rate = result.blocks ? (double)result.hit_blocks / (double)result.blocks : 0;
    result.token_hit_rate = result.tokens ? (double)result.hit_tokens / (double)result.tokens : 0;
    *result_p = result;
    status = KVIO_OK;

cleanup:
    kvio_evict_fini(&evict);
    free(resident);
    return status;
}

/* Sweep workers take (policy, capacity) jobs from a shared counter; the
 * counter and the first error are the only shared mutable state, under the
 * mutex; each job writes its own result slot. */
typedef struct sweep {
    const kvio_cachesim_t *sim;
    const char *const *policies;
    const uint64_t *capacities;
    size_t num_capacities, num_jobs, next_job;
    kvio_cachesim_result_t *results;
    kvio_status_t status;
    pthread_mutex_t lock;
} sweep_t;

static void *sweep_worker(void *arg)
{
    sweep_t *sweep = arg;
    for (;;) {
        pthread_mutex_lock(&sweep->lock);
        size_t job = sweep->status == KVIO_OK ? sweep->next_job++ : sweep->num_jobs;
        pthread_mutex_unlock(&sweep->lock);
        if (job >= sweep->num_jobs)
            return NULL;
        kvio_status_t status = kvio_cachesim_run(
            sweep->sim, sweep->policies[job / sweep->num_capacities],
            sweep->capacities[job % sweep->num_capacities], &sweep->results[job]);
        if (status != KVIO_OK) {
            pthread_mutex_lock(&sweep->lock);
            if (sweep->status == KVIO_OK)
                sweep->status = status;
            pthread_mutex_unlock(&sweep->lock);
        }
    }
}

kvio_status_t kvio_cachesim_sweep(const kvio_cachesim_t *sim, const char *const *policies,
                                  size_t num_policies, const uint64_t *capacities,
                                  size_t num_capacities, unsigned num_threads,
                                  kvio_cachesim_result_t *results_p)
{
    sweep_t sweep = {
        .sim = sim,
        .policies = policies,
        .capacities = capacities,
        .num_capacities = num_capacities,
        .num_jobs = num_policies * num_capacities,
        .results = results_p,
        .status = KVIO_OK,
    };
    if (sweep.num_jobs == 0)
        return KVIO_OK;
    for (size_t i = 0; i < num_policies; i++) {
        kvio_status_t status = kvio_evict_check_name(policies[i]);
        if (status != KVIO_OK)
            return status;
    }
    if (num_threads < 1)
        num_threads = 1;
    if (num_threads > sweep.num_jobs)
        num_threads = (unsigned)sweep.num_jobs;
    if (num_threads > 64)
        num_threads = 64;
    pthread_mutex_init(&sweep.lock, NULL);
    pthread_t threads[64];
    unsigned started = 0;
    for (; started + 1 < num_threads; started++) {
        if (pthread_create(&threads[started], NULL, sweep_worker, &sweep) != 0)
            break;
    }
    sweep_worker(&sweep);
    for (unsigned i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&sweep.lock);
    return sweep.status;
}
