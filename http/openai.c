/* OpenAI's completions and chat completions as vLLM serves them: request
 * bodies read and checked (each error names its field), the output a
 * request gets, and the responses, whole or as server-sent events, in
 * vLLM's field order. No sockets here: http/server_http.c moves them. */
#include "http/http_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvio/format.h"
#include "kvio/hash.h"
#include "kvio/rng.h"

/* Token ids a prompt may give (vLLM checks them against the vocabulary). */
#define MAX_TOKEN_ID 0x7fffffffu

/* vLLM's default max_tokens of a completion. */
#define COMPLETIONS_DEFAULT_MAX_TOKENS 16

bool kvio_http_append(char **text_p, size_t *length_p, size_t *capacity_p, const char *bytes,
                      size_t length)
{
    if (*length_p + length + 1 > *capacity_p) {
        size_t capacity = *capacity_p ? *capacity_p : 1024;
        while (capacity < *length_p + length + 1)
            capacity *= 2;
        char *grown = realloc(*text_p, capacity);
        if (grown == NULL)
            return false;
        *text_p = grown;
        *capacity_p = capacity;
    }
    memcpy(*text_p + *length_p, bytes, length);
    *length_p += length;
    (*text_p)[*length_p] = '\0';
    return true;
}

static bool fail(kvio_http_error_t *error, int status, const char *type, const char *param,
                 const char *format, ...) __attribute__((format(printf, 5, 6)));

static bool fail(kvio_http_error_t *error, int status, const char *type, const char *param,
                 const char *format, ...)
{
    error->status = status;
    error->type = type;
    snprintf(error->param, sizeof(error->param), "%s", param != NULL ? param : "");
    va_list args;
    va_start(args, format);
    vsnprintf(error->message, sizeof(error->message), format, args);
    va_end(args);
    return false;
}

#define BAD(error, param, ...) fail(error, 400, "BadRequestError", param, __VA_ARGS__)

void kvio_api_request_fini(kvio_api_request_t *request)
{
    kvio_tokens_fini(&request->prompt);
}

/* ---------- reading a body ---------- */

/* A field of one JSON type, or absent: *value_p NULL. false when present
 * with another type. */
static bool field(const json_t *body, const char *key, json_type type, const char *type_name,
                  const json_t **value_p, kvio_http_error_t *error)
{
    const json_t *value = json_object_get(body, key);
    *value_p = NULL;
    if (value == NULL || (json_is_null(value) && type != JSON_NULL))
        return true;
    bool ok = json_typeof(value) == type ||
              (type == JSON_TRUE && json_is_boolean(value)) ||
              (type == JSON_REAL && json_is_number(value));
    if (!ok)
        return BAD(error, key, "%s must be %s", key, type_name);
    *value_p = value;
    return true;
}

static bool get_bool(const json_t *body, const char *key, bool *value_p, kvio_http_error_t *error)
{
    const json_t *value;
    if (!field(body, key, JSON_TRUE, "true or false", &value, error))
        return false;
    if (value != NULL)
        *value_p = json_is_true(value);
    return true;
}

/* An integer of at least min (absent: *value_p unchanged). */
static bool get_int(const json_t *body, const char *key, int64_t min, int64_t *value_p,
                    kvio_http_error_t *error)
{
    const json_t *value;
    if (!field(body, key, JSON_INTEGER, "an integer", &value, error))
        return false;
    if (value == NULL)
        return true;
    json_int_t number = json_integer_value(value);
    if (number < min)
        return BAD(error, key, "%s must be at least %" PRId64 ", got %" PRId64, key, min,
                   (int64_t)number);
    *value_p = number;
    return true;
}

/* A prompt given as token ids. */
static bool read_token_ids(const json_t *array, const char *param, kvio_tokens_t *tokens,
                           kvio_http_error_t *error)
{
    size_t index;
    const json_t *item;
    json_array_foreach(array, index, item)
    {
        if (!json_is_integer(item) || json_integer_value(item) < 0 ||
            json_integer_value(item) > (json_int_t)MAX_TOKEN_ID)
            return BAD(error, param, "%s[%zu] must be a token id (an integer from 0 to %u)",
                       param, index, MAX_TOKEN_ID);
        if (kvio_tokens_push(tokens, (uint32_t)json_integer_value(item)) != KVIO_OK)
            return fail(error, 500, "InternalServerError", NULL, "out of memory");
    }
    return true;
}

/* prompt: a string, token ids, or a batch of one of either (kvio serves
 * one prompt per request). */
static bool read_prompt(const json_t *body, const kvio_tokenizer_t *tokenizer,
                        kvio_tokens_t *tokens, kvio_http_error_t *error)
{
    const json_t *prompt = json_object_get(body, "prompt");
    if (prompt == NULL || json_is_null(prompt))
        return BAD(error, "prompt", "prompt is missing");
    if (json_is_array(prompt) && json_array_size(prompt) > 0 &&
        !json_is_integer(json_array_get(prompt, 0))) {
        if (json_array_size(prompt) > 1)
            return BAD(error, "prompt",
                       "prompt holds %zu prompts; kvio serve takes one prompt per request",
                       json_array_size(prompt));
        prompt = json_array_get(prompt, 0);
        if (!json_is_string(prompt) && !json_is_array(prompt))
            return BAD(error, "prompt", "prompt must be a string or a list of token ids");
    }
    kvio_status_t status = KVIO_OK;
    if (json_is_string(prompt) && tokenizer != NULL)
        status = kvio_tokenizer_encode(tokenizer, json_string_value(prompt),
                                       json_string_length(prompt), true, tokens);
    else if (json_is_string(prompt))
        status = kvio_tokenize_approximate(json_string_value(prompt), json_string_length(prompt),
                                           tokens);
    else if (json_is_array(prompt))
        return read_token_ids(prompt, "prompt", tokens, error);
    else
        return BAD(error, "prompt", "prompt must be a string or a list of token ids");
    if (status != KVIO_OK)
        return fail(error, 500, "InternalServerError", NULL, "out of memory");
    return true;
}

/* A message's content as text: a string, or text parts (vllm bench serve
 * sends [{"type": "text", "text": ...}]) joined; an assistant's tool calls
 * as their JSON. The text is malloc'd into *text_p. */
static bool message_text(const json_t *message, size_t index, char **text_p, size_t *length_p,
                         kvio_http_error_t *error)
{
    char param[64];
    snprintf(param, sizeof(param), "messages[%zu].content", index);
    const json_t *content = json_object_get(message, "content");
    const json_t *tool_calls = json_object_get(message, "tool_calls");
    size_t capacity = 0;
    *text_p = NULL;
    *length_p = 0;
    bool ok = true;
    if (json_is_string(content)) {
        ok = kvio_http_append(text_p, length_p, &capacity, json_string_value(content),
                              json_string_length(content));
    } else if (json_is_array(content)) {
        size_t part_index;
        const json_t *part;
        json_array_foreach(content, part_index, part)
        {
            const json_t *text = json_object_get(part, "text");
            const char *type = json_string_value(json_object_get(part, "type"));
            if (!json_is_object(part) || type == NULL || strcmp(type, "text") != 0 ||
                !json_is_string(text)) {
                free(*text_p);
                return BAD(error, param, "%s[%zu] must be a text part ({\"type\": \"text\", "
                           "\"text\": ...}); kvio serves text only", param, part_index);
            }
            ok = ok && kvio_http_append(text_p, length_p, &capacity, json_string_value(text),
                                        json_string_length(text));
        }
    } else if ((content == NULL || json_is_null(content)) && json_is_array(tool_calls)) {
        char *calls = json_dumps(tool_calls, JSON_COMPACT);
        ok = calls != NULL && kvio_http_append(text_p, length_p, &capacity, calls, strlen(calls));
        free(calls);
    } else if (content == NULL || json_is_null(content)) {
        return BAD(error, param, "%s is missing", param);
    } else {
        return BAD(error, param, "%s must be a string or a list of text parts", param);
    }
    if (!ok) {
        free(*text_p);
        return fail(error, 500, "InternalServerError", NULL, "out of memory");
    }
    if (*text_p == NULL && !kvio_http_append(text_p, length_p, &capacity, "", 0))
        return fail(error, 500, "InternalServerError", NULL, "out of memory");
    return true;
}

/* messages with the request's tools (tools_text, their JSON list) as one
 * more message after the leading system or developer message, where the
 * templates expect it; messages is reallocated (NULL: out of memory, and
 * freed). */
static kvio_chat_message_t *with_tools(kvio_chat_message_t *messages, size_t count,
                                       const char *tools_text)
{
    kvio_chat_message_t *grown = realloc(messages, (count + 1) * sizeof(*grown));
    if (grown == NULL) {
        free(messages);
        return NULL;
    }
    const kvio_chat_message_t *first = &grown[0];
    bool instructions = count > 0 && first->kind == KVIO_CHAT_TEXT &&
                        ((first->role_length == 6 && memcmp(first->role, "system", 6) == 0) ||
                         (first->role_length == 9 && memcmp(first->role, "developer", 9) == 0));
    size_t at = instructions ? 1 : 0;
    memmove(&grown[at + 1], &grown[at], (count - at) * sizeof(*grown));
    grown[at] = (kvio_chat_message_t){.role = "system", .role_length = 6, .content = tools_text,
                                      .content_length = strlen(tools_text),
                                      .kind = KVIO_CHAT_TOOLS};
    return grown;
}

/* messages: through the chat template into the prompt's tokens. */
static bool read_messages(const json_t *body, const kvio_api_server_t *server,
                          kvio_tokens_t *tokens, kvio_http_error_t *error)
{
    const json_t *messages = json_object_get(body, "messages");
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return BAD(error, "messages", "messages must be a non-empty list of messages");
    size_t count = json_array_size(messages);
    kvio_chat_message_t *rendered = calloc(count, sizeof(*rendered));
    char **texts = calloc(count, sizeof(*texts));
    bool ok = rendered != NULL && texts != NULL;
    if (!ok)
        fail(error, 500, "InternalServerError", NULL, "out of memory");
    for (size_t i = 0; ok && i < count; i++) {
        const json_t *message = json_array_get(messages, i);
        const json_t *role = json_object_get(message, "role");
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        if (!json_is_object(message)) {
            snprintf(param, sizeof(param), "messages[%zu]", i);
            ok = BAD(error, param, "%s must be an object with role and content", param);
        } else if (!json_is_string(role)) {
            ok = BAD(error, param, "%s is missing (system, developer, user, assistant or tool)",
                     param);
        } else if (!kvio_chat_role_known(json_string_value(role), json_string_length(role))) {
            ok = BAD(error, param, "%s: unknown role '%s' (system, developer, user, assistant "
                     "or tool)", param, json_string_value(role));
        } else {
            size_t length = 0;
            ok = message_text(message, i, &texts[i], &length, error);
            bool calls = json_is_array(json_object_get(message, "tool_calls")) &&
                         (json_object_get(message, "content") == NULL ||
                          json_is_null(json_object_get(message, "content")));
            rendered[i] = (kvio_chat_message_t){
                .role = json_string_value(role), .role_length = json_string_length(role),
                .content = texts[i], .content_length = length,
                .kind = calls ? KVIO_CHAT_TOOL_CALLS : KVIO_CHAT_TEXT};
        }
    }
    bool generation_prompt = true;
    if (ok)
        ok = get_bool(body, "add_generation_prompt", &generation_prompt, error);
    const json_t *tools = json_object_get(body, "tools");
    char *tools_text = NULL;
    size_t num_rendered = count;
    if (ok && tools != NULL && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            ok = BAD(error, "tools", "tools must be a list of tool definitions");
        } else if ((tools_text = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL ||
                   (rendered = with_tools(rendered, count, tools_text)) == NULL) {
            ok = fail(error, 500, "InternalServerError", NULL, "out of memory");
        } else {
            num_rendered++;
        }
    }
    kvio_chat_options_t options = {.add_generation_prompt = generation_prompt};
    if (ok && kvio_chat_render(server->chat_template, server->tokenizer, rendered, num_rendered,
                               &options, tokens) != KVIO_OK)
        ok = fail(error, 500, "InternalServerError", NULL, "out of memory");
    free(tools_text);
    for (size_t i = 0; texts != NULL && i < count; i++)
        free(texts[i]);
    free(texts);
    free(rendered);
    return ok;
}

/* A field that is there and asks for something: not null, false, 0, "" or
 * an empty list. */
static bool asks(const json_t *body, const char *key)
{
    const json_t *value = json_object_get(body, key);
    return value != NULL && !json_is_null(value) && !json_is_false(value) &&
           !(json_is_integer(value) && json_integer_value(value) == 0) &&
           !(json_is_string(value) && json_string_length(value) == 0) &&
           !(json_is_array(value) && json_array_size(value) == 0);
}

/* What kvio serve does not model (its output is synthetic text of a
 * planned length), as llm-d-inference-sim lists its subset: a field whose
 * answer a client would read (logprobs, echo, ...) is refused; one that
 * only shapes the text (stop strings, tools, a response format) is served
 * without it, and the answer says so (*warning_p, a Warning header). */
static bool read_unmodelled(const json_t *body, kvio_api_request_t *request,
                            kvio_http_error_t *error)
{
    static const char *const refused[] = {"logprobs", "top_logprobs", "prompt_logprobs", "echo",
                                          "suffix"};
    static const char *const ignored[] = {"stop", "stop_token_ids", "tools", "tool_choice",
                                          "response_format", "logit_bias"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (asks(body, refused[i]))
            return BAD(error, refused[i], "%s is not served by kvio serve (its output is "
                       "synthetic text: no log probabilities, no echo)", refused[i]);
    const json_t *best_of = json_object_get(body, "best_of");
    if (json_is_integer(best_of) && json_integer_value(best_of) > 1)
        return BAD(error, "best_of", "best_of must be 1: kvio serves one choice per request");
    size_t length = 0;
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
        const char *value = NULL;
        const json_t *choice = json_object_get(body, ignored[i]);
        if (json_is_string(choice)) /* tool_choice "none" and "auto" shape nothing */
            value = json_string_value(choice);
        if (!asks(body, ignored[i]) || (value != NULL && (strcmp(value, "none") == 0 ||
                                                          strcmp(value, "auto") == 0)))
            continue;
        if (strcmp(ignored[i], "response_format") == 0 &&
            json_is_string(json_object_get(choice, "type")) &&
            strcmp(json_string_value(json_object_get(choice, "type")), "text") == 0)
            continue;
        int wrote = snprintf(request->ignored + length, sizeof(request->ignored) - length,
                             "%s%s", length > 0 ? ", " : "", ignored[i]);
        if (wrote > 0 && (size_t)wrote < sizeof(request->ignored) - length)
            length += (size_t)wrote;
    }
    return true;
}

/* stream, stream_options, n, max_tokens, min_tokens, ignore_eos, priority
 * and cache_salt. */
static bool read_sampling(kvio_api_t api, const json_t *body, kvio_api_request_t *request,
                          kvio_http_error_t *error)
{
    int64_t n = 1, priority = 0;
    if (!get_bool(body, "stream", &request->stream, error) ||
        !get_int(body, "n", 1, &n, error) || !get_int(body, "priority", INT32_MIN, &priority, error) ||
        !get_bool(body, "ignore_eos", &request->ignore_eos, error) ||
        !get_int(body, "min_tokens", 0, &request->min_tokens, error) ||
        !get_int(body, "max_tokens", 1, &request->max_tokens, error))
        return false;
    /* Chat prefers max_completion_tokens (max_tokens is deprecated there). */
    if (api == KVIO_API_CHAT && !get_int(body, "max_completion_tokens", 1, &request->max_tokens,
                                         error))
        return false;
    if (n != 1)
        return BAD(error, "n", "n must be 1: kvio serves one choice per request (got %" PRId64
                   ")", n);
    if (priority > INT32_MAX)
        return BAD(error, "priority", "priority must fit 32 bits");
    request->priority = (int32_t)priority;
    if (request->max_tokens >= 0 && request->min_tokens > request->max_tokens)
        return BAD(error, "min_tokens", "min_tokens (%" PRId64 ") must not exceed max_tokens (%"
                   PRId64 ")", request->min_tokens, request->max_tokens);
    const json_t *options;
    if (!field(body, "stream_options", JSON_OBJECT, "an object", &options, error))
        return false;
    if (options != NULL) {
        if (!request->stream)
            return BAD(error, "stream_options",
                       "Stream options can only be defined when `stream=True`.");
        if (!get_bool(options, "include_usage", &request->include_usage, error) ||
            !get_bool(options, "continuous_usage_stats", &request->continuous_usage, error))
            return false;
        request->continuous_usage = request->continuous_usage && request->include_usage;
    }
    const json_t *salt;
    if (!field(body, "cache_salt", JSON_STRING, "a string", &salt, error))
        return false;
    if (salt != NULL) {
        if (json_string_length(salt) == 0)
            return BAD(error, "cache_salt", "cache_salt must not be empty");
        request->cache_salt = kvio_cache_salt(json_string_value(salt), json_string_length(salt));
    }
    return true;
}

bool kvio_api_parse(kvio_api_t api, const char *body_text, size_t length,
                    const kvio_api_server_t *server, kvio_api_request_t *request_p,
                    kvio_http_error_t *error_p)
{
    *request_p = (kvio_api_request_t){.api = api, .max_tokens = -1};
    json_error_t parse_error;
    json_t *body = json_loadb(body_text, length, JSON_REJECT_DUPLICATES, &parse_error);
    if (body == NULL)
        return BAD(error_p, NULL, "the body is not valid JSON: line %d, column %d: %s",
                   parse_error.line, parse_error.column, parse_error.text);
    bool ok = json_is_object(body) ||
              BAD(error_p, NULL, "the body must be a JSON object");
    const json_t *model = NULL;
    if (ok)
        ok = field(body, "model", JSON_STRING, "a string", &model, error_p);
    if (ok && model != NULL && strcmp(json_string_value(model), server->model_name) != 0)
        ok = fail(error_p, 404, "NotFoundError", "model", "The model `%s` does not exist.",
                  json_string_value(model));
    if (ok)
        ok = read_sampling(api, body, request_p, error_p);
    if (ok)
        ok = read_unmodelled(body, request_p, error_p);
    if (ok)
        ok = api == KVIO_API_COMPLETIONS
                 ? read_prompt(body, server->tokenizer, &request_p->prompt, error_p)
                 : read_messages(body, server, &request_p->prompt, error_p);
    if (ok && request_p->prompt.count == 0)
        ok = BAD(error_p, api == KVIO_API_COMPLETIONS ? "prompt" : "messages",
                 "the prompt is empty (no tokens)");
    json_decref(body);
    return ok;
}

/* ---------- the output ---------- */

bool kvio_api_plan(const kvio_api_request_t *request, const kvio_api_server_t *server,
                   const kvio_dist_t *output_tokens, uint64_t seed, kvio_api_plan_t *plan_p,
                   kvio_http_error_t *error_p)
{
    uint64_t prompt = request->prompt.count;
    uint64_t context = server->max_model_len;
    if (prompt >= context)
        return BAD(error_p, "input_tokens",
                   "You passed %" PRIu64 " input tokens. However, the model's context length is "
                   "only %" PRIu64 " tokens, resulting in a maximum input length of %" PRIu64
                   " tokens. Please reduce the length of the input prompt. (parameter="
                   "input_tokens, value=%" PRIu64 ")",
                   prompt, context, context - 1, prompt);
    uint64_t max = request->max_tokens >= 0
                       ? (uint64_t)request->max_tokens
                       : request->api == KVIO_API_COMPLETIONS ? COMPLETIONS_DEFAULT_MAX_TOKENS
                                                              : context - prompt;
    if (request->max_tokens < 0 && max > context - prompt)
        max = context - prompt;
    /* vLLM's SamplingParams refuses this, against the default too (min_tokens
     * 1e9 without max_tokens was clipped to 16). */
    if ((uint64_t)request->min_tokens > max)
        return BAD(error_p, "min_tokens",
                   "min_tokens must be less than or equal to max_tokens=%" PRIu64 ", got %"
                   PRId64 ".", max, request->min_tokens);
    if (prompt + max > context)
        return BAD(error_p, request->api == KVIO_API_CHAT ? "max_completion_tokens"
                                                          : "max_tokens",
                   "You passed %" PRIu64 " input tokens and requested %" PRIu64 " output "
                   "tokens. However, the model's context length is only %" PRIu64 " tokens, "
                   "resulting in a maximum of %" PRIu64 " output tokens for this prompt. "
                   "(parameter=max_tokens, value=%" PRIu64 ")",
                   prompt, max, context, context - prompt, max);
    uint64_t text_seed = XXH3_64bits_withSeed(request->prompt.ids,
                                              request->prompt.count * sizeof(uint32_t), seed);
    uint64_t output = max;
    if (!request->ignore_eos && output_tokens != NULL) {
        kvio_rng_t rng;
        kvio_rng_seed(&rng, text_seed, 0, "http-output");
        double drawn = kvio_dist_sample(output_tokens, &rng);
        uint64_t floor_tokens = request->min_tokens > 1 ? (uint64_t)request->min_tokens : 1;
        output = drawn >= (double)max ? max : drawn < 1.0 ? 1 : (uint64_t)llround(drawn);
        if (output < floor_tokens)
            output = floor_tokens;
        if (output > max)
            output = max;
    }
    *plan_p = (kvio_api_plan_t){.output_tokens = (uint32_t)output, .length = output == max,
                                .text_seed = text_seed, .tokenizer = server->tokenizer};
    return true;
}

/* Words tried for one output token before the first is taken as it is. */
#define WORD_TRIES 64

void kvio_api_output_token(const kvio_api_plan_t *plan, uint32_t index, char text_p[5],
                           uint32_t *id_p)
{
    uint64_t word = XXH3_64bits_withSeed(&index, sizeof(index), plan->text_seed);
    kvio_token_word(word, text_p, id_p);
    if (plan->tokenizer == NULL)
        return;
    for (uint32_t try = 0; try < WORD_TRIES; try++) {
        char text[5];
        uint32_t ids[8]; /* a word of four bytes is four tokens at most: never grown */
        kvio_tokens_t tokens = {.ids = ids, .capacity = 8};
        kvio_token_word(word + try * 0x9e3779b97f4a7c15ull, text, id_p);
        if (kvio_tokenizer_encode(plan->tokenizer, text, strlen(text), false, &tokens) ==
                KVIO_OK &&
            tokens.count == 1) {
            memcpy(text_p, text, sizeof(text));
            *id_p = tokens.ids[0];
            return;
        }
    }
    kvio_tokens_t tokens = {0}; /* no one-token word: the first, its first token */
    kvio_token_word(word, text_p, id_p);
    if (kvio_tokenizer_encode(plan->tokenizer, text_p, strlen(text_p), false, &tokens) ==
            KVIO_OK &&
        tokens.count > 0)
        *id_p = tokens.ids[0];
    kvio_tokens_fini(&tokens);
}

/* ---------- responses ---------- */

json_t *kvio_api_usage_json(uint32_t prompt_tokens, uint32_t completion_tokens,
                            uint32_t cached_tokens)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", (int)prompt_tokens,
                     "total_tokens", (int)(prompt_tokens + completion_tokens),
                     "completion_tokens", (int)completion_tokens, "prompt_tokens_details",
                     "cached_tokens", (int)cached_tokens);
}

/* The text of tokens [from, to) of the plan. */
static char *output_text(const kvio_api_plan_t *plan, uint32_t from, uint32_t to)
{
    char *text = malloc((size_t)(to > from ? to - from : 0) * 4 + 1);
    if (text == NULL)
        return NULL;
    size_t length = 0;
    for (uint32_t i = from; i < to; i++) {
        char word[5];
        uint32_t id;
        kvio_api_output_token(plan, i, word, &id);
        size_t word_length = strlen(word);
        memcpy(text + length, word, word_length);
        length += word_length;
    }
    text[length] = '\0';
    return text;
}

static json_t *answer_head(const kvio_api_answer_t *answer, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", answer->id, "object", object, "created",
                     (json_int_t)answer->created, "model", answer->model);
}

json_t *kvio_api_response_json(const kvio_api_answer_t *answer, const kvio_api_plan_t *plan,
                               uint32_t generated, const char *finish_reason,
                               uint32_t cached_tokens)
{
    char *text = output_text(plan, 0, generated);
    if (text == NULL)
        return NULL;
    bool chat = answer->api == KVIO_API_CHAT;
    json_t *response = answer_head(answer, chat ? "chat.completion" : "text_completion");
    json_t *choice = chat ? json_pack("{s:i, s:{s:s, s:s, s:[]}, s:n, s:s, s:n}", "index", 0,
                                      "message", "role", "assistant", "content", text,
                                      "tool_calls", "logprobs", "finish_reason", finish_reason,
                                      "stop_reason")
                          : json_pack("{s:i, s:s, s:n, s:s, s:n}", "index", 0, "text", text,
                                      "logprobs", "finish_reason", finish_reason, "stop_reason");
    free(text);
    json_object_set_new(response, "choices", json_pack("[o]", choice));
    json_object_set_new(response, "usage",
                        kvio_api_usage_json(answer->prompt_tokens, generated, cached_tokens));
    return response;
}

/* One SSE event of value (stolen). */
static bool append_event(json_t *value, char **text_p, size_t *length_p, size_t *capacity_p)
{
    char *json = value != NULL ? json_dumps(value, JSON_COMPACT) : NULL;
    json_decref(value);
    bool ok = json != NULL && kvio_http_append(text_p, length_p, capacity_p, "data: ", 6) &&
              kvio_http_append(text_p, length_p, capacity_p, json, strlen(json)) &&
              kvio_http_append(text_p, length_p, capacity_p, "\n\n", 2);
    free(json);
    return ok;
}

/* A streamed chunk: delta (chat) or text, finish_reason (NULL: null). */
static json_t *chunk(const kvio_api_answer_t *answer, json_t *delta_or_text,
                     const char *finish_reason, uint32_t generated)
{
    bool chat = answer->api == KVIO_API_CHAT;
    json_t *value = answer_head(answer, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i}", "index", 0);
    json_object_set_new(choice, chat ? "delta" : "text", delta_or_text);
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason",
                        finish_reason != NULL ? json_string(finish_reason) : json_null());
    json_object_set_new(choice, "stop_reason", json_null());
    json_object_set_new(value, "choices", json_pack("[o]", choice));
    if (answer->continuous_usage)
        json_object_set_new(value, "usage",
                            kvio_api_usage_json(answer->prompt_tokens, generated, 0));
    return value;
}

bool kvio_api_stream_tokens(const kvio_api_answer_t *answer, const kvio_api_plan_t *plan,
                            uint32_t from, uint32_t to, const char *finish_reason,
                            char **text_p, size_t *length_p, size_t *capacity_p)
{
    bool chat = answer->api == KVIO_API_CHAT;
    bool ok = true;
    if (chat && from == 0) /* vLLM's role chunk comes with the first token */
        ok = append_event(chunk(answer, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                                  ""),
                                NULL, 0),
                          text_p, length_p, capacity_p);
    char *text = output_text(plan, from, to);
    if (text == NULL)
        return false;
    json_t *content = chat ? json_pack("{s:s}", "content", text) : json_string(text);
    free(text);
    return ok && append_event(chunk(answer, content, finish_reason, to), text_p, length_p,
                              capacity_p);
}

bool kvio_api_stream_end(const kvio_api_answer_t *answer, const char *finish_reason,
                         uint32_t generated, uint32_t cached_tokens, char **text_p,
                         size_t *length_p, size_t *capacity_p)
{
    bool ok = true;
    if (finish_reason != NULL)
        ok = append_event(chunk(answer,
                                answer->api == KVIO_API_CHAT ? json_pack("{s:s}", "content", "")
                                                             : json_string(""),
                                finish_reason, generated),
                          text_p, length_p, capacity_p);
    if (ok && answer->include_usage) {
        json_t *usage = answer_head(answer, answer->api == KVIO_API_CHAT ? "chat.completion.chunk"
                                                                         : "text_completion");
        json_object_set_new(usage, "choices", json_array());
        json_object_set_new(usage, "usage", kvio_api_usage_json(answer->prompt_tokens, generated,
                                                                cached_tokens));
        ok = append_event(usage, text_p, length_p, capacity_p);
    }
    return ok && kvio_http_append(text_p, length_p, capacity_p, "data: [DONE]\n\n", 14);
}

/* text cut to its whole UTF-8 characters, in place: a message cut at its
 * buffer's end may split one of the user's, and jansson refuses that. */
static const char *utf8_whole(char *text)
{
    text[kvio_utf8_valid_length(text, strlen(text))] = '\0';
    return text;
}

json_t *kvio_api_error_json(const kvio_http_error_t *error)
{
    char message[sizeof(error->message)], param[sizeof(error->param)];
    snprintf(message, sizeof(message), "%s", error->message);
    snprintf(param, sizeof(param), "%s", error->param);
    return json_pack("{s:{s:s, s:s, s:o, s:i}}", "error", "message", utf8_whole(message), "type",
                     error->type != NULL ? error->type : "BadRequestError", "param",
                     param[0] != '\0' ? json_string(utf8_whole(param)) : json_null(), "code",
                     error->status);
}
