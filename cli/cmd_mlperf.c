/* kvio mlperf: MLPerf Storage v3.0's KV-cache benchmark (the three closed
 * options, three trials each, as mlpstorage runs kv-cache.py) against a
 * directory on the device under test; under mpirun each process is a
 * client, as mlpstorage's ranks are (docs/mlperf.md). */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/format.h"
#include "kvio/mlperf.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvio mlperf [OPTION...] --dir DIR [-o OUT] [--trials N] [--seed N]\n"
            "                   [--clients N] [--users N] [--duration SECONDS] [--model M]\n"
            "                   [--cpu-mem-gb GIB] [--max-concurrent-allocs N]\n"
            "                   [--generation-mode none|fast|realistic] [--tensor-parallel N]\n"
            "                   [--storage-capacity-gb GIB] [--max-requests N]\n"
            "                   [--start-delay S] [--end-delay S] [--inter-option-delay S]\n"
            "                   [--data random|zero|compress:PCT|dedupe:PCT]\n"
            "                   [--verify] [--io-size SIZE]\n\n"
            "MLPerf Storage v3.0's KV-cache benchmark as mlpstorage runs kv-cache.py: OPTION\n"
            "is 1 (max-storage-stress: llama3.1-8b, 200 users, no CPU tier), 2\n"
            "(storage-throughput: 100 users, 4 GiB CPU tier), 3 (large-model:\n"
            "llama3.1-70b-instruct, 70 users), or all (the default); each 300 s, seed 42,\n"
            "3 trials, 90 s between options and around each trial (--start-delay,\n"
            "--end-delay, --inter-option-delay: 0 for a quick look).\n"
            "--dir is kv-cache.py's --cache-dir on the device under test: client N uses\n"
            "DIR/rank_N. Under mpirun every process is a client with its own users\n"
            "(mpirun -np 2 kvio mlperf ...); --clients N runs N as threads here.\n"
            "The flags after --dir change the workload (the OPEN division); mlperf.json\n"
            "says which division a run is, v3.0's scored metrics under its names\n"
            "(aggregated_read_bandwidth_gbps, ...) and every client's trial.\n"
            "--data: what the objects hold (random: incompressible, as kv-cache.py's);\n"
            "--verify checks every byte read; --io-size: bytes per read or write call\n"
            "(default 1MiB).\n");
}

enum {
    OPT_HELP = 1, OPT_DIR, OPT_OUTPUT, OPT_TRIALS, OPT_SEED, OPT_CLIENTS, OPT_USERS,
    OPT_DURATION, OPT_MODEL, OPT_CPU_MEM, OPT_ALLOCS, OPT_GENERATION, OPT_TP, OPT_CAPACITY,
    OPT_START_DELAY, OPT_END_DELAY, OPT_OPTION_DELAY, OPT_DATA, OPT_VERIFY, OPT_IO_SIZE,
    OPT_MAX_REQUESTS,
};

static const kvio_cli_option_t options[] = {
    {"help", 'h', NULL, OPT_HELP},
    {"dir", 0, "a directory", OPT_DIR},
    {"cache-dir", 0, "a directory", OPT_DIR},
    {"output", 'o', "a directory", OPT_OUTPUT},
    {"trials", 0, "a count", OPT_TRIALS},
    {"seed", 0, "a number", OPT_SEED},
    {"clients", 0, "a count", OPT_CLIENTS},
    {"users", 0, "a count", OPT_USERS},
    {"num-users", 0, "a count", OPT_USERS},
    {"duration", 0, "seconds", OPT_DURATION},
    {"model", 0, "a kv-cache.py model", OPT_MODEL},
    {"cpu-mem-gb", 0, "GiB", OPT_CPU_MEM},
    {"max-concurrent-allocs", 0, "a count", OPT_ALLOCS},
    {"generation-mode", 0, "none, fast or realistic", OPT_GENERATION},
    {"tensor-parallel", 0, "a count", OPT_TP},
    {"storage-capacity-gb", 0, "GiB", OPT_CAPACITY},
    {"start-delay", 0, "seconds", OPT_START_DELAY},
    {"end-delay", 0, "seconds", OPT_END_DELAY},
    {"inter-option-delay", 0, "seconds", OPT_OPTION_DELAY},
    {"data", 0, "random, zero, compress:PCT or dedupe:PCT", OPT_DATA},
    {"verify", 0, NULL, OPT_VERIFY},
    {"io-size", 0, "a size", OPT_IO_SIZE},
    {"max-requests", 0, "a count", OPT_MAX_REQUESTS},
    {NULL, 0, NULL, 0},
};

/* A number from flag's value within [low, high]; usage error otherwise. */
static int number(const char *flag, const char *text, double low, double high, double *value_p)
{
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(value) || value < low ||
        value > high) {
        fprintf(stderr, "kvio mlperf: --%s: '%s' is not a number from %g to %g\n", flag, text,
                low, high);
        return KVIO_EXIT_USAGE;
    }
    *value_p = value;
    return KVIO_EXIT_OK;
}

static const char *flag_name(int id)
{
    const kvio_cli_option_t *option = options;
    while (option->id != id)
        option++;
    return option->name;
}

/* An option named on the command line (or all of them). */
static int take_option(kvio_mlperf_config_t *config, bool *named_p, const char *name)
{
    if (!*named_p)
        config->num_options = 0;
    *named_p = true;
    if (strcmp(name, "all") == 0) {
        config->num_options = 0;
        for (int i = 0; i < KVIO_MLPERF_OPTIONS; i++)
            config->options[config->num_options++] = kvio_mlperf_options[i].number;
        return KVIO_EXIT_OK;
    }
    const kvio_mlperf_option_t *option = kvio_mlperf_option_find(name);
    if (option == NULL) {
        fprintf(stderr, "kvio mlperf: '%s' is no option (1 max-storage-stress, 2 "
                "storage-throughput, 3 large-model, all)\n", name);
        return KVIO_EXIT_USAGE;
    }
    for (size_t i = 0; i < config->num_options; i++)
        if (config->options[i] == option->number)
            return KVIO_EXIT_OK;
    config->options[config->num_options++] = option->number;
    return KVIO_EXIT_OK;
}

/* A flag that sets one of the options' parameters (the OPEN division). */
static int take_param(kvio_mlperf_config_t *config, int id, const char *value)
{
    kvio_mlperf_params_t *params = &config->overrides;
    double x = 0;
    int status = KVIO_EXIT_OK;
    switch (id) {
    case OPT_MODEL:
        if (kvio_mlperf_kv_bytes_per_token(value) == 0) {
            fprintf(stderr, "kvio mlperf: --model: '%s' is none of kv-cache.py's models "
                    "(tiny-1b, mistral-7b, llama2-7b, llama3.1-8b, llama3.1-70b-instruct, "
                    "deepseek-v3, qwen3-32b, gpt-oss-120b, gpt-oss-20b)\n", value);
            return KVIO_EXIT_USAGE;
        }
        snprintf(params->model, sizeof(params->model), "%s", value);
        config->given |= KVIO_MLPERF_GIVE_MODEL;
        return KVIO_EXIT_OK;
    case OPT_GENERATION:
        params->generation_mode = strcmp(value, "none") == 0   ? KVIO_MLPERF_GENERATION_NONE
                                  : strcmp(value, "fast") == 0 ? KVIO_MLPERF_GENERATION_FAST
                                  : strcmp(value, "realistic") == 0
                                      ? KVIO_MLPERF_GENERATION_REALISTIC
                                      : -1;
        if (params->generation_mode < 0) {
            fprintf(stderr, "kvio mlperf: --generation-mode: '%s' is not none, fast or "
                    "realistic\n", value);
            return KVIO_EXIT_USAGE;
        }
        config->given |= KVIO_MLPERF_GIVE_GENERATION;
        return KVIO_EXIT_OK;
    case OPT_USERS:
        status = number(flag_name(id), value, 1, 100000, &x);
        params->num_users = (int64_t)x;
        config->given |= KVIO_MLPERF_GIVE_USERS;
        break;
    case OPT_DURATION:
        status = number(flag_name(id), value, 0.001, 86400, &x);
        params->duration_s = x;
        config->given |= KVIO_MLPERF_GIVE_DURATION;
        break;
    case OPT_CPU_MEM:
        status = number(flag_name(id), value, 0, 131072, &x);
        params->cpu_mem_gb = x;
        config->given |= KVIO_MLPERF_GIVE_CPU_MEM;
        break;
    case OPT_ALLOCS:
        status = number(flag_name(id), value, 0, 100000, &x);
        params->max_concurrent_allocs = (int64_t)x;
        config->given |= KVIO_MLPERF_GIVE_ALLOCS;
        break;
    case OPT_TP:
        status = number(flag_name(id), value, 1, 1024, &x);
        params->tensor_parallel = (int64_t)x;
        config->given |= KVIO_MLPERF_GIVE_TP;
        break;
    case OPT_MAX_REQUESTS:
        status = number(flag_name(id), value, 0, 1e12, &x);
        params->max_requests = (int64_t)x;
        config->given |= KVIO_MLPERF_GIVE_MAX_REQUESTS;
        break;
    default: /* OPT_CAPACITY */
        status = number(flag_name(id), value, 0, 1e9, &x);
        params->storage_capacity_gb = x;
        config->given |= KVIO_MLPERF_GIVE_CAPACITY;
    }
    return status;
}

/* The run's own flags (not the workload's). */
static int take_run_flag(kvio_mlperf_config_t *config, int id, const char *value)
{
    double x = 0;
    char error[256];
    switch (id) {
    case OPT_DIR:
        config->dir = value;
        return KVIO_EXIT_OK;
    case OPT_OUTPUT:
        config->output_dir = value;
        return KVIO_EXIT_OK;
    case OPT_VERIFY:
        config->verify = true;
        return KVIO_EXIT_OK;
    case OPT_DATA:
        if (kvio_data_parse(value, &config->data, error, sizeof(error)) != KVIO_OK) {
            fprintf(stderr, "kvio mlperf: --%s\n", error);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case OPT_IO_SIZE:
        if (kvio_parse_size(value, &config->io_bytes, error, sizeof(error)) != KVIO_OK) {
            fprintf(stderr, "kvio mlperf: --io-size: %s\n", error);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case OPT_TRIALS:
    case OPT_CLIENTS:
        if (number(flag_name(id), value, 1, id == OPT_TRIALS ? 64 : 1024, &x) != KVIO_EXIT_OK)
            return KVIO_EXIT_USAGE;
        if (id == OPT_TRIALS)
            config->trials = (int64_t)x;
        else
            config->clients = (int)x;
        return KVIO_EXIT_OK;
    case OPT_SEED:
        if (number(flag_name(id), value, 0, 4294967295.0, &x) != KVIO_EXIT_OK)
            return KVIO_EXIT_USAGE;
        config->seed = (int64_t)x;
        return KVIO_EXIT_OK;
    default: { /* the delays */
        double *delay = id == OPT_START_DELAY ? &config->start_delay_s
                        : id == OPT_END_DELAY ? &config->end_delay_s
                                              : &config->inter_option_delay_s;
        return number(flag_name(id), value, 0, 86400, delay);
    }
    }
}

/* Reads the arguments; -1 to go on, else the exit status. */
static int parse(int argc, char **argv, kvio_mlperf_config_t *config)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio mlperf", argc, argv, options);
    const char *value = NULL;
    bool named = false;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        int status;
        if (option == KVIO_CLI_ERROR)
            return KVIO_EXIT_USAGE;
        if (option == OPT_HELP) {
            usage(stdout);
            return KVIO_EXIT_OK;
        }
        if (option == KVIO_CLI_OPERAND)
            status = take_option(config, &named, value);
        else if (option == OPT_MODEL || option == OPT_GENERATION || option == OPT_USERS ||
                 option == OPT_DURATION || option == OPT_CPU_MEM || option == OPT_ALLOCS ||
                 option == OPT_TP || option == OPT_CAPACITY || option == OPT_MAX_REQUESTS)
            status = take_param(config, option, value);
        else
            status = take_run_flag(config, option, value);
        if (status != KVIO_EXIT_OK)
            return status;
    }
    if (config->dir == NULL) {
        fprintf(stderr, "kvio mlperf: --dir DIR is required: the cache directory on the "
                "device under test (kv-cache.py's --cache-dir)\n");
        return KVIO_EXIT_USAGE;
    }
    return -1;
}

int kvio_cmd_mlperf(int argc, char **argv)
{
    kvio_mlperf_config_t config;
    kvio_mlperf_config_defaults(&config);
    int parsed = parse(argc, argv, &config);
    if (parsed >= 0)
        return parsed;
    config.argv = (const char *const *)argv;
    config.argc = argc;
    config.stop = kvio_cli_stop_on_signals();
    config.out = stdout;
    json_t *result = NULL;
    char error[KVIO_CLI_ERROR_MAX];
    kvio_status_t status = kvio_mlperf_run(&config, &result, error, sizeof(error));
    if (status != KVIO_OK)
        fprintf(stderr, "kvio mlperf: %s\n", error);
    json_decref(result);
    return kvio_cli_exit_status(status);
}
