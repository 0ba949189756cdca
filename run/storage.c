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

/* The larger of a latency percentile over the ranks. */
static void worst(json_t *into, const json_t *from)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)from, key, value) {
        const json_t *known = json_object_get(into, key);
        if (known == NULL || json_number_value(value) > json_number_value(known))
            json_object_set(into, key, value);
    }
}

static double number(const json_t *object, const char *key)
{
    return json_number_value(json_object_get(object, key));
}

/* One tier over the ranks: its entries' sums into total. */
typedef struct tier_total {
    const char *kind;
    const json_t *first; /* the first rank's entry (layout, engine, device) */
    double ranks, bytes_read, bytes_written, read_ns, write_ns, hits, puts, skipped_puts;
    double read_depth_ns, write_depth_ns; /* queue depth x busy time, summed */
    json_t *read_ms, *write_ms;
} tier_total_t;

static json_t *tier_json(const tier_total_t *total)
{
    json_t *tier = json_object();
    json_object_set_new(tier, "kind", json_string(total->kind));
    json_object_set_new(tier, "ranks", json_integer((json_int_t)total->ranks));
    json_object_set_new(tier, "bytes_read", json_integer((json_int_t)total->bytes_read));
    json_object_set_new(tier, "bytes_written", json_integer((json_int_t)total->bytes_written));
    json_object_set_new(tier, "skipped_puts", json_integer((json_int_t)total->skipped_puts));
    json_object_set_new(tier, "read_gbps",
                        json_real(total->read_ns > 0 ? total->bytes_read / total->read_ns : 0));
    json_object_set_new(tier, "write_gbps",
                        json_real(total->write_ns > 0 ? total->bytes_written / total->write_ns
                                                      : 0));
    json_object_set_new(tier, "read_iops",
                        json_real(total->read_ns > 0 ? total->hits * 1e9 / total->read_ns : 0));
    json_object_set_new(tier, "write_iops",
                        json_real(total->write_ns > 0 ? total->puts * 1e9 / total->write_ns : 0));
    json_object_set_new(tier, "read_queue_depth",
                        json_real(total->read_ns > 0 ? total->read_depth_ns / total->read_ns : 0));
    json_object_set_new(tier, "write_queue_depth",
                        json_real(total->write_ns > 0 ? total->write_depth_ns / total->write_ns
                                                      : 0));
    json_object_set(tier, "read_latency_ms", total->read_ms);
    json_object_set(tier, "write_latency_ms", total->write_ms);
    static const char *const about[] = {"layout", "io_engine", "queue_depth", "o_direct",
                                        "o_direct_note", "io_engine_note", "device", "memory"};
    for (size_t i = 0; i < sizeof(about) / sizeof(about[0]); i++) {
        json_t *value = json_object_get(total->first, about[i]);
        if (value != NULL)
            json_object_set(tier, about[i], value);
    }
    return tier;
}

/* MLPerf Storage's P95 of a tier's reads or writes, by where it sits:
 * host memory is its "cpu", a file its "nvme". */
static void mlperf_latency(json_t *mlperf, const tier_total_t *total)
{
    const char *where = strcmp(total->kind, "host") == 0   ? "cpu"
                        : strcmp(total->kind, "file") == 0 ? "nvme"
                                                           : total->kind;
    char key[64];
    snprintf(key, sizeof(key), "%s_read_p95_ms", where);
    if (json_object_get(mlperf, key) == NULL)
        json_object_set(mlperf, key, json_object_get(total->read_ms, "p95"));
    snprintf(key, sizeof(key), "%s_write_p95_ms", where);
    if (json_object_get(mlperf, key) == NULL)
        json_object_set(mlperf, key, json_object_get(total->write_ms, "p95"));
}

json_t *kvio_run_storage(const kvio_workload_t *workload, const json_t *metrics)
{
    const json_t *entries = json_object_get(metrics, "tiers");
    size_t num_tiers = workload->serve.kvcache.tiers.count;
    if (!json_is_array(entries) || json_array_size(entries) == 0 || num_tiers == 0)
        return NULL;
    tier_total_t totals[16];
    if (num_tiers > 16)
        num_tiers = 16;
    memset(totals, 0, sizeof(totals));
    double bytes_moved = 0, bytes_per_token = 0;
    /* Each rank lists its tiers in the configured order. */
    for (size_t e = 0; e < json_array_size(entries); e++) {
        const json_t *entry = json_array_get(entries, e);
        tier_total_t *total = &totals[e % num_tiers];
        if (total->first == NULL) {
            total->first = entry;
            total->kind = json_string_value(json_object_get(entry, "kind"));
            total->read_ms = json_object();
            total->write_ms = json_object();
        }
        total->ranks++;
        total->bytes_read += number(entry, "bytes_read");
        total->bytes_written += number(entry, "bytes_written");
        total->read_ns += number(entry, "read_ns");
        total->write_ns += number(entry, "write_ns");
        total->hits += number(entry, "hits");
        total->puts += number(entry, "puts");
        total->skipped_puts += number(entry, "skipped_puts");
        total->read_depth_ns += number(entry, "read_queue_depth") * number(entry, "read_ns");
        total->write_depth_ns += number(entry, "write_queue_depth") * number(entry, "write_ns");
        worst(total->read_ms, json_object_get(entry, "read_latency_ms"));
        worst(total->write_ms, json_object_get(entry, "write_latency_ms"));
        bytes_moved += number(entry, "bytes_read") + number(entry, "bytes_written");
        /* A tier's objects are chunks of blocks (serve.kvcache.chunk_tokens). */
        if (bytes_per_token == 0 && workload->serve.kvcache.block_size > 0)
            bytes_per_token = number(entry, "block_bytes") /
                              (double)workload->serve.kvcache.block_size /
                              (double)kvio_serve_chunk_blocks(&workload->serve.kvcache);
    }
    double seconds = number(metrics, "duration_s");
    json_t *storage = json_object(), *tiers = json_array(), *mlperf = json_object();
    for (size_t t = 0; t < num_tiers; t++) {
        if (totals[t].first == NULL)
            continue;
        json_array_append_new(tiers, tier_json(&totals[t]));
        mlperf_latency(mlperf, &totals[t]);
        json_decref(totals[t].read_ms);
        json_decref(totals[t].write_ms);
    }
    double cached = seconds > 0 ? number(metrics, "tier_hit_tokens") / seconds : 0;
    double moved = seconds > 0 && bytes_per_token > 0 ? bytes_moved / bytes_per_token / seconds
                                                      : 0;
    json_object_set_new(storage, "tiers", tiers);
    json_object_set_new(storage, "cached_tokens_per_s", json_real(cached));
    json_object_set_new(storage, "storage_throughput_tokens_per_s", json_real(moved));
    json_object_set_new(mlperf, "storage_throughput_tokens_per_sec", json_real(moved));
    json_object_set(mlperf, "cache_hit_rate", json_object_get(metrics, "hit_rate_with_tiers"));
    json_object_set_new(storage, "mlperf", mlperf);
    return storage;
}

/* ---------- assess: ---------- */

const kvio_opt_t kvio_assess_options[] = {
    {.key = "mlperf", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_assess_config_t, mlperf),
     .default_value = "false",
     .help = "MLPerf Storage kv-cache.py's latency profile for every threshold left 0: storage "
             "write P95 < 500 ms, read P95 < 200 ms, CPU P95 < 150 ms, hit rate > 30 %"},
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

json_t *kvio_run_assess(const kvio_workload_t *workload, const json_t *storage,
                        const json_t *metrics)
{
    const kvio_assess_config_t *assess = &workload->assess;
    double write_ms = assess->storage_write_p95_ms, read_ms = assess->storage_read_p95_ms;
    double cpu_ms = assess->cpu_p95_ms, hit_rate = assess->hit_rate;
    if (assess->mlperf) {
        write_ms = write_ms > 0 ? write_ms : 500;
        read_ms = read_ms > 0 ? read_ms : 200;
        cpu_ms = cpu_ms > 0 ? cpu_ms : 150;
        hit_rate = hit_rate > 0 ? hit_rate : 0.3;
    }
    if (write_ms <= 0 && read_ms <= 0 && cpu_ms <= 0 && hit_rate <= 0)
        return NULL;
    const json_t *mlperf = json_object_get(storage, "mlperf");
    json_t *criteria = json_array();
    char name[96];
    snprintf(name, sizeof(name), "Storage Tier Write Device P95 < %gms", write_ms);
    criterion(criteria, name, write_ms, figure_of(mlperf, "nvme_write_p95_ms"), "ms", true);
    snprintf(name, sizeof(name), "Storage Tier Read Device P95 < %gms", read_ms);
    criterion(criteria, name, read_ms, figure_of(mlperf, "nvme_read_p95_ms"), "ms", true);
    /* kv-cache.py takes one P95 over the CPU tier's reads and writes
     * together; the larger of the two bounds it from above. */
    double cpu = fmax(figure_of(mlperf, "cpu_read_p95_ms"), figure_of(mlperf, "cpu_write_p95_ms"));
    snprintf(name, sizeof(name), "CPU RAM P95 < %gms", cpu_ms);
    criterion(criteria, name, cpu_ms, cpu, "ms", true);
    snprintf(name, sizeof(name), "Cache Hit Rate > %g%%", hit_rate * 100);
    criterion(criteria, name, hit_rate, figure_of(metrics, "hit_rate_with_tiers"), "ratio",
              false);
    size_t passed = 0;
    for (size_t i = 0; i < json_array_size(criteria); i++)
        passed += json_is_true(json_object_get(json_array_get(criteria, i), "passed"));
    size_t total = json_array_size(criteria);
    return json_pack("{s:s, s:o, s:I, s:I, s:b}", "profile",
                     assess->mlperf ? "mlperf latency" : "custom", "criteria", criteria,
                     "passed_count", (json_int_t)passed, "total_count", (json_int_t)total,
                     "passed", total > 0 && passed == total);
}
