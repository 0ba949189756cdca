/* Measurements kvio fit reads, in the formats benchmarks write: vllm bench
 * latency's --output-json (a batch's end-to-end latency; the shape comes
 * from the command line, as the JSON does not hold it), vllm bench serve's
 * --save-result (mean TTFT and TPOT of its requests), SGLang
 * bench_one_batch's --result-filename (JSON lines of prefill and median
 * decode latency) and a CSV of steps. */
#include "kvio/cost.h"

#include "kvio/array.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const kvio_fit_format_names[] = {"auto", "csv", "vllm-latency", "vllm-serve",
                                             "sglang", NULL};

/* The list being read, and where. */
typedef struct reader {
    const char *path;
    kvio_cost_measurement_t **list;
    size_t *count, capacity;
    char *error;
    size_t error_len;
} reader_t;

static kvio_status_t append(reader_t *reader, const kvio_cost_measurement_t *measurement)
{
    kvio_status_t status =
        measurement->run ? kvio_cost_check_run_shape(&measurement->shape, measurement->origin,
                                                     reader->error, reader->error_len)
                         : KVIO_OK;
    if (status != KVIO_OK)
        return status;
    status = kvio_array_reserve((void **)reader->list, &reader->capacity, *reader->count + 1,
                                sizeof(**reader->list), 16);
    if (status == KVIO_OK)
        (*reader->list)[(*reader->count)++] = *measurement;
    return status;
}

/* A positive number at key of object (at most 1e15: counts and times a
 * run can have), or an error naming the key. */
static kvio_status_t positive(reader_t *reader, const char *where, json_t *object,
                              const char *key, double *value_p)
{
    json_t *value = json_object_get(object, key);
    if (!json_is_number(value) || !(json_number_value(value) > 0) ||
        !(json_number_value(value) <= 1e15)) {
        snprintf(reader->error, reader->error_len,
                 "%s: %s: missing or not a positive number (at most 1e15)", where, key);
        return KVIO_ERR_PARSE;
    }
    *value_p = json_number_value(value);
    return KVIO_OK;
}

/* vllm bench latency: {"avg_latency": seconds, ...} of one batch of the
 * shape it was run with. */
static kvio_status_t read_vllm_latency(reader_t *reader, json_t *root,
                                       const kvio_cost_run_shape_t *shape)
{
    double seconds;
    kvio_status_t status = positive(reader, reader->path, root, "avg_latency", &seconds);
    if (status != KVIO_OK)
        return status;
    kvio_cost_measurement_t measurement = {.run = true, .shape = *shape,
                                           .metric = KVIO_POINT_TOTAL_MS,
                                           .measured = seconds * 1e3};
    snprintf(measurement.origin, sizeof(measurement.origin),
             "%.200s: %llu x (%llu in, %llu out), end to end", reader->path,
             (unsigned long long)shape->batch_size, (unsigned long long)shape->input_tokens,
             (unsigned long long)shape->output_tokens);
    return append(reader, &measurement);
}

/* vllm bench serve: its requests' mean lengths, mean TTFT (a prefill of
 * the mean prompt alone) and mean TPOT (a decode batch of max_concurrency). */
static kvio_status_t read_vllm_serve(reader_t *reader, json_t *root)
{
    double completed, inputs, outputs, ttft, tpot;
    kvio_status_t status = KVIO_OK;
    const char *keys[5] = {"completed", "total_input_tokens", "total_output_tokens",
                           "mean_ttft_ms", "mean_tpot_ms"};
    double *values[5] = {&completed, &inputs, &outputs, &ttft, &tpot};
    for (int k = 0; k < 5 && status == KVIO_OK; k++)
        status = positive(reader, reader->path, root, keys[k], values[k]);
    if (status != KVIO_OK)
        return status;
    json_t *concurrency = json_object_get(root, "max_concurrency");
    if (!json_is_integer(concurrency) || json_integer_value(concurrency) < 1) {
        snprintf(reader->error, reader->error_len,
                 "%s: max_concurrency: not set; without it the requests queue and TTFT holds "
                 "their waits (run vllm bench serve with --max-concurrency, 1 for a clean "
                 "prefill)", reader->path);
        return KVIO_ERR_PARSE;
    }
    uint64_t input = (uint64_t)llround(inputs / completed);
    uint64_t output = (uint64_t)llround(outputs / completed);
    kvio_cost_measurement_t prefill = {
        .run = true, .shape = {.batch_size = 1, .input_tokens = input > 0 ? input : 1,
                               .output_tokens = 1},
        .metric = KVIO_POINT_TTFT_MS, .measured = ttft};
    kvio_cost_measurement_t decode = {
        .run = true, .shape = {.batch_size = (uint64_t)json_integer_value(concurrency),
                               .input_tokens = prefill.shape.input_tokens,
                               .output_tokens = output > 1 ? output : 2},
        .metric = KVIO_POINT_DECODE_MS, .measured = tpot};
    snprintf(prefill.origin, sizeof(prefill.origin), "%.200s: mean TTFT, %llu-token prompts",
             reader->path, (unsigned long long)prefill.shape.input_tokens);
    snprintf(decode.origin, sizeof(decode.origin), "%.200s: mean TPOT at concurrency %llu",
             reader->path, (unsigned long long)decode.shape.batch_size);
    status = append(reader, &prefill);
    return status == KVIO_OK ? append(reader, &decode) : status;
}

/* One line of SGLang's bench_one_batch results: its batch's prefill latency
 * and median decode latency, seconds. */
static kvio_status_t read_sglang_line(reader_t *reader, json_t *line, unsigned long number)
{
    char where[512];
    snprintf(where, sizeof(where), "%s:%lu", reader->path, number);
    double batch, input, output, prefill_s, decode_s;
    const char *keys[5] = {"batch_size", "input_len", "output_len", "prefill_latency",
                           "median_decode_latency"};
    double *values[5] = {&batch, &input, &output, &prefill_s, &decode_s};
    kvio_status_t status = KVIO_OK;
    for (int k = 0; k < 5 && status == KVIO_OK; k++)
        status = positive(reader, where, line, keys[k], values[k]);
    if (status != KVIO_OK)
        return status;
    kvio_cost_run_shape_t shape = {.batch_size = (uint64_t)batch,
                                   .input_tokens = (uint64_t)input,
                                   .output_tokens = output >= 2 ? (uint64_t)output : 2};
    kvio_cost_measurement_t prefill = {.run = true, .shape = shape,
                                       .metric = KVIO_POINT_PREFILL_MS,
                                       .measured = prefill_s * 1e3};
    kvio_cost_measurement_t decode = {.run = true, .shape = shape,
                                      .metric = KVIO_POINT_DECODE_MS,
                                      .measured = decode_s * 1e3};
    snprintf(prefill.origin, sizeof(prefill.origin), "%.200s: prefill of %llu x %llu", where,
             (unsigned long long)shape.batch_size, (unsigned long long)shape.input_tokens);
    snprintf(decode.origin, sizeof(decode.origin), "%.200s: decode step of %llu", where,
             (unsigned long long)shape.batch_size);
    status = append(reader, &prefill);
    return status == KVIO_OK ? append(reader, &decode) : status;
}

/* JSON lines: each its own document. */
static kvio_status_t read_sglang(reader_t *reader, const char *text)
{
    unsigned long number = 0;
    size_t read = 0;
    const char *line = text;
    kvio_status_t status = KVIO_OK;
    while (status == KVIO_OK && *line != '\0') {
        const char *end = strchr(line, '\n');
        size_t length = end != NULL ? (size_t)(end - line) : strlen(line);
        number++;
        size_t blank = strspn(line, " \t\r");
        if (blank < length) {
            json_error_t json_error;
            json_t *object = json_loadb(line, length, 0, &json_error);
            if (!json_is_object(object)) {
                snprintf(reader->error, reader->error_len, "%s:%lu: not a JSON object (%s)",
                         reader->path, number, object == NULL ? json_error.text : "a value");
                status = KVIO_ERR_PARSE;
            } else {
                status = read_sglang_line(reader, object, number);
                read++;
            }
            json_decref(object);
        }
        line = end != NULL ? end + 1 : line + length;
    }
    if (status == KVIO_OK && read == 0) {
        snprintf(reader->error, reader->error_len, "%s: no results", reader->path);
        status = KVIO_ERR_PARSE;
    }
    return status;
}

/* A CSV of steps (kvio_cost_read_samples). */
static kvio_status_t read_csv(reader_t *reader)
{
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0;
    kvio_status_t status = kvio_cost_read_samples(reader->path, &samples, &count, reader->error,
                                                  reader->error_len);
    for (size_t i = 0; status == KVIO_OK && i < count; i++) {
        kvio_cost_measurement_t measurement = {.step = samples[i],
                                               .measured = samples[i].time_ms};
        snprintf(measurement.origin, sizeof(measurement.origin), "%.200s:%zu", reader->path, i + 2);
        status = append(reader, &measurement);
    }
    free(samples);
    return status;
}

/* The whole of a regular file of at most 256 MiB (malloc'd, NUL-ended). */
static kvio_status_t read_whole(reader_t *reader, char **text_p)
{
    struct stat info;
    if (stat(reader->path, &info) != 0) {
        snprintf(reader->error, reader->error_len, "%s: %s", reader->path, strerror(errno));
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : KVIO_ERR_IO;
    }
    if (!S_ISREG(info.st_mode) || info.st_size > (off_t)256 << 20) {
        snprintf(reader->error, reader->error_len, "%s: %s", reader->path,
                 S_ISREG(info.st_mode) ? "larger than 256 MiB" : "not a regular file");
        return KVIO_ERR_INVALID;
    }
    FILE *file = fopen(reader->path, "r");
    char *text = file != NULL ? malloc((size_t)info.st_size + 1) : NULL;
    size_t length = text != NULL ? fread(text, 1, (size_t)info.st_size, file) : 0;
    if (file != NULL)
        fclose(file);
    if (text == NULL) {
        snprintf(reader->error, reader->error_len, "%s: %s", reader->path,
                 file == NULL ? strerror(errno) : "out of memory");
        return file == NULL ? KVIO_ERR_IO : KVIO_ERR_NOMEM;
    }
    text[length] = '\0';
    *text_p = text;
    return KVIO_OK;
}

/* A JSON document by its keys: vllm bench latency, vllm bench serve, or
 * one SGLang result. */
static int json_format(json_t *root)
{
    if (json_object_get(root, "avg_latency") != NULL)
        return KVIO_FIT_VLLM_LATENCY;
    if (json_object_get(root, "mean_ttft_ms") != NULL)
        return KVIO_FIT_VLLM_SERVE;
    if (json_object_get(root, "median_decode_latency") != NULL)
        return KVIO_FIT_SGLANG;
    return KVIO_FIT_AUTO;
}

kvio_status_t kvio_cost_read_measurements(const char *path, int format,
                                          const kvio_cost_run_shape_t *latency,
                                          kvio_cost_measurement_t **list_p, size_t *count_p,
                                          char *error_p, size_t error_len)
{
    reader_t reader = {.path = path, .list = list_p, .count = count_p, .capacity = *count_p,
                       .error = error_p, .error_len = error_len};
    if (format == KVIO_FIT_CSV)
        return read_csv(&reader);
    char *text = NULL;
    kvio_status_t status = read_whole(&reader, &text);
    if (status != KVIO_OK)
        return status;
    const char *first = text + strspn(text, " \t\r\n");
    json_t *root = NULL;
    if (format == KVIO_FIT_AUTO && *first != '{') {
        format = KVIO_FIT_CSV;
    } else if (format != KVIO_FIT_SGLANG) {
        json_error_t json_error;
        root = json_loads(text, 0, &json_error);
        if (format == KVIO_FIT_AUTO)
            format = json_is_object(root) ? json_format(root) : KVIO_FIT_SGLANG;
        if (format != KVIO_FIT_SGLANG && !json_is_object(root)) {
            snprintf(error_p, error_len, "%s:%d: not a JSON object (%s)", path, json_error.line,
                     root == NULL ? json_error.text : "another value");
            status = KVIO_ERR_PARSE;
        }
    }
    if (status == KVIO_OK) {
        switch (format) {
        case KVIO_FIT_CSV: status = read_csv(&reader); break;
        case KVIO_FIT_VLLM_LATENCY: status = read_vllm_latency(&reader, root, latency); break;
        case KVIO_FIT_VLLM_SERVE: status = read_vllm_serve(&reader, root); break;
        case KVIO_FIT_SGLANG: status = read_sglang(&reader, text); break;
        default:
            snprintf(error_p, error_len,
                     "%s: not a result kvio fit reads (a vllm bench latency or serve JSON has "
                     "avg_latency or mean_ttft_ms, SGLang's bench_one_batch lines "
                     "median_decode_latency; a CSV its header)", path);
            status = KVIO_ERR_PARSE;
            break;
        }
    }
    json_decref(root);
    free(text);
    return status;
}

double kvio_cost_measurement_predict(const kvio_cost_t *cost,
                                     const kvio_cost_measurement_t *measurement)
{
    if (measurement->run)
        return kvio_cost_run_metric(cost, &measurement->shape, measurement->metric);
    const kvio_cost_sample_t *step = &measurement->step;
    kvio_batch_t batch = {0};
    if (step->prefill_tokens >= 1)
        kvio_batch_add_prefill(&batch, (uint64_t)llround(step->prefill_tokens), 0);
    uint64_t decodes = (uint64_t)llround(step->decode_seqs);
    for (uint64_t d = 0; d < decodes; d++)
        kvio_batch_add_decode(&batch, (uint64_t)llround(step->context_tokens / (double)decodes));
    kvio_cost_breakdown_t breakdown;
    kvio_cost_iteration(cost, &batch, &breakdown);
    return breakdown.time_s * 1e3;
}
