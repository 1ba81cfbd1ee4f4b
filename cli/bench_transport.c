/* cli/bench_transport.c — `nearattn bench transport`: round trip and
 * bandwidth of nearattn messages over the transport (rdma/), beside
 * ucx_perftest run in the same benchmark on the same transport and sizes.
 *
 * - Round trip: ECHO ping-pong (64-byte wire header + payload each way) at
 *   the sizes decode sends: q, k_new, v_new rows of one layer for batch
 *   1, 8, 64, 256 of a model with 32 heads x head_dim 128 in f16 (24 KiB per
 *   request). Median over the round trips; reference: 2 x the 50th-percentile
 *   one-way latency of `ucx_perftest -t ucp_am_lat -H 64` (which reports half
 *   the round trip).
 * - Bandwidth: a stream of ECHO messages flagged MORE (not answered) at
 *   prefill sizes 1, 4, 16 MiB, --window in flight (default 1), ended by one
 *   empty ECHO that is answered; reference: `ucx_perftest -t ucp_am_bw -H 64
 *   -O window` overall bandwidth.
 * Both sides busy-poll and are pinned to CPUs 0 and 1, like ucx_perftest -c.
 * Ours and ucx_perftest alternate (--trials) so that both see the same
 * machine; each figure is the median over its trials, spread = over ours.
 * The server is this program started again (fork/exec of /proc/self/exe)
 * with --serve. */
#define _GNU_SOURCE 1        /* sched_setaffinity, CPU_SET */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cluster/proc.h"
#include "common/log.h"
#include "common/wire.h"
#include "rdma/transport.h"
#include "rdma/xp_echo.h"

#define BT_SECRET   "bench-transport"
#define BT_ROW      (32 * 128 * 2)      /* one f16 row set of 32 heads x 128 */
#define BT_TRIALS_MAX 9

typedef struct {
    na_xp_tls_t     tls;
    const char     *tls_arg;
    na_xp_errmode_t errmode;
    int             perftest;          /* run ucx_perftest beside (default 1) */
    int             port;              /* perftest base port */
    int             window;            /* sends in flight in the bandwidth test */
    long            extra_size;        /* --size B: one more round-trip size (0 = none) */
    int             serve;             /* --serve: be the echo server */
    int             trials;            /* --trials N (default 3, 1 with --quick) */
    na_cli_bench_opts_t common;
} bt_args_t;

/* The UCX_TLS ucx_perftest gets for our choice: the transport's own. */
static const char *bt_perftest_tls(const bt_args_t *a)
{
    return na_xp_tls_ucx(a->tls, a->tls_arg);
}

static na_status_t bt_xp_create(const bt_args_t *a, const char *name, na_xp_t **xp_p)
{
    na_xp_opts_t o;
    memset(&o, 0, sizeof(o));
    o.name = name;
    o.cluster = "bench";
    o.tls = a->tls;
    o.tls_raw = a->tls_arg;
    o.errmode = a->errmode;
    o.secret = (const uint8_t *)BT_SECRET;
    o.secret_len = strlen(BT_SECRET);
    o.timeout_ms = 10000;
    /* busy-poll like ucx_perftest, but go to sleep 100 ms after the last
     * message, so the idle echo server does not steal the CPU that
     * ucx_perftest runs on next (its server starts 0.5 s before its client) */
    o.spin_us = 100000;
    return na_xp_create(&o, xp_p);
}

/* Pin the calling process to one CPU (the client on 0, the server on 1, as
 * ucx_perftest -c), so the two busy-polling sides do not share a core. */
static void bt_pin(int cpu)
{
    cpu_set_t set;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
}

/* --serve: echo until the client leaves. Prints "PORT n" on stdout first. */
static int bt_serve(const bt_args_t *a)
{
    na_xp_t *xp = NULL;
    int port = 0, done = 0;
    na_status_t st;

    bt_pin(1);
    st = bt_xp_create(a, "bench-server", &xp);

    if (st == NA_OK)
        st = na_xp_listen(xp, "127.0.0.1", 0, &port);
    if (st != NA_OK) {
        fprintf(stderr, "bench transport server: %s\n", na_errmsg());
        na_xp_destroy(xp);
        return 1;
    }
    printf("PORT %d\n", port);
    fflush(stdout);
    while (!done) {
        na_xp_msg_t *m;
        st = na_xp_recv(xp, 60000, &m);
        if (st != NA_OK)
            break;                         /* nobody for a minute: give up */
        if (m->kind == NA_XP_EV_LOST)
            done = 1;
        else if (m->kind == NA_XP_MSG_DATA && na_xp_echo_serve(m) != NA_OK)
            done = 1;
        na_xp_msg_release(xp, m);
    }
    na_xp_destroy(xp);
    return 0;
}

/* Start the echo server (this program with --serve, cluster/proc.h); its
 * port in *port_p. */
static na_status_t bt_spawn(const bt_args_t *a, pid_t *pid_p, int *port_p)
{
    char exe[4096], line[64];
    char *argv[] = { exe, "bench", "transport", "--serve", "--tls", (char *)a->tls_arg,
                     "--errmode", (char *)na_xp_errmode_name(a->errmode), NULL };
    na_proc_opts_t po = { argv, NULL, 0, NULL, NULL };
    na_status_t st;
    int fd;
    FILE *f;

    po.out_fd_p = &fd;
    st = na_proc_self_exe(exe, sizeof(exe));
    if (st == NA_OK)
        st = na_proc_spawn(&po, pid_p);
    if (st != NA_OK)
        return st;
    f = fdopen(fd, "r");
    if (f == NULL || fgets(line, sizeof(line), f) == NULL || sscanf(line, "PORT %d", port_p) != 1) {
        if (f != NULL)
            fclose(f);
        else
            close(fd);
        na_proc_stop(pid_p, 1, SIGKILL, 0);
        return na_err(NA_ERR_IO, "bench transport: the echo server did not start");
    }
    fclose(f);
    return NA_OK;
}

/* Wait for the answer to seq (an ECHO REPLY); NA_ERR_PEER on loss. */
static na_status_t bt_wait_reply(na_xp_t *xp, uint32_t seq, size_t len)
{
    for (;;) {
        na_xp_msg_t *m;
        uint32_t rseq;
        unsigned flags;
        na_status_t st = na_xp_recv(xp, 10000, &m);
        if (st != NA_OK)
            return na_err(st, "bench transport: no answer to message %u", seq);
        if (m->kind != NA_XP_MSG_DATA) {
            na_xp_msg_release(xp, m);
            return na_err(NA_ERR_PEER, "bench transport: the echo server was lost");
        }
        st = na_xp_echo_parse(m, &rseq, &flags);
        if (st == NA_OK && rseq == seq && m->len != len)
            st = na_err(NA_ERR_PROTO, "bench transport: answer of %zu bytes, sent %zu", m->len, len);
        na_xp_msg_release(xp, m);
        if (st != NA_OK)
            return st;
        if (rseq == seq)
            return NA_OK;
    }
}

/* One ECHO of len bytes to ep with sequence seq, sent and answered. */
static na_status_t bt_round_trip(na_xp_t *xp, na_xp_ep_t *ep, const na_xp_buf_t *buf, size_t len,
                                 uint32_t seq)
{
    na_xp_op_t *op;
    na_status_t st = na_xp_echo_start(ep, seq, 0, buf->ptr, len, buf, &op);
    if (st == NA_OK)
        st = na_xp_op_wait(xp, op, -1);
    return st == NA_OK ? bt_wait_reply(xp, seq, len) : st;
}

/* Round trips of len bytes: iters per repeat, reps repeats. Median of all
 * round trips (us) in *med_p; spread of the repeats' medians in *spread_p. */
static na_status_t bt_rtt(na_xp_t *xp, na_xp_ep_t *ep, const na_xp_buf_t *buf, size_t len,
                          int iters, int reps, double *med_p, double *spread_p)
{
    double *all = malloc(sizeof(double) * (size_t)iters * (size_t)reps);
    double *rep_med = malloc(sizeof(double) * (size_t)reps);
    double *tmp = malloc(sizeof(double) * (size_t)iters);
    uint32_t seq = 1;
    na_status_t st = NA_OK;
    int r, i;

    if (all == NULL || rep_med == NULL || tmp == NULL) {
        st = na_err(NA_ERR_NOMEM, "bench transport: out of memory");
        goto out;
    }
    for (i = 0; i < iters / 4 + 4 && st == NA_OK; i++)              /* warm-up */
        st = bt_round_trip(xp, ep, buf, len, seq++);
    for (r = 0; r < reps && st == NA_OK; r++) {
        for (i = 0; i < iters && st == NA_OK; i++) {
            double t0 = na_bench_now();
            st = bt_round_trip(xp, ep, buf, len, seq++);
            tmp[i] = (na_bench_now() - t0) * 1e6;
            all[r * iters + i] = tmp[i];
        }
        rep_med[r] = na_bench_median(tmp, iters);
    }
    if (st == NA_OK) {
        *med_p = na_bench_median(all, iters * reps);
        *spread_p = na_bench_spread(rep_med, reps);
    }
out:
    free(all);
    free(rep_med);
    free(tmp);
    return st;
}

/* One-way stream of n messages of len bytes, window in flight, then one
 * answered empty ECHO. GB/s (1e9) per repeat; median and spread. */
static na_status_t bt_bw(na_xp_t *xp, na_xp_ep_t *ep, const na_xp_buf_t *buf, size_t len,
                         int n, int reps, int window, double *gbs_p, double *spread_p)
{
    enum { WINDOW = 64 };
    double v[16];
    uint32_t seq = 1000000;
    na_status_t st = NA_OK;
    int r;

    if (reps > 16)
        reps = 16;
    for (r = -1; r < reps && st == NA_OK; r++) {                  /* r = -1: warm-up */
        na_xp_op_t *win[WINDOW] = { NULL };
        double t0 = na_bench_now();
        int i;
        for (i = 0; i < n && st == NA_OK; i++) {
            int slot = i % window;
            if (win[slot] != NULL) {
                st = na_xp_op_wait(xp, win[slot], -1);
                win[slot] = NULL;
                if (st != NA_OK)
                    break;
            }
            st = na_xp_echo_start(ep, seq++, NA_WIRE_F_MORE, buf->ptr, len, buf, &win[slot]);
        }
        for (i = 0; i < WINDOW; i++) {
            na_status_t st2 = na_xp_op_wait(xp, win[i], -1);
            if (st == NA_OK)
                st = st2;
        }
        if (st == NA_OK)
            st = na_xp_echo_send(ep, seq, 0, NULL, 0);
        if (st == NA_OK)
            st = bt_wait_reply(xp, seq, 0);
        seq++;
        if (r >= 0)
            v[r] = (double)len * n / (na_bench_now() - t0) / 1e9;
    }
    if (st == NA_OK) {
        double c[16];
        memcpy(c, v, sizeof(double) * (size_t)reps);
        *gbs_p = na_bench_median(v, reps);
        *spread_p = na_bench_spread(c, reps);
    }
    return st;
}

/* Run ucx_perftest (server + client on loopback) and parse its final line:
 * 50%-ile latency (us) and overall bandwidth (MB/s, 2^20). 0 on success. */
static int bt_perftest(const bt_args_t *a, const char *test, size_t len, int iters, int port,
                       double *lat_p, double *bw_p)
{
    char cmd[1024], extra[64], line[512], opts[48];
    const char *tls = bt_perftest_tls(a);
    int found = 0;
    FILE *p;

    snprintf(extra, sizeof(extra), "%s%s%s", tls ? "UCX_TLS=" : "", tls ? tls : "", tls ? " " : "");
    snprintf(opts, sizeof(opts), "%s -O %d",
             na_xp_errmode_resolve(a->tls, a->errmode) == NA_XP_ERRMODE_PEER ? "-e" : "",
             strstr(test, "bw") ? a->window : 1);
    snprintf(cmd, sizeof(cmd),
             "%sucx_perftest -c 1 -p %d -t %s -s %zu -H %d -n %d -w %d -f %s >/dev/null 2>&1 & "
             "sleep 0.5; %sucx_perftest 127.0.0.1 -c 0 -p %d -t %s -s %zu -H %d -n %d -w %d -f %s 2>&1; "
             "wait",
             extra, port, test, len, NA_WIRE_HDR_SIZE, iters, iters / 10 + 1, opts,
             extra, port, test, len, NA_WIRE_HDR_SIZE, iters, iters / 10 + 1, opts);
    p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    while (fgets(line, sizeof(line), p) != NULL) {
        double it, l50, lavg, lall, bwavg, bwall;
        if (sscanf(line, "%lf %lf %lf %lf %lf %lf", &it, &l50, &lavg, &lall, &bwavg, &bwall) == 6 &&
            (int)it == iters) {
            *lat_p = l50;
            *bw_p = bwall;
            found = 1;
        }
    }
    pclose(p);
    return found ? 0 : -1;
}

static void bt_usage(FILE *f)
{
    fprintf(f, "usage: nearattn bench transport [--tls auto|shm|tcp|UCX_TLS] [--errmode auto|peer|cm]\n"
               "                                [--no-perftest] [--port P] [options]\n\n"
               "Round trip (decode sizes: q,k,v of batch 1/8/64/256, 32 heads x 128, f16) and\n"
               "bandwidth (prefill sizes 1/4/16 MiB) of nearattn ECHO messages, beside\n"
               "ucx_perftest ucp_am_lat / ucp_am_bw on the same UCX_TLS and sizes.\n\n"
               "  --tls T        transport (default shm)\n"
               "  --errmode M    auto (default): cm for tls shm, peer otherwise (as nodes do);\n"
               "                 peer: UCP_ERR_HANDLING_MODE_PEER (ucx_perftest -e);\n"
               "                 cm: no UCX peer handling (UCX 1.13 then uses posix/sysv shm)\n"
               "  --no-perftest  skip the ucx_perftest reference\n"
               "  --port P       base TCP port for ucx_perftest (default 23790)\n"
               "  --size B       also measure the round trip of B-byte messages\n"
               "  --window N     bandwidth test: sends in flight, also ucx_perftest -O\n"
               "                 (default 1, max 64)\n"
               "  --trials N     alternate ours / ucx_perftest N times per size (default 3,\n"
               "                 1 with --quick); figures are medians over the trials\n"
               NA_CLI_BENCH_OPTS_HELP);
}

/* transport's options beyond its tables (ctx: the bt_args_t they set). */
static int bt_opt(const char *cmd, void *ctx, int argc, char **argv, int *i)
{
    bt_args_t *a = ctx;
    const char *f = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;

    if (v == NULL)
        return 0;
    ++*i;
    if (!strcmp(f, "--tls")) {
        a->tls_arg = v;
        a->tls = na_xp_tls_parse(v);
    } else if (!strcmp(f, "--errmode")) {
        if (na_xp_errmode_parse(v) < 0) {
            fprintf(stderr, "nearattn %s: --errmode expects auto, peer or cm\n", cmd);
            return 2;
        }
        a->errmode = (na_xp_errmode_t)na_xp_errmode_parse(v);
    } else if (!strcmp(f, "--size")) {
        if (na_cli_int(cmd, f, v, 0, 1L << 30, &a->extra_size) != NA_OK)
            return 2;
    } else {
        --*i;
        return 0;
    }
    return 1;
}

int na_cli_bench_transport(int argc, char **argv)
{
    static const int batches[] = { 1, 8, 64, 256 };
    static const size_t bulk[] = { (size_t)1 << 20, (size_t)4 << 20, (size_t)16 << 20 };
    bt_args_t a;
    na_bench_t *b = NULL;
    na_xp_t *xp = NULL;
    na_xp_ep_t *ep = NULL;
    na_xp_buf_t *buf = NULL;
    pid_t pid = -1;
    int port = 0, rc = 1, i, trials, pport = 0;
    size_t k;
    na_status_t st;
    char name[128];
    const na_cli_num_t num[] = {
        { "--trials", 1, BT_TRIALS_MAX, &a.trials }, { "--window", 1, 64, &a.window },
        { "--port", 1024, 65000, &a.port },
    };
    const na_cli_switch_t sw[] = { { "--serve", &a.serve, 1 }, { "--no-perftest", &a.perftest, 0 } };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]),
                                     .sw = sw, .n_sw = sizeof(sw) / sizeof(sw[0]),
                                     .own = bt_opt, .ctx = &a };

    memset(&a, 0, sizeof(a));
    a.tls = NA_XP_TLS_SHM;
    a.tls_arg = "shm";
    a.perftest = 1;
    a.port = 23790;
    a.window = 1;
    a.trials = 3;
    rc = na_cli_bench_parse("transport", argc, argv, &a.common, bt_usage, &own);
    if (rc >= 0)
        return rc;
    rc = 1;
    if (a.serve)
        return bt_serve(&a);
    trials = a.common.quick && a.trials == 3 ? 1 : a.trials;

    st = na_bench_create("transport", &b);
    if (st == NA_OK)
        st = bt_spawn(&a, &pid, &port);
    bt_pin(0);
    if (st == NA_OK)
        st = bt_xp_create(&a, "bench-client", &xp);
    if (st == NA_OK)
        st = na_xp_connect(xp, "127.0.0.1", port, &ep);
    if (st == NA_OK)
        st = na_xp_buf_create(xp, bulk[2], NA_XP_MEM_HOST, &buf);
    if (st != NA_OK)
        goto out;
    for (k = 0; k < buf->size; k++)                   /* never time on zeros */
        ((uint8_t *)buf->ptr)[k] = (uint8_t)(k * 131 + 7);

    /* Ours and ucx_perftest alternate, `trials` times per size, so both see
     * the same machine conditions; each figure is the median of its trials. */
    for (i = a.extra_size > 0 ? -1 : 0; i < (int)(sizeof(batches) / sizeof(batches[0])); i++) {
        size_t len = i < 0 ? (size_t)a.extra_size : (size_t)batches[i] * 3 * BT_ROW;
        int iters = a.common.quick ? 50 : (len > ((size_t)1 << 20) ? 100 : 400);
        double ours[BT_TRIALS_MAX], refs[BT_TRIALS_MAX];
        int t, n_ref = 0;
        for (t = 0; t < trials; t++) {
            double med = 0, spread = 0, plat = 0, pbw = 0;
            st = bt_rtt(xp, ep, buf, len, iters, 2, &med, &spread);
            if (st != NA_OK)
                goto out;
            ours[t] = med;
            if (a.perftest && bt_perftest(&a, "ucp_am_lat", len, iters * 5, a.port + pport++ % 200,
                                          &plat, &pbw) == 0)
                refs[n_ref++] = 2 * plat;
        }
        if (i < 0)
            snprintf(name, sizeof(name), "round trip %zu B", len);
        else
            snprintf(name, sizeof(name), "round trip q,k,v batch %d (%zu KiB)", batches[i], len >> 10);
        {
            double sp = na_bench_spread(ours, trials);   /* sorts: median after */
            double ref_v = n_ref > 0 ? na_bench_median(refs, n_ref) : 0;
            st = na_bench_add(b, name, na_bench_median(ours, trials), "us", sp,
                              n_ref > 0 ? "2 x ucx_perftest ucp_am_lat p50" : NULL, ref_v);
        }
        if (st != NA_OK)
            goto out;
    }
    for (i = 0; i < (int)(sizeof(bulk) / sizeof(bulk[0])); i++) {
        size_t len = bulk[i];
        int n = (int)(((size_t)(a.common.quick ? 64 : 256) << 20) / len);
        double ours[BT_TRIALS_MAX], refs[BT_TRIALS_MAX];
        int t, n_ref = 0;
        if (n < 8)
            n = 8;
        for (t = 0; t < trials; t++) {
            double gbs = 0, spread = 0, plat = 0, pbw = 0;
            st = bt_bw(xp, ep, buf, len, n, 2, a.window, &gbs, &spread);
            if (st != NA_OK)
                goto out;
            ours[t] = gbs;
            if (a.perftest && bt_perftest(&a, "ucp_am_bw", len, n * 5, a.port + pport++ % 200,
                                          &plat, &pbw) == 0)
                refs[n_ref++] = pbw * 1048576.0 / 1e9;
        }
        snprintf(name, sizeof(name), "bandwidth %zu MiB messages", len >> 20);
        {
            double sp = na_bench_spread(ours, trials);
            double ref_v = n_ref > 0 ? na_bench_median(refs, n_ref) : 0;
            st = na_bench_add(b, name, na_bench_median(ours, trials), "GB/s", sp,
                              n_ref > 0 ? "ucx_perftest ucp_am_bw" : NULL, ref_v);
        }
        if (st != NA_OK)
            goto out;
    }
    {
        na_xp_stats_t s;
        na_xp_ep_stats(ep, &s);
        na_bench_note(b, "tls %s, errmode %s, UCX_TLS %s; client counted %llu msgs / %.1f MiB "
                      "sent, %llu msgs received", a.tls_arg,
                      na_xp_errmode_name(na_xp_errmode(xp)),
                      bt_perftest_tls(&a) ? bt_perftest_tls(&a) : "(UCX default)",
                      (unsigned long long)s.msgs_sent, s.bytes_sent / 1048576.0,
                      (unsigned long long)s.msgs_recv);
        na_bench_note(b, "targets: round trip <= 1.25 x reference; bandwidth >= 0.90 x reference "
                      "(messages carry a 64-byte wire header; ucx_perftest -H 64)");
        if (na_xp_errmode(xp) == NA_XP_ERRMODE_PEER && a.tls == NA_XP_TLS_SHM)
            na_bench_note(b, "errmode peer: UCX 1.13 drops posix/sysv (no peer-failure support), "
                          "so 'shm' moves data over tcp loopback on both sides");
    }
    rc = na_cli_bench_finish("transport", b, &a.common);
out:
    if (st != NA_OK)
        rc = na_cli_fail("bench transport", st);
    na_xp_buf_destroy(xp, buf);
    if (ep != NULL)
        na_xp_ep_close(ep);
    na_xp_destroy(xp);
    if (pid > 0) {
        int status, k;
        for (k = 0; k < 50 && waitpid(pid, &status, WNOHANG) == 0; k++)
            usleep(100000);
        if (k == 50) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
    }
    na_bench_destroy(b);
    return rc;
}
