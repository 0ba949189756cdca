/* Chained block hashes of a token sequence, the prefix keys that the block
 * pool and the radix index both look blocks up by (vLLM's hash_block_tokens
 * over full blocks). Pure functions over core/hash.c, below both users, so
 * neither has to call the other for them. */
#include "kvcache/kvcache_int.h"

#include "kvio/hash.h"

void kvio_kvcache_hash_blocks(const uint32_t *tokens, uint32_t block_size, const void *salt,
                              size_t salt_len, size_t first, size_t end, kvio_hash_t *hashes)
{
    for (size_t i = first; i < end; i++) {
        hashes[i] = kvio_hash_tokens(i == 0 ? NULL : &hashes[i - 1], tokens + i * block_size,
                                     block_size, i == 0 ? salt : NULL, i == 0 ? salt_len : 0);
    }
}

void kvio_kvcache_hash_tokens(const uint32_t *tokens, size_t num_tokens, uint32_t block_size,
                              const void *salt, size_t salt_len, kvio_hash_t *hashes_p)
{
    kvio_kvcache_hash_blocks(tokens, block_size, salt, salt_len, 0, num_tokens / block_size,
                             hashes_p);
}
