/* The file tier's I/O engines (kvcache/tier_io.h): io_uring with depth
 * transfers in flight, a pool of depth threads doing pread/pwrite, or one
 * transfer after the other. A short transfer goes on from where it
 * stopped; a write that moves nothing is ENOSPC, a read that moves nothing
 * (the file ends) is EIO. */
#include "kvcache/tier_io.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvio/clock.h"

const char *const tier_io_engine_names[] = {"io_uring", "threads", "sync", NULL};

struct tier_io {
    tier_io_engine_t engine;
    uint32_t depth;
    struct io_uring ring; /* io_uring */
    /* threads: the batch the workers take ops from, one at a time. */
    pthread_t *threads;
    uint32_t num_threads;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    int fd;
    bool write;
    tier_io_op_t *ops;
    size_t count, next, finished; /* count 0 between batches */
    bool quit;
};

/* One step of op's transfer with pread/pwrite: true when it is over. */
static bool step_sync(int fd, bool write, tier_io_op_t *op)
{
    unsigned char *at = (unsigned char *)op->buffer + op->done;
    uint64_t rest = op->bytes - op->done;
    ssize_t moved = write ? pwrite(fd, at, rest, (off_t)(op->offset + op->done))
                          : pread(fd, at, rest, (off_t)(op->offset + op->done));
    if (moved < 0 && errno == EINTR)
        return false;
    if (moved <= 0) {
        op->result = moved < 0 ? errno : write ? ENOSPC : EIO;
        return true;
    }
    op->done += (uint64_t)moved;
    return op->done == op->bytes;
}

static void run_one(int fd, bool write, tier_io_op_t *op)
{
    uint64_t start_ns = kvio_time_ns();
    op->result = 0;
    op->done = 0;
    while (!step_sync(fd, write, op)) {
    }
    op->latency_ns = (int64_t)(kvio_time_ns() - start_ns);
}

static void *worker_main(void *context)
{
    tier_io_t *io = context;
    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (!io->quit && io->next >= io->count)
            pthread_cond_wait(&io->work, &io->lock);
        if (io->quit)
            break;
        size_t index = io->next++;
        tier_io_op_t *op = &io->ops[index];
        int fd = io->fd;
        bool write = io->write;
        pthread_mutex_unlock(&io->lock);
        run_one(fd, write, op);
        pthread_mutex_lock(&io->lock);
        if (++io->finished == io->count)
            pthread_cond_signal(&io->done);
    }
    pthread_mutex_unlock(&io->lock);
    return NULL;
}

static kvio_status_t start_threads(tier_io_t *io)
{
    io->threads = calloc(io->depth, sizeof(*io->threads));
    if (io->threads == NULL)
        return KVIO_ERR_NOMEM;
    pthread_mutex_init(&io->lock, NULL);
    pthread_cond_init(&io->work, NULL);
    pthread_cond_init(&io->done, NULL);
    for (uint32_t i = 0; i < io->depth; i++) {
        if (pthread_create(&io->threads[i], NULL, worker_main, io) != 0)
            break;
        io->num_threads++;
    }
    return io->num_threads > 0 ? KVIO_OK : KVIO_ERR_NOMEM;
}

kvio_status_t tier_io_create(tier_io_engine_t engine, uint32_t depth, tier_io_t **io_p,
                             char *note_p, size_t note_len)
{
    tier_io_t *io = calloc(1, sizeof(*io));
    if (io == NULL)
        return KVIO_ERR_NOMEM;
    io->depth = depth > 0 ? depth : 1;
    io->engine = engine;
    note_p[0] = '\0';
    if (engine == TIER_IO_URING) {
        int failed = io_uring_queue_init(io->depth, &io->ring, 0);
        if (failed < 0) {
            snprintf(note_p, note_len, "threads instead of io_uring: the kernel refused a ring "
                     "(%s)", strerror(-failed));
            io->engine = TIER_IO_THREADS;
        }
    }
    if (io->engine == TIER_IO_THREADS && start_threads(io) != KVIO_OK) {
        tier_io_destroy(io);
        return KVIO_ERR_NOMEM;
    }
    *io_p = io;
    return KVIO_OK;
}

void tier_io_destroy(tier_io_t *io)
{
    if (io == NULL)
        return;
    if (io->engine == TIER_IO_URING)
        io_uring_queue_exit(&io->ring);
    if (io->threads != NULL) {
        pthread_mutex_lock(&io->lock);
        io->quit = true;
        pthread_cond_broadcast(&io->work);
        pthread_mutex_unlock(&io->lock);
        for (uint32_t i = 0; i < io->num_threads; i++)
            pthread_join(io->threads[i], NULL);
        pthread_mutex_destroy(&io->lock);
        pthread_cond_destroy(&io->work);
        pthread_cond_destroy(&io->done);
        free(io->threads);
    }
    free(io);
}

tier_io_engine_t tier_io_engine(const tier_io_t *io)
{
    return io->engine;
}

uint32_t tier_io_depth(const tier_io_t *io)
{
    return io->engine == TIER_IO_SYNC ? 1 : io->depth;
}

/* Queues the rest of op's transfer (index in the batch as its user data). */
static void submit_rest(tier_io_t *io, int fd, bool write, tier_io_op_t *op, size_t index)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    unsigned char *at = (unsigned char *)op->buffer + op->done;
    unsigned rest = (unsigned)(op->bytes - op->done);
    if (write)
        io_uring_prep_write(sqe, fd, at, rest, op->offset + op->done);
    else
        io_uring_prep_read(sqe, fd, at, rest, op->offset + op->done);
    io_uring_sqe_set_data64(sqe, index);
}

static void run_uring(tier_io_t *io, int fd, bool write, tier_io_op_t *ops, size_t count)
{
    uint64_t *started = malloc(count * sizeof(*started));
    if (started == NULL) { /* no room to time them: one at a time */
        for (size_t i = 0; i < count; i++)
            run_one(fd, write, &ops[i]);
        return;
    }
    size_t next = 0, in_flight = 0, finished = 0;
    while (finished < count) {
        while (next < count && in_flight < io->depth) {
            ops[next].result = 0;
            ops[next].done = 0;
            started[next] = kvio_time_ns();
            submit_rest(io, fd, write, &ops[next], next);
            next++;
            in_flight++;
        }
        io_uring_submit(&io->ring);
        struct io_uring_cqe *cqe;
        int waited = io_uring_wait_cqe(&io->ring, &cqe);
        if (waited == -EINTR)
            continue;
        if (waited < 0) { /* the ring broke: the rest one at a time */
            for (size_t i = 0; i < next; i++)
                if (ops[i].done < ops[i].bytes && ops[i].result == 0)
                    run_one(fd, write, &ops[i]);
            for (size_t i = next; i < count; i++)
                run_one(fd, write, &ops[i]);
            break;
        }
        size_t index = (size_t)io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
        tier_io_op_t *op = &ops[index];
        if (res == -EINTR || res == -EAGAIN) {
            submit_rest(io, fd, write, op, index);
            continue;
        }
        if (res <= 0)
            op->result = res < 0 ? -res : write ? ENOSPC : EIO;
        else
            op->done += (uint64_t)res;
        if (op->result == 0 && op->done < op->bytes) {
            submit_rest(io, fd, write, op, index); /* short: the rest */
            continue;
        }
        op->latency_ns = (int64_t)(kvio_time_ns() - started[index]);
        in_flight--;
        finished++;
    }
    free(started);
}

static void run_threads(tier_io_t *io, int fd, bool write, tier_io_op_t *ops, size_t count)
{
    pthread_mutex_lock(&io->lock);
    io->fd = fd;
    io->write = write;
    io->ops = ops;
    io->count = count;
    io->next = 0;
    io->finished = 0;
    pthread_cond_broadcast(&io->work);
    while (io->finished < io->count)
        pthread_cond_wait(&io->done, &io->lock);
    io->count = 0;
    pthread_mutex_unlock(&io->lock);
}

int64_t tier_io_run(tier_io_t *io, int fd, bool write, tier_io_op_t *ops, size_t count)
{
    uint64_t start_ns = kvio_time_ns();
    if (count == 0)
        return 0;
    if (io->engine == TIER_IO_URING)
        run_uring(io, fd, write, ops, count);
    else if (io->engine == TIER_IO_THREADS)
        run_threads(io, fd, write, ops, count);
    else
        for (size_t i = 0; i < count; i++)
            run_one(fd, write, &ops[i]);
    return (int64_t)(kvio_time_ns() - start_ns);
}
