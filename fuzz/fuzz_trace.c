/* libFuzzer target for the trace readers, one binary per format (FUZZ_FORMAT:
 * mooncake, kvio, azure, burstgpt). The first input byte picks the reader's
 * options (bit 0 skip_bad, 1 strict, 2 auto-detect the format, 3 time_scale
 * 0.5, 4 limit 3, 5 start 1 ms, 6 max_tokens 4, 7 block_tokens 16); the rest
 * is the file, read through kvio_stream_open_trace from a memfd. Every
 * request is hashed and exported as the engine and `kvio stream` would.
 * For JSONL it also checks that the fast scanner and jansson agree: each
 * line with an extra escaped key (which the scanner refuses) must read the
 * same. */
#include "kvio/config.h"
#include "kvio/stream.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT "mooncake"
#endif

/* Blocks hashed per request at most (a prompt may be 10M tokens). */
#define MAX_HASHED_BLOCKS 4096
#define MAX_REQUESTS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct loaded {
    kvio_status_t status;
    uint64_t skipped;
    size_t count;
    kvio_request_t *requests[MAX_REQUESTS];
} loaded_t;

static int memfd = -1;

/* Writes the bytes to the memfd and opens it as a trace. */
static kvio_status_t open_bytes(const char *bytes, size_t length, kvio_trace_format_t format,
                                const kvio_stream_trace_config_t *options,
                                kvio_stream_t **stream_p)
{
    if (memfd < 0 && (memfd = memfd_create("kvio-fuzz-trace", 0)) < 0)
        abort();
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, bytes, length, 0) != (ssize_t)length)
        abort();
    char path[64], error[1024] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
    return kvio_stream_open_trace(path, format, options, stream_p, error, sizeof(error));
}

static void exercise(const kvio_request_t *request, kvio_stream_writer_t **writers)
{
    kvio_hash_t hashes[64];
    uint64_t tokens = (uint64_t)request->input_tokens + request->output_tokens;
    const uint32_t sizes[] = {16, request->trace_block_tokens};
    for (size_t s = 0; s < 2; s++) {
        if (sizes[s] == 0)
            continue;
        size_t blocks = tokens / sizes[s];
        if (blocks > MAX_HASHED_BLOCKS)
            blocks = MAX_HASHED_BLOCKS;
        for (size_t first = 0; first < blocks; first += 64) {
            size_t count = blocks - first < 64 ? blocks - first : 64;
            if (kvio_request_block_hashes(request, sizes[s], first, count,
                                          first ? &hashes[63] : NULL, hashes) != KVIO_OK)
                abort(); /* blocks inside the request are always hashable */
        }
    }
    for (size_t w = 0; w < 2; w++) {
        if (writers[w] != NULL && kvio_stream_writer_write(writers[w], request) != KVIO_OK)
            abort();
    }
}

/* Loads the bytes as a trace; with exercise, hashes and exports every
 * request; with keep, keeps copies of them in loaded_p. */
static void load(const char *bytes, size_t length, kvio_trace_format_t format,
                 const kvio_stream_trace_config_t *options, bool exercise_them, bool keep,
                 loaded_t *loaded_p)
{
    kvio_stream_t *stream = NULL;
    loaded_p->count = 0;
    loaded_p->status = open_bytes(bytes, length, format, options, &stream);
    if (loaded_p->status != KVIO_OK)
        return;
    loaded_p->skipped = kvio_stream_skipped_lines(stream);
    static FILE *null_out;
    if (null_out == NULL && (null_out = fopen("/dev/null", "w")) == NULL)
        abort();
    kvio_stream_writer_t *writers[2] = {NULL, NULL};
    if (exercise_them) {
        kvio_stream_writer_create(null_out, KVIO_EXPORT_KVIO, &writers[0]);
        kvio_stream_writer_create(null_out, KVIO_EXPORT_MOONCAKE, &writers[1]);
    }
    const kvio_request_t *request;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        if (exercise_them)
            exercise(request, writers);
        if (keep) {
            if (loaded_p->count == MAX_REQUESTS ||
                kvio_request_clone(request, &loaded_p->requests[loaded_p->count]) != KVIO_OK)
                abort();
            loaded_p->count++;
        }
    }
    for (size_t w = 0; w < 2; w++) {
        if (writers[w] != NULL && kvio_stream_writer_close(writers[w], NULL) != KVIO_OK)
            abort();
    }
    kvio_stream_destroy(stream);
}

static void unload(loaded_t *loaded)
{
    for (size_t i = 0; i < loaded->count; i++)
        kvio_request_destroy(loaded->requests[i]);
    loaded->count = 0;
}

static bool same_request(const kvio_request_t *a, const kvio_request_t *b)
{
    if (a->id != b->id || a->arrival_ns != b->arrival_ns || a->input_tokens != b->input_tokens ||
        a->output_tokens != b->output_tokens || a->max_tokens != b->max_tokens ||
        a->priority != b->priority || a->session_id != b->session_id || a->turn != b->turn ||
        a->num_segments != b->num_segments || a->output_content_id != b->output_content_id ||
        a->trace_block_tokens != b->trace_block_tokens ||
        a->num_trace_hash_ids != b->num_trace_hash_ids)
        return false;
    return (a->num_segments == 0 ||
            memcmp(a->segments, b->segments, a->num_segments * sizeof(*a->segments)) == 0) &&
           (a->num_trace_hash_ids == 0 ||
            memcmp(a->trace_hash_ids, b->trace_hash_ids,
                   a->num_trace_hash_ids * sizeof(uint64_t)) == 0);
}

/* The text with "\u0041":0, after the opening brace of every line that
 * starts with one: jansson ignores the key, the scanner refuses the line. */
static char *with_escaped_keys(const char *bytes, size_t length, size_t *length_p)
{
    static const char key[] = "\"\\u0041\":0,";
    char *out = malloc(length + (length + 1) * (sizeof(key) - 1) + 1);
    if (out == NULL)
        abort();
    size_t used = 0;
    bool line_start = true;
    for (size_t i = 0; i < length; i++) {
        char c = bytes[i];
        out[used++] = c;
        if (c == '\n') {
            line_start = true;
        } else if (line_start && c == '{') {
            memcpy(out + used, key, sizeof(key) - 1);
            used += sizeof(key) - 1;
            line_start = false;
        } else if (c != ' ' && c != '\t') {
            line_start = false;
        }
    }
    *length_p = used;
    return out;
}

/* One input for the reader of format_name (tests/test_crashers.c calls it
 * for the inputs kept there). */
static int fuzz_trace(const char *format_name, const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t bits = data[0];
    const char *bytes = (const char *)data + 1;
    size_t length = size - 1;
    kvio_trace_format_t format;
    if (kvio_trace_format_find(format_name, &format) != KVIO_OK)
        abort();
    kvio_stream_trace_config_t options;
    memset(&options, 0, sizeof(options));
    char error[256];
    if (kvio_config_defaults(kvio_stream_trace_options, &options, error, sizeof(error)) !=
        KVIO_OK)
        abort();
    options.skip_bad = bits & 1;
    options.strict = bits & 2;
    if (bits & 4)
        format = KVIO_TRACE_AUTO;
    if (bits & 8)
        options.time_scale = 0.5;
    if (bits & 16)
        options.limit = 3;
    if (bits & 32)
        options.start_ns = 1000000;
    if (bits & 64)
        options.max_tokens = 4;
    if (bits & 128)
        options.block_tokens = 16;

    static loaded_t plain, escaped;
    bool jsonl = strcmp(format_name, "mooncake") == 0 || strcmp(format_name, "kvio") == 0;
    load(bytes, length, format, &options, true, jsonl, &plain);
    if (jsonl) {
        size_t escaped_length;
        char *escaped_bytes = with_escaped_keys(bytes, length, &escaped_length);
        load(escaped_bytes, escaped_length, format, &options, false, true, &escaped);
        free(escaped_bytes);
        if (plain.status != escaped.status)
            abort();
        if (plain.status == KVIO_OK) {
            if (plain.skipped != escaped.skipped || plain.count != escaped.count)
                abort();
            for (size_t i = 0; i < plain.count; i++) {
                if (!same_request(plain.requests[i], escaped.requests[i]))
                    abort();
            }
        }
        unload(&plain);
        unload(&escaped);
    }
    kvio_config_free(kvio_stream_trace_options, &options);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_trace(FUZZ_FORMAT, data, size);
}
