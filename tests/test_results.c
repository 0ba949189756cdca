/* Tests for results directories: summary.json parses back, the write is
 * atomic (a temporary name, then rename), an existing directory is refused
 * unless forced, and an unwritable one is refused before a run. */
#include "kvio/results.h"
#include "kvio/run.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers.h"

Test(results, summary_parses_back_with_schema_and_config, .timeout = 60)
{
    char *dir = test_tmpdir();
    char out[1100];
    snprintf(out, sizeof(out), "%s/run", dir);
    kvio_workload_t workload;
    char error[512];
    const char *sets[] = {"name=roundtrip", "duration=2s", "serve.kvcache.capacity=512MiB",
                          "train.bytes=32MiB", "model.preset=llama3.2-1b"};
    cr_assert_eq(kvio_workload_load("quickstart", sets, 5, &workload, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_run_options_t options = {.output_dir = out, .quiet = true, .source = "quickstart"};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    kvio_workload_free(&workload);
    cr_assert_str_eq(result.results_dir, out);

    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    json_error_t json_error;
    json_t *summary = json_load_file(path, 0, &json_error);
    cr_assert_not_null(summary, "%s", json_error.text);
    cr_assert_eq(test_json_integer(summary, "schema_version"),
                 KVIO_SCHEMA_VERSION);
    cr_assert(test_json_true(summary, "complete"));
    cr_assert_str_eq(test_json_string(summary, "kvio_version"), KVIO_VERSION);
    json_t *config = json_object_get(summary, "config");
    cr_assert_str_eq(test_json_string(config, "name"), "roundtrip");
    cr_assert_str_eq(test_json_string(config, "duration"), "2s");
    cr_assert_not_null(json_object_get(summary, "start_time"));
    cr_assert_not_null(json_object_get(summary, "end_time"));
    json_decref(summary);
    snprintf(path, sizeof(path), "%s/summary.json.tmp", out);
    cr_assert_neq(access(path, F_OK), 0, "temporary file left behind");
    test_rmtree(dir);
    free(dir);
}

Test(results, existing_directory_is_refused_unless_forced, .timeout = 10)
{
    char *dir = test_tmpdir();
    kvio_results_t *results = NULL;
    char error[512];
    cr_assert_eq(kvio_results_create(dir, "x", false, &results, error, sizeof(error)),
                 KVIO_ERR_EXISTS);
    cr_assert(strstr(error, "exists (use --force") != NULL, "%s", error);
    cr_assert_null(results);
    cr_assert_eq(kvio_results_create(dir, "x", true, &results, error, sizeof(error)), KVIO_OK);
    kvio_results_destroy(results);
    test_rmtree(dir);
    free(dir);
}

Test(results, atomic_write_replaces_whole_file_and_leaves_no_temporary, .timeout = 10)
{
    char *dir = test_tmpdir();
    char path[1100];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    char error[256];
    json_t *first = json_pack("{s:i}", "version", 1);
    json_t *second = json_pack("{s:i, s:s}", "version", 2, "extra", "yes");
    cr_assert_eq(kvio_json_write_atomic(path, first, error, sizeof(error)), KVIO_OK);
    /* A reader holding the old file keeps seeing the old, whole content. */
    FILE *reader = fopen(path, "r");
    cr_assert_eq(kvio_json_write_atomic(path, second, error, sizeof(error)), KVIO_OK);
    json_error_t json_error;
    json_t *old = json_loadf(reader, 0, &json_error);
    fclose(reader);
    cr_assert_not_null(old);
    cr_assert_eq(test_json_integer(old, "version"), 1);
    json_t *now = json_load_file(path, 0, &json_error);
    cr_assert_eq(test_json_integer(now, "version"), 2);
    char temporary[1200];
    snprintf(temporary, sizeof(temporary), "%s.tmp", path);
    cr_assert_neq(access(temporary, F_OK), 0);
    json_decref(first);
    json_decref(second);
    json_decref(old);
    json_decref(now);
    test_rmtree(dir);
    free(dir);
}

Test(results, unwritable_directory_is_refused_before_the_run, .timeout = 10)
{
    if (geteuid() == 0) {
        /* root writes anywhere; /proc stands in for a directory nobody can create in. */
        kvio_results_t *results = NULL;
        char error[512];
        cr_assert_neq(kvio_results_create("/proc/kvio-results", "x", false, &results, error,
                                          sizeof(error)), KVIO_OK);
        cr_assert(strstr(error, "/proc/kvio-results: cannot create results directory") != NULL,
                  "%s", error);
        return;
    }
    char *dir = test_tmpdir();
    chmod(dir, 0500);
    char sub[1100];
    snprintf(sub, sizeof(sub), "%s/run", dir);
    kvio_results_t *results = NULL;
    char error[512];
    cr_assert_neq(kvio_results_create(sub, "x", false, &results, error, sizeof(error)), KVIO_OK);
    chmod(dir, 0700);
    test_rmtree(dir);
    free(dir);
}

Test(results, csv_rows_and_table_render, .timeout = 10)
{
    char *dir = test_tmpdir();
    kvio_results_t *results;
    char error[256];
    cr_assert_eq(kvio_results_create(dir, "x", true, &results, error, sizeof(error)), KVIO_OK);
    kvio_csv_t *csv;
    cr_assert_eq(kvio_csv_open(results, "requests.csv", "id,ttft_ms", &csv), KVIO_OK);
    cr_assert_eq(kvio_csv_row(csv, "%d,%.3f", 1, 2.5), KVIO_OK);
    cr_assert_eq(kvio_csv_close(csv), KVIO_OK);
    char path[1100];
    snprintf(path, sizeof(path), "%s/requests.csv", dir);
    char *text = test_read_file(path);
    cr_assert_str_eq(text, "id,ttft_ms\n1,2.500\n");
    free(text);
    kvio_results_destroy(results);

    kvio_table_t *table;
    cr_assert_eq(kvio_table_create("t", &table), KVIO_OK);
    kvio_table_add_row(table, "metric", "value", NULL);
    kvio_table_add_row(table, "ttft_ms", "12.5", NULL);
    char *buffer = NULL;
    size_t length = 0;
    FILE *memory = open_memstream(&buffer, &length);
    kvio_table_print(table, memory);
    fclose(memory);
    cr_assert_str_eq(buffer, "t\n  metric   value\n  ttft_ms   12.5\n");
    free(buffer);
    kvio_table_destroy(table);
    test_rmtree(dir);
    free(dir);
}
