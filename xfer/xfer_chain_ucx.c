/* Pipelined chain fan-out of the ucx transport (train.transport.fanout:
 * chain): the sender puts a version only into the first receiver; each
 * receiver forwards every piece into the next receiver's slot as soon as it
 * knows the piece is in its own, so the hops overlap and the last receiver
 * has the data about one chunk per hop after the first. A piece is known to
 * be in place when the hop before has flushed its puts and then said so
 * with an active message (the flush returns once the bytes are at the
 * target, so the message never runs ahead of the data). A slot that UCX
 * mapped into the forwarding process (shared memory) is written with that
 * process's own streaming stores instead of puts. The sender sums the
 * version as it puts it, and the message that completes a version carries
 * its checksum (earlier ones do not have it yet). A receiver queues
 * its notice once its whole copy is in; the end notice travels down the
 * chain behind the last version. The sender and every receiver run the same
 * forwarder: the sender's source is its buffer with every byte ready. */
#include "xfer/xfer_ucx_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/ucx_status.h"

#define INBOX_LENGTH 16

typedef kvio_ucx_chain_message_t chain_message_t;

typedef struct kvio_ucx_chain {
    kvio_xfer_t *xfer;
    int upstream;                /* rank that puts into this one (-1: the sender) */
    int next;                    /* rank this one forwards to (-1: the last) */
    int next_index;              /* its index in receivers */
    const kvio_ucx_remote_slots_t *next_slots;
    /* Messages from upstream not yet taken; the handler folds progress of
     * one version into the newest entry. */
    chain_message_t inbox[INBOX_LENGTH];
    int inbox_head, inbox_count;
    bool inbox_overflow;
    /* The version in flight here. */
    bool active;
    chain_message_t current;     /* bytes_ready: what upstream said is in */
    bool noticed;                /* this rank's notice is queued (sender: always) */
    uint64_t posted;             /* bytes whose puts to the next rank are posted */
    uint64_t flush_target;       /* what the last flush covers (in flight while
                                    flushed is below it) */
    uint64_t flushed;            /* bytes at the next rank */
    uint64_t announced;          /* bytes the next rank was told about */
    int64_t t_forward_start_ns;  /* first put to the next rank */
    int64_t t_flushed_ns;
    int puts_inflight;
    bool send_inflight;          /* outgoing is in use */
    chain_message_t outgoing;
    bool end_pending;            /* the end was passed on; queue it here when sent */
    ucs_status_t request_error;
    kvio_status_t failure;       /* sticky: the first error */
} kvio_ucx_chain_t;

static int slot_of(const chain_message_t *message, int receiver)
{
    return (int)((message->slot_bits[receiver / 64] >> (receiver % 64)) & 1);
}

static kvio_status_t chain_fail(kvio_ucx_chain_t *chain, kvio_status_t status, const char *fmt,
                                ...) __attribute__((format(printf, 3, 4)));

/* A message that does not describe this transport's buffer is dropped and
 * ends the chain here: forwarding it would put bytes_ready bytes past the
 * end of the next rank's slot. */
static bool valid_message(kvio_ucx_chain_t *chain, const chain_message_t *message)
{
    const char *what = NULL;
    if (message->meta.magic != KVIO_XFER_MAGIC)
        what = "a bad magic number";
    else if (message->meta.bytes != chain->xfer->bytes)
        what = "a size other than the weights'";
    else if (message->bytes_ready > message->meta.bytes)
        what = "more bytes ready than the version has";
    if (what == NULL)
        return true;
    chain_fail(chain, KVIO_ERR_TRANSPORT, "rank %d, the one before rank %d in the chain, sent "
               "a message with %s (magic 0x%016llx, version %llu, bytes %llu of %llu ready; "
               "the weights have %llu); dropped", chain->upstream,
               kvio_rte_index(chain->xfer->rte), what,
               (unsigned long long)message->meta.magic,
               (unsigned long long)message->meta.version,
               (unsigned long long)message->bytes_ready,
               (unsigned long long)message->meta.bytes,
               (unsigned long long)chain->xfer->bytes);
    return false;
}

/* Adds a message from upstream to the inbox: more bytes of the version it
 * already ends with raise that entry; anything else is appended (a full
 * inbox is an overflow, reported by the next step). */
/* More of the same version is in: takes message's bytes_ready (and the
 * flush time that made it so) when it is further than into's. */
static void raise_ready(chain_message_t *into, const chain_message_t *message)
{
    if (message->bytes_ready > into->bytes_ready) {
        into->bytes_ready = message->bytes_ready;
        into->meta.t_xfer_end_ns = message->meta.t_xfer_end_ns;
        /* The sender sums the version as it puts it: the checksum is the
         * one of the message that completes it. */
        if (message->bytes_ready >= message->meta.bytes)
            into->meta.checksum = message->meta.checksum;
    }
}

static void inbox_add(kvio_ucx_chain_t *chain, const chain_message_t *message)
{
    if (chain->inbox_count > 0) {
        chain_message_t *newest =
            &chain->inbox[(chain->inbox_head + chain->inbox_count - 1) % INBOX_LENGTH];
        if (!(message->meta.flags & KVIO_XFER_META_END) &&
            !(newest->meta.flags & KVIO_XFER_META_END) &&
            newest->meta.version == message->meta.version) {
            raise_ready(newest, message);
            return;
        }
    }
    if (chain->inbox_count == INBOX_LENGTH) {
        chain->inbox_overflow = true;
        return;
    }
    chain->inbox[(chain->inbox_head + chain->inbox_count) % INBOX_LENGTH] = *message;
    chain->inbox_count++;
}

static ucs_status_t on_chain(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    kvio_ucx_chain_t *chain = arg;
    chain_message_t message;
    if (length != sizeof(message) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;
    memcpy(&message, data, sizeof(message));
    if (chain->failure == KVIO_OK && valid_message(chain, &message))
        inbox_add(chain, &message);
    return UCS_OK;
}

static void put_done(void *request, ucs_status_t status, void *user_data)
{
    kvio_ucx_chain_t *chain = user_data;
    chain->puts_inflight--;
    if (status != UCS_OK)
        chain->request_error = status;
    ucp_request_free(request);
}

static bool flush_inflight(const kvio_ucx_chain_t *chain)
{
    return chain->flushed < chain->flush_target;
}

static void flush_done_now(kvio_ucx_chain_t *chain)
{
    chain->flushed = chain->flush_target;
    chain->t_flushed_ns = kvio_rte_time_ns(chain->xfer->rte);
}

static void flush_done(void *request, ucs_status_t status, void *user_data)
{
    kvio_ucx_chain_t *chain = user_data;
    if (status != UCS_OK)
        chain->request_error = status;
    else
        flush_done_now(chain);
    ucp_request_free(request);
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    kvio_ucx_chain_t *chain = user_data;
    chain->send_inflight = false;
    if (status != UCS_OK)
        chain->request_error = status;
    ucp_request_free(request);
}

/* Records the chain's first error (named by rank) and returns it. */
static kvio_status_t chain_fail(kvio_ucx_chain_t *chain, kvio_status_t status, const char *fmt,
                                ...)
{
    if (chain->failure != KVIO_OK)
        return chain->failure;
    char text[400];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof(text), fmt, args);
    va_end(args);
    kvio_xfer_set_error(chain->xfer, "ucx transport: chain: %s", text);
    chain->failure = status;
    return status;
}

/* Posts request-returning UCX calls: NULL is done, an error is fatal. */
static kvio_status_t posted(kvio_ucx_chain_t *chain, ucs_status_ptr_t request, int rank,
                            const char *what)
{
    if (!UCS_PTR_IS_ERR(request))
        return KVIO_OK;
    return chain_fail(chain, kvio_status_from_ucs(UCS_PTR_STATUS(request)), "%s rank %d: %s",
                      what, rank, ucs_status_string(UCS_PTR_STATUS(request)));
}

static kvio_status_t send_message(kvio_ucx_chain_t *chain, const chain_message_t *message)
{
    kvio_ucx_t *ucx = chain->xfer->priv;
    chain->outgoing = *message;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send = send_done, .user_data = chain, .flags = UCP_AM_SEND_FLAG_EAGER};
    ucs_status_ptr_t request = ucp_am_send_nbx(ucx->eps[chain->next], KVIO_UCX_AM_CHAIN, NULL, 0,
                                               &chain->outgoing, sizeof(chain->outgoing), &param);
    chain->send_inflight = request != NULL && !UCS_PTR_IS_ERR(request);
    return posted(chain, request, chain->next, "sending chain progress to");
}

/* Queues a notice for this receiver's own poll. */
static kvio_status_t queue_notice(kvio_ucx_chain_t *chain, const kvio_xfer_meta_t *meta)
{
    if (!kvio_xfer_ucx_queue_push(chain->xfer->priv, meta))
        return chain_fail(chain, KVIO_ERR_INTERNAL, "more than %d notices queued",
                          KVIO_UCX_QUEUE_LENGTH);
    return KVIO_OK;
}

/* Starts the version in message on this rank. */
static void begin_version(kvio_ucx_chain_t *chain, const chain_message_t *message)
{
    chain->current = *message;
    chain->active = true;
    chain->noticed = chain->xfer->role == KVIO_XFER_SENDER; /* the sender has no notice */
    chain->posted = chain->flush_target = chain->flushed = chain->announced = 0;
    chain->t_forward_start_ns = chain->t_flushed_ns = 0;
}

/* Takes messages from the inbox while they belong to the version in flight
 * or nothing is in flight. */
static kvio_status_t take_inbox(kvio_ucx_chain_t *chain)
{
    while (chain->inbox_count > 0) {
        chain_message_t *message = &chain->inbox[chain->inbox_head];
        bool end = (message->meta.flags & KVIO_XFER_META_END) != 0;
        if (end) {
            /* Passed on only once everything before it has left. */
            if (chain->active || chain->send_inflight || chain->end_pending)
                break;
            if (chain->next >= 0) {
                kvio_status_t status = send_message(chain, message);
                if (status != KVIO_OK)
                    return status;
            }
            chain->current = *message;
            chain->end_pending = true;
        } else if (chain->active && message->meta.version == chain->current.meta.version) {
            raise_ready(&chain->current, message);
        } else if (!chain->active) {
            begin_version(chain, message);
        } else {
            break; /* the next version waits until this one has left */
        }
        chain->inbox_head = (chain->inbox_head + 1) % INBOX_LENGTH;
        chain->inbox_count--;
    }
    return KVIO_OK;
}

/* Flushes what is posted once those puts are complete here and no flush
 * is in flight (the order the sequential path keeps: puts done, then the
 * flush), and tells the next rank about what a finished flush covers when
 * no message is in flight. */
static kvio_status_t flush_and_announce(kvio_ucx_chain_t *chain, ucp_ep_h ep)
{
    if (!flush_inflight(chain) && chain->puts_inflight == 0 &&
        chain->posted > chain->flush_target) {
        chain->flush_target = chain->posted;
        ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = flush_done, .user_data = chain};
        ucs_status_ptr_t request = ucp_ep_flush_nbx(ep, &param);
        kvio_status_t status = posted(chain, request, chain->next, "flushing to");
        if (status != KVIO_OK)
            return status;
        if (request == NULL)
            flush_done_now(chain);
    }
    if (chain->flushed > chain->announced && !chain->send_inflight) {
        chain_message_t message = chain->current;
        message.bytes_ready = chain->flushed;
        message.meta.t_xfer_start_ns = chain->t_forward_start_ns;
        message.meta.t_xfer_end_ns = chain->t_flushed_ns;
        kvio_status_t status = send_message(chain, &message);
        if (status != KVIO_OK)
            return status;
        chain->announced = chain->flushed;
    }
    return KVIO_OK;
}

/* One bounded round of forwarding: puts up to what is ready (at most
 * `inflight` chunks per call, so a receiver's loop is never held for long),
 * each followed by a flush and a message as soon as the ones before are
 * done, so the next rank can go on one chunk behind this one. */
static kvio_status_t forward(kvio_ucx_chain_t *chain, const char *source)
{
    kvio_xfer_t *xfer = chain->xfer;
    kvio_ucx_t *ucx = xfer->priv;
    ucp_ep_h ep = ucx->eps[chain->next];
    uint64_t chunk = xfer->config->chunk;
    int slot = slot_of(&chain->current, chain->next_index);
    uint64_t remote = chain->next_slots->address[slot];
    ucp_rkey_h rkey = chain->next_slots->rkey[slot];
    char *mapped = chain->next_slots->mapped[slot]; /* shared memory: stores, not puts */
    int limit = (int)xfer->config->inflight;
    kvio_status_t status = KVIO_OK;
    for (int posted_now = 0; posted_now < limit && chain->puts_inflight < limit &&
                             chain->posted < chain->current.bytes_ready && status == KVIO_OK;
         posted_now++) {
        uint64_t offset = chain->posted;
        uint64_t piece = chain->current.bytes_ready - offset < chunk
                             ? chain->current.bytes_ready - offset
                             : chunk;
        if (xfer->role == KVIO_XFER_SENDER && kvio_xfer_fault_now(xfer)) {
            chain->failure = KVIO_ERR_INTERRUPTED; /* a dead sender leaves its puts behind */
            return chain->failure;
        }
        if (offset == 0)
            chain->t_forward_start_ns = kvio_rte_time_ns(xfer->rte);
        bool sender = xfer->role == KVIO_XFER_SENDER;
        if (mapped != NULL && sender) {
            /* In place when stored (and fenced), summed on the way when the
             * publish sums; the flush behind it finds nothing outstanding. */
            kvio_xfer_store_piece(xfer, mapped + offset, offset, piece);
        } else if (mapped != NULL) {
            kvio_copy_streaming(mapped + offset, source + offset, piece);
        } else {
            if (sender)
                kvio_xfer_hash_piece(xfer, offset, piece);
            ucp_request_param_t param = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                .cb.send = put_done, .user_data = chain};
            ucs_status_ptr_t request = ucp_put_nbx(ep, source + offset, piece, remote + offset,
                                                   rkey, &param);
            status = posted(chain, request, chain->next, "putting to");
            if (status != KVIO_OK)
                return status;
            if (request != NULL)
                chain->puts_inflight++;
        }
        chain->posted += piece;
        /* The last piece summed: the messages from now on carry the sum. */
        uint64_t checksum;
        if (sender && chain->posted >= chain->current.meta.bytes &&
            kvio_xfer_put_checksum(xfer, &checksum))
            chain->current.meta.checksum = checksum;
        status = flush_and_announce(chain, ep);
    }
    if (status == KVIO_OK)
        status = flush_and_announce(chain, ep);
    return status;
}

/* Checks the neighbours this rank depends on while something is in flight:
 * failed, or silent (no heartbeat) for longer than the runtime's timeout;
 * a slow neighbour is waited for. */
static kvio_status_t check_neighbours(kvio_ucx_chain_t *chain)
{
    kvio_xfer_t *xfer = chain->xfer;
    unsigned long long version = chain->current.meta.version;
    bool waiting = chain->active || chain->end_pending || chain->send_inflight;
    char waiting_for[128], reason[512];
    snprintf(waiting_for, sizeof(waiting_for), "version %llu from it in the chain", version);
    if (chain->upstream >= 0 &&
        kvio_rte_peer_check(xfer->rte, chain->upstream, waiting && chain->active, waiting_for,
                            reason, sizeof(reason)) != KVIO_OK)
        return chain_fail(chain, KVIO_ERR_PEER, "rank %d, the one before rank %d in the chain: "
                          "%s", chain->upstream, kvio_rte_index(xfer->rte), reason);
    snprintf(waiting_for, sizeof(waiting_for), "it to take version %llu in the chain", version);
    if (chain->next >= 0 &&
        kvio_rte_peer_check(xfer->rte, chain->next, waiting && !chain->active, waiting_for,
                            reason, sizeof(reason)) != KVIO_OK)
        return chain_fail(chain, KVIO_ERR_PEER, "rank %d, the one after rank %d in the chain: "
                          "%s", chain->next, kvio_rte_index(xfer->rte), reason);
    return KVIO_OK;
}

/* One round on this rank: take messages, queue the notice once the copy
 * is complete, forward, and retire the version once it has left. */
static kvio_status_t chain_step(kvio_ucx_chain_t *chain)
{
    kvio_xfer_t *xfer = chain->xfer;
    if (chain->failure != KVIO_OK)
        return chain->failure;
    if (chain->request_error != UCS_OK)
        return chain_fail(chain, kvio_status_from_ucs(chain->request_error), "rank %d: %s",
                          chain->next, ucs_status_string(chain->request_error));
    if (chain->inbox_overflow)
        return chain_fail(chain, KVIO_ERR_INTERNAL, "more than %d versions queued at rank %d",
                          INBOX_LENGTH, kvio_rte_index(xfer->rte));
    kvio_status_t status = take_inbox(chain);
    if (status == KVIO_OK && chain->end_pending && !chain->send_inflight) {
        chain->end_pending = false;
        if (xfer->role == KVIO_XFER_RECEIVER)
            status = queue_notice(chain, &chain->current.meta);
    }
    if (status != KVIO_OK || !chain->active)
        return status;
    uint64_t bytes = chain->current.meta.bytes;
    if (!chain->noticed && chain->current.bytes_ready >= bytes) {
        /* Upstream flushed the last piece into this rank's slot. */
        kvio_xfer_meta_t notice = chain->current.meta;
        notice.slot = (uint32_t)slot_of(&chain->current, xfer->self_index);
        /* Its t_xfer_start_ns: upstream's first put into this rank. */
        status = queue_notice(chain, &notice);
        chain->noticed = true;
    }
    if (status == KVIO_OK && chain->next >= 0) {
        const char *source = xfer->role == KVIO_XFER_SENDER
                                 ? xfer->send_buffer
                                 : xfer->slots[slot_of(&chain->current, xfer->self_index)];
        status = forward(chain, source);
    }
    if (status == KVIO_OK && chain->noticed &&
        (chain->next < 0 || (chain->announced >= bytes && !chain->send_inflight)) &&
        chain->puts_inflight == 0 && !flush_inflight(chain))
        chain->active = false;
    return status;
}

kvio_status_t kvio_xfer_ucx_chain_init(kvio_xfer_t *xfer)
{
    kvio_ucx_t *ucx = xfer->priv;
    if (xfer->num_receivers > KVIO_UCX_CHAIN_MAX_RECEIVERS) {
        kvio_xfer_set_error(xfer, "ucx transport: fanout: chain takes at most %d serve ranks, "
                            "not %d", KVIO_UCX_CHAIN_MAX_RECEIVERS, xfer->num_receivers);
        return KVIO_ERR_CONFIG;
    }
    kvio_ucx_chain_t *chain = calloc(1, sizeof(*chain));
    if (chain == NULL)
        return KVIO_ERR_NOMEM;
    chain->xfer = xfer;
    if (xfer->role == KVIO_XFER_SENDER) {
        chain->upstream = -1;
        chain->next_index = 0;
        chain->next = xfer->num_receivers > 0 ? xfer->receivers[0] : -1;
        chain->next_slots = &ucx->remote[0];
    } else {
        int index = xfer->self_index;
        chain->upstream = index == 0 ? xfer->sender : xfer->receivers[index - 1];
        chain->next_index = index + 1;
        chain->next = index + 1 < xfer->num_receivers ? xfer->receivers[index + 1] : -1;
        chain->next_slots = &ucx->next;
    }
    ucx->chain = chain;
    if (xfer->role == KVIO_XFER_RECEIVER)
        return kvio_xfer_ucx_set_handler(ucx, KVIO_UCX_AM_CHAIN, on_chain, chain);
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_chain_progress(kvio_xfer_t *xfer)
{
    kvio_ucx_t *ucx = xfer->priv;
    kvio_ucx_chain_t *chain = ucx->chain;
    kvio_status_t status = chain_step(chain);
    if (status == KVIO_OK)
        status = check_neighbours(chain);
    return status;
}

kvio_status_t kvio_xfer_ucx_chain_landed(kvio_xfer_t *xfer, kvio_xfer_landed_t *landed_p)
{
    kvio_ucx_t *ucx = xfer->priv;
    kvio_ucx_chain_t *chain = ucx->chain;
    if (xfer->role != KVIO_XFER_RECEIVER || chain->failure != KVIO_OK || !chain->active ||
        chain->noticed)
        return KVIO_INPROGRESS;
    *landed_p = (kvio_xfer_landed_t){.version = chain->current.meta.version,
                                     .slot = slot_of(&chain->current, xfer->self_index),
                                     .bytes = chain->current.bytes_ready};
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ucx_chain(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta)
{
    kvio_ucx_t *ucx = xfer->priv;
    kvio_ucx_chain_t *chain = ucx->chain;
    if (chain->next < 0)
        return KVIO_OK;
    chain_message_t message = {.meta = *meta, .bytes_ready = meta->bytes};
    for (int i = 0; i < xfer->num_receivers; i++)
        message.slot_bits[i / 64] |= (uint64_t)(ucx->free_slot[i] & 1) << (i % 64);
    /* The sender is its own upstream: the message goes into its inbox (empty
     * here: the loop below drained it for the version before). */
    inbox_add(chain, &message);
    kvio_status_t status = KVIO_OK;
    while (status == KVIO_OK && (chain->inbox_count > 0 || chain->active ||
                                 chain->end_pending || chain->send_inflight)) {
        status = chain_step(chain);
        if (status == KVIO_OK && ucp_worker_progress(ucx->worker) == 0)
            status = check_neighbours(chain);
    }
    return status;
}
