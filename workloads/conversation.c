/* Reading conversation logs (kvio/conversation.h): OpenAI chat-completions
 * request logs and kvio's conversation format (JSON Lines), and ShareGPT
 * (a JSON array), into sessions of turns. */
#include "kvio/conversation.h"

#include "kvio/array.h"
#include "kvio/hashset.h"
#include "kvio/files.h"
#include "kvio/log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* Where an entry is, for messages: "FILE:LINE" or "FILE: [INDEX]". */
typedef struct place {
    const char *path;
    size_t line;  /* 0: a ShareGPT entry */
    size_t entry;
} place_t;

static kvio_status_t bad(const place_t *place, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kvio_status_t bad(const place_t *place, const char *key, const char *fmt, ...)
{
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    if (place->line > 0)
        kvio_log(KVIO_LOG_ERROR, "%s:%zu: %s: %s", place->path, place->line, key, message);
    else
        kvio_log(KVIO_LOG_ERROR, "%s: [%zu].%s: %s", place->path, place->entry, key, message);
    return KVIO_ERR_INVALID;
}

/* ---------- turns and sessions ---------- */

static void turn_fini(kvio_conversation_turn_t *turn)
{
    for (size_t i = 0; i < turn->num_messages; i++)
        free((char *)turn->messages[i].content);
    free(turn->messages);
    free(turn->labels);
    free(turn->output);
}

void kvio_conversation_log_free(kvio_conversation_log_t *log)
{
    if (log == NULL)
        return;
    for (size_t s = 0; s < log->num_sessions; s++) {
        for (size_t t = 0; t < log->sessions[s].num_turns; t++)
            turn_fini(&log->sessions[s].turns[t]);
        free(log->sessions[s].turns);
        free(log->sessions[s].id);
    }
    free(log->sessions);
    free(log->path);
    free(log);
}

/* A message's role as one of the five a template knows (a static string);
 * ShareGPT's names map to them. NULL for a role nobody uses. */
static const char *canonical_role(const char *role)
{
    static const struct {
        const char *name, *role;
    } roles[] = {
        {"system", "system"}, {"developer", "developer"}, {"user", "user"},
        {"assistant", "assistant"}, {"tool", "tool"}, {"human", "user"},
        {"gpt", "assistant"}, {"chatgpt", "assistant"}, {"bard", "assistant"},
        {"bing", "assistant"}, {"model", "assistant"}, {"function", "tool"},
        {"observation", "tool"}, {"ipython", "tool"},
    };
    for (size_t i = 0; role != NULL && i < sizeof(roles) / sizeof(roles[0]); i++)
        if (strcmp(role, roles[i].name) == 0)
            return roles[i].role;
    return NULL;
}

/* Appends a message (content taken: malloc'd; of kind) with its label to
 * turn. */
static kvio_status_t turn_add(kvio_conversation_turn_t *turn, size_t *capacity_p,
                              const char *role, const char *label, char *content, size_t length,
                              kvio_chat_content_t kind)
{
    size_t old = *capacity_p;
    if (kvio_array_reserve((void **)&turn->messages, capacity_p, turn->num_messages + 1,
                           sizeof(kvio_chat_message_t), 8) != KVIO_OK ||
        (*capacity_p != old &&
         kvio_array_reserve((void **)&turn->labels, &old, *capacity_p, sizeof(char *), 8) !=
             KVIO_OK)) {
        free(content);
        return KVIO_ERR_NOMEM;
    }
    turn->messages[turn->num_messages] =
        (kvio_chat_message_t){.role = role, .role_length = strlen(role), .content = content,
                              .content_length = length, .kind = kind};
    turn->labels[turn->num_messages++] = label;
    return KVIO_OK;
}

static char *copy_bytes(const char *bytes, size_t length)
{
    char *copy = malloc(length + 1);
    if (copy != NULL) {
        memcpy(copy, bytes, length);
        copy[length] = '\0';
    }
    return copy;
}

/* A message's content as text: a string, text parts joined, or (an
 * assistant's tool calls without content) the calls as compact JSON. */
static kvio_status_t content_text(const json_t *message, const place_t *place, const char *key,
                                  char **text_p, size_t *length_p, kvio_chat_content_t *kind_p)
{
    *kind_p = KVIO_CHAT_TEXT;
    const json_t *content = json_object_get(message, "content");
    if (content == NULL)
        content = json_object_get(message, "value"); /* ShareGPT */
    if (json_is_string(content)) {
        *length_p = json_string_length(content);
        *text_p = copy_bytes(json_string_value(content), *length_p);
        return *text_p ? KVIO_OK : KVIO_ERR_NOMEM;
    }
    const json_t *calls = json_object_get(message, "tool_calls");
    if (json_is_array(content)) {
        size_t length = 0;
        for (size_t i = 0; i < json_array_size(content); i++) {
            const json_t *part = json_array_get(content, i);
            const json_t *text = json_is_string(part) ? part : json_object_get(part, "text");
            length += json_string_length(text);
        }
        char *joined = malloc(length + 1);
        if (joined == NULL)
            return KVIO_ERR_NOMEM;
        size_t at = 0;
        for (size_t i = 0; i < json_array_size(content); i++) {
            const json_t *part = json_array_get(content, i);
            const json_t *text = json_is_string(part) ? part : json_object_get(part, "text");
            memcpy(joined + at, json_string_value(text) ? json_string_value(text) : "",
                   json_string_length(text));
            at += json_string_length(text);
        }
        joined[at] = '\0';
        *text_p = joined;
        *length_p = at;
        return KVIO_OK;
    }
    if ((content == NULL || json_is_null(content)) && json_is_array(calls)) {
        *kind_p = KVIO_CHAT_TOOL_CALLS;
        *text_p = json_dumps(calls, JSON_COMPACT | JSON_PRESERVE_ORDER);
        *length_p = *text_p ? strlen(*text_p) : 0;
        return *text_p ? KVIO_OK : KVIO_ERR_NOMEM;
    }
    return bad(place, key, "no content (a text, text parts, or tool_calls)");
}

/* One message of a request into turn. */
static kvio_status_t read_message(const json_t *message, const place_t *place, size_t index,
                                  const char *list, kvio_conversation_turn_t *turn,
                                  size_t *capacity_p)
{
    char key[96];
    snprintf(key, sizeof(key), "%s[%zu]", list, index);
    if (!json_is_object(message))
        return bad(place, key, "not a message object");
    const json_t *role_json = json_object_get(message, "role");
    if (role_json == NULL)
        role_json = json_object_get(message, "from"); /* ShareGPT */
    const char *role = canonical_role(json_string_value(role_json));
    if (role == NULL) {
        /* The key the format names: ShareGPT's conversations say "from". */
        const char *name = json_object_get(message, "role") != NULL   ? "role"
                           : json_object_get(message, "from") != NULL ? "from"
                           : strcmp(list, "conversations") == 0       ? "from"
                                                                      : "role";
        snprintf(key, sizeof(key), "%s[%zu].%s", list, index, name);
        if (role_json == NULL)
            return bad(place, key, "missing (system, developer, user, assistant or tool)");
        return bad(place, key, "unknown role '%s' (system, developer, user, assistant, tool)",
                   json_string_value(role_json) ? json_string_value(role_json) : "(not text)");
    }
    char *text = NULL;
    size_t length = 0;
    kvio_chat_content_t kind;
    kvio_status_t status = content_text(message, place, key, &text, &length, &kind);
    if (status == KVIO_OK)
        status = turn_add(turn, capacity_p, role, role, text, length, kind);
    return status;
}

static kvio_conversation_session_t *session_for(kvio_conversation_log_t *log, kvio_map_t *index,
                                                const char *key, size_t key_length,
                                                const char *id)
{
    uint64_t hash = XXH3_64bits(key, key_length);
    uint32_t found = kvio_map_get(index, hash);
    if (found != 0)
        return &log->sessions[found - 1];
    if (kvio_array_reserve((void **)&log->sessions, &log->sessions_capacity,
                           log->num_sessions + 1, sizeof(*log->sessions), 64) != KVIO_OK)
        return NULL;
    char generated[32];
    if (id == NULL) {
        snprintf(generated, sizeof(generated), "#%zu", log->num_sessions + 1);
        id = generated;
    }
    kvio_conversation_session_t *session = &log->sessions[log->num_sessions];
    *session = (kvio_conversation_session_t){.id = strdup(id)};
    if (session->id == NULL || kvio_map_set(index, hash, (uint32_t)log->num_sessions + 1) != KVIO_OK) {
        free(session->id);
        return NULL;
    }
    log->num_sessions++;
    return session;
}

static kvio_status_t session_add(kvio_conversation_log_t *log, kvio_conversation_session_t *session,
                                 kvio_conversation_turn_t *turn)
{
    if (kvio_array_reserve((void **)&session->turns, &session->turns_capacity,
                           session->num_turns + 1, sizeof(*turn), 8) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    session->turns[session->num_turns++] = *turn;
    log->num_turns++;
    return KVIO_OK;
}

/* ---------- JSON Lines: OpenAI request logs, kvio's format ---------- */

/* A time: seconds as a number, or ISO 8601 (2026-12-02T16:04:05.25Z). */
/* A log's times are seconds from 0 (relative) to 2100-01-01 (Unix): past
 * that a time is a mistake, and 1e30 overflowed the trace's arrival and
 * the date harmony writes. */
#define LOG_TIME_MAX_S 4102444800.0

static bool parse_time(const json_t *value, double *seconds_p)
{
    if (json_is_number(value)) {
        *seconds_p = json_number_value(value);
        return isfinite(*seconds_p);
    }
    const char *text = json_string_value(value);
    struct tm parts = {0};
    const char *rest = text ? strptime(text, "%Y-%m-%dT%H:%M:%S", &parts) : NULL;
    if (rest == NULL)
        rest = text ? strptime(text, "%Y-%m-%d %H:%M:%S", &parts) : NULL;
    if (rest == NULL)
        return false;
    double fraction = 0;
    if (*rest == '.') {
        char *end;
        fraction = strtod(rest, &end);
        rest = end;
    }
    if (*rest != '\0' && strcmp(rest, "Z") != 0 && strcmp(rest, "+00:00") != 0)
        return false;
    *seconds_p = (double)timegm(&parts) + fraction;
    return true;
}

/* The first field of names that object has. */
static const json_t *first_of(const json_t *object, const char *const *names)
{
    for (; *names != NULL; names++) {
        const json_t *value = json_object_get(object, *names);
        if (value != NULL && !json_is_null(value))
            return value;
    }
    return NULL;
}

/* The answer: output (kvio's format) or the logged response's. */
static kvio_status_t read_answer(const json_t *line, const place_t *place,
                                 kvio_conversation_turn_t *turn)
{
    const json_t *response = json_object_get(line, "response");
    const json_t *choice = json_array_get(json_object_get(response, "choices"), 0);
    const json_t *output = json_object_get(line, "output");
    if (output == NULL)
        output = json_object_get(json_object_get(choice, "message"), "content");
    if (output == NULL || json_is_null(output))
        output = json_object_get(choice, "text");
    const json_t *calls = json_object_get(json_object_get(choice, "message"), "tool_calls");
    if ((output == NULL || json_is_null(output)) && json_is_array(calls)) {
        /* Tool calls, as the next request's history holds them. */
        turn->output_kind = KVIO_CHAT_TOOL_CALLS;
        turn->output = json_dumps(calls, JSON_COMPACT | JSON_PRESERVE_ORDER);
        turn->output_length = turn->output ? strlen(turn->output) : 0;
        return turn->output ? KVIO_OK : KVIO_ERR_NOMEM;
    }
    if (output != NULL && !json_is_null(output)) {
        if (!json_is_string(output))
            return bad(place, "output", "not a text");
        turn->output_length = json_string_length(output);
        turn->output = copy_bytes(json_string_value(output), turn->output_length);
        if (turn->output == NULL)
            return KVIO_ERR_NOMEM;
    }
    const json_t *tokens = json_object_get(line, "output_tokens");
    if (tokens == NULL)
        tokens = json_object_get(json_object_get(response, "usage"), "completion_tokens");
    if (tokens == NULL)
        tokens = json_object_get(json_object_get(line, "usage"), "completion_tokens");
    if (tokens != NULL && !json_is_null(tokens)) {
        if (!json_is_integer(tokens) || json_integer_value(tokens) < 0 ||
            json_integer_value(tokens) > UINT32_MAX)
            return bad(place, "output_tokens", "not a token count");
        turn->output_tokens = (uint32_t)json_integer_value(tokens);
    }
    return KVIO_OK;
}

/* The request's messages, with its tools after the first system or
 * developer message (where templates write them). */
static kvio_status_t read_request_messages(const json_t *body, const place_t *place,
                                           kvio_conversation_turn_t *turn)
{
    const json_t *messages = json_object_get(body, "messages");
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return bad(place, "messages", "missing or not a non-empty list of messages");
    size_t capacity = 0;
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; status == KVIO_OK && i < json_array_size(messages); i++)
        status = read_message(json_array_get(messages, i), place, i, "messages", turn, &capacity);
    const json_t *tools = json_object_get(body, "tools");
    if (status != KVIO_OK || tools == NULL || json_is_null(tools))
        return status;
    if (!json_is_array(tools))
        return bad(place, "tools", "not a list");
    /* The list as the request holds it; each template writes it its way. */
    char *text = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (text == NULL)
        return KVIO_ERR_NOMEM;
    status = turn_add(turn, &capacity, "system", "tools", text, strlen(text), KVIO_CHAT_TOOLS);
    if (status != KVIO_OK)
        return status;
    /* Move it from the end to after the leading system or developer message. */
    size_t at = turn->num_messages > 1 && (strcmp(turn->messages[0].role, "system") == 0 ||
                                           strcmp(turn->messages[0].role, "developer") == 0);
    kvio_chat_message_t moved = turn->messages[turn->num_messages - 1];
    memmove(&turn->messages[at + 1], &turn->messages[at],
            (turn->num_messages - 1 - at) * sizeof(moved));
    memmove(&turn->labels[at + 1], &turn->labels[at],
            (turn->num_messages - 1 - at) * sizeof(char *));
    turn->messages[at] = moved;
    turn->labels[at] = "tools";
    return KVIO_OK;
}

/* The session a line belongs to: its session field, or its first user
 * message. */
static kvio_conversation_session_t *line_session(kvio_conversation_log_t *log, kvio_map_t *index,
                                                 const json_t *line, const json_t *body,
                                                 const kvio_conversation_turn_t *turn)
{
    static const char *const names[] = {"session", "session_id", "conversation_id", NULL};
    const json_t *id = first_of(line, names);
    if (id == NULL)
        id = first_of(body, names);
    if (id == NULL)
        id = json_object_get(json_object_get(body, "metadata"), "session_id");
    if (id == NULL)
        id = json_object_get(body, "user");
    char number[32];
    const char *text = json_string_value(id);
    if (json_is_integer(id)) {
        snprintf(number, sizeof(number), "%lld", (long long)json_integer_value(id));
        text = number;
    }
    if (text != NULL)
        return session_for(log, index, text, strlen(text), text);
    for (size_t i = 0; i < turn->num_messages; i++)
        if (strcmp(turn->messages[i].role, "user") == 0)
            return session_for(log, index, turn->messages[i].content,
                               turn->messages[i].content_length, NULL);
    return session_for(log, index, "", 0, NULL);
}

static kvio_status_t read_line(kvio_conversation_log_t *log, kvio_map_t *index,
                               const place_t *place, const char *text)
{
    json_error_t error;
    json_t *line = json_loads(text, JSON_REJECT_DUPLICATES, &error);
    if (line == NULL)
        return bad(place, "JSON", "%s (column %d)", error.text, error.column);
    kvio_status_t status = KVIO_OK;
    kvio_conversation_turn_t turn = {.time_s = NAN, .line = place->line};
    const json_t *body = json_object_get(line, "request");
    if (body == NULL)
        body = json_object_get(line, "body");
    if (body == NULL)
        body = line;
    if (!json_is_object(line) || !json_is_object(body))
        status = bad(place, "request", "not a JSON object");
    static const char *const time_names[] = {"time", "timestamp", "created", NULL};
    const json_t *time = json_is_object(line) ? first_of(line, time_names) : NULL;
    if (status == KVIO_OK && time != NULL && !parse_time(time, &turn.time_s))
        status = bad(place, "time", "not seconds or an ISO 8601 time");
    if (status == KVIO_OK && time != NULL && !(turn.time_s >= 0 && turn.time_s < LOG_TIME_MAX_S))
        status = bad(place, "time", "%.6g s is not a time from 0 to %.0f (before 2100-01-01 as "
                     "Unix seconds)", turn.time_s, LOG_TIME_MAX_S);
    if (status == KVIO_OK)
        status = read_request_messages(body, place, &turn);
    if (status == KVIO_OK)
        status = read_answer(line, place, &turn);
    kvio_conversation_session_t *session = NULL;
    if (status == KVIO_OK) {
        session = line_session(log, index, line, body, &turn);
        status = session != NULL ? session_add(log, session, &turn) : KVIO_ERR_NOMEM;
    }
    if (status != KVIO_OK)
        turn_fini(&turn);
    json_decref(line);
    return status;
}

static kvio_status_t read_json_lines(kvio_conversation_log_t *log, FILE *file)
{
    kvio_map_t index = {0};
    char *text = NULL;
    size_t capacity = 0;
    place_t place = {.path = log->path};
    kvio_status_t status = KVIO_OK;
    ssize_t length;
    while (status == KVIO_OK && (length = getline(&text, &capacity, file)) >= 0) {
        place.line++;
        size_t first = strspn(text, " \t\r\n");
        if ((size_t)length > first)
            status = read_line(log, &index, &place, text);
    }
    free(text);
    kvio_map_fini(&index);
    log->format = "openai";
    return status;
}

/* ---------- ShareGPT ---------- */

/* One conversation: a turn at every user message, with the messages before
 * it and the answer after it. */
static kvio_status_t read_sharegpt_entry(kvio_conversation_log_t *log, const json_t *entry,
                                         const place_t *place)
{
    const char *list = "conversations";
    const json_t *messages = json_object_get(entry, list);
    if (messages == NULL)
        messages = json_object_get(entry, list = "messages");
    if (!json_is_array(messages))
        return bad(place, "conversations", "missing or not a list of messages");
    char number[32];
    const json_t *id = json_object_get(entry, "id");
    const char *name = json_string_value(id);
    if (name == NULL) {
        snprintf(number, sizeof(number), "#%zu", place->entry);
        name = number;
    }
    if (kvio_array_reserve((void **)&log->sessions, &log->sessions_capacity,
                           log->num_sessions + 1, sizeof(*log->sessions), 64) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    kvio_conversation_session_t *session = &log->sessions[log->num_sessions];
    *session = (kvio_conversation_session_t){.id = strdup(name)};
    if (session->id == NULL)
        return KVIO_ERR_NOMEM;
    log->num_sessions++;
    /* All messages once, then each turn copies the ones before it. */
    kvio_conversation_turn_t all = {0};
    size_t capacity = 0;
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; status == KVIO_OK && i < json_array_size(messages); i++)
        status = read_message(json_array_get(messages, i), place, i, list, &all, &capacity);
    for (size_t i = 0; status == KVIO_OK && i < all.num_messages; i++) {
        if (strcmp(all.messages[i].role, "user") != 0)
            continue;
        kvio_conversation_turn_t turn = {.time_s = NAN, .line = place->entry};
        size_t turn_capacity = 0;
        for (size_t m = 0; status == KVIO_OK && m <= i; m++) {
            char *copy = copy_bytes(all.messages[m].content, all.messages[m].content_length);
            status = copy ? turn_add(&turn, &turn_capacity, all.messages[m].role,
                                     all.labels[m], copy, all.messages[m].content_length,
                                     all.messages[m].kind)
                          : KVIO_ERR_NOMEM;
        }
        if (status == KVIO_OK && i + 1 < all.num_messages &&
            strcmp(all.messages[i + 1].role, "assistant") == 0) {
            turn.output_length = all.messages[i + 1].content_length;
            turn.output_kind = all.messages[i + 1].kind;
            turn.output = copy_bytes(all.messages[i + 1].content, turn.output_length);
            status = turn.output ? KVIO_OK : KVIO_ERR_NOMEM;
        }
        if (status == KVIO_OK)
            status = session_add(log, session, &turn);
        if (status != KVIO_OK)
            turn_fini(&turn);
    }
    turn_fini(&all);
    return status;
}

static kvio_status_t read_sharegpt(kvio_conversation_log_t *log)
{
    json_error_t error;
    json_t *root = json_load_file(log->path, 0, &error);
    if (root == NULL) {
        kvio_log(KVIO_LOG_ERROR, "%s:%d:%d: %s", log->path, error.line, error.column, error.text);
        return KVIO_ERR_INVALID;
    }
    kvio_status_t status = KVIO_OK;
    place_t place = {.path = log->path};
    for (size_t i = 0; status == KVIO_OK && i < json_array_size(root); i++) {
        place.entry = i;
        const json_t *entry = json_array_get(root, i);
        status = json_is_object(entry) ? read_sharegpt_entry(log, entry, &place)
                                       : bad(&place, "conversations", "not a conversation object");
    }
    json_decref(root);
    log->format = "sharegpt";
    return status;
}

/* ---------- either ---------- */

static int by_time(const void *left_p, const void *right_p)
{
    const kvio_conversation_turn_t *left = left_p, *right = right_p;
    if (left->time_s != right->time_s)
        return left->time_s < right->time_s ? -1 : 1;
    return left->line < right->line ? -1 : left->line > right->line;
}

/* A session whose turns all have times is in time order (file order
 * breaks ties). */
static void order_turns(kvio_conversation_session_t *session)
{
    for (size_t t = 0; t < session->num_turns; t++)
        if (isnan(session->turns[t].time_s))
            return;
    qsort(session->turns, session->num_turns, sizeof(*session->turns), by_time);
}

kvio_status_t kvio_conversation_load(const char *path, kvio_conversation_log_t **log_p)
{
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        kvio_log(KVIO_LOG_ERROR, "%s: %s", path, strerror(errno));
        return KVIO_ERR_INVALID;
    }
    kvio_conversation_log_t *log = calloc(1, sizeof(*log));
    if (log == NULL || (log->path = strdup(path)) == NULL) {
        free(log);
        fclose(file);
        return KVIO_ERR_NOMEM;
    }
    int first = kvio_file_first_byte(file);
    kvio_status_t status = kvio_file_check_json_memory(path, file);
    if (status == KVIO_OK)
        status = first == '[' ? read_sharegpt(log) : read_json_lines(log, file);
    fclose(file);
    if (status == KVIO_OK && log->num_turns == 0) {
        kvio_log(KVIO_LOG_ERROR, "%s: no conversation turns in it", path);
        status = KVIO_ERR_INVALID;
    }
    if (status != KVIO_OK) {
        kvio_conversation_log_free(log);
        return status;
    }
    for (size_t s = 0; s < log->num_sessions; s++)
        order_turns(&log->sessions[s]);
    *log_p = log;
    return KVIO_OK;
}
