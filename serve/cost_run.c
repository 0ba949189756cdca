/* What a benchmark's batch costs by the cost model: batch_size requests of
 * input_tokens each, prefilled in chunks as vLLM's scheduler takes them
 * (running requests' decodes first, then prompt chunks in order, within
 * the step's token budget), then decoded to output_tokens. vllm bench
 * latency, SGLang's bench_one_batch and a serving benchmark at concurrency
 * 1 measure such runs: kvio fit and the published-measurement table
 * predict them here. */
#include "serve/cost_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* One request of the run: its prompt tokens in the KV cache, its tokens
 * generated, and what the step being costed holds of it. */
typedef struct run_request {
    uint64_t prefilled, generated, scheduled;
} run_request_t;

/* Schedules one step of the run into batch; true when it holds prefill
 * tokens. The decodes of requests past their prompt come first, one token
 * each, then prompt chunks in order until the budget is spent. */
static bool schedule_step(const kvio_cost_run_shape_t *shape, run_request_t *requests,
                          kvio_batch_t *batch)
{
    uint64_t budget = shape->chunk > 0 ? shape->chunk : UINT64_MAX;
    for (uint64_t r = 0; r < shape->batch_size; r++) {
        run_request_t *request = &requests[r];
        request->scheduled = 0;
        if (budget > 0 && request->prefilled == shape->input_tokens &&
            request->generated > 0 && request->generated < shape->output_tokens) {
            kvio_batch_add_decode(batch, shape->input_tokens + request->generated - 1);
            request->scheduled = 1;
            budget--;
        }
    }
    for (uint64_t r = 0; r < shape->batch_size && budget > 0; r++) {
        run_request_t *request = &requests[r];
        uint64_t left = shape->input_tokens - request->prefilled;
        if (left == 0)
            continue;
        request->scheduled = left < budget ? left : budget;
        kvio_batch_add_prefill(batch, request->scheduled, request->prefilled);
        budget -= request->scheduled;
    }
    return batch->prefill_tokens > 0;
}

/* Advances the requests past the step just costed: a decode generated a
 * token, a prompt's last chunk sampled its first. */
static void complete_step(const kvio_cost_run_shape_t *shape, run_request_t *requests)
{
    for (uint64_t r = 0; r < shape->batch_size; r++) {
        run_request_t *request = &requests[r];
        if (request->scheduled == 0)
            continue;
        if (request->prefilled == shape->input_tokens) {
            request->generated++;
        } else {
            request->prefilled += request->scheduled;
            if (request->prefilled == shape->input_tokens)
                request->generated = 1;
        }
    }
}

void kvio_cost_run(const kvio_cost_t *cost, const kvio_cost_run_shape_t *shape,
                   kvio_cost_run_t *run_p)
{
    kvio_cost_run_t run = {0};
    run_request_t *requests = calloc(shape->batch_size > 0 ? shape->batch_size : 1,
                                     sizeof(*requests));
    if (requests == NULL || shape->batch_size == 0 || shape->input_tokens == 0 ||
        shape->output_tokens == 0) {
        free(requests);
        *run_p = run;
        return;
    }
    double decode_s = 0;
    uint64_t decode_steps = 0, first_tokens = 0;
    for (;;) {
        kvio_batch_t batch = {0};
        bool prefill = schedule_step(shape, requests, &batch);
        if (batch.prefill_tokens == 0 && batch.decode_seqs == 0)
            break;
        kvio_cost_breakdown_t step;
        kvio_cost_iteration(cost, &batch, &step);
        run.total_s += step.time_s;
        complete_step(shape, requests);
        if (prefill) {
            first_tokens = 0;
            for (uint64_t r = 0; r < shape->batch_size; r++)
                first_tokens += requests[r].generated > 0;
            if (first_tokens == shape->batch_size && run.prefill_s == 0)
                run.prefill_s = run.total_s;
        } else {
            decode_s += step.time_s;
            decode_steps++;
        }
    }
    run.decode_s = decode_steps > 0 ? decode_s / (double)decode_steps : 0;
    free(requests);
    *run_p = run;
}

double kvio_cost_run_metric(const kvio_cost_t *cost, const kvio_cost_run_shape_t *shape,
                            int metric)
{
    kvio_cost_run_t run;
    kvio_cost_run(cost, shape, &run);
    switch (metric) {
    case KVIO_POINT_TOTAL_MS: return run.total_s * 1e3;
    case KVIO_POINT_TTFT_MS:
        return (run.prefill_s + (double)cost->params.request_overhead_ns / 1e9) * 1e3;
    case KVIO_POINT_DECODE_MS: return run.decode_s * 1e3;
    case KVIO_POINT_PREFILL_MS: return run.prefill_s * 1e3;
    default:
        return run.prefill_s > 0
                   ? (double)(shape->batch_size * shape->input_tokens) / run.prefill_s
                   : 0;
    }
}

kvio_status_t kvio_cost_check_run_shape(const kvio_cost_run_shape_t *shape, const char *where,
                                        char *error_p, size_t error_len)
{
    const char *what = shape->batch_size < 1 || shape->batch_size > 65536 ? "batch size"
                       : shape->input_tokens < 1 || shape->input_tokens > 10000000
                           ? "prompt length"
                       : shape->output_tokens < 1 || shape->output_tokens > 1000000
                           ? "output length"
                       : (double)shape->batch_size *
                                 (double)(shape->input_tokens + shape->output_tokens) >
                               1e8
                           ? "batch size x (prompt + output)"
                           : NULL;
    if (what == NULL)
        return KVIO_OK;
    snprintf(error_p, error_len,
             "%s: a run of %llu x (%llu in, %llu out): the %s is out of range (at most 65,536 "
             "requests, 10 M prompt and 1 M output tokens each, 100 M tokens in all)", where,
             (unsigned long long)shape->batch_size, (unsigned long long)shape->input_tokens,
             (unsigned long long)shape->output_tokens, what);
    return KVIO_ERR_INVALID;
}
