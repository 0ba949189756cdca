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

/* A run of a chain's blocks whose payloads step evenly, for
 * kvio_hash_chains: count trace blocks (kvio_hash_trace_block) of one
 * trace id with indices first, first + 1, ...; or count one-run blocks
 * (kvio_hash_runs with one run) of one content, each length tokens, at
 * offsets first, first + length, ... (all below 2^32: where offsets wrap,
 * a new span starts); or one block of several runs. */
typedef enum kvio_hash_span_kind {
    KVIO_HASH_SPAN_TRACE = 0,
    KVIO_HASH_SPAN_RUN,
    KVIO_HASH_SPAN_RUNS,
} kvio_hash_span_kind_t;

typedef struct kvio_hash_span {
    kvio_hash_span_kind_t kind;
    uint32_t count;               /* blocks (RUNS: 1) */
    uint64_t id;                  /* TRACE: the trace id; RUN: the content id */
    uint32_t first;               /* TRACE: the first index; RUN: the first offset */
    uint32_t length;              /* RUN: tokens per block */
    const kvio_hash_run_t *runs;  /* RUNS: the block's runs */
    size_t num_runs;
} kvio_hash_span_t;

/* A chain of block hashes, each the next one's parent: its spans' blocks
 * in order from parent ({0, 0}: none). */
typedef struct kvio_hash_chain {
    kvio_hash_t parent;
    const kvio_hash_span_t *spans;
    size_t num_spans;
    kvio_hash_t *hashes_p; /* as many hashes as the spans have blocks */
} kvio_hash_chain_t;

/* The hashes of several independent chains. Each hash waits for the one
 * before it in its chain; two chains are hashed side by side, so that
 * their waits overlap, a chain that ends giving way to the next. */
void kvio_hash_chains(const kvio_hash_chain_t *chains, size_t count);

/* Writes the canonical 16 bytes of a hash (the parent form above). */
void kvio_hash_to_bytes(kvio_hash_t hash, uint8_t bytes_p[16]);

/* Writes 32 lowercase hex digits and a NUL, as xxhsum -H2 prints them. */
void kvio_hash_format(kvio_hash_t hash, char text_p[33]);

static inline bool kvio_hash_equal(kvio_hash_t a, kvio_hash_t b)
{
    return a.low == b.low && a.high == b.high;
}

/* A request's cache salt from its text (a tenant's name): vLLM hashes the
 * salt into the first block's key, so requests with different salts share
 * no block even with equal prompts. Never 0; below 2^63 (a JSON integer). */
uint64_t kvio_cache_salt(const char *text, size_t length);

#endif
