/* The exact tokenizer's encoder, and the growable token arrays every
 * tokenizer fills (kvio/tokenizer.h): special tokens split
 * out first, then the pre-tokenizer's regex (PCRE2, JIT) cuts each stretch
 * into pieces, and byte-pair merges turn each piece into ids, lowest rank
 * first and leftmost among equals, as tiktoken's byte_pair_merge and
 * Hugging Face's BPE word merge both do. */
#include "tokenizer_int.h"

#include "kvio/array.h"
#include "kvio/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

/* Pieces up to this many bytes merge by the plain scan; longer ones (a
 * hostile prompt's one long word) by the heap, which stays n log n. */
#define PLAIN_MERGE_MAX 64

/* ---------- token arrays ---------- */

kvio_status_t kvio_tokens_push(kvio_tokens_t *tokens, uint32_t id)
{
    if (tokens->count == tokens->capacity &&
        kvio_array_reserve((void **)&tokens->ids, &tokens->capacity, tokens->count + 1,
                           sizeof(*tokens->ids), 256) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    tokens->ids[tokens->count++] = id;
    return KVIO_OK;
}

void kvio_tokens_fini(kvio_tokens_t *tokens)
{
    free(tokens->ids);
    *tokens = (kvio_tokens_t){0};
}

/* ---------- tables ---------- */

static size_t bytes_hash(const char *bytes, size_t length)
{
    return (size_t)XXH3_64bits(bytes, length);
}

static void index_insert(uint32_t *slots, size_t mask, const kvio_tokenizer_t *tokenizer,
                         uint32_t entry_index)
{
    const token_entry_t *entry = &tokenizer->entries[entry_index];
    size_t slot = bytes_hash(tokenizer->arena + entry->offset, entry->length) & mask;
    while (slots[slot] != 0)
        slot = (slot + 1) & mask;
    slots[slot] = entry_index + 1;
}

/* Keeps the index at most half full. */
static kvio_status_t index_reserve(kvio_tokenizer_t *tokenizer, size_t entries)
{
    if (tokenizer->slots != NULL && 2 * entries <= tokenizer->slot_mask + 1)
        return KVIO_OK;
    size_t capacity = 1024;
    while (capacity < 4 * entries)
        capacity *= 2;
    uint32_t *slots = calloc(capacity, sizeof(*slots));
    if (slots == NULL)
        return KVIO_ERR_NOMEM;
    if (tokenizer->slots != NULL) {
        for (size_t i = 0; i <= tokenizer->slot_mask; i++)
            if (tokenizer->slots[i] != 0)
                index_insert(slots, capacity - 1, tokenizer, tokenizer->slots[i] - 1);
        free(tokenizer->slots);
    }
    tokenizer->slots = slots;
    tokenizer->slot_mask = capacity - 1;
    return KVIO_OK;
}

uint32_t kvio_tokenizer_lookup(const kvio_tokenizer_t *tokenizer, const char *bytes,
                               size_t length)
{
    if (tokenizer->slots == NULL)
        return TOKEN_NONE;
    size_t slot = bytes_hash(bytes, length) & tokenizer->slot_mask;
    for (uint32_t index; (index = tokenizer->slots[slot]) != 0;
         slot = (slot + 1) & tokenizer->slot_mask) {
        const token_entry_t *entry = &tokenizer->entries[index - 1];
        if (entry->length == length && memcmp(tokenizer->arena + entry->offset, bytes, length) == 0)
            return entry->id;
    }
    return TOKEN_NONE;
}

/* Room in the id table for id; new ids have no entry. */
static bool ids_reserve(kvio_tokenizer_t *tokenizer, uint32_t id)
{
    if (id < tokenizer->num_ids)
        return true;
    size_t capacity = tokenizer->num_ids ? tokenizer->num_ids : 1024;
    while (capacity <= id)
        capacity *= 2;
    uint32_t *entry_of_id = realloc(tokenizer->entry_of_id, capacity * sizeof(*entry_of_id));
    if (entry_of_id == NULL)
        return false;
    for (size_t i = tokenizer->num_ids; i < capacity; i++)
        entry_of_id[i] = TOKEN_NONE;
    tokenizer->entry_of_id = entry_of_id;
    tokenizer->num_ids = capacity;
    return true;
}

kvio_status_t kvio_tokenizer_add(kvio_tokenizer_t *tokenizer, const char *bytes, size_t length,
                                 uint32_t id)
{
    if (id >= TOKEN_ID_LIMIT || length == 0)
        return KVIO_ERR_INVALID;
    if (length > UINT32_MAX || tokenizer->arena_used + length > UINT32_MAX)
        return KVIO_ERR_NOMEM;
    if (kvio_array_reserve((void **)&tokenizer->arena, &tokenizer->arena_capacity,
                           tokenizer->arena_used + length, 1, 1 << 16) != KVIO_OK ||
        kvio_array_reserve((void **)&tokenizer->entries, &tokenizer->entries_capacity,
                           tokenizer->num_entries + 1, sizeof(token_entry_t), 1024) != KVIO_OK ||
        !ids_reserve(tokenizer, id) ||
        index_reserve(tokenizer, tokenizer->num_entries + 1) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    bool known = kvio_tokenizer_lookup(tokenizer, bytes, length) != TOKEN_NONE;
    memcpy(tokenizer->arena + tokenizer->arena_used, bytes, length);
    uint32_t index = (uint32_t)tokenizer->num_entries++;
    tokenizer->entries[index] = (token_entry_t){
        .offset = (uint32_t)tokenizer->arena_used, .length = (uint32_t)length, .id = id};
    tokenizer->arena_used += length;
    if (!known)
        index_insert(tokenizer->slots, tokenizer->slot_mask, tokenizer, index);
    if (tokenizer->entry_of_id[id] == TOKEN_NONE)
        tokenizer->entry_of_id[id] = index;
    if (length == 1 && tokenizer->byte_ids[(unsigned char)bytes[0]] == TOKEN_NONE)
        tokenizer->byte_ids[(unsigned char)bytes[0]] = id;
    return KVIO_OK;
}

kvio_status_t kvio_tokenizer_add_special(kvio_tokenizer_t *tokenizer, const char *text,
                                         size_t length, uint32_t id)
{
    if (length == 0)
        return KVIO_ERR_INVALID;
    if (kvio_array_reserve((void **)&tokenizer->specials, &tokenizer->specials_capacity,
                           tokenizer->num_specials + 1, sizeof(special_token_t), 16) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    char *copy = malloc(length + 1);
    if (copy == NULL)
        return KVIO_ERR_NOMEM;
    memcpy(copy, text, length);
    copy[length] = '\0';
    tokenizer->specials[tokenizer->num_specials++] =
        (special_token_t){.text = copy, .length = length, .id = id};
    tokenizer->special_first_byte[(unsigned char)text[0]] = true;
    return KVIO_OK;
}

static uint64_t pair_key(uint32_t first, uint32_t second)
{
    return (uint64_t)first << 32 | second;
}

static const merge_entry_t *merge_find(const kvio_tokenizer_t *tokenizer, uint32_t first,
                                       uint32_t second)
{
    uint32_t found = kvio_map_get(&tokenizer->merge_index, pair_key(first, second));
    return found != 0 ? &tokenizer->merges[found - 1] : NULL;
}

kvio_status_t kvio_tokenizer_add_merge(kvio_tokenizer_t *tokenizer, uint32_t first,
                                       uint32_t second, uint32_t rank)
{
    size_t first_length = 0, second_length = 0;
    const char *first_bytes = kvio_tokenizer_token_bytes(tokenizer, first, &first_length);
    const char *second_bytes = kvio_tokenizer_token_bytes(tokenizer, second, &second_length);
    if (first_bytes == NULL || second_bytes == NULL)
        return KVIO_ERR_NOT_FOUND;
    char stack[256];
    size_t length = first_length + second_length;
    char *joined = length <= sizeof(stack) ? stack : malloc(length);
    if (joined == NULL)
        return KVIO_ERR_NOMEM;
    memcpy(joined, first_bytes, first_length);
    memcpy(joined + first_length, second_bytes, second_length);
    uint32_t merged = kvio_tokenizer_lookup(tokenizer, joined, length);
    if (joined != stack)
        free(joined);
    if (merged == TOKEN_NONE)
        return KVIO_ERR_NOT_FOUND;
    if (merge_find(tokenizer, first, second) != NULL)
        return KVIO_OK; /* a repeated merge keeps its first, lowest rank */
    if (tokenizer->num_merges >= UINT32_MAX - 1 ||
        kvio_array_reserve((void **)&tokenizer->merges, &tokenizer->merges_capacity,
                           tokenizer->num_merges + 1, sizeof(merge_entry_t), 1024) != KVIO_OK ||
        kvio_map_set(&tokenizer->merge_index, pair_key(first, second),
                     (uint32_t)tokenizer->num_merges + 1) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    tokenizer->merges[tokenizer->num_merges++] = (merge_entry_t){.rank = rank, .merged = merged};
    return KVIO_OK;
}

const char *kvio_tokenizer_token_bytes(const kvio_tokenizer_t *tokenizer, uint32_t id,
                                       size_t *length_p)
{
    if (id < tokenizer->num_ids && tokenizer->entry_of_id[id] != TOKEN_NONE) {
        const token_entry_t *entry = &tokenizer->entries[tokenizer->entry_of_id[id]];
        *length_p = entry->length;
        return tokenizer->arena + entry->offset;
    }
    for (size_t i = 0; i < tokenizer->num_specials; i++) {
        if (tokenizer->specials[i].id == id) {
            *length_p = tokenizer->specials[i].length;
            return tokenizer->specials[i].text;
        }
    }
    return NULL;
}

kvio_status_t kvio_tokenizer_special_id(const kvio_tokenizer_t *tokenizer, const char *text,
                                        uint32_t *id_p)
{
    size_t length = strlen(text);
    for (size_t i = 0; i < tokenizer->num_specials; i++) {
        if (tokenizer->specials[i].length == length &&
            memcmp(tokenizer->specials[i].text, text, length) == 0) {
            *id_p = tokenizer->specials[i].id;
            return KVIO_OK;
        }
    }
    return KVIO_ERR_NOT_FOUND;
}

const char *kvio_tokenizer_describe(const kvio_tokenizer_t *tokenizer)
{
    return tokenizer->description;
}

/* ---------- finishing ---------- */

/* Unicode White_Space, which \s means in Rust's regex and tiktoken (PCRE2's
 * \s also takes U+180E; JavaScript's takes U+FEFF and not U+0085). */
#define WHITE_SPACE "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}" \
                    "\\x{202f}\\x{205f}\\x{3000}"

/* The pattern with \s and \S spelled as White_Space classes; malloc'd. */
static char *translate_pattern(const char *pattern)
{
    size_t length = strlen(pattern);
    char *out = malloc(length * (sizeof(WHITE_SPACE) + 3) + 1);
    if (out == NULL)
        return NULL;
    size_t at = 0;
    bool in_class = false;
    for (size_t i = 0; i < length; i++) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < length) {
            char next = pattern[++i];
            const char *spelled = NULL;
            if (next == 's')
                spelled = in_class ? WHITE_SPACE : "[" WHITE_SPACE "]";
            else if (next == 'S' && !in_class)
                spelled = "[^" WHITE_SPACE "]";
            if (spelled != NULL) {
                memcpy(out + at, spelled, strlen(spelled));
                at += strlen(spelled);
            } else {
                out[at++] = c;
                out[at++] = next;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out[at++] = c;
            if (i + 1 < length && pattern[i + 1] == '^')
                out[at++] = pattern[++i];
            if (i + 1 < length && pattern[i + 1] == ']')
                out[at++] = pattern[++i]; /* a leading ] is a member */
            continue;
        }
        if (c == ']' && in_class)
            in_class = false;
        out[at++] = c;
    }
    out[at] = '\0';
    return out;
}

static int special_order(const void *left_p, const void *right_p)
{
    const special_token_t *left = left_p, *right = right_p;
    if (left->length != right->length)
        return left->length > right->length ? -1 : 1;
    return memcmp(left->text, right->text, left->length);
}

static kvio_status_t compile_pattern(kvio_tokenizer_t *tokenizer, const char *path,
                                     const char *pattern)
{
    char *translated = translate_pattern(pattern);
    if (translated == NULL)
        return KVIO_ERR_NOMEM;
    int code;
    PCRE2_SIZE offset;
    tokenizer->pattern = pcre2_compile(
        (PCRE2_SPTR)translated, PCRE2_ZERO_TERMINATED,
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
            (tokenizer->line_anchors ? PCRE2_MULTILINE : PCRE2_DOLLAR_ENDONLY),
        &code, &offset, NULL);
    free(translated);
    if (tokenizer->pattern == NULL) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(code, message, sizeof(message));
        kvio_log(KVIO_LOG_ERROR, "%s: the pre-tokenizer pattern does not compile at offset %zu: %s",
                 path, (size_t)offset, (const char *)message);
        return KVIO_ERR_INVALID;
    }
    pcre2_jit_compile(tokenizer->pattern, PCRE2_JIT_COMPLETE); /* without JIT, it interprets */
    return KVIO_OK;
}

kvio_status_t kvio_tokenizer_finish(kvio_tokenizer_t *tokenizer, const char *path,
                                    const char *pattern)
{
    if (tokenizer->num_specials > 0)
        qsort(tokenizer->specials, tokenizer->num_specials, sizeof(special_token_t), special_order);
    for (int byte = 0; byte < 256; byte++) {
        if (tokenizer->byte_ids[byte] == TOKEN_NONE) {
            kvio_log(KVIO_LOG_ERROR,
                     "%s: the vocabulary has no token for the byte 0x%02x, so not every text "
                     "can be encoded",
                     path, byte);
            return KVIO_ERR_INVALID;
        }
    }
    return pattern != NULL ? compile_pattern(tokenizer, path, pattern) : KVIO_OK;
}

void kvio_tokenizer_destroy(kvio_tokenizer_t *tokenizer)
{
    if (tokenizer == NULL)
        return;
    for (size_t i = 0; i < tokenizer->num_specials; i++)
        free(tokenizer->specials[i].text);
    free(tokenizer->specials);
    pcre2_code_free(tokenizer->pattern);
    free(tokenizer->merges);
    kvio_map_fini(&tokenizer->merge_index);
    free(tokenizer->entry_of_id);
    free(tokenizer->slots);
    free(tokenizer->entries);
    free(tokenizer->arena);
    free(tokenizer);
}

/* ---------- merging one piece ---------- */

/* The rank of merging the parts [start_a, start_b) and [start_b, end_b)
 * with ids id_a and id_b, and the id they make; TOKEN_NONE when they do
 * not merge. */
static uint32_t pair_rank(const kvio_tokenizer_t *tokenizer, const char *piece, size_t start_a,
                          size_t end_b, uint32_t id_a, uint32_t id_b, uint32_t *merged_p)
{
    if (tokenizer->by_pair) {
        const merge_entry_t *merge = merge_find(tokenizer, id_a, id_b);
        if (merge == NULL)
            return TOKEN_NONE;
        *merged_p = merge->merged;
        return merge->rank;
    }
    uint32_t rank = kvio_tokenizer_lookup(tokenizer, piece + start_a, end_b - start_a);
    *merged_p = rank;
    return rank;
}

kvio_status_t kvio_tokenizer_merge_plain(const kvio_tokenizer_t *tokenizer, const char *piece,
                                         size_t length, kvio_tokens_t *tokens)
{
    size_t start[PLAIN_MERGE_MAX + 1];
    uint32_t ids[PLAIN_MERGE_MAX], ranks[PLAIN_MERGE_MAX], merged[PLAIN_MERGE_MAX];
    if (length > PLAIN_MERGE_MAX)
        return kvio_tokenizer_merge_heap(tokenizer, piece, length, tokens);
    size_t count = length;
    for (size_t i = 0; i < count; i++) {
        start[i] = i;
        ids[i] = tokenizer->byte_ids[(unsigned char)piece[i]];
    }
    start[count] = length;
    for (size_t i = 0; i + 1 < count; i++)
        ranks[i] = pair_rank(tokenizer, piece, start[i], start[i + 2], ids[i], ids[i + 1],
                             &merged[i]);
    while (count > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < count; i++)
            if (ranks[i] < ranks[best])
                best = i;
        if (ranks[best] == TOKEN_NONE)
            break;
        ids[best] = merged[best];
        size_t tail = count - best - 2;
        memmove(&ids[best + 1], &ids[best + 2], tail * sizeof(ids[0]));
        memmove(&ranks[best + 1], &ranks[best + 2], tail * sizeof(ranks[0]));
        memmove(&merged[best + 1], &merged[best + 2], tail * sizeof(merged[0]));
        memmove(&start[best + 1], &start[best + 2], (tail + 1) * sizeof(start[0]));
        count--;
        if (best + 1 < count)
            ranks[best] = pair_rank(tokenizer, piece, start[best], start[best + 2], ids[best],
                                    ids[best + 1], &merged[best]);
        if (best > 0)
            ranks[best - 1] = pair_rank(tokenizer, piece, start[best - 1], start[best + 1],
                                        ids[best - 1], ids[best], &merged[best - 1]);
    }
    for (size_t i = 0; i < count; i++) {
        kvio_status_t status = kvio_tokens_push(tokens, ids[i]);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* The heap merge: parts in a linked list, candidate pairs in a min-heap by
 * (rank, start); a candidate whose parts changed since it was pushed is
 * stale and skipped. The same choices as the plain scan, in n log n. */
typedef struct part {
    size_t start, end;
    uint32_t id, version;
    size_t prev, next; /* SIZE_MAX at the ends */
    bool alive;
} part_t;

typedef struct candidate {
    uint32_t rank, merged;
    size_t left;
    uint32_t left_version, right_version;
    size_t start;
} candidate_t;

static bool candidate_before(const candidate_t *a, const candidate_t *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->start < b->start;
}

static void heap_push(candidate_t *heap, size_t *count_p, candidate_t item)
{
    size_t at = (*count_p)++;
    while (at > 0 && candidate_before(&item, &heap[(at - 1) / 2])) {
        heap[at] = heap[(at - 1) / 2];
        at = (at - 1) / 2;
    }
    heap[at] = item;
}

static candidate_t heap_pop(candidate_t *heap, size_t *count_p)
{
    candidate_t top = heap[0], last = heap[--*count_p];
    size_t at = 0, count = *count_p;
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= count)
            break;
        if (child + 1 < count && candidate_before(&heap[child + 1], &heap[child]))
            child++;
        if (!candidate_before(&heap[child], &last))
            break;
        heap[at] = heap[child];
        at = child;
    }
    if (count > 0)
        heap[at] = last;
    return top;
}

static void push_pair(const kvio_tokenizer_t *tokenizer, const char *piece, const part_t *parts,
                      size_t left, candidate_t *heap, size_t *count_p)
{
    if (left == SIZE_MAX || parts[left].next == SIZE_MAX)
        return;
    const part_t *a = &parts[left], *b = &parts[a->next];
    uint32_t merged;
    uint32_t rank = pair_rank(tokenizer, piece, a->start, b->end, a->id, b->id, &merged);
    if (rank != TOKEN_NONE)
        heap_push(heap, count_p,
                  (candidate_t){.rank = rank, .merged = merged, .left = left,
                                .left_version = a->version, .right_version = b->version,
                                .start = a->start});
}

kvio_status_t kvio_tokenizer_merge_heap(const kvio_tokenizer_t *tokenizer, const char *piece,
                                        size_t length, kvio_tokens_t *tokens)
{
    if (length == 0)
        return KVIO_OK;
    part_t *parts = malloc(length * sizeof(*parts));
    /* Each merge pushes at most two candidates; the first round n - 1. */
    candidate_t *heap = malloc(3 * length * sizeof(*heap));
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (parts == NULL || heap == NULL)
        goto out;
    for (size_t i = 0; i < length; i++)
        parts[i] = (part_t){.start = i, .end = i + 1,
                            .id = tokenizer->byte_ids[(unsigned char)piece[i]],
                            .prev = i ? i - 1 : SIZE_MAX,
                            .next = i + 1 < length ? i + 1 : SIZE_MAX, .alive = true};
    size_t count = 0;
    for (size_t i = 0; i + 1 < length; i++)
        push_pair(tokenizer, piece, parts, i, heap, &count);
    while (count > 0) {
        candidate_t best = heap_pop(heap, &count);
        part_t *a = &parts[best.left];
        if (!a->alive || a->version != best.left_version || a->next == SIZE_MAX ||
            parts[a->next].version != best.right_version)
            continue;
        part_t *b = &parts[a->next];
        a->end = b->end;
        a->id = best.merged;
        a->version++;
        b->alive = false;
        b->version++;
        a->next = b->next;
        if (b->next != SIZE_MAX)
            parts[b->next].prev = best.left;
        push_pair(tokenizer, piece, parts, a->prev, heap, &count);
        push_pair(tokenizer, piece, parts, best.left, heap, &count);
    }
    status = KVIO_OK;
    for (size_t i = 0; i != SIZE_MAX && status == KVIO_OK; i = parts[i].next)
        status = kvio_tokens_push(tokens, parts[i].id);
out:
    free(heap);
    free(parts);
    return status;
}

/* ---------- encoding ---------- */

static kvio_status_t encode_piece(const kvio_tokenizer_t *tokenizer, const char *piece,
                                  size_t length, kvio_tokens_t *tokens)
{
    if (length == 0)
        return KVIO_OK;
    if (length == 1)
        return kvio_tokens_push(tokens, tokenizer->byte_ids[(unsigned char)piece[0]]);
    if (tokenizer->whole_piece_first) {
        uint32_t id = kvio_tokenizer_lookup(tokenizer, piece, length);
        if (id != TOKEN_NONE)
            return kvio_tokens_push(tokens, id);
    }
    return kvio_tokenizer_merge_plain(tokenizer, piece, length, tokens);
}

/* Text without special tokens: the pattern's matches, each a piece (bytes
 * the pattern skips, which only invalid UTF-8 can be, are pieces too). */
static kvio_status_t encode_ordinary(const kvio_tokenizer_t *tokenizer,
                                     pcre2_match_data *match, const char *text, size_t length,
                                     kvio_tokens_t *tokens)
{
    char *prefixed = NULL;
    if (tokenizer->add_prefix_space && length > 0 && text[0] != ' ') {
        prefixed = malloc(length + 1);
        if (prefixed == NULL)
            return KVIO_ERR_NOMEM;
        prefixed[0] = ' ';
        memcpy(prefixed + 1, text, length);
        text = prefixed;
        length++;
    }
    kvio_status_t status = KVIO_OK;
    size_t at = 0;
    while (at < length && status == KVIO_OK) {
        size_t start = length, end = length;
        if (tokenizer->pattern != NULL) {
            int found = pcre2_match(tokenizer->pattern, (PCRE2_SPTR)text, length, at, 0, match,
                                    NULL);
            if (found > 0) {
                PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(match);
                start = ovector[0];
                end = ovector[1] > start ? ovector[1] : start + 1;
            }
        } else {
            start = at;
        }
        status = encode_piece(tokenizer, text + at, start - at, tokens);
        if (status == KVIO_OK)
            status = encode_piece(tokenizer, text + start, end - start, tokens);
        at = end;
    }
    free(prefixed);
    return status;
}

/* The longest special token written at text[at], or NULL. */
static const special_token_t *special_at(const kvio_tokenizer_t *tokenizer, const char *text,
                                         size_t length, size_t at)
{
    if (!tokenizer->special_first_byte[(unsigned char)text[at]])
        return NULL;
    for (size_t i = 0; i < tokenizer->num_specials; i++) {
        const special_token_t *special = &tokenizer->specials[i];
        if (special->length <= length - at && special->text[0] == text[at] &&
            memcmp(special->text, text + at, special->length) == 0)
            return special;
    }
    return NULL;
}

/* The text with its special tokens found (special) and the pieces between
 * them encoded. */
static kvio_status_t encode_text(const kvio_tokenizer_t *tokenizer, const char *text,
                                 size_t length, bool special, kvio_tokens_t *tokens)
{
    pcre2_match_data *match = NULL;
    if (tokenizer->pattern != NULL) {
        match = pcre2_match_data_create_from_pattern(tokenizer->pattern, NULL);
        if (match == NULL)
            return KVIO_ERR_NOMEM;
    }
    kvio_status_t status = KVIO_OK;
    size_t stretch = 0;
    for (size_t at = 0; special && at < length && status == KVIO_OK; at++) {
        const special_token_t *found = special_at(tokenizer, text, length, at);
        if (found == NULL)
            continue;
        status = encode_ordinary(tokenizer, match, text + stretch, at - stretch, tokens);
        if (status == KVIO_OK)
            status = kvio_tokens_push(tokens, found->id);
        stretch = at + found->length;
        at = stretch - 1;
    }
    if (status == KVIO_OK)
        status = encode_ordinary(tokenizer, match, text + stretch, length - stretch, tokens);
    pcre2_match_data_free(match);
    return status;
}

/* Whether text is all ASCII (which NFC leaves as it is). */
static bool ascii_only(const char *text, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] >= 0x80)
            return false;
    return true;
}

kvio_status_t kvio_tokenizer_encode(const kvio_tokenizer_t *tokenizer, const char *text,
                                    size_t length, bool special, kvio_tokens_t *tokens)
{
    if (!tokenizer->nfc || ascii_only(text, length))
        return encode_text(tokenizer, text, length, special, tokens);
    /* NFC as the tokenizer's normalizer (Unicode's composition, by
     * utf8proc); text that is not UTF-8 is encoded as it is, byte by byte
     * where it is not. */
    utf8proc_uint8_t *composed = NULL;
    utf8proc_ssize_t composed_length =
        utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)length, &composed,
                     UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (composed_length == UTF8PROC_ERROR_NOMEM)
        return KVIO_ERR_NOMEM;
    kvio_status_t status =
        composed_length < 0
            ? encode_text(tokenizer, text, length, special, tokens)
            : encode_text(tokenizer, (const char *)composed, (size_t)composed_length, special,
                          tokens);
    free(composed);
    return status;
}
