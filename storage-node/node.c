/* storage-node/node.c — the storage node: setup from the layout, peers,
 * request table and the loop: a protocol session (rdma/session.h) owns the
 * receiving, heartbeats and the silence timer; the node's message handlers are
 * in storage-node/node_dispatch.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/model.h"
#include "rdma/xp_cfg.h"
#include "storage-node/node_internal.h"

#define NA_NODE_DEFAULT_PEERS 64
#define NA_NODE_DEFAULT_BATCHES 256   /* a compute node has at most batches_in_flight */
#define NA_NODE_EXTRA_DRAM_MB 256
#define NA_NODE_EXTRA_SSD_MB  1024
#define NA_NODE_REAP_WAIT_US  2000    /* idle loop: wait this long for a batch, then recv again */

static na_status_t na_node_ses_init(na_node_t *n);

/* ---- request table ------------------------------------------------------- */

/* Free every request owned by peer_id. Returns how many. */
static int na_node_free_peer_requests(na_node_t *n, uint32_t peer_id)
{
    int b, count = 0;
    for (b = 0; b < NA_NODE_REQ_BUCKETS; b++) {
        na_node_req_t *r = n->req_hash[b], *next;
        for (; r != NULL; r = next) {
            next = r->hnext;
            if (r->peer_id != peer_id)
                continue;
            if (na_node_req_free(n, r) != NA_OK)
                na_log_warn("node %s: freeing request: %s", n->name, na_errmsg());
            count++;
        }
    }
    return count;
}

/* ---- slots --------------------------------------------------------------- */

static na_status_t na_node_shape_init(na_node_t *n, int n_layers, int n_heads, int n_kv_heads,
                               int head_dim)
{
    na_status_t st;
    int i;

    n->spec.common.kv.n_layers = n_layers;
    n->spec.common.n_heads = n_heads;
    n->spec.common.n_kv_heads = n_kv_heads;
    n->spec.common.kv.head_dim = head_dim;
    /* checked at start: a csd slot whose XRT device cannot be used refuses
     * the node, rather than failing its requests mid-run after their first
     * tokens */
    n->spec.common.devices_required = 1;
    n->common = n->spec.common;
    st = na_slotset_create(&n->spec, &n->ss);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n->n_slots; i++)
        n->slots[i] = na_slotset_slot(n->ss, i);
    n->have_shape = 1;
    na_log_info("node %s: %d slot(s) for %d layers, %d/%d heads, head_dim %d, kv %s",
                n->name, n->n_slots, n_layers, n_heads, n_kv_heads, head_dim,
                na_dtype_name(n->common.kv.kv_dtype));
    return NA_OK;
}

/* Slots of the node from the layout (storage-node/slotset.c): its devices,
 * or for an extra node one slot of its own; --threads raises every slot's. */
static na_status_t na_node_devs_init(na_node_t *n, const na_node_opts_t *o,
                                     const na_cfg_node_t *cn)
{
    na_slotset_spec_t *sp = &n->spec;
    na_status_t st;
    int i;

    st = na_slotset_spec_layout(n->cfg, cn, sp);
    if (st != NA_OK)
        return na_err_prefix(st, "node %s: ", n->name);
    if (cn == NULL) {             /* the slot creates its directory (storage-node/mkdir.c) */
        sp->n_devs = 1;
        sp->devs[0].dir = o->kv_dir;
        sp->devs[0].engine = "cpu";
        sp->devs[0].dram_bytes = (uint64_t)(o->dram_mb > 0 ? o->dram_mb : NA_NODE_EXTRA_DRAM_MB) << 20;
        sp->devs[0].ssd_bytes = (uint64_t)(o->ssd_mb > 0 ? o->ssd_mb : NA_NODE_EXTRA_SSD_MB) << 20;
    }
    n->n_slots = sp->n_devs;
    if (n->n_slots < 1)
        return na_err(NA_ERR_RANGE, "node %s: no device slots", n->name);
    n->slots = calloc((size_t)n->n_slots, sizeof(*n->slots));
    if (n->slots == NULL)
        return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
    sp->common.n_threads = o->threads > 0 ? o->threads : 1;
    for (i = 0; i < n->n_slots; i++)
        if (sp->devs[i].threads > sp->common.n_threads)
            sp->common.n_threads = sp->devs[i].threads;
    n->common = sp->common;
    return NA_OK;
}

/* Read the model's shape from its header (the weights are neither mapped nor read). */
static na_status_t na_node_model_shape(na_node_t *n, const char *path)
{
    na_model_config_t c;
    na_status_t st = na_model_read_config(path, &c);
    if (st != NA_OK)
        return na_err_prefix(st, "node %s: model: ", n->name);
    return na_node_shape_init(n, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim);
}

static na_status_t na_node_xp_init(na_node_t *n)
{
    const na_cfg_t *cfg = n->cfg;
    na_xp_opts_t xo;

    /* max_msg: one PREFILL_KV layer chunk; bounds a hostile peer */
    na_xp_opts_from_cfg(cfg, n->name, NA_WIRE_ROLE_STORAGE, (size_t)256 << 20, &xo);
    xo.heartbeat_ms = n->heartbeat_ms;
    return na_xp_create(&xo, &n->xp);
}

na_status_t na_node_create(const na_node_opts_t *o, na_node_t **node_p)
{
    const na_cfg_node_t *cn;
    const char *model;
    na_node_t *n;
    na_status_t st;

    if (o->cfg == NULL || o->name == NULL || o->name[0] == '\0' ||
        strlen(o->name) >= NA_XP_NAME_MAX)
        return na_err(NA_ERR_INVALID, "node: a name of 1..%d characters is required",
                      NA_XP_NAME_MAX - 1);
    cn = na_cfg_find_node(o->cfg, o->name);
    if (cn != NULL && cn->role != NA_CFG_ROLE_STORAGE)
        return na_err(NA_ERR_INVALID, "node %s: is a %s node in %s; `nearattn node` runs "
                      "storage nodes", o->name, na_cfg_role_name(cn->role), o->cfg->file);
    if (cn == NULL && (o->kv_dir == NULL || o->listen_host == NULL || o->listen_port < 0))
        return na_err(NA_ERR_NOT_FOUND, "node %s: not in %s; an extra storage node needs "
                      "--listen HOST:PORT and --kv-dir DIR", o->name, o->cfg->file);
    n = calloc(1, sizeof(*n));
    if (n == NULL)
        return na_err(NA_ERR_NOMEM, "node: out of memory");
    n->cfg = o->cfg;
    snprintf(n->name, sizeof(n->name), "%s", o->name);
    snprintf(n->host, sizeof(n->host), "%s", o->listen_host ? o->listen_host : cn->host);
    n->port = o->listen_port >= 0 ? o->listen_port : (int)cn->port;
    n->max_peers = o->max_peers > 0 ? o->max_peers : NA_NODE_DEFAULT_PEERS;
    n->max_run = o->max_batches > 0 ? o->max_batches : NA_NODE_DEFAULT_BATCHES;
    n->heartbeat_ms = (unsigned)o->cfg->transport.heartbeat_ms;
    n->peer_timeout_ms = (unsigned)o->cfg->transport.peer_timeout_ms;
    n->next_peer_id = 1;
    n->next_sid = 1;

    st = na_node_devs_init(n, o, cn);
    if (st != NA_OK)
        goto err_free_node;
    model = o->model_path ? o->model_path : o->cfg->model.path;
    if (o->shape[0] > 0) {
        st = na_node_shape_init(n, o->shape[0], o->shape[1], o->shape[2], o->shape[3]);
    } else if (model != NULL) {
        st = na_node_model_shape(n, model);
    } else {
        st = na_err(NA_ERR_INVALID, "node %s: %s has no model.path; give --model FILE or "
                    "--shape LAYERS:HEADS:KV_HEADS:HEAD_DIM (it sizes the KV slots)",
                    n->name, o->cfg->file);
    }
    if (st != NA_OK)
        goto err_free_node;
    st = na_node_xp_init(n);
    if (st != NA_OK)
        goto err_free_node;
    st = na_node_ses_init(n);
    if (st == NA_OK)
        st = na_xp_listen(n->xp, n->host, n->port, &n->port);
    if (st == NA_OK && cn == NULL)     /* not in the layout: announce it (node_join.c) */
        st = na_node_join_init(n);
    if (st != NA_OK)
        goto err_destroy_xp;
    *node_p = n;
    return NA_OK;

err_destroy_xp:
    na_ses_destroy(n->ses);
    n->ses = NULL;
    na_xp_destroy(n->xp);
    n->xp = NULL;
err_free_node:
    na_node_destroy(n);
    return st;
}

int na_node_port(const na_node_t *n) { return n->port; }

/* ---- peers (handlers of the session, rdma/session.h) ------------------------ */

static void na_node_on_accept(void *ctx, na_peer_t *sp, na_ses_end_t how, const char *why)
{
    (void)how;
    (void)why;
    (void)na_node_peer_add(ctx, sp);
}

/* Forget p: its decode batch, its requests, the connection. */
static void na_node_peer_free(na_node_t *n, na_node_peer_t *p, int reason, const char *bye)
{
    na_node_peer_t **pp = &n->peers;
    int freed;

    (void)na_node_decode_finish(n, p, 0);    /* engines let go of its requests */
    freed = na_node_free_peer_requests(n, p->id);
    na_log_info("node %s: peer %s: freed its %d request(s)", n->name, p->name, freed);
    while (*pp != NULL && *pp != p)
        pp = &(*pp)->next;
    if (*pp == p)
        *pp = p->next;
    n->n_peers--;
    na_node_join_ended(n, p);
    na_peer_close(p->sp, reason, bye);
    free(p);
}

static void na_node_on_end(void *ctx, na_peer_t *sp, na_ses_end_t how, const char *why)
{
    na_node_t *n = ctx;
    na_node_peer_t *p = na_peer_user(sp);

    (void)why;
    if (p == NULL)
        return;
    if (how == NA_SES_LOST)
        n->stat[NA_STAT_PEERS_LOST]++;
    else if (how == NA_SES_DROPPED)
        n->stat[NA_STAT_PEERS_DROPPED]++;
    na_node_peer_free(n, p, 0, NULL);
}

/* ---- loop ----------------------------------------------------------------- */

/* Once per session poll round: answer the attention batches that completed
 * (the loop never blocks on one) and the slots' background work. */
static void na_node_tick(void *ctx)
{
    na_node_t *n = ctx;

    (void)na_node_decode_reap(n, 0);
    if (n->n_doors > 0)              /* an extra node announcing itself (node_join.c) */
        na_node_join_poll(n);
    if (n->ss != NULL && na_slotset_poll(n->ss) != NA_OK)
        na_log_warn("node %s: slots: %s", n->name, na_errmsg());
}

/* The session the node serves its peers with. */
static na_status_t na_node_ses_init(na_node_t *n)
{
    na_status_t st;
    na_ses_opts_t so;
    char who[NA_XP_NAME_MAX + 8];

    memset(&so, 0, sizeof(so));
    snprintf(who, sizeof(who), "node %s", n->name);
    so.who = who;
    so.heartbeat_ms = n->heartbeat_ms;
    so.peer_timeout_ms = n->peer_timeout_ms;
    so.max_peers = n->max_peers;
    st = na_ses_create(n->xp, &so, n, &n->ses);
    if (st != NA_OK)                       /* memory, or a malformed NA_FAULTS */
        return na_err_prefix(st, "node %s: ", n->name);
    na_ses_on_accept(n->ses, na_node_on_accept);
    na_ses_on_end(n->ses, na_node_on_end);
    na_ses_on_tick(n->ses, na_node_tick);
    na_node_handlers(n->ses);
    return NA_OK;
}

na_status_t na_node_run(na_node_t *n, volatile sig_atomic_t *stop)
{
    int wait_ms = (int)(n->heartbeat_ms / 2);
    na_node_peer_t *p;

    if (wait_ms > 100)
        wait_ms = 100;
    if (wait_ms < 1)
        wait_ms = 1;
    printf("READY %s %s:%d\n", n->name, n->host, n->port);
    fflush(stdout);
    na_log_info("node %s: serving on %s:%d (heartbeat %u ms, peer timeout %u ms)", n->name,
                n->host, n->port, n->heartbeat_ms, n->peer_timeout_ms);
    while (!*stop) {
        /* batches computing: poll the peers without blocking, then wait a
         * little on the engines (na_node_tick answers what completed) */
        na_status_t st = na_ses_poll(n->ses, n->decode_computing > 0 ? 0
                                             : n->n_doors > 0 && na_node_join_pending(n) ? 2
                                             : wait_ms);

        if (st != NA_OK && st != NA_ERR_TIMEOUT)
            return st;
        if (st == NA_ERR_TIMEOUT && n->decode_computing > 0)
            (void)na_node_decode_reap(n, NA_NODE_REAP_WAIT_US);
    }
    {
        na_slotset_prefix_stats_t ps;
        na_slotset_prefix_stats(n->ss, &ps);
        na_log_info("node %s: stopping (%d peer(s), %llu request(s) open; served %llu decode "
                    "entries, %llu prefill tokens, %llu prompts flushed at their end; prefix "
                    "cache: %llu tokens hit, %llu blocks kept, %llu evicted, %llu key "
                    "collisions)", n->name, n->n_peers,
                    (unsigned long long)n->stat[NA_STAT_REQUESTS],
                    (unsigned long long)n->stat[NA_STAT_DECODE_ENTRIES],
                    (unsigned long long)n->stat[NA_STAT_PREFILL_TOKENS],
                    (unsigned long long)n->prompts_flushed,
                    (unsigned long long)ps.hit_tokens,
                    (unsigned long long)ps.cache.entries, (unsigned long long)ps.cache.evicted,
                    (unsigned long long)ps.cache.collisions);
    }
    /* drain: the batches computing are answered, then BYE hands the
     * requests back (the compute nodes re-place them elsewhere) */
    for (p = n->peers; p != NULL; p = p->next)
        (void)na_node_decode_finish(n, p, 1);
    while (n->peers != NULL)
        na_node_peer_free(n, n->peers, NA_WIRE_REFUSE_SHUTDOWN, "storage node stopping");
    return NA_OK;
}

void na_node_destroy(na_node_t *n)
{
    if (n == NULL)
        return;
    while (n->peers != NULL) {
        na_node_peer_t *p = n->peers;
        n->peers = p->next;
        (void)na_node_decode_finish(n, p, 0);
        (void)na_node_free_peer_requests(n, p->id);
        free(p);
    }
    na_node_decode_destroy(n);
    na_node_join_destroy(n);
    na_ses_destroy(n->ses);
    na_xp_destroy(n->xp);
    na_slotset_destroy(n->ss);
    free(n->slots);
    free(n);
}
