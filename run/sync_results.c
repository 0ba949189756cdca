/* On rank 0, weight_sync in emulate mode: each bucket's stages at each
 * serve rank joined from the ranks' stamps (a forward along a chain or a
 * tree counted at the rank that received it), in sync.csv and the summary. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/results.h"

/* ---- emulate: one rank ---- */

/* A serve rank's bucket stamps, rank by rank in all->stamps: [begin, end),
 * and the next one not yet joined. */
typedef struct stamp_range {
    size_t next, end;
    size_t forward; /* the first row that may be a forward of the next bucket */
} stamp_range_t;

/* True when stamp a comes before version, bucket. */
static bool stamp_before(const kvio_xfer_bucket_stamp_t *a, uint64_t version, uint32_t bucket)
{
    return a->version < version || (a->version == version && a->bucket < bucket);
}

/* The row of the put that brought t's bucket to t's server: t itself when
 * the trainer put it (source is the trainer), else the forward row of
 * server source (a chain's or tree's), found from its range's forward
 * cursor (t's come in bucket order); NULL when there is none. */
static const kvio_xfer_bucket_stamp_t *forwarded(const collected_t *all, stamp_range_t *ranges,
                                                 int size, const kvio_xfer_bucket_stamp_t *t,
                                                 int source)
{
    if (source == TRAIN_RANK || t->transfer_start_ns != 0)
        return t;
    if (source < 0 || source >= size)
        return NULL;
    stamp_range_t *range = &ranges[source];
    while (range->forward < range->end &&
           stamp_before(&all->stamps[range->forward], t->version, t->bucket))
        range->forward++;
    for (size_t i = range->forward; i < range->end; i++) {
        const kvio_xfer_bucket_stamp_t *f = &all->stamps[i];
        if (f->version != t->version || f->bucket != t->bucket)
            break;
        if (f->rank == source && f->peer == t->peer)
            return f;
    }
    return NULL;
}

/* weight_sync in emulate mode: sync.csv, a row per version, bucket and
 * serve rank (the trainer's stage, transfer and control times beside that
 * rank's notice and reload, ms from t0), and model_updates.weight_sync with
 * the stages' measured totals per update. */
/* What the stamps add up to over the run (ns, bytes, counts): the
 * trainer's rows (one per bucket and server), the buckets they are, the
 * rows joined with a server's reload, the last buckets reloaded, the
 * versions every bucket of which some server reloaded. */
typedef struct sync_sums {
    double stage_ns, transfer_ns, control_ns, reload_ns, notice_ns, pipeline_ns, staged_ns,
        update_ns;
    double wire; /* what the trainer put, once per bucket */
    double wire_from_trainer, wire_forwarded; /* every put: the trainer's, a server's */
    size_t notices, sent, reloaded, whole, versions_done;
} sync_sums_t;

/* summary.json's weight_sync: the keys simulate mode has (buckets,
 * messages, bytes, wire_bytes, staged_ms: the trainer's last bucket staged,
 * update_ms: the last server done, both from the first stage's start) mean
 * the same here (wire_bytes measured); the rest are the stages' measured
 * sums per update. */
static json_t *weight_sync_json(const kvio_sync_config_t *config, const kvio_sync_plan_t *sync,
                                const sync_sums_t *sums)
{
    uint64_t tensors = 0;
    for (size_t b = 0; b < sync->num_buckets; b++)
        tensors += sync->buckets[b].tensors;
    double versions = sums->sent > 0 ? (double)sums->sent / (double)sync->num_buckets : 0;
    double updates =
        sums->reloaded > 0 ? (double)sums->reloaded / (double)sync->num_buckets : 0;
    static const char *const names[] = {"off", "whole", "bucket", "tensor"};
    json_t *object = json_pack(
        "{s:s, s:b, s:I, s:I, s:I, s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
        "granularity", names[config->granularity], "measured", 1,
        "buckets", (json_int_t)sync->num_buckets, "messages", (json_int_t)sync->messages,
        "tensors", (json_int_t)tensors, "bytes", (json_int_t)sync->bytes,
        "staged_ms", versions > 0 ? sums->staged_ns / versions / 1e6 : 0.0,
        "pipeline_depth",
        (json_int_t)((size_t)config->pipeline_depth < sync->num_buckets
                         ? (size_t)config->pipeline_depth
                         : sync->num_buckets),
        "updates", versions,
        "stage_ms", versions > 0 ? sums->stage_ns / versions / 1e6 : 0.0,
        "transfer_ms", versions > 0 ? sums->transfer_ns / versions / 1e6 : 0.0,
        "control_ms", versions > 0 ? sums->control_ns / versions / 1e6 : 0.0,
        "reload_ms", updates > 0 ? sums->reload_ns / updates / 1e6 : 0.0,
        "control_us_per_message",
        sums->notices > 0 ? sums->control_ns / (double)sums->notices / 1e3 : 0.0,
        "notice_us_per_message",
        sums->reloaded > 0 ? sums->notice_ns / (double)sums->reloaded / 1e3 : 0.0,
        "pipeline_ms", sums->whole > 0 ? sums->pipeline_ns / (double)sums->whole / 1e6 : 0.0);
    if (config->delta_fraction > 0) {
        static const char *const encodings[] = {"index_value", "bitmap"};
        json_object_set_new(object, "delta",
                            json_pack("{s:f, s:s}", "fraction", config->delta_fraction,
                                      "encoding", encodings[config->delta_encoding]));
    }
    return object;
}

void run_sync_figures(kvio_result_t *result, double update_ms, double wire_bytes,
                      double from_trainer, double forwarded)
{
    if (result == NULL)
        return;
    kvio_result_set(result, KVIO_FIG_SYNC_UPDATE_MS, update_ms);
    kvio_result_set(result, KVIO_FIG_SYNC_WIRE_BYTES, wire_bytes);
    kvio_result_set(result, KVIO_FIG_SYNC_WIRE_FROM_TRAINER, from_trainer);
    kvio_result_set(result, KVIO_FIG_SYNC_WIRE_FORWARDED, forwarded);
}

kvio_status_t run_sync_results(const run_context_t *context, const collected_t *all,
                                  const kvio_sync_plan_t *sync, int64_t origin_ns, char *error_p,
                                  size_t error_len)
{
    int size = all->num_reports;
    stamp_range_t *ranges = calloc((size_t)size + 1, sizeof(*ranges));
    if (ranges == NULL) {
        snprintf(error_p, error_len, "model updates: out of memory");
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < all->num_stamps; i++) {
        int rank = all->stamps[i].rank;
        if (rank < 0 || rank >= size)
            continue;
        if (ranges[rank].end == 0)
            ranges[rank].next = ranges[rank].forward = i;
        ranges[rank].end = i + 1;
    }
    kvio_csv_t *csv = NULL;
    kvio_status_t status = KVIO_OK;
    if (context->results != NULL) {
        status = kvio_csv_open(context->results, "sync.csv",
                               "version,bucket,rank,source,bytes,wire_bytes,t_stage_start_ms,t_staged_ms,"
                               "t_transfer_start_ms,t_transferred_ms,t_control_start_ms,"
                               "t_control_end_ms,t_noticed_ms,t_reload_start_ms,t_reloaded_ms",
                               &csv);
        if (status != KVIO_OK) {
            free(ranges);
            snprintf(error_p, error_len, "%s/sync.csv: cannot write",
                     kvio_results_path(context->results));
            return status;
        }
    }
#define MS(ns) ((double)((ns) - origin_ns) / 1e6)
    sync_sums_t sums = {0};
    /* Every put: a row of its sender's with a serve rank as its peer (a
     * server's reload rows name the trainer). */
    for (size_t i = 0; i < all->num_stamps; i++) {
        const kvio_xfer_bucket_stamp_t *t = &all->stamps[i];
        if (t->peer < 0 || t->peer >= size || t->peer == TRAIN_RANK)
            continue;
        if (t->rank == TRAIN_RANK)
            sums.wire_from_trainer += (double)t->wire_bytes;
        else
            sums.wire_forwarded += (double)t->wire_bytes;
    }
    int64_t version_start = 0, last_reloaded = 0; /* the last bucket, by the last server */
    const kvio_xfer_bucket_stamp_t *previous = NULL;
    for (size_t i = 0; i <= all->num_stamps; i++) {
        const kvio_xfer_bucket_stamp_t *t = i < all->num_stamps ? &all->stamps[i] : NULL;
        if (t != NULL && t->rank != TRAIN_RANK)
            continue;
        bool new_bucket = t == NULL || previous == NULL || t->version != previous->version ||
                          t->bucket != previous->bucket;
        if (new_bucket && last_reloaded != 0) {
            sums.versions_done++; /* the version before, whole */
            sums.update_ns += (double)(last_reloaded - version_start);
            last_reloaded = 0;
        }
        if (t == NULL)
            break;
        previous = t;
        bool last = t->bucket + 1 == sync->num_buckets;
        if (new_bucket) {
            sums.sent++;
            sums.wire += (double)t->wire_bytes;
            sums.stage_ns += (double)(t->stage_end_ns - t->stage_start_ns);
            if (t->bucket == 0)
                version_start = t->stage_start_ns;
            if (last)
                sums.staged_ns += (double)(t->stage_end_ns - version_start);
        }
        /* The server's reload row for this bucket (its rows are in order;
         * a server on a chain or tree also has a row per bucket it
         * forwarded, with the child as its peer). */
        if (t->peer < 0 || t->peer >= size || t->peer == TRAIN_RANK)
            continue;
        stamp_range_t *range = &ranges[t->peer];
        while (range->next < range->end &&
               (all->stamps[range->next].rank != t->peer ||
                all->stamps[range->next].peer != TRAIN_RANK ||
                stamp_before(&all->stamps[range->next], t->version, t->bucket)))
            range->next++;
        const kvio_xfer_bucket_stamp_t *r = range->next < range->end
                                                ? &all->stamps[range->next]
                                                : NULL;
        if (r == NULL || r->version != t->version || r->bucket != t->bucket)
            continue;
        /* The put that brought it: the trainer's, or the forward of the
         * server it came from. */
        const kvio_xfer_bucket_stamp_t *put = forwarded(all, ranges, size, t, r->source);
        if (put == NULL)
            continue;
        sums.notices++;
        sums.transfer_ns += (double)(put->transfer_end_ns - put->transfer_start_ns);
        sums.control_ns += (double)(put->control_end_ns - put->control_start_ns);
        sums.reloaded++;
        sums.reload_ns += (double)(r->reload_end_ns - r->reload_start_ns);
        sums.notice_ns += (double)(r->noticed_ns - r->notice_sent_ns);
        if (last) {
            sums.whole++;
            sums.pipeline_ns += (double)(r->reload_end_ns - version_start);
            last_reloaded = r->reload_end_ns > last_reloaded ? r->reload_end_ns : last_reloaded;
        }
        if (csv != NULL)
            kvio_csv_row(csv, "%llu,%u,%d,%d,%llu,%llu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f",
                         (unsigned long long)t->version, t->bucket, t->peer, put->rank,
                         (unsigned long long)t->bytes, (unsigned long long)t->wire_bytes,
                         MS(t->stage_start_ns), MS(t->stage_end_ns),
                         MS(put->transfer_start_ns), MS(put->transfer_end_ns),
                         MS(put->control_start_ns), MS(put->control_end_ns), MS(r->noticed_ns),
                         MS(r->reload_start_ns), MS(r->reload_end_ns));
    }
#undef MS
    free(ranges);
    if (csv != NULL && (status = kvio_csv_finish(csv, "sync.csv", error_p, error_len)) != KVIO_OK)
        return status;
    if (context->result == NULL)
        return KVIO_OK;
    json_t *object = weight_sync_json(&context->workload->weight_sync, sync, &sums);
    json_object_set_new(kvio_result_detail_object(context->result, "model_updates"),
                        "weight_sync", object);
    double versions = sums.sent > 0 ? (double)sums.sent / (double)sync->num_buckets : 0;
    run_sync_figures(context->result,
                     sums.versions_done > 0 ? sums.update_ns / (double)sums.versions_done / 1e6
                                            : 0.0,
                     versions > 0 ? sums.wire / versions : 0,
                     versions > 0 ? sums.wire_from_trainer / versions : 0,
                     versions > 0 ? sums.wire_forwarded / versions : 0);
    return KVIO_OK;
}
