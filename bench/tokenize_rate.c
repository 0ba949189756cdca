/* Encodes documents with kvio's tokenizer and times it on one thread: the
 * documents are a JSON Lines file of strings; each document's ids go to a
 * line of OUT (space-separated), for comparison with a reference
 * tokenizer's. Prints `bytes N seconds S` (the encoding alone, best of
 * ROUNDS passes over every document). With `special`, special tokens
 * written in the text are read as such (as Hugging Face's tokenizers do
 * with added tokens); else they are text (tiktoken's encode_ordinary).
 * usage: tokenize_rate TOKENIZER DOCS.jsonl OUT [ROUNDS [special]] */
#include "kvio/log.h"
#include "kvio/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tokenize_rate TOKENIZER DOCS.jsonl OUT [ROUNDS [special]]\n");
        return 2;
    }
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    bool special = argc > 5 && strcmp(argv[5], "special") == 0;
    kvio_tokenizer_t *tokenizer;
    if (kvio_tokenizer_load(argv[1], &tokenizer) != KVIO_OK)
        return 2;
    FILE *in = fopen(argv[2], "r");
    if (in == NULL) {
        perror(argv[2]);
        return 2;
    }
    json_t *docs = json_array();
    char *line = NULL;
    size_t capacity = 0;
    size_t bytes = 0;
    while (getline(&line, &capacity, in) > 0) {
        json_error_t error;
        json_t *doc = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
        if (!json_is_string(doc)) {
            fprintf(stderr, "%s: a line that is not a JSON string: %s\n", argv[2], error.text);
            return 2;
        }
        bytes += json_string_length(doc);
        json_array_append_new(docs, doc);
    }
    free(line);
    fclose(in);

    kvio_tokens_t *encoded = calloc(json_array_size(docs), sizeof(*encoded));
    double best = 1e30;
    for (int round = 0; round < rounds; round++) {
        for (size_t i = 0; i < json_array_size(docs); i++)
            kvio_tokens_fini(&encoded[i]);
        double start = now_s();
        for (size_t i = 0; i < json_array_size(docs); i++) {
            const json_t *doc = json_array_get(docs, i);
            if (kvio_tokenizer_encode(tokenizer, json_string_value(doc), json_string_length(doc),
                                      special, &encoded[i]) != KVIO_OK) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
        }
        double took = now_s() - start;
        best = took < best ? took : best;
    }
    FILE *out = fopen(argv[3], "w");
    if (out == NULL) {
        perror(argv[3]);
        return 1;
    }
    for (size_t i = 0; i < json_array_size(docs); i++) {
        for (size_t j = 0; j < encoded[i].count; j++)
            fprintf(out, j ? " %u" : "%u", encoded[i].ids[j]);
        fputc('\n', out);
        kvio_tokens_fini(&encoded[i]);
    }
    fclose(out);
    printf("bytes %zu seconds %.6f\n", bytes, best);
    free(encoded);
    json_decref(docs);
    kvio_tokenizer_destroy(tokenizer);
    return 0;
}
