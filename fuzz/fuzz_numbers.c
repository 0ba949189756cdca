/* libFuzzer target for the numbers the command line and workloads take:
 * sizes ("4GiB") and durations ("250ms"), each NUL-separated piece of the
 * input parsed both ways. A value that parses formats and parses back to
 * itself (kvio_format_size, kvio_format_duration). */
#include "kvio/format.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    for (char *piece = text; piece <= text + size; piece += strlen(piece) + 1) {
        char error[256], again[64];
        uint64_t bytes = 0, bytes_again = 0;
        if (kvio_parse_size(piece, &bytes, error, sizeof(error)) == KVIO_OK) {
            kvio_format_size(bytes, again, sizeof(again));
            if (kvio_parse_size(again, &bytes_again, error, sizeof(error)) != KVIO_OK ||
                bytes_again != bytes)
                abort();
        }
        int64_t ns = 0, ns_again = 0;
        if (kvio_parse_duration(piece, &ns, error, sizeof(error)) == KVIO_OK && ns >= 0) {
            kvio_format_duration(ns, again, sizeof(again));
            if (kvio_parse_duration(again, &ns_again, error, sizeof(error)) != KVIO_OK ||
                ns_again != ns)
                abort();
        }
    }
    free(text);
    return 0;
}
