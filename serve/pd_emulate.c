/* Prefill/decode disaggregation in emulate: a P/D serve rank's side of it.
 * A prefill rank serves its share of the stream through kvio_serve_pd (one
 * output token each). At a prefill's end its prompt's blocks are copied
 * from the pool into its outbox (UCX-mapped host staging), each with its
 * XXH3-64, and the request, with where its blocks are, is posted to a
 * decode rank (round_robin, or least_loaded: the fewest of this prefill's
 * in flight there). A decode rank's arrival source takes the handoffs: it
 * lists the blocks in its peer tier (a remote tier whose gets are UCX gets
 * from the outbox, each block checked against its checksum) and queues the
 * request, whose admission loads what its pool lacks. Once the request has
 * made its first token its blocks are unlisted and the prefill rank told,
 * which frees their outbox slots (vLLM's decode notifies its prefill after
 * the read). A prefill rank that has served its share tells every decode
 * rank so and waits for its last releases; a decode rank ends when every
 * prefill rank has ended and it has served what came. Peers are judged by
 * their heartbeats: a slow one is waited for, a lost one named. */
#include "serve/pd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/array.h"
#include "kvio/clock.h"
#include "kvio/copysum.h"
#include "kvio/gpu.h"
#include "kvio/hashset.h"
#include "kvio/wire.h"

#define PD_MAGIC 0x6b76696f70646831ull /* "kviopdh1" */
enum { PD_HANDOFF = 1, PD_END = 2 };

/* How soon an idle decode rank looks for handoffs again. */
#define PD_POLL_NS 200000

/* A prefill's request whose blocks sit in the outbox until its decode
 * rank lets them go. */
typedef struct outstanding {
    uint64_t id;
    uint32_t decode;   /* index among the decode ranks */
    uint32_t *slots;
    uint32_t count;
} outstanding_t;

/* A decode's request from a prefill rank, until it has finished. */
typedef struct incoming {
    uint64_t id;
    int prefill;       /* world rank */
    kvio_pd_times_t times;
    kvio_hash_t *hashes; /* its listed blocks' */
    uint64_t *locations;
    uint32_t count;
    bool released;
} incoming_t;

struct kvio_serve_pd_rank {
    kvio_serve_arrivals_t base; /* decode: its arrival source */
    const kvio_serve_run_t *run;
    kvio_rte_t *rte;
    bool prefills;
    uint32_t index;            /* among the ranks of its role */
    uint32_t num_prefill, num_decode;
    int first_world;           /* serve rank 0's world rank */
    uint64_t block_bytes;
    uint32_t block_size;
    const unsigned char *pool; /* prefill: its KV pool (block b at b x block_bytes) */
    kvio_device_t *device;     /* the pool's GPU (NULL: host memory) */
    kvio_pd_link_t *link;
    /* prefill */
    kvio_serve_pd_t *pd;
    kvio_serve_lane_t *lanes[1]; /* its lane, for the pd */
    bool push;                 /* pd.transfer: push (the prefill writes the decode's inbox) */
    uint32_t *free_slots;      /* per part (pull: its outbox; push: its partition of each
                                  decode rank's inbox), num_slots each, a stack */
    uint32_t *num_free;        /* per part */
    uint32_t num_parts, num_slots;
    outstanding_t *out;
    size_t num_out, out_capacity;
    uint64_t *in_flight;       /* per decode rank: requests there not yet let go */
    uint32_t next_decode;
    uint64_t staged_blocks;    /* blocks staged so far (fault injection) */
    /* decode */
    kvio_serve_loop_t *loop;
    kvio_serve_lane_t *lane;
    kvio_tier_t *peer;
    kvio_tier_t **tiers;       /* the rank's tiers and the peer tier, for the engine */
    size_t num_tiers;
    bool *ended;               /* per prefill rank: it said it has ended */
    uint32_t num_ended;
    incoming_t *in;
    size_t num_in, in_capacity;
    kvio_map_t in_index;       /* id -> its incoming's index + 1 (looked up at every token) */
    bool took;
    uint64_t handoffs;         /* taken so far (fault injection) */
    kvio_status_t status;      /* a failure in an observer, returned by the chores */
    char error[KVIO_ERROR_MAX];
};

typedef struct kvio_serve_pd_rank pd_rank_t;

static int prefill_world(const pd_rank_t *pdr, uint32_t p)
{
    return pdr->first_world + (int)p;
}

static int decode_world(const pd_rank_t *pdr, uint32_t d)
{
    return pdr->first_world + (int)pdr->num_prefill + (int)d;
}

static kvio_status_t failed(pd_rank_t *pdr, kvio_status_t status, const char *fmt,
                            const char *detail)
{
    if (pdr->error[0] == '\0') {
        char what[256];
        snprintf(what, sizeof(what), fmt, detail);
        snprintf(pdr->error, sizeof(pdr->error), "%s rank %u: %s",
                 pdr->prefills ? "prefill" : "decode", pdr->first_world +
                     (pdr->prefills ? pdr->index : pdr->num_prefill + pdr->index), what);
    }
    if (pdr->status == KVIO_OK)
        pdr->status = status;
    return status;
}

/* ---------- prefill: the outbox and the releases ---------- */

/* Frees the slots of the request the decode rank let go. */
static void release(pd_rank_t *pdr, uint64_t id)
{
    for (size_t i = 0; i < pdr->num_out; i++) {
        outstanding_t *out = &pdr->out[i];
        if (out->id != id)
            continue;
        uint32_t part = pdr->push ? out->decode : 0;
        for (uint32_t s = 0; s < out->count; s++)
            pdr->free_slots[(size_t)part * pdr->num_slots + pdr->num_free[part]++] =
                out->slots[s];
        pdr->in_flight[out->decode]--;
        free(out->slots);
        pdr->out[i] = pdr->out[--pdr->num_out];
        return;
    }
}

/* Takes every release the decode ranks have sent; a lost decode rank is
 * named. */
static kvio_status_t take_releases(pd_rank_t *pdr)
{
    kvio_pd_link_progress(pdr->link);
    for (uint32_t d = 0; d < pdr->num_decode; d++) {
        for (;;) {
            void *data = NULL;
            size_t length = 0;
            kvio_status_t status = kvio_rte_try_recv(pdr->rte, decode_world(pdr, d),
                                                     KVIO_SERVE_TAG_PD_RELEASE, &data, &length);
            if (status == KVIO_INPROGRESS)
                break;
            if (status == KVIO_ERR_PEER) {
                if (pdr->in_flight[d] == 0)
                    break; /* it ended, owing nothing */
                return failed(pdr, status, "a decode rank was lost holding its KV: %s",
                              kvio_rte_verdict(pdr->rte));
            }
            uint64_t id = 0;
            if (status == KVIO_OK && length == sizeof(id))
                memcpy(&id, data, sizeof(id));
            free(data);
            if (status != KVIO_OK || length != sizeof(id))
                return failed(pdr, KVIO_ERR_PARSE, "%s", "a bad release from a decode rank");
            release(pdr, id);
        }
    }
    return KVIO_OK;
}

/* Waits (taking releases) until count slots of part are free, while the
 * decode ranks holding the others live. */
static kvio_status_t wait_for_slots(pd_rank_t *pdr, uint32_t part, uint32_t count)
{
    while (pdr->num_free[part] < count) {
        kvio_status_t status = take_releases(pdr);
        if (status != KVIO_OK)
            return status;
        if (pdr->run->stop != NULL && *pdr->run->stop)
            return failed(pdr, KVIO_ERR_INTERRUPTED, "%s", "stopped waiting for staging room");
        if (pdr->num_free[part] < count && pdr->num_out == 0)
            return failed(pdr, KVIO_ERR_CONFIG, "%s", "a prompt larger than the staging buffer");
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000};
        nanosleep(&pause, NULL);
    }
    return KVIO_OK;
}

static uint32_t choose_decode(const pd_rank_t *pdr)
{
    if (!kvio_choice_is(&pdr->run->pd->router.policy, "least_loaded"))
        return (pdr->next_decode + pdr->index) % pdr->num_decode;
    uint32_t best = 0;
    for (uint32_t d = 1; d < pdr->num_decode; d++)
        if (pdr->in_flight[d] < pdr->in_flight[best])
            best = d;
    return best;
}

/* The handoff message: the request as the decode takes it, the prefill's
 * times, and each block's outbox offset and checksum. */
static kvio_status_t pack_handoff(const kvio_engine_request_t *decode,
                                  const kvio_pd_times_t *times, const uint64_t *offsets,
                                  const uint64_t *checksums, uint32_t count, void **blob_p,
                                  size_t *length_p)
{
    kvio_wire_writer_t out = {0};
    uint64_t header[] = {PD_MAGIC, PD_HANDOFF, decode->id, (uint64_t)decode->arrival_ns,
                         decode->prompt_tokens, decode->output_tokens, decode->max_tokens,
                         (uint64_t)(int64_t)decode->priority, decode->measured, decode->tag,
                         (uint64_t)decode->handoff.prefill_start_ns,
                         (uint64_t)decode->handoff.handoff_ns, decode->handoff.layers,
                         times->prefill_rank, (uint64_t)times->prefill_queued_ns,
                         (uint64_t)times->prefill_ns, (uint64_t)times->staging_ns,
                         decode->num_hashes, count};
    kvio_wire_put(&out, header, sizeof(header));
    kvio_wire_put(&out, decode->hashes, decode->num_hashes * sizeof(*decode->hashes));
    kvio_wire_put(&out, offsets, count * sizeof(*offsets));
    kvio_wire_put(&out, checksums, count * sizeof(*checksums));
    return kvio_wire_finish(&out, blob_p, length_p);
}

/* Where slot of the staging for decode rank index decode is: pull, this
 * prefill rank's outbox; push, this prefill rank's partition of the decode
 * rank's inbox. */
static uint64_t slot_location(const pd_rank_t *pdr, uint32_t decode, uint32_t slot)
{
    if (!pdr->push)
        return KVIO_PD_LOCATION(prefill_world(pdr, pdr->index),
                                (uint64_t)slot * pdr->block_bytes);
    return KVIO_PD_LOCATION(decode_world(pdr, decode),
                            ((uint64_t)pdr->index * pdr->num_slots + slot) * pdr->block_bytes);
}

/* Whether staged blocks land in memory this process reaches (the outbox,
 * or a mapped inbox), rather than through UCX puts. */
static bool stages_here(const pd_rank_t *pdr)
{
    return !pdr->push || kvio_pd_link_mapped(pdr->link);
}

/* A pool block's bytes and where they go, their checksum taken on the way:
 * in one pass where the target is in this process, else summed here and
 * put over UCX. */
static kvio_status_t stage_one(pd_rank_t *pdr, const unsigned char *block, uint64_t location,
                               uint64_t *checksum_p)
{
    if (stages_here(pdr)) {
        *checksum_p = kvio_copy_hashed(kvio_pd_link_address(pdr->link, location), block,
                                       pdr->block_bytes);
        return KVIO_OK;
    }
    kvio_sum_t sum;
    kvio_sum_start(&sum, block, pdr->block_bytes);
    kvio_sum_pass(&sum, NULL, pdr->block_bytes);
    *checksum_p = kvio_sum_digest(&sum);
    char why[256] = "";
    kvio_status_t status = kvio_pd_link_put(pdr->link, location, block, pdr->block_bytes, why,
                                            sizeof(why));
    return status == KVIO_OK ? KVIO_OK : failed(pdr, status, "%s", why);
}

/* Copies count pool blocks (ids) to their locations, each one's checksum
 * into checksums: a host pool's in one pass each; a GPU pool's down in one
 * batch of copies, then summed where they landed. Fault injection changes
 * one byte of every pd.corrupt_every-th block after its checksum. */
static kvio_status_t stage_blocks(pd_rank_t *pdr, const uint32_t *ids, const uint64_t *locations,
                                  uint64_t *checksums, uint32_t count)
{
    if (pdr->device != NULL) {
        kvio_device_copy_t *copies = malloc(((size_t)count + 1) * sizeof(*copies));
        if (copies == NULL)
            return failed(pdr, KVIO_ERR_NOMEM, "%s", "out of memory for staging copies");
        for (uint32_t b = 0; b < count; b++)
            copies[b] = (kvio_device_copy_t){
                .dst = kvio_pd_link_address(pdr->link, locations[b]),
                .src = pdr->pool + (uint64_t)ids[b] * pdr->block_bytes,
                .bytes = pdr->block_bytes};
        kvio_status_t status = kvio_device_copy_batch(pdr->device, copies, count);
        free(copies);
        if (status != KVIO_OK)
            return failed(pdr, status, "staging KV from the GPU pool: %s", kvio_strerror(status));
    }
    for (uint32_t b = 0; b < count; b++) {
        unsigned char *staged = kvio_pd_link_address(pdr->link, locations[b]);
        if (pdr->device != NULL) {
            kvio_sum_t sum;
            kvio_sum_start(&sum, staged, pdr->block_bytes);
            kvio_sum_pass(&sum, NULL, pdr->block_bytes);
            checksums[b] = kvio_sum_digest(&sum);
        } else {
            kvio_status_t status = stage_one(
                pdr, pdr->pool + (uint64_t)ids[b] * pdr->block_bytes, locations[b], &checksums[b]);
            if (status != KVIO_OK)
                return status;
        }
        int64_t every = pdr->run->pd->corrupt_every;
        if (every > 0 && ++pdr->staged_blocks % (uint64_t)every == 0) {
            unsigned char flipped = (unsigned char)(checksums[b] | 1);
            if (stages_here(pdr)) /* a GPU pool stages here only (checked at set-up) */
                staged[pdr->block_bytes / 2] ^= flipped; /* fault injection: changed */
            else
                checksums[b] ^= 1; /* put already: the checksum it goes with is wrong */
        }
    }
    return KVIO_OK;
}

/* kvio_serve_pd's send: the prompt's blocks into the outbox, the request
 * to a decode rank. */
static kvio_status_t send_handoff(void *context, const kvio_engine_request_t *decode,
                                  const kvio_pd_times_t *times,
                                  const kvio_engine_finished_t *finished)
{
    pd_rank_t *pdr = context;
    uint32_t count = decode->prompt_tokens / pdr->block_size;
    if (count > decode->num_hashes)
        count = (uint32_t)decode->num_hashes;
    if (count > finished->num_block_ids)
        count = finished->num_block_ids;
    /* The blocks' KV (what the prefill computed) is in them before the
     * staging is timed. */
    if (pdr->lane->engine != NULL)
        kvio_engine_materialize(pdr->lane->engine, finished->block_ids, count);
    uint64_t start_ns = kvio_time_ns();
    if (count > pdr->num_slots) {
        char why[160];
        snprintf(why, sizeof(why), "request %llu: %u blocks, the staging buffer %u (pd.staging)",
                 (unsigned long long)decode->id, count, pdr->num_slots);
        return failed(pdr, KVIO_ERR_CONFIG, "%s", why);
    }
    outstanding_t out = {.id = decode->id, .count = count, .decode = choose_decode(pdr),
                         .slots = malloc((count + 1) * sizeof(uint32_t))};
    uint32_t part = pdr->push ? out.decode : 0;
    kvio_status_t status = wait_for_slots(pdr, part, count);
    uint64_t *offsets = malloc((count + 1) * sizeof(uint64_t));
    uint64_t *locations = malloc((count + 1) * sizeof(uint64_t));
    uint64_t *checksums = malloc((count + 1) * sizeof(uint64_t));
    if (status == KVIO_OK &&
        (out.slots == NULL || offsets == NULL || locations == NULL || checksums == NULL))
        status = failed(pdr, KVIO_ERR_NOMEM, "%s", "out of memory for a handoff");
    uint32_t *free_part = pdr->free_slots + (size_t)part * pdr->num_slots;
    for (uint32_t b = 0; status == KVIO_OK && b < count; b++) {
        out.slots[b] = free_part[--pdr->num_free[part]];
        locations[b] = slot_location(pdr, out.decode, out.slots[b]);
        offsets[b] = KVIO_PD_LOCATION_OFFSET(locations[b]);
    }
    if (status == KVIO_OK)
        status = stage_blocks(pdr, finished->block_ids, locations, checksums, count);
    free(locations);
    void *blob = NULL;
    size_t length = 0;
    kvio_pd_times_t staged = *times;
    staged.staging_ns = (int64_t)(kvio_time_ns() - start_ns);
    if (status == KVIO_OK)
        status = pack_handoff(decode, &staged, offsets, checksums, count, &blob, &length);
    if (status == KVIO_OK)
        status = kvio_rte_post(pdr->rte, decode_world(pdr, out.decode),
                               KVIO_SERVE_TAG_PD_HANDOFF, blob, length);
    if (status == KVIO_OK)
        status = kvio_array_reserve((void **)&pdr->out, &pdr->out_capacity, pdr->num_out + 1,
                                    sizeof(*pdr->out), 64);
    free(blob);
    free(offsets);
    free(checksums);
    if (status != KVIO_OK) {
        free(out.slots);
        return failed(pdr, status, "handing a request over: %s", kvio_strerror(status));
    }
    pdr->out[pdr->num_out++] = out;
    pdr->in_flight[out.decode]++;
    pdr->next_decode++;
    return KVIO_OK;
}

/* ---------- decode: the handoffs as its arrival source ---------- */

typedef struct listing {
    pd_rank_t *pdr;
    const incoming_t *in;
    const uint64_t *checksums;
    kvio_status_t status;
} listing_t;

static void list_blocks(void *context)
{
    listing_t *listing = context;
    const incoming_t *in = listing->in;
    for (uint32_t b = 0; b < in->count && listing->status == KVIO_OK; b++)
        listing->status = kvio_tier_list(listing->pdr->peer, in->hashes[b], listing->checksums[b],
                                         in->locations[b]);
}

static void unlist_blocks(void *context)
{
    listing_t *listing = context;
    const incoming_t *in = listing->in;
    for (uint32_t b = 0; b < in->count; b++)
        (void)kvio_tier_unlist(listing->pdr->peer, in->hashes[b], in->locations[b]);
}

/* One handoff: its blocks listed in the peer tier, the request queued. */
static kvio_status_t take_handoff(pd_rank_t *pdr, int prefill, kvio_wire_reader_t *reader)
{
    uint64_t h[17];
    if (!kvio_wire_get(reader, h, sizeof(h)))
        return KVIO_ERR_PARSE;
    int64_t dies_after = pdr->run->pd->decode_dies_after;
    if (dies_after > 0 && pdr->index == 0 && ++pdr->handoffs > (uint64_t)dies_after)
        return failed(pdr, KVIO_ERR_IO, "%s", "fails (pd.decode_dies_after, fault injection)");
    uint64_t num_hashes = h[15], count = h[16];
    const kvio_hash_t *hashes = kvio_wire_take_array(reader, num_hashes, sizeof(kvio_hash_t));
    const uint64_t *offsets = kvio_wire_take_array(reader, count, sizeof(uint64_t));
    const uint64_t *checksums = kvio_wire_take_array(reader, count, sizeof(uint64_t));
    if (hashes == NULL || offsets == NULL || checksums == NULL || count > num_hashes)
        return KVIO_ERR_PARSE;
    incoming_t in = {.id = h[0], .prefill = prefill, .count = (uint32_t)count,
                     .times = {.prefill_rank = (uint32_t)h[11],
                               .prefill_queued_ns = (int64_t)h[12],
                               .prefill_ns = (int64_t)h[13], .staging_ns = (int64_t)h[14]},
                     .hashes = malloc((count + 1) * sizeof(kvio_hash_t)),
                     .locations = malloc((count + 1) * sizeof(uint64_t))};
    kvio_status_t status = in.hashes == NULL || in.locations == NULL ? KVIO_ERR_NOMEM : KVIO_OK;
    if (status == KVIO_OK)
        status = kvio_array_reserve((void **)&pdr->in, &pdr->in_capacity, pdr->num_in + 1,
                                    sizeof(*pdr->in), 64);
    if (status == KVIO_OK)
        status = kvio_map_set(&pdr->in_index, in.id, (uint32_t)pdr->num_in + 1);
    if (status != KVIO_OK) {
        free(in.hashes);
        free(in.locations);
        return status;
    }
    /* Pull: the blocks are in the prefill rank's outbox; push: in this
     * rank's inbox. */
    int holder = pdr->push ? decode_world(pdr, pdr->index) : prefill;
    for (uint64_t b = 0; b < count; b++) {
        in.hashes[b] = hashes[b];
        in.locations[b] = KVIO_PD_LOCATION(holder, offsets[b]);
    }
    listing_t listing = {.pdr = pdr, .in = &in, .checksums = checksums};
    kvio_engine_with_tiers(pdr->lane->engine, list_blocks, &listing);
    pdr->in[pdr->num_in++] = in;
    kvio_engine_request_t request = {
        .id = h[0], .arrival_ns = (int64_t)h[1], .prompt_tokens = (uint32_t)h[2],
        .output_tokens = (uint32_t)h[3], .max_tokens = (uint32_t)h[4],
        .priority = (int32_t)(int64_t)h[5], .measured = h[6] != 0, .tag = h[7],
        .hashes = hashes, .num_hashes = num_hashes,
        .handoff = {.prefill_start_ns = (int64_t)h[8], .handoff_ns = (int64_t)h[9],
                    .layers = (uint32_t)h[10]}};
    pdr->took = true;
    if (listing.status != KVIO_OK)
        return listing.status;
    return kvio_serve_loop_add(pdr->loop, pdr->lane, &request);
}

/* Takes every handoff and end the prefill ranks have sent. */
static kvio_status_t receive(pd_rank_t *pdr)
{
    for (uint32_t p = 0; p < pdr->num_prefill; p++) {
        while (!pdr->ended[p]) {
            void *data = NULL;
            size_t length = 0;
            kvio_status_t status = kvio_rte_try_recv(pdr->rte, prefill_world(pdr, p),
                                                     KVIO_SERVE_TAG_PD_HANDOFF, &data, &length);
            if (status == KVIO_INPROGRESS)
                break;
            if (status == KVIO_ERR_PEER)
                return failed(pdr, status, "a prefill rank was lost: %s",
                              kvio_rte_verdict(pdr->rte));
            kvio_wire_reader_t reader = kvio_wire_reader(data, length);
            uint64_t magic = 0, kind = 0;
            if (status == KVIO_OK && (!kvio_wire_get_u64(&reader, &magic) ||
                                      !kvio_wire_get_u64(&reader, &kind) || magic != PD_MAGIC))
                status = KVIO_ERR_PARSE;
            if (status == KVIO_OK && kind == PD_END) {
                pdr->ended[p] = true;
                pdr->num_ended++;
            } else if (status == KVIO_OK) {
                status = kind == PD_HANDOFF ? take_handoff(pdr, prefill_world(pdr, p), &reader)
                                            : KVIO_ERR_PARSE;
            }
            free(data);
            if (status == KVIO_ERR_PARSE)
                return failed(pdr, status, "a bad handoff from a prefill rank%s", "");
            if (status != KVIO_OK)
                return failed(pdr, status, "taking a handoff: %s", kvio_strerror(status));
        }
    }
    return KVIO_OK;
}

static bool all_ended(const pd_rank_t *pdr)
{
    return pdr->num_ended == pdr->num_prefill;
}

static int64_t pd_next_ns(kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                          int64_t now_ns)
{
    (void)loop;
    const pd_rank_t *pdr = (const pd_rank_t *)base;
    if (all_ended(pdr) || pdr->lane->state != KVIO_LANE_IDLE)
        return INT64_MAX; /* a running lane looks at its next boundary */
    return now_ns + PD_POLL_NS;
}

static kvio_status_t pd_take(kvio_serve_arrivals_t *base, kvio_serve_loop_t *loop,
                             int64_t now_ns, bool *more_now_p)
{
    (void)loop, (void)now_ns;
    *more_now_p = false;
    return receive((pd_rank_t *)base);
}

static bool pd_due(const kvio_serve_arrivals_t *base, const kvio_serve_loop_t *loop,
                   int64_t now_ns)
{
    (void)loop, (void)now_ns;
    return !all_ended((const pd_rank_t *)base);
}

static bool pd_ended(const kvio_serve_arrivals_t *base)
{
    return all_ended((const pd_rank_t *)base);
}

static kvio_status_t pd_poll(kvio_serve_arrivals_t *base, bool *wake_p)
{
    pd_rank_t *pdr = (pd_rank_t *)base;
    pdr->took = false;
    kvio_status_t status = receive(pdr);
    *wake_p = *wake_p || pdr->took || all_ended(pdr);
    return status;
}

static const char *pd_error(const kvio_serve_arrivals_t *base)
{
    return ((const pd_rank_t *)base)->error;
}

static const kvio_serve_arrivals_ops_t pd_ops = {
    .next_ns = pd_next_ns,
    .take = pd_take,
    .ended = pd_ended,
    .due = pd_due,
    .poll = pd_poll,
    .error = pd_error,
};

static incoming_t *find_incoming(pd_rank_t *pdr, uint64_t id)
{
    uint32_t at = kvio_map_get(&pdr->in_index, id);
    return at > 0 ? &pdr->in[at - 1] : NULL;
}

/* The request's blocks leave the peer tier and its prefill rank hears it
 * may free them. */
static void let_go(pd_rank_t *pdr, incoming_t *in)
{
    if (in->released)
        return;
    in->released = true;
    listing_t listing = {.pdr = pdr, .in = in};
    kvio_engine_with_tiers(pdr->lane->engine, unlist_blocks, &listing);
    kvio_status_t status = kvio_rte_post(pdr->rte, in->prefill, KVIO_SERVE_TAG_PD_RELEASE,
                                         &in->id, sizeof(in->id));
    if (status != KVIO_OK)
        failed(pdr, status, "telling a prefill rank its KV was read: %s", kvio_strerror(status));
}

void kvio_serve_pd_rank_tokens(kvio_serve_pd_rank_t *pdr, uint64_t id, uint32_t generated)
{
    incoming_t *in = generated >= 1 ? find_incoming(pdr, id) : NULL;
    if (in != NULL)
        let_go(pdr, in);
}

void kvio_serve_pd_rank_decoded(kvio_serve_pd_rank_t *pdr, kvio_engine_finished_t *finished)
{
    incoming_t *in = find_incoming(pdr, finished->id);
    if (in == NULL)
        return;
    let_go(pdr, in);
    kvio_pd_fill_times(finished, &in->times);
    free(in->hashes);
    free(in->locations);
    (void)kvio_map_set(&pdr->in_index, in->id, 0); /* taking a key out allocates nothing */
    *in = pdr->in[--pdr->num_in];
    if (in != &pdr->in[pdr->num_in])
        (void)kvio_map_set(&pdr->in_index, in->id, (uint32_t)(in - pdr->in) + 1);
}

/* ---------- both ---------- */

static void peer_fetch(void *context, const uint64_t *locations, void *const *data, size_t count,
                       kvio_status_t *statuses_p, char *error_p, size_t error_len)
{
    pd_rank_t *pdr = context;
    kvio_pd_link_fetch(pdr->link, locations, data, count, pdr->block_bytes, statuses_p, error_p,
                       error_len);
}

static const void *peer_address(void *context, uint64_t location)
{
    return kvio_pd_link_address(((pd_rank_t *)context)->link, location);
}

static kvio_status_t chores(void *context)
{
    pd_rank_t *pdr = context;
    if (pdr->status != KVIO_OK)
        return pdr->status;
    return pdr->prefills ? take_releases(pdr) : KVIO_OK;
}

static const char *chores_error(void *context)
{
    return ((pd_rank_t *)context)->error;
}

/* Prefill: the outbox's slots, the pd that turns requests into prefills. */
static kvio_status_t prefill_setup(pd_rank_t *pdr)
{
    pdr->num_parts = pdr->push ? pdr->num_decode : 1;
    pdr->free_slots = malloc((size_t)pdr->num_parts * pdr->num_slots * sizeof(*pdr->free_slots));
    pdr->num_free = calloc(pdr->num_parts, sizeof(*pdr->num_free));
    pdr->in_flight = calloc(pdr->num_decode, sizeof(*pdr->in_flight));
    if (pdr->free_slots == NULL || pdr->num_free == NULL || pdr->in_flight == NULL)
        return KVIO_ERR_NOMEM;
    for (uint32_t part = 0; part < pdr->num_parts; part++) {
        for (uint32_t s = 0; s < pdr->num_slots; s++)
            pdr->free_slots[(size_t)part * pdr->num_slots + s] = pdr->num_slots - 1 - s;
        pdr->num_free[part] = pdr->num_slots;
    }
    kvio_serve_pd_params_t pd = {
        .config = pdr->run->pd, .lanes = pdr->lanes, .num_prefill = 1,
        .block_size = pdr->block_size, .kv_bytes_per_token = pdr->block_bytes / pdr->block_size,
        .send = send_handoff, .send_context = pdr};
    return kvio_serve_pd_create(&pd, &pdr->pd);
}

/* Decode: the peer tier after the rank's own, and what came from whom. */
static kvio_status_t decode_setup(pd_rank_t *pdr, const kvio_serve_pd_rank_params_t *params,
                                  char *error_p, size_t error_len)
{
    pdr->base.ops = &pd_ops;
    pdr->ended = calloc(pdr->num_prefill, sizeof(*pdr->ended));
    pdr->tiers = calloc(params->num_tiers + 1, sizeof(*pdr->tiers));
    if (pdr->ended == NULL || pdr->tiers == NULL)
        return KVIO_ERR_NOMEM;
    kvio_tier_remote_t remote = {
        .fetch = peer_fetch, .context = pdr, .name = "peer",
        .address = pdr->push || kvio_pd_link_mapped(pdr->link) ? peer_address : NULL};
    kvio_status_t status = kvio_tier_create_remote(
        &remote, pdr->num_slots * pdr->num_prefill, pdr->block_bytes, 0, 0, true, &pdr->peer,
        error_p, error_len);
    if (status != KVIO_OK)
        return status;
    for (size_t t = 0; t < params->num_tiers; t++)
        pdr->tiers[t] = params->tiers[t];
    pdr->tiers[params->num_tiers] = pdr->peer;
    pdr->num_tiers = params->num_tiers + 1;
    return KVIO_OK;
}

kvio_status_t kvio_serve_pd_rank_create(const kvio_serve_pd_rank_params_t *params,
                                        kvio_serve_pd_rank_t **pdr_p, char *error_p,
                                        size_t error_len)
{
    const kvio_serve_run_t *run = params->run;
    pd_rank_t *pdr = calloc(1, sizeof(*pdr));
    if (pdr == NULL)
        return KVIO_ERR_NOMEM;
    pdr->run = run;
    pdr->rte = run->rte;
    pdr->num_prefill = run->num_prefill;
    pdr->num_decode = run->num_ranks - run->num_prefill;
    pdr->prefills = params->serve_index < run->num_prefill;
    pdr->index = pdr->prefills ? params->serve_index : params->serve_index - run->num_prefill;
    pdr->first_world = run->first_serve_rank;
    pdr->block_bytes = params->block_bytes;
    pdr->block_size = params->block_size;
    pdr->pool = params->pool;
    pdr->device = params->device;
    pdr->num_slots = params->staging_blocks;
    pdr->lane = pdr->lanes[0] = params->lane;
    /* Pull: each prefill rank's outbox, read by the decode ranks; push:
     * each decode rank's inbox, a partition per prefill rank, written by
     * them. */
    pdr->push = run->pd->transfer == KVIO_PD_PUSH;
    uint64_t staging = (uint64_t)pdr->num_slots * pdr->block_bytes;
    uint64_t region = pdr->push ? (pdr->prefills ? 0 : staging * pdr->num_prefill)
                                : (pdr->prefills ? staging : 0);
    kvio_status_t status = kvio_pd_link_create(pdr->rte, pdr->prefills == pdr->push, region,
                                               &pdr->link, error_p, error_len);
    if (status == KVIO_OK && pdr->prefills && pdr->device != NULL && !stages_here(pdr)) {
        snprintf(error_p, error_len, "serve rank %u: pd.transfer: push from a GPU pool needs "
                 "the decode ranks' inboxes mapped here (ranks of one node)",
                 params->serve_index);
        status = KVIO_ERR_CONFIG;
    }
    if (status == KVIO_OK)
        status = pdr->prefills ? prefill_setup(pdr)
                               : decode_setup(pdr, params, error_p, error_len);
    if (status != KVIO_OK) {
        if (error_p[0] == '\0')
            snprintf(error_p, error_len, "serve rank %u: setting up P/D: %s",
                     params->serve_index, kvio_strerror(status));
        kvio_serve_pd_rank_destroy(pdr);
        return status;
    }
    *pdr_p = pdr;
    return KVIO_OK;
}

void kvio_serve_pd_rank_attach(kvio_serve_pd_rank_t *pdr, kvio_serve_loop_t *loop)
{
    pdr->loop = loop;
    loop->chores = chores;
    loop->chores_error = chores_error;
    loop->chores_context = pdr;
    if (pdr->prefills)
        loop->intake = kvio_serve_pd_intake(pdr->pd);
    else
        loop->arrivals = &pdr->base;
}

void kvio_serve_pd_rank_destroy(kvio_serve_pd_rank_t *pdr)
{
    if (pdr == NULL)
        return;
    kvio_serve_pd_destroy(pdr->pd);
    for (size_t i = 0; i < pdr->num_out; i++)
        free(pdr->out[i].slots);
    for (size_t i = 0; i < pdr->num_in; i++) {
        free(pdr->in[i].hashes);
        free(pdr->in[i].locations);
    }
    free(pdr->in);
    kvio_tier_destroy(pdr->peer);
    if (pdr->num_out > 0 && pdr->link != NULL)
        kvio_pd_link_keep_outbox(pdr->link);
    free(pdr->out);
    kvio_map_fini(&pdr->in_index);
    kvio_pd_link_destroy(pdr->link);
    free(pdr->free_slots);
    free(pdr->num_free);
    free(pdr->in_flight);
    free(pdr->ended);
    free(pdr->tiers);
    free(pdr);
}

bool kvio_serve_pd_rank_prefills(const kvio_serve_pd_rank_t *pdr)
{
    return pdr->prefills;
}

void kvio_serve_pd_rank_tiers(const kvio_serve_pd_rank_t *pdr, kvio_tier_t *const **tiers_p,
                              size_t *count_p)
{
    *tiers_p = pdr->tiers;
    *count_p = pdr->num_tiers;
}

void kvio_serve_pd_rank_prefilled(kvio_serve_pd_rank_t *pdr,
                                  const kvio_engine_finished_t *finished)
{
    kvio_status_t status = kvio_serve_pd_prefilled(pdr->pd, pdr->loop, finished);
    if (status != KVIO_OK)
        failed(pdr, status, "%s", kvio_serve_pd_error(pdr->pd));
}

const char *kvio_serve_pd_rank_error(const kvio_serve_pd_rank_t *pdr)
{
    return pdr->error;
}

kvio_status_t kvio_serve_pd_rank_finish(kvio_serve_pd_rank_t *pdr)
{
    if (!pdr->prefills)
        return pdr->status;
    uint64_t end[2] = {PD_MAGIC, PD_END};
    for (uint32_t d = 0; d < pdr->num_decode && pdr->status == KVIO_OK; d++) {
        kvio_status_t status = kvio_rte_post(pdr->rte, decode_world(pdr, d),
                                             KVIO_SERVE_TAG_PD_HANDOFF, end, sizeof(end));
        if (status != KVIO_OK)
            failed(pdr, status, "telling the decode ranks it ended: %s", kvio_strerror(status));
    }
    /* Its outbox stays until every decode rank has read what it was sent. */
    while (pdr->status == KVIO_OK && pdr->num_out > 0) {
        if (take_releases(pdr) != KVIO_OK)
            break;
        if (pdr->run->stop != NULL && *pdr->run->stop)
            break;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 50000};
        nanosleep(&pause, NULL);
    }
    if (pdr->status == KVIO_OK)
        (void)kvio_rte_flush(pdr->rte);
    return pdr->status;
}
