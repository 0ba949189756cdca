/* Configuration: libyaml events become a small tree of nodes (each with its
 * origin, line and column), `--set` overrides edit the tree, and binding walks
 * the tree against option tables into C structs. libyaml's errors are
 * converted here, once. */
#include "kvio/config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef enum { NODE_SCALAR, NODE_MAPPING, NODE_SEQUENCE } node_kind_t;

typedef struct node {
    node_kind_t kind;
    char *text;           /* scalar text */
    bool plain;           /* scalar was unquoted */
    const char *origin;   /* file name or "--set a=b"; owned by the doc */
    unsigned line, column;
    struct node **keys;   /* mapping keys (scalars) */
    struct node **items;  /* mapping values or sequence items */
    size_t count, capacity;
} node_t;

struct kvio_config_doc {
    node_t *root;
    char **origins; /* every origin string, freed with the doc */
    size_t num_origins;
};

/* Error context while binding: where messages go. */
typedef struct bind_context {
    char *error;
    size_t error_len;
} bind_context_t;

static const double KVIO_SIZE_LIMIT = 18446744073709551615.0;

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

static void node_free(node_t *node)
{
    if (node == NULL)
        return;
    for (size_t i = 0; i < node->count; i++) {
        if (node->keys != NULL)
            node_free(node->keys[i]);
        node_free(node->items[i]);
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

static node_t *mapping_get(const node_t *mapping, const char *key, size_t *index_p)
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

static kvio_status_t node_error(bind_context_t *context, const node_t *node,
                                const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static kvio_status_t node_error(bind_context_t *context, const node_t *node,
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
                node_free(key);
                return KVIO_ERR_CONFIG;
            }
            size_t first;
            if (mapping_get(node, key->text, &first) != NULL) {
                snprintf(reader->error, reader->error_len,
                         "%s:%u:%u: duplicate key '%s' (first at line %u)", reader->origin,
                         key->line, key->column, key->text, node->keys[first]->line);
                node_free(key);
                return KVIO_ERR_CONFIG;
            }
            status = read_event(reader, &event);
            if (status != KVIO_OK) {
                node_free(key);
                return status;
            }
        }
        status = read_node(reader, &event, &item);
        if (status != KVIO_OK) {
            node_free(key);
            return status;
        }
        if (node_append(node, key, item) != 0) {
            node_free(key);
            node_free(item);
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
                node_free(node);
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
                node_free(node);
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
static kvio_status_t parse_yaml(const char *text, size_t length, const char *origin,
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
    node_free(root);
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
    kvio_status_t status = parse_yaml(text, length, owned_origin, &root, error_p, error_len);
    if (status != KVIO_OK) {
        kvio_config_doc_destroy(doc);
        return status;
    }
    if (root == NULL || (root->kind == NODE_SCALAR && root->plain && root->text[0] == '\0')) {
        snprintf(error_p, error_len, "%s: the file is empty; expected a mapping of keys", origin);
        node_free(root);
        kvio_config_doc_destroy(doc);
        return KVIO_ERR_CONFIG;
    }
    if (root->kind != NODE_MAPPING) {
        snprintf(error_p, error_len, "%s:%u:%u: the top level must be a mapping of keys, not a %s",
                 origin, root->line, root->column,
                 root->kind == NODE_SCALAR ? "scalar" : "sequence");
        node_free(root);
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

bool kvio_config_doc_has(const kvio_config_doc_t *doc, const char *key)
{
    return doc->root != NULL && doc->root->kind == NODE_MAPPING &&
           mapping_get(doc->root, key, NULL) != NULL;
}

static void origin_retag(node_t *node, const char *origin)
{
    node->origin = origin;
    node->line = 0;
    node->column = 0;
    for (size_t i = 0; i < node->count; i++) {
        if (node->keys != NULL)
            origin_retag(node->keys[i], origin);
        origin_retag(node->items[i], origin);
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

kvio_status_t kvio_config_doc_set(kvio_config_doc_t *doc, const char *assignment,
                                  char *error_p, size_t error_len)
{
    const char *equals = strchr(assignment, '=');
    if (equals == NULL || equals == assignment) {
        snprintf(error_p, error_len, "--set %s: expected KEY=VALUE (for example serve.engine.max_num_seqs=64)",
                 assignment);
        return KVIO_ERR_CONFIG;
    }
    char origin_text[600];
    snprintf(origin_text, sizeof(origin_text), "--set %s", assignment);
    const char *origin = origin_add(doc, origin_text);
    char *path = strndup(assignment, (size_t)(equals - assignment));
    if (origin == NULL || path == NULL) {
        free(path);
        return KVIO_ERR_NOMEM;
    }
    const char *value_text = equals + 1;
    node_t *value = NULL;
    char value_error[512];
    kvio_status_t status = parse_yaml(value_text, strlen(value_text), origin, &value,
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
            node_free(value);
            free(path);
            return KVIO_ERR_NOMEM;
        }
        value->plain = true;
    }
    origin_retag(value, origin);

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
                node_free(current->items[index]);
                current->items[index] = value;
                value = NULL;
            } else {
                current = current->items[index];
            }
        } else if (current->kind == NODE_MAPPING) {
            size_t position;
            node_t *child = mapping_get(current, part, &position);
            if (next == NULL) {
                if (child != NULL) {
                    node_free(current->items[position]);
                    current->items[position] = value;
                } else {
                    node_t *key = node_new(NODE_SCALAR, origin, 0, 0);
                    if (key == NULL || (key->text = strdup(part)) == NULL ||
                        node_append(current, key, value) != 0) {
                        node_free(key);
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
                        node_free(key);
                        node_free(child);
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
    node_free(value);
    free(path);
    return status;
}

void kvio_config_doc_destroy(kvio_config_doc_t *doc)
{
    if (doc == NULL)
        return;
    node_free(doc->root);
    for (size_t i = 0; i < doc->num_origins; i++)
        free(doc->origins[i]);
    free(doc->origins);
    free(doc);
}

/* ---------- units ---------- */

typedef struct unit {
    const char *name;
    double scale;
} unit_t;

static const unit_t size_units[] = {
    {"B", 1.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0}, {NULL, 0},
};

static const unit_t duration_units[] = {
    {"ns", 1.0}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9},
    {"min", 60e9}, {"h", 3600e9}, {NULL, 0},
};

/* Splits "1.5GiB" into 1.5 and a unit; returns false when the number part
 * is malformed. unit_p points into text. */
static bool split_number(const char *text, double *number_p, const char **unit_p)
{
    while (*text == ' ')
        text++;
    char *end;
    errno = 0;
    double number = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(number))
        return false;
    while (*end == ' ')
        end++;
    *number_p = number;
    *unit_p = end;
    return true;
}

static kvio_status_t parse_with_units(const char *text, const unit_t *units, bool unit_required,
                                      const char *what, double *value_p, char *error_p,
                                      size_t error_len)
{
    double number;
    const char *unit_text;
    char names[128] = "";
    for (const unit_t *unit = units; unit->name != NULL; unit++) {
        strncat(names, unit->name, sizeof(names) - strlen(names) - 1);
        if (unit[1].name != NULL)
            strncat(names, ", ", sizeof(names) - strlen(names) - 1);
    }
    if (!split_number(text, &number, &unit_text)) {
        snprintf(error_p, error_len, "'%s' is not a %s (a number and a unit: %s)", text, what,
                 names);
        return KVIO_ERR_CONFIG;
    }
    if (number < 0) {
        snprintf(error_p, error_len, "%s '%s' is negative", what, text);
        return KVIO_ERR_CONFIG;
    }
    if (*unit_text == '\0') {
        if (unit_required) {
            snprintf(error_p, error_len, "%s '%s' needs a unit (%s)", what, text, names);
            return KVIO_ERR_CONFIG;
        }
        *value_p = number;
        return KVIO_OK;
    }
    for (const unit_t *unit = units; unit->name != NULL; unit++) {
        if (strcmp(unit->name, unit_text) == 0) {
            *value_p = number * unit->scale;
            return KVIO_OK;
        }
    }
    snprintf(error_p, error_len, "%s '%s' has an unknown unit '%s' (use %s)", what, text,
             unit_text, names);
    return KVIO_ERR_CONFIG;
}

kvio_status_t kvio_parse_size(const char *text, uint64_t *bytes_p, char *error_p,
                              size_t error_len)
{
    double bytes;
    kvio_status_t status = parse_with_units(text, size_units, false, "size", &bytes, error_p,
                                            error_len);
    if (status != KVIO_OK)
        return status;
    if (bytes >= KVIO_SIZE_LIMIT) {
        snprintf(error_p, error_len, "size '%s' is too large", text);
        return KVIO_ERR_CONFIG;
    }
    *bytes_p = (uint64_t)llround(bytes);
    return KVIO_OK;
}

kvio_status_t kvio_parse_duration(const char *text, int64_t *ns_p, char *error_p,
                                  size_t error_len)
{
    double ns;
    kvio_status_t status = parse_with_units(text, duration_units, true, "duration", &ns,
                                            error_p, error_len);
    if (status != KVIO_OK)
        return status;
    if (ns >= 9.2e18) {
        snprintf(error_p, error_len, "duration '%s' is too long", text);
        return KVIO_ERR_CONFIG;
    }
    *ns_p = (int64_t)llround(ns);
    return KVIO_OK;
}

void kvio_format_size(uint64_t bytes, char *text_p, size_t text_len)
{
    static const char *const names[] = {"TiB", "GiB", "MiB", "KiB"};
    static const unsigned shifts[] = {40, 30, 20, 10};
    for (int i = 0; i < 4; i++) {
        uint64_t unit = (uint64_t)1 << shifts[i];
        if (bytes >= unit && bytes % unit == 0) {
            snprintf(text_p, text_len, "%llu%s", (unsigned long long)(bytes / unit), names[i]);
            return;
        }
    }
    snprintf(text_p, text_len, "%llu", (unsigned long long)bytes);
}

void kvio_format_duration(int64_t ns, char *text_p, size_t text_len)
{
    static const char *const names[] = {"s", "ms", "us"};
    static const int64_t scales[] = {1000000000, 1000000, 1000};
    for (int i = 0; i < 3; i++) {
        if (ns != 0 && ns % scales[i] == 0) {
            snprintf(text_p, text_len, "%lld%s", (long long)(ns / scales[i]), names[i]);
            return;
        }
    }
    if (ns == 0)
        snprintf(text_p, text_len, "0s");
    else
        snprintf(text_p, text_len, "%lldns", (long long)ns);
}

/* ---------- binding ---------- */

static const char *type_name(kvio_opt_type_t type)
{
    switch (type) {
    case KVIO_OPT_BOOL: return "boolean";
    case KVIO_OPT_INT: return "integer";
    case KVIO_OPT_DOUBLE: return "number";
    case KVIO_OPT_STRING: return "string";
    case KVIO_OPT_ENUM: return "choice";
    case KVIO_OPT_SIZE: return "size";
    case KVIO_OPT_DURATION: return "duration";
    case KVIO_OPT_DIST: return "distribution";
    case KVIO_OPT_SECTION: return "section";
    case KVIO_OPT_LIST: return "list";
    }
    return "value";
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t length_a = strlen(a), length_b = strlen(b);
    if (length_a > 63 || length_b > 63)
        return 64;
    size_t row[64];
    for (size_t j = 0; j <= length_b; j++)
        row[j] = j;
    for (size_t i = 1; i <= length_a; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= length_b; j++) {
            size_t above = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diagonal + cost;
            if (above + 1 < best)
                best = above + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[length_b];
}

/* Returns the closest name within a small edit distance, or NULL. */
static const char *closest_name(const char *name, const char *const *names, size_t count,
                                size_t stride)
{
    const char *best = NULL;
    size_t best_distance = strlen(name) / 3 + 2;
    for (size_t i = 0; i < count; i++) {
        const char *candidate = *(const char *const *)((const char *)names + i * stride);
        size_t distance = edit_distance(name, candidate);
        if (distance < best_distance) {
            best_distance = distance;
            best = candidate;
        }
    }
    return best;
}

static void join_path(char *out, size_t out_len, const char *path, const char *key)
{
    if (path[0] != '\0')
        snprintf(out, out_len, "%s.%s", path, key);
    else
        snprintf(out, out_len, "%s", key);
}

static kvio_status_t bind_mapping(bind_context_t *context, const kvio_opt_t *options,
                                  const node_t *node, void *config, const char *path);

static kvio_status_t expect_scalar(bind_context_t *context, const node_t *node,
                                   const char *path, const kvio_opt_t *option)
{
    if (node->kind == NODE_SCALAR)
        return KVIO_OK;
    return node_error(context, node, path, "expected a %s, got a %s", type_name(option->type),
                      node->kind == NODE_MAPPING ? "mapping" : "list");
}

static kvio_status_t check_range(bind_context_t *context, const node_t *node,
                                 const char *path, const kvio_opt_t *option, double value)
{
    char shown[64], bound[64];
    double limit = 0;
    const char *relation = NULL;
    if ((option->flags & KVIO_OPT_HAS_MIN) && value < option->min) {
        relation = "below the minimum";
        limit = option->min;
    } else if ((option->flags & KVIO_OPT_HAS_MAX) && value > option->max) {
        relation = "above the maximum";
        limit = option->max;
    }
    if (relation == NULL)
        return KVIO_OK;
    if (option->type == KVIO_OPT_SIZE) {
        kvio_format_size((uint64_t)value, shown, sizeof(shown));
        kvio_format_size((uint64_t)limit, bound, sizeof(bound));
    } else if (option->type == KVIO_OPT_DURATION) {
        kvio_format_duration((int64_t)value, shown, sizeof(shown));
        kvio_format_duration((int64_t)limit, bound, sizeof(bound));
    } else {
        snprintf(shown, sizeof(shown), "%.17g", value);
        snprintf(bound, sizeof(bound), "%.17g", limit);
    }
    return node_error(context, node, path, "%s is %s %s", shown, relation, bound);
}

static kvio_status_t parse_number(bind_context_t *context, const node_t *node,
                                  const char *path, kvio_unit_t unit, double *value_p)
{
    char message[256];
    if (node->kind != NODE_SCALAR)
        return node_error(context, node, path, "expected a number, got a %s",
                          node->kind == NODE_MAPPING ? "mapping" : "list");
    if (unit == KVIO_UNIT_SIZE) {
        uint64_t bytes;
        if (kvio_parse_size(node->text, &bytes, message, sizeof(message)) != KVIO_OK)
            return node_error(context, node, path, "%s", message);
        *value_p = (double)bytes;
        return KVIO_OK;
    }
    if (unit == KVIO_UNIT_DURATION) {
        int64_t ns;
        if (kvio_parse_duration(node->text, &ns, message, sizeof(message)) != KVIO_OK)
            return node_error(context, node, path, "%s", message);
        *value_p = (double)ns;
        return KVIO_OK;
    }
    char *end;
    errno = 0;
    double value = strtod(node->text, &end);
    if (end == node->text || *end != '\0' || errno == ERANGE || !isfinite(value))
        return node_error(context, node, path, "expected a number, got '%s'", node->text);
    *value_p = value;
    return KVIO_OK;
}

static kvio_status_t parse_number_list(bind_context_t *context, const node_t *node,
                                       const char *path, kvio_unit_t unit, double **values_p,
                                       size_t *count_p)
{
    if (node->kind != NODE_SEQUENCE)
        return node_error(context, node, path, "expected a list of numbers");
    double *values = calloc(node->count ? node->count : 1, sizeof(double));
    if (values == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < node->count; i++) {
        kvio_status_t status = parse_number(context, node->items[i], path, unit, &values[i]);
        if (status != KVIO_OK) {
            free(values);
            return status;
        }
    }
    *values_p = values;
    *count_p = node->count;
    return KVIO_OK;
}

static kvio_status_t bind_dist(bind_context_t *context, const kvio_opt_t *option,
                               const node_t *node, kvio_dist_t *dist, const char *path)
{
    kvio_dist_t parsed = {0};
    kvio_status_t status = KVIO_OK;
    if (node->kind == NODE_SCALAR) {
        /* A bare number is a constant. */
        parsed.kind = KVIO_DIST_CONSTANT;
        status = parse_number(context, node, path, option->unit, &parsed.value);
        if (status != KVIO_OK)
            return status;
        goto done;
    }
    if (node->kind != NODE_MAPPING)
        return node_error(context, node, path,
                          "expected a distribution ({dist: normal, mean: ..., stddev: ...}) or a number");
    const node_t *kind_node = mapping_get(node, "dist", NULL);
    if (kind_node == NULL)
        return node_error(context, node, path, "a distribution needs 'dist' (one of %s)",
                          "constant, uniform, normal, lognormal, exponential, gamma, zipf, empirical");
    if (kind_node->kind != NODE_SCALAR ||
        kvio_dist_kind_find(kind_node->text, &parsed.kind) != KVIO_OK) {
        return node_error(context, kind_node, path,
                          "unknown distribution '%s' (one of constant, uniform, normal, "
                          "lognormal, exponential, gamma, zipf, empirical)",
                          kind_node->kind == NODE_SCALAR ? kind_node->text : "?");
    }
    /* Which parameters each kind takes; min and max clamp any kind. */
    static const char *const params[KVIO_DIST_NUM_KINDS][3] = {
        [KVIO_DIST_CONSTANT] = {"value"},
        [KVIO_DIST_UNIFORM] = {"low", "high"},
        [KVIO_DIST_NORMAL] = {"mean", "stddev"},
        [KVIO_DIST_LOGNORMAL] = {"mean", "stddev"},
        [KVIO_DIST_EXPONENTIAL] = {"mean"},
        [KVIO_DIST_GAMMA] = {"mean", "cv"},
        [KVIO_DIST_ZIPF] = {"n", "s"},
        [KVIO_DIST_EMPIRICAL] = {"values", "weights"},
    };
    bool seen[3] = {false, false, false};
    for (size_t i = 0; i < node->count && status == KVIO_OK; i++) {
        const node_t *key = node->keys[i];
        const node_t *value = node->items[i];
        char key_path[512];
        join_path(key_path, sizeof(key_path), path, key->text);
        if (strcmp(key->text, "dist") == 0)
            continue;
        if (strcmp(key->text, "min") == 0 || strcmp(key->text, "max") == 0) {
            bool is_min = key->text[1] == 'i';
            double *target = is_min ? &parsed.min : &parsed.max;
            status = parse_number(context, value, key_path, option->unit, target);
            if (is_min)
                parsed.has_min = true;
            else
                parsed.has_max = true;
            continue;
        }
        int slot = -1;
        for (int p = 0; p < 3 && params[parsed.kind][p] != NULL; p++) {
            if (strcmp(params[parsed.kind][p], key->text) == 0)
                slot = p;
        }
        if (slot < 0) {
            char allowed[128] = "dist, min, max";
            for (int p = 0; p < 3 && params[parsed.kind][p] != NULL; p++) {
                strncat(allowed, ", ", sizeof(allowed) - strlen(allowed) - 1);
                strncat(allowed, params[parsed.kind][p], sizeof(allowed) - strlen(allowed) - 1);
            }
            status = node_error(context, key, key_path,
                                "unknown key for a %s distribution (it takes %s)",
                                kind_node->text, allowed);
            break;
        }
        seen[slot] = true;
        /* Shape parameters (cv, zipf's n and s, weights) carry no unit. */
        kvio_unit_t unit = option->unit;
        const char *name = key->text;
        if (strcmp(name, "cv") == 0 || parsed.kind == KVIO_DIST_ZIPF || strcmp(name, "weights") == 0)
            unit = KVIO_UNIT_NONE;
        double *target = NULL;
        if (strcmp(name, "value") == 0) target = &parsed.value;
        else if (strcmp(name, "low") == 0) target = &parsed.low;
        else if (strcmp(name, "high") == 0) target = &parsed.high;
        else if (strcmp(name, "mean") == 0) target = &parsed.mean;
        else if (strcmp(name, "stddev") == 0) target = &parsed.stddev;
        else if (strcmp(name, "cv") == 0) target = &parsed.cv;
        else if (strcmp(name, "n") == 0) target = &parsed.n;
        else if (strcmp(name, "s") == 0) target = &parsed.s;
        if (target != NULL) {
            status = parse_number(context, value, key_path, unit, target);
        } else if (strcmp(name, "values") == 0) {
            free(parsed.values);
            parsed.values = NULL;
            status = parse_number_list(context, value, key_path, unit, &parsed.values,
                                       &parsed.num_values);
        } else {
            size_t count = 0;
            free(parsed.weights);
            parsed.weights = NULL;
            status = parse_number_list(context, value, key_path, unit, &parsed.weights, &count);
            if (status == KVIO_OK && parsed.values != NULL && count != parsed.num_values)
                status = node_error(context, value, key_path,
                                    "%zu weights for %zu values", count, parsed.num_values);
            if (status == KVIO_OK && parsed.values == NULL)
                parsed.num_values = count;
        }
    }
    for (int p = 0; status == KVIO_OK && p < 3 && params[parsed.kind][p] != NULL; p++) {
        bool optional = parsed.kind == KVIO_DIST_EMPIRICAL && p == 1;
        if (!seen[p] && !optional)
            status = node_error(context, node, path, "a %s distribution needs '%s'",
                                kind_node->text, params[parsed.kind][p]);
    }
done:
    if (status == KVIO_OK) {
        char message[256];
        if (kvio_dist_prepare(&parsed, message, sizeof(message)) != KVIO_OK)
            status = node_error(context, node, path, "%s", message);
    }
    if (status != KVIO_OK) {
        kvio_dist_clear(&parsed);
        return status;
    }
    kvio_dist_clear(dist);
    *dist = parsed;
    return KVIO_OK;
}

static kvio_status_t bind_list(bind_context_t *context, const kvio_opt_t *option,
                               const node_t *node, kvio_opt_list_t *list, const char *path)
{
    if (node->kind != NODE_SEQUENCE)
        return node_error(context, node, path, "expected a list of mappings");
    char *items = calloc(node->count ? node->count : 1, option->element_size);
    if (items == NULL)
        return KVIO_ERR_NOMEM;
    size_t bound = 0;
    kvio_status_t status = KVIO_OK;
    for (; bound < node->count; bound++) {
        char item_path[512];
        snprintf(item_path, sizeof(item_path), "%s[%zu]", path, bound);
        void *item = items + bound * option->element_size;
        status = kvio_config_defaults(option->options, item, context->error, context->error_len);
        if (status == KVIO_OK) {
            const node_t *element = node->items[bound];
            if (element->kind != NODE_MAPPING)
                status = node_error(context, element, item_path, "expected a mapping");
            else
                status = bind_mapping(context, option->options, element, item, item_path);
        }
        if (status != KVIO_OK) {
            kvio_config_free(option->options, item);
            break;
        }
    }
    if (status != KVIO_OK) {
        for (size_t i = 0; i < bound; i++)
            kvio_config_free(option->options, items + i * option->element_size);
        free(items);
        return status;
    }
    /* Replace what was there (the default list). */
    for (size_t i = 0; i < list->count; i++)
        kvio_config_free(option->options, (char *)list->items + i * option->element_size);
    free(list->items);
    list->items = items;
    list->count = node->count;
    return KVIO_OK;
}


/* The index of text among option->values, or -1. */
static int value_index(const kvio_opt_t *option, const char *text)
{
    for (int i = 0; option->values[i] != NULL; i++)
        if (strcmp(option->values[i], text) == 0)
            return i;
    return -1;
}

/* node's value is not one of option->values: says which are, and the
 * closest. */
static kvio_status_t not_one_of(bind_context_t *context, const node_t *node, const char *path,
                                const kvio_opt_t *option)
{
    size_t count = 0;
    while (option->values[count] != NULL)
        count++;
    char allowed[256] = "";
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            strncat(allowed, ", ", sizeof(allowed) - strlen(allowed) - 1);
        strncat(allowed, option->values[i], sizeof(allowed) - strlen(allowed) - 1);
    }
    const char *close = closest_name(node->text, option->values, count, sizeof(char *));
    if (close != NULL)
        return node_error(context, node, path, "'%s' is not one of %s (did you mean '%s'?)",
                          node->text, allowed, close);
    return node_error(context, node, path, "'%s' is not one of %s", node->text, allowed);
}

static kvio_status_t bind_value(bind_context_t *context, const kvio_opt_t *option,
                                const node_t *node, void *config, const char *path)
{
    void *field = (char *)config + option->offset;
    kvio_status_t status;
    double number = 0;
    switch (option->type) {
    case KVIO_OPT_BOOL: {
        if ((status = expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        static const char *const truths[] = {"true", "yes", "on", "True", "TRUE", NULL};
        static const char *const lies[] = {"false", "no", "off", "False", "FALSE", NULL};
        for (int i = 0; truths[i] != NULL; i++) {
            if (strcmp(node->text, truths[i]) == 0) {
                *(bool *)field = true;
                return KVIO_OK;
            }
            if (strcmp(node->text, lies[i]) == 0) {
                *(bool *)field = false;
                return KVIO_OK;
            }
        }
        return node_error(context, node, path, "expected true or false, got '%s'", node->text);
    }
    case KVIO_OPT_INT: {
        if ((status = expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        char *end;
        errno = 0;
        long long value = strtoll(node->text, &end, 10);
        if (end == node->text || *end != '\0' || errno == ERANGE)
            return node_error(context, node, path, "expected an integer, got '%s'", node->text);
        if ((status = check_range(context, node, path, option, (double)value)) != KVIO_OK)
            return status;
        *(int64_t *)field = value;
        return KVIO_OK;
    }
    case KVIO_OPT_DOUBLE:
        if ((status = parse_number(context, node, path, KVIO_UNIT_NONE, &number)) != KVIO_OK)
            return status;
        if ((status = check_range(context, node, path, option, number)) != KVIO_OK)
            return status;
        *(double *)field = number;
        return KVIO_OK;
    case KVIO_OPT_SIZE:
    case KVIO_OPT_DURATION: {
        if ((status = expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        kvio_unit_t unit = option->type == KVIO_OPT_SIZE ? KVIO_UNIT_SIZE : KVIO_UNIT_DURATION;
        if ((status = parse_number(context, node, path, unit, &number)) != KVIO_OK)
            return status;
        if ((status = check_range(context, node, path, option, number)) != KVIO_OK)
            return status;
        if (option->type == KVIO_OPT_SIZE)
            *(uint64_t *)field = (uint64_t)number;
        else
            *(int64_t *)field = (int64_t)number;
        return KVIO_OK;
    }
    case KVIO_OPT_STRING: {
        if ((status = expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        /* A string with values: one of them (kept as the string). */
        if (option->values != NULL && value_index(option, node->text) < 0)
            return not_one_of(context, node, path, option);
        if (option->flags & KVIO_OPT_NAME) {
            size_t length = strlen(node->text);
            bool plain = length > 0 && length <= 128 && node->text[0] != '.';
            for (size_t i = 0; plain && i < length; i++) {
                char c = node->text[i];
                plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
            }
            if (!plain)
                return node_error(context, node, path,
                                  "'%.64s' is not a plain name (1-128 letters, digits, '.', "
                                  "'_' or '-', not starting with '.'): it names the results "
                                  "directory", node->text);
        }
        char *copy = strdup(node->text);
        if (copy == NULL)
            return KVIO_ERR_NOMEM;
        free(*(char **)field);
        *(char **)field = copy;
        return KVIO_OK;
    }
    case KVIO_OPT_ENUM: {
        if ((status = expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        int index = value_index(option, node->text);
        if (index < 0)
            return not_one_of(context, node, path, option);
        *(int *)field = index;
        return KVIO_OK;
    }
    case KVIO_OPT_DIST:
        return bind_dist(context, option, node, (kvio_dist_t *)field, path);
    case KVIO_OPT_SECTION:
        if (node->kind != NODE_MAPPING)
            return node_error(context, node, path, "expected a mapping of keys");
        return bind_mapping(context, option->options, node, field, path);
    case KVIO_OPT_LIST:
        return bind_list(context, option, node, (kvio_opt_list_t *)field, path);
    }
    return KVIO_ERR_INTERNAL;
}

static kvio_status_t bind_mapping(bind_context_t *context, const kvio_opt_t *options,
                                  const node_t *node, void *config, const char *path)
{
    for (size_t i = 0; i < node->count; i++) {
        const node_t *key = node->keys[i];
        char key_path[512];
        join_path(key_path, sizeof(key_path), path, key->text);
        const kvio_opt_t *option = options;
        size_t num_options = 0;
        for (; options[num_options].key != NULL; num_options++) {
        }
        for (option = options; option->key != NULL; option++) {
            if (strcmp(option->key, key->text) == 0)
                break;
        }
        if (option->key == NULL) {
            const char *close = closest_name(key->text, &options[0].key, num_options,
                                             sizeof(kvio_opt_t));
            if (close != NULL)
                return node_error(context, key, key_path, "unknown key (did you mean '%s'?)",
                                  close);
            return node_error(context, key, key_path, "unknown key");
        }
        kvio_status_t status = bind_value(context, option, node->items[i], config, key_path);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

kvio_status_t kvio_config_defaults(const kvio_opt_t *options, void *config_p,
                                   char *error_p, size_t error_len)
{
    bind_context_t context = {.error = error_p, .error_len = error_len};
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        void *field = (char *)config_p + option->offset;
        kvio_status_t status = KVIO_OK;
        if (option->type == KVIO_OPT_SECTION) {
            status = kvio_config_defaults(option->options, field, error_p, error_len);
        } else if (option->default_value != NULL) {
            node_t *node = NULL;
            char origin[256];
            snprintf(origin, sizeof(origin), "default of %s", option->key);
            status = parse_yaml(option->default_value, strlen(option->default_value), origin,
                                &node, error_p, error_len);
            if (status == KVIO_OK && node != NULL) {
                origin_retag(node, "built-in default");
                status = bind_value(&context, option, node, config_p, option->key);
            }
            node_free(node);
        }
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

kvio_status_t kvio_config_bind(const kvio_opt_t *options, const kvio_config_doc_t *doc,
                               void *config_p, char *error_p, size_t error_len)
{
    bind_context_t context = {.error = error_p, .error_len = error_len};
    kvio_status_t status = kvio_config_defaults(options, config_p, error_p, error_len);
    if (status == KVIO_OK)
        status = bind_mapping(&context, options, doc->root, config_p, "");
    if (status != KVIO_OK)
        kvio_config_free(options, config_p);
    return status;
}

void kvio_config_free(const kvio_opt_t *options, void *config)
{
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        void *field = (char *)config + option->offset;
        switch (option->type) {
        case KVIO_OPT_STRING:
            free(*(char **)field);
            *(char **)field = NULL;
            break;
        case KVIO_OPT_DIST:
            kvio_dist_clear((kvio_dist_t *)field);
            break;
        case KVIO_OPT_SECTION:
            kvio_config_free(option->options, field);
            break;
        case KVIO_OPT_LIST: {
            kvio_opt_list_t *list = field;
            for (size_t i = 0; i < list->count; i++)
                kvio_config_free(option->options, (char *)list->items + i * option->element_size);
            free(list->items);
            list->items = NULL;
            list->count = 0;
            break;
        }
        default:
            break;
        }
    }
}

/* ---------- dump ---------- */

static json_t *number_json(double value, kvio_unit_t unit)
{
    char text[64];
    if (unit == KVIO_UNIT_SIZE && value >= 0 && value == floor(value)) {
        kvio_format_size((uint64_t)value, text, sizeof(text));
        return json_string(text);
    }
    if (unit == KVIO_UNIT_DURATION && value == floor(value)) {
        kvio_format_duration((int64_t)value, text, sizeof(text));
        return json_string(text);
    }
    if (unit == KVIO_UNIT_DURATION) {
        snprintf(text, sizeof(text), "%.17gns", value);
        return json_string(text);
    }
    return json_real(value);
}

static json_t *dist_json(const kvio_dist_t *dist, kvio_unit_t unit)
{
    json_t *object = json_object();
    json_object_set_new(object, "dist", json_string(kvio_dist_kind_name(dist->kind)));
    switch (dist->kind) {
    case KVIO_DIST_CONSTANT:
        json_object_set_new(object, "value", number_json(dist->value, unit));
        break;
    case KVIO_DIST_UNIFORM:
        json_object_set_new(object, "low", number_json(dist->low, unit));
        json_object_set_new(object, "high", number_json(dist->high, unit));
        break;
    case KVIO_DIST_NORMAL:
    case KVIO_DIST_LOGNORMAL:
        json_object_set_new(object, "mean", number_json(dist->mean, unit));
        json_object_set_new(object, "stddev", number_json(dist->stddev, unit));
        break;
    case KVIO_DIST_EXPONENTIAL:
        json_object_set_new(object, "mean", number_json(dist->mean, unit));
        break;
    case KVIO_DIST_GAMMA:
        json_object_set_new(object, "mean", number_json(dist->mean, unit));
        json_object_set_new(object, "cv", json_real(dist->cv));
        break;
    case KVIO_DIST_ZIPF:
        json_object_set_new(object, "n", json_real(dist->n));
        json_object_set_new(object, "s", json_real(dist->s));
        break;
    case KVIO_DIST_EMPIRICAL: {
        json_t *values = json_array();
        json_t *weights = json_array();
        for (size_t i = 0; i < dist->num_values; i++) {
            json_array_append_new(values, number_json(dist->values[i], unit));
            json_array_append_new(weights,
                                  json_real(dist->weights != NULL ? dist->weights[i] : 1.0));
        }
        json_object_set_new(object, "values", values);
        json_object_set_new(object, "weights", weights);
        break;
    }
    case KVIO_DIST_NUM_KINDS:
        break;
    }
    if (dist->has_min)
        json_object_set_new(object, "min", number_json(dist->min, unit));
    if (dist->has_max)
        json_object_set_new(object, "max", number_json(dist->max, unit));
    return object;
}

/* A string as the configuration dump shows it: a URL's password
 * (scheme://[user]:password@host, or scheme://password@host as kvio's Redis
 * URLs read it) becomes ***, so results and --dump never carry it. */
static json_t *redacted_string(const char *string)
{
    const char *scheme = strstr(string, "://");
    const char *host_start = scheme != NULL ? scheme + 3 : NULL;
    const char *at = host_start != NULL ? strchr(host_start, '@') : NULL;
    const char *slash = host_start != NULL ? strchr(host_start, '/') : NULL;
    if (at == NULL || (slash != NULL && slash < at))
        return json_string(string);
    const char *colon = memchr(host_start, ':', (size_t)(at - host_start));
    const char *secret = colon != NULL ? colon + 1 : host_start;
    char *text = malloc(strlen(string) + 4);
    if (text == NULL)
        return NULL;
    sprintf(text, "%.*s***%s", (int)(secret - string), string, at);
    json_t *value = json_string(text);
    free(text);
    return value;
}

json_t *kvio_config_to_json(const kvio_opt_t *options, const void *config)
{
    json_t *object = json_object();
    if (object == NULL)
        return NULL;
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        const void *field = (const char *)config + option->offset;
        json_t *value = NULL;
        char text[64];
        switch (option->type) {
        case KVIO_OPT_BOOL:
            value = json_boolean(*(const bool *)field);
            break;
        case KVIO_OPT_INT:
            value = json_integer(*(const int64_t *)field);
            break;
        case KVIO_OPT_DOUBLE:
            value = json_real(*(const double *)field);
            break;
        case KVIO_OPT_STRING: {
            const char *string = *(char *const *)field;
            value = string != NULL ? redacted_string(string) : json_null();
            break;
        }
        case KVIO_OPT_ENUM:
            value = json_string(option->values[*(const int *)field]);
            break;
        case KVIO_OPT_SIZE:
            kvio_format_size(*(const uint64_t *)field, text, sizeof(text));
            value = json_string(text);
            break;
        case KVIO_OPT_DURATION:
            kvio_format_duration(*(const int64_t *)field, text, sizeof(text));
            value = json_string(text);
            break;
        case KVIO_OPT_DIST:
            value = dist_json((const kvio_dist_t *)field, option->unit);
            break;
        case KVIO_OPT_SECTION:
            value = kvio_config_to_json(option->options, field);
            break;
        case KVIO_OPT_LIST: {
            const kvio_opt_list_t *list = field;
            value = json_array();
            for (size_t i = 0; i < list->count; i++)
                json_array_append_new(value, kvio_config_to_json(
                    option->options, (const char *)list->items + i * option->element_size));
            break;
        }
        }
        json_object_set_new(object, option->key, value != NULL ? value : json_null());
    }
    return object;
}

/* Writes text from column indent, wrapped before column 80 at spaces. */
static void print_wrapped(FILE *out, const char *text, int indent)
{
    const int width = 79 - indent;
    while (*text != '\0') {
        int length = (int)strlen(text);
        int take = length;
        if (length > width) {
            take = width;
            while (take > 0 && text[take] != ' ')
                take--;
            if (take == 0) /* one word longer than the line */
                take = width;
        }
        fprintf(out, "%*s%.*s\n", indent, "", take, text);
        text += take;
        while (*text == ' ')
            text++;
    }
}

/* One key: its path and type on a line, with its default and choices when
 * they fit in 80 columns, else wrapped below; its help wrapped below. */
static void print_key(const kvio_opt_t *option, const char *key_path, FILE *out)
{
    char detail[512] = "";
    size_t used = 0;
    if (option->default_value != NULL)
        used += (size_t)snprintf(detail, sizeof(detail), "default %s", option->default_value);
    for (int i = 0; option->type == KVIO_OPT_ENUM && option->values[i] != NULL &&
                    used < sizeof(detail);
         i++)
        used += (size_t)snprintf(detail + used, sizeof(detail) - used, "%s%s",
                                 i > 0 ? "|" : used > 0 ? ", one of " : "one of ",
                                 option->values[i]);
    char line[400];
    int length = snprintf(line, sizeof(line), "  %-34s %s", key_path, type_name(option->type));
    if (detail[0] != '\0' && length + 2 + (int)strlen(detail) <= 79) {
        fprintf(out, "%s, %s\n", line, detail);
    } else {
        fprintf(out, "%s\n", line);
        print_wrapped(out, detail, 6);
    }
    if (option->help != NULL)
        print_wrapped(out, option->help, 6);
}

/* Every key under options (path: where they sit), sections opened when
 * deep, else one line each naming how to list them. */
static void print_help_at(const kvio_opt_t *options, const char *path, bool deep, FILE *out)
{
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        char key_path[256];
        join_path(key_path, sizeof(key_path), path, option->key);
        if (option->type == KVIO_OPT_SECTION && !deep) {
            char line[300];
            snprintf(line, sizeof(line), "%s.*", key_path);
            fprintf(out, "  %-34s section: --help %s lists its keys\n", line, key_path);
            if (option->help != NULL)
                print_wrapped(out, option->help, 6);
            continue;
        }
        if (option->type == KVIO_OPT_SECTION) {
            print_help_at(option->options, key_path, deep, out);
            continue;
        }
        print_key(option, key_path, out);
        if (option->type == KVIO_OPT_LIST) {
            char item_path[300];
            snprintf(item_path, sizeof(item_path), "%s[]", key_path);
            print_help_at(option->options, item_path, true, out);
        }
    }
}

bool kvio_config_print_help(const kvio_opt_t *options, const char *section, FILE *out)
{
    if (section == NULL || section[0] == '\0') {
        print_help_at(options, "", false, out);
        return true;
    }
    /* Walk the dotted path down to the section (or a single key). */
    const kvio_opt_t *level = options;
    char path[256] = "";
    const char *part = section;
    while (*part != '\0') {
        size_t length = strcspn(part, ".");
        const kvio_opt_t *found = NULL;
        for (const kvio_opt_t *option = level; option != NULL && option->key != NULL; option++)
            if (strlen(option->key) == length && strncmp(option->key, part, length) == 0)
                found = option;
        if (found == NULL)
            return false;
        char parent[192];
        snprintf(parent, sizeof(parent), "%s", path);
        join_path(path, sizeof(path), parent, found->key);
        part += length;
        if (*part == '.')
            part++;
        if (*part == '\0') {
            if (out == NULL)
                return true;
            if (found->type == KVIO_OPT_SECTION) {
                print_help_at(found->options, path, true, out);
            } else {
                print_key(found, path, out);
                if (found->type == KVIO_OPT_LIST) {
                    char item_path[300];
                    snprintf(item_path, sizeof(item_path), "%s[]", path);
                    print_help_at(found->options, item_path, true, out);
                }
            }
            return true;
        }
        if (found->type != KVIO_OPT_SECTION)
            return false;
        level = found->options;
    }
    return false;
}
