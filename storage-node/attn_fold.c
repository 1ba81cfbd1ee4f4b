/* storage-node/attn_fold.c — attention over a view's KV blocks in the
 * canonical order (see attn_fold.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "storage-node/attn_fold.h"

/* Most spans of one head in a run: a run is at most NA_ATTN_CHUNK tokens
 * when blocks are shorter than a chunk (one span per block, + 1 for a block
 * cut at each end), else at most block_tokens + NA_ATTN_CHUNK - 1 tokens,
 * which lie in at most 3 blocks. */
#define NA_FOLD_MAX_SPANS (NA_ATTN_CHUNK + 2)

/* The spans of KV head h over tokens [a, b) (blocks of sh through base); the
 * last span names `after` as what to prefetch once the last head is done
 * (NULL: nothing). Returns the number of spans. */
static int na_fold_spans(const na_attn_shape_t *sh, na_attn_block_fn *base, void *arg, int h,
                         int a, int b, const char *after, na_kv_span_t *sp)
{
    const int bt = sh->block_tokens, hd = sh->head_dim;
    const size_t es = na_dtype_bytes(sh->kv_dtype, 1), half = (size_t)bt * hd * es;
    const int b0 = a / bt, b1 = (b + bt - 1) / bt;   /* blocks [b0, b1) */
    int n = 0, blk;

    for (blk = b0; blk < b1; blk++) {
        const char *bb = base(arg, blk);
        const int s0 = blk * bt > a ? blk * bt : a;
        const int s1 = (blk + 1) * bt < b ? (blk + 1) * bt : b;
        const size_t off = (size_t)(s0 - blk * bt) * hd * es;
        sp[n].k = bb + (size_t)h * 2 * half + off;
        sp[n].v = bb + (size_t)h * 2 * half + half + off;
        sp[n].stride = (size_t)hd;
        sp[n].n = s1 - s0;
        /* the next head's K and V of this block (the layout's next bytes),
         * or after the last head what follows the run */
        sp[n].next = h + 1 < sh->n_kvh ? bb + (size_t)(h + 1) * 2 * half
                                       : blk + 1 < b1 ? NULL : after;
        sp[n].next_bytes = sp[n].next != NULL ? 2 * half : 0;
        n++;
    }
    return n;
}

void na_attn_fold_rows(na_kernels_t *k, const na_attn_shape_t *sh, const na_attn_rows_t *r,
                       int t0, int t1, na_attn_block_fn *base, void *arg)
{
    const int bt = sh->block_tokens, hd = sh->head_dim, grp = sh->group;
    /* a run: whole chunks (so its chunks are the context's), at least a block */
    const int run = (bt + NA_ATTN_CHUNK - 1) / NA_ATTN_CHUNK * NA_ATTN_CHUNK;
    const float scale = 1.0f / sqrtf((float)hd);
    na_kv_span_t sp[NA_FOLD_MAX_SPANS];
    int a, h, i;

    for (a = t0; a < t1; a += run) {
        const int b = t1 - a < run ? t1 : a + run;
        /* rows that see keys of the run (row i sees keys < lim0 + i, rising
         * with i), and those that see it whole: one group of the kernel */
        const long lo = (long)a - r->lim0 + 1, full = (long)b - r->lim0;
        const int ilo = lo > r->i0 ? (int)lo : r->i0;
        const int ifull = full > ilo ? (full < r->i1 ? (int)full : r->i1) : ilo;
        /* what the kernel may prefetch after the last head: the next run's
         * first block */
        const char *after = b < t1 ? base(arg, b / bt) : NULL;

        if (ilo >= r->i1)
            break;                 /* no row sees this run, nor any later one */
        for (h = 0; h < sh->n_kvh; h++) {
            const size_t row0 = (size_t)h * r->n_q;       /* head h's first row */
            if (ifull < r->i1) {
                const size_t x = (row0 + (size_t)ifull) * grp;
                const int n = na_fold_spans(sh, base, arg, h, a, b, after, sp);
                k->ops->attn_partial(k, r->st + x, r->acc + x * hd, r->q + x * hd,
                                     grp * (r->i1 - ifull), hd, sp, n, sh->kv_dtype, scale);
            }
            /* a row whose keys end inside the run: the run cut at its limit,
             * exactly what decode folds at that context */
            for (i = ilo; i < ifull; i++) {
                const size_t x = (row0 + (size_t)i) * grp;
                const int n = na_fold_spans(sh, base, arg, h, a, r->lim0 + i, NULL, sp);
                k->ops->attn_partial(k, r->st + x, r->acc + x * hd, r->q + x * hd, grp, hd,
                                     sp, n, sh->kv_dtype, scale);
            }
        }
    }
}

void na_attn_fold_range(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                        int t0, int t1, na_attn_block_fn *base, void *arg,
                        na_kattn_stat_t *st, float *acc)
{
    const na_attn_rows_t r = { q, st, acc, 1, 0, 1, t1 };
    na_attn_fold_rows(k, sh, &r, t0, t1, base, arg);
}

void na_attn_fold_merge(float *o, na_kattn_stat_t *st, float *acc, int n_parts, int rows,
                        int head_dim)
{
    const size_t asz = (size_t)rows * head_dim;
    int p;

    for (p = 1; p < n_parts; p++)
        na_kattn_merge(st, acc, st + (size_t)p * rows, acc + (size_t)p * asz, rows, head_dim);
    na_kattn_finalize(o, st, acc, rows, head_dim);
}

na_status_t na_attn_fold_query(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                               int ctx, na_attn_block_fn *base, void *arg, float *o)
{
    const int rows = sh->n_kvh * sh->group, np = na_attn_n_parts(ctx);
    const size_t asz = (size_t)rows * sh->head_dim;
    na_kattn_stat_t *st;
    float *acc;
    int p;

    if (np == 0) {
        memset(o, 0, sizeof(float) * asz);
        return NA_OK;
    }
    st = malloc(sizeof(*st) * (size_t)np * rows);
    acc = malloc(sizeof(float) * (size_t)np * asz);
    if (st == NULL || acc == NULL) {
        free(st);
        free(acc);
        return na_err(NA_ERR_NOMEM, "attention: out of memory (%d parts)", np);
    }
    for (p = 0; p < np; p++) {
        const int t0 = p * NA_ATTN_PART, t1 = ctx - t0 < NA_ATTN_PART ? ctx : t0 + NA_ATTN_PART;
        na_kattn_init(st + (size_t)p * rows, acc + (size_t)p * asz, rows, sh->head_dim);
        na_attn_fold_range(k, sh, q, t0, t1, base, arg, st + (size_t)p * rows,
                           acc + (size_t)p * asz);
    }
    na_attn_fold_merge(o, st, acc, np, rows, sh->head_dim);
    free(acc);
    free(st);
    return NA_OK;
}

void na_attn_rows_gather(const na_attn_shape_t *sh, int n_q, const float *q, size_t q_stride,
                         float *qg)
{
    const int hd = sh->head_dim, grp = sh->group;
    int i, h;

    for (h = 0; h < sh->n_kvh; h++)
        for (i = 0; i < n_q; i++)
            memcpy(qg + ((size_t)h * n_q + i) * grp * hd, q + (size_t)i * q_stride +
                   (size_t)h * grp * hd, sizeof(float) * (size_t)grp * hd);
}

void na_attn_rows_merge(const na_attn_shape_t *sh, int n_q, int lim0, int n_parts,
                        const na_kattn_stat_t *st, const float *acc, na_kattn_stat_t *tst,
                        float *tacc, float *o, size_t o_stride)
{
    const int hd = sh->head_dim, grp = sh->group, rows = sh->n_kvh * grp;
    const size_t pst = (size_t)rows * n_q;          /* one part's rows (all queries) */
    int i, p, h;

    for (i = 0; i < n_q; i++) {
        const int np = na_attn_n_parts(lim0 + i);
        for (p = 0; p < np && p < n_parts; p++)
            for (h = 0; h < sh->n_kvh; h++) {
                const size_t x = (size_t)p * pst + ((size_t)h * n_q + i) * grp;
                const size_t y = (size_t)p * rows + (size_t)h * grp;
                memcpy(tst + y, st + x, sizeof(*tst) * (size_t)grp);
                memcpy(tacc + y * hd, acc + x * hd, sizeof(float) * (size_t)grp * hd);
            }
        if (np == 0)
            memset(o + (size_t)i * o_stride, 0, sizeof(float) * (size_t)rows * hd);
        else
            na_attn_fold_merge(o + (size_t)i * o_stride, tst, tacc, np, rows, hd);
    }
}

na_status_t na_attn_fold_block(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                               size_t q_stride, int n_q, int lim0, na_attn_block_fn *base,
                               void *arg, float *o, size_t o_stride)
{
    const int hd = sh->head_dim, rows = sh->n_kvh * sh->group;
    const int np = n_q > 0 ? na_attn_n_parts(lim0 + n_q - 1) : 0;
    const size_t pr = (size_t)rows * n_q;           /* rows of one part */
    na_kattn_stat_t *st, *tst;
    float *acc, *tacc, *qg;
    int p;

    if (n_q <= 0)
        return NA_OK;
    if (lim0 < 0)
        return na_err(NA_ERR_INVALID, "attention: a block whose first row sees %d keys", lim0);
    st = malloc(sizeof(*st) * (np ? np : 1) * pr);
    acc = malloc(sizeof(float) * (np ? np : 1) * pr * hd);
    tst = malloc(sizeof(*tst) * (np ? np : 1) * rows);
    tacc = malloc(sizeof(float) * (np ? np : 1) * rows * hd);
    qg = malloc(sizeof(float) * pr * hd);
    if (st == NULL || acc == NULL || tst == NULL || tacc == NULL || qg == NULL) {
        free(st);
        free(acc);
        free(tst);
        free(tacc);
        free(qg);
        return na_err(NA_ERR_NOMEM, "attention: out of memory (%d rows, %d parts)", n_q, np);
    }
    na_attn_rows_gather(sh, n_q, q, q_stride, qg);
    for (p = 0; p < np; p++) {
        const int t0 = p * NA_ATTN_PART, tmax = lim0 + n_q - 1;
        const int t1 = tmax - t0 < NA_ATTN_PART ? tmax : t0 + NA_ATTN_PART;
        const na_attn_rows_t r = { qg, st + (size_t)p * pr, acc + (size_t)p * pr * hd, n_q, 0,
                                   n_q, lim0 };
        na_kattn_init(r.st, r.acc, (int)pr, hd);
        na_attn_fold_rows(k, sh, &r, t0, t1, base, arg);
    }
    na_attn_rows_merge(sh, n_q, lim0, np, st, acc, tst, tacc, o, o_stride);
    free(qg);
    free(tacc);
    free(tst);
    free(acc);
    free(st);
    return NA_OK;
}

na_status_t na_attn_entry_check(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                                const na_attn_entry_t *en, na_kv_req_t **r_p)
{
    na_kv_req_t *r = na_kv_find(store, en->req);
    const int n_layers = na_kv_store_cfg(store)->n_layers;
    int n_kvh;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "unknown request %llu", (unsigned long long)en->req);
    n_kvh = na_kv_req_n_kvh(r);
    if (en->layer < 0 || en->layer >= n_layers)
        return na_err(NA_ERR_RANGE, "request %llu: layer %d out of range [0, %d)",
                      (unsigned long long)en->req, en->layer, n_layers);
    if (n_kvh > cfg->max_kv_heads)
        return na_err(NA_ERR_RANGE, "request %llu: %d KV heads, the engine takes at most %d",
                      (unsigned long long)en->req, n_kvh, cfg->max_kv_heads);
    if (en->n_kv_heads != n_kvh || en->n_q_heads != n_kvh * cfg->group)
        return na_err(NA_ERR_INVALID, "request %llu: shapes disagree: %d query / %d KV heads "
                      "sent, slot holds %d KV heads x group %d", (unsigned long long)en->req,
                      en->n_q_heads, en->n_kv_heads, n_kvh, cfg->group);
    if (en->q == NULL || en->o == NULL || (en->k_new == NULL) != (en->v_new == NULL))
        return na_err(NA_ERR_INVALID, "request %llu: missing q, o, k_new or v_new",
                      (unsigned long long)en->req);
    if (en->n_ctx < 0 || (en->n_q > 1 && en->k_new != NULL))
        return na_err(NA_ERR_INVALID, "request %llu: an engine entry of %d queries and %d "
                      "context tokens%s", (unsigned long long)en->req, en->n_q, en->n_ctx,
                      en->k_new != NULL ? " with K/V rows (a block's rows are appended by "
                      "the slot set)" : "");
    *r_p = r;
    return na_kv_req_check(r);
}
