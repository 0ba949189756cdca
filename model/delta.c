/* Delta updates (weight_sync.delta in emulate mode): which elements a
 * version changes, the trainer's writes to them, the sender's encoding of a
 * bucket's changes and the receiver's application of it.
 *
 * The changed elements: the weights' elements are cut into strata of
 * 1/fraction elements (stratum k is [ceil(k/f), ceil((k+1)/f)), with 1/f in
 * fixed point), and one element of each, chosen by a hash of the version
 * and k, changes. So a version changes fraction of the elements, spread
 * over the whole weights as an optimizer step's nonzero updates are, and any
 * range of them (a bucket) finds its changes without walking the ones
 * before it.
 *
 * Encodings of one bucket's changes (indices are the element's within the
 * bucket, in increasing order):
 * - index_value: a record per changed element, its 4-byte index then its
 *   value (element bytes): fraction * (element + 4) bytes per element;
 * - bitmap: one bit per element of the bucket (in 8-byte words), then the
 *   changed values in order: 1/8 + fraction * element bytes per element. */
#include "kvio/model.h"

#include <math.h>
#include <string.h>

/* splitmix64's finalizer: the element chosen in a stratum, and the bits a
 * changed element is XORed with. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Elements per stratum, 1 / fraction, in 32.32 fixed point: strata are cut
 * in integers, the same wherever a walk starts. */
static uint64_t fixed_stride(double fraction)
{
    double stride = ldexp(1.0, 32) / fraction;
    return stride < 0x1p63 ? (uint64_t)llround(stride) : 1ull << 63;
}

__extension__ typedef unsigned __int128 wide_t;

/* Stratum k's first element: ceil(k * stride), at most the weights' end. */
static uint64_t stratum_start(const kvio_delta_walk_t *walk, uint64_t k)
{
    wide_t at = ((wide_t)k * walk->stride + 0xffffffffu) >> 32;
    return at < walk->elements ? (uint64_t)at : walk->elements;
}

static void walk_start(kvio_delta_walk_t *walk, const kvio_delta_t *delta,
                       uint64_t version, uint64_t elements, uint64_t first)
{
    *walk = (kvio_delta_walk_t){.stride = fixed_stride(delta->fraction),
                                     .seed = mix(version), .elements = elements,
                                     .first = first};
    /* The stratum holding first (the estimate is off by rounding at most). */
    uint64_t k = (uint64_t)floor((double)first * delta->fraction);
    while (k > 0 && stratum_start(walk, k) > first)
        k--;
    while (stratum_start(walk, k + 1) <= first && stratum_start(walk, k + 1) < elements)
        k++;
    walk->stratum = k;
    walk->lo = stratum_start(walk, k);
}

/* The next changed element of the walk below end, in *element_p; false when
 * there is none. */
static inline __attribute__((always_inline)) bool walk_next(kvio_delta_walk_t *walk,
                                                         uint64_t end, uint64_t *element_p)
{
    for (;;) {
        uint64_t lo = walk->lo, hi = stratum_start(walk, walk->stratum + 1);
        if (lo >= end || lo >= hi)
            return false;
        uint64_t width = hi - lo, h = mix(walk->seed ^ walk->stratum);
        uint64_t pick = lo + (width < (1ull << 32) ? ((h >> 32) * width) >> 32 : h % width);
        if (pick >= end)
            return false; /* the stratum's change lies in the next range */
        walk->stratum++;
        walk->lo = hi;
        if (pick >= walk->first) {
            *element_p = pick;
            return true;
        }
    }
}

/* Copies one element: constant-size copies the compiler inlines. */
static inline void copy_element(void *target, const void *source, uint32_t element)
{
    switch (element) {
    case 1:
        memcpy(target, source, 1);
        break;
    case 2:
        memcpy(target, source, 2);
        break;
    case 4:
        memcpy(target, source, 4);
        break;
    default:
        memcpy(target, source, 8);
        break;
    }
}

/* XORs the element at p with nonzero bits (its first byte's are odd): it
 * changes. The element's bytes are the low ones of a little-endian word. */
static void change_element(unsigned char *p, uint32_t element, uint64_t bits)
{
    unsigned char word[8];
    copy_element(word, p, element);
    for (uint32_t i = 0; i < element; i++)
        word[i] ^= (unsigned char)(bits >> (8 * i)) | (i == 0);
    copy_element(p, word, element);
}

bool kvio_delta_supported(uint32_t element)
{
    return element == 1 || element == 2 || element == 4 || element == 8;
}

void kvio_delta_mutate(const kvio_delta_t *delta, void *weights, uint64_t bytes,
                            uint64_t version)
{
    uint64_t elements = bytes / delta->element, at;
    kvio_delta_walk_t walk;
    walk_start(&walk, delta, version, elements, 0);
    while (walk_next(&walk, elements, &at))
        change_element((unsigned char *)weights + at * delta->element, delta->element,
                       mix(walk.seed + at));
}

static uint64_t bitmap_bytes(uint64_t elements)
{
    return (elements + 63) / 64 * 8;
}

uint64_t kvio_delta_bound(const kvio_delta_t *delta, uint64_t bytes)
{
    uint64_t elements = bytes / delta->element;
    /* Strata are at least floor(1/fraction) elements wide: a range meets at
     * most elements / that + 2 of them. */
    uint64_t narrowest = fixed_stride(delta->fraction) >> 32;
    uint64_t changes = elements / (narrowest >= 1 ? narrowest : 1) + 2;
    if (changes > elements)
        changes = elements;
    return delta->encoding == KVIO_DELTA_BITMAP
               ? bitmap_bytes(elements) + changes * delta->element
               : changes * (4 + (uint64_t)delta->element);
}

uint64_t kvio_delta_slot_bytes(const kvio_delta_t *delta, uint64_t bytes)
{
    if (delta == NULL || delta->fraction <= 0 || delta->element == 0)
        return bytes;
    uint64_t bound = kvio_delta_bound(delta, bytes);
    return bound > bytes ? bound : bytes;
}

void kvio_delta_encode_begin(kvio_delta_encoder_t *encoder,
                                  const kvio_delta_t *delta, uint64_t version,
                                  const void *weights, uint64_t weights_bytes, uint64_t offset,
                                  uint64_t bytes, void *out)
{
    uint32_t element = delta->element;
    uint64_t first = offset / element;
    *encoder = (kvio_delta_encoder_t){.delta = delta, .source = weights, .out = out,
                                           .write = out, .first = first, .offset = offset,
                                           .end = (offset + bytes) / element};
    walk_start(&encoder->walk, delta, version, weights_bytes / element, first);
    if (delta->encoding == KVIO_DELTA_BITMAP) {
        uint64_t map = bitmap_bytes(encoder->end - first);
        memset(out, 0, map);
        encoder->write += map;
    }
}

void kvio_delta_encode_to(kvio_delta_encoder_t *encoder, uint64_t to)
{
    uint32_t element = encoder->delta->element;
    uint64_t end = (encoder->offset + to) / element, at, first = encoder->first;
    if (end > encoder->end)
        end = encoder->end;
    unsigned char *write = encoder->write;
    const unsigned char *source = encoder->source;
    uint64_t entries = encoder->entries;
    /* A local walk: stores through write may alias anything, and would
     * send the walk's fields to memory and back at every change. */
    kvio_delta_walk_t walk = encoder->walk;
    if (encoder->delta->encoding == KVIO_DELTA_BITMAP) {
        uint64_t *bitmap = encoder->out;
        while (walk_next(&walk, end, &at)) {
            uint64_t index = at - first;
            bitmap[index / 64] |= 1ull << (index % 64);
            copy_element(write, source + at * element, element);
            write += element;
            entries++;
        }
    } else {
        while (walk_next(&walk, end, &at)) {
            uint32_t index = (uint32_t)(at - first);
            memcpy(write, &index, 4);
            copy_element(write + 4, source + at * element, element);
            write += 4 + element;
            entries++;
        }
    }
    encoder->walk = walk;
    encoder->write = write;
    encoder->entries = entries;
}

uint64_t kvio_delta_encode_end(const kvio_delta_encoder_t *encoder,
                                    uint64_t *entries_p)
{
    *entries_p = encoder->entries;
    return (uint64_t)(encoder->write - (unsigned char *)encoder->out);
}

uint64_t kvio_delta_encode(const kvio_delta_t *delta, uint64_t version,
                                const void *weights, uint64_t weights_bytes, uint64_t offset,
                                uint64_t bytes, void *out, uint64_t *entries_p)
{
    kvio_delta_encoder_t encoder;
    kvio_delta_encode_begin(&encoder, delta, version, weights, weights_bytes, offset, bytes,
                                 out);
    kvio_delta_encode_to(&encoder, bytes);
    return kvio_delta_encode_end(&encoder, entries_p);
}

bool kvio_delta_apply(const kvio_delta_t *delta, const void *encoding,
                           uint64_t entries, uint64_t bucket_bytes, void *bucket, uint64_t from,
                           uint64_t to, uint64_t *cursor_p)
{
    uint32_t element = delta->element;
    unsigned char *target = bucket;
    uint64_t cursor = *cursor_p;
    bool ok = true;
    if (delta->encoding == KVIO_DELTA_BITMAP) {
        const uint64_t *bitmap = encoding;
        const unsigned char *values =
            (const unsigned char *)encoding + bitmap_bytes(bucket_bytes / element);
        uint64_t first = from / element, end = to / element;
        for (uint64_t word = first / 64; ok && word * 64 < end; word++) {
            uint64_t bits = bitmap[word];
            if (word == first / 64)
                bits &= ~0ull << (first % 64);
            if ((word + 1) * 64 > end && end % 64 != 0)
                bits &= ~(~0ull << (end % 64));
            while (bits != 0 && (ok = cursor < entries)) {
                uint64_t index = word * 64 + (uint64_t)__builtin_ctzll(bits);
                copy_element(target + index * element, values + cursor * element, element);
                cursor++;
                bits &= bits - 1;
            }
        }
    } else {
        const unsigned char *record = (const unsigned char *)encoding + cursor * (4 + element);
        for (; cursor < entries; cursor++, record += 4 + element) {
            uint32_t index;
            memcpy(&index, record, 4);
            uint64_t at = (uint64_t)index * element;
            if (at + element > bucket_bytes || at < from) {
                ok = false; /* past the bucket, or out of order */
                break;
            }
            if (at >= to)
                break; /* the next piece's */
            copy_element(target + at, record + 4, element);
        }
    }
    *cursor_p = cursor;
    return ok;
}
