/* xoshiro256** (Blackman and Vigna) seeded through splitmix64. The purpose
 * string is folded in with FNV-1a so streams are named, not numbered. */
#include "kvio/rng.h"

#include <math.h>
#include <stddef.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void kvio_rng_seed(kvio_rng_t *rng, uint64_t seed, uint32_t rank, const char *purpose)
{
    uint64_t name_hash = 0xcbf29ce484222325ULL;
    for (const char *c = purpose != NULL ? purpose : ""; *c != '\0'; c++)
        name_hash = (name_hash ^ (unsigned char)*c) * 0x100000001b3ULL;
    uint64_t mix = seed;
    uint64_t key = splitmix64(&mix) ^ name_hash;
    key = splitmix64(&key) ^ ((uint64_t)rank * 0xd1342543de82ef95ULL);
    for (int i = 0; i < 4; i++)
        rng->state[i] = splitmix64(&key);
}

uint64_t kvio_rng_next(kvio_rng_t *rng)
{
    uint64_t *s = rng->state;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kvio_rng_uniform(kvio_rng_t *rng)
{
    return (double)(kvio_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t kvio_rng_below(kvio_rng_t *rng, uint64_t bound)
{
    /* Lemire's method would need 128-bit multiply; rejection keeps it exact. */
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t value = kvio_rng_next(rng);
        if (value >= threshold)
            return value % bound;
    }
}

double kvio_rng_normal(kvio_rng_t *rng)
{
    for (;;) {
        double u = 2.0 * kvio_rng_uniform(rng) - 1.0;
        double v = 2.0 * kvio_rng_uniform(rng) - 1.0;
        double s = u * u + v * v;
        if (s > 0.0 && s < 1.0)
            return u * sqrt(-2.0 * log(s) / s);
    }
}
