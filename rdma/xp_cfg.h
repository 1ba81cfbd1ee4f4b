/* rdma/xp_cfg.h — transport options of a node taken from its cluster layout. */
#ifndef NA_XP_CFG_H
#define NA_XP_CFG_H

#include "common/config.h"
#include "rdma/transport.h"

/* Fill *xo (zeroed first) for node `name` of role `role` (na_wire_role_t) from
 * the layout: host (of the node of that name, if any), cluster name, transport kind (auto/shm/tcp/raw UCX_TLS), secret,
 * timeout, and max_msg (the largest payload accepted). Cannot fail; the
 * strings point into cfg, which must outlive the transport's creation. */
void na_xp_opts_from_cfg(const na_cfg_t *cfg, const char *name, int role, size_t max_msg,
                         na_xp_opts_t *xo);

#endif /* NA_XP_CFG_H */
