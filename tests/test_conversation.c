/* Tests for conversation logs and where their prefix breaks
 * (workloads/conversation.c, workloads/prefix.c, kvio prefix): the shipped
 * agent log breaks at its system prompt's time; a stable conversation
 * reuses all its previous turn left; a rewritten answer and reordered
 * tools are found and named; ShareGPT gives every turn; bad logs are
 * refused with file, line and key, and nothing printed. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/conversation.h"
#include "kvio/hashset.h"
#include "kvio/log.h"
#include "tests/helpers.h"

static const char agent_log[] = KVIO_SOURCE_DIR "/workloads/conversations/agent-harness.jsonl";

static kvio_conversation_log_t *load(const char *path)
{
    kvio_conversation_log_t *log = NULL;
    cr_assert_eq(kvio_conversation_load(path, &log), KVIO_OK, "%s loads", path);
    return log;
}

static kvio_prefix_result_t *analyze(const kvio_conversation_log_t *log)
{
    kvio_prefix_params_t params = {.chat_template = KVIO_CHAT_CHATML, .block_size = 16};
    kvio_prefix_result_t *result = NULL;
    cr_assert_eq(kvio_prefix_analyze(log, &params, &result), KVIO_OK);
    return result;
}

static bool starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

static bool ends_with(const char *text, const char *suffix)
{
    size_t length = strlen(text), suffix_length = strlen(suffix);
    return length >= suffix_length && strcmp(text + length - suffix_length, suffix) == 0;
}

/* The recipe's log: two sessions (grouped by their first user message),
 * every later turn breaks in the system message, at the time it states;
 * without that break the hit rate rises from under 10 % to over 70 %. */
Test(conversation, the_agent_log_breaks_at_the_time_in_its_system_prompt, .timeout = 30)
{
    kvio_conversation_log_t *log = load(agent_log);
    cr_assert_eq(log->num_sessions, 2);
    cr_assert_eq(log->num_turns, 7);
    cr_assert_str_eq(log->format, "openai");
    /* Tools sit after the system message; tool calls are the answers. */
    const kvio_conversation_turn_t *first = &log->sessions[0].turns[0];
    cr_assert_str_eq(first->labels[0], "system");
    cr_assert_str_eq(first->labels[1], "tools");
    cr_assert_str_eq(first->labels[2], "user");
    cr_assert(first->output != NULL && strstr(first->output, "run_tests") != NULL);
    kvio_prefix_result_t *result = analyze(log);
    cr_assert_eq(result->turns_with_breaks, 5);
    cr_assert_eq(result->num_clusters, 1, "%zu clusters", result->num_clusters);
    const kvio_prefix_cluster_t *cluster = &result->clusters[0];
    cr_assert_str_eq(cluster->label, "system");
    cr_assert_eq(cluster->message, 0);
    cr_assert_eq(cluster->turns, 5);
    /* Turn 1 of session 1: 16:04:05 became 16:04:19. */
    const kvio_prefix_turn_t *row = &result->turns[1];
    cr_assert_eq(row->turn, 1);
    cr_assert_eq(row->num_breaks, 1, "%zu breaks", row->num_breaks);
    const kvio_prefix_break_t *found = &row->breaks[0];
    cr_assert_eq(found->token, row->reusable_tokens);
    cr_assert(ends_with(found->before, "Current time: 2026-12-02 16:04:"), "'%s'", found->before);
    cr_assert(starts_with(found->after, "19 UTC"), "'%s'", found->after);
    cr_assert(starts_with(found->previous, "05 UTC"), "'%s'", found->previous);
    cr_assert_eq(row->cached_tokens, row->reusable_tokens / 16 * 16);
    double as_is = (double)result->cached_tokens / (double)result->prompt_tokens;
    double without = (double)cluster->cached_without / (double)result->prompt_tokens;
    cr_assert_lt(as_is, 0.10, "as is %.3f", as_is);
    cr_assert_gt(without, 0.70, "without %.3f", without);
    kvio_prefix_result_free(result);
    kvio_conversation_log_free(log);
}

/* kvio's conversation format: a session whose history is what it was
 * sent and answered reuses everything the previous turn left (its prompt
 * and answer), turn after turn; the cache hits whole blocks of it. */
Test(conversation, a_stable_conversation_reuses_all_its_previous_turn_left, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(
        dir, "chat.jsonl",
        "{\"session\": \"a\", \"time\": 0, \"messages\": [{\"role\": \"system\", \"content\": \"Be "
        "brief.\"}, {\"role\": \"user\", \"content\": \"Name a prime.\"}], \"output\": \"Seven.\"}\n"
        "\n"
        "{\"session\": \"a\", \"time\": 5, \"messages\": [{\"role\": \"system\", \"content\": \"Be "
        "brief.\"}, {\"role\": \"user\", \"content\": \"Name a prime.\"}, {\"role\": \"assistant\", "
        "\"content\": \"Seven.\"}, {\"role\": \"user\", \"content\": \"Another, larger one.\"}], "
        "\"output\": \"Eleven.\"}\n"
        "{\"session\": \"a\", \"time\": 9, \"messages\": [{\"role\": \"system\", \"content\": \"Be "
        "brief.\"}, {\"role\": \"user\", \"content\": \"Name a prime.\"}, {\"role\": \"assistant\", "
        "\"content\": \"Seven.\"}, {\"role\": \"user\", \"content\": \"Another, larger one.\"}, "
        "{\"role\": \"assistant\", \"content\": \"Eleven.\"}, {\"role\": \"user\", \"content\": "
        "[{\"type\": \"text\", \"text\": \"And \"}, {\"type\": \"text\", \"text\": \"a third.\"}]}]}\n");
    kvio_conversation_log_t *log = load(path);
    cr_assert_eq(log->num_sessions, 1);
    cr_assert_eq(log->sessions[0].num_turns, 3);
    kvio_prefix_result_t *result = analyze(log);
    cr_assert_eq(result->turns_with_breaks, 0);
    cr_assert_eq(result->num_clusters, 0);
    for (size_t t = 1; t < 3; t++) {
        const kvio_prefix_turn_t *row = &result->turns[t];
        cr_assert_gt(row->expected_tokens, result->turns[t - 1].prompt_tokens);
        cr_assert_eq(row->reusable_tokens, row->expected_tokens, "turn %zu: %u of %u", t,
                     row->reusable_tokens, row->expected_tokens);
        cr_assert_eq(row->cached_tokens, row->reusable_tokens / 16 * 16);
    }
    cr_assert_eq(result->cached_without_breaks, result->cached_tokens);
    kvio_prefix_result_free(result);
    kvio_conversation_log_free(log);
    free(path);
    test_rmtree(dir);
    free(dir);
}

/* Turns out of order in the file are put in time order; a harness that
 * rewrites the answer it got and reorders its tools breaks twice a turn:
 * in the tools message, then in the assistant's message. */
Test(conversation, reordered_tools_and_a_rewritten_answer_are_both_found, .timeout = 30)
{
    char *dir = test_tmpdir();
    static const char tools_ab[] = "\"tools\": [{\"name\": \"alpha\"}, {\"name\": \"beta\"}]";
    static const char tools_ba[] = "\"tools\": [{\"name\": \"beta\"}, {\"name\": \"alpha\"}]";
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"session_id\": 7, \"timestamp\": \"2026-12-02T16:00:10Z\", %s, \"messages\": "
             "[{\"role\": \"system\", \"content\": \"You help.\"}, {\"role\": \"user\", "
             "\"content\": \"Plan the trip to the coast for the whole family, please.\"}, "
             "{\"role\": \"assistant\", \"content\": \"Summary: a plan.\"}, {\"role\": \"user\", "
             "\"content\": \"And the budget for the hotel and the train tickets?\"}]}\n"
             "{\"session_id\": 7, \"timestamp\": \"2026-12-02T16:00:00Z\", %s, \"messages\": "
             "[{\"role\": \"system\", \"content\": \"You help.\"}, {\"role\": \"user\", "
             "\"content\": \"Plan the trip to the coast for the whole family, please.\"}], "
             "\"response\": {\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": "
             "\"Day one: drive to the coast and walk along the beach in the evening.\"}}]}}\n",
             tools_ba, tools_ab);
    char *path = test_write_file(dir, "harness.jsonl", text);
    kvio_conversation_log_t *log = load(path);
    cr_assert_eq(log->sessions[0].num_turns, 2);
    cr_assert_str_eq(log->sessions[0].id, "7");
    cr_assert_eq(log->sessions[0].turns[0].line, 2, "time order puts line 2 first");
    kvio_prefix_result_t *result = analyze(log);
    const kvio_prefix_turn_t *row = &result->turns[1];
    cr_assert_eq(row->num_breaks, 2, "%zu breaks", row->num_breaks);
    cr_assert_str_eq(row->breaks[0].label, "tools");
    cr_assert_eq(row->breaks[0].message, 1);
    cr_assert_str_eq(row->breaks[1].label, "assistant");
    cr_assert(starts_with(row->breaks[1].after, "Summary"), "'%s'", row->breaks[1].after);
    cr_assert(starts_with(row->breaks[1].previous, "Day one"), "'%s'", row->breaks[1].previous);
    cr_assert_eq(result->num_clusters, 2);
    /* Without the tools' break the turn reuses up to the answer's. */
    cr_assert_str_eq(result->clusters[0].label, "tools");
    cr_assert_eq(result->clusters[0].cached_without,
                 (uint64_t)row->breaks[1].token / 16 * 16);
    kvio_prefix_result_free(result);
    kvio_conversation_log_free(log);
    free(path);
    test_rmtree(dir);
    free(dir);
}

/* ShareGPT: every human turn of every conversation is a turn, its answer
 * the gpt message after it. */
Test(conversation, sharegpt_gives_every_turn_of_every_conversation, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(
        dir, "sharegpt.json",
        "[{\"id\": \"c1\", \"conversations\": [{\"from\": \"human\", \"value\": \"Hi there.\"}, "
        "{\"from\": \"gpt\", \"value\": \"Hello! How can I help?\"}, {\"from\": \"human\", "
        "\"value\": \"Tell me a joke.\"}, {\"from\": \"gpt\", \"value\": \"Why did the cache "
        "miss? It was not paying attention.\"}, {\"from\": \"human\", \"value\": \"Another.\"}]},\n"
        " {\"conversations\": [{\"from\": \"system\", \"value\": \"Be terse.\"}, {\"from\": "
        "\"human\", \"value\": \"2+2?\"}, {\"from\": \"gpt\", \"value\": \"4\"}]}]\n");
    kvio_conversation_log_t *log = load(path);
    cr_assert_str_eq(log->format, "sharegpt");
    cr_assert_eq(log->num_sessions, 2);
    cr_assert_eq(log->num_turns, 4);
    cr_assert_str_eq(log->sessions[1].id, "#1");
    const kvio_conversation_turn_t *second = &log->sessions[0].turns[1];
    cr_assert_eq(second->num_messages, 3);
    cr_assert_str_eq(second->output, "Why did the cache miss? It was not paying attention.");
    cr_assert_null(log->sessions[0].turns[2].output);
    kvio_prefix_result_t *result = analyze(log);
    cr_assert_eq(result->turns_with_breaks, 0);
    kvio_prefix_result_free(result);
    kvio_conversation_log_free(log);
    free(path);
    test_rmtree(dir);
    free(dir);
}

/* kvio prefix prints the break and the hit rates; with --no-text none of
 * the log's text. */
Test(conversation, kvio_prefix_names_the_break_and_the_hit_rates, .timeout = 30)
{
    test_run_t run = test_kvio(NULL, "prefix", agent_log, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "5 of 5 later turns break"), "%s", run.out);
    cr_assert(test_contains(run.out, "system (message 0)"), "%s", run.out);
    cr_assert(test_contains(run.out, "16:04:` | `19 UTC"), "%s", run.out);
    cr_assert(test_contains(run.out, "without: system (message 0)"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "prefix", agent_log, "--no-text", "--format", "json", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(!test_contains(run.out, "UTC"), "--no-text printed the log's text");
    cr_assert(test_contains(run.out, "\"turns_with_breaks\": 5"), "%s", run.out);
    test_run_free(&run);
}

/* Each bad log: exit 2, the file, line and key named, nothing printed. */
Test(conversation, a_bad_log_is_refused_with_file_line_and_key, .timeout = 60)
{
    char *dir = test_tmpdir();
    static const char good[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
    struct {
        const char *name, *text, *want;
    } cases[] = {
        {"malformed.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n{\"messages\": [\n",
         "malformed.jsonl:2: JSON"},
        {"role.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"bot\", "
         "\"content\": \"b\"}]}\n", "role.jsonl:1: messages[1].role: unknown role 'bot'"},
        {"content.jsonl", "{\"messages\": [{\"role\": \"user\"}]}\n",
         "content.jsonl:1: messages[0]: no content"},
        {"nomessages.jsonl", "{\"model\": \"m\"}\n", "nomessages.jsonl:1: messages: missing"},
        {"norole.jsonl", "{\"messages\": [{\"content\": \"a\"}]}\n",
         "norole.jsonl:1: messages[0].role: missing"},
        {"nofrom.json", "[{\"conversations\": [{\"value\": \"a\"}]}]",
         "nofrom.json: [0].conversations[0].from: missing"},
        {"time.jsonl", "{\"time\": \"yesterday\", \"messages\": [{\"role\": \"user\", \"content\": "
         "\"a\"}]}\n", "time.jsonl:1: time: not seconds"},
        {"share.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}, {\"from\": "
         "\"narrator\", \"value\": \"b\"}]}]", "share.json: [0].conversations[1].from: unknown role "
         "'narrator'"},
        {"empty.jsonl", "\n\n", "empty.jsonl: no conversation turns"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *path = test_write_file(dir, cases[i].name, cases[i].text);
        test_run_t run = test_kvio(NULL, "prefix", path, NULL);
        cr_assert_eq(run.status, 2, "%s: exit %d: %s", cases[i].name, run.status, run.err);
        cr_assert(test_contains(run.err, cases[i].want), "%s: %s", cases[i].name, run.err);
        cr_assert_str_eq(run.out, "", "%s printed: %s", cases[i].name, run.out);
        test_run_free(&run);
        free(path);
    }
    char *path = test_write_file(dir, "good.jsonl", good);
    static const char *const bad_args[][3] = {
        {"--tokenizer", "/nonexistent/tokenizer.json", "No such file"},
        {"--chat-template", "jinja", "chatml, llama3, harmony"},
        {"--block-size", "0", "--block-size"},
    };
    for (size_t i = 0; i < sizeof(bad_args) / sizeof(bad_args[0]); i++) {
        test_run_t run = test_kvio(NULL, "prefix", path, bad_args[i][0], bad_args[i][1], NULL);
        cr_assert_eq(run.status, 2, "%s: exit %d", bad_args[i][0], run.status);
        cr_assert(test_contains(run.err, bad_args[i][2]), "%s: %s", bad_args[i][0], run.err);
        cr_assert_str_eq(run.out, "");
        test_run_free(&run);
    }
    test_run_t missing = test_kvio(NULL, "prefix", "/nonexistent/log.jsonl", NULL);
    cr_assert_eq(missing.status, 2);
    cr_assert(test_contains(missing.err, "/nonexistent/log.jsonl: No such file"), "%s", missing.err);
    test_run_free(&missing);
    free(path);
    test_rmtree(dir);
    free(dir);
}

/* Whether text holds "Current date: YYYY-MM-DD\n" (harmony's system
 * message). */
static bool whole_date(const char *text)
{
    const char *at = strstr(text, "Current date: ");
    if (at == NULL)
        return false;
    at += strlen("Current date: ");
    for (int i = 0; i < 10; i++)
        if (i == 4 || i == 7 ? at[i] != '-' : (at[i] < '0' || at[i] > '9'))
            return false;
    return at[10] == '\n';
}

/* A log's time outside 0 .. 2100 (1e30, 1e17 s, negative) is refused with
 * file:line by kvio prefix and as a trace (1e30 printed stack bytes as
 * harmony's date, and overflowed a trace's arrival to INT64_MIN); a turn
 * given such a time anyway renders a whole date. */
Test(conversation, times_outside_1970_to_2100_are_refused_and_dates_stay_whole, .timeout = 60)
{
    char *dir = test_tmpdir();
    static const char *const times[] = {"1e+30", "1e17", "-5", "\"9999-01-01T00:00:00\""};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{\"timestamp\": %s, \"request\": {\"messages\": "
                 "[{\"role\": \"user\", \"content\": \"x\"}]}}\n", times[i]);
        char *path = test_write_file(dir, "log.jsonl", text);
        test_run_t run = test_kvio(NULL, "prefix", path, "--chat-template", "harmony", NULL);
        cr_assert_eq(run.status, 2, "%s: exit %d: %s", times[i], run.status, run.err);
        cr_assert(test_contains(run.err, "log.jsonl:1: time: "), "%s: %s", times[i], run.err);
        cr_assert(test_contains(run.err, "is not a time from 0 to"), "%s", run.err);
        test_run_free(&run);
        char out[600];
        snprintf(out, sizeof(out), "%s/out.jsonl", dir);
        run = test_kvio(NULL, "stream", "--trace", path, "-o", out, NULL);
        cr_assert_eq(run.status, 2, "%s as a trace: exit %d: %s", times[i], run.status, run.err);
        cr_assert(test_contains(run.err, "log.jsonl:1: time: "), "%s", run.err);
        test_run_free(&run);
        free(path);
    }
    kvio_chat_message_t message = {.role = "user", .role_length = 4, .content = "x",
                                   .content_length = 1};
    static const double past[] = {1e30, 1e17, 253402300800.0, 1.7e9};
    for (size_t i = 0; i < sizeof(past) / sizeof(past[0]); i++) {
        kvio_conversation_turn_t turn = {.messages = &message, .num_messages = 1,
                                         .time_s = past[i]};
        kvio_chat_rendering_t rendering = {0};
        cr_assert_eq(kvio_conversation_render(&turn, NULL, KVIO_CHAT_HARMONY, &rendering),
                     KVIO_OK);
        cr_assert(whole_date(rendering.text), "time %g: %s", past[i], rendering.text);
        kvio_chat_rendering_fini(&rendering);
    }
    test_rmtree(dir);
    free(dir);
}

/* ---------- conversation logs as a trace ---------- */

#include "kvio/config.h"
#include "kvio/stream.h"

static kvio_stream_t *open_log(const char *path, kvio_stream_trace_config_t *options)
{
    char error[512] = "";
    cr_assert_eq(kvio_config_defaults(kvio_stream_trace_options, options, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_stream_t *stream = NULL;
    kvio_status_t status = kvio_stream_open_trace(path, KVIO_TRACE_AUTO, options, &stream, error,
                                                  sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    return stream;
}

/* The agent log as a trace (told by its first line): a request per turn in
 * time order, with its session and turn; its ids of 16 tokens agree with
 * the previous turn's exactly up to the block of the break kvio prefix
 * finds, and differ from there. */
Test(conversation, a_log_replays_as_a_trace_that_shares_what_its_turns_share, .timeout = 30)
{
    kvio_stream_trace_config_t options = {0};
    kvio_stream_t *stream = open_log(agent_log, &options);
    kvio_request_t *requests[8] = {0};
    size_t count = 0;
    const kvio_request_t *request;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL && count < 8)
        cr_assert_eq(kvio_request_clone(request, &requests[count++]), KVIO_OK);
    cr_assert_eq(count, 7);
    kvio_conversation_log_t *log = load(agent_log);
    kvio_prefix_result_t *result = analyze(log);
    for (size_t i = 0; i < count; i++) {
        cr_assert_eq(requests[i]->trace_block_tokens, 16);
        cr_assert(i == 0 || requests[i]->arrival_ns > requests[i - 1]->arrival_ns);
        cr_assert(requests[i]->trace_ids_cover_output, "the log has every answer's text");
    }
    /* Session 1's turns 0 and 1 are requests 0 and 1 (14 s apart). */
    cr_assert_eq(requests[1]->session_id, requests[0]->session_id);
    cr_assert_eq(requests[1]->turn, 1);
    cr_assert_eq(requests[1]->arrival_ns - requests[0]->arrival_ns, 14000000000ll);
    cr_assert_eq(requests[1]->input_tokens, result->turns[1].prompt_tokens);
    uint32_t same_blocks = result->turns[1].reusable_tokens / 16;
    for (uint32_t b = 0; b < same_blocks; b++)
        cr_assert_eq(requests[1]->trace_hash_ids[b], requests[0]->trace_hash_ids[b], "block %u", b);
    cr_assert_neq(requests[1]->trace_hash_ids[same_blocks], requests[0]->trace_hash_ids[same_blocks]);
    for (size_t i = 0; i < count; i++)
        kvio_request_destroy(requests[i]);
    kvio_prefix_result_free(result);
    kvio_conversation_log_free(log);
    kvio_stream_destroy(stream);
}

/* kvio stream --anonymize numbers the ids in the order they first appear:
 * the first request's blocks are 1, 2, 3..., two blocks share a number
 * exactly where they shared a hash, and no hash of the log's text is left. */
Test(conversation, an_anonymized_export_keeps_the_structure_and_drops_the_hashes, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t plain = test_kvio(dir, "stream", "--trace", agent_log, "-o", "plain.jsonl", NULL);
    cr_assert_eq(plain.status, 0, "%s", plain.err);
    test_run_t anonymized = test_kvio(dir, "stream", "--trace", agent_log, "--anonymize", "-o",
                                      "anonymized.jsonl", NULL);
    cr_assert_eq(anonymized.status, 0, "%s", anonymized.err);
    char path[1100];
    FILE *files[2];
    snprintf(path, sizeof(path), "%s/plain.jsonl", dir);
    files[0] = fopen(path, "r");
    snprintf(path, sizeof(path), "%s/anonymized.jsonl", dir);
    files[1] = fopen(path, "r");
    cr_assert(files[0] != NULL && files[1] != NULL);
    kvio_map_t to_number = {0}, to_hash = {0}; /* both ways: the numbering is one to one */
    uint64_t hashes[4096];
    size_t num_hashes = 0, lines = 0;
    char line[2][65536];
    while (fgets(line[0], sizeof(line[0]), files[0]) != NULL) {
        cr_assert_not_null(fgets(line[1], sizeof(line[1]), files[1]));
        json_t *rows[2] = {json_loads(line[0], 0, NULL), json_loads(line[1], 0, NULL)};
        const json_t *ids[2] = {json_object_get(rows[0], "hash_ids"),
                                json_object_get(rows[1], "hash_ids")};
        cr_assert_eq(json_array_size(ids[0]), json_array_size(ids[1]));
        cr_assert(json_array_size(ids[0]) > 0);
        for (size_t i = 0; i < json_array_size(ids[0]); i++) {
            uint64_t hash = (uint64_t)json_integer_value(json_array_get(ids[0], i));
            uint64_t number = (uint64_t)json_integer_value(json_array_get(ids[1], i));
            if (lines == 0)
                cr_assert_eq(number, i + 1, "the first request's blocks are 1, 2, 3...");
            uint32_t known = kvio_map_get(&to_number, hash);
            cr_assert(known == 0 || known == number, "hash %llu numbered twice",
                      (unsigned long long)hash);
            uint32_t back = kvio_map_get(&to_hash, number);
            cr_assert(back == 0 || hashes[back - 1] == hash, "number %llu for two hashes",
                      (unsigned long long)number);
            if (known == 0) {
                cr_assert_lt(num_hashes, 4096);
                hashes[num_hashes++] = hash;
                cr_assert_eq(kvio_map_set(&to_number, hash, (uint32_t)number), KVIO_OK);
                cr_assert_eq(kvio_map_set(&to_hash, number, (uint32_t)num_hashes), KVIO_OK);
            }
        }
        json_decref(rows[0]);
        json_decref(rows[1]);
        lines++;
    }
    cr_assert_eq(lines, 7);
    snprintf(path, sizeof(path), "%s/anonymized.jsonl", dir);
    char *whole = test_read_file(path);
    for (size_t i = 0; i < num_hashes; i++) {
        char text[32];
        snprintf(text, sizeof(text), "%llu", (unsigned long long)hashes[i]);
        cr_assert(hashes[i] <= num_hashes || !test_contains(whole, text), "hash %s is left",
                  text);
    }
    free(whole);
    fclose(files[0]);
    fclose(files[1]);
    kvio_map_fini(&to_number);
    kvio_map_fini(&to_hash);
    test_run_free(&plain);
    test_run_free(&anonymized);
    test_rmtree(dir);
    free(dir);
}

/* A log without times (ShareGPT here, told by its '['): sessions a second
 * apart and turns 10 s apart without a stream section; answers' lengths
 * from their text; a run replays it and hits the shared prefix. */
Test(conversation, a_log_without_times_gets_arrivals_and_a_run_hits_its_prefix, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *path = test_write_file(
        dir, "sharegpt.json",
        "[{\"conversations\": [{\"from\": \"human\", \"value\": \"Tell me about prefix caching "
        "in serving engines, in some detail please, with an example of two requests.\"}, "
        "{\"from\": \"gpt\", \"value\": \"A prefix cache keeps the KV blocks of prompts it has "
        "seen; a request that starts with the same tokens reuses them instead of computing "
        "them again. Two chats with one system prompt share its blocks.\"}, {\"from\": "
        "\"human\", \"value\": \"And when the cache is full?\"}]},\n"
        " {\"conversations\": [{\"from\": \"human\", \"value\": \"Hi.\"}]}]\n");
    kvio_stream_trace_config_t options = {0};
    kvio_stream_t *stream = open_log(path, &options);
    const kvio_request_t *request;
    int64_t arrivals[3];
    uint32_t outputs[3];
    size_t count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL && count < 3) {
        arrivals[count] = request->arrival_ns;
        outputs[count++] = request->output_tokens;
    }
    cr_assert_eq(count, 3);
    cr_assert_eq(arrivals[0], 0);
    cr_assert_eq(arrivals[1], 1000000000ll, "the second session a second later");
    cr_assert_eq(arrivals[2], 10000000000ll, "the second turn 10 s after the first");
    cr_assert_gt(outputs[0], 20, "the answer's tokens");
    kvio_stream_destroy(stream);
    char trace_set[512];
    snprintf(trace_set, sizeof(trace_set), "stream.trace.path=%s", path);
    test_run_t run = test_kvio(dir, "run", "endpoint", "--set", "mode=simulate", "--set",
                               trace_set, "--set", "duration=60s", "--format", "json", "-o",
                               "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    json_error_t error;
    json_t *summary = json_loads(run.out, 0, &error);
    cr_assert_not_null(summary, "%s", error.text);
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), 3);
    cr_assert_gt(test_json_number(summary, "metrics.hit_rate"), 0.2);
    json_decref(summary);
    test_run_free(&run);
    free(path);
    test_rmtree(dir);
    free(dir);
}
