/* The weight-sync model (kvio/sync.h): buckets by granularity, the control
 * cost per message, the pipeline, deltas, the topology across nodes,
 * resharding; and a run with it end to end (updates.csv, sync.csv). */
#include "kvio/sync.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/run.h"
#include "kvio/tensors.h"
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
    double update_ms = json_number_value(json_object_get(sync, "update_ms"));
    cr_expect_float_eq(json_number_value(json_object_get(
                           json_object_get(updates, "update_latency_ms"), "max")),
                       update_ms, update_ms * 0.01);
    json_int_t buckets = json_integer_value(json_object_get(sync, "buckets"));
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
