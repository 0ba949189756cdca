/* Request streams: synthetic generators with prefix structure (system
 * prompts, multi-turn sessions, documents, context mutation) and trace
 * readers (Mooncake and kvio JSONL, Azure and BurstGPT CSV), behind one
 * iterator that yields requests in arrival order, plus writers that export
 * any stream. Content is a list of segments or trace block ids, never tokens;
 * block hashes are derived on demand for any block size (kvio/hash.h). */
#ifndef KVIO_STREAM_H
#define KVIO_STREAM_H

#include "kvio/config.h"
#include "kvio/dist.h"
#include "kvio/hash.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Longest prompt or output a stream accepts; longer ones are input errors. */
#define KVIO_STREAM_MAX_TOKENS 10000000u

/* ---------- requests ---------- */

/* A run of a request's prompt: `tokens` tokens of the content `content_id`,
 * starting at token `offset` of that content. */
typedef struct kvio_segment {
    uint64_t content_id;
    uint32_t offset;
    uint32_t tokens;
} kvio_segment_t;

/* One request. The prompt is either the concatenation of segments (synthetic,
 * Azure, BurstGPT, kvio JSONL) or a list of trace block ids (Mooncake), each
 * covering trace_block_tokens tokens; a request may carry both (then the
 * segments define the hashes and the ids are kept for export). The output's
 * tokens are the content output_content_id from offset 0, so a later turn
 * that includes them hashes the same blocks. */
typedef struct kvio_request {
    uint64_t id;                     /* position in the stream, or the trace's id */
    int64_t arrival_ns;              /* from the start of the stream */
    uint32_t input_tokens;           /* prompt length */
    uint32_t output_tokens;          /* true output length (schedulers predict it) */
    uint32_t max_tokens;             /* the request's output limit */
    int32_t priority;                /* lower is more urgent (vLLM) */
    uint64_t session_id;             /* 0: not part of a multi-turn session */
    uint32_t turn;                   /* 0-based turn within the session */
    uint32_t num_segments;
    const kvio_segment_t *segments;  /* NULL when the content is trace blocks */
    uint64_t output_content_id;
    uint32_t trace_block_tokens;     /* tokens per trace hash id; 0: none */
    uint32_t num_trace_hash_ids;     /* at least ceil(input_tokens / trace_block_tokens) */
    const uint64_t *trace_hash_ids;  /* raw ids, e.g. Mooncake's hash_ids */
    bool trace_ids_cover_output;     /* the ids cover the output's blocks too (kvio serve's
                                        traces: sequence_hash_ids), not only the prompt's */
    uint64_t cache_salt;             /* vLLM's cache_salt (kvio_cache_salt); 0: none */
} kvio_request_t;


/* Computes the hashes of blocks first_block .. first_block+num_blocks-1 of
 * block_size tokens over the request's prompt followed by its output.
 * parent is the hash of block first_block-1 (NULL when first_block is 0).
 * Blocks inside the prompt (with trace_ids_cover_output: inside the ids) of
 * a trace request whose trace block size is a multiple of block_size use
 * kvio_hash_trace_block(parent, id, index); every
 * other block uses kvio_hash_runs over its (content, offset, length) runs,
 * where a trace block's id stands for its content. A salted request's first
 * block has the salt as its parent, so the whole chain is the salt's. Returns KVIO_ERR_INVALID
 * when the blocks end past input_tokens + output_tokens or block_size is 0.
 * hashes_p must hold num_blocks hashes. */
kvio_status_t kvio_request_block_hashes(const kvio_request_t *request, uint32_t block_size,
                                        size_t first_block, size_t num_blocks,
                                        const kvio_hash_t *parent, kvio_hash_t *hashes_p);

/* The block hashes of several requests at once: blocks 0 .. num_blocks[r]-1
 * of requests[r] into hashes_p[r], as kvio_request_block_hashes gives them.
 * Their chains are hashed side by side (kvio_hash_chains), which is faster
 * than one after the other.
 * Returns KVIO_ERR_INVALID as kvio_request_block_hashes does. */
kvio_status_t kvio_request_block_hashes_many(const kvio_request_t *const *requests,
                                             uint32_t block_size, const size_t *num_blocks,
                                             kvio_hash_t *const *hashes_p, size_t count);

/* The bytes a deep copy of the request holds past its struct: its segments
 * and trace ids. */
size_t kvio_request_extra_bytes(const kvio_request_t *request);

/* Deep-copies request into *copy_p, its segments and trace ids into extra
 * (kvio_request_extra_bytes of room, aligned for a uint64_t): for a copy
 * kept inside an allocation of the caller's. */
void kvio_request_copy(const kvio_request_t *request, kvio_request_t *copy_p, void *extra);

/* Deep-copies a (borrowed) request into one allocation that the caller owns
 * and frees with kvio_request_destroy. */
kvio_status_t kvio_request_clone(const kvio_request_t *request, kvio_request_t **copy_p);

void kvio_request_destroy(kvio_request_t *request);

/* ---------- configuration: the workload's `stream:` section ---------- */

typedef enum {
    KVIO_ARRIVAL_POISSON = 0,
    KVIO_ARRIVAL_GAMMA,
    KVIO_ARRIVAL_CONSTANT,
    KVIO_ARRIVAL_PHASES,
    KVIO_ARRIVAL_BATCH,
} kvio_arrival_process_t;

/* One phase of a `phases` arrival process. */
typedef struct kvio_stream_phase {
    int64_t duration_ns;
    double rate;     /* requests per second */
    int process;     /* kvio_arrival_process_t: poisson, gamma or constant */
    double cv;       /* gamma's coefficient of variation of the gaps */
} kvio_stream_phase_t;

typedef struct kvio_stream_arrival_config {
    int process;             /* kvio_arrival_process_t */
    double rate;             /* requests per second (all turns counted) */
    double cv;               /* gamma */
    kvio_opt_list_t phases;  /* of kvio_stream_phase_t */
    int64_t count;           /* batch: conversations at time 0 (0: requests) */
} kvio_stream_arrival_config_t;

typedef struct kvio_stream_system_prompts_config {
    int64_t count;      /* 0: no system prompts */
    kvio_dist_t tokens; /* length of each prompt (drawn once per prompt) */
    double zipf;        /* popularity exponent; 0 is uniform */
} kvio_stream_system_prompts_config_t;

typedef struct kvio_stream_documents_config {
    int64_t count;       /* corpus size; 0: no documents */
    kvio_dist_t tokens;  /* length of each document (drawn once per document) */
    double zipf;
    int64_t per_request; /* k documents per request */
} kvio_stream_documents_config_t;

typedef struct kvio_stream_sessions_config {
    kvio_dist_t turns;       /* turns per conversation; 1: single requests */
    kvio_dist_t think_time;  /* ns from one turn's arrival to the next's */
    kvio_dist_t user_tokens; /* new tokens per later turn */
    int64_t max_context;     /* a conversation ends before exceeding this */
} kvio_stream_sessions_config_t;

typedef enum { KVIO_POSITION_FRACTION = 0, KVIO_POSITION_TOKENS = 1 } kvio_position_unit_t;

typedef struct kvio_stream_mutation_config {
    double probability;    /* per later turn */
    kvio_dist_t position;  /* where the rewrite starts */
    int position_unit;     /* kvio_position_unit_t */
    kvio_dist_t tokens;    /* how many tokens are rewritten */
} kvio_stream_mutation_config_t;

typedef struct kvio_stream_prefix_config {
    kvio_stream_system_prompts_config_t system_prompts;
    kvio_stream_documents_config_t documents;
    kvio_stream_sessions_config_t sessions;
    kvio_stream_mutation_config_t mutation;
    int64_t min_unique_tokens; /* a first turn's own tokens, after the shared prefix */
} kvio_stream_prefix_config_t;

typedef enum {
    KVIO_TRACE_AUTO = 0,
    KVIO_TRACE_KVIO,
    KVIO_TRACE_MOONCAKE,
    KVIO_TRACE_AZURE,
    KVIO_TRACE_BURSTGPT,
    KVIO_TRACE_CONVERSATION, /* chat logs (kvio/conversation.h), rendered to token blocks */
} kvio_trace_format_t;

struct kvio_stream_config;

typedef struct kvio_stream_trace_config {
    char *path;            /* NULL or "": synthetic stream */
    int format;            /* kvio_trace_format_t */
    double time_scale;     /* arrival times are multiplied by it (0.5: twice as fast) */
    int64_t start_ns;      /* skip the trace's first stretch; times count from it */
    int64_t limit;         /* at most this many requests; 0: all */
    int64_t max_tokens;    /* output limit for requests that carry none; 0: own output */
    int64_t block_tokens;  /* tokens per Mooncake hash id */
    bool skip_bad;         /* skip and count bad lines instead of failing */
    bool strict;           /* refuse timestamps out of order instead of sorting */
    int64_t end_ns;        /* not a key: kvio_stream_create sets it from the duration it
                              is given; requests arriving at or after it are left out */
    char *tokenizer;       /* a conversation log's tokenizer file; NULL: approximate */
    int chat_template;     /* 0: auto (the tokenizer's, else chatml); else kvio_chat_template_t + 1 */
    /* Not keys: kvio_stream_create sets them for a conversation log whose
     * turns have no times (arrivals, think time and output lengths from the
     * stream section, drawn with the seed); NULL (kvio_stream_open_trace on
     * its own): a session a second, turns 10 s apart. */
    const struct kvio_stream_config *stream;
    uint64_t seed;
} kvio_stream_trace_config_t;

typedef struct kvio_stream_config {
    int64_t requests;      /* total requests; 0: until the workload's duration */
    kvio_stream_arrival_config_t arrival;
    kvio_dist_t input_tokens;
    kvio_dist_t output_tokens;
    int64_t max_tokens;    /* 0: output_tokens' largest value, or the request's own output */
    kvio_dist_t priority;
    int64_t cache_salts;   /* tenants: each session is salted as one of them; 0: none */
    int64_t users;         /* closed loop: this many users, each waiting for its answer
                              (think_time after it); 0: open loop (arrival) */
    kvio_stream_prefix_config_t prefix;
    kvio_stream_trace_config_t trace;
} kvio_stream_config_t;

/* The option table of the `stream:` section (kvio/config.h). */
extern const kvio_opt_t kvio_stream_options[];

/* The option table of `stream.trace`, for readers used on their own. */
extern const kvio_opt_t kvio_stream_trace_options[];

/* ---------- streams ---------- */

typedef struct kvio_stream kvio_stream_t;

/* Creates the stream a configuration describes: the trace at trace.path, or
 * the synthetic generator seeded with seed. duration_ns bounds a synthetic
 * stream whose `requests` is 0 (0: unbounded, which is an error unless the
 * arrival process ends by itself) and cuts a trace's replay at that time
 * (0: the whole trace; kvio_workload_stream_duration says which applies).
 * A trace is read, checked and sorted here; errors name the file and line.
 * Destroy with kvio_stream_destroy. */
kvio_status_t kvio_stream_create(const kvio_stream_config_t *config, uint64_t seed,
                                 int64_t duration_ns, kvio_stream_t **stream_p, char *error_p,
                                 size_t error_len);

/* Opens a trace on its own (cachesim and tools): options as stream.trace,
 * with path and format taken from the arguments. */
kvio_status_t kvio_stream_open_trace(const char *path, kvio_trace_format_t format,
                                     const kvio_stream_trace_config_t *options,
                                     kvio_stream_t **stream_p, char *error_p, size_t error_len);

/* Yields the next request in arrival order, or NULL at the end. The request
 * is borrowed: valid until the next call or kvio_stream_destroy
 * (kvio_request_clone keeps one). */
kvio_status_t kvio_stream_next(kvio_stream_t *stream, const kvio_request_t **request_p);

/* A closed loop (stream.users > 0): each user sends its next turn (or,
 * after its conversation's last, a new conversation's first) think_time
 * after its previous request finished, so the stream runs as fast as it is
 * served. kvio_stream_next then yields NULL both at the end and while every
 * user waits; kvio_stream_due_ns tells them apart, and kvio_stream_finished
 * says when a request it gave finished (on the stream's clock). */
bool kvio_stream_closed_loop(const kvio_stream_t *stream);

/* A closed loop's next request's arrival (stream clock), INT64_MAX while
 * every user waits for an answer, -1 at its end. */
int64_t kvio_stream_due_ns(const kvio_stream_t *stream);

/* The request id (of a closed loop) finished at finish_ns; an id the stream
 * does not wait for is ignored. */
void kvio_stream_finished(kvio_stream_t *stream, uint64_t id, int64_t finish_ns);

/* Starts a loaded trace over at its first request; KVIO_ERR_UNSUPPORTED for
 * a synthetic stream (create it again: the same seed yields the same
 * requests). */
kvio_status_t kvio_stream_rewind(kvio_stream_t *stream);

/* Trace lines skipped under skip_bad (0 for synthetic streams). */
uint64_t kvio_stream_skipped_lines(const kvio_stream_t *stream);

void kvio_stream_destroy(kvio_stream_t *stream);

/* Finds a trace format by name ("mooncake"); KVIO_ERR_NOT_FOUND if unknown. */
kvio_status_t kvio_trace_format_find(const char *name, kvio_trace_format_t *format_p);

/* ---------- export ---------- */

typedef enum {
    KVIO_EXPORT_KVIO = 0,     /* lossless kvio JSONL */
    KVIO_EXPORT_MOONCAKE = 1, /* timestamp, input/output length, 512-token hash_ids */
} kvio_export_format_t;

typedef struct kvio_stream_writer kvio_stream_writer_t;

/* Starts a writer onto out (borrowed; not closed). Both formats write one
 * JSON object per line with Mooncake's fields (timestamp in ms, input_length,
 * output_length, hash_ids of 512-token blocks: the trace's own ids, or the
 * low 63 bits of the block's hash); kvio adds id, arrival_ns, max_tokens,
 * priority, session, turn, segments, output_id and block_tokens. */
kvio_status_t kvio_stream_writer_create(FILE *out, kvio_export_format_t format,
                                        kvio_stream_writer_t **writer_p);

/* Writes one request. Returns the status of out's errno when it fails
 * (KVIO_ERR_NO_SPACE for a full disk, KVIO_ERR_CONNECTION for a closed
 * pipe, else KVIO_ERR_IO). */
kvio_status_t kvio_stream_writer_write(kvio_stream_writer_t *writer,
                                       const kvio_request_t *request);

/* Flushes what is buffered and frees the writer; returns the status of the
 * first failed write's errno, which goes in *errno_p (0 if none; may be
 * NULL) for a message that names the cause. */
kvio_status_t kvio_stream_writer_close(kvio_stream_writer_t *writer, int *errno_p);

/* Drains stream into out; sets *count_p to the number of requests written. */
kvio_status_t kvio_stream_export(kvio_stream_t *stream, FILE *out, kvio_export_format_t format,
                                 uint64_t *count_p, char *error_p, size_t error_len);

#endif
