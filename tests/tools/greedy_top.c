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
#include "compute-node/kv_local.h"

/* n floats of p into DIR/NAME-L.f32. */
static int dump(const char *dir, const char *name, int l, const float *p, size_t n)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s-%d.f32", dir, name, l);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, sizeof(float), n, f) != n) {
        fprintf(stderr, "na_greedy_top: cannot write %s\n", path);
        if (f != NULL)
            fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* na_engine_forward's steps one by one, dumping each layer's attention
 * output and residual stream into dir (NA_GREEDY_TRACE). */
static na_status_t forward_traced(na_engine_t *e, na_acts_t *a, const na_step_t *s,
                                  const char *dir)
{
    const na_step_seg_t *g = &s->seg[0];
    size_t n = (size_t)s->n_rows;
    na_status_t st = na_step_check(e, s);
    int l;

    if (st == NA_OK)
        st = na_lkv_reserve(g->kv, g->pos0 + g->n_tok);
    if (st == NA_OK)
        st = na_acts_reserve(a, e, s->n_rows, s->n_seg);
    if (st == NA_OK)
        st = na_slice_embed(e, a, s);
    for (l = 0; l < e->cfg.n_layers && st == NA_OK; l++) {
        st = na_slice_pre_attn(e, a, s, l);
        if (st == NA_OK)
            st = na_engine_attn_local(e, a, s, l);
        if (st == NA_OK)
            st = na_acts_to_host(e, a, NA_ACT(NA_ACT_ATT));
        if (st == NA_OK && dump(dir, "att", l, a->att, n * (size_t)e->q_dim) != 0)
            return na_err(NA_ERR_IO, "na_greedy_top: trace dump failed");
        if (st == NA_OK)
            st = na_slice_post_attn(e, a, s, l);
        if (st == NA_OK)
            st = na_acts_to_host(e, a, NA_ACT(NA_ACT_X));
        if (st == NA_OK && dump(dir, "out", l, a->x, n * (size_t)e->cfg.dim) != 0)
            return na_err(NA_ERR_IO, "na_greedy_top: trace dump failed");
    }
    if (st == NA_OK)
        st = na_slice_final(e, a, s);
    if (st == NA_OK)
        st = na_acts_to_host(e, a, NA_ACT(NA_ACT_LOGITS));
    if (st == NA_OK)
        na_lkv_commit(g->kv, g->pos0 + g->n_tok);
    return st;
}

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
    const char *force = getenv("NA_GREEDY_FORCE"), *lpath = getenv("NA_GREEDY_LOGITS");
    const char *trace = getenv("NA_GREEDY_TRACE"), *tdir = NULL;
    int tstep = -1, n_forced = 0, *forced = NULL;
    FILE *lf = NULL;
    na_dtype_t kvt = kvs != NULL && strcmp(kvs, "f32") == 0 ? NA_DTYPE_F32 : NA_DTYPE_F16;
    na_engine_opts_t eo = { backend ? backend : "cpu", 1, kvt, 0 };
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_acts_t *a = NULL;
    na_lkv_t *kv = NULL;
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
    if (trace != NULL) {
        tstep = atoi(trace);
        tdir = strchr(trace, ':');
        if (tdir == NULL || tstep < 0) {
            fprintf(stderr, "na_greedy_top: NA_GREEDY_TRACE '%s' is not STEP:DIR\n", trace);
            return 2;
        }
        tdir++;
    }
    if (force != NULL) {
        FILE *f = fopen(force, "r");
        int t;
        forced = calloc((size_t)n_new, sizeof(int));
        if (f == NULL || forced == NULL) {
            fprintf(stderr, "na_greedy_top: cannot read %s\n", force);
            return 1;
        }
        while (n_forced < n_new && fscanf(f, "%d", &t) == 1)
            forced[n_forced++] = t;
        fclose(f);
    }
    if (lpath != NULL && (lf = fopen(lpath, "w")) == NULL) {
        fprintf(stderr, "na_greedy_top: cannot write %s\n", lpath);
        return 1;
    }
    st = na_model_open(argv[1], &m);
    if (st == NA_OK)
        st = na_engine_create(m, &eo, &e);
    if (st == NA_OK)
        st = na_acts_create(e, n_prompt, 1, &a);
    if (st == NA_OK)
        st = na_lkv_create(&m->cfg, kvt, e->kern, e->kern->mem, &kv);
    v = st == NA_OK ? m->cfg.vocab_size : 0;
    for (i = 0; i < n_new && st == NA_OK; i++) {
        int at = i == 0 ? 0 : n_prompt + i - 1, n = i == 0 ? n_prompt : 1, i1, i2;
        na_step_seg_t seg = { 0, n, at, kv };
        na_step_t s = { n, 1, &toks[at], &pos[at], &seg };
        if (st == NA_OK)
            st = i == tstep ? forward_traced(e, a, &s, tdir) : na_engine_forward(e, a, &s);
        if (st != NA_OK)
            break;
        top2(a->logits, v, &i1, &i2);
        if (i < n_forced && (forced[i] < 0 || forced[i] >= v)) {
            st = na_err(NA_ERR_INVALID, "forced id %d (step %d of %s) is not "
                        "in the vocabulary of %d", forced[i], i, force, v);
            break;
        }
        printf("%d %d %.6f %d %.6f", i, i1, (double)a->logits[i1], i2, (double)a->logits[i2]);
        if (i < n_forced)
            printf(" %.6f", (double)a->logits[forced[i]]);
        putchar('\n');
        if (lf != NULL) {
            int j;
            for (j = 0; j < v; j++)
                fprintf(lf, j ? " %.6f" : "%.6f", (double)a->logits[j]);
            fputc('\n', lf);
        }
        toks[n_prompt + i] = i < n_forced ? forced[i] : i1;
    }
    if (lf != NULL && fclose(lf) != 0 && st == NA_OK)
        st = na_err(NA_ERR_IO, "na_greedy_top: cannot write %s", lpath);
    free(forced);
    if (st != NA_OK)
        fprintf(stderr, "na_greedy_top: %s\n", na_errmsg());
    na_lkv_destroy(kv);
    na_acts_destroy(a);
    na_engine_destroy(e);
    na_model_destroy(m);
    free(pos);
    free(toks);
    return st == NA_OK ? 0 : 1;
}
