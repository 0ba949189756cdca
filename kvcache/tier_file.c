/* The file tier: one file per block, DIR/<hash>.kv. A block is written to an
 * unnamed O_TMPFILE inode and linked in (where the file system has no
 * O_TMPFILE: to DIR/.<hash>.<pid>.tmp, renamed), so a reader never opens a
 * partial block and a killed rank leaves no temporary behind;
 * a short file is reported, never returned. O_DIRECT is optional: where the
 * file system refuses it (tmpfs) or blocks are not 4 KiB multiples, the tier
 * falls back to buffered I/O and says why. No fsync: the page cache (or the
 * device, with O_DIRECT) is the tier. */
#include "kvcache/tier_int.h"

#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvio/files.h"
#include "kvio/log.h"

#define DIRECT_ALIGN 4096
/* Room for the blocks' directory: the path, a rank's own directory inside
 * it, and a block's file name inside that within PATH_MAX. */
#define DIR_MAX (PATH_MAX - 64)
#define PATH_ROOM (DIR_MAX - 64)

typedef struct file_options {
    char *path;
    bool o_direct;
} file_options_t;

static const kvio_opt_t file_options[] = {
    {.key = "path", .type = KVIO_OPT_STRING, .offset = offsetof(file_options_t, path),
     .default_value = "/tmp/kvio-tier",
     .help = "directory of the block files (created; its parent must exist)"},
    {.key = "o_direct", .type = KVIO_OPT_BOOL, .offset = offsetof(file_options_t, o_direct),
     .default_value = "false",
     .help = "O_DIRECT reads and writes (buffered, with a warning, where refused)"},
    {.key = NULL},
};

static kvio_status_t file_check(const void *options, const char *path, char *error_p,
                                size_t error_len)
{
    const file_options_t *file = options;
    if (file->path == NULL || file->path[0] == '\0') {
        snprintf(error_p, error_len, "%s.path: no directory given", path);
        return KVIO_ERR_CONFIG;
    }
    if (strlen(file->path) >= PATH_ROOM) {
        snprintf(error_p, error_len, "%s.path: %zu characters, at most %d", path,
                 strlen(file->path), PATH_ROOM - 1);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

/* The file system holding dir: writable, with room for bytes (refused
 * with the numbers otherwise). */
static kvio_status_t file_room(const char *dir, uint64_t bytes, const char *path,
                               char *error_p, size_t error_len)
{
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0)
        return KVIO_OK; /* unknown: the tier finds out */
    if ((fs.f_flag & ST_RDONLY) != 0 || access(dir, W_OK | X_OK) != 0) {
        snprintf(error_p, error_len, "%s.path: %s is %s", path, dir,
                 (fs.f_flag & ST_RDONLY) != 0 ? "on a read-only file system" : "not writable");
        return KVIO_ERR_CONFIG;
    }
    uint64_t free_bytes = (uint64_t)fs.f_bavail * fs.f_frsize;
    if (bytes > free_bytes) {
        snprintf(error_p, error_len,
                 "%s: the file tier needs %.2f GiB (size x serve ranks) but %s has %.2f GiB "
                 "free; lower the tier's size or point path at a larger file system",
                 path, (double)bytes / 1073741824.0, dir, (double)free_bytes / 1073741824.0);
        return KVIO_ERR_CONFIG;
    }
    return KVIO_OK;
}

/* Emulate: the path must be a directory, or its parent one (the tier makes
 * the directory, not its parents), on a writable file system with room for
 * every rank's blocks. */
static kvio_status_t file_preflight(const void *options, uint64_t bytes, const char *path,
                                    char *error_p, size_t error_len)
{
    const file_options_t *file = options;
    struct stat info;
    if (stat(file->path, &info) == 0) {
        if (S_ISDIR(info.st_mode))
            return file_room(file->path, bytes, path, error_p, error_len);
        snprintf(error_p, error_len, "%s.path %s: not a directory", path, file->path);
        return KVIO_ERR_CONFIG;
    }
    char copy[PATH_MAX];
    snprintf(copy, sizeof(copy), "%s", file->path);
    const char *parent = dirname(copy);
    if (stat(parent, &info) != 0 || !S_ISDIR(info.st_mode)) {
        snprintf(error_p, error_len,
                 "%s.path %s: no such directory, nor its parent %s (kvio makes the directory, "
                 "not its parents)", path, file->path, parent);
        return KVIO_ERR_CONFIG;
    }
    return file_room(parent, bytes, path, error_p, error_len);
}

/* Simulate default: 2 GB/s + 100 us, one stream to an NVMe SSD (2-3 GB/s)
 * through the page cache or O_DIRECT; 100 us covers open, create and rename
 * plus the device's own latency. */
static void file_model(const void *options, double *bandwidth_p, int64_t *latency_ns_p)
{
    (void)options;
    *bandwidth_p = 2e9;
    *latency_ns_p = 100000;
}

typedef struct file_priv {
    char dir[DIR_MAX];        /* the blocks' directory */
    bool created_dir;         /* removed at the end if empty */
    bool direct;              /* O_DIRECT in use */
    char direct_note[200];    /* why O_DIRECT was not used, or "" */
    uint64_t block_bytes;
    uint32_t capacity;
    void *bounce;             /* aligned block buffer for O_DIRECT */
} file_priv_t;

static void block_path(const file_priv_t *file, kvio_hash_t hash, bool temporary,
                       char path_p[PATH_MAX])
{
    char hex[33];
    kvio_hash_format(hash, hex);
    if (temporary)
        snprintf(path_p, PATH_MAX, "%s/.%s.%d.tmp", file->dir, hex, (int)getpid());
    else
        snprintf(path_p, PATH_MAX, "%s/%s.kv", file->dir, hex);
}

/* "path: what: reason", ENOSPC and EDQUOT spelled out for the user. */
static kvio_status_t errno_error(int errnum, const char *path, const char *what,
                                 char *error_p, size_t error_len)
{
    if (errnum == ENOSPC || errnum == EDQUOT)
        snprintf(error_p, error_len, "%s: %s: %s (the file system holding the tier is full)",
                 path, what, strerror(errnum));
    else
        snprintf(error_p, error_len, "%s: %s: %s", path, what, strerror(errnum));
    return kvio_status_from_errno(errnum);
}

/* The blocks' directory: the path, or with a run id the rank's own inside
 * it (path/kvio-<id>-rank<N>; the path made when only its parent exists,
 * and left, empty, at the end). */
static kvio_status_t choose_dir(file_priv_t *file, const file_options_t *options,
                                const kvio_tier_config_t *config, char *error_p,
                                size_t error_len)
{
    if (config->run_id == NULL) {
        snprintf(file->dir, sizeof(file->dir), "%s", options->path);
        return KVIO_OK;
    }
    if (mkdir(options->path, 0700) != 0 && errno != EEXIST)
        return errno_error(errno, options->path, "cannot create the file tier's directory",
                           error_p, error_len);
    snprintf(file->dir, sizeof(file->dir), "%s/kvio-%s-rank%u", options->path, config->run_id,
             config->rank);
    return KVIO_OK;
}

static kvio_status_t file_init(void *priv, const kvio_tier_setup_t *setup, char *error_p,
                               size_t error_len)
{
    file_priv_t *file = priv;
    const file_options_t *options = setup->options;
    uint64_t block_bytes = setup->block_bytes;
    uint32_t capacity = setup->capacity;
    kvio_status_t status = choose_dir(file, options, setup->config, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    file->block_bytes = block_bytes;
    file->capacity = capacity;
    if (mkdir(file->dir, 0700) == 0) {
        file->created_dir = true;
    } else if (errno == ENOENT) {
        snprintf(error_p, error_len,
                 "%s: cannot create the file tier's directory: its parent does not exist",
                 file->dir);
        return KVIO_ERR_CONFIG;
    } else if (errno != EEXIST) {
        return errno_error(errno, file->dir, "cannot create the file tier's directory", error_p,
                           error_len);
    } else {
        struct stat info;
        if (stat(file->dir, &info) != 0 || !S_ISDIR(info.st_mode)) {
            snprintf(error_p, error_len, "%s: the file tier's path is not a directory",
                     file->dir);
            return KVIO_ERR_CONFIG;
        }
    }
    uint64_t bounce_bytes = (block_bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    if (posix_memalign(&file->bounce, DIRECT_ALIGN, bounce_bytes) != 0) {
        file->bounce = NULL;
        snprintf(error_p, error_len, "file tier: out of memory");
        status = KVIO_ERR_NOMEM;
        goto fail;
    }
    memset(file->bounce, 0, bounce_bytes);
    int errnum = kvio_dir_probe(file->dir, false, NULL);
    if (errnum != 0) {
        status = errno_error(errnum, file->dir, "the file tier's directory is not writable",
                             error_p, error_len);
        goto fail;
    }
    if (options->o_direct) {
        if (block_bytes % DIRECT_ALIGN != 0) {
            snprintf(file->direct_note, sizeof(file->direct_note),
                     "O_DIRECT needs blocks in multiples of %d bytes, not %llu", DIRECT_ALIGN,
                     (unsigned long long)block_bytes);
        } else if ((errnum = kvio_dir_probe(file->dir, true, file->bounce)) != 0) {
            snprintf(file->direct_note, sizeof(file->direct_note),
                     "the file system refuses O_DIRECT: %s", strerror(errnum));
        } else {
            file->direct = true;
        }
        if (!file->direct)
            kvio_warn("%s: file tier: buffered I/O instead of O_DIRECT (%s)", file->dir,
                      file->direct_note);
    }
    struct statvfs space;
    /* A file system that reports no size (ramfs, some network ones) is not
     * checked. */
    if (statvfs(file->dir, &space) == 0 && space.f_blocks > 0) {
        uint64_t available = (uint64_t)space.f_bavail * space.f_frsize;
        uint64_t needed = block_bytes * capacity;
        if (needed > available) {
            snprintf(error_p, error_len,
                     "%s: the file tier needs %llu bytes (%u blocks of %llu), but only %llu "
                     "bytes are free", file->dir, (unsigned long long)needed, capacity,
                     (unsigned long long)block_bytes, (unsigned long long)available);
            status = KVIO_ERR_NO_SPACE;
            goto fail;
        }
    }
    return KVIO_OK;
fail:
    free(file->bounce);
    file->bounce = NULL;
    if (file->created_dir)
        rmdir(file->dir);
    return status;
}

static void file_fini(void *priv)
{
    file_priv_t *file = priv;
    free(file->bounce);
    if (file->created_dir && rmdir(file->dir) != 0 && errno != ENOTEMPTY && errno != EEXIST)
        kvio_debug("%s: cannot remove the file tier's directory: %s", file->dir,
                   strerror(errno));
}

/* Opens the file a block is written to before it is published: an unnamed
 * O_TMPFILE inode in the tier's directory (a killed rank leaves nothing
 * behind), else the named temporary, created afresh (O_EXCL, O_NOFOLLOW: a
 * link planted in the directory is refused, a leftover of a reused pid is
 * replaced). *named_p says which. */
static int open_unpublished(const file_priv_t *file, const char *temporary, bool *named_p)
{
    int direct = file->direct ? O_DIRECT : 0;
    *named_p = false;
    int fd = open(file->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC | direct, 0644);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    *named_p = true;
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | direct;
    fd = open(temporary, flags, 0644);
    if (fd < 0 && errno == EEXIST && unlink(temporary) == 0)
        fd = open(temporary, flags, 0644);
    return fd;
}

/* Gives the written block its name, replacing an older file of it. */
static int publish(int fd, bool named, const char *temporary, const char *final)
{
    if (named)
        return rename(temporary, final) == 0 ? 0 : errno;
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, self, AT_FDCWD, final, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno != EEXIST || unlink(final) != 0)
        return errno;
    return linkat(AT_FDCWD, self, AT_FDCWD, final, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
}

static kvio_status_t file_put(void *priv, uint32_t slot, kvio_hash_t hash, const void *data,
                              char *error_p, size_t error_len)
{
    file_priv_t *file = priv;
    char temporary[PATH_MAX], final[PATH_MAX];
    block_path(file, hash, true, temporary);
    block_path(file, hash, false, final);
    const unsigned char *source = data;
    if (file->direct && (uintptr_t)data % DIRECT_ALIGN != 0) {
        memcpy(file->bounce, data, file->block_bytes);
        source = file->bounce;
    }
    bool named = false;
    int fd = open_unpublished(file, temporary, &named);
    if (fd < 0)
        return errno_error(errno, named ? temporary : file->dir, "cannot create a block file",
                           error_p, error_len);
    uint64_t done = 0;
    int errnum = 0;
    while (done < file->block_bytes) {
        ssize_t written = write(fd, source + done, file->block_bytes - done);
        if (written < 0 && errno == EINTR)
            continue;
        if (written <= 0) {
            errnum = written < 0 ? errno : ENOSPC; /* write returns 0 only when nothing fits */
            break;
        }
        done += (uint64_t)written;
    }
    if (errnum == 0)
        errnum = publish(fd, named, temporary, final);
    if (close(fd) != 0 && errnum == 0)
        errnum = errno;
    if (errnum != 0) {
        if (named)
            unlink(temporary);
        char what[128];
        snprintf(what, sizeof(what), "writing a block of %llu bytes (%llu written)",
                 (unsigned long long)file->block_bytes, (unsigned long long)done);
        return errno_error(errnum, named ? temporary : final, what, error_p, error_len);
    }
    return KVIO_OK;
}

static kvio_status_t file_get(void *priv, uint32_t slot, kvio_hash_t hash, void *data,
                              char *error_p, size_t error_len)
{
    file_priv_t *file = priv;
    char path[PATH_MAX];
    block_path(file, hash, false, path);
    unsigned char *target = data;
    if (file->direct && (uintptr_t)data % DIRECT_ALIGN != 0)
        target = file->bounce;
    int fd = open(path, O_RDONLY | O_CLOEXEC | (file->direct ? O_DIRECT : 0));
    if (fd < 0) {
        if (errno == ENOENT) {
            snprintf(error_p, error_len, "%s: the block file is gone", path);
            return KVIO_ERR_NOT_FOUND;
        }
        return errno_error(errno, path, "cannot open a block file", error_p, error_len);
    }
    uint64_t done = 0;
    kvio_status_t status = KVIO_OK;
    while (done < file->block_bytes) {
        ssize_t got = read(fd, target + done, file->block_bytes - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            status = errno_error(errno, path, "reading a block", error_p, error_len);
            break;
        }
        if (got == 0) {
            snprintf(error_p, error_len, "%s: truncated block file: %llu of %llu bytes", path,
                     (unsigned long long)done, (unsigned long long)file->block_bytes);
            status = KVIO_ERR_IO;
            break;
        }
        done += (uint64_t)got;
    }
    close(fd);
    if (status == KVIO_OK && target != data)
        memcpy(data, target, file->block_bytes);
    return status;
}

static kvio_status_t file_remove(void *priv, uint32_t slot, kvio_hash_t hash, char *error_p,
                                 size_t error_len)
{
    file_priv_t *file = priv;
    char path[PATH_MAX];
    block_path(file, hash, false, path);
    if (unlink(path) != 0 && errno != ENOENT)
        return errno_error(errno, path, "cannot delete an evicted block file", error_p,
                           error_len);
    return KVIO_OK;
}

static void file_describe(const void *priv, char *text_p, size_t text_len)
{
    const file_priv_t *file = priv;
    snprintf(text_p, text_len, "file: %u blocks of %llu bytes in %s, %s%s%s", file->capacity,
             (unsigned long long)file->block_bytes, file->dir,
             file->direct ? "O_DIRECT" : "buffered", file->direct_note[0] ? " (" : "",
             file->direct_note[0] ? file->direct_note : "");
    if (file->direct_note[0] != '\0' && strlen(text_p) + 1 < text_len)
        strcat(text_p, ")");
}

static void file_report(const void *priv, json_t *object)
{
    const file_priv_t *file = priv;
    json_object_set_new(object, "path", json_string(file->dir));
    json_object_set_new(object, "o_direct", json_boolean(file->direct));
    if (file->direct_note[0] != '\0')
        json_object_set_new(object, "o_direct_note", json_string(file->direct_note));
}

const kvio_tier_ops_t kvio_tier_file = {
    .plugin = {.name = "file", .help = "one file per block, written unnamed and linked in",
               .options = file_options, .options_size = sizeof(file_options_t),
               .check = file_check},
    .model = file_model,
    .preflight = file_preflight,
    .priv_size = sizeof(file_priv_t),
    .init = file_init,
    .fini = file_fini,
    .put = file_put,
    .get = file_get,
    .remove = file_remove,
    .describe = file_describe,
    .report = file_report,
};
