/* Tests for kvio serve: the OpenAI endpoint, /metrics, the admin calls and
 * the KV events, driven as clients drive them (libcurl, a ZMQ subscriber)
 * against the kvio binary; and the request and metrics formats on their
 * own. Deadlines scale with the machine (test_seconds). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "http/http_int.h"
#include "kvio/hash.h"
#include "kvio/tokenizer.h"
#include "tests/helpers.h"

/* ---------- a kvio serve process ---------- */

typedef struct reply {
    long status;
    char *body;
    size_t length, capacity;
    size_t abort_after; /* > 0: stop reading once this many bytes came */
} reply_t;

typedef struct server {
    pid_t pid;
    int port;
    char *dir;
    char results[512];
    char err_path[512];
} server_t;

static void pause_ms(long ms)
{
    struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

/* The port the server printed ("listening on http://127.0.0.1:PORT"), the
 * index-th one; 0 while not yet. */
static int printed_port(const char *err_path, int index)
{
    char *text = test_read_file(err_path);
    int port = 0;
    const char *at = text;
    for (int i = 0; at != NULL && i <= index; i++) {
        at = strstr(at, "listening on http://127.0.0.1:");
        if (at != NULL) {
            at += strlen("listening on http://127.0.0.1:");
            if (i == index)
                port = atoi(at);
        }
    }
    free(text);
    return port;
}

static reply_t http_call(int port, const char *method, const char *path, const char *body,
                         size_t abort_after);

/* Waits until /health answers 200 (the serve ranks are ready). */
static void server_wait_ready(const server_t *server)
{
    double deadline = test_seconds(20);
    for (double waited = 0; waited < deadline; waited += 0.02) {
        reply_t reply = http_call(server->port, "GET", "/health", NULL, 0);
        free(reply.body);
        if (reply.status == 200)
            return;
        pause_ms(20);
    }
    cr_assert_fail("kvio serve was not ready within %.0f s", deadline);
}

/* Starts kvio serve with the arguments (NULL-terminated) after its own:
 * listening on a free port, results in a fresh directory. */
static server_t server_start(const char *arg, ...)
{
    server_t server = {.dir = test_tmpdir()};
    snprintf(server.results, sizeof(server.results), "%s/results", server.dir);
    snprintf(server.err_path, sizeof(server.err_path), "%s/err.txt", server.dir);
    const char *argv[64] = {test_kvio_binary(), "serve", "--listen", "127.0.0.1:0", "-o",
                            server.results};
    size_t argc = 6;
    va_list args;
    va_start(args, arg);
    for (const char *next = arg; next != NULL && argc < 62; next = va_arg(args, const char *))
        argv[argc++] = next;
    va_end(args);
    argv[argc] = NULL;
    server.pid = fork();
    cr_assert_neq(server.pid, -1);
    if (server.pid == 0) {
        /* A test that fails midway leaves no server behind. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int err = open(server.err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int out = open("/dev/null", O_WRONLY);
        dup2(err, 2);
        dup2(out, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    double deadline = test_seconds(20);
    for (double waited = 0; server.port == 0 && waited < deadline; waited += 0.01) {
        server.port = printed_port(server.err_path, 0);
        int status;
        if (server.port == 0 && waitpid(server.pid, &status, WNOHANG) == server.pid) {
            char *text = test_read_file(server.err_path);
            cr_assert_fail("kvio serve exited: %s", text != NULL ? text : "");
        }
        pause_ms(10);
    }
    cr_assert_neq(server.port, 0, "kvio serve printed no port");
    server_wait_ready(&server);
    return server;
}

/* Stops it with sig and returns its exit status (128 + a signal). */
static int server_stop(server_t *server, int sig)
{
    if (sig != 0)
        kill(server->pid, sig);
    double deadline = test_seconds(30);
    int status = 0;
    for (double waited = 0; waited < deadline; waited += 0.01) {
        if (waitpid(server->pid, &status, WNOHANG) == server->pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pause_ms(10);
    }
    kill(server->pid, SIGKILL);
    waitpid(server->pid, &status, 0);
    cr_assert_fail("kvio serve did not stop within %.0f s", deadline);
    return -1;
}

static void server_free(server_t *server)
{
    test_rmtree(server->dir);
    free(server->dir);
}

static json_t *server_summary(const server_t *server)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/summary.json", server->results);
    json_error_t error;
    json_t *summary = json_load_file(path, 0, &error);
    cr_assert_not_null(summary, "%s: %s", path, error.text);
    return summary;
}

/* ---------- an HTTP client ---------- */

static size_t collect(char *data, size_t size, size_t count, void *context)
{
    reply_t *reply = context;
    kvio_http_append(&reply->body, &reply->length, &reply->capacity, data, size * count);
    if (reply->abort_after > 0 && reply->length >= reply->abort_after)
        return 0; /* the client goes away */
    return size * count;
}

/* method path (body NULL: GET) on the server's port, with the headers of
 * headers (NULL-terminated; NULL: Content-Type: application/json only);
 * the reply. */
static reply_t http_call_with(int port, const char *method, const char *path, const char *body,
                              size_t abort_after, const char *const *headers_in)
{
    reply_t reply = {.abort_after = abort_after};
    kvio_http_append(&reply.body, &reply.length, &reply.capacity, "", 0);
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    CURL *curl = curl_easy_init();
    cr_assert_not_null(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *headers = NULL;
    if (headers_in == NULL)
        headers = curl_slist_append(NULL, "Content-Type: application/json");
    for (size_t h = 0; headers_in != NULL && headers_in[h] != NULL; h++)
        headers = curl_slist_append(headers, headers_in[h]);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    if (body != NULL)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)(test_seconds(30) * 1000));
    CURLcode code = curl_easy_perform(curl);
    if (abort_after == 0)
        cr_assert_eq(code, CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(code));
    if (code == CURLE_COULDNT_CONNECT)
        reply.status = -1; /* (abort_after: may fail) */
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return reply;
}

static reply_t http_call(int port, const char *method, const char *path, const char *body,
                         size_t abort_after)
{
    return http_call_with(port, method, path, body, abort_after, NULL);
}

static reply_t post(int port, const char *path, const char *body)
{
    return http_call(port, "POST", path, body, 0);
}

static reply_t get(int port, const char *path)
{
    return http_call(port, "GET", path, NULL, 0);
}

static json_t *reply_json(const reply_t *reply)
{
    json_error_t error;
    json_t *value = json_loads(reply->body, 0, &error);
    cr_assert_not_null(value, "not JSON (%s): %s", error.text, reply->body);
    return value;
}

/* The JSON events of a server-sent event stream, and whether it ended with
 * [DONE]. */
static json_t *sse_events(const char *text, bool *done_p)
{
    json_t *events = json_array();
    *done_p = false;
    for (const char *at = strstr(text, "data: "); at != NULL; at = strstr(at, "data: ")) {
        at += 6;
        const char *end = strstr(at, "\n\n");
        cr_assert_not_null(end, "an event without its blank line: %s", at);
        if (strncmp(at, "[DONE]", 6) == 0) {
            *done_p = true;
        } else {
            json_error_t error;
            json_t *event = json_loadb(at, (size_t)(end - at), 0, &error);
            cr_assert_not_null(event, "%s", error.text);
            json_array_append_new(events, event);
        }
        at = end;
    }
    return events;
}

/* A prompt of count token ids from first on, as JSON text. */
static char *token_prompt(unsigned first, unsigned count)
{
    json_t *ids = json_array();
    for (unsigned i = 0; i < count; i++)
        json_array_append_new(ids, json_integer(first + i));
    char *text = json_dumps(ids, JSON_COMPACT);
    json_decref(ids);
    return text;
}

static char *completion_body(unsigned first, unsigned count, unsigned max_tokens, bool stream)
{
    char *prompt = token_prompt(first, count);
    char *body = malloc(strlen(prompt) + 256);
    sprintf(body, "{\"prompt\": %s, \"max_tokens\": %u, \"ignore_eos\": true, \"stream\": %s%s}",
            prompt, max_tokens, stream ? "true" : "false",
            stream ? ", \"stream_options\": {\"include_usage\": true}" : "");
    free(prompt);
    return body;
}

/* ---------- completions ---------- */

Test(http, completions_whole_and_streamed, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    reply_t models = get(server.port, "/v1/models");
    json_t *list = reply_json(&models);
    cr_assert_str_eq(test_json_string(list, "data.0.id"), "llama3-8b");
    cr_assert_str_eq(test_json_string(list, "data.0.root"), "llama3-8b");
    cr_assert_eq(test_json_integer(list, "data.0.max_model_len"), 512);
    json_decref(list);
    free(models.body);

    /* Whole: the text of 5 tokens, finish length, usage. */
    reply_t whole = post(server.port, "/v1/completions",
                         "{\"prompt\": \"Hello world, this is kvio serving\", \"max_tokens\": 5,"
                         " \"ignore_eos\": true}");
    cr_assert_eq(whole.status, 200, "%s", whole.body);
    json_t *response = reply_json(&whole);
    cr_assert_str_eq(test_json_string(response, "object"), "text_completion");
    cr_assert(strncmp(test_json_string(response, "id"), "cmpl-", 5) == 0);
    cr_assert_str_eq(test_json_string(response, "choices.0.finish_reason"), "length");
    cr_assert_eq(test_json_integer(response, "usage.completion_tokens"), 5);
    long long prompt_tokens = test_json_integer(response, "usage.prompt_tokens");
    cr_assert_gt(prompt_tokens, 4);
    cr_assert_eq(test_json_integer(response, "usage.total_tokens"), prompt_tokens + 5);
    /* Five words, each " " and 1-3 letters. */
    char text[256];
    snprintf(text, sizeof(text), "%s", test_json_string(response, "choices.0.text"));
    size_t words = 0;
    for (const char *c = text; *c != '\0'; c++)
        words += *c == ' ';
    cr_assert_eq(words, 5, "'%s'", text);
    json_decref(response);
    free(whole.body);

    /* Streamed: one chunk per token, the last with finish_reason, then usage
     * and [DONE]; the same text as the whole answer of the same prompt. */
    reply_t streamed = post(server.port, "/v1/completions",
                            "{\"prompt\": \"Hello world, this is kvio serving\", \"max_tokens\": 5,"
                            " \"ignore_eos\": true, \"stream\": true,"
                            " \"stream_options\": {\"include_usage\": true}}");
    cr_assert_eq(streamed.status, 200);
    bool done = false;
    json_t *events = sse_events(streamed.body, &done);
    cr_assert(done);
    cr_assert_eq(json_array_size(events), 6, "%s", streamed.body);
    char joined[256] = "";
    for (size_t i = 0; i < 5; i++) {
        json_t *event = json_array_get(events, i);
        strcat(joined, test_json_string(event, "choices.0.text"));
        cr_assert(json_is_null(json_object_get(json_array_get(json_object_get(event, "choices"),
                                                              0),
                                               "finish_reason")) == (i < 4));
    }
    cr_assert_str_eq(joined, text);
    json_t *usage = json_array_get(events, 5);
    cr_assert_eq(json_array_size(json_object_get(usage, "choices")), 0);
    cr_assert_eq(test_json_integer(usage, "usage.completion_tokens"), 5);
    /* The same prompt again: its full blocks are cached. */
    cr_assert_eq(test_json_integer(usage, "usage.prompt_tokens_details.cached_tokens"),
                 (prompt_tokens - 1) / 16 * 16);
    json_decref(events);
    free(streamed.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

Test(http, chat_streams_a_role_chunk_with_the_first_token, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    reply_t reply = post(server.port, "/v1/chat/completions",
                         "{\"model\": \"llama3-8b\", \"messages\": [{\"role\": \"system\", "
                         "\"content\": \"You are terse.\"}, {\"role\": \"user\", \"content\": "
                         "[{\"type\": \"text\", \"text\": \"Say hi\"}]}], "
                         "\"max_completion_tokens\": 3, \"ignore_eos\": true, \"stream\": true}");
    cr_assert_eq(reply.status, 200);
    bool done = false;
    json_t *events = sse_events(reply.body, &done);
    cr_assert(done);
    cr_assert_eq(json_array_size(events), 4, "%s", reply.body);
    cr_assert_str_eq(test_json_string(json_array_get(events, 0), "object"),
                     "chat.completion.chunk");
    cr_assert_str_eq(test_json_string(json_array_get(events, 0), "choices.0.delta.role"),
                     "assistant");
    cr_assert_str_eq(test_json_string(json_array_get(events, 3), "choices.0.finish_reason"),
                     "length");
    json_decref(events);
    free(reply.body);
    /* Whole, with the default max: stops for "stop" at a length drawn from
     * the workload's output lengths, within the context. */
    reply = post(server.port, "/v1/chat/completions",
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    cr_assert_eq(reply.status, 200, "%s", reply.body);
    json_t *response = reply_json(&reply);
    cr_assert_str_eq(test_json_string(response, "object"), "chat.completion");
    cr_assert_str_eq(test_json_string(response, "choices.0.message.role"), "assistant");
    cr_assert_gt(test_json_integer(response, "usage.completion_tokens"), 0);
    json_decref(response);
    free(reply.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* Each bad request: its status and the field its error names. */
Test(http, bad_requests_get_openai_errors, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--max-body", "4KiB",
                                   NULL);
    char *long_prompt = token_prompt(1, 600);
    char long_body[8192];
    snprintf(long_body, sizeof(long_body), "{\"prompt\": %s}", long_prompt);
    free(long_prompt);
    char *fits = token_prompt(1, 500);
    char big_max[8192];
    snprintf(big_max, sizeof(big_max), "{\"prompt\": %s, \"max_tokens\": 100}", fits);
    free(fits);
    char huge[6000];
    memset(huge, 'a', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    char huge_body[6100];
    snprintf(huge_body, sizeof(huge_body), "{\"prompt\": \"%s\"}", huge);
    struct {
        const char *path, *method, *body;
        long status;
        const char *param, *message;
    } cases[] = {
        {"/v1/completions", "POST", "{not json", 400, NULL, "not valid JSON"},
        {"/v1/completions", "POST", "[1, 2]", 400, NULL, "JSON object"},
        {"/v1/completions", "POST", "{\"max_tokens\": 3}", 400, "prompt", "missing"},
        {"/v1/completions", "POST", "{\"prompt\": \"x\", \"n\": 2, \"stream\": true}", 400, "n",
         "without streaming"},
        {"/v1/completions", "POST", "{\"prompt\": \"x\", \"n\": 200}", 400, "n", "at most 128"},
        {"/v1/completions", "POST", "{\"prompt\": \"x\", \"max_tokens\": \"5\"}", 400,
         "max_tokens", "an integer"},
        {"/v1/completions", "POST", "{\"prompt\": [1, -2]}", 400, "prompt", "token id"},
        {"/v1/completions", "POST", "{\"prompt\": \"x\", \"stream_options\": {}}", 400,
         "stream_options", "stream=True"},
        {"/v1/completions", "POST", "{\"prompt\": \"x\", \"model\": \"gpt-9\"}", 404, "model",
         "does not exist"},
        {"/v1/completions", "POST", long_body, 400, "input_tokens", "context length"},
        {"/v1/completions", "POST", big_max, 400, "max_tokens", "output tokens"},
        {"/v1/chat/completions", "POST", "{\"messages\": []}", 400, "messages", "non-empty"},
        {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"wizard\", \"content\": "
         "\"x\"}]}", 400, "messages[0].role", "unknown role"},
        {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\"}]}", 400,
         "messages[0].content", "missing"},
        {"/v1/completions", "POST", huge_body, 413, NULL, "larger than"},
        {"/v2/nothing", "GET", NULL, 404, NULL, "Not Found"},
        {"/v1/completions", "GET", NULL, 405, NULL, "Method Not Allowed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        reply_t reply = http_call(server.port, cases[i].method, cases[i].path, cases[i].body, 0);
        cr_assert_eq(reply.status, cases[i].status, "case %zu: %ld %s", i, reply.status,
                     reply.body);
        json_t *error = reply_json(&reply);
        cr_assert_eq(test_json_integer(error, "error.code"), cases[i].status);
        cr_assert(test_contains(test_json_string(error, "error.message"), cases[i].message),
                  "case %zu: %s", i, reply.body);
        const json_t *param = test_json(error, "error.param");
        if (cases[i].param != NULL)
            cr_assert_str_eq(json_string_value(param), cases[i].param, "case %zu", i);
        else
            cr_assert(json_is_null(param), "case %zu: %s", i, reply.body);
        json_decref(error);
        free(reply.body);
    }
    /* Nothing of that reached the engine, and the server still serves. */
    reply_t reply = post(server.port, "/v1/completions", "{\"prompt\": \"ok\", \"max_tokens\": 2}");
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), 1);
    cr_assert_eq(test_json_integer(summary, "metrics.server.completions"), 1);
    json_decref(summary);
    server_free(&server);
}

/* ---------- clients that go away, and stopping ---------- */

/* The value of the first /metrics sample that starts with prefix (a name
 * and the first of its labels). */
static double metric(int port, const char *prefix)
{
    reply_t reply = get(port, "/metrics");
    const char *at = strstr(reply.body, prefix);
    cr_assert_not_null(at, "no %s in /metrics", prefix);
    double value = strtod(strchr(at, '}') + 1, NULL);
    free(reply.body);
    return value;
}

/* The KV cache in use on rank 0, from /metrics. */
static double kv_usage(int port)
{
    return metric(port, "vllm:kv_cache_usage_perc{engine=\"0\"");
}

/* n (GRPO's group, vLLM's parallel sampling): n choices of one prompt, each
 * its own output, their prompt's blocks computed once and shared. */
Test(http, n_returns_n_choices_sharing_the_prompt, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    char *prompt = token_prompt(1000, 160);
    char body[4096];
    snprintf(body, sizeof(body), "{\"prompt\": %s, \"max_tokens\": 8, \"ignore_eos\": true, "
             "\"n\": 4}", prompt);
    free(prompt);
    double hits_before = metric(server.port, "vllm:prefix_cache_hits_total{");
    reply_t reply = post(server.port, "/v1/completions", body);
    cr_assert_eq(reply.status, 200, "%s", reply.body);
    json_t *response = reply_json(&reply);
    json_t *choices = json_object_get(response, "choices");
    cr_assert_eq(json_array_size(choices), 4, "%s", reply.body);
    size_t differ = 0;
    const char *first = test_json_string(response, "choices.0.text");
    for (size_t c = 0; c < 4; c++) {
        json_t *choice = json_array_get(choices, c);
        cr_assert_eq(json_integer_value(json_object_get(choice, "index")), (json_int_t)c);
        cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "length");
        differ += strcmp(json_string_value(json_object_get(choice, "text")), first) != 0;
    }
    cr_assert_geq(differ, 2, "each choice has its own text: %s", reply.body);
    cr_assert_eq(test_json_integer(response, "usage.prompt_tokens"), 160);
    cr_assert_eq(test_json_integer(response, "usage.completion_tokens"), 4 * 8);
    cr_assert_eq(test_json_integer(response, "usage.total_tokens"), 160 + 4 * 8);
    json_decref(response);
    free(reply.body);
    /* The prompt's 9 full blocks (of its 159 prefilled tokens) were
     * computed once: the other three choices hit them. */
    double hits = metric(server.port, "vllm:prefix_cache_hits_total{") - hits_before;
    cr_assert_geq(hits, 3 * 9 * 16, "prefix cache hits %.0f tokens", hits);
    /* Chat too; best_of stays refused with why. */
    reply_t chat = post(server.port, "/v1/chat/completions",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                        "\"max_tokens\": 4, \"n\": 3}");
    cr_assert_eq(chat.status, 200, "%s", chat.body);
    json_t *chat_response = reply_json(&chat);
    cr_assert_eq(json_array_size(json_object_get(chat_response, "choices")), 3);
    cr_assert_str_eq(test_json_string(chat_response, "choices.2.message.role"), "assistant");
    json_decref(chat_response);
    free(chat.body);
    reply_t best_of = post(server.port, "/v1/completions",
                           "{\"prompt\": \"x\", \"n\": 2, \"best_of\": 4}");
    cr_assert_eq(best_of.status, 400);
    cr_assert(test_contains(best_of.body, "ask for n choices instead"), "%s", best_of.body);
    free(best_of.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* The request OpenAI's Python SDK (openai 1.x) sends for
 * client.completions.create(model=..., prompt=..., max_tokens=8, n=4) and
 * client.chat.completions.create(messages=..., model=..., max_tokens=8,
 * n=4): its headers, and its body as openapi_dumps writes it (compact, the
 * keys in the order of create()'s parameters, the unset ones left out).
 * The package is not installed here (neither pip's nor a Debian one), and
 * the tests may not reach the network, so libcurl sends those exact bytes;
 * the answer must hold what the SDK's Completion and ChatCompletion models
 * read: n choices, indexed 0..n-1, each with its finish_reason. */
static const char *const openai_python_headers[] = {
    "Accept: application/json",
    "Content-Type: application/json",
    "User-Agent: OpenAI/Python 1.54.4",
    "X-Stainless-Lang: python",
    "X-Stainless-Package-Version: 1.54.4",
    "X-Stainless-OS: Linux",
    "X-Stainless-Arch: x64",
    "X-Stainless-Runtime: CPython",
    "X-Stainless-Runtime-Version: 3.11.2",
    "Authorization: Bearer sk-kvio",
    "X-Stainless-Async: false",
    "x-stainless-retry-count: 0",
    "x-stainless-read-timeout: 600.0",
    NULL,
};

static void assert_sdk_choices(const reply_t *reply, bool chat, size_t n)
{
    cr_assert_eq(reply->status, 200, "%s", reply->body);
    json_t *response = reply_json(reply);
    cr_assert_str_eq(test_json_string(response, "object"),
                     chat ? "chat.completion" : "text_completion");
    cr_assert(json_is_string(json_object_get(response, "id")), "%s", reply->body);
    cr_assert(json_is_integer(json_object_get(response, "created")), "%s", reply->body);
    cr_assert(json_is_string(json_object_get(response, "model")), "%s", reply->body);
    json_t *choices = json_object_get(response, "choices");
    cr_assert_eq(json_array_size(choices), n, "%s", reply->body);
    for (size_t c = 0; c < n; c++) {
        json_t *choice = json_array_get(choices, c);
        cr_assert_eq(json_integer_value(json_object_get(choice, "index")), (json_int_t)c);
        cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "length");
        cr_assert_not_null(json_object_get(choice, "logprobs"), "%s", reply->body);
        json_t *text = chat ? json_object_get(json_object_get(choice, "message"), "content")
                            : json_object_get(choice, "text");
        cr_assert(json_is_string(text) && json_string_length(text) > 0, "%s", reply->body);
        if (chat)
            cr_assert_str_eq(
                json_string_value(json_object_get(json_object_get(choice, "message"), "role")),
                "assistant");
    }
    cr_assert_eq(test_json_integer(response, "usage.completion_tokens"), (long long)(n * 8));
    cr_assert_eq(test_json_integer(response, "usage.total_tokens"),
                 test_json_integer(response, "usage.prompt_tokens") + (long long)(n * 8));
    json_decref(response);
}

Test(http, the_openai_python_sdks_n_4_request_gets_4_choices, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    reply_t models = get(server.port, "/v1/models");
    json_t *listed = reply_json(&models);
    char model[256];
    snprintf(model, sizeof(model), "%s", test_json_string(listed, "data.0.id"));
    json_decref(listed);
    free(models.body);
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"prompt\":\"Solve: 12 * 7 = ?\",\"max_tokens\":8,"
             "\"n\":4}", model);
    reply_t reply = http_call_with(server.port, "POST", "/v1/completions", body, 0,
                                   openai_python_headers);
    assert_sdk_choices(&reply, false, 4);
    free(reply.body);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Solve: 12 * 7 = ?\"}],"
             "\"model\":\"%s\",\"max_tokens\":8,\"n\":4}", model);
    reply = http_call_with(server.port, "POST", "/v1/chat/completions", body, 0,
                           openai_python_headers);
    assert_sdk_choices(&reply, true, 4);
    free(reply.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

Test(http, a_client_that_disconnects_mid_stream_frees_its_blocks, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    char *body = completion_body(1, 100, 400, true);
    /* Two chunks in, the client goes away. */
    reply_t reply = http_call(server.port, "POST", "/v1/completions", body, 300);
    free(body);
    cr_assert_geq(reply.length, 300);
    free(reply.body);
    /* The engine takes it out: no block stays in use. */
    double deadline = test_seconds(10);
    double usage = 1;
    for (double waited = 0; waited < deadline && (usage = kv_usage(server.port)) > 0;
         waited += 0.05)
        pause_ms(50);
    cr_assert_eq(usage, 0.0, "KV still in use after the client left");
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.aborted_requests"), 1);
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), 0);
    cr_assert_eq(test_json_integer(summary, "metrics.server.client_disconnects"), 1);
    json_decref(summary);
    server_free(&server);
}

typedef struct streamer {
    int port;
    unsigned first;
    reply_t reply;
} streamer_t;

static void *stream_one(void *context)
{
    streamer_t *streamer = context;
    char *body = completion_body(streamer->first, 50, 300, true);
    streamer->reply = post(streamer->port, "/v1/completions", body);
    free(body);
    return NULL;
}

/* SIGTERM with streams in flight: drain finishes them (each ends with its
 * finish reason and [DONE]), abort ends them with "abort"; either way the
 * results are written, complete, and the exit status is 0. */
static void sigterm_with_streams(bool abort_in_flight)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB",
                                   abort_in_flight ? "--abort" : "--drain", NULL);
    enum { STREAMS = 3 };
    streamer_t streamers[STREAMS];
    pthread_t threads[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        streamers[i] = (streamer_t){.port = server.port, .first = 1000u * (unsigned)(i + 1)};
        pthread_create(&threads[i], NULL, stream_one, &streamers[i]);
    }
    /* Once every stream has its first token, the signal. */
    double deadline = test_seconds(20);
    for (double waited = 0; waited < deadline; waited += 0.02) {
        reply_t metrics = get(server.port, "/metrics");
        const char *at = strstr(metrics.body, "vllm:num_requests_running{engine=\"0\"");
        double running = at != NULL ? strtod(strchr(at, '}') + 1, NULL) : 0;
        free(metrics.body);
        if (running >= STREAMS)
            break;
        pause_ms(20);
    }
    kill(server.pid, SIGTERM);
    for (int i = 0; i < STREAMS; i++) {
        pthread_join(threads[i], NULL);
        bool done = false;
        json_t *events = sse_events(streamers[i].reply.body, &done);
        cr_assert(done, "stream %d ended without [DONE]", i);
        /* The finish reason is on the last chunk with choices. */
        const char *reason = NULL;
        for (size_t e = 0; e < json_array_size(events); e++) {
            json_t *choices = json_object_get(json_array_get(events, e), "choices");
            if (json_array_size(choices) > 0)
                reason = json_string_value(json_object_get(json_array_get(choices, 0),
                                                           "finish_reason"));
        }
        cr_assert_not_null(reason);
        cr_assert_str_eq(reason, abort_in_flight ? "abort" : "length");
        json_decref(events);
        free(streamers[i].reply.body);
    }
    cr_assert_eq(server_stop(&server, 0), 0);
    json_t *summary = server_summary(&server);
    cr_assert(test_json_true(summary, "complete"));
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), abort_in_flight ? 0 : STREAMS);
    if (abort_in_flight) {
        cr_assert_eq(test_json_integer(summary, "metrics.aborted_requests"), STREAMS);
        /* #59 item 9: all aborted is its own verdict, not an overload. */
        const json_t *warnings = json_object_get(summary, "warnings");
        bool all_aborted = false, overload = false;
        for (size_t w = 0; w < json_array_size(warnings); w++) {
            const char *kind = json_string_value(json_object_get(json_array_get(warnings, w),
                                                                 "kind"));
            all_aborted = all_aborted || (kind != NULL && strcmp(kind, "all_aborted") == 0);
            overload = overload || (kind != NULL && strcmp(kind, "overload") == 0);
        }
        cr_assert(all_aborted && !overload, "warnings: %s", json_dumps(warnings, 0));
        cr_assert(!test_json_true(summary, "valid"));
    }
    json_decref(summary);
    server_free(&server);
}

Test(http, sigterm_drains_the_streams_in_flight, .timeout = 120)
{
    sigterm_with_streams(false);
}

Test(http, sigterm_with_abort_ends_the_streams_in_flight, .timeout = 120)
{
    sigterm_with_streams(true);
}

/* ---------- /metrics ---------- */

/* A Prometheus text sample: name, labels text and value. */
typedef struct sample {
    char name[128];
    char labels[256];
    double value;
} sample_t;

/* Parses Prometheus text format 0.0.4 as a scraper must: every sample of a
 * family declared by # TYPE before it, values numbers, histogram buckets
 * cumulative and ending at +Inf equal to _count. Returns the samples. */
static sample_t *parse_prometheus(const char *text, size_t *count_p)
{
    size_t capacity = 4096, count = 0;
    sample_t *samples = calloc(capacity, sizeof(*samples));
    char typed[128][128];
    size_t num_typed = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[128], type[32];
            cr_assert_eq(sscanf(line + 7, "%127s %31s", name, type), 2, "%s", line);
            cr_assert(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                          strcmp(type, "histogram") == 0,
                      "%s", line);
            snprintf(typed[num_typed++], 128, "%s", name);
            continue;
        }
        cr_assert_neq(line[0], '#', "%s", line);
        sample_t *sample = &samples[count++];
        cr_assert_lt(count, capacity);
        const char *brace = strchr(line, '{');
        const char *close = strchr(line, '}');
        cr_assert(brace != NULL && close != NULL && close > brace, "%s", line);
        snprintf(sample->name, sizeof(sample->name), "%.*s", (int)(brace - line), line);
        snprintf(sample->labels, sizeof(sample->labels), "%.*s", (int)(close - brace - 1),
                 brace + 1);
        char *end = NULL;
        sample->value = strtod(close + 2, &end);
        cr_assert(close[1] == ' ' && end != close + 2 && *end == '\0', "%s", line);
        bool declared = false;
        for (size_t t = 0; t < num_typed && !declared; t++) {
            size_t length = strlen(typed[t]);
            declared = strncmp(sample->name, typed[t], length) == 0 &&
                       (sample->name[length] == '\0' || strcmp(sample->name + length, "_bucket") == 0 ||
                        strcmp(sample->name + length, "_count") == 0 ||
                        strcmp(sample->name + length, "_sum") == 0);
        }
        cr_assert(declared, "no # TYPE for %s", sample->name);
    }
    free(copy);
    /* Buckets: cumulative, and +Inf is the count. */
    for (size_t i = 1; i < count; i++) {
        if (strstr(samples[i].name, "_bucket") != NULL &&
            strcmp(samples[i].name, samples[i - 1].name) == 0)
            cr_assert_geq(samples[i].value, samples[i - 1].value, "%s", samples[i].labels);
        if (strstr(samples[i].name, "_count") != NULL)
            cr_assert_eq(samples[i].value, samples[i - 1].value, "%s: +Inf bucket %g, count %g",
                         samples[i].name, samples[i - 1].value, samples[i].value);
    }
    *count_p = count;
    return samples;
}

/* The sum over samples named name whose labels hold with (NULL: all). */
static double sample_sum(const sample_t *samples, size_t count, const char *name,
                         const char *with)
{
    double sum = 0;
    for (size_t i = 0; i < count; i++)
        if (strcmp(samples[i].name, name) == 0 && (with == NULL || strstr(samples[i].labels, with)))
            sum += samples[i].value;
    return sum;
}

Test(http, metrics_parse_as_prometheus_and_equal_the_summary, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    for (unsigned i = 0; i < 4; i++) {
        char *body = completion_body(1, 40 + 10 * i, 6 + i, i % 2 == 1);
        reply_t reply = post(server.port, "/v1/completions", body);
        cr_assert_eq(reply.status, 200);
        free(body);
        free(reply.body);
    }
    reply_t reply = get(server.port, "/metrics");
    cr_assert_eq(reply.status, 200);
    size_t count = 0;
    sample_t *samples = parse_prometheus(reply.body, &count);
    /* promtool, where Debian's prometheus package is installed, agrees. */
    if (access("/usr/bin/promtool", X_OK) == 0) {
        char path[600];
        snprintf(path, sizeof(path), "%s/metrics.txt", server.dir);
        FILE *file = fopen(path, "w");
        fputs(reply.body, file);
        fclose(file);
        char command[700];
        snprintf(command, sizeof(command), "promtool check metrics < %s >/dev/null 2>&1", path);
        cr_assert_eq(system(command), 0, "promtool check metrics failed");
    }
    free(reply.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    struct {
        const char *metric, *summary_key;
    } pairs[] = {
        {"vllm:prompt_tokens_total", "metrics.input_tokens"},
        {"vllm:generation_tokens_total", "metrics.output_tokens"},
        {"vllm:prefix_cache_queries_total", "metrics.prefix_cache_queries"},
        {"vllm:prefix_cache_hits_total", "metrics.prefix_cache_hits"},
        {"vllm:num_preemptions_total", "metrics.preemptions"},
        {"vllm:request_success_total", "metrics.completed"},
        {"vllm:e2e_request_latency_seconds_count", "metrics.completed"},
        {"vllm:time_to_first_token_seconds_count", "metrics.completed"},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        cr_assert_eq(sample_sum(samples, count, pairs[i].metric, NULL),
                     (double)test_json_integer(summary, pairs[i].summary_key), "%s",
                     pairs[i].metric);
    cr_assert_gt(sample_sum(samples, count, "vllm:prefix_cache_hits_total", NULL), 0);
    cr_assert_eq(sample_sum(samples, count, "vllm:request_success_total",
                            "finished_reason=\"length\""),
                 4);
    /* ITL: one sample per step after the first token, vLLM's way. */
    cr_assert_eq(sample_sum(samples, count, "vllm:inter_token_latency_seconds_count", NULL),
                 (double)(6 + 7 + 8 + 9 - 4));
    json_decref(summary);
    free(samples);
    server_free(&server);
}

/* ---------- KV events ---------- */

/* A decoded batch: its sequence number and events. */
typedef struct batch {
    uint64_t sequence;
    char *data;               /* the payload: the unpacked strings point into it */
    msgpack_unpacked unpacked;
} batch_t;

static void batch_free(batch_t *batch)
{
    msgpack_unpacked_destroy(&batch->unpacked);
    free(batch->data);
}

static bool receive_batch(void *socket, batch_t *batch_p, int timeout_ms)
{
    zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    char topic[64], sequence[8];
    if (zmq_recv(socket, topic, sizeof(topic), 0) < 0)
        return false;
    cr_assert_eq(zmq_recv(socket, sequence, sizeof(sequence), 0), 8);
    zmq_msg_t payload;
    zmq_msg_init(&payload);
    cr_assert_geq(zmq_msg_recv(&payload, socket, 0), 0);
    batch_p->sequence = 0;
    for (int i = 0; i < 8; i++)
        batch_p->sequence = batch_p->sequence << 8 | (unsigned char)sequence[i];
    size_t size = zmq_msg_size(&payload);
    batch_p->data = malloc(size + 1);
    memcpy(batch_p->data, zmq_msg_data(&payload), size);
    zmq_msg_close(&payload);
    msgpack_unpacked_init(&batch_p->unpacked);
    size_t offset = 0;
    cr_assert_eq(msgpack_unpack_next(&batch_p->unpacked, batch_p->data, size, &offset),
                 MSGPACK_UNPACK_SUCCESS);
    return true;
}

static const msgpack_object *map_get(const msgpack_object *map, const char *key)
{
    cr_assert_eq(map->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *pair = &map->via.map.ptr[i];
        if (pair->key.type == MSGPACK_OBJECT_STR && pair->key.via.str.size == strlen(key) &&
            memcmp(pair->key.via.str.ptr, key, pair->key.via.str.size) == 0)
            return &pair->val;
    }
    cr_assert_fail("no '%s' in the event", key);
    return NULL;
}

static bool is_type(const msgpack_object *event, const char *type)
{
    const msgpack_object *tag = map_get(event, "type");
    return tag->via.str.size == strlen(type) && memcmp(tag->via.str.ptr, type, tag->via.str.size) == 0;
}

Test(http, kv_events_name_every_stored_and_evicted_block_in_order, .timeout = 120)
{
    int port = test_free_port();
    char endpoint[64], connect_to[64];
    snprintf(endpoint, sizeof(endpoint), "tcp://*:%d", port);
    snprintf(connect_to, sizeof(connect_to), "tcp://127.0.0.1:%d", port);
    /* Eight blocks of 16: the third distinct prompt evicts the first's. */
    server_t server = server_start("--set", "serve.kvcache.blocks=8", "--kv-events", endpoint,
                                   NULL);
    void *context = zmq_ctx_new();
    void *socket = zmq_socket(context, ZMQ_SUB);
    zmq_setsockopt(socket, ZMQ_SUBSCRIBE, "", 0);
    cr_assert_eq(zmq_connect(socket, connect_to), 0);
    /* The subscription takes a moment: a warm-up request until its events come. */
    batch_t batch;
    bool warm = false;
    for (int attempt = 0; attempt < 50 && !warm; attempt++) {
        reply_t reply = post(server.port, "/v1/completions",
                             "{\"prompt\": [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9], "
                             "\"max_tokens\": 1}");
        free(reply.body);
        warm = receive_batch(socket, &batch, 200);
        if (warm)
            batch_free(&batch);
    }
    cr_assert(warm, "no KV event came");
    uint64_t last_sequence = batch.sequence;
    /* The warm-up's block goes first (LRU, it was freed first). */
    reply_t reset = post(server.port, "/reset_prefix_cache", "");
    cr_assert_eq(reset.status, 200);
    free(reset.body);
    cr_assert(receive_batch(socket, &batch, (int)(test_seconds(5) * 1000)));
    cr_assert_eq(batch.sequence, last_sequence + 1);
    const msgpack_object *events = &batch.unpacked.data.via.array.ptr[1];
    cr_assert_eq(events->via.array.size, 1);
    cr_assert(is_type(&events->via.array.ptr[0], "AllBlocksCleared"));
    last_sequence = batch.sequence;
    batch_free(&batch);

    /* Three prompts of 48 tokens (3 blocks each), one output token: their
     * blocks are stored as chains; the third evicts the first's, oldest
     * first. */
    enum { PROMPTS = 3, BLOCKS = 3 };
    uint64_t expected[PROMPTS][BLOCKS];
    for (unsigned p = 0; p < PROMPTS; p++) {
        uint32_t tokens[48];
        for (unsigned t = 0; t < 48; t++)
            tokens[t] = 100 * (p + 1) + t;
        kvio_hash_t hash = {0, 0};
        for (unsigned b = 0; b < BLOCKS; b++) {
            hash = kvio_hash_tokens(b > 0 ? &hash : NULL, tokens + 16 * b, 16, NULL, 0);
            expected[p][b] = hash.low;
        }
        char *body = completion_body(100 * (p + 1), 48, 1, false);
        reply_t reply = post(server.port, "/v1/completions", body);
        cr_assert_eq(reply.status, 200, "%s", reply.body);
        free(body);
        free(reply.body);
    }
    uint64_t stored[16], removed[16];
    size_t num_stored = 0, num_removed = 0;
    while (num_stored < PROMPTS * BLOCKS &&
           receive_batch(socket, &batch, (int)(test_seconds(5) * 1000))) {
        cr_assert_eq(batch.sequence, last_sequence + 1, "sequence numbers step by one");
        last_sequence = batch.sequence;
        const msgpack_object *array = &batch.unpacked.data;
        cr_assert_eq(array->type, MSGPACK_OBJECT_ARRAY);
        cr_assert_eq(array->via.array.size, 3); /* [ts, events, data_parallel_rank] */
        cr_assert_eq(array->via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
        cr_assert_eq(array->via.array.ptr[2].via.u64, 0);
        const msgpack_object *list = &array->via.array.ptr[1];
        for (uint32_t e = 0; e < list->via.array.size; e++) {
            const msgpack_object *event = &list->via.array.ptr[e];
            const msgpack_object *hashes = map_get(event, "block_hashes");
            if (is_type(event, "BlockStored")) {
                const msgpack_object *tokens = map_get(event, "token_ids");
                cr_assert_eq(map_get(event, "block_size")->via.u64, 16);
                cr_assert_eq(tokens->via.array.size, 16 * hashes->via.array.size);
                /* A chain: the parent of a request's first block is nil. */
                unsigned prompt = (unsigned)(tokens->via.array.ptr[0].via.u64 / 100) - 1;
                unsigned block = (unsigned)(tokens->via.array.ptr[0].via.u64 % 100) / 16;
                const msgpack_object *parent = map_get(event, "parent_block_hash");
                if (block == 0)
                    cr_assert_eq(parent->type, MSGPACK_OBJECT_NIL);
                else
                    cr_assert_eq(parent->via.u64, expected[prompt][block - 1]);
                for (uint32_t h = 0; h < hashes->via.array.size; h++)
                    stored[num_stored++] = hashes->via.array.ptr[h].via.u64;
            } else {
                cr_assert(is_type(event, "BlockRemoved"));
                for (uint32_t h = 0; h < hashes->via.array.size; h++)
                    removed[num_removed++] = hashes->via.array.ptr[h].via.u64;
            }
        }
        batch_free(&batch);
    }
    cr_assert_eq(num_stored, PROMPTS * BLOCKS);
    for (unsigned p = 0; p < PROMPTS; p++)
        for (unsigned b = 0; b < BLOCKS; b++)
            cr_assert_eq(stored[p * BLOCKS + b], expected[p][b], "block %u of prompt %u", b, p);
    /* 8 blocks: 6 hold the first two prompts, the third's need 4 (3 cached
     * and its output's): the first prompt's tail goes first (vLLM frees a
     * request's blocks tail first), and its head after. */
    cr_assert_geq(num_removed, 1);
    cr_assert_eq(removed[0], expected[0][2], "the first eviction is the oldest tail");
    /* Every removal names a block stored before it, once. */
    for (size_t r = 0; r < num_removed; r++) {
        bool known = false;
        for (size_t i = 0; i < num_stored; i++)
            known = known || stored[i] == removed[r];
        cr_assert(known, "removed %zu was never stored", r);
        for (size_t other = 0; other < r; other++)
            cr_assert_neq(removed[other], removed[r], "removed twice");
    }
    zmq_close(socket);
    zmq_ctx_term(context);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* ---------- what kvio run replays ---------- */

/* The same requests over HTTP and replayed from the trace kvio serve wrote:
 * each request gets the same cached-token count, through shared prefixes,
 * a salt, and a chat turn that sends the previous answer back. */
Test(http, a_replayed_trace_gets_the_same_cached_tokens, .timeout = 180)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    char *a = token_prompt(1, 64);
    char *a_longer = token_prompt(1, 84);
    char bodies[4][2048];
    snprintf(bodies[0], 2048, "{\"prompt\": %s, \"max_tokens\": 8, \"ignore_eos\": true}", a);
    snprintf(bodies[1], 2048, "{\"prompt\": %s, \"max_tokens\": 8, \"ignore_eos\": true}", a);
    snprintf(bodies[2], 2048, "{\"prompt\": %s, \"max_tokens\": 4, \"ignore_eos\": true}",
             a_longer);
    snprintf(bodies[3], 2048, "{\"prompt\": %s, \"max_tokens\": 4, \"ignore_eos\": true, "
             "\"cache_salt\": \"tenant-b\"}", a);
    free(a);
    free(a_longer);
    long long cached[6];
    for (int i = 0; i < 4; i++) {
        reply_t reply = post(server.port, "/v1/completions", bodies[i]);
        cr_assert_eq(reply.status, 200, "%s", reply.body);
        json_t *response = reply_json(&reply);
        cached[i] = test_json_integer(response, "usage.prompt_tokens_details.cached_tokens");
        json_decref(response);
        free(reply.body);
    }
    cr_assert_eq(cached[0], 0);
    cr_assert_eq(cached[1], 48);
    cr_assert_eq(cached[2], 64); /* 72 tokens of the first are cached (4 full blocks) */
    cr_assert_eq(cached[3], 0);  /* another tenant shares nothing */
    /* A chat, then its next turn with the answer sent back. */
    const char *turn1 = "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me about "
                        "caches and how a prefix is reused between turns of a chat.\"}], "
                        "\"max_completion_tokens\": 40, \"ignore_eos\": true}";
    reply_t reply = post(server.port, "/v1/chat/completions", turn1);
    json_t *response = reply_json(&reply);
    long long first_total = test_json_integer(response, "usage.total_tokens");
    char answer[1024];
    snprintf(answer, sizeof(answer), "%s", test_json_string(response, "choices.0.message.content"));
    json_decref(response);
    free(reply.body);
    char turn2[4096];
    snprintf(turn2, sizeof(turn2),
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me about caches and how "
             "a prefix is reused between turns of a chat.\"}, {\"role\": \"assistant\", "
             "\"content\": \"%s\"}, {\"role\": \"user\", \"content\": \"And eviction?\"}], "
             "\"max_completion_tokens\": 4, \"ignore_eos\": true}",
             answer);
    reply = post(server.port, "/v1/chat/completions", turn2);
    response = reply_json(&reply);
    cached[5] = test_json_integer(response, "usage.prompt_tokens_details.cached_tokens");
    json_decref(response);
    free(reply.body);
    /* The answer's blocks are hit too: past the first turn's prompt. */
    cr_assert_eq(cached[5], first_total / 16 * 16, "the second turn hits the first's output");
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    char trace[600], replayed[600], path_arg[700];
    snprintf(trace, sizeof(trace), "%s/trace.jsonl", server.results);
    snprintf(replayed, sizeof(replayed), "%s/replayed", server.dir);
    snprintf(path_arg, sizeof(path_arg), "stream.trace.path=%s", trace);
    test_run_t run = test_kvio(NULL, "run", "endpoint", "--set", "mode=simulate", "--set", path_arg,
                               "--set", "serve.kvcache.capacity=64MiB", "-o", replayed, "-q", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char served_csv[600], replayed_csv[700];
    snprintf(served_csv, sizeof(served_csv), "%s/requests.csv", server.results);
    snprintf(replayed_csv, sizeof(replayed_csv), "%s/requests.csv", replayed);
    test_csv_t served = test_csv_read(served_csv);
    test_csv_t again = test_csv_read(replayed_csv);
    cr_assert_eq(served.num_rows, 6);
    cr_assert_eq(again.num_rows, 6);
    /* Sequential requests: the same order in both. */
    for (size_t row = 0; row < 6; row++) {
        cr_assert_eq(test_csv_number(&served, row, "input_tokens"),
                     test_csv_number(&again, row, "input_tokens"));
        cr_assert_eq(test_csv_number(&served, row, "cached_tokens"),
                     test_csv_number(&again, row, "cached_tokens"), "request %zu", row);
    }
    cr_assert_eq(test_csv_number(&served, 5, "cached_tokens"), (double)cached[5]);
    test_csv_free(&served);
    test_csv_free(&again);
    server_free(&server);
}

/* ---------- several serve ranks, admin calls ---------- */

/* Two free loopback ports in a row (each bound once, then released). */
static int free_port_pair(void)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        int first = test_free_port();
        if (first == 0 || first >= 65535)
            continue;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in address = {.sin_family = AF_INET,
                                      .sin_port = htons((uint16_t)(first + 1)),
                                      .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        bool free_too = fd >= 0 && bind(fd, (struct sockaddr *)&address, sizeof(address)) == 0;
        if (fd >= 0)
            close(fd);
        if (free_too)
            return first;
    }
    return 0;
}

/* A 1000-token prompt (the same each time) as a completion, then a pause:
 * its rank publishes its blocks at its next iteration boundary. */
static void post_repeated_prompt(const server_t *server)
{
    char *body = completion_body(1000, 200, 2, false);
    reply_t reply = post(server->port, "/v1/completions", body);
    cr_assert_eq(reply.status, 200);
    free(body);
    free(reply.body);
    pause_ms((long)(test_seconds(0.3) * 1000));
}

/* #57 item 3: kvio serve with kv_events in front routes on the ranks' own
 * published blocks: the same prompt again goes to the rank that cached it
 * (round robin would alternate), and summary.json counts the decisions. */
Test(http, a_kv_events_router_in_front_sends_a_repeated_prompt_where_it_is_cached,
     .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--set",
                                   "ranks.serve=2", "--set", "serve.router.policy=kv_events",
                                   NULL);
    for (unsigned i = 0; i < 4; i++)
        post_repeated_prompt(&server);
    reply_t metrics = get(server.port, "/metrics");
    size_t count = 0;
    sample_t *samples = parse_prometheus(metrics.body, &count);
    double on[2] = {sample_sum(samples, count, "vllm:request_success_total", "engine=\"0\""),
                    sample_sum(samples, count, "vllm:request_success_total", "engine=\"1\"")};
    cr_assert(on[0] + on[1] == 4 && (on[0] == 4 || on[1] == 4), "rank 0: %g, rank 1: %g", on[0],
              on[1]);
    free(samples);
    free(metrics.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_number(summary, "metrics.routing.decisions"), 4);
    cr_assert_eq(test_json_number(summary, "metrics.routing.indexed_routes"), 3);
    cr_assert_eq(test_json_number(summary, "metrics.routing.stale_routes"), 0);
    json_decref(summary);
    server_free(&server);
}

/* #57: a prefix cache reset tells the router in front (vLLM's reset sends
 * AllBlocksCleared): the kv_events index forgets the ranks' blocks, so the
 * prompt after the reset is not routed on what the ranks no longer hold
 * (the index kept them: an indexed route, and a stale one). */
Test(http, a_prefix_cache_reset_empties_the_kv_events_routers_index, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--set",
                                   "ranks.serve=2", "--set", "serve.router.policy=kv_events",
                                   NULL);
    post_repeated_prompt(&server);
    reply_t reset = post(server.port, "/reset_prefix_cache", "");
    cr_assert_eq(reset.status, 200);
    free(reset.body);
    pause_ms((long)(test_seconds(0.3) * 1000)); /* the removals, at the next boundary */
    post_repeated_prompt(&server);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_number(summary, "metrics.routing.decisions"), 2);
    cr_expect_eq(test_json_number(summary, "metrics.routing.indexed_routes"), 0,
                 "the index still held the blocks the reset dropped");
    cr_expect_eq(test_json_number(summary, "metrics.routing.stale_routes"), 0);
    json_decref(summary);
    server_free(&server);
}

Test(http, one_port_per_rank_or_a_router_in_front, .timeout = 120)
{
    int first = free_port_pair();
    cr_assert_neq(first, 0);
    /* One port per rank: requests go to the port's rank. */
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--set",
                                   "ranks.serve=2", "--set", "serve.router.policy=round_robin",
                                   NULL);
    /* The router in front (one port) spreads them; /metrics and
     * requests.csv report per rank. */
    for (unsigned i = 0; i < 4; i++) {
        char *body = completion_body(1 + 100 * i, 20, 2, false);
        reply_t reply = post(server.port, "/v1/completions", body);
        cr_assert_eq(reply.status, 200);
        free(body);
        free(reply.body);
    }
    reply_t metrics = get(server.port, "/metrics");
    size_t count = 0;
    sample_t *samples = parse_prometheus(metrics.body, &count);
    cr_assert_eq(sample_sum(samples, count, "vllm:request_success_total", "engine=\"0\""), 2);
    cr_assert_eq(sample_sum(samples, count, "vllm:request_success_total", "engine=\"1\""), 2);
    free(samples);
    free(metrics.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);

    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d-%d", first, first + 1);
    server_t ranks = {.dir = test_tmpdir()};
    snprintf(ranks.results, sizeof(ranks.results), "%s/results", ranks.dir);
    snprintf(ranks.err_path, sizeof(ranks.err_path), "%s/err.txt", ranks.dir);
    ranks.pid = fork();
    if (ranks.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int err = open(ranks.err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(err, 2);
        execl(test_kvio_binary(), test_kvio_binary(), "serve", "--listen", listen, "-o",
              ranks.results, "--set", "serve.kvcache.capacity=64MiB", "--set", "ranks.serve=2",
              (char *)NULL);
        _exit(127);
    }
    double deadline = test_seconds(20);
    int exited = 0;
    for (double waited = 0; printed_port(ranks.err_path, 1) == 0 && waited < deadline;
         waited += 0.01) {
        if (waitpid(ranks.pid, &exited, WNOHANG) == ranks.pid) {
            char *text = test_read_file(ranks.err_path);
            cr_assert_fail("kvio serve exited: %s", text != NULL ? text : "");
        }
        pause_ms(10);
    }
    cr_assert_eq(printed_port(ranks.err_path, 1), first + 1);
    ranks.port = first;
    server_wait_ready(&ranks);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 3; i++) {
            char *body = completion_body(5000u + 100u * (unsigned)(3 * r + i), 20, 2, false);
            reply_t reply = post(first + r, "/v1/completions", body);
            cr_assert_eq(reply.status, 200);
            free(body);
            free(reply.body);
        }
    }
    cr_assert_eq(server_stop(&ranks, SIGTERM), 0);
    char csv_path[600];
    snprintf(csv_path, sizeof(csv_path), "%s/requests.csv", ranks.results);
    test_csv_t csv = test_csv_read(csv_path);
    cr_assert_eq(csv.num_rows, 6);
    size_t on_rank[2] = {0, 0};
    for (size_t row = 0; row < csv.num_rows; row++)
        on_rank[(int)test_csv_number(&csv, row, "rank")]++;
    cr_assert_eq(on_rank[0], 3);
    cr_assert_eq(on_rank[1], 3);
    test_csv_free(&csv);
    server_free(&ranks);
}

typedef struct caller {
    int port;
    const char *body;
    reply_t reply;
} caller_t;

static void *call(void *context)
{
    caller_t *caller = context;
    caller->reply = post(caller->port, "/v1/completions", caller->body);
    return NULL;
}

Test(http, pause_holds_requests_until_resume_and_reset_clears_the_cache, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    reply_t reply = post(server.port, "/pause?mode=keep", "");
    cr_assert_eq(reply.status, 200);
    cr_assert(test_contains(reply.body, "\"paused\""));
    free(reply.body);
    reply = get(server.port, "/is_paused");
    cr_assert(test_contains(reply.body, "true"), "%s", reply.body);
    free(reply.body);
    /* A request while paused is accepted and waits. */
    char *body = completion_body(1, 40, 3, false);
    caller_t caller = {.port = server.port, .body = body};
    pthread_t thread;
    pthread_create(&thread, NULL, call, &caller);
    pause_ms(300);
    reply = get(server.port, "/metrics");
    cr_assert(test_contains(reply.body, "vllm:num_requests_waiting{engine=\"0\",model_name="
                                        "\"llama3-8b\"} 1.0"),
              "%s", reply.body);
    cr_assert(test_contains(reply.body, "vllm:generation_tokens_total{engine=\"0\",model_name="
                                        "\"llama3-8b\"} 0.0"));
    free(reply.body);
    reply = post(server.port, "/resume", "");
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    pthread_join(thread, NULL);
    cr_assert_eq(caller.reply.status, 200, "%s", caller.reply.body);
    free(caller.reply.body);
    /* Cached now; after a reset, not. */
    reply = post(server.port, "/v1/completions", body);
    json_t *response = reply_json(&reply);
    cr_assert_eq(test_json_integer(response, "usage.prompt_tokens_details.cached_tokens"), 32);
    json_decref(response);
    free(reply.body);
    reply = post(server.port, "/reset_prefix_cache", "");
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    reply = post(server.port, "/v1/completions", body);
    response = reply_json(&reply);
    cr_assert_eq(test_json_integer(response, "usage.prompt_tokens_details.cached_tokens"), 0);
    json_decref(response);
    free(reply.body);
    free(body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* kvio serve --duration says how long it serves (it said the workload's
 * 60 s), one without says it serves until stopped, and KV events bind an
 * IPv6 endpoint (ZMQ_IPV6: it said "No such device"). */
Test(http, a_timed_serve_names_its_duration_and_binds_ipv6_kv_events, .timeout = 120)
{
    char *dir = test_tmpdir();
    char results[600], events[64];
    snprintf(results, sizeof(results), "%s/results", dir);
    int port = test_free_port();
    cr_assert_neq(port, 0);
    snprintf(events, sizeof(events), "tcp://[::1]:%d", port);
    test_run_t run = test_kvio(NULL, "serve", "--listen", "127.0.0.1:0", "--duration", "1s",
                               "--kv-events", events, "-o", results, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.err, "then 1 s of real time"), "%s", run.err);
    test_run_free(&run);
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    char *err = test_read_file(server.err_path);
    cr_assert(test_contains(err, "then serving until stopped"), "%s", err);
    free(err);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
    test_rmtree(dir);
    free(dir);
}

Test(http, bad_command_lines_are_refused_before_serving, .timeout = 60)
{
    test_run_t help = test_kvio(NULL, "serve", "--help", NULL);
    cr_assert_eq(help.status, 0);
    size_t width = 0;
    for (const char *c = help.out; *c != '\0'; c++) {
        width = *c == '\n' ? 0 : width + 1;
        cr_assert_leq(width, 80, "kvio serve --help is wider than 80 columns: %s", help.out);
    }
    test_run_free(&help);
    struct {
        const char *args[6];
        const char *message;
    } cases[] = {
        {{"--listen", "nowhere"}, "HOST:PORT"},
        {{"--listen", "10.300.1.1:80"}, "not an IPv4 address"},
        {{"--max-model-len", "100000", "--set", "serve.kvcache.capacity=64MiB"}, "holds 512"},
        {{"--set", "mode=simulate"}, "real time"},
        {{"--set", "ranks.serve=2", "--listen", "127.0.0.1:9000-9002"}, "3 ports for 2"},
        {{"--chat-template", "jinja"}, "chatml, llama3, harmony"},
        {{"--kv-events", "tcp://nohost"}, "--kv-events"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[12] = {"serve", "-o", "/nonexistent/never"};
        size_t argc = 3;
        for (size_t a = 0; a < 6 && cases[i].args[a] != NULL; a++)
            argv[argc++] = cases[i].args[a];
        test_run_t run = test_kvio(NULL, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5],
                                   argv[6], argv[7], argv[8], NULL);
        cr_assert_eq(run.status, 2, "case %zu: %d %s", i, run.status, run.err);
        cr_assert(test_contains(run.err, cases[i].message), "case %zu: %s", i, run.err);
        test_run_free(&run);
    }
}

/* --tokenizer: prompts and chat messages become the vocabulary's tokens
 * (tests/helpers.c's tokenizer.json: " user ab" is " user", " ", "ab");
 * a file that is missing, or whose special tokens fit no template or not
 * the one asked for, is refused before serving. */
Test(http, a_tokenizer_file_gives_the_prompts_its_tokens, .timeout = 120)
{
    char *dir = test_tmpdir();
    char *json = test_write_tokenizer_json(dir, "tokenizer.json", "");
    static const char *const extra[] = {"he"};
    char *ranks = test_write_rank_file(dir, "cl100k_base.tiktoken", extra, 1);
    struct {
        const char *args[4];
        const char *message;
    } cases[] = {
        {{"--tokenizer", "/nonexistent/o200k_base.tiktoken"}, "No such file"},
        {{"--tokenizer", ranks}, "no chat template"},
        {{"--tokenizer", json, "--chat-template", "harmony"}, "harmony writes <|start|>"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_run_t run = test_kvio(NULL, "serve", "-o", "/nonexistent/never", cases[i].args[0],
                                   cases[i].args[1], cases[i].args[2], cases[i].args[3], NULL);
        cr_assert_eq(run.status, 2, "case %zu: %d %s", i, run.status, run.err);
        cr_assert(test_contains(run.err, cases[i].message), "case %zu: %s", i, run.err);
        test_run_free(&run);
    }
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--tokenizer", json,
                                   NULL);
    reply_t completion = post(server.port, "/v1/completions",
                              "{\"prompt\": \" user ab\", \"max_tokens\": 2, \"ignore_eos\": true}");
    cr_assert_eq(completion.status, 200, "%s", completion.body);
    json_t *response = reply_json(&completion);
    cr_assert_eq(test_json_integer(response, "usage.prompt_tokens"), 3);
    json_decref(response);
    free(completion.body);
    /* <|im_start|>user\n ab<|im_end|>\n<|im_start|>assistant\n: 21 tokens. */
    reply_t chat = post(server.port, "/v1/chat/completions",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \" ab\"}],"
                        " \"max_tokens\": 2}");
    cr_assert_eq(chat.status, 200, "%s", chat.body);
    response = reply_json(&chat);
    cr_assert_eq(test_json_integer(response, "usage.prompt_tokens"), 21);
    json_decref(response);
    free(chat.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert(test_contains(test_json_string(summary, "metrics.server.tokenizer"),
                            "tokenizer.json (byte-level BPE, 262 tokens)"));
    cr_assert_str_eq(test_json_string(summary, "metrics.server.chat_template"), "chatml");
    json_decref(summary);
    server_free(&server);
    free(ranks);
    free(json);
    test_rmtree(dir);
    free(dir);
}

/* Stopping quiesces the server twice (at the signal and at the end):
 * the listening socket is closed once, so a descriptor that took its
 * number in between (the KV events' ZMQ sockets did) stays open. */
Test(http, stopping_twice_closes_the_listening_socket_once, .timeout = 60)
{
    kvio_frontend_params_t frontend_params = {.num_ranks = 1, .block_size = 16};
    kvio_frontend_t *frontend = NULL;
    cr_assert_eq(kvio_frontend_create(&frontend_params, &frontend), KVIO_OK);
    kvio_http_params_t params = {.host = "127.0.0.1", .num_ports = 1, .frontend = frontend,
                                 .model_name = "m", .max_model_len = 100,
                                 .max_connections = 8, .max_body_bytes = 1024};
    kvio_http_server_t *server = NULL;
    char error[256];
    cr_assert_eq(kvio_http_server_start(&params, &server, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    kvio_http_server_quiesce(server);
    int reused = open("/dev/null", O_RDONLY); /* the lowest free number: the socket's */
    cr_assert_geq(reused, 0);
    kvio_http_server_quiesce(server);
    cr_assert_neq(fcntl(reused, F_GETFD), -1, "a second quiesce closed descriptor %d", reused);
    close(reused);
    kvio_http_server_stop(server);
    kvio_frontend_destroy(frontend);
    kvio_http_server_destroy(server);
}

/* A %-escape that decodes to a NUL byte, or bytes that are not UTF-8, in
 * the path or the query is refused (400) before routing: a proxy that
 * blocks /pause but passes static-looking paths cannot be walked past. */
Test(http, paths_and_queries_with_a_nul_or_bad_utf8_are_refused, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    static const struct {
        const char *method, *path;
    } refused[] = {
        {"GET", "/health%00/x"},          {"POST", "/pause%00.png?mode=keep"},
        {"POST", "/pause?mode=keep%00"},  {"POST", "/pause?mo%00de=keep"},
        {"GET", "/health%ff"},            {"GET", "/health?x=%c0%af"},
        {"GET", "/health%ed%a0%80"},      {"POST", "/resume%00/static/x.css"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        reply_t reply = http_call(server.port, refused[i].method, refused[i].path,
                                  strcmp(refused[i].method, "POST") == 0 ? "" : NULL, 0);
        cr_assert_eq(reply.status, 400, "%s %s: %ld %s", refused[i].method, refused[i].path,
                     reply.status, reply.body);
        json_t *error = reply_json(&reply);
        cr_assert(test_contains(json_string_value(json_object_get(
                                    json_object_get(error, "error"), "message")),
                                "NUL"));
        json_decref(error);
        free(reply.body);
        reply = get(server.port, "/is_paused");
        cr_assert(test_contains(reply.body, "false"), "%s paused the server",
                  refused[i].path);
        free(reply.body);
    }
    /* Valid escapes still route (UTF-8 in a query value is fine). */
    reply_t reply = get(server.port, "/health?x=%c3%a9");
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    reply = post(server.port, "/pause?mode=%6beep", "");
    cr_assert_eq(reply.status, 200, "%s", reply.body);
    free(reply.body);
    reply = get(server.port, "/is_paused");
    cr_assert(test_contains(reply.body, "true"));
    free(reply.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* ---------- the formats on their own ---------- */

Test(http, numbers_print_as_prometheus_client_prints_them, .timeout = 60)
{
    struct {
        double value;
        const char *text;
    } cases[] = {
        {0, "0.0"}, {57, "57.0"}, {0.25, "0.25"}, {1.0 / 3, "0.3333333333333333"},
        {INFINITY, "+Inf"}, {1796404264.1892593, "1.7964042641892593e+09"},
        {12345678, "1.2345678e+07"}, {123456, "123456.0"}, {1e-05, "1e-05"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[32];
        kvio_http_format_number(cases[i].value, text);
        cr_assert_str_eq(text, cases[i].text, "case %zu", i);
    }
}

Test(http, plans_follow_max_tokens_ignore_eos_and_the_context, .timeout = 60)
{
    kvio_api_server_t server = {.model_name = "m", .max_model_len = 100};
    kvio_api_request_t request;
    kvio_http_error_t error;
    const char *body = "{\"prompt\": [1,2,3,4,5,6,7,8,9,10]}";
    cr_assert(kvio_api_parse(KVIO_API_COMPLETIONS, body, strlen(body), &server, &request,
                             &error),
              "%s", error.message);
    kvio_api_plan_t plan;
    /* Completions default to 16 tokens; without a length distribution, all. */
    cr_assert(kvio_api_plan(&request, &server, NULL, 1, &plan, &error));
    cr_assert_eq(plan.output_tokens, 16);
    cr_assert(plan.length);
    request.max_tokens = 91;
    cr_assert_not(kvio_api_plan(&request, &server, NULL, 1, &plan, &error));
    cr_assert_str_eq(error.param, "max_tokens");
    /* Drawn lengths are clipped to [min_tokens, max_tokens] and end in stop. */
    kvio_dist_t lengths = {.kind = KVIO_DIST_CONSTANT, .value = 5};
    request.max_tokens = 50;
    request.min_tokens = 7;
    cr_assert(kvio_api_plan(&request, &server, &lengths, 1, &plan, &error));
    cr_assert_eq(plan.output_tokens, 7);
    cr_assert_not(plan.length);
    request.ignore_eos = true;
    cr_assert(kvio_api_plan(&request, &server, &lengths, 1, &plan, &error));
    cr_assert_eq(plan.output_tokens, 50);
    /* The same prompt gives the same words, each read back as its one token. */
    kvio_api_plan_t again;
    cr_assert(kvio_api_plan(&request, &server, &lengths, 1, &again, &error));
    for (uint32_t i = 0; i < 50; i++) {
        char word[5], word_again[5];
        uint32_t id, id_again;
        kvio_api_output_token(&plan, i, word, &id);
        kvio_api_output_token(&again, i, word_again, &id_again);
        cr_assert_str_eq(word, word_again);
        kvio_tokens_t tokens = {0};
        kvio_tokenize_approximate(word, strlen(word), &tokens);
        cr_assert_eq(tokens.count, 1, "'%s'", word);
        cr_assert_eq(tokens.ids[0], id);
        kvio_tokens_fini(&tokens);
    }
    kvio_api_request_fini(&request);
}

/* min_tokens past max_tokens is refused against max_tokens' default too
 * (vLLM's message; 1e9 was clipped to 16); what kvio does not model is
 * refused where a client would read its answer (logprobs, echo) and
 * served with a warning where it only shapes the text (stop, tools). */
Test(http, min_tokens_and_unmodelled_fields_are_refused_or_named, .timeout = 30)
{
    kvio_api_server_t server = {.model_name = "m", .max_model_len = 1000};
    static const struct {
        kvio_api_t api;
        const char *body;
        const char *param; /* NULL: accepted */
        const char *ignored;
    } cases[] = {
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1, 2], \"min_tokens\": 1000000000}", "min_tokens",
         NULL},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1, 2], \"min_tokens\": 17}", "min_tokens", NULL},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1, 2], \"min_tokens\": 16}", NULL, ""},
        {KVIO_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"min_tokens\": 2000}", "min_tokens", NULL},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1], \"logprobs\": 5}", "logprobs", NULL},
        {KVIO_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"logprobs\": true, \"top_logprobs\": 2}", "logprobs", NULL},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1], \"echo\": true}", "echo", NULL},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1], \"best_of\": 3}", "best_of", NULL},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1], \"logprobs\": null, \"echo\": false, "
                               "\"stop\": []}", NULL, ""},
        {KVIO_API_COMPLETIONS, "{\"prompt\": [1], \"stop\": [\"x\"]}", NULL, "stop"},
        {KVIO_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"tools\": [{\"type\": \"function\"}], \"tool_choice\": \"auto\", "
                        "\"stop\": \"y\", \"response_format\": {\"type\": \"json_object\"}}",
         NULL, "stop, tools, response_format"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvio_api_request_t request;
        kvio_http_error_t error = {0};
        kvio_api_plan_t plan;
        bool ok = kvio_api_parse(cases[i].api, cases[i].body, strlen(cases[i].body), &server,
                                 &request, &error) &&
                  kvio_api_plan(&request, &server, NULL, 1, &plan, &error);
        if (cases[i].param == NULL) {
            cr_assert(ok, "case %zu: %s", i, error.message);
            cr_assert_str_eq(request.ignored, cases[i].ignored, "case %zu", i);
        } else {
            cr_assert_not(ok, "case %zu was accepted", i);
            cr_assert_eq(error.status, 400);
            cr_assert_str_eq(error.param, cases[i].param, "case %zu: %s", i, error.message);
        }
        kvio_api_request_fini(&request);
    }
}

/* A raw connection to the server (no request yet); -1 on failure. */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Sends a POST of body to path on a raw connection; the request is whole
 * once this returns. */
static void raw_post(int fd, const char *path, const char *body)
{
    char head[256];
    int length = snprintf(head, sizeof(head),
                          "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: %zu\r\n\r\n",
                          path, strlen(body));
    cr_assert_eq(send(fd, head, (size_t)length, 0), length);
    cr_assert_eq(send(fd, body, strlen(body), 0), (ssize_t)strlen(body));
}

#define WAITING "vllm:num_requests_waiting{engine=\"0\""
#define RUNNING "vllm:num_requests_running{engine=\"0\""
#define ABORTED "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\""

/* Waits until the sample reaches value; false at the deadline. */
static bool metric_reaches(int port, const char *prefix, double value, double deadline_s)
{
    for (double waited = 0; waited < deadline_s; waited += 0.02) {
        if (metric(port, prefix) == value)
            return true;
        pause_ms(20);
    }
    return metric(port, prefix) == value;
}

/* Waits until the engine holds count requests (running or waiting: a
 * request preempted for KV waits); false at the deadline. */
static bool engine_holds(int port, double count, double deadline_s)
{
    for (double waited = 0; waited < deadline_s; waited += 0.02) {
        if (metric(port, RUNNING) + metric(port, WAITING) == count)
            return true;
        pause_ms(20);
    }
    return false;
}

/* A long stream its client never reads (its socket buffers fill), once
 * its answer has begun (a connection of the test's own that the server
 * has not yet seen close may make it a 503 at first: then again). */
static int unread_stream(int port, unsigned first)
{
    char *body = completion_body(first, 50, 3000, true); /* ~15 s of decoding */
    char request[4096];
    int length = snprintf(request, sizeof(request),
                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                          strlen(body), body);
    free(body);
    double deadline = test_seconds(10);
    for (double waited = 0; waited < deadline; waited += 0.1) {
        int fd = raw_connect(port);
        cr_assert_geq(fd, 0);
        int small = 4096;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
        cr_assert_eq(send(fd, request, (size_t)length, 0), length);
        char status[13] = "";
        cr_assert_eq(recv(fd, status, 12, MSG_WAITALL), 12);
        if (strcmp(status, "HTTP/1.1 200") == 0)
            return fd;
        close(fd);
        pause_ms(100);
    }
    cr_assert_fail("no stream began within %.0f s", deadline);
    return -1;
}

/* What came back on a raw connection until the server closed it or
 * deadline_s passed (NUL-terminated; caller frees). */
static char *raw_read_all(int fd, double deadline_s)
{
    struct timeval timeout = {.tv_sec = 0, .tv_usec = 50000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char *text = NULL;
    size_t length = 0, capacity = 0;
    kvio_http_append(&text, &length, &capacity, "", 0);
    for (double waited = 0; waited < deadline_s; waited += 0.05) {
        char buffer[4096];
        ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;
        if (got > 0)
            kvio_http_append(&text, &length, &capacity, buffer, (size_t)got);
    }
    return text;
}

/* A client that never reads its stream holds no one else up; past
 * --max-connections a completion gets 503 with Retry-After while /health
 * still answers, and a connection that has not sent its headers gets 0.1 s;
 * once the slow readers go their requests are taken out: no block stays
 * in use. */
Test(http, slow_readers_and_too_many_connections_are_bounded, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=512MiB", "--max-connections",
                                   "3", NULL);
    int slow = unread_stream(server.port, 1);
    cr_assert_geq(slow, 0);
    /* Meanwhile another client is served in full. */
    char *other = completion_body(5000, 50, 8, false);
    reply_t reply = post(server.port, "/v1/completions", other);
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    /* Two more unread streams fill the limit (3): a fourth connection's
     * completion is refused at once, /health answers. */
    int more[2] = {unread_stream(server.port, 10000), unread_stream(server.port, 20000)};
    cr_assert(more[0] >= 0 && more[1] >= 0);
    cr_assert(engine_holds(server.port, 3, test_seconds(10)));
    int fourth = raw_connect(server.port);
    cr_assert_geq(fourth, 0);
    raw_post(fourth, "/v1/completions", other);
    char *answer = raw_read_all(fourth, test_seconds(10));
    close(fourth);
    cr_assert(test_contains(answer, "HTTP/1.1 503"), "%s", answer);
    cr_assert(test_contains(answer, "Retry-After: 1"), "%s", answer);
    cr_assert(test_contains(answer, "more than 3 connections"), "%s", answer);
    free(answer);
    reply = get(server.port, "/health");
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    /* A connection that sends half its headers is closed (0.1 s, as the
     * server is at its limit). */
    int half = raw_connect(server.port);
    cr_assert_geq(half, 0);
    cr_assert_eq(send(half, "GET /health HTTP/1.1\r\nHo", 25, 0), 25);
    answer = raw_read_all(half, test_seconds(5));
    close(half);
    cr_assert_str_eq(answer, "", "a connection with half its headers got %s", answer);
    free(answer);
    close(more[0]);
    close(more[1]);
    cr_assert(engine_holds(server.port, 1, test_seconds(10)));
    reply = post(server.port, "/v1/completions", other);
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    free(other);
    /* The slow reader goes: its request is aborted, its blocks freed. */
    close(slow);
    double deadline = test_seconds(15);
    double usage = 1;
    for (double waited = 0; waited < deadline && (usage = kv_usage(server.port)) > 0;
         waited += 0.05)
        pause_ms(50);
    cr_assert_eq(usage, 0.0);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), 2);
    cr_assert_eq(test_json_integer(summary, "metrics.aborted_requests"), 3);
    cr_assert_geq(test_json_integer(summary, "metrics.server.limits.refused_busy"), 1);
    cr_assert_geq(test_json_integer(summary, "metrics.server.limits.headers_cut"), 1);
    json_decref(summary);
    server_free(&server);
}

/* A connection that trickles its headers, or stays idle after an answer,
 * is closed once --header-timeout has passed (it held a connection slot
 * for as long as it trickled), and the server serves on. */
Test(http, a_connection_that_sends_no_headers_in_time_is_closed, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--header-timeout",
                                   "1s", NULL);
    int trickle = raw_connect(server.port);
    cr_assert_geq(trickle, 0);
    const char *head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaa";
    bool closed = false;
    double deadline = test_seconds(6);
    for (double waited = 0; !closed && waited < deadline; waited += 0.1) {
        closed = send(trickle, &head[(size_t)(waited * 10) % strlen(head)], 1, MSG_NOSIGNAL) != 1;
        char byte;
        closed = closed || recv(trickle, &byte, 1, MSG_DONTWAIT) == 0;
        pause_ms(100);
    }
    close(trickle);
    cr_assert(closed, "a connection trickling its headers was kept %.0f s", deadline);
    /* Kept alive after an answer, an idle connection goes the same way. */
    int idle = raw_connect(server.port);
    cr_assert_geq(idle, 0);
    const char *request = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(send(idle, request, strlen(request), 0), (ssize_t)strlen(request));
    char *answer = raw_read_all(idle, test_seconds(6));
    close(idle);
    cr_assert(test_contains(answer, "HTTP/1.1 200"), "%s", answer);
    free(answer);
    reply_t reply = get(server.port, "/health");
    cr_assert_eq(reply.status, 200);
    free(reply.body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.server.limits.headers_cut"), 2);
    json_decref(summary);
    server_free(&server);
}

/* A request arrives when its HTTP request has been read whole at the
 * server (vLLM stamps arrival_time as its API server receives it): a body
 * that trickles in over a pause arrives at its last byte, not at its first.
 * requests.csv names both and the pick-up (the arrival to the serve rank
 * taking it into its waiting queue), whose statistics are the summary's
 * frontend.pickup_ms. */
Test(http, a_trickled_body_arrives_when_it_is_whole, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    char *body = completion_body(1, 40, 3, false);
    size_t half = strlen(body) / 2;
    char head[256];
    int head_length = snprintf(head, sizeof(head),
                               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                               "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                               strlen(body));
    double pause_s = test_seconds(0.5);
    int fd = raw_connect(server.port);
    cr_assert_geq(fd, 0);
    cr_assert_eq(send(fd, head, (size_t)head_length, 0), head_length);
    cr_assert_eq(send(fd, body, half, 0), (ssize_t)half);
    pause_ms((long)(pause_s * 1000));
    cr_assert_eq(send(fd, body + half, strlen(body) - half, 0), (ssize_t)(strlen(body) - half));
    char *answer = raw_read_all(fd, test_seconds(10));
    close(fd);
    cr_assert(test_contains(answer, "HTTP/1.1 200"), "%s", answer);
    free(answer);
    /* One sent whole, for the statistics' count. */
    reply_t whole = post(server.port, "/v1/completions", body);
    cr_assert_eq(whole.status, 200, "%s", whole.body);
    free(whole.body);
    free(body);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);

    char csv_path[600];
    snprintf(csv_path, sizeof(csv_path), "%s/requests.csv", server.results);
    test_csv_t csv = test_csv_read(csv_path);
    cr_assert_eq(csv.num_rows, 2);
    double read_s[2], max_pickup_ms = 0;
    for (size_t row = 0; row < 2; row++) {
        double first_byte = test_csv_number(&csv, row, "request_first_byte_s");
        double complete = test_csv_number(&csv, row, "request_complete_s");
        double arrival = test_csv_number(&csv, row, "arrival_s");
        double pickup_ms = test_csv_number(&csv, row, "pickup_ms");
        cr_assert_eq(arrival, complete, "the arrival is the request read whole");
        cr_assert_geq(first_byte, 0);
        read_s[row] = complete - first_byte;
        cr_assert_geq(read_s[row], 0);
        cr_assert_geq(pickup_ms, 0);
        /* Taken after it arrived and before its first token. */
        cr_assert_leq(arrival + pickup_ms / 1e3,
                      test_csv_number(&csv, row, "first_token_s") + 1e-6);
        if (pickup_ms > max_pickup_ms)
            max_pickup_ms = pickup_ms;
    }
    /* The trickled one (first) took the pause to be read whole. */
    cr_assert_geq(read_s[0], pause_s * 0.9, "read in %.3f s over a pause of %.3f s", read_s[0],
                  pause_s);
    cr_assert_lt(read_s[1], pause_s * 0.9, "a whole request read in %.3f s", read_s[1]);
    test_csv_free(&csv);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.frontend.pickup_ms.count"), 2);
    cr_assert_geq(test_json_number(summary, "metrics.frontend.pickup_ms.p50"), 0);
    cr_assert_float_eq(test_json_number(summary, "metrics.frontend.pickup_ms.max"), max_pickup_ms,
                       1e-3);
    json_decref(summary);
    server_free(&server);
}

/* Request bodies held by many connections are bounded together: past
 * --max-bodies a completion is refused with 503 and Retry-After before a
 * byte of its body is read, small ones still fit, and once the holders go
 * the bytes are free again (100 connections each holding 15.9 MiB took
 * 1.5 GB). */
Test(http, bodies_held_across_connections_are_bounded, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", "--max-body",
                                   "512KiB", "--max-bodies", "1MiB", NULL);
    /* A valid request padded with spaces to 400 KiB. */
    size_t padded = 400 * 1024;
    char *large = malloc(padded + 1);
    const char *json = "{\"prompt\": [1, 2, 3], \"max_tokens\": 2, \"ignore_eos\": true}";
    memset(large, ' ', padded);
    memcpy(large, json, strlen(json));
    large[padded] = '\0';
    char head[256];
    int head_length = snprintf(head, sizeof(head),
                               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                               "%zu\r\n\r\n", padded);
    /* Two holders send their headers and most of their body, then wait. */
    int holders[2];
    for (int i = 0; i < 2; i++) {
        holders[i] = raw_connect(server.port);
        cr_assert_geq(holders[i], 0);
        cr_assert_eq(send(holders[i], head, (size_t)head_length, 0), head_length);
        cr_assert_eq(send(holders[i], large, padded - 10, 0), (ssize_t)(padded - 10));
    }
    pause_ms(300);
    /* A third does not fit: 503 with Retry-After, at once. */
    int third = raw_connect(server.port);
    cr_assert_geq(third, 0);
    cr_assert_eq(send(third, head, (size_t)head_length, 0), head_length);
    char *answer = raw_read_all(third, test_seconds(5));
    close(third);
    cr_assert(test_contains(answer, "HTTP/1.1 503"), "%s", answer);
    cr_assert(test_contains(answer, "Retry-After: 1"), "%s", answer);
    cr_assert(test_contains(answer, "--max-bodies"), "%s", answer);
    free(answer);
    /* A small request still fits, and /health answers. */
    char *small = completion_body(1, 10, 2, false);
    reply_t reply = post(server.port, "/v1/completions", small);
    cr_assert_eq(reply.status, 200, "%s", reply.body);
    free(reply.body);
    free(small);
    /* The holders finish: both are served; then a third fits. */
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(send(holders[i], large + padded - 10, 10, 0), 10);
        answer = raw_read_all(holders[i], test_seconds(10));
        cr_assert(test_contains(answer, "HTTP/1.1 200"), "%s", answer);
        free(answer);
        close(holders[i]);
    }
    reply = post(server.port, "/v1/completions", large);
    cr_assert_eq(reply.status, 200, "%s", reply.body);
    free(reply.body);
    free(large);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.server.limits.refused_busy"), 1);
    cr_assert_eq(test_json_integer(summary, "metrics.completed"), 4);
    json_decref(summary);
    server_free(&server);
}

/* The answer to a raw request (head, then body). */
static char *raw_exchange(int port, const char *head, const char *body)
{
    int fd = raw_connect(port);
    cr_assert_geq(fd, 0);
    cr_assert_eq(send(fd, head, strlen(head), 0), (ssize_t)strlen(head));
    if (body != NULL)
        send(fd, body, strlen(body), MSG_NOSIGNAL);
    char *answer = raw_read_all(fd, test_seconds(5));
    close(fd);
    return answer;
}

/* A transfer coding libmicrohttpd does not decode ("gzip, chunked") is
 * answered 501 at once (it got no answer and the connection was held),
 * Transfer-Encoding with Content-Length 400; plain chunked is served. */
Test(http, transfer_codings_other_than_chunked_are_refused, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    const char *body = "{\"prompt\": [1, 2, 3], \"max_tokens\": 2, \"ignore_eos\": true}";
    char chunked[256];
    snprintf(chunked, sizeof(chunked), "%zx\r\n%s\r\n0\r\n\r\n", strlen(body), body);
    static const struct {
        const char *coding;
        const char *status;
    } cases[] = {
        {"Transfer-Encoding: gzip, chunked\r\n", "HTTP/1.1 501"},
        {"Transfer-Encoding: gzip\r\n", "HTTP/1.1 501"},
        {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "HTTP/1.1 501"},
        {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "HTTP/1.1 400"},
        {"Transfer-Encoding: chunked\r\n", "HTTP/1.1 200"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char head[512];
        snprintf(head, sizeof(head), "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%s"
                 "Connection: close\r\n\r\n", cases[i].coding);
        char *answer = raw_exchange(server.port, head, chunked);
        cr_assert(test_contains(answer, cases[i].status), "%s: %s", cases[i].coding, answer);
        free(answer);
    }
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* n copies of a UTF-8 character (malloc'd). */
static char *repeated(const char *character, size_t n)
{
    size_t length = strlen(character);
    char *text = malloc(n * length + 1);
    for (size_t i = 0; i < n; i++)
        memcpy(text + i * length, character, length);
    text[n * length] = '\0';
    return text;
}

/* An error message that echoes a long field of the user's is cut on a
 * character boundary: the answer is the error, never an empty reply (a
 * message cut mid-character made jansson fail: curl's "empty reply"). */
Test(http, long_non_ascii_fields_in_errors_are_cut_on_a_character, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    char *euros = repeated("\xe2\x82\xac", 300); /* 900 bytes */
    char body[2048];
    snprintf(body, sizeof(body), "{\"messages\": [{\"role\": \"%s\", \"content\": \"x\"}]}",
             euros);
    reply_t reply = post(server.port, "/v1/chat/completions", body);
    cr_assert_eq(reply.status, 400);
    json_t *error = reply_json(&reply);
    const char *message =
        json_string_value(json_object_get(json_object_get(error, "error"), "message"));
    cr_assert(test_contains(message, "unknown role"), "%s", message);
    json_decref(error);
    free(reply.body);
    snprintf(body, sizeof(body), "{\"model\": \"%s\", \"prompt\": \"x\"}", euros);
    reply = post(server.port, "/v1/completions", body);
    cr_assert_eq(reply.status, 404);
    json_decref(reply_json(&reply));
    free(reply.body);
    char path[1024];
    snprintf(path, sizeof(path), "/pause?mode=%s", "%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac"
             "%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac"
             "%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac%e2%82%ac");
    reply = post(server.port, path, "");
    cr_assert_eq(reply.status, 400, "%ld %s", reply.status, reply.body);
    json_decref(reply_json(&reply));
    free(reply.body);
    free(euros);
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* A completion served without a field's effect says so in a Warning
 * header, whole or streamed. */
Test(http, answers_name_the_fields_served_without_effect, .timeout = 120)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=64MiB", NULL);
    for (int stream = 0; stream < 2; stream++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"prompt\": [1, 2, 3], \"max_tokens\": 2, "
                 "\"ignore_eos\": true, \"stop\": [\"x\"], \"stream\": %s}",
                 stream ? "true" : "false");
        char head[256];
        snprintf(head, sizeof(head), "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n", strlen(body));
        char *answer = raw_exchange(server.port, head, body);
        cr_assert(test_contains(answer, "HTTP/1.1 200"), "%s", answer);
        cr_assert(test_contains(answer, "Warning: 299 kvio \"served without stop"), "%s",
                  answer);
        free(answer);
    }
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    server_free(&server);
}

/* A request still queued in the engine (max_num_seqs 1 and a long request
 * running) whose client goes away is taken out of the queue within a
 * bounded time, streamed or not; the running one goes on. */
static void queued_request_of_a_gone_client(bool stream)
{
    server_t server = server_start("--set", "serve.kvcache.capacity=512MiB", "--set",
                                   "serve.engine.max_num_seqs=1", NULL);
    int running = raw_connect(server.port);
    cr_assert_geq(running, 0);
    char *body = completion_body(1, 50, 3000, true); /* ~15 s of decoding */
    raw_post(running, "/v1/completions", body);
    free(body);
    cr_assert(metric_reaches(server.port, RUNNING, 1, test_seconds(10)));
    int queued = raw_connect(server.port);
    cr_assert_geq(queued, 0);
    body = completion_body(5000, 50, 8, stream);
    raw_post(queued, "/v1/completions", body);
    free(body);
    cr_assert(metric_reaches(server.port, WAITING, 1, test_seconds(10)),
              "the second request is not queued");
    close(queued);
    cr_assert(metric_reaches(server.port, ABORTED, 1, test_seconds(2)),
              "the queued request of a client that went away was not aborted");
    cr_assert_eq(metric(server.port, WAITING), 0);
    cr_assert_eq(metric(server.port, RUNNING), 1, "the running request was disturbed");
    close(running);
    cr_assert(metric_reaches(server.port, ABORTED, 2, test_seconds(5)));
    cr_assert_eq(server_stop(&server, SIGTERM), 0);
    json_t *summary = server_summary(&server);
    cr_assert_eq(test_json_integer(summary, "metrics.aborted_requests"), 2);
    cr_assert_eq(test_json_integer(summary, "metrics.server.client_disconnects"), 2);
    json_decref(summary);
    server_free(&server);
}

Test(http, a_queued_request_whose_client_left_is_aborted, .timeout = 120)
{
    queued_request_of_a_gone_client(false);
}

Test(http, a_queued_stream_whose_client_left_is_aborted, .timeout = 120)
{
    queued_request_of_a_gone_client(true);
}

/* With a trainer (ranks.train: 1) model updates flow while kvio serve
 * serves: every version flushes the prefix cache (update.cache: flush, as
 * vLLM resets it), so the same prompt misses exactly after a version
 * change and hits otherwise; the run ends by itself at its duration. */
Test(http, model_updates_flow_while_serving_and_flush_the_cache, .timeout = 120)
{
    server_t server = server_start(
        "--set", "serve.kvcache.capacity=64MiB", "--set", "ranks.train=1", "--set",
        "train={step_time: {dist: constant, value: 100ms}, bytes: 16MiB, checkpoint: "
        "{policy: every_n_steps, every_n_steps: 5}, transport: {kind: ucx}}",
        "--set", "update={serving: engine}", "--duration", "3s", NULL);
    char *body = completion_body(7, 33, 2, false);
    int sent = 0;
    for (; sent < 200; sent++) {
        /* abort_after past any answer's length: it may not connect at the end. */
        reply_t reply = http_call(server.port, "POST", "/v1/completions", body, 1u << 30);
        bool served = reply.status == 200;
        free(reply.body);
        if (!served)
            break; /* the duration is over: 503 */
        pause_ms(80);
    }
    free(body);
    cr_assert_eq(server_stop(&server, 0), 0);
    json_t *summary = server_summary(&server);
    cr_assert(test_json_true(summary, "complete"));
    cr_assert_geq(test_json_integer(summary, "metrics.model_updates.updates_activated"), 2);
    json_decref(summary);
    char csv_path[600];
    snprintf(csv_path, sizeof(csv_path), "%s/requests.csv", server.results);
    test_csv_t csv = test_csv_read(csv_path);
    cr_assert_geq(csv.num_rows, 5);
    size_t hits = 0, misses = 0;
    for (size_t row = 1; row < csv.num_rows; row++) {
        double cached = test_csv_number(&csv, row, "cached_tokens");
        double version = test_csv_number(&csv, row, "model_version");
        double before = test_csv_number(&csv, row - 1, "model_version");
        if (cached == 32) {
            hits++;
        } else {
            cr_assert_eq(cached, 0);
            cr_assert_gt(version, before, "request %zu missed without a new version", row);
            misses++;
        }
    }
    cr_assert_gt(hits, 0);
    cr_assert_gt(misses, 0);
    test_csv_free(&csv);
    server_free(&server);
}
