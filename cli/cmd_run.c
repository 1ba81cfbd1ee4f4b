/* cli/cmd_run.c — `nearattn run`: generate text for one or more prompts.
 *
 * --mode offload (the default) starts the storage nodes of a layout
 * (cluster-configs/local.yaml unless --config) on this machine, or connects to
 * a running cluster, and runs the offload generator (cli/run_offload.c);
 * --mode monolithic runs the whole model in this process (compute-node/
 * engine + local KV); --mode kv-fetch is the FlexGen-style baseline: the same
 * cluster and generator, but each step fetches the KV to this process for
 * local attention (compute-node/attn_kvfetch.h). */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/genmodel.h"
#include "common/log.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/sampler.h"
#include "cli/run_offload.h"
#include "common/config.h"

#define NA_RUN_MAX_PROMPTS 4096

typedef struct {
    na_cli_engine_args_t e;          /* --mode, --model, --threads ... */
    const char *prompt;
    const char *prompts_file;
    long        n_new;
    double      temp;
    double      top_p;
    unsigned long long seed;
    int         seed_given;
    long        max_batch;
    long        prefill_chunk;   /* --prefill-chunk: 0 = the layout's */
    int         prefill_budget;  /* --prefill-budget: 0 the layout's, 1 tokens, 2 weighted */
    int         no_prefix_reuse;  /* --no-prefix-reuse */
    int         no_adaptive;      /* --no-adaptive-batches */
    long        ctx;             /* --ctx: the model context to use; 0 = the file's */
    int         check_weights;   /* --check-weights: refuse NaN/Inf weights at load */
} na_run_args_t;

/* Everything a run holds; released by na_run_cleanup in reverse order. */
typedef struct {
    char            tmpdir[256];     /* generated fallback model, "" if none */
    char            model_path[4096];
    char            tok_path[4096];
    na_model_t     *model;
    na_tokenizer_t *tok;
    na_engine_t    *engine;
    char          **texts;           /* [n] prompt texts (owned) */
    int            *nul_line;        /* [n] line of --prompts holding a NUL byte, or 0 */
    na_request_t  **reqs;            /* [n] */
    int             n;
    na_request_t  **live;            /* [n_live] the reqs that could be made (a
                                        too-long prompt failed already) */
    int             n_live;
    int             streaming;       /* one request: print tokens as they come */
    na_cfg_t       *cfg;             /* offload: the layout */
    char            cfg_path[4096];
    char            backend_buf[32];   /* "cuda:N" from the layout */
    int             failed;          /* requests that ended with an error */
    int             ctx_stopped;     /* requests that ended at the model context */
} na_run_t;

/* The --help text. */
static void na_run_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn run [--mode monolithic|offload|kv-fetch] [--model F] [--tokenizer F]\n"
        "                    [--prompt S | --prompts FILE] [-n N] [--temp T] [--top-p P]\n"
        "                    [--seed S] [--threads N] [--batch N] [--kv-dtype f16|bf16|f32]\n"
        "                    [--backend cpu|ref|cuda[:N]] [--config F]\n"
        "                    [--cluster start|connect|inproc]\n"
        "                    [--ctx N] [--check-weights] [--prefill-chunk N]\n"
        "                    [--prefill-budget tokens|weighted]\n\n"
        "Generate text and print it as it is produced, then a summary line (stderr):\n"
        "prompt and generated tokens, prefill and decode tokens/s; a request that\n"
        "ended because the model context was full says \"stopped at the model\n"
        "context (N tokens)\" (stderr, and counted after the summary).\n\n"
        "  --mode M        offload (default): attention on the storage nodes of the\n"
        "                  layout; monolithic: the whole model in this process;\n"
        "                  kv-fetch: KV on the storage nodes, fetched to this process\n"
        "                  every step for local attention (FlexGen-style baseline)\n"
        "  --config F      cluster layout for offload (default cluster-configs/local.yaml);\n"
        "                  its model/tokenizer are used unless --model is given (the\n"
        "                  nodes started here are sized for that model; connect refuses\n"
        "                  a model of another shape than the layout's)\n"
        "  --cluster C     start: fork the layout's storage nodes here (default), on free\n"
        "                  ports with a KV directory of this run, removed at exit;\n"
        "                  connect: use a running cluster (`nearattn launch F`);\n"
        "                  inproc: the layout's device slots inside this process\n"
        "                  (KV in a directory of this run as well)\n"
        "  --model F       llama2.c checkpoint or GGUF file (default: shared/models/\n"
        "                  stories260K.bin, else a generated random model)\n"
        "  --tokenizer F   tokenizer.bin or GGUF (default: the GGUF's own; for a\n"
        "                  checkpoint P.bin: P.tok.bin or tokenizer.bin beside it)\n"
        "  --prompt S      the prompt (default: empty, start from BOS)\n"
        "  --prompts FILE  one prompt per line, generated together as one batch; each\n"
        "                  text is printed as \"[i] ...\" when its request finishes; a\n"
        "                  prompt longer than the context or a line holding a NUL\n"
        "                  byte fails alone (\"[i] FAILED\", the reason on stderr)\n"
        "  -n N            new tokens per prompt (default 256)\n"
        "  --temp T        temperature >= 0, 0 = greedy (default 1.0)\n"
        "  --top-p P       nucleus sampling mass in (0, 1] (default 0.9)\n"
        "  --seed S        random seed (default: from the clock; printed); request i\n"
        "                  (0-based) draws from its own stream seeded by S and i,\n"
        "                  so a seed gives the same texts at any --batch and in every\n"
        "                  mode (greedy too: the kernels are batch-invariant)\n"
        "  --threads N     compute threads (default: all cores)\n"
        "  --batch N       most requests decoded together (default: all)\n"
        "  --prefill-chunk N  offload: prompt tokens a batch step takes (chunked prefill\n"
        "                  on the storage nodes; default: the layout's\n"
        "                  parallel.prefill_chunk; weighted: the most a step takes)\n"
        "  --prefill-budget B  offload: tokens (a step takes --prefill-chunk prompt\n"
        "                  tokens) or weighted (a prompt token costs 1 + position / P_eq,\n"
        "                  P_eq where its attention costs its projections and MLP;\n"
        "                  a step takes --prefill-chunk of that cost); default: the\n"
        "                  layout's parallel.prefill_weighted (true: weighted)\n"
        "  --no-prefix-reuse  offload: every prompt is prefilled whole, none reuses\n"
        "                  the KV of a prefix a storage node holds (default: the\n"
        "                  layout's kv.prefix_reuse, on; docs/prefix-reuse.md)\n"
        "  --no-adaptive-batches  offload: every batch in flight every step (default:\n"
        "                  the layout's parallel.adaptive_batches, on: one batch where\n"
        "                  that was measured faster; docs/offload.md)\n"
        "  --kv-dtype D    KV cache element type, f16, bf16 or f32 (default f16; offload: the\n"
        "                  layout's model.kv_dtype unless given, then the nodes started\n"
        "                  here use D and connect refuses a D the layout does not say)\n"
        "  --backend B     kernels: cpu (default) or ref (plain C references), or\n"
        "                  cuda / cuda:N (GPU 0 / N; builds with CUDA only; without\n"
        "                  a device it stops with \"no CUDA device: ...\"); offload:\n"
        "                  default cuda:N when the layout's compute node says\n"
        "                  device: cuda, gpu: N\n"
        "  --ctx N         model context in tokens (prompt + generated), N >= 1,\n"
        "                  instead of the model file's (llama.context_length or the\n"
        "                  checkpoint's seq_len); a warning says so, and past the\n"
        "                  file's value RoPE runs at positions it was not trained on\n"
        "  --check-weights read every weight at load and refuse a model holding a\n"
        "                  NaN or infinity (without it, a request whose logits turn\n"
        "                  non-finite fails with the reason and the others go on)\n");
}

/* run's flags parsed in na_run_parse (each takes a value), beside the
 * engine's (na_cli_engine_opt) and the strings kept as given (na_cli_str). */
static const char *const na_run_num_flags[] = {
    "-n", "--temp", "--top-p", "--seed", "--batch", "--ctx", "--prefill-chunk",
    "--prefill-budget", NULL
};

/* 1 if f is one of run's flags parsed in na_run_parse or the engine's. */
static int na_run_known_flag(const char *f)
{
    int i;
    if (na_cli_engine_flag(f))
        return 1;
    for (i = 0; na_run_num_flags[i] != NULL; i++)
        if (!strcmp(na_run_num_flags[i], f))
            return 1;
    return 0;
}

/* Parse argv into a; returns 0 to go on, -1 after printing --help, or 2
 * after printing a one-line usage error. */
static int na_run_parse(int argc, char **argv, na_run_args_t *a)
{
    const na_cli_str_t str[] = { { "--prompt", &a->prompt }, { "--prompts", &a->prompts_file } };
    int i, r;

    memset(a, 0, sizeof(*a));
    a->e.mode = "offload";
    a->e.cluster = "start";
    a->e.backend = NULL;                 /* cpu, or the layout's compute device */
    a->n_new = 256;
    a->temp = 1.0;
    a->top_p = 0.9;
    a->e.kv_dtype = NA_DTYPE_F16;
    for (i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            na_run_usage(stdout);
            return -1;
        }
        if (!strcmp(f, "--check-weights")) {     /* the flags without a value */
            a->check_weights = 1;
            continue;
        }
        if (!strcmp(f, "--no-prefix-reuse")) {
            a->no_prefix_reuse = 1;
            continue;
        }
        if (!strcmp(f, "--no-adaptive-batches")) {
            a->no_adaptive = 1;
            continue;
        }
        if (strncmp(f, "-", 1) != 0) {
            fprintf(stderr, "nearattn run: unexpected argument '%s' (try 'nearattn run --help')\n", f);
            return 2;
        }
        if ((r = na_cli_str("run", str, sizeof(str) / sizeof(str[0]), argc, argv, &i)) == 2)
            return 2;
        if (r == 1)
            continue;
        if (!na_run_known_flag(f)) {
            fprintf(stderr, "nearattn run: unknown option '%s' (try 'nearattn run --help')\n", f);
            return 2;
        }
        if (v == NULL) {
            fprintf(stderr, "nearattn run: %s needs a value\n", f);
            return 2;
        }
        i++;
        if (na_cli_engine_flag(f)) {
            if (na_cli_engine_opt("run", &a->e, f, v) != 0)
                return 2;
        } else if (!strcmp(f, "-n")) {
            if (na_cli_int("run", f, v, -2147483647L, 2147483647L, &a->n_new) != NA_OK)
                return 2;
        } else if (!strcmp(f, "--temp")) {
            if (na_cli_float("run", f, v, -1e30, 1e30, &a->temp) != NA_OK)
                return 2;
        } else if (!strcmp(f, "--top-p")) {
            if (na_cli_float("run", f, v, -1e30, 1e30, &a->top_p) != NA_OK)
                return 2;
        } else if (!strcmp(f, "--seed")) {
            char *end;
            errno = 0;
            a->seed = strtoull(v, &end, 10);
            if (errno != 0 || end == v || *end != '\0' || v[0] == '-') {
                fprintf(stderr, "nearattn run: --seed expects a whole number >= 0, got '%s'\n", v);
                return 2;
            }
            a->seed_given = 1;
        } else if (!strcmp(f, "--ctx")) {
            if (na_cli_int("run", f, v, 1, NA_MODEL_MAX_SEQ, &a->ctx) != NA_OK)
                return 2;
        } else if (!strcmp(f, "--prefill-chunk")) {
            if (na_cli_int("run", f, v, 1, NA_OFF_MAX_PREFILL_CHUNK, &a->prefill_chunk) != NA_OK)
                return 2;
        } else if (!strcmp(f, "--prefill-budget")) {
            if (strcmp(v, "tokens") != 0 && strcmp(v, "weighted") != 0) {
                fprintf(stderr, "nearattn run: --prefill-budget expects tokens or weighted, "
                        "got '%s'\n", v);
                return 2;
            }
            a->prefill_budget = !strcmp(v, "tokens") ? 1 : 2;
        } else if (!strcmp(f, "--batch")) {
            if (na_cli_int("run", f, v, 1, NA_RUN_MAX_PROMPTS, &a->max_batch) != NA_OK)
                return 2;
        } else {
            fprintf(stderr, "nearattn run: unknown option '%s' (try 'nearattn run --help')\n", f);
            return 2;
        }
    }
    if (na_cli_one_of("run", "mode", a->e.mode, na_cli_modes, 3) != 0 ||
        na_cli_one_of("run", "--cluster", a->e.cluster, na_cli_clusters, 3) != 0)
        return 2;
    if (a->n_new <= 0) {
        fprintf(stderr, "nearattn run: -n %ld is invalid: the number of new tokens must be > 0\n",
                a->n_new);
        return 2;
    }
    if (!(a->temp >= 0.0)) {
        fprintf(stderr, "nearattn run: --temp %g is invalid: temperature must be >= 0\n", a->temp);
        return 2;
    }
    if (!(a->top_p > 0.0 && a->top_p <= 1.0)) {
        fprintf(stderr, "nearattn run: --top-p %g is invalid: it must be in (0, 1]\n", a->top_p);
        return 2;
    }
    if (a->prompt != NULL && a->prompts_file != NULL) {
        fprintf(stderr, "nearattn run: give either --prompt or --prompts, not both\n");
        return 2;
    }
    if (a->e.backend != NULL &&
        na_cli_one_of("run", "backend", a->e.backend, na_cli_backends, 4) != 0)
        return 2;
    return 0;
}

/* 1 if path can be opened for reading. */
static int na_run_readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* Choose model and tokenizer paths: the flags, else shared stories260K, else
 * a small generated model in a temporary directory (with a warning). */
static na_status_t na_run_pick_model(const na_run_args_t *a, na_run_t *r)
{
    const char *shared = na_cli_shared_dir();
    na_genmodel_opts_t go;
    const char *tmp;
    na_status_t st;

    if (a->e.model != NULL) {
        snprintf(r->model_path, sizeof(r->model_path), "%s", a->e.model);
        return NA_OK;
    }
    if (r->cfg != NULL && r->cfg->model.path != NULL) {
        snprintf(r->model_path, sizeof(r->model_path), "%s", r->cfg->model.path);
        if (r->cfg->model.tokenizer != NULL)
            snprintf(r->tok_path, sizeof(r->tok_path), "%s", r->cfg->model.tokenizer);
        return NA_OK;
    }
    snprintf(r->model_path, sizeof(r->model_path), "%s/models/stories260K.bin", shared);
    snprintf(r->tok_path, sizeof(r->tok_path), "%s/models/tok512.bin", shared);
    if (na_run_readable(r->model_path) && na_run_readable(r->tok_path))
        return NA_OK;

    tmp = getenv("TMPDIR");
    snprintf(r->tmpdir, sizeof(r->tmpdir), "%s/nearattn-run-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(r->tmpdir) == NULL) {
        st = na_err(NA_ERR_IO, "mkdtemp(%s): %s", r->tmpdir, strerror(errno));
        r->tmpdir[0] = '\0';
        return st;
    }
    na_log_warn("no --model given and %s/models/stories260K.bin is absent: generating a "
                "random-weight model; its text is meaningless", shared);
    na_genmodel_defaults(&go);
    go.write_gguf = 0;
    snprintf(r->model_path, sizeof(r->model_path), "%s/model", r->tmpdir);
    st = na_genmodel_write(r->model_path, &go);
    if (st != NA_OK)
        return st;
    snprintf(r->model_path, sizeof(r->model_path), "%s/model.bin", r->tmpdir);
    snprintf(r->tok_path, sizeof(r->tok_path), "%s/model.tok.bin", r->tmpdir);
    return NA_OK;
}

/* Collect prompt texts: --prompt, the lines of --prompts, or one empty prompt. */
static na_status_t na_run_read_prompts(const na_run_args_t *a, na_run_t *r)
{
    FILE *f;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    int line_no = 0;
    na_status_t st = NA_OK;

    r->texts = calloc(NA_RUN_MAX_PROMPTS, sizeof(*r->texts));
    r->nul_line = calloc(NA_RUN_MAX_PROMPTS, sizeof(*r->nul_line));
    if (r->texts == NULL || r->nul_line == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    if (a->prompts_file == NULL) {
        r->texts[0] = strdup(a->prompt != NULL ? a->prompt : "");
        if (r->texts[0] == NULL)
            return na_err(NA_ERR_NOMEM, "out of memory");
        r->n = 1;
        return NA_OK;
    }
    f = fopen(a->prompts_file, "r");
    if (f == NULL)
        return na_err(NA_ERR_IO, "cannot read prompts file %s: %s", a->prompts_file,
                      strerror(errno));
    while ((got = getline(&line, &line_cap, f)) > 0) {
        size_t len = (size_t)got;
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;                      /* blank lines separate nothing */
        if (r->n == NA_RUN_MAX_PROMPTS) {
            st = na_err(NA_ERR_RANGE, "%s: more than %d prompts", a->prompts_file,
                        NA_RUN_MAX_PROMPTS);
            goto out_free_line;
        }
        if (memchr(line, '\0', len) != NULL)
            r->nul_line[r->n] = line_no;   /* refused with its request */
        r->texts[r->n] = strdup(line);
        if (r->texts[r->n] == NULL) {
            st = na_err(NA_ERR_NOMEM, "out of memory");
            goto out_free_line;
        }
        r->n++;
    }
    if (ferror(f))
        st = na_err(NA_ERR_IO, "reading prompts file %s failed", a->prompts_file);
    else if (r->n == 0)
        st = na_err(NA_ERR_INVALID, "prompts file %s holds no prompt", a->prompts_file);
out_free_line:
    free(line);
    fclose(f);
    return st;
}

/* Encode every prompt (BOS first when the tokenizer asks) and create its request. */
static na_status_t na_run_make_requests(const na_run_args_t *a, na_run_t *r)
{
    na_sampler_cfg_t sc;
    na_status_t st;
    int i;

    r->reqs = calloc((size_t)r->n, sizeof(*r->reqs));
    if (r->reqs == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    for (i = 0; i < r->n; i++) {
        size_t cap = na_tokenizer_max_tokens(strlen(r->texts[i])), n_tok;
        int *toks = malloc(cap * sizeof(int));
        if (toks == NULL)
            return na_err(NA_ERR_NOMEM, "out of memory");
        if (r->nul_line != NULL && r->nul_line[i] > 0)
            st = na_err(NA_ERR_INVALID, "%s:%d: the prompt holds a NUL byte", a->prompts_file,
                        r->nul_line[i]);
        else
            st = na_tokenizer_encode(r->tok, r->texts[i], na_tokenizer_add_bos(r->tok), 0, toks,
                                     cap, &n_tok);
        if (st == NA_OK) {
            sc.temperature = (float)a->temp;
            sc.top_p = na_sampler_top_p(a->top_p);
            sc.seed = na_sampler_request_seed(a->seed, (uint64_t)i);
            st = na_request_create(r->engine, i, toks, (int)n_tok, (int)a->n_new, &sc,
                                   &r->reqs[i]);
            if (st != NA_OK && r->n > 1)
                na_err_prefix(st, "prompt %d: ", i + 1);
        }
        free(toks);
        if ((st == NA_ERR_RANGE && r->n > 1) || (r->nul_line != NULL && r->nul_line[i] > 0)) {
            /* one prompt too long for the context, or holding a NUL byte: that
             * request fails, the job goes on */
            fprintf(stderr, "nearattn run: %s\n", na_errmsg());
            printf("[%d] FAILED (see the error above): %s\n", i + 1, r->texts[i]);
            r->failed++;
            continue;
        }
        if (st != NA_OK)
            return st;
    }
    r->live = calloc((size_t)r->n, sizeof(*r->live));
    if (r->live == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    for (i = 0; i < r->n; i++)
        if (r->reqs[i] != NULL)
            r->live[r->n_live++] = r->reqs[i];
    return NA_OK;
}

/* Print a decoded piece; a lone byte that is a control character (other
 * than whitespace) is dropped so random byte tokens cannot drive the
 * terminal (as llama2.c's safe_printf). */
static void na_run_put_piece(const char *piece, size_t len)
{
    unsigned char c = len == 1 ? (unsigned char)piece[0] : 0;
    if (len == 1 && c < 0x80 && !isprint(c) && !isspace(c))
        return;
    fwrite(piece, 1, len, stdout);
}

/* Streaming: print each new token of the single request at once. */
static void na_run_on_token(void *user, const na_request_t *q, int token)
{
    na_run_t *r = user;
    int prev = q->n_out >= 2 ? q->out[q->n_out - 2] : q->prompt[q->n_prompt - 1];
    size_t len;
    const char *piece;

    if (!r->streaming)
        return;
    if (q->n_out == 1)
        fputs(r->texts[q->id], stdout);    /* the prompt comes with its text only */
    piece = na_tokenizer_decode_len(r->tok, prev, token, &len);
    na_run_put_piece(piece, len);
    fflush(stdout);
}

/* A request ended: end the streamed line, or print the whole text of one of
 * several requests as "[i] prompt + generated". */
static void na_run_on_done(void *user, const na_request_t *q)
{
    na_run_t *r = user;
    int i, prev;

    if (q->finish == NA_FINISH_CONTEXT) {
        r->ctx_stopped++;
        fprintf(stderr, "nearattn run: request %d stopped at the model context (%d tokens)\n",
                q->id + 1, r->model->cfg.seq_len);
    }
    if (r->streaming) {
        if (q->n_out == 0 && q->finish != NA_FINISH_NONE)
            fputs(r->texts[q->id], stdout);    /* ended at once: the prompt alone */
        if (q->n_out > 0 || q->finish != NA_FINISH_NONE)
            fputc('\n', stdout);               /* a request failing first prints nothing */
        fflush(stdout);
        return;
    }
    if (q->state == NA_REQ_DONE && q->finish == NA_FINISH_NONE) {
        printf("[%d] FAILED (see the error above): %s\n", q->id + 1, r->texts[q->id]);
        fflush(stdout);
        return;
    }
    printf("[%d] %s", q->id + 1, r->texts[q->id]);
    prev = q->prompt[q->n_prompt - 1];
    for (i = 0; i < q->n_out; i++) {
        size_t len;
        const char *piece = na_tokenizer_decode_len(r->tok, prev, q->out[i], &len);
        na_run_put_piece(piece, len);
        prev = q->out[i];
    }
    fputc('\n', stdout);
    fflush(stdout);
}

/* After the summary: how many requests the model context stopped. */
static void na_run_say_context(const na_run_t *r)
{
    if (r->ctx_stopped > 0)
        fprintf(stderr, "%d request(s) stopped at the model context (%d tokens)\n",
                r->ctx_stopped, r->model->cfg.seq_len);
}

/* A request ended with an error; say which and why. */
static void na_run_on_error(void *user, const na_request_t *q, na_status_t st, const char *why)
{
    na_run_t *r = user;
    na_cli_request_failed("run", "request", q->id, st, why, &r->failed);
}

/* Release everything na_cmd_run acquired (any subset), in reverse order, and
 * remove a generated fallback model. Never fails. */
static void na_run_cleanup(na_run_t *r)
{
    int i;

    if (r->reqs != NULL)
        for (i = 0; i < r->n; i++)
            na_request_destroy(r->reqs[i]);
    free(r->reqs);
    free(r->live);
    if (r->texts != NULL)
        for (i = 0; i < r->n; i++)
            free(r->texts[i]);
    free(r->texts);
    free(r->nul_line);
    na_engine_destroy(r->engine);
    na_cfg_destroy(r->cfg);
    na_tokenizer_destroy(r->tok);
    na_model_destroy(r->model);
    if (r->tmpdir[0] != '\0') {
        char path[sizeof(r->tmpdir) + 32];
        snprintf(path, sizeof(path), "%s/model.bin", r->tmpdir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/model.tok.bin", r->tmpdir);
        unlink(path);
        rmdir(r->tmpdir);
    }
}

/* `nearattn run`: 0 when every request completed, 1 on a runtime error
 * (model, tokenizer, prompt, memory), 2 on a usage error; one stderr line
 * for each error. */
int na_cmd_run(int argc, char **argv)
{
    na_run_args_t a;
    na_run_t r;
    na_engine_opts_t eo;
    na_gen_opts_t go;
    na_gen_stats_t gs;
    na_status_t st;
    int rc, stop[8], n_stop;

    rc = na_run_parse(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (!a.seed_given)
        a.seed = (unsigned long long)time(NULL);
    memset(&r, 0, sizeof(r));

    st = na_run_read_prompts(&a, &r);       /* cheap checks first */
    if (st != NA_OK)
        goto out_fail;
    if (strcmp(a.e.mode, "monolithic") != 0) {
        if (a.e.config != NULL)
            snprintf(r.cfg_path, sizeof(r.cfg_path), "%s", a.e.config);
        else
            snprintf(r.cfg_path, sizeof(r.cfg_path), "%s/cluster-configs/local.yaml",
                     na_cli_source_dir());
        st = na_cfg_load(r.cfg_path, &r.cfg);
        if (st != NA_OK)
            goto out_fail;
        na_log_debug("run: layout %s", r.cfg_path);
        if (!a.e.kv_dtype_given)          /* the nodes' KV dtype, for the prompt's KV too */
            a.e.kv_dtype = (na_dtype_t)r.cfg->model.kv_dtype;
        if (a.e.backend == NULL)          /* the layout's compute device */
            a.e.backend = na_cfg_local_compute_backend(r.cfg, r.backend_buf,
                                                     sizeof(r.backend_buf));
    }
    if (a.e.backend == NULL)
        a.e.backend = "cpu";
    st = na_run_pick_model(&a, &r);
    if (st != NA_OK)
        goto out_fail;
    st = na_model_open(r.model_path, &r.model);
    if (st != NA_OK)
        goto out_fail;
    if (a.check_weights) {
        st = na_model_check_finite(r.model);
        if (st != NA_OK)
            goto out_fail;
    }
    if (a.ctx > 0 && a.ctx != r.model->cfg.seq_len) {
        fprintf(stderr, "nearattn run: warning: --ctx %ld overrides the model context of %d "
                "tokens%s\n", a.ctx, r.model->cfg.seq_len,
                a.ctx > r.model->cfg.seq_len ?
                " (RoPE was trained on the shorter context: the text past it may degrade)" : "");
        r.model->cfg.seq_len = (int)a.ctx;
    }
    st = na_cli_open_tokenizer(a.e.tokenizer, r.model, r.model_path, r.tok_path,
                               sizeof(r.tok_path), &r.tok);
    if (st != NA_OK)
        goto out_fail;
    eo = (na_engine_opts_t){ a.e.backend, (int)a.e.threads, a.e.kv_dtype, 0 };
    st = na_engine_create(r.model, &eo, &r.engine);
    if (st != NA_OK)
        goto out_fail;
    st = na_run_make_requests(&a, &r);
    if (st != NA_OK)
        goto out_fail;

    if (r.n_live == 0) {                    /* every request was refused above */
        fprintf(stderr, "%d request(s) failed\n", r.failed);
        na_run_cleanup(&r);
        return 1;
    }
    r.streaming = r.n == 1;
    n_stop = na_tokenizer_stop_ids(r.tok, stop, 8);
    if (strcmp(a.e.mode, "monolithic") != 0) {
        na_run_offload_args_t oa;
        na_off_stats_t os;
        /* offload: SIGINT / SIGTERM stop cleanly (nodes, private KV directory) */
        na_cli_catch_stop(0);
        memset(&oa, 0, sizeof(oa));
        na_cluster_opts_default(&oa.cluster);
        oa.cluster.config_path = r.cfg_path;
        oa.cluster.mode = a.e.cluster;
        oa.cluster.kvfetch = !strcmp(a.e.mode, "kv-fetch");
        oa.cluster.stop = &na_cli_stop;
        oa.cluster.model_path = a.e.model;
        oa.cluster.kv_dtype_given = a.e.kv_dtype_given;
        oa.max_batch = (int)a.max_batch;
        oa.prefill_chunk = (int)a.prefill_chunk;
        oa.prefill_budget = a.prefill_budget;
        oa.no_prefix_reuse = a.no_prefix_reuse;
        oa.no_adaptive = a.no_adaptive;
        oa.stop_ids = stop;
        oa.n_stop = n_stop;
        oa.on_token = na_run_on_token;
        oa.on_done = na_run_on_done;
        oa.on_error = na_run_on_error;
        oa.user = &r;
        oa.failed_before = r.failed;
        st = na_run_offload(&oa, r.engine, r.live, r.n_live, &os);
        if (st != NA_OK && na_cli_stop) {
            fprintf(stderr, "nearattn run: stopped by signal %d\n", (int)na_cli_stop);
            na_run_cleanup(&r);
            return 128 + (int)na_cli_stop;
        }
        if (st != NA_OK)
            goto out_fail;
        na_run_say_context(&r);
        rc = r.failed > 0 ? 1 : 0;
        na_run_cleanup(&r);
        return rc;
    }
    go = (na_gen_opts_t){ (int)a.max_batch, stop, n_stop, na_run_on_token, na_run_on_done, &r,
                          na_run_on_error };
    st = na_generate(r.engine, r.live, r.n_live, &go, &gs);
    if (st != NA_OK)
        goto out_fail;

    fprintf(stderr,
            "prompt tokens %ld, generated tokens %ld, prefill %.1f tok/s, decode %.1f tok/s "
            "(%d request%s, backend %s, kv %s, seed %llu)\n",
            gs.prompt_tokens, gs.gen_tokens,
            gs.prefill_s > 0 ? (double)gs.prompt_tokens / gs.prefill_s : 0.0,
            gs.decode_s > 0 ? (double)gs.decode_tokens / gs.decode_s : 0.0,
            r.n, r.n == 1 ? "" : "s", a.e.backend, na_dtype_name(a.e.kv_dtype), a.seed);
    na_run_say_context(&r);
    if (r.failed > 0)
        fprintf(stderr, "%d request(s) failed\n", r.failed);
    rc = r.failed > 0 ? 1 : 0;
    na_run_cleanup(&r);
    return rc;

out_fail:
    rc = na_cli_fail("run", st);
    na_run_cleanup(&r);
    return rc;
}
