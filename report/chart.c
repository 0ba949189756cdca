/* A chart's parts, which every chart builder (charts.c for runs,
 * cachesim and capacity; paired.c; mlperf.c) puts together: a chart added
 * to the report, its series and categories, and the page's notes. */
#include "report/report_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void report_chart_free(report_chart_t *chart)
{
    if (chart == NULL)
        return;
    for (size_t i = 0; i < chart->num_series; i++) {
        free(chart->series[i].x);
        free(chart->series[i].y);
        free(chart->series[i].low);
        free(chart->series[i].high);
    }
    free(chart->series);
    free(chart->categories);
    free(chart);
}

void report_add_note(kvio_report_t *report, const char *fmt, ...)
{
    if (report->num_notes == REPORT_MAX_NOTES)
        return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(report->notes[report->num_notes++], sizeof(report->notes[0]), fmt, args);
    va_end(args);
}

report_chart_t *report_chart_new(kvio_report_t *report, chart_kind_t kind, const char *id,
                                 const char *section, const char *title, const char *x_label,
                                 const char *y_label)
{
    if (report->num_charts == REPORT_MAX_CHARTS)
        return NULL;
    report_chart_t *chart = calloc(1, sizeof(*chart));
    if (chart == NULL)
        return NULL;
    chart->kind = kind;
    snprintf(chart->id, sizeof(chart->id), "%s", id);
    snprintf(chart->section, sizeof(chart->section), "%s", section);
    report_label_copy(chart->title, sizeof(chart->title), title);
    snprintf(chart->x_label, sizeof(chart->x_label), "%s", x_label);
    snprintf(chart->y_label, sizeof(chart->y_label), "%s", y_label);
    report->charts[report->num_charts++] = chart;
    return chart;
}

/* Adds a series of count points (lines) or one value per category (bars). */
chart_series_t *report_series_add(report_chart_t *chart, const char *label, size_t count,
                                  bool whiskers)
{
    chart_series_t *series = realloc(chart->series, (chart->num_series + 1) * sizeof(*series));
    if (series == NULL)
        return NULL;
    chart->series = series;
    chart_series_t *added = &series[chart->num_series];
    memset(added, 0, sizeof(*added));
    report_label_copy(added->label, sizeof(added->label), label);
    size_t allocated = count > 0 ? count : 1;
    added->x = calloc(allocated, sizeof(double));
    added->y = calloc(allocated, sizeof(double));
    if (whiskers) {
        added->low = calloc(allocated, sizeof(double));
        added->high = calloc(allocated, sizeof(double));
    }
    if (added->x == NULL || added->y == NULL ||
        (whiskers && (added->low == NULL || added->high == NULL))) {
        free(added->x);
        free(added->y);
        free(added->low);
        free(added->high);
        return NULL;
    }
    chart->num_series++;
    return added;
}

kvio_status_t report_categories_set(report_chart_t *chart, size_t count)
{
    chart->categories = calloc(count > 0 ? count : 1, sizeof(*chart->categories));
    if (chart->categories == NULL)
        return KVIO_ERR_NOMEM;
    chart->num_categories = count;
    return KVIO_OK;
}
