/* free_kv: the rank with the most KV blocks free once it holds the request
 * (its free blocks less the prompt's blocks it has not cached), then the
 * fewest requests: a decode pool's choice that balances KV memory and moves
 * nothing it already holds (Mooncake's conductor picks its decode instance
 * by KV and load). Where the view does not know free blocks, the least
 * loaded. */
#include "serve/serve_int.h"

static uint32_t most_free(const kvio_router_call_t *call)
{
    const kvio_router_view_t *view = call->view;
    if (view->free_blocks == NULL)
        return kvio_router_pick_least_loaded(view, call->count);
    const kvio_engine_request_t *request = call->request;
    uint32_t block = view->block_size > 0 ? view->block_size : 1;
    uint32_t best = 0;
    int64_t best_left = INT64_MIN;
    uint32_t best_load = UINT32_MAX;
    for (uint32_t rank = 0; rank < call->count; rank++) {
        size_t cached = view->cached_prefix(view->context, rank, request->hashes,
                                            request->num_hashes, request->prompt_tokens);
        int64_t needed = ((int64_t)request->prompt_tokens - (int64_t)cached + block - 1) / block;
        int64_t left = (int64_t)view->free_blocks(view->context, rank) - needed;
        uint32_t load = view->load(view->context, rank);
        if (left > best_left || (left == best_left && load < best_load)) {
            best = rank;
            best_left = left;
            best_load = load;
        }
    }
    return best;
}

const kvio_router_ops_t kvio_router_free_kv = {
    .plugin = {.name = "free_kv",
               .help = "the most KV blocks free once it holds the request (uncached prompt "
                       "blocks counted), then the fewest requests",
               .options = kvio_no_options},
    .caps = KVIO_ROUTER_CAP_READS_HASHES,
    .choose = most_free,
};
