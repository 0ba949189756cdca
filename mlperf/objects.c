/* kv-cache.py's storage tier (kv_cache/backends.py NVMeBackend): each KV
 * object one .npy file (numpy's format 1.0 header, float16, the object's
 * shape), written with np.save and fsync'ed, read back with np.load after
 * posix_fadvise(POSIX_FADV_DONTNEED) drops its pages, then copied
 * (np.array). Timed as it times them: write host = open + save, device =
 * fsync; read host = the fadvise + the copy, device = the load. kvio writes
 * and reads an object a piece at a time through one worker's buffers (an
 * object can be gigabytes); its bytes are generated (core/data.c) outside
 * the timed calls, as KVCacheGenerator makes them before the write. */
#include "mlperf/mlperf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvio/clock.h"

kvio_status_t mlperf_io_init(mlperf_io_t *io, uint64_t io_bytes)
{
    *io = (mlperf_io_t){.io_bytes = io_bytes};
    void *buffer = NULL, *copy = NULL;
    if (posix_memalign(&buffer, 4096, io_bytes) != 0)
        return KVIO_ERR_NOMEM;
    if (posix_memalign(&copy, 4096, io_bytes) != 0) {
        free(buffer);
        return KVIO_ERR_NOMEM;
    }
    io->buffer = buffer;
    io->copy = copy;
    return KVIO_OK;
}

void mlperf_io_fini(mlperf_io_t *io)
{
    free(io->buffer);
    free(io->copy);
    *io = (mlperf_io_t){0};
}

static double seconds_since(uint64_t start_ns)
{
    return (double)(kvio_time_ns() - start_ns) * 1e-9;
}

/* numpy's format 1.0 header: magic, version, its length, the dict padded
 * with spaces and a newline to a multiple of 64 bytes in all. */
static size_t npy_header(const mlperf_object_t *object, char *out, size_t out_len)
{
    char shape[160] = "";
    size_t at = 0;
    for (int d = 0; d < object->dims; d++)
        at += (size_t)snprintf(shape + at, sizeof(shape) - at, "%llu%s",
                               (unsigned long long)object->shape[d],
                               object->dims == 1 ? "," : d + 1 < object->dims ? ", " : "");
    char dict[256];
    int dict_len = snprintf(dict, sizeof(dict),
                            "{'descr': '<f2', 'fortran_order': False, 'shape': (%s), }", shape);
    size_t total = (10 + (size_t)dict_len + 1 + 63) / 64 * 64;
    if (total > out_len)
        return 0;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    uint16_t header_len = (uint16_t)(total - 10);
    out[8] = (char)(header_len & 0xff);
    out[9] = (char)(header_len >> 8);
    memcpy(out + 10, dict, (size_t)dict_len);
    memset(out + 10 + dict_len, ' ', total - 10 - (size_t)dict_len - 1);
    out[total - 1] = '\n';
    return total;
}

static kvio_status_t failed(const mlperf_object_t *object, const char *what, int errnum,
                            char *error_p, size_t error_len)
{
    snprintf(error_p, error_len, "%s: %s: %s", object->path, what, strerror(errnum));
    return errnum == ENOSPC ? KVIO_ERR_NO_SPACE : kvio_status_from_errno(errnum);
}

/* Writes length bytes at offset in full; seconds spent in write() added to
 * *spent_s_p. */
static int write_fully(int fd, const unsigned char *bytes, size_t length, double *spent_s_p)
{
    while (length > 0) {
        uint64_t start = kvio_time_ns();
        ssize_t written = write(fd, bytes, length);
        *spent_s_p += seconds_since(start);
        if (written < 0 && errno == EINTR)
            continue;
        if (written <= 0)
            return written == 0 ? ENOSPC : errno;
        bytes += written;
        length -= (size_t)written;
    }
    return 0;
}

kvio_status_t mlperf_object_write(const mlperf_object_t *object, const kvio_data_t *data,
                                  const unsigned char *from, mlperf_io_t *io,
                                  mlperf_timing_t *timing_p, uint64_t *file_bytes_p,
                                  char *error_p, size_t error_len)
{
    char header[512];
    size_t header_bytes = npy_header(object, header, sizeof(header));
    double host_s = 0;
    uint64_t start = kvio_time_ns();
    int fd = open(object->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    host_s += seconds_since(start);
    if (fd < 0)
        return failed(object, "cannot create", errno, error_p, error_len);
    int errnum = write_fully(fd, (const unsigned char *)header, header_bytes, &host_s);
    for (uint64_t offset = 0; errnum == 0 && offset < object->size; offset += io->io_bytes) {
        size_t piece = (size_t)(object->size - offset < io->io_bytes ? object->size - offset
                                                                     : io->io_bytes);
        const unsigned char *bytes = from != NULL ? from + offset : io->buffer;
        if (from == NULL)
            kvio_data_fill(data, object->content_key, offset, io->buffer, piece);
        errnum = write_fully(fd, bytes, piece, &host_s);
        if (errnum == 0 && io->write_progress != NULL)
            atomic_fetch_add(io->write_progress, piece);
    }
    double device_s = 0;
    if (errnum == 0) {
        uint64_t synced = kvio_time_ns();
        if (fsync(fd) != 0)
            errnum = errno;
        device_s = seconds_since(synced);
    }
    close(fd);
    if (errnum != 0) {
        unlink(object->path);
        return failed(object, "writing", errnum, error_p, error_len);
    }
    *timing_p = (mlperf_timing_t){.total = host_s + device_s, .device = device_s, .host = host_s};
    *file_bytes_p = header_bytes + object->size;
    return KVIO_OK;
}

/* Reads length bytes in full; seconds spent in read() added to *spent_s_p. */
static int read_fully(int fd, unsigned char *bytes, size_t length, double *spent_s_p)
{
    while (length > 0) {
        uint64_t start = kvio_time_ns();
        ssize_t got = read(fd, bytes, length);
        *spent_s_p += seconds_since(start);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got == 0 ? EIO : errno; /* short: the file is not what was written */
        bytes += got;
        length -= (size_t)got;
    }
    return 0;
}

/* np.load: open, the header, the data piece by piece (each piece copied,
 * as np.array copies the loaded array: host time; and with verify,
 * checked: untimed). */
static int load(const mlperf_object_t *object, const kvio_data_t *data, bool verify,
                mlperf_io_t *io, double *device_s_p, double *copy_s_p, bool *intact_p)
{
    uint64_t start = kvio_time_ns();
    int fd = open(object->path, O_RDONLY | O_CLOEXEC);
    *device_s_p += seconds_since(start);
    if (fd < 0)
        return errno;
    char expected[512], header[512];
    size_t header_bytes = npy_header(object, expected, sizeof(expected));
    int errnum = read_fully(fd, (unsigned char *)header, header_bytes, device_s_p);
    if (errnum == 0 && memcmp(header, expected, header_bytes) != 0)
        *intact_p = false;
    for (uint64_t offset = 0; errnum == 0 && offset < object->size; offset += io->io_bytes) {
        size_t piece = (size_t)(object->size - offset < io->io_bytes ? object->size - offset
                                                                     : io->io_bytes);
        errnum = read_fully(fd, io->buffer, piece, device_s_p);
        if (errnum != 0)
            break;
        if (io->read_progress != NULL)
            atomic_fetch_add(io->read_progress, piece);
        uint64_t copied = kvio_time_ns();
        memcpy(io->copy, io->buffer, piece);
        *copy_s_p += seconds_since(copied);
        if (verify && !kvio_data_verify(data, object->content_key, offset, io->buffer, piece))
            *intact_p = false;
    }
    start = kvio_time_ns();
    close(fd);
    *device_s_p += seconds_since(start);
    return errnum;
}

kvio_status_t mlperf_object_read(const mlperf_object_t *object, const kvio_data_t *data,
                                 bool verify, mlperf_io_t *io, mlperf_timing_t *timing_p,
                                 bool *intact_p, char *error_p, size_t error_len)
{
    /* The page-cache drop: its own open, as NVMeBackend.read does it. */
    uint64_t start = kvio_time_ns();
    int fd = open(object->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return failed(object, "cannot open", errno, error_p, error_len);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    double dropped_s = seconds_since(start), device_s = 0, copy_s = 0;
    *intact_p = true;
    int errnum = load(object, data, verify, io, &device_s, &copy_s, intact_p);
    if (errnum != 0)
        return failed(object, "reading", errnum, error_p, error_len);
    *timing_p = (mlperf_timing_t){.total = dropped_s + device_s + copy_s, .device = device_s,
                                  .host = dropped_s + copy_s};
    return KVIO_OK;
}
