/* Configuration documents: libyaml events become a small tree of nodes
 * (each with its origin, line and column), and `--set` overrides edit the
 * tree before it is bound. libyaml's errors are converted here, once. */
#include "core/config_int.h"

#include "kvio/format.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

/* ---------- nodes ---------- */

static node_t *node_new(node_kind_t kind, const char *origin, unsigned line,
                        unsigned column)
{
    node_t *node = calloc(1, sizeof(*node));
    if (node != NULL) {
        node->kind = kind;
        node->origin = origin;
        node->line = line;
        node->column = column;
    }
    return node;
}

void config_node_free(node_t *node)
{
    if (node == NULL)
        return;
    for (size_t i = 0; i < node->count; i++) {
        if (node->keys != NULL)
            config_node_free(node->keys[i]);
        config_node_free(node->items[i]);
    }
    free(node->keys);
    free(node->items);
    free(node->text);
    free(node);
}

static int node_append(node_t *parent, node_t *key, node_t *item)
{
    if (parent->count == parent->capacity) {
        size_t capacity = parent->capacity ? 2 * parent->capacity : 8;
        node_t **items = realloc(parent->items, capacity * sizeof(*items));
        if (items == NULL)
            return -1;
        parent->items = items;
        if (parent->kind == NODE_MAPPING) {
            node_t **keys = realloc(parent->keys, capacity * sizeof(*keys));
            if (keys == NULL)
                return -1;
            parent->keys = keys;
        }
        parent->capacity = capacity;
    }
    if (parent->kind == NODE_MAPPING)
        parent->keys[parent->count] = key;
    parent->items[parent->count++] = item;
    return 0;
}

node_t *config_mapping_get(const node_t *mapping, const char *key, size_t *index_p)
{
    for (size_t i = 0; i < mapping->count; i++) {
        if (strcmp(mapping->keys[i]->text, key) == 0) {
            if (index_p != NULL)
                *index_p = i;
            return mapping->items[i];
        }
    }
    return NULL;
}

static const char *origin_add(kvio_config_doc_t *doc, const char *origin)
{
    char **origins = realloc(doc->origins, (doc->num_origins + 1) * sizeof(*origins));
    if (origins == NULL)
        return NULL;
    doc->origins = origins;
    char *copy = strdup(origin);
    if (copy == NULL)
        return NULL;
    doc->origins[doc->num_origins++] = copy;
    return copy;
}

/* "origin:line:column: " or "origin: " when there is no position. */
static void where(const node_t *node, char *text_p, size_t text_len)
{
    if (node->line > 0)
        snprintf(text_p, text_len, "%s:%u:%u", node->origin, node->line, node->column);
    else
        snprintf(text_p, text_len, "%s", node->origin);
}

kvio_status_t config_node_error(bind_context_t *context, const node_t *node,
                                const char *path, const char *fmt, ...)
{
    char position[512], message[512];
    where(node, position, sizeof(position));
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    if (path != NULL && path[0] != '\0')
        snprintf(context->error, context->error_len, "%s: %s: %s", position, path, message);
    else
        snprintf(context->error, context->error_len, "%s: %s", position, message);
    return KVIO_ERR_CONFIG;
}

void config_join_path(char *out, size_t out_len, const char *path, const char *key)
{
    if (path[0] != '\0')
        snprintf(out, out_len, "%s.%s", path, key);
    else
        snprintf(out, out_len, "%s", key);
}

/* ---------- YAML → nodes ---------- */

typedef struct yaml_reader {
    yaml_parser_t parser;
    const char *origin;
    const char *text;
    size_t length;
    char *error;
    size_t error_len;
    unsigned depth; /* collections open around the node being read */
} yaml_reader_t;

/* Deeper nesting is refused: no workload needs it, and the reader (and
 * freeing the tree) recurse once per level. */
#define CONFIG_MAX_DEPTH 64

static kvio_status_t reader_fail(yaml_reader_t *reader)
{
    yaml_parser_t *parser = &reader->parser;
    const char *hint = "";
    size_t index = parser->problem_mark.index;
    if (index < reader->length && reader->text[index] == '\t')
        hint = " (a tab character; YAML indents with spaces)";
    if (parser->context != NULL)
        snprintf(reader->error, reader->error_len, "%s:%zu:%zu: %s %s%s", reader->origin,
                 parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                 parser->problem, parser->context, hint);
    else
        snprintf(reader->error, reader->error_len, "%s:%zu:%zu: %s%s", reader->origin,
                 parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                 parser->problem ? parser->problem : "invalid YAML", hint);
    return KVIO_ERR_CONFIG;
}

static kvio_status_t read_event(yaml_reader_t *reader, yaml_event_t *event)
{
    if (!yaml_parser_parse(&reader->parser, event))
        return reader_fail(reader);
    return KVIO_OK;
}

static kvio_status_t read_node(yaml_reader_t *reader, yaml_event_t *event, node_t **node_p);

static kvio_status_t read_collection(yaml_reader_t *reader, node_t *node,
                                     yaml_event_type_t end_type)
{
    for (;;) {
        yaml_event_t event;
        kvio_status_t status = read_event(reader, &event);
        if (status != KVIO_OK)
            return status;
        if (event.type == end_type) {
            yaml_event_delete(&event);
            return KVIO_OK;
        }
        node_t *key = NULL, *item = NULL;
        if (node->kind == NODE_MAPPING) {
            status = read_node(reader, &event, &key);
            if (status != KVIO_OK)
                return status;
            if (key->kind != NODE_SCALAR) {
                snprintf(reader->error, reader->error_len, "%s:%u:%u: a key must be a plain name",
                         reader->origin, key->line, key->column);
                config_node_free(key);
                return KVIO_ERR_CONFIG;
            }
            size_t first;
            if (config_mapping_get(node, key->text, &first) != NULL) {
                snprintf(reader->error, reader->error_len,
                         "%s:%u:%u: duplicate key '%s' (first at line %u)", reader->origin,
                         key->line, key->column, key->text, node->keys[first]->line);
                config_node_free(key);
                return KVIO_ERR_CONFIG;
            }
            status = read_event(reader, &event);
            if (status != KVIO_OK) {
                config_node_free(key);
                return status;
            }
        }
        status = read_node(reader, &event, &item);
        if (status != KVIO_OK) {
            config_node_free(key);
            return status;
        }
        if (node_append(node, key, item) != 0) {
            config_node_free(key);
            config_node_free(item);
            snprintf(reader->error, reader->error_len, "%s: out of memory", reader->origin);
            return KVIO_ERR_NOMEM;
        }
    }
}

/* Builds a node from event (consumed) and the events that follow it. */
static kvio_status_t read_node(yaml_reader_t *reader, yaml_event_t *event, node_t **node_p)
{
    unsigned line = (unsigned)event->start_mark.line + 1;
    unsigned column = (unsigned)event->start_mark.column + 1;
    node_t *node = NULL;
    kvio_status_t status = KVIO_OK;
    switch (event->type) {
    case YAML_SCALAR_EVENT:
        node = node_new(NODE_SCALAR, reader->origin, line, column);
        if (node != NULL) {
            node->text = strndup((const char *)event->data.scalar.value,
                                 event->data.scalar.length);
            node->plain = event->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
            if (node->text == NULL) {
                config_node_free(node);
                node = NULL;
            }
        }
        break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT: {
        bool mapping = event->type == YAML_MAPPING_START_EVENT;
        if (reader->depth >= CONFIG_MAX_DEPTH) {
            yaml_event_delete(event);
            snprintf(reader->error, reader->error_len,
                     "%s:%u:%u: nested more than %d levels deep", reader->origin, line, column,
                     CONFIG_MAX_DEPTH);
            return KVIO_ERR_CONFIG;
        }
        node = node_new(mapping ? NODE_MAPPING : NODE_SEQUENCE, reader->origin, line, column);
        if (node != NULL) {
            yaml_event_delete(event);
            reader->depth++;
            status = read_collection(reader, node,
                                     mapping ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT);
            reader->depth--;
            if (status != KVIO_OK) {
                config_node_free(node);
                return status;
            }
            *node_p = node;
            return KVIO_OK;
        }
        break;
    }
    case YAML_ALIAS_EVENT:
        yaml_event_delete(event);
        snprintf(reader->error, reader->error_len,
                 "%s:%u:%u: aliases (*name) are not supported; write the value out",
                 reader->origin, line, column);
        return KVIO_ERR_CONFIG;
    default:
        yaml_event_delete(event);
        snprintf(reader->error, reader->error_len, "%s:%u:%u: unexpected YAML structure",
                 reader->origin, line, column);
        return KVIO_ERR_CONFIG;
    }
    yaml_event_delete(event);
    if (node == NULL) {
        snprintf(reader->error, reader->error_len, "%s: out of memory", reader->origin);
        return KVIO_ERR_NOMEM;
    }
    *node_p = node;
    return status;
}

/* Parses one YAML document into a node; an empty document gives NULL. */
kvio_status_t config_parse_yaml(const char *text, size_t length, const char *origin,
                                node_t **root_p, char *error_p, size_t error_len)
{
    yaml_reader_t reader = {.origin = origin, .text = text, .length = length,
                            .error = error_p, .error_len = error_len};
    node_t *root = NULL;
    kvio_status_t status;
    yaml_event_t event;
    if (!yaml_parser_initialize(&reader.parser)) {
        snprintf(error_p, error_len, "%s: cannot start the YAML parser", origin);
        return KVIO_ERR_NOMEM;
    }
    yaml_parser_set_input_string(&reader.parser, (const unsigned char *)text, length);
    for (;;) {
        status = read_event(&reader, &event);
        if (status != KVIO_OK)
            goto out;
        yaml_event_type_t type = event.type;
        if (type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&event);
            break;
        }
        if (type == YAML_STREAM_START_EVENT || type == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&event);
            continue;
        }
        if (type == YAML_DOCUMENT_START_EVENT) {
            unsigned line = (unsigned)event.start_mark.line + 1;
            yaml_event_delete(&event);
            if (root != NULL) {
                snprintf(error_p, error_len, "%s:%u:1: a second YAML document; kvio reads one",
                         origin, line);
                status = KVIO_ERR_CONFIG;
                goto out;
            }
            status = read_event(&reader, &event);
            if (status != KVIO_OK)
                goto out;
            status = read_node(&reader, &event, &root);
            if (status != KVIO_OK)
                goto out;
            continue;
        }
        yaml_event_delete(&event);
    }
    *root_p = root;
    root = NULL;
out:
    config_node_free(root);
    yaml_parser_delete(&reader.parser);
    return status;
}

kvio_status_t kvio_config_doc_parse(const char *text, size_t length, const char *origin,
                                    kvio_config_doc_t **doc_p, char *error_p,
                                    size_t error_len)
{
    kvio_config_doc_t *doc = calloc(1, sizeof(*doc));
    if (doc == NULL)
        return KVIO_ERR_NOMEM;
    const char *owned_origin = origin_add(doc, origin);
    if (owned_origin == NULL) {
        kvio_config_doc_destroy(doc);
        return KVIO_ERR_NOMEM;
    }
    node_t *root = NULL;
    kvio_status_t status = config_parse_yaml(text, length, owned_origin, &root, error_p, error_len);
    if (status != KVIO_OK) {
        kvio_config_doc_destroy(doc);
        return status;
    }
    if (root == NULL || (root->kind == NODE_SCALAR && root->plain && root->text[0] == '\0')) {
        snprintf(error_p, error_len, "%s: the file is empty; expected a mapping of keys", origin);
        config_node_free(root);
        kvio_config_doc_destroy(doc);
        return KVIO_ERR_CONFIG;
    }
    if (root->kind != NODE_MAPPING) {
        snprintf(error_p, error_len, "%s:%u:%u: the top level must be a mapping of keys, not a %s",
                 origin, root->line, root->column,
                 root->kind == NODE_SCALAR ? "scalar" : "sequence");
        config_node_free(root);
        kvio_config_doc_destroy(doc);
        return KVIO_ERR_CONFIG;
    }
    doc->root = root;
    *doc_p = doc;
    return KVIO_OK;
}

kvio_status_t kvio_config_doc_load(const char *path, kvio_config_doc_t **doc_p,
                                   char *error_p, size_t error_len)
{
    struct stat info;
    if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) {
        snprintf(error_p, error_len, "%s: is a directory, not a workload file (kvio run FILE or "
                 "PRESET)", path);
        return KVIO_ERR_CONFIG;
    }
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        snprintf(error_p, error_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : KVIO_ERR_IO;
    }
    size_t capacity = 8192, length = 0;
    char *text = malloc(capacity);
    kvio_status_t status = KVIO_OK;
    while (text != NULL) {
        size_t got = fread(text + length, 1, capacity - length, file);
        length += got;
        if (got == 0)
            break;
        if (length == capacity) {
            if (capacity >= (64u << 20)) {
                snprintf(error_p, error_len, "%s: larger than 64 MiB; not a workload file", path);
                status = KVIO_ERR_CONFIG;
                break;
            }
            capacity *= 2;
            char *bigger = realloc(text, capacity);
            if (bigger == NULL) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
        }
    }
    if (ferror(file) && status == KVIO_OK) {
        snprintf(error_p, error_len, "%s: read error", path);
        status = KVIO_ERR_IO;
    }
    fclose(file);
    if (text == NULL)
        return KVIO_ERR_NOMEM;
    if (status == KVIO_OK)
        status = kvio_config_doc_parse(text, length, path, doc_p, error_p, error_len);
    free(text);
    return status;
}

bool kvio_config_doc_descend(kvio_config_doc_t *doc, const char *marker, const char *key)
{
    node_t *root = doc->root;
    if (root == NULL || root->kind != NODE_MAPPING || config_mapping_get(root, marker, NULL) == NULL)
        return false;
    for (size_t i = 0; i < root->count; i++) {
        if (strcmp(root->keys[i]->text, key) != 0 || root->items[i]->kind != NODE_MAPPING)
            continue;
        node_t *section = root->items[i];
        root->items[i] = NULL; /* kept; the rest of the old root goes */
        for (size_t k = 0; k < root->count; k++) {
            config_node_free(root->keys[k]);
            config_node_free(root->items[k]);
        }
        free(root->keys);
        free(root->items);
        free(root);
        doc->root = section;
        return true;
    }
    return false;
}

bool kvio_config_doc_has(const kvio_config_doc_t *doc, const char *key)
{
    const node_t *node = doc->root;
    char part[128];
    while (node != NULL && node->kind == NODE_MAPPING) {
        const char *dot = strchr(key, '.');
        size_t length = dot != NULL ? (size_t)(dot - key) : strlen(key);
        if (length >= sizeof(part))
            return false;
        memcpy(part, key, length);
        part[length] = '\0';
        node = config_mapping_get(node, part, NULL);
        if (dot == NULL)
            return node != NULL;
        key = dot + 1;
    }
    return false;
}

void config_origin_retag(node_t *node, const char *origin)
{
    node->origin = origin;
    node->line = 0;
    node->column = 0;
    for (size_t i = 0; i < node->count; i++) {
        if (node->keys != NULL)
            config_origin_retag(node->keys[i], origin);
        config_origin_retag(node->items[i], origin);
    }
}

static bool parse_index(const char *text, size_t *index_p)
{
    if (text[0] == '\0')
        return false;
    char *end;
    unsigned long value = strtoul(text, &end, 10);
    if (*end != '\0' || text[0] == '-')
        return false;
    *index_p = value;
    return true;
}

/* "--set KEY=VALUE" as messages show it: a long value (or key) cut to its
 * first characters and its length, so that the reason after it is never
 * cut off (a 3,000-byte value's message ended mid-value). */
static void shown_assignment(const char *assignment, char *out_p, size_t out_len)
{
    const size_t shown = 64;
    size_t length = strlen(assignment);
    if (length <= 2 * shown) {
        snprintf(out_p, out_len, "--set %s", assignment);
        return;
    }
    char head[2 * 64 + 1];
    kvio_format_one_line(assignment, head, sizeof(head));
    snprintf(out_p, out_len, "--set %s... (%zu bytes)", head, length);
}

kvio_status_t kvio_config_doc_set(kvio_config_doc_t *doc, const char *assignment,
                                  char *error_p, size_t error_len)
{
    char origin_text[600];
    shown_assignment(assignment, origin_text, sizeof(origin_text));
    const char *equals = strchr(assignment, '=');
    if (equals == NULL || equals == assignment) {
        snprintf(error_p, error_len, "%s: expected KEY=VALUE (for example "
                 "serve.engine.max_num_seqs=64)", origin_text);
        return KVIO_ERR_CONFIG;
    }
    /* strtok would read serve..kvcache as serve.kvcache: an empty part of
     * the key is refused. */
    size_t key_length = (size_t)(equals - assignment);
    if (assignment[0] == '.' || assignment[key_length - 1] == '.' ||
        memmem(assignment, key_length, "..", 2) != NULL) {
        snprintf(error_p, error_len, "%s: the key %.*s has an empty part (keys are "
                 "names joined by single dots: serve.kvcache.blocks)", origin_text,
                 key_length > 128 ? 128 : (int)key_length, assignment);
        return KVIO_ERR_CONFIG;
    }
    const char *origin = origin_add(doc, origin_text);
    char *path = strndup(assignment, (size_t)(equals - assignment));
    if (origin == NULL || path == NULL) {
        free(path);
        return KVIO_ERR_NOMEM;
    }
    const char *value_text = equals + 1;
    node_t *value = NULL;
    char value_error[512];
    kvio_status_t status = config_parse_yaml(value_text, strlen(value_text), origin, &value,
                                      value_error, sizeof(value_error));
    if (status != KVIO_OK) {
        /* The message starts "ORIGIN:"; a long origin may have been cut. */
        size_t origin_length = strlen(origin);
        const char *reason = value_error;
        if (strncmp(value_error, origin, origin_length) == 0 && value_error[origin_length] == ':')
            reason += origin_length + 1;
        snprintf(error_p, error_len, "%s: bad value: %s", origin, reason);
        free(path);
        return status;
    }
    if (value == NULL) {
        value = node_new(NODE_SCALAR, origin, 0, 0);
        if (value != NULL)
            value->text = strdup("");
        if (value == NULL || value->text == NULL) {
            config_node_free(value);
            free(path);
            return KVIO_ERR_NOMEM;
        }
        value->plain = true;
    }
    config_origin_retag(value, origin);

    node_t *current = doc->root;
    char *save = NULL;
    char *part = strtok_r(path, ".", &save);
    status = KVIO_OK;
    while (part != NULL) {
        char *next = strtok_r(NULL, ".", &save);
        size_t index;
        if (current->kind == NODE_SEQUENCE && parse_index(part, &index)) {
            if (index >= current->count) {
                snprintf(error_p, error_len, "%s: index %zu is past the end of a list of %zu",
                         origin, index, current->count);
                status = KVIO_ERR_CONFIG;
                break;
            }
            if (next == NULL) {
                config_node_free(current->items[index]);
                current->items[index] = value;
                value = NULL;
            } else {
                current = current->items[index];
            }
        } else if (current->kind == NODE_MAPPING) {
            size_t position;
            node_t *child = config_mapping_get(current, part, &position);
            if (next == NULL) {
                if (child != NULL) {
                    config_node_free(current->items[position]);
                    current->items[position] = value;
                } else {
                    node_t *key = node_new(NODE_SCALAR, origin, 0, 0);
                    if (key == NULL || (key->text = strdup(part)) == NULL ||
                        node_append(current, key, value) != 0) {
                        config_node_free(key);
                        status = KVIO_ERR_NOMEM;
                        break;
                    }
                }
                value = NULL;
            } else {
                if (child == NULL) {
                    node_t *key = node_new(NODE_SCALAR, origin, 0, 0);
                    child = node_new(NODE_MAPPING, origin, 0, 0);
                    if (key == NULL || child == NULL || (key->text = strdup(part)) == NULL ||
                        node_append(current, key, child) != 0) {
                        config_node_free(key);
                        config_node_free(child);
                        status = KVIO_ERR_NOMEM;
                        break;
                    }
                }
                current = child;
            }
        } else {
            snprintf(error_p, error_len, "%s: '%s' is inside a value that is not a mapping",
                     origin, part);
            status = KVIO_ERR_CONFIG;
            break;
        }
        part = next;
    }
    if (status == KVIO_OK && value != NULL) {
        snprintf(error_p, error_len, "%s: empty key", origin);
        status = KVIO_ERR_CONFIG;
    }
    config_node_free(value);
    free(path);
    return status;
}

void kvio_config_doc_destroy(kvio_config_doc_t *doc)
{
    if (doc == NULL)
        return;
    config_node_free(doc->root);
    for (size_t i = 0; i < doc->num_origins; i++)
        free(doc->origins[i]);
    free(doc->origins);
    free(doc);
}

