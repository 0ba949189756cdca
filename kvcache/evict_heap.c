/* What the priority-ordered eviction policies (lfu, fifo) share: an indexed
 * binary min-heap of the set by (count, stamp), O(log n) per operation. A
 * fresh add zeroes the count and stamps the arrival; what a hit changes is
 * the policy's own (kvcache/evict_lfu.c, kvcache/evict_fifo.c). */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

static bool heap_less(const kvio_evict_heap_state_t *state, uint32_t a, uint32_t b)
{
    if (state->count[a] != state->count[b])
        return state->count[a] < state->count[b];
    return state->stamp[a] < state->stamp[b];
}

static void heap_place(kvio_evict_heap_state_t *state, uint32_t index, uint32_t entry)
{
    state->heap[index] = entry;
    state->position[entry] = index;
}

static void sift_up(kvio_evict_heap_state_t *state, uint32_t index)
{
    uint32_t entry = state->heap[index];
    while (index > 0) {
        uint32_t parent = (index - 1) / 2;
        if (!heap_less(state, entry, state->heap[parent]))
            break;
        heap_place(state, index, state->heap[parent]);
        index = parent;
    }
    heap_place(state, index, entry);
}

static void sift_down(kvio_evict_heap_state_t *state, uint32_t index)
{
    uint32_t entry = state->heap[index];
    for (;;) {
        uint32_t child = 2 * index + 1;
        if (child >= state->size)
            break;
        if (child + 1 < state->size && heap_less(state, state->heap[child + 1], state->heap[child]))
            child++;
        if (!heap_less(state, state->heap[child], entry))
            break;
        heap_place(state, index, state->heap[child]);
        index = child;
    }
    heap_place(state, index, entry);
}

kvio_status_t kvio_evict_heap_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    kvio_evict_heap_state_t *state = priv;
    size_t n = num_entries ? num_entries : 1;
    state->heap = malloc(sizeof(uint32_t) * n);
    state->position = malloc(sizeof(uint32_t) * n);
    state->count = calloc(n, sizeof(uint32_t));
    state->stamp = calloc(n, sizeof(uint64_t));
    if (state->heap == NULL || state->position == NULL || state->count == NULL ||
        state->stamp == NULL) {
        kvio_evict_heap_fini(state);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        state->position[i] = KVIO_EVICT_NONE;
    return KVIO_OK;
}

void kvio_evict_heap_fini(void *priv)
{
    kvio_evict_heap_state_t *state = priv;
    free(state->heap);
    free(state->position);
    free(state->count);
    free(state->stamp);
}

void kvio_evict_heap_add(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    kvio_evict_heap_state_t *state = priv;
    if (fresh) {
        state->count[entry] = 0;
        state->stamp[entry] = ++state->clock;
    }
    state->heap[state->size] = entry;
    state->size++;
    sift_up(state, state->size - 1);
}

void kvio_evict_heap_remove(void *priv, uint32_t entry)
{
    kvio_evict_heap_state_t *state = priv;
    uint32_t index = state->position[entry];
    if (index == KVIO_EVICT_NONE)
        return;
    state->position[entry] = KVIO_EVICT_NONE;
    state->size--;
    if (index == state->size)
        return;
    uint32_t moved = state->heap[state->size];
    heap_place(state, index, moved);
    sift_down(state, index);
    sift_up(state, state->position[moved]);
}

void kvio_evict_heap_key_grew(kvio_evict_heap_state_t *state, uint32_t entry)
{
    if (state->position[entry] != KVIO_EVICT_NONE)
        sift_down(state, state->position[entry]);
}

uint32_t kvio_evict_heap_victim(void *priv)
{
    kvio_evict_heap_state_t *state = priv;
    if (state->size == 0)
        return KVIO_EVICT_NONE;
    uint32_t entry = state->heap[0];
    kvio_evict_heap_remove(priv, entry);
    return entry;
}
