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
        {"system", 6, "You are terse.", 14},
        {"user", 4, "Hello there", 11},
        {"assistant", 9, " hi yo", 6},
        {"user", 4, "Again", 5},
    };
    for (size_t t = 0; t < 3; t++) {
        kvio_chat_template_t template_id;
        cr_assert_eq(kvio_chat_template_find(templates[t], &template_id), KVIO_OK);
        cr_assert_str_eq(kvio_chat_template_name(template_id), templates[t]);
        kvio_tokens_t first = {0}, next = {0};
        cr_assert_eq(kvio_chat_render(template_id, conversation, 2, false, &first), KVIO_OK);
        cr_assert_eq(kvio_chat_render(template_id, conversation, 4, true, &next), KVIO_OK);
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
