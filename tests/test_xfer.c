/* Tests for the transports on the local runtime (1 trainer + 2 servers, 3
 * for the ucx chain): N updates arrive in order with matching checksums over
 * ucx (shared memory and tcp, sequential and chain), file and redis;
 * a byte corrupted at an offset the test picks is caught by verify; the file
 * transport's polling finds a version at the first poll after it is ready. */
#include "kvio/xfer.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/redis.h"
#include "kvio/train.h"
#include "kvio/update.h"
#include "tests/helpers.h"

#ifdef KVIO_HAVE_UCX
#define REQUIRE_UCX() ((void)0)
#else
#define REQUIRE_UCX() cr_skip_test("ucx transport not built")
#endif

#define NUM_SERVE 2 /* unless a test says otherwise */
#define MAX_SERVE 3
#define WEIGHTS_BYTES (512u * 1024 + 4096)

typedef struct scenario {
    kvio_xfer_config_t transport;
    kvio_train_config_t train;
    kvio_update_config_t update;
    int num_serve;
    /* Each rank writes only its own entries. */
    kvio_train_result_t train_result;
    kvio_update_result_t serve_result[MAX_SERVE];
    uint64_t active_checksum[MAX_SERVE];
    char info[512]; /* the sender's kvio_xfer_info */
    char error[MAX_SERVE + 1][512];
} scenario_t;

static kvio_status_t scenario_rank(kvio_rte_t *rte, void *arg)
{
    scenario_t *scenario = arg;
    int self = kvio_rte_index(rte);
    int receivers[MAX_SERVE] = {1, 2, 3};
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = kvio_xfer_create(&scenario->transport, rte,
                                            self == 0 ? KVIO_XFER_SENDER : KVIO_XFER_RECEIVER, 0,
                                            receivers, scenario->num_serve, WEIGHTS_BYTES, &xfer,
                                            scenario->error[self], sizeof(scenario->error[0]));
    if (status != KVIO_OK)
        return status;
    if (self == 0) {
        snprintf(scenario->info, sizeof(scenario->info), "%s", kvio_xfer_info(xfer));
        status = kvio_train_run(&scenario->train, 3, rte, xfer, 0, NULL, &scenario->train_result,
                                scenario->error[0], sizeof(scenario->error[0]));
    } else {
        kvio_update_result_t *result = &scenario->serve_result[self - 1];
        status = kvio_update_serve(&scenario->update, rte, xfer, 0,
                                   kvio_rte_time_ns(rte) + 20000000000LL, result,
                                   scenario->error[self], sizeof(scenario->error[0]));
        if (status == KVIO_OK)
            scenario->active_checksum[self - 1] = kvio_weights_checksum(
                kvio_xfer_slot(xfer, result->active_slot), WEIGHTS_BYTES);
    }
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}

static void scenario_defaults(scenario_t *scenario, int kind, char *dir)
{
    memset(scenario, 0, sizeof(*scenario));
    scenario->num_serve = NUM_SERVE;
    char error[256];
    cr_assert_eq(kvio_config_defaults(kvio_train_options, &scenario->train, error,
                                      sizeof(error)), KVIO_OK, "%s", error);
    cr_assert_eq(kvio_config_defaults(kvio_update_options, &scenario->update, error,
                                      sizeof(error)), KVIO_OK, "%s", error);
    scenario->train.steps = 10;
    scenario->train.bytes = WEIGHTS_BYTES;
    scenario->train.checkpoint.every_n_steps = 2;
    scenario->train.step_time.kind = KVIO_DIST_CONSTANT;
    scenario->train.step_time.value = 2e6; /* 2 ms */
    scenario->update.iteration_ns = 500000;
    scenario->train.transport.kind = kind;
    scenario->train.transport.chunk = 64 * 1024;
    free(scenario->train.transport.file.dir);
    scenario->train.transport.file.dir = strdup(dir);
    scenario->train.transport.file.poll_interval_ns = 1000000;
    scenario->train.transport.file.fsync = false;
    const char *url = getenv("KVIO_TEST_REDIS_URL");
    if (url != NULL) {
        free(scenario->train.transport.redis.url);
        scenario->train.transport.redis.url = strdup(url);
    }
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "kvio-test-xfer-%d-%d:", (int)getpid(), kind);
    free(scenario->train.transport.redis.prefix);
    scenario->train.transport.redis.prefix = strdup(prefix);
}

static kvio_status_t run_scenario(scenario_t *scenario, char *error_p, size_t error_len)
{
    scenario->transport = scenario->train.transport;
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 1 + scenario->num_serve,
                                .timeout_ns = 10000000000LL};
    kvio_rte_world_t *world = NULL;
    kvio_status_t status = kvio_rte_world_create(&params, &world, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_rte_world_run(world, scenario_rank, scenario, error_p, error_len);
    kvio_rte_world_destroy(world, status != KVIO_OK);
    return status;
}

static void scenario_free(scenario_t *scenario)
{
    kvio_train_result_free(&scenario->train_result);
    for (int i = 0; i < scenario->num_serve; i++)
        kvio_update_result_free(&scenario->serve_result[i]);
    kvio_config_free(kvio_train_options, &scenario->train);
}

/* Every version the servers activated is one the trainer published, in
 * increasing order, with the trainer's checksum; the last is active. */
static void expect_in_order(const scenario_t *scenario, bool every_version)
{
    const kvio_train_result_t *train = &scenario->train_result;
    cr_assert_eq(train->count, 5, "the trainer publishes every 2nd of 10 steps");
    for (int server = 0; server < scenario->num_serve; server++) {
        const kvio_update_result_t *result = &scenario->serve_result[server];
        if (every_version)
            cr_expect_eq(result->count, train->count, "server %d got %zu updates", server,
                         result->count);
        cr_expect_geq(result->count, 1);
        uint64_t previous = 0;
        for (size_t i = 0; i < result->count; i++) {
            const kvio_update_record_t *record = &result->records[i];
            cr_expect_gt(record->version, previous, "versions arrive in order");
            previous = record->version;
            cr_expect_eq(record->checksum_ok, 1);
            cr_expect_neq(record->t_activated_ns, 0);
            cr_expect_leq(record->t_ready_ns, record->t_notified_ns);
            cr_expect_leq(record->t_notified_ns, record->t_activated_ns);
            cr_expect_leq(record->t_xfer_start_ns, record->t_xfer_end_ns);
        }
        cr_expect_eq(result->active_version, train->records[train->count - 1].version,
                     "the last version ends up active");
        cr_expect_eq(scenario->active_checksum[server], train->records[train->count - 1].checksum,
                     "the active buffer holds the trainer's last version");
        cr_expect_eq(result->checksum_mismatches, 0);
    }
}

/* Runs the ucx scenario and checks that every version arrived in order;
 * info_p gets the sender's kvio_xfer_info. */
static void expect_ucx_delivers_in_order(char *info_p, size_t info_len)
{
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, KVIO_XFER_UCX, dir);
    char error[512] = "";
    kvio_status_t status = run_scenario(&scenario, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    expect_in_order(&scenario, true);
    snprintf(info_p, info_len, "%s", scenario.info);
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

Test(xfer, ucx_delivers_every_version_in_order, .timeout = 30)
{
    REQUIRE_UCX();
    char info[512];
    expect_ucx_delivers_in_order(info, sizeof(info));
}

/* Over tcp UCX emulates puts with active messages, so nothing completes
 * inline: every put and notice is a request that must be counted down by
 * its callback. UCX reads UCX_TLS when a context is created, and each test
 * runs in a process of its own. */
Test(xfer, ucx_over_tcp_delivers_every_version_in_order, .timeout = 30)
{
    REQUIRE_UCX();
    cr_assert_eq(setenv("UCX_TLS", "tcp", 1), 0);
    char info[512];
    expect_ucx_delivers_in_order(info, sizeof(info));
    cr_expect(strstr(info, "tcp/") != NULL, "the lanes UCX chose are reported: %s", info);
    cr_expect(strstr(info, "UCX_TLS=tcp") != NULL, "%s", info);
}

/* Chain fan-out to 3 servers: every version arrives verified on all of
 * them, and each hop starts and ends no earlier than the one before it
 * (server i+1's data comes from server i). */
static void expect_chain_delivers_in_order(void)
{
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, KVIO_XFER_UCX, dir);
    scenario.num_serve = 3;
    scenario.train.transport.fanout = KVIO_XFER_FANOUT_CHAIN;
    char error[512] = "";
    kvio_status_t status = run_scenario(&scenario, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    expect_in_order(&scenario, true);
    cr_expect(strstr(scenario.info, "chain") != NULL, "%s", scenario.info);
    for (int server = 1; server < scenario.num_serve; server++) {
        const kvio_update_result_t *before = &scenario.serve_result[server - 1];
        const kvio_update_result_t *after = &scenario.serve_result[server];
        for (size_t i = 0; i < after->count && i < before->count; i++) {
            cr_expect_eq(after->records[i].version, before->records[i].version);
            cr_expect_geq(after->records[i].t_xfer_start_ns, before->records[i].t_xfer_start_ns,
                          "server %d starts after server %d", server, server - 1);
            cr_expect_geq(after->records[i].t_xfer_end_ns, before->records[i].t_xfer_end_ns,
                          "server %d ends after server %d", server, server - 1);
        }
    }
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

Test(xfer, ucx_chain_delivers_every_version_to_three_servers, .timeout = 30)
{
    REQUIRE_UCX();
    expect_chain_delivers_in_order();
}

/* Over tcp no put completes inline: the forwarders' puts, flushes and
 * progress messages all finish in callbacks. */
Test(xfer, ucx_chain_over_tcp_delivers_every_version_to_three_servers, .timeout = 30)
{
    REQUIRE_UCX();
    cr_assert_eq(setenv("UCX_TLS", "tcp", 1), 0);
    expect_chain_delivers_in_order();
}

Test(xfer, chain_is_refused_by_transports_without_it, .timeout = 10)
{
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, KVIO_XFER_FILE, dir);
    scenario.train.transport.fanout = KVIO_XFER_FANOUT_CHAIN;
    char error[512] = "";
    cr_expect_neq(run_scenario(&scenario, error, sizeof(error)), KVIO_OK);
    cr_expect(strstr(scenario.error[0], "file transport: fanout: chain is not supported") !=
              NULL, "%s / %s", error, scenario.error[0]);
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

Test(xfer, file_delivers_versions_in_order, .timeout = 30)
{
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, KVIO_XFER_FILE, dir);
    char error[512] = "";
    kvio_status_t status = run_scenario(&scenario, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    /* Polling takes the newest file; a slow poll may skip one. */
    expect_in_order(&scenario, false);
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

static int redis_available(char *reason, size_t reason_len)
{
    const char *url = getenv("KVIO_TEST_REDIS_URL");
    if (url == NULL) {
        snprintf(reason, reason_len, "KVIO_TEST_REDIS_URL is not set");
        return 0;
    }
    kvio_redis_t *redis = NULL;
    if (kvio_redis_connect(url, 1000000000LL, &redis, reason, reason_len) != KVIO_OK)
        return 0;
    kvio_redis_close(redis);
    return 1;
}

Test(xfer, redis_delivers_versions_in_order, .timeout = 30)
{
    char reason[512] = "";
    if (!test_require("redis", redis_available(reason, sizeof(reason)), reason))
        return;
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, KVIO_XFER_REDIS, dir);
    scenario.train.transport.redis.keep = 5; /* a slow receiver still finds its version */
    char error[512] = "";
    kvio_status_t status = run_scenario(&scenario, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    expect_in_order(&scenario, false);
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

Test(xfer, corrupted_byte_is_detected, .timeout = 30)
{
    REQUIRE_UCX();
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, KVIO_XFER_UCX, dir);
    srand((unsigned)time(NULL));
    int64_t offset = rand() % (int64_t)WEIGHTS_BYTES;
    scenario.update.corrupt_offset = offset;
    char error[512] = "";
    kvio_status_t status = run_scenario(&scenario, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    for (int server = 0; server < scenario.num_serve; server++) {
        const kvio_update_result_t *result = &scenario.serve_result[server];
        cr_expect_eq(result->checksum_mismatches, 5, "offset %lld: every version caught",
                     (long long)offset);
        cr_expect_eq(result->active_version, 0, "no corrupted version is activated");
        for (size_t i = 0; i < result->count; i++) {
            cr_expect_eq(result->records[i].checksum_ok, 0);
            cr_expect_eq(result->records[i].t_activated_ns, 0);
        }
    }
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

/* Discovery: the receiver polls while nothing is published, then the
 * sender publishes and says so over the runtime; the next poll finds it. */
typedef struct discovery {
    kvio_xfer_config_t transport;
    uint64_t polls_before;
    uint64_t polls_after;
    uint64_t version_found;
    uint64_t end_version;
    char error[2][512];
} discovery_t;

static kvio_status_t discovery_rank(kvio_rte_t *rte, void *arg)
{
    discovery_t *discovery = arg;
    int self = kvio_rte_index(rte), receivers[1] = {1};
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = kvio_xfer_create(&discovery->transport, rte,
                                            self == 0 ? KVIO_XFER_SENDER : KVIO_XFER_RECEIVER,
                                            0, receivers, 1, 8192, &xfer,
                                            discovery->error[self], sizeof(discovery->error[0]));
    if (status != KVIO_OK)
        return status;
    char token = 1;
    void *data = NULL;
    size_t length = 0;
    if (self == 0) {
        /* Wait until the receiver has polled a few times, then publish. */
        status = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &data, &length);
        free(data);
        void *weights = kvio_xfer_send_buffer(xfer);
        kvio_weights_fill(weights, 8192, 1);
        if (status == KVIO_OK)
            status = kvio_xfer_publish(xfer, 1, kvio_weights_checksum(weights, 8192),
                                       kvio_rte_time_ns(rte), NULL);
        if (status == KVIO_OK)
            status = kvio_rte_send(rte, 1, KVIO_RTE_TAG_USER + 1, &token, 1);
        if (status == KVIO_OK)
            status = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER + 2, &data, &length);
        free(data);
        if (status == KVIO_OK)
            status = kvio_xfer_finish(xfer, 1);
    } else {
        kvio_xfer_receive_t receive;
        for (int i = 0; i < 5 && status == KVIO_OK; i++)
            if (kvio_xfer_poll(xfer, 0, &receive) != KVIO_INPROGRESS)
                status = KVIO_ERR_INTERNAL; /* found something that was never published */
        discovery->polls_before = kvio_xfer_polls(xfer);
        if (status == KVIO_OK)
            status = kvio_rte_send(rte, 0, KVIO_RTE_TAG_USER, &token, 1);
        if (status == KVIO_OK)
            status = kvio_rte_recv(rte, 0, KVIO_RTE_TAG_USER + 1, &data, &length);
        free(data);
        if (status == KVIO_OK && kvio_xfer_poll(xfer, 0, &receive) == KVIO_OK)
            discovery->version_found = receive.meta.version;
        discovery->polls_after = kvio_xfer_polls(xfer);
        if (status == KVIO_OK)
            status = kvio_rte_send(rte, 0, KVIO_RTE_TAG_USER + 2, &token, 1);
        /* The end marker comes after; a bounded number of polls finds it. */
        uint64_t deadline = kvio_time_ns() + 5000000000ull;
        while (status == KVIO_OK && discovery->end_version == 0 && kvio_time_ns() < deadline)
            if (kvio_xfer_poll(xfer, 0, &receive) == KVIO_OK &&
                (receive.meta.flags & KVIO_XFER_META_END))
                discovery->end_version = receive.meta.version;
    }
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}

static void run_discovery(int discovery_mode)
{
    char *dir = test_tmpdir();
    discovery_t discovery;
    memset(&discovery, 0, sizeof(discovery));
    char error[512] = "";
    cr_assert_eq(kvio_config_defaults(kvio_xfer_options, &discovery.transport, error,
                                      sizeof(error)), KVIO_OK);
    discovery.transport.kind = KVIO_XFER_FILE;
    free(discovery.transport.file.dir);
    discovery.transport.file.dir = strdup(dir);
    discovery.transport.file.discovery = discovery_mode;
    kvio_rte_params_t params = {.kind = "local", .num_ranks = 2, .timeout_ns = 10000000000LL};
    kvio_rte_world_t *world = NULL;
    cr_assert_eq(kvio_rte_world_create(&params, &world, error, sizeof(error)), KVIO_OK);
    kvio_status_t status = kvio_rte_world_run(world, discovery_rank, &discovery, error,
                                              sizeof(error));
    kvio_rte_world_destroy(world, status != KVIO_OK);
    cr_assert_eq(status, KVIO_OK, "%s", error);
    cr_expect_eq(discovery.polls_before, 5);
    cr_expect_eq(discovery.polls_after, discovery.polls_before + 1,
                 "found by the first poll after it was ready");
    cr_expect_eq(discovery.version_found, 1);
    cr_expect_eq(discovery.end_version, 1);
    kvio_config_free(kvio_xfer_options, &discovery.transport);
    test_rmtree(dir);
    free(dir);
}

Test(xfer, file_polling_finds_a_version_at_the_first_poll_after_it_is_ready, .timeout = 20)
{
    run_discovery(KVIO_XFER_DISCOVER_POLL);
}

Test(xfer, file_inotify_finds_a_version_at_the_first_poll_after_it_is_ready, .timeout = 20)
{
    run_discovery(KVIO_XFER_DISCOVER_NOTIFY);
}

Test(xfer, simulate_model_orders_receivers, .timeout = 5)
{
    kvio_xfer_config_t config = {.kind = KVIO_XFER_UCX, .chunk = 1 << 20};
    int64_t first, second, busy;
    kvio_xfer_model(&config, 1000000000ull, 0, 2, &first, &busy);
    kvio_xfer_model(&config, 1000000000ull, 1, 2, &second, &busy);
    /* Default 10 GB/s: 1 GB takes 100 ms per receiver, one after the other. */
    cr_expect_eq(first, 100020000);
    cr_expect_eq(second, 2 * 100020000);
    config.fanout = KVIO_XFER_FANOUT_CHAIN;
    kvio_xfer_model(&config, 1000000000ull, 1, 2, &second, &busy);
    cr_expect_lt(second, 2 * 100020000, "a chain pipelines the second hop");
}
