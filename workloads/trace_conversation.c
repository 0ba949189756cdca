/* Conversation logs as a trace (stream.trace.format: conversation): each
 * turn rendered as the server would prefill it (stream.trace.tokenizer,
 * chat_template) becomes a request whose content is chained ids of 16
 * tokens each, over its prompt and, when the log has the answer's text,
 * its answer: equal ids exactly where two turns share a prefix, so a run
 * hits what vLLM would, and an exported trace carries no text. Arrivals
 * are the log's times, else sessions from the stream's arrival process
 * with think time between turns. */
#include "workloads/workloads_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvio/conversation.h"
#include "kvio/log.h"
#include "kvio/rng.h"

/* Tokens per id: divides every vLLM block size (multiples of 16), so each
 * engine block's hash is exact. */
#define ID_TOKENS 16

/* Without the stream section: a session a second, turns 10 s apart. */
#define DEFAULT_SESSION_GAP_NS 1000000000ll
#define DEFAULT_THINK_NS 10000000000ll

/* The chained ids of tokens, ID_TOKENS a piece (the last may be short):
 * each id hashes its tokens with the previous id as seed. */
static kvio_status_t add_ids(kvio_trace_t *trace, kvio_trace_record_t *record,
                             const kvio_tokens_t *tokens)
{
    size_t count = (tokens->count + ID_TOKENS - 1) / ID_TOKENS;
    uint64_t *ids = kvio_trace_reserve_hash_ids(trace, count);
    if (ids == NULL)
        return KVIO_ERR_NOMEM;
    uint64_t id = 0;
    for (size_t i = 0; i < count; i++) {
        size_t first = i * ID_TOKENS;
        size_t length = tokens->count - first < ID_TOKENS ? tokens->count - first : ID_TOKENS;
        id = XXH3_64bits_withSeed(&tokens->ids[first], length * sizeof(uint32_t), id);
        ids[i] = id >> 1; /* the trace formats' ids are non-negative */
    }
    trace->num_hash_ids += count;
    record->request.num_trace_hash_ids = (uint32_t)count;
    record->request.trace_block_tokens = ID_TOKENS;
    return KVIO_OK;
}

/* Arrival times when the log has none: a session starts at each arrival of
 * the stream's process (its rate over the log's turns per session), and its
 * turns follow each other by the think time. */
typedef struct arrivals {
    kvio_rng_t rng;
    const kvio_stream_config_t *stream;
    double session_rate;
    int64_t next_session_ns;
} arrivals_t;

static int64_t session_start(arrivals_t *arrivals)
{
    int64_t start = arrivals->next_session_ns;
    double gap_ns = arrivals->stream != NULL
                        ? -log(1.0 - kvio_rng_uniform(&arrivals->rng)) /
                              arrivals->session_rate * 1e9
                        : (double)DEFAULT_SESSION_GAP_NS;
    arrivals->next_session_ns += (int64_t)gap_ns;
    return start;
}

static int64_t think(arrivals_t *arrivals)
{
    if (arrivals->stream == NULL)
        return DEFAULT_THINK_NS;
    double think_ns = kvio_dist_sample(&arrivals->stream->prefix.sessions.think_time,
                                       &arrivals->rng);
    return think_ns > 0 ? (int64_t)think_ns : 0;
}

static bool every_turn_timed(const kvio_conversation_log_t *log)
{
    for (size_t s = 0; s < log->num_sessions; s++)
        for (size_t t = 0; t < log->sessions[s].num_turns; t++)
            if (isnan(log->sessions[s].turns[t].time_s))
                return false;
    return true;
}

/* One turn as a record: its tokens (prompt, and the answer when the log
 * has its text), its output length (the answer's tokens, the log's usage,
 * else drawn from stream.output_tokens), its session and turn. */
static kvio_status_t add_turn(kvio_trace_t *trace, const kvio_conversation_turn_t *turn,
                              size_t session, size_t index, int64_t arrival_ns,
                              const kvio_tokenizer_t *tokenizer, kvio_chat_template_t template_id,
                              arrivals_t *arrivals)
{
    kvio_chat_rendering_t whole = {0};
    kvio_status_t status = kvio_conversation_render(turn, tokenizer, template_id, &whole);
    size_t prompt_tokens = whole.tokens.count;
    if (status == KVIO_OK)
        status = kvio_conversation_append_answer(turn, tokenizer, template_id, &whole);
    kvio_trace_record_t *record = status == KVIO_OK ? kvio_trace_add_record(trace) : NULL;
    if (status == KVIO_OK && record == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK) {
        kvio_request_t *request = &record->request;
        record->line = turn->line;
        request->arrival_ns = arrival_ns;
        request->input_tokens = (uint32_t)prompt_tokens;
        request->session_id = session + 1;
        request->turn = (uint32_t)index;
        request->output_content_id = XXH3_64bits_withSeed(&index, sizeof(index), session + 1) >> 1;
        uint64_t answered = whole.tokens.count - prompt_tokens;
        if (turn->output != NULL && answered > 0) {
            request->output_tokens = (uint32_t)answered;
            request->trace_ids_cover_output = true;
        } else if (turn->output_tokens > 0) {
            request->output_tokens = turn->output_tokens;
        } else {
            double drawn = arrivals->stream != NULL
                               ? kvio_dist_sample(&arrivals->stream->output_tokens, &arrivals->rng)
                               : 1.0;
            request->output_tokens = drawn >= 1.0 ? (uint32_t)llround(fmin(drawn, 1e7)) : 1;
        }
        /* The ids cover the answer only when its tokens are known. */
        kvio_tokens_t covered = {.ids = whole.tokens.ids,
                                 .count = request->trace_ids_cover_output ? whole.tokens.count
                                                                         : prompt_tokens};
        status = add_ids(trace, record, &covered);
    }
    kvio_chat_rendering_fini(&whole);
    return status;
}

static kvio_status_t load_conversation(kvio_trace_t *trace, char *error_p, size_t error_len)
{
    const kvio_stream_trace_config_t *options = trace->options;
    kvio_tokenizer_t *tokenizer = NULL;
    kvio_conversation_log_t *log = NULL;
    kvio_chat_template_t template_id = KVIO_CHAT_CHATML;
    if (options->tokenizer != NULL && options->tokenizer[0] != '\0' &&
        kvio_tokenizer_load(options->tokenizer, &tokenizer) != KVIO_OK) {
        snprintf(error_p, error_len, "stream.trace.tokenizer: %s cannot be used (said above)",
                 options->tokenizer);
        return KVIO_ERR_CONFIG;
    }
    kvio_status_t status = KVIO_OK;
    if (options->chat_template > 0)
        template_id = (kvio_chat_template_t)(options->chat_template - 1);
    else if (tokenizer != NULL && kvio_chat_template_for(tokenizer, &template_id) != KVIO_OK)
        status = KVIO_ERR_CONFIG;
    if (status == KVIO_OK && tokenizer != NULL &&
        kvio_chat_template_check(template_id, tokenizer) != KVIO_OK)
        status = KVIO_ERR_CONFIG;
    if (status != KVIO_OK)
        snprintf(error_p, error_len,
                 "stream.trace.chat_template: none that %s's special tokens fit; name one",
                 options->tokenizer);
    if (status == KVIO_OK && kvio_conversation_load(trace->path, &log) != KVIO_OK) {
        snprintf(error_p, error_len, "%s: not a conversation log kvio can read (said above)",
                 trace->path);
        status = KVIO_ERR_PARSE;
    }
    bool timed = status == KVIO_OK && every_turn_timed(log);
    arrivals_t arrivals = {.stream = options->stream};
    kvio_rng_seed(&arrivals.rng, options->seed, 0, "conversation-arrivals");
    if (status == KVIO_OK && arrivals.stream != NULL)
        arrivals.session_rate = arrivals.stream->arrival.rate * (double)log->num_sessions /
                                (double)log->num_turns;
    for (size_t s = 0; status == KVIO_OK && s < log->num_sessions; s++) {
        const kvio_conversation_session_t *session = &log->sessions[s];
        int64_t arrival_ns = timed ? 0 : session_start(&arrivals);
        for (size_t t = 0; status == KVIO_OK && t < session->num_turns; t++) {
            if (timed)
                arrival_ns = llround(session->turns[t].time_s * 1e9);
            else if (t > 0)
                arrival_ns += think(&arrivals);
            status = add_turn(trace, &session->turns[t], s, t, arrival_ns, tokenizer,
                              template_id, &arrivals);
        }
    }
    if (status == KVIO_OK)
        kvio_info("%s: %zu sessions, %zu turns (%s log, %s tokenizer, %s template)%s",
                  trace->path, log->num_sessions, log->num_turns, log->format,
                  tokenizer ? kvio_tokenizer_describe(tokenizer) : "approximate",
                  kvio_chat_template_name(template_id),
                  timed ? "" : "; arrivals drawn: the log has no times");
    kvio_conversation_log_free(log);
    kvio_tokenizer_destroy(tokenizer);
    return status;
}

/* Records come session by session: into time order for the loader. */
static int by_arrival(const void *left_p, const void *right_p)
{
    const kvio_trace_record_t *left = left_p, *right = right_p;
    if (left->request.arrival_ns != right->request.arrival_ns)
        return left->request.arrival_ns < right->request.arrival_ns ? -1 : 1;
    if (left->request.session_id != right->request.session_id)
        return left->request.session_id < right->request.session_id ? -1 : 1;
    return left->request.turn < right->request.turn ? -1 : left->request.turn > right->request.turn;
}

static kvio_status_t load_sorted(kvio_trace_t *trace, char *error_p, size_t error_len)
{
    kvio_status_t status = load_conversation(trace, error_p, error_len);
    if (status == KVIO_OK)
        qsort(trace->records, trace->num_records, sizeof(kvio_trace_record_t), by_arrival);
    return status;
}

const kvio_trace_format_ops_t kvio_trace_conversation_ops = {
    .name = "conversation",
    .format = KVIO_TRACE_CONVERSATION,
    .absolute_times = true,
    .load = load_sorted,
};
