/* The distribution schema: which keys each kind of distribution takes
 * ({dist: lognormal, mean: 1200, stddev: 900, max: 16384}), numbers in the
 * option's unit, bound into a prepared kvio_dist_t. */
#include "core/config_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

kvio_status_t config_parse_number(bind_context_t *context, const node_t *node,
                                  const char *path, kvio_unit_t unit, double *value_p)
{
    char message[256];
    if (node->kind != NODE_SCALAR)
        return config_node_error(context, node, path, "expected a number, got a %s",
                          node->kind == NODE_MAPPING ? "mapping" : "list");
    if (unit == KVIO_UNIT_SIZE) {
        uint64_t bytes;
        if (kvio_parse_size(node->text, &bytes, message, sizeof(message)) != KVIO_OK)
            return config_node_error(context, node, path, "%s", message);
        *value_p = (double)bytes;
        return KVIO_OK;
    }
    if (unit == KVIO_UNIT_DURATION) {
        int64_t ns;
        if (kvio_parse_duration(node->text, &ns, message, sizeof(message)) != KVIO_OK)
            return config_node_error(context, node, path, "%s", message);
        *value_p = (double)ns;
        return KVIO_OK;
    }
    char *end;
    errno = 0;
    double value = strtod(node->text, &end);
    if (end == node->text || *end != '\0' || errno == ERANGE || !isfinite(value))
        return config_node_error(context, node, path, "expected a number, got '%s'", node->text);
    *value_p = value;
    return KVIO_OK;
}

kvio_status_t config_parse_number_list(bind_context_t *context, const node_t *node,
                                       const char *path, kvio_unit_t unit, double **values_p,
                                       size_t *count_p)
{
    if (node->kind != NODE_SEQUENCE)
        return config_node_error(context, node, path, "expected a list of numbers");
    double *values = calloc(node->count ? node->count : 1, sizeof(double));
    if (values == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < node->count; i++) {
        kvio_status_t status = config_parse_number(context, node->items[i], path, unit, &values[i]);
        if (status != KVIO_OK) {
            free(values);
            return status;
        }
    }
    *values_p = values;
    *count_p = node->count;
    return KVIO_OK;
}

/* The largest (or smallest) value a distribution can give, when it is
 * bounded that way: a constant, uniform's ends, empirical's values, or a
 * max (min) clamp. */
static bool dist_bound(const kvio_dist_t *dist, bool upper, double *bound_p)
{
    if (upper ? dist->has_max : dist->has_min) {
        *bound_p = upper ? dist->max : dist->min;
        return true;
    }
    switch (dist->kind) {
    case KVIO_DIST_CONSTANT:
        *bound_p = dist->value;
        return true;
    case KVIO_DIST_UNIFORM:
        *bound_p = upper ? dist->high : dist->low;
        return true;
    case KVIO_DIST_EMPIRICAL:
        if (dist->num_values == 0)
            return false;
        *bound_p = dist->values[0];
        for (size_t i = 1; i < dist->num_values; i++)
            if (upper ? dist->values[i] > *bound_p : dist->values[i] < *bound_p)
                *bound_p = dist->values[i];
        return true;
    default:
        return false; /* unbounded: its use clamps it */
    }
}

/* An option's min and max hold for the values a distribution can give,
 * where they are bounded (turns: 100000 was taken as 10000 silently). */
static kvio_status_t check_dist_bounds(bind_context_t *context, const kvio_opt_t *option,
                                       const node_t *node, const kvio_dist_t *dist,
                                       const char *path)
{
    double bound;
    if ((option->flags & KVIO_OPT_HAS_MAX) && dist_bound(dist, true, &bound) &&
        bound > option->max)
        return config_node_error(context, node, path, "%g is above the largest, %g",
                                 bound, option->max);
    if ((option->flags & KVIO_OPT_HAS_MIN) && dist_bound(dist, false, &bound) &&
        bound < option->min)
        return config_node_error(context, node, path, "%g is below the smallest, %g",
                                 bound, option->min);
    return KVIO_OK;
}

kvio_status_t config_bind_dist(bind_context_t *context, const kvio_opt_t *option,
                               const node_t *node, kvio_dist_t *dist, const char *path)
{
    kvio_dist_t parsed = {0};
    kvio_status_t status = KVIO_OK;
    if (node->kind == NODE_SCALAR) {
        /* A bare number is a constant. */
        parsed.kind = KVIO_DIST_CONSTANT;
        status = config_parse_number(context, node, path, option->unit, &parsed.value);
        if (status != KVIO_OK)
            return status;
        goto done;
    }
    if (node->kind != NODE_MAPPING)
        return config_node_error(context, node, path,
                          "expected a distribution ({dist: normal, mean: ..., stddev: ...}) or a number");
    const node_t *kind_node = config_mapping_get(node, "dist", NULL);
    if (kind_node == NULL)
        return config_node_error(context, node, path, "a distribution needs 'dist' (one of %s)",
                          "constant, uniform, normal, lognormal, exponential, gamma, zipf, empirical");
    if (kind_node->kind != NODE_SCALAR ||
        kvio_dist_kind_find(kind_node->text, &parsed.kind) != KVIO_OK) {
        return config_node_error(context, kind_node, path,
                          "unknown distribution '%s' (one of constant, uniform, normal, "
                          "lognormal, exponential, gamma, zipf, empirical)",
                          kind_node->kind == NODE_SCALAR ? kind_node->text : "?");
    }
    /* Which parameters each kind takes; min and max clamp any kind. */
    static const char *const params[KVIO_DIST_NUM_KINDS][3] = {
        [KVIO_DIST_CONSTANT] = {"value"},
        [KVIO_DIST_UNIFORM] = {"low", "high"},
        [KVIO_DIST_NORMAL] = {"mean", "stddev"},
        [KVIO_DIST_LOGNORMAL] = {"mean", "stddev"},
        [KVIO_DIST_EXPONENTIAL] = {"mean"},
        [KVIO_DIST_GAMMA] = {"mean", "cv"},
        [KVIO_DIST_ZIPF] = {"n", "s"},
        [KVIO_DIST_EMPIRICAL] = {"values", "weights"},
    };
    bool seen[3] = {false, false, false};
    for (size_t i = 0; i < node->count && status == KVIO_OK; i++) {
        const node_t *key = node->keys[i];
        const node_t *value = node->items[i];
        char key_path[512];
        config_join_path(key_path, sizeof(key_path), path, key->text);
        if (strcmp(key->text, "dist") == 0)
            continue;
        if (strcmp(key->text, "min") == 0 || strcmp(key->text, "max") == 0) {
            bool is_min = key->text[1] == 'i';
            double *target = is_min ? &parsed.min : &parsed.max;
            status = config_parse_number(context, value, key_path, option->unit, target);
            if (is_min)
                parsed.has_min = true;
            else
                parsed.has_max = true;
            continue;
        }
        int slot = -1;
        for (int p = 0; p < 3 && params[parsed.kind][p] != NULL; p++) {
            if (strcmp(params[parsed.kind][p], key->text) == 0)
                slot = p;
        }
        if (slot < 0) {
            char allowed[128] = "dist, min, max";
            for (int p = 0; p < 3 && params[parsed.kind][p] != NULL; p++) {
                strncat(allowed, ", ", sizeof(allowed) - strlen(allowed) - 1);
                strncat(allowed, params[parsed.kind][p], sizeof(allowed) - strlen(allowed) - 1);
            }
            status = config_node_error(context, key, key_path,
                                "unknown key for a %s distribution (it takes %s)",
                                kind_node->text, allowed);
            break;
        }
        seen[slot] = true;
        /* Shape parameters (cv, zipf's n and s, weights) carry no unit. */
        kvio_unit_t unit = option->unit;
        const char *name = key->text;
        if (strcmp(name, "cv") == 0 || parsed.kind == KVIO_DIST_ZIPF || strcmp(name, "weights") == 0)
            unit = KVIO_UNIT_NONE;
        double *target = NULL;
        if (strcmp(name, "value") == 0) target = &parsed.value;
        else if (strcmp(name, "low") == 0) target = &parsed.low;
        else if (strcmp(name, "high") == 0) target = &parsed.high;
        else if (strcmp(name, "mean") == 0) target = &parsed.mean;
        else if (strcmp(name, "stddev") == 0) target = &parsed.stddev;
        else if (strcmp(name, "cv") == 0) target = &parsed.cv;
        else if (strcmp(name, "n") == 0) target = &parsed.n;
        else if (strcmp(name, "s") == 0) target = &parsed.s;
        if (target != NULL) {
            status = config_parse_number(context, value, key_path, unit, target);
        } else if (strcmp(name, "values") == 0) {
            free(parsed.values);
            parsed.values = NULL;
            status = config_parse_number_list(context, value, key_path, unit, &parsed.values,
                                       &parsed.num_values);
        } else {
            size_t count = 0;
            free(parsed.weights);
            parsed.weights = NULL;
            status = config_parse_number_list(context, value, key_path, unit, &parsed.weights, &count);
            if (status == KVIO_OK && parsed.values != NULL && count != parsed.num_values)
                status = config_node_error(context, value, key_path,
                                    "%zu weights for %zu values", count, parsed.num_values);
            if (status == KVIO_OK && parsed.values == NULL)
                parsed.num_values = count;
        }
    }
    for (int p = 0; status == KVIO_OK && p < 3 && params[parsed.kind][p] != NULL; p++) {
        bool optional = parsed.kind == KVIO_DIST_EMPIRICAL && p == 1;
        if (!seen[p] && !optional)
            status = config_node_error(context, node, path, "a %s distribution needs '%s'",
                                kind_node->text, params[parsed.kind][p]);
    }
done:
    if (status == KVIO_OK) {
        char message[256];
        if (kvio_dist_prepare(&parsed, message, sizeof(message)) != KVIO_OK)
            status = config_node_error(context, node, path, "%s", message);
    }
    if (status == KVIO_OK)
        status = check_dist_bounds(context, option, node, &parsed, path);
    if (status != KVIO_OK) {
        kvio_dist_clear(&parsed);
        return status;
    }
    kvio_dist_clear(dist);
    *dist = parsed;
    return KVIO_OK;
}

