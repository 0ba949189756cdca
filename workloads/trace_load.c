/* Trace loading shared by every format: reads the file a chunk of whole
 * lines at a time, detects its format,
 * hands each line to the format's plug-in, handles bad lines (error naming
 * file:line, or skip and count), sorts out-of-order timestamps (or refuses
 * them under strict), applies start, time scale, limit and max_tokens, and
 * yields the records as a stream. Also the format registry. */
#include "workloads/workloads_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/clock.h"
#include "kvio/files.h"
#include "kvio/log.h"
#include "kvio/sysinfo.h"

/* Skipped bad lines logged one by one before only the count is. */
#define MAX_SKIP_WARNINGS 5

static const kvio_trace_format_ops_t *const registry[] = {
    [KVIO_TRACE_KVIO] = &kvio_trace_jsonl_kvio_ops,
    [KVIO_TRACE_MOONCAKE] = &kvio_trace_jsonl_mooncake_ops,
    [KVIO_TRACE_AZURE] = &kvio_trace_csv_azure_ops,
    [KVIO_TRACE_BURSTGPT] = &kvio_trace_csv_burstgpt_ops,
    [KVIO_TRACE_CONVERSATION] = &kvio_trace_conversation_ops,
};

const kvio_trace_format_ops_t *kvio_trace_format_ops(kvio_trace_format_t format)
{
    if ((unsigned)format >= sizeof(registry) / sizeof(registry[0]))
        return NULL;
    return registry[format];
}

/* ---------- pools ---------- */

static bool grow(void **items, size_t *capacity_p, size_t needed, size_t item_size)
{
    if (needed <= *capacity_p)
        return true;
    size_t capacity = *capacity_p ? *capacity_p : 256;
    while (capacity < needed)
        capacity *= 2;
    void *bigger = realloc(*items, capacity * item_size);
    if (bigger == NULL)
        return false;
    *items = bigger;
    *capacity_p = capacity;
    return true;
}

kvio_trace_record_t *kvio_trace_add_record(kvio_trace_t *trace)
{
    if (!grow((void **)&trace->records, &trace->records_capacity, trace->num_records + 1,
              sizeof(kvio_trace_record_t)))
        return NULL;
    kvio_trace_record_t *record = &trace->records[trace->num_records++];
    memset(record, 0, sizeof(*record));
    record->line = trace->line;
    record->segment_start = trace->num_segments;
    record->hash_id_start = trace->num_hash_ids;
    record->request.id = UINT64_MAX;
    return record;
}

kvio_segment_t *kvio_trace_reserve_segments(kvio_trace_t *trace, size_t count)
{
    if (!grow((void **)&trace->segments, &trace->segments_capacity, trace->num_segments + count,
              sizeof(kvio_segment_t)))
        return NULL;
    return trace->segments + trace->num_segments;
}

uint64_t *kvio_trace_reserve_hash_ids(kvio_trace_t *trace, size_t count)
{
    if (!grow((void **)&trace->hash_ids, &trace->hash_ids_capacity, trace->num_hash_ids + count,
              sizeof(uint64_t)))
        return NULL;
    return trace->hash_ids + trace->num_hash_ids;
}

size_t kvio_trace_keep_ids(kvio_trace_t *trace, size_t count, uint64_t tokens,
                           uint32_t block_tokens)
{
    size_t needed = (size_t)((tokens + block_tokens - 1) / block_tokens);
    if (count <= needed)
        return count;
    if (trace->ids_cut++ == 0)
        trace->ids_cut_line = trace->line;
    return needed;
}

void kvio_trace_drop_last(kvio_trace_t *trace)
{
    if (trace->num_records == 0)
        return;
    kvio_trace_record_t *record = &trace->records[--trace->num_records];
    trace->num_segments = record->segment_start;
    trace->num_hash_ids = record->hash_id_start;
}

kvio_status_t kvio_trace_parse_tokens(const char *text, int64_t minimum, uint32_t *tokens_p,
                                      char *error_p, size_t error_len, const char *what)
{
    while (*text == ' ' || *text == '\t')
        text++;
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    while (end != text && (*end == ' ' || *end == '\t'))
        end++;
    if (end == text || *end != '\0' || errno == ERANGE) {
        snprintf(error_p, error_len, "%s: '%.40s' is not an integer", what, text);
        return KVIO_ERR_PARSE;
    }
    if (value < minimum) {
        snprintf(error_p, error_len, "%s: %lld is %s", what, value,
                 value < 0 ? "negative" : "too small");
        return KVIO_ERR_PARSE;
    }
    if (value > (long long)KVIO_STREAM_MAX_TOKENS) {
        snprintf(error_p, error_len, "%s: %lld tokens is absurd (more than %u)", what, value,
                 KVIO_STREAM_MAX_TOKENS);
        return KVIO_ERR_PARSE;
    }
    *tokens_p = (uint32_t)value;
    return KVIO_OK;
}

/* ---------- the loaded trace as a stream ---------- */

typedef struct trace_source {
    kvio_trace_t trace;
    size_t next;
    kvio_request_t request;
} trace_source_t;

static kvio_status_t trace_next(void *source, const kvio_request_t **request_p)
{
    trace_source_t *replay = source;
    if (replay->next >= replay->trace.num_records) {
        *request_p = NULL;
        return KVIO_OK;
    }
    const kvio_trace_record_t *record = &replay->trace.records[replay->next++];
    replay->request = record->request;
    replay->request.segments =
        record->request.num_segments > 0 ? replay->trace.segments + record->segment_start : NULL;
    replay->request.trace_hash_ids = record->request.num_trace_hash_ids > 0
                                         ? replay->trace.hash_ids + record->hash_id_start
                                         : NULL;
    *request_p = &replay->request;
    return KVIO_OK;
}

static void trace_rewind(void *source)
{
    ((trace_source_t *)source)->next = 0;
}

static void trace_free(kvio_trace_t *trace)
{
    free(trace->records);
    free(trace->segments);
    free(trace->hash_ids);
    trace->records = NULL;
    trace->segments = NULL;
    trace->hash_ids = NULL;
}

static void trace_destroy(void *source)
{
    trace_source_t *replay = source;
    if (replay == NULL)
        return;
    trace_free(&replay->trace);
    free(replay);
}

static const kvio_stream_source_ops_t trace_ops = {
    .name = "trace",
    .next = trace_next,
    .rewind = trace_rewind,
    .destroy = trace_destroy,
};

/* ---------- loading ---------- */

/* A trace read a chunk at a time: the parser gets whole lines from one
 * reused buffer, so a large trace is never held as text (a 68 MB trace took
 * 17,000 fresh pages, each a fault, before its first record). */
#define CHUNK_BYTES (4u << 20)

typedef struct trace_reader {
    const char *path;
    FILE *file;
    char *data;       /* capacity bytes and a NUL */
    size_t capacity;
    size_t length;    /* bytes read and not yet consumed */
    uint64_t total;   /* bytes read */
    uint64_t limit;   /* the most a stream (a pipe, a device) may give */
    bool regular;
    bool eof;
} trace_reader_t;

static void reader_close(trace_reader_t *reader)
{
    if (reader->file != NULL)
        fclose(reader->file);
    free(reader->data);
    memset(reader, 0, sizeof(*reader));
}

static kvio_status_t reader_open(trace_reader_t *reader, const char *path, char *error_p,
                                 size_t error_len)
{
    memset(reader, 0, sizeof(*reader));
    reader->path = path;
    reader->file = fopen(path, "rb");
    if (reader->file == NULL) {
        int errnum = errno;
        snprintf(error_p, error_len, "%s: %s", path, strerror(errnum));
        return errnum == ENOENT ? KVIO_ERR_NOT_FOUND : kvio_status_from_errno(errnum);
    }
    /* The records are held: a file of at most half the memory available
     * now; at most 1 GiB from a pipe or a device (/dev/zero never ends). */
    uint64_t available = 0, limit = UINT64_MAX;
    if (kvio_mem_available(&available, NULL, 0) == KVIO_OK)
        limit = available / 2;
    struct stat info;
    reader->regular = fstat(fileno(reader->file), &info) == 0 && S_ISREG(info.st_mode);
    if (reader->regular && (uint64_t)info.st_size > limit) {
        snprintf(error_p, error_len, "%s: %llu bytes; a trace is held in memory, and at most "
                 "%llu bytes (half the memory available) can be", path,
                 (unsigned long long)info.st_size, (unsigned long long)limit);
        reader_close(reader);
        return KVIO_ERR_NOMEM;
    }
    reader->limit = limit < (1ull << 30) ? limit : 1ull << 30;
    reader->capacity = CHUNK_BYTES;
    if (reader->regular && (uint64_t)info.st_size < CHUNK_BYTES)
        reader->capacity = (size_t)info.st_size + 1; /* one read, and the end seen */
    reader->data = malloc(reader->capacity + 1);
    if (reader->data == NULL) {
        snprintf(error_p, error_len, "%s: out of memory reading the trace", path);
        reader_close(reader);
        return KVIO_ERR_NOMEM;
    }
    reader->data[0] = '\0';
    return KVIO_OK;
}

/* The next whole lines: data[0, *count_p), ending after a newline, or at
 * the end of the file for a last line without one; 0 at the end. A line
 * longer than KVIO_TRACE_MAX_LINE (line: its number) is an error. data is
 * NUL-terminated after what was read. */
static kvio_status_t reader_lines(trace_reader_t *reader, uint64_t line, size_t *count_p,
                                  char *error_p, size_t error_len)
{
    for (;;) {
        const char *last = reader->length > 0 ? memrchr(reader->data, '\n', reader->length)
                                              : NULL;
        if (last != NULL || reader->eof) {
            *count_p = last != NULL ? (size_t)(last - reader->data) + 1 : reader->length;
            return KVIO_OK;
        }
        if (reader->length == reader->capacity) {
            /* No newline in a full buffer: one long line. */
            if (reader->capacity > KVIO_TRACE_MAX_LINE) {
                snprintf(error_p, error_len, "%s:%llu: line longer than %u bytes", reader->path,
                         (unsigned long long)line, KVIO_TRACE_MAX_LINE);
                return KVIO_ERR_PARSE;
            }
            char *bigger = realloc(reader->data, reader->capacity * 2 + 1);
            if (bigger == NULL) {
                snprintf(error_p, error_len, "%s: out of memory reading the trace",
                         reader->path);
                return KVIO_ERR_NOMEM;
            }
            reader->data = bigger;
            reader->capacity *= 2;
        }
        size_t wanted = reader->capacity - reader->length;
        size_t got = fread(reader->data + reader->length, 1, wanted, reader->file);
        reader->length += got;
        reader->total += got;
        reader->data[reader->length] = '\0';
        if (got < wanted) {
            if (ferror(reader->file)) {
                snprintf(error_p, error_len, "%s: read error", reader->path);
                return KVIO_ERR_IO;
            }
            reader->eof = true;
        }
        if (!reader->regular && reader->total > reader->limit) {
            snprintf(error_p, error_len, "%s: more than %llu bytes from a stream (the most "
                     "kvio reads from one); save the trace to a file", reader->path,
                     (unsigned long long)reader->limit);
            return KVIO_ERR_INVALID;
        }
    }
}

/* The lines handed out were parsed: what follows them moves to the front. */
static void reader_consume(trace_reader_t *reader, size_t count)
{
    memmove(reader->data, reader->data + count, reader->length - count);
    reader->length -= count;
    reader->data[reader->length] = '\0';
}

static bool blank(const char *line, size_t length)
{
    for (size_t i = 0; i < length; i++) {
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            return false;
    }
    return true;
}

static kvio_trace_format_t detect_format(const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    if (line[0] == '{' && strstr(line, "\"messages\"") != NULL)
        return KVIO_TRACE_CONVERSATION;
    if (line[0] == '[')
        return KVIO_TRACE_CONVERSATION; /* ShareGPT */
    if (line[0] == '{')
        return strstr(line, "\"arrival_ns\"") != NULL || strstr(line, "\"segments\"") != NULL
                   ? KVIO_TRACE_KVIO
                   : KVIO_TRACE_MOONCAKE;
    if (strstr(line, "ContextTokens") != NULL)
        return KVIO_TRACE_AZURE;
    if (strstr(line, "Request tokens") != NULL)
        return KVIO_TRACE_BURSTGPT;
    return KVIO_TRACE_AUTO;
}

static int compare_records(const void *a, const void *b)
{
    const kvio_trace_record_t *x = a, *y = b;
    if (x->request.arrival_ns != y->request.arrival_ns)
        return x->request.arrival_ns < y->request.arrival_ns ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Reads every line into trace; bad lines fail or are counted. */
static kvio_status_t parse_lines(kvio_trace_t *trace, const kvio_trace_format_ops_t *ops,
                                 char *data, size_t length, bool first, uint64_t *skipped_p,
                                 char *error_p, size_t error_len)
{
    char *cursor = data, *end = data + length;
    uint64_t skipped = *skipped_p;
    if (first && length >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0)
        cursor += 3; /* a UTF-8 byte order mark, as spreadsheets write */
    while (cursor < end) {
        char *newline = memchr(cursor, '\n', (size_t)(end - cursor));
        char *line_end = newline != NULL ? newline : end;
        size_t line_length = (size_t)(line_end - cursor);
        *line_end = '\0';
        trace->line++;
        char *line = cursor;
        cursor = line_end + 1;
        if (line_length > 0 && line[line_length - 1] == '\r')
            line[--line_length] = '\0';
        if (blank(line, line_length))
            continue;
        char reason[512] = "";
        kvio_status_t status;
        size_t records = trace->num_records;
        if (line_length > KVIO_TRACE_MAX_LINE) {
            snprintf(reason, sizeof(reason), "line longer than %u bytes", KVIO_TRACE_MAX_LINE);
            status = KVIO_ERR_PARSE;
        } else if (memchr(line, '\0', line_length) != NULL) {
            snprintf(reason, sizeof(reason), "line contains a NUL byte");
            status = KVIO_ERR_PARSE;
        } else {
            status = ops->parse_line(trace, line, line_length, reason, sizeof(reason));
        }
        if (status == KVIO_OK || status == KVIO_INPROGRESS)
            continue;
        while (trace->num_records > records)
            kvio_trace_drop_last(trace);
        if (status == KVIO_ERR_PARSE && trace->options->skip_bad) {
            skipped++;
            /* The first few are worth seeing; the count says the rest. */
            kvio_log(skipped <= MAX_SKIP_WARNINGS ? KVIO_LOG_WARN : KVIO_LOG_DEBUG,
                     "%s:%llu: %s (skipped)", trace->path, (unsigned long long)trace->line,
                     reason);
            continue;
        }
        snprintf(error_p, error_len, "%s:%llu: %s", trace->path,
                 (unsigned long long)trace->line, reason[0] ? reason : kvio_strerror(status));
        return status;
    }
    *skipped_p = skipped;
    return KVIO_OK;
}

/* Sorting, origin, start, time scale, limit, end, ids and max_tokens. */
static kvio_status_t arrange(kvio_trace_t *trace, const kvio_trace_format_ops_t *ops,
                             char *error_p, size_t error_len)
{
    const kvio_stream_trace_config_t *options = trace->options;
    size_t disordered = 0;
    for (size_t i = 1; i < trace->num_records; i++) {
        const kvio_trace_record_t *record = &trace->records[i];
        if (record->request.arrival_ns >= trace->records[i - 1].request.arrival_ns)
            continue;
        if (options->strict) {
            snprintf(error_p, error_len,
                     "%s:%llu: timestamp out of order (earlier than line %llu's); "
                     "without strict it would be sorted",
                     trace->path, (unsigned long long)record->line,
                     (unsigned long long)trace->records[i - 1].line);
            return KVIO_ERR_PARSE;
        }
        disordered++;
    }
    if (disordered > 0) {
        kvio_warn("%s: %zu requests out of timestamp order; sorted by timestamp", trace->path,
                  disordered);
        qsort(trace->records, trace->num_records, sizeof(kvio_trace_record_t), compare_records);
    }
    if (ops->finish != NULL) {
        kvio_status_t status = ops->finish(trace, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    int64_t origin = 0;
    if (ops->absolute_times && trace->num_records > 0)
        origin = trace->records[0].request.arrival_ns;
    /* Dated rows weeks apart are likely one wrong date (a row of 1970 among
     * 2023's made a 54-year run): said, with the lines. */
    if (ops->absolute_times && trace->num_records > 1) {
        const kvio_trace_record_t *first = &trace->records[0];
        const kvio_trace_record_t *last = &trace->records[trace->num_records - 1];
        double days = (double)(last->request.arrival_ns - first->request.arrival_ns) / 86400e9;
        if (days > 7)
            kvio_warn("%s: the trace spans %.1f days, from line %llu to line %llu: is a row's "
                      "date wrong? (stream.trace.start and duration choose a window)",
                      trace->path, days, (unsigned long long)first->line,
                      (unsigned long long)last->line);
    }
    origin += options->start_ns;
    size_t kept = 0;
    uint64_t clamped = 0;
    for (size_t i = 0; i < trace->num_records; i++) {
        kvio_trace_record_t record = trace->records[i];
        kvio_request_t *request = &record.request;
        if (request->arrival_ns < origin)
            continue;
        if (options->limit > 0 && kept >= (size_t)options->limit)
            break;
        double scaled = (double)(request->arrival_ns - origin) * options->time_scale;
        /* Past the clock's limit before past the window's end: a request at
         * INT64_MAX was "no requests after stream.trace.start". */
        if (scaled > (double)KVIO_CLOCK_LIMIT_NS) {
            /* It saturated: requests past a run's clock, never served. */
            snprintf(error_p, error_len,
                     "%s:%llu: this request arrives %.3g years after the first (stream.trace."
                     "time_scale %g); a run's clock stops at %d (a wrong date, or a "
                     "smaller time_scale or stream.trace.limit)",
                     trace->path, (unsigned long long)record.line, scaled / 1e9 / 86400 / 365,
                     options->time_scale, KVIO_CLOCK_LIMIT_YEARS);
            return KVIO_ERR_CONFIG;
        }
        if (options->end_ns > 0 && scaled >= (double)options->end_ns)
            break; /* sorted: every later request arrives later still */
        request->arrival_ns = options->time_scale == 1.0 ? request->arrival_ns - origin
                                                         : llround(scaled);
        if (options->end_ns > 0 && request->arrival_ns >= options->end_ns)
            break; /* sorted: every later request arrives later still */
        if (request->id == UINT64_MAX)
            request->id = kept;
        if (request->max_tokens == 0) {
            request->max_tokens = options->max_tokens > 0 ? (uint32_t)options->max_tokens
                                                          : request->output_tokens;
            if (request->output_tokens > request->max_tokens) {
                request->output_tokens = request->max_tokens;
                clamped++;
            }
        }
        trace->records[kept++] = record;
    }
    trace->num_records = kept;
    if (clamped > 0)
        kvio_info("%s: %llu outputs cut to max_tokens %lld", trace->path,
                  (unsigned long long)clamped, (long long)options->max_tokens);
    return KVIO_OK;
}

/* The trace's records as a stream: after the checks every format shares
 * (nothing left after start), the replay is the stream's source. */
static kvio_status_t make_stream(trace_source_t *replay, const kvio_trace_format_ops_t *ops,
                                 uint64_t skipped, kvio_stream_t **stream_p, char *error_p,
                                 size_t error_len)
{
    kvio_trace_t *trace = &replay->trace;
    kvio_status_t status = arrange(trace, ops, error_p, error_len);
    if (status == KVIO_OK && trace->num_records == 0) {
        snprintf(error_p, error_len, "%s: no requests after stream.trace.start", trace->path);
        status = KVIO_ERR_PARSE;
    }
    if (status != KVIO_OK)
        return status;
    if (skipped > 0)
        kvio_warn("%s: skipped %llu bad lines", trace->path, (unsigned long long)skipped);
    if (trace->ids_cut > 0) /* cachesim counted them as blocks, the run did not */
        kvio_warn("%s: %llu requests carry more hash_ids than their tokens fill (line %llu "
                  "first); the ids past them are ignored", trace->path,
                  (unsigned long long)trace->ids_cut, (unsigned long long)trace->ids_cut_line);
    kvio_stream_t *stream = calloc(1, sizeof(*stream));
    if (stream == NULL)
        return KVIO_ERR_NOMEM;
    stream->ops = &trace_ops;
    stream->source = replay;
    stream->skipped_lines = skipped;
    if (ops->fini != NULL)
        ops->fini(trace);
    free(trace->format_state);
    trace->format_state = NULL;
    trace->path = NULL;
    trace->options = NULL;
    *stream_p = stream;
    return KVIO_OK;
}

static trace_source_t *new_replay(const char *path, const kvio_stream_trace_config_t *options,
                                  kvio_trace_format_t format, const kvio_trace_format_ops_t *ops)
{
    trace_source_t *replay = calloc(1, sizeof(*replay));
    if (replay == NULL)
        return NULL;
    replay->trace.path = path;
    replay->trace.options = options;
    replay->trace.format = format;
    if (ops->state_size > 0 && (replay->trace.format_state = calloc(1, ops->state_size)) == NULL) {
        free(replay);
        return NULL;
    }
    return replay;
}

static void drop_replay(trace_source_t *replay, const kvio_trace_format_ops_t *ops)
{
    if (replay == NULL)
        return;
    if (ops != NULL && ops->fini != NULL)
        ops->fini(&replay->trace);
    free(replay->trace.format_state);
    trace_destroy(replay);
}

/* A format that reads its file whole (ops->load), not a line at a time. */
static kvio_status_t open_whole(const char *path, kvio_trace_format_t format,
                                const kvio_stream_trace_config_t *options,
                                kvio_stream_t **stream_p, char *error_p, size_t error_len)
{
    const kvio_trace_format_ops_t *ops = kvio_trace_format_ops(format);
    trace_source_t *replay = new_replay(path, options, format, ops);
    kvio_status_t status = replay != NULL ? ops->load(&replay->trace, error_p, error_len)
                                          : KVIO_ERR_NOMEM;
    if (status == KVIO_OK && replay->trace.num_records == 0) {
        snprintf(error_p, error_len, "%s: no requests in the trace", path);
        status = KVIO_ERR_PARSE;
    }
    if (status == KVIO_OK)
        status = make_stream(replay, ops, 0, stream_p, error_p, error_len);
    if (status != KVIO_OK) {
        if (status == KVIO_ERR_NOMEM)
            snprintf(error_p, error_len, "%s: out of memory reading the trace", path);
        drop_replay(replay, ops);
    }
    return status;
}

/* A file that starts with '[' (a JSON array: ShareGPT), told before the
 * line reader, which a one-line document would overwhelm. */
static bool starts_an_array(const char *path)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return false;
    bool array = kvio_file_first_byte(file) == '[';
    fclose(file);
    return array;
}

kvio_status_t kvio_stream_open_trace(const char *path, kvio_trace_format_t format,
                                     const kvio_stream_trace_config_t *options,
                                     kvio_stream_t **stream_p, char *error_p, size_t error_len)
{
    if (format == KVIO_TRACE_AUTO && starts_an_array(path))
        format = KVIO_TRACE_CONVERSATION;
    if (format == KVIO_TRACE_CONVERSATION)
        return open_whole(path, format, options, stream_p, error_p, error_len);
    trace_reader_t reader;
    size_t count = 0;
    trace_source_t *replay = NULL;
    const kvio_trace_format_ops_t *ops = NULL;
    uint64_t skipped = 0;
    kvio_status_t status = reader_open(&reader, path, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    status = reader_lines(&reader, 1, &count, error_p, error_len);
    if (status != KVIO_OK)
        goto cleanup;
    char *data = reader.data;
    size_t length = reader.length;
    if (format == KVIO_TRACE_AUTO) {
        char *line = length >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0 ? data + 3 : data;
        while (*line == '\n' || *line == '\r' || *line == ' ' || *line == '\t')
            line++;
        char *newline = strchr(line, '\n');
        if (newline != NULL)
            *newline = '\0';
        format = detect_format(line);
        if (newline != NULL)
            *newline = '\n';
        if (format == KVIO_TRACE_AUTO) {
            snprintf(error_p, error_len,
                     "%s: cannot tell the trace format from the first line; set "
                     "stream.trace.format (kvio, mooncake, azure, burstgpt, conversation)",
                     path);
            status = KVIO_ERR_PARSE;
            goto cleanup;
        }
        if (format == KVIO_TRACE_CONVERSATION) {
            reader_close(&reader);
            return open_whole(path, format, options, stream_p, error_p, error_len);
        }
    }
    ops = kvio_trace_format_ops(format);
    if (ops == NULL) {
        snprintf(error_p, error_len, "%s: unknown trace format", path);
        status = KVIO_ERR_INVALID;
        goto cleanup;
    }
    replay = new_replay(path, options, format, ops);
    if (replay == NULL) {
        status = KVIO_ERR_NOMEM;
        goto cleanup;
    }
    kvio_trace_t *trace = &replay->trace;
    for (bool first = true; status == KVIO_OK && count > 0; first = false) {
        status = parse_lines(trace, ops, reader.data, count, first, &skipped, error_p,
                             error_len);
        reader_consume(&reader, count);
        if (status == KVIO_OK)
            status = reader_lines(&reader, trace->line + 1, &count, error_p, error_len);
    }
    if (status == KVIO_OK && trace->num_records == 0) {
        snprintf(error_p, error_len, "%s: no requests in the trace%s", path,
                 skipped > 0 ? " (every line was bad and skipped)" : "");
        status = KVIO_ERR_PARSE;
    }
    if (status == KVIO_OK)
        status = make_stream(replay, ops, skipped, stream_p, error_p, error_len);
    if (status != KVIO_OK)
        goto cleanup;
    reader_close(&reader);
    return KVIO_OK;

cleanup:
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "%s: out of memory reading the trace", path);
    drop_replay(replay, ops);
    reader_close(&reader);
    return status;
}
