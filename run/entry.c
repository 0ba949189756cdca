/* The run's entry, kvio_run: a workload with update.control: paired in
 * emulate runs as pairs of whole runs (run/paired.c), any other as one run
 * (run/run.c). It stands above both, so a paired run calls a run and no
 * run calls back up into the pairs. */
#include "run/run_int.h"

kvio_status_t kvio_run(const kvio_workload_t *workload, const kvio_run_options_t *options,
                       kvio_run_result_t *result_p, char *error_p, size_t error_len)
{
    if (workload->mode == KVIO_MODE_EMULATE && workload->update.control == KVIO_CONTROL_PAIRED)
        return run_paired(workload, options, result_p, error_p, error_len);
    return run_workload(workload, options, NULL, result_p, error_p, error_len);
}
