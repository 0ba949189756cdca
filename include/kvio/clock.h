/* Host clocks: monotonic and wall time in ns, and a wait for a monotonic
 * time. Serving's own clocks (virtual in simulate, real in emulate) are the
 * executors' (serve/executor_<name>.c). */
#ifndef KVIO_CLOCK_H
#define KVIO_CLOCK_H

#include <stdint.h>

/* The furthest a run's clock may go, in years and ns (a simulate run of
 * years of virtual time is a cost model gone wrong or a trace's wrong date;
 * int64 nanoseconds end at 292 years). */
#define KVIO_CLOCK_LIMIT_YEARS 10
#define KVIO_CLOCK_LIMIT_NS ((int64_t)KVIO_CLOCK_LIMIT_YEARS * 365 * 86400 * 1000000000)

/* Monotonic time in ns since an arbitrary origin (CLOCK_MONOTONIC). */
uint64_t kvio_time_ns(void);

/* Wall-clock time in ns since the Unix epoch (for timestamps in results). */
uint64_t kvio_wall_time_ns(void);

/* Returns when kvio_time_ns() reads at least target_ns: sleeps, then spins
 * the last stretch (every real-time wait of an iteration's end uses it). */
void kvio_wait_until_ns(uint64_t target_ns);

#endif
