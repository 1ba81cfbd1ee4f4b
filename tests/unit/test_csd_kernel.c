/* tests/unit/test_csd_kernel.c — kernels/csd: the CSD decode-attention
 * kernel on the CPU against the reference kernels (na_ref_attn_partial +
 * na_kattn_finalize on the same f16 K/V) for awkward token counts and page
 * sizes, GQA group 1/2/4/8, head_dim 64/128, pages scattered in the KV
 * buffer; the log-sum-exp partials of two jobs over split token ranges
 * merged (na_csd_merge) against one job; bad descriptors, pages outside the
 * buffer, checksum mismatches and bad shapes fail their job only.
 * Tolerance as in test_kernels.c (2e-5 absolute + 1e-4 relative): same f32
 * online softmax, only the order of the dot-product sums may differ. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/csd/csd_kernel.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/testutil.h"

typedef struct {
    int        n_kvh, group, hd, bt, n_tok;
    uint16_t  *kall, *vall;       /* (n_kvh, n_tok, hd) f16, contiguous */
    uint16_t  *kv;                /* device buffer */
    uint64_t   kv_bytes;
    na_csd_page_t *pages;
    int        n_pages;           /* per head */
    float     *q, *o, *lse, *o_ref, *lse_ref;
    int32_t   *status;
    na_csd_desc_t *desc;
} csd_case_t;

static void case_build(csd_case_t *c, na_rng_t *rng)
{
    const size_t hd = (size_t)c->hd, pt = (size_t)c->bt;
    size_t nq = (size_t)c->n_kvh * c->group * hd, i;
    int h, p, total;
    int *perm;
    float *tmp = malloc(sizeof(float) * hd);

    c->n_pages = (c->n_tok + c->bt - 1) / c->bt;
    total = c->n_kvh * c->n_pages;
    c->kall = calloc((size_t)c->n_kvh * c->n_tok * hd + 1, 2);
    c->vall = calloc((size_t)c->n_kvh * c->n_tok * hd + 1, 2);
    for (i = 0; i < (size_t)c->n_kvh * c->n_tok * hd; i++) {
        c->kall[i] = na_f32_to_f16(na_rng_uniform(rng) * 2.0f - 1.0f);
        c->vall[i] = na_f32_to_f16(na_rng_uniform(rng) * 2.0f - 1.0f);
    }
    /* pages at shuffled slots of the buffer (+1 spare slot, unaligned start) */
    c->kv_bytes = 64 + (uint64_t)(total + 1) * 2 * pt * hd * 2;
    c->kv = calloc(c->kv_bytes / 2, 2);
    c->pages = calloc((size_t)total + 1, sizeof(*c->pages));
    perm = malloc(sizeof(int) * (size_t)(total + 1));
    for (p = 0; p <= total; p++)
        perm[p] = p;
    for (p = total; p > 0; p--) {
        int j = (int)(na_rng_u64(rng) % (uint64_t)(p + 1)), t = perm[p];
        perm[p] = perm[j];
        perm[j] = t;
    }
    for (h = 0; h < c->n_kvh; h++)
        for (p = 0; p < c->n_pages; p++) {
            na_csd_page_t *pg = &c->pages[h * c->n_pages + p];
            uint16_t *dst;
            int t;
            pg->off = 64 + (uint64_t)perm[h * c->n_pages + p] * 2 * pt * hd * 2;
            dst = c->kv + pg->off / 2;
            for (t = 0; t < c->bt && p * c->bt + t < c->n_tok; t++) {
                size_t src = ((size_t)h * c->n_tok + (size_t)p * pt + t) * hd;
                memcpy(dst + t * hd, c->kall + src, hd * 2);
                memcpy(dst + pt * hd + t * hd, c->vall + src, hd * 2);
            }
            pg->sum = na_csd_page_sum(dst, 2 * pt * hd * 2);
            pg->flags = NA_CSD_PAGE_SUM;
        }
    c->q = malloc(sizeof(float) * nq);
    c->o = malloc(sizeof(float) * nq);
    c->o_ref = malloc(sizeof(float) * nq);
    c->lse = malloc(sizeof(float) * (size_t)c->n_kvh * c->group);
    c->lse_ref = malloc(sizeof(float) * (size_t)c->n_kvh * c->group);
    c->status = malloc(sizeof(int32_t) * (size_t)c->n_kvh * 2);
    c->desc = calloc((size_t)c->n_kvh * 2, sizeof(*c->desc));
    na_rng_fill(rng, c->q, nq, -1.0f, 1.0f);
    for (h = 0; h < c->n_kvh; h++) {
        na_kattn_stat_t st[NA_CSD_MAX_GROUP];
        float *acc = malloc(sizeof(float) * (size_t)c->group * hd);
        na_kv_span_t span = { 0 };
        int g;
        span.k = c->kall + (size_t)h * c->n_tok * hd;
        span.v = c->vall + (size_t)h * c->n_tok * hd;
        span.stride = hd;
        span.n = c->n_tok;
        na_kattn_init(st, acc, c->group, c->hd);
        na_ref_attn_partial(NULL, st, acc, c->q + (size_t)h * c->group * hd, c->group, c->hd,
                            &span, 1, NA_DTYPE_F16, 1.0f / sqrtf((float)c->hd));
        na_kattn_finalize(c->o_ref + (size_t)h * c->group * hd, st, acc, c->group, c->hd);
        for (g = 0; g < c->group; g++)
            c->lse_ref[h * c->group + g] = st[g].l > 0 ? st[g].m + logf(st[g].l) : -INFINITY;
        free(acc);
        c->desc[h].req = 7;
        c->desc[h].kv_head = (uint32_t)h;
        c->desc[h].n_tokens = (uint32_t)c->n_tok;
        c->desc[h].page0 = (uint32_t)(h * c->n_pages);
        c->desc[h].n_pages = (uint32_t)c->n_pages;
    }
    free(perm);
    free(tmp);
}

static void case_free(csd_case_t *c)
{
    free(c->kall); free(c->vall); free(c->kv); free(c->pages); free(c->q); free(c->o);
    free(c->o_ref); free(c->lse); free(c->lse_ref); free(c->status); free(c->desc);
}

static na_csd_shape_t case_shape(const csd_case_t *c)
{
    na_csd_shape_t s = { (uint32_t)c->hd, (uint32_t)c->group, (uint32_t)c->bt,
                         1.0f / sqrtf((float)c->hd) };
    return s;
}

static void run_case(int n_kvh, int group, int hd, int bt, int n_tok, uint64_t seed)
{
    csd_case_t c;

    memset(&c, 0, sizeof(c));
    c.n_kvh = n_kvh; c.group = group; c.hd = hd; c.bt = bt; c.n_tok = n_tok;
    na_rng_t rng;
    int h, g;

    na_rng_seed(&rng, seed);
    case_build(&c, &rng);
    na_csd_attn(c.desc, (uint32_t)n_kvh, c.pages, (uint32_t)(n_kvh * c.n_pages + 1), c.kv,
                c.kv_bytes, c.q, c.o, c.lse, c.status, case_shape(&c));
    for (h = 0; h < n_kvh; h++)
        NA_CHECK_MSG(c.status[h] == NA_CSD_OK, "job %d: %s", h, na_csd_status_name(c.status[h]));
    NA_CHECK_MSG(na_close_ratio(c.o, c.o_ref, (size_t)n_kvh * group * hd, 2e-5, 1e-4) <= 1.0,
                 "o: kvh %d group %d hd %d bt %d tokens %d", n_kvh, group, hd, bt, n_tok);
    NA_CHECK_MSG(na_close_ratio(c.lse, c.lse_ref, (size_t)n_kvh * group, 2e-5, 1e-4) <= 1.0,
                 "lse: kvh %d group %d hd %d bt %d tokens %d", n_kvh, group, hd, bt, n_tok);

    /* split each head's tokens at a page boundary into two jobs; merge */
    if (c.n_pages >= 2) {
        int cut = c.n_pages / 2;
        float *o2 = malloc(sizeof(float) * (size_t)n_kvh * 2 * group * hd);
        float *l2 = malloc(sizeof(float) * (size_t)n_kvh * 2 * group);
        for (h = 0; h < n_kvh; h++) {
            na_csd_desc_t a = c.desc[h], b = c.desc[h];
            a.n_tokens = (uint32_t)(cut * bt);
            a.n_pages = (uint32_t)cut;
            b.n_tokens = (uint32_t)(n_tok - cut * bt);
            b.page0 += (uint32_t)cut;
            b.n_pages -= (uint32_t)cut;
            c.desc[h] = a;
            c.desc[n_kvh + h] = b;
        }
        /* second-half jobs see q of the same head: lay q out twice */
        {
            float *q2 = malloc(sizeof(float) * (size_t)n_kvh * 2 * group * hd);
            memcpy(q2, c.q, sizeof(float) * (size_t)n_kvh * group * hd);
            memcpy(q2 + (size_t)n_kvh * group * hd, c.q, sizeof(float) * (size_t)n_kvh * group * hd);
            na_csd_attn(c.desc, (uint32_t)(2 * n_kvh), c.pages,
                        (uint32_t)(n_kvh * c.n_pages + 1), c.kv, c.kv_bytes, q2, o2, l2,
                        c.status, case_shape(&c));
            free(q2);
        }
        for (h = 0; h < 2 * n_kvh; h++)
            NA_CHECK(c.status[h] == NA_CSD_OK);
        for (h = 0; h < n_kvh; h++)
            for (g = 0; g < group; g++) {
                size_t a = (size_t)h * group + g, b = (size_t)(n_kvh + h) * group + g;
                na_csd_merge(o2 + a * hd, &l2[a], o2 + b * hd, l2[b], hd);
            }
        NA_CHECK_MSG(na_close_ratio(o2, c.o_ref, (size_t)n_kvh * group * hd, 2e-5, 1e-4) <= 1.0,
                     "merged o: group %d hd %d bt %d tokens %d", group, hd, bt, n_tok);
        NA_CHECK_MSG(na_close_ratio(l2, c.lse_ref, (size_t)n_kvh * group, 2e-5, 1e-4) <= 1.0,
                     "merged lse: group %d hd %d tokens %d", group, hd, n_tok);
        free(o2);
        free(l2);
    }
    case_free(&c);
}

/* Bad input fails the affected job only. */
static void bad_input(void)
{
    csd_case_t c;

    memset(&c, 0, sizeof(c));
    c.n_kvh = 4; c.group = 2; c.hd = 64; c.bt = 8; c.n_tok = 37;
    na_csd_shape_t s;
    na_rng_t rng;
    uint32_t n_ent;

    na_rng_seed(&rng, 99);
    case_build(&c, &rng);
    n_ent = (uint32_t)(c.n_kvh * c.n_pages + 1);
    s = case_shape(&c);
    c.desc[0].page0 = n_ent - 1;                     /* pages past the table */
    c.pages[c.desc[1].page0 + 1].off = c.kv_bytes - 2; /* page past the buffer */
    ((unsigned char *)c.kv)[c.pages[c.desc[2].page0].off + 5] ^= 0x40; /* corrupt */
    na_csd_attn(c.desc, 4, c.pages, n_ent, c.kv, c.kv_bytes, c.q, c.o, c.lse, c.status, s);
    NA_CHECK(c.status[0] == NA_CSD_BAD_DESC);
    NA_CHECK(c.status[1] == NA_CSD_BAD_PAGE);
    NA_CHECK(c.status[2] == NA_CSD_CHECKSUM);
    NA_CHECK(c.status[3] == NA_CSD_OK);
    NA_CHECK(na_close_ratio(c.o + 3 * 2 * 64, c.o_ref + 3 * 2 * 64, 2 * 64, 2e-5, 1e-4) <= 1.0);
    c.desc[3].n_pages = 1;                            /* too few pages for 37 tokens */
    na_csd_attn(c.desc + 3, 1, c.pages, n_ent, c.kv, c.kv_bytes, c.q, c.o, c.lse, c.status, s);
    NA_CHECK(c.status[0] == NA_CSD_BAD_DESC);
    s.head_dim = NA_CSD_MAX_HEAD_DIM + 1;
    na_csd_attn(c.desc + 3, 1, c.pages, n_ent, c.kv, c.kv_bytes, c.q, c.o, c.lse, c.status, s);
    NA_CHECK(c.status[0] == NA_CSD_BAD_SHAPE);
    NA_CHECK(strstr(na_csd_status_name(NA_CSD_CHECKSUM), "checksum") != NULL);
    /* a job of no tokens: o = 0, lse = -inf */
    c.desc[3].n_tokens = 0;
    c.desc[3].n_pages = 0;
    s.head_dim = 64;
    na_csd_attn(c.desc + 3, 1, c.pages, n_ent, c.kv, c.kv_bytes, c.q, c.o, c.lse, c.status, s);
    NA_CHECK(c.status[0] == NA_CSD_OK && c.o[0] == 0.0f && c.lse[0] == -INFINITY);
    case_free(&c);
}

int main(void)
{
    static const int groups[] = { 1, 2, 4, 8 }, hds[] = { 64, 128 };
    static const int toks[] = { 1, 7, 33, 100, 257 }, bts[] = { 16, 5, 64 };
    uint64_t seed = 1;
    int gi, hi, ti, bi;

    for (gi = 0; gi < 4; gi++)
        for (hi = 0; hi < 2; hi++)
            for (ti = 0; ti < 5; ti++)
                for (bi = 0; bi < 3; bi++)
                    run_case(gi % 2 ? 3 : 2, groups[gi], hds[hi], bts[bi], toks[ti], seed++);
    bad_input();
    return na_test_finish();
}
