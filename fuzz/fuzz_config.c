/* libFuzzer target for the YAML config loader: the input is a workload's
 * YAML text, then `--set` overrides, separated by NUL bytes
 * ("yaml\0stream.requests=5\0serve.kvcache.block_size=16"). It parses the
 * text, applies the overrides, binds the result over kvio_workload_options
 * and dumps the effective config, as `kvio run FILE --set ...` does. */
#include "kvio/config.h"
#include "kvio/run.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OVERRIDES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *separator = memchr(text, '\0', size);
    size_t yaml_length = separator != NULL ? (size_t)(separator - text) : size;
    /* The YAML exactly as long as it is (no terminator), so that reading
     * past its end is an ASan report. */
    char *yaml = malloc(yaml_length ? yaml_length : 1);
    char *overrides = malloc(size + 1);
    if (yaml == NULL || overrides == NULL)
        goto cleanup;
    memcpy(yaml, text, yaml_length);
    memcpy(overrides, text, size);
    overrides[size] = '\0';

    char error[1024] = "";
    kvio_config_doc_t *doc = NULL;
    if (kvio_config_doc_parse(yaml, yaml_length, "fuzz.yaml", &doc, error, sizeof(error)) !=
        KVIO_OK)
        goto cleanup;
    kvio_status_t status = KVIO_OK;
    size_t count = 0;
    for (size_t at = yaml_length + 1; at < size && count < MAX_OVERRIDES && status == KVIO_OK;
         at += strlen(overrides + at) + 1, count++)
        status = kvio_config_doc_set(doc, overrides + at, error, sizeof(error));
    kvio_workload_t workload;
    memset(&workload, 0, sizeof(workload));
    if (status == KVIO_OK &&
        kvio_config_bind(kvio_workload_options, doc, &workload, error, sizeof(error)) ==
            KVIO_OK) {
        json_t *effective = kvio_config_to_json(kvio_workload_options, &workload);
        free(json_dumps(effective, JSON_COMPACT));
        json_decref(effective);
        kvio_workload_free(&workload);
    }
    kvio_config_doc_destroy(doc);

cleanup:
    free(overrides);
    free(yaml);
    return 0;
}
