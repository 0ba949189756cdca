/* Conversations as clients send them: sessions of turns, each turn the
 * chat messages of one request and, when the log has it, the answer. Read
 * from OpenAI chat-completions request logs (JSON Lines, one request per
 * line, as a proxy or an agent harness logs them), ShareGPT JSON (every
 * turn of every conversation) and kvio's conversation format (JSON Lines
 * with session, time, messages, output). And where, turn after turn, the
 * prompt stops being what a prefix cache holds (kvio prefix). */
#ifndef KVIO_CONVERSATION_H
#define KVIO_CONVERSATION_H

#include "kvio/status.h"
#include "kvio/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One turn: a request's messages (with a label each: the role, or "tools"
 * for the tool list a template writes into the prompt), its answer's text
 * (NULL when the log has none) or token count (0: unknown), its time in
 * seconds (NaN when the log has none) and where it was read (line, or
 * entry index for ShareGPT). */
typedef struct kvio_conversation_turn {
    kvio_chat_message_t *messages;
    const char **labels;
    size_t num_messages;
    char *output;
    size_t output_length;
    kvio_chat_content_t output_kind; /* text, or tool calls (their JSON list) */
    uint32_t output_tokens;
    double time_s;
    size_t line;
} kvio_conversation_turn_t;

typedef struct kvio_conversation_session {
    char *id;
    kvio_conversation_turn_t *turns;
    size_t num_turns, turns_capacity;
} kvio_conversation_session_t;

typedef struct kvio_conversation_log {
    char *path;
    const char *format; /* "openai", "sharegpt" */
    kvio_conversation_session_t *sessions;
    size_t num_sessions, sessions_capacity;
    size_t num_turns;
} kvio_conversation_log_t;

/* Reads path into *log_p (owned; kvio_conversation_log_free). A ShareGPT
 * file is a JSON array; anything else is read as JSON Lines of requests,
 * grouped into sessions by their session, session_id, conversation_id,
 * metadata.session_id or user field, else by their first user message.
 * Bad input (a malformed line, an unknown role, a message without content)
 * is logged with the file, line and key: KVIO_ERR_INVALID. */
kvio_status_t kvio_conversation_load(const char *path, kvio_conversation_log_t **log_p);
void kvio_conversation_log_free(kvio_conversation_log_t *log);

/* Renders turn as the server would prefill it (its messages through the
 * template, with the reply's header) into *rendering_p (owned). tokenizer
 * NULL: the approximate one. KVIO_ERR_NOMEM. */
kvio_status_t kvio_conversation_render(const kvio_conversation_turn_t *turn,
                                       const kvio_tokenizer_t *tokenizer,
                                       kvio_chat_template_t template_id,
                                       kvio_chat_rendering_t *rendering_p);

/* Appends to a turn's rendering its answer as the model generated it, when
 * the log has its text (harmony's channel first): then the rendering is
 * what the turn leaves in the cache. KVIO_ERR_NOMEM. */
kvio_status_t kvio_conversation_append_answer(const kvio_conversation_turn_t *turn,
                                              const kvio_tokenizer_t *tokenizer,
                                              kvio_chat_template_t template_id,
                                              kvio_chat_rendering_t *rendering);

/* ---------- where the prefix breaks ---------- */

/* How a turn's prompt is analysed: the tokenizer (NULL: the approximate
 * one) and template that render it, and the prefix cache's block size. */
typedef struct kvio_prefix_params {
    const kvio_tokenizer_t *tokenizer;
    kvio_chat_template_t chat_template;
    uint32_t block_size;
} kvio_prefix_params_t;

/* Text kept each side of a break point. */
#define KVIO_PREFIX_CONTEXT_BYTES 48

/* Where a turn's prompt stops matching what the session's previous turn
 * left in the cache (its prompt and answer): the token, the message it
 * falls in (index and label) and the token's place in that message, the
 * text each side in this turn and what the previous turn had there. */
typedef struct kvio_prefix_break {
    uint32_t token;
    uint32_t message;
    const char *label;          /* borrowed from the log */
    uint32_t token_in_message;
    char before[KVIO_PREFIX_CONTEXT_BYTES + 1];
    char after[KVIO_PREFIX_CONTEXT_BYTES + 1];
    char previous[KVIO_PREFIX_CONTEXT_BYTES + 1];
    int cluster;                /* index into the result's clusters */
} kvio_prefix_break_t;

typedef struct kvio_prefix_turn {
    uint32_t session, turn;     /* indexes into the log */
    uint32_t prompt_tokens;
    uint32_t reusable_tokens;   /* the common prefix with the previous turn's sequence */
    uint32_t cached_tokens;     /* what a block cache hits of it (whole blocks, not the last token) */
    uint32_t expected_tokens;   /* what the previous turn left: its prompt and answer */
    kvio_prefix_break_t *breaks; /* in order; the first is where the prefix ends */
    size_t num_breaks;
} kvio_prefix_turn_t;

/* Tokens apart two breaks in one message may be and still be one cause (a
 * time whose minutes or seconds change). */
#define KVIO_PREFIX_CLUSTER_TOKENS 8

/* Breaks at one place: the same message index and label, tokens within
 * KVIO_PREFIX_CLUSTER_TOKENS of the first one's (first_token..last_token
 * in the message). turns counts the turns whose first break is here;
 * cached_without is the cached tokens over the whole log if breaks here
 * did not happen. */
typedef struct kvio_prefix_cluster {
    uint32_t message;
    const char *label;
    uint32_t first_token, last_token;
    size_t turns;
    size_t first_turn;          /* index into the result's turns */
    uint64_t cached_without;
} kvio_prefix_cluster_t;

typedef struct kvio_prefix_result {
    kvio_prefix_turn_t *turns;
    size_t num_turns;
    kvio_prefix_cluster_t *clusters; /* most turns first */
    size_t num_clusters;
    uint64_t prompt_tokens, cached_tokens, cached_without_breaks;
    size_t turns_with_breaks;
} kvio_prefix_result_t;

/* Renders every turn of log and compares each with its session's previous
 * turn; *result_p is owned (kvio_prefix_result_free). KVIO_ERR_NOMEM. */
kvio_status_t kvio_prefix_analyze(const kvio_conversation_log_t *log,
                                  const kvio_prefix_params_t *params,
                                  kvio_prefix_result_t **result_p);
void kvio_prefix_result_free(kvio_prefix_result_t *result);

#endif
