/* A run's result, typed: every figure kvio reports is declared once, in
 * kvio/figures.def (its name in summary.json, kind, unit, source, meaning,
 * and where it shows: the run table, kvio compare, vllm.json), and a run
 * fills a kvio_result_t with values by figure, never by string. Everything
 * that shows a result reads the declaration: summary.json's metrics are
 * rendered from it, the stdout table, compare's rows, vllm.json's keys and
 * docs/results.md's reference table too, and a summary.json written by
 * any kvio version is read back through one loader (kvio_result_load).
 * The verdict (valid, with each warning's value and threshold) is part of
 * the result. */
#ifndef KVIO_RESULT_H
#define KVIO_RESULT_H

#include "kvio/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Where a figure's value comes from. */
typedef enum {
    KVIO_SOURCE_MEASURED,   /* counted or timed during the run */
    KVIO_SOURCE_MODELLED,   /* from the cost model or a default bandwidth */
    KVIO_SOURCE_CONFIGURED, /* the workload's setting, echoed */
    KVIO_SOURCE_DERIVED,    /* computed from other figures (its derive says how) */
} kvio_figure_source_t;

/* How a figure's value is written. */
typedef enum {
    KVIO_KIND_COUNT,    /* an integer */
    KVIO_KIND_REAL,     /* a real number */
    KVIO_KIND_FRACTION, /* 0 to 1 (the table shows it as a percentage) */
    KVIO_KIND_TEXT,     /* a string */
    KVIO_KIND_BOOL,     /* true or false */
} kvio_figure_kind_t;

/* Table flags: show the cell only when the value is not 0. */
#define KVIO_FIGURE_NONZERO 1u

/* A derived figure's rule: scale x numerator / denominator (0 when the
 * denominator is 0); with no denominator (KVIO_NUM_FIGURES), scale x
 * numerator. */
typedef struct kvio_figure_derive {
    int numerator, denominator;
    double scale;
} kvio_figure_derive_t;

/* One declared figure. name is its path under summary.json's metrics
 * object (keys joined by dots); in a child result (a rank's, a tier's) it
 * is relative to the child's object. row: the run table's row it shows on
 * ("" none; "@label": the latency grid's row, cell its column's title),
 * cell: the printf format of its part of that row (one double: a
 * fraction's value times 100; or %s for text), cells of one row joined as
 * written. compare: kvio compare's row label ("" none). vllm: the key
 * vllm.json gives it ("" none). */
typedef struct kvio_figure_decl {
    const char *name;
    /* A figure of the entries of a list ("tiers": one per tier and rank)
     * names itself "LIST.NAME"; an entry of that list shows it as NAME.
     * NULL: a run's figure (and a per_rank entry's). */
    const char *scope;
    kvio_figure_kind_t kind;
    const char *unit;
    kvio_figure_source_t source;
    const char *meaning;
    const char *row, *cell;
    unsigned flags;
    const char *compare;
    const char *vllm;
    kvio_figure_derive_t derive; /* KVIO_SOURCE_DERIVED only */
} kvio_figure_decl_t;

/* The figures, KVIO_FIG_<id>. A build may declare more after these
 * (KVIO_EXTRA_FIGURES: the test that adds one by its declaration alone), so
 * code that walks the declaration counts with kvio_num_figures(), which
 * only core/result.c answers; KVIO_NUM_FIGURES is this header's count and
 * the end-of-list mark of a derive rule. */
#define KVIO_FIGURE(id, ...) KVIO_FIG_##id,
typedef enum {
    KVIO_FIGURE_NONE = -1,
#include "kvio/figures.def"
    KVIO_NUM_FIGURES
} kvio_figure_t;
#undef KVIO_FIGURE

/* How many figures this build declares (at least KVIO_NUM_FIGURES). */
int kvio_num_figures(void);

/* The declaration of figure (NULL out of range). */
const kvio_figure_decl_t *kvio_figure_decl(kvio_figure_t figure);

/* The figure declared under name (its path under metrics), or
 * KVIO_FIGURE_NONE. */
kvio_figure_t kvio_figure_find(const char *name);

/* The source's word ("measured", ...). */
const char *kvio_figure_source_name(kvio_figure_source_t source);

typedef struct kvio_result kvio_result_t;

/* An empty result; the caller destroys it. NULL when out of memory. */
kvio_result_t *kvio_result_create(void);
void kvio_result_destroy(kvio_result_t *result);

/* Sets a figure (a number; a count is rounded when rendered). */
void kvio_result_set(kvio_result_t *result, kvio_figure_t figure, double value);
/* Sets a text figure (copied). */
void kvio_result_set_text(kvio_result_t *result, kvio_figure_t figure, const char *text);
/* Takes a figure out (as if never set). */
void kvio_result_unset(kvio_result_t *result, kvio_figure_t figure);

/* Whether the figure has a value; its value, or NAN when it has none. */
bool kvio_result_has(const kvio_result_t *result, kvio_figure_t figure);
double kvio_result_get(const kvio_result_t *result, kvio_figure_t figure);
/* A text figure's value (borrowed), NULL when it has none. */
const char *kvio_result_text(const kvio_result_t *result, kvio_figure_t figure);

/* Sets the statistics figures that begin with mean (a KVIO_STATS_FIGURES
 * group: mean, p50, p90, p99, max, count) from count values, as numpy
 * computes them (linear percentiles); values are sorted in place. */
void kvio_result_set_stats(kvio_result_t *result, kvio_figure_t mean, double *values,
                           size_t count);

/* Copies every figure src has, and its detail, into dst (children not). */
void kvio_result_merge(kvio_result_t *dst, const kvio_result_t *src);

/* Sets every derived figure whose inputs are set (those whose numerator
 * is missing stay unset). */
void kvio_result_derive(kvio_result_t *result);

/* Children: a list of results under a name in metrics (per_rank, tiers).
 * kvio_result_child returns entry index of list name, creating it (and
 * those before it) empty; NULL when out of memory. */
kvio_result_t *kvio_result_child(kvio_result_t *result, const char *list, size_t index);
size_t kvio_result_num_children(const kvio_result_t *result, const char *list);
/* Entry index of list, NULL when there is none. */
const kvio_result_t *kvio_result_child_at(const kvio_result_t *result, const char *list,
                                          size_t index);

/* Detail: structure under metrics that no reader needs as a figure (a
 * list of versions served, a per-bucket breakdown), set by its path (a
 * declared figure's name, or a path inside one, is refused:
 * KVIO_ERR_EXISTS, value released). The value is stolen. */
kvio_status_t kvio_result_set_detail(kvio_result_t *result, const char *path, json_t *value);
/* The detail at path (borrowed), NULL when none. */
const json_t *kvio_result_detail(const kvio_result_t *result, const char *path);
/* The detail object at path, made empty when there is none (borrowed, to
 * be filled by its writer). A figure declared inside it renders over it. */
json_t *kvio_result_detail_object(kvio_result_t *result, const char *path);

/* ---- the verdict ---------------------------------------------------- */

/* A condition that makes the run's figures mislead: its kind (a word),
 * the value measured and the threshold it crossed, and a message saying
 * what it means. A result with none is valid. */
void kvio_result_warn(kvio_result_t *result, const char *kind, double measured,
                      double threshold, const char *message);
size_t kvio_result_num_warnings(const kvio_result_t *result);
/* Warning index's kind and message (borrowed); NULL out of range. */
const char *kvio_result_warning_kind(const kvio_result_t *result, size_t index);
const char *kvio_result_warning_message(const kvio_result_t *result, size_t index);
double kvio_result_warning_measured(const kvio_result_t *result, size_t index);
double kvio_result_warning_threshold(const kvio_result_t *result, size_t index);
bool kvio_result_has_warning(const kvio_result_t *result, const char *kind);
bool kvio_result_valid(const kvio_result_t *result);

/* ---- rendering and reading ------------------------------------------ */

/* summary.json's metrics object: every figure set, at its path, then the
 * children's lists and the detail. The caller owns it. */
json_t *kvio_result_metrics_json(const kvio_result_t *result);

/* One entry of list (its figures named without "LIST."), as
 * kvio_result_metrics_json renders it inside the list. */
json_t *kvio_result_entry_json(const kvio_result_t *entry, const char *list);

/* The one loader's part for a list's entry: an object written by
 * kvio_result_entry_json (or sent between ranks) into entry. */
void kvio_result_load_entry(const json_t *object, const char *list, kvio_result_t *entry);

/* summary.json's warnings array ({kind, measured, threshold, message}). */
json_t *kvio_result_warnings_json(const kvio_result_t *result);

/* The one loader: a summary.json of any schema version (its metrics,
 * warnings and valid) into a new result; older versions' names are
 * mapped here and nowhere else. KVIO_ERR_PARSE naming what is wrong. */
kvio_status_t kvio_result_load(const json_t *summary, kvio_result_t **result_p, char *error_p,
                               size_t error_len);

/* A figure's value as the run table shows it (its cell's format), into
 * text_p; false when it has no value (or is 0 with KVIO_FIGURE_NONZERO). */
bool kvio_result_cell(const kvio_result_t *result, kvio_figure_t figure, char *text_p,
                      size_t text_len);

/* The run table's figure rows from the declaration: the latency grid, then
 * each row with a value, label then its cells. */
typedef struct kvio_table kvio_table_t;
void kvio_result_table_rows(const kvio_result_t *result, kvio_table_t *grid,
                            kvio_table_t *rows);

/* docs/results.md's reference table: one Markdown row per declared
 * figure (name, unit, source, meaning, where it shows). */
void kvio_figures_markdown(FILE *out);

#endif
