/* Fitting the cost model to measurements: the linear form's coefficients
 * by least squares on measured iterations (a CSV of prefill_tokens,
 * decode_seqs, context_tokens, time_ms, or kvio's iterations.csv). */
#include "kvio/cost.h"

#include "serve/cost_int.h"

#include "kvio/array.h"
#include "kvio/results.h"

#include <errno.h>
#include <math.h>
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

kvio_status_t kvio_cost_fit_linear(const kvio_cost_sample_t *samples, size_t count,
                                   kvio_cost_fit_t *fit_p, char *error_p, size_t error_len)
{
    /* A term no sample has (iterations.csv: no decode context) is left at
     * 0; the others are fitted. */
    bool present[4] = {true, false, false, false};
    for (size_t i = 0; i < count; i++) {
        present[1] = present[1] || samples[i].prefill_tokens > 0;
        present[2] = present[2] || samples[i].decode_seqs > 0;
        present[3] = present[3] || samples[i].context_tokens > 0;
    }
    size_t terms = 1 + (size_t)present[1] + (size_t)present[2] + (size_t)present[3];
    if (count < terms) {
        snprintf(error_p, error_len, "need at least %zu samples to fit %zu coefficients, got %zu",
                 terms, terms, count);
        return KVIO_ERR_INVALID;
    }
    /* Normal equations (X^T X) c = X^T y, solved by Gaussian elimination with
     * partial pivoting. Columns are scaled to unit maximum for conditioning. */
    double scale[4] = {1, 0, 0, 0};
    for (size_t i = 0; i < count; i++) {
        scale[1] = fmax(scale[1], samples[i].prefill_tokens);
        scale[2] = fmax(scale[2], samples[i].decode_seqs);
        scale[3] = fmax(scale[3], samples[i].context_tokens);
    }
    for (int j = 1; j < 4; j++)
        if (scale[j] == 0)
            scale[j] = 1;
    double matrix[4][5] = {{0}};
    for (size_t i = 0; i < count; i++) {
        double row[4] = {1, samples[i].prefill_tokens / scale[1],
                         samples[i].decode_seqs / scale[2], samples[i].context_tokens / scale[3]};
        for (int j = 0; j < 4; j++) {
            for (int k = 0; k < 4; k++)
                matrix[j][k] += row[j] * row[k];
            matrix[j][4] += row[j] * samples[i].time_ms;
        }
    }
    for (int j = 1; j < 4; j++)
        if (!present[j])
            matrix[j][j] = 1; /* c_j = 0 */
    for (int column = 0; column < 4; column++) {
        int pivot = column;
        for (int r = column + 1; r < 4; r++)
            if (fabs(matrix[r][column]) > fabs(matrix[pivot][column]))
                pivot = r;
        if (fabs(matrix[pivot][column]) < 1e-12) {
            snprintf(error_p, error_len,
                     "the samples do not vary enough to fit the linear model (vary prefill "
                     "tokens, decode sequences and context independently)");
            return KVIO_ERR_INVALID;
        }
        for (int k = 0; k < 5; k++) {
            double swap = matrix[column][k];
            matrix[column][k] = matrix[pivot][k];
            matrix[pivot][k] = swap;
        }
        for (int r = 0; r < 4; r++) {
            if (r == column)
                continue;
            double factor = matrix[r][column] / matrix[column][column];
            for (int k = column; k < 5; k++)
                matrix[r][k] -= factor * matrix[column][k];
        }
    }
    double c[4];
    for (int j = 0; j < 4; j++)
        c[j] = matrix[j][4] / matrix[j][j] / scale[j];
    kvio_cost_fit_t fit = {.c0 = c[0], .c1 = c[1], .c2 = c[2], .c3 = c[3], .samples = count};
    double mean = 0, squares = 0, residual_squares = 0;
    for (size_t i = 0; i < count; i++)
        mean += samples[i].time_ms / (double)count;
    for (size_t i = 0; i < count; i++) {
        double predicted = c[0] + c[1] * samples[i].prefill_tokens +
                           c[2] * samples[i].decode_seqs + c[3] * samples[i].context_tokens;
        double residual = samples[i].time_ms - predicted;
        residual_squares += residual * residual;
        squares += (samples[i].time_ms - mean) * (samples[i].time_ms - mean);
        fit.max_abs_error_ms = fmax(fit.max_abs_error_ms, fabs(residual));
    }
    fit.rmse_ms = sqrt(residual_squares / (double)count);
    fit.r_squared = squares > 0 ? 1.0 - residual_squares / squares : 1.0;
    *fit_p = fit;
    return KVIO_OK;
}

