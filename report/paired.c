/* The paired-control result in a report (update.control: paired, emulate):
 * DIR/summary.json holds the updates' cost averaged over pairs of runs (the
 * coupled run and its no-update twin), each figure's 95 % interval beside
 * it and every pair's value (update_cost.per_pair); DIR/pair-<i>-with and
 * pair-<i>-without are the pairs' whole runs. Read through the one loader;
 * which figures are averaged, and which figure holds each one's interval,
 * come from the declaration (a figure NAME's interval is NAME_ci95), never
 * from a list of keys here. Drawn as a bar chart per unit: each cost's
 * mean with its interval, and beside it each pair's value. */
#include "report/report_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The suffix that names a figure's 95 % interval over the pairs. */
#define INTERVAL_SUFFIX "_ci95"

void report_paired_free(report_paired_t *paired)
{
    free(paired);
}

/* The figure whose interval figure is, or KVIO_FIGURE_NONE. */
static kvio_figure_t interval_of(kvio_figure_t interval)
{
    const char *name = kvio_figure_decl(interval)->name;
    size_t length = strlen(name), suffix = strlen(INTERVAL_SUFFIX);
    if (length <= suffix || strcmp(name + length - suffix, INTERVAL_SUFFIX) != 0)
        return KVIO_FIGURE_NONE;
    char base[160];
    snprintf(base, sizeof(base), "%.*s", (int)(length - suffix), name);
    return kvio_figure_find(base);
}

/* Every pair's value of figure (update_cost.per_pair, keyed by the
 * figure's name; null where a pair lacks it) into out. */
static kvio_status_t load_pairs(const kvio_result_t *result, paired_figure_t *out,
                                size_t num_pairs, const char *path, char *error_p,
                                size_t error_len)
{
    const char *name = kvio_figure_decl(out->figure)->name;
    const json_t *values = json_object_get(kvio_result_detail(result, "update_cost.per_pair"),
                                           name);
    out->num_pairs = 0;
    if (values == NULL)
        return KVIO_OK;
    if (!json_is_array(values) || json_array_size(values) != num_pairs) {
        snprintf(error_p, error_len, "%s: metrics.update_cost.per_pair.%s is not a list of "
                 "update_cost.pairs (%zu) values", path, name, num_pairs);
        return KVIO_ERR_PARSE;
    }
    for (size_t p = 0; p < num_pairs; p++) {
        const json_t *value = json_array_get(values, p);
        double number = json_number_value(value);
        if (!json_is_null(value) &&
            (!json_is_number(value) || !isfinite(number) || fabs(number) > REPORT_VALUE_LIMIT)) {
            snprintf(error_p, error_len, "%s: metrics.update_cost.per_pair.%s[%zu] is not a "
                     "number in range", path, name, p);
            return KVIO_ERR_PARSE;
        }
        out->pairs[p] = json_is_null(value) ? NAN : number;
    }
    out->num_pairs = num_pairs;
    return KVIO_OK;
}

/* The figures averaged over the pairs (those with an interval) into
 * paired, in the declaration's order. */
static kvio_status_t load_figures(const kvio_result_t *result, report_paired_t *paired,
                                  const char *path, char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    for (int f = 0; f < kvio_num_figures() && status == KVIO_OK; f++) {
        kvio_figure_t figure = interval_of((kvio_figure_t)f);
        if (figure == KVIO_FIGURE_NONE || !kvio_result_has(result, figure))
            continue;
        if (paired->num_figures == REPORT_MAX_PAIRED_FIGURES)
            break;
        paired_figure_t *out = &paired->figures[paired->num_figures];
        out->figure = figure;
        status = report_figure(result, figure, "metrics.", path, true, 0, &out->mean, error_p,
                               error_len);
        if (status == KVIO_OK)
            status = report_figure(result, (kvio_figure_t)f, "metrics.", path, true, 0,
                                   &out->ci95, error_p, error_len);
        if (status == KVIO_OK && out->ci95 < 0) {
            snprintf(error_p, error_len, "%s: metrics.%s is negative (%g)", path,
                     kvio_figure_decl((kvio_figure_t)f)->name, out->ci95);
            status = KVIO_ERR_PARSE;
        }
        if (status == KVIO_OK)
            status = load_pairs(result, out, paired->num_pairs, path, error_p, error_len);
        if (status == KVIO_OK)
            paired->num_figures++;
    }
    return status;
}

/* The pairs' seeds, from the summary's list of pairs (detail). */
static void load_seeds(const kvio_result_t *result, report_paired_t *paired)
{
    for (size_t p = 0; p < paired->num_pairs; p++) {
        const json_t *seed = kvio_result_detail(kvio_result_child_at(result, "pairs", p), "seed");
        paired->seeds[p] = json_is_integer(seed) ? (long long)json_integer_value(seed) : -1;
    }
}

kvio_status_t report_paired_load(kvio_report_t *report, const char *dir, const char *label,
                                 char *error_p, size_t error_len)
{
    json_t *summary = NULL;
    kvio_result_t *result = NULL;
    kvio_status_t status = report_summary_load(dir, &summary, &result, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    report_paired_t *paired = NULL;
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    double pairs = 0;
    if (!kvio_result_has(result, KVIO_FIG_COST_PAIRS)) {
        status = KVIO_INPROGRESS; /* a run's summary, not a paired result */
        goto out;
    }
    status = report_figure(result, KVIO_FIG_COST_PAIRS, "metrics.", path, true, 0, &pairs,
                           error_p, error_len);
    if (status == KVIO_OK && (pairs < 1 || pairs > REPORT_MAX_PAIRS || pairs != floor(pairs))) {
        snprintf(error_p, error_len, "%s: metrics.update_cost.pairs is %g (1..%d)", path, pairs,
                 REPORT_MAX_PAIRS);
        status = KVIO_ERR_PARSE;
    }
    if (status == KVIO_OK && report->num_paireds == KVIO_REPORT_MAX_RUNS) {
        snprintf(error_p, error_len, "%s: more than %d paired results in one report", dir,
                 KVIO_REPORT_MAX_RUNS);
        status = KVIO_ERR_INVALID;
    }
    if (status == KVIO_OK && (paired = calloc(1, sizeof(*paired))) == NULL)
        status = KVIO_ERR_NOMEM;
    if (status != KVIO_OK)
        goto out;
    report_label_copy(paired->label, sizeof(paired->label), label);
    snprintf(paired->dir, sizeof(paired->dir), "%s", dir);
    paired->num_pairs = (size_t)pairs;
    status = load_figures(result, paired, path, error_p, error_len);
    if (status == KVIO_OK && paired->num_figures == 0) {
        snprintf(error_p, error_len, "%s: update.control: paired, but no figure has its 95 %% "
                 "interval (the pairs failed?)", path);
        status = KVIO_ERR_PARSE;
    }
    if (status != KVIO_OK)
        goto out;
    load_seeds(result, paired);
    report_label_copy(paired->host, sizeof(paired->host),
                      json_string_value(json_object_get(json_object_get(summary, "host"),
                                                        "hostname")));
    report_label_copy(paired->commit, sizeof(paired->commit),
                      json_string_value(json_object_get(json_object_get(summary, "build"),
                                                        "commit")));
    report_verdict(result, paired->verdict, sizeof(paired->verdict));
    report->paireds[report->num_paireds++] = paired;
    paired = NULL;
out:
    report_paired_free(paired);
    kvio_result_destroy(result);
    json_decref(summary);
    return status;
}

/* The chart's category of a figure: its name below its group
 * ("update_cost.ttft_p99_ms.delta": "ttft_p99_ms.delta"). */
static void category_of(kvio_figure_t figure, char *category_p)
{
    const char *name = kvio_figure_decl(figure)->name;
    const char *dot = strchr(name, '.');
    report_label_copy(category_p, REPORT_LABEL_MAX, dot != NULL ? dot + 1 : name);
}

/* One chart of paired's figures of one kind (fractions: in percentage
 * points; else ms): the mean with its interval, then each pair. */
static kvio_status_t paired_chart(kvio_report_t *report, const report_paired_t *paired,
                                  size_t index, bool fractions)
{
    const paired_figure_t *shown[REPORT_MAX_PAIRED_FIGURES];
    size_t count = 0;
    for (size_t f = 0; f < paired->num_figures; f++) {
        bool fraction = kvio_figure_decl(paired->figures[f].figure)->kind == KVIO_KIND_FRACTION;
        if (fraction == fractions)
            shown[count++] = &paired->figures[f];
    }
    if (count == 0)
        return KVIO_OK;
    char id[64], title[REPORT_LABEL_MAX + 96];
    const char *kind = fractions ? "hit-rate" : "cost";
    if (index == 0)
        snprintf(id, sizeof(id), "chart-paired-%s", kind);
    else
        snprintf(id, sizeof(id), "chart-paired-%s-%zu", kind, index + 1);
    snprintf(title, sizeof(title), "%s over %zu pairs, with 95 %% intervals: %s",
             fractions ? "Hit-rate change by the updates" : "What the updates cost",
             paired->num_pairs, paired->label);
    report_chart_t *chart =
        report_chart_new(report, CHART_BARS, id, "Model updates", title, "figure",
                         fractions ? "with minus without (percentage points)"
                                   : "with minus without updates (ms)");
    if (chart == NULL || report_categories_set(chart, count) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    chart->y_signed = true;
    double scale = fractions ? 100 : 1;
    chart_series_t *mean = report_series_add(chart, "mean of the pairs (whiskers: 95 % interval)",
                                             count, true);
    if (mean == NULL)
        return KVIO_ERR_NOMEM;
    mean->count = count;
    for (size_t c = 0; c < count; c++) {
        category_of(shown[c]->figure, chart->categories[c]);
        chart->series[0].y[c] = shown[c]->mean * scale;
        chart->series[0].low[c] = (shown[c]->mean - shown[c]->ci95) * scale;
        chart->series[0].high[c] = (shown[c]->mean + shown[c]->ci95) * scale;
    }
    for (size_t p = 0; p < paired->num_pairs; p++) {
        char label[64];
        if (paired->seeds[p] >= 0)
            snprintf(label, sizeof(label), "pair %zu (seed %lld)", p + 1, paired->seeds[p]);
        else
            snprintf(label, sizeof(label), "pair %zu", p + 1);
        chart_series_t *pair = report_series_add(chart, label, count, false);
        if (pair == NULL)
            return KVIO_ERR_NOMEM;
        pair->count = count;
        for (size_t c = 0; c < count; c++)
            pair->y[c] = p < shown[c]->num_pairs ? shown[c]->pairs[p] * scale : NAN;
    }
    snprintf(chart->caption, sizeof(chart->caption),
             "From %.96s/summary.json (update.control: paired): the coupled run minus its "
             "no-update twin (same stream and ranks, the trainer publishing nothing). First "
             "the mean over the %zu pairs with its 95 %% interval (Student's t; one that holds "
             "0 is within the machine's noise), then each pair's value. The pairs' own runs "
             "(pair-N-with, pair-N-without) are runs to kvio report.",
             paired->dir, paired->num_pairs);
    return KVIO_OK;
}

kvio_status_t report_paired_charts(kvio_report_t *report)
{
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < report->num_paireds && status == KVIO_OK; i++) {
        status = paired_chart(report, report->paireds[i], i, false);
        if (status == KVIO_OK)
            status = paired_chart(report, report->paireds[i], i, true);
    }
    return status;
}
