/* summary.json's storage block (run/run_int.h): the KV tiers as storage
 * engineers report them. Per tier (its entries over every serve rank
 * summed): bytes, bandwidth and IOPS while busy, the queue depth achieved,
 * read and write latency percentiles (the worst rank's: percentiles do not
 * add), and for a file tier its layout, engine and device. For the run:
 * cached tokens per second (tokens served from tier reads over the
 * measured time, mlcommons/storage #334's number) and storage throughput in
 * tokens per second (tokens moved to and from the tiers), beside the names
 * MLPerf Storage's KV-cache benchmark (kv-cache.py) reports them under. */
#include "run/run_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* One tier over the ranks: its entries' sums into total. */
typedef struct tier_total {
    const kvio_result_t *first; /* the first rank's entry (its kind, layout, engine, device) */
    double ranks, bytes_read, bytes_written, read_ns, write_ns, hits, puts, skipped_puts;
    double read_depth_ns, write_depth_ns; /* queue depth x busy time, summed */
    double read_ms[4], write_ms[4];       /* the worst rank's p50, p95, p99, p99.9 */
} tier_total_t;

/* The tier's figures over the ranks into entry, an entry of the result's
 * storage_tiers list; what its kind says about itself (layout, engine,
 * device) as its detail. */
static void tier_fill(kvio_result_t *entry, const tier_total_t *total)
{
    kvio_result_set_text(entry, KVIO_FIG_STORAGE_TIER_KIND,
                         kvio_result_text(total->first, KVIO_FIG_TIER_KIND));
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_RANKS, total->ranks);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_BYTES_READ, total->bytes_read);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_BYTES_WRITTEN, total->bytes_written);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_SKIPPED_PUTS, total->skipped_puts);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_READ_GBPS,
                    total->read_ns > 0 ? total->bytes_read / total->read_ns : 0);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_WRITE_GBPS,
                    total->write_ns > 0 ? total->bytes_written / total->write_ns : 0);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_READ_IOPS,
                    total->read_ns > 0 ? total->hits * 1e9 / total->read_ns : 0);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_WRITE_IOPS,
                    total->write_ns > 0 ? total->puts * 1e9 / total->write_ns : 0);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_READ_QUEUE_DEPTH,
                    total->read_ns > 0 ? total->read_depth_ns / total->read_ns : 0);
    kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_WRITE_QUEUE_DEPTH,
                    total->write_ns > 0 ? total->write_depth_ns / total->write_ns : 0);
    for (int q = 0; q < 4; q++) {
        kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_READ_P50_MS + q, total->read_ms[q]);
        kvio_result_set(entry, KVIO_FIG_STORAGE_TIER_WRITE_P50_MS + q, total->write_ms[q]);
    }
    static const char *const about[] = {"layout", "io_engine", "queue_depth", "o_direct",
                                        "o_direct_note", "io_engine_note", "device", "memory"};
    for (size_t i = 0; i < sizeof(about) / sizeof(about[0]); i++) {
        const json_t *value = kvio_result_detail(total->first, about[i]);
        if (value != NULL)
            kvio_result_set_detail(entry, about[i], json_incref((json_t *)value));
    }
}

/* A tier's P95 per block read or written, by where it sits: host memory
 * ("cpu") or a file ("nvme"), the first tier of each. */
static void p95_by_place(json_t *latency, const tier_total_t *total)
{
    /* Keyed by kvio's tier kinds (host_, file_, redis_), per block: kvio's
     * names, not kv-cache.py's (its P95s are per whole-request object). */
    const char *kind = kvio_result_text(total->first, KVIO_FIG_TIER_KIND);
    char key[64];
    snprintf(key, sizeof(key), "%s_read_p95_per_block_ms", kind);
    if (json_object_get(latency, key) == NULL)
        json_object_set_new(latency, key, json_real(total->read_ms[1]));
    snprintf(key, sizeof(key), "%s_write_p95_per_block_ms", kind);
    if (json_object_get(latency, key) == NULL)
        json_object_set_new(latency, key, json_real(total->write_ms[1]));
}

/* An entry's figure (0 when it has none). */
static double figure(const kvio_result_t *entry, kvio_figure_t which)
{
    double value = kvio_result_get(entry, which);
    return isnan(value) ? 0 : value;
}

/* One rank's entry of a tier into its total. */
static void add_entry(tier_total_t *total, const kvio_result_t *entry)
{
    if (total->first == NULL)
        total->first = entry;
    total->ranks++;
    total->bytes_read += figure(entry, KVIO_FIG_TIER_BYTES_READ);
    total->bytes_written += figure(entry, KVIO_FIG_TIER_BYTES_WRITTEN);
    total->read_ns += figure(entry, KVIO_FIG_TIER_READ_NS);
    total->write_ns += figure(entry, KVIO_FIG_TIER_WRITE_NS);
    total->hits += figure(entry, KVIO_FIG_TIER_HITS);
    total->puts += figure(entry, KVIO_FIG_TIER_PUTS);
    total->skipped_puts += figure(entry, KVIO_FIG_TIER_SKIPPED_PUTS);
    total->read_depth_ns += figure(entry, KVIO_FIG_TIER_READ_QUEUE_DEPTH) *
                            figure(entry, KVIO_FIG_TIER_READ_NS);
    total->write_depth_ns += figure(entry, KVIO_FIG_TIER_WRITE_QUEUE_DEPTH) *
                             figure(entry, KVIO_FIG_TIER_WRITE_NS);
    /* Percentiles do not add: the worst rank's. */
    for (int q = 0; q < 4; q++) {
        total->read_ms[q] = fmax(total->read_ms[q],
                                 figure(entry, KVIO_FIG_TIER_READ_LATENCY_P50 + q));
        total->write_ms[q] = fmax(total->write_ms[q],
                                  figure(entry, KVIO_FIG_TIER_WRITE_LATENCY_P50 + q));
    }
}

kvio_status_t kvio_run_storage(const kvio_workload_t *workload, kvio_result_t *result)
{
    size_t num_entries = kvio_result_num_children(result, "tiers");
    size_t num_tiers = workload->serve.kvcache.tiers.count;
    if (num_entries == 0 || num_tiers == 0)
        return KVIO_OK;
    tier_total_t totals[16];
    if (num_tiers > 16)
        num_tiers = 16;
    memset(totals, 0, sizeof(totals));
    double bytes_moved = 0, bytes_per_token = 0;
    /* Each rank lists its tiers in the configured order. */
    for (size_t e = 0; e < num_entries; e++) {
        const kvio_result_t *entry = kvio_result_child_at(result, "tiers", e);
        add_entry(&totals[e % num_tiers], entry);
        bytes_moved += figure(entry, KVIO_FIG_TIER_BYTES_READ) +
                       figure(entry, KVIO_FIG_TIER_BYTES_WRITTEN);
        /* A tier's objects are chunks of blocks (serve.kvcache.chunk_tokens). */
        if (bytes_per_token == 0 && workload->serve.kvcache.block_size > 0)
            bytes_per_token = figure(entry, KVIO_FIG_TIER_BLOCK_BYTES) /
                              (double)workload->serve.kvcache.block_size /
                              (double)kvio_serve_chunk_blocks(&workload->serve.kvcache);
    }
    double seconds = kvio_result_get(result, KVIO_FIG_DURATION_S);
    json_t *latency = json_object();
    for (size_t t = 0, index = 0; t < num_tiers; t++) {
        if (totals[t].first == NULL)
            continue;
        kvio_result_t *entry = kvio_result_child(result, "storage_tiers", index++);
        if (entry == NULL) {
            json_decref(latency);
            return KVIO_ERR_NOMEM;
        }
        tier_fill(entry, &totals[t]);
        p95_by_place(latency, &totals[t]);
    }
    kvio_result_set(result, KVIO_FIG_STORAGE_CACHED_TOKENS_PER_S,
                    seconds > 0 ? kvio_result_get(result, KVIO_FIG_TIER_HIT_TOKENS) / seconds : 0);
    kvio_result_set(result, KVIO_FIG_STORAGE_TOKENS_MOVED_PER_S,
                    seconds > 0 && bytes_per_token > 0 ? bytes_moved / bytes_per_token / seconds
                                                       : 0);
    /* Whether the run held its duration (emulate: the wall clock ran). */
    double wall_s = kvio_result_get(result, KVIO_FIG_WALL_RUN_S);
    int64_t duration_ns = kvio_workload_stream_duration(workload);
    if (!isnan(wall_s) && duration_ns > 0)
        kvio_result_set(result, KVIO_FIG_STORAGE_OVERRUN_S,
                        fmax(0, wall_s - (double)duration_ns / 1e9));
    /* The worst P95 per block of each place (host memory, a file), which
     * assess: judges: per block, not per MLPerf's whole-request object. */
    kvio_result_set_detail(result, "storage.block_p95_ms", latency);
    return KVIO_OK;
}

/* ---------- assess: ---------- */

const kvio_opt_t kvio_assess_options[] = {
    {.key = "mlperf", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_assess_config_t, mlperf),
     .default_value = "false",
     .help = "kv-cache.py's latency-profile thresholds for every one left 0, judged per block "
             "(kvio's assessment, not an MLPerf result): file tier write P95 < 500 ms, read "
             "P95 < 200 ms, host tier P95 < 150 ms, hit rate with the tiers > 30 %"},
    {.key = "storage_write_p95_ms", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_assess_config_t, storage_write_p95_ms), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "a file tier's write P95 below this (0: none)"},
    {.key = "storage_read_p95_ms", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_assess_config_t, storage_read_p95_ms), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "a file tier's read P95 below this (0: none)"},
    {.key = "cpu_p95_ms", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_assess_config_t, cpu_p95_ms), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "a host tier's read and write P95 below this (0: none)"},
    {.key = "hit_rate", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_assess_config_t, hit_rate),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "the hit rate with the tiers above this, 0-1 (0: none)"},
    {.key = NULL},
};

double kvio_run_assessed_hit_rate(const kvio_assess_config_t *assess)
{
    return assess->hit_rate > 0 ? assess->hit_rate : assess->mlperf ? 0.3 : 0;
}

double kvio_run_hit_rate_needs_s(const kvio_workload_t *workload, const kvio_result_t *result)
{
    double target = kvio_run_assessed_hit_rate(&workload->assess);
    double hit_rate = kvio_result_get(result, KVIO_FIG_HIT_RATE_WITH_TIERS);
    double turns = kvio_dist_mean(&workload->stream.prefix.sessions.turns);
    double throughput = kvio_result_get(result, KVIO_FIG_REQUEST_THROUGHPUT);
    double window_s = kvio_result_get(result, KVIO_FIG_DURATION_S);
    if (!(target > 0) || !(hit_rate <= target) || workload->stream.users <= 0 || !(turns > 1) ||
        !(throughput > 0) || !(window_s > 0))
        return 0;
    double needs_s = turns * (double)workload->stream.users / throughput;
    return window_s < needs_s ? needs_s : 0;
}

/* One criterion, judged where the run has its figure (actual not NAN). */
static void criterion(json_t *criteria, const char *name, double target, double actual,
                      const char *unit, bool below)
{
    if (target <= 0 || isnan(actual))
        return;
    bool passed = below ? actual < target : actual > target;
    json_array_append_new(criteria, json_pack("{s:s, s:f, s:f, s:s, s:b}", "name", name, "target",
                                              target, "actual", actual, "unit", unit, "passed",
                                              passed));
}

static double figure_of(const json_t *object, const char *key)
{
    const json_t *value = json_object_get(object, key);
    return json_is_number(value) ? json_number_value(value) : NAN;
}

json_t *kvio_run_assess(const kvio_workload_t *workload, const kvio_result_t *result)
{
    const kvio_assess_config_t *assess = &workload->assess;
    double write_ms = assess->storage_write_p95_ms, read_ms = assess->storage_read_p95_ms;
    double cpu_ms = assess->cpu_p95_ms, hit_rate = kvio_run_assessed_hit_rate(assess);
    if (assess->mlperf) {
        write_ms = write_ms > 0 ? write_ms : 500;
        read_ms = read_ms > 0 ? read_ms : 200;
        cpu_ms = cpu_ms > 0 ? cpu_ms : 150;
    }
    if (write_ms <= 0 && read_ms <= 0 && cpu_ms <= 0 && hit_rate <= 0)
        return NULL;
    /* kvio's criteria under kvio's names: kv-cache.py's thresholds (with
     * mlperf) applied per block, not MLPerf's pass/fail (v3.0 has none). */
    const json_t *block = kvio_result_detail(result, "storage.block_p95_ms");
    json_t *criteria = json_array();
    char name[96];
    snprintf(name, sizeof(name), "file tier write P95 per block < %g ms", write_ms);
    criterion(criteria, name, write_ms, figure_of(block, "file_write_p95_per_block_ms"), "ms",
              true);
    snprintf(name, sizeof(name), "file tier read P95 per block < %g ms", read_ms);
    criterion(criteria, name, read_ms, figure_of(block, "file_read_p95_per_block_ms"), "ms",
              true);
    /* kv-cache.py takes one P95 over the CPU tier's reads and writes
     * together; the larger of the two bounds it from above. */
    double cpu = fmax(figure_of(block, "host_read_p95_per_block_ms"),
                      figure_of(block, "host_write_p95_per_block_ms"));
    snprintf(name, sizeof(name), "host tier P95 per block < %g ms", cpu_ms);
    criterion(criteria, name, cpu_ms, cpu, "ms", true);
    snprintf(name, sizeof(name), "prompt-token hit rate with the tiers > %g %%", hit_rate * 100);
    criterion(criteria, name, hit_rate, kvio_result_get(result, KVIO_FIG_HIT_RATE_WITH_TIERS),
              "ratio", false);
    double needs_s = kvio_run_hit_rate_needs_s(workload, result);
    if (needs_s > 0) /* the verdict's too_short says so too */
        json_object_set_new(json_array_get(criteria, json_array_size(criteria) - 1),
                            "too_short_needs_s", json_real(ceil(needs_s)));
    size_t passed = 0;
    for (size_t i = 0; i < json_array_size(criteria); i++)
        passed += json_is_true(json_object_get(json_array_get(criteria, i), "passed"));
    size_t total = json_array_size(criteria);
    return json_pack("{s:s, s:o, s:I, s:I, s:b}", "profile",
                     assess->mlperf ? "kv-cache.py's thresholds, per block" : "custom", "criteria", criteria,
                     "passed_count", (json_int_t)passed, "total_count", (json_int_t)total,
                     "passed", total > 0 && passed == total);
}
