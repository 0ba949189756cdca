/* The RL loop in real time (emulate), synchronous and colocated, as verl
 * runs it in one process: the serve ranks' engines generate on real KV
 * memory; then each step the rollout sleeps (vLLM sleep mode: level 1
 * copies the weights to a host buffer, level 2 drops them; both release the
 * KV pool's pages), the trainer trains (the FLOPs model's time, waited, its
 * weights changed), the rollout wakes its weights (level 1 copies them
 * back), the trainer's weight bytes are copied into the rollout's and
 * checked by checksum, and the KV pool is faulted in again. Sleep, sync and
 * wake are measured. */
#include "kvio/rl.h"

#include "serve/loop_int.h"
#include "serve/rl_int.h"

#include "kvio/clock.h"
#include "kvio/copysum.h"
#include "kvio/model.h"
#include "kvio/sysinfo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE_BYTES 4096u

typedef struct rl_emu_engine {
    kvio_serve_memory_t memory; /* its KV pool (host) */
    unsigned char *weights;     /* the rollout's weight shard */
    unsigned char *host;        /* sleep level 1: the shard's copy on host */
    uint64_t host_sum;          /* what the shard summed to when it went to host */
} rl_emu_engine_t;

struct rl_emu {
    uint64_t origin_ns;         /* kvio_time_ns() at the run's time 0 */
    uint64_t weight_bytes;      /* per engine */
    uint64_t block_bytes;
    unsigned char *trainer;     /* the trainer's weights, changed by each step */
    uint64_t trainer_sum;
    int64_t train_ns;           /* the step training now: the model's time */
    rl_emu_engine_t *engines;
    uint32_t num_engines;
};

static void *map_bytes(uint64_t bytes)
{
    void *memory = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

static void unmap_bytes(void *memory, uint64_t bytes)
{
    if (memory != NULL)
        munmap(memory, (size_t)bytes);
}

/* Gives the pages back to the system (a woken buffer faults them in). */
static void release_bytes(void *memory, uint64_t bytes)
{
    if (memory != NULL && bytes > 0)
        madvise(memory, (size_t)bytes, MADV_DONTNEED);
}

uint64_t rl_emu_weight_bytes(const kvio_rl_config_t *config, const kvio_serve_run_t *run)
{
    if (config->weight_bytes > 0)
        return config->weight_bytes;
    int64_t tensor_parallel = kvio_cost_gpus(run->cost);
    return kvio_model_weight_bytes(run->model) / (uint64_t)(tensor_parallel > 0 ? tensor_parallel
                                                                                : 1);
}

/* Host memory the weight buffers take: the trainer's, and each engine's
 * (and its host copy at sleep level 1), beside pool_bytes of KV pools. */
static kvio_status_t check_memory(const kvio_rl_config_t *config, uint64_t weight_bytes,
                                  uint32_t num_engines, uint64_t pool_bytes, char *error_p,
                                  size_t error_len)
{
    uint64_t copies = 1 + (uint64_t)num_engines * (config->sleep_level == 1 ? 2 : 1);
    uint64_t weights = weight_bytes > UINT64_MAX / copies ? UINT64_MAX : weight_bytes * copies;
    uint64_t needed = weights > UINT64_MAX - pool_bytes ? UINT64_MAX : weights + pool_bytes;
    uint64_t available = 0;
    char unused[128];
    if (kvio_mem_available(&available, unused, sizeof(unused)) != KVIO_OK)
        available = 0; /* unknown: no check */
    if (available > 0 && needed > available / 10 * 8) {
        snprintf(error_p, error_len,
                 "rl.weight_bytes: the RL run's weights need %.2f GiB (%llu copies of %llu bytes: "
                 "the trainer's, each of %u serve ranks'%s) beside %.2f GiB of KV pools, but "
                 "this machine has %.2f GiB available; set rl.weight_bytes or "
                 "serve.kvcache.blocks (together at most 80%% of it)",
                 (double)weights / 1073741824.0, (unsigned long long)copies,
                 (unsigned long long)weight_bytes, num_engines,
                 config->sleep_level == 1 ? " and its host copy (rl.sleep_level: 1)" : "",
                 (double)pool_bytes / 1073741824.0, (double)available / 1073741824.0);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

kvio_status_t kvio_rl_emulate_preflight(const kvio_rl_config_t *config,
                                        const kvio_serve_run_t *run, uint64_t pool_bytes,
                                        char *error_p, size_t error_len)
{
    return check_memory(config, rl_emu_weight_bytes(config, run),
                        run->num_ranks > 0 ? run->num_ranks : 1, pool_bytes, error_p, error_len);
}

static kvio_status_t fault_in(const rl_sim_t *sim, void *memory, uint64_t bytes)
{
    kvio_status_t status = kvio_fault_in(memory, (size_t)bytes, true, sim->run->stop);
    if (status != KVIO_OK)
        snprintf(sim->error_p, sim->error_len, "rl: stopped while faulting in %llu bytes",
                 (unsigned long long)bytes);
    return status;
}

kvio_status_t rl_emu_create(rl_sim_t *sim)
{
    const kvio_serve_run_t *run = sim->run;
    uint32_t num_engines = run->num_ranks > 0 ? run->num_ranks : 1;
    uint64_t weight_bytes = rl_emu_weight_bytes(sim->config, run);
    kvio_status_t status = KVIO_OK;
    rl_emu_t *emu = calloc(1, sizeof(*emu));
    if (emu == NULL)
        return KVIO_ERR_NOMEM;
    sim->emu = emu;
    emu->weight_bytes = weight_bytes;
    emu->num_engines = num_engines;
    emu->block_bytes = kvio_model_kv_bytes_per_token(run->model, kvio_cost_gpus(run->cost)) *
                       (uint64_t)run->serve->kvcache.block_size;
    emu->engines = calloc(num_engines, sizeof(*emu->engines));
    if (emu->engines == NULL)
        return KVIO_ERR_NOMEM;
    bool level1 = sim->config->sleep_level == 1;
    emu->trainer = map_bytes(weight_bytes);
    for (uint32_t e = 0; e < num_engines && emu->trainer != NULL; e++) {
        emu->engines[e].weights = map_bytes(weight_bytes);
        emu->engines[e].host = level1 ? map_bytes(weight_bytes) : NULL;
        if (emu->engines[e].weights == NULL || (level1 && emu->engines[e].host == NULL)) {
            snprintf(sim->error_p, sim->error_len,
                     "rl: cannot map %llu bytes of weights for serve rank %u: %s",
                     (unsigned long long)weight_bytes, e, strerror(errno));
            return KVIO_ERR_NOMEM;
        }
    }
    if (emu->trainer == NULL) {
        snprintf(sim->error_p, sim->error_len, "rl: cannot map %llu bytes of trainer weights: %s",
                 (unsigned long long)weight_bytes, strerror(errno));
        return KVIO_ERR_NOMEM;
    }
    /* The weights as loaded: the trainer's and the rollout's the same. */
    status = fault_in(sim, emu->trainer, weight_bytes);
    for (uint32_t e = 0; e < num_engines && status == KVIO_OK; e++) {
        status = fault_in(sim, emu->engines[e].host, level1 ? weight_bytes : 0);
        if (status == KVIO_OK)
            status = fault_in(sim, emu->engines[e].weights, weight_bytes);
    }
    return status;
}

kvio_status_t rl_emu_engine_params(rl_sim_t *sim, uint32_t e, kvio_engine_params_t *params)
{
    rl_emu_t *emu = sim->emu;
    kvio_serve_memory_t *memory = &emu->engines[e].memory;
    kvio_status_t status = kvio_serve_memory_create(sim->run, e, sim->num_engines, sim->blocks,
                                                    emu->block_bytes, memory, sim->error_p,
                                                    sim->error_len);
    if (status != KVIO_OK)
        return status;
    params->kv_memory = memory->memory;
    params->block_bytes = emu->block_bytes;
    params->swap_space = memory->swap_space;
    params->swap_space_blocks = memory->swap_blocks;
    return KVIO_OK;
}

void rl_emu_destroy(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    if (emu == NULL)
        return;
    for (uint32_t e = 0; emu->engines != NULL && e < emu->num_engines; e++) {
        kvio_serve_memory_destroy(&emu->engines[e].memory);
        unmap_bytes(emu->engines[e].weights, emu->weight_bytes);
        unmap_bytes(emu->engines[e].host, emu->weight_bytes);
    }
    unmap_bytes(emu->trainer, emu->weight_bytes);
    free(emu->engines);
    free(emu);
    sim->emu = NULL;
}

void rl_emu_start(rl_sim_t *sim)
{
    sim->emu->origin_ns = kvio_time_ns();
}

static int64_t emu_now(const rl_emu_t *emu)
{
    return (int64_t)(kvio_time_ns() - emu->origin_ns);
}

int64_t rl_emu_wait(rl_sim_t *sim, int64_t until_ns)
{
    rl_emu_t *emu = sim->emu;
    kvio_wait_until_ns(emu->origin_ns + (uint64_t)until_ns);
    int64_t now = emu_now(emu);
    return now > until_ns ? now : until_ns;
}

/* The trainer's step changes its weights: one word of every page, by the
 * step (every byte's sum changes, as an optimizer step changes every
 * tensor), then sums them for the sync's check. */
static void train_weights(rl_emu_t *emu, uint64_t step)
{
    for (uint64_t at = 0; at + sizeof(uint64_t) <= emu->weight_bytes; at += PAGE_BYTES) {
        uint64_t word = (step + 1) * 0x9e3779b97f4a7c15ull ^ at;
        memcpy(emu->trainer + at, &word, sizeof(word));
    }
    kvio_sum_t sum;
    kvio_sum_start(&sum, emu->trainer, emu->weight_bytes);
    kvio_sum_pass(&sum, NULL, emu->weight_bytes);
    emu->trainer_sum = kvio_sum_digest(&sum);
}

static uint64_t sum_of(const void *memory, uint64_t bytes)
{
    kvio_sum_t sum;
    kvio_sum_start(&sum, memory, bytes);
    kvio_sum_pass(&sum, NULL, bytes);
    return kvio_sum_digest(&sum);
}

static kvio_status_t sleep_engines(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    for (uint32_t e = 0; e < emu->num_engines; e++) {
        rl_emu_engine_t *engine = &emu->engines[e];
        if (engine->host != NULL)
            engine->host_sum = kvio_copy_hashed(engine->host, engine->weights,
                                                (size_t)emu->weight_bytes);
        release_bytes(engine->weights, emu->weight_bytes);
        release_bytes(engine->memory.memory, engine->memory.memory_bytes);
    }
    return KVIO_OK;
}

/* The weights back on the rollout: level 1 copies them from host (checked),
 * level 2 faults the buffer in again for the sync to fill. */
static kvio_status_t wake_weights(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    for (uint32_t e = 0; e < emu->num_engines; e++) {
        rl_emu_engine_t *engine = &emu->engines[e];
        if (engine->host == NULL) {
            kvio_status_t status = fault_in(sim, engine->weights, emu->weight_bytes);
            if (status != KVIO_OK)
                return status;
            continue;
        }
        uint64_t sum = kvio_copy_hashed(engine->weights, engine->host,
                                        (size_t)emu->weight_bytes);
        if (sum != engine->host_sum) {
            snprintf(sim->error_p, sim->error_len,
                     "rl: serve rank %u's weights came back from host summing to %016llx, not "
                     "the %016llx they went with", e, (unsigned long long)sum,
                     (unsigned long long)engine->host_sum);
            return KVIO_ERR_IO;
        }
    }
    return KVIO_OK;
}

static kvio_status_t sync_weights(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    for (uint32_t e = 0; e < emu->num_engines; e++) {
        uint64_t sum = kvio_copy_hashed(emu->engines[e].weights, emu->trainer,
                                        (size_t)emu->weight_bytes);
        if (sum != emu->trainer_sum) {
            snprintf(sim->error_p, sim->error_len,
                     "rl: step %llu: the trainer's weights read %016llx while syncing to serve "
                     "rank %u, not the %016llx it trained", (unsigned long long)sim->step + 1,
                     (unsigned long long)sum, e, (unsigned long long)emu->trainer_sum);
            return KVIO_ERR_IO;
        }
        sim->sync_bytes += emu->weight_bytes;
    }
    return KVIO_OK;
}

/* What the rollout holds after the sync is what the trainer trained (read
 * back after the measured sync, as update.verify checks a version). */
static kvio_status_t verify_sync(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    for (uint32_t e = 0; e < emu->num_engines; e++) {
        uint64_t sum = sum_of(emu->engines[e].weights, emu->weight_bytes);
        if (sum != emu->trainer_sum) {
            snprintf(sim->error_p, sim->error_len,
                     "rl: step %llu: serve rank %u's weights sum to %016llx after the sync, the "
                     "trainer's to %016llx", (unsigned long long)sim->step + 1, e,
                     (unsigned long long)sum, (unsigned long long)emu->trainer_sum);
            return KVIO_ERR_IO;
        }
    }
    return KVIO_OK;
}

static kvio_status_t wake_pools(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    kvio_status_t status = KVIO_OK;
    for (uint32_t e = 0; e < emu->num_engines && status == KVIO_OK; e++)
        status = fault_in(sim, emu->engines[e].memory.memory,
                          emu->engines[e].memory.memory_bytes);
    return status;
}

/* The trainer's step: its weights change, and it lasts the FLOPs model's
 * time from the sleep's end (longer if changing them took longer). */
static kvio_status_t train(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    int64_t from_ns = emu_now(emu);
    train_weights(emu, sim->step);
    kvio_wait_until_ns(emu->origin_ns + (uint64_t)(from_ns + emu->train_ns));
    return KVIO_OK;
}

kvio_status_t rl_emu_step(rl_sim_t *sim, rl_step_t *step)
{
    rl_emu_t *emu = sim->emu;
    /* verl's order: sleep, train, wake the weights, sync, wake the KV. */
    kvio_status_t (*const phases[])(rl_sim_t *) = {sleep_engines, train, wake_weights,
                                                   sync_weights, verify_sync, wake_pools};
    enum { SLEEP, TRAIN, WAKE_WEIGHTS, SYNC, VERIFY, WAKE_POOLS, PHASES };
    int64_t at[PHASES + 1];
    emu->train_ns = step->train_ns;
    kvio_status_t status = KVIO_OK;
    at[0] = emu_now(emu);
    for (int p = 0; p < PHASES; p++) {
        if (status == KVIO_OK)
            status = phases[p](sim);
        at[p + 1] = emu_now(emu);
    }
    int64_t took[PHASES];
    for (int p = 0; p < PHASES; p++)
        took[p] = at[p + 1] - at[p];
    step->sleep_ns = took[SLEEP];
    step->train_ns = took[TRAIN];
    step->sync_ns = took[SYNC]; /* the read-back (VERIFY) is the check's, not the sync's */
    step->wake_ns = took[SLEEP] + took[WAKE_WEIGHTS] + took[WAKE_POOLS];
    sim->now_ns = at[PHASES];
    return status;
}
