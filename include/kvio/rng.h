/* Seeded random numbers: xoshiro256** generators, each seeded by splitmix64
 * from (seed, rank, purpose), so every (rank, purpose) pair gets its own
 * independent stream and the same seed gives the same sequence anywhere. */
#ifndef KVIO_RNG_H
#define KVIO_RNG_H

#include <stdint.h>

/* Generator state; a plain value so hot loops keep it on the stack. */
typedef struct kvio_rng {
    uint64_t state[4];
} kvio_rng_t;

/* Seeds a stream. purpose names what the stream is for ("arrivals",
 * "lengths", ...); different purposes or ranks give independent streams. */
void kvio_rng_seed(kvio_rng_t *rng, uint64_t seed, uint32_t rank, const char *purpose);

/* Next 64 random bits. */
uint64_t kvio_rng_next(kvio_rng_t *rng);

/* Uniform double in [0, 1) with 53 random bits. */
double kvio_rng_uniform(kvio_rng_t *rng);

/* Uniform integer in [0, bound) without modulo bias; bound > 0. */
uint64_t kvio_rng_below(kvio_rng_t *rng, uint64_t bound);

/* Standard normal variate (Marsaglia's polar method). */
double kvio_rng_normal(kvio_rng_t *rng);

#endif
