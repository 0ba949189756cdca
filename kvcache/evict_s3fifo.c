/* s3fifo (Yang et al., SOSP 2023): a small FIFO (10% of the capacity) that
 * new content enters, a main FIFO with a 2-bit hit counter per entry
 * (reinserted while the counter is positive), and a ghost FIFO of the keys
 * recently evicted from the small queue; content found in the ghost goes
 * straight to main. One-hit wonders and scans leave through the small queue
 * without disturbing the main one. */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

enum { QUEUE_NONE = 0, QUEUE_SMALL = 1, QUEUE_MAIN = 2 };

/* Ghost: a FIFO ring of keys, counted in a key table for membership (a key
 * may be in the ring more than once). */
struct ghost {
    uint64_t *ring;
    size_t ring_capacity, ring_start, ring_length;
    kvio_map_t counts;
};

struct s3fifo {
    kvio_list_t small, main;
    kvio_link_t *links;
    uint8_t *queue;    /* where the entry is now */
    uint8_t *home;     /* where it returns after being in use */
    uint8_t *frequency;
    uint64_t *keys;
    uint64_t small_target;
    struct ghost ghost;
};

static bool ghost_contains(const struct ghost *ghost, uint64_t key)
{
    return ghost->ring_capacity > 0 && kvio_map_get(&ghost->counts, key) != 0;
}

static void ghost_forget(struct ghost *ghost, uint64_t key)
{
    uint32_t count = kvio_map_get(&ghost->counts, key);
    if (count > 0)
        kvio_map_set(&ghost->counts, key, count - 1);
}

static void ghost_push(struct ghost *ghost, uint64_t key)
{
    if (ghost->ring_capacity == 0)
        return;
    if (ghost->ring_length == ghost->ring_capacity) {
        ghost_forget(ghost, ghost->ring[ghost->ring_start]);
        ghost->ring_start = (ghost->ring_start + 1) % ghost->ring_capacity;
        ghost->ring_length--;
    }
    ghost->ring[(ghost->ring_start + ghost->ring_length) % ghost->ring_capacity] = key;
    ghost->ring_length++;
    kvio_map_set(&ghost->counts, key, kvio_map_get(&ghost->counts, key) + 1);
}

static void s3fifo_fini(void *priv)
{
    struct s3fifo *policy = priv;
    free(policy->links);
    free(policy->queue);
    free(policy->home);
    free(policy->frequency);
    free(policy->keys);
    free(policy->ghost.ring);
    kvio_map_fini(&policy->ghost.counts);
}

static kvio_status_t s3fifo_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    struct s3fifo *policy = priv;
    size_t n = num_entries ? num_entries : 1;
    if (capacity == 0 || capacity > num_entries)
        capacity = num_entries;
    kvio_list_init(&policy->small);
    kvio_list_init(&policy->main);
    policy->small_target = capacity / 10 > 0 ? capacity / 10 : 1;
    policy->links = malloc(sizeof(*policy->links) * n);
    policy->queue = calloc(n, 1);
    policy->home = calloc(n, 1);
    policy->frequency = calloc(n, 1);
    policy->keys = calloc(n, sizeof(uint64_t));
    /* The ghost remembers as many keys as the main queue holds. */
    struct ghost *ghost = &policy->ghost;
    ghost->ring_capacity = capacity > policy->small_target ? capacity - policy->small_target : 1;
    ghost->ring = malloc(sizeof(uint64_t) * ghost->ring_capacity);
    if (policy->links == NULL || policy->queue == NULL || policy->home == NULL ||
        policy->frequency == NULL || policy->keys == NULL || ghost->ring == NULL ||
        /* room for every ghost: a set never grows it, nor fails */
        kvio_map_reserve(&ghost->counts, ghost->ring_capacity) != KVIO_OK) {
        s3fifo_fini(policy);
        return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

static kvio_list_t *queue_list(struct s3fifo *policy, uint8_t queue)
{
    return queue == QUEUE_SMALL ? &policy->small : &policy->main;
}

static void s3fifo_add(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    struct s3fifo *policy = priv;
    if (fresh) {
        policy->frequency[entry] = 0;
        policy->keys[entry] = key;
        policy->home[entry] = ghost_contains(&policy->ghost, key) ? QUEUE_MAIN : QUEUE_SMALL;
    }
    policy->queue[entry] = policy->home[entry];
    kvio_list_push_tail(queue_list(policy, policy->queue[entry]), policy->links, entry);
}

static void s3fifo_remove(void *priv, uint32_t entry)
{
    struct s3fifo *policy = priv;
    if (policy->queue[entry] == QUEUE_NONE)
        return;
    kvio_list_unlink(queue_list(policy, policy->queue[entry]), policy->links, entry);
    policy->queue[entry] = QUEUE_NONE;
}

static void s3fifo_access(void *priv, uint32_t entry)
{
    struct s3fifo *policy = priv;
    if (policy->frequency[entry] < 3)
        policy->frequency[entry]++;
}

static uint32_t s3fifo_victim(void *priv)
{
    struct s3fifo *policy = priv;
    for (;;) {
        if (policy->small.length > 0 &&
            (policy->small.length >= policy->small_target || policy->main.length == 0)) {
            uint32_t entry = kvio_list_pop_head(&policy->small, policy->links);
            if (policy->frequency[entry] > 0) {
                /* Hit while in the small queue: promote to main. */
                policy->queue[entry] = policy->home[entry] = QUEUE_MAIN;
                kvio_list_push_tail(&policy->main, policy->links, entry);
                continue;
            }
            policy->queue[entry] = QUEUE_NONE;
            ghost_push(&policy->ghost, policy->keys[entry]);
            return entry;
        }
        if (policy->main.length == 0)
            return KVIO_EVICT_NONE;
        uint32_t entry = kvio_list_pop_head(&policy->main, policy->links);
        if (policy->frequency[entry] > 0) {
            policy->frequency[entry]--;
            kvio_list_push_tail(&policy->main, policy->links, entry);
            continue;
        }
        policy->queue[entry] = QUEUE_NONE;
        return entry;
    }
}

const kvio_evict_ops_t kvio_eviction_s3fifo = {
    .plugin = {.name = "s3fifo",
               .help = "scan-resistant: small probation FIFO, main FIFO with reinsertion, "
                       "ghost keys",
               .options = kvio_no_options},
    .priv_size = sizeof(struct s3fifo),
    .init = s3fifo_init,
    .fini = s3fifo_fini,
    .add = s3fifo_add,
    .remove = s3fifo_remove,
    .access = s3fifo_access,
    .victim = s3fifo_victim,
};
