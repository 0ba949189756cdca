/* The approximate tokenizer (kvio/tokenizer.h): text is split as
 * byte-level BPE pre-tokenizers split it, each piece hashed to an id. The
 * chat templates are in chat_template.c. */
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
