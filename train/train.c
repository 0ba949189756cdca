/* The training rank: the step loop (emulated step times, slept or spun), the
 * weights buffer's versions and checksums, and the checkpoint policies. The
 * loop publishes through the transport wrapper, which sums host weights as
 * it moves them, and records, per version, the time it was ready and how
 * long the loop was blocked (training stall). */
#include "kvio/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/progress.h"
#include "kvio/rng.h"

static const char *const policy_names[] = {"every_n_steps", "interval", "adaptive", "never",
                                           NULL};
static const char *const wait_names[] = {"sleep", "spin", NULL};

static const kvio_opt_t checkpoint_options[] = {
    {.key = "policy", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_checkpoint_config_t, policy), .values = policy_names,
     .default_value = "every_n_steps",
     .help = "every_n_steps, interval, adaptive (learning curve vs measured cost), or never "
             "(the trainer steps beside serving and publishes nothing: the control of "
             "update.control: paired)"},
    {.key = "every_n_steps", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_checkpoint_config_t, every_n_steps), .default_value = "10",
     .flags = KVIO_OPT_HAS_MIN, .min = 1, .help = "publish every this many steps"},
    {.key = "interval", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_checkpoint_config_t, interval_ns), .default_value = "10s",
     .flags = KVIO_OPT_HAS_MIN, .min = 1000, .help = "publish when this much time has passed"},
    {.key = "loss", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_checkpoint_config_t, loss),
     .options = kvio_loss_options, .help = "adaptive: learning curve L(step) = a*step^-b + c"},
    {.key = "serving_rate", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_checkpoint_config_t, serving_rate), .default_value = "100",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "adaptive: requests per second served, the prior until the serve ranks' rate "
             "is measured"},
    {.key = "cost_weight", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_checkpoint_config_t, cost_weight), .default_value = "1.0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "adaptive: loss-per-request-per-second worth one second of training stall"},
    {.key = "initial_cost", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_checkpoint_config_t, initial_cost_ns), .default_value = "100ms",
     .help = "adaptive: update cost assumed before the first one is measured"},
    {.key = NULL},
};

const kvio_opt_t kvio_train_options[] = {
    {.key = "step_time", .type = KVIO_OPT_DIST, .offset = offsetof(kvio_train_config_t, step_time),
     .unit = KVIO_UNIT_DURATION, .default_value = "{dist: constant, value: 100ms}",
     .help = "time of one emulated training step"},
    {.key = "wait", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_train_config_t, wait),
     .values = wait_names, .default_value = "sleep", .help = "emulate a step by sleeping or spinning"},
    {.key = "steps", .type = KVIO_OPT_INT, .offset = offsetof(kvio_train_config_t, steps),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "steps to run (0: until the run's duration)"},
    {.key = "bytes", .type = KVIO_OPT_SIZE, .offset = offsetof(kvio_train_config_t, bytes),
     .default_value = "64MiB", .flags = KVIO_OPT_HAS_MIN, .min = 4096,
     .help = "size of the weights (until model presets give it from the shape)"},
    {.key = "checkpoint", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_train_config_t, checkpoint), .options = checkpoint_options,
     .help = "when a version is published"},
    {.key = "transport", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_train_config_t, transport), .options = kvio_xfer_options,
     .help = "how the weights travel to the serve ranks"},
    {.key = "die_after_versions", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_train_config_t, die_after_versions), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fault injection: the trainer stops, as if it died between updates, after "
             "publishing this many versions, without announcing the end (0: never)"},
    {.key = NULL},
};

uint64_t kvio_train_weights_bytes(const kvio_train_config_t *config)
{
    return config->bytes;
}

bool kvio_checkpoint_due(const kvio_checkpoint_config_t *config, int64_t step,
                         int64_t now_ns, int64_t last_step, int64_t last_ns,
                         int64_t cost_ns, double served_rate)
{
    switch (config->policy) {
    case KVIO_CHECKPOINT_EVERY_N_STEPS:
        return step % config->every_n_steps == 0;
    case KVIO_CHECKPOINT_INTERVAL:
        return now_ns - last_ns >= config->interval_ns;
    case KVIO_CHECKPOINT_NEVER:
        return false;
    default: {
        /* Viper's idea: the loss the servers would shed per second with the
         * new weights, against what an update costs the trainer. */
        double gain = (kvio_loss_at(&config->loss, (double)(last_step > 0 ? last_step : 1)) -
                       kvio_loss_at(&config->loss, (double)step)) *
                      (served_rate >= 0 ? served_rate : config->serving_rate);
        double cost_s = (double)(cost_ns > 0 ? cost_ns : config->initial_cost_ns) / 1e9;
        return gain >= config->cost_weight * cost_s;
    }
    }
}

kvio_status_t kvio_served_meter_init(kvio_served_meter_t *meter, int num_ranks,
                                     int64_t start_ns)
{
    *meter = (kvio_served_meter_t){.num_ranks = num_ranks, .start_ns = start_ns};
    meter->ranks = calloc((size_t)(num_ranks > 0 ? num_ranks : 1), sizeof(*meter->ranks));
    return meter->ranks != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
}

void kvio_served_meter_free(kvio_served_meter_t *meter)
{
    free(meter->ranks);
    meter->ranks = NULL;
}

void kvio_served_meter_report(kvio_served_meter_t *meter, int rank,
                              const kvio_served_report_t *report)
{
    if (rank < 0 || rank >= meter->num_ranks)
        return;
    struct kvio_served_rank *r = &meter->ranks[rank];
    if (!r->seen) {
        r->mark = (kvio_served_report_t){.t_ns = meter->start_ns, .count = 0};
        r->seen = true;
    }
    r->latest = *report;
    /* The window slides by whole windows: the rate is over the reports since
     * the mark before last, one to two windows back. */
    if (report->t_ns - r->mark.t_ns >= KVIO_SERVED_WINDOW_NS) {
        r->prev = r->mark;
        r->has_prev = true;
        r->mark = *report;
    }
}

double kvio_served_meter_rate(const kvio_served_meter_t *meter)
{
    double rate = 0;
    bool any = false;
    for (int i = 0; i < meter->num_ranks; i++) {
        const struct kvio_served_rank *r = &meter->ranks[i];
        if (!r->seen)
            continue;
        const kvio_served_report_t *from = r->has_prev ? &r->prev : &r->mark;
        if (r->latest.t_ns <= from->t_ns)
            continue;
        rate += (double)(r->latest.count - from->count) * 1e9 /
                (double)(r->latest.t_ns - from->t_ns);
        any = true;
    }
    return any ? rate : -1;
}

static void wait_until(int wait, uint64_t deadline_ns)
{
    if (wait == KVIO_WAIT_SLEEP) {
        uint64_t now = kvio_time_ns();
        if (now < deadline_ns) {
            struct timespec nap = {.tv_sec = (time_t)((deadline_ns - now) / 1000000000ull),
                                   .tv_nsec = (long)((deadline_ns - now) % 1000000000ull)};
            nanosleep(&nap, NULL);
        }
    }
    while (kvio_time_ns() < deadline_ns) {
    }
}

struct kvio_trainer {
    const kvio_train_config_t *config;
    uint64_t seed;
    kvio_xfer_t *xfer;
    uint64_t bytes;
    kvio_device_t *device; /* the weights' device (NULL: host memory) */
    void *weights;         /* the buffer the optimizer writes (the mirror on a device) */
    void *mirror;
};

kvio_status_t kvio_trainer_create(const kvio_train_config_t *config, uint64_t seed,
                                  kvio_xfer_t *xfer, kvio_trainer_t **trainer_p, char *error_p,
                                  size_t error_len)
{
    kvio_trainer_t *trainer = calloc(1, sizeof(*trainer));
    if (trainer == NULL) {
        snprintf(error_p, error_len, "trainer: out of memory");
        return KVIO_ERR_NOMEM;
    }
    *trainer = (kvio_trainer_t){.config = config, .seed = seed, .xfer = xfer,
                                .bytes = kvio_train_weights_bytes(config),
                                .device = kvio_xfer_device(xfer),
                                .weights = kvio_xfer_send_buffer(xfer)};
    /* Weights in GPU memory: the optimizer's writes and the checksum happen
     * on a pinned host mirror, uploaded whole after each change (inside the
     * step; from pageable memory the upload would run at a fraction of the
     * link's speed). */
    if (trainer->device != NULL) {
        if (kvio_device_host_alloc(trainer->device, trainer->bytes, &trainer->mirror) !=
            KVIO_OK) {
            snprintf(error_p, error_len, "trainer: a %llu-byte pinned host mirror of the GPU "
                     "weights: %s", (unsigned long long)trainer->bytes,
                     kvio_device_error(trainer->device));
            free(trainer);
            return KVIO_ERR_NOMEM;
        }
        trainer->weights = trainer->mirror;
    }
    kvio_weights_fill_as(trainer->weights, trainer->bytes, seed, kvio_xfer_data(xfer));
    *trainer_p = trainer;
    return KVIO_OK;
}

void kvio_trainer_destroy(kvio_trainer_t *trainer)
{
    if (trainer == NULL)
        return;
    kvio_device_host_free(trainer->device, trainer->mirror); /* NULL without a device */
    free(trainer);
}

kvio_status_t kvio_train_run(const kvio_train_config_t *config, uint64_t seed,
                             kvio_rte_t *rte, kvio_xfer_t *xfer, int64_t duration_ns,
                             volatile sig_atomic_t *stop, kvio_train_result_t *result_p,
                             char *error_p, size_t error_len)
{
    *result_p = (kvio_train_result_t){0};
    kvio_trainer_t *trainer = NULL;
    kvio_status_t status = kvio_trainer_create(config, seed, xfer, &trainer, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_trainer_run(trainer, rte, duration_ns, stop, result_p, error_p, error_len);
    kvio_trainer_destroy(trainer);
    return status;
}

/* The serve ranks' reports of requests served that have arrived (adaptive
 * checkpoints): every rank but this one may send them; a lost rank's are
 * no longer counted, its loss is the receivers' and the run's to report. */
static void take_served_reports(kvio_rte_t *rte, kvio_served_meter_t *meter)
{
    for (int from = 0; from < kvio_rte_size(rte); from++) {
        if (from == kvio_rte_index(rte))
            continue;
        void *data;
        size_t length;
        while (kvio_rte_try_recv(rte, from, KVIO_UPDATE_TAG_SERVED, &data, &length) == KVIO_OK) {
            if (length == sizeof(kvio_served_report_t))
                kvio_served_meter_report(meter, from, data);
            free(data);
        }
    }
}

kvio_status_t kvio_trainer_run(kvio_trainer_t *trainer, kvio_rte_t *rte, int64_t duration_ns,
                               volatile sig_atomic_t *stop, kvio_train_result_t *result_p,
                               char *error_p, size_t error_len)
{
    *result_p = (kvio_train_result_t){0};
    const kvio_train_config_t *config = trainer->config;
    kvio_xfer_t *xfer = trainer->xfer;
    uint64_t bytes = trainer->bytes;
    kvio_device_t *device = trainer->device;
    void *weights = trainer->weights, *mirror = trainer->mirror;
    kvio_rng_t rng;
    kvio_rng_seed(&rng, trainer->seed, (uint32_t)kvio_rte_index(rte), "train.step_time");
    size_t capacity = 16, count = 0;
    kvio_train_record_t *records = malloc(capacity * sizeof(*records));
    if (records == NULL) {
        snprintf(error_p, error_len, "trainer: out of memory");
        return KVIO_ERR_NOMEM;
    }
    kvio_status_t status = KVIO_OK;
    bool uploaded = device == NULL;
    uint64_t version = 0;
    bool dirty = true; /* the buffer must change before the next checksum */
    int64_t start_ns = kvio_rte_time_ns(rte), last_ns = start_ns, last_step = 0,
            cost_ns = 0;
    int64_t step = 0;
    bool adaptive = config->checkpoint.policy == KVIO_CHECKPOINT_ADAPTIVE;
    kvio_served_meter_t served = {0};
    if (adaptive && kvio_served_meter_init(&served, kvio_rte_size(rte), start_ns) != KVIO_OK) {
        free(records);
        snprintf(error_p, error_len, "trainer: out of memory");
        return KVIO_ERR_NOMEM;
    }
    /* Progress: steps when the run counts them, else seconds of its duration. */
    kvio_progress_t *progress = NULL;
    kvio_progress_create(config->steps > 0 ? "emulate: training steps" : "emulate: training s",
                         config->steps > 0 ? (uint64_t)config->steps
                                           : (uint64_t)(duration_ns / 1000000000),
                         &progress);
    for (;;) {
        if (progress != NULL)
            kvio_progress_update(progress, config->steps > 0
                                               ? (uint64_t)step
                                               : (uint64_t)((kvio_rte_time_ns(rte) - start_ns) /
                                                            1000000000));
        if (config->die_after_versions > 0 && version >= (uint64_t)config->die_after_versions) {
            snprintf(error_p, error_len, "trainer: injected fault: the trainer died after "
                     "publishing version %llu", (unsigned long long)version);
            status = KVIO_ERR_INTERRUPTED;
            goto done;
        }
        if (config->steps > 0 ? step >= config->steps
                              : kvio_rte_time_ns(rte) - start_ns >= duration_ns)
            break;
        if (stop != NULL && *stop)
            break; /* interrupted: announce the end of what was published */
        uint64_t step_ns = (uint64_t)fmax(0.0, kvio_dist_sample(&config->step_time, &rng));
        uint64_t step_end = kvio_time_ns() + step_ns;
        if (dirty) {
            /* The optimizer's writes; with deltas, only the elements the
             * next delta carries change. */
            const kvio_delta_t *delta = kvio_xfer_delta(xfer);
            if (delta != NULL)
                kvio_delta_mutate(delta, weights, bytes, version + 1);
            else
                kvio_weights_mutate(weights, bytes, version + 1);
            dirty = false;
            uploaded = device == NULL;
        }
        if (!uploaded) {
            status = kvio_device_copy(device, kvio_xfer_send_buffer(xfer), mirror, bytes);
            if (status != KVIO_OK) {
                snprintf(error_p, error_len, "trainer: uploading the weights to the GPU: %s",
                         kvio_device_error(device));
                goto done;
            }
            uploaded = true;
        }
        wait_until(config->wait, step_end);
        step++;
        if (stop != NULL && *stop)
            break; /* stopped during the step: no new version (a big one can outlast
                      mpirun's grace before SIGKILL) */
        int64_t now = kvio_rte_time_ns(rte);
        double served_rate = -1;
        if (adaptive) {
            take_served_reports(rte, &served);
            served_rate = kvio_served_meter_rate(&served);
        }
        if (!kvio_checkpoint_due(&config->checkpoint, step, now - start_ns, last_step,
                                 last_ns - start_ns, cost_ns, served_rate))
            continue;
        kvio_train_record_t record = {
            .version = ++version, .step = step, .t_ready_ns = now,
            .serving_rate = served_rate >= 0 ? served_rate : config->checkpoint.serving_rate,
            .serving_rate_measured = served_rate >= 0};
        kvio_xfer_publish_times_t times;
        if (device == NULL) {
            /* The transport sums the buffer as it puts it when it can (else
             * in one pass before the first byte moves). */
            status = kvio_xfer_publish_and_checksum(xfer, version, now, &times);
        } else {
            /* GPU weights: summed on the host mirror the upload came from. */
            status = kvio_xfer_publish(xfer, version, kvio_weights_checksum(weights, bytes),
                                       now, &times);
        }
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "trainer: version %llu: %s",
                     (unsigned long long)version, kvio_xfer_error(xfer));
            goto done;
        }
        record.checksum = times.checksum;
        record.t_publish_start_ns = times.start_ns;
        record.t_publish_end_ns = times.end_ns;
        record.stall_ns = kvio_rte_time_ns(rte) - now;
        record.credit_ns = times.credit_ns;
        record.bytes_moved = times.bytes_moved;
        cost_ns = record.stall_ns;
        last_step = step;
        last_ns = now;
        dirty = true;
        if (count == capacity) {
            kvio_train_record_t *bigger = realloc(records, 2 * capacity * sizeof(*records));
            if (bigger == NULL) {
                status = KVIO_ERR_NOMEM;
                snprintf(error_p, error_len, "trainer: out of memory");
                goto done;
            }
            records = bigger;
            capacity *= 2;
        }
        records[count++] = record;
    }
    status = kvio_xfer_finish(xfer, version);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "trainer: %s", kvio_xfer_error(xfer));
done:
    kvio_progress_destroy(progress);
    kvio_served_meter_free(&served);
    *result_p = (kvio_train_result_t){.records = records, .count = count, .steps = step,
                                      .t_start_ns = start_ns,
                                      .t_end_ns = kvio_rte_time_ns(rte)};
    return status;
}

void kvio_train_result_free(kvio_train_result_t *result)
{
    free(result->records);
    memset(result, 0, sizeof(*result));
}
