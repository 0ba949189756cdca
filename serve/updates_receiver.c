/* A serve rank's receiver of model updates, as its loop's update source: it
 * polls the transport while time passes, fetches a new version chunk by
 * chunk into the shadow slot, verifies it with a streaming XXH3-64 that
 * takes each piece as it lands (fetched, or, for a push, as the transport
 * says it is in, before the notice, so that verification ends with the
 * transfer), and swaps slots when the loop activates it at an iteration
 * boundary. It stamps t_verified and t_activated; the transport wrapper
 * stamped the earlier stages. The trainer is judged by its heartbeats,
 * never its pace; when it is lost (update.on_trainer_loss: serve) the rank
 * keeps serving the active version to the run's end. */
#include "serve/loop_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"
#include "kvio/log.h"
#include "kvio/update.h"

/* How soon an idle or stalled lane looks at the receiver again. */
#define LOOK_NS 200000
/* The nap while a version's next piece is on its way (a bucket's notice
 * comes within microseconds). */
#define ARRIVING_NAP_NS 10000

/* Bytes checksummed per step of the loop (keeps iterations responsive). */
#define VERIFY_STEP (4u << 20)

struct kvio_update_receiver {
    kvio_serve_updates_t base; /* the loop's view of it */
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
    int64_t serve_until_ns;    /* owed versions are waited for until then */
    int64_t poll_interval_ns;  /* the transport's discovery interval */
    int64_t next_poll_ns;
    int64_t served_interval_ns; /* adaptive checkpoints: report requests served to the
                                   sender this often (0: never) */
    int64_t next_served_ns;
    uint64_t served;            /* requests this rank finished */
    char message[768];         /* why the receiver failed, naming the rank */
};

typedef struct kvio_update_receiver serve_state_t;

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
static kvio_status_t activate(serve_state_t *state, const int64_t *stall_ns)
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
    for (int c = 0; stall_ns != NULL && c < KVIO_STALL_CAUSES; c++)
        record.stall_ns[c] = stall_ns[c];
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
    snprintf(state->result.trainer_lost_reason, sizeof(state->result.trainer_lost_reason), "%.*s",
             (int)sizeof(state->result.trainer_lost_reason) - 1, reason);
    kvio_warn("rank %d: training rank %d lost (%s); serving version %llu until the run ends",
              kvio_rte_index(state->rte), state->sender, reason,
              (unsigned long long)state->active_version);
}

/* The trainer's liveness (heartbeats, never its pace): a training rank
 * that failed or fell silent before its end notice is lost. */
static kvio_status_t check_peer(serve_state_t *state)
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
    snprintf(state->message, sizeof(state->message), "rank %d: the training rank %d is lost: %s", self, sender,
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

static kvio_status_t poll_once(serve_state_t *state)
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
        snprintf(state->message, sizeof(state->message), "rank %d: %s", kvio_rte_index(state->rte),
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


/* One bounded piece of work on the pending update. A version whose data is
 * gone at its source (KVIO_ERR_NOT_FOUND: deleted, or lost when Redis
 * restarted), or whose fetch fails once the trainer is lost, is skipped:
 * recorded without activation, with a warning, and the active one kept. */
static kvio_status_t work_or_drop(serve_state_t *state, bool *worked_p)
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
    snprintf(state->message, sizeof(state->message), "rank %d: %s", self, why);
    return status;
}

/* ---------- the loop's view ---------- */

/* A version published whole before the trainer was lost may still be on
 * its way (chain fan-out: from the server before this one). */
static bool owed(const serve_state_t *state, int64_t now_ns)
{
    return state->trainer_lost && state->receive.meta.version < state->owed_version &&
           now_ns < state->serve_until_ns;
}

static bool receiver_over(kvio_serve_updates_t *base, int64_t now_ns)
{
    serve_state_t *state = (serve_state_t *)base;
    return (state->end_seen || (state->trainer_lost && !owed(state, now_ns))) &&
           !state->pending;
}

static void receiver_look(kvio_serve_updates_t *base, int64_t now_ns, uint64_t engine_version,
                          kvio_update_view_t *view_p)
{
    (void)now_ns;
    (void)engine_version;
    serve_state_t *state = (serve_state_t *)base;
    bool ready = ready_to_activate(state);
    *view_p = (kvio_update_view_t){
        .ready_version = ready ? state->receive.meta.version : 0,
        .incoming_bytes = state->pending ? state->receive.meta.bytes : 0,
        .incoming_until_ns = state->pending ? INT64_MAX : -1,
        .stalled = state->config->apply == KVIO_APPLY_STALL && state->pending && !ready,
        .stall_until_ns = -1,
    };
}

static uint64_t receiver_version_at(kvio_serve_updates_t *base, int64_t now_ns)
{
    (void)now_ns;
    return ((serve_state_t *)base)->active_version;
}

static kvio_status_t receiver_activate(kvio_serve_updates_t *base, int64_t now_ns, bool idle,
                                       int64_t idle_since_ns, const int64_t *stall_ns,
                                       uint64_t *version_p)
{
    (void)now_ns;
    (void)idle;
    (void)idle_since_ns;
    serve_state_t *state = (serve_state_t *)base;
    kvio_status_t status = activate(state, stall_ns);
    if (status != KVIO_OK) {
        snprintf(state->message, sizeof(state->message), "rank %d: %s",
                 kvio_rte_index(state->rte),
                 kvio_xfer_error(state->xfer)[0] ? kvio_xfer_error(state->xfer)
                                                  : kvio_strerror(status));
        return status;
    }
    *version_p = state->active_version;
    return KVIO_OK;
}

/* One bounded piece of receive work: the transport's progress, a look for
 * a notice (at the transport's discovery interval), a piece of the pending
 * version's fetch or checksum (with apply: stall, only while the lane
 * stalls for it), else the trainer's heartbeat. */
static kvio_status_t receiver_poll(kvio_serve_updates_t *base, int64_t now_ns,
                                   bool lane_stalled, bool *worked_p, int64_t *nap_ns_p)
{
    serve_state_t *state = (serve_state_t *)base;
    kvio_xfer_progress(state->xfer);
    if (!state->pending && !state->end_seen && (!state->trainer_lost || owed(state, now_ns)) &&
        now_ns >= state->next_poll_ns) {
        kvio_status_t status = poll_once(state);
        state->next_poll_ns = state->poll_interval_ns > 0 ? now_ns + state->poll_interval_ns
                                                          : now_ns;
        if (status != KVIO_OK)
            return status;
    }
    if (state->served_interval_ns > 0 && now_ns >= state->next_served_ns &&
        !state->end_seen && !state->trainer_lost) {
        /* Posted, not waited for: a report the trainer never reads (it ended
         * first) costs nothing. */
        kvio_served_report_t report = {.t_ns = now_ns, .count = state->served};
        kvio_status_t status = kvio_rte_post(state->rte, state->sender, KVIO_UPDATE_TAG_SERVED,
                                             &report, sizeof(report));
        if (status != KVIO_OK)
            return check_peer(state); /* the trainer's loss is reported there */
        state->next_served_ns = now_ns + state->served_interval_ns;
    }
    bool worked = false;
    if (state->config->apply == KVIO_APPLY_SHADOW || !state->pending || lane_stalled) {
        kvio_status_t status = work_or_drop(state, &worked);
        if (status != KVIO_OK)
            return status;
    }
    *worked_p = worked;
    if (worked)
        return KVIO_OK;
    if (state->pending && !state->receive.complete && *nap_ns_p > ARRIVING_NAP_NS)
        *nap_ns_p = ARRIVING_NAP_NS;
    return check_peer(state);
}

static int64_t receiver_next_ns(kvio_serve_updates_t *base, int64_t now_ns)
{
    return receiver_over(base, now_ns) ? INT64_MAX : now_ns + LOOK_NS;
}

static const char *receiver_error(const kvio_serve_updates_t *base)
{
    return ((const serve_state_t *)base)->message;
}

static const kvio_serve_updates_ops_t receiver_ops = {
    .look = receiver_look,
    .version_at = receiver_version_at,
    .activate = receiver_activate,
    .poll = receiver_poll,
    .over = receiver_over,
    .next_ns = receiver_next_ns,
    .error = receiver_error,
};

void kvio_update_receiver_report_served(kvio_update_receiver_t *receiver, int64_t interval_ns)
{
    receiver->served_interval_ns = interval_ns;
    receiver->next_served_ns = receiver->result.t_start_ns + interval_ns;
}

void kvio_update_receiver_served(kvio_update_receiver_t *receiver)
{
    receiver->served++;
}

kvio_serve_updates_t *kvio_update_receiver_updates(kvio_update_receiver_t *receiver)
{
    return &receiver->base;
}

bool kvio_update_receiver_trainer_lost(const kvio_serve_updates_t *updates)
{
    return ((const serve_state_t *)updates)->trainer_lost;
}

kvio_status_t kvio_update_receiver_create(const kvio_update_config_t *config, kvio_rte_t *rte,
                                          kvio_xfer_t *xfer, int sender,
                                          int64_t serve_until_ns,
                                          kvio_update_receiver_t **receiver_p, char *error_p,
                                          size_t error_len)
{
    serve_state_t *state = calloc(1, sizeof(*state));
    if (state == NULL) {
        snprintf(error_p, error_len, "rank %d: out of memory", kvio_rte_index(rte));
        return KVIO_ERR_NOMEM;
    }
    *state = (serve_state_t){
        .base = {.ops = &receiver_ops}, .config = config, .rte = rte, .xfer = xfer,
        .active_slot = 1, .sender = sender, .serve_until_ns = serve_until_ns,
        .fetch_sums = kvio_xfer_sums_fetch(xfer) && config->corrupt_offset < 0,
        .poll_interval_ns = kvio_xfer_poll_interval_ns(xfer)};
    kvio_status_t status = kvio_xfer_checksum_create(&state->checksum);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "rank %d: out of memory", kvio_rte_index(rte));
    if (status == KVIO_OK && kvio_xfer_device(xfer) != NULL && config->verify &&
        (status = kvio_device_host_alloc(kvio_xfer_device(xfer), VERIFY_STEP,
                                         &state->staging)) != KVIO_OK)
        snprintf(error_p, error_len, "rank %d: %s", kvio_rte_index(rte),
                 kvio_device_error(kvio_xfer_device(xfer)));
    if (status != KVIO_OK) {
        kvio_update_receiver_destroy(state);
        return status;
    }
    state->result.t_start_ns = kvio_rte_time_ns(rte);
    state->next_poll_ns = state->result.t_start_ns;
    *receiver_p = state;
    return KVIO_OK;
}

void kvio_update_receiver_destroy(kvio_update_receiver_t *receiver)
{
    if (receiver == NULL)
        return;
    if (receiver->staging != NULL)
        kvio_device_host_free(kvio_xfer_device(receiver->xfer), receiver->staging);
    kvio_xfer_checksum_destroy(receiver->checksum);
    free(receiver->result.records);
    free(receiver);
}

void kvio_update_receiver_finish(kvio_update_receiver_t *receiver, uint64_t iterations,
                                 int64_t inference_stall_ns, kvio_update_result_t *result_p)
{
    kvio_update_result_t *result = &receiver->result;
    result->iterations = iterations;
    result->inference_stall_ns = inference_stall_ns;
    result->t_end_ns = kvio_rte_time_ns(receiver->rte);
    result->polls = kvio_xfer_polls(receiver->xfer);
    result->active_version = receiver->active_version;
    result->active_slot = receiver->active_slot;
    *result_p = *result;
    memset(result, 0, sizeof(*result));
    receiver->capacity = 0;
}
