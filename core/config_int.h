/* Private to core/'s configuration files: the node tree a YAML document
 * becomes (each node with its origin, line and column), and the helpers
 * that parsing (config_doc.c), binding (config_bind.c, config_dist.c) and
 * dumping (config_dump.c) share. */
#ifndef KVIO_CONFIG_INT_H
#define KVIO_CONFIG_INT_H

#include "kvio/config.h"

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

/* Frees a node and everything under it. */
void config_node_free(node_t *node);

/* The value of key in mapping (its index in *index_p; may be NULL), or NULL. */
node_t *config_mapping_get(const node_t *mapping, const char *key, size_t *index_p);

/* "origin:line:column: path: message" into context's error; returns
 * KVIO_ERR_CONFIG. */
kvio_status_t config_node_error(bind_context_t *context, const node_t *node, const char *path,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Parses one YAML document into a node; an empty document gives NULL. */
kvio_status_t config_parse_yaml(const char *text, size_t length, const char *origin,
                                node_t **root_p, char *error_p, size_t error_len);

/* Gives node and everything under it origin, without a position. */
void config_origin_retag(node_t *node, const char *origin);

/* What an option type is called in messages and help ("size"). */
const char *config_type_name(kvio_opt_type_t type);

/* The closest of count names (each stride bytes after the last) within a
 * small edit distance of name, or NULL. */
const char *config_closest_name(const char *name, const char *const *names, size_t count,
                                size_t stride);

/* "path.key", or "key" at the top. */
void config_join_path(char *out, size_t out_len, const char *path, const char *key);

/* Binds a mapping node onto config by options, checking every key. */
kvio_status_t config_bind_mapping(bind_context_t *context, const kvio_opt_t *options,
                                  const node_t *node, void *config, const char *path);

/* An error unless node is a scalar (an option of option's type expects one). */
kvio_status_t config_expect_scalar(bind_context_t *context, const node_t *node,
                                   const char *path, const kvio_opt_t *option);

/* A number, in unit's stored units (bytes, ns) when it has one. */
kvio_status_t config_parse_number(bind_context_t *context, const node_t *node,
                                  const char *path, kvio_unit_t unit, double *value_p);

/* A distribution ({dist: ..., ...} or a bare number) onto *dist. */
kvio_status_t config_bind_dist(bind_context_t *context, const kvio_opt_t *option,
                               const node_t *node, kvio_dist_t *dist, const char *path);

#endif
