/* Private parts of the KV-cache module: the eviction-policy plug-in
 * interface, the policy instance wrapper that the block pool, the radix
 * index and cachesim share, and the lists, heap and key table several
 * policies are built on. */
#ifndef KVIO_KVCACHE_INT_H
#define KVIO_KVCACHE_INT_H

#include "kvio/config.h"
#include "kvio/hashset.h"
#include "kvio/kvcache.h"
#include "kvio/plugin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVIO_EVICT_NONE UINT32_MAX

/* The policy's victim is the block pool's free-queue head: in the pool, the
 * framework uses the queue itself (vLLM order) instead of asking the policy. */
#define KVIO_EVICT_CAP_QUEUE_ORDER (1u << 0)

/* An eviction policy orders an evictable set of entries 0..num_entries-1
 * (blocks, radix nodes or trace blocks). One file each
 * (kvcache/evict_<name>.c), listed once in kvcache/evictions.c; the
 * framework (kvcache/evict.c) allocates, zeroes and frees priv. */
typedef struct kvio_evict_ops {
    kvio_plugin_t plugin;
    unsigned caps;    /* KVIO_EVICT_CAP_* */
    size_t priv_size; /* bytes of its private state, zeroed */
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
    /* Content key is about to join (add, fresh) after the victim it needs,
     * if the cache is full: said by a caller that knows the key before it
     * asks for the victim (cachesim; the pool learns a block's key only
     * later), for a policy whose victim depends on what comes in (arc
     * adapts its target on a ghost hit before it replaces). NULL: the
     * policy needs only add. */
    void (*arriving)(void *priv, uint64_t key);
} kvio_evict_ops_t;

/* A policy instance. */
typedef struct kvio_evict {
    const kvio_evict_ops_t *ops;
    void *priv;
} kvio_evict_t;

/* lru, which the block pool (its free queue) and cachesim (every capacity
 * in one pass) replay without asking it. */
extern const kvio_evict_ops_t kvio_eviction_lru;

/* The policy called name (NULL: lru), or NULL when the registry has none. */
const kvio_evict_ops_t *kvio_evict_find(const char *name);

/* Looks the policy up (NULL: lru; logging an unknown name), allocates and
 * initialises its state. */
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

/* ---- What lru and mru share (kvcache/evict_list.c): one intrusive list of
 * the set, oldest first; an add or a hit moves an entry to the newest end. */
typedef struct kvio_evict_list_state {
    kvio_list_t list;
    kvio_link_t *links;
    uint8_t *in_set;
} kvio_evict_list_state_t;

kvio_status_t kvio_evict_list_init(void *priv, uint32_t num_entries, uint64_t capacity);
void kvio_evict_list_fini(void *priv);
void kvio_evict_list_add(void *priv, uint32_t entry, uint64_t key, bool fresh);
void kvio_evict_list_remove(void *priv, uint32_t entry);
void kvio_evict_list_access(void *priv, uint32_t entry);

/* A list policy's ops but its victim (and caps). */
#define KVIO_EVICT_LIST_HOOKS                                                              \
    .priv_size = sizeof(kvio_evict_list_state_t), .init = kvio_evict_list_init,             \
    .fini = kvio_evict_list_fini, .add = kvio_evict_list_add,                               \
    .remove = kvio_evict_list_remove, .access = kvio_evict_list_access

/* ---- What lfu and fifo share (kvcache/evict_heap.c): an indexed binary
 * min-heap of the set by (count, stamp); a fresh add zeroes count and
 * stamps the arrival. The policy's access decides what a hit changes. */
typedef struct kvio_evict_heap_state {
    uint32_t *heap;     /* entries, heap-ordered by (count, stamp) */
    uint32_t size;
    uint32_t *position; /* entry -> index in heap, KVIO_EVICT_NONE if absent */
    uint32_t *count;    /* lfu: hits since the content arrived; fifo: 0 */
    uint64_t *stamp;    /* lfu: last use; fifo: arrival */
    uint64_t clock;
} kvio_evict_heap_state_t;

kvio_status_t kvio_evict_heap_init(void *priv, uint32_t num_entries, uint64_t capacity);
void kvio_evict_heap_fini(void *priv);
void kvio_evict_heap_add(void *priv, uint32_t entry, uint64_t key, bool fresh);
void kvio_evict_heap_remove(void *priv, uint32_t entry);
uint32_t kvio_evict_heap_victim(void *priv);
/* The entry's key (count, stamp) grew: it moves down the heap if in it. */
void kvio_evict_heap_key_grew(kvio_evict_heap_state_t *state, uint32_t entry);

/* A heap policy's ops but its access. */
#define KVIO_EVICT_HEAP_HOOKS                                                              \
    .priv_size = sizeof(kvio_evict_heap_state_t), .init = kvio_evict_heap_init,             \
    .fini = kvio_evict_heap_fini, .add = kvio_evict_heap_add,                               \
    .remove = kvio_evict_heap_remove, .victim = kvio_evict_heap_victim

/* Hashes blocks [first, end) of tokens into hashes[first..end), chained on
 * hashes[first - 1] (the salt goes in block 0): block_hash.c. */
void kvio_kvcache_hash_blocks(const uint32_t *tokens, uint32_t block_size, const void *salt,
                              size_t salt_len, size_t first, size_t end, kvio_hash_t *hashes);

#endif
