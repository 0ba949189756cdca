/* Private to xfer/: the ucx transport's set-up (context, worker, endpoints,
 * active-message notices and acks, bounded waits), which the GPU transports
 * reuse rather than duplicate: staged puts its chunks and cuda-ipc sends its
 * notices over it. A plug-in that reuses it starts its private state with a
 * kvio_ucx_t, so the shared ops (notify, wait_credit, poll, ack, progress)
 * work on its xfer->priv unchanged. */
#ifndef KVIO_XFER_UCX_INT_H
#define KVIO_XFER_UCX_INT_H

#include "xfer/xfer_int.h"

#include <ucp/api/ucp.h>

/* Active-message ids; plug-ins add theirs from KVIO_UCX_AM_USER. */
#define KVIO_UCX_AM_UPDATE 11
#define KVIO_UCX_AM_ACK 12
#define KVIO_UCX_AM_CHAIN 13
#define KVIO_UCX_AM_LANDED 14
#define KVIO_UCX_AM_USER 15
#define KVIO_UCX_QUEUE_LENGTH 64
#define KVIO_UCX_CHAIN_MAX_RECEIVERS 256

/* What travels down a chain (xfer_chain_ucx.c), here so that a test can
 * send one that is wrong. */
typedef struct kvio_ucx_chain_message {
    kvio_xfer_meta_t meta;       /* t_xfer_start/end_ns: this hop's first put and the flush
                                    that made bytes_ready true */
    uint64_t bytes_ready;        /* a prefix of this length is in the receiver's slot */
    uint64_t slot_bits[KVIO_UCX_CHAIN_MAX_RECEIVERS / 64]; /* bit i: receiver i's slot */
} kvio_ucx_chain_message_t;

/* Sent during a sequential put (ucx_put) each time a flush has made more of
 * the version certain to be in the receiver's slot. */
typedef struct kvio_ucx_landed_message {
    uint64_t magic;   /* KVIO_XFER_MAGIC */
    uint64_t version;
    uint64_t bytes;   /* [0, bytes) of the slot are in place */
    uint32_t slot;
    uint32_t unused;
} kvio_ucx_landed_message_t;

/* The sender's side of those messages while one put is under way. */
typedef struct kvio_ucx_landing {
    uint64_t posted;       /* bytes whose puts are posted */
    uint64_t flush_target; /* what the flush in flight covers */
    uint64_t flushed;      /* bytes at the receiver */
    uint64_t announced;    /* bytes the receiver was told of */
    bool stored;           /* stores through the mapped slot: what is posted is in */
    bool flushing;         /* a flush is in flight */
    bool sending;          /* message is in flight */
    ucs_status_t error;    /* a flush or message failed */
    kvio_ucx_landed_message_t message;
} kvio_ucx_landing_t;

typedef struct kvio_ucx_remote_slots {
    uint64_t address[2];
    ucp_rkey_h rkey[2];
    void *mapped[2]; /* sender: the slot mapped into this process by UCX (shared
                        memory, ucp_rkey_ptr), NULL where it cannot be */
} kvio_ucx_remote_slots_t;

typedef struct kvio_ucx {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h *eps;            /* by rank; NULL where not connected */
    int size;
    uint64_t memory_types;    /* ucp_context_query: UCS_BIT(UCS_MEMORY_TYPE_*) */
    ucp_mem_h memory[2];      /* receiver: slots; sender: [0] the send buffer */
    void *owned[2];           /* those of memory[] kvio allocated itself (ranks in one
                                 address space: huge pages, kvio_fault_in_alloc) */
    kvio_ucx_remote_slots_t *remote; /* sender: per receiver */
    kvio_ucx_landing_t landing;      /* sender: the put under way */
    kvio_ucx_landed_message_t landed; /* receiver: the newest landed message */
    uint64_t noticed_version;         /* receiver: the newest version noticed */
    kvio_ucx_remote_slots_t next;    /* chain, receiver: the next receiver's slots */
    struct kvio_ucx_chain *chain;    /* fanout: chain (xfer_chain_ucx.c); NULL otherwise */
    uint64_t *acked;          /* sender: newest version handled, per receiver */
    uint32_t *free_slot;      /* sender: slot each receiver has free */
    kvio_xfer_meta_t queue[KVIO_UCX_QUEUE_LENGTH]; /* receiver: notices not yet polled */
    int queue_head, queue_count;
    int inflight;
    ucs_status_t request_error;
    bool queue_overflow;
} kvio_ucx_t;

/* Queues a notice for the receiver's poll; false when the queue is full. */
bool kvio_xfer_ucx_queue_push(kvio_ucx_t *ucx, const kvio_xfer_meta_t *meta);

/* Creates the context (and reads its memory types), the worker and the
 * notice/ack handlers; sender: per-receiver credit state. */
kvio_status_t kvio_xfer_ucx_open(kvio_xfer_t *xfer);

/* Collective: allgathers worker addresses and each rank's blob (may be
 * empty), connects the sender to every receiver and each receiver to the
 * sender (fanout: chain, also to the next receiver; buckets on a chain or
 * tree route, also to the receivers it forwards to). blobs_p and lengths_p
 * get every rank's blob (kvio_rte_blobs_free). */
kvio_status_t kvio_xfer_ucx_connect(kvio_xfer_t *xfer, const void *blob, size_t length,
                                    void ***blobs_p, size_t **lengths_p);

/* Frees what open, connect and map made (rkeys in remote too). */
void kvio_xfer_ucx_close(kvio_xfer_t *xfer);

/* True when this UCX can put to and from CUDA memory. */
bool kvio_xfer_ucx_takes_cuda(const kvio_ucx_t *ucx);

/* Maps bytes for puts: address NULL allocates host memory (UCX 1.13
 * emulates puts into malloc'd memory), else registers address of
 * memory_type. */
kvio_status_t kvio_xfer_ucx_map(kvio_xfer_t *xfer, void *address, uint64_t bytes,
                                ucs_memory_type_t memory_type, ucp_mem_h *memory_p,
                                void **address_p);

/* Packs [u64 address0, u64 address1, u64 length0, rkey0, rkey1] of
 * memory[0..1] at addresses; unpacks one into remote (sender side). */
kvio_status_t kvio_xfer_ucx_pack_slots(kvio_xfer_t *xfer, void *address0, void *address1,
                                       void **blob_p, size_t *length_p);
kvio_status_t kvio_xfer_ucx_unpack_slots(kvio_xfer_t *xfer, int rank, const void *blob,
                                         size_t length, kvio_ucx_remote_slots_t *remote_p);

/* Puts length bytes from local to remote on rank in chunk-sized pieces with
 * the configured number in flight, then flushes: the bytes are at the
 * target when it returns. Counts chunks for fault injection. */
kvio_status_t kvio_xfer_ucx_put_region(kvio_xfer_t *xfer, int rank, const void *local,
                                       uint64_t remote, ucp_rkey_h rkey, uint64_t length,
                                       uint64_t chunk);

/* Waits until everything put to rank is complete there (and the connection
 * to it is set up). */
kvio_status_t kvio_xfer_ucx_flush(kvio_xfer_t *xfer, int rank);

/* Sends an eager active message and waits until it left. */
kvio_status_t kvio_xfer_ucx_send_am(kvio_xfer_t *xfer, int rank, unsigned id,
                                    const void *data, size_t length);

/* Installs a handler for id with arg. */
kvio_status_t kvio_xfer_ucx_set_handler(kvio_ucx_t *ucx, unsigned id,
                                        ucp_am_recv_callback_t callback, void *arg);

/* Progresses until done(arg), for as long as peer lives (however slowly it
 * moves); what names the wait in the error ("a slot for version 3 from"). */
kvio_status_t kvio_xfer_ucx_wait(kvio_xfer_t *xfer, bool (*done)(void *arg), void *arg,
                                 int peer, const char *what);

/* Chain fan-out (xfer_chain_ucx.c): the sender puts only into the first
 * receiver; every receiver forwards each piece to the next once it knows
 * the piece is in its slot. Set-up after connect (the next receiver's slots
 * are in priv->next); freed by kvio_xfer_ucx_close. */
kvio_status_t kvio_xfer_ucx_chain_init(kvio_xfer_t *xfer);
/* The chain op: moves meta's version (or, with KVIO_XFER_META_END, the end
 * notice) into the first receiver and returns when it is there. */
kvio_status_t kvio_xfer_ucx_chain(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta);
/* Receiver: takes what arrived from upstream, forwards, queues notices;
 * returns the chain's first error (a dead or silent neighbour). */
kvio_status_t kvio_xfer_ucx_chain_progress(kvio_xfer_t *xfer);
/* Receiver: the version coming down the chain whose notice is not yet
 * queued, and the prefix of it in this receiver's slot (the landed op). */
kvio_status_t kvio_xfer_ucx_chain_landed(kvio_xfer_t *xfer, kvio_xfer_landed_t *landed_p);

/* The shared ops. */
kvio_status_t kvio_xfer_ucx_notify(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta);
kvio_status_t kvio_xfer_ucx_wait_credit(kvio_xfer_t *xfer, int target, kvio_xfer_meta_t *meta);
kvio_status_t kvio_xfer_ucx_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p);
kvio_status_t kvio_xfer_ucx_ack(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta);
void kvio_xfer_ucx_progress(kvio_xfer_t *xfer);

#endif
