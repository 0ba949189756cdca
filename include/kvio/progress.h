/* A progress line on stderr, redrawn at most ten times a second, shown only
 * when stderr is a terminal (and not under -q). */
#ifndef KVIO_PROGRESS_H
#define KVIO_PROGRESS_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kvio_progress kvio_progress_t;

/* Creates a progress line for label with total units of work (0: unknown).
 * It stays silent unless stderr is a terminal. Caller destroys. */
kvio_status_t kvio_progress_create(const char *label, uint64_t total,
                                   kvio_progress_t **progress_p);

/* Reports done units; redraws when enough time has passed. */
void kvio_progress_update(kvio_progress_t *progress, uint64_t done);

/* Clears the line and frees the handle. */
void kvio_progress_destroy(kvio_progress_t *progress);

/* True when the line will be drawn. */
bool kvio_progress_enabled(const kvio_progress_t *progress);

#endif
