/* A copy that takes the bytes' XXH3-64 checksum on the way (core/copysum.c):
 * one pass over memory for both, AVX2 where the CPU has it. */
#ifndef KVIO_COPYSUM_H
#define KVIO_COPYSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The sum of a buffer of known length: XXH3-64, taken while the buffer is
 * passed on region by region in order, copied to a target or only read; the loads that copy a region feed the sum, so
 * summing costs a copy waiting on memory next to nothing. The digest equals
 * XXH3_64bits(source, length). */
typedef struct kvio_sum {
    uint64_t acc[8];
    const unsigned char *source;
    uint64_t length;
    uint64_t done;        /* bytes of source passed on so far */
    uint64_t next_stripe; /* the next 64-byte stripe to accumulate */
    bool vector;          /* AVX2 (x86 CPUs that have it) */
} kvio_sum_t;

void kvio_sum_start(kvio_sum_t *sum, const void *source, uint64_t length);
/* Passes the next length bytes of source on: copied to target (NULL: only
 * summed) with streaming stores, fenced. */
void kvio_sum_pass(kvio_sum_t *sum, void *target, uint64_t length);
/* Fills source (the receiver's own buffer, so not const to it) in order
 * with the next length bytes, read from input: whole stripes are read once,
 * summed and stored with streaming stores; a stripe split between pieces
 * is summed from source once both parts are in. Fenced. */
void kvio_sum_fill(kvio_sum_t *sum, const void *input, uint64_t length);
/* After all length bytes were passed. */
uint64_t kvio_sum_digest(const kvio_sum_t *sum);

/* Copies length bytes with stores that bypass the cache where the CPU has
 * them (x86: non-temporal; the reader of a slot reads it from memory
 * anyway, and cached stores would first read every line of it), then a
 * store fence: the bytes are visible before anything stored after. */
void kvio_copy_streaming(void *target, const void *source, uint64_t length);

/* Copies bytes from source to target and returns their XXH3-64 (what
 * XXH3_64bits gives), in one pass over memory. */
uint64_t kvio_copy_hashed(void *target, const void *source, size_t bytes);

#endif
