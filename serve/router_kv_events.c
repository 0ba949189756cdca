/* kv_events: a fleet index of which serve rank holds which KV block, fed
 * only by the ranks' BlockStored / BlockRemoved events (the framework,
 * serve/router.c, delivers them serve.router.event_lag late), as llm-d's
 * KV-cache indexer (llm-d-kv-cache-manager) builds it from vLLM's KVEvents.
 * score: prefix is llm-d's precise-prefix-cache-scorer: a rank scores the
 * run of the request's blocks, from the first, that the index says it holds
 * (llm-d normalises it by the request's blocks, which ranks the same); the
 * longest wins, equal ones go to the less loaded (llm-d weighs it with a
 * load scorer), and with no prefix anywhere the least loaded. score: cost
 * is Dynamo's KV router cost on the same index: overlap_weight x the
 * prefill blocks the rank lacks + the decode blocks it runs, lowest wins
 * (Dynamo docs, "KV Router": kv-overlap-score-weight, temperature 0). */
#include "serve/serve_int.h"

#include <stdlib.h>

#include "kvio/hashset.h"

enum { SCORE_PREFIX, SCORE_COST };

typedef struct kv_events_options {
    int score;
    double overlap_weight;
} kv_events_options_t;

static const char *const score_names[] = {"prefix", "cost", NULL};

static const kvio_opt_t kv_events_options[] = {
    {.key = "score", .type = KVIO_OPT_ENUM, .offset = offsetof(kv_events_options_t, score),
     .values = score_names, .default_value = "prefix",
     .help = "prefix: the longest indexed prefix, ties to the less loaded (llm-d's precise "
             "prefix-cache scorer); cost: overlap_weight x uncached prefill blocks + decode "
             "blocks, lowest (Dynamo's KV router)"},
    {.key = "overlap_weight", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kv_events_options_t, overlap_weight), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "score: cost only: the weight of the prefill blocks (Dynamo's "
             "kv-overlap-score-weight)"},
    {.key = NULL},
};

/* Per rank, the blocks its events say it holds: a block hash's key to how
 * many of the rank's blocks hold it (a pool may hold one hash twice). */
typedef struct fleet_index {
    kvio_map_t *ranks;
    uint32_t num_ranks;
} fleet_index_t;

static kvio_status_t index_event(void *state, uint32_t rank, kvio_hash_t hash, bool stored)
{
    fleet_index_t *index = state;
    if (rank >= index->num_ranks) {
        if (!stored)
            return KVIO_OK; /* a rank never heard of holds nothing to remove */
        kvio_map_t *bigger = realloc(index->ranks, (size_t)(rank + 1) * sizeof(*bigger));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        for (uint32_t r = index->num_ranks; r <= rank; r++)
            bigger[r] = (kvio_map_t){0};
        index->ranks = bigger;
        index->num_ranks = rank + 1;
    }
    kvio_map_t *map = &index->ranks[rank];
    uint64_t key = kvio_router_block_key(hash);
    uint32_t count = kvio_map_get(map, key);
    if (!stored)
        return count > 0 ? kvio_map_set(map, key, count - 1) : KVIO_OK;
    return kvio_map_set(map, key, count + 1);
}

/* Whether the events say rank holds key. */
static bool index_holds(const void *state, uint32_t rank, uint64_t key)
{
    const fleet_index_t *index = state;
    return rank < index->num_ranks && kvio_map_get(&index->ranks[rank], key) > 0;
}

static uint32_t lowest_indexed_cost(const kvio_router_call_t *call, size_t *blocks_p)
{
    const kv_events_options_t *options = call->options;
    const kvio_router_view_t *view = call->view;
    uint32_t block_size = view->block_size;
    double prompt_blocks = (double)((call->request->prompt_tokens + block_size - 1) / block_size);
    uint32_t best = 0;
    double best_cost = 0;
    size_t best_blocks = 0;
    for (uint32_t rank = 0; rank < call->count; rank++) {
        size_t blocks = kvio_router_prefix_blocks(call->request, block_size, index_holds,
                                                  call->state, rank);
        double cost = options->overlap_weight * (prompt_blocks - (double)blocks) +
                      (double)view->active_decode_blocks(view->context, rank);
        if (rank == 0 || cost < best_cost) {
            best = rank;
            best_cost = cost;
            best_blocks = blocks;
        }
    }
    *blocks_p = best_blocks;
    return best;
}

static uint32_t choose_from_index(const kvio_router_call_t *call)
{
    const kv_events_options_t *options = call->options;
    return options->score == SCORE_COST
               ? lowest_indexed_cost(call, call->indexed_blocks_p)
               : kvio_router_pick_longest_prefix(call, index_holds, call->state,
                                                 call->indexed_blocks_p);
}

static void index_fini(void *state)
{
    fleet_index_t *index = state;
    for (uint32_t r = 0; r < index->num_ranks; r++)
        kvio_map_fini(&index->ranks[r]);
    free(index->ranks);
}

const kvio_router_ops_t kvio_router_kv_events = {
    .plugin = {.name = "kv_events",
               .help = "the longest prefix in a fleet index fed by the ranks' KV events "
                       "(llm-d's precise scorer; score: cost for Dynamo's formula)",
               .options = kv_events_options, .options_size = sizeof(kv_events_options_t)},
    .caps = KVIO_ROUTER_CAP_READS_HASHES | KVIO_ROUTER_CAP_HEARS_EVENTS | KVIO_ROUTER_CAP_INDEX,
    .state_size = sizeof(fleet_index_t),
    .choose = choose_from_index,
    .on_event = index_event,
    .fini = index_fini,
};
