/* Private parts of the KV-cache module: the eviction-policy plug-in
 * interface and the policy instance wrapper that the block pool, the radix
 * index and cachesim share. */
#ifndef KVIO_KVCACHE_INT_H
#define KVIO_KVCACHE_INT_H

#include "kvio/kvcache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVIO_EVICT_NONE UINT32_MAX

/* The policy's victim is the block pool's free-queue head: in the pool, the
 * framework uses the queue itself (vLLM order) instead of asking the policy. */
#define KVIO_EVICT_CAP_QUEUE_ORDER (1u << 0)

/* A policy orders an evictable set of entries 0..num_entries-1 (blocks,
 * radix nodes or trace blocks). The framework allocates and zeroes priv. */
typedef struct kvio_evict_ops {
    const char *name;
    const char *description;
    unsigned caps;
    size_t priv_size;
    /* capacity: the cache size in entries (sizes s3fifo's queues). */
    kvio_status_t (*init)(void *priv, uint32_t num_entries, uint64_t capacity);
    void (*fini)(void *priv);
    /* The entry joins the set. fresh: it holds new content (its first add
     * since it was last evicted); key identifies that content (ghosts). */
    void (*add)(void *priv, uint32_t entry, uint64_t key, bool fresh);
    /* The entry leaves the set without being evicted (it became in use). */
    void (*remove)(void *priv, uint32_t entry);
    /* A hit on the entry, whether or not it is in the set. */
    void (*access)(void *priv, uint32_t entry);
    /* Removes and returns the next entry to evict, KVIO_EVICT_NONE if empty. */
    uint32_t (*victim)(void *priv);
} kvio_evict_ops_t;

/* A policy instance. */
typedef struct kvio_evict {
    const kvio_evict_ops_t *ops;
    void *priv;
} kvio_evict_t;

/* The plug-ins, listed by the registry (kvcache/evict.c). */
extern const kvio_evict_ops_t kvio_evict_lru_ops;
extern const kvio_evict_ops_t kvio_evict_mru_ops;
extern const kvio_evict_ops_t kvio_evict_lfu_ops;
extern const kvio_evict_ops_t kvio_evict_fifo_ops;
extern const kvio_evict_ops_t kvio_evict_s3fifo_ops;

/* Registry (kvcache/evict.c): lookup by name, NULL when unknown. */
const kvio_evict_ops_t *kvio_evict_find(const char *name);

/* Looks the policy up (logging an unknown name), allocates and initialises
 * its state. */
kvio_status_t kvio_evict_init(kvio_evict_t *evict, const char *name, uint32_t num_entries,
                              uint64_t capacity);
void kvio_evict_fini(kvio_evict_t *evict);

/* Doubly-linked lists over entry indices, shared by the list policies and
 * cachesim. Links live in caller-owned arrays. */
typedef struct kvio_list {
    uint32_t head, tail;
    uint32_t length;
} kvio_list_t;

typedef struct kvio_link {
    uint32_t prev, next;
} kvio_link_t;

static inline void kvio_list_init(kvio_list_t *list)
{
    list->head = list->tail = KVIO_EVICT_NONE;
    list->length = 0;
}

static inline void kvio_list_push_tail(kvio_list_t *list, kvio_link_t *links, uint32_t entry)
{
    links[entry].prev = list->tail;
    links[entry].next = KVIO_EVICT_NONE;
    if (list->tail != KVIO_EVICT_NONE)
        links[list->tail].next = entry;
    else
        list->head = entry;
    list->tail = entry;
    list->length++;
}

static inline void kvio_list_push_head(kvio_list_t *list, kvio_link_t *links, uint32_t entry)
{
    links[entry].next = list->head;
    links[entry].prev = KVIO_EVICT_NONE;
    if (list->head != KVIO_EVICT_NONE)
        links[list->head].prev = entry;
    else
        list->tail = entry;
    list->head = entry;
    list->length++;
}

static inline void kvio_list_unlink(kvio_list_t *list, kvio_link_t *links, uint32_t entry)
{
    uint32_t prev = links[entry].prev, next = links[entry].next;
    if (prev != KVIO_EVICT_NONE)
        links[prev].next = next;
    else
        list->head = next;
    if (next != KVIO_EVICT_NONE)
        links[next].prev = prev;
    else
        list->tail = prev;
    list->length--;
}

static inline uint32_t kvio_list_pop_head(kvio_list_t *list, kvio_link_t *links)
{
    uint32_t entry = list->head;
    if (entry != KVIO_EVICT_NONE)
        kvio_list_unlink(list, links, entry);
    return entry;
}

#endif
