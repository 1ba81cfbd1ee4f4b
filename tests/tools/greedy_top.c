/* tests/tools/greedy_top.c — greedy decoding with the monolithic engine,
 * printing each step's chosen token and its top-2 logits, for comparing the
 * numbers with another engine on the same file (scripts/llama_agree.sh: the
 * same output from llama.cpp through tests/tools/llama_greedy.c).
 * usage: na_greedy_top MODEL N_NEW ID [ID ...]
 * Prints one line per generated token: "step id logit id2 logit2" (the
 * argmax and the runner-up of the logits that chose it). KV cache f16
 * (NA_GREEDY_KV=f32 for f32) and one thread on the cpu backend
 * (NA_GREEDY_BACKEND=ref for the reference);
 * the prompt goes through one prefill step, each new token one decode step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "common/status.h"
#include "compute-node/engine.h"
#include "compute-node/kv_local.h"

static void top2(const float *l, int v, int *i1, int *i2)
{
    int i;
    *i1 = 0;
    *i2 = v > 1 ? 1 : 0;
    if (v > 1 && l[1] > l[0]) {
        *i1 = 1;
        *i2 = 0;
    }
    for (i = 2; i < v; i++) {
        if (l[i] > l[*i1]) {
            *i2 = *i1;
            *i1 = i;
        } else if (l[i] > l[*i2]) {
            *i2 = i;
        }
    }
}

int main(int argc, char **argv)
{
    const char *backend = getenv("NA_GREEDY_BACKEND"), *kvs = getenv("NA_GREEDY_KV");
    na_dtype_t kvt = kvs != NULL && strcmp(kvs, "f32") == 0 ? NA_DTYPE_F32 : NA_DTYPE_F16;
    na_engine_opts_t eo = { backend ? backend : "cpu", 1, kvt, 0 };
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_acts_t *a = NULL;
    na_kv_local_t *kv = NULL;
    int n_new, n_prompt, i, *toks, *pos, v;
    na_status_t st;

    if (argc < 4) {
        fprintf(stderr, "usage: na_greedy_top MODEL N_NEW ID [ID ...]\n");
        return 2;
    }
    n_new = atoi(argv[2]);
    n_prompt = argc - 3;
    if (n_new <= 0 || n_new > 100000) {
        fprintf(stderr, "na_greedy_top: N_NEW '%s' is not a count in 1..100000\n", argv[2]);
        return 2;
    }
    toks = calloc((size_t)(n_prompt + n_new), sizeof(int));
    pos = calloc((size_t)(n_prompt + n_new), sizeof(int));
    if (toks == NULL || pos == NULL) {
        fprintf(stderr, "na_greedy_top: out of memory\n");
        return 1;
    }
    for (i = 0; i < n_prompt; i++) {
        char *end;
        long t = strtol(argv[3 + i], &end, 10);
        if (*end != '\0' || end == argv[3 + i] || t < 0 || t > 1000000000L) {
            fprintf(stderr, "na_greedy_top: token id '%s' is not a whole number\n", argv[3 + i]);
            return 2;
        }
        toks[i] = (int)t;
    }
    for (i = 0; i < n_prompt + n_new; i++)
        pos[i] = i;
    st = na_model_open(argv[1], &m);
    if (st == NA_OK)
        st = na_engine_create(m, &eo, &e);
    if (st == NA_OK)
        st = na_acts_create(e, n_prompt, 1, &a);
    if (st == NA_OK)
        st = na_kv_local_create(&m->cfg, kvt, e->kern, e->kern->mem, &kv);
    v = st == NA_OK ? m->cfg.vocab_size : 0;
    for (i = 0; i < n_new && st == NA_OK; i++) {
        int at = i == 0 ? 0 : n_prompt + i - 1, n = i == 0 ? n_prompt : 1, i1, i2;
        na_step_seg_t seg = { 0, n, at, kv };
        na_step_t s = { n, 1, &toks[at], &pos[at], &seg };
        if (st == NA_OK)
            st = na_engine_forward(e, a, &s);
        if (st != NA_OK)
            break;
        top2(a->logits, v, &i1, &i2);
        printf("%d %d %.6f %d %.6f\n", i, i1, (double)a->logits[i1], i2, (double)a->logits[i2]);
        toks[n_prompt + i] = i1;
    }
    if (st != NA_OK)
        fprintf(stderr, "na_greedy_top: %s\n", na_errmsg());
    na_kv_local_destroy(kv);
    na_acts_destroy(a);
    na_engine_destroy(e);
    na_model_destroy(m);
    free(pos);
    free(toks);
    return st == NA_OK ? 0 : 1;
}
