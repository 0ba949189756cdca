/* Internals of the RL run shared between serve/rl.c (the loop and its
 * engines) and serve/rl_step.c (the trainer's step, its costs and the
 * figures). */
#ifndef KVIO_SERVE_RL_INT_H
#define KVIO_SERVE_RL_INT_H

#include "kvio/engine.h"
#include "kvio/result.h"
#include "kvio/rl.h"
#include "serve/serve_int.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RL_MAX_SEGMENTS 8    /* versions a sample's tokens are kept apart by */
#define RL_MAX_STALENESS 64  /* staleness counted exactly up to this; more pools here */

/* One sample (an engine request whose id is its index). */
typedef struct rl_sample {
    uint32_t group;
    uint32_t engine;
    uint32_t prompt_tokens, output_tokens;
    uint32_t generated;               /* reported so far (on_tokens) */
    uint32_t num_segments;            /* its tokens by the version that generated them */
    uint64_t segment_version[RL_MAX_SEGMENTS];
    uint32_t segment_tokens[RL_MAX_SEGMENTS];
    uint32_t recomputed;              /* tokens computed again (an interrupt, a preemption) */
    int64_t finish_ns;
    /* Partial rollouts (rl.partial_tokens): each version's part is an
     * engine request of its own, its prompt the sample's prompt and tokens
     * so far. */
    uint32_t base;                    /* tokens generated before the engine request running */
    bool parked;                      /* reached the cap unfinished: waits for a new version */
    uint64_t parked_version;
    kvio_hash_t *hashes;              /* its blocks' (owned; kept while it may continue) */
    size_t num_hashes;
} rl_sample_t;

/* The n samples of one prompt, admitted together onto one engine. */
typedef struct rl_group {
    uint32_t first_sample, num_samples, finished;
    uint32_t parked;       /* its samples waiting to continue (partial rollouts) */
    uint64_t start_version;
    int64_t start_ns, finish_ns;
    bool consumed;         /* trained on */
    uint64_t pick_mark;    /* picked by the trainer's attempt of this mark */
} rl_group_t;

struct rl_sim;

typedef struct rl_engine {
    struct rl_sim *sim;
    uint32_t index;
    kvio_engine_t *engine;
    bool busy;                 /* an iteration runs until end_ns */
    int64_t end_ns;
    int64_t pause_from_ns, pause_until_ns; /* asleep (colocated) or loading weights */
    uint64_t version;          /* active on this engine */
    uint64_t pending_version;  /* to activate at the iteration's end (0: none) */
    uint32_t outstanding;      /* samples added and not finished */
} rl_engine_t;

/* One training step as it went (seconds in the figures, ns here). */
typedef struct rl_step {
    int64_t start_ns, end_ns;        /* the trainer's previous end (its ready) to its own */
    int64_t generation_ns, long_tail_ns, train_ns, sync_ns, wake_ns; /* wake: sleep + wake */
    int64_t sleep_ns;                /* colocated: the sleep alone */
    int64_t batch_ready_ns;          /* the batch's last group finished */
    int64_t longest_finish_ns;       /* when its sample with the longest output finished */
    uint32_t longest_output_tokens;
    uint64_t trained_tokens;         /* prompts and outputs of its samples */
    uint64_t first_group;            /* the id of its first group (by start) */
    uint64_t group_id_sum;           /* of its groups' ids: what it trained on */
} rl_step_t;

/* Emulate's real memory and clock (serve/rl_emulate.c). */
typedef struct rl_emu rl_emu_t;

typedef struct rl_sim {
    const kvio_rl_config_t *config;
    const kvio_serve_run_t *run;
    char *error_p;
    size_t error_len;
    kvio_cost_t *cost;
    uint32_t blocks, block_size;
    rl_engine_t *engines;
    uint32_t num_engines;
    rl_sample_t *samples;
    size_t num_samples, samples_capacity;
    rl_group_t *groups;
    size_t num_groups, groups_capacity;
    bool stream_done;
    uint32_t *done;                  /* finished groups in finish order */
    size_t done_head, done_tail;     /* done[0 .. done_head) are all consumed */
    size_t oldest;                   /* groups[0 .. oldest) are all consumed */
    uint32_t *batch;                 /* the next step's groups (rl_pick_batch) */
    uint64_t pick_mark;
    uint64_t version;                /* the rollout's newest version */
    int64_t now_ns;
    /* The trainer. */
    bool trainer_busy;
    int64_t trainer_ready_ns, trainer_end_ns;
    uint64_t step, steps_done;       /* started, finished */
    rl_step_t *steps;
    /* Costs fixed for the run (rl_plan_costs). */
    int64_t sync_ns, sleep_ns, wake_ns;
    double train_flops_per_s;        /* the trainer's FLOP/s (0: configured time) */
    /* What the trainer took. */
    uint64_t staleness_tokens[RL_MAX_STALENESS + 1];
    uint64_t output_tokens, samples_trained, recomputed_tokens, mixed_samples;
    /* Partial rollouts. */
    size_t parked_samples, parked_groups;
    uint64_t continuations;
    int64_t last_finish_ns;          /* the last sample's */
    /* Emulate (NULL: simulate). */
    rl_emu_t *emu;
    uint64_t sync_bytes;             /* weight bytes the syncs copied */
} rl_sim_t;

/* Whether the engine sleeps or loads weights at now_ns. */
static inline bool rl_engine_paused(const rl_engine_t *engine, int64_t now_ns)
{
    return now_ns >= engine->pause_from_ns && now_ns < engine->pause_until_ns;
}

/* The weight sync's, sleep's and wake's times and the trainer's FLOP/s. */
void rl_plan_costs(rl_sim_t *sim);

/* Picks the next step's rl.batch groups into sim->batch: first every
 * group that would lag more than the staleness bound at that step (the
 * trainer waits for them), then the earliest finished; false while they
 * are not all finished. */
bool rl_pick_batch(rl_sim_t *sim);

/* The trainer takes the picked groups and starts its step at now. */
kvio_status_t rl_start_step(rl_sim_t *sim);

/* The rl.* figures, the per-step detail and the engines' serving figures. */
kvio_status_t rl_figures(rl_sim_t *sim, kvio_result_t *result);

/* ---------- emulate (serve/rl_emulate.c) ---------- */

/* The weight bytes a sync moves per serve rank (rl.weight_bytes, or the
 * model's weights over its tensor parallel). */
uint64_t rl_emu_weight_bytes(const kvio_rl_config_t *config, const kvio_serve_run_t *run);
/* Maps the weight buffers (checked before the run by
 * kvio_rl_emulate_preflight) and faults them in; sets sim->emu. With rte
 * (separate placement, async: this is rank 0, the trainer rank 1) the
 * rollout's weights are the receive slots of transport instead, created
 * with the trainer's send buffer. */
kvio_status_t rl_emu_create(rl_sim_t *sim, kvio_rte_t *rte, const kvio_xfer_config_t *transport);
/* Engine e's real KV pool (and swap space) into its params. */
kvio_status_t rl_emu_engine_params(rl_sim_t *sim, uint32_t e, kvio_engine_params_t *params);
/* Tells a trainer rank there are no more steps, and frees it all. */
void rl_emu_destroy(rl_sim_t *sim);
/* Time 0 of the run is now. */
void rl_emu_start(rl_sim_t *sim);
/* Waits until the run's clock reads until_ns, or (a trainer rank) until
 * the step it trains has landed in the rollout's slot, checked: that step
 * then has its measured training and sync, and sim->trainer_end_ns is its
 * landing. *now_p is the clock (at least until_ns when nothing landed). */
kvio_status_t rl_emu_wait(rl_sim_t *sim, int64_t until_ns, int64_t *now_p);
/* The trainer's step for real (colocated): sleep, train for
 * step->train_ns, wake the weights, sync, wake the pool; sets the step's
 * measured parts and sim->now_ns to its end. */
kvio_status_t rl_emu_step(rl_sim_t *sim, rl_step_t *step);
/* Separate and async: asks the trainer rank to train step (for
 * step->train_ns) and publish its weights; rl_emu_wait hears them land. */
kvio_status_t rl_emu_train_start(rl_sim_t *sim, rl_step_t *step);
/* Whether the trainer is a rank of its own. */
bool rl_emu_separate(const rl_sim_t *sim);
/* The trainer rank's rank, runtime ("local", "mpi"), transport and bytes
 * per sync (new reference; NULL: out of memory). */
json_t *rl_emu_trainer_json(const rl_sim_t *sim);

/* The trainer's step changes its weights: one word of every page, by the
 * step (every byte's sum changes, as an optimizer step changes every
 * tensor). */
void rl_emu_train_bytes(unsigned char *weights, uint64_t bytes, uint64_t step);

/* The link's transport: transport's, for the trainer's host weights moved
 * whole (what rl_link_create creates and the preflight checks). */
void rl_link_config(const kvio_xfer_config_t *transport, kvio_xfer_config_t *config_p);

/* This rank's side (rank 1 sends, rank 0 receives) of the transport that
 * moves the trainer rank's weights, bytes of host memory as one blob;
 * collective over both ranks. The transport's config (transport's, for
 * host memory) goes to *config_p, which the transport borrows: it must
 * outlive *xfer_p. */
kvio_status_t rl_link_create(kvio_rte_t *rte, const kvio_xfer_config_t *transport,
                             kvio_xfer_role_t role, uint64_t bytes, kvio_xfer_config_t *config_p,
                             kvio_xfer_t **xfer_p, char *error_p, size_t error_len);

/* Rank 1 of an emulate run with a trainer rank: takes the weights' size
 * from rank 0, creates the sender of transport, then trains each step rank
 * 0 asks for (its time waited, its weights changed) and publishes the
 * weights, until rank 0 says there are no more. */
kvio_status_t rl_trainer_rank(kvio_rte_t *rte, const kvio_xfer_config_t *transport,
                              char *error_p, size_t error_len);

/* Messages between rank 0 (the rollout) and rank 1 (the trainer):
 * KVIO_RL_TAG_PLAN, then KVIO_RL_TAG_TRAIN each step. */
#define RL_TRAINER_RANK 1
#define RL_STEP_NONE UINT64_MAX /* rl_train_message_t.step: no more steps */

typedef struct rl_plan_message {
    uint64_t bytes; /* the rollout's weights: every engine's shard */
} rl_plan_message_t;

typedef struct rl_train_message {
    uint64_t step;     /* 0-based; its weights are version step + 1 */
    int64_t train_ns;  /* the training's time */
} rl_train_message_t;

#endif
