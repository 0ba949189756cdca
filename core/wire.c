/* The rank-to-rank message writer and reader (kvio/wire.h). */
#include "kvio/wire.h"

#include <stdlib.h>
#include <string.h>

void kvio_wire_put(kvio_wire_writer_t *writer, const void *data, size_t size)
{
    if (writer->status != KVIO_OK || size == 0)
        return;
    if (size > writer->capacity - writer->length) {
        if (size > SIZE_MAX / 2 - writer->length) {
            writer->status = KVIO_ERR_NOMEM;
            return;
        }
        size_t capacity = (writer->length + size) * 2 + 256;
        unsigned char *bigger = realloc(writer->data, capacity);
        if (bigger == NULL) {
            writer->status = KVIO_ERR_NOMEM;
            return;
        }
        writer->data = bigger;
        writer->capacity = capacity;
    }
    memcpy(writer->data + writer->length, data, size);
    writer->length += size;
}

void kvio_wire_put_u64(kvio_wire_writer_t *writer, uint64_t value)
{
    kvio_wire_put(writer, &value, sizeof(value));
}

void kvio_wire_put_i64(kvio_wire_writer_t *writer, int64_t value)
{
    kvio_wire_put(writer, &value, sizeof(value));
}

void kvio_wire_put_f64(kvio_wire_writer_t *writer, double value)
{
    kvio_wire_put(writer, &value, sizeof(value));
}

void kvio_wire_put_blob(kvio_wire_writer_t *writer, const void *data, uint64_t size)
{
    kvio_wire_put_u64(writer, size);
    kvio_wire_put(writer, data, (size_t)size);
}

void kvio_wire_patch(kvio_wire_writer_t *writer, size_t offset, const void *data, size_t size)
{
    if (writer->status == KVIO_OK && offset <= writer->length &&
        size <= writer->length - offset)
        memcpy(writer->data + offset, data, size);
}

kvio_status_t kvio_wire_finish(kvio_wire_writer_t *writer, void **blob_p, size_t *length_p)
{
    kvio_status_t status = writer->status;
    if (status == KVIO_OK && writer->data == NULL &&
        (writer->data = malloc(1)) == NULL)
        status = KVIO_ERR_NOMEM;
    if (status != KVIO_OK) {
        kvio_wire_writer_fini(writer);
        return status;
    }
    *blob_p = writer->data;
    *length_p = writer->length;
    memset(writer, 0, sizeof(*writer));
    return KVIO_OK;
}

void kvio_wire_reset(kvio_wire_writer_t *writer)
{
    writer->length = 0;
    writer->status = KVIO_OK;
}

void kvio_wire_writer_fini(kvio_wire_writer_t *writer)
{
    free(writer->data);
    memset(writer, 0, sizeof(*writer));
}

kvio_wire_reader_t kvio_wire_reader(const void *data, size_t length)
{
    return (kvio_wire_reader_t){.data = data, .length = data != NULL ? length : 0};
}

const void *kvio_wire_take(kvio_wire_reader_t *reader, size_t size)
{
    if (reader->failed || size > reader->length - reader->offset) {
        reader->failed = true;
        return NULL;
    }
    const void *at = reader->data + reader->offset;
    reader->offset += size;
    return at;
}

bool kvio_wire_get(kvio_wire_reader_t *reader, void *out, size_t size)
{
    const void *at = kvio_wire_take(reader, size);
    if (at == NULL)
        return false;
    if (size > 0)
        memcpy(out, at, size);
    return true;
}

bool kvio_wire_get_u64(kvio_wire_reader_t *reader, uint64_t *value_p)
{
    return kvio_wire_get(reader, value_p, sizeof(*value_p));
}

bool kvio_wire_get_i64(kvio_wire_reader_t *reader, int64_t *value_p)
{
    return kvio_wire_get(reader, value_p, sizeof(*value_p));
}

bool kvio_wire_get_f64(kvio_wire_reader_t *reader, double *value_p)
{
    return kvio_wire_get(reader, value_p, sizeof(*value_p));
}

const void *kvio_wire_take_array(kvio_wire_reader_t *reader, uint64_t count, size_t size)
{
    if (size > 0 && count > (uint64_t)SIZE_MAX / size) {
        reader->failed = true;
        return NULL;
    }
    return kvio_wire_take(reader, (size_t)count * size);
}

const void *kvio_wire_take_blob(kvio_wire_reader_t *reader, uint64_t *size_p)
{
    uint64_t size = 0;
    if (!kvio_wire_get_u64(reader, &size))
        return NULL;
    *size_p = size;
    return kvio_wire_take_array(reader, size, 1);
}

bool kvio_wire_refuse(kvio_wire_reader_t *reader)
{
    reader->failed = true;
    return false;
}

size_t kvio_wire_left(const kvio_wire_reader_t *reader)
{
    return reader->failed ? 0 : reader->length - reader->offset;
}

kvio_status_t kvio_wire_status(const kvio_wire_reader_t *reader)
{
    return reader->failed ? KVIO_ERR_PARSE : KVIO_OK;
}
