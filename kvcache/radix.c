/* Radix index with SGLang RadixCache semantics over pages (blocks): nodes
 * hold runs of pages, a match that ends inside a node splits it (the new
 * parent copies the child's lock count), lock counts walk to the root and
 * move tokens between the evictable and protected totals, and eviction pops
 * unlocked leaves in policy order, pushing a parent that becomes a leaf. The
 * tree owns its blocks (a block is free only when no node holds it), or,
 * with external_blocks, holds a block pool's pages: the caller gives each
 * new page its block and hears each block eviction frees. */
#include "kvcache/kvcache_int.h"

#include "kvio/hashset.h"
#include "kvio/log.h"

#include <stdlib.h>
#include <string.h>

#define ROOT 0
#define NO_NODE UINT32_MAX

typedef struct radix_node {
    uint32_t parent, first_child, next_sibling, prev_sibling;
    uint32_t *blocks; /* the node's pages, in order; malloc'd */
    uint32_t num_pages;
    uint32_t lock_count;
} radix_node_t;

struct kvio_radix {
    uint32_t num_blocks, block_size;
    kvio_hash_t *block_keys;   /* page key held by each block */
    uint32_t *free_blocks;     /* stack */
    uint32_t num_free_blocks;
    radix_node_t *nodes;       /* num_blocks + 1: every non-root node holds a block */
    uint32_t *free_nodes;      /* stack */
    uint32_t num_free_nodes;
    size_t num_nodes;
    size_t evictable_tokens, protected_tokens;
    uint64_t evicted_pages;    /* pages freed by eviction since creation */
    uint64_t generation;       /* bumped by kvio_radix_reset */
    kvio_evict_t evict;
    uint8_t *in_set;           /* node is an unlocked leaf known to the policy */
    uint8_t *policy_known;     /* the policy has seen the node since it was made */
    kvio_radix_config_t hooks; /* on_stored, on_removed, hook_context */
    /* (parent, first page key) -> child, so a walk finds a child in O(1)
     * however many siblings it has (SGLang keys node.children by it);
     * scanned_children: a 64-bit collision or no memory for the map, and
     * siblings are scanned instead until the next reset. */
    kvio_map_t children;
    bool scanned_children;
};

uint64_t kvio_radix_footprint(uint32_t num_blocks, uint64_t used_blocks)
{
    uint64_t n = num_blocks, u = used_blocks < n ? used_blocks : n;
    /* Written whole when the tree is made: the free node stack (and the
     * free block stack of a tree that owns its blocks); the policy's state
     * at most (arc's lists and ghost keys); per block used, its key, its
     * node, the node's flags and page array (malloc'd, 32 bytes at least),
     * and its entry in the children map (at most 4 slots of 12 bytes). */
    return n * sizeof(uint32_t) * 2 + n * 48 +
           u * (sizeof(kvio_hash_t) + sizeof(radix_node_t) + 2 + 32 + 48) + 4096;
}

static bool is_leaf(const kvio_radix_t *tree, uint32_t node)
{
    return tree->nodes[node].first_child == NO_NODE;
}

static size_t node_tokens(const kvio_radix_t *tree, uint32_t node)
{
    return (size_t)tree->nodes[node].num_pages * tree->block_size;
}

static void policy_add(kvio_radix_t *tree, uint32_t node)
{
    if (node == ROOT || tree->in_set[node])
        return;
    bool fresh = !tree->policy_known[node];
    tree->policy_known[node] = 1;
    tree->in_set[node] = 1;
    uint64_t key = tree->block_keys[tree->nodes[node].blocks[0]].low;
    tree->evict.ops->add(tree->evict.priv, node, key, fresh);
}

static void policy_remove(kvio_radix_t *tree, uint32_t node)
{
    if (!tree->in_set[node])
        return;
    tree->in_set[node] = 0;
    tree->evict.ops->remove(tree->evict.priv, node);
}

/* Every node but the root free, the root childless. */
static void reset_nodes(kvio_radix_t *tree)
{
    uint32_t num_nodes = tree->num_blocks + 1;
    for (uint32_t i = 0; i + 1 < num_nodes; i++)
        tree->free_nodes[i] = num_nodes - 1 - i;
    tree->num_free_nodes = num_nodes - 1;
    tree->num_nodes = 0;
    tree->nodes[ROOT] = (radix_node_t){.parent = NO_NODE, .first_child = NO_NODE,
                                       .next_sibling = NO_NODE, .prev_sibling = NO_NODE};
}

kvio_status_t kvio_radix_create(const kvio_radix_config_t *config, kvio_radix_t **tree_p)
{
    if (config == NULL || config->num_blocks == 0 || config->block_size == 0 ||
        config->num_blocks >= UINT32_MAX - 1 ||
        (config->external_blocks && config->on_released == NULL)) {
        kvio_error("radix: need at least one block, a block size of at least 1, and "
                   "on_released with external blocks");
        return KVIO_ERR_INVALID;
    }
    kvio_status_t status = KVIO_ERR_NOMEM;
    kvio_radix_t *tree = calloc(1, sizeof(*tree));
    if (tree == NULL)
        return KVIO_ERR_NOMEM;
    uint32_t num_nodes = config->num_blocks + 1;
    tree->num_blocks = config->num_blocks;
    tree->hooks = *config;
    tree->hooks.eviction = NULL; /* not kept: the caller's string */
    tree->block_size = config->block_size;
    tree->block_keys = calloc(config->num_blocks, sizeof(kvio_hash_t));
    tree->free_blocks = malloc(config->num_blocks * sizeof(uint32_t));
    tree->nodes = calloc(num_nodes, sizeof(radix_node_t));
    tree->free_nodes = malloc(num_nodes * sizeof(uint32_t));
    tree->in_set = calloc(num_nodes, 1);
    tree->policy_known = calloc(num_nodes, 1);
    if (tree->block_keys == NULL || tree->free_blocks == NULL || tree->nodes == NULL ||
        tree->free_nodes == NULL || tree->in_set == NULL || tree->policy_known == NULL)
        goto cleanup;
    status = kvio_evict_init(&tree->evict, config->eviction, num_nodes, config->num_blocks);
    if (status != KVIO_OK)
        goto cleanup;
    /* Blocks are handed out from 0 upwards (none: the caller's), nodes
     * from 1 upwards. */
    for (uint32_t i = 0; !config->external_blocks && i < config->num_blocks; i++)
        tree->free_blocks[i] = config->num_blocks - 1 - i;
    tree->num_free_blocks = config->external_blocks ? 0 : config->num_blocks;
    reset_nodes(tree);
    *tree_p = tree;
    return KVIO_OK;

cleanup:
    kvio_radix_destroy(tree);
    return status;
}

void kvio_radix_destroy(kvio_radix_t *tree)
{
    if (tree == NULL)
        return;
    if (tree->nodes != NULL) {
        for (uint32_t i = 0; i <= tree->num_blocks; i++)
            free(tree->nodes[i].blocks);
    }
    kvio_evict_fini(&tree->evict);
    kvio_map_fini(&tree->children);
    free(tree->block_keys);
    free(tree->free_blocks);
    free(tree->nodes);
    free(tree->free_nodes);
    free(tree->in_set);
    free(tree->policy_known);
    free(tree);
}

static kvio_hash_t first_key(const kvio_radix_t *tree, uint32_t node)
{
    return tree->block_keys[tree->nodes[node].blocks[0]];
}

static uint64_t child_key(uint32_t parent, kvio_hash_t key)
{
    return key.low ^ (key.high + parent) * 0x9e3779b97f4a7c15ull;
}

/* child, under its parent, is found by its first page key. */
static void index_child(kvio_radix_t *tree, uint32_t child)
{
    if (tree->scanned_children)
        return;
    uint64_t key = child_key(tree->nodes[child].parent, first_key(tree, child));
    uint32_t held = kvio_map_get(&tree->children, key);
    if ((held != 0 && held != child) || kvio_map_set(&tree->children, key, child) != KVIO_OK)
        tree->scanned_children = true;
}

static void unindex_child(kvio_radix_t *tree, uint32_t child)
{
    if (tree->scanned_children)
        return;
    uint64_t key = child_key(tree->nodes[child].parent, first_key(tree, child));
    if (kvio_map_get(&tree->children, key) == child)
        kvio_map_set(&tree->children, key, 0); /* taking a key out allocates nothing */
}

static void link_child(kvio_radix_t *tree, uint32_t parent, uint32_t child)
{
    radix_node_t *node = &tree->nodes[child];
    node->parent = parent;
    node->prev_sibling = NO_NODE;
    node->next_sibling = tree->nodes[parent].first_child;
    if (node->next_sibling != NO_NODE)
        tree->nodes[node->next_sibling].prev_sibling = child;
    tree->nodes[parent].first_child = child;
    index_child(tree, child);
}

static void unlink_child(kvio_radix_t *tree, uint32_t child)
{
    unindex_child(tree, child);
    radix_node_t *node = &tree->nodes[child];
    if (node->prev_sibling != NO_NODE)
        tree->nodes[node->prev_sibling].next_sibling = node->next_sibling;
    else
        tree->nodes[node->parent].first_child = node->next_sibling;
    if (node->next_sibling != NO_NODE)
        tree->nodes[node->next_sibling].prev_sibling = node->prev_sibling;
    node->prev_sibling = node->next_sibling = NO_NODE;
}

static uint32_t new_node(kvio_radix_t *tree, uint32_t num_pages)
{
    uint32_t node = tree->free_nodes[--tree->num_free_nodes];
    uint32_t *blocks = malloc(num_pages * sizeof(uint32_t));
    if (blocks == NULL) {
        tree->num_free_nodes++;
        return NO_NODE;
    }
    tree->nodes[node] = (radix_node_t){.parent = NO_NODE, .first_child = NO_NODE,
                                       .next_sibling = NO_NODE, .prev_sibling = NO_NODE,
                                       .blocks = blocks, .num_pages = num_pages};
    tree->policy_known[node] = 0;
    tree->num_nodes++;
    return node;
}

static uint32_t find_child(const kvio_radix_t *tree, uint32_t parent, kvio_hash_t key)
{
    if (!tree->scanned_children) {
        /* The map holds every child: a different node under this key is a
         * collision that would have switched the map off. */
        uint32_t child = kvio_map_get(&tree->children, child_key(parent, key));
        return child != 0 && tree->nodes[child].parent == parent &&
                       kvio_hash_equal(first_key(tree, child), key)
                   ? child
                   : NO_NODE;
    }
    for (uint32_t child = tree->nodes[parent].first_child; child != NO_NODE;
         child = tree->nodes[child].next_sibling) {
        if (kvio_hash_equal(tree->block_keys[tree->nodes[child].blocks[0]], key))
            return child;
    }
    return NO_NODE;
}

/* Splits child after its first pages pages: a new parent takes them (and
 * the child's place and lock count). Returns the new parent. */
static uint32_t split(kvio_radix_t *tree, uint32_t child, uint32_t pages)
{
    uint32_t parent = new_node(tree, pages);
    if (parent == NO_NODE)
        return NO_NODE;
    unindex_child(tree, child);
    radix_node_t *old = &tree->nodes[child];
    radix_node_t *top = &tree->nodes[parent];
    memcpy(top->blocks, old->blocks, pages * sizeof(uint32_t));
    memmove(old->blocks, old->blocks + pages, (old->num_pages - pages) * sizeof(uint32_t));
    old->num_pages -= pages;
    top->lock_count = old->lock_count;
    /* The new node takes the child's place among its siblings. */
    top->parent = old->parent;
    top->prev_sibling = old->prev_sibling;
    top->next_sibling = old->next_sibling;
    if (top->prev_sibling != NO_NODE)
        tree->nodes[top->prev_sibling].next_sibling = parent;
    else
        tree->nodes[top->parent].first_child = parent;
    if (top->next_sibling != NO_NODE)
        tree->nodes[top->next_sibling].prev_sibling = parent;
    old->prev_sibling = old->next_sibling = NO_NODE;
    old->parent = parent;
    top->first_child = child;
    index_child(tree, parent);
    index_child(tree, child);
    return parent;
}

/* The walk from the root along keys: the longest cached prefix, its blocks
 * to blocks_p (may be NULL). tree NULL: a query (view only read); else the
 * walk takes the path as SGLang's match_prefix does: a match that ends
 * inside a node splits it, and every node on the path counts as accessed.
 * *node_p: the deepest node wholly matched (the root when none). */
static kvio_status_t walk(kvio_radix_t *tree, const kvio_radix_t *view, const kvio_hash_t *keys,
                          size_t num_keys, uint32_t *blocks_p, uint32_t *node_p,
                          size_t *matched_p)
{
    uint32_t node = ROOT;
    size_t matched = 0;
    while (matched < num_keys) {
        uint32_t child = find_child(view, node, keys[matched]);
        if (child == NO_NODE)
            break;
        const radix_node_t *candidate = &view->nodes[child];
        uint32_t same = 1;
        while (same < candidate->num_pages && matched + same < num_keys &&
               kvio_hash_equal(view->block_keys[candidate->blocks[same]], keys[matched + same]))
            same++;
        if (blocks_p != NULL)
            memcpy(blocks_p + matched, candidate->blocks, same * sizeof(uint32_t));
        bool partial = same < candidate->num_pages;
        matched += same;
        if (partial && tree == NULL)
            break;
        if (partial) {
            child = split(tree, child, same);
            if (child == NO_NODE)
                return KVIO_ERR_NOMEM;
        }
        if (tree != NULL) /* SGLang refreshes every node on the matched path. */
            tree->evict.ops->access(tree->evict.priv, child);
        node = child;
        if (partial)
            break;
    }
    *node_p = node;
    *matched_p = matched;
    return KVIO_OK;
}

kvio_status_t kvio_radix_match(kvio_radix_t *tree, const kvio_hash_t *keys, size_t num_keys,
                               kvio_radix_node_t *node_p, size_t *num_matched_p)
{
    return walk(tree, tree, keys, num_keys, NULL, node_p, num_matched_p);
}

void kvio_radix_lock(kvio_radix_t *tree, kvio_radix_node_t node)
{
    for (uint32_t x = node; x != ROOT && x != NO_NODE; x = tree->nodes[x].parent) {
        if (tree->nodes[x].lock_count++ == 0) {
            tree->evictable_tokens -= node_tokens(tree, x);
            tree->protected_tokens += node_tokens(tree, x);
            policy_remove(tree, x);
        }
    }
}

void kvio_radix_unlock(kvio_radix_t *tree, kvio_radix_node_t node)
{
    for (uint32_t x = node; x != ROOT && x != NO_NODE; x = tree->nodes[x].parent) {
        if (tree->nodes[x].lock_count == 0)
            continue;
        if (--tree->nodes[x].lock_count == 0) {
            tree->evictable_tokens += node_tokens(tree, x);
            tree->protected_tokens -= node_tokens(tree, x);
            if (is_leaf(tree, x))
                policy_add(tree, x);
        }
    }
}

void kvio_radix_evict(kvio_radix_t *tree, size_t num_tokens, size_t *num_evicted_p)
{
    size_t evicted = 0;
    while (evicted < num_tokens) {
        uint32_t victim = tree->evict.ops->victim(tree->evict.priv);
        if (victim == KVIO_EVICT_NONE)
            break;
        tree->in_set[victim] = 0;
        radix_node_t *node = &tree->nodes[victim];
        for (uint32_t i = 0; i < node->num_pages; i++) {
            if (tree->hooks.external_blocks)
                tree->hooks.on_released(tree->hooks.hook_context, node->blocks[i],
                                        tree->block_keys[node->blocks[i]]);
            else
                tree->free_blocks[tree->num_free_blocks++] = node->blocks[i];
            if (tree->hooks.on_removed != NULL)
                tree->hooks.on_removed(tree->hooks.hook_context,
                                       tree->block_keys[node->blocks[i]]);
        }
        size_t tokens = node_tokens(tree, victim);
        tree->evictable_tokens -= tokens;
        evicted += tokens;
        tree->evicted_pages += node->num_pages;
        uint32_t parent = node->parent;
        unlink_child(tree, victim);
        free(node->blocks);
        *node = (radix_node_t){0};
        tree->free_nodes[tree->num_free_nodes++] = victim;
        tree->num_nodes--;
        if (parent != ROOT && is_leaf(tree, parent) && tree->nodes[parent].lock_count == 0)
            policy_add(tree, parent);
    }
    if (num_evicted_p != NULL)
        *num_evicted_p = evicted;
}

/* Adds a leaf under node for keys [present, num_keys) (at least one) on
 * the given blocks (NULL: popped from the tree's own free stack, which
 * holds enough), telling on_stored. */
static kvio_status_t add_leaf(kvio_radix_t *tree, uint32_t node, const kvio_hash_t *keys,
                              size_t present, size_t num_keys, const uint32_t *blocks,
                              uint32_t *child_p)
{
    size_t pages = num_keys - present;
    uint32_t child = new_node(tree, (uint32_t)pages);
    if (child == NO_NODE)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < pages; i++) {
        uint32_t block = blocks != NULL ? blocks[i] : tree->free_blocks[--tree->num_free_blocks];
        tree->block_keys[block] = keys[present + i];
        tree->nodes[child].blocks[i] = block;
    }
    for (size_t i = 0; tree->hooks.on_stored != NULL && i < pages; i++)
        tree->hooks.on_stored(tree->hooks.hook_context, keys[present + i],
                              present + i > 0 ? &keys[present + i - 1] : NULL);
    policy_remove(tree, node); /* no longer a leaf */
    link_child(tree, node, child);
    tree->evictable_tokens += node_tokens(tree, child);
    policy_add(tree, child);
    *child_p = child;
    return KVIO_OK;
}

kvio_status_t kvio_radix_insert_blocks(kvio_radix_t *tree, const kvio_hash_t *keys,
                                       const uint32_t *blocks, size_t num_keys,
                                       uint32_t *tree_blocks_p, kvio_radix_node_t *node_p,
                                       size_t *num_present_p)
{
    if (!tree->hooks.external_blocks)
        return KVIO_ERR_INVALID;
    kvio_radix_node_t node;
    size_t present;
    /* The walk copies the matched path's blocks on its way down. */
    kvio_status_t status = walk(tree, tree, keys, num_keys, tree_blocks_p, &node, &present);
    if (status != KVIO_OK)
        return status;
    if (present < num_keys) {
        status = add_leaf(tree, node, keys, present, num_keys, blocks + present, &node);
        if (status != KVIO_OK)
            return status;
        memcpy(tree_blocks_p + present, blocks + present,
               (num_keys - present) * sizeof(uint32_t));
    }
    *node_p = node;
    *num_present_p = present;
    return KVIO_OK;
}

size_t kvio_radix_peek(const kvio_radix_t *tree, const kvio_hash_t *keys, size_t num_keys,
                       uint32_t *blocks_p)
{
    uint32_t node;
    size_t matched;
    walk(NULL, tree, keys, num_keys, blocks_p, &node, &matched); /* a query cannot fail */
    return matched;
}

void kvio_radix_reset(kvio_radix_t *tree)
{
    for (uint32_t i = 1; i <= tree->num_blocks; i++) {
        policy_remove(tree, i);
        free(tree->nodes[i].blocks);
        tree->nodes[i] = (radix_node_t){0};
    }
    reset_nodes(tree);
    kvio_map_fini(&tree->children);
    tree->scanned_children = false;
    tree->evictable_tokens = tree->protected_tokens = 0;
    if (!tree->hooks.external_blocks) {
        for (uint32_t i = 0; i < tree->num_blocks; i++)
            tree->free_blocks[i] = tree->num_blocks - 1 - i;
        tree->num_free_blocks = tree->num_blocks;
    }
    tree->generation++;
}

uint64_t kvio_radix_generation(const kvio_radix_t *tree)
{
    return tree->generation;
}

kvio_status_t kvio_radix_insert(kvio_radix_t *tree, const kvio_hash_t *keys, size_t num_keys,
                                size_t *num_present_p)
{
    if (tree->hooks.external_blocks)
        return KVIO_ERR_INVALID; /* the caller's blocks: kvio_radix_insert_blocks */
    kvio_radix_node_t node;
    size_t present;
    kvio_status_t status = kvio_radix_match(tree, keys, num_keys, &node, &present);
    if (status != KVIO_OK)
        return status;
    size_t pages = num_keys - present;
    if (pages > 0) {
        if (pages > tree->num_free_blocks) {
            /* The matched path must survive the eviction it triggers. */
            kvio_radix_lock(tree, node);
            kvio_radix_evict(tree, (pages - tree->num_free_blocks) * tree->block_size, NULL);
            kvio_radix_unlock(tree, node);
        }
        if (pages > tree->num_free_blocks)
            return KVIO_ERR_NO_SPACE;
        uint32_t child;
        status = add_leaf(tree, node, keys, present, num_keys, NULL, &child);
        if (status != KVIO_OK)
            return status;
    }
    if (num_present_p != NULL)
        *num_present_p = present;
    return KVIO_OK;
}

size_t kvio_radix_evictable_tokens(const kvio_radix_t *tree)
{
    return tree->evictable_tokens;
}

size_t kvio_radix_protected_tokens(const kvio_radix_t *tree)
{
    return tree->protected_tokens;
}

uint32_t kvio_radix_num_free_blocks(const kvio_radix_t *tree)
{
    return tree->num_free_blocks;
}

size_t kvio_radix_num_nodes(const kvio_radix_t *tree)
{
    return tree->num_nodes;
}

size_t kvio_radix_node_pages(const kvio_radix_t *tree, kvio_radix_node_t node)
{
    return node <= tree->num_blocks ? tree->nodes[node].num_pages : 0;
}

kvio_radix_node_t kvio_radix_node_parent(const kvio_radix_t *tree, kvio_radix_node_t node)
{
    return node != ROOT && node <= tree->num_blocks ? tree->nodes[node].parent : ROOT;
}

uint32_t kvio_radix_node_lock_count(const kvio_radix_t *tree, kvio_radix_node_t node)
{
    return node <= tree->num_blocks ? tree->nodes[node].lock_count : 0;
}

uint64_t kvio_radix_evicted_pages(const kvio_radix_t *tree)
{
    return tree->evicted_pages;
}

/* ---- token keys ---------------------------------------------------------- */

/* A token sequence's page keys, as SGLang pages a RadixKey: whole pages of
 * block_size tokens (a tail shorter than a page is never matched nor
 * stored), each key the chained hash of its page, the salt (SGLang's
 * extra_key) in the first, so equal keys mean equal prefixes and salts. */
static kvio_status_t token_keys(const kvio_radix_t *tree, const uint32_t *tokens,
                                size_t num_tokens, const void *salt, size_t salt_len,
                                kvio_hash_t **keys_p, size_t *num_keys_p)
{
    size_t pages = num_tokens / tree->block_size;
    kvio_hash_t *keys = malloc((pages > 0 ? pages : 1) * sizeof(kvio_hash_t));
    if (keys == NULL)
        return KVIO_ERR_NOMEM;
    kvio_kvcache_hash_tokens(tokens, num_tokens, tree->block_size, salt, salt_len, keys);
    *keys_p = keys;
    *num_keys_p = pages;
    return KVIO_OK;
}

kvio_status_t kvio_radix_match_tokens(kvio_radix_t *tree, const uint32_t *tokens,
                                      size_t num_tokens, const void *salt, size_t salt_len,
                                      kvio_radix_node_t *node_p, size_t *num_tokens_p)
{
    kvio_hash_t *keys = NULL;
    size_t num_keys = 0, matched = 0;
    kvio_status_t status = token_keys(tree, tokens, num_tokens, salt, salt_len, &keys, &num_keys);
    if (status == KVIO_OK)
        status = kvio_radix_match(tree, keys, num_keys, node_p, &matched);
    free(keys);
    if (status == KVIO_OK)
        *num_tokens_p = matched * tree->block_size;
    return status;
}

kvio_status_t kvio_radix_insert_tokens(kvio_radix_t *tree, const uint32_t *tokens,
                                       size_t num_tokens, const void *salt, size_t salt_len,
                                       size_t *num_present_tokens_p)
{
    kvio_hash_t *keys = NULL;
    size_t num_keys = 0, present = 0;
    kvio_status_t status = token_keys(tree, tokens, num_tokens, salt, salt_len, &keys, &num_keys);
    if (status == KVIO_OK)
        status = kvio_radix_insert(tree, keys, num_keys, &present);
    free(keys);
    if (status == KVIO_OK && num_present_tokens_p != NULL)
        *num_present_tokens_p = present * tree->block_size;
    return status;
}
