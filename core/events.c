/* The event-trace writer: the calling thread formats each event into a
 * line buffer of its own by hand (no printf on the hot path except for
 * fractional arguments) and copies it into the trace's chunk under a lock;
 * a writer thread compresses (.gz) and writes full chunks while the next
 * fills (ISA-L's igzip or libdeflate where it was built, else zlib); close
 * adds the rank names and the closing "]". */
#include "kvio/events.h"

#include "kvio/array.h"
#include "kvio/format.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if KVIO_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#elif KVIO_HAVE_LIBDEFLATE
#include <libdeflate.h>
#else
#include <zlib.h>
#endif

#define LINE_MAX_BYTES 8192
#define MAX_NAMED_RANKS 65536
/* A chunk of whole lines: one write (one gzip member) each. */
#define CHUNK_BYTES (1u << 20)

/* The last request id list written, as text: consecutive iterations of a
 * rank mostly run the same batch (three in four on the chat preset), whose
 * ids are then copied, not formatted again; a list that starts as the last
 * one did (a request finished or joined past them) copies that start (on
 * the chat preset 220,000 of the 350,000 ids the whole-list copy left to
 * format). Its own lock, tried: a caller that finds it taken formats its
 * ids itself. */
typedef struct id_list_cache {
    pthread_mutex_t lock;
    uint64_t ids[KVIO_EVENT_MAX_REQUEST_IDS];
    size_t count; /* 0: empty */
    char text[KVIO_EVENT_MAX_REQUEST_IDS * 21];
    uint16_t ends[KVIO_EVENT_MAX_REQUEST_IDS]; /* where each id's text ends in text */
} id_list_cache_t;

/* Two chunks: the callers fill one while the writer thread writes the
 * other. */
struct kvio_event_trace {
    pthread_mutex_t lock; /* guards everything below but the writer's own */
    pthread_cond_t changed; /* a chunk handed over, written, or the end */
    pthread_t writer;
    FILE *file;
    bool gzip;
    kvio_event_level_t level;
    char *chunks;            /* both, populated at once (kvio_populated_alloc) */
    char *filling, *pending; /* CHUNK_BYTES each; pending is the writer's */
    size_t filling_length, pending_length;
    bool has_pending, closing;
    uint64_t next_id;
    kvio_status_t error;
    uint32_t max_rank;
    bool any_rank;
    uint8_t *ranks_seen; /* MAX_NAMED_RANKS flags */
    id_list_cache_t id_cache;
    /* The writer thread's alone: ISA-L's igzip where it was built (level
     * 1: about 4x libdeflate's speed on a trace, 10 % larger), else
     * libdeflate's compressor (about 1.6x zlib's speed at level 1), else
     * zlib's stream. */
#if KVIO_HAVE_ISAL
    uint8_t *level_buffer; /* igzip's level-1 hash tables */
#elif KVIO_HAVE_LIBDEFLATE
    struct libdeflate_compressor *compressor;
#else
    z_stream stream;
#endif
    unsigned char *compressed;
    size_t compressed_capacity;
};

static const char *const kind_names[] = {"iteration", "update", "swap", "tier"};
static const char *const track_names[] = {"iterations", "model updates", "swaps", "tier I/O"};

/* ---------- line building ---------- */

typedef struct line {
    char text[LINE_MAX_BYTES];
    size_t length;
} line_t;

static void put_bytes(line_t *line, const char *text, size_t length)
{
    if (line->length + length >= LINE_MAX_BYTES - 64)
        length = LINE_MAX_BYTES - 64 > line->length ? LINE_MAX_BYTES - 64 - line->length : 0;
    memcpy(line->text + line->length, text, length);
    line->length += length;
}

static void put(line_t *line, const char *text)
{
    put_bytes(line, text, strlen(text));
}

/* A string literal, its length known at compile time: copied with
 * constant-size moves where it fits (put_bytes's clamp made every copy a
 * call to memcpy, a tenth of an event's formatting). */
#define PUT_LITERAL(line, literal)                                                \
    do {                                                                          \
        if ((line)->length + sizeof(literal) < LINE_MAX_BYTES - 64) {             \
            memcpy((line)->text + (line)->length, "" literal, sizeof(literal) - 1); \
            (line)->length += sizeof(literal) - 1;                                \
        } else {                                                                  \
            put_bytes((line), "" literal, sizeof(literal) - 1);                   \
        }                                                                         \
    } while (0)

/* A JSON string: quotes, backslashes and control characters escaped. */
static void put_string(line_t *line, const char *text)
{
    line->text[line->length++] = '"';
    for (const unsigned char *c = (const unsigned char *)text;
         *c != '\0' && line->length < LINE_MAX_BYTES - 80; c++) {
        if (*c == '"' || *c == '\\') {
            line->text[line->length++] = '\\';
            line->text[line->length++] = (char)*c;
        } else if (*c < 0x20) {
            line->length += (size_t)snprintf(line->text + line->length, 8, "\\u%04x", *c);
        } else {
            line->text[line->length++] = (char)*c;
        }
    }
    line->text[line->length++] = '"';
}

static void put_uint(line_t *line, uint64_t value)
{
    line->length += kvio_format_unsigned(line->text + line->length, value);
}

static void put_int(line_t *line, int64_t value)
{
    if (value < 0) {
        line->text[line->length++] = '-';
        put_uint(line, (uint64_t)0 - (uint64_t)value);
    } else {
        put_uint(line, (uint64_t)value);
    }
}

static void put_number(line_t *line, double value)
{
    if (!isfinite(value)) {
        put(line, "null");
    } else if (value == floor(value) && fabs(value) < 9e15) {
        put_int(line, (int64_t)value);
    } else if (fabs(value) < 1e9) {
        /* Six decimals by hand: printf("%g") would cost more than the rest
         * of the event (kv_usage is fractional on every iteration). */
        if (value < 0) {
            line->text[line->length++] = '-';
            value = -value;
        }
        uint64_t micro = (uint64_t)(value * 1e6 + 0.5);
        put_uint(line, micro / 1000000);
        uint64_t fraction = micro % 1000000;
        if (fraction > 0) {
            char digits[6];
            for (int i = 5; i >= 0; i--, fraction /= 10)
                digits[i] = (char)('0' + fraction % 10);
            int length = 6;
            while (digits[length - 1] == '0')
                length--;
            line->text[line->length++] = '.';
            memcpy(line->text + line->length, digits, (size_t)length);
            line->length += (size_t)length;
        }
    } else {
        line->length += (size_t)snprintf(line->text + line->length, 32, "%.6g", value);
    }
}

/* An argument's key: an identifier of kvio's (kvio_event_arg_t), written as
 * it is. */
static void put_key(line_t *line, const char *key)
{
    line->text[line->length++] = ',';
    line->text[line->length++] = '"';
    put(line, key);
    line->text[line->length++] = '"';
    line->text[line->length++] = ':';
}

/* ---------- the trace ---------- */

kvio_status_t kvio_event_level_parse(const char *text, kvio_event_level_t *level_p)
{
    static const struct {
        const char *name;
        kvio_event_level_t level;
    } levels[] = {{"iterations", KVIO_EVENT_LEVEL_ITERATIONS},
                  {"requests", KVIO_EVENT_LEVEL_REQUESTS},
                  {"io", KVIO_EVENT_LEVEL_IO}};
    for (size_t i = 0; text != NULL && i < sizeof(levels) / sizeof(levels[0]); i++)
        if (strcmp(text, levels[i].name) == 0) {
            *level_p = levels[i].level;
            return KVIO_OK;
        }
    return KVIO_ERR_INVALID;
}

/* Writes one chunk (the writer thread, without the lock): raw, or one gzip
 * member. */
static kvio_status_t write_chunk(kvio_event_trace_t *trace, const char *text, size_t length)
{
    if (length == 0)
        return KVIO_OK;
    if (!trace->gzip)
        return fwrite(text, 1, length, trace->file) == length ? KVIO_OK : KVIO_ERR_IO;
#if KVIO_HAVE_ISAL
    struct isal_zstream stream;
    isal_deflate_stateless_init(&stream);
    stream.level = 1;
    stream.level_buf = trace->level_buffer;
    stream.level_buf_size = ISAL_DEF_LVL1_DEFAULT;
    stream.gzip_flag = IGZIP_GZIP;
    stream.end_of_stream = 1;
    stream.flush = NO_FLUSH;
    stream.next_in = (uint8_t *)(uintptr_t)text;
    stream.avail_in = (uint32_t)length;
    stream.next_out = trace->compressed;
    stream.avail_out = (uint32_t)trace->compressed_capacity;
    if (isal_deflate_stateless(&stream) != COMP_OK)
        return KVIO_ERR_IO;
    size_t bytes = stream.total_out;
#elif KVIO_HAVE_LIBDEFLATE
    size_t bytes = libdeflate_gzip_compress(trace->compressor, text, length, trace->compressed,
                                            trace->compressed_capacity);
    if (bytes == 0)
        return KVIO_ERR_IO;
#else
    if (deflateReset(&trace->stream) != Z_OK)
        return KVIO_ERR_IO;
    trace->stream.next_in = (unsigned char *)(uintptr_t)text;
    trace->stream.avail_in = (uInt)length;
    trace->stream.next_out = trace->compressed;
    trace->stream.avail_out = (uInt)trace->compressed_capacity;
    if (deflate(&trace->stream, Z_FINISH) != Z_STREAM_END)
        return KVIO_ERR_IO;
    size_t bytes = trace->compressed_capacity - trace->stream.avail_out;
#endif
    return fwrite(trace->compressed, 1, bytes, trace->file) == bytes ? KVIO_OK : KVIO_ERR_IO;
}

/* The writer thread: writes each chunk handed over until the trace closes. */
static void *writer_main(void *argument)
{
    kvio_event_trace_t *trace = argument;
    pthread_mutex_lock(&trace->lock);
    for (;;) {
        while (!trace->has_pending && !trace->closing)
            pthread_cond_wait(&trace->changed, &trace->lock);
        if (!trace->has_pending)
            break;
        pthread_mutex_unlock(&trace->lock);
        kvio_status_t status = write_chunk(trace, trace->pending, trace->pending_length);
        pthread_mutex_lock(&trace->lock);
        if (status != KVIO_OK && trace->error == KVIO_OK)
            trace->error = status;
        trace->has_pending = false;
        pthread_cond_broadcast(&trace->changed);
    }
    pthread_mutex_unlock(&trace->lock);
    return NULL;
}

/* Hands the filling chunk to the writer (lock held), once it has written
 * the one before. */
static void hand_over(kvio_event_trace_t *trace)
{
    while (trace->has_pending)
        pthread_cond_wait(&trace->changed, &trace->lock);
    char *swap = trace->pending;
    trace->pending = trace->filling;
    trace->pending_length = trace->filling_length;
    trace->filling = swap;
    trace->filling_length = 0;
    trace->has_pending = true;
    pthread_cond_broadcast(&trace->changed);
}

/* Appends text to the trace (lock held). */
static void append(kvio_event_trace_t *trace, const char *text, size_t length)
{
    if (trace->filling_length + length > CHUNK_BYTES)
        hand_over(trace);
    memcpy(trace->filling + trace->filling_length, text, length);
    trace->filling_length += length;
}

static void trace_free(kvio_event_trace_t *trace)
{
#if KVIO_HAVE_ISAL
    free(trace->level_buffer);
#elif KVIO_HAVE_LIBDEFLATE
    libdeflate_free_compressor(trace->compressor);
#else
    if (trace->gzip)
        deflateEnd(&trace->stream);
#endif
    kvio_zeroed_free(trace->compressed, trace->compressed_capacity);
    kvio_zeroed_free(trace->chunks, 2 * CHUNK_BYTES);
    free(trace->ranks_seen);
    pthread_mutex_destroy(&trace->id_cache.lock);
    free(trace);
}

kvio_status_t kvio_event_trace_open(const char *path, kvio_event_level_t level,
                                    kvio_event_trace_t **trace_p, char *error_p,
                                    size_t error_len)
{
    kvio_event_trace_t *trace = calloc(1, sizeof(*trace));
    if (trace == NULL)
        return KVIO_ERR_NOMEM;
    size_t path_length = strlen(path);
    trace->gzip = path_length > 3 && strcmp(path + path_length - 3, ".gz") == 0;
    trace->level = level;
    pthread_mutex_init(&trace->id_cache.lock, NULL);
    trace->ranks_seen = calloc(MAX_NAMED_RANKS, 1);
    trace->chunks = kvio_populated_alloc(2 * CHUNK_BYTES);
    if (trace->chunks != NULL) {
        trace->filling = trace->chunks;
        trace->pending = trace->chunks + CHUNK_BYTES;
    }
    if (trace->gzip) {
        /* Each chunk one gzip member (header and trailer); level 1: the
         * writer keeps up with the callers. */
#if KVIO_HAVE_ISAL
        trace->level_buffer = malloc(ISAL_DEF_LVL1_DEFAULT);
        if (trace->level_buffer == NULL) {
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
        /* igzip's bound: the input in stored blocks, their headers, and
         * the gzip header and trailer. */
        trace->compressed_capacity = CHUNK_BYTES + CHUNK_BYTES / 1024 + 1024;
#elif KVIO_HAVE_LIBDEFLATE
        trace->compressor = libdeflate_alloc_compressor(1);
        if (trace->compressor == NULL) {
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
        trace->compressed_capacity = libdeflate_gzip_compress_bound(trace->compressor,
                                                                    CHUNK_BYTES);
#else
        if (deflateInit2(&trace->stream, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
            Z_OK) {
            trace->gzip = false;
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
        trace->compressed_capacity = deflateBound(&trace->stream, CHUNK_BYTES);
#endif
        trace->compressed = kvio_populated_alloc(trace->compressed_capacity);
    }
    if (trace->ranks_seen == NULL || trace->filling == NULL || trace->pending == NULL ||
        (trace->gzip && trace->compressed == NULL)) {
        trace_free(trace);
        return KVIO_ERR_NOMEM;
    }
    trace->file = fopen(path, "w");
    if (trace->file == NULL) {
        kvio_status_t status = kvio_status_from_errno(errno);
        snprintf(error_p, error_len, "--event-trace %s: %s", path, strerror(errno));
        trace_free(trace);
        return status == KVIO_ERR_NOT_FOUND ? KVIO_ERR_INVALID : status;
    }
    setvbuf(trace->file, NULL, _IONBF, 0); /* whole chunks go out as they are */
    pthread_mutex_init(&trace->lock, NULL);
    pthread_cond_init(&trace->changed, NULL);
    int failed = pthread_create(&trace->writer, NULL, writer_main, trace);
    if (failed != 0) {
        snprintf(error_p, error_len, "--event-trace %s: no writer thread: %s", path,
                 strerror(failed));
        fclose(trace->file);
        pthread_cond_destroy(&trace->changed);
        pthread_mutex_destroy(&trace->lock);
        trace_free(trace);
        return KVIO_ERR_NOMEM;
    }
    append(trace, "[\n", 2);
    *trace_p = trace;
    return KVIO_OK;
}

/* count ids, comma-separated: the cache's text for as many leading ids as
 * are its own, the rest formatted (and the cache then holds this list). */
static void put_request_ids(id_list_cache_t *cache, line_t *line, const uint64_t *ids,
                            size_t count)
{
    size_t start = line->length, shared = 0, kept = 0; /* ids, and bytes of text */
    bool cached = pthread_mutex_trylock(&cache->lock) == 0;
    if (cached) {
        while (shared < count && shared < cache->count && ids[shared] == cache->ids[shared])
            shared++;
        kept = shared > 0 ? cache->ends[shared - 1] : 0;
        memcpy(line->text + start, cache->text, kept);
        line->length += kept;
        if (shared == count && shared == cache->count) {
            pthread_mutex_unlock(&cache->lock);
            return;
        }
    }
    for (size_t i = shared; i < count; i++) {
        if (i > 0)
            line->text[line->length++] = ',';
        put_uint(line, ids[i]);
        if (cached)
            cache->ends[i] = (uint16_t)(line->length - start);
    }
    if (!cached)
        return;
    cache->count = count;
    memcpy(cache->ids + shared, ids + shared, (count - shared) * sizeof(*ids));
    memcpy(cache->text + kept, line->text + start + kept, line->length - start - kept);
    pthread_mutex_unlock(&cache->lock);
}

static void write_line(kvio_event_trace_t *trace, line_t *line)
{
    append(trace, line->text, line->length);
}

void kvio_event_trace_write(kvio_event_trace_t *trace, const kvio_event_t *event)
{
    if (trace == NULL || event == NULL)
        return;
    unsigned kind = (unsigned)event->kind < 4 ? (unsigned)event->kind : 0;
    if (trace->level != KVIO_EVENT_LEVEL_IO && kind != KVIO_EVENT_ITERATION)
        return;
    bool with_ids = trace->level != KVIO_EVENT_LEVEL_ITERATIONS;
    /* Whole microseconds; the duration is the difference of rounded ends so
     * that back-to-back events never overlap. */
    int64_t start_us = event->start_ns / 1000;
    int64_t end_us = (event->start_ns + (event->duration_ns > 0 ? event->duration_ns : 0)) / 1000;
    /* The line is made without the lock from its "name" on, leaving room
     * in front for the id, which is taken under the lock with the copy and
     * put just before it. */
    enum { ID_ROOM = 32 };
    line_t body;
    body.length = ID_ROOM;
    PUT_LITERAL(&body, ",\"name\":");
    put_string(&body, event->name != NULL ? event->name : kind_names[kind]);
    PUT_LITERAL(&body, ",\"cat\":\"");
    put(&body, kind_names[kind]);
    PUT_LITERAL(&body, "\",\"pid\":");
    put_uint(&body, event->rank);
    PUT_LITERAL(&body, ",\"tid\":");
    put_uint(&body, kind + 1);
    PUT_LITERAL(&body, ",\"ts\":");
    put_int(&body, start_us);
    PUT_LITERAL(&body, ",\"dur\":");
    put_int(&body, end_us - start_us);
    PUT_LITERAL(&body, ",\"ph\":\"X\",\"args\":{\"rank\":");
    put_uint(&body, event->rank);
    if (event->label != NULL) {
        put_key(&body, kind == KVIO_EVENT_UPDATE ? "stage" : "tier");
        put_string(&body, event->label);
    }
    if (event->bytes >= 0) {
        put_key(&body, "bytes");
        put_int(&body, event->bytes);
    }
    /* Arguments and ids stop short of the line buffer's end. */
    for (size_t i = 0; i < event->num_args && event->args != NULL &&
                       body.length < LINE_MAX_BYTES - 1800; i++) {
        put_key(&body, event->args[i].key != NULL ? event->args[i].key : "value");
        put_number(&body, event->args[i].value);
    }
    if (with_ids && event->request_ids != NULL && event->num_request_ids > 0) {
        PUT_LITERAL(&body, ",\"num_requests\":");
        put_uint(&body, event->num_request_ids);
        PUT_LITERAL(&body, ",\"request_ids\":[");
        size_t shown = event->num_request_ids < KVIO_EVENT_MAX_REQUEST_IDS
                           ? event->num_request_ids
                           : KVIO_EVENT_MAX_REQUEST_IDS;
        put_request_ids(&trace->id_cache, &body, event->request_ids, shown);
        body.text[body.length++] = ']';
    }
    PUT_LITERAL(&body, "}},\n");
    pthread_mutex_lock(&trace->lock);
    char id[ID_ROOM] = "{\"id\":"; /* and up to 20 digits */
    size_t id_length = 6 + kvio_format_unsigned(id + 6, trace->next_id++);
    char *start = body.text + ID_ROOM - id_length;
    memcpy(start, id, id_length);
    if (event->rank < MAX_NAMED_RANKS) {
        trace->ranks_seen[event->rank] |= (uint8_t)(1u << kind);
        if (!trace->any_rank || event->rank > trace->max_rank)
            trace->max_rank = event->rank;
        trace->any_rank = true;
    }
    append(trace, start, body.length - (ID_ROOM - id_length));
    pthread_mutex_unlock(&trace->lock);
}

/* A metadata event naming a process (tid < 0) or a thread; the last one of
 * the file has no trailing comma so that the file is one JSON array. */
static void write_name(kvio_event_trace_t *trace, uint32_t pid, int tid, const char *name,
                       bool last)
{
    line_t line;
    line.length = 0;
    put(&line, tid < 0 ? "{\"name\":\"process_name\"" : "{\"name\":\"thread_name\"");
    put(&line, ",\"cat\":\"kvio\",\"ph\":\"M\",\"pid\":");
    put_uint(&line, pid);
    put(&line, ",\"tid\":");
    put_uint(&line, tid < 0 ? 0 : (uint64_t)tid);
    put(&line, ",\"args\":{\"name\":");
    put_string(&line, name);
    put(&line, last ? "}}\n" : "}},\n");
    write_line(trace, &line);
}

kvio_status_t kvio_event_trace_close(kvio_event_trace_t *trace)
{
    if (trace == NULL)
        return KVIO_OK;
    pthread_mutex_lock(&trace->lock);
    if (!trace->any_rank) {
        write_name(trace, 0, -1, "kvio", true);
    } else {
        /* Find the last name written, to leave its comma off. */
        uint32_t last_rank = 0;
        int last_tid = -1;
        for (uint32_t rank = 0; rank <= trace->max_rank; rank++) {
            if (trace->ranks_seen[rank] == 0)
                continue;
            last_rank = rank;
            last_tid = -1;
            for (int kind = 0; kind < 4; kind++)
                if (trace->ranks_seen[rank] & (1u << kind))
                    last_tid = kind + 1;
        }
        for (uint32_t rank = 0; rank <= trace->max_rank; rank++) {
            if (trace->ranks_seen[rank] == 0)
                continue;
            char name[48];
            snprintf(name, sizeof(name), "serve rank %u", rank);
            write_name(trace, rank, -1, name, rank == last_rank && last_tid < 0);
            for (int kind = 0; kind < 4; kind++)
                if (trace->ranks_seen[rank] & (1u << kind))
                    write_name(trace, rank, kind + 1, track_names[kind],
                               rank == last_rank && kind + 1 == last_tid);
        }
    }
    append(trace, "]\n", 2);
    hand_over(trace);
    trace->closing = true;
    pthread_cond_broadcast(&trace->changed);
    pthread_mutex_unlock(&trace->lock);
    pthread_join(trace->writer, NULL);
    if (fclose(trace->file) != 0 && trace->error == KVIO_OK)
        trace->error = KVIO_ERR_IO;
    kvio_status_t status = trace->error;
    pthread_cond_destroy(&trace->changed);
    pthread_mutex_destroy(&trace->lock);
    trace_free(trace);
    return status;
}

void kvio_event_trace_update(kvio_event_trace_t *trace, uint32_t rank, uint64_t version,
                             const char *stage, int64_t start_ns, int64_t duration_ns,
                             int64_t bytes)
{
    kvio_event_arg_t args[] = {{"version", (double)version}};
    kvio_event_t event = {.kind = KVIO_EVENT_UPDATE, .name = stage, .rank = rank,
                          .start_ns = start_ns, .duration_ns = duration_ns, .bytes = bytes,
                          .args = args, .num_args = 1, .label = stage};
    kvio_event_trace_write(trace, &event);
}

void kvio_event_trace_swap(kvio_event_trace_t *trace, uint32_t rank, int out, int64_t start_ns,
                           int64_t duration_ns, int64_t bytes, const uint64_t *request_ids,
                           size_t num_request_ids)
{
    kvio_event_t event = {.kind = KVIO_EVENT_SWAP, .name = out ? "swap_out" : "swap_in",
                          .rank = rank, .start_ns = start_ns, .duration_ns = duration_ns,
                          .bytes = bytes, .request_ids = request_ids,
                          .num_request_ids = num_request_ids};
    kvio_event_trace_write(trace, &event);
}

void kvio_event_trace_tier(kvio_event_trace_t *trace, uint32_t rank, const char *tier, int write,
                           int64_t start_ns, int64_t duration_ns, int64_t bytes,
                           const uint64_t *request_ids, size_t num_request_ids)
{
    kvio_event_t event = {.kind = KVIO_EVENT_TIER, .name = write ? "tier_write" : "tier_read",
                          .rank = rank, .start_ns = start_ns, .duration_ns = duration_ns,
                          .bytes = bytes, .request_ids = request_ids,
                          .num_request_ids = num_request_ids, .label = tier};
    kvio_event_trace_write(trace, &event);
}
