/* The front end as a serve rank's arrival source (kvio serve): at each
 * iteration boundary, and at once while the rank idles, the rank takes
 * what the front end queued for it (requests, aborts, a prefix-cache
 * reset, a pause), and after each iteration it hands back what happened:
 * each request's tokens to its listener, its KV events to the sink, and
 * its state (gauges, counters, the router's mirror). Everything here runs
 * on the rank's thread; the front end (serve/frontend.c) is the only part
 * shared with other threads. */
#include "serve/loop_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/hashset.h"

/* How soon an idle rank looks at the front end again: it naps until then,
 * and a request, abort or admin call wakes it at once. */
#define FRONTEND_POLL_NS 50000000

/* A request taken into the engine and not yet finished or aborted. */
typedef struct live {
    uint64_t id;
    uint64_t abort_epoch;
    kvio_frontend_listener_t listener;
    kvio_hash_t *hashes;    /* its full blocks' hashes (owned): the blocks it holds a ref on */
    size_t num_hashes;
    uint32_t prompt_tokens;
    int64_t arrival_ns;
    int64_t first_byte_ns;  /* its first byte at the server (run clock) */
    int64_t taken_ns;       /* this rank took it (run clock) */
    uint32_t generated;     /* tokens its listener has heard of */
    uint32_t next_free;     /* free list (index + 1; 0: end) */
    bool in_use;
} live_t;

/* A block of a live request, for its KV event: its parent and tokens. */
typedef struct block_info {
    kvio_hash_t hash, parent;
    bool has_parent;
    uint32_t refs;          /* live requests holding it */
    uint32_t next_free;
} block_info_t;

struct kvio_serve_frontend_arrivals {
    kvio_serve_arrivals_t base;
    kvio_frontend_t *frontend;
    uint32_t rank;                  /* among the serve ranks */
    kvio_serve_loop_t *loop;
    kvio_serve_lane_t *lane;
    kvio_serve_publisher_t publisher; /* the router's mirror (several ranks) */
    bool routed;
    uint32_t block_size;
    bool with_events;
    bool clearing; /* a reset: its blocks' removals are one AllBlocksCleared */
    /* live requests: by id in a map to index + 1 */
    live_t *lives;
    size_t num_lives, lives_capacity;
    uint32_t free_live;
    kvio_map_t live_index;
    /* blocks of live requests (with_events): by hash low to index + 1 */
    block_info_t *blocks;
    uint32_t *block_tokens;         /* block_size per block */
    size_t num_blocks, blocks_capacity;
    uint32_t free_block;
    kvio_map_t block_index;
    /* this iteration's events; their tokens in event_tokens until published */
    kvio_kv_event_t *events;
    size_t num_events, events_capacity;
    size_t *event_token_at;         /* per event: its first token in event_tokens */
    uint32_t *event_tokens;
    size_t num_event_tokens, event_tokens_capacity;
    /* vLLM's counters that the engine does not keep */
    uint64_t prompt_tokens, generation_tokens, aborted;
    uint64_t abort_epoch;           /* the abort-all count this rank has carried out */
    kvio_pause_t pause;
    bool closed;                    /* no more requests will come */
    kvio_status_t status;           /* out of memory in a hook */
    char error[256];
};

typedef struct kvio_serve_frontend_arrivals frontend_arrivals_t;

/* ---------- growing arrays ---------- */

static bool grow(void **items, size_t *capacity_p, size_t count, size_t item_size)
{
    if (count < *capacity_p)
        return true;
    size_t capacity = *capacity_p ? 2 * *capacity_p : 64;
    void *bigger = realloc(*items, capacity * item_size);
    if (bigger == NULL)
        return false;
    *items = bigger;
    *capacity_p = capacity;
    return true;
}

static void hook_failed(frontend_arrivals_t *source)
{
    if (source->status == KVIO_OK) {
        source->status = KVIO_ERR_NOMEM;
        snprintf(source->error, sizeof(source->error),
                 "serve rank %u: out of memory keeping the front end's requests", source->rank);
    }
}

/* ---------- blocks of live requests (KV events) ---------- */

static uint64_t block_key(kvio_hash_t hash)
{
    return hash.low | 1; /* the map's keys are non-zero */
}

static block_info_t *find_block(const frontend_arrivals_t *source, kvio_hash_t hash)
{
    uint32_t index = kvio_map_get(&source->block_index, block_key(hash));
    if (index == 0 || !kvio_hash_equal(source->blocks[index - 1].hash, hash))
        return NULL;
    return &source->blocks[index - 1];
}

/* A live request holds a ref on each of its full blocks. */
static kvio_status_t hold_blocks(frontend_arrivals_t *source, const kvio_frontend_pending_t *pending)
{
    uint32_t block_size = source->block_size;
    for (size_t b = 0; b < pending->request.num_hashes; b++) {
        kvio_hash_t hash = pending->hashes[b];
        block_info_t *info = find_block(source, hash);
        if (info != NULL) {
            info->refs++;
            continue;
        }
        uint32_t index = source->free_block;
        if (index != 0) {
            source->free_block = source->blocks[index - 1].next_free;
        } else {
            if (!grow((void **)&source->blocks, &source->blocks_capacity, source->num_blocks,
                      sizeof(block_info_t)))
                return KVIO_ERR_NOMEM;
            size_t tokens_capacity = source->blocks_capacity * block_size;
            uint32_t *tokens = realloc(source->block_tokens, tokens_capacity * sizeof(uint32_t));
            if (tokens == NULL)
                return KVIO_ERR_NOMEM;
            source->block_tokens = tokens;
            index = (uint32_t)++source->num_blocks;
        }
        source->blocks[index - 1] = (block_info_t){
            .hash = hash, .parent = b > 0 ? pending->hashes[b - 1] : (kvio_hash_t){0, 0},
            .has_parent = b > 0, .refs = 1};
        memcpy(source->block_tokens + (size_t)(index - 1) * block_size,
               pending->block_tokens + b * block_size, block_size * sizeof(uint32_t));
        kvio_status_t status = kvio_map_set(&source->block_index, block_key(hash), index);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

static void release_blocks(frontend_arrivals_t *source, const live_t *live)
{
    for (size_t b = 0; b < live->num_hashes; b++) {
        block_info_t *info = find_block(source, live->hashes[b]);
        if (info == NULL || --info->refs > 0)
            continue;
        uint32_t index = (uint32_t)(info - source->blocks) + 1;
        kvio_map_set(&source->block_index, block_key(info->hash), 0);
        info->next_free = source->free_block;
        source->free_block = index;
    }
}

/* ---------- KV events ---------- */

static kvio_kv_event_t *new_event(frontend_arrivals_t *source, kvio_kv_event_kind_t kind)
{
    if (!grow((void **)&source->events, &source->events_capacity, source->num_events,
              sizeof(kvio_kv_event_t))) {
        hook_failed(source);
        return NULL;
    }
    size_t capacity = source->events_capacity;
    size_t *at = realloc(source->event_token_at, capacity * sizeof(size_t));
    if (at == NULL) {
        hook_failed(source);
        return NULL;
    }
    source->event_token_at = at;
    at[source->num_events] = source->num_event_tokens;
    kvio_kv_event_t *event = &source->events[source->num_events++];
    *event = (kvio_kv_event_t){.kind = kind};
    return event;
}

static bool add_event_tokens(frontend_arrivals_t *source, const uint32_t *tokens, size_t count)
{
    while (source->num_event_tokens + count > source->event_tokens_capacity) {
        size_t capacity = source->event_tokens_capacity ? 2 * source->event_tokens_capacity : 4096;
        uint32_t *bigger = realloc(source->event_tokens, capacity * sizeof(uint32_t));
        if (bigger == NULL) {
            hook_failed(source);
            return false;
        }
        source->event_tokens = bigger;
        source->event_tokens_capacity = capacity;
    }
    memcpy(source->event_tokens + source->num_event_tokens, tokens, count * sizeof(uint32_t));
    source->num_event_tokens += count;
    return true;
}

/* A block's hash entered the index: vLLM sends one BlockStored per request
 * and step for the blocks it filled, so a block whose parent is the last
 * one stored in this iteration joins that event. Stored events carry one
 * hash per block here (kvio_kv_event_t); the sink groups a run. */
static void event_stored(frontend_arrivals_t *source, kvio_hash_t hash)
{
    const block_info_t *info = find_block(source, hash);
    kvio_kv_event_t *event = new_event(source, KVIO_KV_EVENT_STORED);
    if (event == NULL)
        return;
    event->hash = hash;
    if (info == NULL)
        return; /* not a block of a request this rank knows: no tokens */
    event->has_parent = info->has_parent;
    event->parent = info->parent;
    size_t index = (size_t)(info - source->blocks);
    if (add_event_tokens(source, source->block_tokens + index * source->block_size,
                         source->block_size))
        event->num_tokens = source->block_size;
}

static void event_simple(frontend_arrivals_t *source, kvio_kv_event_kind_t kind, kvio_hash_t hash)
{
    kvio_kv_event_t *event = new_event(source, kind);
    if (event != NULL)
        event->hash = hash;
}

/* The iteration's events to the sink, their token pointers set now that
 * the token array no longer moves. */
static void publish_events(frontend_arrivals_t *source, int64_t now_ns)
{
    const kvio_kv_event_sink_t *sink = kvio_frontend_events(source->frontend);
    if (source->num_events == 0 || sink->publish == NULL) {
        source->num_events = source->num_event_tokens = 0;
        return;
    }
    for (size_t e = 0; e < source->num_events; e++)
        source->events[e].tokens = source->events[e].num_tokens > 0
                                       ? source->event_tokens + source->event_token_at[e]
                                       : NULL;
    sink->publish(sink->context, source->rank, source->events, source->num_events, now_ns);
    source->num_events = source->num_event_tokens = 0;
}

/* ---------- live requests ---------- */

static live_t *find_live(const frontend_arrivals_t *source, uint64_t id)
{
    uint32_t index = kvio_map_get(&source->live_index, id);
    return index != 0 ? &source->lives[index - 1] : NULL;
}

static kvio_status_t add_live(frontend_arrivals_t *source, const kvio_frontend_pending_t *pending,
                              int64_t taken_ns, live_t **live_p)
{
    uint32_t index = source->free_live;
    if (index != 0) {
        source->free_live = source->lives[index - 1].next_free;
    } else {
        if (!grow((void **)&source->lives, &source->lives_capacity, source->num_lives,
                  sizeof(live_t)))
            return KVIO_ERR_NOMEM;
        index = (uint32_t)++source->num_lives;
    }
    live_t *live = &source->lives[index - 1];
    size_t bytes = pending->request.num_hashes * sizeof(kvio_hash_t);
    *live = (live_t){.id = pending->request.id, .abort_epoch = pending->abort_epoch,
                     .listener = pending->listener, .num_hashes = pending->request.num_hashes,
                     .prompt_tokens = pending->request.prompt_tokens, .in_use = true,
                     .arrival_ns = pending->request.arrival_ns,
                     .first_byte_ns = pending->first_byte_ns, .taken_ns = taken_ns,
                     .hashes = malloc(bytes + 1)};
    kvio_status_t status = live->hashes != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    if (status == KVIO_OK) {
        memcpy(live->hashes, pending->hashes, bytes);
        status = kvio_map_set(&source->live_index, live->id, index);
    }
    if (status != KVIO_OK) {
        free(live->hashes);
        live->in_use = false;
        live->next_free = source->free_live;
        source->free_live = index;
        return status;
    }
    *live_p = live;
    return KVIO_OK;
}

static void drop_live(frontend_arrivals_t *source, live_t *live)
{
    if (source->with_events)
        release_blocks(source, live);
    kvio_map_set(&source->live_index, live->id, 0);
    free(live->hashes);
    live->hashes = NULL;
    live->in_use = false;
    live->next_free = source->free_live;
    source->free_live = (uint32_t)(live - source->lives) + 1;
}

/* A live request taken out of the engine unfinished. */
static void abort_live(frontend_arrivals_t *source, live_t *live, int64_t now_ns)
{
    if (kvio_engine_abort(source->lane->engine, live->id) != KVIO_OK)
        return; /* finished in the meantime: its listener heard */
    kvio_serve_loop_finished(source->loop, NULL);
    source->aborted++;
    kvio_frontend_listener_t listener = live->listener;
    drop_live(source, live);
    if (listener.on_abort != NULL)
        listener.on_abort(listener.context, now_ns);
}

/* ---------- taking what the front end queued ---------- */

static kvio_status_t take_pending(frontend_arrivals_t *source, kvio_frontend_pending_t *pending,
                                  int64_t now_ns)
{
    kvio_status_t status = KVIO_OK;
    /* The pick-up: now, on the clock their arrivals were put on (the front
     * end's), just before the engine queues them as waiting. */
    int64_t taken_ns = kvio_frontend_now_ns(source->frontend);
    while (pending != NULL) {
        kvio_frontend_pending_t *next = pending->next;
        live_t *live = NULL;
        if (status == KVIO_OK)
            status = add_live(source, pending, taken_ns, &live);
        if (status == KVIO_OK && source->with_events)
            status = hold_blocks(source, pending);
        if (status == KVIO_OK) {
            kvio_engine_request_t request = pending->request;
            kvio_serve_lane_t *lane = source->lane;
            request.tag = lane->updates != NULL
                              ? lane->updates->ops->version_at(lane->updates, now_ns)
                              : 0;
            source->publisher.received++;
            status = kvio_serve_loop_add(source->loop, lane, &request);
            if (status != KVIO_OK)
                drop_live(source, live);
        }
        if (status != KVIO_OK && pending->listener.on_abort != NULL)
            pending->listener.on_abort(pending->listener.context, now_ns - source->loop->origin_ns);
        kvio_frontend_pending_free(pending);
        pending = next;
    }
    if (status != KVIO_OK && source->error[0] == '\0')
        snprintf(source->error, sizeof(source->error),
                 "serve rank %u: taking the front end's requests: %s", source->rank,
                 kvio_strerror(status));
    return status;
}

/* Everything submitted before the abort-all that is asked now. */
static void abort_all(frontend_arrivals_t *source, uint64_t epoch, int64_t now_ns)
{
    for (size_t i = 0; i < source->num_lives; i++)
        if (source->lives[i].in_use && source->lives[i].abort_epoch < epoch)
            abort_live(source, &source->lives[i], now_ns);
    source->abort_epoch = epoch;
}

static void do_reset(frontend_arrivals_t *source, uint64_t reset)
{
    bool done = false;
    /* The router's mirror hears each block go; the KV events say it once,
     * as vLLM's reset does (AllBlocksCleared). */
    source->clearing = true;
    kvio_engine_reset_prefix_cache(source->lane->engine, &done);
    source->clearing = false;
    if (done)
        event_simple(source, KVIO_KV_EVENT_CLEARED, (kvio_hash_t){0, 0});
    kvio_frontend_reset_done(source->frontend, source->rank, reset, !done);
}

static void publish_state(frontend_arrivals_t *source, bool final);

static kvio_status_t frontend_take(kvio_serve_arrivals_t *base, kvio_serve_loop_t *loop,
                                   int64_t now_ns, bool *more_now_p)
{
    frontend_arrivals_t *source = (frontend_arrivals_t *)base;
    *more_now_p = false;
    int64_t engine_ns = now_ns - loop->origin_ns;
    kvio_frontend_take_t take;
    kvio_frontend_take(source->frontend, source->rank, &take);
    kvio_status_t status = take_pending(source, take.pending, now_ns);
    /* Aborts after the requests: one submitted and aborted at once is in. */
    for (size_t a = 0; a < take.num_aborts; a++) {
        live_t *live = find_live(source, take.aborts[a]);
        if (live != NULL)
            abort_live(source, live, engine_ns);
    }
    free(take.aborts);
    if (take.abort_epoch > source->abort_epoch)
        abort_all(source, take.abort_epoch, engine_ns);
    if (take.reset > 0)
        do_reset(source, take.reset);
    source->pause = take.pause;
    kvio_engine_hold_admission(source->lane->engine, take.pause == KVIO_PAUSE_NEW);
    source->closed = take.closed;
    if (status == KVIO_OK)
        status = source->status;
    publish_events(source, engine_ns);
    publish_state(source, false);
    return status;
}

/* ---------- the arrival source's ops ---------- */

static int64_t frontend_next_ns(kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                                int64_t now_ns)
{
    (void)loop;
    const frontend_arrivals_t *source = (const frontend_arrivals_t *)base;
    if (source->lane->state == KVIO_LANE_RUN)
        return INT64_MAX; /* taken at the iteration's boundary */
    if (kvio_frontend_has_work(source->frontend, source->rank))
        return now_ns;
    return source->closed ? INT64_MAX : now_ns + FRONTEND_POLL_NS;
}

static bool frontend_ended(const kvio_serve_arrivals_t *base)
{
    const frontend_arrivals_t *source = (const frontend_arrivals_t *)base;
    return source->closed && !kvio_frontend_has_work(source->frontend, source->rank);
}

static bool frontend_due(const kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                         int64_t now_ns)
{
    (void)loop;
    (void)now_ns;
    const frontend_arrivals_t *source = (const frontend_arrivals_t *)base;
    return kvio_frontend_has_work(source->frontend, source->rank);
}

static bool frontend_held(const kvio_serve_arrivals_t *base)
{
    return ((const frontend_arrivals_t *)base)->pause == KVIO_PAUSE_ALL;
}

static kvio_status_t frontend_ready(kvio_serve_arrivals_t *base, kvio_serve_lane_t *lane)
{
    (void)lane;
    frontend_arrivals_t *source = (frontend_arrivals_t *)base;
    const kvio_serve_loop_t *loop = source->loop;
    /* The engine's clock reads 0 at this host time. */
    kvio_frontend_rank_ready(source->frontend, source->rank,
                             loop->executor->origin_ns + (uint64_t)loop->origin_ns);
    publish_state(source, false);
    return KVIO_OK;
}

static kvio_status_t frontend_iteration_ended(kvio_serve_arrivals_t *base,
                                              kvio_serve_lane_t *lane)
{
    (void)lane;
    frontend_arrivals_t *source = (frontend_arrivals_t *)base;
    const kvio_serve_loop_t *loop = source->loop;
    publish_events(source, loop->executor->ops->now(loop->executor) - loop->origin_ns);
    publish_state(source, false);
    return source->status;
}

static kvio_status_t frontend_finished(kvio_serve_arrivals_t *base, kvio_serve_lane_t *lane)
{
    (void)lane;
    publish_state((frontend_arrivals_t *)base, true);
    return KVIO_OK;
}

static kvio_status_t frontend_poll(kvio_serve_arrivals_t *base, bool *wake_p)
{
    const frontend_arrivals_t *source = (const frontend_arrivals_t *)base;
    *wake_p = *wake_p || kvio_frontend_has_work(source->frontend, source->rank);
    return KVIO_OK;
}

static void frontend_nap(kvio_serve_arrivals_t *base, int64_t ns)
{
    frontend_arrivals_t *source = (frontend_arrivals_t *)base;
    kvio_frontend_nap(source->frontend, source->rank, ns);
}

static const char *frontend_error(const kvio_serve_arrivals_t *base)
{
    return ((const frontend_arrivals_t *)base)->error;
}

static const kvio_serve_arrivals_ops_t frontend_ops = {
    .next_ns = frontend_next_ns,
    .take = frontend_take,
    .ended = frontend_ended,
    .due = frontend_due,
    .ready = frontend_ready,
    .iteration_ended = frontend_iteration_ended,
    .finished = frontend_finished,
    .poll = frontend_poll,
    .error = frontend_error,
    .held = frontend_held,
    .nap = frontend_nap,
};

/* The rank's state for /metrics and the router. */
static void publish_state(frontend_arrivals_t *source, bool final)
{
    const kvio_engine_t *engine = source->lane->engine;
    const kvio_engine_metrics_t *metrics = kvio_engine_metrics(engine);
    uint32_t num_blocks = kvio_engine_num_blocks(engine);
    kvio_frontend_state_t state = {
        .running = (uint32_t)kvio_engine_running_ids(engine, NULL, 0),
        .waiting = (uint32_t)kvio_engine_waiting_ids(engine, NULL, 0),
        .kv_usage = num_blocks > 0 ? 1.0 - (double)kvio_engine_free_blocks(engine) / num_blocks
                                   : 0.0,
        .prefix_queries = metrics->prefix_queries, .prefix_hits = metrics->prefix_hits,
        .preemptions = metrics->preemptions, .prompt_tokens = source->prompt_tokens,
        .generation_tokens = source->generation_tokens, .finished = metrics->requests,
        .aborted = source->aborted};
    void *blob = NULL;
    size_t length = 0;
    if (source->routed &&
        kvio_serve_publisher_pack(&source->publisher, engine, final, &blob, &length) != KVIO_OK)
        hook_failed(source);
    kvio_frontend_publish(source->frontend, source->rank, &state, blob, length);
    free(blob);
}

/* ---------- the engine's observer calls ---------- */

void kvio_serve_frontend_arrivals_tokens(kvio_serve_frontend_arrivals_t *source, uint64_t id,
                                         uint32_t generated, int64_t end_ns)
{
    live_t *live = find_live(source, id);
    if (live == NULL || generated <= live->generated)
        return;
    /* vLLM counts a prompt's tokens once it has its first token. */
    if (live->generated == 0)
        source->prompt_tokens += live->prompt_tokens;
    source->generation_tokens += generated - live->generated;
    live->generated = generated;
    if (live->listener.on_tokens != NULL)
        live->listener.on_tokens(live->listener.context, generated, live->arrival_ns, end_ns);
}

void kvio_serve_frontend_arrivals_finished(kvio_serve_frontend_arrivals_t *source,
                                           const kvio_engine_finished_t *finished)
{
    live_t *live = find_live(source, finished->id);
    if (live == NULL)
        return;
    kvio_frontend_listener_t listener = live->listener;
    drop_live(source, live);
    if (listener.on_finish != NULL)
        listener.on_finish(listener.context, finished);
}

void kvio_serve_frontend_arrivals_received(const kvio_serve_frontend_arrivals_t *source,
                                           kvio_engine_finished_t *finished)
{
    const live_t *live = find_live(source, finished->id);
    finished->received = live != NULL
                             ? (kvio_engine_received_t){.frontend = true, .known = true,
                                                        .first_byte_ns = live->first_byte_ns,
                                                        .taken_ns = live->taken_ns}
                             : (kvio_engine_received_t){.frontend = true};
}

void kvio_serve_frontend_arrivals_note(kvio_serve_frontend_arrivals_t *source, kvio_hash_t hash,
                                       bool cached)
{
    if (source->routed)
        kvio_serve_publisher_note(&source->publisher, hash, cached);
    if (!source->with_events || source->clearing)
        return;
    if (cached)
        event_stored(source, hash);
    else
        event_simple(source, KVIO_KV_EVENT_REMOVED, hash);
}

/* ---------- lifetime ---------- */

kvio_status_t kvio_serve_frontend_arrivals_create(kvio_frontend_t *frontend, uint32_t rank,
                                                  kvio_serve_loop_t *loop,
                                                  kvio_serve_lane_t *lane,
                                                  kvio_serve_frontend_arrivals_t **source_p)
{
    if (rank >= kvio_frontend_num_ranks(frontend) ||
        kvio_frontend_block_size(frontend) != kvio_engine_block_size(lane->engine))
        return KVIO_ERR_INVALID;
    frontend_arrivals_t *source = calloc(1, sizeof(*source));
    if (source == NULL)
        return KVIO_ERR_NOMEM;
    *source = (frontend_arrivals_t){
        .base = {.ops = &frontend_ops}, .frontend = frontend, .rank = rank, .loop = loop,
        .lane = lane, .routed = kvio_frontend_num_ranks(frontend) > 1,
        .block_size = kvio_frontend_block_size(frontend),
        .with_events = kvio_frontend_events(frontend)->publish != NULL};
    *source_p = source;
    return KVIO_OK;
}

kvio_serve_arrivals_t *kvio_serve_frontend_arrivals(kvio_serve_frontend_arrivals_t *source)
{
    return &source->base;
}

void kvio_serve_frontend_arrivals_destroy(kvio_serve_frontend_arrivals_t *source)
{
    if (source == NULL)
        return;
    /* Requests still live (the run failed or was stopped): their listeners
     * hear they end here. */
    for (size_t i = 0; i < source->num_lives; i++) {
        live_t *live = &source->lives[i];
        if (!live->in_use)
            continue;
        if (live->listener.on_abort != NULL)
            live->listener.on_abort(live->listener.context, 0);
        free(live->hashes);
    }
    free(source->lives);
    kvio_map_fini(&source->live_index);
    free(source->blocks);
    free(source->block_tokens);
    kvio_map_fini(&source->block_index);
    free(source->events);
    free(source->event_token_at);
    free(source->event_tokens);
    kvio_serve_publisher_fini(&source->publisher);
    free(source);
}
