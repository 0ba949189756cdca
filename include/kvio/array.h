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

/* bytes of zeroed memory, page-aligned, that costs nothing until touched:
 * its own mapping (calloc reuses freed heap memory, which it must clear,
 * page by page). Free with kvio_zeroed_free and the same size. */
void *kvio_zeroed_alloc(size_t bytes);
void kvio_zeroed_free(void *memory, size_t bytes);

/* As kvio_zeroed_alloc, its pages put in by the kernel at once
 * (MAP_POPULATE): for buffers that will be written through, where a page
 * fault each would cost more (a fault traps to the hypervisor on a virtual
 * machine). Free with kvio_zeroed_free. */
void *kvio_populated_alloc(size_t bytes);

/* malloc of bytes (free() it) that, when large, asks for transparent huge
 * pages before anything touches it: one page fault per 2 MiB instead of
 * 512 (on a virtual machine a fault costs microseconds; a large array's
 * faults were a tenth of a simulate run). NULL when out of memory. */
void *kvio_large_alloc(size_t bytes);

#endif
