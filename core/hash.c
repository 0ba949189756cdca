/* Block hashes: XXH3-128 over the parent's canonical bytes and a payload
 * laid out little-endian, one function per kind of content. */
#include "kvio/hash.h"

#include <string.h>

#define XXH_STATIC_LINKING_ONLY
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

static void put_parent(uint8_t *out, const kvio_hash_t *parent)
{
    if (parent == NULL)
        memset(out, 0, 16);
    else
        kvio_hash_to_bytes(*parent, out);
}

static kvio_hash_t from_xxh(XXH128_hash_t value)
{
    return (kvio_hash_t){.low = value.low64, .high = value.high64};
}

void kvio_hash_to_bytes(kvio_hash_t hash, uint8_t bytes_p[16])
{
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, (XXH128_hash_t){hash.low, hash.high});
    memcpy(bytes_p, canonical.digest, 16);
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

kvio_hash_t kvio_hash_runs(const kvio_hash_t *parent, const kvio_hash_run_t *runs,
                           size_t num_runs)
{
    uint8_t small[16 + 16 * 8];
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

kvio_hash_t kvio_hash_trace_block(const kvio_hash_t *parent, uint64_t trace_hash_id,
                                  uint32_t index_in_trace_block)
{
    uint8_t bytes[28];
    put_parent(bytes, parent);
    put_u64(bytes + 16, trace_hash_id);
    put_u32(bytes + 24, index_in_trace_block);
    return from_xxh(XXH3_128bits(bytes, sizeof(bytes)));
}
