/* Private to the cost model's files (serve/cost*.c): the cost model's
 * state, the engine profiles and the roofline's steps. */
#ifndef KVIO_SERVE_COST_INT_H
#define KVIO_SERVE_COST_INT_H

#include "kvio/cost.h"

/* A measured grid for the table form. */
typedef struct cost_table {
    double *axes[3];
    size_t sizes[3];
    double *times_ms; /* [prefill][decode][context] */
} cost_table_t;

/* An engine profile (serve/cost_engines.c): how the engine runs a step and
 * which decode batch sizes it captures as CUDA graphs. Captured sizes: the
 * powers of two up to pow2_max, then multiples of step[0] up to until[0],
 * then of step[1] up to the largest (cudagraph_max_batch). */
typedef struct cost_engine {
    const char *name, *description;
    kvio_cost_params_t params;
    uint32_t pow2_max, step[2], until[2];
} cost_engine_t;

struct kvio_cost {
    kvio_cost_config_t config;
    kvio_model_t model;
    kvio_gpu_t gpu;
    kvio_cost_params_t params;  /* the profile's, with the config's overrides */
    const cost_engine_t *engine;
    double matmul_peak;         /* FLOP/s of the matmuls' format */
    cost_table_t table;
};

/* The profile of an engine (kvio_cost_engine_t), never NULL for a valid one. */
const cost_engine_t *cost_engine_find(int engine);

/* The decode batch a CUDA graph of engine replays for tokens tokens: the
 * smallest captured size that holds them, 0 when none does (the step runs
 * without a full graph). */
uint64_t cost_engine_graph_batch(const cost_engine_t *engine, int64_t max_batch,
                                 uint64_t tokens);

/* The roofline form of one iteration (serve/cost_roofline.c). */
void cost_roofline(const kvio_cost_t *cost, const kvio_batch_t *batch,
                   kvio_cost_breakdown_t *out);

#endif
