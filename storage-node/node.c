/* storage-node/node.c — the storage node: setup from the layout, peers,
 * request table, heartbeats and the receive loop. Message handlers are in
 * storage-node/node_dispatch.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/model.h"
#include "rdma/xp_cfg.h"
#include "storage-node/node_internal.h"

#define NA_NODE_DEFAULT_PEERS 64
#define NA_NODE_EXTRA_DRAM_MB 256
#define NA_NODE_EXTRA_SSD_MB  1024
#define NA_NODE_REAP_WAIT_US  2000    /* idle loop: wait this long for a batch, then recv again */

/* ---- request table ------------------------------------------------------- */

static unsigned na_node_bucket(uint32_t peer_id, uint64_t wire_id)
{
    uint64_t h = (wire_id ^ ((uint64_t)peer_id << 40)) * 0x9e3779b97f4a7c15ull;
    return (unsigned)(h >> 54) & (NA_NODE_REQ_BUCKETS - 1);
}

na_node_req_t *na_node_req_find(na_node_t *n, uint32_t peer_id, uint64_t wire_id)
{
    na_node_req_t *r;
    for (r = n->req_hash[na_node_bucket(peer_id, wire_id)]; r != NULL; r = r->hnext)
        if (r->peer_id == peer_id && r->wire_id == wire_id)
            return r;
    return NULL;
}

void na_node_req_insert(na_node_t *n, na_node_req_t *r)
{
    unsigned b = na_node_bucket(r->peer_id, r->wire_id);
    r->hnext = n->req_hash[b];
    n->req_hash[b] = r;
    n->n_requests++;
}

na_status_t na_node_req_free(na_node_t *n, na_node_req_t *r)
{
    na_node_req_t **pp = &n->req_hash[na_node_bucket(r->peer_id, r->wire_id)];
    na_node_peer_t *p;
    na_status_t st = na_slotset_release(n->ss, &r->sr);

    while (*pp != NULL && *pp != r)
        pp = &(*pp)->hnext;
    if (*pp == r)
        *pp = r->hnext;
    for (p = n->peers; p != NULL; p = p->next)
        if (p->id == r->peer_id && p->n_requests > 0)
            p->n_requests--;
    n->n_requests--;
    free(r);
    return st;
}

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

na_status_t na_node_shape_init(na_node_t *n, int n_layers, int n_heads, int n_kv_heads,
                               int head_dim)
{
    na_status_t st;
    int i;

    n->spec.common.n_layers = n_layers;
    n->spec.common.n_heads = n_heads;
    n->spec.common.n_kv_heads = n_kv_heads;
    n->spec.common.head_dim = head_dim;
    n->common = n->spec.common;
    st = na_slotset_create(&n->spec, &n->ss);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n->n_slots; i++)
        n->slots[i] = na_slotset_slot(n->ss, i);
    n->have_shape = 1;
    na_log_info("node %s: %d slot(s) for %d layers, %d/%d heads, head_dim %d, kv %s",
                n->name, n->n_slots, n_layers, n_heads, n_kv_heads, head_dim,
                na_dtype_name(n->common.kv_dtype));
    return NA_OK;
}

/* mkdir -p of an extra node's KV directory (layout nodes' are made at load). */
static na_status_t na_node_mkdirs(const char *path)
{
    char buf[4096];
    size_t i, len = strlen(path);

    if (len == 0 || len >= sizeof(buf))
        return na_err(NA_ERR_INVALID, "node: KV directory '%s' is not usable", path);
    memcpy(buf, path, len + 1);
    for (i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return na_err(NA_ERR_IO, "node: mkdir(%s): %s", buf, strerror(errno));
        buf[i] = path[i];
    }
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
    if (cn == NULL) {
        st = na_node_mkdirs(o->kv_dir);
        if (st != NA_OK)
            return st;
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

/* Read the model's shape (header only matters; the file is mapped, not copied). */
static na_status_t na_node_model_shape(na_node_t *n, const char *path)
{
    na_model_t *m;
    na_status_t st = na_model_open(path, &m);
    if (st != NA_OK)
        return na_err_prefix(st, "node %s: model: ", n->name);
    st = na_node_shape_init(n, m->cfg.n_layers, m->cfg.n_heads, m->cfg.n_kv_heads,
                            m->cfg.head_dim);
    na_model_destroy(m);
    return st;
}

static na_status_t na_node_xp_init(na_node_t *n)
{
    const na_cfg_t *cfg = n->cfg;
    na_xp_opts_t xo;

    /* A restarted node must get its port back while connections the previous
     * run closed are in TIME_WAIT (SO_REUSEADDR; a live listener still makes
     * the port "taken"). UCX reads this when the context is created. */
    (void)setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
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
    st = na_xp_listen(n->xp, n->host, n->port, &n->port);
    if (st != NA_OK)
        goto err_destroy_xp;
    *node_p = n;
    return NA_OK;

err_destroy_xp:
    na_xp_destroy(n->xp);
    n->xp = NULL;
err_free_node:
    na_node_destroy(n);
    return st;
}

int na_node_port(const na_node_t *n) { return n->port; }

/* ---- peers ---------------------------------------------------------------- */

static void na_node_peer_drop(na_node_t *n, na_node_peer_t *p, int lost, const char *why)
{
    na_node_peer_t **pp = &n->peers;
    char whybuf[320];
    int freed;

    if (why != NULL) {
        snprintf(whybuf, sizeof(whybuf), "%s", why);   /* why may be na_errmsg() */
        why = whybuf;
    }
    (void)na_node_decode_finish(n, p, 0);    /* engines let go of its requests */
    freed = na_node_free_peer_requests(n, p->id);

    if (lost) {
        n->lost++;
        na_log_warn("node %s: peer %s lost (%s); freed its %d request(s)", n->name,
                    p->name, why, freed);
    } else if (why != NULL) {
        n->dropped++;
        na_log_warn("node %s: dropping peer %s: %s; freed its %d request(s)", n->name,
                    p->name, why, freed);
    } else {
        na_log_info("node %s: peer %s left; freed its %d request(s)", n->name, p->name, freed);
    }
    while (*pp != NULL && *pp != p)
        pp = &(*pp)->next;
    if (*pp == p)
        *pp = p->next;
    n->n_peers--;
    na_xp_ep_close(p->ep);
    free(p);
}

static na_node_peer_t *na_node_peer_of(na_node_t *n, const na_xp_ep_t *ep)
{
    na_node_peer_t *p;
    for (p = n->peers; p != NULL; p = p->next)
        if (p->ep == ep)
            return p;
    return NULL;
}

static void na_node_accept(na_node_t *n, na_xp_ep_t *ep)
{
    na_node_peer_t *p;

    if (n->n_peers >= n->max_peers) {
        na_log_warn("node %s: refusing %s: %d peers already", n->name, na_xp_ep_name(ep),
                    n->n_peers);
        na_xp_ep_close(ep);
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        na_log_error("node %s: out of memory for peer %s", n->name, na_xp_ep_name(ep));
        na_xp_ep_close(ep);
        return;
    }
    p->ep = ep;
    p->id = n->next_peer_id++;
    snprintf(p->name, sizeof(p->name), "%s", na_xp_ep_name(ep));
    p->since_ns = na_xp_now_ns();
    p->last_sent_ns = p->since_ns;
    p->next = n->peers;
    n->peers = p;
    n->n_peers++;
    na_log_info("node %s: peer %s (%s, %s) connected", n->name, p->name,
                na_wire_role_name((unsigned)na_xp_ep_peer_role(ep)), na_xp_ep_addr(ep));
}

/* ---- sending --------------------------------------------------------------- */

na_status_t na_node_send(na_node_t *n, na_node_peer_t *p, na_wire_msg_t *m)
{
    size_t size, len;
    uint8_t *buf;
    na_status_t st;

    m->seq = ++p->seq;
    m->time_ns = na_xp_now_ns();
    st = na_wire_msg_size(m, &size);
    if (st != NA_OK)
        return na_err_prefix(NA_ERR_INTERNAL, "node %s: encoding %s: ", n->name,
                             na_wire_type_name(m->type));
    buf = calloc(1, size);
    if (buf == NULL)
        return na_err(NA_ERR_NOMEM, "node %s: out of memory for a %zu-byte message", n->name, size);
    st = na_wire_encode(m, buf, size, &len);
    if (st == NA_OK)
        st = na_xp_send(p->ep, buf, NA_WIRE_HDR_SIZE, buf + NA_WIRE_HDR_SIZE,
                        len - NA_WIRE_HDR_SIZE);
    free(buf);
    p->last_sent_ns = na_xp_now_ns();
    return st;
}

/* Copy text as printable ASCII (the wire's rule), truncated. */
static void na_node_text(char *dst, size_t cap, const char *src)
{
    size_t i;
    for (i = 0; src != NULL && src[i] != '\0' && i + 1 < cap && i < NA_WIRE_TEXT_MAX; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
    dst[i] = '\0';
}

na_status_t na_node_send_error(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                               uint64_t req, na_status_t st, const char *text)
{
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_ERROR;
    m.u.error.request_id = req;
    m.u.error.batch_id = h ? h->batch_id : 0;
    m.u.error.layer = h ? h->layer : 0;
    m.u.error.status = st < 0 ? (int32_t)st : (int32_t)NA_ERR_INTERNAL;
    m.u.error.about_type = h ? h->type : 0;
    m.u.error.about_seq = h ? h->seq : 0;
    na_node_text(m.u.error.text, sizeof(m.u.error.text), text);
    n->errors_sent++;
    na_log_info("node %s: ERROR to %s: request %llu: %s", n->name, p->name,
                (unsigned long long)req, m.u.error.text);
    return na_node_send(n, p, &m);
}

static void na_node_send_bye(na_node_t *n, na_node_peer_t *p, na_wire_refuse_t reason,
                             const char *text)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_BYE;
    m.u.bye.reason = reason;
    na_node_text(m.u.bye.text, sizeof(m.u.bye.text), text);
    (void)na_node_send(n, p, &m);
}

/* ---- loop ----------------------------------------------------------------- */

/* Heartbeats out; silent peers dropped. */
static void na_node_heartbeats(na_node_t *n)
{
    uint64_t now;
    na_node_peer_t *p, *next;

    (void)na_xp_progress(n->xp);     /* arrivals update the peers' last_recv_ns */
    now = na_xp_now_ns();
    /* If this loop itself was stalled (a long prefill or attention batch), peers
     * could not answer heartbeats we did not send: restart their clocks. */
    if (n->last_tick_ns != 0 && now - n->last_tick_ns > (uint64_t)n->heartbeat_ms * 1000000ull)
        n->stall_end_ns = now;
    n->last_tick_ns = now;

    for (p = n->peers; p != NULL; p = next) {
        na_xp_stats_t xs;
        uint64_t last;
        next = p->next;
        na_xp_ep_stats(p->ep, &xs);
        last = xs.last_recv_ns > p->since_ns ? xs.last_recv_ns : p->since_ns;
        if (n->stall_end_ns > last)
            last = n->stall_end_ns;
        if (now > last && now - last > (uint64_t)n->peer_timeout_ms * 1000000ull) {
            char why[96];
            snprintf(why, sizeof(why), "silent for %llu ms > peer_timeout_ms %u",
                     (unsigned long long)((now - last) / 1000000ull), n->peer_timeout_ms);
            na_node_peer_drop(n, p, 1, why);
            continue;
        }
        if (now - p->last_sent_ns >= (uint64_t)n->heartbeat_ms * 1000000ull) {
            na_wire_msg_t m;
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_HEARTBEAT;
            m.u.heartbeat.send_ns = now;
            if (na_node_send(n, p, &m) != NA_OK)
                na_node_peer_drop(n, p, 1, na_errmsg());
        }
    }
}

/* One message from the transport. */
static void na_node_handle(na_node_t *n, na_xp_msg_t *msg)
{
    na_node_peer_t *p = na_node_peer_of(n, msg->ep);
    na_wire_hdr_t h;
    na_wire_msg_t m;
    na_status_t st;

    if (msg->kind == NA_XP_EV_ACCEPTED) {
        na_node_accept(n, msg->ep);
        return;
    }
    if (p == NULL)
        return;                       /* a peer we dropped already: late message */
    if (msg->kind == NA_XP_EV_LOST) {
        na_node_peer_drop(n, p, 1, na_status_string(msg->status));
        return;
    }
    n->msgs++;
    st = na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h);
    if (st == NA_OK && h.hdr_len != msg->hdr_len)
        st = na_err(NA_ERR_PROTO, "wire: header says %u header bytes, %zu arrived",
                    (unsigned)h.hdr_len, msg->hdr_len);
    if (st == NA_OK && h.payload_len != msg->len)
        st = na_err(NA_ERR_PROTO, "wire %s: header says %llu payload bytes, %zu arrived",
                    na_wire_type_name(h.type), (unsigned long long)h.payload_len, msg->len);
    if (st == NA_OK)
        st = na_wire_decode(&h, msg->data, msg->len, &m);
    if (st == NA_OK)
        st = na_node_dispatch(n, p, &h, &m);
    if (st == NA_ERR_CANCELED) {
        na_node_peer_drop(n, p, 0, NULL);       /* BYE */
    } else if (st == NA_ERR_PROTO || st == NA_ERR_VERSION) {
        char why[300];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        na_node_send_bye(n, p, NA_WIRE_REFUSE_PROTO, why);
        na_node_peer_drop(n, p, 0, why);
    } else if (st == NA_ERR_PEER || st == NA_ERR_TIMEOUT || st == NA_ERR_TRANSPORT) {
        na_node_peer_drop(n, p, 1, na_errmsg());
    } else if (st != NA_OK) {
        /* a failure the handler could not answer itself (out of memory ...):
         * tell the peer about that message, keep the connection */
        char why[NA_WIRE_TEXT_MAX + 1];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        if (na_node_send_error(n, p, &h, h.request_id, st, why) != NA_OK)
            na_node_peer_drop(n, p, 1, na_errmsg());
    }
}

na_status_t na_node_run(na_node_t *n, volatile sig_atomic_t *stop)
{
    uint64_t next_tick = 0;
    int wait_ms = (int)(n->heartbeat_ms / 2), computing = 0;

    if (wait_ms > 100)
        wait_ms = 100;
    if (wait_ms < 1)
        wait_ms = 1;
    printf("READY %s %s:%d\n", n->name, n->host, n->port);
    fflush(stdout);
    na_log_info("node %s: serving on %s:%d (heartbeat %u ms, peer timeout %u ms)", n->name,
                n->host, n->port, n->heartbeat_ms, n->peer_timeout_ms);
    while (!*stop) {
        na_xp_msg_t *msg;
        uint64_t now;
        /* batches computing: do not block in recv, reap them instead */
        na_status_t st = na_xp_recv(n->xp, computing ? 0 : wait_ms, &msg);

        if (st == NA_OK) {
            na_node_handle(n, msg);
            na_xp_msg_release(n->xp, msg);
        } else if (st != NA_ERR_TIMEOUT) {
            return st;
        }
        computing = na_node_decode_reap(n, st == NA_ERR_TIMEOUT ? NA_NODE_REAP_WAIT_US : 0);
        if (n->ss != NULL && na_slotset_poll(n->ss) != NA_OK)
            na_log_warn("node %s: slots: %s", n->name, na_errmsg());
        now = na_xp_now_ns();
        if (now >= next_tick) {
            na_node_heartbeats(n);
            next_tick = now + (uint64_t)wait_ms * 1000000ull;
        }
    }
    na_log_info("node %s: stopping (%d peer(s), %llu request(s) open)", n->name, n->n_peers,
                (unsigned long long)n->n_requests);
    while (n->peers != NULL) {
        na_node_peer_t *p = n->peers;
        na_node_send_bye(n, p, NA_WIRE_REFUSE_SHUTDOWN, "storage node stopping");
        na_node_peer_drop(n, p, 0, NULL);
    }
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
        na_xp_ep_close(p->ep);
        free(p);
    }
    na_xp_destroy(n->xp);
    na_slotset_destroy(n->ss);
    free(n->slots);
    free(n);
}
