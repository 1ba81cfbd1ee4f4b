/* tests/cluster/xp_peer.c — one process of a transport test cluster.
 *
 *   xp_peer server --listen HOST:PORT --clients K [common options]
 *       Serve ECHO until K clients are done (said BYE, were lost, or were
 *       dropped for a bad message). Prints "LOST <name>" / "DROPPED <name>"
 *       lines and a summary; exits 0, or 1 past --max-ms.
 *   xp_peer client --connect HOST:PORT[,HOST:PORT...] [--rounds R | --forever]
 *       [--sizes B,B,...] [--expect-refused] [--garbage] [common options]
 *       Connect to every server (retrying until --timeout-ms), then for each
 *       round and size send one ECHO to every server at once and check every
 *       answer byte for byte. Ends with BYE. --expect-refused: succeed only if
 *       the connection is refused for the secret (exit 0), --garbage: send a
 *       malformed message after the handshake and expect to be dropped,
 *       --skip-server-proof: do not check the server (so that the server's
 *       own check of our proof is what refuses a wrong secret), --burst N:
 *       per round send N echoes of the sizes (cycling) to the first server
 *       before reading any answer; answers must come back in order.
 *       --expect-fail: succeed only if the connection fails (any reason),
 *       --until-file F: paced rounds (20 ms apart) until file F exists, then
 *       --rounds R more (printing "UNTIL <name>" when F is seen), then BYE.
 *   xp_peer mpi --base-port P [common options]
 *       Rank from the launcher (rdma/bootstrap.h): rank 0 is the client of
 *       ranks 1..size-1, which serve at base-port + rank - 1.
 *   common: --name N --secret S --tls auto|shm|tcp|RAW --errmode auto|peer|cm
 *           --cluster NAME (default xptest) --role storage|compute|tool
 *           (the role its HELLO says; default tool) --test-addr HEX (send these bytes,
 *           sealed as usual, instead of our UCX worker address: a secret
 *           holder sending garbage)
 *           (XP_PEER_DESCRIBE=1 in the environment: print UCX's lanes of the
 *           server's accepted and the client's first endpoint)
 *           --timeout-ms T --max-ms T
 *
 * Exit codes: 0 ok, 1 check or runtime failure, 2 usage. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "rdma/bootstrap.h"
#include "rdma/transport.h"
#include "rdma/xp_echo.h"

#define PEER_MAX_SERVERS 8
#define PEER_MAX_SIZES   16
#define PEER_MAX_BYES    64

typedef struct {
    const char *role, *listen, *connect, *name, *secret, *tls, *sizes, *errmode;
    const char *until_file;     /* client: paced rounds until it exists, then --rounds more */
    int clients, rounds, forever, expect_refused, garbage, timeout_ms, max_ms, base_port;
    int skip_server_proof, burst, expect_fail;
    const char *cluster;        /* cluster name (default "xptest") */
    int hello_role;             /* na_wire_role_t sent in HELLO (--role; 0: tool) */
    uint8_t test_addr[64];      /* --test-addr: sent instead of our UCX worker address */
    size_t test_addr_len;
} peer_args_t;

/* Deterministic bytes for (name, seq): what the echo must bring back. */
static void peer_fill(uint8_t *p, size_t n, const char *name, uint32_t seq)
{
    uint64_t s = 0x9e3779b97f4a7c15ull ^ seq;
    size_t i;
    for (i = 0; name[i]; i++)
        s = (s ^ (uint8_t)name[i]) * 0x100000001b3ull;
    for (i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        p[i] = (uint8_t)(s >> 24);
    }
}

/* Split "host:port" into host (buf) and port. 0 on success. */
static int peer_hostport(const char *s, char *host, size_t hlen, int *port)
{
    const char *c = strrchr(s, ':');
    if (c == NULL || (size_t)(c - s) >= hlen)
        return -1;
    memcpy(host, s, (size_t)(c - s));
    host[c - s] = '\0';
    *port = atoi(c + 1);
    return *port >= 0 && *port < 65536 ? 0 : -1;
}

/* host: this peer's own address (a server's listen host: UCX is then kept
 * to that interface), or NULL. */
static na_status_t peer_xp_create(const peer_args_t *a, const char *host, na_xp_t **xp_p)
{
    na_xp_opts_t o;
    memset(&o, 0, sizeof(o));
    o.name = a->name;
    o.host = host;
    o.cluster = a->cluster ? a->cluster : "xptest";
    o.role = a->hello_role;
    o.tls = na_xp_tls_parse(a->tls);
    o.tls_raw = a->tls;
    o.errmode = (na_xp_errmode_t)na_xp_errmode_parse(a->errmode);
    o.secret = (const uint8_t *)a->secret;
    o.secret_len = strlen(a->secret);
    o.timeout_ms = a->timeout_ms;
    o.heartbeat_ms = 1000;
    o.test_skip_server_proof = a->skip_server_proof;
    if (a->test_addr_len > 0) {
        o.test_addr = a->test_addr;
        o.test_addr_len = a->test_addr_len;
    }
    return na_xp_create(&o, xp_p);
}

/* Send a BYE (wire) and wait for local completion. */
static void peer_bye(na_xp_ep_t *ep)
{
    na_wire_msg_t m;
    uint8_t buf[512];
    size_t len;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_BYE;
    snprintf(m.u.bye.text, sizeof(m.u.bye.text), "done");
    if (na_wire_encode(&m, buf, sizeof(buf), &len) == NA_OK)
        (void)na_xp_send(ep, buf, NA_WIRE_HDR_SIZE, buf + NA_WIRE_HDR_SIZE, len - NA_WIRE_HDR_SIZE);
}

static int peer_server(const peer_args_t *a, const char *listen)
{
    char host[128];
    int port, done = 0, lost = 0, dropped = 0, rc = 0, n_bye = 0, i;
    na_xp_ep_t *byes[PEER_MAX_BYES];
    uint64_t served = 0, t0 = na_xp_now_ns();
    na_xp_t *xp = NULL;
    na_status_t st;

    if (peer_hostport(listen, host, sizeof(host), &port) != 0) {
        fprintf(stderr, "xp_peer: bad --listen '%s'\n", listen);
        return 2;
    }
    st = peer_xp_create(a, host, &xp);
    if (st == NA_OK)
        st = na_xp_listen(xp, host, port, &port);
    if (st != NA_OK) {
        fprintf(stderr, "xp_peer %s: %s\n", a->name, na_errmsg());
        na_xp_destroy(xp);
        return 1;
    }
    printf("READY %s %s:%d\n", a->name, host, port);
    fflush(stdout);
    while (done < a->clients) {
        na_xp_msg_t *m;
        if (a->max_ms > 0 && na_xp_now_ns() - t0 > (uint64_t)a->max_ms * 1000000ull) {
            fprintf(stderr, "xp_peer %s: gave up after %d ms (%d of %d clients done)\n",
                    a->name, a->max_ms, done, a->clients);
            rc = 1;
            break;
        }
        if (na_xp_recv(xp, 200, &m) != NA_OK)
            continue;
        if (m->kind == NA_XP_EV_ACCEPTED) {
            printf("ACCEPTED %s\n", na_xp_ep_name(m->ep));
            if (getenv("XP_PEER_DESCRIBE") != NULL) {   /* lanes: which UCX transport */
                fflush(stdout);
                na_xp_ep_describe(m->ep, stdout);
            }
        } else if (m->kind == NA_XP_EV_LOST) {
            for (i = 0; i < n_bye && byes[i] != m->ep; i++)
                ;
            if (i == n_bye) {
                printf("LOST %s after %.1f s: %s\n", na_xp_ep_name(m->ep),
                       (na_xp_now_ns() - t0) / 1e9, na_status_string(m->status));
                lost++;
            } else {
                byes[i] = byes[--n_bye];     /* closed after BYE: normal end */
            }
            done++;
            na_xp_ep_close(m->ep);
        } else {
            uint32_t seq;
            unsigned flags;
            na_wire_hdr_t h;
            st = na_xp_echo_parse(m, &seq, &flags);
            if (st == NA_OK) {
                st = na_xp_echo_serve(m);
                served++;
            } else if (st == NA_ERR_NOT_FOUND &&
                       na_wire_hdr_decode(m->hdr, m->hdr_len, &h) == NA_OK &&
                       h.type == NA_WIRE_MSG_BYE) {
                /* the client closes first (so TIME_WAIT stays on its side and
                 * our port can be reused at once); its close ends it here */
                printf("BYE %s\n", na_xp_ep_name(m->ep));
                if (n_bye < PEER_MAX_BYES)
                    byes[n_bye++] = m->ep;
                st = NA_OK;
            }
            if (st != NA_OK && na_xp_ep_alive(m->ep)) {
                /* a bad message drops that peer only */
                printf("DROPPED %s: %s\n", na_xp_ep_name(m->ep), na_errmsg());
                na_log_warn("dropping peer %s: %s", na_xp_ep_name(m->ep), na_errmsg());
                dropped++;
                done++;
                na_xp_ep_close(m->ep);
            }
        }
        fflush(stdout);
        na_xp_msg_release(xp, m);
    }
    printf("SUMMARY %s served=%llu done=%d lost=%d dropped=%d\n", a->name,
           (unsigned long long)served, done, lost, dropped);
    fflush(stdout);
    na_xp_destroy(xp);
    return rc;
}

/* Connect, retrying while the server is not up yet (bounded by timeout). */
static na_status_t peer_connect(na_xp_t *xp, const char *host, int port, int timeout_ms,
                                na_xp_ep_t **ep_p)
{
    uint64_t deadline = na_xp_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        na_status_t st = na_xp_connect(xp, host, port, ep_p);
        if (st == NA_OK || st == NA_ERR_AUTH || st == NA_ERR_VERSION ||
            na_xp_now_ns() > deadline)
            return st;
        usleep(100000);
    }
}

/* A burst to the first server: messages of all sizes (cycling) sent without
 * waiting for answers, so eager and rendezvous messages overtake nothing:
 * the answers must come back in the order sent, each byte for byte. */
static int peer_burst(na_xp_t *xp, na_xp_ep_t *ep, const size_t *sizes, int n_sizes, int count,
                      uint32_t *seq_io, const char *name, int timeout_ms)
{
    uint8_t **bufs = calloc((size_t)count, sizeof(*bufs));
    na_xp_op_t **ops = calloc((size_t)count, sizeof(*ops));
    uint32_t seq0 = *seq_io;
    int i, rc = 1;

    if (bufs == NULL || ops == NULL)
        goto out;
    for (i = 0; i < count; i++) {
        size_t n = sizes[i % n_sizes];
        bufs[i] = malloc(n ? n : 1);
        if (bufs[i] == NULL)
            goto out;
        peer_fill(bufs[i], n, name, seq0 + (uint32_t)i);
        if (na_xp_echo_start(ep, seq0 + (uint32_t)i, 0, bufs[i], n, NULL, &ops[i]) != NA_OK) {
            fprintf(stderr, "xp_peer %s: burst send: %s\n", name, na_errmsg());
            goto out;
        }
    }
    for (i = 0; i < count; i++) {
        na_status_t st = na_xp_op_wait(xp, ops[i], -1);
        ops[i] = NULL;
        if (st != NA_OK) {
            fprintf(stderr, "xp_peer %s: burst send wait: %s\n", name, na_errmsg());
            goto out;
        }
    }
    for (i = 0; i < count; i++) {
        size_t n = sizes[i % n_sizes];
        na_xp_msg_t *m;
        uint32_t rseq;
        unsigned flags;
        if (na_xp_recv(xp, timeout_ms, &m) != NA_OK) {
            fprintf(stderr, "xp_peer %s: burst answer %d missing\n", name, i);
            goto out;
        }
        if (m->kind != NA_XP_MSG_DATA || na_xp_echo_parse(m, &rseq, &flags) != NA_OK ||
            rseq != seq0 + (uint32_t)i || m->len != n || memcmp(m->data, bufs[i], n) != 0) {
            fprintf(stderr, "xp_peer %s: burst answer %d: seq %u (want %u), %zu/%zu bytes%s\n",
                    name, i, m->kind == NA_XP_MSG_DATA ? rseq : 0, seq0 + (uint32_t)i, m->len, n,
                    m->len == n && memcmp(m->data, bufs[i], n) ? ", content DIFFERENT" : "");
            na_xp_msg_release(xp, m);
            goto out;
        }
        na_xp_msg_release(xp, m);
    }
    *seq_io = seq0 + (uint32_t)count;
    rc = 0;
out:
    for (i = 0; bufs != NULL && i < count; i++) {
        if (ops != NULL && ops[i] != NULL)
            (void)na_xp_op_wait(xp, ops[i], -1);
        free(bufs[i]);
    }
    free(bufs);
    free(ops);
    return rc;
}

/* One round: an ECHO of size n to every server, then check every answer. */
static int peer_round(na_xp_t *xp, na_xp_ep_t **eps, int n_eps, size_t n, uint32_t seq,
                      const char *name, uint8_t *want, int timeout_ms)
{
    na_xp_op_t *ops[PEER_MAX_SERVERS];
    int got[PEER_MAX_SERVERS] = { 0 }, i, n_got = 0;
    na_status_t st;

    peer_fill(want, n, name, seq);
    for (i = 0; i < n_eps; i++) {
        st = na_xp_echo_start(eps[i], seq, 0, want, n, NULL, &ops[i]);
        if (st != NA_OK) {
            fprintf(stderr, "xp_peer %s: send: %s\n", name, na_errmsg());
            return 1;
        }
    }
    for (i = 0; i < n_eps; i++) {
        if (na_xp_op_wait(xp, ops[i], -1) != NA_OK) {
            fprintf(stderr, "xp_peer %s: send wait: %s\n", name, na_errmsg());
            return 1;
        }
    }
    while (n_got < n_eps) {
        na_xp_msg_t *m;
        uint32_t rseq;
        unsigned flags = 0;
        int reply, k = -1;
        if (na_xp_recv(xp, timeout_ms, &m) != NA_OK) {
            fprintf(stderr, "xp_peer %s: no answer to seq %u (%zu bytes) within %d ms\n",
                    name, seq, n, timeout_ms);
            return 1;
        }
        for (i = 0; i < n_eps; i++)
            if (m->ep == eps[i])
                k = i;
        if (m->kind != NA_XP_MSG_DATA) {
            fprintf(stderr, "xp_peer %s: peer %s lost: %s\n", name, na_xp_ep_name(m->ep),
                    na_status_string(m->status));
            na_xp_msg_release(xp, m);
            return 1;
        }
        st = na_xp_echo_parse(m, &rseq, &flags);
        reply = (flags & NA_WIRE_F_REPLY) != 0;
        if (k < 0 || st != NA_OK || !reply || rseq != seq || got[k] || m->len != n ||
            memcmp(m->data, want, n) != 0) {
            fprintf(stderr, "xp_peer %s: bad answer from %s: seq %u/%u, %zu/%zu bytes, "
                    "reply %d, content %s\n", name, na_xp_ep_name(m->ep), rseq, seq, m->len, n,
                    reply, (m->len == n && memcmp(m->data, want, n) == 0) ? "same" : "DIFFERENT");
            na_xp_msg_release(xp, m);
            return 1;
        }
        got[k] = 1;
        n_got++;
        na_xp_msg_release(xp, m);
    }
    return 0;
}

static int peer_client(const peer_args_t *a, const char *connect)
{
    char list[512], *tok, *save = NULL;
    na_xp_ep_t *eps[PEER_MAX_SERVERS];
    size_t sizes[PEER_MAX_SIZES], max_size = 0;
    int n_eps = 0, n_sizes = 0, r, i, rc = 0, extra = -1;   /* extra: rounds left after --until-file */
    uint32_t seq = 1;
    uint8_t *want = NULL;
    na_xp_t *xp;
    na_status_t st;

    snprintf(list, sizeof(list), "%s", a->sizes);
    for (tok = strtok_r(list, ",", &save); tok && n_sizes < PEER_MAX_SIZES;
         tok = strtok_r(NULL, ",", &save)) {
        sizes[n_sizes] = (size_t)strtoull(tok, NULL, 10);
        if (sizes[n_sizes] > max_size)
            max_size = sizes[n_sizes];
        n_sizes++;
    }
    st = peer_xp_create(a, NULL, &xp);
    if (st != NA_OK) {
        fprintf(stderr, "xp_peer %s: %s\n", a->name, na_errmsg());
        return 1;
    }
    snprintf(list, sizeof(list), "%s", connect);
    for (tok = strtok_r(list, ",", &save); tok && n_eps < PEER_MAX_SERVERS;
         tok = strtok_r(NULL, ",", &save)) {
        char host[128];
        int port;
        if (peer_hostport(tok, host, sizeof(host), &port) != 0) {
            fprintf(stderr, "xp_peer: bad --connect '%s'\n", tok);
            rc = 2;
            goto out;
        }
        st = peer_connect(xp, host, port, a->timeout_ms, &eps[n_eps]);
        if (a->expect_refused || a->expect_fail) {
            printf("REFUSED %s: %s: %s\n", a->name, na_status_string(st), na_errmsg());
            rc = (a->expect_refused ? st == NA_ERR_AUTH : st != NA_OK) ? 0 : 1;
            goto out;
        }
        if (st != NA_OK) {
            fprintf(stderr, "xp_peer %s: %s\n", a->name, na_errmsg());
            rc = 1;
            goto out;
        }
        n_eps++;
    }
    printf("CONNECTED %s to %d\n", a->name, n_eps);
    fflush(stdout);
    if (a->garbage) {
        uint8_t junk[64];
        na_xp_msg_t *m;
        memset(junk, 0xA5, sizeof(junk));
        (void)na_xp_send(eps[0], junk, sizeof(junk), junk, sizeof(junk));
        /* the server must drop us: wait for our loss */
        st = na_xp_recv(xp, a->timeout_ms, &m);
        rc = (st == NA_OK && m->kind == NA_XP_EV_LOST) ? 0 : 1;
        printf("GARBAGE %s: %s\n", a->name, rc == 0 ? "dropped as expected" : "NOT dropped");
        na_xp_msg_release(xp, m);
        goto out;
    }
    want = malloc(max_size ? max_size : 1);
    if (want == NULL) {
        rc = 1;
        goto out;
    }
    for (r = 0; ; r++) {
        if (!a->forever && a->until_file == NULL && r >= a->rounds)
            break;
        if (a->until_file != NULL) {
            if (extra < 0 && access(a->until_file, F_OK) == 0) {
                extra = a->rounds;
                printf("UNTIL %s: %s seen after %d rounds, %d more\n", a->name, a->until_file,
                       r, extra);
                fflush(stdout);
            }
            if (extra == 0)
                break;
            if (extra > 0)
                extra--;
        }
        if (a->burst > 0) {
            if (peer_burst(xp, eps[0], sizes, n_sizes, a->burst, &seq, a->name, a->timeout_ms)) {
                rc = 1;
                goto out;
            }
            continue;
        }
        for (i = 0; i < n_sizes; i++) {
            if (peer_round(xp, eps, n_eps, sizes[i], seq++, a->name, want, a->timeout_ms) != 0) {
                rc = 1;
                goto out;
            }
        }
        if (a->forever || (a->until_file != NULL && extra < 0))
            usleep(20000);
    }
    if (getenv("XP_PEER_DESCRIBE") != NULL)
        na_xp_ep_describe(eps[0], stdout);
    for (i = 0; i < n_eps; i++) {
        na_xp_stats_t s;
        na_xp_ep_stats(eps[i], &s);
        printf("STATS %s->%s sent=%llu/%llu recv=%llu/%llu\n", a->name, na_xp_ep_name(eps[i]),
               (unsigned long long)s.msgs_sent, (unsigned long long)s.bytes_sent,
               (unsigned long long)s.msgs_recv, (unsigned long long)s.bytes_recv);
        peer_bye(eps[i]);
    }
    printf("OK %s rounds=%d sizes=%d servers=%d\n", a->name, a->rounds, n_sizes, n_eps);
out:
    fflush(stdout);
    free(want);
    na_xp_destroy(xp);
    return rc;
}

static int peer_mpi(peer_args_t *a)
{
    na_boot_t b;
    char addr[1024], name[32];
    int i, n;

    if (na_boot_detect(NULL, &b) != NA_OK || b.size < 2) {
        fprintf(stderr, "xp_peer mpi: %s\n", b.size < 2 ? "needs a launcher world of >= 2" : na_errmsg());
        return 1;
    }
    snprintf(name, sizeof(name), "rank%d", b.rank);
    a->name = name;
    if (b.rank > 0) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", a->base_port + b.rank - 1);
        a->clients = 1;
        return peer_server(a, addr);
    }
    addr[0] = '\0';
    for (i = 1, n = 0; i < b.size; i++)
        n += snprintf(addr + n, sizeof(addr) - (size_t)n, "%s127.0.0.1:%d", i > 1 ? "," : "",
                      a->base_port + i - 1);
    return peer_client(a, addr);
}

int main(int argc, char **argv)
{
    peer_args_t a;
    int i;

    memset(&a, 0, sizeof(a));
    a.name = "peer";
    a.secret = "test-secret";
    a.tls = "auto";
    a.sizes = "4096,65536,4194304";
    a.rounds = 3;
    a.clients = 1;
    a.timeout_ms = 5000;
    a.max_ms = 60000;
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fprintf(stderr, "usage: xp_peer server|client|mpi [options] (see the source)\n");
        return 2;
    }
    a.role = argv[1];
    for (i = 2; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--forever")) { a.forever = 1; continue; }
        if (!strcmp(k, "--expect-refused")) { a.expect_refused = 1; continue; }
        if (!strcmp(k, "--garbage")) { a.garbage = 1; continue; }
        if (!strcmp(k, "--skip-server-proof")) { a.skip_server_proof = 1; continue; }
        if (!strcmp(k, "--expect-fail")) { a.expect_fail = 1; continue; }
        if (v == NULL) {
            fprintf(stderr, "xp_peer: %s needs a value\n", k);
            return 2;
        }
        i++;
        if (!strcmp(k, "--listen")) a.listen = v;
        else if (!strcmp(k, "--connect")) a.connect = v;
        else if (!strcmp(k, "--name")) a.name = v;
        else if (!strcmp(k, "--secret")) a.secret = v;
        else if (!strcmp(k, "--tls")) a.tls = v;
        else if (!strcmp(k, "--errmode")) {
            if (na_xp_errmode_parse(v) < 0) {
                fprintf(stderr, "xp_peer: --errmode expects auto, peer or cm\n");
                return 2;
            }
            a.errmode = v;
        }
        else if (!strcmp(k, "--sizes")) a.sizes = v;
        else if (!strcmp(k, "--clients")) a.clients = atoi(v);
        else if (!strcmp(k, "--rounds")) a.rounds = atoi(v);
        else if (!strcmp(k, "--timeout-ms")) a.timeout_ms = atoi(v);
        else if (!strcmp(k, "--max-ms")) a.max_ms = atoi(v);
        else if (!strcmp(k, "--base-port")) a.base_port = atoi(v);
        else if (!strcmp(k, "--burst")) a.burst = atoi(v);
        else if (!strcmp(k, "--until-file")) a.until_file = v;
        else if (!strcmp(k, "--cluster")) a.cluster = v;
        else if (!strcmp(k, "--role")) {
            if (strcmp(v, "storage") && strcmp(v, "compute") && strcmp(v, "tool")) {
                fprintf(stderr, "xp_peer: --role expects storage, compute or tool\n");
                return 2;
            }
            a.hello_role = !strcmp(v, "storage") ? NA_WIRE_ROLE_STORAGE
                   : !strcmp(v, "compute") ? NA_WIRE_ROLE_COMPUTE : NA_WIRE_ROLE_TOOL;
        }
        else if (!strcmp(k, "--test-addr")) {
            size_t n = strlen(v) / 2, j;
            for (j = 0; j < n && j < sizeof(a.test_addr) && strlen(v) % 2 == 0; j++) {
                unsigned x;
                if (sscanf(v + 2 * j, "%2x", &x) != 1)
                    break;
                a.test_addr[j] = (uint8_t)x;
            }
            if (n == 0 || j != n) {
                fprintf(stderr, "xp_peer: --test-addr expects 1..%zu bytes in hex\n",
                        sizeof(a.test_addr));
                return 2;
            }
            a.test_addr_len = n;
        }
        else {
            fprintf(stderr, "xp_peer: unknown option %s\n", k);
            return 2;
        }
    }
    na_log_set_tag(a.name);
    if (!strcmp(a.role, "server") && a.listen)
        return peer_server(&a, a.listen);
    if (!strcmp(a.role, "client") && a.connect)
        return peer_client(&a, a.connect);
    if (!strcmp(a.role, "mpi") && a.base_port > 0)
        return peer_mpi(&a);
    fprintf(stderr, "xp_peer: need server --listen, client --connect or mpi --base-port\n");
    return 2;
}
