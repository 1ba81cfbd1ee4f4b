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

#include "greedy_common.h"

static int trace_on;            /* the step being traced is computed */
static greedy_run_t run;

/* cb_eval: kqv_merged_cont-L and l_out-L of the traced step, raw f32, into
 * run.tdir as att-L.f32 / out-L.f32 (greedy_top.c's names). */
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
        size_t nb = ggml_nbytes(t);
        void *buf = malloc(nb);
        l = atoi(strchr(t->name, '-') + 1);
        if (buf != NULL) {
            ggml_backend_tensor_get(t, buf, 0, nb);
            greedy_dump(&run, name, l, buf, nb);
        }
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
    int n_new, n_prompt, i, v, rc = greedy_open(&run, "llama_greedy", "NA_LLAMA", argc, argv);

    if (rc != 0)
        return rc;
    n_new = run.n_new;
    n_prompt = run.n_prompt;
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
    if (run.tstep >= 0) {
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
        int at = i == 0 ? 0 : n_prompt + i - 1, n = i == 0 ? n_prompt : 1;
        trace_on = i == run.tstep;
        if (llama_decode(ctx, llama_batch_get_one(&run.toks[at], n)) != 0) {
            fprintf(stderr, "llama_greedy: llama_decode failed at step %d\n", i);
            return 1;
        }
        if (greedy_step(&run, i, llama_get_logits_ith(ctx, -1), v) != 0)
            return 1;                        /* said why */
    }
    if (greedy_close(&run) != 0)
        return 1;
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
