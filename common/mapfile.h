/* common/mapfile.h — map a whole file read-only (the model readers' one way
 * in: GGUF images and llama2.c checkpoints). */
#ifndef NA_MAPFILE_H
#define NA_MAPFILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "common/status.h"

/* Refuse a file by its stat before it is mapped (a message naming path). */
typedef na_status_t (*na_mapfile_check_fn)(const char *path, const struct stat *sb);

/* Map all of path read-only into *map_p (*size_p bytes; release with
 * munmap). NA_ERR_IO naming the failing call ("PATH: cannot open<what>: ...",
 * "fstat", "mmap"), or what check (may be NULL) returns. */
na_status_t na_mapfile(const char *path, const char *what, na_mapfile_check_fn check,
                       void **map_p, size_t *size_p);

#endif /* NA_MAPFILE_H */
