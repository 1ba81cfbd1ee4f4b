/* rdma/xp_cfg.h — transport options of a node taken from its cluster layout. */
#ifndef NA_XP_CFG_H
#define NA_XP_CFG_H

#include "common/config.h"
#include "rdma/transport.h"

/* na_xp_tls_t and the layout's na_cfg_tls_t number the same kinds: the
 * layout (common/) names the kind, the UCX_TLS strings live here only
 * (rdma/xp_cfg.c, na_xp_tls_ucx). */
_Static_assert(NA_XP_TLS_AUTO == (int)NA_CFG_TLS_AUTO && NA_XP_TLS_SHM == (int)NA_CFG_TLS_SHM &&
               NA_XP_TLS_TCP == (int)NA_CFG_TLS_TCP && NA_XP_TLS_RAW == (int)NA_CFG_TLS_RAW,
               "na_xp_tls_t and na_cfg_tls_t differ");
static inline na_xp_tls_t na_xp_tls_from_cfg(na_cfg_tls_t kind)
{
    return (na_xp_tls_t)kind;
}
static inline na_cfg_tls_t na_xp_tls_cfg(na_xp_tls_t tls)
{
    return (na_cfg_tls_t)tls;
}

/* Fill *xo (zeroed first) for node `name` of role `role` (na_wire_role_t) from
 * the layout: host (of the node of that name, if any), cluster name, transport kind (auto/shm/tcp/raw UCX_TLS), secret,
 * timeout, and max_msg (the largest payload accepted). Cannot fail; the
 * strings point into cfg, which must outlive the transport's creation. */
void na_xp_opts_from_cfg(const na_cfg_t *cfg, const char *name, int role, size_t max_msg,
                         na_xp_opts_t *xo);

/* na_xp_tls_ucx of this layout's transport.tls: the UCX_TLS value to set
 * (NULL for auto). Owned by cfg. */
const char *na_xp_cfg_ucx_tls(const na_cfg_t *cfg);

/* 1 when node `name` shares this machine's cores with another node of the
 * layout (their hosts name this machine: one box running compute and
 * storage nodes, as `nearattn run` does): a thread waiting on the network
 * must then sleep at once rather than busy-poll, since the peer it waits
 * for needs the core. na_xp_opts_from_cfg sets spin_us = -1 (never) then. */
int  na_xp_cfg_shares_cores(const na_cfg_t *cfg, const char *name);

#endif /* NA_XP_CFG_H */
