/* virtual (simulate): the clock is a number the loop moves from event to
 * event; an iteration's time passes at once. */
#include "serve/loop_int.h"

static int64_t virtual_now(const kvio_executor_t *executor)
{
    return executor->virtual_ns;
}

static kvio_status_t no_compute(kvio_executor_t *executor, int64_t duration_ns)
{
    (void)executor;
    (void)duration_ns;
    return KVIO_OK;
}

static kvio_status_t jump_to(kvio_executor_t *executor, int64_t end_ns,
                             const kvio_serve_poll_t *poll)
{
    (void)poll;
    if (end_ns > executor->virtual_ns)
        executor->virtual_ns = end_ns;
    return KVIO_OK;
}

const kvio_executor_ops_t kvio_executor_virtual = {
    .plugin = {.name = "virtual", .help = "a virtual clock: iterations take no real time",
               .options = kvio_no_options},
    .now = virtual_now,
    .compute = no_compute,
    .wait_until = jump_to,
};
