/* Lookup in the table of embedded presets. */
#include "kvio/presets.h"

#include <string.h>

const kvio_preset_t *kvio_preset_find(const char *name)
{
    for (const kvio_preset_t *preset = kvio_presets; preset->name != NULL; preset++) {
        if (strcmp(preset->name, name) == 0)
            return preset;
    }
    return NULL;
}
