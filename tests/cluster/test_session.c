/* tests/cluster/test_session.c — the protocol session layer (rdma/session.h)
 * between two processes over real UCX (tls given as argv[1]: tcp | shm).
 *
 * A child process serves a session with handlers for REQ_OPEN (answers held
 * until three arrived, then given in reverse order, one as ERROR),
 * PREFILL_KV (rows checked, ACK) and STATS_REQ; nothing for KV_FETCH. The
 * parent checks: handler dispatch and blocking calls, request/answer
 * matching out of order, a registered buffer on the send path, a send that
 * returns before it completes (4 MiB to a stopped server), a HEARTBEAT
 * answered by the peer's session, a message of an unserved type dropping
 * only that connection (the server keeps serving), and the silence timer:
 * the SIGSTOPped server is declared lost after peer_timeout_ms. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "rdma/session.h"
#include "tests/testutil.h"

#define TS_SECRET       "session-test-secret"
#define TS_TIMEOUT_MS   500     /* the client's peer_timeout_ms */
#define TS_ROWS         256     /* floats per K and V in the PREFILL_KV */
#define TS_BIG_TOKENS   8192    /* the in-flight PREFILL_KV: 2 x 2 MiB of f32 rows */

static volatile sig_atomic_t g_stop;
static void ts_on_signal(int sig) { g_stop = sig; }

static na_status_t ts_xp(const char *name, const char *tls, int role, na_xp_t **xp_p)
{
    na_xp_opts_t xo;
    memset(&xo, 0, sizeof(xo));
    xo.name = name;
    xo.role = role;
    xo.heartbeat_ms = 100;
    xo.tls = na_xp_tls_parse(tls);
    xo.secret = (const uint8_t *)TS_SECRET;
    xo.secret_len = strlen(TS_SECRET);
    xo.timeout_ms = 3000;
    return na_xp_create(&xo, xp_p);
}

/* ---- the server (child) ---------------------------------------------------- */

typedef struct {
    na_peer_t    *peer;
    na_wire_hdr_t h;
    uint64_t      req;
} ts_held_t;

typedef struct {
    ts_held_t held[3];
    int       n_held;
} ts_srv_t;

static na_status_t ts_srv_open(void *ctx, na_ses_in_t *in)
{
    ts_srv_t *s = ctx;
    int i;

    s->held[s->n_held++] = (ts_held_t){ in->peer, *in->h, in->m->u.req_open.request_id };
    if (s->n_held < 3)
        return NA_OK;
    for (i = 2; i >= 0; i--) {          /* answers in reverse order; id 13 refused */
        ts_held_t *x = &s->held[i];
        na_status_t st = x->req == 13 ? na_err(NA_ERR_NOSPACE, "request 13: full") : NA_OK;
        (void)na_peer_answer(x->peer, &x->h, x->req, st, NULL);
    }
    s->n_held = 0;
    return NA_OK;
}

static na_status_t ts_srv_prefill(void *ctx, na_ses_in_t *in)
{
    const na_wire_kv_t *kv = &in->m->u.kv;
    float k[TS_ROWS], v[TS_ROWS];
    int i;

    (void)ctx;
    na_wire_rows_to_f32(kv->k, kv->dtype, TS_ROWS, k);
    na_wire_rows_to_f32(kv->v, kv->dtype, TS_ROWS, v);
    for (i = 0; i < TS_ROWS; i++)
        if (k[i] != (float)i || v[i] != (float)-i)
            return na_err(NA_ERR_INVALID, "prefill row %d: k %g v %g", i, k[i], v[i]);
    return na_peer_answer(in->peer, in->h, kv->request_id, NA_OK, NULL);
}

static na_status_t ts_srv_stats(void *ctx, na_ses_in_t *in)
{
    na_wire_stat_t pair;
    na_wire_msg_t m;

    (void)ctx;
    memset(&pair, 0, sizeof(pair));
    snprintf(pair.key, sizeof(pair.key), "srv.answer");
    pair.value = 42;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS;
    m.u.stats.n = 1;
    m.u.stats.pairs = &pair;
    return na_peer_send(in->peer, &m, NULL);
}

static void ts_srv_end(void *ctx, na_peer_t *p, na_ses_end_t how, const char *why)
{
    (void)ctx;
    fprintf(stderr, "srv: peer %s ended (%d): %s\n", na_peer_name(p), (int)how, why);
    na_peer_close(p, 0, NULL);
}

static int ts_server(int fd, const char *tls)
{
    struct sigaction sa;
    na_ses_opts_t so;
    ts_srv_t srv;
    na_ses_t *ses;
    na_xp_t *xp;
    int port = 0;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ts_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    memset(&srv, 0, sizeof(srv));
    if (ts_xp("srv", tls, NA_WIRE_ROLE_STORAGE, &xp) != NA_OK ||
        na_xp_listen(xp, "127.0.0.1", 0, &port) != NA_OK) {
        fprintf(stderr, "srv: %s\n", na_errmsg());
        port = -1;
        (void)!write(fd, &port, sizeof(port));
        return 1;
    }
    memset(&so, 0, sizeof(so));
    so.who = "srv";
    so.heartbeat_ms = 100;
    so.peer_timeout_ms = 3000;
    so.own_xp = 1;
    if (na_ses_create(xp, &so, &srv, &ses) != NA_OK)
        return 1;
    na_ses_on(ses, NA_WIRE_MSG_REQ_OPEN, ts_srv_open);
    na_ses_on(ses, NA_WIRE_MSG_PREFILL_KV, ts_srv_prefill);
    na_ses_on(ses, NA_WIRE_MSG_STATS_REQ, ts_srv_stats);
    na_ses_on_end(ses, ts_srv_end);
    (void)!write(fd, &port, sizeof(port));
    close(fd);
    while (!g_stop)
        (void)na_ses_poll(ses, 50);
    na_ses_destroy(ses);
    return 0;
}

/* ---- the client (parent) ------------------------------------------------------ */

typedef struct {
    uint64_t    order[3];       /* request ids in the order answered */
    na_status_t st[3];
    int         n;
    int         ended;          /* peers ended */
    na_ses_end_t how;
    char        why[320];
    na_peer_t  *last_ended;
} ts_cli_t;

static void ts_open_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                          const na_ses_in_t *in)
{
    ts_cli_t *c = ctx;
    uint64_t id = in == NULL ? 0 : in->m->type == NA_WIRE_MSG_ACK ? in->m->u.ack.request_id
                                                                  : in->m->u.error.request_id;
    (void)p;
    NA_CHECK_MSG(id == arg, "answer about request %llu reached the waiter of %llu",
                 (unsigned long long)id, (unsigned long long)arg);
    if (st != NA_OK)
        NA_CHECK_MSG(strstr(na_errmsg(), "request 13: full") != NULL, "error text '%s'",
                     na_errmsg());
    if (c->n < 3) {
        c->order[c->n] = arg;
        c->st[c->n++] = st;
    }
}

static void ts_stats_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                           const na_ses_in_t *in)
{
    na_wire_stat_t s;
    (void)ctx;
    (void)p;
    if (st != NA_OK || in->m->u.stats.n != 1)
        return;
    (void)na_wire_stats_get(&in->m->u.stats, 0, &s);
    *(uint64_t *)arg = s.value;
}

static void ts_cli_end(void *ctx, na_peer_t *p, na_ses_end_t how, const char *why)
{
    ts_cli_t *c = ctx;
    c->ended++;
    c->how = how;
    c->last_ended = p;
    snprintf(c->why, sizeof(c->why), "%s", why);
}

/* Poll ses until cond or ms pass; returns the ms waited. */
#define TS_POLL_UNTIL(ses, cond, ms) do { uint64_t t0_ = na_xp_now_ns(); \
        while (!(cond) && na_xp_now_ns() - t0_ < (uint64_t)(ms) * 1000000ull) \
            (void)na_ses_poll((ses), 20); } while (0)

/* The answer to the big PREFILL_KV: *arg = 1 on ACK, -1 otherwise. */
static void ts_big_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                         const na_ses_in_t *in)
{
    (void)ctx;
    (void)p;
    (void)in;
    *(int *)arg = st == NA_OK ? 1 : -1;
}

static void ts_client(pid_t child, int port, const char *tls)
{
    na_ses_opts_t so;
    ts_cli_t cli;
    na_ses_t *ses;
    na_xp_t *xp;
    na_peer_t *p, *p2;
    na_wire_msg_t m;
    na_xp_buf_t *buf = NULL;
    float k[TS_ROWS], v[TS_ROWS];
    uint64_t value = 0, t0;
    size_t need;
    int i;

    memset(&cli, 0, sizeof(cli));
    NA_CHECK_OK(ts_xp("cli", tls, NA_WIRE_ROLE_COMPUTE, &xp));
    if (na_test_failures)
        return;
    memset(&so, 0, sizeof(so));
    so.who = "cli";
    so.heartbeat_ms = 100;
    so.peer_timeout_ms = TS_TIMEOUT_MS;
    so.reply_timeout_ms = 5000;
    so.own_xp = 1;
    NA_CHECK_OK(na_ses_create(xp, &so, &cli, &ses));
    na_ses_on_end(ses, ts_cli_end);
    NA_CHECK_OK(na_ses_connect(ses, "127.0.0.1", port, &p));
    if (na_test_failures)
        return;

    /* three requests answered in reverse order, each reaches its own waiter */
    for (i = 0; i < 3; i++) {
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_REQ_OPEN;
        m.u.req_open.request_id = 11 + (uint64_t)i;
        m.u.req_open.max_tokens = 8;
        m.u.req_open.n_layers = 1;
        m.u.req_open.kv_h1 = 1;
        m.u.req_open.head_dim = 64;
        m.u.req_open.q_per_kv = 1;
        m.u.req_open.dtype = NA_DTYPE_F32;
        NA_CHECK_OK(na_peer_request(p, &m, NULL, NA_WIRE_MSG_ACK, 0, 0, ts_open_reply,
                                    (uintptr_t)m.u.req_open.request_id));
    }
    NA_CHECK(na_peer_pending(p) == 3);
    TS_POLL_UNTIL(ses, cli.n == 3, 5000);
    NA_CHECK_MSG(cli.n == 3 && cli.order[0] == 13 && cli.order[1] == 12 && cli.order[2] == 11,
                 "answers: %d, order %llu %llu %llu", cli.n, (unsigned long long)cli.order[0],
                 (unsigned long long)cli.order[1], (unsigned long long)cli.order[2]);
    NA_CHECK(cli.st[0] == NA_ERR_NOSPACE && cli.st[1] == NA_OK && cli.st[2] == NA_OK);
    NA_CHECK(na_peer_pending(p) == 0);
    printf("ok: 3 requests answered out of order, each matched to its waiter\n");

    /* a blocking call answered by the server's STATS handler */
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    NA_CHECK_OK(na_peer_call(p, &m, NULL, NA_WIRE_MSG_STATS, 0, 0, ts_stats_reply,
                             (uintptr_t)&value));
    NA_CHECK(value == 42);

    /* a HEARTBEAT is answered by the peer's session itself */
    t0 = na_xp_now_ns();
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_HEARTBEAT;
    m.u.heartbeat.send_ns = t0;
    NA_CHECK_OK(na_peer_call(p, &m, NULL, NA_WIRE_MSG_HEARTBEAT, NA_SES_NO_LOSS, 1000, NULL, 0));
    printf("ok: heartbeat answered in %.3f ms\n", 1e-6 * (double)(na_xp_now_ns() - t0));

    /* the send path through a registered buffer */
    for (i = 0; i < TS_ROWS; i++) {
        k[i] = (float)i;
        v[i] = (float)-i;
    }
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_PREFILL_KV;
    m.u.kv.request_id = 11;
    m.u.kv.n_tokens = TS_ROWS / 64;
    m.u.kv.kv_h1 = 1;
    m.u.kv.head_dim = 64;
    m.u.kv.dtype = NA_DTYPE_F32;
    m.u.kv.k = k;
    m.u.kv.v = v;
    NA_CHECK_OK(na_wire_msg_size(&m, &need));
    NA_CHECK_OK(na_xp_buf_create(xp, need, NA_XP_MEM_HOST, &buf));
    if (buf != NULL) {
        NA_CHECK_OK(na_peer_call(p, &m, buf, NA_WIRE_MSG_ACK, 0, 0, NULL, 0));
        na_xp_buf_destroy(xp, buf);
        printf("ok: PREFILL_KV sent from a registered %zu-byte buffer\n", need);
    }

    /* a send returns before it completes: 4 MiB (rendezvous) to a stopped
     * server stays in flight, its buffer owned by the transport; once the
     * server runs again it arrives intact and is answered */
    {
        size_t nf = (size_t)TS_BIG_TOKENS * 64, j;
        float *bk = malloc(nf * sizeof(float)), *bv = malloc(nf * sizeof(float));
        int acked = 0, inflight;
        double ms;
        NA_CHECK(bk != NULL && bv != NULL);
        for (j = 0; bk != NULL && bv != NULL && j < nf; j++) {
            bk[j] = (float)j;
            bv[j] = -(float)j;
        }
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_PREFILL_KV;
        m.u.kv.request_id = 12;
        m.u.kv.n_tokens = TS_BIG_TOKENS;
        m.u.kv.kv_h1 = 1;
        m.u.kv.head_dim = 64;
        m.u.kv.dtype = NA_DTYPE_F32;
        m.u.kv.k = bk;
        m.u.kv.v = bv;
        kill(child, SIGSTOP);
        t0 = na_xp_now_ns();
        if (bk != NULL && bv != NULL)
            NA_CHECK_OK(na_peer_request(p, &m, NULL, NA_WIRE_MSG_ACK, 0, 0, ts_big_reply,
                                        (uintptr_t)&acked));
        ms = 1e-6 * (double)(na_xp_now_ns() - t0);
        inflight = na_xp_inflight(xp);
        kill(child, SIGCONT);
        free(bk);                       /* encoded: the caller's rows are free at once */
        free(bv);
        NA_CHECK_MSG(inflight >= 1 && ms < 1000.0,
                     "a send to a stopped peer: %d in flight after %.1f ms", inflight, ms);
        TS_POLL_UNTIL(ses, acked != 0, 5000);
        NA_CHECK_MSG(acked == 1 && na_xp_inflight(xp) == 0 && na_peer_alive(p),
                     "the 4 MiB send: answer %d, %d in flight", acked, na_xp_inflight(xp));
        printf("ok: a 4 MiB send to a stopped peer returned in %.2f ms (%d in flight), "
               "delivered once it ran\n", ms, inflight);
    }

    /* a type the server has no handler for drops that connection only */
    NA_CHECK_OK(na_ses_connect(ses, "127.0.0.1", port, &p2));
    if (na_test_failures)
        return;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_KV_FETCH;
    m.u.kv_fetch.request_id = 1;
    m.u.kv_fetch.n_tokens = 1;
    m.u.kv_fetch.kv_h1 = 1;
    m.u.kv_fetch.dtype = NA_DTYPE_F32;
    NA_CHECK_OK(na_peer_send(p2, &m, NULL));
    TS_POLL_UNTIL(ses, !na_peer_alive(p2), 5000);
    NA_CHECK_MSG(!na_peer_alive(p2) && cli.last_ended == p2, "unserved type: peer kept");
    NA_CHECK_MSG(strstr(cli.why, "KV_FETCH") != NULL, "drop reason '%s'", cli.why);
    printf("ok: unserved KV_FETCH dropped that connection: %s\n", cli.why);
    na_peer_close(p2, 0, NULL);
    value = 0;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    NA_CHECK_OK(na_peer_call(p, &m, NULL, NA_WIRE_MSG_STATS, 0, 0, ts_stats_reply,
                             (uintptr_t)&value));
    NA_CHECK_MSG(value == 42 && na_peer_alive(p), "the first connection stopped serving");

    /* the silence timer: a stopped server is lost after peer_timeout_ms */
    TS_POLL_UNTIL(ses, 0, 300);             /* heartbeats flow */
    NA_CHECK(na_peer_alive(p));
    cli.ended = 0;
    kill(child, SIGSTOP);
    t0 = na_xp_now_ns();
    TS_POLL_UNTIL(ses, cli.ended > 0, 10 * TS_TIMEOUT_MS);
    {
        double ms = 1e-6 * (double)(na_xp_now_ns() - t0);
        NA_CHECK_MSG(cli.ended == 1 && cli.last_ended == p && cli.how == NA_SES_LOST,
                     "stopped server not lost (ended %d, how %d)", cli.ended, (int)cli.how);
        NA_CHECK_MSG(strstr(cli.why, "silent for") != NULL, "loss reason '%s'", cli.why);
        NA_CHECK_MSG(ms >= TS_TIMEOUT_MS - 150 && ms < 3 * TS_TIMEOUT_MS,
                     "lost after %.0f ms, peer_timeout_ms %d", ms, TS_TIMEOUT_MS);
        printf("ok: SIGSTOPped server lost after %.0f ms (peer_timeout_ms %d): %s\n", ms,
               TS_TIMEOUT_MS, cli.why);
    }
    kill(child, SIGCONT);
    na_peer_close(p, 0, NULL);
    na_ses_destroy(ses);
}

int main(int argc, char **argv)
{
    const char *tls = argc > 1 ? argv[1] : "tcp";
    int fds[2], port = 0, status = 0;
    pid_t child;

    na_log_set_tag("test_session");
    if (pipe(fds) != 0)
        return 1;
    child = fork();
    if (child == 0) {
        close(fds[0]);
        _exit(ts_server(fds[1], tls));
    }
    close(fds[1]);
    if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port) || port <= 0) {
        fprintf(stderr, "test_session: the server did not start\n");
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        return 1;
    }
    close(fds[0]);
    ts_client(child, port, tls);
    kill(child, SIGTERM);
    waitpid(child, &status, 0);
    NA_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server exit status %d", status);
    return na_test_finish();
}
