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

/* The figures averaged over the pairs: a pair's cost (or the coupled run's
 * own, from_run), and the figure that holds its 95 % interval. */
typedef struct averaged {
    kvio_figure_t figure;
    bool from_run;
    kvio_figure_t interval;
} averaged_t;

static const averaged_t averaged[] = {
    {KVIO_FIG_COST_TTFT_P99_MS_DELTA, false, KVIO_FIG_COST_TTFT_P99_MS_DELTA_CI95},
    {KVIO_FIG_COST_TPOT_P99_MS_DELTA, false, KVIO_FIG_COST_TPOT_P99_MS_DELTA_CI95},
    {KVIO_FIG_COST_E2EL_P99_MS_DELTA, false, KVIO_FIG_COST_E2EL_P99_MS_DELTA_CI95},
    {KVIO_FIG_COST_HIT_RATE_DELTA, false, KVIO_FIG_COST_HIT_RATE_DELTA_CI95},
    {KVIO_FIG_COST_TTFT_DELTA_MS_MEAN, false, KVIO_FIG_COST_TTFT_DELTA_MEAN_CI95},
    {KVIO_FIG_COST_E2EL_DELTA_MS_MEAN, false, KVIO_FIG_COST_E2EL_DELTA_MEAN_CI95},
    {KVIO_FIG_STALL_PER_UPDATE_MS_P50, true, KVIO_FIG_STALL_PER_UPDATE_P50_CI95},
    {KVIO_FIG_STALL_PER_UPDATE_MS_P99, true, KVIO_FIG_STALL_PER_UPDATE_P99_CI95},
};
#define NUM_AVERAGED (sizeof(averaged) / sizeof(averaged[0]))

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
                              const char *dir, long pair, bool with, kvio_result_t **result_p,
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
                                       .argv = options->argv, .argc = options->argc,
                                       .overrides = options->overrides,
                                       .num_overrides = options->num_overrides,
                                       .source = options->source, .quiet = true,
                                       .stop = options->stop, .result_p = result_p};
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
        kvio_result_t *runs[2] = {NULL, NULL};
        memset(served, 0, sizeof(served));
        /* Alternate which side goes first, so that a drift of the machine
         * falls on both. */
        for (int k = 0; k < 2 && status == KVIO_OK; k++) {
            int side = (p % 2 == 0) ? k : 1 - k; /* 0: with, 1: without */
            status = run_side(workload, options, dir, p, side == 0, &runs[side], &served[side],
                              error_p, error_len);
        }
        kvio_control_cost_t cost = {0};
        if (status == KVIO_OK &&
            kvio_control_measure(&served[0], &served[1], NULL, 0, 0, &cost) != KVIO_OK) {
            snprintf(error_p, error_len, "update.control: paired: out of memory pairing %zu "
                     "requests", served[0].num_finished);
            status = KVIO_ERR_NOMEM;
        }
        if (status == KVIO_OK) {
            for (size_t f = 0; f < NUM_AVERAGED; f++)
                values[f][p] = kvio_result_get(averaged[f].from_run ? runs[0] : cost.figures,
                                               averaged[f].figure);
            char with_dir[64], without_dir[64];
            snprintf(with_dir, sizeof(with_dir), "pair-%ld-with", p + 1);
            snprintf(without_dir, sizeof(without_dir), "pair-%ld-without", p + 1);
            json_array_append_new(pair_list,
                                  json_pack("{s:I, s:I, s:s, s:s, s:o}", "pair",
                                            (json_int_t)(p + 1), "seed",
                                            (json_int_t)(workload->seed + p), "with", with_dir,
                                            "without", without_dir, "cost",
                                            kvio_result_metrics_json(cost.figures)));
        }
        kvio_control_cost_free(&cost);
        for (int k = 0; k < 2; k++) {
            kvio_serve_output_free(&served[k]);
            kvio_result_destroy(runs[k]);
        }
    }
    return status;
}

/* update_cost: each figure's mean paired difference and its 95 % interval
 * (a figure some pair lacks is left out). */
static void paired_cost_fill(kvio_result_t *result, const double (*values)[MAX_PAIRS], long pairs)
{
    kvio_result_set_detail(result, "update_cost.control", json_string("paired"));
    kvio_result_set_detail(result, "update_cost.what",
                           json_string("the coupled run minus its no-update twin (the same "
                                       "stream and ranks, the trainer publishing nothing), "
                                       "per pair, averaged over the pairs with a 95 % "
                                       "interval"));
    kvio_result_set(result, KVIO_FIG_COST_PAIRS, (double)pairs);
    json_t *per_pair = json_object();
    for (size_t f = 0; f < NUM_AVERAGED; f++) {
        bool present = true;
        json_t *samples = json_array();
        for (long p = 0; p < pairs; p++) {
            present = present && isfinite(values[f][p]);
            json_array_append_new(samples, isfinite(values[f][p]) ? json_real(values[f][p])
                                                                  : json_null());
        }
        json_object_set_new(per_pair, kvio_figure_decl(averaged[f].figure)->name, samples);
        if (!present)
            continue;
        double mean = NAN, half = NAN;
        kvio_mean_ci95(values[f], pairs, &mean, &half);
        kvio_result_set(result, averaged[f].figure, mean);
        kvio_result_set(result, averaged[f].interval, half);
    }
    kvio_result_set_detail(result, "update_cost.per_pair", per_pair);
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
    double values[NUM_AVERAGED][MAX_PAIRS];
    json_t *pair_list = json_array();
    status = run_pairs(workload, options, dir, pairs, values, pair_list, error_p, error_len);
    kvio_result_t *result = kvio_result_create();
    if (result == NULL) {
        json_decref(pair_list);
        kvio_results_destroy(results);
        return KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK)
        paired_cost_fill(result, values, pairs);
    kvio_result_set_detail(result, "pairs", pair_list);
    run_summary_t summary = {.workload = workload, .options = options, .results = results,
                             .result = result, .start_ns = start_ns,
                             .complete = status == KVIO_OK,
                             .error = status == KVIO_OK ? NULL : error_p};
    char write_error[512] = "";
    kvio_status_t write_status = run_write_summary(&summary, write_error, sizeof(write_error));
    if (status == KVIO_OK && write_status != KVIO_OK) {
        snprintf(error_p, error_len, "%s", write_error);
        status = write_status;
    }
    snprintf(result_p->results_dir, sizeof(result_p->results_dir), "%s", dir);
    result_p->complete = status == KVIO_OK;
    if (status == KVIO_OK && !options->quiet) {
        char what[96];
        snprintf(what, sizeof(what), "update cost vs control (%ld pairs, 95 %% interval)", pairs);
        run_print_table(&summary, what);
    }
    if (options->result_p != NULL)
        *options->result_p = result;
    else
        kvio_result_destroy(result);
    kvio_results_destroy(results);
    return status;
}
