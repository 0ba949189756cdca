/* The approximate tokenizer and the chat templates (kvio/tokenizer.h): text
 * is split as byte-level BPE pre-tokenizers split it, each piece hashed to
 * an id; a template renders messages as special tokens around tokenized
 * parts. */
#include "kvio/tokenizer.h"

#include "kvio/array.h"
#include "kvio/log.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Longest piece of one kind that stays one token: whitespace runs (code's
 * indentation) are single tokens in real vocabularies, words are cut. */
#define WORD_BYTES 4
#define SPACE_BYTES 16

/* ---------- pre-tokenizing ---------- */

typedef enum { BYTE_LETTER, BYTE_DIGIT, BYTE_SPACE, BYTE_NEWLINE, BYTE_OTHER } byte_class_t;

static byte_class_t classify(unsigned char byte)
{
    if ((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || byte >= 0x80)
        return BYTE_LETTER; /* every UTF-8 byte: letters of other scripts, emoji */
    if (byte >= '0' && byte <= '9')
        return BYTE_DIGIT;
    if (byte == ' ' || byte == '\t')
        return BYTE_SPACE;
    if (byte == '\n' || byte == '\r' || byte == '\f' || byte == '\v')
        return BYTE_NEWLINE;
    return BYTE_OTHER;
}

static bool is_space(byte_class_t kind)
{
    return kind == BYTE_SPACE || kind == BYTE_NEWLINE;
}

static uint32_t piece_id(const char *piece, size_t length)
{
    uint64_t hash = XXH3_64bits(piece, length);
    return KVIO_TOKEN_FIRST_TEXT + (uint32_t)(hash % (KVIO_TOKEN_VOCAB - KVIO_TOKEN_FIRST_TEXT));
}

/* A piece as tokens: cut into chunks of at most max bytes, never inside a
 * UTF-8 sequence (a chunk grows past max to finish one); with offsets, each
 * chunk's start (base + its position) too. */
static kvio_status_t push_piece(const char *piece, size_t length, size_t max, size_t base,
                                kvio_tokens_t *tokens, kvio_tokens_t *offsets)
{
    size_t at = 0;
    while (at < length) {
        size_t end = at + max < length ? at + max : length;
        while (end < length && ((unsigned char)piece[end] & 0xc0) == 0x80)
            end++;
        kvio_status_t status = kvio_tokens_push(tokens, piece_id(piece + at, end - at));
        if (status == KVIO_OK && offsets != NULL)
            status = kvio_tokens_push(offsets, (uint32_t)(base + at));
        if (status != KVIO_OK)
            return status;
        at = end;
    }
    return KVIO_OK;
}

/* The length of the piece at text[at]: a word or punctuation run with its
 * leading space, up to three digits, or a whitespace run that leaves its
 * last space to the word after it (GPT's `\s+(?!\S)`). */
static size_t piece_length(const char *text, size_t length, size_t at, size_t *max_p)
{
    const unsigned char *bytes = (const unsigned char *)text;
    byte_class_t kind = classify(bytes[at]);
    size_t end = at + 1;
    *max_p = WORD_BYTES;
    if (kind == BYTE_SPACE && bytes[at] == ' ' && end < length &&
        (classify(bytes[end]) == BYTE_LETTER || classify(bytes[end]) == BYTE_OTHER)) {
        kind = classify(bytes[end]); /* " word", " +=" */
        end++;
    }
    switch (kind) {
    case BYTE_LETTER:
    case BYTE_OTHER:
        while (end < length && classify(bytes[end]) == kind)
            end++;
        return end - at;
    case BYTE_DIGIT:
        while (end < length && end - at < 3 && classify(bytes[end]) == BYTE_DIGIT)
            end++;
        return end - at;
    default:
        *max_p = SPACE_BYTES;
        while (end < length && is_space(classify(bytes[end])))
            end++;
        /* A space right before a word goes with the word. */
        if (end < length && end - at > 1 && bytes[end - 1] == ' ')
            end--;
        return end - at;
    }
}

static kvio_status_t approximate(const char *text, size_t length, size_t base,
                                 kvio_tokens_t *tokens, kvio_tokens_t *offsets)
{
    size_t at = 0;
    while (at < length) {
        size_t max = WORD_BYTES;
        size_t piece = piece_length(text, length, at, &max);
        kvio_status_t status = push_piece(text + at, piece, max, base + at, tokens, offsets);
        if (status != KVIO_OK)
            return status;
        at += piece;
    }
    return KVIO_OK;
}

kvio_status_t kvio_tokenize_approximate(const char *text, size_t length, kvio_tokens_t *tokens)
{
    return approximate(text, length, 0, tokens, NULL);
}

kvio_status_t kvio_tokenize_spans(const kvio_tokenizer_t *tokenizer, const char *text,
                                  size_t length, bool special, size_t base,
                                  kvio_tokens_t *tokens, kvio_tokens_t *offsets)
{
    if (base + length > UINT32_MAX)
        return KVIO_ERR_NOMEM; /* offsets are 32-bit: 4 GiB of text at most */
    if (tokenizer == NULL)
        return approximate(text, length, base, tokens, offsets);
    size_t first = tokens->count;
    kvio_status_t status = kvio_tokenizer_encode(tokenizer, text, length, special, tokens);
    size_t at = base;
    for (size_t i = first; status == KVIO_OK && i < tokens->count; i++) {
        size_t token_length = 0;
        kvio_tokenizer_token_bytes(tokenizer, tokens->ids[i], &token_length);
        status = kvio_tokens_push(offsets, (uint32_t)at);
        at += token_length;
    }
    return status;
}

void kvio_token_word(uint64_t index, char text_p[5], uint32_t *id_p)
{
    size_t letters = 1 + (size_t)(index % 3);
    uint64_t rest = index / 3;
    text_p[0] = ' ';
    for (size_t i = 0; i < letters; i++) {
        text_p[1 + i] = (char)('a' + rest % 26);
        rest /= 26;
    }
    text_p[1 + letters] = '\0';
    *id_p = piece_id(text_p, 1 + letters);
}

/* ---------- chat templates ---------- */

/* Special tokens, written as the templates write them; the approximate
 * tokenizer gives each its index in this list plus one, below the text ids. */
enum {
    TOKEN_IM_START, TOKEN_IM_END,                              /* chatml */
    TOKEN_BEGIN_OF_TEXT, TOKEN_START_HEADER, TOKEN_END_HEADER, /* llama3 */
    TOKEN_EOT,
    TOKEN_START, TOKEN_MESSAGE, TOKEN_END, TOKEN_CHANNEL,      /* harmony */
    NUM_SPECIAL_TOKENS
};

static const char *const special_texts[NUM_SPECIAL_TOKENS] = {
    "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<|start|>", "<|message|>", "<|end|>", "<|channel|>",
};

/* The special tokens each template writes, ending with -1. */
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

static bool is_assistant(const kvio_chat_message_t *message)
{
    return message->role_length == 9 && memcmp(message->role, "assistant", 9) == 0;
}

static void render_message(renderer_t *out, kvio_chat_template_t template_id,
                           const kvio_chat_message_t *message)
{
    switch (template_id) {
    case KVIO_CHAT_CHATML:
        special(out, TOKEN_IM_START);
        text(out, message->role, message->role_length);
        literal(out, "\n");
        text(out, message->content, message->content_length);
        special(out, TOKEN_IM_END);
        literal(out, "\n");
        break;
    case KVIO_CHAT_LLAMA3:
        special(out, TOKEN_START_HEADER);
        text(out, message->role, message->role_length);
        special(out, TOKEN_END_HEADER);
        literal(out, "\n\n");
        text(out, message->content, message->content_length);
        special(out, TOKEN_EOT);
        break;
    case KVIO_CHAT_HARMONY:
        special(out, TOKEN_START);
        text(out, message->role, message->role_length);
        if (is_assistant(message)) {
            special(out, TOKEN_CHANNEL); /* the reply's final channel */
            literal(out, "final");
        }
        special(out, TOKEN_MESSAGE);
        text(out, message->content, message->content_length);
        special(out, TOKEN_END);
        break;
    }
}

static void render_generation_prompt(renderer_t *out, kvio_chat_template_t template_id)
{
    switch (template_id) {
    case KVIO_CHAT_CHATML:
        special(out, TOKEN_IM_START);
        literal(out, "assistant\n");
        break;
    case KVIO_CHAT_LLAMA3:
        special(out, TOKEN_START_HEADER);
        literal(out, "assistant");
        special(out, TOKEN_END_HEADER);
        literal(out, "\n\n");
        break;
    case KVIO_CHAT_HARMONY:
        special(out, TOKEN_START);
        literal(out, "assistant");
        break;
    }
}

/* The rendered text as tokens: with a tokenizer the whole text with its
 * special tokens; without, part by part. */
static kvio_status_t tokenize_rendering(const renderer_t *out, const kvio_tokenizer_t *tokenizer)
{
    kvio_chat_rendering_t *rendering = out->out;
    if (tokenizer != NULL)
        return kvio_tokenize_spans(tokenizer, rendering->text, rendering->length, true, 0,
                                   &rendering->tokens, &rendering->offsets);
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < out->num_parts && status == KVIO_OK; i++) {
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

kvio_status_t kvio_chat_render_spans(kvio_chat_template_t template_id,
                                     const kvio_tokenizer_t *tokenizer,
                                     const kvio_chat_message_t *messages, size_t count,
                                     bool add_generation_prompt, kvio_chat_rendering_t *rendering_p)
{
    kvio_chat_rendering_t rendering = {0};
    renderer_t out = {.out = &rendering, .status = KVIO_OK};
    rendering.message_offsets = calloc(count + 1, sizeof(size_t));
    if (rendering.message_offsets == NULL)
        return KVIO_ERR_NOMEM;
    if (template_id == KVIO_CHAT_LLAMA3)
        special(&out, TOKEN_BEGIN_OF_TEXT);
    for (size_t i = 0; i < count; i++) {
        rendering.message_offsets[i] = rendering.length;
        render_message(&out, template_id, &messages[i]);
    }
    rendering.message_offsets[count] = rendering.length;
    if (add_generation_prompt)
        render_generation_prompt(&out, template_id);
    if (out.status == KVIO_OK)
        out.status = tokenize_rendering(&out, tokenizer);
    free(out.parts);
    if (out.status != KVIO_OK) {
        kvio_chat_rendering_fini(&rendering);
        return out.status;
    }
    *rendering_p = rendering;
    return KVIO_OK;
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
                               bool add_generation_prompt, kvio_tokens_t *tokens)
{
    kvio_chat_rendering_t rendering = {0};
    kvio_status_t status = kvio_chat_render_spans(template_id, tokenizer, messages, count,
                                                  add_generation_prompt, &rendering);
    for (size_t i = 0; status == KVIO_OK && i < rendering.tokens.count; i++)
        status = kvio_tokens_push(tokens, rendering.tokens.ids[i]);
    kvio_chat_rendering_fini(&rendering);
    return status;
}
