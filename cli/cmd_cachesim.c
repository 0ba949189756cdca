/* kvio cachesim: reads a trace of block ids (Mooncake or kvio JSONL) as a
 * stream, in timestamp order, and replays its block ids through caches of
 * several capacities and eviction policies, printing block and token hit
 * rates as a table, JSON or CSV. A thin shell: the trace reader is the
 * streams module's (kvio/stream.h), the replay is in kvcache/. */
#include "cli/cli.h"

#include "kvio/sysinfo.h"
#include "kvio/cachesim.h"
#include "kvio/config.h"
#include "kvio/cost.h"
#include "kvio/kvcache.h"
#include "kvio/log.h"
#include "kvio/stream.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 64
#define SCHEMA_VERSION 1

static const uint64_t default_capacities[] = {1000, 10000, 30000, 50000, 100000,
                                              KVIO_CACHESIM_UNLIMITED};

typedef enum { OUTPUT_TABLE, OUTPUT_JSON, OUTPUT_CSV } output_format_t;

typedef struct options {
    const char *trace_path;
    const char *format;
    const char *output_path;
    uint64_t capacities[MAX_LIST];
    uint64_t capacity_bytes[MAX_LIST]; /* a capacity given in bytes (0: in blocks) */
    size_t num_capacities;
    const char *model;                 /* --model: KV bytes per token for bytes */
    uint64_t tensor_parallel;
    uint64_t block_bytes;              /* KV bytes of one trace block (with --model) */
    const char *policies[MAX_LIST];
    size_t num_policies;
    char *policy_text; /* owns the strings in policies */
    uint32_t block_tokens;
    unsigned threads;
    bool skip_bad;
    bool hybrid;       /* --hybrid: the model's window layers as vLLM's groups */
    uint32_t window;   /* their window (tokens), with --hybrid */
    kvio_kvcache_index_t index; /* --index */
    uint32_t replicas; /* --replicas: local and global hit rates of a fleet; 0: one cache */
    kvio_cachesim_router_t router; /* --router */
    bool router_given;
    output_format_t output;
} options_t;

/* A policy's name and help, the help wrapped at 80 columns under itself. */
static void print_policy(FILE *out, const char *name, const char *help)
{
    enum { INDENT = 32, WIDTH = 80 };
    fprintf(out, "%24s%-7s ", "", name);
    size_t column = INDENT;
    while (*help != '\0') {
        size_t word = strcspn(help, " ");
        if (column > INDENT && column + 1 + word > WIDTH) {
            fprintf(out, "\n%*s", INDENT, "");
            column = INDENT;
        } else if (column > INDENT) {
            fputc(' ', out);
            column++;
        }
        fprintf(out, "%.*s", (int)word, help);
        column += word;
        help += word;
        help += strspn(help, " ");
    }
    fputc('\n', out);
}

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: kvio cachesim TRACE [--format NAME] [--capacity LIST]\n"
            "                     [--eviction LIST] [--index hash|radix]\n"
            "                     [--replicas N [--router NAME]] [--block-tokens N]\n"
            "                     [--skip-bad]\n"
            "                     [--threads N] [--json|--csv] [-o FILE]\n\n"
            "Replays the trace's block hash ids (in timestamp order) through a prefix\n"
            "cache: each request hits on the longest prefix of its blocks that is cached,\n"
            "then every block of the request is inserted or touched in order. Prints\n"
            "block and token hit rates per capacity and eviction policy.\n\n"
            "  --format NAME       trace format: mooncake (default), kvio (lines with\n"
            "                      hash_ids), conversation (chat logs, as ids of 16\n"
            "                      tokens: --block-tokens 16), or auto (the first line)\n"
            "  --capacity LIST     capacities in trace blocks, or bytes of KV with --model\n"
            "                      (40GiB), comma-separated, or 'unlimited' (default\n"
            "                      1000,10000,30000,50000,100000,unlimited)\n"
            "  --model NAME        model preset whose KV bytes per token turn byte\n"
            "                      capacities into blocks; --tp N its tensor parallelism\n"
            "                      (default 1: the KV of one GPU's share)\n"
            "  --eviction LIST     policies, comma-separated, or 'all' (default lru):\n");
    for (size_t i = 0; i < kvio_evictions.count; i++)
        print_policy(out, kvio_evictions.plugins[i]->name, kvio_evictions.plugins[i]->help);
    fprintf(out,
            "  --index NAME        hash (default: vLLM's block index, any cached block\n"
            "                      may be evicted) or radix (SGLang's radix tree,\n"
            "                      kvcache/radix.c: blocks are its pages, only leaves\n"
            "                      are evicted, a whole node at a time)\n"
            "  --replicas N        a fleet of N replicas behind a round-robin router:\n"
            "                      local (each replica its own cache of the capacity)\n"
            "                      and global (one store of N x the capacity shared by\n"
            "                      all, as Mooncake Store) hit rates side by side\n"
            "  --router NAME       with --replicas: round_robin (default) or\n"
            "                      prefix_affinity (the replica caching the longest\n"
            "                      prefix, within 16 requests of the least routed;\n"
            "                      --index hash)\n"
            "  --block-tokens N    tokens per trace block (default 512)\n"
            "  --hybrid            the --model's sliding-window layers as vLLM's hybrid\n"
            "                      groups (gpt-oss): a block per group, a hit what both\n"
            "                      serve; without it a block holds every layer, window\n"
            "                      layers as full attention\n"
            "  --skip-bad          skip and count bad trace lines instead of failing\n"
            "  --threads N         replays run in parallel (default: CPUs); lru takes\n"
            "                      one pass for all capacities, other policies one\n"
            "                      replay per capacity\n"
            "  --json, --csv       machine-readable output (default: a table)\n"
            "  -o, --output FILE   write there instead of stdout\n"
            "  -h, --help          this help\n\n"
            "exit status: 0 success, 1 run failed, 2 usage or input error\n");
}

static bool parse_uint(const char *text, uint64_t max, uint64_t *value_p)
{
    char *end = NULL;
    errno = 0;
    if (text == NULL || *text < '0' || *text > '9')
        return false;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || value > max)
        return false;
    *value_p = value;
    return true;
}

static bool parse_capacities(const char *text, options_t *options)
{
    char *copy = strdup(text), *save = NULL;
    bool ok = copy != NULL;
    options->num_capacities = 0;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; ok && item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        uint64_t value;
        char error[256];
        options->capacity_bytes[options->num_capacities < MAX_LIST ? options->num_capacities
                                                                   : 0] = 0;
        if (options->num_capacities == MAX_LIST) {
            kvio_error("cachesim: --capacity takes at most %d values", MAX_LIST);
            ok = false;
        } else if (strcmp(item, "unlimited") == 0) {
            options->capacities[options->num_capacities++] = KVIO_CACHESIM_UNLIMITED;
        } else if (parse_uint(item, UINT64_MAX - 1, &value) && value > 0) {
            options->capacities[options->num_capacities++] = value;
        } else if (kvio_parse_size(item, &value, error, sizeof(error)) == KVIO_OK && value > 0) {
            /* Bytes of KV: turned into blocks once the model is known. */
            options->capacity_bytes[options->num_capacities] = value;
            options->capacities[options->num_capacities++] = 0;
        } else {
            kvio_error("cachesim: bad capacity '%s' (a positive number of blocks, a size of "
                       "KV such as 40GiB with --model, or 'unlimited')", item);
            ok = false;
        }
    }
    free(copy);
    if (ok && options->num_capacities == 0)
        kvio_error("cachesim: --capacity '%s' holds no capacity (a comma-separated list of "
                   "block counts or 'unlimited')", text);
    return ok && options->num_capacities > 0;
}

static bool parse_policies(const char *text, options_t *options)
{
    free(options->policy_text);
    options->num_policies = 0;
    if (strcmp(text, "all") == 0) {
        options->policy_text = NULL;
        for (size_t i = 0; i < kvio_evictions.count && i < MAX_LIST; i++)
            options->policies[options->num_policies++] = kvio_evictions.plugins[i]->name;
        return true;
    }
    options->policy_text = strdup(text);
    if (options->policy_text == NULL)
        return false;
    char *save = NULL;
    for (char *item = strtok_r(options->policy_text, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (options->num_policies == MAX_LIST) { /* (it exited 2 saying nothing) */
            kvio_error("cachesim: --eviction takes at most %d policies", MAX_LIST);
            return false;
        }
        if (kvio_evict_check_name(item) != KVIO_OK)
            return false;
        options->policies[options->num_policies++] = item;
    }
    if (options->num_policies == 0)
        kvio_error("cachesim: --eviction '%s' names no policy (a comma-separated list of "
                   "policies, or 'all'; see kvio cachesim --help)", text);
    return options->num_policies > 0;
}
/* Capacities given in bytes of KV become blocks of --block-tokens tokens at
 * the model's KV bytes per token (per GPU at --tp). -1 when all is well, else
 * the exit status. */
static int capacities_in_blocks(options_t *options)
{
    bool any_bytes = false;
    for (size_t i = 0; i < options->num_capacities; i++)
        any_bytes = any_bytes || options->capacity_bytes[i] > 0;
    if (!any_bytes && options->model == NULL && !options->hybrid)
        return -1;
    if (options->model == NULL) {
        kvio_error(options->hybrid ? "cachesim: --hybrid needs --model (its window layers)"
                                   : "cachesim: a capacity in bytes needs --model (the KV "
                                     "bytes per token)");
        return KVIO_EXIT_USAGE;
    }
    kvio_model_t model = {.preset = (char *)options->model};
    char error[256];
    if (kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK) {
        kvio_error("cachesim: --model %s: %s", options->model, error);
        return KVIO_EXIT_USAGE;
    }
    if (options->hybrid && (model.sliding_window_layers == 0 ||
                            model.sliding_window_layers * 2 != model.layers)) {
        kvio_error("cachesim: --hybrid: %s does not have half its layers windowed (kvio's "
                   "groups are two of equal size, as gpt-oss's)", options->model);
        return KVIO_EXIT_USAGE;
    }
    /* A block of one group holds its layers; without --hybrid, a block
     * holds every layer, window layers as full attention. */
    kvio_model_t per_block = model;
    if (options->hybrid)
        options->window = (uint32_t)model.sliding_window;
    else
        per_block.sliding_window_layers = 0;
    uint64_t tp = options->tensor_parallel > 0 ? options->tensor_parallel : 1;
    options->block_bytes = kvio_model_kv_bytes_per_token(&per_block, (int64_t)tp) *
                           options->block_tokens;
    for (size_t i = 0; i < options->num_capacities; i++) {
        if (options->capacity_bytes[i] == 0)
            continue;
        uint64_t blocks = options->block_bytes > 0
                              ? options->capacity_bytes[i] / options->block_bytes
                              : 0;
        if (blocks == 0) {
            kvio_error("cachesim: a capacity of %llu bytes holds no block of %u tokens of %s "
                       "(%llu bytes)", (unsigned long long)options->capacity_bytes[i],
                       options->block_tokens, options->model,
                       (unsigned long long)options->block_bytes);
            return KVIO_EXIT_USAGE;
        }
        options->capacities[i] = blocks;
    }
    return -1;
}


enum {
    CACHESIM_HELP = 1, CACHESIM_FORMAT, CACHESIM_CAPACITY, CACHESIM_MODEL, CACHESIM_TP,
    CACHESIM_EVICTION, CACHESIM_BLOCK_TOKENS, CACHESIM_THREADS, CACHESIM_OUTPUT,
    CACHESIM_SKIP_BAD, CACHESIM_JSON, CACHESIM_CSV, CACHESIM_HYBRID, CACHESIM_INDEX,
    CACHESIM_REPLICAS, CACHESIM_ROUTER,
};

static const kvio_cli_option_t cachesim_options[] = {
    {"help", 'h', NULL, CACHESIM_HELP},
    {"format", 0, "a trace format", CACHESIM_FORMAT},
    {"capacity", 0, "a list of capacities", CACHESIM_CAPACITY},
    {"model", 0, "a model preset", CACHESIM_MODEL},
    {"tp", 0, "a count", CACHESIM_TP},
    {"eviction", 0, "a list of policies", CACHESIM_EVICTION},
    {"index", 0, "an index name", CACHESIM_INDEX},
    {"replicas", 0, "a count", CACHESIM_REPLICAS},
    {"router", 0, "a router name", CACHESIM_ROUTER},
    {"block-tokens", 0, "a token count", CACHESIM_BLOCK_TOKENS},
    {"hybrid", 0, NULL, CACHESIM_HYBRID},
    {"threads", 0, "a count", CACHESIM_THREADS},
    {"output", 'o', "a file", CACHESIM_OUTPUT},
    {"skip-bad", 0, NULL, CACHESIM_SKIP_BAD},
    {"json", 0, NULL, CACHESIM_JSON},
    {"csv", 0, NULL, CACHESIM_CSV},
    {NULL, 0, NULL, 0},
};

/* A count option's value (1..max) into *value_p; logs and false if bad. */
static bool parse_count_option(const char *flag, const char *value, uint64_t max,
                               uint64_t *value_p)
{
    uint64_t number;
    if (!parse_uint(value, max, &number) || number == 0) {
        kvio_error("cachesim: bad %s '%s' (1 to %llu)", flag, value, (unsigned long long)max);
        return false;
    }
    *value_p = number;
    return true;
}

/* One option or operand into options; false (logged) if bad. */
static bool take_arg(options_t *options, int option, const char *value)
{
    uint64_t number = 0;
    switch (option) {
    case CACHESIM_FORMAT:
        options->format = value;
        return true;
    case CACHESIM_CAPACITY:
        return parse_capacities(value, options);
    case CACHESIM_MODEL:
        options->model = value;
        return true;
    case CACHESIM_TP:
        return parse_count_option("--tp", value, 1024, &options->tensor_parallel);
    case CACHESIM_EVICTION:
        return parse_policies(value, options);
    case CACHESIM_INDEX:
        if (strcmp(value, "hash") == 0 || strcmp(value, "radix") == 0) {
            options->index = value[0] == 'r' ? KVIO_KVCACHE_INDEX_RADIX : KVIO_KVCACHE_INDEX_HASH;
            return true;
        }
        kvio_error("cachesim: bad --index '%s' (hash or radix)", value);
        return false;
    case CACHESIM_BLOCK_TOKENS:
        if (!parse_count_option("--block-tokens", value, UINT32_MAX, &number))
            return false;
        options->block_tokens = (uint32_t)number;
        return true;
    case CACHESIM_REPLICAS:
        if (!parse_count_option("--replicas", value, 4096, &number))
            return false;
        options->replicas = (uint32_t)number;
        return true;
    case CACHESIM_ROUTER:
        options->router_given = true;
        if (strcmp(value, "round_robin") == 0 || strcmp(value, "prefix_affinity") == 0) {
            options->router = value[0] == 'p' ? KVIO_CACHESIM_PREFIX_AFFINITY
                                              : KVIO_CACHESIM_ROUND_ROBIN;
            return true;
        }
        kvio_error("cachesim: bad --router '%s' (round_robin or prefix_affinity)", value);
        return false;
    case CACHESIM_THREADS:
        if (!parse_count_option("--threads", value, 64, &number))
            return false;
        options->threads = (unsigned)number;
        return true;
    case CACHESIM_OUTPUT:
        options->output_path = value;
        return true;
    case CACHESIM_SKIP_BAD:
        options->skip_bad = true;
        return true;
    case CACHESIM_HYBRID:
        options->hybrid = true;
        return true;
    case CACHESIM_JSON:
    case CACHESIM_CSV:
        options->output = option == CACHESIM_JSON ? OUTPUT_JSON : OUTPUT_CSV;
        return true;
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one("kvio cachesim", "trace", &options->trace_path, value) ==
               KVIO_EXIT_OK;
    default:
        return false;
    }
}

/* Returns -1 to go on, else an exit status. */
static int parse_args(int argc, char **argv, options_t *options)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio cachesim", argc, argv, cachesim_options);
    const char *value;
    int option;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        if (option == CACHESIM_HELP) {
            print_help(stdout);
            return KVIO_EXIT_OK;
        }
        if (!take_arg(options, option, value))
            return KVIO_EXIT_USAGE;
    }
    if (options->trace_path == NULL) {
        kvio_error("cachesim: no trace given (see kvio cachesim --help)");
        return KVIO_EXIT_USAGE;
    }
    if (options->router_given && options->replicas == 0) {
        kvio_error("cachesim: --router routes a fleet: give --replicas N");
        return KVIO_EXIT_USAGE;
    }
    if (options->router == KVIO_CACHESIM_PREFIX_AFFINITY &&
        options->index == KVIO_KVCACHE_INDEX_RADIX) {
        kvio_error("cachesim: --router prefix_affinity takes --index hash (a radix match "
                   "changes the tree it looks in)");
        return KVIO_EXIT_USAGE;
    }
    if (options->hybrid && options->index == KVIO_KVCACHE_INDEX_RADIX) {
        kvio_error("cachesim: --hybrid takes --index hash (vLLM's hybrid groups are its "
                   "block index's)");
        return KVIO_EXIT_USAGE;
    }
    return capacities_in_blocks(options);
}

static const char *index_name(kvio_kvcache_index_t index)
{
    return index == KVIO_KVCACHE_INDEX_RADIX ? "radix" : "hash";
}

static const char *router_name(kvio_cachesim_router_t router)
{
    return router == KVIO_CACHESIM_PREFIX_AFFINITY ? "prefix_affinity" : "round_robin";
}

static void format_capacity(uint64_t capacity, char *text, size_t size)
{
    if (capacity == KVIO_CACHESIM_UNLIMITED)
        snprintf(text, size, "unlimited");
    else
        snprintf(text, size, "%llu", (unsigned long long)capacity);
}

/* The capacity as it was asked for ("40GiB", "1000", "unlimited") of a
 * result's block count: byte capacities are echoed as given. */
static void asked_capacity(const options_t *options, uint64_t blocks, char *text, size_t size)
{
    for (size_t i = 0; i < options->num_capacities; i++) {
        if (options->capacities[i] != blocks || options->capacity_bytes[i] == 0)
            continue;
        kvio_format_size(options->capacity_bytes[i], text, size);
        return;
    }
    format_capacity(blocks, text, size);
}

/* What the replay read: requests and skipped bad lines. */
typedef struct trace_counts {
    uint64_t requests;
    uint64_t skipped_lines;
} trace_counts_t;

/* A result's row: hit rates and counts. */
static json_t *result_json(const options_t *options, const kvio_cachesim_result_t *result,
                           uint64_t capacity_blocks)
{
    json_t *row = json_object();
    char text[32];
    char asked[32];
    asked_capacity(options, capacity_blocks, asked, sizeof(asked));
    format_capacity(result->capacity_blocks, text, sizeof(text));
    json_object_set_new(row, "eviction", json_string(result->policy));
    json_object_set_new(row, "capacity", json_string(asked));
    json_object_set_new(row, "capacity_blocks",
                        result->capacity_blocks == KVIO_CACHESIM_UNLIMITED
                            ? json_string(text)
                            : json_integer((json_int_t)result->capacity_blocks));
    json_object_set_new(row, "block_hit_rate", json_real(result->block_hit_rate));
    json_object_set_new(row, "token_hit_rate", json_real(result->token_hit_rate));
    json_object_set_new(row, "hit_blocks", json_integer((json_int_t)result->hit_blocks));
    json_object_set_new(row, "blocks", json_integer((json_int_t)result->blocks));
    json_object_set_new(row, "hit_tokens", json_integer((json_int_t)result->hit_tokens));
    json_object_set_new(row, "tokens", json_integer((json_int_t)result->tokens));
    json_object_set_new(row, "evictions", json_integer((json_int_t)result->evictions));
    return row;
}

/* globals: with --replicas, the shared store's result beside each local one
 * (NULL otherwise). */
static int write_json(FILE *out, const options_t *options, const trace_counts_t *counts,
                      const kvio_cachesim_t *sim, const kvio_cachesim_result_t *results,
                      const kvio_cachesim_result_t *globals, size_t num_results)
{
    json_t *root = json_object(), *config = json_object(), *capacities = json_array();
    json_t *policies = json_array(), *rows = json_array(), *trace_info = json_object();
    for (size_t i = 0; i < options->num_capacities; i++) {
        char text[32];
        format_capacity(options->capacities[i], text, sizeof(text));
        json_array_append_new(capacities, options->capacities[i] == KVIO_CACHESIM_UNLIMITED
                                              ? json_string(text)
                                              : json_integer((json_int_t)options->capacities[i]));
    }
    for (size_t i = 0; i < options->num_policies; i++)
        json_array_append_new(policies, json_string(options->policies[i]));
    json_object_set_new(config, "trace", json_string(options->trace_path));
    json_object_set_new(config, "format", json_string(options->format));
    json_object_set_new(config, "block_tokens", json_integer(options->block_tokens));
    json_object_set_new(config, "index", json_string(index_name(options->index)));
    if (options->replicas > 0) {
        json_object_set_new(config, "replicas", json_integer(options->replicas));
        json_object_set_new(config, "router", json_string(router_name(options->router)));
    }
    if (options->model != NULL) {
        json_object_set_new(config, "model", json_string(options->model));
        json_object_set_new(config, "kv_bytes_per_block",
                            json_integer((json_int_t)options->block_bytes));
    }
    json_object_set_new(config, "skip_bad", json_boolean(options->skip_bad));
    if (options->hybrid)
        json_object_set_new(config, "hybrid_window_tokens", json_integer(options->window));
    json_object_set_new(config, "capacities", capacities);
    json_object_set_new(config, "evictions", policies);
    json_object_set_new(trace_info, "requests", json_integer((json_int_t)counts->requests));
    json_object_set_new(trace_info, "skipped_lines",
                        json_integer((json_int_t)counts->skipped_lines));
    json_object_set_new(trace_info, "unique_blocks",
                        json_integer((json_int_t)kvio_cachesim_num_unique_blocks(sim)));
    for (size_t i = 0; i < num_results; i++) {
        json_t *row = result_json(options, &results[i], results[i].capacity_blocks);
        if (globals != NULL) {
            json_object_set_new(row, "scope", json_string("local"));
            json_array_append_new(rows, row);
            /* The store's row names the replica capacity it was asked as. */
            row = result_json(options, &globals[i], results[i].capacity_blocks);
            json_object_set_new(row, "scope", json_string("global"));
        }
        json_array_append_new(rows, row);
    }
    json_object_set_new(root, "schema_version", json_integer(SCHEMA_VERSION));
    json_object_set_new(root, "kvio_version", json_string(KVIO_VERSION));
    json_object_set_new(root, "host", kvio_host_json());
    json_object_set_new(root, "build", kvio_build_json());
    json_object_set_new(root, "config", config);
    json_object_set_new(root, "trace", trace_info);
    json_object_set_new(root, "results", rows);
    int failed = json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    fputc('\n', out);
    json_decref(root);
    return failed;
}

/* With --replicas: a row per scope (CSV) or local and global side by side
 * with the global token hit rate over the local one (table). */
static void write_fleet_text(FILE *out, const options_t *options,
                             const kvio_cachesim_result_t *results,
                             const kvio_cachesim_result_t *globals, size_t num_results)
{
    if (options->output == OUTPUT_CSV)
        fprintf(out, "eviction,capacity,scope,capacity_blocks,block_hit_rate,token_hit_rate,"
                     "hit_blocks,blocks,hit_tokens,tokens,evictions\n");
    else
        fprintf(out, "%-8s %10s %10s %10s %10s %10s %8s\n", "eviction", "capacity",
                "local_blk", "local_tok", "global_blk", "global_tok", "gain");
    for (size_t i = 0; i < num_results; i++) {
        char asked[32];
        asked_capacity(options, results[i].capacity_blocks, asked, sizeof(asked));
        if (options->output == OUTPUT_CSV) {
            for (int g = 0; g < 2; g++) {
                const kvio_cachesim_result_t *result = g ? &globals[i] : &results[i];
                char capacity[32];
                format_capacity(result->capacity_blocks, capacity, sizeof(capacity));
                fprintf(out, "%s,%s,%s,%s,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu\n", result->policy,
                        asked, g ? "global" : "local", capacity, result->block_hit_rate,
                        result->token_hit_rate, (unsigned long long)result->hit_blocks,
                        (unsigned long long)result->blocks,
                        (unsigned long long)result->hit_tokens,
                        (unsigned long long)result->tokens,
                        (unsigned long long)result->evictions);
            }
            continue;
        }
        char gain[32] = "-";
        if (results[i].token_hit_rate > 0)
            snprintf(gain, sizeof(gain), "%.3f",
                     globals[i].token_hit_rate / results[i].token_hit_rate);
        fprintf(out, "%-8s %10s %10.4f %10.4f %10.4f %10.4f %8s\n", results[i].policy, asked,
                results[i].block_hit_rate, results[i].token_hit_rate, globals[i].block_hit_rate,
                globals[i].token_hit_rate, gain);
    }
}

static void write_text(FILE *out, const options_t *options, const trace_counts_t *counts,
                       const kvio_cachesim_t *sim, const kvio_cachesim_result_t *results,
                       const kvio_cachesim_result_t *globals, size_t num_results)
{
    if (globals != NULL && options->output != OUTPUT_CSV)
        fprintf(out, "%s: requests=%llu skipped=%llu unique_blocks=%zu block_tokens=%u "
                     "index=%s replicas=%u router=%s\n",
                options->trace_path, (unsigned long long)counts->requests,
                (unsigned long long)counts->skipped_lines, kvio_cachesim_num_unique_blocks(sim),
                options->block_tokens, index_name(options->index), options->replicas,
                router_name(options->router));
    if (globals != NULL) {
        write_fleet_text(out, options, results, globals, num_results);
        return;
    }
    if (options->output == OUTPUT_CSV) {
        fprintf(out, "eviction,capacity,capacity_blocks,block_hit_rate,token_hit_rate,hit_blocks,"
                     "blocks,hit_tokens,tokens,evictions\n");
    } else {
        fprintf(out, "%s: requests=%llu skipped=%llu unique_blocks=%zu block_tokens=%u "
                     "index=%s\n",
                options->trace_path, (unsigned long long)counts->requests,
                (unsigned long long)counts->skipped_lines, kvio_cachesim_num_unique_blocks(sim),
                options->block_tokens, index_name(options->index));
        fprintf(out, "%-8s %10s %15s %10s %10s %12s\n", "eviction", "capacity",
                "capacity_blocks", "block_hit", "token_hit", "evictions");
    }
    for (size_t i = 0; i < num_results; i++) {
        const kvio_cachesim_result_t *result = &results[i];
        char capacity[32], asked[32];
        format_capacity(result->capacity_blocks, capacity, sizeof(capacity));
        asked_capacity(options, result->capacity_blocks, asked, sizeof(asked));
        if (options->output == OUTPUT_CSV)
            fprintf(out, "%s,%s,%s,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu\n", result->policy, asked,
                    capacity, result->block_hit_rate, result->token_hit_rate,
                    (unsigned long long)result->hit_blocks, (unsigned long long)result->blocks,
                    (unsigned long long)result->hit_tokens, (unsigned long long)result->tokens,
                    (unsigned long long)result->evictions);
        else
            fprintf(out, "%-8s %10s %15s %10.4f %10.4f %12llu\n", result->policy, asked,
                    capacity, result->block_hit_rate, result->token_hit_rate,
                    (unsigned long long)result->evictions);
    }
}

/* Opens the trace as a stream: --format names a format whose requests carry
 * block ids; ids cover --block-tokens tokens each; bad lines fail or, with
 * --skip-bad, are skipped and counted. Errors are logged. */
static kvio_status_t open_trace(const options_t *options, kvio_stream_t **stream_p)
{
    kvio_trace_format_t format;
    if (kvio_trace_format_find(options->format, &format) != KVIO_OK ||
        (format != KVIO_TRACE_AUTO && format != KVIO_TRACE_MOONCAKE &&
         format != KVIO_TRACE_KVIO && format != KVIO_TRACE_CONVERSATION)) {
        kvio_error("cachesim: trace format '%s' has no block ids (use mooncake, kvio, "
                   "conversation or auto)",
                   options->format);
        return KVIO_ERR_INVALID;
    }
    kvio_stream_trace_config_t trace_options = {0};
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_status_t status = kvio_config_defaults(kvio_stream_trace_options, &trace_options,
                                                error, sizeof(error));
    if (status == KVIO_OK) {
        trace_options.block_tokens = options->block_tokens;
        trace_options.skip_bad = options->skip_bad;
        status = kvio_stream_open_trace(options->trace_path, format, &trace_options, stream_p,
                                        error, sizeof(error));
    }
    if (status != KVIO_OK)
        kvio_error("%s", error[0] ? error : kvio_strerror(status));
    kvio_config_free(kvio_stream_trace_options, &trace_options);
    return status;
}

/* A request cachesim can replay: block ids of --block-tokens tokens each (a
 * kvio line may carry segments instead, or ids of another size). Logs why
 * not. */
static bool replayable(const options_t *options, const kvio_request_t *request)
{
    if (request->num_trace_hash_ids == 0 && request->num_segments > 0)
        kvio_error("%s: this trace has no prefix hashes (request %llu gives lengths or "
                   "segments, as an Azure or BurstGPT trace or a kvio export of a synthetic "
                   "stream does); cachesim replays hash_ids: kvio stream --format mooncake "
                   "turns segments into them, and kvio run replays any trace",
                   options->trace_path, (unsigned long long)request->id);
    else if (request->num_trace_hash_ids > 0 &&
             request->trace_block_tokens != options->block_tokens)
        kvio_error("%s: request %llu's ids cover %u tokens each, not --block-tokens %u",
                   options->trace_path, (unsigned long long)request->id,
                   request->trace_block_tokens, options->block_tokens);
    else
        return true;
    return false;
}

/* Adds a request's block ids; a salted request's ids are its salt's own
 * (XORed with it into *scratch_p), so no block matches across salts. */
static kvio_status_t add_request(kvio_cachesim_t *sim, const kvio_request_t *request,
                                 uint64_t **scratch_p, size_t *capacity_p)
{
    const uint64_t *ids = request->trace_hash_ids;
    size_t count = request->num_trace_hash_ids;
    if (request->cache_salt != 0) {
        if (count > *capacity_p) {
            uint64_t *bigger = realloc(*scratch_p, count * sizeof(uint64_t));
            if (bigger == NULL)
                return KVIO_ERR_NOMEM;
            *scratch_p = bigger;
            *capacity_p = count;
        }
        for (size_t i = 0; i < count; i++)
            (*scratch_p)[i] = ids[i] ^ request->cache_salt;
        ids = *scratch_p;
    }
    return kvio_cachesim_add_request(sim, ids, count, request->input_tokens);
}

/* Bytes per unique block of one cache in a replay: its residency byte and
 * the most any policy keeps (lfu's heap slot, position, count and stamp). */
#define CACHE_BYTES_PER_BLOCK 24u

/* prefix_affinity keeps every replica's cache at once: refused, with the
 * numbers, when they need more memory than is available. */
static bool fleet_fits(const options_t *options, const kvio_cachesim_t *sim)
{
    uint64_t available = 0;
    if (options->replicas == 0 || options->router != KVIO_CACHESIM_PREFIX_AFFINITY ||
        kvio_mem_available(&available, NULL, 0) != KVIO_OK)
        return true;
    uint64_t unique = kvio_cachesim_num_unique_blocks(sim);
    uint64_t need = (uint64_t)options->replicas * unique * CACHE_BYTES_PER_BLOCK;
    if (need <= available)
        return true;
    char need_text[32], available_text[32];
    kvio_format_size(need, need_text, sizeof(need_text));
    kvio_format_size(available, available_text, sizeof(available_text));
    kvio_error("cachesim: --router prefix_affinity keeps %u replicas' caches of %llu unique "
               "blocks at once (%u bytes each): %s, and %s is available; fewer replicas or "
               "round_robin (one cache at a time)",
               options->replicas, (unsigned long long)unique, CACHE_BYTES_PER_BLOCK, need_text,
               available_text);
    return false;
}

int kvio_cmd_cachesim(int argc, char **argv)
{
    options_t options = {.format = "mooncake", .block_tokens = 512};
    kvio_stream_t *stream = NULL;
    trace_counts_t counts = {0};
    kvio_cachesim_t *sim = NULL;
    kvio_cachesim_result_t *results = NULL;
    kvio_cachesim_result_t *globals = NULL; /* --replicas: the shared store's */
    FILE *out = stdout;
    uint64_t *salted = NULL; /* a salted request's ids */
    size_t salted_capacity = 0;
    int exit_status = parse_args(argc, argv, &options);
    if (exit_status >= 0)
        goto cleanup;
    exit_status = KVIO_EXIT_USAGE;
    if (options.num_capacities == 0) {
        memcpy(options.capacities, default_capacities, sizeof(default_capacities));
        options.num_capacities = sizeof(default_capacities) / sizeof(default_capacities[0]);
    }
    if (options.num_policies == 0)
        parse_policies("lru", &options);
    if (options.threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        options.threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (unsigned)cpus;
    }

    kvio_status_t status = open_trace(&options, &stream);
    if (status != KVIO_OK) {
        exit_status = kvio_cli_exit_status(status);
        goto cleanup;
    }
    status = kvio_cachesim_create(options.block_tokens, &sim);
    if (status == KVIO_OK && options.hybrid)
        status = kvio_cachesim_set_window(sim, options.window);
    if (status == KVIO_OK)
        status = kvio_cachesim_set_index(sim, options.index);
    for (;;) {
        const kvio_request_t *request = NULL;
        if (status == KVIO_OK)
            status = kvio_stream_next(stream, &request);
        if (status != KVIO_OK || request == NULL)
            break;
        if (!replayable(&options, request)) {
            exit_status = KVIO_EXIT_USAGE;
            goto cleanup;
        }
        status = add_request(sim, request, &salted, &salted_capacity);
        counts.requests++;
    }
    counts.skipped_lines = kvio_stream_skipped_lines(stream);
    size_t num_results = options.num_policies * options.num_capacities;
    results = status == KVIO_OK ? calloc(num_results, sizeof(*results)) : NULL;
    if (status == KVIO_OK && results == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK && !fleet_fits(&options, sim)) {
        exit_status = KVIO_EXIT_USAGE;
        goto cleanup;
    }
    if (status == KVIO_OK && options.replicas > 0) {
        globals = calloc(num_results, sizeof(*globals));
        status = globals == NULL ? KVIO_ERR_NOMEM : KVIO_OK;
        for (size_t i = 0; i < num_results && status == KVIO_OK; i++)
            status = kvio_cachesim_run_fleet(sim, options.policies[i / options.num_capacities],
                                             options.capacities[i % options.num_capacities],
                                             options.replicas, options.router, &results[i],
                                             &globals[i]);
    } else if (status == KVIO_OK) {
        status = kvio_cachesim_sweep(sim, options.policies, options.num_policies,
                                     options.capacities, options.num_capacities, options.threads,
                                     results);
    }
    if (status != KVIO_OK) {
        kvio_error("cachesim: %s", kvio_strerror(status));
        exit_status = KVIO_EXIT_FAILED;
        goto cleanup;
    }
    if (options.output_path != NULL && strcmp(options.output_path, "-") != 0) {
        out = fopen(options.output_path, "w");
        if (out == NULL) {
            kvio_error("%s: %s", options.output_path, strerror(errno));
            out = stdout;
            exit_status = KVIO_EXIT_FAILED;
            goto cleanup;
        }
    }
    if (options.output == OUTPUT_JSON)
        write_json(out, &options, &counts, sim, results, globals, num_results);
    else
        write_text(out, &options, &counts, sim, results, globals, num_results);
    exit_status = fflush(out) == 0 && !ferror(out) ? KVIO_EXIT_OK : KVIO_EXIT_FAILED;
    if (exit_status != KVIO_EXIT_OK)
        kvio_error("cachesim: writing the output failed");

cleanup:
    if (out != stdout)
        fclose(out);
    free(results);
    free(globals);
    free(salted);
    kvio_cachesim_destroy(sim);
    kvio_stream_destroy(stream);
    free(options.policy_text);
    return exit_status;
}
