/* Private to http/: the OpenAI request bodies as kvio reads them and the
 * responses it writes (http/openai.c), and vLLM's Prometheus metrics
 * (http/metrics.c). Both are plain functions over buffers, so that tests
 * and the server (http/server_http.c) share them. */
#ifndef KVIO_HTTP_INT_H
#define KVIO_HTTP_INT_H

#include "kvio/dist.h"
#include "kvio/engine.h"
#include "kvio/frontend.h"
#include "kvio/http.h"
#include "kvio/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------- OpenAI requests and responses (http/openai.c) ---------- */

typedef enum { KVIO_API_COMPLETIONS = 0, KVIO_API_CHAT } kvio_api_t;

/* An answer that is an error: status, OpenAI's type, the field at fault. */
typedef struct kvio_http_error {
    int status;
    const char *type;   /* "BadRequestError", "NotFoundError", ... (static) */
    char param[96];     /* "" for none */
    char message[512];
} kvio_http_error_t;

/* A completions or chat completions request as kvio serves it. */
typedef struct kvio_api_request {
    kvio_api_t api;
    kvio_tokens_t prompt;       /* the tokens the server prefills (owned) */
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    bool continuous_usage;      /* stream_options.continuous_usage_stats */
    int64_t max_tokens;         /* -1: not given */
    int64_t min_tokens;
    bool ignore_eos;
    int32_t priority;
    uint64_t cache_salt;        /* 0: none */
    char ignored[128];          /* fields served without their effect ("stop, tools"; "" none) */
} kvio_api_request_t;

/* What the server knows of itself when it reads a request. */
typedef struct kvio_api_server {
    const char *model_name;
    uint32_t max_model_len;
    kvio_chat_template_t chat_template;
    const kvio_tokenizer_t *tokenizer; /* NULL: the approximate one */
} kvio_api_server_t;

/* Reads a request body (length bytes of JSON) into *request_p; false with
 * *error_p filled (400 naming the field, 404 for another model). The
 * request owns its prompt either way (kvio_api_request_fini). */
bool kvio_api_parse(kvio_api_t api, const char *body, size_t length,
                    const kvio_api_server_t *server, kvio_api_request_t *request_p,
                    kvio_http_error_t *error_p);
void kvio_api_request_fini(kvio_api_request_t *request);

/* How the answer goes: its output length (from max_tokens with
 * ignore_eos, else drawn from output_tokens and clipped to [min_tokens,
 * max_tokens]), whether it ends for length, and the seed of its words (the
 * same prompt gives the same output, as greedy decoding does). */
typedef struct kvio_api_plan {
    uint32_t output_tokens;
    bool length;            /* finish_reason "length" (else "stop") */
    uint64_t text_seed;
    const kvio_tokenizer_t *tokenizer; /* the server's (NULL: approximate) */
} kvio_api_plan_t;

/* false with *error_p when max_tokens (or the default: 16 for
 * completions, the rest of the context for chat) does not fit the
 * context. */
bool kvio_api_plan(const kvio_api_request_t *request, const kvio_api_server_t *server,
                   const kvio_dist_t *output_tokens, uint64_t seed, kvio_api_plan_t *plan_p,
                   kvio_http_error_t *error_p);

/* Output token i of a plan: its text (" abc") and id. With a tokenizer,
 * only words that are one token of it are used, so that a client sending
 * the output back gets the ids the engine generated. */
void kvio_api_output_token(const kvio_api_plan_t *plan, uint32_t index, char text_p[5],
                           uint32_t *id_p);

/* Everything a response names: its id ("cmpl-..." / "chatcmpl-..."), when it
 * was made and the model. */
typedef struct kvio_api_answer {
    kvio_api_t api;
    char id[80];
    int64_t created;
    const char *model;
    uint32_t prompt_tokens;
    bool include_usage, continuous_usage;
} kvio_api_answer_t;

/* Usage as vLLM reports it (prompt_tokens_details.cached_tokens). */
json_t *kvio_api_usage_json(uint32_t prompt_tokens, uint32_t completion_tokens,
                            uint32_t cached_tokens);

/* The whole (non-streamed) response: text of generated tokens of plan,
 * finish_reason ("length", "stop" or "abort"). */
json_t *kvio_api_response_json(const kvio_api_answer_t *answer, const kvio_api_plan_t *plan,
                               uint32_t generated, const char *finish_reason,
                               uint32_t cached_tokens);

/* Streamed: the SSE events (each "data: {...}\n\n") that tokens [from, to)
 * of plan give (chat: the role first when from is 0), finish_reason on the
 * last (NULL: not the last), appended to *text_p (a malloc'd buffer of
 * *length_p bytes in *capacity_p). false: out of memory. */
bool kvio_api_stream_tokens(const kvio_api_answer_t *answer, const kvio_api_plan_t *plan,
                            uint32_t from, uint32_t to, const char *finish_reason,
                            char **text_p, size_t *length_p, size_t *capacity_p);
/* The stream's end: a chunk with only finish_reason (when the tokens did
 * not carry it), the usage chunk (include_usage) and "data: [DONE]". */
bool kvio_api_stream_end(const kvio_api_answer_t *answer, const char *finish_reason,
                         uint32_t generated, uint32_t cached_tokens, char **text_p,
                         size_t *length_p, size_t *capacity_p);

/* OpenAI's error body: {"error": {"message", "type", "param", "code"}}. */
json_t *kvio_api_error_json(const kvio_http_error_t *error);

/* Appends length bytes to a growing buffer (as above). */
bool kvio_http_append(char **text_p, size_t *length_p, size_t *capacity_p, const char *bytes,
                      size_t length);

/* ---------- what clients may hold (http/limits.c) ---------- */

/* A connection as the limits see it: its socket, and since when it has
 * been waiting for a request's headers (from its start, or the end of its
 * last request). */
typedef struct kvio_http_conn {
    int fd;
    int64_t waiting_since_ns;
    bool headers_done; /* a request's headers came; its answer is under way */
    bool cut;          /* shut down for being late */
    struct kvio_http_conn *prev, *next;
} kvio_http_conn_t;

/* Shared by every daemon's thread and the ticker (lock: the list and
 * counts; bodies_bytes is atomic). */
typedef struct kvio_http_limits {
    pthread_mutex_t lock;
    kvio_http_conn_t *conns;
    uint32_t open, max_open_seen;
    uint32_t max_connections;          /* more: completions get 503, headers less time */
    int64_t header_timeout_ns;         /* for a request's headers */
    int64_t crowded_header_timeout_ns; /* the same with max_connections open */
    uint64_t headers_cut;              /* connections shut down for late headers */
    size_t max_body_bytes;             /* one request's body */
    size_t max_bodies_bytes;           /* every connection's bodies together */
    atomic_size_t bodies_bytes;        /* buffered now (their buffers' capacity) */
} kvio_http_limits_t;

typedef struct kvio_http_limit_counts {
    uint32_t open, max_open_seen;
    uint64_t headers_cut;
    size_t bodies_bytes;
} kvio_http_limit_counts_t;

void kvio_http_limits_init(kvio_http_limits_t *limits, uint32_t max_connections,
                           int64_t header_timeout_ns, int64_t crowded_header_timeout_ns,
                           size_t max_body_bytes, size_t max_bodies_bytes);
void kvio_http_limits_fini(kvio_http_limits_t *limits);

/* A connection opened on fd (counted even when its record could not be
 * allocated: NULL, then it has no header deadline). */
kvio_http_conn_t *kvio_http_conn_open(kvio_http_limits_t *limits, int fd, int64_t now_ns);
/* It closed (conn may be NULL); frees the record. */
void kvio_http_conn_close(kvio_http_limits_t *limits, kvio_http_conn_t *conn);
/* Its request's headers came (done), or it waits for the next request's. */
void kvio_http_conn_headers(kvio_http_limits_t *limits, kvio_http_conn_t *conn, bool done,
                            int64_t now_ns);
/* More connections are open than max_connections. */
bool kvio_http_limits_over(kvio_http_limits_t *limits);
/* Shuts down every connection whose headers are overdue (the crowded
 * deadline once max_connections are open); returns how many. */
uint32_t kvio_http_limits_tick(kvio_http_limits_t *limits, int64_t now_ns);
void kvio_http_limits_counts(kvio_http_limits_t *limits, kvio_http_limit_counts_t *counts_p);

/* A request body: its own mapping from 1 MiB on (returned to the system
 * when freed), its capacity counted against max_bodies_bytes. */
typedef struct kvio_http_body {
    char *bytes; /* NUL-terminated */
    size_t length, capacity;
} kvio_http_body_t;

typedef enum {
    KVIO_HTTP_BODY_OK = 0,
    KVIO_HTTP_BODY_TOO_LARGE, /* past max_body_bytes: 413 */
    KVIO_HTTP_BODY_BUSY,      /* past max_bodies_bytes: 503, try again later */
    KVIO_HTTP_BODY_NOMEM,
} kvio_http_body_status_t;

/* Whether a body of bytes fits the bodies' bound now. */
bool kvio_http_bodies_fit(kvio_http_limits_t *limits, uint64_t bytes);
/* Appends length bytes to body; declared_length (0: unknown) sizes a small
 * one's buffer at once. Nothing is appended unless KVIO_HTTP_BODY_OK. */
kvio_http_body_status_t kvio_http_body_append(kvio_http_limits_t *limits, kvio_http_body_t *body,
                                              const char *bytes, size_t length,
                                              uint64_t declared_length);
void kvio_http_body_free(kvio_http_limits_t *limits, kvio_http_body_t *body);

/* ---------- vLLM's Prometheus metrics (http/metrics.c) ---------- */

enum { KVIO_HTTP_HIST_TTFT = 0, KVIO_HTTP_HIST_ITL, KVIO_HTTP_HIST_E2E, KVIO_HTTP_HIST_QUEUE,
       KVIO_HTTP_HISTS };
enum { KVIO_FINISH_STOP = 0, KVIO_FINISH_LENGTH, KVIO_FINISH_ABORT, KVIO_FINISH_REASONS };

/* One serve rank's histograms with vLLM's buckets, and finished requests
 * by reason. */
typedef struct kvio_http_rank_metrics {
    uint64_t buckets[KVIO_HTTP_HISTS][32]; /* per bucket (not cumulative), +Inf last */
    uint64_t count[KVIO_HTTP_HISTS];
    double sum[KVIO_HTTP_HISTS];
    uint64_t finished[KVIO_FINISH_REASONS];
} kvio_http_rank_metrics_t;

/* Records seconds in histogram hist of metrics. */
void kvio_http_observe(kvio_http_rank_metrics_t *metrics, int hist, double seconds);

/* /metrics as prometheus_client renders vLLM's: per family # HELP and
 * # TYPE, counters as _total with their _created, labels engine and
 * model_name (sorted), histograms' cumulative buckets, _count and _sum.
 * Appends to the buffer; false: out of memory. */
bool kvio_http_metrics_render(const char *model_name, uint32_t num_ranks,
                              const kvio_frontend_state_t *states,
                              const kvio_http_rank_metrics_t *metrics, double created_unix,
                              char **text_p, size_t *length_p, size_t *capacity_p);

/* A number as Python's repr of a float prints it ("3.0", "0.25", "+Inf"). */
void kvio_http_format_number(double value, char text_p[32]);

#endif
