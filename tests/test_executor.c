/* Executors by name, table-driven: how each lets an iteration's time pass
 * (virtual jumps its clock, realtime and gpu wait on the host clock and end
 * on time), and how a real wait polls the lanes' receivers while there is
 * time, ends early when a poll wakes it, and returns a poll's error. */
#include <criterion/criterion.h>

#include "kvio/clock.h"
#include "serve/loop_int.h"
#include "tests/helpers.h"

typedef struct executor_case {
    const char *name;
    bool real; /* waiting takes real time */
} executor_case_t;

static const executor_case_t cases[] = {
    {"virtual", false},
    {"realtime", true},
    {"gpu", true}, /* its compute needs a device (tests/test_gpu.c); its wait is realtime's */
};

Test(executor, every_executor_lets_its_time_pass_as_documented, .timeout = 30)
{
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const kvio_executor_ops_t *ops = kvio_executor_find(cases[c].name);
        cr_assert_not_null(ops, "%s", cases[c].name);
        cr_expect_eq((ops->caps & KVIO_EXECUTOR_CAP_REAL) != 0, cases[c].real, "%s",
                     cases[c].name);
        kvio_executor_t executor = {.ops = ops, .origin_ns = kvio_time_ns()};
        uint64_t before = kvio_time_ns();
        int64_t start = ops->now(&executor);
        int64_t end = start + (cases[c].real ? 3000000 : 3600000000000);
        cr_assert_eq(ops->wait_until(&executor, end, NULL), KVIO_OK);
        cr_expect_geq(ops->now(&executor), end, "%s: returned before the end", cases[c].name);
        if (!cases[c].real)
            cr_expect_lt(kvio_time_ns() - before, 1000000000ull,
                         "%s: virtual time waited for real", cases[c].name);
        else
            cr_expect_lt(ops->now(&executor) - end, (int64_t)(test_seconds(0.05) * 1e9),
                         "%s: ended far past the end", cases[c].name);
    }
    cr_expect_null(kvio_executor_find("quantum"));
}

typedef struct poll_counter {
    int calls, wake_at;
    kvio_status_t fail;
} poll_counter_t;

static kvio_status_t count_polls(void *context, int64_t now_ns, bool *worked_p, bool *wake_p,
                                 int64_t *nap_ns_p)
{
    (void)now_ns;
    (void)worked_p;
    (void)nap_ns_p;
    poll_counter_t *counter = context;
    counter->calls++;
    *wake_p = counter->wake_at > 0 && counter->calls >= counter->wake_at;
    return counter->fail;
}

Test(executor, a_real_wait_polls_until_the_spin_and_a_poll_can_end_it, .timeout = 30)
{
    const kvio_executor_ops_t *ops = kvio_executor_find("realtime");
    kvio_executor_t executor = {.ops = ops, .origin_ns = kvio_time_ns()};
    poll_counter_t counter = {0};
    kvio_serve_poll_t poll = {.poll = count_polls, .context = &counter};
    int64_t end = ops->now(&executor) + 20000000; /* 20 ms */
    cr_assert_eq(ops->wait_until(&executor, end, &poll), KVIO_OK);
    cr_expect_geq(ops->now(&executor), end);
    cr_expect_gt(counter.calls, 1, "the receivers were polled while waiting");

    counter = (poll_counter_t){.wake_at = 3};
    end = ops->now(&executor) + 5000000000; /* 5 s, ended by the third poll */
    cr_assert_eq(ops->wait_until(&executor, end, &poll), KVIO_OK);
    cr_expect_lt(ops->now(&executor), end, "a waking poll ends the wait early");
    cr_expect_eq(counter.calls, 3);

    counter = (poll_counter_t){.fail = KVIO_ERR_PEER};
    cr_expect_eq(ops->wait_until(&executor, ops->now(&executor) + 1000000000, &poll),
                 KVIO_ERR_PEER, "a poll's error ends the wait");
}
