/* The serve rank's side of model updates: the `update:` section (what an
 * activated version does to serving), and the receiver that takes versions
 * from a transport into a shadow buffer, verifies their checksum and
 * activates them at an iteration boundary of the rank's serve loop (apply:
 * shadow) or stalls it until they are in (apply: stall). It records the six
 * stages of every update on rank 0's clock. */
#ifndef KVIO_UPDATE_H
#define KVIO_UPDATE_H

#include "kvio/config.h"
#include "kvio/rte.h"
#include "kvio/status.h"
#include "kvio/xfer.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { KVIO_APPLY_SHADOW = 0, KVIO_APPLY_STALL = 1 } kvio_apply_t;

/* What the serve ranks run between updates in emulate mode. */
typedef enum {
    KVIO_SERVING_EMULATED = 0, /* fixed-length emulated iterations (update latency only) */
    KVIO_SERVING_ENGINE = 1,   /* the real-time engine on the workload's stream (coupled) */
} kvio_serving_t;

/* What the serve ranks do when the training rank is lost (its loop failed:
 * an injected death, a transport error; or it stopped answering). */
typedef enum {
    KVIO_TRAINER_LOSS_SERVE = 0, /* keep serving the last verified version until the
                                    run's end; the run reports it and fails */
    KVIO_TRAINER_LOSS_FAIL = 1,  /* every rank ends with an error at once */
} kvio_trainer_loss_t;

/* What an activated version does to the prefix cache (vLLM resets it when
 * weights are reloaded, SGLang flushes its radix cache). */
typedef enum {
    KVIO_UPDATE_CACHE_FLUSH = 0,   /* every cached block loses its hash */
    KVIO_UPDATE_CACHE_VERSION = 1, /* entries hit only under the version that cached them */
    KVIO_UPDATE_CACHE_KEEP = 2,    /* stale hits allowed and counted */
} kvio_update_cache_t;

/* What an activated version does to the requests running. */
typedef enum {
    KVIO_IN_FLIGHT_KEEP = 0,  /* they go on, on the new weights with their old KV */
    KVIO_IN_FLIGHT_ABORT = 1, /* they are preempted and recomputed on the new weights */
    KVIO_IN_FLIGHT_WAIT = 2,  /* admission stops until they finish; then it activates */
} kvio_in_flight_t;

/* Training and serving on the same device memory (colocated RL). */
typedef enum {
    KVIO_COLOCATED_OFF = 0,     /* "false": the update has its own memory */
    KVIO_COLOCATED_SHRINK = 1,  /* "true": the KV pool lends the incoming buffer's bytes */
    KVIO_COLOCATED_RELEASE = 2, /* the KV pool is released whole during the update */
} kvio_colocated_t;

/* Whether a run serves its stream again without updates to measure what
 * they cost (update.control). */
typedef enum {
    KVIO_CONTROL_AUTO = 0,   /* simulate: twin; emulate: off */
    KVIO_CONTROL_TWIN = 1,   /* simulate: a no-update twin in the same process */
    KVIO_CONTROL_PAIRED = 2, /* emulate: no-update runs alternating with coupled ones */
    KVIO_CONTROL_OFF = 3,    /* no control: only the trend around updates */
} kvio_control_t;

/* Why a serve rank served nothing for an update: the serving time each
 * update cost, by cause (updates.csv stall_*_ms). */
enum {
    KVIO_STALL_APPLY = 0,   /* update.apply: stall, from the notice to activation */
    KVIO_STALL_DRAIN = 1,   /* in_flight: wait, admission stopped until the running finish */
    KVIO_STALL_LEND = 2,    /* colocated: true, nothing fit beside the lent blocks */
    KVIO_STALL_RELEASE = 3, /* colocated: release, the pool was the update's */
    KVIO_STALL_CAUSES = 4,
};
#define KVIO_STALL_CAUSE_NAMES {"stall", "drain", "lend", "release"}

/* How a flush resets the prefix cache while requests run (vLLM's
 * reset_prefix_cache). */
typedef enum {
    KVIO_RESET_WHEN_IDLE = 0,   /* vLLM's default: refused while any block is in use,
                                   retried at every iteration boundary until none is */
    KVIO_RESET_PREEMPT_ALL = 1, /* reset_running_requests: every running request is
                                   preempted (recompute), then the reset */
    KVIO_RESET_RUNNING = 2,     /* kvio's extension: unhash every block at once, held
                                   ones too, the running requests going on */
} kvio_reset_t;

typedef struct kvio_update_activate {
    int cache; /* kvio_update_cache_t */
    int reset; /* kvio_reset_t (cache: flush) */
} kvio_update_activate_t;

typedef struct kvio_update_config {
    int apply;              /* kvio_apply_t */
    kvio_update_activate_t on_activate;
    int in_flight;          /* kvio_in_flight_t */
    int64_t interference_window_ns; /* the stretch after (and before) an activation measured */
    int colocated;                  /* kvio_colocated_t */
    bool verify;
    int64_t iteration_ns;   /* one emulated serving iteration */
    double memcpy_floor;    /* warm transfers in memory under this share of the set-up
                               memcpy: the verdict's update_below_memcpy (0: none) */
    int64_t corrupt_offset; /* fault injection: flip this byte of every version
                               received before verifying; -1: never */
    int serving;            /* kvio_serving_t */
    int64_t die_during_version; /* fault injection: serve rank die_rank stops (as if
                                   it died) while receiving this version, or the
                                   first newer one it sees; 0: never */
    int64_t die_rank;           /* the rank that dies (serve ranks are 1..ranks.serve) */
    int on_trainer_loss;        /* kvio_trainer_loss_t */
    int control;                /* kvio_control_t */
} kvio_update_config_t;

/* The option table of `update:` (the serve side; mountable as serve.update). */
extern const kvio_opt_t kvio_update_options[];

/* One update as one serve rank saw it; times in ns on rank 0's clock. */
typedef struct kvio_update_record {
    uint64_t version;
    uint64_t bytes;
    int32_t rank;
    int32_t checksum_ok;      /* 1 ok (or not verified), 0 mismatch: not activated */
    int32_t verified;         /* 1 when the checksum was computed */
    int32_t skipped_before;   /* versions this rank never saw before this one */
    int64_t t_ready_ns;
    int64_t t_xfer_start_ns;
    int64_t t_xfer_end_ns;
    int64_t t_notified_ns;
    int64_t t_verified_ns;
    int64_t t_activated_ns;   /* 0 when not activated */
    int64_t stall_ns[KVIO_STALL_CAUSES]; /* serving time this update cost the rank */
} kvio_update_record_t;

typedef struct kvio_update_result {
    kvio_update_record_t *records; /* malloc'd; kvio_update_result_free */
    size_t count;
    uint64_t iterations;
    uint64_t checksum_mismatches;
    uint64_t polls;
    int64_t inference_stall_ns;   /* stall: stopped; shadow: iterations overrun */
    int64_t t_start_ns, t_end_ns;
    uint64_t active_version;
    int active_slot;              /* the transport slot holding it */
    /* on_trainer_loss: serve: when this rank learnt that the trainer was
     * lost (0: it was not), and how. active_version is then the last good
     * version it kept serving. */
    int64_t trainer_lost_ns;
    char trainer_lost_reason[256];
} kvio_update_result_t;

/* The notice the training rank's harness sends every serve rank (rte tag
 * KVIO_UPDATE_TAG_TRAINER_LOST) when its trainer was lost but the rank
 * itself lives on to collect the results: the receive loop stops waiting
 * for versions and, with on_trainer_loss: serve, keeps serving. */
typedef struct kvio_trainer_lost_notice {
    uint64_t last_version; /* the last version published whole */
    char reason[200];
} kvio_trainer_lost_notice_t;

/* Sends the notice to ranks[0..count-1]. */
kvio_status_t kvio_update_announce_trainer_lost(kvio_rte_t *rte, const int *ranks, int count,
                                                const kvio_trainer_lost_notice_t *notice);

/* A serve rank's receiver of model updates over a receiver transport
 * (serve/updates_receiver.c): the update source of the rank's serve loop
 * (kvio_serve_rank_serve). It waits for the sender as long as the sender
 * lives (heartbeats, not progress): the loop fails with KVIO_ERR_PEER when
 * it fails or falls silent first, unless on_trainer_loss: serve, which marks
 * the trainer lost in the result instead: what never arrived whole is
 * discarded and the active version kept; versions owed by a chain are waited
 * for until serve_until_ns (rank 0's clock). Create it once every rank has
 * started (its start is the result's t_start). Caller destroys. */
typedef struct kvio_update_receiver kvio_update_receiver_t;

kvio_status_t kvio_update_receiver_create(const kvio_update_config_t *config, kvio_rte_t *rte,
                                          kvio_xfer_t *xfer, int sender,
                                          int64_t serve_until_ns,
                                          kvio_update_receiver_t **receiver_p, char *error_p,
                                          size_t error_len);
void kvio_update_receiver_destroy(kvio_update_receiver_t *receiver);

/* Adaptive checkpoints: the receiver posts the rank's count of finished
 * requests (kvio_served_report_t, tag KVIO_UPDATE_TAG_SERVED) to the sender
 * every interval_ns until the end of updates; the serve loop counts each
 * finished request with kvio_update_receiver_served. */
void kvio_update_receiver_report_served(kvio_update_receiver_t *receiver, int64_t interval_ns);
void kvio_update_receiver_served(kvio_update_receiver_t *receiver);

/* After the loop: moves the records into *result_p with the loop's count of
 * iterations and its inference stall (caller frees with
 * kvio_update_result_free). */
void kvio_update_receiver_finish(kvio_update_receiver_t *receiver, uint64_t iterations,
                                 int64_t inference_stall_ns, kvio_update_result_t *result_p);

void kvio_update_result_free(kvio_update_result_t *result);

#endif
