/* Internals of the workloads module shared between its files: the stream
 * object and its source ops (synthetic generator, loaded trace), the trace
 * format plug-ins and their registry, and the trace being built by a reader. */
#ifndef KVIO_WORKLOADS_INT_H
#define KVIO_WORKLOADS_INT_H

#include "kvio/stream.h"

/* Content ids carry their kind in the top four bits, so kinds never collide. */
#define KVIO_CONTENT_SYSTEM_PROMPT (1ull << 60)
#define KVIO_CONTENT_DOCUMENT (2ull << 60)
#define KVIO_CONTENT_UNIQUE (3ull << 60)
#define KVIO_CONTENT_TRACE (4ull << 60)

/* Longest trace line accepted; longer lines are bad input. */
#define KVIO_TRACE_MAX_LINE (64u << 20)

/* A stream source: where requests come from. */
typedef struct kvio_stream_source_ops {
    const char *name;
    kvio_status_t (*next)(void *source, const kvio_request_t **request_p);
    /* Optional: back to the first request (a loaded trace). */
    void (*rewind)(void *source);
    /* Optional, a closed loop's (stream.users): when the next request is
     * due (INT64_MAX: it waits for a request to finish; -1: the end), and
     * a request it gave has finished. */
    int64_t (*due_ns)(void *source);
    void (*finished)(void *source, uint64_t id, int64_t finish_ns);
    void (*destroy)(void *source);
} kvio_stream_source_ops_t;

struct kvio_stream {
    const kvio_stream_source_ops_t *ops;
    void *source;
    uint64_t skipped_lines;
};

/* One request of a loaded trace; its segments and ids live in the trace's
 * pools (indices, so the pools can grow). */
typedef struct kvio_trace_record {
    kvio_request_t request;   /* pointers filled when yielded */
    uint64_t line;
    size_t segment_start;
    size_t hash_id_start;
} kvio_trace_record_t;

/* A trace being loaded: records and the pools they point into. */
typedef struct kvio_trace {
    kvio_trace_record_t *records;
    size_t num_records, records_capacity;
    kvio_segment_t *segments;
    size_t num_segments, segments_capacity;
    uint64_t *hash_ids;
    size_t num_hash_ids, hash_ids_capacity;
    /* Under construction: the record a format fills for the current line. */
    const char *path;
    uint64_t line;
    const kvio_stream_trace_config_t *options;
    kvio_trace_format_t format;
    void *format_state;       /* the format's own state (header columns, sessions) */
    /* Requests with more hash_ids than their tokens need, the extra ones
     * dropped (said once: kvio run and cachesim alike ignore them), and the
     * first such line. */
    uint64_t ids_cut, ids_cut_line;
} kvio_trace_t;

/* Of count hash ids for tokens in blocks of block_tokens, the ones kept
 * (those the tokens need), noting a cut in the trace. */
size_t kvio_trace_keep_ids(kvio_trace_t *trace, size_t count, uint64_t tokens,
                           uint32_t block_tokens);

/* A trace format: reads one line at a time into the trace. parse_line
 * returns KVIO_OK after adding a record, KVIO_INPROGRESS for a line that
 * holds no request (a header), or KVIO_ERR_PARSE with the reason in error_p
 * (without file and line; the loader adds them). */
typedef struct kvio_trace_format_ops {
    const char *name;
    kvio_trace_format_t format;
    bool absolute_times;  /* timestamps are dates: made relative to the first */
    size_t state_size;
    kvio_status_t (*parse_line)(kvio_trace_t *trace, char *line, size_t length,
                                char *error_p, size_t error_len);
    /* Instead of parse_line: reads the whole file itself (a JSON document,
     * or lines that belong together: conversation logs). */
    kvio_status_t (*load)(kvio_trace_t *trace, char *error_p, size_t error_len);
    /* After sorting: fill what depends on order (BurstGPT sessions). */
    kvio_status_t (*finish)(kvio_trace_t *trace, char *error_p, size_t error_len);
    void (*fini)(kvio_trace_t *trace);
} kvio_trace_format_ops_t;

extern const kvio_trace_format_ops_t kvio_trace_jsonl_kvio_ops;
extern const kvio_trace_format_ops_t kvio_trace_jsonl_mooncake_ops;
extern const kvio_trace_format_ops_t kvio_trace_csv_azure_ops;
extern const kvio_trace_format_ops_t kvio_trace_csv_burstgpt_ops;
extern const kvio_trace_format_ops_t kvio_trace_conversation_ops;

/* The registry: the ops of a format (not AUTO), or NULL. */
const kvio_trace_format_ops_t *kvio_trace_format_ops(kvio_trace_format_t format);

/* Appends a record and returns it zeroed (segment and id starts set to the
 * pools' ends), or NULL when out of memory. */
kvio_trace_record_t *kvio_trace_add_record(kvio_trace_t *trace);

/* Reserves room for count more segments / ids; NULL when out of memory. */
kvio_segment_t *kvio_trace_reserve_segments(kvio_trace_t *trace, size_t count);
uint64_t *kvio_trace_reserve_hash_ids(kvio_trace_t *trace, size_t count);

/* Drops the last record (and what it added to the pools). */
void kvio_trace_drop_last(kvio_trace_t *trace);

/* Creates the synthetic generator's stream (config validated here). */
kvio_status_t kvio_synthetic_create(const kvio_stream_config_t *config, uint64_t seed,
                                    int64_t duration_ns, kvio_stream_t **stream_p,
                                    char *error_p, size_t error_len);

/* The hash of the possibly partial span [start, end) of a request's tokens,
 * hashed as runs (the writer's last, partial Mooncake block). */
kvio_status_t kvio_request_span_hash(const kvio_request_t *request, uint64_t start, uint64_t end,
                                     const kvio_hash_t *parent, kvio_hash_t *hash_p);

/* Parses a length field's value: an integer in [minimum, KVIO_STREAM_MAX_TOKENS]. */
kvio_status_t kvio_trace_parse_tokens(const char *text, int64_t minimum, uint32_t *tokens_p,
                                      char *error_p, size_t error_len, const char *what);

#endif
