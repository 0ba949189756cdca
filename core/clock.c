/* Host clocks (CLOCK_MONOTONIC, CLOCK_REALTIME) and the real-time wait. */
#include "kvio/clock.h"

#include <time.h>

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
