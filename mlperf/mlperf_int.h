/* kvio mlperf's parts (include/kvio/mlperf.h): Python's random for the user
 * profiles (pyrandom.c), kv-cache.py's models and v3.0's options
 * (workloads.c), its users and conversations (users.c), the object store
 * of its MultiTierCache (cache.c) and its files (objects.c), one client's
 * trial (bench.c), its summary and mlpstorage's aggregation (summary.c),
 * and the run (run.c). Each function says which kv-cache.py function it
 * mirrors. */
#ifndef KVIO_MLPERF_INT_H
#define KVIO_MLPERF_INT_H

#include "kvio/mlperf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvio/hashset.h"
#include "kvio/rng.h"

/* ---------- Python's random (CPython's _randommodule.c and random.py) ---------- */

/* MT19937 as random.seed(n) seeds it for a non-negative int n. */
typedef struct mlperf_pyrandom {
    uint32_t state[624];
    int index;
} mlperf_pyrandom_t;

void mlperf_pyrandom_seed(mlperf_pyrandom_t *random, uint64_t seed);
/* random.random(): 53 bits from two draws. */
double mlperf_pyrandom_random(mlperf_pyrandom_t *random);
/* random.randint(low, high), both included (_randbelow by rejection). */
int64_t mlperf_pyrandom_randint(mlperf_pyrandom_t *random, int64_t low, int64_t high);
/* random.uniform(low, high). */
double mlperf_pyrandom_uniform(mlperf_pyrandom_t *random, double low, double high);
/* random.choice over count items: the index chosen. */
uint64_t mlperf_pyrandom_choice(mlperf_pyrandom_t *random, uint64_t count);

/* ---------- models, user templates (workloads.c) ---------- */

typedef struct mlperf_model {
    const char *name;
    uint32_t layers, hidden, heads, kv_heads, head_dim; /* head_dim 0: hidden / heads */
    uint32_t kv_lora_rank, rope_head_dim;               /* MLA (deepseek-v3) */
} mlperf_model_t;

const mlperf_model_t *mlperf_model_find(const char *name);
/* The element shape of a token's KV as KVCacheGenerator.generate makes it,
 * for the .npy header: its dimensions and how many (MLA: 3, else 5). */
int mlperf_model_shape(const mlperf_model_t *model, uint64_t tokens, uint64_t shape_p[5]);

/* kv-cache.py's QoS classes (QoSLevel) and user types (UserSimulator). */
enum { MLPERF_QOS_INTERACTIVE, MLPERF_QOS_RESPONSIVE, MLPERF_QOS_BATCH, MLPERF_QOS_CLASSES };
extern const char *const mlperf_qos_names[MLPERF_QOS_CLASSES];
enum { MLPERF_USER_CHATBOT, MLPERF_USER_CODING, MLPERF_USER_DOCUMENT, MLPERF_USER_TYPES };
extern const char *const mlperf_user_type_names[MLPERF_USER_TYPES];

/* ---------- users and conversations (users.c) ---------- */

typedef struct mlperf_user {
    uint32_t id;
    int type, qos, priority;
    int64_t context_length, generation_length;
    double think_time_s;
    kvio_rng_t rng;        /* this user's draws once the run starts */
    uint64_t conversation; /* the one it is in (0: none) */
    bool lost;             /* its conversation was evicted under it (kv-cache.py's
                              add_turn raises and the user's thread ends) */
    uint64_t next_ns;      /* when it next enqueues a request */
} mlperf_user_t;

/* UserSimulator.generate_mixed_users(num_users) after random.seed(seed). */
kvio_status_t mlperf_users_generate(uint64_t seed, int64_t num_users, mlperf_user_t **users_p);

/* One request (InferenceRequest). */
typedef struct mlperf_request {
    uint64_t sequence;      /* enqueue order: ties of priority and time */
    int priority, qos;
    uint32_t user;
    uint64_t conversation;  /* 0: none (multi-turn off) */
    uint32_t turn;
    int64_t context_tokens, generate_tokens;
    bool decode;            /* phase PREFILL_DECODE (context < 10,000): decode reads */
    uint64_t submit_ns;     /* created */
    uint64_t enqueue_ns;    /* the queue's time.time() */
} mlperf_request_t;

/* ConversationManager: the open conversations, the oldest dropped past
 * max_conversations. Under the owner's lock. */
typedef struct mlperf_conversation {
    uint64_t id;
    uint32_t user;
    uint32_t turns;          /* turn_number: keys are turns 1..turns */
    uint64_t last_access_ns, created_ns;
} mlperf_conversation_t;

typedef struct mlperf_conversations {
    mlperf_conversation_t *items;
    size_t count, capacity;
    kvio_map_t index;        /* id -> item + 1 */
    uint64_t next_id;
    size_t max_conversations;
    uint32_t max_turns;
} mlperf_conversations_t;

kvio_status_t mlperf_conversations_init(mlperf_conversations_t *conversations);
void mlperf_conversations_fini(mlperf_conversations_t *conversations);
/* start_conversation: a new id (evicting the least recently used one at
 * the limit); 0 when out of memory. */
uint64_t mlperf_conversation_start(mlperf_conversations_t *conversations, uint32_t user,
                                   uint64_t now_ns);
/* The conversation of id, or NULL once evicted. */
mlperf_conversation_t *mlperf_conversation_find(mlperf_conversations_t *conversations,
                                                uint64_t id);

/* ---------- the object store: MultiTierCache (cache.c) ---------- */

enum { MLPERF_TIER_NONE, MLPERF_TIER_CPU, MLPERF_TIER_NVME };

/* Latency of one backend call (StorageBackend.IOTiming), seconds. */
typedef struct mlperf_timing {
    double total, device, host;
} mlperf_timing_t;

/* A growable list of samples, seconds. */
typedef struct mlperf_samples {
    double *values;
    size_t count, capacity;
} mlperf_samples_t;

kvio_status_t mlperf_samples_add(mlperf_samples_t *samples, double value);
void mlperf_samples_free(mlperf_samples_t *samples);

/* MultiTierCache.stats' counters, and what kvio counts beside them: plain
 * numbers (a client's summary carries them as they are). */
typedef struct mlperf_cache_counts {
    uint64_t cache_hits, cache_misses, evictions, offloads_cpu, offloads_storage;
    uint64_t prefill_writes, decode_reads;
    uint64_t tier_cpu_written, tier_storage_written, tier_cpu_read, tier_storage_read;
    uint64_t system_prompt_hits, user_cache_hits, multi_turn_hits;
    uint64_t total_read_bytes, total_write_bytes, read_operations, write_operations;
    double storage_tokens_processed;
    /* kvio's */
    uint64_t demotions, demotion_bytes, nvme_deletes, io_errors, verify_failures;
    uint64_t storage_bytes_on_device; /* file bytes written, headers included */
} mlperf_cache_counts_t;

/* ... and its latency lists (seconds). */
typedef struct mlperf_cache_stats {
    mlperf_cache_counts_t counts;
    mlperf_samples_t cpu_read, cpu_write, storage_read, storage_write;
    mlperf_samples_t storage_read_device, storage_read_host;
    mlperf_samples_t storage_write_device, storage_write_host;
} mlperf_cache_stats_t;

typedef struct mlperf_cache mlperf_cache_t;

/* A worker's buffers for object I/O: one piece of an object at a time. */
typedef struct mlperf_io {
    unsigned char *buffer; /* io_bytes, aligned */
    unsigned char *copy;   /* io_bytes: the host copy np.array makes of a read */
    uint64_t io_bytes;
    /* Object bytes read from and written to files, counted as each piece
     * moves (the trial's; may be NULL): what moved within its wall time. */
    _Atomic uint64_t *read_progress, *write_progress;
} mlperf_io_t;

kvio_status_t mlperf_io_init(mlperf_io_t *io, uint64_t io_bytes);
void mlperf_io_fini(mlperf_io_t *io);

typedef struct mlperf_cache_params {
    const char *dir;               /* this client's cache directory (created, *.npy cleared) */
    const mlperf_model_t *model;
    uint64_t kv_bytes_per_token;
    int64_t tensor_parallel;
    double cpu_mem_gb, storage_capacity_gb;
    int64_t max_concurrent_allocs;
    kvio_data_t data;
    uint64_t seed;
    bool verify;
} mlperf_cache_params_t;

kvio_status_t mlperf_cache_create(const mlperf_cache_params_t *params, mlperf_cache_t **cache_p,
                                  char *error_p, size_t error_len);
void mlperf_cache_destroy(mlperf_cache_t *cache);

/* The key of a turn's object (conversation id, turn). */
uint64_t mlperf_object_key(uint64_t conversation, uint32_t turn);

/* allocate_cache(key, tokens): the object written to the first tier with
 * room (already there: nothing written, latency 0); its latency (total)
 * into *latency_s_p. prefill: phase PREFILL (prefill_writes). */
void mlperf_cache_allocate(mlperf_cache_t *cache, uint64_t key, int64_t tokens, bool prefill,
                           mlperf_io_t *io, double *latency_s_p);

/* What access_cache counts a hit as (cache_type). */
enum { MLPERF_HIT_USER, MLPERF_HIT_SYSTEM, MLPERF_HIT_MULTI_TURN };

/* access_cache(key, phase, cache_type): false on a miss (counted); on a
 * hit the object read from its tier, *latency_s_p its latency. decode:
 * phase DECODE (decode_reads). */
bool mlperf_cache_access(mlperf_cache_t *cache, uint64_t key, bool decode, int hit_type,
                         mlperf_io_t *io, double *latency_s_p);

/* A miss of a key that was never written (the system prompt's). */
void mlperf_cache_miss(mlperf_cache_t *cache);

/* Moves the counters out (the cache's are left empty), with the tiers'
 * entry counts and the storage limit it used. */
void mlperf_cache_take_stats(mlperf_cache_t *cache, mlperf_cache_stats_t *stats_p,
                             uint64_t *cpu_entries_p, uint64_t *storage_entries_p,
                             double *storage_limit_bytes_p);
void mlperf_cache_stats_free(mlperf_cache_stats_t *stats);

/* ---------- the files (objects.c): NVMeBackend's .npy objects ---------- */

/* An object's bytes: .npy header (the shape), then size bytes of data
 * generated from content_key. */
typedef struct mlperf_object {
    const char *path;
    uint64_t size;
    uint64_t content_key;
    uint64_t shape[5];
    int dims;
} mlperf_object_t;

/* NVMeBackend.write: np.save (open, header, data; host) then fsync
 * (device); the data's generation or source copy is not timed. from: the
 * bytes (a CPU tier entry's), or NULL to generate them. *file_bytes_p:
 * what the file holds. */
kvio_status_t mlperf_object_write(const mlperf_object_t *object, const kvio_data_t *data,
                                  const unsigned char *from, mlperf_io_t *io,
                                  mlperf_timing_t *timing_p, uint64_t *file_bytes_p,
                                  char *error_p, size_t error_len);

/* NVMeBackend.read: posix_fadvise(DONTNEED) (host), np.load (device), its
 * copy (np.array; host). verify: each piece checked (untimed); *intact_p
 * false when one differs. */
kvio_status_t mlperf_object_read(const mlperf_object_t *object, const kvio_data_t *data,
                                 bool verify, mlperf_io_t *io, mlperf_timing_t *timing_p,
                                 bool *intact_p, char *error_p, size_t error_len);

/* ---------- one client's trial (bench.c) ---------- */

/* Percentiles as kv-cache.py prints them (np.percentile, ms). */
typedef struct mlperf_percentiles {
    uint64_t count;
    double mean, p50, p95, p99, p999, p9999;
} mlperf_percentiles_t;

void mlperf_percentiles_of(mlperf_samples_t *samples, double scale,
                           mlperf_percentiles_t *percentiles_p);

/* One client's trial as kv-cache.py's results JSON summarises it
 * (_calculate_stats, MultiTierCache.get_stats), and kvio's figures. Plain
 * numbers: it travels between ranks as bytes. */
typedef struct mlperf_rank_summary {
    int32_t rank, trial;
    double elapsed_s;
    uint64_t requests_completed, total_tokens_generated;
    double total_storage_io_s;
    double avg_throughput_tokens_per_sec, storage_throughput_tokens_per_sec;
    double requests_per_second;
    mlperf_percentiles_t end_to_end_ms, storage_io_ms;
    mlperf_cache_counts_t cache;
    double cache_hit_rate;
    uint64_t cpu_entries, storage_entries;
    double tier_cpu_read_bandwidth_gbps, tier_cpu_write_bandwidth_gbps;
    double tier_storage_read_bandwidth_gbps, tier_storage_write_bandwidth_gbps;
    double read_write_ratio;
    mlperf_percentiles_t cpu_read_ms, cpu_write_ms, storage_read_ms, storage_write_ms;
    mlperf_percentiles_t storage_read_device_ms, storage_write_device_ms;
    mlperf_percentiles_t storage_read_host_ms, storage_write_host_ms;
    uint64_t multi_turn_cache_hits, multi_turn_cache_misses;
    uint64_t prefix_hits, prefix_misses;
    /* kvio's */
    uint64_t requests_enqueued, requests_waiting, users_lost;
    double storage_limit_bytes;
    uint64_t window_read_bytes, window_write_bytes; /* object bytes moved by the stop */
    double window_read_gibps, window_write_gibps;   /* ... over the wall time */
    mlperf_percentiles_t qos_end_to_end_ms[MLPERF_QOS_CLASSES];
} mlperf_rank_summary_t;

typedef struct mlperf_trial_params {
    kvio_mlperf_params_t params;
    const char *dir;       /* this client's cache directory */
    uint64_t seed;         /* this client's (base + rank) */
    int32_t rank, trial;
    kvio_data_t data;
    bool verify;
    uint64_t io_bytes;
    volatile sig_atomic_t *stop;
} mlperf_trial_params_t;

/* Checks what a trial needs of this machine (the model, memory for the
 * CPU tier and the workers' buffers), with the numbers. */
kvio_status_t mlperf_trial_check(const kvio_mlperf_params_t *params, int clients,
                                 uint64_t io_bytes, char *error_p, size_t error_len);

/* IntegratedBenchmark.run: one trial of one client. */
kvio_status_t mlperf_trial_run(const mlperf_trial_params_t *params,
                               mlperf_rank_summary_t *summary_p, char *error_p,
                               size_t error_len);

/* ---------- results (summary.c) ---------- */

/* mlpstorage's _aggregate_option_results over trials x ranks summaries
 * (trial-major), with Rules.md 6.3.4's device latencies. */
typedef struct mlperf_aggregate {
    double read_bandwidth_gbps, write_bandwidth_gbps;
    double storage_throughput_tokens_per_sec, avg_throughput_tokens_per_sec;
    double device_read_p95_ms, device_write_p95_ms, p95_latency_ms;
    uint64_t cpu_tier_ranks;
    /* kvio's: the per-trial sums they are means of, and their spread; the
     * same of the file bytes moved within the trials' wall time */
    double trial_read_bandwidth_gbps[64];
    double read_bandwidth_cv;
    double window_read_gibps, window_write_gibps, window_read_cv;
    int trials, ranks;
} mlperf_aggregate_t;

void mlperf_aggregate(const mlperf_rank_summary_t *summaries, int trials, int ranks,
                      mlperf_aggregate_t *aggregate_p);

/* kv-cache.py's names for one client's trial (its results JSON's summary
 * and cache_stats), kvio's under "kvio". */
json_t *mlperf_rank_json(const mlperf_rank_summary_t *summary);
json_t *mlperf_aggregate_json(const mlperf_aggregate_t *aggregate);
/* The params as mlpstorage passes them to kv-cache.py. */
json_t *mlperf_params_json(const kvio_mlperf_params_t *params);

#endif
