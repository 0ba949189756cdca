/* The plan of a run (run/plan.c): what each world rank runs, and the serve
 * runs made from the workload, for every mode and part; the numbering of
 * the serve ranks and the client rank agree between the two. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kvio/frontend.h"
#include "kvio/run.h"
#include "run/run_int.h"
#include "tests/helpers.h"

static const char *const base =
    "name: plan\nseed: 1\nduration: 10s\n"
    "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
    "serve:\n  kvcache: {block_size: 16, blocks: 1000}\n"
    "stream:\n  requests: 10\n  arrival: {process: batch}\n"
    "  input_tokens: 64\n  output_tokens: 8\n";

/* Addresses that stand for a front end and a results directory: the plan
 * only passes them on, and the test compares them. */
static char stand_in[2];

static kvio_workload_t workload_of(const char *const *overrides, size_t count)
{
    kvio_workload_t workload;
    char error[1024] = "";
    cr_assert_eq(kvio_workload_parse(base, "plan.yaml", overrides, count, &workload, error,
                                     sizeof(error)),
                 KVIO_OK, "%s", error);
    return workload;
}

/* One row: a workload, whether a front end serves it, and what the plan
 * must say of its ranks. */
typedef struct plan_case {
    const char *name;
    const char *overrides[6];
    bool frontend;
    int world_size;          /* the ranks the plan numbers */
    int first_serve;         /* world rank of serve rank 0 */
    int client;              /* world rank of the client (0: none) */
    bool engine;             /* the serve ranks run the engine */
    int prefill;             /* P/D: the prefill ranks */
    run_serve_part_t part;   /* the serve run this workload's serve ranks take */
} plan_case_t;

static const plan_case_t cases[] = {
    {"simulate", {"mode=simulate", "ranks.serve=2"}, false, 2, 0, 0, true, 0, RUN_SERVE_RUN},
    {"simulate with a trainer", {"mode=simulate", "ranks.serve=2", "ranks.train=1"}, false, 3,
     1, 0, true, 0, RUN_SERVE_RUN},
    {"emulate, several serve ranks", {"mode=emulate", "ranks.serve=3"}, false, 4, 0, 3, true, 0,
     RUN_SERVE_RUN},
    {"emulate, one serve rank", {"mode=emulate", "ranks.serve=1"}, false, 1, 0, 0, true, 0,
     RUN_SERVE_RUN},
    {"emulate, a front end", {"mode=emulate", "ranks.serve=3"}, true, 3, 0, 0, true, 0,
     RUN_SERVE_RUN},
    {"emulate, P/D", {"mode=emulate", "ranks.prefill=1", "ranks.decode=2"}, false, 3, 0, 0,
     true, 1, RUN_SERVE_RUN},
    {"coupled with a client", {"mode=emulate", "ranks.serve=2", "ranks.train=1",
                               "ranks.client=1", "update.serving=engine"}, false, 4, 1, 3, true,
     0, RUN_SERVE_RANK},
    {"coupled with a front end", {"mode=emulate", "ranks.serve=2", "ranks.train=1",
                                  "update.serving=engine"}, true, 3, 1, 0, true, 0,
     RUN_SERVE_RANK},
    {"emulated iterations", {"mode=emulate", "ranks.serve=2", "ranks.train=1",
                             "update.serving=emulated"}, false, 3, 1, 0, false, 0,
     RUN_SERVE_EMULATED},
};

Test(run, each_rank_has_its_parts_and_the_serve_runs_number_the_ranks_so, .timeout = 30)
{
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const plan_case_t *expected = &cases[c];
        size_t count = 0;
        while (count < 6 && expected->overrides[count] != NULL)
            count++;
        kvio_workload_t workload = workload_of(expected->overrides, count);
        int serve = (int)workload.ranks.serve;
        int world = expected->first_serve + serve + (expected->client > 0 ? 1 : 0);
        cr_assert_eq(world, expected->world_size, "%s", expected->name);
        cr_assert_eq(run_first_serve_rank(&workload), expected->first_serve, "%s",
                     expected->name);
        cr_assert_eq(run_client_rank(&workload, expected->frontend), expected->client, "%s",
                     expected->name);
        for (int rank = 0; rank < world; rank++) {
            run_rank_parts_t parts = run_rank_parts(&workload, expected->frontend, rank);
            int index = rank - expected->first_serve;
            bool serves = index >= 0 && index < serve;
            cr_assert_eq(parts.train, rank < expected->first_serve, "%s: rank %d",
                         expected->name, rank);
            cr_assert_eq(parts.serve, serves, "%s: rank %d", expected->name, rank);
            cr_assert_eq(parts.client, expected->client > 0 && rank == expected->client,
                         "%s: rank %d", expected->name, rank);
            cr_assert_eq(parts.serve_index, serves ? index : -1, "%s: rank %d", expected->name,
                         rank);
            cr_assert_eq(parts.engine, serves && expected->engine, "%s: rank %d",
                         expected->name, rank);
            cr_assert_eq(parts.frontend, serves && expected->frontend, "%s: rank %d",
                         expected->name, rank);
            cr_assert_eq(parts.prefill, serves && index < expected->prefill, "%s: rank %d",
                         expected->name, rank);
            cr_assert_eq(parts.decode, serves && expected->prefill > 0 &&
                                           index >= expected->prefill,
                         "%s: rank %d", expected->name, rank);
        }
        /* The serve run of these ranks numbers them as the parts do. */
        kvio_model_t model = workload.model;
        kvio_gpu_t gpu = workload.gpu;
        char error[256];
        cr_assert_eq(kvio_model_resolve(&model, error, sizeof(error)), KVIO_OK, "%s", error);
        cr_assert_eq(kvio_gpu_resolve(&gpu, error, sizeof(error)), KVIO_OK, "%s", error);
        kvio_frontend_t *frontend = expected->frontend ? (kvio_frontend_t *)(void *)&stand_in[0]
                                                       : NULL;
        run_context_t context = {.workload = &workload, .frontend = frontend};
        run_serve_given_t given = {.context = &context, .model = &model, .gpu = &gpu};
        kvio_serve_run_t run;
        run_plan_serve(&workload, expected->part, &given, &run);
        cr_assert_eq(run.first_serve_rank, expected->first_serve, "%s", expected->name);
        cr_assert_eq(run.client_rank, expected->engine ? expected->client : 0, "%s",
                     expected->name);
        cr_assert_eq(run.serve != NULL, expected->engine, "%s", expected->name);
        cr_assert_eq(run.frontend, expected->engine ? frontend : NULL, "%s", expected->name);
        cr_assert_eq(run.update != NULL, expected->first_serve > 0, "%s", expected->name);
        if (expected->engine)
            cr_assert_eq(run.num_prefill, (uint32_t)expected->prefill, "%s", expected->name);
        kvio_workload_free(&workload);
    }
}

/* Simulate with updates: the run serves on the schedule and writes where
 * the context says; its twin is the same stream without updates, keeping
 * no gaps and writing only its output. */
Test(run, the_twin_is_the_run_without_updates_writing_only_its_output, .timeout = 30)
{
    const char *const overrides[] = {"mode=simulate", "ranks.serve=2", "ranks.train=1",
                                     "update.apply=stall"};
    kvio_workload_t workload = workload_of(overrides, 4);
    kvio_model_t model = workload.model;
    kvio_gpu_t gpu = workload.gpu;
    char error[256];
    cr_assert_eq(kvio_model_resolve(&model, error, sizeof(error)), KVIO_OK, "%s", error);
    cr_assert_eq(kvio_gpu_resolve(&gpu, error, sizeof(error)), KVIO_OK, "%s", error);
    kvio_results_t *results = (kvio_results_t *)(void *)&stand_in[1];
    kvio_serve_itls_t itls = {0};
    kvio_serve_samples_t samples = {0};
    json_t *start = json_object();
    run_context_t context = {.workload = &workload, .results = results, .start = start,
                             .itls = &itls, .samples = &samples};
    kvio_update_record_t records[2] = {{0}};
    int64_t stall[2] = {0};
    double steps[2] = {0, 1};
    kvio_updates_schedule_t schedule = {.updates = records, .num_updates = 2,
                                        .inference_stall_ns = stall, .version_steps = steps,
                                        .num_version_steps = 2};
    kvio_serve_output_t served = {0}, control = {0};
    run_serve_given_t given = {.context = &context, .model = &model, .gpu = &gpu,
                               .schedule = &schedule, .control = &control, .output = &served};
    kvio_serve_run_t run, twin;
    run_plan_serve(&workload, RUN_SERVE_RUN, &given, &run);
    given.output = &control;
    run_plan_serve(&workload, RUN_SERVE_TWIN, &given, &twin);
    cr_assert_eq(run.update, &workload.update);
    cr_assert(run.stall_for_updates);
    cr_assert(run.keep_itls);
    cr_assert_eq(run.results, results);
    cr_assert_eq(run.start, start);
    cr_assert_eq(run.itls, &itls);
    cr_assert_eq(run.samples, &samples);
    cr_assert_eq(run.output, &served);
    cr_assert_eq(run.control, &control);
    cr_assert_eq(run.updates, records);
    cr_assert_eq(run.num_updates, 2);
    cr_assert_eq(run.drain_stall_ns, stall);
    cr_assert_eq(run.version_steps, steps);
    cr_assert_null(twin.update);
    cr_assert_not(twin.stall_for_updates);
    cr_assert_not(twin.keep_itls);
    cr_assert_null(twin.results);
    cr_assert_null(twin.start);
    cr_assert_null(twin.itls);
    cr_assert_null(twin.updates);
    cr_assert_eq(twin.output, &control);
    /* Both serve the same requests of the same ranks. */
    cr_assert_eq(twin.first_serve_rank, run.first_serve_rank);
    cr_assert_eq(twin.num_ranks, run.num_ranks);
    cr_assert_eq(twin.duration_ns, run.duration_ns);
    cr_assert_eq(twin.seed, run.seed);
    json_decref(start);
    kvio_workload_free(&workload);
}
