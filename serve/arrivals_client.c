/* The client rank as a serve rank's arrival source (emulate with several
 * serve ranks): request batches come over the runtime whenever the client
 * sends them, looked for at every iteration boundary and, while the rank is
 * idle, between naps; the first batch sets the engine's time zero (the
 * client's). The rank's state goes back to the client after every
 * iteration (what its router reads), once when it is ready and once, final,
 * when it has finished. The client is judged by its heartbeats: alive but
 * slow is waited for, silent past the runtime's timeout is lost. */
#include "serve/loop_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "kvio/log.h"

/* How soon an idle serve rank with a client looks for requests again. */
#define CLIENT_POLL_NS 200000

struct kvio_serve_client_arrivals {
    kvio_serve_arrivals_t base;
    kvio_rte_t *rte;
    int client_rank;
    uint32_t serve_index;
    kvio_serve_loop_t *loop;      /* its one lane's */
    kvio_serve_lane_t *lane;
    kvio_serve_publisher_t publisher;
    kvio_hash_buffer_t hashes;
    bool ended;                   /* the last batch has arrived, or the client is lost */
    bool lost;                    /* the client failed, ended early or fell silent */
    char lost_reason[512];
    bool origin_known;            /* the loop counts from the client's time zero */
    int64_t now_ns;               /* the time requests are being taken at */
    bool took;                    /* a request was taken since the last look */
    char error[640];
};

typedef struct kvio_serve_client_arrivals client_arrivals_t;

/* One request of a batch into the lane, tagged with its active version. */
static kvio_status_t take_request(void *context, const kvio_engine_request_t *request)
{
    client_arrivals_t *source = context;
    kvio_engine_request_t tagged = *request;
    kvio_serve_lane_t *lane = source->lane;
    tagged.tag = lane->updates != NULL
                     ? lane->updates->ops->version_at(lane->updates, source->now_ns)
                     : 0;
    source->publisher.received++;
    source->took = true;
    return kvio_serve_loop_add(source->loop, lane, &tagged);
}

/* The client rank lost before its last batch (failed, ended, or silent
 * past the runtime's timeout) ends the arrivals, not the rank: it serves
 * what it holds and applies updates until the run's end, so what it
 * served reaches the results; rank 0, missing the client's report, fails
 * the run naming the client. */
static void check_client(client_arrivals_t *source)
{
    char reason[512];
    if (kvio_rte_peer_check(source->rte, source->client_rank, true, "its next request batch",
                            reason, sizeof(reason)) == KVIO_OK)
        return;
    kvio_warn("serve rank %u: the client rank is lost: %s; no more requests come, so it "
              "serves those it holds and applies updates until the run's end",
              source->serve_index, reason);
    snprintf(source->lost_reason, sizeof(source->lost_reason), "%s", reason);
    source->lost = true;
    source->ended = true;
}

/* Takes every batch the client has sent; the first sets the time zero. */
static kvio_status_t receive(client_arrivals_t *source, int64_t now_ns)
{
    source->now_ns = now_ns;
    while (!source->ended) {
        void *data = NULL;
        size_t length = 0;
        kvio_status_t status = kvio_rte_try_recv(source->rte, source->client_rank,
                                                 KVIO_SERVE_TAG_REQUESTS, &data, &length);
        if (status == KVIO_INPROGRESS || status == KVIO_ERR_PEER) {
            check_client(source);
            return KVIO_OK;
        }
        int64_t origin_ns = 0;
        bool last = false;
        if (status == KVIO_OK) {
            status = kvio_serve_batch_read(data, length, take_request, source, &source->hashes,
                                           &origin_ns, &last);
            if (status == KVIO_ERR_PARSE)
                snprintf(source->error, sizeof(source->error),
                         "serve rank %u: a bad request batch from the client rank",
                         source->serve_index);
        }
        free(data);
        if (status != KVIO_OK)
            return status;
        if (!source->origin_known) {
            /* Nothing ran before the first batch: adopt the client's clock. */
            source->origin_known = true;
            source->loop->origin_ns = origin_ns;
        }
        source->ended = last;
    }
    return KVIO_OK;
}

/* Posts the lane's state to the client (final: serving is over; then
 * waits until everything posted has left). To a lost client only the
 * final state goes, unwaited for: a client that was only stopped and
 * goes on can end. */
static kvio_status_t publish(client_arrivals_t *source, bool final)
{
    if (source->lost && !final)
        return KVIO_OK;
    void *blob = NULL;
    size_t length = 0;
    kvio_status_t status = kvio_serve_publisher_pack(&source->publisher, source->lane->engine,
                                                     final, &blob, &length);
    if (status == KVIO_OK)
        status = kvio_rte_post(source->rte, source->client_rank, KVIO_SERVE_TAG_STATE, blob,
                               length);
    free(blob);
    if (source->lost)
        return KVIO_OK;
    if (status == KVIO_OK && final)
        status = kvio_rte_flush(source->rte);
    if (status != KVIO_OK)
        snprintf(source->error, sizeof(source->error),
                 "serve rank %u: publishing its state to the client rank: %s",
                 source->serve_index, kvio_strerror(status));
    return status;
}

static int64_t client_next_ns(kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                              int64_t now_ns)
{
    (void)loop;
    const client_arrivals_t *source = (const client_arrivals_t *)base;
    if (source->ended || source->lane->state != KVIO_LANE_IDLE)
        return INT64_MAX; /* a running lane looks at its next boundary */
    return now_ns + CLIENT_POLL_NS;
}

static kvio_status_t client_take(kvio_serve_arrivals_t *base, kvio_serve_loop_t *loop,
                                 int64_t now_ns, bool *more_now_p)
{
    (void)loop;
    *more_now_p = false;
    return receive((client_arrivals_t *)base, now_ns);
}

static bool client_due(const kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                       int64_t now_ns)
{
    (void)loop;
    (void)now_ns;
    return !((const client_arrivals_t *)base)->ended;
}

static bool client_ended(const kvio_serve_arrivals_t *base)
{
    return ((const client_arrivals_t *)base)->ended;
}

static kvio_status_t client_ready(kvio_serve_arrivals_t *base, kvio_serve_lane_t *lane)
{
    (void)lane;
    return publish((client_arrivals_t *)base, false);
}

static kvio_status_t client_iteration_ended(kvio_serve_arrivals_t *base, kvio_serve_lane_t *lane)
{
    (void)lane;
    return publish((client_arrivals_t *)base, false);
}

static kvio_status_t client_finished(kvio_serve_arrivals_t *base, kvio_serve_lane_t *lane)
{
    (void)lane;
    return publish((client_arrivals_t *)base, true);
}

/* While the lane idles: a batch that came wakes it. */
static kvio_status_t client_poll(kvio_serve_arrivals_t *base, bool *wake_p)
{
    client_arrivals_t *source = (client_arrivals_t *)base;
    if (source->ended)
        return KVIO_OK;
    source->took = false;
    kvio_status_t status =
        receive(source, source->loop->executor->ops->now(source->loop->executor));
    *wake_p = *wake_p || source->took || source->ended;
    return status;
}

static const char *client_error(const kvio_serve_arrivals_t *base)
{
    return ((const client_arrivals_t *)base)->error;
}

static const kvio_serve_arrivals_ops_t client_ops = {
    .next_ns = client_next_ns,
    .take = client_take,
    .ended = client_ended,
    .due = client_due,
    .ready = client_ready,
    .iteration_ended = client_iteration_ended,
    .finished = client_finished,
    .poll = client_poll,
    .error = client_error,
};

kvio_status_t kvio_serve_client_arrivals_create(kvio_rte_t *rte, int client_rank,
                                                uint32_t serve_index, kvio_serve_loop_t *loop,
                                                kvio_serve_lane_t *lane,
                                                kvio_serve_client_arrivals_t **source_p)
{
    client_arrivals_t *source = calloc(1, sizeof(*source));
    if (source == NULL)
        return KVIO_ERR_NOMEM;
    *source = (client_arrivals_t){.base = {.ops = &client_ops}, .rte = rte,
                                  .client_rank = client_rank, .serve_index = serve_index,
                                  .loop = loop, .lane = lane};
    *source_p = source;
    return KVIO_OK;
}

kvio_serve_arrivals_t *kvio_serve_client_arrivals(kvio_serve_client_arrivals_t *source)
{
    return &source->base;
}

const char *kvio_serve_client_arrivals_lost(const kvio_serve_client_arrivals_t *source)
{
    return source->lost ? source->lost_reason : NULL;
}

void kvio_serve_client_arrivals_note(kvio_serve_client_arrivals_t *source, kvio_hash_t hash,
                                     bool cached)
{
    kvio_serve_publisher_note(&source->publisher, hash, cached);
}

void kvio_serve_client_arrivals_destroy(kvio_serve_client_arrivals_t *source)
{
    if (source == NULL)
        return;
    free(source->hashes.hashes);
    kvio_serve_publisher_fini(&source->publisher);
    free(source);
}
