/* storage-node/node_join.c — an extra storage node (one that is not in the
 * layout: `nearattn node --config F --name s9 --listen HOST:PORT`) announces
 * itself to the compute nodes of the layout.
 *
 * Compute nodes cannot find a node that no file names, so the node goes to
 * them: for each compute node of the layout with a `port` (the compute
 * process listens there for storage nodes, docs/cluster.md "Joining") it
 * connects through the front door (rdma/xp_door.c: HELLO / challenge / AUTH
 * with the layout's secret, then the UCX addresses). That connection is the
 * one the compute node then uses: it is a peer of the node's session like an
 * accepted one (requests, decode batches, heartbeats), so no second
 * connection is made between the two workers. The compute node checks the
 * node's model shape and KV dtype (STATS) before it places requests on it.
 *
 * A compute node that is not up yet, is busy, or goes away later is tried
 * again (1 s, doubling up to 8 s) as long as the node runs: a compute process
 * started later finds the node without anybody editing a file. One that
 * refuses it for a reason retrying cannot change (this node holds KV of
 * another model shape or dtype, a role it does not take, another secret or
 * wire version) is told so in the log with the compute node's reason and
 * not announced to again. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "storage-node/node_internal.h"

#define NA_JOIN_RETRY_MS     1000
#define NA_JOIN_RETRY_MAX_MS 8000

/* 1 when compute node i listens for announcements: it has a port and is not
 * a rotational replica (whose port is the replica service's). */
static int na_node_join_door(const na_cfg_t *cfg, int i)
{
    if (cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && cfg->n_compute > 1 && i > 0)
        return 0;
    return cfg->nodes[i].port > 0;
}

na_status_t na_node_join_init(na_node_t *n)
{
    const na_cfg_t *cfg = n->cfg;
    int i, k = 0;

    for (i = 0; i < cfg->n_compute; i++)
        k += na_node_join_door(cfg, i);
    if (k == 0) {
        na_log_warn("node %s: not in %s, and no compute node there has a port to announce "
                    "it to: compute nodes will only find it if it is added to their layout "
                    "file (docs/cluster.md, \"Joining\")", n->name, cfg->file);
        return NA_OK;
    }
    n->doors = calloc((size_t)k, sizeof(*n->doors));
    if (n->doors == NULL)
        return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
    for (i = 0; i < cfg->n_compute; i++) {
        const na_cfg_node_t *cn = &cfg->nodes[i];
        na_node_door_t *d;
        if (!na_node_join_door(cfg, i))
            continue;
        d = &n->doors[n->n_doors++];
        d->name = cn->name;
        d->host = cn->host;
        d->port = (int)cn->port;
        d->next_ns = na_xp_now_ns();     /* at the first loop turn */
    }
    return NA_OK;
}

/* Compute node d refused this node for good (why): say so, never again. */
static void na_node_join_stop(na_node_t *n, na_node_door_t *d, const char *why)
{
    na_log_warn("node %s: compute node %s (%s:%d) refused it: %s; not announcing to it again "
                "(restart this node once that is fixed)", n->name, d->name, d->host, d->port,
                why);
    d->stopped = 1;
}

/* Announcement d failed (na_errmsg() says why): try again later. */
static void na_node_join_later(na_node_t *n, na_node_door_t *d)
{
    if (d->retry_ms == 0) {
        na_log_info("node %s: compute node %s (%s:%d) not reached (%s); trying again every "
                    "%d..%d ms", n->name, d->name, d->host, d->port, na_errmsg(),
                    NA_JOIN_RETRY_MS, NA_JOIN_RETRY_MAX_MS);
        d->retry_ms = NA_JOIN_RETRY_MS;
    } else {
        na_log_debug("node %s: compute node %s still not reached: %s", n->name, d->name,
                     na_errmsg());
        d->retry_ms = d->retry_ms * 2 < NA_JOIN_RETRY_MAX_MS ? d->retry_ms * 2
                                                             : NA_JOIN_RETRY_MAX_MS;
    }
    d->next_ns = na_xp_now_ns() + (uint64_t)d->retry_ms * 1000000ull;
}

void na_node_join_poll(na_node_t *n)
{
    uint64_t now = na_xp_now_ns();
    int i;

    for (i = 0; i < n->n_doors; i++) {
        na_node_door_t *d = &n->doors[i];
        na_node_peer_t *p;
        na_peer_t *sp;
        na_status_t st;

        if (d->pending != NULL) {
            st = na_ses_connect_done(n->ses, d->pending, &sp);
            if (st == NA_INPROGRESS)
                continue;
            d->pending = NULL;
            if (st == NA_ERR_AUTH || st == NA_ERR_VERSION) {     /* secret, cluster, version */
                na_node_join_stop(n, d, na_errmsg());
                continue;
            }
            if (st != NA_OK) {
                na_node_join_later(n, d);
                continue;
            }
            p = na_node_peer_add(n, sp);
            if (p == NULL) {
                na_node_join_later(n, d);
                continue;
            }
            p->door = i + 1;
            d->up = 1;              /* retry_ms is reset once it is used (join_ended) */
            na_log_info("node %s: announced to compute node %s (%s:%d)", n->name, d->name,
                        d->host, d->port);
            continue;
        }
        if (d->up || d->stopped || now < d->next_ns)
            continue;
        if (na_ses_connect_start(n->ses, d->host, d->port, &d->pending) != NA_OK) {
            d->pending = NULL;
            na_node_join_later(n, d);
        }
    }
}

int na_node_join_pending(const na_node_t *n)
{
    int i;
    for (i = 0; i < n->n_doors; i++)
        if (n->doors[i].pending != NULL)
            return 1;
    return 0;
}

void na_node_join_ended(na_node_t *n, const na_node_peer_t *p)
{
    na_node_door_t *d;
    const char *why;
    int reason;

    if (p->door <= 0 || p->door > n->n_doors)
        return;
    d = &n->doors[p->door - 1];
    d->up = 0;
    reason = na_peer_bye_reason(p->sp);
    why = na_peer_why(p->sp);
    if (reason == NA_WIRE_REFUSE_MODEL || reason == NA_WIRE_REFUSE_ROLE ||
        reason == NA_WIRE_REFUSE_AUTH || reason == NA_WIRE_REFUSE_CLUSTER ||
        reason == NA_WIRE_REFUSE_VERSION) {
        na_node_join_stop(n, d, why[0] ? why : na_wire_refuse_name((unsigned)reason));
        return;
    }
    if (p->msgs <= 1) {     /* closed after its STATS at most (busy, a name taken ...) */
        (void)na_err(NA_ERR_PEER, "it closed the connection before using it%s%s%s",
                     reason != 0 ? " (" : "", reason != 0 ? why : "", reason != 0 ? ")" : "");
        na_node_join_later(n, d);
        return;
    }
    d->retry_ms = 0;        /* it used us, then went (a run ended): soon again */
    d->next_ns = na_xp_now_ns() + NA_JOIN_RETRY_MS * 1000000ull;
}

void na_node_join_destroy(na_node_t *n)
{
    int i;

    for (i = 0; i < n->n_doors; i++)
        na_xp_connect_cancel(n->doors[i].pending);
    free(n->doors);
    n->doors = NULL;
    n->n_doors = 0;
}
