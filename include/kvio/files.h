/* Creating files where someone else may have planted a name: in a shared
 * directory (the default update directory under the system's temp
 * directory, a tier's directory) a symlink or a file at the name kvio is
 * about to open must never be followed, truncated or removed. And two
 * checks before reading a file whole: what it starts with, and whether its
 * JSON fits in memory. */
#ifndef KVIO_FILES_H
#define KVIO_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "kvio/status.h"

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

/* The first byte of file that is not whitespace (EOF if none), for telling
 * a JSON document ('{', '[') from lines; the file is rewound after. */
int kvio_file_first_byte(FILE *file);

/* Whether a JSON document of file's size fits in memory as jansson holds it
 * (about ten times its bytes, at most half of what is available):
 * KVIO_OK, or KVIO_ERR_NO_SPACE logged with path and the numbers. */
kvio_status_t kvio_file_check_json_memory(const char *path, FILE *file);

#endif
