/* The trend around each model update, computed from the run's results in
 * memory; a trend, not a cost (no control: serving may change by itself
 * over the same windows; run/control.c measures the cost): for a window
 * after each activation (update.interference_window)
 * against the same stretch before it, on the rank that activated it, the
 * requests that arrived in each: TTFT p50/p99, TPOT p99 and the prefix hit
 * rate. The ratios (after / before) are updates.csv's last columns and,
 * averaged over the updates that had requests on both sides,
 * summary.json's update_interference. Times are taken as requests.csv and
 * updates.csv show them (microseconds), so the figures are the ones the
 * files imply. Both modes give the same records on one clock. */
#include "run/run_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/format.h"
#include "kvio/stats.h"

/* One finished request, as the windows need it. */
typedef struct served {
    int rank;
    double arrival_s, ttft_s, tpot_s; /* tpot_s < 0: one output token */
    double input_tokens, cached_tokens;
} served_t;

/* The window's figures: TTFT p50 and p99, TPOT p99, hit rate; NAN where it
 * had no request. */
typedef struct window {
    double ttft_p50, ttft_p99, tpot_p99, hit_rate;
    size_t requests;
} window_t;

/* Requests ordered by rank, then arrival. */
static int compare_served(const void *a, const void *b)
{
    const served_t *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->arrival_s < y->arrival_s ? -1 : x->arrival_s > y->arrival_s;
}

/* The first of the sorted requests at (rank, arrival_s) or after. */
static size_t first_at(const served_t *requests, size_t count, int rank, double arrival_s)
{
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const served_t *request = &requests[middle];
        if (request->rank < rank || (request->rank == rank && request->arrival_s < arrival_s))
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

/* The requests of rank arriving in [from_s, to_s), of requests sorted by
 * compare_served; scratch holds 2 × count. */
static window_t measure(const served_t *requests, size_t count, int rank, double from_s,
                        double to_s, double *scratch)
{
    double *ttft = scratch, *tpot = scratch + count, input = 0, cached = 0;
    size_t num_ttft = 0, num_tpot = 0;
    for (size_t i = first_at(requests, count, rank, from_s); i < count; i++) {
        const served_t *request = &requests[i];
        if (request->rank != rank || request->arrival_s >= to_s)
            break;
        ttft[num_ttft++] = request->ttft_s;
        if (request->tpot_s >= 0)
            tpot[num_tpot++] = request->tpot_s;
        input += request->input_tokens;
        cached += request->cached_tokens;
    }
    return (window_t){.ttft_p50 = kvio_quantile(ttft, num_ttft, 0.5),
                      .ttft_p99 = kvio_quantile(ttft, num_ttft, 0.99),
                      .tpot_p99 = kvio_quantile(tpot, num_tpot, 0.99),
                      .hit_rate = input > 0 ? cached / input : NAN,
                      .requests = num_ttft};
}

static double ratio(double after, double before)
{
    return isfinite(after) && isfinite(before) && before > 0 ? after / before : NAN;
}

/* A time as the CSVs write it: ns / scale with 6 decimals (scale 1e9:
 * seconds, 1e6: milliseconds), read as a number. */
static double as_written(int64_t ns, double scale)
{
    char text[352];
    size_t length = kvio_format_fixed(text, (double)ns / scale, 6);
    text[length] = '\0';
    return strtod(text, NULL);
}

/* The finished requests as the windows need them, sorted by rank and
 * arrival (malloc'd). */
static served_t *served_of(const kvio_engine_finished_t *finished, size_t count)
{
    served_t *requests = malloc((count > 0 ? count : 1) * sizeof(*requests));
    if (requests == NULL)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        const kvio_engine_finished_t *request = &finished[i];
        double arrival = as_written(request->arrival_ns, 1e9);
        double first = as_written(request->first_token_ns, 1e9);
        double finish = as_written(request->finish_ns, 1e9);
        requests[i] = (served_t){
            .rank = (int)request->rank, .arrival_s = arrival, .ttft_s = first - arrival,
            .tpot_s = request->output_tokens > 1
                          ? (finish - first) / (double)(request->output_tokens - 1)
                          : -1,
            .input_tokens = request->prompt_tokens, .cached_tokens = request->cached_tokens};
    }
    qsort(requests, count, sizeof(*requests), compare_served);
    return requests;
}

kvio_status_t kvio_interference_measure(const kvio_engine_finished_t *finished,
                                        size_t num_finished,
                                        const kvio_update_record_t *updates,
                                        size_t num_updates, int64_t origin_ns,
                                        int64_t window_ns, kvio_interference_t *result_p)
{
    kvio_interference_t result = {.num_updates = num_updates,
                                  .window_s = (double)window_ns / 1e9};
    served_t *requests = served_of(finished, num_finished);
    double *scratch = malloc((2 * num_finished + 1) * sizeof(double));
    result.values = malloc((num_updates + 1) * KVIO_INTERFERENCE_VALUES * sizeof(double));
    if (requests == NULL || scratch == NULL || result.values == NULL) {
        free(requests);
        free(scratch);
        free(result.values);
        return KVIO_ERR_NOMEM;
    }
    double sums[KVIO_INTERFERENCE_VALUES] = {0};
    for (size_t u = 0; u < num_updates; u++) {
        const kvio_update_record_t *update = &updates[u];
        double *values = &result.values[u * KVIO_INTERFERENCE_VALUES];
        for (int v = 0; v < KVIO_INTERFERENCE_VALUES; v++)
            values[v] = NAN;
        if (update->t_activated_ns == 0)
            continue;
        double at = as_written(update->t_activated_ns - origin_ns, 1e6) / 1e3;
        window_t before = measure(requests, num_finished, update->rank, at - result.window_s,
                                  at, scratch);
        window_t after = measure(requests, num_finished, update->rank, at,
                                 at + result.window_s, scratch);
        values[0] = ratio(after.ttft_p50, before.ttft_p50);
        values[1] = ratio(after.ttft_p99, before.ttft_p99);
        values[2] = ratio(after.tpot_p99, before.tpot_p99);
        values[3] = before.hit_rate;
        values[4] = after.hit_rate;
        bool complete = true;
        for (int v = 0; v < KVIO_INTERFERENCE_VALUES; v++)
            complete = complete && isfinite(values[v]);
        if (!complete)
            continue;
        for (int v = 0; v < KVIO_INTERFERENCE_VALUES; v++)
            sums[v] += values[v];
        result.measured++;
    }
    for (int v = 0; v < KVIO_INTERFERENCE_VALUES; v++)
        result.means[v] = result.measured > 0 ? sums[v] / (double)result.measured : NAN;
    free(requests);
    free(scratch);
    *result_p = result;
    return KVIO_OK;
}

void kvio_interference_free(kvio_interference_t *result)
{
    free(result->values);
    memset(result, 0, sizeof(*result));
}

json_t *kvio_interference_json(const kvio_interference_t *result, uint64_t recomputed_tokens,
                               uint64_t aborted_requests)
{
#define MEAN(v) (result->measured > 0 ? json_real(result->means[v]) : json_null())
    return json_pack("{s:s, s:f, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:I}",
                     "trend_no_control",
                     "serving after each activation over the same window before it: serving "
                     "changes by itself over such windows, so this is not the updates' cost "
                     "(see update_cost, or update_interference.during_updates)", "window_s",
                     result->window_s, "updates", (json_int_t)result->num_updates,
                     "updates_measured", (json_int_t)result->measured, "ttft_p50_ratio",
                     MEAN(0), "ttft_p99_ratio", MEAN(1), "tpot_p99_ratio", MEAN(2),
                     "hit_rate_before", MEAN(3), "hit_rate_after", MEAN(4),
                     "recomputed_tokens", (json_int_t)recomputed_tokens, "aborted_requests",
                     (json_int_t)aborted_requests);
#undef MEAN
}

/* ---------- decode gaps during updates, against the rest (no control) ---------- */

/* One gap between two of a rank's iterations that both decoded: the time
 * between a sequence's tokens, decode_seqs of them. */
typedef struct gap {
    double ms;
    double tokens;
} gap_t;

static int compare_gaps(const void *a, const void *b)
{
    double x = ((const gap_t *)a)->ms, y = ((const gap_t *)b)->ms;
    return x < y ? -1 : x > y;
}

/* An update's stretch on its rank: from its first byte on the wire to its
 * activation (ns since the run's start). */
typedef struct stretch {
    uint32_t rank;
    int64_t from_ns, to_ns;
} stretch_t;

/* By rank, then by time. */
static int rank_then_time(uint32_t rank_a, int64_t a_ns, uint32_t rank_b, int64_t b_ns)
{
    if (rank_a != rank_b)
        return rank_a < rank_b ? -1 : 1;
    return a_ns < b_ns ? -1 : a_ns > b_ns;
}

static int compare_stretches(const void *a, const void *b)
{
    const stretch_t *x = a, *y = b;
    return rank_then_time(x->rank, x->from_ns, y->rank, y->from_ns);
}

static int compare_steps(const void *a, const void *b)
{
    const kvio_serve_step_record_t *x = a, *y = b;
    return rank_then_time(x->rank, x->start_ns, y->rank, y->start_ns);
}

/* The q quantile of sorted gaps, by count (tokens: false) or weighted by
 * the tokens each gap delayed. */
static double gap_quantile(const gap_t *gaps, size_t count, double q, bool tokens)
{
    if (count == 0)
        return 0;
    double total = 0;
    for (size_t i = 0; i < count; i++)
        total += tokens ? gaps[i].tokens : 1;
    double want = q * total, seen = 0;
    for (size_t i = 0; i < count; i++) {
        seen += tokens ? gaps[i].tokens : 1;
        if (seen >= want)
            return gaps[i].ms;
    }
    return gaps[count - 1].ms;
}

/* The decode gaps' figures (a KVIO_GAP_FIGURES group: p50, p99, max,
 * count) of one side. */
static void set_gaps(kvio_result_t *result, kvio_figure_t p50, gap_t *gaps, size_t count)
{
    qsort(gaps, count, sizeof(*gaps), compare_gaps);
    kvio_result_set(result, p50, gap_quantile(gaps, count, 0.5, false));
    kvio_result_set(result, p50 + 1, gap_quantile(gaps, count, 0.99, false));
    kvio_result_set(result, p50 + 2, count > 0 ? gaps[count - 1].ms : 0.0);
    kvio_result_set(result, p50 + 3, (double)count);
}

static json_t *gaps_json(gap_t *gaps, size_t count, bool tokens)
{
    qsort(gaps, count, sizeof(*gaps), compare_gaps);
    double weight = 0;
    for (size_t i = 0; i < count; i++)
        weight += tokens ? gaps[i].tokens : 1;
    return json_pack("{s:f, s:f, s:f, s:f}", tokens ? "tokens" : "gaps", weight, "p50",
                     gap_quantile(gaps, count, 0.5, tokens), "p99",
                     gap_quantile(gaps, count, 0.99, tokens), "max",
                     count > 0 ? gaps[count - 1].ms : 0.0);
}

kvio_status_t kvio_interference_during_fill(kvio_result_t *result,
                                            const kvio_serve_output_t *serving,
                                            const kvio_update_record_t *updates,
                                            size_t num_updates, int64_t origin_ns)
{
    size_t num_steps = serving->num_steps;
    kvio_serve_step_record_t *steps = malloc((num_steps + 1) * sizeof(*steps));
    stretch_t *stretches = malloc((num_updates + 1) * sizeof(*stretches));
    gap_t *during = malloc((num_steps + 1) * sizeof(*during));
    gap_t *outside = malloc((num_steps + 1) * sizeof(*outside));
    if (steps == NULL || stretches == NULL || during == NULL || outside == NULL) {
        free(steps);
        free(stretches);
        free(during);
        free(outside);
        return KVIO_ERR_NOMEM;
    }
    memcpy(steps, serving->steps, num_steps * sizeof(*steps));
    qsort(steps, num_steps, sizeof(*steps), compare_steps);
    size_t num_stretches = 0;
    for (size_t u = 0; u < num_updates; u++) {
        const kvio_update_record_t *update = &updates[u];
        int64_t from = update->t_xfer_start_ns ? update->t_xfer_start_ns : update->t_ready_ns;
        if (update->t_activated_ns == 0 || from == 0)
            continue;
        stretches[num_stretches++] = (stretch_t){.rank = (uint32_t)update->rank,
                                                 .from_ns = from - origin_ns,
                                                 .to_ns = update->t_activated_ns - origin_ns};
    }
    qsort(stretches, num_stretches, sizeof(*stretches), compare_stretches);
    size_t num_during = 0, num_outside = 0, at = 0;
    for (size_t i = 1; i < num_steps; i++) {
        const kvio_serve_step_record_t *a = &steps[i - 1], *b = &steps[i];
        if (a->rank != b->rank || a->decode_seqs == 0 || b->decode_seqs == 0)
            continue;
        /* The rank's first stretch that has not ended before the gap. */
        while (at < num_stretches &&
               (stretches[at].rank < a->rank ||
                (stretches[at].rank == a->rank && stretches[at].to_ns < a->end_ns)))
            at++;
        bool inside = at < num_stretches && stretches[at].rank == a->rank &&
                      stretches[at].from_ns <= b->end_ns;
        gap_t gap = {.ms = (double)(b->end_ns - a->end_ns) / 1e6, .tokens = b->decode_seqs};
        if (inside)
            during[num_during++] = gap;
        else
            outside[num_outside++] = gap;
    }
    kvio_result_set_detail(result, "update_interference.during_updates.stretch",
                           json_string("an update's first byte on the wire to its activation, "
                                       "on its rank"));
    kvio_result_set_detail(result, "update_interference.during_updates.itl_ms",
                           json_pack("{s:o, s:o}", "during", gaps_json(during, num_during, true),
                                     "outside", gaps_json(outside, num_outside, true)));
    set_gaps(result, KVIO_FIG_DURING_GAP_P50_MS, during, num_during);
    set_gaps(result, KVIO_FIG_OUTSIDE_GAP_P50_MS, outside, num_outside);
    free(steps);
    free(stretches);
    free(during);
    free(outside);
    return KVIO_OK;
}
