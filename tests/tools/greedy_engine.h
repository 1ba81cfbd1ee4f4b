/* tests/tools/greedy_engine.h — this engine stepped as na_greedy_top steps
 * it (tests/tools/greedy_top.c): one request, its KV in a local cache, the
 * prompt in one prefill step, then one decode step per token fed. The cuda
 * test's teacher-forced comparison (tests/unit/test_cuda.c) steps it the
 * same way, so that its logits are the tool's. */
#ifndef NA_GREEDY_ENGINE_H
#define NA_GREEDY_ENGINE_H

#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "common/status.h"
#include "compute-node/engine.h"
#include "compute-node/kv_local.h"

typedef struct {
    na_engine_t *e;
    na_acts_t   *a;        /* a->logits: the last step's */
    na_lkv_t    *kv;
    int         *pos;      /* [n_max]: 0, 1, 2, ... */
    int          n_prompt;
} greedy_eng_t;

static inline void greedy_eng_close(greedy_eng_t *g)
{
    na_lkv_destroy(g->kv);
    na_acts_destroy(g->a);
    na_engine_destroy(g->e);
    free(g->pos);
    memset(g, 0, sizeof(*g));
}

/* The engine of m on eo (its KV cache of eo->kv_dtype) for a prompt of
 * n_prompt ids and up to n_max ids in all: NA_OK, or the failing call's
 * status (greedy_eng_close either way). */
static inline na_status_t greedy_eng_open(greedy_eng_t *g, const na_model_t *m,
                                          const na_engine_opts_t *eo, int n_prompt, int n_max)
{
    na_status_t st = NA_OK;
    int i;

    memset(g, 0, sizeof(*g));
    g->n_prompt = n_prompt;
    g->pos = malloc((size_t)n_max * sizeof(int));
    if (g->pos == NULL)
        st = na_err(NA_ERR_NOMEM, "greedy engine: out of memory");
    for (i = 0; st == NA_OK && i < n_max; i++)
        g->pos[i] = i;
    if (st == NA_OK)
        st = na_engine_create(m, eo, &g->e);
    if (st == NA_OK)
        st = na_acts_create(g->e, n_prompt, 1, &g->a);
    if (st == NA_OK)
        st = na_lkv_create(&m->cfg, eo->kv_dtype, g->e->kern, g->e->kern->mem, &g->kv);
    return st;
}

/* Step i over toks (the prompt's ids, then the tokens fed): step 0 the
 * prompt, step i > 0 toks[n_prompt + i - 1]; its logits in g->a->logits.
 * trace, ctx: na_engine_forward_traced's (trace NULL: none). */
static inline na_status_t greedy_eng_step(greedy_eng_t *g, const int *toks, int i,
                                          na_layer_trace_fn trace, void *ctx)
{
    int at = i == 0 ? 0 : g->n_prompt + i - 1, n = i == 0 ? g->n_prompt : 1;
    na_step_seg_t seg = { 0, n, at, g->kv };
    na_step_t s = { n, 1, &toks[at], &g->pos[at], &seg };

    return na_engine_forward_traced(g->e, g->a, &s, trace, ctx);
}

#endif /* NA_GREEDY_ENGINE_H */
