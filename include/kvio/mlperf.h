/* kvio mlperf: MLPerf Storage v3.0's KV-cache benchmark as it runs it
 * (mlcommons/storage: kv_cache_benchmark/kv-cache.py, the kv_cache package
 * behind it, mlperf_wrapper.py, and mlpstorage_py's KVCacheBenchmark that
 * runs three options of three trials under mpirun and aggregates them):
 * per client (rank) open-loop users, a priority queue of QoS classes
 * drained by min(users, 500) workers, one .npy object per turn written
 * and fsync'ed, every earlier turn's object read back, a decode read and a
 * re-read per 32 generated tokens after a page-cache drop; its metrics
 * under v3.0's names with its definitions, everything else under kvio_
 * names (docs/mlperf.md). A library call (kvio_mlperf_run); cli/cmd_mlperf.c
 * is its shell. */
#ifndef KVIO_MLPERF_H
#define KVIO_MLPERF_H

#include "kvio/data.h"
#include "kvio/status.h"

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* kv-cache.py's --generation-mode: seconds slept per generated token. */
typedef enum {
    KVIO_MLPERF_GENERATION_NONE,      /* 0: every latency is storage I/O (v3.0's) */
    KVIO_MLPERF_GENERATION_FAST,      /* 2 ms */
    KVIO_MLPERF_GENERATION_REALISTIC, /* 30 ms */
} kvio_mlperf_generation_t;

/* What one option hands kv-cache.py (mlpstorage's WORKLOAD_PARAMS), plus
 * its knobs that the options leave at their defaults. */
typedef struct kvio_mlperf_params {
    char model[32];                /* --model: a kv-cache.py model name */
    int64_t num_users;             /* --num-users, per client */
    double duration_s;             /* --duration */
    double cpu_mem_gb;             /* --cpu-mem-gb (GiB: kv-cache.py multiplies by 1024**3) */
    int64_t max_concurrent_allocs; /* --max-concurrent-allocs (0: unlimited) */
    int generation_mode;           /* kvio_mlperf_generation_t */
    int64_t tensor_parallel;       /* --tensor-parallel: objects are 1/TP of a token's KV */
    double storage_capacity_gb;    /* --storage-capacity-gb (0: 95 % of the free space) */
    int64_t max_requests;          /* --max-requests: a trial ends after this many (0: the
                                      duration) */
} kvio_mlperf_params_t;

/* The three closed workloads of v3.0 (Rules.md Table KVCache-1). */
typedef struct kvio_mlperf_option {
    int number;       /* 1, 2, 3 */
    const char *name; /* max-storage-stress, storage-throughput, large-model */
    kvio_mlperf_params_t params;
} kvio_mlperf_option_t;

#define KVIO_MLPERF_OPTIONS 3
extern const kvio_mlperf_option_t kvio_mlperf_options[KVIO_MLPERF_OPTIONS];

/* The option named name ("1", "max-storage-stress", ...), or NULL. */
const kvio_mlperf_option_t *kvio_mlperf_option_find(const char *name);

/* KV bytes of one token of a kv-cache.py model (ModelConfig's
 * kv_cache_size_per_token), 0 when there is no such model. */
uint64_t kvio_mlperf_kv_bytes_per_token(const char *model);

/* Overrides of an option's parameters (OPEN division): a field is used when
 * its bit is set in `given`. */
#define KVIO_MLPERF_GIVE_MODEL (1u << 0)
#define KVIO_MLPERF_GIVE_USERS (1u << 1)
#define KVIO_MLPERF_GIVE_DURATION (1u << 2)
#define KVIO_MLPERF_GIVE_CPU_MEM (1u << 3)
#define KVIO_MLPERF_GIVE_ALLOCS (1u << 4)
#define KVIO_MLPERF_GIVE_GENERATION (1u << 5)
#define KVIO_MLPERF_GIVE_TP (1u << 6)
#define KVIO_MLPERF_GIVE_CAPACITY (1u << 7)
#define KVIO_MLPERF_GIVE_MAX_REQUESTS (1u << 8)

/* A run of kvio mlperf. */
typedef struct kvio_mlperf_config {
    const char *dir;            /* --dir: the cache directory's base; client N uses
                                   DIR/rank_N (mlperf_wrapper's --rank-cache-base) */
    const char *output_dir;     /* -o: where mlperf.json goes (NULL: results/mlperf-TIME) */
    int options[KVIO_MLPERF_OPTIONS]; /* option numbers to run, in order */
    size_t num_options;
    kvio_mlperf_params_t overrides;
    unsigned given;             /* KVIO_MLPERF_GIVE_* */
    int64_t seed;               /* the base: client N runs seed + N (mlperf_wrapper) */
    int64_t trials;
    double start_delay_s;       /* mlperf_wrapper's sleep before each trial */
    double end_delay_s;         /* ... and after it */
    double inter_option_delay_s; /* mlpstorage's sleep between options */
    int clients;                /* local runtime: clients as threads (mpirun: its ranks) */
    kvio_data_t data;           /* what the objects hold (random: kv-cache.py's) */
    bool verify;                /* check every byte read against what was written */
    uint64_t io_bytes;          /* bytes per read or write call (an object is many) */
    const char *const *argv;    /* the command as typed (provenance; may be NULL) */
    int argc;
    volatile sig_atomic_t *stop; /* set to stop early (may be NULL) */
    FILE *out;                  /* the table (NULL: none) */
} kvio_mlperf_config_t;

/* Fills config with v3.0's closed run: every option, seed 42, 3 trials,
 * the wrapper's 90 s delays and the 90 s between options, one client. */
void kvio_mlperf_config_defaults(kvio_mlperf_config_t *config);

/* Runs the options' trials on every rank (mpirun: each process a client;
 * else config->clients threads) and, on rank 0, writes mlperf.json and the
 * table. *result_p (rank 0: the JSON written; NULL elsewhere) is the
 * caller's. Bad input (a directory that cannot be used, memory that does
 * not fit) is KVIO_ERR_CONFIG with the numbers; a failed run another error;
 * the message in error_p. */
kvio_status_t kvio_mlperf_run(const kvio_mlperf_config_t *config, json_t **result_p,
                              char *error_p, size_t error_len);

#endif
