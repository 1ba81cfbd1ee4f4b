/* tests/unit/test_attn_exact.c — one query row gets the same bits whichever
 * op or node computes it (the canonical order of kernels/kernels.h,
 * NA_ATTN_PART / NA_ATTN_CHUNK): the cpu backend's causal prefill of N
 * tokens (from position 0 and continuing a KV, as a chunked or recovered
 * prefill does), N decode steps over the same KV with 1 and 2 threads, and
 * the storage node's attention over its KV blocks of 64, 16 and 7 tokens
 * (storage-node/attn_fold.c, what its CPU engine runs; a block of 7 cuts
 * chunks and parts). A recovered request is prefilled again over the tokens
 * decode produced, so any difference in the last bits makes a long
 * generation diverge (issue 22 item 15). memcmp, no tolerance: MHA and GQA
 * shapes, f32 / f16 / bf16 KV, context lengths on both sides of the chunk
 * (64) and part (1024) boundaries. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "storage-node/attn_fold.h"
#include "tests/testutil.h"
#include "tests/unit/attn_blocks.h"
#include "tests/unit/kern_util.h"

static na_rng_t rng;
static na_kernels_t *cpu_k[2];                 /* 1 and 2 threads */

/* the storage node's block sizes: the default, the tests', one that cuts chunks */
static const int block_sizes[] = { 64, 16, 7 };

static void *make_kv(na_dtype_t dt, size_t n)
{
    return na_test_rand_dtype(&rng, dt, n);
}

/* The storage node's attention of one query row over the KV (token-major
 * rows of nkv heads) in the store's block layout (tests/unit/attn_blocks.h):
 * the blocks built here, then storage-node/attn_fold.c (na_attn_fold_query,
 * what the CPU engine's granules run part by part). */

/* The KV's ctx tokens in blocks of bt (rows past ctx: NaN). */
static void blocks_make(na_test_blocks_t *bl, const void *kc, const void *vc, na_dtype_t dt,
                        int ctx, int nkv, int hd, int bt)
{
    int h, t;

    na_test_blocks_init(bl, dt, ctx, nkv, hd, bt);
    for (t = 0; t < ctx; t++)
        for (h = 0; h < nkv; h++) {
            size_t src = ((size_t)t * nkv + h) * bl->row;
            memcpy(na_test_blocks_row(bl, t, h, 0), (const char *)kc + src, bl->row);
            memcpy(na_test_blocks_row(bl, t, h, 1), (const char *)vc + src, bl->row);
        }
}

/* One query row over the first ctx tokens of the blocks. */
static void storage_fold(na_kernels_t *k, float *out, const float *q, na_test_blocks_t *bl,
                         na_dtype_t dt, int ctx, int nh, int nkv, int hd, int bt)
{
    const na_attn_shape_t sh = { bt, hd, dt, nkv, nh / nkv };
    NA_CHECK_OK(na_attn_fold_query(k, &sh, q, ctx, na_test_block_at, bl, out));
}

/* Prefill n_tok query tokens after pos0 KV rows; each row against decode
 * (1 and 2 threads) at its context length and against the storage fold
 * (rows where `every` divides t, or the last: the fold is slow). */
static void check(na_dtype_t dt, int pos0, int n_tok, int nh, int nkv, int hd, int every)
{
    const int ctx = pos0 + n_tok;
    const size_t qrow = (size_t)nh * hd, kvn = (size_t)ctx * nkv * hd;
    float *q = na_test_xmalloc(sizeof(float) * qrow * n_tok), *pre[2];
    float *dec = na_test_xmalloc(sizeof(float) * qrow);
    float *sto = na_test_xmalloc(sizeof(float) * qrow);
    void *kc = make_kv(dt, kvn), *vc = make_kv(dt, kvn);
    na_test_blocks_t bl[3];
    int t, th, bad = 0;

    na_rng_fill(&rng, q, qrow * n_tok, -2.0f, 2.0f);
    for (t = 0; t < 3; t++)
        blocks_make(&bl[t], kc, vc, dt, ctx, nkv, hd, block_sizes[t]);
    for (th = 0; th < 2; th++) {
        size_t qb = sizeof(float) * qrow * n_tok, kvb = na_dtype_bytes(dt, kvn);
        na_kbuf_t ob, qq = na_kbuf_host(q, qb), kb = na_kbuf_host(kc, kvb),
                      vb = na_kbuf_host(vc, kvb);
        pre[th] = na_test_xmalloc(qb);
        ob = na_kbuf_host(pre[th], qb);
        NA_CHECK_OK(cpu_k[th]->ops->attn_prefill(cpu_k[th], &ob, &qq, &kb, &vb, dt, n_tok, pos0,
                                                 nh, nkv, hd));
    }
    for (t = 0; t < n_tok && bad < 3; t++) {
        const float *qt = q + (size_t)t * qrow;
        int d;
        for (th = 0; th < 2 && bad < 3; th++) {
            NA_CHECK_OK(na_kernels_attn_decode_host(cpu_k[th], dec, qt, kc, vc, dt, pos0 + t + 1,
                                                    nh, nkv, hd));
            d = na_test_first_diff(pre[th] + (size_t)t * qrow, dec, qrow);
            if (d >= 0)
                bad++;
            NA_CHECK_MSG(d < 0, "%s heads %d/%d hd %d, pos0 %d: token %d (ctx %d), %d thread(s): "
                         "prefill %.9g != decode %.9g at element %d", na_dtype_name(dt), nh, nkv,
                         hd, pos0, t, pos0 + t + 1, th + 1, d >= 0 ? pre[th][t * qrow + d] : 0.0,
                         d >= 0 ? dec[d] : 0.0, d);
        }
        if (t % every == 0 || t == n_tok - 1) {
            int bi;
            for (bi = 0; bi < 3 && bad < 3; bi++) {
                const int bt = block_sizes[bi];
                storage_fold(cpu_k[0], sto, qt, &bl[bi], dt, pos0 + t + 1, nh, nkv, hd, bt);
                d = na_test_first_diff(pre[0] + (size_t)t * qrow, sto, qrow);
                if (d >= 0)
                    bad++;
                NA_CHECK_MSG(d < 0, "%s heads %d/%d hd %d, pos0 %d: token %d (ctx %d): prefill "
                             "%.9g != storage node (blocks of %d) %.9g at element %d",
                             na_dtype_name(dt), nh, nkv, hd, pos0, t, pos0 + t + 1,
                             d >= 0 ? pre[0][t * qrow + d] : 0.0, bt, d >= 0 ? sto[d] : 0.0, d);
            }
        }
    }
    for (t = 0; t < 3; t++)
        na_test_blocks_free(&bl[t]);
    free(pre[1]);
    free(pre[0]);
    free(vc);
    free(kc);
    free(sto);
    free(dec);
    free(q);
}

int main(void)
{
    /* q heads, kv heads, head_dim: MHA, GQA 4 (stories260K: 8/4/8), GQA 8, MHA hd 128 */
    static const int shapes[][3] = { { 4, 4, 64 }, { 8, 2, 32 }, { 8, 4, 8 }, { 16, 2, 16 },
                                     { 2, 2, 128 } };
    int d, s;

    na_rng_seed(&rng, 20261127);
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        NA_SKIP("this CPU lacks AVX2/FMA: the cpu backend cannot run");
    if (na_test_kernels_open(NULL, cpu_k) != 0)
        return na_test_finish();
    printf("cpu kernels: %s\n", cpu_k[0]->isa ? cpu_k[0]->isa : "?");
    for (d = 0; d < NA_TEST_KV_DTYPES; d++)
        for (s = 0; s < 5; s++) {
            const na_dtype_t dt = na_test_kv_dtypes[d];
            const int nh = shapes[s][0], nkv = shapes[s][1], hd = shapes[s][2];
            check(dt, 0, 63, nh, nkv, hd, 1);
            check(dt, 0, 65, nh, nkv, hd, 1);
            check(dt, 1, 64, nh, nkv, hd, 7);       /* a continued (chunked) prefill */
            check(dt, 0, 1000, nh, nkv, hd, 97);
            check(dt, 1000, 70, nh, nkv, hd, 5);    /* across the part boundary (1024) */
            check(dt, 2040, 9, nh, nkv, hd, 4);     /* ... and the next (2048) */
        }
    na_test_kernels_close(NULL, cpu_k);
    return na_test_finish();
}
