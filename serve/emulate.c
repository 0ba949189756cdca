/* Emulate mode: the same engine in real time. Each serve rank is a thread
 * with real KV memory (its blocks are host memory of the model's block size)
 * and its lower tiers; an iteration takes the cost model's time for real
 * (sleep, then spin the last stretch); swaps and tier traffic really copy.
 * The calling thread is the client: it generates the stream in real time and
 * routes each request to a rank from the state the ranks publish every
 * iteration (serve/client.c); in the coupled run the client is a rank. */
#include "kvio/serve.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include "serve/serve_int.h"


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

typedef struct inbox_item {
    kvio_engine_request_t request;
    kvio_hash_t *hashes;
} inbox_item_t;

/* A state message a rank has published and the client not yet read. */
typedef struct state_item {
    void *blob;
    size_t length;
} state_item_t;

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

typedef struct emulate emulate_t;

typedef struct rank_state {
    emulate_t *emulate;
    uint32_t rank;
    kvio_engine_t *engine;          /* setup.engine */
    struct rank_setup setup;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    inbox_item_t *inbox;
    size_t inbox_count, inbox_capacity;
    kvio_serve_publisher_t publisher; /* the rank thread's own */
    state_item_t *states;            /* published, not yet read by the client (under lock) */
    size_t num_states, states_capacity;
    iteration_timing_t timing;
    kvio_status_t status;
    char error[512];
} rank_state_t;

struct emulate {
    const kvio_serve_run_t *run;
    uint32_t num_ranks;
    uint32_t blocks;
    uint32_t block_size;
    uint64_t block_bytes;
    kvio_cost_t *cost;
    kvio_router_t *router;
    kvio_serve_mirror_t *mirror;     /* the client thread's */
    uint64_t *routed;                /* requests per rank (client thread) */
    rank_state_t *ranks;
    uint64_t start_ns;
    _Atomic bool client_done;
    _Atomic bool abort_all;
    pthread_mutex_t csv_lock;
    kvio_csv_t *requests_csv, *iterations_csv;
};

static int64_t now_ns(const emulate_t *emulate)
{
    return (int64_t)(kvio_time_ns() - emulate->start_ns);
}

static void on_finish(void *context, const kvio_engine_finished_t *finished)
{
    rank_state_t *state = context;
    emulate_t *emulate = state->emulate;
    if (emulate->requests_csv == NULL)
        return;
    char row[256];
    kvio_serve_request_row(finished, row, sizeof(row));
    pthread_mutex_lock(&emulate->csv_lock);
    kvio_csv_row(emulate->requests_csv, "%s", row);
    pthread_mutex_unlock(&emulate->csv_lock);
}

static void on_iteration(void *context, uint32_t rank, const kvio_engine_iteration_t *iteration)
{
    rank_state_t *state = context;
    emulate_t *emulate = state->emulate;
    kvio_serve_trace_iteration(emulate->run->events, state->engine, rank, iteration,
                               emulate->run->gpu->host_bandwidth);
    if (emulate->iterations_csv == NULL)
        return;
    pthread_mutex_lock(&emulate->csv_lock);
    kvio_serve_iteration_row(emulate->iterations_csv, rank, iteration);
    pthread_mutex_unlock(&emulate->csv_lock);
}

/* Once the client has sent its last request nobody reads the state any
 * more: the deltas are not kept either. */
static void on_cache(void *context, kvio_hash_t hash, bool cached)
{
    rank_state_t *state = context;
    if (!atomic_load(&state->emulate->client_done))
        kvio_serve_publisher_note(&state->publisher, hash, cached);
}

/* Queues this rank's state for the client (after every iteration while the
 * client routes). */
static kvio_status_t publish_state(rank_state_t *state)
{
    if (atomic_load(&state->emulate->client_done))
        return KVIO_OK;
    state_item_t item = {0};
    kvio_status_t status = kvio_serve_publisher_pack(&state->publisher, state->engine, false,
                                                     &item.blob, &item.length);
    if (status != KVIO_OK)
        return status;
    pthread_mutex_lock(&state->lock);
    if (state->num_states == state->states_capacity) {
        size_t capacity = state->states_capacity ? 2 * state->states_capacity : 16;
        state_item_t *bigger = realloc(state->states, capacity * sizeof(*bigger));
        if (bigger == NULL) {
            pthread_mutex_unlock(&state->lock);
            free(item.blob);
            return KVIO_ERR_NOMEM;
        }
        state->states = bigger;
        state->states_capacity = capacity;
    }
    state->states[state->num_states++] = item;
    pthread_mutex_unlock(&state->lock);
    return KVIO_OK;
}

/* The client thread: applies what every rank has published. */
static kvio_status_t read_states(emulate_t *emulate)
{
    kvio_status_t status = KVIO_OK;
    for (uint32_t r = 0; r < emulate->num_ranks; r++) {
        rank_state_t *state = &emulate->ranks[r];
        pthread_mutex_lock(&state->lock);
        for (size_t i = 0; i < state->num_states; i++) {
            bool final = false;
            if (status == KVIO_OK)
                status = kvio_serve_mirror_apply(emulate->mirror, r, state->states[i].blob,
                                                 state->states[i].length, &final);
            free(state->states[i].blob);
        }
        state->num_states = 0;
        pthread_mutex_unlock(&state->lock);
    }
    return status;
}

/* Moves the inbox into the engine. */
static kvio_status_t drain_inbox(rank_state_t *state)
{
    kvio_status_t status = KVIO_OK;
    pthread_mutex_lock(&state->lock);
    state->publisher.received += state->inbox_count;
    for (size_t i = 0; i < state->inbox_count; i++) {
        if (status == KVIO_OK)
            status = kvio_engine_add(state->engine, &state->inbox[i].request);
        free(state->inbox[i].hashes);
    }
    state->inbox_count = 0;
    pthread_mutex_unlock(&state->lock);
    return status;
}

static void *rank_main(void *argument)
{
    rank_state_t *state = argument;
    emulate_t *emulate = state->emulate;
    kvio_status_t status = KVIO_OK;
    tune_thread(emulate->run->serve->engine.realtime, state->rank);
    while (status == KVIO_OK && !atomic_load(&emulate->abort_all)) {
        status = drain_inbox(state);
        if (status != KVIO_OK)
            break;
        if (!kvio_engine_has_work(state->engine)) {
            if (atomic_load(&emulate->client_done)) {
                pthread_mutex_lock(&state->lock);
                bool empty = state->inbox_count == 0;
                pthread_mutex_unlock(&state->lock);
                if (empty)
                    break;
                continue;
            }
            /* Idle: wait for a request (bounded, so aborts are seen). */
            pthread_mutex_lock(&state->lock);
            if (state->inbox_count == 0 && !atomic_load(&emulate->client_done)) {
                struct timespec deadline;
                clock_gettime(CLOCK_REALTIME, &deadline);
                deadline.tv_nsec += 1000000;
                if (deadline.tv_nsec >= 1000000000) {
                    deadline.tv_sec++;
                    deadline.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&state->wake, &state->lock, &deadline);
            }
            pthread_mutex_unlock(&state->lock);
            continue;
        }
        int64_t start = now_ns(emulate);
        int64_t cpu_start = thread_cpu_ns();
        kvio_engine_iteration_t iteration;
        kvio_serve_step_t step;
        status = kvio_serve_step(state->engine, start,
                                 (uint32_t)emulate->run->first_serve_rank + state->rank, false,
                                 &iteration, &step, state->error, sizeof(state->error));
        if (status != KVIO_OK)
            break;
        int64_t scheduled_cpu = thread_cpu_ns();
        int64_t target = start + iteration.duration_ns;
        kvio_executor_t *executor = &state->setup.executor;
        status = executor->ops->compute(executor, target - now_ns(emulate));
        if (status != KVIO_OK) {
            snprintf(state->error, sizeof(state->error), "serve rank %u: %s", state->rank,
                     kvio_device_error(state->setup.device));
            break;
        }
        executor->ops->wait_until(executor, target);
        int64_t end = now_ns(emulate);
        timing_record(&state->timing, iteration.duration_ns, end - target);
        int64_t complete_cpu = thread_cpu_ns();
        kvio_engine_complete(state->engine, end);
        state->timing.overhead_ns +=
            (scheduled_cpu - cpu_start) + (thread_cpu_ns() - complete_cpu);
        if (emulate->num_ranks > 1)
            status = publish_state(state);
        if (status != KVIO_OK)
            snprintf(state->error, sizeof(state->error), "serve rank %u: publishing its state: %s",
                     state->rank, kvio_strerror(status));
    }
    if (status == KVIO_OK && atomic_load(&emulate->abort_all))
        status = KVIO_ERR_INTERRUPTED;
    state->status = status;
    if (status != KVIO_OK && status != KVIO_ERR_INTERRUPTED)
        atomic_store(&emulate->abort_all, true);
    return NULL;
}

static kvio_status_t push_request(rank_state_t *state, const kvio_engine_request_t *request)
{
    inbox_item_t item = {.request = *request};
    if (request->num_hashes > 0) {
        item.hashes = malloc(request->num_hashes * sizeof(kvio_hash_t));
        if (item.hashes == NULL)
            return KVIO_ERR_NOMEM;
        memcpy(item.hashes, request->hashes, request->num_hashes * sizeof(kvio_hash_t));
    }
    item.request.hashes = item.hashes;
    pthread_mutex_lock(&state->lock);
    if (state->inbox_count == state->inbox_capacity) {
        size_t capacity = state->inbox_capacity ? 2 * state->inbox_capacity : 64;
        inbox_item_t *bigger = realloc(state->inbox, capacity * sizeof(*bigger));
        if (bigger == NULL) {
            pthread_mutex_unlock(&state->lock);
            free(item.hashes);
            return KVIO_ERR_NOMEM;
        }
        state->inbox = bigger;
        state->inbox_capacity = capacity;
    }
    state->inbox[state->inbox_count++] = item;
    pthread_cond_signal(&state->wake);
    pthread_mutex_unlock(&state->lock);
    return KVIO_OK;
}

/* Routers in real time read only what ranks publish (the mirror). */
static kvio_status_t route(emulate_t *emulate, const kvio_engine_request_t *request,
                           uint32_t *rank_p)
{
    if (emulate->num_ranks == 1) { /* nothing to choose, nothing published */
        emulate->routed[0]++;
        *rank_p = 0;
        return KVIO_OK;
    }
    kvio_status_t status = read_states(emulate);
    if (status != KVIO_OK)
        return status;
    kvio_router_view_t view;
    kvio_serve_mirror_view(emulate->mirror, &view);
    uint32_t rank = kvio_router_choose_view(emulate->router, &view, emulate->num_ranks, request);
    status = kvio_serve_mirror_dispatched(emulate->mirror, rank, request);
    if (status != KVIO_OK)
        return status;
    emulate->routed[rank]++;
    *rank_p = rank;
    return KVIO_OK;
}

/* The reference for swap copies, in the same run and the same memory: a
 * plain memcpy of as many whole blocks as the rank swapped out (at most
 * 64), strided from the pool into the swap space (free again at the end).
 * Adds the copied bytes and nanoseconds; nothing without a host swap space
 * or swaps. */
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

static kvio_status_t rank_init(emulate_t *emulate, rank_state_t *state, uint32_t rank,
                               char *error_p, size_t error_len)
{
    state->emulate = emulate;
    state->rank = rank;
    pthread_mutex_init(&state->lock, NULL);
    pthread_cond_init(&state->wake, NULL);
    if (timing_init(&state->timing) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    /* One rank needs no router, so it publishes nothing (and its pool runs
     * without hooks, as in the single-rank timing targets). */
    kvio_engine_observer_t observer = {.context = state, .on_finish = on_finish,
                                       .on_iteration = on_iteration,
                                       .on_cache = emulate->num_ranks > 1 ? on_cache : NULL};
    kvio_status_t status = setup_create(emulate->run, rank, emulate->blocks, emulate->block_bytes,
                                        emulate->cost, observer, &state->setup, error_p,
                                        error_len);
    state->engine = state->setup.engine;
    return status;
}

static void rank_fini(rank_state_t *state)
{
    setup_destroy(&state->setup);
    for (size_t i = 0; i < state->inbox_count; i++)
        free(state->inbox[i].hashes);
    free(state->inbox);
    for (size_t i = 0; i < state->num_states; i++)
        free(state->states[i].blob);
    free(state->states);
    kvio_serve_publisher_fini(&state->publisher);
    timing_fini(&state->timing);
    pthread_mutex_destroy(&state->lock);
    pthread_cond_destroy(&state->wake);
}

/* Emulate-only measurements: timing error and the engine's own overhead. */
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

static json_t *executor_json(const emulate_t *emulate)
{
    kvio_hist_t *error_ns, *error_ppm;
    if (kvio_hist_create(&error_ns) != KVIO_OK || kvio_hist_create(&error_ppm) != KVIO_OK)
        return json_object();
    int64_t overhead = 0, planned = 0;
    for (uint32_t r = 0; r < emulate->num_ranks; r++) {
        kvio_hist_merge(error_ns, emulate->ranks[r].timing.error_ns);
        kvio_hist_merge(error_ppm, emulate->ranks[r].timing.error_ppm);
        overhead += emulate->ranks[r].timing.overhead_ns;
        planned += emulate->ranks[r].timing.planned_ns;
    }
    const rank_setup_t *first = &emulate->ranks[0].setup;
    json_t *object = executor_object(first->executor.ops->name, setup_memory(first), first->spin,
                                     spin_memory(first, emulate->run), error_ns, error_ppm,
                                     overhead, planned);
    json_object_set_new(object, "timing_error_max_us",
                        json_real((double)kvio_hist_max(error_ns) / 1e3));
    kvio_hist_destroy(error_ns);
    kvio_hist_destroy(error_ppm);
    return object;
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

kvio_status_t kvio_serve_emulate(const kvio_serve_run_t *run, json_t **metrics_p,
                                 bool *complete_p, char *error_p, size_t error_len)
{
    emulate_t emulate_storage;
    emulate_t *emulate = &emulate_storage;
    memset(emulate, 0, sizeof(*emulate));
    emulate->run = run;
    emulate->num_ranks = run->num_ranks > 0 ? run->num_ranks : 1;
    emulate->block_size = (uint32_t)run->serve->kvcache.block_size;
    emulate->block_bytes = kvio_model_kv_bytes_per_token(run->model, run->cost->tensor_parallel) *
                           emulate->block_size;
    pthread_mutex_init(&emulate->csv_lock, NULL);
    kvio_hash_buffer_t hashes = {0};
    kvio_status_t status = kvio_serve_kv_blocks(run->serve, run->model, run->gpu,
                                                run->cost->tensor_parallel, &emulate->blocks,
                                                error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    status = kvio_serve_emulate_preflight(run, NULL, error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    status = kvio_cost_create(run->cost, run->model, run->gpu, &emulate->cost, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_router_create(&run->serve->router, &emulate->router);
    if (status == KVIO_OK)
        status = kvio_serve_mirror_create(emulate->num_ranks, emulate->block_size,
                                          &emulate->mirror);
    if (status != KVIO_OK)
        goto out;
    emulate->ranks = calloc(emulate->num_ranks, sizeof(*emulate->ranks));
    emulate->routed = calloc(emulate->num_ranks, sizeof(*emulate->routed));
    if (emulate->ranks == NULL || emulate->routed == NULL) {
        status = KVIO_ERR_NOMEM;
        goto out;
    }
    /* Every rank's pool is built before t0; each one's set-up is reported. */
    json_t *start_ranks = json_array();
    for (uint32_t r = 0; r < emulate->num_ranks && status == KVIO_OK; r++) {
        int64_t setup_start = kvio_time_ns();
        status = rank_init(emulate, &emulate->ranks[r], r, error_p, error_len);
        json_array_append_new(start_ranks,
                              kvio_start_rank_json(run->first_serve_rank + (int)r, "serve",
                                                   (double)(kvio_time_ns() - setup_start) / 1e9));
    }
    if (status != KVIO_OK) {
        json_decref(start_ranks);
        goto out;
    }
    if (run->results != NULL) {
        status = kvio_serve_open_csvs(run->results, &emulate->requests_csv,
                                      &emulate->iterations_csv, error_p, error_len);
        if (status != KVIO_OK)
            goto out;
    }

    emulate->start_ns = kvio_time_ns();
    for (uint32_t r = 0; r < emulate->num_ranks; r++)
        emulate->ranks[r].setup.executor.origin_ns = emulate->start_ns;
    if (run->start != NULL)
        kvio_start_json_set(run->start, (int64_t)kvio_wall_time_ns(), start_ranks);
    else
        json_decref(start_ranks);
    for (uint32_t r = 0; r < emulate->num_ranks; r++) {
        if (pthread_create(&emulate->ranks[r].thread, NULL, rank_main, &emulate->ranks[r]) != 0) {
            snprintf(error_p, error_len, "cannot start serve rank %u's thread", r);
            status = KVIO_ERR_NOMEM;
            atomic_store(&emulate->abort_all, true);
            break;
        }
        emulate->ranks[r].started = true;
    }
    /* The client: requests leave at their arrival times, in real time. */
    bool stopped = false;
    uint64_t index = 0;
    const kvio_request_t *request = NULL;
    kvio_progress_t *progress = NULL;
    kvio_progress_create("emulate: requests sent", run->num_requests, &progress);
    while (status == KVIO_OK && !atomic_load(&emulate->abort_all)) {
        if (progress != NULL)
            kvio_progress_update(progress, index);
        status = kvio_stream_next(run->stream, &request);
        if (status != KVIO_OK || request == NULL)
            break;
        while (now_ns(emulate) < request->arrival_ns && !atomic_load(&emulate->abort_all)) {
            if (run->stop != NULL && *run->stop)
                break;
            int64_t remaining = request->arrival_ns - now_ns(emulate);
            struct timespec pause = {.tv_sec = 0,
                                     .tv_nsec = remaining > 10000000 ? 10000000 : remaining};
            nanosleep(&pause, NULL);
        }
        if (run->stop != NULL && *run->stop) {
            stopped = true;
            atomic_store(&emulate->abort_all, true);
            break;
        }
        int64_t arrival = now_ns(emulate);
        kvio_engine_request_t engine_request;
        status = kvio_serve_engine_request(
            request, emulate->block_size, arrival,
            arrival >= run->warmup_ns && index >= (uint64_t)run->warmup_requests, 0, &hashes,
            &engine_request);
        if (status != KVIO_OK)
            break;
        uint32_t rank = 0;
        if (engine_request.prompt_tokens > 0) {
            status = route(emulate, &engine_request, &rank);
            if (status == KVIO_OK)
                status = push_request(&emulate->ranks[rank], &engine_request);
        }
        index++;
    }
    kvio_progress_destroy(progress);
    atomic_store(&emulate->client_done, true);
    for (uint32_t r = 0; r < emulate->num_ranks; r++) {
        rank_state_t *state = &emulate->ranks[r];
        if (!state->started)
            continue;
        pthread_mutex_lock(&state->lock);
        pthread_cond_signal(&state->wake);
        pthread_mutex_unlock(&state->lock);
        pthread_join(state->thread, NULL);
        if (state->status != KVIO_OK && state->status != KVIO_ERR_INTERRUPTED &&
            status == KVIO_OK) {
            status = state->status;
            snprintf(error_p, error_len, "%s", state->error[0] ? state->error
                                                                : kvio_strerror(status));
        }
    }
    if (status == KVIO_OK && run->stop != NULL && *run->stop)
        stopped = true;
    if (status == KVIO_OK) {
        kvio_engine_metrics_t total;
        status = kvio_engine_metrics_init(&total);
        if (status == KVIO_OK) {
            json_t *per_rank = json_array();
            json_t *tiers = json_array();
            int64_t reference_ns = 0;
            uint64_t reference_bytes = 0;
            for (uint32_t r = 0; r < emulate->num_ranks; r++) {
                const kvio_engine_metrics_t *metrics = kvio_engine_metrics(emulate->ranks[r].engine);
                kvio_engine_metrics_merge(&total, metrics);
                json_array_append_new(per_rank, kvio_serve_metrics_json(metrics));
                reference_copy(&emulate->ranks[r].setup, emulate->block_bytes,
                               metrics->swapped_bytes, &reference_bytes, &reference_ns);
                kvio_serve_tiers_json(emulate->ranks[r].setup.tiers,
                                      emulate->ranks[r].setup.num_tiers, r, tiers);
            }
            json_t *metrics = kvio_serve_metrics_json(&total);
            json_object_set_new(metrics, "serve_ranks", json_integer(emulate->num_ranks));
            json_object_set_new(metrics, "kv_blocks_per_rank", json_integer(emulate->blocks));
            json_object_set_new(metrics, "block_size", json_integer(emulate->block_size));
            json_object_set_new(metrics, "kv_block_bytes", json_integer((json_int_t)emulate->block_bytes));
            json_object_set_new(metrics, "scheduler",
                                json_string(kvio_policy_kind_name(run->serve->scheduler.policy)));
            json_object_set_new(metrics, "router", json_string(kvio_router_name(emulate->router)));
            uint64_t generated = 0;
            for (uint32_t r = 0; r < emulate->num_ranks; r++)
                generated += emulate->routed[r];
            json_object_set_new(metrics, "client",
                                kvio_serve_client_counts_json("thread", kvio_router_name(emulate->router),
                                            generated, emulate->routed, emulate->num_ranks,
                                            kvio_serve_mirror_states(emulate->mirror)));
            json_object_set_new(metrics, "wall_run_s", json_real((double)now_ns(emulate) / 1e9));
            json_object_set_new(metrics, "swap_verify_failures",
                                json_integer((json_int_t)total.swap_verify_failures));
            json_object_set_new(metrics, "swap_copy_s",
                                json_real((double)total.swap_real_ns / 1e9));
            json_object_set_new(metrics, "swap_modelled_s",
                                json_real((double)total.swap_modelled_ns / 1e9));
            /* A plain memcpy of the same block size between the same arenas,
             * after the run: what the swap copies compare with. */
            json_object_set_new(metrics, "swap_reference_copy_gbps",
                                reference_ns > 0
                                    ? json_real((double)reference_bytes / (double)reference_ns)
                                    : json_null());
            json_object_set_new(metrics, "tiers", tiers);
            json_object_set_new(metrics, "executor", executor_json(emulate));
            json_object_set_new(metrics, "per_rank", per_rank);
            kvio_engine_metrics_fini(&total);
            *metrics_p = metrics;
            *complete_p = !stopped;
        }
    }
out:
    status = kvio_serve_close_csvs(emulate->requests_csv, emulate->iterations_csv, status, error_p, error_len);
    for (uint32_t r = 0; emulate->ranks != NULL && r < emulate->num_ranks; r++)
        rank_fini(&emulate->ranks[r]);
    free(emulate->ranks);
    free(emulate->routed);
    free(hashes.hashes);
    kvio_serve_mirror_destroy(emulate->mirror);
    kvio_router_destroy(emulate->router);
    kvio_cost_destroy(emulate->cost);
    pthread_mutex_destroy(&emulate->csv_lock);
    return status;
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
    uint64_t iterations_dropped; /* past ITERATIONS_MAX_BYTES */
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
    if (rank->iterations_length + size > ITERATIONS_MAX_BYTES) {
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
    if (status == KVIO_OK)
        status = setup_create(run, serve_index, rank->blocks, rank->block_bytes, rank->cost,
                              observer, &rank->setup, error_p, error_len);
    if (status == KVIO_OK && !client)
        status = kvio_stream_next(run->stream, &rank->next);
    if (status != KVIO_OK) {
        kvio_serve_rank_destroy(rank);
        return status;
    }
    *rank_p = rank;
    return KVIO_OK;
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
    /* Rows arrive as text; strip the last newline (kvio_csv_row adds one). */
    if (status == KVIO_OK && rows != NULL && csv != NULL && rows_size > 0)
        status = kvio_csv_row(csv, "%.*s", (int)rows_size - 1, rows);
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
