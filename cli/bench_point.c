/* cli/bench_point.c — one point of the comparison sweep, run as its own
 * process so it can sit in the compute network namespace of a link:
 *
 *   nearattn bench e2e --point --config L --mode M --batch B --ctx C --new N
 *   nearattn bench e2e --point --config L --probe
 *
 * A point generates N tokens greedily for B requests whose prompts are C
 * tokens long, as compute node c0 of layout L (the storage nodes of L must be
 * running), and prints one line "POINT k=v ..." (see na_e2e_point_t): decode
 * tokens/s, the per-step split, bytes per layer counted by the transport
 * beside the analytic count (docs/benchmarks.md), t_m and t_a.
 *
 * The probe measures the link itself with the same transport, without the
 * storage node's KV store in the way: ECHO messages to storage node 0 (a
 * 64-byte round trip, a 16 MiB one-way stream, a 16 MiB round trip); it
 * prints "PROBE up_Bps=.. down_Bps=.. rtt_s=..". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/e2e_sweep.h"
#include "common/bench.h"
#include "common/config.h"
#include "common/model.h"
#include "common/plan.h"
#include "common/wire_stats.h"
#include "compute-node/attn_kvfetch.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"
#include "compute-node/storage_client.h"
#include "rdma/xp_cfg.h"
#include "rdma/xp_echo.h"

#define PT_MAX_B   4096      /* requests of one point */
#define PT_MAX_CAP 65536     /* reservations of a --capacity probe */

static const char *const na_e2e_mode_names[NA_E2E_N_MODES] = {
    "monolithic", "kv-fetch", "offload", "offload+wb", "offload+wb+pipe",
    "offload+wb+pipe+xcache",
};

const char *na_e2e_mode_name(na_e2e_mode_t m)
{
    return na_cli_name(na_e2e_mode_names, NA_E2E_N_MODES, (int)m);
}

int na_e2e_mode_parse(const char *s)
{
    return na_cli_lookup(na_e2e_mode_names, NA_E2E_N_MODES, s);
}

int na_e2e_point_parse(const char *line, na_e2e_point_t *p)
{
    const char *s = strstr(line, "POINT ");
    char key[32];
    double v;
    int n;

    if (s == NULL)
        return -1;
    memset(p, 0, sizeof(*p));
    s += 6;
    while (sscanf(s, " %31[a-z_]=%lf%n", key, &v, &n) == 2) {
        s += n;
#define PF(name, field) if (!strcmp(key, name)) p->field = v
#define PI(name, field) if (!strcmp(key, name)) p->field = (int)v
        PI("mode", mode); PI("batch", batch); PI("ctx", ctx); PI("nodes", nodes);
        PI("new", new_tokens); PI("ok", ok);
        PF("tok_s", tok_s); PF("step_s", step_s); PF("compute_s", compute_s);
        PF("net_s", net_s); PF("attn_s", attn_s); PF("disk_s", disk_s); PF("idle_s", idle_s);
        PF("bytes_out", bytes_out); PF("bytes_in", bytes_in); PF("an_out", an_out);
        PF("an_in", an_in); PF("ssd_bytes", ssd_bytes); PF("tm", tm); PF("ta", ta);
        PF("rss", rss); PF("rss_dec", rss_dec); PF("ttft_s", ttft);
#undef PF
#undef PI
    }
    return 0;
}

int na_e2e_point_run(const na_link_t *l, const char *exe, const char *cfg, int mode, int B,
                     int C, int n_new, int threads, char *const *more, int timeout_s,
                     na_e2e_point_t *p)
{
    char b[16], c[16], n[16], t[16], out[4096];
    char *argv[16 + 8 + 1] = { (char *)exe, "bench", "e2e", "--point", "--config", (char *)cfg,
                               "--mode", (char *)na_e2e_mode_name((na_e2e_mode_t)mode),
                               "--batch", b, "--ctx", c, "--new", n, "--threads", t };
    int k, rc;

    for (k = 0; more != NULL && more[k] != NULL && k < 8; k++)
        argv[16 + k] = more[k];
    snprintf(b, sizeof(b), "%d", B);
    snprintf(c, sizeof(c), "%d", C);
    snprintf(n, sizeof(n), "%d", n_new);
    snprintf(t, sizeof(t), "%d", threads);
    rc = na_e2e_run_capture(l, argv, out, sizeof(out), timeout_s);
    if (rc != 0 || na_e2e_point_parse(out, p) != 0)
        p->ok = 0;
    return rc;
}

/* Prompt tokens of request i (deterministic, never all one token). */
static void pt_requests(na_engine_t *e, na_request_t **r, int n, int ctx, int n_new)
{
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    int *toks = malloc((size_t)ctx * sizeof(int)), i, j;
    for (i = 0; i < n; i++) {
        r[i] = NULL;
        if (toks == NULL)
            continue;
        for (j = 0; j < ctx; j++)
            toks[j] = 3 + (j * 7 + i * 13) % (e->cfg.vocab_size - 3);
        if (na_request_create(e, i, toks, ctx, n_new, &sc, &r[i]) != NA_OK)
            r[i] = NULL;
    }
    free(toks);
}

/* Resident memory of this process, bytes, from /proc/self/status: key
 * "VmHWM" (peak) or "VmRSS" (now); 0 when unknown. */
static double pt_rss(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kl = strlen(key);
    double kb = 0;

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (!strncmp(line, key, kl) && line[kl] == ':' && sscanf(line + kl + 1, "%lf", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024.0;
}

typedef struct {
    na_asvc_t      *svc;
    int             want;        /* first tokens before decode starts */
    int             seen;
    na_asvc_stats_t at_decode;   /* counters when every request had its first token */
    double          t0, t_last;  /* decode window: after that snapshot .. last token */
    double          t_start;     /* generation started (engine and connections made) */
    double          t_first;     /* the first token of any request */
    double          rss_dec;     /* resident bytes when decode starts */
} pt_snap_t;

/* Token callback: the decode window starts once every request has its first
 * token (prefill done) and ends at the last token, so admission, release and
 * the counters' own round trips stay out of the decode time. */
static void pt_on_token(void *user, const na_request_t *r, int token)
{
    pt_snap_t *s = user;
    (void)r;
    (void)token;
    if (s->seen == 0)
        s->t_first = na_bench_now();
    if (++s->seen == s->want) {
        if (s->svc != NULL)
            na_asvc_stats(s->svc, &s->at_decode);
        s->rss_dec = pt_rss("VmRSS");
        s->t0 = na_bench_now();
    }
    s->t_last = na_bench_now();
}

/* ---- counting wrapper ---------------------------------------------------
 * Forwards every call to the real service (na_asvc_fwd_t) and separates the
 * decode phase's wire bytes from the prefill's: the counters are read once,
 * just before the first decode submit after every remote request finished
 * its prefill (`want` prefill_done calls); from then on each submit adds its
 * analytic bytes (common/plan.h, the entries' real positions). So measured
 * and analytic cover exactly the same submits, even when a second batch is
 * admitted while the first one already decodes. */
typedef struct {
    na_asvc_fwd_t   fwd;
    na_plan_kind_t  kind;
    int             nodes;
    int             want, done;   /* remote requests; prefill_done calls seen */
    int             snapped;
    na_asvc_stats_t snap;
    double          an_out, an_in;
    long            layer_steps;  /* submitted entries after the snapshot / B */
    long            entries;
} pt_count_t;

static na_status_t pc_prefill_done(na_asvc_t *s, uint64_t req)
{
    pt_count_t *c = (pt_count_t *)s;
    c->done++;
    return na_asvc_prefill_done(c->fwd.in, req);
}
static na_status_t pc_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    pt_count_t *c = (pt_count_t *)s;
    if (!c->snapped && c->done >= c->want) {
        na_asvc_stats(c->fwd.in, &c->snap);
        c->snapped = 1;
    }
    if (c->snapped) {
        int i;
        for (i = 0; i < n; i++) {
            /* one entry at its own position: the per-entry bytes; the
             * DECODE_ATTN framing is added per message below */
            na_plan_traffic_t t;
            if (c->kind == NA_PLAN_KVFETCH) {
                na_model_config_t one = s->mc;
                one.n_layers = 1;
                na_plan_traffic(&one, c->kind, 1, 1, e[i].pos, 1, &t);
                c->an_out += t.out;
                c->an_in += t.in;
            }
        }
        if (c->kind == NA_PLAN_OFFLOAD) {
            na_model_config_t one = s->mc;
            na_plan_traffic_t t;
            one.n_layers = 1;
            na_plan_traffic_nodes(&one, c->kind, n, 1, c->nodes, 0, 1, &t);
            c->an_out += t.out;
            c->an_in += t.in;
        }
        c->entries += n;
    }
    (void)layer;
    return na_asvc_submit(c->fwd.in, batch, layer, e, n);
}

/* Wrap svc (owned from now on, also on failure). */
static na_status_t pt_count_wrap(na_asvc_t *svc, na_plan_kind_t kind, int nodes, int want,
                                 na_asvc_t **s_p)
{
    pt_count_t *c = (pt_count_t *)na_asvc_fwd_new(svc, sizeof(*c), svc->kind);
    if (c == NULL) {
        na_asvc_destroy(svc);
        return na_err(NA_ERR_NOMEM, "bench e2e: out of memory");
    }
    c->fwd.ops.prefill_done = pc_prefill_done;
    c->fwd.ops.submit = pc_submit;
    c->kind = kind;
    c->nodes = nodes;
    c->want = want;
    *s_p = &c->fwd.base;
    return NA_OK;
}

/* Storage-side counter `key` summed over the layout's storage nodes, read
 * over a connection of our own as compute node c1 (0 when unavailable). */
/* The node counter of attention-service time in mode (common/wire_stats.h). */
static na_stat_node_t pt_node_time_key(na_e2e_mode_t mode)
{
    return mode == NA_E2E_KVFETCH ? NA_STAT_FETCH_NS : NA_STAT_DECODE_NS;
}

static double pt_node_stat(const na_cfg_t *cfg, na_stat_node_t key)
{
    na_xp_opts_t xo;
    na_ses_opts_t so;
    na_xp_t *xp = NULL;
    na_ses_t *ses = NULL;
    double sum = 0;
    int j;

    na_xp_opts_from_cfg(cfg, "c1", NA_WIRE_ROLE_COMPUTE, 1 << 20, &xo);
    if (na_xp_create(&xo, &xp) != NA_OK)
        return 0;
    memset(&so, 0, sizeof(so));
    if (na_ses_create(xp, &so, NULL, &ses) != NA_OK) {
        na_xp_destroy(xp);
        return 0;
    }
    for (j = 0; j < cfg->n_storage; j++) {
        const na_cfg_node_t *nd = &cfg->nodes[cfg->n_compute + j];
        na_peer_t *sc;
        na_stats_view_t v;
        if (na_ses_connect(ses, nd->host, (int)nd->port, &sc) != NA_OK)
            continue;
        if (na_sc_stats(sc, 0, NA_SC_WAIT_MS, &v) == NA_OK)
            sum += (double)v.node[key];
        na_peer_close(sc, 0, "done");
    }
    na_ses_destroy(ses);
    na_xp_destroy(xp);
    return sum;
}

/* Wait for the ECHO answer with sequence seq (bounded). */
static na_status_t pt_echo_wait(na_xp_t *xp, uint32_t seq)
{
    double t0 = na_bench_now();
    while (na_bench_now() - t0 < 60.0) {
        na_xp_msg_t *msg;
        uint32_t sq;
        unsigned fl;
        if (na_xp_recv(xp, 100, &msg) != NA_OK)
            continue;
        if (msg->kind == NA_XP_EV_LOST) {
            na_xp_msg_release(xp, msg);
            return na_err(NA_ERR_PEER, "probe: storage node lost");
        }
        if (msg->kind == NA_XP_MSG_DATA && na_xp_echo_parse(msg, &sq, &fl) == NA_OK &&
            (fl & NA_WIRE_F_REPLY) && sq == seq) {
            na_xp_msg_release(xp, msg);
            return NA_OK;
        }
        na_xp_msg_release(xp, msg);
    }
    return na_err(NA_ERR_TIMEOUT, "probe: no ECHO answer within 60 s");
}

/* The link probe (see the top comment): ECHO messages to storage node 0 —
 * a 64-byte round trip (rtt), a stream of 4 x 4 MiB one way closed by a small
 * answered message (up), a 16 MiB round trip (its return half: down). */
static int pt_probe(const na_cfg_t *cfg)
{
    const size_t big = 16u << 20, part = 4u << 20;
    const na_cfg_node_t *nd = &cfg->nodes[cfg->n_compute];
    na_xp_opts_t xo;
    na_ses_opts_t so;
    na_xp_t *xp = NULL;
    na_ses_t *ses = NULL;
    na_peer_t *sc = NULL;
    na_xp_ep_t *ep;
    uint8_t *buf = NULL;
    double up[3], down[3], rtt[9], t0, t;
    uint32_t seq = 1;
    size_t i;
    int k, rc = 1;

    na_xp_opts_from_cfg(cfg, "c0", NA_WIRE_ROLE_COMPUTE, (size_t)NA_WIRE_MAX_PAYLOAD, &xo);
    buf = malloc(big);
    memset(&so, 0, sizeof(so));
    if (buf == NULL || na_xp_create(&xo, &xp) != NA_OK ||
        na_ses_create(xp, &so, NULL, &ses) != NA_OK ||
        na_ses_connect(ses, nd->host, (int)nd->port, &sc) != NA_OK) {
        fprintf(stderr, "probe: %s\n", buf == NULL ? "out of memory" : na_errmsg());
        goto out;
    }
    ep = na_peer_ep(sc);
    for (i = 0; i < big; i++)               /* never time on all-zero data */
        buf[i] = (uint8_t)(i * 131u + 7u);
    for (k = 0; k < 10; k++) {              /* first one: warm-up */
        t0 = na_bench_now();
        if (na_xp_echo_send(ep, seq, 0, buf, 64) != NA_OK || pt_echo_wait(xp, seq++) != NA_OK)
            goto err_probe;
        if (k > 0)
            rtt[k - 1] = na_bench_now() - t0;
    }
    t = na_bench_median(rtt, 9);
    for (k = 0; k < 3; k++) {
        size_t off;
        t0 = na_bench_now();
        for (off = 0; off < big; off += part)
            if (na_xp_echo_send(ep, seq++, NA_WIRE_F_MORE, buf, part) != NA_OK)
                goto err_probe;
        if (na_xp_echo_send(ep, seq, 0, buf, 64) != NA_OK || pt_echo_wait(xp, seq++) != NA_OK)
            goto err_probe;
        up[k] = (double)big / (na_bench_now() - t0 - t);
        t0 = na_bench_now();
        if (na_xp_echo_send(ep, seq, 0, buf, big) != NA_OK || pt_echo_wait(xp, seq++) != NA_OK)
            goto err_probe;
        down[k] = 2.0 * big / (na_bench_now() - t0 - t);   /* both ways, on average */
    }
    printf("PROBE up_Bps=%.6g down_Bps=%.6g rtt_s=%.6g\n", na_bench_median(up, 3),
           na_bench_median(down, 3), t);
    rc = 0;
    goto out;
err_probe:
    fprintf(stderr, "probe: %s\n", na_errmsg());
out:
    na_peer_close(sc, 0, "done");
    na_ses_destroy(ses);
    na_xp_destroy(xp);
    free(buf);
    return rc;
}

/* The storage nodes' admission capacity: requests of `tokens` tokens opened
 * (KV reserved) until no node has room, then released. Prints
 * "CAPACITY reqs=N tokens_each=T". */
static int pt_capacity(const na_cfg_t *cfg, na_engine_t *e, int tokens)
{
    na_asvc_t *svc = NULL;
    uint64_t *ids = NULL;
    int n = 0, rc = 1, i;
    na_status_t st = na_asvc_remote_create(cfg, &e->cfg, "c0", &svc);

    ids = calloc(PT_MAX_CAP, sizeof(*ids));
    if (st != NA_OK || ids == NULL) {
        fprintf(stderr, "bench e2e --point --capacity: %s\n",
                ids == NULL ? "out of memory" : na_errmsg());
        goto out;
    }
    while (n < PT_MAX_CAP) {
        uint64_t id = na_asvc_new_id(svc);
        st = na_asvc_open(svc, id, tokens);
        if (st == NA_ERR_NOSPACE)
            break;
        if (st != NA_OK) {
            fprintf(stderr, "bench e2e --point --capacity: %s\n", na_errmsg());
            goto out;
        }
        ids[n++] = id;
    }
    printf("CAPACITY reqs=%d tokens_each=%d%s\n", n, tokens, n == PT_MAX_CAP ? " capped=1" : "");
    rc = 0;
out:
    for (i = 0; i < n; i++)
        na_asvc_release(svc, ids[i], 0);
    na_asvc_destroy(svc);
    free(ids);
    return rc;
}

static void pt_usage(FILE *f)
{
    fprintf(f, "usage: nearattn bench e2e --point --config L (--probe | --capacity --ctx C [--new N]\n"
               "                          | --mode M --batch B --ctx C [--new N] [--threads T]\n"
               "                          [--link-Bps R] [--link-rtt S])\n"
               "One point of the sweep (run by `nearattn bench e2e --sweep` and `bench\n"
               "capacity`, `bench longctx`): prints a POINT (rss / rss_dec: this process's\n"
               "peak resident bytes / resident bytes when decode starts; ttft_s: from the\n"
               "start of generation to the first token),\n"
               "PROBE or CAPACITY (requests of C+N tokens the storage nodes admit) line.\n"
               "Modes: monolithic kv-fetch offload offload+wb\n"
               "offload+wb+pipe offload+wb+pipe+xcache.\n");
}

int na_cli_e2e_point(int argc, char **argv)
{
    const char *cfgp = NULL;
    int mode = -1, B = 1, C = 64, N = 8, threads = 1, probe = 0, i, rc = 1;
    double link_Bps = 0, link_rtt = 0;
    na_cfg_t *cfg = NULL;
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_engine_opts_t eo;
    na_request_t **r = NULL;
    na_e2e_point_t p;
    pt_snap_t snap;
    int capacity = 0, taken;
    const na_cli_switch_t sw[] = { { "--probe", &probe, 1 }, { "--capacity", &capacity, 1 } };
    const na_cli_num_t num[] = {
        { "--batch", 1, 1 << 20, &B }, { "--ctx", 1, 1 << 20, &C }, { "--new", 1, 1 << 20, &N },
        { "--threads", 1, 1 << 20, &threads },
    };

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--point") || !strcmp(a, "e2e"))
            continue;
        if (!strcmp(a, "--help")) {
            pt_usage(stdout);
            return 0;
        } else if (na_cli_switch(sw, sizeof(sw) / sizeof(sw[0]), a)) {
            continue;
        } else if (!strcmp(a, "--link-Bps") && val) {
            link_Bps = atof(argv[++i]);
        } else if (!strcmp(a, "--link-rtt") && val) {
            link_rtt = atof(argv[++i]);
        } else if (!strcmp(a, "--config") && val) {
            cfgp = argv[++i];
        } else if (!strcmp(a, "--mode") && val) {
            if ((mode = na_e2e_mode_parse(argv[++i])) < 0) {
                fprintf(stderr, "nearattn bench e2e --point: unknown mode '%s'\n", argv[i]);
                return 2;
            }
        } else if (val && (taken = na_cli_num("bench e2e --point", num,
                                               sizeof(num) / sizeof(num[0]), argc, argv, &i))) {
            if (taken != 1)
                return taken;
        } else {
            fprintf(stderr, "nearattn bench e2e --point: unknown option '%s'\n", a);
            pt_usage(stderr);
            return 2;
        }
    }
    if (cfgp == NULL || (!probe && !capacity && mode < 0) || B > PT_MAX_B) {
        pt_usage(stderr);
        return 2;
    }
    if (na_cfg_load(cfgp, &cfg) != NA_OK || cfg->model.path == NULL ||
        na_model_open(cfg->model.path, &m) != NA_OK) {
        fprintf(stderr, "bench e2e --point: %s\n", na_errmsg());
        goto out;
    }
    if (probe) {
        rc = pt_probe(cfg);
        goto out;
    }
    eo = (na_engine_opts_t){ "cpu", threads, NA_DTYPE_F16, 0 };
    if (na_engine_create(m, &eo, &e) != NA_OK) {
        fprintf(stderr, "bench e2e --point: %s\n", na_errmsg());
        goto out;
    }
    if (capacity) {
        rc = pt_capacity(cfg, e, C + N);
        goto out;
    }
    r = calloc((size_t)B, sizeof(*r));
    if (r == NULL) {
        fprintf(stderr, "bench e2e --point: out of memory\n");
        goto out;
    }
    memset(&p, 0, sizeof(p));
    p.mode = mode;
    p.batch = B;
    p.ctx = C;
    p.new_tokens = N;
    p.nodes = cfg->n_storage;
    pt_requests(e, r, B, C, N);
    memset(&snap, 0, sizeof(snap));
    snap.want = B;
    snap.t_start = na_bench_now();
    if (mode == NA_E2E_MONO) {
        na_gen_opts_t go;
        na_gen_stats_t gs;
        memset(&go, 0, sizeof(go));
        go.max_batch = B;
        go.on_token = pt_on_token;
        go.user = &snap;
        if (na_generate(e, r, B, &go, &gs) == NA_OK && gs.decode_s > 0 && gs.decode_steps > 0) {
            p.ok = 1;
            p.tok_s = (double)gs.decode_tokens / gs.decode_s;
            p.step_s = gs.decode_s / gs.decode_steps;
            p.compute_s = p.step_s;
            p.tm = p.step_s / m->cfg.n_layers;
        }
    } else {
        na_asvc_t *svc = NULL;
        na_off_opts_t oo;
        na_off_stats_t os;
        double node0, node1, steps, dec;
        na_status_t st;

        node0 = pt_node_stat(cfg, pt_node_time_key(mode));
        st = mode == NA_E2E_KVFETCH ? na_asvc_kvfetch_create(cfg, &e->cfg, "c0", e->kern, &svc)
                                    : na_asvc_remote_create(cfg, &e->cfg, "c0", &svc);
        if (st == NA_OK)
            st = pt_count_wrap(svc, mode == NA_E2E_KVFETCH ? NA_PLAN_KVFETCH : NA_PLAN_OFFLOAD,
                               cfg->n_storage,
                               B - (mode == NA_E2E_OFF_WB_PIPE_XC ? B / 2 : 0), &svc);
        if (st != NA_OK) {
            fprintf(stderr, "bench e2e --point: %s\n", na_errmsg());
            goto out_req;
        }
        memset(&oo, 0, sizeof(oo));
        oo.max_batch = mode == NA_E2E_OFF_WB_PIPE || mode == NA_E2E_OFF_WB_PIPE_XC
                           ? (B + 1) / 2 : B;
        oo.batches_in_flight = B >= 2 && oo.max_batch < B ? 2 : 1;
        oo.xcache = mode == NA_E2E_OFF_WB_PIPE_XC;
        oo.xcache_share = 0.5;
        oo.xcache_host_mb = 4096;
        oo.prefill_chunk = (int)cfg->parallel.prefill_chunk;   /* the layout's */
        oo.prefill_weighted = cfg->parallel.prefill_weighted;
        oo.on_token = pt_on_token;
        oo.user = &snap;
        snap.t_start = na_bench_now();
        st = na_offload_generate(e, svc, r, B, &oo, &os);
        if (st == NA_OK) {
            pt_count_t *c = (pt_count_t *)svc;
            double ls = (double)c->entries / (B - os.xcache_reqs > 0 ? B - os.xcache_reqs : 1);
            p.bytes_out = ls > 0 ? (double)(os.svc.bytes_sent - c->snap.bytes_sent) / ls : 0;
            p.bytes_in = ls > 0 ? (double)(os.svc.bytes_recv - c->snap.bytes_recv) / ls : 0;
            p.an_out = ls > 0 ? c->an_out / ls : 0;
            p.an_in = ls > 0 ? c->an_in / ls : 0;
        }
        na_asvc_destroy(svc);
        node1 = pt_node_stat(cfg, pt_node_time_key(mode));
        if (st != NA_OK || os.failed > 0) {
            fprintf(stderr, "bench e2e --point: %s\n",
                    st != NA_OK ? na_errmsg() : "requests failed");
            goto out_req;
        }
        /* decode window (pt_on_token); steps = tokens per request in it */
        dec = snap.t_last - snap.t0;
        steps = (double)(snap.seen - B) / B;
        if (dec <= 0 || steps <= 0)
            goto out_req;
        p.ok = 1;
        p.tok_s = (double)(snap.seen - B) / dec;
        p.step_s = dec / steps;
        {
            double c_bytes_step = (p.bytes_out + p.bytes_in) * m->cfg.n_layers;
            /* whole-run counters less the prefill phase, per decode step:
             * compute_s holds submit_s (sending; for kv-fetch the whole
             * fetch + append + local attention) and xcache_s */
            double gsteps = (double)os.gen.decode_tokens / B;
            double pure = os.compute_s - os.prefill_s - os.ship_s - os.submit_s - os.xcache_s;
            double sub = os.submit_s / gsteps, wait = os.idle_s / gsteps;
            double node = 1e-9 * (node1 - node0) / gsteps, rest;
            p.compute_s = pure / gsteps;
            p.tm = os.slices ? pure / os.slices : 0;
            p.ta = os.attn_calls ? os.attn_rt_s / os.attn_calls : 0;
            if (mode == NA_E2E_KVFETCH) {
                /* sub = fetch + append round trips + local attention: the wire
                 * time at the probe's bandwidth is network, the rest the
                 * node's read of the KV (SSD, conversion, per-message work) */
                double raw;
                p.attn_s = os.svc.attn_s / gsteps;
                raw = sub - p.attn_s + wait;
                if (link_Bps > 0 && c_bytes_step > 0) {
                    p.net_s = c_bytes_step / link_Bps < raw ? c_bytes_step / link_Bps : raw;
                    p.disk_s = raw - p.net_s;
                } else {
                    p.disk_s = node < raw ? node : raw;
                    p.net_s = raw - p.disk_s;
                }
            } else {
                /* the wait for attention: the wire time of the step's bytes at
                 * the probe's bandwidth plus a round trip per message is
                 * network, the rest the storage nodes (attention + their SSD
                 * reads); without a probe, the nodes' own decode time */
                /* sending can block on a busy node (back-pressure), so the
                 * send and the wait are split together */
                double msgs = (double)os.attn_calls / gsteps, est, vis, tot = sub + wait;
                est = link_Bps > 0 ? c_bytes_step / link_Bps + msgs * link_rtt : -1;
                if (est >= 0)
                    vis = tot > est ? tot - est : 0;
                else
                    vis = wait < node ? wait : node;
                p.attn_s = vis + os.xcache_s / gsteps;
                p.net_s = tot - vis;
            }
            if (p.net_s < 0)
                p.net_s = 0;
            rest = p.step_s - p.compute_s - p.net_s - p.attn_s - p.disk_s;
            p.idle_s = rest > 0 ? rest : 0;         /* other: sampling, bookkeeping */
        }
        p.ssd_bytes = (double)(os.svc.ssd_bytes_read - snap.at_decode.ssd_bytes_read) /
                      ((double)os.gen.decode_tokens / B);
    }
    printf("POINT mode=%d batch=%d ctx=%d nodes=%d new=%d ok=%d tok_s=%.6g step_s=%.6g "
           "compute_s=%.6g net_s=%.6g attn_s=%.6g disk_s=%.6g idle_s=%.6g bytes_out=%.6g "
           "bytes_in=%.6g an_out=%.6g an_in=%.6g ssd_bytes=%.6g tm=%.6g ta=%.6g rss=%.6g "
           "rss_dec=%.6g ttft_s=%.6g\n",
           p.mode, p.batch, p.ctx, p.nodes, p.new_tokens, p.ok, p.tok_s, p.step_s, p.compute_s,
           p.net_s, p.attn_s, p.disk_s, p.idle_s, p.bytes_out, p.bytes_in, p.an_out, p.an_in,
           p.ssd_bytes, p.tm, p.ta, pt_rss("VmHWM"), snap.rss_dec,
           snap.seen > 0 ? snap.t_first - snap.t_start : 0.0);
    rc = p.ok ? 0 : 1;
out_req:
    for (i = 0; i < B; i++)
        na_request_destroy(r[i]);
    free(r);
out:
    na_engine_destroy(e);
    na_model_destroy(m);
    na_cfg_destroy(cfg);
    return rc;
}
