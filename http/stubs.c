/* The HTTP server and the KV-event publisher where kvio was built without
 * libmicrohttpd or without libzmq and msgpack-c: each call fails saying
 * what is missing, so kvio serve gives a clear error. */
#include "kvio/http.h"

#include <stdio.h>

#ifndef KVIO_HAVE_HTTP
kvio_status_t kvio_http_server_start(const kvio_http_params_t *params,
                                     kvio_http_server_t **server_p, char *error_p,
                                     size_t error_len)
{
    (void)params;
    (void)server_p;
    snprintf(error_p, error_len, "kvio serve is not built: libmicrohttpd was missing "
             "(scripts/bootstrap.sh installs libmicrohttpd-dev; configure again)");
    return KVIO_ERR_UNSUPPORTED;
}

uint16_t kvio_http_server_port(const kvio_http_server_t *server, uint32_t index)
{
    (void)server;
    (void)index;
    return 0;
}

void kvio_http_server_quiesce(kvio_http_server_t *server)
{
    (void)server;
}

uint32_t kvio_http_server_busy(kvio_http_server_t *server)
{
    (void)server;
    return 0;
}

json_t *kvio_http_server_stats(kvio_http_server_t *server)
{
    (void)server;
    return json_object();
}

kvio_status_t kvio_http_server_write_tokens(kvio_http_server_t *server, const char *path,
                                            char *error_p, size_t error_len)
{
    (void)server;
    (void)path;
    (void)error_p;
    (void)error_len;
    return KVIO_ERR_UNSUPPORTED;
}

void kvio_http_server_stop(kvio_http_server_t *server)
{
    (void)server;
}

void kvio_http_server_destroy(kvio_http_server_t *server)
{
    (void)server;
}
#endif

#ifndef KVIO_HAVE_ZMQ
kvio_status_t kvio_kv_events_create(const char *endpoint, const char *topic, uint32_t num_ranks,
                                    kvio_kv_events_t **events_p, char *error_p,
                                    size_t error_len)
{
    (void)topic;
    (void)num_ranks;
    (void)events_p;
    snprintf(error_p, error_len, "--kv-events %s: not built: libzmq or msgpack-c was missing "
             "(scripts/bootstrap.sh installs libzmq3-dev and libmsgpack-dev)", endpoint);
    return KVIO_ERR_UNSUPPORTED;
}

kvio_kv_event_sink_t kvio_kv_events_sink(kvio_kv_events_t *events)
{
    (void)events;
    return (kvio_kv_event_sink_t){0};
}

uint64_t kvio_kv_events_published(const kvio_kv_events_t *events, uint32_t rank)
{
    (void)events;
    (void)rank;
    return 0;
}

void kvio_kv_events_destroy(kvio_kv_events_t *events)
{
    (void)events;
}
#endif
