/* JSONL traces, one request per line: Mooncake's fields (timestamp in ms,
 * input_length, output_length, hash_ids of trace blocks) and, in kvio
 * format, the extras that make export and import lossless (id, arrival_ns,
 * max_tokens, priority, session, turn, segments, output_id, block_tokens).
 * Every value is checked; a bad one is a parse error with its reason. */
#include "workloads/workloads_int.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Reads an integer field into [minimum, maximum]; absent is an error when
 * required, else leaves *value_p. */
static kvio_status_t get_integer(json_t *object, const char *key, bool required,
                                 long long minimum, long long maximum, long long *value_p,
                                 char *error_p, size_t error_len)
{
    json_t *value = json_object_get(object, key);
    if (value == NULL || json_is_null(value)) {
        if (!required)
            return KVIO_OK;
        snprintf(error_p, error_len, "missing field '%s'", key);
        return KVIO_ERR_PARSE;
    }
    long long number;
    if (json_is_integer(value)) {
        number = json_integer_value(value);
    } else if (json_is_real(value) && json_real_value(value) == floor(json_real_value(value)) &&
               fabs(json_real_value(value)) < 9e18) {
        number = (long long)json_real_value(value);
    } else {
        snprintf(error_p, error_len, "'%s' is not an integer", key);
        return KVIO_ERR_PARSE;
    }
    if (number < minimum) {
        snprintf(error_p, error_len, "'%s' is %lld, %s", key, number,
                 number < 0 ? "negative" : "too small");
        return KVIO_ERR_PARSE;
    }
    if (number > maximum) {
        snprintf(error_p, error_len, "'%s' is %lld, which is absurd (more than %lld)", key,
                 number, maximum);
        return KVIO_ERR_PARSE;
    }
    *value_p = number;
    return KVIO_OK;
}

/* Mooncake's timestamp: milliseconds, integer or fractional. */
static kvio_status_t get_timestamp(json_t *object, int64_t *arrival_ns_p, char *error_p,
                                   size_t error_len)
{
    json_t *value = json_object_get(object, "timestamp");
    if (value == NULL) {
        snprintf(error_p, error_len, "missing field 'timestamp'");
        return KVIO_ERR_PARSE;
    }
    if (!json_is_number(value)) {
        snprintf(error_p, error_len, "'timestamp' is not a number");
        return KVIO_ERR_PARSE;
    }
    double ms = json_number_value(value);
    if (!(ms >= 0) || ms > 1e12) {
        snprintf(error_p, error_len, "'timestamp' %.17g ms is %s", ms,
                 ms < 0 ? "negative" : "absurd (more than 1e12 ms)");
        return KVIO_ERR_PARSE;
    }
    if (json_is_integer(value))
        *arrival_ns_p = (int64_t)json_integer_value(value) * 1000000;
    else
        *arrival_ns_p = llround(ms * 1e6);
    return KVIO_OK;
}

static kvio_status_t read_hash_ids(kvio_trace_t *trace, kvio_trace_record_t *record,
                                   json_t *ids, uint32_t block_tokens, char *error_p,
                                   size_t error_len)
{
    if (!json_is_array(ids)) {
        snprintf(error_p, error_len, "'hash_ids' is not an array");
        return KVIO_ERR_PARSE;
    }
    size_t count = json_array_size(ids);
    size_t needed = (record->request.input_tokens + (size_t)block_tokens - 1) / block_tokens;
    if (count < needed) {
        snprintf(error_p, error_len,
                 "'hash_ids' has %zu ids, but input_length %u needs %zu of %u tokens", count,
                 record->request.input_tokens, needed, block_tokens);
        return KVIO_ERR_PARSE;
    }
    if (count > KVIO_STREAM_MAX_TOKENS) {
        snprintf(error_p, error_len, "'hash_ids' has an absurd %zu ids", count);
        return KVIO_ERR_PARSE;
    }
    uint64_t *out = kvio_trace_reserve_hash_ids(trace, count);
    if (out == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < count; i++) {
        json_t *id = json_array_get(ids, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0) {
            snprintf(error_p, error_len, "'hash_ids'[%zu] is not a non-negative integer", i);
            return KVIO_ERR_PARSE;
        }
        out[i] = (uint64_t)json_integer_value(id);
    }
    trace->num_hash_ids += count;
    record->request.num_trace_hash_ids = (uint32_t)count;
    record->request.trace_block_tokens = block_tokens;
    return KVIO_OK;
}

static kvio_status_t read_segments(kvio_trace_t *trace, kvio_trace_record_t *record,
                                   json_t *segments, char *error_p, size_t error_len)
{
    if (!json_is_array(segments) || json_array_size(segments) == 0) {
        snprintf(error_p, error_len, "'segments' is not a non-empty array");
        return KVIO_ERR_PARSE;
    }
    size_t count = json_array_size(segments);
    if (count > record->request.input_tokens) {
        snprintf(error_p, error_len, "'segments' has more entries than input_length tokens");
        return KVIO_ERR_PARSE;
    }
    kvio_segment_t *out = kvio_trace_reserve_segments(trace, count);
    if (out == NULL)
        return KVIO_ERR_NOMEM;
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        json_t *segment = json_array_get(segments, i);
        json_t *parts[3];
        for (size_t p = 0; p < 3; p++)
            parts[p] = json_array_get(segment, p);
        if (!json_is_array(segment) || json_array_size(segment) != 3 ||
            !json_is_integer(parts[0]) || !json_is_integer(parts[1]) ||
            !json_is_integer(parts[2])) {
            snprintf(error_p, error_len,
                     "'segments'[%zu] is not [content_id, offset, tokens] integers", i);
            return KVIO_ERR_PARSE;
        }
        long long content = json_integer_value(parts[0]);
        long long offset = json_integer_value(parts[1]);
        long long tokens = json_integer_value(parts[2]);
        if (content < 0 || offset < 0 || tokens < 1 || tokens > KVIO_STREAM_MAX_TOKENS ||
            offset + tokens > (long long)UINT32_MAX) {
            snprintf(error_p, error_len,
                     "'segments'[%zu] is out of range (content_id >= 0, offset >= 0, "
                     "1 <= tokens <= %u, offset + tokens < 2^32)",
                     i, KVIO_STREAM_MAX_TOKENS);
            return KVIO_ERR_PARSE;
        }
        out[i] = (kvio_segment_t){(uint64_t)content, (uint32_t)offset, (uint32_t)tokens};
        total += (uint64_t)tokens;
    }
    if (total != record->request.input_tokens) {
        snprintf(error_p, error_len, "'segments' hold %llu tokens but input_length is %u",
                 (unsigned long long)total, record->request.input_tokens);
        return KVIO_ERR_PARSE;
    }
    trace->num_segments += count;
    record->request.num_segments = (uint32_t)count;
    return KVIO_OK;
}

static kvio_status_t parse_object(kvio_trace_t *trace, json_t *object, bool extras,
                                  char *error_p, size_t error_len)
{
    kvio_trace_record_t *record = kvio_trace_add_record(trace);
    if (record == NULL)
        return KVIO_ERR_NOMEM;
    kvio_request_t *request = &record->request;
    long long value = 0;
    kvio_status_t status = KVIO_OK;
    bool have_time = false;
    if (extras) {
        value = -1;
        status = get_integer(object, "arrival_ns", false, 0, INT64_MAX, &value, error_p,
                             error_len);
        if (status != KVIO_OK)
            return status;
        if (value >= 0) {
            request->arrival_ns = value;
            have_time = true;
        }
    }
    if (!have_time && (status = get_timestamp(object, &request->arrival_ns, error_p,
                                              error_len)) != KVIO_OK)
        return status;
    if ((status = get_integer(object, "input_length", true, 1, KVIO_STREAM_MAX_TOKENS, &value,
                              error_p, error_len)) != KVIO_OK)
        return status;
    request->input_tokens = (uint32_t)value;
    if ((status = get_integer(object, "output_length", true, 0, KVIO_STREAM_MAX_TOKENS, &value,
                              error_p, error_len)) != KVIO_OK)
        return status;
    request->output_tokens = (uint32_t)value;
    request->output_content_id = KVIO_CONTENT_TRACE | (trace->line << 1 | 1);

    json_t *segments = extras ? json_object_get(object, "segments") : NULL;
    if (extras) {
        struct {
            const char *key;
            long long minimum, maximum;
        } fields[] = {
            {"id", 0, INT64_MAX},
            {"max_tokens", 1, KVIO_STREAM_MAX_TOKENS},
            {"priority", INT32_MIN, INT32_MAX},
            {"session", 0, INT64_MAX},
            {"turn", 0, UINT32_MAX},
            {"output_id", 0, INT64_MAX},
        };
        long long values[6] = {-1, 0, 0, 0, 0, -1};
        for (size_t i = 0; i < 6; i++) {
            status = get_integer(object, fields[i].key, false, fields[i].minimum,
                                 fields[i].maximum, &values[i], error_p, error_len);
            if (status != KVIO_OK)
                return status;
        }
        if (values[0] >= 0)
            request->id = (uint64_t)values[0];
        request->max_tokens = (uint32_t)values[1];
        if (request->max_tokens > 0 && request->output_tokens > request->max_tokens) {
            snprintf(error_p, error_len, "output_length %u is above max_tokens %u",
                     request->output_tokens, request->max_tokens);
            return KVIO_ERR_PARSE;
        }
        request->priority = (int32_t)values[2];
        request->session_id = (uint64_t)values[3];
        request->turn = (uint32_t)values[4];
        if (values[5] >= 0)
            request->output_content_id = (uint64_t)values[5];
        if (segments != NULL)
            return read_segments(trace, record, segments, error_p, error_len);
    }
    uint32_t block_tokens = (uint32_t)trace->options->block_tokens;
    if (extras) {
        value = block_tokens;
        status = get_integer(object, "block_tokens", false, 1, 1 << 20, &value, error_p,
                             error_len);
        if (status != KVIO_OK)
            return status;
        block_tokens = (uint32_t)value;
    }
    json_t *ids = json_object_get(object, "hash_ids");
    if (ids == NULL) {
        snprintf(error_p, error_len, extras ? "missing field 'segments' or 'hash_ids'"
                                            : "missing field 'hash_ids'");
        return KVIO_ERR_PARSE;
    }
    return read_hash_ids(trace, record, ids, block_tokens, error_p, error_len);
}

static kvio_status_t parse_line(kvio_trace_t *trace, char *line, size_t length, bool extras,
                                char *error_p, size_t error_len)
{
    json_error_t json_error;
    json_t *object = json_loadb(line, length, 0, &json_error);
    if (object == NULL) {
        snprintf(error_p, error_len, "not JSON: %s (column %d)", json_error.text,
                 json_error.column);
        return KVIO_ERR_PARSE;
    }
    kvio_status_t status;
    if (!json_is_object(object)) {
        snprintf(error_p, error_len, "not a JSON object");
        status = KVIO_ERR_PARSE;
    } else {
        status = parse_object(trace, object, extras, error_p, error_len);
    }
    json_decref(object);
    return status;
}

static kvio_status_t parse_kvio(kvio_trace_t *trace, char *line, size_t length, char *error_p,
                                size_t error_len)
{
    return parse_line(trace, line, length, true, error_p, error_len);
}

static kvio_status_t parse_mooncake(kvio_trace_t *trace, char *line, size_t length,
                                    char *error_p, size_t error_len)
{
    return parse_line(trace, line, length, false, error_p, error_len);
}

const kvio_trace_format_ops_t kvio_trace_jsonl_kvio_ops = {
    .name = "kvio",
    .format = KVIO_TRACE_KVIO,
    .parse_line = parse_kvio,
};

const kvio_trace_format_ops_t kvio_trace_jsonl_mooncake_ops = {
    .name = "mooncake",
    .format = KVIO_TRACE_MOONCAKE,
    .parse_line = parse_mooncake,
};
