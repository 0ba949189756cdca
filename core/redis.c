/* Redis URL parsing (always built) and, in builds without hiredis, the stub
 * client whose calls fail with "redis support not built". */
#include "kvio/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvio_url_redact(const char *url, char *out_p, size_t out_len)
{
    if (out_len == 0)
        return;
    const char *scheme = url != NULL ? strstr(url, "://") : NULL;
    if (scheme == NULL) {
        snprintf(out_p, out_len, "%s", url != NULL ? url : "");
        return;
    }
    const char *host_start = scheme + 3;
    const char *slash = strchr(host_start, '/');
    const char *query = strchr(host_start, '?');
    /* The last '@' of the authority (passwords may hold '@', hosts not). */
    const char *at = NULL;
    for (const char *c = host_start; *c != '\0' && c != slash && c != query; c++)
        if (*c == '@')
            at = c;
    size_t used = 0;
    if (at != NULL) {
        const char *colon = memchr(host_start, ':', (size_t)(at - host_start));
        const char *secret = colon != NULL ? colon + 1 : host_start;
        used = (size_t)snprintf(out_p, out_len, "%.*s***", (int)(secret - url), url);
        url = at;
    }
    /* ?password=...: the value goes too. */
    const char *password = strstr(url, "password=");
    if (password != NULL && used < out_len) {
        const char *end = password + strcspn(password, "&");
        snprintf(out_p + used, out_len - used, "%.*s***%s",
                 (int)(password + strlen("password=") - url), url, end);
    } else if (used < out_len) {
        snprintf(out_p + used, out_len - used, "%s", url);
    }
}

kvio_status_t kvio_redis_parse_url(const char *url, kvio_redis_url_t *url_p, char *error_p,
                                   size_t error_len)
{
    kvio_redis_url_t parsed = {.port = 6379};
    const char *scheme = "redis://";
    if (url == NULL || strncmp(url, scheme, strlen(scheme)) != 0) {
        snprintf(error_p, error_len, "%s: a Redis URL starts with redis://", url ? url : "");
        return KVIO_ERR_CONFIG;
    }
    const char *rest = url + strlen(scheme);
    /* The last '@' ends the password (it may hold '@' itself; the host,
     * port and database cannot). */
    const char *at = strrchr(rest, '@');
    char shown[512];
    kvio_url_redact(url, shown, sizeof(shown)); /* what messages may print */
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        const char *password = colon ? colon + 1 : rest; /* user names are ignored */
        /* %XX escapes decoded (%40 is '@'). */
        size_t out = 0;
        for (const char *c = password; c < at; c++) {
            unsigned int code;
            char ch = *c;
            if (ch == '%' && at - c >= 3 && sscanf(c + 1, "%2x", &code) == 1) {
                ch = (char)code;
                c += 2;
            }
            if (out + 1 >= sizeof(parsed.password)) {
                snprintf(error_p, error_len, "%s: password too long", shown);
                return KVIO_ERR_CONFIG;
            }
            parsed.password[out++] = ch;
        }
        rest = at + 1;
    }
    size_t host_length = strcspn(rest, ":/");
    if (host_length == 0 || host_length >= sizeof(parsed.host)) {
        snprintf(error_p, error_len, "%s: no host", shown);
        return KVIO_ERR_CONFIG;
    }
    memcpy(parsed.host, rest, host_length);
    rest += host_length;
    if (*rest == ':') {
        char *end = NULL;
        long port = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || port < 1 || port > 65535 || (*end != '\0' && *end != '/')) {
            snprintf(error_p, error_len, "%s: bad port", shown);
            return KVIO_ERR_CONFIG;
        }
        parsed.port = (int)port;
        rest = end;
    }
    if (*rest == '/' && rest[1] != '\0') {
        char *end = NULL;
        long db = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || *end != '\0' || db < 0 || db > 1000000) {
            snprintf(error_p, error_len, "%s: bad database number", shown);
            return KVIO_ERR_CONFIG;
        }
        parsed.db = (int)db;
    } else if (*rest != '\0' && strcmp(rest, "/") != 0) {
        snprintf(error_p, error_len, "%s: unexpected '%s'", shown, rest);
        return KVIO_ERR_CONFIG;
    }
    *url_p = parsed;
    return KVIO_OK;
}

#ifndef KVIO_HAVE_REDIS
kvio_status_t kvio_redis_connect(const char *url, int64_t timeout_ns, kvio_redis_t **redis_p,
                                 char *error_p, size_t error_len)
{
    snprintf(error_p, error_len, "%s: redis support not built (configure with "
             "KVIO_WITH_REDIS=ON)", url);
    return KVIO_ERR_UNSUPPORTED;
}
void kvio_redis_close(kvio_redis_t *redis) {}
const char *kvio_redis_name(const kvio_redis_t *redis) { return "redis"; }
const char *kvio_redis_error(const kvio_redis_t *redis) { return "redis support not built"; }
kvio_status_t kvio_redis_ping(kvio_redis_t *redis) { return KVIO_ERR_UNSUPPORTED; }
kvio_status_t kvio_redis_set_many(kvio_redis_t *redis, const char *const *keys,
                                  const void *const *values, const size_t *lengths,
                                  size_t count)
{
    return KVIO_ERR_UNSUPPORTED;
}
kvio_status_t kvio_redis_get(kvio_redis_t *redis, const char *key, void *buffer,
                             size_t capacity, size_t *length_p)
{
    return KVIO_ERR_UNSUPPORTED;
}
kvio_status_t kvio_redis_get_many(kvio_redis_t *redis, const char *const *keys,
                                  void *const *buffers, const size_t *capacities,
                                  size_t *lengths_p, kvio_status_t *statuses_p, size_t count)
{
    return KVIO_ERR_UNSUPPORTED;
}
kvio_status_t kvio_redis_del(kvio_redis_t *redis, const char *const *keys, size_t count)
{
    return KVIO_ERR_UNSUPPORTED;
}
kvio_status_t kvio_redis_publish(kvio_redis_t *redis, const char *channel, const void *data,
                                 size_t length)
{
    return KVIO_ERR_UNSUPPORTED;
}
kvio_status_t kvio_redis_subscribe(kvio_redis_t *redis, const char *channel)
{
    return KVIO_ERR_UNSUPPORTED;
}
kvio_status_t kvio_redis_next_message(kvio_redis_t *redis, void *buffer, size_t capacity,
                                      size_t *length_p)
{
    return KVIO_ERR_UNSUPPORTED;
}
#endif
