/* kv-cache.py's users (kv_cache/workload.py UserSimulator: three profiles,
 * QoS classes 15 % interactive, 35 % responsive, 50 % batch) drawn exactly
 * as it draws them after random.seed(seed), and its conversations
 * (kv_cache/conversation.py ConversationManager: at most 1,000 open, the
 * least recently used one dropped for a new one, 50 turns at most). */
#include "mlperf/mlperf_int.h"

#include <stdlib.h>
#include <string.h>

#include "kvio/array.h"

/* UserSimulator.DEFAULT_USER_TEMPLATES (config.yaml's user_templates). */
static const struct {
    int64_t context[2], generation[2];
    double think_time_s[2];
} templates[MLPERF_USER_TYPES] = {
    [MLPERF_USER_CHATBOT] = {{512, 4096}, {50, 200}, {0.1, 0.5}},
    [MLPERF_USER_CODING] = {{4096, 25000}, {100, 500}, {0.2, 1.0}},
    [MLPERF_USER_DOCUMENT] = {{4096, 16384}, {200, 800}, {0.3, 1.5}},
};

/* qos_distribution: interactive_probability 0.15, responsive_threshold 0.50. */
#define INTERACTIVE_PROBABILITY 0.15
#define RESPONSIVE_THRESHOLD 0.50

kvio_status_t mlperf_users_generate(uint64_t seed, int64_t num_users, mlperf_user_t **users_p)
{
    mlperf_user_t *users = calloc((size_t)num_users + 1, sizeof(*users));
    if (users == NULL)
        return KVIO_ERR_NOMEM;
    mlperf_pyrandom_t random;
    mlperf_pyrandom_seed(&random, seed);
    for (int64_t i = 0; i < num_users; i++) {
        mlperf_user_t *user = &users[i];
        /* generate_mixed_users: the type, then the class ... */
        user->id = (uint32_t)i;
        user->type = (int)mlperf_pyrandom_choice(&random, MLPERF_USER_TYPES);
        double draw = mlperf_pyrandom_random(&random);
        user->qos = draw < INTERACTIVE_PROBABILITY ? MLPERF_QOS_INTERACTIVE
                    : draw < RESPONSIVE_THRESHOLD  ? MLPERF_QOS_RESPONSIVE
                                                   : MLPERF_QOS_BATCH;
        user->priority = 3 - user->qos; /* QOS_PROFILES' priority: 3, 2, 1 */
        /* ... then generate_user's context, generation and think time. */
        user->context_length = mlperf_pyrandom_randint(&random, templates[user->type].context[0],
                                                       templates[user->type].context[1]);
        user->generation_length = mlperf_pyrandom_randint(
            &random, templates[user->type].generation[0], templates[user->type].generation[1]);
        user->think_time_s = mlperf_pyrandom_uniform(&random, templates[user->type].think_time_s[0],
                                                     templates[user->type].think_time_s[1]);
        /* Once threads run, kv-cache.py's draws interleave on one global
         * generator; kvio gives each user a stream of its own. */
        kvio_rng_seed(&user->rng, seed, (uint32_t)i, "mlperf user");
    }
    *users_p = users;
    return KVIO_OK;
}

/* ---------- conversations ---------- */

kvio_status_t mlperf_conversations_init(mlperf_conversations_t *conversations)
{
    *conversations = (mlperf_conversations_t){.next_id = 1, .max_conversations = 1000,
                                              .max_turns = 50};
    return kvio_map_reserve(&conversations->index, 2 * conversations->max_conversations);
}

void mlperf_conversations_fini(mlperf_conversations_t *conversations)
{
    free(conversations->items);
    kvio_map_fini(&conversations->index);
}

mlperf_conversation_t *mlperf_conversation_find(mlperf_conversations_t *conversations,
                                                uint64_t id)
{
    uint32_t slot = kvio_map_get(&conversations->index, id);
    return slot != 0 ? &conversations->items[slot - 1] : NULL;
}

/* _evict_oldest_conversation: the least recent (last access, then creation). */
static void evict_oldest(mlperf_conversations_t *conversations)
{
    size_t oldest = 0;
    for (size_t i = 1; i < conversations->count; i++) {
        const mlperf_conversation_t *a = &conversations->items[i];
        const mlperf_conversation_t *b = &conversations->items[oldest];
        if (a->last_access_ns < b->last_access_ns ||
            (a->last_access_ns == b->last_access_ns && a->created_ns < b->created_ns))
            oldest = i;
    }
    (void)kvio_map_set(&conversations->index, conversations->items[oldest].id, 0);
    size_t last = --conversations->count;
    if (oldest != last) {
        conversations->items[oldest] = conversations->items[last];
        (void)kvio_map_set(&conversations->index, conversations->items[oldest].id,
                           (uint32_t)oldest + 1);
    }
}

uint64_t mlperf_conversation_start(mlperf_conversations_t *conversations, uint32_t user,
                                   uint64_t now_ns)
{
    if (conversations->count >= conversations->max_conversations && conversations->count > 0)
        evict_oldest(conversations);
    if (kvio_array_reserve((void **)&conversations->items, &conversations->capacity,
                           conversations->count + 1, sizeof(mlperf_conversation_t),
                           conversations->max_conversations) != KVIO_OK)
        return 0;
    uint64_t id = conversations->next_id++;
    if (kvio_map_set(&conversations->index, id, (uint32_t)conversations->count + 1) != KVIO_OK)
        return 0;
    conversations->items[conversations->count++] = (mlperf_conversation_t){
        .id = id, .user = user, .last_access_ns = now_ns, .created_ns = now_ns};
    return id;
}
