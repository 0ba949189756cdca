/* Creating a stream from its `stream:` section: the prompts come from a
 * trace or the synthetic generator, and rollout groups (group.n > 1) wrap
 * them. It stands above the sources; they call only the stream object
 * (stream.c) below them, the group source to read its inner stream. */
#include "workloads/workloads_int.h"

#include <stdio.h>

static kvio_status_t stream_create_prompts(const kvio_stream_config_t *config, uint64_t seed,
                                           int64_t duration_ns, kvio_stream_t **stream_p,
                                           char *error_p, size_t error_len)
{
    if (config->trace.path != NULL && config->trace.path[0] != '\0') {
        if (config->users > 0) {
            snprintf(error_p, error_len, "stream.users: a closed loop of users runs the "
                     "synthetic stream; a trace (stream.trace.path) keeps its own times");
            return KVIO_ERR_CONFIG;
        }
        kvio_stream_trace_config_t options = config->trace;
        if (config->requests > 0 && (options.limit == 0 || options.limit > config->requests))
            options.limit = config->requests;
        if (options.max_tokens == 0)
            options.max_tokens = config->max_tokens;
        options.end_ns = duration_ns;
        options.stream = config;
        options.seed = seed;
        return kvio_stream_open_trace(config->trace.path, (kvio_trace_format_t)options.format,
                                      &options, stream_p, error_p, error_len);
    }
    return kvio_synthetic_create(config, seed, duration_ns, stream_p, error_p, error_len);
}

kvio_status_t kvio_stream_create(const kvio_stream_config_t *config, uint64_t seed,
                                 int64_t duration_ns, kvio_stream_t **stream_p, char *error_p,
                                 size_t error_len)
{
    if (config->group.n > 1 && config->users > 0) {
        snprintf(error_p, error_len, "stream.group.n: rollout groups come from an open loop "
                 "(arrival or a trace), not from stream.users' closed loop");
        return KVIO_ERR_CONFIG;
    }
    kvio_stream_t *prompts = NULL;
    kvio_status_t status = stream_create_prompts(config, seed, duration_ns, &prompts, error_p,
                                                 error_len);
    if (status != KVIO_OK)
        return status;
    if (config->group.n <= 1) {
        *stream_p = prompts;
        return KVIO_OK;
    }
    status = kvio_group_stream_create(prompts, (uint32_t)config->group.n, &config->output_tokens,
                                      seed, stream_p);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "stream.group: out of memory");
    return status;
}
