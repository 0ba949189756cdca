/* The redis transport: the sender SETs the buffer in chunks under versioned
 * keys (PREFIX v<version>:c<chunk>), pipelined `inflight` at a time, then
 * PUBLISHes the update's meta on PREFIX updates and deletes the version that
 * fell out of `keep`. Receivers SUBSCRIBE before the first version, take the
 * newest announced version, and GET its chunks into their shadow slot. */
#include "xfer/xfer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/redis.h"

#define KEY_LENGTH 512

typedef struct redis_priv {
    kvio_redis_t *data;       /* SET / GET / PUBLISH / DEL */
    kvio_redis_t *subscriber; /* receivers */
    char channel[KEY_LENGTH];
    bool end_pending;
    kvio_xfer_meta_t end;
    uint64_t last_seen;
} redis_priv_t;

static void chunk_key(const kvio_xfer_t *xfer, uint64_t version, uint64_t chunk,
                      char *key_p)
{
    snprintf(key_p, KEY_LENGTH, "%sv%llu:c%llu", xfer->config->redis.prefix,
             (unsigned long long)version, (unsigned long long)chunk);
}

static kvio_status_t redis_preflight(const kvio_xfer_config_t *config, uint64_t bytes,
                                     char *error_p, size_t error_len)
{
    kvio_redis_t *redis = NULL;
    kvio_status_t status = kvio_redis_connect(config->redis.url, 2000000000LL, &redis, error_p,
                                              error_len);
    kvio_redis_close(redis);
    return status;
}

static kvio_status_t redis_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    redis_priv_t *priv = xfer->priv;
    const kvio_xfer_redis_config_t *config = &xfer->config->redis;
    int64_t timeout = kvio_rte_timeout_ns(xfer->rte);
    snprintf(priv->channel, sizeof(priv->channel), "%supdates", config->prefix);
    kvio_status_t status = kvio_redis_connect(config->url, timeout, &priv->data, error_p,
                                              error_len);
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        if ((xfer->send_buffer = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
            status = KVIO_ERR_NOMEM;
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
            if ((xfer->slots[slot] = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
                status = KVIO_ERR_NOMEM;
        if (status == KVIO_OK)
            status = kvio_redis_connect(config->url, timeout, &priv->subscriber, error_p,
                                        error_len);
        if (status == KVIO_OK) {
            status = kvio_redis_subscribe(priv->subscriber, priv->channel);
            if (status != KVIO_OK)
                snprintf(error_p, error_len, "%s", kvio_redis_error(priv->subscriber));
        }
    }
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "redis transport: cannot allocate %llu bytes",
                 (unsigned long long)xfer->bytes);
    snprintf(xfer->info, sizeof(xfer->info), "redis: %.200s, channel %.200s",
             priv->data ? kvio_redis_name(priv->data) : config->url, priv->channel);
    /* Every receiver subscribes before the sender publishes anything. */
    kvio_status_t barrier = kvio_rte_barrier(xfer->rte);
    if (status == KVIO_OK && barrier != KVIO_OK) {
        snprintf(error_p, error_len, "redis transport: set-up barrier: %s",
                 kvio_strerror(barrier));
        status = barrier;
    }
    return status;
}

static void redis_fini(kvio_xfer_t *xfer)
{
    redis_priv_t *priv = xfer->priv;
    kvio_redis_close(priv->data);
    kvio_redis_close(priv->subscriber);
    free(xfer->send_buffer);
    free(xfer->slots[0]);
    free(xfer->slots[1]);
}

static kvio_status_t redis_failed(kvio_xfer_t *xfer, kvio_status_t status)
{
    redis_priv_t *priv = xfer->priv;
    kvio_xfer_set_error(xfer, "%s", kvio_redis_error(priv->data));
    return status;
}

static kvio_status_t delete_version(kvio_xfer_t *xfer, uint64_t version)
{
    redis_priv_t *priv = xfer->priv;
    uint64_t chunk = xfer->config->chunk, count = (xfer->bytes + chunk - 1) / chunk;
    char key[KEY_LENGTH];
    const char *keys[1] = {key};
    for (uint64_t i = 0; i < count; i++) {
        chunk_key(xfer, version, i, key);
        kvio_status_t status = kvio_redis_del(priv->data, keys, 1);
        if (status != KVIO_OK)
            return redis_failed(xfer, status);
    }
    return KVIO_OK;
}

static kvio_status_t redis_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    redis_priv_t *priv = xfer->priv;
    uint64_t chunk = xfer->config->chunk;
    uint64_t count = (xfer->bytes + chunk - 1) / chunk;
    size_t batch = (size_t)xfer->config->inflight;
    char (*keys)[KEY_LENGTH] = malloc(batch * KEY_LENGTH);
    const char **key_list = malloc(batch * sizeof(*key_list));
    const void **values = malloc(batch * sizeof(*values));
    size_t *lengths = malloc(batch * sizeof(*lengths));
    kvio_status_t status = KVIO_ERR_NOMEM;
    if (keys == NULL || key_list == NULL || values == NULL || lengths == NULL)
        goto done;
    status = KVIO_OK;
    for (uint64_t first = 0; first < count && status == KVIO_OK; first += batch) {
        size_t n = 0;
        for (uint64_t i = first; i < count && n < batch; i++, n++) {
            if (kvio_xfer_fault_now(xfer)) {
                status = KVIO_ERR_INTERRUPTED; /* SETs done so far stay, unannounced */
                goto done;
            }
            chunk_key(xfer, meta->version, i, keys[n]);
            key_list[n] = keys[n];
            values[n] = (const char *)xfer->send_buffer + i * chunk;
            lengths[n] = (size_t)(xfer->bytes - i * chunk < chunk ? xfer->bytes - i * chunk
                                                                  : chunk);
        }
        status = kvio_redis_set_many(priv->data, key_list, values, lengths, n);
        if (status != KVIO_OK)
            status = redis_failed(xfer, status);
    }
    if (status == KVIO_OK && meta->version > (uint64_t)xfer->config->redis.keep)
        status = delete_version(xfer, meta->version - (uint64_t)xfer->config->redis.keep);
done:
    free(keys);
    free(key_list);
    free(values);
    free(lengths);
    return status;
}

static kvio_status_t redis_notify(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    redis_priv_t *priv = xfer->priv;
    kvio_status_t status = kvio_redis_publish(priv->data, priv->channel, meta, sizeof(*meta));
    return status == KVIO_OK ? KVIO_OK : redis_failed(xfer, status);
}

static kvio_status_t redis_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p)
{
    redis_priv_t *priv = xfer->priv;
    kvio_xfer_meta_t newest = {0}, message;
    bool found = false;
    /* Drain the channel; the newest version wins, the end comes after it. */
    for (;;) {
        size_t length = 0;
        kvio_status_t status = kvio_redis_next_message(priv->subscriber, &message,
                                                       sizeof(message), &length);
        if (status == KVIO_INPROGRESS)
            break;
        if (status != KVIO_OK) {
            kvio_xfer_set_error(xfer, "%s", kvio_redis_error(priv->subscriber));
            return status;
        }
        if (length != sizeof(message))
            continue;
        if (message.flags & KVIO_XFER_META_END) {
            priv->end = message;
            priv->end_pending = true;
        } else if (message.version > priv->last_seen &&
                   (!found || message.version > newest.version)) {
            newest = message;
            found = true;
        }
    }
    if (found) {
        priv->last_seen = newest.version;
        *meta_p = newest;
        return KVIO_OK;
    }
    if (priv->end_pending) {
        priv->end_pending = false;
        *meta_p = priv->end;
        return KVIO_OK;
    }
    return KVIO_INPROGRESS;
}

static kvio_status_t redis_fetch(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta, void *buffer,
                                 uint64_t offset, uint64_t length, uint64_t *moved_p)
{
    redis_priv_t *priv = xfer->priv;
    char key[KEY_LENGTH];
    chunk_key(xfer, meta->version, offset / xfer->config->chunk, key);
    size_t got = 0;
    kvio_status_t status = kvio_redis_get(priv->data, key, buffer, (size_t)length, &got);
    if (status == KVIO_ERR_NOT_FOUND) {
        kvio_xfer_set_error(xfer, "%s: version %llu was deleted before it was read "
                            "(raise train.transport.redis.keep)", kvio_redis_name(priv->data),
                            (unsigned long long)meta->version);
        return status;
    }
    if (status != KVIO_OK)
        return redis_failed(xfer, status);
    if (got != length) {
        kvio_xfer_set_error(xfer, "%s: %s has %zu bytes, expected %llu",
                            kvio_redis_name(priv->data), key, got, (unsigned long long)length);
        return KVIO_ERR_TRANSPORT;
    }
    *moved_p = got;
    return KVIO_OK;
}

const kvio_xfer_ops_t kvio_xfer_redis_ops = {
    .name = "redis",
    .caps = KVIO_XFER_CAP_SHARED_STORE,
    .priv_size = sizeof(redis_priv_t),
    .preflight = redis_preflight,
    .init = redis_init,
    .fini = redis_fini,
    .put = redis_put,
    .notify = redis_notify,
    .poll = redis_poll,
    .fetch = redis_fetch,
};
