/* Rollout groups (RL post-training, GRPO): every prompt of an inner stream
 * is sampled n times. The n samples are n requests with the prompt's
 * segments or trace ids, its arrival and one group id; each has its own
 * output (its own content and length), as vLLM's parallel sampling (the
 * request's `n`) fans one prompt out into n child requests added together,
 * which then share the prompt's cached blocks. */
#include "workloads_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct group_source {
    kvio_stream_t *inner;       /* owned */
    uint32_t n;
    kvio_dist_t output_tokens;  /* samples 1..n-1 draw their lengths here */
    kvio_rng_t rng;
    kvio_request_t *base;       /* the prompt being sampled (a clone) */
    uint32_t next_index;        /* the next sample of base */
    uint64_t emitted, groups;
    kvio_request_t request;     /* what next() lends */
} group_source_t;

/* A sample's own output content: unique to (prompt's output, index). */
static uint64_t sample_content(uint64_t base_content, uint32_t index)
{
    if (index == 0)
        return base_content;
    uint64_t x = base_content ^ ((uint64_t)index * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return KVIO_CONTENT_UNIQUE | (x & ((1ull << 60) - 1));
}

static uint32_t sample_length(group_source_t *group, const kvio_request_t *base)
{
    double value = kvio_dist_sample(&group->output_tokens, &group->rng);
    uint32_t tokens = !(value >= 1) ? 1
                      : value >= KVIO_STREAM_MAX_TOKENS ? KVIO_STREAM_MAX_TOKENS
                                                        : (uint32_t)(value + 0.5);
    if (base->max_tokens > 0 && tokens > base->max_tokens)
        tokens = base->max_tokens;
    return tokens;
}

static kvio_status_t group_next(void *source, const kvio_request_t **request_p)
{
    group_source_t *group = source;
    if (group->base == NULL || group->next_index >= group->n) {
        kvio_request_destroy(group->base);
        group->base = NULL;
        const kvio_request_t *prompt = NULL;
        kvio_status_t status = kvio_stream_next(group->inner, &prompt);
        if (status != KVIO_OK || prompt == NULL) {
            *request_p = NULL;
            return status;
        }
        if ((status = kvio_request_clone(prompt, &group->base)) != KVIO_OK)
            return status;
        group->next_index = 0;
        group->groups++;
    }
    const kvio_request_t *base = group->base;
    uint32_t index = group->next_index++;
    group->request = *base;
    group->request.id = group->emitted++;
    group->request.output_content_id = sample_content(base->output_content_id, index);
    if (index > 0)
        group->request.output_tokens = sample_length(group, base);
    group->request.group_id = group->groups;
    group->request.group_index = index;
    group->request.group_size = group->n;
    *request_p = &group->request;
    return KVIO_OK;
}

static void group_destroy(void *source)
{
    group_source_t *group = source;
    kvio_stream_destroy(group->inner);
    kvio_request_destroy(group->base);
    kvio_dist_clear(&group->output_tokens);
    free(group);
}

static const kvio_stream_source_ops_t group_ops = {
    .name = "group", .next = group_next, .destroy = group_destroy};

kvio_status_t kvio_group_stream_create(kvio_stream_t *inner, uint32_t n,
                                       const kvio_dist_t *output_tokens, uint64_t seed,
                                       kvio_stream_t **stream_p)
{
    group_source_t *group = calloc(1, sizeof(*group));
    kvio_stream_t *stream = calloc(1, sizeof(*stream));
    kvio_status_t status = group != NULL && stream != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    if (status == KVIO_OK)
        status = kvio_dist_copy(output_tokens, &group->output_tokens);
    if (status != KVIO_OK) {
        free(group);
        free(stream);
        kvio_stream_destroy(inner);
        return status;
    }
    group->inner = inner;
    group->n = n;
    kvio_rng_seed(&group->rng, seed, 0, "stream.group");
    stream->ops = &group_ops;
    stream->source = group;
    *stream_p = stream;
    return KVIO_OK;
}
