/* Growable arrays: the one helper every module grows its arrays with. */
#ifndef KVIO_ARRAY_H
#define KVIO_ARRAY_H

#include "kvio/status.h"

#include <stddef.h>

/* Makes room for needed items of item_size bytes in *items (its capacity in
 * *capacity): at least first items, doubling. Kept contents stay;
 * KVIO_ERR_NOMEM leaves the array as it was. */
kvio_status_t kvio_array_reserve(void **items, size_t *capacity, size_t needed,
                                 size_t item_size, size_t first);

#endif
