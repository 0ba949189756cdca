/* Rank-to-rank messages: one growable writer with a sticky error and one
 * bounds-checked reader, for every blob a rank sends another (a serve
 * rank's report, the client's batches and counts, a rank's published
 * cache state, an update rank's report). Values travel in the host's byte
 * order and layout: the ranks of one run share an architecture. A reader
 * never reads past its buffer: a get that would fails, and so does every
 * get after it, so a parser checks once at the end. */
#ifndef KVIO_WIRE_H
#define KVIO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvio/status.h"

typedef struct kvio_wire_writer {
    unsigned char *data;
    size_t length, capacity;
    kvio_status_t status; /* KVIO_ERR_NOMEM once a put could not grow the buffer */
} kvio_wire_writer_t;

/* Appends size bytes (nothing once the writer has failed). */
void kvio_wire_put(kvio_wire_writer_t *writer, const void *data, size_t size);
void kvio_wire_put_u64(kvio_wire_writer_t *writer, uint64_t value);
void kvio_wire_put_i64(kvio_wire_writer_t *writer, int64_t value);
void kvio_wire_put_f64(kvio_wire_writer_t *writer, double value);
/* A u64 length, then the bytes. */
void kvio_wire_put_blob(kvio_wire_writer_t *writer, const void *data, uint64_t size);
/* Overwrites size bytes at offset, which must have been written. */
void kvio_wire_patch(kvio_wire_writer_t *writer, size_t offset, const void *data, size_t size);
/* Hands the bytes over (malloc'd, *length_p of them; at least one byte is
 * allocated) and empties the writer; the writer's error instead, its bytes
 * freed. */
kvio_status_t kvio_wire_finish(kvio_wire_writer_t *writer, void **blob_p, size_t *length_p);
/* Empties the writer for reuse, keeping its buffer. */
void kvio_wire_reset(kvio_wire_writer_t *writer);
void kvio_wire_writer_fini(kvio_wire_writer_t *writer);

typedef struct kvio_wire_reader {
    const unsigned char *data;
    size_t length, offset;
    bool failed; /* a get ran past the end (or was refused) */
} kvio_wire_reader_t;

kvio_wire_reader_t kvio_wire_reader(const void *data, size_t length);
/* Copies the next size bytes into out; false (and failed) when fewer are left. */
bool kvio_wire_get(kvio_wire_reader_t *reader, void *out, size_t size);
bool kvio_wire_get_u64(kvio_wire_reader_t *reader, uint64_t *value_p);
bool kvio_wire_get_i64(kvio_wire_reader_t *reader, int64_t *value_p);
bool kvio_wire_get_f64(kvio_wire_reader_t *reader, double *value_p);
/* The next size bytes in place (unaligned: copy before reading values), or
 * NULL. */
const void *kvio_wire_take(kvio_wire_reader_t *reader, size_t size);
/* count items of size bytes in place, refusing a count whose bytes
 * overflow; NULL when they are not all there. */
const void *kvio_wire_take_array(kvio_wire_reader_t *reader, uint64_t count, size_t size);
/* A u64 length, then that many bytes in place (*size_p). */
const void *kvio_wire_take_blob(kvio_wire_reader_t *reader, uint64_t *size_p);
/* Marks the reader failed (a value that makes no sense); returns false. */
bool kvio_wire_refuse(kvio_wire_reader_t *reader);
size_t kvio_wire_left(const kvio_wire_reader_t *reader);
/* KVIO_OK when every get succeeded, else KVIO_ERR_PARSE. */
kvio_status_t kvio_wire_status(const kvio_wire_reader_t *reader);

#endif
