/* tests/tools/greedy_top.c — greedy decoding with the monolithic engine,
 * printing each step's chosen token and its top-2 logits, for comparing the
 * numbers with another engine on the same file (scripts/llama_agree.sh: the
 * same output from llama.cpp through tests/tools/llama_greedy.c).
 * usage: na_greedy_top MODEL N_NEW ID [ID ...]
 * Prints one line per generated token: "step id logit id2 logit2" (the
 * argmax and the runner-up of the logits that chose it; when forced, a sixth
 * column: the logit of the forced id). KV cache f16
 * (NA_GREEDY_KV=f32 for f32) and one thread on the cpu backend
 * (NA_GREEDY_BACKEND names the backend: ref for the reference, cuda;
 * scripts/greedy_tie.sh compares two backends this way);
 * the prompt goes through one prefill step, each new token one decode step.
 * For tracing a difference (scripts/llama_agree.sh, tests/tools/llama_greedy.c
 * takes the same variables with NA_LLAMA_ for NA_GREEDY_):
 *   NA_GREEDY_FORCE=FILE   teacher forcing: the whitespace-separated ids in
 *                          FILE are fed as the new tokens (id i after step
 *                          i) instead of this engine's own argmax
 *   NA_GREEDY_LOGITS=FILE  every step's logits, one line per step
 *   NA_GREEDY_TRACE=S:DIR  at step S, per layer L the attention output
 *                          (before Wo; llama.cpp's kqv_merged_cont) into
 *                          DIR/att-L.f32 and the residual stream after the
 *                          layer (llama.cpp's l_out) into DIR/out-L.f32,
 *                          raw f32 of all the step's rows */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "common/status.h"
#include "compute-node/engine.h"
#include "tests/tools/greedy_common.h"
#include "tests/tools/greedy_engine.h"

/* The engine's trace hook: each layer's attention output and residual
 * stream, downloaded and dumped into run->tdir (NA_GREEDY_TRACE). */
static na_status_t trace_layer(void *ctx, na_engine_t *e, na_acts_t *a, const na_step_t *s,
                               int layer, int stage)
{
    const greedy_run_t *run = ctx;
    size_t n = (size_t)s->n_rows;
    int att = stage == NA_TRACE_ATT;
    na_status_t st = na_acts_to_host(e, a, NA_ACT(att ? NA_ACT_ATT : NA_ACT_X));

    if (st == NA_OK &&
        greedy_dump(run, att ? "att" : "out", layer, att ? a->att : a->x,
                    sizeof(float) * n * (size_t)(att ? e->q_dim : e->cfg.dim)) != 0)
        st = na_err(NA_ERR_IO, "na_greedy_top: trace dump failed");
    return st;
}

int main(int argc, char **argv)
{
    const char *backend = getenv("NA_GREEDY_BACKEND"), *kvs = getenv("NA_GREEDY_KV");
    na_dtype_t kvt = kvs != NULL && strcmp(kvs, "f32") == 0 ? NA_DTYPE_F32 : NA_DTYPE_F16;
    na_engine_opts_t eo = { backend ? backend : "cpu", 1, kvt, 0 };
    greedy_run_t g;
    greedy_eng_t ge;
    na_model_t *m = NULL;
    int i, v, bad = 0;
    int rc = greedy_open(&g, "na_greedy_top", "NA_GREEDY", argc, argv);
    na_status_t st;

    if (rc != 0)
        return rc;
    memset(&ge, 0, sizeof(ge));
    st = na_model_open(argv[1], &m);
    if (st == NA_OK)
        st = greedy_eng_open(&ge, m, &eo, g.n_prompt, g.n_prompt + g.n_new);
    v = st == NA_OK ? m->cfg.vocab_size : 0;
    for (i = 0; i < g.n_new && st == NA_OK; i++) {
        st = greedy_eng_step(&ge, g.toks, i, i == g.tstep ? trace_layer : NULL, &g);
        if (st != NA_OK)
            break;
        if (greedy_step(&g, i, ge.a->logits, v) != 0) {   /* said why */
            bad = 1;
            break;
        }
    }
    if (st != NA_OK)
        fprintf(stderr, "na_greedy_top: %s\n", na_errmsg());
    rc = greedy_close(&g) != 0 || st != NA_OK || bad;
    greedy_eng_close(&ge);
    na_model_destroy(m);
    return rc;
}
