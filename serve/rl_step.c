/* The RL run's trainer (kvio/rl.h): the `rl:` options, the costs of a
 * step (training from a FLOPs model, weight sync, sleep and wake), taking a
 * batch of finished groups with the staleness of its tokens, and the rl.*
 * figures. */
#include "kvio/rl.h"

#include "serve/rl_int.h"

#include "kvio/model.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const mode_names[] = {"off", "sync", "async", NULL};
static const char *const placement_names[] = {"colocated", "separate", NULL};
static const char *const interrupt_names[] = {"keep", "recompute", NULL};

const kvio_opt_t kvio_rl_options[] = {
    {.key = "mode", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_rl_config_t, mode),
     .default_value = "off", .values = mode_names,
     .help = "off: not an RL run; sync: generate a batch, train on it, sync the weights "
             "(verl); async: generation goes on while the trainer trains, within "
             "rl.staleness versions (AReaL, slime's async mode)"},
    {.key = "placement", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_rl_config_t, placement),
     .default_value = "colocated", .values = placement_names,
     .help = "sync: colocated (the trainer uses the rollout GPUs, which sleep while it trains) "
             "or separate (its own GPUs; the rollout idles); async runs separate"},
    {.key = "steps", .type = KVIO_OPT_INT, .offset = offsetof(kvio_rl_config_t, steps),
     .default_value = "10", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1e6,
     .help = "training steps"},
    {.key = "batch", .type = KVIO_OPT_INT, .offset = offsetof(kvio_rl_config_t, batch),
     .default_value = "32", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1e6,
     .help = "prompts per step, each a group of stream.group.n samples; the stream must hold "
             "steps x batch prompts"},
    {.key = "staleness", .type = KVIO_OPT_INT, .offset = offsetof(kvio_rl_config_t, staleness),
     .default_value = "1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1000,
     .help = "async: eta, AReaL's bound: a group starts only while the groups started are "
             "fewer than (version + eta + 1) x batch (0: as sync separate)"},
    {.key = "interrupt", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_rl_config_t, interrupt),
     .default_value = "keep", .values = interrupt_names,
     .help = "async, what a new version does to rollouts in flight: keep (they go on with "
             "their KV, later tokens on the new weights: off-policy KV) or recompute (AReaL's "
             "interruptible rollouts: aborted and resumed on the new weights, KV recomputed)"},
    {.key = "sleep_level", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_rl_config_t, sleep_level), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 2,
     .help = "colocated, vLLM's sleep mode: 1 moves the weights to host memory and back "
             "(host link), 2 drops them (the sync brings them); both free the KV cache"},
    {.key = "pool_create", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_rl_config_t, pool_create_ns), .default_value = "200ms",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "colocated: re-creating the KV pool (and CUDA graphs) at each wake"},
    {.key = "train_time", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_rl_config_t, train_time_ns), .default_value = "0s",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "a training step's time (0: train_flops_per_token x parameters x the batch's "
             "tokens over train_gpus x gpu.flops x train_mfu)"},
    {.key = "train_flops_per_token", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_rl_config_t, train_flops_per_token), .default_value = "10",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 100,
     .help = "FLOPs per parameter per trained token: 6 for forward and backward, 2 for each "
             "extra forward (GRPO's old and reference log-probs: 10)"},
    {.key = "train_mfu", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_rl_config_t, train_mfu),
     .default_value = "0.4", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "the trainer's model FLOPs utilisation"},
    {.key = "train_gpus", .type = KVIO_OPT_INT, .offset = offsetof(kvio_rl_config_t, train_gpus),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e6,
     .help = "the trainer's GPUs (0: as many as the rollout's, ranks.serve x tensor parallel)"},
    {.key = "sync_bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_rl_config_t, sync_bandwidth), .default_value = "25e9",
     .flags = KVIO_OPT_HAS_MIN, .min = 1e6,
     .help = "weight sync, bytes/s from trainer to rollout (verl's NCCL broadcast ~25 GB/s, "
             "multi-NIC ~90 GB/s: verl #7167)"},
    {.key = "sync_latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_rl_config_t, sync_latency_ns), .default_value = "100ms",
     .flags = KVIO_OPT_HAS_MIN, .min = 0, .help = "weight sync's fixed cost per step"},
    {.key = "tail_quantile", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_rl_config_t, tail_quantile), .default_value = "0.9",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "a step's generation ends when this share of its samples finished; the trainer's "
             "wait after it is the long tail"},
    {.key = "partial_tokens", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_rl_config_t, partial_tokens), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1e7,
     .help = "partial rollouts (Kimi k1.5): the tokens a sample generates per version; one "
             "that reaches them unfinished is set aside and continues when its engine takes "
             "the next version, its prompt and tokens so far computed again on the new "
             "weights (0: off)"},
    {.key = "weight_bytes", .type = KVIO_OPT_SIZE,
     .offset = offsetof(kvio_rl_config_t, weight_bytes), .default_value = "0",
     .help = "emulate: the weight bytes each step's sync copies into each serve rank's "
             "weights, and sleep level 1 moves to host and back (0: the model's weights over "
             "its tensor parallel)"},
    {.key = NULL},
};

kvio_status_t kvio_rl_check(const kvio_rl_config_t *config, const kvio_serve_run_t *run,
                            char *error_p, size_t error_len)
{
    (void)config;
    if (run->pd != NULL && run->num_prefill > 0) {
        snprintf(error_p, error_len, "rl: prefill/decode ranks (ranks.prefill) are not "
                 "modelled in an RL run; use ranks.serve");
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

kvio_status_t kvio_rl_check_emulate(const kvio_rl_config_t *config, int64_t client_ranks,
                                    bool device_pool, char *error_p, size_t error_len)
{
    (void)config;
    const char *why = NULL;
    if (client_ranks > 0)
        why = "ranks.client in an emulate RL run: the loop admits its groups itself (set "
              "ranks.client: 0)";
    else if (device_pool)
        why = "device.memory in an emulate RL run: sleep and wake release and fault in a host "
              "KV pool; a device pool is not built yet (set device.memory: host)";
    if (why == NULL)
        return KVIO_OK;
    snprintf(error_p, error_len, "%s", why);
    return KVIO_ERR_CONFIG;
}

/* Whether the trainer shares the rollout's GPUs. */
static bool colocated(const kvio_rl_config_t *config)
{
    return config->mode == KVIO_RL_SYNC && config->placement == KVIO_RL_COLOCATED;
}

static int64_t seconds_ns(double seconds)
{
    return seconds >= 9e9 ? INT64_MAX / 4 : (int64_t)llround(seconds * 1e9);
}

void rl_plan_costs(rl_sim_t *sim)
{
    const kvio_rl_config_t *config = sim->config;
    const kvio_serve_run_t *run = sim->run;
    double weight_bytes = (double)kvio_model_weight_bytes(run->model);
    int64_t tensor_parallel = kvio_cost_gpus(run->cost);
    sim->sync_ns = config->sync_latency_ns + seconds_ns(weight_bytes / config->sync_bandwidth);
    if (colocated(config)) {
        /* Level 1 moves each GPU's shard over its own host link, both ways. */
        double offload_s = config->sleep_level == 1
                               ? weight_bytes / (double)tensor_parallel / run->gpu->host_bandwidth
                               : 0;
        sim->sleep_ns = seconds_ns(offload_s);
        sim->wake_ns = seconds_ns(offload_s) + config->pool_create_ns;
    }
    int64_t gpus = config->train_gpus > 0 ? config->train_gpus
                                          : (int64_t)sim->num_engines * tensor_parallel;
    sim->train_flops_per_s = (double)gpus * run->gpu->flops * config->train_mfu;
}

/* FLOPs model of the step: flops per parameter per token x parameters x
 * tokens over the trainer's FLOP/s (or the configured time). */
static int64_t train_ns(const rl_sim_t *sim, uint64_t tokens)
{
    if (sim->config->train_time_ns > 0)
        return sim->config->train_time_ns;
    double flops = sim->config->train_flops_per_token * kvio_model_params(sim->run->model) *
                   (double)tokens;
    return seconds_ns(flops / sim->train_flops_per_s);
}

/* Counts a trained sample's output tokens by how many versions they lag
 * the step's weights. */
static void count_sample(rl_sim_t *sim, const rl_sample_t *sample, uint64_t step)
{
    for (uint32_t s = 0; s < sample->num_segments; s++) {
        uint64_t version = sample->segment_version[s];
        uint64_t lag = step > version ? step - version : 0;
        sim->staleness_tokens[lag < RL_MAX_STALENESS ? lag : RL_MAX_STALENESS] +=
            sample->segment_tokens[s];
    }
    sim->output_tokens += sample->output_tokens;
    sim->samples_trained++;
    sim->mixed_samples += sample->num_segments > 1;
    sim->recomputed_tokens += sample->recomputed;
}

static int compare_ns(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The batch's samples' finishes: when tail_quantile of them had finished. */
static int64_t quantile_finish_ns(rl_sim_t *sim, size_t count, size_t num_samples)
{
    int64_t *finishes = malloc(num_samples * sizeof(*finishes));
    if (finishes == NULL)
        return -1;
    size_t n = 0;
    for (size_t b = 0; b < count; b++) {
        const rl_group_t *group = &sim->groups[sim->batch[b]];
        for (uint32_t i = 0; i < group->num_samples; i++)
            finishes[n++] = sim->samples[group->first_sample + i].finish_ns;
    }
    qsort(finishes, n, sizeof(*finishes), compare_ns);
    size_t index = (size_t)ceil(sim->config->tail_quantile * (double)n);
    int64_t at = finishes[index > 0 ? index - 1 : 0];
    free(finishes);
    return at;
}

bool rl_pick_batch(rl_sim_t *sim)
{
    const kvio_rl_config_t *config = sim->config;
    uint64_t eta = config->mode == KVIO_RL_ASYNC ? (uint64_t)config->staleness : 0;
    size_t need = (size_t)config->batch, taken = 0;
    uint64_t mark = ++sim->pick_mark;
    while (sim->oldest < sim->num_groups && sim->groups[sim->oldest].consumed)
        sim->oldest++;
    while (sim->done_head < sim->done_tail && sim->groups[sim->done[sim->done_head]].consumed)
        sim->done_head++;
    /* Groups are admitted in order, so those started too long ago come
     * first. */
    for (size_t g = sim->oldest; g < sim->num_groups && taken < need; g++) {
        rl_group_t *group = &sim->groups[g];
        if (group->start_version + eta > sim->step)
            break;
        if (group->consumed)
            continue;
        /* A group set aside (partial rollouts) continues on a later
         * version; one still generating is waited for. */
        if (group->parked > 0)
            continue;
        if (group->finished < group->num_samples)
            return false;
        group->pick_mark = mark;
        sim->batch[taken++] = (uint32_t)g;
    }
    for (size_t d = sim->done_head; d < sim->done_tail && taken < need; d++) {
        rl_group_t *group = &sim->groups[sim->done[d]];
        if (group->consumed || group->pick_mark == mark)
            continue;
        group->pick_mark = mark;
        sim->batch[taken++] = sim->done[d];
    }
    return taken == need;
}

kvio_status_t rl_start_step(rl_sim_t *sim)
{
    const kvio_rl_config_t *config = sim->config;
    rl_step_t *step = &sim->steps[sim->step];
    size_t count = (size_t)config->batch;
    *step = (rl_step_t){.start_ns = sim->trainer_ready_ns};
    size_t num_samples = 0;
    for (size_t b = 0; b < count; b++) {
        rl_group_t *group = &sim->groups[sim->batch[b]];
        group->consumed = true;
        step->batch_ready_ns = group->finish_ns > step->batch_ready_ns ? group->finish_ns
                                                                      : step->batch_ready_ns;
        step->group_id_sum += sim->batch[b];
        for (uint32_t i = 0; i < group->num_samples; i++) {
            const rl_sample_t *sample = &sim->samples[group->first_sample + i];
            count_sample(sim, sample, sim->step);
            step->trained_tokens += (uint64_t)sample->prompt_tokens + sample->output_tokens;
            if (sample->output_tokens > step->longest_output_tokens) {
                step->longest_output_tokens = sample->output_tokens;
                step->longest_finish_ns = sample->finish_ns;
            }
        }
        num_samples += group->num_samples;
    }
    int64_t quantile_ns = quantile_finish_ns(sim, count, num_samples);
    if (quantile_ns < 0)
        return KVIO_ERR_NOMEM;
    int64_t wait_ns = sim->now_ns - sim->trainer_ready_ns;
    int64_t tail_from = quantile_ns > sim->trainer_ready_ns ? quantile_ns : sim->trainer_ready_ns;
    step->long_tail_ns = sim->now_ns > tail_from ? sim->now_ns - tail_from : 0;
    step->generation_ns = wait_ns - step->long_tail_ns;
    step->train_ns = train_ns(sim, step->trained_tokens);
    int64_t train_end;
    if (rl_emu_separate(sim)) {
        /* Emulate with a trainer rank: it trains while the rollout idles
         * (sync) or generates on (async); the wait hears its weights land
         * and ends the step then. Their slot was free: no engine pauses. */
        kvio_status_t status = rl_emu_train_start(sim, step);
        if (status != KVIO_OK)
            return status;
        train_end = sim->trainer_end_ns = INT64_MAX / 4;
    } else if (sim->emu != NULL) {
        /* Emulate: the step runs now, for real, and measures its parts. */
        kvio_status_t status = rl_emu_step(sim, step);
        if (status != KVIO_OK)
            return status;
        train_end = sim->trainer_end_ns = sim->now_ns;
    } else {
        step->sync_ns = sim->sync_ns;
        step->sleep_ns = sim->sleep_ns;
        step->wake_ns = sim->sleep_ns + sim->wake_ns;
        train_end = sim->now_ns + sim->sleep_ns + step->train_ns;
        sim->trainer_end_ns = train_end + step->sync_ns + sim->wake_ns;
    }
    step->end_ns = sim->trainer_end_ns;
    /* Colocated engines sleep through the whole step; separate ones stop
     * only to load the new weights. */
    for (uint32_t e = 0; e < sim->num_engines; e++) {
        sim->engines[e].pause_from_ns = colocated(config) ? sim->now_ns : train_end;
        sim->engines[e].pause_until_ns = sim->trainer_end_ns;
    }
    sim->trainer_busy = true;
    sim->step++;
    return KVIO_OK;
}

/* ---------- figures ---------- */

static void staleness_figures(const rl_sim_t *sim, kvio_result_t *result)
{
    uint64_t total = 0, max = 0;
    double sum = 0;
    for (uint64_t lag = 0; lag <= RL_MAX_STALENESS; lag++) {
        total += sim->staleness_tokens[lag];
        sum += (double)lag * (double)sim->staleness_tokens[lag];
        if (sim->staleness_tokens[lag] > 0)
            max = lag;
    }
    if (total == 0)
        return;
    const double shares[] = {0.5, 0.9, 0.99};
    const kvio_figure_t figures[] = {KVIO_FIG_RL_STALENESS_P50, KVIO_FIG_RL_STALENESS_P90,
                                     KVIO_FIG_RL_STALENESS_P99};
    for (size_t q = 0; q < 3; q++) {
        uint64_t below = 0, lag = 0;
        /* The smallest lag that holds this share of the tokens. */
        while (lag < RL_MAX_STALENESS &&
               (below += sim->staleness_tokens[lag]) < (uint64_t)ceil(shares[q] * (double)total))
            lag++;
        kvio_result_set(result, figures[q], (double)lag);
    }
    kvio_result_set(result, KVIO_FIG_RL_STALENESS_MEAN, sum / (double)total);
    kvio_result_set(result, KVIO_FIG_RL_STALENESS_MAX, (double)max);
    kvio_result_set(result, KVIO_FIG_RL_STALENESS_COUNT, (double)total);
    kvio_result_set(result, KVIO_FIG_RL_OFF_POLICY,
                    (double)(total - sim->staleness_tokens[0]) / (double)total);
}

static json_t *step_json(const rl_step_t *step, uint64_t index)
{
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I}",
                     "step", (json_int_t)index, "start_s", (double)step->start_ns / 1e9,
                     "end_s", (double)step->end_ns / 1e9, "generation_s",
                     (double)step->generation_ns / 1e9, "long_tail_s",
                     (double)step->long_tail_ns / 1e9, "train_s", (double)step->train_ns / 1e9,
                     "sync_s", (double)step->sync_ns / 1e9, "wake_s",
                     (double)step->wake_ns / 1e9, "sleep_s", (double)step->sleep_ns / 1e9,
                     "batch_ready_s",
                     (double)step->batch_ready_ns / 1e9, "longest_finish_s",
                     (double)step->longest_finish_ns / 1e9, "longest_output_tokens",
                     (json_int_t)step->longest_output_tokens, "trained_tokens",
                     (json_int_t)step->trained_tokens, "group_id_sum",
                     (json_int_t)step->group_id_sum);
}

static void step_figures(const rl_sim_t *sim, kvio_result_t *result, double total_s)
{
    double parts[6] = {0};
    for (uint64_t s = 0; s < sim->steps_done; s++) {
        const rl_step_t *step = &sim->steps[s];
        parts[0] += (double)step->generation_ns;
        parts[1] += (double)step->long_tail_ns;
        parts[2] += (double)step->train_ns;
        parts[3] += (double)step->sync_ns;
        parts[4] += (double)step->wake_ns;
        parts[5] += (double)step->sleep_ns;
    }
    const kvio_figure_t figures[] = {KVIO_FIG_RL_GENERATION_S, KVIO_FIG_RL_LONG_TAIL_S,
                                     KVIO_FIG_RL_TRAIN_S, KVIO_FIG_RL_SYNC_S,
                                     KVIO_FIG_RL_WAKE_S, KVIO_FIG_RL_SLEEP_S};
    double steps = (double)sim->steps_done;
    for (size_t p = 0; p < 6; p++) /* wake and sleep: colocated only */
        if (p < 4 || colocated(sim->config))
            kvio_result_set(result, figures[p], parts[p] / steps / 1e9);
    if (sim->emu != NULL)
        kvio_result_set(result, KVIO_FIG_RL_SYNC_BYTES, (double)sim->sync_bytes);
    kvio_result_set(result, KVIO_FIG_RL_STEPS, steps);
    kvio_result_set(result, KVIO_FIG_RL_STEP_S, total_s / steps);
    kvio_result_set(result, KVIO_FIG_RL_TRAINER_IDLE, 1 - parts[2] / 1e9 / total_s);
}

kvio_status_t rl_figures(rl_sim_t *sim, kvio_result_t *result)
{
    if (sim->steps_done == 0)
        return KVIO_OK;
    const kvio_rl_config_t *config = sim->config;
    double total_s = (double)sim->steps[sim->steps_done - 1].end_ns / 1e9;
    kvio_result_set_text(result, KVIO_FIG_RL_MODE,
                         config->mode == KVIO_RL_ASYNC ? "async"
                         : colocated(config)           ? "sync colocated"
                                                       : "sync separate");
    step_figures(sim, result, total_s);
    kvio_result_set(result, KVIO_FIG_RL_ROLLOUT_TOKENS_PER_S, (double)sim->output_tokens / total_s);
    kvio_result_set(result, KVIO_FIG_RL_ROLLOUT_SAMPLES_PER_S,
                    (double)sim->samples_trained / total_s);
    kvio_result_set(result, KVIO_FIG_RL_RECOMPUTED_TOKENS, (double)sim->recomputed_tokens);
    kvio_result_set(result, KVIO_FIG_RL_MIXED_SAMPLES, (double)sim->mixed_samples);
    if (config->partial_tokens > 0)
        kvio_result_set(result, KVIO_FIG_RL_CONTINUATIONS, (double)sim->continuations);
    staleness_figures(sim, result);
    kvio_engine_metrics_t total;
    if (kvio_engine_metrics_init(&total) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    for (uint32_t e = 0; e < sim->num_engines; e++)
        kvio_engine_metrics_merge(&total, kvio_engine_metrics(sim->engines[e].engine));
    /* Until the last rollout: after it the engines have nothing left to
     * generate in a run of rl.steps (a longer run would go on). */
    kvio_result_set(result, KVIO_FIG_RL_ROLLOUT_IDLE,
                    1 - (double)total.busy_ns /
                            ((double)sim->last_finish_ns * sim->num_engines));
    kvio_serve_metrics_fill(result, &total);
    kvio_engine_metrics_fini(&total);
    /* The rate the loop offered its samples at: they arrive as it admits
     * them (a step's groups at once, at time 0 for the first), so the
     * arrivals' own span says nothing (one step: none at all); the loop
     * offered what it admitted (samples, and the continuations of partial
     * rollouts) over the rollout's time. */
    kvio_result_set(result, KVIO_FIG_OFFERED_RATE,
                    sim->last_finish_ns > 0 ? (double)(sim->num_samples + sim->continuations) /
                                                  ((double)sim->last_finish_ns / 1e9)
                                            : 0);
    kvio_result_set(result, KVIO_FIG_SERVE_RANKS, sim->num_engines);
    kvio_result_set(result, KVIO_FIG_KV_BLOCKS_PER_RANK, sim->blocks);
    kvio_result_set(result, KVIO_FIG_BLOCK_SIZE, sim->block_size);
    if (sim->emu == NULL) /* emulate's clock is the host's: wall_run_s */
        kvio_result_set(result, KVIO_FIG_SIMULATED_S, (double)sim->now_ns / 1e9);
    json_t *steps = json_array();
    for (uint64_t s = 0; steps != NULL && s < sim->steps_done; s++)
        json_array_append_new(steps, step_json(&sim->steps[s], s));
    if (steps == NULL || kvio_result_set_detail(result, "rl.step_times", steps) != KVIO_OK)
        return KVIO_ERR_NOMEM;
    if (rl_emu_separate(sim)) {
        json_t *trainer = rl_emu_trainer_json(sim);
        if (trainer == NULL || kvio_result_set_detail(result, "rl.trainer", trainer) != KVIO_OK)
            return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}
