/* The P/D KV link (emulate): the staging regions (host memory mapped with
 * UCX) that requests' blocks wait in, and on the other side an endpoint and
 * a key to every region. Pull (vLLM's NixlConnector): each prefill rank
 * stages its finished prompts' blocks in its own region (its outbox), and
 * each decode rank's I/O thread reads them into its pool. Push (SGLang,
 * Mooncake): each decode rank's region (its inbox, a partition per prefill
 * rank) is written by the prefill ranks, and the decode reads its own. The
 * far side is reached by copying from or to where the region is in this
 * process (ranks that are threads of one process: its own memory; ranks of
 * one node: UCX's shared-memory mapping), else with UCX gets and puts (over
 * what UCX_TLS allows; KVIO_PD_GETS=1 forces them). Set up collectively over the runtime. A
 * wait for a get lasts as long as the prefill rank lives (its heartbeats),
 * however slowly the bytes move. */
#include "serve/pd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

struct kvio_pd_link {
    kvio_rte_t *rte;
    int size;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_mem_h outbox_memory; /* prefill */
    void *outbox;
    void *owned_outbox;      /* ranks of one process: mmap'd here, registered with UCX */
    uint64_t outbox_bytes;
    ucp_ep_h *eps;           /* decode: per world rank, to each prefill rank */
    ucp_rkey_h *rkeys;
    uint64_t *bases;         /* the outboxes' addresses */
    const unsigned char **mapped; /* the outboxes mapped into this process (shared
                                     memory, ucp_rkey_ptr), NULL where they cannot be */
    bool all_mapped;
    int self;                /* this rank's index (its own region's locations) */
    int inflight;            /* gets posted, not complete */
    ucs_status_t request_error;
};

static kvio_status_t from_ucs(ucs_status_t status)
{
    if (status == UCS_OK)
        return KVIO_OK;
    return status == UCS_ERR_NO_MEMORY ? KVIO_ERR_NOMEM : KVIO_ERR_IO;
}

/* This rank's UCX: its context and worker (one thread at a time uses it:
 * the decode rank's I/O thread, the prefill rank's loop). */
static kvio_status_t open_ucx(kvio_pd_link_t *link, char *error_p, size_t error_len)
{
    ucp_config_t *config = NULL;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_RMA};
    if (status == UCS_OK)
        status = ucp_init(&params, config, &link->context);
    if (config != NULL)
        ucp_config_release(config);
    ucp_worker_params_t worker_params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                         .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    if (status == UCS_OK)
        status = ucp_worker_create(link->context, &worker_params, &link->worker);
    if (status != UCS_OK)
        snprintf(error_p, error_len, "P/D link: UCX set-up: %s", ucs_status_string(status));
    return from_ucs(status);
}

/* Prefill: the outbox, and [u64 address, u64 length, rkey] for the decode
 * ranks. Ranks of one process read it where it is: it is this process's
 * memory on huge pages, faulted in now, registered for UCX's gets; ranks of
 * one node get memory UCX allocates, which it can map into theirs. */
static kvio_status_t map_outbox(kvio_pd_link_t *link, void **blob_p, size_t *length_p,
                                char *error_p, size_t error_len)
{
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .length = link->outbox_bytes, .flags = UCP_MEM_MAP_ALLOCATE};
    if (kvio_rte_shared_memory(link->rte)) {
        void *memory = mmap(NULL, link->outbox_bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) {
            snprintf(error_p, error_len, "P/D link: a staging buffer of %.2f GiB: %s",
                     (double)link->outbox_bytes / 1073741824.0, strerror(errno));
            return KVIO_ERR_NOMEM;
        }
        link->owned_outbox = memory;
        madvise(memory, link->outbox_bytes, MADV_HUGEPAGE);
        memset(memory, 0, link->outbox_bytes);
        params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
        params.address = memory;
        params.flags = 0;
    }
    ucs_status_t status = ucp_mem_map(link->context, &params, &link->outbox_memory);
    if (status != UCS_OK) {
        snprintf(error_p, error_len, "P/D link: a staging buffer of %.2f GiB (ucp_mem_map): %s",
                 (double)link->outbox_bytes / 1073741824.0, ucs_status_string(status));
        return from_ucs(status);
    }
    ucp_mem_attr_t attributes = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_mem_query(link->outbox_memory, &attributes);
    link->outbox = attributes.address;
    void *rkey = NULL;
    size_t rkey_size = 0;
    status = ucp_rkey_pack(link->context, link->outbox_memory, &rkey, &rkey_size);
    char *blob = status == UCS_OK ? malloc(2 * sizeof(uint64_t) + rkey_size) : NULL;
    if (blob != NULL) {
        uint64_t header[2] = {(uint64_t)(uintptr_t)link->outbox, link->outbox_bytes};
        memcpy(blob, header, sizeof(header));
        memcpy(blob + sizeof(header), rkey, rkey_size);
        *blob_p = blob;
        *length_p = sizeof(header) + rkey_size;
    }
    if (rkey != NULL)
        ucp_rkey_buffer_release(rkey);
    if (status != UCS_OK || blob == NULL) {
        snprintf(error_p, error_len, "P/D link: packing the staging buffer's key: %s",
                 status != UCS_OK ? ucs_status_string(status) : "out of memory");
        return status != UCS_OK ? from_ucs(status) : KVIO_ERR_NOMEM;
    }
    return KVIO_OK;
}

/* Where UCX maps an outbox into this process (shared memory between ranks
 * of one node), its page tables faulted in now rather than during the first
 * reads; NULL where it cannot be (tcp, cma). */
static const unsigned char *map_outbox_here(ucp_rkey_h rkey, uint64_t address, uint64_t length)
{
    void *local = NULL;
    if (length == 0 || ucp_rkey_ptr(rkey, address, &local) != UCS_OK)
        return NULL;
#ifdef MADV_POPULATE_READ
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) {
        uintptr_t start = (uintptr_t)local & ~((uintptr_t)page - 1);
        (void)madvise((void *)start, (uintptr_t)local + length - start, MADV_POPULATE_READ);
    }
#endif
    return local;
}

/* Decode: an endpoint and the outbox's key of every rank that has one. */
static kvio_status_t connect_outboxes(kvio_pd_link_t *link, void **addresses,
                                      const size_t *address_lengths, void **blobs,
                                      const size_t *lengths, char *error_p, size_t error_len)
{
    link->eps = calloc((size_t)link->size, sizeof(*link->eps));
    link->rkeys = calloc((size_t)link->size, sizeof(*link->rkeys));
    link->bases = calloc((size_t)link->size, sizeof(*link->bases));
    link->mapped = calloc((size_t)link->size, sizeof(*link->mapped));
    if (link->eps == NULL || link->rkeys == NULL || link->bases == NULL || link->mapped == NULL)
        return KVIO_ERR_NOMEM;
    link->all_mapped = getenv("KVIO_PD_GETS") == NULL; /* set: gets and puts only */
    for (int rank = 0; rank < link->size; rank++) {
        if (lengths[rank] <= 2 * sizeof(uint64_t))
            continue; /* no outbox */
        if (address_lengths[rank] == 0) {
            snprintf(error_p, error_len, "P/D link: rank %d has a staging buffer but no UCX "
                     "address (its set-up failed)", rank);
            return KVIO_ERR_PEER;
        }
        ucp_ep_params_t params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            .address = addresses[rank], .err_mode = UCP_ERR_HANDLING_MODE_NONE};
        ucs_status_t status = ucp_ep_create(link->worker, &params, &link->eps[rank]);
        uint64_t header[2];
        memcpy(header, blobs[rank], sizeof(header));
        link->bases[rank] = header[0];
        if (status == UCS_OK)
            status = ucp_ep_rkey_unpack(link->eps[rank], (const char *)blobs[rank] +
                                                             sizeof(header),
                                        &link->rkeys[rank]);
        if (status == UCS_OK)
            link->mapped[rank] = kvio_rte_shared_memory(link->rte)
                                     ? (const unsigned char *)(uintptr_t)header[0]
                                     : map_outbox_here(link->rkeys[rank], header[0], header[1]);
        link->all_mapped = link->all_mapped && link->mapped[rank] != NULL;
        if (status != UCS_OK) {
            snprintf(error_p, error_len, "P/D link: connecting to prefill rank %d: %s", rank,
                     ucs_status_string(status));
            return from_ucs(status);
        }
    }
    return KVIO_OK;
}

kvio_status_t kvio_pd_link_create(kvio_rte_t *rte, bool connect, uint64_t outbox_bytes,
                                  kvio_pd_link_t **link_p, char *error_p, size_t error_len)
{
    kvio_pd_link_t *link = calloc(1, sizeof(*link));
    if (link == NULL)
        return KVIO_ERR_NOMEM;
    link->rte = rte;
    link->size = kvio_rte_size(rte);
    link->outbox_bytes = outbox_bytes;
    ucp_address_t *address = NULL;
    size_t address_length = 0;
    void *blob = NULL;
    size_t length = 0;
    kvio_status_t status = KVIO_OK;
    link->self = kvio_rte_index(rte);
    if (connect || outbox_bytes > 0) {
        status = open_ucx(link, error_p, error_len);
        if (status == KVIO_OK && outbox_bytes > 0)
            status = map_outbox(link, &blob, &length, error_p, error_len);
        if (status == KVIO_OK)
            status = from_ucs(ucp_worker_get_address(link->worker, &address, &address_length));
    }
    /* Every rank takes part, a failed one with nothing, so that none waits. */
    void **addresses = NULL, **blobs = NULL;
    size_t *address_lengths = NULL, *lengths = NULL;
    kvio_status_t exchange = kvio_rte_allgather_blobs(
        rte, status == KVIO_OK && address != NULL ? (const void *)address : "",
        status == KVIO_OK ? address_length : 0, &addresses, &address_lengths);
    if (exchange == KVIO_OK)
        exchange = kvio_rte_allgather_blobs(rte, status == KVIO_OK && blob != NULL ? blob : "",
                                            status == KVIO_OK ? length : 0, &blobs, &lengths);
    if (status == KVIO_OK && exchange != KVIO_OK) {
        snprintf(error_p, error_len, "P/D link: exchanging addresses: %s",
                 kvio_rte_verdict(rte)[0] != '\0' ? kvio_rte_verdict(rte)
                                                  : kvio_strerror(exchange));
        status = exchange;
    }
    if (status == KVIO_OK && connect)
        status = connect_outboxes(link, addresses, address_lengths, blobs, lengths, error_p,
                                  error_len);
    if (address != NULL)
        ucp_worker_release_address(link->worker, address);
    free(blob);
    if (addresses != NULL)
        kvio_rte_blobs_free(addresses, address_lengths, link->size);
    if (blobs != NULL)
        kvio_rte_blobs_free(blobs, lengths, link->size);
    if (status != KVIO_OK) {
        kvio_pd_link_destroy(link);
        return status;
    }
    *link_p = link;
    return KVIO_OK;
}

void kvio_pd_link_destroy(kvio_pd_link_t *link)
{
    if (link == NULL)
        return;
    for (int rank = 0; link->rkeys != NULL && rank < link->size; rank++)
        if (link->rkeys[rank] != NULL)
            ucp_rkey_destroy(link->rkeys[rank]);
    for (int rank = 0; link->eps != NULL && rank < link->size; rank++) {
        if (link->eps[rank] == NULL)
            continue;
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t request = ucp_ep_close_nbx(link->eps[rank], &param);
        while (request != NULL && !UCS_PTR_IS_ERR(request) &&
               ucp_request_check_status(request) == UCS_INPROGRESS)
            ucp_worker_progress(link->worker);
        if (request != NULL && !UCS_PTR_IS_ERR(request))
            ucp_request_free(request);
    }
    if (link->outbox_memory != NULL)
        ucp_mem_unmap(link->context, link->outbox_memory);
    if (link->owned_outbox != NULL)
        munmap(link->owned_outbox, link->outbox_bytes);
    if (link->worker != NULL)
        ucp_worker_destroy(link->worker);
    if (link->context != NULL)
        ucp_cleanup(link->context);
    free(link->eps);
    free(link->rkeys);
    free(link->bases);
    free(link->mapped);
    free(link);
}

static void op_done(void *request, ucs_status_t status, void *user_data);
static kvio_status_t wait_ops(kvio_pd_link_t *link, const int *ranks, size_t count,
                               char *error_p, size_t error_len);

void kvio_pd_link_keep_outbox(kvio_pd_link_t *link)
{
    link->owned_outbox = NULL; /* left mapped: a peer thread may still read it */
}

bool kvio_pd_link_mapped(const kvio_pd_link_t *link)
{
    return link->mapped != NULL && link->all_mapped;
}

void *kvio_pd_link_address(const kvio_pd_link_t *link, uint64_t location)
{
    int rank = KVIO_PD_LOCATION_RANK(location);
    /* The cast: a pushed-to region is written through its mapping. */
    unsigned char *base = rank == link->self ? (unsigned char *)link->outbox
                                             : (unsigned char *)(uintptr_t)link->mapped[rank];
    return base + KVIO_PD_LOCATION_OFFSET(location);
}

kvio_status_t kvio_pd_link_put(kvio_pd_link_t *link, uint64_t location, const void *data,
                               uint64_t bytes, char *error_p, size_t error_len)
{
    int rank = KVIO_PD_LOCATION_RANK(location);
    if (rank >= link->size || link->eps == NULL || link->eps[rank] == NULL) {
        snprintf(error_p, error_len, "P/D link: no staging region at rank %d", rank);
        return KVIO_ERR_INVALID;
    }
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = op_done, .user_data = link};
    ucs_status_ptr_t request = ucp_put_nbx(link->eps[rank], data, bytes,
                                           link->bases[rank] + KVIO_PD_LOCATION_OFFSET(location),
                                           link->rkeys[rank], &param);
    if (UCS_PTR_IS_ERR(request)) {
        snprintf(error_p, error_len, "P/D link: ucp_put_nbx to rank %d: %s", rank,
                 ucs_status_string(UCS_PTR_STATUS(request)));
        return KVIO_ERR_IO;
    }
    if (request != NULL)
        link->inflight++;
    ucs_status_ptr_t flush = ucp_ep_flush_nbx(link->eps[rank], &param);
    if (UCS_PTR_IS_ERR(flush)) {
        snprintf(error_p, error_len, "P/D link: flushing to rank %d: %s", rank,
                 ucs_status_string(UCS_PTR_STATUS(flush)));
        return KVIO_ERR_IO;
    }
    if (flush != NULL)
        link->inflight++;
    return wait_ops(link, &rank, 1, error_p, error_len);
}

void kvio_pd_link_progress(kvio_pd_link_t *link)
{
    if (link->worker != NULL)
        while (ucp_worker_progress(link->worker) != 0) {
        }
}

static void op_done(void *request, ucs_status_t status, void *user_data)
{
    kvio_pd_link_t *link = user_data;
    link->inflight--;
    if (status != UCS_OK && link->request_error == UCS_OK)
        link->request_error = status;
    ucp_request_free(request);
}

/* Until every get, put or flush posted is complete, while the ranks they
 * reach live. */
static kvio_status_t wait_ops(kvio_pd_link_t *link, const int *ranks, size_t count,
                               char *error_p, size_t error_len)
{
    while (link->inflight > 0) {
        if (ucp_worker_progress(link->worker) != 0)
            continue;
        for (size_t i = 0; i < count; i++) {
            if (!kvio_rte_peer_failed(link->rte, ranks[i]))
                continue;
            snprintf(error_p, error_len, "P/D link: rank %d was lost while KV moved to or "
                     "from it", ranks[i]);
            /* Its requests cannot complete; they are the worker's now. */
            return KVIO_ERR_PEER;
        }
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000};
        nanosleep(&pause, NULL);
    }
    if (link->request_error != UCS_OK) {
        snprintf(error_p, error_len, "P/D link: a get failed: %s",
                 ucs_status_string(link->request_error));
        link->request_error = UCS_OK;
        return KVIO_ERR_IO;
    }
    return KVIO_OK;
}

void kvio_pd_link_fetch(kvio_pd_link_t *link, const uint64_t *locations, void *const *data,
                        size_t count, uint64_t block_bytes, kvio_status_t *statuses_p,
                        char *error_p, size_t error_len)
{
    int ranks[64] = {0};
    size_t num_ranks = 0;
    kvio_status_t status = KVIO_OK;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = op_done, .user_data = link};
    size_t posted = 0;
    for (; posted < count && status == KVIO_OK; posted++) {
        int rank = KVIO_PD_LOCATION_RANK(locations[posted]);
        uint64_t offset = KVIO_PD_LOCATION_OFFSET(locations[posted]);
        if (rank >= link->size || link->eps[rank] == NULL) {
            snprintf(error_p, error_len, "P/D link: a block at rank %d, which has no staging "
                     "buffer", rank);
            status = KVIO_ERR_INVALID;
            break;
        }
        bool known = false;
        for (size_t r = 0; r < num_ranks && !known; r++)
            known = ranks[r] == rank;
        if (!known && num_ranks < sizeof(ranks) / sizeof(ranks[0]))
            ranks[num_ranks++] = rank;
        ucs_status_ptr_t request = ucp_get_nbx(link->eps[rank], data[posted], block_bytes,
                                               link->bases[rank] + offset, link->rkeys[rank],
                                               &param);
        if (UCS_PTR_IS_ERR(request)) {
            snprintf(error_p, error_len, "P/D link: ucp_get_nbx from rank %d: %s", rank,
                     ucs_status_string(UCS_PTR_STATUS(request)));
            status = KVIO_ERR_IO;
            break;
        }
        if (request != NULL)
            link->inflight++;
    }
    kvio_status_t waited = wait_ops(link, ranks, num_ranks, error_p, error_len);
    if (status == KVIO_OK)
        status = waited;
    /* One batch, one outcome: a failed one is computed on the decode rank. */
    for (size_t i = 0; i < count; i++)
        statuses_p[i] = status;
}

kvio_status_t kvio_serve_pd_bystander(kvio_rte_t *rte, char *error_p, size_t error_len)
{
    kvio_pd_link_t *link = NULL;
    kvio_status_t status = kvio_pd_link_create(rte, false, 0, &link, error_p, error_len);
    kvio_pd_link_destroy(link);
    return status;
}
