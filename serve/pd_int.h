/* Prefill/decode disaggregation inside the serve loop: the hand-off from
 * prefill lanes to decode lanes (serve/pd.c, the loop's intake), its
 * statistics and figures, the KV link of emulate (serve/pd_link.c) and an
 * emulate P/D rank's side (serve/pd_emulate.c). The loop does not know
 * P/D: it calls the intake a P/D run gives it. */
#ifndef KVIO_SERVE_PD_INT_H
#define KVIO_SERVE_PD_INT_H

#include "serve/loop_int.h"

/* ---------- prefill/decode disaggregation (serve/pd.c) ---------- */

typedef struct kvio_serve_pd kvio_serve_pd_t;

typedef struct kvio_serve_pd_params {
    const kvio_pd_config_t *config;
    kvio_serve_lane_t *const *lanes; /* num_prefill prefill lanes, then num_decode decode
                                        lanes, their engines created (borrowed) */
    uint32_t num_prefill, num_decode;
    kvio_tier_t *const *peers;       /* per decode lane: its load-only tier of the prefill
                                        ranks' blocks (the last of its engine's tiers) */
    uint32_t block_size;
    uint64_t kv_bytes_per_token;
    uint32_t layers;                 /* the model's (layer-wise transfers) */
    double bandwidth;                /* the link's model (reported) */
    int64_t latency_ns;
    /* Emulate: a prefill's end goes to send (the request as its decode
     * takes it, handoff set; the prefill's times; its finish, with its
     * blocks) instead of a decode lane of this loop (num_decode 0). */
    kvio_status_t (*send)(void *context, const kvio_engine_request_t *decode,
                          const kvio_pd_times_t *times, const kvio_engine_finished_t *finished);
    void *send_context;
} kvio_serve_pd_params_t;

/* What the KV transfers did, summed over the decodes' finished requests
 * (simulate: as they finish; emulate: as rank 0 merges them). */
typedef struct kvio_pd_stats {
    uint32_t block_size;
    uint64_t kv_bytes_per_token;
    kvio_hist_t *transfer_ns;   /* per transfer that moved bytes: admission to the load's end */
    kvio_hist_t *transfer_mbps; /* its bytes over that time */
    uint64_t handoffs, transfers, transfer_bytes;
    uint64_t local_prefills;    /* prefilled on their decode rank (local_prefill_tokens) */
    uint64_t decode_hit_tokens; /* prompt tokens a decode pool held: not moved */
    uint64_t recomputed_tokens; /* prompt tokens a decode rank computed again */
    uint64_t checksum_failures; /* blocks that came over changed (emulate) */
    uint64_t verified_blocks;   /* blocks that came over and matched their checksum (emulate) */
    int64_t ttft_parts_ns[KVIO_PD_TTFT_PARTS]; /* measured requests: TTFT's parts, summed */
    uint64_t measured;
} kvio_pd_stats_t;

kvio_status_t kvio_pd_stats_init(kvio_pd_stats_t *stats, uint32_t block_size,
                                 uint64_t kv_bytes_per_token);
void kvio_pd_stats_fini(kvio_pd_stats_t *stats);
/* A decode's finished request (finished->pd filled in). */
void kvio_pd_stats_add(kvio_pd_stats_t *stats, const kvio_engine_finished_t *finished);
/* finished->pd from the prefill's times and the decode's own record. */
void kvio_pd_fill_times(kvio_engine_finished_t *finished, const kvio_pd_times_t *prefill);

/* One pool's ranks summed: their prefix hits and busy time. */
typedef struct kvio_pd_pool {
    uint32_t ranks;
    uint64_t prefix_hits, prefix_queries;
    int64_t busy_ns;
} kvio_pd_pool_t;
void kvio_pd_pool_add(kvio_pd_pool_t *pool, const kvio_engine_metrics_t *metrics);

/* The link as metrics.pd reports it (bandwidth 0: measured, not modelled). */
typedef struct kvio_pd_link_info {
    double bandwidth;
    int64_t latency_ns;
    const char *router;
} kvio_pd_link_info_t;

/* The pd figures (metrics.pd): the section's choices, the link, the
 * transfers, each pool's hits and utilisation over run_ns, TTFT's parts. */
void kvio_pd_fill(kvio_result_t *result, const kvio_pd_config_t *config,
                  const kvio_pd_link_info_t *link, const kvio_pd_stats_t *stats,
                  const kvio_pd_pool_t *prefill, const kvio_pd_pool_t *decode, int64_t run_ns);

kvio_status_t kvio_serve_pd_create(const kvio_serve_pd_params_t *params, kvio_serve_pd_t **pd_p);
void kvio_serve_pd_destroy(kvio_serve_pd_t *pd);
/* The loop's intake: pd takes its prefill lanes' requests, each kept whole
 * and its prompt with one output token queued on the lane's engine (or,
 * under local_prefill_tokens, the whole request on its decode lane when
 * that lacks little of it). */
kvio_serve_intake_t kvio_serve_pd_intake(kvio_serve_pd_t *pd);
/* A prefill lane's engine finished the request's prefill: its KV is handed
 * to the decode lane the router picks, and the request queued there. */
kvio_status_t kvio_serve_pd_prefilled(kvio_serve_pd_t *pd, kvio_serve_loop_t *loop,
                                      const kvio_engine_finished_t *finished);
/* A decode lane's engine finished the request: finished->pd is filled in
 * and the transfer counted. */
void kvio_serve_pd_decoded(kvio_serve_pd_t *pd, kvio_engine_finished_t *finished);
/* What failed (names the request); "" when nothing did. */
const char *kvio_serve_pd_error(const kvio_serve_pd_t *pd);
/* The pd figures of a simulate run (kvio_pd_fill): the transfers, their
 * times and bandwidth, the decode-side hits, each pool's utilisation over
 * run_ns, TTFT's parts. */
void kvio_serve_pd_fill(kvio_result_t *result, const kvio_serve_pd_t *pd, int64_t run_ns);

/* The P/D KV link of emulate (serve/pd_link.c): prefill ranks' outboxes
 * (UCX-mapped host staging) and decode ranks' gets from them. A block's
 * location is its prefill rank (world) and byte offset in that outbox. */
typedef struct kvio_pd_link kvio_pd_link_t;

#define KVIO_PD_LOCATION(rank, offset) (((uint64_t)(rank) << 48) | (uint64_t)(offset))
#define KVIO_PD_LOCATION_RANK(location) ((int)((location) >> 48))
#define KVIO_PD_LOCATION_OFFSET(location) ((location) & ((1ull << 48) - 1))

/* Collective over every rank of rte: a rank with outbox_bytes > 0 maps a
 * staging region of that size (pull: a prefill rank's outbox; push: a
 * decode rank's inbox), a rank that connects reaches every region (pull:
 * a decode rank; push: a prefill rank), any other rank only takes part. */
kvio_status_t kvio_pd_link_create(kvio_rte_t *rte, bool connect, uint64_t outbox_bytes,
                                  kvio_pd_link_t **link_p, char *error_p, size_t error_len);
void kvio_pd_link_destroy(kvio_pd_link_t *link);
/* A prefill rank torn down before its decode ranks read all it sent (a
 * stopped or failed run): its outbox in this process stays mapped, since a
 * decode rank's thread may still be reading it. */
void kvio_pd_link_keep_outbox(kvio_pd_link_t *link);
/* Whether every region this rank reaches is mapped into this process, and
 * where the block at location is then (this rank's own region: always). */
bool kvio_pd_link_mapped(const kvio_pd_link_t *link);
void *kvio_pd_link_address(const kvio_pd_link_t *link, uint64_t location);
/* Push over UCX where the region is not mapped: bytes from data to
 * location, waited for (put and flush) while its rank lives. */
kvio_status_t kvio_pd_link_put(kvio_pd_link_t *link, uint64_t location, const void *data,
                               uint64_t bytes, char *error_p, size_t error_len);
/* Moves what the worker has to move (a prefill rank's, between iterations). */
void kvio_pd_link_progress(kvio_pd_link_t *link);
/* A decode rank reads count blocks of block_bytes from their locations into
 * data[i], and waits for them while their prefill ranks live; each one's
 * status into statuses_p[i], the failure's text in error_p. */
void kvio_pd_link_fetch(kvio_pd_link_t *link, const uint64_t *locations, void *const *data,
                        size_t count, uint64_t block_bytes, kvio_status_t *statuses_p,
                        char *error_p, size_t error_len);

/* An emulate P/D serve rank's side (serve/pd_emulate.c): a prefill rank
 * stages each finished prompt's blocks in its outbox and posts the request
 * to a decode rank; a decode rank takes those handoffs as its arrivals,
 * loads the blocks its pool lacks through its peer tier, and lets the
 * prefill rank free them once the request made its first token. */
typedef struct kvio_serve_pd_rank_params {
    const kvio_serve_run_t *run;   /* run->rte, num_prefill, pd */
    uint32_t serve_index;
    kvio_serve_lane_t *lane;       /* the rank's one lane (its engine made later) */
    uint64_t block_bytes;
    uint32_t block_size;
    const unsigned char *pool;     /* prefill: its KV pool's memory */
    struct kvio_device *device;    /* the pool is GPU memory of this domain (NULL: host) */
    uint32_t staging_blocks;       /* each prefill rank's outbox, in blocks */
    kvio_tier_t *const *tiers;     /* decode: the rank's own tiers */
    size_t num_tiers;
} kvio_serve_pd_rank_params_t;

/* Collective over the run's ranks (the P/D link). */
kvio_status_t kvio_serve_pd_rank_create(const kvio_serve_pd_rank_params_t *params,
                                        kvio_serve_pd_rank_t **pdr_p, char *error_p,
                                        size_t error_len);
void kvio_serve_pd_rank_destroy(kvio_serve_pd_rank_t *pdr);
bool kvio_serve_pd_rank_prefills(const kvio_serve_pd_rank_t *pdr);
/* Decode: the tiers its engine gets (its own, then the peer tier last). */
void kvio_serve_pd_rank_tiers(const kvio_serve_pd_rank_t *pdr, kvio_tier_t *const **tiers_p,
                              size_t *count_p);
/* Hooks the rank into its loop: its chores; a prefill rank's pd, a decode
 * rank's arrival source. */
void kvio_serve_pd_rank_attach(kvio_serve_pd_rank_t *pdr, kvio_serve_loop_t *loop);
/* The engine observer's calls: a prefill's end; a decode's tokens and end
 * (finished->pd filled in). */
void kvio_serve_pd_rank_prefilled(kvio_serve_pd_rank_t *pdr,
                                  const kvio_engine_finished_t *finished);
void kvio_serve_pd_rank_tokens(kvio_serve_pd_rank_t *pdr, uint64_t id, uint32_t generated);
void kvio_serve_pd_rank_decoded(kvio_serve_pd_rank_t *pdr, kvio_engine_finished_t *finished);
/* After the loop: a prefill rank tells the decode ranks it has ended and
 * waits until they have read all it sent. */
kvio_status_t kvio_serve_pd_rank_finish(kvio_serve_pd_rank_t *pdr);
const char *kvio_serve_pd_rank_error(const kvio_serve_pd_rank_t *pdr);

#endif
