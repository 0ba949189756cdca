/* Event traces: Chrome trace events ("ph": "X", ts and dur in µs), one JSON
 * object per line after an opening "[" line, as DFTracer writes its .pfw
 * files; closed with "]" so the whole file is also one JSON array that
 * Perfetto and chrome://tracing open. pid is the serve rank, tid the kind
 * of event (1 iterations, 2 model updates, 3 swaps, 4 tier I/O).
 *
 * A path ending in ".gz" (DFTracer's .pfw.gz) is gzip-compressed: the lines
 * go out in members of whole lines, about 1 MiB of text each, one after
 * the other in the file, which gunzip, zcat and zlib read as one stream (as
 * DFTracer's own compressed traces are read). Each calling thread puts its
 * events in a chunk of its own, without a lock or an atomic operation per
 * event: an iteration as a small binary record, any other event as its
 * line. A background writer thread makes the iterations' lines, then
 * compresses and writes the text, so the caller never waits on
 * formatting, deflate or the file system unless the writer falls two
 * chunks behind. One thread's events keep their order, their ids
 * increasing (a single-threaded trace's are 0, 1, 2, ...); the chunks of
 * several threads go out in the order they filled, ids unique. */
#ifndef KVIO_EVENTS_H
#define KVIO_EVENTS_H

#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

/* At most this many request ids are written per event (num_requests says
 * how many there were). */
#define KVIO_EVENT_MAX_REQUEST_IDS 64

typedef enum {
    KVIO_EVENT_ITERATION = 0, /* cat "iteration" */
    KVIO_EVENT_UPDATE,        /* cat "update": a model-update stage */
    KVIO_EVENT_SWAP,          /* cat "swap": KV blocks to or from host memory */
    KVIO_EVENT_TIER,          /* cat "tier": a KV-cache tier read or write */
} kvio_event_kind_t;

/* How much is traced: iteration events only (their request ids left
 * out); iterations with the ids of the requests in them; everything (also
 * swaps, tier reads and writes, model-update stages: the default). */
typedef enum {
    KVIO_EVENT_LEVEL_IO = 0,
    KVIO_EVENT_LEVEL_ITERATIONS,
    KVIO_EVENT_LEVEL_REQUESTS,
} kvio_event_level_t;

/* "iterations", "requests" or "io" into *level_p; KVIO_ERR_INVALID for
 * anything else. */
kvio_status_t kvio_event_level_parse(const char *text, kvio_event_level_t *level_p);

/* A numeric argument: written as an integer when it is one. */
typedef struct kvio_event_arg {
    const char *key;
    double value;
} kvio_event_arg_t;

/* One complete event; every pointer is borrowed for the call only. */
typedef struct kvio_event {
    kvio_event_kind_t kind;
    const char *name;               /* "iteration", "xfer", "read", ... */
    uint32_t rank;
    int64_t start_ns;               /* on the run's clock */
    int64_t duration_ns;
    int64_t bytes;                  /* < 0: none */
    const uint64_t *request_ids;
    size_t num_request_ids;
    const kvio_event_arg_t *args;
    size_t num_args;
    const char *label;              /* optional string arg "tier" or "stage"; NULL: none */
} kvio_event_t;

/* The trace writer. Calls may come from several threads at once (each
 * event's line stays whole); close only after every call has returned. */
typedef struct kvio_event_trace kvio_event_trace_t;

/* Creates path (truncating it; gzip when it ends in ".gz"), starts the
 * writer thread and writes the opening "[" line. The caller closes the
 * trace with kvio_event_trace_close. */
kvio_status_t kvio_event_trace_open(const char *path, kvio_event_level_t level,
                                    kvio_event_trace_t **trace_p, char *error_p,
                                    size_t error_len);

/* Writes the process and thread names of the ranks seen, then "]", waits
 * for the writer to write it all, and frees the trace. Returns the first write error of the trace's life
 * (KVIO_OK when every event was written). NULL is a no-op. */
kvio_status_t kvio_event_trace_close(kvio_event_trace_t *trace);

/* Writes one event; with trace NULL it does nothing, so callers need not
 * check whether tracing is on. */
void kvio_event_trace_write(kvio_event_trace_t *trace, const kvio_event_t *event);

/* An iteration's event, as kvio_event_trace_write writes a KVIO_EVENT_ITERATION
 * named "iteration" with these arguments in this order, byte for byte:
 * the event every iteration of a run writes. The caller only records its
 * numbers (and the request ids its thread's last list did not start
 * with); the writer thread makes the line from a template (its fixed text
 * copied, only the numbers formatted). */
typedef struct kvio_event_iteration {
    uint32_t rank;
    int64_t start_ns; /* on the run's clock */
    int64_t duration_ns;
    uint64_t batch_size, prefill_tokens, decode_seqs;
    double kv_usage;
    uint64_t running, waiting, preempted;
    const uint64_t *request_ids; /* borrowed for the call */
    size_t num_request_ids;      /* the batch's size; at most 64 ids are written */
} kvio_event_iteration_t;

void kvio_event_trace_iteration(kvio_event_trace_t *trace,
                                const kvio_event_iteration_t *iteration);

/* A model-update stage (name: "xfer", "notify", "verify", "activate", ...)
 * of version on a serve rank. */
void kvio_event_trace_update(kvio_event_trace_t *trace, uint32_t rank, uint64_t version,
                             const char *stage, int64_t start_ns, int64_t duration_ns,
                             int64_t bytes);

/* A swap of the requests' KV blocks; out: device to host, else host to device. */
void kvio_event_trace_swap(kvio_event_trace_t *trace, uint32_t rank, int out, int64_t start_ns,
                           int64_t duration_ns, int64_t bytes, const uint64_t *request_ids,
                           size_t num_request_ids);

/* A read or write of tier ("host", "redis", "file"). */
void kvio_event_trace_tier(kvio_event_trace_t *trace, uint32_t rank, const char *tier, int write,
                           int64_t start_ns, int64_t duration_ns, int64_t bytes,
                           const uint64_t *request_ids, size_t num_request_ids);

#endif
