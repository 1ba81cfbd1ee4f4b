/* rdma/xp_cfg.c — transport options of a node taken from its cluster layout. */
#include <string.h>

#include "rdma/xp_cfg.h"

void na_xp_opts_from_cfg(const na_cfg_t *cfg, const char *name, int role, size_t max_msg,
                         na_xp_opts_t *xo)
{
    int i;

    memset(xo, 0, sizeof(*xo));
    xo->name = name;
    for (i = 0; i < cfg->n_nodes; i++)
        if (name != NULL && !strcmp(cfg->nodes[i].name, name))
            xo->host = cfg->nodes[i].host;   /* UCX stays on this host's interface */
    xo->cluster = cfg->cluster.name;
    xo->role = role;
    switch (cfg->transport.tls_kind) {
    case NA_CFG_TLS_SHM: xo->tls = NA_XP_TLS_SHM; break;
    case NA_CFG_TLS_TCP: xo->tls = NA_XP_TLS_TCP; break;
    case NA_CFG_TLS_RAW: xo->tls = NA_XP_TLS_RAW; break;
    default:             xo->tls = NA_XP_TLS_AUTO; break;
    }
    xo->tls_raw = cfg->transport.tls;
    xo->secret = cfg->secret;
    xo->secret_len = cfg->secret_len;
    xo->timeout_ms = (int)cfg->transport.timeout_ms;
    xo->max_msg = max_msg;
}
