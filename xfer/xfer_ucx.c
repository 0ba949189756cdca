/* The ucx transport: each rank has its own UCP context and worker; receivers
 * allocate two receive slots with ucp_mem_map(ALLOCATE) (UCX 1.13 emulates a
 * put into malloc'd memory in software) and publish their rkeys through the
 * runtime's allgather. The sender puts the buffer in chunks with a bounded
 * number in flight (or, into a slot UCX maps into it, stores them), summing
 * them on the way and telling the receiver what has landed as it goes,
 * flushes the endpoint so the bytes are at the target, and then sends an
 * active message with the update's meta. Receivers answer with an ack that
 * frees a slot. UCX_TLS is honoured; the lanes chosen are reported. Every
 * wait is bounded by the runtime's timeout. */
#include "xfer/xfer_ucx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/sysinfo.h"
#include "kvio/ucx_status.h"

typedef struct ack_message {
    uint64_t version;
    uint32_t free_slot;
    int32_t receiver; /* index into receivers */
} ack_message_t;

typedef kvio_ucx_t ucx_priv_t;
#define QUEUE_LENGTH KVIO_UCX_QUEUE_LENGTH
#define AM_UPDATE KVIO_UCX_AM_UPDATE
#define AM_ACK KVIO_UCX_AM_ACK


static ucs_status_t on_update(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    ucx_priv_t *priv = arg;
    if (length != sizeof(kvio_xfer_meta_t) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;
    kvio_xfer_meta_t meta;
    memcpy(&meta, data, sizeof(meta));
    if (!kvio_xfer_ucx_queue_push(priv, &meta))
        priv->queue_overflow = true;
    return UCS_OK;
}

/* News of a put under way: keeps the furthest prefix of the newest version
 * whose notice has not come (a message overtaken by its notice is dropped). */
static ucs_status_t on_landed(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    ucx_priv_t *priv = arg;
    kvio_ucx_landed_message_t message;
    if (length != sizeof(message) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;
    memcpy(&message, data, sizeof(message));
    if (message.magic != KVIO_XFER_MAGIC || message.version <= priv->noticed_version)
        return UCS_OK;
    if (message.version > priv->landed.version ||
        (message.version == priv->landed.version && message.bytes > priv->landed.bytes))
        priv->landed = message;
    return UCS_OK;
}

static ucs_status_t on_ack(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    ucx_priv_t *priv = arg;
    ack_message_t ack;
    if (length != sizeof(ack) || priv->acked == NULL)
        return UCS_OK;
    memcpy(&ack, data, sizeof(ack));
    if (ack.receiver >= 0 && ack.receiver < priv->size && ack.version > priv->acked[ack.receiver]) {
        priv->acked[ack.receiver] = ack.version;
        priv->free_slot[ack.receiver] = ack.free_slot & 1;
    }
    return UCS_OK;
}

/* A request is freed here, when it is done, not when it is posted:
 * ucp_request_free() on a request still in flight also drops its callback
 * ("no further notifications or callbacks"), so a put or notice that did not
 * complete inline (tcp, whose puts UCX emulates with active messages, or any
 * send queued behind wire-up) would never be counted down. */
static void request_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_priv_t *priv = user_data;
    priv->inflight--;
    if (status != UCS_OK)
        priv->request_error = status;
    ucp_request_free(request);
}

/* Requests outstanding above the limit in wait_inflight. */
typedef struct inflight_wait {
    const ucx_priv_t *priv;
    int limit;
} inflight_wait_t;

static bool inflight_below(void *arg)
{
    const inflight_wait_t *wait = arg;
    return wait->priv->inflight <= wait->limit;
}

/* Progresses until the outstanding requests drop to limit, while the peer
 * rank lives. */
static kvio_status_t wait_inflight(kvio_xfer_t *xfer, int limit, int peer, const char *what)
{
    ucx_priv_t *priv = xfer->priv;
    inflight_wait_t wait = {.priv = priv, .limit = limit};
    kvio_status_t status = kvio_xfer_ucx_wait(xfer, inflight_below, &wait, peer, what);
    if (status != KVIO_OK)
        return status;
    if (priv->request_error != UCS_OK) {
        kvio_xfer_set_error(xfer, "%s transport: %s rank %d: %s", xfer->ops->plugin.name, what, peer,
                            ucs_status_string(priv->request_error));
        return kvio_status_from_ucs(priv->request_error);
    }
    return KVIO_OK;
}

/* Counts a request that did not complete at once. */
static kvio_status_t track(kvio_xfer_t *xfer, ucs_status_ptr_t request, const char *what)
{
    ucx_priv_t *priv = xfer->priv;
    if (UCS_PTR_IS_ERR(request)) {
        kvio_xfer_set_error(xfer, "%s transport: %s: %s", xfer->ops->plugin.name, what,
                            ucs_status_string(UCS_PTR_STATUS(request)));
        return kvio_status_from_ucs(UCS_PTR_STATUS(request));
    }
    if (request != NULL)
        priv->inflight++; /* request_done counts it down and frees it */
    return KVIO_OK;
}

static ucp_request_param_t callback_param(ucx_priv_t *priv)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = request_done,
        .user_data = priv,
    };
    return param;
}

/* Transports whose lanes move bytes by a copy within one host's memory
 * (shared memory, or the kernel copying between two processes). */
static bool lane_in_memory(const char *transport_name)
{
    static const char *const in_memory[] = {"posix", "sysv", "cma", "xpmem", "knem", "self"};
    size_t length = strcspn(transport_name, "/");
    for (size_t i = 0; i < sizeof(in_memory) / sizeof(in_memory[0]); i++)
        if (strlen(in_memory[i]) == length && strncmp(transport_name, in_memory[i], length) == 0)
            return true;
    return false;
}

/* Summarises the lanes of an endpoint ("posix/memory cma/memory"), and
 * says whether its bulk lanes (rma_bw; am_bw where there is none) all copy
 * within this host's memory. */
static void describe_lanes(ucp_ep_h ep, char *text_p, size_t text_len, bool *in_memory_p)
{
    char *dump = NULL;
    size_t dump_length = 0;
    FILE *stream = open_memstream(&dump, &dump_length);
    text_p[0] = '\0';
    *in_memory_p = false;
    if (stream == NULL)
        return;
    ucp_ep_print_info(ep, stream);
    fclose(stream);
    size_t used = 0;
    int rma[2] = {0, 0}, am[2] = {0, 0}; /* bulk lanes: all of them, those in memory */
    for (char *line = strtok(dump, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *lane = strstr(line, "lane[");
        if (lane == NULL)
            continue;
        char *colon = strchr(lane, ':');
        if (colon == NULL)
            continue;
        char name[64] = "";
        if (sscanf(colon + 1, " %*d:%63s", name) != 1)
            continue;
        /* The roles UCX gave the lane (am, rma_bw, ...) follow "sysdev[N]". */
        char roles[64] = "";
        char *sysdev = strstr(colon, "sysdev[");
        char *close = sysdev ? strchr(sysdev, ']') : NULL;
        if (close != NULL)
            sscanf(close + 1, " %63[^\n]", roles);
        int *count = strstr(roles, "rma_bw") != NULL  ? rma
                     : strstr(roles, "am_bw") != NULL ? am
                                                      : NULL;
        if (count != NULL) {
            count[0]++;
            count[1] += lane_in_memory(name);
        }
        if (used < text_len)
            used += (size_t)snprintf(text_p + used, text_len - used, "%s%s%s%s%s",
                                     used ? ", " : "", name, roles[0] ? " (" : "", roles,
                                     roles[0] ? ")" : "");
    }
    const int *bulk = rma[0] > 0 ? rma : am;
    *in_memory_p = bulk[0] > 0 && bulk[1] == bulk[0];
    free(dump);
}

kvio_status_t kvio_xfer_ucx_map(kvio_xfer_t *xfer, void *address, uint64_t bytes,
                                ucs_memory_type_t memory_type, ucp_mem_h *memory_p,
                                void **address_p)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = address, .length = bytes,
        .flags = address == NULL ? UCP_MEM_MAP_ALLOCATE : 0};
    if (address != NULL) {
        params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        params.memory_type = memory_type;
    }
    ucs_status_t status = ucp_mem_map(priv->context, &params, memory_p);
    if (status != UCS_OK) {
        kvio_xfer_set_error(xfer, "%s transport: ucp_mem_map(%llu bytes%s): %s",
                            xfer->ops->plugin.name, (unsigned long long)bytes,
                            memory_type == UCS_MEMORY_TYPE_CUDA ? ", CUDA" : "",
                            ucs_status_string(status));
        return kvio_status_from_ucs(status);
    }
    ucp_mem_attr_t attributes = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_mem_query(*memory_p, &attributes);
    *address_p = attributes.address;
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_pack_slots(kvio_xfer_t *xfer, void *address0, void *address1,
                                       void **blob_p, size_t *length_p)
{
    ucx_priv_t *priv = xfer->priv;
    void *rkeys[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    kvio_status_t status = KVIO_OK;
    for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
        status = kvio_status_from_ucs(ucp_rkey_pack(priv->context, priv->memory[slot], &rkeys[slot],
                                        &sizes[slot]));
    char *blob = NULL;
    if (status == KVIO_OK && (blob = malloc(3 * sizeof(uint64_t) + sizes[0] + sizes[1])) == NULL)
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK) {
        uint64_t header[3] = {(uint64_t)(uintptr_t)address0, (uint64_t)(uintptr_t)address1,
                              sizes[0]};
        memcpy(blob, header, sizeof(header));
        memcpy(blob + sizeof(header), rkeys[0], sizes[0]);
        memcpy(blob + sizeof(header) + sizes[0], rkeys[1], sizes[1]);
        *blob_p = blob;
        *length_p = sizeof(header) + sizes[0] + sizes[1];
    }
    for (int slot = 0; slot < 2; slot++)
        if (rkeys[slot] != NULL)
            ucp_rkey_buffer_release(rkeys[slot]);
    return status;
}

kvio_status_t kvio_xfer_ucx_unpack_slots(kvio_xfer_t *xfer, int rank, const void *blob,
                                         size_t length, kvio_ucx_remote_slots_t *remote_p)
{
    ucx_priv_t *priv = xfer->priv;
    uint64_t header[3];
    if (length < sizeof(header)) {
        /* A peer's failure, not this rank's: its own error names the cause. */
        kvio_xfer_set_error(xfer, "%s transport: rank %d sent no receive slots (its set-up "
                            "failed)", xfer->ops->plugin.name, rank);
        return KVIO_ERR_PEER;
    }
    memcpy(header, blob, sizeof(header));
    if (length < sizeof(header) + header[2])
        return KVIO_ERR_INTERNAL;
    remote_p->address[0] = header[0];
    remote_p->address[1] = header[1];
    const char *rkeys[2] = {(const char *)blob + sizeof(header),
                            (const char *)blob + sizeof(header) + header[2]};
    kvio_status_t status = KVIO_OK;
    for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
        status = kvio_status_from_ucs(ucp_ep_rkey_unpack(priv->eps[rank], rkeys[slot],
                                             &remote_p->rkey[slot]));
    return status;
}

/* The remote slot as this process can store into it, or NULL for puts.
 * Ranks in one address space (own_memory: the local runtime's threads,
 * slots in kvio's own huge pages) whose UCX lanes copy within this host's
 * memory anyway (sm, cma): the receiver's own address, faulted in by its
 * owner. Otherwise, when the slot is shared memory that UCX attached
 * into this process (sysv/posix rkeys: UCX puts by memcpy through that
 * mapping, uct_sm_ep_put_short), the mapping, faulted in now, at set-up, as
 * Viper, NIXL and Mooncake register and touch their buffers before the
 * first transfer. That mapping is the sender's own, separate from the
 * receiver's, so the receiver's fault-in at create does not cover it, and
 * otherwise the first version into each slot pays a fault per 4 KiB page
 * inside the measured put. MADV_POPULATE_WRITE fills this process's page
 * tables without changing a byte; a read of every page then makes each one
 * known to whatever translates them below the kernel (a hypervisor's shadow
 * page tables, where populated tables alone left the first 1 GB update at
 * 0.43 GB/s against 5 GB/s after). The reads race nothing that matters: the
 * owner writes the same bytes (its fault-in) or nothing before the set-up
 * barrier. NULL for an rkey without a local pointer (cma, tcp); a kernel
 * without MADV_POPULATE_WRITE (before 5.14) leaves the page tables to the
 * reads. */
static void *map_remote(ucp_ep_h ep, ucp_rkey_h rkey, uint64_t address, uint64_t length,
                        bool own_memory)
{
    char lanes[256];
    bool in_memory = false;
    if (own_memory && length > 0) {
        /* Only where UCX's own bulk lanes copy within this memory too (sm,
         * cma): over tcp the bytes go as puts. */
        describe_lanes(ep, lanes, sizeof(lanes), &in_memory);
        return in_memory ? (void *)(uintptr_t)address : NULL;
    }
    void *local = NULL;
    if (length == 0 || ucp_rkey_ptr(rkey, address, &local) != UCS_OK)
        return NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
#ifdef MADV_POPULATE_WRITE
    uintptr_t start = (uintptr_t)local & ~((uintptr_t)page - 1);
    uintptr_t end = (uintptr_t)local + length;
    (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
#endif
    kvio_xfer_touch(local, length, (size_t)page);
    return local;
}

static kvio_status_t connect_to(kvio_xfer_t *xfer, int rank, void **addresses)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = addresses[rank], .err_mode = UCP_ERR_HANDLING_MODE_NONE};
    ucs_status_t status = ucp_ep_create(priv->worker, &params, &priv->eps[rank]);
    if (status == UCS_OK)
        return KVIO_OK;
    /* A peer whose own set-up failed has torn its worker down: that is its
     * failure (its error names the cause), once the runtime knows of it. */
    uint64_t deadline = kvio_time_ns() + 1000000000ull;
    while (!kvio_rte_peer_failed(xfer->rte, rank) && kvio_time_ns() < deadline) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&pause, NULL);
    }
    if (kvio_rte_peer_failed(xfer->rte, rank)) {
        kvio_xfer_set_error(xfer, "%s transport: rank %d failed during set-up",
                            xfer->ops->plugin.name, rank);
        return KVIO_ERR_PEER;
    }
    kvio_xfer_set_error(xfer, "%s transport: connecting to rank %d: %s", xfer->ops->plugin.name,
                        rank, ucs_status_string(status));
    return kvio_status_from_ucs(status);
}

bool kvio_xfer_ucx_takes_cuda(const kvio_ucx_t *ucx)
{
    return (ucx->memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

kvio_status_t kvio_xfer_ucx_open(kvio_xfer_t *xfer)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_config_t *config = NULL;
    priv->size = kvio_rte_size(xfer->rte);
    kvio_status_t status = kvio_status_from_ucs(ucp_config_read(NULL, NULL, &config));
    if (status != KVIO_OK)
        return status;
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AM};
    status = kvio_status_from_ucs(ucp_init(&params, config, &priv->context));
    ucp_config_release(config);
    if (status != KVIO_OK)
        return status;
    ucp_context_attr_t context_attributes = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(priv->context, &context_attributes) == UCS_OK)
        priv->memory_types = context_attributes.memory_types;
    ucp_worker_params_t worker_params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                         .thread_mode = UCS_THREAD_MODE_SINGLE};
    status = kvio_status_from_ucs(ucp_worker_create(priv->context, &worker_params, &priv->worker));
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(priv, AM_UPDATE, on_update, priv);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(priv, AM_ACK, on_ack, priv);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(priv, KVIO_UCX_AM_LANDED, on_landed, priv);
    if (status != KVIO_OK)
        return status;
    priv->eps = calloc((size_t)priv->size, sizeof(*priv->eps));
    if (priv->eps == NULL)
        return KVIO_ERR_NOMEM;
    if (xfer->role == KVIO_XFER_SENDER) {
        priv->remote = calloc((size_t)xfer->num_receivers + 1, sizeof(*priv->remote));
        priv->acked = calloc((size_t)xfer->num_receivers + 1, sizeof(*priv->acked));
        priv->free_slot = calloc((size_t)xfer->num_receivers + 1, sizeof(*priv->free_slot));
        if (priv->remote == NULL || priv->acked == NULL || priv->free_slot == NULL)
            return KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_connect(kvio_xfer_t *xfer, const void *blob, size_t length,
                                    void ***blobs_p, size_t **lengths_p)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_address_t *address = NULL;
    size_t address_length = 0;
    void **addresses = NULL, **blobs = NULL;
    size_t *address_lengths = NULL, *lengths = NULL;
    /* A rank whose set-up failed still takes part (with an empty address),
     * so that its peers are not left waiting; it then reports its error. */
    kvio_status_t status = priv->worker != NULL
                               ? kvio_status_from_ucs(ucp_worker_get_address(priv->worker, &address,
                                                                 &address_length))
                               : KVIO_ERR_INTERNAL;
    kvio_status_t exchange = kvio_rte_allgather_blobs(
        xfer->rte, address != NULL ? (const void *)address : "", address_length, &addresses,
        &address_lengths);
    if (exchange == KVIO_OK)
        exchange = kvio_rte_allgather_blobs(xfer->rte, blob != NULL ? blob : "", length, &blobs,
                                            &lengths);
    if (status == KVIO_OK)
        status = exchange;
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        for (int i = 0; i < xfer->num_receivers && status == KVIO_OK; i++)
            status = connect_to(xfer, xfer->receivers[i], addresses);
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        status = connect_to(xfer, xfer->sender, addresses);
        int next = xfer->self_index + 1;
        if (status == KVIO_OK && xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN &&
            next < xfer->num_receivers)
            status = connect_to(xfer, xfer->receivers[next], addresses);
        /* Buckets on a chain or tree: to the receivers this one forwards to. */
        int children[2];
        int count = xfer->config->num_buckets > 0
                        ? kvio_xfer_route_children(xfer, xfer->self_index, children)
                        : 0;
        for (int i = 0; i < count && status == KVIO_OK; i++)
            status = connect_to(xfer, xfer->receivers[children[i]], addresses);
    }
    if (address != NULL)
        ucp_worker_release_address(priv->worker, address);
    kvio_rte_blobs_free(addresses, address_lengths, priv->size);
    if (status == KVIO_OK) {
        *blobs_p = blobs;
        *lengths_p = lengths;
    } else {
        kvio_rte_blobs_free(blobs, lengths, priv->size);
    }
    return status;
}

/* The memory of the sender's buffer or a receiver's slot, before UCX
 * registers it: GPU memory on a device; kvio's own huge pages, faulted in
 * now, when own_memory (UCX then maps nothing: the sender stores at the
 * slot's own address); else NULL, and UCX allocates it (shared memory that
 * a rank in another process can attach). */
static kvio_status_t buffer_alloc(kvio_xfer_t *xfer, bool on_gpu, bool own_memory, int slot,
                                  void **buffer_p)
{
    ucx_priv_t *priv = xfer->priv;
    if (on_gpu)
        return kvio_device_alloc(xfer->device, xfer->bytes, buffer_p);
    if (!own_memory)
        return KVIO_OK;
    kvio_status_t status = kvio_fault_in_alloc(xfer->bytes, NULL, &priv->owned[slot]);
    if (status != KVIO_OK) {
        kvio_xfer_set_error(xfer, "%s transport: cannot map %llu bytes for the %s: %s",
                            xfer->ops->plugin.name, (unsigned long long)xfer->bytes,
                            xfer->role == KVIO_XFER_SENDER ? "send buffer" : "receive slots",
                            kvio_strerror(status));
        return status;
    }
    *buffer_p = priv->owned[slot];
    return KVIO_OK;
}

/* Closes UCX (unmapping every buffer), then frees the buffers kvio gave it:
 * gpu_buffers (the device's) and the huge pages of own memory. */
static void buffers_free(kvio_xfer_t *xfer, void *gpu_buffers[2])
{
    ucx_priv_t *priv = xfer->priv;
    void *owned[2] = {priv->owned[0], priv->owned[1]};
    kvio_xfer_ucx_close(xfer); /* clears priv */
    for (int slot = 0; slot < 2; slot++) {
        if (gpu_buffers[slot] != NULL && xfer->device != NULL)
            kvio_device_free(xfer->device, gpu_buffers[slot]);
        else
            kvio_fault_in_free(owned[slot], xfer->bytes);
    }
}

static kvio_status_t ucx_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    ucx_priv_t *priv = xfer->priv;
    void **slot_blobs = NULL, *my_slots = NULL;
    size_t *slot_lengths = NULL, my_slots_length = 0;
    kvio_status_t status = kvio_xfer_ucx_open(xfer);
    /* Weights on the GPU only when this UCX can take CUDA memory (Debian's
     * cannot): never hand it a device pointer otherwise. */
    bool on_gpu = xfer->device != NULL;
    if (status == KVIO_OK && on_gpu && !kvio_xfer_ucx_takes_cuda(priv)) {
        kvio_xfer_set_error(xfer, "ucx transport: this UCX cannot access CUDA memory (its "
                            "memory types do not include cuda): use train.transport.kind: "
                            "staged or cuda-ipc for weights on the GPU");
        status = KVIO_ERR_UNSUPPORTED;
    }
    void *gpu_buffers[2] = {NULL, NULL};
    ucs_memory_type_t memory_type = on_gpu ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    /* ucx_path: put keeps every chunk a UCX put, even where UCX could map
     * the slot. */
    bool mapped_path = xfer->config->ucx_path == KVIO_XFER_HOP_MAPPED;
    bool own_memory = !on_gpu && mapped_path && kvio_rte_shared_memory(xfer->rte);
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        status = buffer_alloc(xfer, on_gpu, own_memory, 0, &gpu_buffers[0]);
        if (status == KVIO_OK)
            status = kvio_xfer_ucx_map(xfer, gpu_buffers[0], xfer->bytes, memory_type,
                                       &priv->memory[0], &xfer->send_buffer);
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        for (int slot = 0; slot < 2 && status == KVIO_OK; slot++) {
            status = buffer_alloc(xfer, on_gpu, own_memory, slot, &gpu_buffers[slot]);
            if (status == KVIO_OK)
                status = kvio_xfer_ucx_map(xfer, gpu_buffers[slot], xfer->bytes, memory_type,
                                           &priv->memory[slot], &xfer->slots[slot]);
        }
        if (status == KVIO_OK)
            status = kvio_xfer_ucx_pack_slots(xfer, xfer->slots[0], xfer->slots[1], &my_slots,
                                              &my_slots_length);
    }
    if (on_gpu && xfer->device != NULL && kvio_device_error(xfer->device)[0] != '\0')
        kvio_xfer_set_error(xfer, "ucx transport: %s", kvio_device_error(xfer->device));
    kvio_status_t exchange = kvio_xfer_ucx_connect(xfer, my_slots, my_slots_length, &slot_blobs,
                                                   &slot_lengths);
    if (status == KVIO_OK)
        status = exchange;
    if (status != KVIO_OK)
        goto fail;
    if (xfer->role == KVIO_XFER_SENDER) {
        for (int i = 0; i < xfer->num_receivers && status == KVIO_OK; i++) {
            int rank = xfer->receivers[i];
            status = kvio_xfer_ucx_unpack_slots(xfer, rank, slot_blobs[rank], slot_lengths[rank],
                                                &priv->remote[i]);
            for (int slot = 0; slot < 2 && status == KVIO_OK && !on_gpu && mapped_path; slot++)
                priv->remote[i].mapped[slot] = map_remote(
                    priv->eps[rank], priv->remote[i].rkey[slot], priv->remote[i].address[slot],
                    xfer->bytes, own_memory);
        }
        if (status == KVIO_OK && xfer->num_receivers > 0) {
            char lanes[256];
            bool lanes_in_memory = true;
            for (int i = xfer->num_receivers - 1; i >= 0; i--) { /* the text: receiver 0's */
                bool in_memory = false;
                describe_lanes(priv->eps[xfer->receivers[i]], lanes, sizeof(lanes), &in_memory);
                lanes_in_memory = lanes_in_memory && in_memory;
            }
            const char *tls = getenv("UCX_TLS");
            bool stores = true; /* a chain's first hop; the servers' own hops may differ */
            int mapped_receivers = xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN
                                       ? 1 : xfer->num_receivers;
            for (int i = 0; i < mapped_receivers; i++)
                stores = stores && priv->remote[i].mapped[0] && priv->remote[i].mapped[1];
            /* A copy within this host's memory: what a memcpy bounds. */
            xfer->in_memory = !on_gpu && (stores || lanes_in_memory);
            snprintf(xfer->info, sizeof(xfer->info), "ucx: lanes %s (UCX_TLS=%s)%s%s%s", lanes,
                     tls ? tls : "default", on_gpu ? ", weights in CUDA memory" : "",
                     xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN ? ", chain fan-out" : "",
                     !stores      ? ""
                     : own_memory ? ", stores into the slots (one address space, huge pages)"
                                  : ", stores through the mapped slots");
        }
    } else if (xfer->role == KVIO_XFER_RECEIVER) {
        int next = xfer->self_index + 1;
        if (xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN && next < xfer->num_receivers) {
            /* Chain: this receiver forwards into the next one's slots. */
            int rank = xfer->receivers[next];
            status = kvio_xfer_ucx_unpack_slots(xfer, rank, slot_blobs[rank], slot_lengths[rank],
                                                &priv->next);
            for (int slot = 0; slot < 2 && status == KVIO_OK && !on_gpu && mapped_path; slot++)
                priv->next.mapped[slot] = map_remote(priv->eps[rank], priv->next.rkey[slot],
                                                     priv->next.address[slot], xfer->bytes,
                                                     own_memory);
        }
        snprintf(xfer->info, sizeof(xfer->info), "ucx receiver");
    }
    if (status == KVIO_OK && xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN &&
        xfer->role != KVIO_XFER_BYSTANDER)
        status = kvio_xfer_ucx_chain_init(xfer);
    if (status != KVIO_OK)
        goto fail;
    kvio_rte_blobs_free(slot_blobs, slot_lengths, priv->size);
    free(my_slots);
    return KVIO_OK;
fail:
    snprintf(error_p, error_len, "%s", xfer->error[0] ? xfer->error
                                                      : "ucx transport: set-up failed");
    if (!xfer->error[0])
        snprintf(error_p, error_len, "ucx transport: set-up failed: %s", kvio_strerror(status));
    kvio_rte_blobs_free(slot_blobs, slot_lengths, priv->size);
    free(my_slots);
    /* fini runs only after a successful init: undo here. */
    buffers_free(xfer, gpu_buffers);
    return status;
}

void kvio_xfer_ucx_close(kvio_xfer_t *xfer)
{
    ucx_priv_t *priv = xfer->priv;
    if (priv->remote != NULL)
        for (int i = 0; i < xfer->num_receivers; i++)
            for (int slot = 0; slot < 2; slot++)
                if (priv->remote[i].rkey[slot] != NULL)
                    ucp_rkey_destroy(priv->remote[i].rkey[slot]);
    for (int slot = 0; slot < 2; slot++)
        if (priv->next.rkey[slot] != NULL)
            ucp_rkey_destroy(priv->next.rkey[slot]);
    if (priv->eps != NULL) {
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = UCP_EP_CLOSE_FLAG_FORCE};
        for (int rank = 0; rank < priv->size; rank++) {
            if (priv->eps[rank] == NULL)
                continue;
            ucs_status_ptr_t request = ucp_ep_close_nbx(priv->eps[rank], &param);
            uint64_t deadline = kvio_time_ns() + 1000000000ull;
            while (request != NULL && !UCS_PTR_IS_ERR(request) &&
                   ucp_request_check_status(request) == UCS_INPROGRESS &&
                   kvio_time_ns() < deadline)
                ucp_worker_progress(priv->worker);
            if (request != NULL && !UCS_PTR_IS_ERR(request))
                ucp_request_free(request);
        }
    }
    for (int slot = 0; slot < 2; slot++)
        if (priv->memory[slot] != NULL)
            ucp_mem_unmap(priv->context, priv->memory[slot]);
    if (priv->worker != NULL)
        ucp_worker_destroy(priv->worker);
    if (priv->context != NULL)
        ucp_cleanup(priv->context);
    free(priv->eps);
    free(priv->remote);
    free(priv->acked);
    free(priv->free_slot);
    free(priv->chain); /* after the worker: its requests' callbacks point into it */
    memset(priv, 0, sizeof(*priv));
}

static void ucx_fini(kvio_xfer_t *xfer)
{
    /* GPU buffers were registered, not allocated, by UCX: free them after. */
    void *gpu_buffers[2] = {NULL, NULL};
    if (xfer->device != NULL) {
        gpu_buffers[0] = xfer->role == KVIO_XFER_SENDER ? xfer->send_buffer : xfer->slots[0];
        gpu_buffers[1] = xfer->role == KVIO_XFER_SENDER ? NULL : xfer->slots[1];
    }
    buffers_free(xfer, gpu_buffers);
}

static kvio_status_t ucx_preflight(const kvio_xfer_config_t *config, uint64_t bytes,
                                   char *error_p, size_t error_len)
{
    if (config->device.weights != KVIO_WEIGHTS_CUDA)
        return KVIO_OK;
    /* Weights on the GPU need a UCX with CUDA memory, unless they fall back
     * to host because there is no device. */
    ucp_config_t *ucp_config = NULL;
    ucp_context_h context = NULL;
    uint64_t memory_types = 0;
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AM};
    if (ucp_config_read(NULL, NULL, &ucp_config) == UCS_OK) {
        if (ucp_init(&params, ucp_config, &context) == UCS_OK) {
            ucp_context_attr_t attributes = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
            if (ucp_context_query(context, &attributes) == UCS_OK)
                memory_types = attributes.memory_types;
            ucp_cleanup(context);
        }
        ucp_config_release(ucp_config);
    }
    if (memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))
        return KVIO_OK;
    kvio_device_info_t info;
    char reason[512];
    bool have_device = kvio_device_query((int)config->device.index, &info, reason,
                                         sizeof(reason)) == KVIO_OK;
    if (!have_device && config->device.fallback == KVIO_FALLBACK_HOST)
        return KVIO_OK;
    snprintf(error_p, error_len, "ucx transport: this UCX cannot access CUDA memory (its "
             "memory types do not include cuda): use train.transport.kind: staged or cuda-ipc "
             "for device.weights: cuda");
    return KVIO_ERR_UNSUPPORTED;
}

/* A receiver's acknowledgement of the version before meta's. */
typedef struct credit_wait {
    const ucx_priv_t *priv;
    int target;
    uint64_t version;
} credit_wait_t;

static bool credit_back(void *arg)
{
    const credit_wait_t *wait = arg;
    return wait->priv->acked[wait->target] + 1 >= wait->version;
}

kvio_status_t kvio_xfer_ucx_wait_credit(kvio_xfer_t *xfer, int target, kvio_xfer_meta_t *meta)
{
    ucx_priv_t *priv = xfer->priv;
    int rank = xfer->receivers[target];
    if (meta->version <= 1 || priv->acked[target] + 1 >= meta->version) {
        meta->slot = meta->version <= 1 ? 0 : priv->free_slot[target];
        return KVIO_OK;
    }
    char what[96];
    snprintf(what, sizeof(what), "a slot for version %llu from",
             (unsigned long long)meta->version);
    credit_wait_t wait = {.priv = priv, .target = target, .version = meta->version};
    kvio_status_t status = kvio_xfer_ucx_wait(xfer, credit_back, &wait, rank, what);
    if (status != KVIO_OK)
        return status;
    meta->slot = priv->free_slot[target];
    return KVIO_OK;
}

/* Before each chunk: room for it among the puts in flight, and the fault
 * knob (a dead sender leaves its puts behind: KVIO_ERR_INTERRUPTED). */
static kvio_status_t chunk_turn(kvio_xfer_t *xfer, int limit, int rank)
{
    kvio_status_t status = wait_inflight(xfer, limit - 1, rank, "puts to");
    if (status == KVIO_OK && kvio_xfer_fault_now(xfer))
        status = KVIO_ERR_INTERRUPTED;
    return status;
}

static kvio_status_t put_chunk(kvio_xfer_t *xfer, ucp_ep_h ep, const void *local,
                               uint64_t piece, uint64_t remote, ucp_rkey_h rkey)
{
    ucp_request_param_t param = callback_param(xfer->priv);
    return track(xfer, ucp_put_nbx(ep, local, piece, remote, rkey, &param), "ucp_put_nbx");
}

kvio_status_t kvio_xfer_ucx_put_region(kvio_xfer_t *xfer, int rank, const void *local,
                                       uint64_t remote, ucp_rkey_h rkey, uint64_t length,
                                       uint64_t chunk)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_ep_h ep = priv->eps[rank];
    int limit = (int)xfer->config->inflight;
    priv->request_error = UCS_OK;
    kvio_status_t status = KVIO_OK;
    for (uint64_t offset = 0; offset < length && status == KVIO_OK; offset += chunk) {
        uint64_t piece = length - offset < chunk ? length - offset : chunk;
        status = chunk_turn(xfer, limit, rank);
        if (status == KVIO_OK)
            status = put_chunk(xfer, ep, (const char *)local + offset, piece, remote + offset,
                               rkey);
    }
    if (status == KVIO_OK)
        status = wait_inflight(xfer, 0, rank, "puts to");
    return status == KVIO_OK ? kvio_xfer_ucx_flush(xfer, rank) : status;
}

kvio_status_t kvio_xfer_ucx_flush(kvio_xfer_t *xfer, int rank)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_request_param_t param = callback_param(priv);
    kvio_status_t status = track(xfer, ucp_ep_flush_nbx(priv->eps[rank], &param),
                                 "ucp_ep_flush_nbx");
    if (status == KVIO_OK)
        status = wait_inflight(xfer, 0, rank, "a flush to");
    return status;
}

static void landing_flush_done(void *request, ucs_status_t status, void *user_data)
{
    kvio_ucx_landing_t *landing = user_data;
    landing->flushing = false;
    if (status == UCS_OK)
        landing->flushed = landing->flush_target;
    else
        landing->error = status;
    ucp_request_free(request);
}

static void landing_send_done(void *request, ucs_status_t status, void *user_data)
{
    kvio_ucx_landing_t *landing = user_data;
    landing->sending = false;
    if (status != UCS_OK)
        landing->error = status;
    ucp_request_free(request);
}

static bool landing_idle(void *arg)
{
    const kvio_ucx_landing_t *landing = arg;
    return !landing->flushing && !landing->sending;
}

/* Tells the receiver of a put under way how much is certainly in its slot,
 * without waiting: when no flush is in flight, flushes what is posted (a
 * flush completes once the puts posted before it are at the target; puts
 * posted after it go on meanwhile); once a flush is done and no message is
 * in flight, says how far it reached. Stores through a mapped slot are in
 * place once stored (and fenced). */
static kvio_status_t announce_landed(kvio_xfer_t *xfer, ucp_ep_h ep, int rank)
{
    ucx_priv_t *priv = xfer->priv;
    kvio_ucx_landing_t *landing = &priv->landing;
    if (landing->error != UCS_OK) {
        kvio_xfer_set_error(xfer, "%s transport: telling rank %d what has landed: %s",
                            xfer->ops->plugin.name, rank, ucs_status_string(landing->error));
        return kvio_status_from_ucs(landing->error);
    }
    if (landing->stored) {
        landing->flushed = landing->posted;
    } else if (!landing->flushing && landing->posted > landing->flush_target) {
        landing->flush_target = landing->posted;
        ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = landing_flush_done, .user_data = landing};
        ucs_status_ptr_t request = ucp_ep_flush_nbx(ep, &param);
        if (UCS_PTR_IS_ERR(request))
            return track(xfer, request, "ucp_ep_flush_nbx");
        if (request == NULL)
            landing->flushed = landing->flush_target;
        else
            landing->flushing = true;
    }
    if (landing->flushed > landing->announced && !landing->sending) {
        landing->message.bytes = landing->flushed;
        ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_FLAGS,
            .cb.send = landing_send_done, .user_data = landing,
            .flags = UCP_AM_SEND_FLAG_EAGER};
        ucs_status_ptr_t request = ucp_am_send_nbx(ep, KVIO_UCX_AM_LANDED, NULL, 0,
                                                   &landing->message,
                                                   sizeof(landing->message), &param);
        if (UCS_PTR_IS_ERR(request))
            return track(xfer, request, "ucp_am_send_nbx");
        landing->sending = request != NULL;
        landing->announced = landing->flushed;
        /* Stores make no UCX progress of their own: the news of a stored
         * chunk is out before the next one (an active message within this
         * host's memory, microseconds against a chunk's copy), so a sender
         * that dies leaves its receiver told of every chunk it stored. */
        if (landing->stored && landing->sending)
            return kvio_xfer_ucx_wait(xfer, landing_idle, landing, rank, "news of a store to");
    }
    return KVIO_OK;
}

/* The sequential put of the whole buffer into one receiver's slot, in
 * chunks, each summed on its way (when the publish computes the checksum),
 * the receiver told as the prefix in its slot grows (so that it can check
 * it meanwhile), then a flush: the bytes are at the target when it returns.
 * A slot that UCX mapped into this process (shared memory) is written by
 * this thread's stores (kvio_xfer_store_piece): the memcpy a UCX put into
 * it does, with streaming stores and the checksum taken from the copy's own
 * loads. Otherwise ucp_put_nbx with `inflight` outstanding, each chunk
 * summed just before it is put. */
static kvio_status_t ucx_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    ucx_priv_t *priv = xfer->priv;
    const kvio_ucx_remote_slots_t *remote = &priv->remote[target];
    int slot = (int)(meta->slot & 1), rank = xfer->receivers[target];
    ucp_ep_h ep = priv->eps[rank];
    const char *local = xfer->send_buffer;
    uint64_t length = xfer->bytes, chunk = xfer->config->chunk;
    int limit = (int)xfer->config->inflight;
    char *mapped = remote->mapped[slot];
    kvio_ucx_landing_t *landing = &priv->landing;
    *landing = (kvio_ucx_landing_t){
        .stored = mapped != NULL,
        .message = {.magic = KVIO_XFER_MAGIC, .version = meta->version, .slot = (uint32_t)slot}};
    priv->request_error = UCS_OK;
    kvio_status_t status = KVIO_OK;
    for (uint64_t offset = 0; offset < length && status == KVIO_OK; offset += chunk) {
        uint64_t piece = length - offset < chunk ? length - offset : chunk;
        status = chunk_turn(xfer, limit, rank);
        if (status != KVIO_OK)
            break;
        if (mapped != NULL) {
            kvio_xfer_store_piece(xfer, mapped + offset, offset, piece);
        } else {
            kvio_xfer_hash_piece(xfer, offset, piece);
            status = put_chunk(xfer, ep, local + offset, piece, remote->address[slot] + offset,
                               remote->rkey[slot]);
        }
        landing->posted = offset + piece;
        if (status == KVIO_OK)
            status = announce_landed(xfer, ep, rank);
    }
    if (status == KVIO_OK)
        status = wait_inflight(xfer, 0, rank, "puts to");
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_flush(xfer, rank);
    /* The message buffer is the next put's: nothing of this one in flight. */
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_wait(xfer, landing_idle, landing, rank, "news of a put to");
    return status;
}

/* Receiver: the version on its way (sequential: the sender's landed
 * messages; chain: what the rank before said is in). */
static kvio_status_t ucx_landed(kvio_xfer_t *xfer, kvio_xfer_landed_t *landed_p)
{
    ucx_priv_t *priv = xfer->priv;
    if (priv->chain != NULL)
        return kvio_xfer_ucx_chain_landed(xfer, landed_p);
    if (priv->landed.version == 0 || priv->landed.version <= priv->noticed_version)
        return KVIO_INPROGRESS;
    *landed_p = (kvio_xfer_landed_t){.version = priv->landed.version,
                                     .slot = priv->landed.slot <= 1 ? (int)priv->landed.slot : -1,
                                     .bytes = priv->landed.bytes};
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_send_am(kvio_xfer_t *xfer, int rank, unsigned id,
                                    const void *data, size_t length)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_request_param_t param = callback_param(priv);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    priv->request_error = UCS_OK;
    kvio_status_t status = track(xfer, ucp_am_send_nbx(priv->eps[rank], id, NULL, 0, data,
                                                       length, &param),
                                 "ucp_am_send_nbx");
    if (status == KVIO_OK)
        status = wait_inflight(xfer, 0, rank, "a notice to");
    return status;
}

kvio_status_t kvio_xfer_ucx_wait(kvio_xfer_t *xfer, bool (*done)(void *arg), void *arg,
                                 int peer, const char *what)
{
    ucx_priv_t *priv = xfer->priv;
    unsigned idle = 0;
    while (!done(arg)) {
        if (ucp_worker_progress(priv->worker) != 0) {
            idle = 0;
            continue;
        }
        /* The peer's liveness, not its pace, ends the wait (looked at
         * every 64 idle rounds: it is cheap, but not free). */
        if (++idle % 64 != 0)
            continue;
        char waiting_for[160], reason[512];
        snprintf(waiting_for, sizeof(waiting_for), "%s rank %d", what, peer);
        /* A peer that has ended (after the run's last barrier) can no
         * longer take part in a transfer: owes. */
        kvio_status_t status = kvio_rte_peer_check(xfer->rte, peer, true, waiting_for, reason,
                                                   sizeof(reason));
        if (status != KVIO_OK) {
            kvio_xfer_set_error(xfer, "%s transport: %s", xfer->ops->plugin.name, reason);
            return status;
        }
    }
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_notify(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    return kvio_xfer_ucx_send_am(xfer, xfer->receivers[target], AM_UPDATE, meta, sizeof(*meta));
}

kvio_status_t kvio_xfer_ucx_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p)
{
    ucx_priv_t *priv = xfer->priv;
    ucp_worker_progress(priv->worker);
    if (priv->chain != NULL) {
        kvio_status_t status = kvio_xfer_ucx_chain_progress(xfer);
        if (status != KVIO_OK)
            return status;
    }
    if (priv->queue_overflow) {
        kvio_xfer_set_error(xfer, "%s transport: more than %d notices queued", xfer->ops->plugin.name,
                            QUEUE_LENGTH);
        return KVIO_ERR_INTERNAL;
    }
    if (priv->queue_count == 0)
        return KVIO_INPROGRESS;
    *meta_p = priv->queue[priv->queue_head];
    priv->queue_head = (priv->queue_head + 1) % QUEUE_LENGTH;
    priv->queue_count--;
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_ack(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta)
{
    ack_message_t ack = {.version = meta->version, .free_slot = meta->slot,
                         .receiver = xfer->self_index};
    return kvio_xfer_ucx_send_am(xfer, xfer->sender, AM_ACK, &ack, sizeof(ack));
}

/* Bounded drain: over tcp UCX emulates puts with active messages that only
 * land while the target progresses, one segment per event, so one call
 * per turn of a receiver's loop (which naps when idle) would throttle them. */
#define PROGRESS_BURST 256

void kvio_xfer_ucx_progress(kvio_xfer_t *xfer)
{
    ucx_priv_t *priv = xfer->priv;
    for (int i = 0; i < PROGRESS_BURST && ucp_worker_progress(priv->worker) != 0; i++)
        ;
    if (priv->chain != NULL && xfer->role == KVIO_XFER_RECEIVER)
        (void)kvio_xfer_ucx_chain_progress(xfer); /* an error is kept for the next poll */
}

const kvio_xfer_ops_t kvio_xfer_ucx_ops = {
    KVIO_XFER_ABOUT_UCX,
    .priv_size = sizeof(ucx_priv_t),
    .preflight = ucx_preflight,
    .init = ucx_init,
    .fini = ucx_fini,
    .put = ucx_put,
    .chain = kvio_xfer_ucx_chain,
    .notify = kvio_xfer_ucx_notify,
    .wait_credit = kvio_xfer_ucx_wait_credit,
    .poll = kvio_xfer_ucx_poll,
    .landed = ucx_landed,
    .ack = kvio_xfer_ucx_ack,
    .progress = kvio_xfer_ucx_progress,
};
