/* List-ordered eviction policies: lru (evict the least recently used or
 * released entry; in the block pool this is vLLM's free-queue order) and mru
 * (evict the most recent one). One intrusive doubly-linked list over entry
 * indices, O(1) per operation. */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

struct list_policy {
    kvio_list_t list;
    kvio_link_t *links;
    uint8_t *in_set;
};

static kvio_status_t list_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    struct list_policy *policy = priv;
    kvio_list_init(&policy->list);
    policy->links = malloc(sizeof(*policy->links) * (num_entries ? num_entries : 1));
    policy->in_set = calloc(num_entries ? num_entries : 1, 1);
    if (policy->links == NULL || policy->in_set == NULL) {
        free(policy->links);
        free(policy->in_set);
        return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

static void list_fini(void *priv)
{
    struct list_policy *policy = priv;
    free(policy->links);
    free(policy->in_set);
}

static void list_add(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    struct list_policy *policy = priv;
    kvio_list_push_tail(&policy->list, policy->links, entry);
    policy->in_set[entry] = 1;
}

static void list_remove(void *priv, uint32_t entry)
{
    struct list_policy *policy = priv;
    kvio_list_unlink(&policy->list, policy->links, entry);
    policy->in_set[entry] = 0;
}

/* A hit moves an entry of the set to the most recent end. */
static void list_access(void *priv, uint32_t entry)
{
    struct list_policy *policy = priv;
    if (!policy->in_set[entry] || policy->list.tail == entry)
        return;
    kvio_list_unlink(&policy->list, policy->links, entry);
    kvio_list_push_tail(&policy->list, policy->links, entry);
}

static uint32_t lru_victim(void *priv)
{
    struct list_policy *policy = priv;
    uint32_t entry = kvio_list_pop_head(&policy->list, policy->links);
    if (entry != KVIO_EVICT_NONE)
        policy->in_set[entry] = 0;
    return entry;
}

static uint32_t mru_victim(void *priv)
{
    struct list_policy *policy = priv;
    uint32_t entry = policy->list.tail;
    if (entry != KVIO_EVICT_NONE)
        list_remove(priv, entry);
    return entry;
}

const kvio_evict_ops_t kvio_evict_lru_ops = {
    .name = "lru",
    .description = "least recently used (vLLM free-queue order in the block pool)",
    .caps = KVIO_EVICT_CAP_QUEUE_ORDER,
    .priv_size = sizeof(struct list_policy),
    .init = list_init,
    .fini = list_fini,
    .add = list_add,
    .remove = list_remove,
    .access = list_access,
    .victim = lru_victim,
};

const kvio_evict_ops_t kvio_evict_mru_ops = {
    .name = "mru",
    .description = "most recently used first (helps only cyclic scans larger than the cache)",
    .priv_size = sizeof(struct list_policy),
    .init = list_init,
    .fini = list_fini,
    .add = list_add,
    .remove = list_remove,
    .access = list_access,
    .victim = mru_victim,
};
