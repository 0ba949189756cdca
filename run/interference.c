/* What each model update did to serving, from the run's own files: for a
 * window after each activation (update.interference_window) against the
 * same stretch before it, on the rank that activated it, the requests that
 * arrived in each: TTFT p50/p99, TPOT p99 and the prefix hit rate. The
 * ratios (after / before) go into updates.csv as columns and, averaged over
 * the updates that had requests on both sides, into summary.json's
 * update_interference with the update's recompute and stall costs. Both
 * modes write the same files on one clock, so one pass serves both. */
#include "kvio/run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/results.h"

/* One request of requests.csv, as the windows need it. */
typedef struct served {
    int rank;
    double arrival_s, ttft_s, tpot_s; /* tpot_s < 0: one output token */
    double input_tokens, cached_tokens;
} served_t;

/* One activation of updates.csv (its line, to extend). */
typedef struct activation {
    int rank;
    double at_s; /* NAN: not activated */
} activation_t;

/* The window's figures: TTFT p50 and p99, TPOT p99, hit rate; NAN where it
 * had no request. */
typedef struct window {
    double ttft_p50, ttft_p99, tpot_p99, hit_rate;
    size_t requests;
} window_t;

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q quantile of count sorted values (nearest rank); NAN when none. */
static double quantile(const double *sorted, size_t count, double q)
{
    if (count == 0)
        return NAN;
    size_t index = (size_t)ceil(q * (double)count);
    return sorted[index > 0 ? index - 1 : 0];
}

/* Requests ordered by rank, then arrival. */
static int compare_served(const void *a, const void *b)
{
    const served_t *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->arrival_s < y->arrival_s ? -1 : x->arrival_s > y->arrival_s;
}

/* The first of the sorted requests at (rank, arrival_s) or after. */
static size_t first_at(const served_t *requests, size_t count, int rank, double arrival_s)
{
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const served_t *request = &requests[middle];
        if (request->rank < rank || (request->rank == rank && request->arrival_s < arrival_s))
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

/* The requests of rank arriving in [from_s, to_s), of requests sorted by
 * compare_served; scratch holds 2 × count. */
static window_t measure(const served_t *requests, size_t count, int rank, double from_s,
                        double to_s, double *scratch)
{
    double *ttft = scratch, *tpot = scratch + count, input = 0, cached = 0;
    size_t num_ttft = 0, num_tpot = 0;
    for (size_t i = first_at(requests, count, rank, from_s); i < count; i++) {
        const served_t *request = &requests[i];
        if (request->rank != rank || request->arrival_s >= to_s)
            break;
        ttft[num_ttft++] = request->ttft_s;
        if (request->tpot_s >= 0)
            tpot[num_tpot++] = request->tpot_s;
        input += request->input_tokens;
        cached += request->cached_tokens;
    }
    qsort(ttft, num_ttft, sizeof(double), compare_doubles);
    qsort(tpot, num_tpot, sizeof(double), compare_doubles);
    return (window_t){.ttft_p50 = quantile(ttft, num_ttft, 0.5),
                      .ttft_p99 = quantile(ttft, num_ttft, 0.99),
                      .tpot_p99 = quantile(tpot, num_tpot, 0.99),
                      .hit_rate = input > 0 ? cached / input : NAN,
                      .requests = num_ttft};
}

static double ratio(double after, double before)
{
    return isfinite(after) && isfinite(before) && before > 0 ? after / before : NAN;
}

/* Reads requests.csv into a malloc'd array. */
static kvio_status_t read_requests(const char *dir, served_t **requests_p, size_t *count_p,
                                   char *error_p, size_t error_len)
{
    enum { RANK, ARRIVAL, FIRST_TOKEN, FINISH, INPUT, OUTPUT, CACHED, NUM_WANTED };
    static const char *const wanted[NUM_WANTED] = {"rank", "arrival_s", "first_token_s",
                                                   "finish_s", "input_tokens", "output_tokens",
                                                   "cached_tokens"};
    char path[4200];
    snprintf(path, sizeof(path), "%s/requests.csv", dir);
    kvio_csv_reader_t *csv = malloc(sizeof(*csv));
    if (csv == NULL)
        return KVIO_ERR_NOMEM;
    int columns[NUM_WANTED];
    kvio_status_t status = kvio_csv_reader_open(csv, path, error_p, error_len);
    if (status == KVIO_ERR_NOT_FOUND) {
        free(csv);
        *requests_p = NULL;
        *count_p = 0; /* no serving in this run */
        return KVIO_OK;
    }
    if (status == KVIO_OK)
        status = kvio_csv_reader_columns(csv, wanted, NUM_WANTED, columns, error_p, error_len);
    served_t *requests = NULL;
    size_t count = 0, capacity = 0, width = csv->num_fields;
    while (status == KVIO_OK &&
           (status = kvio_csv_reader_next(csv, error_p, error_len)) == KVIO_OK) {
        if (csv->num_fields != width)
            continue;
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 1024;
            served_t *bigger = realloc(requests, capacity * sizeof(*bigger));
            if (bigger == NULL) {
                status = KVIO_ERR_NOMEM;
                break;
            }
            requests = bigger;
        }
        double value[NUM_WANTED];
        for (int i = 0; i < NUM_WANTED; i++)
            value[i] = strtod(csv->fields[columns[i]], NULL);
        requests[count++] = (served_t){
            .rank = (int)value[RANK], .arrival_s = value[ARRIVAL],
            .ttft_s = value[FIRST_TOKEN] - value[ARRIVAL],
            .tpot_s = value[OUTPUT] > 1 ? (value[FINISH] - value[FIRST_TOKEN]) /
                                              (value[OUTPUT] - 1)
                                        : -1,
            .input_tokens = value[INPUT], .cached_tokens = value[CACHED]};
    }
    kvio_csv_reader_close(csv);
    free(csv);
    if (status == KVIO_INPROGRESS)
        status = KVIO_OK;
    if (status != KVIO_OK) {
        free(requests);
        return status == KVIO_ERR_PARSE ? KVIO_ERR_IO : status;
    }
    *requests_p = requests;
    *count_p = count;
    return KVIO_OK;
}

/* Appends the per-update columns to updates.csv (rewritten in place through
 * a temporary file). */
static kvio_status_t extend_updates_csv(const char *path, char *const *lines, size_t num_lines,
                                        const window_t *before, const window_t *after,
                                        char *error_p, size_t error_len)
{
    char temporary[4300];
    snprintf(temporary, sizeof(temporary), "%s.tmp", path);
    FILE *file = fopen(temporary, "w");
    if (file == NULL) {
        snprintf(error_p, error_len, "%s: %s", temporary, strerror(errno));
        return KVIO_ERR_IO;
    }
    fprintf(file, "%s,ttft_p50_ratio,ttft_p99_ratio,tpot_p99_ratio,hit_rate_before,"
                  "hit_rate_after\n", lines[0]);
    for (size_t i = 1; i < num_lines; i++)
        fprintf(file, "%s,%.4f,%.4f,%.4f,%.4f,%.4f\n", lines[i],
                ratio(after[i - 1].ttft_p50, before[i - 1].ttft_p50),
                ratio(after[i - 1].ttft_p99, before[i - 1].ttft_p99),
                ratio(after[i - 1].tpot_p99, before[i - 1].tpot_p99), before[i - 1].hit_rate,
                after[i - 1].hit_rate);
    if (fclose(file) != 0 || rename(temporary, path) != 0) {
        snprintf(error_p, error_len, "%s: %s", path, strerror(errno));
        remove(temporary);
        return KVIO_ERR_IO;
    }
    return KVIO_OK;
}

/* Splits text (modified) into its lines. */
static size_t split_lines(char *text, char ***lines_p)
{
    size_t count = 0;
    for (const char *c = text; *c; c++)
        count += *c == '\n';
    char **lines = calloc(count + 1, sizeof(char *));
    if (lines == NULL)
        return 0;
    size_t n = 0;
    for (char *line = text, *end; n <= count && *line != '\0'; line = end + 1) {
        end = strchr(line, '\n');
        lines[n++] = line;
        if (end == NULL)
            break;
        *end = '\0';
    }
    *lines_p = lines;
    return n;
}

/* The activations of updates.csv's lines (after the header). */
static kvio_status_t parse_activations(char *const *lines, size_t num_lines,
                                       activation_t *activations)
{
    int rank_column = -1, activated_column = -1, column = 0;
    char header[4096];
    snprintf(header, sizeof(header), "%s", lines[0]);
    for (char *name = strtok(header, ","); name != NULL; name = strtok(NULL, ","), column++) {
        rank_column = strcmp(name, "rank") == 0 ? column : rank_column;
        activated_column = strcmp(name, "t_activated_ms") == 0 ? column : activated_column;
    }
    if (rank_column < 0 || activated_column < 0)
        return KVIO_ERR_PARSE;
    for (size_t i = 1; i < num_lines; i++) {
        const char *field = lines[i];
        double values[2] = {NAN, NAN};
        for (int c = 0; field != NULL; c++) {
            if (c == rank_column)
                values[0] = strtod(field, NULL);
            if (c == activated_column)
                values[1] = strtod(field, NULL);
            field = strchr(field, ',');
            field = field != NULL ? field + 1 : NULL;
        }
        activations[i - 1] = (activation_t){.rank = (int)values[0], .at_s = values[1] / 1e3};
    }
    return KVIO_OK;
}

kvio_status_t kvio_updates_interference(const char *dir, int64_t window_ns, json_t *metrics,
                                        char *error_p, size_t error_len)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/updates.csv", dir);
    served_t *requests = NULL;
    size_t num_requests = 0;
    kvio_status_t status = read_requests(dir, &requests, &num_requests, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    FILE *file = fopen(path, "r");
    char *text = NULL, **lines = NULL;
    size_t length = 0, num_lines = 0;
    if (file != NULL) {
        fseek(file, 0, SEEK_END);
        long size = ftell(file);
        rewind(file);
        text = size >= 0 ? malloc((size_t)size + 1) : NULL;
        length = text != NULL ? fread(text, 1, (size_t)size, file) : 0;
        fclose(file);
    }
    if (text == NULL) {
        free(requests);
        snprintf(error_p, error_len, "%s: cannot read it back", path);
        return KVIO_ERR_IO;
    }
    text[length] = '\0';
    num_lines = split_lines(text, &lines);
    size_t num_updates = num_lines > 0 ? num_lines - 1 : 0;
    activation_t *activations = calloc(num_updates + 1, sizeof(*activations));
    window_t *before = calloc(num_updates + 1, sizeof(*before));
    window_t *after = calloc(num_updates + 1, sizeof(*after));
    double *scratch = malloc((2 * num_requests + 1) * sizeof(double));
    status = KVIO_ERR_NOMEM;
    if (lines == NULL || activations == NULL || before == NULL || after == NULL ||
        scratch == NULL)
        goto done;
    status = parse_activations(lines, num_lines, activations);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s: no rank or t_activated_ms column", path);
        goto done;
    }
    qsort(requests, num_requests, sizeof(*requests), compare_served);
    double window_s = (double)window_ns / 1e9;
    double sums[5] = {0};
    size_t measured = 0;
    for (size_t u = 0; u < num_updates; u++) {
        double at = activations[u].at_s;
        before[u] = after[u] = (window_t){NAN, NAN, NAN, NAN, 0};
        if (!isfinite(at))
            continue;
        before[u] = measure(requests, num_requests, activations[u].rank, at - window_s, at,
                            scratch);
        after[u] = measure(requests, num_requests, activations[u].rank, at, at + window_s,
                           scratch);
        double values[5] = {ratio(after[u].ttft_p50, before[u].ttft_p50),
                            ratio(after[u].ttft_p99, before[u].ttft_p99),
                            ratio(after[u].tpot_p99, before[u].tpot_p99), before[u].hit_rate,
                            after[u].hit_rate};
        bool complete = true;
        for (int v = 0; v < 5; v++)
            complete = complete && isfinite(values[v]);
        if (!complete)
            continue;
        for (int v = 0; v < 5; v++)
            sums[v] += values[v];
        measured++;
    }
    status = extend_updates_csv(path, lines, num_lines, before, after, error_p, error_len);
    if (status != KVIO_OK || metrics == NULL)
        goto done;
    json_t *effects = json_object_get(metrics, "update_effects");
    json_t *updates = json_object_get(metrics, "model_updates");
#define MEAN(v) (measured > 0 ? json_real(sums[v] / (double)measured) : json_null())
    json_object_set_new(
        metrics, "update_interference",
        json_pack("{s:f, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:f}", "window_s",
                  window_s, "updates", (json_int_t)num_updates, "updates_measured",
                  (json_int_t)measured, "ttft_p50_ratio", MEAN(0), "ttft_p99_ratio", MEAN(1),
                  "tpot_p99_ratio", MEAN(2), "hit_rate_before", MEAN(3), "hit_rate_after",
                  MEAN(4), "recomputed_tokens",
                  json_integer_value(json_object_get(effects, "update_recomputed_tokens")),
                  "aborted_requests",
                  json_integer_value(json_object_get(effects, "update_aborted_requests")),
                  "stall_ms",
                  json_number_value(json_object_get(updates, "inference_stall_total_ms"))));
#undef MEAN
done:
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "update interference: out of memory (%zu requests)",
                 num_requests);
    free(scratch);
    free(before);
    free(after);
    free(activations);
    free(lines);
    free(text);
    free(requests);
    return status;
}
