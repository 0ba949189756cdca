/* A serve rank's real memory in emulate mode: the KV pool (mmap'd host
 * memory touched up front, or a device domain's allocation), the host swap
 * space for swap preemption (pinned for a GPU pool), and its lower tiers
 * with their names kept apart from every other rank's and run's; the check,
 * before anything starts, that this machine can hold the pools; and a plain
 * memcpy of the rank's blocks that swap copies are compared with. */
#include "serve/loop_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"
#include "kvio/log.h"
#include "kvio/sysinfo.h"

/* A plain memcpy of as many whole blocks as the rank swapped (at most 64)
 * between its pool and swap space, after the run: what the swap copies
 * compare with (swap_reference_copy_gbps). */
void kvio_serve_memory_reference_copy(const kvio_serve_memory_t *setup, uint64_t block_bytes,
                                      uint64_t swapped_bytes, uint64_t *bytes_p,
                                      int64_t *ns_p)
{
    if (setup->swap_space == NULL || setup->memory == NULL || block_bytes == 0 ||
        setup->swap_pinned) /* a GPU pool: the host cannot read it */
        return;
    size_t pool_blocks = setup->memory_bytes / block_bytes - 1; /* block 0: the null block */
    size_t swap_blocks = setup->swap_bytes / block_bytes;
    size_t count = (size_t)(swapped_bytes / 2 / block_bytes); /* out and back in */
    if (count > 64)
        count = 64;
    if (count > pool_blocks)
        count = pool_blocks;
    if (count > swap_blocks)
        count = swap_blocks;
    unsigned char *pool = setup->memory, *swap = setup->swap_space;
    uint64_t start = kvio_time_ns();
    for (size_t i = 0; i < count; i++)
        memcpy(swap + (i * 104729 % swap_blocks) * block_bytes,
               pool + (1 + i * 7919 % pool_blocks) * block_bytes, block_bytes);
    *ns_p += (int64_t)(kvio_time_ns() - start);
    *bytes_p += count * block_bytes;
}

/* Host swap space per rank: serve.kvcache.swap_space, or the pool's size
 * capped at 4 GiB. */
static uint64_t swap_space_bytes(const kvio_serve_config_t *serve, uint64_t pool_bytes)
{
    if (serve->kvcache.swap_space > 0)
        return serve->kvcache.swap_space;
    return pool_bytes < (4ull << 30) ? pool_bytes : (4ull << 30);
}

/* This process's part of the names its tiers share with other runs (the
 * wall clock when it first asked; with the pid, unique to the run). */
static pthread_once_t process_id_once = PTHREAD_ONCE_INIT;
static uint64_t process_id_value;

static void take_process_id(void)
{
    process_id_value = kvio_wall_time_ns();
}

static uint64_t process_id_ns(void)
{
    pthread_once(&process_id_once, take_process_id);
    return process_id_value;
}

/* A shared tier's store: this rank's endpoint, opened with the other
 * serve ranks (world ranks first_serve_rank on), once for the run. */
static kvio_status_t open_shared(const kvio_serve_run_t *run, uint32_t num_serve,
                                 const kvio_tier_config_t *config, uint64_t object_bytes,
                                 kvio_serve_memory_t *setup, char *error_p, size_t error_len)
{
    if (setup->shared != NULL)
        return KVIO_OK;
    kvio_shared_store_config_t store;
    kvio_tier_shared_config(config, num_serve, object_bytes, &store);
    return kvio_shared_endpoint_create(run->rte, run->first_serve_rank, &store, &setup->shared,
                                       error_p, error_len);
}

/* Host memory of a rank, real before t0 (kvio_fault_in_alloc: huge pages,
 * a stop seen within a fraction of a second). */
static kvio_status_t host_alloc(const kvio_serve_run_t *run, uint32_t rank, size_t bytes,
                                const char *what, void **memory_p, char *error_p,
                                size_t error_len)
{
    kvio_status_t status = kvio_fault_in_alloc(bytes, run->stop, memory_p);
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "serve rank %u: cannot map %zu bytes of %s: %s", rank,
                 bytes, what, strerror(errno));
    else if (status != KVIO_OK)
        snprintf(error_p, error_len, "serve rank %u: stopped during set-up", rank);
    return status;
}

/* The pool's memory: a device domain's allocation (device.memory pinned or
 * cuda), or mmap'd host memory with every page touched now. */
static kvio_status_t create_pool(const kvio_serve_run_t *run, uint32_t rank,
                                 kvio_serve_memory_t *setup, char *error_p, size_t error_len)
{
    const kvio_device_config_t *device = run->device;
    if (device != NULL && device->memory != KVIO_MEMORY_HOST) {
        char reason[512];
        /* Picked by the runtime index, as the transports pick theirs, so a
         * serve rank's KV pool and weight slots share a GPU. */
        kvio_status_t status = kvio_device_create(device->memory, device->fallback,
                                                  device->index,
                                                  (int)(run->first_serve_rank + rank),
                                                  &setup->device, reason, sizeof(reason));
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "serve rank %u: device.memory: %s: %s", rank,
                     kvio_memory_kind_names[device->memory], reason);
            return status;
        }
        if (kvio_device_fell_back(setup->device))
            kvio_warn("serve rank %u: KV pool in %s", rank, kvio_device_describe(setup->device));
    }
    if (setup->device != NULL && kvio_device_kind(setup->device) != KVIO_MEMORY_HOST) {
        void *memory = NULL;
        kvio_status_t status = kvio_device_alloc(setup->device, setup->memory_bytes, &memory);
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "serve rank %u: KV pool of %zu bytes: %s", rank,
                     setup->memory_bytes, kvio_device_error(setup->device));
            return status;
        }
        setup->memory = memory;
        setup->spin = device->spin && kvio_device_kind(setup->device) == KVIO_MEMORY_CUDA;
        if (setup->spin && kvio_device_spin_setup(setup->device, device->spin_bytes) != KVIO_OK) {
            snprintf(error_p, error_len, "serve rank %u: device.spin_bytes: %s", rank,
                     kvio_device_error(setup->device));
            return KVIO_ERR_NOMEM;
        }
        return KVIO_OK; /* an allocation in a domain is zeroed already */
    }
    /* Every page of a host pool real now. */
    return host_alloc(run, rank, setup->memory_bytes, "KV memory", &setup->memory, error_p,
                      error_len);
}

static kvio_status_t check_generated(const kvio_serve_run_t *run, char *error_p,
                                     size_t error_len);

kvio_status_t kvio_serve_memory_create(const kvio_serve_run_t *run, uint32_t rank,
                                       uint32_t num_serve, uint32_t blocks, uint64_t block_bytes,
                                       kvio_serve_memory_t *setup, char *error_p,
                                       size_t error_len)
{
    memset(setup, 0, sizeof(*setup));
    /* Here too: P/D's ranks are set up without the preflight. */
    kvio_status_t checked = check_generated(run, error_p, error_len);
    if (checked != KVIO_OK)
        return checked;
    setup->memory_bytes = (size_t)(blocks + 1) * block_bytes;
    const kvio_device_config_t *device = run->device;
    /* A generated pool has no memory: its blocks' bytes are made when read. */
    setup->generated = run->serve->kvcache.pool_memory == KVIO_POOL_MEMORY_GENERATED;
    kvio_status_t pool_status = setup->generated ? KVIO_OK
                                                 : create_pool(run, rank, setup, error_p,
                                                               error_len);
    if (pool_status != KVIO_OK)
        return pool_status;
    uint32_t swap_blocks = 0;
    bool gpu_pool = setup->device != NULL && kvio_device_kind(setup->device) == KVIO_MEMORY_CUDA;
    if (run->serve->engine.preemption == KVIO_PREEMPT_SWAP) {
        setup->swap_bytes = swap_space_bytes(run->serve, setup->memory_bytes);
        swap_blocks = (uint32_t)(setup->swap_bytes / block_bytes);
        setup->swap_bytes = (size_t)swap_blocks * block_bytes;
        setup->swap_blocks = swap_blocks;
        if (swap_blocks > 0 && gpu_pool) {
            /* Pinned once, here: allocating page-locked memory per swap would
             * wait for the device (and for every other rank's work on it). */
            void *pinned = NULL;
            if (kvio_device_host_alloc(setup->device, setup->swap_bytes, &pinned) != KVIO_OK) {
                snprintf(error_p, error_len, "serve rank %u: %zu bytes of pinned swap space: %s",
                         rank, setup->swap_bytes, kvio_device_error(setup->device));
                return KVIO_ERR_NOMEM;
            }
            setup->swap_space = pinned;
            setup->swap_pinned = true;
        } else if (swap_blocks > 0) {
            kvio_status_t status = host_alloc(run, rank, setup->swap_bytes, "swap space",
                                              &setup->swap_space, error_p, error_len);
            if (status != KVIO_OK)
                return status;
        }
    }
    const kvio_opt_list_t *tier_list = &run->serve->kvcache.tiers;
    if (tier_list->count > 0) {
        setup->tiers = calloc(tier_list->count, sizeof(*setup->tiers));
        if (setup->tiers == NULL)
            return KVIO_ERR_NOMEM;
    }
    /* Each rank keeps its own blocks, apart from every other run's: under
     * names made of this process's id (wall clock and pid) and the rank (a
     * key prefix, a directory of the path). */
    char id[24];
    snprintf(id, sizeof(id), "%llx-%x", (unsigned long long)process_id_ns(), (unsigned)getpid());
    for (size_t t = 0; t < tier_list->count; t++) {
        kvio_tier_config_t config = ((const kvio_tier_config_t *)tier_list->items)[t];
        config.device_index = device != NULL ? device->index : -1;
        config.device_rank = (int)(run->first_serve_rank + rank);
        config.run_id = id;
        config.rank = rank;
        uint64_t object_bytes = block_bytes * kvio_serve_chunk_blocks(&run->serve->kvcache);
        if (kvio_tier_is_shared(&config)) {
            kvio_status_t status = open_shared(run, num_serve, &config, object_bytes, setup,
                                               error_p, error_len);
            if (status != KVIO_OK)
                return status;
            config.shared_endpoint = setup->shared;
        }
        kvio_status_t status = kvio_tier_create(&config, object_bytes, true, &setup->tiers[t],
                                                error_p, error_len);
        if (status != KVIO_OK)
            return status;
        setup->num_tiers++;
    }
    return KVIO_OK;
}

kvio_status_t kvio_serve_memory_close(kvio_serve_memory_t *setup, char *error_p,
                                      size_t error_len)
{
    if (setup->shared == NULL)
        return KVIO_OK;
    kvio_status_t status = kvio_shared_endpoint_stop(setup->shared);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "%s", kvio_shared_endpoint_error(setup->shared));
    return status;
}

void kvio_serve_memory_destroy(kvio_serve_memory_t *setup)
{
    for (size_t t = 0; t < setup->num_tiers; t++)
        kvio_tier_destroy(setup->tiers[t]);
    free(setup->tiers);
    kvio_shared_endpoint_destroy(setup->shared); /* after kvio_serve_memory_close */
    if (setup->memory != NULL && setup->device != NULL &&
        kvio_device_kind(setup->device) != KVIO_MEMORY_HOST)
        kvio_device_free(setup->device, setup->memory);
    else
        kvio_fault_in_free(setup->memory, setup->memory_bytes);
    if (setup->swap_space != NULL && setup->swap_pinned)
        kvio_device_host_free(setup->device, setup->swap_space);
    else
        kvio_fault_in_free(setup->swap_space, setup->swap_bytes);
    kvio_device_destroy(setup->device);
    memset(setup, 0, sizeof(*setup));
}

/* Device memory a rank's spin kernel streams over (0: none, or no spin). */
uint64_t kvio_serve_memory_spin_bytes(const kvio_serve_memory_t *setup,
                                      const kvio_serve_run_t *run)
{
    return setup->spin && run->device != NULL ? run->device->spin_bytes : 0;
}

/* Where a rank's KV pool lives, for the results. */
const char *kvio_serve_memory_where(const kvio_serve_memory_t *setup)
{
    if (setup->generated)
        return "generated (no memory: each block's bytes made when read)";
    return setup->device != NULL ? kvio_device_describe(setup->device) : "host";
}

/* serve.kvcache.pool_memory: generated: a pool with no memory is neither on
 * a device nor staged for P/D (both read its memory). */
static kvio_status_t check_generated(const kvio_serve_run_t *run, char *error_p,
                                     size_t error_len)
{
    if (run->serve->kvcache.pool_memory != KVIO_POOL_MEMORY_GENERATED)
        return KVIO_OK;
    const char *clash = run->device != NULL && run->device->memory != KVIO_MEMORY_HOST
                            ? "device.memory other than host (the pool would be its memory)"
                        : run->pd != NULL ? "pd (its staging copies the pool's memory)"
                                          : NULL;
    if (clash == NULL)
        return KVIO_OK;
    snprintf(error_p, error_len, "serve.kvcache.pool_memory: generated keeps no pool memory: "
             "not with %s; set pool_memory: resident", clash);
    return KVIO_ERR_CONFIG;
}

kvio_status_t kvio_serve_emulate_preflight(const kvio_serve_run_t *run, uint64_t *host_bytes_p,
                                           char *error_p, size_t error_len)
{
    kvio_status_t checked = check_generated(run, error_p, error_len);
    if (checked != KVIO_OK)
        return checked;
    uint32_t blocks = 0;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                kvio_cost_gpus(run->cost), &blocks, error_p,
                                                error_len);
    if (status != KVIO_OK)
        return status;
    uint32_t num_ranks = run->num_ranks > 0 ? run->num_ranks : 1;
    uint64_t block_bytes = kvio_model_kv_bytes_per_token(run->model, kvio_cost_gpus(run->cost)) *
                           (uint64_t)run->serve->kvcache.block_size;
    uint64_t pool = (uint64_t)(blocks + 1) * block_bytes;
    uint64_t swap = run->serve->engine.preemption == KVIO_PREEMPT_SWAP
                        ? swap_space_bytes(run->serve, pool)
                        : 0;
    /* Host tiers hold their blocks in this process's memory too, each rank
     * its own arena. */
    uint64_t host_tiers = 0;
    const kvio_opt_list_t *tiers = &run->serve->kvcache.tiers;
    for (size_t i = 0; i < tiers->count; i++) {
        const kvio_tier_config_t *tier = (const kvio_tier_config_t *)tiers->items + i;
        if (kvio_tier_in_memory(tier))
            host_tiers = host_tiers > UINT64_MAX - tier->size ? UINT64_MAX
                                                              : host_tiers + tier->size;
    }
    /* Saturating: a size of exabytes is refused, not wrapped to a small one.
     * A generated pool takes no memory. */
    bool generated = run->serve->kvcache.pool_memory == KVIO_POOL_MEMORY_GENERATED;
    uint64_t per_rank = (generated ? 0 : pool) + swap;
    per_rank = per_rank > UINT64_MAX - host_tiers ? UINT64_MAX : per_rank + host_tiers;
    uint64_t needed = per_rank > UINT64_MAX / num_ranks ? UINT64_MAX : per_rank * num_ranks;
    /* P/D: each prefill rank's staging buffer, as large as its pool unless
     * pd.staging says. */
    uint64_t staging = run->pd == NULL ? 0 : run->pd->staging > 0 ? run->pd->staging : pool;
    /* Pull: one per prefill rank; push: one per prefill rank in each decode
     * rank's inbox. */
    uint64_t copies = run->pd == NULL ? 0
                      : run->pd->transfer == KVIO_PD_PUSH
                          ? (uint64_t)run->num_prefill * (num_ranks - run->num_prefill)
                          : run->num_prefill;
    uint64_t stagings = copies > 0 && staging > UINT64_MAX / copies ? UINT64_MAX
                                                                    : staging * copies;
    needed = needed > UINT64_MAX - stagings ? UINT64_MAX : needed + stagings;
    uint64_t available = 0;
    char unused[128];
    if (kvio_mem_available(&available, unused, sizeof(unused)) != KVIO_OK)
        available = 0; /* unknown: no check */
    kvio_device_info_t info;
    char reason[256];
    if (run->device != NULL && run->device->memory == KVIO_MEMORY_CUDA &&
        kvio_device_query((int)run->device->index, &info, reason, sizeof(reason)) == KVIO_OK) {
        /* GPU pools: the ranks sharing a device must fit it together
         * (cudaMalloc says so too, but this names the numbers before anything
         * starts); only the swap space is host memory. */
        uint32_t sharing = run->device->index >= 0 || info.count < 1
                               ? num_ranks
                               : (num_ranks + (uint32_t)info.count - 1) / (uint32_t)info.count;
        uint64_t spin_bytes = run->device->spin ? run->device->spin_bytes : 0;
        uint64_t per_device = (pool + spin_bytes) * sharing;
        if (per_device > info.memory_bytes / 10 * 9) {
            snprintf(error_p, error_len,
                     "emulate: %u KV pool(s) of %.2f GiB (and spin memory) share CUDA device %d "
                     "(%s), which has %.2f GiB; set serve.kvcache.capacity or "
                     "serve.kvcache.blocks (or device.spin_bytes)",
                     sharing, (double)(pool + spin_bytes) / 1073741824.0, info.index, info.name,
                     (double)info.memory_bytes / 1073741824.0);
            return KVIO_ERR_CONFIG;
        }
        if (available > 0 && (swap + host_tiers) * num_ranks > available / 10 * 8) {
            snprintf(error_p, error_len,
                     "emulate: the pinned swap space and host tiers need %.2f GiB (%u ranks x "
                     "(%.2f + %.2f GiB)) but this machine has %.2f GiB available; set "
                     "serve.kvcache.swap_space or the host tiers' size (at most 80%% of it)",
                     (double)((swap + host_tiers) * num_ranks) / 1073741824.0, num_ranks,
                     (double)swap / 1073741824.0, (double)host_tiers / 1073741824.0,
                     (double)available / 1073741824.0);
            return KVIO_ERR_CONFIG;
        }
        if (host_bytes_p != NULL)
            *host_bytes_p = (swap + host_tiers) * num_ranks;
        return KVIO_OK;
    }
    /* Refuse, with the numbers, pools this machine cannot hold. */
    if (available > 0 && needed > available / 10 * 8) {
        char stagings_text[96] = "";
        if (stagings > 0)
            snprintf(stagings_text, sizeof(stagings_text),
                     " + %llu P/D staging buffers of %.2f GiB (pd.staging)",
                     (unsigned long long)copies, (double)staging / 1073741824.0);
        snprintf(error_p, error_len,
                 "emulate: the KV pools need %.2f GiB (%u ranks x (%u blocks x %llu bytes + swap "
                 "space + %.2f GiB of host tiers))%s but this machine has %.2f GiB available; "
                 "set serve.kvcache.capacity or serve.kvcache.blocks, or the host tiers' size "
                 "(at most 80%% of it)",
                 (double)needed / 1073741824.0, num_ranks, generated ? 0 : blocks + 1,
                 (unsigned long long)block_bytes, (double)host_tiers / 1073741824.0,
                 stagings_text, (double)available / 1073741824.0);
        return KVIO_ERR_CONFIG;
    }
    if (host_bytes_p != NULL)
        *host_bytes_p = needed;
    return KVIO_OK;
}

