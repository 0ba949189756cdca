/* Whether a run's numbers can be trusted at a glance (run/run_int.h): each
 * condition that makes them mislead is a warning with the measured value
 * and the threshold, and a run with none is valid. */
#include "run/run_int.h"

#include <stdio.h>
#include <unistd.h>

/* Served under this share of the offered rate: the queue grew through the
 * run (as kvio capacity's overload). */
#define OVERLOAD_SERVED 0.8

/* Emulate: an iteration timing error p99 above this share of the planned
 * iteration (%): the machine did not keep the cost model's time. */
#define TIMING_ERROR_PCT 10.0

static double number(const json_t *object, const char *key, const char *field)
{
    const json_t *value = json_object_get(object, key);
    if (field != NULL)
        value = json_object_get(value, field);
    return json_is_number(value) ? json_number_value(value) : -1;
}

static void warn(json_t *warnings, const char *kind, double measured, double threshold,
                 const char *message)
{
    json_array_append_new(warnings, json_pack("{s:s, s:f, s:f, s:s}", "kind", kind, "measured",
                                              measured, "threshold", threshold, "message",
                                              message));
}

json_t *kvio_run_validity(const kvio_workload_t *workload, const json_t *metrics)
{
    json_t *warnings = json_array();
    char message[512];
    double offered = number(metrics, "offered_rate", NULL);
    double served = number(metrics, "request_throughput", NULL);
    /* A short run's last requests finish after its arrivals (the drain):
     * its throughput is under the rate offered without any overload. So
     * under half the rate offered is overload, and under 80 % when the
     * arrivals lasted 10 s or more and the run half as long again. */
    double completed = number(metrics, "completed", NULL);
    double window = number(metrics, "duration_s", NULL);
    double arrivals_s = offered > 0 && completed > 1 ? (completed - 1) / offered : 0;
    /* A closed loop (stream.users) cannot queue more than its users: it
     * waits for its answers, and no rate is offered past the serving. */
    bool closed_loop = workload->stream.users > 0;
    bool overloaded = !closed_loop && offered > 0 && served >= 0 &&
                      (served < 0.5 * offered ||
                       (served < OVERLOAD_SERVED * offered && arrivals_s >= 10 &&
                        window > 1.5 * arrivals_s));
    if (overloaded) {
        snprintf(message, sizeof(message),
                 "overloaded: served %.3g req/s of the %.3g offered (under %.0f %%): the queue "
                 "grew through the run, and its latencies measure the run's length more than "
                 "the engine", served, offered, OVERLOAD_SERVED * 100);
        warn(warnings, "overload", served, OVERLOAD_SERVED * offered, message);
    }
    double timing = number(json_object_get(metrics, "executor"), "timing_error_p99_pct", NULL);
    if (timing > TIMING_ERROR_PCT) {
        snprintf(message, sizeof(message),
                 "iteration timing error p99 %.1f %% of an iteration (over %.0f %%): the machine "
                 "did not keep the cost model's time (busy cores, or more ranks than cores)",
                 timing, TIMING_ERROR_PCT);
        warn(warnings, "timing_error", timing, TIMING_ERROR_PCT, message);
    }
    const json_t *tiers = json_object_get(metrics, "tiers");
    double errors = 0;
    for (size_t t = 0; t < json_array_size(tiers); t++) {
        double count = number(json_array_get(tiers, t), "errors", NULL);
        errors += count > 0 ? count : 0;
    }
    if (errors > 0) {
        snprintf(message, sizeof(message),
                 "%.0f tier operations failed (counted as misses, metrics.tiers[].errors): the "
                 "hit rate and tier traffic are lower than the workload's", errors);
        warn(warnings, "tier_errors", errors, 0, message);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long ranks = (long)(workload->ranks.train + workload->ranks.serve + workload->ranks.client);
    if (workload->mode == KVIO_MODE_EMULATE && cores > 0 && ranks > cores) {
        snprintf(message, sizeof(message),
                 "%ld emulate ranks on %ld cores: they share cores, and real-time timing "
                 "suffers", ranks, cores);
        warn(warnings, "oversubscribed", (double)ranks, (double)cores, message);
    }
    return warnings;
}
