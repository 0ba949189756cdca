/* The in-memory trace shared by every trace format: storage, the format
 * registry (name -> reader), stable sorting by time, and bad-line reporting
 * ("file:line: reason", or skipped and counted). */
#include "workloads/trace_int.h"

#include "kvio/log.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SKIP_WARNINGS 5

static const struct {
    const char *name;
    kvio_trace_format_t format;
    kvio_status_t (*read)(const char *, const kvio_trace_options_t *, kvio_trace_t **);
} formats[] = {
    {"mooncake", KVIO_TRACE_FORMAT_MOONCAKE, kvio_trace_read_mooncake},
};

#define NUM_FORMATS (sizeof(formats) / sizeof(formats[0]))

kvio_status_t kvio_trace_format_from_name(const char *name, kvio_trace_format_t *format_p)
{
    for (size_t i = 0; i < NUM_FORMATS; i++) {
        if (name != NULL && strcmp(name, formats[i].name) == 0) {
            *format_p = formats[i].format;
            return KVIO_OK;
        }
    }
    kvio_error("unknown trace format '%s' (known: mooncake)", name ? name : "(null)");
    return KVIO_ERR_INVALID;
}

kvio_status_t kvio_trace_read(const char *path, kvio_trace_format_t format,
                              const kvio_trace_options_t *options, kvio_trace_t **trace_p)
{
    for (size_t i = 0; i < NUM_FORMATS; i++) {
        if (formats[i].format == format)
            return formats[i].read(path, options, trace_p);
    }
    return KVIO_ERR_INVALID;
}

kvio_status_t kvio_trace_new(kvio_trace_t **trace_p)
{
    kvio_trace_t *trace = calloc(1, sizeof(*trace));
    if (trace == NULL)
        return KVIO_ERR_NOMEM;
    *trace_p = trace;
    return KVIO_OK;
}

kvio_status_t kvio_trace_reserve_ids(kvio_trace_t *trace, size_t count, uint64_t **ids_p)
{
    size_t needed = trace->num_ids + count;
    if (needed > trace->ids_capacity) {
        size_t bigger = trace->ids_capacity ? trace->ids_capacity : 4096;
        while (bigger < needed)
            bigger *= 2;
        uint64_t *resized = realloc(trace->ids, bigger * sizeof(uint64_t));
        if (resized == NULL)
            return KVIO_ERR_NOMEM;
        trace->ids = resized;
        trace->ids_capacity = bigger;
    }
    *ids_p = trace->ids + trace->num_ids;
    return KVIO_OK;
}

kvio_status_t kvio_trace_push(kvio_trace_t *trace, double timestamp, uint64_t input_length,
                              uint64_t output_length, size_t num_hash_ids, size_t line)
{
    if (trace->num_requests == trace->requests_capacity) {
        size_t bigger = trace->requests_capacity ? 2 * trace->requests_capacity : 256;
        kvio_trace_request_t *resized = realloc(trace->requests, bigger * sizeof(*resized));
        if (resized == NULL)
            return KVIO_ERR_NOMEM;
        trace->requests = resized;
        trace->requests_capacity = bigger;
    }
    trace->requests[trace->num_requests++] = (kvio_trace_request_t){
        .timestamp = timestamp,
        .input_length = input_length,
        .output_length = output_length,
        .hash_ids = (const uint64_t *)(uintptr_t)trace->num_ids,
        .num_hash_ids = num_hash_ids,
        .line = line,
    };
    trace->num_ids += num_hash_ids;
    return KVIO_OK;
}

void kvio_trace_finish(kvio_trace_t *trace)
{
    for (size_t i = 0; i < trace->num_requests; i++) {
        uintptr_t offset = (uintptr_t)trace->requests[i].hash_ids;
        trace->requests[i].hash_ids = trace->ids + offset;
    }
}

kvio_status_t kvio_trace_bad_line(kvio_trace_t *trace, const kvio_trace_options_t *options,
                                  const char *path, size_t line, const char *reason)
{
    if (options == NULL || !options->skip_bad) {
        kvio_error("%s:%zu: %s", path, line, reason);
        return KVIO_ERR_PARSE;
    }
    trace->num_skipped++;
    if (trace->num_skipped <= MAX_SKIP_WARNINGS)
        kvio_warn("%s:%zu: %s (skipped)", path, line, reason);
    return KVIO_OK;
}

size_t kvio_trace_num_requests(const kvio_trace_t *trace)
{
    return trace->num_requests;
}

size_t kvio_trace_num_skipped(const kvio_trace_t *trace)
{
    return trace->num_skipped;
}

const kvio_trace_request_t *kvio_trace_request(const kvio_trace_t *trace, size_t index)
{
    return index < trace->num_requests ? &trace->requests[index] : NULL;
}

/* Lines are unique, so ordering by (timestamp, line) is a stable sort. */
static int compare_time(const void *left, const void *right)
{
    const kvio_trace_request_t *a = left, *b = right;
    if (a->timestamp != b->timestamp)
        return a->timestamp < b->timestamp ? -1 : 1;
    return (a->line > b->line) - (a->line < b->line);
}

void kvio_trace_sort_by_time(kvio_trace_t *trace)
{
    qsort(trace->requests, trace->num_requests, sizeof(*trace->requests), compare_time);
}

void kvio_trace_destroy(kvio_trace_t *trace)
{
    if (trace == NULL)
        return;
    free(trace->requests);
    free(trace->ids);
    free(trace);
}
