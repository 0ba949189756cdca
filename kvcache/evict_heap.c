/* Priority-ordered eviction policies on an indexed binary min-heap: lfu
 * (fewest hits first, ties by least recent use) and fifo (oldest content
 * first; hits and releases do not refresh it). O(log n) per operation. */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

struct heap_policy {
    uint32_t *heap;      /* entries, heap-ordered by (count, stamp) */
    uint32_t size;
    uint32_t *position;  /* entry -> index in heap, KVIO_EVICT_NONE if absent */
    uint32_t *count;     /* lfu: hits since the content arrived; fifo: 0 */
    uint64_t *stamp;     /* lfu: last use; fifo: arrival */
    uint64_t clock;
    bool count_hits;     /* lfu */
};

static bool heap_less(const struct heap_policy *policy, uint32_t a, uint32_t b)
{
    if (policy->count[a] != policy->count[b])
        return policy->count[a] < policy->count[b];
    return policy->stamp[a] < policy->stamp[b];
}

static void heap_place(struct heap_policy *policy, uint32_t index, uint32_t entry)
{
    policy->heap[index] = entry;
    policy->position[entry] = index;
}

static void sift_up(struct heap_policy *policy, uint32_t index)
{
    uint32_t entry = policy->heap[index];
    while (index > 0) {
        uint32_t parent = (index - 1) / 2;
        if (!heap_less(policy, entry, policy->heap[parent]))
            break;
        heap_place(policy, index, policy->heap[parent]);
        index = parent;
    }
    heap_place(policy, index, entry);
}

static void sift_down(struct heap_policy *policy, uint32_t index)
{
    uint32_t entry = policy->heap[index];
    for (;;) {
        uint32_t child = 2 * index + 1;
        if (child >= policy->size)
            break;
        if (child + 1 < policy->size && heap_less(policy, policy->heap[child + 1], policy->heap[child]))
            child++;
        if (!heap_less(policy, policy->heap[child], entry))
            break;
        heap_place(policy, index, policy->heap[child]);
        index = child;
    }
    heap_place(policy, index, entry);
}

static kvio_status_t heap_init_common(struct heap_policy *policy, uint32_t num_entries)
{
    size_t n = num_entries ? num_entries : 1;
    policy->heap = malloc(sizeof(uint32_t) * n);
    policy->position = malloc(sizeof(uint32_t) * n);
    policy->count = calloc(n, sizeof(uint32_t));
    policy->stamp = calloc(n, sizeof(uint64_t));
    if (policy->heap == NULL || policy->position == NULL || policy->count == NULL ||
        policy->stamp == NULL) {
        free(policy->heap);
        free(policy->position);
        free(policy->count);
        free(policy->stamp);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        policy->position[i] = KVIO_EVICT_NONE;
    return KVIO_OK;
}

static kvio_status_t lfu_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    struct heap_policy *policy = priv;
    policy->count_hits = true;
    return heap_init_common(policy, num_entries);
}

static kvio_status_t fifo_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    return heap_init_common(priv, num_entries);
}

static void heap_fini(void *priv)
{
    struct heap_policy *policy = priv;
    free(policy->heap);
    free(policy->position);
    free(policy->count);
    free(policy->stamp);
}

static void heap_add(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    struct heap_policy *policy = priv;
    if (fresh) {
        policy->count[entry] = 0;
        policy->stamp[entry] = ++policy->clock;
    }
    policy->heap[policy->size] = entry;
    policy->size++;
    sift_up(policy, policy->size - 1);
}

static void heap_remove(void *priv, uint32_t entry)
{
    struct heap_policy *policy = priv;
    uint32_t index = policy->position[entry];
    if (index == KVIO_EVICT_NONE)
        return;
    policy->position[entry] = KVIO_EVICT_NONE;
    policy->size--;
    if (index == policy->size)
        return;
    uint32_t moved = policy->heap[policy->size];
    heap_place(policy, index, moved);
    sift_down(policy, index);
    sift_up(policy, policy->position[moved]);
}

/* lfu: a hit counts and refreshes recency; the key only grows, so the
 * entry can only move down. */
static void lfu_access(void *priv, uint32_t entry)
{
    struct heap_policy *policy = priv;
    policy->count[entry]++;
    policy->stamp[entry] = ++policy->clock;
    if (policy->position[entry] != KVIO_EVICT_NONE)
        sift_down(policy, policy->position[entry]);
}

static void fifo_access(void *priv, uint32_t entry)
{
}

static uint32_t heap_victim(void *priv)
{
    struct heap_policy *policy = priv;
    if (policy->size == 0)
        return KVIO_EVICT_NONE;
    uint32_t entry = policy->heap[0];
    heap_remove(priv, entry);
    return entry;
}

const kvio_evict_ops_t kvio_evict_lfu_ops = {
    .name = "lfu",
    .description = "least frequently hit first, ties by least recent use",
    .priv_size = sizeof(struct heap_policy),
    .init = lfu_init,
    .fini = heap_fini,
    .add = heap_add,
    .remove = heap_remove,
    .access = lfu_access,
    .victim = heap_victim,
};

const kvio_evict_ops_t kvio_evict_fifo_ops = {
    .name = "fifo",
    .description = "oldest content first; hits do not refresh it",
    .priv_size = sizeof(struct heap_policy),
    .init = fifo_init,
    .fini = heap_fini,
    .add = heap_add,
    .remove = heap_remove,
    .access = fifo_access,
    .victim = heap_victim,
};
