/* Statistics: a log-linear histogram of non-negative integer values
 * (latencies in ns, token counts) with a relative error of at most 1/256
 * (0.39%) on any reported value, mergeable across threads and ranks; plus
 * exact count, sum, min and max. */
#ifndef KVIO_STATS_H
#define KVIO_STATS_H

#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

/* 128 linear sub-buckets per power of two; values below 128 are exact. */
#define KVIO_HIST_SUB_BUCKETS 128
#define KVIO_HIST_NUM_BUCKETS (KVIO_HIST_SUB_BUCKETS * 58)

typedef struct kvio_hist kvio_hist_t;

/* A histogram's summary in the units it recorded. */
typedef struct kvio_hist_summary {
    uint64_t count;
    double mean;
    double min, max;
    double p50, p90, p99, p999;
} kvio_hist_summary_t;

/* Creates an empty histogram; the caller owns it (kvio_hist_destroy). */
kvio_status_t kvio_hist_create(kvio_hist_t **hist_p);
void kvio_hist_destroy(kvio_hist_t *hist);

/* Records a value (count times for kvio_hist_record_n). */
void kvio_hist_record(kvio_hist_t *hist, uint64_t value);
void kvio_hist_record_n(kvio_hist_t *hist, uint64_t value, uint64_t count);

/* Adds every value recorded in src to dst. */
void kvio_hist_merge(kvio_hist_t *dst, const kvio_hist_t *src);

uint64_t kvio_hist_count(const kvio_hist_t *hist);
double kvio_hist_mean(const kvio_hist_t *hist);
/* Standard deviation (population), from bucket midpoints. */
double kvio_hist_stddev(const kvio_hist_t *hist);
uint64_t kvio_hist_min(const kvio_hist_t *hist);
uint64_t kvio_hist_max(const kvio_hist_t *hist);

/* The value at quantile q in [0, 1]: the smallest recorded value v such that
 * at least q of the values are <= v, within the stated relative error, and
 * clamped to [min, max]. 0 for an empty histogram. */
double kvio_hist_quantile(const kvio_hist_t *hist, double q);

/* qsort's comparison for doubles, ascending. */
int kvio_compare_double(const void *a, const void *b);

/* Sorts count doubles (no NaN) ascending: a radix sort for many, qsort for
 * few. KVIO_ERR_NOMEM (values unsorted) when its scratch cannot be had. */
kvio_status_t kvio_sort_doubles(double *values, size_t count);

/* Sorts count floats (no NaN) ascending, a radix sort (4 bytes a key: half
 * a double's traffic). KVIO_ERR_NOMEM (values unsorted) when its scratch
 * cannot be had. */
kvio_status_t kvio_sort_floats(float *values, size_t count);
/* The same with the caller's scratch (room for count floats; NULL: its
 * own), so that one allocation can hold both. */
kvio_status_t kvio_sort_floats_with(float *values, size_t count, float *scratch);

/* The exact q quantile of count values, nearest rank (the smallest value
 * with at least q of them at or below it); sorts values in place. NAN when
 * count is 0. */
double kvio_quantile(double *values, size_t count, double q);

/* The mean of count samples and the half-width of its 95 % confidence
 * interval (Student's t; 0 for a single sample). */
void kvio_mean_ci95(const double *samples, long count, double *mean_p, double *half_p);

/* The mean and the population standard deviation (numpy's std) of count
 * samples; both 0 for none. */
void kvio_mean_stddev(const double *samples, size_t count, double *mean_p, double *stddev_p);

/* numpy.percentile's default (linear interpolation) at p in [0, 100] of
 * count sorted values; 0 for none, as vLLM's `np.percentile(x or 0, p)`. */
double kvio_percentile_linear(const double *sorted, size_t count, double p);

/* The values recorded in each octave: counts_p[k] those in [2^k, 2^(k+1))
 * (counts_p[0] holds 0 and 1 too), exactly: an octave's edges are bucket
 * edges. */
#define KVIO_HIST_OCTAVES 64
void kvio_hist_octaves(const kvio_hist_t *hist, uint64_t counts_p[KVIO_HIST_OCTAVES]);

/* Fills a summary; scale multiplies every value (1e-6 turns ns into ms). */
void kvio_hist_summarize(const kvio_hist_t *hist, double scale,
                         kvio_hist_summary_t *summary_p);

/* Serialises a histogram (sparse: only non-empty buckets) for sending
 * between ranks. kvio_hist_pack writes at most kvio_hist_packed_size bytes
 * into out and returns how many it wrote. */
size_t kvio_hist_packed_size(const kvio_hist_t *hist);
size_t kvio_hist_pack(const kvio_hist_t *hist, void *out);

/* Adds a packed histogram to dst; *used_p receives the bytes consumed.
 * KVIO_ERR_PARSE when the bytes are not a packed histogram. */
kvio_status_t kvio_hist_unpack_merge(kvio_hist_t *dst, const void *in, size_t length,
                                     size_t *used_p);

/* The bucket index of a value and the bounds of a bucket (for tests). */
unsigned kvio_hist_bucket_of(uint64_t value);
void kvio_hist_bucket_bounds(unsigned bucket, uint64_t *low_p, uint64_t *high_p);

#endif
