/* The redis transport: the sender SETs the buffer in chunks under versioned
 * keys (PREFIX v<version>:c<chunk>), pipelined `inflight` at a time, then
 * SETs the update's meta under PREFIX latest (the end's under PREFIX end)
 * and PUBLISHes it on PREFIX updates, and deletes the version that fell out
 * of `keep`. Receivers SUBSCRIBE before the first version, take the newest
 * announced version, and GET its chunks into their shadow slot. With
 * on_disconnect: reconnect (the Redis tier's approach: drop the broken
 * connection, reconnect later), a Redis that goes away is retried every
 * RECONNECT_INTERVAL_NS for up to ranks.timeout: the sender then
 * republishes the version whole (a restarted Redis is empty), a receiver
 * resubscribes and reads PREFIX end and PREFIX latest for what it missed (a
 * newer version comes before the end); after that it is an error naming the
 * URL. With fail, the first broken connection is that error. Built whatever
 * hiredis is there: core's client refuses without it ("redis support not
 * built"); hence this file's name's name, not *_redis.c, which CMake leaves
 * out of such builds. */
#include "xfer/xfer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/log.h"
#include "kvio/redis.h"

#define KEY_LENGTH 512
#define RECONNECT_INTERVAL_NS 200000000LL

typedef struct redis_priv {
    kvio_redis_t *data;       /* SET / GET / PUBLISH / DEL; NULL while away */
    kvio_redis_t *subscriber; /* receivers; NULL while away */
    char channel[KEY_LENGTH];
    char latest_key[KEY_LENGTH]; /* meta of the newest version */
    char end_key[KEY_LENGTH];    /* meta of the end; apart, so the end never hides a version */
    bool end_pending;
    kvio_xfer_meta_t end;
    bool catch_up_pending;    /* a version read from PREFIX latest after a reconnect */
    kvio_xfer_meta_t catch_up;
    uint64_t last_seen;
    uint64_t newest_put;      /* sender: the newest version it started to SET */
    int64_t away_since_ns;    /* when a connection broke (0: connected) */
    int64_t last_attempt_ns;
    uint64_t reconnects;
    char away_error[512];     /* what broke it */
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

static kvio_status_t subscribe(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    redis_priv_t *priv = xfer->priv;
    kvio_status_t status = kvio_redis_connect(xfer->config->redis.url,
                                              kvio_rte_timeout_ns(xfer->rte), &priv->subscriber,
                                              error_p, error_len);
    if (status == KVIO_OK) {
        status = kvio_redis_subscribe(priv->subscriber, priv->channel);
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "%s", kvio_redis_error(priv->subscriber));
            kvio_redis_close(priv->subscriber);
            priv->subscriber = NULL;
        }
    }
    return status;
}

static void redis_fini(kvio_xfer_t *xfer);

static kvio_status_t redis_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    redis_priv_t *priv = xfer->priv;
    const kvio_xfer_redis_config_t *config = &xfer->config->redis;
    int64_t timeout = kvio_rte_timeout_ns(xfer->rte);
    snprintf(priv->channel, sizeof(priv->channel), "%supdates", config->prefix);
    snprintf(priv->latest_key, sizeof(priv->latest_key), "%slatest", config->prefix);
    snprintf(priv->end_key, sizeof(priv->end_key), "%send", config->prefix);
    kvio_status_t status = kvio_redis_connect(config->url, timeout, &priv->data, error_p,
                                              error_len);
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        if ((xfer->send_buffer = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
            status = KVIO_ERR_NOMEM;
        else /* a previous run's versions are not this one's */
            status = kvio_redis_del(priv->data,
                                    (const char *const[]){priv->latest_key, priv->end_key}, 2);
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
            if ((xfer->slots[slot] = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
                status = KVIO_ERR_NOMEM;
        if (status == KVIO_OK)
            status = subscribe(xfer, error_p, error_len);
    }
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "redis transport: cannot allocate %llu bytes",
                 (unsigned long long)xfer->bytes);
    snprintf(xfer->info, sizeof(xfer->info), "redis: %.200s, channel %.200s",
             priv->data ? kvio_redis_name(priv->data) : config->url, priv->channel);
    /* Every receiver has subscribed before the sender publishes anything:
     * kvio_xfer_create's barrier follows every rank's init. */
    if (status != KVIO_OK)
        redis_fini(xfer); /* the framework frees only its own part of a failed set-up */
    return status;
}

static kvio_status_t delete_version(kvio_xfer_t *xfer, uint64_t version);

static void redis_fini(kvio_xfer_t *xfer)
{
    redis_priv_t *priv = xfer->priv;
    /* Torn down after every rank is done with the keys (kvio_xfer_detach, a
     * barrier, then destroy): the sender removes the versions it kept (and
     * one it was writing when stopped), latest and end. */
    if (xfer->role == KVIO_XFER_SENDER && priv->data != NULL && priv->newest_put > 0) {
        uint64_t keep = (uint64_t)xfer->config->redis.keep;
        uint64_t oldest = priv->newest_put > keep ? priv->newest_put - keep : 0;
        kvio_status_t status = KVIO_OK;
        for (uint64_t version = priv->newest_put; version > oldest && status == KVIO_OK;
             version--)
            status = delete_version(xfer, version);
        if (status == KVIO_OK && priv->data != NULL)
            status = kvio_redis_del(priv->data,
                                    (const char *const[]){priv->latest_key, priv->end_key}, 2);
        if (status != KVIO_OK)
            kvio_warn("redis transport: could not remove this run's keys (%s*)",
                      xfer->config->redis.prefix);
    }
    if (priv->reconnects > 0)
        kvio_info("redis transport: rank %d reconnected %llu time%s",
                  kvio_rte_index(xfer->rte), (unsigned long long)priv->reconnects,
                  priv->reconnects == 1 ? "" : "s");
    kvio_redis_close(priv->data);
    kvio_redis_close(priv->subscriber);
    free(xfer->send_buffer);
    free(xfer->slots[0]);
    free(xfer->slots[1]);
}

static bool reconnecting(const kvio_xfer_t *xfer)
{
    return xfer->config->redis.on_disconnect == KVIO_REDIS_RECONNECT;
}

/* A call on connection failed. A broken connection (closed, refused, timed
 * out) with on_disconnect: reconnect is dropped and KVIO_INPROGRESS returned:
 * the caller reconnects. Anything else is the transport's error. */
static kvio_status_t redis_failed(kvio_xfer_t *xfer, kvio_redis_t **connection,
                                  kvio_status_t status)
{
    redis_priv_t *priv = xfer->priv;
    if ((status == KVIO_ERR_CONNECTION || status == KVIO_ERR_TIMEOUT) && reconnecting(xfer)) {
        if (priv->away_since_ns == 0) {
            priv->away_since_ns = kvio_rte_time_ns(xfer->rte);
            snprintf(priv->away_error, sizeof(priv->away_error), "%s",
                     kvio_redis_error(*connection));
            kvio_warn("redis transport: rank %d: %s; reconnecting", kvio_rte_index(xfer->rte),
                      priv->away_error);
        }
        kvio_redis_close(*connection);
        *connection = NULL;
        return KVIO_INPROGRESS;
    }
    kvio_xfer_set_error(xfer, "%s", kvio_redis_error(*connection));
    return status;
}

/* GETs the meta under key: *found_p false when there is none (or not a
 * meta); an error of the data connection as redis_failed makes it. */
static kvio_status_t read_meta(kvio_xfer_t *xfer, const char *key, kvio_xfer_meta_t *meta_p,
                               bool *found_p)
{
    redis_priv_t *priv = xfer->priv;
    size_t length = 0;
    *found_p = false;
    kvio_status_t status = kvio_redis_get(priv->data, key, meta_p, sizeof(*meta_p), &length);
    if (status == KVIO_ERR_NOT_FOUND)
        return KVIO_OK;
    if (status != KVIO_OK)
        return redis_failed(xfer, &priv->data, status);
    *found_p = length == sizeof(*meta_p) && meta_p->magic == KVIO_XFER_MAGIC;
    return KVIO_OK;
}

/* One attempt to bring back every connection this side needs (at most one
 * per RECONNECT_INTERVAL_NS): KVIO_OK when connected, KVIO_INPROGRESS while
 * Redis is still away, an error naming the URL after ranks.timeout. */
static kvio_status_t reconnect_once(kvio_xfer_t *xfer)
{
    redis_priv_t *priv = xfer->priv;
    bool receiver = xfer->role == KVIO_XFER_RECEIVER;
    if (priv->data != NULL && (!receiver || priv->subscriber != NULL))
        return KVIO_OK;
    int64_t now = kvio_rte_time_ns(xfer->rte);
    if (priv->away_since_ns == 0)
        priv->away_since_ns = now;
    if (priv->last_attempt_ns != 0 && now - priv->last_attempt_ns < RECONNECT_INTERVAL_NS)
        return KVIO_INPROGRESS;
    priv->last_attempt_ns = now;
    char error[512] = "";
    kvio_status_t status = KVIO_OK;
    if (priv->data == NULL)
        status = kvio_redis_connect(xfer->config->redis.url, kvio_rte_timeout_ns(xfer->rte),
                                    &priv->data, error, sizeof(error));
    if (status == KVIO_OK && receiver && priv->subscriber == NULL)
        status = subscribe(xfer, error, sizeof(error));
    if (status != KVIO_OK) {
        if (now - priv->away_since_ns < kvio_rte_timeout_ns(xfer->rte))
            return KVIO_INPROGRESS;
        kvio_xfer_set_error(xfer, "%s (then %s: gave up reconnecting after %.1f s, "
                            "ranks.timeout)", priv->away_error, error,
                            (double)(now - priv->away_since_ns) / 1e9);
        return KVIO_ERR_CONNECTION;
    }
    priv->reconnects++;
    priv->away_since_ns = 0;
    kvio_warn("redis transport: rank %d reconnected to %s", kvio_rte_index(xfer->rte),
              kvio_redis_name(priv->data));
    if (!receiver)
        return KVIO_OK;
    /* What was published while this receiver was away: the end and the
     * newest version (poll hands it out before the end; if its data is gone
     * by then, the fetch says so and the version is skipped). The end is
     * read first: the sender SETs the last version's meta before the end's,
     * so an end found here is never ahead of the version read after it. */
    kvio_xfer_meta_t end, meta;
    bool end_found = false, found = false;
    status = read_meta(xfer, priv->end_key, &end, &end_found);
    if (status == KVIO_OK)
        status = read_meta(xfer, priv->latest_key, &meta, &found);
    if (status != KVIO_OK)
        return status;
    if (found && !(meta.flags & KVIO_XFER_META_END) && meta.version > priv->last_seen) {
        priv->catch_up = meta;
        priv->catch_up_pending = true;
    }
    if (end_found && (end.flags & KVIO_XFER_META_END)) {
        priv->end = end;
        priv->end_pending = true;
    }
    return KVIO_OK;
}

/* The sender waits for Redis (bounded by ranks.timeout). */
static kvio_status_t reconnect_wait(kvio_xfer_t *xfer)
{
    for (;;) {
        kvio_status_t status = reconnect_once(xfer);
        if (status != KVIO_INPROGRESS)
            return status;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000000};
        nanosleep(&pause, NULL);
    }
}

static kvio_status_t delete_version(kvio_xfer_t *xfer, uint64_t version)
{
    redis_priv_t *priv = xfer->priv;
    uint64_t chunk = xfer->config->chunk, count = (xfer->bytes + chunk - 1) / chunk;
    enum { BATCH = 64 }; /* keys per pipelined round trip */
    char keys[BATCH][KEY_LENGTH];
    const char *key_list[BATCH];
    for (uint64_t first = 0; first < count; first += BATCH) {
        size_t n = 0;
        for (uint64_t i = first; i < count && n < BATCH; i++, n++) {
            chunk_key(xfer, version, i, keys[n]);
            key_list[n] = keys[n];
        }
        kvio_status_t status = kvio_redis_del(priv->data, key_list, n);
        if (status != KVIO_OK)
            return redis_failed(xfer, &priv->data, status);
    }
    return KVIO_OK;
}

/* SETs every chunk of the version once; KVIO_INPROGRESS when the connection
 * broke (reconnect and start over). */
static kvio_status_t put_once(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta)
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
    if (meta->version > priv->newest_put)
        priv->newest_put = meta->version;
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
            status = redis_failed(xfer, &priv->data, status);
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

static kvio_status_t redis_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    kvio_status_t status;
    while ((status = put_once(xfer, meta)) == KVIO_INPROGRESS)
        if ((status = reconnect_wait(xfer)) != KVIO_OK)
            break;
    return status;
}

/* PREFIX latest, or PREFIX end for the end (for receivers that were
 * away), then the PUBLISH. */
static kvio_status_t announce_once(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta)
{
    redis_priv_t *priv = xfer->priv;
    const void *values[1] = {meta};
    size_t lengths[1] = {sizeof(*meta)};
    const char *key = (meta->flags & KVIO_XFER_META_END) ? priv->end_key : priv->latest_key;
    kvio_status_t status = kvio_redis_set_many(priv->data, (const char *const[]){key}, values,
                                               lengths, 1);
    if (status == KVIO_OK)
        status = kvio_redis_publish(priv->data, priv->channel, meta, sizeof(*meta));
    return status == KVIO_OK ? KVIO_OK : redis_failed(xfer, &priv->data, status);
}

static kvio_status_t redis_notify(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    kvio_status_t status;
    while ((status = announce_once(xfer, meta)) == KVIO_INPROGRESS) {
        /* Redis went away after the data went in: a restarted one is empty,
         * so the version goes in again before it is announced. */
        status = reconnect_wait(xfer);
        if (status == KVIO_OK && !(meta->flags & KVIO_XFER_META_END))
            status = redis_put(xfer, target, meta);
        if (status != KVIO_OK)
            break;
    }
    return status;
}

static kvio_status_t redis_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p)
{
    redis_priv_t *priv = xfer->priv;
    kvio_xfer_meta_t newest = {0}, message;
    bool found = false;
    if (priv->subscriber == NULL || priv->data == NULL) {
        kvio_status_t status = reconnect_once(xfer);
        if (status != KVIO_OK)
            return status;
    }
    if (priv->catch_up_pending) {
        priv->catch_up_pending = false;
        newest = priv->catch_up;
        found = true;
    }
    /* Drain the channel; the newest version wins, the end comes after it. */
    for (;;) {
        size_t length = 0;
        kvio_status_t status = kvio_redis_next_message(priv->subscriber, &message,
                                                       sizeof(message), &length);
        if (status == KVIO_INPROGRESS)
            break;
        if (status != KVIO_OK) {
            status = redis_failed(xfer, &priv->subscriber, status);
            if (status != KVIO_INPROGRESS || !found)
                return status;
            break; /* away now; what came before still counts */
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

static kvio_status_t redis_fetch(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta, void *buffer,
                                uint64_t offset, uint64_t length, uint64_t *moved_p)
{
    redis_priv_t *priv = xfer->priv;
    *moved_p = 0;
    if (priv->data == NULL) {
        /* Away: nothing moves this step; the update loop tries again. */
        kvio_status_t status = reconnect_once(xfer);
        return status == KVIO_INPROGRESS ? KVIO_OK : status;
    }
    char key[KEY_LENGTH];
    chunk_key(xfer, meta->version, offset / xfer->config->chunk, key);
    size_t got = 0;
    kvio_status_t status = kvio_redis_get(priv->data, key, buffer, (size_t)length, &got);
    if (status == KVIO_ERR_NOT_FOUND) {
        kvio_xfer_set_error(xfer, "%s: version %llu is gone before it was read (deleted: "
                            "raise train.transport.redis.keep; or lost when Redis restarted)",
                            kvio_redis_name(priv->data), (unsigned long long)meta->version);
        return status;
    }
    if (status != KVIO_OK) {
        status = redis_failed(xfer, &priv->data, status);
        return status == KVIO_INPROGRESS ? KVIO_OK : status;
    }
    if (got != length) {
        kvio_xfer_set_error(xfer, "%s: %s has %zu bytes, expected %llu",
                            kvio_redis_name(priv->data), key, got, (unsigned long long)length);
        return KVIO_ERR_TRANSPORT;
    }
    *moved_p = got;
    return KVIO_OK;
}

/* Simulate default 200 us + 1 GB/s: a round trip to a server across a
 * datacenter network, and a single-threaded Redis copying every value. */
const kvio_xfer_ops_t kvio_xfer_redis_ops = {
    .plugin = {.name = "redis", .help = "SETs of the version's chunks, then a PUBLISH of its "
               "notice", .options = kvio_no_options},
    .caps = KVIO_XFER_CAP_SHARED_STORE,
    .model = {.latency_ns = 200000, .bandwidth_gbps = 1.0},
    .priv_size = sizeof(redis_priv_t),
    .preflight = redis_preflight,
    .init = redis_init,
    .fini = redis_fini,
    .put = redis_put,
    .notify = redis_notify,
    .poll = redis_poll,
    .fetch = redis_fetch,
};
