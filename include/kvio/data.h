/* The bytes kvio writes where a device or a store could reduce them (KV
 * tiers, P/D transfers, model-update files, MLPerf objects), generated from
 * (seed, identity, version) at memory speed, so any range can be made again
 * to verify a read (core/data.c). By default no storage can compress or
 * deduplicate them; fio's zero, compressible and dedupable buffers are the
 * other choices (fio's buffer_compress_percentage, dedupe_percentage). */
#ifndef KVIO_DATA_H
#define KVIO_DATA_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KVIO_DATA_RANDOM,   /* every 4 KiB page distinct and incompressible (default) */
    KVIO_DATA_ZERO,     /* zeros: kvio before #54 (a KV block only its 32-byte owner stamp) */
    KVIO_DATA_COMPRESS, /* each 512-byte piece random up to (100 - percent) %, then zeros */
    KVIO_DATA_DEDUPE,   /* percent % of the 4 KiB pages one shared page, the rest distinct */
} kvio_data_kind_t;

/* What the bytes are; zeroed is random. */
typedef struct kvio_data {
    int kind;    /* kvio_data_kind_t */
    int percent; /* compress and dedupe: 0-100 */
} kvio_data_t;

/* The page bytes are generated in, and what dedupe shares. */
#define KVIO_DATA_PAGE 4096u
/* The piece compress makes part random, part zeros (fio's buffer_compress_chunk). */
#define KVIO_DATA_COMPRESS_PIECE 512u

/* The one line of help every `data` option shows. */
#define KVIO_DATA_HELP                                                                       \
    "what kvio writes: random (default: no device can compress or deduplicate it), zero "  \
    "(all zeros: what kvio wrote before), compress:PCT (each 512 bytes PCT % zeros, as "    \
    "fio's buffer_compress_percentage), dedupe:PCT (PCT % of the 4 KiB pages identical, "   \
    "as fio's dedupe_percentage)"

/* Parses "random", "zero", "compress:PCT" or "dedupe:PCT" (PCT 0-100).
 * On error KVIO_ERR_CONFIG with a message naming text and the choices. */
kvio_status_t kvio_data_parse(const char *text, kvio_data_t *data_p, char *error_p,
                              size_t error_len);

/* The text kvio_data_parse reads back ("compress:50"). */
void kvio_data_format(const kvio_data_t *data, char *out, size_t out_len);

/* The key of one object's bytes: its run's seed, its identity (a block, a
 * file, a version's payload) and its version (an owner, a model version). */
uint64_t kvio_data_key(uint64_t seed, uint64_t identity, uint64_t version);

/* Writes bytes [offset, offset + length) of the object key as data says.
 * Any range can be made on its own and gives the same bytes as the whole. */
void kvio_data_fill(const kvio_data_t *data, uint64_t key, uint64_t offset, void *buffer,
                    size_t length);

/* Whether buffer holds bytes [offset, offset + length) of the object key. */
bool kvio_data_verify(const kvio_data_t *data, uint64_t key, uint64_t offset,
                      const void *buffer, size_t length);

#endif
