/* Real and virtual clocks as two ops tables behind kvio_clock_t. */
#include "kvio/clock.h"

#include <stdlib.h>
#include <time.h>

typedef struct clock_ops {
    const char *name;
    uint64_t (*now)(kvio_clock_t *clock);
    void (*wait_until)(kvio_clock_t *clock, uint64_t time_ns);
} clock_ops_t;

struct kvio_clock {
    const clock_ops_t *ops;
    uint64_t origin_ns;  /* real: monotonic time at creation */
    uint64_t virtual_ns; /* virtual: current time */
};

/* Below this much remaining time a real wait spins instead of sleeping (a
 * sleep can overshoot by the scheduler's latency; 300 us covers it on an
 * idle machine). */
#define KVIO_SPIN_NS 300000u

uint64_t kvio_time_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

uint64_t kvio_wall_time_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static uint64_t real_now(kvio_clock_t *clock)
{
    return kvio_time_ns() - clock->origin_ns;
}

void kvio_wait_until_ns(uint64_t target_ns)
{
    for (;;) {
        uint64_t now = kvio_time_ns();
        if (now >= target_ns)
            return;
        uint64_t remaining = target_ns - now;
        if (remaining > KVIO_SPIN_NS) {
            uint64_t sleep_ns = remaining - KVIO_SPIN_NS;
            struct timespec request = {.tv_sec = (time_t)(sleep_ns / 1000000000u),
                                       .tv_nsec = (long)(sleep_ns % 1000000000u)};
            nanosleep(&request, NULL);
        }
    }
}

static void real_wait_until(kvio_clock_t *clock, uint64_t time_ns)
{
    kvio_wait_until_ns(clock->origin_ns + time_ns);
}

static uint64_t virtual_now(kvio_clock_t *clock)
{
    return clock->virtual_ns;
}

static void virtual_wait_until(kvio_clock_t *clock, uint64_t time_ns)
{
    if (time_ns > clock->virtual_ns)
        clock->virtual_ns = time_ns;
}

static const clock_ops_t real_ops = {
    .name = "real", .now = real_now, .wait_until = real_wait_until,
};

static const clock_ops_t virtual_ops = {
    .name = "virtual", .now = virtual_now, .wait_until = virtual_wait_until,
};

static kvio_status_t clock_create(const clock_ops_t *ops, kvio_clock_t **clock_p)
{
    kvio_clock_t *clock = calloc(1, sizeof(*clock));
    if (clock == NULL)
        return KVIO_ERR_NOMEM;
    clock->ops = ops;
    clock->origin_ns = kvio_time_ns();
    *clock_p = clock;
    return KVIO_OK;
}

kvio_status_t kvio_clock_create_real(kvio_clock_t **clock_p)
{
    return clock_create(&real_ops, clock_p);
}

kvio_status_t kvio_clock_create_virtual(kvio_clock_t **clock_p)
{
    return clock_create(&virtual_ops, clock_p);
}

void kvio_clock_destroy(kvio_clock_t *clock)
{
    free(clock);
}

uint64_t kvio_clock_now(kvio_clock_t *clock)
{
    return clock->ops->now(clock);
}

void kvio_clock_wait_until(kvio_clock_t *clock, uint64_t time_ns)
{
    clock->ops->wait_until(clock, time_ns);
}

const char *kvio_clock_name(const kvio_clock_t *clock)
{
    return clock->ops->name;
}
