/* kvio_strerror and errno conversion, generated from KVIO_STATUS_LIST. */
#include "kvio/status.h"

#include <errno.h>

const char *kvio_strerror(kvio_status_t status)
{
    switch (status) {
#define KVIO_STATUS_CASE(name, value, text) case name: return text;
    KVIO_STATUS_LIST(KVIO_STATUS_CASE)
#undef KVIO_STATUS_CASE
    }
    return "unknown status";
}

bool kvio_status_is_bad_input(kvio_status_t status)
{
    switch (status) {
    case KVIO_ERR_INVALID:
    case KVIO_ERR_CONFIG:
    case KVIO_ERR_PARSE:
    case KVIO_ERR_NOT_FOUND:
    case KVIO_ERR_EXISTS:
    case KVIO_ERR_UNSUPPORTED:
        return true;
    default:
        return false;
    }
}

kvio_status_t kvio_status_from_errno(int errnum)
{
    switch (errnum) {
    case 0: return KVIO_OK;
    case ENOMEM: return KVIO_ERR_NOMEM;
    case ENOENT: return KVIO_ERR_NOT_FOUND;
    case EEXIST: return KVIO_ERR_EXISTS;
    case ENOSPC: case EDQUOT: return KVIO_ERR_NO_SPACE;
    case ETIMEDOUT: return KVIO_ERR_TIMEOUT;
    case EINTR: return KVIO_ERR_INTERRUPTED;
    case EINVAL: return KVIO_ERR_INVALID;
    case ECONNREFUSED: case ECONNRESET: case EPIPE: return KVIO_ERR_CONNECTION;
    default: return KVIO_ERR_IO;
    }
}
