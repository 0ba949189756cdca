/* libFuzzer target for the results reader of `kvio report`: the input is
 * summary.json, requests.csv, iterations.csv and updates.csv, separated by
 * NUL bytes (a file missing from the input is missing from the directory).
 * They are written to a private results directory and loaded as one run
 * (one seed and two seeds), and the first part is also read as a cachesim
 * file. What was loaded is walked so ASan sees every row it kept. */
#include "report/report_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REPORT_FILES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const report_file_names[REPORT_FILES] = {
    "summary.json", "requests.csv", "iterations.csv", "updates.csv"};

/* The results directory, made once per process (the harness is reentrant
 * only in that sense: libFuzzer runs one input at a time). */
static char report_dir[64];

static void write_part(const char *name, const uint8_t *bytes, size_t length, bool present)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", report_dir, name);
    if (!present) {
        unlink(path);
        return;
    }
    FILE *file = fopen(path, "wb");
    if (file == NULL || (length > 0 && fwrite(bytes, 1, length, file) != length))
        abort();
    fclose(file);
}

/* Leaves nothing behind when the fuzzer exits. */
static void remove_report_dir(void)
{
    for (int part = 0; part < REPORT_FILES; part++)
        write_part(report_file_names[part], NULL, 0, false);
    rmdir(report_dir);
}

static double walk_run(const report_run_t *run)
{
    double sum = 0;
    for (size_t i = 0; i < run->num_updates; i++)
        for (int stage = 0; stage < UPDATE_STAGES; stage++)
            sum += run->updates[i].has[stage] ? run->updates[i].t[stage] : 0;
    if (run->timeline != NULL)
        for (size_t i = 0; i < run->timeline->used; i++)
            sum += run->timeline->bins[i].weight;
    for (size_t i = 0; i < run->num_tiers; i++)
        for (size_t f = 0; f < run->tiers[i].num_fields; f++)
            sum += run->tiers[i].value[f] + (double)strlen(run->tiers[i].field[f]);
    return sum + (double)strlen(run->label) + (double)strlen(run->name) +
           (double)strlen(run->scheduler);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (report_dir[0] == '\0') {
        /* In memory where there is a /dev/shm (fuzzing is I/O-bound else). */
        snprintf(report_dir, sizeof(report_dir), "%s/kvio-fuzz-report-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (mkdtemp(report_dir) == NULL)
            abort();
        atexit(remove_report_dir);
    }
    size_t start = 0;
    for (int part = 0; part < REPORT_FILES; part++) {
        bool present = start <= size;
        const uint8_t *end = present ? memchr(data + start, '\0', size - start) : NULL;
        size_t length = present ? (end != NULL ? (size_t)(end - data) - start : size - start) : 0;
        write_part(report_file_names[part], data + start, length, present);
        start = present && end != NULL ? start + length + 1 : size + 1;
    }
    char error[1024] = "";
    const char *dirs[2] = {report_dir, report_dir};
    volatile double sink = 0;
    for (size_t seeds = 1; seeds <= 2; seeds++) {
        report_run_t *run = NULL;
        error[0] = '\0';
        kvio_status_t status = report_run_load("fuzz", dirs, seeds, &run, error, sizeof(error));
        if (status == KVIO_OK) {
            if (run == NULL || run->num_seeds != seeds)
                abort(); /* success means every seed was read */
            sink += walk_run(run);
            report_run_free(run);
        } else if (run != NULL || error[0] == '\0') {
            abort(); /* a failure says why and returns nothing */
        }
    }
    char path[128];
    snprintf(path, sizeof(path), "%s/summary.json", report_dir);
    report_cachesim_t *cachesim = NULL;
    error[0] = '\0';
    if (report_cachesim_load(path, &cachesim, error, sizeof(error)) == KVIO_OK) {
        for (size_t i = 0; i < cachesim->num_points; i++)
            sink += cachesim->points[i].token_hit_rate +
                    (double)strlen(cachesim->points[i].eviction);
        report_cachesim_free(cachesim);
    }
    (void)sink;
    return 0;
}
