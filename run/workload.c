/* The workload's top-level option table and loading from a file or an
 * embedded preset, with --set overrides. Later modules add their sections
 * here, each bound by its own module's table. */
#include "run/run_int.h"

#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include "kvio/presets.h"
#include "kvio/sync.h"

static const char *const mode_names[] = {"simulate", "emulate", NULL};

static const char *const runtime_names[] = {"auto", "local", "mpi", NULL};

static const kvio_opt_t ranks_options[] = {
    {.key = "train", .type = KVIO_OPT_INT, .offset = offsetof(kvio_ranks_config_t, train),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "training ranks (first in rank order; one publisher for now)"},
    {.key = "serve", .type = KVIO_OPT_INT, .offset = offsetof(kvio_ranks_config_t, serve),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 4096,
     .help = "serve ranks (after the training ranks), each an engine with its own KV cache"},
    {.key = "client", .type = KVIO_OPT_INT, .offset = offsetof(kvio_ranks_config_t, client),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1,
     .help = "coupled run: 1 puts the client on its own rank (the last), which generates the "
             "stream and routes requests from the state serve ranks publish; 0: each serve "
             "rank takes requests i mod serve of its own copy of the stream"},
    {.key = "prefill", .type = KVIO_OPT_INT, .offset = offsetof(kvio_ranks_config_t, prefill),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 2048,
     .help = "prefill/decode disaggregation (with decode): prefill ranks, the first serve "
             "ranks, which compute prompts and hand their KV to a decode rank (the pd: "
             "section); ranks.serve is then prefill + decode"},
    {.key = "decode", .type = KVIO_OPT_INT, .offset = offsetof(kvio_ranks_config_t, decode),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 2048,
     .help = "prefill/decode disaggregation (with prefill): decode ranks, after the prefill "
             "ranks, which take each request's KV and generate its output"},
    {.key = "runtime", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_ranks_config_t, runtime),
     .default_value = "auto", .values = runtime_names,
     .help = "auto (mpi under mpirun, else local), local (threads) or mpi (processes)"},
    {.key = "timeout", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_ranks_config_t, timeout_ns), .default_value = "30s",
     .flags = KVIO_OPT_HAS_MIN, .min = 1e6,
     .help = "longest a live peer rank may stay silent (no heartbeat) before it counts as "
             "lost; a slow peer is waited for, a failed one is an error at once"},
    {.key = NULL},
};

const kvio_opt_t kvio_workload_options[] = {
    {.key = "name", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_workload_t, name),
     .default_value = "kvio", .flags = KVIO_OPT_NAME,
     .help = "run name; used in the results directory name (letters, digits, . _ -)"},
    {.key = "seed", .type = KVIO_OPT_INT, .offset = offsetof(kvio_workload_t, seed),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "seed for every random stream; same seed, same run"},
    {.key = "mode", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_workload_t, mode),
     .default_value = "simulate", .values = mode_names,
     .help = "simulate: virtual clock, no bytes move; emulate: real time, real bytes"},
    {.key = "duration", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_workload_t, duration_ns), .default_value = "60s",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1e6, .max = 7 * 24 * 3600e9,
     .help = "how long the run lasts (virtual time in simulate mode); a synthetic stream "
             "arrives for this long, a trace replay is cut here only when it is given"},
    {.key = "warmup", .type = KVIO_OPT_DURATION, .offset = offsetof(kvio_workload_t, warmup_ns),
     .default_value = "0s", .help = "initial stretch excluded from the metrics"},
    {.key = "warmup_requests", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_workload_t, warmup_requests), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "the first N requests are excluded from the metrics"},
    {.key = "ranks", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, ranks),
     .options = ranks_options, .help = "ranks of each role and their runtime"},
    {.key = "model", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, model),
     .options = kvio_model_options,
     .help = "the model's shape: a preset (kvio cost --list) or its dimensions"},
    {.key = "gpu", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, gpu),
     .options = kvio_gpu_options,
     .help = "the GPU's speeds and memory: a preset or its figures"},
    {.key = "device", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, device),
     .options = kvio_device_options,
     .help = "emulate: memory of the KV pool and weights (host, pinned, cuda) and the GPU"},
    {.key = "cost", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, cost),
     .options = kvio_cost_options,
     .help = "the iteration cost model: parallelism, efficiencies, overheads"},
    {.key = "serve", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, serve),
     .options = kvio_serve_options,
     .help = "the serving engine: batch limits, KV cache and tiers, scheduler, router"},
    {.key = "pd", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, pd),
     .options = kvio_pd_options,
     .help = "prefill/decode disaggregation: KV link, push or pull, decode router"},
    {.key = "slo", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, slo),
     .options = kvio_slo_options,
     .help = "latency objectives that goodput counts against (none: no goodput)"},
    {.key = "assess", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, assess),
     .options = kvio_assess_options,
     .help = "pass/fail thresholds on the storage block (kvio's assessment)"},
    {.key = "train", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, train),
     .options = kvio_train_options, .help = "training ranks: steps, checkpoints, transport"},
    {.key = "weight_sync", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_workload_t, weight_sync), .options = kvio_sync_options,
     .help = "simulate: the update as tensors in buckets: staged, broadcast, reloaded"},
    {.key = "update", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, update),
     .options = kvio_update_options, .help = "serve side of model updates"},
    {.key = "stream", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, stream),
     .options = kvio_stream_options, .help = "the request stream (workloads/README.md)"},
    {.key = "rl", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_workload_t, rl),
     .options = kvio_rl_options,
     .help = "RL post-training: generate, train, sync over rollout groups (docs/rl.md)"},
    {.key = "metric_percentiles", .type = KVIO_OPT_STRING,
     .offset = offsetof(kvio_workload_t, metric_percentiles), .default_value = "99",
     .help = "the percentiles vllm.json and summary.json's vllm give of TTFT, TPOT, ITL and "
             "E2EL, comma-separated (vllm bench serve --metric-percentiles; e.g. 50,90,99,99.9)"},
    {.key = "data", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_workload_t, data_text),
     .default_value = "random",
     .help = "emulate: what KV and updates hold: random, zero, compress:PCT, dedupe:PCT"},
    {.key = NULL},
};

/* Prefill/decode disaggregation: ranks.prefill and ranks.decode, both or
 * neither, make the serve ranks (ranks.serve, when given, must agree). */
static kvio_status_t pd_ranks(const kvio_config_doc_t *doc, kvio_workload_t *workload,
                              char *error_p, size_t error_len)
{
    kvio_ranks_config_t *ranks = &workload->ranks;
    if (ranks->prefill == 0 && ranks->decode == 0)
        return KVIO_OK;
    if (ranks->prefill == 0 || ranks->decode == 0) {
        snprintf(error_p, error_len, "ranks.prefill: %lld and ranks.decode: %lld: prefill/decode "
                 "disaggregation needs both (or neither: colocated serve ranks)",
                 (long long)ranks->prefill, (long long)ranks->decode);
        return KVIO_ERR_CONFIG;
    }
    int64_t sum = ranks->prefill + ranks->decode;
    if (kvio_config_doc_has(doc, "ranks.serve") && ranks->serve != sum) {
        snprintf(error_p, error_len, "ranks.serve: %lld, but ranks.prefill + ranks.decode is "
                 "%lld: with prefill and decode ranks leave ranks.serve out (it is their sum)",
                 (long long)ranks->serve, (long long)sum);
        return KVIO_ERR_CONFIG;
    }
    ranks->serve = sum;
    return KVIO_OK;
}

/* Applies the overrides to a parsed document and binds it (the document is
 * destroyed either way). */
static kvio_status_t bind_document(kvio_config_doc_t *doc, const char *const *overrides,
                                   size_t num_overrides, kvio_workload_t *workload_p,
                                   char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    /* A results directory's summary.json: the run's effective config, run
     * again (the same seed gives the same simulate run). */
    kvio_config_doc_descend(doc, "schema_version", "config");
    for (size_t i = 0; i < num_overrides && status == KVIO_OK; i++)
        status = kvio_config_doc_set(doc, overrides[i], error_p, error_len);
    kvio_workload_t workload = {0};
    if (status == KVIO_OK)
        status = kvio_config_bind(kvio_workload_options, doc, &workload, error_p, error_len);
    workload.duration_given = kvio_config_doc_has(doc, "duration");
    if (status == KVIO_OK && (status = pd_ranks(doc, &workload, error_p, error_len)) == KVIO_OK)
        status = kvio_data_parse(workload.data_text, &workload.data, error_p, error_len);
    if (status != KVIO_OK)
        kvio_workload_free(&workload);
    kvio_config_doc_destroy(doc);
    /* Simulate with model.from: the emulate run is read now, before any
     * results directory exists. */
    const char *from = workload.train.transport.model.from;
    if (status == KVIO_OK && workload.mode == KVIO_MODE_SIMULATE &&
        kvio_updates_wanted(&workload) && from != NULL && from[0] != '\0') {
        status = kvio_updates_model_from(&workload, error_p, error_len);
        if (status != KVIO_OK)
            kvio_workload_free(&workload);
    }
    if (status == KVIO_OK)
        *workload_p = workload;
    return status;
}

kvio_status_t kvio_workload_parse(const char *text, const char *origin,
                                  const char *const *overrides, size_t num_overrides,
                                  kvio_workload_t *workload_p, char *error_p, size_t error_len)
{
    kvio_config_doc_t *doc = NULL;
    kvio_status_t status = kvio_config_doc_parse(text, strlen(text), origin, &doc, error_p,
                                                 error_len);
    if (status != KVIO_OK)
        return status;
    return bind_document(doc, overrides, num_overrides, workload_p, error_p, error_len);
}

kvio_status_t kvio_workload_load(const char *source, const char *const *overrides,
                                 size_t num_overrides, kvio_workload_t *workload_p,
                                 char *error_p, size_t error_len)
{
    struct stat info;
    const kvio_preset_t *preset = NULL;
    if (stat(source, &info) != 0 && (preset = kvio_preset_find(source)) != NULL) {
        char origin[256];
        snprintf(origin, sizeof(origin), "preset %s", preset->name);
        return kvio_workload_parse(preset->text, origin, overrides, num_overrides, workload_p,
                                   error_p, error_len);
    }
    kvio_config_doc_t *doc = NULL;
    kvio_status_t status = kvio_config_doc_load(source, &doc, error_p, error_len);
    if (status == KVIO_ERR_NOT_FOUND) {
        size_t count = 0;
        while (kvio_presets[count].name != NULL)
            count++;
        const char *close = kvio_closest_name(source, &kvio_presets[0].name, count,
                                              sizeof(kvio_preset_t));
        char hint[160] = "";
        if (close != NULL)
            snprintf(hint, sizeof(hint), "; did you mean '%s'?", close);
        snprintf(error_p, error_len,
                 "%s: no such file, and no preset of that name (kvio list shows them%s)", source,
                 hint);
    }
    if (status != KVIO_OK)
        return status;
    return bind_document(doc, overrides, num_overrides, workload_p, error_p, error_len);
}

void kvio_workload_free(kvio_workload_t *workload)
{
    kvio_config_free(kvio_workload_options, workload);
}

int64_t kvio_workload_stream_duration(const kvio_workload_t *workload)
{
    bool trace = workload->stream.trace.path != NULL && workload->stream.trace.path[0] != '\0';
    return trace && !workload->duration_given ? 0 : workload->duration_ns;
}

bool kvio_updates_wanted(const kvio_workload_t *workload)
{
    return workload->ranks.train > 0 && workload->ranks.serve > 0;
}

bool kvio_updates_coupled(const kvio_workload_t *workload)
{
    return kvio_updates_wanted(workload) && workload->mode == KVIO_MODE_EMULATE &&
           workload->update.serving == KVIO_SERVING_ENGINE;
}
