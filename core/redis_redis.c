/* The Redis client on hiredis 0.14 (synchronous API): connect with a
 * timeout, AUTH, SELECT, pipelined SETs, GET, DEL, PUBLISH, and a subscriber
 * whose messages are read without blocking. hiredis errors are converted
 * here, once, into kvio status codes and "URL: reason" text. */
#include "kvio/redis.h"

#include <ctype.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

struct kvio_redis {
    redisContext *context;
    char name[300];  /* redis://host:port/db, no password */
    char error[768];
};

static kvio_status_t fail(kvio_redis_t *redis, kvio_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kvio_status_t fail(kvio_redis_t *redis, kvio_status_t status, const char *fmt, ...)
{
    char reason[400];
    va_list args;
    va_start(args, fmt);
    vsnprintf(reason, sizeof(reason), fmt, args);
    va_end(args);
    if (islower((unsigned char)reason[1])) /* a word, not a command: "AUTH" stays */
        reason[0] = (char)tolower((unsigned char)reason[0]);
    snprintf(redis->error, sizeof(redis->error), "%s: %s", redis->name, reason);
    return status;
}

/* Converts the context's error (hiredis err/errstr) once. */
static kvio_status_t context_error(kvio_redis_t *redis)
{
    redisContext *context = redis->context;
    kvio_status_t status = KVIO_ERR_CONNECTION;
    const char *text = context->errstr;
    if (context->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT))
        return fail(redis, KVIO_ERR_TIMEOUT, "timed out");
    if (context->err == REDIS_ERR_EOF)
        text = "server closed the connection";
    if (context->err == REDIS_ERR_OOM)
        status = KVIO_ERR_NOMEM;
    return fail(redis, status, "%s", text[0] ? text : "connection error");
}

/* Checks a reply: NULL (connection error) or an error reply. */
static kvio_status_t reply_error(kvio_redis_t *redis, redisReply *reply, const char *command)
{
    if (reply == NULL)
        return context_error(redis);
    if (reply->type == REDIS_REPLY_ERROR) {
        kvio_status_t status = strncmp(reply->str, "OOM", 3) == 0 ? KVIO_ERR_NO_SPACE
                                                                  : KVIO_ERR_TRANSPORT;
        return fail(redis, status, "%s: %s", command, reply->str);
    }
    return KVIO_OK;
}

static kvio_status_t simple(kvio_redis_t *redis, const char *command, redisReply *reply)
{
    kvio_status_t status = reply_error(redis, reply, command);
    freeReplyObject(reply);
    return status;
}

/* hiredis 0.14 formats every command into a buffer of its own: a SET of a
 * 2 MiB block got one from mmap each time (glibc's default above 128 KiB,
 * or after its threshold adapts, trimmed back to the kernel when freed),
 * and faulting in its 512 pages was most of a put's time (a put of 2 MiB
 * took 5.2 ms, redis-benchmark's SET 0.7 ms). Buffers up to 256 MiB stay
 * on the heap and are reused. Process-wide, once; kvio's own large arenas
 * are mapped directly and do not go through malloc. */
#define HEAP_BUFFERS_UP_TO (256 << 20)

static void keep_command_buffers(void)
{
    mallopt(M_MMAP_THRESHOLD, HEAP_BUFFERS_UP_TO);
    mallopt(M_TRIM_THRESHOLD, 2 * HEAP_BUFFERS_UP_TO);
}

kvio_status_t kvio_redis_connect(const char *url, int64_t timeout_ns, kvio_redis_t **redis_p,
                                 char *error_p, size_t error_len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, keep_command_buffers);
    kvio_redis_url_t parsed;
    kvio_status_t status = kvio_redis_parse_url(url, &parsed, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_redis_t *redis = calloc(1, sizeof(*redis));
    if (redis == NULL) {
        snprintf(error_p, error_len, "%s: out of memory", url);
        return KVIO_ERR_NOMEM;
    }
    snprintf(redis->name, sizeof(redis->name), "redis://%s:%d%s", parsed.host, parsed.port,
             parsed.db ? "/" : "");
    if (parsed.db)
        snprintf(redis->name + strlen(redis->name), sizeof(redis->name) - strlen(redis->name),
                 "%d", parsed.db);
    if (timeout_ns <= 0)
        timeout_ns = 2000000000LL;
    struct timeval timeout = {.tv_sec = (time_t)(timeout_ns / 1000000000LL),
                              .tv_usec = (suseconds_t)(timeout_ns % 1000000000LL / 1000)};
    redis->context = redisConnectWithTimeout(parsed.host, parsed.port, timeout);
    if (redis->context == NULL) {
        status = fail(redis, KVIO_ERR_NOMEM, "cannot allocate a connection");
        goto fail;
    }
    if (redis->context->err) {
        status = context_error(redis);
        goto fail;
    }
    if (redisSetTimeout(redis->context, timeout) != REDIS_OK) {
        status = context_error(redis);
        goto fail;
    }
    if (parsed.password[0] != '\0') {
        status = simple(redis, "AUTH", redisCommand(redis->context, "AUTH %s", parsed.password));
        if (status != KVIO_OK)
            goto fail;
    }
    if (parsed.db != 0) {
        status = simple(redis, "SELECT", redisCommand(redis->context, "SELECT %d", parsed.db));
        if (status != KVIO_OK)
            goto fail;
    }
    status = kvio_redis_ping(redis);
    if (status != KVIO_OK)
        goto fail;
    *redis_p = redis;
    return KVIO_OK;
fail:
    snprintf(error_p, error_len, "%s", redis->error);
    kvio_redis_close(redis);
    return status;
}

void kvio_redis_close(kvio_redis_t *redis)
{
    if (redis == NULL)
        return;
    if (redis->context != NULL)
        redisFree(redis->context);
    free(redis);
}

const char *kvio_redis_name(const kvio_redis_t *redis) { return redis->name; }
const char *kvio_redis_error(const kvio_redis_t *redis) { return redis->error; }

kvio_status_t kvio_redis_ping(kvio_redis_t *redis)
{
    return simple(redis, "PING", redisCommand(redis->context, "PING"));
}

/* Values this large go to the socket from where they are, not through
 * hiredis's buffers (which copy each one twice: formatting the command,
 * then appending it to the output buffer). */
#define DIRECT_VALUE_BYTES (64 << 10)

/* Writes the iovecs whole to the connection's socket (blocking, bounded by
 * its send timeout), advancing them as they go. */
static kvio_status_t write_all(kvio_redis_t *redis, struct iovec *parts, size_t count)
{
    while (count > 0) {
        int batch = count < IOV_MAX ? (int)count : IOV_MAX;
        ssize_t written = writev(redis->context->fd, parts, batch);
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK
                       ? fail(redis, KVIO_ERR_TIMEOUT, "timed out writing")
                       : fail(redis, KVIO_ERR_CONNECTION, "writing: %s", strerror(errno));
        size_t left = (size_t)written;
        while (count > 0 && left >= parts->iov_len) {
            left -= parts->iov_len;
            parts++;
            count--;
        }
        if (count > 0) {
            parts->iov_base = (char *)parts->iov_base + left;
            parts->iov_len -= left;
        }
    }
    return KVIO_OK;
}

/* SETs written as RESP straight from the caller's values: a header of its
 * own per command, the value, its end. */
static kvio_status_t send_sets(kvio_redis_t *redis, const char *const *keys,
                               const void *const *values, const size_t *lengths, size_t count)
{
    enum { HEADER_MAX = 512 };
    char *headers = malloc(count * HEADER_MAX);
    struct iovec *parts = malloc(3 * count * sizeof(*parts));
    kvio_status_t status = headers != NULL && parts != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    for (size_t i = 0; status == KVIO_OK && i < count; i++) {
        char *header = headers + i * HEADER_MAX;
        size_t key_length = strlen(keys[i]);
        int length = snprintf(header, HEADER_MAX, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n",
                              key_length, keys[i], lengths[i]);
        if (length < 0 || length >= HEADER_MAX) {
            status = fail(redis, KVIO_ERR_INVALID, "%s: key too long", keys[i]);
            break;
        }
        parts[3 * i] = (struct iovec){.iov_base = header, .iov_len = (size_t)length};
        parts[3 * i + 1] = (struct iovec){.iov_base = (void *)values[i], .iov_len = lengths[i]};
        parts[3 * i + 2] = (struct iovec){.iov_base = "\r\n", .iov_len = 2};
    }
    if (status == KVIO_OK)
        status = write_all(redis, parts, 3 * count);
    free(headers);
    free(parts);
    return status;
}

kvio_status_t kvio_redis_set_many(kvio_redis_t *redis, const char *const *keys,
                                  const void *const *values, const size_t *lengths,
                                  size_t count)
{
    bool direct = false;
    for (size_t i = 0; i < count; i++)
        direct |= lengths[i] >= DIRECT_VALUE_BYTES;
    /* hiredis's output buffer is empty here: every command before read its
     * replies, which flushes it. */
    if (direct) {
        kvio_status_t sent = send_sets(redis, keys, values, lengths, count);
        if (sent != KVIO_OK)
            return sent;
    }
    for (size_t i = 0; !direct && i < count; i++)
        if (redisAppendCommand(redis->context, "SET %s %b", keys[i], values[i], lengths[i]) !=
            REDIS_OK)
            return context_error(redis);
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < count; i++) {
        void *reply = NULL;
        if (redisGetReply(redis->context, &reply) != REDIS_OK)
            return context_error(redis); /* the connection is unusable now */
        kvio_status_t one = simple(redis, "SET", reply);
        if (status == KVIO_OK)
            status = one;
    }
    return status;
}

/* A GET's reply into buffer (freed here); the key's own status. */
static kvio_status_t take_value(kvio_redis_t *redis, const char *key, redisReply *reply,
                                void *buffer, size_t capacity, size_t *length_p)
{
    kvio_status_t status = reply_error(redis, reply, "GET");
    if (status == KVIO_OK && reply->type == REDIS_REPLY_NIL)
        status = fail(redis, KVIO_ERR_NOT_FOUND, "%s: no such key", key);
    else if (status == KVIO_OK && reply->type != REDIS_REPLY_STRING)
        status = fail(redis, KVIO_ERR_TRANSPORT, "%s: not a string", key);
    else if (status == KVIO_OK && reply->len > capacity)
        status = fail(redis, KVIO_ERR_NO_SPACE, "%s: %zu bytes, room for %zu", key,
                      reply->len, capacity);
    if (status == KVIO_OK) {
        memcpy(buffer, reply->str, reply->len);
        *length_p = reply->len;
    }
    freeReplyObject(reply);
    return status;
}

kvio_status_t kvio_redis_get(kvio_redis_t *redis, const char *key, void *buffer,
                             size_t capacity, size_t *length_p)
{
    redisReply *reply = redisCommand(redis->context, "GET %s", key);
    return take_value(redis, key, reply, buffer, capacity, length_p);
}

kvio_status_t kvio_redis_get_many(kvio_redis_t *redis, const char *const *keys,
                                  void *const *buffers, const size_t *capacities,
                                  size_t *lengths_p, kvio_status_t *statuses_p, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (redisAppendCommand(redis->context, "GET %s", keys[i]) != REDIS_OK)
            return context_error(redis);
    for (size_t i = 0; i < count; i++) {
        void *reply = NULL;
        if (redisGetReply(redis->context, &reply) != REDIS_OK)
            return context_error(redis); /* the connection is unusable now */
        statuses_p[i] = take_value(redis, keys[i], reply, buffers[i], capacities[i],
                                   &lengths_p[i]);
    }
    return KVIO_OK;
}

kvio_status_t kvio_redis_del(kvio_redis_t *redis, const char *const *keys, size_t count)
{
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < count; i++)
        if (redisAppendCommand(redis->context, "DEL %s", keys[i]) != REDIS_OK)
            return context_error(redis);
    for (size_t i = 0; i < count; i++) {
        void *reply = NULL;
        if (redisGetReply(redis->context, &reply) != REDIS_OK)
            return context_error(redis);
        kvio_status_t one = simple(redis, "DEL", reply);
        if (status == KVIO_OK)
            status = one;
    }
    return status;
}

kvio_status_t kvio_redis_publish(kvio_redis_t *redis, const char *channel, const void *data,
                                 size_t length)
{
    return simple(redis, "PUBLISH",
                  redisCommand(redis->context, "PUBLISH %s %b", channel, data, length));
}

kvio_status_t kvio_redis_subscribe(kvio_redis_t *redis, const char *channel)
{
    redisReply *reply = redisCommand(redis->context, "SUBSCRIBE %s", channel);
    kvio_status_t status = reply_error(redis, reply, "SUBSCRIBE");
    if (status == KVIO_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1))
        status = fail(redis, KVIO_ERR_TRANSPORT, "SUBSCRIBE: unexpected reply");
    freeReplyObject(reply);
    return status;
}

kvio_status_t kvio_redis_next_message(kvio_redis_t *redis, void *buffer, size_t capacity,
                                      size_t *length_p)
{
    redisContext *context = redis->context;
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(context, &reply) != REDIS_OK)
            return context_error(redis);
        if (reply == NULL) {
            struct pollfd ready = {.fd = context->fd, .events = POLLIN};
            if (poll(&ready, 1, 0) <= 0)
                return KVIO_INPROGRESS;
            if (redisBufferRead(context) != REDIS_OK)
                return context_error(redis);
            continue;
        }
        redisReply *message = reply;
        /* ["message", channel, payload]; other pushes are ignored. */
        if (message->type == REDIS_REPLY_ARRAY && message->elements == 3 &&
            message->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(message->element[0]->str, "message") == 0) {
            redisReply *payload = message->element[2];
            kvio_status_t status = KVIO_OK;
            if (payload->len > capacity)
                status = fail(redis, KVIO_ERR_NO_SPACE, "message of %zu bytes", payload->len);
            else {
                memcpy(buffer, payload->str, payload->len);
                *length_p = payload->len;
            }
            freeReplyObject(message);
            return status;
        }
        freeReplyObject(message);
    }
}
