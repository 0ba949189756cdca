/* Builds the report's chart set from the loaded runs and cachesim results:
 * one description per chart (series, categories, axis titles with units,
 * captions), drawn later by the SVG and gnuplot renderers. Charts whose data
 * no input has are skipped with a note instead. */
#include "report/report_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------- serving charts ---------- */

/* Quantile levels of a CDF line, denser in the tail. */
static size_t cdf_levels(double *levels_p, size_t max_levels)
{
    size_t count = 0;
    for (int i = 0; i < 90 && count < max_levels; i++)
        levels_p[count++] = i / 100.0;
    for (int i = 0; i < 90 && count < max_levels; i++)
        levels_p[count++] = 0.9 + i / 1000.0;
    for (int i = 0; i < 90 && count < max_levels; i++)
        levels_p[count++] = 0.99 + i / 10000.0;
    for (int i = 0; i <= 10 && count < max_levels; i++)
        levels_p[count++] = 0.999 + i / 10000.0;
    return count;
}

static kvio_status_t latency_cdfs(kvio_report_t *report)
{
    static const struct {
        const char *id, *title, *x_label;
        size_t offset;
    } metrics[] = {
        {"chart-ttft-cdf", "Time to first token (TTFT), CDF", "TTFT (ms)",
         offsetof(report_run_t, ttft)},
        {"chart-tpot-cdf", "Time per output token (TPOT), CDF", "TPOT (ms)",
         offsetof(report_run_t, tpot)},
        {"chart-e2el-cdf", "End-to-end latency (E2EL), CDF", "E2EL (ms)",
         offsetof(report_run_t, e2el)},
    };
    double levels[300];
    size_t num_levels = cdf_levels(levels, 300);
    for (size_t m = 0; m < 3; m++) {
        report_chart_t *chart = NULL;
        double largest_p999 = 0, largest_max = 0, smallest_min = INFINITY;
        for (size_t r = 0; r < report->num_runs; r++) {
            const kvio_hist_t *hist =
                *(kvio_hist_t *const *)((const char *)report->runs[r] + metrics[m].offset);
            if (kvio_hist_count(hist) == 0)
                continue;
            if (chart == NULL) {
                chart = report_chart_new(report, CHART_LINES, metrics[m].id, "Latency", metrics[m].title,
                                  metrics[m].x_label, "fraction of requests");
                if (chart == NULL)
                    return KVIO_ERR_NOMEM;
                chart->y_fixed = true;
                chart->y_min = 0;
                chart->y_max = 1;
            }
            chart_series_t *series = report_series_add(chart, report->runs[r]->label, num_levels, false);
            if (series == NULL)
                return KVIO_ERR_NOMEM;
            for (size_t i = 0; i < num_levels; i++) {
                series->x[i] = kvio_hist_quantile(hist, levels[i]) / 1e6;
                series->y[i] = levels[i];
            }
            series->count = num_levels;
            double p999 = kvio_hist_quantile(hist, 0.999) / 1e6;
            double max = kvio_hist_quantile(hist, 1.0) / 1e6;
            double min = kvio_hist_quantile(hist, 0.0) / 1e6;
            largest_p999 = p999 > largest_p999 ? p999 : largest_p999;
            largest_max = max > largest_max ? max : largest_max;
            if (min > 0 && min < smallest_min)
                smallest_min = min;
        }
        if (chart == NULL)
            continue;
        snprintf(chart->caption, sizeof(chart->caption),
                 "Measured requests of requests.csv (seeds pooled), one line per run; "
                 "quantiles from a log-linear histogram (relative error below 0.4%%).");
        /* The SLO bound the runs share (TTFT, TPOT), as a dashed line. */
        double slo = -1;
        for (size_t r = 0; m < 2 && r < report->num_runs; r++) {
            const report_run_t *run = report->runs[r];
            double bound = m == 0 ? run->slo_ttft_ms : run->slo_tpot_ms;
            if (kvio_hist_count(*(kvio_hist_t *const *)((const char *)run +
                                                         metrics[m].offset)) == 0)
                continue;
            slo = slo < 0 || slo == bound ? bound : 0;
        }
        if (slo > 0) {
            chart->marks[chart->num_marks++] = slo;
            size_t length = strlen(chart->caption);
            snprintf(chart->caption + length, sizeof(chart->caption) - length,
                     " Dashed: the runs' SLO bound, %.4g ms.", slo);
        }
        if (isfinite(smallest_min) && largest_max > 30 * smallest_min) {
            /* Latencies over more than a decade and a half (queueing tails,
             * runs far apart): a log axis shows them all ("2500k ms" on a
             * linear one hid the fast runs in one pixel). */
            chart->x_log = true;
            size_t length = strlen(chart->caption);
            snprintf(chart->caption + length, sizeof(chart->caption) - length,
                     " Log x axis: the latencies span %.4g to %.4g ms.", smallest_min,
                     largest_max);
        } else if (largest_max > 3 * largest_p999 && largest_p999 > 0) {
            chart->x_fixed = true;
            chart->x_min = 0;
            chart->x_max = largest_p999 * 1.05;
            size_t length = strlen(chart->caption);
            snprintf(chart->caption + length, sizeof(chart->caption) - length,
                     " The x axis ends just past the largest p99.9 (%.4g ms); the maximum is "
                     "%.4g ms.",
                     largest_p999, largest_max);
        }
    }
    bool any = false;
    for (size_t r = 0; r < report->num_runs; r++)
        any = any || report->runs[r]->has_requests;
    if (!any && report->num_runs > 0)
        report_add_note(report, "Latency CDFs skipped: no run has a requests.csv with measured requests.");
    return KVIO_OK;
}

/* Mean over a run's seeds of a metric, with min and max. */
static void seed_stats(const report_run_t *run, size_t offset, double scale, double *mean_p,
                       double *low_p, double *high_p)
{
    double sum = 0, low = INFINITY, high = -INFINITY;
    for (size_t s = 0; s < run->num_seeds; s++) {
        double value = *(const double *)((const char *)&run->seeds[s] + offset) * scale;
        sum += value;
        low = value < low ? value : low;
        high = value > high ? value : high;
    }
    *mean_p = run->num_seeds > 0 ? sum / (double)run->num_seeds : 0;
    *low_p = run->num_seeds > 0 ? low : 0;
    *high_p = run->num_seeds > 0 ? high : 0;
}

/* A run's name on a chart's axis, marked "(!)" when summary.json has
 * warnings about its numbers (overload...: the runs table says which) and,
 * on update charts, "(modelled)" when its update times are. */
static void run_category(const report_run_t *run, char *category, bool updates)
{
    snprintf(category, REPORT_LABEL_MAX, "%.60s%s%s", run->label,
             run->verdict[0] != '\0' ? " (!)" : "",
             updates && run->modelled_updates ? " (modelled)" : "");
}

typedef struct bar_metric {
    const char *label;
    size_t offset;
    double scale;
} bar_metric_t;

static kvio_status_t metric_bars(kvio_report_t *report, const char *section, const char *id,
                                 const char *title, const char *y_label,
                                 const bar_metric_t *metrics, size_t num_metrics,
                                 const char *caption)
{
    report_chart_t *chart = report_chart_new(report, CHART_BARS, id, section, title, "run", y_label);
    if (chart == NULL || report_categories_set(chart, report->num_runs) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    bool seeds = false;
    for (size_t r = 0; r < report->num_runs; r++) {
        run_category(report->runs[r], chart->categories[r], false);
        seeds = seeds || report->runs[r]->num_seeds > 1;
    }
    for (size_t m = 0; m < num_metrics; m++) {
        chart_series_t *series = report_series_add(chart, metrics[m].label, report->num_runs, seeds);
        if (series == NULL)
            return KVIO_ERR_NOMEM;
        series->count = report->num_runs;
        for (size_t r = 0; r < report->num_runs; r++) {
            double low, high;
            seed_stats(report->runs[r], metrics[m].offset, metrics[m].scale, &series->y[r], &low,
                       &high);
            if (seeds) {
                series->low[r] = low;
                series->high[r] = high;
            }
        }
    }
    snprintf(chart->caption, sizeof(chart->caption), "%s%s", caption,
             seeds ? " Bars are means over a variant's seeds; whiskers span min to max." : "");
    return KVIO_OK;
}

static kvio_status_t serving_bars(kvio_report_t *report)
{
    bool serving = false, slo = false, hits = false;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        serving = serving || run->serving;
        slo = slo || run->has_slo;
        for (size_t s = 0; s < run->num_seeds; s++)
            hits = hits || run->seeds[s].hit_rate > 0;
    }
    if (!serving) {
        if (report->num_runs > 0)
            report_add_note(report, "Throughput and hit-rate charts skipped: no run served requests "
                             "(model updates only).");
        return KVIO_OK;
    }
    /* Goodput only where some run set an SLO: without one it is throughput
     * by another name (vLLM reports none then). */
    const bar_metric_t requests[] = {
        {"request throughput", offsetof(run_metrics_t, request_throughput), 1},
        {"goodput (requests meeting the SLOs)", offsetof(run_metrics_t, goodput), 1},
    };
    kvio_status_t status = metric_bars(
        report, "Throughput and cache", "chart-throughput", slo ? "Request throughput and goodput" : "Request throughput",
        "requests per second", requests, slo ? 2 : 1,
        slo ? "From summary.json: completed measured requests per second of the measured "
              "window, and those that met every SLO bound (config slo); a run without an SLO "
              "has no goodput bar."
            : "From summary.json: completed measured requests per second of the measured "
              "window (no run set an SLO, so there is no goodput).");
    const bar_metric_t tokens[] = {
        {"output tokens", offsetof(run_metrics_t, output_throughput), 1},
        {"input tokens", offsetof(run_metrics_t, input_throughput), 1},
    };
    if (status == KVIO_OK)
        status = metric_bars(report, "Throughput and cache", "chart-token-throughput",
                             "Token throughput",
                             "tokens per second", tokens, 2,
                             "From summary.json: output (generated) and input (prompt) tokens "
                             "per second of the measured window.");
    const bar_metric_t busy[] = {
        {"accelerator utilization", offsetof(run_metrics_t, accelerator_utilization), 100},
    };
    if (status == KVIO_OK)
        status = metric_bars(report, "Throughput and cache", "chart-utilization",
                             "Accelerator utilization", "busy (% of the measured window)", busy,
                             1,
                             "From summary.json: the share of the measured window the serve "
                             "ranks' engines ran iterations (waiting on swaps and tiers "
                             "included), the mean over ranks.");
    if (status == KVIO_OK) {
        report_chart_t *chart = report->charts[report->num_charts - 1];
        chart->y_fixed = true;
        chart->y_min = 0;
        chart->y_max = 100;
    }
    bool loss = false;
    for (size_t r = 0; r < report->num_runs; r++)
        loss = loss || isfinite(report->runs[r]->seeds[0].cumulative_inference_loss);
    const bar_metric_t losses[] = {
        {"cumulative inference loss",
         offsetof(run_metrics_t, cumulative_inference_loss), 1},
    };
    if (status == KVIO_OK && loss)
        status = metric_bars(report, "Model updates", "chart-inference-loss",
                             "Cumulative inference loss", "sum over served requests", losses, 1,
                             "From summary.json: each served request weighted by the loss of "
                             "the model version that served it (train.checkpoint.loss), summed: "
                             "fresher weights served sooner lower it. Runs without trainers "
                             "have no bar.");
    if (status != KVIO_OK)
        return status;
    if (!hits) {
        report_add_note(report, "Prefix-cache hit rate chart skipped: every run's hit rate is 0 "
                         "(prefix caching off, or no shared prefixes).");
        return KVIO_OK;
    }
    /* The hit rate with the tiers' blocks, where some run had them. */
    bool tiers = false;
    for (size_t r = 0; r < report->num_runs; r++)
        for (size_t s = 0; s < report->runs[r]->num_seeds; s++)
            tiers = tiers || report->runs[r]->seeds[s].hit_rate_with_tiers >
                                 report->runs[r]->seeds[s].hit_rate;
    const bar_metric_t hit_rate[] = {
        {"prefix-cache hit rate", offsetof(run_metrics_t, hit_rate), 100},
        {"with lower-tier hits", offsetof(run_metrics_t, hit_rate_with_tiers), 100},
    };
    status = metric_bars(report, "Throughput and cache", "chart-hit-rate",
                         "Prefix-cache hit rate",
                         "hit rate (% of prompt tokens)", hit_rate, tiers ? 2 : 1,
                         tiers ? "From summary.json: prompt tokens found in the prefix cache at "
                                 "first admission over all prompt tokens, and with the blocks "
                                 "loaded back from the lower tiers (hit_rate_with_tiers)."
                               : "From summary.json: prompt tokens found in the prefix cache at "
                                 "first admission over all prompt tokens.");
    if (status == KVIO_OK) {
        report_chart_t *chart = report->charts[report->num_charts - 1];
        chart->y_fixed = true;
        chart->y_min = 0;
        chart->y_max = 100;
    }
    return status;
}

static int compare_rate(const void *a, const void *b)
{
    double x = (*(const report_run_t *const *)a)->offered_rate;
    double y = (*(const report_run_t *const *)b)->offered_rate;
    return x < y ? -1 : x > y;
}

/* A metric drawn against the offered rate. */
typedef struct rate_metric {
    const char *id, *title, *y_label, *caption;
    size_t offset;  /* into run_metrics_t */
    bool from_zero; /* the y axis starts at 0 (throughput); else it fits the data */
    bool ttft;      /* the runs' TTFT SLO is drawn on it */
} rate_metric_t;

static const rate_metric_t rate_metrics[] = {
    {"chart-throughput-vs-rate", "Output throughput against offered rate",
     "output tokens per second",
     "From summary.json: output tokens per second of the measured window at each offered rate "
     "as measured (metrics.offered_rate: what arrived, not what was configured), one line per "
     "admission policy (and its output-length predictor).",
     offsetof(run_metrics_t, output_throughput), true, false},
    {"chart-ttft-vs-rate", "TTFT p99 against offered rate", "TTFT p99 (ms)",
     "From summary.json: the 99th percentile of time to first token at each offered rate as "
     "measured, one line per admission policy (and its predictor); past saturation it grows "
     "with the queue.",
     offsetof(run_metrics_t, ttft_p99), false, true},
};

/* One chart of metric against rate for runs (sorted by rate): a line per
 * admission. */
static kvio_status_t rate_chart(kvio_report_t *report, const rate_metric_t *metric,
                                const char *name, size_t index, report_run_t *const *sorted,
                                size_t num_runs)
{
    char id[64], title[REPORT_LABEL_MAX + 64];
    snprintf(id, sizeof(id), index == 0 ? "%s" : "%s-%zu", metric->id, index + 1);
    snprintf(title, sizeof(title), "%s: %s", metric->title, name);
    report_chart_t *chart = report_chart_new(report, CHART_LINES, id, "Throughput and cache", title,
                                      "offered rate, measured (requests per second)",
                                      metric->y_label);
    bool *taken = calloc(num_runs > 0 ? num_runs : 1, sizeof(*taken));
    if (chart == NULL || taken == NULL) {
        free(taken);
        return KVIO_ERR_NOMEM;
    }
    double high = 0, low = INFINITY;
    for (size_t i = 0; i < num_runs; i++) {
        if (taken[i])
            continue;
        const char *admission = sorted[i]->admission;
        chart_series_t *series = report_series_add(chart, admission, num_runs, false);
        if (series == NULL) {
            free(taken);
            return KVIO_ERR_NOMEM;
        }
        for (size_t j = i; j < num_runs; j++) {
            if (taken[j] || strcmp(sorted[j]->admission, admission) != 0)
                continue;
            double least, most;
            series->x[series->count] = sorted[j]->offered_rate;
            seed_stats(sorted[j], metric->offset, 1, &series->y[series->count], &least, &most);
            high = fmax(high, series->y[series->count]);
            low = fmin(low, series->y[series->count]);
            series->count++;
            taken[j] = true;
        }
    }
    free(taken);
    if (metric->from_zero) {
        chart->y_fixed = true;
        chart->y_min = 0;
        chart->y_max = high * 1.1;
    }
    /* A queue growing past saturation spans decades ("2500k ms" on a linear
     * axis hid every point below it). */
    chart->y_log = !metric->from_zero && low > 0 && high > 30 * low;
    /* The SLO the sweep's runs share, as a line. */
    double slo = metric->ttft ? sorted[0]->slo_ttft_ms : 0;
    for (size_t i = 1; i < num_runs; i++)
        slo = sorted[i]->slo_ttft_ms == slo ? slo : 0;
    if (slo > 0)
        chart->y_marks[chart->num_y_marks++] = slo;
    snprintf(chart->caption, sizeof(chart->caption), "%s%s%s", metric->caption,
             chart->y_log ? " Log y axis: the values span more than thirtyfold." : "",
             slo > 0 ? " Dashed: the runs' TTFT SLO (config slo.ttft)." : "");
    return KVIO_OK;
}

/* Output throughput and TTFT p99 against offered rate, one line per
 * admission (policy, and predictor where it has one), a chart each per
 * sweep: runs whose configs differ only in the rate, the seed and the
 * scheduler (not merely the workload's name: two unrelated compares of
 * "chat" are two sweeps), drawn when they span at least two rates
 * (bench/pkas.sh, or compare varying the rate). */
static kvio_status_t rate_charts(kvio_report_t *report)
{
    size_t count = report->num_runs, charts = 0;
    report_run_t **runs = calloc(count > 0 ? count : 1, sizeof(*runs));
    bool *done = calloc(count > 0 ? count : 1, sizeof(*done));
    kvio_status_t status = runs != NULL && done != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    for (size_t w = 0; status == KVIO_OK && w < count; w++) {
        const report_run_t *first = report->runs[w];
        if (done[w] || first->offered_rate <= 0 || first->admission[0] == '\0' ||
            !first->serving)
            continue;
        /* This workload's runs, and whether they span two rates. */
        size_t num_runs = 0;
        bool rates_differ = false;
        for (size_t r = w; r < count; r++) {
            report_run_t *run = report->runs[r];
            if (done[r] || run->offered_rate <= 0 || strcmp(run->sweep, first->sweep) != 0 ||
                !run->serving)
                continue;
            rates_differ = rates_differ || run->offered_rate != first->offered_rate;
            runs[num_runs++] = run;
            done[r] = true;
        }
        if (!rates_differ)
            continue;
        qsort(runs, num_runs, sizeof(*runs), compare_rate);
        for (size_t m = 0; m < sizeof(rate_metrics) / sizeof(rate_metrics[0]) && status == KVIO_OK;
             m++)
            status = rate_chart(report, &rate_metrics[m], first->name, charts, runs, num_runs);
        charts++;
    }
    free(runs);
    free(done);
    return status;
}

static kvio_status_t timeline_charts(kvio_report_t *report)
{
    report_chart_t *usage = NULL, *batch = NULL, *preemptions = NULL;
    size_t with = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        if (run->timeline == NULL || run->timeline->used == 0)
            continue;
        with++;
        if (usage == NULL) {
            usage = report_chart_new(report, CHART_LINES, "chart-kv-usage", "KV cache and batches",
                              "KV-cache usage over time", "time (s)", "KV blocks in use (%)");
            batch = report_chart_new(report, CHART_LINES, "chart-batch-size", "KV cache and batches",
                              "Batch size over time", "time (s)", "requests per iteration");
            preemptions = report_chart_new(report, CHART_LINES, "chart-preemptions",
                                    "KV cache and batches", "Preemptions over time", "time (s)",
                                    "preemptions so far (count)");
            if (usage == NULL || batch == NULL || preemptions == NULL)
                return KVIO_ERR_NOMEM;
            preemptions->y_integer = true;
            usage->y_fixed = true;
            usage->y_min = 0;
            usage->y_max = 100;
        }
        const timeline_t *timeline = run->timeline;
        chart_series_t *usage_series = report_series_add(usage, run->label, timeline->used, false);
        chart_series_t *batch_series = report_series_add(batch, run->label, timeline->used, false);
        chart_series_t *preempt_series =
            report_series_add(preemptions, run->label, timeline->used + 1, false);
        if (usage_series == NULL || batch_series == NULL || preempt_series == NULL)
            return KVIO_ERR_NOMEM;
        preempt_series->step = true;
        preempt_series->x[0] = 0;
        preempt_series->y[0] = 0;
        preempt_series->count = 1;
        double total = 0;
        for (size_t i = 0; i < timeline->used; i++) {
            const timeline_bin_t *bin = &timeline->bins[i];
            total += (double)bin->preempted;
            preempt_series->x[preempt_series->count] = (double)(i + 1) * timeline->width_s;
            preempt_series->y[preempt_series->count++] = total;
            if (bin->iterations == 0)
                continue;
            double middle = ((double)i + 0.5) * timeline->width_s;
            double kv = bin->weight > 0 ? bin->kv_weighted / bin->weight
                                        : bin->kv_sum / (double)bin->iterations;
            usage_series->x[usage_series->count] = middle;
            usage_series->y[usage_series->count++] = 100 * kv;
            batch_series->x[batch_series->count] = middle;
            batch_series->y[batch_series->count++] = bin->batch_sum / (double)bin->iterations;
        }
        char width[64];
        snprintf(width, sizeof(width), "%.3g s", timeline->width_s);
        snprintf(usage->caption, sizeof(usage->caption),
                 "From iterations.csv (first seed of each run): iterations binned on time (at "
                 "most %d bins; %s per bin for the last run), usage weighted by iteration "
                 "length, ranks together.",
                 KVIO_REPORT_MAX_POINTS, width);
        snprintf(batch->caption, sizeof(batch->caption),
                 "From iterations.csv: mean number of requests scheduled per iteration in each "
                 "time bin (%s for the last run), ranks together.",
                 width);
        snprintf(preemptions->caption, sizeof(preemptions->caption),
                 "From iterations.csv: running total of requests preempted (recompute or swap) "
                 "up to each time bin, ranks together.");
    }
    bool any_preemption = false;
    for (size_t s = 0; preemptions != NULL && s < preemptions->num_series; s++) {
        const chart_series_t *series = &preemptions->series[s];
        any_preemption = any_preemption || (series->count > 0 && series->y[series->count - 1] > 0);
    }
    if (preemptions != NULL && !any_preemption) {
        size_t length = strlen(preemptions->caption);
        snprintf(preemptions->caption + length, sizeof(preemptions->caption) - length,
                 " No run preempted a request.");
    }
    if (with == 0 && report->num_runs > 0)
        report_add_note(report, "KV usage, batch size and preemption charts skipped: no run has an "
                         "iterations.csv.");
    return KVIO_OK;
}

/* ---------- model updates ---------- */

#define UPDATE_SEGMENTS (UPDATE_STAGES - 1)
static const char *const segment_names[UPDATE_SEGMENTS] = {
    "checksum (ready to publish)", "publish (write, SET)", "discover (to transfer start)",
    "transfer", "notify", "verify", "activate",
};

/* The time each stage adds after every earlier stage (ms): never negative,
 * and the segments sum to t_activated - t_ready. A publish that ends after
 * the transfer started is the transfer itself (ucx puts while it
 * publishes): its end is not a stage of its own. */
static void update_segments(const update_row_t *row, double *segments_p)
{
    double reached = row->t[0];
    bool overlapped = row->has[UPDATE_PUBLISH_END] && row->has[UPDATE_XFER_START] &&
                      row->t[UPDATE_PUBLISH_END] > row->t[UPDATE_XFER_START];
    for (size_t k = 1; k < UPDATE_STAGES; k++) {
        segments_p[k - 1] = 0;
        if (!row->has[k] || (k == UPDATE_PUBLISH_END && overlapped))
            continue;
        if (row->t[k] > reached) {
            segments_p[k - 1] = (row->t[k] - reached) * 1e3;
            reached = row->t[k];
        }
    }
}

static int compare_version(const void *a, const void *b)
{
    const update_row_t *left = a, *right = b;
    return (left->version > right->version) - (left->version < right->version);
}

typedef struct stale_event {
    double time;
    double version;
    int rank; /* -1: a version became ready */
} stale_event_t;

static int compare_event(const void *a, const void *b)
{
    const stale_event_t *left = a, *right = b;
    if (left->time != right->time)
        return (left->time > right->time) - (left->time < right->time);
    return (left->rank > right->rank) - (left->rank < right->rank);
}

/* Versions behind: newest version ready minus the oldest version active on
 * any serve rank, starting from the version before the first in the file. */
static kvio_status_t staleness_series(const report_run_t *run, chart_series_t *series)
{
    size_t num_events = 2 * run->num_updates;
    stale_event_t *events = malloc(num_events * sizeof(*events));
    double *active = malloc(REPORT_MAX_RANKS * sizeof(double));
    int *ranks = malloc(REPORT_MAX_RANKS * sizeof(int));
    bool *seen = calloc(REPORT_MAX_RANKS, sizeof(bool));
    kvio_status_t status = KVIO_OK;
    if (events == NULL || active == NULL || ranks == NULL || seen == NULL) {
        status = KVIO_ERR_NOMEM;
        goto out;
    }
    double base = INFINITY;
    size_t num_ranks = 0;
    for (size_t i = 0; i < run->num_updates; i++) {
        const update_row_t *row = &run->updates[i];
        int rank = (int)row->rank;
        base = row->version < base ? row->version : base;
        events[2 * i] = (stale_event_t){row->t[0], row->version, -1};
        events[2 * i + 1] = (stale_event_t){row->t[UPDATE_ACTIVATED], row->version, rank};
        if (!seen[rank]) {
            seen[rank] = true;
            ranks[num_ranks++] = rank;
        }
    }
    base -= 1;
    for (size_t i = 0; i < num_ranks; i++)
        active[ranks[i]] = base;
    qsort(events, num_events, sizeof(*events), compare_event);
    double newest = base;
    double first = events[0].time, last = events[num_events - 1].time;
    size_t samples = num_events <= KVIO_REPORT_MAX_POINTS ? num_events : KVIO_REPORT_MAX_POINTS;
    size_t next = 0;
    series->count = 0;
    for (size_t s = 0; s < samples; s++) {
        /* Exact steps when there are few events; otherwise the value at
         * evenly spaced times. */
        double until = num_events <= KVIO_REPORT_MAX_POINTS
                           ? events[s].time
                           : first + (last - first) * (double)(s + 1) / (double)samples;
        size_t end = num_events <= KVIO_REPORT_MAX_POINTS ? s + 1 : num_events;
        while (next < end && events[next].time <= until) {
            const stale_event_t *event = &events[next++];
            if (event->rank < 0)
                newest = event->version > newest ? event->version : newest;
            else if (event->version > active[event->rank])
                active[event->rank] = event->version;
        }
        double oldest = INFINITY;
        for (size_t i = 0; i < num_ranks; i++)
            oldest = active[ranks[i]] < oldest ? active[ranks[i]] : oldest;
        series->x[series->count] = until;
        series->y[series->count++] = newest > oldest ? newest - oldest : 0;
    }
out:
    free(events);
    free(active);
    free(ranks);
    free(seen);
    return status;
}

/* The update latency (p50, p99) and bandwidth of every run with updates,
 * from summary.json; a log axis when they differ a hundredfold. */
static kvio_status_t update_latency_bars(kvio_report_t *report)
{
    size_t with = 0;
    double low = INFINITY, high = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        const run_metrics_t *seed = &report->runs[r]->seeds[0];
        if (report->runs[r]->num_seeds == 0 || !isfinite(seed->update_p50_ms))
            continue;
        with++;
        low = fmin(low, seed->update_p50_ms);
        high = fmax(high, seed->update_p99_ms);
    }
    if (with == 0)
        return KVIO_OK;
    report_chart_t *latency = report_chart_new(report, CHART_BARS, "chart-update-latency",
                                        "Model updates", "Model-update latency", "run",
                                        "update latency (ms)");
    report_chart_t *bandwidth = report_chart_new(report, CHART_BARS, "chart-update-bandwidth",
                                          "Model updates", "Model-update bandwidth", "run",
                                          "GB/s (1e9 bytes per second)");
    if (latency == NULL || bandwidth == NULL || report_categories_set(latency, with) != KVIO_OK ||
        report_categories_set(bandwidth, with) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    /* Adding a series may move the chart's others: pointers after both. */
    if (report_series_add(latency, "p50", with, false) == NULL ||
        report_series_add(latency, "p99", with, false) == NULL)
        return KVIO_ERR_NOMEM;
    chart_series_t *p50 = &latency->series[0], *p99 = &latency->series[1];
    chart_series_t *gbps = report_series_add(bandwidth, "mean over updates", with, false);
    if (gbps == NULL)
        return KVIO_ERR_NOMEM;
    bool modelled = false;
    for (size_t r = 0, column = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        if (run->num_seeds == 0 || !isfinite(run->seeds[0].update_p50_ms))
            continue;
        run_category(run, latency->categories[column], true);
        run_category(run, bandwidth->categories[column], true);
        modelled = modelled || run->modelled_updates;
        p50->y[column] = run->seeds[0].update_p50_ms;
        p99->y[column] = run->seeds[0].update_p99_ms;
        gbps->y[column] = run->seeds[0].update_gbps;
        column++;
    }
    p50->count = p99->count = gbps->count = with;
    latency->y_log = low > 0 && high > 30 * low;
    const char *model = modelled ? " (modelled): runs marked so are simulate runs, their times "
                                   "from the transport model's bandwidth and latency (each a "
                                   "default, set, or fitted to an emulate run; summary.json's "
                                   "modelled)."
                                 : "";
    snprintf(latency->caption, sizeof(latency->caption),
             "From summary.json (first seed): model_updates.update_latency_ms, t_ready to "
             "t_activated over updates and serve ranks.%s%s",
             latency->y_log ? " Log y axis: the runs differ more than thirtyfold." : "", model);
    snprintf(bandwidth->caption, sizeof(bandwidth->caption),
             "From summary.json (first seed): model_updates.bandwidth_gbps, the update's bytes "
             "over its transfer time.%s", model);
    return KVIO_OK;
}

static kvio_status_t update_charts(kvio_report_t *report)
{
    size_t with = 0;
    for (size_t r = 0; r < report->num_runs; r++)
        with += report->runs[r]->updates != NULL && report->runs[r]->num_updates > 0;
    if (with == 0) {
        if (report->num_runs > 0)
            report_add_note(report, "Model-update charts skipped: no run has an updates.csv with "
                             "updates (model updates ran in none of these results).");
        return KVIO_OK;
    }
    kvio_status_t status = update_latency_bars(report);
    if (status != KVIO_OK)
        return status;
    /* Mean breakdown per run, side by side, as shares: runs whose updates
     * differ a hundredfold (ucx and files) each show what takes their time;
     * the latencies themselves are the chart before. */
    report_chart_t *chart = report_chart_new(report, CHART_STACKED, "chart-update-breakdown",
                                      "Model updates", "Model-update latency breakdown (mean)",
                                      "run", "share of the update latency (%)");
    if (chart == NULL || report_categories_set(chart, with) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    for (size_t k = 0; k < UPDATE_SEGMENTS; k++)
        if (report_series_add(chart, segment_names[k], with, false) == NULL)
            return KVIO_ERR_NOMEM;
    chart->y_fixed = true;
    chart->y_min = 0;
    chart->y_max = 100;
    size_t column = 0;
    bool modelled = false;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        if (run->updates == NULL || run->num_updates == 0)
            continue;
        run_category(run, chart->categories[column], true);
        modelled = modelled || run->modelled_updates;
        double total = 0;
        for (size_t i = 0; i < run->num_updates; i++) {
            double segments[UPDATE_SEGMENTS];
            update_segments(&run->updates[i], segments);
            for (size_t k = 0; k < UPDATE_SEGMENTS; k++) {
                chart->series[k].y[column] += segments[k];
                total += segments[k];
            }
        }
        for (size_t k = 0; k < UPDATE_SEGMENTS && total > 0; k++)
            chart->series[k].y[column] *= 100 / total;
        column++;
    }
    for (size_t k = 0; k < UPDATE_SEGMENTS; k++)
        chart->series[k].count = with;
    snprintf(chart->caption, sizeof(chart->caption),
             "From updates.csv (first seed): each stage's share of the model-update latency "
             "t_activated - t_ready, over updates and serve ranks: the trainer's checksum "
             "(to t_publish_start), its publish (write and rename, or SETs; not shown where it "
             "is the transfer itself, as ucx's puts), until the server starts taking the bytes "
             "(a file poll), the transfer, notify, verify and activate.%s",
             modelled ? " (modelled): a simulate run's times come from the transport model." : "");

    /* Per update, one chart per run (at most 40 updates shown). */
    size_t shown_runs = 0;
    for (size_t r = 0; r < report->num_runs && shown_runs < 16; r++) {
        const report_run_t *run = report->runs[r];
        if (run->updates == NULL || run->num_updates == 0)
            continue;
        update_row_t *sorted = malloc(run->num_updates * sizeof(*sorted));
        if (sorted == NULL)
            return KVIO_ERR_NOMEM;
        memcpy(sorted, run->updates, run->num_updates * sizeof(*sorted));
        qsort(sorted, run->num_updates, sizeof(*sorted), compare_version);
        size_t num_versions = 0;
        for (size_t i = 0; i < run->num_updates; i++)
            num_versions += i == 0 || sorted[i].version != sorted[i - 1].version;
        size_t shown = num_versions < 40 ? num_versions : 40;
        char id[64], title[160];
        snprintf(id, sizeof(id), "chart-update-breakdown-%zu", shown_runs + 1);
        snprintf(title, sizeof(title), "Model-update latency per update: %s%s", run->label,
                 run->modelled_updates ? " (modelled)" : "");
        report_chart_t *per_update = report_chart_new(report, CHART_STACKED, id, "Model updates", title,
                                               "model version", "time from t_ready (ms)");
        if (per_update == NULL || report_categories_set(per_update, shown) != KVIO_OK) {
            free(sorted);
            return KVIO_ERR_NOMEM;
        }
        for (size_t k = 0; k < UPDATE_SEGMENTS; k++) {
            chart_series_t *series = report_series_add(per_update, segment_names[k], shown, false);
            if (series == NULL) {
                free(sorted);
                return KVIO_ERR_NOMEM;
            }
            series->count = shown;
        }
        /* Version v_index is shown when it lands on an evenly spaced pick. */
        size_t version_index = 0, start = 0, category = 0;
        for (size_t i = 1; i <= run->num_updates; i++) {
            if (i < run->num_updates && sorted[i].version == sorted[start].version)
                continue;
            size_t pick = shown > 1 ? category * (num_versions - 1) / (shown - 1) : 0;
            if (category < shown && version_index == pick) {
                snprintf(per_update->categories[category], REPORT_LABEL_MAX, "%.0f",
                         sorted[start].version);
                for (size_t j = start; j < i; j++) {
                    double segments[UPDATE_SEGMENTS];
                    update_segments(&sorted[j], segments);
                    for (size_t k = 0; k < UPDATE_SEGMENTS; k++)
                        per_update->series[k].y[category] += segments[k] / (double)(i - start);
                }
                category++;
            }
            version_index++;
            start = i;
        }
        free(sorted);
        snprintf(per_update->caption, sizeof(per_update->caption),
                 "From updates.csv: each model version, mean over serve ranks; %zu of %zu "
                 "versions shown%s%s.",
                 shown, num_versions, shown < num_versions ? " (evenly spaced)" : "",
                 run->updates_truncated ? "; only the first 100000 rows were read" : "");
        shown_runs++;
    }

    report_chart_t *staleness = report_chart_new(report, CHART_LINES, "chart-staleness",
                                          "Model updates", "Model staleness over time",
                                          "time (s)", "versions behind (count)");
    if (staleness == NULL)
        return KVIO_ERR_NOMEM;
    staleness->y_integer = true;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        if (run->updates == NULL || run->num_updates == 0)
            continue;
        chart_series_t *series =
            report_series_add(staleness, run->label, KVIO_REPORT_MAX_POINTS, false);
        if (series == NULL)
            return KVIO_ERR_NOMEM;
        series->step = true;
        status = staleness_series(run, series);
        if (status != KVIO_OK)
            return status;
    }
    snprintf(staleness->caption, sizeof(staleness->caption),
             "From updates.csv: the newest model version ready at the trainer (t_ready) minus "
             "the oldest version active on any serve rank (t_activated).");
    if (with < report->num_runs)
        report_add_note(report, "Model-update charts cover the %zu of %zu runs that have an "
                         "updates.csv.", with, report->num_runs);
    return KVIO_OK;
}

/* ---------- weight sync ---------- */

/* Where a run synced weights as tensors in buckets (weight_sync:): its
 * update's times, the measured stage sums when every such run measured
 * them (emulate), and the share of the weights put on the wire (deltas). */
static kvio_status_t sync_charts(kvio_report_t *report)
{
    size_t with = 0, measured = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        with += report->runs[r]->has_sync;
        measured += report->runs[r]->has_sync && report->runs[r]->sync_measured;
    }
    if (with == 0)
        return KVIO_OK;
    const bar_metric_t times[] = {
        {"trainer's last bucket staged", offsetof(run_metrics_t, sync_staged_ms), 1},
        {"last server done", offsetof(run_metrics_t, sync_update_ms), 1},
        {"stage (sum over buckets)", offsetof(run_metrics_t, sync_stage_ms), 1},
        {"transfer (sum)", offsetof(run_metrics_t, sync_transfer_ms), 1},
        {"reload (sum, per server)", offsetof(run_metrics_t, sync_reload_ms), 1},
    };
    bool sums = measured == with;
    kvio_status_t status = metric_bars(
        report, "Model updates", "chart-sync-times", "Weight sync per update (mean)", "ms",
        times, sums ? 5 : 2,
        sums ? "From summary.json model_updates.weight_sync (measured): from the first "
               "bucket's stage to the trainer's last bucket staged and to the last server's "
               "last reload, and each stage's time summed over the buckets; stages overlap "
               "when pipeline_depth is above 1, so the sums can exceed the update."
             : "From summary.json model_updates.weight_sync: from the first bucket's stage to "
               "the trainer's last bucket staged, and to the last server done.");
    const bar_metric_t wire[] = {
        {"bytes on the wire", offsetof(run_metrics_t, sync_wire_share), 100},
    };
    if (status == KVIO_OK)
        status = metric_bars(report, "Model updates", "chart-sync-wire",
                             "Weight sync bytes on the wire", "% of the weights", wire, 1,
                             "From summary.json model_updates.weight_sync: wire_bytes over "
                             "bytes; below 100 % with deltas (weight_sync.delta).");
    if (status == KVIO_OK && with < report->num_runs)
        report_add_note(report, "Weight-sync charts show 0 for the %zu of %zu runs without "
                         "weight_sync.", report->num_runs - with, report->num_runs);
    return status;
}

/* ---------- tier traffic ---------- */

static kvio_status_t tier_chart(kvio_report_t *report)
{
    size_t num_categories = 0, runs_with = 0;
    char fields[REPORT_MAX_TIER_FIELDS][REPORT_LABEL_MAX];
    size_t num_fields = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        num_categories += run->num_tiers;
        runs_with += run->num_tiers > 0;
        for (size_t t = 0; t < run->num_tiers; t++) {
            for (size_t f = 0; f < run->tiers[t].num_fields; f++) {
                bool known = false;
                for (size_t i = 0; i < num_fields && !known; i++)
                    known = strcmp(fields[i], run->tiers[t].field[f]) == 0;
                if (!known && num_fields < REPORT_MAX_TIER_FIELDS)
                    snprintf(fields[num_fields++], REPORT_LABEL_MAX, "%s",
                             run->tiers[t].field[f]);
            }
        }
    }
    if (num_categories == 0) {
        if (report->num_runs > 0)
            report_add_note(report, "Tier traffic chart skipped: no run's summary.json has "
                             "metrics.tiers (no host, Redis or file tier ran).");
        return KVIO_OK;
    }
    report_chart_t *chart = report_chart_new(report, CHART_BARS, "chart-tier-traffic", "Tier traffic",
                                      "KV-cache tier traffic", "tier", "GB (10^9 bytes)");
    if (chart == NULL || report_categories_set(chart, num_categories) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    for (size_t f = 0; f < num_fields; f++) {
        chart_series_t *series = report_series_add(chart, fields[f], num_categories, false);
        if (series == NULL)
            return KVIO_ERR_NOMEM;
        series->count = num_categories;
    }
    size_t category = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        for (size_t t = 0; t < run->num_tiers; t++, category++) {
            if (runs_with > 1)
                snprintf(chart->categories[category], REPORT_LABEL_MAX, "%.40s: %.40s",
                         run->label, run->tiers[t].name);
            else
                snprintf(chart->categories[category], REPORT_LABEL_MAX, "%s", run->tiers[t].name);
            for (size_t f = 0; f < run->tiers[t].num_fields; f++)
                for (size_t i = 0; i < num_fields; i++)
                    if (strcmp(fields[i], run->tiers[t].field[f]) == 0)
                        chart->series[i].y[category] = run->tiers[t].value[f] / 1e9;
        }
    }
    snprintf(chart->caption, sizeof(chart->caption),
             "From metrics.tiers of summary.json (first seed): bytes written to and read "
             "from each tier (per serve rank).");
    return KVIO_OK;
}

/* One line of a tier chart, the chart made on first use: the tier's reads
 * (d 0, solid) or writes (d 1, dashed), named by the run where there are
 * several; count points. NULL when out of memory. */
static chart_series_t *tier_series(kvio_report_t *report, report_chart_t **chart_p,
                                   const char *const texts[4], const report_run_t *run,
                                   const tier_traffic_t *tier, size_t d, size_t count)
{
    static const char *const directions[2] = {"read", "write"};
    if (*chart_p == NULL) {
        *chart_p = report_chart_new(report, CHART_LINES, texts[0], "Tier traffic", texts[1], texts[2],
                             texts[3]);
        if (*chart_p == NULL)
            return NULL;
    }
    char label[REPORT_LABEL_MAX];
    if (report->num_runs > 1)
        snprintf(label, sizeof(label), "%.30s: %.30s %s", run->label, tier->name, directions[d]);
    else
        snprintf(label, sizeof(label), "%.60s %s", tier->name, directions[d]);
    chart_series_t *series = report_series_add(*chart_p, label, count, false);
    if (series != NULL) {
        series->count = count;
        series->dashed = d == 1;
    }
    return series;
}

/* Each tier's read and write latency by percentile, the percentiles on a
 * scale of nines (a coarse CDF's tail: P50 at 0.3, P95 at 1.3, P99 at 2,
 * P99.9 at 3), one line per tier and direction. */
static kvio_status_t tier_latency_chart(kvio_report_t *report)
{
    static const double nines[TIER_QUANTILES] = {0.30103, 1.30103, 2, 3};
    static const char *const texts[4] = {
        "chart-tier-latency", "KV-cache tier latency by percentile",
        "percentile (nines: 1.3 = P95, 2 = P99, 3 = P99.9)", "latency (ms)"};
    report_chart_t *chart = NULL;
    size_t lines = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        for (size_t t = 0; t < run->num_tiers; t++) {
            for (size_t d = 0; d < 2 && lines < 16; d++) {
                if (!run->tiers[t].has_latency[d])
                    continue;
                chart_series_t *series =
                    tier_series(report, &chart, texts, run, &run->tiers[t], d, TIER_QUANTILES);
                if (series == NULL)
                    return KVIO_ERR_NOMEM;
                for (size_t q = 0; q < TIER_QUANTILES; q++) {
                    series->x[q] = nines[q];
                    series->y[q] = run->tiers[t].latency_ms[d][q];
                }
                lines++;
            }
        }
    }
    if (chart != NULL)
        snprintf(chart->caption, sizeof(chart->caption),
                 "From metrics.tiers of summary.json (first seed): each tier's P50, P95, P99 "
                 "and P99.9 latency per serve rank, reads solid, writes dashed (a block's "
                 "latency runs from its submission to its completion).");
    return KVIO_OK;
}

/* Each tier's read and write bandwidth, second by second from its first
 * transfer (emulate runs), one line per tier and direction. */
static kvio_status_t tier_bandwidth_chart(kvio_report_t *report)
{
    static const char *const texts[4] = {"chart-tier-bandwidth",
                                         "KV-cache tier bandwidth over time",
                                         "time from the tier's first transfer (s)",
                                         "GB/s (10^9 bytes)"};
    report_chart_t *chart = NULL;
    size_t lines = 0;
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        for (size_t t = 0; t < run->num_tiers; t++) {
            const tier_traffic_t *tier = &run->tiers[t];
            for (size_t d = 0; d < 2 && lines < 16 && tier->seconds > 0; d++) {
                chart_series_t *series =
                    tier_series(report, &chart, texts, run, tier, d, tier->seconds);
                if (series == NULL)
                    return KVIO_ERR_NOMEM;
                for (size_t i = 0; i < tier->seconds; i++) {
                    series->x[i] = (double)i + 0.5;
                    series->y[i] = tier->per_second[d][i];
                }
                lines++;
            }
        }
    }
    if (chart != NULL)
        snprintf(chart->caption, sizeof(chart->caption),
                 "From metrics.tiers of summary.json (first seed, emulate runs): the bytes each "
                 "tier read (solid) and wrote (dashed) in each second, counted when each "
                 "transfer ended, per serve rank.");
    return KVIO_OK;
}

/* ---------- cachesim ---------- */

static kvio_status_t cachesim_charts(kvio_report_t *report)
{
    for (size_t c = 0; c < report->num_cachesims; c++) {
        const report_cachesim_t *cachesim = report->cachesims[c];
        char id[64], title[160];
        snprintf(id, sizeof(id), "chart-hit-rate-capacity-%zu", c + 1);
        snprintf(title, sizeof(title), "Hit rate vs cache capacity: %s", cachesim->label);
        report_chart_t *chart = report_chart_new(report, CHART_LINES, id, "Prefix cache vs capacity",
                                          title, "capacity (blocks, log scale)",
                                          "token hit rate (%)");
        if (chart == NULL)
            return KVIO_ERR_NOMEM;
        chart->x_log = true;
        chart->y_fixed = true;
        chart->y_min = 0;
        chart->y_max = 100;
        double low = INFINITY, high = 0;
        for (size_t i = 0; i < cachesim->num_points; i++) {
            double capacity = cachesim->points[i].capacity_blocks;
            if (capacity > 0) {
                low = capacity < low ? capacity : low;
                high = capacity > high ? capacity : high;
            }
        }
        if (high == 0) {
            low = 1;
            high = 1000;
        } else if (low == high) {
            low /= 10;
            high *= 10;
        }
        /* One line per eviction policy (at most 16), a dashed line for its
         * unlimited capacity. */
        const char *policies[16];
        size_t num_policies = 0;
        for (size_t i = 0; i < cachesim->num_points && num_policies < 16; i++) {
            bool known = false;
            for (size_t p = 0; p < num_policies && !known; p++)
                known = strcmp(policies[p], cachesim->points[i].eviction) == 0;
            if (!known)
                policies[num_policies++] = cachesim->points[i].eviction;
        }
        for (size_t p = 0; p < num_policies; p++) {
            size_t finite = 0;
            double unlimited = -1;
            for (size_t i = 0; i < cachesim->num_points; i++) {
                if (strcmp(cachesim->points[i].eviction, policies[p]) != 0)
                    continue;
                if (cachesim->points[i].capacity_blocks > 0)
                    finite++;
                else
                    unlimited = cachesim->points[i].token_hit_rate;
            }
            if (finite > 0) {
                chart_series_t *series = report_series_add(chart, policies[p], finite, false);
                if (series == NULL)
                    return KVIO_ERR_NOMEM;
                series->color = (int)p + 1;
                /* Sorted by capacity: pairs packed as (capacity, rate). */
                double *pairs = malloc(2 * finite * sizeof(double));
                if (pairs == NULL)
                    return KVIO_ERR_NOMEM;
                size_t n = 0;
                for (size_t i = 0; i < cachesim->num_points; i++) {
                    const cachesim_point_t *point = &cachesim->points[i];
                    if (strcmp(point->eviction, policies[p]) == 0 && point->capacity_blocks > 0) {
                        pairs[2 * n] = point->capacity_blocks;
                        pairs[2 * n + 1] = 100 * point->token_hit_rate;
                        n++;
                    }
                }
                qsort(pairs, n, 2 * sizeof(double), kvio_compare_double);
                for (size_t i = 0; i < n; i++) {
                    series->x[i] = pairs[2 * i];
                    series->y[i] = pairs[2 * i + 1];
                }
                series->count = n;
                free(pairs);
            }
            if (unlimited >= 0) {
                char label[REPORT_LABEL_MAX];
                snprintf(label, sizeof(label), "%.60s, unlimited capacity", policies[p]);
                chart_series_t *series = report_series_add(chart, label, 2, false);
                if (series == NULL)
                    return KVIO_ERR_NOMEM;
                series->dashed = true;
                series->color = (int)p + 1;
                series->x[0] = low;
                series->x[1] = high;
                series->y[0] = series->y[1] = 100 * unlimited;
                series->count = 2;
            }
        }
        snprintf(chart->caption, sizeof(chart->caption),
                 "From %s (kvio cachesim --json): prompt tokens served from the cache over all "
                 "prompt tokens, per eviction policy and capacity; blocks of %.0f tokens.",
                 cachesim->label, cachesim->block_tokens);
    }
    return KVIO_OK;
}

/* ---------- kvio prefix ---------- */

/* Per prefix result: the hit rate as it is, without each cause and
 * without any (bars), and each turn's prompt against what it reused. */
static kvio_status_t prefix_charts(kvio_report_t *report)
{
    static const char section[] = "Where the prefix breaks";
    for (size_t p = 0; p < report->num_prefixes; p++) {
        const report_prefix_t *prefix = report->prefixes[p];
        char id[64], title[160];
        snprintf(id, sizeof(id), "chart-prefix-hits-%zu", p + 1);
        snprintf(title, sizeof(title), "Prefix cache hits and their causes: %s", prefix->label);
        report_chart_t *bars = report_chart_new(report, CHART_BARS, id, section, title, "",
                                         "prompt tokens from the cache (%)");
        if (bars == NULL || report_categories_set(bars, prefix->num_clusters + 2) != KVIO_OK)
            return KVIO_ERR_NOMEM;
        chart_series_t *series = report_series_add(bars, "hit rate", prefix->num_clusters + 2, false);
        if (series == NULL)
            return KVIO_ERR_NOMEM;
        double whole = prefix->prompt_tokens > 0 ? prefix->prompt_tokens : 1;
        snprintf(bars->categories[0], REPORT_LABEL_MAX, "as it is");
        series->y[0] = 100 * prefix->cached_tokens / whole;
        for (size_t c = 0; c < prefix->num_clusters; c++) {
            snprintf(bars->categories[c + 1], REPORT_LABEL_MAX, "without: %.50s",
                     prefix->clusters[c].place);
            series->y[c + 1] = 100 * prefix->clusters[c].cached_without / whole;
        }
        snprintf(bars->categories[prefix->num_clusters + 1], REPORT_LABEL_MAX, "without any");
        series->y[prefix->num_clusters + 1] = 100 * prefix->cached_without_breaks / whole;
        series->count = prefix->num_clusters + 2;
        bars->y_fixed = true;
        bars->y_min = 0;
        bars->y_max = 100;
        size_t at = (size_t)snprintf(bars->caption, sizeof(bars->caption),
                                     "From %s (kvio prefix --format json): %.0f of %.0f later "
                                     "turns break.",
                                     prefix->label, prefix->turns_with_breaks,
                                     prefix->later_turns);
        for (size_t c = 0; c < prefix->num_clusters && c < 3 && at < sizeof(bars->caption); c++)
            at += (size_t)snprintf(bars->caption + at, sizeof(bars->caption) - at,
                                   " %.0f at %s%s%s.", prefix->clusters[c].turns,
                                   prefix->clusters[c].place,
                                   prefix->clusters[c].example[0] ? ": " : "",
                                   prefix->clusters[c].example);
        snprintf(id, sizeof(id), "chart-prefix-turns-%zu", p + 1);
        snprintf(title, sizeof(title), "Each turn's prompt and what it reused: %s",
                 prefix->label);
        report_chart_t *lines = report_chart_new(report, CHART_LINES, id, section, title,
                                          "turn (in the log's order)", "tokens");
        if (lines == NULL)
            return KVIO_ERR_NOMEM;
        chart_series_t *prompt = report_series_add(lines, "prompt", prefix->num_turns, false);
        chart_series_t *reused = prompt ? report_series_add(lines, "reused from the previous turn",
                                                     prefix->num_turns, false)
                                        : NULL;
        if (reused == NULL)
            return KVIO_ERR_NOMEM;
        prompt = &lines->series[0]; /* series_add may have moved it */
        for (size_t t = 0; t < prefix->num_turns; t++) {
            prompt->x[t] = reused->x[t] = (double)t;
            prompt->y[t] = prefix->prompt[t];
            reused->y[t] = prefix->reused[t];
        }
        prompt->count = reused->count = prefix->num_turns;
        snprintf(lines->caption, sizeof(lines->caption),
                 "Each turn's prompt tokens and the prefix it shares with what its session's "
                 "previous turn left in the cache (its prompt and answer); a gap between the "
                 "lines is a break.");
    }
    return KVIO_OK;
}

/* ---------- kvio capacity ---------- */

/* SLO attainment against the load each capacity search probed, one line
 * per search (rates and users apart: their axes differ), the share asked
 * as a dashed line: where a line crosses it is the capacity. */
static kvio_status_t capacity_chart(kvio_report_t *report, bool users)
{
    report_chart_t *chart = NULL;
    double low = INFINITY, high = 0, attain = 0;
    size_t length = 0;
    for (size_t c = 0; c < report->num_capacities; c++) {
        const report_capacity_t *capacity = report->capacities[c];
        if (capacity->users != users)
            continue;
        if (chart == NULL) {
            chart = report_chart_new(report, CHART_LINES, users ? "chart-capacity-users" : "chart-capacity",
                              "SLO capacity",
                              users ? "SLO attainment vs users (closed loop)"
                                    : "SLO attainment vs offered rate",
                              users ? "users in flight"
                                    : "offered rate as measured (req/s, log scale)",
                              "requests within the SLO (%)");
            if (chart == NULL)
                return KVIO_ERR_NOMEM;
            chart->x_log = !users;
            chart->y_fixed = true;
            chart->y_min = 0;
            chart->y_max = 100;
            length = (size_t)snprintf(chart->caption, sizeof(chart->caption),
                                      "From kvio capacity: each probe's share of requests "
                                      "within the SLO (the mean over its seeds, warm-up "
                                      "left out); capacity, offered as measured:");
        }
        chart_series_t *series = report_series_add(chart, capacity->label, capacity->num_points, false);
        if (series == NULL)
            return KVIO_ERR_NOMEM;
        for (size_t i = 0; i < capacity->num_points; i++) {
            series->x[i] = capacity->load[i];
            series->y[i] = 100 * capacity->attainment[i];
            low = capacity->load[i] < low ? capacity->load[i] : low;
            high = capacity->load[i] > high ? capacity->load[i] : high;
        }
        series->count = capacity->num_points;
        attain = capacity->attain;
        if (length < sizeof(chart->caption))
            length += (size_t)snprintf(chart->caption + length, sizeof(chart->caption) - length,
                                       " %s %.4g %s;", capacity->label, capacity->capacity,
                                       users ? "users" : "req/s");
    }
    if (chart == NULL)
        return KVIO_OK;
    chart_series_t *target = report_series_add(chart, "share asked", 2, false);
    if (target == NULL)
        return KVIO_ERR_NOMEM;
    target->dashed = true;
    target->x[0] = low;
    target->x[1] = high > low ? high : low * 2;
    target->y[0] = target->y[1] = 100 * attain;
    target->count = 2;
    return KVIO_OK;
}

static kvio_status_t capacity_charts(kvio_report_t *report)
{
    kvio_status_t status = capacity_chart(report, false);
    return status == KVIO_OK ? capacity_chart(report, true) : status;
}

/* TTFT and prefix hit rate over time (requests by arrival), one line per
 * run, with a vertical mark at every activation of the first run with
 * updates: what each update does to serving. */
/* Most runs with updates that get their own TTFT and hit-rate charts. */
#define MAX_ACTIVATION_CHARTS 8

/* TTFT and prefix hit rate over time of one run with model updates, with
 * its own activations as dashed lines (index: the chart's number). */
static kvio_status_t activation_charts(kvio_report_t *report, const report_run_t *run,
                                       size_t index)
{
    char ttft_id[64], hits_id[64], ttft_title[160], hits_title[160];
    snprintf(ttft_id, sizeof(ttft_id), index == 0 ? "chart-ttft-over-time"
                                                  : "chart-ttft-over-time-%zu",
             index + 1);
    snprintf(hits_id, sizeof(hits_id), index == 0 ? "chart-hit-rate-over-time"
                                                  : "chart-hit-rate-over-time-%zu",
             index + 1);
    snprintf(ttft_title, sizeof(ttft_title), "TTFT over time, with the activations: %.100s",
             run->label);
    snprintf(hits_title, sizeof(hits_title), "Prefix hit rate over time, with the activations: "
             "%.90s", run->label);
    report_chart_t *ttft = report_chart_new(report, CHART_LINES, ttft_id, "Model updates", ttft_title,
                                     "arrival time (s)", "mean TTFT (ms)");
    report_chart_t *hits = report_chart_new(report, CHART_LINES, hits_id, "Model updates", hits_title,
                                     "arrival time (s)", "prompt tokens cached (%)");
    if (ttft == NULL || hits == NULL)
        return KVIO_ERR_NOMEM;
    hits->y_fixed = true;
    hits->y_min = 0;
    hits->y_max = 100;
    for (size_t i = 0; i < run->num_updates && ttft->num_marks < REPORT_MAX_MARKS; i++)
        if (run->updates[i].has[UPDATE_ACTIVATED])
            ttft->marks[ttft->num_marks++] = run->updates[i].t[UPDATE_ACTIVATED];
    qsort(ttft->marks, ttft->num_marks, sizeof(double), kvio_compare_double);
    hits->num_marks = ttft->num_marks;
    memcpy(hits->marks, ttft->marks, ttft->num_marks * sizeof(double));
    const timeline_t *arrivals = run->arrivals;
    /* About 120 points: neighbouring bins pooled. */
    size_t group = (arrivals->used + 119) / 120;
    group = group > 0 ? group : 1;
    size_t points = (arrivals->used + group - 1) / group;
    chart_series_t *ttft_series = report_series_add(ttft, run->label, points, false);
    chart_series_t *hit_series = report_series_add(hits, run->label, points, false);
    if (ttft_series == NULL || hit_series == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t first = 0; first < arrivals->used; first += group) {
        double ttft_sum = 0, cached = 0, input = 0;
        uint64_t requests = 0;
        for (size_t i = first; i < first + group && i < arrivals->used; i++) {
            ttft_sum += arrivals->bins[i].ttft_sum_s;
            requests += arrivals->bins[i].requests;
            cached += arrivals->bins[i].cached_tokens;
            input += arrivals->bins[i].input_tokens;
        }
        if (requests == 0)
            continue;
        double middle = ((double)first + (double)group / 2) * arrivals->width_s;
        ttft_series->x[ttft_series->count] = middle;
        ttft_series->y[ttft_series->count++] = 1e3 * ttft_sum / (double)requests;
        if (input > 0) {
            hit_series->x[hit_series->count] = middle;
            hit_series->y[hit_series->count++] = 100 * cached / input;
        }
    }
    const char *caption = "From requests.csv (first seed): requests binned on arrival (%.3g s "
                          "per point), serve ranks together; dashed lines: this run's %zu "
                          "activations (updates.csv t_activated, every serve rank). With "
                          "update.on_activate.cache: flush each activation empties the prefix "
                          "cache.";
    snprintf(ttft->caption, sizeof(ttft->caption), caption,
             arrivals->width_s * (double)group, ttft->num_marks);
    snprintf(hits->caption, sizeof(hits->caption), caption,
             arrivals->width_s * (double)group, hits->num_marks);
    return KVIO_OK;
}

/* Each run with updates gets its own charts: one run's activations drawn
 * over another's requests say nothing. */
static kvio_status_t interference_charts(kvio_report_t *report)
{
    size_t drawn = 0, skipped = 0;
    kvio_status_t status = KVIO_OK;
    for (size_t r = 0; r < report->num_runs && status == KVIO_OK; r++) {
        const report_run_t *run = report->runs[r];
        if (run->arrivals == NULL || run->arrivals->used == 0 || run->num_updates == 0)
            continue;
        if (drawn == MAX_ACTIVATION_CHARTS) {
            skipped++;
            continue;
        }
        status = activation_charts(report, run, drawn++);
    }
    if (status == KVIO_OK && skipped > 0)
        report_add_note(report, "TTFT and hit rate over time drawn for the first %d runs with model "
                         "updates; %zu more not drawn.", MAX_ACTIVATION_CHARTS, skipped);
    return status;
}

/* The share of values at or below each of about 200 points (sorts them). */
static kvio_status_t add_cdf(report_chart_t *chart, const char *label, double *values,
                             size_t count, bool dashed)
{
    qsort(values, count, sizeof(double), kvio_compare_double);
    size_t step = (count + 199) / 200;
    step = step > 0 ? step : 1;
    chart_series_t *series = report_series_add(chart, label, count / step + 2, false);
    if (series == NULL)
        return KVIO_ERR_NOMEM;
    series->dashed = dashed;
    series->step = true;
    for (size_t i = 0; i < count; i += step) {
        series->x[series->count] = values[i];
        series->y[series->count++] = 100.0 * (double)(i + 1) / (double)count;
    }
    series->x[series->count] = values[count - 1];
    series->y[series->count++] = 100;
    return KVIO_OK;
}

/* What updates cost against the control (runs whose files have it): the
 * distribution of each request's TTFT and E2EL difference, and per update
 * of the first such run the latency its requests gained and the serving
 * time it cost, at its activation. */
static kvio_status_t update_cost_charts(kvio_report_t *report)
{
    report_chart_t *cdf = NULL, *per_update = NULL;
    const report_run_t *first = NULL;
    for (size_t r = 0; r < report->num_runs; r++) {
        report_run_t *run = report->runs[r];
        if (run->num_deltas == 0)
            continue;
        if (cdf == NULL &&
            (cdf = report_chart_new(report, CHART_LINES, "chart-update-cost-cdf", "Model updates",
                             "What updates cost each request, against the control",
                             "with minus without updates (ms)", "requests at or below (%)")) ==
                NULL)
            return KVIO_ERR_NOMEM;
        char label[REPORT_LABEL_MAX + 16];
        snprintf(label, sizeof(label), "%s TTFT", run->label);
        kvio_status_t status = add_cdf(cdf, label, run->ttft_deltas, run->num_deltas, false);
        snprintf(label, sizeof(label), "%s E2EL", run->label);
        if (status == KVIO_OK)
            status = add_cdf(cdf, label, run->e2el_deltas, run->num_deltas, true);
        if (status != KVIO_OK)
            return status;
        if (first == NULL && run->num_updates > 0 && run->updates[0].has_cost)
            first = run;
    }
    if (cdf != NULL) {
        cdf->y_fixed = true;
        cdf->y_min = 0;
        cdf->y_max = 100;
        snprintf(cdf->caption, sizeof(cdf->caption),
                 "From requests.csv's ttft_delta_ms and e2el_delta_ms (first seed of each "
                 "run): each request served with updates minus the same request served "
                 "without (update.control: twin); a line at 0 up to 100 %% is no cost.");
    }
    if (first == NULL)
        return KVIO_OK;
    per_update = report_chart_new(report, CHART_LINES, "chart-update-cost-per-update",
                           "Model updates", "What each update cost, against the control",
                           "activation (s)", "ms");
    if (per_update == NULL)
        return KVIO_ERR_NOMEM;
    if (report_series_add(per_update, "latency its requests gained (sum)", first->num_updates,
                   false) == NULL ||
        report_series_add(per_update, "serving time lost (stall)", first->num_updates, false) == NULL)
        return KVIO_ERR_NOMEM;
    /* Taken after both: adding a series moves the array. */
    chart_series_t *added = &per_update->series[0], *stall = &per_update->series[1];
    stall->dashed = true;
    for (size_t i = 0; i < first->num_updates; i++) {
        const update_row_t *row = &first->updates[i];
        if (!row->has[UPDATE_ACTIVATED])
            continue;
        added->x[added->count] = row->t[UPDATE_ACTIVATED];
        added->y[added->count++] = row->added_e2el_ms;
        stall->x[stall->count] = row->t[UPDATE_ACTIVATED];
        stall->y[stall->count++] = row->stall_ms;
    }
    snprintf(per_update->caption, sizeof(per_update->caption),
             "From updates.csv of %s: per update and serve rank, at its activation, the "
             "end-to-end latency the requests attributed to it gained against the control "
             "(added_e2el_ms) and the serving time it cost its rank (stall_*_ms).",
             first->label);
    return KVIO_OK;
}

/* Runs a line chart draws together: the palette's colours, each line solid. */
#define RUNS_PER_PANEL 8

/* A line chart of many runs (a compare of 16) is a tangle of colours and
 * dashes: it is split into panels of RUNS_PER_PANEL lines, "(runs 1-8)",
 * "(runs 9-16)", on the same axes so that they read side by side. */
static kvio_status_t split_crowded(kvio_report_t *report)
{
    for (size_t c = 0; c < report->num_charts; c++) {
        report_chart_t *chart = report->charts[c];
        if (chart->kind != CHART_LINES || chart->num_series <= RUNS_PER_PANEL)
            continue;
        size_t panels = (chart->num_series + RUNS_PER_PANEL - 1) / RUNS_PER_PANEL;
        if (report->num_charts + panels - 1 > REPORT_MAX_CHARTS)
            return KVIO_OK; /* as it is: drawn whole */
        double x_low = INFINITY, x_high = -INFINITY, y_low = INFINITY, y_high = -INFINITY;
        for (size_t s = 0; s < chart->num_series; s++) {
            const chart_series_t *series = &chart->series[s];
            for (size_t i = 0; i < series->count; i++) {
                x_low = fmin(x_low, series->x[i]);
                x_high = fmax(x_high, series->x[i]);
                y_low = fmin(y_low, series->y[i]);
                y_high = fmax(y_high, series->y[i]);
            }
        }
        if (!chart->x_log && !chart->x_fixed && isfinite(x_low) && x_high > x_low) {
            chart->x_fixed = true;
            chart->x_min = x_low;
            chart->x_max = x_high;
        }
        if (!chart->y_fixed && isfinite(y_low) && y_high > y_low) {
            chart->y_fixed = true;
            chart->y_min = fmin(y_low, 0);
            chart->y_max = y_high * 1.05;
        }
        report_chart_t *parts[REPORT_MAX_CHARTS];
        parts[0] = chart;
        for (size_t p = 1; p < panels; p++) {
            parts[p] = malloc(sizeof(report_chart_t));
            chart_series_t *series = malloc(RUNS_PER_PANEL * sizeof(chart_series_t));
            if (parts[p] == NULL || series == NULL) {
                free(series);
                free(parts[p]);
                while (--p > 0) { /* the series' points are still the chart's */
                    free(parts[p]->series);
                    free(parts[p]);
                }
                return KVIO_ERR_NOMEM;
            }
            *parts[p] = *chart;
            size_t first = p * RUNS_PER_PANEL;
            size_t count = chart->num_series - first < RUNS_PER_PANEL ? chart->num_series - first
                                                                       : RUNS_PER_PANEL;
            memcpy(series, chart->series + first, count * sizeof(chart_series_t));
            parts[p]->series = series;
            parts[p]->num_series = count;
            parts[p]->categories = NULL;
            snprintf(parts[p]->id, sizeof(parts[p]->id), "%.50s-%u", chart->id, (unsigned)(p + 1));
        }
        size_t total = chart->num_series;
        chart->num_series = RUNS_PER_PANEL;
        char title[sizeof(chart->title)];
        snprintf(title, sizeof(title), "%s", chart->title);
        for (size_t p = 0; p < panels; p++) {
            size_t last = (p + 1) * RUNS_PER_PANEL < total ? (p + 1) * RUNS_PER_PANEL : total;
            /* Counts as unsigned: a few panels of runs, and the title then
             * provably fits. */
            snprintf(parts[p]->title, sizeof(parts[p]->title), "%.110s (runs %u-%u of %u)",
                     title, (unsigned)(p * RUNS_PER_PANEL + 1), (unsigned)last,
                     (unsigned)total);
        }
        memmove(&report->charts[c + panels], &report->charts[c + 1],
                (report->num_charts - c - 1) * sizeof(report->charts[0]));
        for (size_t p = 1; p < panels; p++)
            report->charts[c + p] = parts[p];
        report->num_charts += panels - 1;
        c += panels - 1;
    }
    return KVIO_OK;
}


/* Prefill/decode runs: their mean TTFT stacked in its parts (first seed). */
static kvio_status_t pd_chart(kvio_report_t *report)
{
    size_t with = 0;
    for (size_t r = 0; r < report->num_runs; r++)
        with += report->runs[r]->num_seeds > 0 && isfinite(report->runs[r]->seeds[0].pd_parts_ms[0]);
    if (with == 0)
        return KVIO_OK;
    report_chart_t *chart = report_chart_new(report, CHART_STACKED, "chart-pd-ttft-parts",
                                      "Prefill/decode disaggregation",
                                      "Mean TTFT in its parts", "run", "mean TTFT (ms)");
    if (chart == NULL || report_categories_set(chart, with) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    static const char *const labels[5] = {"prefill queue", "prefill", "decode queue",
                                          "KV transfer", "first decode step"};
    for (size_t k = 0; k < 5; k++)
        if (report_series_add(chart, labels[k], with, false) == NULL)
            return KVIO_ERR_NOMEM;
    for (size_t r = 0, column = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        if (run->num_seeds == 0 || !isfinite(run->seeds[0].pd_parts_ms[0]))
            continue;
        run_category(run, chart->categories[column], false);
        for (size_t k = 0; k < 5; k++)
            chart->series[k].y[column] = run->seeds[0].pd_parts_ms[k];
        column++;
    }
    for (size_t k = 0; k < 5; k++)
        chart->series[k].count = with;
    snprintf(chart->caption, sizeof(chart->caption),
             "From summary.json (first seed): metrics.pd.mean_ttft_parts_ms over the measured "
             "requests; the parts add up to the mean TTFT. The KV transfer is the exposed part "
             "(emulate: the prefill rank's staging copy, then the decode rank's load).");
    return KVIO_OK;
}

kvio_status_t report_build(kvio_report_t *report)
{
    if (report->built)
        return KVIO_OK;
    kvio_status_t status = latency_cdfs(report);
    if (status == KVIO_OK)
        status = serving_bars(report);
    if (status == KVIO_OK)
        status = rate_charts(report);
    if (status == KVIO_OK)
        status = timeline_charts(report);
    if (status == KVIO_OK)
        status = cachesim_charts(report);
    if (status == KVIO_OK)
        status = prefix_charts(report);
    if (status == KVIO_OK)
        status = capacity_charts(report);
    if (status == KVIO_OK)
        status = update_charts(report);
    if (status == KVIO_OK)
        status = sync_charts(report);
    if (status == KVIO_OK)
        status = interference_charts(report);
    if (status == KVIO_OK)
        status = update_cost_charts(report);
    if (status == KVIO_OK)
        status = report_paired_charts(report);
    if (status == KVIO_OK)
        status = tier_chart(report);
    if (status == KVIO_OK)
        status = tier_latency_chart(report);
    if (status == KVIO_OK)
        status = tier_bandwidth_chart(report);
    if (status == KVIO_OK)
        status = pd_chart(report);
    if (status == KVIO_OK)
        status = report_mlperf_charts(report);
    if (status == KVIO_OK)
        status = split_crowded(report);
    if (status != KVIO_OK) {
        report_charts_clear(report);
        return status;
    }
    report->built = true;
    return KVIO_OK;
}

void report_charts_clear(kvio_report_t *report)
{
    for (size_t i = 0; i < report->num_charts; i++)
        report_chart_free(report->charts[i]);
    report->num_charts = 0;
    report->num_notes = 0;
    report->built = false;
}
