/* kvio mlperf (mlperf/): its users are kv-cache.py's for the same seed
 * (values from CPython's random); its percentiles are numpy's; one request
 * of a hand-checked size moves the bytes kv-cache.py moves and every
 * per-client metric follows from them by its definition; options aggregate
 * as mlpstorage aggregates them; an object is a .npy file no device can
 * compress; the CPU tier demotes to storage without counting storage
 * writes (kv-cache.py's quirk); clients as threads and under mpirun each
 * use their own directory and rank 0 sums them; bad input names its flag. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/mlperf.h"
#include "mlperf/mlperf_int.h"
#include "tests/helpers.h"

#define TINY_BYTES_PER_TOKEN 24576 /* tiny-1b: 12 layers x 4 KV heads x 128 x 2 x 2 bytes */

/* ---------- Python's random ---------- */

Test(mlperf, users_are_kv_cache_pys_users_for_the_same_seed, .timeout = 10)
{
    /* CPython: random.seed(s); then generate_mixed_users' draws (choice of
     * the type, random() for the class, randint context, randint output,
     * uniform think time) for users 0-3. */
    static const struct {
        uint64_t seed;
        int type, qos;
        int64_t context, generation;
        double think;
    } expected[] = {
        {42, MLPERF_USER_DOCUMENT, MLPERF_QOS_INTERACTIVE, 16245, 481, 0.5938702245641714},
        {42, MLPERF_USER_CHATBOT, MLPERF_QOS_BATCH, 3283, 189, 0.13477553305176648},
        {42, MLPERF_USER_CODING, MLPERF_QOS_INTERACTIVE, 7166, 211, 0.3861287147125917},
        {42, MLPERF_USER_DOCUMENT, MLPERF_QOS_INTERACTIVE, 7353, 758, 0.8034237851539905},
        {43, MLPERF_USER_CHATBOT, MLPERF_QOS_RESPONSIVE, 3635, 86, 0.4837625398115285},
        {43, MLPERF_USER_CODING, MLPERF_QOS_BATCH, 7251, 332, 0.679046359647943},
        {43, MLPERF_USER_DOCUMENT, MLPERF_QOS_INTERACTIVE, 11180, 790, 0.7468496169851113},
        {43, MLPERF_USER_DOCUMENT, MLPERF_QOS_BATCH, 11207, 603, 0.5114257251416274},
    };
    for (uint64_t seed = 42; seed <= 43; seed++) {
        mlperf_user_t *users = NULL;
        cr_assert_eq(mlperf_users_generate(seed, 4, &users), KVIO_OK);
        for (int i = 0; i < 4; i++) {
            const mlperf_user_t *user = &users[i];
            const __typeof__(expected[0]) *want = &expected[(seed - 42) * 4 + (uint64_t)i];
            cr_expect_eq(user->type, want->type, "seed %llu user %d: type %d",
                         (unsigned long long)seed, i, user->type);
            cr_expect_eq(user->qos, want->qos, "seed %llu user %d: qos", (unsigned long long)seed, i);
            cr_expect_eq(user->context_length, want->context);
            cr_expect_eq(user->generation_length, want->generation);
            cr_expect_eq(user->think_time_s, want->think, "seed %llu user %d: %.17g",
                         (unsigned long long)seed, i, user->think_time_s);
        }
        free(users);
    }
}

Test(mlperf, percentiles_are_numpys_linear_ones, .timeout = 10)
{
    /* np.percentile(range(1, 11), [50, 95, 99]) = 5.5, 9.55, 9.91 (in ms here). */
    mlperf_samples_t samples = {0};
    for (int v = 10; v >= 1; v--)
        cr_assert_eq(mlperf_samples_add(&samples, v * 1e-3), KVIO_OK);
    mlperf_percentiles_t p;
    mlperf_percentiles_of(&samples, 1e3, &p);
    cr_expect_float_eq(p.mean, 5.5, 1e-9);
    cr_expect_float_eq(p.p50, 5.5, 1e-9);
    cr_expect_float_eq(p.p95, 9.55, 1e-9);
    cr_expect_float_eq(p.p99, 9.91, 1e-9);
    cr_expect_eq(p.count, 10);
    mlperf_samples_free(&samples);
}

/* ---------- one request, its bytes and every metric of it ---------- */

/* Equal within mlperf.json's 10 significant digits. */
static bool close_to(double value, double expected)
{
    return fabs(value - expected) <= 1e-8 * fabs(expected) + 1e-12;
}

/* kvio mlperf in dir (its cache in dir/cache, results in dir/out) with the
 * arguments given; mlperf.json (NULL when it failed: *run_p has why). */
static json_t *run_mlperf(const char *dir, test_run_t *run_p, const char *const *args)
{
    const char *argv[64] = {KVIO_BINARY, "mlperf"};
    size_t at = 2;
    char cache[1024], out[1024];
    snprintf(cache, sizeof(cache), "%s/cache", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    const char *fixed[] = {"--dir", cache, "-o", out, "--start-delay", "0", "--end-delay", "0",
                           "--inter-option-delay", "0", "--trials", "1"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[at++] = fixed[i];
    for (size_t i = 0; args[i] != NULL && at < 63; i++)
        argv[at++] = args[i];
    argv[at] = NULL;
    *run_p = test_exec(dir, argv);
    if (run_p->status != 0)
        return NULL;
    char path[1100];
    snprintf(path, sizeof(path), "%s/mlperf.json", out);
    json_error_t error;
    return json_load_file(path, 0, &error);
}

static const json_t *rank_summary(const json_t *result, int option, int trial, int rank)
{
    const json_t *options = json_object_get(result, "options");
    const json_t *trials = json_object_get(json_array_get(options, (size_t)option), "trials");
    const json_t *ranks = json_object_get(json_array_get(trials, (size_t)trial), "ranks");
    return json_object_get(json_array_get(ranks, (size_t)rank), "summary");
}

Test(mlperf, one_request_moves_kv_cache_pys_bytes_and_its_metrics_follow, .timeout = 60)
{
    /* Seed 43's first user is a chatbot (context 3,635, output 86): its
     * first request's context is below 10,000 tokens, so after its write
     * come a decode read and one per 32 generated tokens. */
    char *dir = test_tmpdir();
    const char *args[] = {"1", "--model", "tiny-1b", "--users", "1", "--max-requests", "1",
                          "--duration", "60", "--seed", "43", NULL};
    test_run_t run;
    json_t *result = run_mlperf(dir, &run, args);
    cr_assert_not_null(result, "%s", run.err);
    test_expect_provenance(result, "mlperf"); /* #52: like every output */
    const json_t *s = rank_summary(result, 0, 0, 0);
    const json_t *cache = json_object_get(s, "cache_stats");
    cr_assert_eq(test_json_integer(s, "total_requests"), 1);
    long long tokens = test_json_integer(s, "total_tokens");
    cr_assert(tokens >= 86 / 4 && tokens <= 86, "output %lld", tokens);
    /* One object: the turn's whole context, KV bytes per token x tokens. */
    long long written = test_json_integer(cache, "total_write_bytes");
    cr_expect_eq(written % TINY_BYTES_PER_TOKEN, 0);
    long long context = written / TINY_BYTES_PER_TOKEN;
    cr_expect(context >= 3635 / 4 - 9 && context <= 3635, "context %lld", context);
    cr_expect_eq(test_json_integer(cache, "write_iops"), 1);
    /* 1 decode read + ceil(output / 32) re-reads, each the whole object. */
    long long reads = 1 + (tokens + 31) / 32;
    cr_expect_eq(test_json_integer(cache, "read_iops"), reads);
    cr_expect_eq(test_json_integer(cache, "decode_reads"), reads);
    cr_expect_eq(test_json_integer(cache, "total_read_bytes"), reads * written);
    double elapsed = test_json_number(s, "elapsed_time");
    double gib = 1073741824.0;
    cr_expect(close_to(test_json_number(cache, "tier_storage_read_bandwidth_gbps"),
                       (double)(reads * written) / gib / elapsed));
    cr_expect(close_to(test_json_number(cache, "tier_storage_write_bandwidth_gbps"),
                       (double)written / gib / elapsed));
    cr_expect(close_to(test_json_number(cache, "read_write_ratio"), (double)reads));
    /* Storage throughput: generated tokens over the request's storage seconds. */
    double io = test_json_number(s, "total_storage_io_time");
    cr_expect(close_to(test_json_number(s, "storage_throughput_tokens_per_sec"),
                       (double)tokens / io));
    cr_expect(close_to(test_json_number(s, "avg_throughput_tokens_per_sec"),
                       (double)tokens / elapsed));
    /* One write: every percentile is its one sample, total = host + device. */
    double device = test_json_number(cache, "storage_write_device_p95_ms");
    double host = test_json_number(cache, "storage_write_host_p95_ms");
    cr_expect(close_to(test_json_number(cache, "storage_write_p95_ms"), device + host));
    cr_expect(close_to(test_json_number(cache, "storage_write_device_p50_ms"), device));
    /* The option's score of one client and one trial is that client's. */
    const json_t *option = json_array_get(json_object_get(result, "options"), 0);
    cr_expect(close_to(test_json_number(option, "aggregated_read_bandwidth_gbps"),
                       test_json_number(cache, "tier_storage_read_bandwidth_gbps")));
    cr_expect(close_to(test_json_number(option, "aggregated_device_read_p95_ms"),
                       test_json_number(cache, "storage_read_device_p95_ms")));
    cr_expect(close_to(test_json_number(option, "aggregated_device_write_p95_ms"), device));
    cr_expect_str_eq(test_json_string(result, "division"), "open");
    /* kvio's own count of the objects' bytes moved by the stop (all of
     * them here: the trial stopped once the request was done). */
    const json_t *trial = json_array_get(json_object_get(option, "trials"), 0);
    const json_t *kvio = json_object_get(json_array_get(json_object_get(trial, "ranks"), 0), "kvio");
    cr_expect_eq(test_json_integer(kvio, "kvio_window_read_bytes"), reads * written);
    cr_expect_eq(test_json_integer(kvio, "kvio_window_write_bytes"), written);
    /* kvio takes its objects away after the trial. */
    char rank_dir[1200];
    snprintf(rank_dir, sizeof(rank_dir), "%s/cache/rank_0", dir);
    DIR *listing = opendir(rank_dir);
    cr_assert_not_null(listing, "no %s", rank_dir);
    struct dirent *entry;
    int files = 0;
    while ((entry = readdir(listing)) != NULL)
        files += entry->d_name[0] != '.';
    closedir(listing);
    cr_expect_eq(files, 0, "objects left in %s", rank_dir);
    json_decref(result);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* ---------- mlpstorage's aggregation ---------- */

Test(mlperf, options_aggregate_as_mlpstorage_does, .timeout = 10)
{
    /* Two trials of two clients: bandwidths and throughputs summed over the
     * clients of a trial, then the mean of the trials; every P95 the
     * largest of any client and trial. */
    mlperf_rank_summary_t s[4] = {0};
    const double read[4] = {1.0, 2.0, 1.5, 3.5}, write[4] = {0.25, 0.5, 0.75, 1.0};
    const double tokens[4] = {100, 200, 300, 400}, device_read[4] = {10, 40, 20, 30};
    const double device_write[4] = {5, 6, 9, 7}, request_io[4] = {1, 2, 8, 4};
    for (int i = 0; i < 4; i++) {
        s[i].window_read_gibps = read[i] / 2;
        s[i].tier_storage_read_bandwidth_gbps = read[i];
        s[i].tier_storage_write_bandwidth_gbps = write[i];
        s[i].storage_throughput_tokens_per_sec = tokens[i];
        s[i].avg_throughput_tokens_per_sec = tokens[i] / 10;
        s[i].storage_read_device_ms.p95 = device_read[i];
        s[i].storage_write_device_ms.p95 = device_write[i];
        s[i].storage_io_ms.p95 = request_io[i];
        s[i].storage_entries = i == 3 ? 0 : 5;
    }
    mlperf_aggregate_t a;
    mlperf_aggregate(s, 2, 2, &a);
    cr_expect_float_eq(a.read_bandwidth_gbps, ((1.0 + 2.0) + (1.5 + 3.5)) / 2, 1e-12);
    cr_expect_float_eq(a.write_bandwidth_gbps, ((0.25 + 0.5) + (0.75 + 1.0)) / 2, 1e-12);
    cr_expect_float_eq(a.storage_throughput_tokens_per_sec, ((100 + 200) + (300 + 400)) / 2.0,
                       1e-9);
    cr_expect_float_eq(a.avg_throughput_tokens_per_sec, 50, 1e-9);
    cr_expect_float_eq(a.device_read_p95_ms, 40, 1e-12);
    cr_expect_float_eq(a.device_write_p95_ms, 9, 1e-12);
    cr_expect_float_eq(a.p95_latency_ms, 8, 1e-12);
    cr_expect_eq(a.cpu_tier_ranks, 1);
    cr_expect_float_eq(a.trial_read_bandwidth_gbps[0], 3.0, 1e-12);
    cr_expect_float_eq(a.trial_read_bandwidth_gbps[1], 5.0, 1e-12);
    /* The trials' spread: 3 and 5 around 4, sample standard deviation 1.414. */
    cr_expect_float_eq(a.read_bandwidth_cv, sqrt(2.0) / 4, 1e-9);
    /* kvio's window figure aggregates the same way. */
    cr_expect_float_eq(a.window_read_gibps, 2, 1e-12);
    cr_expect_float_eq(a.window_read_cv, sqrt(2.0) / 4, 1e-9);
}

/* ---------- the objects ---------- */

/* A cache over dir: tiny-1b, cpu_gib of CPU tier, 1 GiB of storage. */
static mlperf_cache_t *tiny_cache(const char *dir, double cpu_gib, const char *data_text)
{
    mlperf_cache_params_t params = {
        .dir = dir, .model = mlperf_model_find("tiny-1b"),
        .kv_bytes_per_token = kvio_mlperf_kv_bytes_per_token("tiny-1b"), .tensor_parallel = 1,
        .cpu_mem_gb = cpu_gib, .storage_capacity_gb = 1, .seed = 7, .verify = true};
    char error[512];
    cr_assert_eq(kvio_data_parse(data_text, &params.data, error, sizeof(error)), KVIO_OK);
    mlperf_cache_t *cache = NULL;
    cr_assert_eq(mlperf_cache_create(&params, &cache, error, sizeof(error)), KVIO_OK, "%s", error);
    return cache;
}

static unsigned char *read_whole(const char *path, size_t *length_p)
{
    FILE *file = fopen(path, "rb");
    cr_assert_not_null(file, "%s", path);
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)length);
    cr_assert_eq(fread(bytes, 1, (size_t)length, file), (size_t)length);
    fclose(file);
    *length_p = (size_t)length;
    return bytes;
}

Test(mlperf, an_object_is_a_npy_file_of_its_shape_that_no_device_compresses, .timeout = 30)
{
    char *dir = test_tmpdir();
    mlperf_cache_t *cache = tiny_cache(dir, 0, "random");
    mlperf_io_t io;
    cr_assert_eq(mlperf_io_init(&io, 1u << 20), KVIO_OK);
    double latency = 0;
    uint64_t key = mlperf_object_key(3, 2);
    mlperf_cache_allocate(cache, key, 1000, true, &io, &latency);
    cr_expect_gt(latency, 0);
    char path[1200];
    snprintf(path, sizeof(path), "%s/conv_3_turn_2.npy", dir);
    size_t length = 0;
    unsigned char *bytes = read_whole(path, &length);
    /* numpy's format 1.0: magic, version 1.0, the dict's length (118, so
     * that the header is 128 bytes), the dict, spaces, a newline. */
    cr_expect_eq(memcmp(bytes, "\x93NUMPY\x01", 7), 0);
    cr_expect_eq(bytes[7], 0);
    cr_expect_eq(bytes[8], 118);
    cr_expect_eq(bytes[9], 0);
    const char *dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (12, 2, 1000, 4, 128), }";
    cr_expect_eq(memcmp(bytes + 10, dict, strlen(dict)), 0, "header: %.80s", bytes + 10);
    cr_expect_eq(bytes[127], '\n');
    cr_expect_eq(length, 128 + 1000u * TINY_BYTES_PER_TOKEN);
    test_expect_irreducible(bytes + 128, length - 128, "an object's data");
    free(bytes);
    /* Read back (verify on): a hit, intact. */
    cr_expect(mlperf_cache_access(cache, key, true, MLPERF_HIT_USER, &io, &latency));
    mlperf_cache_stats_t stats;
    uint64_t cpu = 0, storage = 0;
    double limit = 0;
    mlperf_cache_take_stats(cache, &stats, &cpu, &storage, &limit);
    cr_expect_eq(stats.counts.verify_failures, 0);
    cr_expect_eq(stats.counts.tier_storage_read, 1000u * TINY_BYTES_PER_TOKEN);
    cr_expect_eq(storage, 1);
    cr_expect_float_eq(limit, 1073741824.0, 1);
    mlperf_cache_stats_free(&stats);
    mlperf_io_fini(&io);
    mlperf_cache_destroy(cache);
    test_rmtree(dir);
    free(dir);
}

Test(mlperf, the_cpu_tier_demotes_to_storage_without_counting_storage_writes, .timeout = 30)
{
    /* 0.1 GiB of CPU tier takes objects of 200 tokens (4.9 MB) until 80 %
     * of it is used; past that its least recently used go to storage. */
    char *dir = test_tmpdir();
    mlperf_cache_t *cache = tiny_cache(dir, 0.1, "random");
    mlperf_io_t io;
    cr_assert_eq(mlperf_io_init(&io, 1u << 20), KVIO_OK);
    double latency = 0;
    for (uint32_t turn = 1; turn <= 30; turn++)
        mlperf_cache_allocate(cache, mlperf_object_key(1, turn), 200, true, &io, &latency);
    mlperf_cache_stats_t stats;
    uint64_t cpu = 0, storage = 0;
    double limit = 0;
    mlperf_cache_take_stats(cache, &stats, &cpu, &storage, &limit);
    uint64_t object = 200u * TINY_BYTES_PER_TOKEN;
    double target = 0.1 * 1073741824.0 * 0.8;
    cr_expect_eq(cpu, (uint64_t)(target / (double)object), "%llu in the CPU tier",
                 (unsigned long long)cpu);
    cr_expect_eq(storage, 30 - cpu);
    cr_expect_eq(stats.counts.demotions, storage);
    cr_expect_eq(stats.counts.tier_cpu_written, 30 * object, "every object was written to the CPU tier");
    cr_expect_eq(stats.counts.tier_storage_written, 0, "a demotion counts no storage bytes written");
    cr_expect_eq(stats.counts.offloads_storage, storage);
    /* The oldest went first: turn 1 is in storage, read from there. */
    cr_expect(mlperf_cache_access(cache, mlperf_object_key(1, 1), true, MLPERF_HIT_USER, &io,
                                  &latency));
    mlperf_cache_stats_free(&stats);
    mlperf_cache_take_stats(cache, &stats, &cpu, &storage, &limit);
    cr_expect_eq(stats.counts.tier_storage_read, object);
    cr_expect_eq(stats.counts.verify_failures, 0);
    mlperf_cache_stats_free(&stats);
    mlperf_io_fini(&io);
    mlperf_cache_destroy(cache);
    test_rmtree(dir);
    free(dir);
}

/* ---------- several clients ---------- */

/* Two clients' trial of mlperf.json: each used its own directory (its
 * files' bytes), and the option's read bandwidth is their sum. */
static void expect_two_clients(const json_t *result)
{
    cr_assert_not_null(result);
    cr_expect_eq(test_json_integer(result, "clients"), 2);
    const json_t *option = json_array_get(json_object_get(result, "options"), 0);
    cr_expect_eq(test_json_integer(option, "rank_count"), 2);
    double sum = 0;
    for (int rank = 0; rank < 2; rank++) {
        const json_t *s = rank_summary(result, 0, 0, rank);
        cr_assert_not_null(s, "rank %d", rank);
        cr_expect_gt(test_json_integer(s, "total_requests"), 0, "rank %d served nothing", rank);
        sum += test_json_number(json_object_get(s, "cache_stats"),
                                "tier_storage_read_bandwidth_gbps");
    }
    /* mlperf.json's reals carry 10 significant digits. */
    cr_expect_float_eq(test_json_number(option, "aggregated_read_bandwidth_gbps"), sum, 1e-8 * sum);
}

static void expect_rank_dirs(const char *dir)
{
    for (int rank = 0; rank < 2; rank++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/cache/rank_%d", dir, rank);
        struct stat info;
        cr_expect_eq(stat(path, &info), 0, "%s: no client's directory", path);
    }
}

Test(mlperf, clients_as_threads_each_use_their_own_directory, .timeout = 60)
{
    char *dir = test_tmpdir();
    const char *args[] = {"1", "--model", "tiny-1b", "--users", "2", "--max-requests", "2",
                          "--duration", "30", "--clients", "2", NULL};
    test_run_t run;
    json_t *result = run_mlperf(dir, &run, args);
    cr_assert_not_null(result, "%s", run.err);
    expect_two_clients(result);
    expect_rank_dirs(dir);
    json_decref(result);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

Test(mlperf, two_mpirun_clients_aggregate_on_rank_0, .timeout = 90)
{
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    char command[4096];
    snprintf(command, sizeof(command),
             "cd %s && timeout 60 mpirun --allow-run-as-root --oversubscribe %s -np 2 %s mlperf 1 "
             "--dir %s/cache -o %s/out --start-delay 0 --end-delay 0 --trials 1 --model tiny-1b "
             "--users 2 --max-requests 2 --duration 30 >mpirun.log 2>&1",
             dir, test_mpirun_sanitizer_args(), KVIO_BINARY, dir, dir);
    int status = system(command);
    char path[1200];
    snprintf(path, sizeof(path), "%s/mpirun.log", dir);
    char *log = test_read_file(path);
    cr_assert_eq(status, 0, "mpirun: %s", log != NULL ? log : "");
    free(log);
    snprintf(path, sizeof(path), "%s/out/mlperf.json", dir);
    json_error_t error;
    json_t *result = json_load_file(path, 0, &error);
    cr_assert_not_null(result, "%s: %s", path, error.text);
    expect_two_clients(result);
    expect_rank_dirs(dir);
    json_decref(result);
    test_rmtree(dir);
    free(dir);
}

/* ---------- bad input ---------- */

Test(mlperf, bad_input_exits_2_naming_what_is_wrong, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "mlperf", "1", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "--dir DIR is required"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "mlperf", "4", "--dir", "x", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "'4' is no option"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "mlperf", "--dir", "x", "--model", "llama9", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "--model: 'llama9'"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "mlperf", "--dir", "x", "--data", "compress:101", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "compress:101"), "%s", run.err);
    test_run_free(&run);
    /* A CPU tier that cannot fit: refused with the numbers, nothing run. */
    run = test_kvio(dir, "mlperf", "2", "--dir", "cache", "--cpu-mem-gb", "100000",
                    "--start-delay", "0", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "GiB available"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}
