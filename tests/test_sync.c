/* The weight-sync model (kvio/sync.h): buckets by granularity, the control
 * cost per message, the pipeline, deltas, the topology across nodes,
 * resharding, the P2P path for a joining instance; a run with it end to end
 * (updates.csv, sync.csv); and emulate
 * mode's real buckets over ucx (messages, checksums, control cost, the
 * pipeline's overlap, what it refuses). */
#include "kvio/sync.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/run.h"
#include "kvio/model.h"
#include "tests/helpers.h"

static kvio_sync_config_t config_of(int granularity)
{
    kvio_sync_config_t config;
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_sync_options, &config, error, sizeof(error)), KVIO_OK);
    config.granularity = granularity;
    return config;
}

/* Plans and returns the update time in seconds (and the plan, when asked). */
static double plan_s(const kvio_sync_config_t *config, const char *model_name,
                     const char *gpu_name, int64_t tp, int64_t instances, kvio_sync_plan_t *keep)
{
    kvio_model_t model = test_model(model_name);
    kvio_gpu_t gpu = test_gpu(gpu_name);
    kvio_sync_plan_t plan;
    char error[256];
    cr_assert_eq(kvio_sync_plan(config, &model, &gpu, tp, instances, &plan, error,
                                sizeof(error)), KVIO_OK, "%s", error);
    double seconds = (double)plan.total_ns / 1e9;
    if (keep != NULL)
        *keep = plan;
    else
        kvio_sync_plan_free(&plan);
    return seconds;
}

Test(sync, granularity_decides_the_messages, .timeout = 10)
{
    kvio_model_t model = test_model("llama3-8b");
    kvio_tensor_t *tensors = NULL;
    size_t count = 0;
    cr_assert_eq(kvio_model_tensors(&model, &tensors, &count), KVIO_OK);
    uint64_t largest = 0;
    for (size_t i = 0; i < count; i++)
        largest = tensors[i].bytes > largest ? tensors[i].bytes : largest;
    free(tensors);
    kvio_sync_plan_t plan;
    kvio_sync_config_t config = config_of(KVIO_SYNC_WHOLE);
    plan_s(&config, "llama3-8b", "h200", 1, 1, &plan);
    cr_expect_eq(plan.num_buckets, 1);
    cr_expect_eq(plan.buckets[0].tensors, 291);
    cr_expect_eq(plan.bytes, kvio_model_weight_bytes(&model) + 65 * 4096 * 2, "weights + norms");
    kvio_sync_plan_free(&plan);
    config = config_of(KVIO_SYNC_TENSOR);
    plan_s(&config, "llama3-8b", "h200", 1, 1, &plan);
    cr_expect_eq(plan.num_buckets, 291);
    cr_expect_eq(plan.messages, 291);
    kvio_sync_plan_free(&plan);
    config = config_of(KVIO_SYNC_BUCKET);
    config.bucket_size = 1ull << 30;
    plan_s(&config, "llama3-8b", "h200", 1, 1, &plan);
    uint64_t total = 0;
    for (size_t b = 0; b < plan.num_buckets; b++) {
        cr_expect(plan.buckets[b].bytes <= config.bucket_size || plan.buckets[b].tensors == 1,
                  "bucket %zu: %llu bytes in %u tensors", b,
                  (unsigned long long)plan.buckets[b].bytes, plan.buckets[b].tensors);
        total += plan.buckets[b].bytes;
    }
    cr_expect_eq(total, plan.bytes);
    cr_expect(plan.num_buckets >= 16 && plan.num_buckets <= 20, "%zu buckets of 1 GiB for 16 GB",
              plan.num_buckets);
    kvio_sync_plan_free(&plan);
}

/* One message per tensor costs its control each (one RL framework's sync
 * timed out with one RPC per parameter until it batched them): 146 tensors
 * of Llama-3.2-1B at 2 ms each against one bucket. */
Test(sync, per_tensor_messages_pay_their_control_cost, .timeout = 10)
{
    kvio_sync_config_t tensor = config_of(KVIO_SYNC_TENSOR), whole = config_of(KVIO_SYNC_WHOLE);
    tensor.control_ns = whole.control_ns = 2000000;
    tensor.pipeline_depth = whole.pipeline_depth = 1;
    double per_tensor = plan_s(&tensor, "llama3.2-1b", "h200", 1, 1, NULL);
    double batched = plan_s(&whole, "llama3.2-1b", "h200", 1, 1, NULL);
    /* Two control costs per message (stage and broadcast), 145 more messages. */
    cr_expect_float_eq(per_tensor - batched, 145 * 2 * 0.002, 0.02, "%.4f vs %.4f s", per_tensor,
                       batched);
}

Test(sync, a_deeper_pipeline_overlaps_the_stages, .timeout = 10)
{
    kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
    config.bucket_size = 512ull << 20;
    config.pipeline_depth = 1;
    double serial = plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, NULL);
    config.pipeline_depth = 2;
    double two = plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, NULL);
    config.pipeline_depth = 4;
    double four = plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, NULL);
    cr_expect_lt(two, serial * 0.8, "%.3f vs %.3f s", two, serial);
    cr_expect_leq(four, two);
    /* Staging through PCIe bounds it: 141 GB / (8 lanes x 64 GB/s). */
    cr_expect_gt(four, 141e9 / (8 * 64e9));
}

/* A delta moves the changed elements and their indices: 4.5 % of bf16
 * elements at 2 + 4 bytes each is 13.5 % of the bytes; a bitmap adds one
 * bit per element instead (4.5 % + 6.25 %). */
Test(sync, deltas_move_the_changed_elements_and_their_index, .timeout = 10)
{
    kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
    kvio_sync_plan_t full, delta, bitmap;
    plan_s(&config, "llama3-8b", "h200", 1, 1, &full);
    config.delta_fraction = 0.045;
    plan_s(&config, "llama3-8b", "h200", 1, 1, &delta);
    config.delta_encoding = KVIO_DELTA_BITMAP;
    plan_s(&config, "llama3-8b", "h200", 1, 1, &bitmap);
    cr_expect_float_eq((double)delta.wire_bytes / (double)full.wire_bytes, 0.045 * 3, 1e-4);
    cr_expect_float_eq((double)bitmap.wire_bytes / (double)full.wire_bytes, 0.045 + 1.0 / 16,
                       1e-4);
    cr_expect_lt(delta.total_ns, full.total_ns);
    kvio_sync_plan_free(&full);
    kvio_sync_plan_free(&delta);
    kvio_sync_plan_free(&bitmap);
}

/* 32 nodes: a source sending to each in turn takes ~31 bucket times per
 * bucket; a binary tree two (plus its depth once); a chain one. */
Test(sync, the_topology_across_nodes_orders_sequential_tree_chain, .timeout = 10)
{
    kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
    config.nic_bandwidth = 25e9;
    double times[3];
    int topologies[3] = {KVIO_SYNC_SEQUENTIAL, KVIO_SYNC_TREE, KVIO_SYNC_CHAIN};
    for (int t = 0; t < 3; t++) {
        config.topology = topologies[t];
        times[t] = plan_s(&config, "llama3-70b", "h100-sxm", 8, 32, NULL);
    }
    cr_expect_gt(times[0], 5 * times[1], "sequential %.2f s, tree %.2f s", times[0], times[1]);
    cr_expect_gt(times[1], times[2], "tree %.2f s, chain %.2f s", times[1], times[2]);
    /* The bytes per hop: a source sending to each of the 31 other nodes puts
     * 32 copies itself (its own node's too); a tree's source 3, the other
     * 29 forwarded; a chain's 2, 30 forwarded. */
    const uint64_t from_source[3] = {32, 3, 2}, forwarded[3] = {0, 29, 30};
    for (int t = 0; t < 3; t++) {
        config.topology = topologies[t];
        kvio_sync_plan_t plan;
        plan_s(&config, "llama3-70b", "h100-sxm", 8, 32, &plan);
        cr_expect_eq(plan.source_wire_bytes, from_source[t] * plan.wire_bytes, "topology %d", t);
        cr_expect_eq(plan.forwarded_wire_bytes, forwarded[t] * plan.wire_bytes, "topology %d", t);
        kvio_sync_plan_free(&plan);
    }
    /* One node: nothing crosses a NIC, the topology does not matter. */
    config.topology = KVIO_SYNC_SEQUENTIAL;
    double alone = plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, NULL);
    config.topology = KVIO_SYNC_CHAIN;
    cr_expect_float_eq(plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, NULL), alone, 1e-9);
}

/* A trainer at TP16 feeding TP8 serving: each serving shard gathers from
 * two trainer shards, two messages per bucket. */
Test(sync, resharding_gathers_each_shard_from_its_trainer_shards, .timeout = 10)
{
    kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
    kvio_sync_plan_t same, twice;
    config.train_tp = 8;
    plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, &same);
    config.train_tp = 16;
    plan_s(&config, "llama3-70b", "h100-sxm", 8, 1, &twice);
    cr_expect_eq(twice.messages, 2 * same.messages);
    cr_expect_gt(twice.total_ns, same.total_ns);
    kvio_sync_plan_free(&same);
    kvio_sync_plan_free(&twice);
}

/* Both validate and run (into dir/out) of workload with --set first (unless
 * NULL) and --set set exit 2 naming key. */
static void expect_refused(const char *dir, const char *workload, const char *first,
                           const char *set, const char *key)
{
    char out[1200];
    snprintf(out, sizeof(out), "%s/out", dir);
    for (int command = 0; command < 2; command++) {
        test_run_t run = command == 0 ? test_kvio(dir, "validate", workload, "--set", set,
                                                  first != NULL ? "--set" : NULL, first, NULL)
                                      : test_kvio(dir, "run", workload, "-o", out, "--set", set,
                                                  first != NULL ? "--set" : NULL, first, NULL);
        cr_expect_eq(run.status, 2, "%s: exit %d: %s", set, run.status, run.err);
        cr_expect(test_contains(run.err, key), "%s: %s", set, run.err);
        test_run_free(&run);
    }
}

/* P2P: one joining TP8 instance fed by two serving ones, whose 16 GPUs hold
 * a sixteenth of Llama-3-8B each. The weights move once, every peer GPU's
 * share as messages of its own: whole, one each; in buckets, a bucket
 * never spans two peers' shares, so there are up to one more per peer GPU
 * than a broadcast's. */
Test(sync, p2p_moves_each_peer_gpu_share_to_the_joining_instance, .timeout = 10)
{
    kvio_sync_config_t config = config_of(KVIO_SYNC_WHOLE);
    kvio_sync_plan_t broadcast, p2p;
    plan_s(&config, "llama3-8b", "h200", 8, 1, &broadcast);
    config.topology = KVIO_SYNC_P2P;
    config.peers = 2;
    plan_s(&config, "llama3-8b", "h200", 8, 1, &p2p);
    cr_expect_eq(p2p.bytes, broadcast.bytes);
    cr_expect_eq(p2p.wire_bytes, p2p.bytes, "full weights: a joiner has none to patch");
    /* The embedding and the LM head (1 GB each, a share's size) can leave
     * a peer GPU without a tensor of its own. */
    cr_expect(p2p.num_buckets >= 14 && p2p.num_buckets <= 16, "%zu shares", p2p.num_buckets);
    cr_expect_eq(p2p.messages, p2p.num_buckets);
    uint32_t tensors = 0;
    for (size_t b = 0; b < p2p.num_buckets; b++) {
        tensors += p2p.buckets[b].tensors;
        /* A share is a sixteenth, give or take a tensor (the LM head is
         * the largest, 1 GB). */
        cr_expect_float_eq((double)p2p.buckets[b].bytes, (double)p2p.bytes / 16, 1.1e9,
                           "share %zu: %llu bytes", b, (unsigned long long)p2p.buckets[b].bytes);
    }
    cr_expect_eq(tensors, 291);
    kvio_sync_plan_free(&broadcast);
    kvio_sync_plan_free(&p2p);
    /* Kimi-K2's 69,723 tensors over fifteen TP16 peers: a share for each
     * of their 240 GPUs. */
    config.peers = 15;
    plan_s(&config, "kimi-k2", "h20", 16, 1, &p2p);
    cr_expect_eq(p2p.num_buckets, 240);
    kvio_sync_plan_free(&p2p);

    config = config_of(KVIO_SYNC_BUCKET);
    config.bucket_size = 256ull << 20;
    plan_s(&config, "llama3-8b", "h200", 8, 1, &broadcast);
    config.topology = KVIO_SYNC_P2P;
    config.peers = 2;
    plan_s(&config, "llama3-8b", "h200", 8, 1, &p2p);
    cr_expect_eq(p2p.bytes, broadcast.bytes);
    cr_expect_eq(p2p.messages, p2p.num_buckets);
    cr_expect(p2p.num_buckets >= broadcast.num_buckets &&
                  p2p.num_buckets <= broadcast.num_buckets + 16,
              "%zu buckets, broadcast %zu", p2p.num_buckets, broadcast.num_buckets);
    uint64_t total = 0;
    for (size_t b = 0; b < p2p.num_buckets; b++) {
        cr_expect(p2p.buckets[b].bytes <= config.bucket_size || p2p.buckets[b].tensors == 1);
        total += p2p.buckets[b].bytes;
    }
    cr_expect_eq(total, p2p.bytes);
    /* The trainer's side is not in it: its last bucket staged is the
     * peers' last bucket read, before the joiner is done. */
    cr_expect_gt(p2p.staged_ns, 0);
    cr_expect_leq(p2p.staged_ns, p2p.total_ns);
    cr_expect_eq(p2p.num_instances, 1);
    cr_expect_eq(p2p.arrival_ns[0], p2p.total_ns);
    kvio_sync_plan_free(&broadcast);
    kvio_sync_plan_free(&p2p);
}

/* The checkpoint-engine clusters (3.02 GiB buckets, depth 2, 8 x 400 Gb/s
 * NICs a node): checkpoint-engine runs one loop for both paths, with an
 * RDMA read from a peer in place of the local PCIe copy, so a joiner's
 * GPUs take at least as long as a broadcast to the same GPUs — a NIC's
 * 50 GB/s is below PCIe's 64. When a NIC outruns PCIe the two are within
 * a few percent either way: the shares split buckets (more control, but
 * smaller last buckets to drain). */
Test(sync, p2p_takes_at_least_as_long_as_a_broadcast_to_the_same_gpus, .timeout = 20)
{
    static const struct {
        const char *model, *gpu;
        int64_t tp, peers;
    } clusters[] = {
        {"glm-4.5-air", "h800", 8, 1},
        {"qwen3-235b-a22b", "h800", 8, 1},
        {"deepseek-v3.1", "h20", 16, 1},
        {"kimi-k2", "h20", 16, 15},
    };
    for (size_t c = 0; c < sizeof(clusters) / sizeof(clusters[0]); c++) {
        kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
        config.bucket_size = 3242700308ull;
        config.nic_bandwidth = 400e9;
        double broadcast = plan_s(&config, clusters[c].model, clusters[c].gpu, clusters[c].tp, 1,
                                  NULL);
        config.topology = KVIO_SYNC_P2P;
        config.peers = clusters[c].peers;
        double p2p = plan_s(&config, clusters[c].model, clusters[c].gpu, clusters[c].tp, 1, NULL);
        cr_expect_geq(p2p, broadcast * 1.1, "%s: p2p %.2f s, broadcast %.2f s",
                      clusters[c].model, p2p, broadcast);
        config.nic_bandwidth = 8 * 100e9;
        double fast = plan_s(&config, clusters[c].model, clusters[c].gpu, clusters[c].tp, 1, NULL);
        cr_expect(fast >= broadcast * 0.95 && fast <= broadcast * 1.05,
                  "%s: p2p over 100 GB/s NICs %.2f s, broadcast %.2f s", clusters[c].model, fast,
                  broadcast);
    }
    /* Not the same GPUs: one Kimi-K2 instance joining fifteen is done
     * before a broadcast to all sixteen crosses its 32 nodes' tree. */
    kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
    config.bucket_size = 3242700308ull;
    config.nic_bandwidth = 400e9;
    double everyone = plan_s(&config, "kimi-k2", "h20", 16, 16, NULL);
    config.topology = KVIO_SYNC_P2P;
    config.peers = 15;
    cr_expect_lt(plan_s(&config, "kimi-k2", "h20", 16, 1, NULL), everyone);
    /* One NIC a node (50 GB/s, 6.25 per GPU): two reads in flight bound
     * the joiner at 12.5 GB/s. */
    config.nic_bandwidth = 50e9;
    config.peers = 1;
    kvio_sync_plan_t plan;
    double slow = plan_s(&config, "glm-4.5-air", "h800", 8, 1, &plan);
    cr_expect_geq(slow, (double)plan.bytes / 12.5e9, "%.2f s", slow);
    kvio_sync_plan_free(&plan);
}

/* What P2P cannot be is refused by validate and run naming the key (exit
 * 2); a valid one runs, and the trainer is not held by it. */
Test(sync, p2p_refuses_bad_combinations_naming_the_key, .timeout = 60)
{
    char *dir = test_tmpdir();
    static const struct {
        const char *set, *key;
    } cases[] = {
        {"weight_sync.delta=0.1", "weight_sync.delta"},
        {"weight_sync.train_pp=2", "weight_sync.train_tp"},
        {"weight_sync.train_tp=16", "weight_sync.train_tp"},
        {"weight_sync.granularity=off", "weight_sync.granularity"},
        {"weight_sync.peers=0", "weight_sync.peers"},
    };
    const char *workload = "repro/checkpoint-engine-glm-4.5-air";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_refused(dir, workload, "weight_sync.topology=p2p", cases[i].set, cases[i].key);
    char out[1200];
    snprintf(out, sizeof(out), "%s/p2p", dir);
    test_run_t run = test_kvio(dir, "run", workload, "-o", out, "--set",
                               "weight_sync.topology=p2p", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1300];
    snprintf(path, sizeof(path), "%s/updates.csv", out);
    test_csv_t csv = test_csv_read(path);
    cr_assert_eq(csv.num_rows, 1);
    cr_expect_eq(test_csv_number(&csv, 0, "training_stall_ms"), 0);
    cr_expect_gt(test_csv_number(&csv, 0, "latency_ms"), 0);
    test_csv_free(&csv);
    test_rmtree(dir);
    free(dir);
}

/* End to end: the checkpoint-engine GLM-4.5-Air row in simulate mode. Each
 * serve rank's update latency is the plan's; sync.csv has a row per
 * bucket; 1,024 serve ranks run too. */
Test(sync, a_run_reports_the_plan_and_its_buckets, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "repro/checkpoint-engine-glm-4.5-air", "-o", "res",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/res/summary.json", dir);
    json_t *summary = json_load_file(path, 0, NULL);
    cr_assert_not_null(summary);
    const json_t *updates = json_object_get(json_object_get(summary, "metrics"), "model_updates");
    const json_t *sync = json_object_get(updates, "weight_sync");
    cr_assert_not_null(sync);
    double update_ms = test_json_number(sync, "update_ms");
    cr_expect_float_eq(test_json_number(updates, "update_latency_ms.max"),
                       update_ms, update_ms * 0.01);
    json_int_t buckets = test_json_integer(sync, "buckets");
    cr_expect_gt(buckets, 60, "GLM-4.5-Air (~218 GB) in 3.02 GiB buckets");
    json_decref(summary);
    snprintf(path, sizeof(path), "%s/res/sync.csv", dir);
    test_csv_t csv = test_csv_read(path);
    cr_expect_eq((json_int_t)csv.num_rows, buckets);
    for (size_t r = 1; r < csv.num_rows; r++)
        cr_expect_geq(test_csv_number(&csv, r, "t_reloaded_ms"),
                      test_csv_number(&csv, r - 1, "t_reloaded_ms"));
    test_csv_free(&csv);
    run = test_kvio(dir, "run", "repro/checkpoint-engine-glm-4.5-air", "--set",
                    "ranks.serve=1024", "--set", "cost.tensor_parallel=1", "--set",
                    "model.preset=llama3-8b", "--set", "gpu.preset=h200", "-o", "wide", NULL);
    cr_expect_eq(run.status, 0, "1,024 serve ranks: %s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* ---- emulate mode: real buckets over ucx ---- */

#ifdef KVIO_HAVE_UCX
#define REQUIRE_UCX() ((void)0)
#else
#define REQUIRE_UCX() test_require("ucx", 0, "ucx transport not built")
#endif

/* A small emulate run: Llama-3.2-1B's 146 tensors scaled to train.bytes,
 * 3 versions to 2 serve ranks (sets: more --set pairs, NULL-terminated). */
static const char *emulate_workload =
    "name: sync-emulate\n"
    "mode: emulate\n"
    "ranks: {train: 1, serve: 2, runtime: local, timeout: 60s}\n"
    "model: {preset: llama3.2-1b}\n"
    "train:\n"
    "  step_time: {dist: constant, value: 20ms}\n"
    "  steps: 3\n"
    "  bytes: 8MiB\n"
    "  checkpoint: {policy: every_n_steps, every_n_steps: 1}\n"
    "  transport: {kind: ucx, chunk: 256KiB}\n"
    "update: {iteration: 1ms, verify: true}\n"
    "weight_sync: {granularity: bucket, bucket_size: 1MiB, pipeline_depth: 2}\n";

/* Runs emulate_workload with the extra arguments into dir/name; returns
 * metrics.model_updates (the summary in *summary_p, to decref). */
static json_t *run_emulate(const char *dir, const char *name, json_t **summary_p,
                           const char *set1, const char *set2)
{
    char *path = test_write_file(dir, "sync.yaml", emulate_workload);
    char out[1200];
    snprintf(out, sizeof(out), "%s/%s", dir, name);
    test_run_t run = test_kvio(dir, "run", path, "-o", out, "--set", set1, "--set", set2,
                               NULL);
    free(path);
    cr_assert_eq(run.status, 0, "%s: %s", name, run.err);
    test_run_free(&run);
    char file[1300];
    snprintf(file, sizeof(file), "%s/summary.json", out);
    json_t *summary = json_load_file(file, 0, NULL);
    cr_assert_not_null(summary, "%s", file);
    *summary_p = summary;
    json_t *updates = json_object_get(json_object_get(summary, "metrics"), "model_updates");
    cr_assert_not_null(json_object_get(updates, "weight_sync"), "%s: no weight_sync", name);
    return updates;
}

static double sync_number(const json_t *updates, const char *key)
{
    char path[256];
    snprintf(path, sizeof(path), "weight_sync.%s", key);
    return test_json_number(updates, path);
}

/* Every bucket of every version reaches both serve ranks as a message of
 * its own (its stage, transfer and reload stamped), the receivers end with
 * weights whose checksum verifies, and the buckets are the plan's. */
Test(sync, emulate_moves_every_bucket_over_ucx_and_verifies_the_weights, .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    json_t *summary = NULL;
    json_t *updates = run_emulate(dir, "res", &summary, "weight_sync.pipeline_depth=2",
                                  "ranks.serve=2");
    kvio_sync_config_t config = config_of(KVIO_SYNC_BUCKET);
    config.bucket_size = 1 << 20;
    kvio_model_t model = test_model("llama3.2-1b");
    kvio_sync_plan_t plan;
    char error[256];
    cr_assert_eq(kvio_sync_buckets(&config, &model, 8 << 20, &plan, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_expect_gt(plan.num_buckets, 4);
    cr_expect_eq(sync_number(updates, "buckets"), (double)plan.num_buckets);
    cr_expect_eq(sync_number(updates, "messages"), (double)plan.num_buckets);
    cr_expect_eq(sync_number(updates, "tensors"), 146);
    cr_expect_eq(sync_number(updates, "updates"), 3);
    cr_expect_gt(sync_number(updates, "transfer_ms"), 0);
    /* From the first bucket's stage to the last server's last reload: inside
     * the slowest update (t_ready to activation, after verification). */
    cr_expect_gt(sync_number(updates, "staged_ms"), 0);
    cr_expect_leq(sync_number(updates, "staged_ms"), sync_number(updates, "update_ms"));
    cr_expect_leq(sync_number(updates, "update_ms"),
                  test_json_number(updates, "update_latency_ms.max"));
    cr_expect_gt(sync_number(updates, "control_us_per_message"), 0);
    /* Every receiver's copy was put once, by the trainer or forwarded. */
    cr_expect_eq(sync_number(updates, "wire_bytes_from_trainer") +
                     sync_number(updates, "wire_bytes_forwarded"),
                 2 * sync_number(updates, "wire_bytes"), "2 serve ranks");
    cr_expect_gt(sync_number(updates, "wire_bytes_from_trainer"), 0);
    cr_expect_eq(test_json_integer(updates, "updates_activated"), 6,
                 "3 versions x 2 serve ranks");
    cr_expect_eq(test_json_integer(updates, "checksum_mismatches"), 0);
    char path[1300];
    snprintf(path, sizeof(path), "%s/res/sync.csv", dir);
    test_csv_t csv = test_csv_read(path);
    cr_expect_eq(csv.num_rows, 3 * 2 * plan.num_buckets, "a row per version, bucket, rank");
    double bytes[2] = {0, 0};
    for (size_t r = 0; r < csv.num_rows; r++) {
        int rank = (int)test_csv_number(&csv, r, "rank");
        size_t bucket = (size_t)test_csv_number(&csv, r, "bucket");
        cr_assert(rank == 1 || rank == 2);
        cr_expect_eq(test_csv_number(&csv, r, "bytes"), (double)plan.buckets[bucket].bytes);
        if (test_csv_number(&csv, r, "version") == 1)
            bytes[rank - 1] += test_csv_number(&csv, r, "bytes");
        /* Each stage after the one before it, on one clock. */
        const char *order[] = {"t_stage_start_ms", "t_staged_ms", "t_transfer_start_ms",
                               "t_transferred_ms", "t_control_start_ms", "t_noticed_ms",
                               "t_reload_start_ms", "t_reloaded_ms"};
        for (size_t k = 1; k < sizeof(order) / sizeof(order[0]); k++)
            cr_expect_geq(test_csv_number(&csv, r, order[k]),
                          test_csv_number(&csv, r, order[k - 1]), "row %zu: %s before %s", r,
                          order[k], order[k - 1]);
    }
    cr_expect_eq(bytes[0], 8 << 20);
    cr_expect_eq(bytes[1], 8 << 20);
    test_csv_free(&csv);
    kvio_sync_plan_free(&plan);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* One message per tensor (146) against a few buckets of the same bytes.
 * The control time is measured per message and charged per message sent;
 * which of the two totals is larger depends on the machine's noise at the
 * moment (3 slow messages outweighed 146 fast ones once, under CI load), so
 * that comparison is a benchmark's figure, not this test's verdict. */
Test(sync, emulate_per_tensor_sends_a_message_per_tensor_and_charges_control_per_message,
     .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    json_t *bucket_summary = NULL, *tensor_summary = NULL;
    json_t *bucket = run_emulate(dir, "bucket", &bucket_summary, "weight_sync.bucket_size=4MiB",
                                 "weight_sync.pipeline_depth=1");
    json_t *tensor = run_emulate(dir, "tensor", &tensor_summary,
                                 "weight_sync.granularity=tensor", "weight_sync.pipeline_depth=1");
    double bucket_messages = sync_number(bucket, "messages");
    cr_expect_eq(sync_number(tensor, "messages"), 146, "one per tensor");
    cr_expect_lt(bucket_messages, 10);
    cr_expect_gt(bucket_messages, 0);
    /* The measured control cost per message, times the messages each sent,
     * times the 2 serve ranks. */
    json_t *runs[] = {tensor, bucket};
    for (size_t i = 0; i < 2; i++) {
        double control_ms = sync_number(runs[i], "control_ms");
        double messages = sync_number(runs[i], "messages");
        cr_expect_gt(control_ms, 0);
        cr_expect_float_eq(control_ms,
                           sync_number(runs[i], "control_us_per_message") * messages * 2 / 1e3,
                           control_ms * 1e-6 + 1e-9, "per message x messages x 2 serve ranks");
    }
    json_decref(bucket_summary);
    json_decref(tensor_summary);
    test_rmtree(dir);
    free(dir);
}

/* pipeline_depth 2: some bucket is staged while the one before it is still
 * being reloaded (bucket i+1 staged while i is put and i-1 reloaded); depth
 * 1: no bucket is put before the one before it was reloaded by every serve
 * rank. */
Test(sync, emulate_pipeline_depth_two_overlaps_the_stages, .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    for (int depth = 1; depth <= 2; depth++) {
        json_t *summary = NULL;
        char name[32], set[64];
        snprintf(name, sizeof(name), "depth%d", depth);
        snprintf(set, sizeof(set), "weight_sync.pipeline_depth=%d", depth);
        run_emulate(dir, name, &summary, set, "ranks.serve=1");
        json_decref(summary);
        char path[1300];
        snprintf(path, sizeof(path), "%s/%s/sync.csv", dir, name);
        test_csv_t csv = test_csv_read(path);
        size_t staged_early = 0, put_early = 0, pairs = 0;
        for (size_t r = 1; r < csv.num_rows; r++) {
            if (test_csv_number(&csv, r, "bucket") == 0)
                continue; /* a new version */
            pairs++;
            double reloaded = test_csv_number(&csv, r - 1, "t_reloaded_ms");
            staged_early += test_csv_number(&csv, r, "t_stage_start_ms") < reloaded;
            put_early += test_csv_number(&csv, r, "t_transfer_start_ms") < reloaded;
        }
        cr_assert_gt(pairs, 8);
        if (depth == 1)
            cr_expect_eq(put_early, 0, "depth 1: %zu of %zu buckets put before the one before "
                         "was reloaded", put_early, pairs);
        else
            cr_expect_gt(staged_early, 0, "depth 2: no bucket of %zu staged while the one "
                         "before was reloaded", pairs);
        test_csv_free(&csv);
    }
    test_rmtree(dir);
    free(dir);
}

/* A trainer that dies between two buckets leaves the serve ranks on their
 * last whole version (the one under way is never activated); a serve rank
 * that dies mid-version ends the run naming it, also when it forwards
 * buckets down a chain. None hangs. */
Test(sync, emulate_faults_mid_bucket_end_the_run_naming_the_rank, .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "sync.yaml", emulate_workload);
    static const struct {
        const char *set1, *set2, *topology, *message;
    } cases[] = {
        {"train.transport.die_after_chunks=40", "ranks.timeout=10s",
         "weight_sync.topology=sequential", "training rank 0 lost"},
        {"update.die_during_version=2", "update.die_rank=2", "weight_sync.topology=sequential",
         "serve rank 2 died while receiving version 2"},
        /* On a chain, rank 1 dies: rank 2, which it fed, waits for nothing. */
        {"update.die_during_version=2", "update.die_rank=1", "weight_sync.topology=chain",
         "serve rank 1 died while receiving version 2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[1200], file[1300];
        snprintf(out, sizeof(out), "%s/fault%zu", dir, i);
        test_run_t run = test_kvio(dir, "run", path, "-o", out, "--set", cases[i].set1, "--set",
                                   cases[i].set2, "--set", cases[i].topology, NULL);
        cr_expect_eq(run.status, 1, "%s: exit %d: %s", cases[i].set1, run.status, run.err);
        cr_expect(test_contains(run.err, cases[i].message), "%s: %s", cases[i].set1, run.err);
        test_run_free(&run);
        snprintf(file, sizeof(file), "%s/summary.json", out);
        json_t *summary = json_load_file(file, 0, NULL);
        cr_assert_not_null(summary, "%s", file);
        cr_expect(json_is_false(json_object_get(summary, "complete")));
        /* A run that failed at once has no model_updates (what a failed run
         * keeps of its measurements is #40's); one that served on after
         * losing its trainer has, and no version failed its checksum. */
        const json_t *updates = json_object_get(json_object_get(summary, "metrics"),
                                                "model_updates");
        if (updates != NULL)
            cr_expect_eq(test_json_integer(updates, "checksum_mismatches"), 0, "%s",
                         cases[i].set1);
        json_decref(summary);
    }
    free(path);
    test_rmtree(dir);
    free(dir);
}

/* Deltas (4.5 % of bf16 elements per version, as measured in one RL run):
 * the serve ranks start from the trainer's starting weights, and each
 * version goes as its changes only, which every serve rank applies onto the
 * version before; the checksum is the trainer's whole weights', so every
 * version verifies only if the rebuilt weights are exact. */
Test(sync, emulate_deltas_move_only_the_changes_and_rebuild_every_version, .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    static const struct {
        const char *encoding;
        double per_element; /* wire bytes per bf16 element */
    } cases[] = {{"index_value", 0.045 * 6}, {"bitmap", 0.045 * 2 + 1.0 / 8}};
    for (size_t c = 0; c < 2; c++) {
        json_t *summary = NULL;
        char set[96];
        snprintf(set, sizeof(set), "weight_sync.delta_encoding=%s", cases[c].encoding);
        json_t *updates = run_emulate(dir, cases[c].encoding, &summary, "weight_sync.delta=0.045",
                                      set);
        cr_expect_eq(test_json_integer(updates, "updates_activated"), 6,
                     "%s: 3 versions x 2 serve ranks", cases[c].encoding);
        cr_expect_eq(test_json_integer(updates, "checksum_mismatches"), 0,
                     "%s", cases[c].encoding);
        double elements = (8 << 20) / 2.0, expected = elements * cases[c].per_element;
        cr_expect(fabs(sync_number(updates, "wire_bytes") - expected) < expected * 0.01,
                  "%s: %.0f bytes per delta, %.0f expected", cases[c].encoding,
                  sync_number(updates, "wire_bytes"), expected);
        json_t *delta = json_object_get(json_object_get(updates, "weight_sync"), "delta");
        cr_expect_str_eq(test_json_string(delta, "encoding"),
                         cases[c].encoding);
        json_decref(summary);
        /* sync.csv: every version's buckets put their deltas. */
        char path[1300];
        snprintf(path, sizeof(path), "%s/%s/sync.csv", dir, cases[c].encoding);
        test_csv_t csv = test_csv_read(path);
        double wire[4] = {0, 0, 0, 0};
        for (size_t r = 0; r < csv.num_rows; r++)
            if (test_csv_number(&csv, r, "rank") == 1)
                wire[(int)test_csv_number(&csv, r, "version") & 3] +=
                    test_csv_number(&csv, r, "wire_bytes");
        for (int v = 1; v <= 3; v++)
            cr_expect(fabs(wire[v] - expected) < expected * 0.01, "%s: version %d: %.0f bytes",
                      cases[c].encoding, v, wire[v]);
        test_csv_free(&csv);
    }
    test_rmtree(dir);
    free(dir);
}

/* weight_sync.topology chain or tree in emulate mode: the trainer puts each
 * bucket into the first serve rank only, and each serve rank forwards it to
 * the next (chain) or to its two children (tree); every version reaches all
 * four serve ranks and verifies, and sync.csv names who put each bucket
 * into each rank. */
Test(sync, emulate_chain_and_tree_forward_every_bucket_rank_to_rank, .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    static const char *const topologies[] = {"chain", "tree"};
    for (int k = 0; k < 2; k++) {
        json_t *summary = NULL;
        char set[96];
        snprintf(set, sizeof(set), "weight_sync.topology=%s", topologies[k]);
        json_t *updates = run_emulate(dir, topologies[k], &summary, set, "ranks.serve=4");
        cr_expect_eq(test_json_integer(updates, "updates_activated"), 12,
                     "%s: 3 versions x 4 serve ranks", topologies[k]);
        cr_expect_eq(test_json_integer(updates, "checksum_mismatches"), 0);
        cr_expect(test_contains(test_json_string(updates, "transport_info"),
                                k == 0 ? "down a chain" : "down a tree"));
        size_t buckets = (size_t)sync_number(updates, "buckets");
        json_decref(summary);
        char path[1300];
        snprintf(path, sizeof(path), "%s/%s/sync.csv", dir, topologies[k]);
        test_csv_t csv = test_csv_read(path);
        cr_expect_eq(csv.num_rows, 3 * 4 * buckets, "%s: a row per version, bucket, rank",
                     topologies[k]);
        for (size_t r = 0; r < csv.num_rows; r++) {
            int rank = (int)test_csv_number(&csv, r, "rank"), index = rank - 1;
            int parent = index == 0 ? -1 : k == 0 ? index - 1 : (index - 1) / 2;
            cr_expect_eq(test_csv_number(&csv, r, "source"), parent + 1,
                         "%s: row %zu: rank %d's buckets come from rank %d", topologies[k], r,
                         rank, parent + 1);
            /* Forwarded once it was in: after the trainer's stage. */
            cr_expect_geq(test_csv_number(&csv, r, "t_transfer_start_ms"),
                          test_csv_number(&csv, r, "t_staged_ms"));
            cr_expect_geq(test_csv_number(&csv, r, "t_reloaded_ms"),
                          test_csv_number(&csv, r, "t_noticed_ms"));
        }
        test_csv_free(&csv);
    }
    test_rmtree(dir);
    free(dir);
}

/* The weight-sync preset (emulate: deltas down a tree to three serve
 * ranks) runs as it ships, made small: every version reaches every rank,
 * rebuilt exactly, and its buckets carry deltas. */
Test(sync, the_weight_sync_preset_runs_deltas_down_a_tree, .timeout = 120)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "weight-sync", "--set", "train.bytes=16MiB", "--set",
                               "train.steps=3", "--set", "weight_sync.bucket_size=4MiB", "-o",
                               "res", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/res/summary.json", dir);
    json_t *summary = json_load_file(path, 0, NULL);
    cr_assert_not_null(summary, "%s", path);
    json_t *updates = json_object_get(json_object_get(summary, "metrics"), "model_updates");
    cr_expect_eq(test_json_integer(updates, "updates_activated"), 9,
                 "3 versions x 3 serve ranks");
    cr_expect_eq(test_json_integer(updates, "checksum_mismatches"), 0);
    cr_expect(test_contains(test_json_string(updates, "transport_info"),
                            "down a tree"));
    cr_expect_lt(sync_number(updates, "wire_bytes"), sync_number(updates, "bytes") / 5);
    json_decref(summary);
    test_rmtree(dir);
    free(dir);
}

/* weight_sync in emulate mode over what it does not build: refused by
 * validate (and run) with exit 2, naming the key. */
Test(sync, emulate_refuses_what_it_does_not_build_naming_the_key, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(dir, "sync.yaml", emulate_workload);
    static const struct {
        const char *set, *key;
    } cases[] = {
        {"train.transport.kind=file", "train.transport.kind"},
        {"train.transport.kind=redis", "train.transport.kind"},
        {"train.transport.fanout=chain", "train.transport.fanout"},
        {"weight_sync.train_pp=2", "weight_sync.train_tp"},
        {"weight_sync.topology=p2p", "weight_sync.topology"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_refused(dir, path, NULL, cases[i].set, cases[i].key);
    /* Deltas change whole elements, and index_value's 4-byte indices reach
     * 2^32 elements of a bucket. */
    expect_refused(dir, path, "weight_sync.delta=0.1", "model.weight_dtype_bytes=0.5",
                   "weight_sync.delta");
    char *whole = test_write_file(dir, "whole.yaml", emulate_workload);
    test_run_t run = test_kvio(dir, "validate", whole, "--set", "weight_sync.delta=0.1", "--set",
                               "weight_sync.granularity=whole", "--set", "train.bytes=9GiB", NULL);
    cr_expect_eq(run.status, 2, "exit %d: %s", run.status, run.err);
    cr_expect(test_contains(run.err, "weight_sync.delta_encoding") &&
                  test_contains(run.err, "4-byte indices"), "%s", run.err);
    test_run_free(&run);
    free(whole);
#ifdef KVIO_HAVE_UCX /* else run refuses the transport first */
    /* Weights and bucket rings beyond any machine's memory: refused by run
     * before anything is allocated, with the numbers. */
    char out[1200];
    snprintf(out, sizeof(out), "%s/huge", dir);
    run = test_kvio(dir, "run", path, "-o", out, "--set", "train.bytes=512GiB", NULL);
    cr_expect_eq(run.status, 2, "exit %d: %s", run.status, run.err);
    cr_expect(test_contains(run.err, "weight_sync needs") &&
                  test_contains(run.err, "bucket slots"), "%s", run.err);
    test_run_free(&run);
#endif
    free(path);
    test_rmtree(dir);
    free(dir);
}
