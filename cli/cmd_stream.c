/* kvio stream: builds the stream of a workload (synthetic or trace) and
 * exports it as JSONL (kvio, lossless; or mooncake, lossy) so that other
 * simulators replay exactly what kvio ran; --stats prints a summary. */
#include "cli/cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvio/array.h"
#include "kvio/hashset.h"
#include "kvio/run.h"
#include "kvio/stream.h"

#define MAX_OVERRIDES 256

typedef struct stream_args {
    const char *source;
    const char *overrides[MAX_OVERRIDES];
    char *owned[MAX_OVERRIDES];  /* overrides built from shortcut options */
    size_t num_overrides, num_owned;
    const char *output;
    kvio_export_format_t format;
    bool stats;
    bool anonymize;
    bool help;
} stream_args_t;

static const char *const usage =
    "usage: kvio stream [WORKLOAD.yaml|PRESET] [--set KEY=VALUE]... [-o|--output FILE]\n"
    "                   [--format kvio|mooncake] [--stats] [--anonymize]\n"
    "                   [--trace FILE [--trace-format F] [--skip-bad] [--strict]\n"
    "                    [--max-tokens N] [--time-scale X] [--start DURATION] [--limit N]]\n\n"
    "Builds the workload's request stream and writes it as JSONL, one request per\n"
    "line (-o - writes to stdout). --format kvio (default) is lossless: importing it\n"
    "(stream.trace.format: kvio) reproduces the stream exactly; mooncake keeps only\n"
    "timestamp, lengths and 512-token block ids. --stats prints request count, mean\n"
    "lengths and duration. --trace FILE reads a trace (kvio, mooncake, azure,\n"
    "burstgpt; detected from the first line) instead; it and the options after it\n"
    "are shortcuts for --set stream.trace.KEY=VALUE, and need no workload.\n"
    "--anonymize numbers the block ids and content ids 1, 2, 3... in the order\n"
    "they first appear (Mooncake's trace does the same): equal stays equal, so the\n"
    "prefix structure is kept, but no id is derived from the text any more (a\n"
    "conversation log's ids are hashes of its tokens: one who guesses a prompt\n"
    "could check it against them).\n";

/* Adds "stream.trace.KEY='VALUE'" (single-quoted YAML, quotes doubled). */
static int add_trace_override(stream_args_t *args, const char *key, const char *value)
{
    if (args->num_overrides == MAX_OVERRIDES) {
        fprintf(stderr, "kvio stream: too many options\n");
        return KVIO_EXIT_USAGE;
    }
    size_t length = strlen(key) + 2 * strlen(value) + 32;
    char *text = malloc(length);
    if (text == NULL)
        return KVIO_EXIT_FAILED;
    size_t used = (size_t)snprintf(text, length, "stream.trace.%s='", key);
    for (const char *c = value; *c; c++) {
        if (*c == '\'')
            text[used++] = '\'';
        text[used++] = *c;
    }
    text[used++] = '\'';
    text[used] = '\0';
    args->owned[args->num_owned++] = text;
    args->overrides[args->num_overrides++] = text;
    return KVIO_EXIT_OK;
}

enum {
    STREAM_HELP = 1, STREAM_SET, STREAM_OUTPUT, STREAM_FORMAT, STREAM_STATS, STREAM_SKIP_BAD,
    STREAM_STRICT, STREAM_TRACE, STREAM_TRACE_FORMAT, STREAM_MAX_TOKENS, STREAM_TIME_SCALE,
    STREAM_START, STREAM_LIMIT, STREAM_ANONYMIZE,
};

static const kvio_cli_option_t stream_options[] = {
    {"help", 'h', NULL, STREAM_HELP},
    {"set", 0, "KEY=VALUE", STREAM_SET},
    {"output", 'o', "a file (- for stdout)", STREAM_OUTPUT},
    {"out", 0, "a file (- for stdout)", STREAM_OUTPUT},
    {"format", 0, "kvio or mooncake", STREAM_FORMAT},
    {"stats", 0, NULL, STREAM_STATS},
    {"anonymize", 0, NULL, STREAM_ANONYMIZE},
    /* Shortcuts for --set stream.trace.KEY=VALUE (trace_keys). */
    {"skip-bad", 0, NULL, STREAM_SKIP_BAD},
    {"strict", 0, NULL, STREAM_STRICT},
    {"trace", 0, "a file", STREAM_TRACE},
    {"trace-format", 0, "a trace format", STREAM_TRACE_FORMAT},
    {"max-tokens", 0, "a token count", STREAM_MAX_TOKENS},
    {"time-scale", 0, "a factor", STREAM_TIME_SCALE},
    {"start", 0, "a duration", STREAM_START},
    {"limit", 0, "a count", STREAM_LIMIT},
    {NULL, 0, NULL, 0},
};

/* The stream.trace key each shortcut option sets. */
static const struct {
    int option;
    const char *key;
} trace_keys[] = {
    {STREAM_SKIP_BAD, "skip_bad"},     {STREAM_STRICT, "strict"},
    {STREAM_TRACE, "path"},            {STREAM_TRACE_FORMAT, "format"},
    {STREAM_MAX_TOKENS, "max_tokens"}, {STREAM_TIME_SCALE, "time_scale"},
    {STREAM_START, "start"},           {STREAM_LIMIT, "limit"},
};

/* One option or operand into args. */
static int take_stream_arg(stream_args_t *args, int option, const char *value)
{
    for (size_t i = 0; i < sizeof(trace_keys) / sizeof(trace_keys[0]); i++)
        if (trace_keys[i].option == option)
            return add_trace_override(args, trace_keys[i].key, value != NULL ? value : "true");
    switch (option) {
    case STREAM_HELP:
        args->help = true;
        return KVIO_EXIT_OK;
    case STREAM_STATS:
        args->stats = true;
        return KVIO_EXIT_OK;
    case STREAM_ANONYMIZE:
        args->anonymize = true;
        return KVIO_EXIT_OK;
    case STREAM_SET:
        return kvio_cli_append("kvio stream", "--set options", args->overrides,
                               &args->num_overrides, MAX_OVERRIDES, value);
    case STREAM_OUTPUT:
        args->output = value;
        return KVIO_EXIT_OK;
    case STREAM_FORMAT:
        if (strcmp(value, "kvio") == 0) {
            args->format = KVIO_EXPORT_KVIO;
        } else if (strcmp(value, "mooncake") == 0) {
            args->format = KVIO_EXPORT_MOONCAKE;
        } else {
            fprintf(stderr, "kvio stream: --format takes kvio or mooncake\n");
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one("kvio stream", "workload", &args->source, value);
    default:
        return KVIO_EXIT_USAGE;
    }
}

static int parse_args(int argc, char **argv, stream_args_t *args)
{
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio stream", argc, argv, stream_options);
    const char *value;
    int option, exit_status = KVIO_EXIT_OK;
    while (exit_status == KVIO_EXIT_OK &&
           (option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END)
        exit_status = take_stream_arg(args, option, value);
    return exit_status;
}

/* With no workload (only --trace): an empty one, with the overrides. */
static kvio_status_t load_workload(const stream_args_t *args, kvio_workload_t *workload_p,
                                   char *error_p, size_t error_len)
{
    if (args->source != NULL)
        return kvio_workload_load(args->source, args->overrides, args->num_overrides,
                                  workload_p, error_p, error_len);
    return kvio_workload_parse("name: stream\n", "command line", args->overrides,
                               args->num_overrides, workload_p, error_p, error_len);
}

typedef struct stream_stats {
    uint64_t requests, sessions;
    double input_sum, output_sum;
    uint64_t input_max, output_max;
    int64_t first_ns, last_ns;
} stream_stats_t;

static void stats_add(stream_stats_t *stats, const kvio_request_t *request)
{
    if (stats->requests == 0)
        stats->first_ns = request->arrival_ns;
    stats->requests++;
    stats->sessions += request->session_id != 0 && request->turn == 0;
    stats->input_sum += request->input_tokens;
    stats->output_sum += request->output_tokens;
    if (request->input_tokens > stats->input_max)
        stats->input_max = request->input_tokens;
    if (request->output_tokens > stats->output_max)
        stats->output_max = request->output_tokens;
    stats->last_ns = request->arrival_ns;
}

static void stats_print(const stream_stats_t *stats, uint64_t skipped, FILE *out)
{
    double count = stats->requests > 0 ? (double)stats->requests : 1;
    double span_s = (double)(stats->last_ns - stats->first_ns) / 1e9;
    fprintf(out, "requests %llu\n", (unsigned long long)stats->requests);
    fprintf(out, "sessions %llu\n", (unsigned long long)stats->sessions);
    fprintf(out, "mean_input_tokens %.2f\n", stats->input_sum / count);
    fprintf(out, "mean_output_tokens %.2f\n", stats->output_sum / count);
    fprintf(out, "max_input_tokens %llu\n", (unsigned long long)stats->input_max);
    fprintf(out, "max_output_tokens %llu\n", (unsigned long long)stats->output_max);
    fprintf(out, "duration_s %.3f\n", span_s);
    fprintf(out, "request_rate %.3f\n", span_s > 0 ? (double)(stats->requests - 1) / span_s : 0);
    fprintf(out, "skipped_lines %llu\n", (unsigned long long)skipped);
}

/* --anonymize: ids numbered in the order they first appear, and the
 * request's copy that carries them. */
typedef struct anonymizer {
    kvio_map_t numbers; /* id -> its number */
    uint32_t next;
    uint64_t *trace_ids;
    size_t trace_capacity;
    kvio_segment_t *segments;
    size_t segments_capacity;
    kvio_request_t request;
} anonymizer_t;

static kvio_status_t number_of(anonymizer_t *anonymizer, uint64_t id, uint64_t *number_p)
{
    uint32_t number = kvio_map_get(&anonymizer->numbers, id);
    if (number == 0) {
        if (anonymizer->next == UINT32_MAX)
            return KVIO_ERR_INVALID;
        number = ++anonymizer->next;
        kvio_status_t status = kvio_map_set(&anonymizer->numbers, id, number);
        if (status != KVIO_OK)
            return status;
    }
    *number_p = number;
    return KVIO_OK;
}

/* request with its ids numbered, into anonymizer->request (valid until the
 * next call). */
static kvio_status_t anonymize(anonymizer_t *anonymizer, const kvio_request_t *request)
{
    anonymizer->request = *request;
    kvio_status_t status = kvio_array_reserve((void **)&anonymizer->trace_ids,
                                              &anonymizer->trace_capacity,
                                              request->num_trace_hash_ids, sizeof(uint64_t), 64);
    if (status == KVIO_OK)
        status = kvio_array_reserve((void **)&anonymizer->segments,
                                    &anonymizer->segments_capacity, request->num_segments,
                                    sizeof(kvio_segment_t), 16);
    for (uint32_t i = 0; status == KVIO_OK && i < request->num_trace_hash_ids; i++)
        status = number_of(anonymizer, request->trace_hash_ids[i], &anonymizer->trace_ids[i]);
    for (uint32_t i = 0; status == KVIO_OK && i < request->num_segments; i++) {
        anonymizer->segments[i] = request->segments[i];
        status = number_of(anonymizer, request->segments[i].content_id,
                           &anonymizer->segments[i].content_id);
    }
    if (status == KVIO_OK && request->output_content_id != 0)
        status = number_of(anonymizer, request->output_content_id,
                           &anonymizer->request.output_content_id);
    anonymizer->request.trace_hash_ids = request->trace_hash_ids ? anonymizer->trace_ids : NULL;
    anonymizer->request.segments = request->segments ? anonymizer->segments : NULL;
    return status;
}

static void anonymizer_fini(anonymizer_t *anonymizer)
{
    kvio_map_fini(&anonymizer->numbers);
    free(anonymizer->trace_ids);
    free(anonymizer->segments);
}

int kvio_cmd_stream(int argc, char **argv)
{
    anonymizer_t anonymizer = {0};
    stream_args_t args = {0};
    kvio_workload_t workload;
    bool loaded = false;
    kvio_stream_t *stream = NULL;
    kvio_stream_writer_t *writer = NULL;
    FILE *out = NULL;
    bool out_regular = false; /* out is a file (removed if cut short) */
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_status_t status = KVIO_OK;
    stream_stats_t stats = {0};
    int exit_status = parse_args(argc, argv, &args);
    if (exit_status != KVIO_EXIT_OK)
        goto cleanup;
    if (args.help) {
        printf("%s\nstream keys:\n", usage);
        kvio_config_print_help(kvio_workload_options, "stream", stdout);
        goto cleanup;
    }
    if (args.source == NULL && args.num_owned == 0) {
        fprintf(stderr, "kvio stream: which workload? (kvio stream WORKLOAD.yaml -o FILE)\n");
        exit_status = KVIO_EXIT_USAGE;
        goto cleanup;
    }
    if (args.output == NULL && !args.stats) {
        fprintf(stderr, "kvio stream: say where to write (-o FILE, - for stdout) or --stats\n");
        exit_status = KVIO_EXIT_USAGE;
        goto cleanup;
    }
    status = load_workload(&args, &workload, error, sizeof(error));
    if (status != KVIO_OK)
        goto failed;
    loaded = true;
    status = kvio_stream_create(&workload.stream, (uint64_t)workload.seed,
                                kvio_workload_stream_duration(&workload), &stream, error,
                                sizeof(error));
    if (status != KVIO_OK)
        goto failed;
    if (args.output != NULL) {
        out = strcmp(args.output, "-") == 0 ? stdout : fopen(args.output, "w");
        if (out == NULL) {
            snprintf(error, sizeof(error), "%s: %s", args.output, strerror(errno));
            status = KVIO_ERR_IO;
            goto failed;
        }
        struct stat info;
        out_regular = out != stdout && fstat(fileno(out), &info) == 0 && S_ISREG(info.st_mode);
        if (args.format == KVIO_EXPORT_MOONCAKE)
            fprintf(stderr, "kvio stream: note: the mooncake format is lossy: it keeps "
                            "timestamps, lengths and 512-token block ids, not segments, "
                            "max_tokens, priorities or sessions\n");
        status = kvio_stream_writer_create(out, args.format, &writer);
        if (status != KVIO_OK)
            goto failed;
    }
    for (;;) {
        const kvio_request_t *request;
        status = kvio_stream_next(stream, &request);
        if (status != KVIO_OK || request == NULL)
            break;
        stats_add(&stats, request);
        if (args.anonymize && (status = anonymize(&anonymizer, request)) != KVIO_OK) {
            snprintf(error, sizeof(error), "--anonymize: %s (more than 4 billion ids?)",
                     kvio_strerror(status));
            break;
        }
        if (writer != NULL &&
            (status = kvio_stream_writer_write(writer, args.anonymize ? &anonymizer.request
                                                                      : request)) != KVIO_OK)
            break;
    }
    if (writer != NULL) {
        int errnum = 0;
        kvio_status_t close_status = kvio_stream_writer_close(writer, &errnum);
        writer = NULL;
        /* The cause, as the system gave it: "No space left on device",
         * "Broken pipe" (it said "input/output error"). */
        if (errnum != 0 && error[0] == '\0')
            snprintf(error, sizeof(error), "%s: write failed: %s",
                     strcmp(args.output, "-") == 0 ? "stdout" : args.output, strerror(errnum));
        if (status == KVIO_OK)
            status = close_status;
    }
    if (status != KVIO_OK) {
        if (error[0] == '\0')
            snprintf(error, sizeof(error), "%s: %s", args.output ? args.output : "stream",
                     kvio_strerror(status));
        goto failed;
    }
    if (args.stats)
        stats_print(&stats, kvio_stream_skipped_lines(stream), out == stdout ? stderr : stdout);
    goto cleanup;

failed:
    fprintf(stderr, "kvio: %s\n", error[0] ? error : kvio_strerror(status));
    exit_status = kvio_cli_exit_status(status);
cleanup:
    if (writer != NULL)
        kvio_stream_writer_close(writer, NULL);
    if (out != NULL && out != stdout && fclose(out) != 0 && exit_status == KVIO_EXIT_OK) {
        fprintf(stderr, "kvio: %s: %s\n", args.output, strerror(errno));
        exit_status = KVIO_EXIT_FAILED;
    }
    /* A file of ours cut short goes (a device such as /dev/full, a pipe or
     * a FIFO stays as it was). */
    if (out_regular && exit_status != KVIO_EXIT_OK && unlink(args.output) == 0)
        fprintf(stderr, "kvio: %s: removed (incomplete)\n", args.output);
    kvio_stream_destroy(stream);
    anonymizer_fini(&anonymizer);
    if (loaded)
        kvio_workload_free(&workload);
    for (size_t i = 0; i < args.num_owned; i++)
        free(args.owned[i]);
    return exit_status;
}
