/* Serve ranks and their client in real time. A serve rank publishes its
 * state every iteration (load, free KV blocks, active decode blocks, and
 * the block hashes that entered or left its prefix index since the last
 * time); the client mirrors each rank's cached-hash set from those deltas,
 * and routers read the mirror. Requests travel in batches. In the coupled
 * run the client is its own rank and both travel over the runtime; plain
 * emulate passes the same messages between threads. */
#include "kvio/serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/progress.h"
#include "kvio/rte.h"
#include "kvio/wire.h"
#include "serve/serve_int.h"

#define STATE_MAGIC 0x6b767374u   /* "kvst" */
#define BATCH_MAGIC 0x6b766271u   /* "kvbq" */
#define CLIENT_MAGIC 0x6b76696f636c6e33ull /* "kvioclnt3" */
#define STATE_FINAL 1u
#define BATCH_LAST 1u

/* ---------- what a serve rank publishes ---------- */

/* The fixed part of a state message; cached then evicted hashes follow. */
typedef struct state_header {
    uint32_t magic;
    uint32_t flags;            /* STATE_FINAL: the rank has finished serving */
    uint64_t received;         /* requests the rank has taken so far */
    uint64_t active_decode_blocks;
    uint32_t load;             /* waiting + running requests */
    uint32_t num_cached;
    uint32_t num_evicted;
} state_header_t;

static kvio_status_t hashes_push(kvio_hash_t **hashes, size_t *count, size_t *capacity,
                                 kvio_hash_t hash)
{
    if (*count == *capacity) {
        size_t bigger_capacity = *capacity ? 2 * *capacity : 256;
        kvio_hash_t *bigger = realloc(*hashes, bigger_capacity * sizeof(*bigger));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        *hashes = bigger;
        *capacity = bigger_capacity;
    }
    (*hashes)[(*count)++] = hash;
    return KVIO_OK;
}

void kvio_serve_publisher_note(kvio_serve_publisher_t *publisher, kvio_hash_t hash,
                               bool cached)
{
    kvio_status_t status =
        cached ? hashes_push(&publisher->cached, &publisher->num_cached,
                             &publisher->cached_capacity, hash)
               : hashes_push(&publisher->evicted, &publisher->num_evicted,
                             &publisher->evicted_capacity, hash);
    if (status != KVIO_OK && publisher->status == KVIO_OK)
        publisher->status = status;
}

kvio_status_t kvio_serve_publisher_pack(kvio_serve_publisher_t *publisher,
                                        const kvio_engine_t *engine, bool final,
                                        void **blob_p, size_t *length_p)
{
    if (publisher->status != KVIO_OK)
        return publisher->status;
    state_header_t header = {
        .magic = STATE_MAGIC, .flags = final ? STATE_FINAL : 0,
        .received = publisher->received,
        .active_decode_blocks = engine ? kvio_engine_active_decode_blocks(engine) : 0,
        .load = engine ? kvio_engine_load(engine) : 0,
        .num_cached = (uint32_t)publisher->num_cached,
        .num_evicted = (uint32_t)publisher->num_evicted};
    kvio_wire_writer_t out = {0};
    kvio_wire_put(&out, &header, sizeof(header));
    kvio_wire_put(&out, publisher->cached, publisher->num_cached * sizeof(kvio_hash_t));
    kvio_wire_put(&out, publisher->evicted, publisher->num_evicted * sizeof(kvio_hash_t));
    kvio_status_t status = kvio_wire_finish(&out, blob_p, length_p);
    if (status == KVIO_OK) {
        publisher->num_cached = 0;
        publisher->num_evicted = 0;
    }
    return status;
}

void kvio_serve_publisher_fini(kvio_serve_publisher_t *publisher)
{
    free(publisher->cached);
    free(publisher->evicted);
    memset(publisher, 0, sizeof(*publisher));
}

/* ---------- the client's mirror ---------- */

/* A set of hashes with counts (the pool may hold one hash in several
 * blocks): open addressing, linear probing, deletion by backward shift. */
typedef struct hash_slot {
    kvio_hash_t hash;
    uint32_t count; /* 0: empty */
} hash_slot_t;

typedef struct hash_set {
    hash_slot_t *slots;
    size_t capacity; /* a power of two */
    size_t used;
} hash_set_t;

static size_t slot_of(const hash_set_t *set, kvio_hash_t hash)
{
    return (size_t)(hash.low ^ (hash.high * 0x9e3779b97f4a7c15ull)) & (set->capacity - 1);
}

static size_t set_find(const hash_set_t *set, kvio_hash_t hash)
{
    if (set->capacity == 0)
        return SIZE_MAX;
    for (size_t i = slot_of(set, hash);; i = (i + 1) & (set->capacity - 1)) {
        if (set->slots[i].count == 0)
            return SIZE_MAX;
        if (kvio_hash_equal(set->slots[i].hash, hash))
            return i;
    }
}

static kvio_status_t set_add(hash_set_t *set, kvio_hash_t hash)
{
    if (2 * (set->used + 1) > set->capacity) {
        hash_set_t bigger = {.capacity = set->capacity ? 2 * set->capacity : 1024};
        bigger.slots = calloc(bigger.capacity, sizeof(*bigger.slots));
        if (bigger.slots == NULL)
            return KVIO_ERR_NOMEM;
        for (size_t i = 0; i < set->capacity; i++) {
            if (set->slots[i].count == 0)
                continue;
            size_t j = slot_of(&bigger, set->slots[i].hash);
            while (bigger.slots[j].count != 0)
                j = (j + 1) & (bigger.capacity - 1);
            bigger.slots[j] = set->slots[i];
        }
        bigger.used = set->used;
        free(set->slots);
        *set = bigger;
    }
    size_t i = slot_of(set, hash);
    while (set->slots[i].count != 0 && !kvio_hash_equal(set->slots[i].hash, hash))
        i = (i + 1) & (set->capacity - 1);
    if (set->slots[i].count == 0) {
        set->slots[i].hash = hash;
        set->used++;
    }
    set->slots[i].count++;
    return KVIO_OK;
}

static void set_remove(hash_set_t *set, kvio_hash_t hash)
{
    size_t i = set_find(set, hash);
    if (i == SIZE_MAX || --set->slots[i].count > 0)
        return;
    set->used--;
    /* Backward shift: move later entries of the run into the hole when
     * their home slot is not between the hole and them. */
    size_t mask = set->capacity - 1;
    for (size_t j = (i + 1) & mask; set->slots[j].count != 0; j = (j + 1) & mask) {
        size_t home = slot_of(set, set->slots[j].hash);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            set->slots[i] = set->slots[j];
            set->slots[j].count = 0;
            i = j;
        }
    }
    set->slots[i].count = 0;
}

/* A request sent to a rank that has not yet said it took it: its full
 * prompt blocks, so that a request right behind it with the same new prefix
 * follows it (as SGLang's router inserts a prompt into the chosen worker's
 * tree when it routes it). */
typedef struct routed_request {
    kvio_hash_t *hashes;
    uint32_t num_hashes;
    uint64_t taken_at; /* the rank's state count when it said it took it; 0: not yet */
} routed_request_t;

/* A taken request's blocks stop counting once the rank has published them
 * all as cached, or this many states after it took it (a queued request or
 * a chunked prefill caches its blocks some iterations later; one whose
 * blocks never get cached must not count for ever). */
#define ROUTED_GRACE_STATES 8

typedef struct mirrored_rank {
    state_header_t state; /* the last published (counts of deltas unused) */
    uint64_t dispatched;  /* requests sent to the rank so far */
    uint64_t states;      /* state messages applied */
    hash_set_t cached;
    hash_set_t routed;    /* blocks of the requests in queue */
    routed_request_t *queue; /* ring, oldest at head */
    size_t head, count, capacity;
} mirrored_rank_t;

struct kvio_serve_mirror {
    uint32_t num_ranks;
    uint32_t block_size;
    mirrored_rank_t *ranks;
    kvio_router_t *router; /* hears the deltas as KV events (NULL: none) */
};

void kvio_serve_mirror_hear(kvio_serve_mirror_t *mirror, kvio_router_t *router)
{
    mirror->router = router;
}

kvio_status_t kvio_serve_mirror_create(uint32_t num_ranks, uint32_t block_size,
                                       kvio_serve_mirror_t **mirror_p)
{
    kvio_serve_mirror_t *mirror = calloc(1, sizeof(*mirror));
    if (mirror == NULL || (mirror->ranks = calloc(num_ranks, sizeof(*mirror->ranks))) == NULL) {
        free(mirror);
        return KVIO_ERR_NOMEM;
    }
    mirror->num_ranks = num_ranks;
    mirror->block_size = block_size;
    *mirror_p = mirror;
    return KVIO_OK;
}

void kvio_serve_mirror_destroy(kvio_serve_mirror_t *mirror)
{
    if (mirror == NULL)
        return;
    for (uint32_t r = 0; r < mirror->num_ranks; r++) {
        mirrored_rank_t *mirrored = &mirror->ranks[r];
        for (size_t i = 0; i < mirrored->count; i++)
            free(mirrored->queue[(mirrored->head + i) % mirrored->capacity].hashes);
        free(mirrored->queue);
        free(mirrored->routed.slots);
        free(mirrored->cached.slots);
    }
    free(mirror->ranks);
    free(mirror);
}

kvio_status_t kvio_serve_mirror_apply(kvio_serve_mirror_t *mirror, uint32_t rank,
                                      const void *blob, size_t length, bool *final_p)
{
    state_header_t header;
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    if (rank >= mirror->num_ranks || !kvio_wire_get(&in, &header, sizeof(header)) ||
        header.magic != STATE_MAGIC)
        return KVIO_ERR_PARSE;
    const unsigned char *added =
        kvio_wire_take_array(&in, header.num_cached, sizeof(kvio_hash_t));
    const unsigned char *evicted =
        kvio_wire_take_array(&in, header.num_evicted, sizeof(kvio_hash_t));
    if (kvio_wire_status(&in) != KVIO_OK || kvio_wire_left(&in) != 0)
        return KVIO_ERR_PARSE;
    mirrored_rank_t *mirrored = &mirror->ranks[rank];
    int64_t now_ns = mirror->router != NULL ? (int64_t)kvio_time_ns() : 0;
    /* Additions first: every eviction then finds what it removes, even a
     * block cached and evicted within the same iteration. */
    for (uint32_t i = 0; i < header.num_cached; i++) {
        kvio_hash_t hash;
        memcpy(&hash, added + (size_t)i * sizeof(hash), sizeof(hash));
        if (set_add(&mirrored->cached, hash) != KVIO_OK)
            return KVIO_ERR_NOMEM;
        if (mirror->router != NULL)
            kvio_router_event(mirror->router, rank, hash, true, now_ns);
    }
    for (uint32_t i = 0; i < header.num_evicted; i++) {
        kvio_hash_t hash;
        memcpy(&hash, evicted + (size_t)i * sizeof(hash), sizeof(hash));
        set_remove(&mirrored->cached, hash);
        if (mirror->router != NULL)
            kvio_router_event(mirror->router, rank, hash, false, now_ns);
    }
    mirrored->state = header;
    mirrored->states++;
    /* Requests the rank took: their blocks count as routed until its own
     * published state has them (or the grace runs out); oldest first. */
    uint64_t first = mirrored->dispatched - mirrored->count; /* the head's dispatch number */
    for (size_t i = 0; i < mirrored->count && first + i < header.received; i++) {
        routed_request_t *routed = &mirrored->queue[(mirrored->head + i) % mirrored->capacity];
        if (routed->taken_at == 0)
            routed->taken_at = mirrored->states;
    }
    while (mirrored->count > 0) {
        routed_request_t *oldest = &mirrored->queue[mirrored->head];
        if (oldest->taken_at == 0)
            break;
        bool cached = true;
        for (uint32_t i = 0; i < oldest->num_hashes && cached; i++)
            cached = set_find(&mirrored->cached, oldest->hashes[i]) != SIZE_MAX;
        if (!cached && mirrored->states - oldest->taken_at < ROUTED_GRACE_STATES)
            break;
        for (uint32_t i = 0; i < oldest->num_hashes; i++)
            set_remove(&mirrored->routed, oldest->hashes[i]);
        free(oldest->hashes);
        mirrored->head = (mirrored->head + 1) % mirrored->capacity;
        mirrored->count--;
    }
    *final_p = (header.flags & STATE_FINAL) != 0;
    return KVIO_OK;
}

kvio_status_t kvio_serve_mirror_dispatched(kvio_serve_mirror_t *mirror, uint32_t rank,
                                           const kvio_engine_request_t *request)
{
    mirrored_rank_t *mirrored = &mirror->ranks[rank];
    if (mirrored->count == mirrored->capacity) {
        size_t capacity = mirrored->capacity ? 2 * mirrored->capacity : 64;
        routed_request_t *bigger = malloc(capacity * sizeof(*bigger));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        for (size_t i = 0; i < mirrored->count; i++)
            bigger[i] = mirrored->queue[(mirrored->head + i) % mirrored->capacity];
        free(mirrored->queue);
        mirrored->queue = bigger;
        mirrored->head = 0;
        mirrored->capacity = capacity;
    }
    size_t full = request->prompt_tokens / mirror->block_size;
    routed_request_t routed = {.num_hashes = (uint32_t)(request->num_hashes < full
                                                            ? request->num_hashes
                                                            : full)};
    if (routed.num_hashes > 0) {
        routed.hashes = malloc(routed.num_hashes * sizeof(*routed.hashes));
        if (routed.hashes == NULL)
            return KVIO_ERR_NOMEM;
        memcpy(routed.hashes, request->hashes, routed.num_hashes * sizeof(*routed.hashes));
    }
    for (uint32_t i = 0; i < routed.num_hashes; i++)
        if (set_add(&mirrored->routed, routed.hashes[i]) != KVIO_OK) {
            while (i-- > 0)
                set_remove(&mirrored->routed, routed.hashes[i]);
            free(routed.hashes);
            return KVIO_ERR_NOMEM;
        }
    mirrored->queue[(mirrored->head + mirrored->count) % mirrored->capacity] = routed;
    mirrored->count++;
    mirrored->dispatched++;
    return KVIO_OK;
}

static uint64_t mirror_states_of(const kvio_serve_mirror_t *mirror, uint32_t rank)
{
    return mirror->ranks[rank].states;
}

uint64_t kvio_serve_mirror_sent(const kvio_serve_mirror_t *mirror, uint32_t rank)
{
    return mirror->ranks[rank].dispatched;
}

uint64_t kvio_serve_mirror_states(const kvio_serve_mirror_t *mirror)
{
    uint64_t states = 0;
    for (uint32_t r = 0; r < mirror->num_ranks; r++)
        states += mirror->ranks[r].states;
    return states;
}

/* Published load plus what was sent since the rank last said how much it
 * had taken. */
static uint32_t mirror_load(void *context, uint32_t rank)
{
    const mirrored_rank_t *mirrored = &((kvio_serve_mirror_t *)context)->ranks[rank];
    uint64_t in_flight = mirrored->dispatched > mirrored->state.received
                             ? mirrored->dispatched - mirrored->state.received
                             : 0;
    return mirrored->state.load + (uint32_t)in_flight;
}

/* The longest run of leading prompt blocks the rank has cached or has been
 * sent (in requests it has not yet taken), in tokens; like the engine's
 * lookup it never covers the last prompt token. */
static size_t mirror_cached_prefix(void *context, uint32_t rank, const kvio_hash_t *hashes,
                                   size_t num_hashes, uint32_t prompt_tokens)
{
    const kvio_serve_mirror_t *mirror = context;
    const mirrored_rank_t *mirrored = &mirror->ranks[rank];
    size_t full = prompt_tokens / mirror->block_size;
    if (num_hashes > full)
        num_hashes = full;
    size_t blocks = 0;
    while (blocks < num_hashes && (set_find(&mirrored->cached, hashes[blocks]) != SIZE_MAX ||
                                   set_find(&mirrored->routed, hashes[blocks]) != SIZE_MAX))
        blocks++;
    if (blocks > 0 && blocks * mirror->block_size >= prompt_tokens)
        blocks--;
    return blocks * mirror->block_size;
}

static uint64_t mirror_active_decode_blocks(void *context, uint32_t rank)
{
    return ((kvio_serve_mirror_t *)context)->ranks[rank].state.active_decode_blocks;
}

void kvio_serve_mirror_view(kvio_serve_mirror_t *mirror, kvio_router_view_t *view_p)
{
    *view_p = (kvio_router_view_t){.context = mirror,
                                   .block_size = mirror->block_size,
                                   .load = mirror_load,
                                   .cached_prefix = mirror_cached_prefix,
                                   .active_decode_blocks = mirror_active_decode_blocks};
}

/* ---------- request batches ---------- */

typedef struct batch_header {
    uint32_t magic;
    uint32_t flags;     /* BATCH_LAST: the client sends nothing more */
    int64_t origin_ns;  /* the client's time zero on rank 0's clock */
    uint32_t count;
    uint32_t reserved;
} batch_header_t;

/* One request; its block hashes follow. */
typedef struct batch_request {
    uint64_t id;
    int64_t arrival_ns; /* since origin_ns */
    uint32_t prompt_tokens, output_tokens, max_tokens;
    int32_t priority;
    uint32_t num_hashes;
    uint32_t measured;
} batch_request_t;

kvio_status_t kvio_serve_batch_add(kvio_serve_batch_t *batch,
                                   const kvio_engine_request_t *request)
{
    if (batch->out.length == 0) {
        batch_header_t header = {0}; /* written by kvio_serve_batch_seal */
        kvio_wire_put(&batch->out, &header, sizeof(header));
    }
    batch_request_t item = {
        .id = request->id, .arrival_ns = request->arrival_ns,
        .prompt_tokens = request->prompt_tokens, .output_tokens = request->output_tokens,
        .max_tokens = request->max_tokens, .priority = request->priority,
        .num_hashes = (uint32_t)request->num_hashes, .measured = request->measured};
    kvio_wire_put(&batch->out, &item, sizeof(item));
    kvio_wire_put(&batch->out, request->hashes, request->num_hashes * sizeof(kvio_hash_t));
    batch->count++;
    return batch->out.status;
}

kvio_status_t kvio_serve_batch_seal(kvio_serve_batch_t *batch, int64_t origin_ns, bool last)
{
    batch_header_t header = {.magic = BATCH_MAGIC, .flags = last ? BATCH_LAST : 0,
                             .origin_ns = origin_ns, .count = batch->count};
    if (batch->out.length == 0)
        kvio_wire_put(&batch->out, &header, sizeof(header));
    else
        kvio_wire_patch(&batch->out, 0, &header, sizeof(header));
    return batch->out.status;
}

void kvio_serve_batch_reset(kvio_serve_batch_t *batch)
{
    kvio_wire_reset(&batch->out);
    batch->count = 0;
}

void kvio_serve_batch_fini(kvio_serve_batch_t *batch)
{
    kvio_wire_writer_fini(&batch->out);
    batch->count = 0;
}

kvio_status_t kvio_serve_batch_read(const void *blob, size_t length,
                                    kvio_serve_batch_each_t each, void *context,
                                    kvio_hash_buffer_t *buffer, int64_t *origin_ns_p,
                                    bool *last_p)
{
    batch_header_t header;
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    if (!kvio_wire_get(&in, &header, sizeof(header)) || header.magic != BATCH_MAGIC)
        return KVIO_ERR_PARSE;
    *origin_ns_p = header.origin_ns;
    *last_p = (header.flags & BATCH_LAST) != 0;
    kvio_status_t status = KVIO_OK;
    for (uint32_t i = 0; i < header.count && status == KVIO_OK; i++) {
        batch_request_t item;
        if (!kvio_wire_get(&in, &item, sizeof(item)))
            break;
        const void *hashes = kvio_wire_take_array(&in, item.num_hashes, sizeof(kvio_hash_t));
        if (hashes == NULL)
            break;
        status = kvio_hash_buffer_reserve(buffer, item.num_hashes);
        if (status != KVIO_OK)
            break;
        if (item.num_hashes > 0) /* copied: aligned for the engine */
            memcpy(buffer->hashes, hashes, (size_t)item.num_hashes * sizeof(kvio_hash_t));
        kvio_engine_request_t request = {
            .id = item.id, .arrival_ns = item.arrival_ns, .prompt_tokens = item.prompt_tokens,
            .output_tokens = item.output_tokens, .max_tokens = item.max_tokens,
            .priority = item.priority, .hashes = buffer->hashes, .num_hashes = item.num_hashes,
            .measured = item.measured != 0};
        status = each(context, &request);
    }
    return status != KVIO_OK ? status : kvio_wire_status(&in);
}

/* ---------- the client rank (coupled run) ---------- */

struct kvio_serve_client {
    const kvio_serve_run_t *run;
    kvio_rte_t *rte;
    uint32_t num_serve;
    int first_serve; /* world rank of serve rank 0 */
    kvio_router_t *router;
    kvio_serve_mirror_t *mirror;
    kvio_serve_batch_t *batches; /* one per serve rank */
    bool *final;                 /* the rank's last state has arrived */
    uint64_t generated;          /* requests sent (per rank: the mirror's count) */
};

kvio_status_t kvio_serve_client_create(const kvio_serve_run_t *run,
                                       kvio_serve_client_t **client_p, char *error_p,
                                       size_t error_len)
{
    kvio_serve_client_t *client = calloc(1, sizeof(*client));
    if (client == NULL)
        return KVIO_ERR_NOMEM;
    client->run = run;
    client->rte = run->rte;
    client->num_serve = run->num_ranks > 0 ? run->num_ranks : 1;
    client->first_serve = run->first_serve_rank;
    kvio_status_t status = kvio_router_create(&run->serve->router, &client->router);
    if (status == KVIO_OK)
        status = kvio_serve_mirror_create(client->num_serve,
                                          (uint32_t)run->serve->kvcache.block_size,
                                          &client->mirror);
    if (status == KVIO_OK && kvio_router_hears_events(client->router))
        kvio_serve_mirror_hear(client->mirror, client->router);
    if (status == KVIO_OK &&
        ((client->batches = calloc(client->num_serve, sizeof(*client->batches))) == NULL ||
         (client->final = calloc(client->num_serve, sizeof(*client->final))) == NULL))
        status = KVIO_ERR_NOMEM;
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "client rank: %s", kvio_strerror(status));
        kvio_serve_client_destroy(client);
        return status;
    }
    *client_p = client;
    return KVIO_OK;
}

void kvio_serve_client_destroy(kvio_serve_client_t *client)
{
    if (client == NULL)
        return;
    for (uint32_t r = 0; client->batches != NULL && r < client->num_serve; r++)
        kvio_serve_batch_fini(&client->batches[r]);
    free(client->batches);
    free(client->final);
    kvio_serve_mirror_destroy(client->mirror);
    kvio_router_destroy(client->router);
    free(client);
}

/* A serve rank the client still waits for (to be ready, or for its last
 * state) that failed, ended or fell silent: the error names it. */
static kvio_status_t client_check_ranks(kvio_serve_client_t *client, bool ready_only,
                                        char *error_p, size_t error_len)
{
    for (uint32_t r = 0; r < client->num_serve; r++) {
        bool waiting = ready_only ? mirror_states_of(client->mirror, r) == 0 : !client->final[r];
        if (!waiting)
            continue;
        char reason[512];
        kvio_status_t status = kvio_rte_peer_check(
            client->rte, client->first_serve + (int)r, true,
            ready_only ? "it to say it is ready" : "its last state", reason, sizeof(reason));
        if (status != KVIO_OK) {
            snprintf(error_p, error_len, "client rank: serve rank %d is lost: %s",
                     client->first_serve + (int)r, reason);
            return status;
        }
    }
    return KVIO_OK;
}

/* Applies every state message that has arrived; *all_final_p when every
 * rank has sent its last. */
static kvio_status_t client_drain_states(kvio_serve_client_t *client, bool *all_final_p,
                                         char *error_p, size_t error_len)
{
    bool all_final = true;
    for (uint32_t r = 0; r < client->num_serve; r++) {
        int from = client->first_serve + (int)r;
        while (!client->final[r]) {
            void *data = NULL;
            size_t length = 0;
            kvio_status_t status = kvio_rte_try_recv(client->rte, from, KVIO_SERVE_TAG_STATE,
                                                     &data, &length);
            if (status == KVIO_INPROGRESS)
                break;
            if (status == KVIO_OK)
                status = kvio_serve_mirror_apply(client->mirror, r, data, length,
                                                 &client->final[r]);
            free(data);
            if (status == KVIO_ERR_PEER &&
                client_check_ranks(client, false, error_p, error_len) != KVIO_OK)
                return status;
            if (status != KVIO_OK) {
                snprintf(error_p, error_len, "client rank: serve rank %d %s", from,
                         status == KVIO_ERR_PEER ? "ended before it finished serving"
                                                 : "sent a bad state message");
                return status;
            }
        }
        all_final = all_final && client->final[r];
    }
    *all_final_p = all_final;
    return KVIO_OK;
}

/* Sends each serve rank its batch: every one the first time (it carries
 * the client's time zero) and the last time, else only those with requests.
 * now_ns is since origin_ns. */
static kvio_status_t client_send_batches(kvio_serve_client_t *client, int64_t origin_ns,
                                         bool first, bool last)
{
    kvio_status_t status = KVIO_OK;
    for (uint32_t r = 0; r < client->num_serve && status == KVIO_OK; r++) {
        kvio_serve_batch_t *batch = &client->batches[r];
        if (batch->count == 0 && !last && !first)
            continue;
        status = kvio_serve_batch_seal(batch, origin_ns, last);
        if (status == KVIO_OK)
            status = kvio_rte_post(client->rte, client->first_serve + (int)r,
                                   KVIO_SERVE_TAG_REQUESTS, batch->out.data, batch->out.length);
        kvio_serve_batch_reset(batch);
    }
    return status;
}

kvio_status_t kvio_serve_client_run(kvio_serve_client_t *client, volatile sig_atomic_t *stop,
                                    char *error_p, size_t error_len)
{
    const kvio_serve_run_t *run = client->run;
    kvio_hash_buffer_t hashes = {0};
    kvio_router_view_t view;
    kvio_serve_mirror_view(client->mirror, &view);
    bool ended = false, all_final = false;
    /* The stream starts when every serve rank has published its first state
     * (its KV memory is set up and it is serving); it may take its time. */
    kvio_status_t status = KVIO_OK;
    for (uint32_t ready = 0; status == KVIO_OK && ready < client->num_serve;) {
        status = client_drain_states(client, &all_final, error_p, error_len);
        for (ready = 0; ready < client->num_serve && mirror_states_of(client->mirror, ready) > 0;)
            ready++;
        if (status == KVIO_OK && ready < client->num_serve) {
            status = client_check_ranks(client, true, error_p, error_len);
            struct timespec pause = {.tv_sec = 0, .tv_nsec = 100000};
            nanosleep(&pause, NULL);
        }
    }
    /* Arrivals count from the run's t0, as every rank's times do. */
    int64_t origin = run->t0_ns > 0 ? run->t0_ns : kvio_rte_time_ns(client->rte);
    const kvio_request_t *next = NULL;
    if (status == KVIO_OK)
        status = kvio_stream_next(run->stream, &next);
    bool first = true;
    /* Progress in a plain run (with a trainer, the trainer's is shown). */
    kvio_progress_t *progress = NULL;
    if (run->first_serve_rank == 0)
        kvio_progress_create("emulate: requests sent", run->num_requests, &progress);
    while (status == KVIO_OK) {
        if (progress != NULL)
            kvio_progress_update(progress, client->generated);
        status = client_drain_states(client, &all_final, error_p, error_len);
        if (status != KVIO_OK || all_final)
            break;
        int64_t now = kvio_rte_time_ns(client->rte) - origin;
        if (ended && stop != NULL && *stop)
            break; /* interrupted: serve ranks stop without a last state */
        if (!ended) {
            bool stopping = stop != NULL && *stop;
            /* Every request due by now, routed on what the ranks published. */
            while (status == KVIO_OK && !stopping && next != NULL && next->arrival_ns <= now) {
                kvio_engine_request_t request;
                bool measured = now >= run->warmup_ns &&
                                client->generated >= (uint64_t)run->warmup_requests;
                status = kvio_serve_engine_request(next, (uint32_t)run->serve->kvcache.block_size,
                                                   now, measured, 0, &hashes, &request);
                if (status == KVIO_OK && request.prompt_tokens > 0) {
                    view.now_ns = (int64_t)kvio_time_ns(); /* the mirror's event clock */
                    uint32_t rank = kvio_router_choose_view(client->router, &view,
                                                            client->num_serve, &request);
                    status = kvio_serve_batch_add(&client->batches[rank], &request);
                    if (status == KVIO_OK)
                        status = kvio_serve_mirror_dispatched(client->mirror, rank, &request);
                    client->generated++;
                }
                if (status == KVIO_OK)
                    status = kvio_stream_next(run->stream, &next);
            }
            ended = status == KVIO_OK && (stopping || next == NULL);
            if (status == KVIO_OK)
                status = client_send_batches(client, origin, first, ended);
            first = false;
            if (status != KVIO_OK) {
                snprintf(error_p, error_len, "client rank: sending requests: %s",
                         kvio_strerror(status));
                break;
            }
        } else if ((status = client_check_ranks(client, false, error_p, error_len)) !=
                   KVIO_OK) {
            break;
        }
        /* Sleep to the next arrival, looking at published state every
         * 200 us. */
        int64_t pause_ns = 200000;
        if (!ended && next != NULL && next->arrival_ns - now < pause_ns)
            pause_ns = next->arrival_ns - now;
        if (pause_ns > 0) {
            struct timespec pause = {.tv_sec = 0, .tv_nsec = pause_ns};
            nanosleep(&pause, NULL);
        }
    }
    kvio_progress_destroy(progress);
    free(hashes.hashes);
    /* Interrupted serve ranks take no more batches: nothing to wait for. */
    if (status == KVIO_OK && !(stop != NULL && *stop))
        status = kvio_rte_flush(client->rte);
    return status;
}

/* The client rank's report to rank 0 (kvio/wire.h): magic, serve ranks,
 * requests generated, state messages, the router's name, the requests
 * routed to each serve rank, then what its routing decisions were (flags:
 * bit 0 the router keeps an index, bit 1 fed by KV events; the events' lag,
 * events, decisions, indexed and stale routes). */
kvio_status_t kvio_serve_client_pack(const kvio_serve_client_t *client, void **blob_p,
                                     size_t *length_p)
{
    kvio_wire_writer_t out = {0};
    kvio_wire_put_u64(&out, CLIENT_MAGIC);
    kvio_wire_put_u64(&out, client->num_serve);
    kvio_wire_put_u64(&out, client->generated);
    kvio_wire_put_u64(&out, kvio_serve_mirror_states(client->mirror));
    const char *router = kvio_router_name(client->router);
    kvio_wire_put_blob(&out, router, strlen(router));
    for (uint32_t r = 0; r < client->num_serve; r++)
        kvio_wire_put_u64(&out, kvio_serve_mirror_sent(client->mirror, r));
    kvio_router_stats_t routes;
    kvio_router_stats(client->router, &routes);
    kvio_wire_put_u64(&out, (routes.indexed ? 1u : 0u) | (routes.hears_events ? 2u : 0u));
    kvio_wire_put_u64(&out, (uint64_t)routes.event_lag_ns);
    kvio_wire_put_u64(&out, routes.events);
    kvio_wire_put_u64(&out, routes.decisions);
    kvio_wire_put_u64(&out, routes.indexed_routes);
    kvio_wire_put_u64(&out, routes.stale_routes);
    return kvio_wire_finish(&out, blob_p, length_p);
}

bool kvio_serve_client_blob(const void *blob, size_t length)
{
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    uint64_t magic = 0;
    return kvio_wire_get_u64(&in, &magic) && magic == CLIENT_MAGIC;
}

/* The client's report as it was packed (its arrays borrowed from blob). */
typedef struct client_report {
    uint64_t num_serve, generated, states, name_length;
    const char *name;
    const unsigned char *sent;
    kvio_router_stats_t routes;
} client_report_t;

static bool client_report_read(const void *blob, size_t length, client_report_t *report)
{
    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    uint64_t magic = 0, hears = 0, lag = 0; /* hears: bit 0 indexed, bit 1 events */
    *report = (client_report_t){0};
    kvio_wire_get_u64(&in, &magic);
    kvio_wire_get_u64(&in, &report->num_serve);
    kvio_wire_get_u64(&in, &report->generated);
    kvio_wire_get_u64(&in, &report->states);
    report->name = kvio_wire_take_blob(&in, &report->name_length);
    report->sent = kvio_wire_take_array(&in, report->num_serve, sizeof(uint64_t));
    kvio_wire_get_u64(&in, &hears);
    kvio_wire_get_u64(&in, &lag);
    kvio_wire_get_u64(&in, &report->routes.events);
    kvio_wire_get_u64(&in, &report->routes.decisions);
    kvio_wire_get_u64(&in, &report->routes.indexed_routes);
    kvio_wire_get_u64(&in, &report->routes.stale_routes);
    report->routes.indexed = (hears & 1u) != 0;
    report->routes.hears_events = (hears & 2u) != 0;
    report->routes.event_lag_ns = (int64_t)lag;
    return kvio_wire_status(&in) == KVIO_OK && magic == CLIENT_MAGIC &&
           kvio_wire_left(&in) == 0 && report->num_serve <= UINT32_MAX;
}

json_t *kvio_serve_client_json(const void *blob, size_t length)
{
    client_report_t report;
    if (!client_report_read(blob, length, &report))
        return NULL;
    uint64_t *routed = malloc(report.num_serve * sizeof(uint64_t) + 1);
    if (routed == NULL)
        return NULL;
    memcpy(routed, report.sent, report.num_serve * sizeof(uint64_t));
    char router[64];
    snprintf(router, sizeof(router), "%.*s",
             (int)(report.name_length < 63 ? report.name_length : 63), report.name);
    json_t *object = kvio_serve_client_counts_json("rank", router, report.generated, routed,
                                                   (uint32_t)report.num_serve, report.states);
    free(routed);
    return object;
}

void kvio_serve_client_routing_fill(kvio_result_t *result, const void *blob, size_t length)
{
    client_report_t report;
    if (client_report_read(blob, length, &report))
        kvio_router_stats_fill(result, &report.routes);
}

json_t *kvio_serve_client_counts_json(const char *where, const char *router,
                                      uint64_t generated, const uint64_t *routed,
                                      uint32_t num_ranks, uint64_t states)
{
    json_t *per_rank = json_array();
    for (uint32_t r = 0; r < num_ranks; r++)
        json_array_append_new(per_rank, json_integer((json_int_t)routed[r]));
    return json_pack("{s:s, s:s, s:I, s:I, s:o}", "where", where, "router", router,
                     "generated", (json_int_t)generated, "state_messages", (json_int_t)states,
                     "routed_per_rank", per_rank);
}
