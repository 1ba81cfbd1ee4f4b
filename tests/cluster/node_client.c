/* tests/cluster/node_client.c — a small compute-side client of a storage
 * node started by `nearattn node`, through compute-node/storage_client.h.
 *
 *   node_client --config F (--node NAME | --connect HOST:PORT) --scenario S
 *               [--secret-file F] [--name N] [--requests R] [--steps T]
 *               [--dtype f32|f16] [--seed S]
 *   scenarios:
 *     basic    open R requests (one on a KV head sub-range), prefill every
 *              layer, T decode steps of all requests in one DECODE_ATTN per
 *              layer (every 3rd step: the batch split over 3 messages flagged
 *              MORE, sent back to back, one ATTN_OUT per part expected: the
 *              node computes parts as they arrive); every output checked against the kernels' ref
 *              attn_decode over the client's own copy of the KV; KV_FETCH
 *              compared with that copy; per-request errors (duplicate open,
 *              unknown request in a batch, prefill of an unknown request)
 *              answered for that request only; STATS; release.
 *     hold     open + prefill one request, print "HELD", then answer
 *              heartbeats forever (the test kills it with -9)
 *     refuse   a request larger than the SSD budget is refused with a reason
 *              (NA_ERR_NOSPACE), then `basic` runs on the same connection
 *     garbageN send a malformed message (N: 0 random header, 1 truncated
 *              DECODE_ATTN, 2 HELLO after the handshake, 3 other major
 *              version): the node must drop us
 *     secret   the handshake must be refused (run with a wrong --secret-file)
 *     idle     stay silent (no progress, no heartbeat answers) for 2 x
 *              peer_timeout_ms: the node must have dropped us
 *     busy     the node answers while a batch computes: R requests of 8192
 *              prompt tokens, then per layer one DECODE_ATTN of all of them
 *              followed at once by STATS_REQ and ECHO; the STATS and ECHO
 *              replies must arrive before the batch's ATTN_OUT (whose
 *              outputs are checked against the ref kernels)
 *     flood    R requests of 8192 prompt tokens, then --steps DECODE_ATTN
 *              batches of all of them sent back to back without reading an
 *              answer: a node started with --max-batches below that must drop
 *              us with the reason (prints "DROPPED reason")
 *     stat K   print "STAT K VALUE": K a node counter (node.KEY) or a slot
 *              counter (KEY, summed over the node's slots)
 *     discover (--expect N, no --node) a compute node's directory
 *              (compute-node/storage_dir.h): use storage nodes as they come
 *              up or are added to the layout file, until N were used
 *   Exit 0 pass, 1 fail, 2 usage, 77 skipped (no model file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/model.h"
#include "common/wire_stats.h"
#include "compute-node/storage_client.h"
#include "compute-node/storage_dir.h"
#include "kernels/kernels.h"
#include "tests/testutil.h"

typedef struct {
    const char *config, *node, *connect, *scenario, *secret_file, *name, *stat_key;
    int requests, steps, seed, expect;
    na_dtype_t dtype;
    na_xp_t *xp;                    /* the client's transport (set by main) */
} nc_args_t;

typedef struct {
    int n_layers, n_heads, n_kv_heads, head_dim, grp;
    na_dtype_t kv_dtype;            /* the node's store dtype (layout) */
} nc_shape_t;

/* The client's copy of one request. */
typedef struct {
    uint64_t id;
    int h0, h1, nh, prompt, max_tokens, len;
    float *k, *v;                   /* [n_layers][max_tokens][nh][hd] values as stored */
} nc_req_t;

static float nc_round(float x, na_dtype_t t)
{
    if (t == NA_DTYPE_F16)
        return na_f16_to_f32(na_f32_to_f16(x));
    if (t == NA_DTYPE_BF16)
        return na_bf16_to_f32(na_f32_to_bf16(x));
    return x;
}

/* Convert n floats to wire dtype t in a new buffer (caller frees). */
static void *nc_wire(const float *x, size_t n, na_dtype_t t)
{
    void *p = malloc(n * na_dtype_bytes(t, 1) + 1);
    if (p != NULL)
        na_wire_rows_from_f32(x, t, n, p);
    return p;
}

static size_t nc_off(const nc_shape_t *s, const nc_req_t *r, int layer, int tok)
{
    return (((size_t)layer * r->max_tokens + tok) * r->nh) * s->head_dim;
}

/* Random rows for tokens [r->len, r->len + n) of layer: stored in r and sent. */
static na_status_t nc_prefill(na_peer_t *sc, const nc_shape_t *s, nc_req_t *r, na_rng_t *rng,
                              na_dtype_t dt)
{
    size_t cnt = (size_t)r->prompt * r->nh * s->head_dim, i;
    float *k = malloc(cnt * sizeof(float)), *v = malloc(cnt * sizeof(float));
    na_status_t st = NA_OK;
    int l;

    for (l = 0; l < s->n_layers && st == NA_OK; l++) {
        na_wire_kv_t kv;
        void *wk, *wv;
        na_rng_fill(rng, k, cnt, -1.0f, 1.0f);
        na_rng_fill(rng, v, cnt, -1.0f, 1.0f);
        for (i = 0; i < cnt; i++) {
            r->k[nc_off(s, r, l, 0) + i] = nc_round(nc_round(k[i], dt), s->kv_dtype);
            r->v[nc_off(s, r, l, 0) + i] = nc_round(nc_round(v[i], dt), s->kv_dtype);
        }
        wk = nc_wire(k, cnt, dt);
        wv = nc_wire(v, cnt, dt);
        memset(&kv, 0, sizeof(kv));
        kv.request_id = r->id;
        kv.layer = (uint32_t)l;
        kv.pos0 = 0;
        kv.n_tokens = (uint32_t)r->prompt;
        kv.kv_h0 = (uint16_t)r->h0;
        kv.kv_h1 = (uint16_t)r->h1;
        kv.head_dim = (uint16_t)s->head_dim;
        kv.dtype = dt;
        kv.k = wk;
        kv.v = wv;
        st = na_sc_prefill(sc, &kv, NA_SC_WAIT_MS);
        free(wk);
        free(wv);
    }
    r->len = r->prompt;
    free(k);
    free(v);
    return st;
}

static na_status_t nc_open_hd(na_peer_t *sc, const nc_shape_t *s, const nc_req_t *r,
                              na_dtype_t dt, int head_dim)
{
    na_wire_req_open_t o;
    memset(&o, 0, sizeof(o));
    o.request_id = r->id;
    o.max_tokens = (uint32_t)r->max_tokens;
    o.n_layers = (uint32_t)s->n_layers;
    o.kv_h0 = (uint16_t)r->h0;
    o.kv_h1 = (uint16_t)r->h1;
    o.head_dim = (uint16_t)head_dim;
    o.q_per_kv = (uint16_t)s->grp;
    o.dtype = dt;
    return na_sc_open(sc, &o, NA_SC_WAIT_MS, NULL);
}

static na_status_t nc_open(na_peer_t *sc, const nc_shape_t *s, const nc_req_t *r, na_dtype_t dt)
{
    return nc_open_hd(sc, s, r, dt, s->head_dim);
}

/* Reference output of request r at layer l over its first ctx tokens. */
static void nc_ref(na_kernels_t *ref, const nc_shape_t *s, const nc_req_t *r, int l, int ctx,
                   const float *q, float *out)
{
    size_t cnt = (size_t)ctx * r->nh * s->head_dim, i;
    const float *k = r->k + nc_off(s, r, l, 0), *v = r->v + nc_off(s, r, l, 0);
    if (s->kv_dtype == NA_DTYPE_F16) {
        uint16_t *k16 = malloc(cnt * 2), *v16 = malloc(cnt * 2);
        for (i = 0; i < cnt; i++) {
            k16[i] = na_f32_to_f16(k[i]);
            v16[i] = na_f32_to_f16(v[i]);
        }
        na_kernels_attn_decode_host(ref, out, q, k16, v16, NA_DTYPE_F16, ctx, r->nh * s->grp,
                                    r->nh, s->head_dim);
        free(k16);
        free(v16);
    } else {
        na_kernels_attn_decode_host(ref, out, q, k, v, NA_DTYPE_F32, ctx, r->nh * s->grp,
                                    r->nh, s->head_dim);
    }
}

/* One decode step of every request (one DECODE_ATTN per layer), plus an entry
 * for an unknown request that must fail alone. */
static void nc_decode_step(na_peer_t *sc, const nc_shape_t *s, nc_req_t *rs, int n,
                           int step, na_rng_t *rng, na_dtype_t dt, na_kernels_t *ref)
{
    const int hd = s->head_dim, ne = n + 1;
    na_wire_attn_entry_t *e = calloc((size_t)ne, sizeof(*e));
    float **o = calloc((size_t)ne, sizeof(*o)), **q = calloc((size_t)ne, sizeof(*q));
    void **wire = calloc((size_t)ne * 3, sizeof(*wire));
    int32_t *status = calloc((size_t)ne, sizeof(*status));
    float *kn = malloc((size_t)s->n_kv_heads * hd * sizeof(float));
    float *vn = malloc((size_t)s->n_kv_heads * hd * sizeof(float));
    float *want = malloc((size_t)s->n_heads * hd * sizeof(float));
    int l, i, j;

    for (l = 0; l < s->n_layers; l++) {
        na_wire_attn_t a;
        for (i = 0; i < ne; i++) {
            nc_req_t *r = &rs[i < n ? i : 0];
            size_t nq = (size_t)r->nh * s->grp * hd, nk = (size_t)r->nh * hd;
            q[i] = malloc(nq * sizeof(float));
            o[i] = malloc(nq * sizeof(float));
            na_rng_fill(rng, q[i], nq, -1.0f, 1.0f);
            na_rng_fill(rng, kn, nk, -1.0f, 1.0f);
            na_rng_fill(rng, vn, nk, -1.0f, 1.0f);
            for (j = 0; j < (int)nq; j++)
                q[i][j] = nc_round(q[i][j], dt);
            wire[3 * i] = nc_wire(q[i], nq, dt);
            wire[3 * i + 1] = nc_wire(kn, nk, dt);
            wire[3 * i + 2] = nc_wire(vn, nk, dt);
            /* the extra entry fails alone: an unknown request (even steps) or a
             * known one at a wrong position (odd steps; nothing is appended) */
            e[i].request_id = i < n || step % 2 ? r->id : 999999;
            e[i].position = (uint32_t)r->len + (i < n ? 0 : 7);
            e[i].kv_h0 = (uint16_t)r->h0;
            e[i].kv_h1 = (uint16_t)r->h1;
            e[i].q = wire[3 * i];
            e[i].k = wire[3 * i + 1];
            e[i].v = wire[3 * i + 2];
            if (i < n)
                for (j = 0; j < (int)nk; j++) {
                    r->k[nc_off(s, r, l, r->len) + j] = nc_round(nc_round(kn[j], dt), s->kv_dtype);
                    r->v[nc_off(s, r, l, r->len) + j] = nc_round(nc_round(vn[j], dt), s->kv_dtype);
                }
        }
        memset(&a, 0, sizeof(a));
        a.batch_id = (uint32_t)step;
        a.layer = (uint32_t)l;
        a.n_entries = (uint32_t)ne;
        a.entry_base = 0;
        a.batch_total = (uint32_t)ne;
        a.head_dim = (uint16_t)hd;
        a.q_per_kv = (uint16_t)s->grp;
        a.dtype = dt;
        a.scale = 1.0f / sqrtf((float)hd);
        a.entries = e;
        if (step % 3 == 2 && ne >= 3) {   /* three parts, MORE, back to back */
            NA_CHECK_OK(na_sc_decode_parts(sc, &a, 3, NA_SC_WAIT_MS, o, status));
        } else if (step % 2 == 0 || ne < 2) {
            NA_CHECK_OK(na_sc_decode(sc, &a, NA_SC_WAIT_MS, o, status));
        } else {          /* the batch in two calls, [0, k) then [k, ne), each answered
                           * on its own (neither part carries MORE) */
            uint32_t k = (uint32_t)ne / 2;
            na_wire_attn_t b = a;
            a.n_entries = k;
            NA_CHECK_OK(na_sc_decode(sc, &a, NA_SC_WAIT_MS, o, status));
            b.entry_base = k;
            b.n_entries = (uint32_t)ne - k;
            b.entries = e + k;
            NA_CHECK_OK(na_sc_decode(sc, &b, NA_SC_WAIT_MS, o + k, status + k));
        }
        for (i = 0; i < n; i++) {
            nc_req_t *r = &rs[i];
            size_t nq = (size_t)r->nh * s->grp * hd;
            double ratio;
            NA_CHECK_MSG(status[i] == 0, "step %d layer %d request %llu: status %d", step, l,
                         (unsigned long long)r->id, status[i]);
            nc_ref(ref, s, r, l, r->len + 1, q[i], want);
            ratio = na_close_ratio(o[i], want, nq, dt == NA_DTYPE_F32 ? 1e-4 : 2e-3,
                                   dt == NA_DTYPE_F32 ? 1e-4 : 2e-3);
            NA_CHECK_MSG(ratio <= 1.0, "step %d layer %d request %llu: output off by ratio %g",
                         step, l, (unsigned long long)r->id, ratio);
        }
        NA_CHECK_MSG(status[n] == (step % 2 ? NA_ERR_RANGE : NA_ERR_NOT_FOUND),
                     "bad entry at step %d: status %d", step, status[n]);
        for (i = 0; i < ne; i++) {
            free(q[i]);
            free(o[i]);
            free(wire[3 * i]);
            free(wire[3 * i + 1]);
            free(wire[3 * i + 2]);
        }
    }
    for (i = 0; i < n; i++)
        rs[i].len++;
    free(e); free(o); free(q); free(wire); free(status); free(kn); free(vn); free(want);
}

static void nc_fetch_check(na_peer_t *sc, const nc_shape_t *s, const nc_req_t *r, int layer)
{
    na_wire_kv_fetch_t f;
    int t0 = r->len > 3 ? 3 : 0, n = r->len - t0;
    size_t cnt = (size_t)n * r->nh * s->head_dim, i, bad = 0;
    float *k = malloc(cnt * sizeof(float)), *v = malloc(cnt * sizeof(float));

    memset(&f, 0, sizeof(f));
    f.request_id = r->id;
    f.layer = (uint32_t)layer;
    f.pos0 = (uint32_t)t0;
    f.n_tokens = (uint32_t)n;
    f.kv_h0 = (uint16_t)r->h0;
    f.kv_h1 = (uint16_t)r->h1;
    f.dtype = NA_DTYPE_F32;
    NA_CHECK_OK(na_sc_fetch(sc, &f, s->head_dim, NA_SC_WAIT_MS, k, v, NA_DTYPE_F32));
    for (i = 0; i < cnt; i++)
        bad += k[i] != r->k[nc_off(s, r, layer, t0) + i] || v[i] != r->v[nc_off(s, r, layer, t0) + i];
    NA_CHECK_MSG(bad == 0, "KV_FETCH of request %llu layer %d: %zu of %zu values differ",
                 (unsigned long long)r->id, layer, bad, 2 * cnt);
    free(k);
    free(v);
}

/* The counter named key in one STATS answer (common/wire_stats.h): a node
 * counter ("node.KEY") or a slot counter ("KEY", summed over the node's
 * slots); UINT64_MAX and a failed check when the node did not send it. */
static uint64_t nc_stat(na_peer_t *sc, const char *key)
{
    na_stats_view_t v;
    int i;

    memset(&v, 0, sizeof(v));
    NA_CHECK_OK(na_sc_stats(sc, 0, NA_SC_WAIT_MS, &v));
    for (i = 0; i < NA_STAT_NODE_COUNT; i++)
        if (v.has_node[i] && !strcmp(key, na_stat_node_key((na_stat_node_t)i)))
            return v.node[i];
    for (i = 0; i < NA_STAT_SLOT_COUNT; i++)
        if (v.has_slot[i] && !strcmp(key, na_stat_slot_key((na_stat_slot_t)i)))
            return v.slot_sum[i];
    NA_CHECK_MSG(0, "storage node: no stat '%s'", key);
    return UINT64_MAX;
}

static int nc_basic(na_peer_t *sc, const nc_shape_t *s, const nc_args_t *a)
{
    static const int prompts[] = { 5, 37, 70, 16, 1 };
    nc_req_t *rs = calloc((size_t)a->requests, sizeof(*rs));
    na_kernels_t *ref;
    na_rng_t rng;
    uint64_t base = 1000u * (uint64_t)getpid();
    int i, t;

    na_rng_seed(&rng, (uint64_t)a->seed);
    NA_CHECK_OK(na_kernels_create("ref", 1, &ref));
    for (i = 0; i < a->requests; i++) {
        nc_req_t *r = &rs[i];
        r->id = base + (uint64_t)i + 1;
        r->h0 = (i == 1 && s->n_kv_heads >= 3) ? 1 : 0;
        r->h1 = (i == 1 && s->n_kv_heads >= 3) ? s->n_kv_heads - 1 : s->n_kv_heads;
        r->nh = r->h1 - r->h0;
        r->prompt = prompts[i % 5];
        r->max_tokens = r->prompt + a->steps + 3;
        r->k = calloc((size_t)s->n_layers * r->max_tokens * r->nh * s->head_dim, sizeof(float));
        r->v = calloc((size_t)s->n_layers * r->max_tokens * r->nh * s->head_dim, sizeof(float));
        NA_CHECK_OK(nc_open(sc, s, r, a->dtype));
        NA_CHECK_OK(nc_prefill(sc, s, r, &rng, a->dtype));
    }
    /* per-request errors answer that request only */
    NA_CHECK(nc_open(sc, s, &rs[0], a->dtype) == NA_ERR_BUSY);
    {
        na_wire_kv_t kv;
        float row[1024] = { 0 };
        memset(&kv, 0, sizeof(kv));
        kv.request_id = base + 777;
        kv.n_tokens = 1;
        kv.kv_h1 = (uint16_t)s->n_kv_heads;
        kv.head_dim = (uint16_t)s->head_dim;
        kv.dtype = NA_DTYPE_F32;
        kv.k = row;
        kv.v = row;
        NA_CHECK(na_sc_prefill(sc, &kv, NA_SC_WAIT_MS) == NA_ERR_NOT_FOUND);
    }
    {
        nc_req_t bad = rs[0];
        na_wire_kv_t kv;
        na_wire_kv_fetch_t f;
        float row[4096] = { 0 };
        bad.id = base + 778;
        bad.h1 = s->n_kv_heads;
        NA_CHECK(nc_open_hd(sc, s, &bad, a->dtype, s->head_dim + 1) == NA_ERR_INVALID);
        memset(&kv, 0, sizeof(kv));                 /* a gap after the prompt */
        kv.request_id = rs[0].id;
        kv.pos0 = (uint32_t)rs[0].len + 5;
        kv.n_tokens = 1;
        kv.kv_h0 = (uint16_t)rs[0].h0;
        kv.kv_h1 = (uint16_t)rs[0].h1;
        kv.head_dim = (uint16_t)s->head_dim;
        kv.dtype = NA_DTYPE_F32;
        kv.k = row;
        kv.v = row;
        NA_CHECK(na_sc_prefill(sc, &kv, NA_SC_WAIT_MS) == NA_ERR_RANGE);
        memset(&f, 0, sizeof(f));                   /* past what the request holds */
        f.request_id = rs[0].id;
        f.n_tokens = (uint32_t)rs[0].len + 1;
        f.kv_h0 = (uint16_t)rs[0].h0;
        f.kv_h1 = (uint16_t)rs[0].h1;
        f.dtype = NA_DTYPE_F32;
        NA_CHECK(na_sc_fetch(sc, &f, s->head_dim, NA_SC_WAIT_MS, row, row, NA_DTYPE_F32) ==
                 NA_ERR_RANGE);
    }
    NA_CHECK(nc_stat(sc, na_stat_node_key(NA_STAT_REQUESTS)) >= (uint64_t)a->requests);
    for (t = 0; t < a->steps; t++)
        nc_decode_step(sc, s, rs, a->requests, t, &rng, a->dtype, ref);
    for (i = 0; i < a->requests; i++)
        nc_fetch_check(sc, s, &rs[i], i % s->n_layers);
    NA_CHECK(nc_stat(sc, na_stat_node_key(NA_STAT_DECODE_ENTRIES)) > 0);
    for (i = 0; i < a->requests; i++) {
        NA_CHECK_OK(na_sc_release(sc, rs[i].id, 0, NA_SC_WAIT_MS));
        free(rs[i].k);
        free(rs[i].v);
    }
    NA_CHECK(na_sc_release(sc, rs[0].id, 0, NA_SC_WAIT_MS) == NA_ERR_NOT_FOUND);
    printf("BASIC %d requests, %d steps, %d layers: checked\n", a->requests, a->steps, s->n_layers);
    na_kernels_destroy(ref);
    free(rs);
    return 0;
}

/* One DECODE_ATTN of every request at layer l (one message), then STATS_REQ
 * and ECHO at once; *order_ok = both replies came before the ATTN_OUT. */
/* A DECODE_ATTN of batch id over layer l: the n f32 entries e, whole (one
 * part), scale 1/sqrt(head_dim). */
static void nc_decode_msg(na_wire_msg_t *m, const nc_shape_t *s, uint32_t id, int l,
                          na_wire_attn_entry_t *e, int n)
{
    memset(m, 0, sizeof(*m));
    m->type = NA_WIRE_MSG_DECODE_ATTN;
    m->u.attn.batch_id = id;
    m->u.attn.layer = (uint32_t)l;
    m->u.attn.n_entries = m->u.attn.batch_total = (uint32_t)n;
    m->u.attn.head_dim = (uint16_t)s->head_dim;
    m->u.attn.q_per_kv = (uint16_t)s->grp;
    m->u.attn.dtype = NA_DTYPE_F32;
    m->u.attn.scale = 1.0f / sqrtf((float)s->head_dim);
    m->u.attn.entries = e;
}

static void nc_busy_layer(na_peer_t *sc, na_xp_t *xp, const nc_shape_t *s, nc_req_t *rs, int n,
                          int l, na_rng_t *rng, na_kernels_t *ref, int *order_ok,
                          double *t_reply, double *t_out)
{
    const int hd = s->head_dim;
    na_wire_attn_entry_t *e = calloc((size_t)n, sizeof(*e));
    float *q = malloc((size_t)n * s->n_heads * hd * sizeof(float));
    float *kv = malloc((size_t)n * 2 * s->n_kv_heads * hd * sizeof(float));
    float *o = malloc((size_t)s->n_heads * hd * sizeof(float));
    float *want = malloc((size_t)s->n_heads * hd * sizeof(float));
    uint64_t t0, deadline = na_xp_now_ns() + 60000000000ull;
    int i, j, replies = 0, outs = 0;
    na_wire_msg_t m;

    for (i = 0; i < n; i++) {
        nc_req_t *r = &rs[i];
        size_t nq = (size_t)r->nh * s->grp * hd, nk = (size_t)r->nh * hd;
        float *k = kv + (size_t)i * 2 * s->n_kv_heads * hd, *v = k + nk;
        na_rng_fill(rng, q + (size_t)i * s->n_heads * hd, nq, -1.0f, 1.0f);
        na_rng_fill(rng, k, nk, -1.0f, 1.0f);
        na_rng_fill(rng, v, nk, -1.0f, 1.0f);
        for (j = 0; j < (int)nk; j++) {
            r->k[nc_off(s, r, l, r->len) + j] = nc_round(k[j], s->kv_dtype);
            r->v[nc_off(s, r, l, r->len) + j] = nc_round(v[j], s->kv_dtype);
        }
        e[i].request_id = r->id;
        e[i].position = (uint32_t)r->len;
        e[i].kv_h0 = (uint16_t)r->h0;
        e[i].kv_h1 = (uint16_t)r->h1;
        e[i].q = q + (size_t)i * s->n_heads * hd;
        e[i].k = k;
        e[i].v = v;
    }
    nc_decode_msg(&m, s, 1, l, e, n);
    t0 = na_xp_now_ns();
    NA_CHECK_OK(na_peer_send(sc, &m, NULL));
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    NA_CHECK_OK(na_peer_send(sc, &m, NULL));
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_ECHO;
    NA_CHECK_OK(na_peer_send(sc, &m, NULL));
    *order_ok = 1;
    while ((outs == 0 || replies < 2) && na_xp_now_ns() < deadline) {
        na_xp_msg_t *msg;
        na_wire_hdr_t h;
        na_wire_msg_t r;
        if (na_xp_recv(xp, 100, &msg) != NA_OK)
            continue;
        if (msg->kind == NA_XP_MSG_DATA && na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h) == NA_OK &&
            na_wire_decode(&h, msg->data, msg->len, &r) == NA_OK) {
            if (r.type == NA_WIRE_MSG_STATS || r.type == NA_WIRE_MSG_ECHO) {
                if (++replies == 2)
                    *t_reply = (double)(na_xp_now_ns() - t0) / 1e6;
            } else if (r.type == NA_WIRE_MSG_ATTN_OUT) {
                *t_out = (double)(na_xp_now_ns() - t0) / 1e6;
                *order_ok = replies == 2;
                for (i = 0; i < (int)r.u.attn_out.n_entries; i++) {
                    na_wire_out_entry_t oe;
                    nc_req_t *rq = &rs[i];
                    (void)na_wire_attn_out_get(&r.u.attn_out, (uint32_t)i, &oe);
                    NA_CHECK_MSG(oe.status == 0, "busy layer %d entry %d: status %d", l, i,
                                 oe.status);
                    if (oe.status != 0 || i % 4 != 0)
                        continue;
                    na_wire_rows_to_f32(oe.o, r.u.attn_out.dtype,
                                        (size_t)rq->nh * s->grp * hd, o);
                    nc_ref(ref, s, rq, l, rq->len + 1, q + (size_t)i * s->n_heads * hd, want);
                    NA_CHECK_MSG(na_close_ratio(o, want, (size_t)rq->nh * s->grp * hd, 1e-4,
                                                2e-3) <= 1.0, "busy layer %d entry %d: output "
                                 "differs from the ref kernels", l, i);
                }
                outs++;
            }
        }
        na_xp_msg_release(xp, msg);
    }
    NA_CHECK_MSG(outs == 1 && replies == 2, "busy layer %d: %d ATTN_OUT, %d of 2 replies", l,
                 outs, replies);
    free(e); free(q); free(kv); free(o); free(want);
}

static int nc_busy(na_peer_t *sc, const nc_shape_t *s, const nc_args_t *a)
{
    nc_req_t *rs = calloc((size_t)a->requests, sizeof(*rs));
    uint64_t base = 1000u * (uint64_t)getpid();
    na_kernels_t *ref;
    na_rng_t rng;
    int i, l, early = 0;

    na_rng_seed(&rng, (uint64_t)a->seed);
    NA_CHECK_OK(na_kernels_create("ref", 1, &ref));
    for (i = 0; i < a->requests; i++) {
        nc_req_t *r = &rs[i];
        r->id = base + (uint64_t)i + 1;
        r->h1 = r->nh = s->n_kv_heads;
        r->prompt = 16384;
        r->max_tokens = r->prompt + 4;
        r->k = calloc((size_t)s->n_layers * r->max_tokens * r->nh * s->head_dim, sizeof(float));
        r->v = calloc((size_t)s->n_layers * r->max_tokens * r->nh * s->head_dim, sizeof(float));
        NA_CHECK_OK(nc_open(sc, s, r, NA_DTYPE_F32));
        NA_CHECK_OK(nc_prefill(sc, s, r, &rng, NA_DTYPE_F32));
    }
    for (l = 0; l < s->n_layers && na_test_failures == 0; l++) {
        double t_reply = 0, t_out = 0;
        int ok = 0;
        nc_busy_layer(sc, a->xp, s, rs, a->requests, l, &rng, ref, &ok, &t_reply, &t_out);
        printf("BUSY layer %d: STATS+ECHO answered after %.3f ms, ATTN_OUT after %.3f ms%s\n",
               l, t_reply, t_out, ok ? "" : " (replies came late)");
        early += ok;
    }
    /* a node that blocks on the batch can never answer before its ATTN_OUT
     * (it reads STATS/ECHO only after sending it), so one early layer proves
     * the loop runs on; more can be late on a loaded machine (scheduling) */
    NA_CHECK_MSG(early >= 1, "the node answered STATS/ECHO before the batch in "
                 "%d of %d layers", early, s->n_layers);
    for (i = 0; i < a->requests; i++) {
        NA_CHECK_OK(na_sc_release(sc, rs[i].id, 0, NA_SC_WAIT_MS));
        free(rs[i].k);
        free(rs[i].v);
    }
    na_kernels_destroy(ref);
    free(rs);
    return 0;
}

static int nc_hold(na_peer_t *sc, const nc_shape_t *s, const nc_args_t *a)
{
    nc_req_t r;
    na_rng_t rng;

    memset(&r, 0, sizeof(r));
    na_rng_seed(&rng, (uint64_t)a->seed);
    r.id = 42;
    r.h1 = r.nh = s->n_kv_heads;
    r.prompt = 40;
    r.max_tokens = 100;
    r.k = calloc((size_t)s->n_layers * r.max_tokens * r.nh * s->head_dim, sizeof(float));
    r.v = calloc((size_t)s->n_layers * r.max_tokens * r.nh * s->head_dim, sizeof(float));
    NA_CHECK_OK(nc_open(sc, s, &r, a->dtype));
    NA_CHECK_OK(nc_prefill(sc, s, &r, &rng, a->dtype));
    if (na_test_failures)
        return 1;
    printf("HELD\n");
    fflush(stdout);
    for (;;)
        if (na_sc_poll(sc, 1000) != NA_OK)
            return 1;
}

static int nc_refuse(na_peer_t *sc, const nc_shape_t *s, const nc_args_t *a)
{
    nc_req_t r;
    na_status_t st;

    memset(&r, 0, sizeof(r));
    r.id = 5;
    r.h1 = r.nh = s->n_kv_heads;
    r.max_tokens = 1 << 23;                /* far past any test SSD budget */
    st = nc_open(sc, s, &r, a->dtype);
    /* more than the budget even on an empty node: RANGE (never fits), not
     * NOSPACE (full now: the compute node would wait for room) */
    NA_CHECK_MSG(st == NA_ERR_RANGE, "huge open gave %s: %s", na_status_string(st), na_errmsg());
    printf("REFUSED %s\n", na_errmsg());
    NA_CHECK(strstr(na_errmsg(), "refused") != NULL);
    NA_CHECK(strstr(na_errmsg(), "KV budget") != NULL);
    NA_CHECK(nc_stat(sc, na_stat_node_key(NA_STAT_OPENS_REFUSED)) >= 1);
    return nc_basic(sc, s, a);
}

/* Bad input of kind `variant`: 0 random header bytes, 1 a DECODE_ATTN whose
 * payload is cut short, 2 a HELLO after the handshake, 3 a header claiming
 * another major version. The node must drop the connection (only). */
static int nc_garbage(na_peer_t *sc, int variant)
{
    uint8_t hdr[NA_WIRE_HDR_SIZE], payload[256];
    na_wire_hdr_t h;
    na_status_t st;
    size_t plen = 100;
    int i;

    memset(payload, 0xa5, sizeof(payload));
    memset(&h, 0, sizeof(h));
    switch (variant) {              /* 1..3: a header of this type and payload_len plen */
    case 1:                         /* fixed part + table promise more than arrives */
        h.type = NA_WIRE_MSG_DECODE_ATTN;
        memset(payload, 0, sizeof(payload));
        payload[0] = 3;             /* n_entries 3, but no table follows */
        plen = 40;
        break;
    case 2:
        h.type = NA_WIRE_MSG_HELLO;
        plen = 168;
        break;
    case 3:
        h.type = NA_WIRE_MSG_HEARTBEAT;
        plen = 16;
        break;
    default:
        for (i = 0; i < (int)sizeof(hdr); i++)
            hdr[i] = (uint8_t)(i * 37 + 11);
        break;
    }
    if (variant >= 1 && variant <= 3) {
        h.payload_len = plen;
        na_wire_hdr_encode(hdr, &h);
    }
    if (variant == 3)
        hdr[4] = NA_WIRE_VERSION_MAJOR + 1;      /* ver_major (little-endian u16) */
    NA_CHECK_OK(na_xp_send(na_peer_ep(sc), hdr, sizeof(hdr), payload, plen));
    for (i = 0; i < 50; i++) {
        st = na_sc_poll(sc, 100);
        if (st != NA_OK)
            break;
    }
    NA_CHECK_MSG(st == NA_ERR_PEER, "after garbage: %s (%s)", na_status_string(st), na_errmsg());
    printf("DROPPED %s\n", na_errmsg());
    return 0;
}

/* ATTN_OUT of a flooded batch: a fast node may answer the first batches
 * before the rest arrive; the client takes them and reads nothing from them. */
static int nc_flood_answers;

static na_status_t nc_flood_answer(void *ctx, na_ses_in_t *in)
{
    (void)ctx;
    (void)in;
    nc_flood_answers++;
    return NA_OK;
}

static int nc_flood(na_ses_t *ses, na_peer_t *sc, const nc_shape_t *s, const nc_args_t *a)
{
    const int hd = s->head_dim, n = a->requests;
    nc_req_t *rs = calloc((size_t)n, sizeof(*rs));
    na_wire_attn_entry_t *e = calloc((size_t)n, sizeof(*e));
    float *q = calloc((size_t)s->n_heads * hd, sizeof(float));
    float *kv = calloc((size_t)2 * s->n_kv_heads * hd, sizeof(float));
    uint64_t base = 1000u * (uint64_t)getpid();
    na_status_t st = NA_OK;
    na_wire_msg_t m;
    na_rng_t rng;
    int i, k;

    na_rng_seed(&rng, (uint64_t)a->seed);
    na_rng_fill(&rng, q, (size_t)s->n_heads * hd, -1.0f, 1.0f);
    na_rng_fill(&rng, kv, (size_t)2 * s->n_kv_heads * hd, -1.0f, 1.0f);
    na_ses_on(ses, NA_WIRE_MSG_ATTN_OUT, nc_flood_answer);
    for (i = 0; i < n; i++) {
        nc_req_t *r = &rs[i];
        r->id = base + (uint64_t)i + 1;
        r->h1 = r->nh = s->n_kv_heads;
        r->len = r->prompt = 8192;
        r->max_tokens = r->prompt + a->steps + 1;
        r->k = calloc((size_t)s->n_layers * r->max_tokens * r->nh * hd, sizeof(float));
        r->v = calloc((size_t)s->n_layers * r->max_tokens * r->nh * hd, sizeof(float));
        NA_CHECK_OK(nc_open(sc, s, r, NA_DTYPE_F32));
        NA_CHECK_OK(nc_prefill(sc, s, r, &rng, NA_DTYPE_F32));
        e[i].request_id = r->id;
        e[i].position = (uint32_t)r->len;
        e[i].kv_h1 = (uint16_t)r->nh;
        e[i].q = q;
        e[i].k = kv;
        e[i].v = kv + (size_t)s->n_kv_heads * hd;
    }
    for (k = 0; k < a->steps && st == NA_OK; k++) {
        nc_decode_msg(&m, s, (uint32_t)k + 1, k % s->n_layers, e, n);
        st = na_peer_send(sc, &m, NULL);     /* may fail once we are dropped */
    }
    for (i = 0; i < 100 && st == NA_OK; i++)
        st = na_sc_poll(sc, 100);
    NA_CHECK_MSG(st == NA_ERR_PEER, "after %d batches unanswered: %s (%s)", a->steps,
                 na_status_string(st), na_errmsg());
    printf("DROPPED %s\n", na_errmsg());
    printf("ANSWERED %d of %d batches before the drop\n", nc_flood_answers, a->steps);
    for (i = 0; i < n; i++) {
        free(rs[i].k);
        free(rs[i].v);
    }
    free(rs); free(e); free(q); free(kv);
    return 0;
}

static int nc_idle(na_peer_t *sc, const na_cfg_t *cfg)
{
    na_status_t st = NA_OK;
    int i;
    usleep((useconds_t)(2 * cfg->transport.peer_timeout_ms) * 1000u);
    for (i = 0; i < 50 && st == NA_OK; i++)
        st = na_sc_poll(sc, 100);
    NA_CHECK_MSG(st == NA_ERR_PEER, "silent client: %s (%s)", na_status_string(st), na_errmsg());
    printf("DROPPED %s\n", na_errmsg());
    return 0;
}

/* A compute node's view (compute-node/storage_dir.h): start with what is up,
 * pick up storage nodes started later and nodes added to the layout file; run
 * a small `basic` on each as it appears ("CONNECTED name"). Ends when
 * a->expect nodes were used, or fails after 60 s. */
static int nc_discover(na_ses_t *ses, const nc_shape_t *s, const nc_args_t *a)
{
    nc_args_t small = *a;
    na_sc_dir_t *d;
    uint64_t deadline = na_xp_now_ns() + 60ull * 1000000000ull;
    char used[256] = { 0 };
    int n_used = 0, i;

    small.requests = 1;
    small.steps = 1;
    NA_CHECK_OK(na_sc_dir_create(ses, a->config, 200, &d));
    if (na_test_failures)
        return 1;
    while (n_used < a->expect && na_xp_now_ns() < deadline) {
        na_peer_t *any = NULL;
        (void)na_sc_dir_refresh(d);
        for (i = 0; i < na_sc_dir_count(d) && i < (int)sizeof(used); i++) {
            na_peer_t *sc = na_sc_dir_conn(d, i);
            if (sc == NULL)
                continue;
            any = sc;
            if (used[i])
                continue;
            printf("CONNECTED %s\n", na_sc_dir_name(d, i));
            fflush(stdout);
            if (nc_basic(sc, s, &small) != 0)
                na_test_failures++;
            used[i] = 1;
            n_used++;
        }
        if (any != NULL)
            (void)na_sc_poll(any, 100);          /* heartbeats of every connection */
        else
            usleep(100000);
    }
    NA_CHECK_MSG(n_used >= a->expect, "used %d storage nodes, expected %d", n_used, a->expect);
    na_sc_dir_destroy(d);
    return 0;
}

/* Parse arguments; 0 ok. */
static int nc_parse(int argc, char **argv, nc_args_t *a)
{
    int i;
    memset(a, 0, sizeof(*a));
    a->requests = 3;
    a->steps = 4;
    a->seed = 7;
    a->dtype = NA_DTYPE_F32;
    a->name = "nc";
    for (i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--config")) a->config = v;
        else if (!strcmp(k, "--node")) a->node = v;
        else if (!strcmp(k, "--connect")) a->connect = v;
        else if (!strcmp(k, "--scenario")) a->scenario = v;
        else if (!strcmp(k, "--secret-file")) a->secret_file = v;
        else if (!strcmp(k, "--name")) a->name = v;
        else if (!strcmp(k, "--stat")) a->stat_key = v;
        else if (!strcmp(k, "--requests")) a->requests = atoi(v);
        else if (!strcmp(k, "--steps")) a->steps = atoi(v);
        else if (!strcmp(k, "--seed")) a->seed = atoi(v);
        else if (!strcmp(k, "--expect")) a->expect = atoi(v);
        else if (!strcmp(k, "--dtype")) a->dtype = !strcmp(v, "f16") ? NA_DTYPE_F16 : NA_DTYPE_F32;
        else return -1;
    }
    if (a->scenario != NULL && !strcmp(a->scenario, "discover"))
        return (i == argc && a->config && a->expect >= 1) ? 0 : -1;
    return (i == argc && a->config && a->scenario && (a->node || a->connect) &&
            a->requests >= 1 && a->steps >= 1) ? 0 : -1;
}

int main(int argc, char **argv)
{
    nc_args_t a;
    na_cfg_t *cfg;
    na_model_t *model;
    nc_shape_t s;
    na_xp_opts_t xo;
    na_xp_t *xp;
    na_ses_opts_t so;
    na_ses_t *ses = NULL;
    na_peer_t *sc;
    char host[256], secret[4096];
    size_t secret_len = 0;
    int port = 0, rc = 0;
    na_status_t st;

    if (nc_parse(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: node_client --config F (--node NAME | --connect HOST:PORT) "
                "--scenario basic|busy|hold|refuse|garbage|secret|idle|stat [options]\n");
        return 2;
    }
    na_log_set_tag(a.name);
    NA_CHECK_OK(na_cfg_load(a.config, &cfg));
    if (na_test_failures)
        return 1;
    if (cfg->model.path == NULL || access(cfg->model.path, R_OK) != 0)
        NA_SKIP("model %s not available", cfg->model.path ? cfg->model.path : "(none)");
    NA_CHECK_OK(na_model_open(cfg->model.path, &model));
    if (na_test_failures)
        return 1;
    s.n_layers = model->cfg.n_layers;
    s.n_heads = model->cfg.n_heads;
    s.n_kv_heads = model->cfg.n_kv_heads;
    s.head_dim = model->cfg.head_dim;
    s.grp = s.n_heads / s.n_kv_heads;
    s.kv_dtype = cfg->model.kv_dtype == NA_CFG_KV_F32 ? NA_DTYPE_F32 : NA_DTYPE_F16;
    na_model_destroy(model);

    if (!strcmp(a.scenario, "discover")) {
        host[0] = '\0';
    } else if (a.connect != NULL) {
        const char *c = strrchr(a.connect, ':');
        if (c == NULL || (size_t)(c - a.connect) >= sizeof(host))
            return 2;
        memcpy(host, a.connect, (size_t)(c - a.connect));
        host[c - a.connect] = '\0';
        port = atoi(c + 1);
    } else {
        const na_cfg_node_t *n = na_cfg_find_node(cfg, a.node);
        if (n == NULL) {
            fprintf(stderr, "node_client: no node %s in %s\n", a.node, a.config);
            return 2;
        }
        snprintf(host, sizeof(host), "%s", n->host);
        port = (int)n->port;
    }
    if (a.secret_file != NULL) {
        FILE *f = fopen(a.secret_file, "rb");
        if (f == NULL)
            return 2;
        secret_len = fread(secret, 1, sizeof(secret), f);
        fclose(f);
    }
    memset(&xo, 0, sizeof(xo));
    xo.name = a.name;
    xo.cluster = cfg->cluster.name;
    xo.role = NA_WIRE_ROLE_COMPUTE;
    xo.tls = (na_xp_tls_t)cfg->transport.tls_kind;
    xo.tls_raw = cfg->transport.tls;
    xo.secret = a.secret_file ? (const uint8_t *)secret : cfg->secret;
    xo.secret_len = a.secret_file ? secret_len : cfg->secret_len;
    xo.timeout_ms = (int)cfg->transport.timeout_ms;
    NA_CHECK_OK(na_xp_create(&xo, &xp));
    if (na_test_failures)
        return 1;
    memset(&so, 0, sizeof(so));
    so.who = a.name;
    NA_CHECK_OK(na_ses_create(xp, &so, NULL, &ses));
    if (na_test_failures)
        return 1;
    a.xp = xp;
    if (!strcmp(a.scenario, "discover")) {
        rc = nc_discover(ses, &s, &a);
        goto out;
    }
    st = na_ses_connect(ses, host, port, &sc);
    if (!strcmp(a.scenario, "secret")) {
        NA_CHECK_MSG(st != NA_OK, "a client with the wrong secret was accepted");
        printf("REFUSED %s\n", st != NA_OK ? na_errmsg() : "(accepted!)");
        if (st == NA_OK)
            na_peer_close(sc, 0, "done");
        goto out;
    }
    NA_CHECK_OK(st);
    if (st != NA_OK)
        goto out;
    if (!strcmp(a.scenario, "basic"))
        rc = nc_basic(sc, &s, &a);
    else if (!strcmp(a.scenario, "hold"))
        rc = nc_hold(sc, &s, &a);
    else if (!strcmp(a.scenario, "busy"))
        rc = nc_busy(sc, &s, &a);
    else if (!strcmp(a.scenario, "flood"))
        rc = nc_flood(ses, sc, &s, &a);
    else if (!strcmp(a.scenario, "refuse"))
        rc = nc_refuse(sc, &s, &a);
    else if (!strncmp(a.scenario, "garbage", 7))
        rc = nc_garbage(sc, atoi(a.scenario + 7));
    else if (!strcmp(a.scenario, "idle"))
        rc = nc_idle(sc, cfg);
    else if (!strcmp(a.scenario, "stat") && a.stat_key != NULL)
        printf("STAT %s %llu\n", a.stat_key, (unsigned long long)nc_stat(sc, a.stat_key));
    else
        rc = 2;
    na_peer_close(sc, 0, "done");
out:
    na_ses_destroy(ses);
    na_xp_destroy(xp);
    na_cfg_destroy(cfg);
    if (rc != 0)
        return rc;
    return na_test_finish();
}
