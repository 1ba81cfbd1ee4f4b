/* compute-node/engine.c — engine and activation objects, step checks, and the
 * monolithic forward pass (slices with local attention in between). */
#include "compute-node/engine.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The placed weights of a layer, in the order of na_engine_layer_w_t, with
 * the model tensors they come from. */
#define NA_ENGINE_LAYER_W(X) X(attn_norm) X(wq) X(wk) X(wv) X(wo) X(ffn_norm) X(w1) X(w2) X(w3) \
    X(bq) X(bk) X(bv) X(bo) X(q_norm) X(k_norm)

/* Place t on the backend as w. Where the backend made its own copy (a
 * reordered cpu copy, a device upload: the placed buffer is not t's
 * memory), this process's pages of the model file under t are dropped
 * (madvise MADV_DONTNEED on the pages wholly inside t), so resident memory
 * counts such a weight once, not twice. The file is mapped read-only and
 * private (common/mapfile.c): a later read of t faults its pages in again
 * from the page cache or the file, never zeros. Weights outside the file's
 * mapping (converted in memory) are left alone. */
static na_status_t na_engine_place_one(na_engine_t *e, const na_tensor_t *t, na_kweight_t *w)
{
    const na_model_t *m = e->model;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), m0 = (uintptr_t)m->map;
    na_status_t st = e->kern->ops->place(e->kern, t, w);
    uintptr_t lo = (uintptr_t)t->data, hi;

    if (st != NA_OK || m->map == NULL || t->data == NULL || w->buf.host == t->data)
        return st;
    hi = lo + na_dtype_bytes(t->dtype, (size_t)t->rows * (size_t)t->cols);
    if (lo < m0 || hi > m0 + m->map_size)
        return st;
    lo = (lo + page - 1) & ~(page - 1);
    hi &= ~(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);   /* advice: harmless if refused */
    return st;
}

/* Place every weight of the model on the backend once. */
static na_status_t na_engine_place(na_engine_t *e)
{
    const na_model_t *m = e->model;
    na_status_t st;
    int l;

    e->w.layers = calloc((size_t)e->cfg.n_layers, sizeof(*e->w.layers));
    if (e->w.layers == NULL)
        return na_err(NA_ERR_NOMEM, "engine: out of memory");
    if ((st = na_engine_place_one(e, &m->tok_embd, &e->w.tok_embd)) != NA_OK ||
        (st = na_engine_place_one(e, &m->out_norm, &e->w.out_norm)) != NA_OK ||
        (st = na_engine_place_one(e, &m->output, &e->w.output)) != NA_OK)
        return st;
    for (l = 0; l < e->cfg.n_layers; l++) {
#define NA_PLACE(f)                                                                      \
        if (na_tensor_present(&m->layers[l].f) &&                                        \
            (st = na_engine_place_one(e, &m->layers[l].f, &e->w.layers[l].f)) != NA_OK) \
            return st;
        NA_ENGINE_LAYER_W(NA_PLACE)
#undef NA_PLACE
    }
    return NA_OK;
}

/* Undo na_engine_place (also a partial one: unplacing a zeroed weight is a
 * no-op for every backend). */
static void na_engine_unplace(na_engine_t *e)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    int l;

    if (e->w.layers != NULL) {
        for (l = 0; l < e->cfg.n_layers; l++) {
#define NA_UNPLACE(f) ops->unplace(e->kern, &e->w.layers[l].f);
            NA_ENGINE_LAYER_W(NA_UNPLACE)
#undef NA_UNPLACE
        }
    }
    ops->unplace(e->kern, &e->w.output);
    ops->unplace(e->kern, &e->w.out_norm);
    ops->unplace(e->kern, &e->w.tok_embd);
    free(e->w.layers);
    e->w.layers = NULL;
}

na_status_t na_engine_create(const na_model_t *model, const na_engine_opts_t *opts,
                             na_engine_t **e_p)
{
    const char *backend = opts->backend != NULL ? opts->backend : "cpu";
    na_engine_t *e;
    na_status_t st;

    if (opts->kv_dtype != NA_DTYPE_F32 && opts->kv_dtype != NA_DTYPE_F16 &&
        opts->kv_dtype != NA_DTYPE_BF16)
        return na_err(NA_ERR_INVALID, "KV dtype %s is not supported (use f16, bf16 or f32)",
                      na_dtype_name(opts->kv_dtype));
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return na_err(NA_ERR_NOMEM, "engine: out of memory");
    e->model = model;
    e->cfg = model->cfg;
    e->opts = *opts;
    e->opts.backend = NULL;
    if (e->opts.max_rows <= 0)
        e->opts.max_rows = NA_ENGINE_DEFAULT_MAX_ROWS;
    e->q_dim = e->cfg.n_heads * e->cfg.head_dim;
    e->kv_dim = e->cfg.n_kv_heads * e->cfg.head_dim;
    st = na_kernels_create(backend, opts->n_threads, &e->kern);
    if (st == NA_OK) {
        /* every front end (run, serve, batch, perplexity; monolithic and
         * offload): a row's logits must not depend on the rows batched beside
         * it, so greedy and seeded text is the same at any batch (sampler.h) */
        e->kern->batch_invariant = 1;
        st = na_engine_place(e);
    }
    if (st == NA_OK) {
        na_rope_desc_t rd;
        na_rope_desc_model(&rd, model);
        st = na_rope_create(e->kern, &rd, &e->rope);
    }
    if (st != NA_OK) {
        na_engine_destroy(e);
        return st;
    }
    *e_p = e;
    return NA_OK;
}

/* Also takes a half-built engine (na_engine_create's failure path: no
 * kernels, or weights placed in part). */
void na_engine_destroy(na_engine_t *e)
{
    if (e == NULL)
        return;
    na_rope_destroy(e->rope);
    if (e->kern != NULL)
        na_engine_unplace(e);
    na_kernels_destroy(e->kern);
    free(e);
}

/* Free every buffer of a (the struct and its event stay). */
static void na_acts_free_buffers(na_acts_t *a, const na_engine_t *e)
{
    int i;
    for (i = 0; i < NA_ACT_COUNT; i++) {
        e->kern->ops->buf_free(e->kern, a->mirror[i]);
        e->kern->ops->buf_free(e->kern, a->buf[i]);
        a->mirror[i] = NULL;
        a->buf[i] = NULL;
        *na_acts_view(a, i) = NULL;
    }
    a->cap_rows = 0;
    a->cap_seg = 0;
}

/* Allocate activation i for r rows / g segments in the engine's memory type,
 * with a pinned host mirror when that memory has no host pointer. */
static na_status_t na_acts_alloc(na_acts_t *a, const na_engine_t *e, int i, size_t r,
                                 size_t g)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    int per_seg;
    size_t w = na_acts_width(e, i, &per_seg);
    size_t bytes = w * (per_seg ? g : r) * sizeof(float);
    na_status_t st = ops->buf_alloc(e->kern, bytes, e->kern->mem, &a->buf[i]);

    if (st != NA_OK)
        return st;
    if (a->buf[i]->host == NULL) {
        st = ops->buf_alloc(e->kern, bytes, NA_KMEM_PINNED, &a->mirror[i]);
        if (st != NA_OK)
            return st;
    }
    *na_acts_view(a, i) = a->mirror[i] != NULL ? a->mirror[i]->host : a->buf[i]->host;
    return NA_OK;
}

na_status_t na_acts_reserve(na_acts_t *a, const na_engine_t *e, int n_rows, int n_seg)
{
    na_status_t st = NA_OK;
    int i, want_rows = n_rows, want_seg = n_seg;

    if (n_rows > a->cap_rows || n_seg > a->cap_seg) {
        if (n_rows < a->cap_rows)
            n_rows = a->cap_rows;
        if (n_seg < a->cap_seg)
            n_seg = a->cap_seg;
        na_acts_free_buffers(a, e);
        for (i = 0; i < NA_ACT_COUNT && st == NA_OK; i++)
            st = na_acts_alloc(a, e, i, (size_t)n_rows, (size_t)n_seg);
        if (st != NA_OK) {
            na_acts_free_buffers(a, e);
            return st;
        }
        a->cap_rows = n_rows;
        a->cap_seg = n_seg;
    }
    a->n_rows = want_rows;
    a->n_seg = want_seg;
    return NA_OK;
}

na_status_t na_acts_create(const na_engine_t *e, int max_rows, int max_seg,
                           na_acts_t **a_p)
{
    na_acts_t *a = calloc(1, sizeof(*a));
    na_status_t st;

    if (a == NULL)
        return na_err(NA_ERR_NOMEM, "activations: out of memory");
    a->e = e;
    st = e->kern->ops->event_create(e->kern, &a->ev);
    if (st == NA_OK)
        st = na_acts_reserve(a, e, max_rows > 0 ? max_rows : 1, max_seg > 0 ? max_seg : 1);
    if (st != NA_OK) {
        na_acts_destroy(a);
        return st;
    }
    *a_p = a;
    return NA_OK;
}

/* Also takes a half-built object (na_acts_create's failure path: no buffers,
 * maybe no event). */
void na_acts_destroy(na_acts_t *a)
{
    if (a == NULL)
        return;
    na_acts_free_buffers(a, a->e);
    a->e->kern->ops->event_destroy(a->e->kern, a->ev);
    free(a);
}

na_status_t na_step_check(const na_engine_t *e, const na_step_t *s)
{
    int i, j, row = 0;

    if (s->n_seg <= 0 || s->n_rows <= 0)
        return na_err(NA_ERR_INVALID, "step: empty (%d rows, %d segments)",
                      s->n_rows, s->n_seg);
    for (i = 0; i < s->n_seg; i++) {
        const na_step_seg_t *g = &s->seg[i];
        if (g->row0 != row || g->n_tok <= 0 || g->pos0 < 0 ||
            g->pos0 + g->n_tok > e->cfg.seq_len)
            return na_err(NA_ERR_INVALID,
                          "step: segment %d (row0 %d, %d tokens at position %d) is not "
                          "contiguous or exceeds the context of %d",
                          i, g->row0, g->n_tok, g->pos0, e->cfg.seq_len);
        for (j = 0; j < g->n_tok; j++) {
            int t = s->tokens[row + j];
            if (t < 0 || t >= e->cfg.vocab_size)
                return na_err(NA_ERR_INVALID, "step: token id %d outside [0, %d)",
                              t, e->cfg.vocab_size);
            if (s->pos[row + j] != g->pos0 + j)
                return na_err(NA_ERR_INVALID, "step: row %d has position %d, expected %d",
                              row + j, s->pos[row + j], g->pos0 + j);
        }
        row += g->n_tok;
    }
    if (row != s->n_rows)
        return na_err(NA_ERR_INVALID, "step: segments cover %d rows of %d", row, s->n_rows);
    return NA_OK;
}

na_status_t na_engine_attn_local(na_engine_t *e, na_acts_t *a, const na_step_t *s,
                                 int layer)
{
    const size_t qb = (size_t)e->q_dim * sizeof(float), kb = (size_t)e->kv_dim * sizeof(float);
    na_lkv_t *dkv[NA_LKV_BATCH];
    na_kbuf_t dq[NA_LKV_BATCH], dout[NA_LKV_BATCH];
    int dctx[NA_LKV_BATCH], nd = 0;
    na_status_t st = NA_OK;
    int i;

    /* each segment's K/V first; a prefill segment attends at once, the
     * decode rows (one token each) together: one batched launch a layer on
     * cuda (na_lkv_attend_decode), n single ones elsewhere */
    for (i = 0; i < s->n_seg && st == NA_OK; i++) {
        const na_step_seg_t *g = &s->seg[i];
        size_t r = (size_t)g->row0, n = (size_t)g->n_tok;
        na_kbuf_t k = na_kbuf_view(a->buf[NA_ACT_K], r * kb, n * kb);
        na_kbuf_t v = na_kbuf_view(a->buf[NA_ACT_V], r * kb, n * kb);
        na_kbuf_t q = na_kbuf_view(a->buf[NA_ACT_Q], r * qb, n * qb);
        na_kbuf_t o = na_kbuf_view(a->buf[NA_ACT_ATT], r * qb, n * qb);

        st = na_lkv_write(g->kv, layer, g->pos0, g->n_tok, &k, &v);
        if (st != NA_OK)
            break;
        if (g->n_tok != 1) {
            st = na_lkv_attend(g->kv, layer, &o, &q, g->n_tok, g->pos0, &e->cfg);
            continue;
        }
        dkv[nd] = g->kv;
        dq[nd] = q;
        dout[nd] = o;
        dctx[nd++] = g->pos0 + 1;
        if (nd == NA_LKV_BATCH) {
            st = na_lkv_attend_decode(dkv, nd, layer, dout, dq, dctx, &e->cfg);
            nd = 0;
        }
    }
    if (st == NA_OK && nd > 0)
        st = na_lkv_attend_decode(dkv, nd, layer, dout, dq, dctx, &e->cfg);
    return st;
}

na_status_t na_engine_forward(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    return na_engine_forward_traced(e, a, s, NULL, NULL);
}

na_status_t na_engine_forward_traced(na_engine_t *e, na_acts_t *a, const na_step_t *s,
                                     na_layer_trace_fn fn, void *ctx)
{
    na_status_t st;
    int i, l;

    st = na_step_check(e, s);
    if (st != NA_OK)
        return st;
    for (i = 0; i < s->n_seg; i++) {
        if (s->seg[i].kv == NULL)
            return na_err(NA_ERR_INVALID, "step: segment %d has no local KV cache", i);
        st = na_lkv_reserve(s->seg[i].kv, s->seg[i].pos0 + s->seg[i].n_tok);
        if (st != NA_OK)
            return st;
    }
    st = na_acts_reserve(a, e, s->n_rows, s->n_seg);
    if (st != NA_OK)
        return st;

    st = na_slice_embed(e, a, s);
    for (l = 0; l < e->cfg.n_layers && st == NA_OK; l++) {
        st = na_slice_pre_attn(e, a, s, l);
        if (st == NA_OK)
            st = na_engine_attn_local(e, a, s, l);
        if (st == NA_OK && fn != NULL)
            st = fn(ctx, e, a, s, l, NA_TRACE_ATT);
        if (st == NA_OK)
            st = na_slice_post_attn(e, a, s, l);
        if (st == NA_OK && fn != NULL)
            st = fn(ctx, e, a, s, l, NA_TRACE_OUT);
    }
    if (st == NA_OK)
        st = na_slice_final(e, a, s);
    if (st == NA_OK)
        st = na_acts_to_host(e, a, NA_ACT(NA_ACT_LOGITS));
    if (st != NA_OK)
        return st;

    for (i = 0; i < s->n_seg; i++)
        na_lkv_commit(s->seg[i].kv, s->seg[i].pos0 + s->seg[i].n_tok);
    return NA_OK;
}
