/* Creating files where someone else may have planted a name: in a shared
 * directory (the default update directory under the system's temp
 * directory, a tier's directory) a symlink or a file at the name kvio is
 * about to open must never be followed, truncated or removed. */
#ifndef KVIO_FILES_H
#define KVIO_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Creates a new file DIR/<prefix>.<pid>.<n> (flags added to O_WRONLY |
 * O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC), trying the next n while a
 * name is taken: nothing there is opened, followed or truncated. Returns
 * the descriptor with its path in path_p, or -errno. */
int kvio_file_create_new(const char *dir, const char *prefix, int flags, mode_t mode,
                         char *path_p, size_t path_len);

/* Whether kvio can write in dir (with direct, a 4 KiB O_DIRECT write from
 * aligned, which holds 4 KiB): an unnamed O_TMPFILE inode where the file
 * system has them, else a new file (kvio_file_create_new), removed after;
 * nothing of anyone else's is touched. Returns 0 or the errno of the first
 * failure. */
int kvio_dir_probe(const char *dir, bool direct, const void *aligned);

#endif
