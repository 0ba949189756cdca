/* The scheduler: the `serve.scheduler` section (a policy and a predictor,
 * each chosen by name from its registry), the state a policy and a predictor
 * run in, the kvio_sched_* wrappers the engine calls, and the helpers the
 * policies share. */
#include "sched/sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const kvio_opt_t kvio_sched_options[] = {
    {.key = "policy", .type = KVIO_OPT_PLUGIN, .offset = offsetof(kvio_sched_config_t, policy),
     .registry = &kvio_sched_policies, .default_value = "fcfs",
     .help = "which waiting request is admitted, and which running one is preempted"},
    {.key = "predictor", .type = KVIO_OPT_PLUGIN,
     .offset = offsetof(kvio_sched_config_t, predictor), .registry = &kvio_sched_predictors,
     .default_value = "oracle", .help = "output-length predictor for sjf and pkas"},
    {.key = NULL},
};

/* ---------- helpers the policies share ---------- */

void kvio_sched_stable_sort(kvio_sched_t *sched, kvio_sched_request_t **items, size_t count,
                            kvio_sched_compare_t compare, int64_t now_ns)
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

int kvio_sched_by_priority(const kvio_sched_t *sched, const kvio_sched_request_t *a,
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

uint64_t kvio_sched_blocks_for(uint64_t tokens, uint32_t block_size)
{
    return (tokens + block_size - 1) / block_size;
}

/* vLLM's victim: the request admitted last (a resumed one counts as new). */
static size_t victim_last_admitted(const kvio_sched_view_t *view)
{
    size_t worst = 0;
    for (size_t i = 1; i < view->num_running; i++)
        if (view->running[i]->admit_seq > view->running[worst]->admit_seq)
            worst = i;
    return worst;
}

/* ---------- the scheduler ---------- */

kvio_status_t kvio_sched_create(const kvio_sched_config_t *config, uint64_t seed,
                                kvio_sched_t **sched_p)
{
    if (config->policy.plugin == NULL || config->predictor.plugin == NULL)
        return KVIO_ERR_INVALID;
    kvio_sched_t *sched = calloc(1, sizeof(*sched));
    if (sched == NULL)
        return KVIO_ERR_NOMEM;
    sched->policy = (const kvio_sched_policy_ops_t *)config->policy.plugin;
    sched->policy_options = kvio_choice_options(&config->policy);
    sched->predictor = (const kvio_sched_predictor_ops_t *)config->predictor.plugin;
    sched->predictor_options = kvio_choice_options(&config->predictor);
    kvio_status_t status = KVIO_OK;
    if ((sched->policy->state_size > 0 &&
         (sched->policy_state = calloc(1, sched->policy->state_size)) == NULL) ||
        (sched->predictor->state_size > 0 &&
         (sched->predictor_state = calloc(1, sched->predictor->state_size)) == NULL))
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK && sched->policy->init != NULL)
        status = sched->policy->init(sched, seed);
    if (status == KVIO_OK && sched->predictor->init != NULL)
        status = sched->predictor->init(sched, seed);
    if (status != KVIO_OK) {
        kvio_sched_destroy(sched);
        return status;
    }
    *sched_p = sched;
    return KVIO_OK;
}

void kvio_sched_destroy(kvio_sched_t *sched)
{
    if (sched == NULL)
        return;
    if (sched->policy->fini != NULL && sched->policy_state != NULL)
        sched->policy->fini(sched);
    if (sched->predictor->fini != NULL && sched->predictor_state != NULL)
        sched->predictor->fini(sched);
    free(sched->policy_state);
    free(sched->predictor_state);
    free(sched);
}

bool kvio_sched_wants_hits(const kvio_sched_t *sched, size_t count)
{
    if (sched->policy->wants_hits != NULL)
        return sched->policy->wants_hits(sched, count);
    return (sched->policy->caps & KVIO_SCHED_CAP_NEEDS_HITS) != 0;
}

unsigned kvio_sched_caps(const kvio_sched_t *sched)
{
    return sched->policy->caps;
}

void kvio_sched_predict(kvio_sched_t *sched, kvio_sched_request_t *request)
{
    double value = sched->predictor->predict(sched, request);
    if (!(value >= 1))
        value = 1;
    if (request->max_tokens > 0 && value > request->max_tokens)
        value = request->max_tokens;
    request->predicted_output = (uint32_t)llround(value);
}

void kvio_sched_observe(kvio_sched_t *sched, const kvio_sched_request_t *request)
{
    if (sched->predictor->observe != NULL)
        sched->predictor->observe(sched, request);
}

void kvio_sched_order(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                      const kvio_sched_view_t *view)
{
    if (sched->policy->order != NULL)
        sched->policy->order(sched, waiting, count, view);
}

bool kvio_sched_admit(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                      const kvio_sched_view_t *view)
{
    return sched->policy->admit == NULL || sched->policy->admit(sched, candidate, view);
}

size_t kvio_sched_victim(kvio_sched_t *sched, const kvio_sched_view_t *view)
{
    if (sched->policy->victim != NULL)
        return sched->policy->victim(sched, view);
    return victim_last_admitted(view);
}
