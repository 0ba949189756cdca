/* The Redis tier, through core/'s client (built whatever hiredis is there:
 * without it the client refuses to connect with "redis support not built";
 * the file is named tier_redisdb.c, not tier_redis.c, because CMake leaves
 * *_redis.c out of such builds). Two keys per
 * block, PREFIX<hash>:data and then PREFIX<hash>:meta ("kvio-kv 2 <hash>
 * <bytes>"), SET in that order in one pipeline, so a reader never sees
 * metadata whose data was not written. A get reads the metadata and the
 * data in one pipeline and checks the metadata and the length (the tier
 * framework checks every block's checksum); metadata without data (Redis
 * evicted or someone deleted the data) is a miss and the metadata is
 * deleted. A batch of blocks goes in one pipeline: every command of it
 * in flight at once.
 * A connection that fails is dropped and the operation returns the error; the
 * next one reconnects (at most once a second), every wait bounded by the
 * timeout, so a Redis that goes away costs errors, never a hang. */
#include "kvcache/tier_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* The hint for what failed: the connection, or the server's answer
     * (WRONGPASS was asked whether the server was running). */
    const char *hint = status == KVIO_ERR_CONNECTION || status == KVIO_ERR_TIMEOUT
                           ? " (is the Redis server running and reachable?)"
                       : strstr(error, "WRONGPASS") != NULL || strstr(error, "NOAUTH") != NULL ||
                               strstr(error, "AUTH:") != NULL
                           ? " (the server refused the password: check the URL's)"
                           : "";
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "%s: %s%s", path, error, hint);
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
    /* A batch's keys (data then meta per block), metadata texts and their
     * pointers, grown as batches need. */
    char *batch_keys;
    char (*batch_meta)[META_MAX + 1];
    const char **key_list;
    const void **value_list;
    void **buffer_list;
    size_t *size_list, *length_list;
    kvio_status_t *status_list;
    size_t batch_capacity;
    size_t key_len;
} redis_priv_t;

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

static void free_priv(redis_priv_t *tier)
{
    free(tier->batch_keys);
    free(tier->batch_meta);
    free(tier->key_list);
    free(tier->value_list);
    free(tier->buffer_list);
    free(tier->size_list);
    free(tier->length_list);
    free(tier->status_list);
    tier->batch_capacity = 0;
    free(tier->url);
    free(tier->prefix);
    tier->url = tier->prefix = NULL;
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

/* Room for a batch of count blocks (two keys each). */
static kvio_status_t batch_room(redis_priv_t *tier, size_t count)
{
    if (count <= tier->batch_capacity)
        return KVIO_OK;
    size_t keys = 2 * count;
    char *batch_keys = realloc(tier->batch_keys, keys * tier->key_len);
    if (batch_keys != NULL)
        tier->batch_keys = batch_keys;
    char(*batch_meta)[META_MAX + 1] = realloc(tier->batch_meta, count * sizeof(*batch_meta));
    if (batch_meta != NULL)
        tier->batch_meta = batch_meta;
    void *lists[6] = {realloc(tier->key_list, keys * sizeof(char *)),
                      realloc(tier->value_list, keys * sizeof(void *)),
                      realloc(tier->buffer_list, keys * sizeof(void *)),
                      realloc(tier->size_list, keys * sizeof(size_t)),
                      realloc(tier->length_list, keys * sizeof(size_t)),
                      realloc(tier->status_list, keys * sizeof(kvio_status_t))};
    if (lists[0] != NULL)
        tier->key_list = lists[0];
    if (lists[1] != NULL)
        tier->value_list = lists[1];
    if (lists[2] != NULL)
        tier->buffer_list = lists[2];
    if (lists[3] != NULL)
        tier->size_list = lists[3];
    if (lists[4] != NULL)
        tier->length_list = lists[4];
    if (lists[5] != NULL)
        tier->status_list = lists[5];
    for (size_t i = 0; i < 6; i++)
        if (lists[i] == NULL)
            return KVIO_ERR_NOMEM;
    if (batch_keys == NULL || batch_meta == NULL)
        return KVIO_ERR_NOMEM;
    tier->batch_capacity = count;
    return KVIO_OK;
}

/* Block i's keys in the batch: data at 2i, metadata at 2i + 1. */
static void batch_keys(redis_priv_t *tier, const kvio_hash_t *hashes, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        char hex[33];
        kvio_hash_format(hashes[i], hex);
        char *data_key = tier->batch_keys + 2 * i * tier->key_len;
        char *meta_key = data_key + tier->key_len;
        snprintf(data_key, tier->key_len, "%s%s:data", tier->prefix, hex);
        snprintf(meta_key, tier->key_len, "%s%s:meta", tier->prefix, hex);
        tier->key_list[2 * i] = data_key;
        tier->key_list[2 * i + 1] = meta_key;
    }
}

/* Connected, with room and keys for the batch; otherwise every block gets
 * the failure. */
static kvio_status_t batch_begin(redis_priv_t *tier, const kvio_hash_t *hashes, size_t count,
                                 kvio_status_t *statuses_p, char *error_p, size_t error_len)
{
    kvio_status_t status = ensure_connected(tier, error_p, error_len);
    if (status == KVIO_OK && batch_room(tier, count) != KVIO_OK) {
        snprintf(error_p, error_len, "redis tier: out of memory for a batch of %zu", count);
        status = KVIO_ERR_NOMEM;
    }
    if (status == KVIO_OK)
        batch_keys(tier, hashes, count);
    for (size_t i = 0; status != KVIO_OK && i < count; i++)
        statuses_p[i] = status;
    return status;
}

/* Every block of the batch took the batch's time: their commands were in
 * flight together. */
static void batch_latencies(int64_t *latencies_ns_p, size_t count, uint64_t start_ns)
{
    int64_t took_ns = (int64_t)(kvio_time_ns() - start_ns);
    for (size_t i = 0; i < count; i++)
        latencies_ns_p[i] = took_ns;
}

static void redis_put_batch(void *priv, const uint32_t *slots, const kvio_hash_t *hashes,
                            const void *const *data, size_t count, kvio_status_t *statuses_p,
                            int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    (void)slots;
    redis_priv_t *tier = priv;
    uint64_t start_ns = kvio_time_ns();
    if (batch_begin(tier, hashes, count, statuses_p, error_p, error_len) != KVIO_OK) {
        batch_latencies(latencies_ns_p, count, start_ns);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        char hex[33];
        kvio_hash_format(hashes[i], hex);
        int meta_len = snprintf(tier->batch_meta[i], META_MAX + 1, "kvio-kv 2 %s %" PRIu64, hex,
                                tier->block_bytes);
        tier->value_list[2 * i] = data[i];
        tier->size_list[2 * i] = tier->block_bytes;
        tier->value_list[2 * i + 1] = tier->batch_meta[i];
        tier->size_list[2 * i + 1] = (size_t)meta_len;
    }
    kvio_status_t status = kvio_redis_set_many(tier->redis, tier->key_list, tier->value_list,
                                               tier->size_list, 2 * count);
    if (status != KVIO_OK) {
        status = redis_failed(tier, status, error_p, error_len);
        /* e.g. OOM on some data: no metadata may remain without its data */
        for (size_t i = 0; tier->redis != NULL && i < count; i++)
            kvio_redis_del(tier->redis, &tier->key_list[2 * i + 1], 1);
    }
    for (size_t i = 0; i < count; i++)
        statuses_p[i] = status;
    batch_latencies(latencies_ns_p, count, start_ns);
}

/* Block i of a batch read back: its metadata must describe it, its data be
 * whole. */
static kvio_status_t check_block(redis_priv_t *tier, size_t i, kvio_hash_t hash, char *error_p,
                                 size_t error_len)
{
    const char *data_key = tier->key_list[2 * i], *meta_key = tier->key_list[2 * i + 1];
    kvio_status_t meta_status = tier->status_list[2 * i + 1];
    kvio_status_t data_status = tier->status_list[2 * i];
    if (meta_status == KVIO_ERR_NOT_FOUND) {
        snprintf(error_p, error_len, "%s: %s: no metadata", tier->name, meta_key);
        return KVIO_ERR_NOT_FOUND;
    }
    if (meta_status != KVIO_OK) {
        snprintf(error_p, error_len, "%s", kvio_redis_error(tier->redis));
        return meta_status;
    }
    char *meta = tier->batch_meta[i];
    meta[tier->length_list[2 * i + 1]] = '\0';
    char hex[33], stored_hex[33];
    unsigned long long stored_bytes = 0;
    kvio_hash_format(hash, hex);
    if (sscanf(meta, "kvio-kv 2 %32s %llu", stored_hex, &stored_bytes) != 2 ||
        strcmp(stored_hex, hex) != 0 || stored_bytes != tier->block_bytes) {
        snprintf(error_p, error_len,
                 "%s: %s: metadata '%s' does not describe a block of %llu bytes with this "
                 "hash (another writer under the same key prefix?)", tier->name, meta_key, meta,
                 (unsigned long long)tier->block_bytes);
        return KVIO_ERR_PARSE;
    }
    if (data_status == KVIO_ERR_NOT_FOUND) {
        /* Metadata without data: a miss; the metadata goes too. */
        kvio_status_t deleted = kvio_redis_del(tier->redis, &meta_key, 1);
        if (deleted != KVIO_OK)
            return redis_failed(tier, deleted, error_p, error_len);
        snprintf(error_p, error_len, "%s: %s: data gone (evicted?); metadata deleted",
                 tier->name, data_key);
        return KVIO_ERR_NOT_FOUND;
    }
    if (data_status != KVIO_OK) {
        snprintf(error_p, error_len, "%s", kvio_redis_error(tier->redis));
        return data_status == KVIO_ERR_NO_SPACE ? KVIO_ERR_IO : data_status;
    }
    if (tier->length_list[2 * i] != tier->block_bytes) {
        snprintf(error_p, error_len, "%s: %s: %zu bytes, expected %llu", tier->name, data_key,
                 tier->length_list[2 * i], (unsigned long long)tier->block_bytes);
        return KVIO_ERR_IO;
    }
    return KVIO_OK;
}

static void redis_get_batch(void *priv, const uint32_t *slots, const kvio_hash_t *hashes,
                            void *const *data, size_t count, kvio_status_t *statuses_p,
                            int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    (void)slots;
    redis_priv_t *tier = priv;
    uint64_t start_ns = kvio_time_ns();
    if (batch_begin(tier, hashes, count, statuses_p, error_p, error_len) != KVIO_OK) {
        batch_latencies(latencies_ns_p, count, start_ns);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        tier->buffer_list[2 * i] = data[i];
        tier->size_list[2 * i] = tier->block_bytes;
        tier->buffer_list[2 * i + 1] = tier->batch_meta[i];
        tier->size_list[2 * i + 1] = META_MAX;
    }
    kvio_status_t status =
        kvio_redis_get_many(tier->redis, tier->key_list, tier->buffer_list, tier->size_list,
                            tier->length_list, tier->status_list, 2 * count);
    if (status != KVIO_OK)
        status = redis_failed(tier, status, error_p, error_len);
    for (size_t i = 0; i < count; i++) {
        char text[512] = "";
        statuses_p[i] = status != KVIO_OK ? status
                                          : check_block(tier, i, hashes[i], text, sizeof(text));
        if (statuses_p[i] != KVIO_OK && status == KVIO_OK && error_p[0] == '\0')
            snprintf(error_p, error_len, "%s", text);
    }
    batch_latencies(latencies_ns_p, count, start_ns);
}

static kvio_status_t redis_remove(void *priv, uint32_t slot, kvio_hash_t hash, char *error_p,
                                  size_t error_len)
{
    (void)slot;
    redis_priv_t *tier = priv;
    kvio_status_t status;
    if (batch_begin(tier, &hash, 1, &status, error_p, error_len) != KVIO_OK)
        return status;
    /* Metadata first, so no reader finds metadata without data. */
    const char *keys[2] = {tier->key_list[1], tier->key_list[0]};
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
    .plugin = {.name = "redis",
               .help = "two keys per block on a Redis server, data then metadata, a batch in "
                       "one pipeline",
               .options = redis_options, .options_size = sizeof(redis_options_t),
               .check = redis_check},
    .model = redis_model,
    .preflight = redis_preflight,
    .priv_size = sizeof(redis_priv_t),
    .init = redis_init,
    .fini = redis_fini,
    .put_batch = redis_put_batch,
    .get_batch = redis_get_batch,
    .remove = redis_remove,
    .describe = redis_describe,
    .report = redis_report,
};
