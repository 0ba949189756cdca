/* Growable arrays (kvio/array.h). */
#include "kvio/array.h"

#include <stdint.h>
#include <stdlib.h>

kvio_status_t kvio_array_reserve(void **items, size_t *capacity, size_t needed,
                                 size_t item_size, size_t first)
{
    if (needed <= *capacity)
        return KVIO_OK;
    size_t bigger = *capacity > 0 ? *capacity : (first > 0 ? first : 1);
    while (bigger < needed) {
        if (bigger > SIZE_MAX / 2)
            return KVIO_ERR_NOMEM;
        bigger *= 2;
    }
    if (item_size > 0 && bigger > SIZE_MAX / item_size)
        return KVIO_ERR_NOMEM;
    void *resized = realloc(*items, bigger * item_size);
    if (resized == NULL)
        return KVIO_ERR_NOMEM;
    *items = resized;
    *capacity = bigger;
    return KVIO_OK;
}
