/* A model's weights as bytes: filled from a seed (the trainer and every
 * server start alike), changed for each version (one word in every 4 KiB
 * page, so a stale page cannot pass), and the XXH3-64 checksum every
 * version carries. */
#include "kvio/model.h"

#include <string.h>
#include <xxhash.h>

#include "kvio/rng.h"

#if defined(__x86_64__) || defined(__i386__)
/* libxxhash's x86 dispatcher (xxh_x86dispatch.h; Debian's build has it):
 * AVX2 or AVX-512 chosen at run time. Weak: a libxxhash without it leaves
 * it NULL and the plain function serves. */
XXH64_hash_t XXH3_64bits_dispatch(const void *input, size_t length) __attribute__((weak));
#define HAVE_DISPATCH(function) ((function) != NULL)
#else
#define HAVE_DISPATCH(function) 0
#define XXH3_64bits_dispatch XXH3_64bits
#endif

void kvio_weights_fill(void *buffer, uint64_t bytes, uint64_t seed)
{
    kvio_rng_t rng;
    kvio_rng_seed(&rng, seed, 0, "weights");
    uint64_t *words = buffer;
    for (uint64_t i = 0; i < bytes / 8; i++)
        words[i] = kvio_rng_next(&rng);
    for (uint64_t i = bytes / 8 * 8; i < bytes; i++)
        ((unsigned char *)buffer)[i] = (unsigned char)kvio_rng_next(&rng);
}

void kvio_weights_fill_as(void *buffer, uint64_t bytes, uint64_t seed, const kvio_data_t *data)
{
    if (data == NULL || data->kind == KVIO_DATA_RANDOM)
        kvio_weights_fill(buffer, bytes, seed);
    else
        kvio_data_fill(data, kvio_data_key(seed, 0x77656967687473ull /* "weights" */, 0), 0,
                       buffer, (size_t)bytes);
}

void kvio_weights_mutate(void *buffer, uint64_t bytes, uint64_t version)
{
    /* One word per 4 KiB page, at a page offset that moves with the version. */
    uint64_t word_offset = (version * 8 * 13) % 4096;
    for (uint64_t page = 0; page < bytes; page += 4096) {
        uint64_t at = page + word_offset;
        if (at + 8 > bytes)
            at = page;
        if (at + 8 > bytes)
            break;
        uint64_t value;
        memcpy(&value, (char *)buffer + at, 8);
        value ^= 0x9e3779b97f4a7c15ull * (version | 1) + page;
        memcpy((char *)buffer + at, &value, 8);
    }
    ((unsigned char *)buffer)[0] ^= (unsigned char)(version | 1);
}

uint64_t kvio_weights_checksum(const void *buffer, uint64_t bytes)
{
    if (HAVE_DISPATCH(XXH3_64bits_dispatch))
        return XXH3_64bits_dispatch(buffer, (size_t)bytes);
    return XXH3_64bits(buffer, (size_t)bytes);
}

