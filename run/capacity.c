/* kvio capacity (include/kvio/capacity.h): the highest load that still
 * meets the SLO for the share of requests asked. A probe runs the workload
 * at one configured rate with several seeds, the SLO set and, when the
 * workload has none, a warm-up (the first part of the duration, where chat
 * sessions are still ramping) left out of every figure; it meets when the
 * attainment of every seed reaches the share and no seed fell behind (its
 * verdict says overloaded). The search brackets (doubling from the
 * workload's rate while probes meet, halving while they fail), then
 * bisects the configured rate to the tolerance. The knee is the offered
 * rate as measured at the highest configured rate that met below the first
 * that failed (the seeds' mean and 95 % interval): a configured rate is
 * what the stream was asked for, not what it offered. A curve whose met and
 * failed probes interleave is said to be, not bisected through. The
 * confirm serves the knee's configured rate for the workload's own
 * duration (a --set duration= shortens the probes, not the confirm) with
 * the probes' seeds, and says whether the SLO held. */
#include "kvio/capacity.h"

#include "run/run_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/format.h"
#include "kvio/results.h"
#include "kvio/run.h"
#include "kvio/stats.h"
#include "kvio/stream.h"

#define MAX_SETS 132
#define DEFAULT_SEEDS 3
#define DEFAULT_WARMUP_SHARE 0.2

/* Doublings of the rate while probes meet, at most (2^24 x the start). */
#define MAX_DOUBLINGS 24

/* One run of a probe: what its result says. */
typedef struct seed_run {
    double attain, ttft_attain, tpot_attain; /* shares of requests within the SLO */
    double throughput, offered, ttft_p99_ms, tpot_p99_ms;
    bool overloaded;                         /* its verdict */
} seed_run_t;

/* One probe: the configured rate (or users) and its seeds' runs. */
typedef struct probe {
    double rate;
    seed_run_t runs[KVIO_CAPACITY_MAX_SEEDS];
    long num_runs;
    double attain, ttft_attain, tpot_attain, throughput, ttft_p99_ms, tpot_p99_ms; /* means */
    double worst_attain;       /* the lowest seed's attainment */
    double offered, offered_ci95;
    bool overloaded, met;
    char dir[1300];
} probe_t;

typedef struct search {
    const kvio_capacity_options_t *options;
    const char *variant_set;  /* KEY=VALUE of a --vary value, or NULL */
    const char *variant_value;
    const char *point;        /* what varies: "rate" or "users" */
    const char *users_key;    /* --users: stream.users (the stream's closed loop) or
                                 serve.max_concurrency */
    char directory[1200];
    char ttft_set[96], tpot_set[96], warmup_set[96];
    double warmup_s;          /* left out of every probe (0: the workload's own) */
    double duration_s;
    long long base_seed;
    long seeds;
    probe_t probes[KVIO_CAPACITY_MAX_PROBES];
    size_t num_probes;
    /* The answer. */
    const probe_t *knee;       /* the highest probe that met below the first failure */
    const probe_t *first_failed;
    bool monotone;             /* no probe met above one that failed */
    double reentry_rate;       /* not monotone: the lowest met rate above a failure */
    probe_t confirm;
    bool confirmed;            /* the confirm was made */
    bool confirm_reused;       /* the probes ran the full duration: the knee's probe is it */
    double full_duration_s;    /* the workload's own duration (no duration= of --set) */
    char duration_set[96];     /* while confirming: duration=<full> */
    uint64_t start_ns;
} search_t;

struct kvio_capacity {
    const kvio_capacity_options_t *options;
    search_t **searches;
    size_t num_searches;
    uint64_t start_ns;
};

/* The workload at rate with the SLO, warm-up and seed set, checked as kvio
 * validate does. */
static kvio_status_t load_at(search_t *search, double rate, long long seed,
                             kvio_workload_t *workload_p, char *error_p, size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    const char *sets[MAX_SETS];
    size_t count = 0;
    for (size_t i = 0; i < options->num_sets && count < MAX_SETS - 7; i++)
        sets[count++] = options->sets[i];
    if (search->variant_set != NULL)
        sets[count++] = search->variant_set;
    char rate_set[64], seed_set[64];
    if (options->users)
        snprintf(rate_set, sizeof(rate_set), "%s=%.0f", search->users_key, rate);
    else
        snprintf(rate_set, sizeof(rate_set), "stream.arrival.rate=%.9g", rate);
    sets[count++] = rate_set;
    snprintf(seed_set, sizeof(seed_set), "seed=%lld", seed);
    sets[count++] = seed_set;
    if (search->ttft_set[0] != '\0')
        sets[count++] = search->ttft_set;
    if (search->tpot_set[0] != '\0')
        sets[count++] = search->tpot_set;
    if (search->warmup_set[0] != '\0')
        sets[count++] = search->warmup_set;
    if (search->duration_set[0] != '\0')
        sets[count++] = search->duration_set;
    kvio_status_t status = kvio_workload_load(options->source, sets, count, workload_p, error_p,
                                              error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_workload_check(workload_p, error_p, error_len);
    if (status != KVIO_OK)
        kvio_workload_free(workload_p);
    return status;
}

/* One run at rate with seed into dir: its figures and verdict. */
static kvio_status_t run_seed(search_t *search, double rate, long long seed, const char *dir,
                              seed_run_t *run_p, char *error_p, size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    if (options->stop != NULL && *options->stop) {
        snprintf(error_p, error_len, "capacity interrupted before the probe at %.6g %s", rate,
                 options->users ? "users" : "req/s");
        return KVIO_ERR_INTERRUPTED;
    }
    kvio_workload_t workload;
    char error[1024] = "";
    kvio_status_t status = load_at(search, rate, seed, &workload, error, sizeof(error));
    kvio_result_t *result = NULL;
    if (status == KVIO_OK) {
        kvio_run_options_t run_options = {.output_dir = dir, .force = options->force,
                                          .source = options->source, .quiet = true,
                                          .stop = options->stop, .result_p = &result};
        kvio_run_result_t ran;
        status = kvio_run(&workload, &run_options, &ran, error, sizeof(error));
        kvio_workload_free(&workload);
    }
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "capacity: the probe at %.6g %s (seed %lld): %s", rate,
                 options->users ? "users" : "req/s", seed, error);
        kvio_result_destroy(result);
        return status;
    }
    *run_p = (seed_run_t){
        .attain = kvio_result_get(result, KVIO_FIG_SLO_ATTAINMENT),
        .ttft_attain = kvio_result_get(result, KVIO_FIG_SLO_TTFT_ATTAINMENT),
        .tpot_attain = kvio_result_get(result, KVIO_FIG_SLO_TPOT_ATTAINMENT),
        .throughput = kvio_result_get(result, KVIO_FIG_REQUEST_THROUGHPUT),
        .offered = kvio_result_get(result, KVIO_FIG_OFFERED_RATE),
        .ttft_p99_ms = kvio_result_get(result, KVIO_FIG_TTFT_MS_P99),
        .tpot_p99_ms = kvio_result_get(result, KVIO_FIG_TPOT_MS_P99),
        /* A run that fell behind: its queue grew through the run, and its
         * share within the SLO says more about the run's length than about
         * the rate. A closed loop cannot fall behind. */
        .overloaded = kvio_result_has_warning(result, "overload")};
    kvio_result_destroy(result);
    return KVIO_OK;
}

static double mean_of(const probe_t *probe, size_t offset)
{
    double sum = 0;
    for (long r = 0; r < probe->num_runs; r++)
        sum += *(const double *)((const char *)&probe->runs[r] + offset);
    return probe->num_runs > 0 ? sum / (double)probe->num_runs : NAN;
}

/* The probe's seeds' figures together. */
static void probe_sum_up(probe_t *probe, double attain)
{
    probe->attain = mean_of(probe, offsetof(seed_run_t, attain));
    probe->ttft_attain = mean_of(probe, offsetof(seed_run_t, ttft_attain));
    probe->tpot_attain = mean_of(probe, offsetof(seed_run_t, tpot_attain));
    probe->throughput = mean_of(probe, offsetof(seed_run_t, throughput));
    probe->ttft_p99_ms = mean_of(probe, offsetof(seed_run_t, ttft_p99_ms));
    probe->tpot_p99_ms = mean_of(probe, offsetof(seed_run_t, tpot_p99_ms));
    double offered[KVIO_CAPACITY_MAX_SEEDS];
    probe->overloaded = false;
    probe->worst_attain = 1;
    for (long r = 0; r < probe->num_runs; r++) {
        offered[r] = probe->runs[r].offered;
        probe->overloaded = probe->overloaded || probe->runs[r].overloaded;
        probe->worst_attain = fmin(probe->worst_attain, probe->runs[r].attain);
    }
    kvio_mean_ci95(offered, probe->num_runs, &probe->offered, &probe->offered_ci95);
    /* Every seed must meet it: a knee met on average fails about every
     * other stream at its rate. */
    probe->met = probe->worst_attain >= attain && !probe->overloaded;
}

/* A probe at rate, its seeds' runs in DIR/<point>-<rate>/seed-<s>. */
static kvio_status_t run_probe(search_t *search, double rate, const char *name, probe_t *probe,
                               char *error_p, size_t error_len)
{
    *probe = (probe_t){.rate = rate};
    snprintf(probe->dir, sizeof(probe->dir), "%s/%s-%.6g", search->directory, name, rate);
    kvio_status_t status = KVIO_OK;
    for (long r = 0; r < search->seeds && status == KVIO_OK; r++) {
        char dir[1400];
        snprintf(dir, sizeof(dir), "%s/seed-%lld", probe->dir, search->base_seed + r);
        status = run_seed(search, rate, search->base_seed + r, dir, &probe->runs[r], error_p,
                          error_len);
        if (status == KVIO_OK)
            probe->num_runs++;
    }
    if (status == KVIO_OK)
        probe_sum_up(probe, search->options->attain);
    return status;
}

static kvio_status_t probe_at(search_t *search, double rate, probe_t **probe_p, char *error_p,
                              size_t error_len)
{
    if (search->num_probes == KVIO_CAPACITY_MAX_PROBES) {
        snprintf(error_p, error_len, "capacity: %d probes without converging (widen "
                 "--tolerance or give --low/--high)", KVIO_CAPACITY_MAX_PROBES);
        return KVIO_ERR_CONFIG;
    }
    probe_t *probe = &search->probes[search->num_probes];
    kvio_status_t status = run_probe(search, rate, search->point, probe, error_p, error_len);
    if (status == KVIO_OK) {
        search->num_probes++;
        *probe_p = probe;
    }
    return status;
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

/* The curve in rate order; the knee below the first failure; whether a
 * probe met above a failure (the curve is not monotone: near the knee the
 * share within the SLO can rise again with the rate). */
static void find_knee(search_t *search)
{
    qsort(search->probes, search->num_probes, sizeof(probe_t), compare_probes);
    search->knee = search->first_failed = NULL;
    search->monotone = true;
    for (size_t i = 0; i < search->num_probes; i++) {
        const probe_t *probe = &search->probes[i];
        if (!probe->met && search->first_failed == NULL)
            search->first_failed = probe;
        else if (probe->met && search->first_failed == NULL)
            search->knee = probe;
        else if (probe->met && search->monotone) {
            search->monotone = false;
            search->reentry_rate = probe->rate;
        }
    }
}

/* The workload's own duration: as loaded with every --set but a
 * duration= (the confirm's). */
static kvio_status_t own_duration(const search_t *search, double *duration_s_p, char *error_p,
                                  size_t error_len)
{
    const kvio_capacity_options_t *options = search->options;
    const char *sets[MAX_SETS];
    size_t count = 0;
    for (size_t i = 0; i < options->num_sets && count < MAX_SETS; i++)
        if (strncmp(options->sets[i], "duration=", 9) != 0)
            sets[count++] = options->sets[i];
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(options->source, sets, count, &workload, error_p,
                                              error_len);
    if (status != KVIO_OK)
        return status;
    *duration_s_p = (double)workload.duration_ns / 1e9;
    kvio_workload_free(&workload);
    return KVIO_OK;
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
    search->base_seed = workload.seed;
    search->duration_s = (double)workload.duration_ns / 1e9;
    if (status == KVIO_OK)
        status = own_duration(search, &search->full_duration_s, error_p, error_len);
    /* A warm-up left out of every probe: the workload's own, else the first
     * share of its duration (chat sessions ramp up through it). */
    double share = options->warmup_share == 0 ? DEFAULT_WARMUP_SHARE : options->warmup_share;
    /* A batch's requests all arrive at once: no ramp to leave out. */
    bool batch = workload.stream.arrival.process == KVIO_ARRIVAL_BATCH;
    if (workload.warmup_ns <= 0 && workload.warmup_requests <= 0 && share > 0 && !batch &&
        workload.duration_ns > 0) {
        search->warmup_s = share * search->duration_s;
        snprintf(search->warmup_set, sizeof(search->warmup_set), "warmup=%.6gs",
                 search->warmup_s);
    } else {
        search->warmup_s = (double)workload.warmup_ns / 1e9;
    }
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

/* The confirm: the knee's configured rate for the workload's own duration
 * (without a duration= of --set: a knee found on short probes may not
 * hold for the whole run, sessions still ramping), each of the probe's
 * seeds. When the probes ran that duration already, the knee's probe is
 * the confirm (every seed met there), and nothing runs again. */
static kvio_status_t confirm(search_t *search, char *error_p, size_t error_len)
{
    if (search->knee == NULL || search->options->no_confirm)
        return KVIO_OK;
    probe_t *probe = &search->confirm;
    if (fabs(search->full_duration_s - search->duration_s) < 1e-9) {
        *probe = *search->knee;
        search->confirmed = search->confirm_reused = true;
        return KVIO_OK;
    }
    snprintf(search->duration_set, sizeof(search->duration_set), "duration=%.9gs",
             search->full_duration_s);
    /* The warm-up is a share of the duration the probes ran. */
    char warmup_set[sizeof(search->warmup_set)];
    memcpy(warmup_set, search->warmup_set, sizeof(warmup_set));
    if (search->warmup_set[0] != '\0' && search->duration_s > 0)
        snprintf(search->warmup_set, sizeof(search->warmup_set), "warmup=%.6gs",
                 search->warmup_s * search->full_duration_s / search->duration_s);
    kvio_status_t status = run_probe(search, search->knee->rate, "confirm", probe, error_p,
                                     error_len);
    search->duration_set[0] = '\0';
    memcpy(search->warmup_set, warmup_set, sizeof(warmup_set));
    search->confirmed = status == KVIO_OK;
    return status;
}

/* One search (a --vary value's when variant_set is set, into directory). */
static kvio_status_t search_one(const kvio_capacity_options_t *options, const char *variant_set,
                                const char *variant_value, const char *directory,
                                search_t **search_p, char *error_p, size_t error_len)
{
    search_t *search = calloc(1, sizeof(*search));
    if (search == NULL)
        return KVIO_ERR_NOMEM;
    search->options = options;
    search->variant_set = variant_set;
    search->variant_value = variant_value;
    search->point = options->users ? "users" : "rate";
    search->seeds = options->seeds > 0 ? options->seeds : DEFAULT_SEEDS;
    search->start_ns = kvio_wall_time_ns();
    if (directory != NULL)
        snprintf(search->directory, sizeof(search->directory), "%s", directory);
    double start = 0, low = 0, high = 0;
    kvio_results_t *top = NULL;
    kvio_status_t status = KVIO_OK;
    if (search->seeds > KVIO_CAPACITY_MAX_SEEDS) {
        snprintf(error_p, error_len, "capacity: --seeds takes 1 to %d", KVIO_CAPACITY_MAX_SEEDS);
        status = KVIO_ERR_CONFIG;
    }
    if (status == KVIO_OK)
        status = check_search(search, &start, error_p, error_len);
    if (status == KVIO_OK) {
        /* Every probe's workload must load before the first runs. */
        kvio_workload_t workload;
        status = load_at(search, start > 0 ? start : 1, search->base_seed, &workload, error_p,
                         error_len);
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
        find_knee(search);
        status = confirm(search, error_p, error_len);
    }
    kvio_results_destroy(top);
    if (status != KVIO_OK) {
        free(search);
        return status;
    }
    *search_p = search;
    return KVIO_OK;
}

/* ---- rendering ----------------------------------------------------------- */

/* Decimals that the interval supports: its first significant digit, and
 * one more (a knee of 8.6712 +- 0.42 is 8.67 +- 0.42). */
static int decimals_for(double ci95, double value)
{
    double scale = ci95 > 0 ? ci95 : fabs(value) / 1000;
    if (!(scale > 0))
        return 2;
    int decimals = 1 - (int)floor(log10(scale));
    return decimals < 0 ? 0 : decimals > 6 ? 6 : decimals;
}

static void format_knee(const search_t *search, char *text_p, size_t text_len)
{
    const probe_t *knee = search->knee;
    if (knee == NULL) {
        snprintf(text_p, text_len, "none: the lowest load tried failed");
        return;
    }
    int decimals = decimals_for(knee->offered_ci95, knee->offered);
    if (search->options->users)
        snprintf(text_p, text_len, "%.0f users (%.*f +- %.*f req/s offered)", knee->rate,
                 decimals, knee->offered, decimals, knee->offered_ci95);
    else
        snprintf(text_p, text_len, "%.*f +- %.*f req/s offered (95 %% interval over %ld seeds; "
                 "stream.arrival.rate %.4g)", decimals, knee->offered, decimals,
                 knee->offered_ci95, knee->num_runs, knee->rate);
}

/* The bound that fails the most requests where the SLO first fails. */
static const char *binding_of(const search_t *search)
{
    const probe_t *failed = search->first_failed;
    if (failed == NULL)
        return "none";
    if (failed->overloaded)
        return "throughput";
    return failed->ttft_attain <= failed->tpot_attain ? "ttft" : "tpot";
}

static json_t *probe_json(const search_t *search, const probe_t *probe)
{
    json_t *seeds = json_array();
    for (long r = 0; r < probe->num_runs; r++) {
        const seed_run_t *run = &probe->runs[r];
        json_array_append_new(
            seeds, json_pack("{s:I, s:f, s:f, s:f, s:f, s:b}", "seed",
                             (json_int_t)(search->base_seed + r), "offered_rate", run->offered,
                             "request_throughput", run->throughput, "attainment", run->attain,
                             "ttft_p99_ms", run->ttft_p99_ms, "overloaded", run->overloaded));
    }
    return json_pack("{s:f, s:b, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:o}",
                     search->point, probe->rate, "met", probe->met, "overloaded",
                     probe->overloaded, "attainment", probe->attain, "worst_attainment",
                     probe->worst_attain, "ttft_attainment",
                     probe->ttft_attain, "tpot_attainment", probe->tpot_attain,
                     "request_throughput", probe->throughput, "offered_rate", probe->offered,
                     "offered_rate_ci95", probe->offered_ci95, "ttft_p99_ms", probe->ttft_p99_ms,
                     "tpot_p99_ms", probe->tpot_p99_ms, "dir", probe->dir, "seeds", seeds);
}

static json_t *search_json(const search_t *search)
{
    const kvio_capacity_options_t *options = search->options;
    json_t *curve = json_array();
    for (size_t i = 0; i < search->num_probes; i++)
        json_array_append_new(curve, probe_json(search, &search->probes[i]));
    char knee_text[192];
    format_knee(search, knee_text, sizeof(knee_text));
    const probe_t *knee = search->knee;
    json_t *result = json_pack(
        "{s:s, s:s, s:s, s:{s:s?, s:s?}, s:f, s:I, s:f, s:s, s:I, s:b, s:o}", "workload",
        options->source, "directory", search->directory, "varies",
        options->users ? search->users_key : "stream.arrival.rate", "slo", "ttft",
        search->ttft_set[0] ? strchr(search->ttft_set, '=') + 1 : NULL, "tpot",
        search->tpot_set[0] ? strchr(search->tpot_set, '=') + 1 : NULL, "attain",
        options->attain, "seeds", (json_int_t)search->seeds, "warmup_s", search->warmup_s,
        "binding", binding_of(search), "probes", (json_int_t)search->num_probes, "monotone",
        search->monotone, "curve", curve);
    /* The knee in the load as measured (capacity), the configured rate that
     * offered it, and its text as printed. */
    json_object_set_new(result, "knee",
                        knee != NULL ? json_pack("{s:f, s:f, s:f, s:s}", "offered_rate",
                                                 knee->offered, "offered_rate_ci95",
                                                 knee->offered_ci95, search->point, knee->rate,
                                                 "text", knee_text)
                                     : json_null());
    json_object_set_new(result, "capacity",
                        json_real(knee == NULL ? 0 : options->users ? knee->rate
                                                                    : knee->offered));
    json_object_set_new(result, options->users ? "capacity_users" : "capacity_rps",
                        json_real(knee == NULL ? 0 : options->users ? knee->rate
                                                                    : knee->offered));
    json_object_set_new(result, "first_failing",
                        json_real(search->first_failed != NULL ? search->first_failed->rate : 0));
    if (!search->monotone)
        json_object_set_new(result, "reentry", json_real(search->reentry_rate));
    if (search->confirmed) {
        json_t *confirmed = probe_json(search, &search->confirm);
        json_object_set_new(confirmed, "duration_s", json_real(search->full_duration_s));
        json_object_set_new(confirmed, "probe_reused", json_boolean(search->confirm_reused));
        json_object_set_new(result, "confirm", confirmed);
    }
    if (search->variant_value != NULL) {
        json_object_set_new(result, "vary", json_string(options->vary_key));
        json_object_set_new(result, "value", json_string(search->variant_value));
    }
    return result;
}

/* One search's capacity.json: provenance and the search. */
static json_t *search_document(const kvio_capacity_t *capacity, const search_t *search)
{
    json_t *result = run_provenance_json(NULL, NULL, capacity->start_ns);
    json_t *one = search_json(search);
    json_object_update(result, one);
    json_decref(one);
    return result;
}

json_t *kvio_capacity_json(const kvio_capacity_t *capacity)
{
    const kvio_capacity_options_t *options = capacity->options;
    if (options->num_vary == 0)
        return search_document(capacity, capacity->searches[0]);
    json_t *result = run_provenance_json(NULL, NULL, capacity->start_ns);
    json_t *variants = json_array();
    for (size_t s = 0; s < capacity->num_searches; s++)
        json_array_append_new(variants, search_json(capacity->searches[s]));
    json_object_set_new(result, "workload", json_string(options->source));
    json_object_set_new(result, "directory", json_string(options->output_dir));
    json_object_set_new(result, "vary", json_string(options->vary_key));
    json_object_set_new(result, "variants", variants);
    return result;
}

static void print_search(const search_t *search, FILE *out)
{
    const kvio_capacity_options_t *options = search->options;
    char variant[256] = "", knee_text[192];
    if (search->variant_value != NULL)
        snprintf(variant, sizeof(variant), " %s=%s", options->vary_key, search->variant_value);
    format_knee(search, knee_text, sizeof(knee_text));
    fprintf(out, "kvio capacity %s%s: %s\n", options->source, variant, knee_text);
    fprintf(out, "  SLO met by %.0f%% of requests in every seed (binding: %s); %ld seeds a "
            "probe", 100 * options->attain, binding_of(search), search->seeds);
    if (search->warmup_s > 0)
        fprintf(out, "; the first %.3g s of arrivals (warm-up: sessions ramping) left out",
                search->warmup_s);
    fprintf(out, "\n");
    fprintf(out, "  %8s %14s %6s %8s %8s %11s %11s\n", search->point, "offered req/s", "met",
            "attained", "worst", "ttft p99 ms", "tpot p99 ms");
    for (size_t i = 0; i < search->num_probes; i++) {
        const probe_t *p = &search->probes[i];
        char offered[48];
        snprintf(offered, sizeof(offered), "%.*f+-%.*f",
                 decimals_for(p->offered_ci95, p->offered), p->offered,
                 decimals_for(p->offered_ci95, p->offered), p->offered_ci95);
        fprintf(out, "  %8.4g %14s %6s %7.1f%% %7.1f%% %11.2f %11.2f\n", p->rate, offered,
                p->met ? "yes" : p->overloaded ? "behind" : "no", 100 * p->attain,
                100 * p->worst_attain, p->ttft_p99_ms, p->tpot_p99_ms);
    }
    if (!search->monotone)
        fprintf(out, "  not monotone: the SLO failed at %.4g and was met again at %.4g; the "
                "knee is the last load met below the first failure\n",
                search->first_failed->rate, search->reentry_rate);
    if (search->confirmed) {
        const probe_t *c = &search->confirm;
        if (search->confirm_reused)
            fprintf(out, "  confirm: the probes ran the workload's whole %.3g s, so the knee's "
                    "%ld seeds are its confirm: the SLO held in each\n", search->duration_s,
                    c->num_runs);
        else
            fprintf(out, "  confirm at %.4g for the workload's whole %.3g s (%ld seeds): %s "
                    "(%.1f%% within the SLO, the worst seed %.1f%%; %.4g req/s offered)\n",
                    c->rate, search->full_duration_s, c->num_runs,
                    c->met ? "the SLO held" : "the SLO did NOT hold", 100 * c->attain,
                    100 * c->worst_attain, c->offered);
    }
}

void kvio_capacity_print(const kvio_capacity_t *capacity, FILE *out)
{
    for (size_t s = 0; s < capacity->num_searches; s++)
        print_search(capacity->searches[s], out);
    fprintf(out, "  results: %s (capacity.json)\n",
            capacity->options->output_dir != NULL ? capacity->options->output_dir
                                                  : capacity->searches[0]->directory);
}

void kvio_capacity_destroy(kvio_capacity_t *capacity)
{
    if (capacity == NULL)
        return;
    for (size_t s = 0; s < capacity->num_searches; s++)
        free(capacity->searches[s]);
    free(capacity->searches);
    free(capacity);
}

/* A --vary value's search, in its own directory: capacity.json as a
 * single search writes it. */
static kvio_status_t write_search(const kvio_capacity_t *capacity, const search_t *search,
                                  char *error_p, size_t error_len)
{
    json_t *result = search_document(capacity, search);
    char path[1300];
    snprintf(path, sizeof(path), "%s/capacity.json", search->directory);
    kvio_status_t status = kvio_json_write_atomic(path, result, error_p, error_len);
    json_decref(result);
    return status;
}

kvio_status_t kvio_capacity(const kvio_capacity_options_t *options,
                            kvio_capacity_t **capacity_p, char *error_p, size_t error_len)
{
    *capacity_p = NULL;
    if (options->num_vary > 0 && options->output_dir == NULL) {
        snprintf(error_p, error_len, "capacity: --vary needs -o DIR (one search per value in "
                 "DIR/KEY-VALUE)");
        return KVIO_ERR_CONFIG;
    }
    kvio_capacity_t *capacity = calloc(1, sizeof(*capacity));
    size_t count = options->num_vary > 0 ? options->num_vary : 1;
    if (capacity == NULL || (capacity->searches = calloc(count, sizeof(search_t *))) == NULL) {
        free(capacity);
        return KVIO_ERR_NOMEM;
    }
    capacity->options = options;
    capacity->start_ns = kvio_wall_time_ns();
    kvio_results_t *top = NULL;
    kvio_status_t status = KVIO_OK;
    if (options->num_vary > 0)
        status = kvio_results_create(options->output_dir, "capacity", options->force, &top,
                                     error_p, error_len);
    for (size_t v = 0; status == KVIO_OK && v < count; v++) {
        char set[512], directory[1200];
        const char *variant_set = NULL, *value = NULL, *dir = NULL;
        if (options->num_vary > 0) {
            value = options->vary_values[v];
            snprintf(set, sizeof(set), "%s=%s", options->vary_key, value);
            snprintf(directory, sizeof(directory), "%s/%s-%s", options->output_dir,
                     options->vary_key, value);
            for (char *c = directory + strlen(options->output_dir) + 1; *c != '\0'; c++)
                if (*c == '/' || *c == ' ')
                    *c = '_';
            variant_set = set;
            dir = directory;
        }
        status = search_one(options, variant_set, value, dir, &capacity->searches[v], error_p,
                            error_len);
        if (status == KVIO_OK)
            capacity->num_searches++;
        if (status == KVIO_OK && options->num_vary > 0)
            status = write_search(capacity, capacity->searches[v], error_p, error_len);
    }
    if (status == KVIO_OK) {
        json_t *result = kvio_capacity_json(capacity);
        char path[1300];
        snprintf(path, sizeof(path), "%s/capacity.json",
                 options->num_vary > 0 ? options->output_dir : capacity->searches[0]->directory);
        status = kvio_json_write_atomic(path, result, error_p, error_len);
        json_decref(result);
    }
    kvio_results_destroy(top);
    if (status != KVIO_OK) {
        kvio_capacity_destroy(capacity);
        return status;
    }
    *capacity_p = capacity;
    return KVIO_OK;
}
