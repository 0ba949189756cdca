/* vllm.json: the run as `vllm bench serve --save-result` writes its result,
 * so that what reads one reads the other: the traffic (request_rate,
 * burstiness, max_concurrency), the totals and throughputs, mean, median,
 * std and the percentiles asked for (metric_percentiles) of TTFT, TPOT, ITL
 * and E2EL computed as vLLM computes them (numpy's, from every request),
 * and the per-request lists input_lens, output_lens, ttfts, itls,
 * latencies, start_times and errors. The measured requests come from
 * requests.csv (as written), the gaps between tokens from the engines
 * (kvio_serve_itls_t); summary.json's vllm holds the same keys without the
 * lists. */
#include "run/run_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/array.h"
#include "kvio/format.h"
#include "kvio/results.h"
#include "kvio/stats.h"

/* One measured request of requests.csv. */
typedef struct vllm_request {
    uint64_t id;
    double start_s, ttft_s, e2el_s;
    uint32_t input, output;
} vllm_request_t;

/* The measured requests, and what vLLM's lists are made of. */
typedef struct vllm_data {
    vllm_request_t *requests;
    size_t count, capacity;
    uint64_t input_tokens, output_tokens;
    /* The gaps between tokens, grouped by request: records[order[k]] for k
     * in [starts[id], starts[id + 1]), in the order they came. order is
     * NULL when not all were kept. */
    uint32_t *order, *starts;
    uint64_t max_id;
    const kvio_itl_record_t *records;
    size_t num_records;
} vllm_data_t;

kvio_status_t run_vllm_percentiles(const char *text, double *values, size_t max,
                                   size_t *count_p, char *error_p, size_t error_len)
{
    size_t count = 0;
    const char *at = text != NULL ? text : "";
    while (*at != '\0') {
        char *end = NULL;
        double value = strtod(at, &end);
        if (end == at || (*end != ',' && *end != '\0') || !(value > 0 && value <= 100)) {
            snprintf(error_p, error_len,
                     "metric_percentiles: '%s' is not a list of percentiles above 0 and at most "
                     "100, comma-separated (e.g. 50,90,99,99.9)", text);
            return KVIO_ERR_CONFIG;
        }
        if (count == max) {
            snprintf(error_p, error_len, "metric_percentiles: '%s' asks for more than %zu "
                     "percentiles", text, max);
            return KVIO_ERR_CONFIG;
        }
        values[count++] = value;
        at = *end == ',' ? end + 1 : end;
    }
    if (count == 0) {
        snprintf(error_p, error_len, "metric_percentiles: empty; give at least one (e.g. 99)");
        return KVIO_ERR_CONFIG;
    }
    *count_p = count;
    return KVIO_OK;
}

/* ---------- statistics as numpy computes them ---------- */

/* mean, median, std (population) and each percentile of values (seconds)
 * into vllm as NAME's keys in ms, the way vLLM names them (p99.9: "p99.9"). */
static void add_statistics(json_t *vllm, const char *name, double *values, size_t count,
                           const double *percentiles, size_t num_percentiles)
{
    if (kvio_sort_doubles(values, count) != KVIO_OK)
        qsort(values, count, sizeof(*values), kvio_compare_double);
    double mean, stddev;
    kvio_mean_stddev(values, count, &mean, &stddev);
    char key[64];
    snprintf(key, sizeof(key), "mean_%s_ms", name);
    json_object_set_new(vllm, key, json_real(mean * 1e3));
    snprintf(key, sizeof(key), "median_%s_ms", name);
    json_object_set_new(vllm, key, json_real(kvio_percentile_linear(values, count, 50) * 1e3));
    snprintf(key, sizeof(key), "std_%s_ms", name);
    json_object_set_new(vllm, key, json_real(stddev * 1e3));
    for (size_t i = 0; i < num_percentiles; i++) {
        snprintf(key, sizeof(key), "p%.10g_%s_ms", percentiles[i], name);
        json_object_set_new(vllm, key,
                            json_real(kvio_percentile_linear(values, count, percentiles[i]) *
                                      1e3));
    }
}

/* ---------- reading what the run measured ---------- */

static kvio_status_t read_requests(const char *path, vllm_data_t *data, char *error_p,
                                   size_t error_len)
{
    kvio_csv_reader_t *csv = malloc(sizeof(*csv));
    if (csv == NULL)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = kvio_csv_reader_open(csv, path, error_p, error_len);
    if (status != KVIO_OK) {
        free(csv);
        return status;
    }
    static const char *const names[] = {"id", "arrival_s", "first_token_s", "finish_s",
                                        "input_tokens", "output_tokens", "measured"};
    int columns[7];
    status = kvio_csv_reader_columns(csv, names, 7, columns, error_p, error_len);
    while (status == KVIO_OK &&
           (status = kvio_csv_reader_next(csv, error_p, error_len)) == KVIO_OK) {
        if (strcmp(csv->fields[columns[6]], "1") != 0)
            continue; /* warmup */
        status = kvio_array_reserve((void **)&data->requests, &data->capacity, data->count + 1,
                                    sizeof(*data->requests), 4096);
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "vllm.json: out of memory holding %zu requests "
                     "(%zu bytes each)", data->count + 1, sizeof(*data->requests));
            break;
        }
        double arrival = strtod(csv->fields[columns[1]], NULL);
        vllm_request_t *request = &data->requests[data->count++];
        *request = (vllm_request_t){
            .id = strtoull(csv->fields[columns[0]], NULL, 10),
            .start_s = arrival,
            .ttft_s = strtod(csv->fields[columns[2]], NULL) - arrival,
            .e2el_s = strtod(csv->fields[columns[3]], NULL) - arrival,
            .input = (uint32_t)strtoul(csv->fields[columns[4]], NULL, 10),
            .output = (uint32_t)strtoul(csv->fields[columns[5]], NULL, 10)};
        data->input_tokens += request->input;
        data->output_tokens += request->output;
    }
    kvio_csv_reader_close(csv);
    free(csv);
    return status == KVIO_INPROGRESS ? KVIO_OK : status;
}

/* Past this many request ids the grouping's table would be larger than the
 * gaps themselves many times over: such a sparse run gets no itls list. */
#define MAX_GROUPED_ID (256u << 20)

/* The gaps grouped by request (a counting sort on the request id), each
 * request's in the order they came. */
static kvio_status_t group_itls(const kvio_serve_itls_t *itls, vllm_data_t *data,
                                char *error_p, size_t error_len)
{
    if (itls == NULL || itls->dropped > 0 || itls->count == 0 || itls->count > UINT32_MAX)
        return KVIO_OK;
    uint64_t max_id = 0;
    for (uint64_t i = 0; i < itls->count; i++)
        max_id = itls->records[i].id > max_id ? itls->records[i].id : max_id;
    if (max_id >= MAX_GROUPED_ID)
        return KVIO_OK;
    data->order = malloc(itls->count * sizeof(*data->order));
    data->starts = calloc(max_id + 2, sizeof(*data->starts));
    if (data->order == NULL || data->starts == NULL) {
        snprintf(error_p, error_len, "vllm.json: out of memory grouping %llu gaps between "
                 "tokens of %llu requests (%llu bytes)", (unsigned long long)itls->count,
                 (unsigned long long)max_id + 1,
                 (unsigned long long)(itls->count + max_id + 2) * sizeof(uint32_t));
        free(data->order);
        free(data->starts);
        data->order = data->starts = NULL;
        return KVIO_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < itls->count; i++)
        data->starts[itls->records[i].id + 1]++;
    for (uint64_t id = 0; id <= max_id; id++)
        data->starts[id + 1] += data->starts[id];
    /* Scatter, then starts[id] has moved to starts[id + 1]: shift back. */
    for (uint64_t i = 0; i < itls->count; i++)
        data->order[data->starts[itls->records[i].id]++] = (uint32_t)i;
    for (uint64_t id = max_id + 1; id > 0; id--)
        data->starts[id] = data->starts[id - 1];
    data->starts[0] = 0;
    data->max_id = max_id;
    data->records = itls->records;
    data->num_records = (size_t)itls->count;
    return KVIO_OK;
}

/* Request id's gaps: records[order[k]] for k in [*begin_p, *end_p). */
static void gaps_of(const vllm_data_t *data, uint64_t id, size_t *begin_p, size_t *end_p)
{
    *begin_p = *end_p = 0;
    if (data->order != NULL && id <= data->max_id) {
        *begin_p = data->starts[id];
        *end_p = data->starts[id + 1];
    }
}

/* ---------- what vLLM derives from the requests ---------- */

/* The most requests in flight at once: a sweep over [start, start + e2el),
 * a departure before an arrival at the same time. */
static int64_t max_concurrency(const vllm_data_t *data)
{
    double *events = malloc((data->count * 2 + 1) * sizeof(*events));
    if (events == NULL)
        return -1;
    /* Arrivals and departures sorted apart, then merged. */
    double *arrivals = events, *departures = events + data->count;
    for (size_t i = 0; i < data->count; i++) {
        arrivals[i] = data->requests[i].start_s;
        departures[i] = data->requests[i].start_s + data->requests[i].e2el_s;
    }
    qsort(arrivals, data->count, sizeof(double), kvio_compare_double);
    qsort(departures, data->count, sizeof(double), kvio_compare_double);
    int64_t now = 0, peak = 0;
    for (size_t a = 0, d = 0; a < data->count;) {
        if (d < data->count && departures[d] <= arrivals[a]) {
            now--;
            d++;
        } else {
            now++;
            a++;
            if (now > peak)
                peak = now;
        }
    }
    free(events);
    return peak;
}

/* The most output tokens in one second since the first request's start,
 * from each token's time (first token, then the gaps): needs every gap. */
static double max_tokens_per_second(const vllm_data_t *data)
{
    if (data->order == NULL || data->count == 0)
        return -1;
    double first = INFINITY, last = 0;
    for (size_t i = 0; i < data->count; i++) {
        const vllm_request_t *r = &data->requests[i];
        first = fmin(first, r->start_s);
        last = fmax(last, r->start_s + r->e2el_s);
    }
    size_t seconds = (size_t)ceil(last - first) + 1;
    uint64_t *buckets = calloc(seconds, sizeof(*buckets));
    if (buckets == NULL)
        return -1;
    for (size_t i = 0; i < data->count; i++) {
        const vllm_request_t *r = &data->requests[i];
        double at = r->start_s + r->ttft_s;
        size_t bucket = (size_t)(at - first);
        if (bucket < seconds)
            buckets[bucket]++;
        size_t begin, end;
        gaps_of(data, r->id, &begin, &end);
        for (size_t k = begin; k < end; k++) {
            at += data->records[data->order[k]].gap_s;
            bucket = (size_t)(at - first);
            if (bucket < seconds)
                buckets[bucket]++;
        }
    }
    uint64_t most = 0;
    for (size_t s = 0; s < seconds; s++)
        most = buckets[s] > most ? buckets[s] : most;
    free(buckets);
    return (double)most;
}

/* The traffic as vLLM names it: request_rate (a number, or "inf" when every
 * request arrives at once), burstiness (gamma's shape: 1 for Poisson) and
 * max_concurrency (serve.max_concurrency, or a closed loop's users: none
 * for an open loop). Phases, traces and a closed loop have no one
 * configured rate: the rate offered, as measured. */
static void add_traffic(json_t *vllm, const kvio_workload_t *workload, const json_t *metrics)
{
    const kvio_stream_arrival_config_t *arrival = &workload->stream.arrival;
    bool trace = workload->stream.trace.path != NULL && workload->stream.trace.path[0] != '\0';
    json_t *rate = NULL, *burstiness = json_null();
    bool users = !trace && workload->stream.users > 0;
    if (trace || users || arrival->process == KVIO_ARRIVAL_PHASES) {
        rate = json_real(json_number_value(json_object_get(metrics, "offered_rate")));
    } else if (arrival->process == KVIO_ARRIVAL_BATCH) {
        rate = json_string("inf");
    } else {
        rate = json_real(arrival->rate);
        if (arrival->process == KVIO_ARRIVAL_POISSON)
            burstiness = json_real(1.0);
        else if (arrival->process == KVIO_ARRIVAL_GAMMA && arrival->cv > 0)
            burstiness = json_real(1.0 / (arrival->cv * arrival->cv));
    }
    json_object_set_new(vllm, "request_rate", rate);
    json_object_set_new(vllm, "burstiness", burstiness);
    int64_t concurrency = workload->serve.max_concurrency > 0 ? workload->serve.max_concurrency
                          : users                             ? workload->stream.users
                                                              : 0;
    json_object_set_new(vllm, "max_concurrency",
                        concurrency > 0 ? json_integer((json_int_t)concurrency) : json_null());
}

/* The scalar keys, in vLLM's order. */
static json_t *scalars(const run_vllm_t *source, vllm_data_t *data, const double *percentiles,
                       size_t num_percentiles)
{
    const json_t *metrics = source->metrics;
    const kvio_workload_t *workload = source->workload;
    char date[32];
    time_t start = (time_t)(source->start_wall_ns / 1000000000);
    struct tm tm;
    strftime(date, sizeof(date), "%Y%m%d-%H%M%S", localtime_r(&start, &tm));
    const char *model = workload->model.preset != NULL ? workload->model.preset : "custom";
    double duration = json_number_value(json_object_get(metrics, "duration_s"));
    bool slo = workload->slo.ttft_ns > 0 || workload->slo.tpot_ns > 0;
    json_t *vllm = json_pack("{s:s, s:s, s:s, s:n, s:s, s:s, s:I}", "date", date,
                             "endpoint_type", "kvio", "backend", "kvio", "label", "model_id",
                             model, "tokenizer_id", model, "num_prompts",
                             (json_int_t)data->count);
    add_traffic(vllm, workload, metrics);
    double per_second = duration > 0 ? 1.0 / duration : 0;
    json_object_set_new(vllm, "duration", json_real(duration));
    json_object_set_new(vllm, "completed", json_integer((json_int_t)data->count));
    json_object_set_new(vllm, "failed", json_integer(json_integer_value(
                                            json_object_get(metrics, "aborted_requests"))));
    json_object_set_new(vllm, "total_input_tokens", json_integer((json_int_t)data->input_tokens));
    json_object_set_new(vllm, "total_output_tokens",
                        json_integer((json_int_t)data->output_tokens));
    json_object_set_new(vllm, "request_throughput", json_real((double)data->count * per_second));
    json_object_set_new(vllm, "request_goodput",
                        slo ? json_real(json_number_value(json_object_get(metrics, "goodput")))
                            : json_null());
    json_object_set_new(vllm, "output_throughput",
                        json_real((double)data->output_tokens * per_second));
    json_object_set_new(vllm, "total_token_throughput",
                        json_real((double)(data->input_tokens + data->output_tokens) *
                                  per_second));
    double most = max_tokens_per_second(data);
    json_object_set_new(vllm, "max_output_tokens_per_s", most >= 0 ? json_real(most) : json_null());
    int64_t concurrent = max_concurrency(data);
    json_object_set_new(vllm, "max_concurrent_requests",
                        concurrent >= 0 ? json_integer(concurrent) : json_null());

    size_t n = data->count > data->num_records ? data->count : data->num_records;
    double *values = malloc((n + 1) * sizeof(*values));
    if (values == NULL) {
        json_decref(vllm);
        return NULL;
    }
    for (size_t i = 0; i < data->count; i++)
        values[i] = data->requests[i].ttft_s;
    add_statistics(vllm, "ttft", values, data->count, percentiles, num_percentiles);
    size_t count = 0;
    for (size_t i = 0; i < data->count; i++)
        if (data->requests[i].output > 1)
            values[count++] = (data->requests[i].e2el_s - data->requests[i].ttft_s) /
                              (data->requests[i].output - 1);
    add_statistics(vllm, "tpot", values, count, percentiles, num_percentiles);
    if (data->order != NULL) {
        for (size_t i = 0; i < data->num_records; i++)
            values[i] = data->records[i].gap_s;
        add_statistics(vllm, "itl", values, data->num_records, percentiles, num_percentiles);
    }
    for (size_t i = 0; i < data->count; i++)
        values[i] = data->requests[i].e2el_s;
    add_statistics(vllm, "e2el", values, data->count, percentiles, num_percentiles);
    free(values);
    return vllm;
}

/* ---------- writing vllm.json ---------- */

/* Text for vllm.json, written in lines of about 64 KiB (a line ends after a
 * list's comma, where JSON allows it); numbers formatted by hand, as
 * requests.csv's (printf's float path was most of the writing). */
typedef struct vllm_writer {
    kvio_csv_t *file;
    char text[65536 + 4096];
    size_t length;
    kvio_status_t status;
} vllm_writer_t;

static void flush_line(vllm_writer_t *out)
{
    if (out->status == KVIO_OK && out->length > 0)
        out->status = kvio_csv_line(out->file, out->text, out->length);
    out->length = 0;
}

/* Room for what comes next: at most 4 KiB at a time. */
static char *room(vllm_writer_t *out)
{
    if (out->length > 65536)
        flush_line(out);
    return out->text + out->length;
}

static void put_text(vllm_writer_t *out, const char *text)
{
    size_t length = strlen(text);
    while (length > 0) {
        char *at = room(out);
        size_t part = length < 4096 ? length : 4096;
        memcpy(at, text, part);
        out->length += part;
        text += part;
        length -= part;
    }
}

/* A number of a list, seconds to the microsecond (as requests.csv's), or
 * a count; a comma before all but the first. */
static void put_number(vllm_writer_t *out, bool first, double seconds, uint64_t count,
                       bool integer)
{
    char *at = room(out);
    if (!first) {
        *at++ = ',';
        *at++ = ' ';
    }
    at += integer ? kvio_format_unsigned(at, count) : kvio_format_fixed(at, seconds, 6);
    out->length = (size_t)(at - out->text);
}

/* One per-request list of numbers; field picks the number. */
typedef enum { LIST_INPUT, LIST_OUTPUT, LIST_TTFT, LIST_LATENCY, LIST_START } list_t;

static void put_list(vllm_writer_t *out, const vllm_data_t *data, const char *name, list_t field)
{
    put_text(out, ",\n  \"");
    put_text(out, name);
    put_text(out, "\": [");
    for (size_t i = 0; i < data->count; i++) {
        const vllm_request_t *r = &data->requests[i];
        switch (field) {
        case LIST_INPUT: put_number(out, i == 0, 0, r->input, true); break;
        case LIST_OUTPUT: put_number(out, i == 0, 0, r->output, true); break;
        case LIST_TTFT: put_number(out, i == 0, r->ttft_s, 0, false); break;
        case LIST_LATENCY: put_number(out, i == 0, r->e2el_s, 0, false); break;
        case LIST_START: put_number(out, i == 0, r->start_s, 0, false); break;
        }
    }
    put_text(out, "]");
}

static void put_itls(vllm_writer_t *out, const vllm_data_t *data)
{
    put_text(out, ",\n  \"itls\": [");
    for (size_t i = 0; i < data->count; i++) {
        put_text(out, i > 0 ? ", [" : "[");
        size_t begin, end;
        gaps_of(data, data->requests[i].id, &begin, &end);
        for (size_t k = begin; k < end; k++)
            put_number(out, k == begin, data->records[data->order[k]].gap_s, 0, false);
        put_text(out, "]");
    }
    put_text(out, "]");
}

kvio_status_t run_vllm_write(const run_vllm_t *source, json_t **scalars_p, char *error_p,
                             size_t error_len)
{
    *scalars_p = NULL;
    double percentiles[RUN_VLLM_PERCENTILES_MAX];
    size_t num_percentiles = 0;
    kvio_status_t status = run_vllm_percentiles(source->workload->metric_percentiles,
                                                percentiles, RUN_VLLM_PERCENTILES_MAX,
                                                &num_percentiles, error_p, error_len);
    char path[4200];
    snprintf(path, sizeof(path), "%s/requests.csv", kvio_results_path(source->results));
    vllm_data_t data = {0};
    if (status == KVIO_OK)
        status = read_requests(path, &data, error_p, error_len);
    if (status == KVIO_OK)
        status = group_itls(source->itls, &data, error_p, error_len);
    json_t *vllm = status == KVIO_OK ? scalars(source, &data, percentiles, num_percentiles) : NULL;
    if (status == KVIO_OK && vllm == NULL) {
        snprintf(error_p, error_len, "vllm.json: out of memory");
        status = KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK && data.order == NULL && source->itls != NULL &&
        source->itls->count + source->itls->dropped > 0) {
        /* Not every gap was kept: the lists and the statistics would be of a
         * part, so ITL's come from the run's histogram and itls is left out. */
        const json_t *itl = json_object_get(source->metrics, "itl_ms");
        json_object_set_new(vllm, "mean_itl_ms", json_real(json_number_value(
                                                     json_object_get(itl, "mean"))));
        json_object_set_new(vllm, "median_itl_ms", json_real(json_number_value(
                                                       json_object_get(itl, "p50"))));
        json_object_set_new(
            vllm, "kvio_itls_omitted",
            source->itls->dropped > 0
                ? json_sprintf("%llu gaps between tokens past the %u a run keeps; ITL from the "
                               "histogram (relative error < 1/256)",
                               (unsigned long long)source->itls->dropped, KVIO_SERVE_ITLS_MAX)
                : json_sprintf("request ids up to %u only are grouped; ITL from the histogram "
                               "(relative error < 1/256)", MAX_GROUPED_ID));
    }
    vllm_writer_t *out = status == KVIO_OK ? calloc(1, sizeof(*out)) : NULL;
    if (status == KVIO_OK && out == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK &&
        (status = kvio_csv_open(source->results, "vllm.json", NULL, &out->file)) != KVIO_OK)
        snprintf(error_p, error_len, "vllm.json: cannot be created: %s", kvio_strerror(status));
    if (status == KVIO_OK) {
        char *head = json_dumps(vllm, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
        size_t length = head != NULL ? strlen(head) : 0;
        /* The scalars, then the lists before the closing brace. */
        if (length >= 2 && head[length - 1] == '}') {
            head[length - 2] = '\0';
            put_text(out, head);
        }
        free(head);
        put_list(out, &data, "input_lens", LIST_INPUT);
        put_list(out, &data, "output_lens", LIST_OUTPUT);
        put_list(out, &data, "ttfts", LIST_TTFT);
        if (data.order != NULL)
            put_itls(out, &data);
        put_list(out, &data, "latencies", LIST_LATENCY);
        put_list(out, &data, "start_times", LIST_START);
        put_text(out, ",\n  \"errors\": [");
        for (size_t i = 0; i < data.count; i++)
            put_text(out, i > 0 ? ", \"\"" : "\"\"");
        put_text(out, "]\n}");
        flush_line(out);
        kvio_status_t closed = kvio_csv_finish(out->file, "vllm.json", error_p, error_len);
        status = out->status != KVIO_OK ? out->status : closed;
    }
    free(out);
    free(data.requests);
    free(data.order);
    free(data.starts);
    if (status == KVIO_OK)
        *scalars_p = vllm;
    else
        json_decref(vllm);
    return status;
}
