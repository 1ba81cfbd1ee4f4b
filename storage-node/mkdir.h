/* storage-node/mkdir.h — mkdir -p, the one place in the tree that creates a
 * directory path: a storage node creates its KV directories when its slots
 * are created (storage-node/slot.c), and the cluster library its log
 * directory (cluster/launch.c). Loading a layout (common/config.c) creates
 * nothing. */
#ifndef NA_MKDIR_H
#define NA_MKDIR_H

#include <sys/types.h>

#include "common/status.h"

/* Create path and its missing parents (mode for what is created, which
 * must not let group or others write); the result must be a writable
 * directory only we control, so that no other user can plant a file or a
 * symbolic link where a node or launch writes (KV files in /tmp, logs).
 * Each component is checked with lstat: one this call created, and the
 * directory itself, must be owned by the effective user and not writable by
 * group or others; a parent that was already there must be ours or root's
 * and, if others may write in it, sticky (like /tmp); a symbolic link is
 * followed only when ours or root's. NA_ERR_INVALID for an empty or too
 * long path, NA_ERR_IO naming the path and the reason otherwise. */
na_status_t na_mkdir_p(const char *path, mode_t mode);

#endif /* NA_MKDIR_H */
