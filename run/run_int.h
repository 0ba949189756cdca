/* Private to run/: what the run's files share: the interference of model
 * updates with serving, computed from the results in memory
 * (run/interference.c). */
#ifndef KVIO_RUN_INT_H
#define KVIO_RUN_INT_H

#include <jansson.h>

#include "kvio/engine.h"
#include "kvio/run.h"
#include "kvio/update.h"

/* Per update: TTFT p50, TTFT p99 and TPOT p99 ratios (after / before), and
 * the hit rate before and after. */
#define KVIO_INTERFERENCE_VALUES 5

typedef struct kvio_interference {
    size_t num_updates, measured; /* measured: requests on both sides */
    double window_s;
    double *values;               /* num_updates x KVIO_INTERFERENCE_VALUES; NAN: none */
    double means[KVIO_INTERFERENCE_VALUES];
} kvio_interference_t;

/* The windows around each activation of updates (times on the clock of
 * origin_ns, rank 0's t0) over the finished requests. */
kvio_status_t kvio_interference_measure(const kvio_engine_finished_t *finished,
                                        size_t num_finished,
                                        const kvio_update_record_t *updates,
                                        size_t num_updates, int64_t origin_ns,
                                        int64_t window_ns, kvio_interference_t *result_p);
void kvio_interference_free(kvio_interference_t *result);

/* summary.json's update_interference, with the updates' recompute and
 * stall costs. */
json_t *kvio_interference_json(const kvio_interference_t *result, uint64_t recomputed_tokens,
                               uint64_t aborted_requests, double stall_ms);

#endif
