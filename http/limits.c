/* kvio serve's bounds on what clients may hold: each connection's time to
 * send a request's headers (shorter while the server is at its connection
 * limit, so slow-header connections cannot starve /health), and the
 * request bodies buffered across all connections. No socket is read or
 * closed here: an overdue connection's socket is shut down, and
 * libmicrohttpd, seeing its end, closes it (http/server_http.c). */
#include "http/http_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

/* Bodies from this size on get a mapping of their own, returned to the
 * system when freed (malloc kept them: 100 bodies of 16 MiB left the RSS
 * 1.5 GB higher after their connections closed). */
#define BODY_MAP_BYTES (1u << 20)
#define BODY_FIRST_CAPACITY 4096u

void kvio_http_limits_init(kvio_http_limits_t *limits, uint32_t max_connections,
                           int64_t header_timeout_ns, int64_t crowded_header_timeout_ns,
                           size_t max_body_bytes, size_t max_bodies_bytes)
{
    memset(limits, 0, sizeof(*limits));
    pthread_mutex_init(&limits->lock, NULL);
    limits->max_connections = max_connections;
    limits->header_timeout_ns = header_timeout_ns;
    limits->crowded_header_timeout_ns = crowded_header_timeout_ns;
    limits->max_body_bytes = max_body_bytes;
    limits->max_bodies_bytes = max_bodies_bytes;
    atomic_init(&limits->bodies_bytes, 0);
}

void kvio_http_limits_fini(kvio_http_limits_t *limits)
{
    kvio_http_conn_t *conn = limits->conns;
    while (conn != NULL) {
        kvio_http_conn_t *next = conn->next;
        free(conn);
        conn = next;
    }
    limits->conns = NULL;
    pthread_mutex_destroy(&limits->lock);
}

/* ---------- connections ---------- */

kvio_http_conn_t *kvio_http_conn_open(kvio_http_limits_t *limits, int fd, int64_t now_ns)
{
    kvio_http_conn_t *conn = calloc(1, sizeof(*conn));
    pthread_mutex_lock(&limits->lock);
    limits->open++;
    if (limits->open > limits->max_open_seen)
        limits->max_open_seen = limits->open;
    if (conn != NULL) {
        conn->fd = fd;
        conn->waiting_since_ns = now_ns;
        conn->next = limits->conns;
        if (limits->conns != NULL)
            limits->conns->prev = conn;
        limits->conns = conn;
    }
    pthread_mutex_unlock(&limits->lock);
    return conn;
}

void kvio_http_conn_close(kvio_http_limits_t *limits, kvio_http_conn_t *conn)
{
    pthread_mutex_lock(&limits->lock);
    if (limits->open > 0)
        limits->open--;
    if (conn != NULL) {
        if (conn->prev != NULL)
            conn->prev->next = conn->next;
        else
            limits->conns = conn->next;
        if (conn->next != NULL)
            conn->next->prev = conn->prev;
    }
    pthread_mutex_unlock(&limits->lock);
    free(conn);
}

void kvio_http_conn_headers(kvio_http_limits_t *limits, kvio_http_conn_t *conn, bool done,
                            int64_t now_ns)
{
    if (conn == NULL)
        return;
    pthread_mutex_lock(&limits->lock);
    conn->headers_done = done;
    conn->waiting_since_ns = now_ns;
    pthread_mutex_unlock(&limits->lock);
}

bool kvio_http_limits_over(kvio_http_limits_t *limits)
{
    pthread_mutex_lock(&limits->lock);
    bool over = limits->open > limits->max_connections;
    pthread_mutex_unlock(&limits->lock);
    return over;
}

uint32_t kvio_http_limits_tick(kvio_http_limits_t *limits, int64_t now_ns)
{
    uint32_t cut = 0;
    pthread_mutex_lock(&limits->lock);
    int64_t allowed_ns = limits->open >= limits->max_connections
                             ? limits->crowded_header_timeout_ns
                             : limits->header_timeout_ns;
    for (kvio_http_conn_t *conn = limits->conns; allowed_ns > 0 && conn != NULL;
         conn = conn->next) {
        if (conn->fd < 0 || conn->headers_done || conn->cut ||
            now_ns - conn->waiting_since_ns <= allowed_ns)
            continue;
        /* Only a client that is there and sends nothing: bytes
         * libmicrohttpd has not read yet say it is the one behind (a
         * flood's requests were cut so, unread), and a client that closed
         * or reset is libmicrohttpd's to close. */
        char byte;
        if (recv(conn->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 ||
            (errno != EAGAIN && errno != EWOULDBLOCK))
            continue;
        /* Its descriptor stays open until libmicrohttpd closes it, which
         * it does only after telling us (kvio_http_conn_close takes the
         * lock held here). */
        shutdown(conn->fd, SHUT_RDWR);
        conn->cut = true;
        cut++;
    }
    limits->headers_cut += cut;
    pthread_mutex_unlock(&limits->lock);
    return cut;
}

void kvio_http_limits_counts(kvio_http_limits_t *limits, kvio_http_limit_counts_t *counts_p)
{
    pthread_mutex_lock(&limits->lock);
    *counts_p = (kvio_http_limit_counts_t){
        .open = limits->open, .max_open_seen = limits->max_open_seen,
        .headers_cut = limits->headers_cut,
        .bodies_bytes = atomic_load(&limits->bodies_bytes)};
    pthread_mutex_unlock(&limits->lock);
}

/* ---------- bodies ---------- */

bool kvio_http_bodies_fit(kvio_http_limits_t *limits, uint64_t bytes)
{
    return atomic_load(&limits->bodies_bytes) + bytes <= limits->max_bodies_bytes;
}

static bool reserve(kvio_http_limits_t *limits, size_t bytes)
{
    size_t before = atomic_fetch_add(&limits->bodies_bytes, bytes);
    if (before + bytes <= limits->max_bodies_bytes)
        return true;
    atomic_fetch_sub(&limits->bodies_bytes, bytes);
    return false;
}

static void body_unmap(char *bytes, size_t capacity)
{
    if (capacity >= BODY_MAP_BYTES)
        munmap(bytes, capacity);
    else
        free(bytes);
}

/* The body's buffer grown to capacity bytes (already reserved). */
static bool body_grow(kvio_http_body_t *body, size_t capacity)
{
    char *bytes;
    if (capacity < BODY_MAP_BYTES) {
        bytes = realloc(body->bytes, capacity);
    } else if (body->capacity >= BODY_MAP_BYTES) {
        bytes = mremap(body->bytes, body->capacity, capacity, MREMAP_MAYMOVE);
        bytes = bytes == MAP_FAILED ? NULL : bytes;
    } else {
        bytes = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        bytes = bytes == MAP_FAILED ? NULL : bytes;
        if (bytes != NULL && body->length > 0)
            memcpy(bytes, body->bytes, body->length);
        if (bytes != NULL)
            free(body->bytes);
    }
    if (bytes == NULL)
        return false;
    body->bytes = bytes;
    body->capacity = capacity;
    return true;
}

kvio_http_body_status_t kvio_http_body_append(kvio_http_limits_t *limits, kvio_http_body_t *body,
                                              const char *bytes, size_t length,
                                              uint64_t declared_length)
{
    if (length > limits->max_body_bytes || body->length + length > limits->max_body_bytes)
        return KVIO_HTTP_BODY_TOO_LARGE;
    size_t needed = body->length + length + 1; /* and a NUL */
    if (needed > body->capacity) {
        size_t capacity = body->capacity ? 2 * body->capacity : BODY_FIRST_CAPACITY;
        /* A small declared body at once; a large one grows with what comes
         * (its bytes, not its claim, count against the bound: a client
         * that declares 16 MiB and trickles holds no more than it sent). */
        if (declared_length >= body->length + length && declared_length < BODY_MAP_BYTES)
            capacity = (size_t)declared_length + 1;
        if (capacity < needed)
            capacity = needed;
        if (capacity > limits->max_body_bytes + 1)
            capacity = limits->max_body_bytes + 1;
        if (capacity >= BODY_MAP_BYTES) {
            long page = sysconf(_SC_PAGESIZE);
            capacity = (capacity + (size_t)page - 1) / (size_t)page * (size_t)page;
        }
        if (!reserve(limits, capacity - body->capacity))
            return KVIO_HTTP_BODY_BUSY;
        if (!body_grow(body, capacity)) {
            atomic_fetch_sub(&limits->bodies_bytes, capacity - body->capacity);
            return KVIO_HTTP_BODY_NOMEM;
        }
    }
    memcpy(body->bytes + body->length, bytes, length);
    body->length += length;
    body->bytes[body->length] = '\0';
    return KVIO_HTTP_BODY_OK;
}

void kvio_http_body_free(kvio_http_limits_t *limits, kvio_http_body_t *body)
{
    if (body->bytes != NULL) {
        body_unmap(body->bytes, body->capacity);
        atomic_fetch_sub(&limits->bodies_bytes, body->capacity);
    }
    *body = (kvio_http_body_t){0};
}
