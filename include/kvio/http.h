/* kvio serve's HTTP side: an OpenAI-compatible endpoint (completions and
 * chat completions, streamed as server-sent events timed by the engine),
 * vLLM's /metrics, /health, /v1/models and admin calls, over a front end
 * (kvio/frontend.h) that hands the requests to the serve ranks; and vLLM's
 * KV events published over ZMQ. Built on libmicrohttpd (and libzmq with
 * msgpack-c for the events); without them the calls fail saying so. */
#ifndef KVIO_HTTP_H
#define KVIO_HTTP_H

#include "kvio/dist.h"
#include "kvio/frontend.h"
#include "kvio/status.h"
#include "kvio/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct kvio_http_server kvio_http_server_t;

typedef struct kvio_http_params {
    const char *host;            /* address to listen on ("127.0.0.1", "0.0.0.0") */
    uint16_t first_port;
    uint32_t num_ports;          /* 1: one port, the router picks the rank; else one
                                    port per serve rank (first_port + rank) */
    kvio_frontend_t *frontend;   /* borrowed */
    const char *model_name;      /* served model name (/v1/models, responses, labels) */
    const char *model_root;      /* the model behind it (/v1/models' root) */
    uint32_t max_model_len;      /* prompt + output tokens a request may have */
    kvio_chat_template_t chat_template;
    const kvio_tokenizer_t *tokenizer; /* prompts' tokens (borrowed); NULL: the approximate
                                          tokenizer */
    const kvio_dist_t *output_tokens; /* output length when ignore_eos is false (borrowed) */
    uint64_t seed;               /* output lengths and text */
    uint32_t max_connections;    /* past them a completion gets 503 and Retry-After, and a
                                    connection has 0.1 s to start its request; twice as
                                    many are open at most */
    uint32_t max_connections_per_ip; /* further ones from one address wait (0: no bound) */
    size_t max_body_bytes;       /* a larger request body gets 413 */
    size_t max_bodies_bytes;     /* the bodies being read together: past it 503 */
    int64_t header_timeout_ns;   /* a connection's time to send a request's headers (from
                                    its start or its last answer); then it is closed (0: none) */
    int64_t idle_timeout_ns;     /* a connection with nothing moving is closed (seconds) */
    bool record_tokens;          /* keep every engine step of every request (tokens.csv) */
} kvio_http_params_t;

/* Binds every port and starts serving (requests get 503 until the front
 * end is ready). A port in use or a bad address is KVIO_ERR_CONFIG naming
 * it. Destroy to stop. */
kvio_status_t kvio_http_server_start(const kvio_http_params_t *params,
                                     kvio_http_server_t **server_p, char *error_p,
                                     size_t error_len);

/* The port daemon index listens on (the one picked for port 0). */
uint16_t kvio_http_server_port(const kvio_http_server_t *server, uint32_t index);

/* Stops accepting connections (answers in progress go on). */
void kvio_http_server_quiesce(kvio_http_server_t *server);

/* Answers still being sent (connections with a request in progress). */
uint32_t kvio_http_server_busy(kvio_http_server_t *server);

/* What the server saw: requests by endpoint and status, disconnects,
 * connections (caller owns the JSON). */
json_t *kvio_http_server_stats(kvio_http_server_t *server);

/* Writes tokens.csv at path (a new file): every engine step of every
 * request, id (the engine's, as in requests.csv and in the response id's
 * first 16 hex digits), tokens generated after it, time_s on the run's
 * clock. With record_tokens; the error names the path. */
kvio_status_t kvio_http_server_write_tokens(kvio_http_server_t *server, const char *path,
                                            char *error_p, size_t error_len);

/* Stops the daemons: every connection ends (a request still running is
 * aborted). The front end's listener calls may still come (its destroy
 * aborts what it holds), so destroy the front end between this and
 * kvio_http_server_destroy. */
void kvio_http_server_stop(kvio_http_server_t *server);

/* Stops (if not yet) and frees the server. */
void kvio_http_server_destroy(kvio_http_server_t *server);

/* ---------- KV events (vLLM's, over a ZMQ PUB socket) ---------- */

typedef struct kvio_kv_events kvio_kv_events_t;

/* One PUB socket per serve rank at endpoint (tcp://HOST:PORT binds at
 * PORT + rank, as vLLM offsets data-parallel ranks; "*" binds every
 * address), frames [topic, 8-byte big-endian sequence from 0, msgpack
 * KVEventBatch]. */
kvio_status_t kvio_kv_events_create(const char *endpoint, const char *topic, uint32_t num_ranks,
                                    kvio_kv_events_t **events_p, char *error_p,
                                    size_t error_len);
/* The sink the front end calls (events borrows from it). */
kvio_kv_event_sink_t kvio_kv_events_sink(kvio_kv_events_t *events);
/* Batches published per rank so far (the next sequence number). */
uint64_t kvio_kv_events_published(const kvio_kv_events_t *events, uint32_t rank);
void kvio_kv_events_destroy(kvio_kv_events_t *events);

#endif
