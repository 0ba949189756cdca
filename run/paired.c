/* update.control: paired (emulate): real time is not repeatable, so the
 * updates' cost is measured over pairs. Each pair is the coupled run and its
 * no-update twin on the same stream (the same seed: the same requests, ids
 * and arrivals); the twin keeps every rank, the trainer stepping beside
 * serving, and publishes nothing (train.checkpoint.policy: never), so the
 * difference is the updates', not the trainer's presence. The pairs run
 * alternately (with first, then without first), each on the next seed; each
 * pair's requests are paired by id (run/control.c), and each figure's
 * paired difference is averaged over the pairs with a 95 % interval.
 * Results: <dir>/pair-<i>-with and pair-<i>-without (whole runs), and
 * <dir>/summary.json with update_cost. With train.checkpoint.policy: never
 * itself both sides publish nothing: an A/A run, whose intervals show the
 * machine's noise (they should contain 0). */
#include "run/run_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/format.h"
#include "kvio/log.h"
#include "kvio/results.h"
#include "kvio/rte.h"
#include "kvio/stats.h"

#define DEFAULT_PAIRS 3
#define MAX_PAIRS 20

/* The figures averaged over the pairs: (key, field) of a pair's cost (or of
 * the coupled run's summary metrics, from_run), and the label printed. */
typedef struct figure {
    const char *key, *field;
    bool from_run;
    const char *name;
} figure_t;

static const figure_t figures[] = {
    {"ttft_p99_ms", "delta", false, "ttft_p99_ms"},
    {"tpot_p99_ms", "delta", false, "tpot_p99_ms"},
    {"e2el_p99_ms", "delta", false, "e2el_p99_ms"},
    {"hit_rate", "delta", false, "hit_rate"},
    {"ttft_delta_ms", "mean", false, "ttft_mean_ms"},
    {"e2el_delta_ms", "mean", false, "e2el_mean_ms"},
    {"model_updates.stall_ms_per_update", "p50", true, "stall_p50_ms"},
    {"model_updates.stall_ms_per_update", "p99", true, "stall_p99_ms"},
};
#define NUM_FIGURES (sizeof(figures) / sizeof(figures[0]))

static double figure_value(const figure_t *figure, const json_t *cost, const json_t *metrics)
{
    const json_t *root = figure->from_run ? metrics : cost;
    char path[128];
    snprintf(path, sizeof(path), "%s", figure->key);
    for (char *part = strtok(path, "."); part != NULL && root != NULL; part = strtok(NULL, "."))
        root = json_object_get(root, part);
    const json_t *value = json_object_get(root, figure->field);
    return json_is_number(value) ? json_number_value(value) : NAN;
}

/* The checks of a paired run, before any directory. */
static kvio_status_t check_paired(const kvio_workload_t *workload, long pairs, char *error_p,
                                  size_t error_len)
{
    const char *runtime = strcmp(workload->ranks.runtime, "auto") == 0
                              ? kvio_rte_detect()
                              : workload->ranks.runtime;
    if (strcmp(runtime, "mpi") == 0) {
        snprintf(error_p, error_len, "update.control: paired runs the workload 2 x --repeat "
                 "times in one process, which mpirun cannot restart; under mpirun run kvio "
                 "compare --vary train.checkpoint.policy=never,every_n_steps --repeat N");
        return KVIO_ERR_CONFIG;
    }
    if (!kvio_updates_coupled(workload)) {
        snprintf(error_p, error_len, "update.control: paired needs the coupled run (train "
                 "and serve ranks, update.serving: engine)");
        return KVIO_ERR_CONFIG;
    }
    if (pairs < 2 || pairs > MAX_PAIRS) {
        snprintf(error_p, error_len, "--repeat %ld: update.control: paired takes 2 to %d "
                 "pairs (an interval needs two)", pairs, MAX_PAIRS);
        return KVIO_ERR_CONFIG;
    }
    return kvio_workload_check(workload, error_p, error_len);
}

/* One side of pair i into dir/pair-<i>-<side>: its summary and what serving
 * measured (sorted by id). */
static kvio_status_t run_side(const kvio_workload_t *workload, const kvio_run_options_t *options,
                              const char *dir, long pair, bool with, json_t **summary_p,
                              kvio_serve_output_t *served_p, char *error_p, size_t error_len)
{
    kvio_workload_t side = *workload; /* shallow: only scalars change */
    side.seed = workload->seed + pair;
    side.update.control = KVIO_CONTROL_OFF;
    if (!with)
        side.train.checkpoint.policy = KVIO_CHECKPOINT_NEVER;
    char out[1200], error[1024] = "";
    snprintf(out, sizeof(out), "%s/pair-%ld-%s", dir, pair + 1, with ? "with" : "without");
    kvio_run_options_t side_options = {.output_dir = out, .force = options->force,
                                       .source = options->source, .quiet = true,
                                       .stop = options->stop, .summary_p = summary_p};
    kvio_run_result_t result;
    memset(&result, 0, sizeof(result));
    kvio_info("update.control: paired: pair %ld of %ld, %s updates (seed %lld)", pair + 1,
              options->repeat > 0 ? options->repeat : DEFAULT_PAIRS, with ? "with" : "without",
              (long long)side.seed);
    kvio_status_t status = run_workload(&side, &side_options, served_p, &result, error,
                                        sizeof(error));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "update.control: paired: pair %ld %s updates (%s): %s",
                 pair + 1, with ? "with" : "without", out, error);
        return status;
    }
    kvio_serve_output_sort(served_p);
    return KVIO_OK;
}

/* The figures of every pair into values[figure][pair]. */
static kvio_status_t run_pairs(const kvio_workload_t *workload, const kvio_run_options_t *options,
                               const char *dir, long pairs, double (*values)[MAX_PAIRS],
                               json_t *pair_list, char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    for (long p = 0; p < pairs && status == KVIO_OK; p++) {
        kvio_serve_output_t served[2];
        json_t *summaries[2] = {NULL, NULL};
        memset(served, 0, sizeof(served));
        /* Alternate which side goes first, so that a drift of the machine
         * falls on both. */
        for (int k = 0; k < 2 && status == KVIO_OK; k++) {
            int side = (p % 2 == 0) ? k : 1 - k; /* 0: with, 1: without */
            status = run_side(workload, options, dir, p, side == 0, &summaries[side],
                              &served[side], error_p, error_len);
        }
        kvio_control_cost_t cost = {0};
        if (status == KVIO_OK &&
            kvio_control_measure(&served[0], &served[1], NULL, 0, 0, &cost) != KVIO_OK) {
            snprintf(error_p, error_len, "update.control: paired: out of memory pairing %zu "
                     "requests", served[0].num_finished);
            status = KVIO_ERR_NOMEM;
        }
        if (status == KVIO_OK) {
            const json_t *metrics = json_object_get(summaries[0], "metrics");
            for (size_t f = 0; f < NUM_FIGURES; f++)
                values[f][p] = figure_value(&figures[f], cost.json, metrics);
            char with_dir[64], without_dir[64];
            snprintf(with_dir, sizeof(with_dir), "pair-%ld-with", p + 1);
            snprintf(without_dir, sizeof(without_dir), "pair-%ld-without", p + 1);
            json_array_append_new(
                pair_list,
                json_pack("{s:I, s:I, s:s, s:s, s:O}", "pair", (json_int_t)(p + 1), "seed",
                          (json_int_t)(workload->seed + p), "with", with_dir, "without",
                          without_dir, "cost", cost.json));
        }
        kvio_control_cost_free(&cost);
        for (int k = 0; k < 2; k++) {
            kvio_serve_output_free(&served[k]);
            json_decref(summaries[k]);
        }
    }
    return status;
}

/* update_cost: each figure's mean paired difference and 95 % interval. */
static json_t *paired_cost_json(const double (*values)[MAX_PAIRS], long pairs)
{
    json_t *cost = json_object();
    json_object_set_new(cost, "control", json_string("paired"));
    json_object_set_new(cost, "what",
                        json_string("the coupled run minus its no-update twin (the same "
                                    "stream and ranks, the trainer publishing nothing), "
                                    "per pair, averaged over the pairs with a 95 % interval"));
    json_object_set_new(cost, "pairs", json_integer(pairs));
    for (size_t f = 0; f < NUM_FIGURES; f++) {
        double mean = NAN, half = NAN;
        bool present = true;
        for (long p = 0; p < pairs; p++)
            present = present && isfinite(values[f][p]);
        json_t *samples = json_array();
        for (long p = 0; p < pairs; p++)
            json_array_append_new(samples, isfinite(values[f][p]) ? json_real(values[f][p])
                                                                  : json_null());
        if (present)
            kvio_mean_ci95(values[f], pairs, &mean, &half);
        json_object_set_new(cost, figures[f].name,
                            present ? json_pack("{s:f, s:f, s:o}", "mean", mean, "ci95", half,
                                                "pairs", samples)
                                    : json_pack("{s:n, s:n, s:o}", "mean", "ci95", "pairs",
                                                samples));
    }
    return cost;
}

static double mean_of(const json_t *cost, const char *name, const char *field)
{
    return json_number_value(json_object_get(json_object_get(cost, name), field));
}

static void print_paired(const json_t *cost, long pairs, const char *dir)
{
    kvio_table_t *table = NULL;
    char title[96], lines[3][96];
    snprintf(title, sizeof(title), "kvio run: update cost vs control (%ld pairs, 95 %% interval)",
             pairs);
    if (kvio_table_create(title, &table) != KVIO_OK)
        return;
    snprintf(lines[0], sizeof(lines[0]), "TTFT p99 %+.2f ± %.2f ms, TPOT p99 %+.3f ± %.3f ms",
             mean_of(cost, "ttft_p99_ms", "mean"), mean_of(cost, "ttft_p99_ms", "ci95"),
             mean_of(cost, "tpot_p99_ms", "mean"), mean_of(cost, "tpot_p99_ms", "ci95"));
    snprintf(lines[1], sizeof(lines[1]), "hit rate %+.2f ± %.2f pts",
             100 * mean_of(cost, "hit_rate", "mean"), 100 * mean_of(cost, "hit_rate", "ci95"));
    snprintf(lines[2], sizeof(lines[2]), "stall p50/p99 %.1f/%.1f ms per update",
             mean_of(cost, "stall_p50_ms", "mean"), mean_of(cost, "stall_p99_ms", "mean"));
    kvio_table_add_row(table, "paired deltas", lines[0], NULL);
    kvio_table_add_row(table, "", lines[1], NULL);
    kvio_table_add_row(table, "", lines[2], NULL);
    kvio_table_add_row(table, "results", dir, NULL);
    kvio_table_print(table, stdout);
    kvio_table_destroy(table);
}

kvio_status_t run_paired(const kvio_workload_t *workload, const kvio_run_options_t *options,
                         kvio_run_result_t *result_p, char *error_p, size_t error_len)
{
    long pairs = options->repeat > 0 ? options->repeat : DEFAULT_PAIRS;
    kvio_status_t status = check_paired(workload, pairs, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_results_t *results = NULL;
    status = kvio_results_create(options->output_dir, workload->name, options->force, &results,
                                 error_p, error_len);
    if (status != KVIO_OK)
        return status;
    const char *dir = kvio_results_path(results);
    uint64_t start_ns = kvio_wall_time_ns();
    double values[NUM_FIGURES][MAX_PAIRS];
    json_t *pair_list = json_array();
    status = run_pairs(workload, options, dir, pairs, values, pair_list, error_p, error_len);
    char start_text[64];
    kvio_format_utc(start_ns, start_text, sizeof(start_text));
    json_t *metrics = json_object();
    if (status == KVIO_OK)
        json_object_set_new(metrics, "update_cost", paired_cost_json(values, pairs));
    json_t *summary = json_pack(
        "{s:s, s:s, s:s, s:b, s:s?, s:s, s:f, s:o, s:o, s:o}", "name", workload->name, "mode",
        "emulate", "control", "paired", "complete", status == KVIO_OK, "error",
        status == KVIO_OK ? NULL : error_p, "start_time", start_text, "wall_s",
        (double)(kvio_wall_time_ns() - start_ns) / 1e9, "config",
        kvio_config_to_json(kvio_workload_options, workload), "pairs", pair_list, "metrics",
        metrics);
    char write_error[512] = "";
    kvio_status_t write_status = kvio_results_write_json(results, "summary.json", summary,
                                                         write_error, sizeof(write_error));
    if (options->summary_p != NULL && write_status == KVIO_OK)
        *options->summary_p = json_incref(summary);
    if (status == KVIO_OK && write_status != KVIO_OK) {
        snprintf(error_p, error_len, "%s", write_error);
        status = write_status;
    }
    snprintf(result_p->results_dir, sizeof(result_p->results_dir), "%s", dir);
    result_p->complete = status == KVIO_OK;
    if (status == KVIO_OK && !options->quiet)
        print_paired(json_object_get(metrics, "update_cost"), pairs, dir);
    json_decref(summary);
    kvio_results_destroy(results);
    return status;
}
