/* The exact tokenizer's private parts: the vocabulary tables that
 * tokenizer_bpe.c encodes with and tokenizer_load.c fills from a tiktoken
 * rank file or a tokenizer.json. */
#ifndef KVIO_TOKENIZER_INT_H
#define KVIO_TOKENIZER_INT_H

#include "kvio/hashset.h"
#include "kvio/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define TOKEN_NONE UINT32_MAX
/* Ids at or past this are refused as a file's mistake (the id table is
 * indexed by id). */
#define TOKEN_ID_LIMIT (1u << 24)

/* One vocabulary entry: its bytes in the arena and its id. */
typedef struct token_entry {
    uint32_t offset, length, id;
} token_entry_t;

/* A special (added) token: its text and id. */
typedef struct special_token {
    char *text;
    size_t length;
    uint32_t id;
} special_token_t;

/* A merge of two ids (tokenizer.json): its rank and the id it makes. */
typedef struct merge_entry {
    uint32_t rank, merged;
} merge_entry_t;

struct kvio_tokenizer {
    char description[96];
    /* Token bytes, one arena; entries; an open-addressed index of entries
     * by bytes (slot = entry index + 1, 0 empty); and ids to entries. */
    char *arena;
    size_t arena_used, arena_capacity;
    token_entry_t *entries;
    size_t num_entries, entries_capacity;
    uint32_t *slots;
    size_t slot_mask;
    uint32_t *entry_of_id; /* TOKEN_NONE where an id has no entry */
    size_t num_ids;
    uint32_t byte_ids[256];
    /* Merges by pair (tokenizer.json): merge_index maps first << 32 | second
     * to the merge's index + 1. Without them (tiktoken) a pair's rank is
     * the rank of its bytes together, which is also its id. */
    merge_entry_t *merges;
    size_t num_merges, merges_capacity;
    kvio_map_t merge_index;
    bool by_pair;
    bool whole_piece_first; /* tiktoken, and tokenizer.json's ignore_merges */
    bool add_prefix_space;
    bool line_anchors; /* ^ and $ at every \n (Oniguruma's, tokenizer.json's) */
    bool nfc;          /* tokenizer.json's NFC normalizer: text composed first */
    special_token_t *specials; /* by length, longest first, then by bytes */
    size_t num_specials, specials_capacity;
    bool special_first_byte[256];
    pcre2_code *pattern;
};

/* Adds a token (bytes copied, at least one) with its id (below
 * TOKEN_ID_LIMIT); KVIO_ERR_INVALID, KVIO_ERR_NOMEM. A second entry with bytes already
 * present is kept for decoding but not for lookups. */
kvio_status_t kvio_tokenizer_add(kvio_tokenizer_t *tokenizer, const char *bytes, size_t length,
                                 uint32_t id);
/* Adds a special token; KVIO_ERR_NOMEM. */
kvio_status_t kvio_tokenizer_add_special(kvio_tokenizer_t *tokenizer, const char *text,
                                         size_t length, uint32_t id);
/* Adds the merge of first and second at rank; KVIO_ERR_NOT_FOUND when the
 * two together are not in the vocabulary. */
kvio_status_t kvio_tokenizer_add_merge(kvio_tokenizer_t *tokenizer, uint32_t first,
                                       uint32_t second, uint32_t rank);
/* The id of bytes, TOKEN_NONE if absent. */
uint32_t kvio_tokenizer_lookup(const kvio_tokenizer_t *tokenizer, const char *bytes,
                               size_t length);
/* Checks every byte has a token once every token is added, sorts the special tokens
 * and compiles the pre-tokenizer pattern (Rust/Oniguruma syntax, \s being
 * Unicode White_Space; NULL: the whole text is one piece). Logs with path
 * on failure: KVIO_ERR_INVALID. */
kvio_status_t kvio_tokenizer_finish(kvio_tokenizer_t *tokenizer, const char *path,
                                    const char *pattern);

/* The plain quadratic merge and the heap merge, for the test that keeps
 * them equal: each appends the tokens of one piece. */
kvio_status_t kvio_tokenizer_merge_plain(const kvio_tokenizer_t *tokenizer, const char *piece,
                                         size_t length, kvio_tokens_t *tokens);
kvio_status_t kvio_tokenizer_merge_heap(const kvio_tokenizer_t *tokenizer, const char *piece,
                                        size_t length, kvio_tokens_t *tokens);

#endif
