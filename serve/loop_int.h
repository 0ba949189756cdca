/* Private to serve/: the one serve loop (serve/loop.c) and what plugs into
 * it. A loop drives one or more serve ranks on one executor's clock: at
 * each iteration boundary of a rank it applies what can change serving
 * (requests from an arrival source, versions from an update source, a
 * stop), takes one step of the rank's engine and hands the iteration to the
 * executor, which lets its time pass. Simulate runs every serve rank in one
 * loop on the virtual executor (its clock is the event scheduler shared by
 * the ranks); emulate runs one loop per serve rank on the realtime or gpu
 * executor, the coupled run with the transport's receiver as its update
 * source, the plain run with its stream or the client rank as its arrival
 * source. */
#ifndef KVIO_SERVE_LOOP_INT_H
#define KVIO_SERVE_LOOP_INT_H

#include <signal.h>

#include "kvio/plugin.h"
#include "serve/serve_int.h"

typedef struct kvio_serve_loop kvio_serve_loop_t;
typedef struct kvio_serve_lane kvio_serve_lane_t;

/* ---------- executors: how time passes (serve/executor_<name>.c) ---------- */

/* Work to do while a real-time wait lasts: one bounded, non-blocking
 * piece (a transport's progress, a piece of checksum, a look for a request
 * batch). *worked_p: it did some (poll again at once); *wake_p: something
 * arrived that ends the wait now; *nap_ns_p (preset to the executor's
 * default): the longest nap before the next poll. */
typedef struct kvio_serve_poll {
    kvio_status_t (*poll)(void *context, int64_t now_ns, bool *worked_p, bool *wake_p,
                          int64_t *nap_ns_p);
    /* Optional: naps at most ns, ending early when a request comes (a front
     * end wakes it); NULL: a plain sleep. */
    void (*nap)(void *context, int64_t ns);
    void *context;
} kvio_serve_poll_t;

/* Time passes for real (iteration timing is measured). */
#define KVIO_EXECUTOR_CAP_REAL 1u

typedef struct kvio_executor kvio_executor_t;

typedef struct kvio_executor_ops {
    kvio_plugin_t plugin; /* virtual | realtime | gpu */
    unsigned caps;        /* KVIO_EXECUTOR_CAP_* */
    /* The run's clock (ns). */
    int64_t (*now)(const kvio_executor_t *executor);
    /* The iteration's compute, at its start: gpu keeps the device's SMs
     * busy for duration_ns (a spin kernel); the others nothing. */
    kvio_status_t (*compute)(kvio_executor_t *executor, int64_t duration_ns);
    /* Returns when the clock reads end_ns: virtual moves its clock there at
     * once; realtime and gpu sleep, then spin the last stretch, calling
     * poll (may be NULL) while there is time for it; a poll that wakes ends
     * the wait early. A poll's error is returned. */
    kvio_status_t (*wait_until)(kvio_executor_t *executor, int64_t end_ns,
                                const kvio_serve_poll_t *poll);
} kvio_executor_ops_t;

struct kvio_executor {
    const kvio_executor_ops_t *ops;
    int64_t virtual_ns;         /* virtual: the clock */
    uint64_t origin_ns;         /* real: the clock reads 0 at this host time */
    struct kvio_device *device; /* gpu: the device that spins */
};

/* The executor called name, of kvio_executors (kvio/serve.h); NULL when
 * there is none. */
const kvio_executor_ops_t *kvio_executor_find(const char *name);

/* Below this much time left a real wait spins instead of sleeping or
 * polling (a sleep can overshoot by the scheduler's latency). */
#define KVIO_EXECUTOR_SPIN_NS 300000

/* The host clock's reading and wait, shared by realtime and gpu. */
int64_t kvio_executor_host_now(const kvio_executor_t *executor);
kvio_status_t kvio_executor_host_wait(kvio_executor_t *executor, int64_t end_ns,
                                      const kvio_serve_poll_t *poll);

/* ---------- arrival sources: where requests come from ---------- */

typedef struct kvio_serve_arrivals kvio_serve_arrivals_t;

typedef struct kvio_serve_arrivals_ops {
    /* When the next request is due on the loop's clock; INT64_MAX when
     * none is known (a source polled over the runtime says when to look
     * again through the loop's poll interval). */
    int64_t (*next_ns)(kvio_serve_arrivals_t *source, const kvio_serve_loop_t *loop,
                       int64_t now_ns);
    /* Queues the requests due at now_ns on the loop's lanes (routing them
     * when there are several); *more_now_p: another is due at this same
     * instant (the loop starts idle lanes once every one is in). */
    kvio_status_t (*take)(kvio_serve_arrivals_t *source, kvio_serve_loop_t *loop,
                          int64_t now_ns, bool *more_now_p);
    /* No request will come any more. */
    bool (*ended)(const kvio_serve_arrivals_t *source);
    /* Optional: something may be taken at now_ns at a lane's iteration
     * boundary (requests that came during the iteration); NULL: requests
     * are taken only as events of their own. */
    bool (*due)(const kvio_serve_arrivals_t *source, const kvio_serve_loop_t *loop,
                int64_t now_ns);
    /* Optional hooks of a source that talks to its sender (the client
     * rank): the lane is ready to serve; an iteration of it ended; it has
     * finished serving; and a look while the lane waits idle (wake: a
     * batch came). */
    kvio_status_t (*ready)(kvio_serve_arrivals_t *source, kvio_serve_lane_t *lane);
    kvio_status_t (*iteration_ended)(kvio_serve_arrivals_t *source, kvio_serve_lane_t *lane);
    kvio_status_t (*finished)(kvio_serve_arrivals_t *source, kvio_serve_lane_t *lane);
    kvio_status_t (*poll)(kvio_serve_arrivals_t *source, bool *wake_p);
    /* Optional: a request the source gave has finished (a closed loop's
     * user sends its next one after it). */
    void (*request_finished)(kvio_serve_arrivals_t *source,
                             const kvio_engine_finished_t *finished);
    const char *(*error)(const kvio_serve_arrivals_t *source);
    /* Optional: serving is held (the front end's pause, mode keep): the
     * lane starts no iteration and looks again after the poll interval. */
    bool (*held)(const kvio_serve_arrivals_t *source);
    /* Optional: a nap of at most ns that a request ends early (a source
     * whose sender can wake the lane: the front end). */
    void (*nap)(kvio_serve_arrivals_t *source, int64_t ns);
} kvio_serve_arrivals_ops_t;

struct kvio_serve_arrivals {
    const kvio_serve_arrivals_ops_t *ops;
};

/* Requests from a stream (serve/arrivals_stream.c). */
typedef struct kvio_serve_stream_params {
    kvio_stream_t *stream;        /* borrowed; drained */
    uint32_t block_size;
    int64_t warmup_ns;            /* requests arriving earlier are not measured */
    int64_t warmup_requests;      /* nor the first N */
    kvio_router_t *router;        /* routed: picks each request's lane (borrowed) */
    uint32_t share_index;         /* num_shares > 0: take requests i with */
    uint32_t num_shares;          /*   i mod num_shares == share_index; 0: route */
    const char *progress_label;   /* a progress line (NULL: none) */
    uint64_t num_requests;        /* the stream's length when known (progress) */
} kvio_serve_stream_params_t;

typedef struct kvio_serve_stream_arrivals kvio_serve_stream_arrivals_t;

/* Routed over lanes (num_lanes of them, their engines created), or one
 * lane's share. Destroy after the lanes' engines (they hold requests whose
 * hashes the source computes). */
kvio_status_t kvio_serve_stream_arrivals_create(const kvio_serve_stream_params_t *params,
                                                kvio_serve_lane_t *const *lanes,
                                                uint32_t num_lanes,
                                                kvio_serve_stream_arrivals_t **source_p);
kvio_serve_arrivals_t *kvio_serve_stream_arrivals(kvio_serve_stream_arrivals_t *source);
void kvio_serve_stream_arrivals_destroy(kvio_serve_stream_arrivals_t *source);

/* Requests from the client rank (serve/arrivals_client.c), for the one lane
 * of loop. */
typedef struct kvio_serve_client_arrivals kvio_serve_client_arrivals_t;

kvio_status_t kvio_serve_client_arrivals_create(kvio_rte_t *rte, int client_rank,
                                                uint32_t serve_index, kvio_serve_loop_t *loop,
                                                kvio_serve_lane_t *lane,
                                                kvio_serve_client_arrivals_t **source_p);
kvio_serve_arrivals_t *kvio_serve_client_arrivals(kvio_serve_client_arrivals_t *source);
/* Why the client rank is lost, or NULL while it is not. */
const char *kvio_serve_client_arrivals_lost(const kvio_serve_client_arrivals_t *source);
/* A block's hash entered (cached) or left the lane's prefix index: what the
 * next state message tells the client's router. */
void kvio_serve_client_arrivals_note(kvio_serve_client_arrivals_t *source, kvio_hash_t hash,
                                     bool cached);
void kvio_serve_client_arrivals_destroy(kvio_serve_client_arrivals_t *source);

/* Requests from a front end (serve/arrivals_frontend.c; kvio serve), for
 * serve rank rank (its index among the serve ranks) of loop's one lane,
 * whose engine exists. Destroy after the engine: requests still live then
 * are told they were aborted. */
typedef struct kvio_serve_frontend_arrivals kvio_serve_frontend_arrivals_t;

kvio_status_t kvio_serve_frontend_arrivals_create(kvio_frontend_t *frontend, uint32_t rank,
                                                  kvio_serve_loop_t *loop,
                                                  kvio_serve_lane_t *lane,
                                                  kvio_serve_frontend_arrivals_t **source_p);
kvio_serve_arrivals_t *kvio_serve_frontend_arrivals(kvio_serve_frontend_arrivals_t *source);
void kvio_serve_frontend_arrivals_destroy(kvio_serve_frontend_arrivals_t *source);
/* The engine observer's calls, passed on: a request's tokens, its end, a
 * block's hash entering (cached) or leaving the prefix index. */
void kvio_serve_frontend_arrivals_tokens(kvio_serve_frontend_arrivals_t *source, uint64_t id,
                                         uint32_t generated, int64_t end_ns);
void kvio_serve_frontend_arrivals_finished(kvio_serve_frontend_arrivals_t *source,
                                           const kvio_engine_finished_t *finished);
/* Fills finished->received (when its first byte was read, when the rank
 * took it) for a request of the front end, before it is recorded. */
void kvio_serve_frontend_arrivals_received(const kvio_serve_frontend_arrivals_t *source,
                                           kvio_engine_finished_t *finished);
void kvio_serve_frontend_arrivals_note(kvio_serve_frontend_arrivals_t *source, kvio_hash_t hash,
                                       bool cached);

/* ---------- update sources: model versions that change serving ---------- */

typedef struct kvio_serve_updates kvio_serve_updates_t;

/* What an update source says at an iteration boundary. */
typedef struct kvio_update_view {
    uint64_t ready_version;   /* a version ready to activate now (0: none) */
    uint64_t incoming_bytes;  /* an update on its way in, not yet active (colocated) */
    int64_t incoming_until_ns; /* when it is expected to activate (-1: unknown) */
    bool stalled;             /* apply: stall: an update notified, not yet ready */
    int64_t stall_until_ns;   /* until when (-1: unknown; look again) */
} kvio_update_view_t;

typedef struct kvio_serve_updates_ops {
    void (*look)(kvio_serve_updates_t *updates, int64_t now_ns, uint64_t engine_version,
                 kvio_update_view_t *view_p);
    /* The version a request arriving at now_ns is tagged with. */
    uint64_t (*version_at)(kvio_serve_updates_t *updates, int64_t now_ns);
    /* The lane's engine takes the ready version at now_ns (idle: the lane
     * was idle from idle_since_ns); returns, in *version_p, the version
     * active after it (the old one when the new one failed its checksum). */
    kvio_status_t (*activate)(kvio_serve_updates_t *updates, int64_t now_ns, bool idle,
                              int64_t idle_since_ns, const int64_t *stall_ns,
                              uint64_t *version_p);
    /* One bounded piece of receive work while time passes (NULL: none);
     * lane_stalled: the lane stalls for the update. */
    kvio_status_t (*poll)(kvio_serve_updates_t *updates, int64_t now_ns, bool lane_stalled,
                          bool *worked_p, int64_t *nap_ns_p);
    /* No version will come or remains to be handled. */
    bool (*over)(kvio_serve_updates_t *updates, int64_t now_ns);
    /* When to look again while nothing else is due (INT64_MAX: never). */
    int64_t (*next_ns)(kvio_serve_updates_t *updates, int64_t now_ns);
    const char *(*error)(const kvio_serve_updates_t *updates);
} kvio_serve_updates_ops_t;

struct kvio_serve_updates {
    const kvio_serve_updates_ops_t *ops;
};

/* Simulate's modelled updates (serve/updates_schedule.c). */
typedef struct kvio_serve_schedule_params {
    /* Every rank's, in version order (borrowed). The lane writes into its
     * rank's records when the engine took each (t_activated_ns, after the
     * scheduled time was read) and what it cost (added to stall_ns). */
    kvio_update_record_t *updates;
    size_t num_updates;
    int world_rank;                      /* the lane's */
    bool stall;                          /* update.apply: stall */
} kvio_serve_schedule_params_t;

typedef struct kvio_serve_schedule_updates kvio_serve_schedule_updates_t;

kvio_status_t kvio_serve_schedule_updates_create(const kvio_serve_schedule_params_t *params,
                                                 kvio_serve_schedule_updates_t **updates_p);
kvio_serve_updates_t *kvio_serve_schedule_updates(kvio_serve_schedule_updates_t *updates);
void kvio_serve_schedule_updates_destroy(kvio_serve_schedule_updates_t *updates);

/* The transport's receiver as a lane's update source
 * (serve/updates_receiver.c; kvio/update.h creates it). */
kvio_serve_updates_t *kvio_update_receiver_updates(kvio_update_receiver_t *receiver);
bool kvio_update_receiver_trainer_lost(const kvio_serve_updates_t *updates);

/* A participant that takes some lanes' requests on their way in: P/D's
 * hand-off (serve/pd_int.h), through which a prefill lane's requests go.
 * The loop knows it only by these calls. */
typedef struct kvio_serve_intake {
    /* Whether lane's requests go through add (else to the lane's engine). */
    bool (*takes)(const void *context, const kvio_serve_lane_t *lane);
    kvio_status_t (*add)(void *context, kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                         const kvio_engine_request_t *request);
    /* What failed; "" when nothing did. */
    const char *(*error)(const void *context);
    void *context;
} kvio_serve_intake_t;

/* An emulate P/D serve rank's side (serve/pd_int.h). */
typedef struct kvio_serve_pd_rank kvio_serve_pd_rank_t;

/* ---------- what the lanes record (serve/record.c) ---------- */

/* One iteration as iterations.csv and the event trace need it, with the
 * size of its batch and (with ids) its first request ids. */
typedef struct kvio_serve_iteration_record {
    kvio_engine_iteration_t iteration;
    uint32_t rank;       /* world rank */
    uint32_t batch_size;
    uint32_t num_ids;    /* of ids, at most KVIO_EVENT_MAX_REQUEST_IDS */
    uint32_t reserved;
    uint64_t ids[];      /* only with the recorder's with_ids */
} kvio_serve_iteration_record_t;

/* The finished requests and iterations of one or more lanes, in the order
 * they happened, and the requests finished per model version. */
typedef struct kvio_serve_recorder {
    kvio_engine_finished_t *finished;
    size_t num_finished, finished_capacity;
    unsigned char *iterations; /* kvio_serve_iteration_record_t, back to back */
    size_t iterations_length, iterations_capacity;
    size_t iterations_limit;   /* bytes kept (0: no limit); later ones are counted */
    uint64_t iterations_dropped;
    bool with_ids;             /* keep each iteration's request ids (event traces) */
    uint64_t *served;          /* per version */
    size_t num_versions;
    kvio_status_t status;      /* out of memory in a hook, or a malformed record */
    kvio_serve_samples_t *samples; /* simulate: where measured requests go (may be NULL) */
    /* Simulate: with rows set, each finished request and iteration is
     * rendered as it is recorded (requests.csv with the control's columns,
     * iterations.csv, the events; each may be NULL) and kept only with
     * rows.keep (what serving measured is handed over): memory no longer
     * grows with the run's length. */
    struct {
        bool on, keep;
        kvio_csv_t *requests, *iterations;
        kvio_event_trace_t *events;
        const kvio_serve_output_t *control;
        double host_bandwidth;
    } rows;
} kvio_serve_recorder_t;

void kvio_serve_record_finished(kvio_serve_recorder_t *recorder,
                                const kvio_engine_finished_t *finished);
void kvio_serve_record_iteration(kvio_serve_recorder_t *recorder, uint32_t rank,
                                 const kvio_engine_t *engine,
                                 const kvio_engine_iteration_t *iteration);
void kvio_serve_recorder_fini(kvio_serve_recorder_t *recorder);

/* Calls each for every iteration record (length bytes of them, as packed
 * by the recorder); stops at a malformed one (KVIO_ERR_PARSE). */
typedef void (*kvio_serve_iteration_each_t)(void *context,
                                             const kvio_serve_iteration_record_t *record);
kvio_status_t kvio_serve_iterations_each(const void *records, size_t length,
                                         kvio_serve_iteration_each_t each, void *context);

/* Keeps an iteration, or every iteration of length bytes of records, in
 * output's steps. */
kvio_status_t kvio_serve_output_add_step(kvio_serve_output_t *output, uint32_t rank,
                                         const kvio_engine_iteration_t *iteration);
void kvio_serve_output_add_steps(kvio_serve_output_t *output, const void *records,
                                 size_t length);

/* requests.csv rows of count finished requests; with a control (sorted by
 * id; may be NULL), each row ends with the request's difference from it. */
kvio_status_t kvio_serve_render_requests(kvio_csv_t *csv, const kvio_engine_finished_t *finished,
                                         size_t count, const kvio_serve_output_t *control);

/* iterations.csv rows (csv may be NULL) and iteration events (events may be
 * NULL; the records must then carry their ids) of length bytes of records. */
kvio_status_t kvio_serve_render_iterations(kvio_csv_t *csv, kvio_event_trace_t *events,
                                           const void *records, size_t length,
                                           double host_bandwidth);

/* ---------- a serve rank's real memory (serve/memory.c) ---------- */

typedef struct kvio_serve_memory {
    void *memory;            /* the KV pool: (blocks + 1) x block_bytes (NULL: generated) */
    bool generated;          /* serve.kvcache.pool_memory: generated: no pool memory */
    size_t memory_bytes;
    void *swap_space;        /* swap preemption: the host swap space */
    bool swap_pinned;        /* swap_space is pinned memory of device (a GPU pool) */
    size_t swap_bytes;
    uint32_t swap_blocks;
    struct kvio_device *device; /* device.memory pinned or cuda: the pool's domain
                                   (memory is its allocation); NULL: mmap'd host */
    bool spin;               /* a spin kernel runs for each iteration (gpu executor) */
    kvio_tier_t **tiers;     /* lower tiers, their data real */
    size_t num_tiers;
    /* a shared tier's endpoint to the store (the serve ranks open it
     * together, and stop it together when they are destroyed; NULL: none) */
    struct kvio_shared_endpoint *shared;
} kvio_serve_memory_t;

/* Serve rank rank's (of num_serve) pool of blocks usable blocks, its swap
 * space and its tiers (named apart from every other rank's and run's; a
 * shared tier's store opened with the other serve ranks). */
kvio_status_t kvio_serve_memory_create(const kvio_serve_run_t *run, uint32_t rank,
                                       uint32_t num_serve,
                                       uint32_t blocks, uint64_t block_bytes,
                                       kvio_serve_memory_t *setup, char *error_p,
                                       size_t error_len);
/* With the other serve ranks, once this one has served its last request:
 * a shared tier's store stops (none asks this rank's shard for anything
 * after it). The error names the store's failure. */
kvio_status_t kvio_serve_memory_close(kvio_serve_memory_t *setup, char *error_p,
                                      size_t error_len);
void kvio_serve_memory_destroy(kvio_serve_memory_t *setup);

/* Device memory a rank's spin kernel streams over (0: none), and where its
 * KV pool lives ("host" or the device's description). */
uint64_t kvio_serve_memory_spin_bytes(const kvio_serve_memory_t *setup,
                                      const kvio_serve_run_t *run);
const char *kvio_serve_memory_where(const kvio_serve_memory_t *setup);

/* A plain memcpy of as many whole blocks as the rank swapped (at most 64)
 * between its pool and swap space, after the run: what the swap copies
 * compare with. Adds to *bytes_p and *ns_p. */
void kvio_serve_memory_reference_copy(const kvio_serve_memory_t *setup, uint64_t block_bytes,
                                      uint64_t swapped_bytes, uint64_t *bytes_p,
                                      int64_t *ns_p);

/* ---------- lanes and the loop (serve/loop.c) ---------- */

typedef enum {
    KVIO_LANE_IDLE,  /* nothing running; looks again at wake_ns */
    KVIO_LANE_RUN,   /* an iteration runs until busy_until_ns */
    KVIO_LANE_STALL, /* an update stall, or the pool lent out, until busy_until_ns */
} kvio_lane_state_t;

/* How a lane's iterations ended when planned, and what the engine cost
 * (real executors). */
typedef struct kvio_serve_timing {
    kvio_hist_t *error_ns;  /* |actual - planned| end of an iteration */
    kvio_hist_t *error_ppm; /* the same per million of the iteration's length */
    int64_t overhead_ns;    /* the engine's own schedule + complete CPU time */
    int64_t planned_ns;     /* sum of iteration durations */
    int64_t overrun_ns;     /* sum of the late ends */
} kvio_serve_timing_t;

/* One serve rank as the loop drives it. */
struct kvio_serve_lane {
    kvio_engine_t *engine;          /* NULL: emulated iterations, no requests */
    uint32_t world_rank;            /* in every file the run writes */
    kvio_serve_updates_t *updates;  /* NULL: no model updates */
    const kvio_update_config_t *update; /* what a version does (NULL: nothing) */
    uint64_t block_bytes;           /* KV bytes of one block (colocated lending) */
    int64_t iteration_ns;           /* engine-less lanes: one emulated iteration */
    int64_t serve_until_ns;         /* engine-less lanes: serve this long if the
                                       trainer is lost */
    bool (*trainer_lost)(const kvio_serve_updates_t *updates); /* may be NULL */
    /* The loop's. */
    kvio_lane_state_t state;
    int64_t busy_until_ns, wake_ns;
    int64_t iteration_start_ns;
    bool woken;                     /* idle, given a request at this instant */
    bool finished;                  /* serving is over for this lane */
    int64_t idle_since_ns;
    int64_t drain_start_ns;         /* in_flight: wait: admission stopped (-1: not) */
    int64_t stall_start_ns;         /* in an update stall since (-1: not) */
    int stall_cause;                /* of that stall (KVIO_STALL_*) */
    int64_t pending_stall_ns[KVIO_STALL_CAUSES]; /* lost to the update not yet active */
    uint64_t engine_version;        /* the version its engine runs */
    uint64_t iterations;            /* engine or emulated iterations run */
    int64_t drain_stall_ns, update_stall_ns, lent_stall_ns;
    kvio_serve_timing_t timing;     /* real executors */
    bool timed;                     /* the executor is real: keep timing */
};

struct kvio_serve_loop {
    kvio_executor_t *executor;
    kvio_serve_arrivals_t *arrivals; /* NULL: no requests */
    kvio_serve_lane_t **lanes;
    uint32_t num_lanes;
    int64_t origin_ns;               /* the engines' time = loop time - origin */
    int64_t poll_ns;                 /* real executors: look again after this long idle */
    uint64_t in_flight;              /* requests queued and not finished */
    int64_t max_concurrency;         /* 0: open loop */
    volatile sig_atomic_t *stop;     /* set asynchronously (may be NULL) */
    bool stopped;                    /* stop was seen: no new iteration starts */
    /* Real executors: once the arrivals have ended and the duration has
     * passed, serving goes on at most this long (0: until every request
     * finished); the requests in flight then are cut, drain_cut of them (the
     * loop's clock: drain_deadline_ns, 0 until the arrivals end). */
    int64_t drain_timeout_ns;
    int64_t duration_ns;             /* the arrivals' planned end after origin (0: none) */
    int64_t drain_deadline_ns;
    uint64_t drain_cut;
    uint64_t drain_overdue;          /* of drain_cut: in flight past their lane's p99 e2el */
    kvio_serve_intake_t intake;      /* requests added to the lanes it takes go through
                                        it (add NULL: none) */
    /* Work that must go on while the lanes run (an emulate P/D rank's
     * messages and transfers): at every boundary and while time passes
     * (NULL: none); an error ends the loop with chores_error's text. */
    kvio_status_t (*chores)(void *context);
    const char *(*chores_error)(void *context);
    void *chores_context;
    char error[KVIO_ERROR_MAX];
};

/* Sets a lane up for the loop (timing histograms when timed). */
kvio_status_t kvio_serve_lane_init(kvio_serve_lane_t *lane, bool timed);
void kvio_serve_lane_fini(kvio_serve_lane_t *lane);

/* Queues request on lane (counts it in flight; wakes an idle lane). */
kvio_status_t kvio_serve_loop_add(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                  const kvio_engine_request_t *request);

/* Queues request on lane as the same request in flight, passed on from
 * another lane (P/D: from its prefill to its decode); wakes an idle lane. */
kvio_status_t kvio_serve_loop_pass(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                   const kvio_engine_request_t *request);

/* A finished request leaves the loop's count in flight, and its arrival
 * source hears of it (engine observer); finished is NULL for a request
 * taken out unfinished. */
void kvio_serve_loop_finished(kvio_serve_loop_t *loop, const kvio_engine_finished_t *finished);

/* Runs the lanes until serving and updates are over (or stop is set and the
 * updates are over); a lane's failure ends it with loop->error set. */
kvio_status_t kvio_serve_loop_run(kvio_serve_loop_t *loop);

/* ---------- a serve rank of emulate mode (serve/rank.c) ---------- */

/* Iteration records a serve rank keeps for rank 0 (its report must stay
 * below the runtime's message limit); later ones are counted, not kept. */
#define KVIO_SERVE_ITERATIONS_MAX_BYTES (8u << 20)

/* One serve rank in real time: its memory, engine and one lane, on the
 * realtime (or gpu) executor, fed by its share of the stream or by the
 * client rank. */
struct kvio_serve_rank {
    const kvio_serve_run_t *run;
    uint32_t serve_index, num_serve;
    uint32_t blocks, block_size;
    uint64_t block_bytes;
    kvio_cost_t *cost;
    kvio_serve_memory_t memory;
    kvio_serve_lane_t lane;
    kvio_serve_lane_t *lanes[1];
    kvio_serve_recorder_t recorder;
    kvio_executor_t executor;
    kvio_serve_loop_t loop;
    kvio_serve_stream_arrivals_t *stream;   /* its share of the stream */
    kvio_serve_client_arrivals_t *client;   /* or the client rank's requests */
    kvio_serve_frontend_arrivals_t *frontend; /* or the front end's (kvio serve) */
    kvio_serve_pd_rank_t *pd;               /* P/D: its role's side (NULL: colocated) */
    kvio_update_receiver_t *receiver;       /* model updates' receiver (NULL: none) */
    char error[KVIO_ERROR_MAX];
};

/* Where a rank's report (kvio_serve_rank_pack) is merged into the run's
 * totals on rank 0 (serve/merge.c). */
void kvio_serve_executor_fill(kvio_result_t *result, const char *executor,
                              const char *kv_memory, bool spin, uint64_t spin_bytes,
                              const kvio_hist_t *error_ns, const kvio_hist_t *error_ppm,
                              int64_t overhead, int64_t planned);

#endif
