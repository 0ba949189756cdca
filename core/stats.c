/* Log-linear histogram: bucket = (power of two, one of 128 linear steps).
 * A bucket spans at most 1/128 of its lower bound, and values are reported
 * at the bucket's midpoint, so the relative error is at most 1/256. */
#include "kvio/stats.h"

#include "kvio/array.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kvio_hist {
    uint64_t count;
    double sum;
    uint64_t min, max;
    uint64_t buckets[KVIO_HIST_NUM_BUCKETS];
};

unsigned kvio_hist_bucket_of(uint64_t value)
{
    if (value < KVIO_HIST_SUB_BUCKETS)
        return (unsigned)value;
    unsigned msb = 63u - (unsigned)__builtin_clzll(value);
    unsigned shift = msb - 7u;
    return KVIO_HIST_SUB_BUCKETS * (shift + 1u) + (unsigned)(value >> shift) -
           KVIO_HIST_SUB_BUCKETS;
}

void kvio_hist_bucket_bounds(unsigned bucket, uint64_t *low_p, uint64_t *high_p)
{
    if (bucket < KVIO_HIST_SUB_BUCKETS) {
        *low_p = *high_p = bucket;
        return;
    }
    unsigned shift = bucket / KVIO_HIST_SUB_BUCKETS - 1u;
    uint64_t sub = bucket % KVIO_HIST_SUB_BUCKETS + KVIO_HIST_SUB_BUCKETS;
    *low_p = sub << shift;
    *high_p = *low_p + ((uint64_t)1 << shift) - 1u;
}

kvio_status_t kvio_hist_create(kvio_hist_t **hist_p)
{
    kvio_hist_t *hist = calloc(1, sizeof(*hist));
    if (hist == NULL)
        return KVIO_ERR_NOMEM;
    hist->min = UINT64_MAX;
    *hist_p = hist;
    return KVIO_OK;
}

void kvio_hist_destroy(kvio_hist_t *hist)
{
    free(hist);
}

void kvio_hist_record_n(kvio_hist_t *hist, uint64_t value, uint64_t count)
{
    if (count == 0)
        return;
    hist->buckets[kvio_hist_bucket_of(value)] += count;
    hist->count += count;
    hist->sum += (double)value * (double)count;
    if (value < hist->min)
        hist->min = value;
    if (value > hist->max)
        hist->max = value;
}

void kvio_hist_record(kvio_hist_t *hist, uint64_t value)
{
    kvio_hist_record_n(hist, value, 1);
}

void kvio_hist_merge(kvio_hist_t *dst, const kvio_hist_t *src)
{
    if (src->count == 0)
        return;
    for (unsigned i = 0; i < KVIO_HIST_NUM_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

uint64_t kvio_hist_count(const kvio_hist_t *hist)
{
    return hist->count;
}

double kvio_hist_mean(const kvio_hist_t *hist)
{
    return hist->count ? hist->sum / (double)hist->count : 0.0;
}

double kvio_hist_stddev(const kvio_hist_t *hist)
{
    if (hist->count < 2)
        return 0.0;
    /* Each bucket's values at its midpoint: exact below 128, within the
     * buckets' relative width above. */
    double mean = kvio_hist_mean(hist), squares = 0;
    for (unsigned b = 0; b < KVIO_HIST_NUM_BUCKETS; b++) {
        if (hist->buckets[b] == 0)
            continue;
        uint64_t low, high;
        kvio_hist_bucket_bounds(b, &low, &high);
        double middle = ((double)low + (double)high) / 2 - mean;
        squares += middle * middle * (double)hist->buckets[b];
    }
    return sqrt(squares / (double)hist->count);
}

uint64_t kvio_hist_min(const kvio_hist_t *hist)
{
    return hist->count ? hist->min : 0;
}

uint64_t kvio_hist_max(const kvio_hist_t *hist)
{
    return hist->max;
}

int kvio_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A double's bits as an unsigned key in the same order (negatives flipped
 * whole, positives with the sign bit set). */
static inline uint64_t sortable_bits(double value)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    return bits >> 63 ? ~bits : bits | (1ull << 63);
}

/* LSD radix sorts over 11-bit digits (2048 buckets: the scatter's
 * destinations stay in cache, where 16-bit digits' 65536 did not), the
 * counts of every digit taken in one pass and a digit all keys share
 * skipped: keys of width bits, in place, with one scratch array as large. */
#define RADIX_BITS 11
#define RADIX_BUCKETS (1u << RADIX_BITS)

#define DEFINE_RADIX_SORT(name, key_t, width)                                              \
    static kvio_status_t name(key_t *keys, size_t count, key_t *given_scratch)            \
    {                                                                                     \
        enum { DIGITS = (width + RADIX_BITS - 1) / RADIX_BITS };                          \
        key_t *scratch = given_scratch != NULL ? given_scratch                            \
                                               : kvio_large_alloc(count * sizeof(key_t)); \
        size_t(*counts)[RADIX_BUCKETS] = calloc(DIGITS, sizeof(*counts));                 \
        if (scratch == NULL || counts == NULL) {                                          \
            if (scratch != given_scratch)                                                 \
                free(scratch);                                                            \
            free(counts);                                                                 \
            return KVIO_ERR_NOMEM;                                                        \
        }                                                                                 \
        for (size_t i = 0; i < count; i++)                                                \
            for (int d = 0; d < DIGITS; d++)                                              \
                counts[d][(keys[i] >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;         \
        key_t *from = keys, *to = scratch;                                                \
        for (int d = 0; d < DIGITS; d++) {                                                \
            unsigned shift = (unsigned)(d * RADIX_BITS);                                  \
            if (counts[d][(keys[0] >> shift) & (RADIX_BUCKETS - 1)] == count)             \
                continue;                                                                 \
            size_t at = 0;                                                                \
            for (size_t b = 0; b < RADIX_BUCKETS; b++) {                                  \
                size_t here = counts[d][b];                                               \
                counts[d][b] = at;                                                        \
                at += here;                                                               \
            }                                                                             \
            for (size_t i = 0; i < count; i++)                                            \
                to[counts[d][(from[i] >> shift) & (RADIX_BUCKETS - 1)]++] = from[i];      \
            key_t *swap = from;                                                           \
            from = to;                                                                    \
            to = swap;                                                                    \
        }                                                                                 \
        if (from != keys)                                                                 \
            memcpy(keys, from, count * sizeof(key_t));                                    \
        if (scratch != given_scratch)                                                     \
            free(scratch);                                                                \
        free(counts);                                                                     \
        return KVIO_OK;                                                                   \
    }

DEFINE_RADIX_SORT(radix_sort_u64, uint64_t, 64)
DEFINE_RADIX_SORT(radix_sort_u32, uint32_t, 32)

kvio_status_t kvio_sort_doubles(double *values, size_t count)
{
    if (count < 4096) {
        qsort(values, count, sizeof(double), kvio_compare_double);
        return KVIO_OK;
    }
    /* The keys are made in place of the values. */
    uint64_t *keys = (uint64_t *)(void *)values;
    for (size_t i = 0; i < count; i++) {
        double value;
        memcpy(&value, &keys[i], sizeof(value));
        keys[i] = sortable_bits(value);
    }
    kvio_status_t status = radix_sort_u64(keys, count, NULL);
    for (size_t i = 0; i < count; i++) {
        uint64_t bits = keys[i] >> 63 ? keys[i] & ~(1ull << 63) : ~keys[i];
        memcpy(&keys[i], &bits, sizeof(bits));
    }
    return status;
}

/* A float's bits as an unsigned key in the same order. */
static inline uint32_t sortable_float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    return bits >> 31 ? ~bits : bits | (1u << 31);
}

kvio_status_t kvio_sort_floats(float *values, size_t count)
{
    return kvio_sort_floats_with(values, count, NULL);
}

kvio_status_t kvio_sort_floats_with(float *values, size_t count, float *scratch)
{
    if (count < 2)
        return KVIO_OK;
    uint32_t *keys = (uint32_t *)(void *)values;
    for (size_t i = 0; i < count; i++) {
        float value;
        memcpy(&value, &keys[i], sizeof(value));
        keys[i] = sortable_float_bits(value);
    }
    kvio_status_t status = radix_sort_u32(keys, count, (uint32_t *)(void *)scratch);
    for (size_t i = 0; i < count; i++) {
        uint32_t bits = keys[i] >> 31 ? keys[i] & ~(1u << 31) : ~keys[i];
        memcpy(&keys[i], &bits, sizeof(bits));
    }
    return status;
}

double kvio_quantile(double *values, size_t count, double q)
{
    if (count == 0)
        return NAN;
    qsort(values, count, sizeof(double), kvio_compare_double);
    size_t index = (size_t)ceil(q * (double)count);
    return values[index > 0 ? index - 1 : 0];
}

/* Student t quantile for a two-sided 95% interval with n-1 degrees of freedom. */
static double t95(size_t n)
{
    static const double table[] = {0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                   2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                   2.120, 2.110, 2.101, 2.093, 2.086};
    size_t df = n > 0 ? n - 1 : 0;
    return df < sizeof(table) / sizeof(table[0]) ? table[df] : 1.96;
}

/* The mean of count samples and the sum of their squared deviations. */
static double mean_and_squares(const double *samples, size_t count, double *squares_p)
{
    double sum = 0, squares = 0;
    for (size_t r = 0; r < count; r++)
        sum += samples[r];
    double mean = count > 0 ? sum / (double)count : 0;
    for (size_t r = 0; r < count; r++)
        squares += (samples[r] - mean) * (samples[r] - mean);
    *squares_p = squares;
    return mean;
}

void kvio_mean_ci95(const double *samples, long count, double *mean_p, double *half_p)
{
    double squares;
    *mean_p = mean_and_squares(samples, count > 0 ? (size_t)count : 0, &squares);
    *half_p = count > 1 ? t95((size_t)count) * sqrt(squares / (double)(count - 1)) /
                              sqrt((double)count)
                        : 0;
}

void kvio_mean_stddev(const double *samples, size_t count, double *mean_p, double *stddev_p)
{
    double squares;
    *mean_p = mean_and_squares(samples, count, &squares);
    *stddev_p = count > 0 ? sqrt(squares / (double)count) : 0;
}

double kvio_percentile_linear(const double *sorted, size_t count, double p)
{
    if (count == 0)
        return 0;
    double rank = p / 100.0 * (double)(count - 1);
    size_t low = (size_t)floor(rank);
    if (low + 1 >= count)
        return sorted[count - 1];
    return sorted[low] + (sorted[low + 1] - sorted[low]) * (rank - (double)low);
}

double kvio_hist_quantile(const kvio_hist_t *hist, double q)
{
    if (hist->count == 0)
        return 0.0;
    if (q <= 0)
        return (double)hist->min;
    if (q >= 1)
        return (double)hist->max;
    /* Rank of the wanted value, 1-based: ceil(q * count). */
    double exact_rank = q * (double)hist->count;
    uint64_t rank = (uint64_t)exact_rank;
    if ((double)rank < exact_rank)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < KVIO_HIST_NUM_BUCKETS; i++) {
        seen += hist->buckets[i];
        if (seen >= rank) {
            uint64_t low, high;
            kvio_hist_bucket_bounds(i, &low, &high);
            double value = ((double)low + (double)high) / 2.0;
            if (value < (double)hist->min)
                value = (double)hist->min;
            if (value > (double)hist->max)
                value = (double)hist->max;
            return value;
        }
    }
    return (double)hist->max;
}

void kvio_hist_summarize(const kvio_hist_t *hist, double scale,
                         kvio_hist_summary_t *summary_p)
{
    kvio_hist_summary_t summary = {
        .count = hist->count,
        .mean = kvio_hist_mean(hist) * scale,
        .min = (double)kvio_hist_min(hist) * scale,
        .max = (double)kvio_hist_max(hist) * scale,
        .p50 = kvio_hist_quantile(hist, 0.50) * scale,
        .p90 = kvio_hist_quantile(hist, 0.90) * scale,
        .p99 = kvio_hist_quantile(hist, 0.99) * scale,
        .p999 = kvio_hist_quantile(hist, 0.999) * scale,
    };
    *summary_p = summary;
}

void kvio_hist_octaves(const kvio_hist_t *hist, uint64_t counts_p[KVIO_HIST_OCTAVES])
{
    memset(counts_p, 0, KVIO_HIST_OCTAVES * sizeof(*counts_p));
    for (unsigned i = 0; i < KVIO_HIST_NUM_BUCKETS; i++) {
        if (hist->buckets[i] == 0)
            continue;
        uint64_t low, high;
        kvio_hist_bucket_bounds(i, &low, &high);
        counts_p[low < 2 ? 0 : 63 - __builtin_clzll(low)] += hist->buckets[i];
    }
}

/* Packed form: u64 count, f64 sum, u64 min, u64 max, u32 buckets, then
 * (u32 index, u64 count) per non-empty bucket; host byte order (ranks of
 * one run share an architecture). */
size_t kvio_hist_packed_size(const kvio_hist_t *hist)
{
    size_t used = 0;
    for (unsigned i = 0; i < KVIO_HIST_NUM_BUCKETS; i++)
        used += hist->buckets[i] != 0;
    return 8 + 8 + 8 + 8 + 4 + used * 12;
}

size_t kvio_hist_pack(const kvio_hist_t *hist, void *out)
{
    unsigned char *cursor = out;
    uint32_t used = 0;
    for (unsigned i = 0; i < KVIO_HIST_NUM_BUCKETS; i++)
        used += hist->buckets[i] != 0;
    memcpy(cursor, &hist->count, 8);
    memcpy(cursor + 8, &hist->sum, 8);
    memcpy(cursor + 16, &hist->min, 8);
    memcpy(cursor + 24, &hist->max, 8);
    memcpy(cursor + 32, &used, 4);
    cursor += 36;
    for (uint32_t i = 0; i < KVIO_HIST_NUM_BUCKETS; i++) {
        if (hist->buckets[i] == 0)
            continue;
        memcpy(cursor, &i, 4);
        memcpy(cursor + 4, &hist->buckets[i], 8);
        cursor += 12;
    }
    return (size_t)(cursor - (unsigned char *)out);
}

kvio_status_t kvio_hist_unpack_merge(kvio_hist_t *dst, const void *in, size_t length,
                                     size_t *used_p)
{
    const unsigned char *cursor = in;
    if (length < 36)
        return KVIO_ERR_PARSE;
    kvio_hist_t part;
    uint32_t used;
    memset(&part, 0, sizeof(part));
    memcpy(&part.count, cursor, 8);
    memcpy(&part.sum, cursor + 8, 8);
    memcpy(&part.min, cursor + 16, 8);
    memcpy(&part.max, cursor + 24, 8);
    memcpy(&used, cursor + 32, 4);
    if (used > KVIO_HIST_NUM_BUCKETS || length < 36 + (size_t)used * 12)
        return KVIO_ERR_PARSE;
    cursor += 36;
    for (uint32_t i = 0; i < used; i++, cursor += 12) {
        uint32_t index;
        uint64_t count;
        memcpy(&index, cursor, 4);
        memcpy(&count, cursor + 4, 8);
        if (index >= KVIO_HIST_NUM_BUCKETS)
            return KVIO_ERR_PARSE;
        part.buckets[index] += count;
    }
    kvio_hist_merge(dst, &part);
    *used_p = 36 + (size_t)used * 12;
    return KVIO_OK;
}
