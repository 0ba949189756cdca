/* Scheduling policies and output-length predictors. A policy orders the
 * waiting queue, may veto an admission (conservative, pkas), and picks the
 * victim when a running request cannot get its blocks. Predictors estimate
 * output lengths for sjf and pkas. Each is a plug-in (kvio/plugin.h) in its
 * own file, listed in its registry; the engine (serve/) calls them through
 * the kvio_sched_* wrappers. */
#ifndef KVIO_SCHED_H
#define KVIO_SCHED_H

#include "kvio/config.h"
#include "kvio/hash.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a policy may know of a request. The engine embeds it in its own
 * request and keeps it current. */
typedef struct kvio_sched_request {
    uint64_t id;
    int64_t arrival_ns;
    int32_t priority;          /* lower value first (vLLM) */
    uint32_t prompt_tokens;
    uint32_t output_tokens;    /* the true length: only the oracle predictor reads it */
    uint32_t max_tokens;       /* the request's output limit */
    uint32_t generated;        /* output tokens produced so far */
    uint32_t predicted_output; /* set by kvio_sched_predict at arrival */
    uint32_t hit_tokens;       /* cached prefix at the last lookup (lpm, dfs-weight) */
    uint64_t admit_seq;        /* order of the latest admission (fcfs victim) */
    const kvio_hash_t *hashes; /* block hashes of the prompt (dfs-weight) */
    size_t num_hashes;
    /* For policies that project KV use (KVIO_SCHED_CAP_PROJECTS), as the
     * pool holds it: a running request's blocks, and of them those another
     * running request holds too (a shared prefix, counted once in the
     * view's used_blocks); a candidate's held_blocks are those its
     * admission would take from the free queue (new blocks and cached ones
     * that sit free), its prefix hits on blocks in use costing nothing. */
    uint32_t held_blocks;
    uint32_t shared_blocks;
} kvio_sched_request_t;

/* The engine's state as a policy sees it when deciding. */
typedef struct kvio_sched_view {
    kvio_sched_request_t *const *running;
    size_t num_running;
    uint32_t block_size;
    uint32_t capacity_blocks;  /* usable KV blocks */
    uint32_t free_blocks;
    uint32_t used_blocks;      /* blocks the running requests hold, each counted once */
    int64_t now_ns;
} kvio_sched_view_t;

/* The `serve.scheduler` section: a policy and a predictor by name, each
 * with its own options (serve.scheduler: {policy: pkas, pkas: {margin:
 * 0.1}, predictor: noisy, noisy: {sigma: 0.3}}). */
typedef struct kvio_sched_config {
    kvio_choice_t policy;    /* of kvio_sched_policies */
    kvio_choice_t predictor; /* of kvio_sched_predictors */
} kvio_sched_config_t;

/* The registries: every policy and predictor kvio has. */
extern const kvio_registry_t kvio_sched_policies;
extern const kvio_registry_t kvio_sched_predictors;

extern const kvio_opt_t kvio_sched_options[];

/* Capabilities of a policy. */
#define KVIO_SCHED_CAP_NEEDS_HITS 1u /* order() reads hit_tokens: look them up first */
#define KVIO_SCHED_CAP_PROJECTS 2u   /* admit() projects KV use from predicted outputs */

typedef struct kvio_sched kvio_sched_t;

/* Creates a scheduler (policy + predictor); seed drives the noisy
 * predictor. Caller destroys. */
kvio_status_t kvio_sched_create(const kvio_sched_config_t *config, uint64_t seed,
                                kvio_sched_t **sched_p);
void kvio_sched_destroy(kvio_sched_t *sched);

unsigned kvio_sched_caps(const kvio_sched_t *sched);

/* Whether ordering count waiting requests reads their cached prefixes (lpm
 * past lpm_max_queue orders FCFS and does not: the lookups are skipped). */
bool kvio_sched_wants_hits(const kvio_sched_t *sched, size_t count);

/* Fills request->predicted_output (at least 1, at most max_tokens). */
void kvio_sched_predict(kvio_sched_t *sched, kvio_sched_request_t *request);

/* Tells the predictor a request finished with request->generated tokens. */
void kvio_sched_observe(kvio_sched_t *sched, const kvio_sched_request_t *request);

/* Orders waiting (in place) by the policy; the engine passes the queue in
 * its own FCFS order (preempted requests at the head). */
void kvio_sched_order(kvio_sched_t *sched, kvio_sched_request_t **waiting, size_t count,
                      const kvio_sched_view_t *view);

/* True when the policy lets candidate start now (blocks permitting). */
bool kvio_sched_admit(kvio_sched_t *sched, const kvio_sched_request_t *candidate,
                      const kvio_sched_view_t *view);

/* Index into view->running of the request to preempt: fcfs and the others
 * take the last admitted, priority the worst (priority, arrival). */
size_t kvio_sched_victim(kvio_sched_t *sched, const kvio_sched_view_t *view);

/* The peak KV blocks that the running set plus candidate (may be NULL)
 * would hold, projected with predicted outputs and counted as the pool
 * holds them: the blocks in use now (used_blocks: a prefix shared by many
 * counted once), the candidate's held_blocks, each request's decode growth
 * until it ends, and at its end its blocks no one else holds given back
 * (pkas; exposed for tests). */
uint64_t kvio_sched_projected_peak(const kvio_sched_view_t *view,
                                   const kvio_sched_request_t *candidate);

#endif
