/* compute-node/attn_remote.c — the attention service over the storage nodes
 * of a layout (see attn_service.h), on the wire protocol of common/wire.h.
 *
 * The storage nodes are peers of one protocol session (rdma/session.h), which
 * receives, answers heartbeats, runs the silence timer and matches every
 * answer to its request; every message is a request of the storage client
 * (compute-node/storage_client.h). Several batches are in flight at once:
 * each DECODE_ATTN part is a request whose ATTN_OUT (and the ERRORs of its
 * entries) go to compute-node/attn_remote_decode.c, whatever order they come
 * in; prefill parts (sent with MORE and not waited for, but for the last
 * layer's) are requests whose answers are counted per request
 * (attn_remote_req.c); open, STATS and pings are blocking calls.
 *
 * This file is the top of three one-way layers (attn_remote_state.h):
 * it calls attn_remote_req.c and attn_remote_decode.c, which never call
 * back up; a node's end reaches it through the session's end handler
 * (rm_on_end), which it registered.
 *
 * Placement. Request partition: a request lives on one storage node (the
 * live one with the fewest open requests; the node places it on one of its
 * slots). Head partition: the KV heads are split over the layout's global
 * slots (na_cfg_head_split) and each node gets its slots' heads (contiguous,
 * since slots are numbered node by node); the node splits them over its own
 * slots. A decode batch becomes one DECODE_ATTN per node involved, each with
 * that node's head range of every entry; the batch completes when every
 * node answered or failed.
 *
 * Failures. A node lost (transport event, BYE, silence, a DECODE_ATTN not
 * answered within peer_timeout_ms, another request within 6 x timeout_ms)
 * fails exactly the entries it owes and every later entry of its requests,
 * with a reason naming it; an ATTN_OUT whose shape does not match what was
 * sent fails its entries and drops the node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/wire_stats.h"
#include "compute-node/attn_remote_state.h"
#include "compute-node/storage_client.h"
#include "rdma/xp_cfg.h"

#define RM_RETRY_MS    1000 /* a node unreachable at create is retried after this, */
#define RM_RETRY_MAX   32000 /* doubling up to this (a silent host costs a timeout) */
#define RM_LOST_RETRY_MS 250 /* a node of the layout lost after it joined: dialled again
                                after this, doubling up to 1 s (it may be restarted) */
#define RM_LOST_RETRY_MAX 1000
#define RM_LAYOUT_MS   500  /* the layout file is looked at this often for new nodes */
#define RM_PINGS       5    /* HEARTBEAT round trips per node measured at the end */
/* ... each after this pause: as decode's messages, a ping then finds the peer
 * asleep (on these VMs the wake-ups are most of a round trip: back-to-back
 * pings read 11-65 us from run to run, the decode round trips ~50 us). It
 * makes a stats call with nothing in flight take RM_PINGS ms per node
 * (serve's /metrics reads them; never while attention is in flight). */
#define RM_PING_GAP_US 1000
#define RM_JOIN_ASK_MS 25   /* a node that announced itself: STATS asked this often */

static void rm_base_reply(void *ctx, na_peer_t *peer, uintptr_t arg, na_status_t st,
                          const na_ses_in_t *in);

/* STATS to a node that is joining (its answer: rm_base_reply). */
static void rm_ask_stats(rm_t *p, rm_node_t *rn)
{
    int ms = rn->announced ? RM_JOIN_ASK_MS : (int)p->cfg->transport.timeout_ms;

    if (na_sc_stats_send(rn->peer, NA_SES_NO_LOSS, ms, rm_base_reply, 0) != NA_OK)
        rn->joining = 0;        /* the peer ended: rm_on_end said why */
}

/* Node j connected as peer: ask for its STATS, whose shape keys are checked
 * against the engine (rm_base_reply) before it takes requests; they are also
 * the base of the time split. */
static void rm_node_attach(rm_t *p, int j, na_peer_t *peer)
{
    rm_node_t *rn = &p->nodes[j];

    rn->peer = peer;
    na_peer_set_user(peer, rn);
    rn->joining = 1;
    rn->why[0] = '\0';
    /* a node that connected to us may claim its connection a moment after
     * our first message arrived, and that message is then dropped on its
     * side: ask again every RM_JOIN_ASK_MS until timeout_ms */
    rn->join_until_ns = na_xp_now_ns() + (uint64_t)p->cfg->transport.timeout_ms * 1000000ull;
    rm_ask_stats(p, rn);
}

/* A connect to node j failed (na_errmsg() says why): the first time (at
 * create) a warning and a retry after RM_RETRY_MS, then doubling up to
 * RM_RETRY_MAX. */
static void rm_node_unreachable(rm_t *p, int j)
{
    rm_node_t *rn = &p->nodes[j];

    if (rn->retry_ms == 0) {
        char why[NA_ASVC_REASON_MAX];
        int len = snprintf(why, sizeof(why), "storage node %s (%s:%ld) unreachable: %s",
                           rn->name, rn->host, rn->port, na_errmsg());
        if (len >= (int)sizeof(why))    /* a long host or reason: keep what fits */
            memcpy(why + sizeof(why) - 4, "...", 4);
        rm_copy(rn->why, sizeof(rn->why), why);
        na_log_warn("%s", rn->why);
        rn->retry_ms = RM_RETRY_MS;
    } else {
        na_log_debug("storage node %s still unreachable: %s", rn->name, na_errmsg());
        unsigned max = rn->base_ok ? RM_LOST_RETRY_MAX : RM_RETRY_MAX;  /* joined once */
        rn->retry_ms = rn->retry_ms * 2 < max ? rn->retry_ms * 2 : max;
    }
    rn->next_try_ns = na_xp_now_ns() + (uint64_t)rn->retry_ms * 1000000ull;
}

/* Finish the connects in progress that are done; returns how many still
 * run. A node that connects after create says so. */
static int rm_connect_poll(rm_t *p)
{
    int j, n = 0;

    for (j = 0; j < p->n_nodes; j++) {
        rm_node_t *rn = &p->nodes[j];
        na_peer_t *peer;
        na_status_t st;
        if (rn->pending == NULL)
            continue;
        st = na_ses_connect_done(p->ses, rn->pending, &peer);
        if (st == NA_INPROGRESS) {
            n++;
            continue;
        }
        rn->pending = NULL;
        if (st != NA_OK) {
            rm_node_unreachable(p, j);
            continue;
        }
        rm_node_attach(p, j, peer);
    }
    return n;
}

/* Start a connect to node j (its handshake goes on as the session polls). */
static void rm_connect_start(rm_t *p, int j)
{
    rm_node_t *rn = &p->nodes[j];

    if (na_ses_connect_start(p->ses, rn->host, (int)rn->port, &rn->pending) != NA_OK) {
        rn->pending = NULL;
        rm_node_unreachable(p, j);
    }
}

/* Node j: name and address, no head range (set by the caller at create). */
static void rm_node_init(rm_t *p, int j, const char *name, const char *host, long port)
{
    rm_node_t *rn = &p->nodes[j];

    rm_copy(rn->name, sizeof(rn->name), name);
    rm_copy(rn->host, sizeof(rn->host), host);
    rn->port = port;
    rn->h0 = rn->h1 = 0;
}

/* Nodes connected whose STATS (shape check) has not come yet. */
static int rm_joining(const rm_t *p)
{
    int j, n = 0;
    for (j = 0; j < p->n_nodes; j++)
        n += p->nodes[j].joining;
    return n;
}

/* 1 while a batch in flight waits for node j. */
static int rm_owed(const rm_t *p, int j)
{
    int bi;
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        if (p->b[bi].active && p->b[bi].owes[j])
            return 1;
    return 0;
}

/* The entry for a storage node NAME that announced itself: that name's
 * entry if it announced before and is gone (refused, left or lost), else a
 * new one, else the entry of any announced node that is gone and that no
 * open request or batch still uses. -1 when the table is full of live ones.
 * A reused entry starts afresh (its ended connection is closed). */
static int rm_entry_for(rm_t *p, const char *name)
{
    int j, any = -1;

    for (j = 0; j < p->n_nodes; j++) {
        rm_node_t *rn = &p->nodes[j];
        if (!rn->announced || rn->alive || rn->joining || rn->pending != NULL ||
            rn->n_open > 0 || rm_owed(p, j))
            continue;
        if (!strcmp(rn->name, name)) {
            any = j;
            break;
        }
        if (any < 0)
            any = j;
    }
    if ((any < 0 || strcmp(p->nodes[any].name, name) != 0) && p->n_nodes < RM_MAX_NODES)
        return p->n_nodes++;
    if (any >= 0) {
        rm_node_t *rn = &p->nodes[any];
        if (rn->peer != NULL) {
            na_peer_set_user(rn->peer, NULL);
            na_peer_close(rn->peer, 0, NULL);
        }
        memset(rn, 0, sizeof(*rn));
    }
    return any;
}

/* A storage node connected to our listener (rm_listen): it announces itself
 * (storage-node/node_join.c). It becomes a node of this service on that
 * connection, checked like any other (rm_node_attach). */
static void rm_on_accept(void *ctx, na_peer_t *peer, na_ses_end_t how, const char *why)
{
    rm_t *p = ctx;
    const char *name = na_peer_name(peer);
    const char *addr = na_xp_ep_addr(na_peer_ep(peer));
    int j;

    (void)how;
    (void)why;
    if (na_xp_ep_peer_role(na_peer_ep(peer)) != NA_WIRE_ROLE_STORAGE) {
        na_log_warn("remote: %s (%s) connected as a %s node; only storage nodes announce "
                    "themselves here: closed", name, addr,
                    na_wire_role_name((unsigned)na_xp_ep_peer_role(na_peer_ep(peer))));
        na_peer_close(peer, NA_WIRE_REFUSE_ROLE, "only storage nodes connect to a compute node");
        return;
    }
    for (j = 0; j < p->n_nodes; j++)
        if (!strcmp(p->nodes[j].name, name) && (p->nodes[j].alive || p->nodes[j].joining ||
                                                 p->nodes[j].pending != NULL)) {
            na_log_warn("remote: storage node %s announced itself from %s, but a node of that "
                        "name is connected: closed", name, addr);
            na_peer_close(peer, NA_WIRE_REFUSE_NAME, "a storage node of that name is "
                          "connected already");
            return;
        }
    j = rm_entry_for(p, name);
    if (j < 0) {
        na_log_warn("remote: storage node %s announced itself, but this compute node holds at "
                    "most %d, all connected", name, RM_MAX_NODES);
        na_peer_close(peer, NA_WIRE_REFUSE_BUSY, "this compute node has no room for another "
                      "storage node");
        return;
    }
    rm_node_init(p, j, name, addr, 0);
    p->nodes[j].announced = 1;
    p->nodes[j].next_try_ns = UINT64_MAX;   /* it connected to us: never dialled */
    na_log_info("remote: storage node %s announced itself (%s)", name, addr);
    rm_node_attach(p, j, peer);
}

/* Request partition: listen on this compute node's layout address (its
 * `port`; not a rotational replica's, whose port is its replica service) for
 * storage nodes that are in no layout and announce themselves
 * (docs/cluster.md "Joining"). No port: nothing; a failure is a warning
 * (the run goes on without it). */
static void rm_listen(rm_t *p, const char *name)
{
    const na_cfg_node_t *me = na_cfg_find_node(p->cfg, name);

    if (me == NULL || me->role != NA_CFG_ROLE_COMPUTE || me->port <= 0)
        return;
    if (p->cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && p->cfg->n_compute > 1 &&
        me != &p->cfg->nodes[0])
        return;                 /* a compute replica: its port is the replica service's */
    na_ses_on_accept(p->ses, rm_on_accept);
    if (na_xp_listen(na_ses_xp(p->ses), me->host, (int)me->port, NULL) != NA_OK) {
        na_log_warn("remote: storage nodes cannot announce themselves to %s: %s", name,
                    na_errmsg());
        return;
    }
    na_log_info("remote: storage nodes may announce themselves at %s:%ld", me->host, me->port);
}

/* Request partition: the storage nodes that were added to the layout file
 * since it was last read (docs/cluster.md "Joining a running cluster";
 * the file's directory, compute-node/storage_dir.h, re-reads it) become
 * nodes of this service, connected like late nodes (the first try at once).
 * Looked at every RM_LAYOUT_MS; nodes are never removed (a node that left
 * is lost, and not retried). Never fails. */
static void rm_layout_poll(rm_t *p)
{
    uint64_t now = na_xp_now_ns();
    int n, j;

    if (p->dir == NULL || now < p->next_layout_ns)
        return;
    p->next_layout_ns = now + RM_LAYOUT_MS * 1000000ull;
    n = na_sc_dir_reload(p->dir);
    for (; p->dir_seen < n; p->dir_seen++) {
        const char *name = na_sc_dir_name(p->dir, p->dir_seen), *host;
        int known = 0, port;
        for (j = 0; j < p->n_nodes; j++)
            known |= !strcmp(p->nodes[j].name, name);
        if (known)
            continue;
        if (p->n_nodes == RM_MAX_NODES) {
            na_log_warn("remote: storage node %s joined the layout, but this compute node "
                        "holds at most %d", name, RM_MAX_NODES);
            continue;
        }
        host = na_sc_dir_host(p->dir, p->dir_seen, &port);
        j = p->n_nodes++;
        rm_node_init(p, j, name, host, port);
        p->nodes[j].retry_ms = RM_RETRY_MS / 2;     /* its "joined" line; then 1 s, ... */
        na_log_info("remote: storage node %s (%s:%d) joined the layout %s", name, host, port,
                    p->cfg->file);
        rm_connect_start(p, j);
    }
}

/* Request partition: try again to connect the storage nodes of the layout
 * that were unreachable when the service was created (started later, by hand
 * or by a launcher, or silent then), after RM_RETRY_MS, doubling per failure
 * up to RM_RETRY_MAX. Never blocks: a connect is started here and finished
 * by a later call (each session poll makes one, see na_ses_on_tick), so a
 * silent host costs the requests nothing; the connect gives up after the
 * session's bound, min(timeout_ms, peer_timeout_ms / 3). A node that joins
 * takes new requests. A node lost after it was connected (its requests
 * failed or were re-placed) is dialled again likewise, from RM_LOST_RETRY_MS
 * up to RM_LOST_RETRY_MAX, and takes new requests once back. Never fails. */
static void rm_retry_late(rm_t *p)
{
    uint64_t now = na_xp_now_ns();
    int j;

    rm_layout_poll(p);
    (void)rm_connect_poll(p);
    for (j = 0; j < p->n_nodes; j++) {
        rm_node_t *rn = &p->nodes[j];
        if (rn->alive || rn->peer != NULL || rn->pending != NULL || now < rn->next_try_ns)
            continue;
        rm_connect_start(p, j);
    }
}

static void rm_tick(void *ctx)
{
    rm_t *p = ctx;
    if (!p->head_part)
        rm_retry_late(p);
}

/* The session's end handler: node j went down (rm_node_end fails what it
 * owes), and its connection is dropped or dialled again. */
static void rm_on_end(void *ctx, na_peer_t *peer, na_ses_end_t how, const char *why)
{
    rm_t *p = ctx;
    int j = rm_node_of(p, peer);

    if (j < 0)
        return;
    rm_node_end(p, j, why, how == NA_SES_LEFT);
    if (p->nodes[j].announced) {
        /* it connected to us and is never dialled: its connection goes now,
         * and its entry may be taken by the next node that announces itself
         * (rm_entry_for) once no request uses it */
        p->nodes[j].joining = 0;
        p->nodes[j].peer = NULL;
        na_peer_set_user(peer, NULL);
        na_peer_close(peer, 0, NULL);
    } else if (!p->head_part && p->nodes[j].next_try_ns != UINT64_MAX) {
        /* a node of the layout (request partition): dialled again
         * (rm_retry_late) until it is back, e.g. restarted by `serve` or by
         * hand; once back it takes new requests. The ended peer is left to
         * the session (as before: closing a silent TCP peer here can block
         * the loop for timeout_ms), detached from the entry. */
        rm_node_t *rn = &p->nodes[j];
        rn->joining = 0;
        rn->peer = NULL;
        na_peer_set_user(peer, NULL);
        rn->retry_ms = RM_LOST_RETRY_MS;
        rn->next_try_ns = na_xp_now_ns() + (uint64_t)RM_LOST_RETRY_MS * 1000000ull;
    }
}

/* Read the counters this service uses from a STATS answer. */
static void rm_counters(const na_stats_view_t *vp, rm_counters_t *c)
{
    uint64_t thr;

    memset(c, 0, sizeof(*c));
    c->ssd = vp->slot_sum[NA_STAT_SLOT_BYTES_READ_SSD];
    c->csd_noop = vp->slot_sum[NA_STAT_SLOT_CSD_NOOP];
    c->csd_launches = vp->slot_sum[NA_STAT_SLOT_CSD_LAUNCHES];
    c->csd_p2p = vp->slot_sum[NA_STAT_SLOT_CSD_P2P_BYTES];
    c->dram_used = vp->slot_sum[NA_STAT_SLOT_DRAM_USED];
    c->ssd_used = vp->slot_sum[NA_STAT_SLOT_SSD_USED];
    c->dec_ns = vp->node[NA_STAT_DECODE_NS];
    c->pfx_hit = vp->node[NA_STAT_PREFIX_HIT_TOKENS];
    c->pfx_bytes = vp->node[NA_STAT_PREFIX_CACHE_BYTES];
    c->prefill_tok = vp->node[NA_STAT_PREFILL_TOKENS];
    thr = vp->node[NA_STAT_ATTN_THREADS] > 0 ? vp->node[NA_STAT_ATTN_THREADS] : 1;
    c->comp_ns = vp->slot_sum[NA_STAT_SLOT_ATTN_COMPUTE_NS] / thr;
}

/* The node's shape keys in STATS (a node that sends none is not checked):
 * NA_OK when they match the engine's model and KV dtype, else a reason. */
static na_status_t rm_shape_check(const rm_t *p, const rm_node_t *nd, const na_stats_view_t *v)
{
    const na_model_config_t *mc = &p->base.mc;
    static const na_stat_node_t key[5] = { NA_STAT_N_LAYERS, NA_STAT_N_HEADS,
                                           NA_STAT_N_KV_HEADS, NA_STAT_HEAD_DIM,
                                           NA_STAT_KV_DTYPE };
    uint64_t want[5], got[5];
    int have = 0, i;

    want[0] = (uint64_t)mc->n_layers;
    want[1] = (uint64_t)mc->n_heads;
    want[2] = (uint64_t)mc->n_kv_heads;
    want[3] = (uint64_t)mc->head_dim;
    want[4] = (uint64_t)p->kv_dtype;
    for (i = 0; i < 5; i++) {
        got[i] = v->has_node[key[i]] ? v->node[key[i]] : want[i];
        have += v->has_node[key[i]];
    }
    if (have == 0 || memcmp(got, want, sizeof(got)) == 0)
        return NA_OK;
    return na_err(NA_ERR_INVALID, "storage node %s holds KV for %llu layers, %llu heads, %llu KV "
                  "heads, head_dim %llu, kv %s; this engine has %d, %d, %d, %d, kv %s: it takes "
                  "no requests (start it with this model's --shape / --kv-dtype)", nd->name,
                  (unsigned long long)got[0], (unsigned long long)got[1],
                  (unsigned long long)got[2], (unsigned long long)got[3],
                  got[4] < 64 ? na_dtype_name((na_dtype_t)got[4]) : "?", mc->n_layers,
                  mc->n_heads, mc->n_kv_heads, mc->head_dim, na_dtype_name(p->kv_dtype));
}

/* STATS at connect: the node's shape is checked (rm_shape_check), then it
 * takes requests; the counters are the base of this service's time split. */
static void rm_base_reply(void *ctx, na_peer_t *peer, uintptr_t arg, na_status_t st,
                          const na_ses_in_t *in)
{
    rm_t *p = ctx;
    rm_node_t *nd = na_peer_user(peer);
    rm_counters_t c;
    na_stats_view_t v;
    int reason = NA_WIRE_REFUSE_PROTO;

    (void)arg;
    if (nd == NULL || !nd->joining)
        return;
    if (st == NA_ERR_TIMEOUT && nd->announced && na_peer_alive(peer) &&
        na_xp_now_ns() < nd->join_until_ns) {
        rm_ask_stats(p, nd);
        return;
    }
    nd->joining = 0;
    if (st == NA_OK) {
        na_stats_view(&in->m->u.stats, &v);
        st = rm_shape_check(p, nd, &v);
        reason = NA_WIRE_REFUSE_MODEL;      /* it would be refused again: it stops */
    } else if (na_peer_alive(peer))
        st = na_err(st, "storage node %s did not answer STATS at connect: %s", nd->name,
                    na_errmsg());
    else
        (void)na_err(st, "storage node %s: %s", nd->name, na_peer_why(peer));
    if (st != NA_OK) {
        rm_copy(nd->why, sizeof(nd->why), na_errmsg());
        na_log_warn("remote: %s", nd->why);
        na_peer_set_user(peer, NULL);
        na_peer_close(peer, reason, na_peer_alive(peer) ? nd->why : NULL);
        nd->peer = NULL;
        nd->next_try_ns = UINT64_MAX;   /* not retried: it would be refused again */
        return;
    }
    rm_counters(&v, &c);
    nd->base_ok = 1;
    nd->base_ssd = c.ssd;
    nd->base_dec_ns = c.dec_ns;
    nd->base_comp_ns = c.comp_ns;
    nd->alive = 1;
    if (nd->retry_ms != 0 || nd->announced)
        na_log_info("storage node %s joined (%s%s%.0ld): it takes new requests", nd->name,
                    nd->host, nd->port > 0 ? ":" : "", nd->port);
}

/* 1 while a batch is waiting for a node. */
static int rm_busy(const rm_t *p)
{
    int bi;
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        if (p->b[bi].active)
            return 1;
    return p->n_done > 0;
}

static int rm_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Node j's STATS counters into *c (a round trip); keeps its KV bytes. */
static na_status_t rm_node_read(rm_t *p, int j, rm_counters_t *c)
{
    na_peer_t *peer = rm_call_peer(p, j);
    na_stats_view_t v;
    na_status_t st;

    if (peer == NULL)
        return NA_ERR_PEER;
    st = rm_call_end(p, j, na_sc_stats(peer, NA_SES_NO_LOSS, (int)p->cfg->transport.timeout_ms,
                                       &v));
    if (st == NA_OK) {
        rm_counters(&v, c);
        p->nodes[j].kv_dram = c->dram_used;
        p->nodes[j].kv_ssd = c->ssd_used;
        p->nodes[j].pfx_hit = c->pfx_hit;
        p->nodes[j].pfx_bytes = c->pfx_bytes;
        p->nodes[j].prefill_tok = c->prefill_tok;
    }
    return st;
}

/* Counters, plus (when nothing is in flight) each live node's SSD reads
 * (STATS) and the median HEARTBEAT round trip (RM_PINGS pings per node). */
static void rm_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    rm_t *p = (rm_t *)s;
    const int wait_ms = (int)p->cfg->transport.timeout_ms;
    double rtt[RM_MAX_NODES * RM_PINGS];
    int j, n_rtt = 0;

    *out = p->st;
    for (j = 0; j < p->n_nodes; j++) {
        rm_node_t *nd = &p->nodes[j];
        na_xp_stats_t xs;
        if (nd->peer == NULL)
            continue;
        na_xp_ep_stats(na_peer_ep(nd->peer), &xs);
        if (nd->alive && !rm_busy(p)) {
            rm_counters_t c;
            int k;
            if (rm_node_read(p, j, &c) == NA_OK) {
                out->ssd_bytes_read += c.ssd - (nd->base_ok ? nd->base_ssd : 0);
                out->csd_noop_slots += c.csd_noop;
                out->csd_launches += c.csd_launches;
                out->csd_p2p_bytes += c.csd_p2p;
                if (nd->base_ok && c.dec_ns >= nd->base_dec_ns) {
                    double dec = 1e-9 * (double)(c.dec_ns - nd->base_dec_ns);
                    double att = 1e-9 * (double)(c.comp_ns - nd->base_comp_ns);
                    if (att > dec)
                        att = dec;      /* slots of one node work in parallel */
                    out->node_s += dec;
                    out->node_attn_s += att;
                    out->node_disk_s += dec - att;
                }
            }
            for (k = 0; k < RM_PINGS && n_rtt < RM_MAX_NODES * RM_PINGS; k++) {
                na_peer_t *peer;
                double t0;
                usleep(RM_PING_GAP_US);
                t0 = na_now_s();
                peer = rm_call_peer(p, j);
                if (peer == NULL || rm_call_end(p, j, na_sc_ping(peer, wait_ms)) != NA_OK)
                    break;
                rtt[n_rtt++] = na_now_s() - t0;
            }
        }
        out->msgs_sent += xs.msgs_sent;
        out->msgs_recv += xs.msgs_recv;
        out->bytes_sent += xs.bytes_sent;
        out->bytes_recv += xs.bytes_recv;
    }
    if (n_rtt > 0) {
        qsort(rtt, (size_t)n_rtt, sizeof(double), rm_cmp_double);
        out->link_rtt_s = rtt[n_rtt / 2];
    }
}

static void rm_progress(na_asvc_t *s)
{
    (void)na_ses_poll(((rm_t *)s)->ses, 0);
}

static void rm_destroy(na_asvc_t *s)
{
    rm_t *p = (rm_t *)s;
    int j;

    if (p->ses != NULL)
        na_ses_on_tick(p->ses, NULL);   /* no new connects from here on */
    /* The caller may already have freed the entries of batches still in
     * flight (a run that failed mid-step): forget them, so answers that
     * arrive while we drain are dropped as stray instead of written. */
    rm_batches_forget(p);
    while (p->reqs != NULL)
        rm_release(s, p->reqs->id, 0);
    if (p->ses != NULL)
        (void)na_ses_poll(p->ses, 0);
    for (j = 0; j < p->n_nodes; j++) {
        na_xp_connect_cancel(p->nodes[j].pending);
        na_peer_close(p->nodes[j].peer, 0, "done");
    }
    na_sc_dir_destroy(p->dir);          /* its list only: it connected nothing */
    na_ses_destroy(p->ses);
    na_pfx_map_destroy(p->pmap);
    free(p);
}

static int rm_node_stats(na_asvc_t *s, na_asvc_node_stats_t *out, int cap)
{
    rm_t *p = (rm_t *)s;
    int j, n = 0;

    for (j = 0; j < p->n_nodes && n < cap; j++) {
        rm_node_t *nd = &p->nodes[j];
        na_asvc_node_stats_t *o = &out[n++];
        memset(o, 0, sizeof(*o));
        rm_copy(o->name, sizeof(o->name), nd->name);
        o->alive = nd->alive;
        o->attn_calls = nd->attn_calls;
        o->attn_rt_s = 1e-9 * (double)nd->attn_rt_ns;
        if (nd->peer != NULL) {
            na_xp_stats_t xs;
            na_xp_ep_stats(na_peer_ep(nd->peer), &xs);
            o->bytes_sent = xs.bytes_sent;
            o->bytes_recv = xs.bytes_recv;
        }
        if (nd->alive && !rm_busy(p)) {
            rm_counters_t c;
            (void)rm_node_read(p, j, &c);          /* on failure: the last values */
        }
        o->kv_dram_bytes = nd->kv_dram;
        o->kv_ssd_bytes = nd->kv_ssd;
        o->prefix_hit_tokens = nd->pfx_hit;
        o->prefill_tokens = nd->prefill_tok / (uint64_t)(s->mc.n_layers > 0 ? s->mc.n_layers : 1);
                                        /* node.prefill_tokens counts each layer's rows */
        o->prefix_cache_bytes = nd->pfx_bytes;
    }
    return n;
}

/* Open: placement sees the nodes that joined since the last tick (request
 * partition), then attn_remote_req.c opens. */
static na_status_t rm_open_op(na_asvc_t *s, uint64_t req, int max_tokens)
{
    if (!((rm_t *)s)->head_part)
        rm_retry_late((rm_t *)s);
    return rm_open(s, req, max_tokens);
}

static na_status_t rm_open_prefix_op(na_asvc_t *s, uint64_t req, int max_tokens,
                                     const na_asvc_prompt_t *pr, int *hit_p)
{
    if (!((rm_t *)s)->head_part)
        rm_retry_late((rm_t *)s);
    return rm_open_prefix(s, req, max_tokens, pr, hit_p);
}

static const na_asvc_ops_t na_remote_ops = {
    rm_destroy, rm_open_op, rm_prefill, rm_prefill_done, rm_submit, rm_poll, rm_release, rm_stats,
    rm_progress, rm_node_stats, rm_open_prefix_op, rm_fetch,
};

na_status_t na_asvc_remote_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  const char *name, na_asvc_t **s_p)
{
    na_dtype_t kv_dtype;
    rm_t *p;
    na_status_t st;
    int i, j, n_alive = 0;

    st = na_asvc_layout_check(cfg, "remote", RM_MAX_NODES, &kv_dtype);
    if (st != NA_OK)
        return st;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    na_asvc_base_init(&p->base, &na_remote_ops, "remote", mc);
    p->base.shares_cores = na_xp_cfg_shares_cores(cfg, name);
    p->cfg = cfg;
    p->head_part = cfg->parallel.partition == NA_CFG_PARTITION_HEAD;
    /* head partition: no prefix reuse (rm_open_prefix offers no prompt) */
    p->base.prefix_block_tokens = p->head_part || cfg->kv.prefix_cache_mb <= 0 ? 0 :
                                  (int)cfg->kv.block_tokens;
    p->kv_dtype = kv_dtype;
    p->pmap = na_pfx_map_create(1 << 16);   /* NULL: placement without the guess */
    st = na_ses_create_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, "remote", p, &p->ses);
    if (st != NA_OK) {
        na_pfx_map_destroy(p->pmap);
        free(p);
        return st;
    }
    na_ses_on_end(p->ses, rm_on_end);
    p->n_nodes = cfg->n_storage;
    for (j = 0; j < p->n_nodes; j++) {
        const na_cfg_node_t *nd = &cfg->nodes[cfg->n_compute + j];
        rm_node_t *rn = &p->nodes[j];
        rm_node_init(p, j, nd->name, nd->host, nd->port);
        /* head range: this node's global slots */
        rn->h0 = rn->h1 = -1;
        for (i = 0; i < nd->n_devices; i++) {
            int f, c;
            na_cfg_head_split(mc->n_kv_heads, cfg->n_slots, nd->first_slot + i, &f, &c);
            if (c == 0)
                continue;
            if (rn->h0 < 0)
                rn->h0 = f;
            rn->h1 = f + c;
        }
        if (rn->h0 < 0)
            rn->h0 = rn->h1 = 0;
        rm_connect_start(p, j);
    }
    /* every handshake at once, the nodes already connected served meanwhile
     * (their heartbeats): a silent host costs the connect bound, once */
    while (rm_connect_poll(p) > 0 || rm_joining(p) > 0)
        (void)na_ses_poll(p->ses, 5);
    for (j = 0; j < p->n_nodes; j++)
        n_alive += p->nodes[j].alive;
    if (n_alive == 0 || (p->head_part && n_alive < p->n_nodes)) {
        st = na_err(NA_ERR_PEER, "remote: %s", n_alive == 0 ? "no storage node of the layout "
                    "is reachable" : "head partition needs every storage node, one is "
                    "unreachable");
        rm_destroy(&p->base);
        return st;
    }
    if (!p->head_part && cfg->file != NULL &&
        na_sc_dir_create(p->ses, cfg->file, 0, &p->dir) != NA_OK) {
        na_log_warn("remote: %s: storage nodes that join it will not be seen: %s", cfg->file,
                    na_errmsg());
        p->dir = NULL;
    }
    p->next_layout_ns = na_xp_now_ns() + RM_LAYOUT_MS * 1000000ull;
    if (!p->head_part)
        rm_listen(p, name);
    na_ses_on_tick(p->ses, rm_tick);
    *s_p = &p->base;
    return NA_OK;
}
