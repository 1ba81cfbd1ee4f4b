/* storage-node/mkdir.h — mkdir -p, the one place in the tree that creates a
 * directory path: a storage node creates its KV directories when its slots
 * are created (storage-node/slot.c), and the cluster library its log
 * directory (cluster/launch.c). Loading a layout (common/config.c) creates
 * nothing. */
#ifndef NA_MKDIR_H
#define NA_MKDIR_H

#include <sys/types.h>

#include "common/status.h"

/* Create path and its missing parents (mode for what is created); the
 * result must be a writable directory. NA_ERR_INVALID for an empty or
 * too long path, NA_ERR_IO naming the failing call and path otherwise. */
na_status_t na_mkdir_p(const char *path, mode_t mode);

#endif /* NA_MKDIR_H */
