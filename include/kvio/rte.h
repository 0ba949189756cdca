/* Runtime: the ranks of a run and how they talk. Two implementations behind
 * one ops table: `local` (ranks are threads of this process) and `mpi` (ranks
 * are MPI processes started by mpirun). Both give size, index, point-to-point
 * messages, barrier, allgather, gather, reduce and a clock offset to rank 0
 * measured by minimum-RTT ping-pong.
 *
 * Liveness is judged by heartbeats, never by progress: a wait for a peer
 * lasts as long as the peer answers, however slowly it moves. It ends when
 * the peer fails (at once), ends without what was awaited, or falls silent
 * for longer than the world's timeout (mpi: a heartbeat thread per process;
 * local: a thread of this process answers until it ends). Once the run is
 * stopped (kvio_rte_world_set_stop) every wait ends within the timeout. */
#ifndef KVIO_RTE_H
#define KVIO_RTE_H

#include "kvio/status.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A world: every rank of the run (all of them for local, this process's
 * one for mpi). */
typedef struct kvio_rte_world kvio_rte_world_t;
/* One rank's handle, valid inside kvio_rte_world_run's callback. */
typedef struct kvio_rte kvio_rte_t;

/* Ranks share one address space (local threads). */
#define KVIO_RTE_CAP_SHARED_MEMORY 1u
/* Ranks may be on different nodes (clocks differ). */
#define KVIO_RTE_CAP_MULTI_NODE 2u

/* Largest message sent in one piece: a longer one (any length) goes as a
 * header and pieces of at most this size, joined on arrival. */
#define KVIO_RTE_MAX_MESSAGE (16u << 20)

/* First tag free for users; lower tags belong to the collectives. */
#define KVIO_RTE_TAG_USER 64

/* kvio's own tags, listed here so that none collide (tests use the first
 * few above KVIO_RTE_TAG_USER). */
#define KVIO_UPDATE_TAG_TRAINER_LOST (KVIO_RTE_TAG_USER + 32) /* rank 0 to serve ranks */
#define KVIO_SERVE_TAG_STATE (KVIO_RTE_TAG_USER + 33)         /* serve rank to client */
#define KVIO_SERVE_TAG_REQUESTS (KVIO_RTE_TAG_USER + 34)      /* client to serve rank */
#define KVIO_SERVE_TAG_PD_HANDOFF (KVIO_RTE_TAG_USER + 35)    /* prefill to decode rank */
#define KVIO_SERVE_TAG_PD_RELEASE (KVIO_RTE_TAG_USER + 36)    /* decode to prefill rank */
#define KVIO_RUN_TAG_TRAINING_DONE (KVIO_RTE_TAG_USER + 40)   /* rank 0 to client */
#define KVIO_UPDATE_TAG_SERVED (KVIO_RTE_TAG_USER + 41)       /* serve rank to trainer */
#define KVIO_SHARED_TAG_ADDRESSES (KVIO_RTE_TAG_USER + 50)    /* shared KV store, rank to rank */
#define KVIO_SHARED_TAG_DONE (KVIO_RTE_TAG_USER + 51)         /* shared KV store, rank to rank */
#define KVIO_RL_TAG_PLAN (KVIO_RTE_TAG_USER + 60)             /* RL rollout to trainer */
#define KVIO_RL_TAG_TRAIN (KVIO_RTE_TAG_USER + 61)            /* RL rollout to trainer */

/* The message of KVIO_UPDATE_TAG_SERVED: a serve rank's requests served so
 * far, which the trainer's adaptive checkpoint policy reads. */
typedef struct kvio_served_report {
    int64_t t_ns;   /* the rank's clock (rank 0's) */
    uint64_t count; /* requests finished since the run's start */
} kvio_served_report_t;

typedef struct kvio_rte_params {
    const char *kind;   /* "auto" (mpi under mpirun, else local), "local", "mpi" */
    int num_ranks;      /* local: threads to start; mpi: required world size */
    int64_t timeout_ns; /* longest silence of a live peer; <= 0 means 30 s */
} kvio_rte_params_t;

/* What a rank knows of a peer. */
typedef enum {
    KVIO_PEER_RUNNING = 0, /* it answers heartbeats, however slowly it progresses */
    KVIO_PEER_DONE,        /* it finished cleanly */
    KVIO_PEER_FAILED,      /* it finished with an error, or its process died */
    KVIO_PEER_SILENT,      /* no heartbeat for longer than the timeout */
} kvio_peer_state_t;

/* Reduction operators for kvio_rte_reduce. */
typedef enum { KVIO_RTE_SUM, KVIO_RTE_MIN, KVIO_RTE_MAX } kvio_rte_op_t;

/* A rank's body; its status is the rank's outcome. */
typedef kvio_status_t (*kvio_rte_main_t)(kvio_rte_t *rte, void *arg);

/* Creates the world (mpi: MPI_Init and a size check). On error the message,
 * e.g. "mpirun started 4 ranks; ranks: {train: 1, serve: 2} needs 3", is in
 * error_p. The caller destroys the world. */
kvio_status_t kvio_rte_world_create(const kvio_rte_params_t *params,
                                    kvio_rte_world_t **world_p, char *error_p,
                                    size_t error_len);

/* Tears the world down; failed tells mpi not to finalize collectively. A
 * process that does not host rank 0 first waits, bounded by the timeout,
 * until rank 0's process calls this (under mpirun the first rank to exit
 * ends the job, so rank 0 writes the results before it destroys its world). */
void kvio_rte_world_destroy(kvio_rte_world_t *world, bool failed);

/* The runtime's name ("local", "mpi"). */
const char *kvio_rte_world_kind(const kvio_rte_world_t *world);

/* True when this process hosts rank 0 (and so writes the results). */
bool kvio_rte_world_is_root(const kvio_rte_world_t *world);

/* Runs body on every rank this process hosts (local: one thread each), after
 * measuring clock offsets. Returns KVIO_OK when every local rank did, else
 * the first error; the failing rank's message is in error_p. */
kvio_status_t kvio_rte_world_run(kvio_rte_world_t *world, kvio_rte_main_t body, void *arg,
                                 char *error_p, size_t error_len);

int kvio_rte_size(const kvio_rte_t *rte);
/* True when the ranks share one address space (local: threads). */
bool kvio_rte_shared_memory(const kvio_rte_t *rte);
int kvio_rte_index(const kvio_rte_t *rte);
kvio_rte_world_t *kvio_rte_world(kvio_rte_t *rte);
int64_t kvio_rte_timeout_ns(const kvio_rte_t *rte);

/* Records this rank's error message (reported by kvio_rte_world_run). */
void kvio_rte_set_error(kvio_rte_t *rte, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The runtime's verdict on the peer the last failed wait of this rank gave
 * up on ("rank 2 failed", "rank 2 ended without sending it", "rank 2 has
 * been silent for ..."); "" when none. Borrowed. */
const char *kvio_rte_verdict(const kvio_rte_t *rte);

/* Ends every wait of the world's ranks within the timeout once *stop is
 * set (an interrupted run); stop may be NULL. */
void kvio_rte_world_set_stop(kvio_rte_world_t *world, volatile sig_atomic_t *stop);

/* What this rank knows of rank; for KVIO_PEER_SILENT, *silent_ns_p (may be
 * NULL) says for how long. Cheap, non-blocking. */
kvio_peer_state_t kvio_rte_peer_state(kvio_rte_t *rte, int rank, int64_t *silent_ns_p);

/* True when rank has failed, died or gone silent; cheap, non-blocking. */
bool kvio_rte_peer_failed(kvio_rte_t *rte, int rank);

/* The verdict on a peer this rank is waiting for: KVIO_OK while it runs
 * (and, unless owes is set, once it is done); else KVIO_ERR_PEER with the
 * verdict in reason_p, naming the rank, what this rank was waiting for
 * (waiting_for, e.g. "a free slot for version 3") and, for a silent peer,
 * for how long: "rank 2 has been silent for 31.2 s (no heartbeat within
 * ranks.timeout, 30.0 s) while rank 0 waited for ...". */
kvio_status_t kvio_rte_peer_check(kvio_rte_t *rte, int rank, bool owes, const char *waiting_for,
                                  char *reason_p, size_t reason_len);

/* Sends length bytes (copied) to rank with tag (>= KVIO_RTE_TAG_USER for
 * users), waiting while the receiver lives. */
kvio_status_t kvio_rte_send(kvio_rte_t *rte, int to, int tag, const void *data, size_t length);

/* Receives the next message from rank with tag; *data_p is malloc'd and the
 * caller frees it. Waits while the sender lives: KVIO_ERR_PEER as soon as it
 * is known to have failed, ended without sending or fallen silent (the
 * verdict is this rank's error); KVIO_ERR_INTERRUPTED a timeout after the
 * run was stopped. */
kvio_status_t kvio_rte_recv(kvio_rte_t *rte, int from, int tag, void **data_p, size_t *length_p);

/* Sends length bytes (copied) to rank with tag without waiting for the
 * receiver to take them: the local runtime queues the message at once; mpi
 * keeps a pending send that later runtime calls of this rank progress. Two
 * ranks that post to each other never wait on each other. Messages from one
 * rank to another with one tag arrive in the order sent or posted. */
kvio_status_t kvio_rte_post(kvio_rte_t *rte, int to, int tag, const void *data, size_t length);

/* Waits, while the receivers live, until every message this rank posted
 * has left (mpi: matched by its receiver). */
kvio_status_t kvio_rte_flush(kvio_rte_t *rte);

/* Takes the next message from rank with tag if one has arrived: KVIO_OK
 * with *data_p malloc'd (the caller frees it); KVIO_INPROGRESS when none
 * has; KVIO_ERR_PEER when none has and the sender has failed or gone silent
 * (local: or finished). Never waits. */
kvio_status_t kvio_rte_try_recv(kvio_rte_t *rte, int from, int tag, void **data_p,
                                size_t *length_p);

/* Waits until every rank has arrived. */
kvio_status_t kvio_rte_barrier(kvio_rte_t *rte);

/* The run's one start: t0 on rank 0's clock (kvio_rte_time_ns's timebase)
 * and the wall clock (ns since the epoch) rank 0 read at that moment. */
typedef struct kvio_rte_start {
    int64_t t0_ns;
    int64_t t0_wall_ns;
} kvio_rte_start_t;

/* A barrier that agrees on t0: every rank arrives (its pools built, its
 * transports connected), then rank 0 reads its clocks and releases all with
 * them. Every rank's times count from start_p->t0_ns. */
kvio_status_t kvio_rte_start(kvio_rte_t *rte, kvio_rte_start_t *start_p);

/* Every rank contributes length bytes; all_p (size * length) receives them in
 * rank order on every rank. */
kvio_status_t kvio_rte_allgather(kvio_rte_t *rte, const void *data, size_t length, void *all_p);

/* Variable-size allgather: blobs_p and lengths_p get size entries each,
 * malloc'd; free with kvio_rte_blobs_free. */
kvio_status_t kvio_rte_allgather_blobs(kvio_rte_t *rte, const void *data, size_t length,
                                       void ***blobs_p, size_t **lengths_p);

/* Variable-size gather to rank 0: only rank 0 gets blobs_p and lengths_p
 * (NULL elsewhere). */
kvio_status_t kvio_rte_gather_blobs(kvio_rte_t *rte, const void *data, size_t length,
                                    void ***blobs_p, size_t **lengths_p);

/* kvio_rte_gather_blobs, except that rank 0 gives up on rank `expendable`
 * (-1: none) when that rank is lost, failed or silent past ranks.timeout:
 * its blob is NULL with length 0, why is in reason_p (rank 0's), and the
 * later gathers and barriers of rank 0 leave it out. Any other failure
 * fails the gather as kvio_rte_gather_blobs does. */
kvio_status_t kvio_rte_gather_blobs_sparing(kvio_rte_t *rte, const void *data, size_t length,
                                            int expendable, void ***blobs_p,
                                            size_t **lengths_p, char *reason_p,
                                            size_t reason_len);

void kvio_rte_blobs_free(void **blobs, size_t *lengths, int count);

/* Element-wise reduction of count doubles to rank 0 (result_p is written on
 * rank 0 only). */
kvio_status_t kvio_rte_reduce(kvio_rte_t *rte, const double *values, size_t count,
                              kvio_rte_op_t op, double *result_p);

/* This rank's clock offset to rank 0 (local - rank 0, ns) and its
 * uncertainty (half the minimum round trip); 0 and 0 on rank 0 and on every
 * rank of the local runtime (its threads read one clock). */
void kvio_rte_clock_offset(const kvio_rte_t *rte, int64_t *offset_ns_p,
                           int64_t *uncertainty_ns_p);

/* kvio_time_ns() converted to rank 0's timebase. */
int64_t kvio_rte_time_ns(const kvio_rte_t *rte);

/* Picks the runtime kvio would use under params->kind "auto": "mpi" when the
 * process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set). */
const char *kvio_rte_detect(void);

/* The number of processes mpirun started this one among (its world size),
 * 0 when mpirun did not start it: a command whose ranks are whatever mpirun
 * gives (kvio mlperf's clients) asks for that many. */
int kvio_rte_launched_size(void);

#endif
