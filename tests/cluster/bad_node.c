/* tests/cluster/bad_node.c — a storage node that misbehaves on purpose, for
 * the compute node's bad-input tests (tests/cluster/test_offload_run.sh
 * badshape). A real storage node never answers with wrong shapes, so this
 * test double stands in for one that does, behind the same wire protocol
 * and transport:
 *
 *   bad_node LAYOUT NAME MODE
 *
 * Listens where the layout puts storage node NAME (HELLO with the layout's
 * secret), ACKs REQ_OPEN / PREFILL_KV / REQ_RELEASE, answers heartbeats, and
 * answers every DECODE_ATTN according to MODE:
 *   shape   an ATTN_OUT whose q_per_kv is one more than asked
 *   count   an ATTN_OUT with one entry more than asked
 *   badid   the first entry answers another request id than asked
 *   dupid   the last entry repeats the first one's request id (badid
 *           while a batch has one entry)
 *   status  the first entry's status is 1000 (out of the wire's range;
 *           written into the encoded bytes, the encoder refuses it)
 *   status200 the first entry's status is -200 (in the wire's range, but no
 *           na_status_t)
 * Prints "READY" once listening; runs until killed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/wire.h"
#include "rdma/transport.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

/* Encode and send m; status != 0: written over the first ATTN_OUT entry's
 * status field after encoding (payload offset 32 + 8). */
static void send_msg_status(na_xp_ep_t *ep, na_wire_msg_t *m, int32_t status)
{
    size_t size, len;
    uint8_t *buf;

    if (na_wire_msg_size(m, &size) != NA_OK)
        return;
    buf = calloc(1, size);
    if (buf != NULL && na_wire_encode(m, buf, size, &len) == NA_OK) {
        if (status != 0)
            memcpy(buf + NA_WIRE_HDR_SIZE + 32 + 8, &status, 4);    /* little-endian host */
        (void)na_xp_send(ep, buf, NA_WIRE_HDR_SIZE, buf + NA_WIRE_HDR_SIZE,
                         len - NA_WIRE_HDR_SIZE);
    }
    free(buf);
}

static void send_msg(na_xp_ep_t *ep, na_wire_msg_t *m)
{
    send_msg_status(ep, m, 0);
}

static void answer_attn(na_xp_ep_t *ep, const na_wire_attn_t *a, const char *mode)
{
    na_wire_out_entry_t *oe = calloc(a->n_entries + 1, sizeof(*oe));
    uint32_t i, n = a->n_entries, qpk = a->q_per_kv;
    na_wire_msg_t m;

    if (oe == NULL)
        return;
    if (!strcmp(mode, "count"))
        n++;
    else if (!strcmp(mode, "shape"))
        qpk++;
    for (i = 0; i < n; i++) {
        na_wire_attn_entry_t e;
        (void)na_wire_attn_get(a, i < a->n_entries ? i : 0, &e);
        oe[i].request_id = e.request_id;
        oe[i].kv_h0 = e.kv_h0;
        oe[i].kv_h1 = e.kv_h1;
        oe[i].n_queries = e.n_queries;   /* a prompt chunk's rows, as asked */
        oe[i].o = NULL;         /* rows stay zero */
    }
    if (!strcmp(mode, "badid") || (!strcmp(mode, "dupid") && n < 2))
        oe[0].request_id += 1000;
    else if (!strcmp(mode, "dupid"))
        oe[n - 1].request_id = oe[0].request_id;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_ATTN_OUT;
    m.u.attn_out.batch_id = a->batch_id;
    m.u.attn_out.layer = a->layer;
    m.u.attn_out.n_entries = n;
    m.u.attn_out.entry_base = 0;
    m.u.attn_out.batch_total = n;
    m.u.attn_out.head_dim = a->head_dim;
    m.u.attn_out.q_per_kv = (uint16_t)qpk;
    m.u.attn_out.dtype = NA_DTYPE_F32;
    m.u.attn_out.entries = oe;
    send_msg_status(ep, &m, !strcmp(mode, "status") ? 1000 : !strcmp(mode, "status200") ? -200 : 0);
    free(oe);
}

int main(int argc, char **argv)
{
    const na_cfg_node_t *nd;
    na_xp_opts_t xo;
    na_cfg_t *cfg;
    na_xp_t *xp = NULL;
    struct sigaction sa;
    int rc = 1;

    if (argc != 4) {
        fprintf(stderr, "usage: bad_node LAYOUT NAME shape|count|badid|dupid|status|status200\n");
        return 2;
    }
    if (na_cfg_load(argv[1], &cfg) != NA_OK) {
        fprintf(stderr, "bad_node: %s\n", na_errmsg());
        return 1;
    }
    nd = na_cfg_find_node(cfg, argv[2]);
    if (nd == NULL) {
        fprintf(stderr, "bad_node: no node %s\n", argv[2]);
        goto out_cfg;
    }
    memset(&xo, 0, sizeof(xo));
    xo.name = nd->name;
    xo.cluster = cfg->cluster.name;
    xo.role = NA_WIRE_ROLE_STORAGE;
    xo.heartbeat_ms = 200;
    xo.tls = NA_XP_TLS_AUTO;
    xo.secret = cfg->secret;
    xo.secret_len = cfg->secret_len;
    if (na_xp_create(&xo, &xp) != NA_OK) {
        fprintf(stderr, "bad_node: %s\n", na_errmsg());
        goto out_cfg;
    }
    if (na_xp_listen(xp, nd->host, (int)nd->port, NULL) != NA_OK) {
        fprintf(stderr, "bad_node: %s\n", na_errmsg());
        goto out_xp;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("READY %s\n", nd->name);
    fflush(stdout);
    while (!g_stop) {
        na_xp_msg_t *msg;
        na_wire_hdr_t h;
        na_wire_msg_t m, r;

        if (na_xp_recv(xp, 100, &msg) != NA_OK)
            continue;
        if (msg->kind != NA_XP_MSG_DATA || na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h) != NA_OK ||
            na_wire_decode(&h, msg->data, msg->len, &m) != NA_OK) {
            na_xp_msg_release(xp, msg);
            continue;
        }
        memset(&r, 0, sizeof(r));
        switch (m.type) {
        case NA_WIRE_MSG_REQ_OPEN:
        case NA_WIRE_MSG_PREFILL_KV:
        case NA_WIRE_MSG_REQ_RELEASE:
            r.type = NA_WIRE_MSG_ACK;
            r.u.ack.request_id = h.request_id;
            r.u.ack.about_type = h.type;
            r.u.ack.about_seq = h.seq;
            send_msg(msg->ep, &r);
            break;
        case NA_WIRE_MSG_HEARTBEAT:
            if (!(m.flags & NA_WIRE_F_REPLY)) {
                r.type = NA_WIRE_MSG_HEARTBEAT;
                r.flags = NA_WIRE_F_REPLY;
                r.u.heartbeat.echo_ns = m.u.heartbeat.send_ns;
                send_msg(msg->ep, &r);
            }
            break;
        case NA_WIRE_MSG_STATS_REQ:     /* no counters (so no shape to check) */
            r.type = NA_WIRE_MSG_STATS;
            send_msg(msg->ep, &r);
            break;
        case NA_WIRE_MSG_DECODE_ATTN:
            answer_attn(msg->ep, &m.u.attn, argv[3]);
            break;
        default:
            break;
        }
        na_xp_msg_release(xp, msg);
    }
    rc = 0;
out_xp:
    na_xp_destroy(xp);
out_cfg:
    na_cfg_destroy(cfg);
    return rc;
}
