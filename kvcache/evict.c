/* The eviction-policy framework: lookup in the registry (kvcache/evictions.c)
 * with a clear error for an unknown name, and the wrapper that allocates,
 * initialises and frees a policy's private state. */
#include "kvcache/kvcache_int.h"

#include "kvio/log.h"

#include <stdlib.h>

const kvio_evict_ops_t *kvio_evict_find(const char *name)
{
    /* The table's first member is its plug-in header. */
    return (const kvio_evict_ops_t *)kvio_registry_find(&kvio_evictions,
                                                        name != NULL ? name : "lru");
}

kvio_status_t kvio_evict_check_name(const char *name)
{
    if (name != NULL && kvio_evict_find(name) != NULL)
        return KVIO_OK;
    char known[256];
    kvio_registry_names(&kvio_evictions, known, sizeof(known));
    kvio_error("unknown %s '%s' (known: %s)", kvio_evictions.kind, name ? name : "(null)",
               known);
    return KVIO_ERR_NOT_FOUND;
}

kvio_status_t kvio_evict_init(kvio_evict_t *evict, const char *name, uint32_t num_entries,
                              uint64_t capacity)
{
    kvio_status_t status = kvio_evict_check_name(name == NULL ? "lru" : name);
    if (status != KVIO_OK)
        return status;
    const kvio_evict_ops_t *ops = kvio_evict_find(name);
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
