/* The one serve loop, for every mode (serve/loop_int.h). Each turn it finds
 * the next event (a request due from the arrival source, or a lane's
 * iteration, stall or look-again ending), lets the executor pass the time to
 * it, and handles it. At a lane's iteration boundary it applies what an
 * update does to serving, written once here for every mode: activate a
 * ready version (draining first with in_flight: wait), lend the KV pool to
 * an incoming one (colocated), stall while one is on its way (apply:
 * stall); then it takes one step of the engine and hands the iteration to
 * the executor. Ties go to arrivals first, then to the lowest lane; the
 * requests of one instant are all queued before idle lanes start. */
#include "serve/loop_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"


/* ---------- lanes ---------- */

kvio_status_t kvio_serve_lane_init(kvio_serve_lane_t *lane, bool timed)
{
    lane->state = KVIO_LANE_IDLE;
    lane->busy_until_ns = -1;
    lane->wake_ns = INT64_MAX;
    lane->drain_start_ns = -1;
    lane->stall_start_ns = -1;
    lane->timed = timed;
    if (timed && (kvio_hist_create(&lane->timing.error_ns) != KVIO_OK ||
                  kvio_hist_create(&lane->timing.error_ppm) != KVIO_OK))
        return KVIO_ERR_NOMEM;
    return KVIO_OK;
}

void kvio_serve_lane_fini(kvio_serve_lane_t *lane)
{
    kvio_hist_destroy(lane->timing.error_ns);
    kvio_hist_destroy(lane->timing.error_ppm);
    lane->timing.error_ns = lane->timing.error_ppm = NULL;
}

/* Thread CPU time: the engine's own work, not time the OS took away. */
static int64_t thread_cpu_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* An iteration planned for duration_ns ended error_ns off its planned end. */
static void timing_record(kvio_serve_timing_t *timing, int64_t duration_ns, int64_t error_ns)
{
    uint64_t off = (uint64_t)(error_ns > 0 ? error_ns : -error_ns);
    kvio_hist_record(timing->error_ns, off);
    if (duration_ns > 0)
        kvio_hist_record(timing->error_ppm, (uint64_t)((double)off * 1e6 / (double)duration_ns));
    timing->planned_ns += duration_ns;
    if (error_ns > 0)
        timing->overrun_ns += error_ns;
}

static bool closed(const kvio_serve_loop_t *loop)
{
    return loop->max_concurrency > 0 && loop->in_flight >= (uint64_t)loop->max_concurrency;
}

kvio_status_t kvio_serve_loop_pass(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                   const kvio_engine_request_t *request)
{
    const kvio_serve_intake_t *intake = &loop->intake;
    bool taken = intake->add != NULL && intake->takes(intake->context, lane);
    kvio_status_t status = taken ? intake->add(intake->context, loop, lane, request)
                                 : kvio_engine_add(lane->engine, request);
    if (status != KVIO_OK) {
        if (taken && loop->error[0] == '\0')
            snprintf(loop->error, sizeof(loop->error), "%s", intake->error(intake->context));
        return status;
    }
    if (lane->state == KVIO_LANE_IDLE)
        lane->woken = true; /* starts once every arrival of this instant is in */
    return KVIO_OK;
}

kvio_status_t kvio_serve_loop_add(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                  const kvio_engine_request_t *request)
{
    kvio_status_t status = kvio_serve_loop_pass(loop, lane, request);
    if (status == KVIO_OK)
        loop->in_flight++;
    return status;
}

void kvio_serve_loop_finished(kvio_serve_loop_t *loop, const kvio_engine_finished_t *finished)
{
    if (loop->in_flight > 0)
        loop->in_flight--;
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    if (finished != NULL && arrivals != NULL && arrivals->ops->request_finished != NULL)
        arrivals->ops->request_finished(arrivals, finished);
}

/* A lane's failure, in loop->error once (the first one wins): what, after
 * the lane's rank. */
static kvio_status_t lane_failed(kvio_serve_loop_t *loop, const kvio_serve_lane_t *lane,
                                 kvio_status_t status, const char *what)
{
    if (loop->error[0] == '\0')
        snprintf(loop->error, sizeof(loop->error), "serve rank %u: %s", lane->world_rank,
                 what != NULL && what[0] != '\0' ? what : kvio_strerror(status));
    return status;
}

/* A source's failure: its message names the rank already (else the lane's
 * rank and the status). */
static kvio_status_t source_failed(kvio_serve_loop_t *loop, const kvio_serve_lane_t *lane,
                                   kvio_status_t status, const char *message)
{
    if (loop->error[0] == '\0' && message != NULL && message[0] != '\0')
        snprintf(loop->error, sizeof(loop->error), "%s", message);
    return lane_failed(loop, lane, status, NULL);
}

/* ---------- what an update does to serving ---------- */

static bool updates_over(const kvio_serve_lane_t *lane, int64_t now_ns)
{
    return lane->updates == NULL || lane->updates->ops->over(lane->updates, now_ns);
}

/* When an idle lane looks again (INT64_MAX: only when a request comes). */
static int64_t lane_wake(const kvio_serve_loop_t *loop, const kvio_serve_lane_t *lane,
                         int64_t now_ns)
{
    int64_t wake = INT64_MAX;
    if (lane->updates != NULL && lane->updates->ops->next_ns != NULL)
        wake = lane->updates->ops->next_ns(lane->updates, now_ns);
    if (lane->engine == NULL && !lane->finished && wake == INT64_MAX && loop->poll_ns > 0)
        wake = now_ns + loop->poll_ns;
    return wake;
}

/* A time a source does not know (-1 or INT64_MAX) becomes a look again. */
static int64_t until_or_look(const kvio_serve_loop_t *loop, int64_t until_ns, int64_t now_ns)
{
    if (until_ns < 0 || until_ns == INT64_MAX)
        return now_ns + (loop->poll_ns > 0 ? loop->poll_ns : 1);
    return until_ns;
}

/* The ready version activates (drained first with in_flight: wait), then
 * the pool lends what an incoming update needs (colocated); *view_p is
 * what the source says after it. was_idle: the lane had nothing running. */
static kvio_status_t apply_updates(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                   int64_t now_ns, bool was_idle, kvio_update_view_t *view_p)
{
    kvio_serve_updates_t *updates = lane->updates;
    const kvio_update_config_t *update = lane->update;
    updates->ops->look(updates, now_ns, lane->engine_version, view_p);
    if (view_p->ready_version > lane->engine_version) {
        if (update != NULL && update->in_flight == KVIO_IN_FLIGHT_WAIT && lane->engine != NULL &&
            !kvio_engine_drain(lane->engine)) {
            if (lane->drain_start_ns < 0)
                lane->drain_start_ns = now_ns; /* admission stops until they have finished */
        } else {
            if (lane->drain_start_ns >= 0) {
                lane->drain_stall_ns += now_ns - lane->drain_start_ns;
                lane->pending_stall_ns[KVIO_STALL_DRAIN] += now_ns - lane->drain_start_ns;
            }
            lane->drain_start_ns = -1;
            uint64_t version = lane->engine_version;
            kvio_status_t status = updates->ops->activate(updates, now_ns, was_idle,
                                                          lane->idle_since_ns,
                                                          lane->pending_stall_ns, &version);
            if (status != KVIO_OK)
                return source_failed(loop, lane, status, updates->ops->error(updates));
            memset(lane->pending_stall_ns, 0, sizeof(lane->pending_stall_ns));
            if (version > lane->engine_version) {
                lane->engine_version = version;
                if (lane->engine != NULL && (status = kvio_engine_activate(lane->engine,
                                                                           version)) != KVIO_OK)
                    return lane_failed(loop, lane, status, NULL);
            }
        }
        updates->ops->look(updates, now_ns, lane->engine_version, view_p);
    }
    if (update != NULL && update->colocated != KVIO_COLOCATED_OFF && lane->engine != NULL &&
        !lane->finished) {
        kvio_status_t status = kvio_engine_reserve(
            lane->engine, kvio_serve_lent_blocks(update, view_p->incoming_bytes, lane->block_bytes));
        if (status != KVIO_OK)
            return lane_failed(loop, lane, status, "lending KV memory to an update");
    }
    return KVIO_OK;
}

/* ---------- a lane's iteration boundary ---------- */

/* The lane's iteration (or stall) that ends at now_ns. */
static kvio_status_t end_running(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                 int64_t now_ns)
{
    if (lane->state == KVIO_LANE_STALL) {
        int64_t stalled_ns = now_ns - lane->stall_start_ns;
        lane->pending_stall_ns[lane->stall_cause] += stalled_ns;
        if (lane->stall_cause == KVIO_STALL_APPLY)
            lane->update_stall_ns += stalled_ns;
        else
            lane->lent_stall_ns += stalled_ns;
        lane->stall_start_ns = -1;
        return KVIO_OK;
    }
    if (lane->timed)
        timing_record(&lane->timing, lane->busy_until_ns - lane->iteration_start_ns,
                      now_ns - lane->busy_until_ns);
    if (lane->engine == NULL)
        return KVIO_OK;
    int64_t before_ns = lane->timed ? thread_cpu_ns() : 0;
    kvio_engine_complete(lane->engine, now_ns - loop->origin_ns);
    if (lane->timed)
        lane->timing.overhead_ns += thread_cpu_ns() - before_ns;
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    if (arrivals != NULL && arrivals->ops->iteration_ended != NULL) {
        kvio_status_t status = arrivals->ops->iteration_ended(arrivals, lane);
        if (status != KVIO_OK)
            return source_failed(loop, lane, status, arrivals->ops->error(arrivals));
    }
    return KVIO_OK;
}

static void become_idle(kvio_serve_lane_t *lane, int64_t now_ns)
{
    if (lane->state != KVIO_LANE_IDLE)
        lane->idle_since_ns = now_ns;
    lane->state = KVIO_LANE_IDLE;
    lane->busy_until_ns = -1;
}

/* Nothing to run: the lane idles, and has finished serving when no request
 * can come any more. */
static kvio_status_t go_idle(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane, int64_t now_ns)
{
    become_idle(lane, now_ns);
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    bool no_more = arrivals == NULL || arrivals->ops->ended(arrivals) || loop->stopped;
    if (lane->engine != NULL && no_more && !lane->finished) {
        lane->finished = true;
        if (arrivals != NULL && arrivals->ops->finished != NULL) {
            kvio_status_t status = arrivals->ops->finished(arrivals, lane);
            if (status != KVIO_OK)
                return source_failed(loop, lane, status, arrivals->ops->error(arrivals));
        }
    }
    lane->wake_ns = lane_wake(loop, lane, now_ns);
    return KVIO_OK;
}

/* Only requests waiting for their KV from a tier: the lane idles and looks
 * again when the first load ends (emulate: after a look interval), or
 * sooner for an arrival or an update. */
static kvio_status_t wait_for_kv(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                 int64_t now_ns)
{
    become_idle(lane, now_ns);
    int64_t ready_ns = kvio_engine_kv_ready_ns(lane->engine);
    int64_t at_ns = until_or_look(loop, ready_ns < 0 ? -1 : ready_ns + loop->origin_ns, now_ns);
    if (at_ns <= now_ns)
        at_ns = now_ns + 1;
    int64_t wake_ns = lane_wake(loop, lane, now_ns);
    lane->wake_ns = at_ns < wake_ns ? at_ns : wake_ns;
    return KVIO_OK;
}

static void start_running(kvio_serve_lane_t *lane, int64_t now_ns, int64_t duration_ns)
{
    lane->state = KVIO_LANE_RUN;
    lane->iteration_start_ns = now_ns;
    lane->busy_until_ns = now_ns + duration_ns;
    lane->iterations++;
}

/* The lane serves nothing until until_ns, for the update on its way
 * (cause: KVIO_STALL_*). */
static void start_stall(kvio_serve_lane_t *lane, int64_t now_ns, int64_t until_ns, int cause)
{
    lane->state = KVIO_LANE_STALL;
    lane->busy_until_ns = until_ns;
    lane->stall_start_ns = now_ns;
    lane->stall_cause = cause;
}

/* Emulated iterations (no engine): one after another until serving is over
 * (updates over, and with the trainer lost, the run's planned end). */
static kvio_status_t emulated_iteration(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                        int64_t now_ns)
{
    bool lost = lane->trainer_lost != NULL && lane->trainer_lost(lane->updates);
    if (loop->stopped || (updates_over(lane, now_ns) && (!lost || now_ns >= lane->serve_until_ns))) {
        lane->finished = true;
        return go_idle(loop, lane, now_ns);
    }
    start_running(lane, now_ns, lane->iteration_ns);
    return KVIO_OK;
}

/* The engine's next iteration at now_ns, or an update stall, or idle. */
static kvio_status_t start_next(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                int64_t now_ns, bool was_idle)
{
    kvio_update_view_t view = {.incoming_until_ns = -1, .stall_until_ns = -1};
    if (lane->updates != NULL) {
        kvio_status_t status = apply_updates(loop, lane, now_ns, was_idle, &view);
        if (status != KVIO_OK)
            return status;
    }
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    if (arrivals != NULL && arrivals->ops->due != NULL && !loop->stopped && !closed(loop) &&
        arrivals->ops->due(arrivals, loop, now_ns)) {
        bool more_now = false;
        kvio_status_t status = arrivals->ops->take(arrivals, loop, now_ns, &more_now);
        if (status != KVIO_OK)
            return source_failed(loop, lane, status, arrivals->ops->error(arrivals));
        lane->woken = false; /* it starts here */
        /* In real time the take may have waited for the core: what it took
         * came before the iteration now starting, not before now_ns. */
        if (loop->executor->ops->caps & KVIO_EXECUTOR_CAP_REAL)
            now_ns = loop->executor->ops->now(loop->executor);
    }
    if (lane->engine == NULL) {
        if (view.stalled && !loop->stopped) {
            start_stall(lane, now_ns, until_or_look(loop, view.stall_until_ns, now_ns),
                        KVIO_STALL_APPLY);
            return KVIO_OK;
        }
        return emulated_iteration(loop, lane, now_ns);
    }
    if (arrivals != NULL && arrivals->ops->held != NULL && arrivals->ops->held(arrivals) &&
        !loop->stopped) {
        become_idle(lane, now_ns);
        lane->wake_ns = now_ns + loop->poll_ns;
        return KVIO_OK;
    }
    if (loop->stopped || !kvio_engine_has_work(lane->engine))
        return go_idle(loop, lane, now_ns);
    if (view.stalled) {
        start_stall(lane, now_ns, until_or_look(loop, view.stall_until_ns, now_ns),
                    KVIO_STALL_APPLY);
        return KVIO_OK;
    }
    kvio_engine_iteration_t iteration;
    kvio_serve_step_t step;
    char why[640] = "";
    int64_t before_ns = lane->timed ? thread_cpu_ns() : 0;
    kvio_status_t status =
        kvio_serve_step(lane->engine, now_ns - loop->origin_ns, lane->world_rank,
                        view.incoming_until_ns > now_ns, &iteration, &step, why, sizeof(why));
    if (lane->timed)
        lane->timing.overhead_ns += thread_cpu_ns() - before_ns;
    if (status != KVIO_OK) {
        if (loop->error[0] == '\0')
            snprintf(loop->error, sizeof(loop->error), "%s", why);
        return status;
    }
    if (step == KVIO_SERVE_STEP_KV)
        return wait_for_kv(loop, lane, now_ns);
    if (step == KVIO_SERVE_STEP_IDLE) {
        /* Admission held (a pause): the waiting requests wait for the resume. */
        become_idle(lane, now_ns);
        lane->wake_ns = now_ns + loop->poll_ns;
        return KVIO_OK;
    }
    if (step == KVIO_SERVE_STEP_LENT) {
        /* Requests wait for the KV memory lent to the update. */
        bool released = lane->update != NULL && lane->update->colocated == KVIO_COLOCATED_RELEASE;
        start_stall(lane, now_ns, until_or_look(loop, view.incoming_until_ns, now_ns),
                    released ? KVIO_STALL_RELEASE : KVIO_STALL_LEND);
        return KVIO_OK;
    }
    if (iteration.duration_ns > KVIO_CLOCK_LIMIT_NS - (now_ns - loop->origin_ns)) {
        /* Iterations the cost model makes days long, run after run: the
         * clock would pass its limit (it saturated, and the run passed off
         * absurd latencies as complete). */
        if (loop->error[0] == '\0')
            snprintf(loop->error, sizeof(loop->error),
                     "serve rank %u: the run's clock would pass %d years (an iteration of "
                     "%.4g s, %.4g s into the run): check cost.* (c0..c3, overhead) and gpu.*",
                     lane->world_rank, KVIO_CLOCK_LIMIT_YEARS, (double)iteration.duration_ns / 1e9,
                     (double)(now_ns - loop->origin_ns) / 1e9);
        return KVIO_ERR_CONFIG;
    }
    start_running(lane, now_ns, iteration.duration_ns);
    status = loop->executor->ops->compute(loop->executor, iteration.duration_ns);
    if (status != KVIO_OK)
        return lane_failed(loop, lane, status, kvio_device_error(loop->executor->device));
    return KVIO_OK;
}

/* The lane's event at now_ns: its iteration or stall ended, or an idle lane
 * was given a request or looks again. */
static kvio_status_t lane_boundary(kvio_serve_loop_t *loop, kvio_serve_lane_t *lane,
                                   int64_t now_ns)
{
    bool was_idle = lane->state == KVIO_LANE_IDLE;
    if (!was_idle) {
        kvio_status_t status = end_running(loop, lane, now_ns);
        if (status != KVIO_OK)
            return status;
    }
    return start_next(loop, lane, now_ns, was_idle);
}

/* Starts the lanes that arrivals woke, in lane order. */
static kvio_status_t start_woken(kvio_serve_loop_t *loop, int64_t now_ns)
{
    for (uint32_t i = 0; i < loop->num_lanes; i++) {
        kvio_serve_lane_t *lane = loop->lanes[i];
        if (!lane->woken)
            continue;
        lane->woken = false;
        if (lane->state != KVIO_LANE_IDLE)
            continue;
        kvio_status_t status = lane_boundary(loop, lane, now_ns);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* ---------- the loop ---------- */

typedef struct event {
    int64_t at_ns;
    bool arrival;      /* else lanes[lane] */
    uint32_t lane;
} event_t;

/* The next event; false when none can come (serving and updates over). */
static bool next_event(const kvio_serve_loop_t *loop, int64_t now_ns, event_t *event_p)
{
    int64_t arrival_ns = INT64_MAX;
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    if (arrivals != NULL && !loop->stopped && !closed(loop)) {
        int64_t due = arrivals->ops->next_ns(arrivals, loop, now_ns);
        if (due != INT64_MAX)
            arrival_ns = due > now_ns ? due : now_ns;
    }
    uint32_t lane = 0;
    int64_t lane_ns = INT64_MAX;
    for (uint32_t i = 0; i < loop->num_lanes; i++) {
        const kvio_serve_lane_t *candidate = loop->lanes[i];
        int64_t at = candidate->state == KVIO_LANE_IDLE ? candidate->wake_ns
                                                        : candidate->busy_until_ns;
        if (at < lane_ns) {
            lane_ns = at;
            lane = i;
        }
    }
    if (arrival_ns == INT64_MAX && lane_ns == INT64_MAX)
        return false;
    *event_p = (event_t){.at_ns = arrival_ns <= lane_ns ? arrival_ns : lane_ns,
                         .arrival = arrival_ns <= lane_ns, .lane = lane};
    return true;
}

/* While a real executor waits: every lane's receiver progresses, and an
 * idle lane's arrival source is looked at. */
/* The loop's chores, their failure in loop->error. */
static kvio_status_t do_chores(kvio_serve_loop_t *loop)
{
    if (loop->chores == NULL)
        return KVIO_OK;
    kvio_status_t status = loop->chores(loop->chores_context);
    if (status != KVIO_OK && loop->error[0] == '\0')
        snprintf(loop->error, sizeof(loop->error), "%s",
                 loop->chores_error(loop->chores_context));
    return status;
}

static kvio_status_t poll_while_waiting(void *context, int64_t now_ns, bool *worked_p,
                                        bool *wake_p, int64_t *nap_ns_p)
{
    kvio_serve_loop_t *loop = context;
    kvio_status_t chores = do_chores(loop);
    if (chores != KVIO_OK)
        return chores;
    for (uint32_t i = 0; i < loop->num_lanes; i++) {
        kvio_serve_lane_t *lane = loop->lanes[i];
        if (lane->updates == NULL || lane->updates->ops->poll == NULL)
            continue;
        bool worked = false;
        kvio_status_t status = lane->updates->ops->poll(
            lane->updates, now_ns, lane->state == KVIO_LANE_STALL, &worked, nap_ns_p);
        if (status != KVIO_OK)
            return source_failed(loop, lane, status, lane->updates->ops->error(lane->updates));
        *worked_p = *worked_p || worked;
    }
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    bool idle = loop->num_lanes > 0 && loop->lanes[0]->state == KVIO_LANE_IDLE;
    if (arrivals != NULL && arrivals->ops->poll != NULL && idle && !loop->stopped) {
        kvio_status_t status = arrivals->ops->poll(arrivals, wake_p);
        if (status != KVIO_OK)
            return source_failed(loop, loop->lanes[0], status, arrivals->ops->error(arrivals));
    }
    /* A source that wakes its naps lets an idle loop sleep to its next
     * event, unless a receiver asked to be polled sooner. */
    bool receivers = false;
    for (uint32_t i = 0; i < loop->num_lanes; i++)
        receivers = receivers || loop->lanes[i]->updates != NULL;
    if (arrivals != NULL && arrivals->ops->nap != NULL && idle && !receivers)
        *nap_ns_p = INT64_MAX;
    return KVIO_OK;
}

/* A nap between polls: the arrival source's own, which a request ends
 * early, when it has one and every lane is idle; else a plain sleep. */
static void nap_while_waiting(void *context, int64_t ns)
{
    kvio_serve_loop_t *loop = context;
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    bool idle = loop->num_lanes > 0;
    for (uint32_t i = 0; i < loop->num_lanes; i++)
        idle = idle && loop->lanes[i]->state == KVIO_LANE_IDLE;
    if (arrivals != NULL && arrivals->ops->nap != NULL && idle) {
        arrivals->ops->nap(arrivals, ns);
        return;
    }
    struct timespec pause = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
    nanosleep(&pause, NULL);
}

static kvio_status_t handle_arrivals(kvio_serve_loop_t *loop, int64_t now_ns)
{
    bool more_now = false;
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    kvio_status_t status = arrivals->ops->take(arrivals, loop, now_ns, &more_now);
    if (status != KVIO_OK) {
        const char *why = arrivals->ops->error != NULL ? arrivals->ops->error(arrivals) : NULL;
        if (loop->error[0] == '\0' && why != NULL)
            snprintf(loop->error, sizeof(loop->error), "%s", why);
        return status;
    }
    if (more_now && !closed(loop))
        return KVIO_OK;
    return start_woken(loop, now_ns);
}

/* Tells the arrival source every lane is ready (the client starts the
 * stream once every serve rank has said so). */
static kvio_status_t loop_ready(kvio_serve_loop_t *loop)
{
    kvio_serve_arrivals_t *arrivals = loop->arrivals;
    int64_t now_ns = loop->executor->ops->now(loop->executor);
    for (uint32_t i = 0; i < loop->num_lanes; i++) {
        kvio_serve_lane_t *lane = loop->lanes[i];
        lane->wake_ns = lane_wake(loop, lane, now_ns);
        if (lane->engine == NULL)
            lane->wake_ns = now_ns; /* emulated iterations start at once */
        if (arrivals != NULL && arrivals->ops->ready != NULL) {
            kvio_status_t status = arrivals->ops->ready(arrivals, lane);
            if (status != KVIO_OK)
                return source_failed(loop, lane, status, arrivals->ops->error(arrivals));
        }
    }
    return KVIO_OK;
}

/* Whether the drain's cap applies to this loop (real executors). */
static bool drain_capped(const kvio_serve_loop_t *loop)
{
    return loop->drain_timeout_ns > 0 && !loop->stopped && loop->arrivals != NULL &&
           (loop->executor->ops->caps & KVIO_EXECUTOR_CAP_REAL);
}

/* The tiers' transfers end at the drain's cap (cap_ns, the loop's clock)
 * too, even inside an engine step: a long prompt's saves waiting on a slow
 * device kept the run going seconds past it (#54). */
static void tiers_until(kvio_serve_loop_t *loop, int64_t cap_ns, int64_t now_ns)
{
    uint64_t until_ns = kvio_time_ns() + (uint64_t)(cap_ns - now_ns);
    for (uint32_t i = 0; i < loop->num_lanes; i++)
        if (loop->lanes[i]->engine != NULL)
            kvio_engine_tiers_until(loop->lanes[i]->engine, until_ns);
}

/* The drain's cap (real executors): from the moment the arrivals end (or
 * the duration, if later), serving goes on for loop->drain_timeout_ns; then
 * the requests still in flight are cut (counted) and the lanes finish as on
 * a stop. The duration's end starts it even when the arrivals have not
 * said they ended: a closed loop's (stream.users) end only once every user
 * has its answer, which is the drain itself. */
static void drain_cap(kvio_serve_loop_t *loop, int64_t now_ns)
{
    if (!drain_capped(loop))
        return;
    if (loop->drain_deadline_ns == 0) {
        int64_t end_ns = loop->origin_ns + loop->duration_ns;
        if (loop->duration_ns > 0 && now_ns >= end_ns)
            loop->drain_deadline_ns = end_ns + loop->drain_timeout_ns;
        else if (loop->arrivals->ops->ended(loop->arrivals))
            loop->drain_deadline_ns = (end_ns > now_ns ? end_ns : now_ns) +
                                      loop->drain_timeout_ns;
        if (loop->drain_deadline_ns > 0)
            tiers_until(loop, loop->drain_deadline_ns, now_ns);
        return;
    }
    if (now_ns < loop->drain_deadline_ns)
        return;
    loop->drain_cut = loop->in_flight; /* the verdict says what it means */
    for (uint32_t i = 0; i < loop->num_lanes; i++)
        if (loop->lanes[i]->engine != NULL)
            loop->drain_overdue +=
                kvio_engine_overdue(loop->lanes[i]->engine, now_ns - loop->origin_ns);
    loop->stopped = true;
}

/* Nothing more can happen: an idle lane not yet finished finishes now
 * (its source hears so, e.g. the client rank its final state). */
static kvio_status_t finish_idle_lanes(kvio_serve_loop_t *loop, int64_t now_ns)
{
    kvio_status_t status = KVIO_OK;
    for (uint32_t i = 0; i < loop->num_lanes && status == KVIO_OK; i++) {
        kvio_serve_lane_t *lane = loop->lanes[i];
        if (lane->state == KVIO_LANE_IDLE && !lane->finished && lane->engine != NULL)
            status = go_idle(loop, lane, now_ns);
    }
    return status;
}

kvio_status_t kvio_serve_loop_run(kvio_serve_loop_t *loop)
{
    kvio_executor_t *executor = loop->executor;
    kvio_serve_poll_t poll = {.poll = poll_while_waiting, .nap = nap_while_waiting,
                              .context = loop};
    kvio_status_t status = loop_ready(loop);
    if (drain_capped(loop) && loop->duration_ns > 0) /* the cap it will be, from the start */
        tiers_until(loop, loop->origin_ns + loop->duration_ns + loop->drain_timeout_ns,
                    executor->ops->now(executor));
    while (status == KVIO_OK) {
        if (loop->stop != NULL && *loop->stop)
            loop->stopped = true;
        int64_t now_ns = executor->ops->now(executor);
        drain_cap(loop, now_ns);
        event_t event;
        if (!next_event(loop, now_ns, &event)) {
            status = finish_idle_lanes(loop, now_ns);
            break;
        }
        int64_t wait_ns = event.at_ns;
        /* The cap ends the wait (and the duration's end, which starts it):
         * look again then. */
        int64_t cap_ns = loop->drain_deadline_ns > 0 ? loop->drain_deadline_ns
                         : loop->duration_ns > 0   ? loop->origin_ns + loop->duration_ns
                                                   : INT64_MAX;
        if (drain_capped(loop) && cap_ns > now_ns && cap_ns < wait_ns)
            wait_ns = cap_ns;
        status = executor->ops->wait_until(executor, wait_ns, &poll);
        if (status != KVIO_OK)
            break;
        now_ns = executor->ops->now(executor);
        if (now_ns < event.at_ns)
            continue; /* a poll woke the wait: look again */
        if (event.arrival)
            status = handle_arrivals(loop, now_ns);
        else
            status = lane_boundary(loop, loop->lanes[event.lane], now_ns);
        if (status == KVIO_OK && loop->intake.add != NULL)
            status = start_woken(loop, now_ns); /* lanes a hand-off woke (P/D: decode) */
        if (status == KVIO_OK)
            status = do_chores(loop);
    }
    /* The tiers' traffic still on its way is carried out (its statistics
     * follow); a stopped run's (the drain's cap, a signal) only the batch
     * under way, the rest counted as cut: the tiers do not drain for longer
     * than one batch past the cap. */
    for (uint32_t i = 0; i < loop->num_lanes; i++) {
        if (loop->lanes[i]->engine == NULL)
            continue;
        if (loop->stopped)
            kvio_engine_cut_tiers(loop->lanes[i]->engine);
        kvio_engine_settle(loop->lanes[i]->engine);
    }
    return status;
}
