/* Regression inputs found by the fuzzers (fuzz/): every file in
 * tests/fixtures/crashers/ is fed through the fuzz harness that found it,
 * named by the file's prefix (fuzz_config-*, fuzz_trace_FORMAT-*, fuzz_report-*,
 * fuzz_conversation-*). The
 * harness aborts on a broken invariant; under bench/sanitize.sh ASan and
 * UBSan check each input too. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

/* The harnesses themselves, with their libFuzzer entry points renamed. */
#define LLVMFuzzerTestOneInput fuzz_config_input
#include "fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_trace_input
#include "fuzz/fuzz_trace.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_report_input
#include "fuzz/fuzz_report.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_conversation_input
#include "fuzz/fuzz_conversation.c"
#undef LLVMFuzzerTestOneInput

#define CRASHERS KVIO_SOURCE_DIR "/tests/fixtures/crashers"

static uint8_t *read_bytes(const char *path, size_t *size_p)
{
    FILE *file = fopen(path, "rb");
    cr_assert_not_null(file, "%s", path);
    cr_assert_eq(fseek(file, 0, SEEK_END), 0);
    long size = ftell(file);
    cr_assert_geq(size, 0);
    rewind(file);
    uint8_t *bytes = malloc((size_t)size + 1);
    cr_assert_not_null(bytes);
    cr_assert_eq(fread(bytes, 1, (size_t)size, file), (size_t)size);
    fclose(file);
    *size_p = (size_t)size;
    return bytes;
}

Test(crashers, every_kept_input_goes_through_its_harness, .timeout = 60)
{
    DIR *dir = opendir(CRASHERS);
    cr_assert_not_null(dir);
    size_t fed = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", CRASHERS, name);
        size_t size;
        uint8_t *bytes = read_bytes(path, &size);
        static const char trace_prefix[] = "fuzz_trace_";
        if (strncmp(name, "fuzz_config-", 12) == 0) {
            fuzz_config_input(bytes, size);
        } else if (strncmp(name, "fuzz_report-", 12) == 0) {
            fuzz_report_input(bytes, size);
        } else if (strncmp(name, "fuzz_conversation-", 18) == 0) {
            fuzz_conversation_input(bytes, size);
        } else if (strncmp(name, trace_prefix, sizeof(trace_prefix) - 1) == 0) {
            char format[32];
            const char *start = name + sizeof(trace_prefix) - 1;
            const char *dash = strchr(start, '-');
            cr_assert_not_null(dash, "%s: expected fuzz_trace_FORMAT-description", name);
            cr_assert_lt((size_t)(dash - start), sizeof(format));
            memcpy(format, start, (size_t)(dash - start));
            format[dash - start] = '\0';
            fuzz_trace(format, bytes, size);
        } else {
            cr_assert_fail("%s: name it after the fuzz target (fuzz_config-..., "
                           "fuzz_trace_FORMAT-..., fuzz_report-..., fuzz_conversation-...)",
                           name);
        }
        free(bytes);
        fed++;
    }
    closedir(dir);
    cr_assert_gt(fed, 0);
}

/* fuzz_config-long-set-with-bad-value: an override longer than the error
 * buffer with a value that is not YAML read past the buffer's end while
 * wording the error. */
Test(crashers, long_set_with_bad_value_gives_a_whole_error, .timeout = 10)
{
    char assignment[700];
    memset(assignment, 'k', sizeof(assignment));
    memcpy(assignment + 600, "=[unclosed", 10);
    assignment[610] = '\0';
    kvio_config_doc_t *doc = NULL;
    char error[2048] = "";
    cr_assert_eq(kvio_config_doc_parse("a: 1\n", 5, "t.yaml", &doc, error, sizeof(error)),
                 KVIO_OK);
    cr_assert_eq(kvio_config_doc_set(doc, assignment, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(test_contains(error, "bad value: "), "%s", error);
    kvio_config_doc_destroy(doc);
}

/* fuzz_report-tpot-past-uint64-ns: a requests.csv row whose times (each in
 * range) give a TPOT past 2^64 ns (a fractional output_tokens just above 1)
 * was cast to uint64_t, undefined behaviour (0 on x86). Durations now
 * saturate. */
Test(crashers, report_durations_past_uint64_ns_saturate, .timeout = 10)
{
    char *dir = test_tmpdir();
    char *summary_src =
        test_read_file(KVIO_SOURCE_DIR "/tests/fixtures/report/run-fcfs/summary.json");
    cr_assert_not_null(summary_src);
    free(test_write_file(dir, "summary.json", summary_src));
    free(summary_src);
    free(test_write_file(dir, "requests.csv",
                         "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,"
                         "cached_tokens,preemptions,model_version,measured\n"
                         "0,0,0,1,1000000,10,1.00000001,0,0,0,1\n"));
    const char *dirs[1] = {dir};
    report_run_t *run = NULL;
    char error[1024] = "";
    cr_assert_eq(report_run_load("big", dirs, 1, &run, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    cr_assert_eq(kvio_hist_count(run->tpot), 1);
    cr_expect_gt(kvio_hist_max(run->tpot), 1000000000000000000ull,
                 "a TPOT of 1e23 ns is recorded as the largest value, not wrapped");
    report_run_free(run);
    test_rmtree(dir);
    free(dir);
}
