/* The HTTP server of kvio serve, on libmicrohttpd: one daemon per port
 * (one port with the router choosing the serve rank, or one port per
 * rank), each a pool of epoll threads with suspend and resume. A
 * completion is submitted to the front end; its connection sleeps
 * (suspended) until the serve rank's thread hands it tokens, which wake
 * it: a stream sends one server-sent event per engine step that produced
 * tokens, a whole response goes when the request ends. A ticker peeks at
 * sleeping connections' sockets every TICK_NS and wakes those whose client
 * went away (the request is then aborted in the engine), and enforces the
 * limits on what clients hold (http/limits.c). */
#include "http/http_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/format.h"

#define TICK_NS 50000000
#define RESET_TIMEOUT_NS 10000000000ll
#define MAX_DAEMONS 256
/* With max_connections open, a connection gets this long to start sending
 * its request (a client sends it with the handshake's last packet, so this
 * is long even across an ocean; without it, 5,000 connections of a client
 * that was slow to write each held a slot for 0.5 s, and /health queued
 * behind them for over a second). */
#define CROWDED_HEADER_TIMEOUT_NS 100000000ll
/* What a 503 for a full server asks a client to wait, in seconds. */
#define RETRY_AFTER_S 1

typedef enum {
    PHASE_BODY,       /* reading the body */
    PHASE_WAIT,       /* a whole response waits for its request's end */
    PHASE_STREAM,     /* streaming */
    PHASE_PAUSE_WAIT, /* /pause?mode=wait waits for the running requests */
    PHASE_DONE,
} phase_t;

typedef struct http_request http_request_t;

typedef struct daemon_slot {
    kvio_http_server_t *server;
    struct MHD_Daemon *daemon;
    uint32_t rank;    /* KVIO_FRONTEND_ROUTE: the router picks */
    uint16_t port;
    int listen_fd;
    atomic_bool quiesced;    /* its listening socket given back and closed, once */
} daemon_slot_t;

struct kvio_http_server {
    kvio_http_params_t params;
    char *host, *model_name, *model_root;
    kvio_api_server_t api;
    daemon_slot_t slots[MAX_DAEMONS];
    uint32_t num_slots;
    double created_unix;
    pthread_mutex_t metrics_lock;       /* rank_metrics and stats */
    kvio_http_rank_metrics_t *rank_metrics;
    uint64_t by_status[6];              /* 1xx..5xx, other */
    uint64_t requests, completions, disconnects;
    uint64_t refused_busy;              /* 503s for too many connections or body bytes */
    kvio_http_limits_t limits;
    struct token_step *steps;           /* record_tokens: every step of every request */
    size_t num_steps, steps_capacity;
    bool steps_dropped;                 /* out of memory: the log is incomplete */
    pthread_mutex_t waiting_lock;       /* the sleeping requests' list */
    http_request_t *waiting;
    atomic_uint busy;                   /* completions submitted, not yet answered */
    atomic_bool stopping;
    pthread_t ticker;
    bool ticker_started;
    bool stopped;
};

/* One engine step of a request, for tokens.csv (record_tokens). */
typedef struct token_step {
    uint64_t id;
    uint32_t generated;
    int64_t time_ns;
} token_step_t;

struct http_request {
    atomic_int refs;                 /* the connection's, and the listener's once submitted */
    pthread_mutex_t lock;            /* what the serve rank's thread and MHD's share */
    kvio_http_server_t *server;
    struct MHD_Connection *connection; /* NULL once the connection ended */
    uint32_t daemon_rank;
    kvio_http_conn_t *conn;          /* its connection's record in the limits */
    int fd;                          /* its connection's socket (-1: unknown) */
    phase_t phase;
    bool started;                    /* the handler's first call (the headers) came */
    uint64_t first_byte_ns;          /* its request line was read (kvio_time_ns; 0: unknown) */
    uint64_t received_ns;            /* its last body byte was read: its arrival */
    kvio_http_body_t body;
    uint64_t declared_length;        /* Content-Length (0: none) */
    bool too_large;
    bool busy;                       /* the bodies' bound was reached: 503 */
    bool suspended;
    bool listed;                     /* in the server's waiting list */
    bool polls_engine;               /* woken every tick (set before it is listed) */
    http_request_t *prev, *next;
    /* a completion */
    bool submitted;
    uint64_t engine_id;
    uint32_t rank;
    kvio_api_answer_t answer;
    kvio_api_plan_t plan;
    char warning[192];               /* a Warning header: fields served without effect */
    uint32_t *steps;                 /* generated tokens after each step not yet sent */
    size_t num_steps, steps_capacity;
    bool steps_failed;
    uint32_t sent;                   /* tokens already written */
    bool first_token_seen;
    int64_t last_token_ns;
    bool finished, aborted;
    uint32_t generated, cached_tokens;
    bool reason_sent, ended;
    char *out;
    size_t out_length, out_capacity, out_sent;
    /* n > 1 (vLLM's parallel sampling): the other choices, each a request
     * of its own on the engine with the same prompt, owned here; a child
     * holds a reference to its parent, the request that answers, and adds
     * to its children_done (under the parent's lock) when it ends. */
    http_request_t **children;
    uint32_t num_children, children_done;
    http_request_t *parent;
};

/* ---------- requests ---------- */

static http_request_t *request_create(kvio_http_server_t *server, struct MHD_Connection *connection,
                                      uint32_t daemon_rank)
{
    http_request_t *request = calloc(1, sizeof(*request));
    if (request == NULL)
        return NULL;
    atomic_init(&request->refs, 1);
    pthread_mutex_init(&request->lock, NULL);
    request->server = server;
    request->connection = connection;
    request->daemon_rank = daemon_rank;
    request->fd = -1;
    return request;
}

static void request_release(http_request_t *request)
{
    if (atomic_fetch_sub(&request->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&request->lock);
    for (uint32_t c = 0; c < request->num_children; c++)
        request_release(request->children[c]);
    free(request->children);
    kvio_http_body_free(&request->server->limits, &request->body);
    free(request->steps);
    free(request->out);
    free(request);
}

static void list_add(kvio_http_server_t *server, http_request_t *request)
{
    pthread_mutex_lock(&server->waiting_lock);
    if (!request->listed) {
        request->listed = true;
        request->prev = NULL;
        request->next = server->waiting;
        if (server->waiting != NULL)
            server->waiting->prev = request;
        server->waiting = request;
    }
    pthread_mutex_unlock(&server->waiting_lock);
}

static void list_remove(kvio_http_server_t *server, http_request_t *request)
{
    pthread_mutex_lock(&server->waiting_lock);
    if (request->listed) {
        if (request->prev != NULL)
            request->prev->next = request->next;
        else
            server->waiting = request->next;
        if (request->next != NULL)
            request->next->prev = request->prev;
        request->listed = false;
    }
    pthread_mutex_unlock(&server->waiting_lock);
}

/* Wakes a sleeping connection (with the request's lock held). */
static void wake_locked(http_request_t *request)
{
    if (request->suspended && request->connection != NULL) {
        request->suspended = false;
        MHD_resume_connection(request->connection);
    }
}

/* Sleeps the connection until woken (the request's lock held; MHD's thread). */
static void sleep_locked(http_request_t *request)
{
    request->suspended = true;
    MHD_suspend_connection(request->connection);
}

/* Whether the client on fd is still there: a peek at its socket that sees
 * its end (or an error) says it went away. Reads nothing, so any thread
 * may ask while the socket is open. */
static bool fd_alive(int fd)
{
    char byte;
    ssize_t got = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return fd < 0 || got > 0 ||
           (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

static bool peer_alive(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL || fd_alive(info->connect_fd);
}

/* ---------- the serve rank's calls (its thread) ---------- */

static void observe(kvio_http_server_t *server, uint32_t rank, int hist, int64_t ns)
{
    pthread_mutex_lock(&server->metrics_lock);
    kvio_http_observe(&server->rank_metrics[rank], hist, (double)(ns > 0 ? ns : 0) / 1e9);
    pthread_mutex_unlock(&server->metrics_lock);
}

static void log_step(kvio_http_server_t *server, uint64_t id, uint32_t generated,
                     int64_t time_ns)
{
    pthread_mutex_lock(&server->metrics_lock);
    if (server->num_steps == server->steps_capacity && !server->steps_dropped) {
        size_t capacity = server->steps_capacity ? 2 * server->steps_capacity : 4096;
        token_step_t *steps = realloc(server->steps, capacity * sizeof(*steps));
        if (steps != NULL) {
            server->steps = steps;
            server->steps_capacity = capacity;
        } else {
            server->steps_dropped = true;
        }
    }
    if (server->num_steps < server->steps_capacity)
        server->steps[server->num_steps++] =
            (token_step_t){.id = id, .generated = generated, .time_ns = time_ns};
    pthread_mutex_unlock(&server->metrics_lock);
}

static void finished_count(kvio_http_server_t *server, uint32_t rank, int reason)
{
    pthread_mutex_lock(&server->metrics_lock);
    server->rank_metrics[rank].finished[reason]++;
    pthread_mutex_unlock(&server->metrics_lock);
}

/* Each call counts in the metrics before it wakes the connection: a client
 * that reads /metrics after its answer sees the answer counted. */
static void on_tokens(void *context, uint32_t generated, int64_t arrival_ns, int64_t now_ns)
{
    http_request_t *request = context;
    pthread_mutex_lock(&request->lock);
    bool first = !request->first_token_seen;
    int64_t gap_ns = now_ns - (first ? arrival_ns : request->last_token_ns);
    request->first_token_seen = true;
    request->last_token_ns = now_ns;
    uint32_t rank = request->rank;
    uint64_t id = request->engine_id;
    pthread_mutex_unlock(&request->lock);
    observe(request->server, rank, first ? KVIO_HTTP_HIST_TTFT : KVIO_HTTP_HIST_ITL, gap_ns);
    if (request->server->params.record_tokens)
        log_step(request->server, id, generated, now_ns);
    pthread_mutex_lock(&request->lock);
    if (request->num_steps == request->steps_capacity) {
        size_t capacity = request->steps_capacity ? 2 * request->steps_capacity : 16;
        uint32_t *steps = realloc(request->steps, capacity * sizeof(*steps));
        if (steps != NULL) {
            request->steps = steps;
            request->steps_capacity = capacity;
        }
    }
    if (request->num_steps < request->steps_capacity)
        request->steps[request->num_steps++] = generated;
    else if (request->num_steps > 0)
        request->steps[request->num_steps - 1] = generated; /* joins the last step */
    else
        request->steps_failed = true;
    wake_locked(request);
    pthread_mutex_unlock(&request->lock);
}

/* A choice of a parent's ended: the parent learns it, and the child's
 * reference to it goes. */
static void child_ended(http_request_t *request)
{
    http_request_t *parent = request->parent;
    if (parent == NULL)
        return;
    pthread_mutex_lock(&parent->lock);
    parent->children_done++;
    wake_locked(parent);
    pthread_mutex_unlock(&parent->lock);
    request_release(parent);
}

static void on_finish(void *context, const kvio_engine_finished_t *finished)
{
    http_request_t *request = context;
    kvio_http_server_t *server = request->server;
    pthread_mutex_lock(&request->lock);
    uint32_t rank = request->rank;
    bool length = request->plan.length;
    pthread_mutex_unlock(&request->lock);
    observe(server, rank, KVIO_HTTP_HIST_E2E, finished->finish_ns - finished->arrival_ns);
    observe(server, rank, KVIO_HTTP_HIST_QUEUE, finished->queued_ns);
    finished_count(server, rank, length ? KVIO_FINISH_LENGTH : KVIO_FINISH_STOP);
    pthread_mutex_lock(&request->lock);
    request->finished = true;
    request->generated = finished->output_tokens;
    request->cached_tokens = finished->cached_tokens;
    wake_locked(request);
    pthread_mutex_unlock(&request->lock);
    child_ended(request);
    request_release(request);
}

static void on_abort(void *context, int64_t now_ns)
{
    (void)now_ns;
    http_request_t *request = context;
    pthread_mutex_lock(&request->lock);
    uint32_t rank = request->rank;
    pthread_mutex_unlock(&request->lock);
    finished_count(request->server, rank, KVIO_FINISH_ABORT);
    pthread_mutex_lock(&request->lock);
    request->aborted = true;
    wake_locked(request);
    pthread_mutex_unlock(&request->lock);
    child_ended(request);
    request_release(request);
}

/* ---------- answers ---------- */

static void count_status(kvio_http_server_t *server, unsigned status)
{
    pthread_mutex_lock(&server->metrics_lock);
    server->requests++;
    server->by_status[status >= 100 && status < 600 ? status / 100 - 1 : 5]++;
    pthread_mutex_unlock(&server->metrics_lock);
}

/* Queues text (taken) as the answer, with one more header (header NULL:
 * none). */
static enum MHD_Result respond_with(kvio_http_server_t *server,
                                    struct MHD_Connection *connection, unsigned status,
                                    char *text, size_t length, const char *content_type,
                                    const char *header, const char *value)
{
    struct MHD_Response *response =
        MHD_create_response_from_buffer(length, text, MHD_RESPMEM_MUST_FREE);
    if (response == NULL) {
        free(text);
        return MHD_NO;
    }
    if (content_type != NULL)
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (header != NULL)
        MHD_add_response_header(response, header, value);
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    count_status(server, status);
    return result;
}

static enum MHD_Result respond(kvio_http_server_t *server, struct MHD_Connection *connection,
                               unsigned status, char *text, size_t length,
                               const char *content_type)
{
    return respond_with(server, connection, status, text, length, content_type, NULL, NULL);
}

/* value (taken) as the answer; a value that could not be made (jansson
 * refuses what is not UTF-8, or memory ran out) becomes a 500 that says
 * so, never an empty reply. */
static enum MHD_Result respond_json_with(kvio_http_server_t *server,
                                         struct MHD_Connection *connection, unsigned status,
                                         json_t *value, const char *header, const char *header_value)
{
    char *text = value != NULL ? json_dumps(value, JSON_COMPACT) : NULL;
    json_decref(value);
    if (text == NULL) {
        static const char failed[] = "{\"error\": {\"message\": \"kvio could not render its "
                                     "answer\", \"type\": "
                                     "\"InternalServerError\", \"param\": null, \"code\": 500}}";
        text = strdup(failed);
        status = 500;
        if (text == NULL)
            return MHD_NO;
    }
    return respond_with(server, connection, status, text, strlen(text), "application/json",
                        header, header_value);
}

static enum MHD_Result respond_json(kvio_http_server_t *server, struct MHD_Connection *connection,
                                    unsigned status, json_t *value)
{
    return respond_json_with(server, connection, status, value, NULL, NULL);
}

static enum MHD_Result respond_empty(kvio_http_server_t *server, struct MHD_Connection *connection,
                                     unsigned status)
{
    return respond(server, connection, status, NULL, 0, NULL);
}

static enum MHD_Result respond_error(kvio_http_server_t *server, struct MHD_Connection *connection,
                                     const kvio_http_error_t *error)
{
    return respond_json(server, connection, (unsigned)error->status, kvio_api_error_json(error));
}

static enum MHD_Result respond_problem(kvio_http_server_t *server,
                                       struct MHD_Connection *connection, int status,
                                       const char *type, const char *message)
{
    kvio_http_error_t error = {.status = status, .type = type};
    snprintf(error.message, sizeof(error.message), "%s", message);
    return respond_error(server, connection, &error);
}

/* 503 with Retry-After: too many connections or body bytes right now. */
static enum MHD_Result respond_busy(kvio_http_server_t *server,
                                    struct MHD_Connection *connection, const char *message)
{
    kvio_http_error_t error = {.status = 503, .type = "ServiceUnavailableError"};
    snprintf(error.message, sizeof(error.message), "%s; retry in %d s", message, RETRY_AFTER_S);
    json_t *value = kvio_api_error_json(&error);
    char *text = value != NULL ? json_dumps(value, JSON_COMPACT) : NULL;
    json_decref(value);
    if (text == NULL)
        return MHD_NO;
    pthread_mutex_lock(&server->metrics_lock);
    server->refused_busy++;
    pthread_mutex_unlock(&server->metrics_lock);
    char seconds[16];
    snprintf(seconds, sizeof(seconds), "%d", RETRY_AFTER_S);
    return respond_with(server, connection, 503, text, strlen(text), "application/json",
                        MHD_HTTP_HEADER_RETRY_AFTER, seconds);
}

/* ---------- completions ---------- */

/* The SSE events due now into the request's output (its lock held). */
static void render_stream(http_request_t *request)
{
    const char *reason = request->plan.length ? "length" : "stop";
    for (size_t s = 0; s < request->num_steps && !request->steps_failed; s++) {
        uint32_t to = request->steps[s];
        if (to <= request->sent)
            continue;
        bool last = to >= request->plan.output_tokens;
        if (!kvio_api_stream_tokens(&request->answer, &request->plan, request->sent, to,
                                    last ? reason : NULL, &request->out, &request->out_length,
                                    &request->out_capacity))
            request->steps_failed = true;
        request->sent = to;
        request->reason_sent = request->reason_sent || last;
    }
    request->num_steps = 0;
    if ((request->finished || request->aborted || request->steps_failed) && !request->ended) {
        const char *end_reason = request->aborted || request->steps_failed ? "abort" : reason;
        uint32_t generated = request->finished ? request->generated : request->sent;
        kvio_api_stream_end(&request->answer, request->reason_sent ? NULL : end_reason, generated,
                            request->cached_tokens, &request->out, &request->out_length,
                            &request->out_capacity);
        request->ended = true;
    }
}

static ssize_t stream_reader(void *context, uint64_t position, char *buffer, size_t max)
{
    (void)position;
    http_request_t *request = context;
    pthread_mutex_lock(&request->lock);
    if (request->out_sent == request->out_length)
        render_stream(request);
    if (request->out_sent < request->out_length) {
        size_t count = request->out_length - request->out_sent;
        count = count < max ? count : max;
        memcpy(buffer, request->out + request->out_sent, count);
        request->out_sent += count;
        if (request->out_sent == request->out_length)
            request->out_sent = request->out_length = 0;
        pthread_mutex_unlock(&request->lock);
        return (ssize_t)count;
    }
    bool ended = request->ended;
    if (!ended && !peer_alive(request->connection)) {
        pthread_mutex_unlock(&request->lock);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (!ended)
        sleep_locked(request);
    pthread_mutex_unlock(&request->lock);
    return ended ? MHD_CONTENT_READER_END_OF_STREAM : 0;
}

/* Whether a whole answer's request and its other choices all ended (the
 * request's lock held). */
static bool whole_done_locked(const http_request_t *request)
{
    return (request->finished || request->aborted) &&
           request->children_done == request->num_children;
}

/* One choice's answer (its lock held): its tokens and why it ended. */
static json_t *choice_response_locked(const http_request_t *choice,
                                      const kvio_api_answer_t *answer, uint32_t *generated_p)
{
    const char *reason = choice->aborted ? "abort" : choice->plan.length ? "length" : "stop";
    *generated_p = choice->finished ? choice->generated : choice->sent;
    return kvio_api_response_json(answer, &choice->plan, *generated_p, reason,
                                  choice->cached_tokens);
}

/* The other choices' answers join the response's choices, their tokens its
 * usage (n > 1). */
static void add_children_choices(http_request_t *request, json_t *response, uint32_t generated)
{
    json_t *choices = json_object_get(response, "choices");
    for (uint32_t c = 0; c < request->num_children && choices != NULL; c++) {
        http_request_t *child = request->children[c];
        uint32_t child_generated = 0;
        pthread_mutex_lock(&child->lock);
        json_t *child_response = choice_response_locked(child, &request->answer,
                                                        &child_generated);
        pthread_mutex_unlock(&child->lock);
        json_t *choice = json_array_get(json_object_get(child_response, "choices"), 0);
        if (choice != NULL) {
            json_object_set_new(choice, "index", json_integer(c + 1));
            json_array_append(choices, choice);
        }
        json_decref(child_response);
        generated += child_generated;
    }
    json_object_set_new(response, "usage",
                        kvio_api_usage_json(request->answer.prompt_tokens, generated,
                                            request->cached_tokens));
}

/* The whole response of a request that ended (MHD's thread). */
static enum MHD_Result respond_whole(http_request_t *request, struct MHD_Connection *connection)
{
    pthread_mutex_lock(&request->lock);
    uint32_t generated = 0;
    json_t *response = choice_response_locked(request, &request->answer, &generated);
    pthread_mutex_unlock(&request->lock);
    if (response != NULL && request->num_children > 0)
        add_children_choices(request, response, generated);
    request->phase = PHASE_DONE;
    return respond_json_with(request->server, connection, 200, response,
                             request->warning[0] ? MHD_HTTP_HEADER_WARNING : NULL,
                             request->warning);
}

/* Hands the request to the front end: its prompt and planned output as
 * tokens, the request as their listener. */
static kvio_status_t submit(http_request_t *request, const kvio_api_request_t *api_request)
{
    kvio_http_server_t *server = request->server;
    size_t prompt = api_request->prompt.count, total = prompt + request->plan.output_tokens;
    uint32_t *tokens = malloc(total * sizeof(uint32_t));
    if (tokens == NULL)
        return KVIO_ERR_NOMEM;
    memcpy(tokens, api_request->prompt.ids, prompt * sizeof(uint32_t));
    for (uint32_t i = 0; i < request->plan.output_tokens; i++) {
        char word[5];
        kvio_api_output_token(&request->plan, i, word, &tokens[prompt + i]);
    }
    kvio_frontend_request_t submitted = {
        .tokens = tokens, .prompt_tokens = (uint32_t)prompt,
        .output_tokens = request->plan.output_tokens, .cache_salt = api_request->cache_salt,
        .priority = api_request->priority, .first_byte_host_ns = request->first_byte_ns,
        .received_host_ns = request->received_ns,
        .listener = {.context = request, .on_tokens = on_tokens, .on_finish = on_finish,
                     .on_abort = on_abort}};
    atomic_fetch_add(&request->refs, 1); /* the listener's, from now on */
    pthread_mutex_lock(&request->lock);  /* its calls wait for the ticket below */
    uint64_t id = 0;
    uint32_t rank = 0;
    kvio_status_t status =
        kvio_frontend_submit(server->params.frontend, request->daemon_rank, &submitted, &id, &rank);
    if (status == KVIO_OK) {
        request->submitted = true;
        request->engine_id = id;
        request->rank = rank;
    }
    pthread_mutex_unlock(&request->lock);
    free(tokens);
    if (status != KVIO_OK)
        request_release(request); /* no listener call will come */
    return status;
}

/* n > 1: the other n - 1 choices, each its own request of the prompt with
 * an output planned apart (the plan's seed moved by its index), submitted
 * beside the first as vLLM's parallel sampling adds its children together:
 * the prefix cache gives them the prompt's blocks. A child that could not
 * be submitted counts as ended (aborted). */
static kvio_status_t submit_children(http_request_t *request,
                                     const kvio_api_request_t *api_request)
{
    kvio_http_server_t *server = request->server;
    uint32_t others = api_request->n > 1 ? api_request->n - 1 : 0;
    if (others == 0)
        return KVIO_OK;
    request->children = calloc(others, sizeof(*request->children));
    if (request->children == NULL)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = KVIO_OK;
    for (uint32_t c = 1; c <= others && status == KVIO_OK; c++) {
        http_request_t *child = request_create(server, NULL, request->daemon_rank);
        if (child == NULL)
            return KVIO_ERR_NOMEM;
        kvio_http_error_t error = {0};
        uint64_t seed = server->params.seed + 0x9e3779b97f4a7c15ull * c;
        if (!kvio_api_plan(api_request, &server->api, server->params.output_tokens, seed,
                           &child->plan, &error)) {
            request_release(child);
            return KVIO_ERR_INVALID; /* the first choice's plan passed the same checks */
        }
        child->parent = request;
        atomic_fetch_add(&request->refs, 1); /* the child's, until it ends */
        request->children[request->num_children++] = child;
        status = submit(child, api_request);
        if (status != KVIO_OK) {
            child->aborted = true;
            child_ended(child);
        }
    }
    return status;
}

static enum MHD_Result handle_completion(http_request_t *request,
                                         struct MHD_Connection *connection, kvio_api_t api)
{
    kvio_http_server_t *server = request->server;
    kvio_frontend_t *frontend = server->params.frontend;
    if (!kvio_frontend_ready(frontend) || kvio_frontend_closed(frontend))
        return respond_problem(server, connection, 503, "ServiceUnavailableError",
                               kvio_frontend_closed(frontend) ? "the server is shutting down"
                                                              : "the engine is starting");
    kvio_api_request_t api_request;
    kvio_http_error_t error = {0};
    bool ok = kvio_api_parse(api, request->body.bytes != NULL ? request->body.bytes : "",
                             request->body.length, &server->api, &api_request, &error) &&
              kvio_api_plan(&api_request, &server->api, server->params.output_tokens,
                            server->params.seed, &request->plan, &error);
    kvio_http_body_free(&server->limits, &request->body); /* read: its bytes go back now */
    if (!ok) {
        kvio_api_request_fini(&api_request);
        return respond_error(server, connection, &error);
    }
    static atomic_ullong serial;
    kvio_api_answer_t *answer = &request->answer;
    *answer = (kvio_api_answer_t){.api = api, .created = (int64_t)time(NULL),
                                  .model = server->model_name,
                                  .prompt_tokens = (uint32_t)api_request.prompt.count,
                                  .include_usage = api_request.include_usage,
                                  .continuous_usage = api_request.continuous_usage};
    bool stream = api_request.stream;
    if (api_request.ignored[0] != '\0') /* RFC 7234's form: code, agent, quoted text */
        snprintf(request->warning, sizeof(request->warning),
                 "299 kvio \"served without %s: kvio's output is synthetic text\"",
                 api_request.ignored);
    kvio_status_t status = submit(request, &api_request);
    if (status == KVIO_OK)
        status = submit_children(request, &api_request);
    kvio_api_request_fini(&api_request);
    /* 32 hex digits as vLLM's (a uuid's): the engine's request id (its row
     * in requests.csv and tokens.csv), then a serial. Nothing is rendered
     * before this handler returns. */
    snprintf(answer->id, sizeof(answer->id), "%s-%016llx%016llx",
             api == KVIO_API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)request->engine_id,
             (unsigned long long)atomic_fetch_add(&serial, 1));
    if (status != KVIO_OK && request->submitted)
        atomic_fetch_add(&server->busy, 1); /* its close aborts what was submitted */
    if (status != KVIO_OK)
        return respond_problem(server, connection, status == KVIO_ERR_INTERRUPTED ? 503 : 500,
                               status == KVIO_ERR_INTERRUPTED ? "ServiceUnavailableError"
                                                              : "InternalServerError",
                               status == KVIO_ERR_INTERRUPTED ? "the server is shutting down"
                                                              : kvio_strerror(status));
    atomic_fetch_add(&server->busy, 1);
    pthread_mutex_lock(&server->metrics_lock);
    server->completions++;
    pthread_mutex_unlock(&server->metrics_lock);
    list_add(server, request);
    if (!stream) {
        request->phase = PHASE_WAIT;
        pthread_mutex_lock(&request->lock);
        bool done = whole_done_locked(request);
        if (!done)
            sleep_locked(request);
        pthread_mutex_unlock(&request->lock);
        return done ? respond_whole(request, connection) : MHD_YES;
    }
    request->phase = PHASE_STREAM;
    struct MHD_Response *response =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, request, NULL);
    if (response == NULL)
        return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (request->warning[0] != '\0')
        MHD_add_response_header(response, MHD_HTTP_HEADER_WARNING, request->warning);
    enum MHD_Result result = MHD_queue_response(connection, 200, response);
    MHD_destroy_response(response);
    count_status(server, 200);
    return result;
}

/* A whole response's request, called again after a wake. */
static enum MHD_Result resume_whole(http_request_t *request, struct MHD_Connection *connection)
{
    pthread_mutex_lock(&request->lock);
    bool done = whole_done_locked(request);
    if (!done && !peer_alive(connection)) {
        pthread_mutex_unlock(&request->lock);
        return MHD_NO; /* gone: the connection closes, the request is aborted */
    }
    if (!done)
        sleep_locked(request);
    pthread_mutex_unlock(&request->lock);
    return done ? respond_whole(request, connection) : MHD_YES;
}

/* ---------- the other endpoints ---------- */

static enum MHD_Result handle_metrics(kvio_http_server_t *server,
                                      struct MHD_Connection *connection)
{
    uint32_t num_ranks = kvio_frontend_num_ranks(server->params.frontend);
    kvio_frontend_state_t *states = calloc(num_ranks, sizeof(*states));
    kvio_http_rank_metrics_t *metrics = calloc(num_ranks, sizeof(*metrics));
    char *text = NULL;
    size_t length = 0, capacity = 0;
    bool ok = states != NULL && metrics != NULL;
    for (uint32_t r = 0; ok && r < num_ranks; r++)
        kvio_frontend_state(server->params.frontend, r, &states[r]);
    if (ok) {
        pthread_mutex_lock(&server->metrics_lock);
        memcpy(metrics, server->rank_metrics, num_ranks * sizeof(*metrics));
        pthread_mutex_unlock(&server->metrics_lock);
        ok = kvio_http_metrics_render(server->model_name, num_ranks, states, metrics,
                                      server->created_unix, &text, &length, &capacity);
    }
    free(states);
    free(metrics);
    if (!ok) {
        free(text);
        return MHD_NO;
    }
    return respond(server, connection, 200, text, length,
                   "text/plain; version=0.0.4; charset=utf-8");
}

static json_t *models_json(const kvio_http_server_t *server)
{
    int64_t now = (int64_t)time(NULL);
    char permission[64];
    snprintf(permission, sizeof(permission), "modelperm-kvio%016llx",
             (unsigned long long)kvio_time_ns());
    json_t *card = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:n, s:i, s:[{s:s, s:s, s:I, s:b, s:b, s:b, s:b, s:b, "
        "s:b, s:s, s:n, s:b}]}",
        "id", server->model_name, "object", "model", "created", (json_int_t)now, "owned_by",
        "kvio", "root", server->model_root, "parent", "max_model_len",
        (int)server->params.max_model_len, "permission", "id", permission, "object",
        "model_permission", "created", (json_int_t)now, "allow_create_engine", 0,
        "allow_sampling", 1, "allow_logprobs", 1, "allow_search_indices", 0, "allow_view", 1,
        "allow_fine_tuning", 0, "organization", "*", "group", "is_blocking", 0);
    return json_pack("{s:s, s:[o]}", "object", "list", "data", card);
}

/* /pause?mode=abort|wait|keep: abort takes every request out, wait lets the
 * running ones finish before it answers, keep freezes them. */
static enum MHD_Result handle_pause(http_request_t *request, struct MHD_Connection *connection)
{
    kvio_http_server_t *server = request->server;
    const char *mode = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "mode");
    const char *wait = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND,
                                                   "wait_for_inflight_requests");
    if (mode == NULL)
        mode = wait != NULL && strcmp(wait, "true") == 0 ? "wait" : "abort";
    kvio_pause_t pause;
    bool abort_in_flight = false;
    if (strcmp(mode, "abort") == 0) {
        pause = KVIO_PAUSE_NEW;
        abort_in_flight = true;
    } else if (strcmp(mode, "wait") == 0) {
        pause = KVIO_PAUSE_NEW;
    } else if (strcmp(mode, "keep") == 0) {
        pause = KVIO_PAUSE_ALL;
    } else {
        char message[128];
        char shown[48];
        snprintf(message, sizeof(message), "mode must be abort, wait or keep, got '%s'",
                 kvio_format_one_line(mode, shown, sizeof(shown)));
        return respond_json(server, connection, 400, json_pack("{s:s}", "error", message));
    }
    kvio_frontend_pause(server->params.frontend, pause, abort_in_flight);
    if (strcmp(mode, "wait") != 0)
        return respond_json(server, connection, 200, json_pack("{s:s}", "status", "paused"));
    request->phase = PHASE_PAUSE_WAIT;
    request->polls_engine = true;
    list_add(server, request);
    pthread_mutex_lock(&request->lock);
    sleep_locked(request);
    pthread_mutex_unlock(&request->lock);
    return MHD_YES;
}

/* /pause?mode=wait, called again: answers once no rank runs a request. */
static enum MHD_Result resume_pause_wait(http_request_t *request,
                                         struct MHD_Connection *connection)
{
    kvio_http_server_t *server = request->server;
    uint32_t running = 0;
    for (uint32_t r = 0; r < kvio_frontend_num_ranks(server->params.frontend); r++) {
        kvio_frontend_state_t state;
        kvio_frontend_state(server->params.frontend, r, &state);
        running += state.running;
    }
    if (running == 0 || kvio_frontend_closed(server->params.frontend)) {
        request->phase = PHASE_DONE;
        return respond_json(server, connection, 200, json_pack("{s:s}", "status", "paused"));
    }
    pthread_mutex_lock(&request->lock);
    sleep_locked(request);
    pthread_mutex_unlock(&request->lock);
    return MHD_YES;
}

static enum MHD_Result handle_reset(kvio_http_server_t *server, struct MHD_Connection *connection)
{
    const char *running = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND,
                                                      "reset_running_requests");
    if (running != NULL && strcmp(running, "true") == 0)
        return respond_json(server, connection, 400,
                            json_pack("{s:s}", "error", "reset_running_requests=true is not "
                                      "served by kvio (running requests keep their blocks)"));
    bool reset = false;
    kvio_frontend_reset_prefix_cache(server->params.frontend, RESET_TIMEOUT_NS, &reset);
    /* vLLM answers 200 whether or not the cache could be reset. */
    return respond_empty(server, connection, 200);
}

typedef struct route {
    const char *path;
    const char *method;
} route_t;

static const route_t routes[] = {
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"},
    {"/health", "GET"},          {"/metrics", "GET"},              {"/version", "GET"},
    {"/is_paused", "GET"},       {"/pause", "POST"},               {"/resume", "POST"},
    {"/reset_prefix_cache", "POST"},
};

static enum MHD_Result dispatch(http_request_t *request, struct MHD_Connection *connection,
                                const char *url, const char *method)
{
    kvio_http_server_t *server = request->server;
    const route_t *route = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (strcmp(routes[i].path, url) == 0)
            route = &routes[i];
    if (route == NULL)
        return respond_problem(server, connection, 404, "NotFoundError", "Not Found");
    if (strcmp(route->method, method) != 0 && !(strcmp(method, "HEAD") == 0 &&
                                                 strcmp(route->method, "GET") == 0))
        return respond_problem(server, connection, 405, "MethodNotAllowedError",
                               "Method Not Allowed");
    if (request->too_large) {
        char message[128];
        snprintf(message, sizeof(message), "the request body is larger than %zu bytes",
                 server->params.max_body_bytes);
        return respond_problem(server, connection, 413, "BadRequestError", message);
    }
    if (request->busy) {
        char message[128];
        snprintf(message, sizeof(message), "the request bodies being read passed %zu bytes "
                 "(--max-bodies)", server->params.max_bodies_bytes);
        return respond_busy(server, connection, message);
    }
    kvio_frontend_t *frontend = server->params.frontend;
    if (strcmp(url, "/v1/completions") == 0)
        return handle_completion(request, connection, KVIO_API_COMPLETIONS);
    if (strcmp(url, "/v1/chat/completions") == 0)
        return handle_completion(request, connection, KVIO_API_CHAT);
    if (strcmp(url, "/v1/models") == 0)
        return respond_json(server, connection, 200, models_json(server));
    if (strcmp(url, "/health") == 0)
        return respond_empty(server, connection,
                             kvio_frontend_ready(frontend) && !kvio_frontend_closed(frontend)
                                 ? 200
                                 : 503);
    if (strcmp(url, "/metrics") == 0)
        return handle_metrics(server, connection);
    if (strcmp(url, "/version") == 0)
        return respond_json(server, connection, 200, json_pack("{s:s}", "version", KVIO_VERSION));
    if (strcmp(url, "/is_paused") == 0)
        return respond_json(server, connection, 200,
                            json_pack("{s:b}", "is_paused",
                                      kvio_frontend_paused(frontend) != KVIO_PAUSE_NONE));
    if (strcmp(url, "/pause") == 0)
        return handle_pause(request, connection);
    if (strcmp(url, "/resume") == 0) {
        kvio_frontend_pause(frontend, KVIO_PAUSE_NONE, false);
        return respond_json(server, connection, 200, json_pack("{s:s}", "status", "resumed"));
    }
    return handle_reset(server, connection);
}

/* ---------- what is refused before the body is read ---------- */

/* A path or query string that a %-escape makes hold a NUL byte, or that is
 * not UTF-8, becomes this one byte (no valid string holds it), to be
 * refused before routing: "/pause%00.png" was served as "/pause". */
#define BAD_ESCAPE '\xff'

static size_t unescape(void *context, struct MHD_Connection *connection, char *text)
{
    (void)context;
    (void)connection;
    size_t length = MHD_http_unescape(text);
    if (memchr(text, '\0', length) == NULL && kvio_utf8_valid_length(text, length) == length)
        return length;
    text[0] = BAD_ESCAPE;
    text[1] = '\0';
    return 1;
}

static enum MHD_Result find_bad_argument(void *context, enum MHD_ValueKind kind,
                                         const char *key, const char *value)
{
    (void)kind;
    bool bad = key[0] == BAD_ESCAPE || (value != NULL && value[0] == BAD_ESCAPE);
    *(bool *)context = *(bool *)context || bad;
    return bad ? MHD_NO : MHD_YES;
}

/* Transfer-Encoding: libmicrohttpd decodes chunked only; anything else it
 * would read as a body running to the connection's end, answering nothing
 * ("gzip, chunked" held the connection). */
typedef struct transfer_coding {
    bool present, chunked_only;
    char first_bad[64];
} transfer_coding_t;

static enum MHD_Result note_transfer_coding(void *context, enum MHD_ValueKind kind,
                                            const char *key, const char *value)
{
    (void)kind;
    transfer_coding_t *coding = context;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) != 0)
        return MHD_YES;
    /* One "chunked", once: a second header is a second coding. */
    bool ok = value != NULL && strcasecmp(value, "chunked") == 0 && !coding->present;
    if (!ok && coding->chunked_only)
        kvio_format_one_line(value != NULL ? value : "", coding->first_bad,
                             sizeof(coding->first_bad));
    coding->chunked_only = coding->chunked_only && ok;
    coding->present = true;
    return MHD_YES;
}

static bool is_completion(const char *url)
{
    return strcmp(url, "/v1/completions") == 0 || strcmp(url, "/v1/chat/completions") == 0;
}

/* The first call of a request (its headers read, not its body): an answer
 * when it is refused now (*refused_p), else MHD_YES with nothing queued. A
 * server with more than max_connections open refuses completions (the
 * other endpoints hold nothing and still answer), and a body that would
 * take the bodies buffered past their bound is refused before a byte of it
 * is read. */
static enum MHD_Result refuse_early(http_request_t *request, struct MHD_Connection *connection,
                                    const char *url, bool *refused_p)
{
    kvio_http_server_t *server = request->server;
    *refused_p = true;
    bool bad = url[0] == BAD_ESCAPE;
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, find_bad_argument, &bad);
    if (bad)
        return respond_problem(server, connection, 400, "BadRequestError",
                               "the path or query holds a %-escape of a NUL byte or bytes that "
                               "are not UTF-8");
    const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    transfer_coding_t coding = {.chunked_only = true};
    MHD_get_connection_values(connection, MHD_HEADER_KIND, note_transfer_coding, &coding);
    char message[256];
    if (coding.present && !coding.chunked_only) {
        snprintf(message, sizeof(message), "Transfer-Encoding '%s' is not served: send the body "
                 "as it is (with Content-Length) or chunked, once", coding.first_bad);
        return respond_problem(server, connection, 501, "NotImplementedError", message);
    }
    if (coding.present && length != NULL) /* which one frames the body? (request smuggling) */
        return respond_problem(server, connection, 400, "BadRequestError",
                               "Transfer-Encoding and Content-Length together");
    if (length != NULL) /* digits: libmicrohttpd refused anything else */
        request->declared_length = strtoull(length, NULL, 10);
    if (is_completion(url) && kvio_http_limits_over(&server->limits)) {
        snprintf(message, sizeof(message), "more than %u connections are open (--max-connections)",
                 server->params.max_connections);
        return respond_busy(server, connection, message);
    }
    if (request->declared_length <= server->params.max_body_bytes &&
        !kvio_http_bodies_fit(&server->limits, request->declared_length)) {
        snprintf(message, sizeof(message), "the request bodies being read would pass %zu bytes "
                 "(--max-bodies)", server->params.max_bodies_bytes);
        return respond_busy(server, connection, message);
    }
    *refused_p = false;
    return MHD_YES;
}

static enum MHD_Result access_handler(void *context, struct MHD_Connection *connection,
                                      const char *url, const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **request_p)
{
    (void)version;
    daemon_slot_t *slot = context;
    kvio_http_server_t *server = slot->server;
    http_request_t *request = *request_p;
    if (request == NULL) { /* uri_read could not make it */
        request = request_create(server, connection, slot->rank);
        if (request == NULL)
            return MHD_NO;
        *request_p = request;
    }
    if (!request->started) { /* the headers: the body (if any) follows */
        request->started = true;
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        request->conn = info != NULL ? info->socket_context : NULL;
        request->fd = request->conn != NULL ? request->conn->fd : -1;
        kvio_http_conn_headers(&server->limits, request->conn, true, kvio_time_ns());
        bool refused = false;
        enum MHD_Result result = refuse_early(request, connection, url, &refused);
        if (refused)
            request->phase = PHASE_DONE;
        return result;
    }
    if (*upload_data_size > 0) {
        size_t length = *upload_data_size;
        *upload_data_size = 0;
        request->received_ns = kvio_time_ns();
        if (request->too_large || request->busy)
            return MHD_YES; /* the rest is read and dropped; 413 or 503 follows */
        kvio_http_body_status_t appended = kvio_http_body_append(
            &server->limits, &request->body, upload_data, length, request->declared_length);
        request->too_large = appended == KVIO_HTTP_BODY_TOO_LARGE;
        request->busy = appended == KVIO_HTTP_BODY_BUSY;
        if (request->too_large || request->busy)
            kvio_http_body_free(&server->limits, &request->body);
        return appended == KVIO_HTTP_BODY_NOMEM ? MHD_NO : MHD_YES;
    }
    switch (request->phase) {
    case PHASE_BODY:
        if (request->received_ns == 0) /* no body: the headers were the request */
            request->received_ns = kvio_time_ns();
        return dispatch(request, connection, url, method);
    case PHASE_WAIT:
        return resume_whole(request, connection);
    case PHASE_PAUSE_WAIT:
        return resume_pause_wait(request, connection);
    default:
        return MHD_YES;
    }
}

/* A request's first line was read: its request starts here, stamped
 * (MHD's first call for a request; the handler's come once the headers
 * are in). NULL (out of memory): the handler makes it, unstamped. */
static void *uri_read(void *context, const char *uri, struct MHD_Connection *connection)
{
    (void)uri;
    daemon_slot_t *slot = context;
    uint64_t now_ns = kvio_time_ns();
    http_request_t *request = request_create(slot->server, connection, slot->rank);
    if (request != NULL)
        request->first_byte_ns = now_ns;
    return request;
}

/* The request's connection ended: normally, or because the client went
 * away, when its request is taken out of the engine. */
static void completed(void *context, struct MHD_Connection *connection, void **request_p,
                      enum MHD_RequestTerminationCode code)
{
    (void)context;
    (void)connection;
    (void)code;
    http_request_t *request = *request_p;
    if (request == NULL)
        return;
    *request_p = NULL;
    kvio_http_server_t *server = request->server;
    list_remove(server, request);
    /* Kept alive, it has the header deadline again for its next request. */
    kvio_http_conn_headers(&server->limits, request->conn, false, kvio_time_ns());
    pthread_mutex_lock(&request->lock);
    bool live = request->submitted && !request->finished && !request->aborted;
    bool answered = request->ended || request->phase == PHASE_DONE;
    request->connection = NULL;
    request->suspended = false;
    pthread_mutex_unlock(&request->lock);
    if (live)
        kvio_frontend_abort(server->params.frontend, request->rank, request->engine_id);
    for (uint32_t c = 0; c < request->num_children; c++) {
        http_request_t *child = request->children[c];
        pthread_mutex_lock(&child->lock);
        bool child_live = child->submitted && !child->finished && !child->aborted;
        pthread_mutex_unlock(&child->lock);
        if (child_live)
            kvio_frontend_abort(server->params.frontend, child->rank, child->engine_id);
    }
    if (request->submitted) {
        atomic_fetch_sub(&server->busy, 1);
        if (!answered) {
            pthread_mutex_lock(&server->metrics_lock);
            server->disconnects++;
            pthread_mutex_unlock(&server->metrics_lock);
        }
    }
    request_release(request);
}

/* Each connection is in the limits from its start (its header deadline
 * runs) to its close. */
static void connection_notice(void *context, struct MHD_Connection *connection,
                              void **socket_context, enum MHD_ConnectionNotificationCode code)
{
    kvio_http_server_t *server = ((daemon_slot_t *)context)->server;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = kvio_http_conn_open(&server->limits, info != NULL ? info->connect_fd : -1,
                                              kvio_time_ns());
    } else {
        kvio_http_conn_close(&server->limits, *socket_context);
        *socket_context = NULL;
    }
}

/* ---------- the ticker: sleeping connections' clients looked at ---------- */

/* Wakes the sleeping connections: all of them, or (only_gone) those whose
 * client went away, and /pause?mode=wait's, which look at the engine
 * again. The peek is the ticker's own: waking every connection to peek
 * cost libmicrohttpd's thread 20,000 calls a second with 1,000 requests
 * queued. A listed request's socket is open: its connection's end takes
 * it off the list (waiting_lock) first. */
static void wake_waiting(kvio_http_server_t *server, bool only_gone)
{
    pthread_mutex_lock(&server->waiting_lock);
    for (http_request_t *request = server->waiting; request != NULL; request = request->next) {
        if (only_gone && !request->polls_engine && fd_alive(request->fd))
            continue;
        pthread_mutex_lock(&request->lock);
        wake_locked(request);
        pthread_mutex_unlock(&request->lock);
    }
    pthread_mutex_unlock(&server->waiting_lock);
}

static void *ticker_main(void *context)
{
    kvio_http_server_t *server = context;
    while (!atomic_load(&server->stopping)) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = TICK_NS};
        nanosleep(&pause, NULL);
        wake_waiting(server, true);
        kvio_http_limits_tick(&server->limits, kvio_time_ns());
    }
    return NULL;
}

/* ---------- the server ---------- */

/* A listening socket on host:port (0: any free port), named in the error. */
static kvio_status_t listen_on(const char *host, uint16_t port, int *fd_p, uint16_t *port_p,
                               char *error_p, size_t error_len)
{
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    const char *numeric = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, numeric, &address.sin_addr) != 1) {
        snprintf(error_p, error_len, "--listen %s: not an IPv4 address", host);
        return KVIO_ERR_CONFIG;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    socklen_t length = sizeof(address);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0 || listen(fd, 4096) != 0 ||
        getsockname(fd, (struct sockaddr *)&address, &length) != 0) {
        snprintf(error_p, error_len, "--listen %s:%u: %s", host, (unsigned)port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return KVIO_ERR_CONFIG;
    }
    *fd_p = fd;
    *port_p = ntohs(address.sin_port);
    return KVIO_OK;
}

static kvio_status_t start_daemon(kvio_http_server_t *server, daemon_slot_t *slot,
                                  uint16_t port, char *error_p, size_t error_len)
{
    kvio_status_t status = listen_on(server->host, port, &slot->listen_fd, &slot->port, error_p,
                                     error_len);
    if (status != KVIO_OK)
        return status;
    /* Past max_connections as many more are taken, so that /health and
     * /metrics still answer and completions get a 503 rather than wait in
     * the listen backlog (an open connection costs a descriptor and a few
     * KiB until it sends something). */
    uint32_t max = server->params.max_connections;
    uint32_t headroom = max < 8 ? 8 : max;
    unsigned idle_s = (unsigned)((server->params.idle_timeout_ns + 999999999) / 1000000000);
    /* Several epoll threads: a request read and tokenized on one (16 MiB
     * bodies took libmicrohttpd's single thread for over a second) holds up
     * only the connections on it, and a busy thread accepts none. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cores < 2 ? 4 : cores > 8 ? 16 : (unsigned)(2 * cores);
    slot->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL,
        NULL, access_handler, slot, MHD_OPTION_LISTEN_SOCKET, slot->listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(max + headroom),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)server->params.max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, uri_read, slot,
        MHD_OPTION_NOTIFY_COMPLETED, completed, slot,
        MHD_OPTION_NOTIFY_CONNECTION, connection_notice, slot, MHD_OPTION_END);
    if (slot->daemon == NULL) {
        close(slot->listen_fd);
        slot->listen_fd = -1;
        snprintf(error_p, error_len, "--listen %s:%u: libmicrohttpd could not start", server->host,
                 (unsigned)slot->port);
        return KVIO_ERR_CONFIG;
    }
    slot->listen_fd = -1; /* the daemon's now: it closes it */
    return KVIO_OK;
}

static char *copy_string(const char *text)
{
    return text != NULL ? strdup(text) : NULL;
}

kvio_status_t kvio_http_server_start(const kvio_http_params_t *params,
                                     kvio_http_server_t **server_p, char *error_p,
                                     size_t error_len)
{
    uint32_t num_ranks = kvio_frontend_num_ranks(params->frontend);
    if (params->num_ports != 1 && params->num_ports != num_ranks) {
        snprintf(error_p, error_len, "--listen: %u ports for %u serve ranks (give one port, "
                 "where kvio's router picks the rank, or one per rank)", params->num_ports,
                 num_ranks);
        return KVIO_ERR_CONFIG;
    }
    if (params->num_ports > MAX_DAEMONS || (uint32_t)params->first_port + params->num_ports - 1 >
                                               65535) {
        snprintf(error_p, error_len, "--listen: ports %u..%u are out of range",
                 (unsigned)params->first_port, (unsigned)params->first_port + params->num_ports - 1);
        return KVIO_ERR_CONFIG;
    }
    kvio_http_server_t *server = calloc(1, sizeof(*server));
    if (server == NULL)
        return KVIO_ERR_NOMEM;
    server->params = *params;
    server->host = copy_string(params->host);
    server->model_name = copy_string(params->model_name);
    server->model_root = copy_string(params->model_root != NULL ? params->model_root
                                                                : params->model_name);
    server->api = (kvio_api_server_t){.model_name = server->model_name,
                                      .max_model_len = params->max_model_len,
                                      .chat_template = params->chat_template,
                                      .tokenizer = params->tokenizer};
    server->created_unix = (double)kvio_wall_time_ns() / 1e9;
    server->rank_metrics = calloc(num_ranks, sizeof(*server->rank_metrics));
    pthread_mutex_init(&server->metrics_lock, NULL);
    pthread_mutex_init(&server->waiting_lock, NULL);
    kvio_http_limits_init(&server->limits, params->max_connections, params->header_timeout_ns,
                          CROWDED_HEADER_TIMEOUT_NS, params->max_body_bytes,
                          params->max_bodies_bytes);
    for (uint32_t i = 0; i < MAX_DAEMONS; i++)
        server->slots[i].listen_fd = -1;
    kvio_status_t status = server->host != NULL && server->model_name != NULL &&
                                   server->model_root != NULL && server->rank_metrics != NULL
                               ? KVIO_OK
                               : KVIO_ERR_NOMEM;
    for (uint32_t i = 0; status == KVIO_OK && i < params->num_ports; i++) {
        daemon_slot_t *slot = &server->slots[i];
        *slot = (daemon_slot_t){.server = server, .listen_fd = -1,
                                .rank = params->num_ports == 1 ? KVIO_FRONTEND_ROUTE : i};
        uint16_t port = params->first_port == 0 ? 0 : (uint16_t)(params->first_port + i);
        status = start_daemon(server, slot, port, error_p, error_len);
        if (status == KVIO_OK)
            server->num_slots++;
    }
    if (status == KVIO_OK) {
        if (pthread_create(&server->ticker, NULL, ticker_main, server) == 0)
            server->ticker_started = true;
        else
            status = KVIO_ERR_NOMEM;
    }
    if (status != KVIO_OK) {
        kvio_http_server_stop(server);
        kvio_http_server_destroy(server);
        return status;
    }
    *server_p = server;
    return KVIO_OK;
}

uint16_t kvio_http_server_port(const kvio_http_server_t *server, uint32_t index)
{
    return index < server->num_slots ? server->slots[index].port : 0;
}

void kvio_http_server_quiesce(kvio_http_server_t *server)
{
    for (uint32_t i = 0; i < server->num_slots; i++) {
        /* Once only: libmicrohttpd hands the same socket back on every call,
         * and a second close would hit whatever reused its number. */
        if (server->slots[i].daemon == NULL || atomic_exchange(&server->slots[i].quiesced, true))
            continue;
        /* The listening socket comes back to us, closed here: no new connection. */
        MHD_socket fd = MHD_quiesce_daemon(server->slots[i].daemon);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
}

uint32_t kvio_http_server_busy(kvio_http_server_t *server)
{
    return atomic_load(&server->busy);
}

json_t *kvio_http_server_stats(kvio_http_server_t *server)
{
    kvio_http_limit_counts_t counts;
    kvio_http_limits_counts(&server->limits, &counts);
    pthread_mutex_lock(&server->metrics_lock);
    json_t *by_status = json_object();
    static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
    for (int c = 0; c < 6; c++)
        if (server->by_status[c] > 0)
            json_object_set_new(by_status, classes[c],
                                json_integer((json_int_t)server->by_status[c]));
    json_t *ports = json_array();
    for (uint32_t i = 0; i < server->num_slots; i++)
        json_array_append_new(ports, json_integer(server->slots[i].port));
    json_t *stats = json_pack(
        "{s:s, s:o, s:I, s:I, s:o, s:I, s:i}", "host", server->host, "ports", ports, "requests",
        (json_int_t)server->requests, "completions", (json_int_t)server->completions,
        "responses_by_status", by_status, "client_disconnects",
        (json_int_t)server->disconnects, "max_open_connections", (int)counts.max_open_seen);
    /* What the bounds on clients did (docs/serve.md "Faults"). */
    json_object_set_new(
        stats, "limits",
        json_pack("{s:i, s:i, s:I, s:f, s:f, s:I, s:I}", "max_connections",
                  (int)server->params.max_connections, "max_connections_per_ip",
                  (int)server->params.max_connections_per_ip, "max_bodies_bytes",
                  (json_int_t)server->params.max_bodies_bytes, "header_timeout_s",
                  (double)server->params.header_timeout_ns / 1e9, "idle_timeout_s",
                  (double)server->params.idle_timeout_ns / 1e9, "refused_busy",
                  (json_int_t)server->refused_busy, "headers_cut",
                  (json_int_t)counts.headers_cut));
    json_object_set_new(stats, "tokenizer",
                        json_string(server->params.tokenizer != NULL
                                        ? kvio_tokenizer_describe(server->params.tokenizer)
                                        : "approximate"));
    json_object_set_new(stats, "chat_template",
                        json_string(kvio_chat_template_name(server->params.chat_template)));
    pthread_mutex_unlock(&server->metrics_lock);
    return stats;
}

kvio_status_t kvio_http_server_write_tokens(kvio_http_server_t *server, const char *path,
                                            char *error_p, size_t error_len)
{
    pthread_mutex_lock(&server->metrics_lock);
    kvio_status_t status = server->steps_dropped ? KVIO_ERR_NOMEM : KVIO_OK;
    FILE *file = status == KVIO_OK ? fopen(path, "wx") : NULL;
    if (status == KVIO_OK && file == NULL)
        status = kvio_status_from_errno(errno);
    if (file != NULL) {
        fprintf(file, "id,tokens,time_s\n");
        for (size_t i = 0; i < server->num_steps; i++)
            fprintf(file, "%llu,%u,%.6f\n", (unsigned long long)server->steps[i].id,
                    server->steps[i].generated, (double)server->steps[i].time_ns / 1e9);
        if (fclose(file) != 0)
            status = KVIO_ERR_IO;
    }
    pthread_mutex_unlock(&server->metrics_lock);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "%s: %s", path,
                 status == KVIO_ERR_NOMEM ? "out of memory keeping every step"
                                          : kvio_strerror(status));
    return status;
}

void kvio_http_server_stop(kvio_http_server_t *server)
{
    if (server == NULL || server->stopped)
        return;
    server->stopped = true;
    atomic_store(&server->stopping, true);
    if (server->ticker_started)
        pthread_join(server->ticker, NULL);
    /* MHD must not stop with connections asleep. */
    wake_waiting(server, false);
    for (uint32_t i = 0; i < server->num_slots; i++) {
        if (server->slots[i].daemon != NULL)
            MHD_stop_daemon(server->slots[i].daemon);
        server->slots[i].daemon = NULL;
    }
}

void kvio_http_server_destroy(kvio_http_server_t *server)
{
    if (server == NULL)
        return;
    kvio_http_server_stop(server);
    pthread_mutex_destroy(&server->metrics_lock);
    pthread_mutex_destroy(&server->waiting_lock);
    kvio_http_limits_fini(&server->limits);
    free(server->rank_metrics);
    free(server->steps);
    free(server->host);
    free(server->model_name);
    free(server->model_root);
    free(server);
}
