/* Binding: a document's nodes walked against option tables into C structs,
 * every key, type and bound checked, defaults filled from the tables, and
 * what binding allocated freed. */
#include "core/config_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---------- binding ---------- */

const char *config_type_name(kvio_opt_type_t type)
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
    case KVIO_OPT_PLUGIN: return "plug-in";
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
const char *config_closest_name(const char *name, const char *const *names, size_t count,
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

const char *kvio_closest_name(const char *name, const char *const *names, size_t count,
                              size_t stride)
{
    return config_closest_name(name, names, count, stride);
}


kvio_status_t config_expect_scalar(bind_context_t *context, const node_t *node,
                                   const char *path, const kvio_opt_t *option)
{
    if (node->kind == NODE_SCALAR)
        return KVIO_OK;
    return config_node_error(context, node, path, "expected a %s, got a %s", config_type_name(option->type),
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
        snprintf(shown, sizeof(shown), "%.15g", value);
        snprintf(bound, sizeof(bound), "%.15g", limit);
    }
    return config_node_error(context, node, path, "%s is %s %s", shown, relation, bound);
}

static kvio_status_t bind_list(bind_context_t *context, const kvio_opt_t *option,
                               const node_t *node, kvio_opt_list_t *list, const char *path)
{
    if (node->kind != NODE_SEQUENCE)
        return config_node_error(context, node, path, "expected a list of mappings");
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
                status = config_node_error(context, element, item_path, "expected a mapping");
            else
                status = config_bind_mapping(context, option->options, element, item, item_path);
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
    const char *close = config_closest_name(node->text, option->values, count, sizeof(char *));
    if (close != NULL)
        return config_node_error(context, node, path, "'%s' is not one of %s (did you mean '%s'?)",
                          node->text, allowed, close);
    return config_node_error(context, node, path, "'%s' is not one of %s", node->text, allowed);
}

const kvio_opt_t kvio_no_options[] = {{.key = NULL}};

/* A plug-in's name: the chosen one of option->registry. */
static kvio_status_t bind_choice(bind_context_t *context, const kvio_opt_t *option,
                                 const node_t *node, kvio_choice_t *choice, const char *path)
{
    kvio_status_t status = config_expect_scalar(context, node, path, option);
    if (status != KVIO_OK)
        return status;
    const kvio_registry_t *registry = option->registry;
    const kvio_plugin_t *plugin = kvio_registry_find(registry, node->text);
    if (plugin == NULL) {
        char names[512];
        kvio_registry_names(registry, names, sizeof(names));
        const char *known[64];
        size_t count = registry->count < 64 ? registry->count : 64;
        for (size_t i = 0; i < count; i++)
            known[i] = registry->plugins[i]->name;
        const char *close = config_closest_name(node->text, known, count, sizeof(char *));
        const char *article =
            registry->kind[0] != '\0' && strchr("aeiou", registry->kind[0]) != NULL ? "an" : "a";
        if (close != NULL)
            return config_node_error(context, node, path,
                                     "'%s' is not %s %s kvio has (one of %s; did you mean "
                                     "'%s'?)", node->text, article, registry->kind, names,
                                     close);
        return config_node_error(context, node, path, "'%s' is not %s %s kvio has (one of %s)",
                                 node->text, article, registry->kind, names);
    }
    choice->registry = registry;
    choice->plugin = plugin;
    choice->index = kvio_registry_index(registry, plugin);
    return KVIO_OK;
}

/* Sets up a choice's storage: every plug-in's options, at their defaults. */
static kvio_status_t choice_defaults(const kvio_opt_t *option, kvio_choice_t *choice,
                                     char *error_p, size_t error_len)
{
    const kvio_registry_t *registry = option->registry;
    choice->registry = registry;
    if (choice->options != NULL)
        return KVIO_OK;
    choice->options = calloc(registry->count > 0 ? registry->count : 1, sizeof(void *));
    if (choice->options == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < registry->count; i++) {
        const kvio_plugin_t *plugin = registry->plugins[i];
        if (plugin->options == NULL || plugin->options_size == 0)
            continue;
        if ((choice->options[i] = calloc(1, plugin->options_size)) == NULL)
            return KVIO_ERR_NOMEM;
        kvio_status_t status = kvio_config_defaults(plugin->options, choice->options[i],
                                                    error_p, error_len);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* The PLUGIN option of options whose registry has a plug-in called key,
 * or NULL; *index_p gets the plug-in's index. */
static const kvio_opt_t *plugin_section(const kvio_opt_t *options, const char *key,
                                        size_t *index_p)
{
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        if (option->type != KVIO_OPT_PLUGIN)
            continue;
        const kvio_plugin_t *plugin = kvio_registry_find(option->registry, key);
        if (plugin != NULL) {
            *index_p = kvio_registry_index(option->registry, plugin);
            return option;
        }
    }
    return NULL;
}

/* A plug-in of a PLUGIN option of options that has a key called key (the
 * first, in registry order), or NULL: the hint for a plug-in's key written
 * beside the choosing key instead of in the plug-in's section. */
static const kvio_plugin_t *plugin_with_key(const kvio_opt_t *options, const char *key,
                                            const char **kind_p)
{
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        if (option->type != KVIO_OPT_PLUGIN)
            continue;
        for (size_t i = 0; i < option->registry->count; i++) {
            const kvio_plugin_t *plugin = option->registry->plugins[i];
            for (const kvio_opt_t *own = plugin->options; own != NULL && own->key != NULL;
                 own++)
                if (strcmp(own->key, key) == 0) {
                    *kind_p = option->registry->kind;
                    return plugin;
                }
        }
    }
    return NULL;
}

/* A plug-in's own section (pkas: {margin: 0.1}) onto its options. */
static kvio_status_t bind_plugin_section(bind_context_t *context, const kvio_opt_t *option,
                                         size_t index, const node_t *node, void *config,
                                         const char *path)
{
    kvio_choice_t *choice = (kvio_choice_t *)((char *)config + option->offset);
    const kvio_plugin_t *plugin = option->registry->plugins[index];
    if (plugin->options == NULL || plugin->options_size == 0 || choice->options == NULL ||
        choice->options[index] == NULL)
        return config_node_error(context, node, path, "the %s %s takes no options",
                                 option->registry->kind, plugin->name);
    if (node->kind != NODE_MAPPING)
        return config_node_error(context, node, path, "expected a mapping of %s's keys",
                                 plugin->name);
    return config_bind_mapping(context, plugin->options, node, choice->options[index], path);
}

static kvio_status_t bind_value(bind_context_t *context, const kvio_opt_t *option,
                                const node_t *node, void *config, const char *path)
{
    void *field = (char *)config + option->offset;
    kvio_status_t status;
    double number = 0;
    /* Quoted too: summary.json's config echo writes it as a JSON string. */
    if ((option->flags & KVIO_OPT_AUTO) && node->kind == NODE_SCALAR &&
        strcmp(node->text, "auto") == 0 &&
        (option->type == KVIO_OPT_INT || option->type == KVIO_OPT_DURATION)) {
        *(int64_t *)field = KVIO_OPT_AUTO_VALUE;
        return KVIO_OK;
    }
    switch (option->type) {
    case KVIO_OPT_BOOL: {
        if ((status = config_expect_scalar(context, node, path, option)) != KVIO_OK)
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
        return config_node_error(context, node, path, "expected true or false, got '%s'", node->text);
    }
    case KVIO_OPT_INT: {
        if ((status = config_expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        char *end;
        errno = 0;
        long long value = strtoll(node->text, &end, 10);
        if (end == node->text || *end != '\0' || errno == ERANGE)
            return config_node_error(context, node, path, "expected an integer, got '%s'", node->text);
        if ((status = check_range(context, node, path, option, (double)value)) != KVIO_OK)
            return status;
        *(int64_t *)field = value;
        return KVIO_OK;
    }
    case KVIO_OPT_DOUBLE:
        if ((status = config_parse_number(context, node, path, KVIO_UNIT_NONE, &number)) != KVIO_OK)
            return status;
        if ((status = check_range(context, node, path, option, number)) != KVIO_OK)
            return status;
        *(double *)field = number;
        return KVIO_OK;
    case KVIO_OPT_SIZE:
    case KVIO_OPT_DURATION: {
        if ((status = config_expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        kvio_unit_t unit = option->type == KVIO_OPT_SIZE ? KVIO_UNIT_SIZE : KVIO_UNIT_DURATION;
        if ((status = config_parse_number(context, node, path, unit, &number)) != KVIO_OK)
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
        if ((status = config_expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        /* YAML's null (unquoted null, ~ or nothing) for a string that is
         * unset by default: unset, as summary.json's config echo writes it
         * (the echo, run again, read "null" as a file name). */
        if (node->plain && option->default_value == NULL &&
            (strcmp(node->text, "null") == 0 || strcmp(node->text, "~") == 0 ||
             node->text[0] == '\0')) {
            free(*(char **)field);
            *(char **)field = NULL;
            return KVIO_OK;
        }
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
                return config_node_error(context, node, path,
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
        if ((status = config_expect_scalar(context, node, path, option)) != KVIO_OK)
            return status;
        int index = value_index(option, node->text);
        if (index < 0)
            return not_one_of(context, node, path, option);
        *(int *)field = index;
        return KVIO_OK;
    }
    case KVIO_OPT_PLUGIN:
        return bind_choice(context, option, node, (kvio_choice_t *)field, path);
    case KVIO_OPT_DIST:
        return config_bind_dist(context, option, node, (kvio_dist_t *)field, path);
    case KVIO_OPT_SECTION:
        if (node->kind != NODE_MAPPING)
            return config_node_error(context, node, path, "expected a mapping of keys");
        return config_bind_mapping(context, option->options, node, field, path);
    case KVIO_OPT_LIST:
        return bind_list(context, option, node, (kvio_opt_list_t *)field, path);
    }
    return KVIO_ERR_INTERNAL;
}

kvio_status_t config_bind_mapping(bind_context_t *context, const kvio_opt_t *options,
                                  const node_t *node, void *config, const char *path)
{
    for (size_t i = 0; i < node->count; i++) {
        const node_t *key = node->keys[i];
        char key_path[512];
        config_join_path(key_path, sizeof(key_path), path, key->text);
        const kvio_opt_t *option = options;
        size_t num_options = 0;
        for (; options[num_options].key != NULL; num_options++) {
        }
        for (option = options; option->key != NULL; option++) {
            if (strcmp(option->key, key->text) == 0)
                break;
        }
        size_t plugin_index = 0;
        const kvio_opt_t *owner = option->key == NULL
                                      ? plugin_section(options, key->text, &plugin_index)
                                      : NULL;
        if (owner != NULL) {
            kvio_status_t status = bind_plugin_section(context, owner, plugin_index,
                                                       node->items[i], config, key_path);
            if (status != KVIO_OK)
                return status;
            continue;
        }
        if (option->key == NULL) {
            const char *kind = NULL;
            const kvio_plugin_t *holder = plugin_with_key(options, key->text, &kind);
            if (holder != NULL)
                return config_node_error(context, key, key_path,
                                         "unknown key here: it is a key of the %s %s, in its "
                                         "own section (%s: {%s: ...})", kind, holder->name,
                                         holder->name, key->text);
            const char *close = config_closest_name(key->text, &options[0].key, num_options,
                                             sizeof(kvio_opt_t));
            if (close != NULL)
                return config_node_error(context, key, key_path, "unknown key (did you mean '%s'?)",
                                  close);
            return config_node_error(context, key, key_path, "unknown key");
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
        if (option->type == KVIO_OPT_SECTION)
            status = kvio_config_defaults(option->options, field, error_p, error_len);
        else if (option->type == KVIO_OPT_PLUGIN)
            status = choice_defaults(option, (kvio_choice_t *)field, error_p, error_len);
        if (status == KVIO_OK && option->type != KVIO_OPT_SECTION &&
            option->default_value != NULL) {
            node_t *node = NULL;
            char origin[256];
            snprintf(origin, sizeof(origin), "default of %s", option->key);
            status = config_parse_yaml(option->default_value, strlen(option->default_value), origin,
                                &node, error_p, error_len);
            if (status == KVIO_OK && node != NULL) {
                config_origin_retag(node, "built-in default");
                status = bind_value(&context, option, node, config_p, option->key);
            }
            config_node_free(node);
        }
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

/* Each chosen plug-in's own checks of its options, everywhere under
 * options (sections, list items). */
static kvio_status_t check_choices(const kvio_opt_t *options, const void *config,
                                   const char *path, char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    for (const kvio_opt_t *option = options; option->key != NULL && status == KVIO_OK;
         option++) {
        const void *field = (const char *)config + option->offset;
        char key_path[512];
        config_join_path(key_path, sizeof(key_path), path, option->key);
        if (option->type == KVIO_OPT_SECTION) {
            status = check_choices(option->options, field, key_path, error_p, error_len);
        } else if (option->type == KVIO_OPT_LIST) {
            const kvio_opt_list_t *list = field;
            for (size_t i = 0; i < list->count && status == KVIO_OK; i++) {
                char item_path[540];
                snprintf(item_path, sizeof(item_path), "%s[%zu]", key_path, i);
                status = check_choices(option->options,
                                       (const char *)list->items + i * option->element_size,
                                       item_path, error_p, error_len);
            }
        } else if (option->type == KVIO_OPT_PLUGIN) {
            const kvio_choice_t *choice = field;
            if (choice->plugin == NULL || choice->plugin->check == NULL)
                continue;
            char plugin_path[600];
            config_join_path(plugin_path, sizeof(plugin_path), path, choice->plugin->name);
            status = choice->plugin->check(kvio_choice_options(choice), plugin_path, error_p,
                                           error_len);
        }
    }
    return status;
}

kvio_status_t kvio_config_bind(const kvio_opt_t *options, const kvio_config_doc_t *doc,
                               void *config_p, char *error_p, size_t error_len)
{
    bind_context_t context = {.error = error_p, .error_len = error_len};
    kvio_status_t status = kvio_config_defaults(options, config_p, error_p, error_len);
    if (status == KVIO_OK)
        status = config_bind_mapping(&context, options, doc->root, config_p, "");
    if (status == KVIO_OK)
        status = check_choices(options, config_p, "", error_p, error_len);
    if (status != KVIO_OK)
        kvio_config_free(options, config_p);
    return status;
}

kvio_status_t kvio_config_bind_text(const kvio_opt_t *options, const char *text,
                                    const char *origin, void *config_p, char *error_p,
                                    size_t error_len)
{
    kvio_config_doc_t *doc = NULL;
    kvio_status_t status = kvio_config_doc_parse(text, strlen(text), origin, &doc, error_p,
                                                 error_len);
    if (status == KVIO_OK)
        status = kvio_config_bind(options, doc, config_p, error_p, error_len);
    kvio_config_doc_destroy(doc);
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
        case KVIO_OPT_PLUGIN: {
            kvio_choice_t *choice = field;
            for (size_t i = 0; choice->options != NULL && i < option->registry->count; i++) {
                if (choice->options[i] == NULL)
                    continue;
                kvio_config_free(option->registry->plugins[i]->options, choice->options[i]);
                free(choice->options[i]);
            }
            free(choice->options);
            memset(choice, 0, sizeof(*choice));
            break;
        }
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

