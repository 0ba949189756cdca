/* Emulate's set-up, before t0: its progress on stderr with its own clock
 * (pools, weights and transports can take seconds, and a silent start reads
 * as a hang), each rank's set-up time in the typed result, and a stop that
 * came before anything was served. */
#include "kvio/serve.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/result.h"
#include "kvio/results.h"

/* The host time the set-up began (0: not yet); one per process. */
static _Atomic uint64_t setup_origin_ns;

void kvio_serve_setup_begin(void)
{
    atomic_store(&setup_origin_ns, kvio_time_ns());
}

void kvio_serve_setup_note(const char *fmt, ...)
{
    if (kvio_log_get_level() <= KVIO_LOG_ERROR) /* -q */
        return;
    uint64_t origin = atomic_load(&setup_origin_ns), now = kvio_time_ns();
    if (origin == 0) {
        uint64_t expected = 0;
        atomic_compare_exchange_strong(&setup_origin_ns, &expected, now);
        origin = atomic_load(&setup_origin_ns);
    }
    char text[400];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof(text), fmt, args);
    va_end(args);
    /* One write per line: the ranks are threads printing at once. */
    fprintf(stderr, "kvio: set-up %.1f s: %s\n", (double)(now - origin) / 1e9, text);
    fflush(stderr);
}

/* One rank's set-up into result's setup figures. */
static void setup_rank(kvio_result_t *result, const kvio_serve_setup_entry_t *rank)
{
    kvio_result_t *entry = kvio_result_child(result, "setup",
                                             kvio_result_num_children(result, "setup"));
    if (entry == NULL)
        return;
    kvio_result_set(entry, KVIO_FIG_SETUP_RANK, rank->rank);
    kvio_result_set_text(entry, KVIO_FIG_SETUP_ROLE, rank->role);
    kvio_result_set(entry, KVIO_FIG_SETUP_RANK_S, rank->setup_s);
    double slowest = kvio_result_get(result, KVIO_FIG_SETUP_S);
    if (isnan(slowest) || rank->setup_s > slowest)
        kvio_result_set(result, KVIO_FIG_SETUP_S, rank->setup_s);
}

void kvio_serve_setup_record(kvio_result_t *result, json_t *start, int64_t t0_wall_ns,
                             const kvio_serve_setup_entry_t *ranks, size_t count)
{
    for (size_t i = 0; result != NULL && i < count; i++)
        setup_rank(result, &ranks[i]);
    if (start == NULL)
        return;
    json_t *list = json_array();
    for (size_t i = 0; i < count; i++) {
        json_t *rank = kvio_start_rank_json(ranks[i].rank, ranks[i].role, ranks[i].setup_s);
        if (ranks[i].host != NULL)
            json_object_set_new(rank, "host", json_string(ranks[i].host));
        json_array_append_new(list, rank);
    }
    kvio_start_json_set(start, t0_wall_ns, list);
}

kvio_status_t kvio_serve_setup_interrupted(kvio_result_t *result, const char *who,
                                           char *error_p, size_t error_len)
{
    if (result != NULL)
        kvio_result_set(result, KVIO_FIG_SETUP_INTERRUPTED, 1);
    snprintf(error_p, error_len, "%sstopped during set-up (SIGINT or SIGTERM), before t0: "
             "nothing was served or measured", who);
    return KVIO_ERR_INTERRUPTED;
}
