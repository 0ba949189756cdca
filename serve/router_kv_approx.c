/* kv_approx: llm-d's approximate prefix-cache scorer. It hears nothing from
 * the ranks: it predicts their caches from its own routing history, an LRU
 * per rank of the block hashes of the prompts it sent there (llm-d's
 * approx-prefix-cache-producer: an in-memory LRU index of recently routed
 * prefix hashes, lruCapacityPerServer blocks per pod, its default 31,250).
 * A rank scores the run of the request's blocks, from the first, that its
 * LRU holds; the longest wins, equal ones go to the less loaded, none: the
 * least loaded. The chosen rank's LRU then takes the prompt's blocks. Its
 * routes are checked as kv_events' are (a predicted prefix the rank does
 * not hold is a stale route: evicted, or never cached). */
#include "serve/serve_int.h"

#include <stdlib.h>
#include <string.h>

#include "kvio/array.h"
#include "kvio/hashset.h"

typedef struct approx_options {
    int64_t capacity;
} approx_options_t;

static const kvio_opt_t approx_options[] = {
    {.key = "capacity", .type = KVIO_OPT_INT, .offset = offsetof(approx_options_t, capacity),
     .default_value = "31250", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1,
     .max = 1 << 30,
     .help = "blocks the router remembers per rank (llm-d's lruCapacityPerServer; the ranks' "
             "pool size predicts best)"},
    {.key = NULL},
};

/* A touch of a block: its key and the stamp it got. */
typedef struct touch {
    uint64_t key;
    uint32_t stamp;
} touch_t;

/* One rank's LRU: each key's latest stamp, and the touches oldest first
 * in [head, tail) (a key touched again leaves its older touch behind, stale:
 * skipped when it reaches the head, dropped when the array is compacted). */
typedef struct rank_lru {
    kvio_map_t stamps;
    touch_t *touches;
    size_t head, tail, capacity;
    size_t live;     /* keys held */
    uint32_t clock;  /* the last stamp given */
} rank_lru_t;

typedef struct approx_index {
    rank_lru_t *ranks;
    uint32_t num_ranks;
    kvio_status_t status; /* the first failure to remember */
} approx_index_t;

static bool touch_live(const rank_lru_t *lru, const touch_t *touch)
{
    return kvio_map_get(&lru->stamps, touch->key) == touch->stamp;
}

/* Room for one more touch: the stale ones dropped first, then the array
 * doubles when it stays more than half full. */
static kvio_status_t touches_room(rank_lru_t *lru)
{
    if (lru->tail < lru->capacity)
        return KVIO_OK;
    size_t kept = 0;
    for (size_t i = lru->head; i < lru->tail; i++)
        if (touch_live(lru, &lru->touches[i]))
            lru->touches[kept++] = lru->touches[i];
    lru->head = 0;
    lru->tail = kept;
    if (kept < lru->capacity / 2)
        return KVIO_OK;
    return kvio_array_reserve((void **)&lru->touches, &lru->capacity, lru->capacity + 1,
                              sizeof(*lru->touches), 1024);
}

/* key becomes the rank's most recent; the least recent go past limit. */
static kvio_status_t lru_touch(rank_lru_t *lru, uint64_t key, size_t limit)
{
    kvio_status_t status = touches_room(lru);
    if (status != KVIO_OK)
        return status;
    if (++lru->clock == 0)
        lru->clock = 1; /* 0 is the map's "absent" */
    bool held = kvio_map_get(&lru->stamps, key) != 0;
    if ((status = kvio_map_set(&lru->stamps, key, lru->clock)) != KVIO_OK)
        return status;
    lru->touches[lru->tail++] = (touch_t){.key = key, .stamp = lru->clock};
    lru->live += !held;
    while (lru->live > limit && lru->head < lru->tail) {
        const touch_t *oldest = &lru->touches[lru->head++];
        if (touch_live(lru, oldest)) {
            kvio_map_set(&lru->stamps, oldest->key, 0);
            lru->live--;
        }
    }
    return KVIO_OK;
}

/* Whether rank's LRU holds key. */
static bool lru_holds(const void *state, uint32_t rank, uint64_t key)
{
    const approx_index_t *index = state;
    return rank < index->num_ranks && kvio_map_get(&index->ranks[rank].stamps, key) != 0;
}

/* The chosen rank remembers the prompt's full blocks, the last first: the
 * head of a prefix is then the most recent and the last to go, as a cache
 * keeps a chain's parents longest (llm-d adds them in order). */
static void remember(approx_index_t *index, const approx_options_t *options, uint32_t rank,
                     uint32_t count, const kvio_engine_request_t *request, uint32_t block_size)
{
    if (index->status != KVIO_OK || request->hashes == NULL)
        return;
    if (index->num_ranks < count) {
        rank_lru_t *bigger = realloc(index->ranks, count * sizeof(*bigger));
        if (bigger == NULL) {
            index->status = KVIO_ERR_NOMEM;
            return;
        }
        memset(bigger + index->num_ranks, 0, (count - index->num_ranks) * sizeof(*bigger));
        index->ranks = bigger;
        index->num_ranks = count;
    }
    size_t blocks = request->prompt_tokens / block_size;
    if (blocks > request->num_hashes)
        blocks = request->num_hashes;
    rank_lru_t *lru = &index->ranks[rank];
    for (size_t b = blocks; b > 0 && index->status == KVIO_OK; b--)
        index->status = lru_touch(lru, kvio_router_block_key(request->hashes[b - 1]),
                                  (size_t)options->capacity);
}

static uint32_t longest_remembered_prefix(const kvio_router_call_t *call)
{
    approx_index_t *index = call->state;
    uint32_t best = kvio_router_pick_longest_prefix(call, lru_holds, index,
                                                    call->indexed_blocks_p);
    remember(index, call->options, best, call->count, call->request, call->view->block_size);
    return best;
}

static kvio_status_t approx_status(const void *state)
{
    return ((const approx_index_t *)state)->status;
}

static void approx_fini(void *state)
{
    approx_index_t *index = state;
    for (uint32_t r = 0; r < index->num_ranks; r++) {
        kvio_map_fini(&index->ranks[r].stamps);
        free(index->ranks[r].touches);
    }
    free(index->ranks);
}

const kvio_router_ops_t kvio_router_kv_approx = {
    .plugin = {.name = "kv_approx",
               .help = "the longest prefix in an LRU per rank of the prompts it routed there "
                       "(llm-d's approximate scorer: no events)",
               .options = approx_options, .options_size = sizeof(approx_options_t)},
    .caps = KVIO_ROUTER_CAP_READS_HASHES | KVIO_ROUTER_CAP_INDEX,
    .state_size = sizeof(approx_index_t),
    .choose = longest_remembered_prefix,
    .status = approx_status,
    .fini = approx_fini,
};
