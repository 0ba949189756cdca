/* Requests whose block hashes the engine computes when it first needs them
 * (simulate mode). Each holds a copy of the stream's request with its
 * segments and trace ids, in one allocation: a long waiting queue then
 * holds 8 bytes per Mooncake block of 512 tokens, not 16 bytes per KV block
 * of 16.
 *
 * A request's hashes are one chain, each hash waiting for the one before,
 * so hashing one request leaves the core mostly idle. When the
 * engine asks for one request's hashes, the requests dispatched after it
 * (the ones it will ask for next) are hashed beside it and kept until
 * asked for: at most AHEAD_MAX at a time, so memory stays bounded whatever
 * order the scheduler asks in. */
#include "serve/serve_int.h"

#include <stdlib.h>
#include <string.h>

/* Requests hashed beside the one asked for. */
#define COMPANIONS 7

/* Requests holding hashes computed ahead, at most; their buffers are kept
 * for reuse as they are handed over. */
#define AHEAD_MAX 16

kvio_status_t kvio_hash_buffer_reserve(kvio_hash_buffer_t *buffer, size_t count)
{
    if (count <= buffer->capacity)
        return KVIO_OK;
    size_t capacity = count + 1024;
    kvio_hash_t *bigger = realloc(buffer->hashes, capacity * sizeof(*bigger));
    if (bigger == NULL)
        return KVIO_ERR_NOMEM;
    buffer->hashes = bigger;
    buffer->capacity = capacity;
    return KVIO_OK;
}

typedef struct deferred_request deferred_request_t;

struct kvio_deferred_queue {
    uint32_t block_size;
    deferred_request_t *head, *tail; /* not hashed yet, in dispatch order */
    size_t num_ahead;                /* requests holding hashes computed ahead */
    kvio_hash_buffer_t spare[AHEAD_MAX];
    size_t num_spare;
};

struct deferred_request {
    kvio_request_t request;
    kvio_deferred_queue_t *queue;
    deferred_request_t *previous, *next; /* in the queue while queued */
    bool queued;
    size_t num_hashes;          /* the engine asks for this many */
    bool has_ahead;             /* its hashes were computed ahead, into ahead */
    kvio_hash_buffer_t ahead;
};

kvio_status_t kvio_deferred_queue_create(uint32_t block_size, kvio_deferred_queue_t **queue_p)
{
    kvio_deferred_queue_t *queue = calloc(1, sizeof(*queue));
    if (queue == NULL)
        return KVIO_ERR_NOMEM;
    queue->block_size = block_size;
    *queue_p = queue;
    return KVIO_OK;
}

void kvio_deferred_queue_destroy(kvio_deferred_queue_t *queue)
{
    if (queue == NULL)
        return;
    for (size_t i = 0; i < queue->num_spare; i++)
        free(queue->spare[i].hashes);
    free(queue);
}

size_t kvio_deferred_queue_num_ahead(const kvio_deferred_queue_t *queue)
{
    return queue->num_ahead;
}

static void unqueue(deferred_request_t *deferred)
{
    kvio_deferred_queue_t *queue = deferred->queue;
    if (!deferred->queued)
        return;
    if (deferred->previous != NULL)
        deferred->previous->next = deferred->next;
    else
        queue->head = deferred->next;
    if (deferred->next != NULL)
        deferred->next->previous = deferred->previous;
    else
        queue->tail = deferred->previous;
    deferred->queued = false;
}

/* Gives the request a buffer for its hashes computed ahead, a spare one
 * when there is one. */
static kvio_status_t ahead_take(deferred_request_t *deferred)
{
    kvio_deferred_queue_t *queue = deferred->queue;
    if (queue->num_spare > 0)
        deferred->ahead = queue->spare[--queue->num_spare];
    kvio_status_t status = kvio_hash_buffer_reserve(&deferred->ahead, deferred->num_hashes);
    if (status != KVIO_OK) {
        free(deferred->ahead.hashes);
        deferred->ahead = (kvio_hash_buffer_t){0};
        return status;
    }
    deferred->has_ahead = true;
    queue->num_ahead++;
    return KVIO_OK;
}

/* The request's hashes computed ahead are done with: the buffer is kept. */
static void ahead_drop(deferred_request_t *deferred)
{
    kvio_deferred_queue_t *queue = deferred->queue;
    if (!deferred->has_ahead)
        return;
    if (queue->num_spare < AHEAD_MAX)
        queue->spare[queue->num_spare++] = deferred->ahead;
    else
        free(deferred->ahead.hashes);
    deferred->ahead = (kvio_hash_buffer_t){0};
    deferred->has_ahead = false;
    queue->num_ahead--;
}

static kvio_status_t deferred_fill(void *context, kvio_hash_t *hashes_p, size_t num_hashes)
{
    deferred_request_t *deferred = context;
    kvio_deferred_queue_t *queue = deferred->queue;
    if (deferred->has_ahead && num_hashes == deferred->num_hashes) {
        if (num_hashes > 0)
            memcpy(hashes_p, deferred->ahead.hashes, num_hashes * sizeof(kvio_hash_t));
        ahead_drop(deferred);
        return KVIO_OK;
    }
    ahead_drop(deferred);
    deferred_request_t *after = deferred->queued ? deferred->next : queue->head;
    unqueue(deferred);
    const kvio_request_t *requests[1 + COMPANIONS] = {&deferred->request};
    kvio_hash_t *outputs[1 + COMPANIONS] = {hashes_p};
    size_t counts[1 + COMPANIONS] = {num_hashes};
    deferred_request_t *companions[COMPANIONS];
    size_t count = 1;
    for (; after != NULL && count < 1 + COMPANIONS && queue->num_ahead < AHEAD_MAX;
         after = after->next) {
        /* A request with no full block has nothing to hash. */
        if (after->num_hashes == 0 || ahead_take(after) != KVIO_OK)
            continue;
        companions[count - 1] = after;
        requests[count] = &after->request;
        outputs[count] = after->ahead.hashes;
        counts[count] = after->num_hashes;
        count++;
    }
    /* Taken out of the queue once hashed (the loop above walks it). */
    for (size_t i = 0; i + 1 < count; i++)
        unqueue(companions[i]);
    kvio_status_t status =
        kvio_request_block_hashes_many(requests, queue->block_size, counts, outputs, count);
    if (status != KVIO_OK) {
        /* They hash on their own when asked. */
        for (size_t i = 0; i + 1 < count; i++)
            ahead_drop(companions[i]);
    }
    return status;
}

static void deferred_release(void *context)
{
    deferred_request_t *deferred = context;
    unqueue(deferred);
    ahead_drop(deferred);
    free(deferred);
}

kvio_status_t kvio_deferred_request(kvio_deferred_queue_t *queue, const kvio_request_t *request,
                                    kvio_engine_hash_source_t *source_p, size_t *num_hashes_p)
{
    deferred_request_t *deferred =
        malloc(sizeof(*deferred) + kvio_request_extra_bytes(request));
    if (deferred == NULL)
        return KVIO_ERR_NOMEM;
    *deferred = (deferred_request_t){
        .queue = queue,
        .previous = queue->tail,
        .queued = true,
        .num_hashes = ((size_t)request->input_tokens + request->output_tokens) /
                      queue->block_size,
    };
    kvio_request_copy(request, &deferred->request, deferred + 1);
    if (queue->tail != NULL)
        queue->tail->next = deferred;
    else
        queue->head = deferred;
    queue->tail = deferred;
    *source_p = (kvio_engine_hash_source_t){
        .fill = deferred_fill, .release = deferred_release, .context = deferred};
    *num_hashes_p = deferred->num_hashes;
    return KVIO_OK;
}
