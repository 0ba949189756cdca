/* The Redis tier (built with hiredis, through core/'s client): two keys per
 * block, PREFIX<hash>:data and then PREFIX<hash>:meta ("kvio-kv 1 <hash>
 * <bytes> <xxh3-64>"), SET in that order in one pipeline, so a reader never
 * sees metadata whose data was not written. A get reads the metadata, then
 * the data, and checks bytes and checksum; metadata without data (Redis
 * evicted or someone deleted the data) is a miss and the metadata is deleted.
 * A connection that fails is dropped and the operation returns the error; the
 * next one reconnects (at most once a second), every wait bounded by the
 * timeout, so a Redis that goes away costs errors, never a hang. */
#include "kvcache/tier_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/redis.h"

#define META_MAX 128
#define RECONNECT_INTERVAL_NS 1000000000ull

typedef struct redis_priv {
    kvio_redis_t *redis;       /* NULL while disconnected */
    const char *url;           /* borrowed from the framework's config */
    const char *prefix;
    char name[300];            /* the URL without its password */
    int64_t timeout_ns;
    uint64_t block_bytes;
    uint32_t capacity;
    uint64_t last_connect_ns;  /* the last reconnect attempt */
    char last_connect_error[512];
    uint64_t reconnects;
    char *data_key, *meta_key; /* buffers for the current block's keys */
    size_t key_len;
} redis_priv_t;

static void make_keys(redis_priv_t *tier, kvio_hash_t hash)
{
    char hex[33];
    kvio_hash_format(hash, hex);
    snprintf(tier->data_key, tier->key_len, "%s%s:data", tier->prefix, hex);
    snprintf(tier->meta_key, tier->key_len, "%s%s:meta", tier->prefix, hex);
}

/* A connection or timeout error leaves hiredis's context unusable: drop it. */
static kvio_status_t redis_failed(redis_priv_t *tier, kvio_status_t status, char *error_p,
                                  size_t error_len)
{
    snprintf(error_p, error_len, "%s", kvio_redis_error(tier->redis));
    if (status == KVIO_ERR_CONNECTION || status == KVIO_ERR_TIMEOUT) {
        kvio_redis_close(tier->redis);
        tier->redis = NULL;
    }
    return status;
}

static kvio_status_t ensure_connected(redis_priv_t *tier, char *error_p, size_t error_len)
{
    if (tier->redis != NULL)
        return KVIO_OK;
    uint64_t now = kvio_time_ns();
    if (tier->last_connect_ns != 0 && now - tier->last_connect_ns < RECONNECT_INTERVAL_NS) {
        snprintf(error_p, error_len, "%s", tier->last_connect_error);
        return KVIO_ERR_CONNECTION;
    }
    tier->last_connect_ns = now;
    char error[400];
    kvio_status_t status = kvio_redis_connect(tier->url, tier->timeout_ns, &tier->redis, error,
                                              sizeof(error));
    if (status != KVIO_OK) {
        tier->redis = NULL;
        snprintf(tier->last_connect_error, sizeof(tier->last_connect_error),
                 "%s (reconnecting)", error);
        snprintf(error_p, error_len, "%s", tier->last_connect_error);
        return KVIO_ERR_CONNECTION;
    }
    tier->reconnects++;
    kvio_info("redis tier: reconnected to %s", tier->name);
    return KVIO_OK;
}

static kvio_status_t redis_init(void *priv, const kvio_tier_config_t *config,
                                uint64_t block_bytes, uint32_t capacity, char *error_p,
                                size_t error_len)
{
    redis_priv_t *tier = priv;
    tier->url = config->url;
    tier->prefix = config->key_prefix;
    tier->timeout_ns = config->timeout_ns;
    tier->block_bytes = block_bytes;
    tier->capacity = capacity;
    tier->key_len = strlen(tier->prefix) + 32 + sizeof(":data");
    tier->data_key = malloc(tier->key_len);
    tier->meta_key = malloc(tier->key_len);
    if (tier->data_key == NULL || tier->meta_key == NULL) {
        snprintf(error_p, error_len, "redis tier: out of memory");
        goto fail;
    }
    char error[400];
    kvio_status_t status = kvio_redis_connect(tier->url, tier->timeout_ns, &tier->redis, error,
                                              sizeof(error));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "redis tier: %s", error);
        free(tier->data_key);
        free(tier->meta_key);
        return status;
    }
    snprintf(tier->name, sizeof(tier->name), "%s", kvio_redis_name(tier->redis));
    return KVIO_OK;
fail:
    free(tier->data_key);
    free(tier->meta_key);
    return KVIO_ERR_NOMEM;
}

static void redis_fini(void *priv)
{
    redis_priv_t *tier = priv;
    kvio_redis_close(tier->redis);
    free(tier->data_key);
    free(tier->meta_key);
}

static kvio_status_t redis_put(void *priv, uint32_t slot, kvio_hash_t hash, const void *data,
                               char *error_p, size_t error_len)
{
    redis_priv_t *tier = priv;
    kvio_status_t status = ensure_connected(tier, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    make_keys(tier, hash);
    char hex[33], meta[META_MAX];
    kvio_hash_format(hash, hex);
    int meta_len = snprintf(meta, sizeof(meta), "kvio-kv 1 %s %" PRIu64 " %016" PRIx64, hex,
                            tier->block_bytes, (uint64_t)XXH3_64bits(data, tier->block_bytes));
    const char *keys[2] = {tier->data_key, tier->meta_key};
    const void *values[2] = {data, meta};
    size_t lengths[2] = {tier->block_bytes, (size_t)meta_len};
    status = kvio_redis_set_many(tier->redis, keys, values, lengths, 2);
    if (status != KVIO_OK) {
        status = redis_failed(tier, status, error_p, error_len);
        if (tier->redis != NULL) /* e.g. OOM on the data: no metadata may remain */
            kvio_redis_del(tier->redis, (const char *const[]){tier->meta_key}, 1);
    }
    return status;
}

static kvio_status_t redis_get(void *priv, uint32_t slot, kvio_hash_t hash, void *data,
                               char *error_p, size_t error_len)
{
    redis_priv_t *tier = priv;
    kvio_status_t status = ensure_connected(tier, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    make_keys(tier, hash);
    char meta[META_MAX + 1];
    size_t length = 0;
    status = kvio_redis_get(tier->redis, tier->meta_key, meta, META_MAX, &length);
    if (status == KVIO_ERR_NOT_FOUND) {
        snprintf(error_p, error_len, "%s: %s: no metadata", tier->name, tier->meta_key);
        return KVIO_ERR_NOT_FOUND;
    }
    if (status != KVIO_OK)
        return redis_failed(tier, status, error_p, error_len);
    meta[length] = '\0';
    char hex[33], stored_hex[33];
    unsigned long long stored_bytes = 0, stored_checksum = 0;
    kvio_hash_format(hash, hex);
    if (sscanf(meta, "kvio-kv 1 %32s %llu %llx", stored_hex, &stored_bytes, &stored_checksum) != 3 ||
        strcmp(stored_hex, hex) != 0 || stored_bytes != tier->block_bytes) {
        snprintf(error_p, error_len,
                 "%s: %s: metadata '%s' does not describe a block of %llu bytes with this "
                 "hash (another writer under the same key prefix?)", tier->name, tier->meta_key,
                 meta, (unsigned long long)tier->block_bytes);
        return KVIO_ERR_PARSE;
    }
    status = kvio_redis_get(tier->redis, tier->data_key, data, tier->block_bytes, &length);
    if (status == KVIO_ERR_NOT_FOUND) {
        /* Metadata without data: a miss; the metadata goes too. */
        kvio_status_t deleted =
            kvio_redis_del(tier->redis, (const char *const[]){tier->meta_key}, 1);
        if (deleted != KVIO_OK)
            return redis_failed(tier, deleted, error_p, error_len);
        snprintf(error_p, error_len, "%s: %s: data gone (evicted?); metadata deleted",
                 tier->name, tier->data_key);
        return KVIO_ERR_NOT_FOUND;
    }
    if (status != KVIO_OK)
        return redis_failed(tier, status, error_p, error_len);
    if (length != tier->block_bytes) {
        snprintf(error_p, error_len, "%s: %s: %zu bytes, expected %llu", tier->name,
                 tier->data_key, length, (unsigned long long)tier->block_bytes);
        return KVIO_ERR_IO;
    }
    uint64_t checksum = XXH3_64bits(data, tier->block_bytes);
    if (checksum != stored_checksum) {
        snprintf(error_p, error_len, "%s: %s: checksum %016" PRIx64 ", metadata says %016llx",
                 tier->name, tier->data_key, checksum, stored_checksum);
        return KVIO_ERR_CHECKSUM;
    }
    return KVIO_OK;
}

static kvio_status_t redis_remove(void *priv, uint32_t slot, kvio_hash_t hash, char *error_p,
                                  size_t error_len)
{
    redis_priv_t *tier = priv;
    kvio_status_t status = ensure_connected(tier, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    make_keys(tier, hash);
    /* Metadata first, so no reader finds metadata without data. */
    const char *keys[2] = {tier->meta_key, tier->data_key};
    status = kvio_redis_del(tier->redis, keys, 2);
    if (status != KVIO_OK)
        return redis_failed(tier, status, error_p, error_len);
    return KVIO_OK;
}

static void redis_describe(const void *priv, char *text_p, size_t text_len)
{
    const redis_priv_t *tier = priv;
    snprintf(text_p, text_len, "redis: %u blocks of %llu bytes at %s, keys %s<hash>:data|meta",
             tier->capacity, (unsigned long long)tier->block_bytes, tier->name, tier->prefix);
}

static void redis_report(const void *priv, json_t *object)
{
    const redis_priv_t *tier = priv;
    json_object_set_new(object, "url", json_string(tier->name));
    json_object_set_new(object, "key_prefix", json_string(tier->prefix));
    json_object_set_new(object, "reconnects", json_integer((json_int_t)tier->reconnects));
}

const kvio_tier_ops_t kvio_tier_redis_ops = {
    .name = "redis",
    .description = "two keys per block on a Redis server: data, then metadata",
    .priv_size = sizeof(redis_priv_t),
    .init = redis_init,
    .fini = redis_fini,
    .put = redis_put,
    .get = redis_get,
    .remove = redis_remove,
    .describe = redis_describe,
    .report = redis_report,
};
