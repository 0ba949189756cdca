/* vLLM's KV events (vllm/distributed/kv_events.py) over ZMQ: per serve
 * rank a PUB socket at the endpoint (its port offset by the rank, as vLLM
 * offsets data-parallel ranks), each iteration's events one message of
 * three frames: topic, sequence number (8 bytes, big-endian, from 0) and
 * a msgpack KVEventBatch [ts, [event, ...], data_parallel_rank], each
 * event a map tagged by "type" (BlockStored, BlockRemoved,
 * AllBlocksCleared) with vLLM's fields in its order. A block hash is the
 * low 64 bits of kvio's 128-bit hash (vLLM's default: the digest's last 8
 * bytes as an integer). */
#include "http/http_int.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kvio/clock.h"

#define SEND_HWM 100000

typedef struct publisher {
    void *socket;
    uint64_t sequence;
} publisher_t;

struct kvio_kv_events {
    void *context;
    publisher_t *publishers;
    uint32_t num_ranks;
    char *topic;
};

/* The endpoint of rank: tcp's port plus rank, else a _dpN suffix. */
static kvio_status_t rank_endpoint(const char *endpoint, uint32_t rank, char *text_p,
                                   size_t text_len)
{
    if (strncmp(endpoint, "tcp://", 6) == 0) {
        const char *colon = strrchr(endpoint, ':');
        char *end = NULL;
        long port = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
        if (colon == NULL || colon < endpoint + 6 || end == colon + 1 || *end != '\0' ||
            port < 1 || port + (long)rank > 65535)
            return KVIO_ERR_CONFIG;
        snprintf(text_p, text_len, "%.*s:%ld", (int)(colon - endpoint), endpoint, port + rank);
        return KVIO_OK;
    }
    if (rank == 0)
        snprintf(text_p, text_len, "%s", endpoint);
    else
        snprintf(text_p, text_len, "%s_dp%u", endpoint, rank);
    return KVIO_OK;
}

/* vLLM binds a wildcard or local endpoint, else connects to it. */
static bool binds(const char *endpoint)
{
    return strchr(endpoint, '*') != NULL || strstr(endpoint, "::") != NULL ||
           strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0;
}

kvio_status_t kvio_kv_events_create(const char *endpoint, const char *topic, uint32_t num_ranks,
                                    kvio_kv_events_t **events_p, char *error_p,
                                    size_t error_len)
{
    kvio_kv_events_t *events = calloc(1, sizeof(*events));
    if (events == NULL)
        return KVIO_ERR_NOMEM;
    events->num_ranks = num_ranks;
    events->topic = strdup(topic != NULL ? topic : "");
    events->publishers = calloc(num_ranks, sizeof(*events->publishers));
    events->context = zmq_ctx_new();
    kvio_status_t status = events->topic != NULL && events->publishers != NULL &&
                                   events->context != NULL
                               ? KVIO_OK
                               : KVIO_ERR_NOMEM;
    for (uint32_t r = 0; status == KVIO_OK && r < num_ranks; r++) {
        char address[512];
        if (rank_endpoint(endpoint, r, address, sizeof(address)) != KVIO_OK) {
            snprintf(error_p, error_len, "--kv-events %s: not an endpoint kvio can offset per "
                     "rank (tcp://HOST:PORT, ipc://PATH or inproc://NAME)", endpoint);
            status = KVIO_ERR_CONFIG;
            break;
        }
        void *socket = zmq_socket(events->context, ZMQ_PUB);
        int hwm = SEND_HWM, linger = 0;
        if (socket != NULL) {
            zmq_setsockopt(socket, ZMQ_SNDHWM, &hwm, sizeof(hwm));
            zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
            /* tcp://[::1]:PORT: ZMQ takes IPv6 addresses only when told
             * (it said "No such device"), as vLLM's publisher tells it. */
            int ipv6 = strchr(address, '[') != NULL;
            zmq_setsockopt(socket, ZMQ_IPV6, &ipv6, sizeof(ipv6));
        }
        if (socket == NULL ||
            (binds(address) ? zmq_bind(socket, address) : zmq_connect(socket, address)) != 0) {
            snprintf(error_p, error_len, "--kv-events %s: %s", address, zmq_strerror(zmq_errno()));
            if (socket != NULL)
                zmq_close(socket);
            status = KVIO_ERR_CONFIG;
            break;
        }
        events->publishers[r].socket = socket;
    }
    if (status != KVIO_OK) {
        kvio_kv_events_destroy(events);
        return status;
    }
    *events_p = events;
    return KVIO_OK;
}

static void pack_string(msgpack_packer *packer, const char *text)
{
    size_t length = strlen(text);
    msgpack_pack_str(packer, length);
    msgpack_pack_str_body(packer, text, length);
}

/* BlockStored of count blocks from events[first] on (a chain). */
static void pack_stored(msgpack_packer *packer, const kvio_kv_event_t *events, size_t first,
                        size_t count)
{
    const kvio_kv_event_t *head = &events[first];
    msgpack_pack_map(packer, 11);
    pack_string(packer, "type");
    pack_string(packer, "BlockStored");
    pack_string(packer, "block_hashes");
    msgpack_pack_array(packer, count);
    for (size_t i = 0; i < count; i++)
        msgpack_pack_uint64(packer, events[first + i].hash.low);
    pack_string(packer, "parent_block_hash");
    if (head->has_parent)
        msgpack_pack_uint64(packer, head->parent.low);
    else
        msgpack_pack_nil(packer);
    pack_string(packer, "token_ids");
    size_t tokens = 0;
    for (size_t i = 0; i < count; i++)
        tokens += events[first + i].num_tokens;
    msgpack_pack_array(packer, tokens);
    for (size_t i = 0; i < count; i++)
        for (uint32_t t = 0; t < events[first + i].num_tokens; t++)
            msgpack_pack_uint32(packer, events[first + i].tokens[t]);
    pack_string(packer, "block_size");
    msgpack_pack_uint32(packer, head->num_tokens);
    pack_string(packer, "lora_id");
    msgpack_pack_nil(packer);
    pack_string(packer, "medium");
    pack_string(packer, "GPU");
    pack_string(packer, "lora_name");
    msgpack_pack_nil(packer);
    pack_string(packer, "extra_keys");
    msgpack_pack_array(packer, count);
    for (size_t i = 0; i < count; i++)
        msgpack_pack_nil(packer);
    pack_string(packer, "group_idx");
    msgpack_pack_uint32(packer, 0);
    pack_string(packer, "kv_cache_spec_kind");
    pack_string(packer, "full_attention");
}

static void pack_removed(msgpack_packer *packer, const kvio_kv_event_t *event)
{
    msgpack_pack_map(packer, 4);
    pack_string(packer, "type");
    pack_string(packer, "BlockRemoved");
    pack_string(packer, "block_hashes");
    msgpack_pack_array(packer, 1);
    msgpack_pack_uint64(packer, event->hash.low);
    pack_string(packer, "medium");
    pack_string(packer, "GPU");
    pack_string(packer, "group_idx");
    msgpack_pack_uint32(packer, 0);
}

/* How many stored events from first on chain one to the next (vLLM's one
 * BlockStored per request and step). */
static size_t chain_length(const kvio_kv_event_t *events, size_t count, size_t first)
{
    size_t end = first + 1;
    while (end < count && events[end].kind == KVIO_KV_EVENT_STORED && events[end].has_parent &&
           kvio_hash_equal(events[end].parent, events[end - 1].hash) &&
           events[end].num_tokens == events[first].num_tokens)
        end++;
    return end - first;
}

static void publish(void *context, uint32_t rank, const kvio_kv_event_t *events, size_t count,
                    int64_t now_ns)
{
    (void)now_ns;
    kvio_kv_events_t *kv_events = context;
    if (rank >= kv_events->num_ranks)
        return;
    size_t messages = 0;
    for (size_t e = 0; e < count; e += events[e].kind == KVIO_KV_EVENT_STORED
                                            ? chain_length(events, count, e)
                                            : 1)
        messages++;
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init(&buffer);
    msgpack_packer packer;
    msgpack_packer_init(&packer, &buffer, msgpack_sbuffer_write);
    msgpack_pack_array(&packer, 3);
    msgpack_pack_double(&packer, (double)kvio_wall_time_ns() / 1e9);
    msgpack_pack_array(&packer, messages);
    for (size_t e = 0; e < count;) {
        if (events[e].kind == KVIO_KV_EVENT_STORED) {
            size_t chain = chain_length(events, count, e);
            pack_stored(&packer, events, e, chain);
            e += chain;
            continue;
        }
        if (events[e].kind == KVIO_KV_EVENT_REMOVED) {
            pack_removed(&packer, &events[e]);
        } else {
            msgpack_pack_map(&packer, 1);
            pack_string(&packer, "type");
            pack_string(&packer, "AllBlocksCleared");
        }
        e++;
    }
    msgpack_pack_uint32(&packer, rank);
    publisher_t *publisher = &kv_events->publishers[rank];
    unsigned char sequence[8];
    for (int i = 0; i < 8; i++)
        sequence[i] = (unsigned char)(publisher->sequence >> (56 - 8 * i));
    /* A PUB socket never blocks: past its high-water mark it drops. */
    zmq_send(publisher->socket, kv_events->topic, strlen(kv_events->topic),
             ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(publisher->socket, sequence, sizeof(sequence), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(publisher->socket, buffer.data, buffer.size, ZMQ_DONTWAIT);
    publisher->sequence++;
    msgpack_sbuffer_destroy(&buffer);
}

kvio_kv_event_sink_t kvio_kv_events_sink(kvio_kv_events_t *events)
{
    return (kvio_kv_event_sink_t){.context = events, .publish = publish};
}

uint64_t kvio_kv_events_published(const kvio_kv_events_t *events, uint32_t rank)
{
    return rank < events->num_ranks ? events->publishers[rank].sequence : 0;
}

void kvio_kv_events_destroy(kvio_kv_events_t *events)
{
    if (events == NULL)
        return;
    for (uint32_t r = 0; events->publishers != NULL && r < events->num_ranks; r++)
        if (events->publishers[r].socket != NULL)
            zmq_close(events->publishers[r].socket);
    if (events->context != NULL)
        zmq_ctx_term(events->context);
    free(events->publishers);
    free(events->topic);
    free(events);
}
