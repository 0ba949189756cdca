/* Tests for the runtime: the local runtime's collectives give every rank the
 * same answer in rank order, clock offsets between threads are near zero,
 * and a rank that fails makes its peers fail fast instead of hanging. */
#include "kvio/rte.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"
#include "tests/helpers.h"

#define NUM_RANKS 4

typedef struct collective_results {
    int sizes[NUM_RANKS];
    int gathered[NUM_RANKS][NUM_RANKS];
    char blob_text[NUM_RANKS][64];
    double sum;
    double max;
    int64_t uncertainty[NUM_RANKS];
    int64_t offset[NUM_RANKS];
} collective_results_t;

/* Each rank writes only its own row of the results, so no lock is needed. */
static kvio_status_t collective_body(kvio_rte_t *rte, void *arg)
{
    collective_results_t *results = arg;
    int index = kvio_rte_index(rte);
    results->sizes[index] = kvio_rte_size(rte);
    kvio_status_t status = kvio_rte_barrier(rte);
    if (status != KVIO_OK)
        return status;
    int mine = 100 + index;
    status = kvio_rte_allgather(rte, &mine, sizeof(mine), results->gathered[index]);
    if (status != KVIO_OK)
        return status;
    char text[32];
    int length = snprintf(text, sizeof(text), "rank-%d%s", index, index % 2 ? "-odd" : "");
    void **blobs = NULL;
    size_t *lengths = NULL;
    status = kvio_rte_allgather_blobs(rte, text, (size_t)length, &blobs, &lengths);
    if (status != KVIO_OK)
        return status;
    /* Rank index concatenates what the others sent, in rank order. */
    for (int rank = 0; rank < NUM_RANKS; rank++)
        strncat(results->blob_text[index], blobs[rank],
                lengths[rank] < 60 - strlen(results->blob_text[index])
                    ? lengths[rank] : 0);
    kvio_rte_blobs_free(blobs, lengths, NUM_RANKS);
    double values[2] = {index + 1.0, index * 10.0}, sums[2], maxima[2];
    status = kvio_rte_reduce(rte, values, 2, KVIO_RTE_SUM, sums);
    if (status == KVIO_OK)
        status = kvio_rte_reduce(rte, values, 2, KVIO_RTE_MAX, maxima);
    if (status == KVIO_OK && index == 0) {
        results->sum = sums[0];
        results->max = maxima[1];
    }
    kvio_rte_clock_offset(rte, &results->offset[index], &results->uncertainty[index]);
    return status;
}

Test(rte, local_collectives_agree_in_rank_order, .timeout = 20)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = NUM_RANKS,
                                .timeout_ns = 5000000000LL};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK, "%s",
                 error);
    cr_assert_str_eq(kvio_rte_world_kind(world), "local");
    cr_assert(kvio_rte_world_is_root(world));
    collective_results_t results;
    memset(&results, 0, sizeof(results));
    cr_assert_eq(kvio_rte_world_run(world, collective_body, &results, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_rte_world_destroy(world, false);
    for (int rank = 0; rank < NUM_RANKS; rank++) {
        cr_expect_eq(results.sizes[rank], NUM_RANKS);
        for (int other = 0; other < NUM_RANKS; other++)
            cr_expect_eq(results.gathered[rank][other], 100 + other);
        cr_expect_str_eq(results.blob_text[rank], "rank-0rank-1-oddrank-2rank-3-odd");
        /* Threads share one clock: no offset, and nothing to be unsure of
         * (processes measure theirs: the mpirun tests). */
        cr_expect_eq(results.offset[rank], 0, "rank %d", rank);
        cr_expect_eq(results.uncertainty[rank], 0, "rank %d", rank);
    }
    cr_expect_float_eq(results.sum, 1.0 + 2.0 + 3.0 + 4.0, 1e-9);
    cr_expect_float_eq(results.max, 30.0, 1e-9);
}

typedef struct failure_results {
    kvio_status_t waiter_status;
    uint64_t waited_ns;
} failure_results_t;

static kvio_status_t failing_body(kvio_rte_t *rte, void *arg)
{
    failure_results_t *results = arg;
    if (kvio_rte_index(rte) == 1) {
        kvio_rte_set_error(rte, "rank 1: injected failure");
        return KVIO_ERR_IO;
    }
    uint64_t start = kvio_time_ns();
    void *data = NULL;
    size_t length = 0;
    kvio_status_t status = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &data, &length);
    results->waiter_status = status;
    results->waited_ns = kvio_time_ns() - start;
    free(data);
    return status;
}

Test(rte, failed_peer_ends_a_wait_before_the_timeout, .timeout = 20)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2,
                                .timeout_ns = 10000000000LL};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK);
    failure_results_t results = {0};
    kvio_status_t status = kvio_rte_world_run(world, failing_body, &results, error,
                                              sizeof(error));
    kvio_rte_world_destroy(world, true);
    cr_expect_eq(status, KVIO_ERR_IO, "the failing rank's own error is reported");
    cr_expect(test_contains(error, "injected failure"), "%s", error);
    cr_expect_eq(results.waiter_status, KVIO_ERR_PEER);
    cr_expect_lt(results.waited_ns, 5000000000ull, "waited %.2f s",
                 (double)results.waited_ns / 1e9);
}

typedef struct slow_results {
    kvio_status_t first, second; /* rank 0's two receives */
    char error[512];
} slow_results_t;

/* Rank 1 is alive but slow: it sends after three timeouts, then ends
 * without sending the second message rank 0 waits for. */
static kvio_status_t slow_body(kvio_rte_t *rte, void *arg)
{
    slow_results_t *results = arg;
    if (kvio_rte_index(rte) == 0) {
        void *data = NULL;
        size_t length = 0;
        results->first = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &data, &length);
        free(data);
        data = NULL;
        results->second = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &data, &length);
        free(data);
        snprintf(results->error, sizeof(results->error), "%s", kvio_rte_verdict(rte));
        return KVIO_OK;
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 900000000};
    nanosleep(&pause, NULL);
    return kvio_rte_send(rte, 0, KVIO_RTE_TAG_USER, "x", 1);
}

Test(rte, a_slow_peer_is_waited_for_and_an_ended_one_is_named, .timeout = 30)
{
    /* Liveness is judged by heartbeats, not progress: three timeouts of
     * silence from a live thread end nothing. */
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2, .timeout_ns = 300000000LL};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK);
    slow_results_t results = {0};
    kvio_status_t status = kvio_rte_world_run(world, slow_body, &results, error, sizeof(error));
    kvio_rte_world_destroy(world, status != KVIO_OK);
    cr_assert_eq(status, KVIO_OK, "%s", error);
    cr_expect_eq(results.first, KVIO_OK, "the slow peer's message was not waited for");
    cr_expect_eq(results.second, KVIO_ERR_PEER);
    cr_expect_str_eq(results.error, "rank 1 ended without sending it");
}

/* A world that a test stops: rank 1 waits for a message that never comes
 * from a live rank 0 that waits on its own. */
typedef struct stopped_results {
    volatile sig_atomic_t stop;
    volatile kvio_status_t waiter; /* written by rank 1, read by rank 0 */
} stopped_results_t;

static kvio_status_t stopped_body(kvio_rte_t *rte, void *arg)
{
    stopped_results_t *results = arg;
    if (kvio_rte_index(rte) == 0) {
        results->stop = 1;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000000};
        while (results->waiter == KVIO_INPROGRESS)
            nanosleep(&pause, NULL);
        return KVIO_OK;
    }
    void *data = NULL;
    size_t length = 0;
    kvio_status_t status = kvio_rte_recv(rte, 0, KVIO_RTE_TAG_USER, &data, &length);
    free(data);
    results->waiter = status;
    return KVIO_OK;
}

Test(rte, a_stopped_run_ends_its_waits_within_the_timeout, .timeout = 30)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2, .timeout_ns = 200000000LL};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK);
    stopped_results_t results = {.stop = 0, .waiter = KVIO_INPROGRESS};
    kvio_rte_world_set_stop(world, &results.stop);
    kvio_status_t status = kvio_rte_world_run(world, stopped_body, &results, error,
                                              sizeof(error));
    kvio_rte_world_destroy(world, true);
    cr_expect_eq(status, KVIO_OK, "%s", error);
    cr_expect_eq(results.waiter, KVIO_ERR_INTERRUPTED);
}

Test(rte, unknown_runtime_is_a_config_error, .timeout = 5)
{
    kvio_rte_params_t params = {.kind = "carrier-pigeon", .num_ranks = 2};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_expect_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_expect(test_contains(error, "unknown runtime 'carrier-pigeon'"), "%s", error);
}

#define POSTED 200

typedef struct post_results {
    int received[2];       /* messages each rank took from the other, in order */
    bool in_order[2];
    kvio_status_t empty_status; /* try_recv before anything was sent */
    kvio_status_t gone_status;  /* try_recv after the peer finished */
} post_results_t;

/* Both ranks post many large messages to each other before either
 * receives (blocking sends of this size would wait on each other), then
 * drain them with try_recv; each rank writes only its own entries. */
static kvio_status_t post_body(kvio_rte_t *rte, void *arg)
{
    post_results_t *results = arg;
    int self = kvio_rte_index(rte), peer = 1 - self;
    void *data = NULL;
    size_t length = 0;
    if (self == 0)
        results->empty_status = kvio_rte_try_recv(rte, 1, KVIO_RTE_TAG_USER + 1, &data, &length);
    kvio_status_t status = kvio_rte_barrier(rte);
    static const size_t size = 256 * 1024;
    unsigned char *message = calloc(1, size);
    if (message == NULL)
        return KVIO_ERR_NOMEM;
    for (int i = 0; i < POSTED && status == KVIO_OK; i++) {
        memcpy(message, &i, sizeof(i));
        status = kvio_rte_post(rte, peer, KVIO_RTE_TAG_USER, message, i % 7 == 0 ? size : 64);
    }
    free(message);
    results->in_order[self] = true;
    uint64_t deadline = kvio_time_ns() + 10000000000ull;
    while (status == KVIO_OK && results->received[self] < POSTED && kvio_time_ns() < deadline) {
        status = kvio_rte_try_recv(rte, peer, KVIO_RTE_TAG_USER, &data, &length);
        if (status == KVIO_INPROGRESS) {
            status = KVIO_OK;
            continue;
        }
        if (status != KVIO_OK)
            break;
        int index;
        memcpy(&index, data, sizeof(index));
        if (index != results->received[self] ||
            length != (index % 7 == 0 ? size : 64))
            results->in_order[self] = false;
        results->received[self]++;
        free(data);
    }
    if (status == KVIO_OK)
        status = kvio_rte_flush(rte);
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    if (self == 0 && status == KVIO_OK) {
        /* Rank 1 has finished, or is about to: wait for it, then look. */
        deadline = kvio_time_ns() + 5000000000ull;
        do
            results->gone_status = kvio_rte_try_recv(rte, 1, KVIO_RTE_TAG_USER + 1, &data,
                                                     &length);
        while (results->gone_status == KVIO_INPROGRESS && kvio_time_ns() < deadline);
    }
    return status;
}

Test(rte, posted_messages_arrive_in_order_without_waiting_on_the_receiver, .timeout = 20)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2, .timeout_ns = 10000000000LL};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK);
    post_results_t results;
    memset(&results, 0, sizeof(results));
    kvio_status_t status = kvio_rte_world_run(world, post_body, &results, error, sizeof(error));
    kvio_rte_world_destroy(world, status != KVIO_OK);
    cr_assert_eq(status, KVIO_OK, "%s", error);
    cr_expect_eq(results.empty_status, KVIO_INPROGRESS);
    for (int rank = 0; rank < 2; rank++) {
        cr_expect_eq(results.received[rank], POSTED, "rank %d took %d", rank,
                     results.received[rank]);
        cr_expect(results.in_order[rank], "rank %d: out of order", rank);
    }
    cr_expect_eq(results.gone_status, KVIO_ERR_PEER);
}

/* #40 item 1: a rank's end-of-run report over 16 MiB lost the whole run
 * (raw_send refused it: "rank 1: invalid argument", metrics {}). Now a
 * long message goes in pieces and is joined on arrival: three ranks
 * gather 24 MiB each (72 MiB at rank 0) byte for byte, a 32-byte message
 * that is no header arrives as itself, and so does an empty one. */
#define LONG_BYTES ((size_t)24 << 20)

typedef struct long_results {
    bool ok[4];
    size_t lengths[4];
    bool short_ok;
} long_results_t;

static unsigned char pattern_at(int rank, size_t i)
{
    return (unsigned char)((i * 31u + (size_t)rank * 7u) ^ (i >> 16));
}

static kvio_status_t long_body(kvio_rte_t *rte, void *arg)
{
    long_results_t *results = arg;
    int index = kvio_rte_index(rte);
    size_t length = index == 0 ? 0 : LONG_BYTES;
    unsigned char *data = malloc(length + 1);
    if (data == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i < length; i++)
        data[i] = pattern_at(index, i);
    void **blobs = NULL;
    size_t *lengths = NULL;
    kvio_status_t status = kvio_rte_gather_blobs(rte, data, length, &blobs, &lengths);
    free(data);
    if (status == KVIO_OK && index == 0) {
        for (int rank = 0; rank < 4; rank++) {
            results->lengths[rank] = lengths[rank];
            bool same = true;
            const unsigned char *got = blobs[rank];
            for (size_t i = 0; i < lengths[rank] && same; i++)
                same = got[i] == pattern_at(rank, i);
            results->ok[rank] = same;
        }
        kvio_rte_blobs_free(blobs, lengths, 4);
    }
    /* A 32-byte message of zeros is a message, not a header. */
    uint64_t plain[4] = {0, 0, 0, 0};
    if (status == KVIO_OK && index == 1)
        status = kvio_rte_send(rte, 0, KVIO_RTE_TAG_USER, plain, sizeof(plain));
    if (status == KVIO_OK && index == 0) {
        void *message = NULL;
        size_t got = 0;
        status = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &message, &got);
        results->short_ok = status == KVIO_OK && got == sizeof(plain) &&
                            memcmp(message, plain, sizeof(plain)) == 0;
        free(message);
    }
    return status;
}

Test(rte, messages_over_16_mib_arrive_whole, .timeout = 60)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 4, .timeout_ns = 30000000000LL};
    kvio_rte_world_t *world = NULL;
    char error[256] = "";
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK);
    long_results_t results;
    memset(&results, 0, sizeof(results));
    kvio_status_t status = kvio_rte_world_run(world, long_body, &results, error, sizeof(error));
    kvio_rte_world_destroy(world, status != KVIO_OK);
    cr_assert_eq(status, KVIO_OK, "%s", error);
    cr_expect_eq(results.lengths[0], 0);
    for (int rank = 1; rank < 4; rank++) {
        cr_expect_eq(results.lengths[rank], LONG_BYTES, "rank %d", rank);
        cr_expect(results.ok[rank], "rank %d's bytes changed on the way", rank);
    }
    cr_expect(results.short_ok, "a 32-byte message was not delivered as itself");
}
