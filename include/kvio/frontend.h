/* A front end: requests from outside the run (kvio serve's HTTP server)
 * handed to the serve ranks of an emulate run, and what happens to each
 * handed back as it happens. Threads of the front end submit requests,
 * aborts and admin calls; each serve rank takes them at its iteration
 * boundaries (or at once while idle), and calls each request's listener
 * from its own thread as tokens come. Every call here is thread-safe. */
#ifndef KVIO_FRONTEND_H
#define KVIO_FRONTEND_H

#include "kvio/engine.h"
#include "kvio/hash.h"
#include "kvio/serve.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kvio_frontend kvio_frontend_t;

/* What a submitted request hears, on its serve rank's thread. Exactly one
 * of on_finish and on_abort is called, once, after any number of
 * on_tokens; the context must live until then. Times are the run's (ns
 * since its t0, kvio_frontend_now_ns). */
typedef struct kvio_frontend_listener {
    void *context;
    /* generated tokens so far (at most the output), after an iteration
     * that produced some; arrival_ns: when it was submitted */
    void (*on_tokens)(void *context, uint32_t generated, int64_t arrival_ns, int64_t now_ns);
    void (*on_finish)(void *context, const kvio_engine_finished_t *finished);
    /* taken out unfinished: kvio_frontend_abort, or the front end closed
     * with abort */
    void (*on_abort)(void *context, int64_t now_ns);
} kvio_frontend_listener_t;

/* A request: its prompt's token ids followed by those of the output the
 * engine will generate (both decided by the caller), copied at submit. */
typedef struct kvio_frontend_request {
    const uint32_t *tokens;
    uint32_t prompt_tokens;
    uint32_t output_tokens;
    uint64_t cache_salt;       /* vLLM's cache_salt (kvio_cache_salt); 0: none */
    int32_t priority;
    /* When the request was at the server, in host time (kvio_time_ns):
     * its first byte read, and the whole of it read, which is its arrival
     * (vLLM's arrival_time: when the API server has the request). 0: the
     * time of the submit. */
    uint64_t first_byte_host_ns, received_host_ns;
    kvio_frontend_listener_t listener;
} kvio_frontend_request_t;

/* A KV-cache event of one serve rank (vLLM's KV events). */
typedef enum {
    KVIO_KV_EVENT_STORED = 0,  /* a full block's hash entered the prefix index */
    KVIO_KV_EVENT_REMOVED,     /* a cached block was evicted for reuse */
    KVIO_KV_EVENT_CLEARED,     /* reset_prefix_cache: every cached block left */
} kvio_kv_event_kind_t;

typedef struct kvio_kv_event {
    kvio_kv_event_kind_t kind;
    kvio_hash_t hash;
    bool has_parent;           /* STORED: false for a request's first block */
    kvio_hash_t parent;
    const uint32_t *tokens;    /* STORED: the block's token ids (borrowed for the call) */
    uint32_t num_tokens;       /* the block size; 0 when its tokens are unknown */
} kvio_kv_event_t;

/* Where a serve rank's KV events go: one call per iteration that had any,
 * in order, on the rank's thread (rank: its index among the serve ranks). */
typedef struct kvio_kv_event_sink {
    void *context;
    void (*publish)(void *context, uint32_t rank, const kvio_kv_event_t *events, size_t count,
                    int64_t now_ns);
} kvio_kv_event_sink_t;

typedef struct kvio_frontend_params {
    uint32_t num_ranks;
    uint32_t block_size;
    const kvio_router_config_t *router; /* picks a rank for KVIO_FRONTEND_ROUTE among
                                           several (borrowed for create; NULL with one) */
    kvio_kv_event_sink_t events;        /* publish NULL: no events */
    bool record_trace;                  /* keep each request as a hash-id trace line */
} kvio_frontend_params_t;

kvio_status_t kvio_frontend_create(const kvio_frontend_params_t *params,
                                   kvio_frontend_t **frontend_p);
/* After the run that took requests from it has ended. */
void kvio_frontend_destroy(kvio_frontend_t *frontend);

/* True once every serve rank is ready to take requests (the run's t0 has
 * passed); submit refuses before. */
bool kvio_frontend_ready(const kvio_frontend_t *frontend);

/* The run's clock now (ns since its t0); 0 before it is ready. */
int64_t kvio_frontend_now_ns(const kvio_frontend_t *frontend);

/* Host time host_ns (kvio_time_ns) on the run's clock (ns since t0, < 0
 * before it); 0 before the front end is ready. */
int64_t kvio_frontend_run_ns(const kvio_frontend_t *frontend, uint64_t host_ns);

#define KVIO_FRONTEND_ROUTE UINT32_MAX

/* Queues request for serve rank rank (KVIO_FRONTEND_ROUTE: the router
 * picks); its arrival is request->received_host_ns (0: now). *id_p and *rank_p (may be NULL) say which
 * request it is and where it went. KVIO_ERR_INTERRUPTED once closed or not
 * yet ready (nothing is called then), KVIO_ERR_INVALID for no prompt or a
 * rank out of range, KVIO_ERR_NOMEM. */
kvio_status_t kvio_frontend_submit(kvio_frontend_t *frontend, uint32_t rank,
                                   const kvio_frontend_request_t *request, uint64_t *id_p,
                                   uint32_t *rank_p);

/* Takes request id of serve rank rank out, at its next iteration boundary
 * (on_abort; nothing if it finished first). */
void kvio_frontend_abort(kvio_frontend_t *frontend, uint32_t rank, uint64_t id);

/* vLLM's reset_prefix_cache on every serve rank, waiting (at most
 * timeout_ns) until each has done it: *reset_p false when a rank refused
 * (a block was in use) or did not answer in time. */
void kvio_frontend_reset_prefix_cache(kvio_frontend_t *frontend, int64_t timeout_ns,
                                      bool *reset_p);

/* vLLM's pause modes (POST /pause?mode=...): submitted requests are
 * accepted and queue until the pause ends. */
typedef enum {
    KVIO_PAUSE_NONE = 0, /* serving (resume) */
    KVIO_PAUSE_NEW,      /* wait: running requests go on, no new one is admitted */
    KVIO_PAUSE_ALL,      /* keep: no iteration starts; requests keep their KV */
} kvio_pause_t;

/* Pauses (or with KVIO_PAUSE_NONE resumes) every serve rank;
 * abort_in_flight (mode abort) first takes every request submitted so far
 * out (on_abort). */
void kvio_frontend_pause(kvio_frontend_t *frontend, kvio_pause_t mode, bool abort_in_flight);
kvio_pause_t kvio_frontend_paused(const kvio_frontend_t *frontend);

/* No more requests (submit refuses); abort_in_flight: the ranks take every
 * request out (on_abort), else they finish them. The serve ranks end once
 * theirs are done. */
void kvio_frontend_close(kvio_frontend_t *frontend, bool abort_in_flight);
bool kvio_frontend_closed(const kvio_frontend_t *frontend);

/* What a serve rank last said of itself (after each iteration). */
typedef struct kvio_frontend_state {
    uint32_t running, waiting;   /* waiting counts requests not yet taken too */
    double kv_usage;             /* blocks in use / blocks, 0..1 */
    uint64_t prefix_queries, prefix_hits; /* tokens, as summary.json's */
    uint64_t preemptions;
    uint64_t prompt_tokens, generation_tokens; /* of finished requests */
    uint64_t finished, aborted;
    uint64_t submitted;
} kvio_frontend_state_t;

/* Rank rank's state (all zero before it first said). */
void kvio_frontend_state(const kvio_frontend_t *frontend, uint32_t rank,
                         kvio_frontend_state_t *state_p);

uint32_t kvio_frontend_num_ranks(const kvio_frontend_t *frontend);

#endif
