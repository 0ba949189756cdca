/* Simulate mode's update source: the versions a lane takes come from the
 * modelled schedule of updates (kvio_updates_schedule's records, on the
 * virtual clock). A version is active on the lane's rank from its scheduled
 * activation; the engine takes it at the first iteration boundary after
 * that (at once on an idle rank, which then counts from the scheduled
 * time), and when it took each is written into the record itself. */
#include "serve/loop_int.h"

#include <stdlib.h>

struct kvio_serve_schedule_updates {
    kvio_serve_updates_t base;
    kvio_serve_schedule_params_t params;
    uint64_t version;  /* active on the rank by the schedule */
    uint64_t taken;    /* the version the engine runs */
    size_t update_at;  /* the rank's first update still to come */
};

typedef struct kvio_serve_schedule_updates schedule_t;

static bool mine(const schedule_t *schedule, const kvio_update_record_t *update)
{
    return update->rank == schedule->params.world_rank && update->t_activated_ns != 0;
}

/* The version active at now (the rank's updates come in version order,
 * activation times rising). */
static uint64_t active_version(schedule_t *schedule, int64_t now_ns)
{
    const kvio_serve_schedule_params_t *params = &schedule->params;
    size_t *at = &schedule->update_at;
    for (; *at < params->num_updates; ++*at) {
        const kvio_update_record_t *update = &params->updates[*at];
        if (!mine(schedule, update))
            continue;
        if (update->t_activated_ns > now_ns)
            break;
        if (update->version > schedule->version)
            schedule->version = update->version;
    }
    return schedule->version;
}

/* With apply: stall, the end of the stall the rank is in at now (an update
 * notified by then and not yet activated), else -1. */
static int64_t stalled_until(schedule_t *schedule, int64_t now_ns)
{
    if (!schedule->params.stall)
        return -1;
    active_version(schedule, now_ns);
    for (size_t at = schedule->update_at; at < schedule->params.num_updates; at++) {
        const kvio_update_record_t *update = &schedule->params.updates[at];
        if (mine(schedule, update))
            return update->t_notified_ns <= now_ns ? update->t_activated_ns : -1;
    }
    return -1;
}

static void schedule_look(kvio_serve_updates_t *base, int64_t now_ns, uint64_t engine_version,
                          kvio_update_view_t *view_p)
{
    schedule_t *schedule = (schedule_t *)base;
    *view_p = (kvio_update_view_t){.incoming_until_ns = -1, .stall_until_ns = -1};
    view_p->ready_version = active_version(schedule, now_ns);
    /* update.colocated: the update on its way in (transfer started, not yet
     * taken by the engine). */
    for (size_t u = 0; u < schedule->params.num_updates; u++) {
        const kvio_update_record_t *update = &schedule->params.updates[u];
        if (mine(schedule, update) && update->version > engine_version &&
            update->t_xfer_start_ns <= now_ns) {
            view_p->incoming_bytes = update->bytes;
            view_p->incoming_until_ns = update->t_activated_ns;
            break;
        }
    }
    int64_t stall_end = stalled_until(schedule, now_ns);
    view_p->stalled = stall_end > now_ns;
    view_p->stall_until_ns = view_p->stalled ? stall_end : -1;
}

static uint64_t schedule_version_at(kvio_serve_updates_t *base, int64_t now_ns)
{
    return active_version((schedule_t *)base, now_ns);
}

static kvio_status_t schedule_activate(kvio_serve_updates_t *base, int64_t now_ns, bool idle,
                                       int64_t idle_since_ns, const int64_t *stall_ns,
                                       uint64_t *version_p)
{
    schedule_t *schedule = (schedule_t *)base;
    const kvio_serve_schedule_params_t *params = &schedule->params;
    uint64_t version = active_version(schedule, now_ns);
    /* Every update taken here was scheduled by now_ns, so the cursor of
     * active_version is past it: its scheduled time is not read again. */
    for (size_t u = 0; u < params->num_updates; u++) {
        kvio_update_record_t *update = &params->updates[u];
        if (!mine(schedule, update) || update->version <= schedule->taken ||
            update->version > version)
            continue;
        if (!(idle && idle_since_ns <= update->t_activated_ns))
            update->t_activated_ns = now_ns;
        /* The lane's loss goes to the newest version it takes. */
        for (int c = 0; update->version == version && c < KVIO_STALL_CAUSES; c++)
            update->stall_ns[c] += stall_ns[c];
    }
    schedule->taken = version;
    *version_p = version;
    return KVIO_OK;
}

static bool schedule_over(kvio_serve_updates_t *base, int64_t now_ns)
{
    (void)base;
    (void)now_ns;
    return true; /* nothing to wait for: the schedule is known */
}

static int64_t schedule_next_ns(kvio_serve_updates_t *base, int64_t now_ns)
{
    (void)base;
    (void)now_ns;
    return INT64_MAX;
}

static const char *schedule_error(const kvio_serve_updates_t *base)
{
    (void)base;
    return "";
}

static const kvio_serve_updates_ops_t schedule_ops = {
    .look = schedule_look,
    .version_at = schedule_version_at,
    .activate = schedule_activate,
    .over = schedule_over,
    .next_ns = schedule_next_ns,
    .error = schedule_error,
};

kvio_status_t kvio_serve_schedule_updates_create(const kvio_serve_schedule_params_t *params,
                                                 kvio_serve_schedule_updates_t **updates_p)
{
    schedule_t *schedule = calloc(1, sizeof(*schedule));
    if (schedule == NULL)
        return KVIO_ERR_NOMEM;
    schedule->base.ops = &schedule_ops;
    schedule->params = *params;
    *updates_p = schedule;
    return KVIO_OK;
}

kvio_serve_updates_t *kvio_serve_schedule_updates(kvio_serve_schedule_updates_t *updates)
{
    return &updates->base;
}

void kvio_serve_schedule_updates_destroy(kvio_serve_schedule_updates_t *updates)
{
    free(updates);
}
