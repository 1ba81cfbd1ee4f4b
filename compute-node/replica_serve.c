/* compute-node/replica_serve.c — a compute replica's service loop for
 * rotational pipelining (compute-node/replica.h): it runs the slices replica
 * 0 sends it (BATCH_CTX), sends the attention of those slices to its own
 * storage-node connections (compute-node/attn_remote.c), and sends the batch
 * context back when the attention is in. Requests are opened and their
 * prompt KV forwarded on replica 0's behalf (REQ_OPEN / PREFILL_KV /
 * REQ_RELEASE). One thread; time with nothing to do is counted as idle and
 * logged at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_service.h"
#include "compute-node/engine.h"
#include "compute-node/replica.h"
#include "rdma/session.h"

#define RS_BATCHES 64           /* batch ids replica 0 may use (na_asvc_submit's limit) */
#define RS_OPEN_MAX 4096        /* requests open at once */
#define RS_WAIT_NODES_S 30      /* how long a replica waits for the storage nodes to listen */

/* One batch whose slice runs here. */
typedef struct {
    int                busy;       /* its attention is in flight */
    uint32_t           slice;
    uint64_t           step;
    int                n_rows, cap;
    na_acts_t         *acts;
    int               *tokens;     /* [cap] */
    int               *pos;        /* [cap] */
    na_step_seg_t     *seg;        /* [cap] */
    na_wire_ctx_row_t *rows;       /* [cap] */
    na_asvc_entry_t   *ent;        /* [cap] */
    int               *ent_row;    /* [cap] */
    int                n_ent;
} rs_batch_t;

typedef struct {
    const na_cfg_t *cfg;
    na_model_t     *model;
    na_engine_t    *e;
    na_asvc_t      *svc;
    na_ses_t       *ses;           /* the compute link (rdma/session.h) */
    na_peer_t      *boss;          /* replica 0, or NULL */
    rs_batch_t      b[RS_BATCHES];
    uint64_t        open[RS_OPEN_MAX];
    int             n_open;
    double          idle_s, busy_s;
    long            slices;
} rs_t;

/* Answer message h of replica 0 with ACK (st == NA_OK) or ERROR (na_errmsg()). */
static void rs_answer(rs_t *s, const na_wire_hdr_t *h, uint64_t id, na_status_t st)
{
    if (s->boss != NULL && na_peer_answer(s->boss, h, id, st, NULL) != NA_OK)
        na_log_warn("replica: answer to %s: %s", na_peer_name(s->boss), na_errmsg());
}

static void rs_forget(rs_t *s, uint64_t id)
{
    int i;
    for (i = 0; i < s->n_open; i++)
        if (s->open[i] == id) {
            s->open[i] = s->open[--s->n_open];
            return;
        }
}

/* Replica 0 went away: release what it opened here, forget its batches. */
static void rs_drop_boss(rs_t *s)
{
    int i;

    for (i = 0; i < s->n_open; i++)
        na_asvc_release(s->svc, s->open[i], (int)NA_ERR_PEER);
    s->n_open = 0;
    for (i = 0; i < RS_BATCHES; i++)
        s->b[i].busy = 0;
    s->boss = NULL;
}

/* Grow batch b's row arrays to n rows. */
static na_status_t rs_reserve(rs_t *s, rs_batch_t *b, int n)
{
    na_status_t st;

    if (b->acts == NULL) {
        st = na_acts_create(s->e, n, n, &b->acts);
        if (st != NA_OK)
            return st;
    }
    st = na_acts_reserve(b->acts, s->e, n, n);
    if (st != NA_OK)
        return st;
    if (n > b->cap) {
        free(b->tokens); free(b->pos); free(b->seg); free(b->rows); free(b->ent);
        free(b->ent_row);
        b->tokens = calloc((size_t)n, sizeof(int));
        b->pos = calloc((size_t)n, sizeof(int));
        b->seg = calloc((size_t)n, sizeof(*b->seg));
        b->rows = calloc((size_t)n, sizeof(*b->rows));
        b->ent = calloc((size_t)n, sizeof(*b->ent));
        b->ent_row = calloc((size_t)n, sizeof(int));
        b->cap = n;
        if (!b->tokens || !b->pos || !b->seg || !b->rows || !b->ent || !b->ent_row) {
            b->cap = 0;
            return na_err(NA_ERR_NOMEM, "replica: out of memory for %d rows", n);
        }
    }
    return NA_OK;
}

/* Send batch id's context (slice b->slice + 1) back to replica 0. */
static void rs_send_back(rs_t *s, int id, int with_att)
{
    rs_batch_t *b = &s->b[id];
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_BATCH_CTX;
    m.u.ctx.batch_id = (uint32_t)id;
    m.u.ctx.slice = b->slice + 1;
    m.u.ctx.n_rows = (uint32_t)b->n_rows;
    m.u.ctx.dim = (uint32_t)s->e->cfg.dim;
    m.u.ctx.att_dim = with_att ? (uint32_t)s->e->q_dim : 0;
    m.u.ctx.dtype = NA_DTYPE_F32;
    m.u.ctx.step = b->step;
    m.u.ctx.rows = b->rows;
    m.u.ctx.x = b->acts->x;
    m.u.ctx.att = with_att ? b->acts->att : NULL;
    b->busy = 0;
    if (s->boss == NULL || na_peer_send(s->boss, &m, NULL) != NA_OK)
        na_log_warn("replica: cannot send batch %d back: %s", id, na_errmsg());
}

/* Run slice c->slice of batch c->batch_id: embed or post_attn, then pre_attn
 * and the attention of that layer (or, for the last slice, send x back). */
static na_status_t rs_slice(rs_t *s, const na_wire_ctx_t *c)
{
    na_engine_t *e = s->e;
    const int L = e->cfg.n_layers;
    const size_t qd = (size_t)e->q_dim, kd = (size_t)e->kv_dim, dim = (size_t)e->cfg.dim;
    rs_batch_t *b;
    na_step_t step;
    na_status_t st;
    uint32_t i;

    if (c->batch_id >= RS_BATCHES || c->slice > (uint32_t)L || c->dim != (uint32_t)dim ||
        c->dtype != NA_DTYPE_F32 || (c->slice > 0 && c->att_dim != (uint32_t)qd))
        return na_err(NA_ERR_PROTO, "replica: BATCH_CTX batch %u slice %u of shape dim %u "
                      "att %u does not fit this model", c->batch_id, c->slice, c->dim,
                      c->att_dim);
    b = &s->b[c->batch_id];
    if (b->busy)
        return na_err(NA_ERR_PROTO, "replica: batch %u is already running here", c->batch_id);
    st = rs_reserve(s, b, (int)c->n_rows);
    if (st != NA_OK)
        return st;
    b->slice = c->slice;
    b->step = c->step;
    b->n_rows = (int)c->n_rows;
    for (i = 0; i < c->n_rows; i++) {
        (void)na_wire_ctx_get(c, i, &b->rows[i]);
        b->tokens[i] = (int)b->rows[i].token;
        b->pos[i] = (int)b->rows[i].position;
        b->seg[i] = (na_step_seg_t){ (int)i, 1, b->pos[i], NULL };
    }
    step = (na_step_t){ b->n_rows, b->n_rows, b->tokens, b->pos, b->seg };
    if (c->slice == 0) {
        st = na_slice_embed(e, b->acts, &step);
    } else {
        memcpy(b->acts->x, c->x, (size_t)c->n_rows * dim * sizeof(float));
        memcpy(b->acts->att, c->att, (size_t)c->n_rows * qd * sizeof(float));
        st = na_acts_from_host(e, b->acts, NA_ACT(NA_ACT_X) | NA_ACT(NA_ACT_ATT));
        if (st == NA_OK)
            st = na_slice_post_attn(e, b->acts, &step, (int)c->slice - 1);
    }
    if (st != NA_OK)
        return st;
    s->slices++;
    if ((int)c->slice == L) {
        st = na_acts_to_host(e, b->acts, NA_ACT(NA_ACT_X));
        if (st != NA_OK)
            return st;
        rs_send_back(s, (int)c->batch_id, 0);
        return NA_OK;
    }
    st = na_slice_pre_attn(e, b->acts, &step, (int)c->slice);
    if (st == NA_OK)
        st = na_acts_to_host(e, b->acts, NA_ACT(NA_ACT_X) | NA_ACT(NA_ACT_Q) |
                                         NA_ACT(NA_ACT_K) | NA_ACT(NA_ACT_V));
    if (st != NA_OK)
        return st;
    b->n_ent = 0;
    for (i = 0; i < c->n_rows; i++) {
        na_asvc_entry_t *x;
        memset(b->acts->att + (size_t)i * qd, 0, qd * sizeof(float));
        if (b->rows[i].status != 0)
            continue;
        x = &b->ent[b->n_ent];
        b->ent_row[b->n_ent++] = (int)i;
        x->req = b->rows[i].request_id;
        x->pos = b->pos[i];
        x->q = b->acts->q + (size_t)i * qd;
        x->k = b->acts->k + (size_t)i * kd;
        x->v = b->acts->v + (size_t)i * kd;
        x->o = b->acts->att + (size_t)i * qd;
        x->status = NA_OK;
        x->reason[0] = '\0';
    }
    if (b->n_ent == 0) {
        rs_send_back(s, (int)c->batch_id, 1);
        return NA_OK;
    }
    st = na_asvc_submit(s->svc, (int)c->batch_id, (int)c->slice, b->ent, b->n_ent);
    if (st != NA_OK)
        return st;
    b->busy = 1;
    return NA_OK;
}

/* Batch id's attention is back: mark failed rows, send the context back. */
static void rs_attn_done(rs_t *s, int id)
{
    rs_batch_t *b;
    int i;

    if (id < 0 || id >= RS_BATCHES || !s->b[id].busy)
        return;
    b = &s->b[id];
    for (i = 0; i < b->n_ent; i++) {
        na_asvc_entry_t *x = &b->ent[i];
        if (x->status != NA_OK) {
            na_log_warn("replica: request %llu, layer %u attention: %s",
                        (unsigned long long)x->req, b->slice,
                        x->reason[0] ? x->reason : na_status_string(x->status));
            b->rows[b->ent_row[i]].status = (int32_t)x->status;
        }
    }
    rs_send_back(s, id, 1);
}

/* A message of replica 0 (REQ_OPEN, PREFILL_KV, REQ_RELEASE, BATCH_CTX);
 * another connection's messages are ignored (it no longer drives). */
static na_status_t rs_on_msg(void *ctx, na_ses_in_t *in)
{
    rs_t *s = ctx;
    const na_wire_hdr_t *h = in->h;
    const na_wire_msg_t *m = in->m;
    na_status_t st;

    if (in->peer != s->boss)
        return NA_OK;
    switch (m->type) {
    case NA_WIRE_MSG_REQ_OPEN:
        st = s->n_open < RS_OPEN_MAX ? NA_OK :
             na_err(NA_ERR_NOSPACE, "replica: %d requests open already", RS_OPEN_MAX);
        if (st == NA_OK)
            st = na_asvc_open(s->svc, m->u.req_open.request_id, (int)m->u.req_open.max_tokens);
        if (st == NA_OK)
            s->open[s->n_open++] = m->u.req_open.request_id;
        rs_answer(s, h, m->u.req_open.request_id, st);
        break;
    case NA_WIRE_MSG_PREFILL_KV:
        if (m->u.kv.pos0 != 0 || m->u.kv.kv_h0 != 0 ||
            m->u.kv.kv_h1 != (uint16_t)s->e->cfg.n_kv_heads ||
            m->u.kv.head_dim != (uint16_t)s->e->cfg.head_dim)
            st = na_err(NA_ERR_INVALID, "replica: PREFILL_KV must carry every kv head of "
                        "the prompt from position 0");
        else
            st = na_asvc_prefill(s->svc, m->u.kv.request_id, (int)m->u.kv.layer, m->u.kv.k,
                                 m->u.kv.v, m->u.kv.dtype, (int)m->u.kv.n_tokens);
        if (st == NA_OK && !(h->flags & NA_WIRE_F_MORE))
            st = na_asvc_prefill_done(s->svc, m->u.kv.request_id);
        rs_answer(s, h, m->u.kv.request_id, st);
        break;
    case NA_WIRE_MSG_REQ_RELEASE:
        na_asvc_release(s->svc, m->u.req_release.request_id, m->u.req_release.status);
        rs_forget(s, m->u.req_release.request_id);
        break;
    default:        /* BATCH_CTX */
        st = rs_slice(s, &m->u.ctx);
        if (st != NA_OK) {
            na_log_error("replica: %s", na_errmsg());
            rs_answer(s, h, 0, st);
        }
        break;
    }
    return NA_OK;
}

/* Replica 0 connected: it drives from now on. */
static void rs_on_accept(void *ctx, na_peer_t *p, na_ses_end_t how, const char *why)
{
    rs_t *s = ctx;

    (void)how;
    (void)why;
    if (s->boss != NULL)
        na_log_warn("replica: %s connected while %s drives; it takes over", na_peer_name(p),
                    na_peer_name(s->boss));
    s->boss = p;
    na_log_info("replica: driven by %s", na_peer_name(p));
}

/* A connection ended (replica 0 lost or gone: release its requests). */
static void rs_on_end(void *ctx, na_peer_t *p, na_ses_end_t how, const char *why)
{
    rs_t *s = ctx;

    if (p == s->boss) {
        if (how == NA_SES_LEFT)
            na_log_info("replica: %s said goodbye", na_peer_name(p));
        else
            na_log_warn("replica: lost %s (%s): releasing its requests", na_peer_name(p), why);
        rs_drop_boss(s);
    }
    na_peer_close(p, 0, NULL);
}

static void rs_cleanup(rs_t *s)
{
    int i;

    for (i = 0; i < RS_BATCHES; i++) {
        rs_batch_t *b = &s->b[i];
        na_acts_destroy(b->acts);
        free(b->tokens); free(b->pos); free(b->seg); free(b->rows); free(b->ent);
        free(b->ent_row);
    }
    na_asvc_destroy(s->svc);
    na_ses_destroy(s->ses);
    na_engine_destroy(s->e);
    na_model_destroy(s->model);
}

/* 1 when host:port accepts a TCP connection now. */
static int rs_listening(const char *host, long port)
{
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    int ok = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%ld", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return 0;
    for (ai = res; ai != NULL && !ok; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0)
            continue;
        ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

/* Wait (up to RS_WAIT_NODES_S, or until *stop) until every storage node of
 * cfg listens: under `nearattn launch` they start together with us. */
static void rs_wait_storage(const na_cfg_t *cfg, const volatile sig_atomic_t *stop)
{
    double t0 = na_now_s();
    int j;

    for (j = 0; j < cfg->n_storage && !*stop; j++) {
        const na_cfg_node_t *nd = &cfg->nodes[cfg->n_compute + j];
        while (!rs_listening(nd->host, nd->port) && !*stop &&
               na_now_s() - t0 < RS_WAIT_NODES_S)
            usleep(100000);
    }
}

int na_replica_wanted(const na_cfg_t *cfg, const na_cfg_node_t *cn)
{
    return cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && cfg->n_compute > 1 &&
           cn != &cfg->nodes[0] && cn->role == NA_CFG_ROLE_COMPUTE && cn->port > 0;
}

na_status_t na_replica_serve(const na_cfg_t *cfg, const char *name,
                             const volatile sig_atomic_t *stop)
{
    const na_cfg_node_t *me = NULL;
    static const na_wire_type_t served[] = {
        NA_WIRE_MSG_REQ_OPEN, NA_WIRE_MSG_PREFILL_KV, NA_WIRE_MSG_REQ_RELEASE,
        NA_WIRE_MSG_BATCH_CTX,
    };
    na_engine_opts_t eo;
    rs_t s;
    na_status_t st;
    int i, id;

    memset(&s, 0, sizeof(s));
    s.cfg = cfg;
    for (i = 0; i < cfg->n_compute; i++)
        if (!strcmp(cfg->nodes[i].name, name))
            me = &cfg->nodes[i];
    if (me == NULL || me->port <= 0)
        return na_err(NA_ERR_INVALID, "replica %s: not a compute node with a port in the "
                      "layout", name);
    if (cfg->model.path == NULL)
        return na_err(NA_ERR_INVALID, "replica %s: the layout names no model", name);
    st = na_model_open(cfg->model.path, &s.model);
    if (st != NA_OK)
        return st;
    memset(&eo, 0, sizeof(eo));
    eo.n_threads = (int)me->threads;
    eo.kv_dtype = NA_DTYPE_F32;
    st = na_engine_create(s.model, &eo, &s.e);
    if (st == NA_OK) {
        rs_wait_storage(cfg, stop);
        st = na_asvc_remote_create(cfg, &s.e->cfg, name, &s.svc);
    }
    if (st == NA_OK)
        st = na_ses_create_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, "replica", &s, &s.ses);
    if (st == NA_OK) {
        na_ses_on_accept(s.ses, rs_on_accept);
        na_ses_on_end(s.ses, rs_on_end);
        for (i = 0; i < (int)(sizeof(served) / sizeof(served[0])); i++)
            na_ses_on(s.ses, served[i], rs_on_msg);
        st = na_xp_listen(na_ses_xp(s.ses), me->host, (int)me->port, NULL);
    }
    if (st != NA_OK) {
        rs_cleanup(&s);
        return st;
    }
    printf("READY %s (compute replica)\n", name);
    fflush(stdout);
    while (!*stop) {
        double t0;
        int busy = 0;
        while (na_asvc_poll(s.svc, 0, &id) == NA_OK)
            rs_attn_done(&s, id);
        for (i = 0; i < RS_BATCHES; i++)
            busy |= s.b[i].busy;
        t0 = na_now_s();
        if (na_ses_poll(s.ses, busy ? 0 : 20) == NA_ERR_TIMEOUT)
            s.idle_s += na_now_s() - t0;
        else
            s.busy_s += na_now_s() - t0;
        if (busy) {         /* attention in flight: wait on the storage side a little */
            t0 = na_now_s();
            if (na_asvc_poll(s.svc, 1, &id) == NA_OK)
                rs_attn_done(&s, id);
            s.idle_s += na_now_s() - t0;
        }
    }
    na_log_info("replica %s: %ld slices, busy %.3f s, idle %.3f s", name, s.slices,
                s.busy_s, s.idle_s);
    rs_cleanup(&s);
    return NA_OK;
}
