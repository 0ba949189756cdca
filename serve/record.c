/* What serve ranks record as they serve, as data: every finished request,
 * every iteration (with the first request ids of its batch when an event
 * trace wants them) and the requests finished per model version; and how
 * requests.csv, iterations.csv and the iteration events are rendered from
 * it, for one loop's lanes or the merged reports of many ranks. */
#include "serve/loop_int.h"

#include <stdlib.h>
#include <string.h>

#include "kvio/array.h"

/* ---------- recording ---------- */

void kvio_serve_record_finished(kvio_serve_recorder_t *recorder,
                                const kvio_engine_finished_t *finished)
{
    if (finished->tag >= recorder->num_versions) {
        size_t count = finished->tag + 16;
        uint64_t *bigger = realloc(recorder->served, count * sizeof(*bigger));
        if (bigger == NULL) {
            recorder->status = KVIO_ERR_NOMEM;
            return;
        }
        memset(bigger + recorder->num_versions, 0,
               (count - recorder->num_versions) * sizeof(*bigger));
        recorder->served = bigger;
        recorder->num_versions = count;
    }
    recorder->served[finished->tag]++;
    kvio_serve_samples_add(recorder->samples, finished);
    /* A row not written (a full disk) is the CSV's first error, named when
     * it is closed. */
    if (recorder->rows.on && recorder->rows.requests != NULL)
        (void)kvio_serve_render_requests(recorder->rows.requests, finished, 1,
                                         recorder->rows.control);
    if (recorder->rows.on && !recorder->rows.keep)
        return;
    if (kvio_array_reserve((void **)&recorder->finished, &recorder->finished_capacity,
                           recorder->num_finished + 1, sizeof(*recorder->finished),
                           1024) != KVIO_OK) {
        recorder->status = KVIO_ERR_NOMEM;
        return;
    }
    kvio_engine_finished_t *kept = &recorder->finished[recorder->num_finished++];
    *kept = *finished;
    kept->block_ids = NULL; /* freed once on_finish returns */
    kept->num_block_ids = 0;
}

void kvio_serve_record_iteration(kvio_serve_recorder_t *recorder, uint32_t rank,
                                 const kvio_engine_t *engine,
                                 const kvio_engine_iteration_t *iteration)
{
    const kvio_engine_scheduled_t *items = NULL;
    size_t count = 0;
    kvio_engine_last_scheduled(engine, &items, &count);
    uint32_t num_ids = 0;
    if (recorder->with_ids)
        num_ids = count < KVIO_EVENT_MAX_REQUEST_IDS ? (uint32_t)count
                                                     : KVIO_EVENT_MAX_REQUEST_IDS;
    size_t size = sizeof(kvio_serve_iteration_record_t) + num_ids * sizeof(uint64_t);
    if (recorder->rows.on) {
        /* Rendered now, as render_iteration renders a record, from the
         * iteration itself (no record made and read back). */
        if (recorder->rows.iterations != NULL)
            kvio_serve_iteration_row(recorder->rows.iterations, rank, iteration);
        if (recorder->rows.events != NULL) {
            uint64_t ids[KVIO_EVENT_MAX_REQUEST_IDS];
            for (uint32_t i = 0; i < num_ids; i++)
                ids[i] = items[i].id;
            kvio_serve_trace_iteration_ids(recorder->rows.events, rank, iteration, ids, count,
                                           recorder->rows.host_bandwidth);
        }
        if (!recorder->rows.keep)
            return;
    }
    if (recorder->iterations_limit > 0 &&
        recorder->iterations_length + size > recorder->iterations_limit) {
        recorder->iterations_dropped++;
        return;
    }
    if (kvio_array_reserve((void **)&recorder->iterations, &recorder->iterations_capacity,
                           recorder->iterations_length + size, 1, 64 * 1024) != KVIO_OK) {
        recorder->iterations_dropped++;
        return;
    }
    kvio_serve_iteration_record_t *record =
        (kvio_serve_iteration_record_t *)(recorder->iterations + recorder->iterations_length);
    *record = (kvio_serve_iteration_record_t){.iteration = *iteration, .rank = rank,
                                              .batch_size = (uint32_t)count,
                                              .num_ids = num_ids};
    for (uint32_t i = 0; i < num_ids; i++)
        record->ids[i] = items[i].id;
    recorder->iterations_length += size;
}

void kvio_serve_recorder_fini(kvio_serve_recorder_t *recorder)
{
    free(recorder->finished);
    free(recorder->iterations);
    free(recorder->served);
    memset(recorder, 0, sizeof(*recorder));
}

kvio_status_t kvio_serve_iterations_each(const void *records, size_t length,
                                         kvio_serve_iteration_each_t each, void *context)
{
    /* Copied out one by one: a record inside a message need not be aligned. */
    union {
        kvio_serve_iteration_record_t record;
        unsigned char bytes[sizeof(kvio_serve_iteration_record_t) +
                            KVIO_EVENT_MAX_REQUEST_IDS * sizeof(uint64_t)];
    } copy;
    const unsigned char *at = records, *end = at + length;
    while (at < end) {
        if ((size_t)(end - at) < sizeof(copy.record))
            return KVIO_ERR_PARSE;
        memcpy(&copy.record, at, sizeof(copy.record));
        size_t size = sizeof(copy.record) + (size_t)copy.record.num_ids * sizeof(uint64_t);
        if (copy.record.num_ids > KVIO_EVENT_MAX_REQUEST_IDS || (size_t)(end - at) < size)
            return KVIO_ERR_PARSE;
        memcpy(copy.bytes, at, size);
        each(context, &copy.record);
        at += size;
    }
    return KVIO_OK;
}

/* ---------- rendering ---------- */

kvio_status_t kvio_serve_render_requests(kvio_csv_t *csv, const kvio_engine_finished_t *finished,
                                         size_t count, const kvio_serve_output_t *control)
{
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < count && status == KVIO_OK; i++) {
        char row[512];
        int length = kvio_serve_request_row(&finished[i], row, sizeof(row));
        if (control != NULL)
            length = kvio_serve_request_control_row(
                &finished[i], kvio_serve_output_find(control, finished[i].id), row, sizeof(row),
                length);
        status = kvio_csv_line(csv, row,
                               (size_t)length < sizeof(row) ? (size_t)length : sizeof(row) - 1);
    }
    return status;
}

typedef struct render_context {
    kvio_csv_t *csv;
    kvio_event_trace_t *events;
    double host_bandwidth;
} render_context_t;

static void render_iteration(void *context, const kvio_serve_iteration_record_t *record)
{
    const render_context_t *render = context;
    if (render->csv != NULL)
        kvio_serve_iteration_row(render->csv, record->rank, &record->iteration);
    /* The whole batch's size; only its first ids were kept. */
    kvio_serve_trace_iteration_ids(render->events, record->rank, &record->iteration,
                                   record->ids, record->batch_size, render->host_bandwidth);
}

kvio_status_t kvio_serve_render_iterations(kvio_csv_t *csv, kvio_event_trace_t *events,
                                           const void *records, size_t length,
                                           double host_bandwidth)
{
    render_context_t render = {.csv = csv, .events = events, .host_bandwidth = host_bandwidth};
    return kvio_serve_iterations_each(records, length, render_iteration, &render);
}

kvio_status_t kvio_serve_output_add_step(kvio_serve_output_t *output, uint32_t rank,
                                         const kvio_engine_iteration_t *iteration)
{
    kvio_status_t status = kvio_array_reserve((void **)&output->steps, &output->steps_capacity,
                                              output->num_steps + 1, sizeof(*output->steps),
                                              4096);
    if (status == KVIO_OK)
        output->steps[output->num_steps++] = (kvio_serve_step_record_t){
            .rank = rank, .decode_seqs = iteration->batch.decode_seqs,
            .start_ns = iteration->start_ns,
            .end_ns = iteration->start_ns + iteration->duration_ns};
    return status;
}

static void keep_step(void *context, const kvio_serve_iteration_record_t *record)
{
    kvio_serve_output_t *output = context;
    if (kvio_serve_output_add_step(output, record->rank, &record->iteration) != KVIO_OK)
        output->steps_dropped++;
}

void kvio_serve_output_add_steps(kvio_serve_output_t *output, const void *records,
                                 size_t length)
{
    if (kvio_serve_iterations_each(records, length, keep_step, output) != KVIO_OK)
        output->steps_dropped++;
}

void kvio_serve_output_free(kvio_serve_output_t *output)
{
    free(output->steps);
    free(output->finished);
    memset(output, 0, sizeof(*output));
}

kvio_status_t kvio_serve_output_copy(kvio_serve_output_t *dst, const kvio_serve_output_t *src)
{
    *dst = *src;
    dst->control = NULL;
    dst->finished = malloc((src->num_finished + 1) * sizeof(*dst->finished));
    dst->steps = malloc((src->num_steps + 1) * sizeof(*dst->steps));
    dst->steps_capacity = src->num_steps + 1;
    if (dst->finished == NULL || dst->steps == NULL) {
        kvio_serve_output_free(dst);
        return KVIO_ERR_NOMEM;
    }
    memcpy(dst->finished, src->finished, src->num_finished * sizeof(*dst->finished));
    memcpy(dst->steps, src->steps, src->num_steps * sizeof(*dst->steps));
    return KVIO_OK;
}

static int compare_ids(const void *a, const void *b)
{
    uint64_t x = ((const kvio_engine_finished_t *)a)->id,
             y = ((const kvio_engine_finished_t *)b)->id;
    return x < y ? -1 : x > y;
}

void kvio_serve_output_sort(kvio_serve_output_t *output)
{
    if (output->num_finished > 1)
        qsort(output->finished, output->num_finished, sizeof(*output->finished), compare_ids);
}

const kvio_engine_finished_t *kvio_serve_output_find(const kvio_serve_output_t *output,
                                                     uint64_t id)
{
    kvio_engine_finished_t key = {.id = id};
    if (output == NULL || output->num_finished == 0)
        return NULL;
    return bsearch(&key, output->finished, output->num_finished, sizeof(key), compare_ids);
}
