/* cli/cmd_perplexity.c — `nearattn perplexity`: the perplexity of a model on
 * a text file, chunked as llama.cpp's llama-perplexity chunks it
 * (compute-node/perplexity.h), run monolithic or through the offload path
 * (the storage nodes of a layout, started privately as `nearattn run` does:
 * cli/run_offload.c). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run_offload.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/perplexity.h"

#define NA_PX_DEFAULT_CTX   512
#define NA_PX_DEFAULT_BATCH 16
#define NA_PX_PROGRESS_S    2.0    /* between two progress lines on stderr */
#define NA_PX_MAX_TEXT      (1L << 30)

typedef struct {
    na_cli_engine_args_t e;     /* --model, --mode, --threads ... */
    const char *file;
    long        ctx;        /* 0: min(512, the model's context) */
    long        chunks;     /* 0: all */
    long        batch;      /* chunks scored together; 0: default */
} na_px_args_t;

/* Everything one run holds (released by na_px_cleanup). */
typedef struct {
    na_cfg_t       *cfg;
    na_model_t     *model;
    na_tokenizer_t *tok;
    na_engine_t    *engine;
    na_ppl_t       *ppl;
    char           *text;
    int            *tokens;
    char            model_path[4096];
    char            tok_path[4096];
    char            backend_buf[32];
    /* progress */
    int             n_printed;      /* chunks whose running estimate is printed */
    long            n_scored;       /* forced tokens taken so far */
    double          t0, t_last;
    int             failed;
} na_px_t;

static void na_px_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn perplexity --model F --file T [--ctx N] [--chunks N] [--threads N]\n"
        "                           [--tokenizer F] [--batch N] [--kv-dtype f16|bf16|f32]\n"
        "                           [--backend cpu|ref|cuda[:N]] [--config F\n"
        "                           [--mode offload|monolithic]\n"
        "                           [--cluster start|connect|inproc]]\n\n"
        "The perplexity of the model on the text of file T, chunked as llama.cpp's\n"
        "llama-perplexity does, so the two figures compare: the whole text is tokenized\n"
        "with BOS first, cut into chunks of N tokens (the tail is dropped), BOS is put\n"
        "first in every chunk (both only when the vocabulary asks for BOS, as llama.cpp\n"
        "does: tokenizer.ggml.add_bos_token), and only the second half of each chunk is\n"
        "scored. Prints\n"
        "the running perplexity after each chunk, \"[1]x.xxxx,[2]...\", then\n"
        "\"Final estimate: PPL = x.xxxx +/- y.yyyyy\" (stdout); progress and a summary\n"
        "with the mean negative log-likelihood go to stderr.\n\n"
        "  --model F       llama2.c checkpoint or GGUF file (default: the layout's model\n"
        "                  with --config)\n"
        "  --tokenizer F   tokenizer.bin or GGUF (default: the GGUF's own; for a\n"
        "                  checkpoint P.bin: P.tok.bin or tokenizer.bin beside it)\n"
        "  --file T        the text (required); it must tokenize to at least 2 N tokens\n"
        "  --ctx N         tokens per chunk, %d .. the model's context (default %d, or\n"
        "                  the model's context when shorter)\n"
        "  --chunks N      score at most N chunks (default: all)\n"
        "  --threads N     compute threads (default: all cores)\n"
        "  --batch N       chunks scored together (default %d; offload: at most this\n"
        "                  many per batch)\n"
        "  --kv-dtype D    KV cache element type (default f16; with --config: the\n"
        "                  layout's model.kv_dtype, in both modes)\n"
        "  --config F      a cluster layout: score through the offload path, attention\n"
        "                  on its storage nodes (started here, private to this run,\n"
        "                  as `nearattn run` does)\n"
        "  --mode M        offload (default with --config) or monolithic (the whole\n"
        "                  model in this process; the default without --config)\n"
        "  --cluster C     start (default), connect or inproc, as for `nearattn run`;\n"
        "                  the layout's X-cache is not used\n\n"
        "How: every chunk is one request; its first half (and the first scored\n"
        "position) is prefilled, then the scored tokens are fed one decode step at a\n"
        "time (teacher forcing), so offloaded scoring runs the storage nodes'\n"
        "attention and gives the same figures as monolithic.\n",
        NA_PPL_MIN_CTX, NA_PX_DEFAULT_CTX, NA_PX_DEFAULT_BATCH);
}

/* Parse argv; 0 to go on, -1 after --help, 2 after a usage error (said). */
static int na_px_parse(int argc, char **argv, na_px_args_t *a)
{
    int i;

    memset(a, 0, sizeof(*a));
    a->e.kv_dtype = NA_DTYPE_F16;
    a->e.cluster = "start";
    for (i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **sp = NULL;
        long *lp = NULL, lo = 1, hi = 0;

        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            na_px_usage(stdout);
            return -1;
        }
        if (!strcmp(f, "--file") || !strcmp(f, "-f")) sp = &a->file;
        else if (!strcmp(f, "--ctx") || !strcmp(f, "-c")) { lp = &a->ctx; hi = NA_MODEL_MAX_SEQ; }
        else if (!strcmp(f, "--chunks"))    { lp = &a->chunks; hi = 1L << 30; }
        else if (!strcmp(f, "--batch"))     { lp = &a->batch; hi = 4096; }
        else if (!na_cli_engine_flag(f)) {
            fprintf(stderr, "nearattn perplexity: %s '%s' (try 'nearattn perplexity --help')\n",
                    f[0] == '-' ? "unknown option" : "unexpected argument", f);
            return 2;
        }
        if (v == NULL) {
            fprintf(stderr, "nearattn perplexity: %s needs a value\n", f);
            return 2;
        }
        i++;
        if (sp != NULL) {
            *sp = v;
        } else if (lp != NULL) {
            if (na_cli_int("perplexity", f, v, lo, hi, lp) != NA_OK)
                return 2;
        } else if (na_cli_engine_opt("perplexity", &a->e, f, v) != 0) {
            return 2;
        }
    }
    if (a->e.mode == NULL)
        a->e.mode = a->e.config != NULL ? "offload" : "monolithic";
    /* offload or monolithic: the first two modes */
    if (na_cli_one_of("perplexity", "mode", a->e.mode, na_cli_modes, 2) != 0 ||
        na_cli_one_of("perplexity", "--cluster", a->e.cluster, na_cli_clusters, 3) != 0 ||
        (a->e.backend != NULL &&
         na_cli_one_of("perplexity", "backend", a->e.backend, na_cli_backends, 4) != 0))
        return 2;
    if (a->file == NULL) {
        fprintf(stderr, "nearattn perplexity: give the text with --file T\n");
        return 2;
    }
    if (a->e.model == NULL && a->e.config == NULL) {
        fprintf(stderr, "nearattn perplexity: give the model with --model F (or a layout "
                "with --config)\n");
        return 2;
    }
    return 0;
}

/* Read the whole text file into r->text (NUL-terminated). */
static na_status_t na_px_read_text(const char *path, na_px_t *r)
{
    struct stat sb;
    size_t got;
    FILE *f;

    f = fopen(path, "rb");
    if (f == NULL)
        return na_err(NA_ERR_IO, "cannot read text file %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return na_err(NA_ERR_IO, "text file %s: not a regular file", path);
    }
    if (sb.st_size > NA_PX_MAX_TEXT) {
        fclose(f);
        return na_err(NA_ERR_RANGE, "text file %s: %lld bytes, more than the %ld this reads",
                      path, (long long)sb.st_size, NA_PX_MAX_TEXT);
    }
    r->text = malloc((size_t)sb.st_size + 1);
    if (r->text == NULL) {
        fclose(f);
        return na_err(NA_ERR_NOMEM, "out of memory for text file %s", path);
    }
    got = fread(r->text, 1, (size_t)sb.st_size, f);
    fclose(f);
    if (got != (size_t)sb.st_size)
        return na_err(NA_ERR_IO, "text file %s: short read (%zu of %lld bytes)", path, got,
                      (long long)sb.st_size);
    r->text[got] = '\0';
    if (memchr(r->text, '\0', got) != NULL)
        return na_err(NA_ERR_INVALID, "text file %s holds a NUL byte", path);
    return NA_OK;
}

/* A chunk ended: print the running estimates of the chunks done in order. */
static void na_px_on_done(void *user, const na_request_t *q)
{
    na_px_t *r = user;
    na_ppl_est_t e;

    (void)q;
    while (r->n_printed < r->ppl->n_chunks && na_ppl_chunk_done(r->ppl, r->n_printed)) {
        r->n_printed++;
        na_ppl_estimate(r->ppl, r->n_printed, &e);
        printf("[%d]%.4f,", r->n_printed, e.ppl);
        fflush(stdout);
    }
}

/* A scored token: a progress line on stderr now and then. */
static void na_px_on_token(void *user, const na_request_t *q, int token)
{
    na_px_t *r = user;
    long total = (long)r->ppl->n_chunks * r->ppl->n_scored;
    double now = na_now_s();

    (void)q;
    (void)token;
    r->n_scored++;
    if (now - r->t_last >= NA_PX_PROGRESS_S && r->n_scored < total) {
        double el = now - r->t0;
        r->t_last = now;
        fprintf(stderr, "perplexity: %ld of %ld tokens scored, %d of %d chunks done, %.0f s, "
                "about %.0f s left\n", r->n_scored, total, r->n_printed, r->ppl->n_chunks, el,
                el * (double)(total - r->n_scored) / (double)r->n_scored);
    }
}

static void na_px_on_error(void *user, const na_request_t *q, na_status_t st, const char *why)
{
    na_px_t *r = user;
    na_cli_request_failed("perplexity", "chunk", q->id, st, why, &r->failed);
}

static void na_px_cleanup(na_px_t *r)
{
    na_ppl_destroy(r->ppl);
    na_engine_destroy(r->engine);
    na_tokenizer_destroy(r->tok);
    na_model_destroy(r->model);
    na_cfg_destroy(r->cfg);
    free(r->tokens);
    free(r->text);
}

/* Load the layout (offload), the model, the tokenizer and the text's tokens;
 * create the engine and the chunk requests. */
static na_status_t na_px_setup(na_px_args_t *a, na_px_t *r, size_t *n_tok)
{
    na_ppl_opts_t po;
    na_engine_opts_t eo;
    na_status_t st;
    size_t cap;
    int seq;

    st = na_px_read_text(a->file, r);
    if (st != NA_OK)
        return st;
    if (a->e.config != NULL) {
        st = na_cfg_load(a->e.config, &r->cfg);
        if (st != NA_OK)
            return st;
        if (!a->e.kv_dtype_given)     /* both modes: their figures compare */
            a->e.kv_dtype = (na_dtype_t)r->cfg->model.kv_dtype;
        if (!strcmp(a->e.mode, "offload") && a->e.backend == NULL)
            a->e.backend = na_cfg_local_compute_backend(r->cfg, r->backend_buf,
                                                      sizeof(r->backend_buf));
        if (a->e.model == NULL) {
            if (r->cfg->model.path == NULL)
                return na_err(NA_ERR_INVALID, "layout %s names no model.path: give --model",
                              a->e.config);
            snprintf(r->model_path, sizeof(r->model_path), "%s", r->cfg->model.path);
            if (r->cfg->model.tokenizer != NULL)
                snprintf(r->tok_path, sizeof(r->tok_path), "%s", r->cfg->model.tokenizer);
        }
    }
    if (a->e.model != NULL)
        snprintf(r->model_path, sizeof(r->model_path), "%s", a->e.model);
    if (a->e.backend == NULL)
        a->e.backend = "cpu";
    st = na_model_open(r->model_path, &r->model);
    if (st != NA_OK)
        return st;
    seq = r->model->cfg.seq_len;
    if (a->ctx == 0)
        a->ctx = seq < NA_PX_DEFAULT_CTX ? seq : NA_PX_DEFAULT_CTX;
    if (a->ctx > seq)
        return na_err(NA_ERR_RANGE, "--ctx %ld is larger than the model's context of %d tokens "
                      "(%s)", a->ctx, seq, r->model_path);
    if (a->ctx < NA_PPL_MIN_CTX)
        return na_err(NA_ERR_RANGE, "--ctx %ld is too small: a chunk needs at least %d tokens",
                      a->ctx, NA_PPL_MIN_CTX);
    st = na_cli_open_tokenizer(a->e.tokenizer, r->model, r->model_path, r->tok_path,
                               sizeof(r->tok_path), &r->tok);
    if (st != NA_OK)
        return st;
    cap = na_tokenizer_max_tokens(strlen(r->text));
    r->tokens = malloc(cap * sizeof(*r->tokens));
    if (r->tokens == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory for the tokens of %s", a->file);
    /* BOS as the file asks (llama-perplexity: llama_vocab_get_add_bos) */
    st = na_tokenizer_encode(r->tok, r->text, na_tokenizer_add_bos(r->tok), 0, r->tokens, cap,
                             n_tok);
    if (st != NA_OK)
        return na_err_prefix(st, "%s: ", a->file);
    if (*n_tok > (size_t)0x7fffffff)
        return na_err(NA_ERR_RANGE, "%s: more than 2^31 tokens", a->file);
    /* every chunk's prompt (first + 1 tokens) one prefill step, in both modes */
    eo = (na_engine_opts_t){ a->e.backend, (int)a->e.threads, a->e.kv_dtype,
                             na_ppl_max_rows((int)a->ctx) };
    st = na_engine_create(r->model, &eo, &r->engine);
    if (st != NA_OK)
        return st;
    /* na_engine_create made the kernels batch-invariant: the figures do
     * not change with --batch, nor between the modes */
    po = (na_ppl_opts_t){ (int)a->ctx, (int)a->chunks,
                         na_tokenizer_add_bos(r->tok) ? na_tokenizer_bos(r->tok) : -1 };
    st = na_ppl_create(r->engine, r->tokens, (int)*n_tok, &po, &r->ppl);
    if (st != NA_OK)
        return na_err_prefix(st, "%s: ", a->file);
    return NA_OK;
}

int na_cmd_perplexity(int argc, char **argv)
{
    na_px_args_t a;
    na_px_t r;
    na_ppl_est_t e;
    na_status_t st;
    size_t n_tok = 0;
    double t_tok, wall;
    int rc, batch;

    rc = na_px_parse(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    memset(&r, 0, sizeof(r));
    t_tok = na_now_s();
    st = na_px_setup(&a, &r, &n_tok);
    if (st != NA_OK)
        goto out_fail;
    batch = a.batch > 0 ? (int)a.batch : NA_PX_DEFAULT_BATCH;
    fprintf(stderr, "perplexity: %s: %zu tokens (%.2f s to load and tokenize); %d chunks of %ld "
            "tokens, %d scored per chunk; mode %s, backend %s, kv %s\n", a.file, n_tok,
            na_now_s() - t_tok, r.ppl->n_chunks, a.ctx, r.ppl->n_scored, a.e.mode, a.e.backend,
            na_dtype_name(a.e.kv_dtype));
    r.t0 = r.t_last = na_now_s();
    if (!strcmp(a.e.mode, "offload")) {
        na_run_offload_args_t oa;
        na_off_stats_t os;

        na_cli_catch_stop(0);              /* stop cleanly: nodes, private KV directory */
        memset(&oa, 0, sizeof(oa));
        na_cluster_opts_default(&oa.cluster);
        oa.cluster.config_path = a.e.config;
        oa.cluster.mode = a.e.cluster;
        oa.cluster.stop = &na_cli_stop;
        oa.cluster.model_path = a.e.model;
        oa.cluster.kv_dtype_given = a.e.kv_dtype_given;
        oa.max_batch = batch;
        oa.on_token = na_px_on_token;
        oa.on_done = na_px_on_done;
        oa.on_error = na_px_on_error;
        oa.user = &r;
        /* X-cache requests keep their KV here, regenerated from f16 layer
         * inputs: scoring them would measure neither the storage nodes nor
         * the model as monolithic runs it */
        oa.no_xcache = 1;
        if (r.cfg->xcache.enabled)
            fprintf(stderr, "perplexity: the layout's X-cache is not used: every chunk's KV "
                    "is on the storage nodes\n");
        st = na_run_offload(&oa, r.engine, r.ppl->reqs, r.ppl->n_chunks, &os);
        if (st != NA_OK && na_cli_stop) {
            fprintf(stderr, "nearattn perplexity: stopped by signal %d\n", (int)na_cli_stop);
            na_px_cleanup(&r);
            return 128 + (int)na_cli_stop;
        }
    } else {
        na_gen_opts_t go = { batch, NULL, 0, na_px_on_token, na_px_on_done, &r, na_px_on_error };
        st = na_generate(r.engine, r.ppl->reqs, r.ppl->n_chunks, &go, NULL);
    }
    if (st != NA_OK)
        goto out_fail;
    wall = na_now_s() - r.t0;
    printf("\n");
    if (r.failed > 0 || r.n_printed < r.ppl->n_chunks) {
        fprintf(stderr, "nearattn perplexity: %d of %d chunks were not scored: no estimate\n",
                r.ppl->n_chunks - r.n_printed, r.ppl->n_chunks);
        na_px_cleanup(&r);
        return 1;
    }
    na_ppl_estimate(r.ppl, r.ppl->n_chunks, &e);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", e.ppl, e.ppl_err);
    fflush(stdout);
    fprintf(stderr, "perplexity: %ld tokens scored in %.2f s (%.1f positions/s); mean NLL "
            "%.17g\n", e.count, wall,
            wall > 0 ? (double)r.ppl->n_chunks * (double)(r.ppl->n_ctx - 1) / wall : 0.0,
            e.nll);
    na_px_cleanup(&r);
    return 0;

out_fail:
    rc = na_cli_fail("perplexity", st);
    na_px_cleanup(&r);
    return rc;
}
