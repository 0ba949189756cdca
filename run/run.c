/* kvio_run: checks everything the workload needs (model, GPU, KV capacity,
 * stream or trace) before creating the results directory, runs the serve
 * ranks, and writes summary.json (schema version, effective config, times,
 * which parts ran, complete flag, metrics) and a table on stdout. */
#include "run/run_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/clock.h"
#include "kvio/cost.h"
#include "kvio/kvcache.h"
#include "kvio/log.h"
#include "kvio/redis.h"
#include "kvio/results.h"
#include "kvio/sysinfo.h"
#include "kvio/tier.h"

/* The parts of a run and whether this build runs them yet. */
typedef struct run_part {
    const char *name;
    bool ran;
    const char *note;
} run_part_t;

static json_t *parts_json(const run_part_t *parts, size_t count)
{
    json_t *array = json_array();
    for (size_t i = 0; i < count; i++) {
        json_t *part = json_object();
        json_object_set_new(part, "name", json_string(parts[i].name));
        json_object_set_new(part, "ran", json_boolean(parts[i].ran));
        json_object_set_new(part, "note", json_string(parts[i].note));
        json_array_append_new(array, part);
    }
    return array;
}

static double metric(const json_t *metrics, const char *key, const char *field)
{
    const json_t *value = json_object_get(metrics, key);
    if (field != NULL)
        value = json_object_get(value, field);
    return json_number_value(value);
}

static void add_latency_row(kvio_table_t *table, const json_t *metrics, const char *key)
{
    char mean[32], p50[32], p90[32], p99[32];
    snprintf(mean, sizeof(mean), "%.2f", metric(metrics, key, "mean"));
    snprintf(p50, sizeof(p50), "%.2f", metric(metrics, key, "p50"));
    snprintf(p90, sizeof(p90), "%.2f", metric(metrics, key, "p90"));
    snprintf(p99, sizeof(p99), "%.2f", metric(metrics, key, "p99"));
    kvio_table_add_row(table, key, mean, p50, p90, p99, NULL);
}

/* assess: PASS or FAIL, how many criteria held, the first that did not. */
static void add_assessment_row(kvio_table_t *table, const json_t *assessment)
{
    if (assessment == NULL)
        return;
    char text[256];
    int at = snprintf(text, sizeof(text), "%s, %lld of %lld criteria",
                      json_is_true(json_object_get(assessment, "passed")) ? "PASS" : "FAIL",
                      (long long)json_integer_value(json_object_get(assessment, "passed_count")),
                      (long long)json_integer_value(json_object_get(assessment, "total_count")));
    size_t index;
    const json_t *criterion;
    json_array_foreach(json_object_get(assessment, "criteria"), index, criterion) {
        if (json_is_true(json_object_get(criterion, "passed")) || at >= (int)sizeof(text))
            continue;
        snprintf(text + at, sizeof(text) - (size_t)at, "; failed: %s (%.3g)",
                 json_string_value(json_object_get(criterion, "name")),
                 metric(criterion, "actual", NULL));
        break;
    }
    kvio_table_add_row(table, "assessment", text, NULL);
}

/* From summary.json: one row per tier of the storage block, its read and
 * write bandwidth and P95 latency; the tokens per second; the assessment. */
static void add_storage_rows(kvio_table_t *table, const json_t *summary)
{
    const json_t *storage = json_object_get(summary, "storage");
    size_t index;
    const json_t *tier;
    json_array_foreach(json_object_get(storage, "tiers"), index, tier) {
        char label[48], text[160];
        snprintf(label, sizeof(label), "tier %zu (%s)", index,
                 json_string_value(json_object_get(tier, "kind")));
        snprintf(text, sizeof(text),
                 "read %.2f GB/s p95 %.2f ms, write %.2f GB/s p95 %.2f ms, QD %.1f/%.1f",
                 metric(tier, "read_gbps", NULL), metric(tier, "read_latency_ms", "p95"),
                 metric(tier, "write_gbps", NULL), metric(tier, "write_latency_ms", "p95"),
                 metric(tier, "read_queue_depth", NULL), metric(tier, "write_queue_depth", NULL));
        kvio_table_add_row(table, label, text, NULL);
    }
    if (storage != NULL) {
        char text[96];
        snprintf(text, sizeof(text), "%.0f tok/s cached, %.0f tok/s moved",
                 metric(storage, "cached_tokens_per_s", NULL),
                 metric(storage, "storage_throughput_tokens_per_s", NULL));
        kvio_table_add_row(table, "storage throughput", text, NULL);
    }
    add_assessment_row(table, json_object_get(summary, "assessment"));
}

/* The load: the rate offered, or a closed loop's users (it offers what it
 * is served). */
static void add_load_row(kvio_table_t *table, const kvio_workload_t *workload,
                         const json_t *metrics)
{
    char text[64];
    if (workload->stream.users > 0) {
        snprintf(text, sizeof(text), "%lld, each awaiting its answer",
                 (long long)workload->stream.users);
        kvio_table_add_row(table, "users (closed loop)", text, NULL);
    } else if (metric(metrics, "offered_rate", NULL) > 0) {
        snprintf(text, sizeof(text), "%.2f req/s", metric(metrics, "offered_rate", NULL));
        kvio_table_add_row(table, "offered rate", text, NULL);
    }
}

/* The prefix hit rate, and with tiers the share of prompt tokens they
 * served too. */
static void hit_rate_text(const json_t *metrics, char *text_p, size_t text_len)
{
    if (metric(metrics, "tier_hit_tokens", NULL) > 0)
        snprintf(text_p, text_len, "%.2f %% in the pool, %.2f %% with the tiers",
                 100 * metric(metrics, "hit_rate", NULL),
                 100 * metric(metrics, "hit_rate_with_tiers", NULL));
    else
        snprintf(text_p, text_len, "%.2f %%", 100 * metric(metrics, "hit_rate", NULL));
}

/* Prefill/decode disaggregation: where prompts hit, the KV transfers, TTFT
 * in its parts, and each pool's utilisation. */
static void add_pd_rows(kvio_table_t *table, const json_t *pd)
{
    char hits[96], moved[160], parts[160], busy[64];
    snprintf(hits, sizeof(hits), "%.2f %% on the prefill ranks, %.2f %% on the decode ranks",
             100 * metric(pd, "prefill_hit_rate", NULL),
             100 * metric(pd, "decode_hit_rate", NULL));
    kvio_table_add_row(table, "prefix hit rate", hits, NULL);
    const json_t *ms = json_object_get(pd, "transfer_ms");
    int used = snprintf(moved, sizeof(moved),
                        "%.0f of %.0f requests, %.2f GB, p50 %.2f ms, p99 %.2f ms",
                        metric(pd, "transfers", NULL), metric(pd, "handoffs", NULL),
                        metric(pd, "transfer_bytes", NULL) / 1e9, metric(ms, "p50", NULL),
                        metric(ms, "p99", NULL));
    if (metric(pd, "local_prefills", NULL) > 0 && used > 0 && (size_t)used < sizeof(moved))
        snprintf(moved + used, sizeof(moved) - (size_t)used, "; %.0f prefilled on decode",
                 metric(pd, "local_prefills", NULL));
    kvio_table_add_row(table, "KV transfers", moved, NULL);
    const json_t *mean = json_object_get(pd, "mean_ttft_parts_ms");
    snprintf(parts, sizeof(parts), "queue %.2f + prefill %.2f + decode queue %.2f + "
             "transfer %.2f + first step %.2f",
             metric(mean, "prefill_queue", NULL), metric(mean, "prefill", NULL),
             metric(mean, "decode_queue", NULL), metric(mean, "kv_transfer", NULL),
             metric(mean, "first_decode_step", NULL));
    kvio_table_add_row(table, "mean TTFT ms", parts, NULL);
    snprintf(busy, sizeof(busy), "prefill %.1f %%, decode %.1f %%",
             100 * metric(pd, "prefill_utilization", NULL),
             100 * metric(pd, "decode_utilization", NULL));
    kvio_table_add_row(table, "busy", busy, NULL);
}

static void print_table(const kvio_workload_t *workload, const json_t *summary,
                        const json_t *metrics, const char *results_dir, bool complete,
                        bool serving)
{
    kvio_table_t *table = NULL;
    /* What ran, where: the mode, the model on its GPU, the ranks. */
    char title[384], ranks[96];
    int64_t serve_ranks = workload->ranks.serve > 0 ? workload->ranks.serve : 1;
    if (workload->ranks.prefill > 0)
        snprintf(ranks, sizeof(ranks), "%lld prefill + %lld decode ranks",
                 (long long)workload->ranks.prefill, (long long)workload->ranks.decode);
    else if (kvio_updates_wanted(workload))
        snprintf(ranks, sizeof(ranks), "%lld train + %lld serve ranks",
                 (long long)workload->ranks.train, (long long)serve_ranks);
    else
        snprintf(ranks, sizeof(ranks), "%lld serve rank%s", (long long)serve_ranks,
                 serve_ranks == 1 ? "" : "s");
    snprintf(title, sizeof(title), "kvio run %s (%s: %s on %s, %s%s)", workload->name,
             workload->mode == KVIO_MODE_EMULATE ? "emulate" : "simulate",
             workload->model.preset != NULL ? workload->model.preset : "a custom model",
             workload->gpu.preset != NULL ? workload->gpu.preset : "a custom GPU", ranks,
             complete ? "" : "; INCOMPLETE");
    if (kvio_table_create(title, &table) != KVIO_OK)
        return;
    char text[6][64];
    char usage[64], au[64], simulated[64], executor_text[128], loss_text[96];
    if (serving) {
        kvio_table_add_row(table, "latency", "mean", "p50", "p90", "p99", NULL);
        add_latency_row(table, metrics, "ttft_ms");
        add_latency_row(table, metrics, "tpot_ms");
        add_latency_row(table, metrics, "itl_ms");
        add_latency_row(table, metrics, "e2el_ms");
        kvio_table_print(table, stdout);
        kvio_table_destroy(table);
        if (kvio_table_create("", &table) != KVIO_OK)
            return;
        snprintf(text[0], sizeof(text[0]), "%.0f", metric(metrics, "completed", NULL));
        kvio_table_add_row(table, "requests completed", text[0], NULL);
        snprintf(text[1], sizeof(text[1]), "%.2f req/s", metric(metrics, "request_throughput", NULL));
        kvio_table_add_row(table, "request throughput", text[1], NULL);
        add_load_row(table, workload, metrics);
        snprintf(text[2], sizeof(text[2]), "%.1f tok/s", metric(metrics, "output_throughput", NULL));
        kvio_table_add_row(table, "output throughput", text[2], NULL);
        if (json_object_get(metrics, "goodput") != NULL) {
            snprintf(text[3], sizeof(text[3]), "%.2f req/s", metric(metrics, "goodput", NULL));
            kvio_table_add_row(table, "goodput", text[3], NULL);
        }
        if (json_object_get(metrics, "pd") != NULL) {
            add_pd_rows(table, json_object_get(metrics, "pd"));
        } else {
            hit_rate_text(metrics, text[4], sizeof(text[4]));
            kvio_table_add_row(table, "prefix hit rate", text[4], NULL);
        }
        snprintf(text[5], sizeof(text[5]), "%.0f", metric(metrics, "preemptions", NULL));
        kvio_table_add_row(table, "preemptions", text[5], NULL);
        snprintf(usage, sizeof(usage), "%.1f %% mean, %.1f %% max",
                 100 * metric(metrics, "kv_usage_mean", NULL),
                 100 * metric(metrics, "kv_usage_max", NULL));
        kvio_table_add_row(table, "KV usage", usage, NULL);
        double stall = metric(metrics, "io_stall_fraction", NULL);
        if (stall > 0.0005)
            snprintf(au, sizeof(au), "%.1f %% (%.1f %% waiting on swap and tier I/O)",
                     100 * metric(metrics, "accelerator_utilization", NULL), 100 * stall);
        else
            snprintf(au, sizeof(au), "%.1f %%",
                     100 * metric(metrics, "accelerator_utilization", NULL));
        kvio_table_add_row(table, "accelerator utilization", au, NULL);
        add_storage_rows(table, summary);
        if (json_object_get(metrics, "simulated_s") != NULL) {
            snprintf(simulated, sizeof(simulated), "%.2f s", metric(metrics, "simulated_s", NULL));
            kvio_table_add_row(table, "simulated time", simulated, NULL);
        }
        const json_t *executor = json_object_get(metrics, "executor");
        if (executor != NULL) {
            snprintf(executor_text, sizeof(executor_text),
                     "p99 %.1f us (%.2f %%), engine overhead %.2f %%",
                     json_number_value(json_object_get(executor, "timing_error_p99_us")),
                     json_number_value(json_object_get(executor, "timing_error_p99_pct")),
                     json_number_value(json_object_get(executor, "engine_overhead_pct")));
            kvio_table_add_row(table, "iteration timing error", executor_text, NULL);
        }
        if (json_object_get(metrics, "cumulative_inference_loss") != NULL) {
            snprintf(loss_text, sizeof(loss_text), "%.2f (mean %.4f per request)",
                     metric(metrics, "cumulative_inference_loss", NULL),
                     metric(metrics, "mean_inference_loss", NULL));
            kvio_table_add_row(table, "cumulative inference loss", loss_text, NULL);
        }
    }
    const json_t *model = json_object_get(metrics, "model_updates");
    char latency[128], bandwidth[64], activated[128];
    if (model != NULL) {
        const json_t *update_latency = json_object_get(model, "update_latency_ms");
        snprintf(latency, sizeof(latency), "mean %.3f  p50 %.3f  p99 %.3f  max %.3f",
                 json_number_value(json_object_get(update_latency, "mean")),
                 json_number_value(json_object_get(update_latency, "p50")),
                 json_number_value(json_object_get(update_latency, "p99")),
                 json_number_value(json_object_get(update_latency, "max")));
        kvio_table_add_row(table, "update latency ms", latency, NULL);
        snprintf(bandwidth, sizeof(bandwidth), "%.3f",
                 json_number_value(json_object_get(json_object_get(model, "bandwidth_gbps"), "mean")));
        kvio_table_add_row(table, "update bandwidth GB/s", bandwidth, NULL);
        json_int_t after = json_integer_value(json_object_get(model, "activated_after_serving"));
        char after_text[48] = "";
        if (after > 0)
            snprintf(after_text, sizeof(after_text), " (%lld after serving)", (long long)after);
        snprintf(activated, sizeof(activated), "%lld of %lld%s, %lld bad checksums",
                 (long long)json_integer_value(json_object_get(model, "updates_activated")),
                 (long long)json_integer_value(json_object_get(model, "updates_received")),
                 after_text,
                 (long long)json_integer_value(json_object_get(model, "checksum_mismatches")));
        kvio_table_add_row(table, "updates activated", activated, NULL);
    }
    const json_t *interference = json_object_get(metrics, "update_interference");
    const json_t *cost = json_object_get(metrics, "update_cost");
    char interference_text[160], interference_more[96], cost_lines[3][96];
    if (cost != NULL) {
        kvio_control_cost_lines(cost, cost_lines);
        kvio_table_add_row(table, "update cost vs control", cost_lines[0], NULL);
        kvio_table_add_row(table, "", cost_lines[1], NULL);
        kvio_table_add_row(table, "", cost_lines[2], NULL);
    } else if (interference != NULL &&
        json_integer_value(json_object_get(interference, "updates_measured")) > 0) {
        snprintf(interference_text, sizeof(interference_text), "TTFT p99 x%.2f, TPOT p99 x%.2f",
                 json_number_value(json_object_get(interference, "ttft_p99_ratio")),
                 json_number_value(json_object_get(interference, "tpot_p99_ratio")));
        snprintf(interference_more, sizeof(interference_more),
                 "hit rate %.1f %% -> %.1f %% (%.0f s windows)",
                 100 * json_number_value(json_object_get(interference, "hit_rate_before")),
                 100 * json_number_value(json_object_get(interference, "hit_rate_after")),
                 json_number_value(json_object_get(interference, "window_s")));
        kvio_table_add_row(table, "trend (no control)", interference_text, NULL);
        kvio_table_add_row(table, "", interference_more, NULL);
    }
    const json_t *during = json_object_get(interference, "during_updates");
    if (cost == NULL && during != NULL) {
#define GAP(side, key)                                                                    \
    json_number_value(json_object_get(                                                   \
        json_object_get(json_object_get(during, "decode_gap_ms"), side), key))
        snprintf(interference_text, sizeof(interference_text),
                 "decode gap p99 %.2f ms (%.0f), outside %.2f ms", GAP("during", "p99"),
                 GAP("during", "gaps"), GAP("outside", "p99"));
#undef GAP
        kvio_table_add_row(table, "during updates", interference_text, NULL);
    }
    json_t *modelled = kvio_run_modelled(workload, metrics);
    for (size_t i = 0; i < json_array_size(modelled); i++)
        kvio_table_add_row(table, i == 0 ? "modelled" : "",
                           json_string_value(json_object_get(json_array_get(modelled, i),
                                                             "brief")),
                           NULL);
    kvio_table_add_row(table, "results", results_dir, NULL);
    kvio_table_print(table, stdout);
    json_decref(modelled);
    kvio_table_destroy(table);
}

/* Simulate mode's start: t0 is the run's start, every rank is ready at once
 * (train ranks first, then serve ranks). */
static void simulate_start(const kvio_workload_t *workload, uint64_t start_ns, json_t *start)
{
    json_t *ranks = json_array();
    int num_train = kvio_updates_wanted(workload) ? (int)workload->ranks.train : 0;
    for (int rank = 0; rank < num_train + (int)workload->ranks.serve; rank++)
        json_array_append_new(ranks, kvio_start_rank_json(rank, rank < num_train ? "train"
                                                                                  : "serve", 0));
    kvio_start_json_set(start, (int64_t)start_ns, ranks);
}

/* The fields summary.json opens with, in both the provisional and the
 * final one; error may be NULL. The caller owns the object. */
/* host: the host block, taken once when the run starts (its load average
 * then). */
/* An argument as results may show it: a URL's password becomes ***. */
static json_t *redacted(const char *argument)
{
    size_t size = strlen(argument) + 4;
    char *text = malloc(size);
    if (text == NULL)
        return json_string("");
    kvio_url_redact(argument, text, size);
    json_t *value = json_string(text);
    free(text);
    return value;
}

static json_t *summary_head(const kvio_workload_t *workload, const kvio_run_options_t *options,
                            json_t *host, uint64_t start_ns, bool complete, const char *error)
{
    char start_text[64];
    kvio_format_utc(start_ns, start_text, sizeof(start_text));
    json_t *summary = json_object();
    json_object_set_new(summary, "schema_version", json_integer(KVIO_SCHEMA_VERSION));
    json_object_set_new(summary, "kvio_version", json_string(KVIO_VERSION));
    json_object_set_new(summary, "name", json_string(workload->name));
    json_object_set_new(summary, "source", json_string(options->source ? options->source : ""));
    /* How to run it again: the command as typed and its overrides (the
     * config below is the effective one; kvio run DIR/summary.json reruns it). */
    json_t *command = json_array();
    if (options->argv != NULL)
        json_array_append_new(command, json_string("kvio"));
    for (int i = 0; options->argv != NULL && i < options->argc; i++)
        json_array_append_new(command, redacted(options->argv[i]));
    json_object_set_new(summary, "command", command);
    json_t *overrides = json_array();
    for (size_t i = 0; options->overrides != NULL && i < options->num_overrides; i++)
        json_array_append_new(overrides, redacted(options->overrides[i]));
    json_object_set_new(summary, "overrides", overrides);
    json_object_set_new(summary, "complete", json_boolean(complete));
    if (error != NULL)
        json_object_set_new(summary, "error", json_string(error));
    json_object_set_new(summary, "start_time", json_string(start_text));
    json_object_set(summary, "host", host);
    json_object_set_new(summary, "build", kvio_build_json());
    return summary;
}

/* The latency and throughput keys `vllm bench serve` writes, from kvio's
 * serving metrics: mean/median/std/p99 of ttft, tpot, itl and e2el (ms),
 * request_goodput null without an SLO (vLLM reports none then). */
/* The scheduling behaviour the run had, against vLLM v1's defaults: the
 * profile is "vllm" when every one of them is vLLM's, else "custom" (each
 * key says what it was). */
static json_t *scheduling_json(const kvio_workload_t *workload)
{
    static const char *const free_orders[] = {"append", "prepend_unhashed"};
    static const char *const resets[] = {"when_idle", "preempt_all", "running"};
    static const char *const preemptions[] = {"recompute", "swap"};
    const kvio_engine_config_t *engine = &workload->serve.engine;
    const kvio_kvcache_section_t *kvcache = &workload->serve.kvcache;
    int reset = workload->update.on_activate.reset;
    bool vllm = engine->scheduler_reserve_full_isl && engine->watermark == 0 &&
                kvcache->prefix_caching && kvcache->free_order == 1 &&
                engine->preemption == KVIO_PREEMPT_RECOMPUTE && reset != KVIO_RESET_RUNNING;
    /* Batch limits left at 0 take vLLM's for the GPU class. */
    kvio_gpu_t gpu = workload->gpu;
    char ignored[256];
    kvio_engine_batch_defaults_t limits = kvio_serve_batch_limits(
        engine, kvio_gpu_resolve(&gpu, ignored, sizeof(ignored)) == KVIO_OK ? &gpu : NULL);
    return json_pack("{s:s, s:I, s:I, s:b, s:f, s:b, s:s, s:s, s:s}", "profile",
                     vllm ? "vllm" : "custom", "max_num_seqs", (json_int_t)limits.max_num_seqs,
                     "max_num_batched_tokens", (json_int_t)limits.max_num_batched_tokens,
                     "scheduler_reserve_full_isl", engine->scheduler_reserve_full_isl,
                     "watermark", engine->watermark, "prefix_caching", kvcache->prefix_caching,
                     "free_order", free_orders[kvcache->free_order == 1],
                     "preemption", preemptions[engine->preemption == KVIO_PREEMPT_SWAP],
                     "reset", resets[reset >= 0 && reset <= 2 ? reset : 0]);
}

/* Written when the run starts and replaced (atomically) by the real one at
 * its end: a rank 0 killed before then (SIGKILL, or mpirun's grace running
 * out) still leaves an honest summary.json saying the run did not finish. */
static kvio_status_t write_provisional_summary(const kvio_workload_t *workload,
                                               const kvio_run_options_t *options,
                                               kvio_results_t *results, json_t *host,
                                               uint64_t start_ns, char *error_p,
                                               size_t error_len)
{
    json_t *summary = summary_head(workload, options, host, start_ns, false,
                                   "the run did not end: kvio is still running, or was killed "
                                   "before it wrote its results");
    json_object_set_new(summary, "config", kvio_config_to_json(kvio_workload_options, workload));
    json_object_set_new(summary, "parts", json_array());
    json_object_set_new(summary, "metrics", json_object());
    kvio_status_t status = kvio_results_write_json(results, "summary.json", summary, error_p,
                                                   error_len);
    json_decref(summary);
    return status;
}

/* A closed loop's requests looked at before the run. */
#define CLOSED_LOOP_LOOKS 100000

/* A request needs the KV of its prompt and of every output token but the
 * last (which is never fed back): one that needs more than the whole cache
 * could never start, on any engine. Refused before the run, not found an
 * hour into it. A closed loop's count is left unknown (0). */
static kvio_status_t check_requests_fit(const kvio_workload_t *workload, kvio_stream_t *stream,
                                        uint32_t blocks, uint64_t *requests_p,
                                        uint64_t *stream_blocks_p, char *error_p,
                                        size_t error_len)
{
    *requests_p = 0;
    *stream_blocks_p = 0;
    uint64_t block_size = (uint64_t)workload->serve.kvcache.block_size;
    uint64_t capacity = (uint64_t)blocks * block_size;
    const char *trace = workload->stream.trace.path;
    const kvio_request_t *request;
    kvio_status_t status;
    /* A closed loop's users are answered at once here, and its first
     * requests are looked at: how many it makes depends on the serving. */
    bool closed_loop = kvio_stream_closed_loop(stream);
    uint64_t looked = 0;
    while ((status = kvio_stream_next(stream, &request)) == KVIO_OK && request != NULL) {
        if (closed_loop && ++looked > CLOSED_LOOP_LOOKS)
            break;
        kvio_stream_finished(stream, request->id, request->arrival_ns);
        (*requests_p)++;
        uint64_t output = request->output_tokens;
        if (request->max_tokens > 0 && output > request->max_tokens)
            output = request->max_tokens;
        uint64_t tokens = request->input_tokens + (output > 0 ? output - 1 : 0);
        *stream_blocks_p += (tokens + block_size - 1) / block_size + 1;
        if (tokens <= capacity)
            continue;
        snprintf(error_p, error_len,
                 "%s%s%srequest %llu needs the KV of %llu tokens (%u input + %llu output - 1), "
                 "%llu blocks of %llu, but serve.kvcache holds %u blocks (%llu tokens): no "
                 "engine could ever start it; raise serve.kvcache.blocks or capacity, or "
                 "shorten the stream's lengths",
                 trace != NULL && trace[0] != '\0' ? "stream.trace.path " : "stream: ",
                 trace != NULL && trace[0] != '\0' ? trace : "",
                 trace != NULL && trace[0] != '\0' ? ": " : "",
                 (unsigned long long)request->id, (unsigned long long)tokens,
                 request->input_tokens, (unsigned long long)output,
                 (unsigned long long)((tokens + block_size - 1) / block_size),
                 (unsigned long long)block_size, blocks, (unsigned long long)capacity);
        return KVIO_ERR_CONFIG;
    }
    if (closed_loop) {
        *requests_p = 0;
        *stream_blocks_p = UINT64_MAX;
    }
    return status;
}

/* Prefill/decode disaggregation: what kvio builds of it. */
static kvio_status_t check_pd(const kvio_workload_t *workload, char *error_p, size_t error_len)
{
    const char *why = NULL;
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    const kvio_pd_config_t *pd = &workload->pd;
    if (emulate && pd->layerwise)
        why = "pd.layerwise in emulate; the KV moves whole once the prefill has ended, "
              "layer-wise transfers are modelled in mode: simulate";
    else if (emulate && !kvio_choice_is(&pd->router.policy, "round_robin") &&
             !kvio_choice_is(&pd->router.policy, "least_loaded"))
        why = "pd.router in emulate is round_robin or least_loaded (what a prefill rank knows "
              "of the decode ranks); the others route in mode: simulate";
    else if (emulate && workload->pd.local_prefill_tokens > 0)
        why = "pd.local_prefill_tokens in emulate; a prefill rank does not see the decode "
              "ranks' caches, conditional disaggregation is modelled in mode: simulate";
    else if (emulate && workload->ranks.client > 0)
        why = "ranks.client: 1; the prefill ranks take their shares of the stream themselves";
    else if (!workload->serve.kvcache.prefix_caching)
        why = "serve.kvcache.prefix_caching: false; a decode rank finds the prompt's blocks "
              "by their hashes, as its prefix cache does (set it true)";
    else if (workload->serve.kvcache.chunk_tokens > 0)
        why = "serve.kvcache.chunk_tokens is set; the KV moves block by block (leave it 0)";
    if (why == NULL)
        return KVIO_OK;
    snprintf(error_p, error_len, "ranks.prefill: %lld, ranks.decode: %lld: %s",
             (long long)workload->ranks.prefill, (long long)workload->ranks.decode, why);
    return KVIO_ERR_CONFIG;
}

/* Emulate: what each tier backend needs before the ranks start (a file
 * tier's directory, or its parent), checked once, here. */
static kvio_status_t check_tiers(const kvio_workload_t *workload, char *error_p,
                                 size_t error_len)
{
    const kvio_opt_list_t *tiers = &workload->serve.kvcache.tiers;
    uint32_t num_ranks = workload->ranks.serve > 0 ? (uint32_t)workload->ranks.serve : 1;
    for (size_t i = 0; i < tiers->count; i++) {
        char path[64];
        snprintf(path, sizeof(path), "serve.kvcache.tiers[%zu]", i);
        kvio_status_t status = kvio_tier_preflight((const kvio_tier_config_t *)tiers->items + i,
                                                   num_ranks, path, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* weight_sync in emulate mode moves real buckets over ucx between host
 * buffers, full weights in the serving layout: what it does not build is
 * refused naming the key, and the model's tensors must fit train.bytes. */
static kvio_status_t check_emulated_sync(const kvio_workload_t *workload, char *error_p,
                                         size_t error_len)
{
    const kvio_sync_config_t *sync = &workload->weight_sync;
    const kvio_xfer_config_t *transport = &workload->train.transport;
    static const char *const granularities[] = {"off", "whole", "bucket", "tensor"};
    const char *granularity = granularities[sync->granularity];
    const char *refused = NULL;
    char why[256] = "";
    kvio_delta_t delta = kvio_updates_sync_delta(workload);
    if (!kvio_choice_is(&transport->kind, "ucx")) {
        refused = "train.transport.kind";
        snprintf(why, sizeof(why), "is %s; emulate mode moves real buckets over ucx only "
                 "(set train.transport.kind: ucx, or mode: simulate)",
                 kvio_choice_name(&transport->kind));
    } else if (transport->fanout == KVIO_XFER_FANOUT_CHAIN) {
        refused = "train.transport.fanout";
        snprintf(why, sizeof(why), "is chain; with buckets the route is weight_sync.topology "
                 "(set fanout: sequential and topology: chain)");
    } else if (workload->device.weights == KVIO_WEIGHTS_CUDA) {
        refused = "device.weights";
        snprintf(why, sizeof(why), "is cuda; emulate mode stages and reloads buckets in host "
                 "memory (set device.weights: host, or mode: simulate)");
    } else if (sync->topology == KVIO_SYNC_P2P) {
        refused = "weight_sync.topology";
        snprintf(why, sizeof(why), "is p2p; emulate mode sends from the trainer to every serve "
                 "rank, P2P from serving peers is modelled in simulate mode only (set topology: "
                 "tree, or mode: simulate)");
    } else if (delta.fraction > 0 && delta.element == 0) {
        refused = "weight_sync.delta";
        snprintf(why, sizeof(why), "is %g, but the model's weights are not 1, 2, 4 or 8 bytes "
                 "per element; emulate mode changes and sends whole elements (set "
                 "model.weight_dtype_bytes to 1, 2, 4 or 8, delta: 0, or mode: simulate)",
                 sync->delta_fraction);
    } else if ((sync->train_tp > 0 && sync->train_tp != workload->cost.tensor_parallel) ||
               sync->train_pp != 1) {
        refused = "weight_sync.train_tp";
        snprintf(why, sizeof(why), "or train_pp differs from the serving layout; resharding "
                 "is modelled in simulate mode only (leave train_tp: 0 and train_pp: 1)");
    }
    if (refused != NULL) {
        snprintf(error_p, error_len, "weight_sync.granularity: %s in emulate mode: %s %s",
                 granularity, refused, why);
        return KVIO_ERR_CONFIG;
    }
    kvio_sync_plan_t plan;
    kvio_status_t status = kvio_updates_sync_buckets(workload, &plan, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* index_value's indices are 4 bytes: a bucket has at most 2^32 elements. */
    for (size_t b = 0; b < plan.num_buckets && status == KVIO_OK; b++) {
        if (delta.fraction <= 0 || delta.encoding != KVIO_DELTA_INDEX_VALUE ||
            plan.buckets[b].bytes / delta.element <= UINT32_MAX)
            continue;
        snprintf(error_p, error_len, "weight_sync.delta_encoding: index_value in emulate mode: "
                 "bucket %zu has %llu elements, more than 4-byte indices reach (set "
                 "weight_sync.bucket_size, or delta_encoding: bitmap)", b,
                 (unsigned long long)(plan.buckets[b].bytes / delta.element));
        status = KVIO_ERR_CONFIG;
    }
    kvio_sync_plan_free(&plan);
    return status;
}

static bool weight_sync_without_updates(const kvio_workload_t *workload)
{
    return workload->weight_sync.granularity != KVIO_SYNC_OFF && !kvio_updates_wanted(workload);
}

/* The cost model on the smallest and the largest batch a serve rank can
 * run (one decode token; a full token budget of prefill) must give an
 * iteration of more than 0 and less than 10^6 s, as the engine requires of
 * every iteration: refused here, by validate too, instead of at the first
 * iteration of the run. */
static kvio_status_t check_cost(const kvio_workload_t *workload, const kvio_model_t *model,
                                const kvio_gpu_t *gpu, char *error_p, size_t error_len)
{
    /* Tensor parallelism splits the attention heads evenly, and the KV
     * heads too, or replicates them (vLLM's rule). */
    int64_t tp = workload->cost.tensor_parallel;
    if (tp > 1 && (model->heads % tp != 0 ||
                   (model->kv_heads % tp != 0 && tp % model->kv_heads != 0))) {
        snprintf(error_p, error_len,
                 "cost.tensor_parallel: %lld does not split the model's %lld attention heads "
                 "and %lld KV heads evenly (each must be a multiple of it, or the KV heads a "
                 "divisor of it)", (long long)tp, (long long)model->heads,
                 (long long)model->kv_heads);
        return KVIO_ERR_CONFIG;
    }
    kvio_cost_t *cost = NULL;
    char why[512] = "";
    kvio_status_t status = kvio_cost_create(&workload->cost, model, gpu, &cost, why, sizeof(why));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "cost: %s", why[0] != '\0' ? why : kvio_strerror(status));
        return status;
    }
    int64_t budget = kvio_serve_batch_limits(&workload->serve.engine, gpu).max_num_batched_tokens;
    kvio_batch_t smallest = {0}, largest = {0};
    kvio_batch_add_decode(&smallest, 1);
    kvio_batch_add_prefill(&largest, (uint64_t)budget, 0);
    const kvio_batch_t *batches[2] = {&smallest, &largest};
    const char *names[2] = {"one decode token", "a full token budget of prefill"};
    /* A form may charge nothing for a decode (a linear fit of prefill-only
     * samples): refused when no batch takes any time, or one takes too long. */
    double times[2];
    for (int b = 0; b < 2; b++) {
        kvio_cost_breakdown_t breakdown;
        kvio_cost_iteration(cost, batches[b], &breakdown);
        times[b] = breakdown.time_s;
    }
    int bad = !(times[0] < 1e6) ? 0 : !(times[1] < 1e6) ? 1 : !(times[1] > 0) ? 1 : -1;
    if (bad >= 0) {
        snprintf(error_p, error_len,
                 "cost: an iteration of %s (%lld tokens) takes %.6g s by the cost model; it "
                 "must take more than 0 and less than 1e6 s (check cost.* and gpu.*)",
                 names[bad], bad == 0 ? 1LL : (long long)budget, times[bad]);
        status = KVIO_ERR_CONFIG;
    }
    kvio_cost_destroy(cost);
    return status;
}

/* Simulate: every serve rank's pool (records, index, free queue, eviction
 * state: no KV bytes) and its tiers' indexes must fit the memory available
 * (at most 80 % of it), checked before anything is allocated. A pool costs
 * what its blocks' use touches, and the stream's requests together use at
 * most stream_blocks (UINT64_MAX: unknown, every block). */
static kvio_status_t check_simulate_memory(const kvio_workload_t *workload,
                                           const kvio_model_t *model, uint32_t blocks,
                                           uint64_t stream_blocks, char *error_p,
                                           size_t error_len)
{
    uint64_t available = 0;
    char unused[128];
    if (kvio_mem_available(&available, unused, sizeof(unused)) != KVIO_OK)
        return KVIO_OK; /* unknown: no check */
    const kvio_kvcache_section_t *kvcache = &workload->serve.kvcache;
    uint64_t block_bytes = kvio_model_kv_bytes_per_token(model, workload->cost.tensor_parallel) *
                           (uint64_t)kvcache->block_size;
    uint64_t pool = kvio_kvcache_footprint(blocks + 1, kvcache->index, stream_blocks), tiers = 0;
    const kvio_tier_config_t *tier = kvcache->tiers.items;
    for (size_t t = 0; t < kvcache->tiers.count; t++)
        tiers += kvio_tier_index_footprint(tier[t].size, block_bytes);
    uint64_t ranks = workload->ranks.serve > 0 ? (uint64_t)workload->ranks.serve : 1;
    double needed = (double)(pool + tiers) * (double)ranks;
    if (needed <= (double)available * 0.8)
        return KVIO_OK;
    snprintf(error_p, error_len,
             "simulate: %llu serve rank(s) need %.2f GiB for their KV pools' bookkeeping "
             "(%.1f MiB each: %u blocks%s, plus %.1f MiB of tier index), but this machine has "
             "%.2f GiB available (at most 80 %% of it); set serve.kvcache.blocks or capacity, "
             "or fewer ranks.serve", (unsigned long long)ranks, needed / 1073741824.0,
             (double)pool / 1048576.0, blocks,
             stream_blocks < blocks ? ", not all of them used by the stream" : "",
             (double)tiers / 1048576.0, (double)available / 1073741824.0);
    return KVIO_ERR_CONFIG;
}

/* What the workload itself decides and a run would refuse: the model and
 * GPU presets, a KV cache that holds a block, the stream (a trace is read
 * whole) with every request fitting the cache, the file tiers' parents, the
 * ranks. The resolved model and GPU, and the stream ready to run from its
 * first request with its number of requests, are returned (stream_p may be
 * NULL). */
static kvio_status_t check_workload(const kvio_workload_t *workload, kvio_model_t *model_p,
                                    kvio_gpu_t *gpu_p, kvio_stream_t **stream_p,
                                    bool stream_served, uint64_t *requests_p, char *error_p,
                                    size_t error_len)
{
    bool updates = kvio_updates_wanted(workload);
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    bool coupled = kvio_updates_coupled(workload);
    *model_p = workload->model;
    *gpu_p = workload->gpu;
    *requests_p = 0;
    /* Under mpirun only an emulate run with model updates (its ranks on the
     * mpi runtime) uses the processes; any other run is one process, and
     * mpirun would start that many independent copies of it. */
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    bool local = workload->ranks.runtime != NULL && strcmp(workload->ranks.runtime, "local") == 0;
    if (world != NULL && atoi(world) > 1 && (!(updates && emulate) || local)) {
        snprintf(error_p, error_len,
                 "mpirun started %s processes, but this run (mode: %s%s) is one process: "
                 "start it without mpirun (only an emulate run with trainers and serve ranks "
                 "on ranks.runtime auto or mpi uses mpirun's processes)", world,
                 emulate ? "emulate" : "simulate",
                 local ? ", ranks.runtime: local" : updates ? "" : ", no trainers");
        return KVIO_ERR_CONFIG;
    }
    if (workload->ranks.client > 0 && updates && !coupled) {
        snprintf(error_p, error_len,
                 "ranks.client: 1 needs the coupled run (mode: emulate, train and serve ranks, "
                 "update.serving: engine); without trainers the client is a thread anyway");
        return KVIO_ERR_CONFIG;
    }
    if (workload->stream.users > 0 && emulate &&
        (workload->ranks.serve > 1 || workload->ranks.client > 0)) {
        snprintf(error_p, error_len,
                 "stream.users: a closed loop hears each answer where its stream is read; in "
                 "emulate that is one serve rank without a client rank (ranks.serve: %lld, "
                 "ranks.client: %lld); mode simulate routes users over several",
                 (long long)workload->ranks.serve, (long long)workload->ranks.client);
        return KVIO_ERR_CONFIG;
    }
    if (workload->ranks.prefill > 0 && check_pd(workload, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    if (workload->update.die_during_version > 0 &&
        workload->update.die_rank > workload->ranks.serve) {
        snprintf(error_p, error_len, "update.die_rank: %lld is no serve rank (they are 1..%lld: "
                 "ranks.serve); the fault would never happen", (long long)workload->update.die_rank,
                 (long long)workload->ranks.serve);
        return KVIO_ERR_CONFIG;
    }
    double percentiles[RUN_VLLM_PERCENTILES_MAX];
    size_t num_percentiles;
    if (run_vllm_percentiles(workload->metric_percentiles, percentiles, RUN_VLLM_PERCENTILES_MAX,
                             &num_percentiles, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    if (weight_sync_without_updates(workload)) {
        snprintf(error_p, error_len, "weight_sync: needs model updates (ranks.train: 1 and "
                 "serve ranks)");
        return KVIO_ERR_CONFIG;
    }
    if (kvio_sync_check(&workload->weight_sync, workload->cost.tensor_parallel, error_p,
                        error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    if (emulate && workload->update.control == KVIO_CONTROL_TWIN) {
        snprintf(error_p, error_len, "update.control: twin serves the stream again in the "
                 "same process, simulate's (set mode: simulate, or update.control: paired)");
        return KVIO_ERR_CONFIG;
    }
    if (!emulate && workload->update.control == KVIO_CONTROL_PAIRED) {
        snprintf(error_p, error_len, "update.control: paired repeats emulate runs; simulate's "
                 "control is its exact twin (set update.control: twin, or mode: emulate)");
        return KVIO_ERR_CONFIG;
    }
    if (emulate && workload->weight_sync.granularity != KVIO_SYNC_OFF) {
        kvio_status_t status = check_emulated_sync(workload, error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    if (emulate && updates && !coupled)
        return KVIO_OK; /* no engine, no stream */
    uint32_t blocks = 0;
    kvio_stream_t *stream = NULL;
    kvio_status_t status = kvio_model_resolve(model_p, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_gpu_resolve(gpu_p, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_serve_kv_blocks(&workload->serve, model_p, gpu_p,
                                      workload->cost.tensor_parallel, &blocks, error_p,
                                      error_len);
    if (status == KVIO_OK)
        status = check_cost(workload, model_p, gpu_p, error_p, error_len);
    int64_t duration_ns = kvio_workload_stream_duration(workload);
    if (status == KVIO_OK && !stream_served) {
        /* A front end's requests (kvio serve): the stream serves nothing. */
        if (emulate)
            status = check_tiers(workload, error_p, error_len);
        else
            status = check_simulate_memory(workload, model_p, blocks, UINT64_MAX, error_p,
                                           error_len);
        return status;
    }
    if (status == KVIO_OK)
        status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed, duration_ns,
                                    &stream, error_p, error_len);
    uint64_t stream_blocks = UINT64_MAX;
    if (status == KVIO_OK)
        status = check_requests_fit(workload, stream, blocks, requests_p, &stream_blocks, error_p,
                                    error_len);
    if (status == KVIO_OK && !emulate)
        status = check_simulate_memory(workload, model_p, blocks, stream_blocks, error_p,
                                       error_len);
    if (status == KVIO_OK && stream_p != NULL && kvio_stream_rewind(stream) != KVIO_OK) {
        /* A synthetic stream: the same seed yields the same requests again. */
        kvio_stream_destroy(stream);
        stream = NULL;
        status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed, duration_ns,
                                    &stream, error_p, error_len);
    }
    if (status == KVIO_OK && emulate)
        status = check_tiers(workload, error_p, error_len);
    if (status == KVIO_OK && stream_p != NULL) {
        *stream_p = stream;
        stream = NULL;
    }
    kvio_stream_destroy(stream);
    return status;
}

kvio_status_t kvio_workload_check(const kvio_workload_t *workload, char *error_p,
                                  size_t error_len)
{
    kvio_model_t model;
    kvio_gpu_t gpu;
    uint64_t requests;
    return check_workload(workload, &model, &gpu, NULL, true, &requests, error_p, error_len);
}

/* What one run holds from its checks to its summary. */
typedef struct run_state {
    const kvio_workload_t *workload;
    const kvio_run_options_t *options;
    char *error_p;
    size_t error_len;
    kvio_results_t *results;
    kvio_stream_t *stream;
    kvio_rte_world_t *world;
    kvio_event_trace_t *events;
    json_t *metrics;
    json_t *start;                   /* t0 and every rank's set-up (summary.json) */
    json_t *host;                    /* summary.json's host block */
    kvio_updates_schedule_t schedule; /* simulate mode's updates */
    kvio_serve_output_t served;      /* simulate mode: what serving measured */
    kvio_serve_output_t control;     /* simulate mode: the no-update twin's (sorted by id) */
    int64_t *activated_ns, *drain_stall_ns; /* as the serve ranks took them */
    int64_t *stall_ns;               /* per update, by cause (KVIO_STALL_CAUSES) */
    kvio_model_t model;
    kvio_gpu_t gpu;
    uint64_t num_requests;
    uint64_t start_ns;
    bool complete, root, updates, emulate, coupled;
    bool serving; /* simulate mode, and emulate without trainers (the coupled run serves
                     inside the update ranks) */
    const char *updates_note;
    kvio_serve_output_t *served_out; /* emulate, coupled: what serving measured (may be NULL) */
    kvio_serve_itls_t itls;          /* rank 0: the measured requests' gaps between tokens */
    char incomplete[512]; /* why a run that ended is not complete */
} run_state_t;

static bool stopped(const run_state_t *state)
{
    return state->options->stop != NULL && *state->options->stop;
}

/* Whether the event trace goes straight into the results directory
 * (its parent is output_dir, written the same way). */
static bool trace_in_output(const char *trace_path, const char *output_dir)
{
    if (output_dir == NULL)
        return false;
    const char *slash = strrchr(trace_path, '/');
    size_t parent = slash != NULL ? (size_t)(slash - trace_path) : 0;
    size_t length = strlen(output_dir);
    while (length > 1 && output_dir[length - 1] == '/')
        length--;
    return slash != NULL && parent == length && strncmp(trace_path, output_dir, length) == 0;
}

/* Everything that can be refused is checked before the directory exists:
 * what the workload decides (as kvio validate does), then what this machine
 * has to give it; then the world, the event trace and the directory. */
static kvio_status_t run_prepare(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    char *error_p = state->error_p;
    size_t error_len = state->error_len;
    uint64_t pool_bytes = 0; /* host memory of the coupled run's KV pools */
    kvio_status_t status = check_workload(workload, &state->model, &state->gpu, &state->stream,
                                          state->options->frontend == NULL,
                                          &state->num_requests, error_p, error_len);
    bool serves = state->serving || state->coupled;
    if (status == KVIO_OK && serves && (state->emulate || state->coupled))
        status = kvio_device_preflight(workload->device.memory, workload->device.fallback,
                                       workload->device.index, "device.memory: cuda", error_p,
                                       error_len);
    if (status == KVIO_OK && serves && state->emulate) {
        kvio_serve_run_t check = {.serve = &workload->serve, .model = &state->model,
                                  .gpu = &state->gpu, .cost = &workload->cost,
                                  .device = &workload->device,
                                  .num_ranks = (uint32_t)workload->ranks.serve};
        status = kvio_serve_emulate_preflight(&check, state->coupled ? &pool_bytes : NULL,
                                              error_p, error_len);
    }
    if (status == KVIO_OK && state->updates)
        status = kvio_updates_preflight(workload, pool_bytes, error_p, error_len);
    if (status == KVIO_OK && state->updates && state->emulate) {
        kvio_rte_params_t params = {
            .kind = workload->ranks.runtime,
            .num_ranks = (int)(workload->ranks.train + workload->ranks.serve +
                               (state->coupled ? workload->ranks.client : 0)),
            .timeout_ns = workload->ranks.timeout_ns};
        status = kvio_rte_world_create(&params, &state->world, error_p, error_len);
        if (status == KVIO_OK) {
            state->root = kvio_rte_world_is_root(state->world);
            kvio_rte_world_set_stop(state->world, state->options->stop);
        }
    }
    /* An existing trace file is overwritten only with --force (a device or
     * a pipe, as /dev/null, is written to). The trace is opened before the
     * results directory (an unwritable one is refused with no directory
     * made), and a trace file this run made goes when the directory is
     * refused. */
    const char *trace_path = state->options->event_trace;
    struct stat trace_info;
    bool trace_existed = trace_path != NULL && lstat(trace_path, &trace_info) == 0;
    bool trace_is_file = trace_existed &&
                         (S_ISREG(trace_info.st_mode) || S_ISLNK(trace_info.st_mode));
    if (status == KVIO_OK && state->root && trace_is_file && !state->options->force) {
        snprintf(error_p, error_len, "--event-trace %s: exists (use --force to overwrite it)",
                 trace_path);
        status = KVIO_ERR_EXISTS;
    }
    /* A trace inside the results directory (-o DIR --event-trace DIR/x.pfw)
     * is opened once the directory exists. */
    bool inside = trace_path != NULL && trace_in_output(trace_path, state->options->output_dir);
    if (status == KVIO_OK && state->root && trace_path != NULL && !inside)
        status = kvio_event_trace_open(trace_path, &state->events, error_p, error_len);
    if (status == KVIO_OK && state->root) {
        status = kvio_results_create(state->options->output_dir, workload->name,
                                     state->options->force, &state->results, error_p,
                                     error_len);
        if (status != KVIO_OK && state->events != NULL) {
            kvio_event_trace_close(state->events);
            state->events = NULL;
            if (!trace_existed)
                unlink(trace_path);
        }
    }
    if (status == KVIO_OK && state->root && inside)
        status = kvio_event_trace_open(trace_path, &state->events, error_p, error_len);
    if (status != KVIO_OK) {
        kvio_rte_world_destroy(state->world, true);
        state->world = NULL;
    }
    return status;
}

/* Simulate with updates and a control (update.control: auto or twin): the
 * same stream served again without updates, nothing written. */
static bool twin_wanted(const run_state_t *state)
{
    int control = state->workload->update.control;
    return state->updates && !state->emulate &&
           (control == KVIO_CONTROL_AUTO || control == KVIO_CONTROL_TWIN);
}

static kvio_status_t serve_twin_now(run_state_t *state, const kvio_serve_run_t *serve_run);

/* The no-update twin of serve_run into state->control: from the options'
 * cache when an earlier run served the same one (kvio compare), else
 * served now. */
static kvio_status_t serve_twin(run_state_t *state, const kvio_serve_run_t *serve_run)
{
    const kvio_workload_t *workload = state->workload;
    kvio_control_cache_t *cache = state->options->control_cache;
    char *key = cache != NULL ? kvio_control_key(workload) : NULL;
    if (cache != NULL && key == NULL) {
        snprintf(state->error_p, state->error_len, "update.control: out of memory");
        return KVIO_ERR_NOMEM;
    }
    bool found = false;
    kvio_status_t status = KVIO_OK;
    if (key != NULL)
        status = kvio_control_cache_take(cache, key, &state->control, &found);
    if (status == KVIO_OK && !found)
        status = serve_twin_now(state, serve_run);
    if (status == KVIO_OK && key != NULL && !found)
        status = kvio_control_cache_put(cache, key, &state->control);
    free(key);
    if (status == KVIO_ERR_NOMEM)
        snprintf(state->error_p, state->error_len, "update.control: out of memory keeping "
                 "the twin's %zu requests", state->control.num_finished);
    return status;
}

static kvio_status_t serve_twin_now(run_state_t *state, const kvio_serve_run_t *serve_run)
{
    const kvio_workload_t *workload = state->workload;
    kvio_stream_t *stream = NULL;
    kvio_status_t status = kvio_stream_create(&workload->stream, (uint64_t)workload->seed,
                                              kvio_workload_stream_duration(workload), &stream,
                                              state->error_p, state->error_len);
    if (status != KVIO_OK)
        return status;
    kvio_serve_run_t twin = *serve_run;
    twin.keep_itls = false;
    twin.itls = NULL;
    twin.stream = stream;
    twin.results = NULL;
    twin.events = NULL;
    twin.start = NULL;
    twin.updates = NULL;
    twin.num_updates = 0;
    twin.stall_for_updates = false;
    twin.update = NULL;
    twin.updates_activated_ns = NULL;
    twin.updates_stall_ns = NULL;
    twin.drain_stall_ns = NULL;
    twin.output = &state->control;
    twin.control = NULL;
    json_t *metrics = NULL;
    bool complete = true;
    /* On a stream of its own: the same seed gives the same requests. */
    status = kvio_serve_simulate(&twin, &metrics, &complete, state->error_p, state->error_len);
    json_decref(metrics);
    kvio_stream_destroy(stream);
    if (status == KVIO_OK && !complete)
        state->complete = false; /* stopped: the run that follows stops too */
    kvio_serve_output_sort(&state->control);
    return status;
}

/* The serve ranks (simulate, or emulate without trainers), after simulate
 * mode's schedule of updates, which they serve on (and, with a control,
 * after their no-update twin). */
static kvio_status_t run_serving(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    kvio_status_t status = KVIO_OK;
    if (state->updates && !state->emulate) {
        status = kvio_updates_schedule(workload, &state->schedule, state->error_p,
                                       state->error_len);
        size_t num_updates = state->schedule.num_updates;
        state->activated_ns = calloc(num_updates + 1, sizeof(int64_t));
        state->stall_ns = calloc((num_updates + 1) * KVIO_STALL_CAUSES, sizeof(int64_t));
        state->drain_stall_ns = calloc((size_t)workload->ranks.serve + 1, sizeof(int64_t));
        if (status == KVIO_OK && (state->activated_ns == NULL || state->drain_stall_ns == NULL ||
                                  state->stall_ns == NULL)) {
            snprintf(state->error_p, state->error_len, "model updates: out of memory");
            status = KVIO_ERR_NOMEM;
        }
    }
    if (status != KVIO_OK || !state->serving || !state->root)
        return status;
    kvio_serve_run_t serve_run = {
        .serve = &workload->serve,
        .model = &state->model,
        .gpu = &state->gpu,
        .cost = &workload->cost,
        .num_ranks = (uint32_t)workload->ranks.serve,
        .num_prefill = (uint32_t)workload->ranks.prefill,
        .pd = workload->ranks.prefill > 0 ? &workload->pd : NULL,
        .seed = (uint64_t)workload->seed,
        .slo = {.ttft_ns = workload->slo.ttft_ns, .tpot_ns = workload->slo.tpot_ns},
        .warmup_ns = workload->warmup_ns,
        .warmup_requests = workload->warmup_requests,
        .stream = state->stream,
        .rank_timeout_ns = workload->ranks.timeout_ns,
        .num_requests = state->num_requests,
        .results = state->results,
        .stop = state->options->stop,
        .events = state->events,
        .device = &workload->device,
        /* Serve ranks follow the train ranks in every file, as in updates.csv. */
        .first_serve_rank = state->updates ? (int)workload->ranks.train : 0,
        .start = state->start,
        .updates = state->schedule.updates,
        .num_updates = state->schedule.num_updates,
        .stall_for_updates = workload->update.apply == KVIO_APPLY_STALL,
        .version_steps = state->schedule.version_steps,
        .num_version_steps = state->schedule.num_version_steps,
        .loss = &workload->train.checkpoint.loss,
        .update = state->updates ? &workload->update : NULL,
        .updates_activated_ns = state->activated_ns,
        .updates_stall_ns = state->stall_ns,
        .drain_stall_ns = state->drain_stall_ns,
        .output = state->updates && !state->emulate ? &state->served : NULL,
        .frontend = state->options->frontend,
        .keep_itls = true,
        .itls = &state->itls,
    };
    if (twin_wanted(state)) {
        status = serve_twin(state, &serve_run);
        if (status != KVIO_OK)
            return status;
        serve_run.control = &state->control;
    }
    json_t *serve_metrics = NULL;
    status = state->emulate ? kvio_serve_emulate(&serve_run, &serve_metrics, &state->complete,
                                                 state->error_p, state->error_len)
                            : kvio_serve_simulate(&serve_run, &serve_metrics, &state->complete,
                                                  state->error_p, state->error_len);
    if (serve_run.control != NULL)
        state->served.control = &state->control;
    if (serve_metrics != NULL) {
        json_object_update(state->metrics, serve_metrics);
        json_decref(serve_metrics);
    }
    return status;
}

/* The model updates: simulate's on the schedule (updates.csv says when the
 * engines took each version, and a drain is the rank's inference stall),
 * emulate's with every rank. Interrupted: the run is incomplete, and so is
 * it when any one rank was stopped (a signal to it alone under mpirun). */
static kvio_status_t run_updates(run_state_t *state)
{
    const kvio_workload_t *workload = state->workload;
    state->updates_note = "no train and serve ranks in this workload";
    if (!state->updates)
        return KVIO_OK;
    for (size_t u = 0; state->activated_ns != NULL && u < state->schedule.num_updates; u++) {
        kvio_update_record_t *update = &state->schedule.updates[u];
        update->t_activated_ns = state->activated_ns[u];
        for (int c = 0; state->stall_ns != NULL && c < KVIO_STALL_CAUSES; c++)
            update->stall_ns[c] = state->stall_ns[u * KVIO_STALL_CAUSES + c];
    }
    for (int64_t r = 0; state->drain_stall_ns != NULL && r < workload->ranks.serve; r++)
        state->schedule.inference_stall_ns[r] += state->drain_stall_ns[r];
    kvio_status_t status = kvio_updates_run(
        workload, state->world, state->emulate ? NULL : &state->schedule,
        state->emulate ? NULL : &state->served, state->served_out, &state->itls,
        state->options->stop,
        state->options->frontend, state->results,
        state->root ? state->metrics : NULL, state->root ? state->start : NULL, state->events,
        state->error_p, state->error_len);
    if (state->emulate && stopped(state))
        state->complete = false;
    const json_t *ranks = json_object_get(json_object_get(state->metrics, "model_updates"),
                                          "interrupted_ranks");
    if (status == KVIO_OK && state->root && !stopped(state) && json_array_size(ranks) > 0) {
        state->complete = false;
        size_t at = (size_t)snprintf(state->incomplete, sizeof(state->incomplete),
                                     "interrupted: rank");
        for (size_t i = 0; i < json_array_size(ranks) && at < sizeof(state->incomplete); i++)
            at += (size_t)snprintf(state->incomplete + at, sizeof(state->incomplete) - at,
                                   " %lld", (long long)json_integer_value(json_array_get(ranks, i)));
        if (at < sizeof(state->incomplete))
            snprintf(state->incomplete + at, sizeof(state->incomplete) - at,
                     " stopped early (SIGINT or SIGTERM); what it measured until then is in the "
                     "results");
    }
    state->updates_note = state->emulate
                              ? "trainer published, serve ranks received (updates.csv)"
                              : "simulated: latency + bytes / bandwidth (updates.csv)";
    return status;
}

/* A serving run that completed no request measured nothing: not a result
 * to pass off as one (it exited 0 with 0.00 ms latencies). */
static void check_something_served(run_state_t *state)
{
    const json_t *completed = json_object_get(state->metrics, "completed");
    const json_t *measured = json_object_get(state->metrics, "measured");
    /* A server (kvio serve) measures what its clients sent, maybe nothing. */
    if (!state->root || !(state->serving || state->coupled) || !state->complete ||
        state->incomplete[0] != '\0' || stopped(state) || completed == NULL ||
        state->options->frontend != NULL)
        return;
    if (json_integer_value(completed) == 0) {
        state->complete = false;
        snprintf(state->incomplete, sizeof(state->incomplete),
                 "no request completed: the stream held none within the run (see "
                 "stream.requests, stream.arrival and the workload's duration)");
    } else if (measured != NULL && json_integer_value(measured) == 0) {
        /* Every request fell in the warmup: latencies of nothing. */
        state->complete = false;
        snprintf(state->incomplete, sizeof(state->incomplete),
                 "no request was measured: all %lld that completed fell in the warmup (warmup "
                 "%.3g s, warmup_requests %lld; shorten them or lengthen the run)",
                 (long long)json_integer_value(completed),
                 (double)state->workload->warmup_ns / 1e9,
                 (long long)state->workload->warmup_requests);
    }
}

/* run.log in the results: how the run was started, every warning and
 * error kvio logged while it ran (printed or hushed by -q), what makes its
 * numbers mislead, and how it ended. A failed write is a warning only: the
 * summary says how the run went. */
static void write_run_log(run_state_t *state, const json_t *summary, const json_t *warnings)
{
    size_t dropped = 0;
    char *captured = kvio_log_capture_end(&dropped);
    kvio_csv_t *log = NULL;
    if (kvio_csv_open(state->results, "run.log", NULL, &log) != KVIO_OK) {
        free(captured);
        return;
    }
    char build[1024];
    kvio_build_describe(build, sizeof(build));
    char *newline = strchr(build, '\n');
    if (newline != NULL)
        *newline = '\0';
    kvio_csv_row(log, "%s", build);
    char command[4096] = "";
    size_t at = 0;
    /* summary.json's command: its URLs' passwords already ***. */
    const json_t *typed = json_object_get(summary, "command");
    for (size_t i = 1; i < json_array_size(typed) && at < sizeof(command); i++)
        at += (size_t)snprintf(command + at, sizeof(command) - at, i > 1 ? " '%s'" : "kvio %s",
                               json_string_value(json_array_get(typed, i)));
    kvio_csv_row(log, "command: %s", command[0] != '\0' ? command : "(a library call)");
    kvio_csv_row(log, "source: %s", json_string_value(json_object_get(summary, "source")));
    kvio_csv_row(log, "start: %s", json_string_value(json_object_get(summary, "start_time")));
    if (captured[0] != '\0')
        kvio_csv_line(log, captured, strlen(captured) - 1);
    if (dropped > 0)
        kvio_csv_row(log, "(%zu more messages not kept)", dropped);
    for (size_t w = 0; w < json_array_size(warnings); w++)
        kvio_csv_row(log, "kvio: warning: %s",
                     json_string_value(json_object_get(json_array_get(warnings, w), "message")));
    const char *error = json_string_value(json_object_get(summary, "error"));
    kvio_csv_row(log, "end: %s, complete: %s%s%s",
                 json_string_value(json_object_get(summary, "end_time")),
                 json_is_true(json_object_get(summary, "complete")) ? "true" : "false",
                 error != NULL ? ", error: " : "", error != NULL ? error : "");
    char write_error[256];
    if (kvio_csv_finish(log, "run.log", write_error, sizeof(write_error)) != KVIO_OK)
        kvio_warn("%s", write_error);
    free(captured);
}

/* summary.json (rank 0), its table on stdout, and the result. */
static kvio_status_t run_summary(run_state_t *state, kvio_status_t status,
                                 kvio_run_result_t *result_p)
{
    const kvio_workload_t *workload = state->workload;
    const kvio_run_options_t *options = state->options;
    bool updates = state->updates, emulate = state->emulate, coupled = state->coupled;
    bool serving = state->serving;
    uint64_t end_ns = kvio_wall_time_ns();
    const run_part_t parts[] = {
        {"config", true, "validated and recorded"},
        {"engine", (serving || coupled) && status == KVIO_OK,
         coupled && workload->ranks.client > 0
             ? "serve ranks ran the real-time engine while updates arrived; a client rank "
               "routed requests on their published state (coupled)"
         : coupled ? "serve ranks ran the real-time engine while updates arrived (coupled)"
         : !serving ? "emulated iterations between updates (update.serving: emulated)"
         : emulate ? "serve ranks in real time with real KV memory (emulate)"
         : updates ? "serve ranks on the virtual clock, on the versions the modelled updates "
                     "activate (simulate, coupled)"
                   : "serve ranks on the virtual clock (simulate)"},
        {"model_updates", updates && status == KVIO_OK, state->updates_note},
    };
    /* vllm.json beside requests.csv (none when serving wrote nothing). */
    json_t *vllm = NULL;
    if (json_object_get(state->metrics, "ttft_ms") != NULL) {
        run_vllm_t source = {.workload = workload, .metrics = state->metrics,
                             .results = state->results, .itls = &state->itls,
                             .start_wall_ns = state->start_ns};
        char vllm_error[1024] = "";
        kvio_status_t vllm_status = run_vllm_write(&source, &vllm, vllm_error,
                                                   sizeof(vllm_error));
        if (vllm_status != KVIO_OK && vllm_status != KVIO_ERR_NOT_FOUND && status == KVIO_OK) {
            snprintf(state->error_p, state->error_len, "%s", vllm_error);
            status = vllm_status;
        }
    }
    char end_text[64];
    kvio_format_utc(end_ns, end_text, sizeof(end_text));
    json_t *summary = summary_head(workload, options, state->host, state->start_ns,
                                   status == KVIO_OK && state->complete,
                                   status != KVIO_OK               ? state->error_p
                                   : state->incomplete[0] != '\0' ? state->incomplete
                                   : !state->complete ? "run interrupted before it finished "
                                                        "(SIGINT or SIGTERM)"
                                                      : NULL);
    json_object_set_new(summary, "end_time", json_string(end_text));
    json_object_set_new(summary, "wall_s", json_real((double)(end_ns - state->start_ns) / 1e9));
    if (json_object_get(state->start, "t0") == NULL && !emulate)
        simulate_start(workload, state->start_ns, state->start);
    json_object_update(summary, state->start);
    json_object_set_new(summary, "config", kvio_config_to_json(kvio_workload_options, workload));
    json_object_set_new(summary, "parts", parts_json(parts, sizeof(parts) / sizeof(parts[0])));
    if (options->server_json != NULL)
        json_object_set_new(state->metrics, "server", options->server_json(options->server_context));
    json_object_set(summary, "metrics", state->metrics);
    if (vllm != NULL)
        json_object_set_new(summary, "vllm", vllm);
    if (serving || coupled)
        json_object_set_new(summary, "scheduling", scheduling_json(workload));
    json_t *warnings = kvio_run_validity(workload, state->metrics);
    json_object_set_new(summary, "valid", json_boolean(json_array_size(warnings) == 0));
    json_object_set_new(summary, "modelled", kvio_run_modelled(workload, state->metrics));
    json_t *storage = kvio_run_storage(workload, state->metrics);
    json_t *assessment = kvio_run_assess(workload, storage, state->metrics);
    if (storage != NULL)
        json_object_set_new(summary, "storage", storage);
    if (assessment != NULL)
        json_object_set_new(summary, "assessment", assessment);
    json_object_set(summary, "warnings", warnings);
    char write_error[512] = "";
    kvio_status_t write_status = kvio_results_write_json(state->results, "summary.json", summary,
                                                         write_error, sizeof(write_error));
    write_run_log(state, summary, warnings);
    if (options->summary_p != NULL && write_status == KVIO_OK)
        *options->summary_p = json_incref(summary);
    if (status == KVIO_OK && write_status != KVIO_OK) {
        snprintf(state->error_p, state->error_len, "%s", write_error);
        status = write_status;
    }
    snprintf(result_p->results_dir, sizeof(result_p->results_dir), "%s",
             kvio_results_path(state->results));
    result_p->complete = status == KVIO_OK && state->complete;
    if (status == KVIO_OK && !options->quiet)
        print_table(workload, summary, state->metrics, kvio_results_path(state->results),
                    state->complete, serving || coupled);
    json_decref(summary);
    /* After the table, -q or not (it hides the log's warnings; compare and
     * capacity, which print no table, keep them in their JSON): what makes
     * these numbers mislead. */
    for (size_t w = 0; status == KVIO_OK && state->root && !options->quiet &&
                       w < json_array_size(warnings);
         w++)
        fprintf(stderr, "kvio: warning: %s\n",
                json_string_value(json_object_get(json_array_get(warnings, w), "message")));
    json_decref(warnings);
    if (status == KVIO_OK && !state->complete) {
        snprintf(state->error_p, state->error_len, "%s; %s/summary.json says complete: false",
                 state->incomplete[0] != '\0' ? state->incomplete : "run interrupted",
                 kvio_results_path(state->results));
        status = KVIO_ERR_INTERRUPTED;
    }
    return status;
}

static void run_state_free(run_state_t *state, bool world_failed)
{
    kvio_rte_world_destroy(state->world, world_failed);
    kvio_event_trace_close(state->events);
    json_decref(state->metrics);
    json_decref(state->start);
    json_decref(state->host);
    kvio_updates_schedule_free(&state->schedule);
    kvio_serve_output_free(&state->served);
    free(state->itls.records);
    kvio_serve_output_free(&state->control);
    free(state->activated_ns);
    free(state->stall_ns);
    free(state->drain_stall_ns);
    kvio_stream_destroy(state->stream);
    kvio_results_destroy(state->results);
}

/* A front end's requests (kvio serve) reach serve ranks that are threads
 * of this process running the engine: emulate, and with trainers the
 * coupled run on the local runtime with no client rank. */
static bool frontend_runs(const kvio_workload_t *workload, char *error_p, size_t error_len)
{
    const char *why = NULL;
    const char *runtime = workload->ranks.runtime;
    if (workload->mode != KVIO_MODE_EMULATE)
        why = "it serves in real time (mode: emulate)";
    else if (kvio_updates_wanted(workload) && !kvio_updates_coupled(workload))
        why = "with trainers the serve ranks must run the engine (update.serving: engine)";
    else if (kvio_updates_wanted(workload) && runtime != NULL && strcmp(runtime, "mpi") == 0)
        why = "its serve ranks are threads of this process (ranks.runtime: local or auto)";
    else if (kvio_updates_wanted(workload) && getenv("OMPI_COMM_WORLD_SIZE") != NULL)
        why = "its serve ranks are threads of this process: start it without mpirun";
    if (why != NULL)
        snprintf(error_p, error_len, "kvio serve: %s", why);
    return why == NULL;
}

kvio_status_t kvio_run(const kvio_workload_t *workload, const kvio_run_options_t *options,
                       kvio_run_result_t *result_p, char *error_p, size_t error_len)
{
    if (workload->mode == KVIO_MODE_EMULATE && workload->update.control == KVIO_CONTROL_PAIRED)
        return run_paired(workload, options, result_p, error_p, error_len);
    return run_workload(workload, options, NULL, result_p, error_p, error_len);
}

kvio_status_t run_workload(const kvio_workload_t *workload, const kvio_run_options_t *options,
                           kvio_serve_output_t *served_out, kvio_run_result_t *result_p,
                           char *error_p, size_t error_len)
{
    if (options->summary_p != NULL)
        *options->summary_p = NULL;
    /* A closed socket (Redis gone mid-write) is an error to report, never a
     * SIGPIPE that ends the process without results (callers that handle
     * SIGPIPE themselves keep their handler). */
    struct sigaction pipe_action;
    if (sigaction(SIGPIPE, NULL, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    bool updates = kvio_updates_wanted(workload);
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    run_state_t state = {.workload = workload, .options = options, .error_p = error_p,
                         .error_len = error_len, .metrics = json_object(),
                         .start = json_object(), .complete = true, .root = true,
                         .updates = updates, .emulate = emulate,
                         .serving = !emulate || !updates,
                         .coupled = kvio_updates_coupled(workload), .served_out = served_out};
    bool world_failed = true; /* MPI_Finalize only after a whole run */
    kvio_status_t status = KVIO_OK;
    kvio_log_capture_begin(); /* run.log's warnings */
    if (options->frontend != NULL && !frontend_runs(workload, error_p, error_len)) {
        status = KVIO_ERR_CONFIG;
        goto out;
    }
    status = run_prepare(&state);
    if (status != KVIO_OK)
        goto out;
    state.start_ns = kvio_wall_time_ns();
    state.host = kvio_host_json();
    if (state.root && emulate && kvio_log_get_level() >= KVIO_LOG_WARN) {
        /* Emulate builds real pools and connects transports before its t0:
         * say so (the first line came at 17 s of a 20 s run when piped). */
        int64_t ranks = workload->ranks.serve + (updates ? workload->ranks.train : 0);
        int64_t real_ns = options->frontend != NULL && !state.coupled
                              ? options->frontend_duration_ns
                              : workload->duration_ns;
        char then[64] = "serving until stopped";
        if (real_ns > 0)
            snprintf(then, sizeof(then), "%.3g s of real time", (double)real_ns / 1e9);
        fprintf(stderr, "kvio: emulate: setting up %lld rank%s (KV pools, transports), then "
                "%s\n", (long long)ranks, ranks == 1 ? "" : "s", then);
    }
    if (state.root)
        status = write_provisional_summary(workload, options, state.results, state.host,
                                           state.start_ns, error_p, error_len);
    if (status == KVIO_OK)
        status = run_serving(&state);
    if (status == KVIO_OK)
        status = run_updates(&state);
    if (status == KVIO_OK)
        check_something_served(&state);
    /* The world ends after summary.json is written (at out:): under mpirun
     * the first rank to exit ends the job, so the other ranks wait there for
     * rank 0. Interrupted, the launcher is tearing the job down (SIGTERM,
     * then SIGKILL): a collective MPI_Finalize could outlast that, so an
     * interrupted run skips it like a failed one. */
    world_failed = status != KVIO_OK || stopped(&state);
    kvio_status_t trace_status = kvio_event_trace_close(state.events);
    state.events = NULL;
    if (status == KVIO_OK && trace_status != KVIO_OK) {
        snprintf(error_p, error_len, "--event-trace %s: write failed: %s", options->event_trace,
                 kvio_strerror(trace_status));
        status = trace_status;
    }
    if (!state.root) {
        /* Rank 0 writes summary.json; this rank's exit status says too. */
        if (status == KVIO_OK && stopped(&state)) {
            snprintf(error_p, error_len, "run interrupted; rank 0 writes summary.json "
                     "(complete: false)");
            status = KVIO_ERR_INTERRUPTED;
        }
        goto out;
    }
    status = run_summary(&state, status, result_p);
out:
    free(kvio_log_capture_end(NULL)); /* a refused or non-root run's capture */
    run_state_free(&state, world_failed);
    return status;
}
