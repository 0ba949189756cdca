/* The trainer of an emulate RL run on a rank of its own (separate
 * placement, async): as verl's or AReaL's trainer on its own GPUs, it
 * trains each step the rollout (rank 0) hands it, for the step's time,
 * changing its weights, then publishes them over the transport into the
 * rollout's free slot; the rollout checks and activates them. */
#include "kvio/rl.h"

#include "serve/rl_int.h"

#include "kvio/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One word of every page changed by the step (rl_int.h). */
void rl_emu_train_bytes(unsigned char *weights, uint64_t bytes, uint64_t step)
{
    for (uint64_t at = 0; at + sizeof(uint64_t) <= bytes; at += 4096u) {
        uint64_t word = (step + 1) * 0x9e3779b97f4a7c15ull ^ at;
        memcpy(weights + at, &word, sizeof(word));
    }
}

/* Takes the next message from rank 0 with tag into message (length
 * bytes). */
static kvio_status_t receive(kvio_rte_t *rte, int tag, void *message, size_t length,
                             const char *what, char *error_p, size_t error_len)
{
    void *data = NULL;
    size_t got = 0;
    kvio_status_t status = kvio_rte_recv(rte, 0, tag, &data, &got);
    if (status == KVIO_OK && got != length)
        status = KVIO_ERR_INVALID;
    if (status == KVIO_OK)
        memcpy(message, data, length);
    else
        snprintf(error_p, error_len, "rl trainer rank: waiting for %s: %s", what,
                 status == KVIO_ERR_INVALID ? "a message of the wrong size"
                                            : kvio_rte_verdict(rte));
    free(data);
    return status;
}

/* Trains one step: the weights change, and the step lasts its time from
 * when the rollout's message came (longer if changing them took longer);
 * then they go out. */
static kvio_status_t train_and_publish(kvio_rte_t *rte, kvio_xfer_t *xfer, uint64_t bytes,
                                       const rl_train_message_t *message, char *error_p,
                                       size_t error_len)
{
    uint64_t from_ns = kvio_time_ns();
    rl_emu_train_bytes(kvio_xfer_send_buffer(xfer), bytes, message->step);
    kvio_wait_until_ns(from_ns + (uint64_t)message->train_ns);
    kvio_xfer_publish_times_t times;
    kvio_status_t status = kvio_xfer_publish_and_checksum(xfer, message->step + 1,
                                                          kvio_rte_time_ns(rte), &times);
    if (status != KVIO_OK)
        snprintf(error_p, error_len, "rl trainer rank: publishing step %llu's weights: %s",
                 (unsigned long long)message->step + 1, kvio_xfer_error(xfer));
    return status;
}

void rl_link_config(const kvio_xfer_config_t *transport, kvio_xfer_config_t *config_p)
{
    /* Host weights as one blob: the trainer rank moves them whole. */
    *config_p = *transport;
    config_p->device = (kvio_device_config_t){.weights = KVIO_WEIGHTS_HOST};
    config_p->bucket_bytes = NULL;
    config_p->num_buckets = 0;
}

kvio_status_t rl_link_create(kvio_rte_t *rte, const kvio_xfer_config_t *transport,
                             kvio_xfer_role_t role, uint64_t bytes, kvio_xfer_config_t *config_p,
                             kvio_xfer_t **xfer_p, char *error_p, size_t error_len)
{
    rl_link_config(transport, config_p);
    int receivers[1] = {0};
    return kvio_xfer_create(config_p, rte, role, RL_TRAINER_RANK, receivers, 1, bytes, xfer_p,
                            error_p, error_len);
}

kvio_status_t rl_trainer_rank(kvio_rte_t *rte, const kvio_xfer_config_t *transport,
                              char *error_p, size_t error_len)
{
    rl_plan_message_t plan;
    kvio_status_t status = receive(rte, KVIO_RL_TAG_PLAN, &plan, sizeof(plan),
                                   "the weights' size", error_p, error_len);
    if (status != KVIO_OK)
        return status;
    kvio_xfer_t *xfer = NULL;
    kvio_xfer_config_t config; /* the transport borrows it until destroyed */
    status = rl_link_create(rte, transport, KVIO_XFER_SENDER, plan.bytes, &config, &xfer,
                            error_p, error_len);
    if (status != KVIO_OK)
        return status;
    for (;;) {
        rl_train_message_t message;
        status = receive(rte, KVIO_RL_TAG_TRAIN, &message, sizeof(message), "a step to train",
                         error_p, error_len);
        if (status != KVIO_OK || message.step == RL_STEP_NONE)
            break;
        status = train_and_publish(rte, xfer, plan.bytes, &message, error_p, error_len);
        if (status != KVIO_OK)
            break;
    }
    kvio_xfer_detach(xfer);
    if (status == KVIO_OK)
        status = kvio_rte_barrier(rte);
    kvio_xfer_destroy(xfer);
    return status;
}
