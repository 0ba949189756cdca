/* The effective configuration as JSON (summary.json, validate --dump), and
 * help printed from the same option tables. */
#include "core/config_int.h"

#include "kvio/redis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* A string as the configuration dump shows it: a URL's password becomes
 * *** (kvio_url_redact), so results and --dump never carry it. */
static json_t *redacted_string(const char *string)
{
    size_t length = strlen(string) + 8;
    char *text = malloc(length);
    if (text == NULL)
        return NULL;
    kvio_url_redact(string, text, length);
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
        bool automatic = (option->flags & KVIO_OPT_AUTO) &&
                         (option->type == KVIO_OPT_INT || option->type == KVIO_OPT_DURATION) &&
                         *(const int64_t *)field == KVIO_OPT_AUTO_VALUE;
        switch (automatic ? -1 : (int)option->type) {
        case -1:
            value = json_string("auto");
            break;
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
        case KVIO_OPT_PLUGIN: {
            /* The name, and beside it the chosen plug-in's own options. */
            const kvio_choice_t *choice = field;
            value = json_string(kvio_choice_name(choice));
            const void *options_of = kvio_choice_options(choice);
            if (options_of != NULL)
                json_object_set_new(object, choice->plugin->name,
                                    kvio_config_to_json(choice->plugin->options, options_of));
            break;
        }
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
    for (size_t i = 0; option->type == KVIO_OPT_PLUGIN && i < option->registry->count &&
                       used < sizeof(detail);
         i++)
        used += (size_t)snprintf(detail + used, sizeof(detail) - used, "%s%s",
                                 i > 0 ? "|" : used > 0 ? ", one of " : "one of ",
                                 option->registry->plugins[i]->name);
    char line[400];
    int length = snprintf(line, sizeof(line), "  %-34s %s", key_path, config_type_name(option->type));
    if (detail[0] != '\0' && length + 2 + (int)strlen(detail) <= 79) {
        fprintf(out, "%s, %s\n", line, detail);
    } else {
        fprintf(out, "%s\n", line);
        print_wrapped(out, detail, 6);
    }
    if (option->help != NULL)
        print_wrapped(out, option->help, 6);
}

static void print_help_at(const kvio_opt_t *options, const char *path, bool deep, FILE *out);

/* A plug-in option's choices, each with its help and (deep) its own keys,
 * which sit under path.<name>. */
static void print_plugins(const kvio_opt_t *option, const char *path, bool deep, FILE *out)
{
    for (size_t i = 0; i < option->registry->count; i++) {
        const kvio_plugin_t *plugin = option->registry->plugins[i];
        char plugin_path[300];
        config_join_path(plugin_path, sizeof(plugin_path), path, plugin->name);
        bool has_options = plugin->options != NULL && plugin->options[0].key != NULL;
        char line[400];
        snprintf(line, sizeof(line), "%s: %s", plugin->name,
                 plugin->help != NULL ? plugin->help : "");
        print_wrapped(out, line, 6);
        if (has_options && deep)
            print_help_at(plugin->options, plugin_path, deep, out);
        else if (has_options)
            fprintf(out, "%*s--help %s lists its keys\n", 8, "", plugin_path);
    }
}

/* Every key under options (path: where they sit), sections opened when
 * deep, else one line each naming how to list them. */
static void print_help_at(const kvio_opt_t *options, const char *path, bool deep, FILE *out)
{
    for (const kvio_opt_t *option = options; option->key != NULL; option++) {
        char key_path[256];
        config_join_path(key_path, sizeof(key_path), path, option->key);
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
        if (option->type == KVIO_OPT_PLUGIN)
            print_plugins(option, path, deep, out);
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
        const kvio_plugin_t *plugin = NULL;
        for (const kvio_opt_t *option = level; found == NULL && option != NULL &&
                                               option->key != NULL;
             option++) {
            for (size_t i = 0; option->type == KVIO_OPT_PLUGIN && i < option->registry->count;
                 i++) {
                const kvio_plugin_t *candidate = option->registry->plugins[i];
                if (strlen(candidate->name) == length &&
                    strncmp(candidate->name, part, length) == 0 && candidate->options != NULL)
                    plugin = candidate;
            }
        }
        if (plugin != NULL) {
            /* A plug-in's own keys: path.<name>.* */
            char parent[192];
            snprintf(parent, sizeof(parent), "%s", path);
            config_join_path(path, sizeof(path), parent, plugin->name);
            part += length;
            if (*part == '.')
                part++;
            if (*part == '\0') {
                if (out != NULL)
                    print_help_at(plugin->options, path, true, out);
                return true;
            }
            level = plugin->options;
            continue;
        }
        if (found == NULL)
            return false;
        char parent[192];
        snprintf(parent, sizeof(parent), "%s", path);
        config_join_path(path, sizeof(path), parent, found->key);
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
