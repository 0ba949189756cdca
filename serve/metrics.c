/* The serving metrics as JSON: latencies, throughputs, goodput, the prefix
 * cache, preemptions, KV usage, accelerator utilisation, what updates did
 * to the engine, the inference loss by version, and the tiers' traffic. */
#include "serve/serve_int.h"

#include "kvio/model.h"

json_t *kvio_serve_metrics_json(const kvio_engine_metrics_t *metrics)
{
    double window_s = metrics->measure_end_ns > metrics->measure_start_ns
                          ? (double)(metrics->measure_end_ns - metrics->measure_start_ns) / 1e9
                          : 0;
    double span_s = metrics->last_finish_ns > metrics->first_arrival_ns
                        ? (double)(metrics->last_finish_ns - metrics->first_arrival_ns) / 1e9
                        : 0;
    double per_s = window_s > 0 ? 1.0 / window_s : 0;
    json_t *object = json_object();
    json_object_set_new(object, "completed", json_integer((json_int_t)metrics->requests));
    json_object_set_new(object, "measured", json_integer((json_int_t)metrics->measured_requests));
    json_object_set_new(object, "duration_s", json_real(window_s));
    json_object_set_new(object, "ttft_ms", kvio_hist_json(metrics->ttft, 1e-6));
    json_object_set_new(object, "tpot_ms", kvio_hist_json(metrics->tpot, 1e-6));
    json_object_set_new(object, "itl_ms", kvio_hist_json(metrics->itl, 1e-6));
    json_object_set_new(object, "e2el_ms", kvio_hist_json(metrics->e2el, 1e-6));
    json_object_set_new(object, "request_throughput",
                        json_real((double)metrics->measured_requests * per_s));
    json_object_set_new(object, "input_throughput",
                        json_real((double)metrics->input_tokens * per_s));
    json_object_set_new(object, "output_throughput",
                        json_real((double)metrics->output_tokens * per_s));
    /* Goodput only against an SLO: without one it would be the throughput
     * again, named as if the requests had met something (vLLM reports none). */
    if (metrics->slo) {
        json_object_set_new(object, "goodput",
                            json_real((double)metrics->good_requests * per_s));
        /* The share of measured requests within each bound, and both. */
        double measured = metrics->measured_requests > 0 ? (double)metrics->measured_requests
                                                         : 1.0;
        json_object_set_new(object, "slo_attainment",
                            json_pack("{s:f, s:f, s:f}", "ttft",
                                      (double)metrics->ttft_met / measured, "tpot",
                                      (double)metrics->tpot_met / measured, "both",
                                      (double)metrics->good_requests / measured));
    }
    /* The load offered: requests per second between the first and the last
     * arrival (throughput below it means the engines fell behind). */
    double arrival_s = metrics->arrivals > 1 && metrics->last_arrival_ns > metrics->first_arrival_ns
                           ? (double)(metrics->last_arrival_ns - metrics->first_arrival_ns) / 1e9
                           : 0;
    json_object_set_new(object, "offered_rate",
                        json_real(arrival_s > 0 ? (double)(metrics->arrivals - 1) / arrival_s
                                                : 0));
    json_object_set_new(object, "input_tokens", json_integer((json_int_t)metrics->input_tokens));
    json_object_set_new(object, "output_tokens", json_integer((json_int_t)metrics->output_tokens));
    json_object_set_new(object, "prefix_cache_queries",
                        json_integer((json_int_t)metrics->prefix_queries));
    json_object_set_new(object, "prefix_cache_hits", json_integer((json_int_t)metrics->prefix_hits));
    json_object_set_new(object, "hit_rate",
                        json_real(metrics->prefix_queries
                                      ? (double)metrics->prefix_hits / (double)metrics->prefix_queries
                                      : 0));
    json_object_set_new(object, "tier_hit_tokens", json_integer((json_int_t)metrics->tier_hit_tokens));
    json_object_set_new(object, "hit_rate_with_tiers",
                        json_real(metrics->prefix_queries
                                      ? (double)(metrics->prefix_hits + metrics->tier_hit_tokens) /
                                            (double)metrics->prefix_queries
                                      : 0));
    if (metrics->spec_draft_tokens > 0)
        json_object_set_new(
            object, "spec_decode",
            json_pack("{s:I, s:I, s:f}", "draft_tokens", (json_int_t)metrics->spec_draft_tokens,
                      "accepted_tokens", (json_int_t)metrics->spec_accepted_tokens,
                      "acceptance_rate",
                      (double)metrics->spec_accepted_tokens /
                          (double)metrics->spec_draft_tokens));
    /* tier_io: async: the requests that waited for their KV from a tier. */
    json_object_set_new(
        object, "kv_wait",
        json_pack("{s:I, s:f, s:f, s:I, s:I}", "requests", (json_int_t)metrics->kv_wait_requests,
                  "mean_ms",
                  metrics->kv_wait_requests > 0
                      ? (double)metrics->kv_wait_ns / 1e6 / (double)metrics->kv_wait_requests
                      : 0.0,
                  "max_ms", (double)metrics->kv_wait_max_ns / 1e6, "prefetch_stopped",
                  (json_int_t)metrics->prefetch_stopped, "prefetch_left_tokens",
                  (json_int_t)metrics->prefetch_left_tokens));
    json_object_set_new(object, "resumed_prefix_cache_queries",
                        json_integer((json_int_t)metrics->resumed_prefix_queries));
    json_object_set_new(object, "resumed_prefix_cache_hits",
                        json_integer((json_int_t)metrics->resumed_prefix_hits));
    json_object_set_new(object, "preemptions", json_integer((json_int_t)metrics->preemptions));
    /* Requests taken out unfinished (a client that went away: kvio serve). */
    if (metrics->pd_reprefills > 0) {
        json_object_set_new(object, "pd_reprefills",
                            json_integer((json_int_t)metrics->pd_reprefills));
        json_object_set_new(object, "pd_reprefilled_tokens",
                            json_integer((json_int_t)metrics->pd_reprefilled_tokens));
    }
    if (metrics->aborted_requests > 0)
        json_object_set_new(object, "aborted_requests",
                            json_integer((json_int_t)metrics->aborted_requests));
    json_object_set_new(object, "mispredict_preemptions",
                        json_integer((json_int_t)metrics->mispredict_preemptions));
    json_object_set_new(object, "recomputed_tokens",
                        json_integer((json_int_t)metrics->recomputed_tokens));
    json_object_set_new(object, "swapped_bytes", json_integer((json_int_t)metrics->swapped_bytes));
    json_object_set_new(object, "swap_space_exhausted",
                        json_integer((json_int_t)metrics->swap_space_exhausted));
    json_object_set_new(object, "iterations", json_integer((json_int_t)metrics->iterations));
    if (metrics->versions_activated > 0)
        json_object_set_new(
            object, "update_effects",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:I}",
                      "versions_activated", (json_int_t)metrics->versions_activated,
                      "stale_hit_tokens", (json_int_t)metrics->stale_hit_tokens,
                      "cache_flushed_blocks", (json_int_t)metrics->cache_flushed_blocks,
                      "mixed_version_tokens", (json_int_t)metrics->mixed_version_tokens,
                      "update_aborted_requests", (json_int_t)metrics->update_aborted_requests,
                      "update_recomputed_tokens", (json_int_t)metrics->update_recomputed_tokens,
                      "colocated_preemptions", (json_int_t)metrics->colocated_preemptions,
                      "resets", (json_int_t)metrics->resets, "resets_pending",
                      (json_int_t)metrics->resets_pending, "reset_delay_ms",
                      metrics->resets > 0 ? (double)metrics->reset_delay_ns / 1e6 /
                                                (double)metrics->resets
                                          : 0.0,
                      "reset_preempted_requests",
                      (json_int_t)metrics->reset_preempted_requests));
    json_object_set_new(object, "kv_usage_mean",
                        json_real(metrics->measured_busy_ns > 0
                                      ? metrics->usage_time_integral /
                                            (double)metrics->measured_busy_ns
                                      : 0));
    json_object_set_new(object, "kv_usage_max", json_real(metrics->max_usage));
    /* DLIO's AU: compute time per engine over the run's span; the time the
     * engine waited on swap and tier transfers is I/O stall, apart. */
    double engines = metrics->engines > 0 ? (double)metrics->engines : 1.0;
    double compute_ns = (double)(metrics->busy_ns - metrics->io_stall_ns);
    json_object_set_new(object, "accelerator_utilization",
                        json_real(span_s > 0 ? compute_ns / 1e9 / span_s / engines : 0));
    json_object_set_new(object, "io_stall_ms",
                        json_pack("{s:f, s:f}", "swap", (double)metrics->swap_stall_ns / 1e6,
                                  "tier", (double)metrics->tier_stall_ns / 1e6));
    json_object_set_new(object, "io_stall_fraction",
                        json_real(span_s > 0 ? (double)metrics->io_stall_ns / 1e9 / span_s /
                                                   engines
                                             : 0));
    return object;
}

void kvio_serve_loss_json(json_t *metrics, const kvio_serve_run_t *run, const uint64_t *served,
                          size_t num_versions)
{
    double loss = 0;
    uint64_t requests = 0;
    json_t *by_version = json_array();
    for (size_t v = 0; v < num_versions; v++) {
        if (served[v] == 0)
            continue;
        double step = v > 0 && v < run->num_version_steps && run->version_steps[v] > 0
                          ? run->version_steps[v]
                          : 1.0;
        double per_request = kvio_loss_at(run->loss, step);
        loss += per_request * (double)served[v];
        requests += served[v];
        json_array_append_new(by_version, json_pack("{s:I, s:f, s:I, s:f}", "version",
                                                    (json_int_t)v, "step", step, "requests",
                                                    (json_int_t)served[v], "loss", per_request));
    }
    json_object_set_new(metrics, "cumulative_inference_loss", json_real(loss));
    json_object_set_new(metrics, "mean_inference_loss",
                        json_real(requests > 0 ? loss / (double)requests : 0));
    json_object_set_new(metrics, "served_by_version", by_version);
}

void kvio_serve_tiers_json(kvio_tier_t *const *tiers, size_t num_tiers, uint32_t rank,
                           json_t *array)
{
    for (size_t t = 0; t < num_tiers; t++) {
        json_t *tier = kvio_tier_stats_json(tiers[t]);
        json_object_set_new(tier, "rank", json_integer(rank));
        json_array_append_new(array, tier);
    }
}

void kvio_serve_itls_take(kvio_engine_metrics_t *metrics, kvio_serve_itls_t *itls)
{
    if (itls == NULL)
        return;
    free(itls->records);
    *itls = (kvio_serve_itls_t){.records = metrics->itl_records,
                                .count = metrics->num_itl_records,
                                .dropped = metrics->itl_records_dropped};
    metrics->itl_records = NULL;
    metrics->num_itl_records = metrics->itl_records_capacity = 0;
}
