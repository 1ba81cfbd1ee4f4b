/* common/mapfile.h — map a whole file read-only (the model readers' one way
 * in: GGUF images and llama2.c checkpoints). */
#ifndef NA_MAPFILE_H
#define NA_MAPFILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "common/status.h"

/* Open path for reading without blocking on it: open with O_NONBLOCK (a FIFO
 * with no writer would hang a plain open), fstat, refuse anything but a
 * regular file, then clear O_NONBLOCK. On success *fd_p is the descriptor
 * (the caller closes it) and *sb its stat. Errors: NA_ERR_IO "PATH: cannot
 * open WHAT: <strerror>" (errno kept: callers may map ENOENT), or not_regular
 * with "PATH: WHAT is not a regular file (it is a FIFO|directory|...)". Every
 * loader of a user-named file goes through here (models, tokenizers, YAML
 * layouts, secret files). */
na_status_t na_open_regular(const char *path, const char *what, na_status_t not_regular,
                            int *fd_p, struct stat *sb);

/* Refuse a file by its stat before it is mapped (a message naming path). */
typedef na_status_t (*na_mapfile_check_fn)(const char *path, const struct stat *sb);

/* Map all of path read-only into *map_p (*size_p bytes; release with
 * munmap). Opened with na_open_regular (a non-regular file is NA_ERR_FORMAT);
 * NA_ERR_IO naming the failing call ("PATH: cannot open WHAT: ...", "fstat",
 * "mmap"), or what check (may be NULL) returns. */
na_status_t na_mapfile(const char *path, const char *what, na_mapfile_check_fn check,
                       void **map_p, size_t *size_p);

#endif /* NA_MAPFILE_H */
