/* The report's public face: creating it, adding inputs (a run's, a compare
 * set's, a capacity search's, a paired control's or kvio mlperf's
 * directory, a cachesim or prefix file, told apart by what they contain),
 * and writing the HTML page or the PNG files. */
#include "kvio/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/report_int.h"

#include "kvio/clock.h"

kvio_status_t kvio_report_create(kvio_report_t **report_p)
{
    kvio_report_t *report = calloc(1, sizeof(*report));
    if (report == NULL)
        return KVIO_ERR_NOMEM;
    report->start_ns = kvio_wall_time_ns();
    *report_p = report;
    return KVIO_OK;
}

kvio_status_t report_build_open(kvio_report_t *report, const char *path, FILE **out_p,
                                char *error_p, size_t error_len)
{
    kvio_status_t status = report_build(report);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "building the charts: %s", kvio_strerror(status));
        return status;
    }
    *out_p = fopen(path, "w");
    if (*out_p == NULL) {
        int err = errno;
        snprintf(error_p, error_len, "%s: %s", path, strerror(err));
        return kvio_status_from_errno(err);
    }
    return KVIO_OK;
}

void kvio_report_destroy(kvio_report_t *report)
{
    if (report == NULL)
        return;
    report_charts_clear(report);
    for (size_t i = 0; i < report->num_runs; i++)
        report_run_free(report->runs[i]);
    for (size_t i = 0; i < report->num_cachesims; i++)
        report_cachesim_free(report->cachesims[i]);
    for (size_t i = 0; i < report->num_prefixes; i++)
        report_prefix_free(report->prefixes[i]);
    for (size_t i = 0; i < report->num_capacities; i++)
        report_capacity_free(report->capacities[i]);
    for (size_t i = 0; i < report->num_paireds; i++)
        report_paired_free(report->paireds[i]);
    for (size_t i = 0; i < report->num_mlperfs; i++)
        report_mlperf_free(report->mlperfs[i]);
    free(report);
}

size_t kvio_report_num_runs(const kvio_report_t *report)
{
    return report->num_runs;
}

size_t kvio_report_num_prefixes(const kvio_report_t *report)
{
    return report->num_prefixes;
}

size_t kvio_report_num_paireds(const kvio_report_t *report)
{
    return report->num_paireds;
}

size_t kvio_report_num_mlperfs(const kvio_report_t *report)
{
    return report->num_mlperfs;
}

void kvio_report_set_provenance(kvio_report_t *report, const kvio_provenance_t *provenance)
{
    report->provenance = *provenance;
}

size_t kvio_report_num_cachesims(const kvio_report_t *report)
{
    return report->num_cachesims;
}

size_t kvio_report_num_capacities(const kvio_report_t *report)
{
    return report->num_capacities;
}

/* The last path component without trailing slashes, as a label. */
static void label_of(const char *path, char *label_p, size_t label_len)
{
    char copy[REPORT_PATH_MAX];
    snprintf(copy, sizeof(copy), "%s", path);
    size_t length = strlen(copy);
    while (length > 1 && copy[length - 1] == '/')
        copy[--length] = '\0';
    const char *base = strrchr(copy, '/');
    base = base != NULL && base[1] != '\0' ? base + 1 : copy;
    report_label_copy(label_p, label_len, base);
}

/* Makes labels unique by appending " (2)", " (3)"... */
static void unique_label(const kvio_report_t *report, size_t count, char *label,
                         size_t label_len)
{
    char base[REPORT_LABEL_MAX];
    snprintf(base, sizeof(base), "%.80s", label);
    for (int suffix = 2; suffix < 1000; suffix++) {
        bool taken = false;
        for (size_t i = 0; i < count && !taken; i++)
            taken = strcmp(report->runs[i]->label, label) == 0;
        if (!taken)
            return;
        snprintf(label, label_len, "%.80s (%d)", base, suffix);
    }
}

/* A file: kvio prefix --format json (it has clusters) or kvio cachesim
 * --json output. */
static kvio_status_t add_file(kvio_report_t *report, const char *path, char *error_p,
                              size_t error_len)
{
    json_t *json = NULL;
    kvio_status_t status = report_json_load(path, &json, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    bool prefix_result = json_object_get(json, "clusters") != NULL;
    if (prefix_result && report->num_prefixes < KVIO_REPORT_MAX_RUNS) {
        report_prefix_t *prefix = NULL;
        status = report_prefix_load(path, json, &prefix, error_p, error_len);
        json_decref(json);
        if (status != KVIO_OK)
            return status;
        report->prefixes[report->num_prefixes++] = prefix;
        return KVIO_OK;
    }
    json_decref(json);
    if (prefix_result || report->num_cachesims == KVIO_REPORT_MAX_RUNS) {
        snprintf(error_p, error_len, "%s: more than %d cachesim or prefix results", path,
                 KVIO_REPORT_MAX_RUNS);
        return KVIO_ERR_INVALID;
    }
    report_cachesim_t *cachesim = NULL;
    status = report_cachesim_load(path, &cachesim, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    report->cachesims[report->num_cachesims++] = cachesim;
    return KVIO_OK;
}

/* A directory: a capacity search, a compare set, a kvio mlperf result, a
 * paired-control result or a run, told apart by the file it holds. */
static kvio_status_t add_directory(kvio_report_t *report, const char *path, char *error_p,
                                   size_t error_len)
{
    char file[REPORT_PATH_MAX + 32], label[REPORT_LABEL_MAX];
    label_of(path, label, sizeof(label));
    snprintf(file, sizeof(file), "%s/capacity.json", path);
    if (access(file, F_OK) == 0)
        return report_capacity_load(report, path, label, error_p, error_len);
    snprintf(file, sizeof(file), "%s/compare.json", path);
    if (access(file, F_OK) == 0) {
        size_t before = report->num_runs;
        kvio_status_t status = report_compare_load(report, path, error_p, error_len);
        /* Variants of a second compare set get unique labels too. */
        for (size_t i = before; status == KVIO_OK && i < report->num_runs; i++)
            unique_label(report, i, report->runs[i]->label, sizeof(report->runs[i]->label));
        return status;
    }
    snprintf(file, sizeof(file), "%s/mlperf.json", path);
    if (access(file, F_OK) == 0)
        return report_mlperf_load(report, path, label, error_p, error_len);
    snprintf(file, sizeof(file), "%s/summary.json", path);
    if (access(file, F_OK) == 0) {
        kvio_status_t status = report_paired_load(report, path, label, error_p, error_len);
        if (status != KVIO_INPROGRESS)
            return status;
    }
    if (report->num_runs == KVIO_REPORT_MAX_RUNS) {
        snprintf(error_p, error_len, "%s: more than %d runs in one report", path,
                 KVIO_REPORT_MAX_RUNS);
        return KVIO_ERR_INVALID;
    }
    unique_label(report, report->num_runs, label, sizeof(label));
    report_run_t *run = NULL;
    const char *dirs[1] = {path};
    kvio_status_t status = report_run_load(label, dirs, 1, &run, error_p, error_len);
    if (status == KVIO_OK)
        report->runs[report->num_runs++] = run;
    return status;
}

kvio_status_t kvio_report_add(kvio_report_t *report, const char *path, char *error_p,
                              size_t error_len)
{
    if (path == NULL || path[0] == '\0') {
        snprintf(error_p, error_len, "empty path");
        return KVIO_ERR_INVALID;
    }
    if (strlen(path) >= REPORT_PATH_MAX - 64) {
        snprintf(error_p, error_len, "%.64s...: path too long", path);
        return KVIO_ERR_INVALID;
    }
    struct stat info;
    if (stat(path, &info) != 0) {
        snprintf(error_p, error_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : KVIO_ERR_IO;
    }
    kvio_status_t status;
    if (S_ISREG(info.st_mode))
        status = add_file(report, path, error_p, error_len);
    else if (S_ISDIR(info.st_mode))
        status = add_directory(report, path, error_p, error_len);
    else {
        snprintf(error_p, error_len, "%s: neither a results directory nor a file", path);
        return KVIO_ERR_INVALID;
    }
    if (status == KVIO_OK)
        report_charts_clear(report);
    return status;
}

kvio_status_t kvio_report_write_html(kvio_report_t *report, const char *path, char *error_p,
                                     size_t error_len)
{
    if (report->num_runs == 0 && report->num_cachesims == 0 && report->num_capacities == 0 &&
        report->num_prefixes == 0 && report->num_paireds == 0 && report->num_mlperfs == 0) {
        snprintf(error_p, error_len, "nothing to report: no results directory, capacity "
                 "search, paired-control or mlperf result, cachesim or prefix file");
        return KVIO_ERR_INVALID;
    }
    char temporary[REPORT_PATH_MAX + 16];
    snprintf(temporary, sizeof(temporary), "%s.tmp", path);
    FILE *out = NULL;
    kvio_status_t status = report_build_open(report, temporary, &out, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    status = report_render_html(report, out);
    if (fflush(out) != 0 || ferror(out))
        status = status == KVIO_OK ? KVIO_ERR_IO : status;
    if (fclose(out) != 0 && status == KVIO_OK)
        status = KVIO_ERR_IO;
    if (status == KVIO_OK && rename(temporary, path) != 0)
        status = kvio_status_from_errno(errno);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s: cannot write the report: %s", path,
                 kvio_strerror(status));
        unlink(temporary);
    }
    return status;
}
