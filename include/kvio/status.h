/* kvio status codes: one list, from which the enum and kvio_strerror() are
 * both generated. 0 is success, 1 is "in progress", negatives are errors.
 * Foreign codes (errno, libyaml, hiredis, UCX, CUDA) are converted at the
 * edge of the module that calls them. */
#ifndef KVIO_STATUS_H
#define KVIO_STATUS_H

#define KVIO_STATUS_LIST(X)                                                 \
    X(KVIO_OK, 0, "success")                                                \
    X(KVIO_INPROGRESS, 1, "in progress")                                    \
    X(KVIO_ERR_INVALID, -1, "invalid argument")                             \
    X(KVIO_ERR_NOMEM, -2, "out of memory")                                  \
    X(KVIO_ERR_IO, -3, "input/output error")                                \
    X(KVIO_ERR_CONFIG, -4, "bad configuration")                             \
    X(KVIO_ERR_PARSE, -5, "parse error")                                    \
    X(KVIO_ERR_NOT_FOUND, -6, "not found")                                  \
    X(KVIO_ERR_EXISTS, -7, "already exists")                                \
    X(KVIO_ERR_NO_SPACE, -8, "no space")                                    \
    X(KVIO_ERR_TIMEOUT, -9, "timed out")                                    \
    X(KVIO_ERR_UNSUPPORTED, -10, "not supported in this build")            \
    X(KVIO_ERR_CONNECTION, -11, "connection failed")                        \
    X(KVIO_ERR_CHECKSUM, -12, "checksum mismatch")                          \
    X(KVIO_ERR_PEER, -13, "peer rank failed")                               \
    X(KVIO_ERR_INTERRUPTED, -14, "interrupted")                             \
    X(KVIO_ERR_TRANSPORT, -15, "transport error")                           \
    X(KVIO_ERR_DEVICE, -16, "device error")                                 \
    X(KVIO_ERR_INTERNAL, -17, "internal error")

#include <stdbool.h>

typedef enum {
#define KVIO_STATUS_ENUM(name, value, text) name = value,
    KVIO_STATUS_LIST(KVIO_STATUS_ENUM)
#undef KVIO_STATUS_ENUM
} kvio_status_t;

/* Room for an error message of kvio's: one that names a long path (up to
 * PATH_MAX) still ends with its cause. */
#define KVIO_ERROR_MAX 4096

/* Returns a static, human-readable text for a status code. */
const char *kvio_strerror(kvio_status_t status);

/* True when the status says the input was bad (a usage error: exit 2)
 * rather than that a run failed. */
bool kvio_status_is_bad_input(kvio_status_t status);

/* Converts an errno value into the closest kvio status. */
kvio_status_t kvio_status_from_errno(int errnum);

/* True when the status is an error or in-progress return. */
#define KVIO_IS_ERROR(status) ((status) < 0)

#endif
