/* Tests for the approximate tokenizer and the chat templates
 * (workloads/tokenizer.c): equal text gives equal tokens, a text's pieces
 * are those of byte-level BPE pre-tokenizers, UTF-8 is never cut, and a
 * conversation rendered message by message is a prefix of the next turn's. */
#include <criterion/criterion.h>
#include <string.h>

#include "kvio/tokenizer.h"

static kvio_tokens_t tokenize(const char *text)
{
    kvio_tokens_t tokens = {0};
    cr_assert_eq(kvio_tokenize_approximate(text, strlen(text), &tokens), KVIO_OK);
    return tokens;
}

/* The token counts of byte-level pre-tokenizing: words with their space,
 * cut at 4 bytes on a character boundary; digits in threes; whitespace
 * runs leaving their last space to the word after. */
Test(tokenizer, pieces_are_words_digits_punctuation_and_spaces)
{
    struct {
        const char *text;
        size_t tokens;
    } cases[] = {
        {"a", 1}, {" the", 1}, {" word", 2}, {"1234567", 3}, {"a   b", 3}, {"\n\n", 1},
        {"x, y.", 4}, {"日本", 1}, {"日本語", 2}, {"", 0}, {"    return x;", 5},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvio_tokens_t tokens = tokenize(cases[i].text);
        cr_assert_eq(tokens.count, cases[i].tokens, "'%s': %zu tokens", cases[i].text,
                     tokens.count);
        kvio_tokens_fini(&tokens);
    }
}

Test(tokenizer, equal_text_gives_equal_tokens_and_prefixes_stay_prefixes)
{
    kvio_tokens_t a = tokenize("The cache keeps the prefix.\n");
    kvio_tokens_t b = tokenize("The cache keeps the prefix.\n");
    kvio_tokens_t longer = tokenize("The cache keeps the prefix.\nAnd then some more text.");
    cr_assert_eq(a.count, b.count);
    cr_assert_eq(memcmp(a.ids, b.ids, a.count * sizeof(uint32_t)), 0);
    cr_assert_gt(longer.count, a.count);
    cr_assert_eq(memcmp(a.ids, longer.ids, a.count * sizeof(uint32_t)), 0);
    for (size_t i = 0; i < longer.count; i++)
        cr_assert(longer.ids[i] >= KVIO_TOKEN_FIRST_TEXT && longer.ids[i] < KVIO_TOKEN_VOCAB);
    kvio_tokens_fini(&a);
    kvio_tokens_fini(&b);
    kvio_tokens_fini(&longer);
}

/* About four bytes of English per token, as real vocabularies give. */
Test(tokenizer, english_runs_near_four_bytes_a_token)
{
    const char *text = "Prefix caching lets a server reuse the key and value tensors of a "
                       "prompt's beginning when another request starts the same way, so the "
                       "first token comes sooner and the accelerator computes less.";
    kvio_tokens_t tokens = tokenize(text);
    double bytes_per_token = (double)strlen(text) / (double)tokens.count;
    cr_assert(bytes_per_token > 3.0 && bytes_per_token < 5.5, "%.2f", bytes_per_token);
    kvio_tokens_fini(&tokens);
}

Test(tokenizer, output_words_read_back_as_their_one_token)
{
    for (uint64_t index = 0; index < 2000; index += 7) {
        char word[5];
        uint32_t id;
        kvio_token_word(index, word, &id);
        cr_assert_eq(word[0], ' ');
        kvio_tokens_t tokens = tokenize(word);
        cr_assert_eq(tokens.count, 1, "'%s'", word);
        cr_assert_eq(tokens.ids[0], id);
        kvio_tokens_fini(&tokens);
    }
}

Test(tokenizer, a_turn_rendered_is_a_prefix_of_the_next_in_every_template)
{
    const char *templates[] = {"chatml", "llama3", "harmony"};
    kvio_chat_message_t conversation[] = {
        {"system", 6, "You are terse.", 14, KVIO_CHAT_TEXT},
        {"user", 4, "Hello there", 11, KVIO_CHAT_TEXT},
        {"assistant", 9, " hi yo", 6, KVIO_CHAT_TEXT},
        {"user", 4, "Again", 5, KVIO_CHAT_TEXT},
    };
    for (size_t t = 0; t < 3; t++) {
        kvio_chat_template_t template_id;
        cr_assert_eq(kvio_chat_template_find(templates[t], &template_id), KVIO_OK);
        cr_assert_str_eq(kvio_chat_template_name(template_id), templates[t]);
        kvio_tokens_t first = {0}, next = {0};
        cr_assert_eq(kvio_chat_render(template_id, NULL, conversation, 2,
                                      &(kvio_chat_options_t){.date = "2026-12-04"}, &first), KVIO_OK);
        cr_assert_eq(kvio_chat_render(template_id, NULL, conversation, 4,
                                      &(kvio_chat_options_t){.date = "2026-12-04"}, &next), KVIO_OK);
        cr_assert_gt(next.count, first.count);
        cr_assert_eq(memcmp(first.ids, next.ids, first.count * sizeof(uint32_t)), 0, "%s",
                     templates[t]);
        /* Special tokens sit below the text ids. */
        cr_assert_lt(first.ids[0], KVIO_TOKEN_FIRST_TEXT);
        kvio_tokens_fini(&first);
        kvio_tokens_fini(&next);
    }
    kvio_chat_template_t unknown;
    cr_assert_eq(kvio_chat_template_find("jinja", &unknown), KVIO_ERR_NOT_FOUND);
    cr_assert(kvio_chat_role_known("tool", 4));
    cr_assert_not(kvio_chat_role_known("wizard", 6));
}

/* Each template writes what its model's chat template writes for a tool
 * conversation (a system message, tools, a call, its result, an answer),
 * as vLLM renders it: Qwen3's tools in the system message and calls in
 * <tool_call>, Llama 3.1's dated system header and tools (indent 4) in the
 * first user message, gpt-oss's system and developer messages with the
 * tools as TypeScript and the call on the commentary channel. */
static const kvio_chat_message_t tool_chat[] = {
    {"system", 6, "You are Forge.", 14, KVIO_CHAT_TEXT},
    {"system", 6,
     "[{\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"description\":\"Read a "
     "file.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
     "\"description\":\"Where.\"},\"lines\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"integer\"}},\"mode\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"],\"default\":\"a\"}},"
     "\"required\":[\"path\"]}}}]",
     0, KVIO_CHAT_TOOLS},
    {"user", 4, "Fix the bug.", 12, KVIO_CHAT_TEXT},
    {"assistant", 9,
     "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
     "\"arguments\":\"{\\\"path\\\":\\\"cart.py\\\"}\"}}]",
     0, KVIO_CHAT_TOOL_CALLS},
    {"tool", 4, "def total():\n  return 1", 24, KVIO_CHAT_TEXT},
    {"assistant", 9, "Fixed.", 6, KVIO_CHAT_TEXT},
    {"user", 4, "Thanks", 6, KVIO_CHAT_TEXT},
};

static const char *const tool_chat_expected[] = {
        "<|im_start|>system\n"
        "You are Forge.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"description\": \"Read a file.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", \"description\": \"Where.\"}, \"lines\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}, \"mode\": {\"type\": \"string\", \"enum\": [\"a\", \"b\"], \"default\": \"a\"}}, \"required\": [\"path\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Fix the bug.<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<tool_call>\n"
        "{\"name\": \"read_file\", \"arguments\": {\"path\": \"cart.py\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "def total():\n"
        "  return 1\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "Fixed.<|im_end|>\n"
        "<|im_start|>user\n"
        "Thanks<|im_end|>\n"
        "<|im_start|>assistant\n"
        "",
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Environment: ipython\n"
        "Cutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n"
        "\n"
        "You are Forge.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n"
        "\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n"
        "\n"
        "{\n"
        "    \"type\": \"function\",\n"
        "    \"function\": {\n"
        "        \"name\": \"read_file\",\n"
        "        \"description\": \"Read a file.\",\n"
        "        \"parameters\": {\n"
        "            \"type\": \"object\",\n"
        "            \"properties\": {\n"
        "                \"path\": {\n"
        "                    \"type\": \"string\",\n"
        "                    \"description\": \"Where.\"\n"
        "                },\n"
        "                \"lines\": {\n"
        "                    \"type\": \"array\",\n"
        "                    \"items\": {\n"
        "                        \"type\": \"integer\"\n"
        "                    }\n"
        "                },\n"
        "                \"mode\": {\n"
        "                    \"type\": \"string\",\n"
        "                    \"enum\": [\n"
        "                        \"a\",\n"
        "                        \"b\"\n"
        "                    ],\n"
        "                    \"default\": \"a\"\n"
        "                }\n"
        "            },\n"
        "            \"required\": [\n"
        "                \"path\"\n"
        "            ]\n"
        "        }\n"
        "    }\n"
        "}\n"
        "\n"
        "Fix the bug.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "{\"name\": \"read_file\", \"parameters\": {\"path\": \"cart.py\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
        "\n"
        "\"def total():\\n  return 1\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "Fixed.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Thanks<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "",
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\n"
        "Current date: 2026-12-04\n"
        "\n"
        "Reasoning: medium\n"
        "\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
        "Calls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions\n"
        "\n"
        "You are Forge.\n"
        "\n"
        "# Tools\n"
        "\n"
        "## functions\n"
        "\n"
        "namespace functions {\n"
        "\n"
        "// Read a file.\n"
        "type read_file = (_: {\n"
        "// Where.\n"
        "path: string,\n"
        "lines?: number[],\n"
        "mode?: \"a\" | \"b\", // default: a,\n"
        "}) => any;\n"
        "\n"
        "} // namespace functions<|end|><|start|>user<|message|>Fix the bug.<|end|><|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>{\"path\": \"cart.py\"}<|call|><|start|>functions.read_file to=assistant<|channel|>commentary<|message|>\"def total():\\n  return 1\"<|end|><|start|>assistant<|channel|>final<|message|>Fixed.<|end|><|start|>user<|message|>Thanks<|end|><|start|>assistant",
};

/* tool_chat with its JSON contents' lengths filled in. */
static void tool_chat_copy(kvio_chat_message_t *chat_p)
{
    memcpy(chat_p, tool_chat, sizeof(tool_chat));
    for (size_t i = 0; i < sizeof(tool_chat) / sizeof(tool_chat[0]); i++)
        chat_p[i].content_length = strlen(chat_p[i].content);
}

Test(tokenizer, each_template_writes_what_its_model_s_chat_template_writes)
{
    kvio_chat_message_t chat[7];
    tool_chat_copy(chat);
    kvio_chat_options_t options = {.add_generation_prompt = true, .date = "2026-12-04"};
    for (int t = 0; t < 3; t++) {
        kvio_chat_rendering_t rendering;
        cr_assert_eq(kvio_chat_render_spans((kvio_chat_template_t)t, NULL, chat, 7, &options,
                                            &rendering),
                     KVIO_OK);
        cr_assert_str_eq(rendering.text, tool_chat_expected[t], "%s",
                         kvio_chat_template_name((kvio_chat_template_t)t));
        kvio_chat_rendering_fini(&rendering);
    }
}

/* A reply appended after the generation prompt is what the next request's
 * history writes for it, up to its end: the cached prompt and answer are a
 * prefix of the next prompt, a tool call's too. */
Test(tokenizer, an_answer_is_written_as_the_next_history_writes_it)
{
    kvio_chat_message_t chat[7];
    tool_chat_copy(chat);
    kvio_chat_options_t options = {.add_generation_prompt = true, .date = "2026-12-04"};
    static const size_t asked[] = {3, 5}; /* the tool call, then the answer */
    for (int t = 0; t < 3; t++) {
        for (size_t a = 0; a < 2; a++) {
            kvio_chat_rendering_t turn, next;
            cr_assert_eq(kvio_chat_render_spans((kvio_chat_template_t)t, NULL, chat, asked[a],
                                                &options, &turn),
                         KVIO_OK);
            cr_assert_eq(kvio_chat_render_answer((kvio_chat_template_t)t, NULL, &chat[asked[a]],
                                                 &turn),
                         KVIO_OK);
            cr_assert_eq(kvio_chat_render_spans((kvio_chat_template_t)t, NULL, chat, 7, &options,
                                                &next),
                         KVIO_OK);
            cr_assert(turn.length < next.length &&
                          memcmp(turn.text, next.text, turn.length) == 0,
                      "%s, answer %zu:\n%s", kvio_chat_template_name((kvio_chat_template_t)t),
                      asked[a], turn.text);
            cr_assert_lt(turn.tokens.count, next.tokens.count);
            cr_assert_eq(memcmp(turn.tokens.ids, next.tokens.ids,
                                turn.tokens.count * sizeof(uint32_t)),
                         0, "%s", kvio_chat_template_name((kvio_chat_template_t)t));
            kvio_chat_rendering_fini(&turn);
            kvio_chat_rendering_fini(&next);
        }
    }
}

/* ---------- the exact tokenizer, on vocabularies made here ---------- */

#include "helpers.h"
#include "kvio/log.h"
#include "workloads/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>

static kvio_tokenizer_t *load(const char *path)
{
    kvio_tokenizer_t *tokenizer = NULL;
    cr_assert_eq(kvio_tokenizer_load(path, &tokenizer), KVIO_OK, "%s loads", path);
    return tokenizer;
}

static void assert_encodes(const kvio_tokenizer_t *tokenizer, const char *text, size_t length,
                           bool special, const uint32_t *want, size_t num_want)
{
    kvio_tokens_t tokens = {0};
    cr_assert_eq(kvio_tokenizer_encode(tokenizer, text, length, special, &tokens), KVIO_OK);
    cr_assert_eq(tokens.count, num_want, "'%s': %zu tokens, want %zu", text, tokens.count,
                 num_want);
    for (size_t i = 0; i < num_want; i++)
        cr_assert_eq(tokens.ids[i], want[i], "'%s' token %zu: %u, want %u", text, i,
                     tokens.ids[i], want[i]);
    kvio_tokens_fini(&tokens);
}

#define ENCODES(tokenizer, text, special, ...)                                                  \
    do {                                                                                        \
        const uint32_t want_[] = {__VA_ARGS__};                                                 \
        assert_encodes(tokenizer, text, sizeof(text) - 1, special, want_,                       \
                       sizeof(want_) / sizeof(want_[0]));                                       \
    } while (0)

/* tiktoken's rules, with cl100k_base's pattern (the file's name says it):
 * a piece in the vocabulary is one token; otherwise its bytes merge, the
 * lowest-ranked pair first ("hello": he, then ll, then hell), the
 * leftmost of equals; special tokens only when asked; bytes that are not
 * UTF-8 are tokens of their own. */
Test(tokenizer, a_tiktoken_file_encodes_as_tiktoken_does, .timeout = 30)
{
    char *dir = test_tmpdir();
    static const char *const extra[] = {"he", "ll", "hell", " w", "hello", "ab", "bc", "aa"};
    char *path = test_write_rank_file(dir, "tiny-cl100k_base.tiktoken", extra, 8);
    kvio_tokenizer_t *tokenizer = load(path);
    cr_assert(strstr(kvio_tokenizer_describe(tokenizer), "cl100k_base") != NULL);
    ENCODES(tokenizer, "hello", false, 260);                      /* the whole piece */
    ENCODES(tokenizer, "hells", false, 258, 's');                 /* he, ll, hell */
    ENCODES(tokenizer, "hellos", false, 260, 's');                /* then hell + o */
    ENCODES(tokenizer, " world", false, 259, 'o', 'r', 'l', 'd'); /* " w" */
    ENCODES(tokenizer, "abc", false, 261, 'c');                   /* ab ranks before bc */
    ENCODES(tokenizer, "aaa", false, 263, 'a');                   /* leftmost of equals */
    ENCODES(tokenizer, "it's 12345", false, 'i', 't', '\'', 's', ' ', '1', '2', '3', '4', '5');
    ENCODES(tokenizer, "a<|endoftext|>b", true, 'a', 100257, 'b');
    ENCODES(tokenizer, "<|endoftext|>", false, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x',
            't', '|', '>');
    ENCODES(tokenizer, "a\xff b", false, 'a', 0xff, ' ', 'b');
    uint32_t id;
    cr_assert_eq(kvio_tokenizer_special_id(tokenizer, "<|fim_prefix|>", &id), KVIO_OK);
    cr_assert_eq(id, 100258);
    size_t length;
    const char *bytes = kvio_tokenizer_token_bytes(tokenizer, 258, &length);
    cr_assert(bytes != NULL && length == 4 && memcmp(bytes, "hell", 4) == 0);
    cr_assert_null(kvio_tokenizer_token_bytes(tokenizer, 5000, &length));
    kvio_tokenizer_destroy(tokenizer);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* The tokenizer.json of tests/helpers.c: merges by their order in the
 * file, not by id ("b c" before "a b": abc is a + bc), its Split pattern,
 * its added tokens. */
Test(tokenizer, a_tokenizer_json_encodes_by_its_merges_and_added_tokens, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *path = test_write_tokenizer_json(dir, "tokenizer.json", "");
    kvio_tokenizer_t *tokenizer = load(path);
    ENCODES(tokenizer, "abc", false, 'a', 257); /* "b c" is the first merge */
    ENCODES(tokenizer, "ab", false, 256);
    ENCODES(tokenizer, " user 7", false, 261, ' ', '7');
    ENCODES(tokenizer, "<|im_start|>user\n", true, 300, 'u', 's', 'e', 'r', '\n');
    kvio_chat_template_t template_id;
    cr_assert_eq(kvio_chat_template_for(tokenizer, &template_id), KVIO_OK);
    cr_assert_eq(template_id, KVIO_CHAT_CHATML);
    /* The rendering is one text: <|im_start|>user\n ab<|im_end|>\n<|im_start|>assistant\n */
    kvio_chat_message_t message = {.role = "user", .role_length = 4, .content = " ab",
                                   .content_length = 3};
    kvio_tokens_t tokens = {0};
    cr_assert_eq(kvio_chat_render(KVIO_CHAT_CHATML, tokenizer, &message, 1, NULL, &tokens),
                 KVIO_OK);
    const uint32_t want[] = {300, 'u', 's', 'e', 'r', '\n', ' ', 256, 301, '\n',
                             300, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'};
    cr_assert_eq(tokens.count, sizeof(want) / sizeof(want[0]), "%zu tokens", tokens.count);
    for (size_t i = 0; i < tokens.count; i++)
        cr_assert_eq(tokens.ids[i], want[i], "token %zu: %u, want %u", i, tokens.ids[i], want[i]);
    kvio_tokens_fini(&tokens);
    /* llama3 writes tokens this vocabulary lacks. */
    kvio_log_capture_begin();
    cr_assert_eq(kvio_chat_template_check(KVIO_CHAT_LLAMA3, tokenizer), KVIO_ERR_INVALID);
    char *log = kvio_log_capture_end(NULL);
    cr_assert(strstr(log, "llama3 writes <|begin_of_text|>") != NULL, "%s", log);
    free(log);
    kvio_tokenizer_destroy(tokenizer);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* A tokenizer.json whose normalizer is NFC composes the text first (Qwen's
 * tokenizers): "e" and a combining acute accent encode as the one
 * character é does; without a normalizer they stay apart. */
Test(tokenizer, an_nfc_normalizer_composes_the_text_first, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *plain_path = test_write_tokenizer_json(dir, "plain.json", "");
    char *json = test_read_file(plain_path);
    char *null_at = strstr(json, "\"normalizer\": null");
    cr_assert_not_null(null_at);
    size_t head = (size_t)(null_at - json);
    char *nfc_json = malloc(strlen(json) + 32);
    cr_assert_not_null(nfc_json);
    sprintf(nfc_json, "%.*s\"normalizer\": {\"type\": \"NFC\"}%s", (int)head, json,
            null_at + strlen("\"normalizer\": null"));
    char *nfc_path = test_write_file(dir, "nfc.json", nfc_json);
    free(json);
    free(nfc_json);
    kvio_tokenizer_t *plain = load(plain_path);
    kvio_tokenizer_t *nfc = load(nfc_path);
    static const char composed[] = "caf\xc3\xa9", decomposed[] = "cafe\xcc\x81";
    kvio_tokens_t a = {0}, b = {0}, c = {0};
    cr_assert_eq(kvio_tokenizer_encode(nfc, decomposed, strlen(decomposed), false, &a), KVIO_OK);
    cr_assert_eq(kvio_tokenizer_encode(nfc, composed, strlen(composed), false, &b), KVIO_OK);
    cr_assert_eq(kvio_tokenizer_encode(plain, decomposed, strlen(decomposed), false, &c),
                 KVIO_OK);
    cr_assert_eq(a.count, b.count);
    cr_assert_eq(memcmp(a.ids, b.ids, a.count * sizeof(uint32_t)), 0);
    cr_assert_eq(b.count, 5, "c a f and the two bytes of \\u00e9");
    cr_assert_eq(c.count, 6, "without NFC: e and the accent's two bytes");
    ENCODES(nfc, "<|im_start|>user", true, 300, 'u', 's', 'e', 'r');
    kvio_tokens_fini(&a);
    kvio_tokens_fini(&b);
    kvio_tokens_fini(&c);
    kvio_tokenizer_destroy(plain);
    kvio_tokenizer_destroy(nfc);
    test_rmtree(dir);
    free(plain_path);
    free(nfc_path);
    free(dir);
}

/* The heap merge (pieces past 64 bytes) chooses as the plain scan does:
 * random strings over a vocabulary of many overlapping merges. */
Test(tokenizer, the_heap_merge_and_the_plain_merge_agree, .timeout = 60)
{
    char *dir = test_tmpdir();
    const char *extra[64];
    char words[64][5];
    size_t count = 0;
    for (char a = 'a'; a <= 'd'; a++)
        for (char b = 'a'; b <= 'd'; b++)
            snprintf(words[count], 5, "%c%c", a, b), extra[count] = words[count], count++;
    static const char *const longer[] = {"aba", "abab", "cdc", "dddd", "bcd", "abcd", "ddd",
                                         "cabd", "aab", "bba"};
    for (size_t i = 0; i < sizeof(longer) / sizeof(longer[0]); i++)
        extra[count++] = longer[i];
    char *path = test_write_rank_file(dir, "merge-r50k_base.tiktoken", extra, count);
    kvio_tokenizer_t *tokenizer = load(path);
    unsigned seed = 7;
    for (int round = 0; round < 2000; round++) {
        char piece[64];
        size_t length = 2 + (size_t)(rand_r(&seed) % 62);
        for (size_t i = 0; i < length; i++)
            piece[i] = (char)('a' + rand_r(&seed) % 4);
        kvio_tokens_t plain = {0}, heap = {0};
        cr_assert_eq(kvio_tokenizer_merge_plain(tokenizer, piece, length, &plain), KVIO_OK);
        cr_assert_eq(kvio_tokenizer_merge_heap(tokenizer, piece, length, &heap), KVIO_OK);
        cr_assert_eq(plain.count, heap.count, "'%.*s': %zu and %zu tokens", (int)length, piece,
                     plain.count, heap.count);
        cr_assert_eq(memcmp(plain.ids, heap.ids, plain.count * sizeof(uint32_t)), 0,
                     "'%.*s' merges differently", (int)length, piece);
        kvio_tokens_fini(&plain);
        kvio_tokens_fini(&heap);
    }
    /* A megabyte with no break stays fast (the heap, not n squared). */
    size_t length = 1 << 20;
    char *blob = malloc(length);
    cr_assert_not_null(blob);
    for (size_t i = 0; i < length; i++)
        blob[i] = (char)('a' + rand_r(&seed) % 4);
    kvio_tokens_t tokens = {0};
    cr_assert_eq(kvio_tokenizer_encode(tokenizer, blob, length, false, &tokens), KVIO_OK);
    cr_assert_gt(tokens.count, 0);
    cr_assert_lt(tokens.count, length);
    kvio_tokens_fini(&tokens);
    free(blob);
    kvio_tokenizer_destroy(tokenizer);
    test_rmtree(dir);
    free(path);
    free(dir);
}

/* Loading path fails, and the error logged says want. */
static void assert_refused(const char *path, const char *want)
{
    kvio_tokenizer_t *tokenizer = NULL;
    kvio_log_capture_begin();
    kvio_status_t status = kvio_tokenizer_load(path, &tokenizer);
    char *log = kvio_log_capture_end(NULL);
    cr_assert_eq(status, KVIO_ERR_INVALID, "%s loads", path);
    cr_assert_null(tokenizer);
    cr_assert(strstr(log, want) != NULL, "%s: '%s' lacks '%s'", path, log, want);
    free(log);
}

/* Each bad file is refused with its name and what is wrong, line or key. */
Test(tokenizer, a_bad_tokenizer_file_is_named_with_what_is_wrong, .timeout = 30)
{
    char *dir = test_tmpdir();
    static const char *const extra[] = {"he"};
    char *good = test_write_rank_file(dir, "cl100k_base.tiktoken", extra, 1);
    char *text = test_read_file(good);
    char *corrupt_text = malloc(strlen(text) + 32);
    char *newline = strchr(strchr(text, '\n') + 1, '\n'); /* after line 2 */
    sprintf(corrupt_text, "%.*s\n%%%%not base64 7\n%s", (int)(newline - text), text, newline + 1);
    char *unknown = test_write_rank_file(dir, "mine.tiktoken", extra, 1);
    struct {
        const char *name, *text, *path, *want;
    } cases[] = {
        {NULL, NULL, "/nonexistent/o200k_base.tiktoken", "/nonexistent/o200k_base.tiktoken: No such file"},
        {"corrupt-cl100k_base.tiktoken", corrupt_text, NULL, "corrupt-cl100k_base.tiktoken:3: not a tiktoken rank line"},
        {NULL, NULL, unknown, "257 ranks is none kvio knows"},
        {"empty-o200k_base.tiktoken", "", NULL, "no ranks in it"},
        {"short-o200k_base.tiktoken", "YQ== 97\n", NULL, "no token for the byte 0x00"},
        {"syntax.json", "{\"model\": {\"type\": \"BPE\",,}}", NULL, "syntax.json:1:"},
        {"wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", NULL,
         "model.type: WordPiece"},
        {"nfkc.json", "{\"normalizer\": {\"type\": \"NFKC\"}, \"model\": {\"vocab\": {}}}", NULL,
         "normalizer: NFKC"},
        {"merges.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a q\"]}}", NULL,
         "model.merges[0]"},
        {"unicode.json", "{\"model\": {\"vocab\": {\"\\u4e00\": 0}, \"merges\": []}}", NULL,
         "not a byte-level token"},
        {"blank.json", "{\"model\": {\"vocab\": {\"\": 0}, \"merges\": []}}", NULL,
         "model.vocab: an empty token"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *path = cases[i].path ? strdup(cases[i].path)
                                   : test_write_file(dir, cases[i].name, cases[i].text);
        assert_refused(path, cases[i].want);
        free(path);
    }
    char *pre = test_write_tokenizer_json(dir, "digits.json", "");
    char *pre_text = test_read_file(pre);
    char *split = strstr(pre_text, "\"Split\"");
    memcpy(split, "\"Punct\"", 7);
    char *punct = test_write_file(dir, "punct.json", pre_text);
    assert_refused(punct, "punct.json: pre_tokenizer: type Punct");
    free(punct);
    free(pre_text);
    free(pre);
    free(unknown);
    free(corrupt_text);
    free(text);
    free(good);
    test_rmtree(dir);
    free(dir);
}

/* text with the first from replaced by to (malloc'd). */
static char *replaced(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    cr_assert_not_null(at, "no '%s'", from);
    char *out = malloc(strlen(text) + strlen(to) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

/* A file that says two things of one token is refused with what and
 * where: two byte strings sharing a rank, one string with two ranks, two
 * vocabulary tokens sharing an id, an added token taking a vocabulary id
 * or added twice, a model type that is not a name, an empty vocabulary
 * (blamed on model.merges[0]); all were read silently, one of the two
 * winning. A byte order mark before a tokenizer.json is read past (it was
 * read as a tiktoken file). */
Test(tokenizer, contradictory_tokenizer_files_are_refused_naming_the_conflict, .timeout = 30)
{
    char *dir = test_tmpdir();
    static const char *const extra[] = {"he"};
    char *ranks = test_write_rank_file(dir, "good-cl100k_base.tiktoken", extra, 1);
    char *ranks_text = test_read_file(ranks);
    char *json = test_write_tokenizer_json(dir, "good.json", "");
    char *json_text = test_read_file(json);
    char *two_ranks = malloc(strlen(ranks_text) + 32), *shared_rank = malloc(strlen(ranks_text) + 32);
    sprintf(two_ranks, "%saGU= 300\n", ranks_text);   /* "he" again */
    sprintf(shared_rank, "%saXQ= 256\n", ranks_text); /* "it" at he's rank */
    char *vocab_id = replaced(json_text, "\"id\": 300,", "\"id\": 97,");
    char *added_twice = replaced(json_text, "\"<|im_end|>\"", "\"<|im_start|>\"");
    char *id_twice = replaced(json_text, "\"id\": 301,", "\"id\": 300,");
    char *type_number = replaced(json_text, "\"type\": \"BPE\"", "\"type\": 5");
    struct {
        const char *name, *text, *want;
    } cases[] = {
        {"two-cl100k_base.tiktoken", two_ranks,
         "two-cl100k_base.tiktoken:258: \"he\" is given id 256 and also id 300"},
        {"shared-cl100k_base.tiktoken", shared_rank,
         "shared-cl100k_base.tiktoken:258: id 256 is given to \"he\" and also to \"it\""},
        {"shared.json", "{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
         "shared.json: model.vocab: id 0 is given to \"a\" and also to \"b\""},
        {"vocab-id.json", vocab_id,
         "vocab-id.json: added_tokens[0]: id 97 is the vocabulary's \"a\", not \"<|im_start|>\""},
        {"added-twice.json", added_twice,
         "added-twice.json: added_tokens[1]: \"<|im_start|>\" is added twice"},
        {"id-twice.json", id_twice, "id-twice.json: added_tokens[1]: id 300 is added twice"},
        {"type.json", type_number, "type.json: model.type: not a model name"},
        {"empty.json", "{\"model\": {\"vocab\": {}, \"merges\": []}}",
         "empty.json: model.vocab: empty"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *path = test_write_file(dir, cases[i].name, cases[i].text);
        assert_refused(path, cases[i].want);
        free(path);
    }
    char *bom_text = malloc(strlen(json_text) + 4);
    sprintf(bom_text, "\xef\xbb\xbf%s", json_text);
    char *bom = test_write_file(dir, "bom.json", bom_text);
    kvio_tokenizer_t *tokenizer = NULL;
    cr_assert_eq(kvio_tokenizer_load(bom, &tokenizer), KVIO_OK, "a tokenizer.json after a BOM");
    kvio_tokenizer_destroy(tokenizer);
    free(bom);
    free(bom_text);
    free(type_number);
    free(id_twice);
    free(added_twice);
    free(vocab_id);
    free(shared_rank);
    free(two_ranks);
    free(json_text);
    free(json);
    free(ranks_text);
    free(ranks);
    test_rmtree(dir);
    free(dir);
}
