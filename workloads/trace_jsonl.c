/* JSONL traces, one request per line: Mooncake's fields (timestamp in ms,
 * input_length, output_length, hash_ids of trace blocks) and, in kvio
 * format, the extras that make export and import lossless (id, arrival_ns,
 * max_tokens, priority, session, turn, cache_salt, group, group_index, group_size,
 * segments, output_id, block_tokens).
 * A strict scanner reads the plain Mooncake lines that real traces consist
 * of; any line it does not fully recognise or that is out of range goes
 * through jansson, which checks every value and words the errors. */
#include "workloads/workloads_int.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest timestamp accepted, in ms (about 31 years). */
#define MAX_TIMESTAMP_MS 1e12

/* ---------- fast path: returns false to hand the line to jansson ---------- */

/* What the scanner found on a plain Mooncake line; the ids are written
 * straight into the trace's id pool. */
typedef struct plain_line {
    bool has_timestamp, has_input, has_output, has_ids;
    bool timestamp_is_integer;
    uint64_t timestamp_integer; /* when timestamp_is_integer */
    double timestamp_ms;
    uint64_t input_length, output_length;
    size_t num_ids;
} plain_line_t;

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* A non-negative JSON integer of at most 18 digits (no leading zeros), so
 * that it fits jansson's json_int_t too. */
static bool scan_uint(const char **pp, const char *end, uint64_t *value_p)
{
    const char *p = *pp, *start = *pp;
    uint64_t value = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - start < 19)
        value = value * 10 + (uint64_t)(*p++ - '0');
    size_t digits = (size_t)(p - start);
    if (digits == 0 || digits > 18 || (digits > 1 && *start == '0'))
        return false;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
        return false;
    *pp = p;
    *value_p = value;
    return true;
}

/* scan_uint for an id in a hash_ids array, the hot loop of a trace load:
 * up to 7 digits with at least 8 bytes left are read as one little-endian
 * word, without a branch per digit (whose exit, at a varying length,
 * mispredicts about once an id); anything else goes to scan_uint. */
static bool scan_id(const char **pp, const char *end, uint64_t *value_p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const char *p = *pp;
    if (end - p < 8)
        return scan_uint(pp, end, value_p);
    const uint64_t ones = 0x0101010101010101u;
    uint64_t word;
    memcpy(&word, p, 8);
    /* A byte is a digit when its high nibble is 3 and adding 6 keeps it
     * so. A carry out of a byte (0xfa and above) only reaches the bytes
     * after it, past the end of the digits. */
    uint64_t nibbles = (word & 0xf0 * ones) | ((word + 0x06 * ones) & 0xf0 * ones) >> 4;
    uint64_t not_digit = nibbles ^ 0x33 * ones;
    if (not_digit == 0)
        return scan_uint(pp, end, value_p); /* 8 digits or more */
    unsigned digits = (unsigned)__builtin_ctzll(not_digit) / 8;
    char next = p[digits];
    if (digits == 0 || (digits > 1 && *p == '0') || next == '.' || next == 'e' || next == 'E')
        return false;
    /* The digits' values, moved up so that zeros lead them, then combined
     * in pairs, fours and eights (the first byte is the most significant). */
    uint64_t value = (word - 0x30 * ones) << (8 * (8 - digits));
    value = value * 10 + (value >> 8);
    value = ((value & 0x000000ff000000ffu) * (100 + (1000000ull << 32)) +
             ((value >> 16) & 0x000000ff000000ffu) * (1 + (10000ull << 32))) >>
            32;
    *pp = p + digits;
    *value_p = value;
    return true;
#else
    return scan_uint(pp, end, value_p);
#endif
}

/* Any JSON number, by the grammar, converted with strtod; *is_integer_p
 * tells whether jansson would read it as an integer (no fraction or
 * exponent). */
static bool scan_number(const char **pp, const char *end, double *value_p, bool *is_integer_p)
{
    const char *p = *pp, *start = *pp;
    bool is_integer = true;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return false;
    }
    if (p < end && *p == '.') {
        const char *digits = ++p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == digits)
            return false;
        is_integer = false;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        const char *digits = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == digits)
            return false;
        is_integer = false;
    }
    if (p == end || p - start > 64)
        return false;
    char text[72];
    memcpy(text, start, (size_t)(p - start));
    text[p - start] = '\0';
    *value_p = strtod(text, NULL);
    *is_integer_p = is_integer;
    *pp = p;
    return true;
}

/* Mooncake's timestamp: a plain integer exactly, anything else as a double. */
static bool scan_timestamp(const char **pp, const char *end, plain_line_t *line)
{
    const char *p = *pp;
    if (scan_uint(&p, end, &line->timestamp_integer)) {
        line->timestamp_is_integer = true;
        line->timestamp_ms = (double)line->timestamp_integer;
        *pp = p;
        return true;
    }
    bool is_integer;
    /* An integer that scan_uint refused (19+ digits, -0): jansson decides. */
    if (!scan_number(pp, end, &line->timestamp_ms, &is_integer) || is_integer)
        return false;
    line->timestamp_is_integer = false;
    return true;
}

/* Plain string bytes: printable ASCII without escapes, so that jansson's
 * UTF-8 and escape checks could not fail on them. */
static bool plain_char(char c)
{
    return c != '\\' && (unsigned char)c >= 0x20 && (unsigned char)c < 0x80;
}

/* A value we do not need: a number jansson can hold, true, false, null or
 * a plain string. */
static bool skip_scalar(const char **pp, const char *end)
{
    const char *p = *pp;
    if (p < end && *p == '"') {
        for (p++; p < end && *p != '"'; p++) {
            if (!plain_char(*p))
                return false;
        }
        if (p == end)
            return false;
        *pp = p + 1;
        return true;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t length = strlen(words[i]);
        if ((size_t)(end - p) >= length && memcmp(p, words[i], length) == 0) {
            *pp = p + length;
            return true;
        }
    }
    double value;
    bool is_integer;
    if (!scan_number(&p, end, &value, &is_integer) || !isfinite(value) ||
        (is_integer && fabs(value) >= 1e18))
        return false;
    *pp = p;
    return true;
}

/* An array of plain ids into ids (room for max_ids). */
static bool scan_ids(const char **pp, const char *end, uint64_t *ids, size_t max_ids,
                     plain_line_t *line)
{
    const char *p = *pp;
    if (p == end || *p != '[')
        return false;
    p = skip_space(p + 1, end);
    size_t count = 0;
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (count == max_ids || !scan_id(&p, end, &ids[count]))
                return false;
            count++;
            p = skip_space(p, end);
            if (p < end && *p == ',') {
                p = skip_space(p + 1, end);
                continue;
            }
            if (p < end && *p == ']') {
                p++;
                break;
            }
            return false;
        }
    }
    line->num_ids = count;
    line->has_ids = true;
    *pp = p;
    return true;
}

/* Scans one object of Mooncake keys. Other keys with scalar values are
 * skipped unless extras (kvio format, where other keys carry meaning). */
static bool scan_plain_line(const char *p, const char *end, bool extras, uint64_t *ids,
                            size_t max_ids, plain_line_t *line)
{
    memset(line, 0, sizeof(*line));
    p = skip_space(p, end);
    if (p == end || *p != '{')
        return false;
    p = skip_space(p + 1, end);
    for (;;) {
        if (p == end || *p != '"')
            return false;
        const char *key = ++p;
        while (p < end && *p != '"' && plain_char(*p))
            p++;
        if (p == end || *p != '"')
            return false;
        size_t key_length = (size_t)(p - key);
        p = skip_space(p + 1, end);
        if (p == end || *p != ':')
            return false;
        p = skip_space(p + 1, end);
#define KEY_IS(name) (key_length == sizeof(name) - 1 && memcmp(key, name, key_length) == 0)
        if (KEY_IS("timestamp")) {
            if (line->has_timestamp || !scan_timestamp(&p, end, line))
                return false;
            line->has_timestamp = true;
        } else if (KEY_IS("input_length")) {
            if (line->has_input || !scan_uint(&p, end, &line->input_length))
                return false;
            line->has_input = true;
        } else if (KEY_IS("output_length")) {
            if (line->has_output || !scan_uint(&p, end, &line->output_length))
                return false;
            line->has_output = true;
        } else if (KEY_IS("hash_ids")) {
            if (line->has_ids || !scan_ids(&p, end, ids, max_ids, line))
                return false;
        } else if (extras || !skip_scalar(&p, end)) {
            return false;
        }
#undef KEY_IS
        p = skip_space(p, end);
        if (p < end && *p == ',') {
            p = skip_space(p + 1, end);
            continue;
        }
        if (p < end && *p == '}')
            break;
        return false;
    }
    return skip_space(p + 1, end) == end;
}

/* Adds the request of a plain line whose values are all in range (what the
 * jansson path would accept, with the same values); false leaves the trace
 * as it was and hands the line to jansson. */
static bool parse_plain_line(kvio_trace_t *trace, const char *text, size_t length, bool extras)
{
    /* A line of n bytes holds at most n / 2 ids. */
    size_t max_ids = length / 2 + 1;
    if (max_ids > KVIO_STREAM_MAX_TOKENS)
        max_ids = KVIO_STREAM_MAX_TOKENS;
    uint64_t *ids = kvio_trace_reserve_hash_ids(trace, max_ids);
    plain_line_t line;
    if (ids == NULL || !scan_plain_line(text, text + length, extras, ids, max_ids, &line))
        return false;
    uint32_t block_tokens = (uint32_t)trace->options->block_tokens;
    if (!line.has_timestamp || !(line.timestamp_ms >= 0) ||
        line.timestamp_ms > MAX_TIMESTAMP_MS || !line.has_input || line.input_length < 1 ||
        line.input_length > KVIO_STREAM_MAX_TOKENS || !line.has_output ||
        line.output_length > KVIO_STREAM_MAX_TOKENS || !line.has_ids || block_tokens == 0 ||
        line.num_ids < (line.input_length + block_tokens - 1) / block_tokens)
        return false;
    kvio_trace_record_t *record = kvio_trace_add_record(trace);
    if (record == NULL)
        return false;
    kvio_request_t *request = &record->request;
    request->arrival_ns = line.timestamp_is_integer
                              ? (int64_t)line.timestamp_integer * 1000000
                              : llround(line.timestamp_ms * 1e6);
    request->input_tokens = (uint32_t)line.input_length;
    request->output_tokens = (uint32_t)line.output_length;
    request->output_content_id = KVIO_CONTENT_TRACE | (trace->line << 1 | 1);
    size_t kept = kvio_trace_keep_ids(trace, line.num_ids, (uint64_t)line.input_length,
                                      block_tokens);
    request->num_trace_hash_ids = (uint32_t)kept;
    request->trace_block_tokens = block_tokens;
    trace->num_hash_ids += kept;
    return true;
}

/* ---------- jansson path: any valid JSON, every check, the errors ---------- */

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
    if (!(ms >= 0) || ms > MAX_TIMESTAMP_MS) {
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
    if (count > KVIO_STREAM_MAX_TOKENS) {
        snprintf(error_p, error_len, "'hash_ids' has an absurd %zu ids", count);
        return KVIO_ERR_PARSE;
    }
    /* Each id's type before their count (nested lists got a count
     * complaint). */
    for (size_t i = 0; i < count; i++) {
        json_t *id = json_array_get(ids, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0) {
            snprintf(error_p, error_len, "'hash_ids'[%zu] is not a non-negative integer%s", i,
                     json_is_array(id) ? " (a list: hash_ids is one flat list)" : "");
            return KVIO_ERR_PARSE;
        }
    }
    bool sequence = record->request.trace_ids_cover_output;
    uint64_t tokens = (uint64_t)record->request.input_tokens +
                      (sequence ? record->request.output_tokens : 0);
    size_t needed = (size_t)((tokens + block_tokens - 1) / block_tokens);
    if (count < needed) {
        snprintf(error_p, error_len, "'hash_ids' has %zu ids, but %s %llu needs %zu of %u tokens",
                 count, sequence ? "input_length + output_length" : "input_length",
                 (unsigned long long)tokens, needed, block_tokens);
        return KVIO_ERR_PARSE;
    }
    count = kvio_trace_keep_ids(trace, count, tokens, block_tokens);
    uint64_t *out = kvio_trace_reserve_hash_ids(trace, count);
    if (out == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < count; i++)
        out[i] = (uint64_t)json_integer_value(json_array_get(ids, i));
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

/* "cache_salt": a string (a tenant's name, hashed as vLLM hashes it into
 * the first block) or the salt itself as a positive integer (what kvio's
 * export writes); absent: none. */
static kvio_status_t get_cache_salt(json_t *object, uint64_t *salt_p, char *error_p,
                                    size_t error_len)
{
    json_t *salt = json_object_get(object, "cache_salt");
    if (salt == NULL || json_is_null(salt))
        return KVIO_OK;
    if (json_is_string(salt)) {
        *salt_p = kvio_cache_salt(json_string_value(salt), json_string_length(salt));
        return KVIO_OK;
    }
    if (json_is_integer(salt) && json_integer_value(salt) > 0) {
        *salt_p = (uint64_t)json_integer_value(salt);
        return KVIO_OK;
    }
    snprintf(error_p, error_len, "cache_salt: a string or a positive integer");
    return KVIO_ERR_PARSE;
}

/* "group", "group_index", "group_size": a rollout group's sample (written
 * by export when stream.group.n > 1): all three or none. */
static kvio_status_t get_group(json_t *object, kvio_request_t *request, char *error_p,
                               size_t error_len)
{
    long long id = -1, index = -1, size = -1;
    kvio_status_t status = get_integer(object, "group", false, 1, INT64_MAX, &id, error_p,
                                       error_len);
    if (status == KVIO_OK)
        status = get_integer(object, "group_index", false, 0, UINT32_MAX, &index, error_p,
                             error_len);
    if (status == KVIO_OK)
        status = get_integer(object, "group_size", false, 1, UINT32_MAX, &size, error_p,
                             error_len);
    if (status != KVIO_OK)
        return status;
    if (id < 0 && index < 0 && size < 0)
        return KVIO_OK;
    if (id < 0 || index < 0 || size < 0) {
        snprintf(error_p, error_len, "a group's sample needs all of 'group', 'group_index' and "
                 "'group_size' (missing '%s')", id < 0 ? "group" : index < 0 ? "group_index"
                                                                 : "group_size");
        return KVIO_ERR_PARSE;
    }
    if (index >= size) {
        snprintf(error_p, error_len, "'group_index' is %lld, not below 'group_size' %lld",
                 index, size);
        return KVIO_ERR_PARSE;
    }
    request->group_id = (uint64_t)id;
    request->group_index = (uint32_t)index;
    request->group_size = (uint32_t)size;
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
        status = get_cache_salt(object, &request->cache_salt, error_p, error_len);
        if (status == KVIO_OK)
            status = get_group(object, request, error_p, error_len);
        if (status != KVIO_OK)
            return status;
        const kvio_stream_config_t *stream = trace->options->stream;
        if (request->group_size > 0 && stream != NULL && stream->group.n > 1) {
            snprintf(error_p, error_len, "a rollout group's sample (group %llu of %u), but "
                     "stream.group.n: %lld would sample each line again: replay the trace's "
                     "groups with stream.group.n: 1", (unsigned long long)request->group_id,
                     request->group_size, (long long)stream->group.n);
            return KVIO_ERR_PARSE;
        }
        if (values[5] >= 0)
            request->output_content_id = (uint64_t)values[5];
        if (segments != NULL)
            return read_segments(trace, record, segments, error_p, error_len);
    }
    uint32_t block_tokens = (uint32_t)trace->options->block_tokens;
    if (extras) {
        /* kvio serve's traces: the ids name the output's blocks too. */
        json_t *sequence = json_object_get(object, "sequence_hash_ids");
        if (sequence != NULL && !json_is_boolean(sequence)) {
            snprintf(error_p, error_len, "'sequence_hash_ids' is not true or false");
            return KVIO_ERR_PARSE;
        }
        request->trace_ids_cover_output = json_is_true(sequence);
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
    if (parse_plain_line(trace, line, length, extras))
        return KVIO_OK;
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
