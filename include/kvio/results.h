/* Results: one directory per run holding summary.json (written to a
 * temporary name and renamed, so a reader never sees half a file), CSV
 * files, and a plain-text table renderer for stdout. */
#ifndef KVIO_RESULTS_H
#define KVIO_RESULTS_H

#include "kvio/format.h"
#include "kvio/stats.h"
#include "kvio/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Version of the summary.json layout; bumped when fields change meaning. */
#define KVIO_SCHEMA_VERSION 1

/* Provenance: how an output came to be (core/provenance.c). argv: the
 * command's arguments from its name on ("run", "chat", "--set", ...), as
 * main passed them; NULL: a library call. overrides: the --set KEY=VALUE
 * given (NULL / 0: none). Borrowed. */
typedef struct kvio_provenance {
    int argc;
    const char *const *argv;
    const char *const *overrides;
    size_t num_overrides;
} kvio_provenance_t;

/* What every output kvio writes opens with: schema_version, kvio_version,
 * command (["kvio", argv...]; [] for a library call), overrides (a URL's
 * password shown as *** in both), start_time (UTC, ms), host (a copy of
 * host; NULL: this machine's, kvio_host_json) and build (kvio_build_json:
 * version, commit, build type, parts). provenance may be NULL. The caller
 * owns the object. */
json_t *kvio_provenance_json(const kvio_provenance_t *provenance, const json_t *host,
                             uint64_t start_ns);

/* head's command as one line ("kvio run 'chat' '--set' 'x=1'"; "" for a
 * library call) into text_p. */
void kvio_provenance_command_line(const json_t *head, char *text_p, size_t text_len);

typedef struct kvio_results kvio_results_t;
typedef struct kvio_csv kvio_csv_t;
typedef struct kvio_table kvio_table_t;

/* Chooses and creates a results directory. With dir NULL the directory is
 * results/<name>-<UTC time with ms>-<pid> under the working directory. An
 * existing directory is refused (KVIO_ERR_EXISTS) unless force; a directory
 * that cannot be created or written is refused before any run starts.
 * The caller destroys the handle. */
kvio_status_t kvio_results_create(const char *dir, const char *name, bool force,
                                  kvio_results_t **results_p, char *error_p, size_t error_len);

void kvio_results_destroy(kvio_results_t *results);

/* The directory's path (borrowed). */
const char *kvio_results_path(const kvio_results_t *results);

/* Writes JSON to dir/file_name atomically: file_name.tmp, fsync, rename. */
kvio_status_t kvio_results_write_json(const kvio_results_t *results, const char *file_name,
                                      const json_t *value, char *error_p, size_t error_len);

/* Same, to any path (used by tests and `kvio compare`). */
kvio_status_t kvio_json_write_atomic(const char *path, const json_t *value, char *error_p,
                                     size_t error_len);

/* Opens dir/file_name for CSV and writes the header (comma-separated
 * column names; NULL: none, a file of lines such as JSONL). Caller closes.
 * A CSV is one thread's at a time: its writes take no lock. */
kvio_status_t kvio_csv_open(const kvio_results_t *results, const char *file_name,
                            const char *header, kvio_csv_t **csv_p);

/* Appends one row formatted with printf-style arguments (no newline). */
kvio_status_t kvio_csv_row(kvio_csv_t *csv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends one row the caller formatted: length bytes of text (no newline).
 * For rows written by the hundred thousand, where printf's parsing shows. */
kvio_status_t kvio_csv_line(kvio_csv_t *csv, const char *text, size_t length);

/* Flushes and closes; returns an error when any write failed. */
kvio_status_t kvio_csv_close(kvio_csv_t *csv);

/* Closes csv as kvio_csv_close does; on a failed write error_p says
 * "NAME: write failed: <the first cause>" (No space left on device). */
kvio_status_t kvio_csv_finish(kvio_csv_t *csv, const char *name, char *error_p,
                              size_t error_len);

/* Reading CSV files: those kvio writes (kvio report, model.from) and a
 * user's measured iterations (kvio fit, cost.table): a header line,
 * comma-separated fields without quoting, blank lines and lines starting
 * with # skipped, lines up to
 * KVIO_CSV_LINE_MAX bytes and KVIO_CSV_MAX_COLUMNS fields. The caller owns
 * the reader (not opaque: fields and line_number are read directly, and it
 * holds a line, so it is large). */
#define KVIO_CSV_LINE_MAX 65536
#define KVIO_CSV_MAX_COLUMNS 64
typedef struct kvio_csv_reader {
    FILE *file;
    char path[4128];
    unsigned long line_number;
    char line[KVIO_CSV_LINE_MAX];
    size_t num_fields;
    char *fields[KVIO_CSV_MAX_COLUMNS]; /* the current line's, in line */
} kvio_csv_reader_t;

/* Opens path and reads its header into fields. KVIO_ERR_NOT_FOUND (error_p
 * untouched) when it does not exist; other errors name the path. */
kvio_status_t kvio_csv_reader_open(kvio_csv_reader_t *csv, const char *path, char *error_p,
                                   size_t error_len);

/* Reads the next line (not blank, not a comment) into fields;
 * KVIO_INPROGRESS at the end. */
kvio_status_t kvio_csv_reader_next(kvio_csv_reader_t *csv, char *error_p, size_t error_len);

void kvio_csv_reader_close(kvio_csv_reader_t *csv);

/* The index of a header column, or -1 (valid right after open). */
int kvio_csv_reader_column(const kvio_csv_reader_t *csv, const char *name);

/* The indices of every named header column; KVIO_ERR_PARSE naming the
 * first that is missing. */
kvio_status_t kvio_csv_reader_columns(const kvio_csv_reader_t *csv, const char *const *names,
                                      size_t count, int *columns, char *error_p,
                                      size_t error_len);

/* A histogram's summary as JSON {count, mean, p50, p90, p99, max}, every
 * value multiplied by scale (1e-6: ns to ms). The caller owns the result. */
json_t *kvio_hist_json(const kvio_hist_t *hist, double scale);

/* summary.json's record of the run's start, which every CSV and trace event
 * counts from: start gets "t0" (UTC, milliseconds), "t0_unix_ns" and
 * "ranks" (stolen: an array of kvio_start_rank_json objects). */
void kvio_start_json_set(json_t *start, int64_t t0_wall_ns, json_t *ranks);
/* One rank of it: its world rank, role and set-up time before t0. */
json_t *kvio_start_rank_json(int rank, const char *role, double setup_s);

/* A table with a title, left-aligned first column and right-aligned rest. */
kvio_status_t kvio_table_create(const char *title, kvio_table_t **table_p);
void kvio_table_destroy(kvio_table_t *table);

/* Adds a row of cells (NULL-terminated list of strings, copied). */
kvio_status_t kvio_table_add_row(kvio_table_t *table, const char *first, ...);

/* Prints the table with aligned columns. */
void kvio_table_print(const kvio_table_t *table, FILE *out);

#endif
