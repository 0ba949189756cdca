/* Engine overhead as the real-time executor sees it: one engine at batch 256
 * (Llama-3-8B on an H200, 32-token prompts, 120 output tokens, block 16,
 * prefix caching off, a real 5 GiB host KV pool), thread CPU time of
 * kvio_engine_schedule + kvio_engine_complete per iteration, with the thread
 * sleeping out each iteration's duration in between as the executor does.
 * Usage: engine_overhead [rounds] [sleep: 1|0] [pool GiB]
 * Prints `figure engine_overhead_pct N %` and µs per iteration. */
#include "kvio/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define REQUESTS 256
#define PROMPT 32
#define OUTPUT 120
#define BLOCK_SIZE 16

static int64_t thread_cpu_ns(void)
{
    struct timespec time;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time);
    return (int64_t)time.tv_sec * 1000000000 + time.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec pause = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
    nanosleep(&pause, NULL);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    bool sleep = argc > 2 ? atoi(argv[2]) != 0 : true;
    double pool_gib = argc > 3 ? atof(argv[3]) : 5;
    char error[256];
    kvio_model_t model = {.preset = "llama3-8b", .dtype_bytes = 2};
    kvio_gpu_t gpu = {.preset = "h200"};
    kvio_cost_config_t cost_config;
    kvio_engine_config_t engine_config;
    kvio_sched_config_t sched;
    if (kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK ||
        kvio_gpu_resolve(&gpu, error, sizeof(error)) != KVIO_OK ||
        kvio_config_defaults(kvio_cost_options, &cost_config, error, sizeof(error)) != KVIO_OK ||
        kvio_config_defaults(kvio_engine_options, &engine_config, error, sizeof(error)) !=
            KVIO_OK ||
        kvio_config_defaults(kvio_sched_options, &sched, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "engine_overhead: %s\n", error);
        return 1;
    }
    engine_config.max_num_seqs = 256;
    engine_config.max_num_batched_tokens = 65536;
    kvio_cost_t *cost = NULL;
    if (kvio_cost_create(&cost_config, &model, &gpu, &cost, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "engine_overhead: %s\n", error);
        return 1;
    }
    uint64_t kv_bytes_per_token = kvio_model_kv_bytes_per_token(&model, 1);
    uint64_t block_bytes = kv_bytes_per_token * BLOCK_SIZE;
    uint32_t blocks = (uint32_t)(pool_gib * 1073741824.0 / (double)block_bytes);
    if (blocks < REQUESTS * ((PROMPT + OUTPUT) / BLOCK_SIZE + 1))
        blocks = REQUESTS * ((PROMPT + OUTPUT) / BLOCK_SIZE + 1);
    size_t memory_bytes = (size_t)(blocks + 1) * block_bytes;
    void *memory = NULL;
    if (pool_gib > 0) {
        memory = mmap(NULL, memory_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
        if (memory == MAP_FAILED) {
            fprintf(stderr, "engine_overhead: cannot map %zu bytes\n", memory_bytes);
            return 1;
        }
        memset(memory, 0, memory_bytes);
    }
    int64_t overhead_ns = 0, planned_ns = 0, iterations = 0;
    int64_t schedule_ns = 0, complete_ns = 0, first_ns = 0;
    for (int round = 0; round < rounds; round++) {
        kvio_engine_params_t params = {
            .config = &engine_config, .num_blocks = blocks, .block_size = BLOCK_SIZE,
            .prefix_caching = false, .eviction = "lru", .sched = &sched, .seed = 1,
            .cost = cost, .kv_bytes_per_token = kv_bytes_per_token,
            .host_bandwidth = gpu.host_bandwidth, .kv_memory = memory,
            .block_bytes = block_bytes,
        };
        kvio_engine_t *engine = NULL;
        if (kvio_engine_create(&params, &engine, error, sizeof(error)) != KVIO_OK) {
            fprintf(stderr, "engine_overhead: %s\n", error);
            return 1;
        }
        for (uint64_t id = 0; id < REQUESTS; id++) {
            kvio_hash_t hashes[(PROMPT + OUTPUT) / BLOCK_SIZE];
            for (size_t b = 0; b < sizeof(hashes) / sizeof(hashes[0]); b++) {
                kvio_hash_run_t run = {.content_id = 1000 + id + (uint64_t)round * REQUESTS,
                                       .offset = (uint32_t)(b * BLOCK_SIZE),
                                       .length = BLOCK_SIZE};
                hashes[b] = kvio_hash_runs(b ? &hashes[b - 1] : NULL, &run, 1);
            }
            kvio_engine_request_t request = {
                .id = id, .prompt_tokens = PROMPT, .output_tokens = OUTPUT, .hashes = hashes,
                .num_hashes = sizeof(hashes) / sizeof(hashes[0]), .measured = true};
            if (kvio_engine_add(engine, &request) != KVIO_OK)
                return 1;
        }
        int64_t now = 0;
        bool first = true;
        while (kvio_engine_has_work(engine)) {
            kvio_engine_iteration_t iteration;
            int64_t start = thread_cpu_ns();
            if (kvio_engine_schedule(engine, now, &iteration) != KVIO_OK)
                return 1;
            int64_t scheduled = thread_cpu_ns();
            if (sleep)
                sleep_ns(iteration.duration_ns);
            now += iteration.duration_ns;
            int64_t before_complete = thread_cpu_ns();
            kvio_engine_complete(engine, now);
            int64_t end = thread_cpu_ns();
            schedule_ns += scheduled - start;
            complete_ns += end - before_complete;
            overhead_ns += (scheduled - start) + (end - before_complete);
            planned_ns += iteration.duration_ns;
            iterations++;
            if (first)
                first_ns += (scheduled - start) + (end - before_complete);
            first = false;
        }
        kvio_engine_destroy(engine);
    }
    printf("%lld iterations: schedule %.1f us, complete %.1f us per iteration; the first "
           "(admitting all) %.1f us\n",
           (long long)iterations, (double)schedule_ns / 1e3 / (double)iterations,
           (double)complete_ns / 1e3 / (double)iterations,
           (double)first_ns / 1e3 / (double)rounds);
    printf("figure engine_overhead_pct %.3f %%\n", 100.0 * (double)overhead_ns / (double)planned_ns);
    if (memory != NULL)
        munmap(memory, memory_bytes);
    kvio_cost_destroy(cost);
    kvio_config_free(kvio_sched_options, &sched);
    return 0;
}
