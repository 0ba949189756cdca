/* What in a run's numbers comes from a model or a default rather than a
 * measurement (summary.json's modelled, and the table's "modelled" rows):
 * in simulate mode the serving times come from the cost model on the
 * virtual clock, in emulate mode the compute inside each iteration does;
 * simulated model updates come from the transport model, whose bandwidth
 * and latency are each a default, set, or fitted to an emulate run. */
#include "run/run_int.h"

#include <stdio.h>
#include <string.h>

static const char *const cost_kinds[] = {"roofline", "linear", "table"};

static void add(json_t *modelled, const char *what, const char *by, const char *brief)
{
    json_array_append_new(modelled,
                          json_pack("{s:s, s:s, s:s}", "what", what, "by", by, "brief", brief));
}

json_t *kvio_run_modelled(const kvio_workload_t *workload, const json_t *metrics)
{
    json_t *modelled = json_array();
    char by[320], brief[128];
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    if (json_object_get(metrics, "ttft_ms") != NULL) {
        int kind = workload->cost.kind >= 0 && workload->cost.kind <= 2 ? workload->cost.kind : 0;
        bool presets = workload->model.preset != NULL && workload->gpu.preset != NULL;
        snprintf(by, sizeof(by), "the %s cost model of %s on %s%s", cost_kinds[kind],
                 workload->model.preset != NULL ? workload->model.preset : "a custom model",
                 workload->gpu.preset != NULL ? workload->gpu.preset : "a custom GPU",
                 kind == KVIO_COST_ROOFLINE && presets ? " (the presets' datasheet figures)" : "");
        snprintf(brief, sizeof(brief), "%s from the %s cost model%s",
                 emulate ? "compute" : "times", cost_kinds[kind],
                 kind == KVIO_COST_ROOFLINE && presets ? " (presets)" : "");
        add(modelled,
            emulate ? "each iteration's compute time (waited out for real; memory, swaps, tiers "
                      "and transfers are measured)"
                    : "every serving time: latencies, throughput, KV usage, utilization (the "
                      "virtual clock)",
            by, brief);
    }
    const json_t *updates = json_object_get(metrics, "model_updates");
    const json_t *model = json_object_get(updates, "model");
    if (model != NULL) {
        const json_t *source = json_object_get(model, "source");
        const char *from = json_string_value(json_object_get(model, "from"));
        const char *bandwidth = json_string_value(json_object_get(source, "bandwidth"));
        const char *latency = json_string_value(json_object_get(source, "latency"));
        double gbps = json_number_value(json_object_get(model, "bandwidth_gbps"));
        double us = json_number_value(json_object_get(model, "latency_s")) * 1e6;
        const char *transport = json_string_value(json_object_get(updates, "transport"));
        snprintf(by, sizeof(by), "the %s transport model: %.4g GB/s (%s), %.4g us (%s)%s%s",
                 transport != NULL ? transport : "", gbps, bandwidth != NULL ? bandwidth : "?",
                 us, latency != NULL ? latency : "?", from != NULL ? ", fitted to " : "",
                 from != NULL ? from : "");
        snprintf(brief, sizeof(brief), "updates at %.4g GB/s (%s), %.4g us (%s)", gbps,
                 bandwidth != NULL ? bandwidth : "?", us, latency != NULL ? latency : "?");
        add(modelled, "model-update latency and bandwidth", by, brief);
    }
    if (json_object_get(updates, "weight_sync") != NULL && !emulate)
        add(modelled, "weight sync's stages", "the GPU preset's link rates and weight_sync's keys",
            "weight sync from link rates");
    return modelled;
}
