/* Tests for the log-linear histogram: percentiles within the stated relative
 * error on known data, and merging equals recording everything in one. */
#include "kvio/hashset.h"
#include "kvio/rng.h"
#include "kvio/stats.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Exact quantile by the same definition: smallest v with rank ceil(q*n). */
static uint64_t exact_quantile(const uint64_t *sorted, size_t count, double q)
{
    size_t rank = (size_t)ceil(q * (double)count);
    if (rank < 1)
        rank = 1;
    return sorted[rank - 1];
}

Test(histogram, percentiles_within_stated_error, .timeout = 30)
{
    enum { COUNT = 200000 };
    uint64_t *values = malloc(COUNT * sizeof(uint64_t));
    kvio_hist_t *hist;
    cr_assert_eq(kvio_hist_create(&hist), KVIO_OK);
    kvio_rng_t rng;
    kvio_rng_seed(&rng, 5, 0, "hist");
    for (size_t i = 0; i < COUNT; i++) {
        /* Log-uniform over 1 ns .. 100 s exercises every bucket range. */
        values[i] = (uint64_t)exp(kvio_rng_uniform(&rng) * log(1e11));
        kvio_hist_record(hist, values[i]);
    }
    qsort(values, COUNT, sizeof(uint64_t), compare_u64);
    const double quantiles[] = {0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999};
    for (size_t i = 0; i < sizeof(quantiles) / sizeof(quantiles[0]); i++) {
        double exact = (double)exact_quantile(values, COUNT, quantiles[i]);
        double estimate = kvio_hist_quantile(hist, quantiles[i]);
        double error = fabs(estimate - exact) / fmax(exact, 1);
        cr_expect_leq(error, 1.0 / 256 + 1e-12, "q=%g: %f vs %f (error %f)", quantiles[i],
                      estimate, exact, error);
    }
    cr_assert_eq(kvio_hist_count(hist), COUNT);
    cr_assert_eq(kvio_hist_min(hist), values[0]);
    cr_assert_eq(kvio_hist_max(hist), values[COUNT - 1]);
    double sum = 0;
    for (size_t i = 0; i < COUNT; i++)
        sum += (double)values[i];
    cr_assert_float_eq(kvio_hist_mean(hist), sum / COUNT, 1e-6 * sum / COUNT);
    kvio_hist_destroy(hist);
    free(values);
}

Test(histogram, small_values_are_exact, .timeout = 10)
{
    kvio_hist_t *hist;
    cr_assert_eq(kvio_hist_create(&hist), KVIO_OK);
    for (uint64_t v = 1; v <= 100; v++)
        kvio_hist_record(hist, v);
    cr_assert_float_eq(kvio_hist_quantile(hist, 0.5), 50, 1e-9);
    cr_assert_float_eq(kvio_hist_quantile(hist, 0.99), 99, 1e-9);
    cr_assert_float_eq(kvio_hist_quantile(hist, 1.0), 100, 1e-9);
    kvio_hist_destroy(hist);
}

Test(histogram, buckets_bound_the_relative_width, .timeout = 10)
{
    for (unsigned bucket = 0; bucket < KVIO_HIST_NUM_BUCKETS; bucket += 7) {
        uint64_t low, high;
        kvio_hist_bucket_bounds(bucket, &low, &high);
        cr_assert_eq(kvio_hist_bucket_of(low), bucket);
        cr_assert_eq(kvio_hist_bucket_of(high), bucket);
        if (low >= 128)
            cr_assert_leq((double)(high - low + 1) / (double)low, 1.0 / 128 + 1e-12);
    }
    cr_assert_lt(kvio_hist_bucket_of(UINT64_MAX), KVIO_HIST_NUM_BUCKETS);
}

Test(histogram, merging_equals_recording_in_one, .timeout = 10)
{
    kvio_hist_t *parts[3], *all, *merged;
    cr_assert_eq(kvio_hist_create(&all), KVIO_OK);
    cr_assert_eq(kvio_hist_create(&merged), KVIO_OK);
    kvio_rng_t rng;
    kvio_rng_seed(&rng, 11, 0, "merge");
    for (int p = 0; p < 3; p++) {
        cr_assert_eq(kvio_hist_create(&parts[p]), KVIO_OK);
        for (int i = 0; i < 10000; i++) {
            uint64_t value = kvio_rng_below(&rng, 1000000u * (uint64_t)(p + 1));
            kvio_hist_record(parts[p], value);
            kvio_hist_record(all, value);
        }
        kvio_hist_merge(merged, parts[p]);
    }
    cr_assert_eq(kvio_hist_count(merged), kvio_hist_count(all));
    cr_assert_eq(kvio_hist_min(merged), kvio_hist_min(all));
    cr_assert_eq(kvio_hist_max(merged), kvio_hist_max(all));
    cr_assert_float_eq(kvio_hist_mean(merged), kvio_hist_mean(all), 1e-9);
    for (double q = 0.01; q < 1; q += 0.01)
        cr_assert_eq(kvio_hist_quantile(merged, q), kvio_hist_quantile(all, q));
    for (int p = 0; p < 3; p++)
        kvio_hist_destroy(parts[p]);
    kvio_hist_destroy(all);
    kvio_hist_destroy(merged);
}

Test(histogram, empty_histogram_reports_zero, .timeout = 10)
{
    kvio_hist_t *hist;
    cr_assert_eq(kvio_hist_create(&hist), KVIO_OK);
    kvio_hist_summary_t summary;
    kvio_hist_summarize(hist, 1e-6, &summary);
    cr_assert_eq(summary.count, 0);
    cr_assert_eq(summary.p99, 0);
    cr_assert_eq(summary.mean, 0);
    kvio_hist_destroy(hist);
}

/* ---------- kvio_map_t (core/hashset.c) ---------- */

/* Random sets, overwrites and deletions over a small key space (so chains
 * collide, wrap around the table's end and shift back on deletion), checked
 * after every step against a plain array of every key's value; the map
 * grows from empty. */
Test(map, matches_a_plain_array_through_sets_and_deletions, .timeout = 20)
{
    enum { KEYS = 300, STEPS = 40000 };
    uint32_t expected[KEYS] = {0};
    kvio_map_t map = {0};
    cr_assert_eq(kvio_map_get(&map, 5), 0, "an empty map holds nothing");
    uint64_t state = 12345;
    size_t held = 0;
    for (int step = 0; step < STEPS; step++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        size_t index = (size_t)(state >> 33) % KEYS;
        /* keys spread over the whole 64-bit range, one of them 0 */
        uint64_t key = index == 0 ? 0 : index * 0x9E3779B97F4A7C15ull;
        uint32_t value = (state >> 20) % 3 == 0 ? 0 : (uint32_t)(state >> 40) % 1000 + 1;
        if (expected[index] == 0 && value != 0)
            held++;
        else if (expected[index] != 0 && value == 0)
            held--;
        expected[index] = value;
        cr_assert_eq(kvio_map_set(&map, key, value), KVIO_OK);
        cr_assert_eq(map.count, held, "step %d", step);
        cr_assert_leq(2 * map.count, map.mask + 1, "more than half full");
        if (step % 97 == 0 || step == STEPS - 1)
            for (size_t k = 0; k < KEYS; k++)
                cr_assert_eq(kvio_map_get(&map, k == 0 ? 0 : k * 0x9E3779B97F4A7C15ull),
                             expected[k], "step %d, key %zu", step, k);
    }
    kvio_map_fini(&map);
    cr_assert_null(map.values);
}

Test(map, a_reserved_map_does_not_grow, .timeout = 5)
{
    kvio_map_t map = {0};
    cr_assert_eq(kvio_map_reserve(&map, 100), KVIO_OK);
    uint32_t *values = map.values;
    for (uint64_t key = 1; key <= 100; key++)
        cr_assert_eq(kvio_map_set(&map, key << 40, (uint32_t)key), KVIO_OK);
    cr_assert_eq(map.values, values, "it reallocated within its reservation");
    for (uint64_t key = 1; key <= 100; key++)
        cr_assert_eq(kvio_map_get(&map, key << 40), key);
    kvio_map_fini(&map);
}

/* numpy's answers: np.percentile([1, 2, 3, 4], [0, 50, 99.9, 100]) is
 * [1, 2.5, 3.997, 4]; np.std([1, 2, 3, 4]) is 1.118033988749895 (the
 * population's); one value is every percentile; none gives 0 (vLLM's
 * `np.percentile(x or 0, p)`). */
Test(stats, percentiles_and_std_are_numpys, .timeout = 10)
{
    const double values[] = {1, 2, 3, 4};
    cr_expect_float_eq(kvio_percentile_linear(values, 4, 0), 1, 1e-12);
    cr_expect_float_eq(kvio_percentile_linear(values, 4, 50), 2.5, 1e-12);
    cr_expect_float_eq(kvio_percentile_linear(values, 4, 99.9), 3.997, 1e-12);
    cr_expect_float_eq(kvio_percentile_linear(values, 4, 100), 4, 1e-12);
    cr_expect_float_eq(kvio_percentile_linear((const double[]){5}, 1, 99), 5, 1e-12);
    cr_expect_float_eq(kvio_percentile_linear(values, 0, 99), 0, 1e-12);
    double mean, stddev;
    kvio_mean_stddev(values, 4, &mean, &stddev);
    cr_expect_float_eq(mean, 2.5, 1e-12);
    cr_expect_float_eq(stddev, 1.118033988749895, 1e-12);
}

/* kvio_sort_doubles on values gives what qsort gives on expected (a copy);
 * frees both. */
static void expect_sorted_as_qsort_sorts(double *values, double *expected, size_t count)
{
    qsort(expected, count, sizeof(double), kvio_compare_double);
    cr_assert_eq(kvio_sort_doubles(values, count), KVIO_OK);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(values[i], expected[i], "index %zu: %g, not %g", i, values[i], expected[i]);
    free(values);
    free(expected);
}

/* Values that share whole 16-bit digits (single-precision gaps widened to
 * double: their low bits are zero; one sign and exponent) skip those
 * passes and still come out sorted, in the caller's array. */
Test(stats, doubles_sharing_digits_sort_as_qsort_sorts_them, .timeout = 10)
{
    size_t count = 40000;
    double *values = malloc(count * sizeof(double)), *expected = malloc(count * sizeof(double));
    cr_assert(values != NULL && expected != NULL);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < count; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        values[i] = (double)(float)(1.0 + (double)(state % 1000) / 1024.0);
        expected[i] = values[i];
    }
    expect_sorted_as_qsort_sorts(values, expected, count);
}

/* The radix sort gives qsort's order, negatives, zeros and repeats too. */
Test(stats, many_doubles_sort_as_qsort_sorts_them, .timeout = 10)
{
    size_t count = 50000;
    double *values = malloc(count * sizeof(double)), *expected = malloc(count * sizeof(double));
    uint64_t state = 88172645463325252ull;
    for (size_t i = 0; i < count; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        double magnitude = (double)(state % 1000003) * (i % 3 == 0 ? 1e-9 : 1e3);
        values[i] = i % 5 == 0 ? -magnitude : i % 11 == 0 ? 0.0 : magnitude;
        expected[i] = values[i];
    }
    expect_sorted_as_qsort_sorts(values, expected, count);
}

static int compare_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* kvio_sort_floats (the gaps between tokens, sorted as the floats they are
 * kept as) gives qsort's order: negatives, zeros, repeats, values that
 * share digits and a count too small for more than one pass; with its own
 * scratch or the caller's. */
Test(stats, floats_sort_as_qsort_sorts_them, .timeout = 10)
{
    static const size_t counts[] = {1, 2, 7, 4095, 70000};
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        float *values = malloc(count * sizeof(float)), *expected = malloc(count * sizeof(float));
        cr_assert(values != NULL && expected != NULL);
        for (size_t i = 0; i < count; i++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            float magnitude = (float)(state % 100003) * (i % 3 == 0 ? 1e-6f : 1e2f);
            values[i] = i % 5 == 0 ? -magnitude : i % 11 == 0 ? 0.0f : magnitude;
            if (c == 3) /* one exponent and sign: the high digits all shared */
                values[i] = 1.0f + (float)(state % 1000) / 1024.0f;
            expected[i] = values[i];
        }
        qsort(expected, count, sizeof(float), compare_float);
        /* Every other count with the caller's scratch. */
        float *scratch = c % 2 == 1 ? malloc(count * sizeof(float)) : NULL;
        cr_assert_eq(kvio_sort_floats_with(values, count, scratch), KVIO_OK);
        free(scratch);
        for (size_t i = 0; i < count; i++)
            cr_assert_eq(values[i], expected[i], "count %zu, index %zu: %g, not %g", count, i,
                         (double)values[i], (double)expected[i]);
        free(values);
        free(expected);
    }
}
