/* vllm.json: the run as `vllm bench serve --save-result` writes its result,
 * so that what reads one reads the other: the traffic (request_rate,
 * burstiness, max_concurrency), the totals and throughputs, mean, median,
 * std and the percentiles asked for (metric_percentiles) of TTFT, TPOT, ITL
 * and E2EL computed as vLLM computes them (numpy's, from every request),
 * and the per-request lists input_lens, output_lens, ttfts, itls,
 * latencies, start_times and errors. The figures vLLM names are the run's
 * (kvio/figures.def's vllm keys: the same values as summary.json and the
 * table); the lists and any other percentile asked for come from the same
 * measured requests (kvio_serve_samples_t) and gaps between tokens
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

/* One measured request as vLLM's lists hold it (made from its sample when
 * it is read: a copy of every request would double what the samples
 * take). */
typedef struct vllm_request {
    uint64_t id;
    double start_s, ttft_s, e2el_s;
    uint32_t input, output;
} vllm_request_t;

/* The measured requests, and what vLLM's lists are made of. */
typedef struct vllm_data {
    const kvio_request_sample_t *samples;
    size_t count;
    uint64_t input_tokens, output_tokens;
    /* The gaps between tokens, grouped by request: grouped[k] for k in
     * [starts[id], starts[id + 1]), in the order they came (read in order
     * when the lists are written, not through an index). grouped is
     * NULL when not all were kept. */
    float *grouped;
    uint32_t *starts;
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

/* ---------- the measured requests ---------- */

static void take_samples(const kvio_serve_samples_t *samples, vllm_data_t *data)
{
    if (samples == NULL || samples->count == 0)
        return;
    for (size_t i = 0; i < samples->count; i++) {
        data->input_tokens += samples->items[i].input_tokens;
        data->output_tokens += samples->items[i].output_tokens;
    }
    data->samples = samples->items;
    data->count = samples->count;
}

/* Request i, as vLLM's lists hold it. */
static vllm_request_t request_at(const vllm_data_t *data, size_t i)
{
    const kvio_request_sample_t *sample = &data->samples[i];
    return (vllm_request_t){
        .id = sample->id, .start_s = (double)sample->arrival_ns / 1e9,
        .ttft_s = (double)(sample->first_token_ns - sample->arrival_ns) / 1e9,
        .e2el_s = (double)(sample->finish_ns - sample->arrival_ns) / 1e9,
        .input = sample->input_tokens, .output = sample->output_tokens};
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
    data->grouped = kvio_large_alloc(itls->count * sizeof(*data->grouped));
    data->starts = calloc(max_id + 2, sizeof(*data->starts));
    if (data->grouped == NULL || data->starts == NULL) {
        snprintf(error_p, error_len, "vllm.json: out of memory grouping %llu gaps between "
                 "tokens of %llu requests (%llu bytes)", (unsigned long long)itls->count,
                 (unsigned long long)max_id + 1,
                 (unsigned long long)(itls->count + max_id + 2) * sizeof(uint32_t));
        free(data->grouped);
        free(data->starts);
        data->grouped = NULL;
        data->starts = NULL;
        return KVIO_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < itls->count; i++)
        data->starts[itls->records[i].id + 1]++;
    for (uint64_t id = 0; id <= max_id; id++)
        data->starts[id + 1] += data->starts[id];
    /* Scatter, then starts[id] has moved to starts[id + 1]: shift back. */
    for (uint64_t i = 0; i < itls->count; i++)
        data->grouped[data->starts[itls->records[i].id]++] = itls->records[i].gap_s;
    for (uint64_t id = max_id + 1; id > 0; id--)
        data->starts[id] = data->starts[id - 1];
    data->starts[0] = 0;
    data->max_id = max_id;
    data->records = itls->records;
    data->num_records = (size_t)itls->count;
    return KVIO_OK;
}

/* Request id's gaps: grouped[k] for k in [*begin_p, *end_p). */
static void gaps_of(const vllm_data_t *data, uint64_t id, size_t *begin_p, size_t *end_p)
{
    *begin_p = *end_p = 0;
    if (data->grouped != NULL && id <= data->max_id) {
        *begin_p = data->starts[id];
        *end_p = data->starts[id + 1];
    }
}

/* ---------- what vLLM derives from the requests ---------- */

/* The most requests in flight at once: a sweep over [start, start + e2el),
 * a departure before an arrival at the same time. */
static int64_t max_concurrency(const vllm_data_t *data)
{
    double *events = kvio_large_alloc((data->count * 2 + 1) * sizeof(*events));
    if (events == NULL)
        return -1;
    /* Arrivals and departures sorted apart, then merged. */
    double *arrivals = events, *departures = events + data->count;
    for (size_t i = 0; i < data->count; i++) {
        vllm_request_t r = request_at(data, i);
        arrivals[i] = r.start_s;
        departures[i] = r.start_s + r.e2el_s;
    }
    if (kvio_sort_doubles(arrivals, data->count) != KVIO_OK)
        qsort(arrivals, data->count, sizeof(double), kvio_compare_double);
    if (kvio_sort_doubles(departures, data->count) != KVIO_OK)
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
    if (data->grouped == NULL || data->count == 0)
        return -1;
    double first = INFINITY, last = 0;
    for (size_t i = 0; i < data->count; i++) {
        vllm_request_t request = request_at(data, i);
        const vllm_request_t *r = &request;
        first = fmin(first, r->start_s);
        last = fmax(last, r->start_s + r->e2el_s);
    }
    size_t seconds = (size_t)ceil(last - first) + 1;
    uint64_t *buckets = calloc(seconds, sizeof(*buckets));
    if (buckets == NULL)
        return -1;
    for (size_t i = 0; i < data->count; i++) {
        vllm_request_t request = request_at(data, i);
        const vllm_request_t *r = &request;
        double at = r->start_s + r->ttft_s;
        size_t bucket = (size_t)(at - first);
        if (bucket < seconds)
            buckets[bucket]++;
        size_t begin, end;
        gaps_of(data, r->id, &begin, &end);
        for (size_t k = begin; k < end; k++) {
            at += data->grouped[k];
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
static void add_traffic(json_t *vllm, const kvio_workload_t *workload, double offered_rate)
{
    const kvio_stream_arrival_config_t *arrival = &workload->stream.arrival;
    bool trace = workload->stream.trace.path != NULL && workload->stream.trace.path[0] != '\0';
    json_t *rate = NULL, *burstiness = json_null();
    bool users = !trace && workload->stream.users > 0;
    if (trace || users || arrival->process == KVIO_ARRIVAL_PHASES) {
        rate = json_real(offered_rate);
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

/* A percentile key as vLLM names one ("p99.9_ttft_ms"): *p_p its percentile. */
static bool percentile_key(const char *key, double *p_p)
{
    char *end = NULL;
    if (key[0] != 'p')
        return false;
    *p_p = strtod(key + 1, &end);
    return end != key + 1 && *end == '_';
}

static bool asked(double p, const double *percentiles, size_t num_percentiles)
{
    for (size_t i = 0; i < num_percentiles; i++)
        if (percentiles[i] == p)
            return true;
    return false;
}

/* Every figure with a vLLM name (kvio/figures.def), a percentile's only when
 * asked for; request_goodput null without an SLO, as vLLM writes it. */
static void add_figures(json_t *vllm, const kvio_result_t *result, const double *percentiles,
                        size_t num_percentiles)
{
    for (int f = 0; f < kvio_num_figures(); f++) {
        const kvio_figure_decl_t *decl = kvio_figure_decl((kvio_figure_t)f);
        double p;
        if (decl->vllm == NULL || decl->vllm[0] == '\0' ||
            (percentile_key(decl->vllm, &p) && !asked(p, percentiles, num_percentiles)))
            continue;
        if (!kvio_result_has(result, (kvio_figure_t)f))
            json_object_set_new(vllm, decl->vllm,
                                decl->kind == KVIO_KIND_COUNT ? json_integer(0) : json_null());
        else if (decl->kind == KVIO_KIND_COUNT)
            json_object_set_new(vllm, decl->vllm,
                                json_integer((json_int_t)llround(kvio_result_get(result, f))));
        else
            json_object_set_new(vllm, decl->vllm, json_real(kvio_result_get(result, f)));
    }
}

/* Percentiles asked for that no figure has, from the same requests (and
 * gaps, when all were kept) the figures came from. */
static kvio_status_t add_other_percentiles(json_t *vllm, const run_vllm_t *source,
                                           const vllm_data_t *data, const double *percentiles,
                                           size_t num_percentiles)
{
    static const struct {
        const char *name;
        int which; /* a kvio_sample_value_t, or -1: the gaps between tokens */
    } kinds[] = {{"ttft", KVIO_SAMPLE_TTFT}, {"tpot", KVIO_SAMPLE_TPOT},
                 {"itl", -1}, {"e2el", KVIO_SAMPLE_E2EL}};
    size_t n = data->count > data->num_records ? data->count : data->num_records;
    double *values = malloc((n + 1) * sizeof(*values));
    if (values == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t k = 0; k < 4; k++) {
        if (kinds[k].which < 0 && data->grouped == NULL)
            continue;
        /* Only a kind with a percentile no figure has is collected and
         * sorted (the default's are all figures). */
        bool missing = false;
        for (size_t i = 0; i < num_percentiles && !missing; i++) {
            char key[64];
            snprintf(key, sizeof(key), "p%.10g_%s_ms", percentiles[i], kinds[k].name);
            missing = json_object_get(vllm, key) == NULL;
        }
        if (!missing)
            continue;
        size_t count = 0;
        if (kinds[k].which >= 0) {
            count = kvio_serve_sample_values(source->samples, UINT32_MAX,
                                             (kvio_sample_value_t)kinds[k].which, values);
        } else {
            for (size_t i = 0; i < data->num_records; i++)
                values[count++] = data->records[i].gap_s;
        }
        kvio_latency_stats_t stats;
        kvio_serve_statistics(values, count, &stats);
        for (size_t i = 0; i < num_percentiles; i++) {
            char key[64];
            snprintf(key, sizeof(key), "p%.10g_%s_ms", percentiles[i], kinds[k].name);
            if (json_object_get(vllm, key) == NULL)
                json_object_set_new(vllm, key,
                                    json_real(kvio_percentile_linear(stats.sorted, stats.count,
                                                                     percentiles[i]) * 1e3));
        }
    }
    free(values);
    return KVIO_OK;
}

/* The scalar keys. */
static json_t *scalars(const run_vllm_t *source, vllm_data_t *data, const double *percentiles,
                       size_t num_percentiles)
{
    const kvio_result_t *result = source->result;
    const kvio_workload_t *workload = source->workload;
    char date[32];
    time_t start = (time_t)(source->start_wall_ns / 1000000000);
    struct tm tm;
    strftime(date, sizeof(date), "%Y%m%d-%H%M%S", localtime_r(&start, &tm));
    const char *model = workload->model.preset != NULL ? workload->model.preset : "custom";
    json_t *vllm = json_pack("{s:s, s:s, s:s, s:n, s:s, s:s, s:I}", "date", date,
                             "endpoint_type", "kvio", "backend", "kvio", "label", "model_id",
                             model, "tokenizer_id", model, "num_prompts",
                             (json_int_t)data->count);
    add_traffic(vllm, workload, kvio_result_get(result, KVIO_FIG_OFFERED_RATE));
    add_figures(vllm, result, percentiles, num_percentiles);
    double duration = kvio_result_get(result, KVIO_FIG_DURATION_S);
    json_object_set_new(vllm, "total_token_throughput",
                        json_real(duration > 0 ? (double)(data->input_tokens +
                                                          data->output_tokens) / duration
                                               : 0));
    double most = max_tokens_per_second(data);
    json_object_set_new(vllm, "max_output_tokens_per_s", most >= 0 ? json_real(most) : json_null());
    int64_t concurrent = max_concurrency(data);
    json_object_set_new(vllm, "max_concurrent_requests",
                        concurrent >= 0 ? json_integer(concurrent) : json_null());
    if (add_other_percentiles(vllm, source, data, percentiles, num_percentiles) != KVIO_OK) {
        json_decref(vllm);
        return NULL;
    }
    return vllm;
}

/* ---------- writing vllm.json ---------- */

/* Text for vllm.json, written in lines of about 64 KiB (a line ends after a
 * list's comma, where JSON allows it); numbers formatted by hand, as
 * requests.csv's (printf's float path was most of the writing). */
/* A gap's text, by the float's bits: in simulate every request decoding in
 * an iteration gets the same gap (591,000 gaps of 7,600 iterations on the
 * Mooncake replay), so most gaps are copied, not formatted again. length
 * 0: empty (a formatted gap has at least "0.000000"). */
typedef struct gap_text {
    uint32_t bits;
    uint8_t length;
    char text[27];
} gap_text_t;

#define GAP_TEXTS 4096 /* a power of two */

typedef struct vllm_writer {
    kvio_csv_t *file;
    char text[65536 + 4096];
    size_t length;
    kvio_status_t status;
    gap_text_t gaps[GAP_TEXTS];
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
        vllm_request_t request = request_at(data, i);
        const vllm_request_t *r = &request;
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

/* A gap of the itls list (seconds to the microsecond, as put_number
 * writes it), from its text when that gap was written before. */
static void put_gap(vllm_writer_t *out, bool first, float gap)
{
    char *at = room(out);
    if (!first) {
        *at++ = ',';
        *at++ = ' ';
    }
    uint32_t bits;
    memcpy(&bits, &gap, sizeof(bits));
    gap_text_t *memo = &out->gaps[(bits * 2654435761u) >> 20 & (GAP_TEXTS - 1)];
    if (memo->length > 0 && memo->bits == bits) {
        memcpy(at, memo->text, sizeof(memo->text));
        at += memo->length;
    } else {
        size_t length = kvio_format_fixed(at, gap, 6);
        if (length <= sizeof(memo->text)) {
            memo->bits = bits;
            memo->length = (uint8_t)length;
            memcpy(memo->text, at, length);
        }
        at += length;
    }
    out->length = (size_t)(at - out->text);
}

static void put_itls(vllm_writer_t *out, const vllm_data_t *data)
{
    put_text(out, ",\n  \"itls\": [");
    for (size_t i = 0; i < data->count; i++) {
        put_text(out, i > 0 ? ", [" : "[");
        size_t begin, end;
        gaps_of(data, data->samples[i].id, &begin, &end);
        for (size_t k = begin; k < end; k++)
            put_gap(out, k == begin, data->grouped[k]);
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
    vllm_data_t data = {0};
    if (status == KVIO_OK)
        take_samples(source->samples, &data);
    if (status == KVIO_OK)
        status = group_itls(source->itls, &data, error_p, error_len);
    json_t *vllm = status == KVIO_OK ? scalars(source, &data, percentiles, num_percentiles) : NULL;
    if (status == KVIO_OK && vllm == NULL) {
        snprintf(error_p, error_len, "vllm.json: out of memory");
        status = KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK && data.grouped == NULL && source->itls != NULL &&
        source->itls->count + source->itls->dropped > 0)
        /* Not every gap was kept: the lists and the statistics would be of a
         * part, so ITL's come from the run's histogram and itls is left out. */
        json_object_set_new(
            vllm, "kvio_itls_omitted",
            source->itls->dropped > 0
                ? json_sprintf("%llu gaps between tokens past the %u a run keeps; ITL from the "
                               "histogram (relative error < 1/256)",
                               (unsigned long long)source->itls->dropped, KVIO_SERVE_ITLS_MAX)
                : json_sprintf("request ids up to %u only are grouped; ITL from the histogram "
                               "(relative error < 1/256)", MAX_GROUPED_ID));
    vllm_writer_t *out = status == KVIO_OK ? calloc(1, sizeof(*out)) : NULL;
    if (status == KVIO_OK && out == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK &&
        (status = kvio_csv_open(source->results, "vllm.json", NULL, &out->file)) != KVIO_OK)
        snprintf(error_p, error_len, "vllm.json: cannot be created: %s", kvio_strerror(status));
    if (status == KVIO_OK) {
        char *head = json_dumps(vllm, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
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
        if (data.grouped != NULL)
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
    free(data.grouped);
    free(data.starts);
    if (status == KVIO_OK)
        *scalars_p = vllm;
    else
        json_decref(vllm);
    return status;
}
