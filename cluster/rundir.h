/* cluster/rundir.h — the private KV directory of one run
 * ($TMPDIR/nearattn-kv-XXXXXX), so that runs on one machine never share KV
 * files, and its removal at the end. A layout node's KV under it is
 * DIR/NODE/dI for its device i (what `nearattn node --kv-dir DIR/NODE`
 * does; na_rundir_move_kv does the same to a layout in this process). */
#ifndef NA_RUNDIR_H
#define NA_RUNDIR_H

#include <stddef.h>

#include "common/config.h"
#include "common/status.h"

/* mkdtemp of $TMPDIR (or /tmp)/nearattn-kv-XXXXXX into buf. NA_ERR_IO. */
na_status_t na_rundir_make(char *buf, size_t len);
/* rm -rf of a directory made by na_rundir_make; "" is a no-op. Never fails
 * (what cannot be removed is logged). */
void        na_rundir_remove(const char *dir);
/* Point every device i of node nd at DIR/dI (`nearattn node --kv-dir`).
 * NA_ERR_NOMEM. */
na_status_t na_rundir_move_node_kv(na_cfg_node_t *nd, const char *dir);
/* Point every storage device of cfg at DIR/NODE/dI. NA_ERR_NOMEM. */
na_status_t na_rundir_move_kv(na_cfg_t *cfg, const char *dir);

#endif /* NA_RUNDIR_H */
