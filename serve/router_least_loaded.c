/* least_loaded: the rank with the fewest requests waiting and running. */
#include "serve/serve_int.h"

static uint32_t fewest_requests(const kvio_router_call_t *call)
{
    return kvio_router_pick_least_loaded(call->view, call->count);
}

const kvio_router_ops_t kvio_router_least_loaded = {
    .plugin = {.name = "least_loaded", .help = "the rank with the fewest requests",
               .options = kvio_no_options},
    .choose = fewest_requests,
};
