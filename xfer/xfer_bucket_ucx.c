/* Weight sync over UCX bucket by bucket (weight_sync: in emulate mode): the
 * weights split into the plan's buckets; the trainer stages each (a copy from
 * its weights into one of pipeline_depth registered staging slots, summed on
 * the way) on a thread of its own, puts it into the same slot of every
 * receiver's ring (ucp_put_nbx, flushed) and announces it with an active
 * message; a receiver reloads a bucket (a copy from its ring slot into its
 * weights, summed on the way for the version's verification) when its
 * notice has come, and hands the slot back with an active message. A
 * staging slot takes a bucket once the one it held is put; a receive slot
 * once the one it held is reloaded by every receiver: so
 * pipeline_depth buckets are in flight (put, not yet reloaded), and at
 * depth 2 bucket i+1 is staged while bucket i is put and i-1 reloaded; at
 * depth 1 a bucket is put only once the one before it was reloaded. On a
 * chain or tree route the sender puts only into the first receiver, and a
 * receiver forwards each bucket (a put from its ring slot into the same
 * slot of each of its children's, and the notice) before it reloads it: a
 * child's slot is free then, as the sender waited for every receiver to
 * reload what the slot held before it sent the bucket. */
#include "xfer/xfer_ucx_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "kvio/clock.h"

#define AM_BUCKET KVIO_UCX_AM_USER
#define AM_BUCKET_DONE (KVIO_UCX_AM_USER + 1)
#define AM_HELLO (KVIO_UCX_AM_USER + 2)
#define BUCKET_QUEUE_LENGTH 128 /* above pipeline_depth's bound (64) */
/* Bytes of a delta bucket encoded and summed, or copied and applied, at a
 * time: the second pass finds the bytes in cache. */
#define APPLY_STEP (256u << 10)

/* A bucket's notice: it is in ring slot `slot` of the receiver, whole or,
 * with deltas configured, as a delta's encoding (entries changes,
 * wire_bytes long). */
typedef struct bucket_notice {
    uint64_t magic;
    uint64_t version;
    uint64_t bytes;      /* the whole version's */
    uint64_t checksum;   /* the last bucket: the version's; else 0 */
    uint64_t wire_bytes; /* what was put */
    uint64_t entries;    /* a delta's changes */
    uint32_t bucket, slot;
    int64_t t_ready_ns;
    int64_t t_posted_ns; /* when the sender posted it */
} bucket_notice_t;

/* A receiver's hand-back: it has reloaded this many buckets since the start. */
typedef struct bucket_done {
    uint64_t reloaded;
    int32_t receiver;
    uint32_t unused;
} bucket_done_t;

typedef struct bucket_priv {
    kvio_ucx_t ucx; /* first: the shared ucx ops work on xfer->priv */
    kvio_xfer_t *xfer;
    uint64_t *offsets;   /* bucket b is [offsets[b], offsets[b + 1]) of the weights */
    size_t num_buckets;
    size_t depth;        /* ring slots: pipeline_depth, at most num_buckets */
    uint64_t slot_bytes; /* the largest bucket (or its largest delta) */
    const kvio_delta_t *delta; /* NULL: whole versions */
    char *ring;          /* sender: staging slots; receiver: receive slots */
    uint64_t sequence;   /* sender: buckets put since the start; receiver: reloaded */
    /* Sender: buckets each receiver has reloaded (written by the ucx
     * thread's handler), and their minimum, read by the stager thread. */
    uint64_t *reloaded;
    _Atomic uint64_t reloaded_all;
    _Atomic uint64_t put_all; /* sender: buckets put (flushed) since the start */
    /* Sender: the bytes and changes of each bucket's encoding (the stager's). */
    uint64_t *wire, *entries;
    /* Receiver: notices not yet reloaded, with their arrival. */
    bucket_notice_t queue[BUCKET_QUEUE_LENGTH];
    int64_t noticed_ns[BUCKET_QUEUE_LENGTH];
    int queue_head, queue_count;
    bool overflow;
    uint64_t polled_version;
    int hellos;          /* set-up: peers heard from */
    /* Receiver on a chain or tree: the receivers it forwards to (indices)
     * and their rings; the one that forwards to it (-1: the sender). */
    int children[2], num_children, parent;
    kvio_ucx_remote_slots_t child_ring[2];
    size_t bucket;       /* receiver: the bucket being reloaded */
    size_t stamp;        /* receiver: its row in xfer->stamps */
    char *base;          /* receiver, with deltas: the slot holding the last version
                            (or the starting weights); the next applies on it */
    uint64_t cursor;     /* receiver: changes of the bucket's delta applied */
    kvio_sum_t fill; /* receiver: the sum of the version as it fills the slot */
} bucket_priv_t;

/* A bucket's turn comes within microseconds: the threads that wait for
 * one nap with 1 us of timer slack, not the default 50 us, which would
 * cost every message that much per wait (per-tensor messages, hundreds). */
#define WAIT_TIMER_SLACK_NS 1000

static void nap_us(long microseconds)
{
    struct timespec pause = {.tv_sec = 0, .tv_nsec = microseconds * 1000};
    nanosleep(&pause, NULL);
}

static ucs_status_t on_bucket(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    bucket_priv_t *priv = arg;
    if (length != sizeof(bucket_notice_t) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;
    if (priv->queue_count == BUCKET_QUEUE_LENGTH) {
        priv->overflow = true;
        return UCS_OK;
    }
    int at = (priv->queue_head + priv->queue_count) % BUCKET_QUEUE_LENGTH;
    memcpy(&priv->queue[at], data, sizeof(bucket_notice_t));
    priv->noticed_ns[at] = kvio_rte_time_ns(priv->xfer->rte);
    priv->queue_count++;
    return UCS_OK;
}

static ucs_status_t on_bucket_done(void *arg, const void *header, size_t header_length,
                                   void *data, size_t length, const ucp_am_recv_param_t *param)
{
    bucket_priv_t *priv = arg;
    bucket_done_t done;
    int receivers = priv->xfer->num_receivers;
    if (length != sizeof(done) || priv->reloaded == NULL)
        return UCS_OK;
    memcpy(&done, data, sizeof(done));
    if (done.receiver < 0 || done.receiver >= receivers ||
        done.reloaded <= priv->reloaded[done.receiver])
        return UCS_OK;
    priv->reloaded[done.receiver] = done.reloaded;
    uint64_t least = priv->reloaded[0];
    for (int i = 1; i < receivers; i++)
        least = priv->reloaded[i] < least ? priv->reloaded[i] : least;
    atomic_store(&priv->reloaded_all, least);
    return UCS_OK;
}

static void bucket_fini(kvio_xfer_t *xfer);

static ucs_status_t on_hello(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    bucket_priv_t *priv = arg;
    priv->hellos++;
    return UCS_OK;
}

static bool heard_everyone(void *arg)
{
    const bucket_priv_t *priv = arg;
    const kvio_xfer_t *xfer = priv->xfer;
    /* A receiver hears the sender, and the receiver that forwards to it. */
    return priv->hellos >= (xfer->role == KVIO_XFER_SENDER ? xfer->num_receivers
                                                           : 1 + (priv->parent >= 0));
}

/* Every connection's wire-up, now: the sender and each receiver greet each
 * other both ways, so the first bucket's notice and hand-back are not
 * charged UCX's connection set-up (about a millisecond). */
static kvio_status_t greet(kvio_xfer_t *xfer)
{
    bucket_priv_t *priv = xfer->priv;
    kvio_status_t status = KVIO_OK;
    if (xfer->role == KVIO_XFER_SENDER) {
        for (int i = 0; i < xfer->num_receivers && status == KVIO_OK; i++)
            status = kvio_xfer_ucx_send_am(xfer, xfer->receivers[i], AM_HELLO, "", 1);
    } else if (xfer->role == KVIO_XFER_RECEIVER) {
        status = kvio_xfer_ucx_send_am(xfer, xfer->sender, AM_HELLO, "", 1);
        for (int i = 0; i < priv->num_children && status == KVIO_OK; i++)
            status = kvio_xfer_ucx_send_am(xfer, xfer->receivers[priv->children[i]], AM_HELLO,
                                           "", 1);
    } else {
        return KVIO_OK;
    }
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_wait(xfer, heard_everyone, priv,
                                    xfer->role == KVIO_XFER_SENDER ? xfer->receivers[0]
                                                                   : xfer->sender,
                                    "a greeting from");
    return status;
}

static kvio_status_t bucket_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    bucket_priv_t *priv = xfer->priv;
    const kvio_xfer_config_t *config = xfer->config;
    void **blobs = NULL, *my_ring = NULL;
    size_t *lengths = NULL, my_ring_length = 0;
    priv->xfer = xfer;
    priv->delta = kvio_xfer_delta(xfer);
    priv->parent = -1;
    if (xfer->role == KVIO_XFER_RECEIVER) {
        priv->num_children = kvio_xfer_route_children(xfer, xfer->self_index, priv->children);
        priv->parent = kvio_xfer_route_parent(xfer, xfer->self_index);
    }
    priv->num_buckets = config->num_buckets;
    priv->offsets = calloc(priv->num_buckets + 1, sizeof(*priv->offsets));
    kvio_status_t status = priv->offsets != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    for (size_t b = 0; b < priv->num_buckets && status == KVIO_OK; b++) {
        priv->offsets[b + 1] = priv->offsets[b] + config->bucket_bytes[b];
        uint64_t bytes = kvio_delta_slot_bytes(priv->delta, config->bucket_bytes[b]);
        if (bytes > priv->slot_bytes)
            priv->slot_bytes = bytes;
    }
    if (status == KVIO_OK && priv->offsets[priv->num_buckets] != xfer->bytes) {
        kvio_xfer_set_error(xfer, "ucx transport: buckets of %llu bytes for %llu-byte "
                 "weights", (unsigned long long)priv->offsets[priv->num_buckets],
                 (unsigned long long)xfer->bytes);
        status = KVIO_ERR_INTERNAL;
    }
    priv->depth = (size_t)(config->pipeline_depth > 0 ? config->pipeline_depth : 1);
    if (priv->depth > priv->num_buckets)
        priv->depth = priv->num_buckets;
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_open(xfer);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(&priv->ucx, AM_BUCKET, on_bucket, priv);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(&priv->ucx, AM_BUCKET_DONE, on_bucket_done, priv);
    if (status == KVIO_OK)
        status = kvio_xfer_ucx_set_handler(&priv->ucx, AM_HELLO, on_hello, priv);
    uint64_t ring_bytes = priv->slot_bytes * priv->depth;
    void *ring = NULL;
    if (status == KVIO_OK && xfer->role != KVIO_XFER_BYSTANDER)
        status = kvio_xfer_ucx_map(xfer, NULL, ring_bytes, UCS_MEMORY_TYPE_HOST,
                                   &priv->ucx.memory[0], &ring);
    priv->ring = ring;
    if (priv->ring != NULL)
        memset(priv->ring, 0, ring_bytes); /* faulted in before the first bucket */
    if (status == KVIO_OK && xfer->role == KVIO_XFER_SENDER) {
        priv->reloaded = calloc((size_t)xfer->num_receivers + 1, sizeof(*priv->reloaded));
        priv->wire = calloc(priv->num_buckets, sizeof(*priv->wire));
        priv->entries = calloc(priv->num_buckets, sizeof(*priv->entries));
        xfer->send_buffer = kvio_xfer_aligned_alloc(xfer->bytes);
        if (priv->reloaded == NULL || priv->wire == NULL || priv->entries == NULL ||
            xfer->send_buffer == NULL)
            status = KVIO_ERR_NOMEM;
    } else if (status == KVIO_OK && xfer->role == KVIO_XFER_RECEIVER) {
        /* The receiver's own weights (active and incoming) and its ring's
         * key: the ring is packed as both "slots". */
        for (int slot = 0; slot < 2 && status == KVIO_OK; slot++)
            if ((xfer->slots[slot] = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
                status = KVIO_ERR_NOMEM;
        if (status == KVIO_OK && priv->delta != NULL)
            priv->base = xfer->slots[1]; /* the starting weights (kvio_xfer_create) */
        if (status == KVIO_OK) {
            priv->ucx.memory[1] = priv->ucx.memory[0];
            status = kvio_xfer_ucx_pack_slots(xfer, priv->ring, priv->ring, &my_ring,
                                              &my_ring_length);
            priv->ucx.memory[1] = NULL;
        }
    }
    if (status == KVIO_ERR_NOMEM)
        kvio_xfer_set_error(xfer, "ucx transport: out of memory for %llu-byte weights and "
                            "%zu ring slots of %llu bytes", (unsigned long long)xfer->bytes,
                            priv->depth, (unsigned long long)priv->slot_bytes);
    kvio_status_t exchange = kvio_xfer_ucx_connect(xfer, my_ring, my_ring_length, &blobs,
                                                   &lengths);
    if (status == KVIO_OK)
        status = exchange;
    for (int i = 0; i < xfer->num_receivers && status == KVIO_OK &&
                    xfer->role == KVIO_XFER_SENDER; i++) {
        int rank = xfer->receivers[i];
        status = kvio_xfer_ucx_unpack_slots(xfer, rank, blobs[rank], lengths[rank],
                                            &priv->ucx.remote[i]);
    }
    for (int i = 0; i < priv->num_children && status == KVIO_OK; i++) {
        int rank = xfer->receivers[priv->children[i]];
        status = kvio_xfer_ucx_unpack_slots(xfer, rank, blobs[rank], lengths[rank],
                                            &priv->child_ring[i]);
    }
    if (status == KVIO_OK)
        status = greet(xfer);
    const char *tls = getenv("UCX_TLS");
    static const char *const routes[] = {"to each receiver", "down a chain", "down a tree"};
    snprintf(xfer->info, sizeof(xfer->info),
             "ucx: %zu buckets of up to %llu bytes, pipeline depth %zu, puts %s (UCX_TLS=%s)",
             priv->num_buckets, (unsigned long long)priv->slot_bytes, priv->depth,
             routes[config->route], tls ? tls : "default");
    free(my_ring);
    if (blobs != NULL)
        kvio_rte_blobs_free(blobs, lengths, kvio_rte_size(xfer->rte));
    if (status != KVIO_OK) {
        if (xfer->error[0])
            snprintf(error_p, error_len, "%s", xfer->error);
        else
            snprintf(error_p, error_len, "ucx transport: set-up failed: %s",
                     kvio_strerror(status));
        bucket_fini(xfer); /* fini runs only after a successful init: undo here */
    }
    return status;
}

static void bucket_fini(kvio_xfer_t *xfer)
{
    bucket_priv_t *priv = xfer->priv;
    for (int i = 0; i < 2; i++)
        for (int slot = 0; slot < 2; slot++)
            if (priv->child_ring[i].rkey[slot] != NULL)
                ucp_rkey_destroy(priv->child_ring[i].rkey[slot]);
    kvio_xfer_ucx_close(xfer); /* unmaps the ring */
    free(priv->offsets);
    free(priv->reloaded);
    free(priv->wire);
    free(priv->entries);
    free(xfer->send_buffer);
    xfer->send_buffer = NULL;
    for (int slot = 0; slot < 2; slot++) {
        free(xfer->slots[slot]);
        xfer->slots[slot] = NULL;
    }
}

/* ---- sender ---- */

/* The stager thread of one version: stages bucket b into its staging slot
 * once the bucket that slot held has been put. */
typedef struct stager {
    kvio_xfer_t *xfer;
    uint64_t version;
    uint64_t first;              /* the sequence number of the version's bucket 0 */
    size_t stamps;               /* the version's first row in xfer->stamps */
    _Atomic size_t staged;       /* buckets staged */
    _Atomic bool stop;
} stager_t;

static void *stage_buckets(void *arg)
{
    stager_t *stager = arg;
    kvio_xfer_t *xfer = stager->xfer;
    bucket_priv_t *priv = xfer->priv;
    prctl(PR_SET_TIMERSLACK, WAIT_TIMER_SLACK_NS, 0, 0, 0);
    for (size_t b = 0; b < priv->num_buckets; b++) {
        uint64_t sequence = stager->first + b;
        while (sequence >= atomic_load(&priv->put_all) + priv->depth) {
            if (atomic_load(&stager->stop))
                return NULL;
            nap_us(10);
        }
        /* The bucket's rows, one per receiver, share its stage. */
        size_t receivers = (size_t)xfer->num_receivers;
        kvio_xfer_bucket_stamp_t *rows = &xfer->stamps[stager->stamps + b * receivers];
        int64_t start_ns = kvio_rte_time_ns(xfer->rte);
        char *slot = priv->ring + (sequence % priv->depth) * priv->slot_bytes;
        uint64_t bytes = priv->offsets[b + 1] - priv->offsets[b];
        if (priv->delta != NULL) {
            /* The bucket's changes encoded, and its whole bytes summed (the
             * checksum is of the weights the receivers rebuild), a step at
             * a time: the sum reads what the encoding just brought in. */
            kvio_delta_encoder_t encoder;
            kvio_delta_encode_begin(&encoder, priv->delta, stager->version,
                                         xfer->send_buffer, xfer->bytes, priv->offsets[b], bytes,
                                         slot);
            for (uint64_t done = 0; done < bytes;) {
                uint64_t step = bytes - done < APPLY_STEP ? bytes - done : APPLY_STEP;
                kvio_delta_encode_to(&encoder, done + step);
                kvio_xfer_hash_piece(xfer, priv->offsets[b] + done, step);
                done += step;
            }
            priv->wire[b] = kvio_delta_encode_end(&encoder, &priv->entries[b]);
        } else {
            /* A copy from the weights, summed from its own loads while the
             * publish computes the checksum. */
            kvio_xfer_store_piece(xfer, slot, priv->offsets[b], bytes);
            priv->wire[b] = bytes;
            priv->entries[b] = 0;
        }
        int64_t end_ns = kvio_rte_time_ns(xfer->rte);
        for (size_t i = 0; i < receivers; i++) {
            rows[i].stage_start_ns = start_ns;
            rows[i].stage_end_ns = end_ns;
        }
        atomic_store(&stager->staged, b + 1);
    }
    return NULL;
}

/* Every receiver lives (its heartbeat), or the error naming the one that
 * does not (what it was waiting for: bucket b reloaded). */
static kvio_status_t receivers_alive(kvio_xfer_t *xfer, size_t b)
{
    for (int i = 0; i < xfer->num_receivers; i++) {
        char what[96], reason[512];
        snprintf(what, sizeof(what), "bucket %zu reloaded by rank %d", b, xfer->receivers[i]);
        kvio_status_t status = kvio_rte_peer_check(xfer->rte, xfer->receivers[i], true, what,
                                                   reason, sizeof(reason));
        if (status != KVIO_OK) {
            kvio_xfer_set_error(xfer, "ucx transport: %s", reason);
            return status;
        }
    }
    return KVIO_OK;
}

/* Progresses, napping between idle rounds, until done(arg), while every
 * receiver lives (b: the bucket waited for, to name in an error). */
static kvio_status_t progress_until(kvio_xfer_t *xfer, bool (*done)(const void *arg),
                                    const void *arg, size_t b)
{
    bucket_priv_t *priv = xfer->priv;
    unsigned idle = 0;
    while (!done(arg)) {
        if (ucp_worker_progress(priv->ucx.worker) != 0)
            continue;
        if (++idle % 64 == 0) {
            kvio_status_t status = receivers_alive(xfer, b);
            if (status != KVIO_OK)
                return status;
        }
        nap_us(10);
    }
    return KVIO_OK;
}

/* A bucket's turn: staged, and its slot reloaded by every receiver. */
typedef struct turn {
    const bucket_priv_t *priv;
    stager_t *stager;
    size_t b;
    uint64_t sequence;
} turn_t;

static bool turn_come(const void *arg)
{
    const turn_t *turn = arg;
    return atomic_load(&turn->stager->staged) > turn->b &&
           turn->sequence < atomic_load(&turn->priv->reloaded_all) + turn->priv->depth;
}

/* Waits, progressing, until the stager has staged bucket b (sequence
 * number sequence) and every receiver has reloaded what its slot held,
 * while every receiver lives. */
static kvio_status_t wait_turn(kvio_xfer_t *xfer, stager_t *stager, size_t b, uint64_t sequence)
{
    turn_t turn = {.priv = xfer->priv, .stager = stager, .b = b, .sequence = sequence};
    return progress_until(xfer, turn_come, &turn, b);
}

/* Every receiver has reloaded every bucket put. */
static bool all_reloaded(const void *arg)
{
    const bucket_priv_t *priv = arg;
    return atomic_load(&priv->reloaded_all) >= priv->sequence;
}

/* The end notice goes straight to each receiver; on a chain or tree it
 * waits until every receiver has reloaded every bucket, or it could pass
 * the last buckets on their way down. */
static kvio_status_t bucket_notify(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    bucket_priv_t *priv = xfer->priv;
    kvio_status_t status = KVIO_OK;
    if ((meta->flags & KVIO_XFER_META_END) && xfer->config->route != KVIO_XFER_ROUTE_DIRECT)
        status = progress_until(xfer, all_reloaded, priv, priv->num_buckets - 1);
    return status == KVIO_OK ? kvio_xfer_ucx_notify(xfer, target, meta) : status;
}

/* The version's buckets into every receiver (target -1): staged on the
 * stager thread; on this one, each bucket put into each receiver in turn
 * and announced to it at once (a row of stamps per bucket and receiver). */
static kvio_status_t bucket_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    bucket_priv_t *priv = xfer->priv;
    size_t count = priv->num_buckets, receivers = (size_t)xfer->num_receivers;
    kvio_xfer_bucket_stamp_t *stamps = kvio_xfer_bucket_stamp_add(xfer, count * receivers);
    if (target >= 0 || stamps == NULL) {
        kvio_xfer_set_error(xfer, "ucx transport: %s", stamps == NULL
                                                           ? "out of memory for bucket stamps"
                                                           : "buckets go to every receiver");
        return stamps == NULL ? KVIO_ERR_NOMEM : KVIO_ERR_INTERNAL;
    }
    stager_t stager = {.xfer = xfer, .version = meta->version, .first = priv->sequence,
                       .stamps = xfer->num_stamps - count * receivers};
    for (size_t b = 0; b < count; b++)
        for (size_t i = 0; i < receivers; i++)
            stamps[b * receivers + i] = (kvio_xfer_bucket_stamp_t){
                .version = meta->version, .bucket = (uint32_t)b,
                .rank = kvio_rte_index(xfer->rte), .peer = xfer->receivers[i],
                .bytes = priv->offsets[b + 1] - priv->offsets[b]};
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, stage_buckets, &stager) != 0) {
        kvio_xfer_set_error(xfer, "ucx transport: cannot start the stager thread");
        return KVIO_ERR_NOMEM;
    }
    prctl(PR_SET_TIMERSLACK, WAIT_TIMER_SLACK_NS, 0, 0, 0); /* restored below */
    kvio_status_t status = KVIO_OK;
    for (size_t b = 0; b < count && status == KVIO_OK; b++) {
        uint64_t sequence = priv->sequence + b;
        uint64_t at = (sequence % priv->depth) * priv->slot_bytes;
        status = wait_turn(xfer, &stager, b, sequence);
        uint64_t bytes = priv->wire[b]; /* written before the stager said staged */
        bucket_notice_t notice = {.magic = KVIO_XFER_MAGIC, .version = meta->version,
                                  .bytes = xfer->bytes, .checksum = meta->checksum,
                                  .wire_bytes = bytes, .entries = priv->entries[b],
                                  .bucket = (uint32_t)b,
                                  .slot = (uint32_t)(sequence % priv->depth),
                                  .t_ready_ns = meta->t_ready_ns};
        if (b + 1 == count)
            kvio_xfer_put_checksum(xfer, &notice.checksum); /* summed while staged */
        /* Into every receiver, or the first, which forwards it. */
        size_t targets = xfer->config->route == KVIO_XFER_ROUTE_DIRECT ? receivers : 1;
        for (size_t i = 0; i < targets && status == KVIO_OK; i++) {
            kvio_xfer_bucket_stamp_t *stamp = &xfer->stamps[stager.stamps + b * receivers + i];
            stamp->wire_bytes = bytes;
            stamp->transfer_start_ns = kvio_rte_time_ns(xfer->rte);
            status = kvio_xfer_ucx_put_region(xfer, xfer->receivers[i], priv->ring + at,
                                              priv->ucx.remote[i].address[0] + at,
                                              priv->ucx.remote[i].rkey[0], bytes,
                                              xfer->config->chunk);
            stamp->transfer_end_ns = kvio_rte_time_ns(xfer->rte);
            stamp->control_start_ns = notice.t_posted_ns = stamp->transfer_end_ns;
            if (status == KVIO_OK)
                status = kvio_xfer_ucx_send_am(xfer, xfer->receivers[i], AM_BUCKET, &notice,
                                               sizeof(notice));
            stamp->control_end_ns = kvio_rte_time_ns(xfer->rte);
        }
        if (status == KVIO_OK)
            atomic_store(&priv->put_all, sequence + 1); /* its staging slot is free */
    }
    atomic_store(&stager.stop, true);
    pthread_join(thread, NULL);
    if (slack > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
    if (status == KVIO_OK)
        priv->sequence += count;
    return status;
}

/* ---- receiver ---- */

static kvio_status_t queue_checked(kvio_xfer_t *xfer)
{
    bucket_priv_t *priv = xfer->priv;
    if (!priv->overflow)
        return KVIO_OK;
    kvio_xfer_set_error(xfer, "ucx transport: more than %d bucket notices queued",
                        BUCKET_QUEUE_LENGTH);
    return KVIO_ERR_INTERNAL;
}

/* A version's first bucket is its notice; the end comes as the ucx
 * transport's (after the last version's buckets). */
static kvio_status_t bucket_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p)
{
    bucket_priv_t *priv = xfer->priv;
    ucp_worker_progress(priv->ucx.worker);
    kvio_status_t status = queue_checked(xfer);
    if (status != KVIO_OK)
        return status;
    if (priv->queue_count > 0) {
        const bucket_notice_t *head = &priv->queue[priv->queue_head];
        if (head->bucket != 0 || head->version <= priv->polled_version)
            return KVIO_INPROGRESS;
        *meta_p = (kvio_xfer_meta_t){.magic = head->magic, .version = head->version,
                                     .bytes = head->bytes, .t_ready_ns = head->t_ready_ns};
        priv->polled_version = head->version;
        priv->bucket = 0;
        return KVIO_OK;
    }
    return kvio_xfer_ucx_poll(xfer, meta_p);
}

/* On a chain or tree: the bucket of notice, in this receiver's ring slot,
 * put into the same slot of each child's ring and announced to it (a row of
 * stamps each: this rank, the child, the put and the notice). */
static kvio_status_t forward(kvio_xfer_t *xfer, const bucket_notice_t *notice)
{
    bucket_priv_t *priv = xfer->priv;
    uint64_t at = (uint64_t)notice->slot * priv->slot_bytes;
    kvio_status_t status = KVIO_OK;
    for (int i = 0; i < priv->num_children && status == KVIO_OK; i++) {
        int rank = xfer->receivers[priv->children[i]];
        if (kvio_xfer_bucket_stamp_add(xfer, 1) == NULL)
            return KVIO_ERR_NOMEM;
        size_t row = xfer->num_stamps - 1;
        int64_t start_ns = kvio_rte_time_ns(xfer->rte);
        status = kvio_xfer_ucx_put_region(xfer, rank, priv->ring + at,
                                          priv->child_ring[i].address[0] + at,
                                          priv->child_ring[i].rkey[0], notice->wire_bytes,
                                          xfer->config->chunk);
        bucket_notice_t onward = *notice;
        onward.t_posted_ns = kvio_rte_time_ns(xfer->rte);
        if (status == KVIO_OK)
            status = kvio_xfer_ucx_send_am(xfer, rank, AM_BUCKET, &onward, sizeof(onward));
        xfer->stamps[row] = (kvio_xfer_bucket_stamp_t){
            .version = notice->version, .bucket = notice->bucket,
            .rank = kvio_rte_index(xfer->rte), .peer = rank,
            .bytes = priv->offsets[notice->bucket + 1] - priv->offsets[notice->bucket],
            .wire_bytes = notice->wire_bytes, .transfer_start_ns = start_ns,
            .transfer_end_ns = onward.t_posted_ns, .control_start_ns = onward.t_posted_ns,
            .control_end_ns = kvio_rte_time_ns(xfer->rte)};
    }
    return status;
}

/* A delta bucket's piece at offset into the slot starting at weights: the
 * version before's bytes (in base) copied there, unless it is the same
 * slot, and the changes in the piece written over them. Trims *piece_p to
 * whole elements. */
static kvio_status_t apply_delta(kvio_xfer_t *xfer, const bucket_notice_t *notice,
                                 char *weights, uint64_t offset, uint64_t *piece_p)
{
    bucket_priv_t *priv = xfer->priv;
    const kvio_delta_t *delta = priv->delta;
    size_t b = notice->bucket;
    uint64_t start = priv->offsets[b], bytes = priv->offsets[b + 1] - start;
    uint64_t piece = *piece_p;
    if (offset + piece < start + bytes && piece >= delta->element)
        piece -= piece % delta->element;
    const char *encoding = priv->ring + notice->slot * priv->slot_bytes;
    for (uint64_t done = 0; done < piece;) {
        uint64_t step = piece - done < APPLY_STEP ? piece - done : APPLY_STEP;
        uint64_t at = offset + done;
        if (priv->base != weights)
            memcpy(weights + at, priv->base + at, step);
        if (!kvio_delta_apply(delta, encoding, notice->entries, bytes, weights + start,
                                   at - start, at - start + step, &priv->cursor)) {
            kvio_xfer_set_error(xfer, "ucx transport: bucket %u of version %llu: its delta's "
                                "encoding is corrupt", notice->bucket,
                                (unsigned long long)notice->version);
            return KVIO_ERR_TRANSPORT;
        }
        kvio_sum_pass(&priv->fill, NULL, step); /* the rebuilt bytes, from cache */
        done += step;
    }
    *piece_p = piece;
    return KVIO_OK;
}

/* Reloads the next piece of the bucket holding offset, once its notice has
 * come: a copy from the ring slot into the receiver's weights (buffer).
 * The bucket's last piece hands the slot back. */
static kvio_status_t bucket_fetch(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta, void *buffer,
                                  uint64_t offset, uint64_t length, uint64_t *moved_p)
{
    bucket_priv_t *priv = xfer->priv;
    *moved_p = 0;
    kvio_xfer_ucx_progress(xfer);
    kvio_status_t status = queue_checked(xfer);
    if (status != KVIO_OK || priv->queue_count == 0)
        return status;
    while (priv->bucket + 1 < priv->num_buckets && priv->offsets[priv->bucket + 1] <= offset)
        priv->bucket++;
    size_t b = priv->bucket;
    int at = priv->queue_head;
    const bucket_notice_t *notice = &priv->queue[at];
    if (notice->magic != KVIO_XFER_MAGIC || notice->version != meta->version ||
        notice->bucket != b || notice->slot >= priv->depth ||
        notice->wire_bytes > priv->slot_bytes) {
        kvio_xfer_set_error(xfer, "ucx transport: bucket %u of version %llu came where "
                            "bucket %zu of version %llu was due", notice->bucket,
                            (unsigned long long)notice->version, b,
                            (unsigned long long)meta->version);
        return KVIO_ERR_TRANSPORT;
    }
    int64_t now = kvio_rte_time_ns(xfer->rte);
    if (offset == priv->offsets[b]) {
        kvio_xfer_bucket_stamp_t *stamp = kvio_xfer_bucket_stamp_add(xfer, 1);
        if (stamp == NULL)
            return KVIO_ERR_NOMEM;
        *stamp = (kvio_xfer_bucket_stamp_t){
            .version = notice->version, .bucket = notice->bucket,
            .rank = kvio_rte_index(xfer->rte), .peer = xfer->sender,
            .source = priv->parent >= 0 ? xfer->receivers[priv->parent] : xfer->sender,
            .bytes = priv->offsets[b + 1] - priv->offsets[b],
            .wire_bytes = notice->wire_bytes, .notice_sent_ns = notice->t_posted_ns,
            .noticed_ns = priv->noticed_ns[at], .reload_start_ns = now};
        priv->stamp = xfer->num_stamps - 1;
        priv->cursor = 0;
        status = forward(xfer, notice);
        if (status != KVIO_OK)
            return status;
    }
    uint64_t end = priv->offsets[b + 1];
    uint64_t piece = end - offset < length ? end - offset : length;
    const char *slot = priv->ring + notice->slot * priv->slot_bytes;
    if (offset == 0) /* the version's sum, taken as the slot fills */
        kvio_sum_start(&priv->fill, buffer, xfer->bytes);
    if (priv->delta != NULL) {
        status = apply_delta(xfer, notice, (char *)buffer - offset, offset, &piece);
        if (status != KVIO_OK)
            return status;
    } else {
        /* Read once: summed and stored with streaming stores (cached ones
         * would first read every line of the weights). */
        kvio_sum_fill(&priv->fill, slot + (offset - priv->offsets[b]), piece);
    }
    *moved_p = piece;
    if (offset + piece < end)
        return KVIO_OK;
    xfer->stamps[priv->stamp].reload_end_ns = kvio_rte_time_ns(xfer->rte);
    if (b + 1 == priv->num_buckets) {
        meta->checksum = notice->checksum;
        priv->base = (char *)buffer - offset; /* the version's slot: the next delta's base */
        xfer->fetched_sum = kvio_sum_digest(&priv->fill);
        xfer->fetched_version = meta->version;
    }
    priv->queue_head = (priv->queue_head + 1) % BUCKET_QUEUE_LENGTH;
    priv->queue_count--;
    priv->sequence++;
    bucket_done_t done = {.reloaded = priv->sequence, .receiver = xfer->self_index};
    return kvio_xfer_ucx_send_am(xfer, xfer->sender, AM_BUCKET_DONE, &done, sizeof(done));
}

const kvio_xfer_ops_t kvio_xfer_ucx_bucket_ops = {
    .plugin = {.name = "ucx", .help = "weight_sync's buckets over UCX puts",
               .options = kvio_no_options},
    .caps = KVIO_XFER_CAP_BUCKETS | KVIO_XFER_CAP_HASH_ON_PUT | KVIO_XFER_CAP_SUMS_FETCH,
    .priv_size = sizeof(bucket_priv_t),
    .init = bucket_init,
    .fini = bucket_fini,
    .put = bucket_put,
    .notify = bucket_notify,
    .poll = bucket_poll,
    .fetch = bucket_fetch,
    .progress = kvio_xfer_ucx_progress,
};
