/* The event-trace writer. A calling thread writes its events into a chunk
 * of its own, with no lock and no atomic operation per event: an
 * iteration as a small binary record (its numbers, and of its request ids
 * only those its last list did not start with), any other event as its
 * finished line. A full chunk is handed to a writer thread (under the
 * lock, once a chunk), which makes the text (an iteration's line from a
 * template: its fixed text copied, only the numbers formatted by hand),
 * compresses it (.gz: ISA-L's igzip or libdeflate where it was built, else
 * zlib) and writes it. The run's thread so touches a few cache lines per
 * event, and the text is compressed while it is in the writer's caches
 * (formatting in the caller, between the run's own work, took twice as
 * long as the same code in a loop, and slowed the run's code by evicting
 * its data). Close hands over what every thread holds, then the rank
 * names and the closing "]". */
#include "kvio/events.h"

#include "kvio/array.h"
#include "kvio/format.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
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
/* A thread's chunk of records; handed over when a record might not fit. */
#define CHUNK_BYTES (1u << 18)
/* The writer's text: whole lines, one write (one gzip member) each. */
#define TEXT_BYTES (1u << 20)
/* Threads with a chunk of their own; more share one under the lock. */
#define MAX_WRITERS 64
/* Chunks handed over and not yet written: a caller that gets further
 * ahead of the writer waits. */
#define QUEUE_MAX 2
/* Event ids are taken in blocks (under the lock): one thread's ids
 * increase, and a single-threaded trace's are consecutive. */
#define ID_BLOCK 4096

/* A chunk is a run of records, each 8-byte aligned: a head, then length
 * bytes of payload. */
enum { RECORD_TEXT = 1, RECORD_ITERATION = 2 };
typedef struct record_head {
    uint32_t type;
    uint32_t length;
} record_head_t;

/* An iteration (kvio_event_iteration_t) with its event id and whole
 * microseconds; then fresh request ids (uint64_t each) that follow the
 * first shared ids of the thread's last list. num_requests 0: no ids. */
typedef struct iteration_record {
    uint64_t id;
    int64_t start_us, duration_us;
    uint64_t batch_size, prefill_tokens, decode_seqs;
    double kv_usage;
    uint64_t running, waiting, preempted, num_requests;
    uint32_t rank;
    uint16_t shared, fresh;
} iteration_record_t;

/* Room a record may take at most: a line, or an iteration with all its ids. */
#define RECORD_MAX_BYTES (sizeof(record_head_t) + LINE_MAX_BYTES)

/* The last request id list written, as text: consecutive iterations of a
 * rank mostly run the same batch (three in four on the chat preset),
 * whose ids are then copied, not formatted again; a list that starts as
 * the last one did (a request finished or joined past them) copies that
 * start (on the chat preset 220,000 of the 350,000 ids the whole-list copy
 * left to format). */
typedef struct id_list_cache {
    size_t count; /* 0: empty; the ids are the slot's last_ids as its records said them */
    char text[KVIO_EVENT_MAX_REQUEST_IDS * 21];
    uint16_t ends[KVIO_EVENT_MAX_REQUEST_IDS]; /* where each id's text ends in text */
} id_list_cache_t;

/* What one writing thread owns: only that thread touches it (the shared
 * slot of threads past MAX_WRITERS: under the lock), until close, which
 * every write has returned before; but id_cache, the writer thread's. */
typedef struct slot {
    pthread_t thread;
    char *chunk; /* CHUNK_BYTES */
    size_t length;
    uint64_t next_id, ids_left;
    /* The thread's last iteration id list, as its records say it. */
    uint64_t last_ids[KVIO_EVENT_MAX_REQUEST_IDS];
    size_t num_last_ids;
    uint8_t ranks_seen[MAX_NAMED_RANKS]; /* bit kind: the rank had an event of kind */
    uint32_t max_rank;
    bool any_rank;
    id_list_cache_t id_cache; /* the writer's: the same lists, as text */
} slot_t;

struct kvio_event_trace {
    pthread_mutex_t lock;   /* guards everything below but the slots' contents */
    pthread_cond_t changed; /* a chunk handed over, written, or the end */
    pthread_t writer;
    FILE *file;
    bool gzip;
    kvio_event_level_t level;
    /* The writing threads' slots: slots[i] is set before num_slots counts
     * it (a release store), so a caller finds its own with plain loads. */
    slot_t *slots[MAX_WRITERS];
    _Atomic size_t num_slots;
    slot_t *shared; /* threads past MAX_WRITERS, under the lock */
    /* Full chunks in the order handed over, with their slots; the writer
     * writes the first and then puts it among the spares. */
    char *queue[QUEUE_MAX];
    size_t queue_lengths[QUEUE_MAX];
    slot_t *queue_slots[QUEUE_MAX];
    size_t queue_first, queue_count;
    /* Chunks not in use: room for every one there can be (one a slot,
     * the shared slot's, and those queued). */
    char *spares[MAX_WRITERS + 1 + QUEUE_MAX];
    size_t num_spares;
    bool closing;
    uint64_t next_id_block;
    kvio_status_t error;
    /* The writer thread's alone: the text of the records (the opening
     * line first), written out when a line might not fit; ISA-L's igzip
     * where it was built (level 1: about 4x libdeflate's speed on a
     * trace, 10 % larger), else libdeflate's compressor (about 1.6x zlib's
     * speed at level 1), else zlib's stream. */
    char *text; /* TEXT_BYTES + LINE_MAX_BYTES */
    size_t text_length;
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

static size_t record_size(size_t length)
{
    return sizeof(record_head_t) + ((length + 7) & ~(size_t)7);
}

/* ---------- line building ---------- */

/* A line being made in place (with LINE_MAX_BYTES of room for it). */
typedef struct line {
    char *text;
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
    } else if (fabs(value) < 9e15 && (double)(int64_t)value == value) {
        /* An integer (floor() was a library call a number). */
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

/* Writes text (the writer thread, without the lock): raw, or one gzip
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

/* count ids, comma-separated: the cache's text for the first shared (the
 * record found them equal to the last list's, which the cache holds), then
 * fresh, the count - shared others, formatted (and the cache then holds
 * this list). */
static void put_request_ids(id_list_cache_t *cache, line_t *line, size_t shared,
                            const uint64_t *fresh, size_t count)
{
    size_t start = line->length;
    size_t kept = shared > 0 ? cache->ends[shared - 1] : 0; /* bytes of text */
    memcpy(line->text + start, cache->text, kept);
    line->length += kept;
    if (shared == count && shared == cache->count)
        return;
    for (size_t i = shared; i < count; i++) {
        if (i > 0)
            line->text[line->length++] = ',';
        put_uint(line, fresh[i - shared]);
        cache->ends[i] = (uint16_t)(line->length - start);
    }
    cache->count = count;
    memcpy(cache->text + kept, line->text + start + kept, line->length - start - kept);
}

/* The request ids and the line's end: with the slot's cache (the
 * writer's), its text for the first shared and ids the shown - shared
 * others; without one (shared 0), the shown ids formatted as they are. */
static void put_ids_and_end(line_t *line, id_list_cache_t *cache, size_t shared,
                            const uint64_t *ids, size_t count, size_t shown)
{
    if (shown > 0) {
        PUT_LITERAL(line, ",\"num_requests\":");
        put_uint(line, count);
        PUT_LITERAL(line, ",\"request_ids\":[");
        if (cache != NULL) {
            put_request_ids(cache, line, shared, ids, shown);
        } else {
            for (size_t i = 0; i < shown; i++) {
                if (i > 0)
                    line->text[line->length++] = ',';
                put_uint(line, ids[i]);
            }
        }
        line->text[line->length++] = ']';
    }
    PUT_LITERAL(line, "}},\n");
}

/* An iteration record's line from its template (the writer thread): the
 * same bytes as format_event makes of the event (its arguments are
 * integers but kv_usage). */
static void render_iteration(line_t *line, id_list_cache_t *cache,
                             const iteration_record_t *record, const uint64_t *fresh)
{
    PUT_LITERAL(line, "{\"id\":");
    put_uint(line, record->id);
    PUT_LITERAL(line, ",\"name\":\"iteration\",\"cat\":\"iteration\",\"pid\":");
    put_uint(line, record->rank);
    PUT_LITERAL(line, ",\"tid\":1,\"ts\":");
    put_int(line, record->start_us);
    PUT_LITERAL(line, ",\"dur\":");
    put_int(line, record->duration_us);
    PUT_LITERAL(line, ",\"ph\":\"X\",\"args\":{\"rank\":");
    put_uint(line, record->rank);
    PUT_LITERAL(line, ",\"batch_size\":");
    put_uint(line, record->batch_size);
    PUT_LITERAL(line, ",\"prefill_tokens\":");
    put_uint(line, record->prefill_tokens);
    PUT_LITERAL(line, ",\"decode_seqs\":");
    put_uint(line, record->decode_seqs);
    PUT_LITERAL(line, ",\"kv_usage\":");
    put_number(line, record->kv_usage);
    PUT_LITERAL(line, ",\"running\":");
    put_uint(line, record->running);
    PUT_LITERAL(line, ",\"waiting\":");
    put_uint(line, record->waiting);
    PUT_LITERAL(line, ",\"preempted\":");
    put_uint(line, record->preempted);
    /* The list: the start it shares with the slot's last one (the
     * cache's, which holds the same lists in the same order), then the
     * fresh ids. */
    put_ids_and_end(line, cache, record->shared, fresh, record->num_requests,
                    (size_t)record->shared + record->fresh);
}

/* Writes the text made so far (the writer thread); the error kept. */
static void text_out(kvio_event_trace_t *trace)
{
    kvio_status_t status = write_chunk(trace, trace->text, trace->text_length);
    trace->text_length = 0;
    if (status != KVIO_OK) {
        pthread_mutex_lock(&trace->lock);
        if (trace->error == KVIO_OK)
            trace->error = status;
        pthread_mutex_unlock(&trace->lock);
    }
}

/* The text of a chunk's records (the writer thread, without the lock). */
static void render_chunk(kvio_event_trace_t *trace, slot_t *slot, const char *chunk,
                         size_t length)
{
    for (size_t at = 0; at < length;) {
        const record_head_t *head = (const record_head_t *)(const void *)(chunk + at);
        const char *payload = chunk + at + sizeof(*head);
        if (trace->text_length + LINE_MAX_BYTES > TEXT_BYTES)
            text_out(trace);
        if (head->type == RECORD_TEXT) {
            memcpy(trace->text + trace->text_length, payload, head->length);
            trace->text_length += head->length;
        } else {
            line_t line = {.text = trace->text + trace->text_length, .length = 0};
            const iteration_record_t *record = (const iteration_record_t *)(const void *)payload;
            render_iteration(&line, &slot->id_cache, record,
                             (const uint64_t *)(const void *)(payload + sizeof(*record)));
            trace->text_length += line.length;
        }
        at += record_size(head->length);
    }
}

/* The writer thread: makes the text of each chunk handed over, in order,
 * writing it out a TEXT_BYTES at a time, until the trace closes. */
static void *writer_main(void *argument)
{
    kvio_event_trace_t *trace = argument;
    pthread_mutex_lock(&trace->lock);
    for (;;) {
        while (trace->queue_count == 0 && !trace->closing)
            pthread_cond_wait(&trace->changed, &trace->lock);
        if (trace->queue_count == 0)
            break;
        char *chunk = trace->queue[trace->queue_first];
        size_t length = trace->queue_lengths[trace->queue_first];
        slot_t *slot = trace->queue_slots[trace->queue_first];
        pthread_mutex_unlock(&trace->lock);
        render_chunk(trace, slot, chunk, length);
        pthread_mutex_lock(&trace->lock);
        trace->queue_first = (trace->queue_first + 1) % QUEUE_MAX;
        trace->queue_count--;
        trace->spares[trace->num_spares++] = chunk;
        pthread_cond_broadcast(&trace->changed);
    }
    pthread_mutex_unlock(&trace->lock);
    text_out(trace);
    return NULL;
}

/* A chunk for a slot (lock held, or the trace not yet shared): a spare,
 * else a new one, its pages put in now rather than event by event. NULL
 * when out of memory. */
static char *chunk_new(kvio_event_trace_t *trace)
{
    if (trace->num_spares > 0)
        return trace->spares[--trace->num_spares];
    return kvio_populated_alloc(CHUNK_BYTES);
}

/* Hands the slot's chunk to the writer (lock held) and gives the slot a
 * fresh one. false (the error kept for close) when no chunk could be had:
 * the slot then starts its chunk over, its events lost. */
static bool hand_over(kvio_event_trace_t *trace, slot_t *slot)
{
    while (trace->queue_count == QUEUE_MAX)
        pthread_cond_wait(&trace->changed, &trace->lock);
    char *fresh = chunk_new(trace);
    if (fresh == NULL) {
        if (trace->error == KVIO_OK)
            trace->error = KVIO_ERR_NOMEM;
        slot->length = 0;
        return false;
    }
    size_t at = (trace->queue_first + trace->queue_count) % QUEUE_MAX;
    trace->queue[at] = slot->chunk;
    trace->queue_lengths[at] = slot->length;
    trace->queue_slots[at] = slot;
    trace->queue_count++;
    slot->chunk = fresh;
    slot->length = 0;
    pthread_cond_broadcast(&trace->changed);
    return true;
}

static slot_t *slot_new(kvio_event_trace_t *trace, pthread_t thread)
{
    slot_t *slot = calloc(1, sizeof(*slot));
    if (slot == NULL)
        return NULL;
    slot->chunk = chunk_new(trace);
    if (slot->chunk == NULL) {
        free(slot);
        return NULL;
    }
    slot->thread = thread;
    return slot;
}

static void slot_free(slot_t *slot)
{
    if (slot == NULL)
        return;
    kvio_zeroed_free(slot->chunk, CHUNK_BYTES);
    free(slot);
}

/* The calling thread's slot, made on its first event (under the lock);
 * NULL past MAX_WRITERS threads or out of memory. */
static slot_t *slot_of(kvio_event_trace_t *trace)
{
    pthread_t self = pthread_self();
    size_t count = atomic_load_explicit(&trace->num_slots, memory_order_acquire);
    for (size_t i = 0; i < count; i++)
        if (pthread_equal(trace->slots[i]->thread, self))
            return trace->slots[i];
    pthread_mutex_lock(&trace->lock);
    slot_t *slot = NULL;
    count = atomic_load_explicit(&trace->num_slots, memory_order_relaxed);
    if (count < MAX_WRITERS) {
        slot = slot_new(trace, self);
        if (slot != NULL) {
            trace->slots[count] = slot;
            atomic_store_explicit(&trace->num_slots, count + 1, memory_order_release);
        } else if (trace->error == KVIO_OK) {
            trace->error = KVIO_ERR_NOMEM;
        }
    }
    pthread_mutex_unlock(&trace->lock);
    return slot;
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
    kvio_zeroed_free(trace->text, TEXT_BYTES + LINE_MAX_BYTES);
    size_t count = atomic_load_explicit(&trace->num_slots, memory_order_relaxed);
    for (size_t i = 0; i < count; i++)
        slot_free(trace->slots[i]);
    slot_free(trace->shared);
    for (size_t i = 0; i < trace->queue_count; i++)
        kvio_zeroed_free(trace->queue[(trace->queue_first + i) % QUEUE_MAX], CHUNK_BYTES);
    for (size_t i = 0; i < trace->num_spares; i++)
        kvio_zeroed_free(trace->spares[i], CHUNK_BYTES);
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
    atomic_init(&trace->num_slots, 0);
    /* The opening thread's slot now: its chunk's pages are put in before
     * the run, not on its first event. */
    slot_t *first = slot_new(trace, pthread_self());
    if (first == NULL) {
        trace_free(trace);
        return KVIO_ERR_NOMEM;
    }
    trace->slots[0] = first;
    atomic_store_explicit(&trace->num_slots, 1, memory_order_relaxed);
    trace->text = kvio_populated_alloc(TEXT_BYTES + LINE_MAX_BYTES);
    if (trace->text == NULL) {
        trace_free(trace);
        return KVIO_ERR_NOMEM;
    }
    memcpy(trace->text, "[\n", 2);
    trace->text_length = 2;
    if (trace->gzip) {
        /* Each text one gzip member (header and trailer); level 1: the
         * writer keeps up with the callers. */
#if KVIO_HAVE_ISAL
        trace->level_buffer = malloc(ISAL_DEF_LVL1_DEFAULT);
        if (trace->level_buffer == NULL) {
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
        /* igzip's bound: the input in stored blocks, their headers, and
         * the gzip header and trailer. */
        trace->compressed_capacity = TEXT_BYTES + LINE_MAX_BYTES + TEXT_BYTES / 1024 + 1024;
#elif KVIO_HAVE_LIBDEFLATE
        trace->compressor = libdeflate_alloc_compressor(1);
        if (trace->compressor == NULL) {
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
        trace->compressed_capacity = libdeflate_gzip_compress_bound(trace->compressor,
                                                                    TEXT_BYTES + LINE_MAX_BYTES);
#else
        if (deflateInit2(&trace->stream, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
            Z_OK) {
            trace->gzip = false;
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
        trace->compressed_capacity = deflateBound(&trace->stream, TEXT_BYTES + LINE_MAX_BYTES);
#endif
        trace->compressed = kvio_populated_alloc(trace->compressed_capacity);
        if (trace->compressed == NULL) {
            trace_free(trace);
            return KVIO_ERR_NOMEM;
        }
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
    *trace_p = trace;
    return KVIO_OK;
}

/* Room for a record of up to RECORD_MAX_BYTES at the end of the slot's
 * chunk (the chunk handed over first when it lacks it): false when it
 * could not be (lock held or not, as locked says). */
static bool room(kvio_event_trace_t *trace, slot_t *slot, bool locked)
{
    if (slot->length + RECORD_MAX_BYTES <= CHUNK_BYTES)
        return true;
    if (!locked)
        pthread_mutex_lock(&trace->lock);
    bool handed = hand_over(trace, slot);
    if (!locked)
        pthread_mutex_unlock(&trace->lock);
    return handed;
}

/* A text record's line, begun at the end of the slot's chunk. */
static bool line_start(kvio_event_trace_t *trace, slot_t *slot, bool locked, line_t *line_p)
{
    if (!room(trace, slot, locked))
        return false;
    line_p->text = slot->chunk + slot->length + sizeof(record_head_t);
    line_p->length = 0;
    return true;
}

/* The line made becomes the record. */
static void line_end(slot_t *slot, const line_t *line)
{
    record_head_t *head = (record_head_t *)(void *)(slot->chunk + slot->length);
    head->type = RECORD_TEXT;
    head->length = (uint32_t)line->length;
    slot->length += record_size(line->length);
}

/* The next event id of the slot, a new block taken when it has none left
 * (under the lock, held or not as locked says). */
static uint64_t take_id(kvio_event_trace_t *trace, slot_t *slot, bool locked)
{
    if (slot->ids_left == 0) {
        if (!locked)
            pthread_mutex_lock(&trace->lock);
        slot->next_id = trace->next_id_block;
        slot->ids_left = ID_BLOCK;
        trace->next_id_block += ID_BLOCK;
        if (!locked)
            pthread_mutex_unlock(&trace->lock);
    }
    slot->ids_left--;
    return slot->next_id++;
}

/* The rank and the kind of its event, for the names close writes. */
static void note_rank(slot_t *slot, uint32_t rank, unsigned kind)
{
    if (rank >= MAX_NAMED_RANKS || (slot->ranks_seen[rank] & (1u << kind)))
        return;
    slot->ranks_seen[rank] |= (uint8_t)(1u << kind);
    if (!slot->any_rank || rank > slot->max_rank)
        slot->max_rank = rank;
    slot->any_rank = true;
}

/* Whole microseconds of an event; the duration is the difference of
 * rounded ends so that back-to-back events never overlap. */
static void whole_us(int64_t start_ns, int64_t duration_ns, int64_t *start_us_p,
                     int64_t *duration_us_p)
{
    int64_t start_us = start_ns / 1000;
    *start_us_p = start_us;
    *duration_us_p = (start_ns + (duration_ns > 0 ? duration_ns : 0)) / 1000 - start_us;
}

/* How many of an event's count ids its line shows (none at the level
 * iterations). */
static size_t ids_shown(const kvio_event_trace_t *trace, const uint64_t *ids, size_t count)
{
    if (trace->level == KVIO_EVENT_LEVEL_ITERATIONS || ids == NULL)
        return 0;
    return count < KVIO_EVENT_MAX_REQUEST_IDS ? count : KVIO_EVENT_MAX_REQUEST_IDS;
}

/* The slot shared by threads past MAX_WRITERS (or out of memory for their
 * own), made on first use; NULL, the error kept, when it cannot be. Under
 * the lock. */
static slot_t *shared_slot(kvio_event_trace_t *trace)
{
    if (trace->shared == NULL)
        trace->shared = slot_new(trace, pthread_self());
    if (trace->shared == NULL && trace->error == KVIO_OK)
        trace->error = KVIO_ERR_NOMEM;
    return trace->shared;
}

/* The event's line, a text record at the end of the slot's chunk. */
static void format_event(kvio_event_trace_t *trace, slot_t *slot, bool locked,
                         const kvio_event_t *event, unsigned kind)
{
    line_t line;
    if (!line_start(trace, slot, locked, &line))
        return;
    int64_t start_us, duration_us;
    whole_us(event->start_ns, event->duration_ns, &start_us, &duration_us);
    PUT_LITERAL(&line, "{\"id\":");
    put_uint(&line, take_id(trace, slot, locked));
    PUT_LITERAL(&line, ",\"name\":");
    put_string(&line, event->name != NULL ? event->name : kind_names[kind]);
    PUT_LITERAL(&line, ",\"cat\":\"");
    put(&line, kind_names[kind]);
    PUT_LITERAL(&line, "\",\"pid\":");
    put_uint(&line, event->rank);
    PUT_LITERAL(&line, ",\"tid\":");
    put_uint(&line, kind + 1);
    PUT_LITERAL(&line, ",\"ts\":");
    put_int(&line, start_us);
    PUT_LITERAL(&line, ",\"dur\":");
    put_int(&line, duration_us);
    PUT_LITERAL(&line, ",\"ph\":\"X\",\"args\":{\"rank\":");
    put_uint(&line, event->rank);
    if (event->label != NULL) {
        put_key(&line, kind == KVIO_EVENT_UPDATE ? "stage" : "tier");
        put_string(&line, event->label);
    }
    if (event->bytes >= 0) {
        put_key(&line, "bytes");
        put_int(&line, event->bytes);
    }
    /* Arguments and ids stop short of the line buffer's end. */
    for (size_t i = 0; i < event->num_args && event->args != NULL &&
                       line.length < LINE_MAX_BYTES - 1800; i++) {
        put_key(&line, event->args[i].key != NULL ? event->args[i].key : "value");
        put_number(&line, event->args[i].value);
    }
    put_ids_and_end(&line, NULL, 0, event->request_ids, event->num_request_ids,
                    ids_shown(trace, event->request_ids, event->num_request_ids));
    line_end(slot, &line);
    note_rank(slot, event->rank, kind);
}

void kvio_event_trace_write(kvio_event_trace_t *trace, const kvio_event_t *event)
{
    if (trace == NULL || event == NULL)
        return;
    unsigned kind = (unsigned)event->kind < 4 ? (unsigned)event->kind : 0;
    if (trace->level != KVIO_EVENT_LEVEL_IO && kind != KVIO_EVENT_ITERATION)
        return;
    slot_t *slot = slot_of(trace);
    if (slot != NULL) {
        format_event(trace, slot, false, event, kind);
        return;
    }
    /* Past MAX_WRITERS threads (or out of memory for a slot): the shared
     * slot, under the lock. */
    pthread_mutex_lock(&trace->lock);
    slot = shared_slot(trace);
    if (slot != NULL)
        format_event(trace, slot, true, event, kind);
    pthread_mutex_unlock(&trace->lock);
}

/* An iteration's record at the end of the slot's chunk: its numbers, and
 * the ids past the start its list shares with the slot's last one. */
static void record_iteration(kvio_event_trace_t *trace, slot_t *slot, bool locked,
                             const kvio_event_iteration_t *iteration)
{
    if (!room(trace, slot, locked))
        return;
    record_head_t *head = (record_head_t *)(void *)(slot->chunk + slot->length);
    iteration_record_t *record = (iteration_record_t *)(void *)(head + 1);
    uint64_t *fresh = (uint64_t *)(void *)(record + 1);
    int64_t start_us, duration_us;
    whole_us(iteration->start_ns, iteration->duration_ns, &start_us, &duration_us);
    const uint64_t *ids = iteration->request_ids;
    size_t shown = ids_shown(trace, ids, iteration->num_request_ids), shared = 0;
    if (shown > 0) {
        while (shared < shown && shared < slot->num_last_ids && ids[shared] == slot->last_ids[shared])
            shared++;
        memcpy(fresh, ids + shared, (shown - shared) * sizeof(*ids));
        memcpy(slot->last_ids + shared, ids + shared, (shown - shared) * sizeof(*ids));
        slot->num_last_ids = shown;
    }
    *record = (iteration_record_t){
        .id = take_id(trace, slot, locked), .start_us = start_us,
        .duration_us = duration_us, .batch_size = iteration->batch_size,
        .prefill_tokens = iteration->prefill_tokens, .decode_seqs = iteration->decode_seqs,
        .kv_usage = iteration->kv_usage, .running = iteration->running,
        .waiting = iteration->waiting, .preempted = iteration->preempted,
        .num_requests = shown > 0 ? iteration->num_request_ids : 0, .rank = iteration->rank,
        .shared = (uint16_t)shared, .fresh = (uint16_t)(shown - shared)};
    head->type = RECORD_ITERATION;
    head->length = (uint32_t)(sizeof(*record) + (shown - shared) * sizeof(*ids));
    slot->length += record_size(head->length);
    note_rank(slot, iteration->rank, KVIO_EVENT_ITERATION);
}

void kvio_event_trace_iteration(kvio_event_trace_t *trace,
                                const kvio_event_iteration_t *iteration)
{
    if (trace == NULL || iteration == NULL)
        return;
    slot_t *slot = slot_of(trace);
    if (slot != NULL) {
        record_iteration(trace, slot, false, iteration);
        return;
    }
    /* As kvio_event_trace_write does past MAX_WRITERS threads. */
    pthread_mutex_lock(&trace->lock);
    slot = shared_slot(trace);
    if (slot != NULL)
        record_iteration(trace, slot, true, iteration);
    pthread_mutex_unlock(&trace->lock);
}

/* A metadata event naming a process (tid < 0) or a thread, a text record
 * of the slot's (lock held); the last one of the file has no trailing
 * comma so that the file is one JSON array. */
static void write_name(kvio_event_trace_t *trace, slot_t *slot, uint32_t pid, int tid,
                       const char *name, bool last)
{
    line_t line;
    if (!line_start(trace, slot, true, &line))
        return;
    put(&line, tid < 0 ? "{\"name\":\"process_name\"" : "{\"name\":\"thread_name\"");
    put(&line, ",\"cat\":\"kvio\",\"ph\":\"M\",\"pid\":");
    put_uint(&line, pid);
    put(&line, ",\"tid\":");
    put_uint(&line, tid < 0 ? 0 : (uint64_t)tid);
    put(&line, ",\"args\":{\"name\":");
    put_string(&line, name);
    put(&line, last ? "}}\n" : "}},\n");
    line_end(slot, &line);
}

kvio_status_t kvio_event_trace_close(kvio_event_trace_t *trace)
{
    if (trace == NULL)
        return KVIO_OK;
    pthread_mutex_lock(&trace->lock);
    /* Every thread's events, in the order the threads first wrote; the
     * ranks they saw, together. */
    size_t count = atomic_load_explicit(&trace->num_slots, memory_order_relaxed);
    slot_t *all[MAX_WRITERS + 1];
    memcpy(all, trace->slots, count * sizeof(*all));
    if (trace->shared != NULL)
        all[count++] = trace->shared;
    slot_t *last_slot = trace->slots[0]; /* the names go in its chunk */
    uint8_t *seen = last_slot->ranks_seen;
    bool any_rank = false;
    uint32_t max_rank = 0;
    for (size_t i = 0; i < count; i++) {
        if (all[i]->length > 0)
            hand_over(trace, all[i]);
        if (!all[i]->any_rank)
            continue;
        if (!any_rank || all[i]->max_rank > max_rank)
            max_rank = all[i]->max_rank;
        any_rank = true;
        if (all[i] != last_slot)
            for (uint32_t rank = 0; rank <= all[i]->max_rank; rank++)
                seen[rank] |= all[i]->ranks_seen[rank];
    }
    if (!any_rank) {
        write_name(trace, last_slot, 0, -1, "kvio", true);
    } else {
        /* Find the last name written, to leave its comma off. */
        uint32_t last_rank = 0;
        int last_tid = -1;
        for (uint32_t rank = 0; rank <= max_rank; rank++) {
            if (seen[rank] == 0)
                continue;
            last_rank = rank;
            last_tid = -1;
            for (int kind = 0; kind < 4; kind++)
                if (seen[rank] & (1u << kind))
                    last_tid = kind + 1;
        }
        for (uint32_t rank = 0; rank <= max_rank; rank++) {
            if (seen[rank] == 0)
                continue;
            char name[48];
            snprintf(name, sizeof(name), "serve rank %u", rank);
            write_name(trace, last_slot, rank, -1, name, rank == last_rank && last_tid < 0);
            for (int kind = 0; kind < 4; kind++)
                if (seen[rank] & (1u << kind))
                    write_name(trace, last_slot, rank, kind + 1, track_names[kind],
                               rank == last_rank && kind + 1 == last_tid);
        }
    }
    line_t line;
    if (line_start(trace, last_slot, true, &line)) {
        PUT_LITERAL(&line, "]\n");
        line_end(last_slot, &line);
    }
    hand_over(trace, last_slot);
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
