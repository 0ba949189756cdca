/* Emulate mode: the same engine in real time. Each serve rank is a rank of
 * the runtime (a thread of the local runtime, or an MPI process in the
 * coupled run) with real KV memory (its blocks are host memory of the
 * model's block size) and its lower tiers; an iteration takes the cost
 * model's time for real (sleep, then spin the last stretch); swaps and tier
 * traffic really copy. With several serve ranks a client rank generates the
 * stream in real time and routes each request from the state the ranks
 * publish (serve/client.c); one serve rank takes its stream itself. The
 * plain run and the coupled run share the serve ranks, the client and the
 * merge of their reports; one mechanism moves requests and state. */
#include "kvio/serve.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"
#include "kvio/log.h"
#include "kvio/progress.h"
#include "kvio/sysinfo.h"
#include "kvio/wire.h"
#include "serve/loop_int.h"


/* Thread CPU time: the engine's own work, not time the OS took away. */
static int64_t thread_cpu_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Sharpens this thread's waits: no timer slack, and SCHED_FIFO when asked
 * (needs root or CAP_SYS_NICE; a warning otherwise). */
static void tune_thread(bool realtime, uint32_t rank)
{
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    if (!realtime)
        return;
    struct sched_param param = {.sched_priority = 10};
    int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
    if (err != 0)
        kvio_warn("serve rank %u: cannot use SCHED_FIFO (%s); timing will be looser", rank,
                  strerror(err));
}

/* How closely a rank's iterations ended when planned, and what the engine
 * itself cost (plain and coupled runs alike). */
typedef struct iteration_timing {
    kvio_hist_t *error_ns;  /* |actual − planned| end of an iteration */
    kvio_hist_t *error_ppm; /* the same per million of the iteration's length */
    int64_t overhead_ns;    /* the engine's own schedule + complete CPU time */
    int64_t planned_ns;     /* Σ iteration durations */
} iteration_timing_t;

static kvio_status_t timing_init(iteration_timing_t *timing)
{
    memset(timing, 0, sizeof(*timing));
    if (kvio_hist_create(&timing->error_ns) != KVIO_OK ||
        kvio_hist_create(&timing->error_ppm) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    return KVIO_OK;
}

/* An iteration planned for duration_ns ended error_ns off its planned end. */
static void timing_record(iteration_timing_t *timing, int64_t duration_ns, int64_t error_ns)
{
    uint64_t off = (uint64_t)(error_ns > 0 ? error_ns : -error_ns);
    kvio_hist_record(timing->error_ns, off);
    if (duration_ns > 0)
        kvio_hist_record(timing->error_ppm, (uint64_t)((double)off * 1e6 / (double)duration_ns));
    timing->planned_ns += duration_ns;
}

static void timing_fini(iteration_timing_t *timing)
{
    kvio_hist_destroy(timing->error_ns);
    kvio_hist_destroy(timing->error_ppm);
}

/* What one serve rank runs on: real KV memory, its tiers and its engine. */
typedef struct rank_setup {
    kvio_engine_t *engine;
    void *memory;
    size_t memory_bytes;
    void *swap_space;        /* swap preemption: the host swap space */
    bool swap_pinned;        /* swap_space is pinned memory of device (a GPU pool) */
    size_t swap_bytes;
    kvio_device_t *device;   /* device.memory pinned or cuda: the pool's domain
                                (memory is its allocation); NULL: mmap'd host */
    bool spin;               /* a spin kernel runs for each iteration */
    kvio_executor_t executor; /* gpu with a spin kernel, else realtime */
    kvio_tier_t **tiers;
    size_t num_tiers;
} rank_setup_t;

/* A plain memcpy of as many whole blocks as the rank swapped (at most 64)
 * between its pool and swap space, after the run: what the swap copies
 * compare with (swap_reference_copy_gbps). */
static void reference_copy(const rank_setup_t *setup, uint64_t block_bytes,
                           uint64_t swapped_bytes, uint64_t *bytes_p, int64_t *ns_p)
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

static kvio_status_t setup_create(const kvio_serve_run_t *run, uint32_t rank, uint32_t blocks,
                                  uint64_t block_bytes, const kvio_cost_t *cost,
                                  kvio_engine_observer_t observer, rank_setup_t *setup,
                                  char *error_p, size_t error_len)
{
    memset(setup, 0, sizeof(*setup));
    setup->memory_bytes = (size_t)(blocks + 1) * block_bytes;
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
    } else if ((setup->memory = mmap(NULL, setup->memory_bytes, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) {
        setup->memory = NULL;
        snprintf(error_p, error_len, "serve rank %u: cannot map %zu bytes of KV memory: %s",
                 rank, setup->memory_bytes, strerror(errno));
        return KVIO_ERR_NOMEM;
    }
    /* Touch every page now so the pool is real memory, not a promise (an
     * allocation in a domain is zeroed already); in huge pages where the
     * kernel has them (a GPU's memory is not paged in 4 KiB either, and a
     * large pool faults in far faster). */
    if (setup->device == NULL || kvio_device_kind(setup->device) == KVIO_MEMORY_HOST) {
        madvise(setup->memory, setup->memory_bytes, MADV_HUGEPAGE);
        memset(setup->memory, 0, setup->memory_bytes);
    }
    setup->executor = (kvio_executor_t){
        .ops = kvio_executor_find(setup->spin ? "gpu" : "realtime"), .device = setup->device};
    uint32_t swap_blocks = 0;
    bool gpu_pool = setup->device != NULL && kvio_device_kind(setup->device) == KVIO_MEMORY_CUDA;
    if (run->serve->engine.preemption == KVIO_PREEMPT_SWAP) {
        setup->swap_bytes = swap_space_bytes(run->serve, setup->memory_bytes);
        swap_blocks = (uint32_t)(setup->swap_bytes / block_bytes);
        setup->swap_bytes = (size_t)swap_blocks * block_bytes;
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
            setup->swap_space = mmap(NULL, setup->swap_bytes, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (setup->swap_space == MAP_FAILED) {
                setup->swap_space = NULL;
                snprintf(error_p, error_len, "serve rank %u: cannot map %zu bytes of swap space",
                         rank, setup->swap_bytes);
                return KVIO_ERR_NOMEM;
            }
            madvise(setup->swap_space, setup->swap_bytes, MADV_HUGEPAGE);
            memset(setup->swap_space, 0, setup->swap_bytes);
        }
    }
    const kvio_opt_list_t *tier_list = &run->serve->kvcache.tiers;
    if (tier_list->count > 0) {
        setup->tiers = calloc(tier_list->count, sizeof(*setup->tiers));
        if (setup->tiers == NULL)
            return KVIO_ERR_NOMEM;
    }
    for (size_t t = 0; t < tier_list->count; t++) {
        kvio_tier_config_t config = ((const kvio_tier_config_t *)tier_list->items)[t];
        config.device_index = device != NULL ? device->index : -1;
        config.device_rank = (int)(run->first_serve_rank + rank);
        char prefix[256], path[1024], id[24];
        /* Each rank keeps its own blocks, apart from every other run's: its
         * own key prefix and directory, named by this process's id (wall
         * clock and pid) and the rank. */
        snprintf(id, sizeof(id), "%llx-%x", (unsigned long long)process_id_ns(),
                 (unsigned)getpid());
        snprintf(prefix, sizeof(prefix), "%s%s:r%u:",
                 config.key_prefix ? config.key_prefix : "kvio:kv:", id, rank);
        config.key_prefix = prefix;
        if (config.path != NULL) {
            /* The configured directory holds every rank's; made when only its
             * parent exists (and left, empty, at the end). */
            if (mkdir(config.path, 0755) != 0 && errno != EEXIST) {
                snprintf(error_p, error_len, "serve.kvcache.tiers[%zu].path %s: cannot create "
                         "it: %s", t, config.path, strerror(errno));
                return kvio_status_from_errno(errno);
            }
            snprintf(path, sizeof(path), "%s/kvio-%s-rank%u", config.path, id, rank);
            config.path = path;
        }
        kvio_status_t status = kvio_tier_create(&config, block_bytes, true, &setup->tiers[t],
                                                error_p, error_len);
        if (status != KVIO_OK)
            return status;
        setup->num_tiers++;
    }
    kvio_engine_params_t params = {
        .config = &run->serve->engine,
        .num_blocks = blocks,
        .block_size = (uint32_t)run->serve->kvcache.block_size,
        .prefix_caching = run->serve->kvcache.prefix_caching,
        .free_order = run->serve->kvcache.free_order,
        .index = run->serve->kvcache.index,
        .eviction = run->serve->kvcache.eviction,
        .sched = &run->serve->scheduler,
        .seed = run->seed + rank,
        .cost = cost,
        .kv_bytes_per_token = kvio_model_kv_bytes_per_token(run->model, run->cost->tensor_parallel),
        .host_bandwidth = run->gpu->host_bandwidth,
        .slo = run->slo,
        .rank = (uint32_t)run->first_serve_rank + rank,
        .observer = observer,
        .kv_memory = setup->memory,
        .kv_device = setup->device != NULL && kvio_device_kind(setup->device) == KVIO_MEMORY_CUDA
                         ? setup->device
                         : NULL,
        .block_bytes = block_bytes,
        .verify_swaps = run->serve->kvcache.verify_swaps,
        .swap_space = setup->swap_space,
        .swap_space_blocks = swap_blocks,
        .tiers = setup->tiers,
        .num_tiers = setup->num_tiers,
        .update_cache = run->update != NULL ? run->update->on_activate.cache : 0,
        .in_flight = run->update != NULL ? run->update->in_flight : 0,
    };
    return kvio_engine_create(&params, &setup->engine, error_p, error_len);
}

static void setup_destroy(rank_setup_t *setup)
{
    kvio_engine_destroy(setup->engine);
    for (size_t t = 0; t < setup->num_tiers; t++)
        kvio_tier_destroy(setup->tiers[t]);
    free(setup->tiers);
    if (setup->memory != NULL && setup->device != NULL &&
        kvio_device_kind(setup->device) != KVIO_MEMORY_HOST)
        kvio_device_free(setup->device, setup->memory);
    else if (setup->memory != NULL)
        munmap(setup->memory, setup->memory_bytes);
    if (setup->swap_space != NULL && setup->swap_pinned)
        kvio_device_host_free(setup->device, setup->swap_space);
    else if (setup->swap_space != NULL)
        munmap(setup->swap_space, setup->swap_bytes);
    kvio_device_destroy(setup->device);
    memset(setup, 0, sizeof(*setup));
}

/* Device memory a rank's spin kernel streams over (0: none, or no spin). */
static uint64_t spin_memory(const rank_setup_t *setup, const kvio_serve_run_t *run)
{
    return setup->spin && run->device != NULL ? run->device->spin_bytes : 0;
}

/* Where a rank's KV pool lives, for the results. */
static const char *setup_memory(const rank_setup_t *setup)
{
    return setup->device != NULL ? kvio_device_describe(setup->device) : "host";
}

/* The executor's section of the metrics, for the plain and coupled runs:
 * where the KV pool was (kv_memory may be NULL: unknown), the spin, the
 * timing errors and the engine's overhead. */
static json_t *executor_object(const char *executor, const char *kv_memory, bool spin,
                               uint64_t spin_bytes, const kvio_hist_t *error_ns,
                               const kvio_hist_t *error_ppm, int64_t overhead, int64_t planned)
{
    return json_pack("{s:s, s:s?, s:b, s:I, s:f, s:f, s:f, s:f}", "executor", executor,
                     "kv_memory", kv_memory, "spin_kernel", spin, "spin_memory_bytes",
                     (json_int_t)spin_bytes, "timing_error_p50_us",
                     kvio_hist_quantile(error_ns, 0.5) / 1e3, "timing_error_p99_us",
                     kvio_hist_quantile(error_ns, 0.99) / 1e3, "timing_error_p99_pct",
                     kvio_hist_quantile(error_ppm, 0.99) / 1e4, "engine_overhead_pct",
                     planned > 0 ? 100.0 * (double)overhead / (double)planned : 0);
}

kvio_status_t kvio_serve_emulate_preflight(const kvio_serve_run_t *run, uint64_t *host_bytes_p,
                                           char *error_p, size_t error_len)
{
    uint32_t blocks = 0;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                run->cost->tensor_parallel, &blocks, error_p,
                                                error_len);
    if (status != KVIO_OK)
        return status;
    uint32_t num_ranks = run->num_ranks > 0 ? run->num_ranks : 1;
    uint64_t block_bytes = kvio_model_kv_bytes_per_token(run->model, run->cost->tensor_parallel) *
                           (uint64_t)run->serve->kvcache.block_size;
    uint64_t pool = (uint64_t)(blocks + 1) * block_bytes;
    uint64_t swap = run->serve->engine.preemption == KVIO_PREEMPT_SWAP
                        ? swap_space_bytes(run->serve, pool)
                        : 0;
    uint64_t needed = (pool + swap) * num_ranks;
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
        if (available > 0 && swap * num_ranks > available / 10 * 8) {
            snprintf(error_p, error_len,
                     "emulate: the pinned swap space needs %.2f GiB (%u ranks x %.2f GiB) but "
                     "this machine has %.2f GiB available; set serve.kvcache.swap_space (at "
                     "most 80%% of it)",
                     (double)(swap * num_ranks) / 1073741824.0, num_ranks,
                     (double)swap / 1073741824.0, (double)available / 1073741824.0);
            return KVIO_ERR_CONFIG;
        }
        if (host_bytes_p != NULL)
            *host_bytes_p = swap * num_ranks;
        return KVIO_OK;
    }
    /* Refuse, with the numbers, pools this machine cannot hold. */
    if (available > 0 && needed > available / 10 * 8) {
        snprintf(error_p, error_len,
                 "emulate: the KV pools need %.2f GiB (%u ranks x (%u blocks x %llu bytes + swap space)) but "
                 "this machine has %.2f GiB available; set serve.kvcache.capacity or "
                 "serve.kvcache.blocks (at most 80%% of it)",
                 (double)needed / 1073741824.0, num_ranks, blocks + 1,
                 (unsigned long long)block_bytes, (double)available / 1073741824.0);
        return KVIO_ERR_CONFIG;
    }
    if (host_bytes_p != NULL)
        *host_bytes_p = needed;
    return KVIO_OK;
}

/* ---------- a serve rank inside the coupled run ---------- */

#define SERVE_RANK_MAGIC 0x6b76696f73727632ull /* "kviosrv2" */

struct kvio_serve_rank {
    const kvio_serve_run_t *run;
    uint32_t serve_index, num_serve;
    uint32_t blocks, block_size;
    uint64_t block_bytes;
    kvio_cost_t *cost;
    rank_setup_t setup;
    const kvio_request_t *next;
    uint64_t stream_index;
    kvio_hash_buffer_t hashes;
    bool started;
    int64_t origin_ns;       /* rank 0's clock when serving began */
    int64_t planned_end_ns;
    int64_t iteration_start_ns;
    iteration_timing_t timing;
    char *rows;              /* requests.csv rows */
    size_t rows_length, rows_capacity;
    uint64_t *served;        /* finished requests per model version */
    size_t num_versions;
    unsigned char *iterations; /* iteration records for iterations.csv and events */
    size_t iterations_length, iterations_capacity;
    uint64_t iterations_dropped; /* past iterations_limit */
    size_t iterations_limit;     /* bytes of records kept (the message limit to rank 0) */
    int64_t setup_wait_ns;       /* waiting for run->setup_lock: not this rank's set-up */
    /* With a client rank: requests come from it, state goes to it. */
    kvio_serve_publisher_t publisher;
    bool client_ended;       /* its last batch has arrived */
    bool origin_known;       /* origin_ns is the client's time zero */
    uint64_t version;        /* active model version, for requests being added */
    char error[640];         /* why begin or end failed */
};

/* One iteration as rank 0 needs it: the engine's record and the size of
 * its batch, followed by the batch's first request ids (for --event-trace,
 * as many as an event shows: record_ids() of them). */
typedef struct iteration_record {
    kvio_engine_iteration_t iteration;
    uint32_t batch_size;
    uint32_t reserved;
} iteration_record_t;

static size_t record_ids(uint32_t batch_size)
{
    return batch_size < KVIO_EVENT_MAX_REQUEST_IDS ? batch_size : KVIO_EVENT_MAX_REQUEST_IDS;
}

/* Iteration records a rank keeps (its blob to rank 0 must stay below the
 * runtime's message limit); later ones are counted, not kept. */
#define ITERATIONS_MAX_BYTES (8u << 20)

static void coupled_iteration(void *context, uint32_t rank_index,
                              const kvio_engine_iteration_t *iteration)
{
    kvio_serve_rank_t *rank = context;
    (void)rank_index;
    const kvio_engine_scheduled_t *items = NULL;
    size_t count = 0;
    kvio_engine_last_scheduled(rank->setup.engine, &items, &count);
    iteration_record_t record = {.iteration = *iteration, .batch_size = (uint32_t)count};
    size_t num_ids = record_ids(record.batch_size);
    size_t size = sizeof(record) + num_ids * sizeof(uint64_t);
    if (rank->iterations_length + size > rank->iterations_limit) {
        rank->iterations_dropped++;
        return;
    }
    if (rank->iterations_length + size > rank->iterations_capacity) {
        size_t capacity = rank->iterations_capacity ? 2 * rank->iterations_capacity
                                                    : 256 * sizeof(iteration_record_t);
        unsigned char *bigger = realloc(rank->iterations, capacity);
        if (bigger == NULL) {
            rank->iterations_dropped++;
            return;
        }
        rank->iterations = bigger;
        rank->iterations_capacity = capacity;
    }
    unsigned char *at = rank->iterations + rank->iterations_length;
    memcpy(at, &record, sizeof(record));
    at += sizeof(record);
    for (size_t i = 0; i < num_ids; i++, at += sizeof(uint64_t))
        memcpy(at, &items[i].id, sizeof(uint64_t));
    rank->iterations_length += size;
}

static void coupled_cache(void *context, kvio_hash_t hash, bool cached)
{
    kvio_serve_rank_t *rank = context;
    kvio_serve_publisher_note(&rank->publisher, hash, cached);
}

static void coupled_finish(void *context, const kvio_engine_finished_t *finished)
{
    kvio_serve_rank_t *rank = context;
    if (finished->tag >= rank->num_versions) {
        size_t count = finished->tag + 16;
        uint64_t *bigger = realloc(rank->served, count * sizeof(*bigger));
        if (bigger != NULL) {
            memset(bigger + rank->num_versions, 0,
                   (count - rank->num_versions) * sizeof(*bigger));
            rank->served = bigger;
            rank->num_versions = count;
        }
    }
    if (finished->tag < rank->num_versions)
        rank->served[finished->tag]++;
    char row[256];
    int length = kvio_serve_request_row(finished, row, sizeof(row) - 1);
    if (length <= 0 || (size_t)length >= sizeof(row) - 1)
        return;
    row[length++] = '\n';
    if (rank->rows_length + (size_t)length + 1 > rank->rows_capacity) {
        size_t capacity = (rank->rows_capacity + (size_t)length + 1) * 2;
        char *bigger = realloc(rank->rows, capacity);
        if (bigger == NULL)
            return;
        rank->rows = bigger;
        rank->rows_capacity = capacity;
    }
    memcpy(rank->rows + rank->rows_length, row, (size_t)length);
    rank->rows_length += (size_t)length;
}

/* Requests come from a client rank (not this rank's own stream). */
static bool has_client(const kvio_serve_run_t *run)
{
    return run->client_rank > 0 && run->rte != NULL;
}

kvio_status_t kvio_serve_rank_create(const kvio_serve_run_t *run, uint32_t serve_index,
                                     uint32_t num_serve, kvio_serve_rank_t **rank_p,
                                     char *error_p, size_t error_len)
{
    kvio_serve_rank_t *rank = calloc(1, sizeof(*rank));
    if (rank == NULL)
        return KVIO_ERR_NOMEM;
    rank->run = run;
    rank->iterations_limit = ITERATIONS_MAX_BYTES;
    rank->serve_index = serve_index;
    rank->num_serve = num_serve > 0 ? num_serve : 1;
    rank->block_size = (uint32_t)run->serve->kvcache.block_size;
    rank->block_bytes = kvio_model_kv_bytes_per_token(run->model, run->cost->tensor_parallel) *
                        rank->block_size;
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                run->cost->tensor_parallel, &rank->blocks,
                                                error_p, error_len);
    if (status == KVIO_OK && timing_init(&rank->timing) != KVIO_OK)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK)
        status = kvio_cost_create(run->cost, run->model, run->gpu, &rank->cost, error_p,
                                  error_len);
    bool client = has_client(run);
    kvio_engine_observer_t observer = {.context = rank, .on_finish = coupled_finish,
                                       .on_iteration = coupled_iteration,
                                       .on_cache = client ? coupled_cache : NULL};
    if (status == KVIO_OK) {
        int64_t queued_from = (int64_t)kvio_time_ns();
        if (run->setup_lock != NULL)
            pthread_mutex_lock(run->setup_lock);
        rank->setup_wait_ns = (int64_t)kvio_time_ns() - queued_from;
        status = setup_create(run, serve_index, rank->blocks, rank->block_bytes, rank->cost,
                              observer, &rank->setup, error_p, error_len);
        if (run->setup_lock != NULL)
            pthread_mutex_unlock(run->setup_lock);
    }
    if (status == KVIO_OK && !client)
        status = kvio_stream_next(run->stream, &rank->next);
    if (status != KVIO_OK) {
        kvio_serve_rank_destroy(rank);
        return status;
    }
    *rank_p = rank;
    return KVIO_OK;
}

int64_t kvio_serve_rank_setup_wait_ns(const kvio_serve_rank_t *rank)
{
    return rank->setup_wait_ns;
}

void kvio_serve_rank_destroy(kvio_serve_rank_t *rank)
{
    if (rank == NULL)
        return;
    setup_destroy(&rank->setup);
    kvio_cost_destroy(rank->cost);
    timing_fini(&rank->timing);
    free(rank->hashes.hashes);
    free(rank->rows);
    free(rank->served);
    free(rank->iterations);
    kvio_serve_publisher_fini(&rank->publisher);
    free(rank);
}

/* Takes this rank's share of the stream (request i goes to serve rank
 * i mod S) up to time t, tagged with the active model version. */
static kvio_status_t coupled_dispatch(kvio_serve_rank_t *rank, int64_t t, uint64_t version)
{
    const kvio_serve_run_t *run = rank->run;
    kvio_status_t status = KVIO_OK;
    while (status == KVIO_OK && rank->next != NULL && rank->next->arrival_ns <= t) {
        const kvio_request_t *request = rank->next;
        if (rank->stream_index % rank->num_serve == rank->serve_index &&
            request->input_tokens > 0) {
            kvio_engine_request_t engine_request;
            bool measured = t >= run->warmup_ns &&
                            rank->stream_index >= (uint64_t)run->warmup_requests;
            status = kvio_serve_engine_request(request, rank->block_size, t, measured, version,
                                               &rank->hashes, &engine_request);
            if (status == KVIO_OK)
                status = kvio_engine_add(rank->setup.engine, &engine_request);
        }
        rank->stream_index++;
        if (status == KVIO_OK)
            status = kvio_stream_next(run->stream, &rank->next);
    }
    return status;
}

/* One request of a client batch into the engine, tagged with the active
 * version. */
static kvio_status_t coupled_take(void *context, const kvio_engine_request_t *request)
{
    kvio_serve_rank_t *rank = context;
    kvio_engine_request_t tagged = *request;
    tagged.tag = rank->version;
    rank->publisher.received++;
    return kvio_engine_add(rank->setup.engine, &tagged);
}

/* Fails when the client rank is lost before its last batch: failed, ended
 * or silent (no heartbeat) for longer than the runtime's timeout. A client
 * that is alive but slow is waited for. */
static kvio_status_t coupled_client_lost(kvio_serve_rank_t *rank)
{
    const kvio_serve_run_t *run = rank->run;
    char reason[512];
    kvio_status_t status = kvio_rte_peer_check(run->rte, run->client_rank, true,
                                               "its next request batch", reason,
                                               sizeof(reason));
    if (status != KVIO_OK)
        snprintf(rank->error, sizeof(rank->error), "serve rank %u: the client rank is lost: %s",
                 rank->serve_index, reason);
    return status;
}

/* Takes every batch the client has sent; the first sets the time zero. */
static kvio_status_t coupled_receive(kvio_serve_rank_t *rank)
{
    const kvio_serve_run_t *run = rank->run;
    while (!rank->client_ended) {
        void *data = NULL;
        size_t length = 0;
        kvio_status_t status = kvio_rte_try_recv(run->rte, run->client_rank,
                                                 KVIO_SERVE_TAG_REQUESTS, &data, &length);
        if (status == KVIO_INPROGRESS || status == KVIO_ERR_PEER)
            return coupled_client_lost(rank);
        int64_t origin_ns = 0;
        bool last = false;
        if (status == KVIO_OK) {
            status = kvio_serve_batch_read(data, length, coupled_take, rank, &rank->hashes,
                                           &origin_ns, &last);
            if (status == KVIO_ERR_PARSE)
                snprintf(rank->error, sizeof(rank->error),
                         "serve rank %u: a bad request batch from the client rank",
                         rank->serve_index);
        }
        free(data);
        if (status != KVIO_OK)
            return status;
        if (!rank->origin_known) {
            /* Nothing ran before the first batch: adopt the client's clock. */
            rank->origin_known = true;
            rank->origin_ns = origin_ns;
        }
        rank->client_ended = last;
    }
    return KVIO_OK;
}

/* Posts this rank's state to the client (final: serving is over, then
 * waits until everything posted has left). */
static kvio_status_t coupled_publish(kvio_serve_rank_t *rank, bool final)
{
    void *blob = NULL;
    size_t length = 0;
    kvio_status_t status = kvio_serve_publisher_pack(&rank->publisher, rank->setup.engine,
                                                     final, &blob, &length);
    if (status == KVIO_OK)
        status = kvio_rte_post(rank->run->rte, rank->run->client_rank, KVIO_SERVE_TAG_STATE,
                               blob, length);
    free(blob);
    if (status == KVIO_OK && final)
        status = kvio_rte_flush(rank->run->rte);
    if (status != KVIO_OK)
        snprintf(rank->error, sizeof(rank->error),
                 "serve rank %u: publishing its state to the client rank: %s",
                 rank->serve_index, kvio_strerror(status));
    return status;
}

/* Below this a serve rank with a client and nothing to run looks for
 * requests again. */
#define CLIENT_POLL_NS 200000

static kvio_status_t coupled_begin(void *context, int64_t now_ns, uint64_t active_version,
                                   int64_t *end_ns_p, int64_t *idle_until_p, bool *finished_p)
{
    kvio_serve_rank_t *rank = context;
    bool client = has_client(rank->run);
    if (!rank->started) {
        rank->started = true;
        rank->origin_ns = rank->run->t0_ns > 0 ? rank->run->t0_ns : now_ns;
        /* The first state says this rank is ready: the client starts the
         * stream when every serve rank is. */
        if (client) {
            kvio_status_t status = coupled_publish(rank, false);
            if (status != KVIO_OK)
                return status;
        }
    }
    if (active_version != rank->version) {
        /* A new version activated at this iteration boundary. */
        kvio_status_t status = kvio_engine_activate(rank->setup.engine, active_version);
        if (status != KVIO_OK)
            return status;
    }
    rank->version = active_version;
    kvio_status_t status = client ? coupled_receive(rank)
                                  : coupled_dispatch(rank, now_ns - rank->origin_ns,
                                                     active_version);
    if (status != KVIO_OK)
        return status;
    int64_t t = now_ns - rank->origin_ns;
    *end_ns_p = -1;
    if (!kvio_engine_has_work(rank->setup.engine)) {
        if (client && rank->client_ended) {
            *finished_p = true;
            return coupled_publish(rank, true);
        }
        if (client)
            *idle_until_p = now_ns + CLIENT_POLL_NS;
        else if (rank->next == NULL)
            *finished_p = true;
        else
            *idle_until_p = rank->origin_ns + rank->next->arrival_ns;
        return KVIO_OK;
    }
    kvio_engine_iteration_t iteration;
    kvio_serve_step_t step;
    int64_t before_ns = thread_cpu_ns();
    status = kvio_serve_step(rank->setup.engine, t,
                             (uint32_t)rank->run->first_serve_rank + rank->serve_index, true,
                             &iteration, &step, rank->error, sizeof(rank->error));
    rank->timing.overhead_ns += thread_cpu_ns() - before_ns;
    if (status != KVIO_OK)
        return status;
    if (step == KVIO_SERVE_STEP_LENT) {
        *end_ns_p = -1;
        *idle_until_p = now_ns + CLIENT_POLL_NS;
        return KVIO_OK;
    }
    rank->iteration_start_ns = now_ns;
    rank->planned_end_ns = now_ns + iteration.duration_ns;
    *end_ns_p = rank->planned_end_ns;
    /* The time passes in the update receiver's loop, which works on the
     * incoming version meanwhile (kvio_update_serve_with). */
    kvio_executor_t *executor = &rank->setup.executor;
    status = executor->ops->compute(executor, iteration.duration_ns);
    if (status != KVIO_OK)
        kvio_error("serve rank %u: %s", rank->serve_index, kvio_device_error(rank->setup.device));
    return status;
}

static kvio_status_t coupled_end(void *context, int64_t now_ns)
{
    kvio_serve_rank_t *rank = context;
    timing_record(&rank->timing, rank->planned_end_ns - rank->iteration_start_ns,
                  now_ns - rank->planned_end_ns);
    int64_t before_ns = thread_cpu_ns();
    kvio_engine_complete(rank->setup.engine, now_ns - rank->origin_ns);
    rank->timing.overhead_ns += thread_cpu_ns() - before_ns;
    if (has_client(rank->run))
        return coupled_publish(rank, false);
    return KVIO_OK;
}

static const char *coupled_error(void *context)
{
    const kvio_serve_rank_t *rank = context;
    return rank->error;
}

static kvio_status_t coupled_lend(void *context, uint64_t bytes)
{
    kvio_serve_rank_t *rank = context;
    return kvio_engine_reserve(rank->setup.engine,
                               kvio_serve_lent_blocks(rank->run->update, bytes, rank->block_bytes));
}

static bool coupled_drained(void *context)
{
    kvio_serve_rank_t *rank = context;
    return kvio_engine_drain(rank->setup.engine);
}

void kvio_serve_rank_server(kvio_serve_rank_t *rank, kvio_update_server_t *server_p)
{
    server_p->context = rank;
    server_p->drained = coupled_drained;
    server_p->lend = coupled_lend;
    server_p->begin = coupled_begin;
    server_p->end = coupled_end;
    server_p->error = coupled_error;
}

/* A serve rank's report to rank 0: its engine metrics, requests served per
 * version, requests.csv rows, timing, its tiers and KV memory (JSON text),
 * then its iteration records (kvio/wire.h; read by kvio_serve_ranks_merge). */
kvio_status_t kvio_serve_rank_pack(const kvio_serve_rank_t *rank, void **blob_p, size_t *length_p)
{
    void *metrics = NULL;
    size_t metrics_length = 0;
    kvio_status_t status = kvio_engine_metrics_pack(kvio_engine_metrics(rank->setup.engine),
                                                    &metrics, &metrics_length);
    if (status != KVIO_OK)
        return status;
    kvio_wire_writer_t out = {0};
    kvio_wire_put_u64(&out, SERVE_RANK_MAGIC);
    kvio_wire_put_blob(&out, metrics, metrics_length);
    free(metrics);
    kvio_wire_put_u64(&out, rank->num_versions);
    kvio_wire_put(&out, rank->served, rank->num_versions * sizeof(uint64_t));
    kvio_wire_put_blob(&out, rank->rows, rank->rows_length);
    kvio_wire_put_i64(&out, rank->timing.overhead_ns);
    kvio_wire_put_i64(&out, rank->timing.planned_ns);
    const kvio_hist_t *hists[2] = {rank->timing.error_ns, rank->timing.error_ppm};
    for (int h = 0; h < 2 && out.status == KVIO_OK; h++) {
        unsigned char *packed = malloc(kvio_hist_packed_size(hists[h]));
        if (packed == NULL) {
            kvio_wire_writer_fini(&out);
            return KVIO_ERR_NOMEM;
        }
        kvio_wire_put_blob(&out, packed, kvio_hist_pack(hists[h], packed));
        free(packed);
    }
    /* The rank's tiers and where its KV pool lives, as JSON text. */
    json_t *tiers = json_array();
    kvio_serve_tiers_json(rank->setup.tiers, rank->setup.num_tiers, rank->serve_index, tiers);
    json_t *about = json_pack("{s:o, s:s, s:b, s:I}", "tiers", tiers, "kv_memory",
                              setup_memory(&rank->setup), "spin_kernel", rank->setup.spin,
                              "spin_memory_bytes", (json_int_t)spin_memory(&rank->setup,
                                                                           rank->run));
    char *about_text = about != NULL ? json_dumps(about, JSON_COMPACT) : NULL;
    json_decref(about);
    kvio_wire_put_blob(&out, about_text, about_text != NULL ? strlen(about_text) : 0);
    free(about_text);
    kvio_wire_put_u64(&out, rank->iterations_dropped);
    kvio_wire_put_f64(&out, rank->run->gpu->host_bandwidth);
    kvio_wire_put_blob(&out, rank->iterations, rank->iterations_length);
    return kvio_wire_finish(&out, blob_p, length_p);
}

/* Writes a serve rank's iteration records (length bytes) as iterations.csv
 * rows and iteration events. */
static kvio_status_t merge_iterations(const void *records, size_t length, double host_bandwidth,
                                      uint32_t rank, kvio_csv_t *csv,
                                      kvio_event_trace_t *events)
{
    kvio_wire_reader_t in = kvio_wire_reader(records, length);
    while (kvio_wire_left(&in) > 0) {
        iteration_record_t record;
        uint64_t ids[KVIO_EVENT_MAX_REQUEST_IDS];
        if (!kvio_wire_get(&in, &record, sizeof(record)) ||
            !kvio_wire_get(&in, ids, record_ids(record.batch_size) * sizeof(uint64_t)))
            break;
        if (csv != NULL)
            kvio_serve_iteration_row(csv, rank, &record.iteration);
        /* The whole batch's size; only its first ids were kept. */
        kvio_serve_trace_iteration_ids(events, rank, &record.iteration, ids, record.batch_size,
                                       host_bandwidth);
    }
    return kvio_wire_status(&in);
}

/* One serve rank's report (kvio_serve_rank_pack) into the run's totals. */
typedef struct rank_totals {
    kvio_engine_metrics_t *total;
    json_t *per_rank, *tiers;
    json_t *kv_memory; /* the first serve rank's, as executor_json says */
    bool spin_kernel;
    json_int_t spin_bytes;
    uint64_t **served;
    size_t *num_versions;
    int64_t overhead, planned;
    kvio_hist_t *error_ns, *error_ppm;
    uint64_t iterations_dropped;
} rank_totals_t;

static kvio_status_t merge_rank(const void *blob, size_t length, uint32_t rank,
                                kvio_csv_t *csv, kvio_csv_t *iterations_csv,
                                kvio_event_trace_t *events, rank_totals_t *totals)
{
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    uint64_t magic = 0, metrics_size = 0, versions = 0, rows_size = 0, about_size = 0;
    uint64_t dropped = 0, records_size = 0;
    if (kvio_wire_get_u64(&in, &magic) && magic != SERVE_RANK_MAGIC)
        kvio_wire_refuse(&in);
    const void *metrics = kvio_wire_take_blob(&in, &metrics_size);
    kvio_status_t status = kvio_wire_status(&in);
    kvio_engine_metrics_t rank_metrics;
    if (status == KVIO_OK && (status = kvio_engine_metrics_init(&rank_metrics)) == KVIO_OK) {
        size_t used = 0;
        status = kvio_engine_metrics_unpack_merge(&rank_metrics, metrics, metrics_size, &used);
        if (status == KVIO_OK) {
            kvio_engine_metrics_merge(totals->total, &rank_metrics);
            json_array_append_new(totals->per_rank, kvio_serve_metrics_json(&rank_metrics));
        }
        kvio_engine_metrics_fini(&rank_metrics);
    }
    kvio_wire_get_u64(&in, &versions);
    const unsigned char *served = kvio_wire_take_array(&in, versions, sizeof(uint64_t));
    if (status == KVIO_OK && served != NULL && versions > *totals->num_versions) {
        uint64_t *bigger = realloc(*totals->served, versions * sizeof(uint64_t));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        memset(bigger + *totals->num_versions, 0,
               (versions - *totals->num_versions) * sizeof(uint64_t));
        *totals->served = bigger;
        *totals->num_versions = versions;
    }
    for (uint64_t v = 0; status == KVIO_OK && served != NULL && v < versions; v++) {
        uint64_t value;
        memcpy(&value, served + v * sizeof(value), sizeof(value));
        (*totals->served)[v] += value;
    }
    const char *rows = kvio_wire_take_blob(&in, &rows_size);
    /* Rows arrive as text; strip the last newline (kvio_csv_line adds one). */
    if (status == KVIO_OK && rows != NULL && csv != NULL && rows_size > 0)
        status = kvio_csv_line(csv, rows, rows_size - 1);
    int64_t overhead = 0, planned = 0;
    kvio_wire_get_i64(&in, &overhead);
    kvio_wire_get_i64(&in, &planned);
    totals->overhead += overhead;
    totals->planned += planned;
    kvio_hist_t *hists[2] = {totals->error_ns, totals->error_ppm};
    for (int h = 0; h < 2 && status == KVIO_OK; h++) {
        uint64_t size = 0;
        size_t used = 0;
        const void *packed = kvio_wire_take_blob(&in, &size);
        if (packed != NULL)
            status = kvio_hist_unpack_merge(hists[h], packed, size, &used);
    }
    const char *about_text = kvio_wire_take_blob(&in, &about_size);
    if (status == KVIO_OK && about_text != NULL && about_size > 0) {
        json_error_t json_error;
        json_t *about = json_loadb(about_text, about_size, 0, &json_error);
        json_t *rank_tiers = json_object_get(about, "tiers");
        if (json_is_array(rank_tiers))
            json_array_extend(totals->tiers, rank_tiers);
        if (totals->kv_memory == NULL && json_is_string(json_object_get(about, "kv_memory"))) {
            totals->kv_memory = json_incref(json_object_get(about, "kv_memory"));
            totals->spin_kernel = json_is_true(json_object_get(about, "spin_kernel"));
            totals->spin_bytes = json_integer_value(json_object_get(about, "spin_memory_bytes"));
        }
        json_decref(about);
    }
    double host_bandwidth = 0;
    kvio_wire_get_u64(&in, &dropped);
    kvio_wire_get_f64(&in, &host_bandwidth);
    const void *records = kvio_wire_take_blob(&in, &records_size);
    totals->iterations_dropped += dropped;
    if (status == KVIO_OK && records != NULL)
        status = merge_iterations(records, records_size, host_bandwidth, rank, iterations_csv,
                                  events);
    return status != KVIO_OK ? status : kvio_wire_status(&in);
}

kvio_status_t kvio_serve_ranks_merge(void *const *blobs, const size_t *lengths, size_t count,
                                     uint32_t first_rank, kvio_results_t *results, kvio_event_trace_t *events,
                                     json_t **metrics_p, uint64_t **served_p,
                                     size_t *num_versions_p, char *error_p, size_t error_len)
{
    kvio_engine_metrics_t total;
    kvio_csv_t *csv = NULL, *iterations_csv = NULL;
    json_t *client = NULL;
    size_t num_serve = 0;
    uint64_t *served = NULL;
    size_t num_versions = 0;
    rank_totals_t totals = {.total = &total, .per_rank = json_array(), .tiers = json_array(),
                            .served = &served, .num_versions = &num_versions};
    kvio_status_t status = kvio_engine_metrics_init(&total);
    if (status == KVIO_OK && (kvio_hist_create(&totals.error_ns) != KVIO_OK ||
                              kvio_hist_create(&totals.error_ppm) != KVIO_OK))
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK && results != NULL)
        status = kvio_serve_open_csvs(results, &csv, &iterations_csv, error_p, error_len);
    for (size_t b = 0; b < count && status == KVIO_OK; b++) {
        if (kvio_serve_client_blob(blobs[b], lengths[b])) {
            json_decref(client);
            client = kvio_serve_client_json(blobs[b], lengths[b]);
            if (client == NULL)
                status = KVIO_ERR_PARSE;
            continue;
        }
        status = merge_rank(blobs[b], lengths[b], first_rank + (uint32_t)num_serve++, csv,
                            iterations_csv, events, &totals);
    }
    if (totals.iterations_dropped > 0)
        kvio_warn("iterations.csv: %llu iterations of the serve ranks were not kept (each rank "
                  "keeps %u MiB of them)", (unsigned long long)totals.iterations_dropped,
                  ITERATIONS_MAX_BYTES >> 20);
    if (status == KVIO_OK) {
        json_t *metrics = kvio_serve_metrics_json(&total);
        json_object_set_new(metrics, "serve_ranks", json_integer((json_int_t)num_serve));
        json_object_set_new(metrics, "iterations_not_recorded",
                            json_integer((json_int_t)totals.iterations_dropped));
        if (client != NULL) {
            json_object_set_new(metrics, "client", client);
            client = NULL;
        }
        json_object_set_new(metrics, "swap_verify_failures",
                            json_integer((json_int_t)total.swap_verify_failures));
        json_object_set_new(metrics, "tiers", totals.tiers);
        totals.tiers = NULL;
        json_object_set_new(metrics, "executor",
                            executor_object(totals.spin_kernel ? "gpu (coupled)"
                                                               : "realtime (coupled)",
                                            json_string_value(totals.kv_memory),
                                            totals.spin_kernel, (uint64_t)totals.spin_bytes,
                                            totals.error_ns, totals.error_ppm, totals.overhead,
                                            totals.planned));
        json_object_set_new(metrics, "per_rank", totals.per_rank);
        totals.per_rank = NULL;
        *metrics_p = metrics;
        *served_p = served;
        *num_versions_p = num_versions;
        served = NULL;
    } else if (error_p[0] == '\0') {
        snprintf(error_p, error_len, "serve ranks' reports could not be merged: %s",
                 kvio_strerror(status));
    }
    status = kvio_serve_close_csvs(csv, iterations_csv, status, error_p, error_len);
    json_decref(client);
    json_decref(totals.kv_memory);
    json_decref(totals.per_rank);
    json_decref(totals.tiers);
    free(served);
    kvio_hist_destroy(totals.error_ns);
    kvio_hist_destroy(totals.error_ppm);
    kvio_engine_metrics_fini(&total);
    return status;
}

/* ---------- the plain emulate run: serve ranks over the local runtime ---------- */

/* Iteration records a plain run's serve rank keeps: its report reaches the
 * merge in memory, not as a message, so far more than a coupled rank's. */
#define PLAIN_ITERATIONS_MAX_BYTES (256u << 20)

/* Shared by the ranks of a plain run (threads of this process): each rank
 * writes only its own slots; the caller reads them after the world ran. */
typedef struct plain_run {
    const kvio_serve_run_t *run;
    uint32_t num_serve;
    bool with_client;             /* several serve ranks: a client rank routes */
    kvio_serve_run_t *runs;       /* per world rank: run with its rte */
    kvio_serve_rank_t **ranks;    /* per serve rank */
    kvio_serve_client_t *client;
    double *setup_s;              /* per world rank */
    void **blobs;                 /* per world rank: its report */
    size_t *lengths;
    int64_t t0_wall_ns;
    int64_t t0_ns;
    int64_t end_ns;               /* rte clock: the last rank's end */
    pthread_mutex_t setup_lock; /* run->setup_lock of every rank */
} plain_run_t;

/* A serve rank's loop: begin an iteration (take requests, schedule), let
 * its time pass on the executor, end it; idle until the next request. */
static kvio_status_t plain_serve(kvio_serve_rank_t *rank, kvio_rte_t *rte, plain_run_t *plain)
{
    const kvio_serve_run_t *run = rank->run;
    tune_thread(run->serve->engine.realtime, rank->serve_index);
    kvio_executor_t *executor = &rank->setup.executor;
    /* The executor waits on the host clock; this rank's clock is the rte's. */
    executor->origin_ns = kvio_time_ns() - (uint64_t)kvio_rte_time_ns(rte);
    kvio_update_server_t server;
    kvio_serve_rank_server(rank, &server);
    kvio_progress_t *progress = NULL;
    if (!plain->with_client)
        kvio_progress_create("emulate: requests sent", run->num_requests, &progress);
    kvio_status_t status = KVIO_OK;
    bool finished = false;
    while (status == KVIO_OK && !finished) {
        if (run->stop != NULL && *run->stop)
            break; /* interrupted: the caller sees the flag */
        int64_t now = kvio_rte_time_ns(rte);
        int64_t end_ns = -1, idle_until = now + 1000000;
        status = server.begin(server.context, now, 0, &end_ns, &idle_until, &finished);
        if (status == KVIO_OK && end_ns >= 0) {
            executor->ops->wait_until(executor, end_ns, NULL);
            status = server.end(server.context, kvio_rte_time_ns(rte));
        } else if (status == KVIO_OK && !finished && idle_until > now) {
            /* Idle: sleep (no spin) until the next request is due or the
             * client may have sent one. */
            int64_t pause_ns = idle_until - now < 1000000 ? idle_until - now : 1000000;
            struct timespec pause = {.tv_sec = 0, .tv_nsec = pause_ns};
            nanosleep(&pause, NULL);
        }
        if (progress != NULL)
            kvio_progress_update(progress, rank->stream_index);
    }
    kvio_progress_destroy(progress);
    if (status != KVIO_OK)
        kvio_rte_set_error(rte, "%s", rank->error[0] ? rank->error : kvio_strerror(status));
    return status;
}

static kvio_status_t plain_body(kvio_rte_t *rte, void *arg)
{
    plain_run_t *plain = arg;
    int self = kvio_rte_index(rte);
    bool client = plain->with_client && self == (int)plain->num_serve;
    kvio_serve_run_t *run = &plain->runs[self];
    *run = *plain->run;
    run->rte = rte;
    run->client_rank = plain->with_client ? (int)plain->num_serve : 0;
    run->first_serve_rank = 0;
    run->start = NULL;
    char error[1024] = "";
    run->setup_lock = &plain->setup_lock;
    int64_t entered = kvio_rte_time_ns(rte);
    kvio_status_t status =
        client ? kvio_serve_client_create(run, &plain->client, error, sizeof(error))
               : kvio_serve_rank_create(run, (uint32_t)self, plain->num_serve,
                                        &plain->ranks[self], error, sizeof(error));
    int64_t waited = status == KVIO_OK && !client ? plain->ranks[self]->setup_wait_ns : 0;
    plain->setup_s[self] = (double)(kvio_rte_time_ns(rte) - entered - waited) / 1e9;
    if (status != KVIO_OK) {
        kvio_rte_set_error(rte, "%s", error[0] ? error : kvio_strerror(status));
        return status;
    }
    if (!client)
        plain->ranks[self]->iterations_limit = PLAIN_ITERATIONS_MAX_BYTES;
    /* Every rank has built its pool: one t0 for all. */
    kvio_rte_start_t start;
    status = kvio_rte_start(rte, &start);
    if (status != KVIO_OK)
        return status;
    run->t0_ns = start.t0_ns;
    if (self == 0) {
        plain->t0_ns = start.t0_ns;
        plain->t0_wall_ns = start.t0_wall_ns;
    }
    if (client) {
        status = kvio_serve_client_run(plain->client, run->stop, error, sizeof(error));
        if (status != KVIO_OK)
            kvio_rte_set_error(rte, "%s", error[0] ? error : kvio_strerror(status));
    } else {
        status = plain_serve(plain->ranks[self], rte, plain);
    }
    if (status != KVIO_OK)
        return status;
    if (self == 0)
        plain->end_ns = kvio_rte_time_ns(rte);
    return client ? kvio_serve_client_pack(plain->client, &plain->blobs[self],
                                           &plain->lengths[self])
                  : kvio_serve_rank_pack(plain->ranks[self], &plain->blobs[self],
                                         &plain->lengths[self]);
}

/* What only a plain run reports, from the ranks still in memory. */
static void plain_metrics(const plain_run_t *plain, json_t *metrics)
{
    const kvio_serve_run_t *run = plain->run;
    const kvio_serve_rank_t *first = plain->ranks[0];
    int64_t reference_ns = 0, swap_real_ns = 0, swap_modelled_ns = 0;
    uint64_t reference_bytes = 0;
    for (uint32_t r = 0; r < plain->num_serve; r++) {
        const kvio_serve_rank_t *rank = plain->ranks[r];
        const kvio_engine_metrics_t *engine = kvio_engine_metrics(rank->setup.engine);
        reference_copy(&rank->setup, rank->block_bytes, engine->swapped_bytes, &reference_bytes,
                       &reference_ns);
        swap_real_ns += engine->swap_real_ns;
        swap_modelled_ns += engine->swap_modelled_ns;
    }
    json_object_set_new(metrics, "kv_blocks_per_rank", json_integer(first->blocks));
    json_object_set_new(metrics, "block_size", json_integer(first->block_size));
    json_object_set_new(metrics, "kv_block_bytes", json_integer((json_int_t)first->block_bytes));
    json_object_set_new(metrics, "scheduler",
                        json_string(kvio_choice_name(&run->serve->scheduler.policy)));
    kvio_router_t *router = NULL;
    if (kvio_router_create(&run->serve->router, &router) == KVIO_OK)
        json_object_set_new(metrics, "router", json_string(kvio_router_name(router)));
    kvio_router_destroy(router);
    json_object_set_new(metrics, "wall_run_s",
                        json_real((double)(plain->end_ns - plain->t0_ns) / 1e9));
    json_object_set_new(metrics, "swap_copy_s", json_real((double)swap_real_ns / 1e9));
    json_object_set_new(metrics, "swap_modelled_s", json_real((double)swap_modelled_ns / 1e9));
    json_object_set_new(metrics, "swap_reference_copy_gbps",
                        reference_ns > 0
                            ? json_real((double)reference_bytes / (double)reference_ns)
                            : json_null());
    json_object_set_new(json_object_get(metrics, "executor"), "executor",
                        json_string(first->setup.executor.ops->plugin.name));
}

kvio_status_t kvio_serve_emulate(const kvio_serve_run_t *run, json_t **metrics_p,
                                 bool *complete_p, char *error_p, size_t error_len)
{
    kvio_status_t status = kvio_serve_emulate_preflight(run, NULL, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    plain_run_t plain = {.run = run, .num_serve = run->num_ranks > 0 ? run->num_ranks : 1};
    plain.with_client = plain.num_serve > 1;
    pthread_mutex_init(&plain.setup_lock, NULL);
    int size = (int)plain.num_serve + (plain.with_client ? 1 : 0);
    plain.runs = calloc((size_t)size, sizeof(*plain.runs));
    plain.ranks = calloc(plain.num_serve, sizeof(*plain.ranks));
    plain.setup_s = calloc((size_t)size, sizeof(*plain.setup_s));
    plain.blobs = calloc((size_t)size, sizeof(*plain.blobs));
    plain.lengths = calloc((size_t)size, sizeof(*plain.lengths));
    kvio_rte_world_t *world = NULL;
    if (plain.runs == NULL || plain.ranks == NULL || plain.setup_s == NULL ||
        plain.blobs == NULL || plain.lengths == NULL) {
        snprintf(error_p, error_len, "emulate: out of memory");
        status = KVIO_ERR_NOMEM;
        goto out;
    }
    kvio_rte_params_t params = {.kind = "local", .num_ranks = size,
                                .timeout_ns = run->rank_timeout_ns};
    status = kvio_rte_world_create(&params, &world, error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    kvio_rte_world_set_stop(world, run->stop);
    status = kvio_rte_world_run(world, plain_body, &plain, error_p, error_len);
    bool stopped = status == KVIO_ERR_INTERRUPTED || (run->stop != NULL && *run->stop);
    if (status != KVIO_OK && !stopped)
        goto out;
    if (run->start != NULL) {
        json_t *ranks = json_array();
        for (int r = 0; r < size; r++)
            json_array_append_new(
                ranks, kvio_start_rank_json(r, plain.with_client && r == size - 1 ? "client"
                                                                                  : "serve",
                                            plain.setup_s[r]));
        kvio_start_json_set(run->start, plain.t0_wall_ns, ranks);
    }
    if (stopped) {
        /* Interrupted: what the ranks reported, if every one did. */
        for (int r = 0; r < size; r++)
            if (plain.blobs[r] == NULL)
                status = KVIO_ERR_INTERRUPTED;
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "emulate: interrupted");
            goto out;
        }
    }
    json_t *metrics = NULL;
    uint64_t *served = NULL;
    size_t num_versions = 0;
    status = kvio_serve_ranks_merge(plain.blobs, plain.lengths, (size_t)size, 0, run->results,
                                    run->events, &metrics, &served, &num_versions, error_p,
                                    error_len);
    free(served);
    if (status != KVIO_OK)
        goto out;
    plain_metrics(&plain, metrics);
    *metrics_p = metrics;
    *complete_p = !stopped;
out:
    for (uint32_t r = 0; plain.ranks != NULL && r < plain.num_serve; r++)
        kvio_serve_rank_destroy(plain.ranks[r]);
    kvio_serve_client_destroy(plain.client);
    for (int r = 0; plain.blobs != NULL && r < size; r++)
        free(plain.blobs[r]);
    kvio_rte_world_destroy(world, status != KVIO_OK);
    free(plain.runs);
    free(plain.ranks);
    free(plain.setup_s);
    free(plain.blobs);
    free(plain.lengths);
    pthread_mutex_destroy(&plain.setup_lock);
    return status;
}
