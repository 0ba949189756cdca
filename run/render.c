/* A run's outputs rendered from its typed result (kvio/result.h): the
 * head every summary.json opens with (provenance: version, commit, host,
 * command, overrides, times), summary.json itself, run.log, and the table
 * on stdout. Nothing here reads a figure back from JSON: the table's rows
 * come from the declaration (kvio/figures.def). */
#include "run/run_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/format.h"
#include "kvio/log.h"
#include "kvio/redis.h"
#include "kvio/results.h"
#include "kvio/sysinfo.h"

json_t *run_provenance_json(const kvio_run_options_t *options, json_t *host, uint64_t start_ns)
{
    kvio_provenance_t provenance = {0};
    if (options != NULL)
        provenance = (kvio_provenance_t){.argc = options->argc, .argv = options->argv,
                                         .overrides = options->overrides,
                                         .num_overrides = options->num_overrides};
    return kvio_provenance_json(&provenance, host, start_ns);
}

json_t *run_summary_head(const kvio_workload_t *workload, const kvio_run_options_t *options,
                         json_t *host, uint64_t start_ns, bool complete, const char *error)
{
    json_t *summary = run_provenance_json(options, host, start_ns);
    json_object_set_new(summary, "name", json_string(workload->name));
    json_object_set_new(summary, "source",
                        json_string(options != NULL && options->source ? options->source : ""));
    json_object_set_new(summary, "complete", json_boolean(complete));
    if (error != NULL)
        json_object_set_new(summary, "error", json_string(error));
    return summary;
}

/* run.log in the results: how the run was started, every warning and
 * error kvio logged while it ran (printed or hushed by -q), what makes its
 * numbers mislead, and how it ended. A failed write is a warning only: the
 * summary says how the run went. */
static void write_run_log(const run_summary_t *summary, const json_t *written)
{
    size_t dropped = 0;
    char *captured = summary->capture_log ? kvio_log_capture_end(&dropped) : NULL;
    kvio_csv_t *log = NULL;
    if (kvio_csv_open(summary->results, "run.log", NULL, &log) != KVIO_OK) {
        free(captured);
        return;
    }
    char build[1024];
    kvio_build_describe(build, sizeof(build));
    char *newline = strchr(build, '\n');
    if (newline != NULL)
        *newline = '\0';
    kvio_csv_row(log, "%s", build);
    char command[4096];
    kvio_provenance_command_line(written, command, sizeof(command));
    const kvio_run_options_t *options = summary->options;
    kvio_csv_row(log, "command: %s", command[0] != '\0' ? command : "(a library call)");
    kvio_csv_row(log, "source: %s", options != NULL && options->source ? options->source : "");
    kvio_csv_row(log, "start: %s", json_string_value(json_object_get(written, "start_time")));
    if (captured != NULL && captured[0] != '\0')
        kvio_csv_line(log, captured, strlen(captured) - 1);
    if (dropped > 0)
        kvio_csv_row(log, "(%zu more messages not kept)", dropped);
    for (size_t w = 0; w < kvio_result_num_warnings(summary->result); w++)
        kvio_csv_row(log, "kvio: warning: %s", kvio_result_warning_message(summary->result, w));
    kvio_csv_row(log, "end: %s, complete: %s, valid: %s%s%s",
                 json_string_value(json_object_get(written, "end_time")),
                 summary->complete ? "true" : "false",
                 kvio_result_valid(summary->result) ? "true" : "false",
                 summary->error != NULL ? ", error: " : "",
                 summary->error != NULL ? summary->error : "");
    char write_error[256];
    if (kvio_csv_finish(log, "run.log", write_error, sizeof(write_error)) != KVIO_OK)
        kvio_warn("%s", write_error);
    free(captured);
}

kvio_status_t run_write_summary(const run_summary_t *summary, char *error_p, size_t error_len)
{
    const kvio_workload_t *workload = summary->workload;
    uint64_t end_ns = kvio_wall_time_ns();
    char end_text[64];
    kvio_format_utc(end_ns, end_text, sizeof(end_text));
    json_t *written = run_summary_head(workload, summary->options, summary->host,
                                       summary->start_ns, summary->complete, summary->error);
    json_object_set_new(written, "end_time", json_string(end_text));
    json_object_set_new(written, "wall_s", json_real((double)(end_ns - summary->start_ns) / 1e9));
    if (summary->start != NULL)
        json_object_update(written, summary->start);
    json_object_set_new(written, "config", kvio_config_to_json(kvio_workload_options, workload));
    if (summary->extra != NULL)
        json_object_update(written, summary->extra);
    json_object_set_new(written, "metrics", kvio_result_metrics_json(summary->result));
    json_object_set_new(written, "valid", json_boolean(kvio_result_valid(summary->result)));
    json_object_set_new(written, "warnings", kvio_result_warnings_json(summary->result));
    kvio_status_t status = kvio_results_write_json(summary->results, "summary.json", written,
                                                   error_p, error_len);
    write_run_log(summary, written);
    const kvio_run_options_t *options = summary->options;
    if (options != NULL && options->summary_p != NULL && status == KVIO_OK)
        *options->summary_p = json_incref(written);
    json_decref(written);
    return status;
}

/* ---- the table ---------------------------------------------------------- */

static double number(const json_t *object, const char *key, const char *field)
{
    const json_t *value = json_object_get(object, key);
    if (field != NULL)
        value = json_object_get(value, field);
    return json_number_value(value);
}

/* assess: PASS or FAIL, how many criteria held, the first that did not. */
static void add_assessment_row(kvio_table_t *table, const json_t *assessment)
{
    if (assessment == NULL)
        return;
    char text[256];
    int at = snprintf(text, sizeof(text), "%s, %lld of %lld criteria",
                      json_is_true(json_object_get(assessment, "passed")) ? "PASS" : "FAIL",
                      (long long)json_integer_value(json_object_get(assessment, "passed_count")),
                      (long long)json_integer_value(json_object_get(assessment, "total_count")));
    size_t index;
    const json_t *criterion;
    json_array_foreach(json_object_get(assessment, "criteria"), index, criterion) {
        if (json_is_true(json_object_get(criterion, "passed")) || at >= (int)sizeof(text))
            continue;
        snprintf(text + at, sizeof(text) - (size_t)at, "; failed: %s (%.3g)",
                 json_string_value(json_object_get(criterion, "name")),
                 number(criterion, "actual", NULL));
        break;
    }
    kvio_table_add_row(table, "assessment", text, NULL);
}

/* One row per configured tier over the ranks: its read and write bandwidth,
 * P95 latency and queue depths; then the assessment. */
static void add_storage_rows(kvio_table_t *table, const kvio_result_t *result,
                             const json_t *extra)
{
    for (size_t t = 0; t < kvio_result_num_children(result, "storage_tiers"); t++) {
        const kvio_result_t *tier = kvio_result_child_at(result, "storage_tiers", t);
        char label[48], text[160];
        snprintf(label, sizeof(label), "tier %zu (%s)", t,
                 kvio_result_text(tier, KVIO_FIG_STORAGE_TIER_KIND));
        snprintf(text, sizeof(text),
                 "read %.2f GB/s p95 %.2f ms, write %.2f GB/s p95 %.2f ms, QD %.1f/%.1f",
                 kvio_result_get(tier, KVIO_FIG_STORAGE_TIER_READ_GBPS),
                 kvio_result_get(tier, KVIO_FIG_STORAGE_TIER_READ_P95_MS),
                 kvio_result_get(tier, KVIO_FIG_STORAGE_TIER_WRITE_GBPS),
                 kvio_result_get(tier, KVIO_FIG_STORAGE_TIER_WRITE_P95_MS),
                 kvio_result_get(tier, KVIO_FIG_STORAGE_TIER_READ_QUEUE_DEPTH),
                 kvio_result_get(tier, KVIO_FIG_STORAGE_TIER_WRITE_QUEUE_DEPTH));
        kvio_table_add_row(table, label, text, NULL);
    }
    add_assessment_row(table, json_object_get(extra, "assessment"));
}

/* What ran, where: the mode, the model on its GPU, the ranks. */
static void table_title(const run_summary_t *summary, const char *what, char *title_p,
                        size_t title_len)
{
    const kvio_workload_t *workload = summary->workload;
    char ranks[96];
    int64_t serve_ranks = workload->ranks.serve > 0 ? workload->ranks.serve : 1;
    if (workload->ranks.prefill > 0)
        snprintf(ranks, sizeof(ranks), "%lld prefill + %lld decode ranks",
                 (long long)workload->ranks.prefill, (long long)workload->ranks.decode);
    else if (kvio_updates_wanted(workload))
        snprintf(ranks, sizeof(ranks), "%lld train + %lld serve ranks",
                 (long long)workload->ranks.train, (long long)serve_ranks);
    else
        snprintf(ranks, sizeof(ranks), "%lld serve rank%s", (long long)serve_ranks,
                 serve_ranks == 1 ? "" : "s");
    snprintf(title_p, title_len, "kvio run %s (%s: %s on %s, %s%s)%s%s", workload->name,
             workload->mode == KVIO_MODE_EMULATE ? "emulate" : "simulate",
             workload->model.preset != NULL ? workload->model.preset : "a custom model",
             workload->gpu.preset != NULL ? workload->gpu.preset : "a custom GPU", ranks,
             summary->complete ? "" : "; INCOMPLETE", what != NULL ? ": " : "",
             what != NULL ? what : "");
}

void run_print_table(const run_summary_t *summary, const char *what)
{
    char title[512];
    table_title(summary, what, title, sizeof(title));
    kvio_table_t *grid = NULL, *rows = NULL;
    if (kvio_table_create(title, &grid) != KVIO_OK)
        return;
    /* The latency grid, then every figure the declaration puts on a row
     * (kvio/figures.def), then what this run's parts add. */
    kvio_result_table_rows(summary->result, grid, NULL);
    kvio_table_print(grid, stdout);
    kvio_table_destroy(grid);
    if (kvio_table_create("", &rows) != KVIO_OK)
        return;
    kvio_result_table_rows(summary->result, NULL, rows);
    add_storage_rows(rows, summary->result, summary->extra);
    const json_t *modelled = json_object_get(summary->extra, "modelled");
    for (size_t i = 0; i < json_array_size(modelled); i++)
        kvio_table_add_row(rows, i == 0 ? "modelled" : "",
                           json_string_value(json_object_get(json_array_get(modelled, i),
                                                             "brief")),
                           NULL);
    kvio_table_add_row(rows, "results", kvio_results_path(summary->results), NULL);
    kvio_table_print(rows, stdout);
    kvio_table_destroy(rows);
}
