/* The stream object and what every source shares: the `stream:` option
 * tables, iteration, request copies and the derivation of block hashes from
 * segments or trace block ids. Creation, which picks and stacks the sources,
 * stands above them in stream_create.c. */
#include "workloads/workloads_int.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char *const process_names[] = {"poisson", "gamma", "constant", "phases", "batch",
                                             NULL};
static const char *const phase_process_names[] = {"poisson", "gamma", "constant", NULL};
static const char *const position_unit_names[] = {"fraction", "tokens", NULL};
static const char *const trace_format_names[] = {"auto",     "kvio",         "mooncake", "azure",
                                                 "burstgpt", "conversation", NULL};
static const char *const chat_template_names[] = {"auto", "chatml", "llama3", "harmony", NULL};

#define MAX_TOKENS_TEXT 10000000

static const kvio_opt_t phase_options[] = {
    {.key = "duration", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_stream_phase_t, duration_ns), .default_value = "60s",
     .flags = KVIO_OPT_HAS_MIN, .min = 1e6, .help = "how long the phase lasts"},
    {.key = "rate", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_stream_phase_t, rate),
     .default_value = "10", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e7,
     .help = "requests per second in this phase (0: idle)"},
    {.key = "process", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_stream_phase_t, process),
     .default_value = "poisson", .values = phase_process_names,
     .help = "arrival process within the phase"},
    {.key = "cv", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_stream_phase_t, cv),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01,
     .max = 100, .help = "gamma: coefficient of variation of the gaps"},
    {.key = NULL},
};

static const kvio_opt_t arrival_options[] = {
    {.key = "process", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_stream_arrival_config_t, process), .default_value = "poisson",
     .values = process_names,
     .help = "poisson (rate), gamma (rate, cv: bursty), constant (rate), phases (a list), "
             "batch (every conversation at time 0)"},
    {.key = "rate", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_stream_arrival_config_t, rate), .default_value = "10",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1e-6, .max = 1e7,
     .help = "mean requests per second, every turn of a session counted"},
    {.key = "cv", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_stream_arrival_config_t, cv),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01,
     .max = 100, .help = "gamma: coefficient of variation of the gaps (1 is poisson)"},
    {.key = "phases", .type = KVIO_OPT_LIST,
     .offset = offsetof(kvio_stream_arrival_config_t, phases), .options = phase_options,
     .element_size = sizeof(kvio_stream_phase_t),
     .help = "phases: [{duration, rate, process, cv}, ...]; the stream ends after the last"},
    {.key = "count", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_arrival_config_t, count), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e9,
     .help = "batch: conversations that arrive at time 0 (0: stream.requests)"},
    {.key = NULL},
};

static const kvio_opt_t system_prompt_options[] = {
    {.key = "count", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_system_prompts_config_t, count), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e6,
     .help = "distinct system prompts (0: none)"},
    {.key = "tokens", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_system_prompts_config_t, tokens), .default_value = "600",
     .help = "length of each system prompt, drawn once per prompt"},
    {.key = "zipf", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_stream_system_prompts_config_t, zipf), .default_value = "1.1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 10,
     .help = "popularity: P(k-th prompt) ~ k^-zipf (0: uniform)"},
    {.key = NULL},
};

static const kvio_opt_t document_options[] = {
    {.key = "count", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_documents_config_t, count), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e7,
     .help = "documents in the corpus (0: none)"},
    {.key = "tokens", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_documents_config_t, tokens),
     .default_value = "{dist: lognormal, mean: 1000, stddev: 500, min: 64, max: 8192}",
     .help = "length of each document, drawn once per document"},
    {.key = "zipf", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_stream_documents_config_t, zipf), .default_value = "1.0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 10,
     .help = "popularity: P(k-th document) ~ k^-zipf (0: uniform)"},
    {.key = "per_request", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_documents_config_t, per_request), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 64,
     .help = "distinct documents in each request's prompt, most relevant first"},
    {.key = NULL},
};

static const kvio_opt_t session_options[] = {
    {.key = "turns", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_sessions_config_t, turns), .default_value = "1",
     .flags = KVIO_OPT_HAS_MAX, .max = 10000,
     .help = "turns per conversation (rounded, 1 to 10000); 1: independent requests"},
    {.key = "think_time", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_sessions_config_t, think_time),
     .default_value = "{dist: exponential, mean: 20s}", .unit = KVIO_UNIT_DURATION,
     .help = "from one turn's arrival to the next turn's (open loop); with stream.users, from "
             "a user's answer to its next request"},
    {.key = "user_tokens", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_sessions_config_t, user_tokens),
     .default_value = "{dist: lognormal, mean: 150, stddev: 150, min: 1, max: 4096}",
     .help = "new tokens a later turn appends after the previous output"},
    {.key = "max_context", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_sessions_config_t, max_context), .default_value = "131072",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = MAX_TOKENS_TEXT,
     .help = "a conversation ends before a turn whose prompt would exceed this"},
    {.key = NULL},
};

static const kvio_opt_t mutation_options[] = {
    {.key = "probability", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_stream_mutation_config_t, probability), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "chance per later turn that the harness rewrites earlier context"},
    {.key = "position", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_mutation_config_t, position),
     .default_value = "{dist: uniform, low: 0, high: 1}",
     .help = "where the rewrite starts: a fraction of the context, or a token index"},
    {.key = "position_unit", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_stream_mutation_config_t, position_unit),
     .default_value = "fraction", .values = position_unit_names,
     .help = "fraction: position in [0,1] of the context; tokens: a token index"},
    {.key = "tokens", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_mutation_config_t, tokens), .default_value = "16",
     .help = "tokens rewritten (same length, new content); every block after it changes"},
    {.key = NULL},
};

static const kvio_opt_t prefix_options[] = {
    {.key = "system_prompts", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_stream_prefix_config_t, system_prompts),
     .options = system_prompt_options, .help = "shared system prompts, first in every prompt"},
    {.key = "documents", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_stream_prefix_config_t, documents), .options = document_options,
     .help = "a corpus of documents (RAG), after the system prompt"},
    {.key = "sessions", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_stream_prefix_config_t, sessions), .options = session_options,
     .help = "multi-turn conversations: each turn = previous prompt + output + new tokens"},
    {.key = "mutation", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_stream_prefix_config_t, mutation), .options = mutation_options,
     .help = "context rewrites between turns (agent harnesses)"},
    {.key = "min_unique_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_prefix_config_t, min_unique_tokens), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1000000,
     .help = "a first turn's unique suffix = max(this, input_tokens - shared prefix)"},
    {.key = NULL},
};

const kvio_opt_t kvio_stream_trace_options[] = {
    {.key = "path", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_stream_trace_config_t, path),
     .help = "trace file to replay instead of generating (relative to the working directory)"},
    {.key = "format", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_stream_trace_config_t, format), .default_value = "auto",
     .values = trace_format_names,
     .help = "kvio or mooncake (JSONL), azure or burstgpt (CSV), conversation (chat logs: OpenAI "
             "requests, kvio's conversation lines, ShareGPT); auto looks at the first line"},
    {.key = "time_scale", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_stream_trace_config_t, time_scale), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1e-6, .max = 1e6,
     .help = "arrival times are multiplied by this (0.5 replays twice as fast)"},
    {.key = "start", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_stream_trace_config_t, start_ns), .default_value = "0s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "skip requests before this trace time; times then count from it"},
    {.key = "limit", .type = KVIO_OPT_INT, .offset = offsetof(kvio_stream_trace_config_t, limit),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "replay at most this many requests (0: all)"},
    {.key = "max_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_trace_config_t, max_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = MAX_TOKENS_TEXT,
     .help = "output limit of requests whose trace gives none; longer outputs are cut to it "
             "(0: each request's own output)"},
    {.key = "block_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_trace_config_t, block_tokens), .default_value = "512",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1 << 20,
     .help = "tokens per Mooncake hash id"},
    {.key = "skip_bad", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_stream_trace_config_t, skip_bad), .default_value = "false",
     .help = "skip and count bad lines instead of failing"},
    {.key = "strict", .type = KVIO_OPT_BOOL,
     .offset = offsetof(kvio_stream_trace_config_t, strict), .default_value = "false",
     .help = "refuse timestamps out of order instead of sorting them"},
    {.key = "tokenizer", .type = KVIO_OPT_STRING,
     .offset = offsetof(kvio_stream_trace_config_t, tokenizer),
     .help = "a conversation log's tokenizer: the model's tokenizer.json or tiktoken rank file "
             "(unset: kvio's approximate tokenizer)"},
    {.key = "chat_template", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_stream_trace_config_t, chat_template), .default_value = "auto",
     .values = chat_template_names,
     .help = "how a conversation log's messages become a prompt; auto: the tokenizer's, else "
             "chatml"},
    {.key = NULL},
};

static const kvio_opt_t group_options[] = {
    {.key = "n", .type = KVIO_OPT_INT, .offset = offsetof(kvio_stream_group_config_t, n),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1024,
     .help = "samples per prompt (GRPO's group size; vLLM's n): the n samples arrive "
             "together with one prompt, each with its own output and an output length drawn "
             "from output_tokens (a trace's request keeps its own for the first); "
             "stream.requests and arrival.rate count prompts (1: no groups)"},
    {.key = NULL},
};

const kvio_opt_t kvio_stream_options[] = {
    {.key = "requests", .type = KVIO_OPT_INT, .offset = offsetof(kvio_stream_config_t, requests),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e10,
     .help = "requests in the stream, every turn counted (0: until the workload's duration; "
             "for a trace: a further limit)"},
    {.key = "arrival", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_stream_config_t, arrival),
     .options = arrival_options, .help = "when requests arrive"},
    {.key = "input_tokens", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_config_t, input_tokens),
     .default_value = "{dist: lognormal, mean: 1200, stddev: 900, min: 1, max: 16384}",
     .help = "prompt length of a conversation's first turn, shared prefix included"},
    {.key = "output_tokens", .type = KVIO_OPT_DIST,
     .offset = offsetof(kvio_stream_config_t, output_tokens),
     .default_value = "{dist: lognormal, mean: 220, stddev: 200, min: 1, max: 2048}",
     .help = "true output length of each request"},
    {.key = "max_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_config_t, max_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = MAX_TOKENS_TEXT,
     .help = "each request's output limit (0: the largest output output_tokens can give, "
             "or, if unbounded, the request's own output)"},
    {.key = "priority", .type = KVIO_OPT_DIST, .offset = offsetof(kvio_stream_config_t, priority),
     .default_value = "0", .help = "request priority, rounded (lower is more urgent)"},
    {.key = "cache_salts", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_stream_config_t, cache_salts), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e9,
     .help = "tenants isolating their prefix caches (vLLM cache_salt): each session (or "
             "request outside one) is salted as one of this many, drawn uniformly; a salted "
             "block matches only blocks of its own salt (0: no salt)"},
    {.key = "users", .type = KVIO_OPT_INT, .offset = offsetof(kvio_stream_config_t, users),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 100000,
     .help = "closed loop (MLPerf Storage kv-cache.py's users): this many users, each sending "
             "its conversation's next turn, or a new conversation, prefix.sessions.think_time "
             "after its previous answer finished; arrival is then unused. 0: open loop"},
    {.key = "prefix", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_stream_config_t, prefix),
     .options = prefix_options, .help = "shared prompt structure"},
    {.key = "trace", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_stream_config_t, trace),
     .options = kvio_stream_trace_options,
     .help = "replay a trace instead (the synthetic keys above are then ignored)"},
    {.key = "group", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_stream_config_t, group),
     .options = group_options,
     .help = "rollout groups (RL post-training): each prompt sampled n times"},
    {.key = NULL},
};

kvio_status_t kvio_trace_format_find(const char *name, kvio_trace_format_t *format_p)
{
    for (int i = 0; trace_format_names[i] != NULL; i++) {
        if (strcmp(trace_format_names[i], name) == 0) {
            *format_p = (kvio_trace_format_t)i;
            return KVIO_OK;
        }
    }
    return KVIO_ERR_NOT_FOUND;
}

kvio_status_t kvio_stream_next(kvio_stream_t *stream, const kvio_request_t **request_p)
{
    return stream->ops->next(stream->source, request_p);
}

bool kvio_stream_closed_loop(const kvio_stream_t *stream)
{
    return stream->ops->due_ns != NULL;
}

int64_t kvio_stream_due_ns(const kvio_stream_t *stream)
{
    return stream->ops->due_ns != NULL ? stream->ops->due_ns(stream->source) : -1;
}

void kvio_stream_finished(kvio_stream_t *stream, uint64_t id, int64_t finish_ns)
{
    if (stream->ops->finished != NULL)
        stream->ops->finished(stream->source, id, finish_ns);
}

kvio_status_t kvio_stream_rewind(kvio_stream_t *stream)
{
    if (stream->ops->rewind == NULL)
        return KVIO_ERR_UNSUPPORTED;
    stream->ops->rewind(stream->source);
    return KVIO_OK;
}

uint64_t kvio_stream_skipped_lines(const kvio_stream_t *stream)
{
    return stream->skipped_lines;
}

void kvio_stream_destroy(kvio_stream_t *stream)
{
    if (stream == NULL)
        return;
    stream->ops->destroy(stream->source);
    free(stream);
}

/* ---------- requests ---------- */

size_t kvio_request_extra_bytes(const kvio_request_t *request)
{
    size_t segment_bytes = request->segments != NULL
                               ? (size_t)request->num_segments * sizeof(kvio_segment_t)
                               : 0;
    size_t id_bytes = request->trace_hash_ids != NULL
                          ? (size_t)request->num_trace_hash_ids * sizeof(uint64_t)
                          : 0;
    return segment_bytes + id_bytes;
}

void kvio_request_copy(const kvio_request_t *request, kvio_request_t *copy_p, void *extra)
{
    *copy_p = *request;
    unsigned char *tail = extra;
    if (request->segments != NULL) {
        size_t segment_bytes = (size_t)request->num_segments * sizeof(kvio_segment_t);
        memcpy(tail, request->segments, segment_bytes);
        copy_p->segments = (const kvio_segment_t *)tail;
        tail += segment_bytes;
    }
    if (request->trace_hash_ids != NULL) {
        memcpy(tail, request->trace_hash_ids,
               (size_t)request->num_trace_hash_ids * sizeof(uint64_t));
        copy_p->trace_hash_ids = (const uint64_t *)tail;
    }
}

kvio_status_t kvio_request_clone(const kvio_request_t *request, kvio_request_t **copy_p)
{
    kvio_request_t *copy = malloc(sizeof(*copy) + kvio_request_extra_bytes(request));
    if (copy == NULL)
        return KVIO_ERR_NOMEM;
    kvio_request_copy(request, copy, copy + 1);
    *copy_p = copy;
    return KVIO_OK;
}

void kvio_request_destroy(kvio_request_t *request)
{
    free(request);
}

/* Walks the request's token sequence (prompt, then output) as runs of one
 * content each; positions only move forward. */
typedef struct content_cursor {
    const kvio_request_t *request;
    uint32_t segment;        /* current segment index */
    uint64_t segment_start;  /* sequence position of its first token */
} content_cursor_t;

/* Whether a position of the output is named by the trace's ids (kvio
 * serve's traces carry ids for prompt and output). */
static bool trace_covers(const kvio_request_t *request, uint64_t position)
{
    return request->trace_ids_cover_output && request->segments == NULL &&
           position >= request->input_tokens && request->trace_block_tokens > 0 &&
           position < (uint64_t)request->num_trace_hash_ids * request->trace_block_tokens;
}

/* The run that starts at position and ends at the earlier of its content's
 * end and limit. */
static kvio_hash_run_t cursor_run(content_cursor_t *cursor, uint64_t position, uint64_t limit)
{
    const kvio_request_t *request = cursor->request;
    kvio_hash_run_t run;
    uint64_t end;
    if (trace_covers(request, position)) {
        /* A block of the output whose content the trace names too. */
        uint64_t block_tokens = request->trace_block_tokens;
        run.content_id = request->trace_hash_ids[position / block_tokens];
        run.offset = (uint32_t)(position % block_tokens);
        end = position - run.offset + block_tokens;
    } else if (position >= request->input_tokens) {
        run.content_id = request->output_content_id;
        run.offset = (uint32_t)(position - request->input_tokens);
        end = limit;
    } else if (request->segments != NULL) {
        while (position >= cursor->segment_start + request->segments[cursor->segment].tokens) {
            cursor->segment_start += request->segments[cursor->segment].tokens;
            cursor->segment++;
        }
        const kvio_segment_t *segment = &request->segments[cursor->segment];
        run.content_id = segment->content_id;
        run.offset = segment->offset + (uint32_t)(position - cursor->segment_start);
        end = cursor->segment_start + segment->tokens;
    } else {
        uint64_t block_tokens = request->trace_block_tokens;
        run.content_id = request->trace_hash_ids[position / block_tokens];
        run.offset = (uint32_t)(position % block_tokens);
        end = position - run.offset + block_tokens;
        if (end > request->input_tokens)
            end = request->input_tokens;
    }
    if (end > limit)
        end = limit;
    run.length = (uint32_t)(end - position);
    return run;
}

/* Hashes the runs of [start, end) with parent; runs_p is a growable buffer. */
static kvio_status_t hash_span(content_cursor_t *cursor, uint64_t start, uint64_t end,
                               const kvio_hash_t *parent, kvio_hash_run_t **runs_p,
                               size_t *capacity_p, kvio_hash_t *hash_p)
{
    size_t count = 0;
    for (uint64_t position = start; position < end;) {
        if (count == *capacity_p) {
            size_t capacity = *capacity_p * 2;
            kvio_hash_run_t *bigger = malloc(capacity * sizeof(*bigger));
            if (bigger == NULL)
                return KVIO_ERR_NOMEM;
            memcpy(bigger, *runs_p, count * sizeof(*bigger));
            /* The first buffer is the caller's stack array; later ones are ours. */
            if (*capacity_p > 64)
                free(*runs_p);
            *runs_p = bigger;
            *capacity_p = capacity;
        }
        kvio_hash_run_t run = cursor_run(cursor, position, end);
        (*runs_p)[count++] = run;
        position += run.length;
    }
    *hash_p = kvio_hash_runs(parent, *runs_p, count);
    return KVIO_OK;
}

/* The parent of a request's first block: none, or its salt (vLLM puts the
 * salt in the first block's extra keys; every later block chains from it). */
static const kvio_hash_t *salted_parent(const kvio_request_t *request, uint64_t start,
                                        const kvio_hash_t *parent, kvio_hash_t *root_p)
{
    if (start > 0 || parent != NULL || request->cache_salt == 0)
        return parent;
    *root_p = (kvio_hash_t){.low = request->cache_salt, .high = ~request->cache_salt};
    return root_p;
}

/* The spans and runs of requests hashed together, in arrays that start on
 * the caller's stack and move to the heap when they outgrow it. */
typedef struct span_builder {
    kvio_hash_span_t *spans;
    size_t num_spans, spans_capacity;
    kvio_hash_run_t *runs;
    size_t num_runs, runs_capacity;
    bool spans_on_heap, runs_on_heap;
} span_builder_t;

/* items (count of them, in capacity *capacity_p, on the heap when
 * *on_heap_p) with room for one more: a new array on the heap when full,
 * NULL when that fails. */
static void *builder_room(void *items, size_t count, size_t *capacity_p, size_t item_size,
                          bool *on_heap_p)
{
    if (count < *capacity_p)
        return items;
    size_t capacity = *capacity_p * 2;
    void *bigger = malloc(capacity * item_size);
    if (bigger == NULL)
        return NULL;
    memcpy(bigger, items, count * item_size);
    if (*on_heap_p)
        free(items);
    *capacity_p = capacity;
    *on_heap_p = true;
    return bigger;
}

/* Appends the spans of the request's blocks first_block ..
 * first_block+num_blocks-1: trace blocks inside the prompt (when the trace
 * block is a multiple of block_size), then runs of whole blocks inside one
 * content, and blocks of several runs one by one (their runs' index in the
 * builder kept in first until the runs stop moving). */
static kvio_status_t add_request_spans(span_builder_t *builder, const kvio_request_t *request,
                                       uint32_t block_size, size_t first_block,
                                       size_t num_blocks)
{
    size_t end = first_block + num_blocks;
    uint32_t trace_block = request->segments == NULL ? request->trace_block_tokens : 0;
    size_t chained = 0, per_trace_block = 1;
    if (trace_block > 0 && trace_block % block_size == 0) {
        per_trace_block = trace_block / block_size;
        chained = request->trace_ids_cover_output
                      ? (size_t)request->num_trace_hash_ids * per_trace_block
                      : request->input_tokens / block_size;
        chained = chained < end ? chained : end;
    }
    content_cursor_t cursor = {.request = request};
    uint64_t limit = (uint64_t)end * block_size;
    for (size_t i = first_block; i < end;) {
        kvio_hash_span_t *spans = builder_room(builder->spans, builder->num_spans,
                                               &builder->spans_capacity,
                                               sizeof(kvio_hash_span_t), &builder->spans_on_heap);
        if (spans == NULL)
            return KVIO_ERR_NOMEM;
        builder->spans = spans;
        kvio_hash_span_t *span = &builder->spans[builder->num_spans++];
        uint64_t start = (uint64_t)i * block_size;
        if (i < chained) {
            size_t index = i % per_trace_block;
            size_t count = per_trace_block - index;
            count = count < chained - i ? count : chained - i;
            *span = (kvio_hash_span_t){.kind = KVIO_HASH_SPAN_TRACE, .count = (uint32_t)count,
                                       .id = request->trace_hash_ids[i / per_trace_block],
                                       .first = (uint32_t)index};
            i += count;
            continue;
        }
        kvio_hash_run_t run = cursor_run(&cursor, start, limit);
        if (run.length >= block_size) {
            /* Offsets are u32 and wrap (cursor_run); a span's step does
             * not, so a span ends at the block where they would. */
            size_t count = run.length / block_size;
            uint64_t before_wrap = ((1ull << 32) - run.offset + block_size - 1) / block_size;
            count = count < before_wrap ? count : (size_t)before_wrap;
            *span = (kvio_hash_span_t){.kind = KVIO_HASH_SPAN_RUN, .count = (uint32_t)count,
                                       .id = run.content_id, .first = run.offset,
                                       .length = block_size};
            i += count;
            continue;
        }
        size_t first_run = builder->num_runs;
        for (uint64_t position = start; position < start + block_size;) {
            kvio_hash_run_t *runs = builder_room(builder->runs, builder->num_runs,
                                                 &builder->runs_capacity,
                                                 sizeof(kvio_hash_run_t), &builder->runs_on_heap);
            if (runs == NULL)
                return KVIO_ERR_NOMEM;
            builder->runs = runs;
            run = cursor_run(&cursor, position, start + block_size);
            builder->runs[builder->num_runs++] = run;
            position += run.length;
        }
        *span = (kvio_hash_span_t){.kind = KVIO_HASH_SPAN_RUNS, .count = 1,
                                   .first = (uint32_t)first_run,
                                   .num_runs = builder->num_runs - first_run};
        i++;
    }
    return KVIO_OK;
}

/* Blocks first_block .. first_block+num_blocks[r]-1 of each request into
 * hashes_p[r], the first chained from parent (NULL: none, or the request's
 * salt), the chains hashed side by side in groups. */
static kvio_status_t hash_requests(const kvio_request_t *const *requests, uint32_t block_size,
                                   size_t first_block, const size_t *num_blocks,
                                   const kvio_hash_t *parent, kvio_hash_t *const *hashes_p,
                                   size_t count)
{
    enum { GROUP = 8 };
    /* Checked before anything is written. */
    for (size_t r = 0; r < count; r++) {
        uint64_t total = (uint64_t)requests[r]->input_tokens + requests[r]->output_tokens;
        if (block_size == 0 || first_block > total / block_size ||
            num_blocks[r] > total / block_size - first_block)
            return KVIO_ERR_INVALID;
    }
    kvio_hash_span_t stack_spans[256];
    kvio_hash_run_t stack_runs[64];
    span_builder_t builder = {.spans = stack_spans, .spans_capacity = 256,
                              .runs = stack_runs, .runs_capacity = 64};
    kvio_status_t status = KVIO_OK;
    for (size_t first = 0; first < count && status == KVIO_OK; first += GROUP) {
        size_t group = count - first < GROUP ? count - first : GROUP;
        kvio_hash_chain_t chains[GROUP];
        size_t span_start[GROUP + 1];
        builder.num_spans = builder.num_runs = 0;
        for (size_t r = 0; r < group && status == KVIO_OK; r++) {
            span_start[r] = builder.num_spans;
            status = add_request_spans(&builder, requests[first + r], block_size, first_block,
                                       num_blocks[first + r]);
        }
        if (status != KVIO_OK)
            break;
        span_start[group] = builder.num_spans;
        for (size_t i = 0; i < builder.num_spans; i++)
            if (builder.spans[i].kind == KVIO_HASH_SPAN_RUNS)
                builder.spans[i].runs = builder.runs + builder.spans[i].first;
        for (size_t r = 0; r < group; r++) {
            kvio_hash_t root;
            const kvio_hash_t *chain_parent =
                salted_parent(requests[first + r], first_block, parent, &root);
            chains[r] = (kvio_hash_chain_t){
                .parent = chain_parent != NULL ? *chain_parent : (kvio_hash_t){0, 0},
                .spans = builder.spans + span_start[r],
                .num_spans = span_start[r + 1] - span_start[r],
                .hashes_p = hashes_p[first + r],
            };
        }
        kvio_hash_chains(chains, group);
    }
    if (builder.spans_on_heap)
        free(builder.spans);
    if (builder.runs_on_heap)
        free(builder.runs);
    return status;
}

kvio_status_t kvio_request_block_hashes(const kvio_request_t *request, uint32_t block_size,
                                        size_t first_block, size_t num_blocks,
                                        const kvio_hash_t *parent, kvio_hash_t *hashes_p)
{
    return hash_requests(&request, block_size, first_block, &num_blocks, parent, &hashes_p, 1);
}

kvio_status_t kvio_request_block_hashes_many(const kvio_request_t *const *requests,
                                             uint32_t block_size, const size_t *num_blocks,
                                             kvio_hash_t *const *hashes_p, size_t count)
{
    return hash_requests(requests, block_size, 0, num_blocks, NULL, hashes_p, count);
}

kvio_status_t kvio_request_span_hash(const kvio_request_t *request, uint64_t start, uint64_t end,
                                     const kvio_hash_t *parent, kvio_hash_t *hash_p)
{
    kvio_hash_t root;
    parent = salted_parent(request, start, parent, &root);
    kvio_hash_run_t stack_runs[64];
    kvio_hash_run_t *runs = stack_runs;
    size_t capacity = 64;
    content_cursor_t cursor = {.request = request};
    kvio_status_t status = hash_span(&cursor, start, end, parent, &runs, &capacity, hash_p);
    if (runs != stack_runs)
        free(runs);
    return status;
}
