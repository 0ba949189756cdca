/* model.from: simulate mode's transport model taken from an emulate run's
 * results (its updates.csv and summary.json): the measured latency and
 * bandwidth per update, and the checksum and verification rates. */
#include "run/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/log.h"
#include "kvio/results.h"

#include <sys/stat.h>

/* ---- simulate: the model taken from an emulate run (model.from) ---- */

#define FROM_KEY "train.transport.model.from"

/* What an emulate run measured, per update and serve rank (updates.csv),
 * summed over the activated ones; times in ms. */
typedef struct measured_sums {
    double transfer_ms;  /* t_xfer_end - t_xfer_start: bytes moved into a receiver */
    double write_ms;     /* t_publish_end - t_publish_start: the shared-store write */
    double arrival_ms;   /* t_xfer_end - t_publish_start: data at the receiver */
    double checksum_ms;  /* t_publish_start - t_ready: the trainer's checksum */
    double verify_ms;    /* t_verified - (data in and notified): the server's */
    size_t verify_rows;  /* rows with a verify time */
    double bytes;
    size_t rows;
} measured_sums_t;

/* Reads dir/updates.csv into sums. */
static kvio_status_t read_updates_csv(const char *dir, measured_sums_t *sums_p, char *error_p,
                                      size_t error_len)
{
    enum { XFER_START, XFER_END, PUBLISH_START, PUBLISH_END, ACTIVATED, BYTES, READY, NOTIFIED,
           VERIFIED, NUM_WANTED };
    static const char *const wanted[NUM_WANTED] = {
        "t_xfer_start_ms", "t_xfer_end_ms", "t_publish_start_ms", "t_publish_end_ms",
        "t_activated_ms", "bytes", "t_ready_ms", "t_notified_ms", "t_verified_ms"};
    char path[4200], reason[512] = "";
    snprintf(path, sizeof(path), "%s/updates.csv", dir);
    kvio_csv_reader_t *csv = malloc(sizeof(*csv)); /* it holds a 64 KiB line */
    if (csv == NULL)
        return KVIO_ERR_NOMEM;
    int columns[NUM_WANTED];
    kvio_status_t status = kvio_csv_reader_open(csv, path, reason, sizeof(reason));
    if (status == KVIO_ERR_NOT_FOUND) {
        snprintf(error_p, error_len, FROM_KEY ": %s: %s (the per-update stages the model is "
                 "fitted to)", path, strerror(ENOENT));
        free(csv);
        return status;
    }
    if (status == KVIO_OK)
        status = kvio_csv_reader_columns(csv, wanted, NUM_WANTED, columns, reason,
                                         sizeof(reason));
    measured_sums_t sums = {0};
    size_t count = csv->num_fields;
    while (status == KVIO_OK &&
           (status = kvio_csv_reader_next(csv, reason, sizeof(reason))) == KVIO_OK) {
        double value[NUM_WANTED];
        bool usable = csv->num_fields == count;
        for (int i = 0; i < NUM_WANTED && usable; i++) {
            char *end;
            value[i] = strtod(csv->fields[columns[i]], &end);
            usable = end != csv->fields[columns[i]] && isfinite(value[i]);
        }
        /* Only activated updates count, like the run's own latency. */
        if (!usable)
            continue;
        sums.transfer_ms += value[XFER_END] - value[XFER_START];
        sums.write_ms += value[PUBLISH_END] - value[PUBLISH_START];
        sums.arrival_ms += value[XFER_END] - value[PUBLISH_START];
        sums.checksum_ms += value[PUBLISH_START] - value[READY];
        double data_in = fmax(value[XFER_END], value[NOTIFIED]);
        if (value[VERIFIED] > data_in) {
            sums.verify_ms += value[VERIFIED] - data_in;
            sums.verify_rows++;
        }
        sums.bytes += value[BYTES];
        sums.rows++;
    }
    kvio_csv_reader_close(csv);
    free(csv);
    if (status == KVIO_INPROGRESS) /* the end of the file */
        status = KVIO_OK;
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, FROM_KEY ": %s", reason);
        return status == KVIO_ERR_PARSE ? KVIO_ERR_CONFIG : status;
    }
    if (sums.rows == 0 || !(sums.transfer_ms > 0)) {
        snprintf(error_p, error_len, FROM_KEY ": %s has no activated update with its stage "
                 "times", path);
        return KVIO_ERR_CONFIG;
    }
    *sums_p = sums;
    return KVIO_OK;
}

static int name_index(const char *const *names, const char *name)
{
    for (int i = 0; name != NULL && names[i] != NULL; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* The measured run's transport shape (what the model's arrival depends on)
 * from its summary.json config; keys it lacks keep their defaults. */
static kvio_status_t measured_shape(json_t *transport, kvio_xfer_config_t *shape,
                                    char *error_p, size_t error_len)
{
    kvio_status_t status = kvio_config_defaults(kvio_xfer_options, shape, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* The caller checked the kind is the workload's (so one kvio has). */
    const char *kind = json_string_value(json_object_get(transport, "kind"));
    if (kind == NULL || kvio_choice_set(&shape->kind, kind) != KVIO_OK) {
        snprintf(error_p, error_len, "no transport called %s", kind ? kind : "(none)");
        return KVIO_ERR_CONFIG;
    }
    int fanout = name_index(kvio_xfer_fanout_names, json_string_value(json_object_get(transport, "fanout")));
    if (fanout >= 0)
        shape->fanout = fanout;
    const char *chunk = json_string_value(json_object_get(transport, "chunk"));
    if (chunk != NULL && kvio_parse_size(chunk, &shape->chunk, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    json_t *file = json_object_get(transport, "file");
    int discovery = name_index(kvio_xfer_discovery_names,
                               json_string_value(json_object_get(file, "discovery")));
    if (discovery >= 0)
        shape->file.discovery = discovery;
    const char *interval = json_string_value(json_object_get(file, "poll_interval"));
    if (interval != NULL &&
        kvio_parse_duration(interval, &shape->file.poll_interval_ns, error_p, error_len) !=
            KVIO_OK)
        return KVIO_ERR_CONFIG;
    return KVIO_OK;
}

kvio_status_t kvio_updates_model_from(kvio_workload_t *workload, char *error_p,
                                      size_t error_len)
{
    kvio_xfer_model_config_t *model = &workload->train.transport.model;
    if (model->from == NULL || model->from[0] == '\0')
        return KVIO_OK;
    const char *dir = model->from;
    const char *kind = kvio_choice_name(&workload->train.transport.kind);
    struct stat info;
    if (stat(dir, &info) != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s: %s", dir, strerror(errno));
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : KVIO_ERR_CONFIG;
    }
    if (!S_ISDIR(info.st_mode)) {
        snprintf(error_p, error_len, FROM_KEY ": %s is not a directory; it takes the results "
                 "directory of an emulate update run", dir);
        return KVIO_ERR_CONFIG;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    if (stat(path, &info) != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s is not a kvio results directory (no "
                 "summary.json); it takes the one of an emulate update run (bench/update.sh "
                 "keeps them with KVIO_BENCH_RESULTS=DIR)", dir);
        return KVIO_ERR_NOT_FOUND;
    }
    json_error_t json_error;
    json_t *summary = json_load_file(path, 0, &json_error);
    if (summary == NULL) {
        snprintf(error_p, error_len, FROM_KEY ": %s:%d: %s", path, json_error.line,
                 json_error.text);
        return KVIO_ERR_CONFIG;
    }
    kvio_xfer_config_t shape = {0};
    measured_sums_t sums = {0};
    /* The run's figures through the one loader (any schema version); its
     * configuration as the workload it ran. */
    kvio_result_t *result = NULL;
    char load_error[512];
    kvio_status_t status = kvio_result_load(summary, &result, load_error, sizeof(load_error));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, FROM_KEY ": %s: %s", path, load_error);
        json_decref(summary);
        return KVIO_ERR_CONFIG;
    }
    status = KVIO_ERR_CONFIG;
    json_t *config = json_object_get(summary, "config");
    json_t *transport = json_object_get(json_object_get(config, "train"), "transport");
    const char *mode = json_string_value(json_object_get(config, "mode"));
    const char *measured_kind = json_string_value(json_object_get(transport, "kind"));
    double activated = kvio_result_get(result, KVIO_FIG_UPDATES_ACTIVATED);
    int num_receivers = (int)kvio_result_get(result, KVIO_FIG_UPDATE_SERVE_RANKS);
    if (!json_is_true(json_object_get(summary, "complete"))) {
        const char *why = json_string_value(json_object_get(summary, "error"));
        snprintf(error_p, error_len, FROM_KEY ": %s: that run did not complete (summary.json: "
                 "complete: false%s%s)", dir, why != NULL ? "; " : "", why != NULL ? why : "");
        goto done;
    }
    if (mode == NULL || strcmp(mode, "emulate") != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s is a %s run; the model is taken from "
                 "what an emulate run measured", dir, mode != NULL ? mode : "(no mode)");
        goto done;
    }
    if (!(activated > 0) || num_receivers < 1) {
        snprintf(error_p, error_len, FROM_KEY ": %s has no model updates (summary.json: "
                 "metrics.model_updates %s)", dir, isnan(activated) ? "missing"
                                                                     : "has none activated");
        goto done;
    }
    if (measured_kind == NULL || strcmp(measured_kind, kind) != 0) {
        snprintf(error_p, error_len, FROM_KEY ": %s measured the %s transport, this workload "
                 "uses %s (train.transport.kind)", dir,
                 measured_kind != NULL ? measured_kind : "(unknown)", kind);
        goto done;
    }
    status = measured_shape(transport, &shape, error_p, error_len);
    if (status == KVIO_OK)
        status = read_updates_csv(dir, &sums, error_p, error_len);
    if (status != KVIO_OK)
        goto done;
    double rows = (double)sums.rows;
    kvio_xfer_measured_t measured = {.bytes = (uint64_t)llround(sums.bytes / rows),
                                     .transfer_ns = sums.transfer_ms / rows * 1e6,
                                     .write_ns = sums.write_ms / rows * 1e6,
                                     .arrival_ns = sums.arrival_ms / rows * 1e6};
    double bandwidth_gbps = 0;
    int64_t latency_ns = 0;
    if (kvio_xfer_model_fit(&shape, num_receivers, &measured, &latency_ns, &bandwidth_gbps) !=
        KVIO_OK) {
        snprintf(error_p, error_len, FROM_KEY ": %s: no bytes moved in its updates", dir);
        status = KVIO_ERR_CONFIG;
        goto done;
    }
    model->taken_bandwidth_gbps = bandwidth_gbps;
    model->taken_latency_ns = latency_ns;
    /* The checksums, as rates (they scale with bytes); the server's only
     * when that run verified. */
    model->taken_checksum_gbps = sums.checksum_ms > 0 ? sums.bytes / (sums.checksum_ms * 1e6)
                                                      : 0;
    json_t *update = json_object_get(config, "update");
    model->taken_verify_gbps = json_is_true(json_object_get(update, "verify")) &&
                                       sums.verify_rows > 0 && sums.verify_ms > 0
                                   ? measured.bytes * (double)sums.verify_rows /
                                         (sums.verify_ms * 1e6)
                                   : 0;
    model->taken = true;
    kvio_debug("model updates: from %s: %.3f GB/s, %.3f ms per update (%zu updates, %d serve "
               "ranks)", dir, bandwidth_gbps, (double)latency_ns / 1e6, sums.rows,
               num_receivers);
done:
    kvio_config_free(kvio_xfer_options, &shape);
    kvio_result_destroy(result);
    json_decref(summary);
    return status;
}
