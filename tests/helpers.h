/* Helpers shared by the Criterion tests: temporary directories, running the
 * built kvio binary and capturing its output, and reading files. */
#ifndef KVIO_TESTS_HELPERS_H
#define KVIO_TESTS_HELPERS_H

#include <stddef.h>

#include "kvio/plugin.h"

/* Result of running a command: exit status (or 128+signal) and its output. */
typedef struct test_run {
    int status;
    char *out; /* stdout, NUL-terminated; free with test_run_free */
    char *err; /* stderr */
} test_run_t;

/* Creates a fresh directory under /tmp; returns a malloc'd path. */
char *test_tmpdir(void);

/* Removes a directory tree (best effort). */
void test_rmtree(const char *path);

/* Writes text to dir/name; returns a malloc'd path to the file. */
char *test_write_file(const char *dir, const char *name, const char *text);

/* Reads a whole file; returns a malloc'd, NUL-terminated buffer or NULL. */
char *test_read_file(const char *path);

/* The kvio binary the tests run: $KVIO_TEST_BINARY when set (the GPU tests
 * on a device machine, away from the build tree), else the one built. */
const char *test_kvio_binary(void);

/* Runs the kvio binary with the arguments (NULL-terminated list), with cwd
 * as its working directory (NULL: inherit), and captures its output. */
test_run_t test_kvio(const char *cwd, const char *arg, ...);

/* Runs argv (NULL-terminated; argv[0] looked up on PATH) the same way. */
test_run_t test_exec(const char *cwd, const char *const *argv);

/* test_kvio with the run's verdict deciding its exit status: ctest runs
 * every test with KVIO_ALLOW_INVALID=1 (kvio run for what it writes, on a
 * 2-core machine whose emulate runs are rarely valid); this clears it. */
test_run_t test_kvio_verdict(const char *cwd, const char *arg, ...);

void test_run_free(test_run_t *run);

/* True when the substring occurs in text. */
int test_contains(const char *text, const char *needle);

/* A choice of registry's plug-in called name (asserted to exist), without
 * option storage: for configs a test fills in by hand. */
kvio_choice_t test_choice(const kvio_registry_t *registry, const char *name);

/* Skips the test (or fails, when KVIO_TEST_REQUIRE lists the dependency) for
 * want of a dependency named in what ("redis", "mpi", "gpu"). */
int test_require(const char *what, int available, const char *reason);

/* Mounts a private file system (tmpfs, ramfs; flags and options as for
 * mount(2)) on dir, in a mount namespace of the calling test process only
 * (root, or an unprivileged user namespace). 0 with a reason if not. */
int test_private_mount(const char *dir, const char *type, unsigned long flags,
                       const char *options, char *reason, size_t reason_len);

/* Kilobytes of the mapping holding address that are in 2 MiB pages
 * (/proc/self/smaps AnonHugePages), or -1 when no mapping holds it. */
long test_huge_kib_at(const void *address);

/* True when the kernel gives 2 MiB pages to memory that asks for them
 * (transparent huge pages "always" or "madvise"). */
int test_huge_pages_on_request(void);

/* A TCP port on loopback that nothing listens on (bound, then released);
 * 0 when none could be had. */
int test_free_port(void);

/* Starts a private redis-server (no persistence, daemonized) on port;
 * true once it answers PING. */
int test_redis_up(int port);

/* Shuts the redis-server on port down without saving (best effort). */
void test_redis_down(int port);

/* How much slower than an idle machine this one may be now, for deadlines
 * and upper bounds on real time in tests: $KVIO_TEST_TIME_SCALE when set,
 * else 1 + 1.5 x the load average per core (about 1 idle, 5-6 on two cores
 * with two busy loops and ctest -j2 beside the test), read once. */
double test_time_scale(void);

/* base_s seconds scaled by test_time_scale(): the bound a test may put on
 * real time. */
double test_seconds(double base_s);

/* JSON looked up by a dotted path ("metrics.ttft_ms.p99"; a numeric part
 * indexes an array), asserting that every key on the way is there: an
 * assertion on a value then cannot pass because its key is missing. The
 * typed forms also assert the type (number: integer or real). */
struct json_t;
const struct json_t *test_json(const struct json_t *root, const char *path);
double test_json_number(const struct json_t *root, const char *path);
long long test_json_integer(const struct json_t *root, const char *path);
const char *test_json_string(const struct json_t *root, const char *path);
int test_json_true(const struct json_t *root, const char *path);

/* #52: root opens with the provenance every output of kvio carries
 * (core/provenance.c): kvio_version, build.commit, host.hostname, a
 * start_time and the command as typed, ["kvio", command, ...] (asserted). */
void test_expect_provenance(const struct json_t *root, const char *command);

/* DIR/OUT/summary.json parsed (asserting it is there and is JSON); the
 * caller json_decrefs it. */
struct json_t *test_summary(const char *dir, const char *out);

/* `kvio run FILE -o out` in dir under mpirun -np processes (as root,
 * oversubscribed, KVIO_ALLOW_INVALID passed on, bounded by timeout_s),
 * asserting it exits 0 (its log in the message); DIR/out/summary.json
 * parsed, the caller json_decrefs it. */
struct json_t *test_mpirun_kvio(const char *dir, int processes, const char *file,
                                double timeout_s);

/* A CSV file read whole (no quoting: kvio's CSVs have none): the header's
 * names and each row's fields. */
typedef struct test_csv {
    char *text;
    char **names;
    size_t num_columns;
    char ***rows; /* rows[i][column] */
    size_t num_rows;
} test_csv_t;

/* Reads path (asserting it exists and every row has the header's width). */
test_csv_t test_csv_read(const char *path);
/* The column named name (asserting there is one). */
size_t test_csv_column(const test_csv_t *csv, const char *name);
/* Row row's value in column name, as a number (NAN when empty). */
double test_csv_number(const test_csv_t *csv, size_t row, const char *name);
void test_csv_free(test_csv_t *csv);

/* Fills the file system holding dir (a file dir/filler written until it is
 * full); true when it ended full (ENOSPC). */
int test_fill_file_system(const char *dir);

/* Runs `redis-cli -p port ARGS` (best effort, output discarded). */
void test_redis_cli(int port, const char *args);

/* Under bench/sanitize.sh (ASAN_OPTIONS set), mpirun's ranks keep
 * AddressSanitizer's checks but not its leak report, which lists Open MPI's
 * process-lifetime allocations in components it has already unloaded
 * (unnamed frames no suppression can match); kvio's own code is leak-checked
 * by the same runs on the local runtime. TEST_MPIRUN_ASAN_OPTIONS is the
 * value for `mpirun -x`; test_mpirun_sanitizer_args() is "-x ASAN_OPTIONS=..."
 * for a shell command line, or "" when not sanitizing. */
/* verify_asan_link_order=0: the fake-device tests preload a stand-in CUDA
 * runtime, which the ranks inherit. */
#define TEST_MPIRUN_ASAN_OPTIONS                                                           \
    "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1:verify_asan_link_order=0"
const char *test_mpirun_sanitizer_args(void);

/* A model or GPU preset, resolved (asserting it exists; bf16 activations). */
struct kvio_model test_model(const char *name);
struct kvio_gpu test_gpu(const char *name);

/* The engine tests' cost model: every iteration takes 1 ms plus 1 us per
 * token (linear, Llama-3-8B on an H200). Destroy with kvio_cost_destroy. */
struct kvio_cost;
struct kvio_cost *test_linear_cost(void);

/* One engine iteration at *now_ns: schedule, then complete at its end (an
 * empty one takes 1 ns); its batch into out (at most max); returns the
 * batch's size. */
struct kvio_engine;
struct kvio_engine_scheduled;
size_t test_engine_step(struct kvio_engine *engine, long long *now_ns,
                        struct kvio_engine_scheduled *out, size_t max);

/* Adds request id to engine: prompt + output tokens of distinct content
 * (block hashes of 16 tokens over both), measured. */
struct kvio_engine;
void test_engine_add(struct kvio_engine *engine, unsigned long long id, unsigned prompt,
                     unsigned output, int priority, long long arrival_ns);

/* A tiktoken rank file named name in dir: every byte at rank = its value,
 * then each of extra at 256, 257, ... (the path, malloc'd). */
char *test_write_rank_file(const char *dir, const char *name, const char *const *extra,
                           size_t num_extra);

/* A byte-level BPE tokenizer.json named name in dir: the 256 bytes at
 * their values, ab 256, bc 257, " u" 258, " us" 259, " use" 260, " user"
 * 261; merges "b c", "a b", " u", " us", " use", " user" in that order; a
 * Split pattern (letters with one space before, digits alone, whitespace,
 * punctuation runs); added tokens <|im_start|> 300 and <|im_end|> 301;
 * tail is written before the last brace (the path, malloc'd). */
char *test_write_tokenizer_json(const char *dir, const char *name, const char *tail);

/* How far zlib (level 1, as the issue measured it) shrinks length bytes:
 * length over the compressed length (1.0: not at all). */
double test_zlib_ratio(const void *bytes, size_t length);

/* How far deduplication over 4 KiB pages shrinks length bytes (a whole
 * number of pages): pages over distinct pages (1.0: every page distinct). */
double test_page_dedupe_ratio(const void *bytes, size_t length);

/* Expects length bytes (what) to be reducible by neither: zlib and 4 KiB
 * page deduplication each below 1.02x. */
void test_expect_irreducible(const void *bytes, size_t length, const char *what);

/* A descriptor this process holds open on a file under dir (a tier's
 * nameless slab: /proc/self/fd's link names dir/#inode), or -1. */
int test_open_file_under(const char *dir);

/* Whether mpirun can start kvio's ranks here (the mpi runtime built and
 * mpirun on the PATH). */
int test_mpirun_available(void);


#endif
