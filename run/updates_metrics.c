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
 * records before anything is rendered (JSON, updates.csv, the trace). */
typedef struct update_metrics {
    kvio_hist_t *latency, *train_stall, *bandwidth; /* ns, ns, MB/s */
    uint64_t activated, mismatches, skipped, polls, iterations;
    double stage_mean_ms[5]; /* after t_ready: xfer start/end, notified, verified, activated */
    double stall_total_ms, inference_stall_total_ms, inference_stall_max_ms;
    double staleness_mean;
    uint64_t staleness_max;
    int64_t clock_uncertainty_ns;
    int num_serve;
} update_metrics_t;

static const char *const stage_names[5] = {"xfer_start", "xfer_end", "notified", "verified",
                                           "activated"};

static void update_metrics_fini(update_metrics_t *metrics)
{
    kvio_hist_destroy(metrics->latency);
    kvio_hist_destroy(metrics->train_stall);
    kvio_hist_destroy(metrics->bandwidth);
}

/* Transfer bandwidth of one update in GB/s (0 when it took no time). */
static double update_gbps(const kvio_update_record_t *record)
{
    double xfer_s = (double)(record->t_xfer_end_ns - record->t_xfer_start_ns) / 1e9;
    return xfer_s > 0 ? (double)record->bytes / xfer_s / 1e9 : 0;
}

static kvio_status_t compute_update_metrics(const collected_t *all, int num_serve_configured,
                                            update_metrics_t *metrics)
{
    memset(metrics, 0, sizeof(*metrics));
    if (kvio_hist_create(&metrics->latency) != KVIO_OK ||
        kvio_hist_create(&metrics->train_stall) != KVIO_OK ||
        kvio_hist_create(&metrics->bandwidth) != KVIO_OK) {
        update_metrics_fini(metrics);
        return KVIO_ERR_NOMEM;
    }
    double stage_sum[5] = {0};
    for (size_t i = 0; i < all->num_updates; i++) {
        const kvio_update_record_t *record = &all->updates[i];
        if (record->t_activated_ns) {
            metrics->activated++;
            kvio_hist_record(metrics->latency,
                             (uint64_t)(record->t_activated_ns - record->t_ready_ns));
            int64_t stages[5] = {record->t_xfer_start_ns, record->t_xfer_end_ns,
                                 record->t_notified_ns, record->t_verified_ns,
                                 record->t_activated_ns};
            for (int s = 0; s < 5; s++)
                stage_sum[s] += (double)(stages[s] - record->t_ready_ns) / 1e6;
        }
        double gbps = update_gbps(record);
        if (gbps > 0)
            kvio_hist_record(metrics->bandwidth, (uint64_t)(gbps * 1e3)); /* MB/s */
        metrics->mismatches += record->checksum_ok ? 0 : 1;
        metrics->skipped += (uint64_t)(record->skipped_before > 0 ? record->skipped_before : 0);
    }
    for (int s = 0; s < 5; s++)
        metrics->stage_mean_ms[s] = metrics->activated ? stage_sum[s] / (double)metrics->activated
                                                       : 0;
    for (size_t i = 0; i < all->num_train; i++) {
        kvio_hist_record(metrics->train_stall, (uint64_t)all->train[i].stall_ns);
        metrics->stall_total_ms += (double)all->train[i].stall_ns / 1e6;
    }
    double staleness_sum = 0;
    for (int i = 0; i < all->num_reports; i++) {
        const rank_report_t *report = &all->reports[i];
        if (report->clock_uncertainty_ns > metrics->clock_uncertainty_ns)
            metrics->clock_uncertainty_ns = report->clock_uncertainty_ns;
        if (!is_serve_report(report, num_serve_configured))
            continue;
        metrics->num_serve++;
        double stall_ms = (double)report->inference_stall_ns / 1e6;
        metrics->inference_stall_total_ms += stall_ms;
        if (stall_ms > metrics->inference_stall_max_ms)
            metrics->inference_stall_max_ms = stall_ms;
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

static json_t *update_metrics_json(const update_metrics_t *metrics,
                                   const kvio_workload_t *workload, const collected_t *all)
{
    json_t *object = json_object();
    json_object_set_new(object, "transport",
                        json_string(kvio_choice_name(&workload->train.transport.kind)));
    json_object_set_new(object, "transport_info", json_string(all->info));
    json_object_set_new(object, "runtime", json_string(all->num_reports ? "" : "simulate"));
    json_object_set_new(object, "bytes",
                        json_integer((json_int_t)kvio_train_weights_bytes(&workload->train)));
    json_object_set_new(object, "serve_ranks", json_integer(metrics->num_serve));
    json_object_set_new(object, "versions_published", json_integer((json_int_t)all->num_train));
    json_object_set_new(object, "updates_received", json_integer((json_int_t)all->num_updates));
    json_object_set_new(object, "updates_activated", json_integer((json_int_t)metrics->activated));
    json_object_set_new(object, "versions_skipped", json_integer((json_int_t)metrics->skipped));
    json_object_set_new(object, "checksum_mismatches",
                        json_integer((json_int_t)metrics->mismatches));
    /* The bytes each hop carried: from the trainer, and forwarded by a serve
     * rank (a chain fan-out); weight_sync's are its own. */
    json_int_t from_trainer = 0, forwarded = 0;
    for (size_t i = 0; workload->weight_sync.granularity == KVIO_SYNC_OFF && i < all->num_updates;
         i++) {
        json_int_t bytes = (json_int_t)all->updates[i].bytes;
        if (update_source(workload, &all->updates[i]) == TRAIN_RANK)
            from_trainer += bytes;
        else
            forwarded += bytes;
    }
    json_object_set_new(object, "wire_bytes_from_trainer", json_integer(from_trainer));
    json_object_set_new(object, "wire_bytes_forwarded", json_integer(forwarded));
    json_object_set_new(object, "update_latency_ms", kvio_hist_json(metrics->latency, 1e-6));
    json_t *stall = kvio_update_stall_json(all->updates, all->num_updates);
    if (stall != NULL)
        json_object_set_new(object, "stall_ms_per_update", stall);
    json_object_set_new(object, "bandwidth_gbps", kvio_hist_json(metrics->bandwidth, 1e-3));
    json_object_set_new(object, "training_stall_ms", kvio_hist_json(metrics->train_stall, 1e-6));
    json_object_set_new(object, "training_stall_total_ms", json_real(metrics->stall_total_ms));
    json_object_set_new(object, "inference_stall_total_ms",
                        json_real(metrics->inference_stall_total_ms));
    json_object_set_new(object, "inference_stall_max_ms",
                        json_real(metrics->inference_stall_max_ms));
    json_object_set_new(object, "staleness_mean_versions", json_real(metrics->staleness_mean));
    json_object_set_new(object, "staleness_max_versions",
                        json_integer((json_int_t)metrics->staleness_max));
    json_object_set_new(object, "serve_iterations", json_integer((json_int_t)metrics->iterations));
    json_object_set_new(object, "polls", json_integer((json_int_t)metrics->polls));
    json_object_set_new(object, "clock_offset_uncertainty_us",
                        json_real((double)metrics->clock_uncertainty_ns / 1e3));
    json_t *stages = json_object();
    for (int s = 0; s < 5; s++)
        json_object_set_new(stages, stage_names[s], json_real(metrics->stage_mean_ms[s]));
    json_object_set_new(object, "stage_mean_ms_after_ready", stages);
    return object;
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
             "stall_drain_ms,stall_lend_ms,stall_release_ms%s%s",
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
                     "%.4f,%.6f,%.6f,%.6f,%.6f%s%s",
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
                     (double)record->stall_ns[KVIO_STALL_RELEASE] / 1e6, ratios, costs);
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

/* The run's inference stall by cause: the updates' (what each cost its
 * rank, summed), the executor's overruns (emulate: the rest of the serve
 * ranks' stall), and the time iterations spent on swap and tier I/O (the
 * serving metrics' io_stall_ms). */
static json_t *stall_by_cause_json(const run_context_t *context, const collected_t *all,
                                   const update_metrics_t *metrics)
{
    double update_ms = 0;
    for (size_t i = 0; i < all->num_updates; i++)
        for (int c = 0; c < KVIO_STALL_CAUSES; c++)
            update_ms += (double)all->updates[i].stall_ns[c] / 1e6;
    bool emulate = context->workload->mode == KVIO_MODE_EMULATE;
    double overrun_ms = emulate ? metrics->inference_stall_total_ms - update_ms : 0;
    double swap_ms = kvio_result_get(context->result, KVIO_FIG_IO_STALL_SWAP_MS);
    double tier_ms = kvio_result_get(context->result, KVIO_FIG_IO_STALL_TIER_MS);
    return json_pack("{s:f, s:f, s:f, s:f}", "update", update_ms, "executor_overrun",
                     overrun_ms > 0 ? overrun_ms : 0.0, "swap", isnan(swap_ms) ? 0.0 : swap_ms,
                     "tier_io", isnan(tier_ms) ? 0.0 : tier_ms);
}

/* Activations after the last request finished served nothing: counted
 * apart (activated_after_serving), the rest as activated_while_serving;
 * updates_activated is their sum. */
static void count_after_serving(json_t *model_updates, const collected_t *all, int64_t origin_ns,
                                const kvio_serve_output_t *serving)
{
    int64_t serving_end_ns = 0;
    for (size_t i = 0; i < serving->num_finished; i++)
        if (serving->finished[i].finish_ns > serving_end_ns)
            serving_end_ns = serving->finished[i].finish_ns;
    json_int_t after = 0, during = 0;
    for (size_t i = 0; i < all->num_updates; i++) {
        int64_t activated = all->updates[i].t_activated_ns;
        if (activated == 0)
            continue;
        if (activated - origin_ns > serving_end_ns)
            after++;
        else
            during++;
    }
    json_object_set_new(model_updates, "activated_while_serving", json_integer(during));
    json_object_set_new(model_updates, "activated_after_serving", json_integer(after));
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
    if (status == KVIO_OK && context->result != NULL) {
        json_t *model_updates = update_metrics_json(&metrics, context->workload, all);
        json_object_set_new(model_updates, "inference_stall_by_cause_ms",
                            stall_by_cause_json(context, all, &metrics));
        if (serving != NULL)
            count_after_serving(model_updates, all, origin_ns, serving);
        kvio_result_set_detail(context->result, "model_updates", model_updates);
        if (serving != NULL) {
            json_t *trend = kvio_interference_json(&interference,
                                                   serving->update_recomputed_tokens,
                                                   serving->update_aborted_requests,
                                                   metrics.inference_stall_total_ms);
            json_t *during = kvio_interference_during_json(serving, all->updates,
                                                           all->num_updates, origin_ns);
            if (during != NULL)
                json_object_set_new(trend, "during_updates", during);
            kvio_result_set_detail(context->result, "update_interference", trend);
        }
        if (controlled)
            kvio_result_set_detail(context->result, "update_cost", json_incref(cost.json));
    }
    kvio_control_cost_free(&cost);
    kvio_interference_free(&interference);
    update_metrics_fini(&metrics);
    return status;
}
