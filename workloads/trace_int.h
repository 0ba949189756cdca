/* Private parts of the trace readers: the in-memory trace that every format
 * fills (requests plus one shared array of hash ids) and the helpers a
 * reader uses to add requests and report bad lines. */
#ifndef KVIO_TRACE_INT_H
#define KVIO_TRACE_INT_H

#include "kvio/trace.h"

struct kvio_trace {
    kvio_trace_request_t *requests; /* hash_ids holds an offset into ids until finished */
    size_t num_requests, requests_capacity;
    uint64_t *ids;
    size_t num_ids, ids_capacity;
    size_t num_skipped;
};

/* Creates an empty trace. */
kvio_status_t kvio_trace_new(kvio_trace_t **trace_p);

/* Reserves room for count more ids at the end of the id array; *ids_p points
 * at it (valid until the next reserve). */
kvio_status_t kvio_trace_reserve_ids(kvio_trace_t *trace, size_t count, uint64_t **ids_p);

/* Appends a request whose num_hash_ids ids were just written after the last
 * request's (through kvio_trace_reserve_ids). */
kvio_status_t kvio_trace_push(kvio_trace_t *trace, double timestamp, uint64_t input_length,
                              uint64_t output_length, size_t num_hash_ids, size_t line);

/* Turns id offsets into pointers once the trace is complete. */
void kvio_trace_finish(kvio_trace_t *trace);

/* Reports a bad line: an error (returns KVIO_ERR_PARSE), or with skip_bad a
 * warning for the first few, counted (returns KVIO_OK). */
kvio_status_t kvio_trace_bad_line(kvio_trace_t *trace, const kvio_trace_options_t *options,
                                  const char *path, size_t line, const char *reason);

#endif
