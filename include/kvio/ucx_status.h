/* A UCX status as kvio's, one mapping for every file that speaks UCX (the
 * model-update transports, the shared KV store). Include only where UCX is
 * built (KVIO_HAVE_UCX). */
#ifndef KVIO_UCX_STATUS_H
#define KVIO_UCX_STATUS_H

#include <ucs/type/status.h>

#include "kvio/status.h"

static inline kvio_status_t kvio_status_from_ucs(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return KVIO_OK;
    case UCS_INPROGRESS:
        return KVIO_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return KVIO_ERR_NOMEM;
    case UCS_ERR_TIMED_OUT:
        return KVIO_ERR_TIMEOUT;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return KVIO_ERR_PEER;
    case UCS_ERR_UNSUPPORTED:
        return KVIO_ERR_UNSUPPORTED;
    default:
        return KVIO_ERR_TRANSPORT;
    }
}

#endif
