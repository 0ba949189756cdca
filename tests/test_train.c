/* Tests for the training rank's pieces: checkpoint policies decide as
 * documented (every_n_steps, interval, adaptive against the learning curve
 * and the measured cost), and every new version changes every page of the
 * weights so a stale page cannot pass the checksum. */
#include "kvio/train.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(train, every_n_steps_publishes_on_multiples, .timeout = 5)
{
    kvio_checkpoint_config_t config = {.policy = KVIO_CHECKPOINT_EVERY_N_STEPS,
                                       .every_n_steps = 4};
    int published = 0;
    for (int64_t step = 1; step <= 20; step++)
        if (kvio_checkpoint_due(&config, step, 0, 0, 0, 0, -1)) {
            cr_expect_eq(step % 4, 0, "step %lld", (long long)step);
            published++;
        }
    cr_expect_eq(published, 5);
}

Test(train, interval_waits_for_the_interval_since_the_last_version, .timeout = 5)
{
    kvio_checkpoint_config_t config = {.policy = KVIO_CHECKPOINT_INTERVAL,
                                       .interval_ns = 1000};
    cr_expect_not(kvio_checkpoint_due(&config, 5, 1999, 4, 1000, 0, -1));
    cr_expect(kvio_checkpoint_due(&config, 5, 2000, 4, 1000, 0, -1));
}

Test(train, adaptive_publishes_when_the_loss_gain_outweighs_the_cost, .timeout = 5)
{
    kvio_checkpoint_config_t config = {
        .policy = KVIO_CHECKPOINT_ADAPTIVE, .loss = {.a = 4.0, .b = 0.5, .c = 1.5},
        .serving_rate = 100, .cost_weight = 1.0, .initial_cost_ns = 100000000};
    /* L(1) - L(4) = 4 - 2 = 2; times 100 req/s = 200 >= 1 * cost. */
    cr_expect(kvio_checkpoint_due(&config, 4, 0, 1, 0, 0, -1));
    /* Late in training the curve is flat: L(10000) - L(10001) is about
     * 2e-6; times 100 = 2e-4 < 0.1 s of measured cost. */
    cr_expect_not(kvio_checkpoint_due(&config, 10001, 0, 10000, 0, 100000000, -1));
    /* A cheaper update (1 us) makes the same small gain worth it. */
    cr_expect(kvio_checkpoint_due(&config, 10001, 0, 10000, 0, 1000, -1));
    cr_expect_float_eq(kvio_loss_at(&config.loss, 4), 3.5, 1e-12);
}

/* #53.7: the measured serving rate, not the configured one, weighs the gain. */
Test(train, adaptive_weighs_the_gain_by_the_measured_serving_rate, .timeout = 5)
{
    kvio_checkpoint_config_t config = {
        .policy = KVIO_CHECKPOINT_ADAPTIVE, .loss = {.a = 4.0, .b = 0.5, .c = 1.5},
        .serving_rate = 100, .cost_weight = 1.0, .initial_cost_ns = 100000000};
    /* L(100) - L(101) = 0.001978...; at the prior 100 req/s that is 0.198 >= 0.1 s. */
    cr_expect(kvio_checkpoint_due(&config, 101, 0, 100, 0, 0, -1));
    /* Measured 10 req/s: 0.0198 < 0.1. */
    cr_expect_not(kvio_checkpoint_due(&config, 101, 0, 100, 0, 0, 10));
    /* Nothing served yet: an update helps no request. */
    cr_expect_not(kvio_checkpoint_due(&config, 101, 0, 100, 0, 0, 0));
}

Test(train, the_served_meter_sums_ranks_over_the_last_windows, .timeout = 5)
{
    kvio_served_meter_t meter;
    cr_assert_eq(kvio_served_meter_init(&meter, 3, 0), KVIO_OK);
    cr_expect_lt(kvio_served_meter_rate(&meter), 0, "nothing reported: not measured");
    /* Rank 1 serves 2 req/s, rank 2 serves 3 req/s, for 5 s. */
    for (int64_t s = 1; s <= 5; s++) {
        kvio_served_meter_report(&meter, 1, &(kvio_served_report_t){s * 1000000000ll,
                                                                   (uint64_t)(2 * s)});
        kvio_served_meter_report(&meter, 2, &(kvio_served_report_t){s * 1000000000ll,
                                                                   (uint64_t)(3 * s)});
    }
    cr_expect_float_eq(kvio_served_meter_rate(&meter), 5.0, 1e-9);
    /* Rank 1 stops serving from 5 s on: after two windows its rate is 0. */
    for (int64_t s = 6; s <= 30; s++)
        kvio_served_meter_report(&meter, 1, &(kvio_served_report_t){s * 1000000000ll, 10});
    for (int64_t s = 6; s <= 30; s++)
        kvio_served_meter_report(&meter, 2, &(kvio_served_report_t){s * 1000000000ll,
                                                                   (uint64_t)(3 * s)});
    cr_expect_float_eq(kvio_served_meter_rate(&meter), 3.0, 1e-9);
    /* A rank out of range is ignored. */
    kvio_served_meter_report(&meter, 7, &(kvio_served_report_t){31000000000ll, 1000});
    cr_expect_float_eq(kvio_served_meter_rate(&meter), 3.0, 1e-9);
    kvio_served_meter_free(&meter);
}

Test(train, a_new_version_changes_every_page, .timeout = 5)
{
    const uint64_t bytes = 64 * 4096 + 100; /* a partial last page too */
    unsigned char *before = malloc(bytes), *after = malloc(bytes);
    cr_assert(before != NULL && after != NULL);
    kvio_weights_fill(before, bytes, 7);
    memcpy(after, before, bytes);
    uint64_t checksum = kvio_weights_checksum(after, bytes);
    kvio_weights_mutate(after, bytes, 1);
    for (uint64_t page = 0; page < bytes; page += 4096) {
        uint64_t length = bytes - page < 4096 ? bytes - page : 4096;
        cr_expect_neq(memcmp(before + page, after + page, length), 0, "page at %llu unchanged",
                      (unsigned long long)page);
    }
    cr_expect_neq(kvio_weights_checksum(after, bytes), checksum);
    /* Version 2 differs from version 1 as well. */
    uint64_t first = kvio_weights_checksum(after, bytes);
    kvio_weights_mutate(after, bytes, 2);
    cr_expect_neq(kvio_weights_checksum(after, bytes), first);
    free(before);
    free(after);
}
