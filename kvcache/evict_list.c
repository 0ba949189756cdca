/* What the list-ordered eviction policies (lru, mru) share: one intrusive
 * doubly-linked list over entry indices, oldest first, where an add or a
 * hit moves an entry to the newest end; O(1) per operation. Each policy's
 * victim and ops table are in its own file. */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

kvio_status_t kvio_evict_list_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    kvio_evict_list_state_t *state = priv;
    kvio_list_init(&state->list);
    state->links = malloc(sizeof(*state->links) * (num_entries ? num_entries : 1));
    state->in_set = calloc(num_entries ? num_entries : 1, 1);
    if (state->links == NULL || state->in_set == NULL) {
        free(state->links);
        free(state->in_set);
        return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

void kvio_evict_list_fini(void *priv)
{
    kvio_evict_list_state_t *state = priv;
    free(state->links);
    free(state->in_set);
}

void kvio_evict_list_add(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    kvio_evict_list_state_t *state = priv;
    kvio_list_push_tail(&state->list, state->links, entry);
    state->in_set[entry] = 1;
}

void kvio_evict_list_remove(void *priv, uint32_t entry)
{
    kvio_evict_list_state_t *state = priv;
    kvio_list_unlink(&state->list, state->links, entry);
    state->in_set[entry] = 0;
}

/* A hit moves an entry of the set to the most recent end. */
void kvio_evict_list_access(void *priv, uint32_t entry)
{
    kvio_evict_list_state_t *state = priv;
    if (!state->in_set[entry] || state->list.tail == entry)
        return;
    kvio_list_unlink(&state->list, state->links, entry);
    kvio_list_push_tail(&state->list, state->links, entry);
}
