/* kvio mlperf's result in a report: DIR/mlperf.json (MLPerf Storage v3.0's
 * KV-cache benchmark as mlpstorage runs it) gives per option the scored
 * aggregates under v3.0's names (docs/mlperf.md); they are mlperf.json's
 * own keys, not kvio figures. Drawn per option: the storage bandwidths,
 * the storage throughput in tokens per second and the device P95s. */
#include "report/report_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The scored aggregates drawn, in mlperf_option_t.value's order. */
static const char *const scored[REPORT_MLPERF_FIGURES] = {
    "aggregated_read_bandwidth_gbps", "aggregated_write_bandwidth_gbps",
    "aggregated_storage_throughput_tokens_per_sec", "aggregated_device_read_p95_ms",
    "aggregated_device_write_p95_ms",
};
#define MLPERF_MAX_OPTIONS (sizeof(((report_mlperf_t *)0)->options) / sizeof(mlperf_option_t))

void report_mlperf_free(report_mlperf_t *mlperf)
{
    free(mlperf);
}

/* Every option of mlperf.json (at path) into mlperf. */
static kvio_status_t load_options(const json_t *json, const char *path, report_mlperf_t *mlperf,
                                  char *error_p, size_t error_len)
{
    const json_t *options = json_object_get(json, "options");
    if (!json_is_array(options) || json_array_size(options) == 0 ||
        json_array_size(options) > MLPERF_MAX_OPTIONS) {
        snprintf(error_p, error_len, "%s: options is not a list of 1..%zu options", path,
                 MLPERF_MAX_OPTIONS);
        return KVIO_ERR_PARSE;
    }
    kvio_status_t status = KVIO_OK;
    for (size_t o = 0; o < json_array_size(options) && status == KVIO_OK; o++) {
        const json_t *option = json_array_get(options, o);
        char where[32];
        snprintf(where, sizeof(where), "options[%zu].", o);
        double number = 0;
        status = report_json_number(option, "option", where, path, true, &number, error_p,
                                    error_len);
        const char *name = json_string_value(json_object_get(option, "name"));
        char text[REPORT_LABEL_MAX];
        snprintf(text, sizeof(text), "%.0f %.60s", number, name != NULL ? name : "?");
        report_label_copy(mlperf->options[o].name, REPORT_LABEL_MAX, text);
        for (size_t k = 0; k < REPORT_MLPERF_FIGURES && status == KVIO_OK; k++) {
            double *value = &mlperf->options[o].value[k];
            status = report_json_number(option, scored[k], where, path, true, value, error_p,
                                        error_len);
            if (status == KVIO_OK && *value < 0) {
                snprintf(error_p, error_len, "%s: %s%s is negative (%g)", path, where, scored[k],
                         *value);
                status = KVIO_ERR_PARSE;
            }
        }
        mlperf->num_options = o + 1;
    }
    return status;
}

kvio_status_t report_mlperf_load(kvio_report_t *report, const char *dir, const char *label,
                                 char *error_p, size_t error_len)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/mlperf.json", dir);
    json_t *json = NULL;
    kvio_status_t status = report_json_load(path, &json, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    report_mlperf_t *mlperf = NULL;
    const char *kind = json_string_value(json_object_get(json, "kind"));
    const json_t *schema = json_object_get(json, "schema_version");
    if (kind == NULL || strcmp(kind, "kvio-mlperf") != 0) {
        snprintf(error_p, error_len, "%s: not a kvio mlperf result (kind is not kvio-mlperf)",
                 path);
        status = KVIO_ERR_PARSE;
    } else if (json_is_integer(schema) && json_integer_value(schema) > KVIO_SCHEMA_VERSION) {
        snprintf(error_p, error_len, "%s: schema_version %lld is newer than this kvio reads "
                 "(%d): use the kvio that wrote it", path, (long long)json_integer_value(schema),
                 KVIO_SCHEMA_VERSION);
        status = KVIO_ERR_PARSE;
    } else if (report->num_mlperfs == KVIO_REPORT_MAX_RUNS) {
        snprintf(error_p, error_len, "%s: more than %d mlperf results in one report", dir,
                 KVIO_REPORT_MAX_RUNS);
        status = KVIO_ERR_INVALID;
    } else if ((mlperf = calloc(1, sizeof(*mlperf))) == NULL) {
        status = KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK)
        status = load_options(json, path, mlperf, error_p, error_len);
    if (status == KVIO_OK) {
        report_label_copy(mlperf->label, sizeof(mlperf->label), label);
        snprintf(mlperf->dir, sizeof(mlperf->dir), "%s", dir);
        report_label_copy(mlperf->host, sizeof(mlperf->host),
                          json_string_value(json_object_get(json_object_get(json, "host"),
                                                            "hostname")));
        report_label_copy(mlperf->commit, sizeof(mlperf->commit),
                          json_string_value(json_object_get(json_object_get(json, "build"),
                                                            "commit")));
        report_label_copy(mlperf->division, sizeof(mlperf->division),
                          json_string_value(json_object_get(json, "division")));
        mlperf->clients = json_integer_value(json_object_get(json, "clients"));
        mlperf->trials = json_integer_value(json_object_get(json, "trials"));
        report->mlperfs[report->num_mlperfs++] = mlperf;
        mlperf = NULL;
    }
    report_mlperf_free(mlperf);
    json_decref(json);
    return status;
}

/* One chart: a bar per option of every result, a series per figure. */
static kvio_status_t mlperf_chart(kvio_report_t *report, const char *id, const char *title,
                                  const char *y_label, const size_t *figures,
                                  const char *const *labels, size_t num_figures,
                                  const char *caption)
{
    size_t count = 0;
    for (size_t m = 0; m < report->num_mlperfs; m++)
        count += report->mlperfs[m]->num_options;
    report_chart_t *chart = report_chart_new(report, CHART_BARS, id, "MLPerf Storage (kvio mlperf)",
                                             title, "option", y_label);
    if (chart == NULL || report_categories_set(chart, count) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    for (size_t k = 0; k < num_figures; k++) {
        chart_series_t *series = report_series_add(chart, labels[k], count, false);
        if (series == NULL)
            return KVIO_ERR_NOMEM;
        series->count = count;
    }
    size_t column = 0;
    for (size_t m = 0; m < report->num_mlperfs; m++) {
        const report_mlperf_t *mlperf = report->mlperfs[m];
        for (size_t o = 0; o < mlperf->num_options; o++, column++) {
            char category[2 * REPORT_LABEL_MAX];
            if (report->num_mlperfs > 1)
                snprintf(category, sizeof(category), "%.40s: %.50s", mlperf->label,
                         mlperf->options[o].name);
            else
                snprintf(category, sizeof(category), "%s", mlperf->options[o].name);
            report_label_copy(chart->categories[column], REPORT_LABEL_MAX, category);
            for (size_t k = 0; k < num_figures; k++)
                chart->series[k].y[column] = mlperf->options[o].value[figures[k]];
        }
    }
    snprintf(chart->caption, sizeof(chart->caption), "%s", caption);
    return KVIO_OK;
}

kvio_status_t report_mlperf_charts(kvio_report_t *report)
{
    if (report->num_mlperfs == 0)
        return KVIO_OK;
    static const size_t bandwidth[] = {0, 1}, throughput[] = {2}, latency[] = {3, 4};
    static const char *const bandwidth_labels[] = {"read", "write"};
    static const char *const throughput_labels[] = {"storage throughput"};
    static const char *const latency_labels[] = {"device read p95", "device write p95"};
    kvio_status_t status = mlperf_chart(
        report, "chart-mlperf-bandwidth", "MLPerf Storage KV cache: storage bandwidth",
        "GiB/s (2^30 bytes per second)", bandwidth, bandwidth_labels, 2,
        "From mlperf.json: per option, aggregated_read_bandwidth_gbps and "
        "aggregated_write_bandwidth_gbps (v3.0's scored figures: per trial the sum over clients "
        "of the storage tier's bytes over the trial's wall time, the mean of the trials; GiB/s "
        "though named gbps).");
    if (status == KVIO_OK)
        status = mlperf_chart(
            report, "chart-mlperf-throughput", "MLPerf Storage KV cache: storage throughput",
            "tokens per second", throughput, throughput_labels, 1,
            "From mlperf.json: per option, aggregated_storage_throughput_tokens_per_sec "
            "(generated tokens over the requests' storage I/O seconds, summed over clients, the "
            "mean of the trials).");
    if (status == KVIO_OK)
        status = mlperf_chart(
            report, "chart-mlperf-device-p95", "MLPerf Storage KV cache: device latency P95",
            "P95 (ms)", latency, latency_labels, 2,
            "From mlperf.json: per option, aggregated_device_read_p95_ms and "
            "aggregated_device_write_p95_ms (the worst client's and trial's 95th percentile of "
            "one storage read's or write's device time).");
    return status;
}
