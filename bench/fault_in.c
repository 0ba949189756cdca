/* The reference bench/quickstart.sh compares emulate's set-up with: the
 * time one thread takes to make BYTES of fresh host memory real, as a
 * program would that allocates it and writes it once (mmap, huge pages
 * where the kernel has them, a memset). Usage: fault_in BYTES; prints
 * seconds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvio/clock.h"

int main(int argc, char **argv)
{
    char *end = NULL;
    size_t bytes = argc == 2 ? strtoull(argv[1], &end, 10) : 0;
    if (bytes == 0 || end == NULL || *end != '\0') {
        fprintf(stderr, "usage: fault_in BYTES\n");
        return 2;
    }
    uint64_t start = kvio_time_ns();
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
        fprintf(stderr, "fault_in: cannot map %zu bytes\n", bytes);
        return 1;
    }
    madvise(memory, bytes, MADV_HUGEPAGE);
    memset(memory, 0, bytes);
    printf("%.3f\n", (double)(kvio_time_ns() - start) / 1e9);
    munmap(memory, bytes);
    return 0;
}
