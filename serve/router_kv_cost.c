/* kv_cost (a KV-aware router like Dynamo's): the rank with the lowest cost,
 * prefill blocks it has not cached plus the decode blocks it runs; a rank
 * whose running blocks alone reach the best cost is not searched. */
#include "serve/serve_int.h"

static uint32_t lowest_kv_cost(const kvio_router_call_t *call)
{
    const kvio_router_view_t *view = call->view;
    const kvio_engine_request_t *request = call->request;
    uint32_t best = 0;
    uint64_t best_cost = UINT64_MAX, block_size = view->block_size;
    uint64_t prompt_blocks = (request->prompt_tokens + block_size - 1) / block_size;
    for (uint32_t rank = 0; rank < call->count; rank++) {
        uint64_t active = view->active_decode_blocks(view->context, rank);
        if (active >= best_cost)
            continue;
        size_t cached = view->cached_prefix(view->context, rank, request->hashes,
                                            request->num_hashes, request->prompt_tokens);
        uint64_t cost = prompt_blocks - cached / block_size + active;
        if (cost < best_cost) {
            best_cost = cost;
            best = rank;
        }
    }
    return best;
}

const kvio_router_ops_t kvio_router_kv_cost = {
    .plugin = {.name = "kv_cost", .help = "fewest uncached prefill blocks plus decode blocks",
               .options = kvio_no_options},
    .caps = KVIO_ROUTER_CAP_READS_HASHES,
    .choose = lowest_kv_cost,
};
