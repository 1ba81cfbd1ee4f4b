/* tests/cluster/test_offload_engine.c — the long-lived offload engine
 * (compute-node/offload.h: create / submit / cancel / progress / destroy)
 * against the storage node's device slots in this process, and with "remote"
 * against real `nearattn node` processes started by the cluster library
 * (cluster/setup.h):
 *
 *   join     requests submitted at different steps join the running batch
 *            and give the monolithic greedy tokens
 *   cancel   a request cancelled mid-generation ends at a step boundary with
 *            NA_ERR_CANCELED, its KV released on the service (open count and
 *            the release's status seen by a counting service in front of the
 *            real one); a waiting request cancelled before it was admitted
 *            never opens; the others are unaffected
 *   idle     a request submitted after the engine went idle runs
 *   destroy  progress(20 ms) returns in time with work left; destroying the
 *            engine with requests in flight releases their KV
 *   adaptive parallel.adaptive_batches: with the attention made 8 ms slow per
 *            entry (the counting service holds each batch's answer until
 *            then, while the engine goes on: a TEST DOUBLE of a storage side
 *            whose attention grows with the rows and serves two batches side
 *            by side) split wins its trial and the requests spread over both
 *            batches; with every compute op made 2 ms slow
 *            (NA_FAULTS' compute:op_ms, a TEST DOUBLE of a weight-bound
 *            step) they stay in one (a trial, which a loaded machine's slow
 *            round trip may start, loses); the greedy tokens are the
 *            monolithic ones either way
 *
 * The counting service forwards every call to the real one and counts open
 * and release: it is how the test sees the storage side's open requests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/inproc.h"
#include "cluster/setup.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"
#include "tests/cluster/cluster_util.h"
#include "tests/testutil.h"

#define N_REQ   6
#define MAX_NEW 24

static char g_tmp[512];

/* ---- a counting service in front of a real one ---------------------------- */
typedef struct {
    na_asvc_fwd_t fwd;         /* every other call passed to fwd.in */
    int        open;           /* opened and not released */
    long       opens, releases;
    int        last_status;    /* status of the last release */
    int        slow_ms;        /* > 0: each batch's answer is held until this long
                                  per entry after its submit (a storage side
                                  whose attention grows with the rows) */
    double     due[NA_OFF_MAX_BATCHES];
    unsigned   batches_seen;   /* bit b: batch b submitted attention */
    int        held[NA_OFF_MAX_BATCHES]; /* batches whose answer came, not yet due */
    int        n_held;
} cnt_svc_t;

static na_status_t cnt_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    cnt_svc_t *c = (cnt_svc_t *)s;
    na_status_t st = na_asvc_open(c->fwd.in, req, max_tokens);
    if (st == NA_OK) {
        c->open++;
        c->opens++;
    }
    return st;
}
static void cnt_release(na_asvc_t *s, uint64_t req, int status)
{
    cnt_svc_t *c = (cnt_svc_t *)s;
    na_asvc_release(c->fwd.in, req, status);
    c->open--;
    c->releases++;
    c->last_status = status;
}

static na_status_t cnt_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *x, int n)
{
    cnt_svc_t *c = (cnt_svc_t *)s;
    if (batch >= 0 && batch < NA_OFF_MAX_BATCHES) {
        c->due[batch] = na_now_s() + 1e-3 * c->slow_ms * n;
        c->batches_seen |= 1u << batch;
    }
    return na_asvc_submit(c->fwd.in, batch, layer, x, n);
}
/* The first held answer that is due (slow_ms per entry after its submit):
 * its index, or -1; *next_p: the earliest due time of the others. */
static int cnt_due(const cnt_svc_t *c, double now, double *next_p)
{
    int i;

    *next_p = now + 3600.0;
    for (i = 0; i < c->n_held; i++) {
        double due = c->due[c->held[i]];
        if (due <= now)
            return i;
        if (due < *next_p)
            *next_p = due;
    }
    return -1;
}

/* With slow_ms, an answer that comes back early is held (not slept on: the
 * engine goes on with its other batch meanwhile) until it is due. */
static na_status_t cnt_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    cnt_svc_t *c = (cnt_svc_t *)s;
    double end = na_now_s() + 1e-3 * (timeout_ms > 0 ? timeout_ms : 0);

    if (c->slow_ms <= 0 && c->n_held == 0)
        return na_asvc_poll(c->fwd.in, timeout_ms, batch_p);
    for (;;) {
        double now = na_now_s(), next, wait;
        int i = cnt_due(c, now, &next), b;
        na_status_t st;
        if (i >= 0) {
            *batch_p = c->held[i];
            c->held[i] = c->held[--c->n_held];
            return NA_OK;
        }
        wait = (next < end ? next : end) - now;
        st = na_asvc_poll(c->fwd.in, wait > 0 ? (int)(1e3 * wait) + 1 : 0, &b);
        if (st == NA_OK && c->n_held < NA_OFF_MAX_BATCHES) {
            c->held[c->n_held++] = b;
            continue;
        }
        if (st != NA_OK && st != NA_ERR_TIMEOUT)
            return st;
        if (na_now_s() >= end && cnt_due(c, na_now_s(), &next) < 0)
            return NA_ERR_TIMEOUT;
    }
}

static cnt_svc_t *cnt_wrap(na_asvc_t *in)
{
    cnt_svc_t *c = (cnt_svc_t *)na_asvc_fwd_new(in, sizeof(*c), "counting");
    if (c == NULL)
        return NULL;
    c->fwd.ops.open = cnt_open;
    c->fwd.ops.release = cnt_release;
    c->fwd.ops.submit = cnt_submit;
    c->fwd.ops.poll = cnt_poll;
    return c;
}

/* ---- requests and callbacks ------------------------------------------------ */
typedef struct {
    cnt_svc_t *svc;
    long       tokens;          /* all requests */
    int        done[N_REQ + 1];
    int        err[N_REQ + 1];  /* status given to on_error */
    int        open_at_error;   /* the service's open count when a cancel arrived */
    int        status_at_error; /* the last release's status then */
} watch_t;

static void w_token(void *user, const na_request_t *r, int t)
{
    watch_t *w = user;
    (void)r;
    (void)t;
    w->tokens++;
}
static void w_done(void *user, const na_request_t *r)
{
    watch_t *w = user;
    w->done[r->id]++;
}
static void w_error(void *user, const na_request_t *r, na_status_t st, const char *why)
{
    watch_t *w = user;
    (void)why;
    w->err[r->id] = (int)st;
    w->open_at_error = w->svc->open;
    w->status_at_error = w->svc->last_status;
}

static void make_requests(na_engine_t *e, na_request_t **r, int n)
{
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    uint64_t rng = 12345;
    int i;

    for (i = 0; i < n; i++) {
        int len = 3 + (i * 7) % 23, toks[64];
        na_test_prompt(&rng, toks, len, e->cfg.vocab_size);
        NA_CHECK_OK(na_request_create(e, i, toks, len, MAX_NEW, &sc, &r[i]));
    }
}

static void free_requests(na_request_t **r, int n)
{
    int i;
    for (i = 0; i < n; i++)
        na_request_destroy(r[i]);
}

static int same_tokens(const na_request_t *a, const na_request_t *b)
{
    return na_test_same_ints(a->out, a->n_out, b->out, b->n_out);
}

/* A fresh watch on c, N_REQ fresh requests in got, and an engine with 2
 * batches in flight (adaptive: the most) reporting to w. */
static na_off_t *make_engine(na_engine_t *e, cnt_svc_t *c, watch_t *w, na_request_t **got,
                             int adaptive)
{
    const na_test_off_cb_t cb = { w_token, w_done, w_error, w };

    memset(w, 0, sizeof(*w));
    w->svc = c;
    make_requests(e, got, N_REQ);
    return na_test_off_create(e, &c->fwd.base, 8, 2, adaptive, &cb);
}

/* Requests 0..N_REQ-1 submitted at different steps of a running batch. */
static void t_join(na_engine_t *e, cnt_svc_t *c, na_request_t **ref, const char *tag)
{
    watch_t w;
    na_request_t *got[N_REQ];
    na_off_t *g;
    int next = 0, busy_joins = 0, i, guard = 0;

    g = make_engine(e, c, &w, got, 0);
    if (g == NULL)
        return;
    /* request k joins once 5k tokens were produced */
    while ((next < N_REQ || na_off_pending(g) > 0) && guard++ < 100000) {
        while (next < N_REQ && w.tokens >= 5L * next) {
            busy_joins += na_off_pending(g) > 0;
            NA_CHECK_OK(na_off_submit(g, got[next], NULL));
            next++;
        }
        NA_CHECK_OK(na_off_progress(g, 0));
    }
    NA_CHECK_MSG(busy_joins >= N_REQ - 1, "%s: only %d requests joined a running batch", tag,
                 busy_joins);
    for (i = 0; i < N_REQ; i++) {
        NA_CHECK_MSG(same_tokens(got[i], ref[i]), "%s join: request %d differs (%d vs %d)",
                     tag, i, got[i]->n_out, ref[i]->n_out);
        NA_CHECK(w.done[i] == 1 && w.err[i] == 0);
    }
    NA_CHECK_MSG(c->open == 0, "%s join: %d requests still open on the service", tag, c->open);
    /* idle: a request submitted now runs too */
    free_requests(got, 1);
    make_requests(e, got, 1);
    NA_CHECK(na_off_pending(g) == 0);
    NA_CHECK_OK(na_off_submit(g, got[0], NULL));
    NA_CHECK_OK(na_off_progress(g, -1));
    NA_CHECK_MSG(same_tokens(got[0], ref[0]), "%s idle: request differs", tag);
    NA_CHECK(w.done[0] == 2);
    na_off_destroy(g);
    free_requests(got, N_REQ);
    fprintf(stderr, "%s join + idle: %d of %d joined a running batch\n", tag, busy_joins,
            N_REQ);
}

/* Cancel request 1 mid-generation and request 5 while it waits. */
static void t_cancel(na_engine_t *e, cnt_svc_t *c, na_request_t **ref, const char *tag)
{
    watch_t w;
    na_request_t *got[N_REQ];
    na_off_stats_t os;
    na_off_t *g;
    long opens0 = c->opens;
    int i, guard = 0, cancelled = 0;

    g = make_engine(e, c, &w, got, 0);
    if (g == NULL)
        return;
    for (i = 0; i < N_REQ - 1; i++)
        NA_CHECK_OK(na_off_submit(g, got[i], NULL));
    while (na_off_pending(g) > 0 && guard++ < 100000) {
        NA_CHECK_OK(na_off_progress(g, 0));
        if (!cancelled && got[1]->n_out >= 3) {
            NA_CHECK_OK(na_off_cancel(g, got[1]));
            NA_CHECK_OK(na_off_cancel(g, got[1]));      /* twice is once */
            cancelled = 1;
        }
    }
    NA_CHECK(cancelled);
    NA_CHECK_MSG(w.err[1] == (int)NA_ERR_CANCELED, "%s: request 1 ended with %d", tag, w.err[1]);
    NA_CHECK(w.done[1] == 1);
    NA_CHECK(got[1]->state == NA_REQ_DONE && got[1]->finish == NA_FINISH_NONE);
    NA_CHECK_MSG(got[1]->n_out >= 3 && got[1]->n_out < MAX_NEW,
                 "%s: request 1 has %d tokens", tag, got[1]->n_out);
    NA_CHECK(!memcmp(got[1]->out, ref[1]->out, (size_t)got[1]->n_out * sizeof(int)));
    NA_CHECK_MSG(w.status_at_error == (int)NA_ERR_CANCELED,
                 "%s: the service saw release status %d", tag, w.status_at_error);
    for (i = 0; i < N_REQ - 1; i++)
        if (i != 1)
            NA_CHECK_MSG(same_tokens(got[i], ref[i]) && w.err[i] == 0,
                         "%s cancel: request %d differs", tag, i);
    NA_CHECK_MSG(na_off_cancel(g, got[1]) == NA_ERR_NOT_FOUND, "%s: cancel after the end", tag);
    /* a waiting request cancelled before progress: never opened */
    opens0 = c->opens;
    NA_CHECK_OK(na_off_submit(g, got[N_REQ - 1], NULL));
    NA_CHECK_OK(na_off_cancel(g, got[N_REQ - 1]));
    NA_CHECK_OK(na_off_progress(g, -1));
    NA_CHECK(w.err[N_REQ - 1] == (int)NA_ERR_CANCELED && w.done[N_REQ - 1] == 1);
    NA_CHECK(got[N_REQ - 1]->n_out == 0 && c->opens == opens0);
    na_off_stats(g, &os);
    NA_CHECK_MSG(os.cancelled == 2 && os.failed == 0, "%s: %ld cancelled, %ld failed", tag,
                 os.cancelled, os.failed);
    NA_CHECK_MSG(c->open == 0, "%s cancel: %d requests still open", tag, c->open);
    na_off_destroy(g);
    fprintf(stderr, "%s cancel: cancelled after %d tokens\n", tag, got[1]->n_out);
    free_requests(got, N_REQ);
}

/* Destroy with requests decoding and waiting. */
static void t_destroy(na_engine_t *e, cnt_svc_t *c, const char *tag)
{
    watch_t w;
    na_request_t *got[N_REQ];
    na_off_t *g;
    int i, guard = 0;

    g = make_engine(e, c, &w, got, 0);
    if (g == NULL)
        return;
    for (i = 0; i < N_REQ; i++)
        NA_CHECK_OK(na_off_submit(g, got[i], NULL));
    while (w.tokens < 10 && guard++ < 100000)
        NA_CHECK_OK(na_off_progress(g, 0));
    NA_CHECK(c->open > 0 && na_off_pending(g) > 0);
    {   /* progress returns by its timeout (plus one slice or wait) */
        double t0 = na_now_s();
        NA_CHECK_OK(na_off_progress(g, 20));
        NA_CHECK_MSG(na_now_s() - t0 < 1.0, "%s: progress(20 ms) took %.3f s", tag,
                     na_now_s() - t0);
    }
    na_off_destroy(g);
    NA_CHECK_MSG(c->open == 0, "%s destroy: %d requests still open", tag, c->open);
    for (i = 0; i < N_REQ; i++)
        NA_CHECK(got[i]->state == NA_REQ_DONE && got[i]->kv == NULL);
    free_requests(got, N_REQ);
    fprintf(stderr, "%s destroy in flight: done\n", tag);
}

/* Requests 0..N_REQ-1 at once on an adaptive engine with 2 batches in
 * flight, attention slow_ms slow or every compute op op_ms slow; want_split:
 * the requests should have spread over both batches (else stayed in one). */
static void t_adaptive_one(na_engine_t *e, cnt_svc_t *c, na_request_t **ref, const char *tag,
                           int slow_ms, int op_ms, int want_split)
{
    watch_t w;
    na_request_t *got[N_REQ];
    na_off_stats_t os;
    na_off_t *g;
    int i;

    c->slow_ms = slow_ms;
    c->batches_seen = 0;
    e->fault_op_ms = op_ms;
    if (op_ms > 0)
        fprintf(stderr, "%s adaptive: TEST DOUBLE: every compute op %d ms slower\n", tag, op_ms);
    if (slow_ms > 0)
        fprintf(stderr, "%s adaptive: TEST DOUBLE: every attention answer held %d ms per "
                "entry\n", tag, slow_ms);
    g = make_engine(e, c, &w, got, 1);
    for (i = 0; g != NULL && i < N_REQ; i++)
        NA_CHECK_OK(na_off_submit(g, got[i], NULL));
    if (g != NULL) {
        NA_CHECK_OK(na_off_progress(g, -1));
        na_off_stats(g, &os);
        fprintf(stderr, "%s adaptive (attention +%d ms an entry, compute op +%d ms): %ld batch steps "
                "merged, %ld split; split won %ld of %ld trials\n", tag, slow_ms, op_ms,
                os.merged_steps, os.split_steps, os.split_trials_won, os.split_trials);
        NA_CHECK(os.adaptive_batches == 1);
        if (want_split)
            NA_CHECK_MSG(os.split_trials_won >= 1 && os.split_steps > os.merged_steps &&
                         c->batches_seen == 3u,
                         "%s adaptive: slow attention, but split won %ld of %ld trials, "
                         "%ld steps split, %ld merged, batches seen 0x%x", tag,
                         os.split_trials_won, os.split_trials, os.split_steps,
                         os.merged_steps, c->batches_seen);
        else    /* on a loaded machine a slow round trip may start a trial: it loses */
            NA_CHECK_MSG(os.split_trials_won == 0 && os.merged_steps > os.split_steps &&
                         (os.split_trials > 0 || (os.split_steps == 0 && c->batches_seen == 1u)),
                         "%s adaptive: weight-bound, but split won %ld of %ld trials, %ld steps "
                         "split, %ld merged, batches seen 0x%x", tag, os.split_trials_won,
                         os.split_trials, os.split_steps, os.merged_steps, c->batches_seen);
        for (i = 0; i < N_REQ; i++)
            NA_CHECK_MSG(same_tokens(got[i], ref[i]) && w.done[i] == 1 && w.err[i] == 0,
                         "%s adaptive: request %d differs (%d vs %d tokens)", tag, i,
                         got[i]->n_out, ref[i]->n_out);
        na_off_destroy(g);
    }
    c->slow_ms = 0;
    c->n_held = 0;
    e->fault_op_ms = 0;
    NA_CHECK_MSG(c->open == 0, "%s adaptive: %d requests still open", tag, c->open);
    free_requests(got, N_REQ);
}

static void t_adaptive(na_engine_t *e, cnt_svc_t *c, na_request_t **ref, const char *tag)
{
    t_adaptive_one(e, c, ref, tag, 8, 0, 1);
    t_adaptive_one(e, c, ref, tag, 0, 2, 0);
}

/* The layout: 2 storage nodes (ports and KV directories are replaced by the
 * cluster library when it starts the nodes itself). */
static na_status_t load_layout(const char *model, na_cfg_t **cfg_p)
{
    return na_test_layout_cluster(g_tmp, "eng", 2, 14200, model, "shm", 200, 3000, cfg_p,
                                  "parallel: { partition: request, batches_in_flight: 2, "
                                  "max_batch: 8 }\n"
                                  "kv: { block_tokens: 16, spill_interval: 2 }\n");
}

static void run_all(na_engine_t *e, na_asvc_t *in, na_request_t **ref, const char *tag)
{
    cnt_svc_t *c = cnt_wrap(in);

    NA_CHECK(c != NULL);
    if (c == NULL)
        return;
    t_join(e, c, ref, tag);
    t_cancel(e, c, ref, tag);
    t_destroy(e, c, tag);
    t_adaptive(e, c, ref, tag);
    na_asvc_destroy(&c->fwd.base);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "inproc";
    na_request_t *ref[N_REQ];
    na_engine_opts_t eo = { "cpu", 1, NA_DTYPE_F16, 0 };
    na_gen_opts_t go;
    na_genmodel_opts_t gm;
    na_model_t *m = NULL;
    na_engine_t *e;
    na_cfg_t *cfg = NULL;
    char path[700];
    int stop = -1;

    if (na_test_tmpdir(g_tmp, sizeof(g_tmp)) != 0)
        return 1;
    na_genmodel_shape(&gm, 64, 128, 2, 8, 2, 300, 96);
    if (na_test_stories_or_gen(g_tmp, "gqa", &gm, path, sizeof(path)) == 0)
        NA_CHECK_OK(na_model_open(path, &m));
    if (na_test_failures > 0)
        return na_test_finish();
    NA_CHECK_OK(na_engine_create(m, &eo, &e));
    memset(&go, 0, sizeof(go));
    go.max_batch = N_REQ;
    go.stop_ids = &stop;
    make_requests(e, ref, N_REQ);
    NA_CHECK_OK(na_generate(e, ref, N_REQ, &go, NULL));
    NA_CHECK_OK(load_layout(path, &cfg));

    if (cfg != NULL && !strcmp(mode, "inproc")) {
        na_asvc_t *svc = NULL;
        NA_CHECK_OK(na_inproc_create(cfg, &m->cfg, &svc));
        if (svc != NULL)
            run_all(e, svc, ref, "inproc");
    } else if (cfg != NULL && !strcmp(mode, "remote")) {
        /* real storage-node processes on free ports, a private KV directory */
        na_cluster_t *cl = na_test_cluster_start(cfg, e);
        if (cl != NULL) {
            na_asvc_t *svc = na_cluster_take_service(cl);
            run_all(e, svc, ref, "remote");
        }
        na_cluster_destroy(cl);
    }
    na_cfg_destroy(cfg);
    free_requests(ref, N_REQ);
    na_engine_destroy(e);
    na_model_destroy(m);
    na_test_rmtree(g_tmp);
    return na_test_finish();
}
