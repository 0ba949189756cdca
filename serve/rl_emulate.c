/* The RL loop in real time (emulate). Synchronous and colocated, as verl
 * runs it in one process: the serve ranks' engines generate on real KV
 * memory; then each step the rollout sleeps (vLLM sleep mode: level 1
 * copies the weights to a host buffer, level 2 drops them; both release the
 * KV pool's pages), the trainer trains (the FLOPs model's time, waited, its
 * weights changed), the rollout wakes its weights (level 1 copies them
 * back), the trainer's weight bytes are copied into the rollout's and
 * checked by checksum, and the KV pool is faulted in again. Sleep, sync and
 * wake are measured. Separate placement and async: the trainer is a rank
 * of its own (serve/rl_trainer.c) whose weights land in this rank's
 * receive slots over the transport while the engines idle (sync) or
 * generate on (async); each landing is checked and activated. */
#include "kvio/rl.h"

#include "serve/loop_int.h"
#include "serve/rl_int.h"

#include "kvio/clock.h"
#include "kvio/copysum.h"
#include "kvio/model.h"
#include "kvio/sysinfo.h"
#include "kvio/xfer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>


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
    /* A trainer rank (separate, async): its weights land in xfer's slots. */
    kvio_rte_t *rte;
    kvio_xfer_t *xfer;
    kvio_xfer_config_t xfer_config; /* borrowed by xfer */
    int active_slot;            /* the slot the engines generate with */
    rl_step_t *training;        /* the step the trainer rank trains (NULL: none) */
    int64_t train_sent_ns;      /* when it was asked to */
    bool receiving;             /* its weights' notice came */
    kvio_xfer_receive_t receive;
};

int kvio_rl_emulate_ranks(const kvio_rl_config_t *config)
{
    return config->mode == KVIO_RL_SYNC && config->placement == KVIO_RL_COLOCATED ? 1 : 2;
}

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
 * (and its host copy at sleep level 1), beside pool_bytes of KV pools; with
 * a trainer rank, its send buffer and the rollout's two receive slots, each
 * every engine's shard. */
static kvio_status_t check_memory(const kvio_rl_config_t *config, uint64_t weight_bytes,
                                  uint32_t num_engines, uint64_t pool_bytes, char *error_p,
                                  size_t error_len)
{
    bool separate = kvio_rl_emulate_ranks(config) > 1;
    uint64_t copies = separate ? 3 * (uint64_t)num_engines
                               : 1 + (uint64_t)num_engines * (config->sleep_level == 1 ? 2 : 1);
    uint64_t weights = weight_bytes > UINT64_MAX / copies ? UINT64_MAX : weight_bytes * copies;
    uint64_t needed = weights > UINT64_MAX - pool_bytes ? UINT64_MAX : weights + pool_bytes;
    uint64_t available = 0;
    char unused[128];
    if (kvio_mem_available(&available, unused, sizeof(unused)) != KVIO_OK)
        available = 0; /* unknown: no check */
    if (available > 0 && needed > available / 10 * 8) {
        snprintf(error_p, error_len,
                 "rl.weight_bytes: the RL run's weights need %.2f GiB (%llu copies of %llu bytes: "
                 "%s, each of %u serve ranks'%s) beside %.2f GiB of KV pools, but "
                 "this machine has %.2f GiB available; set rl.weight_bytes or "
                 "serve.kvcache.blocks (together at most 80%% of it)",
                 (double)weights / 1073741824.0, (unsigned long long)copies,
                 (unsigned long long)weight_bytes,
                 separate ? "the trainer rank's send buffer and the rollout's two receive "
                            "slots"
                          : "the trainer's",
                 num_engines,
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

kvio_status_t kvio_rl_link_preflight(const kvio_rl_config_t *config, const kvio_serve_run_t *run,
                                     const kvio_xfer_config_t *transport, char *error_p,
                                     size_t error_len)
{
    if (kvio_rl_emulate_ranks(config) < 2)
        return KVIO_OK;
    /* The trainer rank's link, checked as every transport is before a run
     * (built, its Redis answering, its directory writable, the memory it
     * moves: host here, which a GPU-only transport refuses). */
    kvio_xfer_config_t link;
    rl_link_config(transport, &link);
    uint64_t bytes = rl_emu_weight_bytes(config, run) * (run->num_ranks > 0 ? run->num_ranks : 1);
    char why[KVIO_ERROR_MAX / 2] = "";
    kvio_status_t status = kvio_xfer_preflight(&link, bytes, why, sizeof(why));
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "train.transport.kind: %s in an emulate RL run (the "
                 "trainer rank sends host memory; use ucx, file or redis): %s",
                 kvio_choice_name(&transport->kind), why);
    return status;
}

static kvio_status_t fault_in(const rl_sim_t *sim, void *memory, uint64_t bytes)
{
    kvio_status_t status = kvio_fault_in(memory, (size_t)bytes, true, sim->run->stop);
    if (status != KVIO_OK)
        snprintf(sim->error_p, sim->error_len, "rl: stopped while faulting in %llu bytes",
                 (unsigned long long)bytes);
    return status;
}

/* The rollout's side of a trainer rank: tells it the weights' size, then
 * both create the transport (rank 0 receives into two slots). */
static kvio_status_t link_create(rl_sim_t *sim, kvio_rte_t *rte,
                                 const kvio_xfer_config_t *transport)
{
    rl_emu_t *emu = sim->emu;
    emu->rte = rte;
    rl_plan_message_t plan = {.bytes = emu->weight_bytes * emu->num_engines};
    kvio_status_t status = kvio_rte_send(rte, RL_TRAINER_RANK, KVIO_RL_TAG_PLAN, &plan,
                                         sizeof(plan));
    if (status != KVIO_OK) {
        snprintf(sim->error_p, sim->error_len, "rl: telling the trainer rank the weights' size: "
                 "%s", kvio_rte_verdict(rte));
        return status;
    }
    return rl_link_create(rte, transport, KVIO_XFER_RECEIVER, plan.bytes, &emu->xfer_config,
                          &emu->xfer, sim->error_p, sim->error_len);
}

kvio_status_t rl_emu_create(rl_sim_t *sim, kvio_rte_t *rte, const kvio_xfer_config_t *transport)
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
    if (rte != NULL)
        return link_create(sim, rte, transport);
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

static kvio_status_t poll_weights(rl_sim_t *sim, bool *landed_p);

/* A run stopped while the trainer rank trains: its weights are taken in
 * first (over tcp its puts land only while this rank progresses, so it
 * could not hear that there are no more steps). Errors here are the
 * drain's own: the run's message stays. */
static void drain_weights(rl_sim_t *sim)
{
    char *error_p = sim->error_p;
    size_t error_len = sim->error_len;
    char scratch[256];
    sim->error_p = scratch;
    sim->error_len = sizeof(scratch);
    bool landed = false;
    while (sim->emu->training != NULL && !landed && poll_weights(sim, &landed) == KVIO_OK) {
        struct timespec nap = {.tv_nsec = 100000};
        nanosleep(&nap, NULL);
    }
    sim->error_p = error_p;
    sim->error_len = error_len;
}

/* Tells the trainer rank there are no more steps, then both let go of
 * the transport together. */
static void link_destroy(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    if (emu->xfer == NULL)
        return;
    drain_weights(sim);
    rl_train_message_t done = {.step = RL_STEP_NONE};
    kvio_status_t status = kvio_rte_send(emu->rte, RL_TRAINER_RANK, KVIO_RL_TAG_TRAIN, &done,
                                         sizeof(done));
    kvio_xfer_detach(emu->xfer);
    if (status == KVIO_OK)
        kvio_rte_barrier(emu->rte);
    kvio_xfer_destroy(emu->xfer);
    emu->xfer = NULL;
}

void rl_emu_destroy(rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    if (emu == NULL)
        return;
    link_destroy(sim);
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

json_t *rl_emu_trainer_json(const rl_sim_t *sim)
{
    rl_emu_t *emu = sim->emu;
    return json_pack("{s:i, s:s, s:s, s:I}", "rank", RL_TRAINER_RANK, "runtime",
                     kvio_rte_world_kind(kvio_rte_world(emu->rte)), "transport",
                     kvio_xfer_info(emu->xfer), "bytes_per_sync",
                     (json_int_t)(emu->weight_bytes * emu->num_engines));
}

bool rl_emu_separate(const rl_sim_t *sim)
{
    return sim->emu != NULL && sim->emu->rte != NULL;
}

kvio_status_t rl_emu_train_start(rl_sim_t *sim, rl_step_t *step)
{
    rl_emu_t *emu = sim->emu;
    rl_train_message_t message = {.step = sim->step, .train_ns = step->train_ns};
    emu->training = step;
    emu->receiving = false;
    emu->train_sent_ns = emu_now(emu);
    kvio_status_t status = kvio_rte_post(emu->rte, RL_TRAINER_RANK, KVIO_RL_TAG_TRAIN, &message,
                                         sizeof(message));
    if (status != KVIO_OK)
        snprintf(sim->error_p, sim->error_len, "rl: step %llu: asking the trainer rank to "
                 "train: %s", (unsigned long long)sim->step + 1, kvio_rte_verdict(emu->rte));
    return status;
}

/* The trained weights in the free slot: checked against the checksum the
 * trainer sent, then the engines' (the slots swap, as a serve rank
 * activates a version). */
static kvio_status_t land(rl_sim_t *sim, int64_t now_ns)
{
    rl_emu_t *emu = sim->emu;
    const kvio_xfer_receive_t *receive = &emu->receive;
    uint64_t bytes = receive->meta.bytes;
    uint64_t expected = sim->step; /* the step training is sim->step - 1: version step */
    if (receive->meta.version != expected || bytes != emu->weight_bytes * emu->num_engines) {
        snprintf(sim->error_p, sim->error_len, "rl: the trainer rank sent version %llu of %llu "
                 "bytes, not version %llu of %llu", (unsigned long long)receive->meta.version,
                 (unsigned long long)bytes, (unsigned long long)expected,
                 (unsigned long long)(emu->weight_bytes * emu->num_engines));
        return KVIO_ERR_IO;
    }
    uint64_t sum = 0;
    if (!kvio_xfer_fetched_sum(emu->xfer, receive->meta.version, &sum))
        sum = kvio_weights_checksum(kvio_xfer_slot(emu->xfer, receive->slot), bytes);
    if (sum != receive->meta.checksum) {
        snprintf(sim->error_p, sim->error_len, "rl: step %llu: the weights landed summing to "
                 "%016llx, the trainer's to %016llx", (unsigned long long)expected,
                 (unsigned long long)sum, (unsigned long long)receive->meta.checksum);
        return KVIO_ERR_IO;
    }
    kvio_status_t status = kvio_xfer_ack(emu->xfer, receive, emu->active_slot);
    if (status != KVIO_OK) {
        snprintf(sim->error_p, sim->error_len, "rl: acknowledging version %llu: %s",
                 (unsigned long long)expected, kvio_xfer_error(emu->xfer));
        return status;
    }
    emu->active_slot = receive->slot;
    /* The trainer's ready on this run's clock; the sync lasts until the
     * bytes were in place (the check after it is the rollout's). */
    int64_t ready_ns = receive->meta.t_ready_ns - (int64_t)emu->origin_ns;
    rl_step_t *step = emu->training;
    step->train_ns = ready_ns - emu->train_sent_ns;
    step->sync_ns = receive->t_xfer_end_ns - (int64_t)emu->origin_ns - ready_ns;
    if (step->sync_ns < 0)
        step->sync_ns = now_ns - ready_ns;
    step->end_ns = now_ns;
    sim->trainer_end_ns = now_ns;
    sim->sync_bytes += bytes;
    emu->training = NULL;
    return KVIO_OK;
}

/* Moves the weights the trainer rank publishes; *landed_p once they are in
 * place and checked. */
static kvio_status_t poll_weights(rl_sim_t *sim, bool *landed_p)
{
    rl_emu_t *emu = sim->emu;
    *landed_p = false;
    if (emu->training == NULL)
        return KVIO_OK;
    kvio_xfer_progress(emu->xfer);
    kvio_status_t status = KVIO_OK;
    if (!emu->receiving) {
        status = kvio_xfer_poll(emu->xfer, 1 - emu->active_slot, &emu->receive);
        if (status == KVIO_INPROGRESS)
            return kvio_rte_peer_check(emu->rte, RL_TRAINER_RANK, true,
                                       "the trained weights", sim->error_p, sim->error_len);
        emu->receiving = status == KVIO_OK;
    }
    if (status == KVIO_OK && !emu->receive.complete)
        status = kvio_xfer_fetch_step(emu->xfer, &emu->receive);
    if (status != KVIO_OK) {
        snprintf(sim->error_p, sim->error_len, "rl: receiving step %llu's weights: %s",
                 (unsigned long long)sim->step, kvio_xfer_error(emu->xfer));
        return status;
    }
    if (!emu->receive.complete)
        return KVIO_OK;
    *landed_p = true;
    return land(sim, emu_now(emu));
}

kvio_status_t rl_emu_wait(rl_sim_t *sim, int64_t until_ns, int64_t *now_p)
{
    rl_emu_t *emu = sim->emu;
    if (emu->rte == NULL) {
        kvio_wait_until_ns(emu->origin_ns + (uint64_t)until_ns);
        int64_t now = emu_now(emu);
        *now_p = now > until_ns ? now : until_ns;
        return KVIO_OK;
    }
    /* Polls the transport while waiting: short sleeps, the last stretch
     * spun. */
    for (;;) {
        bool landed = false;
        kvio_status_t status = poll_weights(sim, &landed);
        int64_t now = emu_now(emu);
        if (status != KVIO_OK || landed || now >= until_ns) {
            *now_p = landed || now > until_ns ? now : until_ns;
            return status;
        }
        if (sim->run->stop != NULL && *sim->run->stop) {
            *now_p = now;
            return KVIO_OK;
        }
        int64_t left = until_ns - now;
        if (left > 300000) {
            struct timespec nap = {.tv_nsec = 100000};
            nanosleep(&nap, NULL);
        }
    }
}

static uint64_t sum_of(const void *memory, uint64_t bytes)
{
    kvio_sum_t sum;
    kvio_sum_start(&sum, memory, bytes);
    kvio_sum_pass(&sum, NULL, bytes);
    return kvio_sum_digest(&sum);
}

/* The trainer's step changes its weights, then sums them for the sync's
 * check. */
static void train_weights(rl_emu_t *emu, uint64_t step)
{
    rl_emu_train_bytes(emu->trainer, emu->weight_bytes, step);
    emu->trainer_sum = sum_of(emu->trainer, emu->weight_bytes);
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
