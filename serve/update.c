/* The serve rank's receive loop: emulated iterations; between them (or, with
 * apply: shadow, in their idle time) it polls the transport, fetches the new
 * version chunk by chunk into the shadow slot, verifies it with a streaming
 * XXH3-64 that takes each piece as it lands (fetched, or, for a push, as
 * the transport says it is in, before the notice, so that verification ends
 * with the transfer), and swaps slots at an iteration boundary. It stamps
 * t_verified and t_activated; the transport wrapper stamped the earlier
 * stages. When the trainer is lost (update.on_trainer_loss: serve) it keeps
 * serving the active version to the run's end. */
#include "kvio/update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/log.h"

static const char *const apply_names[] = {"shadow", "stall", NULL};
static const char *const serving_names[] = {"emulated", "engine", NULL};
static const char *const trainer_loss_names[] = {"serve", "fail", NULL};

static const char *const cache_names[] = {"flush", "version", "keep", NULL};
static const char *const in_flight_names[] = {"keep", "abort", "wait", NULL};
static const char *const colocated_names[] = {"false", "true", "release", NULL};

static const kvio_opt_t activate_options[] = {
    {.key = "cache", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_activate_t, cache),
     .values = cache_names, .default_value = "flush",
     .help = "the prefix cache when a version activates: flush: every cached block loses its "
             "hash, as vLLM's reset and SGLang's flush on a weight update; version: entries "
             "hit only under the version that cached them; keep: stale hits are allowed and "
             "counted (stale_hit_tokens)"},
    {.key = NULL},
};

const kvio_opt_t kvio_update_options[] = {
    {.key = "on_activate", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_update_config_t, on_activate), .options = activate_options,
     .help = "what a version's activation does to a serve rank's engine"},
    {.key = "in_flight", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, in_flight),
     .values = in_flight_names, .default_value = "keep",
     .help = "the requests running when a version activates: keep: they go on with their KV "
             "from the old weights (mixed_version_tokens counts their tokens); abort: they "
             "are preempted and recomputed on the new weights (update_recomputed_tokens); "
             "wait: admission stops until they have finished, then the version activates (the "
             "drain is an inference stall)"},
    {.key = "colocated", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, colocated),
     .values = colocated_names, .default_value = "false",
     .help = "training and serving share device memory: true: while an update is on its way "
             "in (transfer to activation) the KV pool lends the incoming buffer's bytes, "
             "preempting what no longer fits; release: the whole pool is released (sleep "
             "mode) and rebuilt cold; false: the update has memory of its own"},
    {.key = "interference_window", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_update_config_t, interference_window_ns), .default_value = "10s",
     .flags = KVIO_OPT_HAS_MIN, .min = 1000000,
     .help = "serving after each activation, against as long before it, on the same rank: "
             "summary.json update_interference and updates.csv's ratio columns"},
    {.key = "apply", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, apply),
     .values = apply_names, .default_value = "shadow",
     .help = "shadow: receive beside the active weights, swap at an iteration boundary; "
             "stall: stop iterating until the update is in"},
    {.key = "verify", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_update_config_t, verify),
     .default_value = "true", .help = "checksum the whole buffer before activating it"},
    {.key = "iteration", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_update_config_t, iteration_ns), .default_value = "20ms",
     .flags = KVIO_OPT_HAS_MIN, .min = 1000, .help = "one emulated serving iteration"},
    {.key = "corrupt_offset", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_update_config_t, corrupt_offset), .default_value = "-1",
     .flags = KVIO_OPT_HAS_MIN, .min = -1,
     .help = "fault injection: flip this byte of every received version (-1: never)"},
    {.key = "serving", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, serving),
     .values = serving_names, .default_value = "emulated",
     .help = "emulate mode: emulated iterations, or the real-time engine serving the stream "
             "(the coupled run)"},
    {.key = "die_during_version", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_update_config_t, die_during_version), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fault injection: serve rank die_rank stops, as if it died, while receiving "
             "this version or the first newer one it sees (0: never); the trainer and the "
             "other ranks must fail within ranks.timeout"},
    {.key = "die_rank", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_update_config_t, die_rank), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "fault injection: the rank that die_during_version stops (serve ranks are "
             "1..ranks.serve)"},
    {.key = "on_trainer_loss", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_update_config_t, on_trainer_loss), .values = trainer_loss_names,
     .default_value = "serve",
     .help = "the training rank lost (died, its transport failed): serve: the serve ranks "
             "keep serving their last verified version until the run ends, then the run "
             "fails (complete: false) reporting model_updates.trainer_lost; fail: every "
             "rank ends with an error at once"},
    {.key = NULL},
};

/* Bytes checksummed per step of the loop (keeps iterations responsive). */
#define VERIFY_STEP (4u << 20)

typedef struct serve_state {
    const kvio_update_config_t *config;
    kvio_rte_t *rte;
    kvio_xfer_t *xfer;
    int active_slot;
    uint64_t active_version;
    bool pending;
    kvio_xfer_receive_t receive; /* the newest version's notice (not the end's) */
    kvio_xfer_checksum_t *checksum; /* the receiver's sum of the version coming in */
    uint64_t verified_bytes;        /* bytes of it summed */
    uint64_t landed_version;        /* summed before its notice (0: none) ... */
    int landed_slot;                /* ... into this slot */
    bool verified;
    uint64_t digest;           /* the pending update's sum, once verified */
    bool fetch_sums;           /* the transport sums the slot as its fetch fills it
                                  (no corrupt_offset fault to flip a byte after) */
    bool corrupted;            /* fault injection done for the pending update */
    int64_t t_verified_ns;     /* when the update was checked (or complete) */
    int64_t drain_start_ns;    /* in_flight: wait: when admission stopped (0: it runs) */
    bool end_seen;
    void *staging;             /* slots in GPU memory: host buffer to verify through */
    char error[512];           /* a GPU slot's copy failed (else the transport's error) */
    uint64_t last_version;     /* the end notice's: the last version published */
    int sender;
    bool trainer_lost;         /* on_trainer_loss: serve, and the trainer is gone */
    uint64_t owed_version;     /* the trainer-lost notice's last whole version: still
                                  to come by a chain (from a live upstream server) */
    kvio_update_result_t result;
    size_t capacity;
} serve_state_t;

static kvio_status_t add_record(serve_state_t *state, const kvio_update_record_t *record)
{
    if (state->result.count == state->capacity) {
        size_t capacity = state->capacity ? 2 * state->capacity : 16;
        kvio_update_record_t *bigger = realloc(state->result.records,
                                               capacity * sizeof(*bigger));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        state->result.records = bigger;
        state->capacity = capacity;
    }
    state->result.records[state->result.count++] = *record;
    return KVIO_OK;
}

/* How far the checksum may go in a slot that holds available bytes of the
 * version: not past the byte that the corrupt_offset fault flips once the
 * whole version is in, until it is flipped (it is summed after the flip). */
static uint64_t sum_limit(const kvio_update_config_t *config, uint64_t available, bool flipped)
{
    if (config->corrupt_offset >= 0 && !flipped && (uint64_t)config->corrupt_offset < available)
        return (uint64_t)config->corrupt_offset;
    return available;
}

/* Sums the next bounded piece of slot, from verified_bytes up to limit. */
static kvio_status_t sum_piece(serve_state_t *state, int slot, uint64_t limit)
{
    const char *buffer = kvio_xfer_slot(state->xfer, slot);
    uint64_t length = limit - state->verified_bytes;
    if (length > VERIFY_STEP)
        length = VERIFY_STEP;
    const void *piece = buffer + state->verified_bytes;
    kvio_device_t *device = kvio_xfer_device(state->xfer);
    if (device != NULL) {
        /* GPU slots are checksummed through a pinned host buffer. */
        kvio_status_t status = kvio_device_copy(device, state->staging, piece, length);
        if (status != KVIO_OK) {
            snprintf(state->error, sizeof(state->error),
                     "reading a GPU slot to verify it: %s", kvio_device_error(device));
            return status;
        }
        piece = state->staging;
    }
    kvio_xfer_checksum_update(state->checksum, piece, length);
    state->verified_bytes += length;
    return KVIO_OK;
}

/* Before a version's notice: sums what the transport says has landed of it
 * (the slot that is not active), so that verification ends with the
 * transfer. The sum is taken over by poll_once when the notice names the
 * same version and slot; a version whose notice never comes (its sender
 * died) is forgotten. */
static kvio_status_t sum_landed(serve_state_t *state, bool *worked_p)
{
    kvio_xfer_landed_t landed;
    if (!state->config->verify || state->end_seen || state->trainer_lost ||
        kvio_xfer_landed(state->xfer, &landed) != KVIO_OK)
        return KVIO_OK;
    if (landed.version <= state->receive.meta.version || landed.slot == state->active_slot)
        return KVIO_OK; /* old news, or not a slot a new version may land in */
    if (landed.version != state->landed_version || landed.slot != state->landed_slot) {
        kvio_xfer_checksum_reset(state->checksum);
        state->verified_bytes = 0;
        state->landed_version = landed.version;
        state->landed_slot = landed.slot;
    }
    uint64_t limit = sum_limit(state->config, landed.bytes, false); /* nothing flipped yet */
    if (state->verified_bytes >= limit)
        return KVIO_OK;
    *worked_p = true;
    return sum_piece(state, landed.slot, limit);
}

/* One bounded piece of work on the pending update (or, with none pending,
 * on one still landing); true when it did some. Data that a fetch brought
 * in is summed as it comes, up to what is in place. */
static kvio_status_t work_step(serve_state_t *state, bool *worked_p)
{
    *worked_p = false;
    if (!state->pending)
        return sum_landed(state, worked_p);
    kvio_xfer_receive_t *receive = &state->receive;
    if (state->config->die_during_version > 0 &&
        receive->meta.version >= (uint64_t)state->config->die_during_version &&
        kvio_rte_index(state->rte) == state->config->die_rank) {
        /* Fault injection: this rank stops mid-update without acknowledging. */
        snprintf(state->error, sizeof(state->error),
                 "injected fault: serve rank %d died while receiving version %llu",
                 kvio_rte_index(state->rte), (unsigned long long)receive->meta.version);
        return KVIO_ERR_INTERRUPTED;
    }
    if (!receive->complete) {
        uint64_t before = receive->offset;
        kvio_status_t status = kvio_xfer_fetch_step(state->xfer, receive);
        if (status != KVIO_OK)
            return status;
        /* Nothing moved: the rest has not come yet (a bucket's notice);
         * once the trainer is lost it never will. */
        *worked_p = receive->offset != before || receive->complete;
        if (!*worked_p && state->trainer_lost) {
            snprintf(state->error, sizeof(state->error), "version %llu was still arriving "
                     "when the trainer was lost", (unsigned long long)receive->meta.version);
            return KVIO_ERR_PEER;
        }
        if (receive->complete && !state->config->verify)
            state->t_verified_ns = kvio_rte_time_ns(state->rte);
    }
    if (receive->complete && !state->corrupted && state->config->corrupt_offset >= 0 &&
        (uint64_t)state->config->corrupt_offset < receive->meta.bytes) {
        /* Fault injection: one flipped bit once the data is in. */
        unsigned char *buffer = kvio_xfer_slot(state->xfer, receive->slot);
        kvio_device_t *device = kvio_xfer_device(state->xfer);
        if (device == NULL) {
            buffer[state->config->corrupt_offset] ^= 0x01;
        } else {
            unsigned char byte = 0;
            kvio_status_t status = kvio_device_copy(device, &byte,
                                                    buffer + state->config->corrupt_offset, 1);
            byte ^= 0x01;
            if (status == KVIO_OK)
                status = kvio_device_copy(device, buffer + state->config->corrupt_offset,
                                          &byte, 1);
            if (status != KVIO_OK) {
                snprintf(state->error, sizeof(state->error), "corrupting a GPU slot: %s",
                         kvio_device_error(device));
                return status;
            }
        }
        state->corrupted = true;
    }
    uint64_t fetched = 0;
    if (state->config->verify && !state->verified && state->fetch_sums) {
        /* The fetch summed the slot as it filled it. */
        if (receive->complete && kvio_xfer_fetched_sum(state->xfer, receive->meta.version,
                                                       &fetched)) {
            state->digest = fetched;
            state->verified = true;
            state->t_verified_ns = kvio_rte_time_ns(state->rte);
        }
    } else if (state->config->verify && !state->verified) {
        uint64_t limit = sum_limit(state->config,
                                   receive->complete ? receive->meta.bytes : receive->offset,
                                   state->corrupted);
        if (state->verified_bytes < limit) {
            *worked_p = true;
            kvio_status_t status = sum_piece(state, receive->slot, limit);
            if (status != KVIO_OK)
                return status;
        }
        if (receive->complete && state->verified_bytes >= receive->meta.bytes) {
            state->digest = kvio_xfer_checksum_digest(state->checksum);
            state->verified = true;
            state->t_verified_ns = kvio_rte_time_ns(state->rte);
        }
    }
    return KVIO_OK;
}

static bool ready_to_activate(const serve_state_t *state)
{
    return state->pending && state->receive.complete &&
           (state->config->corrupt_offset < 0 || state->corrupted ||
            (uint64_t)state->config->corrupt_offset >= state->receive.meta.bytes) &&
           (!state->config->verify || state->verified);
}

/* At an iteration boundary: swap slots (or reject a bad checksum). */
static kvio_status_t activate(serve_state_t *state)
{
    kvio_xfer_receive_t *receive = &state->receive;
    int64_t now = kvio_rte_time_ns(state->rte);
    (void)now;
    kvio_update_record_t record = {
        .version = receive->meta.version, .bytes = receive->meta.bytes,
        .rank = kvio_rte_index(state->rte), .checksum_ok = 1,
        .verified = state->config->verify,
        .skipped_before = (int32_t)(receive->meta.version - state->active_version - 1),
        .t_ready_ns = receive->meta.t_ready_ns, .t_xfer_start_ns = receive->t_xfer_start_ns,
        .t_xfer_end_ns = receive->t_xfer_end_ns, .t_notified_ns = receive->t_notified_ns,
        .t_verified_ns = state->t_verified_ns ? state->t_verified_ns : now,
    };
    if (state->config->verify && state->digest != receive->meta.checksum) {
        record.checksum_ok = 0;
        state->result.checksum_mismatches++;
        kvio_warn("rank %d: version %llu failed its checksum; keeping version %llu",
                  record.rank, (unsigned long long)record.version,
                  (unsigned long long)state->active_version);
    } else {
        state->active_slot = receive->slot;
        state->active_version = receive->meta.version;
        record.t_activated_ns = kvio_rte_time_ns(state->rte);
    }
    kvio_status_t status = add_record(state, &record);
    if (status == KVIO_OK)
        status = kvio_xfer_ack(state->xfer, receive, 1 - state->active_slot);
    state->pending = false;
    return status;
}

/* With on_trainer_loss: serve, the trainer is lost: stop taking notices and
 * keep serving the active version. A version whose notice came is whole at
 * its source (the notice follows the data), so it may still be fetched,
 * verified and activated; one whose fetch fails is dropped (work_or_drop).
 * The version the trainer was sending when it died was never announced. */
static void lose_trainer(serve_state_t *state, const char *reason)
{
    state->trainer_lost = true;
    state->result.trainer_lost_ns = kvio_rte_time_ns(state->rte);
    snprintf(state->result.trainer_lost_reason, sizeof(state->result.trainer_lost_reason), "%s",
             reason);
    kvio_warn("rank %d: training rank %d lost (%s); serving version %llu until the run ends",
              kvio_rte_index(state->rte), state->sender, reason,
              (unsigned long long)state->active_version);
}

/* The trainer's liveness (heartbeats, never its pace): a training rank
 * that failed or fell silent before its end notice is lost. */
static kvio_status_t check_peer(serve_state_t *state, char *error_p, size_t error_len)
{
    int self = kvio_rte_index(state->rte), sender = state->sender;
    bool serve_on = state->config->on_trainer_loss == KVIO_TRAINER_LOSS_SERVE;
    if (state->trainer_lost)
        return KVIO_OK;
    if (serve_on) {
        void *data = NULL;
        size_t length = 0;
        if (kvio_rte_try_recv(state->rte, sender, KVIO_UPDATE_TAG_TRAINER_LOST, &data,
                              &length) == KVIO_OK) {
            kvio_trainer_lost_notice_t notice = {0};
            memcpy(&notice, data, length < sizeof(notice) ? length : sizeof(notice));
            notice.reason[sizeof(notice.reason) - 1] = '\0';
            free(data);
            lose_trainer(state, notice.reason);
            state->owed_version = notice.last_version;
            return KVIO_OK;
        }
    }
    char reason[512];
    kvio_status_t status = kvio_rte_peer_check(state->rte, sender, !state->end_seen,
                                               state->pending ? "the rest of an update"
                                                              : "the end of updates",
                                               reason, sizeof(reason));
    if (status == KVIO_OK)
        return KVIO_OK;
    if (serve_on) {
        lose_trainer(state, reason);
        return KVIO_OK;
    }
    snprintf(error_p, error_len, "rank %d: the training rank %d is lost: %s", self, sender,
             reason);
    return status;
}

/* With on_trainer_loss: serve, a transport whose connection is gone for good
 * (Redis that stayed down past reconnecting) cuts the serve ranks off from
 * the trainer as surely as its death: they keep their version. True when
 * the failure was taken that way. */
static bool transport_lost(serve_state_t *state, kvio_status_t status)
{
    if (status != KVIO_ERR_CONNECTION || state->trainer_lost ||
        state->config->on_trainer_loss != KVIO_TRAINER_LOSS_SERVE)
        return false;
    char reason[sizeof(state->result.trainer_lost_reason)];
    snprintf(reason, sizeof(reason), "the transport failed: %.200s",
             kvio_xfer_error(state->xfer));
    lose_trainer(state, reason);
    return true;
}

static kvio_status_t poll_once(serve_state_t *state, char *error_p, size_t error_len)
{
    kvio_xfer_receive_t receive;
    kvio_status_t status = kvio_xfer_poll(state->xfer, 1 - state->active_slot, &receive);
    if (status == KVIO_INPROGRESS)
        return KVIO_OK;
    if (status != KVIO_OK) {
        if (transport_lost(state, status))
            return KVIO_OK;
        if (state->trainer_lost) {
            /* Polling for a version owed after the loss: the transport went
             * too; keep what is active (the loss is already reported). */
            kvio_warn("rank %d: version %llu will not arrive (%s); keeping version %llu",
                      kvio_rte_index(state->rte), (unsigned long long)state->owed_version,
                      kvio_xfer_error(state->xfer),
                      (unsigned long long)state->active_version);
            state->owed_version = 0;
            return KVIO_OK;
        }
        snprintf(error_p, error_len, "rank %d: %s", kvio_rte_index(state->rte),
                 kvio_xfer_error(state->xfer));
        return status;
    }
    if (receive.meta.flags & KVIO_XFER_META_END) {
        state->end_seen = true;
        state->last_version = receive.meta.version;
        return KVIO_OK;
    }
    state->pending = true;
    state->receive = receive;
    state->verified = false;
    state->corrupted = false;
    state->t_verified_ns = 0;
    if (receive.complete && !state->config->verify)
        state->t_verified_ns = receive.t_notified_ns;
    /* What was summed while the version landed counts if it is this one. */
    if (state->landed_version != receive.meta.version || state->landed_slot != receive.slot) {
        kvio_xfer_checksum_reset(state->checksum);
        state->verified_bytes = 0;
    }
    state->landed_version = 0;
    return KVIO_OK;
}

static void nap(int64_t ns)
{
    struct timespec pause = {.tv_sec = 0, .tv_nsec = ns > 100000 ? 100000 : ns};
    if (pause.tv_nsec > 0)
        nanosleep(&pause, NULL);
}

kvio_status_t kvio_update_serve(const kvio_update_config_t *config, kvio_rte_t *rte,
                                kvio_xfer_t *xfer, int sender, int64_t serve_until_ns,
                                kvio_update_result_t *result_p, char *error_p,
                                size_t error_len)
{
    return kvio_update_serve_with(config, rte, xfer, sender, serve_until_ns, NULL, NULL,
                                  result_p, error_p, error_len);
}

kvio_status_t kvio_update_announce_trainer_lost(kvio_rte_t *rte, const int *ranks, int count,
                                                const kvio_trainer_lost_notice_t *notice)
{
    kvio_status_t status = KVIO_OK;
    for (int i = 0; i < count && status == KVIO_OK; i++)
        status = kvio_rte_send(rte, ranks[i], KVIO_UPDATE_TAG_TRAINER_LOST, notice,
                               sizeof(*notice));
    return status;
}

/* One bounded piece of work on the pending update. A version whose data is
 * gone at its source (KVIO_ERR_NOT_FOUND: deleted, or lost when Redis
 * restarted), or whose fetch fails once the trainer is lost, is skipped:
 * recorded without activation, with a warning, and the active one kept. */
static kvio_status_t work_or_drop(serve_state_t *state, bool *worked_p, char *error_p,
                                  size_t error_len)
{
    bool pending = state->pending; /* else the work was on a version still landing */
    kvio_status_t status = work_step(state, worked_p);
    if (status == KVIO_OK)
        return KVIO_OK;
    int self = kvio_rte_index(state->rte);
    const char *why = state->error[0] ? state->error : kvio_xfer_error(state->xfer);
    transport_lost(state, status);
    if (pending && (status == KVIO_ERR_NOT_FOUND ||
                    (state->trainer_lost && status != KVIO_ERR_INTERRUPTED))) {
        const kvio_xfer_receive_t *receive = &state->receive;
        kvio_warn("rank %d: skipping version %llu (%s); keeping version %llu", self,
                  (unsigned long long)receive->meta.version, why,
                  (unsigned long long)state->active_version);
        kvio_update_record_t record = {
            .version = receive->meta.version, .bytes = receive->meta.bytes, .rank = self,
            .checksum_ok = 1, .t_ready_ns = receive->meta.t_ready_ns,
            .t_xfer_start_ns = receive->t_xfer_start_ns, .t_notified_ns = receive->t_notified_ns,
        };
        state->pending = false;
        status = add_record(state, &record);
        if (status == KVIO_OK && !state->trainer_lost)
            status = kvio_xfer_ack(state->xfer, receive, 1 - state->active_slot);
        if (status == KVIO_OK)
            return KVIO_OK;
        why = kvio_strerror(status);
    }
    snprintf(error_p, error_len, "rank %d: %s", self, why);
    return status;
}

kvio_status_t kvio_update_serve_with(const kvio_update_config_t *config, kvio_rte_t *rte,
                                     kvio_xfer_t *xfer, int sender, int64_t serve_until_ns,
                                     const kvio_update_server_t *server,
                                     volatile sig_atomic_t *stop,
                                     kvio_update_result_t *result_p, char *error_p,
                                     size_t error_len)
{
    serve_state_t state = {.config = config, .rte = rte, .xfer = xfer, .active_slot = 1,
                           .sender = sender,
                           .fetch_sums = kvio_xfer_sums_fetch(xfer) &&
                                         config->corrupt_offset < 0};
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (kvio_xfer_checksum_create(&state.checksum) != KVIO_OK) {
        snprintf(error_p, error_len, "rank %d: out of memory", kvio_rte_index(rte));
        goto done;
    }
    if (kvio_xfer_device(xfer) != NULL && config->verify &&
        kvio_device_host_alloc(kvio_xfer_device(xfer), VERIFY_STEP, &state.staging) != KVIO_OK) {
        snprintf(error_p, error_len, "rank %d: %s", kvio_rte_index(rte),
                 kvio_device_error(kvio_xfer_device(xfer)));
        goto done;
    }
    status = KVIO_OK;
    state.result.t_start_ns = kvio_rte_time_ns(rte);
    int64_t interval = kvio_xfer_poll_interval_ns(xfer);
    int64_t next_poll = state.result.t_start_ns;
    /* Notices arrive in order and the end comes last (file: the end marker is
     * taken only when no newer version exists), so the end with nothing
     * pending means every version was handled. Without a trainer, emulated
     * iterations go on until serve_until_ns. */
    bool served = false; /* the engine has finished (or was stopped) */
    for (;;) {
        bool stopped = stop != NULL && *stop;
        /* A version published whole before the trainer was lost may still
         * be on its way (chain fan-out: from the server before this one). */
        bool owed = state.trainer_lost && state.receive.meta.version < state.owed_version &&
                    kvio_rte_time_ns(rte) < serve_until_ns;
        bool updates_over = (state.end_seen || (state.trainer_lost && !owed)) &&
                            !state.pending;
        bool serving_over = stopped || (server != NULL ? served
                                        : !state.trainer_lost ||
                                              kvio_rte_time_ns(rte) >= serve_until_ns);
        if (status != KVIO_OK || (updates_over && serving_over))
            break;
        int64_t iteration_end = kvio_rte_time_ns(rte) + config->iteration_ns;
        bool engine_iteration = false;
        if (stopped)
            served = true; /* interrupted: no new iterations; wait for the end notice */
        if (server != NULL && !served) {
            int64_t end_ns = -1, idle_until = iteration_end;
            status = server->begin(server->context, kvio_rte_time_ns(rte), state.active_version,
                                   &end_ns, &idle_until, &served);
            if (status != KVIO_OK) {
                const char *why = server->error != NULL ? server->error(server->context) : NULL;
                snprintf(error_p, error_len, "rank %d: serving failed: %s", kvio_rte_index(rte),
                         why != NULL && why[0] != '\0' ? why : kvio_strerror(status));
                break;
            }
            if (end_ns >= 0) {
                iteration_end = end_ns;
                engine_iteration = true;
            } else if (!served && idle_until < iteration_end) {
                iteration_end = idle_until;
            }
        }
        if (engine_iteration)
            state.result.iterations++;
        else if (server == NULL)
            state.result.iterations++;
        int64_t now;
        while (status == KVIO_OK && (now = kvio_rte_time_ns(rte)) < iteration_end) {
            kvio_xfer_progress(xfer);
            if (!state.pending && !state.end_seen && (!state.trainer_lost || owed) &&
                now >= next_poll) {
                status = poll_once(&state, error_p, error_len);
                next_poll = interval > 0 ? now + interval : now;
                if (status != KVIO_OK)
                    break;
            }
            bool worked = false;
            /* Stall: a pending update is taken in below; one landing is
             * summed here all the same. */
            if (config->apply == KVIO_APPLY_SHADOW || !state.pending) {
                status = work_or_drop(&state, &worked, error_p, error_len);
                if (status != KVIO_OK)
                    break;
            }
            if (!worked) {
                status = check_peer(&state, error_p, error_len);
                /* A version under way whose next piece has not come (a
                 * bucket's notice) comes within microseconds. */
                bool arriving = state.pending && !state.receive.complete;
                nap(arriving && iteration_end - now > 10000 ? 10000 : iteration_end - now);
            }
        }
        if (status != KVIO_OK)
            break;
        now = kvio_rte_time_ns(rte);
        if (engine_iteration) {
            status = server->end(server->context, now);
            if (status != KVIO_OK) {
                const char *why = server->error != NULL ? server->error(server->context) : NULL;
                snprintf(error_p, error_len, "rank %d: serving failed: %s", kvio_rte_index(rte),
                         why != NULL && why[0] != '\0' ? why : kvio_strerror(status));
                break;
            }
        }
        if (now > iteration_end && (server == NULL || engine_iteration))
            state.result.inference_stall_ns += now - iteration_end; /* overrun */
        if (config->apply == KVIO_APPLY_STALL && state.pending) {
            /* Stop serving until the update is in. */
            int64_t stall_start = now;
            while (status == KVIO_OK && state.pending && !ready_to_activate(&state)) {
                bool worked = false;
                kvio_xfer_progress(xfer);
                status = work_or_drop(&state, &worked, error_p, error_len);
                if (status == KVIO_OK && !worked)
                    status = check_peer(&state, error_p, error_len);
            }
            state.result.inference_stall_ns += kvio_rte_time_ns(rte) - stall_start;
        }
        if (status == KVIO_OK && config->colocated != KVIO_COLOCATED_OFF && server != NULL &&
            server->lend != NULL && !served) {
            /* Colocated: the KV pool lends the incoming version's memory
             * from its notice to its activation. */
            status = server->lend(server->context,
                                  state.pending ? state.receive.meta.bytes : 0);
            if (status != KVIO_OK)
                snprintf(error_p, error_len, "rank %d: lending KV memory to an update: %s",
                         kvio_rte_index(rte), kvio_strerror(status));
        }
        bool drained = true;
        if (status == KVIO_OK && ready_to_activate(&state) && !served &&
            config->in_flight == KVIO_IN_FLIGHT_WAIT && server != NULL &&
            server->drained != NULL) {
            /* Admission stops until the running requests have finished: the
             * drain is this rank's stall for the update. */
            drained = server->drained(server->context);
            if (state.drain_start_ns == 0)
                state.drain_start_ns = now;
        }
        if (status == KVIO_OK && ready_to_activate(&state) && drained) {
            if (state.drain_start_ns != 0) {
                state.result.inference_stall_ns += kvio_rte_time_ns(rte) - state.drain_start_ns;
                state.drain_start_ns = 0;
            }
            status = activate(&state);
            if (status == KVIO_OK && config->colocated != KVIO_COLOCATED_OFF && server != NULL &&
                server->lend != NULL && !served)
                status = server->lend(server->context, 0); /* the memory comes back */
            if (status != KVIO_OK)
                snprintf(error_p, error_len, "rank %d: %s", kvio_rte_index(rte),
                         kvio_xfer_error(xfer)[0] ? kvio_xfer_error(xfer)
                                                   : kvio_strerror(status));
        }
    }
done:
    if (state.staging != NULL)
        kvio_device_host_free(kvio_xfer_device(xfer), state.staging);
    kvio_xfer_checksum_destroy(state.checksum);
    if (status != KVIO_OK) {
        free(state.result.records);
        return status;
    }
    state.result.t_end_ns = kvio_rte_time_ns(rte);
    state.result.polls = kvio_xfer_polls(xfer);
    state.result.active_version = state.active_version;
    state.result.active_slot = state.active_slot;
    *result_p = state.result;
    return KVIO_OK;
}

void kvio_update_result_free(kvio_update_result_t *result)
{
    free(result->records);
    memset(result, 0, sizeof(*result));
}
