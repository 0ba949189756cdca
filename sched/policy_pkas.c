/* pkas (predictive KV-aware admission): admit a request only if the peak KV
 * the running set and it are projected to hold, from predicted remaining
 * outputs, stays within capacity x (1 - margin). Blocks are counted as the
 * pool holds them: a prefix many requests share once (it counted once per
 * request, so a long shared system prompt admitted a quarter of what fit). */
#include "sched/sched_int.h"

#include <stdlib.h>

typedef struct pkas_options {
    double margin;
} pkas_options_t;

static const kvio_opt_t pkas_options[] = {
    {.key = "margin", .type = KVIO_OPT_DOUBLE, .offset = offsetof(pkas_options_t, margin),
     .default_value = "0.05", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 0.9,
     .help = "fraction of KV capacity the projected peak must leave free"},
    {.key = NULL},
};

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

/* Blocks a request gains by decoding t more tokens. */
static uint64_t growth(const kvio_sched_request_t *request, uint64_t t, uint32_t block_size)
{
    uint64_t tokens = (uint64_t)request->prompt_tokens + request->generated;
    return kvio_sched_blocks_for(tokens + t, block_size) -
           kvio_sched_blocks_for(tokens, block_size);
}

/* The blocks at step t: those in use now and the candidate's, plus the
 * growth of every request still running, less the blocks only a finished
 * request held. */
static uint64_t blocks_at(const kvio_sched_view_t *view, const kvio_sched_request_t *candidate,
                          uint64_t t)
{
    size_t count = view->num_running + (candidate != NULL);
    int64_t total = (int64_t)view->used_blocks + (candidate != NULL ? candidate->held_blocks : 0);
    for (size_t i = 0; i < count; i++) {
        const kvio_sched_request_t *request =
            i < view->num_running ? view->running[i] : candidate;
        if (predicted_left(request) > t)
            total += (int64_t)growth(request, t, view->block_size);
        else
            total -= (int64_t)request->held_blocks -
                     (int64_t)(i < view->num_running ? request->shared_blocks : 0);
    }
    return total > 0 ? (uint64_t)total : 0;
}

uint64_t kvio_sched_projected_peak(const kvio_sched_view_t *view,
                                   const kvio_sched_request_t *candidate)
{
    /* Growth only rises until a request ends, so the total is largest just
     * before some request finishes: evaluate it at t = left_j - 1 for every
     * j. */
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
        uint64_t total = blocks_at(view, candidate, lefts[j] - 1);
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
    const pkas_options_t *options = sched->policy_options;
    double limit = (double)view->capacity_blocks * (1.0 - options->margin);
    return (double)kvio_sched_projected_peak(view, candidate) <= limit;
}

const kvio_sched_policy_ops_t kvio_policy_pkas = {
    .plugin = {.name = "pkas", .help = "admit only if the projected KV peak fits (predictive)",
               .options = pkas_options, .options_size = sizeof(pkas_options_t)},
    .caps = KVIO_SCHED_CAP_PROJECTS,
    .admit = admit_pkas,
};
