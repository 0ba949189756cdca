/* Tests for the trace reader: Mooncake JSONL fields, stable time order, bad
 * lines named by file and line (or skipped and counted), and agreement of
 * the fast scanner with the jansson path. */
#include "kvio/trace.h"

#include "tests/helpers.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs the reader with stderr sent to a file; returns the status and the
 * captured text (malloc'd) in *err_p. */
static kvio_status_t read_capturing(const char *path, bool skip_bad, kvio_trace_t **trace_p,
                                    char **err_p)
{
    char capture[] = "/tmp/kvio-test-stderr-XXXXXX";
    int fd = mkstemp(capture);
    cr_assert(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    kvio_trace_options_t options = {.skip_bad = skip_bad};
    kvio_status_t status = kvio_trace_read_mooncake(path, &options, trace_p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    *err_p = test_read_file(capture);
    unlink(capture);
    return status;
}

static kvio_trace_t *read_ok(const char *text)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "trace.jsonl", text);
    kvio_trace_t *trace = NULL;
    cr_assert_eq(kvio_trace_read_mooncake(path, NULL, &trace), KVIO_OK);
    test_rmtree(dir);
    free(path);
    free(dir);
    return trace;
}

static void assert_ids(const kvio_trace_request_t *request, const uint64_t *ids, size_t count)
{
    cr_assert_eq(request->num_hash_ids, count, "line %zu: %zu ids, expected %zu", request->line,
                 request->num_hash_ids, count);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(request->hash_ids[i], ids[i], "line %zu id %zu", request->line, i);
}

Test(trace, reads_mooncake_fields_in_file_order, .timeout = 10)
{
    kvio_trace_t *trace = read_ok(
        "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 6, \"hash_ids\": [0, 1]}\n"
        "\n"
        "{\"hash_ids\": [], \"timestamp\": 27.5, \"input_length\": 12, \"output_length\": 0}\n"
        "{\"timestamp\": 30, \"input_length\": 600, \"hash_ids\": [5,6 ,7]}");
    cr_assert_eq(kvio_trace_num_requests(trace), 3);
    const kvio_trace_request_t *first = kvio_trace_request(trace, 0);
    cr_assert_float_eq(first->timestamp, 0.0, 1e-12);
    cr_assert_eq(first->input_length, 1000);
    cr_assert_eq(first->output_length, 6);
    cr_assert_eq(first->line, 1);
    assert_ids(first, (uint64_t[]){0, 1}, 2);
    const kvio_trace_request_t *second = kvio_trace_request(trace, 1);
    cr_assert_float_eq(second->timestamp, 27.5, 1e-12);
    cr_assert_eq(second->line, 3, "blank lines still count for line numbers");
    assert_ids(second, NULL, 0);
    const kvio_trace_request_t *third = kvio_trace_request(trace, 2);
    cr_assert_eq(third->output_length, 0, "output_length is optional");
    assert_ids(third, (uint64_t[]){5, 6, 7}, 3);
    cr_assert_null(kvio_trace_request(trace, 3));
    kvio_trace_destroy(trace);
}

/* Lines that the fast scanner hands to jansson (escapes, nested values,
 * exponents, 19-digit ids) must read the same as plain ones. */
Test(trace, unusual_but_valid_json_reads_like_plain_lines, .timeout = 10)
{
    kvio_trace_t *trace = read_ok(
        "{\"timestamp\": 1e1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1234567890123456789, 2]}\n"
        "{\"timestamp\": 11, \"input_length\": 5, \"hash_ids\": [3], \"note\": \"a\\\"b\", \"x\": {\"y\": [1]}}\n"
        "  {\"timestamp\":12,\"input_length\":5,\"hash_ids\":[4],\"flag\":true,\"z\":null}  \r\n");
    cr_assert_eq(kvio_trace_num_requests(trace), 3);
    const kvio_trace_request_t *first = kvio_trace_request(trace, 0);
    cr_assert_float_eq(first->timestamp, 10.0, 1e-12);
    assert_ids(first, (uint64_t[]){1234567890123456789ULL, 2}, 2);
    assert_ids(kvio_trace_request(trace, 1), (uint64_t[]){3}, 1);
    assert_ids(kvio_trace_request(trace, 2), (uint64_t[]){4}, 1);
    cr_assert_float_eq(kvio_trace_request(trace, 2)->timestamp, 12.0, 1e-12);
    kvio_trace_destroy(trace);
}

Test(trace, sort_by_time_is_stable, .timeout = 10)
{
    kvio_trace_t *trace = read_ok("{\"timestamp\": 5, \"input_length\": 1, \"hash_ids\": [1]}\n"
                                  "{\"timestamp\": 2, \"input_length\": 1, \"hash_ids\": [2]}\n"
                                  "{\"timestamp\": 5, \"input_length\": 1, \"hash_ids\": [3]}\n"
                                  "{\"timestamp\": 2, \"input_length\": 1, \"hash_ids\": [4]}\n"
                                  "{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": [5]}\n");
    kvio_trace_sort_by_time(trace);
    uint64_t expected[] = {5, 2, 4, 1, 3};
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(kvio_trace_request(trace, i)->hash_ids[0], expected[i], "position %zu", i);
    kvio_trace_destroy(trace);
}

/* Held by value: Criterion may run each case in a fresh process, where
 * pointers into the parent's memory would not be valid. */
typedef struct bad_line {
    char line[128];
    char reason[64];
} bad_line_t;

ParameterizedTestParameters(trace, bad_line_is_an_error_naming_file_and_line)
{
    static bad_line_t cases[] = {
        {"{\"timestamp\": 1, \"input_length\": 5, \"hash_ids\": [1,", "invalid JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"input_length\": 5, \"hash_ids\": [1]}", "timestamp is missing"},
        {"{\"timestamp\": \"x\", \"input_length\": 5, \"hash_ids\": [1]}", "timestamp is not a number"},
        {"{\"timestamp\": 1, \"hash_ids\": [1]}", "input_length is missing"},
        {"{\"timestamp\": 1, \"input_length\": -5, \"hash_ids\": [1]}", "input_length is not a non-negative integer"},
        {"{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1.5, \"hash_ids\": [1]}", "output_length is not"},
        {"{\"timestamp\": 1, \"input_length\": 5}", "hash_ids is missing"},
        {"{\"timestamp\": 1, \"input_length\": 5, \"hash_ids\": 7}", "hash_ids is not an array"},
        {"{\"timestamp\": 1, \"input_length\": 5, \"hash_ids\": [1, \"a\"]}", "hash_ids[1] is not"},
        {"{\"timestamp\": 1, \"input_length\": 5, \"hash_ids\": [1, -2]}", "hash_ids[1] is not"},
    };
    return cr_make_param_array(bad_line_t, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(bad_line_t *bad, trace, bad_line_is_an_error_naming_file_and_line, .timeout = 10)
{
    char *dir = test_tmpdir();
    char text[512];
    snprintf(text, sizeof(text),
             "{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": [1]}\n%s\n"
             "{\"timestamp\": 2, \"input_length\": 5, \"hash_ids\": [2]}\n",
             bad->line);
    char *path = test_write_file(dir, "trace.jsonl", text);
    kvio_trace_t *trace = NULL;
    char *err = NULL;
    cr_assert_eq(read_capturing(path, false, &trace, &err), KVIO_ERR_PARSE);
    cr_assert_null(trace);
    char where[256];
    snprintf(where, sizeof(where), "%s:2: ", path);
    cr_assert(test_contains(err, where), "stderr '%s' lacks '%s'", err, where);
    cr_assert(test_contains(err, bad->reason), "stderr '%s' lacks '%s'", err, bad->reason);
    free(err);

    cr_assert_eq(read_capturing(path, true, &trace, &err), KVIO_OK);
    cr_assert_eq(kvio_trace_num_requests(trace), 2);
    cr_assert_eq(kvio_trace_num_skipped(trace), 1);
    cr_assert_eq(kvio_trace_request(trace, 1)->line, 3);
    cr_assert(test_contains(err, where), "the skipped line is still reported: '%s'", err);
    kvio_trace_destroy(trace);
    free(err);
    test_rmtree(dir);
    free(path);
    free(dir);
}

Test(trace, missing_file_is_not_found, .timeout = 10)
{
    kvio_trace_t *trace = NULL;
    char *err = NULL;
    cr_assert_eq(read_capturing("/nonexistent/kvio/trace.jsonl", false, &trace, &err),
                 KVIO_ERR_NOT_FOUND);
    cr_assert(test_contains(err, "/nonexistent/kvio/trace.jsonl"));
    free(err);
}

Test(trace, format_names_map_to_readers, .timeout = 10)
{
    kvio_trace_format_t format;
    cr_assert_eq(kvio_trace_format_from_name("mooncake", &format), KVIO_OK);
    cr_assert_eq(format, KVIO_TRACE_FORMAT_MOONCAKE);
    cr_assert_eq(kvio_trace_format_from_name("azure-csv", &format), KVIO_ERR_INVALID);
}
