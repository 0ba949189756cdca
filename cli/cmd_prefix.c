/* kvio prefix: where a conversation log's prompts stop matching what the
 * previous turn left in the prefix cache, clustered by place, with the hit
 * rate as it is and without each cause. */
#include "cli/cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/conversation.h"
#include "kvio/format.h"
#include "kvio/results.h"

enum {
    PREFIX_HELP = 1, PREFIX_TOKENIZER, PREFIX_TEMPLATE, PREFIX_BLOCK, PREFIX_NO_TEXT,
    PREFIX_TURNS, PREFIX_FORMAT,
};

static const kvio_cli_option_t prefix_options[] = {
    {"help", 'h', NULL, PREFIX_HELP},
    {"tokenizer", 0, "a tokenizer.json or .tiktoken file", PREFIX_TOKENIZER},
    {"chat-template", 0, "chatml, llama3 or harmony", PREFIX_TEMPLATE},
    {"block-size", 0, "tokens", PREFIX_BLOCK},
    {"no-text", 0, NULL, PREFIX_NO_TEXT},
    {"turns", 0, NULL, PREFIX_TURNS},
    {"format", 0, "table or json", PREFIX_FORMAT},
    {NULL, 0, NULL, 0},
};

typedef struct prefix_args {
    const char *log, *tokenizer, *chat_template;
    long block_size;
    bool help, no_text, turns, json;
    kvio_provenance_t provenance; /* the command as typed (the JSON's provenance) */
    uint64_t start_ns;            /* when it started (wall clock) */
} prefix_args_t;

static void prefix_usage(FILE *out)
{
    fprintf(out,
            "usage: kvio prefix LOG [--tokenizer FILE] [--chat-template T] [--block-size N]\n"
            "                   [--turns] [--no-text] [--format table|json]\n\n"
            "Renders each turn of a conversation log as the server would prefill it and\n"
            "finds where it stops matching what the session's previous turn left in the\n"
            "prefix cache (its prompt and its answer): the token, the message it falls\n"
            "in, the text each side. Breaks at the same place are clustered; the hit\n"
            "rate is shown as it is and as it would be without each cluster's cause.\n\n"
            "LOG         OpenAI chat-completions requests, one JSON body a line (or\n"
            "            {\"request\", \"response\", \"timestamp\"}), kvio's conversation\n"
            "            format ({\"session\", \"time\", \"messages\", \"output\"} a line),\n"
            "            or ShareGPT JSON; sessions from a session field, else the\n"
            "            first user message\n"
            "--tokenizer the model's tokenizer.json or tiktoken rank file (default:\n"
            "            kvio's approximate tokenizer)\n"
            "--chat-template  chatml, llama3 or harmony (default: the tokenizer's,\n"
            "            else chatml)\n"
            "--block-size the prefix cache's block (default 16, vLLM's)\n"
            "--turns     a line for every turn\n"
            "--no-text   positions only, no text of the log\n");
}

static int take_prefix_arg(int option, const char *value, prefix_args_t *args)
{
    char *end = NULL;
    switch (option) {
    case PREFIX_HELP:
        args->help = true;
        return KVIO_EXIT_OK;
    case PREFIX_TOKENIZER:
        args->tokenizer = value;
        return KVIO_EXIT_OK;
    case PREFIX_TEMPLATE:
        args->chat_template = value;
        return KVIO_EXIT_OK;
    case PREFIX_BLOCK:
        errno = 0;
        args->block_size = strtol(value, &end, 10);
        if (end == value || *end != '\0' || errno != 0 || args->block_size < 1 ||
            args->block_size > 65536) {
            fprintf(stderr, "kvio prefix: --block-size takes 1 to 65536 tokens, got '%s'\n", value);
            return KVIO_EXIT_USAGE;
        }
        return KVIO_EXIT_OK;
    case PREFIX_NO_TEXT:
        args->no_text = true;
        return KVIO_EXIT_OK;
    case PREFIX_TURNS:
        args->turns = true;
        return KVIO_EXIT_OK;
    case PREFIX_FORMAT:
        if (strcmp(value, "json") != 0 && strcmp(value, "table") != 0) {
            fprintf(stderr, "kvio prefix: --format is table or json, got '%s'\n", value);
            return KVIO_EXIT_USAGE;
        }
        args->json = strcmp(value, "json") == 0;
        return KVIO_EXIT_OK;
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one("kvio prefix", "log", &args->log, value);
    default:
        return KVIO_EXIT_USAGE;
    }
}

/* ---------- rendering ---------- */

static void place_text(const char *label, uint32_t message, uint32_t first, uint32_t last,
                       char *out, size_t size)
{
    if (first == last)
        snprintf(out, size, "%s (message %u), token %u", label, message, first);
    else
        snprintf(out, size, "%s (message %u), tokens %u-%u", label, message, first, last);
}

static double percent(uint64_t part, uint64_t whole)
{
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0;
}

static void print_table(const prefix_args_t *args, const kvio_conversation_log_t *log,
                        const kvio_prefix_result_t *result, const char *tokenizer,
                        const char *template_name, uint32_t block_size)
{
    printf("kvio prefix %s: %zu session%s, %zu turns (%s); tokenizer %s; template %s; "
           "blocks of %u tokens\n\n",
           log->path, log->num_sessions, log->num_sessions == 1 ? "" : "s", log->num_turns,
           log->format, tokenizer, template_name, block_size);
    char where[128], a[256], b[256], c[256];
    if (args->turns) {
        printf("%-12s %5s %8s %8s %8s  %s\n", "session", "turn", "prompt", "reused", "cached",
               "first break");
        for (size_t t = 0; t < result->num_turns; t++) {
            const kvio_prefix_turn_t *row = &result->turns[t];
            const kvio_prefix_break_t *first = row->num_breaks ? &row->breaks[0] : NULL;
            if (first != NULL)
                place_text(first->label, first->message, first->token_in_message,
                           first->token_in_message, where, sizeof(where));
            printf("%-12.12s %5u %8u %8u %8u  %s\n", log->sessions[row->session].id, row->turn,
                   row->prompt_tokens, row->reusable_tokens, row->cached_tokens,
                   first ? where : row->turn == 0 ? "(first turn)" : "none");
        }
        printf("\n");
    }
    size_t later_turns = log->num_turns - log->num_sessions;
    printf("Where the prefix breaks: %zu of %zu later turns break", result->turns_with_breaks,
           later_turns);
    printf(result->num_clusters ? "; by place, most turns first:\n" : ".\n");
    for (size_t i = 0; i < result->num_clusters; i++) {
        const kvio_prefix_cluster_t *cluster = &result->clusters[i];
        const kvio_prefix_turn_t *row = &result->turns[cluster->first_turn];
        const kvio_prefix_break_t *example = NULL;
        for (size_t k = 0; k < row->num_breaks && example == NULL; k++)
            if (row->breaks[k].cluster == (int)i)
                example = &row->breaks[k];
        place_text(cluster->label, cluster->message, cluster->first_token, cluster->last_token,
                   where, sizeof(where));
        printf("  %-40s first break of %zu turns (%.0f %%)\n", where, cluster->turns,
               percent(cluster->turns, later_turns));
        if (!args->no_text && example != NULL)
            printf("    this turn: `%s` | `%s`\n    before it:             | `%s`\n",
                   kvio_format_one_line(example->before, a, sizeof(a)),
                   kvio_format_one_line(example->after, b, sizeof(b)),
                   kvio_format_one_line(example->previous, c, sizeof(c)));
    }
    printf("\nPrefix cache hits (whole blocks, each turn against its session's previous):\n");
    int width = 24; /* the widest line's label */
    for (size_t i = 0; i < result->num_clusters; i++) {
        const kvio_prefix_cluster_t *cluster = &result->clusters[i];
        place_text(cluster->label, cluster->message, cluster->first_token, cluster->last_token,
                   where, sizeof(where));
        if ((int)strlen(where) + 9 > width)
            width = (int)strlen(where) + 9;
    }
    printf("  %-*s %10s %10s\n", width, "", "tokens", "of prompt");
    printf("  %-*s %10llu %8.1f %%\n", width, "as it is", (unsigned long long)result->cached_tokens,
           percent(result->cached_tokens, result->prompt_tokens));
    for (size_t i = 0; i < result->num_clusters; i++) {
        const kvio_prefix_cluster_t *cluster = &result->clusters[i];
        char label[160];
        place_text(cluster->label, cluster->message, cluster->first_token, cluster->last_token,
                   where, sizeof(where));
        snprintf(label, sizeof(label), "without: %s", where);
        printf("  %-*s %10llu %8.1f %%\n", width, label,
               (unsigned long long)cluster->cached_without,
               percent(cluster->cached_without, result->prompt_tokens));
    }
    if (result->num_clusters > 1)
        printf("  %-*s %10llu %8.1f %%\n", width, "without any break",
               (unsigned long long)result->cached_without_breaks,
               percent(result->cached_without_breaks, result->prompt_tokens));
    printf("  (of %llu prompt tokens; a session's first turn hits nothing here)\n",
           (unsigned long long)result->prompt_tokens);
}

static json_t *break_json(const kvio_prefix_break_t *found, bool text)
{
    json_t *object = json_pack("{s:i, s:i, s:s, s:i, s:i}", "token", (int)found->token, "message",
                               (int)found->message, "label", found->label, "token_in_message",
                               (int)found->token_in_message, "cluster", found->cluster);
    if (text)
        json_object_update_new(object, json_pack("{s:s, s:s, s:s}", "before", found->before,
                                                 "after", found->after, "previous",
                                                 found->previous));
    return object;
}

static void print_json(const prefix_args_t *args, const kvio_conversation_log_t *log,
                       const kvio_prefix_result_t *result, const char *tokenizer,
                       const char *template_name, uint32_t block_size)
{
    json_t *turns = json_array(), *clusters = json_array();
    for (size_t t = 0; t < result->num_turns; t++) {
        const kvio_prefix_turn_t *row = &result->turns[t];
        json_t *breaks = json_array();
        for (size_t b = 0; b < row->num_breaks; b++)
            json_array_append_new(breaks, break_json(&row->breaks[b], !args->no_text));
        json_array_append_new(
            turns, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "session",
                             log->sessions[row->session].id, "turn", (int)row->turn,
                             "prompt_tokens", (int)row->prompt_tokens, "reusable_tokens",
                             (int)row->reusable_tokens, "cached_tokens", (int)row->cached_tokens,
                             "expected_tokens", (int)row->expected_tokens, "breaks", breaks));
    }
    for (size_t i = 0; i < result->num_clusters; i++) {
        const kvio_prefix_cluster_t *cluster = &result->clusters[i];
        json_array_append_new(
            clusters, json_pack("{s:i, s:s, s:i, s:i, s:I, s:I}", "message",
                                (int)cluster->message, "label", cluster->label, "first_token",
                                (int)cluster->first_token, "last_token", (int)cluster->last_token,
                                "turns",
                                (json_int_t)cluster->turns, "cached_tokens_without",
                                (json_int_t)cluster->cached_without));
    }
    json_t *root = kvio_provenance_json(&args->provenance, NULL, args->start_ns);
    json_t *analysis = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "log", log->path,
        "format", log->format, "tokenizer", tokenizer, "chat_template", template_name,
        "block_size", (int)block_size, "sessions", (json_int_t)log->num_sessions, "turns_total",
        (json_int_t)log->num_turns, "turns_with_breaks", (json_int_t)result->turns_with_breaks,
        "prompt_tokens", (json_int_t)result->prompt_tokens, "cached_tokens",
        (json_int_t)result->cached_tokens, "cached_tokens_without_breaks",
        (json_int_t)result->cached_without_breaks, "clusters", clusters, "turns", turns);
    json_object_update_new(root, analysis);
    json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(root);
}

/* ---------- the command ---------- */

/* The tokenizer (if asked) and the template: the one asked, else the
 * tokenizer's, else chatml. */
static int choose_tokens(const prefix_args_t *args, kvio_tokenizer_t **tokenizer_p,
                         kvio_chat_template_t *template_p)
{
    *template_p = KVIO_CHAT_CHATML;
    if (args->chat_template != NULL &&
        kvio_chat_template_find(args->chat_template, template_p) != KVIO_OK) {
        fprintf(stderr, "kvio prefix: --chat-template: '%s' is none of chatml, llama3, harmony\n",
                args->chat_template);
        return KVIO_EXIT_USAGE;
    }
    if (args->tokenizer == NULL)
        return KVIO_EXIT_OK;
    kvio_status_t status = kvio_tokenizer_load(args->tokenizer, tokenizer_p);
    if (status != KVIO_OK)
        return kvio_cli_exit_status(status);
    if (args->chat_template == NULL && kvio_chat_template_for(*tokenizer_p, template_p) != KVIO_OK) {
        fprintf(stderr, "kvio prefix: the tokenizer %s has the special tokens of no chat "
                "template kvio knows (chatml, llama3, harmony)\n", args->tokenizer);
        return KVIO_EXIT_USAGE;
    }
    if (kvio_chat_template_check(*template_p, *tokenizer_p) != KVIO_OK)
        return KVIO_EXIT_USAGE;
    return KVIO_EXIT_OK;
}

int kvio_cmd_prefix(int argc, char **argv)
{
    prefix_args_t args = {.block_size = 16,
                          .provenance = {.argc = argc, .argv = (const char *const *)argv},
                          .start_ns = kvio_wall_time_ns()};
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio prefix", argc, argv, prefix_options);
    const char *value;
    int option, exit_status = KVIO_EXIT_OK;
    while (exit_status == KVIO_EXIT_OK &&
           (option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END)
        exit_status = option == KVIO_CLI_ERROR ? KVIO_EXIT_USAGE
                                               : take_prefix_arg(option, value, &args);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args.help) {
        prefix_usage(stdout);
        return KVIO_EXIT_OK;
    }
    if (args.log == NULL) {
        fprintf(stderr, "kvio prefix: which log? (kvio prefix LOG; --help)\n");
        return KVIO_EXIT_USAGE;
    }
    kvio_tokenizer_t *tokenizer = NULL;
    kvio_chat_template_t template_id;
    kvio_conversation_log_t *log = NULL;
    kvio_prefix_result_t *result = NULL;
    exit_status = choose_tokens(&args, &tokenizer, &template_id);
    if (exit_status == KVIO_EXIT_OK)
        exit_status = kvio_cli_exit_status(kvio_conversation_load(args.log, &log));
    kvio_prefix_params_t params = {.tokenizer = tokenizer, .chat_template = template_id,
                                   .block_size = (uint32_t)args.block_size};
    if (exit_status == KVIO_EXIT_OK && kvio_prefix_analyze(log, &params, &result) != KVIO_OK) {
        fprintf(stderr, "kvio prefix: out of memory analysing %s\n", args.log);
        exit_status = KVIO_EXIT_FAILED;
    }
    if (exit_status == KVIO_EXIT_OK) {
        const char *described = tokenizer ? kvio_tokenizer_describe(tokenizer) : "approximate";
        const char *template_name = kvio_chat_template_name(template_id);
        if (args.json)
            print_json(&args, log, result, described, template_name, params.block_size);
        else
            print_table(&args, log, result, described, template_name, params.block_size);
    }
    kvio_prefix_result_free(result);
    kvio_conversation_log_free(log);
    kvio_tokenizer_destroy(tokenizer);
    return exit_status;
}
