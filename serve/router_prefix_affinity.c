/* prefix_affinity: the rank with the longest cached prefix of the prompt
 * among those at most load_cap requests above the least loaded (the least
 * loaded when no rank holds any of it; equal prefixes: the less loaded). */
#include "serve/serve_int.h"

typedef struct affinity_options {
    int64_t load_cap;
} affinity_options_t;

static const kvio_opt_t affinity_options[] = {
    {.key = "load_cap", .type = KVIO_OPT_INT, .offset = offsetof(affinity_options_t, load_cap),
     .default_value = "16", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "most requests a rank may have above the least loaded"},
    {.key = NULL},
};

static uint32_t longest_cached_prefix(const kvio_router_call_t *call)
{
    const affinity_options_t *options = call->options;
    const kvio_router_view_t *view = call->view;
    const kvio_engine_request_t *request = call->request;
    uint32_t least = kvio_router_pick_least_loaded(view, call->count);
    uint32_t min_load = view->load(view->context, least);
    uint32_t best = least, best_load = min_load;
    size_t best_prefix = 0;
    for (uint32_t rank = 0; rank < call->count; rank++) {
        uint32_t load = view->load(view->context, rank);
        if ((int64_t)load - min_load > options->load_cap)
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

const kvio_router_ops_t kvio_router_prefix_affinity = {
    .plugin = {.name = "prefix_affinity",
               .help = "the longest cached prefix among ranks within a load cap",
               .options = affinity_options, .options_size = sizeof(affinity_options_t)},
    .caps = KVIO_ROUTER_CAP_READS_HASHES,
    .choose = longest_cached_prefix,
};
