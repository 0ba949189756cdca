/* Registries of plug-ins: look-up by name, the list of names for errors and
 * help, and what a bound choice holds. */
#include "kvio/plugin.h"

#include <string.h>

const kvio_plugin_t *kvio_registry_find(const kvio_registry_t *registry, const char *name)
{
    for (size_t i = 0; name != NULL && i < registry->count; i++)
        if (strcmp(registry->plugins[i]->name, name) == 0)
            return registry->plugins[i];
    return NULL;
}

size_t kvio_registry_index(const kvio_registry_t *registry, const kvio_plugin_t *plugin)
{
    size_t i = 0;
    while (i < registry->count && registry->plugins[i] != plugin)
        i++;
    return i;
}

void kvio_registry_names(const kvio_registry_t *registry, char *text_p, size_t text_len)
{
    size_t used = 0;
    if (text_len > 0)
        text_p[0] = '\0';
    for (size_t i = 0; i < registry->count && used < text_len; i++)
        used += (size_t)snprintf(text_p + used, text_len - used, "%s%s", i > 0 ? ", " : "",
                                 registry->plugins[i]->name);
}

void kvio_registry_print(const kvio_registry_t *registry, FILE *out)
{
    fprintf(out, "%s:\n", registry->kind);
    for (size_t i = 0; i < registry->count; i++)
        fprintf(out, "  %-16s %s\n", registry->plugins[i]->name,
                registry->plugins[i]->help != NULL ? registry->plugins[i]->help : "");
}

const void *kvio_choice_options(const kvio_choice_t *choice)
{
    if (choice->plugin == NULL || choice->options == NULL)
        return NULL;
    return choice->options[choice->index];
}

const char *kvio_choice_name(const kvio_choice_t *choice)
{
    return choice->plugin != NULL ? choice->plugin->name : "?";
}

kvio_status_t kvio_choice_set(kvio_choice_t *choice, const char *name)
{
    const kvio_plugin_t *plugin =
        choice->registry != NULL ? kvio_registry_find(choice->registry, name) : NULL;
    if (plugin == NULL)
        return KVIO_ERR_NOT_FOUND;
    choice->plugin = plugin;
    choice->index = kvio_registry_index(choice->registry, plugin);
    return KVIO_OK;
}

bool kvio_choice_is(const kvio_choice_t *choice, const char *name)
{
    return choice->plugin != NULL && strcmp(choice->plugin->name, name) == 0;
}
