/* The cuda-ipc transport (same node, GPU to GPU): receivers allocate two
 * receive slots in device memory and export them with cudaIpcGetMemHandle;
 * the handles travel through the runtime's allgather (with the ucx
 * transport's set-up, whose active messages carry the notices and acks).
 * The sender opens each handle once and copies its device buffer into the
 * free slot device to device, waits for the copy, then notifies. Between
 * threads of one process (the local runtime) CUDA refuses handles from its
 * own process, so there the slots' device pointers are used directly. */
#include "xfer/xfer_int.h"

#ifdef KVIO_HAVE_UCX
#include "xfer/xfer_ucx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a receiver publishes. */
typedef struct ipc_blob {
    int64_t pid;
    uint64_t pointer[2];
    unsigned char handle[2][KVIO_DEVICE_IPC_HANDLE_BYTES];
} ipc_blob_t;

typedef struct ipc_target {
    void *slots[2];
    bool opened; /* by cudaIpcOpenMemHandle: close at the end */
} ipc_target_t;

typedef struct ipc_priv {
    kvio_ucx_t ucx; /* first: the shared notice and ack ops use it */
    ipc_target_t *targets; /* sender: per receiver */
} ipc_priv_t;

static kvio_status_t device_failed(kvio_xfer_t *xfer, kvio_status_t status, const char *what)
{
    if (status != KVIO_OK)
        kvio_xfer_set_error(xfer, "cuda-ipc transport: rank %d: %s: %s", kvio_rte_index(xfer->rte),
                            what, kvio_device_error(xfer->device));
    return status;
}

static kvio_status_t ipc_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    ipc_priv_t *priv = xfer->priv;
    void **blobs = NULL;
    size_t *lengths = NULL;
    ipc_blob_t mine = {.pid = (int64_t)getpid()};
    kvio_status_t status = kvio_xfer_ucx_open(xfer);
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        status = device_failed(xfer, kvio_device_alloc(xfer->device, xfer->bytes,
                                                       &xfer->send_buffer),
                               "allocating the send buffer");
        if (status == KVIO_OK &&
            (priv->targets = calloc((size_t)xfer->num_receivers + 1, sizeof(*priv->targets))) ==
                NULL)
            status = KVIO_ERR_NOMEM;
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        for (int slot = 0; slot < 2 && status == KVIO_OK; slot++) {
            status = device_failed(xfer, kvio_device_alloc(xfer->device, xfer->bytes,
                                                           &xfer->slots[slot]),
                                   "allocating a receive slot");
            if (status == KVIO_OK)
                status = device_failed(xfer, kvio_device_ipc_export(xfer->device,
                                                                    xfer->slots[slot],
                                                                    mine.handle[slot]),
                                       "exporting a receive slot");
            mine.pointer[slot] = (uint64_t)(uintptr_t)xfer->slots[slot];
        }
    }
    kvio_status_t exchange = kvio_xfer_ucx_connect(xfer, &mine, sizeof(mine), &blobs, &lengths);
    if (status == KVIO_OK)
        status = exchange;
    bool any_ipc = false;
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        for (int i = 0; i < xfer->num_receivers && status == KVIO_OK; i++) {
            int rank = xfer->receivers[i];
            ipc_blob_t theirs;
            if (lengths[rank] != sizeof(theirs)) {
                kvio_xfer_set_error(xfer, "cuda-ipc transport: rank %d sent no slot handles "
                                    "(its set-up failed)", rank);
                status = KVIO_ERR_PEER; /* its own error names the cause */
                break;
            }
            memcpy(&theirs, blobs[rank], sizeof(theirs));
            ipc_target_t *target = &priv->targets[i];
            if (theirs.pid == mine.pid) {
                /* The same process: its device pointers are ours. */
                target->slots[0] = (void *)(uintptr_t)theirs.pointer[0];
                target->slots[1] = (void *)(uintptr_t)theirs.pointer[1];
                continue;
            }
            any_ipc = true;
            for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
                status = device_failed(xfer, kvio_device_ipc_open(xfer->device,
                                                                  theirs.handle[slot],
                                                                  &target->slots[slot]),
                                       "opening a receiver's slot");
            target->opened = true;
        }
        snprintf(xfer->info, sizeof(xfer->info), "cuda-ipc: %s, %s",
                 any_ipc ? "IPC handles" : "one process: direct device-to-device copies",
                 kvio_device_describe(xfer->device));
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        snprintf(xfer->info, sizeof(xfer->info), "cuda-ipc receiver: %s",
                 kvio_device_describe(xfer->device));
    }
    kvio_rte_blobs_free(blobs, lengths, kvio_rte_size(xfer->rte));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s", xfer->error[0] ? xfer->error
                                                          : "cuda-ipc transport: set-up failed");
        xfer->ops->fini(xfer);
    }
    return status;
}

/* The sender closes the receivers' handles before they free the slots. */
static void ipc_detach(kvio_xfer_t *xfer)
{
    ipc_priv_t *priv = xfer->priv;
    for (int i = 0; priv->targets != NULL && i < xfer->num_receivers; i++) {
        ipc_target_t *target = &priv->targets[i];
        for (int slot = 0; slot < 2 && target->opened; slot++)
            if (target->slots[slot] != NULL)
                kvio_device_ipc_close(xfer->device, target->slots[slot]);
        if (target->opened)
            target->slots[0] = target->slots[1] = NULL;
        target->opened = false;
    }
}

static void ipc_fini(kvio_xfer_t *xfer)
{
    ipc_priv_t *priv = xfer->priv;
    ipc_detach(xfer);
    free(priv->targets);
    priv->targets = NULL;
    kvio_xfer_ucx_close(xfer);
    kvio_device_free(xfer->device, xfer->send_buffer);
    kvio_device_free(xfer->device, xfer->slots[0]);
    kvio_device_free(xfer->device, xfer->slots[1]);
    xfer->send_buffer = xfer->slots[0] = xfer->slots[1] = NULL;
}

static kvio_status_t ipc_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    ipc_priv_t *priv = xfer->priv;
    char *destination = priv->targets[target].slots[meta->slot & 1];
    const char *source = xfer->send_buffer;
    /* One copy, unless fault injection wants to count chunks. */
    uint64_t piece = xfer->config->die_after_chunks > 0 ? xfer->config->chunk : xfer->bytes;
    kvio_status_t status = KVIO_OK;
    for (uint64_t offset = 0; offset < xfer->bytes && status == KVIO_OK; offset += piece) {
        if (kvio_xfer_fault_now(xfer))
            return KVIO_ERR_INTERRUPTED;
        kvio_device_copy_t copy = {.dst = destination + offset, .src = source + offset,
                                   .bytes = xfer->bytes - offset < piece ? xfer->bytes - offset
                                                                         : piece};
        status = device_failed(xfer, kvio_device_copy_async(xfer->device, &copy, 1),
                               "device-to-device copy");
    }
    if (status == KVIO_OK)
        status = device_failed(xfer, kvio_device_sync(xfer->device),
                               "waiting for the device-to-device copy");
    return status;
}

const kvio_xfer_ops_t kvio_xfer_cuda_ipc_ops = {
    KVIO_XFER_ABOUT_CUDA_IPC,
    .priv_size = sizeof(ipc_priv_t),
    .init = ipc_init,
    .fini = ipc_fini,
    .detach = ipc_detach,
    .put = ipc_put,
    .notify = kvio_xfer_ucx_notify,
    .wait_credit = kvio_xfer_ucx_wait_credit,
    .poll = kvio_xfer_ucx_poll,
    .ack = kvio_xfer_ucx_ack,
    .progress = kvio_xfer_ucx_progress,
};

#endif /* KVIO_HAVE_UCX: without it, xfer/xfer.c keeps the stub */
