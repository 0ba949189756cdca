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
        if (kvio_checkpoint_due(&config, step, 0, 0, 0, 0)) {
            cr_expect_eq(step % 4, 0, "step %lld", (long long)step);
            published++;
        }
    cr_expect_eq(published, 5);
}

Test(train, interval_waits_for_the_interval_since_the_last_version, .timeout = 5)
{
    kvio_checkpoint_config_t config = {.policy = KVIO_CHECKPOINT_INTERVAL,
                                       .interval_ns = 1000};
    cr_expect_not(kvio_checkpoint_due(&config, 5, 1999, 4, 1000, 0));
    cr_expect(kvio_checkpoint_due(&config, 5, 2000, 4, 1000, 0));
}

Test(train, adaptive_publishes_when_the_loss_gain_outweighs_the_cost, .timeout = 5)
{
    kvio_checkpoint_config_t config = {
        .policy = KVIO_CHECKPOINT_ADAPTIVE, .loss = {.a = 4.0, .b = 0.5, .c = 1.5},
        .serving_rate = 100, .cost_weight = 1.0, .initial_cost_ns = 100000000};
    /* L(1) - L(4) = 4 - 2 = 2; times 100 req/s = 200 >= 1 * cost. */
    cr_expect(kvio_checkpoint_due(&config, 4, 0, 1, 0, 0));
    /* Late in training the curve is flat: L(10000) - L(10001) is about
     * 2e-6; times 100 = 2e-4 < 0.1 s of measured cost. */
    cr_expect_not(kvio_checkpoint_due(&config, 10001, 0, 10000, 0, 100000000));
    /* A cheaper update (1 us) makes the same small gain worth it. */
    cr_expect(kvio_checkpoint_due(&config, 10001, 0, 10000, 0, 1000));
    cr_expect_float_eq(kvio_loss_at(&config.loss, 4), 3.5, 1e-12);
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
