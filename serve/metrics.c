/* The serving figures of a result (kvio/result.h): latencies, throughputs,
 * goodput, the prefix cache, preemptions, KV usage, accelerator
 * utilisation, what updates did to the engine, the inference loss by
 * version, and the tiers' traffic; and the measured requests kept on rank
 * 0, from which the latencies are computed as vLLM computes them. */
#include "serve/serve_int.h"

#include "kvio/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/array.h"
#include "kvio/stats.h"

/* The latency figures of one histogram (ns), for when no samples are kept:
 * within its relative error (1/256). */
static void set_latency(kvio_result_t *result, kvio_figure_t mean, const kvio_hist_t *hist)
{
    /* The figures of one latency are declared in this order (figures.def's
     * KVIO_LATENCY_FIGURES): mean, p50, p90, p99, p99.9, std, max, count. */
    kvio_result_set(result, mean, kvio_hist_mean(hist) / 1e6);
    kvio_result_set(result, mean + 1, kvio_hist_quantile(hist, 0.5) / 1e6);
    kvio_result_set(result, mean + 2, kvio_hist_quantile(hist, 0.9) / 1e6);
    kvio_result_set(result, mean + 3, kvio_hist_quantile(hist, 0.99) / 1e6);
    kvio_result_set(result, mean + 4, kvio_hist_quantile(hist, 0.999) / 1e6);
    kvio_result_set(result, mean + 5, kvio_hist_stddev(hist) / 1e6);
    kvio_result_set(result, mean + 6, (double)kvio_hist_max(hist) / 1e6);
    kvio_result_set(result, mean + 7, (double)kvio_hist_count(hist));
}

void kvio_serve_metrics_fill(kvio_result_t *result, const kvio_engine_metrics_t *metrics)
{
    double window_s = metrics->measure_end_ns > metrics->measure_start_ns
                          ? (double)(metrics->measure_end_ns - metrics->measure_start_ns) / 1e9
                          : 0;
    double span_s = metrics->last_finish_ns > metrics->first_arrival_ns
                        ? (double)(metrics->last_finish_ns - metrics->first_arrival_ns) / 1e9
                        : 0;
    kvio_result_set(result, KVIO_FIG_COMPLETED, (double)metrics->requests);
    kvio_result_set(result, KVIO_FIG_MEASURED, (double)metrics->measured_requests);
    kvio_result_set(result, KVIO_FIG_DURATION_S, window_s);
    set_latency(result, KVIO_FIG_TTFT_MS_MEAN, metrics->ttft);
    set_latency(result, KVIO_FIG_TPOT_MS_MEAN, metrics->tpot);
    set_latency(result, KVIO_FIG_ITL_MS_MEAN, metrics->itl);
    set_latency(result, KVIO_FIG_E2EL_MS_MEAN, metrics->e2el);
    kvio_result_set(result, KVIO_FIG_INPUT_TOKENS, (double)metrics->input_tokens);
    kvio_result_set(result, KVIO_FIG_OUTPUT_TOKENS, (double)metrics->output_tokens);
    /* Goodput only against an SLO: without one it would be the throughput
     * again, named as if the requests had met something (vLLM reports none). */
    if (metrics->slo) {
        double measured = metrics->measured_requests > 0 ? (double)metrics->measured_requests
                                                         : 1.0;
        kvio_result_set(result, KVIO_FIG_GOOD_REQUESTS, (double)metrics->good_requests);
        kvio_result_set(result, KVIO_FIG_SLO_TTFT_ATTAINMENT,
                        (double)metrics->ttft_met / measured);
        kvio_result_set(result, KVIO_FIG_SLO_TPOT_ATTAINMENT,
                        (double)metrics->tpot_met / measured);
    }
    /* The load offered to the measurement: requests per second between the
     * first and the last arrival after the warmup (throughput below it means
     * the engines fell behind; a ramp the warmup covers is left out). */
    double arrival_s = metrics->measured_arrivals > 1 &&
                               metrics->last_measured_arrival_ns > metrics->measure_start_ns
                           ? (double)(metrics->last_measured_arrival_ns -
                                      metrics->measure_start_ns) / 1e9
                           : 0;
    kvio_result_set(result, KVIO_FIG_OFFERED_RATE,
                    arrival_s > 0 ? (double)(metrics->measured_arrivals - 1) / arrival_s : 0);
    kvio_result_set(result, KVIO_FIG_PREFIX_CACHE_QUERIES, (double)metrics->prefix_queries);
    kvio_result_set(result, KVIO_FIG_PREFIX_CACHE_HITS, (double)metrics->prefix_hits);
    kvio_result_set(result, KVIO_FIG_TIER_HIT_TOKENS, (double)metrics->tier_hit_tokens);
    if (metrics->spec_draft_tokens > 0) {
        kvio_result_set(result, KVIO_FIG_SPEC_DRAFT_TOKENS, (double)metrics->spec_draft_tokens);
        kvio_result_set(result, KVIO_FIG_SPEC_ACCEPTED_TOKENS,
                        (double)metrics->spec_accepted_tokens);
    }
    /* tier_io: async: the requests that waited for their KV from a tier. */
    kvio_result_set(result, KVIO_FIG_KV_WAIT_REQUESTS, (double)metrics->kv_wait_requests);
    kvio_result_set(result, KVIO_FIG_KV_WAIT_MEAN_MS,
                    metrics->kv_wait_requests > 0 ? (double)metrics->kv_wait_ns / 1e6 /
                                                        (double)metrics->kv_wait_requests
                                                  : 0.0);
    kvio_result_set(result, KVIO_FIG_KV_WAIT_MAX_MS, (double)metrics->kv_wait_max_ns / 1e6);
    kvio_result_set(result, KVIO_FIG_PREFETCH_STOPPED, (double)metrics->prefetch_stopped);
    kvio_result_set(result, KVIO_FIG_PREFETCH_LEFT_TOKENS,
                    (double)metrics->prefetch_left_tokens);
    kvio_result_set(result, KVIO_FIG_RESUMED_PREFIX_CACHE_QUERIES,
                    (double)metrics->resumed_prefix_queries);
    kvio_result_set(result, KVIO_FIG_RESUMED_PREFIX_CACHE_HITS,
                    (double)metrics->resumed_prefix_hits);
    kvio_result_set(result, KVIO_FIG_PREEMPTIONS, (double)metrics->preemptions);
    if (metrics->pd_reprefills > 0) {
        kvio_result_set(result, KVIO_FIG_PD_REPREFILLS, (double)metrics->pd_reprefills);
        kvio_result_set(result, KVIO_FIG_PD_REPREFILLED_TOKENS,
                        (double)metrics->pd_reprefilled_tokens);
    }
    /* Requests taken out unfinished (a client that went away: kvio serve). */
    if (metrics->aborted_requests > 0)
        kvio_result_set(result, KVIO_FIG_ABORTED_REQUESTS, (double)metrics->aborted_requests);
    kvio_result_set(result, KVIO_FIG_MISPREDICT_PREEMPTIONS,
                    (double)metrics->mispredict_preemptions);
    kvio_result_set(result, KVIO_FIG_RECOMPUTED_TOKENS, (double)metrics->recomputed_tokens);
    kvio_result_set(result, KVIO_FIG_SWAPPED_BYTES, (double)metrics->swapped_bytes);
    kvio_result_set(result, KVIO_FIG_SWAP_SPACE_EXHAUSTED,
                    (double)metrics->swap_space_exhausted);
    kvio_result_set(result, KVIO_FIG_ITERATIONS, (double)metrics->iterations);
    if (metrics->versions_activated > 0) {
        kvio_result_set(result, KVIO_FIG_VERSIONS_ACTIVATED, (double)metrics->versions_activated);
        kvio_result_set(result, KVIO_FIG_STALE_HIT_TOKENS, (double)metrics->stale_hit_tokens);
        kvio_result_set(result, KVIO_FIG_CACHE_FLUSHED_BLOCKS,
                        (double)metrics->cache_flushed_blocks);
        kvio_result_set(result, KVIO_FIG_MIXED_VERSION_TOKENS,
                        (double)metrics->mixed_version_tokens);
        kvio_result_set(result, KVIO_FIG_UPDATE_ABORTED_REQUESTS,
                        (double)metrics->update_aborted_requests);
        kvio_result_set(result, KVIO_FIG_UPDATE_RECOMPUTED_TOKENS,
                        (double)metrics->update_recomputed_tokens);
        kvio_result_set(result, KVIO_FIG_COLOCATED_PREEMPTIONS,
                        (double)metrics->colocated_preemptions);
        kvio_result_set(result, KVIO_FIG_PREFIX_RESETS, (double)metrics->resets);
        kvio_result_set(result, KVIO_FIG_PREFIX_RESETS_PENDING, (double)metrics->resets_pending);
        kvio_result_set(result, KVIO_FIG_RESET_DELAY_MS,
                        metrics->resets > 0
                            ? (double)metrics->reset_delay_ns / 1e6 / (double)metrics->resets
                            : 0.0);
        kvio_result_set(result, KVIO_FIG_RESET_PREEMPTED_REQUESTS,
                        (double)metrics->reset_preempted_requests);
    }
    kvio_result_set(result, KVIO_FIG_KV_USAGE_MEAN,
                    metrics->measured_busy_ns > 0
                        ? metrics->usage_time_integral / (double)metrics->measured_busy_ns
                        : 0);
    kvio_result_set(result, KVIO_FIG_KV_USAGE_MAX, metrics->max_usage);
    /* DLIO's AU: compute time per engine over the run's span; the time the
     * engine waited on swap and tier transfers is I/O stall, apart. */
    double engines = metrics->engines > 0 ? (double)metrics->engines : 1.0;
    double compute_ns = (double)(metrics->busy_ns - metrics->io_stall_ns);
    kvio_result_set(result, KVIO_FIG_ACCELERATOR_UTILIZATION,
                    span_s > 0 ? compute_ns / 1e9 / span_s / engines : 0);
    kvio_result_set(result, KVIO_FIG_IO_STALL_SWAP_MS, (double)metrics->swap_stall_ns / 1e6);
    kvio_result_set(result, KVIO_FIG_IO_STALL_TIER_MS, (double)metrics->tier_stall_ns / 1e6);
    kvio_result_set(result, KVIO_FIG_IO_STALL_FRACTION,
                    span_s > 0 ? (double)metrics->io_stall_ns / 1e9 / span_s / engines : 0);
}

/* With tiers: the tokens the pool or a tier served (hit_rate_with_tiers). */
void kvio_serve_tier_hits_fill(kvio_result_t *result)
{
    kvio_result_set(result, KVIO_FIG_TIER_AND_POOL_HITS,
                    kvio_result_get(result, KVIO_FIG_PREFIX_CACHE_HITS) +
                        kvio_result_get(result, KVIO_FIG_TIER_HIT_TOKENS));
}

void kvio_serve_loss_fill(kvio_result_t *result, const double *version_steps,
                          size_t num_version_steps, const kvio_loss_curve_t *loss_curve,
                          const uint64_t *served, size_t num_versions)
{
    double loss = 0;
    uint64_t requests = 0;
    json_t *by_version = json_array();
    for (size_t v = 0; v < num_versions; v++) {
        if (served[v] == 0)
            continue;
        double step = v > 0 && v < num_version_steps && version_steps[v] > 0
                          ? version_steps[v]
                          : 1.0;
        double per_request = kvio_loss_at(loss_curve, step);
        loss += per_request * (double)served[v];
        requests += served[v];
        json_array_append_new(by_version, json_pack("{s:I, s:f, s:I, s:f}", "version",
                                                    (json_int_t)v, "step", step, "requests",
                                                    (json_int_t)served[v], "loss", per_request));
    }
    kvio_result_set(result, KVIO_FIG_CUMULATIVE_INFERENCE_LOSS, loss);
    kvio_result_set(result, KVIO_FIG_MEAN_INFERENCE_LOSS,
                    requests > 0 ? loss / (double)requests : 0);
    kvio_result_set_detail(result, "served_by_version", by_version);
}

/* ---- the measured requests, and the latencies computed from them ---------- */

void kvio_serve_samples_add(kvio_serve_samples_t *samples, const kvio_engine_finished_t *finished)
{
    if (samples == NULL || !finished->measured || samples->status != KVIO_OK)
        return;
    if (samples->count == samples->capacity &&
        kvio_array_reserve((void **)&samples->items, &samples->capacity, samples->count + 1,
                           sizeof(*samples->items), 4096) != KVIO_OK) {
        samples->status = KVIO_ERR_NOMEM;
        return;
    }
    samples->items[samples->count++] = (kvio_request_sample_t){
        .id = finished->id, .rank = finished->rank, .arrival_ns = finished->arrival_ns,
        .first_token_ns = finished->first_token_ns, .finish_ns = finished->finish_ns,
        .input_tokens = finished->prompt_tokens, .output_tokens = finished->output_tokens};
}

void kvio_serve_samples_free(kvio_serve_samples_t *samples)
{
    free(samples->items);
    *samples = (kvio_serve_samples_t){0};
}

double kvio_request_sample_tpot_s(const kvio_request_sample_t *sample)
{
    return sample->output_tokens > 1 ? (double)(sample->finish_ns - sample->first_token_ns) /
                                           1e9 / (sample->output_tokens - 1)
                                     : NAN;
}

void kvio_serve_statistics(double *values, size_t count, kvio_latency_stats_t *stats_p)
{
    if (kvio_sort_doubles(values, count) != KVIO_OK)
        qsort(values, count, sizeof(*values), kvio_compare_double);
    kvio_mean_stddev(values, count, &stats_p->mean, &stats_p->std);
    stats_p->count = count;
    stats_p->max = count > 0 ? values[count - 1] : 0;
    stats_p->sorted = values;
}

/* One latency's figures from its statistics (values in seconds). */
static void set_statistics(kvio_result_t *result, kvio_figure_t mean,
                           const kvio_latency_stats_t *stats)
{
    static const double percentiles[] = {50, 90, 99, 99.9};
    kvio_result_set(result, mean, stats->mean * 1e3);
    for (int i = 0; i < 4; i++)
        kvio_result_set(result, mean + 1 + i,
                        kvio_percentile_linear(stats->sorted, stats->count, percentiles[i]) *
                            1e3);
    kvio_result_set(result, mean + 5, stats->std * 1e3);
    kvio_result_set(result, mean + 6, stats->max * 1e3);
    kvio_result_set(result, mean + 7, (double)stats->count);
}

size_t kvio_serve_sample_values(const kvio_serve_samples_t *samples, uint32_t rank,
                                kvio_sample_value_t which, double *values)
{
    size_t count = 0;
    for (size_t i = 0; i < samples->count; i++) {
        const kvio_request_sample_t *sample = &samples->items[i];
        if (rank != UINT32_MAX && sample->rank != rank)
            continue;
        double value = which == KVIO_SAMPLE_TTFT ? (double)(sample->first_token_ns -
                                                            sample->arrival_ns) / 1e9
                       : which == KVIO_SAMPLE_E2EL
                           ? (double)(sample->finish_ns - sample->arrival_ns) / 1e9
                           : kvio_request_sample_tpot_s(sample);
        if (!isnan(value))
            values[count++] = value;
    }
    return count;
}

static int compare_sample_ids(const void *a, const void *b)
{
    uint64_t x = ((const kvio_request_sample_t *)a)->id;
    uint64_t y = ((const kvio_request_sample_t *)b)->id;
    return x < y ? -1 : x > y;
}

/* The rank of request id among samples sorted by id (UINT32_MAX: none). */
static uint32_t rank_of(const kvio_request_sample_t *sorted, size_t count, uint64_t id)
{
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (sorted[middle].id < id)
            low = middle + 1;
        else
            high = middle;
    }
    return low < count && sorted[low].id == id ? sorted[low].rank : UINT32_MAX;
}

/* The kinds of latency from the samples, each with its figures (ITL's from
 * the gaps between tokens). */
static const struct {
    kvio_sample_value_t which;
    kvio_figure_t mean;
} sample_kinds[] = {{KVIO_SAMPLE_TTFT, KVIO_FIG_TTFT_MS_MEAN},
                    {KVIO_SAMPLE_TPOT, KVIO_FIG_TPOT_MS_MEAN},
                    {KVIO_SAMPLE_E2EL, KVIO_FIG_E2EL_MS_MEAN}};

/* The figures of a latency (mean .. count, figures.def's order), copied. */
static void copy_latency(kvio_result_t *dst, const kvio_result_t *src, kvio_figure_t mean)
{
    for (int i = 0; i < 8; i++)
        if (kvio_result_has(src, mean + i))
            kvio_result_set(dst, mean + i, kvio_result_get(src, mean + i));
}

static int compare_floats(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* kvio_percentile_linear of sorted floats, each widened to a double. */
static double gap_percentile(const float *sorted, size_t count, double p)
{
    if (count == 0)
        return 0;
    double rank = p / 100.0 * (double)(count - 1);
    size_t low = (size_t)floor(rank);
    if (low + 1 >= count)
        return (double)sorted[count - 1];
    return (double)sorted[low] +
           ((double)sorted[low + 1] - (double)sorted[low]) * (rank - (double)low);
}

/* The ITL figures of gaps, sorted as the floats they are kept as (half a
 * double's bytes, and no widened copy): every operation on the doubles
 * the floats widen to, in the same order as kvio_serve_statistics and
 * set_statistics take them, so the figures are the same bits. */
static void set_gap_statistics(kvio_result_t *result, float *gaps, size_t count,
                               float *scratch)
{
    if (kvio_sort_floats_with(gaps, count, scratch) != KVIO_OK)
        qsort(gaps, count, sizeof(*gaps), compare_floats);
    double sum = 0, squares = 0;
    for (size_t i = 0; i < count; i++)
        sum += (double)gaps[i];
    double mean = count > 0 ? sum / (double)count : 0;
    for (size_t i = 0; i < count; i++)
        squares += ((double)gaps[i] - mean) * ((double)gaps[i] - mean);
    static const double percentiles[] = {50, 90, 99, 99.9};
    kvio_result_set(result, KVIO_FIG_ITL_MS_MEAN, mean * 1e3);
    for (int i = 0; i < 4; i++)
        kvio_result_set(result, KVIO_FIG_ITL_MS_MEAN + 1 + i,
                        gap_percentile(gaps, count, percentiles[i]) * 1e3);
    kvio_result_set(result, KVIO_FIG_ITL_MS_MEAN + 5,
                    (count > 0 ? sqrt(squares / (double)count) : 0) * 1e3);
    kvio_result_set(result, KVIO_FIG_ITL_MS_MEAN + 6,
                    (count > 0 ? (double)gaps[count - 1] : 0) * 1e3);
    kvio_result_set(result, KVIO_FIG_ITL_MS_MEAN + 7, (double)count);
}

/* The TTFT, TPOT, E2EL (and with every gap kept, ITL) figures of one
 * result from the samples of rank (UINT32_MAX: all); gap_ranks: each
 * gap's rank (NULL: every gap for all ranks, none for one); gaps: room
 * for every gap twice (the second half the sort's scratch). */
static void latencies_of(kvio_result_t *result, const kvio_serve_samples_t *samples,
                         const kvio_serve_itls_t *itls, const uint32_t *gap_ranks,
                         uint32_t rank, double *values, float *gaps)
{
    kvio_latency_stats_t stats;
    for (size_t k = 0; k < 3; k++) {
        kvio_serve_statistics(values,
                              kvio_serve_sample_values(samples, rank, sample_kinds[k].which,
                                                       values),
                              &stats);
        set_statistics(result, sample_kinds[k].mean, &stats);
    }
    if (itls == NULL || itls->dropped > 0 || itls->records == NULL)
        return; /* ITL stays the histogram's */
    size_t count = 0;
    for (uint64_t i = 0; i < itls->count; i++)
        if (gap_ranks != NULL ? gap_ranks[i] == rank : rank == UINT32_MAX)
            gaps[count++] = itls->records[i].gap_s;
    set_gap_statistics(result, gaps, count, gaps + itls->count);
}

/* The one rank every sample belongs to (UINT32_MAX: none, or several). */
static uint32_t only_rank(const kvio_serve_samples_t *samples)
{
    if (samples->count == 0)
        return UINT32_MAX;
    uint32_t rank = samples->items[0].rank;
    for (size_t i = 1; i < samples->count; i++)
        if (samples->items[i].rank != rank)
            return UINT32_MAX;
    return rank;
}

/* Past this largest request id, the ranks are found by a binary search in
 * a sorted copy of the samples rather than in a table by id. */
#define MAX_TABLED_ID (64u << 20)

/* The rank of gap i's request (UINT32_MAX: one not among the samples, that
 * did not finish): from a table by id, or the samples sorted by id. */
static uint32_t gap_rank(const kvio_serve_itls_t *itls, uint64_t i, const uint32_t *rank_by_id,
                         uint64_t max_id, const kvio_request_sample_t *by_id, size_t count)
{
    uint64_t id = itls->records[i].id;
    if (rank_by_id != NULL)
        return id <= max_id ? rank_by_id[id] : UINT32_MAX;
    return rank_of(by_id, count, id);
}

/* Each gap's rank (gap_rank); *matched_p: how many are rank only's. When
 * every gap is only's, no array is made: *gap_ranks_p stays NULL (as when
 * there are no gaps). */
static kvio_status_t gap_ranks_of(const kvio_serve_samples_t *samples,
                                  const kvio_serve_itls_t *itls, uint32_t only,
                                  uint32_t **gap_ranks_p, uint64_t *matched_p)
{
    *gap_ranks_p = NULL;
    *matched_p = 0;
    if (itls == NULL || itls->records == NULL || itls->count == 0)
        return KVIO_OK;
    uint64_t max_id = 0;
    for (size_t i = 0; i < samples->count; i++)
        max_id = samples->items[i].id > max_id ? samples->items[i].id : max_id;
    bool tabled = max_id < MAX_TABLED_ID;
    size_t entries = tabled ? (size_t)max_id + 1 : samples->count;
    void *index = malloc(entries * (tabled ? sizeof(uint32_t) : sizeof(kvio_request_sample_t)));
    if (index == NULL)
        return KVIO_ERR_NOMEM;
    uint32_t *rank_by_id = tabled ? index : NULL;
    kvio_request_sample_t *by_id = tabled ? NULL : index;
    if (tabled) {
        memset(rank_by_id, 0xff, entries * sizeof(*rank_by_id));
        for (size_t i = 0; i < samples->count; i++)
            rank_by_id[samples->items[i].id] = samples->items[i].rank;
    } else {
        memcpy(by_id, samples->items, samples->count * sizeof(*by_id));
        qsort(by_id, samples->count, sizeof(*by_id), compare_sample_ids);
    }
    /* One lookup per gap: the array is made at the first gap that is not
     * only's (the gaps before it are only's). */
    uint64_t matched = 0;
    uint32_t *gap_ranks = NULL;
    kvio_status_t status = KVIO_OK;
    for (uint64_t i = 0; i < itls->count; i++) {
        uint32_t rank = gap_rank(itls, i, rank_by_id, max_id, by_id, samples->count);
        bool mine = only != UINT32_MAX && rank == only;
        matched += mine;
        if (gap_ranks == NULL && !mine) {
            gap_ranks = kvio_large_alloc((size_t)itls->count * sizeof(*gap_ranks));
            if (gap_ranks == NULL) {
                status = KVIO_ERR_NOMEM;
                break;
            }
            for (uint64_t before = 0; before < i; before++)
                gap_ranks[before] = only;
        }
        if (gap_ranks != NULL)
            gap_ranks[i] = rank;
    }
    free(index);
    *gap_ranks_p = gap_ranks;
    *matched_p = matched;
    return status;
}

kvio_status_t kvio_serve_latency_figures(kvio_result_t *result,
                                         const kvio_serve_samples_t *samples,
                                         const kvio_serve_itls_t *itls)
{
    if (samples == NULL || samples->status != KVIO_OK)
        return samples != NULL ? samples->status : KVIO_OK;
    double *values = kvio_large_alloc((samples->count + 1) * sizeof(*values));
    /* The gaps of a rank, then the sort's scratch: one allocation, large
     * enough for huge pages sooner. */
    float *gaps = kvio_large_alloc((2 * (itls != NULL ? (size_t)itls->count : 0) + 1) *
                                   sizeof(*gaps));
    if (values == NULL || gaps == NULL) {
        free(values);
        free(gaps);
        return KVIO_ERR_NOMEM;
    }
    latencies_of(result, samples, itls, NULL, UINT32_MAX, values, gaps);
    /* A rank that served every sample (and every gap) has the run's
     * figures: copied, not computed and sorted again. */
    size_t num_ranks = kvio_result_num_children(result, "per_rank");
    uint32_t only = only_rank(samples);
    uint32_t *gap_ranks = NULL;
    uint64_t matched = 0;
    kvio_status_t status = KVIO_OK;
    if (num_ranks > 0 && itls != NULL && itls->dropped == 0)
        status = gap_ranks_of(samples, itls, only, &gap_ranks, &matched);
    for (size_t r = 0; r < num_ranks && status == KVIO_OK; r++) {
        kvio_result_t *child = kvio_result_child(result, "per_rank", r);
        if (!kvio_result_has(child, KVIO_FIG_RANK))
            continue;
        uint32_t rank = (uint32_t)kvio_result_get(child, KVIO_FIG_RANK);
        bool every_gap = gap_ranks == NULL || matched == itls->count;
        if (rank == only && every_gap) {
            for (size_t k = 0; k < 3; k++)
                copy_latency(child, result, sample_kinds[k].mean);
            if (itls != NULL && itls->dropped == 0 && itls->records != NULL)
                copy_latency(child, result, KVIO_FIG_ITL_MS_MEAN);
        } else {
            latencies_of(child, samples, itls, gap_ranks, rank, values, gaps);
        }
    }
    free(gap_ranks);
    free(gaps);
    free(values);
    return status;
}

kvio_status_t kvio_serve_tiers_fill(kvio_result_t *result, kvio_tier_t *const *tiers,
                                   size_t num_tiers, uint32_t rank)
{
    for (size_t t = 0; t < num_tiers; t++) {
        kvio_result_t *entry =
            kvio_result_child(result, "tiers", kvio_result_num_children(result, "tiers"));
        if (entry == NULL)
            return KVIO_ERR_NOMEM;
        kvio_tier_stats_fill(tiers[t], entry);
        kvio_result_set(entry, KVIO_FIG_TIER_RANK, rank);
    }
    return KVIO_OK;
}

void kvio_serve_tiers_json(kvio_tier_t *const *tiers, size_t num_tiers, uint32_t rank,
                           json_t *array)
{
    for (size_t t = 0; t < num_tiers; t++) {
        json_t *tier = kvio_tier_stats_json(tiers[t]);
        json_object_set_new(tier, "rank", json_integer(rank));
        json_array_append_new(array, tier);
    }
}

void kvio_serve_itls_take(kvio_engine_metrics_t *metrics, kvio_serve_itls_t *itls)
{
    if (itls == NULL)
        return;
    free(itls->records);
    /* The list grew by doubling: what it holds is all it keeps (a shrink of
     * a large block gives its tail back to the system). */
    if (metrics->itl_records != NULL && metrics->num_itl_records > 0 &&
        metrics->num_itl_records < metrics->itl_records_capacity) {
        kvio_itl_record_t *fitted = realloc(
            metrics->itl_records, (size_t)metrics->num_itl_records * sizeof(*fitted));
        if (fitted != NULL)
            metrics->itl_records = fitted;
    }
    *itls = (kvio_serve_itls_t){.records = metrics->itl_records,
                                .count = metrics->num_itl_records,
                                .dropped = metrics->itl_records_dropped};
    metrics->itl_records = NULL;
    metrics->num_itl_records = metrics->itl_records_capacity = 0;
}
