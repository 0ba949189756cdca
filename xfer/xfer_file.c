/* The file transport, the classic baseline: the sender writes each version
 * to DIR/.vNNNNNNNNNN.tmp (header block + data), fsyncs if asked, and
 * renames it to vNNNNNNNNNN.model, so a reader never takes a partial file.
 * Receivers discover versions by listing the directory at a poll interval
 * (as model repositories do) or by inotify, then read the file in chunks. */
#include "xfer/xfer_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvio/files.h"
#include "kvio/log.h"

#define HEADER_BYTES 4096

typedef struct file_priv {
    int read_fd;            /* the version being read, or -1 */
    uint64_t read_version;
    uint64_t last_seen;     /* newest version taken */
    bool end_seen;
    int inotify_fd;         /* notify discovery, or -1 */
    bool changed;           /* notify: renames seen since a listing found nothing new */
    bool gone_said;         /* the directory vanished: said once */
    void *header;           /* HEADER_BYTES, aligned */
} file_priv_t;

static void version_path(const char *dir, uint64_t version, bool temporary, char *path_p,
                         size_t path_len)
{
    snprintf(path_p, path_len, temporary ? "%s/.v%010llu.tmp" : "%s/v%010llu.model", dir,
             (unsigned long long)version);
}

static kvio_status_t errno_error(kvio_xfer_t *xfer, int errnum, const char *what,
                                 const char *path)
{
    kvio_xfer_set_error(xfer, "%s: %s: %s", path, what, strerror(errnum));
    return kvio_status_from_errno(errnum);
}

static kvio_status_t file_preflight(const kvio_xfer_config_t *config, uint64_t bytes,
                                    char *error_p, size_t error_len)
{
    const char *dir = config->file.dir;
    if (config->file.direct && (bytes % 4096 != 0 || config->chunk % 4096 != 0)) {
        snprintf(error_p, error_len,
                 "file transport: direct: true needs bytes and chunk in multiples of 4KiB");
        return KVIO_ERR_CONFIG;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(error_p, error_len, "%s: cannot create the update directory: %s", dir,
                 strerror(errno));
        return kvio_status_from_errno(errno);
    }
    /* The probe opens no name anyone could have planted (kvio/files.h). */
    static char aligned[4096] __attribute__((aligned(4096)));
    int errnum = kvio_dir_probe(dir, config->file.direct, aligned);
    if (errnum != 0) {
        snprintf(error_p, error_len, "%s: the update directory is not writable: %s%s", dir,
                 strerror(errnum),
                 errnum == EINVAL && config->file.direct ? " (O_DIRECT not supported here)" : "");
        return kvio_status_from_errno(errnum);
    }
    struct statvfs space;
    if (statvfs(dir, &space) == 0) {
        unsigned long long available = (unsigned long long)space.f_bavail * space.f_frsize;
        unsigned long long needed = (unsigned long long)(config->file.keep + 1) *
                                    (bytes + HEADER_BYTES);
        if (available < needed) {
            snprintf(error_p, error_len,
                     "%s: not enough space: %lld versions of %llu bytes need %llu bytes, "
                     "%llu are free", dir, (long long)config->file.keep + 1,
                     (unsigned long long)bytes, needed, available);
            return KVIO_ERR_NO_SPACE;
        }
    }
    return KVIO_OK;
}

/* True when name is exactly one of the names this transport writes:
 * v<10 digits>.model, .v<10 digits>.tmp, end, .end.tmp. */
static bool own_file(const char *name)
{
    if (strcmp(name, "end") == 0 || strcmp(name, ".end.tmp") == 0)
        return true;
    bool temporary = name[0] == '.';
    const char *digits = name + (temporary ? 2 : 1);
    if (name[temporary ? 1 : 0] != 'v')
        return false;
    for (int i = 0; i < 10; i++)
        if (digits[i] < '0' || digits[i] > '9')
            return false;
    return strcmp(digits + 10, temporary ? ".tmp" : ".model") == 0;
}

/* Removes what this transport wrote into dir (a run's own directory), then
 * dir itself if that leaves it empty; nothing else is touched. */
static void clean_directory(const char *dir)
{
    DIR *listing = opendir(dir);
    if (listing == NULL)
        return;
    struct dirent *entry;
    char path[4096];
    while ((entry = readdir(listing)) != NULL) {
        if (own_file(entry->d_name)) {
            snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
            unlink(path);
        }
    }
    closedir(listing);
    rmdir(dir);
}

static kvio_status_t file_init(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    file_priv_t *priv = xfer->priv;
    const kvio_xfer_file_config_t *config = &xfer->config->file;
    priv->read_fd = -1;
    priv->inotify_fd = -1;
    kvio_status_t status = KVIO_ERR_NOMEM;
    if ((priv->header = kvio_xfer_aligned_alloc(HEADER_BYTES)) == NULL)
        goto fail;
    /* Every rank may be first: the run's own directory may not exist yet. */
    if (mkdir(config->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(error_p, error_len, "%s: cannot create the update directory: %s", config->dir,
                 strerror(errno));
        status = kvio_status_from_errno(errno);
        goto fail;
    }
    if (xfer->role == KVIO_XFER_SENDER) {
        if ((xfer->send_buffer = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
            goto fail;
    } else if (xfer->role == KVIO_XFER_RECEIVER) {
        for (int slot = 0; slot < 2; slot++)
            if ((xfer->slots[slot] = kvio_xfer_aligned_alloc(xfer->bytes)) == NULL)
                goto fail;
        xfer->poll_interval_ns = config->poll_interval_ns;
        if (config->discovery == KVIO_XFER_DISCOVER_NOTIFY) {
            xfer->poll_interval_ns = 0;
            priv->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
            if (priv->inotify_fd < 0 ||
                inotify_add_watch(priv->inotify_fd, config->dir, IN_MOVED_TO) < 0) {
                snprintf(error_p, error_len, "%s: cannot watch with inotify: %s", config->dir,
                         strerror(errno));
                status = KVIO_ERR_IO;
                goto fail;
            }
        }
    }
    snprintf(xfer->info, sizeof(xfer->info), "file: %s (fsync %s, O_DIRECT %s, %s)",
             config->dir, config->fsync ? "on" : "off", config->direct ? "on" : "off",
             config->discovery == KVIO_XFER_DISCOVER_POLL ? "polling" : "inotify");
    return KVIO_OK;
fail:
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "file transport: cannot allocate %llu bytes",
                 (unsigned long long)xfer->bytes);
    if (priv->inotify_fd >= 0)
        close(priv->inotify_fd);
    free(priv->header);
    free(xfer->send_buffer);
    free(xfer->slots[0]);
    free(xfer->slots[1]);
    xfer->send_buffer = xfer->slots[0] = xfer->slots[1] = NULL;
    return status;
}

static void file_fini(kvio_xfer_t *xfer)
{
    file_priv_t *priv = xfer->priv;
    /* Torn down after every rank is done with the files (kvio_xfer_detach,
     * a barrier, then destroy): the sender removes what it wrote. */
    if (xfer->role == KVIO_XFER_SENDER)
        clean_directory(xfer->config->file.dir);
    if (priv->read_fd >= 0)
        close(priv->read_fd);
    if (priv->inotify_fd >= 0)
        close(priv->inotify_fd);
    free(priv->header);
    free(xfer->send_buffer);
    free(xfer->slots[0]);
    free(xfer->slots[1]);
}

static kvio_status_t write_all(kvio_xfer_t *xfer, int fd, const void *data, uint64_t length,
                               uint64_t offset, const char *path)
{
    const char *bytes = data;
    while (length > 0) {
        ssize_t written = pwrite(fd, bytes, length, (off_t)offset);
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0)
            return errno_error(xfer, errno, "writing", path);
        if (written == 0)
            return errno_error(xfer, ENOSPC, "writing", path);
        bytes += written;
        offset += (uint64_t)written;
        length -= (uint64_t)written;
    }
    return KVIO_OK;
}

static kvio_status_t write_file(kvio_xfer_t *xfer, const char *temporary, const char *final,
                                const void *header, const void *data, uint64_t bytes)
{
    const kvio_xfer_file_config_t *config = &xfer->config->file;
    /* Created afresh: a link planted in the directory is refused (O_NOFOLLOW),
     * a leftover temporary replaced. */
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC |
                (config->direct ? O_DIRECT : 0);
    int fd = open(temporary, flags, 0644);
    if (fd < 0 && errno == EEXIST && unlink(temporary) == 0)
        fd = open(temporary, flags, 0644);
    if (fd < 0)
        return errno_error(xfer, errno, "cannot create", temporary);
    kvio_status_t status = write_all(xfer, fd, header, HEADER_BYTES, 0, temporary);
    for (uint64_t offset = 0; offset < bytes && status == KVIO_OK;) {
        uint64_t length = bytes - offset < xfer->config->chunk ? bytes - offset
                                                               : xfer->config->chunk;
        if (kvio_xfer_fault_now(xfer)) {
            close(fd);
            return KVIO_ERR_INTERRUPTED; /* a dead writer leaves its temporary behind */
        }
        status = write_all(xfer, fd, (const char *)data + offset, length,
                           HEADER_BYTES + offset, temporary);
        offset += length;
    }
    if (status == KVIO_OK && config->fsync && fsync(fd) != 0)
        status = errno_error(xfer, errno, "fsync", temporary);
    if (close(fd) != 0 && status == KVIO_OK)
        status = errno_error(xfer, errno, "closing", temporary);
    if (status == KVIO_OK && rename(temporary, final) != 0)
        status = errno_error(xfer, errno, "renaming", temporary);
    if (status != KVIO_OK) {
        unlink(temporary);
        return status;
    }
    if (config->fsync) {
        int dir_fd = open(config->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd >= 0) {
            fsync(dir_fd);
            close(dir_fd);
        }
    }
    return KVIO_OK;
}

/* A file's header block: the metadata, the rest of the block the run's
 * data (the version's own bytes), so no page of the file is zeros a device
 * could drop. */
static void file_header(kvio_xfer_t *xfer, const kvio_xfer_meta_t *meta)
{
    file_priv_t *priv = xfer->priv;
    kvio_data_fill(&xfer->config->data,
                   kvio_data_key(xfer->config->data_seed, 0x686561646572ull /* "header" */,
                                 meta->version),
                   0, priv->header, HEADER_BYTES);
    memcpy(priv->header, meta, sizeof(*meta));
}

static kvio_status_t file_put(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    file_priv_t *priv = xfer->priv;
    const kvio_xfer_file_config_t *config = &xfer->config->file;
    char temporary[4096], final[4096];
    version_path(config->dir, meta->version, true, temporary, sizeof(temporary));
    version_path(config->dir, meta->version, false, final, sizeof(final));
    file_header(xfer, meta);
    kvio_status_t status = write_file(xfer, temporary, final, priv->header, xfer->send_buffer,
                                      xfer->bytes);
    if (status != KVIO_OK)
        return status;
    if (meta->version > (uint64_t)config->keep) {
        char old[4096];
        version_path(config->dir, meta->version - (uint64_t)config->keep, false, old,
                     sizeof(old));
        unlink(old);
    }
    return KVIO_OK;
}

static kvio_status_t file_notify(kvio_xfer_t *xfer, int target, const kvio_xfer_meta_t *meta)
{
    /* The rename is the notice of a version; only the end needs a file. */
    if (!(meta->flags & KVIO_XFER_META_END))
        return KVIO_OK;
    file_priv_t *priv = xfer->priv;
    char temporary[4096], final[4096];
    snprintf(temporary, sizeof(temporary), "%s/.end.tmp", xfer->config->file.dir);
    snprintf(final, sizeof(final), "%s/end", xfer->config->file.dir);
    file_header(xfer, meta);
    return write_file(xfer, temporary, final, priv->header, NULL, 0);
}

/* Reads a file's header; KVIO_ERR_NOT_FOUND when it vanished meanwhile. */
static kvio_status_t read_header(kvio_xfer_t *xfer, const char *path, bool keep_open,
                                 kvio_xfer_meta_t *meta_p)
{
    file_priv_t *priv = xfer->priv;
    int fd = open(path, O_RDONLY | O_CLOEXEC | (xfer->config->file.direct ? O_DIRECT : 0));
    if (fd < 0)
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : errno_error(xfer, errno, "opening", path);
    ssize_t got = pread(fd, priv->header, HEADER_BYTES, 0);
    if (got != HEADER_BYTES) {
        close(fd);
        kvio_xfer_set_error(xfer, "%s: truncated header", path);
        return KVIO_ERR_TRANSPORT;
    }
    kvio_xfer_meta_t meta;
    memcpy(&meta, priv->header, sizeof(meta));
    struct stat info;
    if (fstat(fd, &info) != 0 ||
        (!(meta.flags & KVIO_XFER_META_END) &&
         (uint64_t)info.st_size != HEADER_BYTES + meta.bytes)) {
        close(fd);
        kvio_xfer_set_error(xfer, "%s: file size does not match its header", path);
        return KVIO_ERR_TRANSPORT;
    }
    if (keep_open) {
        if (priv->read_fd >= 0)
            close(priv->read_fd);
        priv->read_fd = fd;
        priv->read_version = meta.version;
    } else {
        close(fd);
    }
    *meta_p = meta;
    return KVIO_OK;
}

static kvio_status_t file_poll(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta_p)
{
    file_priv_t *priv = xfer->priv;
    const char *dir = xfer->config->file.dir;
    if (priv->end_seen)
        return KVIO_INPROGRESS;
    if (priv->inotify_fd >= 0) {
        /* One listing serves one version: after several renames (a version
         * and the end, say) the directory is listed again at the next poll
         * until a listing finds nothing new; events drained here would
         * otherwise hide the rest. */
        char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        while (read(priv->inotify_fd, events, sizeof(events)) > 0)
            priv->changed = true;
        if (!priv->changed)
            return KVIO_INPROGRESS; /* nothing renamed into the directory */
    }
    DIR *listing = opendir(dir);
    if (listing == NULL && errno == ENOENT) {
        /* The directory was removed under the run: no newer version can
         * come, as when the disk is full; serving goes on with the version
         * it has (the trainer, whose writes fail, is lost). */
        if (!priv->gone_said)
            kvio_warn("file transport: %s was removed during the run; no newer version can "
                      "arrive", dir);
        priv->gone_said = true;
        return KVIO_INPROGRESS;
    }
    if (listing == NULL)
        return errno_error(xfer, errno, "listing", dir);
    uint64_t newest = 0;
    bool end_present = false;
    struct dirent *entry;
    while ((entry = readdir(listing)) != NULL) {
        unsigned long long version = 0;
        if (entry->d_name[0] == 'v' && own_file(entry->d_name) &&
            (version = strtoull(entry->d_name + 1, NULL, 10)) > newest)
            newest = version;
        else if (strcmp(entry->d_name, "end") == 0)
            end_present = true;
    }
    closedir(listing);
    char path[4096];
    if (newest > priv->last_seen) {
        version_path(dir, newest, false, path, sizeof(path));
        kvio_status_t status = read_header(xfer, path, true, meta_p);
        if (status == KVIO_ERR_NOT_FOUND)
            return KVIO_INPROGRESS; /* deleted between the listing and the open */
        if (status == KVIO_OK)
            priv->last_seen = newest;
        return status;
    }
    if (end_present) {
        snprintf(path, sizeof(path), "%s/end", dir);
        kvio_status_t status = read_header(xfer, path, false, meta_p);
        if (status == KVIO_OK)
            priv->end_seen = true;
        return status;
    }
    priv->changed = false;
    return KVIO_INPROGRESS;
}

static kvio_status_t file_fetch(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta, void *buffer,
                               uint64_t offset, uint64_t length, uint64_t *moved_p)
{
    file_priv_t *priv = xfer->priv;
    if (priv->read_fd < 0 || priv->read_version != meta->version) {
        kvio_xfer_set_error(xfer, "file transport: version %llu is not open",
                            (unsigned long long)meta->version);
        return KVIO_ERR_INTERNAL;
    }
    ssize_t got;
    do {
        got = pread(priv->read_fd, buffer, length, (off_t)(HEADER_BYTES + offset));
    } while (got < 0 && errno == EINTR);
    if (got < 0)
        return errno_error(xfer, errno, "reading", xfer->config->file.dir);
    if (got == 0) {
        kvio_xfer_set_error(xfer, "%s: version %llu ends early", xfer->config->file.dir,
                            (unsigned long long)meta->version);
        return KVIO_ERR_TRANSPORT;
    }
    *moved_p = (uint64_t)got;
    if (offset + (uint64_t)got >= meta->bytes) {
        close(priv->read_fd);
        priv->read_fd = -1;
    }
    return KVIO_OK;
}

/* Simulate default 1 ms + 2 GB/s: a write, fsync and rename to a local SSD,
 * then a read of it (a model repository). */
const kvio_xfer_ops_t kvio_xfer_file_ops = {
    .plugin = {.name = "file", .help = "a version file in a directory: written, renamed, "
               "found by polling or inotify", .options = kvio_no_options},
    .caps = KVIO_XFER_CAP_SHARED_STORE | KVIO_XFER_CAP_POLL,
    .model = {.latency_ns = 1000000, .bandwidth_gbps = 2.0},
    .priv_size = sizeof(file_priv_t),
    .preflight = file_preflight,
    .init = file_init,
    .fini = file_fini,
    .put = file_put,
    .notify = file_notify,
    .poll = file_poll,
    .fetch = file_fetch,
};
