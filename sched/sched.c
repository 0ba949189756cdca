/* Scheduling policies (fcfs, priority, sjf, lpm, dfs-weight, conservative,
 * pkas) and output-length predictors (oracle, noisy, history, constant),
 * each an ops table in a registry, behind the kvio_sched_* wrappers. */
#include "kvio/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/rng.h"
#include "kvio/stats.h"

static const char *const policy_names[] = {"fcfs", "priority", "sjf", "lpm",
                                           "dfs-weight", "conservative", "pkas", NULL};
static const char *const predictor_names[] = {"oracle", "noisy", "history", "constant", NULL};

const kvio_opt_t kvio_sched_options[] = {
    {.key = "policy", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_sched_config_t, policy),
     .values = policy_names, .default_value = "fcfs",
     .help = "which waiting request is admitted, and which running one is preempted"},
    {.key = "predictor", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_sched_config_t, predictor), .values = predictor_names,
     .default_value = "oracle", .help = "output-length predictor for sjf and pkas"},
    {.key = "noise_sigma", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_sched_config_t, noise_sigma), .default_value = "0.5",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 5,
     .help = "noisy: the prediction is the true length times exp(sigma * N(0,1))"},
    {.key = "constant", .type = KVIO_OPT_INT, .offset = offsetof(kvio_sched_config_t, constant),
     .default_value = "256", .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "constant: the predicted output length"},
    {.key = "history_quantile", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_sched_config_t, history_quantile), .default_value = "0.9",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "history: quantile of the outputs seen for the same input-length bucket"},
    {.key = "aging", .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_sched_config_t, aging_ns),
     .default_value = "30s", .help = "sjf: a request waiting longer than this goes first"},
    {.key = "pkas_margin", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_sched_config_t, pkas_margin), .default_value = "0.05",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 0.9,
     .help = "pkas: fraction of KV capacity the projected peak must leave free"},
    {.key = "lpm_max_queue", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_sched_config_t, lpm_max_queue), .default_value = "128",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "lpm: with more waiting requests than this, fall back to fcfs (SGLang)"},
    {.key = NULL},
};

/* Input-length buckets of the history predictor: powers of two. */
#define HISTORY_BUCKETS 32

typedef struct policy_ops {
    const char *name;
    unsigned caps;
    void (*order)(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                  const kvio_sched_view_t *view);
    bool (*admit)(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                  const kvio_sched_view_t *view);
    size_t (*victim)(kvio_sched_t *sched, const kvio_sched_view_t *view);
} policy_ops_t;

typedef struct predictor_ops {
    const char *name;
    uint32_t (*predict)(kvio_sched_t *sched, const kvio_sched_request_t *request);
    void (*observe)(kvio_sched_t *sched, const kvio_sched_request_t *request);
} predictor_ops_t;

struct kvio_sched {
    kvio_sched_config_t config;
    const policy_ops_t *policy;
    const predictor_ops_t *predictor;
    kvio_rng_t rng;
    kvio_hist_t *history[HISTORY_BUCKETS];
};

/* ---------- ordering helpers ---------- */

typedef int (*compare_fn)(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                          const kvio_sched_request_t *b, int64_t now_ns);

/* Stable insertion sort: queues are short between calls and often sorted. */
static void stable_sort(kvio_sched_t *sched, kvio_sched_request_t **items, size_t count,
                        compare_fn compare, int64_t now_ns)
{
    for (size_t i = 1; i < count; i++) {
        kvio_sched_request_t *item = items[i];
        size_t j = i;
        while (j > 0 && compare(sched, items[j - 1], item, now_ns) > 0) {
            items[j] = items[j - 1];
            j--;
        }
        items[j] = item;
    }
}

static int by_priority(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                       const kvio_sched_request_t *b, int64_t now_ns)
{
    (void)sched;
    (void)now_ns;
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    if (a->arrival_ns != b->arrival_ns)
        return a->arrival_ns < b->arrival_ns ? -1 : 1;
    return 0;
}

static int by_predicted_output(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                               const kvio_sched_request_t *b, int64_t now_ns)
{
    /* Aged requests (waited past the bound) go first, oldest first. */
    bool a_aged = now_ns - a->arrival_ns > sched->config.aging_ns;
    bool b_aged = now_ns - b->arrival_ns > sched->config.aging_ns;
    if (a_aged != b_aged)
        return a_aged ? -1 : 1;
    if (a_aged)
        return a->arrival_ns < b->arrival_ns ? -1 : a->arrival_ns > b->arrival_ns;
    uint32_t a_left = a->predicted_output > a->generated ? a->predicted_output - a->generated : 0;
    uint32_t b_left = b->predicted_output > b->generated ? b->predicted_output - b->generated : 0;
    return a_left < b_left ? -1 : a_left > b_left;
}

static int by_prefix_match(const kvio_sched_t *sched, const kvio_sched_request_t *a,
                           const kvio_sched_request_t *b, int64_t now_ns)
{
    (void)sched;
    (void)now_ns;
    return a->hit_tokens > b->hit_tokens ? -1 : a->hit_tokens < b->hit_tokens;
}

/* ---------- policies ---------- */

static void order_fcfs(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                       const kvio_sched_view_t *view)
{
    (void)sched;
    (void)waiting;
    (void)count;
    (void)view;
}

static void order_priority(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                           const kvio_sched_view_t *view)
{
    stable_sort(sched, waiting, count, by_priority, view->now_ns);
}

static void order_sjf(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                      const kvio_sched_view_t *view)
{
    stable_sort(sched, waiting, count, by_predicted_output, view->now_ns);
}

/* SGLang's lpm: longest cached prefix first, FCFS above the queue bound. */
static void order_lpm(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                      const kvio_sched_view_t *view)
{
    if ((int64_t)count > sched->config.lpm_max_queue)
        return;
    stable_sort(sched, waiting, count, by_prefix_match, view->now_ns);
}

/* dfs-weight (SGLang): a trie of the waiting requests' cached prefixes; a
 * node's weight is the number of requests whose match ends in its subtree.
 * Walk depth-first, heavier children first, emitting a node's own requests
 * after its children. */
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

static void order_dfs_weight(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
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

static bool admit_always(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                         const kvio_sched_view_t *view)
{
    (void)sched;
    (void)candidate;
    (void)view;
    return true;
}

static uint64_t blocks_for(uint64_t tokens, uint32_t block_size)
{
    return (tokens + block_size - 1) / block_size;
}

/* conservative: every running request and the candidate keep room for
 * their whole max_tokens output. */
static bool admit_conservative(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                               const kvio_sched_view_t *view)
{
    (void)sched;
    if (view->num_running == 0)
        return true; /* nothing to wait for: refusing would starve it */
    uint64_t reserved = blocks_for((uint64_t)candidate->prompt_tokens + candidate->max_tokens,
                                   view->block_size);
    for (size_t i = 0; i < view->num_running; i++) {
        const kvio_sched_request_t *running = view->running[i];
        reserved += blocks_for((uint64_t)running->prompt_tokens + running->max_tokens,
                               view->block_size);
    }
    return reserved <= view->capacity_blocks;
}

/* Remaining output a projection assumes: the prediction less what was
 * produced, at least one token (a misprediction falls back to preemption). */
static uint64_t predicted_left(const kvio_sched_request_t *request)
{
    return request->predicted_output > request->generated
               ? request->predicted_output - request->generated
               : 1;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t kvio_sched_projected_peak(const kvio_sched_view_t *view,
                                   const kvio_sched_request_t *candidate)
{
    /* Each request holds ceil((tokens + t) / B) blocks at step t until it
     * finishes after `left` steps. The total is largest just before some
     * request finishes, so evaluate it at t = left_j - 1 for every j. */
    size_t count = view->num_running + (candidate != NULL);
    if (count == 0)
        return 0;
    uint64_t *lefts = malloc(count * sizeof(uint64_t));
    if (lefts == NULL)
        return UINT64_MAX;
    for (size_t i = 0; i < view->num_running; i++)
        lefts[i] = predicted_left(view->running[i]);
    if (candidate != NULL)
        lefts[count - 1] = predicted_left(candidate);
    qsort(lefts, count, sizeof(uint64_t), compare_u64);
    uint64_t peak = 0;
    for (size_t j = 0; j < count; j++) {
        if (j > 0 && lefts[j] == lefts[j - 1])
            continue;
        uint64_t t = lefts[j] - 1;
        uint64_t total = 0;
        for (size_t i = 0; i < count; i++) {
            const kvio_sched_request_t *request =
                i < view->num_running ? view->running[i] : candidate;
            if (predicted_left(request) <= t)
                continue;
            uint64_t tokens = (uint64_t)request->prompt_tokens + request->generated + t;
            total += blocks_for(tokens, view->block_size);
        }
        if (total > peak)
            peak = total;
    }
    free(lefts);
    return peak;
}

/* pkas: admit only if the projected peak of running + candidate stays within
 * capacity × (1 − margin). */
static bool admit_pkas(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                       const kvio_sched_view_t *view)
{
    if (view->num_running == 0)
        return true; /* nothing to wait for: refusing would starve it */
    double limit = (double)view->capacity_blocks * (1.0 - sched->config.pkas_margin);
    return (double)kvio_sched_projected_peak(view, candidate) <= limit;
}

static size_t victim_last_admitted(kvio_sched_t *sched, const kvio_sched_view_t *view)
{
    (void)sched;
    size_t worst = 0;
    for (size_t i = 1; i < view->num_running; i++)
        if (view->running[i]->admit_seq > view->running[worst]->admit_seq)
            worst = i;
    return worst;
}

static size_t victim_priority(kvio_sched_t *sched, const kvio_sched_view_t *view)
{
    size_t worst = 0;
    for (size_t i = 1; i < view->num_running; i++)
        if (by_priority(sched, view->running[i], view->running[worst], 0) > 0)
            worst = i;
    return worst;
}

static const policy_ops_t policy_registry[] = {
    [KVIO_POLICY_FCFS] = {.name = "fcfs", .order = order_fcfs, .admit = admit_always,
                          .victim = victim_last_admitted},
    [KVIO_POLICY_PRIORITY] = {.name = "priority", .order = order_priority,
                              .admit = admit_always, .victim = victim_priority},
    [KVIO_POLICY_SJF] = {.name = "sjf", .order = order_sjf, .admit = admit_always,
                         .victim = victim_last_admitted},
    [KVIO_POLICY_LPM] = {.name = "lpm", .caps = KVIO_SCHED_CAP_NEEDS_HITS, .order = order_lpm,
                         .admit = admit_always, .victim = victim_last_admitted},
    [KVIO_POLICY_DFS_WEIGHT] = {.name = "dfs-weight", .caps = KVIO_SCHED_CAP_NEEDS_HITS,
                                .order = order_dfs_weight, .admit = admit_always,
                                .victim = victim_last_admitted},
    [KVIO_POLICY_CONSERVATIVE] = {.name = "conservative", .order = order_fcfs,
                                  .admit = admit_conservative, .victim = victim_last_admitted},
    [KVIO_POLICY_PKAS] = {.name = "pkas", .caps = KVIO_SCHED_CAP_PROJECTS, .order = order_fcfs,
                          .admit = admit_pkas,
                          .victim = victim_last_admitted},
};

/* ---------- predictors ---------- */

static uint32_t clamp_prediction(double value, const kvio_sched_request_t *request)
{
    if (!(value >= 1))
        value = 1;
    if (request->max_tokens > 0 && value > request->max_tokens)
        value = request->max_tokens;
    return (uint32_t)llround(value);
}

static uint32_t predict_oracle(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    (void)sched;
    return clamp_prediction(request->output_tokens, request);
}

static uint32_t predict_noisy(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    double error = exp(sched->config.noise_sigma * kvio_rng_normal(&sched->rng));
    return clamp_prediction(request->output_tokens * error, request);
}

static uint32_t predict_constant(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    return clamp_prediction((double)sched->config.constant, request);
}

static unsigned history_bucket(uint32_t prompt_tokens)
{
    unsigned bucket = 0;
    while (bucket + 1 < HISTORY_BUCKETS && (1u << (bucket + 1)) <= prompt_tokens)
        bucket++;
    return bucket;
}

static uint32_t predict_history(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    /* Until a bucket has seen outputs, fall back to its neighbours, then to
     * the configured constant. */
    unsigned bucket = history_bucket(request->prompt_tokens);
    for (unsigned distance = 0; distance < HISTORY_BUCKETS; distance++) {
        for (int sign = -1; sign <= 1; sign += 2) {
            int index = (int)bucket + sign * (int)distance;
            if (index < 0 || index >= HISTORY_BUCKETS || sched->history[index] == NULL)
                continue;
            if (kvio_hist_count(sched->history[index]) > 0)
                return clamp_prediction(
                    kvio_hist_quantile(sched->history[index], sched->config.history_quantile),
                    request);
        }
    }
    return clamp_prediction((double)sched->config.constant, request);
}

static void observe_history(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    kvio_hist_t *hist = sched->history[history_bucket(request->prompt_tokens)];
    if (hist != NULL)
        kvio_hist_record(hist, request->generated);
}

static void observe_nothing(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    (void)sched;
    (void)request;
}

static const predictor_ops_t predictor_registry[] = {
    [KVIO_PREDICTOR_ORACLE] = {.name = "oracle", .predict = predict_oracle,
                               .observe = observe_nothing},
    [KVIO_PREDICTOR_NOISY] = {.name = "noisy", .predict = predict_noisy,
                              .observe = observe_nothing},
    [KVIO_PREDICTOR_HISTORY] = {.name = "history", .predict = predict_history,
                                .observe = observe_history},
    [KVIO_PREDICTOR_CONSTANT] = {.name = "constant", .predict = predict_constant,
                                 .observe = observe_nothing},
};

/* ---------- wrappers ---------- */

kvio_status_t kvio_sched_create(const kvio_sched_config_t *config, uint64_t seed,
                                kvio_sched_t **sched_p)
{
    if (config->policy < 0 || config->policy > KVIO_POLICY_PKAS || config->predictor < 0 ||
        config->predictor > KVIO_PREDICTOR_CONSTANT)
        return KVIO_ERR_INVALID;
    kvio_sched_t *sched = calloc(1, sizeof(*sched));
    if (sched == NULL)
        return KVIO_ERR_NOMEM;
    sched->config = *config;
    sched->policy = &policy_registry[config->policy];
    sched->predictor = &predictor_registry[config->predictor];
    kvio_rng_seed(&sched->rng, seed, 0, "predictor");
    if (config->predictor == KVIO_PREDICTOR_HISTORY) {
        for (unsigned i = 0; i < HISTORY_BUCKETS; i++) {
            if (kvio_hist_create(&sched->history[i]) != KVIO_OK) {
                kvio_sched_destroy(sched);
                return KVIO_ERR_NOMEM;
            }
        }
    }
    *sched_p = sched;
    return KVIO_OK;
}

void kvio_sched_destroy(kvio_sched_t *sched)
{
    if (sched == NULL)
        return;
    for (unsigned i = 0; i < HISTORY_BUCKETS; i++)
        kvio_hist_destroy(sched->history[i]);
    free(sched);
}

const char *kvio_sched_policy_name(const kvio_sched_t *sched)
{
    return sched->policy->name;
}

const char *kvio_policy_kind_name(int kind)
{
    return kind >= 0 && kind <= KVIO_POLICY_PKAS ? policy_names[kind] : "?";
}

bool kvio_sched_wants_hits(const kvio_sched_t *sched, size_t count)
{
    if (!(sched->policy->caps & KVIO_SCHED_CAP_NEEDS_HITS))
        return false;
    return sched->policy != &policy_registry[KVIO_POLICY_LPM] ||
           (int64_t)count <= sched->config.lpm_max_queue;
}

unsigned kvio_sched_caps(const kvio_sched_t *sched)
{
    return sched->policy->caps;
}

void kvio_sched_predict(kvio_sched_t *sched, kvio_sched_request_t *request)
{
    request->predicted_output = sched->predictor->predict(sched, request);
}

void kvio_sched_observe(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    sched->predictor->observe(sched, request);
}

void kvio_sched_order(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                      const kvio_sched_view_t *view)
{
    sched->policy->order(sched, waiting, count, view);
}

bool kvio_sched_admit(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                      const kvio_sched_view_t *view)
{
    return sched->policy->admit(sched, candidate, view);
}

size_t kvio_sched_victim(kvio_sched_t *sched, const kvio_sched_view_t *view)
{
    return sched->policy->victim(sched, view);
}
