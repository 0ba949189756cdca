/* Shared test helpers: temporary directories, subprocesses, files. */
#include "tests/helpers.h"

#include "kvio/cost.h"
#include "kvio/engine.h"
#include "kvio/hash.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <xxhash.h>
#include <zlib.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

double test_time_scale(void)
{
    static double scale = 0;
    if (scale > 0)
        return scale;
    const char *text = getenv("KVIO_TEST_TIME_SCALE");
    double value = text != NULL ? strtod(text, NULL) : 0;
    if (!(value > 0)) {
        double load[1] = {0};
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (getloadavg(load, 1) < 1)
            load[0] = 0;
        value = 1.0 + 1.5 * load[0] / (double)(cores > 0 ? cores : 1);
    }
    scale = value < 1 ? 1 : value;
    return scale;
}

double test_seconds(double base_s) { return base_s * test_time_scale(); }

char *test_tmpdir(void)
{
    char template[] = "/tmp/kvio-test-XXXXXX";
    char *path = mkdtemp(template);
    cr_assert_not_null(path, "mkdtemp failed");
    return strdup(path);
}

void test_rmtree(const char *path)
{
    if (path == NULL || strncmp(path, "/tmp/kvio-test-", 15) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

char *test_write_file(const char *dir, const char *name, const char *text)
{
    char *path = NULL;
    cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
    FILE *file = fopen(path, "w");
    cr_assert_not_null(file, "cannot write %s", path);
    fputs(text, file);
    fclose(file);
    return path;
}

char *test_read_file(const char *path)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return NULL;
    size_t capacity = 4096, length = 0;
    char *data = malloc(capacity);
    size_t got;
    while (data != NULL && (got = fread(data + length, 1, capacity - length - 1, file)) > 0) {
        length += got;
        if (capacity - length - 1 == 0) {
            capacity *= 2;
            char *bigger = realloc(data, capacity);
            if (bigger == NULL) {
                free(data);
                data = NULL;
            }
            data = bigger;
        }
    }
    fclose(file);
    if (data != NULL)
        data[length] = '\0';
    return data;
}

static char *slurp_fd(int fd)
{
    size_t capacity = 4096, length = 0;
    char *data = malloc(capacity);
    cr_assert_not_null(data);
    ssize_t got;
    while ((got = read(fd, data + length, capacity - length - 1)) > 0) {
        length += (size_t)got;
        if (capacity - length - 1 == 0) {
            capacity *= 2;
            data = realloc(data, capacity);
            cr_assert_not_null(data);
        }
    }
    data[length] = '\0';
    return data;
}

const char *test_kvio_binary(void)
{
    const char *binary = getenv("KVIO_TEST_BINARY");
    return binary != NULL && binary[0] != '\0' ? binary : KVIO_BINARY;
}

/* argv for kvio: the binary, then arg and the rest up to NULL (at most 62). */
static void kvio_argv(const char *argv[64], const char *arg, va_list args)
{
    int argc = 0;
    argv[argc++] = test_kvio_binary();
    for (const char *next = arg; next != NULL && argc < 63; next = va_arg(args, const char *))
        argv[argc++] = next;
    argv[argc] = NULL;
}

test_run_t test_kvio(const char *cwd, const char *arg, ...)
{
    const char *argv[64];
    va_list args;
    va_start(args, arg);
    kvio_argv(argv, arg, args);
    va_end(args);
    return test_exec(cwd, argv);
}

/* test_exec, with the verdict deciding the exit status when verdict. */
static test_run_t exec_run(const char *cwd, const char *const *argv, bool verdict);

test_run_t test_exec(const char *cwd, const char *const *argv)
{
    return exec_run(cwd, argv, false);
}

test_run_t test_kvio_verdict(const char *cwd, const char *arg, ...)
{
    const char *argv[64];
    va_list args;
    va_start(args, arg);
    kvio_argv(argv, arg, args);
    va_end(args);
    return exec_run(cwd, argv, true);
}

static test_run_t exec_run(const char *cwd, const char *const *argv, bool verdict)
{
    char out_path[] = "/tmp/kvio-out-XXXXXX";
    char err_path[] = "/tmp/kvio-err-XXXXXX";
    int out_fd = mkstemp(out_path);
    int err_fd = mkstemp(err_path);
    cr_assert(out_fd >= 0 && err_fd >= 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDONLY);
        dup2(null_fd, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        if (cwd != NULL && chdir(cwd) != 0)
            _exit(126);
        if (verdict)
            unsetenv("KVIO_ALLOW_INVALID");
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int wait_status = 0;
    waitpid(pid, &wait_status, 0);
    test_run_t run;
    run.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                        : 128 + WTERMSIG(wait_status);
    lseek(out_fd, 0, SEEK_SET);
    lseek(err_fd, 0, SEEK_SET);
    run.out = slurp_fd(out_fd);
    run.err = slurp_fd(err_fd);
    close(out_fd);
    close(err_fd);
    unlink(out_path);
    unlink(err_path);
    return run;
}

void test_run_free(test_run_t *run)
{
    free(run->out);
    free(run->err);
    run->out = run->err = NULL;
}

int test_contains(const char *text, const char *needle)
{
    return text != NULL && strstr(text, needle) != NULL;
}

int test_require(const char *what, int available, const char *reason)
{
    if (available)
        return 1;
    const char *required = getenv("KVIO_TEST_REQUIRE");
    if (required != NULL && strstr(required, what) != NULL)
        cr_assert_fail("%s is required (KVIO_TEST_REQUIRE) but unavailable: %s", what, reason);
    cr_skip_test("%s unavailable: %s", what, reason);
    return 0;
}

/* Mounts a private file system (tmpfs, ramfs) on dir, in a mount namespace
 * of this test process only (root, or an unprivileged user namespace). 0
 * with a reason if not. */
int test_private_mount(const char *dir, const char *type, unsigned long flags,
                         const char *options, char *reason, size_t reason_len)
{
    if (unshare(CLONE_NEWNS) != 0) {
        uid_t uid = getuid();
        gid_t gid = getgid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(reason, reason_len, "cannot create a mount namespace: %s", strerror(errno));
            return 0;
        }
        char map[64];
        int fd = open("/proc/self/setgroups", O_WRONLY);
        if (fd >= 0) {
            (void)!write(fd, "deny", 4);
            close(fd);
        }
        snprintf(map, sizeof(map), "0 %d 1", (int)uid);
        if ((fd = open("/proc/self/uid_map", O_WRONLY)) < 0 ||
            write(fd, map, strlen(map)) < 0) {
            snprintf(reason, reason_len, "cannot map the user: %s", strerror(errno));
            return 0;
        }
        close(fd);
        snprintf(map, sizeof(map), "0 %d 1", (int)gid);
        if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
            (void)!write(fd, map, strlen(map));
            close(fd);
        }
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(type, dir, type, flags, options) != 0) {
        snprintf(reason, reason_len, "cannot mount a %s: %s", type, strerror(errno));
        return 0;
    }
    return 1;
}

int test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof(address);
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&address, sizeof(address)) == 0 &&
        getsockname(fd, (struct sockaddr *)&address, &length) == 0)
        port = ntohs(address.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

void test_redis_cli(int port, const char *args)
{
    char command[512];
    snprintf(command, sizeof(command), "redis-cli -p %d %s >/dev/null 2>&1", port, args);
    (void)!system(command);
}

/* The pid the redis-server answering on port reports (INFO server), or 0. */
static long redis_answering_pid(int port)
{
    char command[128], line[256];
    snprintf(command, sizeof(command), "redis-cli -p %d info server 2>/dev/null", port);
    FILE *out = popen(command, "r");
    long pid = 0;
    while (out != NULL && fgets(line, sizeof(line), out) != NULL)
        if (strncmp(line, "process_id:", 11) == 0)
            pid = strtol(line + 11, NULL, 10);
    if (out != NULL)
        pclose(out);
    return pid;
}

int test_redis_up(int port)
{
    char command[512], pidfile[128];
    snprintf(pidfile, sizeof(pidfile), "/tmp/kvio-test-redis-%d-%ld.pid", port, (long)getpid());
    unlink(pidfile);
    snprintf(command, sizeof(command),
             "redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no "
             "--daemonize yes --pidfile %s --dir /tmp >/dev/null 2>&1", port, pidfile);
    if (port <= 0 || system(command) != 0)
        return 0;
    /* Up once it answers, and it is this server answering (under ctest -j
     * another test's server may hold a port thought free). */
    for (int attempt = 0; attempt < 100; attempt++) {
        char *text = test_read_file(pidfile);
        long pid = text != NULL ? strtol(text, NULL, 10) : 0;
        free(text);
        long answering = pid > 0 ? redis_answering_pid(port) : 0;
        if (answering != 0)
            return answering == pid;
        usleep(20000);
    }
    return 0;
}

void test_redis_down(int port)
{
    test_redis_cli(port, "shutdown nosave");
}

const char *test_mpirun_sanitizer_args(void)
{
    return getenv("ASAN_OPTIONS") != NULL ? "-x " TEST_MPIRUN_ASAN_OPTIONS : "";
}

/* Splits line (modified) at commas into a malloc'd array of fields. */
static char **split_fields(char *line, size_t *count_p)
{
    size_t count = 1;
    for (const char *c = line; *c; c++)
        count += *c == ',';
    char **fields = calloc(count, sizeof(*fields));
    cr_assert_not_null(fields);
    size_t i = 0;
    for (char *field = line;; field++) {
        fields[i++] = field;
        field = strchr(field, ',');
        if (field == NULL)
            break;
        *field = '\0';
    }
    *count_p = count;
    return fields;
}

test_csv_t test_csv_read(const char *path)
{
    test_csv_t csv = {0};
    csv.text = test_read_file(path);
    cr_assert_not_null(csv.text, "%s is missing", path);
    char *line = csv.text, *next;
    size_t capacity = 0;
    for (size_t number = 1; line != NULL && *line != '\0'; line = next, number++) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        size_t count = 0;
        char **fields = split_fields(line, &count);
        if (csv.names == NULL) {
            csv.names = fields;
            csv.num_columns = count;
            continue;
        }
        cr_assert_eq(count, csv.num_columns, "%s:%zu: %zu fields, the header has %zu", path,
                     number, count, csv.num_columns);
        if (csv.num_rows == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            csv.rows = realloc(csv.rows, capacity * sizeof(*csv.rows));
            cr_assert_not_null(csv.rows);
        }
        csv.rows[csv.num_rows++] = fields;
    }
    cr_assert_not_null(csv.names, "%s is empty", path);
    return csv;
}

size_t test_csv_column(const test_csv_t *csv, const char *name)
{
    for (size_t i = 0; i < csv->num_columns; i++)
        if (strcmp(csv->names[i], name) == 0)
            return i;
    cr_assert_fail("no column %s", name);
    return 0;
}

double test_csv_number(const test_csv_t *csv, size_t row, const char *name)
{
    const char *field = csv->rows[row][test_csv_column(csv, name)];
    return field[0] != '\0' ? strtod(field, NULL) : NAN;
}

void test_csv_free(test_csv_t *csv)
{
    for (size_t i = 0; i < csv->num_rows; i++)
        free(csv->rows[i]);
    free(csv->rows);
    free(csv->names);
    free(csv->text);
    memset(csv, 0, sizeof(*csv));
}

int test_fill_file_system(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    static unsigned char chunk[4096];
    while (fd >= 0 && write(fd, chunk, sizeof(chunk)) > 0)
        ;
    int filled = fd >= 0 && errno == ENOSPC;
    if (fd >= 0)
        close(fd);
    return filled;
}

struct kvio_model test_model(const char *name)
{
    kvio_model_t model = {.preset = (char *)name, .dtype_bytes = 2};
    char error[256];
    cr_assert_eq(kvio_model_resolve(&model, error, sizeof(error)), KVIO_OK, "%s", error);
    return model;
}

struct kvio_gpu test_gpu(const char *name)
{
    kvio_gpu_t gpu = {.preset = (char *)name};
    char error[256];
    cr_assert_eq(kvio_gpu_resolve(&gpu, error, sizeof(error)), KVIO_OK, "%s", error);
    return gpu;
}

struct kvio_cost *test_linear_cost(void)
{
    kvio_model_t model = {.preset = "llama3-8b", .dtype_bytes = 2};
    kvio_gpu_t gpu = {.preset = "h200"};
    char error[256];
    cr_assert_eq(kvio_model_resolve(&model, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_gpu_resolve(&gpu, error, sizeof(error)), KVIO_OK);
    kvio_cost_config_t config = {.kind = KVIO_COST_LINEAR, .tensor_parallel = 1,
                                 .linear_c0_ms = 1, .linear_c1_ms = 0.001,
                                 .linear_c2_ms = 0.001};
    kvio_cost_t *cost = NULL;
    cr_assert_eq(kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error)), KVIO_OK);
    return cost;
}

size_t test_engine_step(struct kvio_engine *engine, long long *now_ns,
                        struct kvio_engine_scheduled *out, size_t max)
{
    kvio_engine_iteration_t iteration;
    cr_assert_eq(kvio_engine_schedule(engine, *now_ns, &iteration), KVIO_OK);
    const kvio_engine_scheduled_t *items;
    size_t count;
    kvio_engine_last_scheduled(engine, &items, &count);
    for (size_t i = 0; i < count && i < max; i++)
        out[i] = items[i];
    *now_ns += iteration.duration_ns > 0 ? iteration.duration_ns : 1;
    kvio_engine_complete(engine, *now_ns);
    return count;
}

void test_engine_add(struct kvio_engine *engine, unsigned long long id, unsigned prompt,
                     unsigned output, int priority, long long arrival_ns)
{
    size_t num_hashes = (prompt + output) / 16;
    kvio_hash_t *hashes = calloc(num_hashes + 1, sizeof(kvio_hash_t));
    for (size_t b = 0; b < num_hashes; b++) {
        kvio_hash_run_t run = {.content_id = 1000 + id, .offset = (uint32_t)(b * 16), .length = 16};
        hashes[b] = kvio_hash_runs(b ? &hashes[b - 1] : NULL, &run, 1);
    }
    kvio_engine_request_t request = {.id = id, .arrival_ns = arrival_ns, .prompt_tokens = prompt,
                                     .output_tokens = output, .priority = priority,
                                     .hashes = hashes, .num_hashes = num_hashes,
                                     .measured = true};
    cr_assert_eq(kvio_engine_add(engine, &request), KVIO_OK);
    free(hashes);
}

json_t *test_summary(const char *dir, const char *out)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s/summary.json", dir, out);
    char *text = test_read_file(path);
    json_t *summary = text != NULL ? json_loads(text, 0, NULL) : NULL;
    cr_assert_not_null(summary, "%s: no summary, or not JSON", path);
    free(text);
    return summary;
}

const json_t *test_json(const json_t *root, const char *path)
{
    const json_t *at = root;
    char part[256];
    const char *rest = path;
    cr_assert_not_null(root, "%s: no JSON to look in", path);
    while (*rest != '\0') {
        size_t length = strcspn(rest, ".");
        cr_assert_lt(length, sizeof(part), "%s: a key too long", path);
        memcpy(part, rest, length);
        part[length] = '\0';
        char *end = NULL;
        long index = strtol(part, &end, 10);
        if (json_is_array(at) && end != part && *end == '\0')
            at = json_array_get(at, (size_t)index);
        else
            at = json_object_get(at, part);
        cr_assert_not_null(at, "%s: no '%s' (%.*s is missing)", path, part,
                           (int)(rest - path + length), path);
        rest += length;
        if (*rest == '.')
            rest++;
    }
    return at;
}

double test_json_number(const json_t *root, const char *path)
{
    const json_t *value = test_json(root, path);
    cr_assert(json_is_number(value), "%s: not a number", path);
    return json_number_value(value);
}

long long test_json_integer(const json_t *root, const char *path)
{
    const json_t *value = test_json(root, path);
    cr_assert(json_is_integer(value), "%s: not an integer", path);
    return (long long)json_integer_value(value);
}

const char *test_json_string(const json_t *root, const char *path)
{
    const json_t *value = test_json(root, path);
    cr_assert(json_is_string(value), "%s: not a string", path);
    return json_string_value(value);
}

void test_expect_provenance(const json_t *root, const char *command)
{
    cr_expect_gt(strlen(test_json_string(root, "kvio_version")), 0);
    cr_expect_gt(strlen(test_json_string(root, "build.commit")), 0);
    cr_expect_gt(strlen(test_json_string(root, "host.hostname")), 0);
    cr_expect_gt(strlen(test_json_string(root, "start_time")), 0);
    const json_t *typed = json_object_get(root, "command");
    cr_assert(json_is_array(typed) && json_array_size(typed) >= 2, "command: not as typed");
    cr_expect_str_eq(json_string_value(json_array_get(typed, 0)), "kvio");
    cr_expect_str_eq(json_string_value(json_array_get(typed, 1)), command);
    cr_expect(json_is_array(json_object_get(root, "overrides")), "no overrides list");
}

int test_json_true(const json_t *root, const char *path)
{
    const json_t *value = test_json(root, path);
    cr_assert(json_is_boolean(value), "%s: not a boolean", path);
    return json_is_true(value);
}

kvio_choice_t test_choice(const kvio_registry_t *registry, const char *name)
{
    kvio_choice_t choice = {.registry = registry};
    cr_assert_eq(kvio_choice_set(&choice, name), KVIO_OK, "no %s called %s", registry->kind,
                 name);
    return choice;
}

/* ---------- small vocabularies ---------- */

/* A tiktoken rank file: every byte at its own value, then extra tokens at
 * 256, 257, ... (base64 written here). */
char *test_write_rank_file(const char *dir, const char *name, const char *const *extra,
                             size_t num_extra)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t capacity = 64 * (256 + num_extra), used = 0;
    char *text = malloc(capacity);
    cr_assert_not_null(text);
    for (size_t rank = 0; rank < 256 + num_extra; rank++) {
        unsigned char byte = (unsigned char)rank;
        const unsigned char *bytes = rank < 256 ? &byte : (const unsigned char *)extra[rank - 256];
        size_t length = rank < 256 ? 1 : strlen(extra[rank - 256]);
        for (size_t i = 0; i < length; i += 3) {
            uint32_t group = (uint32_t)bytes[i] << 16 |
                             (i + 1 < length ? (uint32_t)bytes[i + 1] << 8 : 0) |
                             (i + 2 < length ? bytes[i + 2] : 0);
            for (size_t j = 0; j < 4; j++)
                text[used++] = i + j <= length ? alphabet[group >> (18 - 6 * j) & 63] : '=';
        }
        used += (size_t)snprintf(text + used, capacity - used, " %zu\n", rank);
    }
    text[used] = '\0';
    char *path = test_write_file(dir, name, text);
    free(text);
    return path;
}

/* A byte-level tokenizer.json: the vocabulary in GPT-2's byte alphabet
 * ("Ġ" is the space), merges by their order in the file, not by id ("b c"
 * before "a b": abc is a + bc), the Split pattern, added tokens. */
static const char tiny_json_head[] =
    "{\"version\": \"1.0\", \"normalizer\": null,\n"
    " \"added_tokens\": [{\"id\": 300, \"content\": \"<|im_start|>\", \"special\": true},\n"
    "                  {\"id\": 301, \"content\": \"<|im_end|>\", \"special\": true}],\n"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
    "   {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s?\\\\p{L}+|\\\\p{N}|\\\\s+(?!\\\\S)|\\\\s+|[^\\\\s\\\\p{L}\\\\p{N}]+\"},\n"
    "    \"behavior\": \"Isolated\", \"invert\": false},\n"
    "   {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},\n"
    " \"model\": {\"type\": \"BPE\", \"ignore_merges\": false,\n"
    "  \"merges\": [\"b c\", \"a b\", \"Ġ u\", \"Ġu s\", \"Ġus e\", [\"Ġuse\", \"r\"]],\n"
    "  \"vocab\": {";

char *test_write_tokenizer_json(const char *dir, const char *name, const char *tail)
{
    int byte_of_char[324];
    int next = 256;
    for (int byte = 0; byte < 256; byte++) {
        bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) ||
                         (byte >= 0xae && byte <= 0xff);
        byte_of_char[byte] = -1;
        byte_of_char[printable ? byte : next++] = byte;
    }
    size_t capacity = 16384, used = 0;
    char *text = malloc(capacity);
    cr_assert_not_null(text);
    used += (size_t)snprintf(text, capacity, "%s", tiny_json_head);
    for (int code = 0; code < 324; code++) {
        int byte = byte_of_char[code];
        if (byte < 0)
            continue;
        /* The character as JSON: \uXXXX, the byte's id. */
        used += (size_t)snprintf(text + used, capacity - used, "\"\\u%04x\": %d, ", code, byte);
    }
    used += (size_t)snprintf(text + used, capacity - used,
                             "\"ab\": 256, \"bc\": 257, \"\\u0120u\": 258, \"\\u0120us\": 259,"
                             " \"\\u0120use\": 260, \"\\u0120user\": 261}}%s}\n",
                             tail);
    char *path = test_write_file(dir, name, text);
    free(text);
    return path;
}

double test_zlib_ratio(const void *bytes, size_t length)
{
    uLongf compressed = compressBound((uLong)length);
    unsigned char *out = malloc(compressed);
    if (out == NULL || compress2(out, &compressed, bytes, (uLong)length, 1) != Z_OK) {
        free(out);
        return 0;
    }
    free(out);
    return (double)length / (double)compressed;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double test_page_dedupe_ratio(const void *bytes, size_t length)
{
    size_t pages = length / 4096;
    uint64_t *sums = malloc((pages + 1) * sizeof(uint64_t));
    if (sums == NULL || pages == 0) {
        free(sums);
        return 0;
    }
    for (size_t p = 0; p < pages; p++)
        sums[p] = XXH3_64bits((const unsigned char *)bytes + p * 4096, 4096);
    qsort(sums, pages, sizeof(uint64_t), compare_u64);
    size_t distinct = 1;
    for (size_t p = 1; p < pages; p++)
        distinct += sums[p] != sums[p - 1];
    free(sums);
    return (double)pages / (double)distinct;
}

void test_expect_irreducible(const void *bytes, size_t length, const char *what)
{
    double compressed = test_zlib_ratio(bytes, length);
    double deduped = test_page_dedupe_ratio(bytes, length / 4096 * 4096);
    cr_expect_lt(compressed, 1.02, "%s: zlib shrinks it %.3fx", what, compressed);
    cr_expect_lt(deduped, 1.02, "%s: its 4 KiB pages deduplicate %.3fx", what, deduped);
}

json_t *test_mpirun_kvio(const char *dir, int processes, const char *file, double timeout_s)
{
    char command[4096];
    snprintf(command, sizeof(command),
             "cd %s && KVIO_ALLOW_INVALID=1 timeout %.0f mpirun --allow-run-as-root "
             "--oversubscribe -x KVIO_ALLOW_INVALID %s -np %d %s run %s -o out >mpirun.log 2>&1",
             dir, timeout_s, test_mpirun_sanitizer_args(), processes, test_kvio_binary(), file);
    int status = system(command);
    char path[1200];
    snprintf(path, sizeof(path), "%s/mpirun.log", dir);
    char *log = test_read_file(path);
    cr_assert_eq(status, 0, "mpirun: %s", log ? log : "");
    free(log);
    return test_summary(dir, "out");
}

int test_mpirun_available(void)
{
#ifndef KVIO_HAVE_MPI
    return 0; /* the mpi runtime is not built */
#endif
    return system("command -v mpirun >/dev/null 2>&1") == 0;
}

int test_open_file_under(const char *dir)
{
    DIR *fds = opendir("/proc/self/fd");
    if (fds == NULL)
        return -1;
    int found = -1;
    struct dirent *entry;
    while (found < 0 && (entry = readdir(fds)) != NULL) {
        char link[300], target[1024];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", entry->d_name);
        ssize_t length = readlink(link, target, sizeof(target) - 1);
        if (length <= 0)
            continue;
        target[length] = '\0';
        if (strncmp(target, dir, strlen(dir)) == 0)
            found = atoi(entry->d_name);
    }
    closedir(fds);
    return found;
}

long test_huge_kib_at(const void *address)
{
    FILE *smaps = fopen("/proc/self/smaps", "r");
    if (smaps == NULL)
        return -1;
    char line[512];
    int inside = 0;
    long kib = -1;
    while (fgets(line, sizeof(line), smaps) != NULL) {
        unsigned long start = 0, end = 0;
        char dash = 0;
        /* A mapping's first line: "start-end perms ..."; its fields: "Name: value". */
        if (sscanf(line, "%lx%c%lx ", &start, &dash, &end) == 3 && dash == '-') {
            inside = (uintptr_t)address >= start && (uintptr_t)address < end;
            continue;
        }
        if (inside && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    }
    fclose(smaps);
    return kib;
}

int test_huge_pages_on_request(void)
{
    FILE *file = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char text[128] = "";
    if (file == NULL)
        return 0;
    int read = fgets(text, sizeof(text), file) != NULL;
    fclose(file);
    return read && (strstr(text, "[always]") != NULL || strstr(text, "[madvise]") != NULL);
}
