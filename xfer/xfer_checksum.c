/* The checksum every version carries: XXH3-64 of the whole buffer. Two ways
 * to it: a streaming state fed piece by piece in order (libxxhash's, for a
 * receiver summing what has landed), here, and the sender's sum of a buffer
 * of known length, taken while the buffer is copied (or read) region by
 * region (core/copysum.c, kvio/copysum.h). Both give XXH3_64bits of the
 * whole buffer; tests compare them with libxxhash. On x86 they use the
 * widest vector unit the CPU has (libxxhash's dispatcher where the library
 * has one; AVX2 for the sender's sum). */
#include "xfer/xfer_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
/* Inline: the secret and primes below are xxhash's own (XXH3_kSecret). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

struct kvio_xfer_checksum {
    XXH3_state_t *state;
};

#if defined(__x86_64__) || defined(__i386__)
/* libxxhash's x86 dispatcher (xxh_x86dispatch.h; Debian's build has it):
 * AVX2 or AVX-512 chosen at run time, where the plain XXH3 functions are
 * built for the baseline SSE2 (2.5x slower in cache on an EPYC). Weak: a
 * libxxhash without it leaves them NULL and the plain functions serve. */
XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t *state, const void *input,
                                          size_t length) __attribute__((weak));
#define HAVE_DISPATCH(function) ((function) != NULL)
#else
#define HAVE_DISPATCH(function) 0
#define XXH3_64bits_update_dispatch XXH3_64bits_update
#endif

kvio_status_t kvio_xfer_checksum_create(kvio_xfer_checksum_t **checksum_p)
{
    kvio_xfer_checksum_t *checksum = malloc(sizeof(*checksum));
    if (checksum == NULL)
        return KVIO_ERR_NOMEM;
    if ((checksum->state = XXH3_createState()) == NULL) {
        free(checksum);
        return KVIO_ERR_NOMEM;
    }
    XXH3_64bits_reset(checksum->state);
    *checksum_p = checksum;
    return KVIO_OK;
}

void kvio_xfer_checksum_destroy(kvio_xfer_checksum_t *checksum)
{
    if (checksum == NULL)
        return;
    XXH3_freeState(checksum->state);
    free(checksum);
}

void kvio_xfer_checksum_reset(kvio_xfer_checksum_t *checksum)
{
    XXH3_64bits_reset(checksum->state);
}

void kvio_xfer_checksum_update(kvio_xfer_checksum_t *checksum, const void *data, uint64_t length)
{
    if (HAVE_DISPATCH(XXH3_64bits_update_dispatch))
        XXH3_64bits_update_dispatch(checksum->state, data, (size_t)length);
    else
        XXH3_64bits_update(checksum->state, data, (size_t)length);
}

uint64_t kvio_xfer_checksum_digest(const kvio_xfer_checksum_t *checksum)
{
    return XXH3_64bits_digest(checksum->state);
}
