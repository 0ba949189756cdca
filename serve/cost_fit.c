/* Fitting the cost model to measurements: the linear form's coefficients
 * by least squares on measured iterations (serve/cost_samples.c reads
 * them), and the roofline's efficiencies and step overhead to what
 * benchmarks measured (serve/cost_measurements.c reads them), by
 * golden-section search of one parameter after the other on the log
 * ratios. */
#include "kvio/cost.h"

#include "serve/cost_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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


/* ---------- the roofline ---------- */

/* A parameter's bounds, in the space it is searched in (log). */
static const double fit_low[KVIO_FIT_PARAMS] = {0.05, 0.05, 1e-6};
static const double fit_high[KVIO_FIT_PARAMS] = {1.0, 1.0, 0.1};

/* The parameter's value in config (seconds for the overhead). */
static double fit_get(const kvio_cost_config_t *config, int param)
{
    return param == KVIO_FIT_MEMORY_EFFICIENCY    ? config->memory_efficiency
           : param == KVIO_FIT_COMPUTE_EFFICIENCY ? config->compute_efficiency
                                                  : (double)config->overhead_ns / 1e9;
}

static void fit_set(kvio_cost_config_t *config, int param, double value)
{
    if (param == KVIO_FIT_MEMORY_EFFICIENCY)
        config->memory_efficiency = value;
    else if (param == KVIO_FIT_COMPUTE_EFFICIENCY)
        config->compute_efficiency = value;
    else
        config->overhead_ns = (int64_t)llround(value * 1e9);
}

/* What the fit works on. */
typedef struct fit_problem {
    const kvio_model_t *model;
    const kvio_gpu_t *gpu;
    const kvio_cost_measurement_t *measurements;
    size_t count;
} fit_problem_t;

/* Predicts every measurement with config into values (NULL: not kept);
 * returns the sum of squared log ratios, or -1 when the config is refused. */
static double fit_error(const fit_problem_t *problem, const kvio_cost_config_t *config,
                        double *values)
{
    kvio_cost_t *cost = NULL;
    char unused[256];
    if (kvio_cost_create(config, problem->model, problem->gpu, &cost, unused,
                         sizeof(unused)) != KVIO_OK)
        return -1;
    double sum = 0;
    for (size_t i = 0; i < problem->count; i++) {
        double value = kvio_cost_measurement_predict(cost, &problem->measurements[i]);
        if (values != NULL)
            values[i] = value;
        double ratio = value > 0 ? log(value / problem->measurements[i].measured) : 50;
        sum += ratio * ratio;
    }
    kvio_cost_destroy(cost);
    return sum;
}

/* How much the predictions move with a parameter: Σ |∂ ln value / ∂ ln θ|. */
static double fit_sensitivity(const fit_problem_t *problem, const kvio_cost_config_t *config,
                              int param, const double *base)
{
    kvio_cost_config_t moved = *config;
    double value = fit_get(config, param);
    fit_set(&moved, param, value * 0.95);
    double *values = malloc(problem->count * sizeof(double));
    if (values == NULL || fit_error(problem, &moved, values) < 0) {
        free(values);
        return 0;
    }
    double sum = 0;
    for (size_t i = 0; i < problem->count; i++)
        if (base[i] > 0 && values[i] > 0)
            sum += fabs(log(values[i] / base[i]) / log(0.95));
    free(values);
    return sum;
}

/* Golden-section search of one parameter over its bounds (log space). */
static void fit_line(const fit_problem_t *problem, kvio_cost_config_t *config, int param)
{
    const double golden = 0.6180339887498949;
    double low = log(fit_low[param]), high = log(fit_high[param]);
    kvio_cost_config_t trial = *config;
    double a = low + (1 - golden) * (high - low), b = low + golden * (high - low);
    fit_set(&trial, param, exp(a));
    double fa = fit_error(problem, &trial, NULL);
    fit_set(&trial, param, exp(b));
    double fb = fit_error(problem, &trial, NULL);
    for (int iteration = 0; iteration < 60 && high - low > 1e-7; iteration++) {
        if (fa >= 0 && (fb < 0 || fa <= fb)) {
            high = b;
            b = a;
            fb = fa;
            a = low + (1 - golden) * (high - low);
            fit_set(&trial, param, exp(a));
            fa = fit_error(problem, &trial, NULL);
        } else {
            low = a;
            a = b;
            fa = fb;
            b = low + golden * (high - low);
            fit_set(&trial, param, exp(b));
            fb = fit_error(problem, &trial, NULL);
        }
    }
    double before = fit_error(problem, config, NULL);
    fit_set(&trial, param, exp((low + high) / 2));
    double after = fit_error(problem, &trial, NULL);
    if (after >= 0 && (before < 0 || after < before))
        *config = trial;
}

/* The parameters to fit: those the measurements depend on, the most
 * sensitive first, at most one per measurement. */
static void fit_choose(const fit_problem_t *problem, const kvio_cost_config_t *config,
                       const double *base, bool fitted[KVIO_FIT_PARAMS])
{
    double sensitivity[KVIO_FIT_PARAMS], total = 0;
    for (int p = 0; p < KVIO_FIT_PARAMS; p++) {
        sensitivity[p] = fit_sensitivity(problem, config, p, base);
        total += sensitivity[p];
    }
    for (size_t chosen = 0; chosen < problem->count && chosen < KVIO_FIT_PARAMS; chosen++) {
        int best = -1;
        for (int p = 0; p < KVIO_FIT_PARAMS; p++)
            if (!fitted[p] && sensitivity[p] > 0.02 * total &&
                (best < 0 || sensitivity[p] > sensitivity[best]))
                best = p;
        if (best < 0)
            break;
        fitted[best] = true;
    }
}

kvio_status_t kvio_cost_fit_roofline(const kvio_cost_config_t *config,
                                     const kvio_model_t *model, const kvio_gpu_t *gpu,
                                     const kvio_cost_measurement_t *measurements, size_t count,
                                     kvio_cost_roofline_fit_t *fit_p, char *error_p,
                                     size_t error_len)
{
    if (count == 0) {
        snprintf(error_p, error_len, "no measurements to fit");
        return KVIO_ERR_INVALID;
    }
    /* Start from the engine profile's parameters and the GPU's efficiencies,
     * written into the config so that each can move. */
    kvio_cost_t *cost = NULL;
    kvio_status_t status = kvio_cost_create(config, model, gpu, &cost, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_cost_params_t params;
    kvio_cost_params(cost, &params);
    kvio_cost_destroy(cost);
    kvio_cost_roofline_fit_t fit = {.config = *config};
    fit.config.memory_efficiency = params.memory_efficiency;
    fit.config.compute_efficiency = params.compute_efficiency;
    fit.config.overhead_ns = params.overhead_ns;
    fit.before = calloc(count, sizeof(double));
    fit.after = calloc(count, sizeof(double));
    if (fit.before == NULL || fit.after == NULL) {
        kvio_cost_roofline_fit_free(&fit);
        return KVIO_ERR_NOMEM;
    }
    fit_problem_t problem = {model, gpu, measurements, count};
    fit_error(&problem, &fit.config, fit.before);
    fit_choose(&problem, &fit.config, fit.before, fit.fitted);
    for (int sweep = 0; sweep < 8; sweep++)
        for (int p = 0; p < KVIO_FIT_PARAMS; p++)
            if (fit.fitted[p])
                fit_line(&problem, &fit.config, p);
    fit_error(&problem, &fit.config, fit.after);
    double squares = 0;
    for (size_t i = 0; i < count; i++) {
        double relative = (fit.after[i] - measurements[i].measured) / measurements[i].measured;
        squares += relative * relative;
        fit.max_error = fmax(fit.max_error, fabs(relative));
    }
    fit.rms_error = sqrt(squares / (double)count);
    *fit_p = fit;
    return KVIO_OK;
}

void kvio_cost_roofline_fit_free(kvio_cost_roofline_fit_t *fit)
{
    free(fit->before);
    free(fit->after);
    fit->before = fit->after = NULL;
}
