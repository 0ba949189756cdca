/* Growable arrays and lazily zeroed memory (kvio/array.h). */
#include "kvio/array.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

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

void *kvio_zeroed_alloc(size_t bytes)
{
    void *memory = mmap(NULL, bytes > 0 ? bytes : 1, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

void *kvio_populated_alloc(size_t bytes)
{
    void *memory = mmap(NULL, bytes > 0 ? bytes : 1, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

void kvio_zeroed_free(void *memory, size_t bytes)
{
    if (memory != NULL)
        munmap(memory, bytes > 0 ? bytes : 1);
}

/* Below this, a block is not worth a huge page (nor mapped by malloc). */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

void *kvio_large_alloc(size_t bytes)
{
    void *memory = malloc(bytes > 0 ? bytes : 1);
    if (memory == NULL || bytes < 2 * HUGE_PAGE_BYTES)
        return memory;
    /* The whole huge pages inside the block (madvise wants them aligned);
     * refused where the system has none: then it is small pages. */
    uintptr_t start = ((uintptr_t)memory + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1);
    uintptr_t end = ((uintptr_t)memory + bytes) & ~(HUGE_PAGE_BYTES - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
    return memory;
}
