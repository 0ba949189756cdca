/* The event-trace writer: formats each event into a line buffer by hand
 * (no printf on the hot path except for fractional arguments) and appends
 * it under a lock; close adds the rank names and the closing "]". */
#include "kvio/events.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES 8192
#define MAX_NAMED_RANKS 65536

struct kvio_event_trace {
    pthread_mutex_t lock; /* guards everything below */
    FILE *file;
    uint64_t next_id;
    kvio_status_t error;
    uint32_t max_rank;
    bool any_rank;
    uint8_t *ranks_seen; /* MAX_NAMED_RANKS flags */
};

static const char *const kind_names[] = {"iteration", "update", "swap", "tier"};
static const char *const track_names[] = {"iterations", "model updates", "swaps", "tier I/O"};

/* ---------- line building ---------- */

typedef struct line {
    char text[LINE_MAX_BYTES];
    size_t length;
} line_t;

static void put(line_t *line, const char *text)
{
    size_t length = strlen(text);
    if (line->length + length >= LINE_MAX_BYTES - 64)
        length = LINE_MAX_BYTES - 64 > line->length ? LINE_MAX_BYTES - 64 - line->length : 0;
    memcpy(line->text + line->length, text, length);
    line->length += length;
}

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
    char digits[24];
    size_t count = 0;
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value > 0);
    while (count > 0)
        line->text[line->length++] = digits[--count];
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

static void put_key(line_t *line, const char *key)
{
    line->text[line->length++] = ',';
    put_string(line, key);
    line->text[line->length++] = ':';
}

/* ---------- the trace ---------- */

kvio_status_t kvio_event_trace_open(const char *path, kvio_event_trace_t **trace_p,
                                    char *error_p, size_t error_len)
{
    kvio_event_trace_t *trace = calloc(1, sizeof(*trace));
    if (trace == NULL)
        return KVIO_ERR_NOMEM;
    trace->ranks_seen = calloc(MAX_NAMED_RANKS, 1);
    if (trace->ranks_seen == NULL) {
        free(trace);
        return KVIO_ERR_NOMEM;
    }
    trace->file = fopen(path, "w");
    if (trace->file == NULL) {
        kvio_status_t status = kvio_status_from_errno(errno);
        snprintf(error_p, error_len, "--event-trace %s: %s", path, strerror(errno));
        free(trace->ranks_seen);
        free(trace);
        return status == KVIO_ERR_NOT_FOUND ? KVIO_ERR_INVALID : status;
    }
    /* Large writes: one line per iteration must stay cheap. */
    setvbuf(trace->file, NULL, _IOFBF, 1 << 20);
    pthread_mutex_init(&trace->lock, NULL);
    if (fputs("[\n", trace->file) == EOF)
        trace->error = KVIO_ERR_IO;
    *trace_p = trace;
    return KVIO_OK;
}

static void write_line(kvio_event_trace_t *trace, line_t *line)
{
    if (fwrite(line->text, 1, line->length, trace->file) != line->length &&
        trace->error == KVIO_OK)
        trace->error = KVIO_ERR_IO;
}

void kvio_event_trace_write(kvio_event_trace_t *trace, const kvio_event_t *event)
{
    if (trace == NULL || event == NULL)
        return;
    unsigned kind = (unsigned)event->kind < 4 ? (unsigned)event->kind : 0;
    /* Whole microseconds; the duration is the difference of rounded ends so
     * that back-to-back events never overlap. */
    int64_t start_us = event->start_ns / 1000;
    int64_t end_us = (event->start_ns + (event->duration_ns > 0 ? event->duration_ns : 0)) / 1000;
    line_t line;
    line.length = 0;
    pthread_mutex_lock(&trace->lock);
    put(&line, "{\"id\":");
    put_uint(&line, trace->next_id++);
    put(&line, ",\"name\":");
    put_string(&line, event->name != NULL ? event->name : kind_names[kind]);
    put(&line, ",\"cat\":\"");
    put(&line, kind_names[kind]);
    put(&line, "\",\"pid\":");
    put_uint(&line, event->rank);
    put(&line, ",\"tid\":");
    put_uint(&line, kind + 1);
    put(&line, ",\"ts\":");
    put_int(&line, start_us);
    put(&line, ",\"dur\":");
    put_int(&line, end_us - start_us);
    put(&line, ",\"ph\":\"X\",\"args\":{\"rank\":");
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
    if (event->request_ids != NULL && event->num_request_ids > 0) {
        put(&line, ",\"num_requests\":");
        put_uint(&line, event->num_request_ids);
        put(&line, ",\"request_ids\":[");
        size_t shown = event->num_request_ids < KVIO_EVENT_MAX_REQUEST_IDS
                           ? event->num_request_ids
                           : KVIO_EVENT_MAX_REQUEST_IDS;
        for (size_t i = 0; i < shown; i++) {
            if (i > 0)
                line.text[line.length++] = ',';
            put_uint(&line, event->request_ids[i]);
        }
        line.text[line.length++] = ']';
    }
    put(&line, "}},\n");
    if (event->rank < MAX_NAMED_RANKS) {
        trace->ranks_seen[event->rank] |= (uint8_t)(1u << kind);
        if (!trace->any_rank || event->rank > trace->max_rank)
            trace->max_rank = event->rank;
        trace->any_rank = true;
    }
    write_line(trace, &line);
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
    if (fputs("]\n", trace->file) == EOF && trace->error == KVIO_OK)
        trace->error = KVIO_ERR_IO;
    if (fclose(trace->file) != 0 && trace->error == KVIO_OK)
        trace->error = KVIO_ERR_IO;
    kvio_status_t status = trace->error;
    pthread_mutex_unlock(&trace->lock);
    pthread_mutex_destroy(&trace->lock);
    free(trace->ranks_seen);
    free(trace);
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
