/* One client's trial, as kv-cache.py's IntegratedBenchmark.run runs it
 * (kv_cache/benchmark.py): its users enqueue requests open-loop (each
 * sleeps think_time x U(0.8, 1.2), enqueues, sleeps again: generate_requests
 * and user_worker), a priority queue orders them by QoS priority then
 * enqueue time, min(users, 500) workers take them (process_requests) until
 * the duration is over; a request taken after that is dropped, one in
 * progress finishes and counts. Per request: a system prompt looked up
 * (20 %; its key is never written, so always a miss), every earlier turn's
 * object of its conversation read, the turn's object written (its whole
 * context), then unless its context reached 10,000 tokens (phase PREFILL)
 * a decode read and one more read per 32 generated tokens. One generator
 * thread plays every user (a heap of wake times) where kv-cache.py runs a
 * thread each. */
#include "mlperf/mlperf_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/array.h"
#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/stats.h"
#include "kvio/sysinfo.h"

#define MAX_WORKERS 500
#define PREFILL_CONTEXT 10000    /* context >= this: phase PREFILL, no decode reads */
#define DECODE_BATCH 32          /* config.yaml decode.batch_size */
#define SYSTEM_PROMPT_PROBABILITY 0.2
#define END_CONVERSATION 0.8     /* random() >= this ends a conversation */

/* PrefixMatcher.COMMON_SYSTEM_PROMPTS' lengths in words (len(text.split())). */
static const int64_t system_prompt_words[] = {5, 9, 6};

static const double seconds_per_token[] = {
    [KVIO_MLPERF_GENERATION_NONE] = 0.0, [KVIO_MLPERF_GENERATION_FAST] = 0.002,
    [KVIO_MLPERF_GENERATION_REALISTIC] = 0.030};

typedef struct bench {
    const mlperf_trial_params_t *params;
    mlperf_cache_t *cache;
    mlperf_user_t *users;
    int64_t num_users;
    pthread_mutex_t lock;       /* the queue, conversations and results */
    pthread_cond_t queued;      /* a request came, or the run stopped */
    pthread_cond_t stopped;     /* the run stopped (the generator's sleeps) */
    bool stop;
    bool enough;                /* max_requests completed: the trial ends */
    mlperf_request_t *heap;     /* the priority queue */
    size_t queue_count, queue_capacity;
    uint64_t sequence;
    mlperf_conversations_t conversations;
    /* results (self.results) */
    uint64_t requests_enqueued, requests_completed, tokens_generated;
    double storage_io_s;
    uint64_t multi_turn_hits, multi_turn_misses, prefix_hits, prefix_misses, users_lost;
    mlperf_samples_t end_to_end, storage_io, qos_end_to_end[MLPERF_QOS_CLASSES];
    _Atomic uint64_t read_progress, write_progress; /* file bytes moved so far */
    uint64_t window_read_bytes, window_write_bytes; /* ... at the stop */
} bench_t;

/* ---------- the priority queue: (-priority, enqueue time), then order ---------- */

static bool before(const mlperf_request_t *a, const mlperf_request_t *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    if (a->enqueue_ns != b->enqueue_ns)
        return a->enqueue_ns < b->enqueue_ns;
    return a->sequence < b->sequence;
}

/* Under the lock. */
static kvio_status_t queue_push(bench_t *bench, mlperf_request_t request)
{
    kvio_status_t status = kvio_array_reserve((void **)&bench->heap, &bench->queue_capacity,
                                              bench->queue_count + 1, sizeof(request), 1024);
    if (status != KVIO_OK)
        return status;
    size_t at = bench->queue_count++;
    while (at > 0 && before(&request, &bench->heap[(at - 1) / 2])) {
        bench->heap[at] = bench->heap[(at - 1) / 2];
        at = (at - 1) / 2;
    }
    bench->heap[at] = request;
    return KVIO_OK;
}

/* Under the lock, the queue not empty. */
static mlperf_request_t queue_pop(bench_t *bench)
{
    mlperf_request_t top = bench->heap[0], last = bench->heap[--bench->queue_count];
    size_t at = 0;
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= bench->queue_count)
            break;
        if (child + 1 < bench->queue_count && before(&bench->heap[child + 1], &bench->heap[child]))
            child++;
        if (!before(&bench->heap[child], &last))
            break;
        bench->heap[at] = bench->heap[child];
        at = child;
    }
    if (bench->queue_count > 0)
        bench->heap[at] = last;
    return top;
}

/* ---------- the users (generate_requests' user_worker) ---------- */

static int64_t rng_randint(kvio_rng_t *rng, int64_t low, int64_t high)
{
    return low + (int64_t)kvio_rng_below(rng, (uint64_t)(high - low + 1));
}

static uint64_t think_ns(mlperf_user_t *user)
{
    return (uint64_t)(user->think_time_s * (0.8 + 0.4 * kvio_rng_uniform(&user->rng)) * 1e9);
}

/* Under the lock: the user's conversation for its next turn (a new one
 * with probability 0.2, or at 50 turns); false once it is lost. */
static bool next_conversation(bench_t *bench, mlperf_user_t *user, uint64_t now_ns)
{
    mlperf_conversations_t *conversations = &bench->conversations;
    if (user->conversation != 0 && kvio_rng_uniform(&user->rng) >= END_CONVERSATION)
        user->conversation = 0;
    mlperf_conversation_t *current = user->conversation != 0
                                         ? mlperf_conversation_find(conversations,
                                                                    user->conversation)
                                         : NULL;
    if (current != NULL && current->turns >= conversations->max_turns)
        user->conversation = 0;
    else if (user->conversation != 0 && current == NULL) {
        /* Evicted under it: add_turn raises and kv-cache.py's user thread
         * ends; so does this user. */
        user->lost = true;
        bench->users_lost++;
        return false;
    }
    if (user->conversation == 0)
        user->conversation = mlperf_conversation_start(conversations, user->id, now_ns);
    return user->conversation != 0;
}

/* Under the lock: the user's next request (add_turn, InferenceRequest). */
static void enqueue_turn(bench_t *bench, mlperf_user_t *user, uint64_t now_ns)
{
    if (!next_conversation(bench, user, now_ns))
        return;
    int64_t context = rng_randint(&user->rng, user->context_length / 4 > 1
                                                  ? user->context_length / 4 : 1,
                                  user->context_length);
    int64_t generate = rng_randint(&user->rng, user->generation_length / 4 > 1
                                                   ? user->generation_length / 4 : 1,
                                   user->generation_length);
    mlperf_conversation_t *conversation =
        mlperf_conversation_find(&bench->conversations, user->conversation);
    conversation->turns++;
    conversation->last_access_ns = now_ns;
    mlperf_request_t request = {
        .sequence = bench->sequence++, .priority = user->priority, .qos = user->qos,
        .user = user->id, .conversation = user->conversation, .turn = conversation->turns,
        .context_tokens = context, .generate_tokens = generate,
        .decode = context < PREFILL_CONTEXT, .submit_ns = now_ns,
        .enqueue_ns = kvio_wall_time_ns()};
    if (queue_push(bench, request) == KVIO_OK) {
        bench->requests_enqueued++;
        pthread_cond_signal(&bench->queued);
    }
}

static void absolute_time(uint64_t monotonic_ns, struct timespec *at_p)
{
    /* The condition variables run on CLOCK_MONOTONIC. */
    at_p->tv_sec = (time_t)(monotonic_ns / 1000000000u);
    at_p->tv_nsec = (long)(monotonic_ns % 1000000000u);
}

static void *generator_main(void *arg)
{
    bench_t *bench = arg;
    uint64_t start = kvio_time_ns();
    for (int64_t u = 0; u < bench->num_users; u++)
        bench->users[u].next_ns = start + think_ns(&bench->users[u]);
    pthread_mutex_lock(&bench->lock);
    while (!bench->stop) {
        mlperf_user_t *next = NULL;
        for (int64_t u = 0; u < bench->num_users; u++)
            if (!bench->users[u].lost && (next == NULL || bench->users[u].next_ns < next->next_ns))
                next = &bench->users[u];
        if (next == NULL)
            break; /* every user lost */
        uint64_t now = kvio_time_ns();
        if (now < next->next_ns) {
            struct timespec at;
            absolute_time(next->next_ns, &at);
            pthread_cond_timedwait(&bench->stopped, &bench->lock, &at);
            continue;
        }
        enqueue_turn(bench, next, now);
        next->next_ns = kvio_time_ns() + think_ns(next);
    }
    pthread_mutex_unlock(&bench->lock);
    return NULL;
}

/* ---------- the workers (process_requests) ---------- */

typedef struct worker {
    bench_t *bench;
    pthread_t thread;
    mlperf_io_t io;
    kvio_rng_t rng; /* the system prompt's draws */
} worker_t;

/* One lookup's outcome counted in hits or misses (under the lock). */
static void tally(bench_t *bench, bool hit, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&bench->lock);
    (*(hit ? hits : misses))++;
    pthread_mutex_unlock(&bench->lock);
}

/* Step 1: the system prompt, 20 % of requests: its object never exists
 * (nothing writes kv_system_*), so a miss; the request's context loses the
 * prompt's words. Returns the hit type the decode reads count as. */
static int system_prompt(worker_t *worker, mlperf_request_t *request)
{
    bench_t *bench = worker->bench;
    bool hit = kvio_rng_uniform(&worker->rng) < SYSTEM_PROMPT_PROBABILITY;
    tally(bench, hit, &bench->prefix_hits, &bench->prefix_misses);
    if (!hit)
        return MLPERF_HIT_USER;
    int64_t words = system_prompt_words[kvio_rng_below(&worker->rng, 3)];
    mlperf_cache_miss(bench->cache);
    request->context_tokens = request->context_tokens > words ? request->context_tokens - words : 0;
    return MLPERF_HIT_SYSTEM;
}

/* Step 2: every other turn of the conversation it has now
 * (get_all_previous_turn_keys: later turns already added count too). */
static double earlier_turns(worker_t *worker, const mlperf_request_t *request)
{
    bench_t *bench = worker->bench;
    pthread_mutex_lock(&bench->lock);
    mlperf_conversation_t *conversation =
        mlperf_conversation_find(&bench->conversations, request->conversation);
    uint32_t turns = conversation != NULL ? conversation->turns : 0;
    pthread_mutex_unlock(&bench->lock);
    double storage_s = 0;
    for (uint32_t turn = 1; turn <= turns; turn++) {
        if (turn == request->turn)
            continue;
        double latency_s = 0;
        bool hit = mlperf_cache_access(bench->cache,
                                       mlperf_object_key(request->conversation, turn), true,
                                       MLPERF_HIT_MULTI_TURN, &worker->io, &latency_s);
        storage_s += latency_s;
        tally(bench, hit, &bench->multi_turn_hits, &bench->multi_turn_misses);
    }
    return storage_s;
}

/* Step 5: the decode read, then one per 32 generated tokens; a miss
 * writes the object instead. */
static double decode(worker_t *worker, const mlperf_request_t *request, uint64_t key,
                     int hit_type)
{
    bench_t *bench = worker->bench;
    double storage_s = 0, latency_s = 0;
    if (!mlperf_cache_access(bench->cache, key, true, hit_type, &worker->io, &latency_s)) {
        mlperf_cache_allocate(bench->cache, key, request->context_tokens, true, &worker->io,
                              &latency_s);
        return latency_s;
    }
    storage_s += latency_s;
    int64_t reads = (request->generate_tokens + DECODE_BATCH - 1) / DECODE_BATCH;
    for (int64_t r = 0; r < (reads > 1 ? reads : 1); r++) {
        (void)mlperf_cache_access(bench->cache, key, true, hit_type, &worker->io, &latency_s);
        storage_s += latency_s;
    }
    return storage_s;
}

static void process(worker_t *worker, mlperf_request_t *request)
{
    bench_t *bench = worker->bench;
    int hit_type = system_prompt(worker, request);
    double storage_s = 0, latency_s = 0;
    if (request->turn > 1)
        storage_s += earlier_turns(worker, request);
    uint64_t key = mlperf_object_key(request->conversation, request->turn);
    mlperf_cache_allocate(bench->cache, key, request->context_tokens, true, &worker->io,
                          &latency_s);
    storage_s += latency_s;
    if (request->decode)
        storage_s += decode(worker, request, key, hit_type);
    double generation_s = (double)request->generate_tokens *
                          seconds_per_token[bench->params->params.generation_mode];
    if (generation_s > 0) {
        struct timespec pause = {.tv_sec = (time_t)generation_s,
                                 .tv_nsec = (long)(fmod(generation_s, 1.0) * 1e9)};
        nanosleep(&pause, NULL);
    }
    double end_to_end_s = (double)(kvio_time_ns() - request->submit_ns) * 1e-9;
    pthread_mutex_lock(&bench->lock);
    bench->requests_completed++;
    bench->tokens_generated += (uint64_t)request->generate_tokens;
    bench->storage_io_s += storage_s;
    (void)mlperf_samples_add(&bench->end_to_end, end_to_end_s);
    (void)mlperf_samples_add(&bench->storage_io, storage_s);
    (void)mlperf_samples_add(&bench->qos_end_to_end[request->qos], end_to_end_s);
    int64_t enough = bench->params->params.max_requests;
    if (enough > 0 && bench->requests_completed >= (uint64_t)enough) {
        /* kv-cache.py's --max-requests sets its stop event: no worker takes
         * another request. */
        bench->enough = bench->stop = true;
        pthread_cond_broadcast(&bench->queued);
        pthread_cond_broadcast(&bench->stopped);
    }
    pthread_mutex_unlock(&bench->lock);
}

static void *worker_main(void *arg)
{
    worker_t *worker = arg;
    bench_t *bench = worker->bench;
    for (;;) {
        pthread_mutex_lock(&bench->lock);
        while (!bench->stop && bench->queue_count == 0)
            pthread_cond_wait(&bench->queued, &bench->lock);
        if (bench->stop) { /* taken after the end: dropped, as kv-cache.py does */
            pthread_mutex_unlock(&bench->lock);
            return NULL;
        }
        mlperf_request_t request = queue_pop(bench);
        pthread_mutex_unlock(&bench->lock);
        process(worker, &request);
    }
}

/* ---------- the trial ---------- */

kvio_status_t mlperf_trial_check(const kvio_mlperf_params_t *params, int clients,
                                 uint64_t io_bytes, char *error_p, size_t error_len)
{
    if (mlperf_model_find(params->model) == NULL) {
        snprintf(error_p, error_len, "--model: '%s' is none of kv-cache.py's models "
                 "(tiny-1b, mistral-7b, llama2-7b, llama3.1-8b, llama3.1-70b-instruct, "
                 "deepseek-v3, qwen3-32b, gpt-oss-120b, gpt-oss-20b)", params->model);
        return KVIO_ERR_CONFIG;
    }
    int64_t workers = params->num_users < MAX_WORKERS ? params->num_users : MAX_WORKERS;
    /* The CPU tier may hold up to about twice its size (kv-cache.py takes
     * an object while the tier is under 5 % full, and up to 95 % of it). */
    double per_client = 2 * params->cpu_mem_gb * 1073741824.0 + (double)workers * 2 * io_bytes;
    double needed = per_client * (clients > 0 ? clients : 1);
    uint64_t available = 0;
    char why[256];
    if (kvio_mem_available(&available, why, sizeof(why)) == KVIO_OK &&
        needed > 0.8 * (double)available) {
        snprintf(error_p, error_len, "mlperf: %d client(s) here need %.1f GiB (a CPU tier of "
                 "%.1f GiB may hold twice that, and %lld workers 2 x %.1f MiB of buffers each), "
                 "%.1f GiB available (80 %% of it may be used): lower --cpu-mem-gb, --users or "
                 "--io-size, or spread the clients over nodes", clients, needed / 1073741824.0,
                 params->cpu_mem_gb, (long long)workers, (double)io_bytes / 1048576.0,
                 (double)available / 1073741824.0);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

static kvio_status_t bench_init(bench_t *bench, const mlperf_trial_params_t *params,
                                char *error_p, size_t error_len)
{
    *bench = (bench_t){.params = params, .num_users = params->params.num_users};
    pthread_mutex_init(&bench->lock, NULL);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&bench->queued, &attributes);
    pthread_cond_init(&bench->stopped, &attributes);
    pthread_condattr_destroy(&attributes);
    const mlperf_model_t *model = mlperf_model_find(params->params.model);
    mlperf_cache_params_t cache = {
        .dir = params->dir, .model = model,
        .kv_bytes_per_token = kvio_mlperf_kv_bytes_per_token(params->params.model),
        .tensor_parallel = params->params.tensor_parallel > 0 ? params->params.tensor_parallel : 1,
        .cpu_mem_gb = params->params.cpu_mem_gb,
        .storage_capacity_gb = params->params.storage_capacity_gb,
        .max_concurrent_allocs = params->params.max_concurrent_allocs, .data = params->data,
        .seed = params->seed, .verify = params->verify};
    kvio_status_t status = mlperf_cache_create(&cache, &bench->cache, error_p, error_len);
    if (status == KVIO_OK)
        status = mlperf_conversations_init(&bench->conversations);
    if (status == KVIO_OK)
        status = mlperf_users_generate(params->seed, bench->num_users, &bench->users);
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "mlperf: out of memory setting up %lld users",
                 (long long)bench->num_users);
    return status;
}

static void bench_fini(bench_t *bench)
{
    mlperf_cache_destroy(bench->cache);
    mlperf_conversations_fini(&bench->conversations);
    free(bench->users);
    free(bench->heap);
    mlperf_samples_free(&bench->end_to_end);
    mlperf_samples_free(&bench->storage_io);
    for (int q = 0; q < MLPERF_QOS_CLASSES; q++)
        mlperf_samples_free(&bench->qos_end_to_end[q]);
    pthread_cond_destroy(&bench->queued);
    pthread_cond_destroy(&bench->stopped);
    pthread_mutex_destroy(&bench->lock);
}

static bool enough_done(bench_t *bench)
{
    pthread_mutex_lock(&bench->lock);
    bool enough = bench->enough;
    pthread_mutex_unlock(&bench->lock);
    return enough;
}

/* The duration, or until the caller's stop flag or max_requests: checked
 * every 10 ms. */
static void wait_out(bench_t *bench, uint64_t end_ns)
{
    volatile sig_atomic_t *stop = bench->params->stop;
    while (kvio_time_ns() < end_ns && (stop == NULL || !*stop) && !enough_done(bench)) {
        uint64_t left = end_ns - kvio_time_ns();
        uint64_t nap = left < 10000000u ? left : 10000000u;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)nap};
        nanosleep(&pause, NULL);
    }
}

static void stop_all(bench_t *bench)
{
    pthread_mutex_lock(&bench->lock);
    bench->stop = true;
    pthread_cond_broadcast(&bench->queued);
    pthread_cond_broadcast(&bench->stopped);
    pthread_mutex_unlock(&bench->lock);
}

void mlperf_percentiles_of(mlperf_samples_t *samples, double scale,
                           mlperf_percentiles_t *percentiles_p)
{
    mlperf_percentiles_t p = {.count = samples->count};
    if (samples->count > 0 && kvio_sort_doubles(samples->values, samples->count) == KVIO_OK) {
        double sum = 0;
        for (size_t i = 0; i < samples->count; i++)
            sum += samples->values[i];
        p.mean = sum / (double)samples->count * scale;
        p.p50 = kvio_percentile_linear(samples->values, samples->count, 50) * scale;
        p.p95 = kvio_percentile_linear(samples->values, samples->count, 95) * scale;
        p.p99 = kvio_percentile_linear(samples->values, samples->count, 99) * scale;
        p.p999 = kvio_percentile_linear(samples->values, samples->count, 99.9) * scale;
        p.p9999 = kvio_percentile_linear(samples->values, samples->count, 99.99) * scale;
    }
    *percentiles_p = p;
}

static double per_second(double value, double seconds)
{
    return seconds > 0 ? value / seconds : 0;
}

/* _calculate_stats and get_stats(duration), while late workers may still
 * run (under the lock; their later counts are not the trial's). */
static void summarize(bench_t *bench, double elapsed_s, mlperf_rank_summary_t *summary_p)
{
    pthread_mutex_lock(&bench->lock);
    mlperf_cache_stats_t stats;
    mlperf_rank_summary_t s = {.rank = bench->params->rank, .trial = bench->params->trial,
                               .elapsed_s = elapsed_s};
    mlperf_cache_take_stats(bench->cache, &stats, &s.cpu_entries, &s.storage_entries,
                            &s.storage_limit_bytes);
    s.requests_completed = bench->requests_completed;
    s.total_tokens_generated = bench->tokens_generated;
    s.total_storage_io_s = bench->storage_io_s;
    s.avg_throughput_tokens_per_sec = per_second((double)s.total_tokens_generated, elapsed_s);
    s.storage_throughput_tokens_per_sec =
        per_second((double)s.total_tokens_generated, s.total_storage_io_s);
    s.requests_per_second = per_second((double)s.requests_completed, elapsed_s);
    mlperf_percentiles_of(&bench->end_to_end, 1e3, &s.end_to_end_ms);
    mlperf_percentiles_of(&bench->storage_io, 1e3, &s.storage_io_ms);
    for (int q = 0; q < MLPERF_QOS_CLASSES; q++)
        mlperf_percentiles_of(&bench->qos_end_to_end[q], 1e3, &s.qos_end_to_end_ms[q]);
    s.cache = stats.counts;
    const mlperf_cache_counts_t *c = &stats.counts;
    s.cache_hit_rate = c->cache_hits + c->cache_misses > 0
                           ? (double)c->cache_hits / (double)(c->cache_hits + c->cache_misses)
                           : 0;
    /* GiB per second of the trial's wall time, named gbps by kv-cache.py. */
    s.tier_cpu_read_bandwidth_gbps = per_second((double)c->tier_cpu_read / 1073741824.0, elapsed_s);
    s.tier_cpu_write_bandwidth_gbps =
        per_second((double)c->tier_cpu_written / 1073741824.0, elapsed_s);
    s.tier_storage_read_bandwidth_gbps =
        per_second((double)c->tier_storage_read / 1073741824.0, elapsed_s);
    s.tier_storage_write_bandwidth_gbps =
        per_second((double)c->tier_storage_written / 1073741824.0, elapsed_s);
    s.read_write_ratio = (double)c->total_read_bytes /
                         (double)(c->total_write_bytes > 0 ? c->total_write_bytes : 1);
    mlperf_percentiles_of(&stats.cpu_read, 1e3, &s.cpu_read_ms);
    mlperf_percentiles_of(&stats.cpu_write, 1e3, &s.cpu_write_ms);
    mlperf_percentiles_of(&stats.storage_read, 1e3, &s.storage_read_ms);
    mlperf_percentiles_of(&stats.storage_write, 1e3, &s.storage_write_ms);
    mlperf_percentiles_of(&stats.storage_read_device, 1e3, &s.storage_read_device_ms);
    mlperf_percentiles_of(&stats.storage_write_device, 1e3, &s.storage_write_device_ms);
    mlperf_percentiles_of(&stats.storage_read_host, 1e3, &s.storage_read_host_ms);
    mlperf_percentiles_of(&stats.storage_write_host, 1e3, &s.storage_write_host_ms);
    s.multi_turn_cache_hits = bench->multi_turn_hits;
    s.multi_turn_cache_misses = bench->multi_turn_misses;
    s.prefix_hits = bench->prefix_hits;
    s.prefix_misses = bench->prefix_misses;
    s.requests_enqueued = bench->requests_enqueued;
    s.requests_waiting = bench->queue_count;
    s.users_lost = bench->users_lost;
    s.window_read_bytes = bench->window_read_bytes;
    s.window_write_bytes = bench->window_write_bytes;
    s.window_read_gibps = per_second((double)s.window_read_bytes / 1073741824.0, elapsed_s);
    s.window_write_gibps = per_second((double)s.window_write_bytes / 1073741824.0, elapsed_s);
    pthread_mutex_unlock(&bench->lock);
    mlperf_cache_stats_free(&stats);
    *summary_p = s;
}

/* Starts the workers (each counting the file bytes it moves) and the
 * users' thread; false with the error when one cannot start. */
static bool start_threads(bench_t *bench, worker_t *workers, int64_t num_workers,
                          int64_t *started_p, pthread_t *generator_p, char *error_p,
                          size_t error_len)
{
    for (*started_p = 0; *started_p < num_workers; (*started_p)++) {
        worker_t *worker = &workers[*started_p];
        worker->bench = bench;
        kvio_rng_seed(&worker->rng, bench->params->seed, (uint32_t)*started_p, "mlperf worker");
        if (mlperf_io_init(&worker->io, bench->params->io_bytes) != KVIO_OK) {
            snprintf(error_p, error_len, "mlperf: no memory for worker %lld's buffers",
                     (long long)*started_p + 1);
            return false;
        }
        worker->io.read_progress = &bench->read_progress;
        worker->io.write_progress = &bench->write_progress;
        if (pthread_create(&worker->thread, NULL, worker_main, worker) != 0) {
            mlperf_io_fini(&worker->io);
            snprintf(error_p, error_len, "mlperf: cannot start worker %lld of %lld",
                     (long long)*started_p + 1, (long long)num_workers);
            return false;
        }
    }
    if (pthread_create(generator_p, NULL, generator_main, bench) != 0) {
        snprintf(error_p, error_len, "mlperf: cannot start the users' thread");
        return false;
    }
    return true;
}

/* IntegratedBenchmark.run's end: the threads joined in order, each for at
 * most 2 s (thread.join(timeout=2.0)); what a worker still running did by
 * then counts, what it does later does not. Returns which were joined. */
static void join_for_a_while(worker_t *workers, int64_t started, bool *joined)
{
    for (int64_t w = 0; w < started; w++) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 2;
        joined[w] = pthread_timedjoin_np(workers[w].thread, NULL, &deadline) == 0;
    }
}

/* The trial: the threads started, the duration waited out (its wall time
 * is actual_duration: from the start to the stop, not the drain), the
 * threads stopped and joined as kv-cache.py joins them, the summary taken,
 * then every worker waited for. */
static kvio_status_t run_threads(bench_t *bench, worker_t *workers, int64_t num_workers,
                                 mlperf_rank_summary_t *summary_p, char *error_p,
                                 size_t error_len)
{
    pthread_t generator;
    int64_t started = 0;
    bool *joined = calloc((size_t)num_workers + 1, sizeof(bool));
    bool running = joined != NULL && start_threads(bench, workers, num_workers, &started,
                                                    &generator, error_p, error_len);
    uint64_t start = kvio_time_ns();
    if (running)
        wait_out(bench, start + (uint64_t)(bench->params->params.duration_s * 1e9));
    double elapsed_s = (double)(kvio_time_ns() - start) * 1e-9;
    bench->window_read_bytes = atomic_load(&bench->read_progress);
    bench->window_write_bytes = atomic_load(&bench->write_progress);
    stop_all(bench);
    if (running) {
        pthread_join(generator, NULL);
        join_for_a_while(workers, started, joined);
        summarize(bench, elapsed_s, summary_p);
    }
    for (int64_t w = 0; w < started; w++) {
        if (joined == NULL || !joined[w])
            pthread_join(workers[w].thread, NULL);
        mlperf_io_fini(&workers[w].io);
    }
    free(joined);
    if (joined == NULL && error_p[0] == '\0')
        snprintf(error_p, error_len, "mlperf: out of memory starting %lld workers",
                 (long long)num_workers);
    return running ? KVIO_OK : KVIO_ERR_NOMEM;
}

kvio_status_t mlperf_trial_run(const mlperf_trial_params_t *params,
                               mlperf_rank_summary_t *summary_p, char *error_p,
                               size_t error_len)
{
    bench_t bench;
    kvio_status_t status = bench_init(&bench, params, error_p, error_len);
    int64_t num_workers = params->params.num_users < MAX_WORKERS ? params->params.num_users
                                                                 : MAX_WORKERS;
    worker_t *workers = status == KVIO_OK ? calloc((size_t)num_workers + 1, sizeof(*workers))
                                          : NULL;
    if (status == KVIO_OK && workers == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK) {
        error_p[0] = '\0';
        status = run_threads(&bench, workers, num_workers, summary_p, error_p, error_len);
    }
    if (status == KVIO_OK) {
        if (summary_p->cache.io_errors > 0)
            kvio_warn("mlperf: rank %d trial %d: %llu object reads or writes failed (counted "
                      "as kv-cache.py counts them; the first is logged above)", params->rank,
                      params->trial, (unsigned long long)summary_p->cache.io_errors);
    }
    free(workers);
    bench_fini(&bench);
    return status;
}
