/* Tests for model updates as whole runs: an emulate run writes updates.csv
 * and the update metrics; simulate runs are repeatable; what can be checked
 * before the run (Redis down, directory not writable or too small) fails
 * before it; a trainer that dies mid-transfer ends the run with an error
 * well within the timeout; and mpirun runs 3 ranks as MPI processes. */
#include "kvio/run.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "tests/helpers.h"

#ifdef KVIO_HAVE_UCX
#define REQUIRE_UCX() ((void)0)
#else
#define REQUIRE_UCX() test_require("ucx", 0, "ucx transport not built")
#endif

static const char *base_workload =
    "name: updates-test\n"
    "mode: emulate\n"
    "ranks: {train: 1, serve: 2, timeout: 10s}\n"
    "train:\n"
    "  step_time: {dist: constant, value: 2ms}\n"
    "  steps: 10\n"
    "  bytes: 256KiB\n"
    "  checkpoint: {policy: every_n_steps, every_n_steps: 2}\n"
    "  transport: {kind: ucx, chunk: 64KiB}\n"
    "update: {iteration: 1ms}\n";

typedef struct outcome {
    kvio_status_t status;
    char error[1024];
    char dir[1024];
    uint64_t elapsed_ns;
} outcome_t;

/* Runs base_workload with overrides in-process; results go to dir/out. */
static outcome_t run_workload(const char *dir, const char *const *overrides, size_t count)
{
    outcome_t outcome = {0};
    char *path = test_write_file(dir, "workload.yaml", base_workload);
    kvio_workload_t workload;
    outcome.status = kvio_workload_load(path, overrides, count, &workload, outcome.error,
                                        sizeof(outcome.error));
    free(path);
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    snprintf(outcome.dir, sizeof(outcome.dir), "%s/out", dir);
    kvio_run_options_t options = {.output_dir = outcome.dir, .quiet = true};
    kvio_run_result_t result;
    uint64_t start = kvio_time_ns();
    outcome.status = kvio_run(&workload, &options, &result, outcome.error,
                              sizeof(outcome.error));
    outcome.elapsed_ns = kvio_time_ns() - start;
    kvio_workload_free(&workload);
    return outcome;
}

static json_t *model_updates(const char *results_dir, json_t **summary_p)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", results_dir);
    json_error_t error;
    json_t *summary = json_load_file(path, 0, &error);
    cr_assert_not_null(summary, "%s: %s", path, error.text);
    *summary_p = summary;
    json_t *object = json_object_get(json_object_get(summary, "metrics"), "model_updates");
    cr_assert_not_null(object, "summary.json has metrics.model_updates");
    return object;
}

static int count_lines(const char *text)
{
    int lines = 0;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    return lines;
}

Test(updates, emulate_run_writes_updates_csv_and_metrics, .timeout = 30)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    outcome_t outcome = run_workload(dir, NULL, 0);
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    json_t *summary = NULL;
    json_t *metrics = model_updates(outcome.dir, &summary);
    cr_expect_eq(test_json_integer(metrics, "versions_published"), 5);
    cr_expect_eq(test_json_integer(metrics, "updates_activated"), 10,
                 "5 versions x 2 serve ranks");
    cr_expect_eq(test_json_integer(metrics, "checksum_mismatches"), 0);
    cr_expect_str_eq(test_json_string(metrics, "runtime"), "local");
    cr_expect(test_contains(test_json_string(metrics, "transport_info"),
                            "lanes"), "the UCX lanes are reported");
    json_t *latency = json_object_get(metrics, "update_latency_ms");
    cr_expect_eq(test_json_integer(latency, "count"), 10);
    cr_expect_gt(test_json_number(latency, "mean"), 0);
    cr_expect_leq(test_json_number(latency, "p50"),
                  test_json_number(latency, "max") + 1e-9);
    json_t *parts = json_object_get(summary, "parts");
    bool ran = false;
    for (size_t i = 0; i < json_array_size(parts); i++) {
        json_t *part = json_array_get(parts, i);
        if (strcmp(test_json_string(part, "name"), "model_updates") == 0)
            ran = test_json_true(part, "ran");
    }
    cr_expect(ran, "model_updates is marked as ran");
    char csv_path[1200];
    snprintf(csv_path, sizeof(csv_path), "%s/updates.csv", outcome.dir);
    char *csv = test_read_file(csv_path);
    cr_assert_not_null(csv);
    cr_expect(strncmp(csv, "version,rank,source,bytes,checksum_ok", 37) == 0, "%.80s", csv);
    cr_expect_eq(count_lines(csv), 11, "a header and one row per update and serve rank");
    free(csv);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

Test(updates, stall_apply_counts_inference_stall, .timeout = 30)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    const char *overrides[] = {"update.apply=stall", "train.transport.kind=file",
                               "train.transport.file.fsync=false",
                               "train.transport.file.poll_interval=1ms"};
    char dir_override[1200];
    snprintf(dir_override, sizeof(dir_override), "train.transport.file.dir=%s/versions", dir);
    const char *all[] = {overrides[0], overrides[1], overrides[2], overrides[3], dir_override};
    outcome_t outcome = run_workload(dir, all, 5);
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    json_t *summary = NULL;
    json_t *metrics = model_updates(outcome.dir, &summary);
    cr_expect_gt(test_json_number(metrics, "inference_stall_ms.apply"), 0);
    cr_expect_float_eq(test_json_number(metrics, "inference_stall_ms.update"),
                       test_json_number(metrics, "inference_stall_ms.apply"), 1e-6,
                       "the only cause");
    cr_expect_geq(test_json_integer(metrics, "updates_activated"), 2);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

Test(updates, simulate_runs_are_repeatable, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *texts[2];
    for (int i = 0; i < 2; i++) {
        char sub[1200];
        snprintf(sub, sizeof(sub), "%s/%d", dir, i);
        mkdir(sub, 0755);
        const char *overrides[] = {"mode=simulate", "train.bytes=1GB",
                                   "train.step_time={dist: normal, mean: 100ms, stddev: 10ms}",
                                   "ranks.serve=4"};
        outcome_t outcome = run_workload(sub, overrides,
                                         sizeof(overrides) / sizeof(overrides[0]));
        cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
        char path[1300];
        snprintf(path, sizeof(path), "%s/updates.csv", outcome.dir);
        texts[i] = test_read_file(path);
        cr_assert_not_null(texts[i]);
    }
    cr_expect_str_eq(texts[0], texts[1]);
    cr_expect_eq(count_lines(texts[0]), 1 + 5 * 4);
    /* ucx defaults: 20 us + 1 GB at 10 GB/s per receiver, in sequence; the
     * first receiver's update activates when the iteration that runs as the
     * data and the 10 GB/s checksum are in ends (1 ms later when its rank is
     * idle): the bound is that iteration, not a fixed 1 ms (which held only
     * while the cost model's steps happened to end that soon). */
    char *row = strchr(texts[0], '\n') + 1;
    double verified = 0, activated = 0, latency = 0;
    int rank = 0;
    cr_assert_eq(sscanf(row, "%*[^,],%d,%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],"
                             "%*[^,],%*[^,],%*[^,],%lf,%lf,%lf", &rank, &verified, &activated,
                        &latency), 4, "%s", row);
    cr_expect_geq(latency, 100.02 + 100.0);
    char path[1300];
    snprintf(path, sizeof(path), "%s/1/out/iterations.csv", dir);
    test_csv_t iterations = test_csv_read(path);
    double boundary = verified + 1.0; /* idle: the next 1 ms iteration */
    for (size_t i = 0; i < iterations.num_rows; i++) {
        double start = test_csv_number(&iterations, i, "time_s") * 1e3;
        double end = start + test_csv_number(&iterations, i, "duration_ms");
        if (test_csv_number(&iterations, i, "rank") == rank && start <= verified &&
            end >= verified)
            boundary = end;
    }
    test_csv_free(&iterations);
    cr_expect_leq(activated, boundary + 1e-3, "rank %d: activated at %.6f ms, verified at "
                  "%.6f ms, the iteration then running ends at %.6f ms", rank, activated,
                  verified, boundary);
    free(texts[0]);
    free(texts[1]);
    test_rmtree(dir);
    free(dir);
}

Test(updates, redis_url_that_does_not_answer_fails_before_the_run, .timeout = 20)
{
#ifndef KVIO_HAVE_REDIS
    test_require("redis", 0, "redis support not built");
#endif
    char *dir = test_tmpdir();
    const char *overrides[] = {"train.transport.kind=redis",
                               "train.transport.redis.url=redis://127.0.0.1:1"};
    outcome_t outcome = run_workload(dir, overrides, 2);
    cr_expect_eq(outcome.status, KVIO_ERR_CONNECTION);
    cr_expect(test_contains(outcome.error, "redis://127.0.0.1:1: connection refused"), "%s",
              outcome.error);
    struct stat info;
    cr_expect_neq(stat(outcome.dir, &info), 0, "no results directory: the run never started");
    test_rmtree(dir);
    free(dir);
}

Test(updates, unwritable_directory_is_a_clear_error, .timeout = 20)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    /* A path below a regular file cannot be created, even by root. */
    char *file = test_write_file(dir, "plain-file", "x");
    char override[1200];
    snprintf(override, sizeof(override), "train.transport.file.dir=%s/versions", file);
    const char *overrides[] = {"train.transport.kind=file", override};
    outcome_t outcome = run_workload(dir, overrides, 2);
    cr_expect_neq(outcome.status, KVIO_OK);
    cr_expect(test_contains(outcome.error, "plain-file/versions: cannot create the update "
                                           "directory: Not a directory"), "%s", outcome.error);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(updates, directory_without_room_is_refused_before_the_run, .timeout = 20)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    char override[1200];
    snprintf(override, sizeof(override), "train.transport.file.dir=%s/versions", dir);
    const char *overrides[] = {"train.transport.kind=file", override, "train.bytes=1000TiB"};
    outcome_t outcome = run_workload(dir, overrides, 3);
    cr_expect_eq(outcome.status, KVIO_ERR_NO_SPACE, "%s", outcome.error);
    cr_expect(test_contains(outcome.error, "not enough space"), "%s", outcome.error);
    test_rmtree(dir);
    free(dir);
}

/* The --set lines that point a run at one transport: its kind, a versions
 * directory under dir (file) and the test Redis (redis). */
typedef struct transport_sets {
    char kind[64], dir[1200], redis[512];
} transport_sets_t;

static void transport_sets(const char *kind, const char *dir, transport_sets_t *sets)
{
    snprintf(sets->kind, sizeof(sets->kind), "train.transport.kind=%s", kind);
    snprintf(sets->dir, sizeof(sets->dir), "train.transport.file.dir=%s/versions", dir);
    const char *redis = getenv("KVIO_TEST_REDIS_URL");
    snprintf(sets->redis, sizeof(sets->redis), "train.transport.redis.url=%s",
             redis ? redis : "redis://127.0.0.1:6379");
}

/* The trainer stops after 2 chunks of its first update, as if it died; with
 * update.on_trainer_loss: fail every rank ends at once (tests/test_faults.c
 * has the default, serve). */
static void expect_dead_trainer_is_an_error(const char *kind)
{
    char *dir = test_tmpdir();
    transport_sets_t sets;
    transport_sets(kind, dir, &sets);
    const char *overrides[] = {sets.kind, sets.dir, sets.redis,
                               "train.transport.die_after_chunks=2", "ranks.timeout=8s",
                               "train.transport.file.poll_interval=1ms",
                               "train.transport.redis.prefix=\"kvio-test-dead:\"",
                               "update.on_trainer_loss=fail"};
    outcome_t outcome = run_workload(dir, overrides, 8);
    cr_expect_neq(outcome.status, KVIO_OK);
    cr_expect(test_contains(outcome.error, "injected fault: the sender died after 2 chunks"),
              "%s", outcome.error);
    cr_expect_lt(outcome.elapsed_ns, 8000000000ull, "ended well before the timeout");
    test_rmtree(dir);
    free(dir);
}

Test(updates, trainer_dying_mid_transfer_over_ucx_ends_the_run, .timeout = 30)
{
    REQUIRE_UCX();
    expect_dead_trainer_is_an_error("ucx");
}

Test(updates, trainer_dying_mid_transfer_over_file_ends_the_run, .timeout = 30)
{
    expect_dead_trainer_is_an_error("file");
}

Test(updates, trainer_dying_mid_transfer_over_redis_ends_the_run, .timeout = 30)
{
    const char *url = getenv("KVIO_TEST_REDIS_URL");
    if (!test_require("redis", url != NULL, "KVIO_TEST_REDIS_URL is not set"))
        return;
    expect_dead_trainer_is_an_error("redis");
}

/* Serve rank 2 of 1 trainer + 2 serve ranks stops while receiving version 2,
 * as if it died: the run fails with an error naming that rank, every rank
 * returns (no hang) well within ranks.timeout, and summary.json says
 * complete: false. */
static void expect_dead_serve_rank_is_an_error(const char *kind)
{
    char *dir = test_tmpdir();
    transport_sets_t sets;
    transport_sets(kind, dir, &sets);
    const char *overrides[] = {sets.kind, sets.dir, sets.redis,
                               "update.die_during_version=2", "update.die_rank=2",
                               "ranks.timeout=8s", "train.transport.file.poll_interval=1ms",
                               "train.transport.redis.prefix=\"kvio-test-dead-serve:\""};
    outcome_t outcome = run_workload(dir, overrides, 8);
    cr_expect_neq(outcome.status, KVIO_OK);
    cr_expect(test_contains(outcome.error, "serve rank 2 died while receiving version"),
              "%s", outcome.error);
    cr_expect_lt(outcome.elapsed_ns, 8000000000ull, "ended within ranks.timeout");
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", outcome.dir);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary);
    cr_expect(test_contains(summary, "\"complete\": false"), "%s", summary);
    free(summary);
    test_rmtree(dir);
    free(dir);
}

Test(updates, serve_rank_dying_mid_update_over_ucx_ends_the_run, .timeout = 30)
{
    REQUIRE_UCX();
    expect_dead_serve_rank_is_an_error("ucx");
}

Test(updates, serve_rank_dying_mid_update_over_file_ends_the_run, .timeout = 30)
{
    expect_dead_serve_rank_is_an_error("file");
}

Test(updates, serve_rank_dying_mid_update_over_redis_ends_the_run, .timeout = 30)
{
    const char *url = getenv("KVIO_TEST_REDIS_URL");
    if (!test_require("redis", url != NULL, "KVIO_TEST_REDIS_URL is not set"))
        return;
    expect_dead_serve_rank_is_an_error("redis");
}

/* A file system that fills up after preflight: a filler thread takes every
 * free byte once version 1 is in place, so writing version 2 hits ENOSPC. */
typedef struct filler {
    const char *dir;
    volatile int stop;
    int filled;
} filler_t;

/* The run's own directory under dir (kvio-<run id>), into first_p; false
 * while there is none. */
static bool run_directory(const char *dir, char *first_p, size_t first_len)
{
    DIR *listing = opendir(dir);
    if (listing == NULL)
        return false;
    bool found = false;
    for (struct dirent *entry; !found && (entry = readdir(listing)) != NULL;)
        if (strncmp(entry->d_name, "kvio-", 5) == 0) {
            snprintf(first_p, first_len, "%s/%s/v0000000001.model", dir, entry->d_name);
            found = true;
        }
    closedir(listing);
    return found;
}

static void *fill_after_first_version(void *arg)
{
    filler_t *filler = arg;
    char first[1200] = "";
    while (!filler->stop &&
           (!run_directory(filler->dir, first, sizeof(first)) || access(first, F_OK) != 0))
        usleep(1000);
    if (!filler->stop)
        filler->filled = test_fill_file_system(filler->dir);
    return NULL;
}

Test(updates, file_transport_running_out_of_space_is_a_clear_error, .timeout = 30)
{
    char *dir = test_tmpdir();
    char reason[256], versions[1100], dir_override[1200];
    /* The versions on a private 1 MiB tmpfs (room for keep + 1 = 3 versions
     * of 256 KiB at preflight, not more); the results beside it. */
    snprintf(versions, sizeof(versions), "%s/versions", dir);
    cr_assert_eq(mkdir(versions, 0755), 0);
    if (!test_private_mount(versions, "tmpfs", 0, "size=1m", reason, sizeof(reason))) {
        test_rmtree(dir);
        test_require("mount", 0, reason);
    }
    snprintf(dir_override, sizeof(dir_override), "train.transport.file.dir=%s", versions);
    filler_t filler = {.dir = versions};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, fill_after_first_version, &filler), 0);
    const char *overrides[] = {"train.transport.kind=file", dir_override,
                               "train.step_time={dist: constant, value: 20ms}",
                               "train.transport.file.poll_interval=1ms", "ranks.timeout=8s"};
    outcome_t outcome = run_workload(dir, overrides, 5);
    filler.stop = 1;
    pthread_join(thread, NULL);
    cr_assert(filler.filled, "the filler did not fill the file system");
    cr_log_info("%s", outcome.error);
    cr_expect_eq(outcome.status, KVIO_ERR_NO_SPACE, "%s", kvio_strerror(outcome.status));
    cr_expect(test_contains(outcome.error, "No space left on device") &&
                  test_contains(outcome.error, "/.v0000000002.tmp"),
              "%s", outcome.error);
    cr_expect_lt(outcome.elapsed_ns, 8000000000ull);
    /* No partial version: the run's directory, with its temporary and the
     * versions, is gone; only the filler remains. */
    char path[1200], first[1200];
    cr_expect(!run_directory(versions, first, sizeof(first)), "%s remains", first);
    snprintf(path, sizeof(path), "%s/filler", versions);
    cr_expect_eq(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/summary.json", outcome.dir);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary);
    cr_expect(test_contains(summary, "\"complete\": false"), "%s", summary);
    free(summary);
    umount(versions);
    test_rmtree(dir);
    free(dir);
}

/* ---- mpirun ---- */

/* Runs mpirun with np ranks of kvio on the workload; returns its exit
 * status (128+signal, or -1 when killed after timeout_s) and stderr. */
static int run_mpirun(const char *dir, int np, const char *const *sets, size_t num_sets,
                      int timeout_s, char **stderr_p)
{
    char *workload = test_write_file(dir, "workload.yaml", base_workload);
    char err_path[1200], out_dir[1200], np_text[16];
    snprintf(err_path, sizeof(err_path), "%s/mpirun.err", dir);
    snprintf(out_dir, sizeof(out_dir), "%s/out", dir);
    snprintf(np_text, sizeof(np_text), "%d", np);
    const char *argv[64] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np_text};
    size_t argc = 5;
    if (getenv("ASAN_OPTIONS") != NULL) { /* see test_mpirun_sanitizer_args */
        argv[argc++] = "-x";
        argv[argc++] = TEST_MPIRUN_ASAN_OPTIONS;
    }
    const char *rest[] = {KVIO_BINARY, "run", workload, "-o", out_dir};
    for (size_t i = 0; i < 5; i++)
        argv[argc++] = rest[i];
    for (size_t i = 0; i < num_sets && argc < 60; i++) {
        argv[argc++] = "--set";
        argv[argc++] = sets[i];
    }
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        FILE *err = freopen(err_path, "w", stderr);
        FILE *out = freopen("/dev/null", "w", stdout);
        (void)err;
        (void)out;
        execvp("mpirun", (char *const *)argv);
        _exit(127);
    }
    int status = 0, result = -1;
    uint64_t deadline = kvio_time_ns() + (uint64_t)timeout_s * 1000000000ull;
    for (;;) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) {
            result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        if (kvio_time_ns() > deadline) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        struct timespec nap = {.tv_sec = 0, .tv_nsec = 20000000};
        nanosleep(&nap, NULL);
    }
    *stderr_p = test_read_file(err_path);
    free(workload);
    return result;
}

/* Runs the base workload (with sets) as 3 MPI processes, expecting a
 * complete run: every version activated on both serve ranks, none failing
 * its checksum. Returns metrics.model_updates (the summary in *summary_p). */
static json_t *mpirun_complete(const char *dir, const char *const *sets, size_t num_sets,
                               json_t **summary_p)
{
    char *err = NULL;
    int status = run_mpirun(dir, 3, sets, num_sets, 40, &err);
    cr_assert_eq(status, 0, "mpirun exit %d: %s", status, err ? err : "");
    free(err);
    char out_dir[1200];
    snprintf(out_dir, sizeof(out_dir), "%s/out", dir);
    json_t *metrics = model_updates(out_dir, summary_p);
    cr_expect_str_eq(test_json_string(metrics, "runtime"), "mpi");
    cr_expect_eq(test_json_integer(metrics, "updates_activated"), 10);
    cr_expect_eq(test_json_integer(metrics, "checksum_mismatches"), 0);
    return metrics;
}

Test(updates, mpirun_runs_three_ranks_as_processes, .timeout = 60)
{
    REQUIRE_UCX();
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    json_t *summary = NULL;
    json_t *metrics = mpirun_complete(dir, NULL, 0, &summary);
    /* Processes: the offsets were measured (a round trip is never free). */
    cr_expect_gt(test_json_number(metrics, "clock_offset_uncertainty_us"), 0);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* weight_sync's buckets between processes: every bucket of every version
 * reaches both serve ranks and verifies, each stamped on rank 0's clock;
 * the versions go as deltas, each rank rebuilding its own weights, and the
 * first serve rank forwards each bucket to the second (a chain). */
Test(updates, mpirun_moves_weight_sync_buckets_between_processes, .timeout = 60)
{
    REQUIRE_UCX();
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    const char *sets[] = {"model.preset=llama3.2-1b", "weight_sync.granularity=bucket",
                          "weight_sync.bucket_size=64KiB", "weight_sync.delta=0.045",
                          "weight_sync.topology=chain"};
    json_t *summary = NULL;
    json_t *sync = json_object_get(mpirun_complete(dir, sets, 5, &summary), "weight_sync");
    cr_expect_lt(test_json_integer(sync, "wire_bytes"),
                 test_json_integer(sync, "bytes") / 5, "deltas on the wire");
    json_int_t buckets = test_json_integer(sync, "buckets");
    cr_expect_geq(buckets, 3, "256 KiB in buckets of 64 KiB");
    cr_expect_gt(test_json_number(sync, "update_ms"), 0);
    char path[1300];
    snprintf(path, sizeof(path), "%s/out/sync.csv", dir);
    test_csv_t csv = test_csv_read(path);
    cr_expect_eq((json_int_t)csv.num_rows, 5 * 2 * buckets, "5 versions x 2 serve ranks");
    test_csv_free(&csv);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

Test(updates, mpirun_with_the_wrong_rank_count_is_refused, .timeout = 60)
{
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    char *err = NULL;
    int status = run_mpirun(dir, 2, NULL, 0, 40, &err);
    cr_expect_neq(status, 0);
    cr_expect(test_contains(err ? err : "", "mpirun started 2 ranks but the workload's ranks "
                                            "need 3"), "%s", err ? err : "");
    free(err);
    test_rmtree(dir);
    free(dir);
}

Test(updates, mpirun_trainer_dying_mid_transfer_fails_every_rank, .timeout = 60)
{
    REQUIRE_UCX();
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    char *err = NULL;
    const char *sets[] = {"train.transport.die_after_chunks=2", "ranks.timeout=5s",
                          "update.on_trainer_loss=fail"};
    uint64_t start = kvio_time_ns();
    int status = run_mpirun(dir, 3, sets, 3, 40, &err);
    uint64_t elapsed = kvio_time_ns() - start;
    cr_expect_neq(status, 0, "mpirun exits non-zero");
    cr_expect_neq(status, -1, "and by itself, not killed by the test");
    cr_expect(test_contains(err ? err : "", "injected fault"), "%s", err ? err : "");
    cr_expect_lt(elapsed, 30000000000ull);
    free(err);
    test_rmtree(dir);
    free(dir);
}

Test(updates, mpirun_serve_rank_dying_mid_update_fails_every_rank, .timeout = 60)
{
    REQUIRE_UCX();
    if (!test_require("mpi", test_mpirun_available(), "mpirun not found"))
        return;
    char *dir = test_tmpdir();
    char *err = NULL;
    const char *sets[] = {"update.die_during_version=2", "update.die_rank=2",
                          "ranks.timeout=5s"};
    uint64_t start = kvio_time_ns();
    int status = run_mpirun(dir, 3, sets, 3, 40, &err);
    uint64_t elapsed = kvio_time_ns() - start;
    cr_expect_neq(status, 0, "mpirun exits non-zero");
    cr_expect_neq(status, -1, "and by itself, not killed by the test");
    cr_expect(test_contains(err ? err : "", "serve rank 2 died while receiving version"), "%s",
              err ? err : "");
    cr_expect_lt(elapsed, 30000000000ull);
    free(err);
    test_rmtree(dir);
    free(dir);
}

/* Chain fan-out, 1 trainer + 3 serve ranks: the middle one (rank 2) stops
 * while receiving version 2, as if it died. Its neighbours in the chain
 * (rank 1 forwards to it, rank 3 waits on it) and the trainer must not hang:
 * the run fails with an error naming rank 2 well within ranks.timeout. */
Test(updates, serve_rank_dying_in_the_middle_of_a_ucx_chain_ends_the_run, .timeout = 30)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    const char *overrides[] = {"ranks.serve=3", "train.transport.fanout=chain",
                               "update.die_during_version=2", "update.die_rank=2",
                               "ranks.timeout=8s"};
    outcome_t outcome = run_workload(dir, overrides, 5);
    cr_expect_neq(outcome.status, KVIO_OK);
    cr_expect(test_contains(outcome.error, "serve rank 2 died while receiving version"), "%s",
              outcome.error);
    cr_expect_lt(outcome.elapsed_ns, 8000000000ull, "ended within ranks.timeout");
    test_rmtree(dir);
    free(dir);
}

/* ---- simulate with train.transport.model.from ---- */

/* Mean over the activated rows of dir/updates.csv of column a minus column
 * b (ms). */
static double csv_mean_difference(const char *dir, const char *a, const char *b)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/updates.csv", dir);
    char *text = test_read_file(path);
    cr_assert_not_null(text, "%s", path);
    int column_a = -1, column_b = -1, column_activated = -1, column = 0;
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    for (char *name = line, *next; name != NULL; name = next, column++) {
        next = strchr(name, ',');
        size_t length = next != NULL ? (size_t)(next - name) : strlen(name);
        if (next != NULL)
            next++;
        if (strlen(a) == length && strncmp(name, a, length) == 0)
            column_a = column;
        if (strlen(b) == length && strncmp(name, b, length) == 0)
            column_b = column;
        if (length == 14 && strncmp(name, "t_activated_ms", length) == 0)
            column_activated = column;
    }
    cr_assert(column_a >= 0 && column_b >= 0 && column_activated >= 0, "%s: columns", path);
    double sum = 0;
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        double values[32] = {0};
        char *field = line;
        for (int i = 0; i < 32 && field != NULL; i++) {
            values[i] = strtod(field, NULL);
            field = strchr(field, ',');
            field = field != NULL ? field + 1 : NULL;
        }
        if (isfinite(values[column_activated])) {
            sum += values[column_a] - values[column_b];
            rows++;
        }
    }
    free(text);
    cr_assert_gt(rows, 0, "%s has activated updates", path);
    return sum / rows;
}

/* A tiny emulate run (ucx, 1 trainer -> 2 servers, 4 MiB), then simulate
 * runs of the same workload with model.from pointing at its results. The
 * taken bandwidth is the measured one; the model puts the data at the
 * servers when the emulate run did (the fit's own promise),
 * and its mean update latency is within 3x of the measured one (iteration
 * boundaries differ). A value set by hand wins over the taken one. */
Test(updates, simulate_takes_its_model_from_an_emulate_run, .timeout = 30)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    char emulate_dir[1200], simulate_dir[1200], set_dir[1200], from[1300];
    snprintf(emulate_dir, sizeof(emulate_dir), "%s/emulate", dir);
    snprintf(simulate_dir, sizeof(simulate_dir), "%s/simulate", dir);
    snprintf(set_dir, sizeof(set_dir), "%s/set", dir);
    mkdir(emulate_dir, 0755);
    mkdir(simulate_dir, 0755);
    mkdir(set_dir, 0755);
    const char *emulate[] = {"train.bytes=4MiB", "train.step_time.value=10ms",
                             "train.transport.chunk=1MiB"};
    outcome_t measured = run_workload(emulate_dir, emulate, 3);
    cr_assert_eq(measured.status, KVIO_OK, "%s", measured.error);

    snprintf(from, sizeof(from), "train.transport.model.from=%s", measured.dir);
    const char *simulate[] = {emulate[0], emulate[1], emulate[2], "mode=simulate", from,
                              "train.transport.model.bandwidth=100"};
    outcome_t modelled = run_workload(simulate_dir, simulate, 5);
    cr_assert_eq(modelled.status, KVIO_OK, "%s", modelled.error);

    json_t *summary = NULL;
    json_t *metrics = model_updates(modelled.dir, &summary);
    json_t *model = json_object_get(metrics, "model");
    cr_assert_not_null(model, "metrics.model_updates.model");
    cr_expect_str_eq(test_json_string(model, "from"), measured.dir);
    json_t *source = json_object_get(model, "source");
    cr_expect_str_eq(test_json_string(source, "latency"), "from");
    cr_expect_str_eq(test_json_string(source, "bandwidth"), "from");
    double bytes = 4.0 * 1024 * 1024;
    double transfer_ms = csv_mean_difference(measured.dir, "t_xfer_end_ms", "t_xfer_start_ms");
    double bandwidth = test_json_number(model, "bandwidth_gbps");
    cr_expect_float_eq(bandwidth, bytes / (transfer_ms * 1e6), 0.01 * bandwidth,
                       "taken bandwidth %.3f GB/s: the measured transfer bandwidth", bandwidth);
    cr_expect(json_is_real(json_object_get(model, "latency_s")), "no model.latency_s");
    cr_expect_geq(test_json_number(model, "latency_s"), 0);

    cr_expect_gt(test_json_number(model, "checksum_gbps"), 0,
                 "the trainer's checksum rate is taken");
    cr_expect_gt(test_json_number(model, "verify_gbps"), 0);
    json_t *emulate_summary = NULL;
    json_t *emulate_metrics = model_updates(measured.dir, &emulate_summary);
    double measured_arrival_ms = test_json_number(emulate_metrics, "stage_mean_ms_after_ready.xfer_end");
    double modelled_arrival_ms = test_json_number(metrics, "stage_mean_ms_after_ready.xfer_end");
    /* The fitted latency makes them equal; floored at 0 (the second
     * server's put slower than the first's), the model is later, not much. */
    bool floored = test_json_number(model, "latency_s") == 0;
    cr_expect(modelled_arrival_ms > (floored ? 0.999 : 0.98) * measured_arrival_ms &&
                  modelled_arrival_ms < (floored ? 1.5 : 1.02) * measured_arrival_ms,
              "data at the servers %.3f ms after ready, measured %.3f ms (latency %s)",
              modelled_arrival_ms, measured_arrival_ms, floored ? "floored" : "fitted");
    double measured_latency_ms = test_json_number(emulate_metrics, "update_latency_ms.mean");
    double modelled_latency_ms =
        test_json_number(metrics, "update_latency_ms.mean");
    /* Within 3x: a loaded machine delays a few of the measured activations
     * by whole scheduler slices (it failed once at 2x, at load 2). */
    cr_expect(modelled_latency_ms > measured_latency_ms / 3 &&
                  modelled_latency_ms < 3.0 * measured_latency_ms,
              "modelled update latency %.3f ms, measured %.3f ms", modelled_latency_ms,
              measured_latency_ms);
    json_decref(emulate_summary);
    json_decref(summary);

    /* 100 GB/s set by hand: the bandwidth is that, the latency still taken. */
    const char *set[] = {simulate[0], simulate[1], simulate[2], simulate[3], simulate[4],
                         simulate[5]};
    outcome_t overridden = run_workload(set_dir, set, 6);
    cr_assert_eq(overridden.status, KVIO_OK, "%s", overridden.error);
    metrics = model_updates(overridden.dir, &summary);
    model = json_object_get(metrics, "model");
    cr_expect_float_eq(test_json_number(model, "bandwidth_gbps"), 100.0, 1e-9);
    source = json_object_get(model, "source");
    cr_expect_str_eq(test_json_string(source, "bandwidth"), "set");
    cr_expect_str_eq(test_json_string(source, "latency"), "from");
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* model.from that cannot give a model: refused when the workload is loaded
 * (before any results directory), naming the path, as a usage error. */
typedef struct bad_from_case {
    const char *name;
    const char *summary; /* summary.json written into the directory; NULL: none */
    bool no_directory;   /* the path does not exist at all */
    kvio_status_t status;
    const char *message;
} bad_from_case_t;

Test(updates, model_from_that_cannot_give_a_model_is_refused_naming_it, .timeout = 20)
{
    static const bad_from_case_t cases[] = {
        {"missing", NULL, true, KVIO_ERR_NOT_FOUND, "No such file or directory"},
        {"no_summary", NULL, false, KVIO_ERR_NOT_FOUND,
         "is not a kvio results directory (no summary.json)"},
        {"incomplete",
         "{\"complete\": false, \"error\": \"rank 2 died\", \"config\": {\"mode\": \"emulate\","
         " \"train\": {\"transport\": {\"kind\": \"ucx\"}}}, \"metrics\": {}}",
         false, KVIO_ERR_CONFIG, "that run did not complete (summary.json: complete: false; "
                                 "rank 2 died)"},
        {"simulated",
         "{\"complete\": true, \"config\": {\"mode\": \"simulate\", \"train\": {\"transport\": "
         "{\"kind\": \"ucx\"}}}, \"metrics\": {\"model_updates\": {\"serve_ranks\": 1, "
         "\"updates_activated\": 3}}}",
         false, KVIO_ERR_CONFIG, "is a simulate run"},
        {"serving_only",
         "{\"complete\": true, \"config\": {\"mode\": \"emulate\", \"train\": {\"transport\": "
         "{\"kind\": \"ucx\"}}}, \"metrics\": {\"ttft_ms\": {}}}",
         false, KVIO_ERR_CONFIG, "has no model updates"},
        {"other_kind",
         "{\"complete\": true, \"config\": {\"mode\": \"emulate\", \"train\": {\"transport\": "
         "{\"kind\": \"file\"}}}, \"metrics\": {\"model_updates\": {\"serve_ranks\": 1, "
         "\"updates_activated\": 3}}}",
         false, KVIO_ERR_CONFIG, "measured the file transport, this workload uses ucx"},
    };
    char *dir = test_tmpdir();
    char *workload_path = test_write_file(dir, "workload.yaml", base_workload);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const bad_from_case_t *c = &cases[i];
        char path[1200], from[1300], error[1024] = "";
        snprintf(path, sizeof(path), "%s/%s", dir, c->name);
        if (!c->no_directory)
            mkdir(path, 0755);
        if (c->summary != NULL)
            free(test_write_file(path, "summary.json", c->summary));
        snprintf(from, sizeof(from), "train.transport.model.from=%s", path);
        const char *overrides[] = {"mode=simulate", from};
        kvio_workload_t workload;
        kvio_status_t status = kvio_workload_load(workload_path, overrides, 2, &workload, error,
                                                  sizeof(error));
        cr_expect_eq(status, c->status, "%s: %s", c->name, kvio_strerror(status));
        cr_expect(test_contains(error, path), "%s: names the path: %s", c->name, error);
        cr_expect(test_contains(error, c->message), "%s: %s", c->name, error);
        if (status == KVIO_OK)
            kvio_workload_free(&workload);
    }
    /* The command line: exit status 2 (usage), the path in the message, and
     * no results directory. */
    char from[1300], out[1300];
    snprintf(from, sizeof(from), "train.transport.model.from=%s/other_kind", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(NULL, "run", workload_path, "-o", out, "--set", "mode=simulate",
                               "--set", from, NULL);
    cr_expect_eq(run.status, 2, "exit status %d: %s", run.status, run.err);
    cr_expect(test_contains(run.err, "measured the file transport, this workload uses ucx"),
              "%s", run.err);
    struct stat info;
    cr_expect_neq(stat(out, &info), 0, "no results directory was created");
    test_run_free(&run);
    /* An emulate run ignores model.from (it measures). */
    kvio_workload_t workload;
    char error[1024] = "";
    const char *emulate[] = {"train.transport.model.from=/nonexistent"};
    cr_expect_eq(kvio_workload_load(workload_path, emulate, 1, &workload, error,
                                    sizeof(error)), KVIO_OK, "%s", error);
    kvio_workload_free(&workload);
    free(workload_path);
    test_rmtree(dir);
    free(dir);
}

/* inotify discovery: the last version and the end are renamed in quickly
 * after each other; a receiver that drained both events with one listing
 * used to wait for the end for ever (7 of 12 runs timed out). Five runs,
 * each must end with every version in. */
Test(updates, file_notify_discovery_sees_a_version_and_the_end_renamed_together, .timeout = 60)
{
    for (int run = 0; run < 5; run++) {
        char *dir = test_tmpdir();
        char dir_override[1200];
        snprintf(dir_override, sizeof(dir_override), "train.transport.file.dir=%s/versions",
                 dir);
        const char *overrides[] = {"train.transport.kind=file", dir_override,
                                   "train.transport.file.discovery=notify",
                                   "train.transport.file.fsync=false", "ranks.timeout=5s"};
        outcome_t outcome = run_workload(dir, overrides, 5);
        cr_assert_eq(outcome.status, KVIO_OK, "run %d: %s", run, outcome.error);
        /* Each serve rank ends with the last version in. A rank the load
         * slowed may skip a version a newer one replaced (the file
         * transport's latest-wins), so only the sum is fixed. */
        json_t *summary = NULL;
        json_t *updates = model_updates(outcome.dir, &summary);
        cr_expect_eq(test_json_integer(updates, "updates_received") +
                         test_json_integer(updates, "versions_skipped"),
                     10, "5 versions to each of 2 serve ranks, received or skipped (run %d)",
                     run);
        char path[1200];
        snprintf(path, sizeof(path), "%s/updates.csv", outcome.dir);
        test_csv_t csv = test_csv_read(path);
        bool last_in[2] = {false, false};
        for (size_t i = 0; i < csv.num_rows; i++) {
            int rank = (int)test_csv_number(&csv, i, "rank");
            if (rank >= 1 && rank <= 2 && test_csv_number(&csv, i, "version") == 5 &&
                !isnan(test_csv_number(&csv, i, "t_activated_ms")))
                last_in[rank - 1] = true;
        }
        cr_expect(last_in[0] && last_in[1], "run %d: version 5 not activated on rank%s%s", run,
                  last_in[0] ? "" : " 1", last_in[1] ? "" : " 2");
        test_csv_free(&csv);
        json_decref(summary);
        test_rmtree(dir);
        free(dir);
    }
}

/* Simulate, sequential ucx to 3 servers: each server's data moves for
 * latency + bytes / bandwidth, after the servers before it, so every
 * server's measured transfer bandwidth is the model's (the later ones once
 * read as a third and a fifth of it: their transfer was timed from the
 * publish start). */
Test(updates, simulate_sequential_fan_out_times_each_transfer_from_its_own_start, .timeout = 30)
{
    char *dir = test_tmpdir();
    const char *overrides[] = {"mode=simulate", "ranks.serve=3", "train.bytes=1GiB",
                               "train.transport.model.latency=1ms",
                               "train.transport.model.bandwidth=2"};
    outcome_t outcome = run_workload(dir, overrides, 5);
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    json_t *summary = NULL;
    json_t *updates = model_updates(outcome.dir, &summary);
    const json_t *bandwidth = json_object_get(updates, "bandwidth_gbps");
    double expected = 1.073741824 / (1.073741824 / 2 + 0.001); /* GB over (bytes/bw + latency) */
    cr_expect_float_eq(test_json_number(bandwidth, "mean"), expected, 0.01);
    cr_expect_float_eq(test_json_number(bandwidth, "max"), expected, 0.01);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* The coupled run with one serve rank whose KV pool holds blocks blocks
 * (llama3.2-1b: 512 KiB each): the first update's latency (ms) and the serve
 * rank's set-up time (s, summary.json ranks). */
static double first_update_latency(const char *blocks, double *setup_s_p)
{
    char *dir = test_tmpdir();
    char blocks_override[64];
    snprintf(blocks_override, sizeof(blocks_override), "serve.kvcache.blocks=%s", blocks);
    const char *overrides[] = {
        "duration=1500ms", "ranks.serve=1", "ranks.runtime=local", "ranks.timeout=30s",
        "model.preset=llama3.2-1b", "gpu.preset=h200", "serve.kvcache.block_size=16",
        blocks_override, "train.steps=0", "train.step_time.dist=constant",
        "train.step_time.value=50ms", "train.bytes=16MiB", "train.transport.chunk=4MiB",
        "update.serving=engine", "update.iteration=20ms", "stream.arrival.rate=4",
        "stream.input_tokens.dist=constant", "stream.input_tokens.value=256",
        "stream.output_tokens.dist=constant", "stream.output_tokens.value=16"};
    outcome_t outcome = run_workload(dir, overrides, sizeof(overrides) / sizeof(overrides[0]));
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    char path[1200];
    snprintf(path, sizeof(path), "%s/updates.csv", outcome.dir);
    test_csv_t updates = test_csv_read(path);
    double latency_ms = NAN;
    for (size_t i = 0; i < updates.num_rows; i++)
        if (test_csv_number(&updates, i, "version") == 1)
            latency_ms = test_csv_number(&updates, i, "latency_ms");
    cr_assert(isfinite(latency_ms), "blocks %s: version 1 was not activated", blocks);
    test_csv_free(&updates);
    json_t *summary = NULL;
    model_updates(outcome.dir, &summary);
    json_t *serve = json_array_get(json_object_get(summary, "ranks"), 1);
    cr_assert_str_eq(test_json_string(serve, "role"), "serve");
    *setup_s_p = test_json_number(serve, "setup_s");
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
    return latency_ms;
}

/* Every rank builds its pools and connects before the one start (t0): a
 * 2 GiB KV pool (seconds to build here; 8 GiB was measured by hand, it
 * takes too long for the suite) is built before the trainer's first step,
 * so the first update's latency is a small pool's (within 2x, plus
 * scheduling noise), and the pool's set-up is reported per rank instead. */
Test(updates, a_large_kv_pool_is_built_before_the_first_update, .timeout = 240)
{
    REQUIRE_UCX();
    double small_setup_s, large_setup_s;
    double small_ms = first_update_latency("64", &small_setup_s);
    double large_ms = first_update_latency("4096", &large_setup_s); /* 2 GiB */
    cr_assert_leq(large_ms, 2 * small_ms + test_seconds(0.1) * 1e3,
                  "first update: %.1f ms with a 2 GiB pool (set-up %.2f s), %.1f ms with a "
                  "32 MiB one", large_ms, large_setup_s, small_ms);
    cr_assert_gt(large_setup_s, small_setup_s, "the 2 GiB pool's set-up (%.2f s) is not "
                 "reported beyond the small pool's (%.2f s)", large_setup_s, small_setup_s);
}

/* The quickstart, shortened (4 s, 20 steps of 100 ms, a version every 5,
 * 16 MiB), in one mode: summary.json, and requests.csv's versions checked
 * against what was published. */
static json_t *short_quickstart(const char *mode, double *updated_share_p)
{
    char *dir = test_tmpdir();
    char mode_override[64], out[1100], error[1024];
    snprintf(mode_override, sizeof(mode_override), "mode=%s", mode);
    const char *overrides[] = {mode_override, "duration=4s", "ranks.runtime=local",
                               "train.steps=20", "train.step_time.mean=100ms",
                               "train.step_time.stddev=10ms",
                               "train.checkpoint.every_n_steps=5", "train.bytes=16MiB",
                               "train.transport.chunk=4MiB"};
    kvio_workload_t workload;
    cr_assert_eq(kvio_workload_load("quickstart", overrides,
                                    sizeof(overrides) / sizeof(overrides[0]), &workload, error,
                                    sizeof(error)), KVIO_OK, "%s", error);
    snprintf(out, sizeof(out), "%s/out", dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK,
                 "%s: %s", mode, error);
    kvio_workload_free(&workload);
    json_t *summary = NULL;
    json_t *updates = model_updates(out, &summary);
    json_int_t versions = test_json_integer(updates, "versions_published");
    char path[1200];
    snprintf(path, sizeof(path), "%s/requests.csv", out);
    test_csv_t requests = test_csv_read(path);
    cr_assert_gt(requests.num_rows, 0, "%s: no requests", mode);
    size_t updated = 0;
    for (size_t i = 0; i < requests.num_rows; i++) {
        double version = test_csv_number(&requests, i, "model_version");
        cr_assert(version >= 0 && version <= (double)versions, "%s: request row %zu has "
                  "version %g of %lld", mode, i + 1, version, (long long)versions);
        updated += version > 0;
    }
    *updated_share_p = (double)updated / (double)requests.num_rows;
    test_csv_free(&requests);
    /* The trainer is ready at t0 (its weights filled during set-up): version
     * 1 is ready after its 5 steps of 100 ms within twice the median update
     * latency (plus scheduling noise), as on time as the rest. */
    snprintf(path, sizeof(path), "%s/updates.csv", out);
    test_csv_t rows = test_csv_read(path);
    double first_ready_ms = INFINITY;
    json_int_t activated = 0;
    for (size_t i = 0; i < rows.num_rows; i++) {
        if (test_csv_number(&rows, i, "version") == 1 &&
            test_csv_number(&rows, i, "t_ready_ms") < first_ready_ms)
            first_ready_ms = test_csv_number(&rows, i, "t_ready_ms");
        activated += isfinite(test_csv_number(&rows, i, "t_activated_ms"));
    }
    double median_ms = test_json_number(updates, "update_latency_ms.p50");
    cr_expect_leq(first_ready_ms - 500, 2 * median_ms + test_seconds(0.1) * 1e3,
                  "%s: version 1 ready at %.1f ms, scheduled at 500 ms (median update %.1f ms)",
                  mode, first_ready_ms, median_ms);
    /* Every count of activations agrees. */
    cr_expect_eq(test_json_integer(updates, "updates_activated"), activated, "%s", mode);
    cr_expect_eq(test_json_integer(updates, "activated_while_serving") +
                     test_json_integer(updates, "activated_after_serving"),
                 activated, "%s", mode);
    test_csv_free(&rows);
    test_rmtree(dir);
    free(dir);
    return summary;
}

/* The quickstart publishes as many versions in simulate as in emulate mode
 * (within one), and both report each request's model version and the
 * inference loss over the versions that served them. */
Test(updates, quickstart_simulate_and_emulate_publish_alike_and_report_loss, .timeout = 120)
{
    REQUIRE_UCX();
    const char *modes[] = {"simulate", "emulate"};
    json_int_t versions[2];
    for (int m = 0; m < 2; m++) {
        double updated_share = 0;
        json_t *summary = short_quickstart(modes[m], &updated_share);
        const json_t *metrics = json_object_get(summary, "metrics");
        versions[m] = test_json_integer(metrics, "model_updates.versions_published");
        cr_assert_gt(updated_share, 0, "%s: no request served by updated weights", modes[m]);
        double mean_loss = test_json_number(metrics, "mean_inference_loss");
        cr_assert(mean_loss > 0 && mean_loss < 5.5, "%s: mean inference loss %g (5.5 is the "
                  "initial weights')", modes[m], mean_loss);
        cr_assert_gt(json_array_size(json_object_get(metrics, "served_by_version")), 1,
                     "%s: served_by_version", modes[m]);
        json_decref(summary);
    }
    cr_assert_eq(versions[0], 4, "20 steps, a version every 5");
    cr_assert_leq(llabs(versions[0] - versions[1]), 1, "simulate %lld versions, emulate %lld",
                  (long long)versions[0], (long long)versions[1]);
}

/* Reliability (#22.2): the file transport pointed at a directory of the
 * user's. Loose name patterns deleted `end`, `v1.modern.txt` and
 * `v12.models_backup`; now kvio writes only into a directory of its own
 * there (kvio-<run id>) and removes only that, so every file of the user's
 * survives, even one named like a version. */
Test(updates, the_file_transport_never_deletes_files_it_did_not_write, .timeout = 60)
{
    char *dir = test_tmpdir();
    char user_dir[1100], dir_override[1200];
    snprintf(user_dir, sizeof(user_dir), "%s/mine", dir);
    cr_assert_eq(mkdir(user_dir, 0755), 0);
    const char *names[] = {"end", "v1.modern.txt", "v12.models_backup", "v0000000001.model",
                           ".v0000000002.tmp", ".end.tmp", "notes.txt"};
    size_t num_names = sizeof(names) / sizeof(names[0]);
    for (size_t i = 0; i < num_names; i++)
        free(test_write_file(user_dir, names[i], "the user's\n"));
    snprintf(dir_override, sizeof(dir_override), "train.transport.file.dir=%s", user_dir);
    const char *overrides[] = {"train.transport.kind=file", dir_override};
    outcome_t outcome = run_workload(dir, overrides, 2);
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    json_t *summary = NULL;
    json_t *updates = model_updates(outcome.dir, &summary);
    cr_assert_eq(test_json_integer(updates, "versions_published"), 5);
    cr_assert_gt(test_json_integer(updates, "updates_activated"), 0);
    cr_assert(test_contains(test_json_string(updates, "transport_info"),
                            "/mine/kvio-"), "the run's own directory");
    json_decref(summary);
    for (size_t i = 0; i < num_names; i++) {
        char path[1300];
        snprintf(path, sizeof(path), "%s/%s", user_dir, names[i]);
        char *text = test_read_file(path);
        cr_assert(text != NULL && strcmp(text, "the user's\n") == 0, "%s was deleted", path);
        free(text);
    }
    /* And the run's own directory is gone: the directory holds the user's
     * files only. */
    DIR *listing = opendir(user_dir);
    cr_assert_not_null(listing);
    size_t entries = 0;
    for (struct dirent *entry; (entry = readdir(listing)) != NULL;)
        entries += strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
    closedir(listing);
    cr_assert_eq(entries, num_names, "kvio left something behind");
    test_rmtree(dir);
    free(dir);
}

/* Reliability (#22.15): after a run over Redis its last versions stayed
 * (161 MB after a 64 MiB run); the trainer now removes what it kept, as the
 * file transport does (the file case is checked above). */
Test(updates, the_redis_transport_leaves_no_keys_behind, .timeout = 60)
{
    const char *url = getenv("KVIO_TEST_REDIS_URL");
    if (!test_require("redis", url != NULL, "KVIO_TEST_REDIS_URL is not set"))
        return;
    char *dir = test_tmpdir();
    char url_set[600];
    snprintf(url_set, sizeof(url_set), "train.transport.redis.url=%s", url);
    const char *overrides[] = {"train.transport.kind=redis", url_set,
                               "train.transport.redis.prefix=\"kvio-test-leftovers:\""};
    outcome_t outcome = run_workload(dir, overrides, 3);
    cr_assert_eq(outcome.status, KVIO_OK, "%s", outcome.error);
    json_t *summary = NULL;
    json_t *updates = model_updates(outcome.dir, &summary);
    cr_assert_eq(test_json_integer(updates, "versions_published"), 5);
    json_decref(summary);
    char command[800];
    snprintf(command, sizeof(command),
             "redis-cli -u '%s' --scan --pattern 'kvio-test-leftovers:*' | wc -l", url);
    FILE *pipe = popen(command, "r");
    cr_assert_not_null(pipe);
    long keys = -1;
    cr_assert_eq(fscanf(pipe, "%ld", &keys), 1);
    pclose(pipe);
    cr_expect_eq(keys, 0, "%ld keys of the run are left in Redis", keys);
    test_rmtree(dir);
    free(dir);
}

/* Starts the kvio binary on base_workload in dir with sets (its own stdout
 * and stderr in dir); its pid. */
static pid_t start_binary(const char *dir, const char *const *sets, size_t num_sets)
{
    char *workload = test_write_file(dir, "workload.yaml", base_workload);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    const char *argv[32] = {test_kvio_binary(), "run", workload, "-o", out};
    size_t argc = 5;
    for (size_t i = 0; i < num_sets && argc + 2 < 31; i++) {
        argv[argc++] = "--set";
        argv[argc++] = sets[i];
    }
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        (void)!freopen("/dev/null", "w", stdout);
        (void)!freopen("/dev/null", "w", stderr);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    free(workload);
    return pid;
}

/* Reliability (#22.6): two runs at once on one update directory, and on
 * one Redis with the default key prefix. Without a run id in the shared
 * names they took each other's versions (one activated 2 of 16, or failed a
 * checksum as a lost trainer); now each gets all of its own. */
Test(updates, concurrent_runs_share_no_names, .timeout = 180)
{
    const char *redis_url = getenv("KVIO_TEST_REDIS_URL");
    for (int redis = 0; redis < 2; redis++) {
        if (redis && !test_require("redis", redis_url != NULL, "no KVIO_TEST_REDIS_URL"))
            return;
        char *shared = test_tmpdir();
        char *dirs[2] = {test_tmpdir(), test_tmpdir()};
        char dir_set[1200], url_set[600];
        snprintf(dir_set, sizeof(dir_set), "train.transport.file.dir=%s", shared);
        snprintf(url_set, sizeof(url_set), "train.transport.redis.url=%s",
                 redis_url != NULL ? redis_url : "");
        const char *sets[] = {redis ? "train.transport.kind=redis" : "train.transport.kind=file",
                              redis ? url_set : dir_set, "train.steps=40",
                              "train.step_time={dist: constant, value: 5ms}",
                              "train.transport.file.discovery=notify", "ranks.timeout=20s"};
        pid_t pids[2];
        for (int r = 0; r < 2; r++)
            pids[r] = start_binary(dirs[r], sets, sizeof(sets) / sizeof(sets[0]));
        for (int r = 0; r < 2; r++) {
            int status = 0;
            waitpid(pids[r], &status, 0);
            cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s run %d: status %d",
                      redis ? "redis" : "file", r, status);
            char out[1100];
            snprintf(out, sizeof(out), "%s/out", dirs[r]);
            json_t *summary = NULL;
            json_t *updates = model_updates(out, &summary);
            cr_assert_eq(test_json_integer(updates, "versions_published"), 20);
            cr_assert_eq(test_json_integer(updates, "checksum_mismatches"), 0);
            cr_assert_eq(test_json_integer(updates, "updates_received") +
                             test_json_integer(updates, "versions_skipped"),
                         40, "%s run %d: 20 versions to 2 ranks, received or skipped",
                         redis ? "redis" : "file", r);
            json_decref(summary);
            test_rmtree(dirs[r]);
            free(dirs[r]);
        }
        test_rmtree(shared);
        free(shared);
    }
}

/* Reliability (#22.10): weights were not in the memory preflight
 * (train.bytes=16GB on a 24 GB machine grew to 23.7 GB and was OOM-killed,
 * taking another process with it). The trainer's buffer and every serve
 * rank's two slots are checked with the KV pools, before anything exists. */
Test(updates, weights_beyond_memory_are_refused_before_the_run, .timeout = 30)
{
    FILE *meminfo = fopen("/proc/meminfo", "r");
    cr_assert_not_null(meminfo);
    char line[256];
    unsigned long long kib = 0;
    while (kib == 0 && fgets(line, sizeof(line), meminfo) != NULL)
        sscanf(line, "MemAvailable: %llu kB", &kib);
    fclose(meminfo);
    cr_assert_gt(kib, 0);
    char *dir = test_tmpdir();
    char bytes[64];
    /* 5 buffers (trainer + 2 x 2 serve ranks) of 30 % of what is free. */
    snprintf(bytes, sizeof(bytes), "train.bytes=%lluKiB", kib * 3 / 10);
    const char *overrides[] = {bytes};
    outcome_t outcome = run_workload(dir, overrides, 1);
    cr_assert_eq(outcome.status, KVIO_ERR_CONFIG, "%s", kvio_strerror(outcome.status));
    cr_assert(test_contains(outcome.error, "emulate: the weights need") &&
                  test_contains(outcome.error, "x 5 buffers") &&
                  test_contains(outcome.error, "GiB available"), "%s", outcome.error);
    cr_assert_neq(access(outcome.dir, F_OK), 0, "the results directory was created");
    test_rmtree(dir);
    free(dir);
}

/* Performance (#23): servers sum a version as it lands (ucx: as the trainer
 * says each chunk is in, before the notice), and the trainer sums it as it
 * puts it. The corrupt_offset fault flips its byte once the whole version
 * is in, and the early sum stops short of it: a whole ucx run, in both apply
 * modes (stall sums what lands between its iterations too), counts every
 * version as a mismatch and activates none; without the fault every version
 * is activated with the trainer's checksum, its stages in order. */
Test(updates, ucx_runs_sum_versions_as_they_land_and_still_catch_a_flipped_byte, .timeout = 60)
{
    REQUIRE_UCX();
    static const struct {
        const char *apply;
        const char *corrupt; /* 64KiB chunks of 256KiB: inside the third */
        int mismatches;
    } cases[] = {
        {"shadow", "update.corrupt_offset=135000", 10},
        {"stall", "update.corrupt_offset=135000", 10},
        {"shadow", "update.corrupt_offset=-1", 0},
        {"stall", "update.corrupt_offset=-1", 0},
        /* Every chunk a UCX put (train.transport.ucx_path: put), not stores
         * through the mapped slot: the same verdicts. */
        {"shadow", "update.corrupt_offset=135000", 10},
        {"shadow", "update.corrupt_offset=-1", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = test_tmpdir();
        char apply[64];
        snprintf(apply, sizeof(apply), "update.apply=%s", cases[i].apply);
        const char *overrides[] = {apply, cases[i].corrupt, "update.verify=true",
                                   i >= 4 ? "train.transport.ucx_path=put"
                                          : "train.transport.ucx_path=mapped"};
        outcome_t outcome = run_workload(dir, overrides, 4);
        cr_assert_eq(outcome.status, KVIO_OK, "case %zu: %s", i, outcome.error);
        json_t *summary = NULL;
        json_t *metrics = model_updates(outcome.dir, &summary);
        cr_expect_eq(test_json_integer(metrics, "checksum_mismatches"),
                     cases[i].mismatches, "case %zu (%s, %s)", i, cases[i].apply,
                     cases[i].corrupt);
        cr_expect_eq(test_json_integer(metrics, "updates_activated"),
                     10 - cases[i].mismatches, "case %zu", i);
        if (cases[i].mismatches == 0) {
            /* Stages in order: the data, its notice, the sum, the swap. */
            cr_expect_geq(csv_mean_difference(outcome.dir, "t_notified_ms", "t_xfer_end_ms"), 0,
                          "case %zu", i);
            cr_expect_geq(csv_mean_difference(outcome.dir, "t_verified_ms", "t_notified_ms"), 0,
                          "case %zu", i);
            cr_expect_geq(csv_mean_difference(outcome.dir, "t_activated_ms", "t_verified_ms"),
                          0, "case %zu", i);
            cr_expect_geq(csv_mean_difference(outcome.dir, "t_publish_start_ms", "t_ready_ms"),
                          0, "case %zu", i);
        }
        json_decref(summary);
        test_rmtree(dir);
        free(dir);
    }
}

/* update.control: paired (emulate): pairs of the coupled run and its twin
 * whose trainer publishes nothing, on one seed per pair, alternating; the
 * paired deltas average the pairs, each with its 95 % interval, and each
 * side is a whole run of its own. Whether the intervals contain 0 on an A/A
 * run is a statistical verdict (wrong 5 % of the time per figure by
 * design): bench/update.sh reports it, this test does not judge it. */
Test(updates, a_paired_control_reports_deltas_with_intervals, .timeout = 240)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    test_run_t run = test_kvio(
        NULL, "run", "quickstart", "--set", "duration=3s", "--set", "ranks.runtime=local",
        "--set", "train.steps=15", "--set", "train.step_time.mean=100ms", "--set",
        "train.step_time.stddev=10ms", "--set", "train.checkpoint.every_n_steps=5", "--set",
        "train.bytes=16MiB", "--set", "train.transport.chunk=4MiB", "--set",
        "update.control=paired", "--repeat", "2", "-o", out, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "update cost vs control (2 pairs, 95 % interval)"), "%s",
              run.out);
    cr_expect(test_contains(run.out, "TTFT p99 "), "%s", run.out);
    test_run_free(&run);
    json_t *summary = NULL;
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    json_error_t error;
    summary = json_load_file(path, 0, &error);
    cr_assert_not_null(summary, "%s", error.text);
    cr_assert(test_json_true(summary, "complete"));
    const json_t *cost = test_json(summary, "metrics.update_cost");
    cr_assert_str_eq(test_json_string(cost, "control"), "paired");
    cr_assert_eq(test_json_integer(cost, "pairs"), 2);
    /* Each figure the mean of its pairs' values, under the name the twin's
     * cost gives the same quantity, with its interval beside it. */
    const char *figures[] = {"ttft_p99_ms.delta", "tpot_p99_ms.delta", "e2el_p99_ms.delta",
                             "hit_rate.delta", "ttft_delta_ms.mean"};
    const json_t *per_pair = test_json(cost, "per_pair");
    for (size_t f = 0; f < sizeof(figures) / sizeof(figures[0]); f++) {
        char name[96], interval[96];
        snprintf(name, sizeof(name), "update_cost.%s", figures[f]);
        snprintf(interval, sizeof(interval), "%s_ci95", figures[f]);
        const json_t *pairs = json_object_get(per_pair, name);
        cr_assert_eq(json_array_size(pairs), 2, "%s", figures[f]);
        double mean = (json_number_value(json_array_get(pairs, 0)) +
                       json_number_value(json_array_get(pairs, 1))) / 2;
        cr_expect_float_eq(test_json_number(cost, figures[f]), mean, 1e-6 * fabs(mean) + 1e-9,
                           "%s", figures[f]);
        cr_expect_geq(test_json_number(cost, interval), 0, "%s", figures[f]);
    }
    /* #52: provenance like every result, and kvio report reads it. */
    cr_expect_not_null(json_object_get(summary, "build"));
    cr_expect_not_null(json_object_get(summary, "host"));
    cr_expect_not_null(json_object_get(summary, "kvio_version"));
    /* Each side a whole run: the coupled one published, its twin did not,
     * on the same stream (the same requests). */
    for (int p = 1; p <= 2; p++) {
        json_t *with_summary = NULL, *without_summary = NULL;
        snprintf(path, sizeof(path), "%s/pair-%d-with", out, p);
        json_t *with = model_updates(path, &with_summary);
        snprintf(path, sizeof(path), "%s/pair-%d-without", out, p);
        json_t *without = model_updates(path, &without_summary);
        cr_expect_eq(test_json_integer(with, "versions_published"), 3, "pair %d", p);
        cr_expect_eq(test_json_integer(without, "versions_published"), 0, "pair %d", p);
        cr_expect_eq(test_json_integer(with_summary, "config.seed"),
                     test_json_integer(without_summary, "config.seed"));
        cr_expect_eq(test_json_integer(with_summary, "config.seed"), p, "pair %d: seed 1 + %d", p,
                     p - 1);
        json_decref(with_summary);
        json_decref(without_summary);
    }
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* A control that does not fit the mode is refused before any run, naming
 * the key: twin is simulate's, paired emulate's, and --repeat counts the
 * pairs of paired only. */
Test(updates, a_control_that_does_not_fit_the_mode_is_refused, .timeout = 30)
{
    struct {
        const char *sets[2];
        const char *repeat;
        const char *message;
    } cases[] = {
        {{"mode=emulate", "update.control=twin"}, NULL, "update.control: twin"},
        {{"mode=simulate", "update.control=paired"}, NULL, "update.control: paired"},
        {{"mode=simulate", "update.control=auto"}, "2", "--repeat counts the pairs"},
        {{"mode=emulate", "update.control=paired"}, "1", "--repeat 1"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char *dir = test_tmpdir();
        char out[1100];
        snprintf(out, sizeof(out), "%s/out", dir);
        test_run_t run = cases[c].repeat != NULL
                             ? test_kvio(NULL, "run", "quickstart", "--set", cases[c].sets[0],
                                         "--set", cases[c].sets[1], "--repeat", cases[c].repeat,
                                         "-o", out, NULL)
                             : test_kvio(NULL, "run", "quickstart", "--set", cases[c].sets[0],
                                         "--set", cases[c].sets[1], "-o", out, NULL);
        cr_expect_eq(run.status, 2, "case %zu: %s", c, run.err);
        cr_expect(test_contains(run.err, cases[c].message), "case %zu: %s", c, run.err);
        struct stat info;
        cr_expect_neq(stat(out, &info), 0, "case %zu: a results directory was made", c);
        test_run_free(&run);
        test_rmtree(dir);
        free(dir);
    }
}
