/* compute-node/sampler.c — greedy, temperature and nucleus sampling with a
 * per-sampler xorshift64* generator (see sampler.h). */
#include "compute-node/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

na_status_t na_sampler_cfg_check(const na_sampler_cfg_t *cfg)
{
    if (!isfinite(cfg->temperature) || cfg->temperature < 0.0f)
        return na_err(NA_ERR_INVALID, "temperature %g is invalid: it must be >= 0",
                      (double)cfg->temperature);
    if (!isfinite(cfg->top_p) || !(cfg->top_p > 0.0f) || cfg->top_p > 1.0f)
        return na_err(NA_ERR_INVALID, "top-p %g is invalid: it must be in (0, 1]",
                      (double)cfg->top_p);
    return NA_OK;
}

float na_sampler_top_p(double p)
{
    return p > 0.0 && p < (double)FLT_MIN ? FLT_MIN : (float)p;
}

uint64_t na_sampler_seed_state(uint64_t seed)
{
    /* splitmix64 finaliser: nearby seeds give unrelated states. */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z != 0 ? z : 0x2545F4914F6CDD1Dull;
}

uint64_t na_sampler_request_seed(uint64_t base, uint64_t index)
{
    return na_sampler_seed_state(base ^ (index * 0xD1B54A32D192ED03ull));
}

float na_sampler_uniform(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    /* top 24 bits of the xorshift64* output -> [0, 1) exactly representable */
    return (float)((x * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

na_status_t na_sampler_init(na_sampler_t *s, const na_sampler_cfg_t *cfg, int vocab_size)
{
    na_status_t st = na_sampler_cfg_check(cfg);

    if (st != NA_OK)
        return st;
    if (vocab_size <= 0)
        return na_err(NA_ERR_INVALID, "sampler: vocab_size %d must be > 0", vocab_size);
    s->cfg = *cfg;
    s->vocab_size = vocab_size;
    s->rng = na_sampler_seed_state(cfg->seed);
    return NA_OK;
}

int na_sampler_needs_scratch(const na_sampler_t *s)
{
    return s->cfg.temperature > 0.0f && s->cfg.top_p < 1.0f;
}

int na_sampler_argmax(const float *x, int n)
{
    int i, best = 0;
    for (i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* In-place softmax of x[0..n) after dividing by temperature. */
static void na_sampler_softmax(float *x, int n, float temperature)
{
    float inv_t = 1.0f / temperature;
    float max;
    double sum = 0.0;
    int i;

    for (i = 0; i < n; i++)
        x[i] *= inv_t;
    max = x[na_sampler_argmax(x, n)];
    for (i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (i = 0; i < n; i++)
        x[i] = (float)(x[i] / sum);
}

/* Inverse-CDF draw from probabilities p[0..n) with coin in [0, 1). */
static int na_sampler_multinomial(const float *p, int n, float coin)
{
    float cdf = 0.0f;
    int i;
    for (i = 0; i < n; i++) {
        cdf += p[i];
        if (coin < cdf)
            return i;
    }
    return n - 1;                       /* rounding: the last token */
}

/* Descending probability, then ascending id, so the order is total and the
 * nucleus does not depend on qsort's (unstable) handling of ties. */
static int na_sampler_cmp_desc(const void *a, const void *b)
{
    const na_prob_index_t *x = a, *y = b;
    if (x->p > y->p) return -1;
    if (x->p < y->p) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Nucleus draw: the smallest prefix of tokens by descending probability whose
 * mass exceeds top_p, renormalised. Tokens below (1-top_p)/(n-1) cannot be in
 * that prefix (all the others together would already exceed top_p), so they
 * are dropped before sorting. The draw itself walks the nucleus in token-id
 * order, not in probability order: two nearly equal probabilities that a
 * last-bit difference in the logits puts in the other order would otherwise
 * swap their places in the CDF and change the token for any coin landing in
 * either; in id order such a difference moves each boundary by as little as
 * the difference itself. The nucleus in id order is every token ranked at or
 * before the last one kept (descending p, then ascending id: a total order). */
static int na_sampler_topp(na_sampler_t *s, const float *p, na_prob_index_t *sorted,
                           float coin)
{
    int n = s->vocab_size, n0 = 0, last, i, id_last, pick;
    float cutoff = n > 1 ? (1.0f - s->cfg.top_p) / (float)(n - 1) : 0.0f;
    float cum = 0.0f, r, cdf = 0.0f, p_last;

    for (i = 0; i < n; i++) {
        if (p[i] >= cutoff) {
            sorted[n0].p = p[i];
            sorted[n0].id = i;
            n0++;
        }
    }
    if (n0 == 0)                        /* cannot happen for finite logits */
        return na_sampler_argmax(p, n);
    qsort(sorted, (size_t)n0, sizeof(*sorted), na_sampler_cmp_desc);
    last = n0 - 1;
    for (i = 0; i < n0; i++) {
        cum += sorted[i].p;
        if (cum > s->cfg.top_p) {
            last = i;
            break;
        }
    }
    p_last = sorted[last].p;
    id_last = pick = sorted[last].id;
#define NA_IN_NUCLEUS(i) (p[i] > p_last || (p[i] == p_last && (i) <= id_last))
    cum = 0.0f;
    for (i = 0; i < n; i++)
        if (NA_IN_NUCLEUS(i))
            cum += p[i];
    r = coin * cum;
    for (i = 0; i < n; i++) {
        if (!NA_IN_NUCLEUS(i))
            continue;
        cdf += p[i];
        pick = i;                       /* rounding: the last member by id */
        if (r < cdf)
            return i;
    }
#undef NA_IN_NUCLEUS
    return pick;
}

int na_sampler_all_finite(const float *x, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

int na_sampler_sample(na_sampler_t *s, float *logits, na_prob_index_t *scratch)
{
    float coin;

    /* A NaN compares false with everything: argmax, the nucleus cut-off and
     * the CDF would pick an arbitrary token or none at all. */
    if (!na_sampler_all_finite(logits, s->vocab_size))
        return NA_SAMPLER_NOT_FINITE;
    if (s->cfg.temperature == 0.0f)
        return na_sampler_argmax(logits, s->vocab_size);
    na_sampler_softmax(logits, s->vocab_size, s->cfg.temperature);
    coin = na_sampler_uniform(&s->rng);
    if (!na_sampler_needs_scratch(s))
        return na_sampler_multinomial(logits, s->vocab_size, coin);
    return na_sampler_topp(s, logits, scratch, coin);
}

double na_sampler_logprob(const float *logits, int n, int tok)
{
    float max = logits[na_sampler_argmax(logits, n)];
    double sum = 0.0;
    int i;

    for (i = 0; i < n; i++)
        sum += (double)expf(logits[i] - max);
    return (double)(logits[tok] - max) - log(sum);
}
