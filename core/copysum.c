/* A copy that takes the copied bytes' XXH3-64 as it goes: eight 64-bit
 * lanes accumulate 64-byte stripes from the registers the copy loads (AVX2
 * where the CPU has it), so the checksum costs a copy that waits on memory
 * next to nothing. The digest equals XXH3_64bits over the bytes; the model
 * updates' sender sums its versions with it, the KV tiers and P/D staging
 * their blocks. */
#include "kvio/copysum.h"

#include <stdatomic.h>
#include <string.h>
/* Inline: the secret and primes below are xxhash's own (XXH3_kSecret). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- The sender's sum: XXH3-64 of a long input (more than 240 bytes),
 * as xxhash's specification (doc/xxhash_spec.md) and libxxhash compute it
 * with the default secret and seed 0: eight 64-bit lanes accumulate 64-byte
 * stripes, each with the secret at 8 bytes per stripe further; every 16
 * stripes (a block) the lanes are scrambled; the stripes accumulated are
 * the first (length - 1) / 64; then the last 64 bytes of the input, with
 * the secret at its end less 7; then the lanes are merged. ---- */

#define STRIPE 64u
#define STRIPES_PER_BLOCK 16u
#define SECRET_BYTES 192u
#define LONG_INPUT 240u /* XXH3_MIDSIZE_MAX: longer inputs take the stripes */

/* XXH3's default secret. */
static const unsigned char *const secret = XXH3_kSecret;
_Static_assert(sizeof(XXH3_kSecret) == SECRET_BYTES, "XXH3's default secret is 192 bytes");

/* XXH3 reads its input and secret as little-endian words. */
static uint64_t read64(const unsigned char *bytes)
{
    uint64_t value;
    memcpy(&value, bytes, sizeof(value));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    value = __builtin_bswap64(value);
#endif
    return value;
}

/* The 128-bit product of a and b, its halves xor'ed. */
static uint64_t multiply_fold(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    unsigned __int128 product = (unsigned __int128)a * b;
    return (uint64_t)product ^ (uint64_t)(product >> 64);
#else
    uint64_t a_low = (uint32_t)a, a_high = a >> 32, b_low = (uint32_t)b, b_high = b >> 32;
    uint64_t low_low = a_low * b_low, high_low = a_high * b_low, low_high = a_low * b_high;
    uint64_t high_high = a_high * b_high;
    uint64_t cross = (low_low >> 32) + (uint32_t)high_low + low_high;
    uint64_t upper = (high_low >> 32) + (cross >> 32) + high_high;
    uint64_t lower = (cross << 32) | (uint32_t)low_low;
    return lower ^ upper;
#endif
}

static void accumulate_stripe(uint64_t *acc, const unsigned char *input, const unsigned char *key)
{
    for (int lane = 0; lane < 8; lane++) {
        uint64_t value = read64(input + 8 * lane), keyed = value ^ read64(key + 8 * lane);
        acc[lane ^ 1] += value;
        acc[lane] += (uint64_t)(uint32_t)keyed * (keyed >> 32);
    }
}

static void scramble(uint64_t *acc)
{
    const unsigned char *key = secret + SECRET_BYTES - STRIPE;
    for (int lane = 0; lane < 8; lane++) {
        uint64_t value = acc[lane];
        value ^= value >> 47;
        value ^= read64(key + 8 * lane);
        acc[lane] = value * XXH_PRIME32_1;
    }
}

/* Accumulates stripes first .. first + count - 1 (at input), scrambling
 * after the last of each block. */
static void stripes_scalar(uint64_t *acc, const unsigned char *input, uint64_t first,
                           uint64_t count)
{
    for (uint64_t stripe = first; stripe < first + count; stripe++, input += STRIPE) {
        accumulate_stripe(acc, input, secret + 8 * (stripe % STRIPES_PER_BLOCK));
        if (stripe % STRIPES_PER_BLOCK == STRIPES_PER_BLOCK - 1)
            scramble(acc);
    }
}

#if defined(__x86_64__)
/* The same with AVX2 (four lanes per register, as XXH3_accumulate_512_avx2
 * and XXH3_scrambleAcc_avx2), each stripe copied to output (when not NULL)
 * from the registers the sum loads: one pass over memory for both.
 * Streaming stores where output is 32-byte aligned. */
__attribute__((target("avx2"))) static void stripes_avx2(uint64_t *acc, unsigned char *output,
                                                         const unsigned char *input,
                                                         uint64_t first, uint64_t count)
{
    const __m256i prime = _mm256_set1_epi32((int)XXH_PRIME32_1);
    const unsigned char *scramble_key = secret + SECRET_BYTES - STRIPE;
    __m256i low = _mm256_loadu_si256((const __m256i *)acc);
    __m256i high = _mm256_loadu_si256((const __m256i *)(acc + 4));
    bool streaming = output != NULL && ((uintptr_t)output & 31) == 0;
    for (uint64_t stripe = first; stripe < first + count; stripe++, input += STRIPE) {
        __m256i data_low = _mm256_loadu_si256((const __m256i *)input);
        __m256i data_high = _mm256_loadu_si256((const __m256i *)(input + 32));
        if (streaming) {
            _mm256_stream_si256((__m256i *)output, data_low);
            _mm256_stream_si256((__m256i *)(output + 32), data_high);
        } else if (output != NULL) {
            _mm256_storeu_si256((__m256i *)output, data_low);
            _mm256_storeu_si256((__m256i *)(output + 32), data_high);
        }
        if (output != NULL)
            output += STRIPE;
        const unsigned char *key = secret + 8 * (stripe % STRIPES_PER_BLOCK);
        __m256i keyed_low = _mm256_xor_si256(data_low, _mm256_loadu_si256((const __m256i *)key));
        __m256i keyed_high =
            _mm256_xor_si256(data_high, _mm256_loadu_si256((const __m256i *)(key + 32)));
        /* (u32)keyed * (keyed >> 32) per lane; each lane's data to its neighbour */
        __m256i product_low = _mm256_mul_epu32(
            keyed_low, _mm256_shuffle_epi32(keyed_low, _MM_SHUFFLE(0, 3, 0, 1)));
        __m256i product_high = _mm256_mul_epu32(
            keyed_high, _mm256_shuffle_epi32(keyed_high, _MM_SHUFFLE(0, 3, 0, 1)));
        low = _mm256_add_epi64(low, _mm256_add_epi64(product_low, _mm256_shuffle_epi32(
                                                                   data_low,
                                                                   _MM_SHUFFLE(1, 0, 3, 2))));
        high = _mm256_add_epi64(high, _mm256_add_epi64(product_high, _mm256_shuffle_epi32(
                                                                     data_high,
                                                                     _MM_SHUFFLE(1, 0, 3, 2))));
        if (stripe % STRIPES_PER_BLOCK == STRIPES_PER_BLOCK - 1) {
            __m256i *lanes[2] = {&low, &high};
            for (int half = 0; half < 2; half++) {
                __m256i value = *lanes[half];
                value = _mm256_xor_si256(value, _mm256_srli_epi64(value, 47));
                value = _mm256_xor_si256(
                    value, _mm256_loadu_si256((const __m256i *)(scramble_key + 32 * half)));
                __m256i product = _mm256_mul_epu32(value, prime);
                __m256i product_hi = _mm256_mul_epu32(
                    _mm256_shuffle_epi32(value, _MM_SHUFFLE(0, 3, 0, 1)), prime);
                *lanes[half] = _mm256_add_epi64(product, _mm256_slli_epi64(product_hi, 32));
            }
        }
    }
    _mm256_storeu_si256((__m256i *)acc, low);
    _mm256_storeu_si256((__m256i *)(acc + 4), high);
}
#endif

void kvio_copy_streaming(void *target, const void *source, uint64_t length)
{
#if defined(__x86_64__)
    unsigned char *to = target;
    const unsigned char *from = source;
    uint64_t head = (uint64_t)(-(uintptr_t)to & 63);
    if (head > length)
        head = length;
    memcpy(to, from, head);
    to += head;
    from += head;
    length -= head;
    for (; length >= 64; length -= 64, to += 64, from += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)from);
        __m128i b = _mm_loadu_si128((const __m128i *)(from + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(from + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(from + 48));
        _mm_stream_si128((__m128i *)to, a);
        _mm_stream_si128((__m128i *)(to + 16), b);
        _mm_stream_si128((__m128i *)(to + 32), c);
        _mm_stream_si128((__m128i *)(to + 48), d);
    }
    memcpy(to, from, length);
    _mm_sfence();
#else
    memcpy(target, source, length);
    atomic_thread_fence(memory_order_release);
#endif
}

void kvio_sum_start(kvio_sum_t *sum, const void *source, uint64_t length)
{
    static const uint64_t initial[8] = {XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2,
                                        XXH_PRIME64_3, XXH_PRIME64_4, XXH_PRIME32_2,
                                        XXH_PRIME64_5, XXH_PRIME32_1};
    memcpy(sum->acc, initial, sizeof(initial));
    sum->source = source;
    sum->length = length;
    sum->done = 0;
    sum->next_stripe = 0;
#if defined(__x86_64__)
    sum->vector = __builtin_cpu_supports("avx2");
#else
    sum->vector = false;
#endif
}

/* Piece of the scalar path's copy: small enough to be summed from cache. */
#define SCALAR_PIECE (16u * 1024)

/* Streaming stores before it are visible before any store after it. */
static inline void fence_stores(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#else
    atomic_thread_fence(memory_order_release);
#endif
}

/* Accumulates stripes [first, first + count) read from input, copying them
 * to output (may be NULL) on the way. */
static void pass_stripes(kvio_sum_t *sum, unsigned char *output,
                         const unsigned char *input, uint64_t first, uint64_t count)
{
#if defined(__x86_64__)
    if (sum->vector) {
        stripes_avx2(sum->acc, output, input, first, count);
        return;
    }
#endif
    for (uint64_t done = 0; done < count;) {
        uint64_t stripes = count - done < SCALAR_PIECE / STRIPE ? count - done
                                                                : SCALAR_PIECE / STRIPE;
        if (output != NULL)
            kvio_copy_streaming(output + done * STRIPE, input + done * STRIPE,
                                     stripes * STRIPE);
        stripes_scalar(sum->acc, input + done * STRIPE, first + done, stripes);
        done += stripes;
    }
}

void kvio_sum_pass(kvio_sum_t *sum, void *target, uint64_t length)
{
    uint64_t from = sum->done, to = from + length;
    if (to > sum->length)
        to = sum->length; /* never past the buffer */
    /* The stripes accumulated are the first (length - 1) / 64; short inputs
     * are summed whole at the digest. */
    uint64_t stripes = sum->length > LONG_INPUT ? (sum->length - 1) / STRIPE : 0;
    unsigned char *output = target;
    /* A stripe begun in the region before: summed from the source. */
    uint64_t first_here = (from + STRIPE - 1) / STRIPE;
    while (sum->next_stripe < first_here && sum->next_stripe < stripes &&
           (sum->next_stripe + 1) * STRIPE <= to) {
        pass_stripes(sum, NULL, sum->source + sum->next_stripe * STRIPE, sum->next_stripe, 1);
        sum->next_stripe++;
    }
    uint64_t copied = from;
    if (sum->next_stripe == first_here) {
        /* The bytes before the first whole stripe here, then whole stripes
         * copied and summed in one pass. */
        uint64_t start = first_here * STRIPE < to ? first_here * STRIPE : to;
        if (output != NULL && start > from)
            memcpy(output, sum->source + from, start - from);
        copied = start;
        uint64_t last = to / STRIPE < stripes ? to / STRIPE : stripes;
        if (last > first_here) {
            pass_stripes(sum, output != NULL ? output + (start - from) : NULL,
                         sum->source + first_here * STRIPE, first_here, last - first_here);
            sum->next_stripe = last;
            copied = last * STRIPE;
        }
    }
    if (output != NULL) {
        /* The rest (a stripe that ends past this region, the input's last
         * stripes, which the digest takes from the source). */
        if (to > copied)
            kvio_copy_streaming(output + (copied - from), sum->source + copied,
                                     to - copied);
        fence_stores();
    }
    sum->done = to;
}

void kvio_sum_fill(kvio_sum_t *sum, const void *input, uint64_t length)
{
    unsigned char *fill = (unsigned char *)sum->source; /* the receiver's own buffer */
    const unsigned char *in = input;
    uint64_t from = sum->done, to = from + length;
    if (to > sum->length)
        to = sum->length;
    uint64_t stripes = sum->length > LONG_INPUT ? (sum->length - 1) / STRIPE : 0;
    /* The bytes before the first whole stripe here complete a stripe begun
     * in the piece before: in place first, it is summed from the buffer. */
    uint64_t first_here = (from + STRIPE - 1) / STRIPE;
    uint64_t copied = first_here * STRIPE < to ? first_here * STRIPE : to;
    memcpy(fill + from, in, copied - from);
    while (sum->next_stripe < first_here && sum->next_stripe < stripes &&
           (sum->next_stripe + 1) * STRIPE <= to) {
        pass_stripes(sum, NULL, fill + sum->next_stripe * STRIPE, sum->next_stripe, 1);
        sum->next_stripe++;
    }
    /* Whole stripes: read from input once, summed and stored. */
    uint64_t last = to / STRIPE < stripes ? to / STRIPE : stripes;
    if (sum->next_stripe == first_here && last > first_here) {
        pass_stripes(sum, fill + copied, in + (copied - from), first_here, last - first_here);
        sum->next_stripe = last;
        copied = last * STRIPE;
    }
    /* The rest: summed by a later piece, or by the digest. */
    if (to > copied)
        kvio_copy_streaming(fill + copied, in + (copied - from), to - copied);
    fence_stores();
    sum->done = to;
}

uint64_t kvio_sum_digest(const kvio_sum_t *sum)
{
    if (sum->length <= LONG_INPUT)
        return XXH3_64bits(sum->source, (size_t)sum->length);
    uint64_t acc[8];
    memcpy(acc, sum->acc, sizeof(acc));
    /* The last stripe, overlapping the ones before. */
    accumulate_stripe(acc, sum->source + sum->length - STRIPE,
                      secret + SECRET_BYTES - STRIPE - 7);
    uint64_t result = sum->length * XXH_PRIME64_1;
    for (int pair = 0; pair < 4; pair++) {
        const unsigned char *key = secret + 11 + 16 * pair;
        result += multiply_fold(acc[2 * pair] ^ read64(key), acc[2 * pair + 1] ^ read64(key + 8));
    }
    result ^= result >> 37;
    result *= 0x165667919E3779F9ull;
    result ^= result >> 32;
    return result;
}

uint64_t kvio_copy_hashed(void *target, const void *source, size_t bytes)
{
    kvio_sum_t sum;
    kvio_sum_start(&sum, source, bytes);
    kvio_sum_pass(&sum, target, bytes);
    return kvio_sum_digest(&sum);
}
