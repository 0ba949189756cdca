/* kvio serve: the emulate run with its requests from an OpenAI-compatible
 * HTTP endpoint instead of its stream, until SIGINT or SIGTERM (or
 * --duration); then the results as for any run. A thin shell: the front
 * end (serve/), the HTTP server and KV events (http/) and kvio_run (run/). */
#include "cli/cli.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kvio/format.h"
#include "kvio/frontend.h"
#include "kvio/http.h"
#include "kvio/run.h"

#define MAX_OVERRIDES 256
/* vLLM's max_model_len when the KV cache holds that much (Llama 3's). */
#define DEFAULT_MAX_MODEL_LEN 8192
#define DEFAULT_PORT 8000
/* How long answers still being sent get once the engine has stopped. */
#define ANSWER_GRACE_NS 5000000000ll

typedef struct serve_args {
    const char *source;
    const char *overrides[MAX_OVERRIDES + 1];
    size_t num_overrides;
    const char *output_dir;
    bool force;
    bool help;
    const char *listen;
    int64_t duration_ns;
    bool abort_in_flight;
    const char *kv_events;
    const char *kv_events_topic;
    const char *model_name;
    long max_model_len;
    const char *chat_template;
    const char *tokenizer;
    long max_connections;
    long max_connections_per_ip;
    uint64_t max_body;
    uint64_t max_bodies;
    int64_t header_timeout_ns;
    int64_t idle_timeout_ns;
    bool record_tokens;
    int argc;    /* the command as typed (provenance) */
    char **argv;
} serve_args_t;

enum {
    SERVE_HELP = 1, SERVE_SET, SERVE_OUTPUT, SERVE_FORCE, SERVE_LISTEN, SERVE_DURATION,
    SERVE_DRAIN, SERVE_ABORT, SERVE_KV_EVENTS, SERVE_KV_TOPIC, SERVE_MODEL_NAME,
    SERVE_MAX_MODEL_LEN, SERVE_TEMPLATE, SERVE_MAX_CONNECTIONS, SERVE_MAX_BODY,
    SERVE_RECORD_TOKENS, SERVE_TOKENIZER, SERVE_MAX_PER_IP, SERVE_MAX_BODIES,
    SERVE_HEADER_TIMEOUT, SERVE_IDLE_TIMEOUT,
};

static const kvio_cli_option_t serve_options[] = {
    {"help", 'h', NULL, SERVE_HELP},
    {"set", 0, "KEY=VALUE", SERVE_SET},
    {"output", 'o', "a directory", SERVE_OUTPUT},
    {"force", 0, NULL, SERVE_FORCE},
    {"listen", 0, "HOST:PORT[-PORT]", SERVE_LISTEN},
    {"duration", 0, "a duration", SERVE_DURATION},
    {"drain", 0, NULL, SERVE_DRAIN},
    {"abort", 0, NULL, SERVE_ABORT},
    {"kv-events", 0, "an endpoint", SERVE_KV_EVENTS},
    {"kv-events-topic", 0, "a topic", SERVE_KV_TOPIC},
    {"served-model-name", 0, "a name", SERVE_MODEL_NAME},
    {"max-model-len", 0, "tokens", SERVE_MAX_MODEL_LEN},
    {"chat-template", 0, "chatml, llama3 or harmony", SERVE_TEMPLATE},
    {"tokenizer", 0, "a tokenizer.json or .tiktoken file", SERVE_TOKENIZER},
    {"max-connections", 0, "a count", SERVE_MAX_CONNECTIONS},
    {"max-connections-per-ip", 0, "a count", SERVE_MAX_PER_IP},
    {"max-body", 0, "a size", SERVE_MAX_BODY},
    {"max-bodies", 0, "a size", SERVE_MAX_BODIES},
    {"header-timeout", 0, "a duration", SERVE_HEADER_TIMEOUT},
    {"idle-timeout", 0, "a duration", SERVE_IDLE_TIMEOUT},
    {"record-tokens", 0, NULL, SERVE_RECORD_TOKENS},
    {NULL, 0, NULL, 0},
};

static int positive(const char *option, const char *value, long *value_p)
{
    char *end = NULL;
    long number = strtol(value, &end, 10);
    if (end == value || *end != '\0' || number < 1 || number > 100000000) {
        fprintf(stderr, "kvio serve: %s takes a positive count, got '%s'\n", option, value);
        return KVIO_EXIT_USAGE;
    }
    *value_p = number;
    return KVIO_EXIT_OK;
}

static int positive_size(const char *option, const char *value, uint64_t *bytes_p)
{
    char error[256] = "";
    if (kvio_parse_size(value, bytes_p, error, sizeof(error)) != KVIO_OK || *bytes_p == 0) {
        fprintf(stderr, "kvio serve: %s: %s\n", option, error[0] ? error : "must be positive");
        return KVIO_EXIT_USAGE;
    }
    return KVIO_EXIT_OK;
}

/* A duration from 1 ms to a day (a timeout). */
static int timeout_arg(const char *option, const char *value, int64_t *ns_p)
{
    char error[256] = "";
    if (kvio_parse_duration(value, ns_p, error, sizeof(error)) != KVIO_OK ||
        *ns_p < 1000000 || *ns_p > 86400000000000ll) {
        fprintf(stderr, "kvio serve: %s: %s\n", option,
                error[0] ? error : "takes a duration from 1ms to 24h");
        return KVIO_EXIT_USAGE;
    }
    return KVIO_EXIT_OK;
}

static int take_serve_arg(int option, const char *value, serve_args_t *args)
{
    char error[256];
    switch (option) {
    case SERVE_HELP:
        args->help = true;
        return KVIO_EXIT_OK;
    case SERVE_SET:
        return kvio_cli_append("kvio serve", "--set options", args->overrides,
                               &args->num_overrides, MAX_OVERRIDES, value);
    case SERVE_OUTPUT:
        args->output_dir = value;
        return KVIO_EXIT_OK;
    case SERVE_FORCE:
        args->force = true;
        return KVIO_EXIT_OK;
    case SERVE_LISTEN:
        args->listen = value;
        return KVIO_EXIT_OK;
    case SERVE_DURATION:
        if (kvio_parse_duration(value, &args->duration_ns, error, sizeof(error)) != KVIO_OK ||
            args->duration_ns <= 0) {
            fprintf(stderr, "kvio serve: --duration: %s\n",
                    args->duration_ns <= 0 && error[0] == '\0' ? "must be positive" : error);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case SERVE_DRAIN:
        args->abort_in_flight = false;
        return KVIO_EXIT_OK;
    case SERVE_ABORT:
        args->abort_in_flight = true;
        return KVIO_EXIT_OK;
    case SERVE_KV_EVENTS:
        args->kv_events = value;
        return KVIO_EXIT_OK;
    case SERVE_KV_TOPIC:
        args->kv_events_topic = value;
        return KVIO_EXIT_OK;
    case SERVE_MODEL_NAME:
        if (strpbrk(value, "\"\\\n") != NULL) {
            fprintf(stderr, "kvio serve: --served-model-name: no quotes, backslashes or "
                    "newlines (it is a Prometheus label)\n");
            return KVIO_EXIT_USAGE;
        }
        args->model_name = value;
        return KVIO_EXIT_OK;
    case SERVE_MAX_MODEL_LEN:
        return positive("--max-model-len", value, &args->max_model_len);
    case SERVE_TEMPLATE:
        args->chat_template = value;
        return KVIO_EXIT_OK;
    case SERVE_TOKENIZER:
        args->tokenizer = value;
        return KVIO_EXIT_OK;
    case SERVE_MAX_CONNECTIONS:
        return positive("--max-connections", value, &args->max_connections);
    case SERVE_MAX_PER_IP:
        return positive("--max-connections-per-ip", value, &args->max_connections_per_ip);
    case SERVE_MAX_BODY:
        return positive_size("--max-body", value, &args->max_body);
    case SERVE_MAX_BODIES:
        return positive_size("--max-bodies", value, &args->max_bodies);
    case SERVE_HEADER_TIMEOUT:
        return timeout_arg("--header-timeout", value, &args->header_timeout_ns);
    case SERVE_IDLE_TIMEOUT:
        return timeout_arg("--idle-timeout", value, &args->idle_timeout_ns);
    case SERVE_RECORD_TOKENS:
        args->record_tokens = true;
        return KVIO_EXIT_OK;
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one("kvio serve", "workload", &args->source, value);
    default:
        return KVIO_EXIT_USAGE;
    }
}

static void print_help(void)
{
    printf("usage: kvio serve [FILE|PRESET] [--listen HOST:PORT[-PORT]] [--set KEY=VALUE]...\n"
           "                  [-o DIR] [--force] [--duration D] [--drain|--abort]\n"
           "                  [--kv-events ENDPOINT] [--kv-events-topic T]\n"
           "                  [--served-model-name NAME] [--max-model-len N]\n"
           "                  [--chat-template chatml|llama3|harmony] [--tokenizer FILE]\n"
           "                  [--max-connections N] [--max-connections-per-ip N]\n"
           "                  [--max-body SIZE] [--max-bodies SIZE] [--header-timeout D]\n"
           "                  [--idle-timeout D] [--record-tokens]\n\n"
           "Serves the workload's engine (mode emulate: real time, real KV memory)\n"
           "behind an OpenAI-compatible endpoint, as vLLM's server does:\n"
           "POST /v1/completions and /v1/chat/completions (streamed or not),\n"
           "GET /v1/models, /health, /metrics (vLLM's names), /version, /is_paused,\n"
           "POST /pause?mode=abort|wait|keep, /resume and /reset_prefix_cache.\n"
           "Default workload: the endpoint preset (one Llama-3-8B serve rank, 2 GiB of\n"
           "KV). Prompts go through the model's tokenizer (--tokenizer) or kvio's\n"
           "approximate one; the output is deterministic text of as many tokens as\n"
           "the engine decides (max_tokens with ignore_eos, else drawn from\n"
           "stream.output_tokens).\n\n"
           "--listen     one port: kvio's router (serve.router) picks the serve rank;\n"
           "             a range of ranks.serve ports (8100-8103): one per rank, for\n"
           "             an outside router (default 127.0.0.1:%d; port 0 picks a\n"
           "             free one, printed)\n"
           "--duration   stop by itself after this long (else SIGINT or SIGTERM)\n"
           "--drain      on stop, finish the requests in flight (default);\n"
           "--abort      end them instead\n"
           "--kv-events  publish vLLM's KV events (BlockStored, BlockRemoved,\n"
           "             AllBlocksCleared) on a ZMQ PUB socket, e.g. tcp://*:5557\n"
           "             (rank r at port + r)\n"
           "--tokenizer  the model's tokenizer.json (byte-level BPE) or tiktoken\n"
           "             rank file (o200k_base.tiktoken, cl100k_base.tiktoken): prompts\n"
           "             become the tokens the real server would prefill; the chat\n"
           "             template defaults to the one whose special tokens it has\n"
           "--max-connections  connections served at once (default 1024); past them\n"
           "             completions get 503 with Retry-After (/health and the other\n"
           "             endpoints still answer) and a connection has 0.1 s to start its\n"
           "             request; --max-connections-per-ip bounds one address's\n"
           "             (default: none; a load generator is one address)\n"
           "--max-body   one request body (default 16MiB; larger: 413);\n"
           "--max-bodies the bodies being read together (default 256MiB; past it 503)\n"
           "--header-timeout  a connection's time to send a request's headers, from\n"
           "             its start or its last answer (default 10s); --idle-timeout:\n"
           "             a connection where nothing moves is closed (default 60s)\n"
           "--record-tokens  write tokens.csv: every engine step of every request\n"
           "             (id, tokens, time_s), to compare a client's view with it\n\n"
           "The results directory is written when it stops: summary.json\n"
           "(metrics.server holds the HTTP counts), requests.csv, iterations.csv and\n"
           "trace.jsonl, every request as a hash-id trace that kvio run replays\n"
           "(stream.trace.path). A second SIGINT stops at once (complete: false).\n"
           "With a trainer (ranks.train: 1, the coupled run on the local runtime)\n"
           "model updates flow while it serves; the run lasts the workload's\n"
           "duration (--duration sets it), and a signal before then ends it as\n"
           "interrupted.\n",
           DEFAULT_PORT);
}

/* HOST:PORT or HOST:FIRST-LAST into host (a copy), first port and count. */
static int parse_listen(const char *listen, char **host_p, uint16_t *first_p, uint32_t *count_p)
{
    const char *colon = strrchr(listen, ':');
    char *end = NULL;
    long first = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
    long last = first;
    if (end != NULL && *end == '-')
        last = strtol(end + 1, &end, 10);
    if (colon == NULL || colon == listen || end == NULL || *end != '\0' || first < 0 ||
        first > 65535 || last < first || last > 65535 || (first == 0 && last != 0)) {
        fprintf(stderr, "kvio serve: --listen takes HOST:PORT or HOST:FIRST-LAST (127.0.0.1:8000, "
                "0.0.0.0:8100-8103), got '%s'\n", listen);
        return KVIO_EXIT_USAGE;
    }
    *host_p = strndup(listen, (size_t)(colon - listen));
    *first_p = (uint16_t)first;
    *count_p = (uint32_t)(last - first + 1);
    return *host_p != NULL ? KVIO_EXIT_OK : KVIO_EXIT_FAILED;
}

/* ---------- stopping ---------- */

typedef struct watch {
    volatile sig_atomic_t *signals;  /* SIGINT/SIGTERM seen (kvio_cli_stop_on_signals) */
    volatile sig_atomic_t hard_stop; /* the run's stop: a second signal */
    kvio_frontend_t *frontend;
    kvio_http_server_t *server;
    int64_t duration_ns;
    bool abort_in_flight;
    bool coupled;            /* a trainer runs to the duration unless stopped */
    atomic_bool run_over;
} watch_t;

/* Closes the front end on the first signal or at the duration (the run then
 * ends once the requests in flight are done); a second signal stops the
 * run at once. With a trainer, a signal before the duration stops the run
 * (interrupted) once the requests in flight are done. */
static void *watch_main(void *context)
{
    watch_t *watch = context;
    bool closed = false;
    while (!atomic_load(&watch->run_over)) {
        bool due = watch->duration_ns > 0 && kvio_frontend_ready(watch->frontend) &&
                   kvio_frontend_now_ns(watch->frontend) >= watch->duration_ns;
        if (!closed && (*watch->signals > 0 || due)) {
            closed = true;
            kvio_http_server_quiesce(watch->server);
            kvio_frontend_close(watch->frontend, watch->abort_in_flight);
            fprintf(stderr, "kvio serve: stopping (%s the requests in flight)\n",
                    watch->abort_in_flight ? "aborting" : "finishing");
        }
        if (*watch->signals > 1 ||
            (watch->coupled && *watch->signals > 0 && kvio_http_server_busy(watch->server) == 0))
            watch->hard_stop = 1;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 10000000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static json_t *server_json(void *context)
{
    return kvio_http_server_stats(context);
}

/* ---------- the command ---------- */

typedef struct serve_parts {
    kvio_frontend_t *frontend;
    kvio_kv_events_t *events;
    kvio_http_server_t *server;
    kvio_tokenizer_t *tokenizer;
    char *host;
} serve_parts_t;

/* The model's context: --max-model-len, or vLLM's 8192 where the KV cache
 * holds it; more than one rank's KV cache holds is refused. */
static int context_length(const serve_args_t *args, const kvio_workload_t *workload,
                          uint32_t *max_model_len_p)
{
    kvio_model_t model = workload->model;
    kvio_gpu_t gpu = workload->gpu;
    uint32_t blocks = 0;
    char error[KVIO_CLI_ERROR_MAX];
    kvio_status_t status = kvio_model_resolve(&model, error, sizeof(error));
    if (status == KVIO_OK)
        status = kvio_gpu_resolve(&gpu, error, sizeof(error));
    if (status == KVIO_OK)
        status = kvio_serve_kv_blocks(&workload->serve, &model, &gpu,
                                      kvio_cost_gpus(&workload->cost), &blocks, error,
                                      sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        return kvio_cli_exit_status(status);
    }
    uint64_t capacity = (uint64_t)blocks * (uint64_t)workload->serve.kvcache.block_size;
    uint64_t wanted = args->max_model_len > 0 ? (uint64_t)args->max_model_len
                                              : DEFAULT_MAX_MODEL_LEN;
    if (args->max_model_len <= 0 && wanted > capacity)
        wanted = capacity;
    if (wanted > capacity || wanted < 2) {
        fprintf(stderr, "kvio serve: --max-model-len %llu: a serve rank's KV cache holds %llu "
                "tokens (%u blocks of %lld); raise serve.kvcache.capacity or lower it\n",
                (unsigned long long)wanted, (unsigned long long)capacity, blocks,
                (long long)workload->serve.kvcache.block_size);
        return KVIO_EXIT_USAGE;
    }
    *max_model_len_p = (uint32_t)wanted;
    return KVIO_EXIT_OK;
}

/* Descriptors for twice --max-connections per port (the server takes as
 * many again past the limit to answer 503 and /health) and the run's own:
 * the soft limit is raised to the hard one, and a hard one too low is said
 * up front (past it connections wait unaccepted). */
static void raise_descriptor_limit(uint32_t max_connections, uint32_t num_ports)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return;
    if (limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    uint64_t needed = 2ull * max_connections * num_ports + 256;
    if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed)
        fprintf(stderr, "kvio serve: warning: --max-connections %u on %u port%s needs about %llu "
                "descriptors, but the limit is %llu (ulimit -n): connections past it wait\n",
                max_connections, num_ports, num_ports == 1 ? "" : "s",
                (unsigned long long)needed, (unsigned long long)limit.rlim_max);
}

/* The front end, the KV events and the HTTP server, every port bound. */
static int start_parts(const serve_args_t *args, const kvio_workload_t *workload,
                       uint32_t max_model_len, serve_parts_t *parts)
{
    char error[KVIO_CLI_ERROR_MAX] = "";
    uint16_t first_port = DEFAULT_PORT;
    uint32_t num_ports = 1;
    int exit_status = parse_listen(args->listen != NULL ? args->listen : "127.0.0.1:8000",
                                   &parts->host, &first_port, &num_ports);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    kvio_chat_template_t chat_template = KVIO_CHAT_CHATML;
    if (args->chat_template != NULL &&
        kvio_chat_template_find(args->chat_template, &chat_template) != KVIO_OK) {
        fprintf(stderr, "kvio serve: --chat-template: '%s' is none of chatml, llama3, harmony\n",
                args->chat_template);
        return KVIO_EXIT_USAGE;
    }
    if (args->tokenizer != NULL) {
        kvio_status_t loaded = kvio_tokenizer_load(args->tokenizer, &parts->tokenizer);
        if (loaded != KVIO_OK)
            return kvio_cli_exit_status(loaded);
        if (args->chat_template == NULL &&
            kvio_chat_template_for(parts->tokenizer, &chat_template) != KVIO_OK) {
            fprintf(stderr, "kvio serve: the tokenizer %s has the special tokens of no chat "
                    "template kvio knows (chatml, llama3, harmony)\n", args->tokenizer);
            return KVIO_EXIT_USAGE;
        }
        if (kvio_chat_template_check(chat_template, parts->tokenizer) != KVIO_OK)
            return KVIO_EXIT_USAGE;
    }
    uint32_t num_ranks = (uint32_t)workload->ranks.serve;
    kvio_status_t status = KVIO_OK;
    if (args->kv_events != NULL)
        status = kvio_kv_events_create(args->kv_events, args->kv_events_topic, num_ranks,
                                       &parts->events, error, sizeof(error));
    kvio_frontend_params_t frontend = {
        .num_ranks = num_ranks, .block_size = (uint32_t)workload->serve.kvcache.block_size,
        .router = &workload->serve.router, .record_trace = true,
        .events = parts->events != NULL ? kvio_kv_events_sink(parts->events)
                                        : (kvio_kv_event_sink_t){0}};
    if (status == KVIO_OK && kvio_frontend_create(&frontend, &parts->frontend) != KVIO_OK) {
        snprintf(error, sizeof(error), "kvio serve: out of memory");
        status = KVIO_ERR_NOMEM;
    }
    const char *model = args->model_name != NULL ? args->model_name
                        : workload->model.preset != NULL ? workload->model.preset
                                                         : "kvio";
    kvio_http_params_t http = {
        .host = parts->host, .first_port = first_port, .num_ports = num_ports,
        .frontend = parts->frontend, .model_name = model, .model_root = workload->model.preset,
        .max_model_len = max_model_len, .chat_template = chat_template,
        .tokenizer = parts->tokenizer, .output_tokens = &workload->stream.output_tokens, .seed = (uint64_t)workload->seed,
        .max_connections = args->max_connections > 0 ? (uint32_t)args->max_connections : 1024,
        .max_connections_per_ip = (uint32_t)args->max_connections_per_ip,
        .max_body_bytes = args->max_body > 0 ? args->max_body : 16u << 20,
        .max_bodies_bytes = args->max_bodies > 0 ? args->max_bodies : 256u << 20,
        .header_timeout_ns = args->header_timeout_ns > 0 ? args->header_timeout_ns
                                                         : 10000000000ll,
        .idle_timeout_ns = args->idle_timeout_ns > 0 ? args->idle_timeout_ns : 60000000000ll,
        .record_tokens = args->record_tokens};
    raise_descriptor_limit(http.max_connections, num_ports);
    if (status == KVIO_OK)
        status = kvio_http_server_start(&http, &parts->server, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        return kvio_cli_exit_status(status);
    }
    for (uint32_t i = 0; i < num_ports; i++)
        fprintf(stderr, "kvio serve: listening on http://%s:%u%s (model %s, max_model_len %u)\n",
                parts->host, (unsigned)kvio_http_server_port(parts->server, i),
                num_ports == 1 ? "" : " (one serve rank)", model, max_model_len);
    return KVIO_EXIT_OK;
}

/* After the run: answers still being sent get a grace period, then the
 * server stops, and the front end goes (aborting what it still holds)
 * before the server is freed. */
static void stop_parts(serve_parts_t *parts)
{
    if (parts->frontend != NULL)
        kvio_frontend_close(parts->frontend, true);
    if (parts->server != NULL) {
        kvio_http_server_quiesce(parts->server);
        for (int64_t waited = 0;
             kvio_http_server_busy(parts->server) > 0 && waited < ANSWER_GRACE_NS;
             waited += 10000000) {
            struct timespec pause = {.tv_sec = 0, .tv_nsec = 10000000};
            nanosleep(&pause, NULL);
        }
        kvio_http_server_stop(parts->server);
    }
    kvio_frontend_destroy(parts->frontend);
    kvio_http_server_destroy(parts->server);
    kvio_kv_events_destroy(parts->events);
    kvio_tokenizer_destroy(parts->tokenizer);
    free(parts->host);
}

static int serve_workload(const serve_args_t *args, kvio_workload_t *workload)
{
    if (workload->mode != KVIO_MODE_EMULATE) {
        fprintf(stderr, "kvio serve: serves in real time (mode: emulate); drop the --set mode\n");
        return KVIO_EXIT_USAGE;
    }
    /* With a trainer the run lasts the workload's duration (the trainer's):
     * the server stops then; --duration sets both. */
    bool coupled = workload->ranks.train > 0;
    if (coupled && args->duration_ns > 0) {
        workload->duration_ns = args->duration_ns;
        workload->duration_given = true;
    }
    int64_t duration_ns = coupled ? workload->duration_ns : args->duration_ns;
    uint32_t max_model_len = 0;
    int exit_status = context_length(args, workload, &max_model_len);
    serve_parts_t parts = {0};
    if (exit_status == KVIO_EXIT_OK)
        exit_status = start_parts(args, workload, max_model_len, &parts);
    if (exit_status != KVIO_EXIT_OK) {
        stop_parts(&parts);
        return exit_status;
    }
    watch_t watch = {.signals = kvio_cli_stop_on_signals(), .frontend = parts.frontend,
                     .server = parts.server, .duration_ns = duration_ns,
                     .abort_in_flight = args->abort_in_flight, .coupled = coupled};
    pthread_t watcher;
    bool watching = pthread_create(&watcher, NULL, watch_main, &watch) == 0;
    kvio_run_options_t options = {
        .output_dir = args->output_dir, .force = args->force,
        .source = args->source != NULL ? args->source : "endpoint", .stop = &watch.hard_stop,
        .frontend = parts.frontend, .frontend_duration_ns = duration_ns,
        .server_json = server_json, .server_context = parts.server,
        .argv = (const char *const *)args->argv, .argc = args->argc,
        .overrides = args->overrides + 1, .num_overrides = args->num_overrides - 1};
    kvio_run_result_t result;
    memset(&result, 0, sizeof(result));
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_status_t status = watching ? kvio_run(workload, &options, &result, error, sizeof(error))
                                    : KVIO_ERR_NOMEM;
    atomic_store(&watch.run_over, true);
    if (watching)
        pthread_join(watcher, NULL);
    if (args->record_tokens && result.results_dir[0] != '\0' &&
        (status == KVIO_OK || status == KVIO_ERR_INTERRUPTED)) {
        char path[1100], write_error[1000];
        snprintf(path, sizeof(path), "%s/tokens.csv", result.results_dir);
        kvio_status_t written = kvio_http_server_write_tokens(parts.server, path, write_error,
                                                              sizeof(write_error));
        if (written != KVIO_OK && status == KVIO_OK) {
            snprintf(error, sizeof(error), "%s", write_error);
            status = written;
        }
    }
    stop_parts(&parts);
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error[0] ? error : kvio_strerror(status));
        return kvio_cli_exit_status(status);
    }
    return KVIO_EXIT_OK;
}

int kvio_cmd_serve(int argc, char **argv)
{
    serve_args_t args = {.argc = argc, .argv = argv};
    /* Real time always: an override the user gives after it wins (and is refused). */
    args.overrides[args.num_overrides++] = "mode=emulate";
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio serve", argc, argv, serve_options);
    const char *value;
    int option, exit_status = KVIO_EXIT_OK;
    while (exit_status == KVIO_EXIT_OK &&
           (option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END)
        exit_status = option == KVIO_CLI_ERROR ? KVIO_EXIT_USAGE
                                               : take_serve_arg(option, value, &args);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args.help) {
        print_help();
        return KVIO_EXIT_OK;
    }
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(args.source != NULL ? args.source : "endpoint",
                                              args.overrides, args.num_overrides, &workload,
                                              error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error);
        return kvio_cli_exit_status(status);
    }
    exit_status = serve_workload(&args, &workload);
    kvio_workload_free(&workload);
    return exit_status;
}
