/* dfs-weight (SGLang): a trie of the waiting requests' cached prefixes; a
 * node's weight is the number of requests whose match ends in its subtree.
 * The walk goes depth-first, heavier children first, and emits a node's
 * own requests after its children. */
#include "sched/sched_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct trie_node {
    kvio_hash_t key;
    uint32_t first_child, next_sibling;
    uint32_t weight;
    uint32_t first_request; /* index into the waiting list chain, UINT32_MAX: none */
    uint32_t last_request;
} trie_node_t;

typedef struct trie {
    trie_node_t *nodes;
    size_t count, capacity;
    uint32_t *next_request; /* per waiting index: the next request ending at the same node */
} trie_t;

static uint32_t trie_add(trie_t *trie, kvio_hash_t key)
{
    if (trie->count == trie->capacity) {
        size_t capacity = trie->capacity ? 2 * trie->capacity : 64;
        trie_node_t *nodes = realloc(trie->nodes, capacity * sizeof(*nodes));
        if (nodes == NULL)
            return UINT32_MAX;
        trie->nodes = nodes;
        trie->capacity = capacity;
    }
    trie->nodes[trie->count] = (trie_node_t){.key = key, .first_child = UINT32_MAX,
                                             .next_sibling = UINT32_MAX,
                                             .first_request = UINT32_MAX,
                                             .last_request = UINT32_MAX};
    return (uint32_t)trie->count++;
}

static void trie_emit(trie_t *trie, uint32_t node, kvio_sched_request_t **source,
                      kvio_sched_request_t **out, size_t *out_count)
{
    /* Children by weight, heaviest first (stable for equal weights). */
    uint32_t children[256];
    size_t num_children = 0;
    for (uint32_t child = trie->nodes[node].first_child; child != UINT32_MAX;
         child = trie->nodes[child].next_sibling) {
        if (num_children < 256)
            children[num_children++] = child;
    }
    for (size_t i = 1; i < num_children; i++) {
        uint32_t item = children[i];
        size_t j = i;
        while (j > 0 && trie->nodes[children[j - 1]].weight < trie->nodes[item].weight) {
            children[j] = children[j - 1];
            j--;
        }
        children[j] = item;
    }
    for (size_t i = 0; i < num_children; i++)
        trie_emit(trie, children[i], source, out, out_count);
    for (uint32_t r = trie->nodes[node].first_request; r != UINT32_MAX; r = trie->next_request[r])
        out[(*out_count)++] = source[r];
}

static void order_by_weight(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                             const kvio_sched_view_t *view)
{
    (void)sched;
    if (count < 2)
        return;
    trie_t trie = {0};
    kvio_sched_request_t **source = malloc(count * sizeof(*source));
    trie.next_request = malloc(count * sizeof(uint32_t));
    if (source == NULL || trie.next_request == NULL ||
        trie_add(&trie, (kvio_hash_t){0, 0}) == UINT32_MAX)
        goto out; /* out of memory: keep FCFS order */
    memcpy(source, waiting, count * sizeof(*source));
    for (size_t r = 0; r < count; r++) {
        const kvio_sched_request_t *request = waiting[r];
        size_t depth = view->block_size ? request->hit_tokens / view->block_size : 0;
        if (depth > request->num_hashes)
            depth = request->num_hashes;
        uint32_t node = 0;
        trie.nodes[0].weight++;
        for (size_t d = 0; d < depth; d++) {
            uint32_t child = trie.nodes[node].first_child;
            while (child != UINT32_MAX && !kvio_hash_equal(trie.nodes[child].key, request->hashes[d]))
                child = trie.nodes[child].next_sibling;
            if (child == UINT32_MAX) {
                child = trie_add(&trie, request->hashes[d]);
                if (child == UINT32_MAX)
                    goto out;
                /* Append as the last child so equal weights keep arrival order. */
                uint32_t *link = &trie.nodes[node].first_child;
                while (*link != UINT32_MAX)
                    link = &trie.nodes[*link].next_sibling;
                *link = child;
            }
            node = child;
            trie.nodes[node].weight++;
        }
        trie.next_request[r] = UINT32_MAX;
        if (trie.nodes[node].first_request == UINT32_MAX)
            trie.nodes[node].first_request = (uint32_t)r;
        else
            trie.next_request[trie.nodes[node].last_request] = (uint32_t)r;
        trie.nodes[node].last_request = (uint32_t)r;
    }
    size_t emitted = 0;
    trie_emit(&trie, 0, source, waiting, &emitted);
    if (emitted != count) /* a node had more than 256 children: keep FCFS order */
        memcpy(waiting, source, count * sizeof(*source));
out:
    free(trie.nodes);
    free(trie.next_request);
    free(source);
}

const kvio_sched_policy_ops_t kvio_policy_dfs_weight = {
    .plugin = {.name = "dfs-weight",
               .help = "requests sharing the heaviest cached prefix subtree first (SGLang)",
               .options = kvio_no_options},
    .caps = KVIO_SCHED_CAP_NEEDS_HITS,
    .order = order_by_weight,
};
