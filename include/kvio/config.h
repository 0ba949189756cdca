/* Configuration: YAML (libyaml) mapped onto C structs through declarative
 * option tables (key, type, offset, default, bounds, allowed values, help).
 * A document is parsed once, `--set a.b=value` overrides edit it, and binding
 * checks every key against the table. Errors cite origin:line:column and the
 * key path, e.g. "w.yaml:7:17: serve.kvcache.block_size: 0 is below the
 * minimum 1". The same table prints help and dumps the effective config. */
#ifndef KVIO_CONFIG_H
#define KVIO_CONFIG_H

#include "kvio/dist.h"
#include "kvio/format.h"
#include "kvio/plugin.h"
#include "kvio/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Option types and the C type each stores at its offset. */
typedef enum {
    KVIO_OPT_BOOL,     /* bool */
    KVIO_OPT_INT,      /* int64_t */
    KVIO_OPT_DOUBLE,   /* double */
    KVIO_OPT_STRING,   /* char * (owned; freed by kvio_config_free) */
    KVIO_OPT_ENUM,     /* int: index into values */
    KVIO_OPT_SIZE,     /* uint64_t bytes: 512MiB, 4GiB, 4GB, 16384 */
    KVIO_OPT_DURATION, /* int64_t ns: 250ms, 2s, 1.5h */
    KVIO_OPT_DIST,     /* kvio_dist_t; numbers take the option's unit */
    KVIO_OPT_SECTION,  /* a nested struct bound by options */
    KVIO_OPT_LIST,     /* kvio_opt_list_t of structs bound by options */
    KVIO_OPT_PLUGIN,   /* kvio_choice_t: a plug-in of registry by name; each
                          plug-in's options bind from a sibling key of its
                          name (policy: pkas, pkas: {margin: 0.1}) */
} kvio_opt_type_t;

/* Units for the numbers inside a KVIO_OPT_DIST. */
typedef enum {
    KVIO_UNIT_NONE,
    KVIO_UNIT_SIZE,     /* bytes */
    KVIO_UNIT_DURATION, /* ns */
} kvio_unit_t;

#define KVIO_OPT_HAS_MIN 1u
#define KVIO_OPT_HAS_MAX 2u
#define KVIO_OPT_NAME 4u /* STRING: a plain name (letters, digits, . _ -; no leading .),
                            safe in a path */
#define KVIO_OPT_AUTO 8u /* INT, DURATION: "auto" binds as KVIO_OPT_AUTO_VALUE (the owner
                            fills it in: an engine profile's value), and dumps back as auto */
#define KVIO_OPT_AUTO_VALUE (-1)

typedef struct kvio_opt {
    const char *key;
    kvio_opt_type_t type;
    size_t offset;
    const char *default_value;       /* YAML text; NULL leaves zero */
    unsigned flags;                  /* KVIO_OPT_HAS_MIN / HAS_MAX */
    double min, max;                 /* in stored units */
    const char *const *values;       /* ENUM: NULL-terminated names */
    const struct kvio_opt *options;  /* SECTION, LIST: terminated by key NULL */
    size_t element_size;             /* LIST: size of one element */
    kvio_unit_t unit;                /* DIST: unit of its numbers */
    const kvio_registry_t *registry; /* PLUGIN: the plug-ins it chooses among */
    const char *help;
} kvio_opt_t;

/* Storage of a KVIO_OPT_LIST: count elements of element_size each. */
typedef struct kvio_opt_list {
    void *items;
    size_t count;
} kvio_opt_list_t;

/* The options table of a plug-in that has none: { {.key = NULL} }. */
extern const kvio_opt_t kvio_no_options[];

/* A parsed YAML document with the overrides applied to it. */
typedef struct kvio_config_doc kvio_config_doc_t;

/* Parses YAML text; origin names it in errors (a path, or "preset NAME").
 * On error returns KVIO_ERR_CONFIG with the message in error_p. */
kvio_status_t kvio_config_doc_parse(const char *text, size_t length, const char *origin,
                                    kvio_config_doc_t **doc_p, char *error_p,
                                    size_t error_len);

/* Reads and parses a file. */
kvio_status_t kvio_config_doc_load(const char *path, kvio_config_doc_t **doc_p,
                                   char *error_p, size_t error_len);

/* Applies an override "a.b.c=value" (value is YAML: a scalar or a flow
 * mapping/sequence; numeric path parts index sequences). Keys are checked
 * when the document is bound. */
kvio_status_t kvio_config_doc_set(kvio_config_doc_t *doc, const char *assignment,
                                  char *error_p, size_t error_len);

/* True when the document (with its overrides) gives key ("a.b" for a key
 * of a section):
 * lets a caller tell a value written from the option's default. */
bool kvio_config_doc_has(const kvio_config_doc_t *doc, const char *key);

/* When the document is a mapping with key marker and a mapping under key
 * (a kvio summary.json: schema_version and config), that mapping becomes
 * the document; true then. */
bool kvio_config_doc_descend(kvio_config_doc_t *doc, const char *marker, const char *key);

void kvio_config_doc_destroy(kvio_config_doc_t *doc);

/* Fills config_p with the defaults of options. Zero the struct first. */
kvio_status_t kvio_config_defaults(const kvio_opt_t *options, void *config_p,
                                   char *error_p, size_t error_len);

/* Fills config_p with defaults, then binds the document onto it, checking
 * every key, type and bound. On error the struct is freed and zeroed. */
kvio_status_t kvio_config_bind(const kvio_opt_t *options, const kvio_config_doc_t *doc,
                               void *config_p, char *error_p, size_t error_len);

/* Binds YAML text (a mapping, origin names it in errors) onto config_p by
 * options, as kvio_config_bind does a document: for a section on its own
 * ("{policy: lpm, lpm: {max_queue: 3}}" for serve.scheduler). */
kvio_status_t kvio_config_bind_text(const kvio_opt_t *options, const char *text,
                                    const char *origin, void *config_p, char *error_p,
                                    size_t error_len);

/* Frees what binding allocated (strings, lists, distributions). */
void kvio_config_free(const kvio_opt_t *options, void *config);

/* The effective configuration as JSON (sizes and durations as strings with
 * units, so the dump can be read back). A URL's password shows as ***
 * (summary.json and --dump never carry it). The caller owns the reference. */
json_t *kvio_config_to_json(const kvio_opt_t *options, const void *config);

/* Prints keys with their type, default or choices, and help wrapped to 80
 * columns: with section NULL the top-level keys, each section as one line
 * (how to list it); with a dotted section ("serve.kvcache") or key, every
 * key under it. False when there is no such section or key (out NULL:
 * only says whether there is). */
bool kvio_config_print_help(const kvio_opt_t *options, const char *section, FILE *out);

/* The name of count (each stride bytes after the one before, the first at
 * names) closest to name within a small edit distance, or NULL: what a
 * "did you mean" suggests. */
const char *kvio_closest_name(const char *name, const char *const *names, size_t count,
                              size_t stride);

#endif
