/* The `update:` section: what a model update does to a serve rank (apply,
 * on_activate, in_flight, colocated, the interference window, fault
 * injection), the trainer-lost notice, and freeing a rank's update result. */
#include "kvio/update.h"

#include <stdlib.h>
#include <string.h>

static const char *const apply_names[] = {"shadow", "stall", NULL};
static const char *const serving_names[] = {"emulated", "engine", NULL};
static const char *const trainer_loss_names[] = {"serve", "fail", NULL};

static const char *const cache_names[] = {"flush", "version", "keep", NULL};
static const char *const reset_names[] = {"when_idle", "preempt_all", "running", NULL};
static const char *const in_flight_names[] = {"keep", "abort", "wait", NULL};
static const char *const colocated_names[] = {"false", "true", "release", NULL};
static const char *const control_names[] = {"auto", "twin", "paired", "off", NULL};

static const kvio_opt_t activate_options[] = {
    {.key = "cache", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_activate_t, cache),
     .values = cache_names, .default_value = "flush",
     .help = "the prefix cache when a version activates: flush: every cached block loses its "
             "hash, as vLLM's reset and SGLang's flush on a weight update; version: entries "
             "hit only under the version that cached them; keep: stale hits are allowed and "
             "counted (stale_hit_tokens)"},
    {.key = "reset", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_activate_t, reset),
     .values = reset_names, .default_value = "when_idle",
     .help = "how a flush resets the cache while requests run, as vLLM's reset_prefix_cache: "
             "when_idle (its default): refused while any block is in use, retried at every "
             "iteration boundary until none is (update_effects reset_delay_ms, "
             "resets_pending); preempt_all (reset_running_requests): every running request "
             "is preempted and recomputed, then the reset; running: kvio's extension, every "
             "block unhashed at once while the requests go on (kvio before #35)"},
    {.key = NULL},
};

const kvio_opt_t kvio_update_options[] = {
    {.key = "on_activate", .type = KVIO_OPT_SECTION,
     .offset = offsetof(kvio_update_config_t, on_activate), .options = activate_options,
     .help = "what a version's activation does to a serve rank's engine"},
    {.key = "in_flight", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, in_flight),
     .values = in_flight_names, .default_value = "keep",
     .help = "the requests running when a version activates: keep: they go on with their KV "
             "from the old weights (mixed_version_tokens counts their tokens); abort: they "
             "are preempted and recomputed on the new weights (update_recomputed_tokens); "
             "wait: admission stops until they have finished, then the version activates (the "
             "drain is an inference stall)"},
    {.key = "colocated", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, colocated),
     .values = colocated_names, .default_value = "false",
     .help = "training and serving share device memory: true: while an update is on its way "
             "in (transfer to activation) the KV pool lends the incoming buffer's bytes, "
             "preempting what no longer fits; release: the whole pool is released (sleep "
             "mode) and rebuilt cold; false: the update has memory of its own"},
    {.key = "interference_window", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_update_config_t, interference_window_ns), .default_value = "10s",
     .flags = KVIO_OPT_HAS_MIN, .min = 1000000,
     .help = "serving after each activation, against as long before it, on the same rank: "
             "summary.json update_interference and updates.csv's ratio columns"},
    {.key = "control", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, control),
     .values = control_names, .default_value = "auto",
     .help = "what the updates' cost is measured against: twin (simulate): the same stream "
             "served again without updates in the same process, each request against itself "
             "(summary.json update_cost, requests.csv's *_delta columns); paired (emulate): "
             "no-update runs alternating with coupled ones (--repeat pairs), paired deltas "
             "with 95 % intervals; off: no control, only the trend around updates; auto: twin "
             "in simulate, off in emulate"},
    {.key = "apply", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, apply),
     .values = apply_names, .default_value = "shadow",
     .help = "shadow: receive beside the active weights, swap at an iteration boundary; "
             "stall: stop iterating until the update is in"},
    {.key = "verify", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_update_config_t, verify),
     .default_value = "true", .help = "checksum the whole buffer before activating it"},
    {.key = "iteration", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_update_config_t, iteration_ns), .default_value = "20ms",
     .flags = KVIO_OPT_HAS_MIN, .min = 1000, .help = "one emulated serving iteration"},
    {.key = "memcpy_floor", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_update_config_t, memcpy_floor), .default_value = "0.5",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "emulate: when updates of 64 MiB or more move within one host's memory (ucx "
             "over shared memory), warm transfers under this share of a memcpy of the same bytes, timed "
             "at set-up, make the run invalid (warning update_below_memcpy; 0: no check)"},
    {.key = "corrupt_offset", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_update_config_t, corrupt_offset), .default_value = "-1",
     .flags = KVIO_OPT_HAS_MIN, .min = -1,
     .help = "fault injection: flip this byte of every received version (-1: never)"},
    {.key = "serving", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_update_config_t, serving),
     .values = serving_names, .default_value = "emulated",
     .help = "emulate mode: emulated iterations, or the real-time engine serving the stream "
             "(the coupled run)"},
    {.key = "die_during_version", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_update_config_t, die_during_version), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fault injection: serve rank die_rank stops, as if it died, while receiving "
             "this version or the first newer one it sees (0: never); the trainer and the "
             "other ranks must fail within ranks.timeout"},
    {.key = "die_rank", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_update_config_t, die_rank), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN, .min = 1,
     .help = "fault injection: the rank that die_during_version stops (serve ranks are "
             "1..ranks.serve)"},
    {.key = "on_trainer_loss", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_update_config_t, on_trainer_loss), .values = trainer_loss_names,
     .default_value = "serve",
     .help = "the training rank lost (died, its transport failed): serve: the serve ranks "
             "keep serving their last verified version until the run ends, then the run "
             "fails (complete: false) reporting model_updates.trainer_lost; fail: every "
             "rank ends with an error at once"},
    {.key = NULL},
};

kvio_status_t kvio_update_announce_trainer_lost(kvio_rte_t *rte, const int *ranks, int count,
                                                const kvio_trainer_lost_notice_t *notice)
{
    kvio_status_t status = KVIO_OK;
    for (int i = 0; i < count && status == KVIO_OK; i++)
        status = kvio_rte_send(rte, ranks[i], KVIO_UPDATE_TAG_TRAINER_LOST, notice,
                               sizeof(*notice));
    return status;
}

void kvio_update_result_free(kvio_update_result_t *result)
{
    free(result->records);
    memset(result, 0, sizeof(*result));
}
