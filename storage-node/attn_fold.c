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

void na_attn_fold_range(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                        int t0, int t1, na_attn_block_fn *base, void *arg,
                        na_attn_stat_t *st, float *acc)
{
    const int bt = sh->block_tokens, hd = sh->head_dim, grp = sh->group;
    const size_t es = na_dtype_bytes(sh->kv_dtype, 1), half = (size_t)bt * hd * es;
    /* a run: whole chunks (so its chunks are the context's), at least a block */
    const int run = (bt + NA_ATTN_CHUNK - 1) / NA_ATTN_CHUNK * NA_ATTN_CHUNK;
    const float scale = 1.0f / sqrtf((float)hd);
    na_kv_span_t sp[NA_FOLD_MAX_SPANS];
    int a, h;

    for (a = t0; a < t1; a += run) {
        const int b = t1 - a < run ? t1 : a + run;
        const int b0 = a / bt, b1 = (b + bt - 1) / bt;   /* blocks [b0, b1) */
        /* what the kernel may prefetch after the last head: the next run's
         * first block */
        const char *after = b < t1 ? base(arg, b / bt) : NULL;

        for (h = 0; h < sh->n_kvh; h++) {
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
                /* the next head's K and V of this block (the layout's next
                 * bytes), or after the last head what follows the run */
                sp[n].next = h + 1 < sh->n_kvh ? bb + (size_t)(h + 1) * 2 * half
                                               : blk + 1 < b1 ? NULL : after;
                sp[n].next_bytes = sp[n].next != NULL ? 2 * half : 0;
                n++;
            }
            k->ops->attn_partial(k, st + (size_t)h * grp, acc + (size_t)h * grp * hd,
                                 q + (size_t)h * grp * hd, grp, hd, sp, n, sh->kv_dtype, scale);
        }
    }
}

void na_attn_fold_merge(float *o, na_attn_stat_t *st, float *acc, int n_parts, int rows,
                        int head_dim)
{
    const size_t asz = (size_t)rows * head_dim;
    int p;

    for (p = 1; p < n_parts; p++)
        na_attn_merge(st, acc, st + (size_t)p * rows, acc + (size_t)p * asz, rows, head_dim);
    na_attn_finalize(o, st, acc, rows, head_dim);
}

na_status_t na_attn_fold_query(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                               int ctx, na_attn_block_fn *base, void *arg, float *o)
{
    const int rows = sh->n_kvh * sh->group, np = na_attn_n_parts(ctx);
    const size_t asz = (size_t)rows * sh->head_dim;
    na_attn_stat_t *st;
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
        na_attn_init(st + (size_t)p * rows, acc + (size_t)p * asz, rows, sh->head_dim);
        na_attn_fold_range(k, sh, q, t0, t1, base, arg, st + (size_t)p * rows,
                           acc + (size_t)p * asz);
    }
    na_attn_fold_merge(o, st, acc, np, rows, sh->head_dim);
    free(acc);
    free(st);
    return NA_OK;
}
