/* The file tier's I/O engines: whole blocks read or written at offsets of
 * one file, up to a queue depth in flight. io_uring (liburing) submits
 * them together; where the kernel refuses a ring (old kernels, seccomp in
 * containers) a pool of depth threads issues pread/pwrite, as fio's psync
 * with numjobs; sync issues them one after the other. Private to
 * kvcache/. */
#ifndef KVIO_TIER_IO_H
#define KVIO_TIER_IO_H

#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    TIER_IO_URING = 0,
    TIER_IO_THREADS = 1,
    TIER_IO_SYNC = 2,
} tier_io_engine_t;

/* Names indexed by tier_io_engine_t ("io_uring", "threads", "sync"),
 * NULL-terminated. */
extern const char *const tier_io_engine_names[];

/* One block's transfer: bytes at offset of the file, into or out of
 * buffer. result: 0, or the errno that ended it (ENOSPC for a write that
 * wrote nothing, EIO for a read past the end); latency_ns: from its
 * submission to its completion. */
typedef struct tier_io_op {
    void *buffer;
    uint64_t offset;
    uint64_t bytes;
    int result;
    uint64_t done;       /* bytes moved */
    int64_t latency_ns;
} tier_io_op_t;

typedef struct tier_io tier_io_t;

/* An engine for up to depth transfers in flight. The one asked for, or,
 * when it cannot start, the next (io_uring, then threads): *note_p says
 * which ran instead and why ("" when the one asked for runs).
 * KVIO_ERR_NOMEM. */
kvio_status_t tier_io_create(tier_io_engine_t engine, uint32_t depth, tier_io_t **io_p,
                             char *note_p, size_t note_len);
void tier_io_destroy(tier_io_t *io);

tier_io_engine_t tier_io_engine(const tier_io_t *io);
uint32_t tier_io_depth(const tier_io_t *io);

/* Runs count transfers on fd (writes or reads), depth at a time, and
 * returns once every one has completed or failed (each op's result says).
 * Returns the wall time the whole batch took, in ns. */
int64_t tier_io_run(tier_io_t *io, int fd, bool write, tier_io_op_t *ops, size_t count);

#endif
