/* Mooncake JSONL trace reader: one JSON object per line with timestamp,
 * input_length, output_length and hash_ids. A strict scanner handles the
 * plain lines that make up real traces quickly; any line it does not fully
 * recognise goes through jansson (json_loadb), which also words the errors. */
#include "workloads/trace_int.h"

#include "kvio/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct fields {
    bool has_timestamp, has_input, has_output, has_ids;
    double timestamp;
    uint64_t input_length, output_length;
    size_t num_ids;
} fields_t;

/* ---- fast path: returns false to hand the line to jansson --------------- */

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* A non-negative JSON integer of at most 18 digits (no leading zeros). */
static bool scan_uint(const char **pp, const char *end, uint64_t *value_p)
{
    const char *p = *pp;
    uint64_t value = 0;
    const char *start = p;
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

/* Any JSON number, by the grammar, converted with strtod. */
static bool scan_number(const char **pp, const char *end, double *value_p)
{
    const char *p = *pp, *start = *pp;
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
    }
    if (p == end || p - start > 64)
        return false;
    char text[72];
    memcpy(text, start, (size_t)(p - start));
    text[p - start] = '\0';
    *value_p = strtod(text, NULL);
    *pp = p;
    return true;
}

/* A scalar we do not need: number, true, false, null or a plain string. */
static bool skip_scalar(const char **pp, const char *end)
{
    const char *p = *pp;
    double ignored;
    if (p < end && *p == '"') {
        for (p++; p < end && *p != '"'; p++) {
            if (*p == '\\' || (unsigned char)*p < 0x20)
                return false;
        }
        if (p == end)
            return false;
        *pp = p + 1;
        return true;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t length = strlen(words[i]);
        if ((size_t)(end - p) >= length && memcmp(p, words[i], length) == 0) {
            *pp = p + length;
            return true;
        }
    }
    return scan_number(pp, end, &ignored);
}

static bool scan_ids(const char **pp, const char *end, uint64_t *ids, fields_t *fields)
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
            if (!scan_uint(&p, end, &ids[count]))
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
    fields->num_ids = count;
    fields->has_ids = true;
    *pp = p;
    return true;
}

static bool fast_parse(const char *p, const char *end, uint64_t *ids, fields_t *fields)
{
    memset(fields, 0, sizeof(*fields));
    p = skip_space(p, end);
    if (p == end || *p != '{')
        return false;
    p = skip_space(p + 1, end);
    if (p < end && *p == '}')
        return false;
    for (;;) {
        if (p == end || *p != '"')
            return false;
        const char *key = ++p;
        while (p < end && *p != '"' && *p != '\\')
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
            if (fields->has_timestamp || !scan_number(&p, end, &fields->timestamp))
                return false;
            fields->has_timestamp = true;
        } else if (KEY_IS("input_length")) {
            if (fields->has_input || !scan_uint(&p, end, &fields->input_length))
                return false;
            fields->has_input = true;
        } else if (KEY_IS("output_length")) {
            if (fields->has_output || !scan_uint(&p, end, &fields->output_length))
                return false;
            fields->has_output = true;
        } else if (KEY_IS("hash_ids")) {
            if (fields->has_ids || !scan_ids(&p, end, ids, fields))
                return false;
        } else if (!skip_scalar(&p, end)) {
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
    p = skip_space(p + 1, end);
    return p == end && fields->has_timestamp && fields->has_input && fields->has_ids;
}

/* ---- jansson path: any valid JSON, and the error messages -------------- */

static bool json_uint(json_t *value, uint64_t *value_p)
{
    if (!json_is_integer(value) || json_integer_value(value) < 0)
        return false;
    *value_p = (uint64_t)json_integer_value(value);
    return true;
}

/* Returns NULL when the line is good, else a reason written to reason. */
static const char *slow_parse(const char *line, size_t length, kvio_trace_t *trace, uint64_t **ids_p,
                              fields_t *fields, char *reason, size_t reason_size)
{
    memset(fields, 0, sizeof(*fields));
    json_error_t error;
    json_t *root = json_loadb(line, length, 0, &error);
    const char *result = NULL;
    if (root == NULL) {
        snprintf(reason, reason_size, "invalid JSON: %s", error.text);
        return reason;
    }
    json_t *value;
    if (!json_is_object(root)) {
        result = "not a JSON object";
        goto cleanup;
    }
    value = json_object_get(root, "timestamp");
    if (value == NULL || !json_is_number(value)) {
        result = value == NULL ? "timestamp is missing" : "timestamp is not a number";
        goto cleanup;
    }
    fields->timestamp = json_number_value(value);
    value = json_object_get(root, "input_length");
    if (value == NULL || !json_uint(value, &fields->input_length)) {
        result = value == NULL ? "input_length is missing"
                               : "input_length is not a non-negative integer";
        goto cleanup;
    }
    value = json_object_get(root, "output_length");
    if (value != NULL && !json_uint(value, &fields->output_length)) {
        result = "output_length is not a non-negative integer";
        goto cleanup;
    }
    value = json_object_get(root, "hash_ids");
    if (value == NULL || !json_is_array(value)) {
        result = value == NULL ? "hash_ids is missing" : "hash_ids is not an array";
        goto cleanup;
    }
    size_t count = json_array_size(value);
    if (kvio_trace_reserve_ids(trace, count, ids_p) != KVIO_OK) {
        result = "out of memory";
        goto cleanup;
    }
    for (size_t i = 0; i < count; i++) {
        if (!json_uint(json_array_get(value, i), &(*ids_p)[i])) {
            snprintf(reason, reason_size, "hash_ids[%zu] is not a non-negative integer", i);
            result = reason;
            goto cleanup;
        }
    }
    fields->num_ids = count;

cleanup:
    json_decref(root);
    return result;
}

static kvio_status_t read_file(const char *path, char **data_p, size_t *length_p)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        kvio_status_t status = kvio_status_from_errno(errno);
        kvio_error("%s: %s", path, strerror(errno));
        return status;
    }
    kvio_status_t status = KVIO_ERR_NOMEM;
    struct stat info;
    size_t capacity = 1 << 20, length = 0;
    /* Sized from the file when it is a regular one, grown otherwise (pipes). */
    if (fstat(fileno(file), &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0)
        capacity = (size_t)info.st_size + 1;
    char *data = malloc(capacity);
    while (data != NULL) {
        if (length == capacity) {
            char *bigger = realloc(data, capacity * 2);
            if (bigger == NULL)
                break;
            data = bigger;
            capacity *= 2;
        }
        size_t got = fread(data + length, 1, capacity - length, file);
        length += got;
        if (got == 0) {
            status = ferror(file) ? KVIO_ERR_IO : KVIO_OK;
            break;
        }
    }
    fclose(file);
    if (status != KVIO_OK) {
        kvio_error("%s: %s", path, kvio_strerror(status));
        free(data);
        return status;
    }
    *data_p = data;
    *length_p = length;
    return KVIO_OK;
}

kvio_status_t kvio_trace_read_mooncake(const char *path, const kvio_trace_options_t *options,
                                       kvio_trace_t **trace_p)
{
    char *data = NULL;
    size_t length = 0;
    kvio_trace_t *trace = NULL;
    kvio_status_t status = read_file(path, &data, &length);
    if (status != KVIO_OK)
        return status;
    status = kvio_trace_new(&trace);
    if (status != KVIO_OK)
        goto cleanup;
    size_t line_number = 0;
    for (const char *line = data, *data_end = data + length; line < data_end;) {
        const char *newline = memchr(line, '\n', (size_t)(data_end - line));
        const char *end = newline != NULL ? newline : data_end;
        line_number++;
        const char *content = skip_space(line, end);
        if (content == end) {
            line = end + 1;
            continue;
        }
        /* A line of n bytes holds at most n / 2 + 1 ids. */
        uint64_t *ids = NULL;
        fields_t fields;
        status = kvio_trace_reserve_ids(trace, (size_t)(end - line) / 2 + 1, &ids);
        if (status != KVIO_OK)
            goto cleanup;
        if (!fast_parse(line, end, ids, &fields)) {
            char reason[256];
            const char *problem = slow_parse(line, (size_t)(end - line), trace, &ids, &fields,
                                             reason, sizeof(reason));
            if (problem != NULL) {
                status = kvio_trace_bad_line(trace, options, path, line_number, problem);
                if (status != KVIO_OK)
                    goto cleanup;
                line = end + 1;
                continue;
            }
        }
        status = kvio_trace_push(trace, fields.timestamp, fields.input_length,
                                 fields.output_length, fields.num_ids, line_number);
        if (status != KVIO_OK)
            goto cleanup;
        line = end + 1;
    }
    if (trace->num_skipped > 0)
        kvio_warn("%s: %zu bad lines skipped", path, trace->num_skipped);
    kvio_trace_finish(trace);
    free(data);
    *trace_p = trace;
    return KVIO_OK;

cleanup:
    kvio_trace_destroy(trace);
    free(data);
    return status;
}
