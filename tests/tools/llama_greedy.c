/* tests/tools/llama_greedy.c — the peer side of scripts/llama_agree.sh:
 * greedy decoding with llama.cpp's C API (llama.h), printing what
 * tests/tools/greedy_top.c prints ("step id logit id2 logit2" per new
 * token) for the same prompt ids. Not built by CMake (llama.cpp is not a
 * dependency): the script compiles it against a llama.cpp build tree.
 * usage: llama_greedy MODEL N_NEW ID [ID ...]
 * Context: 512 tokens (or prompt + N_NEW), KV cache f16 (llama.cpp's
 * default) or f32 with NA_LLAMA_KV=f32, no flash attention unless
 * NA_LLAMA_FA=1, CPU only, 1 thread; the prompt is one llama_decode, each
 * new token another. NA_LLAMA_FORCE / NA_LLAMA_LOGITS / NA_LLAMA_TRACE: as
 * tests/tools/greedy_top.c's NA_GREEDY_ ones (the trace through llama.cpp's
 * eval callback: its tensors kqv_merged_cont-L and l_out-L). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

static int trace_on;            /* the step being traced is computed */
static const char *trace_dir;

/* cb_eval: kqv_merged_cont-L and l_out-L of the traced step, raw f32, into
 * trace_dir as att-L.f32 / out-L.f32 (greedy_top.c's names). */
static bool trace_cb(struct ggml_tensor *t, bool ask, void *user)
{
    const char *name = NULL;
    int l;
    (void)user;
    if (strncmp(t->name, "kqv_merged_cont-", 16) == 0)
        name = "att";
    else if (strncmp(t->name, "l_out-", 6) == 0)
        name = "out";
    if (ask)
        return name != NULL;
    if (trace_on && name != NULL && t->type == GGML_TYPE_F32 && ggml_is_contiguous(t)) {
        char path[4096];
        size_t nb = ggml_nbytes(t);
        void *buf = malloc(nb);
        FILE *f;
        l = atoi(strchr(t->name, '-') + 1);
        snprintf(path, sizeof(path), "%s/%s-%d.f32", trace_dir, name, l);
        f = fopen(path, "wb");
        if (buf != NULL && f != NULL) {
            ggml_backend_tensor_get(t, buf, 0, nb);
            fwrite(buf, 1, nb, f);
        }
        if (f != NULL)
            fclose(f);
        free(buf);
    }
    return true;
}

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

int main(int argc, char **argv)
{
    struct llama_model_params mp;
    struct llama_context_params cp;
    struct llama_model *model;
    struct llama_context *ctx;
    const struct llama_vocab *vocab;
    llama_token *toks;
    int n_new, n_prompt, i, v, tstep = -1, n_forced = 0;
    const char *force = getenv("NA_LLAMA_FORCE"), *lpath = getenv("NA_LLAMA_LOGITS");
    const char *trace = getenv("NA_LLAMA_TRACE");
    llama_token *forced = NULL;
    FILE *lf = NULL;

    if (argc < 4) {
        fprintf(stderr, "usage: llama_greedy MODEL N_NEW ID [ID ...]\n");
        return 2;
    }
    n_new = atoi(argv[2]);
    n_prompt = argc - 3;
    if (n_new <= 0 || n_new > 100000)
        return 2;
    toks = calloc((size_t)(n_prompt + n_new), sizeof(*toks));
    if (toks == NULL)
        return 1;
    for (i = 0; i < n_prompt; i++)
        toks[i] = (llama_token)atoi(argv[3 + i]);
    if (trace != NULL) {
        tstep = atoi(trace);
        trace_dir = strchr(trace, ':');
        if (trace_dir == NULL || tstep < 0) {
            fprintf(stderr, "llama_greedy: NA_LLAMA_TRACE '%s' is not STEP:DIR\n", trace);
            return 2;
        }
        trace_dir++;
    }
    if (force != NULL) {
        FILE *f = fopen(force, "r");
        int t;
        forced = calloc((size_t)n_new, sizeof(*forced));
        if (f == NULL || forced == NULL) {
            fprintf(stderr, "llama_greedy: cannot read %s\n", force);
            return 1;
        }
        while (n_forced < n_new && fscanf(f, "%d", &t) == 1)
            forced[n_forced++] = (llama_token)t;
        fclose(f);
    }
    if (lpath != NULL && (lf = fopen(lpath, "w")) == NULL) {
        fprintf(stderr, "llama_greedy: cannot write %s\n", lpath);
        return 1;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) {
        fprintf(stderr, "llama_greedy: cannot load %s\n", argv[1]);
        return 1;
    }
    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_new > 512 ? n_prompt + n_new : 512);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    {
        const char *kv = getenv("NA_LLAMA_KV"), *fa = getenv("NA_LLAMA_FA");
        if (kv != NULL && strcmp(kv, "f32") == 0)
            cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn = fa != NULL && strcmp(fa, "1") == 0;
    }
    if (trace != NULL) {
        cp.cb_eval = trace_cb;
        cp.cb_eval_user_data = NULL;
    }
    ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "llama_greedy: cannot create a context\n");
        return 1;
    }
    vocab = llama_model_get_vocab(model);
    v = llama_vocab_n_tokens(vocab);
    for (i = 0; i < n_new; i++) {
        int at = i == 0 ? 0 : n_prompt + i - 1, n = i == 0 ? n_prompt : 1, j, i1 = 0, i2 = 1;
        const float *l;
        trace_on = i == tstep;
        if (llama_decode(ctx, llama_batch_get_one(&toks[at], n)) != 0) {
            fprintf(stderr, "llama_greedy: llama_decode failed at step %d\n", i);
            return 1;
        }
        l = llama_get_logits_ith(ctx, -1);
        if (l[1] > l[0]) {
            i1 = 1;
            i2 = 0;
        }
        for (j = 2; j < v; j++) {
            if (l[j] > l[i1]) {
                i2 = i1;
                i1 = j;
            } else if (l[j] > l[i2]) {
                i2 = j;
            }
        }
        printf("%d %d %.6f %d %.6f\n", i, i1, (double)l[i1], i2, (double)l[i2]);
        if (lf != NULL) {
            for (j = 0; j < v; j++)
                fprintf(lf, j ? " %.6f" : "%.6f", (double)l[j]);
            fputc('\n', lf);
        }
        toks[n_prompt + i] = i < n_forced ? forced[i] : i1;
    }
    if (lf != NULL && fclose(lf) != 0) {
        fprintf(stderr, "llama_greedy: cannot write %s\n", lpath);
        return 1;
    }
    free(forced);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(toks);
    return 0;
}
