/* Requests from a stream (synthetic or a trace) as a loop's arrival source:
 * each is due at its arrival time on the loop's clock. Over several lanes
 * (simulate) a router picks the lane of each, one request per event so
 * that each sees the ranks as the ones before it left them; a lane that
 * takes a share of the stream (a serve rank without a client rank) keeps
 * the requests i with i mod shares == its index. A request's block hashes
 * are computed when the engine first asks, unless the router reads them.
 * A closed loop's stream (stream.users) is not read ahead: its next request
 * is made when due, and each finish it hears may bring one sooner. */
#include "serve/loop_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "kvio/progress.h"

struct kvio_serve_stream_arrivals {
    kvio_serve_arrivals_t base;
    kvio_serve_stream_params_t params;
    const kvio_request_t *next;      /* open loop: read ahead */
    bool closed_loop;
    uint64_t index;                  /* requests read from the stream */
    kvio_engine_t **engines;         /* the lanes' engines, for the router's view */
    uint32_t num_engines;
    bool eager_hashes;               /* the router reads the hashes */
    kvio_hash_buffer_t hashes;
    kvio_deferred_queue_t *deferred; /* requests hashed when first looked up */
    kvio_progress_t *progress;
    char error[256];
};

typedef struct kvio_serve_stream_arrivals stream_arrivals_t;

kvio_status_t kvio_serve_engine_request(const kvio_request_t *request, uint32_t block_size,
                                        int64_t arrival_ns, bool measured, uint64_t tag,
                                        kvio_hash_buffer_t *buffer,
                                        kvio_engine_request_t *engine_request_p)
{
    size_t num_blocks = ((size_t)request->input_tokens + request->output_tokens) / block_size;
    kvio_status_t status = kvio_hash_buffer_reserve(buffer, num_blocks);
    if (status != KVIO_OK)
        return status;
    status = kvio_request_block_hashes(request, block_size, 0, num_blocks, NULL, buffer->hashes);
    if (status != KVIO_OK)
        return status;
    *engine_request_p = (kvio_engine_request_t){
        .id = request->id, .arrival_ns = arrival_ns, .prompt_tokens = request->input_tokens,
        .output_tokens = request->output_tokens, .max_tokens = request->max_tokens,
        .priority = request->priority, .hashes = buffer->hashes, .num_hashes = num_blocks,
        .measured = measured, .tag = tag,
    };
    return KVIO_OK;
}

/* The engine request of a stream request, its hashes eager or deferred. */
static kvio_status_t make_request(stream_arrivals_t *source, const kvio_request_t *request,
                                  int64_t arrival_ns, bool measured,
                                  kvio_engine_request_t *engine_request_p)
{
    if (source->eager_hashes)
        return kvio_serve_engine_request(request, source->params.block_size, arrival_ns,
                                         measured, 0, &source->hashes, engine_request_p);
    kvio_engine_hash_source_t hash_source;
    size_t num_hashes;
    kvio_status_t status = kvio_deferred_request(source->deferred, request, &hash_source,
                                                 &num_hashes);
    if (status != KVIO_OK)
        return status;
    *engine_request_p = (kvio_engine_request_t){
        .id = request->id, .arrival_ns = arrival_ns, .prompt_tokens = request->input_tokens,
        .output_tokens = request->output_tokens, .max_tokens = request->max_tokens,
        .priority = request->priority, .num_hashes = num_hashes, .measured = measured,
        .hash_source = hash_source,
    };
    return KVIO_OK;
}

/* Queues request on the lane the router (or the share) gives it. */
static kvio_status_t dispatch(stream_arrivals_t *source, kvio_serve_loop_t *loop,
                              const kvio_request_t *request, uint64_t index, int64_t now_ns)
{
    if (request->input_tokens == 0)
        return KVIO_OK; /* nothing to serve; streams do not produce these */
    int64_t t = now_ns - loop->origin_ns;
    bool measured = t >= source->params.warmup_ns &&
                    index >= (uint64_t)source->params.warmup_requests;
    /* A closed loop held the request back until one in flight finished: it
     * is sent, and its TTFT counts, from now (as vLLM's benchmark under
     * --max-concurrency starts the clock inside its semaphore). */
    int64_t sent_ns = loop->max_concurrency > 0 && t > request->arrival_ns ? t
                                                                           : request->arrival_ns;
    kvio_engine_request_t engine_request;
    kvio_status_t status = make_request(source, request, sent_ns, measured, &engine_request);
    if (status != KVIO_OK) {
        snprintf(source->error, sizeof(source->error),
                 "request %llu: cannot derive its block hashes",
                 (unsigned long long)request->id);
        return status;
    }
    uint32_t lane_index = 0;
    if (source->params.num_shares == 0)
        lane_index = kvio_router_choose(source->params.router, source->engines,
                                        source->num_engines, &engine_request, now_ns);
    kvio_serve_lane_t *lane = loop->lanes[lane_index];
    if (lane->updates != NULL)
        engine_request.tag = lane->updates->ops->version_at(lane->updates, now_ns);
    return kvio_serve_loop_add(loop, lane, &engine_request);
}

/* When the stream's next request is due (stream clock): INT64_MAX while a
 * closed loop waits for a finish, -1 at the end. */
static int64_t due_ns(const stream_arrivals_t *source)
{
    if (source->closed_loop)
        return kvio_stream_due_ns(source->params.stream);
    return source->next != NULL ? source->next->arrival_ns : -1;
}

static bool due_by(const stream_arrivals_t *source, const kvio_serve_loop_t *loop, int64_t now_ns)
{
    int64_t due = due_ns(source);
    return due >= 0 && due != INT64_MAX && loop->origin_ns + due <= now_ns;
}

static int64_t stream_next_ns(kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                              int64_t now_ns)
{
    (void)now_ns;
    int64_t due = due_ns((stream_arrivals_t *)base);
    return due >= 0 && due != INT64_MAX ? loop->origin_ns + due : INT64_MAX;
}

/* Takes the stream's next request into *request_p (an open loop's was read
 * ahead, and the one after it is read now). */
static kvio_status_t take_next(stream_arrivals_t *source, const kvio_request_t **request_p)
{
    kvio_status_t status = KVIO_OK;
    if (source->closed_loop)
        status = kvio_stream_next(source->params.stream, &source->next);
    *request_p = source->next;
    source->index++;
    if (source->progress != NULL)
        kvio_progress_update(source->progress, source->index);
    return status;
}

/* The open loop reads the request after the one taken and dispatched. */
static kvio_status_t read_ahead(stream_arrivals_t *source)
{
    if (source->closed_loop)
        return KVIO_OK;
    return kvio_stream_next(source->params.stream, &source->next);
}

static kvio_status_t stream_take(kvio_serve_arrivals_t *base, kvio_serve_loop_t *loop,
                                 int64_t now_ns, bool *more_now_p)
{
    stream_arrivals_t *source = (stream_arrivals_t *)base;
    kvio_status_t status = KVIO_OK;
    const kvio_request_t *request = NULL;
    if (source->params.num_shares == 0) {
        /* Routed: one request per event. */
        uint64_t index = source->index;
        status = take_next(source, &request);
        if (status == KVIO_OK && request != NULL)
            status = dispatch(source, loop, request, index, now_ns);
        if (status == KVIO_OK)
            status = read_ahead(source);
        *more_now_p = status == KVIO_OK && due_by(source, loop, now_ns);
        return status;
    }
    while (status == KVIO_OK && due_by(source, loop, now_ns)) {
        uint64_t index = source->index;
        status = take_next(source, &request);
        if (status == KVIO_OK && request != NULL &&
            index % source->params.num_shares == source->params.share_index)
            status = dispatch(source, loop, request, index, now_ns);
        if (status == KVIO_OK)
            status = read_ahead(source);
    }
    *more_now_p = false;
    return status;
}

/* A closed loop's user hears its answer. */
static void stream_request_finished(kvio_serve_arrivals_t *base,
                                    const kvio_engine_finished_t *finished)
{
    stream_arrivals_t *source = (stream_arrivals_t *)base;
    if (source->closed_loop)
        kvio_stream_finished(source->params.stream, finished->id, finished->finish_ns);
}

/* A lane's share: the requests that came during its iteration are taken at
 * its boundary (routed requests are events of their own). */
static bool stream_due(const kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                       int64_t now_ns)
{
    const stream_arrivals_t *source = (const stream_arrivals_t *)base;
    return source->params.num_shares > 0 && due_by(source, loop, now_ns);
}

static bool stream_ended(const kvio_serve_arrivals_t *base)
{
    return due_ns((const stream_arrivals_t *)base) < 0;
}

static const char *stream_error(const kvio_serve_arrivals_t *base)
{
    return ((const stream_arrivals_t *)base)->error;
}

static const kvio_serve_arrivals_ops_t stream_ops = {
    .next_ns = stream_next_ns,
    .take = stream_take,
    .ended = stream_ended,
    .due = stream_due,
    .error = stream_error,
    .request_finished = stream_request_finished,
};

kvio_status_t kvio_serve_stream_arrivals_create(const kvio_serve_stream_params_t *params,
                                                kvio_serve_lane_t *const *lanes,
                                                uint32_t num_lanes,
                                                kvio_serve_stream_arrivals_t **source_p)
{
    stream_arrivals_t *source = calloc(1, sizeof(*source));
    if (source == NULL)
        return KVIO_ERR_NOMEM;
    source->base.ops = &stream_ops;
    source->params = *params;
    kvio_status_t status = KVIO_OK;
    if (params->num_shares == 0) {
        source->num_engines = num_lanes;
        source->engines = calloc(num_lanes > 0 ? num_lanes : 1, sizeof(*source->engines));
        if (source->engines == NULL)
            status = KVIO_ERR_NOMEM;
        for (uint32_t i = 0; status == KVIO_OK && i < num_lanes; i++)
            source->engines[i] = lanes[i]->engine;
        source->eager_hashes = kvio_router_reads_hashes(params->router, num_lanes);
    }
    if (status == KVIO_OK)
        status = kvio_deferred_queue_create(params->block_size, &source->deferred);
    if (status == KVIO_OK && params->progress_label != NULL)
        kvio_progress_create(params->progress_label, params->num_requests, &source->progress);
    source->closed_loop = kvio_stream_closed_loop(params->stream);
    if (status == KVIO_OK)
        status = read_ahead(source);
    if (status != KVIO_OK) {
        kvio_serve_stream_arrivals_destroy(source);
        return status;
    }
    *source_p = source;
    return KVIO_OK;
}

kvio_serve_arrivals_t *kvio_serve_stream_arrivals(kvio_serve_stream_arrivals_t *source)
{
    return &source->base;
}

void kvio_serve_stream_arrivals_destroy(kvio_serve_stream_arrivals_t *source)
{
    if (source == NULL)
        return;
    kvio_progress_destroy(source->progress);
    free(source->hashes.hashes);
    free(source->engines);
    /* After the engines released every request made from the queue. */
    kvio_deferred_queue_destroy(source->deferred);
    free(source);
}
