/* tests/unit/test_attn_fold_block.c — the storage node's block fold of a
 * prompt chunk (storage-node/attn_fold.c: na_attn_fold_block, the rows the
 * CPU engine folds together part by part) gives every row exactly the bits
 * of the one-row fold at that row's context (na_attn_fold_query, which is
 * the cpu backend's attn_decode bit for bit: test_attn_exact). memcmp, no
 * tolerance: 1, 3, 64 and 65 rows; the block starting at 0, inside a chunk
 * and just before a part boundary, so that rows end on both sides of chunk
 * (64) and part (1024) boundaries; f32 / f16 / bf16 KV; MHA and GQA; KV
 * blocks of 64, 16 and 7 tokens; the cpu and the ref kernels. A block split
 * into row ranges (the engine's jobs) is checked too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "storage-node/attn_fold.h"
#include "tests/testutil.h"
#include "tests/unit/attn_blocks.h"

static na_rng_t rng;

/* ctx tokens of random K/V in the store's block layout
 * (tests/unit/attn_blocks.h); rows past ctx are NaN, so a row that read past
 * its limit would show. */
static void blocks_make(na_test_blocks_t *bl, na_dtype_t dt, int ctx, int nkv, int hd, int bt)
{
    const int nb = (ctx + bt - 1) / bt;
    int b, h, t;

    na_test_blocks_init(bl, dt, ctx, nkv, hd, bt);
    for (b = 0; b < nb; b++)
        for (h = 0; h < nkv; h++)
            for (t = 0; t < 2 * bt; t++)
                if (b * bt + t % bt < ctx)
                    na_rng_fill_dtype(&rng, na_test_blocks_row(bl, b * bt + t % bt, h, t / bt),
                                      dt, (size_t)hd);
}

/* The block's rows, folded as the engine does: parts one by one, the rows
 * cut into ranges of rb (each range its own call, as its own job). */
static void fold_split(na_kernels_t *k, const na_attn_shape_t *sh, const float *q, int n_q,
                       int lim0, int rb, na_test_blocks_t *bl, float *o)
{
    const int hd = sh->head_dim, rows = sh->n_kvh * sh->group;
    const int np = na_attn_n_parts(lim0 + n_q - 1);
    const size_t pr = (size_t)rows * n_q;
    na_kattn_stat_t *st = na_test_xmalloc(sizeof(*st) * (size_t)np * pr), *tst;
    float *acc = na_test_xmalloc(sizeof(float) * (size_t)np * pr * hd), *tacc;
    float *qg = na_test_xmalloc(sizeof(float) * pr * hd);
    int p, i0, h;

    tst = na_test_xmalloc(sizeof(*tst) * (size_t)np * rows);
    tacc = na_test_xmalloc(sizeof(float) * (size_t)np * rows * hd);
    na_attn_rows_gather(sh, n_q, q, (size_t)rows * hd, qg);
    for (p = np - 1; p >= 0; p--)                 /* any order: parts are independent */
        for (i0 = 0; i0 < n_q; i0 += rb) {
            const int t0 = p * NA_ATTN_PART, tmax = lim0 + n_q - 1;
            const int t1 = tmax - t0 < NA_ATTN_PART ? tmax : t0 + NA_ATTN_PART;
            na_attn_rows_t r = { qg, st + (size_t)p * pr, acc + (size_t)p * pr * hd, n_q, i0,
                                 i0 + rb < n_q ? i0 + rb : n_q, lim0 };
            for (h = 0; h < sh->n_kvh; h++) {
                const size_t x = ((size_t)h * n_q + i0) * sh->group;
                na_kattn_init(r.st + x, r.acc + x * hd, (r.i1 - i0) * sh->group, hd);
            }
            na_attn_fold_rows(k, sh, &r, t0, t1, na_test_block_at, bl);
        }
    na_attn_rows_merge(sh, n_q, lim0, np, st, acc, tst, tacc, o, (size_t)rows * hd);
    free(tacc);
    free(tst);
    free(qg);
    free(acc);
    free(st);
}

static int n_cases, n_bad;

/* n_q rows, row i seeing lim0 + i keys: block fold (whole, and split into
 * row ranges of 16) against the one-row fold of each row. */
static void check(na_kernels_t *k, const char *kname, na_dtype_t dt, int lim0, int n_q, int nh,
                  int nkv, int hd, int bt)
{
    const na_attn_shape_t sh = { bt, hd, dt, nkv, nh / nkv };
    const int ctx = lim0 + n_q - 1;
    const size_t qrow = (size_t)nh * hd;
    /* the rows of the whole block, of the block split into row ranges */
    static const char *const how[2] = { "whole block", "rows in ranges of 16" };
    float *q = na_test_xmalloc(sizeof(float) * qrow * n_q), *res[2];
    float *one = na_test_xmalloc(sizeof(float) * qrow);
    na_test_blocks_t bl;
    int i, d, v;

    for (v = 0; v < 2; v++)
        res[v] = na_test_xmalloc(sizeof(float) * qrow * n_q);
    n_cases++;
    na_rng_fill(&rng, q, qrow * n_q, -2.0f, 2.0f);
    blocks_make(&bl, dt, ctx > 0 ? ctx : 1, nkv, hd, bt);
    NA_CHECK_OK(na_attn_fold_block(k, &sh, q, qrow, n_q, lim0, na_test_block_at, &bl, res[0], qrow));
    fold_split(k, &sh, q, n_q, lim0, 16, &bl, res[1]);
    for (i = 0; i < n_q; i++) {
        NA_CHECK_OK(na_attn_fold_query(k, &sh, q + (size_t)i * qrow, lim0 + i, na_test_block_at,
                                       &bl, one));
        for (v = 0; v < 2; v++) {
            const float *got = res[v] + (size_t)i * qrow;
            d = na_test_first_diff(got, one, qrow);
            if (d >= 0) {
                n_bad++;
                NA_CHECK_MSG(0, "%s kernels, %s KV, heads %d/%d hd %d, blocks of %d, %d rows "
                             "from context %d, %s: row %d (context %d) element %d: %.9g, the "
                             "one-row fold %.9g", kname, na_dtype_name(dt), nh, nkv, hd, bt,
                             n_q, lim0, how[v], i,
                             lim0 + i, d, (double)got[d], (double)one[d]);
                break;
            }
        }
        if (n_bad > 5)
            break;
    }
    na_test_blocks_free(&bl);
    for (v = 0; v < 2; v++)
        free(res[v]);
    free(one);
    free(q);
}

int main(void)
{
    /* q heads, kv heads, head_dim: MHA, GQA 4 (stories260K), GQA 8, MHA hd 128 */
    static const int shapes[][3] = { { 4, 4, 32 }, { 8, 2, 16 }, { 8, 4, 8 }, { 16, 2, 16 },
                                     { 2, 2, 128 } };
    static const int n_qs[] = { 1, 3, 64, 65 };
    /* the first row's context: from the start, inside a chunk, a part's
     * last chunk (rows cross 1024), just before the second part's end */
    static const int lims[] = { 1, 37, 1000, 2030 };
    static const int bts[] = { 64, 16, 7 };
    na_kernels_t *k[2] = { NULL, NULL };
    const char *kn[2] = { "cpu", "ref" };
    int ki, d, s, n, l, b;

    na_rng_seed(&rng, 20261128);
    __builtin_cpu_init();
    NA_CHECK_OK(na_kernels_create("ref", 1, &k[1]));
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        NA_CHECK_OK(na_kernels_create("cpu", 1, &k[0]));
    else
        printf("this CPU lacks AVX2/FMA: the ref kernels only\n");
    /* every (KV type, shape, rows, first context) once, with one of the
     * block sizes in turn; the long contexts (1000, 2030: rows across the
     * part boundary) with a third of the (type, shape, rows) choices, all
     * of them covered (the sanitizer build runs this at -O0) */
    for (ki = 0; ki < 2; ki++) {
        if (k[ki] == NULL)
            continue;
        for (d = 0; d < NA_TEST_KV_DTYPES; d++)
            for (s = 0; s < 5; s++)
                for (n = 0; n < 4; n++)
                    for (l = 0; l < 4; l++) {
                        b = (d + s + n + l) % 3;
                        if (lims[l] >= 1000 && (d + s + n) % 3 != l % 3)
                            continue;
                        /* the ref kernels are slow: short contexts, 65 rows */
                        if (ki == 1 && (lims[l] > 100 || n != 3))
                            continue;
                        check(k[ki], kn[ki], na_test_kv_dtypes[d], lims[l], n_qs[n], shapes[s][0],
                              shapes[s][1], shapes[s][2], bts[b]);
                    }
    }
    /* a row of no keys (a block from position 0 whose first row sees
     * nothing) is 0, as the one-row fold gives */
    if (k[0] != NULL)
        check(k[0], "cpu", NA_DTYPE_F16, 0, 3, 4, 2, 16, 16);
    printf("%d cases, %d with a differing row\n", n_cases, n_bad);
    for (ki = 0; ki < 2; ki++)
        if (k[ki] != NULL)
            na_kernels_destroy(k[ki]);
    return na_test_finish();
}
