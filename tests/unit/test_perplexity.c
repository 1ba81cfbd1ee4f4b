/* tests/unit/test_perplexity.c — the perplexity of compute-node/perplexity.h
 * against plain references:
 *   arithmetic   na_ppl_estimate and na_sampler_logprob on numbers worked out
 *                by hand (ppl 2^1.5 and its "+/-"; log 3/4);
 *   chunking     the chunk requests of a 3.5-chunk token list: BOS first,
 *                the second half forced, the tail dropped;
 *   scoring      a generated model (GQA, ref backend, f32 KV): every scored
 *                token's log probability from na_generate (prefill + forced
 *                decode steps, chunks batched) against a reference that runs
 *                each chunk one token per step (na_engine_forward) and takes
 *                its own log-softmax in long double, and the perplexity and
 *                its error recomputed from those by the textbook formulas;
 *   batching     the same figures, bit for bit, at batch 1 and batch 3 on the
 *                cpu backend (batch-invariant kernels);
 *   refusals     a context past the model's, below the minimum, a text shorter
 *                than two chunks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/perplexity.h"
#include "compute-node/sampler.h"
#include "tests/testutil.h"

#define CTX  12      /* first = 6: 5 scored tokens per chunk */
#define NTOK 42      /* 3 whole chunks and 6 tokens dropped */
#define BOS  1

static void test_arithmetic(void)
{
    double lp[2] = { log(0.5), log(0.25) };
    na_ppl_t p;
    na_ppl_est_t e;
    float logits[2] = { 0.0f, (float)log(3.0) };

    /* nll 1 ln2 and 2 ln2: mean 1.5 ln2, ppl 2^1.5; var = (1+4)/2 ln2^2 -
     * 2.25 ln2^2 = 0.25 ln2^2, err = ppl * sqrt(var / (2 - 1)) = ppl ln2 / 2 */
    memset(&p, 0, sizeof(p));
    p.n_scored = 1;
    p.lp = lp;
    na_ppl_estimate(&p, 2, &e);
    NA_CHECK(e.count == 2);
    NA_CHECK_MSG(fabs(e.ppl - pow(2.0, 1.5)) < 1e-12, "ppl %.15g", e.ppl);
    NA_CHECK_MSG(fabs(e.ppl_err - pow(2.0, 1.5) * log(2.0) / 2) < 1e-12, "err %.15g", e.ppl_err);
    NA_CHECK(fabs(e.nll - 1.5 * log(2.0)) < 1e-15);
    na_ppl_estimate(&p, 1, &e);        /* one token: no error estimate */
    NA_CHECK(e.count == 1 && fabs(e.ppl - 2.0) < 1e-12 && e.ppl_err == 0.0);
    /* softmax(0, ln 3) = (1/4, 3/4) */
    NA_CHECK(fabs(na_sampler_logprob(logits, 2, 1) - log(0.75)) < 1e-7);
    NA_CHECK(fabs(na_sampler_logprob(logits, 2, 0) - log(0.25)) < 1e-7);
}

/* Reference log p of chunk c's scored tokens: one token per forward step
 * from position 0, the log-softmax in long double. */
static void reference_lp(na_engine_t *e, const int *chunk, double *out)
{
    int v = e->cfg.vocab_size, first = CTX / 2, p, i;
    na_lkv_t *kv = NULL;
    na_acts_t *a = NULL;

    NA_CHECK_OK(na_acts_create(e, 1, 1, &a));
    NA_CHECK_OK(na_lkv_create(&e->cfg, NA_DTYPE_F32, e->kern, e->kern->mem, &kv));
    if (a == NULL || kv == NULL)
        goto out;
    for (p = 0; p < CTX - 1; p++) {
        int tok = p == 0 ? BOS : chunk[p];
        na_step_seg_t seg = { 0, 1, p, kv };
        na_step_t s = { 1, 1, &tok, &p, &seg };
        long double max = -INFINITY, sum = 0;

        NA_CHECK_OK(na_engine_forward(e, a, &s));
        if (p < first)
            continue;
        for (i = 0; i < v; i++)
            if (a->logits[i] > max)
                max = a->logits[i];
        for (i = 0; i < v; i++)
            sum += expl((long double)a->logits[i] - max);
        out[p - first] = (double)((long double)a->logits[chunk[p + 1]] - max - logl(sum));
    }
out:
    na_lkv_destroy(kv);
    na_acts_destroy(a);
}

/* Score toks with batch max_batch on backend; lp_out[3 * 5] the log probs. */
static na_ppl_t *score(na_engine_t *e, const int *toks, int max_batch)
{
    na_ppl_opts_t po = { CTX, 0, BOS };
    na_gen_opts_t go = { max_batch, NULL, 0, NULL, NULL, NULL, NULL };
    na_ppl_t *p = NULL;
    int c;

    NA_CHECK_OK(na_ppl_create(e, toks, NTOK, &po, &p));
    if (p == NULL)
        return NULL;
    NA_CHECK_OK(na_generate(e, p->reqs, p->n_chunks, &go, NULL));
    for (c = 0; c < p->n_chunks; c++)
        NA_CHECK_MSG(na_ppl_chunk_done(p, c), "chunk %d not scored", c);
    return p;
}

static void test_model(const char *dir)
{
    na_genmodel_opts_t o;
    na_model_t *m;
    na_engine_t *e = NULL, *ec = NULL;
    na_engine_opts_t eo = { "ref", 1, NA_DTYPE_F32, na_ppl_max_rows(CTX) };
    na_ppl_t *p, *p1, *p3;
    na_ppl_est_t est, e1, e3;
    uint64_t state = 7;
    int toks[NTOK], c, k;
    double ref[3 * 5];
    long double nll = 0, nll2 = 0, ppl, err;

    na_genmodel_defaults(&o);          /* GQA: 8 heads, 4 kv heads */
    o.seq_len = 32;
    o.write_llama2c = 0;
    o.seed = 11;
    m = na_test_genmodel_open(dir, "p", &o, "gguf");
    if (m == NULL)
        return;
    na_test_prompt(&state, toks, NTOK, m->cfg.vocab_size);
    NA_CHECK_OK(na_engine_create(m, &eo, &e));
    if (e == NULL)
        goto out;

    /* chunking: request c's prompt is BOS + chunk[1..6], its forced tokens
     * chunk[7..11] */
    p = score(e, toks, 2);
    if (p == NULL)
        goto out;
    NA_CHECK(p->n_chunks == 3 && p->first == 6 && p->n_scored == 5);
    for (c = 0; c < p->n_chunks; c++) {
        const na_request_t *r = p->reqs[c];
        NA_CHECK(r->n_prompt == 7 && r->prompt[0] == BOS && r->n_out == 5);
        NA_CHECK(!memcmp(r->prompt + 1, toks + c * CTX + 1, 6 * sizeof(int)));
        NA_CHECK(!memcmp(r->out, toks + c * CTX + 7, 5 * sizeof(int)));
    }

    /* every scored token against the one-token-per-step reference */
    for (c = 0; c < 3; c++)
        reference_lp(e, toks + c * CTX, ref + c * 5);
    for (k = 0; k < 15; k++) {
        NA_CHECK_MSG(fabs(p->lp[k] - ref[k]) < 1e-5, "token %d: %.9f vs reference %.9f", k,
                     p->lp[k], ref[k]);
        nll += -(long double)ref[k];
        nll2 += (long double)ref[k] * ref[k];
    }
    nll /= 15;
    ppl = expl(nll);
    err = ppl * sqrtl((nll2 / 15 - nll * nll) / 14);
    na_ppl_estimate(p, 3, &est);
    NA_CHECK(est.count == 15);
    NA_CHECK_MSG(fabsl(est.ppl - ppl) < 1e-5 * ppl, "ppl %.9f vs reference %.9Lf", est.ppl, ppl);
    NA_CHECK_MSG(fabsl(est.ppl_err - err) < 1e-4 * err + 1e-9, "err %.9f vs reference %.9Lf",
                 est.ppl_err, err);
    /* a random model is no better than about uniform over its vocabulary */
    NA_CHECK_MSG(est.ppl > 50 && est.ppl < 5 * m->cfg.vocab_size, "ppl %.3f", est.ppl);
    na_ppl_destroy(p);

    /* cpu backend: batch 1 and batch 3 give the same bits */
    eo.backend = "cpu";
    NA_CHECK_OK(na_engine_create(m, &eo, &ec));
    if (ec != NULL) {
        ec->kern->batch_invariant = 1;
        p1 = score(ec, toks, 1);
        p3 = score(ec, toks, 3);
        if (p1 != NULL && p3 != NULL) {
            na_ppl_estimate(p1, 3, &e1);
            na_ppl_estimate(p3, 3, &e3);
            NA_CHECK(!memcmp(p1->lp, p3->lp, 15 * sizeof(double)) && e1.nll == e3.nll);
            NA_CHECK_MSG(fabs(e1.ppl - est.ppl) < 1e-3 * est.ppl, "cpu %.6f vs ref %.6f",
                         e1.ppl, est.ppl);
        }
        na_ppl_destroy(p1);
        na_ppl_destroy(p3);
    }

    /* refusals */
    {
        na_ppl_opts_t po = { CTX, 0, BOS };
        p = NULL;
        NA_CHECK(na_ppl_create(e, toks, 2 * CTX - 1, &po, &p) == NA_ERR_RANGE && p == NULL);
        NA_CHECK_MSG(strstr(na_errmsg(), "only 23 tokens") != NULL &&
                     strstr(na_errmsg(), "at least 24") != NULL, "%s", na_errmsg());
        po.n_ctx = 33;                 /* the model's context is 32 */
        NA_CHECK(na_ppl_create(e, toks, NTOK, &po, &p) == NA_ERR_RANGE && p == NULL);
        NA_CHECK_MSG(strstr(na_errmsg(), "model's context is 32") != NULL, "%s", na_errmsg());
        po.n_ctx = 3;
        NA_CHECK(na_ppl_create(e, toks, NTOK, &po, &p) == NA_ERR_RANGE && p == NULL);
        po.n_ctx = CTX;
        po.n_chunks = 2;               /* --chunks */
        po.bos = -1;                   /* no BOS: the chunks as they are */
        NA_CHECK_OK(na_ppl_create(e, toks, NTOK, &po, &p));
        NA_CHECK(p != NULL && p->n_chunks == 2);
        if (p != NULL)
            NA_CHECK(p->reqs[0]->prompt[0] == toks[0] && p->reqs[1]->prompt[0] == toks[CTX] &&
                     toks[CTX] != BOS);
        na_ppl_destroy(p);
    }
    {   /* forced tokens out of range, or set on a request that ran */
        na_sampler_cfg_t sc = { 0.0f, 1.0f, 0 };
        na_gen_opts_t go = { 1, NULL, 0, NULL, NULL, NULL, NULL };
        int force[2] = { 5, m->cfg.vocab_size };
        double lp[2];
        na_request_t *r = NULL;

        NA_CHECK_OK(na_request_create(e, 0, toks, 4, 2, &sc, &r));
        if (r != NULL) {
            NA_CHECK(na_request_force(r, force, lp) == NA_ERR_INVALID);
            NA_CHECK(strstr(na_errmsg(), "forced token 1") != NULL);
            force[1] = 6;
            NA_CHECK_OK(na_request_force(r, force, lp));
            NA_CHECK_OK(na_generate(e, &r, 1, &go, NULL));
            NA_CHECK(r->n_out == 2 && r->out[0] == 5 && r->out[1] == 6 && lp[0] < 0 && lp[1] < 0);
            NA_CHECK(na_request_force(r, force, lp) == NA_ERR_INVALID);
        }
        na_request_destroy(r);
    }
out:
    na_engine_destroy(ec);
    na_engine_destroy(e);
    na_model_destroy(m);
}

int main(void)
{
    char dir[512];

    test_arithmetic();
    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    test_model(dir);
    na_test_rmtree(dir);
    return na_test_finish();
}
