/* Provenance: what every output kvio writes opens with, built in one place
 * for every command (summary.json, compare.json, capacity.json, cachesim
 * and prefix JSON, mlperf.json, the report page): the schema, kvio's
 * version and build, the command as typed and its overrides, the start
 * time and the host. */
#include "kvio/results.h"

#include <stdlib.h>
#include <string.h>

#include "kvio/format.h"
#include "kvio/redis.h"
#include "kvio/sysinfo.h"

/* An argument as results may show it: a URL's password becomes ***. */
static json_t *redacted(const char *argument)
{
    size_t size = strlen(argument) + 4;
    char *text = malloc(size);
    if (text == NULL)
        return json_string("");
    kvio_url_redact(argument, text, size);
    json_t *value = json_string(text);
    free(text);
    return value;
}

json_t *kvio_provenance_json(const kvio_provenance_t *provenance, const json_t *host,
                             uint64_t start_ns)
{
    char start_text[64];
    kvio_format_utc(start_ns, start_text, sizeof(start_text));
    json_t *head = json_object();
    if (head == NULL)
        return NULL;
    json_object_set_new(head, "schema_version", json_integer(KVIO_SCHEMA_VERSION));
    json_object_set_new(head, "kvio_version", json_string(KVIO_VERSION));
    /* How to run it again: the command as typed and its overrides. */
    json_t *command = json_array();
    bool typed = provenance != NULL && provenance->argv != NULL;
    if (typed)
        json_array_append_new(command, json_string("kvio"));
    for (int i = 0; typed && i < provenance->argc; i++)
        json_array_append_new(command, redacted(provenance->argv[i]));
    json_object_set_new(head, "command", command);
    json_t *overrides = json_array();
    for (size_t i = 0; provenance != NULL && provenance->overrides != NULL &&
                       i < provenance->num_overrides;
         i++)
        json_array_append_new(overrides, redacted(provenance->overrides[i]));
    json_object_set_new(head, "overrides", overrides);
    json_object_set_new(head, "start_time", json_string(start_text));
    json_object_set_new(head, "host",
                        host != NULL ? json_deep_copy(host) : kvio_host_json());
    json_object_set_new(head, "build", kvio_build_json());
    return head;
}

void kvio_provenance_command_line(const json_t *head, char *text_p, size_t text_len)
{
    size_t at = 0;
    text_p[0] = '\0';
    size_t index;
    const json_t *argument;
    json_array_foreach(json_object_get(head, "command"), index, argument) {
        if (at >= text_len)
            break;
        const char *text = json_string_value(argument);
        at += (size_t)snprintf(text_p + at, text_len - at, index > 1 ? " '%s'" : index ? " %s" : "%s",
                               text != NULL ? text : "");
    }
}
