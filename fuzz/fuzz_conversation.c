/* libFuzzer target for conversation logs and the tokenizer's files
 * (workloads/conversation.c, workloads/prefix.c, workloads/tokenizer_load.c):
 * the first byte picks the reader (bit 0: a tokenizer file, else a log)
 * and, for a log, the template (bits 1-2); the rest is the file. A log
 * that loads is analysed as kvio prefix does; a tokenizer that loads
 * encodes its own file's text. Refusals must leave nothing allocated. */
#include "kvio/conversation.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/kvio-fuzz-conversation-%d", (int)getpid());
    FILE *file = fopen(path, "wb");
    if (file == NULL || (size > 1 && fwrite(data + 1, 1, size - 1, file) != size - 1))
        abort();
    fclose(file);
    if (data[0] & 1) {
        kvio_tokenizer_t *tokenizer = NULL;
        if (kvio_tokenizer_load(path, &tokenizer) == KVIO_OK) {
            kvio_tokens_t tokens = {0};
            if (kvio_tokenizer_encode(tokenizer, (const char *)data + 1, size - 1, true,
                                      &tokens) != KVIO_OK)
                abort();
            kvio_tokens_fini(&tokens);
            kvio_tokenizer_destroy(tokenizer);
        }
    } else {
        kvio_conversation_log_t *log = NULL;
        if (kvio_conversation_load(path, &log) == KVIO_OK) {
            kvio_prefix_params_t params = {
                .chat_template = (kvio_chat_template_t)((data[0] >> 1) % 3), .block_size = 16};
            kvio_prefix_result_t *result = NULL;
            if (kvio_prefix_analyze(log, &params, &result) != KVIO_OK)
                abort();
            kvio_prefix_result_free(result);
            kvio_conversation_log_free(log);
        }
    }
    unlink(path);
    return 0;
}
