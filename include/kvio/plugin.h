/* Plug-ins found by name. Every kind of plug-in (schedulers, predictors,
 * eviction policies, tiers, transports, routers, executors) is a const ops
 * table whose first member is a kvio_plugin_t: its name as the YAML writes
 * it, a one-line help, and its own options table, bound from a section of
 * its name beside the key that chooses it (serve.scheduler: {policy: pkas,
 * pkas: {margin: 0.1}}). One registry per kind lists them, once; lookups,
 * --help, validation and `kvio list` read the registry. The framework
 * allocates, fills the defaults of and frees each plug-in's options. */
#ifndef KVIO_PLUGIN_H
#define KVIO_PLUGIN_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct kvio_opt;

typedef struct kvio_plugin {
    const char *name;                /* as the YAML names it */
    const char *help;                /* one line */
    const struct kvio_opt *options;  /* its keys, terminated by key NULL
                                        (kvio_no_options: none) */
    size_t options_size;             /* bytes of the struct options binds (0: none) */
    /* Checks the bound options together (NULL: the table's bounds suffice);
     * path is where they sit ("serve.scheduler.pkas"), for the message. */
    kvio_status_t (*check)(const void *options, const char *path, char *error_p,
                           size_t error_len);
} kvio_plugin_t;

/* A kind's registry: its plug-ins in the order `kvio list` shows them. */
typedef struct kvio_registry {
    const char *kind;                     /* "scheduler" */
    const kvio_plugin_t *const *plugins;  /* each ops table's header */
    size_t count;
} kvio_registry_t;

/* Defines NAME, the registry of KIND ("scheduler"), over the ops tables
 * the X-macro LIST names: LIST(X) calls X(name) for each plug-in, in order.
 * The registry file defines KVIO_PLUGIN_TYPE (the kind's ops type) and
 * KVIO_PLUGIN_SYMBOL(name) (the ops table's symbol, defined in the plug-in's
 * own file, its first member `plugin`) before it. Adding a plug-in is its
 * file and one X(name) in the list. */
#define KVIO_REGISTRY_DEFINE(NAME, KIND, LIST)                                             \
    LIST(KVIO_REGISTRY_DECLARE_)                                                           \
    static const kvio_plugin_t *const NAME##_plugins[] = {LIST(KVIO_REGISTRY_ENTRY_)};     \
    const kvio_registry_t NAME = {                                                         \
        .kind = KIND, .plugins = NAME##_plugins,                                           \
        .count = sizeof(NAME##_plugins) / sizeof(NAME##_plugins[0])};
#define KVIO_REGISTRY_DECLARE_(name) extern const KVIO_PLUGIN_TYPE KVIO_PLUGIN_SYMBOL(name);
#define KVIO_REGISTRY_ENTRY_(name) &KVIO_PLUGIN_SYMBOL(name).plugin,

/* The plug-in called name, or NULL. */
const kvio_plugin_t *kvio_registry_find(const kvio_registry_t *registry, const char *name);

/* The index of plugin in registry (registry->count when it is not there). */
size_t kvio_registry_index(const kvio_registry_t *registry, const kvio_plugin_t *plugin);

/* Writes "a, b, c" of the plug-ins' names. */
void kvio_registry_names(const kvio_registry_t *registry, char *text_p, size_t text_len);

/* Prints "KIND:" and a line per plug-in: its name and help. */
void kvio_registry_print(const kvio_registry_t *registry, FILE *out);

/* What a KVIO_OPT_PLUGIN option stores: its registry, the plug-in chosen
 * (plugins[index]) and, for every plug-in of the registry, its options
 * (options[i] for plugins[i]; NULL for one without options). Owned by the
 * config it sits in (kvio_config_free); a copy of the config borrows them. */
typedef struct kvio_choice {
    const kvio_registry_t *registry;
    const kvio_plugin_t *plugin;
    size_t index;
    void **options;
} kvio_choice_t;

/* The chosen plug-in's options (NULL when it has none). */
const void *kvio_choice_options(const kvio_choice_t *choice);

/* The chosen plug-in's name ("?" when none was bound). */
const char *kvio_choice_name(const kvio_choice_t *choice);

/* Chooses the plug-in called name in a choice whose storage the config set
 * up (its options keep their values); KVIO_ERR_NOT_FOUND when the registry
 * has none of that name. */
kvio_status_t kvio_choice_set(kvio_choice_t *choice, const char *name);

/* True when the chosen plug-in is called name. */
bool kvio_choice_is(const kvio_choice_t *choice, const char *name);

#endif
