/* A progress line on stderr (not under -q): redrawn in place at most ten
 * times a second on a terminal, else written as a line every 10 s. */
#ifndef KVIO_PROGRESS_H
#define KVIO_PROGRESS_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kvio_progress kvio_progress_t;

/* Creates a progress line for label with total units of work (0: unknown).
 * Caller destroys. */
kvio_status_t kvio_progress_create(const char *label, uint64_t total,
                                   kvio_progress_t **progress_p);

/* How often a line not on a terminal is written (default 10 s; tests). */
void kvio_progress_set_interval(kvio_progress_t *progress, uint64_t interval_ns);

/* Reports done units; redraws when enough time has passed. */
void kvio_progress_update(kvio_progress_t *progress, uint64_t done);

/* Clears the line and frees the handle. */
void kvio_progress_destroy(kvio_progress_t *progress);


#endif
