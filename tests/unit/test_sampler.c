/* tests/unit/test_sampler.c — compute-node/sampler.c: greedy = argmax,
 * seeded reproducibility, the top-p nucleus against a hand-computed
 * distribution, and sampled frequencies against the softmax (fixed seeds, so
 * the statistical checks cannot flake). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute-node/sampler.h"
#include "tests/testutil.h"

#define DRAWS 200000

/* Sample `draws` times from a copy of logits[n]; counts[n] gets the tallies. */
/* A sampler's set-up, checked: 1 when it succeeded (the sampler usable). */
static int init_ok(na_status_t st)
{
    NA_CHECK_OK(st);
    return st == NA_OK;
}

static void draw_counts(na_sampler_t *s, const float *logits, int n, int draws, long *counts)
{
    float *row = malloc((size_t)n * sizeof(float));
    na_prob_index_t *scratch = malloc((size_t)n * sizeof(*scratch));
    int i;

    memset(counts, 0, (size_t)n * sizeof(long));
    for (i = 0; i < draws; i++) {
        int t;
        memcpy(row, logits, (size_t)n * sizeof(float));
        t = na_sampler_sample(s, row, scratch);
        if (t >= 0 && t < n)
            counts[t]++;
    }
    free(scratch);
    free(row);
}

/* |freq - p| within 5 standard errors (plus a hair) for every token. */
static int freqs_match(const long *counts, const double *p, int n, int draws)
{
    int i, ok = 1;
    for (i = 0; i < n; i++) {
        double f = (double)counts[i] / draws;
        double se = sqrt(p[i] * (1.0 - p[i]) / draws);
        if (fabs(f - p[i]) > 5.0 * se + 1e-4) {
            fprintf(stderr, "token %d: frequency %.5f, expected %.5f\n", i, f, p[i]);
            ok = 0;
        }
    }
    return ok;
}

static void test_cfg_check(void)
{
    na_sampler_cfg_t c = { 1.0f, 0.9f, 1 };
    NA_CHECK_OK(na_sampler_cfg_check(&c));
    c.temperature = -0.1f;
    NA_CHECK(na_sampler_cfg_check(&c) == NA_ERR_INVALID);
    NA_CHECK(strstr(na_errmsg(), "temperature") != NULL);
    c.temperature = NAN;
    NA_CHECK(na_sampler_cfg_check(&c) == NA_ERR_INVALID);
    c.temperature = 0.0f;
    c.top_p = 0.0f;
    NA_CHECK(na_sampler_cfg_check(&c) == NA_ERR_INVALID);
    NA_CHECK(strstr(na_errmsg(), "top-p") != NULL);
    c.top_p = 1.5f;
    NA_CHECK(na_sampler_cfg_check(&c) == NA_ERR_INVALID);
    c.top_p = 1.0f;
    NA_CHECK_OK(na_sampler_cfg_check(&c));
    /* a double in (0, 1] stays valid as the sampler's float (1e-300 is 0 as a float) */
    c.top_p = na_sampler_top_p(1e-300);
    NA_CHECK(c.top_p > 0.0f);
    NA_CHECK_OK(na_sampler_cfg_check(&c));
    NA_CHECK(na_sampler_top_p(1.0) == 1.0f && na_sampler_top_p(0.5) == 0.5f);
}

static void test_greedy(void)
{
    na_sampler_cfg_t c = { 0.0f, 0.9f, 7 };
    na_sampler_t s_v, *s = &s_v;
    float x[1000], ties[5] = { 1.0f, 3.0f, 2.0f, 3.0f, -1.0f };
    na_rng_t rng;
    int i, r, best;

    if (!init_ok(na_sampler_init(s, &c, 1000)))
    return;
    na_rng_seed(&rng, 11);
    for (r = 0; r < 50; r++) {
        na_rng_fill(&rng, x, 1000, -8.0f, 8.0f);
        best = 0;
        for (i = 1; i < 1000; i++)
            if (x[i] > x[best])
                best = i;
        NA_CHECK(na_sampler_sample(s, x, NULL) == best);    /* greedy needs no scratch */
    }
    NA_CHECK(na_sampler_argmax(ties, 5) == 1);   /* first of equal maxima */
}

static void test_reproducible(void)
{
    na_sampler_cfg_t c = { 0.8f, 0.9f, 12345 };
    na_sampler_t a_v, b_v, d_v, *a = &a_v, *b = &b_v, *d = &d_v;
    float base[64], ra[64], rb[64];
    na_prob_index_t scratch[64];
    na_rng_t rng;
    int i, same_ab = 1, same_ad = 1;

    if (!init_ok(na_sampler_init(a, &c, 64)) || !init_ok(na_sampler_init(b, &c, 64)))
        return;
    c.seed = 12346;
    if (!init_ok(na_sampler_init(d, &c, 64)))
        return;
    na_rng_seed(&rng, 3);
    na_rng_fill(&rng, base, 64, -2.0f, 2.0f);
    for (i = 0; i < 2000; i++) {
        int ta, tb, td;
        memcpy(ra, base, sizeof(base));
        ta = na_sampler_sample(a, ra, scratch);
        memcpy(rb, base, sizeof(base));
        tb = na_sampler_sample(b, rb, scratch);
        memcpy(rb, base, sizeof(base));
        td = na_sampler_sample(d, rb, scratch);
        same_ab &= ta == tb;
        same_ad &= ta == td;
    }
    NA_CHECK(same_ab);
    NA_CHECK(!same_ad);                 /* another seed, another sequence */
    NA_CHECK(na_sampler_request_seed(5, 0) != na_sampler_request_seed(5, 1));
}

/* Probabilities placed at shuffled ids; hand-computed nucleus:
 * sorted 0.40 0.25 0.15 0.10 0.06 0.04, cumulative 0.40 0.65 0.80 0.90 ...
 * top_p 0.7 -> first cumulative above 0.7 is 0.80: nucleus {0.40,0.25,0.15},
 * renormalised by 0.80 -> 0.5, 0.3125, 0.1875. */
static void test_top_p(void)
{
    static const double p[6]  = { 0.06, 0.40, 0.04, 0.15, 0.25, 0.10 };
    static const double nucleus[6] = { 0.0, 0.5, 0.0, 0.1875, 0.3125, 0.0 };
    static const double nucleus2[6] = { 0.0, 0.40 / 0.65, 0.0, 0.0, 0.25 / 0.65, 0.0 };
    na_sampler_cfg_t c = { 1.0f, 0.7f, 99 };
    na_sampler_t s_v, *s = &s_v;
    float logits[6];
    long counts[6];
    int i;

    for (i = 0; i < 6; i++)
        logits[i] = (float)log(p[i]) + 3.0f;    /* softmax is shift-invariant */
    if (!init_ok(na_sampler_init(s, &c, 6)))
    return;
    draw_counts(s, logits, 6, DRAWS, counts);
    NA_CHECK(counts[0] == 0 && counts[2] == 0 && counts[5] == 0);   /* outside the nucleus */
    NA_CHECK(freqs_match(counts, nucleus, 6, DRAWS));

    c.top_p = 0.5f;                     /* 0.40 < 0.5 < 0.65 -> two tokens */
    c.seed = 100;
    if (!init_ok(na_sampler_init(s, &c, 6)))
    return;
    draw_counts(s, logits, 6, DRAWS, counts);
    NA_CHECK(counts[0] + counts[2] + counts[3] + counts[5] == 0);
    NA_CHECK(freqs_match(counts, nucleus2, 6, DRAWS));

    c.top_p = 0.1f;                     /* below the top probability: greedy */
    if (!init_ok(na_sampler_init(s, &c, 6)))
    return;
    draw_counts(s, logits, 6, 1000, counts);
    NA_CHECK(counts[1] == 1000);
}

/* Frequencies of temperature T sampling against softmax(logits / T). */
static void test_softmax_frequencies(float temp, uint64_t seed)
{
    enum { N = 10 };
    na_sampler_cfg_t c = { temp, 1.0f, seed };
    na_sampler_t s_v, *s = &s_v;
    float logits[N];
    double p[N], sum = 0.0, max;
    long counts[N];
    na_rng_t rng;
    int i;

    na_rng_seed(&rng, seed + 17);
    na_rng_fill(&rng, logits, N, -2.0f, 2.0f);
    max = logits[0];
    for (i = 1; i < N; i++)
        if (logits[i] > max)
            max = logits[i];
    for (i = 0; i < N; i++) {
        p[i] = exp((logits[i] - max) / temp);
        sum += p[i];
    }
    for (i = 0; i < N; i++)
        p[i] /= sum;
    if (!init_ok(na_sampler_init(s, &c, N)))
    return;
    draw_counts(s, logits, N, DRAWS, counts);
    NA_CHECK_MSG(freqs_match(counts, p, N, DRAWS), "temperature %g", (double)temp);
}

static void test_uniform(void)
{
    uint64_t st = na_sampler_seed_state(0);
    double sum = 0.0;
    int i, in_range = 1;
    for (i = 0; i < 100000; i++) {
        float u = na_sampler_uniform(&st);
        in_range &= u >= 0.0f && u < 1.0f;
        sum += u;
    }
    NA_CHECK(in_range);
    NA_CHECK(fabs(sum / 100000 - 0.5) < 0.01);
}

/* NaN or infinity anywhere in the row: every rule refuses it (no token, no
 * out-of-bounds read of the nucleus, no random number drawn). */
static void test_not_finite(void)
{
    float cfgs[3][2] = { { 0.0f, 1.0f }, { 0.9f, 1.0f }, { 0.9f, 0.9f } };
    float bad[3] = { NAN, INFINITY, -INFINITY };
    na_prob_index_t scratch[64];
    float row[64];
    int c, b, k, i;

    for (c = 0; c < 3; c++) {
        na_sampler_cfg_t sc = { cfgs[c][0], cfgs[c][1], 5 };
        na_sampler_t s_v, *s = &s_v;
        uint64_t rng0;
        if (!init_ok(na_sampler_init(s, &sc, 64)))
        return;
        rng0 = s->rng;
        for (b = 0; b < 3; b++) {
            for (k = 0; k < 64; k += 21) {           /* one bad logit at k */
                for (i = 0; i < 64; i++)
                    row[i] = (float)(i % 7) - 3.0f;
                row[k] = bad[b];
                NA_CHECK(na_sampler_sample(s, row, scratch) == NA_SAMPLER_NOT_FINITE);
            }
            for (i = 0; i < 64; i++)                  /* every logit bad */
                row[i] = bad[b];
            NA_CHECK(na_sampler_sample(s, row, scratch) == NA_SAMPLER_NOT_FINITE);
        }
        NA_CHECK(s->rng == rng0);
        for (i = 0; i < 64; i++)                      /* finite again: a token */
            row[i] = (float)(i % 7) - 3.0f;
        k = na_sampler_sample(s, row, scratch);
        NA_CHECK(k >= 0 && k < 64);
    }
    row[0] = 1.0f;
    row[1] = NAN;
    NA_CHECK(!na_sampler_all_finite(row, 2));
    NA_CHECK(na_sampler_all_finite(row, 1));
}

int main(void)
{
    test_not_finite();
    test_cfg_check();
    test_greedy();
    test_reproducible();
    test_top_p();
    test_softmax_frequencies(1.0f, 2024);
    test_softmax_frequencies(0.5f, 77);
    test_uniform();
    return na_test_finish();
}
