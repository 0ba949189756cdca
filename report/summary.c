/* A results directory's summary.json as the report reads it: through the
 * one loader (kvio_result_load), so every figure is taken by its
 * declaration (KVIO_FIG_*), never by its key; what is not a figure (the
 * provenance, the config echo, the detail an update model or a tier's
 * bandwidth each second leaves) is read from the JSON. Every value is
 * checked; an error names the file and the key. */
#include "report/report_int.h"

#include "kvio/config.h"
#include "kvio/format.h"
#include "kvio/results.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* metrics.pd.mean_ttft_parts_ms, in TTFT's order (the chart's stack). */
static const kvio_figure_t pd_parts[5] = {
    KVIO_FIG_PD_TTFT_PREFILL_QUEUE_MS, KVIO_FIG_PD_TTFT_PREFILL_MS,
    KVIO_FIG_PD_TTFT_DECODE_QUEUE_MS,  KVIO_FIG_PD_TTFT_KV_TRANSFER_MS,
    KVIO_FIG_PD_TTFT_FIRST_STEP_MS,
};

kvio_status_t report_summary_load(const char *dir, json_t **summary_p, kvio_result_t **result_p,
                                  char *error_p, size_t error_len)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    json_t *summary = NULL;
    kvio_status_t status = report_json_load(path, &summary, error_p, error_len);
    if (status == KVIO_ERR_NOT_FOUND)
        snprintf(error_p, error_len, "%s: no summary.json (is it a kvio results directory?)",
                 dir);
    if (status != KVIO_OK)
        return status;
    /* A schema newer than this kvio's, or a run that failed, says so (not
     * a missing figure). */
    const json_t *schema = json_object_get(summary, "schema_version");
    const json_t *metrics = json_object_get(summary, "metrics");
    const char *failed = json_string_value(json_object_get(summary, "error"));
    char why[512] = "";
    if (json_is_integer(schema) && json_integer_value(schema) > KVIO_SCHEMA_VERSION)
        snprintf(why, sizeof(why), "schema_version %lld is newer than this kvio reads (%d): use "
                 "the kvio that wrote it", (long long)json_integer_value(schema),
                 KVIO_SCHEMA_VERSION);
    else if ((!json_is_object(metrics) || json_object_size(metrics) == 0) && failed != NULL)
        snprintf(why, sizeof(why), "the run failed and measured nothing: %.300s", failed);
    else if (!json_is_object(metrics) || json_object_size(metrics) == 0)
        snprintf(why, sizeof(why), "no metrics object");
    kvio_result_t *result = NULL;
    if (why[0] == '\0' && kvio_result_load(summary, &result, why, sizeof(why)) != KVIO_OK &&
        why[0] == '\0')
        snprintf(why, sizeof(why), "out of memory");
    if (why[0] != '\0') {
        snprintf(error_p, error_len, "%s: %s", path, why);
        json_decref(summary);
        return KVIO_ERR_PARSE;
    }
    *summary_p = summary;
    *result_p = result;
    return KVIO_OK;
}

kvio_status_t report_figure(const kvio_result_t *result, kvio_figure_t figure, const char *where,
                            const char *path, bool required, double absent, double *value_p,
                            char *error_p, size_t error_len)
{
    const kvio_figure_decl_t *decl = kvio_figure_decl(figure);
    /* A list entry's figure is named in the entry ("tiers[0].bytes_read"). */
    const char *name = decl->name;
    if (decl->scope != NULL && strncmp(name, decl->scope, strlen(decl->scope)) == 0)
        name += strlen(decl->scope) + 1;
    if (!kvio_result_has(result, figure)) {
        if (required) {
            snprintf(error_p, error_len, "%s: %s%s is missing", path, where, name);
            return KVIO_ERR_PARSE;
        }
        *value_p = absent;
        return KVIO_OK;
    }
    double value = kvio_result_get(result, figure);
    if (!isfinite(value) || fabs(value) > REPORT_VALUE_LIMIT) {
        snprintf(error_p, error_len, "%s: %s%s is out of range", path, where, name);
        return KVIO_ERR_PARSE;
    }
    *value_p = value;
    return KVIO_OK;
}

/* Where and how the run ran (host, commit: its provenance), whether its
 * update times are modelled and from what, and its warnings' kinds (its
 * verdict). */
static void about_run(const json_t *summary, const kvio_result_t *result, report_run_t *run)
{
    report_label_copy(run->host, sizeof(run->host),
                      json_string_value(json_object_get(json_object_get(summary, "host"),
                                                        "hostname")));
    report_label_copy(run->commit, sizeof(run->commit),
                      json_string_value(json_object_get(json_object_get(summary, "build"),
                                                        "commit")));
    /* The transport model's parameters and where each came from: detail,
     * not figures (simulate runs). */
    const json_t *model = kvio_result_detail(result, "model_updates.model");
    run->modelled_updates = model != NULL;
    if (model != NULL) {
        const json_t *source = json_object_get(model, "source");
        const char *bandwidth = json_string_value(json_object_get(source, "bandwidth"));
        const char *latency = json_string_value(json_object_get(source, "latency"));
        char text[REPORT_LABEL_MAX];
        snprintf(text, sizeof(text), "%.4g GB/s (%s), %.4g us (%s)",
                 json_number_value(json_object_get(model, "bandwidth_gbps")),
                 bandwidth != NULL ? bandwidth : "?",
                 json_number_value(json_object_get(model, "latency_s")) * 1e6,
                 latency != NULL ? latency : "?");
        report_label_copy(run->update_model, sizeof(run->update_model), text);
    }
    report_verdict(result, run->verdict, sizeof(run->verdict));
}

void report_verdict(const kvio_result_t *result, char *verdict_p, size_t verdict_len)
{
    size_t at = 0;
    verdict_p[0] = '\0';
    for (size_t i = 0; i < kvio_result_num_warnings(result) && at < verdict_len; i++) {
        const char *kind = kvio_result_warning_kind(result, i);
        if (strstr(verdict_p, kind) == NULL)
            at += (size_t)snprintf(verdict_p + at, verdict_len - at, "%s%s", at > 0 ? ", " : "",
                                   kind);
    }
}

/* What the runs of one rate sweep share: the config without the rate, the
 * seed, the name and the scheduler (a line each), as a hash of its sorted
 * JSON. */
static void sweep_of(const json_t *config, report_run_t *run)
{
    json_t *copy = json_deep_copy(config);
    json_t *stream = json_object_get(copy, "stream");
    json_object_del(json_object_get(stream, "arrival"), "rate");
    json_object_del(copy, "seed");
    json_object_del(copy, "name");
    json_object_del(json_object_get(copy, "serve"), "scheduler");
    char *text = copy != NULL ? json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    uint64_t hash = 14695981039346656037ull; /* FNV-1a */
    for (const char *c = text != NULL ? text : ""; *c != '\0'; c++)
        hash = (hash ^ (unsigned char)*c) * 1099511628211ull;
    snprintf(run->sweep, sizeof(run->sweep), "%016llx", (unsigned long long)hash);
    free(text);
    json_decref(copy);
}

/* From the run's config echo and result: the rate it was offered (as
 * measured; the configured one for summaries without it) and how it admits
 * requests (the policy; for sjf and pkas the predictor too, noisy with its
 * sigma, constant with its value), for the charts against rate. */
static void admission_of(const json_t *config, const kvio_result_t *result, report_run_t *run)
{
    const json_t *scheduler = json_object_get(json_object_get(config, "serve"), "scheduler");
    const char *policy = json_string_value(json_object_get(scheduler, "policy"));
    const char *predictor = json_string_value(json_object_get(scheduler, "predictor"));
    double measured = kvio_result_get(result, KVIO_FIG_OFFERED_RATE);
    run->offered_rate =
        measured > 0
            ? measured
            : json_number_value(json_object_get(
                  json_object_get(json_object_get(config, "stream"), "arrival"), "rate"));
    sweep_of(config, run);
    if (policy == NULL) {
        run->admission[0] = '\0';
        return;
    }
    char text[REPORT_LABEL_MAX];
    bool predicts = strcmp(policy, "pkas") == 0 || strcmp(policy, "sjf") == 0;
    if (!predicts || predictor == NULL)
        snprintf(text, sizeof(text), "%s", policy);
    else if (strcmp(predictor, "noisy") == 0)
        snprintf(text, sizeof(text), "%s, noisy %.2g", policy,
                 json_number_value(json_object_get(json_object_get(scheduler, "noisy"),
                                                   "sigma")));
    else if (strcmp(predictor, "constant") == 0)
        snprintf(text, sizeof(text), "%s, constant %lld", policy,
                 (long long)json_integer_value(
                     json_object_get(json_object_get(scheduler, "constant"), "value")));
    else
        snprintf(text, sizeof(text), "%s, %s", policy, predictor);
    report_label_copy(run->admission, sizeof(run->admission), text);
}

/* weight_sync into metrics_p: its figures (the update's time, the wire's
 * bytes) and its detail (the stages' sums, the weights' bytes); for the
 * first seed, whether the run has it and measured it into run. */
static kvio_status_t load_sync(const kvio_result_t *result, const char *path,
                               run_metrics_t *metrics_p, report_run_t *run, char *error_p,
                               size_t error_len)
{
    const char *where = "metrics.model_updates.weight_sync.";
    const json_t *sync = kvio_result_detail(result, "model_updates.weight_sync");
    if (sync == NULL && !kvio_result_has(result, KVIO_FIG_SYNC_UPDATE_MS))
        return KVIO_OK;
    if (!json_is_object(sync)) {
        snprintf(error_p, error_len, "%s: metrics.model_updates.weight_sync is not an object",
                 path);
        return KVIO_ERR_PARSE;
    }
    bool measured = json_is_true(json_object_get(sync, "measured"));
    double bytes = 0, wire = 0;
    kvio_status_t status = report_figure(result, KVIO_FIG_SYNC_UPDATE_MS, "metrics.", path,
                                         true, 0, &metrics_p->sync_update_ms, error_p,
                                         error_len);
    if (status == KVIO_OK)
        status = report_figure(result, KVIO_FIG_SYNC_WIRE_BYTES, "metrics.", path, true, 0,
                               &wire, error_p, error_len);
    /* Not figures: the stages' sums (simulate has the staging only). */
    struct {
        const char *key;
        double *value;
        bool required;
    } fields[] = {
        {"staged_ms", &metrics_p->sync_staged_ms, true},
        {"stage_ms", &metrics_p->sync_stage_ms, measured},
        {"transfer_ms", &metrics_p->sync_transfer_ms, measured},
        {"reload_ms", &metrics_p->sync_reload_ms, measured},
        {"bytes", &bytes, true},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]) && status == KVIO_OK; i++)
        status = report_json_number(sync, fields[i].key, where, path, fields[i].required,
                                    fields[i].value, error_p, error_len);
    metrics_p->sync_wire_share = bytes > 0 ? wire / bytes : 0;
    if (status == KVIO_OK && run != NULL) {
        run->has_sync = true;
        run->sync_measured = measured;
    }
    return status;
}

void report_tier_traffic_free(tier_traffic_t *traffic)
{
    for (int d = 0; d < 2; d++) {
        free(traffic->per_second[d]);
        traffic->per_second[d] = NULL;
    }
    traffic->seconds = 0;
}

/* A tier's per_second {"read_gbps": [...], "write_gbps": [...]} (emulate
 * runs; detail, not figures), kept when both lists are numbers of one
 * length. */
static kvio_status_t load_per_second(const kvio_result_t *tier, tier_traffic_t *traffic,
                                     const char *path, char *error_p, size_t error_len)
{
    const json_t *per_second = kvio_result_detail(tier, "per_second");
    if (per_second == NULL)
        return KVIO_OK;
    static const char *const keys[2] = {"read_gbps", "write_gbps"};
    const json_t *lists[2];
    for (int d = 0; d < 2; d++) {
        lists[d] = json_object_get(per_second, keys[d]);
        if (!json_is_array(lists[d]) ||
            json_array_size(lists[d]) != json_array_size(json_object_get(per_second, keys[0]))) {
            snprintf(error_p, error_len, "%s: metrics.tiers.%s.per_second.%s is not a list as "
                     "long as read_gbps", path, traffic->name, keys[d]);
            return KVIO_ERR_PARSE;
        }
    }
    size_t seconds = json_array_size(lists[0]);
    for (int d = 0; d < 2 && seconds > 0; d++) {
        traffic->per_second[d] = malloc(seconds * sizeof(double));
        if (traffic->per_second[d] == NULL)
            return KVIO_ERR_NOMEM;
        for (size_t i = 0; i < seconds; i++) {
            const json_t *value = json_array_get(lists[d], i);
            if (!json_is_number(value)) {
                snprintf(error_p, error_len, "%s: metrics.tiers.%s.per_second.%s[%zu] is not a "
                         "number", path, traffic->name, keys[d], i);
                return KVIO_ERR_PARSE;
            }
            traffic->per_second[d][i] = json_number_value(value);
        }
    }
    traffic->seconds = seconds;
    return KVIO_OK;
}

/* A tier's traffic: the figures of its entries that count measured bytes
 * (bytes_written, bytes_read: traffic, not the tier's configured
 * size_bytes or block_bytes), its latency percentiles and its bandwidth
 * each second. */
static kvio_status_t load_tier(const kvio_result_t *tier, size_t index, const char *path,
                               tier_traffic_t *traffic, char *error_p, size_t error_len)
{
    memset(traffic, 0, sizeof(*traffic));
    const char *kind = kvio_result_text(tier, KVIO_FIG_TIER_KIND);
    char name[REPORT_LABEL_MAX];
    if (kind == NULL)
        snprintf(name, sizeof(name), "tier %zu", index);
    else if (kvio_result_has(tier, KVIO_FIG_TIER_RANK))
        snprintf(name, sizeof(name), "%.60s (rank %.0f)", kind,
                 kvio_result_get(tier, KVIO_FIG_TIER_RANK));
    else
        snprintf(name, sizeof(name), "%s", kind);
    report_label_copy(traffic->name, sizeof(traffic->name), name);
    char where[64];
    snprintf(where, sizeof(where), "metrics.tiers[%zu].", index);
    kvio_status_t status = KVIO_OK;
    for (int f = 0; f < kvio_num_figures() && status == KVIO_OK; f++) {
        const kvio_figure_decl_t *decl = kvio_figure_decl((kvio_figure_t)f);
        if (decl->scope == NULL || strcmp(decl->scope, "tiers") != 0 ||
            decl->kind != KVIO_KIND_COUNT || strcmp(decl->unit, "bytes") != 0 ||
            decl->source != KVIO_SOURCE_MEASURED || !kvio_result_has(tier, (kvio_figure_t)f) ||
            traffic->num_fields == REPORT_MAX_TIER_FIELDS)
            continue;
        double number;
        status = report_figure(tier, (kvio_figure_t)f, where, path, true, 0, &number, error_p,
                               error_len);
        report_label_copy(traffic->field[traffic->num_fields], REPORT_LABEL_MAX,
                          decl->name + strlen(decl->scope) + 1);
        traffic->value[traffic->num_fields++] = number;
    }
    static const kvio_figure_t latencies[2][1 + TIER_QUANTILES] = {
        {KVIO_FIG_TIER_READ_LATENCY_COUNT, KVIO_FIG_TIER_READ_LATENCY_P50,
         KVIO_FIG_TIER_READ_LATENCY_P95, KVIO_FIG_TIER_READ_LATENCY_P99,
         KVIO_FIG_TIER_READ_LATENCY_P999},
        {KVIO_FIG_TIER_WRITE_LATENCY_COUNT, KVIO_FIG_TIER_WRITE_LATENCY_P50,
         KVIO_FIG_TIER_WRITE_LATENCY_P95, KVIO_FIG_TIER_WRITE_LATENCY_P99,
         KVIO_FIG_TIER_WRITE_LATENCY_P999},
    };
    for (size_t l = 0; l < 2 && status == KVIO_OK; l++) {
        traffic->has_latency[l] = kvio_result_get(tier, latencies[l][0]) > 0;
        for (size_t q = 0; traffic->has_latency[l] && q < TIER_QUANTILES && status == KVIO_OK;
             q++)
            status = report_figure(tier, latencies[l][q + 1], where, path, false, 0,
                                   &traffic->latency_ms[l][q], error_p, error_len);
    }
    if (status == KVIO_OK)
        status = load_per_second(tier, traffic, path, error_p, error_len);
    return status;
}

/* Every tier of metrics.tiers with traffic into run. */
static kvio_status_t load_tiers(const kvio_result_t *result, const char *path, report_run_t *run,
                                char *error_p, size_t error_len)
{
    size_t count = kvio_result_num_children(result, "tiers");
    for (size_t index = 0; index < count && run->num_tiers < REPORT_MAX_TIERS; index++) {
        tier_traffic_t *traffic = &run->tiers[run->num_tiers];
        kvio_status_t status = load_tier(kvio_result_child_at(result, "tiers", index), index,
                                         path, traffic, error_p, error_len);
        if (status == KVIO_OK && traffic->num_fields > 0) {
            run->num_tiers++;
            continue;
        }
        report_tier_traffic_free(traffic); /* not kept: run_free does not see it */
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* A figure of run_metrics_t: where it goes, whether a serving run must have
 * it, and its value when absent (NAN: no bar). */
typedef struct metric_field {
    kvio_figure_t figure;
    size_t offset;
    bool serving, nonnegative;
    double absent;
} metric_field_t;

#define FIELD(figure, member, serving, nonnegative, absent)                                    \
    {KVIO_FIG_##figure, offsetof(run_metrics_t, member), serving, nonnegative, absent}

static const metric_field_t metric_fields[] = {
    /* Rates, rates of hits and counts are never below 0. */
    FIELD(REQUEST_THROUGHPUT, request_throughput, true, true, 0),
    FIELD(OUTPUT_THROUGHPUT, output_throughput, true, true, 0),
    FIELD(INPUT_THROUGHPUT, input_throughput, false, true, 0),
    FIELD(GOODPUT, goodput, false, true, NAN), /* only against an SLO: "-", not 0 */
    FIELD(HIT_RATE, hit_rate, true, true, 0),
    FIELD(HIT_RATE_WITH_TIERS, hit_rate_with_tiers, false, true, 0),
    FIELD(PREEMPTIONS, preemptions, false, true, 0),
    FIELD(COMPLETED, completed, false, true, 0),
    FIELD(TTFT_MS_P50, ttft_p50, false, false, 0),
    FIELD(TTFT_MS_P99, ttft_p99, false, false, 0),
    FIELD(TPOT_MS_P50, tpot_p50, false, false, 0),
    FIELD(E2EL_MS_P99, e2el_p99, false, false, 0),
    /* Present in some runs only: */
    FIELD(ACCELERATOR_UTILIZATION, accelerator_utilization, false, false, NAN),
    FIELD(CUMULATIVE_INFERENCE_LOSS, cumulative_inference_loss, false, false, NAN),
    FIELD(UPDATE_LATENCY_MS_P50, update_p50_ms, false, false, NAN),
    FIELD(UPDATE_LATENCY_MS_P99, update_p99_ms, false, false, NAN),
    FIELD(UPDATE_BANDWIDTH_GBPS_MEAN, update_gbps, false, false, NAN),
};

/* The run's figures into metrics_p; serving: whether it must have the
 * serving ones. */
static kvio_status_t load_metrics(const kvio_result_t *result, const char *path, bool serving,
                                  run_metrics_t *metrics_p, char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < sizeof(metric_fields) / sizeof(metric_fields[0]) && status == KVIO_OK;
         i++) {
        const metric_field_t *field = &metric_fields[i];
        double *value = (double *)((char *)metrics_p + field->offset);
        status = report_figure(result, field->figure, "metrics.", path,
                               field->serving && serving, field->absent, value, error_p,
                               error_len);
        if (status == KVIO_OK && field->nonnegative && *value < 0) {
            snprintf(error_p, error_len, "%s: metrics.%s is negative (%g)", path,
                     kvio_figure_decl(field->figure)->name, *value);
            status = KVIO_ERR_PARSE;
        }
    }
    /* P/D's TTFT parts: all NAN (no stack) for a run without them. */
    bool parts = false;
    for (size_t k = 0; k < 5; k++)
        parts = parts || kvio_result_has(result, pd_parts[k]);
    for (size_t k = 0; k < 5 && status == KVIO_OK; k++)
        status = report_figure(result, pd_parts[k], "metrics.", path, false, parts ? 0 : NAN,
                               &metrics_p->pd_parts_ms[k], error_p, error_len);
    if (kvio_result_has(result, KVIO_FIG_UPDATES_ACTIVATED) &&
        kvio_result_get(result, KVIO_FIG_UPDATES_ACTIVATED) == 0)
        metrics_p->update_p50_ms = metrics_p->update_p99_ms = metrics_p->update_gbps = NAN;
    return status;
}

/* The config's SLO bounds (the TTFT and TPOT lines of the charts). */
static void slo_of(const json_t *config, report_run_t *run)
{
    const json_t *slo = json_object_get(config, "slo");
    const char *bounds[] = {json_string_value(json_object_get(slo, "ttft")),
                            json_string_value(json_object_get(slo, "tpot"))};
    run->has_slo = false;
    for (int b = 0; b < 2; b++) {
        int64_t bound_ns = 0;
        char ignored[128];
        bool set = bounds[b] != NULL &&
                   kvio_parse_duration(bounds[b], &bound_ns, ignored, sizeof(ignored)) ==
                       KVIO_OK &&
                   bound_ns > 0;
        run->has_slo = run->has_slo || set;
        *(b == 0 ? &run->slo_ttft_ms : &run->slo_tpot_ms) = set ? (double)bound_ns / 1e6 : 0;
    }
}

kvio_status_t report_summary_metrics(const char *dir, run_metrics_t *metrics_p,
                                     report_run_t *run, bool first, char *error_p,
                                     size_t error_len)
{
    json_t *summary = NULL;
    kvio_result_t *result = NULL;
    kvio_status_t status = report_summary_load(dir, &summary, &result, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    /* A run without serving (model updates only) has no serving figures;
     * one with serving must have them. */
    bool updates = kvio_result_has(result, KVIO_FIG_VERSIONS_PUBLISHED) ||
                   kvio_result_has(result, KVIO_FIG_UPDATES_ACTIVATED) ||
                   kvio_result_has(result, KVIO_FIG_SYNC_UPDATE_MS);
    bool serving = !updates || kvio_result_has(result, KVIO_FIG_REQUEST_THROUGHPUT);
    status = load_metrics(result, path, serving, metrics_p, error_p, error_len);
    if (status == KVIO_OK)
        status = load_sync(result, path, metrics_p, first ? run : NULL, error_p, error_len);
    if (status != KVIO_OK)
        goto out;
    if (!json_is_true(json_object_get(summary, "complete")))
        run->complete = false;
    if (!first)
        goto out;
    report_label_copy(run->name, sizeof(run->name),
                      json_string_value(json_object_get(summary, "name")));
    report_label_copy(run->scheduler, sizeof(run->scheduler),
                      kvio_result_text(result, KVIO_FIG_SCHEDULER));
    const json_t *config = json_object_get(summary, "config");
    admission_of(config, result, run);
    about_run(summary, result, run);
    slo_of(config, run);
    run->serving = serving;
    status = load_tiers(result, path, run, error_p, error_len);
out:
    kvio_result_destroy(result);
    json_decref(summary);
    return status;
}
