/* Files created without following or truncating a name someone planted,
 * and the checks before reading one whole (kvio/files.h). */
#include "kvio/files.h"

#include "kvio/log.h"
#include "kvio/sysinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* Names tried before giving up (each one taken by someone else). */
#define MAX_TRIES 1000

#define PROBE_BYTES 4096

int kvio_file_create_new(const char *dir, const char *prefix, int flags, mode_t mode,
                         char *path_p, size_t path_len)
{
    int base = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags;
    for (int n = 0; n < MAX_TRIES; n++) {
        int length = snprintf(path_p, path_len, "%s/%s.%d.%d", dir, prefix, (int)getpid(), n);
        if (length < 0 || (size_t)length >= path_len)
            return -ENAMETOOLONG;
        int fd = open(path_p, base, mode);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST && errno != ELOOP)
            return -errno;
    }
    return -EEXIST;
}

/* The probe's write and close; 0 or the errno. */
static int probe_write(int fd, bool direct, const void *aligned)
{
    int errnum = 0;
    if (direct && write(fd, aligned, PROBE_BYTES) != PROBE_BYTES)
        errnum = errno ? errno : EIO;
    if (close(fd) != 0 && errnum == 0)
        errnum = errno;
    return errnum;
}

int kvio_dir_probe(const char *dir, bool direct, const void *aligned)
{
    int flags = O_CLOEXEC | (direct ? O_DIRECT : 0);
    int fd = open(dir, O_TMPFILE | O_WRONLY | flags, 0600);
    if (fd >= 0)
        return probe_write(fd, direct, aligned); /* unnamed: gone when closed */
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return errno;
    char path[4096];
    fd = kvio_file_create_new(dir, ".kvio-probe", direct ? O_DIRECT : 0, 0600, path,
                              sizeof(path));
    if (fd == -EINVAL && direct) {
        /* Some file systems create the file, then refuse O_DIRECT: the new
         * file (kvio's own name, just made) goes. */
        unlink(path);
        return EINVAL;
    }
    if (fd < 0)
        return -fd;
    int errnum = probe_write(fd, direct, aligned);
    unlink(path); /* ours: created with O_EXCL a moment ago */
    return errnum;
}

int kvio_file_first_byte(FILE *file)
{
    int first = fgetc(file);
    while (first == ' ' || first == '\n' || first == '\t' || first == '\r')
        first = fgetc(file);
    rewind(file);
    return first;
}

/* jansson holds a JSON document in about this many times its bytes. */
#define JSON_MEMORY_FACTOR 10

kvio_status_t kvio_file_check_json_memory(const char *path, FILE *file)
{
    struct stat info;
    uint64_t available = 0;
    char error[256];
    if (fstat(fileno(file), &info) != 0 ||
        kvio_mem_available(&available, error, sizeof(error)) != KVIO_OK)
        return KVIO_OK;
    uint64_t needed = (uint64_t)info.st_size * JSON_MEMORY_FACTOR;
    if (needed <= available / 2)
        return KVIO_OK;
    kvio_log(KVIO_LOG_ERROR,
             "%s: %.1f GB of JSON needs about %.1f GB to read (%dx), more than half of the %.1f "
             "GB available",
             path, (double)info.st_size / 1e9, (double)needed / 1e9, JSON_MEMORY_FACTOR,
             (double)available / 1e9);
    return KVIO_ERR_NO_SPACE;
}
