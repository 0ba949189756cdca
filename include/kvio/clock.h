/* Clocks: a monotonic nanosecond clock and a virtual clock behind one
 * interface, so the engine runs unchanged in simulate and emulate mode. */
#ifndef KVIO_CLOCK_H
#define KVIO_CLOCK_H

#include "kvio/status.h"

#include <stdint.h>

typedef struct kvio_clock kvio_clock_t;

/* Monotonic time in ns since an arbitrary origin (CLOCK_MONOTONIC). */
uint64_t kvio_time_ns(void);

/* Wall-clock time in ns since the Unix epoch (for timestamps in results). */
uint64_t kvio_wall_time_ns(void);

/* Returns when kvio_time_ns() reads at least target_ns: sleeps, then spins
 * the last stretch (every real-time wait of an iteration's end uses it). */
void kvio_wait_until_ns(uint64_t target_ns);

/* A real clock reads CLOCK_MONOTONIC relative to its creation; a virtual
 * clock starts at 0 and moves only when told. Caller destroys. */
kvio_status_t kvio_clock_create_real(kvio_clock_t **clock_p);
kvio_status_t kvio_clock_create_virtual(kvio_clock_t **clock_p);
void kvio_clock_destroy(kvio_clock_t *clock);

/* Nanoseconds since the clock started. */
uint64_t kvio_clock_now(kvio_clock_t *clock);

/* Returns when the clock reads at least time_ns: a real clock sleeps, then
 * spins the last stretch; a virtual clock jumps there (never backwards). */
void kvio_clock_wait_until(kvio_clock_t *clock, uint64_t time_ns);

/* The clock's name ("real" or "virtual"). */
const char *kvio_clock_name(const kvio_clock_t *clock);

#endif
