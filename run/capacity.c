/* kvio capacity (include/kvio/capacity.h): the highest arrival rate that
 * still meets the SLO for the share of requests asked. A probe is a whole
 * simulate run at one rate with the SLO set; it meets when summary.json's
 * slo_attainment.both is at least the share and the run kept up with the
 * rate (served 80 % of what was offered). The search first brackets
 * (doubling from the workload's own rate while probes meet, halving while
 * they fail), then bisects until the bracket is within the tolerance; the
 * capacity is the highest rate that met. Simulate is deterministic, so the
 * same workload gives the same answer. */
#include "kvio/capacity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/format.h"
#include "kvio/results.h"
#include "kvio/run.h"
#include "kvio/stream.h"

#define MAX_SETS 132

/* One probe: the rate and what its run measured. */
typedef struct probe {
    double rate;
    double attain, ttft_attain, tpot_attain; /* shares of requests within the SLO */
    double throughput, offered, ttft_p99_ms, tpot_p99_ms;
    bool overloaded; /* served under OVERLOAD_SERVED of what was offered */
    bool met;
    char dir[1200];
} probe_t;

/* A run that serves under 80 % of the rate offered fell behind: its queue
 * grows through the run, and the share within the SLO says more about the
 * run's length than about the rate (TPOT alone stays met while TTFT grows
 * without bound). Such a probe fails, the bound "throughput". As kvio
 * compare's overload mark. */
#define OVERLOAD_SERVED 0.8

/* Doublings of the rate while probes meet, at most (2^24 x the start). */
#define MAX_DOUBLINGS 24

typedef struct search {
    const kvio_capacity_options_t *options;
    const char *variant_set;  /* KEY=VALUE of a --vary value, or NULL */
    const char *point;        /* what varies: "rate" or "users" */
    const char *users_key;    /* --users: stream.users (the stream's closed loop) or
                                 serve.max_concurrency */
    char directory[1024];
    char ttft_set[96], tpot_set[96];
    probe_t probes[KVIO_CAPACITY_MAX_PROBES];
    size_t num_probes;
} search_t;

static double number_at(const json_t *metrics, const char *key, const char *field)
{
    const json_t *value = json_object_get(metrics, key);
    if (field != NULL)
        value = json_object_get(value, field);
    return json_is_number(value) ? json_number_value(value) : NAN;
}

/* The workload at rate with the SLO set, checked as kvio validate does. */
static kvio_status_t load_at(search_t *search, double rate, kvio_workload_t *workload_p,
                             char *error_p, size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    const char *sets[MAX_SETS];
    size_t count = 0;
    for (size_t i = 0; i < options->num_sets && count < MAX_SETS - 4; i++)
        sets[count++] = options->sets[i];
    if (search->variant_set != NULL)
        sets[count++] = search->variant_set;
    char rate_set[64];
    if (options->users)
        snprintf(rate_set, sizeof(rate_set), "%s=%.0f", search->users_key, rate);
    else
        snprintf(rate_set, sizeof(rate_set), "stream.arrival.rate=%.9g", rate);
    sets[count++] = rate_set;
    if (search->ttft_set[0] != '\0')
        sets[count++] = search->ttft_set;
    if (search->tpot_set[0] != '\0')
        sets[count++] = search->tpot_set;
    kvio_status_t status = kvio_workload_load(options->source, sets, count, workload_p, error_p,
                                              error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_workload_check(workload_p, error_p, error_len);
    if (status != KVIO_OK)
        kvio_workload_free(workload_p);
    return status;
}

/* Runs the probe at rate into DIR/rate-<rate>. */
static kvio_status_t probe_at(search_t *search, double rate, probe_t **probe_p, char *error_p,
                              size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    if (search->num_probes == KVIO_CAPACITY_MAX_PROBES) {
        snprintf(error_p, error_len, "capacity: %d probes without converging (widen "
                 "--tolerance or give --low/--high)", KVIO_CAPACITY_MAX_PROBES);
        return KVIO_ERR_CONFIG;
    }
    if (options->stop != NULL && *options->stop) {
        snprintf(error_p, error_len, "capacity interrupted before the probe at %.6g req/s",
                 rate);
        return KVIO_ERR_INTERRUPTED;
    }
    probe_t *probe = &search->probes[search->num_probes];
    *probe = (probe_t){.rate = rate};
    snprintf(probe->dir, sizeof(probe->dir), "%s/%s-%.6g", search->directory, search->point,
             rate);
    kvio_workload_t workload;
    char error[1024] = "";
    kvio_status_t status = load_at(search, rate, &workload, error, sizeof(error));
    json_t *summary = NULL;
    if (status == KVIO_OK) {
        kvio_run_options_t run_options = {.output_dir = probe->dir, .force = options->force,
                                          .source = options->source, .quiet = true,
                                          .stop = options->stop, .summary_p = &summary};
        kvio_run_result_t result;
        status = kvio_run(&workload, &run_options, &result, error, sizeof(error));
        kvio_workload_free(&workload);
    }
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "capacity: the probe at %.6g req/s: %s", rate, error);
        json_decref(summary);
        return status;
    }
    const json_t *metrics = json_object_get(summary, "metrics");
    probe->attain = number_at(metrics, "slo_attainment", "both");
    probe->ttft_attain = number_at(metrics, "slo_attainment", "ttft");
    probe->tpot_attain = number_at(metrics, "slo_attainment", "tpot");
    probe->throughput = number_at(metrics, "request_throughput", NULL);
    probe->offered = number_at(metrics, "offered_rate", NULL);
    probe->ttft_p99_ms = number_at(metrics, "ttft_ms", "p99");
    probe->tpot_p99_ms = number_at(metrics, "tpot_ms", "p99");
    /* Closed loop, the offered rate is what was served: no overload. */
    probe->overloaded = !options->users && probe->offered > 0 &&
                        probe->throughput < OVERLOAD_SERVED * probe->offered;
    probe->met = probe->attain >= options->attain && !probe->overloaded;
    json_decref(summary);
    search->num_probes++;
    *probe_p = probe;
    return KVIO_OK;
}

/* Probes rate, which lies in [*low_p, *high_p]: it becomes the new low if
 * it met the SLO, else the new high. */
static kvio_status_t narrow_at(search_t *search, double rate, double *low_p, double *high_p,
                               char *error_p, size_t error_len)
{
    probe_t *probe = NULL;
    kvio_status_t status = probe_at(search, rate, &probe, error_p, error_len);
    if (status == KVIO_OK) {
        if (probe->met)
            *low_p = rate;
        else
            *high_p = rate;
    }
    return status;
}

/* The bracket [low, high]: low met (0: none found yet), high failed. */
static kvio_status_t bracket(search_t *search, double start, double *low_p, double *high_p,
                             char *error_p, size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    double low = options->low, high = options->high;
    probe_t *probe = NULL;
    kvio_status_t status = KVIO_OK;
    if (high <= 0) {
        high = low > 0 ? 2 * low : start;
        int doublings = 0;
        while ((status = probe_at(search, high, &probe, error_p, error_len)) == KVIO_OK &&
               probe->met) {
            low = high;
            high *= 2;
            if (++doublings == MAX_DOUBLINGS) {
                snprintf(error_p, error_len, "capacity: every rate up to %.6g req/s meets the "
                         "SLO (give --high, or a tighter SLO)", low);
                return KVIO_ERR_CONFIG;
            }
        }
    }
    /* Users are whole: below one there is none to try (capacity 0). */
    while (status == KVIO_OK && low <= 0 && (!options->users || high >= 2))
        status = narrow_at(search, options->users ? floor(high / 2) : high / 2, &low, &high,
                           error_p, error_len);
    *low_p = low;
    *high_p = high;
    return status;
}

static int compare_probes(const void *a, const void *b)
{
    double x = ((const probe_t *)a)->rate, y = ((const probe_t *)b)->rate;
    return x < y ? -1 : x > y;
}

static json_t *result_json(search_t *search, double capacity, double high)
{
    const kvio_capacity_options_t *options = search->options;
    qsort(search->probes, search->num_probes, sizeof(probe_t), compare_probes);
    json_t *curve = json_array();
    const probe_t *first_failed = NULL;
    for (size_t i = 0; i < search->num_probes; i++) {
        const probe_t *p = &search->probes[i];
        if (!p->met && first_failed == NULL)
            first_failed = p;
        json_array_append_new(
            curve, json_pack("{s:f, s:b, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}",
                             search->point, p->rate, "met", p->met, "overloaded", p->overloaded,
                             "attainment", p->attain,
                             "ttft_attainment", p->ttft_attain, "tpot_attainment",
                             p->tpot_attain, "request_throughput", p->throughput,
                             "offered_rate", p->offered, "ttft_p99_ms", p->ttft_p99_ms,
                             "tpot_p99_ms", p->tpot_p99_ms, "dir", p->dir));
    }
    /* The bound that fails the most requests where the SLO first fails. */
    const char *binding = first_failed == NULL ? "none"
                          : first_failed->attain >= options->attain ? "throughput"
                          : first_failed->ttft_attain <= first_failed->tpot_attain ? "ttft"
                                                                                   : "tpot";
    json_t *result = json_pack(
        "{s:s, s:s, s:s, s:f, s:f, s:{s:s?, s:s?}, s:f, s:s, s:I, s:o}", "workload",
        options->source, "directory", search->directory, "varies",
        options->users ? search->users_key : "stream.arrival.rate", "capacity", capacity,
        "first_failing", high, "slo", "ttft",
        search->ttft_set[0] ? strchr(search->ttft_set, '=') + 1 : NULL, "tpot",
        search->tpot_set[0] ? strchr(search->tpot_set, '=') + 1 : NULL, "attain",
        options->attain, "binding", binding, "probes", (json_int_t)search->num_probes, "curve",
        curve);
    /* The capacity under its unit's name too. */
    json_object_set_new(result, options->users ? "capacity_users" : "capacity_rps",
                        json_real(capacity));
    return result;
}

/* The options and the workload fit a search: simulate, a synthetic stream
 * whose rate can vary, an SLO. */
static kvio_status_t check_search(search_t *search, double *start_p, char *error_p,
                                  size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    if (!(options->attain > 0 && options->attain <= 1) ||
        !(options->tolerance > 0 && options->tolerance < 1) || options->low < 0 ||
        (options->high > 0 && options->high <= options->low)) {
        snprintf(error_p, error_len, "capacity: --attain takes (0, 1], --tolerance (0, 1), "
                 "and --low below --high");
        return KVIO_ERR_CONFIG;
    }
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(options->source, options->sets, options->num_sets,
                                              &workload, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    /* The SLO given, else the workload's own (slo:). */
    int64_t ttft_ns = options->ttft_ns, tpot_ns = options->tpot_ns;
    if (ttft_ns <= 0 && tpot_ns <= 0) {
        ttft_ns = workload.slo.ttft_ns;
        tpot_ns = workload.slo.tpot_ns;
    }
    if (ttft_ns > 0)
        snprintf(search->ttft_set, sizeof(search->ttft_set), "slo.ttft=%lldns",
                 (long long)ttft_ns);
    if (tpot_ns > 0)
        snprintf(search->tpot_set, sizeof(search->tpot_set), "slo.tpot=%lldns",
                 (long long)tpot_ns);
    const kvio_stream_config_t *stream = &workload.stream;
    bool rate_fixed = stream->trace.path != NULL && stream->trace.path[0] != '\0';
    if (ttft_ns <= 0 && tpot_ns <= 0) {
        snprintf(error_p, error_len, "capacity: %s has no SLO: give --slo ttft=DURATION, "
                 "tpot=DURATION or both (or slo: in the workload)", options->source);
        status = KVIO_ERR_CONFIG;
    } else if (workload.mode != KVIO_MODE_SIMULATE) {
        snprintf(error_p, error_len, "capacity: %s: the search bisects simulate runs (set "
                 "mode: simulate, --set mode=simulate)", options->source);
        status = KVIO_ERR_CONFIG;
    } else if (!options->users && rate_fixed) {
        snprintf(error_p, error_len, "capacity: %s: a trace's arrivals are its own; the search "
                 "varies stream.arrival.rate of a synthetic stream (or --users, a closed "
                 "loop)", options->source);
        status = KVIO_ERR_CONFIG;
    } else if (!options->users && (stream->arrival.process == KVIO_ARRIVAL_PHASES ||
                                   stream->arrival.process == KVIO_ARRIVAL_BATCH)) {
        snprintf(error_p, error_len, "capacity: %s: stream.arrival.process must be poisson, "
                 "gamma or constant (a rate to vary; or --users, a closed loop)",
                 options->source);
        status = KVIO_ERR_CONFIG;
    }
    /* --users varies the stream's own users where it has a closed loop
     * (MLPerf Storage's QoS search), else the concurrency limit. */
    search->users_key = stream->users > 0 ? "stream.users" : "serve.max_concurrency";
    *start_p = !options->users                     ? workload.stream.arrival.rate
               : stream->users > 0                 ? (double)stream->users
               : workload.serve.max_concurrency > 0 ? (double)workload.serve.max_concurrency
                                                    : 1;
    if (search->directory[0] != '\0') {
        /* a --vary value's, set by the caller */
    } else if (options->output_dir != NULL) {
        snprintf(search->directory, sizeof(search->directory), "%s", options->output_dir);
    } else {
        char stamp[64];
        kvio_format_utc(kvio_wall_time_ns(), stamp, sizeof(stamp));
        for (char *c = stamp; *c != '\0'; c++)
            if (*c == ':' || *c == ' ')
                *c = '-';
        snprintf(search->directory, sizeof(search->directory), "results/capacity-%s-%s",
                 workload.name, stamp);
    }
    kvio_workload_free(&workload);
    return status;
}

/* One search (a --vary value's when variant_set is set, into directory). */
static kvio_status_t search_one(const kvio_capacity_options_t *options, const char *variant_set,
                                const char *directory, json_t **result_p, char *error_p,
                                size_t error_len)
{
    *result_p = NULL;
    search_t *search = calloc(1, sizeof(*search));
    if (search == NULL)
        return KVIO_ERR_NOMEM;
    search->options = options;
    search->variant_set = variant_set;
    search->point = options->users ? "users" : "rate";
    if (directory != NULL)
        snprintf(search->directory, sizeof(search->directory), "%s", directory);
    double start = 0, low = 0, high = 0;
    kvio_results_t *top = NULL;
    kvio_status_t status = check_search(search, &start, error_p, error_len);
    if (status == KVIO_OK) {
        /* Every probe's workload must load before the first runs. */
        kvio_workload_t workload;
        status = load_at(search, start > 0 ? start : 1, &workload, error_p, error_len);
        if (status == KVIO_OK)
            kvio_workload_free(&workload);
    }
    if (status == KVIO_OK)
        status = kvio_results_create(search->directory, "capacity", options->force, &top,
                                     error_p, error_len);
    if (status == KVIO_OK)
        status = bracket(search, start > 0 ? start : 1, &low, &high, error_p, error_len);
    /* Rates to the tolerance; users to the last whole one. */
    while (status == KVIO_OK && low > 0 &&
           (options->users ? high - low > 1 : (high - low) / high > options->tolerance))
        status = narrow_at(search, options->users ? floor((low + high) / 2) : (low + high) / 2,
                           &low, &high, error_p, error_len);
    if (status == KVIO_OK) {
        json_t *result = result_json(search, low, high);
        status = kvio_results_write_json(top, "capacity.json", result, error_p, error_len);
        if (status == KVIO_OK)
            *result_p = result;
        else
            json_decref(result);
    }
    kvio_results_destroy(top);
    free(search);
    return status;
}

kvio_status_t kvio_capacity(const kvio_capacity_options_t *options, json_t **result_p,
                            char *error_p, size_t error_len)
{
    if (options->num_vary == 0)
        return search_one(options, NULL, NULL, result_p, error_p, error_len);
    *result_p = NULL;
    if (options->output_dir == NULL) {
        snprintf(error_p, error_len, "capacity: --vary needs -o DIR (one search per value in "
                 "DIR/KEY-VALUE)");
        return KVIO_ERR_CONFIG;
    }
    kvio_results_t *top = NULL;
    kvio_status_t status = kvio_results_create(options->output_dir, "capacity", options->force,
                                               &top, error_p, error_len);
    json_t *variants = json_array();
    for (size_t v = 0; status == KVIO_OK && v < options->num_vary; v++) {
        char set[512], directory[1200];
        snprintf(set, sizeof(set), "%s=%s", options->vary_key, options->vary_values[v]);
        snprintf(directory, sizeof(directory), "%s/%s-%s", options->output_dir,
                 options->vary_key, options->vary_values[v]);
        for (char *c = directory + strlen(options->output_dir) + 1; *c != '\0'; c++)
            if (*c == '/' || *c == ' ')
                *c = '_';
        json_t *one = NULL;
        status = search_one(options, set, directory, &one, error_p, error_len);
        if (status == KVIO_OK) {
            json_object_set_new(one, "vary", json_string(options->vary_key));
            json_object_set_new(one, "value", json_string(options->vary_values[v]));
            json_array_append_new(variants, one);
        }
    }
    if (status == KVIO_OK) {
        json_t *result = json_pack("{s:s, s:s, s:s, s:o}", "workload", options->source,
                                   "directory", options->output_dir, "vary", options->vary_key,
                                   "variants", variants);
        variants = NULL;
        status = kvio_results_write_json(top, "capacity.json", result, error_p, error_len);
        if (status == KVIO_OK)
            *result_p = result;
        else
            json_decref(result);
    }
    json_decref(variants);
    kvio_results_destroy(top);
    return status;
}

static void table_one(const json_t *result, FILE *out)
{
    bool users = json_object_get(result, "capacity_users") != NULL;
    const char *point = users ? "users" : "rate";
    const json_t *value = json_object_get(result, "value");
    char variant[256] = "";
    if (value != NULL)
        snprintf(variant, sizeof(variant), " %s=%s",
                 json_string_value(json_object_get(result, "vary")), json_string_value(value));
    fprintf(out, "kvio capacity %s%s: %.4g %s (SLO met by %.0f%% of requests; binding: %s)\n",
            json_string_value(json_object_get(result, "workload")), variant,
            json_number_value(json_object_get(result, "capacity")), users ? "users" : "req/s",
            100 * json_number_value(json_object_get(result, "attain")),
            json_string_value(json_object_get(result, "binding")));
    fprintf(out, "  %10s %6s %10s %10s %10s %12s %12s\n", point, "met", "attained", "ttft",
            "tpot", "ttft p99 ms", "tpot p99 ms");
    const json_t *curve = json_object_get(result, "curve");
    for (size_t i = 0; i < json_array_size(curve); i++) {
        const json_t *p = json_array_get(curve, i);
#define F(key) json_number_value(json_object_get(p, key))
        fprintf(out, "  %10.4g %6s %9.1f%% %9.1f%% %9.1f%% %12.2f %12.2f\n", F(point),
                json_is_true(json_object_get(p, "met")) ? "yes" : "no", 100 * F("attainment"),
                100 * F("ttft_attainment"), 100 * F("tpot_attainment"), F("ttft_p99_ms"),
                F("tpot_p99_ms"));
#undef F
    }
}

void kvio_capacity_table(const json_t *result, FILE *out)
{
    const json_t *variants = json_object_get(result, "variants");
    if (variants == NULL)
        table_one(result, out);
    for (size_t v = 0; v < json_array_size(variants); v++)
        table_one(json_array_get(variants, v), out);
    fprintf(out, "  results: %s (capacity.json)\n",
            json_string_value(json_object_get(result, "directory")));
}
