/* Plain memcpy bandwidth, the reference the benchmarks compare copies with.
 * Usage: memcpy_bw BLOCK_BYTES NUM_BLOCKS ROUNDS [IDLE_S]: KV-sized blocks
 * between two prefaulted host arenas (bench/emulate.sh's swap copies);
 * prints GB/s (1e9). IDLE_S: sleep that long between filling the arenas and
 * copying, as KV blocks sit between their allocation and a swap (on the
 * development VM the host reclaims guest memory idle for a few seconds, and
 * the first touch afterwards is several times slower).
 * memcpy_bw --fresh BYTES [REPEATS]: one memcpy of BYTES between two fresh
 * buffers (mapped, faulted in and written just before, as a model update's
 * send buffer and receive slot are, so no page fault is timed), REPEATS
 * times (default 3) with new buffers each time (bench/update.sh's
 * reference); prints the median time in ms and its GB/s. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MADV_POPULATE_WRITE */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvio/clock.h"

/* A buffer of bytes, faulted in; NULL when out of memory. */
static unsigned char *map_fresh(size_t bytes)
{
    void *buffer = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffer == MAP_FAILED)
        return NULL;
#ifdef MADV_POPULATE_WRITE
    (void)madvise(buffer, bytes, MADV_POPULATE_WRITE); /* faster than faulting by writes */
#endif
    return buffer;
}

static int compare_ns(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int fresh(int argc, char **argv)
{
    char *end = NULL;
    size_t bytes = strtoull(argv[2], &end, 10);
    long repeats = argc == 4 ? strtol(argv[3], NULL, 10) : 3;
    if (end == argv[2] || *end != '\0' || bytes == 0 || repeats < 1 || repeats > 100) {
        fprintf(stderr, "usage: memcpy_bw --fresh BYTES [REPEATS (1..100)]\n");
        return 2;
    }
    uint64_t *times = calloc((size_t)repeats, sizeof(*times));
    if (times == NULL)
        return 1;
    for (long r = 0; r < repeats; r++) {
        unsigned char *source = map_fresh(bytes), *target = map_fresh(bytes);
        if (source == NULL || target == NULL) {
            fprintf(stderr, "memcpy_bw: out of memory for two %zu-byte buffers\n", bytes);
            return 1;
        }
        /* Every page written, and no two source pages alike. */
        memset(target, 2, bytes);
        memset(source, 1, bytes);
        for (size_t page = 0; page + sizeof(page) <= bytes; page += 4096)
            memcpy(source + page, &page, sizeof(page));
        uint64_t start = kvio_time_ns();
        memcpy(target, source, bytes);
        times[r] = kvio_time_ns() - start;
        munmap(source, bytes);
        munmap(target, bytes);
    }
    qsort(times, (size_t)repeats, sizeof(*times), compare_ns);
    uint64_t median = times[repeats / 2];
    printf("%.3f %.3f\n", (double)median / 1e6, (double)bytes / (double)median);
    free(times);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && argc <= 4 && strcmp(argv[1], "--fresh") == 0)
        return fresh(argc, argv);
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: memcpy_bw BLOCK_BYTES NUM_BLOCKS ROUNDS [IDLE_S]\n"
                        "       memcpy_bw --fresh BYTES [REPEATS]\n");
        return 2;
    }
    size_t block = strtoull(argv[1], NULL, 10), count = strtoull(argv[2], NULL, 10);
    int rounds = atoi(argv[3]);
    if (block == 0 || count == 0 || rounds <= 0)
        return 2;
    unsigned char *source = malloc(block * count), *target = malloc(block * count);
    if (source == NULL || target == NULL) {
        fprintf(stderr, "memcpy_bw: out of memory\n");
        return 1;
    }
    memset(source, 1, block * count);
    memset(target, 2, block * count);
    if (argc == 5) {
        char *end = NULL;
        long idle = strtol(argv[4], &end, 10);
        if (end == argv[4] || *end != '\0' || idle < 0 || idle > 3600) {
            fprintf(stderr, "memcpy_bw: IDLE_S must be 0..3600 seconds\n");
            return 2;
        }
        sleep((unsigned)idle);
    }
    uint64_t start = kvio_time_ns();
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < count; i++) {
            /* A stride through the arena, as victims' blocks are scattered. */
            size_t from = (i * 7919) % count, to = (i * 104729 + (size_t)r) % count;
            memcpy(target + to * block, source + from * block, block);
        }
    double seconds = (double)(kvio_time_ns() - start) / 1e9;
    printf("%.3f\n", (double)block * (double)count * rounds / seconds / 1e9);
    free(source);
    free(target);
    return 0;
}
