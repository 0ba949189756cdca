/* requests.csv and iterations.csv rows, formatted by hand (printf's float
 * path was a large share of a simulate run; the bytes are printf's), and an
 * iteration's trace events. */
#include "serve/serve_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void kvio_serve_trace_iteration_ids(kvio_event_trace_t *events, uint32_t rank,
                                    const kvio_engine_iteration_t *iteration,
                                    const uint64_t *ids, size_t num_ids, double host_bandwidth)
{
    if (events == NULL)
        return;
    kvio_event_iteration_t event = {
        .rank = rank, .start_ns = iteration->start_ns, .duration_ns = iteration->duration_ns,
        .batch_size = iteration->num_scheduled,
        .prefill_tokens = iteration->batch.prefill_tokens,
        .decode_seqs = iteration->batch.decode_seqs, .kv_usage = iteration->kv_usage,
        .running = iteration->running, .waiting = iteration->waiting,
        .preempted = iteration->num_preempted, .request_ids = ids, .num_request_ids = num_ids};
    kvio_event_trace_iteration(events, &event);
    if (iteration->swap_bytes > 0 && host_bandwidth > 0)
        kvio_event_trace_swap(events, rank, 1, iteration->start_ns,
                              (int64_t)((double)iteration->swap_bytes / host_bandwidth * 1e9),
                              (int64_t)iteration->swap_bytes, NULL, 0);
    if (iteration->tier_ns > 0)
        kvio_event_trace_tier(events, rank, "tiers", 0, iteration->start_ns, iteration->tier_ns,
                              (int64_t)iteration->tier_loaded_tokens, NULL, 0);
}

static char *append_unsigned(char *out, uint64_t value)
{
    return out + kvio_format_unsigned(out, value);
}

static char *append_fixed(char *out, double value, int decimals)
{
    return out + kvio_format_fixed(out, value, decimals);
}

/* The longest row: every %.6f at its longest (a double near DBL_MAX has
 * 309 digits before the point), with the integers. */
#define ROW_MAX 3072

/* Formats "%llu,%u,%.6f,%.6f,%.6f,%u,%u,%u,%u,%llu,%d,%.3f,%.3f,%.3f,%.3f" of a finished
 * request: the same bytes, formatted by hand (printf's float path was a
 * large share of a simulate run). */
int kvio_serve_request_row(const kvio_engine_finished_t *finished, char *text_p,
                           size_t text_len)
{
    char row[ROW_MAX];
    char *out = row;
    out = append_unsigned(out, finished->id);
    *out++ = ',';
    out = append_unsigned(out, finished->rank);
    *out++ = ',';
    out = append_fixed(out, finished->arrival_ns / 1e9, 6);
    *out++ = ',';
    out = append_fixed(out, finished->first_token_ns / 1e9, 6);
    *out++ = ',';
    out = append_fixed(out, finished->finish_ns / 1e9, 6);
    const unsigned long long counts[] = {finished->prompt_tokens, finished->output_tokens,
                                         finished->cached_tokens, finished->preemptions,
                                         finished->tag};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        *out++ = ',';
        out = append_unsigned(out, counts[i]);
    }
    *out++ = ',';
    *out++ = finished->measured ? '1' : '0';
    *out++ = ',';
    out = append_fixed(out, finished->kv_wait_ns / 1e6, 3);
    /* The request's latencies as vLLM counts them (TPOT empty for one
     * token), so a spreadsheet needs no subtraction. */
    double ttft_ms = ((double)finished->first_token_ns - (double)finished->arrival_ns) / 1e6;
    double e2el_ms = ((double)finished->finish_ns - (double)finished->arrival_ns) / 1e6;
    *out++ = ',';
    out = append_fixed(out, ttft_ms, 3);
    *out++ = ',';
    if (finished->output_tokens > 1)
        out = append_fixed(out, (e2el_ms - ttft_ms) / (finished->output_tokens - 1), 3);
    *out++ = ',';
    out = append_fixed(out, e2el_ms, 3);
    const kvio_pd_times_t *pd = &finished->pd;
    if (pd->prefill_rank > 0) {
        *out++ = ',';
        out = append_unsigned(out, pd->prefill_rank - 1);
        int64_t parts[KVIO_PD_TTFT_PARTS];
        kvio_pd_ttft_parts(finished, parts);
        for (size_t i = 0; i < KVIO_PD_TTFT_PARTS; i++) {
            *out++ = ',';
            out = append_fixed(out, parts[i] / 1e6, 3);
        }
        *out++ = ',';
        out = append_unsigned(out, finished->loaded_tokens);
    }
    const kvio_engine_received_t *received = &finished->received;
    if (received->frontend && !received->known) {
        memcpy(out, ",,,", 3); /* the front end's columns, not known here */
        out += 3;
    } else if (received->frontend) {
        *out++ = ',';
        out = append_fixed(out, received->first_byte_ns / 1e9, 6);
        *out++ = ',';
        out = append_fixed(out, finished->arrival_ns / 1e9, 6);
        *out++ = ',';
        out = append_fixed(out, (double)(received->taken_ns - finished->arrival_ns) / 1e6, 3);
    }
    int length = (int)(out - row);
    if (text_len > 0) {
        size_t copied = (size_t)length < text_len ? (size_t)length : text_len - 1;
        memcpy(text_p, row, copied);
        text_p[copied] = '\0';
    }
    return length;
}

int kvio_serve_request_control_row(const kvio_engine_finished_t *with,
                                   const kvio_engine_finished_t *without, char *text_p,
                                   size_t text_len, int at)
{
    char row[ROW_MAX];
    char *out = row;
    if (without == NULL) {
        memcpy(out, ",,,,,", 6);
        out += 6;
    } else {
        kvio_request_delta_t delta = kvio_request_delta(with, without);
        const double times_ms[] = {(double)delta.ttft_ns / 1e6, delta.tpot_ns / 1e6,
                                   (double)delta.e2el_ns / 1e6, (double)delta.max_itl_ns / 1e6};
        for (size_t i = 0; i < sizeof(times_ms) / sizeof(times_ms[0]); i++) {
            *out++ = ',';
            out = append_fixed(out, times_ms[i] == 0 ? 0 : times_ms[i], 6);
        }
        out += sprintf(out, ",%lld,%lld", (long long)delta.cached_tokens,
                       (long long)delta.recomputed_tokens);
    }
    int length = (int)(out - row);
    if (at >= 0 && (size_t)at < text_len) {
        size_t copied = (size_t)length < text_len - (size_t)at ? (size_t)length
                                                                 : text_len - (size_t)at - 1;
        memcpy(text_p + at, row, copied);
        text_p[at + (int)copied] = '\0';
    }
    return at + length;
}

/* "%.6f,%u,%.6f,%u,%llu,%llu,%.5f,%u,%u,%u,%llu", formatted by hand. */
void kvio_serve_iteration_row(kvio_csv_t *csv, uint32_t rank,
                              const kvio_engine_iteration_t *iteration)
{
    char row[ROW_MAX];
    char *out = row;
    out = append_fixed(out, iteration->start_ns / 1e9, 6);
    *out++ = ',';
    out = append_unsigned(out, rank);
    *out++ = ',';
    out = append_fixed(out, iteration->duration_ns / 1e6, 6);
    *out++ = ',';
    out = append_unsigned(out, iteration->num_scheduled);
    *out++ = ',';
    out = append_unsigned(out, iteration->batch.prefill_tokens);
    *out++ = ',';
    out = append_unsigned(out, iteration->batch.decode_seqs);
    *out++ = ',';
    out = append_fixed(out, iteration->kv_usage, 5);
    const unsigned long long counts[] = {iteration->running, iteration->waiting,
                                         iteration->num_preempted, iteration->swap_bytes};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        *out++ = ',';
        out = append_unsigned(out, counts[i]);
    }
    kvio_csv_line(csv, row, (size_t)(out - row));
}

kvio_status_t kvio_serve_open_csvs(kvio_results_t *results, bool with_pd, bool with_frontend,
                                   bool with_control, kvio_csv_t **requests_p,
                                   kvio_csv_t **iterations_p, char *error_p, size_t error_len)
{
    kvio_status_t status = KVIO_OK;
    char header[1024];
    snprintf(header, sizeof(header), "%s%s%s%s", KVIO_REQUESTS_CSV_HEADER,
             with_pd ? KVIO_REQUESTS_PD_HEADER : "",
             with_frontend ? KVIO_REQUESTS_FRONTEND_HEADER : "",
             with_control ? KVIO_REQUESTS_CONTROL_HEADER : "");
    if (requests_p != NULL)
        status = kvio_csv_open(results, "requests.csv", header, requests_p);
    if (status == KVIO_OK && iterations_p != NULL)
        status = kvio_csv_open(results, "iterations.csv", KVIO_ITERATIONS_CSV_HEADER,
                               iterations_p);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "%s: cannot write the CSV files: %s",
                 kvio_results_path(results), kvio_strerror(status));
    return status;
}

kvio_status_t kvio_serve_close_csvs(kvio_csv_t *requests, kvio_csv_t *iterations,
                                    kvio_status_t status, char *error_p, size_t error_len)
{
    char why[512] = "";
    kvio_status_t closed = kvio_csv_finish(requests, "requests.csv", why, sizeof(why));
    if (closed != KVIO_OK && status == KVIO_OK) {
        snprintf(error_p, error_len, "%s", why);
        status = closed;
    }
    closed = kvio_csv_finish(iterations, "iterations.csv", why, sizeof(why));
    if (closed != KVIO_OK && status == KVIO_OK) {
        snprintf(error_p, error_len, "%s", why);
        status = closed;
    }
    return status;
}

