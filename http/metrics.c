/* vLLM's /metrics as prometheus_client prints them (Prometheus text format
 * 0.0.4): the gauges and counters every serve rank publishes through the
 * front end, and the latency histograms the server keeps per rank, with
 * vLLM's names, help texts, labels and buckets (vllm/v1/metrics/loggers.py). */
#include "http/http_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's buckets, in seconds. */
static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                      0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                     0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                     7.5,  10.0,  20.0, 40.0,  80.0};
static const double request_buckets[] = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                         5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

typedef struct histogram_family {
    const char *name;
    const char *help;
    const double *bounds;
    size_t num_bounds;
} histogram_family_t;

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

static const histogram_family_t histograms[KVIO_HTTP_HISTS] = {
    [KVIO_HTTP_HIST_TTFT] = {"vllm:time_to_first_token_seconds",
                             "Histogram of time to first token in seconds.", ttft_buckets,
                             COUNT(ttft_buckets)},
    [KVIO_HTTP_HIST_ITL] = {"vllm:inter_token_latency_seconds",
                            "Histogram of inter-token latency in seconds.", itl_buckets,
                            COUNT(itl_buckets)},
    [KVIO_HTTP_HIST_E2E] = {"vllm:e2e_request_latency_seconds",
                            "Histogram of e2e request latency in seconds.", request_buckets,
                            COUNT(request_buckets)},
    [KVIO_HTTP_HIST_QUEUE] = {"vllm:request_queue_time_seconds",
                              "Histogram of time spent in WAITING phase for request.",
                              request_buckets, COUNT(request_buckets)},
};

static const char *const finish_reasons[KVIO_FINISH_REASONS] = {"stop", "length", "abort"};

void kvio_http_observe(kvio_http_rank_metrics_t *metrics, int hist, double seconds)
{
    const histogram_family_t *family = &histograms[hist];
    size_t bucket = 0;
    while (bucket < family->num_bounds && seconds > family->bounds[bucket])
        bucket++;
    metrics->buckets[hist][bucket]++;
    metrics->count[hist]++;
    metrics->sum[hist] += seconds;
}

void kvio_http_format_number(double value, char text_p[32])
{
    if (isinf(value)) {
        snprintf(text_p, 32, value > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (isnan(value)) {
        snprintf(text_p, 32, "NaN");
        return;
    }
    /* Python's repr: "57.0", or the shortest digits that read back. */
    if (value == floor(value) && fabs(value) < 1e16) {
        snprintf(text_p, 32, "%.1f", value);
    } else {
        for (int precision = 1; precision <= 17; precision++) {
            snprintf(text_p, 32, "%.*g", precision, value);
            if (strtod(text_p, NULL) == value)
                break;
        }
    }
    /* prometheus_client's floatToGoString: more than six digits before the
     * point become d.ddde+0N (its "+0" even before two digits). */
    const char *dot = strchr(text_p, '.');
    if (value > 0 && dot != NULL && dot - text_p > 6 && strchr(text_p, 'e') == NULL) {
        int exponent = (int)(dot - text_p) - 1;
        char mantissa[32];
        snprintf(mantissa, sizeof(mantissa), "%c.%.*s%s", text_p[0], exponent, text_p + 1,
                 dot + 1);
        size_t length = strlen(mantissa);
        while (length > 0 && (mantissa[length - 1] == '0' || mantissa[length - 1] == '.'))
            mantissa[--length] = '\0';
        /* At most 17 significant digits: the result fits 32 bytes. */
        char result[64];
        snprintf(result, sizeof(result), "%se+0%d", mantissa, exponent);
        snprintf(text_p, 32, "%.31s", result);
    }
}

/* Rendering into a growing buffer; the first failure sticks. */
typedef struct out {
    char **text_p;
    size_t *length_p, *capacity_p;
    bool ok;
} out_t;

static void put(out_t *out, const char *format, ...) __attribute__((format(printf, 2, 3)));

static void put(out_t *out, const char *format, ...)
{
    char line[512];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof(line), format, args);
    va_end(args);
    if (out->ok && length > 0)
        out->ok = kvio_http_append(out->text_p, out->length_p, out->capacity_p, line,
                                   (size_t)length < sizeof(line) ? (size_t)length
                                                                 : sizeof(line) - 1);
}

static void family_head(out_t *out, const char *name, const char *help, const char *type)
{
    put(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample per rank: labels engine and model_name (sorted, as
 * prometheus_client prints them). */
static void samples(out_t *out, const char *name, const char *model, uint32_t num_ranks,
                    const double *values)
{
    for (uint32_t r = 0; r < num_ranks; r++) {
        char number[32];
        kvio_http_format_number(values[r], number);
        put(out, "%s{engine=\"%u\",model_name=\"%s\"} %s\n", name, r, model, number);
    }
}

/* A counter: name_total, then its _created gauge. */
static void counter(out_t *out, const char *name, const char *help, const char *model,
                    uint32_t num_ranks, const double *values, double created)
{
    char total[128], created_name[128], number[32];
    snprintf(total, sizeof(total), "%s_total", name);
    snprintf(created_name, sizeof(created_name), "%s_created", name);
    family_head(out, total, help, "counter");
    samples(out, total, model, num_ranks, values);
    family_head(out, created_name, help, "gauge");
    kvio_http_format_number(created, number);
    for (uint32_t r = 0; r < num_ranks; r++)
        put(out, "%s{engine=\"%u\",model_name=\"%s\"} %s\n", created_name, r, model, number);
}

static void histogram(out_t *out, int hist, const char *model, uint32_t num_ranks,
                      const kvio_http_rank_metrics_t *metrics, double created)
{
    const histogram_family_t *family = &histograms[hist];
    char number[32];
    family_head(out, family->name, family->help, "histogram");
    for (uint32_t r = 0; r < num_ranks; r++) {
        uint64_t cumulative = 0;
        for (size_t b = 0; b <= family->num_bounds; b++) {
            cumulative += metrics[r].buckets[hist][b];
            char bound[32];
            kvio_http_format_number(b < family->num_bounds ? family->bounds[b] : INFINITY,
                                    bound);
            kvio_http_format_number((double)cumulative, number);
            put(out, "%s_bucket{engine=\"%u\",le=\"%s\",model_name=\"%s\"} %s\n", family->name,
                r, bound, model, number);
        }
        kvio_http_format_number((double)metrics[r].count[hist], number);
        put(out, "%s_count{engine=\"%u\",model_name=\"%s\"} %s\n", family->name, r, model,
            number);
        kvio_http_format_number(metrics[r].sum[hist], number);
        put(out, "%s_sum{engine=\"%u\",model_name=\"%s\"} %s\n", family->name, r, model, number);
    }
    char created_name[128];
    snprintf(created_name, sizeof(created_name), "%s_created", family->name);
    family_head(out, created_name, family->help, "gauge");
    kvio_http_format_number(created, number);
    for (uint32_t r = 0; r < num_ranks; r++)
        put(out, "%s{engine=\"%u\",model_name=\"%s\"} %s\n", created_name, r, model, number);
}

/* request_success: one sample per rank and finish reason. */
static void request_success(out_t *out, const char *model, uint32_t num_ranks,
                            const kvio_http_rank_metrics_t *metrics, double created)
{
    const char *help = "Count of successfully processed requests.";
    char number[32];
    family_head(out, "vllm:request_success_total", help, "counter");
    for (uint32_t r = 0; r < num_ranks; r++) {
        for (int reason = 0; reason < KVIO_FINISH_REASONS; reason++) {
            kvio_http_format_number((double)metrics[r].finished[reason], number);
            put(out, "vllm:request_success_total{engine=\"%u\",finished_reason=\"%s\","
                "model_name=\"%s\"} %s\n", r, finish_reasons[reason], model, number);
        }
    }
    family_head(out, "vllm:request_success_created", help, "gauge");
    kvio_http_format_number(created, number);
    for (uint32_t r = 0; r < num_ranks; r++)
        for (int reason = 0; reason < KVIO_FINISH_REASONS; reason++)
            put(out, "vllm:request_success_created{engine=\"%u\",finished_reason=\"%s\","
                "model_name=\"%s\"} %s\n", r, finish_reasons[reason], model, number);
}

bool kvio_http_metrics_render(const char *model_name, uint32_t num_ranks,
                              const kvio_frontend_state_t *states,
                              const kvio_http_rank_metrics_t *metrics, double created_unix,
                              char **text_p, size_t *length_p, size_t *capacity_p)
{
    out_t out = {.text_p = text_p, .length_p = length_p, .capacity_p = capacity_p, .ok = true};
    double *values = calloc(num_ranks > 0 ? num_ranks : 1, sizeof(double));
    if (values == NULL)
        return false;
    const char *model = model_name;
#define EACH_RANK(expression)                                                               \
    for (uint32_t r = 0; r < num_ranks; r++)                                                 \
        values[r] = (double)(expression);
    family_head(&out, "vllm:num_requests_running",
                "Number of requests in model execution batches.", "gauge");
    EACH_RANK(states[r].running);
    samples(&out, "vllm:num_requests_running", model, num_ranks, values);
    family_head(&out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                "gauge");
    EACH_RANK(states[r].waiting);
    samples(&out, "vllm:num_requests_waiting", model, num_ranks, values);
    family_head(&out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                "gauge");
    EACH_RANK(states[r].kv_usage);
    samples(&out, "vllm:kv_cache_usage_perc", model, num_ranks, values);
    EACH_RANK(states[r].prefix_queries);
    counter(&out, "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", model, num_ranks,
            values, created_unix);
    EACH_RANK(states[r].prefix_hits);
    counter(&out, "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.", model, num_ranks, values,
            created_unix);
    EACH_RANK(states[r].preemptions);
    counter(&out, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
            model, num_ranks, values, created_unix);
    EACH_RANK(states[r].prompt_tokens);
    counter(&out, "vllm:prompt_tokens", "Number of prefill tokens processed.", model, num_ranks,
            values, created_unix);
    EACH_RANK(states[r].generation_tokens);
    counter(&out, "vllm:generation_tokens", "Number of generation tokens processed.", model,
            num_ranks, values, created_unix);
#undef EACH_RANK
    request_success(&out, model, num_ranks, metrics, created_unix);
    for (int hist = 0; hist < KVIO_HTTP_HISTS; hist++)
        histogram(&out, hist, model, num_ranks, metrics, created_unix);
    free(values);
    return out.ok;
}
