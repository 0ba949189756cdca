/* Host clocks: monotonic and wall time in ns, and a wait for a monotonic
 * time. Serving's own clocks (virtual in simulate, real in emulate) are the
 * executors' (serve/executor_<name>.c). */
#ifndef KVIO_CLOCK_H
#define KVIO_CLOCK_H

#include <stdint.h>

/* Monotonic time in ns since an arbitrary origin (CLOCK_MONOTONIC). */
uint64_t kvio_time_ns(void);

/* Wall-clock time in ns since the Unix epoch (for timestamps in results). */
uint64_t kvio_wall_time_ns(void);

/* Returns when kvio_time_ns() reads at least target_ns: sleeps, then spins
 * the last stretch (every real-time wait of an iteration's end uses it). */
void kvio_wait_until_ns(uint64_t target_ns);

#endif
