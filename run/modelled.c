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

json_t *kvio_run_modelled(const kvio_workload_t *workload, const kvio_result_t *result)
{
    json_t *modelled = json_array();
    char by[320], brief[128];
    bool emulate = workload->mode == KVIO_MODE_EMULATE;
    if (kvio_result_has(result, KVIO_FIG_TTFT_MS_MEAN)) {
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
    bool updates = kvio_result_has(result, KVIO_FIG_UPDATES_RECEIVED);
    bool weight_sync = workload->weight_sync.granularity != KVIO_SYNC_OFF;
    if (updates && !emulate && !weight_sync) {
        /* The simulated transport: its model's parameters, each a default,
         * set, or fitted to a measured run (model.from). */
        static const char *const sources[] = {"default", "set", "from"};
        const kvio_xfer_config_t *transport = &workload->train.transport;
        int64_t latency_ns;
        double gbps;
        kvio_xfer_model_source_t latency_source, bandwidth_source;
        kvio_xfer_model_params(transport, &latency_ns, &gbps, &latency_source,
                               &bandwidth_source);
        const char *from = transport->model.taken ? transport->model.from : NULL;
        double us = (double)latency_ns / 1e3;
        snprintf(by, sizeof(by), "the %s transport model: %.4g GB/s (%s), %.4g us (%s)%s%s",
                 kvio_choice_name(&transport->kind), gbps, sources[bandwidth_source], us,
                 sources[latency_source], from != NULL ? ", fitted to " : "",
                 from != NULL ? from : "");
        snprintf(brief, sizeof(brief), "updates at %.4g GB/s (%s), %.4g us (%s)", gbps,
                 sources[bandwidth_source], us, sources[latency_source]);
        add(modelled, "model-update latency and bandwidth", by, brief);
    }
    if (updates && weight_sync && !emulate)
        add(modelled, "weight sync's stages", "the GPU preset's link rates and weight_sync's keys",
            "weight sync from link rates");
    return modelled;
}
