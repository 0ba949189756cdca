/* Tests for the transports on the local runtime (1 trainer + 2 servers, 3
 * for the ucx chain): N updates arrive in order with matching checksums over
 * ucx (shared memory and tcp, sequential and chain), file and redis;
 * a byte corrupted at an offset the test picks is caught by verify (also at
 * chunk edges, and over tcp); the checksum is XXH3-64 however it is fed,
 * also the sender's, taken while it copies; a
 * receiver learns what has landed before the notice; the file
 * transport's polling finds a version at the first poll after it is ready;
 * a redis receiver away across a version and the end still gets the version;
 * a bad chain message is refused naming the rank before; a failed set-up
 * names the rank; a file update is incompressible and has no two pages
 * alike (data: zero makes it zeros but for each version's words); on the
 * local runtime the ucx slots and send buffer are in 2 MiB pages. */
#include "kvio/xfer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvio/clock.h"
#include "kvio/redis.h"
#include "kvio/serve.h"
#include "kvio/train.h"
#include "kvio/update.h"
#include "tests/helpers.h"
#include "xfer/xfer_int.h" /* the sender's sum */

#ifdef KVIO_HAVE_UCX
#include "xfer/xfer_ucx_int.h" /* the chain's message, to send a bad one */
#define REQUIRE_UCX() ((void)0)
#else
#define REQUIRE_UCX() test_require("ucx", 0, "ucx transport not built")
#endif

#define NUM_SERVE 2 /* unless a test says otherwise */
#define MAX_SERVE 3
#define WEIGHTS_BYTES (512u * 1024 + 4096)

/* Runs body on num_ranks local ranks; the first failing rank's message
 * goes to error_p. */
static kvio_status_t run_ranks(int num_ranks, int64_t timeout_ns, kvio_rte_main_t body,
                               void *arg, char *error_p, size_t error_len)
{
    kvio_rte_params_t params = {.kind = "local", .num_ranks = num_ranks,
                                .timeout_ns = timeout_ns};
    kvio_rte_world_t *world = NULL;
    kvio_status_t status = kvio_rte_world_create(&params, &world, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    status = kvio_rte_world_run(world, body, arg, error_p, error_len);
    kvio_rte_world_destroy(world, status != KVIO_OK);
    return status;
}

/* Two ranks: rank 0 sends, rank 1 receives bytes. */
static kvio_status_t create_pair(const kvio_xfer_config_t *config, kvio_rte_t *rte,
                                 uint64_t bytes, kvio_xfer_t **xfer_p, char *error_p,
                                 size_t error_len)
{
    int receivers[1] = {1};
    return kvio_xfer_create(config, rte,
                            kvio_rte_index(rte) == 0 ? KVIO_XFER_SENDER : KVIO_XFER_RECEIVER, 0,
                            receivers, 1, bytes, xfer_p, error_p, error_len);
}

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


/* The receiver on its own (update latency only): a serve rank of emulated
 * iterations (update.iteration) receiving from sender until the updates
 * are over (serve rank index: kvio_rte_index(rte) - 1), as a run's
 * engine-less serve rank runs it. */
static kvio_status_t receive_updates(const kvio_update_config_t *config, kvio_rte_t *rte,
                                     kvio_xfer_t *xfer, int sender, int64_t serve_until_ns,
                                     kvio_update_result_t *result_p, char *error_p,
                                     size_t error_len)
{
    kvio_serve_run_t run = {.update = config, .rte = rte, .first_serve_rank = 1};
    int index = kvio_rte_index(rte) - 1;
    kvio_serve_rank_t *rank = NULL;
    kvio_update_receiver_t *receiver = NULL;
    kvio_status_t status = kvio_serve_rank_create(&run, index > 0 ? (uint32_t)index : 0, 1,
                                                  &rank, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_update_receiver_create(config, rte, xfer, sender, serve_until_ns,
                                             &receiver, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_serve_rank_serve(rank, receiver, serve_until_ns, result_p, error_p,
                                       error_len);
    kvio_update_receiver_destroy(receiver);
    kvio_serve_rank_destroy(rank);
    return status;
}

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
        status = receive_updates(&scenario->update, rte, xfer, 0,
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

static void scenario_defaults(scenario_t *scenario, const char *kind, char *dir)
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
    cr_assert_eq(kvio_choice_set(&scenario->train.transport.kind, kind), KVIO_OK, "%s", kind);
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
    snprintf(prefix, sizeof(prefix), "kvio-test-xfer-%d-%s:", (int)getpid(), kind);
    free(scenario->train.transport.redis.prefix);
    scenario->train.transport.redis.prefix = strdup(prefix);
}

static kvio_status_t run_scenario(scenario_t *scenario, char *error_p, size_t error_len)
{
    scenario->transport = scenario->train.transport;
    return run_ranks(1 + scenario->num_serve, 10000000000LL, scenario_rank, scenario, error_p,
                     error_len);
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
    scenario_defaults(&scenario, "ucx", dir);
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
    cr_expect(strstr(info, "stores") == NULL, "over tcp the bytes go as puts: %s", info);
}

#define HUGE_SLOT_BYTES (8u << 20)

typedef struct huge_case {
    kvio_xfer_config_t transport;
    long slot_huge_kib[2]; /* the receiver's slots' mappings, in 2 MiB pages */
    long send_huge_kib;    /* the sender's buffer's */
    char info[512];
    char error[2][512];
} huge_case_t;

static kvio_status_t huge_rank(kvio_rte_t *rte, void *arg)
{
    huge_case_t *test = arg;
    int self = kvio_rte_index(rte);
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = create_pair(&test->transport, rte, HUGE_SLOT_BYTES, &xfer,
                                       test->error[self], sizeof(test->error[0]));
    if (status != KVIO_OK)
        return status;
    if (self == 0) {
        test->send_huge_kib = test_huge_kib_at(kvio_xfer_send_buffer(xfer));
        snprintf(test->info, sizeof(test->info), "%s", kvio_xfer_info(xfer));
    } else {
        for (int slot = 0; slot < 2; slot++)
            test->slot_huge_kib[slot] = test_huge_kib_at(kvio_xfer_slot(xfer, slot));
    }
    status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}

/* #58: ranks that are threads of one process (the local runtime) get their
 * ucx slots and send buffer in 2 MiB pages, faulted in at set-up, and the
 * sender stores into a slot at its owner's address: UCX's own shared
 * memory comes in 4 KiB pages, each a trap on its first touch through each
 * mapping on a virtual machine (the quickstart's set-up spent 5 s there). */
Test(xfer, ucx_slots_are_huge_pages_in_one_address_space, .timeout = 30)
{
    REQUIRE_UCX();
    if (!test_huge_pages_on_request())
        cr_skip_test("this kernel gives no transparent huge pages on request");
    huge_case_t test;
    memset(&test, 0, sizeof(test));
    char error[512] = "";
    cr_assert_eq(kvio_config_defaults(kvio_xfer_options, &test.transport, error,
                                      sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_choice_set(&test.transport.kind, "ucx"), KVIO_OK);
    kvio_status_t status = run_ranks(2, 10000000000LL, huge_rank, &test, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s / %s / %s", error, test.error[0], test.error[1]);
    cr_expect_gt(test.slot_huge_kib[0], 0, "slot 0 in 2 MiB pages");
    cr_expect_gt(test.slot_huge_kib[1], 0, "slot 1 in 2 MiB pages");
    cr_expect_gt(test.send_huge_kib, 0, "the send buffer in 2 MiB pages");
    cr_expect(strstr(test.info, "stores into the slots") != NULL,
              "the sender stores at the slots' own addresses: %s", test.info);
    kvio_config_free(kvio_xfer_options, &test.transport);
}

/* Chain fan-out to 3 servers: every version arrives verified on all of
 * them, and each hop starts and ends no earlier than the one before it
 * (server i+1's data comes from server i). */
static void expect_chain_delivers_in_order(void)
{
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, "ucx", dir);
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
    scenario_defaults(&scenario, "file", dir);
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
    scenario_defaults(&scenario, "file", dir);
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
    scenario_defaults(&scenario, "redis", dir);
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
    scenario_defaults(&scenario, "ucx", dir);
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
    int self = kvio_rte_index(rte);
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = create_pair(&discovery->transport, rte, 8192, &xfer,
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
        uint64_t deadline = kvio_time_ns() + 2000000000ull;
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
    cr_assert_eq(kvio_choice_set(&discovery.transport.kind, "file"), KVIO_OK);
    free(discovery.transport.file.dir);
    discovery.transport.file.dir = strdup(dir);
    discovery.transport.file.discovery = discovery_mode;
    kvio_status_t status = run_ranks(2, 10000000000LL, discovery_rank, &discovery, error,
                                     sizeof(error));
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
    kvio_xfer_config_t config = {.kind = test_choice(&kvio_transports, "ucx"), .chunk = 1 << 20};
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

/* Every transport's simulate defaults and shape, as xfer/README.md
 * documents them (tests/test_plugins.c finds each registered transport's
 * row here): 1 GB to the second of two receivers, one poll interval of 1 s
 * where discovery polls. */
Test(xfer, every_transport_models_its_documented_defaults, .timeout = 5)
{
    static const struct {
        const char *kind;
        int64_t latency_ns;
        double bandwidth_gbps;
        int64_t second_arrival_ns;
    } cases[] = {
        /* point to point, one receiver after the other: 2 (latency + bytes / bw) */
        {"ucx", 20000, 10.0, 2 * (20000 + 100000000)},
        {"cuda-ipc", 20000, 200.0, 2 * (20000 + 5000000)},
        {"staged", 50000, 10.0, 2 * (50000 + 100000000)},
        /* a shared store: written once, read by each; file waits half a poll */
        {"file", 1000000, 2.0, 2 * (1000000 + 500000000) + 500000000},
        {"redis", 200000, 1.0, 2 * (200000 + 1000000000)},
    };
    cr_assert_eq(kvio_transports.count, sizeof(cases) / sizeof(cases[0]));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvio_xfer_config_t config = {.kind = test_choice(&kvio_transports, cases[i].kind),
                                     .chunk = 1 << 20};
        config.file.discovery = KVIO_XFER_DISCOVER_POLL;
        config.file.poll_interval_ns = 1000000000;
        int64_t latency_ns = 0, arrival = 0, busy = 0;
        double bandwidth_gbps = 0;
        kvio_xfer_model_source_t latency_source, bandwidth_source;
        kvio_xfer_model_params(&config, &latency_ns, &bandwidth_gbps, &latency_source,
                               &bandwidth_source);
        cr_expect_eq(latency_ns, cases[i].latency_ns, "%s", cases[i].kind);
        cr_expect_float_eq(bandwidth_gbps, cases[i].bandwidth_gbps, 1e-12, "%s", cases[i].kind);
        cr_expect_eq(latency_source, KVIO_XFER_MODEL_DEFAULT);
        cr_expect_eq(bandwidth_source, KVIO_XFER_MODEL_DEFAULT);
        kvio_xfer_model(&config, 1000000000ull, 1, 2, &arrival, &busy);
        cr_expect_eq(arrival, cases[i].second_arrival_ns, "%s: %lld ns", cases[i].kind,
                     (long long)arrival);
    }
}

/* ---- A redis receiver away while a version and then the end go out ---- */

/* A redis-server of this test alone (its pub/sub clients may be killed);
 * the port it listens on, or 0 when it did not start. */
static int private_redis_start(void)
{
    int port = test_free_port();
    return test_redis_up(port) ? port : 0;
}

#define AWAY_BYTES 8192
#define AWAY_MAX_NOTICES 8

typedef struct away {
    kvio_xfer_config_t transport;
    int port;
    uint64_t checksum[3];                 /* by version */
    uint64_t versions[AWAY_MAX_NOTICES];  /* what the receiver was told, in order */
    bool checksum_ok[AWAY_MAX_NOTICES];
    int count;
    uint64_t end_version;                 /* 0: no end */
    char error[2][512];
} away_t;

/* Polls (bounded) until a notice comes; its data is read whole. */
static kvio_status_t away_receive(kvio_xfer_t *xfer, away_t *away)
{
    kvio_xfer_receive_t receive;
    uint64_t deadline = kvio_time_ns() + 3000000000ull;
    kvio_status_t status = KVIO_INPROGRESS;
    while (status == KVIO_INPROGRESS && kvio_time_ns() < deadline) {
        status = kvio_xfer_poll(xfer, 0, &receive);
        if (status == KVIO_INPROGRESS)
            usleep(1000);
    }
    if (status != KVIO_OK)
        return status == KVIO_INPROGRESS ? KVIO_ERR_TIMEOUT : status;
    if (receive.meta.flags & KVIO_XFER_META_END) {
        away->end_version = receive.meta.version;
        return KVIO_OK;
    }
    while (status == KVIO_OK && !receive.complete)
        status = kvio_xfer_fetch_step(xfer, &receive);
    if (status == KVIO_OK && away->count < AWAY_MAX_NOTICES) {
        away->versions[away->count] = receive.meta.version;
        away->checksum_ok[away->count++] =
            receive.meta.version < 3 &&
            kvio_weights_checksum(kvio_xfer_slot(xfer, 0), AWAY_BYTES) ==
                away->checksum[receive.meta.version];
    }
    return status;
}

static kvio_status_t away_rank(kvio_rte_t *rte, void *arg)
{
    away_t *away = arg;
    int self = kvio_rte_index(rte);
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = create_pair(&away->transport, rte, AWAY_BYTES, &xfer,
                                       away->error[self], sizeof(away->error[0]));
    if (status != KVIO_OK)
        return status;
    char token = 1;
    void *data = NULL;
    size_t length = 0;
    if (self == 0) {
        void *weights = kvio_xfer_send_buffer(xfer);
        for (uint64_t version = 1; version <= 2 && status == KVIO_OK; version++) {
            if (version == 2) /* the receiver is away now */
                status = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &data, &length);
            free(data);
            data = NULL;
            kvio_weights_fill(weights, AWAY_BYTES, version);
            away->checksum[version] = kvio_weights_checksum(weights, AWAY_BYTES);
            if (status == KVIO_OK)
                status = kvio_xfer_publish(xfer, version, away->checksum[version],
                                           kvio_rte_time_ns(rte), NULL);
        }
        if (status == KVIO_OK)
            status = kvio_xfer_finish(xfer, 2);
        if (status == KVIO_OK)
            status = kvio_rte_send(rte, 1, KVIO_RTE_TAG_USER + 1, &token, 1);
    } else {
        status = away_receive(xfer, away); /* version 1 */
        /* Its subscription breaks; version 2 and the end are published
         * while it is away. */
        test_redis_cli(away->port, "client kill type pubsub");
        if (status == KVIO_OK)
            status = kvio_rte_send(rte, 0, KVIO_RTE_TAG_USER, &token, 1);
        if (status == KVIO_OK)
            status = kvio_rte_recv(rte, 0, KVIO_RTE_TAG_USER + 1, &data, &length);
        free(data);
        while (status == KVIO_OK && away->end_version == 0)
            status = away_receive(xfer, away);
    }
    if (status != KVIO_OK && kvio_xfer_error(xfer)[0] != '\0')
        snprintf(away->error[self], sizeof(away->error[0]), "%s", kvio_xfer_error(xfer));
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}

/* PREFIX latest used to be overwritten by the end: a receiver that came
 * back after "version 2, then the end" read only the end and ended without
 * version 2, silently. */
Test(xfer, redis_receiver_away_across_a_version_and_the_end_gets_the_version_first,
     .timeout = 20)
{
#ifndef KVIO_HAVE_REDIS
    test_require("redis", 0, "redis support not built");
#endif
    int port = private_redis_start();
    if (!test_require("redis", port > 0, "cannot start a redis-server of this test"))
        return;
    away_t away;
    memset(&away, 0, sizeof(away));
    away.port = port;
    char error[512] = "", url[64];
    cr_assert_eq(kvio_config_defaults(kvio_xfer_options, &away.transport, error,
                                      sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_choice_set(&away.transport.kind, "redis"), KVIO_OK);
    away.transport.chunk = 4096;
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    free(away.transport.redis.url);
    away.transport.redis.url = strdup(url);
    kvio_status_t status = run_ranks(2, 5000000000LL, away_rank, &away, error, sizeof(error));
    test_redis_cli(port, "shutdown nosave");
    cr_assert_eq(status, KVIO_OK, "%s / %s / %s", error, away.error[0], away.error[1]);
    cr_expect_eq(away.count, 2, "the receiver was told about %d versions", away.count);
    cr_expect_eq(away.versions[0], 1);
    cr_expect_eq(away.versions[1], 2, "version 2 comes before the end");
    cr_expect(away.checksum_ok[0] && away.checksum_ok[1], "the data read is each version's");
    cr_expect_eq(away.end_version, 2);
    kvio_config_free(kvio_xfer_options, &away.transport);
}

/* ---- A chain message that does not fit the weights ---- */

#ifdef KVIO_HAVE_UCX
#define BAD_CHAIN_BYTES 8192

typedef struct bad_chain {
    kvio_xfer_config_t transport;
    kvio_ucx_chain_message_t message; /* what rank 0 sends rank 1 */
    kvio_status_t poll_status;        /* rank 1's poll */
    char poll_error[512];
    char error[2][512];
} bad_chain_t;

static kvio_status_t bad_chain_rank(kvio_rte_t *rte, void *arg)
{
    bad_chain_t *bad = arg;
    int self = kvio_rte_index(rte);
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = create_pair(&bad->transport, rte, BAD_CHAIN_BYTES, &xfer,
                                       bad->error[self], sizeof(bad->error[0]));
    if (status != KVIO_OK)
        return status;
    char token = 1;
    void *data = NULL;
    size_t length = 0;
    if (self == 0) {
        status = kvio_xfer_ucx_send_am(xfer, 1, KVIO_UCX_AM_CHAIN, &bad->message,
                                       sizeof(bad->message));
        if (status == KVIO_OK)
            status = kvio_rte_recv(rte, 1, KVIO_RTE_TAG_USER, &data, &length);
        free(data);
    } else {
        kvio_xfer_receive_t receive;
        uint64_t deadline = kvio_time_ns() + 3000000000ull;
        do
            bad->poll_status = kvio_xfer_poll(xfer, 0, &receive);
        while (bad->poll_status == KVIO_INPROGRESS && kvio_time_ns() < deadline);
        snprintf(bad->poll_error, sizeof(bad->poll_error), "%s", kvio_xfer_error(xfer));
        status = kvio_rte_send(rte, 0, KVIO_RTE_TAG_USER, &token, 1);
    }
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}
#endif

/* Forwarding a message that claims more than the slot holds would put past
 * the end of the next rank's slot: each is dropped and ends the chain with
 * an error that names the rank it came from. */
Test(xfer, chain_message_that_does_not_fit_the_weights_is_refused_naming_the_sender,
     .timeout = 20)
{
    REQUIRE_UCX();
#ifdef KVIO_HAVE_UCX
    static const struct {
        uint64_t magic, bytes, bytes_ready;
        const char *reason;
    } cases[] = {
        {0x1234, BAD_CHAIN_BYTES, BAD_CHAIN_BYTES, "bad magic number"},
        {KVIO_XFER_MAGIC, 2 * BAD_CHAIN_BYTES, 2 * BAD_CHAIN_BYTES, "size other than"},
        {KVIO_XFER_MAGIC, BAD_CHAIN_BYTES, BAD_CHAIN_BYTES + 4096, "more bytes ready"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bad_chain_t bad;
        memset(&bad, 0, sizeof(bad));
        char error[512] = "";
        cr_assert_eq(kvio_config_defaults(kvio_xfer_options, &bad.transport, error,
                                          sizeof(error)), KVIO_OK);
        cr_assert_eq(kvio_choice_set(&bad.transport.kind, "ucx"), KVIO_OK);
        bad.transport.fanout = KVIO_XFER_FANOUT_CHAIN;
        bad.transport.chunk = 4096;
        bad.message.meta = (kvio_xfer_meta_t){.magic = cases[i].magic, .version = 1,
                                              .bytes = cases[i].bytes};
        bad.message.bytes_ready = cases[i].bytes_ready;
        kvio_status_t status = run_ranks(2, 5000000000LL, bad_chain_rank, &bad, error,
                                         sizeof(error));
        cr_assert_eq(status, KVIO_OK, "%s / %s / %s", error, bad.error[0], bad.error[1]);
        cr_expect_eq(bad.poll_status, KVIO_ERR_TRANSPORT, "case %zu: %s", i,
                     kvio_strerror(bad.poll_status));
        cr_expect(test_contains(bad.poll_error, "rank 0, the one before rank 1 in the chain") &&
                      test_contains(bad.poll_error, cases[i].reason),
                  "case %zu: %s", i, bad.poll_error);
        kvio_config_free(kvio_xfer_options, &bad.transport);
    }
#endif
}

/* ---- The set-up barrier after the slots are zeroed ---- */

typedef struct setup {
    kvio_xfer_config_t transport;
    bool rank1_sleeps;   /* rank 1 is late, not failed */
    char error[512];     /* rank 0's kvio_xfer_create */
} setup_t;

/* Rank 0 creates a file transport (whose set-up needs no collective but
 * kvio_xfer_create's barrier); rank 1, as if its own set-up had failed, or
 * were slow and then ended, never gets to that barrier. */
static kvio_status_t setup_rank(kvio_rte_t *rte, void *arg)
{
    setup_t *setup = arg;
    if (kvio_rte_index(rte) == 1) {
        if (!setup->rank1_sleeps)
            return KVIO_ERR_INTERNAL;
        usleep(1500000);
        return KVIO_OK;
    }
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = create_pair(&setup->transport, rte, 8192, &xfer, setup->error,
                                       sizeof(setup->error));
    kvio_xfer_destroy(xfer);
    return status;
}

Test(xfer, failed_set_up_names_the_rank_and_what_became_of_it, .timeout = 30)
{
    /* Slow is not lost: rank 1 takes longer than the timeout, and the
     * verdict is that it ended, not that it was late. */
    static const struct {
        bool sleeps;
        const char *expected;
    } cases[] = {
        {false, "file transport: rank 0: waiting for every rank's set-up: rank 1 failed"},
        {true, "file transport: rank 0: waiting for every rank's set-up: rank 1 ended without "
               "sending it"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = test_tmpdir();
        setup_t setup;
        memset(&setup, 0, sizeof(setup));
        setup.rank1_sleeps = cases[i].sleeps;
        char error[512] = "";
        cr_assert_eq(kvio_config_defaults(kvio_xfer_options, &setup.transport, error,
                                          sizeof(error)), KVIO_OK);
        cr_assert_eq(kvio_choice_set(&setup.transport.kind, "file"), KVIO_OK);
        free(setup.transport.file.dir);
        setup.transport.file.dir = strdup(dir);
        kvio_status_t status = run_ranks(2, 1000000000LL, setup_rank, &setup, error,
                                         sizeof(error));
        cr_expect_neq(status, KVIO_OK);
        cr_expect_str_eq(setup.error, cases[i].expected, "case %zu", i);
        kvio_config_free(kvio_xfer_options, &setup.transport);
        test_rmtree(dir);
        free(dir);
    }
}

/* ---- The checksum taken piece by piece, and what has landed ---- */

/* The checksum a version carries is XXH3-64 of the whole buffer however it
 * is fed: in pieces of any size, through the CPU's vector unit or not. */
/* The sender's sum, taken while the buffer is copied region by region,
 * is XXH3-64 of the whole buffer too, and the copy is exact: for lengths
 * around the edges of XXH3's stripes and blocks, regions that split
 * stripes, with and without a target, on the vector and the scalar path. */
Test(xfer, sum_taken_while_copying_is_xxh3_of_the_whole_buffer, .timeout = 20)
{
    static const uint64_t lengths[] = {241, 1024, 1025, 4096, 4097, 65536 + 63, 1000003};
    static const uint64_t regions[] = {1, 63, 64, 100, 1024, 4096 + 7, 1u << 20};
    const uint64_t most = 1000003;
    unsigned char *source = malloc(most), *target = malloc(most + 64);
    cr_assert(source != NULL && target != NULL);
    kvio_weights_fill(source, most, 5);
    for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
        uint64_t length = lengths[l], whole = XXH3_64bits(source, length);
        for (size_t r = 0; r < sizeof(regions) / sizeof(regions[0]); r++) {
            if (regions[r] == 1 && length > 5000)
                continue; /* byte by byte: the small lengths say it */
            for (int variant = 0; variant < 4; variant++) {
                bool copying = variant & 1, scalar = variant & 2;
                /* An unaligned target on some runs: the stores are not streamed. */
                unsigned char *to = target + (r % 2 ? 1 : 0);
                memset(target, 0, most + 64);
                kvio_sum_t sum;
                kvio_sum_start(&sum, source, length);
                if (scalar)
                    sum.vector = false;
                for (uint64_t done = 0; done < length;) {
                    uint64_t piece = length - done < regions[r] ? length - done : regions[r];
                    kvio_sum_pass(&sum, copying ? to + done : NULL, piece);
                    done += piece;
                }
                cr_expect_eq(kvio_sum_digest(&sum), whole,
                             "length %llu, regions of %llu, %s, %s", (unsigned long long)length,
                             (unsigned long long)regions[r], copying ? "copying" : "summing",
                             scalar ? "scalar" : "vector");
                if (copying)
                    cr_expect(memcmp(to, source, length) == 0, "length %llu, regions of %llu",
                              (unsigned long long)length, (unsigned long long)regions[r]);
            }
        }
    }
    free(source);
    free(target);
}

/* A receiver filling its buffer piece by piece from elsewhere (a bucket's
 * ring slot), summed on the way: the digest is XXH3 of the whole buffer
 * and the buffer holds every byte, for pieces that split stripes. */
Test(xfer, sum_taken_while_filling_is_xxh3_of_the_whole_buffer, .timeout = 20)
{
    static const uint64_t lengths[] = {241, 1024, 1025, 4097, 65536 + 63, 1000003};
    static const uint64_t pieces[] = {1, 63, 64, 100, 4096 + 7, 1u << 20};
    const uint64_t most = 1000003;
    unsigned char *source = malloc(most), *target = malloc(most + 64);
    cr_assert(source != NULL && target != NULL);
    kvio_weights_fill(source, most, 9);
    for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
        uint64_t length = lengths[l], whole = XXH3_64bits(source, length);
        for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
            if (pieces[p] == 1 && length > 5000)
                continue;
            for (int scalar = 0; scalar < 2; scalar++) {
                unsigned char *to = target + (p % 2 ? 1 : 0);
                memset(target, 0, most + 64);
                kvio_sum_t sum;
                kvio_sum_start(&sum, to, length);
                if (scalar)
                    sum.vector = false;
                for (uint64_t done = 0; done < length;) {
                    uint64_t piece = length - done < pieces[p] ? length - done : pieces[p];
                    kvio_sum_fill(&sum, source + done, piece);
                    done += piece;
                }
                cr_expect_eq(kvio_sum_digest(&sum), whole, "length %llu, pieces of %llu, %s",
                             (unsigned long long)length, (unsigned long long)pieces[p],
                             scalar ? "scalar" : "vector");
                cr_expect(memcmp(to, source, length) == 0, "length %llu, pieces of %llu",
                          (unsigned long long)length, (unsigned long long)pieces[p]);
            }
        }
    }
    free(source);
    free(target);
}

Test(xfer, checksum_in_pieces_is_xxh3_of_the_whole_buffer, .timeout = 10)
{
    static const uint64_t pieces[] = {1, 7, 64, 4096, 65536 + 3, 1u << 20};
    const uint64_t bytes = (1u << 20) + 12345;
    unsigned char *buffer = malloc(bytes);
    cr_assert_not_null(buffer);
    kvio_weights_fill(buffer, bytes, 7);
    uint64_t whole = XXH3_64bits(buffer, bytes); /* libxxhash's plain function */
    cr_expect_eq(kvio_weights_checksum(buffer, bytes), whole);
    cr_expect_eq(kvio_weights_checksum(buffer, bytes), whole);
    kvio_xfer_checksum_t *checksum = NULL;
    cr_assert_eq(kvio_xfer_checksum_create(&checksum), KVIO_OK);
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        kvio_xfer_checksum_reset(checksum);
        for (uint64_t offset = 0; offset < bytes; offset += pieces[i])
            kvio_xfer_checksum_update(checksum, buffer + offset,
                                      bytes - offset < pieces[i] ? bytes - offset : pieces[i]);
        cr_expect_eq(kvio_xfer_checksum_digest(checksum), whole, "pieces of %llu bytes",
                     (unsigned long long)pieces[i]);
    }
    kvio_xfer_checksum_destroy(checksum);
    free(buffer);
}

/* Verification runs as the weights land, so a flipped byte must be caught
 * wherever it lies relative to the pieces: in the first and last byte, on
 * either side of a chunk boundary, and over tcp, where the data moves by
 * UCX puts rather than by stores through a mapped slot. */
static void expect_corruption_caught(int64_t offset)
{
    char *dir = test_tmpdir();
    scenario_t scenario;
    scenario_defaults(&scenario, "ucx", dir);
    scenario.update.corrupt_offset = offset;
    char error[512] = "";
    kvio_status_t status = run_scenario(&scenario, error, sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s", error);
    for (int server = 0; server < scenario.num_serve; server++) {
        const kvio_update_result_t *result = &scenario.serve_result[server];
        cr_expect_eq(result->checksum_mismatches, 5, "offset %lld: every version caught",
                     (long long)offset);
        cr_expect_eq(result->active_version, 0, "offset %lld: nothing activated",
                     (long long)offset);
        for (size_t i = 0; i < result->count; i++)
            cr_expect(result->records[i].verified && !result->records[i].checksum_ok &&
                          result->records[i].t_activated_ns == 0 &&
                          result->records[i].t_verified_ns >= result->records[i].t_notified_ns,
                      "offset %lld, version %llu", (long long)offset,
                      (unsigned long long)result->records[i].version);
    }
    scenario_free(&scenario);
    test_rmtree(dir);
    free(dir);
}

Test(xfer, corrupted_byte_is_caught_wherever_it_lies, .timeout = 60)
{
    REQUIRE_UCX();
    const int64_t chunk = 64 * 1024; /* scenario_defaults' */
    const int64_t offsets[] = {0, chunk - 1, chunk, 3 * chunk + 17, WEIGHTS_BYTES - 1};
    for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++)
        expect_corruption_caught(offsets[i]);
}

Test(xfer, corrupted_byte_is_caught_over_tcp, .timeout = 60)
{
    REQUIRE_UCX();
    cr_assert_eq(setenv("UCX_TLS", "tcp", 1), 0);
    expect_corruption_caught(0);
    expect_corruption_caught(WEIGHTS_BYTES / 2 + 1);
}

#define LANDED_CHUNK 4096
#define LANDED_CHUNKS 3 /* the sender dies after these */

typedef struct landed_case {
    kvio_xfer_config_t transport;
    kvio_status_t publish_status;
    uint64_t landed_bytes;   /* the furthest the receiver was told of */
    uint64_t landed_version;
    bool prefix_matches;     /* the slot holds the sender's bytes that far */
    bool noticed;            /* a notice came (it must not) */
    char error[2][512];
} landed_case_t;

static kvio_status_t landed_rank(kvio_rte_t *rte, void *arg)
{
    landed_case_t *test = arg;
    int self = kvio_rte_index(rte);
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = create_pair(&test->transport, rte, WEIGHTS_BYTES, &xfer,
                                       test->error[self], sizeof(test->error[0]));
    if (status != KVIO_OK)
        return status;
    char token = 1;
    void *data = NULL;
    size_t length = 0;
    if (self == 0) {
        kvio_weights_fill(kvio_xfer_send_buffer(xfer), WEIGHTS_BYTES, 11);
        kvio_xfer_publish_times_t times;
        test->publish_status = kvio_xfer_publish_and_checksum(xfer, 1, kvio_rte_time_ns(rte),
                                                              &times);
        status = kvio_rte_send(rte, 1, KVIO_RTE_TAG_USER, &token, 1);
    } else {
        /* Progressing all along: over tcp a put lands only while the target
         * progresses. Until the sender says it is done, then for a while
         * (bounded) until every chunk it put is known. */
        bool sender_done = false;
        uint64_t deadline = kvio_time_ns() + 9000000000ull;
        while (status == KVIO_OK && kvio_time_ns() < deadline &&
               (!sender_done || test->landed_bytes < LANDED_CHUNKS * LANDED_CHUNK)) {
            if (!sender_done &&
                kvio_rte_try_recv(rte, 0, KVIO_RTE_TAG_USER, &data, &length) == KVIO_OK) {
                free(data);
                sender_done = true;
                deadline = kvio_time_ns() + 2000000000ull;
            }
            kvio_xfer_progress(xfer);
            kvio_xfer_landed_t landed;
            if (kvio_xfer_landed(xfer, &landed) == KVIO_OK) {
                test->landed_version = landed.version;
                test->landed_bytes = landed.bytes;
                if (landed.slot != 0)
                    status = KVIO_ERR_INTERNAL; /* version 1 goes to slot 0 */
            }
        }
        unsigned char *expected = malloc(WEIGHTS_BYTES);
        if (expected != NULL) {
            kvio_weights_fill(expected, WEIGHTS_BYTES, 11);
            test->prefix_matches =
                memcmp(kvio_xfer_slot(xfer, 0), expected, test->landed_bytes) == 0;
        }
        free(expected);
        kvio_xfer_receive_t receive;
        test->noticed = kvio_xfer_poll(xfer, 1, &receive) != KVIO_INPROGRESS;
    }
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}

/* A receiver learns, before the notice, how much of a version is in its
 * slot (what it sums while the rest moves); a sender that dies mid-version
 * leaves that prefix and no notice, so nothing of it is ever activated.
 * Stores through a mapped slot (shared memory) are in place at once, so the
 * receiver is told of every chunk; puts over tcp are flushed as they go, and
 * a sender that dies leaves the last ones unflushed (exact: false). */
static void expect_landed_before_the_notice(bool exact)
{
    landed_case_t test;
    memset(&test, 0, sizeof(test));
    char error[512] = "";
    cr_assert_eq(kvio_config_defaults(kvio_xfer_options, &test.transport, error,
                                      sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_choice_set(&test.transport.kind, "ucx"), KVIO_OK);
    test.transport.chunk = LANDED_CHUNK;
    test.transport.die_after_chunks = LANDED_CHUNKS;
    test.transport.inflight = 1; /* over tcp the sender progresses between puts */
    kvio_status_t status = run_ranks(2, 10000000000LL, landed_rank, &test, error,
                                     sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s / %s / %s", error, test.error[0], test.error[1]);
    cr_expect_eq(test.publish_status, KVIO_ERR_INTERRUPTED, "the sender died mid-version");
    if (exact) {
        cr_expect_eq(test.landed_version, 1);
        cr_expect_eq(test.landed_bytes, LANDED_CHUNKS * LANDED_CHUNK,
                     "every chunk stored before the sender died, no more");
    }
    cr_expect(test.landed_bytes <= LANDED_CHUNKS * LANDED_CHUNK &&
                  test.landed_bytes % LANDED_CHUNK == 0,
              "whole chunks, none after the sender died: %llu bytes",
              (unsigned long long)test.landed_bytes);
    cr_expect(test.prefix_matches, "the slot holds the sender's bytes as far as it was told");
    cr_expect(!test.noticed, "a version the sender never finished is never announced");
    kvio_config_free(kvio_xfer_options, &test.transport);
}

Test(xfer, ucx_receiver_learns_what_has_landed_before_the_notice, .timeout = 30)
{
    REQUIRE_UCX();
    expect_landed_before_the_notice(true);
}

Test(xfer, ucx_over_tcp_receiver_learns_what_has_landed_before_the_notice, .timeout = 30)
{
    REQUIRE_UCX();
    cr_assert_eq(setenv("UCX_TLS", "tcp", 1), 0);
    expect_landed_before_the_notice(false);
}

/* A delta's round trip: the trainer changes a version's share of the
 * elements; each bucket's changes, encoded and applied in pieces of odd
 * sizes onto the version before, rebuild the new weights exactly, in
 * about fraction x (element + 4) bytes (index_value) or fraction x element
 * + 1/8 per element (bitmap), within the bound the ring is sized by. */
Test(xfer, a_delta_rebuilds_the_next_version_in_its_share_of_the_bytes, .timeout = 30)
{
    const uint64_t bytes = 3 << 20, buckets[] = {0, 1000000, 1000008, 2500000, 3 << 20};
    static const struct {
        double fraction;
        int encoding;
        uint32_t element;
    } cases[] = {
        {0.045, KVIO_DELTA_INDEX_VALUE, 2}, {0.045, KVIO_DELTA_BITMAP, 2},
        {0.3, KVIO_DELTA_INDEX_VALUE, 1},   {0.01, KVIO_DELTA_BITMAP, 4},
        {1.0, KVIO_DELTA_INDEX_VALUE, 8},   {0.7, KVIO_DELTA_BITMAP, 2},
    };
    unsigned char *before = malloc(bytes), *after = malloc(bytes), *rebuilt = malloc(bytes);
    unsigned char *encoding = malloc(2 * bytes + 4096);
    cr_assert(before && after && rebuilt && encoding);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        kvio_delta_t delta = {.fraction = cases[c].fraction,
                                   .encoding = cases[c].encoding,
                                   .element = cases[c].element};
        uint32_t element = delta.element;
        kvio_weights_fill(before, bytes, 3 + c);
        memcpy(after, before, bytes);
        kvio_delta_mutate(&delta, after, bytes, 7);
        uint64_t changed = 0;
        for (uint64_t i = 0; i < bytes / element; i++)
            changed += memcmp(before + i * element, after + i * element, element) != 0;
        double elements = (double)(bytes / element);
        cr_expect(fabs((double)changed - elements * delta.fraction) <= 5, "case %zu: %llu of "
                  "%.0f elements changed", c, (unsigned long long)changed, elements);
        memcpy(rebuilt, before, bytes);
        uint64_t wire = 0, entries_all = 0;
        for (size_t b = 0; b + 1 < sizeof(buckets) / sizeof(buckets[0]); b++) {
            uint64_t offset = buckets[b], length = buckets[b + 1] - offset, entries = 0;
            uint64_t written = kvio_delta_encode(&delta, 7, after, bytes, offset, length,
                                                      encoding, &entries);
            cr_expect_leq(written, kvio_delta_bound(&delta, length), "case %zu bucket %zu",
                          c, b);
            wire += written;
            entries_all += entries;
            uint64_t cursor = 0, piece = 4096 * element + 3 * element; /* odd, whole elements */
            for (uint64_t from = 0; from < length; from += piece) {
                uint64_t to = from + piece < length ? from + piece : length;
                cr_assert(kvio_delta_apply(&delta, encoding, entries, length,
                                                rebuilt + offset, from, to, &cursor),
                          "case %zu bucket %zu: apply [%llu, %llu)", c, b,
                          (unsigned long long)from, (unsigned long long)to);
            }
            cr_expect_eq(cursor, entries, "case %zu bucket %zu: every change applied", c, b);
        }
        cr_expect_eq(entries_all, changed, "case %zu: each change sent once", c);
        cr_expect(memcmp(rebuilt, after, bytes) == 0, "case %zu: rebuilt weights differ", c);
        double expected = delta.encoding == KVIO_DELTA_BITMAP
                              ? elements * delta.fraction * element + elements / 8
                              : elements * delta.fraction * (element + 4);
        cr_expect(fabs((double)wire - expected) <= expected * 0.01 + 64, "case %zu: %llu bytes "
                  "on the wire, %.0f expected", c, (unsigned long long)wire, expected);
    }
    /* A corrupt encoding (an index past its bucket) is caught, not written. */
    kvio_delta_t delta = {.fraction = 0.1, .element = 2};
    uint32_t record[2] = {4000000, 0};
    uint64_t cursor = 0;
    cr_expect_not(kvio_delta_apply(&delta, record, 1, 1 << 20, rebuilt, 0, 1 << 20,
                                        &cursor));
    free(before);
    free(after);
    free(rebuilt);
    free(encoding);
}

/* ---------- what a model update's file holds (#54) ---------- */

typedef struct update_file {
    scenario_t scenario;
    unsigned char *bytes; /* the newest version's file, as the sender left it */
    size_t length;
} update_file_t;

/* The newest vNNNNNNNNNN.model in dir (malloc'd bytes), or NULL. */
static unsigned char *newest_update_file(const char *dir, size_t *length_p)
{
    DIR *listing = opendir(dir);
    if (listing == NULL)
        return NULL;
    char newest[256] = "";
    struct dirent *entry;
    while ((entry = readdir(listing)) != NULL)
        if (entry->d_name[0] == 'v' && strstr(entry->d_name, ".model") != NULL &&
            strcmp(entry->d_name, newest) > 0)
            snprintf(newest, sizeof(newest), "%s", entry->d_name);
    closedir(listing);
    if (newest[0] == '\0')
        return NULL;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, newest);
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return NULL;
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)length + 1);
    if (bytes != NULL && fread(bytes, 1, (size_t)length, file) != (size_t)length) {
        free(bytes);
        bytes = NULL;
    }
    fclose(file);
    *length_p = (size_t)length;
    return bytes;
}

/* The scenario's ranks, the trainer reading its newest file back before
 * the transport is torn down (and the files with it). */
static kvio_status_t update_file_rank(kvio_rte_t *rte, void *arg)
{
    update_file_t *run = arg;
    scenario_t *scenario = &run->scenario;
    int self = kvio_rte_index(rte);
    int receivers[1] = {1};
    kvio_xfer_t *xfer = NULL;
    kvio_status_t status = kvio_xfer_create(&scenario->transport, rte,
                                            self == 0 ? KVIO_XFER_SENDER : KVIO_XFER_RECEIVER, 0,
                                            receivers, 1, WEIGHTS_BYTES, &xfer,
                                            scenario->error[self], sizeof(scenario->error[0]));
    if (status != KVIO_OK)
        return status;
    if (self == 0) {
        status = kvio_train_run(&scenario->train, 3, rte, xfer, 0, NULL, &scenario->train_result,
                                scenario->error[0], sizeof(scenario->error[0]));
        if (status == KVIO_OK)
            run->bytes = newest_update_file(scenario->transport.file.dir, &run->length);
    } else {
        status = receive_updates(&scenario->update, rte, xfer, 0,
                                 kvio_rte_time_ns(rte) + 20000000000LL,
                                 &scenario->serve_result[0], scenario->error[1],
                                 sizeof(scenario->error[0]));
    }
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}

/* A file-transport run of the scenario's trainer with data as given; the
 * newest update file as the sender wrote it. */
static unsigned char *update_file_with(const char *data_text, size_t *length_p)
{
    char *dir = test_tmpdir(), error[512] = "";
    update_file_t run;
    memset(&run, 0, sizeof(run));
    scenario_defaults(&run.scenario, "file", dir);
    run.scenario.num_serve = 1;
    run.scenario.train.transport.data_seed = 3;
    cr_assert_eq(kvio_data_parse(data_text, &run.scenario.train.transport.data, error,
                                 sizeof(error)), KVIO_OK, "%s", error);
    run.scenario.transport = run.scenario.train.transport;
    kvio_status_t status = run_ranks(2, 10000000000LL, update_file_rank, &run, error,
                                     sizeof(error));
    cr_assert_eq(status, KVIO_OK, "%s / %s / %s", error, run.scenario.error[0],
                 run.scenario.error[1]);
    cr_assert_not_null(run.bytes, "no update file was left to read");
    cr_assert_eq(run.length, 4096 + WEIGHTS_BYTES);
    scenario_free(&run.scenario);
    test_rmtree(dir);
    free(dir);
    *length_p = run.length;
    return run.bytes;
}

Test(xfer, a_file_update_is_incompressible_and_has_no_duplicate_pages, .timeout = 30)
{
    size_t length = 0;
    unsigned char *bytes = update_file_with("random", &length);
    test_expect_irreducible(bytes, length, "the update");
    free(bytes);
}

Test(xfer, data_zero_makes_a_file_update_of_zeros_but_its_versions_words, .timeout = 30)
{
    size_t length = 0;
    unsigned char *bytes = update_file_with("zero", &length);
    /* The weights are zeros but for one word per 4 KiB page per version. */
    double compressed = test_zlib_ratio(bytes, length);
    cr_expect_gt(compressed, 20, "zlib shrinks a zero update only %.1fx", compressed);
    free(bytes);
}
