/* The file tier, in one of two layouts.
 *
 * slab (the default): one file of capacity x block bytes, allocated up
 * front (fallocate), a block at its slot's offset, as fio writes one file:
 * the tier moves blocks at the device's speed. The file is an unnamed
 * O_TMPFILE inode (where the file system has none, a named one unlinked
 * as soon as it is open), so a killed rank leaves nothing behind; its last
 * close, where the file system frees what the run wrote (seconds for tens
 * of GiB), is a helper process's, after kvio has ended (close_slab). Batches
 * of blocks go through an I/O engine (kvcache/tier_io.h) with queue_depth
 * transfers in flight: io_uring, else a pool of threads.
 *
 * files: one file per block, DIR/<hash>.kv, written to an unnamed
 * O_TMPFILE inode and linked in (where the file system has no O_TMPFILE:
 * to DIR/.<hash>.<pid>.tmp, renamed), so a reader never opens a partial
 * block; a short file is reported, never returned. One block at a time:
 * what a cache of one object per block (LMCache's local disk) costs.
 *
 * O_DIRECT is on by default: where the file system refuses it (tmpfs) or
 * blocks are not 4 KiB multiples, the tier falls back to buffered I/O and
 * says why (in its info and results). No fsync: the page cache (or the
 * device, with O_DIRECT) is the tier. */
#include "kvcache/tier_int.h"
#include "kvcache/tier_io.h"

#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/data.h"
#include "kvio/files.h"
#include "kvio/log.h"

#define DIRECT_ALIGN 4096
/* Room for the blocks' directory: the path, a rank's own directory inside
 * it, and a block's file name inside that within PATH_MAX. */
#define DIR_MAX (PATH_MAX - 64)
#define PATH_ROOM (DIR_MAX - 64)

typedef enum { LAYOUT_SLAB = 0, LAYOUT_FILES = 1 } file_layout_t;

static const char *const layout_names[] = {"slab", "files", NULL};

typedef struct file_options {
    char *path;
    bool o_direct;
    int layout;      /* file_layout_t */
    int io_engine;   /* tier_io_engine_t */
    int64_t queue_depth;
    bool precondition;
} file_options_t;

static const kvio_opt_t file_options[] = {
    {.key = "path", .type = KVIO_OPT_STRING, .offset = offsetof(file_options_t, path),
     .default_value = "/tmp/kvio-tier",
     .help = "directory of the tier's files (created; its parent must exist)"},
    {.key = "o_direct", .type = KVIO_OPT_BOOL, .offset = offsetof(file_options_t, o_direct),
     .default_value = "true",
     .help = "O_DIRECT reads and writes, past the page cache (buffered, and said so in the "
             "results, where the file system refuses it or blocks are not 4 KiB multiples)"},
    {.key = "layout", .type = KVIO_OPT_ENUM, .offset = offsetof(file_options_t, layout),
     .values = layout_names, .default_value = "slab",
     .help = "slab: one preallocated file, a block at its slot's offset, batches at "
             "queue_depth (device speed); files: one file per block, one at a time"},
    {.key = "io_engine", .type = KVIO_OPT_ENUM, .offset = offsetof(file_options_t, io_engine),
     .values = tier_io_engine_names, .default_value = "io_uring",
     .help = "slab: io_uring (liburing), threads (queue_depth threads of pread/pwrite; taken, "
             "and said so, where the kernel refuses a ring) or sync (one block at a time)"},
    {.key = "queue_depth", .type = KVIO_OPT_INT,
     .offset = offsetof(file_options_t, queue_depth), .default_value = "8",
     .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 256,
     .help = "slab: blocks in flight at once within a batch"},
    {.key = "precondition", .type = KVIO_OPT_BOOL,
     .offset = offsetof(file_options_t, precondition), .default_value = "false",
     .help = "slab, emulate: before the run, write the whole slab in order and then as many "
             "blocks again at random slots, at queue_depth, with bytes no device reduces (an "
             "SSD's steady state, as fio's precondition jobs reach it), so the device is "
             "measured as after long use; the time it took and each pass's GB/s are in the "
             "tier's results"},
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

/* A slab an earlier run closed is freed by its helper (close_slab) after
 * the run: seconds during which its file system's free space rises. While
 * it rises, a tier that needs more waits for it, at most this long, and
 * stops once it has not risen for ROOM_STALL_NS (nothing being freed). */
#define ROOM_WAIT_MAX_NS (120 * 1000000000ll)
#define ROOM_STALL_NS (2 * 1000000000ll)
#define ROOM_LOOK_NS (200 * 1000000ll)

/* The bytes free under dir for a user (statvfs's f_bavail), once bytes fit
 * or the space stops rising (see ROOM_WAIT_MAX_NS); UINT64_MAX when the
 * file system does not say (ramfs, some network ones). */
static uint64_t wait_for_room(const char *dir, uint64_t bytes)
{
    int64_t start_ns = (int64_t)kvio_time_ns(), risen_ns = start_ns;
    uint64_t last = 0;
    bool said = false;
    for (;;) {
        struct statvfs fs;
        if (statvfs(dir, &fs) != 0 || fs.f_blocks == 0)
            return UINT64_MAX;
        uint64_t free_bytes = (uint64_t)fs.f_bavail * fs.f_frsize;
        int64_t now_ns = (int64_t)kvio_time_ns();
        if (free_bytes > last && last > 0)
            risen_ns = now_ns;
        if (free_bytes >= bytes || now_ns - risen_ns >= ROOM_STALL_NS ||
            now_ns - start_ns >= ROOM_WAIT_MAX_NS)
            return free_bytes;
        if (!said && last > 0 && free_bytes > last) {
            kvio_info("%s: file tier: waiting for room (%.2f GiB free of the %.2f GiB it "
                      "needs, rising: an earlier run's slab being freed)", dir,
                      (double)free_bytes / 1073741824.0, (double)bytes / 1073741824.0);
            said = true;
        }
        last = free_bytes;
        struct timespec nap = {0, ROOM_LOOK_NS};
        nanosleep(&nap, NULL);
    }
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
    uint64_t free_bytes = wait_for_room(dir, bytes);
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
 * (files) plus the device's own latency. */
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
    void *bounce;             /* aligned block buffer for O_DIRECT (depth of them: slab) */
    file_layout_t layout;
    int slab;                 /* slab: the file's descriptor, -1 when none */
    tier_io_t *io;            /* slab: the engine */
    char io_note[200];        /* the engine that ran instead of the one asked, and why */
    tier_io_op_t *ops;        /* slab: a batch's transfers */
    size_t ops_capacity;
    tier_device_t device;     /* the device under dir */
    /* precondition: the bytes of each pass and the time each took */
    uint64_t precondition_bytes;
    int64_t precondition_ns[2]; /* sequential fill, random overwrite */
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

/* slab: the tier's one file, nameless (O_TMPFILE, or named and unlinked
 * at once), allocated whole, and the engine that moves its blocks. */
static kvio_status_t open_slab(file_priv_t *file, const file_options_t *options, char *error_p,
                               size_t error_len)
{
    int direct = file->direct ? O_DIRECT : 0;
    int fd = open(file->dir, O_TMPFILE | O_RDWR | O_CLOEXEC | direct, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        char named[PATH_MAX];
        snprintf(named, sizeof(named), "%s/.kvio-slab.%d", file->dir, (int)getpid());
        int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | direct;
        fd = open(named, flags, 0600);
        if (fd < 0 && errno == EEXIST && unlink(named) == 0)
            fd = open(named, flags, 0600);
        if (fd >= 0)
            unlink(named);
    }
    if (fd < 0)
        return errno_error(errno, file->dir, "cannot create the tier's slab file", error_p,
                           error_len);
    uint64_t bytes = file->block_bytes * file->capacity;
    int failed = posix_fallocate(fd, 0, (off_t)bytes);
    if (failed == EOPNOTSUPP || failed == EINVAL)
        failed = ftruncate(fd, (off_t)bytes) == 0 ? 0 : errno;
    if (failed != 0) {
        close(fd);
        char what[128];
        snprintf(what, sizeof(what), "cannot allocate the slab file's %llu bytes",
                 (unsigned long long)bytes);
        return errno_error(failed, file->dir, what, error_p, error_len);
    }
    file->slab = fd;
    kvio_status_t status = tier_io_create((tier_io_engine_t)options->io_engine,
                                          (uint32_t)options->queue_depth, &file->io,
                                          file->io_note, sizeof(file->io_note));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "file tier: out of memory for its I/O engine");
        return status;
    }
    if (file->io_note[0] != '\0')
        kvio_warn("%s: file tier: %s", file->dir, file->io_note);
    return KVIO_OK;
}

/* precondition: the slab written whole in slot order, then capacity blocks
 * at random slots (splitmix64 from the slab's size: the same slots every
 * run), depth at a time through the bounce buffers, each batch's bytes
 * fresh random data (no device compresses or deduplicates them). The
 * first failed write ends it with its slot and reason. */
static kvio_status_t precondition_slab(file_priv_t *file, char *error_p, size_t error_len)
{
    uint32_t depth = tier_io_depth(file->io);
    uint64_t stride = (file->block_bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    tier_io_op_t ops[256];
    const kvio_data_t random = {.kind = KVIO_DATA_RANDOM};
    uint64_t state = (uint64_t)file->capacity * file->block_bytes;
    uint64_t batch = 0;
    kvio_info("%s: file tier: preconditioning the slab (%.2f GiB written twice: in order, then "
              "at random slots)", file->dir,
              (double)file->block_bytes * file->capacity / 1073741824.0);
    for (int pass = 0; pass < 2; pass++) {
        int64_t start_ns = (int64_t)kvio_time_ns();
        for (uint64_t done = 0; done < file->capacity; done += depth) {
            size_t n = file->capacity - done < depth ? (size_t)(file->capacity - done) : depth;
            for (size_t i = 0; i < n; i++) {
                uint64_t slot = done + i;
                if (pass == 1) {
                    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
                    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                    slot = (z ^ (z >> 31)) % file->capacity;
                }
                void *buffer = (unsigned char *)file->bounce + i * stride;
                kvio_data_fill(&random, kvio_data_key(state, batch, i), 0, buffer,
                               file->block_bytes);
                ops[i] = (tier_io_op_t){.buffer = buffer, .offset = slot * file->block_bytes,
                                        .bytes = file->block_bytes};
            }
            batch++;
            tier_io_run(file->io, file->slab, true, ops, n);
            for (size_t i = 0; i < n; i++) {
                if (ops[i].result == 0)
                    continue;
                char what[160];
                snprintf(what, sizeof(what), "preconditioning the slab: writing at offset %llu "
                         "(%llu of %llu bytes)", (unsigned long long)ops[i].offset,
                         (unsigned long long)ops[i].done, (unsigned long long)ops[i].bytes);
                return errno_error(ops[i].result, file->dir, what, error_p, error_len);
            }
        }
        file->precondition_ns[pass] = (int64_t)kvio_time_ns() - start_ns;
    }
    file->precondition_bytes = (uint64_t)file->capacity * file->block_bytes;
    kvio_info("%s: file tier: preconditioned in %.1f s (in order %.2f GB/s, random %.2f GB/s)",
              file->dir, (double)(file->precondition_ns[0] + file->precondition_ns[1]) / 1e9,
              (double)file->precondition_bytes / (double)file->precondition_ns[0],
              (double)file->precondition_bytes / (double)file->precondition_ns[1]);
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
    file->layout = (file_layout_t)options->layout;
    file->slab = -1;
    uint64_t depth = file->layout == LAYOUT_SLAB ? (uint64_t)options->queue_depth : 1;
    uint64_t bounce_bytes =
        (block_bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN * depth;
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
    /* A file system that reports no size (ramfs, some network ones) is not
     * checked. */
    uint64_t needed = block_bytes * capacity;
    uint64_t available = wait_for_room(file->dir, needed);
    if (needed > available) {
        snprintf(error_p, error_len,
                 "%s: the file tier needs %llu bytes (%u blocks of %llu), but only %llu "
                 "bytes are free", file->dir, (unsigned long long)needed, capacity,
                 (unsigned long long)block_bytes, (unsigned long long)available);
        status = KVIO_ERR_NO_SPACE;
        goto fail;
    }
    if (file->layout == LAYOUT_SLAB) {
        status = open_slab(file, options, error_p, error_len);
        if (status == KVIO_OK && options->precondition)
            status = precondition_slab(file, error_p, error_len);
        if (status != KVIO_OK)
            goto fail;
    } else if (options->precondition) {
        snprintf(error_p, error_len, "%s: file tier: precondition needs layout: slab (files "
                 "makes a file per block, so there is no slab to fill)", file->dir);
        status = KVIO_ERR_CONFIG;
        goto fail;
    }
    tier_device_open(&file->device, file->dir);
    return KVIO_OK;
fail:
    tier_io_destroy(file->io);
    file->io = NULL;
    if (file->slab >= 0)
        close(file->slab);
    file->slab = -1;
    free(file->bounce);
    file->bounce = NULL;
    if (file->created_dir)
        rmdir(file->dir);
    return status;
}

/* Where close_slab's helper has the slab (fd 3) and the pipe it waits on
 * (fd 4); cat reads the pipe until kvio closes its end (or dies), then
 * exits in the background, its exit the slab's last close. */
#define SLAB_HELPER "cat <&4 >/dev/null &"

/* A descriptor copied to 10 or above (close-on-exec), clear of the
 * helper's 0-4 while its file actions run; -1 on failure. */
static int above_helper_fds(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 10);
}

/* Starts the helper (sh, in its own session, nothing of kvio's open but
 * slab and wait_fd) and waits for sh, which returns as soon as cat runs in
 * the background. Returns 0 or the errno of the failure. */
static int spawn_slab_helper(int slab, int wait_fd)
{
    int fds[2] = {above_helper_fds(slab), above_helper_fds(wait_fd)};
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int failed = fds[0] < 0 || fds[1] < 0 ? errno : 0;
    if (failed == 0 && (failed = posix_spawn_file_actions_init(&actions)) == 0) {
        if ((failed = posix_spawnattr_init(&attributes)) == 0) {
            sigset_t none;
            sigemptyset(&none);
            posix_spawnattr_setsigmask(&attributes, &none);
            posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
            posix_spawn_file_actions_adddup2(&actions, fds[0], 3);
            posix_spawn_file_actions_adddup2(&actions, fds[1], 4);
            posix_spawn_file_actions_addclosefrom_np(&actions, 5);
            char *argv[] = {"sh", "-c", SLAB_HELPER, NULL};
            extern char **environ;
            pid_t pid;
            failed = posix_spawn(&pid, "/bin/sh", &actions, &attributes, argv, environ);
            int status = 0;
            pid_t waited = -1;
            while (failed == 0 && (waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
                ;
            /* ECHILD: someone else reaped it (a SIGCHLD handler); cat ran. */
            if (failed == 0 && waited == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                failed = ECHILD;
            posix_spawnattr_destroy(&attributes);
        }
        posix_spawn_file_actions_destroy(&actions);
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return failed;
}

/* The slab's last close frees the extents the run wrote, which the file
 * system takes its time over (17.6 s for mlperf/storage-only's 48 GiB on
 * ext4 mounted with discard), and kvio's exit waited for it. A helper
 * process holds a copy of the slab and waits on a pipe: kvio closes its
 * copy at once and then the pipe, and the helper's exit frees the slab
 * while kvio writes its results and exits. A killed kvio closes the pipe
 * too, so nothing is left either way. Without the helper (no /bin/sh): the
 * plain close. */
static void close_slab(file_priv_t *file)
{
    int wait_pipe[2] = {-1, -1};
    int failed = pipe2(wait_pipe, O_CLOEXEC) == 0 ? 0 : errno;
    if (failed == 0)
        failed = spawn_slab_helper(file->slab, wait_pipe[0]);
    if (failed != 0)
        kvio_debug("%s: file tier: the slab is freed here, not by a helper (%s)", file->dir,
                   strerror(failed));
    close(file->slab); /* nameless: its blocks go with the last close */
    file->slab = -1;
    for (int i = 0; i < 2; i++)
        if (wait_pipe[i] >= 0)
            close(wait_pipe[i]); /* the write end last: the helper's signal */
}

static void file_fini(void *priv)
{
    file_priv_t *file = priv;
    tier_io_destroy(file->io);
    if (file->slab >= 0)
        close_slab(file);
    free(file->ops);
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

/* slab: count blocks read or written at their slots' offsets, the engine's
 * depth in flight; with O_DIRECT and a buffer off 4 KiB, through the
 * bounce buffers, depth at a time. Each block's status and latency; the
 * first failure's text in error_p. */
static void slab_batch(file_priv_t *file, bool write, const uint32_t *slots, void *const *data,
                       size_t count, kvio_status_t *statuses_p, int64_t *latencies_ns_p,
                       char *error_p, size_t error_len)
{
    uint32_t depth = tier_io_depth(file->io);
    bool bounce = false;
    for (size_t i = 0; file->direct && i < count; i++)
        bounce |= (uintptr_t)data[i] % DIRECT_ALIGN != 0;
    size_t chunk = bounce && count > depth ? depth : count;
    if (chunk > file->ops_capacity) {
        tier_io_op_t *ops = realloc(file->ops, chunk * sizeof(*ops));
        if (ops == NULL) {
            for (size_t i = 0; i < count; i++)
                statuses_p[i] = KVIO_ERR_NOMEM;
            snprintf(error_p, error_len, "file tier: out of memory for a batch of %zu", count);
            return;
        }
        file->ops = ops;
        file->ops_capacity = chunk;
    }
    uint64_t stride = (file->block_bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    for (size_t start = 0; start < count; start += chunk) {
        size_t n = count - start < chunk ? count - start : chunk;
        for (size_t i = 0; i < n; i++) {
            void *buffer = data[start + i];
            if (bounce) {
                buffer = (unsigned char *)file->bounce + i * stride;
                if (write)
                    memcpy(buffer, data[start + i], file->block_bytes);
            }
            file->ops[i] = (tier_io_op_t){.buffer = buffer,
                                          .offset = (uint64_t)slots[start + i] * file->block_bytes,
                                          .bytes = file->block_bytes};
        }
        tier_io_run(file->io, file->slab, write, file->ops, n);
        for (size_t i = 0; i < n; i++) {
            const tier_io_op_t *op = &file->ops[i];
            latencies_ns_p[start + i] = op->latency_ns;
            statuses_p[start + i] = KVIO_OK;
            if (op->result != 0) {
                char what[128];
                snprintf(what, sizeof(what), "%s the block of slot %u (%llu of %llu bytes)",
                         write ? "writing" : "reading", slots[start + i],
                         (unsigned long long)op->done, (unsigned long long)op->bytes);
                char text[PATH_MAX + 256];
                statuses_p[start + i] = errno_error(op->result, file->dir, what, text,
                                                    sizeof(text));
                if (error_p[0] == '\0')
                    snprintf(error_p, error_len, "%s", text);
            } else if (bounce && !write) {
                memcpy(data[start + i], op->buffer, file->block_bytes);
            }
        }
    }
}

static kvio_status_t files_put(file_priv_t *file, kvio_hash_t hash, const void *data,
                               char *error_p, size_t error_len);
static kvio_status_t files_get(file_priv_t *file, kvio_hash_t hash, void *data, char *error_p,
                               size_t error_len);

/* files: one block after the other, each timed. */
static void files_batch(file_priv_t *file, bool write, const kvio_hash_t *hashes,
                        void *const *data, size_t count, kvio_status_t *statuses_p,
                        int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t start_ns = kvio_time_ns();
        char text[PATH_MAX + 256] = "";
        statuses_p[i] = write ? files_put(file, hashes[i], data[i], text, sizeof(text))
                              : files_get(file, hashes[i], data[i], text, sizeof(text));
        latencies_ns_p[i] = (int64_t)(kvio_time_ns() - start_ns);
        if (statuses_p[i] != KVIO_OK && error_p[0] == '\0')
            snprintf(error_p, error_len, "%s", text);
    }
}

static void file_put_batch(void *priv, const uint32_t *slots, const kvio_hash_t *hashes,
                           const void *const *data, size_t count, kvio_status_t *statuses_p,
                           int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    file_priv_t *file = priv;
    /* The casts: a write only reads the buffers. */
    if (file->layout == LAYOUT_FILES)
        files_batch(file, true, hashes, (void *const *)data, count, statuses_p, latencies_ns_p,
                    error_p, error_len);
    else
        slab_batch(file, true, slots, (void *const *)data, count, statuses_p, latencies_ns_p,
                   error_p, error_len);
}

static void file_get_batch(void *priv, const uint32_t *slots, const kvio_hash_t *hashes,
                           void *const *data, size_t count, kvio_status_t *statuses_p,
                           int64_t *latencies_ns_p, char *error_p, size_t error_len)
{
    file_priv_t *file = priv;
    if (file->layout == LAYOUT_FILES)
        files_batch(file, false, hashes, data, count, statuses_p, latencies_ns_p, error_p,
                    error_len);
    else
        slab_batch(file, false, slots, data, count, statuses_p, latencies_ns_p, error_p,
                   error_len);
}

static kvio_status_t files_put(file_priv_t *file, kvio_hash_t hash, const void *data,
                               char *error_p, size_t error_len)
{
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

static kvio_status_t files_get(file_priv_t *file, kvio_hash_t hash, void *data, char *error_p,
                               size_t error_len)
{
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
    if (file->layout == LAYOUT_SLAB)
        return KVIO_OK; /* the slot is written over when it is reused */
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
    char engine[64] = "";
    if (file->layout == LAYOUT_SLAB)
        snprintf(engine, sizeof(engine), ", %s at queue depth %u",
                 tier_io_engine_names[tier_io_engine(file->io)], tier_io_depth(file->io));
    snprintf(text_p, text_len, "file: %u blocks of %llu bytes in %s (%s%s), %s%s%s%s%s",
             file->capacity, (unsigned long long)file->block_bytes, file->dir,
             layout_names[file->layout], engine, file->direct ? "O_DIRECT" : "buffered",
             file->direct_note[0] ? " (" : "", file->direct_note,
             file->direct_note[0] ? ")" : "", file->io_note[0] ? "; " : "");
    if (file->io_note[0] != '\0' && strlen(text_p) + strlen(file->io_note) < text_len)
        strcat(text_p, file->io_note);
}

static void file_report(const void *priv, json_t *object)
{
    const file_priv_t *file = priv;
    json_object_set_new(object, "path", json_string(file->dir));
    json_object_set_new(object, "o_direct", json_boolean(file->direct));
    if (file->direct_note[0] != '\0')
        json_object_set_new(object, "o_direct_note", json_string(file->direct_note));
    json_object_set_new(object, "layout", json_string(layout_names[file->layout]));
    tier_device_report(&file->device, object);
    if (file->layout == LAYOUT_SLAB) {
        json_object_set_new(object, "io_engine",
                            json_string(tier_io_engine_names[tier_io_engine(file->io)]));
        json_object_set_new(object, "queue_depth", json_integer(tier_io_depth(file->io)));
        if (file->io_note[0] != '\0')
            json_object_set_new(object, "io_engine_note", json_string(file->io_note));
    }
    if (file->precondition_bytes > 0) {
        double bytes = (double)file->precondition_bytes;
        json_object_set_new(
            object, "precondition",
            json_pack("{s:I, s:f, s:f, s:f}", "bytes_per_pass",
                      (json_int_t)file->precondition_bytes, "seconds",
                      (double)(file->precondition_ns[0] + file->precondition_ns[1]) / 1e9,
                      "sequential_gbps", bytes / (double)file->precondition_ns[0],
                      "random_gbps", bytes / (double)file->precondition_ns[1]));
    }
}

const kvio_tier_ops_t kvio_tier_file = {
    .plugin = {.name = "file",
               .help = "a slab file at device speed (io_uring, queue depth), or one file per "
                       "block",
               .options = file_options, .options_size = sizeof(file_options_t),
               .check = file_check},
    .model = file_model,
    .preflight = file_preflight,
    .priv_size = sizeof(file_priv_t),
    .init = file_init,
    .fini = file_fini,
    .put_batch = file_put_batch,
    .get_batch = file_get_batch,
    .remove = file_remove,
    .describe = file_describe,
    .report = file_report,
};
