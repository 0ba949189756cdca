/* Redis client: the one home of hiredis in kvio, used by the Redis transport
 * and the Redis KV tier. It parses redis://[:password@]host:port[/db],
 * connects with timeouts, authenticates and selects the database, and turns
 * hiredis errors into kvio status codes with text such as
 * "redis://127.0.0.1:6390: connection refused" (never with the password). */
#ifndef KVIO_REDIS_H
#define KVIO_REDIS_H

#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kvio_redis kvio_redis_t;

typedef struct kvio_redis_url {
    char host[256];
    int port;
    char password[256];
    int db;
} kvio_redis_url_t;

/* url as messages and results may show it: a password in it
 * (scheme://[user]:password@host, scheme://password@host, ?password=...)
 * becomes ***. */
void kvio_url_redact(const char *url, char *out_p, size_t out_len);

/* Parses a URL (the password after the last '@'... before the host, %XX
 * decoded); KVIO_ERR_CONFIG with the reason in error_p when malformed,
 * the URL in it redacted. */
kvio_status_t kvio_redis_parse_url(const char *url, kvio_redis_url_t *url_p, char *error_p,
                                   size_t error_len);

/* Connects (connect and every reply bounded by timeout_ns), sends AUTH and
 * SELECT when the URL asks, and PINGs. The caller closes the handle.
 * KVIO_ERR_UNSUPPORTED in builds without hiredis. */
kvio_status_t kvio_redis_connect(const char *url, int64_t timeout_ns, kvio_redis_t **redis_p,
                                 char *error_p, size_t error_len);
void kvio_redis_close(kvio_redis_t *redis);

/* The URL without its password (borrowed), and the last error's text. */
const char *kvio_redis_name(const kvio_redis_t *redis);
const char *kvio_redis_error(const kvio_redis_t *redis);

kvio_status_t kvio_redis_ping(kvio_redis_t *redis);

/* SETs count keys in one pipeline (values are borrowed). */
kvio_status_t kvio_redis_set_many(kvio_redis_t *redis, const char *const *keys,
                                  const void *const *values, const size_t *lengths,
                                  size_t count);

/* GETs a value into buffer; KVIO_ERR_NOT_FOUND when the key does not exist,
 * KVIO_ERR_NO_SPACE when it is longer than capacity. */
kvio_status_t kvio_redis_get(kvio_redis_t *redis, const char *key, void *buffer,
                             size_t capacity, size_t *length_p);

/* GETs count keys in one pipeline: key i into buffers[i] (capacities[i]
 * bytes), its length into lengths_p[i], and its own status into
 * statuses_p[i] (KVIO_ERR_NOT_FOUND, KVIO_ERR_NO_SPACE as kvio_redis_get).
 * Returns a failure of the connection (the statuses then mean nothing). */
kvio_status_t kvio_redis_get_many(kvio_redis_t *redis, const char *const *keys,
                                  void *const *buffers, const size_t *capacities,
                                  size_t *lengths_p, kvio_status_t *statuses_p, size_t count);

kvio_status_t kvio_redis_del(kvio_redis_t *redis, const char *const *keys, size_t count);

kvio_status_t kvio_redis_publish(kvio_redis_t *redis, const char *channel, const void *data,
                                 size_t length);

/* Turns the connection into a subscriber of channel (waits for the
 * confirmation); afterwards only kvio_redis_next_message may be used. */
kvio_status_t kvio_redis_subscribe(kvio_redis_t *redis, const char *channel);

/* The next published message, without blocking: KVIO_INPROGRESS when none. */
kvio_status_t kvio_redis_next_message(kvio_redis_t *redis, void *buffer, size_t capacity,
                                      size_t *length_p);

#endif
