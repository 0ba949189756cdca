/* Every registry of plug-ins kvio has, for `kvio list` and the test that
 * walks them all (run/ sees every module). A new kind adds its registry
 * here once. */
#include "kvio/run.h"

#include "kvio/kvcache.h"
#include "kvio/serve.h"
#include "kvio/tier.h"
#include "kvio/xfer.h"

const kvio_registry_t *const kvio_registries[] = {
    &kvio_sched_policies,
    &kvio_sched_predictors,
    &kvio_evictions,
    &kvio_routers,
    &kvio_tiers,
    &kvio_transports,
    &kvio_executors,
    NULL,
};
