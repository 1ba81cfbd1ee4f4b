/* rdma/session_cfg.c — a session with its own transport, from the layout. */
#include <string.h>

#include "common/config.h"
#include "rdma/session.h"
#include "rdma/xp_cfg.h"

na_status_t na_ses_create_cfg(const struct na_cfg *cfg, const char *name, int role,
                              const char *who, void *ctx, na_ses_t **s_p)
{
    na_xp_opts_t xo;
    na_ses_opts_t so;
    na_xp_t *xp;
    na_status_t st;

    na_xp_opts_from_cfg(cfg, name, role, (size_t)NA_WIRE_MAX_PAYLOAD, &xo);
    st = na_xp_create(&xo, &xp);
    if (st != NA_OK)
        return st;
    memset(&so, 0, sizeof(so));
    so.who = who;
    so.heartbeat_ms = (unsigned)cfg->transport.heartbeat_ms;
    so.peer_timeout_ms = (unsigned)cfg->transport.peer_timeout_ms;
    so.reply_timeout_ms = (unsigned)(cfg->transport.timeout_ms * 6);
    /* A silent host must not hold us past what our connected peers (same
     * layout, same peer_timeout_ms) tolerate from us: connect within a third
     * of it, so their heartbeats are answered in time. */
    so.connect_timeout_ms = (unsigned)cfg->transport.timeout_ms;
    if (so.peer_timeout_ms > 0 && so.peer_timeout_ms / 3 < so.connect_timeout_ms)
        so.connect_timeout_ms = so.peer_timeout_ms / 3 > 0 ? so.peer_timeout_ms / 3 : 1;
    so.own_xp = 1;
    st = na_ses_create(xp, &so, ctx, s_p);
    if (st != NA_OK)
        na_xp_destroy(xp);
    return st;
}
