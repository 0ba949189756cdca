/* Redis URL parsing (always built) and, in builds without hiredis, the stub
 * client whose calls fail with "redis support not built". */
#include "kvio/redis.h"

#include <stdbool.h>
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

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* length bytes of text %-decoded into out (size bytes, NUL-terminated);
 * false for a '%' not followed by two hex digits (%zz was taken as it
 * was), or no room. */
static bool percent_decode(const char *text, size_t length, char *out, size_t size)
{
    size_t at = 0;
    for (size_t i = 0; i < length; i++) {
        char ch = text[i];
        if (ch == '%') {
            int high = i + 2 < length ? hex_value(text[i + 1]) : -1;
            int low = i + 2 < length ? hex_value(text[i + 2]) : -1;
            if (high < 0 || low < 0)
                return false;
            ch = (char)(high << 4 | low);
            i += 2;
        }
        if (at + 1 >= size)
            return false;
        out[at++] = ch;
    }
    out[at] = '\0';
    return true;
}

/* ?password=...&db=...: the query redis-py reads too. */
static kvio_status_t parse_query(const char *query, const char *shown, kvio_redis_url_t *parsed,
                                 char *error_p, size_t error_len)
{
    while (*query != '\0') {
        size_t length = strcspn(query, "&");
        const char *equals = memchr(query, '=', length);
        int key_length = (int)(equals != NULL ? (size_t)(equals - query) : length);
        const char *value = equals != NULL ? equals + 1 : query + length;
        char decoded[sizeof(parsed->password)];
        if (!percent_decode(value, (size_t)(query + length - value), decoded, sizeof(decoded))) {
            snprintf(error_p, error_len, "%s: the query's %.*s has a bad %%-escape (%%XX: two hex "
                     "digits) or is too long", shown, key_length, query);
            return KVIO_ERR_CONFIG;
        }
        bool password = key_length == 8 && strncmp(query, "password", 8) == 0;
        bool db = key_length == 2 && strncmp(query, "db", 2) == 0;
        char *end = NULL;
        long number = db ? strtol(decoded, &end, 10) : 0;
        if (password) {
            memcpy(parsed->password, decoded, sizeof(decoded));
        } else if (db && end != decoded && *end == '\0' && number >= 0 && number <= 1000000) {
            parsed->db = (int)number;
        } else {
            snprintf(error_p, error_len, db ? "%s: bad database number" :
                     "%s: the query's %.*s is not one kvio reads (password, db)", shown,
                     key_length, query);
            return KVIO_ERR_CONFIG;
        }
        query += length + (query[length] == '&');
    }
    return KVIO_OK;
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
    /* The query (?password=...&db=...) from the first '?': a '?' in a
     * password is written %3F. */
    char address[1024];
    snprintf(address, sizeof(address), "%.*s", (int)strcspn(url + strlen(scheme), "?"),
             url + strlen(scheme));
    const char *query = strchr(url + strlen(scheme), '?');
    const char *rest = address;
    /* The last '@' ends the password (it may hold '@' itself; the host,
     * port and database cannot). */
    const char *at = strrchr(rest, '@');
    char shown[512];
    kvio_url_redact(url, shown, sizeof(shown)); /* what messages may print */
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        const char *password = colon ? colon + 1 : rest; /* user names are ignored */
        /* %XX escapes decoded (%40 is '@'). */
        if (!percent_decode(password, (size_t)(at - password), parsed.password,
                            sizeof(parsed.password))) {
            snprintf(error_p, error_len, "%s: the password has a bad %%-escape (%%XX: two hex "
                     "digits) or is too long", shown);
            return KVIO_ERR_CONFIG;
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
    if (query != NULL && parse_query(query + 1, shown, &parsed, error_p, error_len) != KVIO_OK)
        return KVIO_ERR_CONFIG;
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
