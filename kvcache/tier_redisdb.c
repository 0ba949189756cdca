/* The Redis tier, through core/'s client (built whatever hiredis is there:
 * without it the client refuses to connect with "redis support not built";
 * the file is named tier_redisdb.c, not tier_redis.c, because CMake leaves
 * *_redis.c out of such builds). Two keys per
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

typedef struct redis_options {
    char *url;
    char *key_prefix;
    int64_t timeout_ns;
} redis_options_t;

static const kvio_opt_t redis_options[] = {
    {.key = "url", .type = KVIO_OPT_STRING, .offset = offsetof(redis_options_t, url),
     .default_value = "redis://127.0.0.1:6379", .help = "redis://[:password@]host:port[/db]"},
    {.key = "key_prefix", .type = KVIO_OPT_STRING,
     .offset = offsetof(redis_options_t, key_prefix), .default_value = "\"kvio:kv:\"",
     .help = "prefix of every key (an emulate run adds its id and the rank)"},
    {.key = "timeout", .type = KVIO_OPT_DURATION, .offset = offsetof(redis_options_t, timeout_ns),
     .default_value = "2s", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1e6, .max = 600e9,
     .help = "bound on connecting and on every reply"},
    {.key = NULL},
};

static kvio_status_t redis_check(const void *options, const char *path, char *error_p,
                                 size_t error_len)
{
    const redis_options_t *redis = options;
    kvio_redis_url_t parsed;
    char error[400];
    if (kvio_redis_parse_url(redis->url, &parsed, error, sizeof(error)) != KVIO_OK) {
        snprintf(error_p, error_len, "%s.url: %s", path, error);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

/* Emulate, before any rank starts or any results directory is made: the
 * server answers (connect, AUTH, SELECT, PING within the timeout). */
static kvio_status_t redis_preflight(const void *options, uint64_t bytes, const char *path,
                                     char *error_p, size_t error_len)
{
    (void)bytes; /* the server's memory is its own (maxmemory) */
    const redis_options_t *redis = options;
    kvio_redis_t *connection = NULL;
    char error[512] = "";
    kvio_status_t status = kvio_redis_connect(redis->url, redis->timeout_ns, &connection, error,
                                              sizeof(error));
    kvio_redis_close(connection);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "%s: %s (is the Redis server running and reachable?)",
                 path, error);
    return status;
}

/* Simulate default: 1 GB/s + 200 us. One connection, a pipelined pair of
 * commands per block to a server across a datacenter network: Redis is
 * single-threaded and copies every value, about 1 GB/s; 200 us is a round
 * trip plus per-command work on large values. */
static void redis_model(const void *options, double *bandwidth_p, int64_t *latency_ns_p)
{
    (void)options;
    *bandwidth_p = 1e9;
    *latency_ns_p = 200000;
}

typedef struct redis_priv {
    kvio_redis_t *redis;       /* NULL while disconnected */
    char *url;                 /* owned copies */
    char *prefix;
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

/* Every block operation: connected (or the reason not), the block's keys made. */
static kvio_status_t begin_block(redis_priv_t *tier, kvio_hash_t hash, char *error_p,
                                 size_t error_len)
{
    kvio_status_t status = ensure_connected(tier, error_p, error_len);
    if (status == KVIO_OK)
        make_keys(tier, hash);
    return status;
}

static void free_priv(redis_priv_t *tier)
{
    free(tier->url);
    free(tier->prefix);
    free(tier->data_key);
    free(tier->meta_key);
    tier->url = tier->prefix = tier->data_key = tier->meta_key = NULL;
}

/* The keys' prefix: the configured one, with a run id PREFIX<id>:r<rank>:
 * so ranks and runs sharing a server never read each other's blocks. */
static char *make_prefix(const redis_options_t *options, const kvio_tier_config_t *config)
{
    if (config->run_id == NULL)
        return strdup(options->key_prefix);
    size_t length = strlen(options->key_prefix) + strlen(config->run_id) + 32;
    char *prefix = malloc(length);
    if (prefix != NULL)
        snprintf(prefix, length, "%s%s:r%u:", options->key_prefix, config->run_id,
                 config->rank);
    return prefix;
}

static kvio_status_t redis_init(void *priv, const kvio_tier_setup_t *setup, char *error_p,
                                size_t error_len)
{
    redis_priv_t *tier = priv;
    const redis_options_t *options = setup->options;
    tier->url = strdup(options->url);
    tier->prefix = make_prefix(options, setup->config);
    tier->timeout_ns = options->timeout_ns;
    tier->block_bytes = setup->block_bytes;
    tier->capacity = setup->capacity;
    if (tier->url == NULL || tier->prefix == NULL) {
        snprintf(error_p, error_len, "redis tier: out of memory");
        free_priv(tier);
        return KVIO_ERR_NOMEM;
    }
    tier->key_len = strlen(tier->prefix) + 32 + sizeof(":data");
    tier->data_key = malloc(tier->key_len);
    tier->meta_key = malloc(tier->key_len);
    if (tier->data_key == NULL || tier->meta_key == NULL) {
        snprintf(error_p, error_len, "redis tier: out of memory");
        free_priv(tier);
        return KVIO_ERR_NOMEM;
    }
    char error[400];
    kvio_status_t status = kvio_redis_connect(tier->url, tier->timeout_ns, &tier->redis, error,
                                              sizeof(error));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "redis tier: %s", error);
        free_priv(tier);
        return status;
    }
    snprintf(tier->name, sizeof(tier->name), "%s", kvio_redis_name(tier->redis));
    return KVIO_OK;
}

static void redis_fini(void *priv)
{
    redis_priv_t *tier = priv;
    kvio_redis_close(tier->redis);
    free_priv(tier);
}

static kvio_status_t redis_put(void *priv, uint32_t slot, kvio_hash_t hash, const void *data,
                               char *error_p, size_t error_len)
{
    redis_priv_t *tier = priv;
    kvio_status_t status = begin_block(tier, hash, error_p, error_len);
    if (status != KVIO_OK)
        return status;
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
    kvio_status_t status = begin_block(tier, hash, error_p, error_len);
    if (status != KVIO_OK)
        return status;
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
    kvio_status_t status = begin_block(tier, hash, error_p, error_len);
    if (status != KVIO_OK)
        return status;
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

const kvio_tier_ops_t kvio_tier_redis = {
    .plugin = {.name = "redis", .help = "two keys per block on a Redis server: data, then metadata",
               .options = redis_options, .options_size = sizeof(redis_options_t),
               .check = redis_check},
    .model = redis_model,
    .preflight = redis_preflight,
    .priv_size = sizeof(redis_priv_t),
    .init = redis_init,
    .fini = redis_fini,
    .put = redis_put,
    .get = redis_get,
    .remove = redis_remove,
    .describe = redis_describe,
    .report = redis_report,
};
