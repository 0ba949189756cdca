/* Block hashes: XXH3-128 over the parent's canonical bytes and a payload
 * laid out little-endian, one function per kind of content. */
#include "kvio/hash.h"

#include <string.h>

/* Inlined: a block hash is a short input of fixed layout, and XXH3's
 * length dispatch folds away when the length is a constant. */
#define XXH_INLINE_ALL
#include <xxhash.h>

static void put_u32(uint8_t *out, uint32_t value)
{
    for (int i = 0; i < 4; i++)
        out[i] = (uint8_t)(value >> (8 * i));
}

static void put_u64(uint8_t *out, uint64_t value)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(value >> (8 * i));
}

/* The canonical form (XXH128_canonicalFromHash): high half first, each
 * big-endian. */
static void put_u64_big_endian(uint8_t *out, uint64_t value)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    value = __builtin_bswap64(value);
    memcpy(out, &value, 8);
#else
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(value >> (56 - 8 * i));
#endif
}

static void put_canonical(uint8_t *out, kvio_hash_t hash)
{
    put_u64_big_endian(out, hash.high);
    put_u64_big_endian(out + 8, hash.low);
}

static void put_parent(uint8_t *out, const kvio_hash_t *parent)
{
    if (parent == NULL)
        memset(out, 0, 16);
    else
        put_canonical(out, *parent);
}

static kvio_hash_t from_xxh(XXH128_hash_t value)
{
    return (kvio_hash_t){.low = value.low64, .high = value.high64};
}

void kvio_hash_to_bytes(kvio_hash_t hash, uint8_t bytes_p[16])
{
    put_canonical(bytes_p, hash);
}

void kvio_hash_format(kvio_hash_t hash, char text_p[33])
{
    static const char digits[] = "0123456789abcdef";
    uint8_t bytes[16];
    kvio_hash_to_bytes(hash, bytes);
    for (int i = 0; i < 16; i++) {
        text_p[2 * i] = digits[bytes[i] >> 4];
        text_p[2 * i + 1] = digits[bytes[i] & 15];
    }
    text_p[32] = '\0';
}

kvio_hash_t kvio_hash_tokens(const kvio_hash_t *parent, const uint32_t *tokens,
                             size_t num_tokens, const void *extra_key,
                             size_t extra_key_len)
{
    /* Fixed-size chunks through the streaming state keep any block size on
     * the stack. */
    XXH3_state_t state;
    uint8_t chunk[16 + 4 * 64];
    XXH3_128bits_reset(&state);
    put_parent(chunk, parent);
    XXH3_128bits_update(&state, chunk, 16);
    for (size_t start = 0; start < num_tokens; start += 64) {
        size_t count = num_tokens - start < 64 ? num_tokens - start : 64;
        for (size_t i = 0; i < count; i++)
            put_u32(chunk + 4 * i, tokens[start + i]);
        XXH3_128bits_update(&state, chunk, 4 * count);
    }
    if (extra_key != NULL && extra_key_len > 0)
        XXH3_128bits_update(&state, extra_key, extra_key_len);
    return from_xxh(XXH3_128bits_digest(&state));
}

/* XXH3-128 (default secret, seed 0) of an input of 17 to 32 bytes, as
 * XXH3_128bits computes it (XXH3_len_17to128_128b: one XXH128_mix32B of
 * bytes 0-15 and the last 16), from the input's little-endian words at
 * offsets 0, 8, length - 16 and length - 8, formed in registers: through a
 * byte buffer, reads that straddle two stores wait for them. test_stream
 * checks it against XXH3_128bits. Always inlined: at -O2 GCC calls it,
 * with the length no longer a constant, and a chain ran at half speed. */
static inline __attribute__((always_inline)) kvio_hash_t
short_input_hash(uint64_t length, uint64_t word0, uint64_t word8, uint64_t last16, uint64_t last8)
{
    const uint8_t *secret = XXH3_kSecret;
    uint64_t low = length * XXH_PRIME64_1, high = 0;
    low += XXH3_mul128_fold64(word0 ^ XXH_readLE64(secret), word8 ^ XXH_readLE64(secret + 8));
    low ^= last16 + last8;
    high += XXH3_mul128_fold64(last16 ^ XXH_readLE64(secret + 16),
                               last8 ^ XXH_readLE64(secret + 24));
    high ^= word0 + word8;
    uint64_t out_low = low + high;
    uint64_t out_high = low * XXH_PRIME64_1 + high * XXH_PRIME64_4 + length * XXH_PRIME64_2;
    return (kvio_hash_t){.low = XXH3_avalanche(out_low), .high = 0 - XXH3_avalanche(out_high)};
}

kvio_hash_t kvio_hash_runs(const kvio_hash_t *parent, const kvio_hash_run_t *runs,
                           size_t num_runs)
{
    uint8_t small[16 + 16 * 8];
    if (num_runs == 1) {
        /* Most blocks lie inside one content: 32 bytes, hashed in registers. */
        uint64_t word0 = parent != NULL ? __builtin_bswap64(parent->high) : 0;
        uint64_t word8 = parent != NULL ? __builtin_bswap64(parent->low) : 0;
        return short_input_hash(32, word0, word8, runs[0].content_id,
                                runs[0].offset | (uint64_t)runs[0].length << 32);
    }
    if (num_runs <= 8) {
        put_parent(small, parent);
        for (size_t i = 0; i < num_runs; i++) {
            put_u64(small + 16 + 16 * i, runs[i].content_id);
            put_u32(small + 24 + 16 * i, runs[i].offset);
            put_u32(small + 28 + 16 * i, runs[i].length);
        }
        return from_xxh(XXH3_128bits(small, 16 + 16 * num_runs));
    }
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    put_parent(small, parent);
    XXH3_128bits_update(&state, small, 16);
    for (size_t i = 0; i < num_runs; i++) {
        put_u64(small, runs[i].content_id);
        put_u32(small + 8, runs[i].offset);
        put_u32(small + 12, runs[i].length);
        XXH3_128bits_update(&state, small, 16);
    }
    return from_xxh(XXH3_128bits_digest(&state));
}

/* The payload words of a span's blocks, formed from the parent and two
 * words that step evenly. The input is the parent's canonical bytes (each
 * half big-endian, high first), then little-endian fields: a trace
 * block's is (parent, id u64, index u32) in 28 bytes, whose word at 12
 * holds the parent's last four bytes (parent_mask keeps them) and the id's
 * low half; a one-run block's is (parent, content id u64, offset u32,
 * length u32) in 32 bytes. */
typedef struct span_words {
    uint64_t length;      /* input bytes */
    uint64_t parent_mask; /* of the parent's word at 8, shifted down, in word 16 */
    uint64_t word16;      /* the rest of the word at length - 16 */
    uint64_t word24;      /* the word at length - 8, for the span's first block */
    uint64_t step;        /* added to word24 from block to block */
} span_words_t;

static span_words_t span_words(const kvio_hash_span_t *span)
{
    if (span->kind == KVIO_HASH_SPAN_TRACE)
        return (span_words_t){28, UINT32_MAX, span->id << 32,
                              (span->id >> 32) | (uint64_t)span->first << 32, 1ull << 32};
    return (span_words_t){32, 0, span->id, span->first | (uint64_t)span->length << 32,
                          span->length};
}

/* One block of a span. */
static inline __attribute__((always_inline)) kvio_hash_t span_step(kvio_hash_t parent,
                                                                  const span_words_t *words)
{
    uint64_t word0 = __builtin_bswap64(parent.high);
    uint64_t word8 = __builtin_bswap64(parent.low);
    uint64_t word16 = ((word8 >> 32) & words->parent_mask) | words->word16;
    return short_input_hash(words->length, word0, word8, word16, words->word24);
}

kvio_hash_t kvio_hash_trace_block(const kvio_hash_t *parent, uint64_t trace_hash_id,
                                  uint32_t index_in_trace_block)
{
    kvio_hash_t hash;
    kvio_hash_trace_chain(parent, trace_hash_id, index_in_trace_block, 1, &hash);
    return hash;
}

void kvio_hash_trace_chain(const kvio_hash_t *parent, uint64_t trace_hash_id,
                           uint32_t first_index, size_t count, kvio_hash_t *hashes_p)
{
    kvio_hash_t previous = parent != NULL ? *parent : (kvio_hash_t){0, 0};
    span_words_t words = span_words(&(kvio_hash_span_t){
        .kind = KVIO_HASH_SPAN_TRACE, .id = trace_hash_id, .first = first_index});
    for (size_t i = 0; i < count; i++) {
        previous = span_step(previous, &words);
        hashes_p[i] = previous;
        words.word24 += words.step; /* the index, in the high half, wraps as a u32 */
    }
}

/* Where one chain of kvio_hash_chains stands: in its span's blocks, which
 * step evenly (a block of several runs is a span of its own, hashed as it
 * comes). */
typedef struct chain_lane {
    kvio_hash_t previous;
    kvio_hash_t *out;                /* where the next hash goes */
    const kvio_hash_span_t *span;    /* the next span, past the current */
    const kvio_hash_span_t *end;     /* past the last span */
    span_words_t words;              /* the current span's */
    size_t left;                     /* blocks left in the current span */
} chain_lane_t;

/* Moves the lane to its next span of evenly stepping blocks, hashing
 * blocks of several runs on the way; false when the chain is done. */
static bool lane_next_span(chain_lane_t *lane)
{
    for (; lane->span != lane->end; lane->span++) {
        const kvio_hash_span_t *span = lane->span;
        if (span->count == 0)
            continue;
        if (span->kind == KVIO_HASH_SPAN_RUNS) {
            lane->previous = kvio_hash_runs(&lane->previous, span->runs, span->num_runs);
            *lane->out++ = lane->previous;
            continue;
        }
        lane->words = span_words(span);
        lane->left = span->count;
        lane->span++;
        return true;
    }
    return false;
}

/* Hashes the next steps blocks of each of two lanes (each has as many
 * left in its span), one of each per round: two hashes in flight keep the
 * core about as busy as it gets (a third or fourth lane ran no faster).
 * Written out with scalars, as GCC at -O2 keeps an array of lanes in
 * memory. */
static void run_two_lanes(chain_lane_t *first, chain_lane_t *second, size_t steps)
{
    kvio_hash_t previous_a = first->previous, previous_b = second->previous;
    span_words_t words_a = first->words, words_b = second->words;
    kvio_hash_t *out_a = first->out, *out_b = second->out;
    for (size_t step = 0; step < steps; step++) {
        previous_a = span_step(previous_a, &words_a);
        previous_b = span_step(previous_b, &words_b);
        out_a[step] = previous_a;
        out_b[step] = previous_b;
        words_a.word24 += words_a.step;
        words_b.word24 += words_b.step;
    }
    first->previous = previous_a;
    first->words = words_a;
    first->out = out_a + steps;
    first->left -= steps;
    second->previous = previous_b;
    second->words = words_b;
    second->out = out_b + steps;
    second->left -= steps;
}

/* The rest of one lane's chain. */
static void run_lane(chain_lane_t *lane)
{
    do {
        for (; lane->left > 0; lane->left--) {
            lane->previous = span_step(lane->previous, &lane->words);
            *lane->out++ = lane->previous;
            lane->words.word24 += lane->words.step;
        }
    } while (lane_next_span(lane));
}

void kvio_hash_chains(const kvio_hash_chain_t *chains, size_t count)
{
    chain_lane_t lanes[2];
    unsigned num_lanes = 0;
    size_t next = 0;
    for (;;) {
        /* A lane whose chain ended takes the next one. */
        while (num_lanes < 2 && next < count) {
            const kvio_hash_chain_t *chain = &chains[next++];
            chain_lane_t *lane = &lanes[num_lanes];
            *lane = (chain_lane_t){.previous = chain->parent, .out = chain->hashes_p,
                                   .span = chain->spans, .end = chain->spans + chain->num_spans};
            num_lanes += lane_next_span(lane);
        }
        if (num_lanes < 2)
            break;
        size_t steps = lanes[0].left < lanes[1].left ? lanes[0].left : lanes[1].left;
        run_two_lanes(&lanes[0], &lanes[1], steps);
        /* A lane at its span's end moves to its next span, or its chain ends. */
        unsigned kept = 0;
        for (unsigned lane = 0; lane < 2; lane++)
            if (lanes[lane].left > 0 || lane_next_span(&lanes[lane]))
                lanes[kept++] = lanes[lane];
        num_lanes = kept;
    }
    if (num_lanes == 1)
        run_lane(&lanes[0]);
}

uint64_t kvio_cache_salt(const char *text, size_t length)
{
    uint64_t salt = XXH3_64bits(text, length) & INT64_MAX;
    return salt != 0 ? salt : 1;
}
