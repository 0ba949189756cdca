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
    kvio_status_t status = kvio_results_create(options->output_dir, workload->name,
                                               options->force, &results, error_p, error_len);
    if (status != KVIO_OK)
        return status;

    uint64_t start_ns = kvio_wall_time_ns();
    const run_part_t parts[] = {
        {"config", true, "validated and recorded"},
        {"results", true, "results directory and summary written"},
        {"engine", false, "serving engine not built yet"},
        {"model_updates", false, "training ranks and transports not built yet"},
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
    json_object_set_new(summary, "metrics", json_object());
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
                kvio_table_add_row(table, "results", kvio_results_path(results), NULL);
                kvio_table_print(table, stdout);
                kvio_table_destroy(table);
            }
        }
    }
    kvio_results_destroy(results);
    return status;
}
