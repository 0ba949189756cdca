/* The options kvio cost and kvio fit share: the model, GPU and engine
 * presets, tensor/pipeline/expert parallelism and the number formats,
 * resolved into a model, a GPU and a roofline cost config. */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/cost.h"
#include "kvio/model.h"

bool kvio_cli_cost_setup_take(kvio_cli_cost_setup_t *setup, int option, const char *value)
{
    switch (option) {
    case KVIO_CLI_COST_MODEL: setup->model_name = value; return true;
    case KVIO_CLI_COST_GPU: setup->gpu_name = value; return true;
    case KVIO_CLI_COST_ENGINE: setup->engine_name = value; return true;
    case KVIO_CLI_COST_TP: setup->tp = value; return true;
    case KVIO_CLI_COST_PP: setup->pp = value; return true;
    case KVIO_CLI_COST_EP: setup->expert_parallel = true; return true;
    case KVIO_CLI_COST_WEIGHT_DTYPE: setup->weight_dtype = value; return true;
    case KVIO_CLI_COST_ACTIVATION_DTYPE: setup->activation_dtype = value; return true;
    case KVIO_CLI_COST_KV_DTYPE: setup->kv_dtype = value; return true;
    default: return false;
    }
}

int kvio_cli_cost_count(const char *command, const kvio_cli_option_t *options, int option,
                        const char *text, uint64_t min, uint64_t *value_p)
{
    const kvio_cli_option_t *entry = options;
    while (entry->name != NULL && entry->id != option)
        entry++;
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text != NULL ? text : "", &end, 10);
    if (text == NULL || end == text || *end != '\0' || errno == ERANGE || text[0] == '-' ||
        value < min) {
        char what[48] = "a non-negative integer";
        if (min > 0)
            snprintf(what, sizeof(what), "an integer of at least %llu", (unsigned long long)min);
        fprintf(stderr, "%s: --%s needs %s, got '%s'\n", command,
                entry->name != NULL ? entry->name : "?", what, text != NULL ? text : "");
        return KVIO_EXIT_USAGE;
    }
    *value_p = value;
    return KVIO_EXIT_OK;
}

/* The index of name in names (NULL-terminated), or -1 with the names listed. */
static int name_index(const char *command, const char *flag, const char *name,
                      const char *const *names)
{
    for (int i = 0; names[i] != NULL; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    fprintf(stderr, "%s: --%s: unknown '%s' (one of", command, flag, name);
    for (int i = 0; names[i] != NULL; i++)
        fprintf(stderr, "%s %s", i > 0 ? "," : "", names[i]);
    fprintf(stderr, ")\n");
    return -1;
}

/* A count of 1..64 GPUs. */
static int parse_gpus(const char *command, const char *flag, const char *text, int64_t *value_p)
{
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || value < 1 || value > 64) {
        fprintf(stderr, "%s: --%s must be 1..64, got '%s'\n", command, flag, text);
        return KVIO_EXIT_USAGE;
    }
    *value_p = value;
    return KVIO_EXIT_OK;
}

int kvio_cli_cost_setup_build(const kvio_cli_cost_setup_t *setup, const char *command,
                              kvio_model_t *model_p, kvio_gpu_t *gpu_p,
                              kvio_cost_config_t *config_p)
{
    char error[512];
    kvio_model_t model = {.preset = (char *)setup->model_name, .dtype_bytes = 2};
    kvio_gpu_t gpu = {.preset = (char *)setup->gpu_name};
    const char *dtypes[3] = {setup->weight_dtype, setup->activation_dtype, setup->kv_dtype};
    const char *flags[3] = {"weight-dtype", "activation-dtype", "kv-dtype"};
    int *fields[3] = {&model.weight_dtype, &model.activation_dtype, &model.kv_cache_dtype};
    for (int d = 0; d < 3; d++) {
        if (dtypes[d] != NULL &&
            (*fields[d] = name_index(command, flags[d], dtypes[d], kvio_dtype_names)) < 0)
            return KVIO_EXIT_USAGE;
    }
    if (kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK ||
        kvio_gpu_resolve(&gpu, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "%s: %s\n", command, error);
        return KVIO_EXIT_USAGE;
    }
    kvio_cost_config_t config;
    memset(&config, 0, sizeof(config));
    if (kvio_config_defaults(kvio_cost_options, &config, error, sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "%s: %s\n", command, error);
        return KVIO_EXIT_FAILED;
    }
    int status = KVIO_EXIT_OK;
    if (setup->engine_name != NULL &&
        (config.engine = name_index(command, "engine", setup->engine_name,
                                    kvio_cost_engine_names)) < 0)
        status = KVIO_EXIT_USAGE;
    if (status == KVIO_EXIT_OK && setup->tp != NULL)
        status = parse_gpus(command, "tp", setup->tp, &config.tensor_parallel);
    if (status == KVIO_EXIT_OK && setup->pp != NULL)
        status = parse_gpus(command, "pp", setup->pp, &config.pipeline_parallel);
    config.expert_parallel = setup->expert_parallel;
    if (status != KVIO_EXIT_OK) {
        kvio_config_free(kvio_cost_options, &config);
        return status;
    }
    *model_p = model;
    *gpu_p = gpu;
    *config_p = config;
    return KVIO_EXIT_OK;
}
