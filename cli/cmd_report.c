/* kvio report: a thin shell around the report module; reads every result
 * kvio writes (results, compare, capacity, mlperf and paired-control
 * directories, cachesim and prefix files), writes
 * OUT/report.html and, with --png, OUT/<chart>.png through gnuplot. */
#include "cli/cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/report.h"

#define MAX_INPUTS 128

static void print_help(void)
{
    printf("usage: kvio report PATH [PATH...] [-o|--out DIR] [--png] [--force]\n\n"
           "Writes DIR/report.html (default DIR: report), one self-contained page\n"
           "(inline SVG, no scripts, no network) that compares the inputs side by side:\n"
           "latency CDFs, throughput and goodput, KV usage, batch size and preemptions\n"
           "over time, prefix hit rate, model-update breakdown and staleness, tier\n"
           "traffic. Each PATH is one of:\n"
           "  a results directory   (kvio run -o DIR: summary.json and CSV files)\n"
           "  a paired control      (update.control: paired: the cost over the pairs)\n"
           "  a compare directory   (kvio compare -o DIR: each variant is one run)\n"
           "  a capacity search     (kvio capacity -o DIR: attainment against load)\n"
           "  an mlperf result      (kvio mlperf -o DIR: bandwidth, throughput, P95s)\n"
           "  a cachesim JSON file  (kvio cachesim --json -o FILE: hit rate vs capacity)\n"
           "  a prefix JSON file    (kvio prefix --format json: where prompts stop hitting)\n\n"
           "options:\n"
           "  -o, --out DIR  where report.html goes (created when missing)\n"
           "  --png          also draw every chart as DIR/<chart>.png with gnuplot\n"
           "  --force        replace an existing DIR/report.html (refused without it)\n");
}

int kvio_cmd_report(int argc, char **argv)
{
    const char *inputs[MAX_INPUTS];
    size_t num_inputs = 0;
    const char *out_dir = "report";
    bool png = false, force = false;
    enum { REPORT_HELP = 1, REPORT_OUT, REPORT_PNG, REPORT_FORCE };
    static const kvio_cli_option_t options[] = {
        {"help", 'h', NULL, REPORT_HELP},
        {"out", 'o', "a directory", REPORT_OUT},
        {"output", 0, "a directory", REPORT_OUT},
        {"png", 0, NULL, REPORT_PNG},
        {"force", 0, NULL, REPORT_FORCE},
        {NULL, 0, NULL, 0},
    };
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio report", argc, argv, options);
    const char *value;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        if (option == REPORT_HELP) {
            print_help();
            return KVIO_EXIT_OK;
        } else if (option == REPORT_OUT) {
            out_dir = value;
        } else if (option == REPORT_PNG) {
            png = true;
        } else if (option == REPORT_FORCE) {
            force = true;
        } else if (option != KVIO_CLI_OPERAND ||
                   kvio_cli_append("kvio report", "inputs", inputs, &num_inputs, MAX_INPUTS,
                                   value) != KVIO_EXIT_OK) {
            return KVIO_EXIT_USAGE;
        }
    }
    if (num_inputs == 0) {
        fprintf(stderr, "kvio report: which results? (kvio report DIR [DIR...] [-o OUT])\n");
        return KVIO_EXIT_USAGE;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/report.html", out_dir);
    struct stat existing;
    if (!force && lstat(path, &existing) == 0) {
        /* Before reading anything: a report a user kept is not replaced. */
        fprintf(stderr, "kvio report: %s exists; use --force to replace it, or -o another "
                "directory\n", path);
        return KVIO_EXIT_USAGE;
    }
    kvio_report_t *report = NULL;
    kvio_status_t status = kvio_report_create(&report);
    kvio_provenance_t provenance = {.argc = argc, .argv = (const char *const *)argv};
    if (status == KVIO_OK)
        kvio_report_set_provenance(report, &provenance);
    char error[2048] = "";
    for (size_t i = 0; i < num_inputs && status == KVIO_OK; i++)
        status = kvio_report_add(report, inputs[i], error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio report: %s\n", error[0] ? error : kvio_strerror(status));
        kvio_report_destroy(report);
        return kvio_cli_exit_status(status);
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kvio report: %s: %s\n", out_dir, strerror(errno));
        kvio_report_destroy(report);
        return KVIO_EXIT_FAILED;
    }
    status = kvio_report_write_html(report, path, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio report: %s\n", error);
        kvio_report_destroy(report);
        return kvio_cli_exit_status(status);
    }
    /* The other kinds of input, where there are any. */
    struct {
        size_t count;
        const char *one, *many;
    } kinds[] = {
        {kvio_report_num_capacities(report), "capacity search", "capacity searches"},
        {kvio_report_num_prefixes(report), "prefix result", "prefix results"},
        {kvio_report_num_paireds(report), "paired-control result", "paired-control results"},
        {kvio_report_num_mlperfs(report), "mlperf result", "mlperf results"},
    };
    char searches[256] = "";
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        if (kinds[k].count > 0)
            snprintf(searches + strlen(searches), sizeof(searches) - strlen(searches),
                     ", %zu %s", kinds[k].count, kinds[k].count == 1 ? kinds[k].one
                                                                     : kinds[k].many);
    printf("kvio report: wrote %s (%zu run%s, %zu cachesim result%s%s)\n", path,
           kvio_report_num_runs(report), kvio_report_num_runs(report) == 1 ? "" : "s",
           kvio_report_num_cachesims(report), kvio_report_num_cachesims(report) == 1 ? "" : "s",
           searches);
    int exit_status = KVIO_EXIT_OK;
    if (png) {
        size_t written = 0;
        status = kvio_report_write_png(report, out_dir, &written, error, sizeof(error));
        if (status == KVIO_OK) {
            printf("kvio report: wrote %zu PNG charts to %s/ (gnuplot script %s/report.gp)\n",
                   written, out_dir, out_dir);
        } else {
            /* The HTML is written; the PNGs asked for are not: say so and fail. */
            fprintf(stderr, "kvio report: no PNG charts: %s\n", error);
            exit_status = KVIO_EXIT_FAILED;
        }
    }
    kvio_report_destroy(report);
    return exit_status;
}
