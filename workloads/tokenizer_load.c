/* Reading a tokenizer's vocabulary (kvio/tokenizer.h): tiktoken rank files
 * with tiktoken's own patterns and special tokens per encoding, and Hugging
 * Face tokenizer.json files holding a byte-level BPE model. */
#include "tokenizer_int.h"

#include "kvio/files.h"
#include "kvio/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- tiktoken ---------- */

/* tiktoken's patterns (tiktoken_ext/openai_public.py). */
#define CONTRACTIONS "'(?:[sdmt]|ll|ve|re)"
#define O200K_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define O200K_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define O200K_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"

static const char pattern_r50k[] = CONTRACTIONS "| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++"
                                                "|\\s++$|\\s+(?!\\S)|\\s";
static const char pattern_cl100k[] = "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++"
                                     "|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$"
                                     "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s";
static const char pattern_o200k[] =
    "[^\\r\\n\\p{L}\\p{N}]?" O200K_UPPER "*" O200K_LOWER "+" O200K_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?" O200K_UPPER "+" O200K_LOWER "*" O200K_CONTRACTIONS
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct named_id {
    const char *text;
    uint32_t id;
} named_id_t;

typedef struct encoding {
    const char *name;
    size_t num_ranks;
    const char *pattern;
    const named_id_t *specials; /* ends with a NULL text */
} encoding_t;

static const named_id_t specials_r50k[] = {{"<|endoftext|>", 50256}, {NULL, 0}};
static const named_id_t specials_cl100k[] = {
    {"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
    {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}, {NULL, 0}};
/* o200k_base's two and o200k_harmony's named ones (gpt-oss). */
static const named_id_t specials_o200k[] = {
    {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002},
    {"<|constrain|>", 200003},   {"<|channel|>", 200005},   {"<|start|>", 200006},
    {"<|end|>", 200007},         {"<|message|>", 200008},   {"<|call|>", 200012},
    {"<|endofprompt|>", 200018}, {NULL, 0}};

static const encoding_t encodings[] = {
    {"o200k_base", 199998, pattern_o200k, specials_o200k},
    {"cl100k_base", 100256, pattern_cl100k, specials_cl100k},
    {"p50k_base", 50280, pattern_r50k, specials_r50k},
    {"r50k_base", 50256, pattern_r50k, specials_r50k},
};
#define NUM_ENCODINGS (sizeof(encodings) / sizeof(encodings[0]))

/* The encoding the file's name says, else the one with its number of ranks. */
static const encoding_t *encoding_of(const char *path, size_t num_ranks)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (size_t i = 0; i < NUM_ENCODINGS; i++) {
        char stem[8];
        snprintf(stem, sizeof(stem), "%.*s", (int)(strchr(encodings[i].name, '_') - encodings[i].name),
                 encodings[i].name);
        if (strstr(base, stem) != NULL)
            return &encodings[i];
    }
    for (size_t i = 0; i < NUM_ENCODINGS; i++)
        if (encodings[i].num_ranks == num_ranks)
            return &encodings[i];
    return NULL;
}

static int base64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes length characters of standard base64 into out (room for
 * length * 3 / 4 bytes); the number of bytes, or -1 if it is not base64. */
static long base64_decode(const char *text, size_t length, char *out)
{
    if (length == 0 || length % 4 != 0)
        return -1;
    size_t padding = text[length - 1] == '=' ? (text[length - 2] == '=' ? 2 : 1) : 0;
    size_t written = 0;
    for (size_t i = 0; i < length; i += 4) {
        uint32_t group = 0;
        for (size_t j = 0; j < 4; j++) {
            int value = i + j >= length - padding ? 0 : base64_value(text[i + j]);
            if (value < 0)
                return -1;
            group = group << 6 | (uint32_t)value;
        }
        out[written++] = (char)(group >> 16);
        out[written++] = (char)(group >> 8);
        out[written++] = (char)group;
    }
    return (long)(written - padding);
}

/* ---------- contradictions ---------- */

/* At most 40 of a token's bytes, printable ASCII as is, others as \xNN. */
static const char *shown_bytes(const char *bytes, size_t length, char out[176])
{
    size_t at = 0;
    for (size_t i = 0; i < length && i < 40; i++) {
        unsigned char byte = (unsigned char)bytes[i];
        if (byte >= 0x20 && byte < 0x7f && byte != '"' && byte != '\\')
            out[at++] = (char)byte;
        else
            at += (size_t)snprintf(out + at, 5, "\\x%02x", byte);
    }
    snprintf(out + at, 176 - at, "%s", length > 40 ? "..." : "");
    return out;
}

/* The token that id already stands for (NULL: none). */
static const token_entry_t *entry_of(const kvio_tokenizer_t *tokenizer, uint32_t id)
{
    if (id >= tokenizer->num_ids || tokenizer->entry_of_id[id] == TOKEN_NONE)
        return NULL;
    return &tokenizer->entries[tokenizer->entry_of_id[id]];
}

/* A token whose bytes or id the file already gave another way: which one
 * would encode or decode? Written into why (empty: none). */
static void token_conflict(const kvio_tokenizer_t *tokenizer, const char *bytes, size_t length,
                           uint32_t id, char *why, size_t why_len)
{
    char shown[176], other[176];
    uint32_t known = kvio_tokenizer_lookup(tokenizer, bytes, length);
    const token_entry_t *entry = entry_of(tokenizer, id);
    why[0] = '\0';
    if (known != TOKEN_NONE)
        snprintf(why, why_len, "\"%s\" is given id %u and also id %u (one string, two ids)",
                 shown_bytes(bytes, length, shown), known, id);
    else if (entry != NULL)
        snprintf(why, why_len, "id %u is given to \"%s\" and also to \"%s\" (two strings, one "
                 "id)", id, shown_bytes(tokenizer->arena + entry->offset, entry->length, other),
                 shown_bytes(bytes, length, shown));
}

/* One "BASE64 RANK" line into the tokenizer; false after logging. */
static bool read_rank_line(kvio_tokenizer_t *tokenizer, const char *path, size_t line_number,
                           char *line, size_t length, kvio_status_t *status_p)
{
    while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r'))
        line[--length] = '\0';
    if (length == 0)
        return true;
    char *space = memchr(line, ' ', length);
    char *end = NULL;
    char bytes[1024];
    long num_bytes = -1;
    unsigned long rank = 0;
    if (space != NULL && (size_t)(space - line) <= sizeof(bytes) * 4 / 3) {
        num_bytes = base64_decode(line, (size_t)(space - line), bytes);
        errno = 0;
        rank = strtoul(space + 1, &end, 10);
    }
    if (num_bytes <= 0 || end == space + 1 || *end != '\0' || errno != 0 ||
        rank >= TOKEN_ID_LIMIT) {
        kvio_log(KVIO_LOG_ERROR,
                 "%s:%zu: not a tiktoken rank line (a token's bytes in base64, a space and its "
                 "rank, below %u)",
                 path, line_number, TOKEN_ID_LIMIT);
        *status_p = KVIO_ERR_INVALID;
        return false;
    }
    char why[512];
    token_conflict(tokenizer, bytes, (size_t)num_bytes, (uint32_t)rank, why, sizeof(why));
    if (why[0] != '\0') {
        kvio_log(KVIO_LOG_ERROR, "%s:%zu: %s", path, line_number, why);
        *status_p = KVIO_ERR_INVALID;
        return false;
    }
    *status_p = kvio_tokenizer_add(tokenizer, bytes, (size_t)num_bytes, (uint32_t)rank);
    return *status_p == KVIO_OK;
}

static kvio_status_t load_tiktoken(kvio_tokenizer_t *tokenizer, const char *path, FILE *file)
{
    char *line = NULL;
    size_t capacity = 0, line_number = 0;
    ssize_t length;
    kvio_status_t status = KVIO_OK;
    while ((length = getline(&line, &capacity, file)) >= 0) {
        if (!read_rank_line(tokenizer, path, ++line_number, line, (size_t)length, &status))
            break;
    }
    free(line);
    if (status != KVIO_OK)
        return status;
    if (tokenizer->num_entries == 0) {
        kvio_log(KVIO_LOG_ERROR, "%s: no ranks in it", path);
        return KVIO_ERR_INVALID;
    }
    const encoding_t *encoding = encoding_of(path, tokenizer->num_entries);
    if (encoding == NULL) {
        kvio_log(KVIO_LOG_ERROR,
                 "%s: a tiktoken rank file of %zu ranks is none kvio knows (o200k_base 199998, "
                 "cl100k_base 100256, p50k_base 50280, r50k_base 50256): name the file after "
                 "its encoding, as o200k_base.tiktoken",
                 path, tokenizer->num_entries);
        return KVIO_ERR_INVALID;
    }
    for (const named_id_t *special = encoding->specials; special->text != NULL; special++) {
        status = kvio_tokenizer_add_special(tokenizer, special->text, strlen(special->text),
                                            special->id);
        if (status != KVIO_OK)
            return status;
    }
    tokenizer->whole_piece_first = true;
    snprintf(tokenizer->description, sizeof(tokenizer->description), "%s (tiktoken, %zu ranks)",
             encoding->name, tokenizer->num_entries);
    return kvio_tokenizer_finish(tokenizer, path, encoding->pattern);
}

/* ---------- tokenizer.json ---------- */

/* GPT-2's pattern, which ByteLevel's use_regex applies. */
static const char pattern_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* GPT-2's bytes_to_unicode: printable Latin-1 stands for itself, every
 * other byte for 256 + its order among them. byte_of[code point] or -1. */
static void byte_level_table(int byte_of[324])
{
    for (int i = 0; i < 324; i++)
        byte_of[i] = -1;
    int next = 256;
    for (int byte = 0; byte < 256; byte++) {
        bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) ||
                         (byte >= 0xae && byte <= 0xff);
        byte_of[printable ? byte : next++] = byte;
    }
}

/* The bytes a byte-level token string stands for; false when a character
 * stands for no byte. out has room for length bytes. */
static bool byte_level_decode(const int byte_of[324], const char *text, size_t length, char *out,
                              size_t *out_length_p)
{
    const unsigned char *in = (const unsigned char *)text;
    size_t written = 0;
    for (size_t i = 0; i < length;) {
        uint32_t code;
        if (in[i] < 0x80) {
            code = in[i++];
        } else if ((in[i] & 0xe0) == 0xc0 && i + 1 < length) {
            code = (uint32_t)(in[i] & 0x1f) << 6 | (in[i + 1] & 0x3f);
            i += 2;
        } else {
            return false; /* the alphabet ends at U+0143: two bytes at most */
        }
        if (code >= 324 || byte_of[code] < 0)
            return false;
        out[written++] = (char)byte_of[code];
    }
    *out_length_p = written;
    return true;
}

static kvio_status_t json_fail(const char *path, const char *message, const char *key)
{
    kvio_log(KVIO_LOG_ERROR, "%s: %s%s%s", path, key ? key : "", key ? ": " : "", message);
    return KVIO_ERR_INVALID;
}

static kvio_status_t read_vocab(kvio_tokenizer_t *tokenizer, const char *path, const json_t *vocab,
                                const int byte_of[324])
{
    if (!json_is_object(vocab))
        return json_fail(path, "missing or not an object of token to id", "model.vocab");
    if (json_object_size(vocab) == 0)
        return json_fail(path, "empty: no tokens", "model.vocab");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)vocab, key, value) {
        size_t length = strlen(key), num_bytes;
        char bytes[1024];
        if (!json_is_integer(value) || json_integer_value(value) < 0 ||
            json_integer_value(value) >= TOKEN_ID_LIMIT) {
            kvio_log(KVIO_LOG_ERROR, "%s: model.vocab: the id of \"%s\" is not a token id", path, key);
            return KVIO_ERR_INVALID;
        }
        if (length == 0) {
            kvio_log(KVIO_LOG_ERROR, "%s: model.vocab: an empty token (id %lld)", path,
                     (long long)json_integer_value(value));
            return KVIO_ERR_INVALID;
        }
        if (length > sizeof(bytes) || !byte_level_decode(byte_of, key, length, bytes, &num_bytes)) {
            kvio_log(KVIO_LOG_ERROR,
                     "%s: model.vocab: \"%s\" is not a byte-level token; kvio reads byte-level "
                     "BPE (GPT-2, Llama 3, Qwen, gpt-oss)",
                     path, key);
            return KVIO_ERR_INVALID;
        }
        char why[512];
        token_conflict(tokenizer, bytes, num_bytes, (uint32_t)json_integer_value(value), why,
                       sizeof(why));
        if (why[0] != '\0')
            return json_fail(path, why, "model.vocab");
        kvio_status_t status =
            kvio_tokenizer_add(tokenizer, bytes, num_bytes, (uint32_t)json_integer_value(value));
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* A merge's two tokens, written "a b" or ["a", "b"], as ids. */
static bool merge_ids(const kvio_tokenizer_t *tokenizer, const json_t *merge,
                      const int byte_of[324], uint32_t ids[2])
{
    const char *parts[2];
    size_t lengths[2];
    if (json_is_string(merge)) {
        const char *text = json_string_value(merge);
        const char *space = strchr(text, ' ');
        if (space == NULL || strchr(space + 1, ' ') != NULL)
            return false;
        parts[0] = text, lengths[0] = (size_t)(space - text);
        parts[1] = space + 1, lengths[1] = strlen(space + 1);
    } else if (json_is_array(merge) && json_array_size(merge) == 2 &&
               json_is_string(json_array_get(merge, 0)) && json_is_string(json_array_get(merge, 1))) {
        for (size_t i = 0; i < 2; i++) {
            parts[i] = json_string_value(json_array_get(merge, i));
            lengths[i] = json_string_length(json_array_get(merge, i));
        }
    } else {
        return false;
    }
    for (size_t i = 0; i < 2; i++) {
        char bytes[1024];
        size_t num_bytes;
        if (lengths[i] > sizeof(bytes) ||
            !byte_level_decode(byte_of, parts[i], lengths[i], bytes, &num_bytes))
            return false;
        ids[i] = kvio_tokenizer_lookup(tokenizer, bytes, num_bytes);
        if (ids[i] == TOKEN_NONE)
            return false;
    }
    return true;
}

static kvio_status_t read_merges(kvio_tokenizer_t *tokenizer, const char *path,
                                 const json_t *merges, const int byte_of[324])
{
    if (!json_is_array(merges))
        return json_fail(path, "missing or not an array", "model.merges");
    for (size_t i = 0; i < json_array_size(merges); i++) {
        uint32_t ids[2];
        kvio_status_t status = KVIO_ERR_NOT_FOUND;
        if (merge_ids(tokenizer, json_array_get(merges, i), byte_of, ids))
            status = kvio_tokenizer_add_merge(tokenizer, ids[0], ids[1], (uint32_t)i);
        if (status == KVIO_ERR_NOMEM)
            return status;
        if (status != KVIO_OK) {
            kvio_log(KVIO_LOG_ERROR,
                     "%s: model.merges[%zu]: not two tokens of the vocabulary whose join is one",
                     path, i);
            return KVIO_ERR_INVALID;
        }
    }
    tokenizer->by_pair = true;
    return KVIO_OK;
}

static kvio_status_t read_added_tokens(kvio_tokenizer_t *tokenizer, const char *path,
                                       const json_t *added)
{
    if (added == NULL || json_is_null(added))
        return KVIO_OK;
    if (!json_is_array(added))
        return json_fail(path, "not an array", "added_tokens");
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *token = json_array_get(added, i);
        const json_t *content = json_object_get(token, "content");
        const json_t *id = json_object_get(token, "id");
        if (!json_is_string(content) || json_string_length(content) == 0 || !json_is_integer(id) ||
            json_integer_value(id) < 0 || json_integer_value(id) >= TOKEN_ID_LIMIT) {
            kvio_log(KVIO_LOG_ERROR, "%s: added_tokens[%zu]: needs a \"content\" text and an \"id\"",
                     path, i);
            return KVIO_ERR_INVALID;
        }
        const char *text = json_string_value(content);
        size_t length = json_string_length(content);
        uint32_t token_id = (uint32_t)json_integer_value(id);
        char why[512] = "", shown[176], other[176];
        const token_entry_t *entry = entry_of(tokenizer, token_id);
        /* The vocabulary may hold an added token itself (GPT-2's
         * <|endoftext|>), with the same bytes; not another's. */
        if (entry != NULL &&
            (entry->length != length || memcmp(tokenizer->arena + entry->offset, text, length) != 0))
            snprintf(why, sizeof(why), "id %u is the vocabulary's \"%s\", not \"%s\"", token_id,
                     shown_bytes(tokenizer->arena + entry->offset, entry->length, other),
                     shown_bytes(text, length, shown));
        for (size_t s = 0; why[0] == '\0' && s < tokenizer->num_specials; s++) {
            const special_token_t *special = &tokenizer->specials[s];
            if (special->length == length && memcmp(special->text, text, length) == 0)
                snprintf(why, sizeof(why), "\"%s\" is added twice (ids %u and %u)",
                         shown_bytes(text, length, shown), special->id, token_id);
            else if (special->id == token_id)
                snprintf(why, sizeof(why), "id %u is added twice (\"%s\" and \"%s\")", token_id,
                         shown_bytes(special->text, special->length, other),
                         shown_bytes(text, length, shown));
        }
        if (why[0] != '\0') {
            kvio_log(KVIO_LOG_ERROR, "%s: added_tokens[%zu]: %s", path, i, why);
            return KVIO_ERR_INVALID;
        }
        kvio_status_t status = kvio_tokenizer_add_special(tokenizer, text, length, token_id);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* One pre-tokenizer into *pattern_p (the regex, borrowed from the JSON);
 * Split (a regex, Isolated) and ByteLevel are what byte-level models use. */
static kvio_status_t read_pre_tokenizer(kvio_tokenizer_t *tokenizer, const char *path,
                                        const json_t *pre, const char **pattern_p)
{
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (type != NULL && strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(pre, "pretokenizers");
        for (size_t i = 0; i < json_array_size(list); i++) {
            kvio_status_t status = read_pre_tokenizer(tokenizer, path, json_array_get(list, i), pattern_p);
            if (status != KVIO_OK)
                return status;
        }
        return KVIO_OK;
    }
    const char *regex = NULL;
    if (type != NULL && strcmp(type, "ByteLevel") == 0) {
        tokenizer->add_prefix_space = json_is_true(json_object_get(pre, "add_prefix_space"));
        if (!json_is_false(json_object_get(pre, "use_regex")))
            regex = pattern_gpt2;
    } else if (type != NULL && strcmp(type, "Split") == 0) {
        regex = json_string_value(json_object_get(json_object_get(pre, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(pre, "behavior"));
        if (regex == NULL || behavior == NULL || strcmp(behavior, "Isolated") != 0 ||
            json_is_true(json_object_get(pre, "invert")))
            return json_fail(path, "kvio takes a Split by a \"Regex\" with behavior Isolated",
                             "pre_tokenizer");
    } else {
        kvio_log(KVIO_LOG_ERROR,
                 "%s: pre_tokenizer: type %s is not one kvio encodes exactly (Split, ByteLevel, "
                 "Sequence of them)",
                 path, type ? type : "(none)");
        return KVIO_ERR_INVALID;
    }
    if (regex != NULL && *pattern_p != NULL)
        return json_fail(path, "more than one regex; kvio takes one", "pre_tokenizer");
    if (regex != NULL)
        *pattern_p = regex;
    return KVIO_OK;
}

/* From file's position on (after a byte order mark, if it had one). */
static kvio_status_t load_huggingface(kvio_tokenizer_t *tokenizer, const char *path, FILE *file)
{
    json_error_t error;
    json_t *root = json_loadf(file, JSON_REJECT_DUPLICATES, &error);
    if (root == NULL) {
        kvio_log(KVIO_LOG_ERROR, "%s:%d:%d: %s", path, error.line, error.column, error.text);
        return KVIO_ERR_INVALID;
    }
    kvio_status_t status = KVIO_ERR_INVALID;
    const json_t *model = json_object_get(root, "model");
    const json_t *type_json = json_object_get(model, "type");
    const char *type = json_string_value(type_json);
    const json_t *normalizer = json_object_get(root, "normalizer");
    const char *normalizer_type = json_string_value(json_object_get(normalizer, "type"));
    const char *pattern = NULL;
    int byte_of[324];
    byte_level_table(byte_of);
    tokenizer->nfc = normalizer_type != NULL && strcmp(normalizer_type, "NFC") == 0;
    if (!json_is_object(model)) {
        json_fail(path, "missing or not an object", "model");
    } else if (type_json != NULL && type == NULL) {
        json_fail(path, "not a model name (kvio reads byte-level BPE models: \"BPE\")",
                  "model.type");
    } else if (type != NULL && strcmp(type, "BPE") != 0) {
        kvio_log(KVIO_LOG_ERROR, "%s: model.type: %s; kvio reads byte-level BPE models", path, type);
    } else if (normalizer != NULL && !json_is_null(normalizer) &&
               (normalizer_type == NULL || strcmp(normalizer_type, "NFC") != 0)) {
        kvio_log(KVIO_LOG_ERROR, "%s: normalizer: %s is not one kvio applies (none, NFC)", path,
                 normalizer_type ? normalizer_type : "(no type)");
    } else if ((status = read_vocab(tokenizer, path, json_object_get(model, "vocab"), byte_of)) ==
                   KVIO_OK &&
               (status = read_merges(tokenizer, path, json_object_get(model, "merges"),
                                     byte_of)) == KVIO_OK &&
               (status = read_added_tokens(tokenizer, path,
                                           json_object_get(root, "added_tokens"))) == KVIO_OK) {
        const json_t *pre = json_object_get(root, "pre_tokenizer");
        status = json_is_object(pre) ? read_pre_tokenizer(tokenizer, path, pre, &pattern)
                                     : json_fail(path, "missing; kvio needs the pattern that cuts "
                                                       "text into pieces",
                                                 "pre_tokenizer");
    }
    if (status == KVIO_OK) {
        tokenizer->whole_piece_first = json_is_true(json_object_get(model, "ignore_merges"));
        tokenizer->line_anchors = true; /* the Rust tokenizers compile with Oniguruma */
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(tokenizer->description, sizeof(tokenizer->description),
                 "%.48s (byte-level BPE, %zu tokens)", base, tokenizer->num_entries);
        status = kvio_tokenizer_finish(tokenizer, path, pattern);
    }
    json_decref(root);
    return status;
}

/* ---------- either ---------- */

kvio_status_t kvio_tokenizer_load(const char *path, kvio_tokenizer_t **tokenizer_p)
{
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        kvio_log(KVIO_LOG_ERROR, "tokenizer %s: %s", path, strerror(errno));
        return KVIO_ERR_INVALID;
    }
    kvio_tokenizer_t *tokenizer = calloc(1, sizeof(*tokenizer));
    if (tokenizer == NULL) {
        fclose(file);
        return KVIO_ERR_NOMEM;
    }
    for (int byte = 0; byte < 256; byte++)
        tokenizer->byte_ids[byte] = TOKEN_NONE;
    /* A UTF-8 byte order mark before the JSON (it was read as a tiktoken
     * file: "not a tiktoken rank line"). */
    char bom[3];
    bool has_bom = fread(bom, 1, 3, file) == 3 && memcmp(bom, "\xef\xbb\xbf", 3) == 0;
    if (!has_bom)
        rewind(file);
    int first = fgetc(file);
    while (first == ' ' || first == '\n' || first == '\t' || first == '\r')
        first = fgetc(file);
    fseek(file, has_bom ? 3 : 0, SEEK_SET);
    kvio_status_t status;
    if (first == '{') {
        status = kvio_file_check_json_memory(path, file);
        if (status == KVIO_OK)
            status = load_huggingface(tokenizer, path, file);
    } else if (has_bom) {
        kvio_log(KVIO_LOG_ERROR, "%s: a byte order mark, then not JSON: a tiktoken rank file has "
                 "none", path);
        status = KVIO_ERR_INVALID;
    } else {
        status = load_tiktoken(tokenizer, path, file);
    }
    fclose(file);
    if (status != KVIO_OK) {
        kvio_tokenizer_destroy(tokenizer);
        return status;
    }
    *tokenizer_p = tokenizer;
    return KVIO_OK;
}
