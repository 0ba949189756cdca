/* Python's random module, bit for bit where kv-cache.py uses it before its
 * threads start: random.seed(n) (init_by_array over n's 32-bit words,
 * CPython's _randommodule.c), MT19937, random() (53 bits from two draws),
 * _randbelow by rejection over getrandbits (random.py), randint, uniform,
 * choice. With it kvio's users are kv-cache.py's users for the same seed. */
#include "mlperf/mlperf_int.h"

#define N 624
#define M 397

static void init_genrand(mlperf_pyrandom_t *random, uint32_t seed)
{
    uint32_t *mt = random->state;
    mt[0] = seed;
    for (int i = 1; i < N; i++)
        mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    random->index = N;
}

/* init_by_array (Matsumoto and Nishimura's reference, as CPython has it). */
void mlperf_pyrandom_seed(mlperf_pyrandom_t *random, uint64_t seed)
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int length = key[1] != 0 ? 2 : 1;
    uint32_t *mt = random->state;
    init_genrand(random, 19650218u);
    int i = 1, j = 0;
    for (int k = N > length ? N : length; k > 0; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= N) {
            mt[0] = mt[N - 1];
            i = 1;
        }
        if (j >= length)
            j = 0;
    }
    for (int k = N - 1; k > 0; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= N) {
            mt[0] = mt[N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    random->index = N;
}

static uint32_t genrand(mlperf_pyrandom_t *random)
{
    uint32_t *mt = random->state;
    if (random->index >= N) {
        for (int k = 0; k < N; k++) {
            uint32_t y = (mt[k] & 0x80000000u) | (mt[(k + 1) % N] & 0x7fffffffu);
            mt[k] = mt[(k + M) % N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        random->index = 0;
    }
    uint32_t y = mt[random->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

double mlperf_pyrandom_random(mlperf_pyrandom_t *random)
{
    uint32_t a = genrand(random) >> 5, b = genrand(random) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* getrandbits(k) for k <= 64: whole words low first, the last one's top bits. */
static uint64_t getrandbits(mlperf_pyrandom_t *random, int k)
{
    if (k <= 32)
        return genrand(random) >> (32 - k);
    uint64_t low = genrand(random);
    uint64_t high = genrand(random) >> (64 - k);
    return low | high << 32;
}

/* random.py's _randbelow_with_getrandbits: bits of n's length until below n. */
static uint64_t randbelow(mlperf_pyrandom_t *random, uint64_t n)
{
    if (n <= 1)
        return 0;
    int k = 64 - __builtin_clzll(n);
    uint64_t r = getrandbits(random, k);
    while (r >= n)
        r = getrandbits(random, k);
    return r;
}

int64_t mlperf_pyrandom_randint(mlperf_pyrandom_t *random, int64_t low, int64_t high)
{
    return low + (int64_t)randbelow(random, (uint64_t)(high - low + 1));
}

double mlperf_pyrandom_uniform(mlperf_pyrandom_t *random, double low, double high)
{
    return low + (high - low) * mlperf_pyrandom_random(random);
}

uint64_t mlperf_pyrandom_choice(mlperf_pyrandom_t *random, uint64_t count)
{
    return randbelow(random, count);
}
