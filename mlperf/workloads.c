/* What kv-cache.py and mlpstorage fix: the models (kv_cache/models.py
 * _DEFAULT_MODEL_CONFIGS, all float16), v3.0's three closed options
 * (mlpstorage_py/benchmarks/kvcache.py WORKLOAD_PARAMS; Rules.md Table
 * KVCache-1) and the run's defaults (mlperf_wrapper.py, Rules.md 6.3.2). */
#include "mlperf/mlperf_int.h"

#include <string.h>

static const mlperf_model_t models[] = {
    {.name = "tiny-1b", .layers = 12, .hidden = 1024, .heads = 8, .kv_heads = 4},
    {.name = "mistral-7b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8},
    {.name = "llama2-7b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 32},
    {.name = "llama3.1-8b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8},
    {.name = "llama3.1-70b-instruct", .layers = 80, .hidden = 8192, .heads = 64, .kv_heads = 8},
    {.name = "deepseek-v3", .layers = 61, .hidden = 7168, .heads = 128, .kv_heads = 128,
     .kv_lora_rank = 512, .rope_head_dim = 64},
    {.name = "qwen3-32b", .layers = 64, .hidden = 5120, .heads = 64, .kv_heads = 8,
     .head_dim = 128},
    {.name = "gpt-oss-120b", .layers = 36, .hidden = 2880, .heads = 64, .kv_heads = 8,
     .head_dim = 64},
    {.name = "gpt-oss-20b", .layers = 24, .hidden = 2880, .heads = 64, .kv_heads = 8,
     .head_dim = 64},
};

const char *const mlperf_qos_names[MLPERF_QOS_CLASSES] = {"interactive", "responsive", "batch"};
const char *const mlperf_user_type_names[MLPERF_USER_TYPES] = {"chatbot", "coding", "document"};

const mlperf_model_t *mlperf_model_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < sizeof(models) / sizeof(models[0]); i++)
        if (strcmp(models[i].name, name) == 0)
            return &models[i];
    return NULL;
}

static uint32_t head_dim(const mlperf_model_t *model)
{
    return model->head_dim > 0 ? model->head_dim : model->hidden / model->heads;
}

/* ModelConfig.kv_cache_size_per_token: float16, K and V (MLA: one latent). */
uint64_t kvio_mlperf_kv_bytes_per_token(const char *name)
{
    const mlperf_model_t *model = mlperf_model_find(name);
    if (model == NULL)
        return 0;
    if (model->kv_lora_rank > 0)
        return (uint64_t)model->layers * (model->kv_lora_rank + model->rope_head_dim) * 2;
    return (uint64_t)model->layers * model->kv_heads * head_dim(model) * 2 * 2;
}

/* KVCacheGenerator.generate's kv_shape. */
int mlperf_model_shape(const mlperf_model_t *model, uint64_t tokens, uint64_t shape_p[5])
{
    if (model->kv_lora_rank > 0) {
        shape_p[0] = model->layers;
        shape_p[1] = tokens;
        shape_p[2] = (uint64_t)model->kv_lora_rank + model->rope_head_dim;
        return 3;
    }
    shape_p[0] = model->layers;
    shape_p[1] = 2;
    shape_p[2] = tokens;
    shape_p[3] = model->kv_heads;
    shape_p[4] = head_dim(model);
    return 5;
}

/* WORKLOAD_PARAMS: gpu-mem-gb 0 everywhere (kvio has no GPU tier), seed
 * 42, 300 s, generation none; kv-cache.py's --tensor-parallel 1 and
 * --storage-capacity-gb 0 (the options leave them at their defaults). */
const kvio_mlperf_option_t kvio_mlperf_options[KVIO_MLPERF_OPTIONS] = {
    {1, "max-storage-stress",
     {.model = "llama3.1-8b", .num_users = 200, .duration_s = 300, .cpu_mem_gb = 0,
      .max_concurrent_allocs = 16, .generation_mode = KVIO_MLPERF_GENERATION_NONE,
      .tensor_parallel = 1}},
    {2, "storage-throughput",
     {.model = "llama3.1-8b", .num_users = 100, .duration_s = 300, .cpu_mem_gb = 4,
      .max_concurrent_allocs = 16, .generation_mode = KVIO_MLPERF_GENERATION_NONE,
      .tensor_parallel = 1}},
    {3, "large-model",
     {.model = "llama3.1-70b-instruct", .num_users = 70, .duration_s = 300, .cpu_mem_gb = 0,
      .max_concurrent_allocs = 4, .generation_mode = KVIO_MLPERF_GENERATION_NONE,
      .tensor_parallel = 1}},
};

const kvio_mlperf_option_t *kvio_mlperf_option_find(const char *name)
{
    for (int i = 0; name != NULL && i < KVIO_MLPERF_OPTIONS; i++) {
        char number[4] = {(char)('0' + kvio_mlperf_options[i].number), '\0'};
        if (strcmp(name, number) == 0 || strcmp(name, kvio_mlperf_options[i].name) == 0)
            return &kvio_mlperf_options[i];
    }
    return NULL;
}

/* mlpstorage's closed run: options 1-3, seed 42, 3 trials, 90 s between
 * options (Rules.md 6.3.2.1), mlperf_wrapper's 90 s before and after each
 * trial; one client. */
void kvio_mlperf_config_defaults(kvio_mlperf_config_t *config)
{
    *config = (kvio_mlperf_config_t){.seed = 42, .trials = 3, .start_delay_s = 90,
                                     .end_delay_s = 90, .inter_option_delay_s = 90,
                                     .clients = 1, .io_bytes = 1u << 20};
    for (int i = 0; i < KVIO_MLPERF_OPTIONS; i++)
        config->options[config->num_options++] = kvio_mlperf_options[i].number;
}
