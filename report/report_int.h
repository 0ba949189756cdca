/* Internals of the report module: what is read from a results directory
 * (report_run_t), from a cachesim file (report_cachesim_t), and the chart
 * model (report_chart_t) that both renderers (SVG and gnuplot) draw. */
#ifndef KVIO_REPORT_INT_H
#define KVIO_REPORT_INT_H

#include "kvio/report.h"
#include "kvio/result.h"
#include "kvio/results.h"
#include "kvio/stats.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define REPORT_LABEL_MAX 96
#define REPORT_PATH_MAX 2048
#define REPORT_MAX_TIERS 16
#define REPORT_MAX_TIER_FIELDS 8
#define REPORT_MAX_RANKS 4096
#define REPORT_MAX_CHARTS 256
#define REPORT_MAX_NOTES 32
#define REPORT_MAX_MARKS 256 /* vertical marks on a line chart */
/* Any number in an input larger than this is refused as corrupt. */
#define REPORT_VALUE_LIMIT 1e15

/* Iterations binned on time: at most KVIO_REPORT_MAX_POINTS bins; when a
 * time falls past the last bin, pairs of bins merge and the width doubles. */
typedef struct timeline_bin {
    double kv_weighted; /* Σ kv_usage × duration */
    double weight;      /* Σ duration (s) */
    double kv_sum;      /* Σ kv_usage, for zero-length iterations */
    double batch_sum;
    uint64_t iterations;
    uint64_t preempted;
    /* requests.csv on arrival time: TTFT and prefix hits. */
    double ttft_sum_s;
    uint64_t requests;
    double cached_tokens, input_tokens;
} timeline_bin_t;

typedef struct timeline {
    double width_s;
    size_t used; /* highest bin index used + 1 */
    timeline_bin_t bins[KVIO_REPORT_MAX_POINTS];
} timeline_t;

/* One model update on one serve rank (seconds on the run's clock). */
typedef struct update_row {
    double version;
    double rank;
    double bytes;
    double t[8]; /* report_update_stage_names: ready, publish_start, ... activated */
    bool has[8];
    bool has_cost;       /* updates.csv has the cost columns (a control) */
    double added_e2el_ms; /* the latency its requests gained against the control */
    double stall_ms;      /* the serving time it cost its rank, every cause */
} update_row_t;

#define UPDATE_STAGES 8
#define UPDATE_PUBLISH_START 1
#define UPDATE_PUBLISH_END 2
#define UPDATE_XFER_START 3
#define UPDATE_ACTIVATED 7
extern const char *const report_update_stage_names[UPDATE_STAGES];

/* Percentiles of a tier's latencies the report draws: p50, p95, p99, p99.9. */
#define TIER_QUANTILES 4

/* A tier's traffic: named byte counters, its read and write latency
 * percentiles (ms), and its bandwidth each second, where summary.json has
 * them. */
typedef struct tier_traffic {
    char name[REPORT_LABEL_MAX];
    size_t num_fields;
    char field[REPORT_MAX_TIER_FIELDS][REPORT_LABEL_MAX];
    double value[REPORT_MAX_TIER_FIELDS];
    bool has_latency[2];                  /* read, write */
    double latency_ms[2][TIER_QUANTILES];
    double *per_second[2];                /* GB/s each second, read and write (emulate) */
    size_t seconds;
} tier_traffic_t;

/* The metrics a report reads from one summary.json. */
typedef struct run_metrics {
    double request_throughput, output_throughput, input_throughput, goodput;
    double hit_rate, hit_rate_with_tiers, preemptions, completed;
    double ttft_p50, ttft_p99, tpot_p50, e2el_p99;
    /* model_updates.weight_sync: per update, the trainer's last bucket
     * staged and the last server done; emulate's measured stage sums; the
     * share of the weights' bytes put on the wire. */
    double sync_staged_ms, sync_update_ms, sync_stage_ms, sync_transfer_ms, sync_reload_ms;
    double sync_wire_share;
    /* NAN when the run has none: */
    double accelerator_utilization;   /* 0..1 */
    double cumulative_inference_loss; /* runs with trainers and a loss curve */
    double update_p50_ms, update_p99_ms, update_gbps; /* metrics.model_updates */
    /* metrics.pd.mean_ttft_parts_ms: prefill queue, prefill, decode queue,
     * KV transfer, first decode step (prefill/decode runs; NAN otherwise) */
    double pd_parts_ms[5];
} run_metrics_t;

/* One result set: a results directory, or a compare variant (its seeds). */
typedef struct report_run {
    char label[REPORT_LABEL_MAX];
    char dir[REPORT_PATH_MAX];     /* the first directory */
    char name[REPORT_LABEL_MAX];   /* workload name from summary.json */
    char scheduler[REPORT_LABEL_MAX];
    char admission[REPORT_LABEL_MAX]; /* policy, with its predictor where it has one */
    double offered_rate;           /* measured (metrics.offered_rate), else the configured
                                      stream.arrival.rate (req/s); 0: none */
    char sweep[REPORT_LABEL_MAX];  /* what runs of one rate sweep share: the config
                                      without the rate, seed and scheduler, hashed */
    double slo_ttft_ms, slo_tpot_ms; /* config slo (0: none) */
    bool modelled_updates;         /* simulate: update times from the transport model */
    char update_model[REPORT_LABEL_MAX]; /* its figures and their sources */
    char verdict[REPORT_LABEL_MAX]; /* the first seed's warnings' kinds ("" when valid) */
    char host[REPORT_LABEL_MAX], commit[REPORT_LABEL_MAX]; /* where it ran, what built it */
    bool serving;                  /* summary.json has serving metrics */
    bool has_slo;                  /* config slo: a TTFT or TPOT bound */
    bool has_sync;                 /* metrics.model_updates.weight_sync (first seed) */
    bool sync_measured;            /* ... measured (emulate): the stage sums too */
    bool complete;                 /* every seed complete */
    size_t num_seeds;
    run_metrics_t seeds[KVIO_REPORT_MAX_SEEDS];
    kvio_hist_t *ttft, *tpot, *e2el; /* ns; all seeds pooled */
    bool has_requests;
    timeline_t *timeline;          /* first seed; NULL without iterations.csv */
    timeline_t *arrivals;          /* first seed's requests by arrival; NULL without */
    update_row_t *updates;         /* first seed; NULL without updates.csv */
    double *ttft_deltas, *e2el_deltas; /* first seed, requests.csv's control columns (ms) */
    size_t num_deltas, deltas_capacity;
    size_t num_updates;
    bool updates_truncated;
    size_t num_tiers;              /* from metrics.tiers of the first seed */
    tier_traffic_t tiers[REPORT_MAX_TIERS];
} report_run_t;

/* One cachesim result: hit rate per (eviction, capacity). */
typedef struct cachesim_point {
    char eviction[REPORT_LABEL_MAX];
    double capacity_blocks; /* < 0: unlimited */
    double token_hit_rate, block_hit_rate;
} cachesim_point_t;

typedef struct report_cachesim {
    char label[REPORT_LABEL_MAX];
    char path[REPORT_PATH_MAX];
    double block_tokens;
    size_t num_points;
    cachesim_point_t *points;
} report_cachesim_t;

/* One `kvio prefix --format json` result: the hit rate as it is, without
 * each cluster of breaks and without any, and every turn's prompt and
 * reused tokens. */
typedef struct prefix_cluster {
    char place[REPORT_LABEL_MAX];   /* "system (message 0), tokens 69-71" */
    char example[REPORT_LABEL_MAX]; /* this turn's text | the previous turn's, or "" */
    double turns, cached_without;
} prefix_cluster_t;

typedef struct report_prefix {
    char label[REPORT_LABEL_MAX];
    char path[REPORT_PATH_MAX];
    double prompt_tokens, cached_tokens, cached_without_breaks, later_turns, turns_with_breaks;
    size_t num_clusters;
    prefix_cluster_t *clusters;
    size_t num_turns;
    double *prompt, *reused; /* per turn, in the log's order */
} report_prefix_t;

/* One kvio capacity search (each --vary value's is one): the SLO
 * attainment at every load it probed, in load order. */
typedef struct report_capacity {
    char label[REPORT_LABEL_MAX];
    bool users;             /* load is users (closed loop), else req/s */
    double capacity, attain; /* the answer and the share asked */
    size_t num_points;
    double *load, *attainment;
} report_capacity_t;

/* One update.control: paired result (a directory whose summary.json has
 * update_cost over pairs): each figure averaged over the pairs, its 95 %
 * interval and every pair's value. */
#define REPORT_MAX_PAIRED_FIGURES 16
#define REPORT_MAX_PAIRS 64
typedef struct paired_figure {
    kvio_figure_t figure;   /* the mean over the pairs */
    double mean, ci95;      /* ci95: the interval's half-width */
    size_t num_pairs;       /* 0: summary.json has no per-pair values */
    double pairs[REPORT_MAX_PAIRS]; /* NAN where a pair lacks it */
} paired_figure_t;

typedef struct report_paired {
    char label[REPORT_LABEL_MAX];
    char dir[REPORT_PATH_MAX];
    char host[REPORT_LABEL_MAX], commit[REPORT_LABEL_MAX];
    char verdict[REPORT_LABEL_MAX]; /* its warnings' kinds ("" when valid) */
    size_t num_pairs;
    long long seeds[REPORT_MAX_PAIRS]; /* each pair's seed (-1: not said) */
    size_t num_figures;
    paired_figure_t figures[REPORT_MAX_PAIRED_FIGURES];
} report_paired_t;

/* One kvio mlperf result (mlperf.json): per option its scored figures. */
#define REPORT_MLPERF_FIGURES 5
typedef struct mlperf_option {
    char name[REPORT_LABEL_MAX]; /* "1 ..." */
    double value[REPORT_MLPERF_FIGURES]; /* report_mlperf_figures' order */
} mlperf_option_t;

typedef struct report_mlperf {
    char label[REPORT_LABEL_MAX];
    char dir[REPORT_PATH_MAX];
    char host[REPORT_LABEL_MAX], commit[REPORT_LABEL_MAX], division[16];
    long long clients, trials;
    size_t num_options;
    mlperf_option_t options[8];
} report_mlperf_t;

/* ---------- chart model ---------- */

typedef enum {
    CHART_LINES,   /* x/y series */
    CHART_BARS,    /* categories × series, grouped */
    CHART_STACKED, /* categories × series, stacked */
} chart_kind_t;

typedef struct chart_series {
    char label[REPORT_LABEL_MAX];
    size_t count;
    double *x;      /* lines only */
    double *y;      /* lines: count points; bars: one value per category */
    double *low;    /* bars: whisker (min over seeds) or NULL */
    double *high;
    bool dashed;
    bool step;      /* lines: draw as a step function */
    int color;      /* palette index + 1; 0: by the series' position */
} chart_series_t;

typedef struct report_chart {
    char id[64];
    char section[64];
    char title[160];
    char x_label[96];
    char y_label[96];
    char caption[512];
    chart_kind_t kind;
    bool x_log;
    bool y_log;              /* lines and grouped bars: a log y axis (values > 0) */
    bool y_signed;           /* grouped bars: values below 0 drawn down from 0 (else cut) */
    bool y_integer;          /* counts: ticks on whole numbers */
    bool x_fixed;            /* x range is [x_min, x_max] as given */
    double x_min, x_max;
    bool y_fixed;            /* y range is [y_min, y_max] as given */
    double y_min, y_max;
    size_t num_categories;   /* bars */
    char (*categories)[REPORT_LABEL_MAX];
    size_t num_series;
    chart_series_t *series;
    /* Lines: x values marked by a vertical dashed line (model updates'
     * activations), with what they are in the caption. */
    size_t num_marks;
    double marks[REPORT_MAX_MARKS];
    /* Lines: y values marked by a horizontal dashed line (an SLO bound). */
    size_t num_y_marks;
    double y_marks[4];
} report_chart_t;

struct kvio_report {
    size_t num_runs;
    report_run_t *runs[KVIO_REPORT_MAX_RUNS];
    size_t num_cachesims;
    report_cachesim_t *cachesims[KVIO_REPORT_MAX_RUNS];
    size_t num_capacities;
    report_capacity_t *capacities[KVIO_REPORT_MAX_RUNS];
    size_t num_prefixes;
    report_prefix_t *prefixes[KVIO_REPORT_MAX_RUNS];
    size_t num_paireds;
    report_paired_t *paireds[KVIO_REPORT_MAX_RUNS];
    size_t num_mlperfs;
    report_mlperf_t *mlperfs[KVIO_REPORT_MAX_RUNS];
    kvio_provenance_t provenance; /* the report's own command (the page says it) */
    uint64_t start_ns;
    bool built;
    size_t num_charts;
    report_chart_t *charts[REPORT_MAX_CHARTS];
    size_t num_notes;
    char notes[REPORT_MAX_NOTES][256];
};

/* load.c: reading inputs. */
kvio_status_t report_run_load(const char *label, const char *const *dirs, size_t num_dirs,
                              report_run_t **run_p, char *error_p, size_t error_len);
void report_run_free(report_run_t *run);
kvio_status_t report_compare_load(kvio_report_t *report, const char *dir, char *error_p,
                                  size_t error_len);
kvio_status_t report_cachesim_load(const char *path, report_cachesim_t **cachesim_p,
                                   char *error_p, size_t error_len);
void report_cachesim_free(report_cachesim_t *cachesim);
/* A `kvio prefix --format json` file (json borrowed); KVIO_ERR_PARSE. */
kvio_status_t report_prefix_load(const char *path, const json_t *json,
                                 report_prefix_t **prefix_p, char *error_p, size_t error_len);
void report_prefix_free(report_prefix_t *prefix);
/* DIR/capacity.json of kvio capacity: one search, or one per --vary value;
 * label names the directory. */
kvio_status_t report_capacity_load(kvio_report_t *report, const char *dir, const char *label,
                                   char *error_p, size_t error_len);
void report_capacity_free(report_capacity_t *capacity);
/* summary.c: a results directory's summary.json through the one loader.
 * DIR/summary.json as JSON (for what is not a figure: provenance, config)
 * and as the typed result (both the caller's); refused, naming the file,
 * when it is none this kvio reads, a run that measured nothing, or a
 * figure of the wrong type. */
kvio_status_t report_summary_load(const char *dir, json_t **summary_p, kvio_result_t **result_p,
                                  char *error_p, size_t error_len);
/* One seed's figures into metrics_p; the first's also describe run (name,
 * provenance, verdict, tiers). */
kvio_status_t report_summary_metrics(const char *dir, run_metrics_t *metrics_p,
                                     report_run_t *run, bool first, char *error_p,
                                     size_t error_len);
/* Figure of result into *value_p (absent: absent, or an error naming
 * where + the figure when required); out of range (REPORT_VALUE_LIMIT) is
 * an error naming path. */
kvio_status_t report_figure(const kvio_result_t *result, kvio_figure_t figure, const char *where,
                            const char *path, bool required, double absent, double *value_p,
                            char *error_p, size_t error_len);
/* The kinds of result's warnings, ", "-joined ("" when valid). */
void report_verdict(const kvio_result_t *result, char *verdict_p, size_t verdict_len);
void report_tier_traffic_free(tier_traffic_t *traffic);

/* json.c: a finite number within REPORT_VALUE_LIMIT at object's key
 * (absent and not required: 0), or an error naming path, where and key. */
kvio_status_t report_json_number(const json_t *object, const char *key, const char *where,
                                 const char *path, bool required, double *value_p, char *error_p,
                                 size_t error_len);
/* paired.c: DIR/summary.json of update.control: paired into the report
 * (KVIO_INPROGRESS, nothing added, when it is a run's summary), and its
 * charts. */
kvio_status_t report_paired_load(kvio_report_t *report, const char *dir, const char *label,
                                 char *error_p, size_t error_len);
void report_paired_free(report_paired_t *paired);
kvio_status_t report_paired_charts(kvio_report_t *report);

/* mlperf.c: DIR/mlperf.json of kvio mlperf into the report, and its
 * charts. */
kvio_status_t report_mlperf_load(kvio_report_t *report, const char *dir, const char *label,
                                 char *error_p, size_t error_len);
void report_mlperf_free(report_mlperf_t *mlperf);
kvio_status_t report_mlperf_charts(kvio_report_t *report);

/* json.c: reads a JSON file of at most KVIO_REPORT_MAX_JSON_BYTES. */
kvio_status_t report_json_load(const char *path, json_t **json_p, char *error_p,
                               size_t error_len);
/* Copies text as a label: valid UTF-8, no control characters, bounded. */
void report_label_copy(char *label_p, size_t label_len, const char *text);

/* timeline */
void report_timeline_init(timeline_t *timeline);
void report_timeline_add(timeline_t *timeline, double time_s, double duration_s, double kv_usage,
                         double batch, double preempted);
/* A finished request, binned on its arrival. */
void report_timeline_add_request(timeline_t *timeline, double arrival_s, double ttft_s,
                                 double cached_tokens, double input_tokens);

/* chart.c: the chart set's parts. A chart added to report (NULL when
 * full or out of memory), a series of count points (lines) or one value per
 * category (bars; whiskers: low and high too), the categories (bars), and a
 * note on the page (a chart skipped, and why). */
report_chart_t *report_chart_new(kvio_report_t *report, chart_kind_t kind, const char *id,
                                 const char *section, const char *title, const char *x_label,
                                 const char *y_label);
chart_series_t *report_series_add(report_chart_t *chart, const char *label, size_t count,
                                  bool whiskers);
kvio_status_t report_categories_set(report_chart_t *chart, size_t count);
void report_chart_free(report_chart_t *chart);
void report_add_note(kvio_report_t *report, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* charts.c: builds the chart set once (idempotent). */
kvio_status_t report_build(kvio_report_t *report);
/* Frees the built charts and notes (the report is no longer built). */
void report_charts_clear(kvio_report_t *report);
/* Builds the charts, then opens path for writing; the error names what
 * failed (the charts, or path and errno). */
kvio_status_t report_build_open(kvio_report_t *report, const char *path, FILE **out_p,
                                char *error_p, size_t error_len);

/* render_svg.c, render_gnuplot.c */
kvio_status_t report_render_html(const kvio_report_t *report, FILE *out);
kvio_status_t report_render_gnuplot(const kvio_report_t *report, const char *dir, FILE *out,
                                    size_t *num_charts_p);

/* Helpers shared by the renderers: a series' colour ("#rrggbb"), ticks. */
const char *report_series_color(const chart_series_t *series, size_t index);
double report_nice_step(double range, int target_ticks);
void report_format_tick(double value, double step, char *text_p, size_t text_len);

#endif
