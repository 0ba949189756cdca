/* The shared KV store in emulate mode: each rank holds its shard in its own
 * memory (registered with UCX) and serves it from a thread with a UCX worker
 * of its own; the rank's engine reaches every shard, its own included, over
 * UCX tag messages from a second worker. Every batch sends each holder one
 * request with its hashes of the batch (up to BATCH_HASHES): a put's
 * carries their checksums and each block follows as a message of its own,
 * which the holder receives straight into the slot its shard gives it
 * (evicting the least recently used block when full) and checks against
 * the checksum; a get's is answered with the leading ones the holder has:
 * [reply, checksums], then each block as a message of its own straight
 * from its slot into the reader's buffer (contiguous, so UCX moves it
 * without a copy where it can), which the reader checks against the
 * checksum taken at the put; a lookup (has) answers a byte per hash, no
 * blocks. A batch's messages are all in flight together. Every wait is
 * bounded by the runtime's timeout. */
#include "kvcache/shared_store_int.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <xxhash.h>

#include "kvio/clock.h"
#include "kvio/ucx_status.h"

/* Tags: the kind in the top byte, then the asking rank (requests), the
 * batch's sequence number (replies, which reach only their asker's worker),
 * or a put's block: the asking rank (16 bits) and a sequence number (40
 * bits), as every rank's blocks reach one server. */
#define TAG_REQUEST (1ull << 56)
#define TAG_REPLY (2ull << 56)
#define TAG_BLOCK (3ull << 56)
#define TAG_KIND_MASK (0xffull << 56)
#define TAG_ALL (~0ull)
#define TAG_BLOCK_RANK_SHIFT 40
#define TAG_BLOCK_SEQ_MASK ((1ull << TAG_BLOCK_RANK_SHIFT) - 1)
#define MAX_RANKS (1u << 16)

enum { OP_PUT = 1, OP_GET = 2, OP_HAS = 3 };

/* What a put's reply says of each block (a byte each). */
enum { PUT_STORED = 1, PUT_DUPLICATE = 2, PUT_REFUSED = 3, PUT_LOST = 4 };

#define BATCH_HASHES SHARED_BATCH_HASHES

/* A request; count hashes follow it, a put's then their count checksums
 * (XXH3-64 of each block, which follow as messages of their own). */
typedef struct wire_request {
    uint32_t op;
    uint32_t rank;      /* the asker: where the reply goes */
    uint64_t seq;       /* the reply's tag; a put's block j: seq + 1 + j */
    uint32_t count;     /* the hashes that follow, 1..BATCH_HASHES */
    uint32_t unused;
} wire_request_t;

/* A reply; a get's carries count checksums (as put) and its found blocks,
 * a has's a byte per hash (held), a put's a byte per block (PUT_*). */
typedef struct wire_reply {
    int32_t status;     /* kvio_status_t */
    uint32_t found;     /* get, has: the leading hashes of the request held;
                           put: the blocks new to the shard */
} wire_reply_t;

/* One UCX operation, completed by its callback. */
typedef struct completion {
    void *request;
    volatile int done;
    ucs_status_t status;
    size_t length; /* a receive's bytes */
} completion_t;

/* This rank's shard and the thread serving it. */
typedef struct server {
    ucp_context_h context;
    ucp_worker_h worker;
    bool wakeup;              /* the worker can sleep until a message comes */
    ucp_mem_h memory;
    unsigned char *slab;      /* capacity blocks, a block per slot */
    uint64_t slab_bytes;
    ucp_ep_h *eps;            /* to every rank's engine worker */
    unsigned char *inbox;     /* a request and its hashes (a put's: and checksums) */
    size_t inbox_bytes;
    unsigned char *discard;   /* a put's block the shard does not keep lands here */
    uint64_t checksums[BATCH_HASHES];       /* a get's reply */
    uint8_t held[BATCH_HASHES];             /* a has's or a put's reply */
    ucp_dt_iov_t reply_iov[2];              /* [reply, checksums or held] */
    unsigned char *block_out[BATCH_HASHES]; /* a get's blocks, each its own message */
    uint32_t put_slot[BATCH_HASHES];        /* a put's blocks: where each lands */
    completion_t block_ops[BATCH_HASHES];   /* a get's sends or a put's receives */
    shared_shard_t shard;
    uint64_t block_bytes;
    uint32_t size;
    int64_t timeout_ns;
    pthread_t thread;
    bool started;
    atomic_int stop;
    kvio_status_t status;     /* the first failure, with its text */
    char error[256];
    uint64_t checksum_failures; /* blocks refused as they arrived */
    /* The shard's counts as of the last request, for readers on other
     * threads while it is served. */
    atomic_uint_fast64_t published_held, published_stored, published_evictions,
        published_requests;
} server_t;

/* One request of a batch in flight: a put's, a get's or a has's hashes
 * held by one rank (their places in the caller's batch in index). */
typedef struct pending {
    wire_request_t request;
    wire_reply_t reply;
    uint32_t op, holder, count;
    kvio_hash_t hashes[BATCH_HASHES];
    uint32_t index[BATCH_HASHES];
    uint64_t checksums[BATCH_HASHES]; /* a put's request, a get's reply */
    uint8_t held[BATCH_HASHES];       /* a has's or a put's reply */
    /* UCX reads them until the operation is done */
    ucp_dt_iov_t send_iov[3], recv_iov[2];
    completion_t sent, received;
    /* its blocks, each a message of its own: a get's after the reply (the
     * reply's tag + 1 + j), received straight into the caller's buffers; a
     * put's after the request (put_block_tag), sent straight from them */
    completion_t blocks[BATCH_HASHES];
    uint32_t posted_blocks;
} pending_t;

struct kvio_shared_endpoint {
    kvio_rte_t *rte;
    kvio_shared_store_config_t config;
    int first_rank;           /* the world rank of the store's rank 0 */
    uint32_t rank, size;      /* this rank's index among the store's, their count */
    int64_t timeout_ns;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h *eps;            /* to every rank's server */
    server_t server;
    kvio_shared_link_stats_t *links; /* to each holder */
    pending_t *pending;       /* a batch's messages */
    size_t pending_capacity;
    uint32_t *block_message;  /* a get's or has's block i: its message, */
    uint32_t *block_position; /* and its place there (pending_capacity each) */
    uint32_t *open_message;   /* per holder: the message filling, or UINT32_MAX */
    uint64_t seq;
    bool stopped;
    char error[512];
};

/* ---------- operations ---------- */

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    completion_t *completion = user_data;
    completion->status = status;
    completion->done = 1;
}

static void on_received(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    (void)request;
    completion_t *completion = user_data;
    completion->status = status;
    completion->length = status == UCS_OK ? info->length : 0;
    completion->done = 1;
}

/* A posted operation (its completion cleared before the call: the callback
 * may run inside it): in flight, or done at once with an error. */
static void track(completion_t *completion, ucs_status_ptr_t request)
{
    if (UCS_PTR_IS_ERR(request)) {
        completion->status = UCS_PTR_STATUS(request);
        completion->done = 1;
    } else {
        completion->request = request;
    }
}

static void post_send(completion_t *completion, ucp_ep_h ep, ucp_tag_t tag, const void *buffer,
                      size_t count, bool iov)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FLAG_NO_IMM_CMPL | (iov ? UCP_OP_ATTR_FIELD_DATATYPE : 0),
        .cb.send = on_sent, .user_data = completion, .datatype = ucp_dt_make_iov()};
    memset(completion, 0, sizeof(*completion));
    track(completion, ucp_tag_send_nbx(ep, buffer, count, tag, &param));
}

static void post_recv(completion_t *completion, ucp_worker_h worker, ucp_tag_t tag,
                      ucp_tag_t mask, void *buffer, size_t count, bool iov)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FLAG_NO_IMM_CMPL | (iov ? UCP_OP_ATTR_FIELD_DATATYPE : 0),
        .cb.recv = on_received, .user_data = completion, .datatype = ucp_dt_make_iov()};
    memset(completion, 0, sizeof(*completion));
    track(completion, ucp_tag_recv_nbx(worker, buffer, count, tag, mask, &param));
}

/* Whether an operation is done: its callback ran, or UCX says so (a send
 * that completed inside the call is done without its callback). */
static bool is_done(completion_t *completion)
{
    if (completion->done)
        return true;
    ucs_status_t status = ucp_request_check_status(completion->request);
    if (status == UCS_INPROGRESS)
        return false;
    completion->status = status;
    completion->done = 1;
    return true;
}

/* The request's memory goes back to UCX once it is done. */
static void release(completion_t *completion)
{
    if (completion->request != NULL)
        ucp_request_free(completion->request);
    completion->request = NULL;
}

/* Cancels an operation still in flight and waits for its callback. */
static void cancel(ucp_worker_h worker, completion_t *completion)
{
    if (!is_done(completion)) {
        ucp_request_cancel(worker, completion->request);
        while (!is_done(completion))
            ucp_worker_progress(worker);
    }
    release(completion);
}

/* ---------- the server ---------- */

/* Waits for one operation of the server's; false when stopped or silent
 * for the timeout (stop_counts: a stop ends the wait). */
static bool server_wait(server_t *server, completion_t *completion, bool stop_counts)
{
    uint64_t last_ns = kvio_time_ns();
    while (!is_done(completion)) {
        if (stop_counts && atomic_load(&server->stop))
            return false;
        if (ucp_worker_progress(server->worker) != 0) {
            last_ns = kvio_time_ns();
            continue;
        }
        if (!stop_counts && (int64_t)(kvio_time_ns() - last_ns) > server->timeout_ns)
            return false;
        if (!stop_counts) {
            sched_yield();
        } else if (server->wakeup && ucp_worker_arm(server->worker) == UCS_OK) {
            ucp_worker_wait(server->worker);
        } else if (!server->wakeup) {
            struct timespec pause = {.tv_nsec = 20000};
            nanosleep(&pause, NULL);
        }
    }
    return true;
}

static void server_failed(server_t *server, kvio_status_t status, const char *text)
{
    if (server->status == KVIO_OK) {
        server->status = status;
        snprintf(server->error, sizeof(server->error), "shared store: %s", text);
    }
}

/* The tag of block j of the put request asked under seq by rank. */
static ucp_tag_t put_block_tag(uint32_t rank, uint64_t seq, uint32_t j)
{
    return TAG_BLOCK | ((uint64_t)rank << TAG_BLOCK_RANK_SHIFT) |
           ((seq + 1 + j) & TAG_BLOCK_SEQ_MASK);
}

/* Where a put's blocks land: a fresh block in the slot the shard gives it,
 * straight off the wire (the shard's memory is registered: UCX moves it
 * without a copy where it can); a block held already (refreshed) or one
 * whose slot a later block of the batch took (a full shard evicting its
 * least recently used) into the discard buffer, not kept. */
static void place_put(server_t *server, const unsigned char *hashes, const unsigned char *sums,
                      uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) {
        kvio_hash_t hash;
        uint64_t checksum;
        memcpy(&hash, hashes + i * sizeof(hash), sizeof(hash));
        memcpy(&checksum, sums + i * sizeof(checksum), sizeof(checksum));
        bool fresh = false;
        uint32_t slot = shared_shard_insert(&server->shard, hash, checksum, &fresh);
        for (uint32_t j = 0; fresh && j < i; j++)
            if (server->put_slot[j] == slot)
                server->put_slot[j] = SHARED_NO_ENTRY; /* stored, then evicted */
        server->put_slot[i] = fresh ? slot : SHARED_NO_ENTRY;
        server->held[i] = fresh ? PUT_STORED : PUT_DUPLICATE;
    }
}

/* A put: the request's blocks received all at once, each where place_put
 * says, then each kept one checked against the checksum its writer took
 * (a block that arrived changed or not at all leaves the shard). A
 * duplicate's bytes are dropped unchecked: the shard keeps the copy it
 * checked at its first put. Returns the reply's parts. */
static size_t serve_put(server_t *server, const wire_request_t *request, size_t length,
                        wire_reply_t *reply)
{
    uint32_t count = request->count;
    if (count == 0 || count > BATCH_HASHES ||
        length != sizeof(*request) + count * (sizeof(kvio_hash_t) + sizeof(uint64_t))) {
        reply->status = KVIO_ERR_INVALID;
        return 1;
    }
    const unsigned char *hashes = server->inbox + sizeof(*request);
    const unsigned char *sums = hashes + count * sizeof(kvio_hash_t);
    place_put(server, hashes, sums, count);
    for (uint32_t j = 0; j < count; j++) {
        uint32_t slot = server->put_slot[j];
        void *into = slot != SHARED_NO_ENTRY ? server->slab + (uint64_t)slot * server->block_bytes
                                             : server->discard;
        post_recv(&server->block_ops[j], server->worker,
                  put_block_tag(request->rank, request->seq, j), TAG_ALL, into,
                  server->block_bytes, false);
    }
    uint32_t fresh = 0;
    bool in_time = true;
    for (uint32_t j = 0; j < count; j++) {
        completion_t *block = &server->block_ops[j];
        in_time = in_time && server_wait(server, block, false);
        if (!is_done(block))
            cancel(server->worker, block);
        release(block);
        uint32_t slot = server->put_slot[j];
        bool whole = block->status == UCS_OK && block->length == server->block_bytes;
        if (slot != SHARED_NO_ENTRY && whole) {
            const unsigned char *bytes = server->slab + (uint64_t)slot * server->block_bytes;
            whole = XXH3_64bits(bytes, server->block_bytes) ==
                    server->shard.entries[slot].checksum;
            if (!whole) {
                server->checksum_failures++;
                server->held[j] = PUT_REFUSED;
            }
        }
        if (!whole && server->held[j] != PUT_REFUSED)
            server->held[j] = PUT_LOST;
        if (!whole && slot != SHARED_NO_ENTRY)
            shared_shard_remove(&server->shard, slot);
        fresh += server->held[j] == PUT_STORED;
    }
    reply->status = KVIO_OK;
    reply->found = fresh;
    server->reply_iov[1] = (ucp_dt_iov_t){.buffer = server->held, .length = count};
    return 2;
}

/* A get: the leading hashes of the request the shard holds, touched, the
 * checksums taken at their puts in the reply, and each block after it as
 * a message of its own, straight from its slot (contiguous: UCX moves it
 * without a copy where it can); a has: whether it holds each (a byte per hash after the
 * reply), found the leading ones. Returns the reply's parts. */
static size_t serve_lookup(server_t *server, const wire_request_t *request, size_t length,
                           wire_reply_t *reply)
{
    if (request->count == 0 || request->count > BATCH_HASHES ||
        length != sizeof(*request) + request->count * sizeof(kvio_hash_t)) {
        reply->status = KVIO_ERR_INVALID;
        return 1;
    }
    bool get = request->op == OP_GET;
    const unsigned char *hashes = server->inbox + sizeof(*request);
    uint32_t found = 0;
    bool leading = true;
    for (uint32_t i = 0; i < request->count && (leading || !get); i++) {
        kvio_hash_t hash;
        memcpy(&hash, hashes + i * sizeof(hash), sizeof(hash));
        uint32_t slot = shared_shard_find(&server->shard, hash, get);
        leading = leading && slot != SHARED_NO_ENTRY;
        found += leading;
        if (!get) {
            server->held[i] = slot != SHARED_NO_ENTRY;
        } else if (leading) {
            server->checksums[i] = server->shard.entries[slot].checksum;
            server->block_out[i] = server->slab + (uint64_t)slot * server->block_bytes;
        }
    }
    reply->status = KVIO_OK;
    reply->found = found;
    if (!get) {
        server->reply_iov[1] = (ucp_dt_iov_t){.buffer = server->held, .length = request->count};
        return 2;
    }
    server->reply_iov[1] = (ucp_dt_iov_t){.buffer = server->checksums,
                                          .length = request->count * sizeof(uint64_t)};
    return 2;
}

/* Answers one request; false when the reply could not be sent. */
static bool serve_one(server_t *server, size_t length)
{
    wire_request_t request;
    if (length < sizeof(request))
        return true; /* not a request: nothing to answer */
    memcpy(&request, server->inbox, sizeof(request));
    if (request.rank >= server->size)
        return true;
    wire_reply_t reply = {.status = KVIO_ERR_INVALID};
    size_t parts = 1;
    server->shard.requests++;
    if (request.op == OP_PUT)
        parts = serve_put(server, &request, length, &reply);
    else if (request.op == OP_GET || request.op == OP_HAS)
        parts = serve_lookup(server, &request, length, &reply);
    server->reply_iov[0] = (ucp_dt_iov_t){.buffer = &reply, .length = sizeof(reply)};
    kvio_shared_shard_stats_t counts = shared_shard_stats(&server->shard);
    atomic_store(&server->published_held, counts.held);
    atomic_store(&server->published_stored, counts.stored);
    atomic_store(&server->published_evictions, counts.evictions);
    atomic_store(&server->published_requests, counts.requests);
    completion_t sent;
    post_send(&sent, server->eps[request.rank], TAG_REPLY | request.seq, server->reply_iov, parts,
              true);
    /* A get's found blocks: block j under the reply's tag + 1 + j. */
    uint32_t blocks = request.op == OP_GET && reply.status == KVIO_OK ? reply.found : 0;
    for (uint32_t j = 0; j < blocks; j++)
        post_send(&server->block_ops[j], server->eps[request.rank],
                  TAG_REPLY | ((request.seq + 1 + j) & ~TAG_KIND_MASK), server->block_out[j],
                  server->block_bytes, false);
    bool done = server_wait(server, &sent, false);
    for (uint32_t j = 0; j < blocks; j++) {
        bool block_done = done && server_wait(server, &server->block_ops[j], false);
        if (!block_done)
            cancel(server->worker, &server->block_ops[j]);
        release(&server->block_ops[j]);
        if (done && (!block_done || server->block_ops[j].status != UCS_OK)) {
            sent.status = block_done ? server->block_ops[j].status : UCS_ERR_TIMED_OUT;
            done = block_done;
        }
    }
    if (!done)
        cancel(server->worker, &sent);
    release(&sent);
    if (!done || sent.status != UCS_OK) {
        char text[160];
        snprintf(text, sizeof(text), "rank %u's reply: %s", request.rank,
                 done ? ucs_status_string(sent.status) : "no progress within the timeout");
        server_failed(server, done ? kvio_status_from_ucs(sent.status) : KVIO_ERR_TIMEOUT, text);
        return false;
    }
    return true;
}

static void *serve(void *arg)
{
    server_t *server = arg;
    while (!atomic_load(&server->stop)) {
        completion_t received;
        post_recv(&received, server->worker, TAG_REQUEST, TAG_KIND_MASK, server->inbox,
                  server->inbox_bytes, false);
        if (!server_wait(server, &received, true)) {
            cancel(server->worker, &received);
            break;
        }
        release(&received);
        if (received.status != UCS_OK) {
            /* A message larger than a request and its hashes: not ours. */
            if (received.status != UCS_ERR_MESSAGE_TRUNCATED)
                server_failed(server, kvio_status_from_ucs(received.status),
                              ucs_status_string(received.status));
            continue;
        }
        (void)serve_one(server, received.length);
    }
    return NULL;
}

/* ---------- set-up ---------- */

/* A context and its worker, every one of the store's alike (UCX refuses
 * to connect workers of different rendezvous schemes). Blocks move by
 * rendezvous put: a put's writer copies its blocks into the holder's
 * slots, where by default (get) the holder's one thread would copy every
 * rank's puts (0.8-1.6 against 3.4 GB/s in bench/shared_store.sh; a
 * get's holder copies instead of its reader, as fast there).
 * UCX_RNDV_SCHEME, when set, wins. */
static ucs_status_t open_worker(uint64_t features, ucp_context_h *context_p,
                                ucp_worker_h *worker_p)
{
    ucp_config_t *config = NULL;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    if (status == UCS_OK && getenv("UCX_RNDV_SCHEME") == NULL)
        (void)ucp_config_modify(config, "RNDV_SCHEME", "put_zcopy");
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = features};
    if (status == UCS_OK)
        status = ucp_init(&params, config, context_p);
    if (config != NULL)
        ucp_config_release(config);
    ucp_worker_params_t worker_params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                         .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    if (status == UCS_OK)
        status = ucp_worker_create(*context_p, &worker_params, worker_p);
    return status;
}

/* The server's worker (sleeping between messages where UCX can), its shard
 * and the shard's bytes, allocated and registered up front. */
static kvio_status_t server_open(kvio_shared_endpoint_t *endpoint, char *error_p,
                                 size_t error_len)
{
    server_t *server = &endpoint->server;
    server->block_bytes = endpoint->config.block_bytes;
    server->size = endpoint->size;
    server->timeout_ns = endpoint->timeout_ns;
    uint32_t capacity = shared_shard_capacity(&endpoint->config);
    server->slab_bytes = (uint64_t)capacity * server->block_bytes;
    ucs_status_t status = open_worker(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP, &server->context,
                                      &server->worker);
    server->wakeup = status == UCS_OK;
    if (status != UCS_OK) {
        if (server->context != NULL)
            ucp_cleanup(server->context);
        server->context = NULL;
        status = open_worker(UCP_FEATURE_TAG, &server->context, &server->worker);
    }
    if (status != UCS_OK) {
        snprintf(error_p, error_len, "shared store: UCX set-up of rank %u's shard: %s",
                 endpoint->rank, ucs_status_string(status));
        return kvio_status_from_ucs(status);
    }
    void *slab = mmap(NULL, server->slab_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    server->inbox_bytes = sizeof(wire_request_t) +
                          BATCH_HASHES * (sizeof(kvio_hash_t) + sizeof(uint64_t));
    server->inbox = malloc(server->inbox_bytes);
    server->discard = malloc(server->block_bytes);
    if (slab == MAP_FAILED || server->inbox == NULL || server->discard == NULL ||
        shared_shard_init(&server->shard, capacity) != KVIO_OK) {
        snprintf(error_p, error_len,
                 "shared store: rank %u's shard of %u blocks of %llu bytes (%.2f GiB): %s",
                 endpoint->rank, capacity, (unsigned long long)server->block_bytes,
                 (double)server->slab_bytes / 1073741824.0,
                 slab == MAP_FAILED ? strerror(errno) : "out of memory");
        if (slab != MAP_FAILED)
            munmap(slab, server->slab_bytes);
        return KVIO_ERR_NOMEM;
    }
    server->slab = slab;
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = slab, .length = server->slab_bytes};
    status = ucp_mem_map(server->context, &params, &server->memory);
    if (status != UCS_OK) {
        snprintf(error_p, error_len, "shared store: registering rank %u's shard (%.2f GiB): %s",
                 endpoint->rank, (double)server->slab_bytes / 1073741824.0,
                 ucs_status_string(status));
        return kvio_status_from_ucs(status);
    }
    return KVIO_OK;
}

/* The worker's address as a blob for the exchange: [u32 server length,
 * server address, engine address]. */
static kvio_status_t own_addresses(kvio_shared_endpoint_t *endpoint, void **blob_p,
                                   size_t *length_p)
{
    ucp_address_t *server = NULL, *engine = NULL;
    size_t server_length = 0, engine_length = 0;
    ucs_status_t status = ucp_worker_get_address(endpoint->server.worker, &server,
                                                 &server_length);
    if (status == UCS_OK)
        status = ucp_worker_get_address(endpoint->worker, &engine, &engine_length);
    unsigned char *blob = status == UCS_OK ? malloc(4 + server_length + engine_length) : NULL;
    if (blob != NULL) {
        uint32_t length = (uint32_t)server_length;
        memcpy(blob, &length, 4);
        memcpy(blob + 4, server, server_length);
        memcpy(blob + 4 + server_length, engine, engine_length);
        *blob_p = blob;
        *length_p = 4 + server_length + engine_length;
    }
    if (server != NULL)
        ucp_worker_release_address(endpoint->server.worker, server);
    if (engine != NULL)
        ucp_worker_release_address(endpoint->worker, engine);
    return status != UCS_OK ? kvio_status_from_ucs(status) : blob == NULL ? KVIO_ERR_NOMEM : KVIO_OK;
}

static ucs_status_t connect_to(ucp_worker_h worker, const void *address, ucp_ep_h *ep_p)
{
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = address, .err_mode = UCP_ERR_HANDLING_MODE_NONE};
    return ucp_ep_create(worker, &params, ep_p);
}

/* Endpoints from this rank's engine to every server, and from its server
 * to every engine. */
static kvio_status_t connect_all(kvio_shared_endpoint_t *endpoint, void **blobs,
                                 const size_t *lengths, char *error_p, size_t error_len)
{
    endpoint->eps = calloc(endpoint->size, sizeof(*endpoint->eps));
    endpoint->server.eps = calloc(endpoint->size, sizeof(*endpoint->server.eps));
    if (endpoint->eps == NULL || endpoint->server.eps == NULL)
        return KVIO_ERR_NOMEM;
    for (uint32_t rank = 0; rank < endpoint->size; rank++) {
        uint32_t server_length = 0;
        if (lengths[rank] > 4)
            memcpy(&server_length, blobs[rank], 4);
        if (lengths[rank] <= 4 || server_length >= lengths[rank] - 4) {
            snprintf(error_p, error_len, "shared store: rank %u has no UCX address (its set-up "
                     "failed)", rank);
            return KVIO_ERR_PEER;
        }
        const unsigned char *blob = blobs[rank];
        ucs_status_t status = connect_to(endpoint->worker, blob + 4, &endpoint->eps[rank]);
        if (status == UCS_OK)
            status = connect_to(endpoint->server.worker, blob + 4 + server_length,
                                &endpoint->server.eps[rank]);
        if (status != UCS_OK) {
            snprintf(error_p, error_len, "shared store: connecting to rank %u: %s", rank,
                     ucs_status_string(status));
            return kvio_status_from_ucs(status);
        }
    }
    return KVIO_OK;
}

/* Each of the store's ranks posts its blob to every other and takes
 * theirs (its own copied): the other world ranks do not take part. */
static kvio_status_t exchange_addresses(kvio_shared_endpoint_t *endpoint, const void *blob,
                                        size_t length, void **blobs, size_t *lengths)
{
    kvio_status_t status = KVIO_OK;
    for (uint32_t r = 0; r < endpoint->size && status == KVIO_OK; r++)
        if (r != endpoint->rank)
            status = kvio_rte_post(endpoint->rte, endpoint->first_rank + (int)r,
                                   KVIO_SHARED_TAG_ADDRESSES, blob, length);
    blobs[endpoint->rank] = malloc(length > 0 ? length : 1);
    if (blobs[endpoint->rank] == NULL)
        status = KVIO_ERR_NOMEM;
    else
        memcpy(blobs[endpoint->rank], blob, length);
    lengths[endpoint->rank] = length;
    for (uint32_t r = 0; r < endpoint->size && status == KVIO_OK; r++)
        if (r != endpoint->rank)
            status = kvio_rte_recv(endpoint->rte, endpoint->first_rank + (int)r,
                                   KVIO_SHARED_TAG_ADDRESSES, &blobs[r], &lengths[r]);
    kvio_status_t flushed = kvio_rte_flush(endpoint->rte);
    return status != KVIO_OK ? status : flushed;
}

kvio_status_t kvio_shared_endpoint_create(kvio_rte_t *rte, int first_rank,
                                          const kvio_shared_store_config_t *config,
                                          kvio_shared_endpoint_t **endpoint_p, char *error_p,
                                          size_t error_len)
{
    kvio_shared_endpoint_t *endpoint = calloc(1, sizeof(*endpoint));
    if (endpoint == NULL)
        return KVIO_ERR_NOMEM;
    endpoint->rte = rte;
    endpoint->config = *config;
    endpoint->first_rank = first_rank;
    endpoint->rank = (uint32_t)(kvio_rte_index(rte) - first_rank);
    endpoint->size = config->num_ranks;
    endpoint->timeout_ns = kvio_rte_timeout_ns(rte);
    atomic_init(&endpoint->server.stop, 0);
    kvio_status_t status = kvio_shared_store_check(config, false, error_p, error_len);
    if (status == KVIO_OK && config->num_ranks > MAX_RANKS) {
        snprintf(error_p, error_len, "shared store: %u ranks; emulate's tags carry at most %u",
                 config->num_ranks, MAX_RANKS);
        status = KVIO_ERR_CONFIG;
    }
    if (status == KVIO_OK &&
        (first_rank < 0 || kvio_rte_index(rte) < first_rank ||
         first_rank + (int64_t)config->num_ranks > kvio_rte_size(rte) ||
         endpoint->rank >= config->num_ranks)) {
        snprintf(error_p, error_len, "shared store: ranks %d..%lld of a run of %d do not include "
                 "this one (%d)", first_rank, (long long)first_rank + config->num_ranks - 1,
                 kvio_rte_size(rte), kvio_rte_index(rte));
        kvio_shared_endpoint_destroy(endpoint);
        return KVIO_ERR_CONFIG; /* a caller's mistake: no rank waits on this one */
    }
    endpoint->links = calloc(endpoint->size, sizeof(*endpoint->links));
    endpoint->open_message = calloc(endpoint->size, sizeof(*endpoint->open_message));
    if (status == KVIO_OK && (endpoint->links == NULL || endpoint->open_message == NULL))
        status = KVIO_ERR_NOMEM;
    if (status == KVIO_OK) {
        ucs_status_t opened = open_worker(UCP_FEATURE_TAG, &endpoint->context, &endpoint->worker);
        if (opened != UCS_OK) {
            snprintf(error_p, error_len, "shared store: UCX set-up of rank %u: %s",
                     endpoint->rank, ucs_status_string(opened));
            status = kvio_status_from_ucs(opened);
        }
    }
    if (status == KVIO_OK)
        status = server_open(endpoint, error_p, error_len);
    void *blob = NULL;
    size_t length = 0;
    if (status == KVIO_OK && (status = own_addresses(endpoint, &blob, &length)) != KVIO_OK)
        snprintf(error_p, error_len, "shared store: rank %u's UCX addresses: %s",
                 endpoint->rank, kvio_strerror(status));
    /* Every rank takes part, a failed one with nothing, so that none waits. */
    void **blobs = calloc(endpoint->size, sizeof(*blobs));
    size_t *lengths = calloc(endpoint->size, sizeof(*lengths));
    kvio_status_t exchange = blobs != NULL && lengths != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    if (exchange == KVIO_OK)
        exchange = exchange_addresses(endpoint, blob != NULL ? blob : "",
                                      status == KVIO_OK ? length : 0, blobs, lengths);
    free(blob);
    if (status == KVIO_OK && exchange != KVIO_OK) {
        snprintf(error_p, error_len, "shared store: exchanging addresses: %s",
                 kvio_rte_verdict(rte)[0] != '\0' ? kvio_rte_verdict(rte)
                                                  : kvio_strerror(exchange));
        status = exchange;
    }
    if (status == KVIO_OK)
        status = connect_all(endpoint, blobs, lengths, error_p, error_len);
    for (uint32_t r = 0; blobs != NULL && r < endpoint->size; r++)
        free(blobs[r]);
    free(blobs);
    free(lengths);
    if (status == KVIO_OK) {
        int started = pthread_create(&endpoint->server.thread, NULL, serve, &endpoint->server);
        endpoint->server.started = started == 0;
        if (started != 0) {
            snprintf(error_p, error_len, "shared store: rank %u's server thread: %s",
                     endpoint->rank, strerror(started));
            status = KVIO_ERR_IO;
        }
    }
    if (status != KVIO_OK) {
        kvio_shared_endpoint_destroy(endpoint);
        return status;
    }
    *endpoint_p = endpoint;
    return KVIO_OK;
}

/* ---------- the engine's side ---------- */

static kvio_status_t endpoint_failed(kvio_shared_endpoint_t *endpoint, kvio_status_t status,
                                     const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static kvio_status_t endpoint_failed(kvio_shared_endpoint_t *endpoint, kvio_status_t status,
                                     const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int used = snprintf(endpoint->error, sizeof(endpoint->error), "shared store: ");
    vsnprintf(endpoint->error + used, sizeof(endpoint->error) - (size_t)used, format, args);
    va_end(args);
    return status;
}

/* Room for a batch of count blocks (at most count messages). */
static kvio_status_t pending_room(kvio_shared_endpoint_t *endpoint, size_t count)
{
    if (count <= endpoint->pending_capacity)
        return KVIO_OK;
    pending_t *pending = realloc(endpoint->pending, count * sizeof(*pending));
    if (pending != NULL)
        endpoint->pending = pending;
    uint32_t *message = realloc(endpoint->block_message, count * sizeof(*message));
    if (message != NULL)
        endpoint->block_message = message;
    uint32_t *position = realloc(endpoint->block_position, count * sizeof(*position));
    if (position != NULL)
        endpoint->block_position = position;
    if (pending == NULL || message == NULL || position == NULL)
        return KVIO_ERR_NOMEM;
    endpoint->pending_capacity = count;
    return KVIO_OK;
}

/* What message p still waits for: its request's send, its reply, and a
 * put's blocks, or once a get's reply says how many blocks follow, those
 * (the receives of the others are cancelled). */
static size_t message_waiting(kvio_shared_endpoint_t *endpoint, pending_t *p)
{
    size_t waiting = !is_done(&p->sent) + !is_done(&p->received);
    uint32_t needed = p->posted_blocks;
    if (p->op == OP_PUT) {
        /* A put refused whole: its holder takes none of its blocks. */
        if (is_done(&p->received) &&
            (p->received.status != UCS_OK || p->reply.status != KVIO_OK))
            for (uint32_t j = 0; j < p->posted_blocks; j++)
                cancel(endpoint->worker, &p->blocks[j]);
    } else if (is_done(&p->received)) {
        bool told = p->received.status == UCS_OK && p->reply.status == KVIO_OK &&
                    p->reply.found <= p->posted_blocks;
        needed = told ? p->reply.found : 0;
        for (uint32_t j = needed; j < p->posted_blocks; j++)
            cancel(endpoint->worker, &p->blocks[j]);
    }
    for (uint32_t j = 0; j < needed; j++)
        waiting += !is_done(&p->blocks[j]);
    return waiting;
}

/* Waits for the batch's messages and their replies; on a silence as long
 * as the timeout, cancels what is left and says so. */
static kvio_status_t batch_wait(kvio_shared_endpoint_t *endpoint, size_t messages)
{
    pending_t *pending = endpoint->pending;
    uint64_t last_ns = kvio_time_ns();
    size_t waiting = messages;
    while (waiting > 0) {
        /* Nothing came: let the holders' threads run (ranks and their
         * servers may share cores; a spinning wait starves them). */
        if (ucp_worker_progress(endpoint->worker) != 0)
            last_ns = kvio_time_ns();
        else
            sched_yield();
        waiting = 0;
        for (size_t i = 0; i < messages; i++)
            waiting += message_waiting(endpoint, &pending[i]);
        if (waiting > 0 && (int64_t)(kvio_time_ns() - last_ns) > endpoint->timeout_ns)
            break;
    }
    for (size_t i = 0; i < messages; i++) {
        cancel(endpoint->worker, &pending[i].sent);
        cancel(endpoint->worker, &pending[i].received);
        for (uint32_t j = 0; j < pending[i].posted_blocks; j++)
            cancel(endpoint->worker, &pending[i].blocks[j]);
    }
    if (waiting > 0)
        return endpoint_failed(endpoint, KVIO_ERR_TIMEOUT,
                               "%zu of %zu messages unanswered for %.1f s", waiting,
                               2 * messages, (double)endpoint->timeout_ns / 1e9);
    return KVIO_OK;
}

/* Message m's request (the reply's receive posted first): recv_parts of
 * recv_iov, then send_parts of send_iov, both set by the caller. */
static void post_message(kvio_shared_endpoint_t *endpoint, pending_t *p, uint32_t op,
                         size_t recv_parts, size_t send_parts)
{
    uint64_t seq = ++endpoint->seq & ~TAG_KIND_MASK;
    p->op = op;
    p->request.op = op;
    p->request.rank = endpoint->rank;
    p->request.seq = seq;
    p->reply = (wire_reply_t){.status = KVIO_ERR_IO};
    p->recv_iov[0] = (ucp_dt_iov_t){.buffer = &p->reply, .length = sizeof(p->reply)};
    post_recv(&p->received, endpoint->worker, TAG_REPLY | seq, TAG_ALL, p->recv_iov, recv_parts,
              true);
    p->send_iov[0] = (ucp_dt_iov_t){.buffer = &p->request, .length = sizeof(p->request)};
    endpoint->links[p->holder].requests++;
    post_send(&p->sent, endpoint->eps[p->holder], TAG_REQUEST | endpoint->rank, p->send_iov,
              send_parts, true);
}

/* What the holder answered, or how the messages failed. */
static kvio_status_t got_message_status(const pending_t *p)
{
    if (p->sent.status != UCS_OK)
        return kvio_status_from_ucs(p->sent.status);
    if (p->received.status != UCS_OK)
        return kvio_status_from_ucs(p->received.status);
    return (kvio_status_t)p->reply.status;
}

/* A batch's hashes, one request per holder (in pieces of BATCH_HASHES),
 * block i's request and its place there in block_message and
 * block_position; the requests' count, 0 with KVIO_ERR_NOMEM in
 * *status_p when there is no room for them. */
static uint32_t group_by_holder(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                                size_t count, kvio_status_t *status_p)
{
    *status_p = pending_room(endpoint, count);
    if (*status_p != KVIO_OK) {
        endpoint_failed(endpoint, KVIO_ERR_NOMEM, "out of memory for a batch of %zu", count);
        return 0;
    }
    for (uint32_t h = 0; h < endpoint->size; h++)
        endpoint->open_message[h] = UINT32_MAX;
    uint32_t messages = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t holder = kvio_shared_store_holder(hashes[i], endpoint->size);
        uint32_t m = endpoint->open_message[holder];
        if (m == UINT32_MAX || endpoint->pending[m].count == BATCH_HASHES) {
            m = endpoint->open_message[holder] = messages++;
            endpoint->pending[m].holder = holder;
            endpoint->pending[m].count = 0;
        }
        pending_t *p = &endpoint->pending[m];
        endpoint->block_message[i] = m;
        endpoint->block_position[i] = p->count;
        p->hashes[p->count] = hashes[i];
        p->index[p->count++] = (uint32_t)i;
    }
    return messages;
}

/* A put's blocks, one request per holder with their hashes and checksums,
 * each block after it as a message of its own straight from the caller's
 * buffer (contiguous: UCX moves it without a copy where it can), all in
 * flight: one round trip for the batch. *messages_p: the requests sent;
 * KVIO_ERR_NOMEM only when nothing was. */
static kvio_status_t batch_put(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                               const void *const *data, size_t count, size_t *messages_p)
{
    kvio_status_t status;
    uint32_t messages = group_by_holder(endpoint, hashes, count, &status);
    *messages_p = messages;
    if (status != KVIO_OK)
        return status;
    uint64_t block_bytes = endpoint->config.block_bytes;
    for (uint32_t m = 0; m < messages; m++) {
        pending_t *p = &endpoint->pending[m];
        for (uint32_t j = 0; j < p->count; j++)
            p->checksums[j] = XXH3_64bits(data[p->index[j]], block_bytes);
        p->request = (wire_request_t){.count = p->count};
        p->send_iov[1] = (ucp_dt_iov_t){.buffer = p->hashes,
                                        .length = p->count * sizeof(kvio_hash_t)};
        p->send_iov[2] = (ucp_dt_iov_t){.buffer = p->checksums,
                                        .length = p->count * sizeof(uint64_t)};
        p->recv_iov[1] = (ucp_dt_iov_t){.buffer = p->held, .length = p->count};
        post_message(endpoint, p, OP_PUT, 2, 3);
        p->posted_blocks = p->count;
        /* The cast: a send only reads the block. */
        for (uint32_t j = 0; j < p->count; j++)
            post_send(&p->blocks[j], endpoint->eps[p->holder],
                      put_block_tag(endpoint->rank, p->request.seq, j),
                      (void *)data[p->index[j]], block_bytes, false);
        endpoint->seq += p->count;
    }
    return batch_wait(endpoint, messages);
}

/* A get's or has's hashes, one message per holder (in pieces of
 * BATCH_HASHES), all in flight: one round trip for the batch. A get's
 * blocks land in data (its reply's checksums in the message). *messages_p:
 * the messages sent; KVIO_ERR_NOMEM only when nothing was. */
static kvio_status_t batch_lookup(kvio_shared_endpoint_t *endpoint, uint32_t op,
                                  const kvio_hash_t *hashes, void *const *data, size_t count,
                                  size_t *messages_p)
{
    kvio_status_t status;
    uint32_t messages = group_by_holder(endpoint, hashes, count, &status);
    *messages_p = messages;
    if (status != KVIO_OK)
        return status;
    for (uint32_t m = 0; m < messages; m++) {
        pending_t *p = &endpoint->pending[m];
        p->request = (wire_request_t){.count = p->count};
        p->send_iov[1] = (ucp_dt_iov_t){.buffer = p->hashes,
                                        .length = p->count * sizeof(kvio_hash_t)};
        p->recv_iov[1] = op == OP_HAS ? (ucp_dt_iov_t){.buffer = p->held, .length = p->count}
                                      : (ucp_dt_iov_t){.buffer = p->checksums,
                                                       .length = p->count * sizeof(uint64_t)};
        /* A get's blocks: their receives first, under the tags after the
         * reply's (post_message takes the next sequence number). */
        uint64_t seq = (endpoint->seq + 1) & ~TAG_KIND_MASK;
        p->posted_blocks = op == OP_GET ? p->count : 0;
        for (uint32_t j = 0; j < p->posted_blocks; j++)
            post_recv(&p->blocks[j], endpoint->worker,
                      TAG_REPLY | ((seq + 1 + j) & ~TAG_KIND_MASK), TAG_ALL, data[p->index[j]],
                      endpoint->config.block_bytes, false);
        post_message(endpoint, p, op, 2, 2);
        endpoint->seq += p->posted_blocks;
    }
    return batch_wait(endpoint, messages);
}

/* A put's block i: stored or refreshed (KVIO_OK, *fresh_p), or how it
 * failed (refused for its checksum: KVIO_ERR_CHECKSUM). */
static kvio_status_t put_block_status(const kvio_shared_endpoint_t *endpoint, size_t i,
                                      bool *fresh_p)
{
    const pending_t *p = &endpoint->pending[endpoint->block_message[i]];
    uint32_t position = endpoint->block_position[i];
    kvio_status_t status = got_message_status(p);
    if (status != KVIO_OK)
        return status;
    if (p->received.length != sizeof(p->reply) + p->count)
        return KVIO_ERR_IO;
    const completion_t *block = &p->blocks[position];
    if (block->status != UCS_OK)
        return kvio_status_from_ucs(block->status);
    *fresh_p = p->held[position] == PUT_STORED;
    switch (p->held[position]) {
    case PUT_STORED:
    case PUT_DUPLICATE:
        return KVIO_OK;
    case PUT_REFUSED:
        return KVIO_ERR_CHECKSUM;
    default:
        return KVIO_ERR_IO;
    }
}

kvio_status_t kvio_shared_endpoint_put(kvio_shared_endpoint_t *endpoint,
                                       const kvio_hash_t *hashes, const void *const *data,
                                       size_t count, int64_t *elapsed_ns_p)
{
    uint64_t start_ns = kvio_time_ns();
    size_t messages = 0;
    kvio_status_t status = batch_put(endpoint, hashes, data, count, &messages);
    *elapsed_ns_p = 0;
    if (status == KVIO_ERR_NOMEM)
        return status; /* nothing was sent (a batch's wait never runs out of memory) */
    int64_t elapsed_ns = (int64_t)(kvio_time_ns() - start_ns);
    for (size_t m = 0; m < messages; m++)
        endpoint->links[endpoint->pending[m].holder].put_ns += elapsed_ns;
    for (size_t i = 0; i < count; i++) {
        uint32_t holder = endpoint->pending[endpoint->block_message[i]].holder;
        kvio_shared_link_stats_t *link = &endpoint->links[holder];
        bool fresh = false;
        kvio_status_t block = put_block_status(endpoint, i, &fresh);
        if (block != KVIO_OK) {
            link->errors++;
            link->checksum_failures += block == KVIO_ERR_CHECKSUM;
            if (status == KVIO_OK)
                status = endpoint_failed(endpoint, block, "a put to rank %u: %s", holder,
                                         block == KVIO_ERR_CHECKSUM
                                             ? "the block arrived changed"
                                             : kvio_strerror(block));
            continue;
        }
        link->bytes_written += endpoint->config.block_bytes;
        if (fresh)
            link->puts++;
        else
            link->duplicates++;
    }
    *elapsed_ns_p = elapsed_ns;
    return status;
}

/* A lookup's block i: held (KVIO_OK), not (KVIO_ERR_NOT_FOUND), or how its
 * message failed; a get's block also checked against its checksum (a
 * get's block after its holder's first miss: not found, unasked). */
static kvio_status_t looked_up(kvio_shared_endpoint_t *endpoint, size_t i, const void *data)
{
    pending_t *p = &endpoint->pending[endpoint->block_message[i]];
    uint32_t position = endpoint->block_position[i];
    kvio_status_t status = got_message_status(p);
    if (status != KVIO_OK)
        return status;
    if (p->reply.found > p->count)
        return KVIO_ERR_IO;
    if (data == NULL) {
        if (p->received.length != sizeof(p->reply) + p->count)
            return KVIO_ERR_IO;
        return p->held[position] ? KVIO_OK : KVIO_ERR_NOT_FOUND;
    }
    if (p->received.length != sizeof(p->reply) + p->count * sizeof(uint64_t))
        return KVIO_ERR_IO;
    if (position >= p->reply.found)
        return KVIO_ERR_NOT_FOUND;
    uint64_t block_bytes = endpoint->config.block_bytes;
    const completion_t *block = &p->blocks[position];
    if (block->status != UCS_OK)
        return kvio_status_from_ucs(block->status);
    if (block->length != block_bytes)
        return KVIO_ERR_IO;
    return XXH3_64bits(data, block_bytes) == p->checksums[position] ? KVIO_OK
                                                                    : KVIO_ERR_CHECKSUM;
}

/* A get's messages: their time and the block bytes that crossed each link,
 * counted whether or not they were wanted. */
static void count_get_messages(kvio_shared_endpoint_t *endpoint, size_t messages,
                               int64_t elapsed_ns)
{
    for (size_t m = 0; m < messages; m++) {
        pending_t *p = &endpoint->pending[m];
        kvio_shared_link_stats_t *link = &endpoint->links[p->holder];
        link->get_ns += elapsed_ns;
        for (uint32_t j = 0; j < p->posted_blocks; j++)
            if (p->blocks[j].done && p->blocks[j].status == UCS_OK)
                link->bytes_read += p->blocks[j].length;
    }
}

/* A get of the leading blocks of hashes the store holds; the first not
 * held is a miss (KVIO_ERR_NOT_FOUND) when shortfall_counts, else it only
 * ends them (the caller takes what is held). */
static kvio_status_t endpoint_get(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                                  void *const *data, size_t count, bool shortfall_counts,
                                  size_t *got_p, int64_t *elapsed_ns_p)
{
    *got_p = 0;
    uint64_t start_ns = kvio_time_ns();
    size_t messages = 0;
    kvio_status_t status = batch_lookup(endpoint, OP_GET, hashes, data, count, &messages);
    *elapsed_ns_p = 0;
    if (status == KVIO_ERR_NOMEM)
        return status; /* nothing was sent (a batch's wait never runs out of memory) */
    int64_t elapsed_ns = (int64_t)(kvio_time_ns() - start_ns);
    count_get_messages(endpoint, messages, elapsed_ns);
    size_t got = 0;
    for (size_t i = 0; status == KVIO_OK && i < count; i++) {
        uint32_t holder = endpoint->pending[endpoint->block_message[i]].holder;
        kvio_shared_link_stats_t *link = &endpoint->links[holder];
        kvio_status_t block = looked_up(endpoint, i, data[i]);
        if (block == KVIO_ERR_NOT_FOUND && !shortfall_counts)
            break;
        link->gets++;
        if (block == KVIO_OK) {
            link->hits++;
            got++;
            continue;
        }
        if (block == KVIO_ERR_NOT_FOUND) {
            link->misses++;
            status = KVIO_ERR_NOT_FOUND;
            continue;
        }
        link->errors++;
        link->checksum_failures += block == KVIO_ERR_CHECKSUM;
        status = endpoint_failed(endpoint, block, "a get from rank %u: %s", holder,
                                 block == KVIO_ERR_CHECKSUM ? "the block came back changed"
                                                            : kvio_strerror(block));
    }
    *got_p = got;
    *elapsed_ns_p = elapsed_ns;
    return status;
}

kvio_status_t kvio_shared_endpoint_get(kvio_shared_endpoint_t *endpoint,
                                       const kvio_hash_t *hashes, void *const *data,
                                       size_t count, size_t *got_p, int64_t *elapsed_ns_p)
{
    return endpoint_get(endpoint, hashes, data, count, true, got_p, elapsed_ns_p);
}

kvio_status_t kvio_shared_endpoint_get_held(kvio_shared_endpoint_t *endpoint,
                                            const kvio_hash_t *hashes, void *const *data,
                                            size_t count, size_t *got_p, int64_t *elapsed_ns_p)
{
    return endpoint_get(endpoint, hashes, data, count, false, got_p, elapsed_ns_p);
}

size_t kvio_shared_endpoint_lookup(kvio_shared_endpoint_t *endpoint, const kvio_hash_t *hashes,
                                   size_t count, bool *held_p)
{
    size_t messages = 0, leading = 0;
    for (size_t i = 0; held_p != NULL && i < count; i++)
        held_p[i] = false;
    if (count > 0 && batch_lookup(endpoint, OP_HAS, hashes, NULL, count, &messages) != KVIO_OK)
        count = 0;
    for (size_t i = 0; i < count; i++) {
        kvio_status_t status = looked_up(endpoint, i, NULL);
        if (status != KVIO_OK && status != KVIO_ERR_NOT_FOUND) {
            endpoint_failed(endpoint, status, "asking rank %u for blocks: %s",
                            endpoint->pending[endpoint->block_message[i]].holder,
                            kvio_strerror(status));
            break;
        }
        leading += leading == i && status == KVIO_OK;
        if (held_p != NULL)
            held_p[i] = status == KVIO_OK;
    }
    return leading;
}

bool kvio_shared_endpoint_contains(kvio_shared_endpoint_t *endpoint, kvio_hash_t hash)
{
    return kvio_shared_endpoint_lookup(endpoint, &hash, 1, NULL) == 1;
}

const char *kvio_shared_endpoint_error(const kvio_shared_endpoint_t *endpoint)
{
    return endpoint->error;
}

const kvio_shared_link_stats_t *kvio_shared_endpoint_link(const kvio_shared_endpoint_t *endpoint,
                                                          uint32_t holder)
{
    return &endpoint->links[holder];
}

/* ---------- the end ---------- */

static void server_stop(server_t *server)
{
    if (!server->started)
        return;
    atomic_store(&server->stop, 1);
    if (server->wakeup)
        ucp_worker_signal(server->worker);
    pthread_join(server->thread, NULL);
    server->started = false;
}

kvio_status_t kvio_shared_endpoint_stop(kvio_shared_endpoint_t *endpoint)
{
    /* No rank asks for anything once every rank said it is done. */
    kvio_status_t status = KVIO_OK;
    for (uint32_t r = 0; r < endpoint->size && status == KVIO_OK; r++)
        if (r != endpoint->rank)
            status = kvio_rte_post(endpoint->rte, endpoint->first_rank + (int)r,
                                   KVIO_SHARED_TAG_DONE, "", 0);
    for (uint32_t r = 0; r < endpoint->size && status == KVIO_OK; r++) {
        void *message = NULL;
        size_t length = 0;
        if (r != endpoint->rank)
            status = kvio_rte_recv(endpoint->rte, endpoint->first_rank + (int)r,
                                   KVIO_SHARED_TAG_DONE, &message, &length);
        free(message);
    }
    kvio_status_t flushed = kvio_rte_flush(endpoint->rte);
    if (status == KVIO_OK)
        status = flushed;
    server_stop(&endpoint->server);
    endpoint->stopped = true;
    if (status != KVIO_OK)
        return endpoint_failed(endpoint, status, "waiting for the other ranks to finish: %s",
                               kvio_strerror(status));
    if (endpoint->server.status != KVIO_OK)
        return endpoint_failed(endpoint, endpoint->server.status, "%s",
                               endpoint->server.error);
    return KVIO_OK;
}

kvio_shared_shard_stats_t kvio_shared_endpoint_shard(const kvio_shared_endpoint_t *endpoint)
{
    /* The cast: reading an atomic changes nothing. */
    server_t *server = (server_t *)&endpoint->server;
    return (kvio_shared_shard_stats_t){
        .capacity = server->shard.capacity,
        .held = (uint32_t)atomic_load(&server->published_held),
        .stored = atomic_load(&server->published_stored),
        .evictions = atomic_load(&server->published_evictions),
        .requests = atomic_load(&server->published_requests)};
}

uint32_t kvio_shared_endpoint_rank(const kvio_shared_endpoint_t *endpoint)
{
    return endpoint->rank;
}

uint32_t kvio_shared_endpoint_ranks(const kvio_shared_endpoint_t *endpoint)
{
    return endpoint->size;
}

static void close_eps(ucp_worker_h worker, ucp_ep_h *eps, uint32_t count)
{
    for (uint32_t rank = 0; eps != NULL && rank < count; rank++) {
        if (eps[rank] == NULL)
            continue;
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t request = ucp_ep_close_nbx(eps[rank], &param);
        while (request != NULL && !UCS_PTR_IS_ERR(request) &&
               ucp_request_check_status(request) == UCS_INPROGRESS)
            ucp_worker_progress(worker);
        if (request != NULL && !UCS_PTR_IS_ERR(request))
            ucp_request_free(request);
    }
    free(eps);
}

void kvio_shared_endpoint_destroy(kvio_shared_endpoint_t *endpoint)
{
    if (endpoint == NULL)
        return;
    server_t *server = &endpoint->server;
    server_stop(server);
    close_eps(endpoint->worker, endpoint->eps, endpoint->size);
    close_eps(server->worker, server->eps, endpoint->size);
    if (server->memory != NULL)
        ucp_mem_unmap(server->context, server->memory);
    if (server->slab != NULL)
        munmap(server->slab, server->slab_bytes);
    free(server->inbox);
    free(server->discard);
    shared_shard_fini(&server->shard);
    if (server->worker != NULL)
        ucp_worker_destroy(server->worker);
    if (server->context != NULL)
        ucp_cleanup(server->context);
    if (endpoint->worker != NULL)
        ucp_worker_destroy(endpoint->worker);
    if (endpoint->context != NULL)
        ucp_cleanup(endpoint->context);
    free(endpoint->links);
    free(endpoint->pending);
    free(endpoint->block_message);
    free(endpoint->block_position);
    free(endpoint->open_message);
    free(endpoint);
}
