/* Tests for the machine facts and the fault-in of large regions
 * (kvio/sysinfo.h): kvio_fault_in_alloc makes every page of what it returns
 * resident and zero, in huge pages where the kernel has them; a stop set
 * before it ends the fault-in with nothing left mapped; a size no machine
 * can map is refused. */
#include "kvio/sysinfo.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/helpers.h"

/* Pages of [memory, memory + bytes) that are resident (mincore). */
static size_t resident_pages(void *memory, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (bytes + page - 1) / page;
    unsigned char *vector = malloc(pages);
    cr_assert_not_null(vector);
    cr_assert_eq(mincore(memory, bytes, vector), 0);
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++)
        resident += vector[i] & 1;
    free(vector);
    return resident;
}

Test(sysinfo, fault_in_alloc_makes_every_page_resident_and_zero, .timeout = 30)
{
    size_t bytes = (16u << 20) + 4096 + 100; /* not a whole number of pages */
    void *memory = NULL;
    cr_assert_eq(kvio_fault_in_alloc(bytes, NULL, &memory), KVIO_OK);
    cr_assert_not_null(memory);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    cr_expect_eq(resident_pages(memory, bytes), (bytes + page - 1) / page,
                 "every page is resident before anything touches it");
    const unsigned char *bytes_at = memory;
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++)
        nonzero += bytes_at[i] != 0;
    cr_expect_eq(nonzero, 0, "fresh memory reads as zeros");
    if (test_huge_pages_on_request())
        cr_expect_gt(test_huge_kib_at(memory), 0, "in 2 MiB pages where the kernel has them");
    kvio_fault_in_free(memory, bytes);
}

Test(sysinfo, fault_in_alloc_stops_when_asked, .timeout = 30)
{
    volatile sig_atomic_t stop = 1;
    void *memory = NULL;
    cr_expect_eq(kvio_fault_in_alloc(64u << 20, &stop, &memory), KVIO_ERR_INTERRUPTED);
    cr_expect_null(memory, "nothing is returned once stopped");
}

Test(sysinfo, fault_in_alloc_refuses_what_cannot_be_mapped, .timeout = 30)
{
    void *memory = NULL;
    cr_expect_eq(kvio_fault_in_alloc(SIZE_MAX / 2, NULL, &memory), KVIO_ERR_NOMEM);
    cr_expect_null(memory);
}
