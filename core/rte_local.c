/* The local runtime: every rank is a thread of this process. Each rank has a
 * mailbox (a FIFO of messages under a mutex and condition variable). A rank
 * answers for as long as its thread runs (the process is alive, so it is
 * never silent); one that finishes marks itself, so a peer waiting for it
 * fails at once. Shared state is only the mailboxes and the per-rank state
 * words, both under their own locks. */
#include "core/rte_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvio/clock.h"

typedef struct message {
    struct message *next;
    int from;
    int tag;
    size_t length;
    void *data;
} message_t;

typedef struct mailbox {
    pthread_mutex_t lock;
    pthread_cond_t arrived;
    message_t *head;
    message_t *tail;
} mailbox_t;

typedef enum { RANK_RUNNING = 0, RANK_DONE = 1, RANK_FAILED = 2 } rank_state_t;

typedef struct local_world {
    int size;
    mailbox_t *mailboxes;
    pthread_mutex_t state_lock;
    rank_state_t *states; /* under state_lock */
} local_world_t;

static kvio_status_t local_init(void *priv, const kvio_rte_params_t *params, int *size_p,
                                int *first_local_p, int *num_local_p, char *error_p,
                                size_t error_len)
{
    local_world_t *world = priv;
    world->size = params->num_ranks;
    world->mailboxes = calloc((size_t)world->size, sizeof(*world->mailboxes));
    world->states = calloc((size_t)world->size, sizeof(*world->states));
    if (world->mailboxes == NULL || world->states == NULL) {
        free(world->mailboxes);
        free(world->states);
        snprintf(error_p, error_len, "local runtime: out of memory");
        return KVIO_ERR_NOMEM;
    }
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    for (int i = 0; i < world->size; i++) {
        pthread_mutex_init(&world->mailboxes[i].lock, NULL);
        pthread_cond_init(&world->mailboxes[i].arrived, &attributes);
    }
    pthread_condattr_destroy(&attributes);
    pthread_mutex_init(&world->state_lock, NULL);
    *size_p = world->size;
    *first_local_p = 0;
    *num_local_p = world->size;
    return KVIO_OK;
}

static void local_fini(void *priv, bool failed)
{
    local_world_t *world = priv;
    for (int i = 0; i < world->size; i++) {
        message_t *message = world->mailboxes[i].head;
        while (message != NULL) {
            message_t *next = message->next;
            free(message->data);
            free(message);
            message = next;
        }
        pthread_mutex_destroy(&world->mailboxes[i].lock);
        pthread_cond_destroy(&world->mailboxes[i].arrived);
    }
    pthread_mutex_destroy(&world->state_lock);
    free(world->mailboxes);
    free(world->states);
}

static rank_state_t rank_state(local_world_t *world, int rank)
{
    pthread_mutex_lock(&world->state_lock);
    rank_state_t state = world->states[rank];
    pthread_mutex_unlock(&world->state_lock);
    return state;
}

static kvio_status_t local_send(void *priv, int from, int to, int tag, const void *data,
                                size_t length, kvio_rte_waiter_t *waiter)
{
    local_world_t *world = priv;
    (void)waiter; /* queued at once: nothing to wait for */
    message_t *message = calloc(1, sizeof(*message));
    void *copy = malloc(length + 1);
    if (message == NULL || copy == NULL) {
        free(message);
        free(copy);
        return KVIO_ERR_NOMEM;
    }
    memcpy(copy, data, length);
    *message = (message_t){.from = from, .tag = tag, .length = length, .data = copy};
    mailbox_t *mailbox = &world->mailboxes[to];
    pthread_mutex_lock(&mailbox->lock);
    if (mailbox->tail != NULL)
        mailbox->tail->next = message;
    else
        mailbox->head = message;
    mailbox->tail = message;
    pthread_cond_broadcast(&mailbox->arrived);
    pthread_mutex_unlock(&mailbox->lock);
    return KVIO_OK;
}

/* How often a waiting rank looks at its peers' state without a message. */
#define LOOK_NS 20000000ull

static kvio_status_t local_recv(void *priv, int self, int from, int tag,
                                kvio_rte_waiter_t *waiter, void **data_p, size_t *length_p)
{
    local_world_t *world = priv;
    mailbox_t *mailbox = &world->mailboxes[self];
    kvio_status_t status = KVIO_ERR_TIMEOUT;
    pthread_mutex_lock(&mailbox->lock);
    for (;;) {
        message_t *previous = NULL;
        for (message_t *message = mailbox->head; message != NULL; message = message->next) {
            if (message->from == from && message->tag == tag) {
                if (previous != NULL)
                    previous->next = message->next;
                else
                    mailbox->head = message->next;
                if (mailbox->tail == message)
                    mailbox->tail = previous;
                *data_p = message->data;
                *length_p = message->length;
                free(message);
                status = KVIO_OK;
                goto done;
            }
            previous = message;
        }
        /* A finished rank sends nothing more (its messages were queued
         * before it said so): fail now. */
        if (rank_state(world, from) != RANK_RUNNING) {
            status = KVIO_ERR_PEER;
            goto done;
        }
        if (waiter == NULL || !kvio_rte_waiter_go_on(waiter))
            goto done;
        uint64_t wake = kvio_time_ns() + LOOK_NS;
        struct timespec until = {.tv_sec = (time_t)(wake / 1000000000ull),
                                 .tv_nsec = (long)(wake % 1000000000ull)};
        pthread_cond_timedwait(&mailbox->arrived, &mailbox->lock, &until);
    }
done:
    pthread_mutex_unlock(&mailbox->lock);
    return status;
}

static void local_rank_done(void *priv, int rank, kvio_status_t status)
{
    local_world_t *world = priv;
    pthread_mutex_lock(&world->state_lock);
    world->states[rank] = status == KVIO_OK ? RANK_DONE : RANK_FAILED;
    pthread_mutex_unlock(&world->state_lock);
    for (int i = 0; i < world->size; i++) {
        pthread_mutex_lock(&world->mailboxes[i].lock);
        pthread_cond_broadcast(&world->mailboxes[i].arrived);
        pthread_mutex_unlock(&world->mailboxes[i].lock);
    }
}

static kvio_peer_state_t local_peer_state(void *priv, int rank, int64_t *silent_ns_p)
{
    *silent_ns_p = 0;
    switch (rank_state(priv, rank)) {
    case RANK_DONE:
        return KVIO_PEER_DONE;
    case RANK_FAILED:
        return KVIO_PEER_FAILED;
    default:
        return KVIO_PEER_RUNNING; /* a thread of this live process */
    }
}

const kvio_rte_ops_t kvio_rte_local_ops = {
    .name = "local",
    .caps = KVIO_RTE_CAP_SHARED_MEMORY,
    .priv_size = sizeof(local_world_t),
    .init = local_init,
    .fini = local_fini,
    .send = local_send,
    .recv = local_recv,
    .rank_done = local_rank_done,
    .peer_state = local_peer_state,
};
