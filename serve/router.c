/* The router framework: the `serve.router` section (a router chosen by name
 * from kvio_routers, serve/routers.c), its private state, and the choice
 * over a view of the serve ranks (the engines themselves in simulate, the
 * state the ranks publish in emulate). Ties go to the lower rank. */
#include "serve/serve_int.h"

#include <stdlib.h>

const kvio_opt_t kvio_router_options[] = {
    {.key = "policy", .type = KVIO_OPT_PLUGIN, .offset = offsetof(kvio_router_config_t, policy),
     .registry = &kvio_routers, .default_value = "round_robin",
     .help = "how requests are spread over serve ranks"},
    {.key = NULL},
};

struct kvio_router {
    const kvio_router_ops_t *ops;
    const void *options; /* borrowed from the config */
    void *state;         /* ops->state_size bytes, zeroed */
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
    free(router->state);
    free(router);
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
    kvio_router_call_t call = {.options = router->options, .state = router->state,
                               .view = view, .count = num_ranks, .request = request};
    return router->ops->choose(&call);
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
                            uint32_t num_engines, const kvio_engine_request_t *request)
{
    if (num_engines <= 1)
        return 0;
    kvio_router_view_t view = {.context = (void *)engines,
                               .block_size = kvio_engine_block_size(engines[0]),
                               .load = engine_load,
                               .cached_prefix = engine_cached_prefix,
                               .active_decode_blocks = engine_active_decode_blocks,
                               .free_blocks = engine_free_blocks};
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
