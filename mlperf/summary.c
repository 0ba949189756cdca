/* Results: one client's trial under kv-cache.py's names (the summary and
 * cache_stats of its results JSON, _calculate_stats and get_stats), the
 * option's score as mlpstorage aggregates the rank files
 * (KVCacheBenchmark._aggregate_option_results) with Rules.md 6.3.4's
 * device latencies, and everything else under kvio_ names. */
#include "mlperf/mlperf_int.h"

#include <math.h>
#include <string.h>

#define GIB 1073741824.0

static json_t *percentiles_json(const mlperf_percentiles_t *p)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "mean", p->mean, "p50", p->p50, "p95",
                     p->p95, "p99", p->p99, "p999", p->p999, "p9999", p->p9999);
}

/* cache_stats' {tier}_{op}_p*_ms, present only when there were samples. */
static void put_latency(json_t *cache, const char *prefix, const mlperf_percentiles_t *p)
{
    if (p->count == 0)
        return;
    static const char *const suffix[] = {"p50", "p95", "p99", "p999", "p9999"};
    const double values[] = {p->p50, p->p95, p->p99, p->p999, p->p9999};
    for (int i = 0; i < 5; i++) {
        char key[96];
        snprintf(key, sizeof(key), "%s_%s_ms", prefix, suffix[i]);
        json_object_set_new(cache, key, json_real(values[i]));
    }
}

static json_t *cache_stats_json(const mlperf_rank_summary_t *s)
{
    json_t *cache = json_pack(
        "{s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "cache_hit_rate", s->cache_hit_rate,
        "cache_hits", (json_int_t)s->cache.cache_hits, "cache_misses", (json_int_t)s->cache.cache_misses,
        "cpu_entries", (json_int_t)s->cpu_entries, "storage_entries",
        (json_int_t)s->storage_entries, "offloads_cpu", (json_int_t)s->cache.offloads_cpu,
        "offloads_storage", (json_int_t)s->cache.offloads_storage, "prefill_writes",
        (json_int_t)s->cache.prefill_writes, "decode_reads", (json_int_t)s->cache.decode_reads);
    json_t *tiers = json_pack(
        "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "tier_cpu_kv_bytes_written_gb",
        (double)s->cache.tier_cpu_written / GIB, "tier_storage_kv_bytes_written_gb",
        (double)s->cache.tier_storage_written / GIB, "tier_cpu_kv_bytes_read_gb",
        (double)s->cache.tier_cpu_read / GIB, "tier_storage_kv_bytes_read_gb",
        (double)s->cache.tier_storage_read / GIB, "tier_cpu_read_bandwidth_gbps",
        s->tier_cpu_read_bandwidth_gbps, "tier_cpu_write_bandwidth_gbps",
        s->tier_cpu_write_bandwidth_gbps, "tier_storage_read_bandwidth_gbps",
        s->tier_storage_read_bandwidth_gbps, "tier_storage_write_bandwidth_gbps",
        s->tier_storage_write_bandwidth_gbps);
    json_object_update(cache, tiers);
    json_decref(tiers);
    json_t *totals = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:f}", "system_prompt_hits",
        (json_int_t)s->cache.system_prompt_hits, "user_cache_hits", (json_int_t)s->cache.user_cache_hits,
        "multi_turn_hits", (json_int_t)s->cache.multi_turn_hits, "total_read_bytes",
        (json_int_t)s->cache.total_read_bytes, "total_write_bytes", (json_int_t)s->cache.total_write_bytes,
        "total_read_gb", (double)s->cache.total_read_bytes / GIB, "total_write_gb",
        (double)s->cache.total_write_bytes / GIB, "read_write_ratio", s->read_write_ratio, "read_iops",
        (json_int_t)s->cache.read_operations, "write_iops", (json_int_t)s->cache.write_operations,
        "storage_tokens_processed", s->cache.storage_tokens_processed);
    json_object_update(cache, totals);
    json_decref(totals);
    put_latency(cache, "cpu_read", &s->cpu_read_ms);
    put_latency(cache, "cpu_write", &s->cpu_write_ms);
    put_latency(cache, "storage_read", &s->storage_read_ms);
    put_latency(cache, "storage_write", &s->storage_write_ms);
    put_latency(cache, "storage_read_device", &s->storage_read_device_ms);
    put_latency(cache, "storage_write_device", &s->storage_write_device_ms);
    put_latency(cache, "storage_read_host", &s->storage_read_host_ms);
    put_latency(cache, "storage_write_host", &s->storage_write_host_ms);
    return cache;
}

static json_t *kvio_rank_json(const mlperf_rank_summary_t *s)
{
    json_t *kvio = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}",
        "kvio_requests_enqueued", (json_int_t)s->requests_enqueued, "kvio_requests_waiting",
        (json_int_t)s->requests_waiting, "kvio_users_lost", (json_int_t)s->users_lost,
        "kvio_demotions", (json_int_t)s->cache.demotions, "kvio_demotion_bytes",
        (json_int_t)s->cache.demotion_bytes, "kvio_storage_deletes", (json_int_t)s->cache.nvme_deletes,
        "kvio_io_errors", (json_int_t)s->cache.io_errors, "kvio_verify_failures",
        (json_int_t)s->cache.verify_failures, "kvio_storage_file_bytes_written",
        (json_int_t)s->cache.storage_bytes_on_device, "kvio_storage_limit_bytes",
        isinf(s->storage_limit_bytes) ? -1.0 : s->storage_limit_bytes,
        "kvio_storage_read_gbps_decimal",
        s->elapsed_s > 0 ? (double)s->cache.tier_storage_read / 1e9 / s->elapsed_s : 0,
        "kvio_storage_write_gbps_decimal",
        s->elapsed_s > 0 ? (double)s->cache.tier_storage_written / 1e9 / s->elapsed_s : 0);
    json_t *window = json_pack("{s:I, s:I, s:f, s:f}", "kvio_window_read_bytes",
                               (json_int_t)s->window_read_bytes, "kvio_window_write_bytes",
                               (json_int_t)s->window_write_bytes, "kvio_window_read_gibps",
                               s->window_read_gibps, "kvio_window_write_gibps",
                               s->window_write_gibps);
    json_object_update(kvio, window);
    json_decref(window);
    json_t *qos = json_object();
    for (int q = 0; q < MLPERF_QOS_CLASSES; q++)
        if (s->qos_end_to_end_ms[q].count > 0) {
            json_t *one = percentiles_json(&s->qos_end_to_end_ms[q]);
            json_object_set_new(one, "requests", json_integer((json_int_t)s->qos_end_to_end_ms[q].count));
            json_object_set_new(qos, mlperf_qos_names[q], one);
        }
    json_object_set_new(kvio, "kvio_qos_end_to_end_latency_ms", qos);
    return kvio;
}

json_t *mlperf_rank_json(const mlperf_rank_summary_t *s)
{
    json_t *summary = json_pack(
        "{s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:o, s:o, s:o}", "total_requests",
        (json_int_t)s->requests_completed, "total_tokens", (json_int_t)s->total_tokens_generated,
        "elapsed_time", s->elapsed_s, "avg_throughput_tokens_per_sec",
        s->avg_throughput_tokens_per_sec, "total_storage_io_time", s->total_storage_io_s,
        "storage_throughput_tokens_per_sec", s->storage_throughput_tokens_per_sec,
        "requests_per_second", s->requests_per_second, "end_to_end_latency_ms",
        percentiles_json(&s->end_to_end_ms), "storage_io_latency_ms",
        percentiles_json(&s->storage_io_ms), "cache_stats", cache_stats_json(s));
    uint64_t turns = s->multi_turn_cache_hits + s->multi_turn_cache_misses;
    json_object_set_new(summary, "multi_turn_stats",
                        json_pack("{s:I, s:I, s:f}", "cache_hits",
                                  (json_int_t)s->multi_turn_cache_hits, "cache_misses",
                                  (json_int_t)s->multi_turn_cache_misses, "hit_rate",
                                  (double)s->multi_turn_cache_hits /
                                      (double)(turns > 0 ? turns : 1)));
    json_object_set_new(summary, "prefix_cache_stats",
                        json_pack("{s:I, s:I}", "prefix_hits", (json_int_t)s->prefix_hits,
                                  "prefix_misses", (json_int_t)s->prefix_misses));
    return json_pack("{s:i, s:i, s:o, s:o}", "rank", s->rank, "trial", s->trial, "summary",
                     summary, "kvio", kvio_rank_json(s));
}

/* The mean over trials of per-trial sums over ranks of one figure, and the
 * sums' coefficient of variation; sums_p (may be NULL) takes each trial's. */
static double mean_of_sums(const mlperf_rank_summary_t *summaries, int trials, int ranks,
                           double (*figure)(const mlperf_rank_summary_t *), double *cv_p,
                           double *sums_p)
{
    double total = 0, squares = 0;
    for (int t = 0; t < trials; t++) {
        double sum = 0;
        for (int r = 0; r < ranks; r++)
            sum += figure(&summaries[t * ranks + r]);
        if (sums_p != NULL && t < 64)
            sums_p[t] = sum;
        total += sum;
        squares += sum * sum;
    }
    double mean = trials > 0 ? total / trials : 0;
    if (cv_p != NULL) {
        double variance = trials > 1 ? (squares - trials * mean * mean) / (trials - 1) : 0;
        *cv_p = mean > 0 ? sqrt(variance > 0 ? variance : 0) / mean : 0;
    }
    return mean;
}

static double read_gbps(const mlperf_rank_summary_t *s) { return s->tier_storage_read_bandwidth_gbps; }
static double write_gbps(const mlperf_rank_summary_t *s) { return s->tier_storage_write_bandwidth_gbps; }
static double storage_tps(const mlperf_rank_summary_t *s) { return s->storage_throughput_tokens_per_sec; }
static double average_tps(const mlperf_rank_summary_t *s) { return s->avg_throughput_tokens_per_sec; }
static double window_read(const mlperf_rank_summary_t *s) { return s->window_read_gibps; }
static double window_write(const mlperf_rank_summary_t *s) { return s->window_write_gibps; }

/* _aggregate_option_results: within a trial the ranks' bandwidths and
 * token throughputs summed, across trials their mean (fmean); the P95s the
 * maximum over every rank and trial (Rules.md 6.3.4.3). */
void mlperf_aggregate(const mlperf_rank_summary_t *summaries, int trials, int ranks,
                      mlperf_aggregate_t *aggregate_p)
{
    mlperf_aggregate_t a = {.trials = trials, .ranks = ranks};
    a.read_bandwidth_gbps = mean_of_sums(summaries, trials, ranks, read_gbps,
                                         &a.read_bandwidth_cv, a.trial_read_bandwidth_gbps);
    a.write_bandwidth_gbps = mean_of_sums(summaries, trials, ranks, write_gbps, NULL, NULL);
    a.storage_throughput_tokens_per_sec =
        mean_of_sums(summaries, trials, ranks, storage_tps, NULL, NULL);
    a.avg_throughput_tokens_per_sec = mean_of_sums(summaries, trials, ranks, average_tps, NULL,
                                                   NULL);
    a.window_read_gibps = mean_of_sums(summaries, trials, ranks, window_read, &a.window_read_cv,
                                       NULL);
    a.window_write_gibps = mean_of_sums(summaries, trials, ranks, window_write, NULL, NULL);
    for (int i = 0; i < trials * ranks; i++) {
        const mlperf_rank_summary_t *s = &summaries[i];
        a.device_read_p95_ms = fmax(a.device_read_p95_ms, s->storage_read_device_ms.p95);
        a.device_write_p95_ms = fmax(a.device_write_p95_ms, s->storage_write_device_ms.p95);
        a.p95_latency_ms = fmax(a.p95_latency_ms, s->storage_io_ms.p95);
        a.cpu_tier_ranks += s->storage_entries == 0;
    }
    *aggregate_p = a;
}

json_t *mlperf_aggregate_json(const mlperf_aggregate_t *a)
{
    json_t *per_trial = json_array();
    for (int t = 0; t < a->trials && t < 64; t++)
        json_array_append_new(per_trial, json_real(a->trial_read_bandwidth_gbps[t]));
    json_t *score = json_pack(
        "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:I, s:{s:o, s:f}}",
        "aggregated_read_bandwidth_gbps", a->read_bandwidth_gbps,
        "aggregated_write_bandwidth_gbps", a->write_bandwidth_gbps,
        "aggregated_storage_throughput_tokens_per_sec", a->storage_throughput_tokens_per_sec,
        "aggregated_avg_throughput_tokens_per_sec", a->avg_throughput_tokens_per_sec,
        "aggregated_device_read_p95_ms", a->device_read_p95_ms,
        "aggregated_device_write_p95_ms", a->device_write_p95_ms, "aggregated_p95_latency_ms",
        a->p95_latency_ms, "trial_count", a->trials, "rank_count", a->ranks,
        "cpu_tier_ranks", (json_int_t)a->cpu_tier_ranks, "kvio",
        "kvio_trial_read_bandwidth_gbps", per_trial, "kvio_read_bandwidth_cv",
        a->read_bandwidth_cv);
    json_t *window = json_pack("{s:f, s:f, s:f}", "kvio_window_read_gibps", a->window_read_gibps,
                               "kvio_window_write_gibps", a->window_write_gibps,
                               "kvio_window_read_cv", a->window_read_cv);
    json_object_update(json_object_get(score, "kvio"), window);
    json_decref(window);
    return score;
}

json_t *mlperf_params_json(const kvio_mlperf_params_t *params)
{
    static const char *const modes[] = {"none", "fast", "realistic"};
    return json_pack("{s:s, s:I, s:f, s:i, s:f, s:I, s:s, s:I, s:f, s:I}", "model", params->model,
                     "num-users", (json_int_t)params->num_users, "duration", params->duration_s,
                     "gpu-mem-gb", 0, "cpu-mem-gb", params->cpu_mem_gb,
                     "max-concurrent-allocs", (json_int_t)params->max_concurrent_allocs,
                     "generation-mode", modes[params->generation_mode], "tensor-parallel",
                     (json_int_t)params->tensor_parallel, "storage-capacity-gb",
                     params->storage_capacity_gb, "max-requests",
                     (json_int_t)params->max_requests);
}
