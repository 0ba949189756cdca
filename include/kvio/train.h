/* Training rank: emulated steps (time from a distribution, slept or spun), a
 * weights buffer that changes between versions, and a checkpoint policy
 * (every_n_steps, interval, adaptive) that decides when a version is
 * published over a transport. Each version carries an XXH3-64 checksum of
 * the whole buffer; the time the step loop is blocked is the training stall. */
#ifndef KVIO_TRAIN_H
#define KVIO_TRAIN_H

#include "kvio/config.h"
#include "kvio/dist.h"
#include "kvio/model.h"
#include "kvio/rte.h"
#include "kvio/status.h"
#include "kvio/xfer.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    KVIO_CHECKPOINT_EVERY_N_STEPS = 0,
    KVIO_CHECKPOINT_INTERVAL = 1,
    KVIO_CHECKPOINT_ADAPTIVE = 2,
    KVIO_CHECKPOINT_NEVER = 3,
} kvio_checkpoint_policy_t;

typedef enum { KVIO_WAIT_SLEEP = 0, KVIO_WAIT_SPIN = 1 } kvio_wait_t;

typedef struct kvio_checkpoint_config {
    int policy;               /* kvio_checkpoint_policy_t */
    int64_t every_n_steps;
    int64_t interval_ns;
    kvio_loss_curve_t loss;
    double serving_rate;      /* adaptive: requests per second served, the prior: used
                                 until the serve ranks' served rate is measured */
    double cost_weight;       /* adaptive: loss per request per second of stall */
    int64_t initial_cost_ns;  /* adaptive: cost assumed before one is measured */
} kvio_checkpoint_config_t;

typedef struct kvio_train_config {
    kvio_dist_t step_time;    /* ns */
    int wait;                 /* kvio_wait_t */
    int64_t steps;            /* 0: until the run's duration */
    uint64_t bytes;           /* weights size */
    kvio_checkpoint_config_t checkpoint;
    kvio_xfer_config_t transport;
    int64_t die_after_versions; /* fault injection: the loop stops, as if the trainer
                                   died, after publishing this many versions (before
                                   announcing the end); 0: never */
} kvio_train_config_t;

/* The option table of `train:`. */
extern const kvio_opt_t kvio_train_options[];

/* The weights size in bytes. Hook: when a model preset module exists, the
 * size comes from its shape and dtype here; today it is train.bytes. */
uint64_t kvio_train_weights_bytes(const kvio_train_config_t *config);

/* One published version, as the trainer saw it (rank 0's clock). */
typedef struct kvio_train_record {
    uint64_t version;
    int64_t step;
    uint64_t checksum;
    int64_t t_ready_ns;         /* step finished, checkpoint decided */
    int64_t t_publish_start_ns; /* first byte moved */
    int64_t t_publish_end_ns;   /* last receiver notified */
    int64_t stall_ns;           /* step loop blocked: checksum + publish */
    int64_t credit_ns;          /* of which waiting for receivers' free slots */
    uint64_t bytes_moved;
    double serving_rate;        /* adaptive: the served req/s the decision used
                                   (measured; the prior before any was) */
    int serving_rate_measured;  /* 1: serving_rate was measured */
} kvio_train_record_t;

typedef struct kvio_train_result {
    kvio_train_record_t *records; /* malloc'd; kvio_train_result_free */
    size_t count;
    int64_t steps;
    int64_t t_start_ns, t_end_ns;
} kvio_train_result_t;

/* The checkpoint policy: true when a version should be published after step,
 * given the last published step and time (0 before the first), the
 * measured cost of an update (training stall, ns; <= 0: not measured yet)
 * and the measured serving rate (requests per second; < 0: not measured
 * yet, config->serving_rate is the prior).
 * adaptive: publish when (L(last) - L(step)) * serving_rate
 *           >= cost_weight * cost_s. */
bool kvio_checkpoint_due(const kvio_checkpoint_config_t *config, int64_t step,
                         int64_t now_ns, int64_t last_step, int64_t last_ns,
                         int64_t cost_ns, double served_rate);

/* The serve ranks' served rate as the trainer learns it during the run
 * (adaptive checkpoints): each serve rank reports its count of finished
 * requests now and then (emulate: over the runtime; simulate: the run's
 * no-update twin, as its virtual clock passes); a rank's rate is over its
 * reports of the last one to two windows, and the rates are summed. */
#define KVIO_SERVED_WINDOW_NS 10000000000ll /* 10 s */

typedef struct kvio_served_meter {
    int num_ranks;
    int64_t start_ns;
    struct kvio_served_rank {
        kvio_served_report_t latest, mark, prev;
        bool seen, has_prev;
    } *ranks;
} kvio_served_meter_t;

kvio_status_t kvio_served_meter_init(kvio_served_meter_t *meter, int num_ranks,
                                     int64_t start_ns);
void kvio_served_meter_free(kvio_served_meter_t *meter);
void kvio_served_meter_report(kvio_served_meter_t *meter, int rank,
                              const kvio_served_report_t *report);
/* Requests per second over the ranks that reported; -1 before any did. */
double kvio_served_meter_rate(const kvio_served_meter_t *meter);

/* A trainer set up before the run starts: its weights filled (the
 * transport's send buffer, or a pinned host mirror of GPU weights), so that
 * its first step starts at t0 like every other. */
typedef struct kvio_trainer kvio_trainer_t;

kvio_status_t kvio_trainer_create(const kvio_train_config_t *config, uint64_t seed,
                                  kvio_xfer_t *xfer, kvio_trainer_t **trainer_p,
                                  char *error_p, size_t error_len);
void kvio_trainer_destroy(kvio_trainer_t *trainer);

/* kvio_train_run on a trainer set up before. */
kvio_status_t kvio_trainer_run(kvio_trainer_t *trainer, kvio_rte_t *rte,
                               int64_t duration_ns, volatile sig_atomic_t *stop,
                               kvio_train_result_t *result_p, char *error_p, size_t error_len);

/* Runs the step loop on a sender transport until config->steps steps or
 * duration_ns, publishing by the policy, then announces the end. stop (may be
 * NULL; set asynchronously, e.g. by SIGINT) ends the loop early after the
 * step under way: the end is announced and the records so far returned.
 * result_p is written on failure too (unlike most output parameters): the
 * versions published before the trainer failed reached the serve ranks and
 * belong in the results. The caller frees it in every case. */
kvio_status_t kvio_train_run(const kvio_train_config_t *config, uint64_t seed,
                             kvio_rte_t *rte, kvio_xfer_t *xfer, int64_t duration_ns,
                             volatile sig_atomic_t *stop, kvio_train_result_t *result_p,
                             char *error_p, size_t error_len);

void kvio_train_result_free(kvio_train_result_t *result);

#endif
