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
    xo->tls = na_xp_tls_from_cfg(cfg->transport.tls_kind);
    xo->tls_raw = cfg->transport.tls;
    xo->secret = cfg->secret;
    xo->secret_len = cfg->secret_len;
    xo->timeout_ms = (int)cfg->transport.timeout_ms;
    xo->max_msg = max_msg;
}
