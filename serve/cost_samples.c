/* Measured iterations for the cost model's linear form: a CSV of
 * prefill_tokens, decode_seqs, context_tokens, time_ms, or kvio's own
 * iterations.csv. A reader alone, below the cost model that loads a fit
 * from it and the fit and measurement readers that take its rows. */
#include "kvio/cost.h"

#include "kvio/array.h"
#include "kvio/results.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most rows kvio fit reads (320 MB of samples): an endless or huge
 * file is refused at that row, not read until memory runs out. */
#define MAX_FIT_SAMPLES 10000000

kvio_status_t kvio_cost_read_samples(const char *path, kvio_cost_sample_t **samples_p,
                                     size_t *count_p, char *error_p, size_t error_len)
{
    /* kvio's own iterations.csv names the time duration_ms and has no
     * context column: the fit then leaves c3 at 0. */
    static const char *const columns[4] = {"prefill_tokens", "decode_seqs", "context_tokens",
                                           "time_ms"};
    static const char *const aliases[4] = {NULL, NULL, NULL, "duration_ms"};
    static const bool optional[4] = {false, false, true, false};
    kvio_csv_reader_t *csv = malloc(sizeof(*csv));
    if (csv == NULL)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = kvio_csv_reader_open(csv, path, error_p, error_len);
    if (status == KVIO_ERR_NOT_FOUND)
        snprintf(error_p, error_len, "%s: %s", path, strerror(ENOENT));
    if (status != KVIO_OK) {
        free(csv);
        return status;
    }
    int position[4];
    for (int c = 0; c < 4 && status == KVIO_OK; c++) {
        position[c] = kvio_csv_reader_column(csv, columns[c]);
        if (position[c] < 0 && aliases[c] != NULL)
            position[c] = kvio_csv_reader_column(csv, aliases[c]);
        if (position[c] < 0 && !optional[c]) {
            snprintf(error_p, error_len, "%s:%lu: the header has no '%s' column", path,
                     csv->line_number, columns[c]);
            status = KVIO_ERR_PARSE;
        }
    }
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0, capacity = 0;
    while (status == KVIO_OK && (status = kvio_csv_reader_next(csv, error_p, error_len)) ==
                                    KVIO_OK) {
        double values[4];
        for (int c = 0; c < 4 && status == KVIO_OK; c++) {
            char *end = NULL;
            const char *text = position[c] < 0                        ? "0"
                               : (size_t)position[c] < csv->num_fields ? csv->fields[position[c]]
                                                                       : "";
            values[c] = strtod(text, &end);
            if (end == text || *end != '\0' || !isfinite(values[c]) || values[c] < 0) {
                snprintf(error_p, error_len, "%s:%lu: %s: '%s' is not a non-negative number",
                         path, csv->line_number, columns[c], text);
                status = KVIO_ERR_PARSE;
            }
        }
        if (status == KVIO_OK && count == MAX_FIT_SAMPLES) {
            snprintf(error_p, error_len, "%s:%lu: more than %d samples (fit a sample of the "
                     "rows)", path, csv->line_number, MAX_FIT_SAMPLES);
            status = KVIO_ERR_PARSE;
        }
        if (status == KVIO_OK)
            status = kvio_array_reserve((void **)&samples, &capacity, count + 1,
                                        sizeof(*samples), 64);
        if (status == KVIO_OK)
            samples[count++] = (kvio_cost_sample_t){values[0], values[1], values[2], values[3]};
    }
    if (status == KVIO_INPROGRESS)
        status = KVIO_OK; /* the end */
    if (status == KVIO_OK && count == 0) {
        snprintf(error_p, error_len, "%s: no samples (expected a header and rows)", path);
        status = KVIO_ERR_PARSE;
    }
    kvio_csv_reader_close(csv);
    free(csv);
    if (status != KVIO_OK) {
        free(samples);
        return status;
    }
    *samples_p = samples;
    *count_p = count;
    return KVIO_OK;
}
