/* arc (Megiddo and Modha, FAST 2003): resident content in T1 (seen once)
 * or T2 (seen again), each LRU-ordered, and the keys of content evicted
 * from them in ghost lists B1 and B2. A hit moves content to T2; a ghost
 * hit in B1 grows the target p of T1, one in B2 shrinks it, and the content
 * enters T2; the victim is T1's LRU while T1 is above p, else T2's. The
 * lists hold the evictable set only (in the pool: free cached blocks; an
 * entry in use keeps its list and returns to it), as s3fifo's queues do.
 * When arriving was not called (the pool), a ghost hit adapts p at the
 * fresh add, after the victim rather than before it. */
#include "kvcache/kvcache_int.h"

#include <stdlib.h>

enum { LIST_NONE = 0, LIST_T1 = 1, LIST_T2 = 2, LIST_B1 = 3, LIST_B2 = 4 };

struct arc {
    uint64_t capacity;    /* c */
    double target;        /* p: T1's target size, 0..c */
    kvio_list_t t1, t2;   /* entries in the set, LRU at the head */
    kvio_link_t *links;   /* per entry */
    uint8_t *list;        /* per entry: T1 or T2 while its content is resident */
    uint8_t *in_set;
    uint64_t *keys;       /* per entry: its content's key */
    kvio_list_t b1, b2;   /* ghost slots, LRU at the head */
    kvio_link_t *ghost_links;
    uint64_t *ghost_keys;
    uint8_t *ghost_list;  /* per slot: B1 or B2 */
    uint32_t *free_slots; /* c + 1 slots: at most c ghosts, one more in a victim */
    uint32_t num_free_slots;
    kvio_map_t ghost_index; /* key -> its slot + 1 */
    bool pending;         /* arriving told of pending_key, and p is adapted */
    uint64_t pending_key;
    uint8_t pending_ghost; /* B1, B2 or NONE: where pending_key was a ghost */
};

static void arc_fini(void *priv)
{
    struct arc *arc = priv;
    free(arc->links);
    free(arc->list);
    free(arc->in_set);
    free(arc->keys);
    free(arc->ghost_links);
    free(arc->ghost_keys);
    free(arc->ghost_list);
    free(arc->free_slots);
    kvio_map_fini(&arc->ghost_index);
}

static kvio_status_t arc_init(void *priv, uint32_t num_entries, uint64_t capacity)
{
    struct arc *arc = priv;
    size_t n = num_entries ? num_entries : 1;
    if (capacity == 0 || capacity > n)
        capacity = n;
    arc->capacity = capacity;
    size_t slots = capacity + 1;
    kvio_list_init(&arc->t1);
    kvio_list_init(&arc->t2);
    kvio_list_init(&arc->b1);
    kvio_list_init(&arc->b2);
    arc->links = malloc(sizeof(*arc->links) * n);
    arc->list = calloc(n, 1);
    arc->in_set = calloc(n, 1);
    arc->keys = calloc(n, sizeof(uint64_t));
    arc->ghost_links = malloc(sizeof(*arc->ghost_links) * slots);
    arc->ghost_keys = malloc(sizeof(uint64_t) * slots);
    arc->ghost_list = calloc(slots, 1);
    arc->free_slots = malloc(sizeof(uint32_t) * slots);
    if (arc->links == NULL || arc->list == NULL || arc->in_set == NULL || arc->keys == NULL ||
        arc->ghost_links == NULL || arc->ghost_keys == NULL || arc->ghost_list == NULL ||
        /* room for every ghost: a set never grows it, nor fails */
        arc->free_slots == NULL || kvio_map_reserve(&arc->ghost_index, slots) != KVIO_OK) {
        arc_fini(arc);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = slots; i-- > 0;)
        arc->free_slots[arc->num_free_slots++] = (uint32_t)i;
    return KVIO_OK;
}

static kvio_list_t *resident_list(struct arc *arc, uint8_t list)
{
    return list == LIST_T2 ? &arc->t2 : &arc->t1;
}

static kvio_list_t *ghost_list(struct arc *arc, uint8_t list)
{
    return list == LIST_B2 ? &arc->b2 : &arc->b1;
}

/* Where key is a ghost (B1, B2), or NONE. */
static uint8_t ghost_of(const struct arc *arc, uint64_t key)
{
    uint32_t slot = kvio_map_get(&arc->ghost_index, key);
    return slot == 0 ? LIST_NONE : arc->ghost_list[slot - 1];
}

static void ghost_drop(struct arc *arc, uint32_t slot)
{
    kvio_list_unlink(ghost_list(arc, arc->ghost_list[slot]), arc->ghost_links, slot);
    kvio_map_set(&arc->ghost_index, arc->ghost_keys[slot], 0);
    arc->ghost_list[slot] = LIST_NONE;
    arc->free_slots[arc->num_free_slots++] = slot;
}

static void ghost_forget(struct arc *arc, uint64_t key)
{
    uint32_t slot = kvio_map_get(&arc->ghost_index, key);
    if (slot != 0)
        ghost_drop(arc, slot - 1);
}

/* The paper's bounds on its directory, |T1| + |B1| <= c and all four lists
 * <= 2c, kept by dropping the LRU ghost of B1, then of B2 (its case IV
 * drops one before a miss enters T1; here after, which leaves the same).
 * The second bound is |B1| + |B2| <= c here: the same while the set holds c
 * entries (cachesim), and the ghosts' memory while it holds fewer (the pool,
 * whose blocks in use are not in the set). */
static void arc_trim(struct arc *arc)
{
    while (arc->t1.length + arc->b1.length > arc->capacity && arc->b1.length > 0)
        ghost_drop(arc, arc->b1.head);
    while (arc->b1.length + arc->b2.length > arc->capacity)
        ghost_drop(arc, arc->b2.length > 0 ? arc->b2.head : arc->b1.head);
}

/* key to the MRU end of ghost list (B1, B2). */
static void ghost_push(struct arc *arc, uint64_t key, uint8_t list)
{
    ghost_forget(arc, key); /* the same content cached twice, evicted twice */
    if (arc->num_free_slots == 0) /* c + 1 ghosts: victims with no add between (the pool) */
        arc_trim(arc);
    uint32_t slot = arc->free_slots[--arc->num_free_slots];
    arc->ghost_keys[slot] = key;
    arc->ghost_list[slot] = list;
    kvio_list_push_tail(ghost_list(arc, list), arc->ghost_links, slot);
    kvio_map_set(&arc->ghost_index, key, slot + 1);
}

/* The paper's adaptation on a ghost hit: p grows by max(|B2|/|B1|, 1) on a
 * hit in B1, shrinks by max(|B1|/|B2|, 1) on one in B2, within 0..c. */
static void adapt(struct arc *arc, uint8_t ghost)
{
    double b1 = arc->b1.length, b2 = arc->b2.length;
    if (ghost == LIST_B1) {
        double delta = b1 >= b2 ? 1 : b2 / b1;
        arc->target = arc->target + delta < (double)arc->capacity ? arc->target + delta
                                                                  : (double)arc->capacity;
    } else if (ghost == LIST_B2) {
        double delta = b2 >= b1 ? 1 : b1 / b2;
        arc->target = arc->target > delta ? arc->target - delta : 0;
    }
}

static void arc_arriving(void *priv, uint64_t key)
{
    struct arc *arc = priv;
    arc->pending = true;
    arc->pending_key = key;
    arc->pending_ghost = ghost_of(arc, key);
    adapt(arc, arc->pending_ghost);
}

/* New content enters T1, or T2 when its key is a ghost (adapting p here
 * unless arriving did); returning content goes back to its list's MRU end. */
static void arc_add(void *priv, uint32_t entry, uint64_t key, bool fresh)
{
    struct arc *arc = priv;
    if (fresh) {
        if (!arc->pending || arc->pending_key != key)
            adapt(arc, ghost_of(arc, key));
        arc->pending = false;
        arc->keys[entry] = key;
        arc->list[entry] = ghost_of(arc, key) != LIST_NONE ? LIST_T2 : LIST_T1;
        ghost_forget(arc, key);
    } else if (arc->list[entry] == LIST_NONE) {
        arc->list[entry] = LIST_T1;
    }
    kvio_list_push_tail(resident_list(arc, arc->list[entry]), arc->links, entry);
    arc->in_set[entry] = 1;
    arc_trim(arc);
}

static void arc_remove(void *priv, uint32_t entry)
{
    struct arc *arc = priv;
    if (!arc->in_set[entry])
        return;
    kvio_list_unlink(resident_list(arc, arc->list[entry]), arc->links, entry);
    arc->in_set[entry] = 0;
}

/* A hit on resident content moves it to T2's MRU end (in use: it returns
 * there). A hit before the policy saw the content counts for nothing: the
 * fresh add decides, as for every policy. */
static void arc_access(void *priv, uint32_t entry)
{
    struct arc *arc = priv;
    if (arc->list[entry] == LIST_NONE)
        return;
    if (arc->in_set[entry]) {
        kvio_list_unlink(resident_list(arc, arc->list[entry]), arc->links, entry);
        kvio_list_push_tail(&arc->t2, arc->links, entry);
    }
    arc->list[entry] = LIST_T2;
}

/* The paper's REPLACE: T1's LRU to B1 while T1 is above p (or at p when the
 * content arriving is a ghost of B2), else T2's LRU to B2; an empty list
 * gives way to the other. */
static uint32_t arc_victim(void *priv)
{
    struct arc *arc = priv;
    if (arc->t1.length == 0 && arc->t2.length == 0)
        return KVIO_EVICT_NONE;
    double t1 = arc->t1.length;
    bool arriving_from_b2 = arc->pending && arc->pending_ghost == LIST_B2;
    bool from_t1 = arc->t1.length > 0 && (t1 > arc->target ||
                                          (arriving_from_b2 && t1 == arc->target) ||
                                          arc->t2.length == 0);
    uint32_t entry = kvio_list_pop_head(from_t1 ? &arc->t1 : &arc->t2, arc->links);
    arc->in_set[entry] = 0;
    arc->list[entry] = LIST_NONE;
    ghost_push(arc, arc->keys[entry], from_t1 ? LIST_B1 : LIST_B2);
    return entry;
}

const kvio_evict_ops_t kvio_eviction_arc = {
    .plugin = {.name = "arc",
               .help = "adaptive replacement cache: recency and frequency lists sized by "
                       "ghost hits (Megiddo and Modha)",
               .options = kvio_no_options},
    .priv_size = sizeof(struct arc),
    .init = arc_init,
    .fini = arc_fini,
    .add = arc_add,
    .remove = arc_remove,
    .access = arc_access,
    .victim = arc_victim,
    .arriving = arc_arriving,
};
