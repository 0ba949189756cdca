/* kvio_run: creates the results directory, runs the parts that exist, and
 * writes summary.json (schema version, effective config, times, which parts
 * ran, complete flag) and a table on stdout. */
#include "kvio/run.h"

#include <stdio.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/results.h"

/* The parts of a run and whether this build runs them yet. */
typedef struct run_part {
    const char *name;
    bool ran;
    const char *note;
} run_part_t;

static json_t *parts_json(const run_part_t *parts, size_t count)
{
    json_t *array = json_array();
    for (size_t i = 0; i < count; i++) {
        json_t *part = json_object();
        json_object_set_new(part, "name", json_string(parts[i].name));
        json_object_set_new(part, "ran", json_boolean(parts[i].ran));
        json_object_set_new(part, "note", json_string(parts[i].note));
        json_array_append_new(array, part);
    }
    return array;
}

kvio_status_t kvio_run(const kvio_workload_t *workload, const kvio_run_options_t *options,
                       kvio_run_result_t *result_p, char *error_p, size_t error_len)
{
    kvio_results_t *results = NULL;
    kvio_rte_world_t *world = NULL;
    bool updates = kvio_updates_wanted(workload);
    bool root = true;
    kvio_status_t status = KVIO_OK;
    if (updates) {
        /* What can fail before the ranks start fails here, with its reason. */
        status = kvio_updates_preflight(workload, error_p, error_len);
        if (status == KVIO_OK && workload->mode == KVIO_MODE_EMULATE) {
            kvio_rte_params_t params = {
                .kind = workload->ranks.runtime,
                .num_ranks = (int)(workload->ranks.train + workload->ranks.serve),
                .timeout_ns = workload->ranks.timeout_ns};
            status = kvio_rte_world_create(&params, &world, error_p, error_len);
            if (status == KVIO_OK)
                root = kvio_rte_world_is_root(world);
        }
        if (status != KVIO_OK)
            return status;
    }
    if (root)
        status = kvio_results_create(options->output_dir, workload->name, options->force,
                                     &results, error_p, error_len);
    if (status != KVIO_OK) {
        kvio_rte_world_destroy(world, true);
        return status;
    }

    uint64_t start_ns = kvio_wall_time_ns();
    json_t *metrics = json_object();
    const char *updates_note = "no train and serve ranks in this workload";
    if (updates) {
        status = kvio_updates_run(workload, world, results, root ? metrics : NULL, error_p,
                                  error_len);
        updates_note = workload->mode == KVIO_MODE_EMULATE
                           ? "trainer published, serve ranks received (updates.csv)"
                           : "simulated: latency + bytes / bandwidth (updates.csv)";
    }
    kvio_rte_world_destroy(world, status != KVIO_OK);
    if (!root || status != KVIO_OK) {
        json_decref(metrics);
        kvio_results_destroy(results);
        return status;
    }
    const run_part_t parts[] = {
        {"config", true, "validated and recorded"},
        {"results", true, "results directory and summary written"},
        {"engine", false, "serving engine not built yet"},
        {"model_updates", updates, updates_note},
    };
    size_t num_parts = sizeof(parts) / sizeof(parts[0]);
    uint64_t end_ns = kvio_wall_time_ns();

    char start_text[64], end_text[64];
    kvio_format_utc(start_ns, start_text, sizeof(start_text));
    kvio_format_utc(end_ns, end_text, sizeof(end_text));
    json_t *summary = json_object();
    json_object_set_new(summary, "schema_version", json_integer(KVIO_SCHEMA_VERSION));
    json_object_set_new(summary, "kvio_version", json_string(KVIO_VERSION));
    json_object_set_new(summary, "name", json_string(workload->name));
    json_object_set_new(summary, "source", json_string(options->source ? options->source : ""));
    json_object_set_new(summary, "complete", json_true());
    json_object_set_new(summary, "start_time", json_string(start_text));
    json_object_set_new(summary, "end_time", json_string(end_text));
    json_object_set_new(summary, "wall_s", json_real((double)(end_ns - start_ns) / 1e9));
    json_object_set_new(summary, "config", kvio_config_to_json(kvio_workload_options, workload));
    json_object_set_new(summary, "parts", parts_json(parts, num_parts));
    json_object_set(summary, "metrics", metrics);
    status = kvio_results_write_json(results, "summary.json", summary, error_p, error_len);
    json_decref(summary);

    if (status == KVIO_OK) {
        snprintf(result_p->results_dir, sizeof(result_p->results_dir), "%s",
                 kvio_results_path(results));
        result_p->complete = true;
        if (!options->quiet) {
            kvio_table_t *table = NULL;
            if (kvio_table_create("kvio run", &table) == KVIO_OK) {
                kvio_table_add_row(table, "workload", workload->name, NULL);
                kvio_table_add_row(table, "mode",
                                   workload->mode == KVIO_MODE_EMULATE ? "emulate" : "simulate",
                                   NULL);
                for (size_t i = 0; i < num_parts; i++)
                    kvio_table_add_row(table, parts[i].name, parts[i].ran ? "ran" : "pending",
                                       parts[i].note, NULL);
                json_t *model = json_object_get(metrics, "model_updates");
                if (model != NULL) {
                    char text[128];
                    json_t *latency = json_object_get(model, "update_latency_ms");
                    snprintf(text, sizeof(text), "mean %.3f  p50 %.3f  p99 %.3f  max %.3f",
                             json_real_value(json_object_get(latency, "mean")),
                             json_real_value(json_object_get(latency, "p50")),
                             json_real_value(json_object_get(latency, "p99")),
                             json_real_value(json_object_get(latency, "max")));
                    kvio_table_add_row(table, "update latency ms", text, NULL);
                    snprintf(text, sizeof(text), "%.3f",
                             json_real_value(json_object_get(
                                 json_object_get(model, "bandwidth_gbps"), "mean")));
                    kvio_table_add_row(table, "update bandwidth GB/s", text, NULL);
                    snprintf(text, sizeof(text), "%lld of %lld, %lld checksum mismatches",
                             (long long)json_integer_value(
                                 json_object_get(model, "updates_activated")),
                             (long long)json_integer_value(
                                 json_object_get(model, "updates_received")),
                             (long long)json_integer_value(
                                 json_object_get(model, "checksum_mismatches")));
                    kvio_table_add_row(table, "updates activated", text, NULL);
                }
                kvio_table_add_row(table, "results", kvio_results_path(results), NULL);
                kvio_table_print(table, stdout);
                kvio_table_destroy(table);
            }
        }
    }
    json_decref(metrics);
    kvio_results_destroy(results);
    return status;
}
