/* On rank 0, a run's model updates as numbers: latency, bandwidth,
 * training and inference stall, staleness, updates.csv and the update
 * events, with the interference of each update with serving. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/log.h"
#include "kvio/results.h"
#include "kvio/stats.h"

/* ---- metrics on rank 0 ---- */

const kvio_train_record_t *run_find_train(const collected_t *all, uint64_t version)
{
    for (size_t i = 0; i < all->num_train; i++)
        if (all->train[i].version == version)
            return &all->train[i];
    return NULL;
}

/* Time-weighted versions-behind of one serve rank over [start, end]: the
 * newest version ready at the trainer minus the version active there. */
static void staleness(const collected_t *all, int rank, int64_t start, int64_t end,
                      double *mean_p, uint64_t *max_p)
{
    double area = 0;
    uint64_t worst = 0;
    int64_t t = start;
    while (t < end) {
        uint64_t ready = 0, active = 0;
        int64_t next = end;
        for (size_t i = 0; i < all->num_train; i++) {
            if (all->train[i].t_ready_ns <= t && all->train[i].version > ready)
                ready = all->train[i].version;
            if (all->train[i].t_ready_ns > t && all->train[i].t_ready_ns < next)
                next = all->train[i].t_ready_ns;
        }
        for (size_t i = 0; i < all->num_updates; i++) {
            const kvio_update_record_t *record = &all->updates[i];
            if (record->rank != rank || record->t_activated_ns == 0)
                continue;
            if (record->t_activated_ns <= t && record->version > active)
                active = record->version;
            if (record->t_activated_ns > t && record->t_activated_ns < next)
                next = record->t_activated_ns;
        }
        uint64_t behind = ready > active ? ready - active : 0;
        area += (double)behind * (double)(next - t);
        if (behind > worst)
            worst = behind;
        t = next;
    }
    *mean_p = end > start ? area / (double)(end - start) : 0;
    *max_p = worst;
}

/* What rank 0 reports of the model updates, computed from the collected
 * records before anything is rendered (figures, updates.csv, the trace). */
typedef struct update_metrics {
    double *latency_ms, *bandwidth_gbps, *train_stall_ms; /* one per update or version */
    size_t num_latency, num_bandwidth, num_train_stall;
    uint64_t activated, mismatches, skipped, polls, iterations;
    double stage_mean_ms[5]; /* after t_ready: xfer start/end, notified, verified, activated */
    double stall_total_ms;
    double update_stall_ms[KVIO_STALL_CAUSES]; /* serving time the updates cost, by cause */
    double update_stall_max_rank_ms;           /* the most one serve rank lost to them */
    double reported_stall_ms; /* the serve ranks' own count (emulate: overruns too) */
    double staleness_mean;
    uint64_t staleness_max;
    int64_t clock_uncertainty_ns;
    int num_serve;
} update_metrics_t;

static void update_metrics_fini(update_metrics_t *metrics)
{
    free(metrics->latency_ms);
    free(metrics->bandwidth_gbps);
    free(metrics->train_stall_ms);
}

/* Transfer bandwidth of one update in GB/s (0 when it took no time). */
static double update_gbps(const kvio_update_record_t *record)
{
    double xfer_s = (double)(record->t_xfer_end_ns - record->t_xfer_start_ns) / 1e9;
    return xfer_s > 0 ? (double)record->bytes / xfer_s / 1e9 : 0;
}

/* The serving time each update cost, summed by cause, and the most one
 * serve rank lost to them. */
static kvio_status_t update_stalls(const collected_t *all, update_metrics_t *metrics)
{
    int top = 0;
    for (size_t i = 0; i < all->num_updates; i++)
        top = all->updates[i].rank > top ? all->updates[i].rank : top;
    double *by_rank = calloc((size_t)top + 1, sizeof(double));
    if (by_rank == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        for (int c = 0; c < KVIO_STALL_CAUSES; c++) {
            metrics->update_stall_ms[c] += (double)record->stall_ns[c] / 1e6;
            if (record->rank >= 0)
                by_rank[record->rank] += (double)record->stall_ns[c] / 1e6;
        }
    }
    for (int r = 0; r <= top; r++)
        if (by_rank[r] > metrics->update_stall_max_rank_ms)
            metrics->update_stall_max_rank_ms = by_rank[r];
    free(by_rank);
    return KVIO_OK;
}

static kvio_status_t compute_update_metrics(const collected_t *all, int num_serve_configured,
                                            update_metrics_t *metrics)
{
    memset(metrics, 0, sizeof(*metrics));
    size_t n = all->num_updates, t = all->num_train;
    metrics->latency_ms = malloc((n + 1) * sizeof(double));
    metrics->bandwidth_gbps = malloc((n + 1) * sizeof(double));
    metrics->train_stall_ms = malloc((t + 1) * sizeof(double));
    if (metrics->latency_ms == NULL || metrics->bandwidth_gbps == NULL ||
        metrics->train_stall_ms == NULL) {
        update_metrics_fini(metrics);
        return KVIO_ERR_NOMEM;
    }
    double stage_sum[5] = {0};
    for (size_t i = 0; i < n; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        if (record->t_activated_ns) {
            metrics->activated++;
            metrics->latency_ms[metrics->num_latency++] =
                (double)(record->t_activated_ns - record->t_ready_ns) / 1e6;
            int64_t stages[5] = {record->t_xfer_start_ns, record->t_xfer_end_ns,
                                 record->t_notified_ns, record->t_verified_ns,
                                 record->t_activated_ns};
            for (int s = 0; s < 5; s++)
                stage_sum[s] += (double)(stages[s] - record->t_ready_ns) / 1e6;
        }
        double gbps = update_gbps(record);
        if (gbps > 0)
            metrics->bandwidth_gbps[metrics->num_bandwidth++] = gbps;
        metrics->mismatches += record->checksum_ok ? 0 : 1;
        metrics->skipped += (uint64_t)(record->skipped_before > 0 ? record->skipped_before : 0);
    }
    for (int s = 0; s < 5; s++)
        metrics->stage_mean_ms[s] = metrics->activated ? stage_sum[s] / (double)metrics->activated
                                                       : 0;
    for (size_t i = 0; i < t; i++) {
        metrics->train_stall_ms[metrics->num_train_stall++] = (double)all->train[i].stall_ns / 1e6;
        metrics->stall_total_ms += (double)all->train[i].stall_ns / 1e6;
    }
    if (update_stalls(all, metrics) != KVIO_OK) {
        update_metrics_fini(metrics);
        return KVIO_ERR_NOMEM;
    }
    double staleness_sum = 0;
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        if (report->clock_uncertainty_ns > metrics->clock_uncertainty_ns)
            metrics->clock_uncertainty_ns = report->clock_uncertainty_ns;
        if (!is_serve_report(report, num_serve_configured))
            continue;
        metrics->num_serve++;
        metrics->reported_stall_ms += (double)report->inference_stall_ns / 1e6;
        metrics->polls += report->polls;
        metrics->iterations += report->iterations;
        double mean;
        uint64_t worst;
        staleness(all, report->rank, report->t_start_ns, report->t_end_ns, &mean, &worst);
        staleness_sum += mean;
        if (worst > metrics->staleness_max)
            metrics->staleness_max = worst;
    }
    metrics->staleness_mean = metrics->num_serve ? staleness_sum / metrics->num_serve : 0;
    return KVIO_OK;
}

/* The rank a serve rank's update came from: the trainer, or with a chain
 * fan-out the serve rank before it (serve ranks follow the trainer); -1
 * with weight_sync, whose buckets each name theirs (sync.csv). */
static int update_source(const kvio_workload_t *workload, const kvio_update_record_t *record)
{
    if (workload->weight_sync.granularity != KVIO_SYNC_OFF)
        return -1;
    bool chain = workload->train.transport.fanout == KVIO_XFER_FANOUT_CHAIN;
    return chain && record->rank > TRAIN_RANK + 1 ? record->rank - 1 : TRAIN_RANK;
}

/* The serving time the updates cost, by cause; in emulate, what the serve
 * ranks' iterations lost beyond it (their executor's overruns). */
static void set_stalls(kvio_result_t *result, const update_metrics_t *metrics, bool emulate)
{
    static const kvio_figure_t causes[KVIO_STALL_CAUSES] = {
        [KVIO_STALL_APPLY] = KVIO_FIG_INFERENCE_STALL_APPLY_MS,
        [KVIO_STALL_DRAIN] = KVIO_FIG_INFERENCE_STALL_DRAIN_MS,
        [KVIO_STALL_LEND] = KVIO_FIG_INFERENCE_STALL_LEND_MS,
        [KVIO_STALL_RELEASE] = KVIO_FIG_INFERENCE_STALL_RELEASE_MS};
    double update_ms = 0;
    for (int c = 0; c < KVIO_STALL_CAUSES; c++) {
        kvio_result_set(result, causes[c], metrics->update_stall_ms[c]);
        update_ms += metrics->update_stall_ms[c];
    }
    kvio_result_set(result, KVIO_FIG_INFERENCE_STALL_UPDATE_MS, update_ms);
    kvio_result_set(result, KVIO_FIG_INFERENCE_STALL_MAX_MS, metrics->update_stall_max_rank_ms);
    if (emulate) {
        double overrun_ms = metrics->reported_stall_ms - update_ms;
        kvio_result_set(result, KVIO_FIG_INFERENCE_STALL_OVERRUN_MS,
                        overrun_ms > 0 ? overrun_ms : 0);
    }
}

static void update_metrics_fill(kvio_result_t *result, update_metrics_t *metrics,
                                const kvio_workload_t *workload, const collected_t *all)
{
    kvio_result_set_text(result, KVIO_FIG_UPDATE_TRANSPORT,
                         kvio_choice_name(&workload->train.transport.kind));
    kvio_result_set_detail(result, "model_updates.transport_info", json_string(all->info));
    kvio_result_set(result, KVIO_FIG_UPDATE_BYTES,
                    (double)kvio_train_weights_bytes(&workload->train));
    kvio_result_set(result, KVIO_FIG_UPDATE_SERVE_RANKS, metrics->num_serve);
    kvio_result_set(result, KVIO_FIG_VERSIONS_PUBLISHED, (double)all->num_train);
    kvio_result_set(result, KVIO_FIG_UPDATES_RECEIVED, (double)all->num_updates);
    kvio_result_set(result, KVIO_FIG_UPDATES_ACTIVATED, (double)metrics->activated);
    kvio_result_set(result, KVIO_FIG_VERSIONS_SKIPPED, (double)metrics->skipped);
    kvio_result_set(result, KVIO_FIG_CHECKSUM_MISMATCHES, (double)metrics->mismatches);
    /* The bytes each hop carried: from the trainer, and forwarded by a serve
     * rank (a chain fan-out); weight_sync's are its own. */
    double from_trainer = 0, forwarded = 0;
    for (size_t i = 0; workload->weight_sync.granularity == KVIO_SYNC_OFF && i < all->num_updates;
         i++) {
        double bytes = (double)all->updates[i].bytes;
        if (update_source(workload, &all->updates[i]) == TRAIN_RANK)
            from_trainer += bytes;
        else
            forwarded += bytes;
    }
    kvio_result_set(result, KVIO_FIG_WIRE_BYTES_FROM_TRAINER, from_trainer);
    kvio_result_set(result, KVIO_FIG_WIRE_BYTES_FORWARDED, forwarded);
    kvio_result_set_stats(result, KVIO_FIG_UPDATE_LATENCY_MS_MEAN, metrics->latency_ms,
                          metrics->num_latency);
    kvio_result_set_stats(result, KVIO_FIG_UPDATE_BANDWIDTH_GBPS_MEAN, metrics->bandwidth_gbps,
                          metrics->num_bandwidth);
    kvio_result_set_stats(result, KVIO_FIG_TRAINING_STALL_MS_MEAN, metrics->train_stall_ms,
                          metrics->num_train_stall);
    kvio_result_set(result, KVIO_FIG_TRAINING_STALL_TOTAL_MS, metrics->stall_total_ms);
    set_stalls(result, metrics, workload->mode == KVIO_MODE_EMULATE);
    kvio_update_stall_fill(result, all->updates, all->num_updates);
    kvio_result_set(result, KVIO_FIG_STALENESS_MEAN_VERSIONS, metrics->staleness_mean);
    kvio_result_set(result, KVIO_FIG_STALENESS_MAX_VERSIONS, (double)metrics->staleness_max);
    kvio_result_set(result, KVIO_FIG_SERVE_ITERATIONS, (double)metrics->iterations);
    kvio_result_set(result, KVIO_FIG_UPDATE_POLLS, (double)metrics->polls);
    kvio_result_set(result, KVIO_FIG_CLOCK_UNCERTAINTY_US,
                    (double)metrics->clock_uncertainty_ns / 1e3);
    static const kvio_figure_t stages[5] = {KVIO_FIG_STAGE_XFER_START_MS,
                                            KVIO_FIG_STAGE_XFER_END_MS, KVIO_FIG_STAGE_NOTIFIED_MS,
                                            KVIO_FIG_STAGE_VERIFIED_MS,
                                            KVIO_FIG_STAGE_ACTIVATED_MS};
    for (int s = 0; s < 5; s++)
        kvio_result_set(result, stages[s], metrics->stage_mean_ms[s]);
}

/* updates.csv: one row per update a serve rank received, times since t0;
 * then the serving time it cost by cause, with serving the trend around
 * it, and with a control what it cost. */
static kvio_status_t write_updates_csv(kvio_results_t *results, const kvio_workload_t *workload,
                                       const collected_t *all, int64_t origin_ns,
                                       const kvio_interference_t *interference,
                                       const kvio_control_cost_t *cost, char *error_p,
                                       size_t error_len)
{
    char header[1024];
    snprintf(header, sizeof(header),
             "version,rank,source,bytes,checksum_ok,skipped_before,t_ready_ms,t_publish_start_ms,"
             "t_publish_end_ms,t_xfer_start_ms,t_xfer_end_ms,t_notified_ms,t_verified_ms,"
             "t_activated_ms,latency_ms,training_stall_ms,bandwidth_gbps,stall_apply_ms,"
             "stall_drain_ms,stall_lend_ms,stall_release_ms,serving_rate_rps,"
             "serving_rate_measured%s%s",
             interference != NULL ? ",ttft_p50_ratio,ttft_p99_ratio,tpot_p99_ratio,"
                                    "hit_rate_before,hit_rate_after"
                                  : "",
             cost != NULL ? ",affected_requests,added_e2el_ms,recomputed_tokens,hit_recovery_ms"
                          : "");
    kvio_csv_t *csv = NULL;
    kvio_status_t status = kvio_csv_open(results, "updates.csv", header, &csv);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s/updates.csv: cannot write", kvio_results_path(results));
        return status;
    }
    bool adaptive = workload->train.checkpoint.policy == KVIO_CHECKPOINT_ADAPTIVE;
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        const kvio_train_record_t *train = run_find_train(all, record->version);
        double latency_ms = record->t_activated_ns
                                ? (double)(record->t_activated_ns - record->t_ready_ns) / 1e6
                                : NAN;
#define REL(t) ((t) ? (double)((t) - origin_ns) / 1e6 : NAN)
        char ratios[160] = "", costs[160] = "";
        if (interference != NULL) {
            const double *v = &interference->values[i * KVIO_INTERFERENCE_VALUES];
            snprintf(ratios, sizeof(ratios), ",%.4f,%.4f,%.4f,%.4f,%.4f", v[0], v[1], v[2], v[3],
                     v[4]);
        }
        if (cost != NULL) {
            const kvio_control_update_t *update = &cost->per_update[i];
            snprintf(costs, sizeof(costs), ",%llu,%.6f,%lld,%.6f",
                     (unsigned long long)update->affected, update->added_e2el_ms,
                     (long long)update->recomputed_tokens, update->hit_recovery_ms);
        }
        kvio_csv_row(csv,
                     "%llu,%d,%d,%llu,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,"
                     "%.4f,%.6f,%.6f,%.6f,%.6f,%.4f,%d%s%s",
                     (unsigned long long)record->version, record->rank,
                     update_source(workload, record), (unsigned long long)record->bytes, record->checksum_ok,
                     record->skipped_before, REL(record->t_ready_ns),
                     train ? REL(train->t_publish_start_ns) : NAN,
                     train ? REL(train->t_publish_end_ns) : NAN, REL(record->t_xfer_start_ns),
                     REL(record->t_xfer_end_ns), REL(record->t_notified_ns),
                     REL(record->t_verified_ns), REL(record->t_activated_ns), latency_ms,
                     train ? (double)train->stall_ns / 1e6 : NAN, update_gbps(record),
                     (double)record->stall_ns[KVIO_STALL_APPLY] / 1e6,
                     (double)record->stall_ns[KVIO_STALL_DRAIN] / 1e6,
                     (double)record->stall_ns[KVIO_STALL_LEND] / 1e6,
                     (double)record->stall_ns[KVIO_STALL_RELEASE] / 1e6,
                     adaptive && train ? train->serving_rate : NAN,
                     adaptive && train ? train->serving_rate_measured : 0, ratios, costs);
#undef REL
    }
    return kvio_csv_finish(csv, "updates.csv", error_p, error_len);
}

/* The event trace: one event per stage of each update at each serve rank,
 * from the previous stage to this one (rank 0's clock, since t0). */
static void trace_updates(kvio_event_trace_t *events, const collected_t *all, int64_t origin_ns)
{
    static const char *const names[] = {"wait", "transfer", "notify", "verify", "activate"};
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        int64_t times[6] = {record->t_ready_ns, record->t_xfer_start_ns,
                            record->t_xfer_end_ns, record->t_notified_ns,
                            record->t_verified_ns, record->t_activated_ns};
        int64_t previous = times[0];
        for (int stage = 1; stage < 6; stage++) {
            if (times[stage] == 0)
                continue;
            int64_t start = previous < times[stage] ? previous : times[stage];
            int64_t end = previous < times[stage] ? times[stage] : previous;
            kvio_event_trace_update(events, (uint32_t)record->rank, record->version,
                                    names[stage - 1], start - origin_ns, end - start,
                                    stage == 2 ? (int64_t)record->bytes : -1);
            previous = end;
        }
    }
}

/* Activations after the last request finished served nothing: counted
 * apart (activated_after_serving), the rest as activated_while_serving;
 * updates_activated is their sum. */
static void count_after_serving(kvio_result_t *result, const collected_t *all, int64_t origin_ns,
                                const kvio_serve_output_t *serving)
{
    int64_t serving_end_ns = 0;
    for (size_t i = 0; i < serving->num_finished; i++)
        if (serving->finished[i].finish_ns > serving_end_ns)
            serving_end_ns = serving->finished[i].finish_ns;
    double after = 0, during = 0;
    for (size_t i = 0; i < all->num_updates; i++) {
        int64_t activated = all->updates[i].t_activated_ns;
        if (activated == 0)
            continue;
        if (activated - origin_ns > serving_end_ns)
            after++;
        else
            during++;
    }
    kvio_result_set(result, KVIO_FIG_ACTIVATED_WHILE_SERVING, during);
    kvio_result_set(result, KVIO_FIG_ACTIVATED_AFTER_SERVING, after);
}

/* The updates' metrics, updates.csv and their events; with serving, what
 * each update did to it (the interference windows) first, so that
 * updates.csv is written once, whole. */
kvio_status_t run_updates_metrics(const run_context_t *context, const collected_t *all,
                                   int64_t origin_ns, const kvio_serve_output_t *serving,
                                   char *error_p, size_t error_len)
{
    update_metrics_t metrics;
    kvio_status_t status = compute_update_metrics(all, (int)context->workload->ranks.serve,
                                                  &metrics);
    if (status != KVIO_OK)
        return status;
    kvio_interference_t interference = {0};
    if (serving != NULL &&
        (status = kvio_interference_measure(
             serving->finished, serving->num_finished, all->updates, all->num_updates,
             origin_ns, context->workload->update.interference_window_ns, &interference)) !=
            KVIO_OK) {
        snprintf(error_p, error_len, "update interference: out of memory (%zu requests)",
                 serving->num_finished);
        update_metrics_fini(&metrics);
        return status;
    }
    kvio_control_cost_t cost = {0};
    bool controlled = serving != NULL && serving->control != NULL;
    if (controlled && (status = kvio_control_measure(serving, serving->control, all->updates,
                                                     all->num_updates, origin_ns, &cost)) !=
                          KVIO_OK)
        snprintf(error_p, error_len, "update cost: out of memory (%zu requests)",
                 serving->num_finished);
    if (status == KVIO_OK && context->events != NULL)
        trace_updates(context->events, all, origin_ns);
    if (status == KVIO_OK && context->results != NULL)
        status = write_updates_csv(context->results, context->workload, all, origin_ns,
                                   serving != NULL ? &interference : NULL,
                                   controlled ? &cost : NULL, error_p, error_len);
    if (status == KVIO_OK && metrics.mismatches > 0)
        kvio_warn("model updates: %llu checksum mismatch%s (see updates.csv)",
                  (unsigned long long)metrics.mismatches, metrics.mismatches == 1 ? "" : "es");
    kvio_result_t *result = context->result;
    if (status == KVIO_OK && result != NULL) {
        update_metrics_fill(result, &metrics, context->workload, all);
        if (serving != NULL) {
            count_after_serving(result, all, origin_ns, serving);
            /* The trend around updates has no control: kept as detail,
             * never printed as a cost. */
            json_t *trend = kvio_interference_json(&interference,
                                                   serving->update_recomputed_tokens,
                                                   serving->update_aborted_requests);
            kvio_result_set_detail(result, "update_interference", trend);
            status = kvio_interference_during_fill(result, serving, all->updates,
                                                   all->num_updates, origin_ns);
        }
        if (controlled)
            kvio_result_merge(result, cost.figures);
    }
    kvio_control_cost_free(&cost);
    kvio_interference_free(&interference);
    update_metrics_fini(&metrics);
    return status;
}
