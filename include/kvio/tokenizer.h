/* Text to token ids, and chat messages to the token sequence a server
 * would prefill. The approximate tokenizer needs no vocabulary file: it
 * splits text as byte-level BPE pre-tokenizers do (words with their leading
 * space, digits in threes, punctuation runs, whitespace runs), cuts pieces
 * longer than four bytes at character boundaries, and gives each piece the
 * id its bytes hash to. Equal text gives equal tokens, so a prompt's prefix
 * structure (what a prefix cache can reuse) is kept; token counts are close
 * to a real tokenizer's (about 4 bytes of English per token) and block
 * boundaries approximate. Special tokens of the chat templates have fixed
 * ids of their own. */
#ifndef KVIO_TOKENIZER_H
#define KVIO_TOKENIZER_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ids the approximate tokenizer gives: pieces hash into [KVIO_TOKEN_FIRST_TEXT,
 * KVIO_TOKEN_VOCAB); special tokens sit below KVIO_TOKEN_FIRST_TEXT. */
#define KVIO_TOKEN_FIRST_TEXT 1024u
#define KVIO_TOKEN_VOCAB 200000u

/* A growable array of token ids (zero it to start; free with
 * kvio_tokens_fini). */
typedef struct kvio_tokens {
    uint32_t *ids;
    size_t count, capacity;
} kvio_tokens_t;

kvio_status_t kvio_tokens_push(kvio_tokens_t *tokens, uint32_t id);
void kvio_tokens_fini(kvio_tokens_t *tokens);

/* Appends the approximate tokens of length bytes of text (any bytes; UTF-8
 * sequences are never split) to tokens. KVIO_ERR_NOMEM only. */
kvio_status_t kvio_tokenize_approximate(const char *text, size_t length, kvio_tokens_t *tokens);

/* One output word for generated text: a space and one to three lowercase
 * letters, which the approximate tokenizer reads back as exactly the one
 * token *id_p (so a client that sends the output back in its next prompt
 * hits the blocks the output filled). index picks the word (any value). */
void kvio_token_word(uint64_t index, char text_p[5], uint32_t *id_p);

/* ---------- the exact tokenizer ---------- */

/* A vocabulary read from a file, encoding text exactly as its reference
 * does: a tiktoken rank file (o200k_base, cl100k_base, p50k_base, r50k_base;
 * the pattern and special tokens are tiktoken's for that encoding, known by
 * the file's name or its number of ranks) or a Hugging Face tokenizer.json
 * holding a byte-level BPE model (Split and ByteLevel pre-tokenizers through
 * PCRE2, merges by rank, added tokens). Read-only once loaded: threads may
 * encode with one tokenizer at the same time. */
typedef struct kvio_tokenizer kvio_tokenizer_t;

/* Loads the vocabulary at path. A missing, unreadable or malformed file, or
 * one kvio cannot encode exactly, is logged with the path (and the line or
 * key) and returns KVIO_ERR_INVALID (KVIO_ERR_NOMEM when memory runs out). */
kvio_status_t kvio_tokenizer_load(const char *path, kvio_tokenizer_t **tokenizer_p);
void kvio_tokenizer_destroy(kvio_tokenizer_t *tokenizer);

/* What was loaded, for results and messages: "o200k_base (tiktoken)",
 * "tokenizer.json (byte-level BPE)". Borrowed from the tokenizer. */
const char *kvio_tokenizer_describe(const kvio_tokenizer_t *tokenizer);

/* Appends the tokens of length bytes of text to tokens. With special, the
 * tokenizer's special (added) tokens written in the text become their ids,
 * as a server tokenizes a rendered chat template; without, they are plain
 * text (tiktoken's encode_ordinary). Bytes that are not UTF-8 are encoded
 * byte by byte. KVIO_ERR_NOMEM only. */
kvio_status_t kvio_tokenizer_encode(const kvio_tokenizer_t *tokenizer, const char *text,
                                    size_t length, bool special, kvio_tokens_t *tokens);

/* The id of the special token written as text ("<|im_start|>");
 * KVIO_ERR_NOT_FOUND when the tokenizer has none by that name. */
kvio_status_t kvio_tokenizer_special_id(const kvio_tokenizer_t *tokenizer, const char *text,
                                        uint32_t *id_p);

/* The bytes token id stands for (borrowed; *length_p bytes, not terminated);
 * NULL for an id the vocabulary does not have. */
const char *kvio_tokenizer_token_bytes(const kvio_tokenizer_t *tokenizer, uint32_t id,
                                       size_t *length_p);

/* Appends the tokens of text (the tokenizer's, or the approximate
 * tokenizer's with NULL; special as kvio_tokenizer_encode) and, to offsets,
 * where each token starts: base plus its byte position in text. Offsets
 * are 32-bit: base + length must stay below 4 GiB. KVIO_ERR_NOMEM. */
kvio_status_t kvio_tokenize_spans(const kvio_tokenizer_t *tokenizer, const char *text,
                                  size_t length, bool special, size_t base,
                                  kvio_tokens_t *tokens, kvio_tokens_t *offsets);

/* ---------- chat templates ---------- */

typedef enum {
    KVIO_CHAT_CHATML = 0, /* Qwen and others: <|im_start|>role\n...<|im_end|>\n */
    KVIO_CHAT_LLAMA3,     /* <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    KVIO_CHAT_HARMONY,    /* gpt-oss: <|start|>role<|message|>...<|end|> */
} kvio_chat_template_t;

/* The template called name (chatml, llama3, harmony); KVIO_ERR_NOT_FOUND. */
kvio_status_t kvio_chat_template_find(const char *name, kvio_chat_template_t *template_p);
const char *kvio_chat_template_name(kvio_chat_template_t template_id);

/* What a message's content holds. */
typedef enum {
    KVIO_CHAT_TEXT = 0,   /* the message's text */
    KVIO_CHAT_TOOL_CALLS, /* an assistant's tool_calls, as their JSON list (OpenAI's form) */
    KVIO_CHAT_TOOLS,      /* the request's tool definitions, as their JSON list; role
                             "system", right after the leading system or developer
                             message (or first) */
} kvio_chat_content_t;

/* One chat message: role (system, developer, user, assistant, tool) and
 * its content, both borrowed. */
typedef struct kvio_chat_message {
    const char *role;
    size_t role_length;
    const char *content;
    size_t content_length;
    kvio_chat_content_t kind;
} kvio_chat_message_t;

/* How a chat is rendered. */
typedef struct kvio_chat_options {
    bool add_generation_prompt; /* end with the header of the assistant's reply */
    /* harmony's "Current date" (YYYY-MM-DD; the template takes the day it
     * renders on): NULL for today (UTC). llama3 writes its template's
     * default date, which vLLM leaves in place. */
    const char *date;
} kvio_chat_options_t;

/* Whether the templates know role (those five). */
bool kvio_chat_role_known(const char *role, size_t length);

/* The first template (chatml, llama3, harmony) whose special tokens the
 * tokenizer has; KVIO_ERR_NOT_FOUND. */
kvio_status_t kvio_chat_template_for(const kvio_tokenizer_t *tokenizer,
                                     kvio_chat_template_t *template_p);

/* A chat as the template writes it, for finding where two prompts part:
 * the text (special tokens as written), its tokens, each token's start in
 * the text (offsets, one per token), and each message's start
 * (message_offsets[count] is where the generation prompt starts). Owned;
 * free with kvio_chat_rendering_fini. */
typedef struct kvio_chat_rendering {
    char *text;
    size_t length;
    kvio_tokens_t tokens;
    kvio_tokens_t offsets;
    size_t *message_offsets;
} kvio_chat_rendering_t;

/* Renders messages as kvio_chat_render does, into *rendering_p;
 * KVIO_ERR_NOMEM. */
kvio_status_t kvio_chat_render_spans(kvio_chat_template_t template_id,
                                     const kvio_tokenizer_t *tokenizer,
                                     const kvio_chat_message_t *messages, size_t count,
                                     const kvio_chat_options_t *options,
                                     kvio_chat_rendering_t *rendering_p);

/* Appends to a rendering that ends with the generation prompt the reply as
 * the template writes it in the next request's history (answer: an
 * assistant message), without its end: what the model generated, as the
 * next prompt expects it. */
kvio_status_t kvio_chat_render_answer(kvio_chat_template_t template_id,
                                      const kvio_tokenizer_t *tokenizer,
                                      const kvio_chat_message_t *answer,
                                      kvio_chat_rendering_t *rendering);
void kvio_chat_rendering_fini(kvio_chat_rendering_t *rendering);

/* Checks that tokenizer has every special token the template writes;
 * KVIO_ERR_INVALID after logging which one is missing. */
kvio_status_t kvio_chat_template_check(kvio_chat_template_t template_id,
                                       const kvio_tokenizer_t *tokenizer);

/* Appends the tokens of messages rendered by the template, as the model's
 * own chat template writes them (chat_template.c names what each writes:
 * harmony's system and developer messages and its tools as TypeScript,
 * Llama 3.1's dated system header and tools in the first user message,
 * Qwen3's tools in the system message), then (add_generation_prompt) the
 * header of the assistant's reply, to tokens. With a tokenizer (checked with
 * kvio_chat_template_check), the whole rendering is one text encoded with
 * its special tokens, as a server encodes its chat template's output; with
 * NULL, the approximate tokenizer takes each part on its own, so that a
 * message's tokens do not depend on what follows it. */
kvio_status_t kvio_chat_render(kvio_chat_template_t template_id, const kvio_tokenizer_t *tokenizer,
                               const kvio_chat_message_t *messages, size_t count,
                               const kvio_chat_options_t *options, kvio_tokens_t *tokens);

#endif
