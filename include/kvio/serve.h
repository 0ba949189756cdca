/* Serve ranks as a whole: the `serve:` section (engine, scheduler, KV cache,
 * router, closed-loop concurrency), the router that spreads requests over
 * serve ranks, and the simulate-mode driver that runs a stream through them
 * on a virtual clock and reports the serving metrics. */
#ifndef KVIO_SERVE_H
#define KVIO_SERVE_H

#include "kvio/config.h"
#include "kvio/cost.h"
#include "kvio/engine.h"
#include "kvio/events.h"
#include "kvio/results.h"
#include "kvio/sched.h"
#include "kvio/status.h"
#include "kvio/stream.h"

#include <jansson.h>
#include <signal.h>
#include <stdint.h>

typedef enum {
    KVIO_ROUTER_ROUND_ROBIN = 0,
    KVIO_ROUTER_LEAST_LOADED,
    KVIO_ROUTER_PREFIX_AFFINITY,
    KVIO_ROUTER_KV_COST,
} kvio_router_kind_t;

typedef struct kvio_router_config {
    int policy;       /* kvio_router_kind_t */
    int64_t load_cap; /* prefix_affinity: most requests a rank may be above the least loaded */
} kvio_router_config_t;

/* The `serve:` section. */
typedef struct kvio_serve_config {
    kvio_engine_config_t engine;
    kvio_sched_config_t scheduler;
    kvio_kvcache_section_t kvcache;
    kvio_router_config_t router;
    int64_t max_concurrency; /* 0: open loop (the stream's arrival times) */
} kvio_serve_config_t;

extern const kvio_opt_t kvio_serve_options[];

/* The `slo:` section (goodput counts requests that meet every bound). */
typedef struct kvio_slo_config {
    int64_t ttft_ns;
    int64_t tpot_ns;
} kvio_slo_config_t;

extern const kvio_opt_t kvio_slo_options[];

/* ---------- router ---------- */

typedef struct kvio_router kvio_router_t;

kvio_status_t kvio_router_create(const kvio_router_config_t *config, kvio_router_t **router_p);
void kvio_router_destroy(kvio_router_t *router);
const char *kvio_router_name(const kvio_router_t *router);

/* Picks the serve rank for a request from the engines' current state. */
uint32_t kvio_router_choose(kvio_router_t *router, kvio_engine_t *const *engines,
                            uint32_t num_engines, const kvio_engine_request_t *request);

/* ---------- simulate-mode driver ---------- */

typedef struct kvio_serve_run {
    const kvio_serve_config_t *serve;
    const kvio_model_t *model;      /* resolved */
    const kvio_gpu_t *gpu;          /* resolved */
    const kvio_cost_config_t *cost;
    uint32_t num_ranks;
    uint64_t seed;
    kvio_slo_t slo;
    int64_t warmup_ns;              /* requests arriving earlier are not measured */
    int64_t warmup_requests;        /* the first N requests are not measured */
    kvio_stream_t *stream;          /* borrowed; drained */
    kvio_results_t *results;        /* borrowed; requests.csv and iterations.csv (may be NULL) */
    volatile sig_atomic_t *stop;    /* set asynchronously to stop early (may be NULL) */
    kvio_event_trace_t *events;     /* borrowed; one event per iteration and swap (may be NULL) */
} kvio_serve_run_t;

/* KV blocks per serve rank from the kvcache section, model and GPU (blocks,
 * capacity, or GPU memory after the weights), with the error's numbers. */
kvio_status_t kvio_serve_kv_blocks(const kvio_serve_config_t *serve, const kvio_model_t *model,
                                   const kvio_gpu_t *gpu, int64_t tensor_parallel,
                                   uint32_t *blocks_p, char *error_p, size_t error_len);

/* Runs the stream through num_ranks engines on a virtual clock until every
 * request finished. *metrics_p receives the serving metrics as JSON (caller
 * owns); *complete_p is false when stopped early. */
kvio_status_t kvio_serve_simulate(const kvio_serve_run_t *run, json_t **metrics_p,
                                  bool *complete_p, char *error_p, size_t error_len);

/* Metrics of merged engine measurements as JSON (TTFT, TPOT, ITL, E2EL in ms
 * with mean/p50/p90/p99, throughputs, goodput, prefix cache, preemptions). */
json_t *kvio_serve_metrics_json(const kvio_engine_metrics_t *metrics);

#endif
