/* The cost model: roofline time from FLOPs and bytes of one iteration
 * against a GPU spec, a linear form with fitted coefficients, and a measured
 * table interpolated trilinearly, and the `cost:` option table. */
#include "kvio/cost.h"

#include "kvio/array.h"
#include "kvio/results.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


static const char *const cost_kind_names[] = {"roofline", "linear", "table", NULL};

const kvio_opt_t kvio_cost_options[] = {
    {.key = "kind", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_cost_config_t, kind),
     .values = cost_kind_names, .default_value = "roofline",
     .help = "roofline (model and GPU), linear (coefficients) or table (measured CSV)"},
    {.key = "tensor_parallel", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_cost_config_t, tensor_parallel), .default_value = "1",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 64,
     .help = "GPUs one serve rank spans"},
    {.key = "compute_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_cost_config_t, compute_efficiency), .default_value = "0.6",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "fraction of peak FLOP/s a forward pass reaches"},
    {.key = "memory_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_cost_config_t, memory_efficiency), .default_value = "0.8",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "fraction of HBM bandwidth a forward pass reaches"},
    {.key = "link_efficiency", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_cost_config_t, link_efficiency), .default_value = "0.7",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0.01, .max = 1,
     .help = "fraction of the GPU link an all-reduce reaches"},
    {.key = "overhead", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_cost_config_t, overhead_ns), .default_value = "1ms",
     .help = "fixed time per iteration (scheduling, kernel launches)"},
    {.key = "mixed_overhead", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_cost_config_t, mixed_overhead_ns), .default_value = "0.9ms",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "roofline: more fixed time for an iteration with prefill tokens than for a "
             "decode-only one (vLLM replays one full CUDA graph only for decode-only batches, "
             "piecewise graphs otherwise: 5.87 vs 4.97 ms a step on an H200, vLLM PR #51167)"},
    {.key = "allreduce_latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_cost_config_t, allreduce_latency_ns), .default_value = "10us",
     .help = "start-up time of one all-reduce (tensor parallelism)"},
    {.key = "c0", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c0_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per iteration"},
    {.key = "c1", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c1_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per prefill token"},
    {.key = "c2", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c2_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per decode sequence"},
    {.key = "c3", .type = KVIO_OPT_DOUBLE, .offset = offsetof(kvio_cost_config_t, linear_c3_ms),
     .default_value = "0", .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "linear form: ms per token of decode context"},
    {.key = "table", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_cost_config_t, table),
     .help = "table form: CSV of prefill_tokens,decode_seqs,context_tokens,time_ms"},
    {.key = NULL},
};

/* A measured grid for the table form. */
typedef struct cost_table {
    double *axes[3];
    size_t sizes[3];
    double *times_ms; /* [prefill][decode][context] */
} cost_table_t;

struct kvio_cost {
    kvio_cost_config_t config;
    kvio_model_t model;
    kvio_gpu_t gpu;
    cost_table_t table;
};

/* ---------- batches and iteration time ---------- */

void kvio_batch_add_prefill(kvio_batch_t *batch, uint64_t new_tokens, uint64_t cached_tokens)
{
    double n = (double)new_tokens, c = (double)cached_tokens;
    batch->prefill_tokens += new_tokens;
    batch->prefill_seqs++;
    batch->prefill_context += cached_tokens;
    /* Token i of the chunk attends to c + i + 1 positions. */
    batch->prefill_attention += n * c + n * (n + 1) / 2;
}

void kvio_batch_add_decode(kvio_batch_t *batch, uint64_t context_tokens)
{
    batch->decode_seqs++;
    batch->decode_context += context_tokens;
}

void kvio_batch_add_verify(kvio_batch_t *batch, uint64_t context_tokens, uint64_t drafts)
{
    kvio_batch_add_decode(batch, context_tokens);
    /* Draft i (1-based) attends to the context, the new token and the
     * drafts before it, and itself: c + i + 1 positions. */
    double d = (double)drafts, c = (double)context_tokens;
    batch->spec_tokens += drafts;
    batch->spec_attention += d * (c + 1) + d * (d + 1) / 2;
}

static void roofline(const kvio_cost_t *cost, const kvio_batch_t *batch,
                     kvio_cost_breakdown_t *out)
{
    const kvio_model_t *model = &cost->model;
    const kvio_gpu_t *gpu = &cost->gpu;
    double tp = (double)cost->config.tensor_parallel;
    double tokens = (double)(batch->prefill_tokens + batch->decode_seqs + batch->spec_tokens);
    double sequences = (double)(batch->prefill_seqs + batch->decode_seqs);
    double layers = (double)model->layers;
    double full_layers = (double)(model->layers - model->sliding_window_layers);
    double window_layers = (double)model->sliding_window_layers;
    double qk_width = (double)(model->heads * model->head_dim);

    /* Matmul FLOPs: 2 per active weight per token, plus the LM head for each
     * sequence that samples a token. */
    double experts = model->num_experts > 0 ? (double)model->experts_per_token : 1.0;
    double linear_per_token = layers * (kvio_model_attention_params(model) + experts * kvio_model_expert_params(model));
    double lm_head = (double)model->vocab * (double)model->hidden;
    double flops = 2.0 * linear_per_token * tokens + 2.0 * lm_head * sequences;
    /* Attention: QK^T and PV, 4·width FLOPs per (query, key) pair; windowed
     * layers see at most `window` keys per query. */
    double pairs = batch->prefill_attention + (double)batch->decode_context +
                   (double)batch->decode_seqs + batch->spec_attention;
    double window_pairs = fmin(pairs, tokens * (double)model->sliding_window);
    flops += 4.0 * qk_width * (full_layers * pairs + window_layers * window_pairs);

    /* Bytes: weights read once per iteration (MoE: only the experts the batch
     * touches, E·(1 − (1 − k/E)^T)), KV read for every context token and
     * written for every new one. */
    double weight_bytes = model->weight_dtype_bytes;
    double dense_weights = layers * kvio_model_attention_params(model) + kvio_model_embedding_params(model);
    double expert_weights = 0;
    if (model->num_experts > 0) {
        double e = (double)model->num_experts, k = (double)model->experts_per_token;
        double touched = e * (1.0 - pow(1.0 - k / e, tokens));
        expert_weights = layers * touched * kvio_model_expert_params(model);
        dense_weights += layers * (double)(model->hidden * model->num_experts);
    } else {
        expert_weights = layers * kvio_model_expert_params(model);
    }
    double kv_token = (double)kvio_model_kv_bytes_per_token(model, 1);
    double context = (double)(batch->prefill_context + batch->decode_context);
    double window_kv = (double)kvio_model_window_kv_bytes(model, 1);
    double bytes = (dense_weights + expert_weights) * weight_bytes + kv_token * (context + tokens) +
                   window_kv * sequences;

    out->flops = flops;
    out->bytes = bytes;
    out->compute_s = flops / tp / (gpu->flops * cost->config.compute_efficiency);
    out->memory_s = bytes / tp / (gpu->hbm_bandwidth * cost->config.memory_efficiency);
    out->allreduce_s = 0;
    if (tp > 1 && tokens > 0) {
        /* Two all-reduces per layer of tokens × hidden activations; a ring
         * moves 2(tp − 1)/tp of the data over each link. */
        double size = tokens * (double)model->hidden * model->dtype_bytes;
        double per = 2.0 * (tp - 1.0) / tp * size /
                     (gpu->link_bandwidth * cost->config.link_efficiency);
        out->allreduce_s = 2.0 * layers * (per + (double)cost->config.allreduce_latency_ns / 1e9);
    }
    out->mixed_overhead_s =
        batch->prefill_tokens > 0 ? (double)cost->config.mixed_overhead_ns / 1e9 : 0;
    out->overhead_s = (double)cost->config.overhead_ns / 1e9 + out->mixed_overhead_s;
    out->bound = out->compute_s >= out->memory_s ? "compute" : "memory";
    out->time_s = fmax(out->compute_s, out->memory_s) + out->allreduce_s + out->overhead_s;
}

/* Index of the cell of axis holding x, and x's position t in it (t may leave
 * [0, 1] outside the grid: linear extrapolation from the edge cell). */
static void locate(const double *axis, size_t size, double x, size_t *index_p, double *t_p)
{
    if (size == 1) {
        *index_p = 0;
        *t_p = 0;
        return;
    }
    size_t i = 0;
    while (i + 2 < size && x > axis[i + 1])
        i++;
    *index_p = i;
    *t_p = (x - axis[i]) / (axis[i + 1] - axis[i]);
}

static double table_time_ms(const cost_table_t *table, const double point[3])
{
    size_t index[3];
    double t[3];
    for (int a = 0; a < 3; a++)
        locate(table->axes[a], table->sizes[a], point[a], &index[a], &t[a]);
    double total = 0;
    for (int corner = 0; corner < 8; corner++) {
        double weight = 1;
        size_t at[3];
        for (int a = 0; a < 3; a++) {
            int high = (corner >> a) & 1;
            if (table->sizes[a] == 1) {
                if (high)
                    weight = 0;
                at[a] = 0;
                continue;
            }
            at[a] = index[a] + (size_t)high;
            weight *= high ? t[a] : 1 - t[a];
        }
        if (weight == 0)
            continue;
        size_t cell = (at[0] * table->sizes[1] + at[1]) * table->sizes[2] + at[2];
        total += weight * table->times_ms[cell];
    }
    return fmax(total, 0);
}

void kvio_cost_iteration(const kvio_cost_t *cost, const kvio_batch_t *batch,
                         kvio_cost_breakdown_t *breakdown_p)
{
    kvio_cost_breakdown_t out = {0};
    if (batch->prefill_tokens == 0 && batch->decode_seqs == 0) {
        out.bound = "idle";
        *breakdown_p = out;
        return;
    }
    switch (cost->config.kind) {
    case KVIO_COST_LINEAR: {
        const kvio_cost_config_t *c = &cost->config;
        double ms = c->linear_c0_ms +
                    c->linear_c1_ms * (double)(batch->prefill_tokens + batch->spec_tokens) +
                    c->linear_c2_ms * (double)batch->decode_seqs +
                    c->linear_c3_ms * (double)batch->decode_context;
        out.time_s = fmax(ms, 0) / 1e3; /* (the options refuse negative coefficients) */
        out.bound = "linear";
        break;
    }
    case KVIO_COST_TABLE: {
        double point[3] = {(double)(batch->prefill_tokens + batch->spec_tokens),
                           (double)batch->decode_seqs,
                           (double)batch->decode_context};
        out.time_s = table_time_ms(&cost->table, point) / 1e3;
        out.bound = "table";
        break;
    }
    default:
        roofline(cost, batch, &out);
        break;
    }
    *breakdown_p = out;
}

/* ---------- samples, tables and fitting ---------- */

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

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t axis_index(const double *axis, size_t size, double value)
{
    for (size_t i = 0; i < size; i++)
        if (axis[i] == value)
            return i;
    return size;
}

static kvio_status_t table_load(cost_table_t *table, const char *path, char *error_p,
                                size_t error_len)
{
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0;
    kvio_status_t status = kvio_cost_read_samples(path, &samples, &count, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    for (int a = 0; a < 3; a++) {
        double *values = malloc(count * sizeof(double));
        if (values == NULL) {
            free(samples);
            return KVIO_ERR_NOMEM;
        }
        for (size_t i = 0; i < count; i++)
            values[i] = a == 0 ? samples[i].prefill_tokens
                        : a == 1 ? samples[i].decode_seqs : samples[i].context_tokens;
        qsort(values, count, sizeof(double), compare_double);
        size_t unique = 0;
        for (size_t i = 0; i < count; i++)
            if (unique == 0 || values[unique - 1] != values[i])
                values[unique++] = values[i];
        table->axes[a] = values;
        table->sizes[a] = unique;
    }
    size_t cells = table->sizes[0] * table->sizes[1] * table->sizes[2];
    table->times_ms = malloc(cells * sizeof(double));
    unsigned char *filled = calloc(cells, 1);
    if (table->times_ms == NULL || filled == NULL) {
        free(filled);
        free(samples);
        return KVIO_ERR_NOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        size_t p = axis_index(table->axes[0], table->sizes[0], samples[i].prefill_tokens);
        size_t d = axis_index(table->axes[1], table->sizes[1], samples[i].decode_seqs);
        size_t c = axis_index(table->axes[2], table->sizes[2], samples[i].context_tokens);
        size_t cell = (p * table->sizes[1] + d) * table->sizes[2] + c;
        table->times_ms[cell] = samples[i].time_ms;
        filled[cell] = 1;
    }
    for (size_t cell = 0; cell < cells && status == KVIO_OK; cell++) {
        if (!filled[cell]) {
            size_t c = cell % table->sizes[2];
            size_t d = cell / table->sizes[2] % table->sizes[1];
            size_t p = cell / table->sizes[2] / table->sizes[1];
            snprintf(error_p, error_len,
                     "%s: the grid has no row for prefill_tokens=%g decode_seqs=%g "
                     "context_tokens=%g (every combination must be measured)",
                     path, table->axes[0][p], table->axes[1][d], table->axes[2][c]);
            status = KVIO_ERR_PARSE;
        }
    }
    free(filled);
    free(samples);
    return status;
}

static void table_free(cost_table_t *table)
{
    for (int a = 0; a < 3; a++)
        free(table->axes[a]);
    free(table->times_ms);
    memset(table, 0, sizeof(*table));
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

/* ---------- lifetime ---------- */

kvio_status_t kvio_cost_create(const kvio_cost_config_t *config, const kvio_model_t *model,
                               const kvio_gpu_t *gpu, kvio_cost_t **cost_p, char *error_p,
                               size_t error_len)
{
    kvio_cost_t *cost = calloc(1, sizeof(*cost));
    if (cost == NULL)
        return KVIO_ERR_NOMEM;
    cost->config = *config;
    cost->config.table = NULL;
    cost->model = *model;
    cost->model.preset = NULL;
    cost->gpu = *gpu;
    cost->gpu.preset = NULL;
    if (cost->config.tensor_parallel < 1)
        cost->config.tensor_parallel = 1;
    if (config->kind == KVIO_COST_TABLE) {
        if (config->table == NULL || config->table[0] == '\0') {
            snprintf(error_p, error_len, "cost.table: the table form needs a CSV file");
            free(cost);
            return KVIO_ERR_CONFIG;
        }
        kvio_status_t status = table_load(&cost->table, config->table, error_p, error_len);
        if (status != KVIO_OK) {
            table_free(&cost->table);
            free(cost);
            return status;
        }
    }
    *cost_p = cost;
    return KVIO_OK;
}

void kvio_cost_destroy(kvio_cost_t *cost)
{
    if (cost == NULL)
        return;
    table_free(&cost->table);
    free(cost);
}
