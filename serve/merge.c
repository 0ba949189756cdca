/* On rank 0: the serve ranks' reports (kvio_serve_rank_pack) merged into
 * the run's serving metrics, requests.csv, iterations.csv and iteration
 * events, with the client rank's counts; and the executor's section of the
 * metrics (timing error, engine overhead, where the KV pools were). */
#include "serve/pd_int.h"

#include <stdlib.h>
#include <string.h>

#include "kvio/array.h"
#include "kvio/log.h"
#include "kvio/wire.h"

#define SERVE_RANK_MAGIC 0x6b76696f73727633ull /* "kviosrv3" */

/* The executor's figures, for the plain and coupled runs: where the KV
 * pool was (kv_memory may be NULL: unknown), the spin, the timing errors
 * and the engine's overhead. */
void kvio_serve_executor_fill(kvio_result_t *result, const char *executor,
                              const char *kv_memory, bool spin, uint64_t spin_bytes,
                              const kvio_hist_t *error_ns, const kvio_hist_t *error_ppm,
                              int64_t overhead, int64_t planned)
{
    kvio_result_set_text(result, KVIO_FIG_EXECUTOR, executor);
    if (kv_memory != NULL)
        kvio_result_set_text(result, KVIO_FIG_KV_MEMORY, kv_memory);
    kvio_result_set(result, KVIO_FIG_SPIN_KERNEL, spin);
    kvio_result_set(result, KVIO_FIG_SPIN_MEMORY_BYTES, (double)spin_bytes);
    kvio_result_set(result, KVIO_FIG_TIMING_ERROR_P50_US, kvio_hist_quantile(error_ns, 0.5) / 1e3);
    kvio_result_set(result, KVIO_FIG_TIMING_ERROR_P99_US, kvio_hist_quantile(error_ns, 0.99) / 1e3);
    kvio_result_set(result, KVIO_FIG_TIMING_ERROR_P99_PCT,
                    kvio_hist_quantile(error_ppm, 0.99) / 1e4);
    kvio_result_set(result, KVIO_FIG_ENGINE_OVERHEAD_PCT,
                    planned > 0 ? 100.0 * (double)overhead / (double)planned : 0);
}

/* One serve rank's report (kvio_serve_rank_pack) into the run's totals. */
typedef struct rank_totals {
    kvio_engine_metrics_t *total;
    kvio_result_t *result; /* its per_rank and tiers children are the ranks' */
    kvio_serve_samples_t *samples; /* may be NULL */
    json_t *kv_memory; /* the first serve rank's, as executor_json says */
    bool spin_kernel;
    json_int_t spin_bytes;
    uint64_t **served;
    size_t *num_versions;
    int64_t overhead, planned;
    kvio_hist_t *error_ns, *error_ppm;
    uint64_t iterations_dropped;
    uint64_t drain_cut; /* requests serve.drain_timeout cut */
    uint64_t drain_overdue; /* of them, past their rank's p99 e2el */
    kvio_serve_output_t *output; /* may be NULL */
    size_t finished_capacity;
    /* P/D: the rank being merged prefills (its metrics are not serving's),
     * and what the transfers and each pool did. */
    bool prefills;
    /* a front end's requests: each one's pick-up, ms (NULL: not kept) */
    double *pickups_ms;
    size_t num_pickups, pickups_capacity;
    bool pickups_dropped;        /* out of memory: the statistics are not set */
    kvio_pd_stats_t *pd_stats;   /* NULL: not P/D */
    kvio_pd_pool_t prefill_pool, decode_pool;
} rank_totals_t;

/* A front end's request's pick-up (arrival to its rank taking it). */
static void keep_pickup(rank_totals_t *totals, const kvio_engine_finished_t *finished)
{
    if (!finished->received.known || totals->pickups_dropped)
        return;
    if (kvio_array_reserve((void **)&totals->pickups_ms, &totals->pickups_capacity,
                           totals->num_pickups + 1, sizeof(double), 1024) != KVIO_OK) {
        totals->pickups_dropped = true;
        return;
    }
    totals->pickups_ms[totals->num_pickups++] =
        (double)(finished->received.taken_ns - finished->arrival_ns) / 1e6;
}

/* Adds a rank's finished request to the output. */
static kvio_status_t keep_finished(rank_totals_t *totals, const kvio_engine_finished_t *finished)
{
    kvio_serve_output_t *output = totals->output;
    kvio_status_t status = kvio_array_reserve((void **)&output->finished,
                                              &totals->finished_capacity,
                                              output->num_finished + 1, sizeof(*finished), 1024);
    if (status == KVIO_OK)
        output->finished[output->num_finished++] = *finished;
    return status;
}

static kvio_status_t merge_rank(const void *blob, size_t length, uint32_t rank,
                                kvio_csv_t *csv, kvio_csv_t *iterations_csv,
                                kvio_event_trace_t *events, rank_totals_t *totals)
{
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    uint64_t magic = 0, metrics_size = 0, versions = 0, rows_size = 0, about_size = 0;
    uint64_t dropped = 0, records_size = 0;
    if (kvio_wire_get_u64(&in, &magic) && magic != SERVE_RANK_MAGIC)
        kvio_wire_refuse(&in);
    const void *metrics = kvio_wire_take_blob(&in, &metrics_size);
    kvio_status_t status = kvio_wire_status(&in);
    kvio_engine_metrics_t rank_metrics;
    if (status == KVIO_OK && (status = kvio_engine_metrics_init(&rank_metrics)) == KVIO_OK) {
        size_t used = 0;
        status = kvio_engine_metrics_unpack_merge(&rank_metrics, metrics, metrics_size, &used);
        if (status == KVIO_OK) {
            if (!totals->prefills)
                kvio_engine_metrics_merge(totals->total, &rank_metrics);
            kvio_result_t *entry = kvio_result_child(
                totals->result, "per_rank",
                kvio_result_num_children(totals->result, "per_rank"));
            if (entry == NULL) {
                kvio_engine_metrics_fini(&rank_metrics);
                return KVIO_ERR_NOMEM;
            }
            kvio_serve_metrics_fill(entry, &rank_metrics);
            kvio_result_set(entry, KVIO_FIG_RANK, rank);
            if (totals->pd_stats != NULL) {
                kvio_result_set_text(entry, KVIO_FIG_ROLE, totals->prefills ? "prefill" : "decode");
                kvio_pd_pool_add(totals->prefills ? &totals->prefill_pool : &totals->decode_pool,
                                 &rank_metrics);
            }
        }
        kvio_engine_metrics_fini(&rank_metrics);
    }
    kvio_wire_get_u64(&in, &versions);
    const unsigned char *served = kvio_wire_take_array(&in, versions, sizeof(uint64_t));
    if (status == KVIO_OK && served != NULL && versions > *totals->num_versions) {
        uint64_t *bigger = realloc(*totals->served, versions * sizeof(uint64_t));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        memset(bigger + *totals->num_versions, 0,
               (versions - *totals->num_versions) * sizeof(uint64_t));
        *totals->served = bigger;
        *totals->num_versions = versions;
    }
    for (uint64_t v = 0; status == KVIO_OK && served != NULL && v < versions; v++) {
        uint64_t value;
        memcpy(&value, served + v * sizeof(value), sizeof(value));
        (*totals->served)[v] += value;
    }
    const unsigned char *rows = kvio_wire_take_blob(&in, &rows_size);
    for (uint64_t at = 0; status == KVIO_OK && rows != NULL &&
                          (csv != NULL || totals->output != NULL || totals->samples != NULL) &&
                          at + sizeof(kvio_engine_finished_t) <= rows_size;
         at += sizeof(kvio_engine_finished_t)) {
        kvio_engine_finished_t finished; /* copied out: the blob need not be aligned */
        memcpy(&finished, rows + at, sizeof(finished));
        if (totals->pd_stats != NULL)
            kvio_pd_stats_add(totals->pd_stats, &finished);
        if (csv != NULL)
            status = kvio_serve_render_requests(csv, &finished, 1, NULL);
        kvio_serve_samples_add(totals->samples, &finished);
        keep_pickup(totals, &finished);
        if (status == KVIO_OK && totals->output != NULL)
            status = keep_finished(totals, &finished);
    }
    int64_t overhead = 0, planned = 0;
    kvio_wire_get_i64(&in, &overhead);
    kvio_wire_get_i64(&in, &planned);
    totals->overhead += overhead;
    totals->planned += planned;
    kvio_hist_t *hists[2] = {totals->error_ns, totals->error_ppm};
    for (int h = 0; h < 2 && status == KVIO_OK; h++) {
        uint64_t size = 0;
        size_t used = 0;
        const void *packed = kvio_wire_take_blob(&in, &size);
        if (packed != NULL)
            status = kvio_hist_unpack_merge(hists[h], packed, size, &used);
    }
    const char *about_text = kvio_wire_take_blob(&in, &about_size);
    if (status == KVIO_OK && about_text != NULL && about_size > 0) {
        json_error_t json_error;
        json_t *about = json_loadb(about_text, about_size, 0, &json_error);
        /* Each tier's figures, sent as their JSON, into the run's entries
         * (the one loader: kvio_result_load_entry). */
        size_t index;
        const json_t *tier;
        json_array_foreach(json_object_get(about, "tiers"), index, tier) {
            kvio_result_t *entry = kvio_result_child(
                totals->result, "tiers", kvio_result_num_children(totals->result, "tiers"));
            if (entry == NULL) {
                json_decref(about);
                return KVIO_ERR_NOMEM;
            }
            kvio_result_load_entry(tier, "tiers", entry);
        }
        if (totals->kv_memory == NULL && json_is_string(json_object_get(about, "kv_memory"))) {
            totals->kv_memory = json_incref(json_object_get(about, "kv_memory"));
            totals->spin_kernel = json_is_true(json_object_get(about, "spin_kernel"));
            totals->spin_bytes = json_integer_value(json_object_get(about, "spin_memory_bytes"));
        }
        totals->drain_cut += (uint64_t)json_integer_value(json_object_get(about, "drain_cut"));
        totals->drain_overdue +=
            (uint64_t)json_integer_value(json_object_get(about, "drain_overdue"));
        json_decref(about);
    }
    double host_bandwidth = 0;
    kvio_wire_get_u64(&in, &dropped);
    kvio_wire_get_f64(&in, &host_bandwidth);
    const void *records = kvio_wire_take_blob(&in, &records_size);
    totals->iterations_dropped += dropped;
    if (status == KVIO_OK && records != NULL)
        status = kvio_serve_render_iterations(iterations_csv, events, records, records_size,
                                              host_bandwidth);
    if (status == KVIO_OK && records != NULL && totals->output != NULL)
        kvio_serve_output_add_steps(totals->output, records, records_size);
    return status != KVIO_OK ? status : kvio_wire_status(&in);
}

kvio_status_t kvio_serve_ranks_merge(void *const *blobs, const size_t *lengths, size_t count,
                                     uint32_t first_rank, kvio_results_t *results,
                                     kvio_event_trace_t *events, kvio_result_t *result,
                                     uint64_t **served_p, size_t *num_versions_p,
                                     kvio_serve_output_t *output_p, kvio_serve_itls_t *itls_p,
                                     kvio_serve_samples_t *samples,
                                     const kvio_serve_pd_merge_t *pd, bool frontend,
                                     char *error_p, size_t error_len)
{
    kvio_engine_metrics_t total;
    kvio_csv_t *csv = NULL, *iterations_csv = NULL;
    json_t *client = NULL;
    size_t num_serve = 0;
    uint64_t *served = NULL;
    size_t num_versions = 0;
    kvio_serve_output_t output = {0};
    rank_totals_t totals = {.total = &total, .result = result,
                            .samples = samples,
                            .served = &served, .num_versions = &num_versions,
                            .output = output_p != NULL ? &output : NULL};
    kvio_pd_stats_t pd_stats = {0};
    kvio_status_t status = kvio_engine_metrics_init(&total);
    if (status == KVIO_OK && pd != NULL &&
        (status = kvio_pd_stats_init(&pd_stats, pd->block_size, pd->kv_bytes_per_token)) == KVIO_OK)
        totals.pd_stats = &pd_stats;
    if (status == KVIO_OK && (kvio_hist_create(&totals.error_ns) != KVIO_OK ||
                              kvio_hist_create(&totals.error_ppm) != KVIO_OK))
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK && results != NULL)
        status = kvio_serve_open_csvs(results, pd != NULL, frontend, false, &csv,
                                      &iterations_csv, error_p, error_len);
    for (size_t b = 0; b < count && status == KVIO_OK; b++) {
        if (blobs[b] == NULL)
            continue; /* a lost client rank's */
        if (kvio_serve_client_blob(blobs[b], lengths[b])) {
            json_decref(client);
            client = kvio_serve_client_json(blobs[b], lengths[b]);
            if (client == NULL)
                status = KVIO_ERR_PARSE;
            else
                kvio_serve_client_routing_fill(result, blobs[b], lengths[b]);
            continue;
        }
        totals.prefills = pd != NULL && num_serve < pd->num_prefill;
        status = merge_rank(blobs[b], lengths[b], first_rank + (uint32_t)num_serve++, csv,
                            iterations_csv, events, &totals);
    }
    if (totals.iterations_dropped > 0)
        kvio_warn("iterations.csv: %llu iterations of the serve ranks were not kept (each rank "
                  "keeps %u MiB of them)", (unsigned long long)totals.iterations_dropped,
                  KVIO_SERVE_ITERATIONS_MAX_BYTES >> 20);
    if (status == KVIO_OK) {
        kvio_serve_metrics_fill(result, &total);
        kvio_result_set(result, KVIO_FIG_SERVE_RANKS, (double)num_serve);
        kvio_result_set(result, KVIO_FIG_ITERATIONS_NOT_RECORDED,
                        (double)totals.iterations_dropped);
        if (client != NULL) {
            kvio_result_set_detail(result, "client", client);
            client = NULL;
        }
        kvio_result_set(result, KVIO_FIG_SWAP_VERIFY_FAILURES, (double)total.swap_verify_failures);
        if (frontend && !totals.pickups_dropped)
            kvio_result_set_stats(result, KVIO_FIG_FRONTEND_PICKUP_MS_MEAN, totals.pickups_ms,
                                  totals.num_pickups);
        kvio_result_set(result, KVIO_FIG_DRAIN_CUT_REQUESTS, (double)totals.drain_cut);
        kvio_result_set(result, KVIO_FIG_DRAIN_CUT_OVERDUE_REQUESTS, (double)totals.drain_overdue);
        size_t num_tiers = kvio_result_num_children(result, "tiers");
        if (num_tiers > 0)
            kvio_serve_tier_hits_fill(result);
        kvio_serve_executor_fill(result, totals.spin_kernel ? "gpu (coupled)" : "realtime (coupled)",
                                 json_string_value(totals.kv_memory), totals.spin_kernel,
                                 (uint64_t)totals.spin_bytes, totals.error_ns, totals.error_ppm,
                                 totals.overhead, totals.planned);
        if (pd != NULL) {
            /* The peer tiers checked every block they got (its checksum). */
            for (size_t t = 0; t < num_tiers; t++) {
                const kvio_result_t *tier = kvio_result_child_at(result, "tiers", t);
                const char *kind = kvio_result_text(tier, KVIO_FIG_TIER_KIND);
                if (kind == NULL || strcmp(kind, "remote") != 0)
                    continue;
                pd_stats.verified_blocks += (uint64_t)kvio_result_get(tier, KVIO_FIG_TIER_HITS);
                pd_stats.checksum_failures +=
                    (uint64_t)kvio_result_get(tier, KVIO_FIG_TIER_CHECKSUM_FAILURES);
            }
            kvio_pd_link_info_t link = {.router = kvio_choice_name(&pd->config->router.policy)};
            kvio_pd_fill(result, pd->config, &link, &pd_stats, &totals.prefill_pool,
                         &totals.decode_pool, pd->run_ns);
        }

        kvio_serve_itls_take(&total, itls_p);
        output.update_recomputed_tokens = total.update_recomputed_tokens;
        output.update_aborted_requests = total.update_aborted_requests;
        if (output_p != NULL) {
            *output_p = output;
            output = (kvio_serve_output_t){0};
        }
        *served_p = served;
        *num_versions_p = num_versions;
        served = NULL;
    } else if (error_p[0] == '\0') {
        snprintf(error_p, error_len, "serve ranks' reports could not be merged: %s",
                 kvio_strerror(status));
    }
    status = kvio_serve_close_csvs(csv, iterations_csv, status, error_p, error_len);
    kvio_serve_output_free(&output);
    json_decref(client);
    json_decref(totals.kv_memory);
    free(served);
    free(totals.pickups_ms);
    kvio_hist_destroy(totals.error_ns);
    kvio_hist_destroy(totals.error_ppm);
    kvio_pd_stats_fini(&pd_stats);
    kvio_engine_metrics_fini(&total);
    return status;
}

