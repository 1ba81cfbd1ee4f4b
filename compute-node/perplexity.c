/* compute-node/perplexity.c — chunk requests with forced tokens and the
 * perplexity arithmetic of llama-perplexity (see perplexity.h). */
#include "compute-node/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int na_ppl_max_rows(int n_ctx)
{
    return n_ctx / 2 + 1;
}

na_status_t na_ppl_create(const na_engine_t *e, const int *tokens, int n_tokens,
                          const na_ppl_opts_t *o, na_ppl_t **p_p)
{
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 0 };   /* greedy: never used, tokens are forced */
    na_ppl_t *p;
    na_status_t st = NA_OK;
    int c, n_max, n_chunks, *prompt;
    size_t n_lp;

    if (o->n_ctx < NA_PPL_MIN_CTX || o->n_ctx > e->cfg.seq_len)
        return na_err(NA_ERR_RANGE, "a context of %d tokens is outside [%d, %d] (the model's "
                      "context is %d tokens)", o->n_ctx, NA_PPL_MIN_CTX, e->cfg.seq_len,
                      e->cfg.seq_len);
    if (n_tokens < 2 * o->n_ctx)
        return na_err(NA_ERR_RANGE, "the text tokenizes to only %d tokens: perplexity with a "
                      "context of %d tokens needs at least %d", n_tokens, o->n_ctx,
                      2 * o->n_ctx);
    n_max = n_tokens / o->n_ctx;
    n_chunks = o->n_chunks > 0 && o->n_chunks < n_max ? o->n_chunks : n_max;
    n_lp = (size_t)n_chunks * (size_t)(o->n_ctx - 1 - o->n_ctx / 2);   /* tokens scored */
    /* one block: the object, then reqs, lp and force (in falling alignment) */
    p = calloc(1, sizeof(*p) + (size_t)n_chunks * sizeof(*p->reqs) +
                  n_lp * (sizeof(*p->lp) + sizeof(*p->force)));
    prompt = malloc((size_t)(o->n_ctx / 2 + 1) * sizeof(*prompt));
    if (p == NULL || prompt == NULL) {
        free(p);
        free(prompt);
        return na_err(NA_ERR_NOMEM, "perplexity: out of memory for %d chunks of %d tokens",
                      n_chunks, o->n_ctx);
    }
    p->n_ctx = o->n_ctx;
    p->first = o->n_ctx / 2;
    p->n_scored = o->n_ctx - 1 - p->first;
    p->n_chunks = n_chunks;
    p->reqs = (na_request_t **)(p + 1);
    p->lp = (double *)(p->reqs + n_chunks);
    p->force = (int *)(p->lp + n_lp);
    for (c = 0; c < p->n_chunks && st == NA_OK; c++) {
        const int *chunk = tokens + (size_t)c * (size_t)p->n_ctx;
        int *force = p->force + (size_t)c * (size_t)p->n_scored;

        memcpy(prompt, chunk, (size_t)(p->first + 1) * sizeof(*prompt));
        if (o->bos >= 0)
            prompt[0] = o->bos;
        memcpy(force, chunk + p->first + 1, (size_t)p->n_scored * sizeof(*force));
        st = na_request_create(e, c, prompt, p->first + 1, p->n_scored, &sc, &p->reqs[c]);
        if (st == NA_OK)
            st = na_request_force(p->reqs[c], force, p->lp + (size_t)c * (size_t)p->n_scored);
        if (st != NA_OK)
            na_err_prefix(st, "chunk %d: ", c + 1);
    }
    free(prompt);
    if (st != NA_OK) {
        na_ppl_destroy(p);
        return st;
    }
    *p_p = p;
    return NA_OK;
}

void na_ppl_destroy(na_ppl_t *p)
{
    int c;

    if (p == NULL)
        return;
    for (c = 0; c < p->n_chunks; c++)
        na_request_destroy(p->reqs[c]);
    free(p);
}

int na_ppl_chunk_done(const na_ppl_t *p, int i)
{
    const na_request_t *r = p->reqs[i];
    return r->state == NA_REQ_DONE && r->finish == NA_FINISH_LENGTH &&
           r->n_out == p->n_scored;
}

void na_ppl_estimate(const na_ppl_t *p, int n, na_ppl_est_t *out)
{
    double nll = 0.0, nll2 = 0.0;
    long count = (long)n * p->n_scored, i;

    memset(out, 0, sizeof(*out));
    if (count <= 0)
        return;
    for (i = 0; i < count; i++) {
        double v = -p->lp[i];
        nll += v;
        nll2 += v * v;
    }
    /* llama-perplexity: exp(mean), and the standard error of the mean nll
     * carried to the perplexity by its derivative (ppl * err) */
    out->count = count;
    out->nll = nll / (double)count;
    out->ppl = exp(out->nll);
    nll2 = nll2 / (double)count - out->nll * out->nll;
    if (count > 1 && nll2 > 0)
        out->ppl_err = sqrt(nll2 / (double)(count - 1)) * out->ppl;
}
