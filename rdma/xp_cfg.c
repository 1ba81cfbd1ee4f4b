/* rdma/xp_cfg.c — transport options of a node taken from its cluster layout. */
#include <string.h>

#include "rdma/xp_cfg.h"

/* The one tls -> UCX_TLS table. shm keeps tcp so that a peer on another
 * host is still reached; connection set-up does not need UCX's tcp (it is
 * our own TCP socket, docs/transport.md). */
static const char *const na_xp_tls_ucx_str[] = {
    [NA_XP_TLS_AUTO] = NULL,             /* UCX's default */
    [NA_XP_TLS_SHM]  = "sm,self,tcp",
    [NA_XP_TLS_TCP]  = "tcp,self",
    [NA_XP_TLS_RAW]  = NULL,             /* the string as written */
};

const char *na_xp_tls_ucx(na_xp_tls_t tls, const char *tls_raw)
{
    if (tls == NA_XP_TLS_RAW)
        return tls_raw;
    if ((unsigned)tls >= sizeof(na_xp_tls_ucx_str) / sizeof(na_xp_tls_ucx_str[0]))
        return NULL;
    return na_xp_tls_ucx_str[tls];
}

const char *na_xp_cfg_ucx_tls(const na_cfg_t *cfg)
{
    return na_xp_tls_ucx(na_xp_tls_from_cfg(cfg->transport.tls_kind), cfg->transport.tls);
}

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
    /* busy-poll only where a core is free (issue 14): beside another node
     * of the layout on this machine, spinning takes the core the other
     * node's attention or matmuls need (bench e2e --remote, t_a split) */
    if (na_xp_cfg_shares_cores(cfg, name))
        xo->spin_us = -1;
}

int na_xp_cfg_shares_cores(const na_cfg_t *cfg, const char *name)
{
    int i;

    for (i = 0; i < cfg->n_nodes; i++)
        if (cfg->nodes[i].is_local && (name == NULL || strcmp(cfg->nodes[i].name, name)))
            return 1;
    return 0;
}

/* ---- names of the kinds (transport.h) --------------------------------------- */

na_xp_tls_t na_xp_tls_parse(const char *s)
{
    if (s == NULL || !strcmp(s, "auto") || s[0] == '\0')
        return NA_XP_TLS_AUTO;
    if (!strcmp(s, "shm"))
        return NA_XP_TLS_SHM;
    if (!strcmp(s, "tcp"))
        return NA_XP_TLS_TCP;
    return NA_XP_TLS_RAW;
}

const char *na_xp_tls_name(na_xp_tls_t tls)
{
    switch (tls) {
    case NA_XP_TLS_AUTO: return "auto";
    case NA_XP_TLS_SHM:  return "shm";
    case NA_XP_TLS_TCP:  return "tcp";
    case NA_XP_TLS_RAW:  return "raw";
    }
    return "?";
}

na_xp_errmode_t na_xp_errmode_resolve(na_xp_tls_t tls, na_xp_errmode_t mode)
{
    if (mode != NA_XP_ERRMODE_AUTO)
        return mode;
    return tls == NA_XP_TLS_SHM ? NA_XP_ERRMODE_CM : NA_XP_ERRMODE_PEER;
}

int na_xp_errmode_parse(const char *s)
{
    if (s == NULL || !strcmp(s, "auto"))
        return NA_XP_ERRMODE_AUTO;
    if (!strcmp(s, "peer"))
        return NA_XP_ERRMODE_PEER;
    if (!strcmp(s, "cm"))
        return NA_XP_ERRMODE_CM;
    return -1;
}

const char *na_xp_errmode_name(na_xp_errmode_t mode)
{
    switch (mode) {
    case NA_XP_ERRMODE_AUTO: return "auto";
    case NA_XP_ERRMODE_PEER: return "peer";
    case NA_XP_ERRMODE_CM:   return "cm";
    }
    return "?";
}
