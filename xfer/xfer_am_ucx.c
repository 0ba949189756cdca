/* The active-message plumbing every ucx-based transport shares (ucx, its
 * chain fan-out, buckets, staged CUDA): installing a handler on the worker
 * and the receiver's queue of notices that the handlers fill and poll
 * drains. Below the transports, so that none calls another for it. */
#include "xfer/xfer_ucx_int.h"

#include "kvio/ucx_status.h"

bool kvio_xfer_ucx_queue_push(kvio_ucx_t *ucx, const kvio_xfer_meta_t *meta)
{
    if (ucx->queue_count == KVIO_UCX_QUEUE_LENGTH)
        return false;
    ucx->queue[(ucx->queue_head + ucx->queue_count) % KVIO_UCX_QUEUE_LENGTH] = *meta;
    ucx->queue_count++;
    if (meta->version > ucx->noticed_version)
        ucx->noticed_version = meta->version; /* its landed messages are old news */
    return true;
}

kvio_status_t kvio_xfer_ucx_set_handler(kvio_ucx_t *ucx, unsigned id,
                                        ucp_am_recv_callback_t callback, void *arg)
{
    ucp_am_handler_param_t param = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = id, .cb = callback, .arg = arg};
    return kvio_status_from_ucs(ucp_worker_set_am_recv_handler(ucx->worker, &param));
}
