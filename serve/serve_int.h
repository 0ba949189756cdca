/* Private to serve/: preset tables of model shapes and GPU specs. */
#ifndef KVIO_SERVE_INT_H
#define KVIO_SERVE_INT_H

#include "kvio/cost.h"
#include "kvio/engine.h"
#include "kvio/events.h"
#include "kvio/results.h"
#include "kvio/stream.h"

/* Returns the preset called name, or NULL (borrowed, static). */
const kvio_model_t *kvio_model_preset_find(const char *name);
const kvio_gpu_t *kvio_gpu_preset_find(const char *name);

/* Writes "a, b, c" of the known preset names. */
void kvio_model_preset_names(char *text_p, size_t text_len);
void kvio_gpu_preset_names(char *text_p, size_t text_len);

/* Column names of requests.csv and iterations.csv, and one row of each. */
#define KVIO_REQUESTS_CSV_HEADER                                                            \
    "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,"  \
    "preemptions,model_version,measured"
#define KVIO_ITERATIONS_CSV_HEADER                                                          \
    "time_s,rank,duration_ms,batch_size,prefill_tokens,decode_seqs,kv_usage,running,"     \
    "waiting,preempted,swap_bytes"

/* Formats a requests.csv row (no newline) into text_p; returns its length. */
int kvio_serve_request_row(const kvio_engine_finished_t *finished, char *text_p,
                           size_t text_len);
void kvio_serve_iteration_row(kvio_csv_t *csv, uint32_t rank,
                              const kvio_engine_iteration_t *iteration);

/* Opens requests.csv and iterations.csv in results (either may be skipped by
 * passing NULL). */
kvio_status_t kvio_serve_open_csvs(kvio_results_t *results, kvio_csv_t **requests_p,
                                   kvio_csv_t **iterations_p, char *error_p, size_t error_len);

/* A growable buffer of block hashes, reused request after request. */
typedef struct kvio_hash_buffer {
    kvio_hash_t *hashes;
    size_t capacity;
} kvio_hash_buffer_t;

/* Turns a stream request into an engine request: hashes of the full blocks
 * of its prompt and output go into buffer (the engine copies them). */
kvio_status_t kvio_serve_engine_request(const kvio_request_t *request, uint32_t block_size,
                                        int64_t arrival_ns, bool measured, uint64_t tag,
                                        kvio_hash_buffer_t *buffer,
                                        kvio_engine_request_t *engine_request_p);

/* One trace event for an iteration of engine (and one for its swaps). */
void kvio_serve_trace_iteration(kvio_event_trace_t *events, const kvio_engine_t *engine,
                                uint32_t rank, const kvio_engine_iteration_t *iteration,
                                double host_bandwidth);

#endif
