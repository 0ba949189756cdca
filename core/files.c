/* Files created without following or truncating a name someone planted
 * (kvio/files.h). */
#include "kvio/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
