/* Block hashes shared by streams, traces and the KV cache, so that they all
 * agree: h = XXH3-128(parent || payload). The parent is the previous block's
 * hash in canonical form (16 bytes, big-endian, as `xxhsum -H2` prints it),
 * or 16 zero bytes for a request's first block; integers in the payload are
 * little-endian. See DESIGN.md, "Block hashes". */
#ifndef KVIO_HASH_H
#define KVIO_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A 128-bit block hash (XXH128's low and high halves). */
typedef struct kvio_hash {
    uint64_t low;
    uint64_t high;
} kvio_hash_t;

/* One run of a block's tokens that comes from one piece of content. */
typedef struct kvio_hash_run {
    uint64_t content_id;  /* identifies the content (prompt, document, ...) */
    uint32_t offset;      /* first token of the run within the content */
    uint32_t length;      /* tokens in the run */
} kvio_hash_run_t;

/* Explicit tokens: payload = each token id as u32, then extra_key's bytes
 * (the cache salt on a request's first block; NULL/0 for none). parent may be
 * NULL for the first block. */
kvio_hash_t kvio_hash_tokens(const kvio_hash_t *parent, const uint32_t *tokens,
                             size_t num_tokens, const void *extra_key,
                             size_t extra_key_len);

/* Segments: payload = (u64 content id, u32 offset, u32 length) per run. */
kvio_hash_t kvio_hash_runs(const kvio_hash_t *parent, const kvio_hash_run_t *runs,
                           size_t num_runs);

/* Trace blocks: payload = (u64 trace hash id, u32 index of this engine block
 * inside the trace block). */
kvio_hash_t kvio_hash_trace_block(const kvio_hash_t *parent, uint64_t trace_hash_id,
                                  uint32_t index_in_trace_block);

/* The chain of count trace blocks first_index, first_index + 1, ... of one
 * trace hash id: the same hashes as count calls of kvio_hash_trace_block,
 * each the next one's parent. */
void kvio_hash_trace_chain(const kvio_hash_t *parent, uint64_t trace_hash_id,
                           uint32_t first_index, size_t count, kvio_hash_t *hashes_p);

/* One request's trace chain for kvio_hash_trace_chains: engine blocks
 * 0 .. num_blocks-1 of a prompt cut into trace blocks of
 * blocks_per_trace_block engine blocks, block i being index
 * i % blocks_per_trace_block of trace id trace_hash_ids[i /
 * blocks_per_trace_block], chained from parent ({0, 0}: none). */
typedef struct kvio_trace_chain {
    kvio_hash_t parent;
    const uint64_t *trace_hash_ids;
    uint32_t blocks_per_trace_block; /* at least 1 */
    size_t num_blocks;
    kvio_hash_t *hashes_p;           /* num_blocks hashes */
} kvio_trace_chain_t;

/* The hashes of several independent chains, as kvio_hash_trace_chain on
 * each would give them. A chain is a run of dependent hashes, each waiting
 * for the one before; two chains are hashed side by side so that their
 * waits overlap. */
void kvio_hash_trace_chains(const kvio_trace_chain_t *chains, size_t count);

/* Writes the canonical 16 bytes of a hash (the parent form above). */
void kvio_hash_to_bytes(kvio_hash_t hash, uint8_t bytes_p[16]);

/* Writes 32 lowercase hex digits and a NUL, as xxhsum -H2 prints them. */
void kvio_hash_format(kvio_hash_t hash, char text_p[33]);

static inline bool kvio_hash_equal(kvio_hash_t a, kvio_hash_t b)
{
    return a.low == b.low && a.high == b.high;
}

#endif
