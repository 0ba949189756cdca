/* Stream export as JSONL: Mooncake's fields on every line, and in kvio
 * format the extras that make import reproduce the stream exactly. Numbers
 * are formatted by hand into a large buffer: export runs at generation
 * speed. hash_ids of segment requests are the low 63 bits of each 512-token
 * block's hash (the last, partial block hashed as it stands). */
#include "workloads/workloads_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (1u << 20)
#define MOONCAKE_BLOCK_TOKENS 512

struct kvio_stream_writer {
    FILE *out;
    kvio_export_format_t format;
    bool failed;
    int errnum; /* the first failed write's errno (ENOSPC, EPIPE) */
    size_t used;
    kvio_hash_t *hashes;
    size_t hashes_capacity;
    char buffer[BUFFER_BYTES];
};

kvio_status_t kvio_stream_writer_create(FILE *out, kvio_export_format_t format,
                                        kvio_stream_writer_t **writer_p)
{
    if (format != KVIO_EXPORT_KVIO && format != KVIO_EXPORT_MOONCAKE)
        return KVIO_ERR_INVALID;
    kvio_stream_writer_t *writer = malloc(sizeof(*writer));
    if (writer == NULL)
        return KVIO_ERR_NOMEM;
    writer->out = out;
    writer->format = format;
    writer->failed = false;
    writer->errnum = 0;
    writer->used = 0;
    writer->hashes = NULL;
    writer->hashes_capacity = 0;
    *writer_p = writer;
    return KVIO_OK;
}

static void fail(kvio_stream_writer_t *writer)
{
    if (!writer->failed)
        writer->errnum = errno != 0 ? errno : EIO;
    writer->failed = true;
}

static void flush(kvio_stream_writer_t *writer)
{
    errno = 0;
    if (writer->used > 0 && fwrite(writer->buffer, 1, writer->used, writer->out) != writer->used)
        fail(writer);
    writer->used = 0;
}

/* Makes room for bytes more; flushes when the buffer is nearly full. */
static inline char *room(kvio_stream_writer_t *writer, size_t bytes)
{
    if (writer->used + bytes > BUFFER_BYTES)
        flush(writer);
    return writer->buffer + writer->used;
}

static inline void put_text(kvio_stream_writer_t *writer, const char *text, size_t length)
{
    if (length > BUFFER_BYTES) {
        flush(writer);
        if (fwrite(text, 1, length, writer->out) != length)
            writer->failed = true;
        return;
    }
    memcpy(room(writer, length), text, length);
    writer->used += length;
}

#define PUT_LITERAL(writer, text) put_text(writer, text, sizeof(text) - 1)

static void put_u64(kvio_stream_writer_t *writer, uint64_t value)
{
    char *out = room(writer, 20);
    writer->used += kvio_format_unsigned(out, value);
}

static void put_i64(kvio_stream_writer_t *writer, int64_t value)
{
    if (value < 0) {
        PUT_LITERAL(writer, "-");
        put_u64(writer, (uint64_t)0 - (uint64_t)value);
    } else {
        put_u64(writer, (uint64_t)value);
    }
}

/* ns as exact decimal milliseconds, without trailing zeros. */
static void put_ms(kvio_stream_writer_t *writer, int64_t ns)
{
    if (ns < 0) {
        PUT_LITERAL(writer, "-");
        ns = -ns;
    }
    put_u64(writer, (uint64_t)ns / 1000000);
    uint32_t fraction = (uint32_t)((uint64_t)ns % 1000000);
    if (fraction == 0)
        return;
    char text[8] = ".";
    size_t length = 7;
    for (int i = 6; i >= 1; i--) {
        text[i] = (char)('0' + fraction % 10);
        fraction /= 10;
    }
    while (text[length - 1] == '0')
        length--;
    put_text(writer, text, length);
}

/* The ids of the request's 512-token blocks. */
static kvio_status_t put_hash_ids(kvio_stream_writer_t *writer, const kvio_request_t *request)
{
    PUT_LITERAL(writer, "[");
    if (request->segments == NULL && request->trace_hash_ids != NULL &&
        (writer->format == KVIO_EXPORT_KVIO ||
         request->trace_block_tokens == MOONCAKE_BLOCK_TOKENS)) {
        for (uint32_t i = 0; i < request->num_trace_hash_ids; i++) {
            if (i > 0)
                PUT_LITERAL(writer, ", ");
            put_u64(writer, request->trace_hash_ids[i]);
        }
        PUT_LITERAL(writer, "]");
        return KVIO_OK;
    }
    size_t full = request->input_tokens / MOONCAKE_BLOCK_TOKENS;
    size_t needed = full + 1;
    if (needed > writer->hashes_capacity) {
        size_t capacity = writer->hashes_capacity ? writer->hashes_capacity : 64;
        while (capacity < needed)
            capacity *= 2;
        kvio_hash_t *bigger = realloc(writer->hashes, capacity * sizeof(kvio_hash_t));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        writer->hashes = bigger;
        writer->hashes_capacity = capacity;
    }
    kvio_status_t status = kvio_request_block_hashes(request, MOONCAKE_BLOCK_TOKENS, 0, full,
                                                     NULL, writer->hashes);
    size_t count = full;
    if (status == KVIO_OK && request->input_tokens % MOONCAKE_BLOCK_TOKENS != 0) {
        status = kvio_request_span_hash(request, (uint64_t)full * MOONCAKE_BLOCK_TOKENS,
                                        request->input_tokens,
                                        full > 0 ? &writer->hashes[full - 1] : NULL,
                                        &writer->hashes[full]);
        count++;
    }
    if (status != KVIO_OK)
        return status;
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            PUT_LITERAL(writer, ", ");
        put_u64(writer, writer->hashes[i].low & INT64_MAX);
    }
    PUT_LITERAL(writer, "]");
    return KVIO_OK;
}

kvio_status_t kvio_stream_writer_write(kvio_stream_writer_t *writer,
                                       const kvio_request_t *request)
{
    PUT_LITERAL(writer, "{\"timestamp\": ");
    put_ms(writer, request->arrival_ns);
    PUT_LITERAL(writer, ", \"input_length\": ");
    put_u64(writer, request->input_tokens);
    PUT_LITERAL(writer, ", \"output_length\": ");
    put_u64(writer, request->output_tokens);
    PUT_LITERAL(writer, ", \"hash_ids\": ");
    kvio_status_t status = put_hash_ids(writer, request);
    if (status != KVIO_OK)
        return status;
    if (writer->format == KVIO_EXPORT_KVIO) {
        PUT_LITERAL(writer, ", \"id\": ");
        put_u64(writer, request->id);
        PUT_LITERAL(writer, ", \"arrival_ns\": ");
        put_i64(writer, request->arrival_ns);
        PUT_LITERAL(writer, ", \"max_tokens\": ");
        put_u64(writer, request->max_tokens);
        PUT_LITERAL(writer, ", \"priority\": ");
        put_i64(writer, request->priority);
        PUT_LITERAL(writer, ", \"session\": ");
        put_u64(writer, request->session_id);
        PUT_LITERAL(writer, ", \"turn\": ");
        put_u64(writer, request->turn);
        if (request->cache_salt != 0) {
            PUT_LITERAL(writer, ", \"cache_salt\": ");
            put_u64(writer, request->cache_salt);
        }
        if (request->group_size > 0) {
            PUT_LITERAL(writer, ", \"group\": ");
            put_u64(writer, request->group_id);
            PUT_LITERAL(writer, ", \"group_index\": ");
            put_u64(writer, request->group_index);
            PUT_LITERAL(writer, ", \"group_size\": ");
            put_u64(writer, request->group_size);
        }
        if (request->segments != NULL) {
            PUT_LITERAL(writer, ", \"segments\": [");
            for (uint32_t i = 0; i < request->num_segments; i++) {
                const kvio_segment_t *segment = &request->segments[i];
                if (i > 0)
                    PUT_LITERAL(writer, ", ");
                PUT_LITERAL(writer, "[");
                put_u64(writer, segment->content_id);
                PUT_LITERAL(writer, ", ");
                put_u64(writer, segment->offset);
                PUT_LITERAL(writer, ", ");
                put_u64(writer, segment->tokens);
                PUT_LITERAL(writer, "]");
            }
            PUT_LITERAL(writer, "]");
        } else {
            PUT_LITERAL(writer, ", \"block_tokens\": ");
            put_u64(writer, request->trace_block_tokens);
            if (request->trace_ids_cover_output)
                PUT_LITERAL(writer, ", \"sequence_hash_ids\": true");
        }
        PUT_LITERAL(writer, ", \"output_id\": ");
        put_u64(writer, request->output_content_id);
    }
    PUT_LITERAL(writer, "}\n");
    return writer->failed ? kvio_status_from_errno(writer->errnum) : KVIO_OK;
}

kvio_status_t kvio_stream_writer_close(kvio_stream_writer_t *writer, int *errno_p)
{
    if (errno_p != NULL)
        *errno_p = 0;
    if (writer == NULL)
        return KVIO_OK;
    flush(writer);
    errno = 0;
    if (fflush(writer->out) != 0 || ferror(writer->out))
        fail(writer);
    kvio_status_t status = writer->failed ? kvio_status_from_errno(writer->errnum) : KVIO_OK;
    if (errno_p != NULL)
        *errno_p = writer->failed ? writer->errnum : 0;
    free(writer->hashes);
    free(writer);
    return status;
}

kvio_status_t kvio_stream_export(kvio_stream_t *stream, FILE *out, kvio_export_format_t format,
                                 uint64_t *count_p, char *error_p, size_t error_len)
{
    kvio_stream_writer_t *writer = NULL;
    uint64_t count = 0;
    bool write_failed = false;
    kvio_status_t status = kvio_stream_writer_create(out, format, &writer);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "export: %s", kvio_strerror(status));
        return status;
    }
    for (;;) {
        const kvio_request_t *request;
        status = kvio_stream_next(stream, &request);
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "stream: %s", kvio_strerror(status));
            break;
        }
        if (request == NULL)
            break;
        status = kvio_stream_writer_write(writer, request);
        write_failed = status != KVIO_OK;
        if (write_failed)
            break;
        count++;
    }
    int errnum = 0;
    kvio_status_t close_status = kvio_stream_writer_close(writer, &errnum);
    if ((status == KVIO_OK && close_status != KVIO_OK) || write_failed) {
        snprintf(error_p, error_len, "export: write failed after %llu requests: %s",
                 (unsigned long long)count, strerror(errnum != 0 ? errnum : EIO));
        if (status == KVIO_OK)
            status = close_status;
    }
    if (status == KVIO_OK)
        *count_p = count;
    return status;
}
