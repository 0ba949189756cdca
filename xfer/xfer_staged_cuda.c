/* The staged transport: GPU -> pinned host -> UCX -> pinned host -> GPU, in
 * chunks, double-buffered so the stages overlap. It reuses the ucx
 * transport's set-up (context, worker, endpoints, notices, acks). Receivers
 * keep two GPU receive slots and a ring of two chunk-sized host buffers that
 * UCX allocates (ucp_mem_map ALLOCATE; puts into malloc'd memory are
 * emulated in software by UCX 1.13) and CUDA page-locks. Per chunk k the
 * sender copies the next chunk device-to-host while it puts chunk k into
 * ring buffer k mod 2, flushes, and tells the receiver, which copies it
 * host-to-device into the slot and answers "drained"; ring buffer k mod 2 is
 * reused only after chunk k-2 drained. The put returns when the last chunk
 * is in GPU memory, so the notice still follows the data.
 * With host_hop: mapped (same node) the sender maps each receiver's ring
 * through UCX (ucp_rkey_ptr), page-locks the mapping, and its GPU copies
 * chunk k device-to-host straight into ring buffer k mod 2: no send ring
 * and no CPU copy, the same notices and drains. */
#include "xfer/xfer_int.h"

#ifdef KVIO_HAVE_UCX
#include "xfer/xfer_ucx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AM_CHUNK (KVIO_UCX_AM_USER + 0)
#define AM_DRAINED (KVIO_UCX_AM_USER + 1)
#define CHUNK_QUEUE 8

typedef struct chunk_message {
    uint64_t version;
    uint64_t index;  /* chunk number within the version */
    uint64_t offset; /* into the slot */
    uint64_t length;
    uint32_t slot;
    uint32_t ring;   /* ring buffer holding it */
} chunk_message_t;

typedef struct drained_message {
    uint64_t version;
    uint64_t index;
    int32_t receiver;
} drained_message_t;

typedef struct staged_priv {
    kvio_ucx_t ucx;           /* first: the shared notice and ack ops use it */
    uint64_t chunk;
    /* sender */
    void *send_ring[2];       /* pinned */
    uint64_t version;         /* being put */
    uint64_t *drained;        /* per receiver: chunks of version drained */
    void **mapped;            /* host_hop mapped: receiver i's ring r at [2 i + r] */
    kvio_status_t unmapped;   /* a ring could not be mapped: the first put fails so */
    bool *mapped_registered;  /* page-locked by this process */
    /* receiver */
    void *recv_ring[2];       /* memory[0..1], page-locked */
    bool registered[2];
    chunk_message_t queue[CHUNK_QUEUE];
    int queue_head, queue_count;
    bool queue_overflow;
    bool copying;             /* an H2D copy of queue[queue_head] is in flight */
    kvio_status_t failure;    /* a receiver-side failure, reported at the next poll */
} staged_priv_t;

static kvio_status_t device_failed(kvio_xfer_t *xfer, kvio_status_t status, const char *what)
{
    if (status != KVIO_OK)
        kvio_xfer_set_error(xfer, "staged transport: rank %d: %s: %s", kvio_rte_index(xfer->rte),
                            what, kvio_device_error(xfer->device));
    return status;
}

static ucs_status_t on_chunk(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    staged_priv_t *priv = arg;
    if (length != sizeof(chunk_message_t) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;
    if (priv->queue_count == CHUNK_QUEUE) {
        priv->queue_overflow = true;
        return UCS_OK;
    }
    memcpy(&priv->queue[(priv->queue_head + priv->queue_count) % CHUNK_QUEUE], data, length);
    priv->queue_count++;
    return UCS_OK;
}

static ucs_status_t on_drained(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    staged_priv_t *priv = arg;
    drained_message_t message;
    if (length != sizeof(message) || priv->drained == NULL)
        return UCS_OK;
    memcpy(&message, data, sizeof(message));
    if (message.version == priv->version && message.receiver >= 0 &&
        message.receiver < priv->ucx.size && message.index + 1 > priv->drained[message.receiver])
        priv->drained[message.receiver] = message.index + 1;
    return UCS_OK;
}

/* True when name is in the comma-separated list. */
static bool listed(const char *list, const char *name)
{
    size_t length = strlen(name);
    for (const char *at = list; (at = strstr(at, name)) != NULL; at += length)
        if ((at == list || at[-1] == ',' || at[-1] == '^') &&
            (at[length] == ',' || at[length] == '\0'))
            return true;
    return false;
}

/* host_hop mapped needs a transport UCX can map into another process
 * (shared memory: posix, sysv or xpmem, named alone or through sm, shm, mm
 * or all): refuses a UCX_TLS that leaves none, before any rank starts. */
static kvio_status_t staged_preflight(const kvio_xfer_config_t *config, uint64_t bytes,
                                      char *error_p, size_t error_len)
{
    (void)bytes;
    const char *tls = getenv("UCX_TLS");
    if (config->host_hop != KVIO_XFER_HOP_MAPPED || tls == NULL || tls[0] == '\0')
        return KVIO_OK;
    static const char *const groups[] = {"all", "sm", "shm", "mm"};
    static const char *const mappable[] = {"posix", "sysv", "xpmem"};
    bool excluding = tls[0] == '^', usable;
    if (excluding) {
        usable = true;
        for (size_t i = 1; i < sizeof(groups) / sizeof(groups[0]); i++)
            usable = usable && !listed(tls, groups[i]);
        bool all_three = true;
        for (size_t i = 0; i < sizeof(mappable) / sizeof(mappable[0]); i++)
            all_three = all_three && listed(tls, mappable[i]);
        usable = usable && !all_three;
    } else {
        usable = false;
        for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
            usable = usable || listed(tls, groups[i]);
        for (size_t i = 0; i < sizeof(mappable) / sizeof(mappable[0]); i++)
            usable = usable || listed(tls, mappable[i]);
    }
    if (usable)
        return KVIO_OK;
    snprintf(error_p, error_len, "staged transport: host_hop: mapped needs a shared-memory UCX "
             "transport to map the receivers' rings, but UCX_TLS=%s leaves none (posix, sysv "
             "or xpmem; or use host_hop: put)", tls);
    return KVIO_ERR_CONFIG;
}

/* Sender, host_hop mapped: maps every receiver's ring into this process
 * and page-locks it, or says why it cannot (another node, tcp). */
static kvio_status_t map_rings(kvio_xfer_t *xfer)
{
    staged_priv_t *priv = xfer->priv;
    size_t count = 2 * (size_t)xfer->num_receivers;
    priv->mapped = calloc(count + 1, sizeof(*priv->mapped));
    priv->mapped_registered = calloc(count + 1, sizeof(*priv->mapped_registered));
    if (priv->mapped == NULL || priv->mapped_registered == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < count; i++) {
        const kvio_ucx_remote_slots_t *remote = &priv->ucx.remote[i / 2];
        ucs_status_t mapped = ucp_rkey_ptr(remote->rkey[i % 2], remote->address[i % 2],
                                           &priv->mapped[i]);
        if (mapped != UCS_OK) {
            /* Reported by the first put, after every rank's set-up: UCX 1.13
             * asserts when workers go away with tcp connections half set up. */
            kvio_xfer_set_error(xfer, "staged transport: host_hop: mapped: rank %d's staging "
                                "ring cannot be mapped into this process (%s); it needs the "
                                "same node and a shared-memory UCX transport (or host_hop: put)",
                                xfer->receivers[i / 2], ucs_status_string(mapped));
            priv->unmapped = KVIO_ERR_UNSUPPORTED;
            return KVIO_OK;
        }
        kvio_status_t status = device_failed(xfer, kvio_device_host_register(xfer->device,
                                                                             priv->mapped[i],
                                                                             priv->chunk),
                                             "page-locking a receiver's mapped ring");
        if (status != KVIO_OK)
            return status;
        priv->mapped_registered[i] = true;
    }
    return KVIO_OK;
}

/* Sender: lets go of the receivers' mapped rings before they unmap them. */
static void staged_detach(kvio_xfer_t *xfer)
{
    staged_priv_t *priv = xfer->priv;
    if (xfer->device != NULL)
        kvio_device_sync(xfer->device);
    for (size_t i = 0; priv->mapped_registered != NULL && i < 2 * (size_t)xfer->num_receivers;
         i++) {
        if (priv->mapped_registered[i])
            kvio_device_host_unregister(xfer->device, priv->mapped[i]);
        priv->mapped_registered[i] = false;
    }
}

static kvio_status_t staged_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    staged_priv_t *priv = xfer->priv;
    void **blobs = NULL, *mine = NULL;
    size_t *lengths = NULL, mine_length = 0;
    priv->chunk = xfer->config->chunk;
    kvio_status_t status = kvio_xfer_ucx_open(xfer);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(&priv->ucx, AM_CHUNK, on_chunk, priv);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(&priv->ucx, AM_DRAINED, on_drained, priv);
    bool mapped = xfer->config->host_hop == KVIO_XFER_HOP_MAPPED;
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        status = device_failed(xfer, kvio_device_alloc(xfer->device, xfer->bytes,
                                                       &xfer->send_buffer),
                               "allocating the send buffer");
        for (int ring = 0; ring < 2 && status == KVIO_OK && !mapped; ring++)
            status = device_failed(xfer, kvio_device_host_alloc(xfer->device, priv->chunk,
                                                                &priv->send_ring[ring]),
                                   "allocating a pinned staging buffer");
        if (status == KVIO_OK &&
            (priv->drained = calloc((size_t)priv->ucx.size, sizeof(*priv->drained))) == NULL)
            status = KVIO_ERR_NOMEM;
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
            status = device_failed(xfer, kvio_device_alloc(xfer->device, xfer->bytes,
                                                           &xfer->slots[slot]),
                                   "allocating a receive slot");
        for (int ring = 0; ring < 2 && status == KVIO_OK; ring++) {
            status = kvio_xfer_ucx_map(xfer, NULL, priv->chunk, UCS_MEMORY_TYPE_HOST,
                                       &priv->ucx.memory[ring], &priv->recv_ring[ring]);
            if (status == KVIO_OK)
                status = device_failed(xfer, kvio_device_host_register(xfer->device,
                                                                       priv->recv_ring[ring],
                                                                       priv->chunk),
                                       "page-locking a staging buffer");
            priv->registered[ring] = status == KVIO_OK;
        }
        if (status == KVIO_OK)
            status = kvio_xfer_ucx_pack_slots(xfer, priv->recv_ring[0], priv->recv_ring[1],
                                              &mine, &mine_length);
    }
    kvio_status_t exchange = kvio_xfer_ucx_connect(xfer, mine, mine_length, &blobs, &lengths);
    if (status == KVIO_OK)
        status = exchange;
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        for (int i = 0; i < xfer->num_receivers && status == KVIO_OK; i++) {
            int rank = xfer->receivers[i];
            status = kvio_xfer_ucx_unpack_slots(xfer, rank, blobs[rank], lengths[rank],
                                                &priv->ucx.remote[i]);
        }
        if (status == KVIO_OK && mapped)
            status = map_rings(xfer);
        snprintf(xfer->info, sizeof(xfer->info),
                 "staged: %llu-byte chunks, double-buffered, %s; %s",
                 (unsigned long long)priv->chunk,
                 mapped ? "GPU to the receiver's ring mapped by ucx (same node, no CPU copy)"
                        : "put over ucx between pinned rings",
                 kvio_device_describe(xfer->device));
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        snprintf(xfer->info, sizeof(xfer->info), "staged receiver: %s",
                 kvio_device_describe(xfer->device));
    }
    kvio_rte_blobs_free(blobs, lengths, kvio_rte_size(xfer->rte));
    free(mine);
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s", xfer->error[0] ? xfer->error
                                                          : "staged transport: set-up failed");
        if (!xfer->error[0])
            snprintf(error_p, error_len, "staged transport: set-up failed: %s",
                     kvio_strerror(status));
        xfer->ops->fini(xfer);
    }
    return status;
}

static void staged_fini(kvio_xfer_t *xfer)
{
    staged_priv_t *priv = xfer->priv;
    staged_detach(xfer); /* syncs the device too */
    free(priv->mapped);
    free(priv->mapped_registered);
    priv->mapped = NULL;
    priv->mapped_registered = NULL;
    for (int ring = 0; ring < 2; ring++) {
        if (priv->registered[ring])
            kvio_device_host_unregister(xfer->device, priv->recv_ring[ring]);
        priv->registered[ring] = false;
        if (priv->send_ring[ring] != NULL)
            kvio_device_host_free(xfer->device, priv->send_ring[ring]);
        priv->send_ring[ring] = NULL;
    }
    kvio_xfer_ucx_close(xfer); /* unmaps the receive ring */
    kvio_device_free(xfer->device, xfer->send_buffer);
    kvio_device_free(xfer->device, xfer->slots[0]);
    kvio_device_free(xfer->device, xfer->slots[1]);
    xfer->send_buffer = xfer->slots[0] = xfer->slots[1] = NULL;
    free(priv->drained);
    priv->drained = NULL;
}

typedef struct drain_wait {
    staged_priv_t *priv;
    int target;
    uint64_t count;
} drain_wait_t;

static bool drained_enough(void *arg)
{
    drain_wait_t *wait = arg;
    return wait->priv->drained[wait->target] >= wait->count;
}

/* Per chunk k: ring buffer k mod 2 of the receiver is free once chunk k-2
 * drained. host_hop put stages chunk k+1 device-to-host into the other send
 * ring while chunk k is put; host_hop mapped has the GPU copy chunk k
 * straight into the receiver's ring (mapped here), and the receiver's
 * host-to-device copy of chunk k overlaps ours of chunk k+1. Either way the
 * receiver is told of each chunk, and the put returns once all drained. */
static kvio_status_t staged_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    staged_priv_t *priv = xfer->priv;
    if (priv->unmapped != KVIO_OK) {
        /* Flush every connection first: torn down half set up (nothing has
         * travelled on it yet), UCX 1.13 asserts over tcp. */
        for (int i = 0; i < xfer->num_receivers; i++)
            kvio_xfer_ucx_flush(xfer, xfer->receivers[i]);
        return priv->unmapped;
    }
    bool mapped = priv->mapped != NULL;
    int rank = xfer->receivers[target];
    const kvio_ucx_remote_slots_t *remote = &priv->ucx.remote[target];
    const char *source = xfer->send_buffer;
    uint64_t chunk = priv->chunk;
    uint64_t count = (xfer->bytes + chunk - 1) / chunk;
    priv->version = meta->version;
    priv->drained[target] = 0;
    drain_wait_t wait = {.priv = priv, .target = target};
    kvio_status_t status = KVIO_OK;
    if (!mapped) /* stage chunk 0 */
        status = device_failed(xfer, kvio_device_copy(xfer->device, priv->send_ring[0], source,
                                                      xfer->bytes < chunk ? xfer->bytes : chunk),
                               "device-to-host copy");
    for (uint64_t k = 0; k < count && status == KVIO_OK; k++) {
        uint64_t offset = k * chunk;
        uint64_t length = xfer->bytes - offset < chunk ? xfer->bytes - offset : chunk;
        int ring = (int)(k & 1);
        bool stage_next = !mapped && k + 1 < count;
        if (stage_next) {
            uint64_t next = offset + chunk;
            kvio_device_copy_t copy = {
                .dst = priv->send_ring[1 - ring], .src = source + next,
                .bytes = xfer->bytes - next < chunk ? xfer->bytes - next : chunk};
            status = device_failed(xfer, kvio_device_copy_async(xfer->device, &copy, 1),
                                   "device-to-host copy");
        }
        if (status == KVIO_OK && k >= 2) {
            wait.count = k - 1;
            status = kvio_xfer_ucx_wait(xfer, drained_enough, &wait, rank,
                                        "a staging buffer of");
        }
        if (mapped) {
            if (status == KVIO_OK && kvio_xfer_fault_now(xfer))
                return KVIO_ERR_INTERRUPTED;
            if (status == KVIO_OK)
                status = device_failed(
                    xfer, kvio_device_copy(xfer->device,
                                           priv->mapped[2 * (size_t)target + (size_t)ring],
                                           source + offset, length),
                    "device-to-host copy into a mapped ring");
        } else if (status == KVIO_OK) {
            status = kvio_xfer_ucx_put_region(xfer, rank, priv->send_ring[ring],
                                              remote->address[ring], remote->rkey[ring], length,
                                              length);
        }
        chunk_message_t message = {.version = meta->version, .index = k, .offset = offset,
                                   .length = length, .slot = meta->slot & 1,
                                   .ring = (uint32_t)ring};
        if (status == KVIO_OK)
            status = kvio_xfer_ucx_send_am(xfer, rank, AM_CHUNK, &message, sizeof(message));
        if (status == KVIO_OK && stage_next)
            status = device_failed(xfer, kvio_device_sync(xfer->device), "device-to-host copy");
    }
    /* The data is in GPU memory when every chunk drained. */
    if (status == KVIO_OK) {
        wait.count = count;
        status = kvio_xfer_ucx_wait(xfer, drained_enough, &wait, rank,
                                    "the last chunks to reach the GPU of");
    }
    return status;
}

/* Receiver: finishes the chunk copy in flight (answering "drained") and
 * starts the next one. */
static void staged_progress(kvio_xfer_t *xfer)
{
    staged_priv_t *priv = xfer->priv;
    ucp_worker_progress(priv->ucx.worker);
    if (xfer->role != KVIO_XFER_RECEIVER || priv->failure != KVIO_OK)
        return;
    if (priv->copying) {
        kvio_status_t status = kvio_device_poll(xfer->device);
        if (status == KVIO_INPROGRESS)
            return;
        chunk_message_t *done = &priv->queue[priv->queue_head];
        drained_message_t message = {.version = done->version, .index = done->index,
                                     .receiver = xfer->self_index};
        priv->copying = false;
        priv->queue_head = (priv->queue_head + 1) % CHUNK_QUEUE;
        priv->queue_count--;
        if (status == KVIO_OK)
            status = kvio_xfer_ucx_send_am(xfer, xfer->sender, AM_DRAINED, &message,
                                           sizeof(message));
        else
            device_failed(xfer, status, "host-to-device copy");
        if (status != KVIO_OK) {
            priv->failure = status;
            return;
        }
    }
    if (priv->queue_count > 0) {
        const chunk_message_t *next = &priv->queue[priv->queue_head];
        kvio_device_copy_t copy = {.dst = (char *)xfer->slots[next->slot & 1] + next->offset,
                                   .src = priv->recv_ring[next->ring & 1],
                                   .bytes = next->length};
        if (next->offset + next->length > xfer->bytes || next->length > priv->chunk) {
            kvio_xfer_set_error(xfer, "staged transport: chunk %llu does not fit the slot",
                                (unsigned long long)next->index);
            priv->failure = KVIO_ERR_TRANSPORT;
            return;
        }
        kvio_status_t status = device_failed(xfer, kvio_device_copy_async(xfer->device, &copy, 1),
                                             "host-to-device copy");
        if (status != KVIO_OK)
            priv->failure = status;
        priv->copying = status == KVIO_OK;
    }
}

static kvio_status_t staged_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p)
{
    staged_priv_t *priv = xfer->priv;
    staged_progress(xfer);
    if (priv->queue_overflow) {
        kvio_xfer_set_error(xfer, "staged transport: more than %d chunks queued", CHUNK_QUEUE);
        return KVIO_ERR_INTERNAL;
    }
    if (priv->failure != KVIO_OK)
        return priv->failure;
    return kvio_xfer_ucx_poll(xfer, meta_p);
}

const kvio_xfer_ops_t kvio_xfer_staged_ops = {
    KVIO_XFER_ABOUT_STAGED,
    .priv_size = sizeof(staged_priv_t),
    .preflight = staged_preflight,
    .init = staged_init,
    .fini = staged_fini,
    .detach = staged_detach,
    .put = staged_put,
    .notify = kvio_xfer_ucx_notify,
    .wait_credit = kvio_xfer_ucx_wait_credit,
    .poll = staged_poll,
    .ack = kvio_xfer_ucx_ack,
    .progress = staged_progress,
};

#endif /* KVIO_HAVE_UCX: without it, xfer/xfer.c keeps the stub */
