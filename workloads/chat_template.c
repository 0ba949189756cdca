/* The chat templates (kvio/tokenizer.h): messages become the text a
 * model's own chat template writes, as vLLM renders it (tool-call arguments
 * parsed to objects first, Jinja's tojson as Python's json.dumps), then
 * tokens. Three templates, each as its model card's Jinja writes it:
 *
 * harmony (gpt-oss): a system message the template always writes (model
 * identity, knowledge cutoff, the current date, reasoning effort, the
 * channels), a developer message with the leading system message as
 * "# Instructions" and the tools as a TypeScript namespace, previous
 * answers on the final channel (their analysis dropped), tool calls to
 * functions.NAME on the commentary channel ending <|call|>, tool results
 * from functions.NAME as JSON strings; system messages past the first are
 * not written.
 *
 * llama3 (Llama 3.1/3.2/3.3): <|begin_of_text|>, a system header the
 * template always writes ("Cutting Knowledge Date: December 2023", "Today
 * Date: 26 Jul 2024", "Environment: ipython" with tools), contents
 * trimmed, tools in the first user message (tools_in_user_message, the
 * default), a tool call as {"name", "parameters"}, tool results as ipython
 * JSON strings.
 *
 * chatml (Qwen3): the tools in the system message inside <tools></tools>,
 * tool calls in <tool_call></tool_call>, runs of tool results as one user
 * message of <tool_response>s.
 *
 * Not written: reasoning (thinking) text, which logs do not carry; builtin
 * tools; Qwen3's empty <think> block before a trailing assistant message;
 * the whitespace Jinja leaves inside harmony's nested object types. */
#include "kvio/tokenizer.h"

#include "kvio/array.h"
#include "kvio/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Special tokens, written as the templates write them; the approximate
 * tokenizer gives each its index in this list plus one, below the text ids. */
enum {
    TOKEN_IM_START, TOKEN_IM_END,                              /* chatml */
    TOKEN_BEGIN_OF_TEXT, TOKEN_START_HEADER, TOKEN_END_HEADER, /* llama3 */
    TOKEN_EOT,
    TOKEN_START, TOKEN_MESSAGE, TOKEN_END, TOKEN_CHANNEL,      /* harmony */
    TOKEN_CALL,
    NUM_SPECIAL_TOKENS
};

static const char *const special_texts[NUM_SPECIAL_TOKENS] = {
    "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<|start|>", "<|message|>", "<|end|>", "<|channel|>",
    "<|call|>",
};

/* The special tokens a template always writes, ending with -1 (harmony's
 * <|call|> only with a tool call). */
static const int template_specials[][5] = {
    {TOKEN_IM_START, TOKEN_IM_END, -1},
    {TOKEN_BEGIN_OF_TEXT, TOKEN_START_HEADER, TOKEN_END_HEADER, TOKEN_EOT, -1},
    {TOKEN_START, TOKEN_MESSAGE, TOKEN_END, TOKEN_CHANNEL, -1},
};

static const char *const template_names[] = {"chatml", "llama3", "harmony"};

kvio_status_t kvio_chat_template_find(const char *name, kvio_chat_template_t *template_p)
{
    for (size_t i = 0; i < sizeof(template_names) / sizeof(template_names[0]); i++) {
        if (strcmp(name, template_names[i]) == 0) {
            *template_p = (kvio_chat_template_t)i;
            return KVIO_OK;
        }
    }
    return KVIO_ERR_NOT_FOUND;
}

const char *kvio_chat_template_name(kvio_chat_template_t template_id)
{
    return (size_t)template_id < sizeof(template_names) / sizeof(template_names[0])
               ? template_names[template_id]
               : "unknown";
}

bool kvio_chat_role_known(const char *role, size_t length)
{
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
        if (strlen(roles[i]) == length && memcmp(roles[i], role, length) == 0)
            return true;
    return false;
}

/* The first special token of the template the tokenizer lacks, or -1. */
static int missing_special(kvio_chat_template_t template_id, const kvio_tokenizer_t *tokenizer)
{
    for (const int *special = template_specials[template_id]; *special >= 0; special++) {
        uint32_t id;
        if (kvio_tokenizer_special_id(tokenizer, special_texts[*special], &id) != KVIO_OK)
            return *special;
    }
    return -1;
}

kvio_status_t kvio_chat_template_for(const kvio_tokenizer_t *tokenizer,
                                     kvio_chat_template_t *template_p)
{
    for (size_t i = 0; i < sizeof(template_names) / sizeof(template_names[0]); i++) {
        if (missing_special((kvio_chat_template_t)i, tokenizer) < 0) {
            *template_p = (kvio_chat_template_t)i;
            return KVIO_OK;
        }
    }
    return KVIO_ERR_NOT_FOUND;
}

kvio_status_t kvio_chat_template_check(kvio_chat_template_t template_id,
                                       const kvio_tokenizer_t *tokenizer)
{
    int special = missing_special(template_id, tokenizer);
    if (special < 0)
        return KVIO_OK;
    kvio_log(KVIO_LOG_ERROR,
             "the chat template %s writes %s, which the tokenizer %s does not have: choose the "
             "template of its model",
             template_names[template_id], special_texts[special],
             kvio_tokenizer_describe(tokenizer));
    return KVIO_ERR_INVALID;
}

/* ---------- the renderer: text in parts ---------- */

/* A template's parts, appended in order into one text: a special token
 * (as it is written) or some text; each part's start and kind are kept, so
 * that the approximate tokenizer can take each part on its own. */
typedef struct part {
    size_t offset;
    int special; /* the special token, or -1 for text */
} part_t;

typedef struct renderer {
    kvio_chat_rendering_t *out;
    part_t *parts;
    size_t num_parts, parts_capacity;
    size_t text_capacity;
    kvio_status_t status;
} renderer_t;

static void append_part(renderer_t *out, int token, const char *bytes, size_t length)
{
    kvio_chat_rendering_t *rendering = out->out;
    if (out->status == KVIO_OK)
        out->status = kvio_array_reserve((void **)&out->parts, &out->parts_capacity,
                                         out->num_parts + 1, sizeof(part_t), 64);
    if (out->status == KVIO_OK)
        out->status = kvio_array_reserve((void **)&rendering->text, &out->text_capacity,
                                         rendering->length + length + 1, 1, 1024);
    if (out->status != KVIO_OK || length == 0)
        return;
    out->parts[out->num_parts++] = (part_t){.offset = rendering->length, .special = token};
    memcpy(rendering->text + rendering->length, bytes, length);
    rendering->length += length;
    rendering->text[rendering->length] = '\0';
}

static void special(renderer_t *out, int token)
{
    append_part(out, token, special_texts[token], strlen(special_texts[token]));
}

static void text(renderer_t *out, const char *bytes, size_t length)
{
    append_part(out, -1, bytes, length);
}

static void literal(renderer_t *out, const char *bytes)
{
    text(out, bytes, strlen(bytes));
}

static void json_text(renderer_t *out, const json_t *value, size_t flags)
{
    char *dumped = value != NULL ? json_dumps(value, flags | JSON_PRESERVE_ORDER |
                                                         JSON_ENCODE_ANY)
                                 : NULL;
    if (dumped == NULL && value != NULL && out->status == KVIO_OK)
        out->status = KVIO_ERR_NOMEM;
    if (dumped != NULL)
        literal(out, dumped);
    free(dumped);
}

/* Jinja's tojson as transformers defines it: json.dumps with ", " and ": "
 * and no ASCII escaping (jansson's defaults without JSON_COMPACT). */
static void tojson(renderer_t *out, const json_t *value)
{
    json_text(out, value, 0);
}

/* A message's content as a JSON string, as tojson writes a text. */
static void content_tojson(renderer_t *out, const kvio_chat_message_t *message)
{
    json_t *string = json_stringn_nocheck(message->content, message->content_length);
    if (string == NULL && out->status == KVIO_OK)
        out->status = KVIO_ERR_NOMEM;
    tojson(out, string);
    json_decref(string);
}

/* Text without the leading and trailing whitespace Jinja's trim drops. */
static void trimmed(renderer_t *out, const char *bytes, size_t length)
{
    while (length > 0 && strchr(" \t\n\r\f\v", bytes[0]) != NULL) {
        bytes++;
        length--;
    }
    while (length > 0 && strchr(" \t\n\r\f\v", bytes[length - 1]) != NULL)
        length--;
    text(out, bytes, length);
}

static bool role_is(const kvio_chat_message_t *message, const char *role)
{
    return message->role_length == strlen(role) &&
           memcmp(message->role, role, message->role_length) == 0;
}

static bool is_instructions(const kvio_chat_message_t *message)
{
    return message->kind == KVIO_CHAT_TEXT &&
           (role_is(message, "system") || role_is(message, "developer"));
}

/* ---------- tool definitions and calls ---------- */

/* The content parsed as JSON (NULL when it is not). */
static json_t *content_json(const kvio_chat_message_t *message)
{
    return json_loadb(message->content, message->content_length, JSON_DECODE_ANY, NULL);
}

/* One tool call: its function's name and its arguments, parsed from their
 * JSON text as vLLM does before rendering (a text that is not JSON stays a
 * string). */
typedef struct tool_call {
    const char *name;
    json_t *arguments; /* owned */
} tool_call_t;

static tool_call_t tool_call_of(const json_t *call)
{
    const json_t *function = json_object_get(call, "function");
    if (function == NULL)
        function = call;
    tool_call_t parsed = {.name = json_string_value(json_object_get(function, "name"))};
    if (parsed.name == NULL)
        parsed.name = "";
    const json_t *arguments = json_object_get(function, "arguments");
    if (json_is_string(arguments)) {
        parsed.arguments = json_loads(json_string_value(arguments), JSON_DECODE_ANY, NULL);
        if (parsed.arguments == NULL)
            parsed.arguments = json_copy((json_t *)arguments);
    } else {
        parsed.arguments = arguments != NULL ? json_incref((json_t *)arguments) : json_object();
    }
    return parsed;
}

/* A tool's function object (OpenAI's {"type": "function", "function":
 * {...}}, or the function itself). */
static const json_t *function_of(const json_t *tool)
{
    const json_t *function = json_object_get(tool, "function");
    return function != NULL ? function : tool;
}

static bool name_in(const json_t *names, const char *name)
{
    size_t i;
    const json_t *value;
    json_array_foreach(names, i, value) {
        if (json_is_string(value) && strcmp(json_string_value(value), name) == 0)
            return true;
    }
    return false;
}

/* harmony's render_typescript_type: a JSON schema as a TypeScript type. */
static void typescript_type(renderer_t *out, const json_t *spec)
{
    const json_t *type = json_object_get(spec, "type");
    const char *kind = json_string_value(type);
    bool nullable = json_is_true(json_object_get(spec, "nullable"));
    if (kind != NULL && strcmp(kind, "array") == 0) {
        const json_t *items = json_object_get(spec, "items");
        const char *item = json_string_value(json_object_get(items, "type"));
        if (items == NULL) {
            literal(out, "any[]");
        } else if (item != NULL && (strcmp(item, "string") == 0 || strcmp(item, "boolean") == 0)) {
            literal(out, item);
            literal(out, "[]");
        } else if (item != NULL && (strcmp(item, "number") == 0 || strcmp(item, "integer") == 0)) {
            literal(out, "number[]");
        } else {
            /* Rendered apart to measure it: over 50 characters is any[]. */
            kvio_chat_rendering_t inner_text = {0};
            renderer_t inner = {.out = &inner_text, .status = KVIO_OK};
            typescript_type(&inner, items);
            bool any = inner.status != KVIO_OK || inner_text.length > 50 ||
                       (inner_text.text != NULL && strcmp(inner_text.text, "object | object") == 0);
            if (any)
                literal(out, "any");
            else
                text(out, inner_text.text, inner_text.length);
            literal(out, "[]");
            if (inner.status != KVIO_OK && out->status == KVIO_OK)
                out->status = inner.status;
            free(inner.parts);
            free(inner_text.text);
        }
        if (nullable)
            literal(out, " | null");
    } else if (json_is_array(type) && json_array_size(type) > 0) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            if (i > 0)
                literal(out, " | ");
            const char *name = json_string_value(json_array_get(type, i));
            literal(out, name != NULL ? name : "any");
        }
    } else if (json_is_array(json_object_get(spec, "oneOf"))) {
        const json_t *variants = json_object_get(spec, "oneOf");
        bool objects = false;
        for (size_t i = 0; i < json_array_size(variants); i++) {
            const char *variant = json_string_value(
                json_object_get(json_array_get(variants, i), "type"));
            objects |= variant != NULL && strcmp(variant, "object") == 0;
        }
        if (objects && json_array_size(variants) > 1) {
            literal(out, "any");
        } else {
            for (size_t i = 0; i < json_array_size(variants); i++) {
                if (i > 0)
                    literal(out, " | ");
                typescript_type(out, json_array_get(variants, i));
            }
        }
    } else if (kind != NULL && strcmp(kind, "string") == 0) {
        const json_t *values = json_object_get(spec, "enum");
        if (json_is_array(values) && json_array_size(values) > 0) {
            for (size_t i = 0; i < json_array_size(values); i++) {
                literal(out, i == 0 ? "\"" : "\" | \"");
                const char *value = json_string_value(json_array_get(values, i));
                literal(out, value != NULL ? value : "");
            }
            literal(out, "\"");
        } else {
            literal(out, nullable ? "string | null" : "string");
        }
    } else if (kind != NULL && (strcmp(kind, "number") == 0 || strcmp(kind, "integer") == 0)) {
        literal(out, "number");
    } else if (kind != NULL && strcmp(kind, "boolean") == 0) {
        literal(out, "boolean");
    } else if (kind != NULL && strcmp(kind, "object") == 0) {
        const json_t *properties = json_object_get(spec, "properties");
        if (json_object_size(properties) == 0) {
            literal(out, "object");
            return;
        }
        const json_t *required = json_object_get(spec, "required");
        literal(out, "{\n");
        const char *name;
        const json_t *property;
        size_t index = 0;
        json_object_foreach((json_t *)properties, name, property) {
            literal(out, name);
            if (!name_in(required, name))
                literal(out, "?");
            literal(out, ": ");
            typescript_type(out, property);
            if (++index < json_object_size(properties))
                literal(out, ", ");
        }
        literal(out, "}");
    } else {
        literal(out, "any");
    }
}

/* harmony's render_tool_namespace("functions", tools). */
static void typescript_namespace(renderer_t *out, const json_t *tools)
{
    literal(out, "## functions\n\nnamespace functions {\n\n");
    size_t t;
    const json_t *tool;
    json_array_foreach(tools, t, tool) {
        const json_t *function = function_of(tool);
        const char *description = json_string_value(json_object_get(function, "description"));
        const char *name = json_string_value(json_object_get(function, "name"));
        literal(out, "// ");
        literal(out, description != NULL ? description : "");
        literal(out, "\ntype ");
        literal(out, name != NULL ? name : "");
        literal(out, " = ");
        const json_t *parameters = json_object_get(function, "parameters");
        const json_t *properties = json_object_get(parameters, "properties");
        if (json_object_size(properties) == 0) {
            literal(out, "() => any;\n\n");
            continue;
        }
        const json_t *required = json_object_get(parameters, "required");
        literal(out, "(_: {\n");
        const char *param;
        const json_t *spec;
        json_object_foreach((json_t *)properties, param, spec) {
            const char *about = json_string_value(json_object_get(spec, "description"));
            if (about != NULL && about[0] != '\0') {
                literal(out, "// ");
                literal(out, about);
                literal(out, "\n");
            }
            literal(out, param);
            if (!name_in(required, param))
                literal(out, "?");
            literal(out, ": ");
            typescript_type(out, spec);
            const json_t *fallback = json_object_get(spec, "default");
            if (fallback != NULL) {
                bool plain = json_object_get(spec, "enum") != NULL ||
                             json_object_get(spec, "oneOf") != NULL;
                literal(out, json_object_get(spec, "oneOf") != NULL ? "// default: "
                                                                     : ", // default: ");
                if (plain && json_is_string(fallback))
                    literal(out, json_string_value(fallback));
                else
                    tojson(out, fallback);
            }
            literal(out, ",\n");
        }
        literal(out, "}) => any;\n\n");
    }
    literal(out, "} // namespace functions");
}

/* ---------- the three templates ---------- */

/* What rendering a whole chat knows besides the message at hand. */
typedef struct chat {
    renderer_t *out;
    const kvio_chat_message_t *messages;
    size_t count;
    const kvio_chat_options_t *options;
    json_t *tools;     /* the TOOLS message's list (owned), or NULL */
    size_t tools_at;   /* its index (count when none) */
    size_t first_user; /* the first user message (count when none): llama3's tools go there */
    bool instructions; /* messages[0] is a system or developer message */
    char last_call[256]; /* harmony: the function of the latest tool call */
} chat_t;

/* The message holding the leading instructions and the tools (harmony's
 * developer message, chatml's system message): whether message i is in
 * it, opens it, closes it (one message when the tools follow the
 * instructions). */
typedef struct shared_message {
    bool in, opens, closes;
} shared_message_t;

static shared_message_t shared_message(const chat_t *chat, size_t i)
{
    bool joined = chat->instructions && chat->tools_at == 1;
    bool in = (i == 0 && chat->instructions) || i == chat->tools_at;
    return (shared_message_t){.in = in, .opens = in && !(joined && i == 1),
                              .closes = in && !(joined && i == 0)};
}

/* harmony: the model identity and channels, written before any message. */
static void harmony_system(chat_t *chat)
{
    renderer_t *out = chat->out;
    char date[32] = "1970-01-01";
    if (chat->options->date != NULL) {
        snprintf(date, sizeof(date), "%s", chat->options->date);
    } else {
        time_t now = time(NULL);
        struct tm day;
        /* strftime leaves the buffer undefined when it does not fit. */
        if (gmtime_r(&now, &day) == NULL || strftime(date, sizeof(date), "%Y-%m-%d", &day) == 0)
            snprintf(date, sizeof(date), "1970-01-01");
    }
    special(out, TOKEN_START);
    literal(out, "system");
    special(out, TOKEN_MESSAGE);
    literal(out, "You are ChatGPT, a large language model trained by OpenAI.\n"
                 "Knowledge cutoff: 2024-06\nCurrent date: ");
    literal(out, date);
    literal(out, "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
                 "Channel must be included for every message.");
    if (chat->tools != NULL)
        literal(out, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    special(out, TOKEN_END);
}

/* The calls of a TOOL_CALLS message (NULL when its content is no list). */
static json_t *calls_of(const kvio_chat_message_t *message)
{
    json_t *calls = content_json(message);
    if (!json_is_array(calls) || json_array_size(calls) == 0) {
        json_decref(calls);
        return NULL;
    }
    return calls;
}

/* harmony: what follows <|start|>assistant for a reply. */
static void harmony_reply(chat_t *chat, const kvio_chat_message_t *message)
{
    renderer_t *out = chat->out;
    json_t *calls = message->kind == KVIO_CHAT_TOOL_CALLS ? calls_of(message) : NULL;
    if (calls == NULL) {
        special(out, TOKEN_CHANNEL);
        literal(out, "final");
        special(out, TOKEN_MESSAGE);
        text(out, message->content, message->content_length);
        return;
    }
    tool_call_t call = tool_call_of(json_array_get(calls, 0)); /* the template takes one */
    snprintf(chat->last_call, sizeof(chat->last_call), "%s", call.name);
    literal(out, " to=functions.");
    literal(out, call.name);
    special(out, TOKEN_CHANNEL);
    literal(out, "commentary json");
    special(out, TOKEN_MESSAGE);
    tojson(out, call.arguments);
    json_decref(call.arguments);
    json_decref(calls);
}

static void harmony_message(chat_t *chat, size_t i)
{
    renderer_t *out = chat->out;
    const kvio_chat_message_t *message = &chat->messages[i];
    shared_message_t developer = shared_message(chat, i);
    if (developer.in) {
        /* One developer message: the instructions, then the tools. */
        if (developer.opens) {
            special(out, TOKEN_START);
            literal(out, "developer");
            special(out, TOKEN_MESSAGE);
        }
        if (i == chat->tools_at) {
            literal(out, "# Tools\n\n");
            typescript_namespace(out, chat->tools);
        } else {
            literal(out, "# Instructions\n\n");
            text(out, message->content, message->content_length);
            literal(out, "\n\n");
        }
        if (developer.closes)
            special(out, TOKEN_END);
        return;
    }
    if (role_is(message, "assistant")) {
        special(out, TOKEN_START);
        literal(out, "assistant");
        harmony_reply(chat, message);
        special(out, message->kind == KVIO_CHAT_TOOL_CALLS ? TOKEN_CALL : TOKEN_END);
        if (message->kind != KVIO_CHAT_TOOL_CALLS)
            chat->last_call[0] = '\0';
    } else if (role_is(message, "tool")) {
        special(out, TOKEN_START);
        literal(out, "functions.");
        literal(out, chat->last_call);
        literal(out, " to=assistant");
        special(out, TOKEN_CHANNEL);
        literal(out, "commentary");
        special(out, TOKEN_MESSAGE);
        content_tojson(out, message);
        special(out, TOKEN_END);
    } else if (role_is(message, "user")) {
        special(out, TOKEN_START);
        literal(out, "user");
        special(out, TOKEN_MESSAGE);
        text(out, message->content, message->content_length);
        special(out, TOKEN_END);
    }
    /* A system or developer message past the first: the template drops it. */
}

/* llama3: what follows the assistant header for a reply. */
static void llama3_reply(renderer_t *out, const kvio_chat_message_t *message)
{
    json_t *calls = message->kind == KVIO_CHAT_TOOL_CALLS ? calls_of(message) : NULL;
    if (calls == NULL) {
        trimmed(out, message->content, message->content_length);
        return;
    }
    tool_call_t call = tool_call_of(json_array_get(calls, 0));
    literal(out, "{\"name\": \"");
    literal(out, call.name);
    literal(out, "\", \"parameters\": ");
    tojson(out, call.arguments);
    literal(out, "}");
    json_decref(call.arguments);
    json_decref(calls);
}

static void llama3_header(renderer_t *out, const char *role, size_t length)
{
    special(out, TOKEN_START_HEADER);
    text(out, role, length);
    special(out, TOKEN_END_HEADER);
    literal(out, "\n\n");
}

/* llama3: the system header the template always writes, with the leading
 * system message's text. */
static void llama3_system(chat_t *chat)
{
    renderer_t *out = chat->out;
    special(out, TOKEN_BEGIN_OF_TEXT);
    llama3_header(out, "system", 6);
    if (chat->tools != NULL)
        literal(out, "Environment: ipython\n");
    literal(out, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (chat->instructions)
        trimmed(out, chat->messages[0].content, chat->messages[0].content_length);
    special(out, TOKEN_EOT);
}

static void llama3_message(chat_t *chat, size_t i)
{
    renderer_t *out = chat->out;
    const kvio_chat_message_t *message = &chat->messages[i];
    if (i == 0) {
        llama3_system(chat);
        if (chat->instructions)
            return;
    }
    if (i == chat->tools_at)
        return; /* written with the first user message */
    if (chat->tools != NULL && i == chat->first_user) {
        llama3_header(out, "user", 4);
        literal(out, "Given the following functions, please respond with a JSON for a function "
                     "call with its proper arguments that best answers the given prompt.\n\n"
                     "Respond in the format {\"name\": function name, \"parameters\": dictionary "
                     "of argument name and its value}.Do not use variables.\n\n");
        size_t t;
        const json_t *tool;
        json_array_foreach(chat->tools, t, tool) {
            json_text(out, tool, JSON_INDENT(4));
            literal(out, "\n\n");
        }
        trimmed(out, message->content, message->content_length);
        special(out, TOKEN_EOT);
        return;
    }
    if (role_is(message, "tool")) {
        llama3_header(out, "ipython", 7);
        content_tojson(out, message);
    } else if (message->kind == KVIO_CHAT_TOOL_CALLS) {
        llama3_header(out, "assistant", 9);
        llama3_reply(out, message);
    } else {
        llama3_header(out, message->role, message->role_length);
        trimmed(out, message->content, message->content_length);
    }
    special(out, TOKEN_EOT);
}

/* chatml: what follows "<|im_start|>assistant\n" for a reply. */
static void chatml_reply(renderer_t *out, const kvio_chat_message_t *message)
{
    json_t *calls = message->kind == KVIO_CHAT_TOOL_CALLS ? calls_of(message) : NULL;
    if (calls == NULL) {
        text(out, message->content, message->content_length);
        return;
    }
    size_t c;
    const json_t *item;
    json_array_foreach(calls, c, item) {
        tool_call_t call = tool_call_of(item);
        literal(out, c > 0 ? "\n<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"");
        literal(out, call.name);
        literal(out, "\", \"arguments\": ");
        tojson(out, call.arguments);
        literal(out, "}\n</tool_call>");
        json_decref(call.arguments);
    }
    json_decref(calls);
}

static void chatml_message(chat_t *chat, size_t i)
{
    renderer_t *out = chat->out;
    const kvio_chat_message_t *message = &chat->messages[i];
    shared_message_t system = shared_message(chat, i);
    if (system.in) {
        if (system.opens) {
            special(out, TOKEN_IM_START);
            literal(out, "system\n");
        }
        if (i == chat->tools_at) {
            literal(out, "# Tools\n\nYou may call one or more functions to assist with the user "
                         "query.\n\nYou are provided with function signatures within "
                         "<tools></tools> XML tags:\n<tools>");
            size_t t;
            const json_t *tool;
            json_array_foreach(chat->tools, t, tool) {
                literal(out, "\n");
                tojson(out, tool);
            }
            literal(out, "\n</tools>\n\nFor each function call, return a json object with "
                         "function name and arguments within <tool_call></tool_call> XML "
                         "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                         "<args-json-object>}\n</tool_call>");
        } else {
            text(out, message->content, message->content_length);
            if (chat->tools_at == 1)
                literal(out, "\n\n");
        }
        if (system.closes) {
            special(out, TOKEN_IM_END);
            literal(out, "\n");
        }
        return;
    }
    if (role_is(message, "tool")) {
        /* A run of tool results is one user message. */
        if (i == 0 || !role_is(&chat->messages[i - 1], "tool")) {
            special(out, TOKEN_IM_START);
            literal(out, "user");
        }
        literal(out, "\n<tool_response>\n");
        text(out, message->content, message->content_length);
        literal(out, "\n</tool_response>");
        if (i + 1 == chat->count || !role_is(&chat->messages[i + 1], "tool")) {
            special(out, TOKEN_IM_END);
            literal(out, "\n");
        }
        return;
    }
    special(out, TOKEN_IM_START);
    text(out, message->role, message->role_length);
    literal(out, "\n");
    if (role_is(message, "assistant"))
        chatml_reply(out, message);
    else
        text(out, message->content, message->content_length);
    special(out, TOKEN_IM_END);
    literal(out, "\n");
}

static void render_generation_prompt(renderer_t *out, kvio_chat_template_t template_id)
{
    switch (template_id) {
    case KVIO_CHAT_CHATML:
        special(out, TOKEN_IM_START);
        literal(out, "assistant\n");
        break;
    case KVIO_CHAT_LLAMA3:
        llama3_header(out, "assistant", 9);
        break;
    case KVIO_CHAT_HARMONY:
        special(out, TOKEN_START);
        literal(out, "assistant");
        break;
    }
}

/* The rendered text from part first on as tokens, offsets from where that
 * part starts: with a tokenizer the whole text with its special tokens;
 * without, part by part. */
static kvio_status_t tokenize_rendering(const renderer_t *out, size_t first,
                                        const kvio_tokenizer_t *tokenizer)
{
    kvio_chat_rendering_t *rendering = out->out;
    if (first >= out->num_parts)
        return KVIO_OK;
    size_t from = out->parts[first].offset;
    if (tokenizer != NULL)
        return kvio_tokenize_spans(tokenizer, rendering->text + from, rendering->length - from,
                                   true, from, &rendering->tokens, &rendering->offsets);
    kvio_status_t status = KVIO_OK;
    for (size_t i = first; i < out->num_parts && status == KVIO_OK; i++) {
        size_t start = out->parts[i].offset;
        size_t end = i + 1 < out->num_parts ? out->parts[i + 1].offset : rendering->length;
        if (out->parts[i].special >= 0) {
            status = kvio_tokens_push(&rendering->tokens, (uint32_t)out->parts[i].special + 1);
            if (status == KVIO_OK)
                status = kvio_tokens_push(&rendering->offsets, (uint32_t)start);
        } else {
            status = kvio_tokenize_spans(NULL, rendering->text + start, end - start, false, start,
                                         &rendering->tokens, &rendering->offsets);
        }
    }
    return status;
}

/* Finds the TOOLS message and whether instructions lead. */
static kvio_status_t chat_begin(chat_t *chat)
{
    chat->tools_at = chat->count;
    chat->instructions = chat->count > 0 && is_instructions(&chat->messages[0]);
    chat->first_user = chat->count;
    for (size_t i = chat->count; i-- > 0;)
        if (role_is(&chat->messages[i], "user"))
            chat->first_user = i;
    for (size_t i = 0; i < chat->count; i++) {
        if (chat->messages[i].kind != KVIO_CHAT_TOOLS || chat->tools != NULL)
            continue;
        chat->tools = content_json(&chat->messages[i]);
        if (!json_is_array(chat->tools)) {
            json_decref(chat->tools);
            chat->tools = NULL;
            kvio_log(KVIO_LOG_ERROR, "chat template: message %zu's tools are not a JSON list",
                     i);
            return KVIO_ERR_INVALID;
        }
        chat->tools_at = i;
    }
    return KVIO_OK;
}

kvio_status_t kvio_chat_render_spans(kvio_chat_template_t template_id,
                                     const kvio_tokenizer_t *tokenizer,
                                     const kvio_chat_message_t *messages, size_t count,
                                     const kvio_chat_options_t *options,
                                     kvio_chat_rendering_t *rendering_p)
{
    kvio_chat_options_t defaults = {.add_generation_prompt = true};
    kvio_chat_rendering_t rendering = {0};
    renderer_t out = {.out = &rendering, .status = KVIO_OK};
    chat_t chat = {.out = &out, .messages = messages, .count = count,
                   .options = options != NULL ? options : &defaults};
    rendering.message_offsets = calloc(count + 1, sizeof(size_t));
    if (rendering.message_offsets == NULL)
        return KVIO_ERR_NOMEM;
    out.status = chat_begin(&chat);
    if (template_id == KVIO_CHAT_HARMONY)
        harmony_system(&chat);
    if (template_id == KVIO_CHAT_LLAMA3 && count == 0)
        llama3_system(&chat);
    for (size_t i = 0; i < count; i++) {
        rendering.message_offsets[i] = rendering.length;
        if (template_id == KVIO_CHAT_HARMONY)
            harmony_message(&chat, i);
        else if (template_id == KVIO_CHAT_LLAMA3)
            llama3_message(&chat, i);
        else
            chatml_message(&chat, i);
    }
    rendering.message_offsets[count] = rendering.length;
    if (chat.options->add_generation_prompt)
        render_generation_prompt(&out, template_id);
    if (out.status == KVIO_OK)
        out.status = tokenize_rendering(&out, 0, tokenizer);
    json_decref(chat.tools);
    free(out.parts);
    if (out.status != KVIO_OK) {
        kvio_chat_rendering_fini(&rendering);
        return out.status;
    }
    *rendering_p = rendering;
    return KVIO_OK;
}

kvio_status_t kvio_chat_render_answer(kvio_chat_template_t template_id,
                                      const kvio_tokenizer_t *tokenizer,
                                      const kvio_chat_message_t *answer,
                                      kvio_chat_rendering_t *rendering)
{
    renderer_t out = {.out = rendering, .status = KVIO_OK, .text_capacity = rendering->length};
    chat_t chat = {.out = &out, .messages = answer, .count = 1};
    if (template_id == KVIO_CHAT_HARMONY)
        harmony_reply(&chat, answer);
    else if (template_id == KVIO_CHAT_LLAMA3)
        llama3_reply(&out, answer);
    else
        chatml_reply(&out, answer);
    if (out.status == KVIO_OK)
        out.status = tokenize_rendering(&out, 0, tokenizer);
    free(out.parts);
    return out.status;
}

void kvio_chat_rendering_fini(kvio_chat_rendering_t *rendering)
{
    free(rendering->text);
    free(rendering->message_offsets);
    kvio_tokens_fini(&rendering->tokens);
    kvio_tokens_fini(&rendering->offsets);
    *rendering = (kvio_chat_rendering_t){0};
}

kvio_status_t kvio_chat_render(kvio_chat_template_t template_id, const kvio_tokenizer_t *tokenizer,
                               const kvio_chat_message_t *messages, size_t count,
                               const kvio_chat_options_t *options, kvio_tokens_t *tokens)
{
    kvio_chat_rendering_t rendering = {0};
    kvio_status_t status = kvio_chat_render_spans(template_id, tokenizer, messages, count,
                                                  options, &rendering);
    for (size_t i = 0; status == KVIO_OK && i < rendering.tokens.count; i++)
        status = kvio_tokens_push(tokens, rendering.tokens.ids[i]);
    kvio_chat_rendering_fini(&rendering);
    return status;
}
