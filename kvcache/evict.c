/* The eviction-policy registry: the one list of policies, lookup by name
 * (with a clear error for an unknown one), and the wrapper that allocates,
 * initialises and frees a policy's private state. */
#include "kvcache/kvcache_int.h"

#include "kvio/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kvio_evict_ops_t *const policies[] = {
    &kvio_evict_lru_ops, &kvio_evict_lfu_ops, &kvio_evict_fifo_ops,
    &kvio_evict_mru_ops, &kvio_evict_s3fifo_ops,
};

#define NUM_POLICIES (sizeof(policies) / sizeof(policies[0]))

size_t kvio_evict_num_policies(void)
{
    return NUM_POLICIES;
}

const char *kvio_evict_policy_name(size_t index)
{
    return index < NUM_POLICIES ? policies[index]->name : NULL;
}

const char *kvio_evict_policy_description(size_t index)
{
    return index < NUM_POLICIES ? policies[index]->description : NULL;
}

const kvio_evict_ops_t *kvio_evict_find(const char *name)
{
    for (size_t i = 0; i < NUM_POLICIES; i++) {
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    }
    return NULL;
}

kvio_status_t kvio_evict_check_name(const char *name)
{
    if (name != NULL && kvio_evict_find(name) != NULL)
        return KVIO_OK;
    char known[128] = "";
    for (size_t i = 0; i < NUM_POLICIES; i++) {
        strncat(known, i > 0 ? ", " : "", sizeof(known) - strlen(known) - 1);
        strncat(known, policies[i]->name, sizeof(known) - strlen(known) - 1);
    }
    kvio_error("unknown eviction policy '%s' (known: %s)", name ? name : "(null)", known);
    return KVIO_ERR_NOT_FOUND;
}

kvio_status_t kvio_evict_init(kvio_evict_t *evict, const char *name, uint32_t num_entries,
                              uint64_t capacity)
{
    kvio_status_t status = kvio_evict_check_name(name == NULL ? "lru" : name);
    if (status != KVIO_OK)
        return status;
    const kvio_evict_ops_t *ops = kvio_evict_find(name == NULL ? "lru" : name);
    void *priv = calloc(1, ops->priv_size);
    if (priv == NULL)
        return KVIO_ERR_NOMEM;
    status = ops->init(priv, num_entries, capacity);
    if (status != KVIO_OK)
        goto cleanup_priv;
    evict->ops = ops;
    evict->priv = priv;
    return KVIO_OK;

cleanup_priv:
    free(priv);
    return status;
}

void kvio_evict_fini(kvio_evict_t *evict)
{
    if (evict->ops == NULL)
        return;
    evict->ops->fini(evict->priv);
    free(evict->priv);
    evict->ops = NULL;
    evict->priv = NULL;
}
