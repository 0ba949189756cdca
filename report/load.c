/* Reading what a report draws: requests.csv, iterations.csv and
 * updates.csv of a results directory (its summary.json: summary.c),
 * compare.json of a `kvio compare` directory, capacity.json, and `kvio
 * cachesim --json` and `kvio prefix --format json` output. Every input is
 * bounded and checked; an error names the file and the line or key. */
#include "report/report_int.h"

#include "kvio/config.h"
#include "kvio/format.h"
#include "kvio/results.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const report_update_stage_names[UPDATE_STAGES] = {
    "ready",    "publish_start", "publish_end", "xfer_start",
    "xfer_end", "notified",      "verified",    "activated",
};

/* ---------- CSV ---------- */

/* Opens dir/name when it exists: KVIO_INPROGRESS when it does not (the
 * file is optional), KVIO_OK with csv open, or the error. */
static kvio_status_t csv_open_in(kvio_csv_reader_t *csv, const char *dir, const char *name,
                                 char *error_p, size_t error_len)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    kvio_status_t status = kvio_csv_reader_open(csv, path, error_p, error_len);
    return status == KVIO_ERR_NOT_FOUND ? KVIO_INPROGRESS : status;
}

/* Parses field index of the current row as a finite number. */
static kvio_status_t csv_number(const kvio_csv_reader_t *csv, int index, const char *name,
                                double *value_p, char *error_p, size_t error_len)
{
    if (index < 0 || (size_t)index >= csv->num_fields) {
        snprintf(error_p, error_len, "%s:%lu: %zu fields, no %s", csv->path, csv->line_number,
                 csv->num_fields, name);
        return KVIO_ERR_PARSE;
    }
    const char *text = csv->fields[index];
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    while (end != NULL && (*end == ' ' || *end == '\t'))
        end++;
    bool digits = false;
    for (const char *c = text; *c != '\0'; c++)
        digits = digits || (*c >= '0' && *c <= '9');
    if (end == text || *end != '\0' || !digits || errno == ERANGE || !isfinite(value) ||
        fabs(value) > REPORT_VALUE_LIMIT) {
        char shown[40];
        report_label_copy(shown, sizeof(shown), text);
        snprintf(error_p, error_len, "%s:%lu: %s: '%s' is not a number in range", csv->path,
                 csv->line_number, name, shown);
        return KVIO_ERR_PARSE;
    }
    *value_p = value;
    return KVIO_OK;
}

/* ---------- timeline ---------- */

void report_timeline_init(timeline_t *timeline)
{
    memset(timeline, 0, sizeof(*timeline));
    timeline->width_s = 1e-3;
}

/* The bin of time_s, widening (merging pairs of bins) as needed. */
static timeline_bin_t *timeline_bin(timeline_t *timeline, double time_s)
{
    if (!(time_s >= 0))
        time_s = 0;
    while (time_s >= timeline->width_s * KVIO_REPORT_MAX_POINTS) {
        for (size_t i = 0; i < KVIO_REPORT_MAX_POINTS / 2; i++) {
            timeline_bin_t *a = &timeline->bins[2 * i], *b = &timeline->bins[2 * i + 1];
            timeline_bin_t merged = {
                .kv_weighted = a->kv_weighted + b->kv_weighted,
                .weight = a->weight + b->weight,
                .kv_sum = a->kv_sum + b->kv_sum,
                .batch_sum = a->batch_sum + b->batch_sum,
                .iterations = a->iterations + b->iterations,
                .preempted = a->preempted + b->preempted,
                .ttft_sum_s = a->ttft_sum_s + b->ttft_sum_s,
                .requests = a->requests + b->requests,
                .cached_tokens = a->cached_tokens + b->cached_tokens,
                .input_tokens = a->input_tokens + b->input_tokens,
            };
            timeline->bins[i] = merged;
        }
        memset(timeline->bins + KVIO_REPORT_MAX_POINTS / 2, 0,
               sizeof(timeline_bin_t) * (KVIO_REPORT_MAX_POINTS / 2));
        timeline->used = (timeline->used + 1) / 2;
        timeline->width_s *= 2;
    }
    size_t index = (size_t)(time_s / timeline->width_s);
    if (index >= KVIO_REPORT_MAX_POINTS)
        index = KVIO_REPORT_MAX_POINTS - 1;
    if (index + 1 > timeline->used)
        timeline->used = index + 1;
    return &timeline->bins[index];
}

void report_timeline_add(timeline_t *timeline, double time_s, double duration_s, double kv_usage,
                         double batch, double preempted)
{
    timeline_bin_t *bin = timeline_bin(timeline, time_s);
    bin->kv_weighted += kv_usage * duration_s;
    bin->weight += duration_s;
    bin->kv_sum += kv_usage;
    bin->batch_sum += batch;
    bin->iterations++;
    bin->preempted += preempted > 0 ? (uint64_t)preempted : 0;
}

void report_timeline_add_request(timeline_t *timeline, double arrival_s, double ttft_s,
                                 double cached_tokens, double input_tokens)
{
    timeline_bin_t *bin = timeline_bin(timeline, arrival_s);
    bin->ttft_sum_s += ttft_s;
    bin->requests++;
    bin->cached_tokens += cached_tokens;
    bin->input_tokens += input_tokens;
}

/* ---------- one results directory ---------- */

/* Seconds to ns for a histogram, saturating: a CSV value may be up to
 * REPORT_VALUE_LIMIT s (1e24 ns), past what a uint64_t holds. */
static uint64_t seconds_to_ns(double seconds)
{
    double ns = seconds * 1e9 + 0.5;
    if (!(ns > 0))
        return 0;
    return ns >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)ns;
}

/* One request's TTFT and E2EL against the control (ms). */
static kvio_status_t keep_delta(report_run_t *run, const double deltas[2])
{
    if (run->num_deltas == run->deltas_capacity) {
        size_t grown = run->deltas_capacity == 0 ? 1024 : 2 * run->deltas_capacity;
        double *ttft = realloc(run->ttft_deltas, grown * sizeof(double));
        if (ttft == NULL)
            return KVIO_ERR_NOMEM;
        run->ttft_deltas = ttft;
        double *e2el = realloc(run->e2el_deltas, grown * sizeof(double));
        if (e2el == NULL)
            return KVIO_ERR_NOMEM;
        run->e2el_deltas = e2el;
        run->deltas_capacity = grown;
    }
    run->ttft_deltas[run->num_deltas] = deltas[0];
    run->e2el_deltas[run->num_deltas++] = deltas[1];
    return KVIO_OK;
}

/* requests.csv → the latency histograms (every seed) and, for the first
 * seed, the requests binned by arrival and their differences from the
 * control. */
static kvio_status_t load_requests(const char *dir, report_run_t *run, bool first_seed,
                                   char *error_p, size_t error_len)
{
    kvio_csv_reader_t csv;
    kvio_status_t status = csv_open_in(&csv, dir, "requests.csv", error_p, error_len);
    if (status != KVIO_OK)
        return status == KVIO_INPROGRESS ? KVIO_OK : status;
    const char *names[] = {"arrival_s", "first_token_s", "finish_s", "output_tokens"};
    int columns[4];
    status = kvio_csv_reader_columns(&csv, names, 4, columns, error_p, error_len);
    if (status != KVIO_OK) {
        kvio_csv_reader_close(&csv);
        return status;
    }
    int measured_column = kvio_csv_reader_column(&csv, "measured");
    int ttft_delta_column = first_seed ? kvio_csv_reader_column(&csv, "ttft_delta_ms") : -1;
    int e2el_delta_column = first_seed ? kvio_csv_reader_column(&csv, "e2el_delta_ms") : -1;
    int cached_column = kvio_csv_reader_column(&csv, "cached_tokens");
    int input_column = kvio_csv_reader_column(&csv, "input_tokens");
    if (first_seed && run->arrivals == NULL && cached_column >= 0 && input_column >= 0) {
        run->arrivals = malloc(sizeof(*run->arrivals));
        if (run->arrivals == NULL) {
            kvio_csv_reader_close(&csv);
            return KVIO_ERR_NOMEM;
        }
        report_timeline_init(run->arrivals);
    }
    while ((status = kvio_csv_reader_next(&csv, error_p, error_len)) == KVIO_OK) {
        double value[4], measured = 1;
        for (size_t i = 0; i < 4 && status == KVIO_OK; i++)
            status = csv_number(&csv, columns[i], names[i], &value[i], error_p, error_len);
        if (status == KVIO_OK && measured_column >= 0)
            status = csv_number(&csv, measured_column, "measured", &measured, error_p, error_len);
        if (status != KVIO_OK)
            break;
        if (measured == 0)
            continue;
        double arrival = value[0], first = value[1], finish = value[2], outputs = value[3];
        if (first < arrival || finish < first || arrival < 0 || outputs < 0) {
            snprintf(error_p, error_len,
                     "%s:%lu: times out of order (arrival_s %.6g, first_token_s %.6g, "
                     "finish_s %.6g)",
                     csv.path, csv.line_number, arrival, first, finish);
            status = KVIO_ERR_PARSE;
            break;
        }
        kvio_hist_record(run->ttft, seconds_to_ns(first - arrival));
        double cached = 0, input = 0;
        if (first_seed && run->arrivals != NULL &&
            csv_number(&csv, cached_column, "cached_tokens", &cached, NULL, 0) == KVIO_OK &&
            csv_number(&csv, input_column, "input_tokens", &input, NULL, 0) == KVIO_OK)
            report_timeline_add_request(run->arrivals, arrival, first - arrival, cached, input);
        kvio_hist_record(run->e2el, seconds_to_ns(finish - arrival));
        double deltas[2];
        if (ttft_delta_column >= 0 && e2el_delta_column >= 0 &&
            csv_number(&csv, ttft_delta_column, "ttft_delta_ms", &deltas[0], NULL, 0) == KVIO_OK &&
            csv_number(&csv, e2el_delta_column, "e2el_delta_ms", &deltas[1], NULL, 0) == KVIO_OK &&
            (status = keep_delta(run, deltas)) != KVIO_OK)
            break;
        /* TPOT as vLLM's benchmark defines it: decode time over the tokens
         * after the first, for requests with more than one output token. */
        if (outputs > 1)
            kvio_hist_record(run->tpot, seconds_to_ns((finish - first) / (outputs - 1)));
        run->has_requests = true;
    }
    kvio_csv_reader_close(&csv);
    return status == KVIO_INPROGRESS ? KVIO_OK : status;
}

/* iterations.csv → the binned timeline. */
static kvio_status_t load_iterations(const char *dir, report_run_t *run, char *error_p,
                                     size_t error_len)
{
    kvio_csv_reader_t csv;
    kvio_status_t status = csv_open_in(&csv, dir, "iterations.csv", error_p, error_len);
    if (status != KVIO_OK)
        return status == KVIO_INPROGRESS ? KVIO_OK : status;
    const char *names[] = {"time_s", "duration_ms", "batch_size", "kv_usage", "preempted"};
    int columns[5];
    status = kvio_csv_reader_columns(&csv, names, 5, columns, error_p, error_len);
    if (status != KVIO_OK) {
        kvio_csv_reader_close(&csv);
        return status;
    }
    run->timeline = malloc(sizeof(*run->timeline));
    if (run->timeline == NULL) {
        kvio_csv_reader_close(&csv);
        return KVIO_ERR_NOMEM;
    }
    report_timeline_init(run->timeline);
    while ((status = kvio_csv_reader_next(&csv, error_p, error_len)) == KVIO_OK) {
        double value[5];
        for (size_t i = 0; i < 5 && status == KVIO_OK; i++)
            status = csv_number(&csv, columns[i], names[i], &value[i], error_p, error_len);
        if (status != KVIO_OK)
            break;
        if (value[0] < 0 || value[0] > 1e9 || value[1] < 0 || value[3] < 0 || value[3] > 1 ||
            value[2] < 0 || value[4] < 0) {
            snprintf(error_p, error_len,
                     "%s:%lu: value out of range (time_s 0..1e9, kv_usage 0..1, counts >= 0)",
                     csv.path, csv.line_number);
            status = KVIO_ERR_PARSE;
            break;
        }
        report_timeline_add(run->timeline, value[0], value[1] / 1e3, value[3], value[2],
                            value[4]);
    }
    kvio_csv_reader_close(&csv);
    return status == KVIO_INPROGRESS ? KVIO_OK : status;
}

/* Finds a stage column as t_<stage> (seconds), t_<stage>_s, t_<stage>_ms (what
 * kvio writes) or t_<stage>_ns. */
static int stage_column(const kvio_csv_reader_t *csv, const char *stage, double *scale_p)
{
    char name[64];
    snprintf(name, sizeof(name), "t_%s", stage);
    int column = kvio_csv_reader_column(csv, name);
    *scale_p = 1;
    if (column >= 0)
        return column;
    snprintf(name, sizeof(name), "t_%s_s", stage);
    column = kvio_csv_reader_column(csv, name);
    if (column >= 0)
        return column;
    snprintf(name, sizeof(name), "t_%s_ms", stage);
    column = kvio_csv_reader_column(csv, name);
    *scale_p = 1e-3;
    if (column >= 0)
        return column;
    snprintf(name, sizeof(name), "t_%s_ns", stage);
    *scale_p = 1e-9;
    return kvio_csv_reader_column(csv, name);
}

/* updates.csv → one row per (update, serve rank). */
static kvio_status_t load_updates(const char *dir, report_run_t *run, char *error_p,
                                  size_t error_len)
{
    kvio_csv_reader_t csv;
    kvio_status_t status = csv_open_in(&csv, dir, "updates.csv", error_p, error_len);
    if (status != KVIO_OK)
        return status == KVIO_INPROGRESS ? KVIO_OK : status;
    int columns[UPDATE_STAGES];
    double scales[UPDATE_STAGES];
    for (size_t i = 0; i < UPDATE_STAGES; i++)
        columns[i] = stage_column(&csv, report_update_stage_names[i], &scales[i]);
    int version_column = kvio_csv_reader_column(&csv, "version");
    int rank_column = kvio_csv_reader_column(&csv, "rank");
    int bytes_column = kvio_csv_reader_column(&csv, "bytes");
    int added_column = kvio_csv_reader_column(&csv, "added_e2el_ms");
    static const char *const stall_names[] = {"stall_apply_ms", "stall_drain_ms",
                                              "stall_lend_ms", "stall_release_ms"};
    int stall_columns[4];
    for (size_t i = 0; i < 4; i++)
        stall_columns[i] = kvio_csv_reader_column(&csv, stall_names[i]);
    const char *missing = version_column < 0 ? "version"
                          : columns[0] < 0   ? "t_ready"
                          : columns[UPDATE_ACTIVATED] < 0 ? "t_activated"
                                             : NULL;
    if (missing != NULL) {
        snprintf(error_p, error_len, "%s: no column '%s' in the header", csv.path, missing);
        kvio_csv_reader_close(&csv);
        return KVIO_ERR_PARSE;
    }
    size_t capacity = 0;
    while ((status = kvio_csv_reader_next(&csv, error_p, error_len)) == KVIO_OK) {
        if (run->num_updates == KVIO_REPORT_MAX_UPDATES) {
            run->updates_truncated = true;
            break;
        }
        update_row_t row;
        memset(&row, 0, sizeof(row));
        status = csv_number(&csv, version_column, "version", &row.version, error_p, error_len);
        if (status == KVIO_OK && rank_column >= 0)
            status = csv_number(&csv, rank_column, "rank", &row.rank, error_p, error_len);
        if (status == KVIO_OK && bytes_column >= 0)
            status = csv_number(&csv, bytes_column, "bytes", &row.bytes, error_p, error_len);
        for (size_t i = 0; i < UPDATE_STAGES && status == KVIO_OK; i++) {
            if (columns[i] < 0)
                continue;
            /* An empty stage field means the transport has no such stage. */
            if ((size_t)columns[i] < csv.num_fields && csv.fields[columns[i]][0] == '\0' &&
                i != 0 && i != UPDATE_ACTIVATED)
                continue;
            status = csv_number(&csv, columns[i], report_update_stage_names[i], &row.t[i],
                                error_p, error_len);
            row.t[i] *= scales[i];
            row.has[i] = true;
        }
        if (status == KVIO_OK && added_column >= 0) {
            row.has_cost = true;
            status = csv_number(&csv, added_column, "added_e2el_ms", &row.added_e2el_ms,
                                error_p, error_len);
        }
        for (size_t i = 0; i < 4 && status == KVIO_OK; i++) {
            double stall = 0;
            if (stall_columns[i] >= 0)
                status = csv_number(&csv, stall_columns[i], stall_names[i], &stall, error_p,
                                    error_len);
            row.stall_ms += stall;
        }
        if (status != KVIO_OK)
            break;
        if (row.rank < 0 || row.rank >= REPORT_MAX_RANKS || row.t[0] < 0 ||
            row.t[UPDATE_ACTIVATED] < row.t[0]) {
            snprintf(error_p, error_len,
                     "%s:%lu: rank out of range (0..%d) or t_activated before t_ready", csv.path,
                     csv.line_number, REPORT_MAX_RANKS - 1);
            status = KVIO_ERR_PARSE;
            break;
        }
        if (run->num_updates == capacity) {
            size_t grown = capacity == 0 ? 64 : capacity * 2;
            update_row_t *rows = realloc(run->updates, grown * sizeof(*rows));
            if (rows == NULL) {
                status = KVIO_ERR_NOMEM;
                break;
            }
            run->updates = rows;
            capacity = grown;
        }
        run->updates[run->num_updates++] = row;
    }
    kvio_csv_reader_close(&csv);
    if (status == KVIO_OK || status == KVIO_INPROGRESS) {
        if (run->updates == NULL) /* header only: an empty but present table */
            run->updates = calloc(1, sizeof(*run->updates));
        return run->updates != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    }
    return status;
}

void report_run_free(report_run_t *run)
{
    if (run == NULL)
        return;
    for (size_t t = 0; t < run->num_tiers; t++)
        report_tier_traffic_free(&run->tiers[t]);
    kvio_hist_destroy(run->ttft);
    kvio_hist_destroy(run->tpot);
    kvio_hist_destroy(run->e2el);
    free(run->timeline);
    free(run->arrivals);
    free(run->updates);
    free(run->ttft_deltas);
    free(run->e2el_deltas);
    free(run);
}

kvio_status_t report_run_load(const char *label, const char *const *dirs, size_t num_dirs,
                              report_run_t **run_p, char *error_p, size_t error_len)
{
    if (num_dirs == 0 || num_dirs > KVIO_REPORT_MAX_SEEDS) {
        snprintf(error_p, error_len, "%s: %zu result directories (1..%d per run)", label,
                 num_dirs, KVIO_REPORT_MAX_SEEDS);
        return KVIO_ERR_INVALID;
    }
    report_run_t *run = calloc(1, sizeof(*run));
    if (run == NULL)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = kvio_hist_create(&run->ttft);
    if (status == KVIO_OK)
        status = kvio_hist_create(&run->tpot);
    if (status == KVIO_OK)
        status = kvio_hist_create(&run->e2el);
    if (status != KVIO_OK)
        goto fail;
    report_label_copy(run->label, sizeof(run->label), label);
    snprintf(run->dir, sizeof(run->dir), "%s", dirs[0]);
    run->complete = true;
    for (size_t i = 0; i < num_dirs; i++) {
        struct stat info;
        if (stat(dirs[i], &info) != 0 || !S_ISDIR(info.st_mode)) {
            snprintf(error_p, error_len, "%s: %s", dirs[i],
                     stat(dirs[i], &info) != 0 ? strerror(errno) : "not a directory");
            status = KVIO_ERR_NOT_FOUND;
            goto fail;
        }
        status = report_summary_metrics(dirs[i], &run->seeds[i], run, i == 0, error_p,
                                        error_len);
        if (status == KVIO_OK)
            status = load_requests(dirs[i], run, i == 0, error_p, error_len);
        if (status == KVIO_OK && i == 0)
            status = load_iterations(dirs[i], run, error_p, error_len);
        if (status == KVIO_OK && i == 0)
            status = load_updates(dirs[i], run, error_p, error_len);
        if (status != KVIO_OK)
            goto fail;
        run->num_seeds++;
    }
    *run_p = run;
    return KVIO_OK;
fail:
    report_run_free(run);
    return status;
}

/* ---------- compare output ---------- */

kvio_status_t report_compare_load(kvio_report_t *report, const char *dir, char *error_p,
                                  size_t error_len)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/compare.json", dir);
    json_t *compare = NULL;
    kvio_status_t status = report_json_load(path, &compare, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    size_t first_new = report->num_runs;
    const json_t *variants = json_object_get(compare, "variants");
    double repeat = 1;
    status = report_json_number(compare, "repeat", "", path, false, &repeat, error_p, error_len);
    if (status == KVIO_OK && (!json_is_array(variants) || json_array_size(variants) == 0)) {
        snprintf(error_p, error_len, "%s: variants is not a non-empty array", path);
        status = KVIO_ERR_PARSE;
    }
    size_t index;
    const json_t *variant;
    char (*dirs)[REPORT_PATH_MAX] = NULL;
    const char **dir_list = NULL;
    if (status == KVIO_OK) {
        dirs = calloc(KVIO_REPORT_MAX_SEEDS, sizeof(*dirs));
        dir_list = calloc(KVIO_REPORT_MAX_SEEDS, sizeof(*dir_list));
        if (dirs == NULL || dir_list == NULL)
            status = KVIO_ERR_NOMEM;
    }
    json_array_foreach(variants, index, variant)
    {
        if (status != KVIO_OK)
            break;
        const char *name = json_string_value(json_object_get(variant, "name"));
        const json_t *runs = json_object_get(variant, "runs");
        if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL ||
            strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            snprintf(error_p, error_len, "%s: variants[%zu].name is missing or not a plain name",
                     path, index);
            status = KVIO_ERR_PARSE;
            break;
        }
        if (!json_is_array(runs) || json_array_size(runs) == 0 ||
            json_array_size(runs) > KVIO_REPORT_MAX_SEEDS) {
            snprintf(error_p, error_len, "%s: variants[%zu].runs is not an array of 1..%d runs",
                     path, index, KVIO_REPORT_MAX_SEEDS);
            status = KVIO_ERR_PARSE;
            break;
        }
        if (report->num_runs == KVIO_REPORT_MAX_RUNS) {
            snprintf(error_p, error_len, "%s: more than %d runs in one report", path,
                     KVIO_REPORT_MAX_RUNS);
            status = KVIO_ERR_INVALID;
            break;
        }
        size_t num_dirs = json_array_size(runs);
        for (size_t r = 0; r < num_dirs && status == KVIO_OK; r++) {
            /* The layout `kvio compare` writes: DIR/<variant>/ or, with
             * --repeat, DIR/<variant>/seed-<seed>/. */
            const json_t *seed = json_object_get(json_array_get(runs, r), "seed");
            if (repeat > 1 && !json_is_integer(seed)) {
                snprintf(error_p, error_len, "%s: variants[%zu].runs[%zu].seed is not an integer",
                         path, index, r);
                status = KVIO_ERR_PARSE;
            } else if (repeat > 1) {
                snprintf(dirs[r], REPORT_PATH_MAX, "%.1000s/%.500s/seed-%lld", dir, name,
                         (long long)json_integer_value(seed));
            } else {
                snprintf(dirs[r], REPORT_PATH_MAX, "%.1000s/%.500s", dir, name);
            }
            dir_list[r] = dirs[r];
        }
        report_run_t *run = NULL;
        if (status == KVIO_OK)
            status = report_run_load(name, dir_list, num_dirs, &run, error_p, error_len);
        if (status == KVIO_OK)
            report->runs[report->num_runs++] = run;
    }
    if (status != KVIO_OK) {
        while (report->num_runs > first_new)
            report_run_free(report->runs[--report->num_runs]);
    }
    free(dirs);
    free(dir_list);
    json_decref(compare);
    return status;
}

/* ---------- kvio prefix ---------- */

/* Turns a prefix result may hold (its arrays are per turn). */
#define PREFIX_MAX_TURNS 1000000

void report_prefix_free(report_prefix_t *prefix)
{
    if (prefix == NULL)
        return;
    free(prefix->clusters);
    free(prefix->prompt);
    free(prefix->reused);
    free(prefix);
}

/* The example text of cluster index: the first break in it that carries
 * text. */
static void prefix_example(const json_t *turns, size_t index, char *out, size_t size)
{
    size_t t;
    const json_t *turn;
    out[0] = '\0';
    json_array_foreach(turns, t, turn) {
        size_t b;
        const json_t *found;
        json_array_foreach(json_object_get(turn, "breaks"), b, found) {
            const json_t *cluster = json_object_get(found, "cluster");
            const char *after = json_string_value(json_object_get(found, "after"));
            const char *previous = json_string_value(json_object_get(found, "previous"));
            if (json_is_integer(cluster) && (size_t)json_integer_value(cluster) == index &&
                after != NULL && previous != NULL) {
                char now[32], then[32];
                kvio_format_one_line(after, now, sizeof(now));
                kvio_format_one_line(previous, then, sizeof(then));
                snprintf(out, size, "`%s` where it had `%s`", now, then);
                return;
            }
        }
    }
}

kvio_status_t report_prefix_load(const char *path, const json_t *json,
                                 report_prefix_t **prefix_p, char *error_p, size_t error_len)
{
    const json_t *clusters = json_object_get(json, "clusters");
    const json_t *turns = json_object_get(json, "turns");
    if (!json_is_array(clusters) || !json_is_array(turns) || json_array_size(turns) == 0 ||
        json_array_size(turns) > PREFIX_MAX_TURNS ||
        json_array_size(clusters) > json_array_size(turns)) {
        snprintf(error_p, error_len,
                 "%s: not a `kvio prefix --format json` result (clusters and turns)", path);
        return KVIO_ERR_PARSE;
    }
    report_prefix_t *prefix = calloc(1, sizeof(*prefix));
    size_t num_turns = json_array_size(turns), num_clusters = json_array_size(clusters);
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (prefix == NULL)
        return status;
    prefix->clusters = calloc(num_clusters ? num_clusters : 1, sizeof(*prefix->clusters));
    prefix->prompt = calloc(num_turns, sizeof(double));
    prefix->reused = calloc(num_turns, sizeof(double));
    if (prefix->clusters == NULL || prefix->prompt == NULL || prefix->reused == NULL)
        goto out;
    snprintf(prefix->path, sizeof(prefix->path), "%s", path);
    const char *base = strrchr(path, '/');
    report_label_copy(prefix->label, sizeof(prefix->label), base != NULL ? base + 1 : path);
    static const char *const totals[] = {"prompt_tokens", "cached_tokens",
                                         "cached_tokens_without_breaks", "turns_with_breaks"};
    double *slots[] = {&prefix->prompt_tokens, &prefix->cached_tokens,
                       &prefix->cached_without_breaks, &prefix->turns_with_breaks};
    status = KVIO_OK;
    for (size_t i = 0; i < 4 && status == KVIO_OK; i++)
        status = report_json_number(json, totals[i], "", path, true, slots[i], error_p, error_len);
    double sessions = 0;
    if (status == KVIO_OK)
        status = report_json_number(json, "sessions", "", path, true, &sessions, error_p, error_len);
    prefix->later_turns = (double)num_turns - sessions;
    for (size_t t = 0; t < num_turns && status == KVIO_OK; t++) {
        char where[48];
        snprintf(where, sizeof(where), "turns[%zu].", t);
        const json_t *turn = json_array_get(turns, t);
        status = report_json_number(turn, "prompt_tokens", where, path, true, &prefix->prompt[t],
                             error_p, error_len);
        if (status == KVIO_OK)
            status = report_json_number(turn, "reusable_tokens", where, path, true, &prefix->reused[t],
                                 error_p, error_len);
    }
    prefix->num_turns = num_turns;
    for (size_t c = 0; c < num_clusters && status == KVIO_OK; c++) {
        char where[48];
        snprintf(where, sizeof(where), "clusters[%zu].", c);
        const json_t *cluster = json_array_get(clusters, c);
        prefix_cluster_t *out = &prefix->clusters[c];
        double message = 0, first = 0, last = 0;
        const char *label = json_string_value(json_object_get(cluster, "label"));
        status = label != NULL ? KVIO_OK : KVIO_ERR_PARSE;
        if (status != KVIO_OK)
            snprintf(error_p, error_len, "%s: %slabel is missing", path, where);
        if (status == KVIO_OK)
            status = report_json_number(cluster, "message", where, path, true, &message, error_p,
                                 error_len);
        if (status == KVIO_OK)
            status = report_json_number(cluster, "first_token", where, path, true, &first, error_p,
                                 error_len);
        if (status == KVIO_OK)
            status = report_json_number(cluster, "last_token", where, path, true, &last, error_p,
                                 error_len);
        if (status == KVIO_OK)
            status = report_json_number(cluster, "turns", where, path, true, &out->turns, error_p,
                                 error_len);
        if (status == KVIO_OK)
            status = report_json_number(cluster, "cached_tokens_without", where, path, true,
                                 &out->cached_without, error_p, error_len);
        if (status != KVIO_OK)
            break;
        char place[REPORT_LABEL_MAX];
        if (first == last)
            snprintf(place, sizeof(place), "%.40s (message %.0f), token %.0f", label, message, first);
        else
            snprintf(place, sizeof(place), "%.40s (message %.0f), tokens %.0f-%.0f", label,
                     message, first, last);
        report_label_copy(out->place, sizeof(out->place), place);
        prefix_example(turns, c, out->example, sizeof(out->example));
        prefix->num_clusters++;
    }
out:
    if (status != KVIO_OK) {
        if (status == KVIO_ERR_NOMEM)
            snprintf(error_p, error_len, "%s: out of memory", path);
        report_prefix_free(prefix);
        return status;
    }
    *prefix_p = prefix;
    return KVIO_OK;
}

/* ---------- cachesim ---------- */

void report_cachesim_free(report_cachesim_t *cachesim)
{
    if (cachesim == NULL)
        return;
    free(cachesim->points);
    free(cachesim);
}

kvio_status_t report_cachesim_load(const char *path, report_cachesim_t **cachesim_p,
                                   char *error_p, size_t error_len)
{
    json_t *json = NULL;
    kvio_status_t status = report_json_load(path, &json, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    report_cachesim_t *cachesim = calloc(1, sizeof(*cachesim));
    const json_t *results = json_object_get(json, "results");
    if (cachesim == NULL) {
        status = KVIO_ERR_NOMEM;
        goto out;
    }
    /* Another kvio result given as a file: its directory is what reads it
     * (compare.json was "not a kvio cachesim --json result"). */
    const char *kind = json_object_get(json, "variants") != NULL ? "kvio compare's compare.json"
                       : json_object_get(json, "complete") != NULL ? "a run's summary.json"
                                                                   : NULL;
    if (kind != NULL) {
        snprintf(error_p, error_len, "%s: %s; give kvio report its directory", path, kind);
        status = KVIO_ERR_PARSE;
        goto out;
    }
    if (!json_is_array(results) || json_array_size(results) == 0 ||
        json_array_size(results) > 10000) {
        snprintf(error_p, error_len,
                 "%s: not a `kvio cachesim --json` result (results is not an array of 1..10000)",
                 path);
        status = KVIO_ERR_PARSE;
        goto out;
    }
    snprintf(cachesim->path, sizeof(cachesim->path), "%s", path);
    const char *base = strrchr(path, '/');
    report_label_copy(cachesim->label, sizeof(cachesim->label), base != NULL ? base + 1 : path);
    status = report_json_number(json_object_get(json, "config"), "block_tokens", "config.", path, false,
                         &cachesim->block_tokens, error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    cachesim->points = calloc(json_array_size(results), sizeof(*cachesim->points));
    if (cachesim->points == NULL) {
        status = KVIO_ERR_NOMEM;
        goto out;
    }
    size_t index;
    const json_t *result;
    json_array_foreach(results, index, result)
    {
        cachesim_point_t *point = &cachesim->points[cachesim->num_points];
        char where[48];
        snprintf(where, sizeof(where), "results[%zu].", index);
        const char *eviction = json_string_value(json_object_get(result, "eviction"));
        const json_t *capacity = json_object_get(result, "capacity_blocks");
        if (!json_is_object(result) || eviction == NULL) {
            snprintf(error_p, error_len, "%s: %seviction is missing", path, where);
            status = KVIO_ERR_PARSE;
            goto out;
        }
        report_label_copy(point->eviction, sizeof(point->eviction), eviction);
        if (json_is_string(capacity) && strcmp(json_string_value(capacity), "unlimited") == 0) {
            point->capacity_blocks = -1;
        } else {
            status = report_json_number(result, "capacity_blocks", where, path, true,
                                 &point->capacity_blocks, error_p, error_len);
            if (status == KVIO_OK && point->capacity_blocks < 1) {
                snprintf(error_p, error_len, "%s: %scapacity_blocks is below 1", path, where);
                status = KVIO_ERR_PARSE;
            }
        }
        if (status == KVIO_OK)
            status = report_json_number(result, "token_hit_rate", where, path, true,
                                 &point->token_hit_rate, error_p, error_len);
        if (status == KVIO_OK)
            status = report_json_number(result, "block_hit_rate", where, path, false,
                                 &point->block_hit_rate, error_p, error_len);
        if (status == KVIO_OK && (point->token_hit_rate < 0 || point->token_hit_rate > 1 ||
                                  point->block_hit_rate < 0 || point->block_hit_rate > 1)) {
            snprintf(error_p, error_len, "%s: %shit rate outside 0..1", path, where);
            status = KVIO_ERR_PARSE;
        }
        if (status != KVIO_OK)
            goto out;
        cachesim->num_points++;
    }
out:
    json_decref(json);
    if (status != KVIO_OK) {
        report_cachesim_free(cachesim);
        return status;
    }
    *cachesim_p = cachesim;
    return KVIO_OK;
}

/* ---------- kvio capacity ---------- */

void report_capacity_free(report_capacity_t *capacity)
{
    if (capacity == NULL)
        return;
    free(capacity->load);
    free(capacity->attainment);
    free(capacity);
}

/* One search's object (capacity.json itself, or a variant of it). */
static kvio_status_t capacity_one(const json_t *search, const char *where, const char *path,
                                  const char *label, report_capacity_t **capacity_p,
                                  char *error_p, size_t error_len)
{
    report_capacity_t *capacity = calloc(1, sizeof(*capacity));
    if (capacity == NULL)
        return KVIO_ERR_NOMEM;
    capacity->users = json_object_get(search, "capacity_users") != NULL;
    /* Rates as the probes offered them (the capacity is one of those). */
    const char *point = capacity->users ? "users" : "offered_rate";
    kvio_status_t status = report_json_number(search, "capacity", where, path, true,
                                       &capacity->capacity, error_p, error_len);
    if (status == KVIO_OK)
        status = report_json_number(search, "attain", where, path, true, &capacity->attain, error_p,
                             error_len);
    const json_t *curve = json_object_get(search, "curve");
    if (status == KVIO_OK && (!json_is_array(curve) || json_array_size(curve) == 0 ||
                              json_array_size(curve) > 1000)) {
        snprintf(error_p, error_len, "%s: %scurve is not an array of 1..1000 probes", path,
                 where);
        status = KVIO_ERR_PARSE;
    }
    size_t count = status == KVIO_OK ? json_array_size(curve) : 0;
    double *pairs = count > 0 ? malloc(2 * count * sizeof(double)) : NULL;
    if (status == KVIO_OK && pairs == NULL)
        status = KVIO_ERR_NOMEM;
    for (size_t i = 0; status == KVIO_OK && i < count; i++) {
        char at[96];
        snprintf(at, sizeof(at), "%scurve[%zu].", where, i);
        const json_t *probe = json_array_get(curve, i);
        status = report_json_number(probe, point, at, path, true, &pairs[2 * i], error_p, error_len);
        if (status == KVIO_OK)
            status = report_json_number(probe, "attainment", at, path, true, &pairs[2 * i + 1],
                                 error_p, error_len);
        if (status == KVIO_OK && (pairs[2 * i] <= 0 || pairs[2 * i + 1] < 0 ||
                                  pairs[2 * i + 1] > 1)) {
            snprintf(error_p, error_len, "%s: %s%s must be above 0 and attainment in 0..1",
                     path, at, point);
            status = KVIO_ERR_PARSE;
        }
    }
    if (status == KVIO_OK) {
        qsort(pairs, count, 2 * sizeof(double), kvio_compare_double);
        capacity->load = malloc(count * sizeof(double));
        capacity->attainment = malloc(count * sizeof(double));
        if (capacity->load == NULL || capacity->attainment == NULL)
            status = KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; status == KVIO_OK && i < count; i++) {
        capacity->load[i] = pairs[2 * i];
        capacity->attainment[i] = pairs[2 * i + 1];
    }
    free(pairs);
    if (status != KVIO_OK) {
        report_capacity_free(capacity);
        return status;
    }
    capacity->num_points = count;
    report_label_copy(capacity->label, sizeof(capacity->label), label);
    *capacity_p = capacity;
    return KVIO_OK;
}

kvio_status_t report_capacity_load(kvio_report_t *report, const char *dir, const char *label,
                                   char *error_p, size_t error_len)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/capacity.json", dir);
    json_t *json = NULL;
    kvio_status_t status = report_json_load(path, &json, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    const json_t *variants = json_object_get(json, "variants");
    size_t count = variants != NULL ? json_array_size(variants) : 1;
    if (variants != NULL && (!json_is_array(variants) || count == 0)) {
        snprintf(error_p, error_len, "%s: variants is not a non-empty array", path);
        status = KVIO_ERR_PARSE;
    }
    for (size_t v = 0; status == KVIO_OK && v < count; v++) {
        if (report->num_capacities == KVIO_REPORT_MAX_RUNS) {
            snprintf(error_p, error_len, "%s: more than %d capacity searches in one report",
                     path, KVIO_REPORT_MAX_RUNS);
            status = KVIO_ERR_INVALID;
            break;
        }
        const json_t *search = variants != NULL ? json_array_get(variants, v) : json;
        char where[48] = "", name[REPORT_LABEL_MAX];
        snprintf(name, sizeof(name), "%s", label);
        if (variants != NULL) {
            snprintf(where, sizeof(where), "variants[%zu].", v);
            const char *key = json_string_value(json_object_get(search, "vary"));
            const char *value = json_string_value(json_object_get(search, "value"));
            snprintf(name, sizeof(name), "%.30s %.30s=%.30s", label, key ? key : "?",
                     value ? value : "?");
        }
        report_capacity_t *capacity = NULL;
        status = capacity_one(search, where, path, name, &capacity, error_p, error_len);
        if (status == KVIO_OK)
            report->capacities[report->num_capacities++] = capacity;
    }
    json_decref(json);
    return status;
}
