/* Routers that spread requests over serve ranks, from what a view shows of
 * them (the engines in simulate, the state ranks publish in emulate):
 * round_robin, least_loaded, prefix_affinity (longest cached prefix among
 * ranks within a load cap) and kv_cost (uncached prefill blocks plus active
 * decode blocks; lowest wins). Ties go to the lower rank. */
#include "kvio/serve.h"

#include <stdlib.h>

typedef struct router_ops {
    const char *name;
    uint32_t (*choose)(kvio_router_t *router, const kvio_router_view_t *view, uint32_t count,
                       const kvio_engine_request_t *request);
} router_ops_t;

struct kvio_router {
    kvio_router_config_t config;
    const router_ops_t *ops;
    uint64_t next; /* round_robin */
};

static uint32_t choose_round_robin(kvio_router_t *router, const kvio_router_view_t *view,
                                   uint32_t count, const kvio_engine_request_t *request)
{
    (void)view;
    (void)request;
    return (uint32_t)(router->next++ % count);
}

static uint32_t choose_least_loaded(kvio_router_t *router, const kvio_router_view_t *view,
                                    uint32_t count, const kvio_engine_request_t *request)
{
    (void)router;
    (void)request;
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

static uint32_t choose_prefix_affinity(kvio_router_t *router, const kvio_router_view_t *view,
                                       uint32_t count, const kvio_engine_request_t *request)
{
    uint32_t least = choose_least_loaded(router, view, count, request);
    uint32_t min_load = view->load(view->context, least);
    uint32_t best = least, best_load = min_load;
    size_t best_prefix = 0;
    for (uint32_t rank = 0; rank < count; rank++) {
        uint32_t load = view->load(view->context, rank);
        if ((int64_t)load - min_load > router->config.load_cap)
            continue;
        size_t prefix = view->cached_prefix(view->context, rank, request->hashes,
                                            request->num_hashes, request->prompt_tokens);
        if (prefix > best_prefix || (prefix == best_prefix && prefix > 0 && load < best_load)) {
            best = rank;
            best_prefix = prefix;
            best_load = load;
        }
    }
    return best;
}

static uint32_t choose_kv_cost(kvio_router_t *router, const kvio_router_view_t *view,
                               uint32_t count, const kvio_engine_request_t *request)
{
    (void)router;
    uint32_t best = 0;
    uint64_t best_cost = UINT64_MAX, block_size = view->block_size;
    uint64_t prompt_blocks = (request->prompt_tokens + block_size - 1) / block_size;
    for (uint32_t rank = 0; rank < count; rank++) {
        /* A rank whose running blocks alone reach the best cost cannot
         * beat it: its prefix is not searched. */
        uint64_t active = view->active_decode_blocks(view->context, rank);
        if (active >= best_cost)
            continue;
        size_t cached = view->cached_prefix(view->context, rank, request->hashes,
                                            request->num_hashes, request->prompt_tokens);
        uint64_t uncached = prompt_blocks - cached / block_size;
        uint64_t cost = uncached + active;
        if (cost < best_cost) {
            best_cost = cost;
            best = rank;
        }
    }
    return best;
}

static const router_ops_t router_registry[] = {
    [KVIO_ROUTER_ROUND_ROBIN] = {.name = "round_robin", .choose = choose_round_robin},
    [KVIO_ROUTER_LEAST_LOADED] = {.name = "least_loaded", .choose = choose_least_loaded},
    [KVIO_ROUTER_PREFIX_AFFINITY] = {.name = "prefix_affinity", .choose = choose_prefix_affinity},
    [KVIO_ROUTER_KV_COST] = {.name = "kv_cost", .choose = choose_kv_cost},
};

kvio_status_t kvio_router_create(const kvio_router_config_t *config, kvio_router_t **router_p)
{
    if (config->policy < 0 || config->policy > KVIO_ROUTER_KV_COST)
        return KVIO_ERR_INVALID;
    kvio_router_t *router = calloc(1, sizeof(*router));
    if (router == NULL)
        return KVIO_ERR_NOMEM;
    router->config = *config;
    router->ops = &router_registry[config->policy];
    *router_p = router;
    return KVIO_OK;
}

void kvio_router_destroy(kvio_router_t *router)
{
    free(router);
}

const char *kvio_router_name(const kvio_router_t *router)
{
    return router->ops->name;
}

uint32_t kvio_router_choose_view(kvio_router_t *router, const kvio_router_view_t *view,
                                 uint32_t num_ranks, const kvio_engine_request_t *request)
{
    if (num_ranks <= 1)
        return 0;
    return router->ops->choose(router, view, num_ranks, request);
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

uint32_t kvio_router_choose(kvio_router_t *router, kvio_engine_t *const *engines,
                            uint32_t num_engines, const kvio_engine_request_t *request)
{
    if (num_engines <= 1)
        return 0;
    kvio_router_view_t view = {.context = (void *)engines,
                               .block_size = kvio_engine_block_size(engines[0]),
                               .load = engine_load,
                               .cached_prefix = engine_cached_prefix,
                               .active_decode_blocks = engine_active_decode_blocks};
    return kvio_router_choose_view(router, &view, num_engines, request);
}
