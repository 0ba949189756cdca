/* Plain memcpy bandwidth for KV-sized blocks between two prefaulted host
 * arenas: the reference that bench/emulate.sh compares swap copies with.
 * Usage: memcpy_bw BLOCK_BYTES NUM_BLOCKS ROUNDS [IDLE_S]; prints GB/s (1e9).
 * IDLE_S: sleep that long between filling the arenas and copying, as KV
 * blocks sit between their allocation and a swap (on the development VM
 * the host reclaims guest memory idle for a few seconds, and the first
 * touch afterwards is several times slower). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvio/clock.h"

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: memcpy_bw BLOCK_BYTES NUM_BLOCKS ROUNDS [IDLE_S]\n");
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
