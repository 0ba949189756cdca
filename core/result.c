/* The typed result (kvio/result.h): the declaration table made from
 * kvio/figures.def, values by figure, children and detail, the verdict's
 * warnings, and the renderers and the one loader that read the
 * declaration. */
#include "kvio/result.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/results.h"
#include "kvio/stats.h"

/* This build's declaration: the header's figures, then any a build adds
 * (KVIO_EXTRA_FIGURES, included at the end of figures.def). */
#define KVIO_FIGURE(id, ...) {__VA_ARGS__},
static const kvio_figure_decl_t figures[] = {
#include "kvio/figures.def"
};
#undef KVIO_FIGURE
#define NUM_DECLARED ((int)(sizeof(figures) / sizeof(figures[0])))

int kvio_num_figures(void)
{
    return NUM_DECLARED;
}

typedef struct child_list {
    char *name;
    kvio_result_t **entries;
    size_t count;
} child_list_t;

typedef struct warning {
    char *kind, *message;
    double measured, threshold;
} warning_t;

struct kvio_result {
    double values[NUM_DECLARED];
    char *texts[NUM_DECLARED];
    bool set[NUM_DECLARED];
    child_list_t *lists;
    size_t num_lists;
    json_t *detail; /* an object: paths under metrics no figure has */
    warning_t *warnings;
    size_t num_warnings;
};

const kvio_figure_decl_t *kvio_figure_decl(kvio_figure_t figure)
{
    return (unsigned)figure < (unsigned)NUM_DECLARED ? &figures[figure] : NULL;
}

kvio_figure_t kvio_figure_find(const char *name)
{
    for (int f = 0; name != NULL && f < NUM_DECLARED; f++)
        if (strcmp(figures[f].name, name) == 0)
            return (kvio_figure_t)f;
    return KVIO_FIGURE_NONE;
}

const char *kvio_figure_source_name(kvio_figure_source_t source)
{
    static const char *const names[] = {"measured", "modelled", "configured", "derived"};
    return (unsigned)source < 4 ? names[source] : "?";
}

kvio_result_t *kvio_result_create(void)
{
    kvio_result_t *result = calloc(1, sizeof(*result));
    if (result == NULL)
        return NULL;
    result->detail = json_object();
    if (result->detail == NULL) {
        free(result);
        return NULL;
    }
    return result;
}

void kvio_result_destroy(kvio_result_t *result)
{
    if (result == NULL)
        return;
    for (int f = 0; f < NUM_DECLARED; f++)
        free(result->texts[f]);
    for (size_t l = 0; l < result->num_lists; l++) {
        for (size_t i = 0; i < result->lists[l].count; i++)
            kvio_result_destroy(result->lists[l].entries[i]);
        free(result->lists[l].entries);
        free(result->lists[l].name);
    }
    free(result->lists);
    for (size_t w = 0; w < result->num_warnings; w++) {
        free(result->warnings[w].kind);
        free(result->warnings[w].message);
    }
    free(result->warnings);
    json_decref(result->detail);
    free(result);
}

void kvio_result_set(kvio_result_t *result, kvio_figure_t figure, double value)
{
    if ((unsigned)figure >= (unsigned)NUM_DECLARED)
        return;
    result->values[figure] = value;
    result->set[figure] = true;
}

void kvio_result_set_text(kvio_result_t *result, kvio_figure_t figure, const char *text)
{
    if ((unsigned)figure >= (unsigned)NUM_DECLARED || text == NULL)
        return;
    char *copy = strdup(text);
    if (copy == NULL)
        return;
    free(result->texts[figure]);
    result->texts[figure] = copy;
    result->set[figure] = true;
}

void kvio_result_unset(kvio_result_t *result, kvio_figure_t figure)
{
    if ((unsigned)figure >= (unsigned)NUM_DECLARED)
        return;
    free(result->texts[figure]);
    result->texts[figure] = NULL;
    result->set[figure] = false;
}

bool kvio_result_has(const kvio_result_t *result, kvio_figure_t figure)
{
    return result != NULL && (unsigned)figure < (unsigned)NUM_DECLARED && result->set[figure];
}

double kvio_result_get(const kvio_result_t *result, kvio_figure_t figure)
{
    return kvio_result_has(result, figure) ? result->values[figure] : NAN;
}

const char *kvio_result_text(const kvio_result_t *result, kvio_figure_t figure)
{
    return kvio_result_has(result, figure) ? result->texts[figure] : NULL;
}

void kvio_result_merge(kvio_result_t *dst, const kvio_result_t *src)
{
    for (int f = 0; f < NUM_DECLARED; f++) {
        if (!src->set[f])
            continue;
        if (figures[f].kind == KVIO_KIND_TEXT)
            kvio_result_set_text(dst, (kvio_figure_t)f, src->texts[f]);
        else
            kvio_result_set(dst, (kvio_figure_t)f, src->values[f]);
    }
    json_object_update_recursive(dst->detail, src->detail);
}

void kvio_result_set_stats(kvio_result_t *result, kvio_figure_t mean, double *values,
                           size_t count)
{
    if (kvio_sort_doubles(values, count) != KVIO_OK)
        qsort(values, count, sizeof(*values), kvio_compare_double);
    double average = 0, deviation = 0;
    kvio_mean_stddev(values, count, &average, &deviation);
    kvio_result_set(result, mean, average);
    kvio_result_set(result, mean + 1, kvio_percentile_linear(values, count, 50));
    kvio_result_set(result, mean + 2, kvio_percentile_linear(values, count, 90));
    kvio_result_set(result, mean + 3, kvio_percentile_linear(values, count, 99));
    kvio_result_set(result, mean + 4, count > 0 ? values[count - 1] : 0);
    kvio_result_set(result, mean + 5, (double)count);
}

void kvio_result_derive(kvio_result_t *result)
{
    for (int f = 0; f < NUM_DECLARED; f++) {
        const kvio_figure_decl_t *decl = &figures[f];
        if (decl->source != KVIO_SOURCE_DERIVED ||
            !kvio_result_has(result, (kvio_figure_t)decl->derive.numerator))
            continue;
        double value = decl->derive.scale * result->values[decl->derive.numerator];
        if (decl->derive.denominator != KVIO_NUM_FIGURES) {
            double denominator = kvio_result_get(result, (kvio_figure_t)decl->derive.denominator);
            value = denominator > 0 ? value / denominator : 0;
        }
        kvio_result_set(result, (kvio_figure_t)f, value);
    }
    for (size_t l = 0; l < result->num_lists; l++)
        for (size_t i = 0; i < result->lists[l].count; i++)
            kvio_result_derive(result->lists[l].entries[i]);
}

/* ---- children and detail --------------------------------------------- */

static child_list_t *find_list(const kvio_result_t *result, const char *name)
{
    for (size_t l = 0; result != NULL && l < result->num_lists; l++)
        if (strcmp(result->lists[l].name, name) == 0)
            return &result->lists[l];
    return NULL;
}

kvio_result_t *kvio_result_child(kvio_result_t *result, const char *list, size_t index)
{
    child_list_t *found = find_list(result, list);
    if (found == NULL) {
        child_list_t *bigger = realloc(result->lists, (result->num_lists + 1) * sizeof(*bigger));
        if (bigger == NULL)
            return NULL;
        result->lists = bigger;
        found = &result->lists[result->num_lists];
        *found = (child_list_t){.name = strdup(list)};
        if (found->name == NULL)
            return NULL;
        result->num_lists++;
    }
    if (index >= found->count) {
        kvio_result_t **bigger = realloc(found->entries, (index + 1) * sizeof(*bigger));
        if (bigger == NULL)
            return NULL;
        found->entries = bigger;
        for (size_t i = found->count; i <= index; i++) {
            found->entries[i] = kvio_result_create();
            if (found->entries[i] == NULL) {
                found->count = i;
                return NULL;
            }
        }
        found->count = index + 1;
    }
    return found->entries[index];
}

size_t kvio_result_num_children(const kvio_result_t *result, const char *list)
{
    const child_list_t *found = find_list(result, list);
    return found != NULL ? found->count : 0;
}

const kvio_result_t *kvio_result_child_at(const kvio_result_t *result, const char *list,
                                          size_t index)
{
    const child_list_t *found = find_list(result, list);
    return found != NULL && index < found->count ? found->entries[index] : NULL;
}

/* The object at the dotted path's parent in root, made as needed; *leaf_p
 * points at the last key (inside path_copy). */
static json_t *parent_of(json_t *root, char *path_copy, char **leaf_p)
{
    json_t *at = root;
    char *key = path_copy;
    for (char *dot = strchr(key, '.'); dot != NULL; dot = strchr(key, '.')) {
        /* "p99.9" is one key: a dot followed by a digit does not split. */
        if (dot[1] >= '0' && dot[1] <= '9') {
            char *next = strchr(dot + 1, '.');
            if (next == NULL)
                break;
            dot = next;
        }
        *dot = '\0';
        json_t *inner = json_object_get(at, key);
        if (!json_is_object(inner)) {
            inner = json_object();
            json_object_set_new(at, key, inner);
        }
        at = inner;
        key = dot + 1;
    }
    *leaf_p = key;
    return at;
}

/* The name a figure shows under in an object of list (NULL: the run's);
 * NULL when it has no place there. */
static const char *shown_name(const kvio_figure_decl_t *decl, const char *list)
{
    if (decl->scope == NULL)
        return decl->name;
    size_t length = strlen(decl->scope);
    if (list == NULL || strcmp(decl->scope, list) != 0 || strncmp(decl->name, list, length) != 0)
        return NULL;
    return decl->name + length + 1;
}

/* Whether path names a declared figure or lies inside one (a figure's
 * value is a leaf: nothing hangs below it). */
static bool declared_path(const char *path)
{
    for (int f = 0; f < NUM_DECLARED; f++) {
        const char *name = figures[f].scope != NULL ? shown_name(&figures[f], figures[f].scope)
                                                    : figures[f].name;
        size_t length = strlen(name);
        if (strncmp(name, path, length) == 0 && (path[length] == '\0' || path[length] == '.'))
            return true;
    }
    return false;
}

kvio_status_t kvio_result_set_detail(kvio_result_t *result, const char *path, json_t *value)
{
    if (value == NULL)
        return KVIO_ERR_NOMEM;
    if (declared_path(path)) {
        json_decref(value);
        return KVIO_ERR_EXISTS;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        json_decref(value);
        return KVIO_ERR_NOMEM;
    }
    char *leaf;
    json_t *parent = parent_of(result->detail, copy, &leaf);
    json_object_set_new(parent, leaf, value);
    free(copy);
    return KVIO_OK;
}

json_t *kvio_result_detail_object(kvio_result_t *result, const char *path)
{
    char copy[256], *leaf;
    snprintf(copy, sizeof(copy), "%s", path);
    json_t *parent = parent_of(result->detail, copy, &leaf);
    json_t *object = json_object_get(parent, leaf);
    if (!json_is_object(object)) {
        object = json_object();
        json_object_set_new(parent, leaf, object);
    }
    return object;
}

/* The value at a dotted path of root (the same splitting as parent_of).
 * When a value on the way is there but not an object, *blocked_p (when
 * not NULL) receives the length of path's part that names it. */
static const json_t *at_path_blocked(const json_t *root, const char *path, size_t *blocked_p)
{
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", path);
    const json_t *at = root;
    char *key = copy;
    for (char *dot = strchr(key, '.'); at != NULL && dot != NULL; dot = strchr(key, '.')) {
        if (dot[1] >= '0' && dot[1] <= '9') {
            char *next = strchr(dot + 1, '.');
            if (next == NULL)
                break;
            dot = next;
        }
        *dot = '\0';
        at = json_object_get(at, key);
        if (at != NULL && !json_is_object(at) && blocked_p != NULL)
            *blocked_p = (size_t)(dot - copy);
        key = dot + 1;
    }
    return json_object_get(at, key);
}

static const json_t *at_path(const json_t *root, const char *path)
{
    return at_path_blocked(root, path, NULL);
}

const json_t *kvio_result_detail(const kvio_result_t *result, const char *path)
{
    return result != NULL ? at_path(result->detail, path) : NULL;
}

/* ---- the verdict ------------------------------------------------------ */

void kvio_result_warn(kvio_result_t *result, const char *kind, double measured,
                      double threshold, const char *message)
{
    warning_t *bigger = realloc(result->warnings, (result->num_warnings + 1) * sizeof(*bigger));
    if (bigger == NULL)
        return;
    result->warnings = bigger;
    warning_t *warning = &result->warnings[result->num_warnings];
    *warning = (warning_t){.kind = strdup(kind), .message = strdup(message),
                           .measured = measured, .threshold = threshold};
    if (warning->kind == NULL || warning->message == NULL) {
        free(warning->kind);
        free(warning->message);
        return;
    }
    result->num_warnings++;
}

size_t kvio_result_num_warnings(const kvio_result_t *result)
{
    return result != NULL ? result->num_warnings : 0;
}

const char *kvio_result_warning_kind(const kvio_result_t *result, size_t index)
{
    return index < kvio_result_num_warnings(result) ? result->warnings[index].kind : NULL;
}

const char *kvio_result_warning_message(const kvio_result_t *result, size_t index)
{
    return index < kvio_result_num_warnings(result) ? result->warnings[index].message : NULL;
}

double kvio_result_warning_measured(const kvio_result_t *result, size_t index)
{
    return index < kvio_result_num_warnings(result) ? result->warnings[index].measured : NAN;
}

double kvio_result_warning_threshold(const kvio_result_t *result, size_t index)
{
    return index < kvio_result_num_warnings(result) ? result->warnings[index].threshold : NAN;
}

bool kvio_result_has_warning(const kvio_result_t *result, const char *kind)
{
    for (size_t w = 0; w < kvio_result_num_warnings(result); w++)
        if (strcmp(result->warnings[w].kind, kind) == 0)
            return true;
    return false;
}

bool kvio_result_valid(const kvio_result_t *result)
{
    return kvio_result_num_warnings(result) == 0;
}

/* ---- rendering -------------------------------------------------------- */

static json_t *figure_json(const kvio_result_t *result, int f)
{
    switch (figures[f].kind) {
    case KVIO_KIND_TEXT: return json_string(result->texts[f]);
    case KVIO_KIND_BOOL: return json_boolean(result->values[f] != 0);
    case KVIO_KIND_COUNT: return json_integer((json_int_t)llround(result->values[f]));
    default: return json_real(isfinite(result->values[f]) ? result->values[f] : 0);
    }
}

static json_t *render(const kvio_result_t *result, const char *list)
{
    /* The detail first, the figures over it: a figure is never shadowed. */
    json_t *metrics = json_deep_copy(result->detail);
    if (metrics == NULL)
        return NULL;
    for (int f = 0; f < NUM_DECLARED; f++) {
        const char *name = shown_name(&figures[f], list);
        if (!result->set[f] || name == NULL)
            continue;
        char copy[256], *leaf;
        snprintf(copy, sizeof(copy), "%s", name);
        json_t *parent = parent_of(metrics, copy, &leaf);
        json_object_set_new(parent, leaf, figure_json(result, f));
    }
    for (size_t l = 0; l < result->num_lists; l++) {
        json_t *array = json_array();
        for (size_t i = 0; i < result->lists[l].count; i++)
            json_array_append_new(array, render(result->lists[l].entries[i],
                                                result->lists[l].name));
        json_object_set_new(metrics, result->lists[l].name, array);
    }
    return metrics;
}

json_t *kvio_result_metrics_json(const kvio_result_t *result)
{
    return render(result, NULL);
}

json_t *kvio_result_entry_json(const kvio_result_t *entry, const char *list)
{
    return render(entry, list);
}

json_t *kvio_result_warnings_json(const kvio_result_t *result)
{
    json_t *array = json_array();
    for (size_t w = 0; w < kvio_result_num_warnings(result); w++) {
        const warning_t *warning = &result->warnings[w];
        json_array_append_new(array, json_pack("{s:s, s:f, s:f, s:s}", "kind", warning->kind,
                                               "measured", warning->measured, "threshold",
                                               warning->threshold, "message",
                                               warning->message));
    }
    return array;
}

/* ---- the one loader ---------------------------------------------------- */

/* Names earlier schema versions gave figures: (old path from the summary's
 * root, figure). */
typedef struct renamed {
    const char *old_name;
    kvio_figure_t figure;
} renamed_t;

static const renamed_t renamed_figures[] = {
    /* schema 1: beside metrics, under MLPerf Storage's name (another
     * meaning there). */
    {"storage.storage_throughput_tokens_per_s", KVIO_FIG_STORAGE_TOKENS_MOVED_PER_S},
    {"storage.cached_tokens_per_s", KVIO_FIG_STORAGE_CACHED_TOKENS_PER_S},
};

/* Takes the value at a dotted path out of root (nothing when absent). */
static void delete_path(json_t *root, const char *path)
{
    char copy[256], *leaf;
    snprintf(copy, sizeof(copy), "%s", path);
    json_t *at = root;
    char *key = copy;
    for (char *dot = strchr(key, '.'); at != NULL && dot != NULL; dot = strchr(key, '.')) {
        if (dot[1] >= '0' && dot[1] <= '9') {
            char *next = strchr(dot + 1, '.');
            if (next == NULL)
                break;
            dot = next;
        }
        *dot = '\0';
        at = json_object_get(at, key);
        key = dot + 1;
    }
    leaf = key;
    if (json_is_object(at))
        json_object_del(at, leaf);
}

/* Names earlier schema versions gave a list entry's figures: (list, old
 * key, figure). */
typedef struct renamed_entry {
    const char *list, *old_name;
    kvio_figure_t figure;
} renamed_entry_t;

static const renamed_entry_t renamed_entry_figures[] = {
    /* A tier's plug-in was its "name" until the kind took it. */
    {"tiers", "name", KVIO_FIG_TIER_KIND},
};

/* Whether a figure of this build lists its entries under name. */
static bool declared_list(const char *name)
{
    for (int f = 0; f < NUM_DECLARED; f++)
        if (figures[f].scope != NULL && strcmp(figures[f].scope, name) == 0)
            return true;
    return false;
}

/* One figure's value, as found in a summary, into result: false with the
 * reason (where is the object's place, "metrics." or "metrics.tiers[2].")
 * when it has the wrong type. null is no value. */
static bool load_figure(const json_t *value, int f, const char *where, const char *name,
                        kvio_result_t *result, char *error_p, size_t error_len)
{
    bool text = figures[f].kind == KVIO_KIND_TEXT;
    if (json_is_null(value))
        return true;
    if (text && json_is_string(value))
        kvio_result_set_text(result, (kvio_figure_t)f, json_string_value(value));
    else if (!text && json_is_number(value))
        kvio_result_set(result, (kvio_figure_t)f, json_number_value(value));
    else if (!text && json_is_boolean(value))
        kvio_result_set(result, (kvio_figure_t)f, json_is_true(value));
    else {
        snprintf(error_p, error_len, "%s%s is not a %s", where, name, text ? "string" : "number");
        return false;
    }
    return true;
}

/* Every figure found in object (an object of list; NULL: the run's), and
 * its lists' children; what no figure names stays in detail. false, with
 * the reason naming the key, when a figure's value, or an object on the
 * way to it, or a declared list has the wrong type (error_p may be NULL:
 * the entries ranks send each other, which are not checked). */
static bool load_object(const json_t *object, const char *list, const char *where,
                        kvio_result_t *result, char *error_p, size_t error_len)
{
    json_decref(result->detail);
    result->detail = json_deep_copy(object);
    if (result->detail == NULL)
        result->detail = json_object();
    bool checked = error_p != NULL;
    for (int f = 0; f < NUM_DECLARED; f++) {
        const char *name = shown_name(&figures[f], list);
        size_t blocked = 0;
        const json_t *value = name != NULL ? at_path_blocked(object, name, &blocked) : NULL;
        if (checked && blocked > 0) {
            snprintf(error_p, error_len, "%s%.*s is not an object", where, (int)blocked, name);
            return false;
        }
        if (value == NULL)
            continue;
        if (!load_figure(value, f, where, name, result, error_p, error_len) && checked)
            return false;
        delete_path(result->detail, name);
    }
    for (size_t r = 0; list != NULL && r < sizeof(renamed_entry_figures) /
                                               sizeof(renamed_entry_figures[0]); r++) {
        const renamed_entry_t *renamed = &renamed_entry_figures[r];
        const json_t *value = json_object_get(object, renamed->old_name);
        if (strcmp(renamed->list, list) == 0 && json_is_string(value) &&
            !kvio_result_has(result, renamed->figure)) {
            kvio_result_set_text(result, renamed->figure, json_string_value(value));
            json_object_del(result->detail, renamed->old_name);
        }
    }
    /* Lists of objects are children (a rank's, a tier's figures). */
    const char *key;
    json_t *value;
    void *next;
    json_object_foreach_safe((json_t *)object, next, key, value) {
        bool declared = checked && declared_list(key);
        if (declared && !json_is_array(value)) {
            snprintf(error_p, error_len, "%s%s is not a list", where, key);
            return false;
        }
        bool objects = json_is_array(value) &&
                       (declared ? json_array_size(value) > 0
                                 : json_is_object(json_array_get(value, 0)));
        if (!objects)
            continue;
        size_t index;
        json_t *entry;
        json_array_foreach(value, index, entry) {
            char place[128];
            snprintf(place, sizeof(place), "%s%s[%zu].", where, key, index);
            if (checked && !json_is_object(entry)) {
                snprintf(error_p, error_len, "%s%s[%zu] is not an object", where, key, index);
                return false;
            }
            kvio_result_t *child = kvio_result_child(result, key, index);
            if (child != NULL && json_is_object(entry) &&
                !load_object(entry, key, place, child, error_p, error_len))
                return false;
        }
        json_object_del(result->detail, key);
    }
    return true;
}

kvio_status_t kvio_result_load(const json_t *summary, kvio_result_t **result_p, char *error_p,
                               size_t error_len)
{
    const json_t *metrics = json_object_get(summary, "metrics");
    if (!json_is_object(summary) || (metrics != NULL && !json_is_object(metrics))) {
        snprintf(error_p, error_len, "not a kvio summary: %s",
                 !json_is_object(summary) ? "not a JSON object" : "metrics is not an object");
        return KVIO_ERR_PARSE;
    }
    kvio_result_t *result = kvio_result_create();
    if (result == NULL)
        return KVIO_ERR_NOMEM;
    if (metrics != NULL && !load_object(metrics, NULL, "metrics.", result, error_p, error_len)) {
        kvio_result_destroy(result);
        return KVIO_ERR_PARSE;
    }
    for (size_t r = 0; r < sizeof(renamed_figures) / sizeof(renamed_figures[0]); r++) {
        const json_t *value = at_path(summary, renamed_figures[r].old_name);
        if (json_is_number(value) && !kvio_result_has(result, renamed_figures[r].figure))
            kvio_result_set(result, renamed_figures[r].figure, json_number_value(value));
    }
    size_t index;
    const json_t *warning;
    json_array_foreach(json_object_get(summary, "warnings"), index, warning) {
        const json_t *kind = json_object_get(warning, "kind");
        const json_t *message = json_object_get(warning, "message");
        kvio_result_warn(result, json_is_string(kind) ? json_string_value(kind) : "unknown",
                         json_number_value(json_object_get(warning, "measured")),
                         json_number_value(json_object_get(warning, "threshold")),
                         json_is_string(message) ? json_string_value(message) : "");
    }
    /* A summary that says invalid without saying why (schema 1 wrote its
     * compare marks apart): one warning so that valid stays false. */
    if (json_is_false(json_object_get(summary, "valid")) && result->num_warnings == 0)
        kvio_result_warn(result, "unknown", NAN, NAN,
                         "the summary says valid: false without a warning");
    *result_p = result;
    return KVIO_OK;
}

void kvio_result_load_entry(const json_t *object, const char *list, kvio_result_t *entry)
{
    if (json_is_object(object))
        load_object(object, list, "", entry, NULL, 0);
}

/* ---- the table --------------------------------------------------------- */

bool kvio_result_cell(const kvio_result_t *result, kvio_figure_t figure, char *text_p,
                      size_t text_len)
{
    if (!kvio_result_has(result, figure))
        return false;
    const kvio_figure_decl_t *decl = &figures[figure];
    double value = result->values[figure];
    if ((decl->flags & KVIO_FIGURE_NONZERO) && value == 0)
        return false;
    const char *format = decl->cell != NULL && decl->cell[0] != '\0' ? decl->cell : "%.6g";
    if (decl->kind == KVIO_KIND_TEXT) {
        snprintf(text_p, text_len, "%s", result->texts[figure]);
        return true;
    }
    if (decl->kind == KVIO_KIND_FRACTION)
        value *= 100;
    if (decl->row != NULL && decl->row[0] == '@')
        format = "%.2f"; /* a grid cell: cell is its column's title */
    snprintf(text_p, text_len, format, value);
    return true;
}

/* The grid's columns, in the order they first appear. */
#define MAX_GRID_COLUMNS 8

void kvio_result_table_rows(const kvio_result_t *result, kvio_table_t *grid, kvio_table_t *rows)
{
    const char *columns[MAX_GRID_COLUMNS];
    size_t num_columns = 0;
    for (int f = 0; f < NUM_DECLARED; f++) {
        const char *row = figures[f].row;
        if (row == NULL || row[0] != '@')
            continue;
        bool known = false;
        for (size_t c = 0; c < num_columns; c++)
            known = known || strcmp(columns[c], figures[f].cell) == 0;
        if (!known && num_columns < MAX_GRID_COLUMNS)
            columns[num_columns++] = figures[f].cell;
    }
    /* Rows in the order they first appear; each row's cells in order. */
    bool grid_header = false;
    for (int f = 0; f < NUM_DECLARED; f++) {
        const char *row = figures[f].row;
        if (row == NULL || row[0] == '\0')
            continue;
        bool seen = false;
        for (int earlier = 0; earlier < f && !seen; earlier++)
            seen = figures[earlier].row != NULL && strcmp(figures[earlier].row, row) == 0;
        if (seen)
            continue;
        char cells[MAX_GRID_COLUMNS][64], text[512] = "";
        char cell[64];
        size_t at = 0;
        bool any = false;
        for (size_t c = 0; c < MAX_GRID_COLUMNS; c++)
            snprintf(cells[c], sizeof(cells[c]), "-");
        for (int g = f; g < NUM_DECLARED; g++) {
            if (figures[g].row == NULL || strcmp(figures[g].row, row) != 0)
                continue;
            if (!kvio_result_cell(result, (kvio_figure_t)g, cell, sizeof(cell)))
                continue;
            any = true;
            if (row[0] == '@') {
                for (size_t c = 0; c < num_columns; c++)
                    if (strcmp(columns[c], figures[g].cell) == 0)
                        snprintf(cells[c], sizeof(cells[c]), "%s", cell);
            } else if (at < sizeof(text)) {
                at += (size_t)snprintf(text + at, sizeof(text) - at, "%s", cell);
            }
        }
        if (!any)
            continue;
        if (row[0] == '@') {
            if (grid == NULL)
                continue;
            if (!grid_header) {
                const char *c[MAX_GRID_COLUMNS];
                for (size_t i = 0; i < MAX_GRID_COLUMNS; i++)
                    c[i] = i < num_columns ? columns[i] : NULL;
                kvio_table_add_row(grid, "latency", c[0], c[1], c[2], c[3], c[4], c[5], c[6],
                                   c[7], NULL);
                grid_header = true;
            }
            const char *c[MAX_GRID_COLUMNS];
            for (size_t i = 0; i < MAX_GRID_COLUMNS; i++)
                c[i] = i < num_columns ? cells[i] : NULL;
            kvio_table_add_row(grid, row + 1, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
                               NULL);
        } else if (rows != NULL) {
            kvio_table_add_row(rows, row, text, NULL);
        }
    }
}

/* ---- the reference table ------------------------------------------------ */

void kvio_figures_markdown(FILE *out)
{
    fprintf(out, "| figure | unit | source | meaning | shown |\n|---|---|---|---|---|\n");
    for (int f = 0; f < NUM_DECLARED; f++) {
        const kvio_figure_decl_t *decl = &figures[f];
        char shown[256] = "";
        size_t at = 0;
        if (decl->row != NULL && decl->row[0] != '\0')
            at += (size_t)snprintf(shown + at, sizeof(shown) - at, "table (%s)",
                                   decl->row[0] == '@' ? decl->row + 1 : decl->row);
        if (decl->compare != NULL && decl->compare[0] != '\0' && at < sizeof(shown))
            at += (size_t)snprintf(shown + at, sizeof(shown) - at, "%scompare", at ? ", " : "");
        if (decl->vllm != NULL && decl->vllm[0] != '\0' && at < sizeof(shown))
            snprintf(shown + at, sizeof(shown) - at, "%svllm.json `%s`", at ? ", " : "",
                     decl->vllm);
        char source[192];
        if (decl->source == KVIO_SOURCE_DERIVED &&
            decl->derive.denominator != KVIO_NUM_FIGURES)
            snprintf(source, sizeof(source), "derived: %s / %s",
                     figures[decl->derive.numerator].name,
                     figures[decl->derive.denominator].name);
        else
            snprintf(source, sizeof(source), "%s", kvio_figure_source_name(decl->source));
        char name[160];
        if (decl->scope != NULL)
            snprintf(name, sizeof(name), "%s[].%s", decl->scope, shown_name(decl, decl->scope));
        else
            snprintf(name, sizeof(name), "%s", decl->name);
        fprintf(out, "| `%s` | %s | %s | %s | %s |\n", name,
                decl->unit[0] != '\0' ? decl->unit : "-", source, decl->meaning,
                shown[0] != '\0' ? shown : "-");
    }
}
