/* Reports: reads every result kvio writes (a run's results directory, the
 * output of `kvio compare`, `kvio capacity` and `kvio mlperf`, an
 * update.control: paired result, cachesim and prefix JSON), builds one set
 * of charts from them (latency CDFs, throughput, KV usage, preemptions,
 * hit rate vs capacity, model updates and their cost, tier traffic, MLPerf
 * Storage's scores) and renders that set as a self-contained HTML page
 * with inline SVG, or as PNG files through gnuplot. */
#ifndef KVIO_REPORT_H
#define KVIO_REPORT_H

#include "kvio/results.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>

/* Bounds on what a report reads, so that any input costs bounded memory. */
#define KVIO_REPORT_MAX_RUNS 64          /* result sets compared side by side */
#define KVIO_REPORT_MAX_SEEDS 256        /* runs per compare variant (--repeat) */
#define KVIO_REPORT_MAX_POINTS 2000      /* points per time-series line */
#define KVIO_REPORT_MAX_UPDATES 100000   /* updates.csv rows kept per run */
#define KVIO_REPORT_MAX_JSON_BYTES (64u << 20) /* summary.json, compare.json, cachesim */

typedef struct kvio_report kvio_report_t;

/* Creates an empty report; the caller destroys it. */
kvio_status_t kvio_report_create(kvio_report_t **report_p);

void kvio_report_destroy(kvio_report_t *report);

/* Adds one input. path is either a results directory (summary.json, and
 * requests.csv, iterations.csv, updates.csv when present), a `kvio compare`
 * output directory (compare.json; each variant becomes one run, its seeds
 * pooled), a `kvio capacity` directory (capacity.json), a `kvio mlperf`
 * one (mlperf.json), an update.control: paired result (summary.json with
 * update_cost over pairs), or a file
 * written by `kvio cachesim --json` or `kvio prefix --format json`. Bad
 * input returns
 * KVIO_ERR_PARSE/NOT_FOUND/INVALID with a message naming the file (and the
 * line or key) in error_p; the report is left as it was. */
kvio_status_t kvio_report_add(kvio_report_t *report, const char *path, char *error_p,
                              size_t error_len);

/* Number of runs (result sets), cachesim results, capacity searches,
 * prefix, paired-control and mlperf results added so far. */
size_t kvio_report_num_runs(const kvio_report_t *report);
size_t kvio_report_num_cachesims(const kvio_report_t *report);
size_t kvio_report_num_capacities(const kvio_report_t *report);
size_t kvio_report_num_prefixes(const kvio_report_t *report);
size_t kvio_report_num_paireds(const kvio_report_t *report);
size_t kvio_report_num_mlperfs(const kvio_report_t *report);

/* The command that makes the report (the page's provenance says it with
 * kvio's version, commit, host and time); borrowed until it is written. */
void kvio_report_set_provenance(kvio_report_t *report, const kvio_provenance_t *provenance);

/* Writes the report as one HTML file (no scripts, no external references;
 * charts as inline SVG), through a temporary name and a rename. At least one
 * run or cachesim result must have been added. */
kvio_status_t kvio_report_write_html(kvio_report_t *report, const char *path, char *error_p,
                                     size_t error_len);

/* True when a gnuplot executable is found ($KVIO_GNUPLOT, else on $PATH). */
bool kvio_report_gnuplot_available(void);

/* Renders every chart as dir/<chart id>.png with gnuplot (the script is kept
 * as dir/report.gp). KVIO_ERR_UNSUPPORTED when gnuplot is not installed;
 * *num_written_p receives the number of charts rendered. */
kvio_status_t kvio_report_write_png(kvio_report_t *report, const char *dir,
                                    size_t *num_written_p, char *error_p, size_t error_len);

#endif
