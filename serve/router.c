/* The router framework: the `serve.router` section (a router chosen by name
 * from kvio_routers, serve/routers.c), its private state, and the choice
 * over a view of the serve ranks (the engines themselves in simulate, the
 * state the ranks publish in emulate). Ties go to the lower rank. For a
 * router with an index (kv_events) the framework holds the ranks' KV
 * events until event_lag has passed, and checks each indexed route
 * against the ranks' caches (stale routes). */
#include "serve/serve_int.h"

#include "kvio/array.h"

#include <stdlib.h>
#include <string.h>

const kvio_opt_t kvio_router_options[] = {
    {.key = "policy", .type = KVIO_OPT_PLUGIN, .offset = offsetof(kvio_router_config_t, policy),
     .registry = &kvio_routers, .default_value = "round_robin",
     .help = "how requests are spread over serve ranks"},
    {.key = "event_lag", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_router_config_t, event_lag_ns), .default_value = "0s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "how late a rank's KV events (BlockStored, BlockRemoved) reach a router that "
             "hears them (kv_events): simulate's virtual clock, emulate's real one"},
    {.key = NULL},
};

/* A KV event on its way to the index. */
typedef struct pending_event {
    int64_t due_ns;
    kvio_hash_t hash;
    uint32_t rank;
    bool stored;
} pending_event_t;

struct kvio_router {
    const kvio_router_ops_t *ops;
    const void *options; /* borrowed from the config */
    void *state;         /* ops->state_size bytes, zeroed */
    int64_t event_lag_ns;
    pending_event_t *pending; /* [head, tail) wait for their due time, in order */
    size_t head, tail, capacity;
    kvio_router_stats_t stats;
};

kvio_status_t kvio_router_create(const kvio_router_config_t *config, kvio_router_t **router_p)
{
    if (config->policy.plugin == NULL)
        return KVIO_ERR_INVALID;
    kvio_router_t *router = calloc(1, sizeof(*router));
    if (router == NULL)
        return KVIO_ERR_NOMEM;
    router->ops = (const kvio_router_ops_t *)config->policy.plugin;
    router->options = kvio_choice_options(&config->policy);
    router->event_lag_ns = config->event_lag_ns;
    if (router->ops->state_size > 0 &&
        (router->state = calloc(1, router->ops->state_size)) == NULL) {
        free(router);
        return KVIO_ERR_NOMEM;
    }
    *router_p = router;
    return KVIO_OK;
}

void kvio_router_destroy(kvio_router_t *router)
{
    if (router == NULL)
        return;
    if (router->ops->fini != NULL && router->state != NULL)
        router->ops->fini(router->state);
    free(router->state);
    free(router->pending);
    free(router);
}

bool kvio_router_hears_events(const kvio_router_t *router)
{
    return (router->ops->caps & KVIO_ROUTER_CAP_HEARS_EVENTS) != 0;
}

static void router_failed(kvio_router_t *router, kvio_status_t status)
{
    if (router->stats.status == KVIO_OK)
        router->stats.status = status;
}

/* Room for one more pending event: the delivered ones' room is reused
 * first, then the queue doubles. */
static bool pending_room(kvio_router_t *router)
{
    if (router->tail < router->capacity)
        return true;
    if (router->head > 0) {
        memmove(router->pending, router->pending + router->head,
                (router->tail - router->head) * sizeof(*router->pending));
        router->tail -= router->head;
        router->head = 0;
        if (router->tail < router->capacity)
            return true;
    }
    return kvio_array_reserve((void **)&router->pending, &router->capacity, router->tail + 1,
                              sizeof(*router->pending), 1024) == KVIO_OK;
}

static void deliver(kvio_router_t *router, const pending_event_t *event)
{
    kvio_status_t status = router->ops->on_event(router->state, event->rank, event->hash,
                                                 event->stored);
    if (status != KVIO_OK)
        router_failed(router, status);
    router->stats.events++;
}

/* The events due by now_ns into the index. */
static void deliver_due(kvio_router_t *router, int64_t now_ns)
{
    while (router->head < router->tail && router->pending[router->head].due_ns <= now_ns)
        deliver(router, &router->pending[router->head++]);
    if (router->head == router->tail)
        router->head = router->tail = 0;
}

void kvio_router_event(kvio_router_t *router, uint32_t rank, kvio_hash_t hash, bool stored,
                       int64_t now_ns)
{
    if (!kvio_router_hears_events(router))
        return;
    pending_event_t event = {.due_ns = now_ns + router->event_lag_ns, .hash = hash,
                             .rank = rank, .stored = stored};
    if (router->event_lag_ns == 0 && router->head == router->tail) {
        deliver(router, &event); /* no lag: the index is the ranks' caches */
        return;
    }
    if (!pending_room(router)) {
        router_failed(router, KVIO_ERR_NOMEM);
        return;
    }
    router->pending[router->tail++] = event;
}

void kvio_router_stats(const kvio_router_t *router, kvio_router_stats_t *stats_p)
{
    *stats_p = router->stats;
    stats_p->indexed = (router->ops->caps & KVIO_ROUTER_CAP_INDEX) != 0;
    stats_p->hears_events = kvio_router_hears_events(router);
    stats_p->event_lag_ns = stats_p->hears_events ? router->event_lag_ns : 0;
    if (stats_p->status == KVIO_OK && router->ops->status != NULL)
        stats_p->status = router->ops->status(router->state);
}

void kvio_router_stats_fill(kvio_result_t *result, const kvio_router_stats_t *stats)
{
    if (!stats->indexed)
        return;
    if (stats->hears_events) {
        kvio_result_set(result, KVIO_FIG_ROUTING_EVENT_LAG_MS, (double)stats->event_lag_ns / 1e6);
        kvio_result_set(result, KVIO_FIG_ROUTING_EVENTS, (double)stats->events);
    }
    kvio_result_set(result, KVIO_FIG_ROUTING_DECISIONS, (double)stats->decisions);
    kvio_result_set(result, KVIO_FIG_ROUTING_INDEXED_ROUTES, (double)stats->indexed_routes);
    kvio_result_set(result, KVIO_FIG_ROUTING_STALE_ROUTES, (double)stats->stale_routes);
}

void kvio_router_fill(kvio_result_t *result, const kvio_router_t *router)
{
    if (router == NULL)
        return;
    kvio_router_stats_t stats;
    kvio_router_stats(router, &stats);
    kvio_router_stats_fill(result, &stats);
}

const char *kvio_router_name(const kvio_router_t *router)
{
    return router->ops->plugin.name;
}

bool kvio_router_reads_hashes(const kvio_router_t *router, uint32_t num_ranks)
{
    return num_ranks > 1 && (router->ops->caps & KVIO_ROUTER_CAP_READS_HASHES) != 0;
}

uint32_t kvio_router_choose_view(kvio_router_t *router, const kvio_router_view_t *view,
                                 uint32_t num_ranks, const kvio_engine_request_t *request)
{
    if (num_ranks <= 1)
        return 0;
    if (kvio_router_hears_events(router))
        deliver_due(router, view->now_ns);
    size_t indexed_blocks = 0;
    kvio_router_call_t call = {.options = router->options, .state = router->state,
                               .view = view, .count = num_ranks, .request = request,
                               .indexed_blocks_p = &indexed_blocks};
    uint32_t rank = router->ops->choose(&call);
    router->stats.decisions++;
    if (indexed_blocks > 0) {
        /* What the rank holds now, against what the index said. */
        size_t held = view->cached_prefix(view->context, rank, request->hashes,
                                          request->num_hashes, request->prompt_tokens);
        router->stats.indexed_routes++;
        if (held / view->block_size < indexed_blocks)
            router->stats.stale_routes++;
    }
    return rank;
}

/* The engines as a view (simulate: the router reads them directly). */
static uint32_t engine_load(void *context, uint32_t rank)
{
    return kvio_engine_load(((kvio_engine_t *const *)context)[rank]);
}

static size_t engine_cached_prefix(void *context, uint32_t rank, const kvio_hash_t *hashes,
                                   size_t num_hashes, uint32_t prompt_tokens)
{
    return kvio_engine_cached_prefix(((kvio_engine_t *const *)context)[rank], hashes,
                                     num_hashes, prompt_tokens);
}

static uint64_t engine_active_decode_blocks(void *context, uint32_t rank)
{
    return kvio_engine_active_decode_blocks(((kvio_engine_t *const *)context)[rank]);
}

static uint32_t engine_free_blocks(void *context, uint32_t rank)
{
    return kvio_engine_free_blocks(((kvio_engine_t *const *)context)[rank]);
}

uint32_t kvio_router_choose(kvio_router_t *router, kvio_engine_t *const *engines,
                            uint32_t num_engines, const kvio_engine_request_t *request,
                            int64_t now_ns)
{
    if (num_engines <= 1)
        return 0;
    kvio_router_view_t view = {.context = (void *)engines,
                               .block_size = kvio_engine_block_size(engines[0]),
                               .load = engine_load,
                               .cached_prefix = engine_cached_prefix,
                               .active_decode_blocks = engine_active_decode_blocks,
                               .free_blocks = engine_free_blocks,
                               .now_ns = now_ns};
    return kvio_router_choose_view(router, &view, num_engines, request);
}

uint32_t kvio_router_pick_least_loaded(const kvio_router_view_t *view, uint32_t count)
{
    uint32_t best = 0, best_load = view->load(view->context, 0);
    for (uint32_t rank = 1; rank < count; rank++) {
        uint32_t load = view->load(view->context, rank);
        if (load < best_load) {
            best = rank;
            best_load = load;
        }
    }
    return best;
}

uint64_t kvio_router_block_key(kvio_hash_t hash)
{
    return hash.low ^ (hash.high * 0x9e3779b97f4a7c15ull);
}

size_t kvio_router_prefix_blocks(const kvio_engine_request_t *request, uint32_t block_size,
                                 kvio_router_holds_t holds, const void *index, uint32_t rank)
{
    if (request->prompt_tokens == 0 || request->hashes == NULL)
        return 0;
    size_t limit = (request->prompt_tokens - 1) / block_size;
    if (limit > request->num_hashes)
        limit = request->num_hashes;
    size_t blocks = 0;
    while (blocks < limit && holds(index, rank, kvio_router_block_key(request->hashes[blocks])))
        blocks++;
    return blocks;
}

uint32_t kvio_router_pick_longest_prefix(const kvio_router_call_t *call,
                                         kvio_router_holds_t holds, const void *index,
                                         size_t *blocks_p)
{
    const kvio_router_view_t *view = call->view;
    uint32_t best = 0, best_load = UINT32_MAX;
    size_t best_blocks = 0;
    for (uint32_t rank = 0; rank < call->count; rank++) {
        size_t blocks = kvio_router_prefix_blocks(call->request, view->block_size, holds, index,
                                                  rank);
        uint32_t load = view->load(view->context, rank);
        if (blocks > best_blocks || (blocks == best_blocks && load < best_load)) {
            best = rank;
            best_blocks = blocks;
            best_load = load;
        }
    }
    *blocks_p = best_blocks;
    return best;
}
