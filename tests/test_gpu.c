/* Memory domains and the GPU paths. Without a device (or without CUDA) the
 * GPU tests skip with the reason, and the host side is tested instead: the
 * query says why there is no device, a GPU request fails with that reason or
 * falls back to host memory when asked to, a run with fallback: host reports
 * host memory, one with fallback: error exits 2 with the message, and the
 * GPU transports refuse cleanly. With a device the same tests check that
 * copies round-trip, the spin kernel lasts its time, and cuda-ipc and staged
 * deliver verified versions. */
#include "kvio/gpu.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/run.h"
#include "kvio/xfer.h"
#include "tests/helpers.h"

/* True when a CUDA device is usable; reason_p says why not. */
static bool have_device(char *reason_p, size_t reason_len)
{
    kvio_device_info_t info;
    return kvio_device_query(-1, &info, reason_p, reason_len) == KVIO_OK;
}

#define REQUIRE_GPU()                                                                     \
    do {                                                                                  \
        char reason_[512];                                                                \
        if (!test_require("gpu", have_device(reason_, sizeof(reason_)), reason_))         \
            return;                                                                       \
    } while (0)

/* For the no-device paths: skip when a device is there (they cannot be
 * reached then). */
#define REQUIRE_NO_GPU()                                                                  \
    do {                                                                                  \
        char reason_[512];                                                                \
        if (have_device(reason_, sizeof(reason_)))                                        \
            cr_skip_test("a CUDA device is present: the no-device path is not reachable"); \
    } while (0)

Test(gpu, query_names_the_device_or_why_there_is_none, .timeout = 30)
{
    kvio_device_info_t info;
    char error[512] = "";
    kvio_status_t status = kvio_device_query(-1, &info, error, sizeof(error));
    if (!kvio_device_built()) {
        cr_assert_eq(status, KVIO_ERR_UNSUPPORTED);
        cr_assert(test_contains(error, "CUDA not built"), "%s", error);
    } else if (status != KVIO_OK) {
        cr_assert_eq(status, KVIO_ERR_DEVICE);
        cr_assert(strncmp(error, "no CUDA device: ", 16) == 0, "%s", error);
    } else {
        cr_assert_geq(info.count, 1);
        cr_assert_gt(info.multiprocessors, 0);
        cr_assert_gt(info.clock_khz, 0);
        cr_assert_gt(info.memory_bytes, 0);
        cr_assert_neq(info.name[0], '\0');
    }
}

/* Scatters blocks of src to shuffled places in dst in one batch and checks
 * every byte; domain decides where dst lives (host or cuda), with a pinned
 * staging buffer to read it back. */
static void batched_round_trip(kvio_device_t *domain)
{
    enum { BLOCKS = 64, BLOCK = 8192 };
    unsigned char *source = malloc(BLOCKS * BLOCK), *back = NULL;
    void *pool = NULL;
    cr_assert_not_null(source);
    for (size_t i = 0; i < BLOCKS * BLOCK; i++)
        source[i] = (unsigned char)(i * 7 + i / 4096);
    cr_assert_eq(kvio_device_alloc(domain, BLOCKS * BLOCK, &pool), KVIO_OK, "%s",
                 kvio_device_error(domain));
    cr_assert_eq(kvio_device_host_alloc(domain, BLOCKS * BLOCK, (void **)&back), KVIO_OK, "%s",
                 kvio_device_error(domain));
    kvio_device_copy_t up[BLOCKS], down[BLOCKS];
    for (size_t i = 0; i < BLOCKS; i++) {
        size_t place = (i * 37) % BLOCKS; /* 37 is coprime with 64: a permutation */
        up[i] = (kvio_device_copy_t){.dst = (char *)pool + place * BLOCK,
                                     .src = source + i * BLOCK, .bytes = BLOCK};
        down[i] = (kvio_device_copy_t){.dst = back + i * BLOCK,
                                       .src = (char *)pool + place * BLOCK, .bytes = BLOCK};
    }
    cr_assert_eq(kvio_device_copy_async(domain, up, BLOCKS), KVIO_OK, "%s",
                 kvio_device_error(domain));
    cr_assert_eq(kvio_device_copy_async(domain, down, BLOCKS), KVIO_OK, "%s",
                 kvio_device_error(domain));
    cr_assert_eq(kvio_device_sync(domain), KVIO_OK, "%s", kvio_device_error(domain));
    cr_assert_eq(kvio_device_poll(domain), KVIO_OK);
    cr_assert_eq(memcmp(source, back, BLOCKS * BLOCK), 0, "a block was lost or mixed up");
    kvio_device_host_free(domain, back);
    kvio_device_free(domain, pool);
    free(source);
}

Test(gpu, host_domain_copies_batches_in_order, .timeout = 30)
{
    kvio_device_t *domain = NULL;
    char error[512];
    cr_assert_eq(kvio_device_create(KVIO_MEMORY_HOST, KVIO_FALLBACK_ERROR, -1, 0, &domain, error,
                                    sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_assert_eq(kvio_device_kind(domain), KVIO_MEMORY_HOST);
    cr_assert(!kvio_device_fell_back(domain));
    cr_assert_str_eq(kvio_device_describe(domain), "host");
    batched_round_trip(domain);
    cr_assert_eq(kvio_device_spin(domain, 1000000), KVIO_ERR_UNSUPPORTED,
                 "a host domain has no SMs to spin");
    kvio_device_destroy(domain);
}

Test(gpu, cuda_request_without_device_fails_or_falls_back_to_host, .timeout = 30)
{
    REQUIRE_NO_GPU();
    for (int kind = KVIO_MEMORY_PINNED; kind <= KVIO_MEMORY_CUDA; kind++) {
        kvio_device_t *domain = NULL;
        char error[512] = "";
        kvio_status_t status = kvio_device_create(kind, KVIO_FALLBACK_ERROR, -1, 0, &domain,
                                                  error, sizeof(error));
        cr_assert_neq(status, KVIO_OK);
        cr_assert_null(domain);
        cr_assert(test_contains(error, "no CUDA device: ") || test_contains(error, "CUDA not built"),
                  "%s", error);
        status = kvio_device_create(kind, KVIO_FALLBACK_HOST, -1, 0, &domain, error,
                                    sizeof(error));
        cr_assert_eq(status, KVIO_OK, "%s", error);
        cr_assert_eq(kvio_device_kind(domain), KVIO_MEMORY_HOST);
        cr_assert(kvio_device_fell_back(domain));
        char expected[64];
        snprintf(expected, sizeof(expected), "host (fallback from %s: ",
                 kvio_memory_kind_names[kind]);
        cr_assert(test_contains(kvio_device_describe(domain), expected), "%s",
                  kvio_device_describe(domain));
        batched_round_trip(domain); /* the fallback is real, usable memory */
        kvio_device_destroy(domain);
    }
}

Test(gpu, preflight_refuses_gpu_memory_without_device_unless_fallback_host, .timeout = 30)
{
    REQUIRE_NO_GPU();
    char error[512] = "";
    cr_assert_eq(kvio_device_preflight(KVIO_MEMORY_CUDA, KVIO_FALLBACK_ERROR, -1,
                                       "device.memory: cuda", error, sizeof(error)),
                 KVIO_ERR_CONFIG);
    cr_assert(test_contains(error, "device.memory: cuda: "), "%s", error);
    cr_assert(test_contains(error, "device.fallback: host"), "%s", error);
    cr_assert_eq(kvio_device_preflight(KVIO_MEMORY_CUDA, KVIO_FALLBACK_HOST, -1, "x", error,
                                       sizeof(error)),
                 KVIO_OK);
    cr_assert_eq(kvio_device_preflight(KVIO_MEMORY_HOST, KVIO_FALLBACK_ERROR, -1, "x", error,
                                       sizeof(error)),
                 KVIO_OK);
}

Test(gpu, cuda_domain_copies_round_trip, .timeout = 60)
{
    REQUIRE_GPU();
    for (int kind = KVIO_MEMORY_PINNED; kind <= KVIO_MEMORY_CUDA; kind++) {
        kvio_device_t *domain = NULL;
        char error[512];
        cr_assert_eq(kvio_device_create(kind, KVIO_FALLBACK_ERROR, -1, 0, &domain, error,
                                        sizeof(error)),
                     KVIO_OK, "%s", error);
        cr_assert_eq(kvio_device_kind(domain), kind);
        cr_assert(test_contains(kvio_device_describe(domain), "(device "), "%s",
                  kvio_device_describe(domain));
        batched_round_trip(domain);
        kvio_device_destroy(domain);
    }
}

/* A cuda domain on the default device, or the test fails. */
static kvio_device_t *open_cuda(void)
{
    kvio_device_t *domain = NULL;
    char error[512];
    cr_assert_eq(kvio_device_create(KVIO_MEMORY_CUDA, KVIO_FALLBACK_ERROR, -1, 0, &domain, error,
                                    sizeof(error)),
                 KVIO_OK, "%s", error);
    return domain;
}

Test(gpu, spin_kernel_lasts_its_time, .timeout = 60)
{
    REQUIRE_GPU();
    kvio_device_t *domain = open_cuda();
    cr_assert_eq(kvio_device_spin(domain, 1000000), KVIO_OK, "%s", kvio_device_error(domain));
    cr_assert_eq(kvio_device_sync(domain), KVIO_OK); /* warm-up: module load, timer offset */
    kvio_device_destroy(domain);
    domain = open_cuda();
    cr_assert_eq(kvio_device_spin(domain, 1000), KVIO_OK, "%s", kvio_device_error(domain));
    uint64_t start = kvio_time_ns();
    cr_assert_eq(kvio_device_spin(domain, 100000000), KVIO_OK, "%s", kvio_device_error(domain));
    uint64_t launched = kvio_time_ns();
    kvio_device_destroy(domain); /* waits for the kernel */
    double elapsed_ms = (double)(kvio_time_ns() - start) / 1e6;
    /* Asynchronous: the launch returns well before the 100 ms kernel ends. */
    cr_assert_lt((double)(launched - start) / 1e6, elapsed_ms / 2, "the launch blocked");
    /* Timed on the GPU's nanosecond timer: short only by the error of the
     * measured clock offset (microseconds on a device, more on a loaded
     * machine against the fake), late only by the launch and noise. */
    cr_assert_geq(elapsed_ms, 90.0, "spun %.1f ms of 100", elapsed_ms);
    cr_assert_lt(elapsed_ms, 100 + test_seconds(200), "spun %.1f ms of 100", elapsed_ms);
}

/* Each spin runs to its own deadline: ten 50 ms spins launched at once end
 * together, about 50 ms later, instead of queueing into 500 ms. */
Test(gpu, spins_launched_together_do_not_pile_up, .timeout = 60)
{
    REQUIRE_GPU();
    kvio_device_t *domain = open_cuda();
    cr_assert_eq(kvio_device_spin(domain, 1000), KVIO_OK, "%s", kvio_device_error(domain));
    uint64_t start = kvio_time_ns();
    for (int i = 0; i < 10; i++)
        cr_assert_eq(kvio_device_spin(domain, 50000000), KVIO_OK, "%s",
                     kvio_device_error(domain));
    kvio_device_destroy(domain);
    double elapsed_ms = (double)(kvio_time_ns() - start) / 1e6;
    cr_assert_geq(elapsed_ms, 45.0, "spun %.1f ms", elapsed_ms);
    /* Below what queued spins take (500 ms), however loaded the machine. */
    cr_assert_lt(elapsed_ms, fmin(450.0, 50 + test_seconds(200)),
                 "spun %.1f ms: the spins queued end to end", elapsed_ms);
}

/* With memory to stream over, the spin still ends at its deadline; a host
 * domain has no GPU to spin on. */
Test(gpu, spin_streaming_memory_lasts_its_time, .timeout = 60)
{
    REQUIRE_GPU();
    kvio_device_t *domain = open_cuda();
    cr_assert_eq(kvio_device_spin_setup(domain, 64 << 20), KVIO_OK, "%s",
                 kvio_device_error(domain));
    cr_assert_eq(kvio_device_spin(domain, 1000000), KVIO_OK, "%s", kvio_device_error(domain));
    cr_assert_eq(kvio_device_sync(domain), KVIO_OK);
    uint64_t start = kvio_time_ns();
    cr_assert_eq(kvio_device_spin(domain, 50000000), KVIO_OK, "%s", kvio_device_error(domain));
    kvio_device_destroy(domain); /* waits for the kernel, frees the memory */
    double elapsed_ms = (double)(kvio_time_ns() - start) / 1e6;
    cr_assert_geq(elapsed_ms, 45.0, "spun %.1f ms of 50", elapsed_ms);
    cr_assert_lt(elapsed_ms, 50 + test_seconds(200), "spun %.1f ms of 50", elapsed_ms);
    kvio_device_t *host = NULL;
    char error[512];
    cr_assert_eq(kvio_device_create(KVIO_MEMORY_HOST, KVIO_FALLBACK_ERROR, -1, 0, &host, error,
                                    sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_assert_eq(kvio_device_spin_setup(host, 1 << 20), KVIO_ERR_UNSUPPORTED);
    kvio_device_destroy(host);
}

/* ---- whole runs ---- */

static const char *swap_workload =
    "name: gpu-swaps\nseed: 2\nmode: emulate\nduration: 30s\n"
    "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
    "device: {memory: cuda, fallback: %s}\n"
    "serve:\n  engine: {max_num_seqs: 8, max_num_batched_tokens: 4096, preemption: swap}\n"
    "  kvcache: {block_size: 16, blocks: 160, prefix_caching: false, verify_swaps: true}\n"
    "stream:\n  requests: 12\n  arrival: {process: batch}\n"
    "  input_tokens: {dist: uniform, low: 1000, high: 1500}\n"
    "  output_tokens: {dist: uniform, low: 200, high: 300}\n";

static json_t *load_summary(const char *out)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    json_error_t json_error;
    json_t *summary = json_load_file(path, 0, &json_error);
    cr_assert_not_null(summary, "%s: %s", path, json_error.text);
    return summary;
}

static const json_t *metric(const json_t *summary, const char *section, const char *key)
{
    char path[256];
    snprintf(path, sizeof(path), "metrics.%s%s%s", section != NULL ? section : "",
             section != NULL ? "." : "", key);
    return test_json(summary, path);
}

/* Runs the swap workload through the CLI with fallback; returns the run. */
static test_run_t run_swaps(const char *fallback, char **dir_p)
{
    char *dir = test_tmpdir(), text[2048], out[1100];
    snprintf(text, sizeof(text), swap_workload, fallback);
    char *file = test_write_file(dir, "w.yaml", text);
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", file, "-o", out, NULL);
    free(file);
    *dir_p = dir;
    return run;
}

Test(gpu, emulate_with_fallback_host_runs_and_reports_host_memory, .timeout = 120)
{
    REQUIRE_NO_GPU();
    char *dir, out[1100];
    test_run_t run = run_swaps("host", &dir);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.err, "KV pool in host (fallback from cuda: "), "%s", run.err);
    snprintf(out, sizeof(out), "%s/out", dir);
    json_t *summary = load_summary(out);
    const char *memory = json_string_value(metric(summary, "executor", "kv_memory"));
    cr_assert_not_null(memory);
    cr_assert(strncmp(memory, "host (fallback from cuda: ", 26) == 0, "%s", memory);
    cr_assert(json_is_false(metric(summary, "executor", "spin_kernel")));
    cr_assert_eq(json_number_value(metric(summary, NULL, "completed")), 12);
    cr_assert_gt(json_number_value(metric(summary, NULL, "swapped_bytes")), 0);
    cr_assert_eq(json_number_value(metric(summary, NULL, "swap_verify_failures")), 0);
    json_decref(summary);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

Test(gpu, emulate_with_fallback_error_exits_2_with_the_reason, .timeout = 60)
{
    REQUIRE_NO_GPU();
    char *dir;
    test_run_t run = run_swaps("error", &dir);
    cr_assert_eq(run.status, 2, "%s", run.err);
    cr_assert(test_contains(run.err, "device.memory: cuda: "), "%s", run.err);
    cr_assert(test_contains(run.err, "no CUDA device: ") || test_contains(run.err, "CUDA not built"),
              "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

Test(gpu, emulate_keeps_the_kv_pool_on_the_gpu, .timeout = 120)
{
    REQUIRE_GPU();
    char *dir, out[1100];
    test_run_t run = run_swaps("error", &dir);
    cr_assert_eq(run.status, 0, "%s", run.err);
    snprintf(out, sizeof(out), "%s/out", dir);
    json_t *summary = load_summary(out);
    const char *memory = json_string_value(metric(summary, "executor", "kv_memory"));
    cr_assert(memory != NULL && strncmp(memory, "cuda (device ", 13) == 0, "%s", memory);
    cr_assert(json_is_true(metric(summary, "executor", "spin_kernel")));
    cr_assert_eq(json_number_value(metric(summary, NULL, "completed")), 12);
    cr_assert_gt(json_number_value(metric(summary, NULL, "swapped_bytes")), 0);
    cr_assert_eq(json_number_value(metric(summary, NULL, "swap_verify_failures")), 0,
                 "swapped blocks came back different from the GPU");
    json_decref(summary);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* Runs workload text through the CLI, which must succeed; returns the
 * summary (the caller removes *dir_p). */
static json_t *run_gpu_workload(const char *text, char **dir_p)
{
    char *dir = test_tmpdir(), out[1100];
    char *file = test_write_file(dir, "w.yaml", text);
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", file, "-o", out, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    free(file);
    *dir_p = dir;
    return load_summary(out);
}

/* Serving and training together, everything on the GPU: the KV pool and
 * the spin kernel on the serve rank, whose thread also polls the staged
 * transport's copies of each new version into its GPU slots. */
Test(gpu, coupled_run_keeps_kv_pool_and_weights_on_the_gpu, .timeout = 120)
{
    REQUIRE_GPU();
    char *dir;
    json_t *summary = run_gpu_workload(
        "name: gpu-coupled\nseed: 4\nmode: emulate\nduration: 6s\n"
        "ranks: {train: 1, serve: 1, runtime: local, timeout: 30s}\n"
        "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
        "device: {memory: cuda, fallback: error, spin: true}\n"
        "serve:\n  engine: {max_num_seqs: 8, max_num_batched_tokens: 4096, preemption: swap}\n"
        "  kvcache: {block_size: 16, blocks: 160, verify_swaps: true}\n"
        "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 8MiB\n"
        "  checkpoint: {policy: every_n_steps, every_n_steps: 2}\n"
        "  transport: {kind: staged, chunk: 1MiB, inflight: 2}\n"
        "update: {apply: shadow, verify: true, serving: engine}\n"
        "stream:\n  arrival: {process: poisson, rate: 6}\n"
        "  input_tokens: {dist: uniform, low: 500, high: 1500}\n"
        "  output_tokens: {dist: uniform, low: 50, high: 200}\n", &dir);
    const char *memory = json_string_value(metric(summary, "executor", "kv_memory"));
    cr_assert(memory != NULL && strncmp(memory, "cuda (device ", 13) == 0, "%s", memory);
    cr_assert(json_is_true(metric(summary, "executor", "spin_kernel")));
    cr_assert_eq(json_integer_value(metric(summary, "executor", "spin_memory_bytes")),
                 256 << 20); /* device.spin_bytes' default */
    cr_assert_gt(json_number_value(metric(summary, NULL, "completed")), 10);
    cr_assert_eq(json_number_value(metric(summary, NULL, "swap_verify_failures")), 0);
    const json_t *updates = metric(summary, NULL, "model_updates");
    cr_assert_geq(test_json_integer(updates, "updates_activated"), 3);
    cr_assert_eq(test_json_integer(updates, "checksum_mismatches"), 0);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* A GPU pool over a pinned host tier: evicted prefix blocks go down to the
 * page-locked arena and come back up as batches of copies from it. */
Test(gpu, gpu_pool_loads_blocks_back_from_a_pinned_host_tier, .timeout = 120)
{
    REQUIRE_GPU();
    char *dir;
    json_t *summary = run_gpu_workload(
        "name: gpu-tier\nseed: 3\nmode: emulate\nduration: 30s\n"
        "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
        "device: {memory: cuda, fallback: error}\n"
        "serve:\n  engine: {max_num_seqs: 2}\n"
        "  kvcache: {block_size: 16, blocks: 100,"
        " tiers: [{kind: host, size: 256MiB, host: {pinned: true}}]}\n"
        "stream:\n  requests: 24\n  arrival: {process: constant, rate: 40}\n"
        "  input_tokens: {dist: constant, value: 1100}\n"
        "  output_tokens: {dist: constant, value: 4}\n"
        "  prefix: {system_prompts: {count: 3, tokens: 1024, zipf: 0}}\n", &dir);
    const char *memory = json_string_value(metric(summary, "executor", "kv_memory"));
    cr_assert(memory != NULL && strncmp(memory, "cuda (device ", 13) == 0, "%s", memory);
    const json_t *tier = json_array_get(metric(summary, NULL, "tiers"), 0);
    cr_assert_str_eq(test_json_string(tier, "memory"), "pinned");
    cr_assert_gt(test_json_integer(tier, "puts"), 0);
    cr_assert_gt(test_json_integer(tier, "hits"), 0);
    cr_assert_gt(json_number_value(metric(summary, NULL, "tier_hit_tokens")), 0);
    cr_assert_eq(json_number_value(metric(summary, NULL, "completed")), 24);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* Chunks from a GPU pool: each chunk's blocks are copied from the device
 * into one object, and a hit's chunk back block by block, whole chunks
 * only, every one checked against its checksum. */
Test(gpu, gpu_pool_stores_and_loads_whole_chunks, .timeout = 120)
{
    REQUIRE_GPU();
    char *dir;
    json_t *summary = run_gpu_workload(
        "name: gpu-chunks\nseed: 3\nmode: emulate\nduration: 30s\n"
        "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
        "device: {memory: cuda, fallback: error}\n"
        "serve:\n  engine: {max_num_seqs: 2}\n"
        "  kvcache: {block_size: 16, blocks: 100, chunk_tokens: 256,"
        " tiers: [{kind: host, size: 256MiB, write: through, host: {pinned: true}}]}\n"
        "stream:\n  requests: 24\n  arrival: {process: constant, rate: 40}\n"
        "  input_tokens: {dist: constant, value: 1100}\n"
        "  output_tokens: {dist: constant, value: 4}\n"
        "  prefix: {system_prompts: {count: 3, tokens: 1024, zipf: 0}}\n", &dir);
    const json_t *tier = json_array_get(metric(summary, NULL, "tiers"), 0);
    cr_assert_eq(test_json_integer(tier, "block_bytes"), 16 * 16 * 32768,
                 "an object is 16 blocks of Llama 3.2 1B");
    cr_assert_gt(test_json_integer(tier, "hits"), 0);
    cr_assert_eq(test_json_integer(tier, "errors"), 0);
    double tokens = json_number_value(metric(summary, NULL, "tier_hit_tokens"));
    cr_assert_gt(tokens, 0);
    cr_assert_eq(json_number_value(metric(summary, NULL, "completed")), 24);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* Prefill/decode disaggregation between GPU pools: a prefill rank copies a
 * prompt's blocks down to its staging buffer and sums them there, the
 * decode rank checks each before copying it up into its pool; a block
 * changed in staging (every 7th) is caught and computed again. */
Test(gpu, pd_moves_kv_between_gpu_pools_each_block_checked, .timeout = 120)
{
    REQUIRE_GPU();
    char *dir;
    json_t *summary = run_gpu_workload(
        "name: gpu-pd\nseed: 3\nmode: emulate\nduration: 30s\n"
        "ranks: {prefill: 1, decode: 1}\n"
        "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
        "device: {memory: cuda, fallback: error}\n"
        "serve:\n  kvcache: {block_size: 16, blocks: 200}\n"
        "pd: {corrupt_every: 7}\n"
        "stream:\n  requests: 16\n  arrival: {process: constant, rate: 20}\n"
        "  input_tokens: {dist: uniform, low: 200, high: 1500}\n"
        "  output_tokens: {dist: constant, value: 4}\n", &dir);
    const char *memory = json_string_value(metric(summary, "executor", "kv_memory"));
    cr_assert(memory != NULL && strncmp(memory, "cuda (device ", 13) == 0, "%s", memory);
    cr_assert_eq(json_number_value(metric(summary, NULL, "completed")), 16);
    cr_assert_gt(json_number_value(metric(summary, "pd", "verified_blocks")), 0);
    cr_assert_gt(json_number_value(metric(summary, "pd", "checksum_failures")), 0);
    cr_assert_gt(json_number_value(metric(summary, "pd", "decode_recomputed_tokens")), 0);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* GPU memory running out while a transport sets up: the run fails (exit
 * 1) with the rank and the allocation, not a peer's "set-up failed". Needs
 * the stand-in runtime, whose memory size can be set. */
Test(gpu, running_out_of_gpu_memory_names_the_rank_and_the_allocation, .timeout = 120)
{
    REQUIRE_GPU();
    kvio_device_info_t info;
    char reason[512];
    cr_assert_eq(kvio_device_query(-1, &info, reason, sizeof(reason)), KVIO_OK, "%s", reason);
    if (!test_contains(info.name, "kvio fake CUDA"))
        cr_skip_test("needs the stand-in CUDA runtime (a memory size to run out of)");
    setenv("KVIO_FAKE_CUDA_MEMORY", "40000000", 1); /* 40 MB: 3 x 16 MiB do not fit */
    const char *kinds[] = {"staged", "cuda-ipc"};
    for (size_t i = 0; i < 2; i++) {
        char *dir = test_tmpdir(), out[1100], text[1024];
        snprintf(text, sizeof(text),
                 "name: gpu-oom\nmode: emulate\nduration: 5s\n"
                 "ranks: {train: 1, serve: 1, runtime: local, timeout: 20s}\n"
                 "train:\n  steps: 3\n  bytes: 16MiB\n"
                 "  transport: {kind: %s, chunk: 1MiB}\n", kinds[i]);
        char *file = test_write_file(dir, "w.yaml", text);
        snprintf(out, sizeof(out), "%s/out", dir);
        test_run_t run = test_kvio(NULL, "run", file, "-o", out, NULL);
        cr_assert_eq(run.status, 1, "%s: %s", kinds[i], run.err);
        /* Whichever rank ran out first (the trainer or the server) is named. */
        cr_assert(test_contains(run.err, "transport: rank "), "%s", run.err);
        cr_assert(test_contains(run.err, ": cudaMalloc(16777216 bytes): out of memory"), "%s",
                  run.err);
        cr_assert(!test_contains(run.err, "set-up failed"), "%s", run.err);
        test_run_free(&run);
        free(file);
        test_rmtree(dir);
        free(dir);
    }
}

/* ---- transports ---- */

static kvio_xfer_config_t transport_config(const char *kind)
{
    kvio_xfer_config_t config = {.kind = test_choice(&kvio_transports, kind), .chunk = 1 << 20,
                                 .inflight = 2};
    config.device.index = -1;
    return config;
}

Test(gpu, gpu_transports_refuse_cleanly_without_a_device, .timeout = 30)
{
    REQUIRE_NO_GPU();
    const char *const kinds[] = {"cuda-ipc", "staged"};
    for (size_t i = 0; i < 2; i++) {
        kvio_xfer_config_t config = transport_config(kinds[i]);
        char error[512] = "", not_built[64], no_device[64];
        kvio_status_t status = kvio_xfer_preflight(&config, 1 << 20, error, sizeof(error));
        cr_assert_neq(status, KVIO_OK);
        snprintf(not_built, sizeof(not_built), "%s transport not built",
                 kinds[i]);
        snprintf(no_device, sizeof(no_device), "%s transport: no CUDA device: ",
                 kinds[i]);
        cr_assert(test_contains(error, not_built) || test_contains(error, no_device), "%s",
                  error);
        /* Both are usage errors (exit 2), not failures of a run. */
        cr_assert(status == KVIO_ERR_UNSUPPORTED || status == KVIO_ERR_CONFIG, "%s",
                  kvio_strerror(status));
        config.device.fallback = KVIO_FALLBACK_HOST; /* no host fallback for them */
        cr_assert_neq(kvio_xfer_preflight(&config, 1 << 20, error, sizeof(error)), KVIO_OK);
    }
}

Test(gpu, host_transports_refuse_weights_in_gpu_memory, .timeout = 30)
{
    kvio_xfer_config_t config = transport_config("file");
    config.file.dir = "/tmp";
    config.device.weights = KVIO_WEIGHTS_CUDA;
    char error[512] = "";
    cr_assert_eq(kvio_xfer_preflight(&config, 1 << 20, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(test_contains(error, "file transport reads and writes host memory"), "%s", error);
    cr_assert(test_contains(error, "staged or cuda-ipc"), "%s", error);
    config = transport_config("cuda-ipc");
    config.device.weights = KVIO_WEIGHTS_HOST;
    cr_assert_neq(kvio_xfer_preflight(&config, 1 << 20, error, sizeof(error)), KVIO_OK);
}

Test(gpu, ucx_never_gets_a_gpu_pointer_it_cannot_take, .timeout = 30)
{
#ifndef KVIO_HAVE_UCX
    test_require("ucx", 0, "ucx transport not built");
#else
    kvio_xfer_config_t config = transport_config("ucx");
    config.device.weights = KVIO_WEIGHTS_CUDA;
    config.device.fallback = KVIO_FALLBACK_ERROR;
    char error[512] = "";
    kvio_status_t status = kvio_xfer_preflight(&config, 1 << 20, error, sizeof(error));
    if (status == KVIO_OK)
        cr_skip_test("this UCX reports CUDA memory: GPU buffers may go to it");
    cr_assert_eq(status, KVIO_ERR_UNSUPPORTED);
    cr_assert(test_contains(error, "cannot access CUDA memory"), "%s", error);
    cr_assert(test_contains(error, "staged or cuda-ipc"), "%s", error);
    /* Without a device and with fallback: host the weights stay on the host. */
    char reason[512];
    if (!have_device(reason, sizeof(reason))) {
        config.device.fallback = KVIO_FALLBACK_HOST;
        cr_assert_eq(kvio_xfer_preflight(&config, 1 << 20, error, sizeof(error)), KVIO_OK,
                     "%s", error);
    }
#endif
}

/* A run of 1 trainer and 2 servers (threads of one process under the local
 * runtime, processes under mpirun), versions over kind (with the transport
 * options in extra), verified; corrupt >= 0 flips that byte of every
 * version in the servers' GPU slots. */
static void run_transport(const char *kind, const char *extra, const char *runtime, int corrupt)
{
    char *dir = test_tmpdir(), text[2048], out[1100];
    snprintf(text, sizeof(text),
             "name: gpu-%s\nseed: 3\nmode: emulate\nduration: 10s\n"
             "ranks: {train: 1, serve: 2, runtime: %s, timeout: 30s}\n"
             "train:\n  step_time: {dist: constant, value: 20ms}\n  steps: 12\n"
             "  bytes: 6MiB\n  checkpoint: {policy: every_n_steps, every_n_steps: 3}\n"
             "  transport: {kind: %s, chunk: 1MiB, inflight: 2%s}\n"
             "update: {apply: shadow, verify: true, iteration: 5ms, corrupt_offset: %d}\n",
             kind, runtime, kind, extra, corrupt);
    char *file = test_write_file(dir, "w.yaml", text);
    snprintf(out, sizeof(out), "%s/out", dir);
    if (strcmp(runtime, "mpi") == 0) {
        char command[4096], path[1200];
        snprintf(command, sizeof(command),
                 "cd '%s' && timeout 60 mpirun --allow-run-as-root --oversubscribe %s -np 3 '%s' "
                 "run '%s' -o out >mpirun.log 2>&1",
                 dir, test_mpirun_sanitizer_args(), test_kvio_binary(), file);
        int status = system(command);
        snprintf(path, sizeof(path), "%s/mpirun.log", dir);
        char *log = test_read_file(path);
        cr_assert_eq(status, 0, "mpirun: %s", log ? log : "");
        free(log);
    } else {
        test_run_t run = test_kvio(NULL, "run", file, "-o", out, NULL);
        cr_assert_eq(run.status, 0, "%s", run.err);
        test_run_free(&run);
    }
    json_t *summary = load_summary(out);
    const json_t *updates = json_object_get(json_object_get(summary, "metrics"), "model_updates");
    cr_assert_str_eq(test_json_string(updates, "runtime"), runtime);
    cr_assert_eq(test_json_integer(updates, "versions_published"), 4);
    cr_assert_eq(test_json_integer(updates, "updates_received"), 8);
    if (corrupt < 0) {
        cr_assert_eq(test_json_integer(updates, "updates_activated"), 8);
        cr_assert_eq(test_json_integer(updates, "checksum_mismatches"), 0);
    } else {
        cr_assert_eq(test_json_integer(updates, "updates_activated"), 0);
        cr_assert_eq(test_json_integer(updates, "checksum_mismatches"), 8);
    }
    const char *info = test_json_string(updates, "transport_info");
    cr_assert(test_contains(info, kind), "%s", info);
    if (test_contains(extra, "mapped"))
        cr_assert(test_contains(info, "no CPU copy"), "%s", info);
    json_decref(summary);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(gpu, cuda_ipc_delivers_verified_versions_between_threads, .timeout = 120)
{
    REQUIRE_GPU();
    run_transport("cuda-ipc", "", "local", -1);
}

Test(gpu, staged_delivers_verified_versions, .timeout = 120)
{
    REQUIRE_GPU();
    run_transport("staged", "", "local", -1);
}

Test(gpu, a_byte_flipped_in_gpu_memory_is_caught, .timeout = 120)
{
    REQUIRE_GPU();
    run_transport("cuda-ipc", "", "local", 4099);
}

/* Separate processes: the servers export their slots with
 * cudaIpcGetMemHandle and the trainer opens them. */
Test(gpu, cuda_ipc_delivers_verified_versions_between_processes, .timeout = 120)
{
    REQUIRE_GPU();
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    run_transport("cuda-ipc", "", "mpi", -1);
    run_transport("cuda-ipc", "", "mpi", 4099);
}

Test(gpu, staged_delivers_verified_versions_between_processes, .timeout = 120)
{
    REQUIRE_GPU();
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    run_transport("staged", "", "mpi", -1);
}

/* host_hop: mapped: the trainer's GPU copies into the servers' rings, which
 * UCX maps into its process (threads of one process, or processes on one
 * node). */
Test(gpu, staged_mapped_hop_delivers_verified_versions, .timeout = 120)
{
    REQUIRE_GPU();
    run_transport("staged", ", host_hop: mapped", "local", -1);
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    run_transport("staged", ", host_hop: mapped", "mpi", -1);
    run_transport("staged", ", host_hop: mapped", "mpi", 4099);
}

/* Runs a small staged host_hop: mapped workload with UCX_TLS=tls (set in
 * this test's own process, which its kvio inherits). */
static test_run_t run_mapped_with(const char *tls, char **dir_p)
{
    setenv("UCX_TLS", tls, 1);
    char *dir = test_tmpdir(), out[1100];
    char *file = test_write_file(dir, "w.yaml",
        "name: mapped\nmode: emulate\nduration: 5s\n"
        "ranks: {train: 1, serve: 1, runtime: local, timeout: 20s}\n"
        "train:\n  steps: 3\n  bytes: 2MiB\n"
        "  checkpoint: {policy: every_n_steps, every_n_steps: 1}\n"
        "  transport: {kind: staged, chunk: 1MiB, host_hop: mapped}\n");
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", file, "-o", out, NULL);
    free(file);
    *dir_p = dir;
    return run;
}

/* Without a shared-memory UCX transport the rings cannot be mapped: refused
 * before the run, naming the setting. */
Test(gpu, staged_mapped_hop_without_shared_memory_is_refused, .timeout = 60)
{
    REQUIRE_GPU();
    const char *settings[] = {"tcp", "^sm", "^posix,sysv,xpmem"};
    for (size_t i = 0; i < 3; i++) {
        char *dir;
        test_run_t run = run_mapped_with(settings[i], &dir);
        cr_assert_eq(run.status, 2, "UCX_TLS=%s: %s", settings[i], run.err);
        cr_assert(test_contains(run.err, "host_hop: mapped needs a shared-memory UCX "
                                         "transport"), "%s", run.err);
        cr_assert(test_contains(run.err, settings[i]), "%s", run.err);
        test_run_free(&run);
        test_rmtree(dir);
        free(dir);
    }
}

/* A setting that passes that check but leaves nothing mappable here (no
 * xpmem) fails the first put with the reason: exit 1, no crash. */
Test(gpu, staged_mapped_hop_with_an_unmappable_ring_fails_with_the_reason, .timeout = 60)
{
    REQUIRE_GPU();
    char *dir;
    test_run_t run = run_mapped_with("^posix,sysv", &dir);
    if (run.status == 0)
        cr_skip_test("xpmem mapped the rings on this machine");
    cr_assert_eq(run.status, 1, "%s", run.err);
    cr_assert(test_contains(run.err, "staging ring cannot be mapped into this process"), "%s",
              run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}
