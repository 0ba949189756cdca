/* realtime (emulate on the host): an iteration takes its time for real.
 * The wait sleeps, polling the lanes' receivers between naps while there is
 * time for it, then spins the last stretch, so an iteration ends on time
 * whether or not an update is arriving. */
#include "serve/loop_int.h"

#include <time.h>

#include "kvio/clock.h"

/* The longest nap between polls, and the time a poll's work may take: none
 * starts closer than this to the spin. */
#define POLL_NAP_NS 100000
#define POLL_BUDGET_NS 500000

int64_t kvio_executor_host_now(const kvio_executor_t *executor)
{
    return (int64_t)(kvio_time_ns() - executor->origin_ns);
}

static void nap(int64_t ns)
{
    struct timespec pause = {.tv_sec = (time_t)(ns / 1000000000),
                             .tv_nsec = (long)(ns % 1000000000)};
    nanosleep(&pause, NULL);
}

kvio_status_t kvio_executor_host_wait(kvio_executor_t *executor, int64_t end_ns,
                                      const kvio_serve_poll_t *poll)
{
    bool first = true;
    for (;;) {
        int64_t now = kvio_executor_host_now(executor);
        if (now >= end_ns)
            return KVIO_OK;
        int64_t remaining = end_ns - now;
        /* One poll at the start of every wait, so that receivers progress
         * even between short iterations; more while there is time. */
        if (poll != NULL && (first || remaining > KVIO_EXECUTOR_SPIN_NS + POLL_BUDGET_NS)) {
            bool worked = false, wake = false;
            int64_t nap_ns = POLL_NAP_NS;
            first = false;
            kvio_status_t status = poll->poll(poll->context, now, &worked, &wake, &nap_ns);
            if (status != KVIO_OK || wake)
                return status;
            if (worked)
                continue;
            remaining = end_ns - kvio_executor_host_now(executor);
            if (remaining > KVIO_EXECUTOR_SPIN_NS + POLL_BUDGET_NS) {
                int64_t until_spin = remaining - KVIO_EXECUTOR_SPIN_NS - POLL_BUDGET_NS;
                int64_t pause = nap_ns < until_spin ? nap_ns : until_spin;
                if (poll->nap != NULL)
                    poll->nap(poll->context, pause);
                else
                    nap(pause);
                continue;
            }
        }
        kvio_wait_until_ns(executor->origin_ns + (uint64_t)end_ns);
        return KVIO_OK;
    }
}

static kvio_status_t no_compute(kvio_executor_t *executor, int64_t duration_ns)
{
    (void)executor;
    (void)duration_ns;
    return KVIO_OK;
}

const kvio_executor_ops_t kvio_executor_realtime = {
    .plugin = {.name = "realtime",
               .help = "the host clock: sleep, polling receivers, then spin to the end",
               .options = kvio_no_options},
    .caps = KVIO_EXECUTOR_CAP_REAL,
    .now = kvio_executor_host_now,
    .compute = no_compute,
    .wait_until = kvio_executor_host_wait,
};
