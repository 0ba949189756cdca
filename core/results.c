/* Results directories, atomic JSON writes, CSV files and text tables. */
#include "kvio/results.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/files.h"

struct kvio_results {
    char *path;
    int lock_fd; /* the directory, flock'ed while the results are open */
};

struct kvio_csv {
    FILE *file;
    bool failed;
    int err; /* the errno of the first failure (0: unknown) */
};

/* A write failed: the first cause is kept for the message. */
static void csv_failed(kvio_csv_t *csv)
{
    if (!csv->failed)
        csv->err = errno;
    csv->failed = true;
}

#define KVIO_TABLE_MAX_COLUMNS 16

struct kvio_table {
    char *title;
    char ***rows; /* rows[i][j], NULL-terminated per row */
    size_t num_rows, capacity;
};

json_t *kvio_hist_json(const kvio_hist_t *hist, double scale)
{
    kvio_hist_summary_t summary;
    kvio_hist_summarize(hist, scale, &summary);
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "count", (json_int_t)summary.count,
                     "mean", summary.mean, "std", kvio_hist_stddev(hist) * scale, "p50",
                     summary.p50, "p90", summary.p90, "p99", summary.p99, "max", summary.max);
}

void kvio_start_json_set(json_t *start, int64_t t0_wall_ns, json_t *ranks)
{
    char text[64];
    kvio_format_utc((unsigned long long)t0_wall_ns, text, sizeof(text));
    json_object_set_new(start, "t0", json_string(text));
    json_object_set_new(start, "t0_unix_ns", json_integer((json_int_t)t0_wall_ns));
    json_object_set_new(start, "ranks", ranks);
}

json_t *kvio_start_rank_json(int rank, const char *role, double setup_s)
{
    return json_pack("{s:i, s:s, s:f}", "rank", rank, "role", role, "setup_s", setup_s);
}

/* Creates the parents of path (like mkdir -p), leaving path itself. */
static void make_parents(const char *path)
{
    char buffer[4096];
    snprintf(buffer, sizeof(buffer), "%s", path);
    for (char *slash = strchr(buffer + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(buffer, 0755);
        *slash = '/';
    }
}

/* Makes the results directory; an existing one is reused only with force
 * (*existed_p says so). */
static kvio_status_t make_dir(const char *path, bool force, bool *existed_p, char *error_p,
                              size_t error_len)
{
    *existed_p = false;
    make_parents(path);
    if (mkdir(path, 0755) == 0)
        return KVIO_OK;
    int err = errno;
    if (err == EEXIST) {
        struct stat info;
        if (stat(path, &info) == 0 && !S_ISDIR(info.st_mode)) {
            snprintf(error_p, error_len, "%s: exists and is not a directory", path);
            return KVIO_ERR_EXISTS;
        }
        if (!force) {
            snprintf(error_p, error_len, "%s: results directory exists (use --force to reuse it)",
                     path);
            return KVIO_ERR_EXISTS;
        }
        *existed_p = true;
        return KVIO_OK;
    }
    snprintf(error_p, error_len, "%s: cannot create results directory: %s", path, strerror(err));
    return kvio_status_from_errno(err) == KVIO_ERR_NOT_FOUND ? KVIO_ERR_NOT_FOUND : KVIO_ERR_IO;
}

/* Every file a kvio command writes into a results directory: a reused one
 * (--force) loses exactly these, so none of an earlier run's is taken for
 * this run's (a stale updates.csv); nothing else is touched. unlink removes
 * a planted link, never what it points to. */
static const char *const written_files[] = {
    "summary.json", "summary.json.tmp", "requests.csv", "iterations.csv", "updates.csv",
    "updates.csv.tmp", "sync.csv", "compare.json", "capacity.json", "trace.jsonl", "tokens.csv",
    "run.log", "compare.csv", "vllm.json", "mlperf.json",
};

static kvio_status_t remove_earlier(const char *path, char *error_p, size_t error_len)
{
    for (size_t i = 0; i < sizeof(written_files) / sizeof(written_files[0]); i++) {
        char file[4200];
        snprintf(file, sizeof(file), "%s/%s", path, written_files[i]);
        if (unlink(file) != 0 && errno != ENOENT) {
            snprintf(error_p, error_len, "%s: cannot remove the earlier run's file: %s", file,
                     strerror(errno));
            return KVIO_ERR_IO;
        }
    }
    return KVIO_OK;
}

/* The directory locked for this process's run: a second kvio run into it
 * (two --force runs at once) is refused, not interleaved. */
static kvio_status_t lock_dir(const char *path, int *fd_p, char *error_p, size_t error_len)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(error_p, error_len, "%s: cannot open the results directory: %s", path,
                 strerror(errno));
        return kvio_status_from_errno(errno);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        if (err == EWOULDBLOCK) {
            snprintf(error_p, error_len, "%s: results directory in use by another kvio run "
                     "(give another -o DIR)", path);
            return KVIO_ERR_EXISTS;
        }
        snprintf(error_p, error_len, "%s: cannot lock the results directory: %s", path,
                 strerror(err));
        return kvio_status_from_errno(err);
    }
    *fd_p = fd;
    return KVIO_OK;
}

/* The longest results directory path taken: its files' names (and their
 * temporaries') must still fit PATH_MAX and kvio's path buffers. */
#define RESULTS_PATH_MAX 3000

kvio_status_t kvio_results_create(const char *dir, const char *name, bool force,
                                  kvio_results_t **results_p, char *error_p, size_t error_len)
{
    char generated[1024];
    kvio_status_t status;
    if (dir == NULL) {
        char stamp[64];
        kvio_format_utc(kvio_wall_time_ns(), stamp, sizeof(stamp));
        /* Colons are awkward in file names; keep the rest of ISO 8601. */
        for (char *c = stamp; *c != '\0'; c++) {
            if (*c == ':')
                *c = '-';
        }
        snprintf(generated, sizeof(generated), "results/%s-%s-%ld",
                 name != NULL && name[0] != '\0' ? name : "kvio", stamp, (long)getpid());
        dir = generated;
    }
    /* Refused before any parent is made (a 5 KB path left 4 KB of nested
     * directories behind, then failed). */
    size_t length = strlen(dir);
    if (length > RESULTS_PATH_MAX) {
        snprintf(error_p, error_len, "results directory: a path of %zu bytes (%.40s...); at "
                 "most %d", length, dir, RESULTS_PATH_MAX);
        return KVIO_ERR_CONFIG;
    }
    bool existed = false;
    status = make_dir(dir, force, &existed, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* Refuse now, not after the run, when the directory is not writable. */
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(error_p, error_len, "%s: results directory is not writable: %s", dir,
                 strerror(errno));
        return KVIO_ERR_IO;
    }
    int lock_fd = -1;
    status = lock_dir(dir, &lock_fd, error_p, error_len);
    if (status == KVIO_OK && existed)
        status = remove_earlier(dir, error_p, error_len);
    kvio_results_t *results = status == KVIO_OK ? calloc(1, sizeof(*results)) : NULL;
    if (status == KVIO_OK && (results == NULL || (results->path = strdup(dir)) == NULL))
        status = KVIO_ERR_NOMEM;
    if (status != KVIO_OK) {
        free(results);
        if (lock_fd >= 0)
            close(lock_fd);
        return status;
    }
    results->lock_fd = lock_fd;
    *results_p = results;
    return KVIO_OK;
}

void kvio_results_destroy(kvio_results_t *results)
{
    if (results == NULL)
        return;
    if (results->lock_fd >= 0)
        close(results->lock_fd); /* the lock goes with it */
    free(results->path);
    free(results);
}

const char *kvio_results_path(const kvio_results_t *results)
{
    return results->path;
}

kvio_status_t kvio_json_write_atomic(const char *path, const json_t *value, char *error_p,
                                     size_t error_len)
{
    char *text = json_dumps(value, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    if (text == NULL) {
        snprintf(error_p, error_len, "%s: cannot serialise JSON", path);
        return KVIO_ERR_NOMEM;
    }
    /* The temporary is a fresh name beside the file (O_EXCL | O_NOFOLLOW: a
     * link planted there is never followed), renamed over it. */
    char dir[4096], prefix[512], temporary[4200];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    snprintf(prefix, sizeof(prefix), ".%s", slash != NULL ? slash + 1 : path);
    kvio_status_t status = KVIO_OK;
    int fd = kvio_file_create_new(dir, prefix, 0, 0644, temporary, sizeof(temporary));
    if (fd < 0) {
        status = kvio_status_from_errno(-fd);
        snprintf(error_p, error_len, "%s: cannot create its temporary: %s", path,
                 strerror(-fd));
        goto out;
    }
    size_t length = strlen(text), written = 0;
    while (written < length) {
        ssize_t got = write(fd, text + written, length - written);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            status = kvio_status_from_errno(got < 0 ? errno : ENOSPC);
            snprintf(error_p, error_len, "%s: write failed: %s", path,
                     strerror(got < 0 ? errno : ENOSPC));
            goto close_file;
        }
        written += (size_t)got;
    }
    if (write(fd, "\n", 1) != 1 || fsync(fd) != 0) {
        status = kvio_status_from_errno(errno);
        snprintf(error_p, error_len, "%s: write failed: %s", path, strerror(errno));
        goto close_file;
    }
close_file:
    if (close(fd) != 0 && status == KVIO_OK) {
        status = kvio_status_from_errno(errno);
        snprintf(error_p, error_len, "%s: close failed: %s", path, strerror(errno));
    }
    if (status == KVIO_OK && rename(temporary, path) != 0) {
        status = kvio_status_from_errno(errno);
        snprintf(error_p, error_len, "%s: rename failed: %s", path, strerror(errno));
    }
    if (status != KVIO_OK)
        unlink(temporary);
out:
    free(text);
    return status;
}

kvio_status_t kvio_results_write_json(const kvio_results_t *results, const char *file_name,
                                      const json_t *value, char *error_p, size_t error_len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", results->path, file_name);
    return kvio_json_write_atomic(path, value, error_p, error_len);
}

kvio_status_t kvio_csv_open(const kvio_results_t *results, const char *file_name,
                            const char *header, kvio_csv_t **csv_p)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", results->path, file_name);
    kvio_csv_t *csv = calloc(1, sizeof(*csv));
    if (csv == NULL)
        return KVIO_ERR_NOMEM;
    /* A link planted at the name is refused, never followed. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    csv->file = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (csv->file == NULL) {
        kvio_status_t status = kvio_status_from_errno(errno);
        if (fd >= 0)
            close(fd);
        free(csv);
        return status;
    }
    /* 256 KiB at a time: a run's CSVs reach gigabytes. */
    setvbuf(csv->file, NULL, _IOFBF, 256 * 1024);
    if (header != NULL && fprintf(csv->file, "%s\n", header) < 0)
        csv_failed(csv);
    *csv_p = csv;
    return KVIO_OK;
}

kvio_status_t kvio_csv_row(kvio_csv_t *csv, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int written = vfprintf(csv->file, fmt, args);
    va_end(args);
    if (written < 0 || fputc('\n', csv->file) == EOF) {
        csv_failed(csv);
        return KVIO_ERR_IO;
    }
    return KVIO_OK;
}

kvio_status_t kvio_csv_line(kvio_csv_t *csv, const char *text, size_t length)
{
    /* Unlocked: a row is two calls, made by the hundred thousand. */
    if (fwrite_unlocked(text, 1, length, csv->file) != length ||
        putc_unlocked('\n', csv->file) == EOF) {
        csv_failed(csv);
        return KVIO_ERR_IO;
    }
    return KVIO_OK;
}

kvio_status_t kvio_csv_close(kvio_csv_t *csv)
{
    return kvio_csv_finish(csv, NULL, NULL, 0);
}

kvio_status_t kvio_csv_finish(kvio_csv_t *csv, const char *name, char *error_p,
                              size_t error_len)
{
    if (csv == NULL)
        return KVIO_OK;
    if (!csv->failed && (fflush(csv->file) != 0 || ferror(csv->file)))
        csv_failed(csv);
    if (fclose(csv->file) != 0 && !csv->failed)
        csv_failed(csv);
    int err = csv->err;
    bool failed = csv->failed;
    free(csv);
    if (!failed)
        return KVIO_OK;
    if (name != NULL && error_len > 0)
        snprintf(error_p, error_len, "%s: write failed: %s", name,
                 err != 0 ? strerror(err) : "unknown cause");
    kvio_status_t status = err != 0 ? kvio_status_from_errno(err) : KVIO_ERR_IO;
    return status == KVIO_OK ? KVIO_ERR_IO : status;
}

kvio_status_t kvio_table_create(const char *title, kvio_table_t **table_p)
{
    kvio_table_t *table = calloc(1, sizeof(*table));
    if (table == NULL)
        return KVIO_ERR_NOMEM;
    table->title = strdup(title != NULL ? title : "");
    if (table->title == NULL) {
        free(table);
        return KVIO_ERR_NOMEM;
    }
    *table_p = table;
    return KVIO_OK;
}

void kvio_table_destroy(kvio_table_t *table)
{
    if (table == NULL)
        return;
    for (size_t i = 0; i < table->num_rows; i++) {
        for (char **cell = table->rows[i]; *cell != NULL; cell++)
            free(*cell);
        free(table->rows[i]);
    }
    free(table->rows);
    free(table->title);
    free(table);
}

kvio_status_t kvio_table_add_row(kvio_table_t *table, const char *first, ...)
{
    char **row = calloc(KVIO_TABLE_MAX_COLUMNS + 1, sizeof(char *));
    if (row == NULL)
        return KVIO_ERR_NOMEM;
    va_list args;
    va_start(args, first);
    size_t count = 0;
    for (const char *cell = first; cell != NULL && count < KVIO_TABLE_MAX_COLUMNS;
         cell = va_arg(args, const char *)) {
        row[count] = strdup(cell);
        if (row[count] == NULL)
            break;
        count++;
    }
    va_end(args);
    if (table->num_rows == table->capacity) {
        size_t capacity = table->capacity ? 2 * table->capacity : 16;
        char ***rows = realloc(table->rows, capacity * sizeof(*rows));
        if (rows == NULL) {
            for (size_t i = 0; i < count; i++)
                free(row[i]);
            free(row);
            return KVIO_ERR_NOMEM;
        }
        table->rows = rows;
        table->capacity = capacity;
    }
    table->rows[table->num_rows++] = row;
    return KVIO_OK;
}

void kvio_table_print(const kvio_table_t *table, FILE *out)
{
    size_t widths[KVIO_TABLE_MAX_COLUMNS] = {0};
    for (size_t i = 0; i < table->num_rows; i++) {
        for (size_t j = 0; table->rows[i][j] != NULL; j++) {
            size_t width = strlen(table->rows[i][j]);
            if (width > widths[j])
                widths[j] = width;
        }
    }
    if (table->title[0] != '\0')
        fprintf(out, "%s\n", table->title);
    for (size_t i = 0; i < table->num_rows; i++) {
        for (size_t j = 0; table->rows[i][j] != NULL; j++) {
            /* Numbers align right, words left. */
            const char *cell = table->rows[i][j];
            bool numeric = j > 0 && (isdigit((unsigned char)cell[0]) ||
                                     (cell[0] == '-' && isdigit((unsigned char)cell[1])));
            bool last = table->rows[i][j + 1] == NULL;
            if (numeric)
                fprintf(out, "  %*s", (int)widths[j], cell);
            else if (last)
                fprintf(out, "  %s", cell);
            else
                fprintf(out, "  %-*s", (int)widths[j], cell);
        }
        fputc('\n', out);
    }
}

/* ---------- reading CSV ---------- */

/* Reads the next non-empty line into fields. Returns KVIO_INPROGRESS at the
 * end of the file. */
kvio_status_t kvio_csv_reader_next(kvio_csv_reader_t *csv, char *error_p, size_t error_len)
{
    for (;;) {
        if (fgets(csv->line, sizeof(csv->line), csv->file) == NULL) {
            if (ferror(csv->file)) {
                snprintf(error_p, error_len, "%s:%lu: read error", csv->path,
                         csv->line_number + 1);
                return KVIO_ERR_IO;
            }
            return KVIO_INPROGRESS;
        }
        csv->line_number++;
        size_t length = strlen(csv->line);
        if (length == sizeof(csv->line) - 1 && csv->line[length - 1] != '\n') {
            snprintf(error_p, error_len, "%s:%lu: line longer than %d bytes", csv->path,
                     csv->line_number, KVIO_CSV_LINE_MAX - 1);
            return KVIO_ERR_PARSE;
        }
        if (length != strlen(csv->line)) {
            snprintf(error_p, error_len, "%s:%lu: NUL byte in line", csv->path, csv->line_number);
            return KVIO_ERR_PARSE;
        }
        while (length > 0 && (csv->line[length - 1] == '\n' || csv->line[length - 1] == '\r'))
            csv->line[--length] = '\0';
        if (length == 0 || csv->line[0] == '#')
            continue; /* blank, or a comment */
        csv->num_fields = 0;
        char *cursor = csv->line;
        for (;;) {
            if (csv->num_fields == KVIO_CSV_MAX_COLUMNS) {
                snprintf(error_p, error_len, "%s:%lu: more than %d columns", csv->path,
                         csv->line_number, KVIO_CSV_MAX_COLUMNS);
                return KVIO_ERR_PARSE;
            }
            csv->fields[csv->num_fields++] = cursor;
            char *comma = strchr(cursor, ',');
            if (comma == NULL)
                break;
            *comma = '\0';
            cursor = comma + 1;
        }
        return KVIO_OK;
    }
}

/* Opens path and reads its header. KVIO_ERR_NOT_FOUND when it is absent. */
kvio_status_t kvio_csv_reader_open(kvio_csv_reader_t *csv, const char *path, char *error_p,
                                   size_t error_len)
{
    memset(csv, 0, sizeof(*csv));
    snprintf(csv->path, sizeof(csv->path), "%s", path);
    struct stat info;
    if (stat(path, &info) != 0)
        return KVIO_ERR_NOT_FOUND;
    if (!S_ISREG(info.st_mode)) {
        snprintf(error_p, error_len, "%s: not a regular file", path);
        return KVIO_ERR_INVALID;
    }
    csv->file = fopen(path, "r");
    if (csv->file == NULL) {
        snprintf(error_p, error_len, "%s: %s", path, strerror(errno));
        return KVIO_ERR_IO;
    }
    kvio_status_t status = kvio_csv_reader_next(csv, error_p, error_len);
    if (status == KVIO_INPROGRESS) {
        snprintf(error_p, error_len, "%s: empty file (no header)", path);
        status = KVIO_ERR_PARSE;
    }
    if (status != KVIO_OK) {
        fclose(csv->file);
        csv->file = NULL;
    }
    /* A UTF-8 byte-order mark before the first column name is tolerated. */
    if (status == KVIO_OK && strncmp(csv->fields[0], "\xEF\xBB\xBF", 3) == 0)
        csv->fields[0] += 3;
    return status;
}

void kvio_csv_reader_close(kvio_csv_reader_t *csv)
{
    if (csv->file != NULL)
        fclose(csv->file);
    csv->file = NULL;
}

/* Index of a header column, or -1. */
int kvio_csv_reader_column(const kvio_csv_reader_t *csv, const char *name)
{
    for (size_t i = 0; i < csv->num_fields; i++)
        if (strcmp(csv->fields[i], name) == 0)
            return (int)i;
    return -1;
}

/* The indices of every named header column; KVIO_ERR_PARSE naming the
 * first that is missing. */
kvio_status_t kvio_csv_reader_columns(const kvio_csv_reader_t *csv, const char *const *names,
                                      size_t count, int *columns, char *error_p,
                                      size_t error_len)
{
    for (size_t i = 0; i < count; i++) {
        columns[i] = kvio_csv_reader_column(csv, names[i]);
        if (columns[i] < 0) {
            snprintf(error_p, error_len, "%s: no column '%s' in the header", csv->path,
                     names[i]);
            return KVIO_ERR_PARSE;
        }
    }
    return KVIO_OK;
}
