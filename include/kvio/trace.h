/* Request traces read from files (Mooncake JSONL today): per request its
 * arrival time, input and output lengths and the trace's block hash ids.
 * Bad lines are errors that name "file:line: what is wrong", or are skipped
 * and counted. The reader holds the whole trace in memory, ids in one array. */
#ifndef KVIO_TRACE_H
#define KVIO_TRACE_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvio_trace kvio_trace_t;

typedef enum {
    KVIO_TRACE_FORMAT_MOONCAKE = 0, /* JSONL: timestamp, input_length, output_length, hash_ids */
} kvio_trace_format_t;

typedef struct kvio_trace_options {
    bool skip_bad; /* skip and count bad lines instead of failing */
} kvio_trace_options_t;

/* One request. Pointers are owned by the trace and valid until it is
 * destroyed. */
typedef struct kvio_trace_request {
    double timestamp;        /* as in the file (Mooncake: milliseconds) */
    uint64_t input_length;   /* prompt tokens */
    uint64_t output_length;  /* generated tokens (0 when the line has none) */
    const uint64_t *hash_ids;
    size_t num_hash_ids;
    size_t line;             /* 1-based line in the file */
} kvio_trace_request_t;

/* Maps a format name ("mooncake") to the enum; KVIO_ERR_INVALID and a
 * logged error for an unknown name. */
kvio_status_t kvio_trace_format_from_name(const char *name, kvio_trace_format_t *format_p);

/* Reads a whole trace in file order. options may be NULL (no skipping).
 * Returns KVIO_ERR_NOT_FOUND/KVIO_ERR_IO for an unreadable file and
 * KVIO_ERR_PARSE for a bad line (logged as "path:line: reason"); with
 * skip_bad, bad lines are counted (and the first few logged as warnings).
 * Blank lines are ignored. The caller destroys the trace. */
kvio_status_t kvio_trace_read(const char *path, kvio_trace_format_t format,
                              const kvio_trace_options_t *options, kvio_trace_t **trace_p);

/* Same, for the Mooncake JSONL format. */
kvio_status_t kvio_trace_read_mooncake(const char *path, const kvio_trace_options_t *options,
                                       kvio_trace_t **trace_p);

size_t kvio_trace_num_requests(const kvio_trace_t *trace);

/* Bad lines skipped with skip_bad. */
size_t kvio_trace_num_skipped(const kvio_trace_t *trace);

/* Request at index (0 <= index < number of requests); borrowed. */
const kvio_trace_request_t *kvio_trace_request(const kvio_trace_t *trace, size_t index);

/* Sorts the requests by timestamp, stably (equal times keep file order). */
void kvio_trace_sort_by_time(kvio_trace_t *trace);

void kvio_trace_destroy(kvio_trace_t *trace);

#endif
