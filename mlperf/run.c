/* kvio_mlperf_run: mlpstorage's KV-cache run (KVCacheBenchmark._execute_run
 * and mlperf_wrapper.py): every option's trials, each client (rank) with
 * its own users, seed (base + rank) and cache directory (DIR/rank_N),
 * mlperf_wrapper's sleeps around each trial and mlpstorage's between
 * options; rank 0 gathers every client's trial, aggregates each option as
 * mlpstorage does and writes mlperf.json (provenance: kvio's version and
 * build, the command, the start time and the host) and the table. */
#include "mlperf/mlperf_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/results.h"
#include "kvio/rte.h"

typedef struct run {
    const kvio_mlperf_config_t *config;
    kvio_mlperf_params_t params[KVIO_MLPERF_OPTIONS]; /* each option's, overrides applied */
    /* rank 0's */
    mlperf_rank_summary_t *summaries[KVIO_MLPERF_OPTIONS]; /* trials x ranks */
    int ranks;
    bool stopped;
    uint64_t start_ns; /* wall clock, for the provenance */
} run_t;

/* Each override: its flag, and where it is in the parameters. */
#define OVERRIDE(flag, field)                                                                \
    {flag, offsetof(kvio_mlperf_params_t, field), sizeof(((kvio_mlperf_params_t *)0)->field)}
static const struct {
    unsigned flag;
    size_t offset, size;
} overrides[] = {
    OVERRIDE(KVIO_MLPERF_GIVE_MODEL, model),
    OVERRIDE(KVIO_MLPERF_GIVE_USERS, num_users),
    OVERRIDE(KVIO_MLPERF_GIVE_DURATION, duration_s),
    OVERRIDE(KVIO_MLPERF_GIVE_CPU_MEM, cpu_mem_gb),
    OVERRIDE(KVIO_MLPERF_GIVE_ALLOCS, max_concurrent_allocs),
    OVERRIDE(KVIO_MLPERF_GIVE_GENERATION, generation_mode),
    OVERRIDE(KVIO_MLPERF_GIVE_TP, tensor_parallel),
    OVERRIDE(KVIO_MLPERF_GIVE_CAPACITY, storage_capacity_gb),
    OVERRIDE(KVIO_MLPERF_GIVE_MAX_REQUESTS, max_requests),
};

/* The option's parameters with the overrides (OPEN division: given flags
 * supersede WORKLOAD_PARAMS one key at a time). */
static kvio_mlperf_params_t effective(const kvio_mlperf_config_t *config, int number)
{
    kvio_mlperf_params_t params = kvio_mlperf_options[number - 1].params;
    for (size_t i = 0; i < sizeof(overrides) / sizeof(overrides[0]); i++)
        if (config->given & overrides[i].flag)
            memcpy((char *)&params + overrides[i].offset,
                   (const char *)&config->overrides + overrides[i].offset, overrides[i].size);
    return params;
}

/* CLOSED: the options as WORKLOAD_PARAMS has them, the sequence's locks
 * (seed 42, 3 trials, 90 s between options) and kv-cache.py's own bytes. */
static bool closed_division(const kvio_mlperf_config_t *config)
{
    return config->given == 0 && config->seed == 42 && config->trials == 3 &&
           config->inter_option_delay_s == 90 && config->num_options == KVIO_MLPERF_OPTIONS &&
           config->data.kind == KVIO_DATA_RANDOM && !config->verify;
}

/* Sleeps seconds, or until the caller's stop flag. */
static void pause_for(const kvio_mlperf_config_t *config, double seconds)
{
    uint64_t end = kvio_time_ns() + (uint64_t)(seconds * 1e9);
    while (kvio_time_ns() < end && (config->stop == NULL || !*config->stop)) {
        uint64_t left = end - kvio_time_ns();
        struct timespec nap = {.tv_sec = 0, .tv_nsec = (long)(left < 100000000u ? left
                                                                                 : 100000000u)};
        nanosleep(&nap, NULL);
    }
}

static bool stopped(const kvio_mlperf_config_t *config)
{
    return config->stop != NULL && *config->stop;
}

/* One trial on this rank, its summary gathered to rank 0. */
static kvio_status_t trial(run_t *run, kvio_rte_t *rte, int option, int number, int t)
{
    const kvio_mlperf_config_t *config = run->config;
    int rank = kvio_rte_index(rte), size = kvio_rte_size(rte);
    char dir[4096], error[1024] = "";
    snprintf(dir, sizeof(dir), "%s/rank_%d", config->dir, rank);
    mlperf_trial_params_t params = {
        .params = run->params[option], .dir = dir, .seed = (uint64_t)config->seed + (uint64_t)rank,
        .rank = rank, .trial = t, .data = config->data, .verify = config->verify,
        .io_bytes = config->io_bytes, .stop = config->stop};
    pause_for(config, config->start_delay_s);
    kvio_status_t status = kvio_rte_barrier(rte); /* the clients start together */
    mlperf_rank_summary_t summary = {0};
    if (status == KVIO_OK) {
        if (rank == 0 && config->out != NULL)
            fprintf(stderr, "kvio mlperf: option %d trial %d/%lld: %d client(s), %lld users "
                    "each, %.0f s\n", number, t + 1, (long long)config->trials, size,
                    (long long)params.params.num_users, params.params.duration_s);
        status = mlperf_trial_run(&params, &summary, error, sizeof(error));
        if (status != KVIO_OK)
            kvio_rte_set_error(rte, "rank %d: %s", rank, error);
    }
    pause_for(config, config->end_delay_s);
    void **blobs = NULL;
    size_t *lengths = NULL;
    if (status == KVIO_OK)
        status = kvio_rte_gather_blobs(rte, &summary, sizeof(summary), &blobs, &lengths);
    if (status == KVIO_OK && rank == 0) {
        for (int r = 0; r < size; r++) {
            if (lengths[r] != sizeof(summary)) {
                kvio_rte_set_error(rte, "rank %d's summary is %zu bytes, not %zu (a kvio of "
                                   "another build?)", r, lengths[r], sizeof(summary));
                status = KVIO_ERR_PEER;
                break;
            }
            memcpy(&run->summaries[option][(size_t)t * (size_t)size + (size_t)r], blobs[r],
                   sizeof(summary));
        }
        kvio_rte_blobs_free(blobs, lengths, size);
    }
    return status;
}

static kvio_status_t rank_main(kvio_rte_t *rte, void *arg)
{
    run_t *run = arg;
    const kvio_mlperf_config_t *config = run->config;
    char error[1024];
    if (kvio_rte_index(rte) == 0) {
        run->ranks = kvio_rte_size(rte);
        for (size_t o = 0; o < config->num_options; o++)
            if ((run->summaries[o] = calloc((size_t)config->trials * (size_t)run->ranks,
                                            sizeof(mlperf_rank_summary_t))) == NULL) {
                kvio_rte_set_error(rte, "mlperf: out of memory for %d clients' summaries",
                                   run->ranks);
                return KVIO_ERR_NOMEM;
            }
    }
    for (size_t o = 0; o < config->num_options; o++) {
        int clients = kvio_rte_shared_memory(rte) ? kvio_rte_size(rte) : 1;
        kvio_status_t status = mlperf_trial_check(&run->params[o], clients, config->io_bytes,
                                                  error, sizeof(error));
        if (status != KVIO_OK) {
            kvio_rte_set_error(rte, "%s", error);
            return status;
        }
    }
    for (size_t o = 0; o < config->num_options && !stopped(config); o++) {
        if (o > 0)
            pause_for(config, config->inter_option_delay_s);
        for (int t = 0; t < config->trials && !stopped(config); t++) {
            kvio_status_t status = trial(run, rte, (int)o, config->options[o], t);
            if (status != KVIO_OK)
                return status;
        }
    }
    if (kvio_rte_index(rte) == 0)
        run->stopped = stopped(config);
    return KVIO_OK;
}

/* ---------- rank 0: mlperf.json and the table ---------- */

static json_t *option_json(const run_t *run, size_t o, mlperf_aggregate_t *aggregate_p)
{
    int number = run->config->options[o];
    int trials = (int)run->config->trials;
    mlperf_aggregate(run->summaries[o], trials, run->ranks, aggregate_p);
    json_t *option = json_pack("{s:i, s:s, s:o}", "option", number, "name",
                               kvio_mlperf_options[number - 1].name, "parameters",
                               mlperf_params_json(&run->params[o]));
    json_t *score = mlperf_aggregate_json(aggregate_p);
    json_object_update(option, score);
    json_decref(score);
    json_t *list = json_array();
    for (int t = 0; t < trials; t++) {
        json_t *ranks = json_array();
        for (int r = 0; r < run->ranks; r++)
            json_array_append_new(ranks,
                                  mlperf_rank_json(&run->summaries[o][t * run->ranks + r]));
        json_array_append_new(list, json_pack("{s:i, s:o}", "trial", t, "ranks", ranks));
    }
    json_object_set_new(option, "trials", list);
    return option;
}

static void print_table(const run_t *run, const mlperf_aggregate_t *aggregates, FILE *out)
{
    fprintf(out, "MLPerf Storage v3.0 KV cache (kvio mlperf), %d client(s), %lld trial(s)\n",
            run->ranks, (long long)run->config->trials);
    fprintf(out, "%-22s %12s %12s %14s %12s %12s\n", "option", "read GiB/s", "write GiB/s",
            "storage tok/s", "dev rd p95", "dev wr p95");
    for (size_t o = 0; o < run->config->num_options; o++) {
        const mlperf_aggregate_t *a = &aggregates[o];
        char name[64];
        snprintf(name, sizeof(name), "%d %s", run->config->options[o],
                 kvio_mlperf_options[run->config->options[o] - 1].name);
        fprintf(out, "%-22s %12.3f %12.3f %14.1f %10.1fms %10.1fms\n", name,
                a->read_bandwidth_gbps, a->write_bandwidth_gbps,
                a->storage_throughput_tokens_per_sec, a->device_read_p95_ms,
                a->device_write_p95_ms);
    }
    fprintf(out, "read and write: GiB/s of the trial's wall time summed over clients, mean of "
                 "trials; storage tok/s: tokens generated / storage I/O seconds, summed, mean; "
                 "P95s: the worst client's and trial's (mlperf.json: every figure)\n");
}

static kvio_status_t write_results(run_t *run, json_t **result_p, char *error_p,
                                   size_t error_len)
{
    const kvio_mlperf_config_t *config = run->config;
    kvio_results_t *results = NULL;
    kvio_status_t status = kvio_results_create(config->output_dir, "mlperf", true, &results,
                                               error_p, error_len);
    if (status != KVIO_OK)
        return status;
    char data[32];
    kvio_data_format(&config->data, data, sizeof(data));
    kvio_provenance_t provenance = {.argc = config->argc, .argv = config->argv};
    json_t *root = kvio_provenance_json(&provenance, NULL, run->start_ns);
    json_t *about = json_pack(
        "{s:s, s:s, s:s, s:i, s:I, s:I, s:s, s:b, s:s, s:f, s:f, s:f}", "kind", "kvio-mlperf",
        "benchmark",
        "MLPerf Storage v3.0 KV cache (mlcommons/storage kv_cache_benchmark, mlpstorage_py)",
        "division", closed_division(config) ? "closed" : "open", "clients", run->ranks, "seed",
        (json_int_t)config->seed, "trials", (json_int_t)config->trials, "cache_dir", config->dir,
        "kvio_verify", config->verify, "kvio_data", data, "kvio_start_delay_s",
        config->start_delay_s, "kvio_end_delay_s", config->end_delay_s,
        "inter_option_delay_s", config->inter_option_delay_s);
    json_object_update_new(root, about);
    if (run->stopped)
        json_object_set_new(root, "incomplete",
                            json_string("stopped early (SIGINT or SIGTERM): the trials that ran"));
    mlperf_aggregate_t aggregates[KVIO_MLPERF_OPTIONS] = {0};
    json_t *options = json_array();
    for (size_t o = 0; o < config->num_options; o++)
        json_array_append_new(options, option_json(run, o, &aggregates[o]));
    json_object_set_new(root, "options", options);
    status = kvio_results_write_json(results, "mlperf.json", root, error_p, error_len);
    if (status == KVIO_OK && config->out != NULL) {
        print_table(run, aggregates, config->out);
        fprintf(config->out, "results: %s/mlperf.json\n", kvio_results_path(results));
    }
    kvio_results_destroy(results);
    if (status == KVIO_OK)
        *result_p = root;
    else
        json_decref(root);
    return status;
}

static kvio_status_t check_config(const kvio_mlperf_config_t *config, char *error_p,
                                  size_t error_len)
{
    if (config->dir == NULL || config->dir[0] == '\0') {
        snprintf(error_p, error_len, "--dir: the cache directory on the device under test "
                 "(kv-cache.py's --cache-dir) is required");
        return KVIO_ERR_CONFIG;
    }
    if (config->trials < 1 || config->trials > 64 || config->num_options == 0) {
        snprintf(error_p, error_len, "--trials: %lld: from 1 to 64", (long long)config->trials);
        return KVIO_ERR_CONFIG;
    }
    if (config->io_bytes < 4096 || config->io_bytes > (1u << 30)) {
        snprintf(error_p, error_len, "--io-size: %llu bytes: from 4 KiB to 1 GiB",
                 (unsigned long long)config->io_bytes);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

kvio_status_t kvio_mlperf_run(const kvio_mlperf_config_t *config, json_t **result_p,
                              char *error_p, size_t error_len)
{
    *result_p = NULL;
    kvio_status_t status = check_config(config, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    run_t run = {.config = config, .start_ns = kvio_wall_time_ns()};
    for (size_t o = 0; o < config->num_options; o++)
        run.params[o] = effective(config, config->options[o]);
    /* Under mpirun every process is a client (mlpstorage's ranks); else
     * config->clients threads. */
    int launched = strcmp(kvio_rte_detect(), "mpi") == 0 ? kvio_rte_launched_size() : 0;
    kvio_rte_params_t rte = {.kind = "auto", .num_ranks = launched > 0           ? launched
                                                          : config->clients > 0 ? config->clients
                                                                                : 1};
    kvio_rte_world_t *world = NULL;
    status = kvio_rte_world_create(&rte, &world, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_rte_world_set_stop(world, config->stop);
    bool root = kvio_rte_world_is_root(world);
    status = kvio_rte_world_run(world, rank_main, &run, error_p, error_len);
    if (status == KVIO_OK && root)
        status = write_results(&run, result_p, error_p, error_len);
    kvio_rte_world_destroy(world, status != KVIO_OK);
    for (size_t o = 0; o < config->num_options; o++)
        free(run.summaries[o]);
    return status;
}
