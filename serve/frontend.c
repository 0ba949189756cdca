/* The front end (kvio/frontend.h): per serve rank an inbox of submitted
 * requests, aborts and admin calls under one lock, taken by the rank's
 * arrival source (serve/arrivals_frontend.c) at its iteration boundaries;
 * the state each rank publishes back (what /metrics and the router read);
 * and, when asked, every request kept as a hash-id trace line. */
#include "serve/serve_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/hashset.h"

typedef struct rank_inbox {
    kvio_frontend_pending_t *head, *tail;
    uint64_t *aborts;
    size_t num_aborts, aborts_capacity;
    uint64_t reset_asked, reset_done;
    bool reset_refused;
    kvio_frontend_state_t state;
    uint64_t queued;        /* submitted, not yet taken */
    atomic_uint work;       /* something to take (a look without the lock) */
    pthread_cond_t arrived; /* work was set: a napping rank wakes */
} rank_inbox_t;

struct kvio_frontend {
    kvio_frontend_params_t params;
    pthread_mutex_t lock;
    pthread_cond_t changed;     /* a rank did a reset */
    rank_inbox_t *ranks;
    atomic_uint ready_ranks;
    _Atomic uint64_t origin_ns; /* host time at which the engines' clocks read 0 */
    atomic_bool closed;
    atomic_int paused;          /* kvio_pause_t */
    uint64_t abort_epoch;       /* abort-all asks (pause with abort, close with abort) */
    uint64_t next_id;
    kvio_router_t *router;
    kvio_serve_mirror_t *mirror;
    /* record_trace: the lines, and an id per distinct block hash */
    char *trace;
    size_t trace_length, trace_capacity;
    kvio_map_t trace_ids;
    uint64_t next_trace_id;
    kvio_status_t trace_status;
};

void kvio_frontend_pending_free(kvio_frontend_pending_t *pending)
{
    if (pending == NULL)
        return;
    free(pending->hashes);
    free(pending->block_tokens);
    free(pending);
}

kvio_status_t kvio_frontend_create(const kvio_frontend_params_t *params,
                                   kvio_frontend_t **frontend_p)
{
    if (params->num_ranks == 0 || params->block_size == 0)
        return KVIO_ERR_INVALID;
    kvio_frontend_t *frontend = calloc(1, sizeof(*frontend));
    if (frontend == NULL)
        return KVIO_ERR_NOMEM;
    frontend->params = *params;
    frontend->params.router = NULL; /* borrowed only for the create below */
    frontend->next_id = 1;
    frontend->next_trace_id = 1;
    pthread_mutex_init(&frontend->lock, NULL);
    pthread_cond_init(&frontend->changed, NULL);
    frontend->ranks = calloc(params->num_ranks, sizeof(*frontend->ranks));
    kvio_status_t status = frontend->ranks != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    for (uint32_t r = 0; status == KVIO_OK && r < params->num_ranks; r++)
        pthread_cond_init(&frontend->ranks[r].arrived, NULL);
    if (status == KVIO_OK && params->num_ranks > 1) {
        status = params->router != NULL ? kvio_router_create(params->router, &frontend->router)
                                        : KVIO_ERR_INVALID;
        if (status == KVIO_OK)
            status = kvio_serve_mirror_create(params->num_ranks, params->block_size,
                                              &frontend->mirror);
        if (status == KVIO_OK && kvio_router_hears_events(frontend->router))
            kvio_serve_mirror_hear(frontend->mirror, frontend->router);
    }
    if (status != KVIO_OK) {
        kvio_frontend_destroy(frontend);
        return status;
    }
    *frontend_p = frontend;
    return KVIO_OK;
}

void kvio_frontend_destroy(kvio_frontend_t *frontend)
{
    if (frontend == NULL)
        return;
    for (uint32_t r = 0; frontend->ranks != NULL && r < frontend->params.num_ranks; r++) {
        rank_inbox_t *inbox = &frontend->ranks[r];
        /* Requests never taken (the run ended first): they end here. */
        while (inbox->head != NULL) {
            kvio_frontend_pending_t *pending = inbox->head;
            inbox->head = pending->next;
            if (pending->listener.on_abort != NULL)
                pending->listener.on_abort(pending->listener.context, 0);
            kvio_frontend_pending_free(pending);
        }
        free(inbox->aborts);
        pthread_cond_destroy(&inbox->arrived);
    }
    free(frontend->ranks);
    kvio_router_destroy(frontend->router);
    kvio_serve_mirror_destroy(frontend->mirror);
    free(frontend->trace);
    kvio_map_fini(&frontend->trace_ids);
    pthread_cond_destroy(&frontend->changed);
    pthread_mutex_destroy(&frontend->lock);
    free(frontend);
}

uint32_t kvio_frontend_num_ranks(const kvio_frontend_t *frontend)
{
    return frontend->params.num_ranks;
}

bool kvio_frontend_ready(const kvio_frontend_t *frontend)
{
    return atomic_load(&frontend->ready_ranks) >= frontend->params.num_ranks;
}

int64_t kvio_frontend_run_ns(const kvio_frontend_t *frontend, uint64_t host_ns)
{
    uint64_t origin = atomic_load(&frontend->origin_ns);
    if (origin == 0)
        return 0;
    return host_ns >= origin ? (int64_t)(host_ns - origin) : -(int64_t)(origin - host_ns);
}

int64_t kvio_frontend_now_ns(const kvio_frontend_t *frontend)
{
    int64_t now = kvio_frontend_run_ns(frontend, kvio_time_ns());
    return now > 0 ? now : 0;
}

void kvio_frontend_rank_ready(kvio_frontend_t *frontend, uint32_t rank, uint64_t origin_ns)
{
    (void)rank;
    /* The ranks share t0: the first one's origin is everyone's. */
    uint64_t none = 0;
    atomic_compare_exchange_strong(&frontend->origin_ns, &none, origin_ns);
    atomic_fetch_add(&frontend->ready_ranks, 1);
}

/* Rank rank has something to take (the lock held): a napping rank wakes. */
static void signal_work(kvio_frontend_t *frontend, uint32_t rank)
{
    atomic_store(&frontend->ranks[rank].work, 1);
    pthread_cond_broadcast(&frontend->ranks[rank].arrived);
}

/* ---------- submitting ---------- */

/* The hashes of the request's full blocks (vLLM's: each block's token ids
 * chained from its parent, the salt in the first block's extra key), and
 * their tokens when KV events want them. */
static kvio_status_t make_pending(const kvio_frontend_t *frontend,
                                  const kvio_frontend_request_t *request,
                                  kvio_frontend_pending_t **pending_p)
{
    uint32_t block_size = frontend->params.block_size;
    uint64_t total = (uint64_t)request->prompt_tokens + request->output_tokens;
    size_t num_blocks = (size_t)(total / block_size);
    kvio_frontend_pending_t *pending = calloc(1, sizeof(*pending));
    if (pending == NULL)
        return KVIO_ERR_NOMEM;
    pending->hashes = malloc((num_blocks + 1) * sizeof(*pending->hashes));
    bool events = frontend->params.events.publish != NULL;
    if (events)
        pending->block_tokens = malloc((num_blocks * block_size + 1) * sizeof(uint32_t));
    if (pending->hashes == NULL || (events && pending->block_tokens == NULL)) {
        kvio_frontend_pending_free(pending);
        return KVIO_ERR_NOMEM;
    }
    uint64_t salt = request->cache_salt;
    for (size_t b = 0; b < num_blocks; b++)
        pending->hashes[b] = kvio_hash_tokens(b > 0 ? &pending->hashes[b - 1] : NULL,
                                              request->tokens + b * block_size, block_size,
                                              b == 0 && salt != 0 ? &salt : NULL,
                                              b == 0 && salt != 0 ? sizeof(salt) : 0);
    if (events)
        memcpy(pending->block_tokens, request->tokens,
               num_blocks * block_size * sizeof(uint32_t));
    pending->request = (kvio_engine_request_t){
        .prompt_tokens = request->prompt_tokens, .output_tokens = request->output_tokens,
        .max_tokens = request->output_tokens, .priority = request->priority,
        .hashes = pending->hashes, .num_hashes = num_blocks, .measured = true};
    pending->listener = request->listener;
    *pending_p = pending;
    return KVIO_OK;
}

/* The serve rank for a routed request (under the lock): the router over
 * the mirror of what the ranks published. */
static uint32_t route(kvio_frontend_t *frontend, const kvio_engine_request_t *request)
{
    if (frontend->params.num_ranks == 1)
        return 0;
    kvio_router_view_t view;
    kvio_serve_mirror_view(frontend->mirror, &view);
    view.now_ns = (int64_t)kvio_time_ns(); /* the mirror's event clock */
    return kvio_router_choose_view(frontend->router, &view, frontend->params.num_ranks,
                                   request);
}

static kvio_status_t trace_append(kvio_frontend_t *frontend, const char *text, size_t length)
{
    if (frontend->trace_length + length + 1 > frontend->trace_capacity) {
        size_t capacity = frontend->trace_capacity ? 2 * frontend->trace_capacity : 1u << 16;
        while (capacity < frontend->trace_length + length + 1)
            capacity *= 2;
        char *grown = realloc(frontend->trace, capacity);
        if (grown == NULL)
            return KVIO_ERR_NOMEM;
        frontend->trace = grown;
        frontend->trace_capacity = capacity;
    }
    memcpy(frontend->trace + frontend->trace_length, text, length);
    frontend->trace_length += length;
    return KVIO_OK;
}

/* The request as a trace line (under the lock): one id per block of its
 * prompt and output, the same id for the same block hash (a partial last
 * block gets one of its own). */
static kvio_status_t trace_record(kvio_frontend_t *frontend,
                                  const kvio_frontend_pending_t *pending)
{
    const kvio_engine_request_t *request = &pending->request;
    uint32_t block_size = frontend->params.block_size;
    uint64_t total = (uint64_t)request->prompt_tokens + request->output_tokens;
    size_t num_ids = (size_t)((total + block_size - 1) / block_size);
    char head[256];
    int length = snprintf(head, sizeof(head),
                          "{\"id\": %llu, \"arrival_ns\": %lld, \"timestamp\": %.3f, "
                          "\"input_length\": %u, \"output_length\": %u, \"block_tokens\": %u, "
                          "\"sequence_hash_ids\": true, \"hash_ids\": [",
                          (unsigned long long)request->id, (long long)request->arrival_ns,
                          (double)request->arrival_ns / 1e6, request->prompt_tokens,
                          request->output_tokens, block_size);
    kvio_status_t status = trace_append(frontend, head, (size_t)length);
    for (size_t b = 0; b < num_ids && status == KVIO_OK; b++) {
        uint64_t id = 0;
        if (b < request->num_hashes) {
            uint64_t key = pending->hashes[b].low | 1; /* the map's keys are non-zero */
            id = kvio_map_get(&frontend->trace_ids, key);
            if (id == 0) {
                id = frontend->next_trace_id++;
                status = kvio_map_set(&frontend->trace_ids, key, (uint32_t)id);
            }
        } else {
            id = frontend->next_trace_id++;
        }
        char text[32];
        int used = snprintf(text, sizeof(text), b > 0 ? ", %llu" : "%llu",
                            (unsigned long long)id);
        if (status == KVIO_OK)
            status = trace_append(frontend, text, (size_t)used);
    }
    if (status == KVIO_OK)
        status = trace_append(frontend, "]}\n", 3);
    return status;
}

/* A request's arrival on the run's clock: when it was read whole at the
 * server (now when not said), never before t0 (the engines' clocks start
 * there: one read just before it arrived at it). */
static int64_t arrival_ns(const kvio_frontend_t *frontend, uint64_t received_host_ns)
{
    if (received_host_ns == 0)
        return kvio_frontend_now_ns(frontend);
    int64_t at = kvio_frontend_run_ns(frontend, received_host_ns);
    return at > 0 ? at : 0;
}

kvio_status_t kvio_frontend_submit(kvio_frontend_t *frontend, uint32_t rank,
                                   const kvio_frontend_request_t *request, uint64_t *id_p,
                                   uint32_t *rank_p)
{
    if (request->prompt_tokens == 0 ||
        (rank != KVIO_FRONTEND_ROUTE && rank >= frontend->params.num_ranks))
        return KVIO_ERR_INVALID;
    if (!kvio_frontend_ready(frontend) || atomic_load(&frontend->closed))
        return KVIO_ERR_INTERRUPTED;
    kvio_frontend_pending_t *pending = NULL;
    kvio_status_t status = make_pending(frontend, request, &pending);
    if (status != KVIO_OK)
        return status;
    pthread_mutex_lock(&frontend->lock);
    if (atomic_load(&frontend->closed)) {
        pthread_mutex_unlock(&frontend->lock);
        kvio_frontend_pending_free(pending);
        return KVIO_ERR_INTERRUPTED;
    }
    pending->request.id = frontend->next_id;
    pending->abort_epoch = frontend->abort_epoch;
    pending->request.arrival_ns = arrival_ns(frontend, request->received_host_ns);
    pending->first_byte_ns = request->first_byte_host_ns != 0
                                 ? kvio_frontend_run_ns(frontend, request->first_byte_host_ns)
                                 : pending->request.arrival_ns;
    if (rank == KVIO_FRONTEND_ROUTE)
        rank = route(frontend, &pending->request);
    if (frontend->mirror != NULL)
        status = kvio_serve_mirror_dispatched(frontend->mirror, rank, &pending->request);
    if (status == KVIO_OK && frontend->params.record_trace &&
        frontend->trace_status == KVIO_OK)
        frontend->trace_status = trace_record(frontend, pending);
    if (status != KVIO_OK) {
        pthread_mutex_unlock(&frontend->lock);
        kvio_frontend_pending_free(pending);
        return status;
    }
    frontend->next_id++;
    rank_inbox_t *inbox = &frontend->ranks[rank];
    if (inbox->tail != NULL)
        inbox->tail->next = pending;
    else
        inbox->head = pending;
    inbox->tail = pending;
    inbox->queued++;
    inbox->state.submitted++;
    signal_work(frontend, rank);
    if (id_p != NULL)
        *id_p = pending->request.id;
    if (rank_p != NULL)
        *rank_p = rank;
    pthread_mutex_unlock(&frontend->lock);
    return KVIO_OK;
}

void kvio_frontend_abort(kvio_frontend_t *frontend, uint32_t rank, uint64_t id)
{
    if (rank >= frontend->params.num_ranks)
        return;
    pthread_mutex_lock(&frontend->lock);
    rank_inbox_t *inbox = &frontend->ranks[rank];
    if (inbox->num_aborts == inbox->aborts_capacity) {
        size_t capacity = inbox->aborts_capacity ? 2 * inbox->aborts_capacity : 16;
        uint64_t *aborts = realloc(inbox->aborts, capacity * sizeof(*aborts));
        if (aborts == NULL) {
            /* The request runs to its end instead; its listener still hears. */
            pthread_mutex_unlock(&frontend->lock);
            return;
        }
        inbox->aborts = aborts;
        inbox->aborts_capacity = capacity;
    }
    inbox->aborts[inbox->num_aborts++] = id;
    signal_work(frontend, rank);
    pthread_mutex_unlock(&frontend->lock);
}

/* ---------- admin calls ---------- */

void kvio_frontend_reset_prefix_cache(kvio_frontend_t *frontend, int64_t timeout_ns,
                                      bool *reset_p)
{
    pthread_mutex_lock(&frontend->lock);
    uint64_t asked[64];
    uint32_t num_ranks = frontend->params.num_ranks;
    for (uint32_t r = 0; r < num_ranks; r++) {
        rank_inbox_t *inbox = &frontend->ranks[r];
        inbox->reset_asked++;
        inbox->reset_refused = false;
        if (r < 64)
            asked[r] = inbox->reset_asked;
        signal_work(frontend, r);
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(timeout_ns / 1000000000);
    deadline.tv_nsec += (long)(timeout_ns % 1000000000);
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    bool done = false, refused = false;
    while (!done) {
        done = true;
        refused = false;
        for (uint32_t r = 0; r < num_ranks; r++) {
            const rank_inbox_t *inbox = &frontend->ranks[r];
            uint64_t wanted = r < 64 ? asked[r] : inbox->reset_asked;
            done = done && inbox->reset_done >= wanted;
            refused = refused || inbox->reset_refused;
        }
        if (!done && pthread_cond_timedwait(&frontend->changed, &frontend->lock, &deadline) ==
                         ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&frontend->lock);
    *reset_p = done && !refused;
}

void kvio_frontend_reset_done(kvio_frontend_t *frontend, uint32_t rank, uint64_t reset,
                              bool refused)
{
    pthread_mutex_lock(&frontend->lock);
    rank_inbox_t *inbox = &frontend->ranks[rank];
    if (reset > inbox->reset_done)
        inbox->reset_done = reset;
    inbox->reset_refused = inbox->reset_refused || refused;
    pthread_cond_broadcast(&frontend->changed);
    pthread_mutex_unlock(&frontend->lock);
}

/* Every rank looks again at its next boundary (at once while idle; the
 * lock held). */
static void wake_all(kvio_frontend_t *frontend)
{
    for (uint32_t r = 0; r < frontend->params.num_ranks; r++)
        signal_work(frontend, r);
}

void kvio_frontend_pause(kvio_frontend_t *frontend, kvio_pause_t mode, bool abort_in_flight)
{
    pthread_mutex_lock(&frontend->lock);
    if (abort_in_flight)
        frontend->abort_epoch++;
    atomic_store(&frontend->paused, (int)mode);
    wake_all(frontend);
    pthread_mutex_unlock(&frontend->lock);
}

kvio_pause_t kvio_frontend_paused(const kvio_frontend_t *frontend)
{
    return (kvio_pause_t)atomic_load(&frontend->paused);
}

void kvio_frontend_close(kvio_frontend_t *frontend, bool abort_in_flight)
{
    pthread_mutex_lock(&frontend->lock);
    atomic_store(&frontend->closed, true);
    if (abort_in_flight)
        frontend->abort_epoch++;
    /* A paused server that shuts down finishes (or aborts) what it holds. */
    atomic_store(&frontend->paused, (int)KVIO_PAUSE_NONE);
    wake_all(frontend);
    pthread_mutex_unlock(&frontend->lock);
}

bool kvio_frontend_closed(const kvio_frontend_t *frontend)
{
    return atomic_load(&frontend->closed);
}

/* ---------- the serve ranks' side ---------- */

bool kvio_frontend_has_work(const kvio_frontend_t *frontend, uint32_t rank)
{
    return atomic_load(&frontend->ranks[rank].work) != 0;
}

void kvio_frontend_nap(kvio_frontend_t *frontend, uint32_t rank, int64_t ns)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec += (long)(ns % 1000000000);
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&frontend->lock);
    rank_inbox_t *inbox = &frontend->ranks[rank];
    if (atomic_load(&inbox->work) == 0)
        pthread_cond_timedwait(&inbox->arrived, &frontend->lock, &deadline);
    pthread_mutex_unlock(&frontend->lock);
}

void kvio_frontend_take(kvio_frontend_t *frontend, uint32_t rank, kvio_frontend_take_t *take_p)
{
    pthread_mutex_lock(&frontend->lock);
    rank_inbox_t *inbox = &frontend->ranks[rank];
    *take_p = (kvio_frontend_take_t){
        .pending = inbox->head, .aborts = inbox->aborts, .num_aborts = inbox->num_aborts,
        .reset = inbox->reset_asked > inbox->reset_done ? inbox->reset_asked : 0,
        .closed = atomic_load(&frontend->closed), .abort_epoch = frontend->abort_epoch,
        .pause = (kvio_pause_t)atomic_load(&frontend->paused)};
    inbox->head = inbox->tail = NULL;
    inbox->aborts = NULL;
    inbox->num_aborts = inbox->aborts_capacity = 0;
    inbox->queued = 0;
    atomic_store(&inbox->work, 0);
    pthread_mutex_unlock(&frontend->lock);
}

void kvio_frontend_publish(kvio_frontend_t *frontend, uint32_t rank,
                           const kvio_frontend_state_t *state, const void *blob, size_t length)
{
    pthread_mutex_lock(&frontend->lock);
    rank_inbox_t *inbox = &frontend->ranks[rank];
    uint64_t submitted = inbox->state.submitted;
    inbox->state = *state;
    inbox->state.submitted = submitted;
    if (blob != NULL && frontend->mirror != NULL) {
        bool final = false;
        kvio_serve_mirror_apply(frontend->mirror, rank, blob, length, &final);
    }
    pthread_mutex_unlock(&frontend->lock);
}

void kvio_frontend_state(const kvio_frontend_t *frontend, uint32_t rank,
                         kvio_frontend_state_t *state_p)
{
    kvio_frontend_t *shared = (kvio_frontend_t *)frontend; /* the lock only */
    memset(state_p, 0, sizeof(*state_p));
    if (rank >= frontend->params.num_ranks)
        return;
    pthread_mutex_lock(&shared->lock);
    *state_p = frontend->ranks[rank].state;
    state_p->waiting += (uint32_t)frontend->ranks[rank].queued;
    pthread_mutex_unlock(&shared->lock);
}

void kvio_frontend_routing_fill(kvio_frontend_t *frontend, kvio_result_t *result)
{
    if (frontend->router == NULL)
        return;
    pthread_mutex_lock(&frontend->lock); /* the router routes under it */
    kvio_router_fill(result, frontend->router);
    pthread_mutex_unlock(&frontend->lock);
}

const kvio_kv_event_sink_t *kvio_frontend_events(const kvio_frontend_t *frontend)
{
    return &frontend->params.events;
}

uint32_t kvio_frontend_block_size(const kvio_frontend_t *frontend)
{
    return frontend->params.block_size;
}

kvio_status_t kvio_frontend_write_trace(const kvio_frontend_t *frontend,
                                        kvio_results_t *results, char *error_p,
                                        size_t error_len)
{
    if (!frontend->params.record_trace || results == NULL)
        return KVIO_OK;
    if (frontend->trace_status != KVIO_OK) {
        snprintf(error_p, error_len, "trace.jsonl: %s while recording the requests",
                 kvio_strerror(frontend->trace_status));
        return frontend->trace_status;
    }
    kvio_csv_t *file = NULL;
    kvio_status_t status = kvio_csv_open(results, "trace.jsonl", NULL, &file);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "trace.jsonl: %s", kvio_strerror(status));
        return status;
    }
    /* The lines end in newlines; kvio_csv_line adds one, so they go whole. */
    if (frontend->trace_length > 0)
        status = kvio_csv_line(file, frontend->trace, frontend->trace_length - 1);
    kvio_status_t closed = kvio_csv_finish(file, "trace.jsonl", error_p, error_len);
    return status != KVIO_OK ? status : closed;
}
