/* How fast kvio makes the bytes it writes (core/data.c) against memcpy over
 * the same blocks (bench/storage.sh's `figure data_fill_over_memcpy`).
 * Usage: data_rate BLOCK_BYTES NUM_BLOCKS ROUNDS: one prefaulted arena of
 * NUM_BLOCKS blocks filled block by block with data: random, each block an
 * object of its own (as KV blocks are), ROUNDS times; then ROUNDS memcpys of
 * the arena into a second one, block by block. Prints the two medians in
 * GB/s (1e9): "fill_gbps memcpy_gbps". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/data.h"

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: data_rate BLOCK_BYTES NUM_BLOCKS ROUNDS\n");
        return 2;
    }
    size_t block = strtoull(argv[1], NULL, 10), count = strtoull(argv[2], NULL, 10);
    long rounds = strtol(argv[3], NULL, 10);
    if (block == 0 || count == 0 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "data_rate: BLOCK_BYTES and NUM_BLOCKS above 0, ROUNDS 1..100\n");
        return 2;
    }
    unsigned char *arena = malloc(block * count), *copy = malloc(block * count);
    double *fill = calloc((size_t)rounds, sizeof(double)), *copied = calloc((size_t)rounds,
                                                                             sizeof(double));
    if (arena == NULL || copy == NULL || fill == NULL || copied == NULL) {
        fprintf(stderr, "data_rate: out of memory for two arenas of %zu bytes\n", block * count);
        return 1;
    }
    memset(arena, 1, block * count);
    memset(copy, 2, block * count);
    kvio_data_t random = {.kind = KVIO_DATA_RANDOM};
    for (long r = 0; r < rounds; r++) {
        uint64_t start = kvio_time_ns();
        for (size_t b = 0; b < count; b++)
            kvio_data_fill(&random, kvio_data_key(1, b, (uint64_t)r), 0, arena + b * block, block);
        fill[r] = (double)(block * count) / (double)(kvio_time_ns() - start);
    }
    for (long r = 0; r < rounds; r++) {
        uint64_t start = kvio_time_ns();
        for (size_t b = 0; b < count; b++)
            memcpy(copy + b * block, arena + b * block, block);
        copied[r] = (double)(block * count) / (double)(kvio_time_ns() - start);
    }
    qsort(fill, (size_t)rounds, sizeof(double), compare_double);
    qsort(copied, (size_t)rounds, sizeof(double), compare_double);
    printf("%.3f %.3f\n", fill[rounds / 2], copied[rounds / 2]);
    free(arena);
    free(copy);
    free(fill);
    free(copied);
    return 0;
}
